output "launch_template_name" {
  description = "The name fleetctl launches from (fleetctl/naming.py launch_template_name)."
  value       = aws_launch_template.pool.name
}

output "launch_template_id" {
  value = aws_launch_template.pool.id
}

output "placement_group_name" {
  value = var.gang_placement_group ? aws_placement_group.gang[0].name : null
}
