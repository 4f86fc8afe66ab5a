"""The peers fleetctl is compared with, each a planner with the signature of
``fleetctl.planner.plan``, so the same controller tick runs them all.

* ``fleetctl``: the real planner with the policy as given.
* ``on-demand``: the real planner (same packing, same rules) with
  ``max_spot_share = 0``: on-demand only.
* ``spot-greedy``: price-first, as Karpenter provisions spot: each job that
  does not fit a held node gets the **cheapest spot offer available now** (by
  USD/hour of the node, ties by offer key); after a reclaim the job is simply
  placed again the same way (the reclaimed offer has no capacity then, so it
  is not offered); on-demand only when no spot offer fits. No interruption
  risk, no diversification, no reclaim memory, no deadline awareness.
* ``skypilot-failover``: as SkyPilot managed jobs fail over: each job gets
  the cheapest spot zone it has **not failed in** (``Job.avoid_offer_keys``,
  which the tick fills on every reclaim); on preemption it relaunches in the
  next-cheapest zone; on-demand only when every spot zone it could use has
  failed it or has no capacity. One cluster per job (no sharing of nodes with
  other jobs, not even an empty one), torn down as soon as the job leaves it
  (no idle timeout).

Why a small greedy rather than fleetctl's planner with rules switched off:
fleetctl's purchase step ranks by risk-adjusted cost per *useful* GPU, prefers
new offers within a spread premium, treats failed offers as a preference and
moves deadline-threatened jobs to on-demand; even with every knob at its
neutral value it is not the price-first behaviour of the peers. The greedy
below is what the peers do, nothing less: both baselines still keep the
policy's hard limits (allow-lists, read as the planner reads them:
``policy_allows``; spot eligibility of the job and its class, ``max_gpus``,
``max_usd_per_hour``), as a user would configure them (Karpenter NodePool
limits, SkyPilot resource filters), and both bind to free room on held nodes
before buying (spot-greedy only: single-worker jobs).

Contract of every planner here: pure and deterministic (inputs are sorted on
stable keys), returns a :class:`fleetctl.model.Plan` whose actions the
executor can apply: launches, then binds, then terminations of drained or
idle nodes that hold no job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Callable

from fleetctl.model import (
    Action,
    Bind,
    Forecast,
    Job,
    JobState,
    Launch,
    Market,
    NodeState,
    Offer,
    Plan,
    Policy,
    Reason,
    Terminate,
    Unplaced,
)
from fleetctl.planner import plan as fleetctl_plan, policy_allows

Planner = Callable[..., Plan]
_HELD = (NodeState.LAUNCHING, NodeState.READY, NodeState.DRAINING)


def on_demand_plan(*, now: datetime, queue, fleet, offers, forecast: Forecast | None, policy: Policy,
                   last_termination_utc: datetime | None = None) -> Plan:
    """fleetctl's planner on a copy of the policy with ``max_spot_share = 0``."""
    return fleetctl_plan(now=now, queue=queue, fleet=fleet, offers=offers, forecast=forecast,
                         policy=replace(policy, max_spot_share=0.0), last_termination_utc=last_termination_utc)


def spot_greedy_plan(*, now: datetime, queue, fleet, offers, forecast: Forecast | None, policy: Policy,
                     last_termination_utc: datetime | None = None) -> Plan:
    """Karpenter-like price-first spot (see the module docstring)."""
    return _Greedy(now, queue, fleet, offers, policy, failover=False).run()


def skypilot_failover_plan(*, now: datetime, queue, fleet, offers, forecast: Forecast | None,
                           policy: Policy, last_termination_utc: datetime | None = None) -> Plan:
    """SkyPilot-like zone failover (see the module docstring)."""
    return _Greedy(now, queue, fleet, offers, policy, failover=True).run()


PLANNERS: dict[str, Planner] = {
    "fleetctl": fleetctl_plan,
    "fleetctl-no-forecast": fleetctl_plan,  # the same planner; the backtest gives it no interruption forecast
    "on-demand": on_demand_plan,
    "spot-greedy": spot_greedy_plan,
    "skypilot-failover": skypilot_failover_plan,
}


