"""The simulator's inputs: job traces (:mod:`fleetctl.sim.traces`), importers
of public cluster traces (:mod:`fleetctl.sim.importers`) and spot-market
manifests (:mod:`fleetctl.sim.market`). See ``docs/traces.md``."""
