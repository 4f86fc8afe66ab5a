# The IAM roles of a fleetctl cluster: the controller's least-privilege role
# and the GPU nodes' role and instance profile. IAM is global, so fleetctl
# calls this module once, not per region: adding or removing a region never
# moves these (docs/terraform.md).

locals {
  name = "fleetctl-${var.cluster}"
  tags = merge(var.tags, { "fleetctl:cluster" = var.cluster })

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

resource "aws_iam_role" "controller" {
  name = "${local.name}-controller"
  assume_role_policy = jsonencode({
    Version   = "2012-10-17"
    Statement = [{ Effect = "Allow", Principal = { Service = var.controller_principal }, Action = "sts:AssumeRole" }]
  })
  tags = local.tags
}

resource "aws_iam_role_policy" "controller" {
  name   = "${local.name}-controller"
  role   = aws_iam_role.controller.id
  policy = local.controller_policy
}

resource "aws_iam_role" "node" {
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
  name = "${local.name}-node"
  role = aws_iam_role.node.name
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