def planner_for(name: str) -> Planner:
    """The planner called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        return PLANNERS[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(PLANNERS)}") from None


# --------------------------------------------------------------------------- the greedy


@dataclass(slots=True)
class _Room:
    node_id: str
    offer: Offer
    gpus: int
    vcpus: float
    mem: float
    jobs: int
    new: bool


def _fits_worker(job: Job, offer: Offer) -> int:
    """How many workers of ``job`` one node of ``offer`` holds (0: none)."""
    it = offer.instance_type
    if job.gpus_per_worker > 0:
        if it.gpu_count < job.gpus_per_worker:
            return 0
        if job.gpu_models and it.gpu_model not in job.gpu_models:
            return 0
        if job.gpu_memory_gib_per_gpu and it.gpu_memory_gib < job.gpu_memory_gib_per_gpu:
            return 0
    per = [it.gpu_count // job.gpus_per_worker if job.gpus_per_worker else 1 << 30,
           int(it.vcpus // job.vcpus_per_worker) if job.vcpus_per_worker > 0 else 1 << 30,
           int(it.memory_gib // job.memory_gib_per_worker) if job.memory_gib_per_worker > 0 else 1 << 30]
    return max(0, min(per))


class _Greedy:
    def __init__(self, now: datetime, queue, fleet, offers, policy: Policy, failover: bool) -> None:
        self.now = now
        self.policy = policy
        self.failover = failover
        self.fleet = sorted(fleet, key=lambda n: n.node_id)
        self.jobs = sorted(queue, key=lambda j: j.job_id)
        self.offers = sorted((o for o in offers if policy_allows(policy, o)), key=lambda o: (o.usd_per_hour, o.key))

    def _spot_ok(self, job: Job) -> bool:
        allowed = job.spot_eligible if job.spot_eligible is not None else \
            self.policy.priority_class(job.priority).spot_eligible
        return bool(allowed)

    def run(self) -> Plan:
        p = self.policy
        held = [n for n in self.fleet if n.state in _HELD]
        live = {n.node_id: n for n in held}
        usd_before = sum(n.offer.usd_per_hour for n in held)
        rooms: dict[str, _Room] = {}
        for n in held:
            it = n.offer.instance_type
            rooms[n.node_id] = _Room(n.node_id, n.offer, it.gpu_count, it.vcpus, it.memory_gib, 0, False)
        queue: list[Job] = []
        for j in self.jobs:
            if j.state in (JobState.BOUND, JobState.RUNNING) and j.node_ids and all(nid in live for nid in j.node_ids):
                for nid in j.node_ids:
                    r = rooms[nid]
                    r.gpus -= j.gpus_per_worker
                    r.vcpus -= j.vcpus_per_worker
                    r.mem -= j.memory_gib_per_worker
                    r.jobs += 1
            elif j.state.active:
                queue.append(j)  # queued, or bound to a node that is gone: place again
        queue.sort(key=lambda j: (-(p.priority_class(j.priority).value + j.priority_boost), j.submitted_at_utc,
                                  j.job_id))
        gpus = sum(n.offer.instance_type.gpu_count for n in held)
        usd = usd_before
        launches: list[Launch] = []
        binds: list[Bind] = []
        unplaced: list[Unplaced] = []
        for job in queue:
            spot_ok = self._spot_ok(job)
            # 1. free room on held, schedulable nodes (not for failover: one cluster per job)
            if job.workers == 1 and not self.failover:
                fits = [r for r in rooms.values()
                        if (r.new or live[r.node_id].state in (NodeState.LAUNCHING, NodeState.READY))
                        and (spot_ok or r.offer.market is Market.ON_DEMAND)
                        and _fits_worker(job, r.offer) and r.gpus >= job.gpus_per_worker
                        and r.vcpus >= job.vcpus_per_worker and r.mem >= job.memory_gib_per_worker
                        ]
                if fits:
                    r = min(fits, key=lambda r: (r.gpus - job.gpus_per_worker, r.offer.usd_per_hour, r.node_id))
                    r.gpus -= job.gpus_per_worker
                    r.vcpus -= job.vcpus_per_worker
                    r.mem -= job.memory_gib_per_worker
                    r.jobs += 1
                    binds.append(Bind(job.job_id, (r.node_id,), Reason.FITS_FREE_CAPACITY, "free room on a held node"))
                    continue
            # 2. buy: cheapest spot (not failed, for failover), else cheapest on-demand
            choice = self._choose(job, spot_ok)
            if choice is None:
                unplaced.append(Unplaced(job.job_id, Reason.NO_ALLOWED_OFFER, "no offer fits the job"))
                continue
            offer, per = choice
            count = 1 if self.failover and job.workers == 1 else math.ceil(job.workers / per)
            cost = count * offer.usd_per_hour
            add_gpus = count * offer.instance_type.gpu_count
            if p.max_gpus is not None and gpus + add_gpus > p.max_gpus:
                unplaced.append(Unplaced(job.job_id, Reason.CAPACITY_LIMIT, f"max_gpus {p.max_gpus} reached"))
                continue
            if p.max_usd_per_hour is not None and usd + cost > p.max_usd_per_hour + 1e-9:
                unplaced.append(Unplaced(job.job_id, Reason.BUDGET_EXCEEDED,
                                         f"${usd + cost:.2f}/h above the budget of ${p.max_usd_per_hour:.2f}/h"))
                continue
            gpus += add_gpus
            usd += cost
            names = tuple(f"new-{len(launches)}-{i}" for i in range(count))
            reason = Reason.CHEAPEST_OFFER if offer.market is Market.SPOT else Reason.ON_DEMAND_FALLBACK
            launches.append(Launch(offer, names, reason, f"{'failover' if self.failover else 'price-first'}: "
                                                         f"{offer.key} at ${offer.usd_per_hour:.3f}/h"))
            workers = tuple(names[i // per] for i in range(job.workers))
            it = offer.instance_type
            for name in names:
                used = workers.count(name)
                rooms[name] = _Room(name, offer, it.gpu_count - used * job.gpus_per_worker,
                                    it.vcpus - used * job.vcpus_per_worker, it.memory_gib - used * job.memory_gib_per_worker,
                                    1, True)
            binds.append(Bind(job.job_id, workers, reason, "on the node(s) just bought"))
        # 3. terminations: drained nodes that hold nothing; idle nodes (failover: at once)
        terms: list[Terminate] = []
        idle_after = timedelta(0) if self.failover else timedelta(minutes=p.idle_timeout_minutes)
        for n in held:
            r = rooms[n.node_id]
            if r.jobs:
                continue
            if n.state is NodeState.DRAINING:
                terms.append(Terminate(n.node_id, Reason.INTERRUPTION, "drained and empty"))
            elif n.state is NodeState.READY and self.now - (n.idle_since_utc or n.ready_at_utc or self.now) >= idle_after:
                terms.append(Terminate(n.node_id, Reason.IDLE, "idle"))
                usd -= n.offer.usd_per_hour
        for t in terms:
            if t.reason is Reason.INTERRUPTION:
                usd -= live[t.node_id].offer.usd_per_hour
        actions: tuple[Action, ...] = (*launches, *binds, *terms)
        return Plan(actions=actions, unplaced=tuple(unplaced), usd_per_hour_before=round(usd_before, 6),
                    usd_per_hour_after=round(usd, 6))

    def _choose(self, job: Job, spot_ok: bool) -> tuple[Offer, int] | None:
        spot = [o for o in self.offers if o.market is Market.SPOT] if spot_ok else []
        if self.failover:
            spot = [o for o in spot if o.key not in job.avoid_offer_keys]
        for pool in (spot, [o for o in self.offers if o.market is Market.ON_DEMAND]):
            for offer in pool:  # sorted by price, then key
                per = _fits_worker(job, offer)
                if per:
                    return offer, per
        return None
