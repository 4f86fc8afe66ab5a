"""The GCP and Azure pool modules on their own, for real and offline: the
pure-Python schema check, then the real ``terraform`` binary (through the
schema-serving provider) validates and format-checks each module, and plans,
applies and re-plans clean a small root module that calls it with example
values, on both sides of each module's optional branch (attached GPUs or
bundled ones; an image id or the marketplace image)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.tfprovider.harness import terraform
from tests.tfprovider.schemacheck import check_module

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / "terraform" / "modules"
SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"

GCP_ROOT = """\
terraform {
  required_providers {
    google = {
      source = "hashicorp/google"
    }
  }
}

provider "google" {
  project = "ml-platform-prod"
  region  = "us-central1"
}

# bundled GPUs (g2 carries its L4s)
module "l4" {
  source                = "./gcp-pool"
  cluster               = "ml-platform"
  pool                  = "l4"
  project               = "ml-platform-prod"
  region                = "us-central1"
  machine_type          = "g2-standard-8"
  image                 = "projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11"
  network               = "global/networks/default"
  subnetwork            = "regions/us-central1/subnetworks/gpu"
  service_account_email = "fleetctl-nodes@ml-platform-prod.iam.gserviceaccount.com"
  controller_url        = "https://fleetctl.example.internal:8443/notices"
  labels                = { team = "ml-platform" }
}

# attached GPUs (N1 + T4), preempted VMs stopped
module "t4" {
  source                      = "./gcp-pool"
  cluster                     = "ml-platform"
  pool                        = "t4"
  project                     = "ml-platform-prod"
  region                      = "us-central1"
  machine_type                = "n1-standard-8"
  accelerator_type            = "nvidia-tesla-t4"
  accelerator_count           = 1
  image                       = "projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11"
  network                     = "global/networks/default"
  subnetwork                  = "regions/us-central1/subnetworks/gpu"
  service_account_email       = "fleetctl-nodes@ml-platform-prod.iam.gserviceaccount.com"
  controller_url              = "https://fleetctl.example.internal:8443/notices"
  instance_termination_action = "STOP"
}

output "template" {
  value = module.l4.instance_template_self_link
}

output "template_name" {
  value = module.t4.instance_template_name
}
"""

AZURE_ROOT = f"""\
terraform {{
  required_providers {{
    azurerm = {{
      source = "hashicorp/azurerm"
    }}
  }}
}}

provider "azurerm" {{
  features {{}}
  subscription_id = "{SUBSCRIPTION}"
}}

locals {{
  subnet = "/subscriptions/{SUBSCRIPTION}/resourceGroups/network/providers/Microsoft.Network/virtualNetworks/ml/subnets/gpu"
  key    = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyForTheExamplePolicyOnly fleetctl"
}}

# a gallery image, zonal
module "t4" {{
  source               = "./azure-pool"
  cluster              = "ml-platform"
  pool                 = "t4"
  resource_group_name  = "fleetctl-ml-platform"
  location             = "eastus"
  vm_size              = "Standard_NC4as_T4_v3"
  subnet_id            = local.subnet
  image_id             = "/subscriptions/{SUBSCRIPTION}/resourceGroups/images/providers/Microsoft.Compute/galleries/fleetctl/images/gpu-node/versions/1.0.0"
  admin_ssh_public_key = local.key
  controller_url       = "https://fleetctl.example.internal:8443/notices"
  zones                = ["1", "2"]
  tags                 = {{ team = "ml-platform" }}
}}

# no image id: the marketplace image (Ubuntu 22.04), regional
module "a100" {{
  source               = "./azure-pool"
  cluster              = "ml-platform"
  pool                 = "a100-80gb"
  resource_group_name  = "fleetctl-ml-platform"
  location             = "eastus"
  vm_size              = "Standard_NC24ads_A100_v4"
  subnet_id            = local.subnet
  admin_ssh_public_key = local.key
  controller_url       = "https://fleetctl.example.internal:8443/notices"
}}

output "scale_set" {{
  value = module.t4.scale_set_id
}}

output "scale_set_name" {{
  value = module.a100.scale_set_name
}}
"""

# module -> (root module, resource, the calls, what the plan must show of each branch)
CASES = {
    "gcp-pool": (GCP_ROOT, "google_compute_region_instance_template.pool", ("module.l4", "module.t4"),
                 ("guest_accelerator", '"nvidia-tesla-t4"', '"STOP"', '"DELETE"', '"SPOT"')),
    "azure-pool": (AZURE_ROOT, "azurerm_orchestrated_virtual_machine_scale_set.pool", ("module.t4", "module.a100"),
                   ("source_image_id", "source_image_reference", '"Canonical"', '"Spot"')),
}


@pytest.mark.parametrize("module", sorted(CASES))
def test_the_module_passes_the_schema_check(module: str, schemas: dict) -> None:
    assert check_module(MODULES / module, schemas) == []


@pytest.mark.parametrize("module", sorted(CASES))
def test_the_module_validates_against_the_real_schema_and_is_fmt_clean(module: str, tf_env: dict,
                                                                        tmp_path: Path) -> None:
    work = tmp_path / module
    shutil.copytree(MODULES / module, work)
    terraform(work, tf_env, "validate")
    terraform(work, tf_env, "fmt", "-check")


@pytest.mark.parametrize("module", sorted(CASES))
def test_a_root_calling_the_module_plans_applies_and_replans_clean(module: str, tf_env: dict,
                                                                   tmp_path: Path) -> None:
    root, resource, calls, shown = CASES[module]
    work = tmp_path / "root"
    work.mkdir()
    shutil.copytree(MODULES / module, work / module)
    (work / "main.tf").write_text(root)
    terraform(work, tf_env, "fmt", "-check", "main.tf")
    terraform(work, tf_env, "get")
    terraform(work, tf_env, "validate")
    plan = terraform(work, tf_env, "plan", "-out=tf.plan")
    assert "Plan: 2 to add, 0 to change, 0 to destroy." in plan.stdout, plan.stdout
    for call in calls:
        assert f"{call}.{resource}" in plan.stdout
    for text in shown:
        assert text in plan.stdout, text
    terraform(work, tf_env, "apply", "tf.plan")
    again = terraform(work, tf_env, "plan", "-detailed-exitcode")  # exit 0: no changes
    assert "No changes." in again.stdout
