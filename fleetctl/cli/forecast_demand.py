"""`fleetctl forecast train|evaluate demand` (to be written)."""
