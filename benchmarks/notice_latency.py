"""How long a reclaim notice waits while a reconcile tick runs, at several fleet sizes.

A notice gives 2 minutes on AWS but 30 s on GCP and Azure; within it the
daemon must cordon the node and ask each checkpointable job on it to
checkpoint. The daemon (``fleetctl.controller.loop.Daemon``) runs a reconcile
pass every ``--interval-seconds`` and a notice pass every few seconds, under
one lock. This script measures, on the real Daemon, the wall-clock time from a
notice's arrival to

* **checkpoint**: the first checkpoint (or stop) request for a job on the
  noticed node reaching the runtime, and
* **cordon**: the node cordoned in the store (the transaction of
  ``_handle_and_mark`` that drains it has committed),

while a reconcile tick is under way.

The world per size (nodes N, seeded) is ``tick_scaling.py``'s (its builders:
``seed_world``, ``inject``; N nodes, 2N queued jobs, the sandbox provider on a
SQLite file, ``SimRuntime``, ``bench_policy``), and so is the churn before each
tick (N/100 arrivals, N/500 reclaims, N/1000 cancels). Each tick is
``Daemon.reconcile()`` on a virtual clock (30 s per tick), run in a thread as
apscheduler runs it. During the tick, at a controlled moment (the entry of one
of its phases, taken in turn: ``start`` = right after the tick's own notice
phase, ``advance_jobs``, ``observe`` = just before plan and execute,
``execute``), a GCP-length notice (30 s) is delivered for a spot node that
holds a running job (checkpointable when there is one), and the notice pass
(``Daemon.interruptions()``) is called at once and then every
``--interruption-seconds``, as apscheduler calls it (``max_instances=1``: a
call still waiting for the lock makes the next ones skip). The poll's own
phase is taken at its best (the notice arrives just as the pass is called): in
a daemon add up to ``interruption_seconds`` (5 s by default) to every number.

``--mode cron`` instead runs each tick as ``fleetctl reconcile --once`` does
(``tick`` under the lease, the daemon's notice pass standing by: it finds the
lease held and skips); the notice is then handled when the cron tick handles
it, or by the daemon's first pass after the tick.

Usage::

    python benchmarks/notice_latency.py [--sizes 500,2000,5000] [--ticks 8] [--mode daemon|cron]
        [--seed 0] [--before OLD.json] [--out FILE.md]
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
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Final

HERE: Final[Path] = Path(__file__).resolve().parent
ROOT: Final[Path] = HERE.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from benchmarks.plan_speed import NOW, JobMix, bench_policy  # noqa: E402
from benchmarks.tick_scaling import PHASES, Meter, inject, instrumented, seed_world  # noqa: E402
from fleetctl.controller import reconcile as rc  # noqa: E402
from fleetctl.controller.loop import Daemon, LoopContext  # noqa: E402
from fleetctl.controller.runtime import SimRuntime  # noqa: E402
from fleetctl.metrics import FleetMetrics  # noqa: E402
from fleetctl.model import JobState, Market, NodeState  # noqa: E402
from fleetctl.store import Store  # noqa: E402
from providers.sim import SimProvider  # noqa: E402

DEFAULT_SIZES: Final[tuple[int, ...]] = (500, 2_000, 5_000)
#: Where in the tick the notice arrives: the entry of this function of ``fleetctl.controller.reconcile``.
MOMENTS: Final[dict[str, str]] = {"start": "handle_lost_nodes", "advance_jobs": "advance_jobs",
                                  "observe": "observe", "execute": "execute"}
NOTICE_SECONDS: Final[float] = 30.0  # GCP and Azure
CLOCK: Final[list[datetime]] = [NOW]  # the virtual clock of the daemon and the cron tick
CHECKS: Final[list[list[float]]] = [[]]  # the safe points of the tick under way (perf_counter times)


class RecordingRuntime(SimRuntime):
    """``SimRuntime`` that notes when each checkpoint or stop request a notice's handling makes arrives
    (wall clock; not the stops of jobs that finish or are cancelled)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: dict[str, float] = {}  # job id -> first request since the last reset
        self.watch: frozenset[str] = frozenset()
        self.handling = threading.local()  # .on: inside _handle_and_mark
        # once the notice arrived: a job of the node also on another node, reclaimed by the churn before the
        # tick, was checkpointed by the tick's own first step, before this notice (not its request)
        self.armed = False

    def _note(self, job_id: str) -> None:
        if (self.armed and getattr(self.handling, "on", False) and job_id in self.watch
                and job_id not in self.requests):
            self.requests[job_id] = time.perf_counter()

    def checkpoint(self, job, deadline_utc, now):  # noqa: ANN001, ANN201 - the Runtime protocol
        self._note(job.job_id)
        return super().checkpoint(job, deadline_utc, now)

    def stop(self, job, now):  # noqa: ANN001, ANN201
        self._note(job.job_id)
        return super().stop(job, now)


