output "scale_set_id" {
  description = "The scale set fleetctl's VMs join (virtualMachineScaleSet.id)."
  value       = azurerm_orchestrated_virtual_machine_scale_set.pool.id
}

output "scale_set_name" {
  value = azurerm_orchestrated_virtual_machine_scale_set.pool.name
}
