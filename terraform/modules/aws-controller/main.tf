# The controller's side of an AWS region: the queue EventBridge fills with EC2
# interruption events, and (once) the IAM roles of the controller and the nodes.
# fleetctl reads the queue (providers/aws.py) and deletes a message only after
# it handled the notice.

locals {
  name = "fleetctl-${var.cluster}"
  tags = merge(var.tags, { "fleetctl:cluster" = var.cluster })

  # The EC2 events fleetctl subscribes to (providers/aws.py EVENT_DETAIL_TYPES).
  events = {
    spot-interruption = "EC2 Spot Instance Interruption Warning"
    rebalance         = "EC2 Instance Rebalance Recommendation"
    state-change      = "EC2 Instance State-change Notification"
  }

  # Exactly the API calls the AWS provider makes (providers/aws.py API_CALLS;
  # a test keeps the two lists equal). RunInstances, CreateTags and PassRole
  # are what CreateFleet does on the controller's behalf.
  ec2_actions = [
    "ec2:CreateFleet",
    "ec2:CreateTags",
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstances",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeSubnets",
    "ec2:RunInstances",
    "ec2:TerminateInstances",
  ]
  sqs_actions = [
    "sqs:DeleteMessage",
    "sqs:GetQueueUrl",
    "sqs:ReceiveMessage",
  ]
  iam_actions = [
    "iam:PassRole",
  ]
}

resource "aws_sqs_queue" "interruptions" {
  region                    = var.region
  name                      = "${local.name}-interruptions"
  message_retention_seconds = 300 # a reclaim notice older than 5 minutes is history
  sqs_managed_sse_enabled   = true
  tags                      = local.tags
}

resource "aws_cloudwatch_event_rule" "ec2" {
  for_each = local.events

  region        = var.region
  name          = "${local.name}-${each.key}"
  description   = "fleetctl ${var.cluster}: ${each.value} -> SQS"
  event_pattern = jsonencode({ source = ["aws.ec2"], "detail-type" = [each.value] })
  tags          = local.tags
}

resource "aws_cloudwatch_event_target" "queue" {
  for_each = local.events

  region    = var.region
  rule      = aws_cloudwatch_event_rule.ec2[each.key].name
  target_id = "fleetctl-interruptions"
  arn       = aws_sqs_queue.interruptions.arn
}

resource "aws_sqs_queue_policy" "events" {
  region    = var.region
  queue_url = aws_sqs_queue.interruptions.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "EventBridgeSendsEc2Events"
      Effect    = "Allow"
      Principal = { Service = "events.amazonaws.com" }
      Action    = "sqs:SendMessage"
      Resource  = aws_sqs_queue.interruptions.arn
      Condition = { ArnEquals = { "aws:SourceArn" = [for r in aws_cloudwatch_event_rule.ec2 : r.arn] } }
    }]
  })
}

# ---------------------------------------------------------------- IAM (global)

resource "aws_iam_role" "controller" {
  count = var.create_iam ? 1 : 0

  name = "${local.name}-controller"
  assume_role_policy = jsonencode({
    Version   = "2012-10-17"
    Statement = [{ Effect = "Allow", Principal = { Service = var.controller_principal }, Action = "sts:AssumeRole" }]
  })
  tags = local.tags
}

resource "aws_iam_role_policy" "controller" {
  count = var.create_iam ? 1 : 0

  name   = "${local.name}-controller"
  role   = aws_iam_role.controller[0].id
  policy = local.controller_policy
}

resource "aws_iam_role" "node" {
  count = var.create_iam ? 1 : 0

  name = "${local.name}-node"
  assume_role_policy = jsonencode({
    Version   = "2012-10-17"
    Statement = [{ Effect = "Allow", Principal = { Service = "ec2.amazonaws.com" }, Action = "sts:AssumeRole" }]
  })
  tags = local.tags
}

# GPU nodes need no AWS API rights: node-watch reads the instance metadata
# service and posts to the controller.
resource "aws_iam_instance_profile" "node" {
  count = var.create_iam ? 1 : 0

  name = "${local.name}-node"
  role = aws_iam_role.node[0].name
  tags = local.tags
}

locals {
  controller_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid      = "Describe"
        Effect   = "Allow"
        Action   = [for a in local.ec2_actions : a if startswith(a, "ec2:Describe")]
        Resource = "*"
      },
      {
        Sid      = "LaunchFromFleetctlTemplates"
        Effect   = "Allow"
        Action   = [for a in local.ec2_actions : a if contains(["ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateTags"], a)]
        Resource = "*"
      },
      {
        Sid       = "TerminateOnlyFleetctlInstances"
        Effect    = "Allow"
        Action    = [for a in local.ec2_actions : a if a == "ec2:TerminateInstances"]
        Resource  = "*"
        Condition = { StringEquals = { "aws:ResourceTag/fleetctl:cluster" = var.cluster } }
      },
      {
        Sid      = "PassTheNodeRole"
        Effect   = "Allow"
        Action   = local.iam_actions
        Resource = "arn:aws:iam::*:role/${local.name}-node"
      },
      {
        Sid      = "ReadInterruptionQueues"
        Effect   = "Allow"
        Action   = local.sqs_actions
        Resource = "arn:aws:sqs:*:*:${local.name}-interruptions"
      },
    ]
  })
}
