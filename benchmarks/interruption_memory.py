"""Peak memory and time of training the interruption model on many offers (the daemon's retrain).

The daemon records every spot offer its providers list and refits the model on the last 30 days
(``forecasting.runtime.RETRAIN_WINDOW``). This builds such a market from the shipped catalog's spot
offers (the first N by key, each with its on-demand twin) with a synthetic availability trace per
offer (5-minute ticks, as ``market_from_observations`` builds the recorded market; up about 10
hours, then down about 2, seeded), and trains on it as the daemon does, printing one JSON line::

    python benchmarks/interruption_memory.py --offers 400 --days 30

Results and the commands: ``benchmarks/results/interruption_memory.md``. Peak RSS is the process's
(``ru_maxrss``), so run one size per process.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from datetime import datetime, timezone

import numpy as np

from fleetctl import model
from fleetctl.sim.market import Market, MarketTrace
from forecasting.interruption import InterruptionModel
from providers.sim import load_catalog

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def market(offers: int, days: float, seed: int = 0) -> Market:
    catalog = load_catalog()
    twins = {(o.provider, o.region, o.zone, o.instance_type.name): o for o in catalog
             if o.market is model.Market.ON_DEMAND}
    rng = np.random.default_rng(seed)
    ticks = int(days * 288)
    traces = []
    for o in sorted((o for o in catalog if o.market is model.Market.SPOT), key=lambda o: o.key):
        twin = twins.get((o.provider, o.region, o.zone, o.instance_type.name))
        if twin is None:
            continue
        flips = rng.random(ticks)
        up, cap = 1, np.empty(ticks, dtype=np.int64)
        for i in range(ticks):  # two states: leave "up" with 1/120 per tick, "down" with 1/24
            if (up and flips[i] < 1 / 120) or (not up and flips[i] < 1 / 24):
                up = 1 - up
            cap[i] = up
        traces.append(MarketTrace(o, twin, T0, 300.0, tuple(int(c) for c in cap)))
        if len(traces) == offers:
            break
    return Market(tuple(traces), T0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--offers", type=int, default=100_000,
                    help="spot offers (default: every one of the catalog that has an on-demand twin, 1,396)")
    ap.add_argument("--days", type=float, default=30.0, help="days of market (default: the retrain window, 30)")
    args = ap.parse_args()
    m = market(args.offers, args.days)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    trained = InterruptionModel.train([m])
    print(json.dumps({"offers": len(m.traces), "days": args.days, "train_seconds": round(time.perf_counter() - t0, 1),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                      "rss_before_train_mb": round(before),
                      "samples": trained.metadata["samples"],
                      "sampled_share": trained.metadata.get("sampled_share", [1.0])}))


if __name__ == "__main__":
    main()
