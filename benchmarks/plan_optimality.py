"""How far the planner's purchases are from the cheapest possible: planner vs. exact MILP.

On small random instances (up to 30 queued jobs, up to 20 offers sampled from
the real catalog, an empty fleet, diversification on) the planner's plan and an
exact mixed-integer program solved by HiGHS (``pip install highspy``) are
measured on one objective, the **risk-adjusted USD/hour**::

    sum over bought nodes of offer.usd_per_hour
  + sum over placed workers of p(offer) * L(job) * gpus_per_worker / gpu_count(offer) * offer.usd_per_hour

``p`` is the policy's default spot interruption probability per hour for a
spot offer and 0 on demand (no forecast); ``L`` the hours an interruption
costs the job (half its checkpoint interval if it checkpoints, else half its
duration) plus the restart overhead. For a job whose workers are all on one
offer the second term is ``p * L * share(job, offer) * price`` with
``share = workers * gpus_per_worker / gpu_count``; a gang split over several
offers of one zone pays it per worker, on each worker's offer.

Both plans must satisfy the same rules (checked by :func:`evaluate`, which is
also run on the MILP's own solution): every job placed, all workers of a gang
in one placement domain; per node, GPUs/vCPUs/memory within the instance type;
the job's GPU models; no spot for jobs that may not use it; and on the spot
capacity bought: per instance type ``<= share * spot GPUs + one unit of it``,
per zone ``<= share * spot GPUs + one unit there``, at least
``min_distinct_offers`` distinct spot offers once it has that many spot units
(capped, as the planner's ``_min_distinct``, at the distinct spot offers on
sale), spot GPUs ``<= max_spot_share`` of all, on-demand GPUs
``>= min(on_demand_base_gpus, all)``.

**A gang is one unit** for the three spread rules (the planner's rule, see
docs/planner.md: a gang's nodes fail together). A gang is a job with
``workers > 1`` placed on more than one node (read off the placements:
:func:`gang_nodes`). The "one unit" allowance of a type is the larger of its
largest spot node bought and, over the gangs, a gang's spot GPUs of that type;
of a zone, the larger of the largest spot node offered there and a gang's spot
GPUs in it. The units counted for ``min_distinct_offers`` are the spot nodes,
those linked by a gang counting once (connected components of spot nodes that
share a gang: :func:`spot_units`). The planner files each node under one gang
(the one it bought it for); a plan does not say which, so a node holding
workers of several gangs counts for each of them here. That is at least as
permissive as the planner's own accounting (a flag is a real break of its
rule), at the price that the MILP may merge two gangs' allowances or units by
sharing a node where the planner would count them apart (which can only lower
the optimum). Before the gang rule the checker and the MILP applied the caps
node by node and flagged 17 of the 50 default instances (all with 3+ gangs),
with the planner "below the optimum" in 14.

The MILP bounds the nodes of each offer by ``max(1, sum over the jobs that fit
it of ceil(workers / workers per node))`` (enough to run every job that fits on
that offer alone). Every generated job also has an on-demand offer it fits, so
an all-on-demand plan always exists and the MILP is never infeasible. It
encodes the gang rule exactly: binaries ``u[g, node] <= workers of g there``
(the checker credits every node with a worker of g, the MILP may credit
fewer, so it never claims more than the checker allows); per type and zone a
binary picks the gang that gives the allowance (big-M, at most one), and "fewer
than ``min_distinct_offers`` units" is certified by a flow from at most
``min_distinct_offers - 1`` root nodes to every spot node bought along
node-gang-node arcs open where ``u = 1``. When HiGHS proves optimality the
objective is the optimum under the checker's rules (``milp_exact`` in the
JSON); instances it does not prove within ``--time-limit`` are listed in
``optimum_not_proved`` and their ratio is against the best plan found.

Writes ``benchmarks/results/plan_optimality.json`` and prints a summary.

Usage::

    python benchmarks/plan_optimality.py [--instances 50] [--seed 0] [--time-limit 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import math
import random
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Final

from fleetctl.model import (
    Bind,
    Job,
    Launch,
    Market,
    Offer,
    Plan,
    Policy,
    PriorityClass,
    Team,
)
from providers.catalog import load_catalog

HERE: Final[Path] = Path(__file__).resolve().parent
DEFAULT_OUT: Final[Path] = HERE / "results" / "plan_optimality.json"
NOW: Final[datetime] = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
EPS: Final[float] = 1e-6

MAX_JOBS: Final[int] = 30
MAX_OFFERS: Final[int] = 20

PlanFn = Callable[..., Plan]

GANG_RULE: Final[str] = (
    "a gang (a job with workers > 1 on more than one node) is one unit for the spot spread rules: the "
    "per-type / per-zone allowance is max(one node, max over gangs of the gang's spot GPUs of that type / in "
    "that zone); min_distinct_offers applies once the spot units (spot nodes linked by a shared gang count "
    "once: connected components) reach it, capped at the distinct spot offers on sale; a node holding "
    "workers of several gangs counts for each (at least as permissive as the planner's one-gang-per-node)")


# =========================================================================== instances


@dataclass(frozen=True)
class Instance:
    """One small planning problem: queued jobs, offers, policy; the fleet is empty."""

    index: int
    jobs: tuple[Job, ...]
    offers: tuple[Offer, ...]
    policy: Policy

    def job(self, job_id: str) -> Job | None:
        for j in self.jobs:
            if j.job_id == job_id:
                return j
        return None


def instance_policy(rng: random.Random) -> Policy:
    """Diversification on (0.5 per type, 0.5 per zone, 3 distinct offers); the
    market rules vary: max spot share 1.0 or 0.75, on-demand base 0 or 8 GPUs."""
    return Policy(
        priority_classes=(
            PriorityClass("production", 1000, preemptible=False, spot_eligible=False),
            PriorityClass("batch", 100, preemptible=True, spot_eligible=True),
        ),
        default_priority_class="batch",
        teams=(Team("a"), Team("b")),
        max_usd_per_hour=None,
        max_share_per_instance_type=0.5,
        max_share_per_zone=0.5,
        min_distinct_offers=3,
        max_spot_share=rng.choice((1.0, 1.0, 0.75)),
        on_demand_base_gpus=rng.choice((0, 0, 0, 8)),
    )


def spot_ok(job: Job, policy: Policy) -> bool:
    """May the job run on spot (its own flag, else its priority class)?"""
    if job.spot_eligible is not None:
        return job.spot_eligible
    return policy.priority_class(job.priority).spot_eligible


def workers_per_node(job: Job, offer: Offer) -> int:
    """Workers of ``job`` one empty node of ``offer`` holds (resources only)."""
    it = offer.instance_type
    limits = [it.gpu_count // job.gpus_per_worker if job.gpus_per_worker else 1 << 30]
    if job.vcpus_per_worker > 0:
        limits.append(int(it.vcpus // job.vcpus_per_worker))
    if job.memory_gib_per_worker > 0:
        limits.append(int(it.memory_gib // job.memory_gib_per_worker))
    return max(0, min(limits))


def compatible(job: Job, offer: Offer, policy: Policy) -> bool:
    """A worker of ``job`` may run on an (empty) node of ``offer``."""
    it = offer.instance_type
    if offer.market is Market.SPOT and not spot_ok(job, policy):
        return False
    if job.gpus_per_worker > 0 and (it.gpu_model is None or it.gpu_count == 0):
        return False
    if job.gpu_models and it.gpu_model not in job.gpu_models:
        return False
    return workers_per_node(job, offer) >= 1


def interruption_probability(offer: Offer, policy: Policy) -> float:
    """p(offer): the policy's default per hour for spot, 0 on demand (no forecast)."""
    return policy.default_spot_interruption_probability_per_hour if offer.market is Market.SPOT else 0.0


