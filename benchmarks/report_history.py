"""Time `fleetctl report` on a 90-day store of a 2,000-node fleet (SQLite).

The store is the one ``benchmarks/results/prune_history.md`` prunes:
``tick_scaling.seed_history`` (90 days of finished jobs with their bind,
start and complete entries, gone nodes with their launch and terminate or
reclaim entries, the per-pass rows) and ``tick_scaling.seed_world`` (2,000
live nodes and their jobs), all before the benchmark's clock
(``plan_speed.NOW``, 2026-11-02T09:00:00Z). The report's window is the 30
days before that clock (what ``--since 30d`` is when run at that time): the
command is run with the same window given as ISO times.

Measured: the real entry point in a subprocess (``python -m fleetctl report
... --format json``, wall-clock, ``--repeat`` runs, the first on a cold page
cache of this process only), and in-process the store reads and the pure
computation apart (``fleetctl.cli.report.read_report`` split as it reads),
with the rows each read returns.

Usage::

    python benchmarks/report_history.py [--days 90] [--nodes 2000] [--window-days 30] [--repeat 3]
        [--keep PATH] [--prune-finished-days F] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.plan_speed import NOW  # noqa: E402
from benchmarks.tick_scaling import seed_history, seed_world  # noqa: E402
from fleetctl.codec import dt_to_str  # noqa: E402
from fleetctl.cli.report import read_inputs  # noqa: E402
from fleetctl.report import GroupKey, build_report  # noqa: E402
from fleetctl.store import Store  # noqa: E402


def build(path: Path, nodes: int, days: float, seed: int, prune_finished_days: float) -> dict[str, int]:
    store = Store(f"sqlite:///{path}")
    try:
        written = seed_history(store, nodes, days, seed, 30.0, end=NOW)
        written.update(seed_world(store, nodes, 2.0, seed))
        if prune_finished_days:
            store.prune_finished(NOW - timedelta(days=prune_finished_days))
    finally:
        store.close()
    return written


def in_process(url: str, since, until) -> dict[str, float | int]:  # noqa: ANN001
    """The CLI's reads (``read_inputs``, as ``read_report`` calls it), timed step by step, then the pure
    computation."""
    store = Store(url, read_only=True)
    timings: dict[str, float] = {}
    try:
        inputs = read_inputs(store, since, until, timings)
        t = time.perf_counter()
        report = build_report(since=since, until=until, by=(GroupKey.team,), nodes=inputs.records,
                              events=inputs.events, jobs=inputs.jobs, notices=inputs.notices,
                              covered_from=inputs.covered_from, open_runs_kept=inputs.open_runs_kept)
        compute_s = time.perf_counter() - t
    finally:
        store.close()
    return {"nodes_read": len(inputs.records), "nodes_s": timings["nodes"],
            "events_from_days_before_since": round((since - inputs.reach).total_seconds() / 86400, 2),
            "events_read": len(inputs.events), "events_s": timings["events"],
            "jobs_read": len(inputs.jobs), "jobs_s": timings["jobs"],
            "notices_and_coverage_s": timings["notices_and_coverage"], "compute_s": compute_s,
            "rows": len(report.rows), "total_usd": round(report.total.usd, 2),
            "sum_of_rows_usd": round(sum(r.usd for r in report.rows), 2), "notes": list(report.notes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--days", type=float, default=90.0)
    parser.add_argument("--window-days", type=float, default=30.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prune-finished-days", type=float, default=0.0,
                        help="prune the finished history older than this first (0: keep it all)")
    parser.add_argument("--keep", type=Path, default=None, help="build the store here (reused when it exists)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "state.db"
        result: dict = {"nodes": args.nodes, "history_days": args.days, "window_days": args.window_days,
                        "prune_finished_days": args.prune_finished_days, "python": platform.python_version(),
                        "machine": f"{platform.machine()}, {os.cpu_count()} cores"}
        if not path.exists():
            t = time.perf_counter()
            result["written"] = build(path, args.nodes, args.days, args.seed, args.prune_finished_days)
            result["build_s"] = round(time.perf_counter() - t, 1)
        result["store_mb"] = round(path.stat().st_size / 1e6, 1)
        since, until = NOW - timedelta(days=args.window_days), NOW
        command = [sys.executable, "-m", "fleetctl", "report", "--state", f"sqlite:///{path}",
                   "--since", dt_to_str(since), "--until", dt_to_str(until), "--format", "json"]
        result["command"] = " ".join(["fleetctl", *command[3:]])
        runs = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            runs.append(round(time.perf_counter() - t, 2))
            if done.returncode:
                raise SystemExit(done.stderr)
        result["cli_seconds"] = runs
        doc = json.loads(done.stdout)
        result["cli_total_usd"] = doc["total"]["usd"]
        result["in_process"] = in_process(f"sqlite:///{path}", since, until)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "fleetctl", "--version"], capture_output=True, cwd=ROOT)
        result["python_start_and_import_s"] = round(time.perf_counter() - t, 2)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