def pick_node(store: Store, rng: random.Random) -> tuple[str, tuple[str, ...]] | None:
    """A spot node that holds a running job (one holding a checkpointable one if any): (node, its jobs)."""
    nodes = {n.node_id: n for n in store.nodes() if n.offer.market is Market.SPOT and n.state is NodeState.READY}
    on: dict[str, list] = {}
    for j in store.jobs(active_only=True):
        for nid in set(j.node_ids):
            if nid in nodes:
                on.setdefault(nid, []).append(j)
    running = sorted(nid for nid, js in on.items() if any(j.state is JobState.RUNNING for j in js))
    best = [nid for nid in running if any(j.state is JobState.RUNNING and j.checkpointable for j in on[nid])]
    pool = best or running or sorted(on)
    if not pool:
        return None
    nid = rng.choice(pool)
    return nid, tuple(sorted(j.job_id for j in on[nid]))


def measure(url: str, nodes: int, ticks: int, seed: int, mode: str, interruption_seconds: float) -> dict[str, Any]:
    store = Store(url)
    world = seed_world(store, nodes, 2.0, seed)
    provider = SimProvider(store, seed=seed)
    runtime = RecordingRuntime()
    policy = bench_policy()
    metrics = FleetMetrics()
    clock = CLOCK
    # cron: the daemon is another process, on its own store handle (a handle is not shared between threads)
    daemon_store = store if mode == "daemon" else Store(url)
    daemon_provider = provider if mode == "daemon" else SimProvider(daemon_store, seed=seed)
    daemon = Daemon(LoopContext(daemon_store, daemon_provider, runtime, policy, metrics), interval_seconds=3600,
                    interruption_seconds=interruption_seconds, clock=lambda: clock[0])
    meter = Meter(store._engine)  # noqa: SLF001
    mix = JobMix.load()
    rng = random.Random(f"{seed}:ticks")
    pick_rng = random.Random(f"{seed}:notices")
    moments = list(MOMENTS)
    cordoned: dict[str, float] = {}  # event id -> when its handling committed
    handled = threading.Event()
    per_tick: list[dict[str, Any]] = []
    original_handle = rc._handle_and_mark  # noqa: SLF001

    def handle_and_mark(event, **kw):  # noqa: ANN001, ANN202
        runtime.handling.on = True
        try:
            out = original_handle(event, **kw)
        finally:
            runtime.handling.on = False
        cordoned.setdefault(event.event_id, time.perf_counter())
        if event.event_id == target.get("event_id"):
            handled.set()
        return out

    target: dict[str, Any] = {}
    checks: list[float] = []  # when the tick asked whether notices wait (its safe points), this tick
    if hasattr(daemon, "_notices_due"):  # a commit whose ticks have safe points
        asked = daemon._notices_due  # noqa: SLF001

        def notices_due():  # noqa: ANN202
            checks.append(time.perf_counter())
            return asked()

        daemon._notices_due = notices_due  # noqa: SLF001
    CHECKS[:] = [checks]
    with instrumented(meter, store, provider, metrics):
        rc._handle_and_mark = handle_and_mark  # noqa: SLF001
        try:
            for i in range(ticks):
                now = clock[0]
                injected = inject(store, provider, rng, mix, nodes, i, now)
                picked = pick_node(store, pick_rng)
                moment = moments[i % len(moments)]
                handled.clear()
                target.clear()
                runtime.requests.clear()
                runtime.armed = False
                runtime.watch = frozenset(picked[1]) if picked else frozenset()
                arrived = threading.Event()
                fn_name = MOMENTS[moment]
                inner = getattr(rc, fn_name)

                def deliver() -> None:
                    """The notice arrives (once): stored as the sandbox's provider stores it."""
                    if arrived.is_set():
                        return
                    if picked is not None:
                        event = provider.reclaim(picked[0], clock[0], lead_seconds=NOTICE_SECONDS)
                        target["event_id"] = event.event_id
                    else:  # no spot node holds a job: nothing to measure
                        handled.set()
                    target["at"] = time.perf_counter()
                    runtime.armed = True
                    arrived.set()

                def trigger(*args, _inner=inner, **kwargs):  # noqa: ANN002, ANN003, ANN202
                    deliver()
                    return _inner(*args, **kwargs)

                setattr(rc, fn_name, trigger)

                def poller() -> None:
                    """apscheduler's calls of the notice pass: at once, then every interruption_seconds."""
                    arrived.wait()
                    while True:
                        daemon.interruptions()
                        if handled.wait(interruption_seconds):
                            return

                meter.reset()
                checks.clear()
                poll = threading.Thread(target=poller, name="notice-pass", daemon=True)
                poll.start()
                started = time.perf_counter()
                if mode == "daemon":
                    daemon.reconcile()
                else:  # as `reconcile --once`: the tick under the lease, the daemon standing by
                    run_cron_tick(store, provider, runtime, policy, metrics, now)
                ended = time.perf_counter()
                setattr(rc, fn_name, inner)
                if not arrived.is_set():  # the tick never reached the moment (no plan to execute): after it
                    deliver()
                handled.wait(600)
                poll.join(600)
                at = target.get("at", ended)
                ckpt = min(runtime.requests.values()) if runtime.requests else None
                cordon = cordoned.get(target.get("event_id", ""))
                marks = [started, *(c for c in checks if started <= c <= ended), ended]
                stretch = max(b - a for a, b in zip(marks, marks[1:]))
                phases = dict(meter.seconds)
                phases["other"] = max(0.0, (ended - started) - sum(phases.values()))
                per_tick.append({
                    "tick": i, "moment": moment, "node": picked[0] if picked else None,
                    "jobs_on_node": len(picked[1]) if picked else 0,
                    "tick_seconds": round(ended - started, 3),
                    "notice_at_seconds": round(at - started, 3),
                    "checkpoint_seconds": round(ckpt - at, 3) if ckpt is not None else None,
                    "cordon_seconds": round(cordon - at, 3) if cordon is not None else None,
                    "safe_points": len(marks) - 2,
                    "longest_stretch_seconds": round(stretch, 3),
                    "phases": {p: round(phases.get(p, 0.0), 3) for p in PHASES},
                    "injected": injected,
                })
                print(f"  tick {i} ({moment}): {per_tick[-1]['tick_seconds']:.2f} s, notice at "
                      f"{per_tick[-1]['notice_at_seconds']:.2f} s -> checkpoint {per_tick[-1]['checkpoint_seconds']}"
                      f" s, cordon {per_tick[-1]['cordon_seconds']} s", file=sys.stderr, flush=True)
                clock[0] = now + timedelta(seconds=30)
        finally:
            rc._handle_and_mark = original_handle  # noqa: SLF001
    store.close()
    if daemon_store is not store:
        daemon_store.close()
    cps = [t["checkpoint_seconds"] for t in per_tick if t["checkpoint_seconds"] is not None]
    cos = [t["cordon_seconds"] for t in per_tick if t["cordon_seconds"] is not None]
    return {"nodes": nodes, "world": world, "ticks": ticks, "mode": mode, "per_tick": per_tick,
            "tick_median_seconds": round(statistics.median(t["tick_seconds"] for t in per_tick), 3),
            "tick_max_seconds": round(max(t["tick_seconds"] for t in per_tick), 3),
            "checkpoint_median_seconds": round(statistics.median(cps), 3) if cps else None,
            "checkpoint_max_seconds": round(max(cps), 3) if cps else None,
            "cordon_median_seconds": round(statistics.median(cos), 3) if cos else None,
            "cordon_max_seconds": round(max(cos), 3) if cos else None,
            "longest_stretch_seconds": max(t["longest_stretch_seconds"] for t in per_tick),
            "over_30s": sum(1 for c in cps if c > NOTICE_SECONDS)}


