"""Time whole controller ticks on a real store at several fleet sizes.

``fleetctl.controller.reconcile.tick`` is what ``fleetctl reconcile --once``
(cron) and ``fleetctl daemon`` run: handle interruptions -> lost nodes ->
cancellations -> advance jobs -> observe -> plan -> act -> record. This script
wires it as the CLI does (the sandbox ``SimProvider`` on the store, the
``SimRuntime``, ``build_forecast`` without a forecaster before each tick) plus
the daemon's ``FleetMetrics``, on a real store (a SQLite file, or a
PostgreSQL server it starts itself as ``tests/store/conftest.py`` does), and
runs ``--ticks`` ticks on a virtual clock advancing ``--tick-seconds`` each.

The world at each size (nodes N, seeded; offers, fleet and queue from
``plan_speed.py``'s helpers and the Alibaba 2023 job mix):

* **fleet**: N nodes on offers of the shipped catalog (the sandbox sells the
  whole catalog), about 70 % holding BOUND/RUNNING jobs of the mix
  (``plan_speed.build_fleet``), stored as the sandbox stores its nodes;
* **queue**: ``--jobs-per-node`` x N QUEUED jobs of the mix;
* **each tick**, before it: N/100 new jobs arrive (at least 1), N/500 spot nodes
  holding jobs get a reclaim warning (at least 1, while there are any), and
  N/1000 running jobs get a cancel request (at least 1).

Measured per size, each size in its own subprocess (so peak RSS is per size):
seconds per tick (``build_forecast`` + ``tick``; the first tick, which places
the initial queue, apart from the steady state's median and max), the
breakdown by phase (``time.perf_counter`` around the module functions that
``tick`` calls, swapped in by this script; product code is unchanged), SQL
statements per tick (a SQLAlchemy ``before_cursor_execute`` listener), calls
of the provider's ``nodes()`` per tick, peak RSS, and the store's growth per
steady tick (bytes: SQLite ``page_count * page_size``, PostgreSQL
``pg_database_size``; rows per table).

Usage::

    python benchmarks/tick_scaling.py [--sizes 100,500,2000,5000] [--ticks 10]
        [--store sqlite|postgres] [--seed 0] [--history-days 0] [--prune-days P,F]
        [--format md|json] [--out FILE]

``--prune-days P,F`` prunes after the ticks as ``fleetctl prune --older-than-days P
--finished-older-than-days F`` does and records the store's rows and bytes before and after
(``prune_store``; benchmarks/results/prune_history.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Final, Iterator

HERE: Final[Path] = Path(__file__).resolve().parent
ROOT: Final[Path] = HERE.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from benchmarks.plan_speed import NOW, JobMix, bench_policy, build_fleet, queued_jobs  # noqa: E402
from fleetctl.controller import reconcile as rc  # noqa: E402
from fleetctl.controller.forecast import build_forecast  # noqa: E402
from fleetctl.controller.loop import prune_history  # noqa: E402
from fleetctl.controller.runtime import SimRuntime  # noqa: E402
from fleetctl.metrics import FleetMetrics  # noqa: E402
from fleetctl.model import JobState, Market, NodeState, Policy  # noqa: E402
from fleetctl.store import Store, tables  # noqa: E402
from providers.catalog import load_catalog  # noqa: E402
from providers.sim import SimProvider  # noqa: E402

DEFAULT_SIZES: Final[tuple[int, ...]] = (100, 500, 2_000, 5_000)
DEFAULT_OUT: Final[Path] = HERE / "results" / "tick_scaling.md"
#: The phases of a tick, in order (``forecast`` is the CLI's ``build_forecast`` before ``tick``).
PHASES: Final[tuple[str, ...]] = ("forecast", "interruptions", "lost_nodes", "cancellations", "advance_jobs",
                                  "observe", "record_offers", "plan", "fingerprint", "execute", "metrics", "other")


# --------------------------------------------------------------------------- the world


def seed_world(store: Store, nodes: int, jobs_per_node: float, seed: int) -> dict[str, int]:
    """Store the fleet and the queue of one size; returns what was stored."""
    mix = JobMix.load()
    policy = bench_policy()
    catalog = tuple(sorted(load_catalog(), key=lambda o: o.key))
    fleet, bound = build_fleet(random.Random(f"{seed}:fleet"), mix, catalog, nodes, policy, NOW)
    queue = queued_jobs(random.Random(f"{seed}:queue"), mix, int(nodes * jobs_per_node), NOW)
    with store.transaction():
        for node in fleet:
            store.put_node(node, NOW)
        store.add_jobs(queue + bound, NOW)
    return {"nodes": len(fleet), "bound_jobs": len(bound), "queued_jobs": len(queue)}


def inject(store: Store, provider: SimProvider, rng: random.Random, mix: JobMix, nodes: int, tick_no: int,
           now: datetime) -> dict[str, int]:
    """What happens between two ticks: arrivals, reclaim warnings, cancel requests."""
    arrivals = queued_jobs(rng, mix, max(1, nodes // 100), now, prefix=f"t{tick_no:03d}")
    store.add_jobs((replace(j, submitted_at_utc=now) for j in arrivals), now)
    held = {nid for j in store.jobs(active_only=True) if j.state in (JobState.BOUND, JobState.RUNNING)
            for nid in j.node_ids}
    spot = sorted(n.node_id for n in store.nodes() if n.node_id in held and n.offer.market is Market.SPOT
                  and n.state in (NodeState.READY, NodeState.LAUNCHING))
    reclaimed = rng.sample(spot, min(len(spot), max(1, nodes // 500)))
    for node_id in reclaimed:
        provider.reclaim(node_id, now)
    running = sorted(j.job_id for j in store.jobs(active_only=True) if j.state is JobState.RUNNING)
    cancels = rng.sample(running, min(len(running), max(1, nodes // 1000)))
    if cancels:
        store.request_cancel(cancels, now, reason="benchmark")
    return {"arrivals": len(arrivals), "reclaims": len(reclaimed), "cancels": len(cancels)}


# --------------------------------------------------------------------------- history

#: What a daemon at N nodes is taken to write per day (the history ``--history-days`` pre-fills; see
#: ``seed_history``). Not the benchmark's own between-tick churn, which is a stress rate (N/100 arrivals
#: every 30 s would be 5.8 jobs per node per day).
HISTORY_JOBS_PER_NODE_DAY: Final[float] = 1.0  # jobs finished per node per day
HISTORY_GONE_NODES_PER_NODE_DAY: Final[float] = 0.1  # nodes retired per node per day (a 10-day node life)
HISTORY_RECLAIMED_SHARE: Final[float] = 0.5  # of the retired nodes, those taken by a reclaim notice
#: the daemon's --retain-days default: per-pass audit rows and handled notices older than that are pruned
HISTORY_PER_PASS_RETAINED_DAYS: Final[float] = 90.0


def seed_history(store: Store, nodes: int, days: float, seed: int, tick_seconds: float,
                 end: datetime = NOW) -> dict[str, int]:
    """Pre-fill the store with ``days`` days (before ``end``) of what a daemon
    at ``nodes`` nodes would have written, with the same row shapes as the
    product writes (``job_to_dict``/``node_to_dict`` documents, events with the
    kinds, subjects and payloads ``reconcile`` records); bulk inserts into the
    product's tables, seeded:

    * finished jobs (``HISTORY_JOBS_PER_NODE_DAY`` per node per day: 85 %
      succeeded, 10 % failed, 5 % cancelled, each with its ``bind``, ``start``,
      ``complete`` events; a cancelled one's request, handled), each on a
      retired node;
    * retired nodes (``HISTORY_GONE_NODES_PER_NODE_DAY``), GONE, each bought by
      its own ``launch`` (a ``done`` launches row, the node's idempotency key,
      a ``launch`` event); ``HISTORY_RECLAIMED_SHARE`` of them taken by a
      reclaim notice (a handled notice, ``interruption`` and ``requeue``
      events), the others by a ``terminate``;
    * per-pass audit rows (``demand``, ``offers_observed``, ``plan_applied``,
      one each per ``tick_seconds``) and handled notices only for the last
      ``HISTORY_PER_PASS_RETAINED_DAYS`` days: the daemon prunes older ones
      (``--retain-days`` 90). The market's change log is not pre-filled (a
      tick reads only ``offer_latest`` of it).

    Returns the rows written per table."""
    from fleetctl.codec import dt_to_str, job_to_dict, node_to_dict, stored_time
    from fleetctl.model import InterruptionKind, Node

    rng = random.Random(f"{seed}:history")
    mix = JobMix.load()
    catalog = tuple(o for o in sorted(load_catalog(), key=lambda o: o.key))
    start = end - timedelta(days=days)
    span_s = days * 86400.0
    n_nodes = int(nodes * HISTORY_GONE_NODES_PER_NODE_DAY * days)
    n_jobs = int(nodes * HISTORY_JOBS_PER_NODE_DAY * days)
    node_rows, launch_rows, event_rows, notice_rows, job_rows, cancel_rows = [], [], [], [], [], []
    lives: list[tuple[str, datetime, datetime, str]] = []  # node id, launched, gone, offer key
    per_pass_from = end - timedelta(days=min(days, HISTORY_PER_PASS_RETAINED_DAYS))

    def event(at: datetime, kind: str, subject: str, **payload: Any) -> None:
        event_rows.append(dict(at_utc=stored_time(at), kind=kind, subject=subject,
                               payload=json.dumps(payload, sort_keys=True, default=str)))

    for i in range(n_nodes):
        offer = catalog[rng.randrange(len(catalog))]
        launched = start + timedelta(seconds=round(rng.uniform(0.0, span_s * 0.98)))
        gone_at = min(end - timedelta(seconds=60), launched + timedelta(hours=rng.uniform(2.0, 480.0)))
        node_id = f"hist-{offer.provider}-{i:08d}"
        key = f"hist-launch-{i:08d}"
        node = Node(node_id=node_id, offer=offer, state=NodeState.GONE, launched_at_utc=launched,
                    ready_at_utc=launched + timedelta(seconds=90), idle_since_utc=gone_at, zone=offer.zone)
        node_rows.append(dict(node_id=node_id, provider=offer.provider, offer_key=offer.key, state="gone",
                              doc=json.dumps(node_to_dict(node), sort_keys=True), idempotency_key=key,
                              updated_at_utc=stored_time(gone_at)))
        launch_rows.append(dict(idempotency_key=key, offer_key=offer.key, count=1, status="done",
                                node_ids=json.dumps([node_id]), created_at_utc=stored_time(launched)))
        event(launched, "launch", offer.key, nodes=[node_id], reason="cheapest_offer")
        lives.append((node_id, launched, gone_at, offer.key))
        if offer.market is Market.SPOT and rng.random() < HISTORY_RECLAIMED_SHARE:
            event_id = f"hist-reclaim_warning-{node_id}-{gone_at.isoformat()}"
            if gone_at >= per_pass_from:
                notice_rows.append(dict(event_id=event_id, provider=offer.provider, node_id=node_id,
                                        kind=InterruptionKind.RECLAIM_WARNING.value,
                                        received_at_utc=stored_time(gone_at - timedelta(seconds=120)),
                                        deadline_utc=stored_time(gone_at), handled_at_utc=stored_time(gone_at)))
            event(gone_at, "interruption", node_id, notice="reclaim_warning", event_id=event_id,
                  deadline_utc=dt_to_str(gone_at))
        else:
            event(gone_at, "terminate", node_id, reason="idle", detail="idle past the policy's idle timeout")
    templates = queued_jobs(random.Random(f"{seed}:history-jobs"), mix, min(n_jobs, 2_000), start)
    states = (JobState.SUCCEEDED,) * 17 + (JobState.FAILED,) * 2 + (JobState.CANCELLED,)
    for i in range(n_jobs):
        node_id, launched, gone_at, _ = lives[rng.randrange(len(lives))] if lives else ("", start, end, "")
        begun = launched + timedelta(seconds=rng.uniform(90.0, max(91.0, (gone_at - launched).total_seconds() - 60)))
        finished = min(gone_at, begun + timedelta(hours=rng.uniform(0.05, 12.0)))
        submitted = begun - timedelta(seconds=round(rng.uniform(0.0, 3600.0)))
        state = states[rng.randrange(len(states))]
        t = templates[i % len(templates)]
        job = replace(t, job_id=f"hist-{i:08d}", submitted_at_utc=submitted, state=state,
                      node_ids=(node_id,) * t.workers, started_at_utc=begun, first_started_at_utc=begun)
        job_rows.append(dict(job_id=job.job_id, state=state.value, spec=json.dumps(job_to_dict(job), sort_keys=True),
                             submitted_at_utc=stored_time(submitted), updated_at_utc=stored_time(finished)))
        event(begun - timedelta(seconds=30), "bind", job.job_id, nodes=[node_id] * t.workers, reason="fits_new_capacity")
        event(begun, "start", job.job_id, nodes=[node_id] * t.workers)
        if state is JobState.CANCELLED:
            cancel_rows.append(dict(job_id=job.job_id, requested_at_utc=stored_time(finished - timedelta(seconds=30)),
                                    reason="history", handled_at_utc=stored_time(finished)))
            event(finished - timedelta(seconds=30), "cancel_requested", job.job_id, reason="history", state="running")
            event(finished, "cancel", job.job_id)
        else:
            event(finished, "complete", job.job_id)
    passes = int((end - per_pass_from).total_seconds() // tick_seconds)
    demand = {"A100-80GB": 64, "H100-80GB": 128, "L4": 32}
    for k in range(passes):
        at = per_pass_from + timedelta(seconds=k * tick_seconds)
        event(at, "offers_observed", "", changes=rng.randrange(0, 3))
        event(at, "demand", "", gpus=demand)
        if k % 4 == 0:
            event(at, "plan_applied", "", summary="3 actions", plan_id=f"{k:016x}")
    event_rows.sort(key=lambda r: r["at_utc"])  # seq in time order, as a daemon appends them
    job_rows.sort(key=lambda r: r["updated_at_utc"])
    written = {}
    with store.transaction(), store._tx() as conn:  # noqa: SLF001 - a benchmark bulk-fills the product's tables
        for table, rows in ((tables.nodes, node_rows), (tables.launches, launch_rows), (tables.jobs, job_rows),
                            (tables.events, event_rows), (tables.interruptions, notice_rows),
                            (tables.job_cancellations, cancel_rows)):
            for j in range(0, len(rows), 20_000):
                conn.execute(table.insert(), rows[j:j + 20_000])
            written[table.name] = len(rows)
    return written


# --------------------------------------------------------------------------- instrumentation


class Meter:
    """Seconds and SQL statements per phase of the current tick."""

    def __init__(self, engine: sa.engine.Engine) -> None:
        self.sql = 0
        self.seconds: dict[str, float] = defaultdict(float)
        self.statements: dict[str, int] = defaultdict(int)
        self.node_listings = 0
        self.node_listing_seconds = 0.0
        self._depth = 0
        sa.event.listen(engine, "before_cursor_execute", self._count)

    def _count(self, *_: Any) -> None:
        self.sql += 1

    def reset(self) -> None:
        self.seconds.clear()
        self.statements.clear()
        self.node_listings = 0
        self.node_listing_seconds = 0.0

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self._depth:  # nested (execute inside the plan loop is its own phase; nothing else nests)
            yield
            return
        self._depth += 1
        sql, start = self.sql, time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start
            self.statements[name] += self.sql - sql
            self._depth -= 1

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return fn(*args, **kwargs)
        return timed


@contextmanager
def instrumented(meter: Meter, store: Store, provider: SimProvider, metrics: FleetMetrics) -> Iterator[None]:
    """Time the functions ``tick`` calls by name (module globals of
    ``fleetctl.controller.reconcile``, methods of this run's objects); all
    restored on exit."""
    names = {"handle_interruptions": "interruptions", "handle_lost_nodes": "lost_nodes",
             "apply_cancellations": "cancellations", "advance_jobs": "advance_jobs", "observe": "observe",
             "execute": "execute", "fingerprint": "fingerprint"}
    saved = {attr: getattr(rc, attr) for attr in names}
    for attr, phase in names.items():
        setattr(rc, attr, meter.wrap(phase, saved[attr]))
    store.record_offers = meter.wrap("record_offers", store.record_offers)  # type: ignore[method-assign]
    metrics.observe_state = meter.wrap("metrics", metrics.observe_state)  # type: ignore[method-assign]
    listing = provider.nodes

    def nodes(now: datetime) -> Any:
        meter.node_listings += 1
        start = time.perf_counter()
        try:
            return listing(now)
        finally:
            meter.node_listing_seconds += time.perf_counter() - start

    provider.nodes = nodes  # type: ignore[method-assign]
    try:
        yield
    finally:
        for attr, fn in saved.items():
            setattr(rc, attr, fn)


def store_bytes(store: Store) -> int:
    engine = store._engine  # noqa: SLF001 - a benchmark reads the size of what the store wrote
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            pages = conn.execute(sa.text("PRAGMA page_count")).scalar()
            size = conn.execute(sa.text("PRAGMA page_size")).scalar()
            return int(pages) * int(size)
        return int(conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar())


def row_counts(store: Store) -> dict[str, int]:
    with store._engine.connect() as conn:  # noqa: SLF001
        return {t.name: int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar())
                for t in tables.metadata.sorted_tables}


def peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------- one size


def measure(url: str, nodes: int, jobs_per_node: float, ticks: int, seed: int, tick_seconds: float,
            history_days: float = 0.0, prune_days: tuple[float, float] | None = None) -> dict[str, Any]:
    """Seed a world of ``nodes`` nodes into the store at ``url`` (after
    ``history_days`` days of history, ``seed_history``) and run ``ticks`` ticks;
    then, with ``prune_days`` (per-pass, finished), prune as ``fleetctl prune
    --older-than-days P --finished-older-than-days F`` does (``prune_store``)."""
    store = Store(url)
    try:
        started = time.perf_counter()
        history = seed_history(store, nodes, history_days, seed, tick_seconds) if history_days > 0 else {}
        history_seconds = time.perf_counter() - started
        if history and store._engine.dialect.name == "postgresql":  # noqa: SLF001
            with store._engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:  # noqa: SLF001
                conn.execute(sa.text("VACUUM ANALYZE"))  # as autovacuum would have, over the days
        started = time.perf_counter()
        world = seed_world(store, nodes, jobs_per_node, seed)
        seed_seconds = time.perf_counter() - started
        rss_seeded = peak_rss_mib()
        provider = SimProvider(store, seed=seed)
        runtime = SimRuntime()
        policy = bench_policy()
        metrics = FleetMetrics()
        meter = Meter(store._engine)  # noqa: SLF001
        mix = JobMix.load()
        rng = random.Random(f"{seed}:ticks")
        per_tick: list[dict[str, Any]] = []
        now = NOW
        with instrumented(meter, store, provider, metrics):
            for i in range(ticks):
                injected = inject(store, provider, rng, mix, nodes, i, now)
                meter.reset()
                sql0 = meter.sql
                start = time.perf_counter()
                with meter.phase("forecast"):
                    forecast = build_forecast(store, now, reclaims_within=timedelta(
                        minutes=policy.reclaimed_offer_ttl_minutes))  # as reconcile --once and the daemon
                report = rc.tick(store=store, provider=provider, runtime=runtime, policy=policy, now=now,
                                 forecast=forecast, metrics=metrics,
                                 planner=meter.wrap("plan", rc.make_plan))
                seconds = time.perf_counter() - start
                phases = dict(meter.seconds)
                phases["other"] = max(0.0, seconds - sum(phases.values()))
                plan = report.plan
                per_tick.append({
                    "tick": i, "seconds": round(seconds, 4),
                    "phases": {p: round(phases.get(p, 0.0), 4) for p in PHASES},
                    "sql": meter.sql - sql0,
                    "sql_by_phase": {p: meter.statements.get(p, 0) for p in PHASES if meter.statements.get(p)},
                    "node_listings": meter.node_listings,
                    "node_listing_seconds": round(meter.node_listing_seconds, 4),  # inside the phases above
                    "actions": len(plan.actions) if plan else 0,
                    "started": len(report.started), "completed": len(report.completed),
                    "requeued": len(report.requeued), "cancelled": len(report.cancelled),
                    "store_bytes": store_bytes(store), "rows": row_counts(store), "injected": injected,
                })
                now += timedelta(seconds=tick_seconds)
        rows = row_counts(store)
        pruned = prune_store(store, policy, now, prune_days) if prune_days else None
    finally:
        store.close()
    steady = per_tick[1:] or per_tick
    steady_s = [t["seconds"] for t in steady]
    growth = ((per_tick[-1]["store_bytes"] - per_tick[0]["store_bytes"]) / (len(per_tick) - 1)
              if len(per_tick) > 1 else 0.0)
    row_growth = {table: statistics.median(b["rows"][table] - a["rows"][table] for a, b in zip(per_tick, per_tick[1:]))
                  for table in per_tick[0]["rows"]} if len(per_tick) > 1 else {}
    return {
        "nodes": nodes, "world": world, "ticks": ticks, "seed_seconds": round(seed_seconds, 2),
        "history_days": history_days, "history_rows": history, "history_seconds": round(history_seconds, 2),
        "first_tick_seconds": per_tick[0]["seconds"],
        "steady_median_seconds": round(statistics.median(steady_s), 4),
        "steady_max_seconds": round(max(steady_s), 4),
        "first_tick_phases": per_tick[0]["phases"],
        "steady_median_phases": {p: round(statistics.median(t["phases"][p] for t in steady), 4) for p in PHASES},
        "first_tick_sql": per_tick[0]["sql"],
        "steady_median_sql": int(statistics.median(t["sql"] for t in steady)),
        "steady_median_node_listings": int(statistics.median(t["node_listings"] for t in steady)),
        "steady_median_node_listing_seconds": round(statistics.median(t["node_listing_seconds"] for t in steady), 4),
        "store_bytes_after_first": per_tick[0]["store_bytes"],
        "store_bytes_growth_per_steady_tick": round(growth),
        "store_bytes_growth_median": _median_growth(per_tick),
        "rows_growth_median": row_growth,
        "rows_at_end": rows,
        "peak_rss_mib_seeded": round(rss_seeded, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "per_tick": per_tick,
        **({"prune": pruned} if pruned else {}),
    }


def prune_store(store: Store, policy: Policy, now: datetime, days: tuple[float, float]) -> dict[str, Any]:
    """What ``fleetctl prune --older-than-days P --finished-older-than-days F``
    does at ``now`` (one transaction), timed, with the store's rows and bytes
    before and after; on SQLite, then the ``VACUUM`` that gives the freed pages
    back to the file system (timed apart: the daemon never runs it)."""
    per_pass, finished = days
    before_rows, before_bytes = row_counts(store), store_bytes(store)
    started = time.perf_counter()
    deleted, deleted_finished = prune_history(store, policy, now, per_pass, finished)
    seconds = time.perf_counter() - started
    after_rows, after_bytes = row_counts(store), store_bytes(store)
    doc: dict[str, Any] = {
        "older_than_days": per_pass, "finished_older_than_days": finished, "seconds": round(seconds, 2),
        "deleted": deleted, "deleted_finished": deleted_finished, "rows_before": before_rows,
        "rows_after": after_rows, "bytes_before": before_bytes, "bytes_after": after_bytes}
    engine = store._engine  # noqa: SLF001 - a benchmark reads and compacts what the store wrote
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            doc["free_bytes_after"] = int(conn.execute(sa.text("PRAGMA freelist_count")).scalar()) * int(
                conn.execute(sa.text("PRAGMA page_size")).scalar())
        started = time.perf_counter()
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM"))
        doc["vacuum_seconds"] = round(time.perf_counter() - started, 2)
        doc["bytes_after_vacuum"] = store_bytes(store)
    return doc


def _median_growth(per_tick: list[dict[str, Any]]) -> int:
    """The median growth of the store (bytes) from one tick to the next (the
    ticks right after the first, which start its placements, grow it most)."""
    sizes = [t["store_bytes"] for t in per_tick]
    return round(statistics.median(b - a for a, b in zip(sizes, sizes[1:]))) if len(sizes) > 1 else 0


# --------------------------------------------------------------------------- stores


@contextmanager
def postgres_server() -> Iterator[Callable[[str], str]]:
    """A throwaway PostgreSQL (``tests/pgserver.py``, as the store tests start
    one, but with fsync on: a benchmark of commits should pay for them);
    yields a function that creates a database and returns its URL."""
    from tests.pgserver import PostgresMissing
    from tests.pgserver import postgres_server as server

    try:
        with server(fsync=True, prefix="fleetctl-bench-pg-") as database:
            yield database
    except PostgresMissing as exc:
        raise SystemExit(str(exc)) from exc


# --------------------------------------------------------------------------- report


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "fleetctl", "providers"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return done.stdout.strip() + (" (+ uncommitted changes)" if dirty else "")


def to_markdown(doc: dict[str, Any]) -> str:
    lines = [
        f"# Controller tick at scale ({doc['store']})", "",
        f"Command: `{doc['command']}`  ",
        f"Date: {doc['date']}; machine: {doc['machine']}; commit: {doc['commit']}", "",
        *([f"History before the ticks: {doc['results'][0]['history_days']:g} days (`seed_history`): "
           + "; ".join(f"{r['nodes']:,} nodes: " + ", ".join(f"{n:,} {t}" for t, n in r["history_rows"].items())
                       for r in doc["results"]), ""] if doc["results"] and doc["results"][0].get("history_rows")
          else []),
        "Per size: seconds per tick (`build_forecast` + `tick`), the first tick (places the initial queue) and the "
        "steady ticks after it; SQL statements per tick; provider `nodes()` calls per tick; store growth per "
        "steady tick; peak RSS of the size's process.", "",
        "| nodes | jobs (queued + bound) | first tick s | steady median s | steady max s | SQL first | SQL steady "
        "| nodes() calls (their s) | store MB after first | growth KB/tick mean (median) | peak RSS MiB |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in doc["results"]:
        w = r["world"]
        lines.append(
            f"| {r['nodes']:,} | {w['queued_jobs']:,} + {w['bound_jobs']:,} | {r['first_tick_seconds']:.2f} "
            f"| {r['steady_median_seconds']:.3f} | {r['steady_max_seconds']:.3f} | {r['first_tick_sql']:,} "
            f"| {r['steady_median_sql']:,} | {r['steady_median_node_listings']}"
            + (f" ({r['steady_median_node_listing_seconds']:.3f} s)" if "steady_median_node_listing_seconds" in r else "")
            + " "
            f"| {r['store_bytes_after_first'] / 1e6:.1f} | {r['store_bytes_growth_per_steady_tick'] / 1e3:.1f} "
            f"({_median_growth(r['per_tick']) / 1e3:.1f}) | {r['peak_rss_mib']:.0f} |")
    if any(r.get("rows_growth_median") for r in doc["results"]):
        tables_ = sorted({t for r in doc["results"] for t in r.get("rows_growth_median", {})})
        lines += ["", "Rows added per tick (median over the ticks), per table:", "",
                  "| nodes | " + " | ".join(tables_) + " |", "| ---: |" + " ---: |" * len(tables_)]
        for r in doc["results"]:
            g = r.get("rows_growth_median", {})
            lines.append(f"| {r['nodes']:,} | " + " | ".join(f"{g.get(t, 0):g}" for t in tables_) + " |")
    for title, key in (("First tick by phase (s)", "first_tick_phases"),
                       ("Steady tick by phase (median s)", "steady_median_phases")):
        lines += ["", f"{title}:", "", "| nodes | " + " | ".join(PHASES) + " |",
                  "| ---: |" + " ---: |" * len(PHASES)]
        for r in doc["results"]:
            lines.append(f"| {r['nodes']:,} | " + " | ".join(f"{r[key][p]:.3f}" for p in PHASES) + " |")
    if doc.get("before"):
        before = {r["nodes"]: r for r in doc["before"]["results"]}
        lines += ["", f"Before -> after (this run), per size. Before: commit {doc['before']['commit']}, "
                  f"{doc['before']['date']}, `{doc['before']['command']}`:", "",
                  "| nodes | first tick s | steady median s | steady max s | SQL steady | peak RSS MiB |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in doc["results"]:
            b = before.get(r["nodes"])
            if b is None:
                continue
            lines.append(
                f"| {r['nodes']:,} | {b['first_tick_seconds']:.2f} -> {r['first_tick_seconds']:.2f} "
                f"| {b['steady_median_seconds']:.3f} -> {r['steady_median_seconds']:.3f} "
                f"| {b['steady_max_seconds']:.3f} -> {r['steady_max_seconds']:.3f} "
                f"| {b['steady_median_sql']:,} -> {r['steady_median_sql']:,} "
                f"| {b['peak_rss_mib']:.0f} -> {r['peak_rss_mib']:.0f} |")
    return "\n".join(lines) + "\n"


def parse_sizes(text: str) -> tuple[int, ...]:
    return tuple(int(s.replace("_", "")) for s in text.split(",") if s.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="node counts, comma-separated")
    parser.add_argument("--jobs-per-node", type=float, default=2.0, help="queued jobs per node at the start")
    parser.add_argument("--ticks", type=int, default=10, help="ticks per size (the first places the queue)")
    parser.add_argument("--tick-seconds", type=float, default=30.0, help="virtual seconds between ticks")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", choices=("md", "json"), default="md", help="what --out (or stdout) gets")
    parser.add_argument("--out", type=Path, default=None,
                        help="write the report here (and the JSON beside a .md); default stdout")
    parser.add_argument("--before", type=Path, default=None,
                        help="a JSON of an earlier run (another commit) to compare with, in the Markdown")
    parser.add_argument("--history-days", type=float, default=0.0,
                        help="pre-fill the store with this many days of a daemon's history before the ticks "
                        "(finished jobs, retired nodes, decision events, the per-pass rows the daemon keeps; "
                        "seed_history); 0 = a fresh store")
    parser.add_argument("--prune-days", default=None, metavar="P,F",
                        help="after the ticks, prune as `fleetctl prune --older-than-days P "
                        "--finished-older-than-days F` does, and measure the store before and after (and after "
                        "a VACUUM, on SQLite); default: no prune")
    parser.add_argument("--single", default=None, help=argparse.SUPPRESS)  # internal: one size, JSON on stdout
    args = parser.parse_args(argv)
    if args.ticks < 1:
        parser.error("--ticks must be at least 1")
    if args.history_days < 0:
        parser.error("--history-days must be at least 0")
    prune_days = None
    if args.prune_days is not None:
        try:
            per_pass, finished = (float(v) for v in args.prune_days.split(","))
        except ValueError:
            parser.error(f"--prune-days {args.prune_days}: give two numbers of days, P,F (e.g. 90,30)")
        if min(per_pass, finished) < 1:
            parser.error(f"--prune-days {args.prune_days}: each is at least 1 day, as `fleetctl prune` takes")
        prune_days = (per_pass, finished)

    if args.single is not None:
        url, nodes = args.single.rsplit("|", 1)
        print(json.dumps(measure(url, int(nodes), args.jobs_per_node, args.ticks, args.seed, args.tick_seconds,
                                 args.history_days, prune_days)))
        return 0

    results = []
    with tempfile.TemporaryDirectory(prefix="fleetctl-tick-") as tmp, \
            (postgres_server() if args.store == "postgres" else _no_server()) as database:
        for nodes in parse_sizes(args.sizes):
            url = database(f"tick_{nodes}") if database else f"sqlite:///{tmp}/tick_{nodes}.db"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--single", f"{url}|{nodes}",
                   "--jobs-per-node", str(args.jobs_per_node), "--ticks", str(args.ticks),
                   "--tick-seconds", str(args.tick_seconds), "--seed", str(args.seed),
                   "--history-days", str(args.history_days),
                   *(["--prune-days", args.prune_days] if args.prune_days else [])]
            print(f"size {nodes:,} nodes ...", file=sys.stderr, flush=True)
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if done.returncode:
                sys.stderr.write(done.stderr)
                return done.returncode
            r = json.loads(done.stdout)
            print(f"  first tick {r['first_tick_seconds']:.2f} s, steady median {r['steady_median_seconds']:.3f} s",
                  file=sys.stderr, flush=True)
            results.append(r)
    shown = ["python", "benchmarks/tick_scaling.py", *(argv if argv is not None else sys.argv[1:])]
    doc = {"store": args.store, "command": shlex.join(shown),
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": f"{platform.machine()}, nproc {os.cpu_count()}, Python {platform.python_version()}",
           "commit": _commit(), "results": results}
    if args.before is not None:
        doc["before"] = json.loads(args.before.read_text(encoding="utf-8"))
    text = json.dumps(doc, indent=1) + "\n" if args.format == "json" else to_markdown(doc)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        if args.format == "md":
            args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


@contextmanager
def _no_server() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    raise SystemExit(main())
