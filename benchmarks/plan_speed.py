"""Time one full plan on a realistic case, and the placement of one new job.

The case (all seeded, no I/O but the committed job-mix file and the shipped
catalog):

* **queue**: ``--jobs`` QUEUED jobs sampled from the Alibaba GPU trace 2023 job
  mix (``benchmarks/data/alibaba_2023_job_mix.json``, see
  ``benchmarks/make_job_mix.py``): GPUs per worker 1/2/4/8, vCPUs and memory
  per worker, GPU-model constraints (about a third of jobs), priority class
  from the trace's QoS (LS/Guaranteed -> production, BE/Burstable -> batch),
  runtimes from the trace; 10 % gangs of 2-16 workers (synthetic).
* **offers**: ``--offers`` offers sampled from ``providers.catalog.load_catalog()``,
  keeping at least one offer of every (GPU model, market) pair of the catalog.
* **fleet**: ``--nodes`` nodes bought from those offers (95 % READY, 5 %
  LAUNCHING); about 70 % of them hold BOUND/RUNNING jobs sampled from the same
  mix (gangs spread over nodes of one offer, never over a node's capacity,
  production jobs never on spot), each filled to 50-100 % of its GPUs, so
  there is partial free capacity.
* **policy**: priority classes production (1000, not preemptible, not spot)
  and batch (100); three teams; no budget; diversification on
  (0.5 per instance type, 0.5 per zone, at least 3 distinct offers).

Measured: the best of ``--repeat`` wall-clock times of ``plan(...)`` (only the
call; building the case is not timed), placements per second (Bind actions /
seconds), and the process's peak RSS (``resource.getrusage``, MiB, includes
building the case). The incremental measurement settles the first plan (its
Launches become READY nodes, its Binds RUNNING jobs, unplaced jobs leave the
queue), builds a ``PlannedFleet`` from it (not timed), and times
``PlannedFleet.place(job)`` for each of ``ARRIVALS`` newly arrived jobs, one
after another; it reports the median (and the max).

Usage::

    python benchmarks/plan_speed.py [--jobs 10000] [--nodes 5000] [--offers 1000]
        [--seed 0] [--repeat 1] [--format text|json] [--incremental]
"""

from __future__ import annotations

import argparse
import bisect
import collections
import itertools
import json
import math
import random
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Final

from fleetctl.model import (
    Bind,
    Drain,
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
    PriorityClass,
    Team,
    Terminate,
)
from fleetctl.planner import PlannedFleet, plan
from providers.catalog import load_catalog

HERE: Final[Path] = Path(__file__).resolve().parent
DEFAULT_MIX: Final[Path] = HERE / "data" / "alibaba_2023_job_mix.json"

#: The fixed "now" of every case (a Monday morning, UTC).
NOW: Final[datetime] = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)

#: Teams of the benchmark policy and the share of jobs each submits.
TEAMS: Final[tuple[tuple[str, float], ...]] = (("vision", 0.40), ("language", 0.35), ("recsys", 0.25))

OCCUPIED_FRACTION: Final[float] = 0.70  # nodes that hold bound jobs
LAUNCHING_FRACTION: Final[float] = 0.05  # nodes still launching
FILL_RANGE: Final[tuple[float, float]] = (0.5, 1.0)  # share of an occupied node's GPUs in use
MAX_FILL_FAILURES: Final[int] = 6  # samples that do not fit before a node counts as full
QUEUE_AGE_HOURS: Final[float] = 4.0  # queued jobs were submitted up to this long ago

JSON_KEYS: Final[tuple[str, ...]] = ("jobs", "nodes", "offers", "seconds", "placements_per_second", "peak_rss_mib")


# --------------------------------------------------------------------------- the job mix


@dataclass(frozen=True, slots=True)
class Shape:
    """One worker shape of the trace, with the priority class its QoS maps to."""

    gpus_per_worker: int
    vcpus_per_worker: float
    memory_gib_per_worker: float
    gpu_models: tuple[str, ...]
    priority: str