def run_cron_tick(store, provider, runtime, policy, metrics, now):  # noqa: ANN001, ANN201
    """One tick as ``fleetctl reconcile --once`` runs it (``controller_cmd.reconcile``), under the lease."""
    from fleetctl.controller.forecast import build_forecast
    from fleetctl.controller.lease import controller_lease, holder_id

    with controller_lease(store, holder_id(), wait_seconds=0):
        forecast = build_forecast(store, now, None, reclaims_within=timedelta(minutes=policy.reclaimed_offer_ttl_minutes))
        kwargs = cron_tick_kwargs()
        return rc.tick(store=store, provider=provider, runtime=runtime, policy=policy, now=now, forecast=forecast,
                       metrics=metrics, **kwargs)


def cron_tick_kwargs() -> dict[str, Any]:
    """What ``reconcile --once`` passes ``tick`` beyond the plain arguments: its notice checks, on a
    commit that has them."""
    if not hasattr(rc, "notice_checks"):
        return {}
    due = rc.notice_checks(rc.ONCE_NOTICE_CHECK_SECONDS, lambda: CLOCK[0])

    def notices_due():  # noqa: ANN202
        CHECKS[0].append(time.perf_counter())
        return due()

    return {"notices_due": notices_due}


# --------------------------------------------------------------------------- report


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "fleetctl", "providers"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return done.stdout.strip() + (" (+ uncommitted changes)" if dirty else "")


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _stretch(r: dict[str, Any]) -> float:
    """The longest stretch without a safe point (a run from before they existed: its longest tick)."""
    return r.get("longest_stretch_seconds", r["tick_max_seconds"])


