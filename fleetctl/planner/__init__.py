"""The planner: a pure function from the world to a Plan.

``plan(now=..., queue=..., fleet=..., offers=..., forecast=..., policy=...)``

* ``queue``: every active job. QUEUED jobs are placed; BOUND and RUNNING jobs
  hold the capacity of the nodes they are bound to (and are placed again if
  one of their nodes is gone).
* ``fleet``: every node the providers hold.
* ``offers``: everything that can be bought now.
* ``forecast``: interruption probabilities (and demand); may be ``None``.
* ``policy``: the core ``fleetctl.model.Policy``.

Pure: no clock, no randomness, no I/O, no logging; imports only the
vocabulary. Deterministic: inputs are sorted on stable keys first, so the same
inputs in any order give the same Plan.

How a pass works (queue order, gangs, backfill, preemption, risk-adjusted
diversified purchases, consolidation): see ``fleetctl.planner.core``.
"""

from fleetctl.planner.core import PlannedFleet, no_offer_holds, no_offer_holds_each, plan, policy_allows

__all__ = ["PlannedFleet", "no_offer_holds", "no_offer_holds_each", "plan", "policy_allows"]
