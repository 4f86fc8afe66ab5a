variable "cluster" {
  description = "The fleetctl cluster name (policy infrastructure.cluster); names and tags everything."
  type        = string
}

variable "region" {
  description = "The region whose EC2 interruption events this queue receives (EventBridge rules are regional)."
  type        = string
}

variable "create_iam" {
  description = "Create the controller and node IAM roles (IAM is global: do it in one region only)."
  type        = bool
  default     = true
}

variable "controller_principal" {
  description = "The AWS service that runs the controller and assumes its role (ec2.amazonaws.com, ecs-tasks.amazonaws.com, ...)."
  type        = string
  default     = "ec2.amazonaws.com"
}

variable "tags" {
  description = "Extra tags for every resource."
  type        = map(string)
  default     = {}
}
