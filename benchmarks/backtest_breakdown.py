"""Where one policy's backtest cost goes: held node-hours by market and by what the node did.

`fleetctl backtest` says what each policy cost; this says where that went, for
one policy and seed, from the simulator's ``on_event`` hook (the same state the
simulator bills: the nodes held after each step, at the price of the moment,
until the next step)::

    python -m fleetctl forecast train interruption --market examples/markets/aws-v100-availability.yaml \\
        --train-fraction 0.7 -o /tmp/interruption
    python benchmarks/backtest_breakdown.py --jobs examples/backtest-jobs-v100-late.csv \\
        --market examples/markets/aws-v100-availability.yaml --policy policies/backtest-spot.yaml \\
        --model /tmp/interruption [--name fleetctl] [--seed 0] [--json OUT]

A held node is, over each interval between two steps:

* ``running``: some job on it runs (its GPUs beyond the jobs' are ``spare`` in
  the GPU-hour columns, not in dollars);
* ``starting``: jobs are bound to it but none runs yet (a launch not ready, a
  gang waiting for its last node);
* ``idle``: nothing on it (waiting for the idle timeout, or drained);
* ``launching``: bought, not ready, nothing bound.

Per job it lists the GPU-hours run on on-demand and on spot and the GPU-hours
lost to reclaims and preemptions (the audit log's ``requeue`` and ``preempt``
entries), the ten dearest first. The total equals the backtest's ``cost_usd``
for the same inputs and seed (checked at the end).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleetctl.model import JobState, NodeState  # noqa: E402

_HELD = (NodeState.LAUNCHING, NodeState.READY, NodeState.DRAINING)


class Ledger:
    """The ``on_event`` hook: bills the state seen at each step until the next."""

    def __init__(self) -> None:
        self.last: datetime | None = None
        self.held: list[tuple[float, str, str, int, int]] = []  # (USD/h, market, activity, GPUs, busy GPUs)
        self.running: list[tuple[str, str, int]] = []  # (job, market, GPUs) of running jobs
        self.usd: dict[tuple[str, str], float] = defaultdict(float)
        self.gpu_hours: dict[tuple[str, str], float] = defaultdict(float)
        self.job_hours: dict[tuple[str, str], float] = defaultdict(float)  # (job, market) -> GPU-hours run
        self.lost: dict[str, float] = defaultdict(float)  # job -> GPU-hours lost (requeue and preempt entries)
        self._seen = 0  # the audit log's last sequence number read

    def __call__(self, now: datetime, world) -> None:  # noqa: ANN001 - fleetctl.sim.simulator.World
        if self.last is not None:
            hours = (now - self.last).total_seconds() / 3600
            for usd, market, activity, gpus, busy in self.held:
                self.usd[market, activity] += usd * hours
                self.gpu_hours[market, activity] += busy * hours
                if gpus > busy:
                    self.gpu_hours[market, "spare" if activity == "running" else activity] += (gpus - busy) * hours
            for job_id, market, gpus in self.running:
                self.job_hours[job_id, market] += gpus * hours
        entries = world.store.events_between(self.last or now, now + timedelta(microseconds=1), ("requeue", "preempt"))
        for e in entries:
            if e["seq"] > self._seen:
                self.lost[e["subject"]] += float(e["payload"].get("lost_gpu_hours") or 0.0)
        self._seen = max([self._seen, *(e["seq"] for e in entries)])
        self.last = now
        nodes = {n.node_id: n for n in world.provider.nodes(now) if n.state in _HELD}
        active = world.store.jobs(active_only=True)
        on: dict[str, list] = defaultdict(list)
        for j in active:
            for nid in set(j.node_ids):
                on[nid].append(j)
        self.held = []
        for nid, n in nodes.items():
            jobs = on.get(nid, [])
            runs = [j for j in jobs if j.state is JobState.RUNNING]
            activity = ("running" if runs else "starting" if jobs else
                        "launching" if n.state is NodeState.LAUNCHING else "idle")
            busy = sum(j.gpus_per_worker * j.node_ids.count(nid) for j in runs)
            self.held.append((world.provider.usd_per_hour_at(n, now), n.offer.market.value, activity,
                              n.offer.instance_type.gpu_count, busy))
        self.running = []
        for j in active:
            if j.state is JobState.RUNNING and j.node_ids and all(nid in nodes for nid in j.node_ids):
                self.running.append((j.job_id, nodes[j.node_ids[0]].offer.market.value, j.gpus))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", required=True, help="job trace CSV")
    ap.add_argument("--market", required=True, help="market manifest")
    ap.add_argument("--policy", default="policies/backtest-spot.yaml")
    ap.add_argument("--model", help="interruption model directory (the fleetctl policy's forecast)")
    ap.add_argument("--name", default="fleetctl", help="the policy to break down (a name of `fleetctl backtest`)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the breakdown as JSON here too")
    a = ap.parse_args()

    from fleetctl.policy import load_policy
    from fleetctl.sim.backtest import planner_for
    from fleetctl.sim.market import load_market
    from fleetctl.sim.simulator import SimConfig, simulate
    from fleetctl.sim.traces import read_job_trace

    policy = load_policy(a.policy)
    market = load_market(a.market)
    jobs = read_job_trace(a.jobs, policy)
    forecaster = None
    if a.model and a.name == "fleetctl":
        from forecasting.interruption import InterruptionModel

        model = InterruptionModel.load(a.model)
        forecaster = lambda now: model.risks(market, now)  # noqa: E731
    ledger = Ledger()
    result = simulate(jobs, market, policy, planner=planner_for(a.name), config=SimConfig(seed=a.seed),
                      forecaster=forecaster, on_event=ledger)
    lost = ledger.lost
    total = sum(ledger.usd.values())
    if abs(total - result.cost_usd) > 0.01:
        raise SystemExit(f"the breakdown's total {total:.2f} USD is not the simulator's {result.cost_usd:.2f}")
    print(f"# {a.name}, seed {a.seed}: {result.cost_usd:.2f} USD\n")
    print("| market | node | USD | GPU-hours |\n|---|---|---|---|")
    for key in sorted(set(ledger.usd) | set(ledger.gpu_hours)):
        print(f"| {key[0]} | {key[1]} | {ledger.usd.get(key, 0.0):.2f} | {ledger.gpu_hours.get(key, 0.0):.1f} |")
    per_job = sorted({j for j, _ in ledger.job_hours} | set(lost))
    rows = [(j, ledger.job_hours.get((j, "on_demand"), 0.0), ledger.job_hours.get((j, "spot"), 0.0),
             lost.get(j, 0.0)) for j in per_job]
    rows.sort(key=lambda r: (-(r[1] * 3.06 + r[2] * 0.918), r[0]))
    print("\n| job | on-demand GPU-h | spot GPU-h | lost GPU-h |\n|---|---|---|---|")
    for j, od, spot, gone in rows[:10]:
        print(f"| {j} | {od:.2f} | {spot:.2f} | {gone:.2f} |")
    print(f"| all {len(rows)} jobs | {sum(r[1] for r in rows):.2f} | {sum(r[2] for r in rows):.2f} | "
          f"{sum(r[3] for r in rows):.2f} |")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "policy": a.name, "seed": a.seed, "cost_usd": round(result.cost_usd, 6),
            "by_market_and_activity": [{"market": m, "node": act, "usd": round(ledger.usd.get((m, act), 0.0), 6),
                                        "gpu_hours": round(ledger.gpu_hours.get((m, act), 0.0), 6)}
                                       for m, act in sorted(set(ledger.usd) | set(ledger.gpu_hours))],
            "jobs": [{"job_id": j, "on_demand_gpu_hours": round(od, 6), "spot_gpu_hours": round(spot, 6),
                      "lost_gpu_hours": round(gone, 6)} for j, od, spot, gone in rows],
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
