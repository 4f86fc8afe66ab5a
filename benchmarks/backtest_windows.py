"""The V100 backtest over several held-out job windows and two readings of the market.

One backtest window is one draw: on these traces a single long job that
cannot checkpoint can move a policy's cost by 40 USD depending on whether its
zone happens to hold for 15 hours (`results/backtest_v100_late.md`). This runs
the same 92-job Alibaba slice (`make_backtest_jobs.py`) at several start times
inside the last 30% of the V100 market (the part the interruption model did
not train on), on each given market manifest, through every policy of
`fleetctl backtest`, and reports each run and the totals::

    python -m fleetctl trace import alibaba-2023 \\
        ../shared/data/alibaba-gpu-trace-v2023/openb_pod_list_gpuspec33.csv \\
        --start 2023-02-15T00:00:00Z --checkpointable-fraction 0.5 --deadline-fraction 0.2 -o /tmp/all.csv
    python -m fleetctl forecast train interruption --market examples/markets/aws-v100-availability.yaml \\
        --train-fraction 0.7 -o /tmp/interruption
    python benchmarks/backtest_windows.py /tmp/all.csv --model /tmp/interruption \\
        --market examples/markets/aws-v100-availability.yaml --market examples/markets/aws-v100-pools.yaml \\
        --json benchmarks/results/backtest_v100_windows.json

Runs go two at a time (one process per core); each is deterministic for the
seed, so the JSON is the same on every machine. ``--policies fleetctl`` runs
fleetctl alone (about 2 minutes for the eight runs instead of 6), to compare a
planner change against the totals it reproduces (889.7 and 677.3 USD on 2026-11-28).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.make_backtest_jobs import select  # noqa: E402
from fleetctl.jobspec import parse_utc_timestamp  # noqa: E402
from fleetctl.sim.backtest import planner_for  # noqa: E402

POLICIES = ("fleetctl", "on-demand", "spot-greedy", "skypilot-failover", "fleetctl-no-forecast")
WINDOWS = ("2023-03-20T00:00:00Z", "2023-03-23T00:00:00Z", "2023-03-26T00:00:00Z", "2023-03-29T00:00:00Z")


def _run(task: tuple[str, str, str, str, str, int, tuple[str, ...]]) -> dict:
    jobs_csv, window, market_path, policy_path, model_dir, seed, policies = task
    from fleetctl.policy import load_policy
    from fleetctl.sim.backtest import result_document, run_backtest
    from fleetctl.sim.market import load_market
    from fleetctl.sim.simulator import SimConfig
    from fleetctl.sim.traces import read_job_trace
    from forecasting.interruption import InterruptionModel

    policy = load_policy(policy_path)
    market = load_market(market_path)
    jobs = select(read_job_trace(jobs_csv, policy), to=parse_utc_timestamp(window))
    model = InterruptionModel.load(model_dir)
    started = time.perf_counter()
    bt = run_backtest(jobs, market, policy, policies, SimConfig(seed=seed), forecaster=lambda now: model.risks(market, now))
    doc = result_document(bt)
    doc.update(market=market_path, window_utc=window, jobs=len(jobs), seconds=round(time.perf_counter() - started, 1))
    return doc


def _table(runs: list[dict], policies: tuple[str, ...] = POLICIES) -> str:
    """Cost per run and in total, with the ratio to on-demand (to the lower bound when on-demand was not run)."""
    base = "on-demand" if "on-demand" in policies else None
    lines = ["| market | window | lower bound | " + " | ".join(policies) + " |",
             "|---|---|---|" + "---|" * len(policies)]
    for r in runs:
        od = r["policies"][base]["cost_usd"] if base else r["lower_bound_cost_usd"]
        cheapest = min(r["policies"], key=lambda n: r["policies"][n]["cost_usd"])
        cells = []
        for name in policies:
            m = r["policies"][name]
            cell = f"{m['cost_usd']:.1f} ({m['cost_usd'] / od:.3f})"
            cells.append(f"**{cell}**" if name == cheapest else cell)
        lines.append(f"| {Path(r['market']).stem} | {r['window_utc'][:10]} | {r['lower_bound_cost_usd']:.1f} | "
                     + " | ".join(cells) + " |")
    for market in dict.fromkeys(r["market"] for r in runs):
        mine = [r for r in runs if r["market"] == market]
        total = {n: sum(r["policies"][n]["cost_usd"] for r in mine) for n in policies}
        lb = sum(r["lower_bound_cost_usd"] for r in mine)
        od = total[base] if base else lb
        lines.append(f"| {Path(market).stem} | **total** | {lb:.1f} | "
                     + " | ".join(f"{total[n]:.1f} ({total[n] / od:.3f})" for n in policies) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jobs", help="job trace CSV from `fleetctl trace import alibaba-2023`")
    ap.add_argument("--model", required=True, help="interruption model directory (trained on the first 70%%)")
    ap.add_argument("--market", action="append", required=True, help="market manifest (repeat for several)")
    ap.add_argument("--policy", default="policies/backtest-spot.yaml")
    ap.add_argument("--windows", default=",".join(WINDOWS), help="comma-separated UTC start times of the job windows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--json", help="write every run's backtest JSON here")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help="comma-separated policies to run (default: all five; e.g. `fleetctl` alone to compare a "
                         "planner change quickly; ratios are then to the lower bound)")
    a = ap.parse_args()
    policies = tuple(dict.fromkeys(p.strip() for p in a.policies.split(",") if p.strip()))
    if not policies:
        ap.error("--policies: none given")
    for name in policies:
        try:
            planner_for(name)
        except ValueError as exc:
            ap.error(f"--policies: {exc}")
    tasks = [(a.jobs, w, m, a.policy, a.model, a.seed, policies) for m in a.market for w in a.windows.split(",")]
    with ProcessPoolExecutor(a.workers) as pool:
        runs = []
        for doc in pool.map(_run, tasks):
            runs.append(doc)
            print(f"done: {Path(doc['market']).stem} {doc['window_utc']} ({doc['seconds']} s)", file=sys.stderr)
    if a.json:
        Path(a.json).write_text(json.dumps({"format_version": "1", "seed": a.seed, "policy": a.policy,
                                            "runs": runs}, indent=2) + "\n")
    print(_table(runs, policies))


if __name__ == "__main__":
    main()
