"""Time the CLI's read commands on a big store: ``jobs list`` and ``status``, as tables and JSON.

The world of ``tick_scaling.py`` (N nodes, about 70 % holding jobs, 2 x N queued jobs of the
Alibaba 2023 mix; ``tick_scaling.seed_world``) is stored in a SQLite file, and each command is
run as a user runs it (``python -m fleetctl ...``, its output into a file, so the table is the
piped one, up to 400 columns wide). Printed per size and command: the median wall-clock seconds
of ``--runs`` runs, and the output's lines and bytes.

``--before DIR`` runs each command from another checkout too (its ``fleetctl`` first on
``PYTHONPATH``; a ``git worktree`` of the commit to compare) and says whether both printed the
same bytes.

Usage::

    python benchmarks/cli_tables.py [--sizes 5000] [--runs 3] [--before DIR] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.tick_scaling import seed_world  # noqa: E402

COMMANDS = (("jobs", "list"), ("status",), ("jobs", "list", "--format", "json"), ("status", "--format", "json"))


def run(checkout: Path, args: tuple[str, ...], url: str, out: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_") and k != "COLUMNS"}
    env["PYTHONPATH"] = str(checkout)
    started = time.perf_counter()
    with out.open("wb") as sink:
        done = subprocess.run([sys.executable, "-m", "fleetctl", *args, "--state", url], cwd=checkout, env=env,
                              stdout=sink, stderr=subprocess.PIPE, timeout=600)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed in {checkout}: {done.stderr.decode()[-2000:]}")
    return seconds


def measure(nodes: int, runs: int, before: Path | None, seed: int) -> list[dict]:
    from fleetctl.store import Store

    rows = []
    with tempfile.TemporaryDirectory(prefix="fleetctl-cli-tables-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'state.db'}"
        store = Store(url)
        try:
            world = seed_world(store, nodes, 2.0, seed)
        finally:
            store.close()
        for args in COMMANDS:
            row = {"nodes": nodes, "jobs": world["queued_jobs"] + world["bound_jobs"], "command": " ".join(args)}
            for name, checkout in (("after", ROOT), ("before", before)):
                if checkout is None:
                    continue
                out = Path(tmp) / f"{name}.out"
                row[f"{name}_seconds"] = round(statistics.median(run(checkout, args, url, out) for _ in range(runs)), 2)
                text = out.read_bytes()
                row[f"{name}_output"] = text
            row["lines"] = row["after_output"].count(b"\n")
            row["bytes"] = len(row["after_output"])
            if before is not None:
                row["same_output"] = row.pop("before_output") == row["after_output"]
            row.pop("after_output")
            rows.append(row)
            print(row, file=sys.stderr)
    return rows


def header(title: str, command: str) -> list[str]:
    """A results page's title, its command, and the date, machine and commit it was measured on."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return [f"# {title}", "", f"Command: `{command}`  ",
            f"Date: {time.strftime('%Y-%m-%d')}; machine: {platform.machine()}, nproc {os.cpu_count()}, "
            f"Python {platform.python_version()}; commit {commit}", ""]


def emit(text: str, out: Path | None) -> int:
    """``text`` into ``out``, or on stdout without it; the script's exit status."""
    if out:
        out.write_text(text)
    else:
        print(text, end="")
    return 0


def to_markdown(rows: list[dict], command: str, before: Path | None) -> str:
    lines = header(f"CLI read commands on a big store (`{Path(__file__).name}`)", command)
    head = "| nodes | jobs | command | " + ("before s | after s | same output |" if before else "s |") + " lines | bytes |"
    lines += [head, "|" + " ---: | ---: | --- |" + (" ---: | ---: | --- |" if before else " ---: |") + " ---: | ---: |"]
    for r in rows:
        times = (f"{r['before_seconds']:.2f} | {r['after_seconds']:.2f} | {'yes' if r['same_output'] else 'NO'} |"
                 if before else f"{r['after_seconds']:.2f} |")
        lines.append(f"| {r['nodes']:,} | {r['jobs']:,} | `{r['command']}` | {times} {r['lines']:,} | {r['bytes']:,} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5000", help="node counts, comma-separated")
    parser.add_argument("--runs", type=int, default=3, help="runs of each command; the median is shown")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before", type=Path, default=None, help="another checkout to run the same commands from")
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown here (else stdout)")
    args = parser.parse_args(argv)
    rows = [r for n in (int(s) for s in args.sizes.split(",") if s.strip())
            for r in measure(n, args.runs, args.before, args.seed)]
    command = "python benchmarks/cli_tables.py " + " ".join(argv if argv is not None else sys.argv[1:])
    return emit(to_markdown(rows, command, args.before), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
