"""Time one plan that preempts at scale: the fleet and queue of ``tick_scaling.py``
(N nodes, about 70 % of them busy; 2 x N queued jobs of the Alibaba 2023 mix)
planned under ``policies/example.yaml``, whose production jobs may preempt
batch work. ``plan_speed.py`` and ``tick_scaling.py`` plan under their own
benchmark policy, where little is preempted; under the example policy about
half the queue asks every busy node for room, which is what this measures.

The world is stored in a SQLite file as ``tick_scaling.seed_world`` stores it,
observed as ``fleetctl plan`` observes it (the sandbox provider), and planned
at the world's own time (``plan_speed.NOW``) with ``fleetctl.planner.plan``.
Printed per size: seconds, actions by kind, jobs left queued, and a digest of
the actions and the unplaced jobs, so that two versions of the planner can be
compared for the same choices (``PYTHONPATH=OTHER_CHECKOUT``).

Usage::

    python benchmarks/plan_preemption.py [--sizes 1000,5000] [--seed 0] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.plan_speed import NOW  # noqa: E402
from benchmarks.tick_scaling import seed_world  # noqa: E402


def measure(nodes: int, seed: int) -> dict:
    import fleetctl.planner.core
    from fleetctl.controller import observe
    from fleetctl.planner import plan as make_plan
    from fleetctl.policy import load_policy
    from fleetctl.store import Store
    from providers.sim import SimProvider

    policy = load_policy(ROOT / "policies" / "example.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{tmp}/state.db")
        try:
            world = seed_world(store, nodes, 2.0, seed)
            obs = observe(store, SimProvider(store), NOW)
            started = time.perf_counter()
            result = make_plan(now=NOW, queue=obs.jobs, fleet=obs.nodes, offers=obs.offers, forecast=None,
                               policy=policy, last_termination_utc=None)
            seconds = time.perf_counter() - started
        finally:
            store.close()
    digest = hashlib.sha256((repr(result.actions) + repr(result.unplaced)).encode()).hexdigest()
    return {"nodes": nodes, "world": world, "plan_seconds": round(seconds, 2),
            "actions": dict(sorted(Counter(type(a).__name__.lower() for a in result.actions).items())),
            "unplaced": len(result.unplaced), "digest": digest,
            "planner": str(Path(fleetctl.planner.core.__file__).resolve().parents[2])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,5000", help="node counts, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here (else stdout)")
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        print(f"size {size:,} nodes ...", file=sys.stderr, flush=True)
        results.append(measure(size, args.seed))
        print(f"  plan {results[-1]['plan_seconds']} s", file=sys.stderr, flush=True)
    doc = {"command": "python benchmarks/plan_preemption.py " + " ".join(argv or sys.argv[1:]),
           "machine": f"{platform.machine()}, Python {platform.python_version()}", "commit": commit,
           "results": results}
    text = json.dumps(doc, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