def to_markdown(doc: dict[str, Any]) -> str:
    lines = [f"# Reclaim notice latency during a reconcile tick ({doc['mode']})", "",
             f"Command: `{doc['command']}`  ",
             f"Date: {doc['date']}; machine: {doc['machine']}; commit: {doc['commit']}", "",
             "Seconds (wall clock) from a notice's arrival to the first checkpoint/stop request for a job on its "
             "node reaching the runtime, and to the node cordoned in the store; the notice pass is called as the "
             "notice arrives (in a daemon, add up to `interruption_seconds`, 5 s by default, for its poll).", "",
             "Longest stretch: the longest time the tick went without a safe point at which it handles notices "
             "(the whole tick, on a commit without them): the worst wait of a notice that arrives at the wrong "
             "moment, whatever moments the notices below happened to hit.", "",
             "| nodes | tick median s | tick max s | checkpoint median s | checkpoint max s | cordon median s "
             "| cordon max s | notices over 30 s | longest stretch s |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in doc["results"]:
        lines.append(f"| {r['nodes']:,} | {_s(r['tick_median_seconds'])} | {_s(r['tick_max_seconds'])} "
                     f"| {_s(r['checkpoint_median_seconds'])} | {_s(r['checkpoint_max_seconds'])} "
                     f"| {_s(r['cordon_median_seconds'])} | {_s(r['cordon_max_seconds'])} "
                     f"| {r['over_30s']} of {len(r['per_tick'])} | {_s(_stretch(r))} |")
    lines += ["", "Per tick (notice at: seconds into the tick; the slowest phases of the tick):", "",
              "| nodes | tick | notice moment | tick s | notice at s | checkpoint s | cordon s | safe points "
              "| longest stretch s | slowest phases (s) |",
              "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in doc["results"]:
        for t in r["per_tick"]:
            top = sorted(t["phases"].items(), key=lambda kv: -kv[1])[:3]
            lines.append(f"| {r['nodes']:,} | {t['tick']} | {t['moment']} | {t['tick_seconds']:.2f} "
                         f"| {t['notice_at_seconds']:.2f} | {_s(t['checkpoint_seconds'])} | {_s(t['cordon_seconds'])} "
                         f"| {t.get('safe_points', 0):,} | {_s(t.get('longest_stretch_seconds', t['tick_seconds']))} "
                         f"| {', '.join(f'{p} {s:.1f}' for p, s in top)} |")
    if doc.get("before"):
        before = {r["nodes"]: r for r in doc["before"]["results"]}
        lines += ["", f"Before -> after. Before: commit {doc['before']['commit']}, {doc['before']['date']}, "
                  f"`{doc['before']['command']}`:", "",
                  "| nodes | checkpoint median s | checkpoint max s | cordon median s | cordon max s | over 30 s "
                  "| longest stretch s | tick median s | tick max s |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in doc["results"]:
            b = before.get(r["nodes"])
            if b is None:
                continue
            lines.append(
                f"| {r['nodes']:,} | {_s(b['checkpoint_median_seconds'])} -> {_s(r['checkpoint_median_seconds'])} "
                f"| {_s(b['checkpoint_max_seconds'])} -> {_s(r['checkpoint_max_seconds'])} "
                f"| {_s(b['cordon_median_seconds'])} -> {_s(r['cordon_median_seconds'])} "
                f"| {_s(b['cordon_max_seconds'])} -> {_s(r['cordon_max_seconds'])} "
                f"| {b['over_30s']} -> {r['over_30s']} | {_s(_stretch(b))} -> {_s(_stretch(r))} "
                f"| {_s(b['tick_median_seconds'])} -> {_s(r['tick_median_seconds'])} "
                f"| {_s(b['tick_max_seconds'])} -> {_s(r['tick_max_seconds'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--ticks", type=int, default=8, help="ticks per size, each with one notice")
    parser.add_argument("--mode", choices=("daemon", "cron"), default="daemon")
    parser.add_argument("--interruption-seconds", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="Markdown here, the JSON beside it")
    parser.add_argument("--before", type=Path, default=None, help="a JSON of an earlier run to compare with")
    parser.add_argument("--single", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.single is not None:
        url, nodes = args.single.rsplit("|", 1)
        print(json.dumps(measure(url, int(nodes), args.ticks, args.seed, args.mode, args.interruption_seconds)))
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="fleetctl-notice-") as tmp:
        for nodes in (int(s) for s in args.sizes.split(",") if s.strip()):
            print(f"size {nodes:,} nodes ...", file=sys.stderr, flush=True)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--single", f"sqlite:///{tmp}/n{nodes}.db|{nodes}",
                   "--ticks", str(args.ticks), "--seed", str(args.seed), "--mode", args.mode,
                   "--interruption-seconds", str(args.interruption_seconds)]
            done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
            if done.returncode:
                return done.returncode
            results.append(json.loads(done.stdout))
    shown = ["python", "benchmarks/notice_latency.py", *(argv if argv is not None else sys.argv[1:])]
    doc = {"mode": args.mode, "command": shlex.join(shown),
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": f"{platform.machine()}, nproc {os.cpu_count()}, Python {platform.python_version()}",
           "commit": _commit(), "results": results}
    if args.before is not None:
        doc["before"] = json.loads(args.before.read_text(encoding="utf-8"))
    text = to_markdown(doc)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
