"""A small synthetic market and job set for the simulator and backtest tests."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from fleetctl.model import Market as OfferMarket
from fleetctl.sim.market import Market, MarketTrace
from tests.builders import T0, job, offer, policy

GAP = 600.0  # seconds per market tick


def market(capacities: dict[str, tuple[int, ...]] | None = None) -> Market:
    """Three 1-GPU zones; by default zone z1 loses its capacity after 1 h, z2 after 2 h."""
    caps = capacities or {"z1": (2,) * 6 + (0,) * 30, "z2": (2,) * 12 + (0,) * 6 + (2,) * 18, "z3": (1,) * 36}
    traces = []
    for i, (zone, cap) in enumerate(sorted(caps.items())):
        spot = offer("g1", gpus=1, price=1.0 + 0.1 * i, zone=zone, model="V100-16GB", gpu_memory_gib=16.0)
        traces.append(MarketTrace(spot, replace(spot, market=OfferMarket.ON_DEMAND, usd_per_hour=3.0), T0, GAP, cap))
    return Market(tuple(traces), T0)


def jobs(n: int = 8):
    out = []
    for i in range(n):
        j = job(f"j{i}", gpus=1, duration_hours=0.5 + (i % 4) * 0.75, submitted=T0 + timedelta(minutes=7 * i),
                vcpus=4, memory_gib=16)
        out.append(replace(j, checkpointable=i % 2 == 0, checkpoint_interval_minutes=20.0 if i % 2 == 0 else None,
                           deadline_utc=j.submitted_at_utc + timedelta(hours=8) if i % 3 == 0 else None))
    return out


def sim_policy(**kw):
    return policy(max_usd_per_hour=30.0, **kw)
