terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.0" # resources take a `region` argument from 6.0 on
    }
  }
}
