"""One planning pass. See ``fleetctl.planner`` for the contract.

The pass, in order:

1. **Fleet.** Slots from the nodes; bound and running jobs charged to theirs
   (a job whose node is gone goes back to the queue).
2. **Queue** in the order of ``order.QueueOrder``. Each job is placed on free
   capacity (best fit; a gang on one node, else in one zone of one provider;
   never on reserved capacity it would still hold when the waiting gang could
   start). What does not fit is *admitted* for new capacity if its team's
   burst limit, the GPU cap and the budget (at its cheapest risk-adjusted
   cost) allow; otherwise it may **preempt** lower, preemptible work; otherwise
   it waits, and a waiting job reserves the capacity it will start on.
3. **New capacity**, best-fit decreasing: admitted jobs, largest first, go into
   the leftovers of nodes bought earlier in the pass, else buy the offer with
   the lowest risk-adjusted cost per useful GPU that the market and
   diversification rules, the GPU cap and the budget allow.
4. **Consolidation** of under-used nodes whose checkpointable jobs fit
   elsewhere, when the saving pays the migration back in time, within the
   disruption budget; then **idle** nodes past the timeout are terminated.

Risk-adjusted cost of a job on an offer, USD/h: the job's share of the node
price x (1 + p x L), where p is the offer's interruption probability per hour
(forecast, else the policy's default for spot, 0 on demand) and L the hours an
interruption costs it: half its checkpoint interval (half its run if it cannot
checkpoint) plus the restart overhead.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from fleetctl.model import (
    Action,
    Bind,
    Explanation,
    Forecast,
    InstanceType,
    Job,
    JobState,
    Launch,
    Market,
    Migrate,
    Node,
    NodeState,
    Offer,
    Plan,
    Policy,
    Preempt,
    Reason,
    Terminate,
    Unplaced,
)
from fleetctl.planner.capacity import CapacityIndex, Kind, Slot, kind_of
from fleetctl.planner.order import QueueOrder, TeamUsage, over_burst

_HELD = (NodeState.LAUNCHING, NodeState.READY, NodeState.DRAINING)
_SHORTLIST = 24  # offers scored per purchase (by per-GPU price), before the full list is tried
_PROJECTION_ROUNDS = 5  # tries of step 3 with projected spot totals before the strict rule
_MAX_RESERVATIONS = 64
_TIES = 16  # consolidation targets of equal fit weighed by cost, at most (see _consolidation_target)
_SPREAD_PREMIUM = 1.25  # how much dearer a new spot offer may be and still be preferred (diversification)
_MULTI_ORDER_MAX_JOBS = 400
_SHUFFLED_ORDERS = 6  # steps this small try several purchase orders (see buy)  # waiting gangs that reserve capacity per pass (bounds the work per pass)


def _per_node(job: Job, offer: Offer) -> int:
    it = offer.instance_type
    limits = [
        int(it.vcpus // job.vcpus_per_worker) if job.vcpus_per_worker > 0 else 1 << 30,
        int(it.memory_gib // job.memory_gib_per_worker) if job.memory_gib_per_worker > 0 else 1 << 30,
    ]
    if job.gpus_per_worker > 0:
        limits.append(it.gpu_count // job.gpus_per_worker)
    return max(0, min(limits))


def _pow2(x: float) -> float:
    return float(2 ** math.ceil(math.log2(x))) if x > 1 else (1.0 if x > 0 else 0.0)


def _risk_share(job: Job, workers: int, it: InstanceType) -> float:
    """The share of a node's price that ``workers`` of ``job`` put at risk:
    their GPUs' share of its GPUs, or for a CPU-only job its vCPUs' share of
    its vCPUs (on a GPU node too). Expected loss = p x hours lost x this x
    the node's price."""
    if job.gpus_per_worker:
        return job.gpus_per_worker * workers / it.gpu_count if it.gpu_count else 0.0
    return job.vcpus_per_worker * workers / max(1, it.vcpus)


def _bind_detail(job: Job, offer: Offer, nodes: int, new: bool) -> str:
    """A Bind's detail: ``2 x 1 GPU on 2 new p3.2xlarge (spot) in aws us-east-1/us-east-1a``."""
    return (f"{job.workers} x {job.gpus_per_worker} GPU on {nodes} {'new ' if new else ''}{offer.instance_type.name} "
            f"({offer.market.value}) in {_where(offer)}")


def _bind_detail_on(job: Job, slots: Iterable[Slot]) -> str:
    """A Bind's detail from the nodes it uses (each once, in worker order):
    ``_bind_detail`` when they are of one offer, else each offer's count,
    ``3 x 8 GPU on 1 new a16 (on_demand) and 1 new a8 (on_demand) in aws r1/z1``
    (a gang's nodes share a zone). Before 2026-11-28 a bind named its first
    node's offer for every node (a gang's node swapped by the buy step's
    repair read as if the whole gang ran on the swapped-in offer)."""
    counts: dict[tuple[str, bool], int] = {}
    offers: dict[tuple[str, bool], Offer] = {}
    for slot in slots:
        key = (slot.offer.key, slot.new)
        counts[key] = counts.get(key, 0) + 1
        offers.setdefault(key, slot.offer)
    if len(counts) == 1:
        ((key, n),) = counts.items()
        return _bind_detail(job, offers[key], n, key[1])
    parts = [f"{n} {'new ' if new else ''}{offers[(k, new)].instance_type.name} ({offers[(k, new)].market.value})"
             for (k, new), n in counts.items()]
    first = next(iter(offers.values()))
    return f"{job.workers} x {job.gpus_per_worker} GPU on {' and '.join(parts)} in {_where(first)}"


def _where(offer: Offer) -> str:
    """Where an offer sells, as plans and explanations say it: "aws us-east-1/us-east-1a"."""
    return f"{offer.provider} {offer.region}{('/' + offer.zone) if offer.zone else ''}"


def _describe_need(job: Job) -> str:
    models = " or ".join(job.gpu_models) if job.gpu_models else "any GPU"
    what = f"{job.gpus_per_worker} x {models}" if job.gpus_per_worker else "no GPU"
    if job.workers > 1:
        return f"needs {job.workers} workers of {what} in one zone"
    return f"needs {what}"


def _describe_worker(job: Job) -> str:
    gpu_memory = (f"{job.gpu_memory_gib_per_gpu:g} GiB per GPU, "
                  if job.gpus_per_worker and job.gpu_memory_gib_per_gpu else "")
    return f"{gpu_memory}{job.vcpus_per_worker:g} vCPU, {job.memory_gib_per_worker:g} GiB per worker"


def _describe_offer(offer: Offer) -> str:
    it = offer.instance_type
    gpus = f"{it.gpu_count} x {it.gpu_model} ({it.gpu_memory_gib:g} GiB each), " if it.gpu_count else ""
    return f"{it.name}: {gpus}{it.vcpus} vCPU, {it.memory_gib:g} GiB"


@dataclass(frozen=True, slots=True)
class _Dimension:
    """One thing a worker needs of a node, for saying which one no offer has."""

    name: str
    need: float
    have: Callable[[Offer], float]
    unit: str

    def fits(self, offer: Offer) -> bool:
        return self.have(offer) >= self.need

    def show(self, value: float) -> str:
        return f"{value:g}{self.unit}"


def _worker_dimensions(job: Job) -> list[_Dimension]:
    """What one worker needs of a node (the GPU model is checked before)."""
    dims = []
    if job.gpus_per_worker:
        dims.append(_Dimension("GPUs per node", job.gpus_per_worker, lambda o: o.instance_type.gpu_count, ""))
        if job.gpu_memory_gib_per_gpu:
            dims.append(_Dimension("GPU memory per GPU", job.gpu_memory_gib_per_gpu,
                                   lambda o: o.instance_type.gpu_memory_gib, " GiB"))
    dims.append(_Dimension("vCPUs per node", job.vcpus_per_worker, lambda o: o.instance_type.vcpus, ""))
    dims.append(_Dimension("memory per node", job.memory_gib_per_worker, lambda o: o.instance_type.memory_gib,
                           " GiB"))
    return dims


def _no_offer(job: Job, offers: tuple[Offer, ...], spot_ok: bool) -> tuple[Reason, str]:
    """Why no offer of ``offers`` (those the policy allows) is bought for ``job``, in the words
    ``plan`` and ``explain`` print."""
    models = [o for o in offers if (not job.gpu_models or o.instance_type.gpu_model in job.gpu_models)
              and (job.gpus_per_worker == 0 or o.instance_type.gpu_count > 0)]
    if not models:
        return Reason.NO_ALLOWED_OFFER, f"{_describe_need(job)}; no allowed offer has that GPU model"
    usable = [o for o in models if spot_ok or o.market is Market.ON_DEMAND]
    if not usable:
        return Reason.NO_ALLOWED_OFFER, f"{_describe_need(job)}; only spot offers have it and the job may not use spot"
    dims = _worker_dimensions(job)
    short = [(dim, [o for o in usable if not dim.fits(o)]) for dim in dims]
    # Dimensions no allowed offer satisfies: name each with the most any offer has.
    blocking = [dim for dim, lacking in short if len(lacking) == len(usable)]
    need = f"{_describe_need(job)} ({_describe_worker(job)})"
    if blocking:
        parts = []
        for dim in blocking:
            best = max(usable, key=lambda o, d=dim: (d.have(o), o.key))
            parts.append(f"{dim.name}: needs {dim.show(dim.need)}, the most an allowed offer has is "
                         f"{dim.show(dim.have(best))} ({_describe_offer(best)})")
        return Reason.GANG_DOES_NOT_FIT, f"{need}; no allowed offer has enough {'; '.join(parts)}"
    if any(lacking for _, lacking in short) and not any(all(d.fits(o) for d in dims) for o in usable):
        # Each dimension fits some offer, none fits them all: the offer short of the fewest.
        closest = max(usable, key=lambda o: (sum(d.fits(o) for d in dims), o.instance_type.gpu_count,
                                             o.instance_type.vcpus, o.instance_type.memory_gib, o.key))
        lacks = ", ".join(f"{d.name} {d.show(d.have(closest))} of {d.show(d.need)}" for d in dims
                          if not d.fits(closest))
        return Reason.GANG_DOES_NOT_FIT, (
            f"{need}; no allowed offer has all of it at once: the closest, {_describe_offer(closest)}, "
            f"has {lacks}"
        )
    largest = max(usable, key=lambda o: (o.instance_type.gpu_count, o.instance_type.vcpus, o.key))
    return Reason.GANG_DOES_NOT_FIT, f"{need}; the largest allowed offer is {_describe_offer(largest)}"


def policy_allows(policy: Policy, offer: Offer) -> bool:
    """The policy's providers, regions and GPU models admit ``offer``, and it has a price: the
    one filter of offers by policy (the planner's own, and what `fleetctl policy diff` counts)."""
    if policy.providers and offer.provider not in policy.providers:
        return False
    if policy.regions and offer.region not in policy.regions:
        return False
    gpu = offer.instance_type.gpu_model
    if policy.gpu_models and gpu is not None and gpu not in policy.gpu_models:
        return False
    return offer.usd_per_hour > 0


def _spot_eligible(policy: Policy, job: Job) -> bool:
    """The job may run on spot at all (its own setting, else its priority class's)."""
    return job.spot_eligible if job.spot_eligible is not None else policy.priority_class(job.priority).spot_eligible


def no_offer_holds(job: Job, offers: Iterable[Offer], policy: Policy) -> tuple[Reason, str] | None:
    """Why no offer of ``offers`` that ``policy`` allows can hold one worker of
    ``job`` on a market it may use, in the words ``plan`` and ``explain`` give
    (the same reason and detail); None when one can. What changes from pass to
    pass (reclaimed offers, interruptions, a deadline that rules spot out) is
    not counted: this is the job against the market itself, for ``jobs submit``
    to warn of a job that ``plan`` would leave queued whatever the fleet does."""
    return no_offer_holds_each((job,), offers, policy)[0]


def no_offer_holds_each(jobs: Iterable[Job], offers: Iterable[Offer],
                        policy: Policy) -> list[tuple[Reason, str] | None]:
    """``no_offer_holds`` of each of ``jobs``, with the offers the policy allows filtered and sorted
    once (per job, that was two thirds of `jobs submit` for 10,000 jobs: 2,500 offers sorted each time)."""
    allowed = tuple(sorted((o for o in offers if policy_allows(policy, o)), key=lambda o: o.key))
    return [_no_offer_among(job, allowed, policy) for job in jobs]


def _no_offer_among(job: Job, allowed: tuple[Offer, ...], policy: Policy) -> tuple[Reason, str] | None:
    spot_ok = _spot_eligible(policy, job)
    dims = _worker_dimensions(job)
    for o in allowed:
        it = o.instance_type
        if ((spot_ok or o.market is Market.ON_DEMAND) and (not job.gpu_models or it.gpu_model in job.gpu_models)
                and (job.gpus_per_worker == 0 or it.gpu_count > 0) and all(d.fits(o) for d in dims)):
            return None
    return _no_offer(job, allowed, spot_ok)


@dataclass(slots=True)
class _Option:
    score: float  # risk-adjusted USD/h per useful GPU (or vCPU)
    cost: float  # risk-adjusted USD/h of the nodes bought for this job
    nodes: int
    offer: Offer
    risk_usd_per_hour: float

    @property
    def usd_per_hour(self) -> float:
        """What the nodes cost (the budget counts dollars, not risk)."""
        return self.nodes * self.offer.usd_per_hour


@dataclass(frozen=True, slots=True)
class _SlotVictims:
    """What a pass keeps about one slot for preemption, until its jobs or free room change
    (``Slot.version``): the active, preemptible jobs on it with their class values, in victim order;
    the room it would have if every one of them went (its free room plus their resources, added in that
    order, as ``_Pass._victims_for`` adds them: a bound on what any set of them can free); the lowest
    class value among them; and the least work any of them would lose (a bound on what taking one or
    more of them loses)."""

    order: tuple[tuple[float, Job], ...]
    gpus: int
    vcpus: float
    memory_gib: float
    lowest_value: float  # math.inf when there is no victim
    least_lost_hours: float  # math.inf when there is no victim


