output "queue_url" {
  description = "The interruption queue fleetctl reads."
  value       = aws_sqs_queue.interruptions.id
}

output "queue_arn" {
  value = aws_sqs_queue.interruptions.arn
}
