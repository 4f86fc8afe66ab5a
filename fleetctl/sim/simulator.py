"""Discrete-event simulation of the controller on a spot market, on a virtual clock.

:func:`simulate` replays a job trace against a :class:`~fleetctl.sim.market.Market`
and drives the **real** :func:`fleetctl.controller.reconcile.tick` (handle
interruptions -> advance jobs -> observe -> plan -> execute) with a
:class:`~fleetctl.sim.provider.MarketProvider` and the
:class:`~fleetctl.controller.runtime.SimRuntime`, on a fresh in-memory SQLite
store per run. Any planner with the signature of ``fleetctl.planner.plan``
can be passed (the baselines of :mod:`fleetctl.sim.baselines`).

Events, in time order (simultaneous events are one step):

* **arrivals**: a job is submitted to the store at its ``submitted_at_utc``;
* **market changes** (``Market.change_times``): spot nodes above an offer's new
  capacity get a reclaim notice with their cloud's lead time;
* **node ready times**, **notice deadlines**, **job completions**;
* a **reconcile tick** every ``tick_seconds`` of simulated time while anything
  is active (a job not finished or a node held). Idle stretches are skipped:
  with nothing active the clock jumps to the next arrival.

At each step the controller ticks when anything is active (a job not finished
or a node held) or the market change posted notices. When a plan's launch is refused for spot capacity
(``InsufficientCapacity``), the plan's launches before it stand (a cloud keeps
what it sold; see ``fleetctl.controller.execute``) and nothing after it is
applied; the tick records the refusal, leaves the offer out of the market for
``ice_ttl_seconds`` and plans again at the same instant (at most once per
offer), from the fleet as it now is: the controller's own handling, the same
on a real cloud.

Accounting (between two steps the state is constant):

* cost: the integral of the USD/hour of held nodes (launching, ready,
  draining) over simulated time, spot at the market's current price;
* running GPUs: GPUs of running jobs; ``gpu_hours_run`` its integral;
* useful GPU-hours: the work the jobs kept (full duration of completed jobs,
  progress of running ones, the checkpoint of the others) x their GPUs;
* lost GPU-hours: GPU-hours run that no job kept (``gpu_hours_run`` - useful;
  completions are stepped to the next whole second, so each completed run
  adds up to 1 s of running GPUs here);
* GPU utilisation: useful GPU-hours / GPU-hours of held nodes;
* wait: submit to first start (a job never started waits until the end);
* a deadline is missed by a job completed after it or not completed by the end;
* a job is *lost* if it is missing from the store (one submitted after
  ``until_utc`` never arrived) or ended failed/cancelled.

The run ends when every job has arrived and nothing is active, or at
``until_utc`` (default: the market's end plus ``overrun_hours``), whichever
comes first. Deterministic: the same inputs and seed give the same result.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Callable

from fleetctl.controller.forecast import build_forecast
from fleetctl.controller.reconcile import tick
from fleetctl.controller.runtime import SimRuntime
from fleetctl.model import (
    Forecast,
    InterruptionKind,
    Job,
    JobState,
    NodeState,
    OfferRisk,
    Plan,
    Policy,
)
from fleetctl.planner import plan as fleetctl_plan
from fleetctl.sim.market import Market
from fleetctl.sim.provider import MarketProvider
from fleetctl.store import Store

Planner = Callable[..., Plan]
_HELD = (NodeState.LAUNCHING, NodeState.READY, NodeState.DRAINING)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Knobs of one simulation run (all in simulated time)."""

    tick_seconds: float = 300.0
    launch_delay_seconds: float = 60.0  # mean; each node 0.5x..1.5x, seeded
    checkpoint_seconds: float = 30.0  # an on-demand checkpoint's duration
    restart_overhead_seconds: float = 0.0  # what each (re)start of a job spends before doing work
    ice_ttl_seconds: float = 180.0  # an offer that refused a launch is skipped this long
    seed: int = 0
    overrun_hours: float = 24.0 * 30  # how long past the market's end unfinished work may run
    reclaim_forecast: bool = True  # pass the store's own recent reclaims to the planner

    def __post_init__(self) -> None:
        # At least a second: completions are stepped to whole seconds, and a sub-microsecond tick was a
        # ZeroDivisionError (timedelta rounds it to 0).
        if not 1 <= self.tick_seconds <= 86400:
            raise ValueError(f"tick_seconds must be from 1 to a day, 86400 (got {self.tick_seconds})")
        for name, most in (("launch_delay_seconds", 86400.0), ("checkpoint_seconds", 86400.0),
                           ("restart_overhead_seconds", 86400.0), ("ice_ttl_seconds", 86400.0),
                           ("overrun_hours", 24.0 * 366)):
            value = getattr(self, name)
            if not 0 <= value <= most:  # also refuses NaN
                raise ValueError(f"{name} must be from 0 to {most:g} (got {value})")


