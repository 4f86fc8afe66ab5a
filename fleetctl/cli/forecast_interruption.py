"""`fleetctl forecast train|evaluate interruption` (to be written)."""
