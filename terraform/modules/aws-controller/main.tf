# The controller's side of an AWS region: the queue EventBridge fills with EC2
# interruption events. fleetctl reads the queue (providers/aws.py) and deletes
# a message only after it handled the notice. The IAM roles are global and
# live in their own module (aws-iam), not in any region's.

locals {
  name = "fleetctl-${var.cluster}"
  tags = merge(var.tags, { "fleetctl:cluster" = var.cluster })

  # The EC2 events fleetctl subscribes to (providers/aws.py EVENT_DETAIL_TYPES).
  events = {
    spot-interruption = "EC2 Spot Instance Interruption Warning"
    rebalance         = "EC2 Instance Rebalance Recommendation"
    state-change      = "EC2 Instance State-change Notification"
  }
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
