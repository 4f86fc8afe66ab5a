output "instance_template_self_link" {
  description = "The template a bulkInsert can name (sourceInstanceTemplate)."
  value       = google_compute_region_instance_template.pool.self_link
}

output "instance_template_name" {
  value = google_compute_region_instance_template.pool.name
}
