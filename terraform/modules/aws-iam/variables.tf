variable "cluster" {
  description = "The fleetctl cluster name (policy infrastructure.cluster); names and tags everything."
  type        = string
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