def loss_hours(job: Job, policy: Policy) -> float:
    """L(job): hours one interruption costs (lost work plus restart)."""
    if job.checkpointable and job.checkpoint_interval_minutes:
        lost = job.checkpoint_interval_minutes / 2 / 60
    else:
        lost = job.duration_hours / 2
    return lost + policy.restart_overhead_minutes / 60


def worker_risk_usd(job: Job, offer: Offer, policy: Policy) -> float:
    """Risk-adjusted USD/h of one worker of ``job`` on ``offer`` (beyond the node price)."""
    gpus = offer.instance_type.gpu_count
    if gpus == 0:
        return 0.0
    return interruption_probability(offer, policy) * loss_hours(job, policy) * job.gpus_per_worker / gpus * offer.usd_per_hour


def _sample_offers(rng: random.Random, catalog: Sequence[Offer], n: int) -> list[Offer]:
    """``n`` offers: up to 5 from each of 3 busy placement domains (so gangs have
    choices within a zone), the rest anywhere; both markets present."""
    by_domain: dict[tuple[str, str, str], list[Offer]] = collections.defaultdict(list)
    for o in catalog:
        by_domain[o.placement_domain].append(o)
    busy = sorted(d for d, os_ in by_domain.items() if len(os_) >= 4)
    chosen: dict[str, Offer] = {}
    for domain in rng.sample(busy, min(3, len(busy))):
        for o in rng.sample(by_domain[domain], min(5, len(by_domain[domain]))):
            chosen.setdefault(o.key, o)
    while len(chosen) < n:
        o = rng.choice(catalog)
        chosen.setdefault(o.key, o)
    offers = sorted(chosen.values(), key=lambda o: o.key)
    rng.shuffle(offers)
    offers = offers[:n]
    for market in (Market.SPOT, Market.ON_DEMAND):
        if not any(o.market is market for o in offers):
            offers[-1] = rng.choice([o for o in catalog if o.market is market and o.key not in chosen])
    return sorted(offers, key=lambda o: o.key)


def _sample_job(rng: random.Random, job_id: str, offers: Sequence[Offer], policy: Policy) -> Job:
    """A job with an on-demand offer it fits (tries a few shapes, then drops its constraint)."""
    models = sorted({o.instance_type.gpu_model for o in offers if o.instance_type.gpu_model})
    for attempt in range(60):
        gpw = rng.choices((1, 2, 4, 8), (0.45, 0.25, 0.2, 0.1))[0]
        workers = rng.randint(2, 4) if rng.random() < 0.25 else 1
        constraint: tuple[str, ...] = ()
        if rng.random() < 0.3 and attempt < 50:
            constraint = tuple(sorted(rng.sample(models, min(len(models), rng.choice((1, 1, 2))))))
        priority = "production" if rng.random() < 0.15 else "batch"
        spot: bool | None = False if rng.random() < 0.15 else None
        duration = round(rng.uniform(0.25, 24.0), 2)
        checkpointable = rng.random() < 0.4
        job = Job(
            job_id=job_id,
            workers=workers,
            gpus_per_worker=gpw,
            vcpus_per_worker=float(gpw * rng.choice((2, 4, 6, 8))),
            memory_gib_per_worker=float(gpw * rng.choice((8, 16, 32))),
            priority=priority,
            team=rng.choice(("a", "b")),
            duration_hours=duration,
            submitted_at_utc=NOW - timedelta(minutes=rng.randint(0, 240)),
            gpu_models=constraint,
            checkpointable=checkpointable,
            checkpoint_interval_minutes=float(rng.choice((15, 30, 60))) if checkpointable else None,
            spot_eligible=spot,
        )
        if any(o.market is Market.ON_DEMAND and compatible(job, o, policy) for o in offers):
            return job
    raise RuntimeError(f"no job shape fits the on-demand offers of this instance ({job_id})")


def make_instance(index: int, seed: int, catalog: Sequence[Offer] | None = None,
                  max_jobs: int = MAX_JOBS, max_offers: int = MAX_OFFERS) -> Instance:
    """Instance ``index`` of ``seed`` (independent of the other instances)."""
    rng = random.Random(f"{seed}:optimality:{index}")
    catalog = list(catalog if catalog is not None else load_catalog())
    policy = instance_policy(rng)
    while True:
        offers = _sample_offers(rng, catalog, rng.randint(min(8, max_offers), max_offers))
        # the instance needs on-demand offers that can hold 1-GPU jobs at least
        if any(o.market is Market.ON_DEMAND and o.instance_type.gpu_count >= 1 for o in offers):
            break
    n_jobs = rng.randint(min(8, max_jobs), max_jobs)
    jobs = tuple(_sample_job(rng, f"j{i:02d}", offers, policy) for i in range(n_jobs))
    return Instance(index, jobs, tuple(offers), policy)


# =========================================================================== solutions and the checker


@dataclass(frozen=True)
class Solution:
    """What a plan buys and where it puts each worker (fleet empty)."""

    nodes: dict[str, Offer]  # node name -> offer it is bought from
    placements: dict[str, tuple[str, ...]]  # job id -> node of each worker
    unplaced: tuple[str, ...] = ()  # job ids the plan reports as not placed
    other_actions: tuple[str, ...] = ()  # actions an empty-fleet plan should not hold


@dataclass(frozen=True)
class Violation:
    """A broken rule: ``code`` (e.g. ``type_share``) and a readable detail."""

    code: str
    detail: str


