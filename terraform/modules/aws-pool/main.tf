# One GPU pool in one region: the launch template fleetctl's EC2 Fleet
# launches name (providers/aws.py), with the node image, network, instance
# profile, and user data that starts node-watch. fleetctl chooses instance
# type, zone (subnet) and market per launch; none of that is fixed here.

locals {
  name = "fleetctl-${var.cluster}-${var.pool}"
  tags = merge(var.tags, { "fleetctl:cluster" = var.cluster, "fleetctl:pool" = var.pool })
}

resource "aws_placement_group" "gang" {
  count = var.gang_placement_group ? 1 : 0

  region   = var.region
  name     = local.name
  strategy = "cluster"
  tags     = local.tags
}

resource "aws_launch_template" "pool" {
  region                 = var.region
  name                   = local.name
  description            = "fleetctl ${var.cluster}: GPU pool ${var.pool}"
  image_id               = var.image_id
  vpc_security_group_ids = var.security_group_ids
  update_default_version = true
  user_data = base64encode(templatefile("${path.module}/user-data.sh.tftpl", {
    controller_url = var.controller_url
    token_file     = var.notice_token_file
  }))

  iam_instance_profile {
    name = var.instance_profile_name
  }

  # IMDSv2 only; node-watch reads spot/instance-action and rebalance notices there.
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 2
  }

  # No placement here: a cluster placement group holds one zone, and most launches are single
  # nodes in any zone. fleetctl names the group per launch, for a gang's nodes only
  # (providers/aws.py fleet_request).

  tag_specifications {
    resource_type = "instance"
    tags          = local.tags
  }

  tag_specifications {
    resource_type = "volume"
    tags          = local.tags
  }

  tags = local.tags
}
