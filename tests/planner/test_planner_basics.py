"""Planner basics: free capacity, purchases, allow-lists, budget, idle nodes."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import Bind, JobState, Market, NodeState, Reason, Terminate
from fleetctl.planner import no_offer_holds, plan
from tests.builders import T0, job, node, offer, policy


def run(queue=(), fleet=(), offers=(), pol=None, now=T0):
    return plan(now=now, queue=tuple(queue), fleet=tuple(fleet), offers=tuple(offers), forecast=None, policy=pol or policy())


def test_binds_to_free_capacity_before_buying():
    p = run(queue=[job("j1", gpus=2)], fleet=[node("n1")], offers=[offer(price=1.0)])
    assert p.actions == (Bind("j1", ("n1",), Reason.FITS_FREE_CAPACITY, p.actions[0].detail),)
    assert p.usd_per_hour_before == p.usd_per_hour_after == 10.0


def test_buys_cheapest_offer_that_runs_the_whole_gang():
    offers = [offer("big", gpus=8, price=20.0), offer("small", gpus=1, price=2.0, vcpus=8, memory_gib=64)]
    # one worker of 1 GPU: the 1-GPU offer is cheaper
    p = run(queue=[job("one", gpus=1)], offers=offers)
    launch = p.of_kind("launch")[0]
    assert launch.offer.instance_type.name == "small" and launch.count == 1
    # a gang of 2 x 8 GPUs: only the 8-GPU offer fits a worker; two nodes in one zone
    p = run(queue=[job("gang", workers=2, gpus=8)], offers=offers)
    (launch,) = p.of_kind("launch")
    assert launch.offer.instance_type.name == "big" and launch.count == 2
    (bind,) = p.of_kind("bind")
    assert bind.node_ids == launch.node_names
    assert p.usd_per_hour_after == pytest.approx(40.0)


def test_gang_never_spans_zones_of_existing_capacity():
    fleet = [node("n1", offer(zone="z1")), node("n2", offer(zone="z2"))]
    p = run(queue=[job("gang", workers=2, gpus=8)], fleet=fleet, offers=[offer(price=9.0, zone="z3")])
    (bind,) = p.of_kind("bind")
    assert bind.reason is Reason.FITS_NEW_CAPACITY  # did not split across z1 and z2
    assert not set(bind.node_ids) & {"n1", "n2"}


def test_non_spot_eligible_job_refuses_spot():
    offers = [offer("g", price=5.0, market=Market.SPOT), offer("g", price=15.0, market=Market.ON_DEMAND)]
    p = run(queue=[job("prod", gpus=8, priority="production")], offers=offers,
            fleet=[node("spot-node", offer(market=Market.SPOT))])
    (launch,) = p.of_kind("launch")
    assert launch.offer.market is Market.ON_DEMAND
    p = run(queue=[job("batch", gpus=8, spot=False)], offers=offers)
    assert p.of_kind("launch")[0].offer.market is Market.ON_DEMAND


def test_gpu_model_constraint():
    offers = [offer("a100", model="A100-80GB", price=5.0), offer("h100", model="H100-80GB", price=9.0)]
    p = run(queue=[job("h", gpus=8, models=("H100-80GB",))], offers=offers)
    assert p.of_kind("launch")[0].offer.instance_type.gpu_model == "H100-80GB"


def test_unplaceable_gang_says_why():
    p = run(queue=[job("huge", gpus=16)], offers=[offer(gpus=8)])
    (u,) = p.unplaced
    assert u.reason is Reason.GANG_DOES_NOT_FIT
    assert "no allowed offer has enough GPUs per node: needs 16, the most an allowed offer has is 8 (g8: 8 x " \
           "A100-80GB (80 GiB each), 96 vCPU, 1024 GiB)" in u.detail, u.detail
    p = run(queue=[job("h", gpus=1, models=("H100-80GB",))], offers=[offer(gpus=8)])
    assert p.unplaced[0].reason is Reason.NO_ALLOWED_OFFER


@pytest.mark.parametrize("queued, offers, pol", [
    (job("huge", gpus=16), [offer(gpus=8)], None),
    (job("h", gpus=1, models=("H100-80GB",)), [offer(gpus=8)], None),
    (job("prod", gpus=1, priority="production"), [offer(market=Market.SPOT)], None),
    (job("out", gpus=1), [offer(region="r2")], {"regions": ("r1",)}),
], ids=["too-many-gpus", "no-such-model", "only-spot-has-it", "only-a-disallowed-region-has-it"])
def test_no_offer_holds_gives_the_plans_reason_for_a_job_no_offer_can_hold(queued, offers, pol):
    """What `jobs submit` warns of is what the plan says, reason and detail."""
    pol = policy(**(pol or {}))
    (u,) = run(queue=[queued], offers=offers, pol=pol).unplaced
    assert no_offer_holds(queued, offers, pol) == (u.reason, u.detail)


@pytest.mark.parametrize("queued", [job("fits", gpus=8), job("spot", gpus=8, spot=True), job("cpu", gpus=0)],
                         ids=["fits", "spot-eligible", "no-gpu"])
def test_no_offer_holds_is_none_for_a_job_an_offer_can_hold(queued):
    assert no_offer_holds(queued, [offer(gpus=8, market=Market.SPOT)], policy()) is None


def test_unplaceable_job_names_the_dimension_no_offer_has_and_the_best_there_is():
    """The detail names what blocks (GPU memory per GPU, memory, vCPUs, GPU
    count) with the most any allowed offer has of it, not the offer with the
    most GPUs: the one with the most of the missing dimension."""
    from dataclasses import replace

    offers = [offer("g8", gpus=8, memory_gib=1024), offer("g1", gpus=1, vcpus=8, memory_gib=2048,
                                                         gpu_memory_gib=94.0)]
    p = run(queue=[replace(job("big3", gpus=1), gpu_memory_gib_per_gpu=500.0)], offers=offers)
    (u,) = p.unplaced
    assert u.reason is Reason.GANG_DOES_NOT_FIT
    assert u.detail == ("needs 1 x any GPU (500 GiB per GPU, 4 vCPU, 16 GiB per worker); no allowed offer has "
                        "enough GPU memory per GPU: needs 500 GiB, the most an allowed offer has is 94 GiB (g1: 1 x "
                        "A100-80GB (94 GiB each), 8 vCPU, 2048 GiB)"), u.detail
    (u,) = run(queue=[job("mem", gpus=1, memory_gib=4000, vcpus=200)], offers=offers).unplaced
    assert u.reason is Reason.GANG_DOES_NOT_FIT
    assert u.detail.endswith("no allowed offer has enough vCPUs per node: needs 200, the most an allowed offer has "
                             "is 96 (g8: 8 x A100-80GB (80 GiB each), 96 vCPU, 1024 GiB); memory per node: needs 4000 "
                             "GiB, the most an allowed offer has is 2048 GiB (g1: 1 x A100-80GB (94 GiB each), 8 vCPU, "
                             "2048 GiB)"), u.detail
    # Each need fits some offer, no offer fits them all: the closest offer and what it lacks.
    (u,) = run(queue=[job("both", gpus=1, memory_gib=1500, vcpus=64)], offers=offers).unplaced
    assert u.reason is Reason.GANG_DOES_NOT_FIT
    assert "no allowed offer has all of it at once: the closest, g8: 8 x A100-80GB (80 GiB each), 96 vCPU, 1024 GiB, " \
           "has memory per node 1024 GiB of 1500 GiB" in u.detail, u.detail


def test_budget_cap_leaves_job_queued():
    p = run(queue=[job("a", gpus=8), job("b", gpus=8, submitted=T0 + timedelta(minutes=1))],
            offers=[offer(price=10.0)], pol=policy(max_usd_per_hour=15.0))
    assert [b.job_id for b in p.of_kind("bind")] == ["a"]
    assert p.unplaced[0].job_id == "b" and p.unplaced[0].reason is Reason.BUDGET_EXCEEDED
    assert "above the budget of $15.00/h" in p.unplaced[0].detail


def test_policy_allow_lists_filter_offers():
    offers = [offer("cheap", price=1.0, provider="gcp", region="r9"), offer("ok", price=5.0)]
    p = run(queue=[job("j", gpus=8)], offers=offers, pol=policy(providers=("aws",)))
    assert p.of_kind("launch")[0].offer.instance_type.name == "ok"
    p = run(queue=[job("j", gpus=8)], offers=offers, pol=policy(regions=("r1",)))
    assert p.of_kind("launch")[0].offer.instance_type.name == "ok"


def test_on_demand_base_and_spot_share():
    offers = [offer("g", price=5.0, market=Market.SPOT), offer("g", price=15.0, market=Market.ON_DEMAND)]
    p = run(queue=[job("a", gpus=8), job("b", gpus=8, submitted=T0 + timedelta(seconds=1))], offers=offers,
            pol=policy(on_demand_base_gpus=8))
    markets = [a.offer.market for a in p.of_kind("launch")]
    assert markets == [Market.ON_DEMAND, Market.SPOT]
    p = run(queue=[job("a", gpus=8), job("b", gpus=8, submitted=T0 + timedelta(seconds=1))], offers=offers,
            pol=policy(max_spot_share=0.5))
    assert sorted(a.offer.market.value for a in p.of_kind("launch")) == ["on_demand", "spot"]


def test_higher_priority_is_placed_first_under_budget():
    offers = [offer(price=10.0)]
    q = [job("batch-early", gpus=8, submitted=T0), job("prod-late", gpus=8, priority="production", spot=True,
                                                        submitted=T0 + timedelta(hours=1))]
    p = run(queue=q, offers=offers, pol=policy(max_usd_per_hour=10.0))
    assert [b.job_id for b in p.of_kind("bind")] == ["prod-late"]


def test_idle_node_terminated_after_timeout_only():
    idle_long = node("old", ready_at=T0 - timedelta(minutes=30))
    idle_short = node("fresh", ready_at=T0 - timedelta(minutes=2))
    launching = node("boot", state=NodeState.LAUNCHING, ready_at=T0 + timedelta(minutes=1))
    p = run(fleet=[idle_long, idle_short, launching], pol=policy(idle_timeout_minutes=10))
    assert [a.node_id for a in p.actions if isinstance(a, Terminate)] == ["old"]
    assert p.actions[0].reason is Reason.IDLE
    assert p.usd_per_hour_after == pytest.approx(20.0)


def test_idle_time_counts_from_idle_since_else_ready_else_launch():
    # timeout 10 min; builders launch a node a minute before it is ready
    pol = policy(idle_timeout_minutes=10)
    recent = replace(node("idle-2min", ready_at=T0 - timedelta(hours=1)), idle_since_utc=T0 - timedelta(minutes=2))
    almost = node("ready-9.5min", ready_at=T0 - timedelta(minutes=9, seconds=30))  # launched 10.5 min ago
    exact = node("ready-10min", ready_at=T0 - timedelta(minutes=10))
    unknown = replace(node("launched-30min", ready_at=T0 - timedelta(minutes=29)), ready_at_utc=None)
    rounded_down = node("ready-625s", ready_at=T0 - timedelta(seconds=625))  # 10.42 min
    rounded_up = node("ready-640s", ready_at=T0 - timedelta(seconds=640))  # 10.67 min
    p = run(fleet=[recent, almost, exact, unknown, rounded_down, rounded_up], pol=pol)
    assert [(t.node_id, t.reason, t.detail) for t in p.of_kind("terminate")] == [
        ("launched-30min", Reason.IDLE, "idle for 30 min (timeout 10 min), saves $10.00/h"),
        ("ready-10min", Reason.IDLE, "idle for 10 min (timeout 10 min), saves $10.00/h"),
        ("ready-625s", Reason.IDLE, "idle for 10 min (timeout 10 min), saves $10.00/h"),
        ("ready-640s", Reason.IDLE, "idle for 11 min (timeout 10 min), saves $10.00/h"),
    ]


def test_each_idle_or_drained_node_goes_whatever_nodes_sort_before_it():
    pol = policy(idle_timeout_minutes=10)
    old = T0 - timedelta(hours=1)
    fleet = [node("a-busy", ready_at=old), node("b-drained", state=NodeState.DRAINING, ready_at=old),
             node("c-draining-busy", state=NodeState.DRAINING, ready_at=old),
             node("d-terminating", state=NodeState.TERMINATING, ready_at=old),
             replace(node("e-launching", state=NodeState.LAUNCHING, ready_at=old), ready_at_utc=None),  # 61 min
             node("f-old", ready_at=old)]
    queue = [job("r", gpus=8, state=JobState.RUNNING, node_ids=("a-busy",)),
             job("s", gpus=8, state=JobState.RUNNING, node_ids=("c-draining-busy",))]
    p = run(queue=queue, fleet=fleet, pol=pol)
    # a busy node, a draining node still running its job, a node already going and one still launching stay
    assert [(t.node_id, t.reason) for t in p.of_kind("terminate")] == [("b-drained", Reason.INTERRUPTION),
                                                                        ("f-old", Reason.IDLE)]
    assert p.of_kind("terminate")[0].detail == "drained after a reclaim notice; saves $10.00/h"


def test_a_node_left_empty_by_a_preemption_is_idle_from_now():
    # prod preempts the gang v (one 8-GPU worker on each of n1 and n2) and takes n1: n2, ready an hour ago and
    # busy until now, has not been idle for the 10-minute timeout
    od = offer(price=20.0, market=Market.ON_DEMAND)
    gang = job("v", workers=2, gpus=8, state=JobState.RUNNING, node_ids=("n1", "n2"))
    p = run(queue=[gang, job("prod", gpus=8, priority="production")], fleet=[node("n1", od), node("n2", od)],
            offers=[od], pol=policy(idle_timeout_minutes=10, max_usd_per_hour=10.0))
    assert [(a.kind, a.job_id) for a in p.actions] == [("preempt", "v"), ("bind", "prod")]
    assert not p.of_kind("terminate")


def test_a_node_reserved_for_a_waiting_gang_is_not_terminated_as_idle():
    # a V100 gang of two waits (no V100 offer) for the node j runs on and the idle V100 node beside it
    v100 = offer("v1", gpus=1, model="V100", price=10.0, market=Market.ON_DEMAND, vcpus=8, memory_gib=64)
    running = job("j", gpus=1, vcpus=1, memory_gib=1, models=("V100",), state=JobState.RUNNING, node_ids=("od",))
    gang = job("gang", workers=2, gpus=1, vcpus=1, memory_gib=1, models=("V100",))
    fleet = [node("idle", v100), node("od", v100)]
    pol = policy(idle_timeout_minutes=10)
    p = run(queue=[running, gang], fleet=fleet, pol=pol)
    assert "waits for running work to end" in p.unplaced[0].detail and not p.of_kind("terminate")
    assert [t.node_id for t in run(queue=[running], fleet=fleet, pol=pol).of_kind("terminate")] == ["idle"]


def test_bound_jobs_hold_capacity_and_gone_nodes_requeue():
    running = job("r", gpus=8, state=JobState.RUNNING, node_ids=("n1",))
    p = run(queue=[running, job("q", gpus=8)], fleet=[node("n1")], offers=[offer(price=3.0)])
    assert [b.job_id for b in p.of_kind("bind")] == ["q"]  # n1 is full
    orphan = job("o", gpus=8, state=JobState.RUNNING, node_ids=("gone-node",))
    p = run(queue=[orphan], fleet=[node("n1")], offers=[offer(price=3.0)])
    assert p.of_kind("bind")[0].node_ids == ("n1",)


def test_no_changes_plan_is_empty():
    running = job("r", gpus=8, state=JobState.BOUND, node_ids=("n1",))
    p = run(queue=[running], fleet=[node("n1")], offers=[offer()])
    assert not p.has_changes and not p.unplaced


def test_same_input_in_any_order_gives_the_same_plan():
    offers = [offer(f"o{i}", gpus=g, price=p, zone=z, market=m, vcpus=16 * g, memory_gib=128.0 * g)
              for i, (g, p, z, m) in enumerate([(1, 1.1, "z1", Market.SPOT), (4, 3.9, "z2", Market.SPOT),
                                                 (8, 8.5, "z1", Market.ON_DEMAND), (8, 7.0, "z2", Market.SPOT),
                                                 (2, 2.3, "z3", Market.ON_DEMAND)])]
    fleet = [node(f"n{i}", offers[i % len(offers)]) for i in range(6)]
    queue = [job(f"j{i}", workers=1 + i % 3, gpus=[1, 2, 4, 8][i % 4], submitted=T0 + timedelta(minutes=i % 5),
                 priority=["batch", "production"][i % 2], spot=None if i % 2 else True) for i in range(20)]
    base = run(queue, fleet, offers, policy(max_usd_per_hour=120.0))
    rng = random.Random(7)
    for _ in range(5):
        q, f, o = list(queue), list(fleet), list(offers)
        rng.shuffle(q), rng.shuffle(f), rng.shuffle(o)
        assert run(q, f, o, policy(max_usd_per_hour=120.0)) == base


def test_scale_up_cooldown_defers_purchases_but_not_free_capacity():
    pol = policy(scale_up_cooldown_seconds=60)
    fresh = node("n1", ready_at=T0 - timedelta(seconds=10))  # launched 70 s before T0 (builders: ready - 1 min)
    queue = [job("fits", gpus=8), job("needs-more", gpus=8, submitted=T0 + timedelta(seconds=1))]
    p = run(queue=queue, fleet=[fresh], offers=[offer(price=3.0)], pol=pol, now=T0 - timedelta(seconds=20))
    assert [b.job_id for b in p.of_kind("bind")] == ["fits"] and not p.of_kind("launch")
    (waiting,) = p.unplaced
    assert waiting.job_id == "needs-more" and waiting.reason is Reason.WAITING_FOR_CAPACITY
    assert "scale-up cooldown" in waiting.detail and "08:59:50 UTC" in waiting.detail  # 60 s after the launch
    p = run(queue=queue, fleet=[fresh], offers=[offer(price=3.0)], pol=pol, now=T0)
    assert [b.job_id for b in p.of_kind("bind")] == ["fits", "needs-more"] and p.of_kind("launch")
    # a job whose deadline cannot afford the wait buys at once
    from dataclasses import replace as _replace

    pressed = _replace(queue[1], deadline_utc=T0 + timedelta(hours=1, seconds=10))  # 1 h of work, 30 s of slack
    offers = [offer(price=3.0), offer(price=9.0, market=Market.ON_DEMAND)]  # too pressed for spot
    p = run(queue=[queue[0], pressed], fleet=[fresh], offers=offers, pol=pol, now=T0 - timedelta(seconds=20))
    assert [b.job_id for b in p.of_kind("bind")] == ["fits", "needs-more"] and not p.unplaced
    assert not run(queue=[queue[0], _replace(pressed, deadline_utc=T0 + timedelta(hours=3))], fleet=[fresh],
                   offers=offers, pol=pol, now=T0 - timedelta(seconds=20)).of_kind("launch")  # slack: it waits


def test_planned_fleet_place_keeps_the_scale_up_cooldown():
    from dataclasses import replace as _replace

    from fleetctl.planner import PlannedFleet

    pol = policy(scale_up_cooldown_seconds=600)
    fresh = node("n1", offer(price=3.0), ready_at=T0 - timedelta(seconds=30))  # launched 90 s before T0
    offers = [offer(price=3.0), offer(price=9.0, market=Market.ON_DEMAND)]
    pf = PlannedFleet(now=T0, queue=[job("busy", gpus=8)], fleet=[fresh], offers=offers, forecast=None, policy=pol)
    step = pf.place(job("late", gpus=8, submitted=T0 + timedelta(seconds=1)))
    assert not step.actions and [u.reason for u in step.unplaced] == [Reason.WAITING_FOR_CAPACITY]
    assert "scale-up cooldown" in step.unplaced[0].detail and step.usd_per_hour_after == step.usd_per_hour_before
    # as in a full pass, a job whose deadline cannot afford the wait buys at once
    pressed = _replace(job("pressed", gpus=8), deadline_utc=T0 + timedelta(hours=1, seconds=10))  # 30 s of slack
    step = pf.place(pressed)
    assert [a.kind for a in step.actions] == ["launch", "bind"] and not step.unplaced


def test_a_job_waiting_for_the_scale_up_cooldown_is_not_charged_to_its_team():
    from fleetctl.model import Team
    from fleetctl.planner import PlannedFleet

    # team a may burst to 8 GPUs; its 8-GPU job waits for the cooldown (n1 is full with team b's job),
    # so the team uses 0 GPUs, not 8 (admission charged it, the wait gives it back)
    pol = policy(scale_up_cooldown_seconds=600, teams=(Team("a", burst_gpus=8), Team("b")))
    fresh = node("n1", offer(price=3.0), ready_at=T0 - timedelta(seconds=30))  # launched 90 s before T0
    busy = job("busy", gpus=8, team="b", state=JobState.RUNNING, node_ids=("n1",))
    pf = PlannedFleet(now=T0, queue=[busy, job("waits", gpus=8)], fleet=[fresh], offers=[offer(price=3.0)],
                      forecast=None, policy=pol)
    assert [(u.job_id, u.reason) for u in pf.plan.unplaced] == [("waits", Reason.WAITING_FOR_CAPACITY)]
    step = pf.place(job("nine", gpus=9, submitted=T0 + timedelta(seconds=1)))
    (u,) = step.unplaced
    assert u.reason is Reason.QUOTA_EXCEEDED and u.detail.startswith("team a uses 0 GPUs; 9 more")
    step = pf.place(job("eight", gpus=8, submitted=T0 + timedelta(seconds=2)))  # 0 + 8 is within the burst
    assert [u.reason for u in step.unplaced] == [Reason.WAITING_FOR_CAPACITY]


def test_scale_down_cooldown_after_a_launch_or_a_termination():
    pol = policy(idle_timeout_minutes=10, scale_down_cooldown_minutes=5)
    idle = node("old", ready_at=T0 - timedelta(minutes=30))
    new = node("new", ready_at=T0 - timedelta(minutes=2), state=NodeState.LAUNCHING)  # launched 3 min ago
    assert not run(fleet=[idle, new], pol=pol).of_kind("terminate")
    assert [t.node_id for t in run(fleet=[idle, new], pol=pol, now=T0 + timedelta(minutes=2)).of_kind("terminate")] \
        == ["old"]
    recent = plan(now=T0, queue=[], fleet=[idle], offers=[], forecast=None, policy=pol,
                  last_termination_utc=T0 - timedelta(minutes=4))
    assert not recent.of_kind("terminate")
    later = plan(now=T0, queue=[], fleet=[idle], offers=[], forecast=None, policy=pol,
                 last_termination_utc=T0 - timedelta(minutes=5))
    assert [t.node_id for t in later.of_kind("terminate")] == ["old"]
    # idle exactly the timeout is past it: held back by the cooldown too
    exact = node("exact", ready_at=T0 - timedelta(minutes=10))
    assert not run(fleet=[exact, new], pol=pol).of_kind("terminate")
    # drained nodes still go within the cooldown, also after an idle node it holds back
    drained = node("z-drained", state=NodeState.DRAINING)
    p = run(fleet=[idle, new, drained], pol=pol)
    assert [(t.node_id, t.reason) for t in p.of_kind("terminate")] == [("z-drained", Reason.INTERRUPTION)]


def test_no_offer_holds_each_is_no_offer_holds_of_each_job():
    """`jobs submit` asks for every job at once (the allowed offers filtered and sorted once)."""
    from fleetctl.planner import no_offer_holds_each

    offers = [offer(gpus=8, market=Market.SPOT), offer("g1", gpus=1, market=Market.ON_DEMAND, region="r2")]
    pol = policy()
    queued = [job("huge", gpus=16), job("h", gpus=1, models=("H100-80GB",)), job("fits", gpus=8),
              job("prod", gpus=1, priority="production"), job("cpu", gpus=0)]
    each = no_offer_holds_each(queued, offers, pol)
    assert each == [no_offer_holds(j, offers, pol) for j in queued]
    assert each[2] is None and each[0] is not None and each[3] is None  # on-demand g1 holds the production job
