# One GPU pool in one Azure region: a Flexible-orchestration scale set with
# Spot priority, eviction policy Delete and no price cap (max_bid_price -1).
# fleetctl creates each VM itself (PUT by a name derived from the launch, into
# this scale set) and deletes it itself, so the set's instance count stays 0
# and is left to fleetctl: see docs/azure.md.

locals {
  tags = merge(var.tags, { "fleetctl-cluster" = var.cluster, "fleetctl-pool" = var.pool })
}

resource "azurerm_orchestrated_virtual_machine_scale_set" "pool" {
  name                        = "fleetctl-${var.cluster}-${var.pool}"
  resource_group_name         = var.resource_group_name
  location                    = var.location
  platform_fault_domain_count = 1
  sku_name                    = var.vm_size
  instances                   = 0
  priority                    = "Spot"
  eviction_policy             = "Delete"
  max_bid_price               = -1
  source_image_id             = var.image_id == "" ? null : var.image_id
  zones                       = var.zones
  tags                        = local.tags

  os_profile {
    custom_data = base64encode(templatefile("${path.module}/cloud-init.sh.tftpl", {
      controller_url = var.controller_url
      token_file     = var.notice_token_file
    }))

    linux_configuration {
      admin_username                  = var.admin_username
      disable_password_authentication = true

      admin_ssh_key {
        username   = var.admin_username
        public_key = var.admin_ssh_public_key
      }
    }
  }

  network_interface {
    name    = "nic"
    primary = true

    ip_configuration {
      name      = "ipconfig"
      primary   = true
      subnet_id = var.subnet_id
    }
  }

  os_disk {
    caching              = "ReadWrite"
    storage_account_type = "Premium_LRS"
  }

  # No image id: a marketplace image (Ubuntu 22.04 by default), which then
  # needs the NVIDIA driver and fleetctl installed by other means.
  dynamic "source_image_reference" {
    for_each = var.image_id == "" ? [1] : []
    content {
      publisher = var.image_publisher
      offer     = var.image_offer
      sku       = var.image_sku
      version   = var.image_version
    }
  }

  lifecycle {
    ignore_changes = [instances] # fleetctl owns the VMs
  }
}