@dataclass(frozen=True)
class Evaluation:
    """A solution measured on the common objective and checked against the rules."""

    node_usd_per_hour: float
    risk_usd_per_hour: float
    unplaced: tuple[str, ...]
    violations: tuple[Violation, ...]
    empty_nodes: int = 0  # nodes bought that hold no worker (e.g. bought only to spread spot capacity)

    @property
    def cost(self) -> float:
        """Risk-adjusted USD/hour."""
        return self.node_usd_per_hour + self.risk_usd_per_hour

    @property
    def complete(self) -> bool:
        """Every job placed."""
        return not self.unplaced

    @property
    def feasible(self) -> bool:
        """Every job placed and no rule broken."""
        return self.complete and not self.violations

    def as_json(self) -> dict[str, object]:
        return {
            "cost": round(self.cost, 6),
            "node_usd_per_hour": round(self.node_usd_per_hour, 6),
            "risk_usd_per_hour": round(self.risk_usd_per_hour, 6),
            "unplaced": list(self.unplaced),
            "violations": [asdict(v) for v in self.violations],
            "empty_nodes": self.empty_nodes,
            "complete": self.complete,
            "feasible": self.feasible,
        }


def solution_of_plan(plan: Plan) -> Solution:
    """Read Launches and Binds out of a Plan; anything else is noted."""
    nodes: dict[str, Offer] = {}
    placements: dict[str, tuple[str, ...]] = {}
    other: list[str] = []
    for action in plan.actions:
        if isinstance(action, Launch):
            for name in action.node_names:
                if name in nodes:
                    other.append(f"launch reuses node name {name}")
                nodes[name] = action.offer
        elif isinstance(action, Bind):
            if action.job_id in placements:
                other.append(f"job {action.job_id} bound twice")
            placements[action.job_id] = tuple(action.node_ids)
        else:
            other.append(f"{action.kind} {getattr(action, 'job_id', getattr(action, 'node_id', ''))}")
    return Solution(nodes, placements, tuple(u.job_id for u in plan.unplaced), tuple(other))


def evaluate(instance: Instance, solution: Solution) -> Evaluation:
    """The common objective of ``solution`` and every rule it breaks."""
    policy = instance.policy
    violations: list[Violation] = [Violation("unexpected_action", a) for a in solution.other_actions]
    offer_keys = {o.key for o in instance.offers}
    for name, offer in sorted(solution.nodes.items()):
        if offer.key not in offer_keys:
            violations.append(Violation("unknown_offer", f"node {name} bought from {offer.key}, not offered"))

    node_usd = sum(o.usd_per_hour for o in solution.nodes.values())
    risk_usd = 0.0
    used: dict[str, list[float]] = {name: [0, 0.0, 0.0] for name in solution.nodes}
    unplaced = []
    for job in instance.jobs:
        node_ids = solution.placements.get(job.job_id)
        if node_ids is None:
            unplaced.append(job.job_id)
            if job.job_id not in solution.unplaced:
                violations.append(Violation("missing_job", f"{job.job_id} is neither bound nor reported unplaced"))
            continue
        if job.job_id in solution.unplaced:
            violations.append(Violation("double_report", f"{job.job_id} is bound and reported unplaced"))
        if len(node_ids) != job.workers:
            violations.append(Violation("incomplete_gang", f"{job.job_id}: {len(node_ids)} nodes for {job.workers} workers"))
        domains = set()
        for name in node_ids:
            offer = solution.nodes.get(name)
            if offer is None:
                violations.append(Violation("unknown_node", f"{job.job_id} bound to {name}, which the plan does not buy"))
                continue
            domains.add(offer.placement_domain)
            it = offer.instance_type
            if offer.market is Market.SPOT and not spot_ok(job, policy):
                violations.append(Violation("spot_not_allowed", f"{job.job_id} ({job.priority}) on spot node {name} ({offer.key})"))
            if job.gpu_models and it.gpu_model not in job.gpu_models:
                violations.append(Violation("gpu_model", f"{job.job_id} needs {'/'.join(job.gpu_models)}, node {name} has {it.gpu_model}"))
            used[name][0] += job.gpus_per_worker
            used[name][1] += job.vcpus_per_worker
            used[name][2] += job.memory_gib_per_worker
            risk_usd += worker_risk_usd(job, offer, policy)
        if len(domains) > 1:
            violations.append(Violation("gang_domain", f"{job.job_id} spans {len(domains)} placement domains: {sorted(domains)}"))
    for job_id in solution.placements:
        if instance.job(job_id) is None:
            violations.append(Violation("unknown_job", f"bind of {job_id}, which is not in the queue"))
    for name, (gpus, vcpus, memory) in sorted(used.items()):
        it = solution.nodes[name].instance_type
        if gpus > it.gpu_count or vcpus > it.vcpus + EPS or memory > it.memory_gib + EPS:
            violations.append(Violation(
                "capacity", f"node {name} ({it.name}): {gpus}/{it.gpu_count} GPUs, {vcpus:g}/{it.vcpus} vCPU, "
                            f"{memory:g}/{it.memory_gib:g} GiB"))
    violations += _market_and_diversification(instance, solution)
    empty = sum(1 for name in solution.nodes if used[name][0] == 0 and used[name][1] == 0 and used[name][2] == 0)
    return Evaluation(node_usd, risk_usd, tuple(unplaced), tuple(violations), empty)


def gang_nodes(instance: Instance, solution: Solution) -> dict[str, tuple[str, ...]]:
    """The gangs of ``solution``: job id -> the distinct bought nodes it has a
    worker on, for every job with ``workers > 1`` placed on more than one node.

    Read off the placements alone (the planner's own record of which gang a node
    was bought for is not in a Plan). A node may hold workers of several gangs;
    see :func:`_market_and_diversification` for how that is counted."""
    out: dict[str, tuple[str, ...]] = {}
    for job in instance.jobs:
        names = solution.placements.get(job.job_id)
        if job.workers <= 1 or names is None:
            continue
        nodes = tuple(sorted({n for n in names if n in solution.nodes}))
        if len(nodes) > 1:
            out[job.job_id] = nodes
    return out


