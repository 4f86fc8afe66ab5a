variable "cluster" {
  description = "The fleetctl cluster name (policy infrastructure.cluster); names and tags everything."
  type        = string
}

variable "region" {
  description = "The region whose EC2 interruption events this queue receives (EventBridge rules are regional)."
  type        = string
}

variable "tags" {
  description = "Extra tags for every resource."
  type        = map(string)
  default     = {}
}
