"""The first planner: greedy placement, then cheapest purchase.

Kept deliberately simple; the interface (``plan``) is final and the next
planner replaces these insides. See ``fleetctl.planner`` for the contract.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from fleetctl.model import (
    Action,
    Bind,
    Forecast,
    Job,
    JobState,
    Launch,
    Market,
    Node,
    NodeState,
    Offer,
    Plan,
    Policy,
    Reason,
    Terminate,
    Unplaced,
)

_HELD = (NodeState.LAUNCHING, NodeState.READY, NodeState.DRAINING)  # nodes that cost money and hold jobs


@dataclass(slots=True)
class _Slot:
    """Working copy of one node's free resources (existing or new in this plan)."""

    name: str
    offer: Offer
    schedulable: bool
    new: bool
    free_gpus: int
    free_vcpus: float
    free_memory_gib: float
    jobs: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, name: str, offer: Offer, *, schedulable: bool, new: bool) -> "_Slot":
        it = offer.instance_type
        return cls(name, offer, schedulable, new, it.gpu_count, float(it.vcpus), it.memory_gib)

    def fits(self, job: Job) -> bool:
        return (
            self.free_gpus >= job.gpus_per_worker
            and self.free_vcpus >= job.vcpus_per_worker
            and self.free_memory_gib >= job.memory_gib_per_worker
        )

    def take(self, job: Job) -> None:
        self.free_gpus -= job.gpus_per_worker
        self.free_vcpus -= job.vcpus_per_worker
        self.free_memory_gib -= job.memory_gib_per_worker
        self.jobs.add(job.job_id)


def _compatible(job: Job, offer: Offer, spot_ok: bool) -> bool:
    it = offer.instance_type
    if offer.market is Market.SPOT and not spot_ok:
        return False
    if job.gpus_per_worker > 0 and (it.gpu_model is None or it.gpu_count == 0):
        return False
    if job.gpu_models and it.gpu_model not in job.gpu_models:
        return False
    return True


