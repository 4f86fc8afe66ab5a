variable "cluster" {
  description = "The fleetctl cluster name (policy infrastructure.cluster)."
  type        = string
}

variable "pool" {
  description = "The GPU pool: a normalised GPU model as a name (a100-80gb, l4, ...)."
  type        = string
}

variable "region" {
  description = "The region of this pool's launch template."
  type        = string
}

variable "image_id" {
  description = "The AMI GPU nodes boot (NVIDIA drivers and fleetctl installed)."
  type        = string
}

variable "instance_profile_name" {
  description = "The instance profile of GPU nodes (the aws-iam module's node_instance_profile_name)."
  type        = string
}

variable "security_group_ids" {
  description = "Security groups of GPU nodes."
  type        = list(string)
  default     = []
}

variable "controller_url" {
  description = "Where node-watch posts reclaim notices (the daemon's --notice-addr)."
  type        = string
}

variable "notice_token_file" {
  description = "Path on the node of the bearer token node-watch sends; provisioned with the image or by your secrets tooling, never in Terraform state."
  type        = string
  default     = "/etc/fleetctl/notice-token"
}

variable "gang_placement_group" {
  description = "Create a cluster placement group for the pool; fleetctl launches a gang's nodes into it (one zone), other launches not."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Extra tags for the template and the instances launched from it."
  type        = map(string)
  default     = {}
}
