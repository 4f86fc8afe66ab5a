"""How long `fleetctl events` takes to read a large audit log.

Builds `tick_scaling.seed_history`'s store (90 days at N nodes: the events a
daemon writes, with the product's kinds, subjects and payloads), then times
``Store.audit_log`` with the arguments `fleetctl events` passes for a few
typical questions (the newest entries of the last day; one job's history; one
node's; a kind over 90 days), each the best of --repeat runs.

    python benchmarks/events_query.py --nodes 2000 --days 90 --out benchmarks/results/events_query.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from benchmarks.tick_scaling import NOW, _commit, postgres_server, seed_history  # noqa: E402
from fleetctl.audit import EVENT_KINDS, HISTORY_KINDS  # noqa: E402
from fleetctl.store import Store, tables  # noqa: E402

DEFAULT_KINDS = [k for k in EVENT_KINDS if k not in HISTORY_KINDS]  # as `fleetctl events` without --kind


def _subjects(store: Store) -> tuple[str, str]:
    """A job and a node of the seeded history, from its newest bind (the node through its launch)."""
    e = tables.events
    with store._tx() as conn:  # noqa: SLF001 - a benchmark picks its ids from the table itself
        bind = conn.execute(sa.select(e).where(e.c.kind == "bind").order_by(e.c.seq.desc()).limit(1)).one()
    return bind.subject, json.loads(bind.payload)["nodes"][0]


def run(url: str, nodes: int, days: float, repeat: int) -> dict:
    store = Store(url)
    try:
        started = time.perf_counter()
        rows = seed_history(store, nodes, days, seed=0, tick_seconds=30.0)
        seeded = time.perf_counter() - started
        job, node = _subjects(store)
        cases = {
            "newest 500 of the last 24 h (the default)": dict(kinds=DEFAULT_KINDS, since=NOW - timedelta(days=1)),
            f"one job's history, last 24 h (--for {job})": dict(kinds=DEFAULT_KINDS, since=NOW - timedelta(days=1),
                                                                about=job),
            f"one job's history, {days:g} days": dict(kinds=DEFAULT_KINDS, since=NOW - timedelta(days=days), about=job),
            f"one node's history, {days:g} days (--for {node})": dict(kinds=DEFAULT_KINDS,
                                                                     since=NOW - timedelta(days=days), about=node),
            f"terminations, {days:g} days (--kind terminate)": dict(kinds=["terminate"],
                                                                   since=NOW - timedelta(days=days)),
        }
        results = []
        for name, args in cases.items():
            best = float("inf")
            for _ in range(repeat):
                t = time.perf_counter()
                entries, more = store.audit_log(until=NOW + timedelta(seconds=1), limit=500, **args)
                best = min(best, time.perf_counter() - t)
            results.append({"question": name, "seconds": round(best, 4), "entries": len(entries), "more": more})
        events = rows.get("events")
    finally:
        store.close()
    return {"seeded_rows": rows, "seed_seconds": round(seeded, 1), "events": events, "queries": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--days", type=float, default=90.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--store", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    doc = {"command": "python benchmarks/events_query.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": _commit(),
           "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores, "
                      f"Python {platform.python_version()}", "nodes": args.nodes, "days": args.days, "stores": {}}
    if args.store in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            doc["stores"]["sqlite"] = run(f"sqlite:///{tmp}/state.db", args.nodes, args.days, args.repeat)
    if args.store in ("postgres", "both"):
        with postgres_server() as database:
            doc["stores"]["postgresql"] = run(database("events"), args.nodes, args.days, args.repeat)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