@dataclass(frozen=True, slots=True)
class Sample:
    """The state after one step: from ``at_utc`` to the next sample."""

    at_utc: datetime
    cost_usd: float  # cumulative up to at_utc
    usd_per_hour: float
    running_gpus: int
    held_gpus: int


@dataclass(frozen=True, slots=True)
class SimResult:
    """What one run measured (see the module docstring for the definitions)."""

    cost_usd: float
    useful_gpu_hours: float
    lost_gpu_hours: float
    gpu_hours_run: float
    held_gpu_hours: float
    gpu_utilization: float
    wait_hours: tuple[float, ...]  # per job, in submission order (then job id)
    deadline_misses: int
    jobs_total: int
    jobs_completed: int
    jobs_lost: int
    interruptions: int
    migrations: int
    ticks: int
    ice_retries: int
    end_utc: datetime
    samples: tuple[Sample, ...] = field(repr=False, default=())


@dataclass(slots=True)
class World:
    """The live objects of a run, handed to the ``on_event`` hook (tests check invariants with it)."""

    store: Store
    provider: MarketProvider
    runtime: SimRuntime
    policy: Policy
    submitted: dict[str, Job]


RiskForecaster = Callable[[datetime], "tuple[OfferRisk, ...]"]


# The times a run computes past its end: a job's end (its duration after a start at the end at the
# latest), plus policy timings (idle timeout, cooldowns, checkpoint grace, consolidation payback: a
# year at most), plus a tick, a launch delay and a checkpoint (a day each at most).
_TIMING_MARGIN = timedelta(days=366 + 3)


def simulation_end(market: Market, jobs: tuple[Job, ...] | list[Job], config: SimConfig,
                   until_utc: datetime | None = None) -> datetime:
    """The instant a run stops at the latest: ``until_utc``, else the market's
    end plus ``config.overrun_hours``.

    Raises ``ValueError`` when the run would compute a time after the last
    one a ``datetime`` holds (the end of year 9999): the stop plus the longest
    job of ``jobs`` plus a year and three days of policy and run timings
    (a market that ends in late 9998 or 9999; an OverflowError before)."""
    longest = max((j.duration_hours for j in jobs), default=0.0)
    try:
        end = until_utc or market.end_utc + timedelta(hours=config.overrun_hours)
        _ = end + timedelta(hours=longest) + _TIMING_MARGIN
    except OverflowError:
        stop = (f"the run would stop at {until_utc.isoformat()}: that plus" if until_utc else
                f"the market ends at {market.end_utc.isoformat()}: that plus {config.overrun_hours:g} hours of "
                "overrun,")
        raise ValueError(f"{stop} the longest job ({longest:g} hours) and a year of policy timings is past the end "
                         "of year 9999, the last time a simulation can reach; move the market and the jobs "
                         "earlier") from None
    return end