@dataclass(frozen=True)
class JobMix:
    """The committed distribution of job shapes, runtimes, gangs and checkpoints."""

    shapes: tuple[Shape, ...]
    weights: tuple[float, ...]
    runtime_percentiles: dict[str, tuple[float, ...]]
    gang_fraction: float
    gang_sizes: tuple[int, ...]
    gang_weights: tuple[float, ...]
    checkpointable_fraction: float
    checkpoint_interval_minutes: float

    @classmethod
    def load(cls, path: Path = DEFAULT_MIX) -> JobMix:
        """Read ``alibaba_2023_job_mix.json`` (written by ``make_job_mix.py``)."""
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        qos_to_priority: dict[str, str] = doc["qos_to_priority"]
        shapes, weights = [], []
        for gpus, vcpus, memory_gib, models, qos, count in doc["shapes"]:
            shapes.append(Shape(int(gpus), float(vcpus), float(memory_gib), tuple(models), qos_to_priority[qos]))
            weights.append(float(count))
        synthetic = doc["synthetic"]
        gangs = sorted((int(k), float(v)) for k, v in synthetic["gang_workers"].items())
        return cls(
            shapes=tuple(shapes),
            weights=tuple(weights),
            runtime_percentiles={k: tuple(v) for k, v in doc["runtime_hours_percentiles"].items()},
            gang_fraction=float(synthetic["gang_fraction"]),
            gang_sizes=tuple(k for k, _ in gangs),
            gang_weights=tuple(v for _, v in gangs),
            checkpointable_fraction=float(synthetic["checkpointable_fraction_of_batch_over_1h"]),
            checkpoint_interval_minutes=float(synthetic["checkpoint_interval_minutes"]),
        )

    def runtime_hours(self, rng: random.Random, priority: str) -> float:
        """A runtime by inverse CDF over the trace's percentiles (linear in between)."""
        cuts = self.runtime_percentiles[priority]
        position = rng.random() * (len(cuts) - 1)
        low = int(position)
        high = min(low + 1, len(cuts) - 1)
        return cuts[low] + (cuts[high] - cuts[low]) * (position - low)

    def workers(self, rng: random.Random) -> int:
        """1, or a gang size for ``gang_fraction`` of the jobs."""
        if rng.random() < self.gang_fraction:
            return rng.choices(self.gang_sizes, self.gang_weights)[0]
        return 1

    def job(
        self,
        rng: random.Random,
        shape: Shape,
        job_id: str,
        *,
        workers: int,
        submitted_at_utc: datetime,
        team: str,
        state: JobState = JobState.QUEUED,
        node_ids: tuple[str, ...] = (),
        started_at_utc: datetime | None = None,
    ) -> Job:
        """A Job of ``shape`` with a trace runtime and the synthetic checkpoint rule."""
        duration = round(self.runtime_hours(rng, shape.priority), 4)
        checkpointable = (
            shape.priority == "batch" and duration > 1.0 and rng.random() < self.checkpointable_fraction
        )
        return Job(
            job_id=job_id,
            workers=workers,
            gpus_per_worker=shape.gpus_per_worker,
            vcpus_per_worker=shape.vcpus_per_worker,
            memory_gib_per_worker=shape.memory_gib_per_worker,
            priority=shape.priority,
            team=team,
            duration_hours=duration,
            submitted_at_utc=submitted_at_utc,
            gpu_models=shape.gpu_models,
            checkpointable=checkpointable,
            checkpoint_interval_minutes=self.checkpoint_interval_minutes if checkpointable else None,
            state=state,
            node_ids=node_ids,
            started_at_utc=started_at_utc,
        )


ARRIVALS = 20  # newly arrived jobs timed one after another by the incremental measurement

def _team(rng: random.Random) -> str:
    return rng.choices([t for t, _ in TEAMS], [w for _, w in TEAMS])[0]


# --------------------------------------------------------------------------- policy and offers


def bench_policy() -> Policy:
    """The benchmark policy: two priority classes, three teams, no budget, diversification on."""
    return Policy(
        priority_classes=(
            PriorityClass("production", 1000, preemptible=False, spot_eligible=False),
            PriorityClass("batch", 100, preemptible=True, spot_eligible=True),
        ),
        default_priority_class="batch",
        teams=(
            Team("vision", guaranteed_gpus=2048, burst_gpus=None, weight=2.0),
            Team("language", guaranteed_gpus=1024, burst_gpus=None, weight=1.5),
            Team("recsys", guaranteed_gpus=512, burst_gpus=None, weight=1.0),
        ),
        max_usd_per_hour=None,
        max_share_per_instance_type=0.5,
        max_share_per_zone=0.5,
        min_distinct_offers=3,
    )


