"""Buying ahead of the demand forecast (scaling.max_headroom_gpus): bounded, and kept while wanted."""

from __future__ import annotations

from datetime import timedelta

from fleetctl.model import DemandForecast, Forecast, JobState, Market, Reason
from fleetctl.planner import plan
from tests.builders import T0, job, node, offer, policy

ONE = offer("g1", gpus=1, price=1.0, market=Market.SPOT, vcpus=8, memory_gib=64)


def forecast(p90: float, model: str = "A100-80GB", horizon: int = 60) -> Forecast:
    return Forecast(demand=(DemandForecast(model, horizon, p90 * 0.6, p90),))


def run(queue=(), fleet=(), offers=(ONE,), pol=None, fc=None, now=T0):
    return plan(now=now, queue=tuple(queue), fleet=tuple(fleet), offers=tuple(offers), forecast=fc,
                policy=pol or policy())


def test_buys_ahead_of_the_p90_forecast_up_to_the_cap():
    p = run(pol=policy(max_headroom_gpus=3), fc=forecast(5.2))
    (launch,) = p.of_kind("launch")
    assert launch.reason is Reason.FORECAST_HEADROOM and launch.count == 3  # 6 wanted, capped at 3
    assert "3 GPU(s) ahead of the forecast demand" in launch.detail
    # no cap, no forecast, or a forecast already met: nothing bought
    assert run(fc=forecast(5.2)).actions == ()
    assert run(pol=policy(max_headroom_gpus=3)).actions == ()
    busy = [node(f"n{i}", of=ONE) for i in range(6)]
    assert not run(fleet=busy, pol=policy(max_headroom_gpus=3), fc=forecast(5.2)).of_kind("launch")


def test_headroom_counts_what_the_queue_buys_and_respects_the_budget():
    q = [job(f"j{i}", gpus=1) for i in range(2)]
    p = run(queue=q, pol=policy(max_headroom_gpus=8), fc=forecast(3.0))
    assert sum(l.count for l in p.of_kind("launch")) == 3  # 2 for the jobs, 1 ahead
    p = run(pol=policy(max_headroom_gpus=8, max_usd_per_hour=2.0), fc=forecast(6.0))
    assert sum(l.count for l in p.of_kind("launch")) == 2


def test_idle_nodes_are_kept_while_the_forecast_wants_them():
    idle = [node(f"n{i}", of=ONE, ready_at=T0 - timedelta(hours=2)) for i in range(3)]
    pol = policy(max_headroom_gpus=2, idle_timeout_minutes=10)
    p = run(fleet=idle, pol=pol, fc=forecast(2.0))
    (t,) = p.of_kind("terminate")  # 2 kept warm, the third idles out
    assert t.reason is Reason.IDLE
    assert len(run(fleet=idle, pol=pol).of_kind("terminate")) == 3  # no forecast: all idle out


def test_the_cap_holds_across_passes_idle_gpus_held_count_against_it():
    # pass 1 bought 3 ahead (cap 3); they sit idle. Pass 2 must not buy 3 more: idle-ahead stays <= the cap.
    bought = [node(f"h{i}", of=ONE, ready_at=T0 - timedelta(minutes=1)) for i in range(3)]
    busy = [node(f"b{i}", of=ONE, ready_at=T0 - timedelta(hours=1)) for i in range(4)]
    running = [job(f"j{i}", gpus=1, state=JobState.RUNNING, node_ids=(f"b{i}",)) for i in range(4)]
    pol = policy(max_headroom_gpus=3, idle_timeout_minutes=10)
    p = run(queue=running, fleet=busy + bought, pol=pol, fc=forecast(25.0))
    assert not p.of_kind("launch") and not p.of_kind("terminate")
    # one of them taken by a new job: one more idle GPU may be bought, back to the cap
    p = run(queue=[*running, job("new", gpus=1)], fleet=busy + bought, pol=pol, fc=forecast(25.0))
    assert sum(l.count for l in p.of_kind("launch") if l.reason is Reason.FORECAST_HEADROOM) == 1


def test_headroom_keeps_min_distinct_offers():
    # 8 GPUs wanted ahead, two 4-GPU spot offers: the second node sits on the other offer, as it would for jobs.
    a = offer("g4a", gpus=4, price=4.0, zone="z1")
    b = offer("g4b", gpus=4, price=6.0, zone="z2")
    p = run(offers=(a, b), pol=policy(max_headroom_gpus=8), fc=forecast(8.0))
    assert [(l.offer.key, l.count) for l in p.of_kind("launch")] == [(a.key, 2)]  # no rule: the cheapest
    p = run(offers=(a, b), pol=policy(max_headroom_gpus=8, min_distinct_offers=2), fc=forecast(8.0))
    assert sorted((l.offer.key, l.count) for l in p.of_kind("launch")) == [(a.key, 1), (b.key, 1)]


def test_headroom_keeps_the_on_demand_base():
    # The fleet's first 8 GPUs are on demand, whether jobs or the forecast buy them.
    spot = offer("g4s", gpus=4, price=4.0)
    od = offer("g4o", gpus=4, price=9.0, market=Market.ON_DEMAND)
    p = run(offers=(spot, od), pol=policy(max_headroom_gpus=8), fc=forecast(8.0))
    assert [(l.offer.market, l.count) for l in p.of_kind("launch")] == [(Market.SPOT, 2)]  # no base: spot
    p = run(offers=(spot, od), pol=policy(max_headroom_gpus=8, on_demand_base_gpus=8), fc=forecast(8.0))
    assert [(l.offer.market, l.count) for l in p.of_kind("launch")] == [(Market.ON_DEMAND, 2)]
