"""How plan time grows with the queue: plan_speed's case at several sizes.

Runs ``benchmarks/plan_speed.py --format json`` once per size, each in its own
subprocess (so the peak RSS is per size), at jobs = 1,000 / 3,000 / 10,000 /
30,000 / 100,000 with nodes = jobs / 2 and 1,000 offers, shows a progress bar,
and writes ``benchmarks/results/plan_scaling.md``: the exact command, date and
machine at the top, then one table row per size. A size that runs past
``--timeout`` seconds is recorded as such and the larger sizes are skipped.

Usage::

    python benchmarks/plan_scaling.py [--sizes 1000,3000,10000,30000,100000]
        [--offers 1000] [--seed 0] [--repeat 1] [--timeout 1800] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Final

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

HERE: Final[Path] = Path(__file__).resolve().parent
ROOT: Final[Path] = HERE.parent
SPEED: Final[Path] = HERE / "plan_speed.py"
DEFAULT_SIZES: Final[tuple[int, ...]] = (1_000, 3_000, 10_000, 30_000, 100_000)
DEFAULT_OUT: Final[Path] = HERE / "results" / "plan_scaling.md"


@dataclass(frozen=True)
class Row:
    """One size: the JSON of plan_speed, or why there is none."""

    jobs: int
    nodes: int
    offers: int
    result: dict[str, object] | None
    note: str = ""

    def cells(self) -> list[str]:
        if self.result is None:
            return [f"{self.jobs:,}", f"{self.nodes:,}", f"{self.offers:,}", self.note, "", "", ""]
        r = self.result
        seconds = float(r["seconds"])  # type: ignore[arg-type]
        pps = r["placements_per_second"]
        return [
            f"{int(r['jobs']):,}",  # type: ignore[call-overload]
            f"{int(r['nodes']):,}",  # type: ignore[call-overload]
            f"{int(r['offers']):,}",  # type: ignore[call-overload]
            f"{seconds:.3f}",
            f"{float(pps):,.0f}" if pps is not None else "n/a",  # type: ignore[arg-type]
            f"{float(r['peak_rss_mib']):,.1f}",  # type: ignore[arg-type]
            f"{seconds / (self.jobs / 1000):.4f}",
        ]


def machine() -> dict[str, str]:
    """nproc, CPU model and Python version of this machine."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0
    return {"nproc": str(nproc), "cpu": cpu, "python": platform.python_version()}


def planner_version() -> str:
    """The commit of the work tree and whether the planner has local changes (read-only git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "fleetctl/planner"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return f"{head}{' + uncommitted changes in fleetctl/planner/' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_size(jobs: int, offers: int, seed: int, repeat: int, timeout: float) -> Row:
    """plan_speed at one size, in a fresh interpreter."""
    nodes = jobs // 2
    cmd = [sys.executable, str(SPEED), "--jobs", str(jobs), "--nodes", str(nodes), "--offers", str(offers),
           "--seed", str(seed), "--repeat", str(repeat), "--format", "json"]
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Row(jobs, nodes, offers, None, f"timed out (> {timeout:g} s)")
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return Row(jobs, nodes, offers, None, f"failed: {tail}")
    return Row(jobs, nodes, offers, json.loads(done.stdout.strip().splitlines()[-1]))


def render(rows: list[Row], command: str, started: datetime, wall_seconds: float) -> str:
    """The Markdown report."""
    m = machine()
    header = ["jobs", "nodes", "offers", "seconds", "placements/s", "peak RSS MiB", "seconds per 1k jobs"]
    lines = [
        "# Planner scaling",
        "",
        f"- command: `{command}`",
        f"- date: {started.strftime('%Y-%m-%d %H:%M UTC')} (all sizes took {wall_seconds:.0f} s)",
        f"- machine: {m['nproc']} CPUs (nproc), {m['cpu']}, Python {m['python']}",
        f"- planner: commit {planner_version()}",
        "",
        "Each row is one `benchmarks/plan_speed.py --format json` run in its own process "
        "(nodes = jobs / 2; seconds: the best of `--repeat` calls of `plan(...)`, "
        "building the case not included; placements = Bind actions; peak RSS of that process, "
        "case building included).",
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---:" for _ in header) + " |",
    ]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="queued-job counts, comma-separated")
    parser.add_argument("--offers", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per size before giving up on it")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    command = shlex.join(["python", "benchmarks/plan_scaling.py", *argv])
    started = datetime.now(timezone.utc)
    t0 = time.monotonic()
    rows: list[Row] = []
    console = Console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("planning", total=len(sizes))
        for jobs in sizes:
            if rows and rows[-1].result is None:
                rows.append(Row(jobs, jobs // 2, args.offers, None, "skipped (a smaller size did not finish)"))
                progress.advance(task)
                continue
            progress.update(task, description=f"{jobs:,} jobs / {jobs // 2:,} nodes")
            row = run_size(jobs, args.offers, args.seed, args.repeat, args.timeout)
            rows.append(row)
            progress.advance(task)
            cells = row.cells()
            progress.console.print(f"{cells[0]} jobs: " + (f"{cells[3]} s, {cells[4]} placements/s, {cells[5]} MiB"
                                                            if row.result else row.note))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(rows, command, started, time.monotonic() - t0), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0 if all(r.result is not None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