def sample_offers(rng: random.Random, n: int, catalog: Sequence[Offer] | None = None) -> tuple[Offer, ...]:
    """``n`` distinct offers of the catalog, at least one of every (GPU model,
    market) pair while ``n`` allows; sorted by key."""
    catalog = sorted(catalog if catalog is not None else load_catalog(), key=lambda o: o.key)
    n = min(n, len(catalog))
    by_pair: dict[tuple[str, str], list[Offer]] = collections.defaultdict(list)
    for o in catalog:
        by_pair[(o.instance_type.gpu_model or "", o.market.value)].append(o)
    required = [rng.choice(by_pair[pair]) for pair in sorted(by_pair)]
    if n < len(required):
        chosen = rng.sample(required, n)
    else:
        taken = {o.key for o in required}
        rest = [o for o in catalog if o.key not in taken]
        chosen = required + rng.sample(rest, n - len(required))
    return tuple(sorted(chosen, key=lambda o: o.key))


def spot_allowed(job_or_shape: Job | Shape, policy: Policy) -> bool:
    """Whether a job (or a shape, by its priority class) may run on spot."""
    explicit = getattr(job_or_shape, "spot_eligible", None)
    if explicit is not None:
        return bool(explicit)
    return policy.priority_class(job_or_shape.priority).spot_eligible


def shape_fits(shape: Shape | Job, offer: Offer, policy: Policy) -> bool:
    """One worker of ``shape`` fits an empty node of ``offer`` and may run there."""
    it = offer.instance_type
    if offer.market is Market.SPOT and not spot_allowed(shape, policy):
        return False
    if shape.gpu_models and it.gpu_model not in shape.gpu_models:
        return False
    return (
        it.gpu_count >= shape.gpus_per_worker
        and it.vcpus >= shape.vcpus_per_worker
        and it.memory_gib >= shape.memory_gib_per_worker
    )


# --------------------------------------------------------------------------- the fleet


@dataclass(slots=True)
class _Free:
    """Free resources of one node while the fleet is filled; ``gpu_budget`` is
    the GPUs that may still be used before the node counts as filled."""

    gpu_budget: int
    vcpus: float
    memory_gib: float

    def take(self, shape: Shape) -> bool:
        if shape.gpus_per_worker > self.gpu_budget or shape.vcpus_per_worker > self.vcpus or shape.memory_gib_per_worker > self.memory_gib:
            return False
        self.gpu_budget -= shape.gpus_per_worker
        self.vcpus -= shape.vcpus_per_worker
        self.memory_gib -= shape.memory_gib_per_worker
        return True


