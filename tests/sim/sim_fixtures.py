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


def random_case(seed: int) -> dict:
    """A seeded random small run for :func:`fleetctl.sim.simulator.simulate`: 1-3 instance types of 1-8
    V100 GPUs in 1-3 zones each, whose spot capacity (0-3 nodes) changes at random every 5-20 minutes over
    3-12 hours; 3-12 jobs (gangs of up to 3 workers, batch or production, half checkpointable, some with
    deadlines) arriving over 4 hours; a policy with random knobs (spot share and base, diversification,
    idle timeout, cooldowns, interruption limits, waits for spot, the move back to spot, restart overhead,
    disruption budget) and a budget cap that is sometimes too low for some jobs; a random tick, launch
    delay and restart overhead. The keys are simulate()'s arguments (``planner`` aside).
    ``benchmarks/sim_fuzz.py`` runs many; ``tests/sim/test_simulator.py`` a few."""
    import random

    from fleetctl.sim.simulator import SimConfig

    rng = random.Random(seed)
    gap = rng.choice([300.0, 600.0, 1200.0])
    traces = []
    shapes = rng.sample([(1, "g1"), (2, "g2"), (4, "g4"), (8, "g8")], rng.randint(1, 3))
    for gpus, name in shapes:
        for zi in range(rng.randint(1, 3)):
            cap, c = [], rng.randint(0, 3)
            for _ in range(36):
                if rng.random() < 0.15:
                    c = rng.randint(0, 3)
                cap.append(c)
            spot = offer(name, gpus=gpus, price=round(gpus * rng.uniform(0.8, 1.3), 2), zone=f"z{zi}",
                         model="V100-16GB", gpu_memory_gib=16.0)
            traces.append(MarketTrace(spot, replace(spot, market=OfferMarket.ON_DEMAND, usd_per_hour=3.0 * gpus),
                                      T0, gap, tuple(cap)))
    most = max(g for g, _ in shapes)
    out = []
    for i in range(rng.randint(3, 12)):
        gpus = rng.choice([g for g in (1, 2, 4, 8) if g <= most])
        j = job(f"j{i}", workers=rng.choice([1, 1, 1, 2, 3]), gpus=gpus, duration_hours=round(rng.uniform(0.05, 3.0), 3), submitted=T0 + timedelta(minutes=rng.randint(0, 240)),
                vcpus=2, memory_gib=8, priority=rng.choice(["batch", "batch", "production"]), team=rng.choice("ab"))
        checkpointable = rng.random() < 0.5
        deadline = j.submitted_at_utc + timedelta(hours=rng.uniform(0.1, 8)) if rng.random() < 0.3 else None
        out.append(replace(j, checkpointable=checkpointable, deadline_utc=deadline,
                           checkpoint_interval_minutes=rng.choice([10.0, 30.0]) if checkpointable else None))
    knobs: dict = dict(max_usd_per_hour=rng.choice([1000.0, 1000.0, 40.0, 15.0]))
    if rng.random() < 0.8:
        knobs.update(
            max_spot_share=rng.choice([1.0, 0.7, 0.5]), on_demand_base_gpus=rng.choice([0, 0, 2]),
            max_share_per_zone=rng.choice([1.0, 0.6]), min_distinct_offers=rng.choice([1, 1, 2]),
            idle_timeout_minutes=rng.choice([0.0, 3.0, 10.0]), scale_down_cooldown_minutes=rng.choice([0.0, 5.0]),
            max_interruptions_before_on_demand=rng.choice([0, 1, 2, 5]),
            count_interruptions=rng.choice(["all", "work_lost"]),
            max_wait_for_spot_minutes=rng.choice([0.0, 0.0, 20.0, 40.0]),
            replace_on_demand_with_spot=rng.random() < 0.5, aging_priority_per_hour=rng.choice([0.0, 10.0]),
            restart_overhead_minutes=rng.choice([0.0, 5.0]), disruption_budget_nodes=rng.choice([0, 1, 2]),
            consolidation_max_gpu_utilisation=rng.choice([0.5, 0.9]),
            scale_up_cooldown_seconds=rng.choice([0.0, 0.0, 120.0]))
    config = SimConfig(seed=rng.randint(0, 5), tick_seconds=rng.choice([60.0, 300.0]),
                       restart_overhead_seconds=rng.choice([0.0, 0.0, 300.0]),
                       launch_delay_seconds=rng.choice([0.0, 60.0, 600.0]))
    return dict(jobs=out, market=Market(tuple(traces), T0), policy=policy(**knobs), config=config,
                until_utc=T0 + timedelta(days=2))
