"""Time `fleetctl jobs submit` of one YAML file of many jobs, into a new store and again (a resubmit).

The file holds N one-GPU jobs of two teams (``examples/jobs.yaml``'s fields), submitted as a user
does (``python -m fleetctl jobs submit FILE`` under ``policies/example.yaml``, which warns of jobs
no offer of the shipped catalog can hold). Printed: the median seconds of ``--runs`` runs of each,
and with ``--before DIR`` the same from another checkout (its ``fleetctl`` first on ``PYTHONPATH``).

Usage::

    python benchmarks/jobs_submit.py [--jobs 10000] [--runs 1] [--before DIR] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cli_tables import emit, header  # noqa: E402


def write_jobs(path: Path, count: int) -> None:
    lines = ["jobs:"]
    for i in range(count):
        lines += [f"  - id: j-{i:06d}", f"    team: {('ml-research', 'ml-product')[i % 2]}", "    priority: batch",
                  "    gpus_per_worker: 1", "    vcpus_per_worker: 4", "    memory_gib_per_worker: 16",
                  f"    duration_hours: {1 + i % 8}"]
    path.write_text("\n".join(lines) + "\n")


def timed(checkout: Path, cwd: Path, jobs_file: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    env["PYTHONPATH"] = str(checkout)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fleetctl", "jobs", "submit", str(jobs_file)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"jobs submit failed from {checkout}: {done.stderr[-2000:]}")
    return seconds


def measure(count: int, runs: int, checkout: Path) -> dict[str, float]:
    first, again = [], []
    with tempfile.TemporaryDirectory(prefix="fleetctl-submit-") as tmp:
        jobs_file = Path(tmp) / "jobs.yaml"
        write_jobs(jobs_file, count)
        for run in range(runs):
            cwd = Path(tmp) / f"run-{run}"
            shutil.copytree(ROOT / "policies", cwd / "policies")
            first.append(timed(checkout, cwd, jobs_file))
            again.append(timed(checkout, cwd, jobs_file))
    return {"new_store_seconds": round(statistics.median(first), 2),
            "resubmit_seconds": round(statistics.median(again), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--before", type=Path, default=None, help="another checkout to time too")
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown here (else stdout)")
    args = parser.parse_args(argv)
    after = measure(args.jobs, args.runs, ROOT)
    before = measure(args.jobs, args.runs, args.before) if args.before else None
    command = "python benchmarks/jobs_submit.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [*header("`fleetctl jobs submit` of one file of many jobs (`jobs_submit.py`)", command),
             "| jobs | case | " + ("before s | after s |" if before else "s |"),
             "| ---: | --- |" + (" ---: | ---: |" if before else " ---: |")]
    for key, case in (("new_store_seconds", "into a new store"), ("resubmit_seconds", "again (all unchanged)")):
        lines.append(f"| {args.jobs:,} | {case} | " + (f"{before[key]:.2f} | {after[key]:.2f} |" if before
                                                       else f"{after[key]:.2f} |"))
    return emit("\n".join(lines) + "\n", args.out)

if __name__ == "__main__":
    raise SystemExit(main())