def build_fleet(
    rng: random.Random, mix: JobMix, offers: Sequence[Offer], n_nodes: int, policy: Policy, now: datetime = NOW
) -> tuple[tuple[Node, ...], tuple[Job, ...]]:
    """``n_nodes`` nodes on ``offers`` and the BOUND/RUNNING jobs they hold.

    About :data:`OCCUPIED_FRACTION` of the nodes are filled, each to a random
    share (:data:`FILL_RANGE`) of its GPUs, with jobs sampled from the shapes
    that fit its offer; a gang's workers go to consecutive nodes of one offer
    (so one placement domain). Never over a node's GPUs, vCPUs or memory.
    """
    nodes: list[Node] = []
    occupied: dict[str, list[int]] = collections.defaultdict(list)  # offer key -> node indexes
    for i in range(n_nodes):
        offer = rng.choice(offers)
        launched = now - timedelta(hours=rng.uniform(0.5, 48.0))
        launching = rng.random() < LAUNCHING_FRACTION
        if launching:
            launched = now - timedelta(minutes=rng.uniform(0.5, 3.0))
        is_occupied = rng.random() < OCCUPIED_FRACTION
        nodes.append(
            Node(
                node_id=f"n-{i:06d}",
                offer=offer,
                state=NodeState.LAUNCHING if launching else NodeState.READY,
                launched_at_utc=launched,
                ready_at_utc=None if launching else launched + timedelta(minutes=3),
                idle_since_utc=None if is_occupied or launching else now - timedelta(minutes=rng.uniform(0.0, 20.0)),
            )
        )
        if is_occupied:
            occupied[offer.key].append(i)

    jobs: list[Job] = []
    offer_of = {o.key: o for o in offers}
    for key in sorted(occupied):
        offer = offer_of[key]
        fitting = [k for k, s in enumerate(mix.shapes) if shape_fits(s, offer, policy)]
        if not fitting:
            continue  # no job of the mix can run here: these nodes stay empty
        cum = list(itertools.accumulate(mix.weights[k] for k in fitting))
        group = occupied[key]
        it = offer.instance_type
        free = [
            _Free(max(1, round(it.gpu_count * rng.uniform(*FILL_RANGE))), float(it.vcpus), it.memory_gib)
            for _ in group
        ]
        current, failures = 0, 0
        while current < len(group):
            shape = mix.shapes[fitting[bisect.bisect_right(cum, rng.random() * cum[-1])]]
            workers = mix.workers(rng)
            placed: list[int] = []
            trial = [replace(f) for f in free[current:current + workers + 1]]
            for w in range(workers):
                for offset, f in enumerate(trial):
                    if f.take(shape):
                        placed.append(current + offset)
                        break
                else:
                    break
            if len(placed) < workers:
                failures += 1
            else:
                free[current:current + len(trial)] = trial
                node_ids = tuple(nodes[group[p]].node_id for p in placed)
                ready = all(nodes[group[p]].state is NodeState.READY for p in placed)
                job = mix.job(
                    rng, shape, f"b-{len(jobs):06d}", workers=workers,
                    submitted_at_utc=now - timedelta(hours=rng.uniform(1.0, 48.0)), team=_team(rng),
                    state=JobState.RUNNING if ready else JobState.BOUND, node_ids=node_ids,
                )
                if ready:
                    job = replace(job, started_at_utc=now - timedelta(hours=job.duration_hours * rng.random()))
                jobs.append(job)
            if free[current].gpu_budget <= 0 or failures >= MAX_FILL_FAILURES:
                current, failures = current + 1, 0
    return tuple(nodes), tuple(jobs)


# --------------------------------------------------------------------------- the case


@dataclass(frozen=True)
class Case:
    """Everything ``plan`` is called with, plus what the case was built from."""

    now: datetime
    queue: tuple[Job, ...]  # QUEUED jobs first, then the BOUND/RUNNING ones
    fleet: tuple[Node, ...]
    offers: tuple[Offer, ...]
    policy: Policy
    queued: int  # how many jobs of ``queue`` are QUEUED

    def run(self) -> Plan:
        """Call the planner once."""
        return plan(now=self.now, queue=self.queue, fleet=self.fleet, offers=self.offers, forecast=None,
                    policy=self.policy)


def queued_jobs(rng: random.Random, mix: JobMix, n: int, now: datetime = NOW, prefix: str = "q") -> tuple[Job, ...]:
    """``n`` newly queued jobs sampled from the whole mix."""
    cum = list(itertools.accumulate(mix.weights))
    jobs = []
    for i in range(n):
        shape = mix.shapes[bisect.bisect_right(cum, rng.random() * cum[-1])]
        workers = mix.workers(rng)
        submitted = now - timedelta(seconds=round(rng.uniform(0.0, QUEUE_AGE_HOURS * 3600)))
        jobs.append(mix.job(rng, shape, f"{prefix}-{i:06d}", workers=workers, submitted_at_utc=submitted, team=_team(rng)))
    return tuple(jobs)


def build_case(jobs: int, nodes: int, offers: int, seed: int = 0, mix: JobMix | None = None) -> Case:
    """The benchmark case. Offers, fleet and queue use separate seeded streams,
    so e.g. ``--jobs`` does not change the fleet of the same seed."""
    mix = mix or JobMix.load()
    policy = bench_policy()
    chosen = sample_offers(random.Random(f"{seed}:offers"), offers)
    fleet, bound = build_fleet(random.Random(f"{seed}:fleet"), mix, chosen, nodes, policy)
    queue = queued_jobs(random.Random(f"{seed}:queue"), mix, jobs)
    return Case(now=NOW, queue=queue + bound, fleet=fleet, offers=chosen, policy=policy, queued=len(queue))