class _Pass:
    def __init__(self, now: datetime, queue, fleet, offers, forecast: Forecast | None, policy: Policy,
                 last_termination_utc: datetime | None = None) -> None:
        self.now = now
        self.policy = policy
        # Cooldowns (scaling.*_cooldown_*): the last launch is the newest node's; the last
        # termination is the caller's (the store's audit log), as the fleet no longer holds it.
        last_launch = max((n.launched_at_utc for n in fleet), default=None)
        self.scale_up_wait: datetime | None = None  # no purchase before then
        if last_launch is not None and policy.scale_up_cooldown_seconds > 0:
            until = last_launch + timedelta(seconds=policy.scale_up_cooldown_seconds)
            self.scale_up_wait = until if now < until else None
        self.scale_down_wait: datetime | None = None  # no idle node terminated before then
        last_change = max((t for t in (last_launch, last_termination_utc) if t is not None), default=None)
        if last_change is not None and policy.scale_down_cooldown_minutes > 0:
            until = last_change + timedelta(minutes=policy.scale_down_cooldown_minutes)
            self.scale_down_wait = until if now < until else None
        forecast = forecast or Forecast()
        self.risk = forecast.risks_per_hour()  # the cost model's p, per offer
        # 90th-percentile GPU demand per model, one hour ahead (else the horizon nearest to it, the shorter of two)
        by_model: dict[str, tuple[int, float]] = {}
        for d in forecast.demand:
            key = (abs(d.horizon_minutes - 60), d.horizon_minutes)
            if d.gpu_model not in by_model or key < by_model[d.gpu_model][0]:
                by_model[d.gpu_model] = (key, d.gpus_p90)  # type: ignore[assignment]
        self.demand_p90 = {m: v for m, (_, v) in by_model.items()}
        ttl = timedelta(minutes=policy.reclaimed_offer_ttl_minutes)
        # Design choice: an offer reclaimed within the TTL is treated as unavailable only when the
        # forecast has no probability for it; a forecast's number already weighs its recent losses.
        self.reclaimed = {r.offer_key for r in forecast.recent_reclaims
                          if now - r.at_utc <= ttl and r.offer_key not in self.risk}
        self.fleet = tuple(sorted(fleet, key=lambda n: n.node_id))
        self.nodes = {n.node_id: n for n in self.fleet}
        self.jobs = tuple(sorted(queue, key=lambda j: j.job_id))
        self.jobs_by_id = {j.job_id: j for j in self.jobs}
        self.headroom_gpus: dict[str, int] = {}  # offer key -> GPUs bought ahead of forecast demand
        self.idle_fallback: set[str] = set()  # jobs that skipped an idle node to buy spot (_idle_dearer)
        self.drained = 0  # nodes consolidation and the move back to spot emptied in this pass (the disruption budget)
        self.deferred: set[str] = set()  # under-used nodes consolidation left to the move back to spot
        self.offers = tuple(sorted((o for o in offers if self._allowed(o)), key=lambda o: o.key))
        # Spot offers that can be bought now (the market lists them and none was just reclaimed).
        self.spot_on_sale = frozenset(o.key for o in self.offers if o.market is Market.SPOT)
        self._avoided_cache: dict[tuple, frozenset[str]] = {}  # (avoid list, job shape, spot_ok) -> _avoided
        self.index = CapacityIndex()  # the existing fleet
        # Design choice: nodes bought in this pass get their own index. What
        # found no room in the existing fleet in step 2 cannot find it there in
        # step 3 (it only shrinks), so step 3 searches the new nodes alone.
        self.new_index = CapacityIndex()
        self.usage: dict[str, TeamUsage] = {}
        self.actions_bind: list[Bind] = []
        self.actions_preempt: list[Preempt] = []
        self.unplaced: list[Unplaced] = []
        self.explain: dict[str, list[str]] = {}
        self.launch_names: dict[str, list[str]] = {}
        self.launch_offer: dict[str, Offer] = {}
        self.launch_jobs: dict[str, list[str]] = {}
        # per node _unbuy took out: its offer's key and the jobs listed for that node alone (for _rebuy)
        self.unbought_jobs: dict[str, tuple[str, list[str]]] = {}
        # (job, old offer, new offer) -> (nodes swapped, index of the line in the job's explanation): _note_swap
        self.swap_notes: dict[tuple[str, str, str], tuple[int, int]] = {}
        self.launch_reason: dict[str, Reason] = {}
        self.spread_excess_before: dict[tuple[str, str], float] = {}  # _diversification_broken: breaches before the buy step
        self.usd = 0.0
        self.gpus = 0
        # Empty draining on-demand nodes this plan terminates: no capacity for the market rules, but held (and billed)
        # until they go, so the budget and the GPU cap still count them (as they count idle nodes it ends).
        self.leaving_usd = 0.0
        self.leaving_gpus = 0
        self.spot_gpus = 0
        self.on_demand_gpus = 0
        self.spot_by_type: dict[str, int] = {}
        self.spot_by_zone: dict[tuple, int] = {}
        self.spot_nodes_by_offer: dict[str, int] = {}
        # A gang's nodes are one unit for the diversification rules (they fail together: losing any
        # one stops the gang, so spreading them would only add exposure). The gang each node serves
        # (existing nodes and nodes bought in this step), and spot nodes per gang.
        self.slot_gang: dict[str, str] = {}
        self.gang_spot_nodes: dict[str, int] = {}
        # sum(spot_nodes_by_offer) - sum(n - 1 over gang_spot_nodes), kept by _charge_offer: summing both per
        # purchase cost a quarter of a 100,000-job pass (thousands of gangs)
        self.spot_units = 0
        self.max_gpus_in_zone: dict[tuple, int] = {}
        for o in self.offers:
            if o.market is Market.SPOT:
                z = o.placement_domain
                self.max_gpus_in_zone[z] = max(self.max_gpus_in_zone.get(z, 0), o.instance_type.gpu_count)
        self._compatible_cache: dict[tuple, tuple[Offer, ...]] = {}
        self._estimates: dict[tuple, _Option | None] = {}
        # Per offer, computed once: key, kind, price, GPUs, vCPUs, GiB, interruption probability.
        self.offer_info = {
            id(o): (o.key, kind_of(o), o.usd_per_hour, o.instance_type.gpu_count, o.instance_type.vcpus,
                    o.instance_type.memory_gib, self._p(o))
            for o in self.offers
        }
        self.offer_key = {i: info[0] for i, info in self.offer_info.items()}
        self.kind_memory = {kind_of(o): o.instance_type.gpu_memory_gib for o in self.offers}
        self._kinds_cache: dict[tuple, tuple[Kind, ...]] = {}
        self.new_count = 0
        self.preempted: set[str] = set()
        self.vacated: set[str] = set()  # nodes preempted jobs leave in this pass: idle from now
        #: the busy nodes holding preemptible jobs, by kind (GPU model, market): a job asks only its kinds'
        self.victim_slots_by_kind: dict[Kind, list[Slot]] = {}
        self._victim_slots_by_lost: dict[Kind, list[tuple[float, str, Slot]]] | None = None  # _victim_slots_in_order
        self.active_jobs: dict[str, Job] = {}
        self.lowest_victim_value: float = math.inf
        self._lost_memo: dict[str, float] = {}
        self._slot_victims: dict[str, tuple[Slot, int, _SlotVictims]] = {}  # name -> (slot, its version, victims)
        self.reservations = 0
        self.on_demand_base_jobs: set[str] = set()
        self.strict = True  # diversification checked after every purchase (see buy)
        self.projected_spot_gpus = 0
        self.projected_total_gpus = 0
        self.spread_premium = _SPREAD_PREMIUM
        self.step_risk = 0.0  # expected loss (USD/h) of the jobs placed on nodes bought in this pass

    # ------------------------------------------------------------------ helpers

    def _allowed(self, offer: Offer) -> bool:
        if offer.market is Market.SPOT and offer.key in self.reclaimed:
            return False
        return policy_allows(self.policy, offer)

    def _p(self, offer: Offer) -> float:
        if offer.market is not Market.SPOT:
            return 0.0
        return self.risk.get(offer.key, self.policy.default_spot_interruption_probability_per_hour)

    def _min_distinct(self) -> int:
        """``min_distinct_offers``, but never more than the distinct spot offers
        on sale now or in use: the rule spreads spot over what exists; it does
        not send spot-eligible work to on-demand because the market shrank to
        fewer offers than it asks for (then all but one node would have to be
        on-demand, as when a single zone has spot capacity)."""
        want = self.policy.min_distinct_offers
        if want <= 1 or len(self.spot_on_sale) >= want:
            return want
        return max(1, min(want, len(self.spot_on_sale | self.spot_nodes_by_offer.keys())))

    def _risk_usd(self, job: Job, workers: int, offer: Offer, loss: float) -> float:
        """Expected USD/h lost by ``workers`` of ``job`` on a node of ``offer``: p x hours lost x the
        job's share of the node x its price (``loss``: :meth:`_loss_hours`)."""
        return self._p(offer) * loss * _risk_share(job, workers, offer.instance_type) * offer.usd_per_hour

    def _loss_hours(self, job: Job) -> float:
        restart = self.policy.restart_overhead_minutes / 60
        if job.checkpointable and job.checkpoint_interval_minutes:
            return min(job.checkpoint_interval_minutes / 60, job.remaining_hours) / 2 + restart
        return job.remaining_hours / 2 + restart

    def _spot_eligible(self, job: Job) -> bool:
        return _spot_eligible(self.policy, job)

    def _spot_ok(self, job: Job) -> tuple[bool, str | None]:
        if not self._spot_eligible(job):
            return False, "not spot-eligible"
        lost_only = self.policy.count_interruptions == "work_lost"
        counted = job.work_lost_interruptions if lost_only else job.interruptions
        if counted > self.policy.max_interruptions_before_on_demand:
            what = "with work lost " if lost_only else ""
            return False, (f"interrupted {counted} times {what}(policy allows "
                           f"{self.policy.max_interruptions_before_on_demand} on spot)")
        spare = self._spot_spare_hours(job)
        if spare is not None and spare < 0:
            return False, "deadline at risk: the slack would not survive one reclaim"
        return True, None

    def _spot_spare_hours(self, job: Job) -> float | None:
        """Hours a deadline job can still spend (waiting, say) and stay on spot:
        spot is only for a job whose deadline survives one reclaim, i.e. the
        work since the last checkpoint (all of it without checkpoints) lost,
        plus a restart. ``None`` without a deadline."""
        if job.deadline_utc is None:
            return None
        left = (job.deadline_utc - self.now).total_seconds() / 3600
        restart = self.policy.restart_overhead_minutes / 60
        if job.checkpointable and job.checkpoint_interval_minutes:
            at_risk = min(job.checkpoint_interval_minutes / 60, job.remaining_hours)
        else:
            at_risk = job.remaining_hours
        return left - job.remaining_hours - at_risk - restart

    def _kinds(self, job: Job, spot_ok: bool) -> tuple[Kind, ...]:
        key = (job.gpu_models, job.gpus_per_worker > 0, job.gpu_memory_gib_per_gpu, spot_ok)
        cached = self._kinds_cache.get(key)
        if cached is not None:
            return cached
        kinds = []
        memory = self.index.gpu_memory_of_kind
        for kind in self.index.kinds():
            model, market = kind
            if market == Market.SPOT.value and not spot_ok:
                continue
            if job.gpus_per_worker > 0 and not model:
                continue
            if job.gpu_models and model not in job.gpu_models:
                continue
            if job.gpu_memory_gib_per_gpu and memory.get(kind, 0.0) < job.gpu_memory_gib_per_gpu:
                continue
            kinds.append(kind)
        result = tuple(kinds)
        self._kinds_cache[key] = result
        return result

    def _shortlist(self, job: Job, spot_ok: bool) -> tuple[Offer, ...]:
        """The offers worth scoring first: the cheapest per GPU and the cheapest
        per node (a small job alone is best on a small node), and, since the
        score adds the expected loss, the cheapest on-demand offers (no risk)
        and the least risky spot offers: with many cheap spot offers on the
        market, the 24 cheapest were all spot, and a risky spot offer won
        over an on-demand one worth less than a fifth of its expected cost."""
        key = ("short", job.gpu_models, job.gpus_per_worker, job.gpu_memory_gib_per_gpu, spot_ok)
        cached = self._compatible_cache.get(key)
        if cached is not None:
            return cached
        full = self._compatible_offers(job, spot_ok)
        by_node = sorted(full, key=lambda o: (o.usd_per_hour, self.offer_key[id(o)]))
        half = _SHORTLIST // 2
        on_demand = [o for o in full if o.market is Market.ON_DEMAND]
        on_demand_by_node = [o for o in by_node if o.market is Market.ON_DEMAND]
        safest_spot = sorted((o for o in full if o.market is Market.SPOT),
                             key=lambda o: (self._p(o), o.usd_per_hour / max(1, o.instance_type.gpu_count),
                                            self.offer_key[id(o)]))
        seen: dict[str, Offer] = {}
        for o in (*full[:_SHORTLIST], *by_node[:_SHORTLIST], *on_demand[:half], *on_demand_by_node[:half],
                  *safest_spot[:half]):
            seen.setdefault(self.offer_key[id(o)], o)
        cached = tuple(seen.values())
        self._compatible_cache[key] = cached
        return cached

    def _compatible_offers(self, job: Job, spot_ok: bool) -> tuple[Offer, ...]:
        """Allowed offers of the right GPU model and market, cheapest per GPU first."""
        key = (job.gpu_models, job.gpus_per_worker, job.gpu_memory_gib_per_gpu, spot_ok)
        cached = self._compatible_cache.get(key)
        if cached is not None:
            return cached
        result = []
        for o in self.offers:
            it = o.instance_type
            if o.market is Market.SPOT and not spot_ok:
                continue
            if job.gpus_per_worker > 0 and (it.gpu_count < job.gpus_per_worker or it.gpu_model is None):
                continue
            if job.gpu_models and it.gpu_model not in job.gpu_models:
                continue
            if job.gpu_memory_gib_per_gpu and it.gpu_memory_gib < job.gpu_memory_gib_per_gpu:
                continue
            result.append(o)
        result.sort(key=lambda o: (o.usd_per_hour / max(1, o.instance_type.gpu_count), self.offer_key[id(o)]))
        cached = tuple(result)
        self._compatible_cache[key] = cached
        return cached

    def _charge_offer(self, offer: Offer, count: int = 1, gang: str | None = None) -> None:
        """Add ``count`` nodes of ``offer`` to the step's totals (negative: remove);
        ``gang``: the multi-node job they serve, whose spot nodes count as one unit."""
        it = offer.instance_type
        if gang is not None and offer.market is Market.SPOT:
            before = self.gang_spot_nodes.get(gang, 0)
            left = before + count
            if left > 0:
                self.gang_spot_nodes[gang] = left
            else:
                self.gang_spot_nodes.pop(gang, None)
            self.spot_units -= max(left - 1, 0) - max(before - 1, 0)
        self.usd += offer.usd_per_hour * count
        self.gpus += it.gpu_count * count
        if offer.market is Market.SPOT:
            self.spot_gpus += it.gpu_count * count
            self.spot_by_type[it.name] = self.spot_by_type.get(it.name, 0) + it.gpu_count * count
            z = offer.placement_domain
            self.spot_by_zone[z] = self.spot_by_zone.get(z, 0) + it.gpu_count * count
            before = self.spot_nodes_by_offer.get(offer.key, 0)
            self.spot_nodes_by_offer[offer.key] = before + count
            self.spot_units += max(before + count, 0) - before
            if self.spot_nodes_by_offer[offer.key] <= 0:
                del self.spot_nodes_by_offer[offer.key]
            if self.spot_by_type[it.name] <= 0:
                del self.spot_by_type[it.name]
            if self.spot_by_zone[z] <= 0:
                del self.spot_by_zone[z]
        else:
            self.on_demand_gpus += it.gpu_count * count

    def _note(self, job: Job, line: str) -> None:
        self.explain.setdefault(job.job_id, []).append(line)

    # ------------------------------------------------------------------ 1. fleet

    def load_fleet(self) -> list[Job]:
        held = {n.node_id for n in self.fleet if n.state in _HELD}
        for job in sorted(self.jobs, key=lambda j: j.job_id):  # each held node counted with one gang at most
            if job.workers > 1 and job.state in (JobState.BOUND, JobState.RUNNING):
                for nid in job.node_ids:
                    if nid in held:
                        self.slot_gang.setdefault(nid, job.job_id)
        for node in self.fleet:
            if node.state not in _HELD:
                continue
            slot = Slot.of(node.node_id, node.offer, new=False, schedulable=node.schedulable,
                           domain=node.placement_domain)
            self.index.add(slot)
            self._charge_offer(node.offer, gang=self.slot_gang.get(node.node_id))
        queued = []
        # Only jobs that hold their nodes now may be preempted: a bound or running job whose node is
        # gone is placed again in this pass like any queued job, and a job placed in this pass is
        # never a victim (it was preempted onto a node it had just been bound to, over-committing it).
        self.active_jobs = {}
        for job in self.jobs:
            if job.state is JobState.QUEUED:
                queued.append(job)
                continue
            if job.state not in (JobState.BOUND, JobState.RUNNING):
                continue
            slots = [self.index.slots.get(n) for n in job.node_ids]
            if job.node_ids and all(slots) and len(job.node_ids) == job.workers:
                for slot in slots:
                    self.index.take(slot, job)  # type: ignore[arg-type]
                self.usage.setdefault(job.team, TeamUsage()).add(job)
                self.active_jobs[job.job_id] = job
            else:
                queued.append(job)
                self._note(job, "its nodes are gone: placed again")
        # An on-demand node that is draining and holds nothing is terminated by this plan (step 4, `idle`)
        # and takes no work: it is not on-demand capacity the market rules may count (it let the step buy
        # spot only, past max_spot_share and the on-demand base). Design choice: a draining spot node
        # still counts as spot. The market rules cap spot exposure, so counting it errs on the safe side
        # (dropping it too moved a held-out window from 166.7 to 215.3 USD, docs/planner.md).
        for node in self.fleet:
            slot = self.index.slots.get(node.node_id)
            if node.state is NodeState.DRAINING and node.offer.market is Market.ON_DEMAND and slot is not None \
                    and not slot.jobs:
                self._charge_offer(node.offer, -1, gang=self.slot_gang.get(node.node_id))
                self.leaving_usd += node.offer.usd_per_hour
                self.leaving_gpus += node.offer.instance_type.gpu_count
        preemptible = {jid for jid, j in self.active_jobs.items() if self.policy.priority_class(j.priority).preemptible}
        self.victim_slots_by_kind = {}
        for slot in self.index.slots.values():
            if any(j in preemptible for j in slot.jobs):
                self.victim_slots_by_kind.setdefault(slot.kind, []).append(slot)
        self._victim_slots_by_lost = None
        # The lowest class value of a possible victim: a job whose band is no higher preempts nobody of a
        # lower class (only a team within its guarantee may take others' work of its own class). Jobs only
        # leave the victims in a pass (preempted), so it stays a lower bound.
        self.lowest_victim_value = min((self.policy.priority_class(self.active_jobs[j].priority).value
                                        for j in preemptible), default=math.inf)
        return queued

    # ------------------------------------------------------------------ 2. queue

    def place_existing(self, job: Job, kinds: tuple[Kind, ...], index: CapacityIndex | None = None) -> list[tuple[Slot, int]] | None:
        index = index or self.index
        ends_at = self.now + timedelta(hours=job.remaining_hours)
        slot = index.best_fit(job, kinds, job.workers, ends_at)
        if slot is not None:
            return [(slot, job.workers)]
        if job.workers > 1:
            return index.gang_in_domain(job, kinds, ends_at)
        return None

    def commit(self, job: Job, placed: list[tuple[Slot, int]], reason: Reason, order: QueueOrder | None) -> None:
        """Bind ``job`` to ``placed``; with ``order``, charge its team now (jobs
        admitted for new capacity were charged at admission)."""
        names = []
        loss = None
        for slot, workers in placed:
            if slot.new:
                loss = self._loss_hours(job) if loss is None else loss
                self.step_risk += self._risk_usd(job, workers, slot.offer, loss)
            (self.new_index if slot.new else self.index).take(slot, job, workers)
            slot.touched = True
            names.extend([slot.name] * workers)
        if order is not None:
            order.charge(job)
        self.actions_bind.append(Bind(job.job_id, tuple(names), reason,
                                      _bind_detail_on(job, (slot for slot, _ in placed))))

    def estimate(self, job: Job, spot_ok: bool) -> _Option | None:
        """The cheapest purchase in dollars for ``job`` alone (cached by shape):
        what admission checks against the budget and the GPU cap."""
        # Design choice: the cache key rounds vCPUs and memory up to a power of
        # two, so the many slightly different shapes of a real queue share one
        # estimate; it is conservative (a bigger shape costs at least as much),
        # and the exact shape is tried when the rounded one fits nowhere, and
        # before the rounded one's price refuses a job (_admission).
        rounded = replace(job, vcpus_per_worker=_pow2(job.vcpus_per_worker),
                          memory_gib_per_worker=_pow2(job.memory_gib_per_worker))
        key = (job.workers, job.gpus_per_worker, rounded.vcpus_per_worker, rounded.memory_gib_per_worker,
               job.gpu_models, job.gpu_memory_gib_per_gpu, spot_ok)
        if key not in self._estimates:
            self._estimates[key] = self._cheapest(rounded, spot_ok)
        return self._estimates[key] or self._cheapest(job, spot_ok)

    @property
    def held_usd(self) -> float:
        """USD per hour of what the fleet holds until this plan's terminations
        run: its nodes, the new ones, and the empty draining on-demand nodes the
        market rules no longer count. The budget is checked against this."""
        return self.usd + self.leaving_usd

    @property
    def held_gpus(self) -> int:
        """GPUs of the same nodes; ``max_gpus`` is checked against this."""
        return self.gpus + self.leaving_gpus

    def _admission(self, job: Job, spot_ok: bool, usd: float,
                   gpus: int) -> tuple[_Option | None, tuple[Reason, str] | None]:
        """The purchase admission counts for ``job`` with the fleet at ``usd``
        and ``gpus``, and what refuses it (the GPU cap, the budget), if
        anything. The cached estimate is conservative (its shape is rounded
        up, and the cheapest in dollars may be a node bigger than the GPU cap
        leaves room for): before a refusal, the cheapest purchase of the job's
        exact shape within the cap is priced."""
        estimate = self.estimate(job, spot_ok)
        if estimate is None:
            return None, self._no_offer(job, spot_ok)
        blocked = self._limit_blocks(job, estimate, usd, gpus)
        if blocked is not None:
            # the cheapest purchase in dollars may be a node bigger than the GPU cap leaves room for
            left = None if self.policy.max_gpus is None else self.policy.max_gpus - gpus
            exact = self._cheapest(job, spot_ok, left) if left is None or left >= job.gpus else None
            if exact is not None and self._limit_blocks(job, exact, usd, gpus) is None:
                return exact, None
        return estimate, blocked

    def _limit_blocks(self, job: Job, option: _Option, usd: float, gpus: int) -> tuple[Reason, str] | None:
        p = self.policy
        more = option.nodes * option.offer.instance_type.gpu_count
        if p.max_gpus is not None and gpus + more > p.max_gpus:
            return (Reason.CAPACITY_LIMIT,
                    f"{_describe_need(job)}; {more} more GPUs would pass the policy's max of {p.max_gpus}")
        if p.max_usd_per_hour is not None and usd + option.usd_per_hour > p.max_usd_per_hour + 1e-9:
            return (Reason.BUDGET_EXCEEDED,
                    f"{_describe_need(job)}; the cheapest fit ({option.offer.instance_type.name}, "
                    f"${option.usd_per_hour:.2f}/h) would take the fleet to "
                    f"${usd + option.usd_per_hour:.2f}/h, above the budget of ${p.max_usd_per_hour:.2f}/h")
        return None

    def _cheapest(self, job: Job, spot_ok: bool, max_gpus: int | None = None) -> _Option | None:
        """The cheapest purchase in dollars for ``job`` alone (``max_gpus``: of
        those that add at most that many GPUs)."""
        def fits(o: _Option) -> bool:
            return max_gpus is None or o.nodes * o.offer.instance_type.gpu_count <= max_gpus

        options = [o for o in self.options(job, spot_ok, short=True) if fits(o)] or \
            [o for o in self.options(job, spot_ok) if fits(o)]
        return min(options, key=lambda o: (o.usd_per_hour, self.offer_key[id(o.offer)])) if options else None

    def options(self, job: Job, spot_ok: bool, short: bool = False, demand: dict[Kind, float] | None = None) -> list[_Option]:
        """Purchase options for ``job`` alone, best score first (``short``: the shortlist only)."""
        result: list[tuple] = []
        loss = self._loss_hours(job)
        need_gpus = job.gpus
        g, v, m, w = job.gpus_per_worker, job.vcpus_per_worker, job.memory_gib_per_worker, job.workers
        demand = demand or {}
        avoid = self._avoided(job, spot_ok)
        # _avoided already gives way when the job avoids every offer it could use; a shortlist of avoided
        # offers gives no option here, and the full list, tried next, holds the ones that did not fail it.
        candidates = self._shortlist(job, spot_ok) if short else self._compatible_offers(job, spot_ok)
        for offer in candidates:
            key, kind, price, gpus, vcpus, mem, p = self.offer_info[id(offer)]
            if avoid and key in avoid:
                continue  # failed this job recently: prefer capacity that does not fail with it
            per = min(int(vcpus // v) if v > 0 else 1 << 30, int(mem // m) if m > 0 else 1 << 30,
                      gpus // g if g > 0 else 1 << 30)
            if per < 1:
                continue
            n = -(-w // per)
            if gpus:
                spare = n * gpus - need_gpus
                useful = need_gpus + min(spare, demand.get(kind, 0.0))
            else:
                useful = max(1.0, v * w)
            risk = p * loss * _risk_share(job, w, offer.instance_type) * price
            cost = n * price + risk
            result.append((cost / max(useful, 1e-9), cost, key, n, offer, risk))
        result.sort(key=lambda t: t[:3])
        return [_Option(score, cost, n, offer, risk) for score, cost, _, n, offer, risk in result]

    def run_queue(self, queued: list[Job]) -> list[tuple[Job, bool]]:
        totals = [0.0, 0.0, 0.0]
        for slot in self.index.slots.values():
            it = slot.offer.instance_type
            totals[0] += it.gpu_count
            totals[1] += it.vcpus
            totals[2] += it.memory_gib
        for job in queued:
            totals[0] += job.gpus
            totals[1] += job.vcpus_per_worker * job.workers
            totals[2] += job.memory_gib_per_worker * job.workers
        order = QueueOrder(queued, self.policy, self.now, self.usage, tuple(totals))
        self.order = order
        admitted: list[tuple[Job, bool]] = []
        committed_usd = self.held_usd
        committed_gpus = self.held_gpus
        for job in order:
            spot_ok, why_not_spot = self._spot_ok(job)
            if why_not_spot and job.spot_eligible is not False:
                self._note(job, f"on-demand only: {why_not_spot}")
            kinds = self._kinds(job, spot_ok)
            # The burst limit caps what a team uses in total, on free capacity too.
            quota = over_burst(job, self.usage, self.policy)
            if quota is not None:
                self.unplaced.append(Unplaced(job.job_id, Reason.QUOTA_EXCEEDED, quota))
                continue
            placed = self.place_existing(job, kinds)
            if placed is not None and spot_ok:
                placed = self._spot_before_idle(job, placed, kinds)
            idle = None  # the idle node(s) it skipped for a purchase
            if placed is not None and spot_ok and self._idle_dearer(job, placed, spot_ok, committed_usd,
                                                                    committed_gpus):
                self.idle_fallback.add(job.job_id)
                idle, placed = placed, None
            if placed is not None:
                self.commit(job, placed, Reason.FITS_FREE_CAPACITY, order)
                continue
            if job.job_id not in self.idle_fallback:
                self._note(job, "free capacity: no node (or zone) with room for it")
            estimate, blocked = self._admission(job, spot_ok, committed_usd, committed_gpus)
            if blocked is None and spot_ok:
                waiting = self._waits_for_spot(job)
                if waiting is not None:
                    self.unplaced.append(Unplaced(job.job_id, *waiting))
                    continue
            if blocked is None:
                committed_usd += estimate.usd_per_hour  # type: ignore[union-attr]
                committed_gpus += estimate.nodes * estimate.offer.instance_type.gpu_count  # type: ignore[union-attr]
                order.charge(job)  # fair share counts what the team is about to get
                admitted.append((job, spot_ok))
                continue
            if idle is not None:  # refused the purchase after all: the idle node, not someone else's
                self.idle_fallback.discard(job.job_id)
                self.commit(job, idle, Reason.FITS_FREE_CAPACITY, order)
                continue
            if self.try_preempt(job, kinds, order):
                continue
            reason, detail = blocked
            start = None
            if job.workers > 1 and self.reservations < _MAX_RESERVATIONS:
                start = self.reserve(job, kinds)
                self.reservations += start is not None
            if start is not None:
                detail += f"; waits for running work to end (~{start:%Y-%m-%d %H:%M} UTC)"
            self.unplaced.append(Unplaced(job.job_id, reason, detail))
        return admitted

    def _waits_for_spot(self, job: Job) -> tuple[Reason, str] | None:
        """Design choice (``markets.max_wait_for_spot_minutes``): a spot-eligible
        job in the queue (new, or requeued after a reclaim) that finds no spot offer at all waits for
        spot, up to the policy's patience, instead of buying on-demand at once;
        never past what its deadline's slack allows (after the wait, the job
        must still be allowed on spot: :meth:`_spot_spare_hours`). Checked each pass, so the job
        is placed on spot as soon as an offer comes back, and on-demand once the
        patience is spent."""
        patience = self.policy.max_wait_for_spot_minutes / 60
        if patience <= 0 or self.policy.max_spot_share <= 0:
            return None  # no patience, or a fleet that may hold no spot: nothing to wait for
        if any(o.market is Market.SPOT for o in self._compatible_offers(job, True)):
            return None
        waited = (self.now - job.queued_since_utc).total_seconds() / 3600
        if waited >= patience:
            self._note(job, f"no spot offer after {waited * 60:.0f} min of waiting "
                            f"(policy waits {self.policy.max_wait_for_spot_minutes:g}): on-demand")
            return None
        spare = self._spot_spare_hours(job)
        if spare is not None and spare < patience - waited:
            return None  # after the wait, spot would be too risky for the deadline anyway
        return (Reason.WAITING_FOR_CAPACITY,
                f"{_describe_need(job)}; no spot offer available now: waits for spot up to "
                f"{self.policy.max_wait_for_spot_minutes:g} min (waited {waited * 60:.0f}) before on-demand")

    def _spot_before_idle(self, job: Job, placed: list[tuple[Slot, int]],
                          kinds: tuple[Kind, ...]) -> list[tuple[Slot, int]]:
        """A spot-eligible job that fits idle on-demand node(s) takes room on
        existing spot nodes instead when that costs less for its run: an idle
        spot node at its risk-adjusted price, room on a busy one at its
        expected loss alone, against the idle on-demand price. The best fit
        ties between equal leftovers went to on-demand (its kinds sort first),
        so an idle spot node idled out while the job kept a dearer idle
        on-demand node, or skipped it for a new spot node like the idle one
        (before 2026-11-28)."""
        if any(sl.new or sl.jobs or sl.offer.market is not Market.ON_DEMAND for sl, _ in placed):
            return placed
        spot_kinds = tuple(k for k in kinds if k[1] == Market.SPOT.value)
        alt = self.place_existing(job, spot_kinds) if spot_kinds else None
        if alt is None:
            return placed
        loss = self._loss_hours(job)
        cost = 0.0
        for sl, workers in alt:
            cost += self._risk_usd(job, workers, sl.offer, loss) + (0.0 if sl.jobs else sl.offer.usd_per_hour)
        held = sum(sl.offer.usd_per_hour for sl, _ in placed)
        if cost >= held:
            return placed
        self._note(job, f"took room on spot {', '.join(sorted({sl.name for sl, _ in alt}))} (${cost:.2f}/h "
                        f"risk-adjusted) before idle {', '.join(sl.name for sl, _ in placed)} (${held:.2f}/h)")
        return alt

    def _idle_dearer(self, job: Job, placed: list[tuple[Slot, int]], spot_ok: bool, committed_usd: float,
                     committed_gpus: int) -> bool:
        """An idle node is not a sunk cost: binding a job to it keeps it, at its
        price, for the job's whole run. Design choice: a spot-eligible job skips
        idle existing nodes (typically on-demand bought while spot was short)
        when new spot capacity, risk-adjusted, saves more over the job's
        remaining hours than the idle node costs until its idle timeout ends
        it, if the budget and the GPU cap allow the purchase. If the purchase
        then fails, the job still takes the idle node (at admission, rather
        than preempting anyone; after the step, ``_fallback_to_idle``)."""
        if not self.policy.replace_on_demand_with_spot:
            return False
        if any(slot.new or slot.jobs or slot.offer.market is not Market.ON_DEMAND for slot, _ in placed):
            return False
        estimate = self.estimate(job, spot_ok)
        if estimate is None or estimate.offer.market is not Market.SPOT:
            return False
        if self.policy.max_usd_per_hour is not None and \
                committed_usd + estimate.usd_per_hour > self.policy.max_usd_per_hour + 1e-9:
            return False
        if self.policy.max_gpus is not None and \
                committed_gpus + estimate.nodes * estimate.offer.instance_type.gpu_count > self.policy.max_gpus:
            return False
        held = sum(slot.offer.usd_per_hour for slot, _ in placed)
        saved = (held - estimate.cost) * job.remaining_hours
        if saved <= held * self.policy.idle_timeout_minutes / 60:
            return False
        self._note(job, f"skipped idle {placed[0][0].offer.instance_type.name} ({placed[0][0].offer.market.value}, "
                        f"${held:.2f}/h): new {estimate.offer.instance_type.name} spot saves ${saved:.2f} over its run")
        return True

    def _new_kinds(self, job: Job, spot_ok: bool) -> tuple[Kind, ...]:
        """The kinds of the nodes bought in this pass that can hold ``job``."""
        return tuple(sorted(k for k in self.new_index.by_kind if self._kind_ok(job, k, spot_ok)))

    def _limited_into_leftovers(self) -> None:
        """Jobs refused for the budget or the GPU cap at admission take room
        left on nodes bought in this step: it costs nothing more (admission
        charged each job a node of its own; packing left room)."""
        if self.policy.max_usd_per_hour is None and self.policy.max_gpus is None:
            return
        limits = (Reason.BUDGET_EXCEEDED, Reason.CAPACITY_LIMIT)
        for waiting in [u for u in self.unplaced if u.reason in limits]:
            job = self.jobs_by_id.get(waiting.job_id)
            if job is None or over_burst(job, self.usage, self.policy) is not None:
                continue
            spot_ok, _ = self._spot_ok(job)
            placed = self.place_existing(job, self._new_kinds(job, spot_ok), self.new_index)
            if placed is None:
                # A job the on-demand base or the spot share moved to on-demand buys on-demand or nothing: a spot
                # purchase would break the rule it was moved for (before 2026-11-28 it bought spot, launched as
                # on_demand_base). Room on a node the step bought anyway changes neither rule: it may take that.
                self._admit_after_all(job, spot_ok and job.job_id not in self.on_demand_base_jobs, waiting)
                continue
            self.unplaced.remove(waiting)
            self._note(job, "took room left on a node bought in this step (nothing more to buy)")
            self.commit(job, placed, Reason.FITS_NEW_CAPACITY, self.order)  # charges its team

    def _admit_after_all(self, job: Job, spot_ok: bool, waiting: Unplaced) -> None:
        """Admission charged each admitted job its cheapest node of its own;
        packing usually spent less. A job refused for the budget or the GPU
        cap buys now if its cheapest purchase fits what the step actually
        spent (before, it waited a pass with a reason quoting a fleet cost
        the plan did not reach). Not while the scale-up cooldown defers
        purchases; the diversification rules are checked after the purchase."""
        if self.scale_up_wait is not None:
            return
        estimate, blocked = self._admission(job, spot_ok, self.held_usd, self.held_gpus)
        if estimate is None or blocked is not None:
            return
        self.unplaced.remove(waiting)
        self.order.charge(job)  # type: ignore[union-attr]
        # The rules against what the step holds now, checked at this purchase: the step's projections
        # (what buy() expected the whole step to hold) are spent once buy() is done.
        self.strict = True
        self.projected_spot_gpus = self.projected_total_gpus = 0
        self._note(job, f"admitted after the step's purchases: they cost less than admission counted "
                        f"(fleet ${self.held_usd:.2f}/h before this job)")
        self._buy_one(job, spot_ok, {})

    def _idle_after_all(self) -> None:
        """Jobs that skipped an idle on-demand node for new spot but were bought
        on-demand after all (the on-demand base, the spot share, a spread rule)
        take idle on-demand nodes instead, when they hold their new nodes alone
        and the idle nodes taken cost no more and hold at least as many GPUs
        (so the fleet keeps as much on-demand as the purchase gave it): before
        2026-11-28 the plan launched an on-demand node and terminated an idle
        one like it."""
        if not self.idle_fallback:
            return
        for job_id in sorted(self.idle_fallback):
            job = self.jobs_by_id[job_id]
            slots = [sl for sl in self.new_index.slots.values() if job_id in sl.jobs]
            if not slots or any(sl.offer.market is not Market.ON_DEMAND or len(sl.jobs) != 1 for sl in slots):
                continue
            spot_ok, _ = self._spot_ok(job)
            kinds = tuple(k for k in self._kinds(job, spot_ok) if k[1] == Market.ON_DEMAND.value)
            placed = self.place_existing(job, kinds)
            if placed is None or any(sl.jobs for sl, _ in placed):
                continue
            kept = sum(sl.offer.usd_per_hour for sl, _ in placed)
            bought = sum(sl.offer.usd_per_hour for sl in slots)
            if kept > bought + 1e-9 or sum(sl.offer.instance_type.gpu_count for sl, _ in placed) < \
                    sum(sl.offer.instance_type.gpu_count for sl in slots):
                continue
            for sl in slots:
                self._drop_new(sl, [job])
            self.actions_bind[:] = [b for b in self.actions_bind if b.job_id != job_id]
            self._note(job, f"then took idle {', '.join(sl.name for sl, _ in placed)} (${kept:.2f}/h) after all: "
                            f"its purchase came out on-demand, not spot "
                            f"({', '.join(sorted({self._node_text(sl.offer) for sl in slots}))})")
            self.commit(job, placed, Reason.FITS_FREE_CAPACITY, None)

    def _fallback_to_idle(self) -> None:
        """Jobs that skipped an idle node for a purchase that did not happen take a node after all."""
        if not self.idle_fallback:
            return
        waiting = {u.job_id: u for u in self.unplaced}
        for job_id in sorted(self.idle_fallback):
            if job_id not in waiting:
                continue
            job = self.jobs_by_id[job_id]
            spot_ok, _ = self._spot_ok(job)
            placed = self.place_existing(job, self._kinds(job, spot_ok))
            if placed is None:
                continue
            self.unplaced.remove(waiting[job_id])
            self._note(job, "the purchase it skipped an idle node for did not happen: took the idle node")
            self.commit(job, placed, Reason.FITS_FREE_CAPACITY, self.order)

    def _no_offer(self, job: Job, spot_ok: bool) -> tuple[Reason, str]:
        return _no_offer(job, self.offers, spot_ok)

    # ------------------------------------------------------------------ preemption

    def try_preempt(self, job: Job, kinds: tuple[Kind, ...], order: QueueOrder) -> bool:
        """Free room for ``job`` by preempting the smallest set of lower,
        preemptible jobs: checkpointable ones and those with the least work
        since their last checkpoint first. One node for a job that fits one,
        otherwise one zone."""
        band = order.band_of.get(job.job_id, self.policy.priority_class(job.priority).value)
        active = self.active_jobs
        # A team within its guaranteed_gpus may also preempt other teams' preemptible work of its own
        # class or lower, as far as those teams are above their own guarantees (what they borrowed).
        # Guarantees are GPUs: a CPU-only job claims none (before 2026-11-28 it claimed when its team was
        # within them, even at 0 + 0 <= 0, and teams without guarantees took each other's CPU-only jobs,
        # one each pass). Another team's CPU-only job may still be taken by a GPU job's claim, as work of
        # a team at or above its guarantee (it can hold the vCPUs or memory the claim needs).
        claims = job.gpus > 0 and self._usage_gpus(job.team) + job.gpus <= self.policy.team(job.team).guaranteed_gpus

        def victim_ok(jid: str) -> bool:
            v = active.get(jid)
            if v is None or jid in self.preempted:
                return False
            pc = self.policy.priority_class(v.priority)
            if not pc.preemptible:
                return False
            return pc.value < band or (claims and v.team != job.team and pc.value <= band
                                       and self._usage_gpus(v.team) - v.gpus >= self.policy.team(v.team).guaranteed_gpus)

        def victims_of(slot: Slot) -> list[Job]:
            """The jobs ``job`` may preempt on ``slot``, in victim order: ``victim_ok``'s, with the
            test of a lower class alone when no guarantee is claimed (the common case, at scale)."""
            if claims:
                return [v for _, v in self._victims_on(slot).order if victim_ok(v.job_id)]
            return [v for value, v in self._victims_on(slot).order if value < band and v.job_id not in self.preempted]

        def room_of(slot: Slot) -> tuple[float, float, float]:
            """At least the GPUs, vCPUs and GiB ``job`` could have on ``slot``: every job it may take
            there gone (``_SlotVictims``). With no claim and no job of a lower class there, it may take
            nobody: its free room."""
            kept = self._victims_on(slot)
            if not claims and kept.lowest_value >= band:
                return slot.free_gpus, slot.free_vcpus, slot.free_memory_gib
            return kept.gpus, kept.vcpus, kept.memory_gib

        kind_set = set(kinds)
        ends_at = self.now + timedelta(hours=job.remaining_hours)
        need_g = job.gpus_per_worker * job.workers  # as _victims_for works it out
        need_v = job.vcpus_per_worker * job.workers
        need_m = job.memory_gib_per_worker * job.workers
        best: tuple | None = None
        # No victim can be of a class below this job's and no guarantee lets it take its own class: no node
        # is asked (plan_preemption.py at 5,000 nodes: 18.6 s without this test, 10.9 s with it). Else the
        # nodes of the job's kinds only. The order they are asked in does not change the choice: the best
        # key is the least, and no two are equal (each ends with its node's name).
        nobody = not claims and band <= self.lowest_victim_value
        for kind in () if nobody else kinds:
            # Two bounds skip most nodes before their victims are worked out, and never one that could win
            # (test_planner_rules: the room is exact, not a hair short; a node asked later still wins):
            # * a node whose free GPUs do not hold the job takes at least one victim, so its key is at least
            #   (1, the least work a job on it loses, its name). Nodes are asked in that order (a lower
            #   bound of it: _victim_slots_in_order), so once one such node cannot beat the best so far,
            #   no later one can: from there on only nodes with the GPUs free are asked;
            # * a node whose room with every job it may take gone (room_of) does not hold the job has none.
            past_best = False
            for least_lost, name, slot in self._victim_slots_in_order().get(kind, ()):
                if best is not None and slot.free_gpus < need_g:
                    if past_best:
                        continue
                    if (1, least_lost, name) > best[0]:
                        past_best = True
                        continue
                if not slot.schedulable:
                    continue
                if slot.reserved_until is not None and ends_at > slot.reserved_until:
                    continue  # a waiting gang's: only work that ends before the gang starts (backfill)
                room_g, room_v, room_m = room_of(slot)
                if room_g < need_g or room_v < need_v or room_m < need_m:
                    continue
                victims = victims_of(slot)
                if not victims:
                    continue
                chosen = self._victims_for(job, slot, victims, job.workers)
                # without a claim every victim is of a lower class: no guarantee is at stake
                if chosen is None or (claims and not self._guarantees_kept(chosen, band)):
                    continue
                key = (len(chosen), sum(self._lost_hours(v) for v in chosen), name)
                if best is None or key < best[0]:
                    best = (key, slot, chosen)
        if best is not None:
            _, slot, chosen = best
            self._preempt_for(job, [(slot, job.workers)], chosen, order)
            return True
        if job.workers > 1:  # a gang: several nodes of one zone
            spread = self._victims_in_domain(job, kind_set, victims_of, room_of, nobody,
                                             lambda chosen: not claims or self._guarantees_kept(chosen, band))
            if spread is not None:
                self._preempt_for(job, *spread, order)
                return True
        return False

    def _victim_slots_in_order(self) -> dict[Kind, list[tuple[float, str, Slot]]]:
        """``victim_slots_by_kind``, each node with the least work a preemptible job on it loses, in that
        order (then by name): what try_preempt asks them in. Worked out at the first ask (a pass that
        tries no preemption pays nothing for it: 40 ms at 5,000 nodes in plan_speed.py). Jobs only leave a
        node in a pass (preempted), so a node's least lost work only grows: the listed value stays a
        lower bound, and the order is not made again."""
        if self._victim_slots_by_lost is None:
            self._victim_slots_by_lost = {
                kind: sorted(((self._victims_on(slot).least_lost_hours, slot.name, slot) for slot in slots),
                             key=lambda entry: entry[:2])
                for kind, slots in self.victim_slots_by_kind.items()
            }
        return self._victim_slots_by_lost

    def _lost_hours(self, v: Job) -> float:
        """``v``'s work since its last checkpoint at ``now`` (what preempting it loses), read once a pass."""
        lost = self._lost_memo.get(v.job_id)
        if lost is None:
            lost = self._lost_memo[v.job_id] = v.work_since_checkpoint_hours(self.now)
        return lost

    def _victim_key(self, v: Job) -> tuple:
        """Victims in the order they are taken: checkpointable first, the least work lost, the most GPUs."""
        return (not v.checkpointable, self._lost_hours(v), -v.gpus, v.job_id)

    def _victims_on(self, slot: Slot) -> _SlotVictims:
        """The active, preemptible jobs on ``slot`` in ``_victim_key`` order, with the room they bound
        (``_SlotVictims``). Kept per slot, and made again when the slot changes (a preemption, a bind):
        every queued job that may preempt asks every node, and sorting them again each time was most of
        a plan at 5,000 nodes (benchmarks/results/plan_preemption.md)."""
        kept = self._slot_victims.get(slot.name)
        if kept is not None and kept[0] is slot and kept[1] == slot.version:
            return kept[2]
        order = []
        for jid in slot.jobs:
            v = self.active_jobs.get(jid)
            if v is not None:
                pc = self.policy.priority_class(v.priority)
                if pc.preemptible:
                    order.append((pc.value, v))
        order.sort(key=lambda entry: self._victim_key(entry[1]))
        # Each addend is kept at 0 or above, so that every partial sum _victims_for reaches over a subset
        # of these jobs (in this order, from the same free room) is at most this sum, whatever the inputs.
        gpus, vcpus, memory = slot.free_gpus, slot.free_vcpus, slot.free_memory_gib
        for _, v in order:
            w = slot.jobs[v.job_id]
            gpus += max(0, v.gpus_per_worker * w)
            vcpus += max(0.0, v.vcpus_per_worker * w)
            memory += max(0.0, v.memory_gib_per_worker * w)
        record = _SlotVictims(tuple(order), gpus, vcpus, memory, min((value for value, _ in order), default=math.inf),
                              min((self._lost_hours(v) for _, v in order), default=math.inf))
        self._slot_victims[slot.name] = (slot, slot.version, record)
        return record

    def _usage_gpus(self, team: str) -> float:
        usage = self.usage.get(team)
        return usage.gpus if usage is not None else 0.0

    def _guarantees_kept(self, chosen: list[Job], band: float) -> bool:
        """The victims taken for a guarantee (not of a lower class) leave each
        of their teams at or above its own guarantee, all of them together."""
        taken: dict[str, float] = {}
        for v in chosen:
            if self.policy.priority_class(v.priority).value >= band:
                taken[v.team] = taken.get(v.team, 0.0) + v.gpus
        return all(self._usage_gpus(t) - g >= self.policy.team(t).guaranteed_gpus for t, g in taken.items())

    def _preempt_for(self, job: Job, placed: list[tuple[Slot, int]], chosen: list[Job], order: QueueOrder) -> None:
        """Preempt ``chosen`` and bind ``job`` to ``placed``."""
        where = ", ".join(slot.name for slot, _ in placed)
        band = order.band_of.get(job.job_id, self.policy.priority_class(job.priority).value)
        for v in chosen:
            # A victim is an active job: it holds the nodes it is bound to (load_fleet), and no other. They
            # are given back in the index's order (node names: load_fleet files the fleet sorted), as a walk
            # over every slot did (0.6 of 5 s at 5,000 nodes in plan_preemption.py).
            for name in sorted(set(v.node_ids)):
                s = self.index.slots.get(name)
                if s is not None and v.job_id in s.jobs:
                    self.index.give_back(s, v)
                    self.vacated.add(s.name)
            order.charge(v, sign=-1)
            self.preempted.add(v.job_id)
            lost = self._lost_hours(v)
            lower = self.policy.priority_class(v.priority).value < band
            self.actions_preempt.append(Preempt(
                v.job_id, job.job_id,
                Reason.PREEMPTED_BY_HIGHER_PRIORITY if lower else Reason.PREEMPTED_FOR_GUARANTEE,
                f"makes room on {where} for {job.job_id} ({job.priority}"
                + ("); " if lower else f", team {job.team} within its guaranteed GPUs; {v.team} is above its own); ")
                + ("checkpointable: it checkpoints before it stops" if v.checkpointable
                   else f"not checkpointable: loses {lost:.2f} h of work"),
            ))
        self.commit(job, placed, Reason.FITS_FREE_CAPACITY, order)
        self._note(job, f"preempted {', '.join(v.job_id for v in chosen)} on {where}" if chosen else
                   f"placed on {where}, in free room the preemption search found (a gang's search of free "
                   "capacity looks at a bounded number of zones); nobody preempted")

    def _victims_in_domain(self, job: Job, kind_set: set, victims_of, room_of, nobody: bool,  # noqa: ANN001, ANN202
                           keeps_guarantees: Callable[[list[Job]], bool]):
        """A gang's room on several nodes of one placement domain: per node the
        workers its free room holds (no victim), and the most workers it can
        take with the fewest victims; free room first, then nodes needing fewer
        victims; the domain with the fewest victims (then the least work lost)
        whose victims ``keeps_guarantees`` wins. Returns ([(slot, workers)],
        victims) or None. ``try_preempt``'s ``victims_of`` and ``room_of`` (a
        bound: no room for w workers there, no victims for them), and whether
        it may take nobody anywhere (then ``room_of`` is the free room). A node
        reserved for a waiting gang is used by a gang that ends before the
        reservation, as by one node's search (backfill).
        Before 2026-11-28: reserved nodes were left out whatever the gang's end;
        a node's free room counted only through its most workers (a gang took
        one more victim beside free room for its last worker); and the
        guarantees were checked for the best domain alone (a claim that broke
        them there preempted nowhere, though another domain kept them)."""
        gpw, vpw, mpw = job.gpus_per_worker, job.vcpus_per_worker, job.memory_gib_per_worker
        monotone = gpw >= 0 and vpw >= 0 and mpw >= 0  # then no room for one worker is no room for more
        ends_at = self.now + timedelta(hours=job.remaining_hours)

        def backfills(slot: Slot) -> bool:
            return slot.reserved_until is None or ends_at <= slot.reserved_until

        by_domain: dict = {}
        if nobody and monotone:
            # Only nodes with free GPUs for a worker can offer one: those the index files with that many
            # free (its schedulable slots), rather than every node (at 5,000 nodes in plan_preemption.py,
            # 407 such gangs looked at 1.45 million nodes, 0.16 million of them with the GPUs free). The
            # lists are sorted below, so the order they are gathered in does not matter.
            for kind in kind_set:
                for domain in self.index.domains_of_kind.get(kind, ()):
                    for free, group in self.index.by_domain_kind.get((domain, kind), {}).items():
                        if free >= gpw:
                            for slot in group.values():
                                if backfills(slot):
                                    by_domain.setdefault(domain, []).append(slot)
        else:
            for slot in self.index.slots.values():
                if slot.schedulable and slot.kind in kind_set and backfills(slot):
                    by_domain.setdefault(slot.domain, []).append(slot)
        best: tuple | None = None
        for domain in sorted(by_domain, key=str):
            options = []
            for slot in sorted(by_domain[domain], key=lambda sl: sl.name):
                room_g, room_v, room_m = room_of(slot)
                if monotone and (room_g < gpw or room_v < vpw or room_m < mpw):
                    continue
                top = victims = None
                # the most workers first, as many as a node of its offer holds (_per_node, worked out
                # only for a node with room for some); _victims_for is not asked where room_of rules out w
                for w in range(job.workers, 0, -1):
                    if room_g < gpw * w or room_v < vpw * w or room_m < mpw * w:
                        continue
                    if top is None:
                        top = _per_node(job, slot.offer)
                    if w > top:
                        continue
                    if victims is None:
                        victims = victims_of(slot)
                    chosen = self._victims_for(job, slot, victims, w)
                    if chosen is not None:
                        options.append((len(chosen), -w, slot.name, slot, victims))
                        if chosen:  # and the workers its free room holds, with no victim
                            free = next((f for f in range(w - 1, 0, -1)
                                         if self._victims_for(job, slot, [], f) is not None), 0)
                            if free:
                                options.append((0, -free, slot.name, slot, victims))
                        break
            options.sort(key=lambda o: o[:3])
            taken: dict[str, list] = {}  # node name -> [slot, victims, workers], in the order first taken
            left = job.workers
            for _, neg_w, name, slot, victims in options:
                if left <= 0:
                    break
                entry = taken.setdefault(name, [slot, victims, 0])
                more = min(-neg_w - entry[2], left)  # a node's free room first, then its most workers
                if more > 0:
                    entry[2] += more
                    left -= more
            if left > 0:
                continue
            placed: list[tuple[Slot, int]] = []
            victims_all: dict[str, Job] = {}
            for slot, victims, workers in taken.values():
                if workers:
                    for v in self._victims_for(job, slot, victims, workers) or ():
                        victims_all[v.job_id] = v
                    placed.append((slot, workers))
            chosen_all = sorted(victims_all.values(), key=self._victim_key)
            if not keeps_guarantees(chosen_all):
                continue
            key = (len(chosen_all), sum(self._lost_hours(v) for v in chosen_all), str(domain))
            if best is None or key < best[0]:
                best = (key, placed, chosen_all)
        return None if best is None else (best[1], best[2])

    def _victims_for(self, job: Job, slot: Slot, victims: list[Job], workers: int) -> list[Job] | None:
        g, v, m = slot.free_gpus, slot.free_vcpus, slot.free_memory_gib
        need = (job.gpus_per_worker * workers, job.vcpus_per_worker * workers, job.memory_gib_per_worker * workers)
        chosen: list[Job] = []
        for victim in victims:
            if g >= need[0] and v >= need[1] and m >= need[2]:
                break
            w = slot.jobs[victim.job_id]
            g += victim.gpus_per_worker * w
            v += victim.vcpus_per_worker * w
            m += victim.memory_gib_per_worker * w
            chosen.append(victim)
        if not (g >= need[0] and v >= need[1] and m >= need[2]):
            return None
        # Drop victims that turned out unnecessary (smallest set).
        for victim in list(reversed(chosen)):
            w = slot.jobs[victim.job_id]
            g2, v2, m2 = g - victim.gpus_per_worker * w, v - victim.vcpus_per_worker * w, m - victim.memory_gib_per_worker * w
            if g2 >= need[0] and v2 >= need[1] and m2 >= need[2]:
                chosen.remove(victim)
                g, v, m = g2, v2, m2
        return chosen

    # ------------------------------------------------------------------ waiting and backfill

    def reserve(self, job: Job, kinds: tuple[Kind, ...]) -> datetime | None:
        """Estimate when a waiting job could start on existing nodes (as their
        jobs end) and reserve those nodes until then: later jobs may use their
        free room only if they end before (backfill)."""
        if job.workers > 1 and job.gpus_per_worker * job.workers > max(
            (s.offer.instance_type.gpu_count for s in self.index.slots.values()), default=0
        ):
            per_slot = 1
        else:
            per_slot = job.workers
        ends: dict[str, datetime] = {}
        by_id = {j.job_id: j for j in self.jobs}
        kind_set = set(kinds)
        candidates = []
        for slot in self.index.slots.values():
            if not slot.schedulable or slot.kind not in kind_set or slot.reserved_for is not None:
                continue
            it = slot.offer.instance_type
            if it.gpu_count < job.gpus_per_worker * per_slot:
                continue
            g, when = slot.free_gpus, self.now
            releases = []
            for jid, w in slot.jobs.items():
                j = by_id.get(jid)
                if j is None:
                    continue
                end = ends.get(jid)
                if end is None:
                    end = (j.started_at_utc or self.now) + timedelta(hours=j.duration_hours)
                    ends[jid] = end
                releases.append((end, j.gpus_per_worker * w))
            releases.sort()
            for end, freed in releases:
                if g >= job.gpus_per_worker * per_slot:
                    break
                g += freed
                when = max(when, end)
            if g >= job.gpus_per_worker * per_slot:
                candidates.append((when, slot.name, slot))
        needed = 1 if per_slot == job.workers else job.workers
        # A gang's nodes are of one placement domain: the domain whose needed-th node frees first
        # (before 2026-11-28 the earliest nodes of any zones, a start it could not have).
        by_domain: dict[object, list[tuple[datetime, str, Slot]]] = {}
        for entry in candidates:
            by_domain.setdefault(entry[2].domain if needed > 1 else None, []).append(entry)
        chosen = None
        for group in by_domain.values():
            if len(group) < needed:
                continue
            group.sort(key=lambda t: (t[0], t[1]))
            if chosen is None or (group[needed - 1][0], group[0][1]) < (chosen[-1][0], chosen[0][1]):
                chosen = group[:needed]
        if chosen is None:
            return None
        start = max(t[0] for t in chosen)
        for _, _, slot in chosen:
            slot.reserved_until = start
            slot.reserved_for = job.job_id
            self.index.reservations += 1
        return start

    # ------------------------------------------------------------------ 3. new capacity

    def buy(self, admitted: list[tuple[Job, bool]]) -> None:
        """Step 3. Design choice: the diversification caps are first checked
        against the spot capacity the whole step is expected to hold (so the
        first large gang is not pushed to on-demand just because it comes
        first); if the result breaks a rule, the step is redone with the strict
        rule checked after every purchase, which cannot end in a violation."""
        rank = {job.job_id: i for i, (job, _) in enumerate(admitted)}
        admitted = self._on_demand_base(admitted)
        kinds_of: dict[str, tuple[Kind, ...]] = {}
        all_kinds = {kind_of(o) for o in self.offers}
        by_signature: dict[tuple, tuple[Kind, ...]] = {}
        demand: dict[Kind, float] = {}
        for job, spot_ok in admitted:
            sig = (job.gpu_models, job.gpus_per_worker > 0, job.gpu_memory_gib_per_gpu, spot_ok)
            ks = by_signature.get(sig)
            if ks is None:
                ks = by_signature[sig] = tuple(sorted(k for k in all_kinds if self._kind_ok(job, k, spot_ok)))
            kinds_of[job.job_id] = ks
            if job.workers == 1:
                for k in self._likely_kinds(ks, spot_ok):
                    demand[k] = demand.get(k, 0.0) + job.gpus
        snapshot = self._snapshot()
        self.spread_excess_before = self._spread_excess()
        orderings = self._orderings(admitted, rank)
        if len(orderings) == 1:
            self._buy_in_order(orderings[0], admitted, kinds_of, demand, snapshot)
            return
        # Design choice: for small steps, try a few orders (largest first, most
        # constrained first, ...) and keep the cheapest result: greedy packing
        # is sensitive to order, and these few passes cost milliseconds here.
        best: tuple | None = None
        for i, ordered in enumerate(orderings):
            self._buy_in_order(ordered, admitted, kinds_of, demand, snapshot)
            key = (len(self.unplaced), round(self.usd + self.step_risk, 6), i)
            if best is None or key < best:
                best = key
            self._restore(snapshot)
        self._buy_in_order(orderings[best[2]], admitted, kinds_of, demand, snapshot)  # type: ignore[index]

    def _orderings(self, admitted: list[tuple[Job, bool]], rank: dict[str, int]) -> list[list[tuple[Job, bool]]]:
        """Jobs bound to on-demand first (they count toward the base), then:
        best-fit decreasing; most constrained (fewest offers) first; biggest
        worker first; most memory first."""
        bfd = sorted(admitted, key=lambda t: (t[1], -t[0].gpus, -t[0].workers, rank[t[0].job_id]))
        if len(admitted) > _MULTI_ORDER_MAX_JOBS:
            return [bfd]
        choices = {t[0].job_id: len(self._compatible_offers(t[0], t[1])) for t in admitted}
        return [
            bfd,
            sorted(admitted, key=lambda t: (t[1], choices[t[0].job_id], -t[0].gpus, rank[t[0].job_id])),
            sorted(admitted, key=lambda t: (t[1], -t[0].gpus_per_worker, -t[0].memory_gib_per_worker, -t[0].gpus,
                                            rank[t[0].job_id])),
            sorted(admitted, key=lambda t: (t[1], -t[0].memory_gib_per_worker * t[0].workers, -t[0].gpus,
                                            rank[t[0].job_id])),
            sorted(admitted, key=lambda t: (t[1], t[0].gpus, t[0].workers, rank[t[0].job_id])),
            sorted(admitted, key=lambda t: (t[1], -t[0].workers, -t[0].gpus, rank[t[0].job_id])),
            # without the on-demand-first grouping: scarce capacity first, whatever the market
            sorted(admitted, key=lambda t: (choices[t[0].job_id], -t[0].gpus, rank[t[0].job_id])),
            sorted(admitted, key=lambda t: (len(t[0].gpu_models) or 99, -t[0].gpus, rank[t[0].job_id])),
            *self._shuffled(bfd, max(_SHUFFLED_ORDERS, min(4 * _SHUFFLED_ORDERS, 1000 // max(1, len(admitted))))),
        ]

    @staticmethod
    def _shuffled(bfd: list[tuple[Job, bool]], count: int) -> list[list[tuple[Job, bool]]]:
        """``count`` fixed-seed shuffles of the canonical order (on-demand-bound
        jobs still first): the same input always gives the same orders. Small
        steps get more of them (they are cheap there)."""
        result = []
        for seed in range(count):
            rng = random.Random(seed)
            head = [t for t in bfd if not t[1]]
            tail = [t for t in bfd if t[1]]
            rng.shuffle(head)
            rng.shuffle(tail)
            result.append(head + tail)
        return result

    def _buy_in_order(self, ordered: list[tuple[Job, bool]], admitted: list[tuple[Job, bool]],
                      kinds_of: dict[str, tuple[Kind, ...]], demand: dict[Kind, float], snapshot: dict) -> None:
        projected = self.spot_gpus + sum(job.gpus for job, spot_ok in admitted if spot_ok)
        total_projected = self.gpus + sum(job.gpus for job, _ in admitted)
        self.strict = False
        self.spread_premium = _SPREAD_PREMIUM
        done = False
        for round_ in range(_PROJECTION_ROUNDS + 2):
            self.projected_spot_gpus = projected
            self.projected_total_gpus = total_projected
            self._buy_pass(ordered, kinds_of, dict(demand))
            if not self._diversification_broken():
                done = True
                break
            spot_bought = self.spot_gpus  # read before the restore below resets it
            self._restore(snapshot)
            if round_ == 0:
                # The preference for new offers can itself break min_distinct_offers: it buys more, smaller
                # nodes, so the fleet reaches the count of spot nodes at which the rule asks for that many
                # offers (two new b4 where one a8 holds both jobs). Try without it.
                self.spread_premium = 0.0
                continue
            if round_ == 1:
                # Then spread harder: any new spot offer beats reusing one.
                self.spread_premium = math.inf
                continue
            # Less spot was bought than projected: project (a little less than)
            # what was bought, and redo.
            projected = min(int(projected * 0.9), spot_bought)
            if projected <= 0:
                break
        # The projections are this step's alone: every later purchase (after-the-step admissions,
        # headroom, moves back to spot) is checked against what the fleet holds then.
        self.strict = True
        self.projected_spot_gpus = self.projected_total_gpus = 0
        if not done:
            self._buy_pass(ordered, kinds_of, dict(demand))

    @staticmethod
    def _likely_kinds(kinds: tuple[Kind, ...], spot_ok: bool) -> tuple[Kind, ...]:
        """Where a job will probably go: spot if it may (it is cheaper), so the
        fill estimate does not count it toward on-demand nodes as well."""
        market = Market.SPOT.value if spot_ok else Market.ON_DEMAND.value
        return tuple(k for k in kinds if k[1] == market) or kinds

    def _buy_pass(self, ordered: list[tuple[Job, bool]], kinds_of: dict[str, tuple[Kind, ...]],
                  demand: dict[Kind, float]) -> None:
        for job, spot_ok in ordered:
            if job.workers == 1:
                for k in self._likely_kinds(kinds_of[job.job_id], spot_ok):
                    demand[k] -= job.gpus
            kinds = kinds_of[job.job_id]
            # Leftovers of nodes bought earlier in this step.
            placed = self.place_existing(job, tuple(sorted(set(kinds) & set(self.new_index.by_kind))), self.new_index)
            if placed is not None:
                # said: before 2026-11-28 the job's explanation ended at "free capacity: no node ... with room"
                self._note(job, f"took room left on {', '.join(sorted({sl.name for sl, _ in placed}))}, bought "
                                "in this pass for another job")
                self.commit(job, placed, Reason.FITS_NEW_CAPACITY, None)
                continue
            self._buy_one(job, spot_ok, demand)
        if len(ordered) <= _MULTI_ORDER_MAX_JOBS and not self._diversification_broken():
            by_id = {job.job_id: job for job, _ in ordered}
            spot_ok = {job.job_id: ok for job, ok in ordered}
            self._eliminate_nodes(by_id, kinds_of)
            self._downsize_nodes(by_id, spot_ok)

    def _downsize_nodes(self, jobs: dict[str, Job], spot_ok: dict[str, bool]) -> None:
        """Local improvement: a node bought in this step is swapped for the
        cheapest offer that holds the same jobs (risk included), dearest first,
        unless that breaks a rule. A node holding part of a gang stays in its zone."""
        bind_at = {b.job_id: i for i, b in enumerate(self.actions_bind)}
        max_gpus, max_usd = self.policy.max_gpus, self.policy.max_usd_per_hour
        for slot in sorted(self.new_index.slots.values(), key=lambda sl: (-sl.offer.usd_per_hour, sl.name)):
            held = [jobs.get(jid) for jid in slot.jobs]
            if not held or any(j is None for j in held):
                continue
            gang_elsewhere = any(slot.jobs[j.job_id] != j.workers for j in held)  # type: ignore[union-attr]
            used_g = sum(j.gpus_per_worker * slot.jobs[j.job_id] for j in held)  # type: ignore[union-attr]
            used_v = sum(j.vcpus_per_worker * slot.jobs[j.job_id] for j in held)  # type: ignore[union-attr]
            used_m = sum(j.memory_gib_per_worker * slot.jobs[j.job_id] for j in held)  # type: ignore[union-attr]
            all_spot = all(spot_ok.get(j.job_id, False) for j in held)  # type: ignore[union-attr]
            min_mem = max(j.gpu_memory_gib_per_gpu for j in held)  # type: ignore[union-attr]
            current = self._node_cost(slot.offer, held, slot)
            best: tuple[float, str, Offer] | None = None
            avoided = set().union(*(self._avoided(j, spot_ok.get(j.job_id, False)) for j in held))  # type: ignore[union-attr]
            for offer in self.offers:
                it = offer.instance_type
                if offer.usd_per_hour >= current - 1e-9 or offer is slot.offer:
                    continue
                if self.offer_key[id(offer)] in avoided:
                    continue  # failed one of these jobs recently
                if offer.market is Market.SPOT and not all_spot:
                    continue
                if gang_elsewhere and offer.placement_domain != slot.domain:
                    continue
                if it.gpu_count < used_g or it.vcpus < used_v or it.memory_gib < used_m:
                    continue
                if max_gpus is not None and \
                        self.held_gpus + it.gpu_count - slot.offer.instance_type.gpu_count > max_gpus:
                    continue  # a cheaper but bigger node would pass the GPU cap
                if max_usd is not None and offer.usd_per_hour > slot.offer.usd_per_hour and \
                        self.held_usd + offer.usd_per_hour - slot.offer.usd_per_hour > max_usd + 1e-9:
                    continue  # a safer but dearer node would pass the budget
                if used_g and (it.gpu_model is None or it.gpu_memory_gib < min_mem):
                    continue
                if any(j.gpu_models and it.gpu_model not in j.gpu_models for j in held):  # type: ignore[union-attr]
                    continue
                cost = self._node_cost(offer, held, slot)
                if cost < current - 1e-9 and (best is None or (cost, self.offer_key[id(offer)]) < best[:2]):
                    best = (cost, self.offer_key[id(offer)], offer)
            if best is None:
                continue
            old_offer = slot.offer
            bought_for = self._swap(slot, best[2])
            if self._diversification_broken() or self.on_demand_gpus < min(self.policy.on_demand_base_gpus, self.gpus):
                self._swap(slot, old_offer, bought_for)
                continue
            self.step_risk += best[0] - current - (best[2].usd_per_hour - old_offer.usd_per_hour)
            for j in held:
                i = bind_at[j.job_id]  # type: ignore[union-attr]
                b = self.actions_bind[i]
                nodes = [self.new_index.slots.get(n) or self.index.slots[n] for n in dict.fromkeys(b.node_ids)]
                self.actions_bind[i] = Bind(b.job_id, b.node_ids, self._reason_on(b.reason, best[2], j),
                                            _bind_detail_on(j, nodes))  # type: ignore[arg-type]
                self._note_swap(j, old_offer, best[2])  # type: ignore[arg-type] - "chose" named another offer

    def _note_swap(self, job: Job, old: Offer, new: Offer) -> None:
        """Say in the job's explanation that a node of it was bought as ``new``,
        not ``old``: one line for all of a gang's nodes swapped alike (before
        2026-11-28 the line was repeated per node)."""
        key = (job.job_id, self.offer_key[id(old)], self.offer_key[id(new)])
        count, at = self.swap_notes.get(key, (0, -1))
        count += 1
        if count == 1:
            nodes = f"its node is bought as 1 x {self._node_text(new)}"
        else:
            nodes = (f"{count} of its nodes are bought as {new.instance_type.name} {new.market.value} in "
                     f"{_where(new)} (${new.usd_per_hour:.2f}/h each)")
        line = (f"then {nodes}, not {old.instance_type.name} {old.market.value}: cheaper for the jobs on "
                f"{'it' if count == 1 else 'them'}, expected loss included")
        notes = self.explain.setdefault(job.job_id, [])
        if count == 1:
            at = len(notes)
            notes.append(line)
        else:
            notes[at] = line
        self.swap_notes[key] = (count, at)

    def _node_cost(self, offer: Offer, held: list, slot: Slot) -> float:
        """Risk-adjusted USD/h of one node of ``offer`` holding the slot's jobs."""
        it = offer.instance_type
        cost = offer.usd_per_hour
        p = self._p(offer)
        if p:
            for j in held:
                cost += p * self._loss_hours(j) * _risk_share(j, slot.jobs[j.job_id], it) * offer.usd_per_hour
        return cost

    def _swap(self, slot: Slot, offer: Offer, reason: Reason | None = None) -> Reason:
        """Make a node bought in this step a node of ``offer`` (its jobs stay),
        launched for ``reason`` (default: what the node was bought for). The
        reason it was bought for (to undo the swap with)."""
        bought_for = self._unbuy(slot)
        self.new_index.withdraw(slot)
        old_it, it = slot.offer.instance_type, offer.instance_type
        slot.free_gpus += it.gpu_count - old_it.gpu_count
        slot.free_vcpus += it.vcpus - old_it.vcpus
        slot.free_memory_gib += it.memory_gib - old_it.memory_gib
        slot.version += 1
        slot.offer, slot.kind, slot.domain = offer, kind_of(offer), offer.placement_domain
        slot.schedulable = True
        self.new_index.add(slot)
        self._rebuy(slot, reason or bought_for)
        return bought_for

    def _reason_on(self, reason: Reason, offer: Offer, job: Job) -> Reason:
        """A bind's reason once a repair puts ``job`` on a node of ``offer``,
        as ``_launch`` gives it: on spot it is no on-demand fallback; spot-eligible
        work on on-demand is one (before 2026-11-28 the second kept
        fits_new_capacity beside a job bought there as a fallback; before
        that, both kept their reason)."""
        if reason is Reason.ON_DEMAND_FALLBACK and offer.market is Market.SPOT:
            return Reason.FITS_NEW_CAPACITY
        if reason is Reason.FITS_NEW_CAPACITY and offer.market is Market.ON_DEMAND and self._spot_eligible(job):
            return Reason.ON_DEMAND_FALLBACK
        return reason

    @staticmethod
    def _node_text(offer: Offer) -> str:
        """One node of ``offer`` as explanations name it (as ``_offer_text`` does, without the risk)."""
        return f"{offer.instance_type.name} {offer.market.value} in {_where(offer)} (${offer.usd_per_hour:.2f}/h)"

    def _eliminate_nodes(self, jobs: dict[str, Job], kinds_of: dict[str, tuple[Kind, ...]]) -> None:
        """Local improvement: a node bought in this step whose jobs all fit in
        the leftovers of the other new nodes is not bought after all (emptiest
        and dearest first), unless that would break a market or spread rule."""
        candidates = sorted(
            self.new_index.slots.values(),
            key=lambda sl: ((sl.offer.instance_type.gpu_count - sl.free_gpus) / max(1, sl.offer.instance_type.gpu_count),
                            -sl.offer.usd_per_hour, sl.name),
        )
        bind_at = {b.job_id: i for i, b in enumerate(self.actions_bind)}
        for slot in candidates:
            movable = [jobs.get(jid) for jid in slot.jobs]
            if not movable or any(j is None or slot.jobs[j.job_id] != j.workers for j in movable):
                continue  # a job of another pass, or a gang spread over several nodes
            self.new_index.withdraw(slot)
            moves: list[tuple[Job, list[tuple[Slot, int]]]] = []
            for job in sorted(movable, key=lambda j: (-j.gpus, j.job_id)):  # type: ignore[union-attr]
                kinds = tuple(sorted(set(kinds_of[job.job_id]) & set(self.new_index.by_kind)))  # type: ignore[union-attr]
                placed = self.place_existing(job, kinds, self.new_index)  # type: ignore[arg-type]
                if placed is None:
                    break
                for target, workers in placed:
                    self.new_index.take(target, job, workers)  # type: ignore[arg-type]
                moves.append((job, placed))  # type: ignore[arg-type]
            ok = len(moves) == len(movable)
            if ok:
                reason = self._unbuy(slot)
                ok = not self._diversification_broken() and self.on_demand_gpus >= min(
                    self.policy.on_demand_base_gpus, self.gpus)
                if not ok:
                    self._rebuy(slot, reason)
            if not ok:
                for job, placed in moves:
                    for target, _ in placed:
                        self.new_index.give_back(target, job)
                self.new_index.restore(slot)
                continue
            for job, placed in moves:
                self.index_jobs_moved(job, slot, placed, bind_at)
                self._note(job, f"then placed on room left on {', '.join(sorted({t.name for t, _ in placed}))}, "
                                f"bought in this pass: the 1 x {self._node_text(slot.offer)} chosen for it is not "
                                "bought")
            del self.new_index.slots[slot.name]

    def index_jobs_moved(self, job: Job, old: Slot, placed: list[tuple[Slot, int]], bind_at: dict[str, int]) -> None:
        """Point the job's Bind at its new nodes and move its expected loss."""
        loss = self._loss_hours(job)
        # only a job wholly on the old node is moved (_eliminate_nodes)
        self.step_risk -= self._risk_usd(job, job.workers, old.offer, loss)
        names: list[str] = []
        for target, workers in placed:
            self.step_risk += self._risk_usd(job, workers, target.offer, loss)
            names.extend([target.name] * workers)
        i = bind_at[job.job_id]
        self.actions_bind[i] = Bind(job.job_id, tuple(names), self._reason_on(self.actions_bind[i].reason,
                                                                              placed[0][0].offer, job),
                                    _bind_detail_on(job, (target for target, _ in placed)))
        old.jobs.pop(job.job_id, None)
        old.version += 1

    def _drop_new(self, slot: Slot, jobs: list[Job]) -> None:
        """A node bought in this step, holding ``jobs`` alone, is not bought after all (the jobs are given
        back: the caller places them elsewhere)."""
        key = slot.offer.key
        for job in jobs:
            self.new_index.give_back(slot, job)
            if job.job_id in self.launch_jobs.get(key, ()):
                self.launch_jobs[key].remove(job.job_id)
                if not self.launch_jobs[key]:
                    del self.launch_jobs[key]
        self.new_index.withdraw(slot)
        self._unbuy(slot)
        del self.new_index.slots[slot.name]

    def _unbuy(self, slot: Slot) -> Reason:
        """Take a node bought in this step out of the step's purchases; the
        reason its offer was launched for (for ``_rebuy``)."""
        key = slot.offer.key
        reason = self.launch_reason.get(key, Reason.CHEAPEST_OFFER)
        self.launch_names[key].remove(slot.name)
        # The jobs the offer was bought for that this node alone held go with it (to _rebuy): before
        # 2026-11-28 they stayed listed under an offer still bought for others, and a node swapped onto an
        # offer the step already bought did not add its jobs, so a launch read "risk-adjusted best for" jobs
        # it did not hold and missed ones it did.
        listed = self.launch_jobs.get(key, [])
        if not self.launch_names[key]:
            gone = list(listed)
            for d in (self.launch_names, self.launch_offer, self.launch_jobs, self.launch_reason):
                d.pop(key, None)
        else:
            names = self.launch_names[key]
            gone = [jid for jid in listed if jid in slot.jobs
                    and not any(jid in self.new_index.slots[name].jobs for name in names)]
            kept = [jid for jid in listed if jid not in gone]
            if kept:
                self.launch_jobs[key] = kept
            else:
                self.launch_jobs.pop(key, None)
        self.unbought_jobs[slot.name] = (key, gone)
        self._charge_offer(slot.offer, -1, self.slot_gang.get(slot.name))
        return reason

    def _rebuy(self, slot: Slot, reason: Reason) -> None:
        """Put a node ``_unbuy`` took out back among the step's purchases, as
        a node of its (maybe swapped) offer. ``reason``: what its node was
        bought for (``_unbuy``'s answer), kept for an offer new to the step:
        an on-demand fallback or base node swapped for another on-demand offer
        is still one, and a swap undone gives the node its reason back (before
        2026-11-28 both were launched as cheapest_offer, and
        fleetctl_on_demand_fallbacks_total missed them). On spot it is the
        cheapest offer; spot-eligible work swapped onto on-demand is a
        fallback, as ``_launch`` files it."""
        key = slot.offer.key
        was, gone = self.unbought_jobs.pop(slot.name, (None, []))
        # undone: the node is listed for its jobs again; swapped: its new offer was chosen for the jobs on it
        jobs = gone if was == key else sorted(slot.jobs)
        if key not in self.launch_names:
            self.launch_offer[key] = slot.offer
            if jobs:
                self.launch_jobs[key] = jobs
            on_demand_only = reason in (Reason.ON_DEMAND_FALLBACK, Reason.ON_DEMAND_BASE)
            if on_demand_only and slot.offer.market is Market.SPOT:
                reason = Reason.CHEAPEST_OFFER
            elif reason is Reason.CHEAPEST_OFFER and slot.offer.market is Market.ON_DEMAND and any(
                    self._spot_eligible(self.jobs_by_id[jid]) for jid in slot.jobs if jid in self.jobs_by_id):
                reason = Reason.ON_DEMAND_FALLBACK  # spot-eligible work on on-demand, as _launch says
            self.launch_reason[key] = reason
        elif jobs:  # an offer the step bought already: the node's jobs join its list
            listed = self.launch_jobs.setdefault(key, [])
            listed.extend(jid for jid in jobs if jid not in listed)
        self.launch_names.setdefault(key, []).append(slot.name)
        self._charge_offer(slot.offer, 1, self.slot_gang.get(slot.name))

    def _diversification_broken(self) -> bool:
        """Whether the step left a spread rule, the spot share or
        ``min_distinct_offers`` broken, or one the fleet broke before the
        step (``spread_excess_before``: nodes reclaimed elsewhere, a policy
        tightened) worse than it was. Before 2026-11-28 any breach counted,
        so a fleet over a cap before the step had every order redone to the
        strict pass and no repair (an on-demand gang paid $30/h for $25.50/h
        of nodes beside three busy spot nodes of one zone)."""
        before = self.spread_excess_before
        return any(excess > max(0.0, before.get(rule, 0.0)) + 1e-9 for rule, excess in self._spread_excess().items())

    def _spread_excess(self) -> dict[tuple[str, str], float]:
        """How far the fleet (with this step's purchases) is past each rule
        ``_diversification_broken`` checks: GPUs past a type's or a zone's
        cap, past the spot share, offers short of ``min_distinct_offers``
        (> 0: broken)."""
        excess: dict[tuple[str, str], float] = {}
        p = self.policy
        total = self.spot_gpus
        # The allowance of one node per type and zone is one unit: a node, or a gang's nodes there.
        biggest_of_type: dict[str, int] = {}
        gang_of_type: dict[tuple[str, str], int] = {}
        gang_in_zone: dict[tuple, int] = {}
        for slot in (*self.index.slots.values(), *self.new_index.slots.values()):
            if slot.offer.market is Market.SPOT:
                it = slot.offer.instance_type
                biggest_of_type[it.name] = max(biggest_of_type.get(it.name, 0), it.gpu_count)
                gang = self.slot_gang.get(slot.name)
                if gang is not None:
                    gang_of_type[(gang, it.name)] = gang_of_type.get((gang, it.name), 0) + it.gpu_count
                    z = (gang, slot.offer.placement_domain)
                    gang_in_zone[z] = gang_in_zone.get(z, 0) + it.gpu_count
        biggest_in_zone = dict(self.max_gpus_in_zone)
        for (_, name), gpus in gang_of_type.items():
            biggest_of_type[name] = max(biggest_of_type.get(name, 0), gpus)
        for (_, zone), gpus in gang_in_zone.items():
            biggest_in_zone[zone] = max(biggest_in_zone.get(zone, 0), gpus)
        for name, gpus in self.spot_by_type.items():
            excess[("type", name)] = gpus - (p.max_share_per_instance_type * total + biggest_of_type.get(name, 0))
        for zone, gpus in self.spot_by_zone.items():
            excess[("zone", str(zone))] = gpus - (p.max_share_per_zone * total + biggest_in_zone.get(zone, 0))
        excess[("share", "")] = self.spot_gpus - p.max_spot_share * self.gpus
        want = self._min_distinct()
        excess[("offers", "")] = want - len(self.spot_nodes_by_offer) if self.spot_units >= want else 0.0
        return excess

    def _snapshot(self) -> dict:
        return {
            "binds": len(self.actions_bind), "unplaced": len(self.unplaced),
            "explain": {k: len(v) for k, v in self.explain.items()},
            "usage": {t: (u.gpus, u.vcpus, u.memory_gib) for t, u in self.usage.items()},
            "totals": (self.usd, self.gpus, self.spot_gpus, self.on_demand_gpus, self.step_risk),
            "spot": (dict(self.spot_by_type), dict(self.spot_by_zone), dict(self.spot_nodes_by_offer)),
            "gangs": (dict(self.slot_gang), dict(self.gang_spot_nodes), self.spot_units),
        }

    def _restore(self, snap: dict) -> None:
        """Undo step 3 (it only adds: new nodes, binds, launches, notes)."""
        del self.actions_bind[snap["binds"]:]
        del self.unplaced[snap["unplaced"]:]
        for k in list(self.explain):
            keep = snap["explain"].get(k, 0)
            if keep:
                del self.explain[k][keep:]
            else:
                del self.explain[k]
        self.usage.clear()
        for t, (g, v, m) in snap["usage"].items():
            self.usage[t] = TeamUsage(g, v, m)
        self.usd, self.gpus, self.spot_gpus, self.on_demand_gpus, self.step_risk = snap["totals"]
        self.spot_by_type, self.spot_by_zone, self.spot_nodes_by_offer = (dict(d) for d in snap["spot"])
        slot_gang, gang_spot_nodes, self.spot_units = snap["gangs"]
        self.slot_gang, self.gang_spot_nodes = dict(slot_gang), dict(gang_spot_nodes)
        self.new_index = CapacityIndex()
        self.new_count = 0
        self.launch_names.clear()
        self.launch_offer.clear()
        self.launch_jobs.clear()
        self.unbought_jobs.clear()
        self.swap_notes.clear()
        self.launch_reason.clear()

    def _on_demand_base(self, admitted: list[tuple[Job, bool]]) -> list[tuple[Job, bool]]:
        """Meet the policy's on-demand base with the jobs whose move to
        on-demand costs least per GPU (not with whichever job comes first)."""
        od_admitted = sum(job.gpus for job, spot_ok in admitted if not spot_ok)
        deficit = self.policy.on_demand_base_gpus - self.on_demand_gpus - od_admitted
        # max_spot_share works the same way: (1 - share) of the GPUs must be on demand.
        total = self.gpus + sum(job.gpus for job, _ in admitted)
        share_deficit = math.ceil((1 - self.policy.max_spot_share) * total - 1e-9) - self.on_demand_gpus - od_admitted
        deficit = max(deficit, share_deficit)
        if deficit <= 0:
            return admitted
        premiums = []
        for job, spot_ok in admitted:
            if not spot_ok or job.gpus == 0:
                continue
            # Per GPU, as packed: a small job shares a big node, so its own
            # cheapest node says little about what moving it costs.
            spot = self._cheapest_per_gpu(job, Market.SPOT)
            od = self._cheapest_per_gpu(job, Market.ON_DEMAND)
            if spot is None or od is None:
                continue
            premiums.append((od - spot, job.job_id, job))
        premiums.sort(key=lambda t: (t[0], t[1]))
        chosen: list[tuple[float, str, Job]] = []
        for premium, job_id, job in premiums:
            if deficit <= 0:
                break
            chosen.append((premium, job_id, job))
            deficit -= job.gpus
        # Overshoot wastes on-demand GPUs: drop moves the deficit does not need
        # (the dearest first).
        for item in sorted(chosen, key=lambda t: (-t[0], t[1])):
            if deficit + item[2].gpus <= 0:
                chosen.remove(item)
                deficit += item[2].gpus
        moved = {job_id for _, job_id, _ in chosen}
        base = self.policy.on_demand_base_gpus
        for premium, _, job in chosen:
            # on demand may be the cheaper per GPU (a small on-demand node beside a big spot one): "-$0.75"
            move = f"{'-' if premium < 0 else '+'}${abs(premium):.2f}/h per GPU"
            self._note(job, f"on-demand to meet the policy's on-demand base ({base} GPU{'' if base == 1 else 's'}) "
                            f"and spot share ({self.policy.max_spot_share:.0%}); cheapest move: {move}")
        self.on_demand_base_jobs = moved
        return [(job, spot_ok and job.job_id not in moved) for job, spot_ok in admitted]

    def _avoided(self, job: Job, spot_ok: bool) -> frozenset[str]:
        """The spot offers ``job`` avoids (they reclaimed it before), unless
        it avoids every spot offer it could use: then none, so a job reclaimed
        in every zone goes back to the least risky of them rather than to
        on-demand for good (which offer is riskier is the forecast's to say)."""
        avoid = job.avoid_offer_keys
        if not avoid:
            return frozenset()
        key = (avoid, job.gpu_models, job.gpus_per_worker, job.gpu_memory_gib_per_gpu, spot_ok)
        cached = self._avoided_cache.get(key)
        if cached is None:
            spot = {self.offer_key[id(o)] for o in self._compatible_offers(job, spot_ok) if o.market is Market.SPOT}
            cached = self._avoided_cache[key] = frozenset() if spot <= set(avoid) else frozenset(avoid)
        return cached

    def _cheapest_per_gpu(self, job: Job, market: Market) -> float | None:
        """Lowest risk-free USD per GPU-hour of an offer in ``market`` that holds a worker."""
        for offer in self._compatible_offers(job, True):  # sorted by USD per GPU
            if offer.market is market and _per_node(job, offer) >= 1:
                return offer.usd_per_hour / max(1, offer.instance_type.gpu_count)
        return None

    def _kind_ok(self, job: Job, kind: Kind, spot_ok: bool) -> bool:
        model, market = kind
        if market == Market.SPOT.value and not spot_ok:
            return False
        if job.gpus_per_worker > 0 and not model:
            return False
        if job.gpu_memory_gib_per_gpu and self.kind_memory.get(kind, 0.0) < job.gpu_memory_gib_per_gpu:
            return False
        return not job.gpu_models or model in job.gpu_models

    def _market_rule(self, offer: Offer, gpus: int, unit_gpus: int = 0) -> str | None:
        """The spot share and the spread rules for ``gpus`` more spot GPUs of
        ``offer``; ``unit_gpus``: a gang's GPUs bought together (the allowance
        of one node per type and zone is one unit: a node or a whole gang).
        A purchase of no GPUs (a CPU node) passes: it leaves every share where
        it was, also on a fleet already past one (a reclaim, a tightened
        policy), where until 2026-11-29 a CPU job could neither buy spot nor
        move back to it."""
        p = self.policy
        if offer.market is Market.SPOT and gpus > 0:
            if self._spot_share_excess(gpus) > 1e-9:
                return f"spot would pass {p.max_spot_share:.0%} of the fleet's GPUs"
            it = offer.instance_type
            total = max(self.spot_gpus + gpus, self.projected_spot_gpus)
            unit = max(it.gpu_count, unit_gpus)
            if self.spot_by_type.get(it.name, 0) + gpus > p.max_share_per_instance_type * total + unit + 1e-9:
                return f"{it.name} would pass {p.max_share_per_instance_type:.0%} of spot GPUs (diversification)"
            z = offer.placement_domain
            if self.spot_by_zone.get(z, 0) + gpus > p.max_share_per_zone * total + max(self.max_gpus_in_zone.get(z, 0), unit_gpus) + 1e-9:
                return f"zone {offer.region}/{offer.zone or '*'} would pass {p.max_share_per_zone:.0%} of spot GPUs (diversification)"
        return None

    def _spot_share_excess(self, gpus: int = 0) -> float:
        """Spot GPUs past ``max_spot_share`` with ``gpus`` more spot GPUs (the
        step's projected total when it is larger)."""
        return self.spot_gpus + gpus - self.policy.max_spot_share * max(self.gpus + gpus, self.projected_total_gpus)

    def _too_few_offers(self, offer: Offer) -> bool:
        """``min_distinct_offers``, checked at one purchase (one unit: a node,
        or a gang's nodes) of ``offer``: once the fleet holds that many spot
        units, they sit on at least that many distinct spot offers."""
        if offer.market is not Market.SPOT:
            return False
        want = self._min_distinct()
        fresh = offer.key not in self.spot_nodes_by_offer
        return self.spot_units + 1 >= want and len(self.spot_nodes_by_offer) + fresh < want

    def _buy_one(self, job: Job, spot_ok: bool, demand: dict[Kind, float]) -> None:
        if not self._try_buy(job, spot_ok, demand, short=True, final=False):
            self._try_buy(job, spot_ok, demand, short=False, final=True)

    def _try_buy(self, job: Job, spot_ok: bool, demand: dict[Kind, float], short: bool, final: bool) -> bool:
        p = self.policy
        options = self.options(job, spot_ok, short=short, demand=demand)
        if not options and not final:
            return False
        if not options:
            reason, detail = self._no_offer(job, spot_ok)
            self._unadmit(job, reason, detail)
            return False
        distinct = len(self.spot_nodes_by_offer)
        spot_units = self.spot_units
        min_distinct = self._min_distinct()
        want_new = distinct < min_distinct
        # While fewer than min_distinct_offers spot offers are in use, prefer a
        # new spot offer over reusing one, if it costs at most _SPREAD_PREMIUM more.
        unused_scores = [o.score for o in options
                         if o.offer.market is Market.SPOT and o.offer.key not in self.spot_nodes_by_offer]
        best_unused = min(unused_scores) if (want_new and unused_scores) else None
        rejected: list[str] = []
        budget_block: _Option | None = None
        gpu_block: _Option | None = None
        for option in options:
            offer = option.offer
            gpus = option.nodes * offer.instance_type.gpu_count
            gang = option.nodes > 1  # a gang's nodes: one unit for the spread rules
            why = self._market_rule(offer, gpus, gpus if gang else 0)
            if why is None and offer.market is Market.SPOT and want_new:
                fresh = offer.key not in self.spot_nodes_by_offer
                if best_unused is not None and not fresh and best_unused <= option.score * self.spread_premium:
                    why = f"at least {min_distinct} distinct spot offers wanted (diversification)"
                elif self.strict and self._too_few_offers(offer):
                    # one purchase is one unit: a node, or a gang's nodes
                    why = (f"{spot_units + 1} spot nodes (a gang's counting once) would sit "
                           f"on fewer than {min_distinct} distinct offers (diversification)")
            if why is None and p.max_gpus is not None and self.held_gpus + gpus > p.max_gpus:
                gpu_block = gpu_block or option
                why = f"{gpus} more GPUs would pass the max of {p.max_gpus}"
            if why is None and p.max_usd_per_hour is not None and \
                    self.held_usd + option.nodes * offer.usd_per_hour > p.max_usd_per_hour + 1e-9:
                budget_block = budget_block or option
                why = "over budget"
            if why is not None:
                if len(rejected) < 3:
                    rejected.append(f"{self._offer_text(option)}: {why}")
                continue
            self._launch(job, option)
            chosen_text = self._offer_text(option)
            self._note(job, f"chose {chosen_text}")
            for line in rejected:
                self._note(job, f"skipped {line}")
            for alt in options[options.index(option) + 1: options.index(option) + 3]:
                self._note(job, f"next best {self._offer_text(alt)}")
            return True
        if not final:
            return False
        for line in rejected:
            self._note(job, f"skipped {line}")
        if budget_block is not None:
            o = budget_block
            self._unadmit(job, Reason.BUDGET_EXCEEDED,
                f"{_describe_need(job)}; {o.offer.instance_type.name} (${o.nodes * o.offer.usd_per_hour:.2f}/h) would take the "
                f"fleet to ${self.held_usd + o.nodes * o.offer.usd_per_hour:.2f}/h, above the budget of ${p.max_usd_per_hour:.2f}/h")
        elif gpu_block is not None:
            self._unadmit(job, Reason.CAPACITY_LIMIT,
                f"{_describe_need(job)}; more GPUs would pass the policy's max of {p.max_gpus}")
        else:
            self._unadmit(job, Reason.NO_ALLOWED_OFFER,
                f"{_describe_need(job)}; every fitting offer is ruled out by the market or diversification rules")
        return False

    def _unadmit(self, job: Job, reason: Reason, detail: str) -> None:
        """An admitted job found no capacity after all: it waits, uncharged."""
        self.usage.setdefault(job.team, TeamUsage()).add(job, sign=-1)
        self.unplaced.append(Unplaced(job.job_id, reason, detail))

    def _offer_text(self, option: _Option) -> str:
        o = option.offer
        return (f"{option.nodes} x {o.instance_type.name} {o.market.value} in {_where(o)} "
                f"(${option.nodes * o.usd_per_hour:.2f}/h + ${option.risk_usd_per_hour:.2f}/h expected loss)")

    def _launch(self, job: Job, option: _Option) -> None:
        offer = option.offer
        slots = [self._new_slot(offer) for _ in range(option.nodes)]
        self.launch_jobs.setdefault(offer.key, []).append(job.job_id)
        # A fallback: spot-eligible work on on-demand, because spot is scarce (spot_ok) or because this job
        # may not use it now (interrupted too often, deadline at risk: not spot_ok).
        fallback = offer.market is Market.ON_DEMAND and self._spot_eligible(job)
        if job.job_id in self.on_demand_base_jobs:
            self.launch_reason.setdefault(offer.key, Reason.ON_DEMAND_BASE)
        elif fallback:
            self.launch_reason.setdefault(offer.key, Reason.ON_DEMAND_FALLBACK)
        else:
            self.launch_reason.setdefault(offer.key, Reason.CHEAPEST_OFFER)
        gang = job.job_id if len(slots) > 1 else None
        if gang is not None:
            self.slot_gang.update((slot.name, gang) for slot in slots)
        self._charge_offer(offer, option.nodes, gang)
        per = _per_node(job, offer)
        placed = []
        left = job.workers
        for slot in slots:
            w = min(per, left)
            placed.append((slot, w))
            left -= w
        reason = Reason.ON_DEMAND_FALLBACK if fallback else Reason.FITS_NEW_CAPACITY
        if job.job_id in self.on_demand_base_jobs:
            reason = Reason.ON_DEMAND_BASE
        self.commit(job, placed, reason, None)

    # ------------------------------------------------------------------ 4. scale down

    def consolidate(self, only: set[str] | None = None) -> tuple[list[Migrate], list[Terminate]]:
        """Empty under-used nodes into others (docs/planner.md, step 8). A
        node whose one job the move back to spot may take instead, and whose
        move here would go into an idle on-demand node, is left to that move
        (``self.deferred``; before the twenty-seventh session, 2026-11-28, the
        job went into the idle on-demand node and moved to spot a pass later,
        two restarts); ``only``: consolidate just these nodes, none deferred
        (after the move back to spot, for the nodes it left)."""
        p = self.policy
        if p.disruption_budget_nodes <= 0 or p.consolidation_payback_hours <= 0:
            return [], []
        by_id = {j.job_id: j for j in self.jobs}
        candidates = []
        for slot in self.index.slots.values():
            node = self.nodes.get(slot.name)
            if slot.new or slot.touched or not slot.schedulable or node is None or node.state is not NodeState.READY:
                continue
            if not slot.jobs or slot.reserved_for is not None:
                continue
            it = slot.offer.instance_type
            used = it.gpu_count - slot.free_gpus
            if it.gpu_count and used / it.gpu_count > p.consolidation_max_gpu_utilisation:
                continue
            candidates.append((-slot.offer.usd_per_hour, slot.name, slot))
        candidates.sort(key=lambda t: (t[0], t[1]))
        under_used = {slot.name for _, _, slot in candidates}
        if only is not None:
            candidates = [c for c in candidates if c[2].name in only]
        defer = only is None and p.replace_on_demand_with_spot and self.scale_up_wait is None
        settle = timedelta(hours=p.consolidation_payback_hours)
        # Idle GPUs per model the forecast headroom wants kept (scaling.max_headroom_gpus): a node whose
        # emptying would leave fewer is not emptied, or headroom would buy one like it in the same pass.
        wanted: dict[str, int] = {}
        idle_gpus: dict[str, int] = {}
        if p.max_headroom_gpus > 0 and self.demand_p90 and self.scale_up_wait is None:
            held, busy = self._gpus_by_model()
            wanted = self._idle_wanted(busy)
            idle_gpus = {m: held.get(m, 0) - busy.get(m, 0) for m in wanted}
        migrations: list[Migrate] = []
        terminations: list[Terminate] = []
        for _, _, slot in candidates:
            if self.drained >= p.disruption_budget_nodes:
                break
            if slot.touched:
                continue  # it received a job moved from a node emptied before it: that job moves once per pass
            jobs = [by_id[j] for j in sorted(slot.jobs)]
            if any((not j.checkpointable) or j.workers > 1 for j in jobs):
                continue
            # Design choice: a job moved (or restarted after a reclaim or a preemption) is not moved again
            # by consolidation until the last move could have paid back: without this, a job went from
            # node to node as each under-used node emptied in turn, losing its restart overhead each time.
            moved = [j for j in jobs if j.first_started_at_utc is not None and
                     (j.started_at_utc is None or j.started_at_utc > j.first_started_at_utc)
                     and self.now - (j.started_at_utc or self.now) < settle]
            if moved:
                for j in moved:
                    self._note(j, f"consolidation of {slot.name} waits: {j.job_id} was moved or restarted within "
                                  f"the last {p.consolidation_payback_hours:g} h (consolidation_payback_hours)")
                continue
            model, gpus = slot.offer.instance_type.gpu_model, slot.offer.instance_type.gpu_count
            if model in wanted and gpus and idle_gpus[model] - gpus < wanted[model]:
                for j in jobs:
                    self._note(j, f"consolidation of {slot.name} declined: the forecast wants {wanted[model]} "
                                  f"{model} GPU(s) idle (scaling.max_headroom_gpus), and emptying it leaves "
                                  f"{max(0, idle_gpus[model] - gpus)}")
                continue
            saving = slot.offer.usd_per_hour
            cost = 0.0
            for j in jobs:
                # the job's share of the node: its GPUs', or a CPU-only job's vCPUs' (before, a CPU-only job's was 0)
                rate = slot.offer.usd_per_hour * _risk_share(j, 1, slot.offer.instance_type)
                cost += rate * (j.work_since_checkpoint_hours(self.now) + p.restart_overhead_minutes / 60)
            payback = cost / saving if saving > 0 else math.inf
            if payback > p.consolidation_payback_hours:
                for j in jobs:
                    self._note(j, f"consolidation of {slot.name} declined: migration pays back in {payback:.1f} h, "
                                  f"policy allows {p.consolidation_payback_hours:g} h")
                continue
            spot_may_take = defer and len(jobs) == 1 and self._spot_may_take(jobs[0], (slot,))
            self.index.withdraw(slot)
            moves = []
            # Empty nodes the jobs go into: each would otherwise idle out (or stand for the forecast headroom),
            # so it is kept instead of the node emptied, and only the difference is saved.
            opened: dict[str, float] = {}
            for j in jobs:
                target = self._consolidation_target(j, slot, under_used)
                if target is None:
                    break
                if not target.jobs:
                    opened[target.name] = target.offer.usd_per_hour
                self.index.take(target, j)
                moves.append((j, target))
            net = saving - sum(opened.values())
            net_payback = cost / net if net > 0 else math.inf
            if len(moves) < len(jobs) or net_payback > p.consolidation_payback_hours:
                for j, target in moves:
                    self.index.give_back(target, j)
                self.index.restore(slot)
                into = f"into idle {', '.join(sorted(opened))} (${sum(opened.values()):.2f}/h)"
                why = "saves nothing" if net <= 0 else \
                    f"saves ${net:.2f}/h, pays back in {net_payback:.1f} h, policy allows {p.consolidation_payback_hours:g} h"
                for j in jobs if len(moves) == len(jobs) else ():
                    self._note(j, f"consolidation of {slot.name} declined: the move {into} {why}")
                continue
            if spot_may_take and opened and all(t.offer.market is Market.ON_DEMAND for _, t in moves):
                for j, target in moves:
                    self.index.give_back(target, j)
                self.index.restore(slot)
                self.deferred.add(slot.name)
                continue
            into = f" into idle {', '.join(sorted(opened))} (${sum(opened.values()):.2f}/h)" if opened else ""
            for j, target in moves:
                self.index.give_back(slot, j)
                target.touched = True  # received work in this pass: not emptied, nor its job moved to spot
            self.drained += 1
            if model in idle_gpus:
                idle_gpus[model] -= gpus
            refilled = self._refill(slot)
            frees = f"frees {slot.name} (${saving:.2f}/h)" if not refilled else \
                f"makes room on {slot.name} for {', '.join(refilled)} (a ${saving:.2f}/h node not bought)"
            for j, target in moves:
                migrations.append(Migrate(j.job_id, (slot.name,), (target.name,), Reason.CONSOLIDATION,
                    f"{frees}{into}; migration costs ${cost:.2f}, pays back in {net_payback:.1f} h"))
            if not refilled:
                terminations.append(Terminate(slot.name, Reason.CONSOLIDATION,
                    f"emptied by migrating {len(jobs)} checkpointable job(s); saves ${net:.2f}/h"))
        return migrations, terminations

    def _refill(self, emptied: Slot) -> list[str]:
        """The jobs placed in this pass on a new node of ``emptied``'s offer
        (a node of their own, no gang) move into ``emptied`` instead, and
        that node is not bought: the fleet ends the same, with one launch and
        one termination fewer (before 2026-11-28 the plan emptied a node and
        bought one like it). Returns the ids of the jobs moved in (none: not
        refilled)."""
        key = emptied.offer.key
        for new in sorted((sl for sl in self.new_index.slots.values() if sl.offer.key == key),
                          key=lambda sl: sl.name):
            if not new.jobs or self.slot_gang.get(new.name) is not None:
                continue
            jobs = [self.jobs_by_id[j] for j in sorted(new.jobs)]
            if any(new.jobs[j.job_id] != j.workers for j in jobs):
                continue  # a job spread over several nodes
            for j in jobs:
                self.step_risk -= self._risk_usd(j, j.workers, new.offer, self._loss_hours(j))
                self.index.take(emptied, j, j.workers)
                i = next(i for i, b in enumerate(self.actions_bind) if b.job_id == j.job_id)
                self.actions_bind[i] = Bind(j.job_id, (emptied.name,) * j.workers, Reason.FITS_FREE_CAPACITY,
                                            _bind_detail(j, emptied.offer, 1, False))
                self._note(j, f"then placed on {emptied.name}, emptied by consolidation in this pass: the new "
                              f"{self._node_text(new.offer)} chosen for it is not bought")
            self._drop_new(new, jobs)
            self.index.restore(emptied)
            emptied.touched = True
            return [j.job_id for j in jobs]
        return []

    def _consolidation_target(self, job: Job, source: Slot, under_used: set[str]) -> Slot | None:
        """Where consolidation moves ``job`` from ``source``: the best fit among
        existing nodes, except an under-used node dearer than ``source`` (it is
        emptied before ``source`` once its other jobs allow, and the job would
        move twice; a dearer node that stays busy is fine), an idle node at
        least as dear as ``source`` (kept instead of ``source``, it saves
        nothing; before 2026-11-28 the best fit stopped there) and a node not
        ready (still launching: the job would stop until it is up, and for
        good if its launch fails; before 2026-11-28 it could go there).

        Among targets with as few GPUs left over, the cheapest for the job's
        run: an idle node at its price (it is kept instead of idling out),
        plus on spot the job's expected loss (:meth:`_risk_usd`); the first
        ``_TIES`` such targets are weighed. The best fit's tie went to the
        first kind, on-demand, so a job went into an idle $6/h on-demand node
        beside an idle $1/h spot node, and the next pass moved it to spot
        (before the twenty-seventh session, 2026-11-28)."""
        spot_ok, _ = self._spot_ok(job)
        kinds = self._kinds(job, spot_ok)
        ends_at = self._ends_after_restart(job)  # before 2026-11-28: its whole duration from now
        loss = self._loss_hours(job)
        hidden: list[Slot] = []
        choice: Slot | None = None
        choice_cost = math.inf
        weighed = 0
        try:
            while weighed < _TIES:
                target = self.index.best_fit(job, kinds, 1, ends_at)
                if target is None or choice is not None and target.free_gpus > choice.free_gpus:
                    break  # more left over than the fits weighed so far
                if target.new and choice is None:
                    return None
                self.index.withdraw(target)
                hidden.append(target)
                node = self.nodes.get(target.name)
                if target.new or \
                        target.name in under_used and target.offer.usd_per_hour > source.offer.usd_per_hour or \
                        not target.jobs and target.offer.usd_per_hour >= source.offer.usd_per_hour or \
                        node is None or node.state is not NodeState.READY:
                    # an idle node as dear as the source saves nothing: it would be kept instead of the source;
                    # a node still launching would stop the job until it is up (or for good if it fails)
                    continue
                weighed += 1
                cost = (0.0 if target.jobs else target.offer.usd_per_hour) + \
                    self._risk_usd(job, 1, target.offer, loss)
                if cost < choice_cost:
                    choice, choice_cost = target, cost
            return choice
        finally:
            for t in hidden:
                self.index.restore(t)

    def _ends_after_restart(self, job: Job) -> datetime:
        """When ``job`` ends if it is moved now: it resumes from its checkpoint
        after a restart (what a node reserved until then must outlast)."""
        return self.now + timedelta(hours=job.remaining_hours + self.policy.restart_overhead_minutes / 60)

    def _spot_may_take(self, job: Job, slots: Sequence[Slot]) -> bool:
        """Whether the move back to spot (``replace_with_spot``) may take
        ``job`` off ``slots``: a checkpointable job allowed on spot, alone on
        ready on-demand nodes that this pass has not bought, filled or
        reserved. Consolidation leaves such a node to that move (``deferred``);
        the move itself still weighs budget, base, rules and payback."""
        if not job.checkpointable or not self._spot_ok(job)[0]:
            return False
        for sl in slots:
            node = self.nodes.get(sl.name)
            if sl.new or sl.touched or not sl.schedulable or sl.reserved_for is not None or len(sl.jobs) != 1 \
                    or sl.offer.market is not Market.ON_DEMAND or node is None or node.state is not NodeState.READY:
                return False
        return True

    def replace_with_spot(self, budget_left: int, emptied: list[Terminate],
                          consolidated: list[Migrate]) -> tuple[list[Migrate], list[Terminate]]:
        """Design choice (``markets.replace_on_demand_with_spot``, as Karpenter's
        replacement consolidation): a checkpointable job that holds its
        on-demand node(s) alone (one node, or a gang's nodes) moves to new spot
        nodes once spot is back (a gang whole, to one zone), when the saving
        (the on-demand price minus the spot option's risk-adjusted cost) pays
        back the move (the work since the last checkpoint plus a restart, at
        the on-demand price) within ``consolidation_payback_hours`` and before
        the job ends. Dearest first. The on-demand base, spot share,
        diversification, budget and disruption budget (a node each) still hold."""
        p = self.policy
        if not p.replace_on_demand_with_spot or budget_left <= 0 or p.consolidation_payback_hours <= 0:
            return [], []
        if not any(o.market is Market.SPOT for o in self.offers):
            return [], []  # no spot to move to: skip the per-node search
        slots_of: dict[str, list[Slot]] = {}
        for slot in self.index.slots.values():
            for job_id in slot.jobs:
                slots_of.setdefault(job_id, []).append(slot)
        candidates = []
        for job_id, slots in slots_of.items():
            job = self.jobs_by_id.get(job_id)
            if job is None or not self._spot_may_take(job, slots):
                continue
            slots.sort(key=lambda sl: sl.name)
            candidates.append((-sum(sl.offer.usd_per_hour for sl in slots), slots[0].name, slots, job))
        candidates.sort(key=lambda t: (t[0], t[1]))
        # Ready spot nodes of each offer with room: a job moves into one before a node of its offer is bought
        # (an idle spot node would otherwise be terminated beside an identical launch).
        # Nodes consolidation emptied in this pass count too (``emptied``: their terminations; the job keeps the
        # node instead of a new one like it). A node reserved for a waiting gang takes a job that ends before
        # the reservation (``_spot_room``; before 2026-11-28 such nodes were left out, whatever the job's end).
        going = {t.node_id for t in emptied}
        spot_room: dict[str, list[Slot]] = {}
        for slot in self.index.slots.values():
            node = self.nodes.get(slot.name)
            if slot.new or (not slot.schedulable and slot.name not in going) \
                    or node is None or node.state is not NodeState.READY or slot.offer.market is not Market.SPOT:
                continue
            spot_room.setdefault(slot.offer.key, []).append(slot)
        migrations: list[Migrate] = []
        terminations: list[Terminate] = []
        for _, _, slots, job in candidates:
            if len(slots) > budget_left - len(terminations):
                continue
            if self.on_demand_gpus - sum(sl.offer.instance_type.gpu_count for sl in slots) < p.on_demand_base_gpus:
                continue
            held = sum(sl.offer.usd_per_hour for sl in slots)
            since = job.work_since_checkpoint_hours(self.now)
            left = job.remaining_hours - since  # work still to do in this run
            cost = held * (since + p.restart_overhead_minutes / 60)
            for option in self.options(job, True, short=True):  # the cheapest per GPU and per node
                offer = option.offer
                if offer.market is not Market.SPOT:
                    continue
                saving = held - option.cost
                if saving <= 0:
                    break  # options are sorted by risk-adjusted cost: none cheaper follows
                payback = cost / saving
                if payback > p.consolidation_payback_hours or payback >= left:
                    break
                room = self._spot_room(job, spot_room.get(offer.key, ()))
                if room is not None:
                    if self._move_breaks_rules(slots, option, existing=True):
                        continue
                    if room.name in going:  # emptied by consolidation: kept for this job instead
                        self.index.restore(room)
                        emptied[:] = [t for t in emptied if t.node_id != room.name]
                        going.discard(room.name)
                        for i, m in enumerate(consolidated):
                            if m.from_node_ids == (room.name,):
                                price = f"${room.offer.usd_per_hour:.2f}/h"
                                consolidated[i] = replace(m, detail=m.detail.replace(
                                    f"frees {room.name} ({price})", f"makes room on {room.name} for {job.job_id}, "
                                    f"which moves to spot (a {price} node not bought)", 1))
                    self._move_into(job, slots, room, option, held, cost, payback, migrations, terminations)
                    break
                if self._move_breaks_rules(slots, option):
                    continue
                targets = [self._new_slot(offer) for _ in range(option.nodes)]
                gang = job.job_id if len(targets) > 1 else None
                if gang is not None:
                    self.slot_gang.update((t.name, gang) for t in targets)
                self.launch_jobs.setdefault(offer.key, []).append(job.job_id)
                self.launch_reason.setdefault(offer.key, Reason.CONSOLIDATION)
                self._charge_offer(offer, option.nodes, gang)
                for sl in slots:
                    self._charge_offer(sl.offer, -1, self.slot_gang.get(sl.name))
                    self.index.withdraw(sl)
                    self.index.give_back(sl, job)
                to_ids: list[str] = []
                per, unplaced = _per_node(job, offer), job.workers
                for target in targets:
                    workers = min(per, unplaced)
                    unplaced -= workers
                    self.new_index.take(target, job, workers)
                    to_ids.extend([target.name] * workers)
                where = _where(offer)
                detail = (f"spot is back: {option.nodes} x {offer.instance_type.name} spot in {where} "
                          f"(${option.cost:.2f}/h risk-adjusted) replaces {', '.join(sl.name for sl in slots)} "
                          f"(${held:.2f}/h); the move costs ${cost:.2f}, pays back in {payback:.1f} h")
                self._note(job, f"migrates to spot: {detail}")
                migrations.append(Migrate(job.job_id, tuple(sl.name for sl in slots), tuple(to_ids),
                                          Reason.CONSOLIDATION, detail))
                terminations.extend(Terminate(sl.name, Reason.CONSOLIDATION,
                                              f"its job moved to spot; saves ${sl.offer.usd_per_hour:.2f}/h")
                                    for sl in slots)
                break
        return migrations, terminations

    def _spot_room(self, job: Job, slots: Iterable[Slot]) -> Slot | None:
        """A ready spot node among ``slots`` (of one offer) with room for all of ``job``
        (so the option is one node): the one with the fewest GPUs left over,
        then by name; None when none has room."""
        ends_at = self._ends_after_restart(job)
        fits = [sl for sl in slots if sl.workers_fit(job) >= job.workers
                and (sl.reserved_until is None or ends_at <= sl.reserved_until)]
        return min(fits, key=lambda sl: (sl.free_gpus, sl.name)) if fits else None

    def _move_into(self, job: Job, slots: list[Slot], target: Slot, option: _Option, held: float, cost: float,
                   payback: float, migrations: list[Migrate], terminations: list[Terminate]) -> None:
        """Move ``job`` off its on-demand ``slots`` into the room of the spot node ``target``."""
        for sl in slots:
            self._charge_offer(sl.offer, -1, self.slot_gang.get(sl.name))
            self.index.withdraw(sl)
            self.index.give_back(sl, job)
        self.index.take(target, job, job.workers)
        target.touched = True  # received work in this pass
        offer = target.offer
        detail = (f"spot is back: {target.name} ({offer.instance_type.name} spot in {_where(offer)}, "
                  f"${option.cost:.2f}/h risk-adjusted) has room and replaces {', '.join(sl.name for sl in slots)} "
                  f"(${held:.2f}/h); the move costs ${cost:.2f}, pays back in {payback:.1f} h")
        self._note(job, f"migrates to spot: {detail}")
        migrations.append(Migrate(job.job_id, tuple(sl.name for sl in slots), (target.name,) * job.workers,
                                  Reason.CONSOLIDATION, detail))
        terminations.extend(Terminate(sl.name, Reason.CONSOLIDATION,
                                      f"its job moved to spot; saves ${sl.offer.usd_per_hour:.2f}/h")
                            for sl in slots)

    def _move_breaks_rules(self, slots: list[Slot], option: _Option, existing: bool = False) -> bool:
        """Whether replacing the on-demand ``slots`` with ``option``'s new spot
        nodes breaks a rule of the fleet after the move (the on-demand nodes
        gone): the spot share, the type and zone spread and
        ``min_distinct_offers`` (one unit: a node or a gang's nodes). The
        budget and ``max_gpus`` count both: the new nodes are up before the
        old ones go. ``existing``: the job moves into a spot node the fleet
        holds; it adds nothing to the budget or ``max_gpus``, so a fleet
        already over them moves too (before 2026-11-28 it did not: the job
        stayed on-demand and the idle spot node went), and only the spot
        share can change (the on-demand GPUs go)."""
        p = self.policy
        offer = option.offer
        gpus = 0 if existing else option.nodes * offer.instance_type.gpu_count
        if not existing:
            if p.max_usd_per_hour is not None and \
                    self.held_usd + option.nodes * offer.usd_per_hour > p.max_usd_per_hour + 1e-9:
                return True
            if p.max_gpus is not None and self.held_gpus + gpus > p.max_gpus:
                return True
        share_before = self._spot_share_excess() if gpus == 0 else 0.0  # read below only for gpus == 0
        for sl in slots:
            self._charge_offer(sl.offer, -1, self.slot_gang.get(sl.name))
        try:
            if self._market_rule(offer, gpus, gpus) is not None:
                return True
            if gpus == 0 and self._spot_share_excess() > max(0.0, share_before) + 1e-9:
                return True  # the on-demand GPUs the move frees leave spot past its share (or further past)
            return not existing and self._too_few_offers(offer)
        finally:
            for sl in slots:
                self._charge_offer(sl.offer, 1, self.slot_gang.get(sl.name))

    def _new_slot(self, offer: Offer) -> Slot:
        """A node of ``offer`` bought in this step (a launch name, an empty slot)."""
        self.new_count += 1
        slot = Slot.of(f"new-{self.new_count}", offer, new=True)
        self.new_index.add(slot)
        self.launch_names.setdefault(offer.key, []).append(slot.name)
        self.launch_offer[offer.key] = offer
        return slot

    def _gpus_by_model(self) -> tuple[dict[str, int], dict[str, int]]:
        """GPUs held (existing and bought in this pass) and GPUs busy, per GPU model."""
        held: dict[str, int] = {}
        busy: dict[str, int] = {}
        for index in (self.index, self.new_index):
            for slot in index.slots.values():
                it = slot.offer.instance_type
                if not it.gpu_model or (not slot.new and not slot.schedulable and not slot.jobs):
                    continue
                held[it.gpu_model] = held.get(it.gpu_model, 0) + it.gpu_count
                busy[it.gpu_model] = busy.get(it.gpu_model, 0) + it.gpu_count - slot.free_gpus
        return held, busy

    def headroom(self) -> None:
        """Design choice (``scaling.max_headroom_gpus``): when the forecast's
        90th-percentile demand for a GPU model an hour ahead is above what the
        fleet holds, buy the difference ahead, at most the policy's cap, from
        the cheapest offers per GPU (risk-adjusted, spot allowed), within the
        market rules and the budget. The nodes are kept idle by ``idle`` while
        the forecast still wants them."""
        cap = self.policy.max_headroom_gpus
        if cap <= 0 or not self.demand_p90:
            return
        held, busy = self._gpus_by_model()
        # Idle nodes idle() will let go (past what the forecast wants, or dearer per GPU than the ones kept)
        # are not held: counted, they kept this pass from buying and the next pass bought (before 2026-11-28).
        empty = self._idle_gpus_of_idle_nodes()
        for node_id in self._warm_nodes(self._warm_budget(held, busy, empty), set()):
            empty[self.nodes[node_id].offer.instance_type.gpu_model] -= self.nodes[node_id].offer.instance_type.gpu_count
        for model in sorted(self.demand_p90):
            held[model] = held.get(model, 0) - empty.get(model, 0)  # the idle nodes kept stay counted
            # The cap holds across passes: idle GPUs of the model already held count against it.
            idle_now = held.get(model, 0) - busy.get(model, 0)
            want = min(cap - idle_now, math.ceil(self.demand_p90[model] - held.get(model, 0) - 1e-9))
            if want <= 0:
                continue
            offers = [o for o in self.offers if o.instance_type.gpu_model == model and o.instance_type.gpu_count > 0]
            offers.sort(key=lambda o: (o.usd_per_hour * (1 + self._p(o)) / o.instance_type.gpu_count,
                                       self.offer_key[id(o)]))
            # One node at a time, each from the cheapest offer the rules allow now: a rule that refuses
            # an offer for this node (the on-demand base not yet met, the spot share) may allow it for
            # the next; trying each offer once in price order bought the rest on demand.
            while want > 0:
                offer = next((o for o in offers if self._headroom_allows(o, want)), None)
                if offer is None:
                    break
                gpus = offer.instance_type.gpu_count
                self._new_slot(offer)
                self.launch_reason.setdefault(offer.key, Reason.FORECAST_HEADROOM)
                self.headroom_gpus[offer.key] = self.headroom_gpus.get(offer.key, 0) + gpus
                self._charge_offer(offer)
                want -= gpus

    def _headroom_allows(self, offer: Offer, want: int) -> bool:
        """Whether one more node of ``offer`` may be bought ahead for ``want`` GPUs: no more GPUs than
        wanted, within the market rules, the on-demand base, ``max_gpus`` and the budget."""
        gpus = offer.instance_type.gpu_count
        if gpus > want or self._market_rule(offer, gpus) is not None or self._too_few_offers(offer):
            return False
        if offer.market is Market.SPOT and \
                self.on_demand_gpus < min(self.policy.on_demand_base_gpus, self.gpus + gpus):
            return False  # the first on_demand_base_gpus GPUs are on demand
        if self.policy.max_gpus is not None and self.held_gpus + gpus > self.policy.max_gpus:
            return False
        return self.policy.max_usd_per_hour is None or \
            self.held_usd + offer.usd_per_hour <= self.policy.max_usd_per_hour + 1e-9

    def _defer_purchases(self, admitted: list[tuple[Job, bool]]) -> list[tuple[Job, bool]]:
        """``scaling.scale_up_cooldown_seconds``: within the cooldown after a
        launch, jobs that need new capacity wait (free capacity still serves),
        except a job whose deadline could not afford the wait (its slack, after
        its remaining work and a restart, is shorter than the cooldown left).
        Returns the jobs that buy now."""
        wait = self.scale_up_wait
        assert wait is not None
        last = wait - timedelta(seconds=self.policy.scale_up_cooldown_seconds)
        left_hours = (wait - self.now).total_seconds() / 3600
        restart = self.policy.restart_overhead_minutes / 60
        urgent = [(job, ok) for job, ok in admitted if job.deadline_utc is not None and
                  (job.deadline_utc - self.now).total_seconds() / 3600 - job.remaining_hours - restart < left_hours]
        for job, _ in urgent:
            self._note(job, "buys within the scale-up cooldown: its deadline cannot afford the wait")
        now_ids = {job.job_id for job, _ in urgent}
        waiting = [(job, ok) for job, ok in admitted if job.job_id not in now_ids]
        for job, _ in waiting:
            self.order.charge(job, sign=-1)  # admission charged it for a purchase that waits
            self.unplaced.append(Unplaced(job.job_id, Reason.WAITING_FOR_CAPACITY,
                f"{_describe_need(job)}; scale-up cooldown: the last launch was "
                f"{(self.now - last).total_seconds():.0f} s ago (scaling.scale_up_cooldown_seconds "
                f"{self.policy.scale_up_cooldown_seconds:g}); buys again from {wait:%Y-%m-%d %H:%M:%S} UTC"))
        return urgent

    def _idle_wanted(self, busy: dict[str, int]) -> dict[str, int]:
        """Idle GPUs per model the forecast headroom wants: the 90th percentile less the busy GPUs, at most
        ``scaling.max_headroom_gpus``."""
        cap = self.policy.max_headroom_gpus
        return {m: min(cap, math.ceil(p90 - busy.get(m, 0) - 1e-9)) for m, p90 in self.demand_p90.items()}

    def _warm_budget(self, held: dict[str, int], busy: dict[str, int], empty: dict[str, int]) -> dict[str, int]:
        """GPUs per model of idle nodes the forecast wants kept: the idle GPUs wanted less those held
        elsewhere (free GPUs of busy and launching nodes and of the nodes bought in this pass, which count
        against the cap as headroom() counts them); ``empty``: :meth:`_idle_gpus_of_idle_nodes`."""
        return {m: want - (held.get(m, 0) - busy.get(m, 0) - empty.get(m, 0))
                for m, want in self._idle_wanted(busy).items()}

    def _idle_gpus_of_idle_nodes(self) -> dict[str, int]:
        """GPUs per model of the ready existing nodes that hold nothing (not reserved): the ones idle() keeps
        warm for the forecast or lets go."""
        empty: dict[str, int] = {}
        for node in self.fleet:
            slot = self.index.slots.get(node.node_id)
            model = node.offer.instance_type.gpu_model
            if slot is not None and model and node.state is NodeState.READY and not slot.jobs \
                    and slot.reserved_for is None and slot.schedulable:
                empty[model] = empty.get(model, 0) + node.offer.instance_type.gpu_count
        return empty

    def _warm_nodes(self, keep: dict[str, int], already: set[str]) -> set[str]:
        """The idle nodes kept warm for the forecast within ``keep`` GPUs per model: the cheapest per GPU
        (risk-adjusted) first, as headroom() buys; the dearer ones idle out (before 2026-11-28 they were
        kept in node-id order)."""
        keep = dict(keep)
        warm = []
        for node in self.fleet:
            slot = self.index.slots.get(node.node_id)
            it = node.offer.instance_type
            if slot is None or node.node_id in already or node.state is not NodeState.READY or slot.jobs \
                    or slot.reserved_for is not None or not slot.schedulable or not it.gpu_model or not it.gpu_count:
                continue
            warm.append((node.offer.usd_per_hour * (1 + self._p(node.offer)) / it.gpu_count, node.node_id,
                         it.gpu_model, it.gpu_count))
        kept: set[str] = set()
        for _, node_id, model, gpus in sorted(warm):
            if keep.get(model, 0) >= gpus:
                keep[model] -= gpus
                kept.add(node_id)
        return kept

    def idle(self, already: set[str]) -> list[Terminate]:
        timeout = timedelta(minutes=self.policy.idle_timeout_minutes)
        result = []
        # idle GPUs per model the forecast still wants kept (scaling.max_headroom_gpus)
        keep: dict[str, int] = {}
        if self.policy.max_headroom_gpus > 0 and self.demand_p90:
            held, busy = self._gpus_by_model()
            keep = self._warm_budget(held, busy, self._idle_gpus_of_idle_nodes())
        kept = self._warm_nodes(keep, already) if keep else set()
        for node in self.fleet:
            slot = self.index.slots.get(node.node_id)
            if slot is None or node.node_id in already:
                continue
            if node.state is NodeState.DRAINING and not slot.jobs:
                result.append(Terminate(node.node_id, Reason.INTERRUPTION,
                    f"drained after a reclaim notice; saves ${node.offer.usd_per_hour:.2f}/h"))
                continue
            if node.state is not NodeState.READY:
                continue
            if slot.jobs or slot.reserved_for is not None:
                continue
            since = node.idle_since_utc or node.ready_at_utc or node.launched_at_utc
            if node.node_id in self.vacated:
                since = self.now  # it ran a job this pass preempted: not idle before now
            if node.node_id in kept:
                continue  # kept warm for the forecast demand
            if self.now - since >= timeout and self.scale_down_wait is not None:
                continue  # scale-down cooldown after a launch or termination: it goes on a later pass
            if self.now - since >= timeout:
                minutes = (self.now - since).total_seconds() / 60
                result.append(Terminate(node.node_id, Reason.IDLE,
                    f"idle for {minutes:.0f} min (timeout {self.policy.idle_timeout_minutes:g} min), "
                    f"saves ${node.offer.usd_per_hour:.2f}/h"))
        return result

    # ------------------------------------------------------------------ the pass

    def run(self) -> Plan:
        before_usd = sum(n.offer.usd_per_hour for n in self.fleet if n.state in _HELD)
        before_risk = sum(self._p(n.offer) for n in self.fleet if n.state in _HELD)
        queued = self.load_fleet()
        admitted = self.run_queue(queued)
        if self.scale_up_wait is not None:
            admitted = self._defer_purchases(admitted)
        self.buy(admitted)
        self._idle_after_all()
        self._limited_into_leftovers()
        self._fallback_to_idle()
        migrations, consolidated = self.consolidate()
        budget = self.policy.disruption_budget_nodes - self.drained
        moved, replaced = self.replace_with_spot(budget if self.scale_up_wait is None else 0, consolidated,
                                                 migrations)
        migrations += moved
        consolidated += replaced
        self.drained += len(replaced)  # the disruption budget counts the nodes the move emptied too
        if self.deferred:  # nodes left to the move back to spot (those it emptied hold no job: skipped)
            more, emptied = self.consolidate(self.deferred)
            migrations += more
            consolidated += emptied
        if self.scale_up_wait is None:
            # After the moves: an idle node a move filled is no headroom, and a node a move empties is
            # (before 2026-11-28 it ran first, and the next pass bought what a move had used up).
            self.headroom()
        idle = self.idle({t.node_id for t in consolidated})
        terminates = sorted(consolidated + idle, key=lambda t: t.node_id)
        launches = [
            Launch(
                self.launch_offer[key],
                tuple(names),
                self.launch_reason[key],
                f"{self.launch_offer[key].usd_per_hour:.4f} $/h each, " + (
                    f"risk-adjusted best for {', '.join(self.launch_jobs[key])}" if key in self.launch_jobs else "")
                + (f"{'; ' if key in self.launch_jobs else ''}{self.headroom_gpus[key]} GPU(s) ahead of the "
                   f"forecast demand" if key in self.headroom_gpus else ""),
            )
            for key, names in self.launch_names.items()
        ]
        binds = self.actions_bind
        actions: tuple[Action, ...] = (*launches, *self.actions_preempt, *binds, *migrations, *terminates)
        after_usd = before_usd + sum(l.offer.usd_per_hour * l.count for l in launches)
        after_usd -= sum(self.nodes[t.node_id].offer.usd_per_hour for t in terminates)
        after_risk = before_risk + sum(self._p(l.offer) * l.count for l in launches)
        after_risk -= sum(self._p(self.nodes[t.node_id].offer) for t in terminates)
        unplaced = tuple(sorted(self.unplaced, key=lambda u: u.job_id))
        explanations = tuple(Explanation(j, tuple(lines)) for j, lines in sorted(self.explain.items()))
        return Plan(
            actions=actions,
            unplaced=unplaced,
            usd_per_hour_before=round(before_usd, 6),
            usd_per_hour_after=round(after_usd, 6),
            risk_before=round(before_risk, 6),
            risk_after=round(after_risk, 6),
            explanations=explanations,
        )


def plan(
    *,
    now: datetime,
    queue: tuple[Job, ...] | list[Job],
    fleet: tuple[Node, ...] | list[Node],
    offers: tuple[Offer, ...] | list[Offer],
    forecast: Forecast | None,
    policy: Policy,
    last_termination_utc: datetime | None = None,
) -> Plan:
    """Turn queue + fleet + offers + forecast + policy into a Plan. Pure and deterministic.
    ``last_termination_utc``: when the fleet last lost a node to a termination
    (for ``scaling.scale_down_cooldown_minutes``; the last launch is the fleet's own)."""
    return _Pass(now, queue, fleet, offers, forecast, policy, last_termination_utc).run()


class PlannedFleet:
    """A fleet after a full pass, ready to place newly arrived jobs one at a time.

    ``PlannedFleet(now=..., queue=..., fleet=..., offers=..., forecast=..., policy=...)``
    runs the same pass as ``plan`` (its result is ``.plan``) and keeps the
    pass's working state, so ``place(job)`` answers for one new job in the time
    of one placement instead of a whole pass: free capacity first (existing
    nodes, then those the plan buys), else a purchase under the same market,
    diversification, GPU-cap and budget rules (and the scale-up cooldown),
    else the reason it waits.
    It is pure like ``plan``: nothing outside the object changes.
    """

    def __init__(self, *, now: datetime, queue, fleet, offers, forecast: Forecast | None, policy: Policy,
                 last_termination_utc: datetime | None = None) -> None:
        self._pass = _Pass(now, queue, fleet, offers, forecast, policy, last_termination_utc)
        self.plan = self._pass.run()
        self._risk = self.plan.risk_after

    def place(self, job: Job) -> Plan:
        """Place one new queued job; returns only this job's actions (a launch, a bind) or its reason."""
        p = self._pass
        p.strict, p.projected_spot_gpus, p.projected_total_gpus = True, 0, 0  # one job at a time: the rule after every purchase
        binds_before, launches_before = len(p.actions_bind), {k: len(v) for k, v in p.launch_names.items()}
        unplaced_before = len(p.unplaced)
        usd_before = p.usd
        spot_ok, _ = p._spot_ok(job)
        kinds = p._kinds(job, spot_ok)
        quota = over_burst(job, p.usage, p.policy)  # the burst limit holds on free capacity too
        placed = None if quota is not None else p.place_existing(job, kinds)
        if placed is None and quota is None:
            placed = p.place_existing(job, p._new_kinds(job, spot_ok), p.new_index)
        if placed is not None:
            p.commit(job, placed, Reason.FITS_FREE_CAPACITY if not placed[0][0].new else Reason.FITS_NEW_CAPACITY, None)
            p.usage.setdefault(job.team, TeamUsage()).add(job)
        else:
            if quota is not None:
                p.unplaced.append(Unplaced(job.job_id, Reason.QUOTA_EXCEEDED, quota))
            else:
                p.usage.setdefault(job.team, TeamUsage()).add(job)  # _buy_one uncharges if it fails
                # within the scale-up cooldown it waits (uncharged), as in a full pass, unless its deadline cannot
                if p.scale_up_wait is None or p._defer_purchases([(job, spot_ok)]):
                    p._buy_one(job, spot_ok, {})
        launches = []
        for key, names in p.launch_names.items():
            fresh = tuple(names[launches_before.get(key, 0):])
            if fresh:
                launches.append(Launch(p.launch_offer[key], fresh, p.launch_reason[key],
                                       f"{p.launch_offer[key].usd_per_hour:.4f} $/h each, risk-adjusted best for {job.job_id}"))
        risk_before = self._risk
        self._risk += sum(p._p(l.offer) * l.count for l in launches)
        lines = tuple(p.explain.get(job.job_id, ()))
        return Plan(
            actions=(*launches, *p.actions_bind[binds_before:]),
            unplaced=tuple(p.unplaced[unplaced_before:]),
            usd_per_hour_before=round(usd_before, 6),
            usd_per_hour_after=round(p.usd, 6),
            risk_before=round(risk_before, 6),
            risk_after=round(self._risk, 6),
            explanations=(Explanation(job.job_id, lines),) if lines else (),
        )
