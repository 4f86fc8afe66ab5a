# One GPU pool in one GCP region: the instance template of the pool's Spot VMs,
# with the node image, network, service account and the startup script that
# starts node-watch (GCE announces a preemption only on the VM, 30 s ahead).
# fleetctl launches VMs itself with regional instances.bulkInsert (all or
# nothing, one zone per gang); there is no managed instance group: see
# docs/gcp.md.

locals {
  labels = merge(var.labels, {
    "fleetctl-cluster" = var.cluster
    "fleetctl-pool"    = var.pool
    "fleetctl-managed" = "true"
  })
}

resource "google_compute_region_instance_template" "pool" {
  project      = var.project
  region       = var.region
  name_prefix  = "fleetctl-${var.cluster}-${var.pool}-"
  description  = "fleetctl ${var.cluster}: GPU pool ${var.pool}"
  machine_type = var.machine_type
  labels       = local.labels

  metadata = {
    startup-script = templatefile("${path.module}/startup-script.sh.tftpl", {
      controller_url = var.controller_url
      token_file     = var.notice_token_file
    })
  }

  disk {
    source_image = var.image
    boot         = true
    auto_delete  = true
    disk_size_gb = 200
  }

  network_interface {
    network    = var.network
    subnetwork = var.subnetwork == "" ? null : var.subnetwork
  }

  dynamic "service_account" {
    for_each = var.service_account_email == "" ? [] : [var.service_account_email]
    content {
      email  = service_account.value
      scopes = ["cloud-platform"]
    }
  }

  dynamic "guest_accelerator" {
    for_each = var.accelerator_count > 0 ? [1] : []
    content {
      type  = var.accelerator_type
      count = var.accelerator_count
    }
  }

  scheduling {
    provisioning_model          = "SPOT"
    preemptible                 = true
    automatic_restart           = false
    on_host_maintenance         = "TERMINATE"
    instance_termination_action = var.instance_termination_action
  }

  lifecycle {
    create_before_destroy = true
  }
}