def settle(case: Case, result: Plan) -> tuple[Case, int]:
    """The world after ``result`` is carried out at once: Launches become READY
    nodes (renamed ``launched-NNNNNN``), Binds and Migrates make their jobs
    RUNNING on their nodes, Terminates remove nodes, Drains drain them.
    QUEUED jobs left unplaced and preempted jobs leave the queue (so the next
    plan sees only what is added). Returns the new case and how many queued
    jobs were dropped."""
    names: dict[str, str] = {}
    new_nodes: list[Node] = []
    for action in result.actions:
        if isinstance(action, Launch):
            for name in action.node_names:
                names[name] = f"launched-{len(names):06d}"
                new_nodes.append(Node(names[name], action.offer, NodeState.READY, case.now, case.now))
    gone = {a.node_id for a in result.actions if isinstance(a, Terminate)}
    draining = {a.node_id for a in result.actions if isinstance(a, Drain)}
    fleet = [
        replace(n, state=NodeState.DRAINING) if n.node_id in draining else n
        for n in case.fleet if n.node_id not in gone
    ] + new_nodes
    placed: dict[str, tuple[str, ...]] = {}
    for action in result.actions:
        if isinstance(action, Bind):
            placed[action.job_id] = tuple(names.get(n, n) for n in action.node_ids)
        elif isinstance(action, Migrate):
            placed[action.job_id] = tuple(names.get(n, n) for n in action.to_node_ids)
    preempted = {a.job_id for a in result.actions if isinstance(a, Preempt)}
    queue, dropped = [], 0
    for job in case.queue:
        if job.job_id in preempted and job.job_id not in placed:
            continue
        if job.job_id in placed:
            queue.append(replace(job, state=JobState.RUNNING, node_ids=placed[job.job_id], started_at_utc=case.now))
        elif job.state is JobState.QUEUED:
            dropped += 1
        else:
            queue.append(job)
    return replace(case, queue=tuple(queue), fleet=tuple(fleet), queued=0), dropped


def with_new_job(case: Case, rng: random.Random, mix: JobMix) -> Case:
    """``case`` plus one newly arrived QUEUED job sampled from the mix."""
    (job,) = queued_jobs(rng, mix, 1, case.now, prefix="arrival")
    job = replace(job, submitted_at_utc=case.now)
    return replace(case, queue=(job, *case.queue), queued=case.queued + 1)


# --------------------------------------------------------------------------- measuring


def time_plan(case: Case, repeat: int) -> tuple[float, Plan]:
    """Best wall-clock seconds of ``repeat`` calls, and the (last) Plan."""
    best = math.inf
    result: Plan | None = None
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        result = case.run()
        best = min(best, time.perf_counter() - start)
    assert result is not None
    return best, result