def simulate(jobs: tuple[Job, ...] | list[Job], market: Market, policy: Policy, *,
             planner: Planner = fleetctl_plan, config: SimConfig = SimConfig(),
             until_utc: datetime | None = None,
             forecaster: RiskForecaster | None = None,
             on_event: Callable[[datetime, World], None] | None = None,
             progress: Callable[[float], None] | None = None) -> SimResult:
    """Run the controller with ``planner`` and ``policy`` over ``jobs`` on ``market``.

    ``forecaster(now)`` (optional) gives the interruption probabilities the
    planner sees at ``now``; it must use nothing after ``now`` (the backtest's
    forecaster reads the market only up to ``now``).
    ``jobs`` come from a job trace (queued, unique ids). ``on_event(now, world)``
    is called after every step; ``progress(fraction)`` with the share of
    simulated time done. Raises ``ValueError`` for bad input; errors of the
    tick other than insufficient spot capacity propagate.
    """
    jobs = sorted(jobs, key=lambda j: (j.submitted_at_utc, j.job_id))
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError("job ids must be unique")
    for j in jobs:
        if j.state is not JobState.QUEUED or j.node_ids:
            raise ValueError(f"job {j.job_id}: a trace job must be queued and unbound")
    start = min([market.start_utc, *(j.submitted_at_utc for j in jobs[:1])])
    end_cap = simulation_end(market, jobs, config, until_utc)
    if end_cap <= start:
        raise ValueError("until_utc must be after the start of the market and of the jobs")

    store = Store("sqlite:///:memory:")
    try:
        provider = MarketProvider(store, market, seed=config.seed, launch_delay_seconds=config.launch_delay_seconds,
                                  ice_ttl_seconds=config.ice_ttl_seconds)
        runtime = SimRuntime(checkpoint_seconds=config.checkpoint_seconds,
                             restart_overhead_seconds=config.restart_overhead_seconds)
        world = World(store, provider, runtime, policy, {})
        return _run(jobs, market, policy, planner, config, start, end_cap, world, on_event, progress, forecaster)
    finally:
        store.close()


def _run(jobs: list[Job], market: Market, policy: Policy, planner: Planner, config: SimConfig, start: datetime,
         end_cap: datetime, world: World, on_event, progress, forecaster: RiskForecaster | None = None) -> SimResult:
    store, provider, runtime = world.store, world.provider, world.runtime
    changes = market.change_times()
    tick_gap = timedelta(seconds=config.tick_seconds)
    arrivals = 0
    now = start
    cost = 0.0
    gpu_hours_run = held_gpu_hours = 0.0
    rate = 0.0
    running_gpus = held_gpus = 0
    interruptions = migrations = ticks = ice_retries = 0  # the first two are counted from the store at the end
    samples: list[Sample] = []
    last = now
    span = (end_cap - start).total_seconds()
    planned_forecast = config.reclaim_forecast

    while True:
        # ---- the state since `last` was constant: account for it
        hours = (now - last).total_seconds() / 3600
        cost += rate * hours
        gpu_hours_run += running_gpus * hours
        held_gpu_hours += held_gpus * hours
        last = now

        # ---- arrivals
        batch = []
        while arrivals < len(jobs) and jobs[arrivals].submitted_at_utc <= now:
            batch.append(jobs[arrivals])
            arrivals += 1
        if batch:
            store.add_jobs(batch, now)
            for j in batch:
                world.submitted[j.job_id] = j

        # ---- market change: reclaim above capacity
        i = bisect.bisect_left(changes, now)
        notices = provider.enforce_capacity(now) if i < len(changes) and changes[i] == now else ()

        # ---- the controller's tick (re-planned after an insufficient-capacity refusal)
        active = store.jobs(active_only=True)
        held = [n for n in provider.nodes(now) if n.state in _HELD]
        if active or held or notices:
            # the reclaims the controller itself saw (its own notices): no knowledge of the market's future
            forecast = build_forecast(store, now) if planned_forecast else None
            if forecaster is not None:
                forecast = replace(forecast or Forecast(), interruption=tuple(forecaster(now)))
            # A launch refused for capacity is planned again at once without that offer by the tick
            # itself (fleetctl.controller.observe leaves it out for ice_ttl_seconds), as on a real cloud.
            report = tick(store=store, provider=provider, runtime=runtime, policy=policy, now=now, forecast=forecast,
                          planner=planner, refused_ttl=timedelta(seconds=config.ice_ttl_seconds))
            ice_retries += len(report.refused_offers)
            ticks += 1

        # ---- snapshot
        nodes = [n for n in provider.nodes(now) if n.state in _HELD]
        active = store.jobs(active_only=True)
        rate = sum(provider.usd_per_hour_at(n, now) for n in nodes)
        held_gpus = sum(n.offer.instance_type.gpu_count for n in nodes)
        running_gpus = sum(j.gpus for j in active if j.state is JobState.RUNNING)
        samples.append(Sample(now, cost, rate, running_gpus, held_gpus))
        if on_event is not None:
            on_event(now, world)
        if progress is not None:
            progress(min(1.0, (now - start).total_seconds() / span))

        # ---- the next event
        candidates: list[datetime] = []
        if arrivals < len(jobs):
            candidates.append(jobs[arrivals].submitted_at_utc)
        busy = bool(active or nodes)
        if busy:
            j = bisect.bisect_right(changes, now)
            if j < len(changes):
                candidates.append(changes[j])
            k = math.floor((now - start) / tick_gap) + 1
            candidates.append(start + k * tick_gap)
            for n in nodes:
                if n.state is NodeState.LAUNCHING and n.ready_at_utc is not None and n.ready_at_utc > now:
                    candidates.append(n.ready_at_utc)
            live = {n.node_id for n in nodes}
            for e in store.interruptions(unhandled_only=False):
                if e.deadline_utc is not None and e.deadline_utc > now and e.node_id in live:
                    candidates.append(e.deadline_utc)
            for job in active:
                work_from = runtime.work_starts_at(job)
                if job.state is JobState.RUNNING and work_from is not None:
                    done = work_from + timedelta(hours=job.remaining_hours)
                    done = done.replace(microsecond=0) + timedelta(seconds=1)  # safely past the float sum
                    if done > now:
                        candidates.append(done)
        if not candidates:
            break
        nxt = min(candidates)
        if nxt > end_cap:
            hours = (end_cap - last).total_seconds() / 3600
            cost += rate * hours
            gpu_hours_run += running_gpus * hours
            held_gpu_hours += held_gpus * hours
            now = last = end_cap
            break
        now = nxt

    if progress is not None:
        progress(1.0)
    return _result(world, jobs, now, cost, gpu_hours_run, held_gpu_hours, interruptions, migrations, ticks,
                   ice_retries, samples)


