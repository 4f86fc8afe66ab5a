variable "cluster" {
  description = "The fleetctl cluster name (policy infrastructure.cluster)."
  type        = string
}

variable "pool" {
  description = "The GPU pool: a normalised GPU model as a name (a100-80gb, l4, ...)."
  type        = string
}

variable "project" {
  description = "The project of the template and of the VMs fleetctl launches from it."
  type        = string
}

variable "region" {
  description = "The region of this pool's instance template."
  type        = string
}

variable "machine_type" {
  description = "The template's machine type; fleetctl sets the type per launch (bulkInsert)."
  type        = string
}

variable "accelerator_type" {
  description = "GPUs to attach (N1 shapes: nvidia-tesla-t4, ...); empty for machine types with bundled GPUs (a2, a3, g2)."
  type        = string
  default     = ""
}

variable "accelerator_count" {
  description = "How many accelerator_type GPUs to attach (0 with bundled GPUs)."
  type        = number
  default     = 0
}

variable "image" {
  description = "Boot image of the GPU nodes (NVIDIA drivers and fleetctl installed)."
  type        = string
}

variable "network" {
  description = "VPC network of the GPU nodes."
  type        = string
  default     = "global/networks/default"
}

variable "subnetwork" {
  description = "Subnetwork of the GPU nodes (empty: the network's auto subnet)."
  type        = string
  default     = ""
}

variable "service_account_email" {
  description = "Service account of the GPU nodes (empty: the project's default)."
  type        = string
  default     = ""
}

variable "controller_url" {
  description = "Where node-watch posts reclaim notices (the daemon's --notice-addr)."
  type        = string
}

variable "notice_token_file" {
  description = "Path on the node of the bearer token node-watch sends; provisioned with the image, never in Terraform state."
  type        = string
  default     = "/etc/fleetctl/notice-token"
}

variable "instance_termination_action" {
  description = "What GCE does to a preempted Spot VM: DELETE or STOP."
  type        = string
  default     = "DELETE"
  validation {
    condition     = contains(["DELETE", "STOP"], var.instance_termination_action)
    error_message = "instance_termination_action must be DELETE or STOP."
  }
}

variable "labels" {
  description = "Extra labels (GCP label syntax) for the template and its VMs."
  type        = map(string)
  default     = {}
}