def peak_rss_mib() -> float:
    """This process's peak resident set size in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def count_binds(result: Plan) -> int:
    return sum(1 for a in result.actions if isinstance(a, Bind))


@dataclass(frozen=True)
class Measurement:
    """What one run of this script measured."""

    case: Case
    seconds: float
    result: Plan
    incremental_seconds: float | None = None  # median over the arrivals
    incremental_result: Plan | None = None
    dropped_before_incremental: int = 0
    arrival_id: str = ""
    incremental_max_seconds: float | None = None

    @property
    def placements(self) -> int:
        return count_binds(self.result)

    def as_json(self, *, incremental: bool) -> dict[str, object]:
        doc: dict[str, object] = {
            "jobs": self.case.queued,
            "nodes": len(self.case.fleet),
            "offers": len(self.case.offers),
            "seconds": round(self.seconds, 6),
            "placements_per_second": round(self.placements / self.seconds, 1) if self.seconds > 0 else None,
            "peak_rss_mib": round(peak_rss_mib(), 1),
        }
        if incremental and self.incremental_seconds is not None and self.incremental_result is not None:
            doc["incremental_ms"] = round(self.incremental_seconds * 1000, 3)
            if self.incremental_max_seconds is not None:
                doc["incremental_max_ms"] = round(self.incremental_max_seconds * 1000, 3)
            doc["incremental_placed"] = any(
                isinstance(a, Bind) and a.job_id == self.arrival_id for a in self.incremental_result.actions
            )
        return doc


def measure(jobs: int, nodes: int, offers: int, seed: int, repeat: int, incremental: bool,
            mix: JobMix | None = None) -> Measurement:
    """Build the case, time the full plan, and (if asked) the one-job re-plan."""
    mix = mix or JobMix.load()
    case = build_case(jobs, nodes, offers, seed, mix)
    seconds, result = time_plan(case, repeat)
    if not incremental:
        return Measurement(case, seconds, result)
    settled, dropped = settle(case, result)
    # One newly arrived job into the planned fleet: PlannedFleet keeps the
    # pass's state, so each arrival costs one placement, not a whole pass.
    # Timed per arrival over ARRIVALS arrivals (one after another); the median is reported.
    planned = PlannedFleet(now=settled.now, queue=settled.queue, fleet=settled.fleet, offers=settled.offers,
                           forecast=None, policy=settled.policy)
    rng = random.Random(f"{seed}:arrival")
    times: list[float] = []
    first: tuple[Plan, str] | None = None
    for i in range(ARRIVALS):
        (job,) = queued_jobs(rng, mix, 1, settled.now, prefix=f"arrival-{i}")
        job = replace(job, submitted_at_utc=settled.now)
        start = time.perf_counter()
        step = planned.place(job)
        times.append(time.perf_counter() - start)
        first = first or (step, job.job_id)
    times.sort()
    assert first is not None
    return Measurement(case, seconds, result, times[len(times) // 2], first[0], dropped, first[1], times[-1])


def describe(m: Measurement) -> str:
    """The text report."""
    case, result = m.case, m.result
    queued = case.queue[: case.queued]
    bound = case.queue[case.queued:]
    occupied = len({n for j in bound for n in j.node_ids})
    launches = [a for a in result.actions if isinstance(a, Launch)]
    kinds = collections.Counter(a.kind for a in result.actions)
    unplaced = collections.Counter(u.reason.value for u in result.unplaced)
    lines = [
        f"case: {case.queued} queued jobs ({sum(j.workers > 1 for j in queued)} gangs, "
        f"{sum(bool(j.gpu_models) for j in queued)} with a GPU-model constraint, "
        f"{sum(j.priority == 'production' for j in queued)} production), "
        f"{len(case.fleet)} nodes ({occupied} holding {len(bound)} bound jobs), {len(case.offers)} offers",
        f"plan: {kinds.get('bind', 0)} binds, {sum(l.count for l in launches)} new nodes in {len(launches)} launches, "
        f"{kinds.get('terminate', 0)} terminations, {len(result.unplaced)} unplaced"
        + (f" ({', '.join(f'{k}: {v}' for k, v in sorted(unplaced.items()))})" if unplaced else ""),
        f"      USD/h {result.usd_per_hour_before:,.2f} -> {result.usd_per_hour_after:,.2f}",
        f"time: {m.seconds:.3f} s (best of repeats), {m.placements / m.seconds:,.0f} placements/s"
        if m.seconds > 0 else "time: 0 s",
    ]
    if m.incremental_seconds is not None and m.incremental_result is not None:
        placed = any(isinstance(a, Bind) and a.job_id == m.arrival_id for a in m.incremental_result.actions)
        lines.append(
            f"one new job into the planned fleet (PlannedFleet.place; median of {ARRIVALS} arrivals, max "
            f"{(m.incremental_max_seconds or 0) * 1000:.1f} ms; {m.dropped_before_incremental} unplaced jobs dropped "
            f"first): {m.incremental_seconds * 1000:.1f} ms (first arrival {'placed' if placed else 'not placed'}, "
            f"{len(m.incremental_result.actions)} actions)"
        )
    lines.append(f"peak RSS: {peak_rss_mib():.1f} MiB")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="queued jobs to place (default 10000)")
    parser.add_argument("--nodes", type=int, default=5_000, help="existing nodes (default 5000)")
    parser.add_argument("--offers", type=int, default=1_000, help="offers sampled from the catalog (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="time the plan N times, report the best")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--incremental", action="store_true",
                        help="with --format json: also time placing one new job (text mode always does)")
    parser.add_argument("--mix", type=Path, default=DEFAULT_MIX, help="job-mix JSON (default: the committed one)")
    args = parser.parse_args(argv)
    incremental = args.incremental or args.format == "text"
    m = measure(args.jobs, args.nodes, args.offers, args.seed, args.repeat, incremental, JobMix.load(args.mix))
    if args.format == "json":
        print(json.dumps(m.as_json(incremental=args.incremental)))
    else:
        print(describe(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