def _result(world: World, jobs: list[Job], end: datetime, cost: float, gpu_hours_run: float, held_gpu_hours: float,
            interruptions: int, migrations: int, ticks: int, ice_retries: int, samples: list[Sample]) -> SimResult:
    store, runtime = world.store, world.runtime
    final = {j.job_id: j for j in store.jobs()}
    first_start: dict[str, datetime] = {}
    completed_at: dict[str, datetime] = {}
    for e in store.events():
        if e["kind"] == "start" and e["subject"] not in first_start:
            first_start[e["subject"]] = _parse(e["at_utc"])
        elif e["kind"] == "complete":
            completed_at[e["subject"]] = _parse(e["at_utc"])
    notices = [e for e in store.interruptions(unhandled_only=False) if e.kind is not InterruptionKind.REBALANCE]
    interruptions = len(notices)
    migrations = len(store.events("migrate"))
    useful = 0.0
    waits: list[float] = []
    misses = completed = lost = 0
    for job in jobs:
        j = final.get(job.job_id)
        if j is None or j.state in (JobState.FAILED, JobState.CANCELLED):
            lost += 1
        if j is not None:
            if j.state is JobState.SUCCEEDED:
                completed += 1
                kept = j.duration_hours
            elif j.state is JobState.RUNNING:
                kept = runtime.progress(j, end).done_hours
            else:
                kept = j.checkpointed_work_hours
            useful += kept * j.gpus
        began = first_start.get(job.job_id, end)
        waits.append(max(0.0, (began - job.submitted_at_utc).total_seconds() / 3600))
        if job.deadline_utc is not None:
            done = completed_at.get(job.job_id)
            if done is None or done > job.deadline_utc:
                misses += 1
    return SimResult(
        cost_usd=cost,
        useful_gpu_hours=useful,
        lost_gpu_hours=max(0.0, gpu_hours_run - useful),
        gpu_hours_run=gpu_hours_run,
        held_gpu_hours=held_gpu_hours,
        gpu_utilization=useful / held_gpu_hours if held_gpu_hours > 0 else 0.0,
        wait_hours=tuple(waits),
        deadline_misses=misses,
        jobs_total=len(jobs),
        jobs_completed=completed,
        jobs_lost=lost,
        interruptions=interruptions,
        migrations=migrations,
        ticks=ticks,
        ice_retries=ice_retries,
        end_utc=end,
        samples=tuple(samples),
    )


def _parse(text: str) -> datetime:
    from fleetctl.codec import str_to_dt

    value = str_to_dt(text)
    assert value is not None
    return value