def _workers_per_node(job: Job, offer: Offer) -> int:
    it = offer.instance_type
    limits = [int(it.vcpus // job.vcpus_per_worker), int(it.memory_gib // job.memory_gib_per_worker)]
    if job.gpus_per_worker > 0:
        limits.append(it.gpu_count // job.gpus_per_worker)
    return max(0, min(limits))


def _allowed(offer: Offer, policy: Policy) -> bool:
    if policy.providers and offer.provider not in policy.providers:
        return False
    if policy.regions and offer.region not in policy.regions:
        return False
    if policy.gpu_models and offer.instance_type.gpu_model not in policy.gpu_models:
        return False
    return offer.usd_per_hour > 0


def _queue_key(job: Job, policy: Policy) -> tuple:
    return (-policy.priority_class(job.priority).value, job.submitted_at_utc, job.job_id)


def _describe_need(job: Job) -> str:
    models = " or ".join(job.gpu_models) if job.gpu_models else "any GPU"
    what = f"{job.gpus_per_worker} x {models}" if job.gpus_per_worker else "no GPU"
    gang = f"{job.workers} workers of " if job.workers > 1 else ""
    return f"needs {gang}{what}, {job.vcpus_per_worker:g} vCPU, {job.memory_gib_per_worker:g} GiB"


class _Planner:
    def __init__(self, now: datetime, queue, fleet, offers, forecast: Forecast | None, policy: Policy) -> None:
        self.now = now
        self.policy = policy
        self.risk = {r.offer_key: r.interruption_probability for r in (forecast.interruption if forecast else ())}
        self.offers = tuple(sorted((o for o in offers if _allowed(o, policy)), key=lambda o: o.key))
        self.fleet = tuple(sorted(fleet, key=lambda n: n.node_id))
        self.jobs = tuple(sorted(queue, key=lambda j: _queue_key(j, policy)))
        self.slots: list[_Slot] = []
        self.launches: dict[str, list[str]] = {}  # offer key -> new node names, in creation order
        self.launch_offer: dict[str, Offer] = {}
        self.binds: list[Bind] = []
        self.unplaced: list[Unplaced] = []
        self.usd_per_hour = 0.0
        self.gpus = 0
        self.spot_gpus = 0
        self.on_demand_gpus = 0

    # -------------------------------------------------------------- state of the fleet

    def _load_fleet(self) -> list[Job]:
        """Build slots from the fleet, charge the jobs already bound, and
        return the jobs that need a place."""
        by_name: dict[str, _Slot] = {}
        for node in self.fleet:
            if node.state not in _HELD:
                continue
            slot = _Slot.of(node.node_id, node.offer, schedulable=node.schedulable, new=False)
            by_name[node.node_id] = slot
            self.slots.append(slot)
            self._charge(node.offer)
        to_place = []
        for job in self.jobs:
            if job.state is JobState.QUEUED:
                to_place.append(job)
            elif job.state in (JobState.BOUND, JobState.RUNNING):
                held = [by_name.get(n) for n in job.node_ids]
                if job.node_ids and all(held):
                    for slot in held:
                        slot.take(job)  # type: ignore[union-attr]
                else:
                    to_place.append(job)  # one of its nodes is gone: place it again
        return to_place

    def _charge(self, offer: Offer) -> None:
        it = offer.instance_type
        self.usd_per_hour += offer.usd_per_hour
        self.gpus += it.gpu_count
        if offer.market is Market.SPOT:
            self.spot_gpus += it.gpu_count
        else:
            self.on_demand_gpus += it.gpu_count

    # -------------------------------------------------------------- placement

    def _spot_ok(self, job: Job) -> bool:
        if job.spot_eligible is not None:
            return job.spot_eligible
        return self.policy.priority_class(job.priority).spot_eligible

    def _place_on_slots(self, job: Job, spot_ok: bool) -> list[_Slot] | None:
        """All workers in one placement domain, best fit (fewest GPUs left)."""
        domains: dict[tuple[str, str, str], list[_Slot]] = {}
        for slot in self.slots:
            if slot.schedulable and _compatible(job, slot.offer, spot_ok):
                domains.setdefault(slot.offer.placement_domain, []).append(slot)
        for domain in sorted(domains):
            candidates = domains[domain]
            trial = {id(s): (s.free_gpus, s.free_vcpus, s.free_memory_gib) for s in candidates}
            chosen: list[_Slot] = []
            for _ in range(job.workers):
                fitting = [s for s in candidates if _fits_trial(trial[id(s)], job)]
                if not fitting:
                    break
                best = min(fitting, key=lambda s: (s.new, trial[id(s)][0] - job.gpus_per_worker, s.name))
                g, v, m = trial[id(best)]
                trial[id(best)] = (g - job.gpus_per_worker, v - job.vcpus_per_worker, m - job.memory_gib_per_worker)
                chosen.append(best)
            if len(chosen) == job.workers:
                for slot in chosen:
                    slot.take(job)
                return chosen
        return None

    def _buy(self, job: Job, spot_ok: bool) -> tuple[list[_Slot] | None, Unplaced | None, Reason]:
        policy = self.policy
        compatible = [o for o in self.offers if _compatible(job, o, True)]
        if not compatible:
            return None, Unplaced(job.job_id, Reason.NO_ALLOWED_OFFER, f"{_describe_need(job)}; no allowed offer has that GPU model"), Reason.NO_ALLOWED_OFFER
        fitting = [o for o in compatible if _workers_per_node(job, o) >= 1]
        if not fitting:
            largest = max(compatible, key=lambda o: (o.instance_type.gpu_count, o.instance_type.vcpus, o.key))
            it = largest.instance_type
            return None, Unplaced(
                job.job_id,
                Reason.GANG_DOES_NOT_FIT,
                f"{_describe_need(job)} per worker; the largest allowed offer has {it.gpu_count} x {it.gpu_model}, "
                f"{it.vcpus} vCPU, {it.memory_gib:g} GiB ({it.name})",
            ), Reason.GANG_DOES_NOT_FIT
        markets = {Market.ON_DEMAND}
        reason = Reason.CHEAPEST_OFFER
        if spot_ok:
            markets.add(Market.SPOT)
        if self.on_demand_gpus < policy.on_demand_base_gpus:
            markets = {Market.ON_DEMAND}
            reason = Reason.ON_DEMAND_FALLBACK
        options = []
        for offer in fitting:
            if offer.market not in markets:
                continue
            count = math.ceil(job.workers / _workers_per_node(job, offer))
            gpus = count * offer.instance_type.gpu_count
            if offer.market is Market.SPOT and self.spot_gpus + gpus > policy.max_spot_share * (self.gpus + gpus):
                continue
            options.append((count * offer.usd_per_hour, count, offer.key, offer, gpus))
        if not options:
            return None, Unplaced(job.job_id, Reason.NO_ALLOWED_OFFER, f"{_describe_need(job)}; no allowed offer in an allowed market"), Reason.NO_ALLOWED_OFFER
        options.sort(key=lambda t: t[:3])
        over_budget = over_gpus = None
        for cost, count, _, offer, gpus in options:
            if policy.max_gpus is not None and self.gpus + gpus > policy.max_gpus:
                over_gpus = over_gpus or (gpus, offer)
                continue
            if policy.max_usd_per_hour is not None and self.usd_per_hour + cost > policy.max_usd_per_hour + 1e-9:
                over_budget = over_budget or (cost, offer)
                continue
            if offer.market is Market.ON_DEMAND and spot_ok and reason is Reason.CHEAPEST_OFFER:
                spot_left = any(o[3].market is Market.SPOT for o in options)
                reason = Reason.CHEAPEST_OFFER if spot_left else Reason.ON_DEMAND_FALLBACK
            slots = []
            for _ in range(count):
                name = f"new-{sum(len(v) for v in self.launches.values()) + 1}"
                slot = _Slot.of(name, offer, schedulable=True, new=True)
                self.slots.append(slot)
                self.launches.setdefault(offer.key, []).append(name)
                self.launch_offer[offer.key] = offer
                self._charge(offer)
                slots.append(slot)
            # Design choice: the gang goes onto exactly the nodes bought for it,
            # so no bought node is left empty by mixing in older free slots.
            per_node = _workers_per_node(job, offer)
            placed = [slots[i // per_node] for i in range(job.workers)]
            for slot in placed:
                slot.take(job)
            return placed, None, reason
        if over_budget is not None:
            cost, offer = over_budget
            return None, Unplaced(
                job.job_id,
                Reason.BUDGET_EXCEEDED,
                f"{_describe_need(job)}; the cheapest fit ({offer.instance_type.name}, ${cost:.2f}/h) would take the fleet "
                f"to ${self.usd_per_hour + cost:.2f}/h, above the budget of ${policy.max_usd_per_hour:.2f}/h",
            ), Reason.BUDGET_EXCEEDED
        gpus, offer = over_gpus  # type: ignore[misc]
        return None, Unplaced(
            job.job_id,
            Reason.CAPACITY_LIMIT,
            f"{_describe_need(job)}; {gpus} more GPUs would exceed the policy's max of {policy.max_gpus}",
        ), Reason.CAPACITY_LIMIT

    # -------------------------------------------------------------- the pass

    def run(self) -> Plan:
        before_usd, before_risk = self._fleet_cost_and_risk()
        for job in self._load_fleet():
            spot_ok = self._spot_ok(job)
            placed = self._place_on_slots(job, spot_ok)
            reason = Reason.FITS_FREE_CAPACITY
            if placed is None:
                placed, unplaced, reason = self._buy(job, spot_ok)
                if unplaced is not None:
                    self.unplaced.append(unplaced)
                    continue
                reason = Reason.FITS_NEW_CAPACITY if reason is Reason.CHEAPEST_OFFER else reason
            self.binds.append(Bind(job.job_id, tuple(s.name for s in placed), reason, self._bind_detail(job, placed)))
        terminates = self._idle_terminations()
        launches = [
            Launch(
                self.launch_offer[key],
                tuple(names),
                Reason.CHEAPEST_OFFER,
                f"cheapest allowed offer for {self._jobs_on(names)}",
            )
            for key, names in self.launches.items()
        ]
        actions: tuple[Action, ...] = (*launches, *self.binds, *terminates)
        after_usd = before_usd + sum(l.offer.usd_per_hour * l.count for l in launches)
        after_usd -= sum(self._node(t.node_id).offer.usd_per_hour for t in terminates)
        after_risk = before_risk + sum(self._risk(l.offer) * l.count for l in launches)
        after_risk -= sum(self._risk(self._node(t.node_id).offer) for t in terminates)
        return Plan(
            actions=actions,
            unplaced=tuple(self.unplaced),
            usd_per_hour_before=round(before_usd, 6),
            usd_per_hour_after=round(after_usd, 6),
            risk_before=round(before_risk, 6),
            risk_after=round(after_risk, 6),
        )

    def _jobs_on(self, names: list[str]) -> str:
        jobs = sorted({j for s in self.slots if s.name in names for j in s.jobs})
        return ", ".join(jobs) if jobs else "queued work"

    def _bind_detail(self, job: Job, placed: list[_Slot]) -> str:
        offer = placed[0].offer
        where = f"{offer.provider} {offer.region}{('/' + offer.zone) if offer.zone else ''}"
        nodes = "new " if placed[0].new else ""
        return (
            f"{job.workers} x {job.gpus_per_worker} GPU on {len(set(s.name for s in placed))} {nodes}"
            f"{offer.instance_type.name} ({offer.market.value}) in {where}"
        )

    def _node(self, node_id: str) -> Node:
        for node in self.fleet:
            if node.node_id == node_id:
                return node
        raise KeyError(node_id)

    def _risk(self, offer: Offer) -> float:
        if offer.market is not Market.SPOT:
            return 0.0
        return self.risk.get(offer.key, self.policy.default_spot_interruption_probability_per_hour)

    def _fleet_cost_and_risk(self) -> tuple[float, float]:
        held = [n for n in self.fleet if n.state in _HELD]
        return sum(n.offer.usd_per_hour for n in held), sum(self._risk(n.offer) for n in held)

    def _idle_terminations(self) -> list[Terminate]:
        timeout = timedelta(minutes=self.policy.idle_timeout_minutes)
        result = []
        slots = {s.name: s for s in self.slots if not s.new}
        for node in self.fleet:
            slot = slots.get(node.node_id)
            if slot is None or node.state is not NodeState.READY or slot.jobs:
                continue
            since = node.idle_since_utc or node.ready_at_utc or node.launched_at_utc
            if self.now - since >= timeout:
                minutes = (self.now - since).total_seconds() / 60
                result.append(
                    Terminate(
                        node.node_id,
                        Reason.IDLE,
                        f"idle for {minutes:.0f} min (timeout {self.policy.idle_timeout_minutes:g} min), "
                        f"saves ${node.offer.usd_per_hour:.2f}/h",
                    )
                )
        return result


def _fits_trial(free: tuple[int, float, float], job: Job) -> bool:
    return free[0] >= job.gpus_per_worker and free[1] >= job.vcpus_per_worker and free[2] >= job.memory_gib_per_worker


def plan(
    *,
    now: datetime,
    queue: tuple[Job, ...] | list[Job],
    fleet: tuple[Node, ...] | list[Node],
    offers: tuple[Offer, ...] | list[Offer],
    forecast: Forecast | None,
    policy: Policy,
) -> Plan:
    """Turn queue + fleet + offers + forecast + policy into a Plan. Pure."""
    return _Planner(now, queue, fleet, offers, forecast, policy).run()
