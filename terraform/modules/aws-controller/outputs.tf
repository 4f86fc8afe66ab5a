output "queue_url" {
  description = "The interruption queue fleetctl reads."
  value       = aws_sqs_queue.interruptions.id
}

output "queue_arn" {
  value = aws_sqs_queue.interruptions.arn
}

output "node_instance_profile_name" {
  description = "The instance profile the pool launch templates give GPU nodes (null without create_iam)."
  value       = var.create_iam ? aws_iam_instance_profile.node[0].name : null
}

output "controller_role_arn" {
  value = var.create_iam ? aws_iam_role.controller[0].arn : null
}

output "controller_policy_json" {
  description = "The least-privilege policy of the controller: exactly the calls providers/aws.py makes."
  value       = local.controller_policy
}
