variable "cluster" {
  description = "The fleetctl cluster name (policy infrastructure.cluster)."
  type        = string
}

variable "pool" {
  description = "The GPU pool: a normalised GPU model as a name (a100-80gb, t4, ...)."
  type        = string
}

variable "resource_group_name" {
  description = "The resource group of the scale set and of the VMs fleetctl puts in it."
  type        = string
}

variable "location" {
  description = "The region of this pool."
  type        = string
}

variable "vm_size" {
  description = "The scale set's size; fleetctl sets the size of each VM it creates."
  type        = string
}

variable "subnet_id" {
  description = "Subnet of the GPU nodes."
  type        = string
}

variable "image_id" {
  description = "Image of the GPU nodes (NVIDIA drivers and fleetctl installed): a managed image or shared gallery image id; empty: the marketplace image of image_publisher/offer/sku/version."
  type        = string
  default     = ""
}

variable "image_publisher" {
  description = "Marketplace image publisher, used when image_id is empty."
  type        = string
  default     = "Canonical"
}

variable "image_offer" {
  description = "Marketplace image offer, used when image_id is empty (default: Ubuntu 22.04 LTS)."
  type        = string
  default     = "0001-com-ubuntu-server-jammy"
}

variable "image_sku" {
  description = "Marketplace image SKU, used when image_id is empty."
  type        = string
  default     = "22_04-lts-gen2"
}

variable "image_version" {
  description = "Marketplace image version, used when image_id is empty."
  type        = string
  default     = "latest"
}

variable "admin_username" {
  description = "Admin user of the nodes (SSH key only)."
  type        = string
  default     = "fleetctl"
}

variable "admin_ssh_public_key" {
  description = "SSH public key of the admin user."
  type        = string
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

variable "zones" {
  description = "Availability zones the pool may use (empty: regional)."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Extra tags for the scale set."
  type        = map(string)
  default     = {}
}