def spot_units(solution: Solution, gangs: dict[str, tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The spot nodes grouped into units: two spot nodes are one unit when one
    gang has workers on both (the connected components of that relation); a
    spot node no gang spans with another spot node is a unit alone."""
    spot = sorted(n for n, o in solution.nodes.items() if o.market is Market.SPOT)
    parent = {n: n for n in spot}

    def root(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for nodes in gangs.values():
        on_spot = [n for n in nodes if n in parent]
        for n in on_spot[1:]:
            a, b = root(on_spot[0]), root(n)
            if a != b:
                parent[max(a, b)] = min(a, b)
    units: dict[str, list[str]] = collections.defaultdict(list)
    for n in spot:
        units[root(n)].append(n)
    return sorted(tuple(u) for u in units.values())


def min_distinct_offers(instance: Instance, bought_spot_keys: Sequence[str] = ()) -> int:
    """The planner's ``_min_distinct``: ``min_distinct_offers``, but never more
    than the distinct spot offers on sale (the instance's spot offers with a
    price) or in use: the rule spreads spot over what exists."""
    want = instance.policy.min_distinct_offers
    on_sale = {o.key for o in instance.offers if o.market is Market.SPOT and o.usd_per_hour > 0}
    if want <= 1 or len(on_sale) >= want:
        return want
    return max(1, min(want, len(on_sale | set(bought_spot_keys))))


def _market_and_diversification(instance: Instance, solution: Solution) -> list[Violation]:
    """The spot-capacity rules on the nodes bought (the fleet is empty).

    **A gang is one unit** (the planner's rule since it counts a gang's spot
    nodes once): the allowance of "one node" in the per-type and per-zone caps
    is the larger of the largest spot node (of the type bought / offered in the
    zone) and, for each gang (:func:`gang_nodes`), the spot GPUs of its nodes of
    that type / in that zone; ``min_distinct_offers`` applies once the spot
    *units* (:func:`spot_units`) reach it.

    Trade-off, for a node holding workers of several gangs (the planner records
    one gang per node: the one it was bought for; a Plan does not say which):
    the checker credits the node to *every* gang with a worker on it (each
    gang's allowance counts all its nodes) and merges gangs that share a spot
    node into one unit. That is at least as permissive as the planner's own
    accounting (its gang's nodes all hold that gang's workers, so each planner
    allowance is one of the checker's, and each planner unit lies inside one
    checker unit), so a flag here is a real break of the planner's rule; the
    price is that a plan (the MILP's, which obeys the same rule) may share a
    node between two gangs to merge their allowances/units where the planner
    would count them apart, which can only lower the optimum it is measured
    against."""
    policy = instance.policy
    out: list[Violation] = []
    spot_names = sorted(n for n, o in solution.nodes.items() if o.market is Market.SPOT)
    spot = [solution.nodes[n] for n in spot_names]
    spot_gpus = sum(o.instance_type.gpu_count for o in spot)
    all_gpus = sum(o.instance_type.gpu_count for o in solution.nodes.values())
    on_demand_gpus = all_gpus - spot_gpus
    gangs = gang_nodes(instance, solution)

    type_gpus: dict[str, int] = collections.Counter()
    type_node: dict[str, int] = {}
    zone_gpus: dict[tuple[str, str, str], int] = collections.Counter()
    for o in spot:
        type_gpus[o.instance_type.name] += o.instance_type.gpu_count
        type_node[o.instance_type.name] = max(type_node.get(o.instance_type.name, 0), o.instance_type.gpu_count)
        zone_gpus[o.placement_domain] += o.instance_type.gpu_count
    # the allowance a gang gives: its spot GPUs per type and per zone
    type_gang: dict[str, tuple[int, str]] = {}
    zone_gang: dict[tuple[str, str, str], tuple[int, str]] = {}
    for job_id, nodes in sorted(gangs.items()):
        by_type: dict[str, int] = collections.Counter()
        by_zone: dict[tuple[str, str, str], int] = collections.Counter()
        for n in nodes:
            o = solution.nodes[n]
            if o.market is Market.SPOT:
                by_type[o.instance_type.name] += o.instance_type.gpu_count
                by_zone[o.placement_domain] += o.instance_type.gpu_count
        for name, g in by_type.items():
            if g > type_gang.get(name, (0, ""))[0]:
                type_gang[name] = (g, job_id)
        for zone, g in by_zone.items():
            if g > zone_gang.get(zone, (0, ""))[0]:
                zone_gang[zone] = (g, job_id)

    def allowance(node: int, gang: tuple[int, str] | None) -> tuple[int, str]:
        if gang is not None and gang[0] > node:
            return gang[0], f"gang {gang[1]}"
        return node, "one node"

    for name, gpus in sorted(type_gpus.items()):
        unit, what = allowance(type_node[name], type_gang.get(name))
        limit = policy.max_share_per_instance_type * spot_gpus + unit
        if gpus > limit + EPS:
            out.append(Violation("type_share", f"{gpus} spot GPUs of {name} > {policy.max_share_per_instance_type:g} x "
                                               f"{spot_gpus} + {unit} ({what}) = {limit:g}"))
    for zone, gpus in sorted(zone_gpus.items()):
        unit, what = allowance(zone_largest_spot_node(instance, zone, spot), zone_gang.get(zone))
        limit = policy.max_share_per_zone * spot_gpus + unit
        if gpus > limit + EPS:
            out.append(Violation("zone_share", f"{gpus} spot GPUs in {'/'.join(z or '*' for z in zone)} > "
                                               f"{policy.max_share_per_zone:g} x {spot_gpus} + {unit} ({what}) = {limit:g}"))
    distinct = len({o.key for o in spot})
    units = len(spot_units(solution, gangs))
    need = min_distinct_offers(instance, [o.key for o in spot])
    if units >= need and distinct < need:  # the policy: "once it has that many spot nodes", a gang's counting once
        out.append(Violation("distinct_offers", f"{len(spot)} spot nodes ({units} units, a gang's counting once) on "
                                                f"{distinct} distinct offers < {need}"))
    if spot_gpus > policy.max_spot_share * all_gpus + EPS:
        out.append(Violation("max_spot_share", f"{spot_gpus} spot GPUs > {policy.max_spot_share:g} x {all_gpus}"))
    base = min(policy.on_demand_base_gpus, all_gpus)
    if on_demand_gpus < base:
        out.append(Violation("on_demand_base", f"{on_demand_gpus} on-demand GPUs < min({policy.on_demand_base_gpus}, {all_gpus})"))
    return out


def zone_largest_spot_node(instance: Instance, zone: tuple[str, str, str], bought: Sequence[Offer] = ()) -> int:
    """The largest gpu_count among the instance's spot offers in ``zone`` (and any bought there)."""
    counts = [o.instance_type.gpu_count for o in (*instance.offers, *bought)
              if o.market is Market.SPOT and o.placement_domain == zone]
    return max(counts, default=0)


# =========================================================================== the MILP


@dataclass
class _Lp:
    """Columns and rows collected before one hand-over to HiGHS."""

    cost: list[float] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    rows: list[tuple[float, float, dict[int, float]]] = field(default_factory=list)

    def var(self, upper: float, cost: float = 0.0) -> int:
        """A new integer variable in ``[0, upper]``."""
        self.cost.append(cost)
        self.lower.append(0.0)
        self.upper.append(upper)
        return len(self.cost) - 1

    def row(self, terms: dict[int, float], lower: float = -math.inf, upper: float = math.inf) -> None:
        self.rows.append((lower, upper, {k: v for k, v in terms.items() if v != 0}))


@dataclass(frozen=True)
class MilpResult:
    """What HiGHS found: status, objective, whether optimality was proved, the
    solution (if any), its relative gap and the solver's seconds."""

    status: str
    objective: float | None
    proved_optimal: bool
    solution: Solution | None
    gap: float | None
    seconds: float
    variables: int
    constraints: int
    bound: float | None = None  # the solver's lower bound on the optimum
    start: str = "none"  # the MIP start: none, accepted, rejected, not mapped

    def as_json(self) -> dict[str, object]:
        return {
            "status": self.status,
            "objective": None if self.objective is None else round(self.objective, 6),
            "proved_optimal": self.proved_optimal,
            "gap": None if self.gap is None else round(self.gap, 6),
            "bound": None if self.bound is None else round(self.bound, 6),
            "start": self.start,
            "seconds": round(self.seconds, 3),
            "variables": self.variables,
            "constraints": self.constraints,
        }


def node_bound(instance: Instance, offer: Offer) -> int:
    """Most nodes of ``offer`` the MILP may buy: enough for every job that fits it, alone."""
    return max(1, sum(math.ceil(j.workers / workers_per_node(j, offer))
                      for j in instance.jobs if compatible(j, offer, instance.policy)))


def solve_milp(instance: Instance, time_limit: float = 20.0, threads: int = 1,
               start: Solution | None = None) -> MilpResult:
    """The cheapest risk-adjusted plan that keeps every rule, by HiGHS.

    ``start``: a plan that keeps every rule (the planner's, when :func:`evaluate`
    finds it feasible) handed to HiGHS as a partial MIP start (nodes bought,
    workers, gang credits; HiGHS completes the rest). It only seeds the
    incumbent: the optimum and the proof do not depend on it, but an instance
    not proved within the time limit then reports a plan at least as cheap as
    ``start`` (and ``bound``, the solver's lower bound, says how far off it
    may be)."""
    import highspy  # bench-only dependency: imported here so the checker works without it
    import numpy as np

    policy = instance.policy
    offers = instance.offers
    jobs = instance.jobs
    lp = _Lp()
    # y[o][k]: node k of offer o is bought; x[(j, o, k)]: workers of job j on it
    y: list[list[int]] = []
    for o in offers:
        y.append([lp.var(1, o.usd_per_hour) for _ in range(node_bound(instance, o))])
    x: dict[tuple[int, int, int], int] = {}
    for ji, job in enumerate(jobs):
        for oi, o in enumerate(offers):
            if compatible(job, o, policy):
                cap = min(job.workers, workers_per_node(job, o))
                for k in range(len(y[oi])):
                    x[(ji, oi, k)] = lp.var(cap, worker_risk_usd(job, o, policy))
    by_job: dict[int, list[tuple[int, int, int]]] = collections.defaultdict(list)
    by_node: dict[tuple[int, int], list[tuple[int, int, int]]] = collections.defaultdict(list)
    for key in x:
        by_job[key[0]].append(key)
        by_node[(key[1], key[2])].append(key)

    for ji, job in enumerate(jobs):  # every worker placed
        lp.row({x[k]: 1.0 for k in by_job[ji]}, job.workers, job.workers)
        domains = sorted({offers[oi].placement_domain for (_, oi, _) in by_job[ji]})
        if job.workers > 1 and len(domains) > 1:  # a gang in one domain
            pick = {d: lp.var(1) for d in domains}
            lp.row({v: 1.0 for v in pick.values()}, 1, 1)
            for d, v in pick.items():
                terms = {x[k]: 1.0 for k in by_job[ji] if offers[k[1]].placement_domain == d}
                terms[v] = -float(job.workers)
                lp.row(terms, upper=0)
    for oi, o in enumerate(offers):
        it = o.instance_type
        for k, yk in enumerate(y[oi]):
            keys = by_node[(oi, k)]
            for attr, capacity in (("gpus_per_worker", it.gpu_count), ("vcpus_per_worker", it.vcpus),
                                   ("memory_gib_per_worker", it.memory_gib)):
                terms = {x[key]: float(getattr(jobs[key[0]], attr)) for key in keys}
                terms[yk] = -float(capacity)
                lp.row(terms, upper=0)
            for key in keys:  # no worker on a node not bought (tightens the relaxation)
                lp.row({x[key]: 1.0, yk: -lp.upper[x[key]]}, upper=0)
            # a node bought holds work: an empty node is idle capacity the
            # controller would terminate, not a plan (the planner never buys one)
            lp.row({**{x[key]: 1.0 for key in keys}, yk: -1.0}, lower=0)
            if k > 0:  # symmetry: buy node k only after node k-1
                lp.row({y[oi][k - 1]: 1.0, yk: -1.0}, lower=0)

    spot = [oi for oi, o in enumerate(offers) if o.market is Market.SPOT]
    on_demand = [oi for oi, o in enumerate(offers) if o.market is Market.ON_DEMAND]

    def gpus_of(indexes: Sequence[int], scale: float = 1.0) -> dict[int, float]:
        return {v: scale * offers[oi].instance_type.gpu_count for oi in indexes for v in y[oi]}

    def add(*parts: dict[int, float]) -> dict[int, float]:
        total: dict[int, float] = collections.defaultdict(float)
        for part in parts:
            for k, v in part.items():
                total[k] += v
        return total

    u: dict[tuple[int, tuple[int, int]], int] = {}  # u[(gang, spot node)], see below
    if spot:
        # Gangs are one unit (see _market_and_diversification). u[(g, n)] = 1 only if gang g has a
        # worker on spot node n (u <= x); the MILP sets it where that helps, the checker credits
        # every such node, so the two agree. Only jobs with workers > 1 that fit >= 2 spot nodes.
        spot_nodes = [(oi, k) for oi in spot for k in range(len(y[oi]))]
        for ji, job in enumerate(jobs):
            if job.workers > 1:
                keys = [(oi, k) for (oi, k) in spot_nodes if (ji, oi, k) in x]
                if len(keys) > 1:
                    for n_ in keys:
                        u[(ji, n_)] = lp.var(1)
                        lp.row({u[(ji, n_)]: 1.0, x[(ji, *n_)]: -1.0}, upper=0)
        gangs = sorted({g for g, _ in u})

        def gang_allowance(nodes: Sequence[tuple[int, int]], one_node: int) -> dict[int, float]:
            """-w_g terms for a cap whose allowance is max(one_node, max over gangs g of the GPUs
            of g's nodes among ``nodes``): pick z_g (at most one gang); w_g <= M z_g and
            w_g <= sum gpus * u[g, n] - one_node * z_g, so the cap's right side gains
            max(0, that gang's GPUs - one_node). Exact (the z_g are binary)."""
            ws: dict[int, float] = {}
            zs: dict[int, float] = {}
            for g in gangs:
                mine = sorted((offers[oi].instance_type.gpu_count, (oi, k)) for (oi, k) in nodes if (g, (oi, k)) in u)
                most = sum(c for c, _ in mine[-jobs[g].workers:])  # a gang has at most `workers` nodes
                if most <= one_node:
                    continue  # this gang can never give more than one node
                z, w = lp.var(1), lp.var(most - one_node)
                lp.row({w: 1.0, z: -float(most - one_node)}, upper=0)
                lp.row({w: 1.0, z: float(one_node), **{u[(g, n_)]: -float(c) for c, n_ in mine}}, upper=0)
                ws[w] = -1.0
                zs[z] = 1.0
            if len(zs) > 1:
                lp.row(zs, upper=1)
            return ws

        for name in sorted({offers[oi].instance_type.name for oi in spot}):
            of_type = [oi for oi in spot if offers[oi].instance_type.name == name]
            one_node = max(offers[oi].instance_type.gpu_count for oi in of_type)
            extra = gang_allowance([(oi, k) for (oi, k) in spot_nodes if oi in of_type], one_node)
            lp.row(add(gpus_of(of_type), gpus_of(spot, -policy.max_share_per_instance_type), extra), upper=one_node)
        for zone in sorted({offers[oi].placement_domain for oi in spot}):
            in_zone = [oi for oi in spot if offers[oi].placement_domain == zone]
            largest = zone_largest_spot_node(instance, zone)
            extra = gang_allowance([(oi, k) for (oi, k) in spot_nodes if oi in in_zone], largest)
            lp.row(add(gpus_of(in_zone), gpus_of(spot, -policy.max_share_per_zone), extra), upper=largest)
        m = min_distinct_offers(instance)
        if m > 1:
            # once there are m spot units, at least m distinct spot offers:
            # b = 1 -> distinct >= m; b = 0 -> fewer than m units
            b = lp.var(1)
            distinct = {y[oi][0]: 1.0 for oi in spot}
            big = float(len(spot_nodes))
            lp.row({**distinct, b: -float(m)}, lower=0)
            if not gangs:  # every spot node is a unit
                lp.row(add({v: 1.0 for oi in spot for v in y[oi]}, {b: -big}), upper=m - 1)
            else:
                # fewer than m units (connected components of spot nodes linked by gangs), certified by
                # a flow: at most m - 1 roots (unless b = 1) send one unit of flow to every spot node
                # bought, along node -> gang -> node arcs open only where the gang has a worker (u).
                # Every node reached lies in a root's unit, so units <= roots; conversely one root per
                # unit and a spanning tree of each unit route the flow. Exact.
                roots: dict[int, float] = {}
                into_gang: dict[int, dict[int, float]] = {g: {} for g in gangs}
                for n_ in spot_nodes:
                    oi, k = n_
                    r, src = lp.var(1), lp.var(big)
                    lp.row({r: 1.0, y[oi][k]: -1.0}, upper=0)
                    lp.row({src: 1.0, r: -big}, upper=0)
                    roots[r] = 1.0
                    balance = {src: 1.0, y[oi][k]: -1.0}
                    for g in gangs:
                        if (g, n_) in u:
                            f_in, f_out = lp.var(big), lp.var(big)  # node -> gang, gang -> node
                            lp.row({f_in: 1.0, u[(g, n_)]: -big}, upper=0)
                            lp.row({f_out: 1.0, u[(g, n_)]: -big}, upper=0)
                            balance[f_in], balance[f_out] = -1.0, 1.0
                            into_gang[g][f_in], into_gang[g][f_out] = 1.0, -1.0
                    lp.row(balance, 0, 0)
                for g in gangs:
                    lp.row(into_gang[g], 0, 0)
                lp.row({**roots, b: -big}, upper=m - 1)
        if policy.max_spot_share < 1:
            lp.row(add(gpus_of(spot, 1 - policy.max_spot_share), gpus_of(on_demand, -policy.max_spot_share)), upper=0)
        if policy.on_demand_base_gpus > 0:
            # on-demand >= min(B, all): c = 1 -> on-demand >= B; c = 0 -> no spot GPUs
            c = lp.var(1)
            lp.row({**gpus_of(on_demand), c: -float(policy.on_demand_base_gpus)}, lower=0)
            big = float(sum(offers[oi].instance_type.gpu_count * len(y[oi]) for oi in spot))
            lp.row({**gpus_of(spot, -1.0), c: big}, lower=0)

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("threads", threads)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("mip_rel_gap", 1e-6)
    n = len(lp.cost)
    h.addVars(n, np.array(lp.lower), np.array(lp.upper))
    idx = np.arange(n, dtype=np.int32)
    h.changeColsCost(n, idx, np.array(lp.cost))
    h.changeColsIntegrality(n, idx, np.full(n, 1, dtype=np.uint8))  # kInteger
    starts, indices, values = [], [], []
    for _, _, terms in lp.rows:
        starts.append(len(indices))
        indices += list(terms)
        values += list(terms.values())
    h.addRows(len(lp.rows), np.array([r[0] for r in lp.rows]), np.array([r[1] for r in lp.rows]), len(indices),
              np.array(starts, dtype=np.int32), np.array(indices, dtype=np.int32), np.array(values))
    started = time.perf_counter()
    start_accepted = None
    if start is not None:
        known = _start_values(instance, start, y, x, u)
        if known is not None:
            cols = np.array(sorted(known), dtype=np.int32)
            status_ = h.setSolution(len(cols), cols, np.array([known[c] for c in cols.tolist()]))
            start_accepted = status_ == highspy.HighsStatus.kOk
    h.run()
    seconds = time.perf_counter() - started
    status = h.getModelStatus()
    info = h.getInfo()
    has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
    bound = info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else None
    start_text = "none" if start is None else {None: "not mapped", True: "accepted", False: "rejected"}[start_accepted]
    if not has_solution:
        return MilpResult(h.modelStatusToString(status), None, False, None, None, seconds, n, len(lp.rows), bound,
                          start_text)
    values_ = list(h.getSolution().col_value)
    nodes: dict[str, Offer] = {}
    placements: dict[str, list[str]] = collections.defaultdict(list)
    for oi, o in enumerate(offers):
        for k, v in enumerate(y[oi]):
            if values_[v] > 0.5:
                nodes[f"o{oi:02d}-{k:02d}"] = o
    for (ji, oi, k), v in sorted(x.items()):
        for _ in range(int(round(values_[v]))):
            placements[jobs[ji].job_id].append(f"o{oi:02d}-{k:02d}")
    solution = Solution(nodes, {j: tuple(n_) for j, n_ in placements.items()})
    proved = status == highspy.HighsModelStatus.kOptimal
    return MilpResult(h.modelStatusToString(status), info.objective_function_value, proved, solution,
                      info.mip_gap, seconds, n, len(lp.rows), bound, start_text)


def _start_values(instance: Instance, start: Solution, y: list[list[int]], x: dict[tuple[int, int, int], int],
                  u: dict[tuple[int, tuple[int, int]], int]) -> dict[int, float] | None:
    """Column values of ``start`` for a MIP start: every y, x and u (the rest is
    left to HiGHS); None if it does not map (an unknown offer or job, more nodes
    of an offer than the MILP allows, a worker where the MILP has no column)."""
    index = {o.key: oi for oi, o in enumerate(instance.offers)}
    job_index = {j.job_id: ji for ji, j in enumerate(instance.jobs)}
    slot: dict[str, tuple[int, int]] = {}
    for name in sorted(start.nodes):
        oi = index.get(start.nodes[name].key)
        if oi is None:
            return None
        k = sum(1 for s in slot.values() if s[0] == oi)
        if k >= len(y[oi]):
            return None
        slot[name] = (oi, k)
    values = {v: 0.0 for row in y for v in row}
    values.update({v: 1.0 for oi, k in slot.values() for v in (y[oi][k],)})
    count: dict[tuple[int, int, int], int] = collections.Counter()
    for job_id, names in start.placements.items():
        ji = job_index.get(job_id)
        if ji is None:
            return None
        for name in names:
            if name not in slot:
                return None
            count[(ji, *slot[name])] += 1
    if any(key not in x for key in count):
        return None
    values.update({v: float(count.get(key, 0)) for key, v in x.items()})
    values.update({v: float(count.get((g, *n_), 0) > 0) for (g, n_), v in u.items()})
    return values


# =========================================================================== the benchmark


def planner_version() -> str:
    """The commit of the work tree, and whether fleetctl/planner/ has local changes (read-only git)."""
    import subprocess

    root = HERE.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "fleetctl/planner"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
        return f"{head}{' + uncommitted changes in fleetctl/planner/' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load_planner(spec: str) -> PlanFn:
    """``module:function``, e.g. the default ``fleetctl.planner:plan``."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name or "plan")


def run_planner(instance: Instance, planner: PlanFn) -> Plan:
    return planner(now=NOW, queue=instance.jobs, fleet=(), offers=instance.offers, forecast=None,
                   policy=instance.policy)


def describe_instance(instance: Instance) -> dict[str, object]:
    jobs = instance.jobs
    return {
        "index": instance.index,
        "jobs": len(jobs),
        "workers": sum(j.workers for j in jobs),
        "gangs": sum(j.workers > 1 for j in jobs),
        "constrained": sum(bool(j.gpu_models) for j in jobs),
        "not_spot_eligible": sum(not spot_ok(j, instance.policy) for j in jobs),
        "offers": len(instance.offers),
        "spot_offers": sum(o.market is Market.SPOT for o in instance.offers),
        "zones": len({o.placement_domain for o in instance.offers}),
        "max_spot_share": instance.policy.max_spot_share,
        "on_demand_base_gpus": instance.policy.on_demand_base_gpus,
    }


def run_instance(instance: Instance, planner: PlanFn, time_limit: float) -> dict[str, object]:
    """One instance: the planner's plan and the MILP, both evaluated."""
    started = time.perf_counter()
    result = run_planner(instance, planner)
    planner_seconds = time.perf_counter() - started
    ours_solution = solution_of_plan(result)
    ours = evaluate(instance, ours_solution)
    # The planner's plan, when it keeps every rule, is HiGHS's MIP start: a proved optimum does not depend on
    # it, and an instance not proved within the time limit is then compared with a plan at least as cheap as
    # the planner's (before, HiGHS's own incumbent could be dearer and the planner showed "below the optimum").
    milp = solve_milp(instance, time_limit, start=ours_solution if ours.feasible else None)
    best = evaluate(instance, milp.solution) if milp.solution is not None else None
    ratio = ratio_to_bound = None
    if best is not None and best.feasible and ours.complete and best.cost > 0:
        ratio = ours.cost / best.cost
    if ours.complete and milp.bound is not None and milp.bound > 0:
        ratio_to_bound = ours.cost / milp.bound  # the most the planner can be above the (unknown) optimum
    return {
        "instance": describe_instance(instance),
        "planner": {**ours.as_json(), "seconds": round(planner_seconds, 4)},
        "optimum": {**milp.as_json(), **(best.as_json() if best is not None else {"feasible": False})},
        "ratio": None if ratio is None else round(ratio, 6),
        "ratio_to_bound": None if ratio_to_bound is None else round(ratio_to_bound, 6),
    }


def _distribution(values: Sequence[float]) -> dict[str, float | int | None]:
    """Count, median, 90th percentile (nearest rank) and max."""
    xs = sorted(values)
    if not xs:
        return {"count": 0, "median": None, "p90": None, "max": None}
    mid = len(xs) // 2
    median = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
    return {"count": len(xs), "median": round(median, 6), "p90": round(xs[math.ceil(0.9 * len(xs)) - 1], 6),
            "max": round(xs[-1], 6)}


def summarise(rows: list[dict[str, object]]) -> dict[str, object]:
    """Counts and ratios over all instances."""
    def p(row: dict, side: str) -> dict:  # noqa: ANN001 - JSON rows
        return row[side]  # type: ignore[no-any-return]

    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    feasible_ratios = [r["ratio"] for r in rows if r["ratio"] is not None and p(r, "planner")["feasible"]]
    codes: collections.Counter[str] = collections.Counter()
    instances_with: collections.Counter[str] = collections.Counter()
    for r in rows:
        seen = set()
        for v in p(r, "planner")["violations"]:
            codes[v["code"]] += 1
            seen.add(v["code"])
        instances_with.update(seen)
    optimum_feasible = [r for r in rows if p(r, "optimum").get("feasible")]
    return {
        "instances": len(rows),
        "optimum_feasible": len(optimum_feasible),
        "optimum_proved": sum(bool(p(r, "optimum")["proved_optimal"]) for r in rows),
        "optimum_not_proved": [p(r, "instance")["index"] for r in rows if not p(r, "optimum")["proved_optimal"]],
        # over the instances not proved optimal: planner / HiGHS's lower bound, the most the planner can be above
        # the optimum there
        "max_ratio_to_bound_not_proved": max((r["ratio_to_bound"] for r in rows if r.get("ratio_to_bound") is not None
                                              and not p(r, "optimum")["proved_optimal"]), default=None),
        "mip_start": dict(collections.Counter(str(p(r, "optimum").get("start")) for r in rows)),
        "optimum_check_failed": [p(r, "instance")["index"] for r in rows
                                 if p(r, "optimum").get("objective") is not None and not p(r, "optimum").get("feasible")],
        "planner_complete": sum(bool(p(r, "planner")["complete"]) for r in rows),
        "planner_feasible": sum(bool(p(r, "planner")["feasible"]) for r in rows),
        "unplaced_while_optimum_feasible": sum(not p(r, "planner")["complete"] for r in optimum_feasible),
        "mean_ratio": round(sum(ratios) / len(ratios), 6) if ratios else None,
        "max_ratio": round(max(ratios), 6) if ratios else None,
        "min_ratio": round(min(ratios), 6) if ratios else None,
        "ratios_counted": len(ratios),
        "mean_ratio_planner_feasible": round(sum(feasible_ratios) / len(feasible_ratios), 6) if feasible_ratios else None,
        "max_ratio_planner_feasible": round(max(feasible_ratios), 6) if feasible_ratios else None,
        "below_optimum": sum(1 for x in ratios if x < 1 - 1e-6),
        "below_optimum_instances": [p(r, "instance")["index"] for r in rows
                                    if r["ratio"] is not None and r["ratio"] < 1 - 1e-6],
        # the planner's excess over the optimum, ratio - 1 (nearest-rank percentiles)
        "gap": _distribution([x - 1 for x in ratios]),
        "gap_planner_feasible": _distribution([x - 1 for x in feasible_ratios]),
        "optimum_mip_gap_max": max((p(r, "optimum")["gap"] or 0.0 for r in rows if p(r, "optimum")["gap"] is not None),
                                   default=None),
        "optimum_buys_empty_nodes": [p(r, "instance")["index"] for r in rows if p(r, "optimum").get("empty_nodes")],
        "planner_buys_empty_nodes": [p(r, "instance")["index"] for r in rows if p(r, "planner").get("empty_nodes")],
        "violations_by_rule": dict(sorted(codes.items())),
        "instances_violating_rule": dict(sorted(instances_with.items())),
    }


def print_summary(doc: dict[str, object], rows: list[dict[str, object]]) -> None:
    s = doc["summary"]
    assert isinstance(s, dict)
    print(f"planner {doc['planner']} at {doc['planner_version']}; MILP time limit {doc['time_limit_seconds']:g} s")
    print(f"instances: {s['instances']}  MILP: {s['optimum_feasible']} solved, {s['optimum_proved']} proved optimal"
          + (f" (not proved: {s['optimum_not_proved']}; there the planner is at most "
             f"{s['max_ratio_to_bound_not_proved']:.4f} x HiGHS's lower bound)"
             if s["optimum_not_proved"] and s["max_ratio_to_bound_not_proved"] is not None
             else f" (not proved: {s['optimum_not_proved']})" if s["optimum_not_proved"] else "")
          + f"; MIP start (the planner's plan): {s['mip_start']}")
    print(f"planner: {s['planner_complete']} placed every job, {s['planner_feasible']} also broke no rule; "
          f"{s['unplaced_while_optimum_feasible']} left a job unplaced although a feasible plan exists")
    if s["mean_ratio"] is not None:
        print(f"cost ratio planner / optimum (risk-adjusted USD/h, {s['ratios_counted']} instances where the planner "
              f"placed every job): mean {s['mean_ratio']:.4f}, max {s['max_ratio']:.4f}, min {s['min_ratio']:.4f}; "
              f"{s['below_optimum']} below 1 (only possible by breaking a rule, or below a plan not proved optimal "
              "when the planner's plan was not a MIP start)")
    if s["gap"]["count"]:
        g = s["gap"]
        print(f"planner excess over the optimum (ratio - 1): median {g['median']:.4f}, p90 {g['p90']:.4f}, "
              f"max {g['max']:.4f}" + (f"; below the optimum in {s['below_optimum_instances']}"
                                       if s["below_optimum_instances"] else ""))
    if s["mean_ratio_planner_feasible"] is not None:
        print(f"  over the {s['planner_feasible']} rule-abiding plans: mean {s['mean_ratio_planner_feasible']:.4f}, "
              f"max {s['max_ratio_planner_feasible']:.4f}")
    if s["violations_by_rule"]:
        print("rules the planner broke (violations; instances): " + ", ".join(
            f"{k} {v}; {s['instances_violating_rule'][k]}" for k, v in s["violations_by_rule"].items()))
        for r in rows:
            for v in r["planner"]["violations"][:3]:  # type: ignore[index]
                print(f"  #{r['instance']['index']}: {v['code']}: {v['detail']}")  # type: ignore[index]
    if s["optimum_buys_empty_nodes"]:
        print(f"the optimum buys nodes that hold no job (to meet the spot spreading rules) in instances "
              f"{s['optimum_buys_empty_nodes']}")
    if s["planner_buys_empty_nodes"]:
        print(f"the planner buys nodes that hold no job in instances {s['planner_buys_empty_nodes']}")
    if s["optimum_check_failed"]:
        print(f"WARNING: the MILP's own solution failed the checker on {s['optimum_check_failed']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=20.0, help="HiGHS seconds per instance")
    parser.add_argument("--planner", default="fleetctl.planner:plan", help="module:function with plan()'s signature")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quiet", action="store_true", help="no line per instance")
    args = parser.parse_args(argv)
    try:
        import highspy  # noqa: F401
    except ImportError:
        print("plan_optimality needs HiGHS: pip install highspy (the [bench] extra)", file=sys.stderr)
        return 2
    version = planner_version()  # read before the import, which fixes the planner for this run
    planner = load_planner(args.planner)
    catalog = load_catalog()
    rows = []
    started = time.perf_counter()
    for i in range(args.instances):
        row = run_instance(make_instance(i, args.seed, catalog), planner, args.time_limit)
        rows.append(row)
        if not args.quiet:
            ours, best = row["planner"], row["optimum"]
            assert isinstance(ours, dict) and isinstance(best, dict)
            ratio = f"{row['ratio']:.4f}" if row["ratio"] is not None else "  n/a "
            print(f"#{i:02d} planner {ours['cost']:9.3f} optimum {best.get('cost', float('nan')):9.3f} "
                  f"({best['status']}, {best['seconds']:.1f} s) ratio {ratio} "
                  f"unplaced {len(ours['unplaced'])} violations {len(ours['violations'])}", flush=True)
    doc = {
        "description": "planner vs exact MILP (HiGHS) on risk-adjusted USD/hour; see benchmarks/plan_optimality.py",
        "command": shlex.join(["python", "benchmarks/plan_optimality.py", *(argv if argv is not None else sys.argv[1:])]),
        "gang_rule": GANG_RULE,
        "milp_exact": True,  # the MILP encodes the checker's rules exactly (no relaxation): when proved
        # optimal its objective is the optimum, not merely a lower bound
        "seed": args.seed,
        "time_limit_seconds": args.time_limit,
        "planner": args.planner,
        "planner_version": version,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "summary": summarise(rows),
        "instances": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print_summary(doc, rows)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
