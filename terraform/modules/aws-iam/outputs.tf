output "node_instance_profile_name" {
  description = "The instance profile the pool launch templates give GPU nodes."
  value       = aws_iam_instance_profile.node.name
}

output "controller_role_arn" {
  value = aws_iam_role.controller.arn
}

output "controller_policy_json" {
  description = "The least-privilege policy of the controller: exactly the calls providers/aws.py makes."
  value       = local.controller_policy
}
