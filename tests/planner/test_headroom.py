"""Buying ahead of the demand forecast (scaling.max_headroom_gpus): bounded, and kept while wanted."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import DemandForecast, Forecast, JobState, Market, NodeState, OfferRisk, Reason
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
    assert launch.detail == "1.0000 $/h each, 3 GPU(s) ahead of the forecast demand"
    (launch,) = run(pol=policy(max_headroom_gpus=1), fc=forecast(5.2)).of_kind("launch")  # the smallest cap
    assert launch.reason is Reason.FORECAST_HEADROOM and launch.count == 1
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
    # a p90 of 5 still keeps only the cap's 2 (and buys nothing: 3 idle GPUs are already past the cap)
    p = run(fleet=idle, pol=pol, fc=forecast(5.0))
    assert [t.node_id for t in p.of_kind("terminate")] == ["n2"] and not p.of_kind("launch")
    # the smallest cap keeps one
    p = run(fleet=idle, pol=replace(pol, max_headroom_gpus=1), fc=forecast(1.0))
    assert [t.node_id for t in p.of_kind("terminate")] == ["n1", "n2"]


def test_idle_nodes_kept_are_the_p90_less_the_busy_gpus():
    # one busy GPU and three idle ones, a cap of 4: a p90 of 3 keeps 3 - 1 = 2 idle GPUs (n0, n1), n2 idles out;
    # so does a p90 of 3.0000000000000004 (a float rounding, not a third GPU wanted)
    busy = node("b", of=ONE)
    running = job("r", gpus=1, state=JobState.RUNNING, node_ids=("b",))
    idle = [node(f"n{i}", of=ONE, ready_at=T0 - timedelta(hours=2)) for i in range(3)]
    pol = policy(max_headroom_gpus=4, idle_timeout_minutes=10)
    for p90 in (3.0, 3.0000000000000004):
        p = run(queue=[running], fleet=[busy, *idle], pol=pol, fc=forecast(p90))
        assert [t.node_id for t in p.of_kind("terminate")] == ["n2"] and not p.of_kind("launch")


def test_an_idle_cpu_node_is_not_kept_for_a_gpu_forecast():
    cpu = offer("c8", gpus=0, price=0.4, vcpus=8, memory_gib=32)
    idle = node("cpu", of=cpu, ready_at=T0 - timedelta(hours=2))
    p = run(fleet=[idle], pol=policy(max_headroom_gpus=2, idle_timeout_minutes=10), fc=forecast(2.0))
    assert [(t.node_id, t.reason) for t in p.of_kind("terminate")] == [("cpu", Reason.IDLE)]


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


def test_each_gpu_model_is_bought_for_after_a_model_the_forecast_does_not_want_more_of():
    # models are visited in name order: A100 (p90 0, nothing wanted) comes before H100 (p90 2: two 1-GPU nodes)
    h100 = offer("h1", gpus=1, price=2.0, model="H100-80GB", vcpus=8, memory_gib=64)
    fc = Forecast(demand=(DemandForecast("A100-80GB", 60, 0.0, 0.0), DemandForecast("H100-80GB", 60, 1.0, 2.0)))
    p = run(offers=(ONE, h100), pol=policy(max_headroom_gpus=4), fc=fc)
    assert [(l.offer.key, l.count, l.reason) for l in p.of_kind("launch")] == [(h100.key, 2, Reason.FORECAST_HEADROOM)]


def test_headroom_keeps_max_gpus():
    # 6 GPUs wanted ahead, capped at 3 by max_headroom_gpus; max_gpus 2 stops it at 2 (exactly the cap: 1 + 1 <= 2)
    p = run(pol=policy(max_headroom_gpus=3, max_gpus=2), fc=forecast(5.2))
    assert [(l.reason, l.count) for l in p.of_kind("launch")] == [(Reason.FORECAST_HEADROOM, 2)]
    # a held GPU counts: with one busy node, one more
    busy = node("b", of=ONE)
    running = job("r", gpus=1, state=JobState.RUNNING, node_ids=("b",))
    p = run(queue=[running], fleet=[busy], pol=policy(max_headroom_gpus=3, max_gpus=2), fc=forecast(5.2))
    assert [(l.reason, l.count) for l in p.of_kind("launch")] == [(Reason.FORECAST_HEADROOM, 1)]


def test_an_offer_naming_the_model_but_no_gpus_is_not_bought_ahead():
    # an instance type may name a GPU model with a GPU count of 0 (providers/aws.py sums the counts it is given);
    # it adds no GPU, so the two GPUs ahead are two 1-GPU nodes, not the cheaper node without GPUs
    zero = offer("z0", gpus=0, price=0.5)
    zero = replace(zero, instance_type=replace(zero.instance_type, gpu_model="A100-80GB"))
    p = run(offers=(ONE, zero), pol=policy(max_headroom_gpus=4), fc=forecast(2.0))
    assert [(l.offer.key, l.count) for l in p.of_kind("launch")] == [(ONE.key, 2)]


def test_headroom_never_buys_past_what_is_wanted():
    # a 4-GPU node is cheaper per GPU ($0.50) than the 1-GPU one ($1), but 3 GPUs are wanted (the cap): three 1-GPU
    # nodes; with 5 wanted, one 4-GPU node and one 1-GPU node
    four = offer("g4", gpus=4, price=2.0, vcpus=32, memory_gib=256)
    p = run(offers=(ONE, four), pol=policy(max_headroom_gpus=3), fc=forecast(5.2))
    assert [(l.offer.key, l.count) for l in p.of_kind("launch")] == [(ONE.key, 3)]
    p = run(offers=(ONE, four), pol=policy(max_headroom_gpus=5), fc=forecast(5.2))
    assert [(l.offer.key, l.count) for l in p.of_kind("launch")] == [(four.key, 1), (ONE.key, 1)]


def test_headroom_allows_a_float_rounding_in_the_forecast_and_the_budget():
    # a p90 of 3.0000000000000004 (0.1 x 3 x 10) wants 3 GPUs, not 4
    assert sum(l.count for l in run(pol=policy(max_headroom_gpus=8), fc=forecast(0.1 * 3 * 10)).of_kind("launch")) == 3
    # three $0.10/h nodes sum to $0.30000000000000004/h: within a $0.30/h budget
    dime = replace(ONE, usd_per_hour=0.1)
    p = run(offers=(dime,), pol=policy(max_headroom_gpus=8, max_usd_per_hour=0.3), fc=forecast(3.0))
    assert [l.count for l in p.of_kind("launch")] == [3]


def _bought(offers, p90: float, cap: int, risks=()):
    fc = Forecast(demand=forecast(p90).demand, interruption=tuple(OfferRisk(o.key, 60, p) for o, p in risks))
    return [(l.offer.key, l.count) for l in run(offers=offers, pol=policy(max_headroom_gpus=cap), fc=fc).of_kind("launch")]


def test_headroom_buys_the_cheapest_offer_per_gpu_risk_adjusted():
    # price x (1 + p) per GPU: $1 spot at p 0.5 is $1.50, dearer than $1.40 spot at p 0 ...
    risky, safe = ONE, offer("g1b", gpus=1, price=1.4, vcpus=8, memory_gib=64)
    assert _bought((risky, safe), 2.0, 2, risks=((risky, 0.5), (safe, 0.0))) == [(safe.key, 2)]
    # ... and $1 spot at p 0.1 ($1.10) is cheaper than $1.20 on demand
    od = offer("g1o", gpus=1, price=1.2, market=Market.ON_DEMAND, vcpus=8, memory_gib=64)
    assert _bought((risky, od), 2.0, 2, risks=((risky, 0.1),)) == [(risky.key, 2)]
    # per GPU: a 4-GPU node at $6 ($1.50 a GPU) before four 1-GPU nodes at $1.80 (both on demand)
    od1 = offer("g1", gpus=1, price=1.8, market=Market.ON_DEMAND, vcpus=8, memory_gib=64)
    od4 = offer("g4", gpus=4, price=6.0, market=Market.ON_DEMAND, vcpus=32, memory_gib=256)
    assert _bought((od1, od4), 4.0, 4) == [(od4.key, 1)]


@pytest.mark.parametrize("rule", [{"on_demand_base_gpus": 4}, {"max_spot_share": 0.5}])
def test_headroom_buys_spot_once_the_market_rules_allow_it(rule):
    """headroom() tried each offer once, cheapest first: when the on-demand base or the spot share stopped
    the spot offer, it moved on to on-demand and never came back to spot, so all 8 GPUs ahead were bought on
    demand ($18/h, not $13/h)."""
    # 8 GPUs wanted ahead: the first 4-GPU node must be on demand ($9/h; the base, or a spot share of 4/4 > 0.5),
    # the second may then be spot ($4/h: 4 spot GPUs of 8, and 4 on demand meet the base), as jobs buy
    spot = offer("g4s", gpus=4, price=4.0)
    od = offer("g4o", gpus=4, price=9.0, market=Market.ON_DEMAND)
    p = run(offers=(spot, od), pol=policy(max_headroom_gpus=8, **rule), fc=forecast(8.0))
    assert sorted((l.offer.market, l.count) for l in p.of_kind("launch")) == [(Market.ON_DEMAND, 1), (Market.SPOT, 1)]
    assert p.usd_per_hour_after == pytest.approx(13.0)


def test_an_idle_node_naming_a_gpu_model_but_no_gpus_idles_out():
    # such a type (test_an_offer_naming_the_model_but_no_gpus_is_not_bought_ahead) holds no GPU the forecast wants:
    # it idles out with or without a forecast (before, plan() raised KeyError without one and kept it with one)
    zero = offer("z0", gpus=0, price=0.5)
    zero = replace(zero, instance_type=replace(zero.instance_type, gpu_model="A100-80GB"))
    idle = node("z", of=zero, ready_at=T0 - timedelta(hours=2))
    for pol, fc in ((policy(idle_timeout_minutes=10), None),
                    (policy(max_headroom_gpus=2, idle_timeout_minutes=10), forecast(2.0))):
        assert [(t.node_id, t.reason) for t in run(fleet=[idle], pol=pol, fc=fc).of_kind("terminate")] == [
            ("z", Reason.IDLE)]


def test_what_the_fleet_holds_for_the_forecast():
    pol = policy(max_headroom_gpus=2, idle_timeout_minutes=10)

    def ahead(fleet, queue=()):
        return sum(l.count for l in run(queue=queue, fleet=fleet, pol=pol, fc=forecast(2.0)).of_kind("launch"))

    # a drained node this plan terminates is not held: both GPUs are bought ahead
    assert ahead([node("d", of=ONE, state=NodeState.DRAINING)]) == 2
    # a draining node still running its job is: one more
    running = job("r", gpus=1, state=JobState.RUNNING, node_ids=("d",))
    assert ahead([node("d", of=ONE, state=NodeState.DRAINING)], [running]) == 1
    # an idle GPU counts, also behind a CPU node that sorts first
    cpu = node("a-cpu", of=offer("c8", gpus=0, price=0.4, vcpus=8, memory_gib=32))
    assert ahead([cpu, node("h", of=ONE, ready_at=T0 - timedelta(minutes=1))]) == 1


def test_headroom_bought_for_one_model_does_not_count_against_another_models_idle_nodes():
    # two idle A100 nodes past the timeout are what a p90 of 2 wants (cap 2); one H100 is bought for its own p90
    h100 = offer("h1", gpus=1, price=2.0, model="H100-80GB", vcpus=8, memory_gib=64)
    fc = Forecast(demand=(DemandForecast("A100-80GB", 60, 1.0, 2.0), DemandForecast("H100-80GB", 60, 0.5, 1.0)))
    idle = [node(f"a{i}", of=ONE, ready_at=T0 - timedelta(hours=2)) for i in range(2)]
    p = run(fleet=idle, offers=(ONE, h100), pol=policy(max_headroom_gpus=2, idle_timeout_minutes=10), fc=fc)
    assert [(l.offer.key, l.count) for l in p.of_kind("launch")] == [(h100.key, 1)] and not p.of_kind("terminate")


def _move_to_h100_spot():
    return plan(**_move_to_h100_spot_args())


def _move_to_h100_spot_args():
    """A checkpointable job allowed A100 or H100 runs alone on a $10/h A100 on-demand node; a $4/h H100 spot
    offer pays its move back (markets.replace_on_demand_with_spot). An H100 node has idled 2 h; the H100 p90 is 3."""
    od = offer("od1", gpus=1, price=10.0, market=Market.ON_DEMAND, vcpus=8, memory_gib=64)
    h100 = offer("h1", gpus=1, price=4.0, zone="z2", vcpus=8, memory_gib=64, model="H100-80GB")
    j = replace(job("j", gpus=1, models=("A100-80GB", "H100-80GB"), duration_hours=10.0, state=JobState.RUNNING,
                    node_ids=("od",)),
                checkpointable=True, checkpoint_interval_minutes=30.0, started_at_utc=T0 - timedelta(hours=2),
                last_checkpoint_utc=T0 - timedelta(minutes=30), checkpointed_work_hours=1.5)
    fc = Forecast(demand=(DemandForecast("H100-80GB", 60, 2.0, 3.0),), interruption=(OfferRisk(h100.key, 60, 0.0),))
    pol = policy(replace_on_demand_with_spot=True, restart_overhead_minutes=6.0, max_headroom_gpus=8,
                 idle_timeout_minutes=10)
    fleet = (node("od", od), node("h-idle", h100, ready_at=T0 - timedelta(hours=2)))
    return dict(now=T0, queue=(j,), fleet=fleet, offers=(h100,), forecast=fc, policy=pol)


def test_idle_gpus_kept_count_the_headroom_bought_in_the_pass_after_a_move_to_spot():
    # headroom (before the move) buys 2 H100 ahead: 3 wanted, the idle node held; the move then puts j on a new
    # H100 node, so the forecast wants 3 - 1 busy = 2 idle H100 GPUs, which the two bought ahead are: the plan
    # ends with the p90's 3 H100 GPUs, not 4
    p = _move_to_h100_spot()
    assert [m.job_id for m in p.of_kind("migrate")] == ["j"]
    launched = sum(l.count for l in p.of_kind("launch"))
    kept = [n for n in ("h-idle",) if n not in {t.node_id for t in p.of_kind("terminate")}]
    assert launched + len(kept) == 3


def test_a_plan_does_not_terminate_an_idle_node_of_the_offer_it_buys_ahead():
    p = _move_to_h100_spot()
    assert not [t for t in p.of_kind("terminate") if t.node_id == "h-idle"]
    assert sum(l.count for l in p.of_kind("launch")) == 2  # one for j, one ahead (3 - j's - the idle one)


def test_idle_nodes_kept_count_the_idle_gpus_held_elsewhere_against_the_cap():
    """idle() kept min(cap, p90 - busy GPUs) GPUs of idle nodes without counting the idle GPUs held
    elsewhere (free GPUs of a busy node, a launching node), which headroom() counts against the cap: the
    fleet kept 4 idle GPUs under a cap of 2, a node headroom() would not buy."""
    # an 8-GPU node runs a 6-GPU job (2 GPUs free); a 2-GPU node has idled 2 h; p90 10, cap 2. headroom() counts
    # 2 + 2 idle GPUs, past the cap, and buys nothing (without the idle node it buys nothing either: 2 idle, the cap)
    g8, g2 = offer("g8", gpus=8, price=8.0), offer("g2", gpus=2, price=2.0, vcpus=16, memory_gib=64)
    running = job("r", gpus=6, vcpus=1, memory_gib=1, state=JobState.RUNNING, node_ids=("busy",))
    fleet = [node("busy", of=g8), node("idle", of=g2, ready_at=T0 - timedelta(hours=2))]
    pol = policy(max_headroom_gpus=2, idle_timeout_minutes=10)
    assert not run(queue=[running], fleet=fleet[:1], offers=(g8, g2), pol=pol, fc=forecast(10.0)).actions
    p = run(queue=[running], fleet=fleet, offers=(g8, g2), pol=pol, fc=forecast(10.0))
    assert [(t.node_id, t.reason) for t in p.of_kind("terminate")] == [("idle", Reason.IDLE)]


def test_the_idle_nodes_kept_for_the_forecast_are_the_cheapest_per_gpu_risk_adjusted():
    # the forecast wants one idle GPU (p90 1, cap 2); three 1-GPU nodes have idled 2 h
    dear, cheap = offer("d1", gpus=1, price=4.0, vcpus=8, memory_gib=64), offer("c1", gpus=1, price=2.0, vcpus=8,
                                                                                 memory_gib=64)
    risky = offer("r1", gpus=1, price=1.5, zone="z9", vcpus=8, memory_gib=64)
    pol = policy(max_headroom_gpus=2, idle_timeout_minutes=10)

    def let_go(fleet, risk=0.0):
        fc = Forecast(demand=forecast(1.0).demand, interruption=(OfferRisk(risky.key, 60, risk),))
        p = run(fleet=[node(n, of=o, ready_at=T0 - timedelta(hours=2)) for n, o in fleet], offers=(ONE,), pol=pol,
                fc=fc)
        return [t.node_id for t in p.of_kind("terminate")]

    # before, the first by node id was kept ("a", $4/h) and the $2 node let go
    assert let_go([("a", dear), ("b", cheap)]) == ["a"]
    # $1.50 at a 50% hourly risk is $2.25 risk-adjusted: the $2 node stays; at 25% ($1.875) the risky one does
    assert let_go([("a", cheap), ("b", risky)], risk=0.5) == ["b"]
    assert let_go([("a", cheap), ("b", risky)], risk=0.25) == ["a"]
    # equal prices: the first by node id
    assert let_go([("b", cheap), ("a", cheap)]) == ["b"]
    # a 2-GPU node cheaper per GPU is more than is wanted: the 1-GPU node is kept
    two = offer("t2", gpus=2, price=2.0, vcpus=16, memory_gib=128)
    assert let_go([("a", two), ("b", dear)]) == ["a"]


def test_headroom_is_bought_after_the_move_back_to_spot_has_taken_an_idle_node():
    # cap 1: the move back to spot puts j into the idle H100 node. Before, headroom ran first, counted that
    # node as the one idle GPU the cap allows and bought nothing; the next pass bought the H100 the move used
    p = plan(**{**_move_to_h100_spot_args(), "policy": policy(replace_on_demand_with_spot=True,
                                                              restart_overhead_minutes=6.0, max_headroom_gpus=1,
                                                              idle_timeout_minutes=10)})
    assert [(m.job_id, m.to_node_ids) for m in p.of_kind("migrate")] == [("j", ("h-idle",))]
    assert [(l.offer.instance_type.gpu_model, l.count, l.reason) for l in p.of_kind("launch")] == [
        ("H100-80GB", 1, Reason.FORECAST_HEADROOM)]


def test_headroom_does_not_count_an_idle_node_it_lets_go():
    # a p90 of 7 and an idle 8-GPU node: more than is wanted, so idle() lets it go. Before, headroom counted
    # its 8 GPUs as held and bought nothing, and the next pass bought 6 (three 2-GPU nodes; a fourth is past 7)
    big = offer("od8", gpus=8, price=72.0, market=Market.ON_DEMAND)
    two = offer("s2", gpus=2, price=2.0, vcpus=16, memory_gib=128)
    fleet = [node("big", of=big, ready_at=T0 - timedelta(minutes=30))]
    p = run(fleet=fleet, offers=(two,), pol=policy(max_headroom_gpus=8, idle_timeout_minutes=10), fc=forecast(7.0))
    assert [(l.offer.key, l.count) for l in p.of_kind("launch")] == [(two.key, 3)]
    assert [t.node_id for t in p.of_kind("terminate")] == ["big"]
    # a p90 of 8 keeps it, and buys nothing
    p = run(fleet=fleet, offers=(two,), pol=policy(max_headroom_gpus=8, idle_timeout_minutes=10), fc=forecast(8.0))
    assert not p.actions


def test_consolidation_keeps_a_node_whose_idle_gpus_the_forecast_wants():
    # r (checkpoint 5 min ago) could move from "a" onto "b"'s free GPU and "a" go. With a p90 of 4 and 2 GPUs busy
    # the forecast wants 2 idle: emptying "a" leaves none, and headroom bought a node like it in the same plan
    g2 = offer("g2", gpus=2, price=2.0, vcpus=16, memory_gib=128)
    r = replace(job("r", state=JobState.RUNNING, node_ids=("a",)), checkpointable=True,
                started_at_utc=T0 - timedelta(hours=1), last_checkpoint_utc=T0 - timedelta(minutes=5))
    rb = replace(job("rb", state=JobState.RUNNING, node_ids=("b",)), started_at_utc=T0 - timedelta(hours=1))
    fleet = [node("a", of=g2), node("b", of=g2)]
    pol = policy(max_headroom_gpus=8, idle_timeout_minutes=10)
    p = run(queue=[r, rb], fleet=fleet, offers=(g2,), pol=pol, fc=forecast(4.0))
    assert not p.actions
    assert p.explanation("r").considered == ("consolidation of a declined: the forecast wants 2 A100-80GB GPU(s) idle "
                                             "(scaling.max_headroom_gpus), and emptying it leaves 0",)
    # a p90 of 2 wants none idle: r moves and "a" goes
    p = run(queue=[r, rb], fleet=fleet, offers=(g2,), pol=pol, fc=forecast(2.0))
    assert [m.job_id for m in p.of_kind("migrate")] == ["r"] and [t.node_id for t in p.of_kind("terminate")] == ["a"]
