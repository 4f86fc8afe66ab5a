"""The price-first baselines on their own: hand-built queues, fleets and offers, each plan checked by hand.

spot-greedy: the cheapest spot offer (by USD/hour of the node, ties by key) that holds a worker, after free room on
held nodes; on-demand only when no spot offer holds it. skypilot-failover: the cheapest spot zone the job has not
failed in, one cluster per job, on-demand only when every spot zone failed it or has no capacity."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import JobState, Market, NodeState, Reason
from fleetctl.sim.baselines import PLANNERS, _fits_worker
from tests.builders import T0, job, node, offer, policy

BOTH = ("spot-greedy", "skypilot-failover")


def _plan(name, queue, fleet=(), offers=(), pol=None, now=T0):
    return PLANNERS[name](now=now, queue=list(queue), fleet=list(fleet), offers=list(offers), forecast=None,
                          policy=pol or policy())


def _launches(p):
    return [(a.offer.key, a.count, a.reason) for a in p.actions if a.kind == "launch"]


def _binds(p):
    return [(a.job_id, a.node_ids, a.reason) for a in p.actions if a.kind == "bind"]


def _terms(p):
    return [(a.node_id, a.reason) for a in p.actions if a.kind == "terminate"]


def _unplaced(p):
    return [(u.job_id, u.reason) for u in p.unplaced]


def _od(o, price):
    return replace(o, market=Market.ON_DEMAND, usd_per_hour=price)


def _key(zone, name="g1", market="spot"):
    return f"aws/r1/{zone}/{name}/{market}"


def _running(job_id, node_id, gpus=1, vcpus=4, memory_gib=16, workers=1):
    return replace(job(job_id, gpus=gpus, vcpus=vcpus, memory_gib=memory_gib, workers=workers), state=JobState.RUNNING,
                   node_ids=(node_id,) * workers)


# --------------------------------------------------------------------------- buying


@pytest.mark.parametrize("name", BOTH)
def test_the_cheapest_spot_offer_by_node_price_ties_by_key_even_beside_a_cheaper_on_demand(name):
    """Spot z2 and z3 both 1.5 an hour: z2 by key; on-demand at 1.0, a T4 spot at 0.5 (the job needs an A100) and
    spot z1 at 2.0 are not taken."""
    offers = [offer("g1", gpus=1, price=2.0, zone="z1"), offer("g1", gpus=1, price=1.5, zone="z3"),
              offer("g1", gpus=1, price=1.5, zone="z2"), _od(offer("g1", gpus=1, zone="z1"), 1.0),
              offer("t4", gpus=1, price=0.5, zone="z1", model="T4")]
    p = _plan(name, [job("j", models=("A100-80GB",))], offers=offers)
    assert _launches(p) == [(_key("z2"), 1, Reason.CHEAPEST_OFFER)]
    assert _binds(p) == [("j", ("new-0-0",), Reason.CHEAPEST_OFFER)]
    assert p.unplaced == () and (p.usd_per_hour_before, p.usd_per_hour_after) == (0.0, 1.5)
    how = "failover" if name == "skypilot-failover" else "price-first"
    assert p.actions[0].detail == f"{how}: {_key('z2')} at $1.500/h"


@pytest.mark.parametrize("name", BOTH)
def test_a_bigger_node_is_bought_when_it_is_the_cheaper_node(name):
    """The price is the node's: a 4-GPU spot node at 1.4 an hour beats a 1-GPU one at 1.5 for a 1-GPU job."""
    offers = [offer("g1", gpus=1, price=1.5, zone="z1"), offer("g4", gpus=4, price=1.4, zone="z1")]
    assert _launches(_plan(name, [job("j")], offers=offers)) == [(_key("z1", "g4"), 1, Reason.CHEAPEST_OFFER)]


@pytest.mark.parametrize("name", BOTH)
@pytest.mark.parametrize("spot, priority, market", [
    (False, "batch", "on_demand"),  # the job opts out of spot
    (None, "production", "on_demand"),  # its class is not spot-eligible
    (True, "production", "spot"),  # the job's own setting wins over its class
    (None, "batch", "spot"),
], ids=["job-opts-out", "class-not-eligible", "job-opts-in", "class-eligible"])
def test_spot_only_for_a_job_that_may_use_it(name, spot, priority, market):
    """On-demand z2 at 2.5 is cheaper than z1 at 3.0; spot z1 at 1.0."""
    g1 = offer("g1", gpus=1, price=1.0, zone="z1")
    offers = [g1, _od(g1, 3.0), _od(replace(g1, zone="z2"), 2.5)]
    p = _plan(name, [job("j", spot=spot, priority=priority)], offers=offers)
    if market == "spot":
        assert _launches(p) == [(_key("z1"), 1, Reason.CHEAPEST_OFFER)]
    else:
        assert _launches(p) == [(_key("z2", market="on_demand"), 1, Reason.ON_DEMAND_FALLBACK)]
        assert _binds(p) == [("j", ("new-0-0",), Reason.ON_DEMAND_FALLBACK)]


def _spot_1gpu(**kw):
    """A one-GPU spot offer at 0.5 an hour: A100-80GB, 4 vCPUs, 16 GiB unless told."""
    args = {"vcpus": 4, "memory_gib": 16.0, "gpu_memory_gib": 80.0, "model": "A100-80GB"} | kw
    return offer("s1", gpus=1, price=0.5, zone="z1", **args)


@pytest.mark.parametrize("name", BOTH)
@pytest.mark.parametrize("spot_offer, holds", [
    (_spot_1gpu(), True),  # 4 vCPUs, 16 GiB, 80 GiB of GPU memory: the job's needs exactly
    (_spot_1gpu(vcpus=3), False),
    (_spot_1gpu(memory_gib=15.5), False),
    (_spot_1gpu(gpu_memory_gib=79.0), False),
    (_spot_1gpu(model="V100-16GB"), False),
    (offer("s0", gpus=0, price=0.5, zone="z1", model=None), False),  # no GPU
], ids=["at-the-edges", "vcpus", "memory", "gpu-memory", "gpu-model", "no-gpu"])
def test_on_demand_only_when_no_spot_offer_holds_a_worker(name, spot_offer, holds):
    """The job: 1 A100-80GB with 80 GiB, 4 vCPUs, 16 GiB. A one-GPU on-demand offer at 3.0 holds it."""
    j = replace(job("j", models=("A100-80GB",), vcpus=4, memory_gib=16), gpu_memory_gib_per_gpu=80.0)
    on_demand = _od(offer("g1", gpus=1, zone="z1"), 3.0)
    p = _plan(name, [j], offers=[spot_offer, on_demand])
    if holds:
        assert _launches(p) == [(_key("z1", "s1"), 1, Reason.CHEAPEST_OFFER)]
    else:
        assert _launches(p) == [(_key("z1", market="on_demand"), 1, Reason.ON_DEMAND_FALLBACK)]


@pytest.mark.parametrize("name", BOTH)
def test_no_offer_holds_the_job_and_the_next_is_served(name):
    """a (2 GPUs, served first) fits no offer; b (1 GPU) still gets one."""
    offers = [offer("g1", gpus=1, price=1.0), _od(offer("g1", gpus=1), 3.0)]
    p = _plan(name, [job("a", gpus=2), job("b")], offers=offers)
    assert _unplaced(p) == [("a", Reason.NO_ALLOWED_OFFER)]
    assert _launches(p) == [(_key("z1"), 1, Reason.CHEAPEST_OFFER)] and [b[0] for b in _binds(p)] == ["b"]


@pytest.mark.parametrize("name", BOTH)
def test_the_policys_allow_lists_and_a_free_offer_are_left_out(name):
    """Region r2 (0.5) is outside the policy's regions, a price of 0 is no offer: r1 at 1.0."""
    offers = [offer("g1", gpus=1, price=0.5, region="r2"), offer("g1", gpus=1, price=0.0, zone="z0"),
              offer("g1", gpus=1, price=1.0)]
    p = _plan(name, [job("j")], offers=offers, pol=policy(regions=("r1",)))
    assert _launches(p) == [(_key("z1"), 1, Reason.CHEAPEST_OFFER)]


@pytest.mark.parametrize("name", BOTH)
@pytest.mark.parametrize("workers, vcpus, memory_gib, nodes", [
    (3, 4, 16, ("new-0-0", "new-0-0", "new-0-1")),  # 2 workers of 2 GPUs a node (4 GPUs): 2 nodes
    (2, 25, 16, ("new-0-0", "new-0-1")),  # 25 vCPUs a worker, 48 a node: one worker a node
    (2, 4, 300, ("new-0-0", "new-0-1")),  # 300 GiB a worker, 512 a node: one worker a node
], ids=["gpus", "vcpus", "memory"])
def test_a_gang_is_packed_on_as_few_nodes_as_hold_it(name, workers, vcpus, memory_gib, nodes):
    """g4: 4 GPUs, 48 vCPUs, 512 GiB at 8.0 an hour."""
    g4 = offer("g4", gpus=4, price=8.0)
    p = _plan(name, [job("j", workers=workers, gpus=2, vcpus=vcpus, memory_gib=memory_gib)], offers=[g4])
    count = len(set(nodes))
    assert _launches(p) == [(_key("z1", "g4"), count, Reason.CHEAPEST_OFFER)]
    assert _binds(p) == [("j", nodes, Reason.CHEAPEST_OFFER)]
    assert p.usd_per_hour_after == 8.0 * count


# --------------------------------------------------------------------------- _fits_worker


@pytest.mark.parametrize("gpus, vcpus, memory_gib, gpu_memory, models, per", [
    (2, 4, 16, 0.0, (), 4),  # 8 GPUs / 2
    (3, 4, 16, 0.0, (), 2),  # 8 // 3
    (8, 4, 16, 0.0, (), 1),
    (9, 4, 16, 0.0, (), 0),
    (2, 40, 16, 0.0, (), 2),  # 96 vCPUs // 40
    (2, 4, 400, 0.0, (), 2),  # 1024 GiB // 400
    (2, 97, 16, 0.0, (), 0),
    (2, 4, 1025, 0.0, (), 0),
    (0, 2.5, 0, 0.0, (), 38),  # no GPU: 96 // 2.5 vCPUs
    (0, 0, 100, 0.0, (), 10),  # 1024 // 100 GiB
    (0, 1, 0, 0.0, (), 96),  # one vCPU a worker counts
    (0, 0.5, 0, 0.0, (), 192),
    (0, 0, 1, 0.0, (), 1024),  # one GiB a worker counts
    (0, 0, 0.5, 0.0, (), 2048),
    (0, 0, 0, 0.0, (), 1 << 30),  # needs nothing: no limit
    (1, 4, 16, 80.0, ("A100-80GB",), 8),  # GPU memory and model at the edge
    (1, 4, 16, 81.0, (), 0),
    (1, 4, 16, 0.0, ("V100-16GB",), 0),
])
def test_fits_worker_counts_the_workers_one_node_holds(gpus, vcpus, memory_gib, gpu_memory, models, per):
    """g8: 8 A100-80GB (80 GiB each), 96 vCPUs, 1024 GiB."""
    g8 = offer("g8", gpus=8)
    j = replace(job("j", gpus=gpus, vcpus=vcpus, memory_gib=memory_gib, models=models),
                gpu_memory_gib_per_gpu=gpu_memory)
    assert _fits_worker(j, g8) == per


def test_fits_worker_of_a_cpu_job_ignores_the_gpu_fields():
    """A job without GPUs on a CPU node (no GPU model, no GPU memory), whatever its GPU model and memory say."""
    c = offer("c16", gpus=0, model=None, vcpus=16, memory_gib=64)
    j = replace(job("j", gpus=0, vcpus=4, memory_gib=8, models=("A100-80GB",)), gpu_memory_gib_per_gpu=80.0)
    assert _fits_worker(j, c) == 4


# --------------------------------------------------------------------------- free room


def _spot_node(node_id, gpus, price, state=NodeState.READY, zone="z1"):
    return node(node_id, offer(f"g{gpus}", gpus=gpus, price=price, zone=zone), state=state)


def test_spot_greedy_binds_to_the_tightest_free_room_first():
    """big: 8 GPUs, 1 used (7 free); small: 2 GPUs, 1 used (1 free). The first job fits small exactly; small is then
    full, so the second goes to big. Nothing is bought."""
    fleet = [_spot_node("big", 8, 10.0), _spot_node("small", 2, 3.0)]
    running = [_running("r1", "big"), _running("r2", "small")]
    queue = [*running, job("q1", submitted=T0), job("q2", submitted=T0 + timedelta(minutes=1))]
    p = _plan("spot-greedy", queue, fleet, offers=[offer("g1", gpus=1, price=0.1)])
    assert _binds(p) == [("q1", ("small",), Reason.FITS_FREE_CAPACITY), ("q2", ("big",), Reason.FITS_FREE_CAPACITY)]
    assert _launches(p) == [] and _terms(p) == []
    assert p.usd_per_hour_before == p.usd_per_hour_after == 13.0


@pytest.mark.parametrize("prices, chosen", [((2.0, 1.0), "b"), ((1.0, 1.0), "a")], ids=["cheaper", "by-id"])
def test_spot_greedy_free_room_ties_go_to_the_cheaper_node_then_the_id(prices, chosen):
    fleet = [_spot_node("a", 2, prices[0]), _spot_node("b", 2, prices[1], zone="z2")]
    p = _plan("spot-greedy", [job("q")], fleet, offers=[])
    assert _binds(p) == [("q", (chosen,), Reason.FITS_FREE_CAPACITY)]


@pytest.mark.parametrize("state, used", [
    (NodeState.READY, True), (NodeState.LAUNCHING, True), (NodeState.DRAINING, False), (NodeState.GONE, False)])
def test_spot_greedy_free_room_only_on_schedulable_nodes(state, used):
    fleet = [_spot_node("n", 2, 1.0, state=state)]
    p = _plan("spot-greedy", [job("q")], fleet, offers=[offer("g1", gpus=1, price=5.0)])
    if used:
        assert _binds(p) == [("q", ("n",), Reason.FITS_FREE_CAPACITY)] and _launches(p) == []
    else:
        assert _binds(p) == [("q", ("new-0-0",), Reason.CHEAPEST_OFFER)]


@pytest.mark.parametrize("spot, market, used", [
    (False, Market.SPOT, False), (False, Market.ON_DEMAND, True), (True, Market.ON_DEMAND, True)])
def test_spot_greedy_free_room_on_spot_only_for_a_spot_eligible_job(spot, market, used):
    n = node("n", replace(offer("g2", gpus=2, price=1.0), market=market))
    p = _plan("spot-greedy", [job("q", spot=spot)], [n], offers=[_od(offer("g1", gpus=1), 5.0)])
    assert _binds(p) == ([("q", ("n",), Reason.FITS_FREE_CAPACITY)] if used else
                         [("q", ("new-0-0",), Reason.ON_DEMAND_FALLBACK)])


@pytest.mark.parametrize("vcpus, memory_gib, gpus, model, used", [
    (4, 16, 1, (), True),  # 24 - 20 = 4 vCPUs, 256 - 240 = 16 GiB, 1 GPU left: exactly the job's needs
    (5, 16, 1, (), False),
    (4, 17, 1, (), False),
    (4, 16, 2, (), False),
    (4, 16, 1, ("V100-16GB",), False),
], ids=["exactly", "vcpus", "memory", "gpus", "model"])
def test_spot_greedy_free_room_counts_what_the_running_jobs_use(vcpus, memory_gib, gpus, model, used):
    """n: 2 GPUs, 24 vCPUs, 256 GiB; r uses 1 GPU, 20 vCPUs, 240 GiB."""
    fleet = [_spot_node("n", 2, 1.0)]
    queue = [_running("r", "n", vcpus=20, memory_gib=240), job("q", gpus=gpus, vcpus=vcpus, memory_gib=memory_gib,
                                                              models=model)]
    offers = [offer("g8", gpus=8, price=5.0), offer("v8", gpus=8, price=6.0, model="V100-16GB", gpu_memory_gib=16.0)]
    p = _plan("spot-greedy", queue, fleet, offers=offers)
    assert _binds(p) == ([("q", ("n",), Reason.FITS_FREE_CAPACITY)] if used else
                         [("q", ("new-0-0",), Reason.CHEAPEST_OFFER)])


@pytest.mark.parametrize("need", [{"vcpus": 5}, {"memory_gib": 129}], ids=["vcpus", "memory"])
def test_spot_greedy_free_room_counts_what_the_plan_bound_there(need):
    """n: 2 GPUs, 24 vCPUs, 256 GiB. q1 takes 1 GPU and 5 vCPUs (129 GiB); q2 (1 GPU, 20 vCPUs, 128 GiB) no longer
    fits beside it and buys a node of its own."""
    fleet = [_spot_node("n", 2, 1.0)]
    q1 = job("q1", **({"vcpus": 4, "memory_gib": 16} | need))
    q2 = job("q2", vcpus=20, memory_gib=128)
    p = _plan("spot-greedy", [q1, q2], fleet, offers=[offer("g8", gpus=8, price=5.0)])
    assert _binds(p) == [("q1", ("n",), Reason.FITS_FREE_CAPACITY), ("q2", ("new-0-0",), Reason.CHEAPEST_OFFER)]
    # without q1, q2 fits there exactly (20 of 24 vCPUs, 128 of 256 GiB): it was q1's share that was counted
    assert _binds(_plan("spot-greedy", [q2], fleet, offers=[offer("g8", gpus=8, price=5.0)])) == [
        ("q2", ("n",), Reason.FITS_FREE_CAPACITY)]


@pytest.mark.parametrize("need", [
    {"gpus": 2},  # a takes 2 of 4 GPUs: b and c take one each
    {"vcpus": 24},  # a takes 24 of 48 vCPUs: b takes the other 24, c's one vCPU is not left
    {"memory_gib": 256},  # a takes 256 of 512 GiB: likewise
], ids=["gpus", "vcpus", "memory"])
def test_spot_greedy_binds_the_next_jobs_to_room_on_a_node_just_bought(need):
    """Only g4 (4 GPUs, 48 vCPUs, 512 GiB) is offered: a buys one; b (1 GPU and, when a's need is vCPUs or
    memory, as much of it as a) and c (1 GPU, 1 vCPU, 1 GiB) use what a leaves; d (the same as c) then finds the
    node full and buys another (or, when c did, uses c's)."""
    small = {"gpus": 1, "vcpus": 1, "memory_gib": 1}
    b_need = small | {k: v for k, v in need.items() if k != "gpus"}
    queue = [job("a", **(small | need)), job("b", **b_need), job("c", **small), job("d", **small)]
    p = _plan("spot-greedy", queue, offers=[offer("g4", gpus=4, price=4.0)])
    assert _launches(p) == [(_key("z1", "g4"), 1, Reason.CHEAPEST_OFFER)] * 2
    if "gpus" in need:  # a 2, b 1, c 1: full for d
        assert _binds(p) == [("a", ("new-0-0",), Reason.CHEAPEST_OFFER),
                             ("b", ("new-0-0",), Reason.FITS_FREE_CAPACITY),
                             ("c", ("new-0-0",), Reason.FITS_FREE_CAPACITY), ("d", ("new-1-0",), Reason.CHEAPEST_OFFER)]
    else:  # a and b take all the vCPUs (memory): c buys the second node, d uses it
        assert _binds(p) == [("a", ("new-0-0",), Reason.CHEAPEST_OFFER),
                             ("b", ("new-0-0",), Reason.FITS_FREE_CAPACITY),
                             ("c", ("new-1-0",), Reason.CHEAPEST_OFFER), ("d", ("new-1-0",), Reason.FITS_FREE_CAPACITY)]


def test_spot_greedy_does_not_bind_a_gang_to_free_room():
    fleet = [_spot_node("n", 8, 1.0)]
    p = _plan("spot-greedy", [job("g", workers=2)], fleet, offers=[offer("g1", gpus=1, price=1.0)])
    assert _launches(p) == [(_key("z1"), 2, Reason.CHEAPEST_OFFER)]
    assert _binds(p) == [("g", ("new-0-0", "new-0-1"), Reason.CHEAPEST_OFFER)]


def test_skypilot_failover_buys_one_cluster_per_job_and_lets_an_empty_node_go_at_once():
    """An empty ready node that became idle this instant: spot-greedy uses it, failover buys a node of its own and
    terminates the empty one."""
    fleet = [replace(_spot_node("n", 2, 1.0), idle_since_utc=T0)]
    offers = [offer("g1", gpus=1, price=1.0)]
    greedy = _plan("spot-greedy", [job("a"), job("b")], fleet, offers=offers)
    assert _binds(greedy) == [("a", ("n",), Reason.FITS_FREE_CAPACITY), ("b", ("n",), Reason.FITS_FREE_CAPACITY)]
    p = _plan("skypilot-failover", [job("a"), job("b")], fleet, offers=offers)
    assert _launches(p) == [(_key("z1"), 1, Reason.CHEAPEST_OFFER)] * 2
    assert _binds(p) == [("a", ("new-0-0",), Reason.CHEAPEST_OFFER), ("b", ("new-1-0",), Reason.CHEAPEST_OFFER)]
    assert _terms(p) == [("n", Reason.IDLE)]
    assert (p.usd_per_hour_before, p.usd_per_hour_after) == (1.0, 2.0)


# --------------------------------------------------------------------------- after a reclaim


def test_a_job_whose_node_is_gone_is_placed_again_on_the_cheapest_spot_left():
    """j was bound to n (reclaimed: gone); z1's offer has no capacity now, so it is not offered: z2 (1.2), not z3."""
    gone = _spot_node("n", 1, 1.0, state=NodeState.GONE)
    j = replace(job("j"), state=JobState.BOUND, node_ids=("n",))
    offers = [offer("g1", gpus=1, price=1.3, zone="z3"), offer("g1", gpus=1, price=1.2, zone="z2")]
    for name in BOTH:
        p = _plan(name, [j], [gone], offers=offers)
        assert _launches(p) == [(_key("z2"), 1, Reason.CHEAPEST_OFFER)] and _binds(p)[0][:2] == ("j", ("new-0-0",))


@pytest.mark.parametrize("name", BOTH)
def test_a_gang_with_one_node_gone_is_placed_again_whole(name):
    alive = _spot_node("a", 1, 1.0)
    j = replace(job("j", workers=2), state=JobState.RUNNING, node_ids=("a", "b"))
    p = _plan(name, [j], [alive], offers=[offer("g1", gpus=1, price=1.0, zone="z2")])
    assert _launches(p) == [(_key("z2"), 2, Reason.CHEAPEST_OFFER)]
    assert _binds(p) == [("j", ("new-0-0", "new-0-1"), Reason.CHEAPEST_OFFER)]


@pytest.mark.parametrize("avoid, failover_takes", [
    ((), _key("z1")),
    ((_key("z1"),), _key("z2")),  # the next-cheapest zone
    ((_key("z1"), _key("z2")), _key("z3")),
    ((_key("z1"), _key("z2"), _key("z3")), _key("z1", market="on_demand")),  # every zone failed it
], ids=["none-failed", "z1-failed", "z1-z2-failed", "all-failed"])
def test_skypilot_failover_takes_the_cheapest_zone_it_has_not_failed_in(avoid, failover_takes):
    """Spot z1 1.0, z2 1.1, z3 1.2, on-demand 3.0; spot-greedy keeps no memory of the zones that failed the job."""
    g1 = offer("g1", gpus=1, price=1.0, zone="z1")
    offers = [g1, replace(g1, zone="z2", usd_per_hour=1.1), replace(g1, zone="z3", usd_per_hour=1.2), _od(g1, 3.0)]
    j = replace(job("j"), avoid_offer_keys=avoid, priority_boost=100.0 if avoid else 0.0)
    assert _launches(_plan("skypilot-failover", [j], offers=offers))[0][0] == failover_takes
    assert _launches(_plan("spot-greedy", [j], offers=offers))[0][0] == _key("z1")


def test_skypilot_failover_goes_on_demand_when_the_zones_left_have_no_capacity():
    """z1 failed the job; z2 has no capacity (not offered): on-demand."""
    g1 = offer("g1", gpus=1, price=1.0, zone="z1")
    j = replace(job("j"), avoid_offer_keys=(_key("z1"),))
    p = _plan("skypilot-failover", [j], offers=[g1, _od(g1, 3.0), _od(replace(g1, zone="z2"), 3.5)])
    assert _launches(p) == [(_key("z1", market="on_demand"), 1, Reason.ON_DEMAND_FALLBACK)]


# --------------------------------------------------------------------------- limits and order


@pytest.mark.parametrize("name", BOTH)
@pytest.mark.parametrize("budget, placed", [(3.0, True), (2.99, False), (None, True)])
def test_the_budget_counts_the_held_nodes_and_the_new_one(name, budget, placed):
    """Held: an on-demand node at 1.0 an hour, full; the job needs a spot node at 2.0: 3.0 an hour in all."""
    n = node("n", _od(offer("g1", gpus=1), 1.0))
    p = _plan(name, [_running("r", "n"), job("q")], [n], offers=[offer("g1", gpus=1, price=2.0, zone="z2")],
              pol=policy(max_usd_per_hour=budget))
    if placed:
        assert _launches(p) == [(_key("z2"), 1, Reason.CHEAPEST_OFFER)] and p.usd_per_hour_after == 3.0
    else:
        assert p.actions == () and _unplaced(p) == [("q", Reason.BUDGET_EXCEEDED)]
        assert p.unplaced[0].detail == "$3.00/h above the budget of $2.99/h"
        assert p.usd_per_hour_before == p.usd_per_hour_after == 1.0


@pytest.mark.parametrize("name", BOTH)
def test_the_budget_is_compared_with_a_float_tolerance_and_the_next_job_is_served(name):
    """Held 0.1 an hour; a 0.2 node makes 0.30000000000000004 in floats, within a budget of 0.3. With a budget of
    0.5: b (2 GPUs, served after a) needs a 2-GPU node at 1.0, over it, unplaced; c (1 GPU) after it gets 0.2."""
    n = node("n", _od(offer("g1", gpus=1), 0.1))
    offers = [offer("g1", gpus=1, price=0.2, zone="z2"), offer("g2", gpus=2, price=1.0, zone="z2")]
    queue = [_running("r", "n"), job("a"), job("b", gpus=2, submitted=T0 + timedelta(minutes=1)),
             job("c", submitted=T0 + timedelta(minutes=2))]
    p = _plan(name, queue[:2], [n], offers=offers, pol=policy(max_usd_per_hour=0.3))
    assert 0.1 + 0.2 > 0.3 and _binds(p) == [("a", ("new-0-0",), Reason.CHEAPEST_OFFER)]
    p = _plan(name, queue, [n], offers=offers, pol=policy(max_usd_per_hour=0.5))
    assert _unplaced(p) == [("b", Reason.BUDGET_EXCEEDED)]
    assert [bd[:2] for bd in _binds(p)] == [("a", ("new-0-0",)), ("c", ("new-1-0",))]
    assert p.usd_per_hour_after == 0.5


@pytest.mark.parametrize("name", BOTH)
@pytest.mark.parametrize("max_gpus, placed", [(5, True), (4, False)])
def test_max_gpus_counts_the_gpus_of_the_nodes_bought(name, max_gpus, placed):
    """Held: a full 1-GPU node; the only offer is a 4-GPU node, for a 1-GPU job: 5 GPUs in all."""
    n = node("n", _od(offer("g1", gpus=1), 1.0))
    p = _plan(name, [_running("r", "n"), job("q")], [n], offers=[offer("g4", gpus=4, price=2.0)],
              pol=policy(max_gpus=max_gpus))
    if placed:
        assert _launches(p) == [(_key("z1", "g4"), 1, Reason.CHEAPEST_OFFER)]
    else:
        assert p.actions == () and _unplaced(p) == [("q", Reason.CAPACITY_LIMIT)]
        assert p.unplaced[0].detail == f"max_gpus {max_gpus} reached"


@pytest.mark.parametrize("name", BOTH)
def test_a_job_over_max_gpus_does_not_stop_the_next(name):
    """max_gpus 2: a (3 GPUs, served first) needs the 4-GPU node, b (1 GPU) the 1-GPU one."""
    offers = [offer("g1", gpus=1, price=1.0), offer("g4", gpus=4, price=4.0)]
    p = _plan(name, [job("a", gpus=3), job("b")], offers=offers, pol=policy(max_gpus=2))
    assert _unplaced(p) == [("a", Reason.CAPACITY_LIMIT)]
    assert _launches(p) == [(_key("z1"), 1, Reason.CHEAPEST_OFFER)] and [b[0] for b in _binds(p)] == ["b"]


@pytest.mark.parametrize("name", BOTH)
def test_the_plans_usd_per_hour_are_rounded_to_6_decimals(name):
    """Held 0.1234567 an hour (busy); bought 1.0000014: 1.1234581 in all."""
    n = _spot_node("n", 1, 0.1234567)
    p = _plan(name, [_running("r", "n"), job("q")], [n], offers=[offer("g1", gpus=1, price=1.0000014, zone="z2")])
    assert (p.usd_per_hour_before, p.usd_per_hour_after) == (0.123457, 1.123458)


@pytest.mark.parametrize("name", BOTH)
def test_the_limits_count_what_the_plan_already_bought(name):
    """Two jobs, each a 1-GPU node at 2.0: the budget (3.0) or max_gpus (1) leaves room for the first only."""
    offers = [offer("g1", gpus=1, price=2.0)]
    queue = [job("a"), job("b", submitted=T0 + timedelta(minutes=1))]
    for pol, reason in ((policy(max_usd_per_hour=3.0), Reason.BUDGET_EXCEEDED),
                        (policy(max_gpus=1), Reason.CAPACITY_LIMIT)):
        p = _plan(name, queue, offers=offers, pol=pol)
        assert [b[0] for b in _binds(p)] == ["a"] and _unplaced(p) == [("b", reason)]
        assert p.usd_per_hour_after == 2.0


@pytest.mark.parametrize("name", BOTH)
@pytest.mark.parametrize("a, b, first", [
    ({"priority": "batch"}, {"priority": "production", "spot": True}, "b"),  # class value 1000 over 100
    ({"priority": "batch", "boost": 901.0}, {"priority": "production", "spot": True}, "a"),  # 100 + 901 > 1000
    ({"priority": "batch", "boost": 900.0}, {"priority": "production", "spot": True, "submitted": -1}, "b"),  # a tie
    ({"submitted": 2}, {"submitted": 1}, "b"),
    ({}, {}, "a"),  # then the job id
], ids=["class", "boost", "boost-tie", "submitted", "job-id"])
def test_the_queue_is_served_by_priority_and_boost_then_submission_then_id(name, a, b, first):
    """max_gpus 1: only the first job served gets a node."""
    def make(job_id, kw):
        j = job(job_id, priority=kw.get("priority", "batch"), spot=kw.get("spot"),
                submitted=T0 + timedelta(minutes=kw.get("submitted", 0)))
        return replace(j, priority_boost=kw.get("boost", 0.0))
    jobs = [make("a", a), make("b", b)]
    p = _plan(name, jobs, offers=[offer("g1", gpus=1, price=1.0)], pol=policy(max_gpus=1))
    assert [bd[0] for bd in _binds(p)] == [first]


def test_a_finished_job_that_still_names_its_node_takes_no_room_there():
    fleet = [_spot_node("n", 1, 1.0)]
    done = replace(job("done"), state=JobState.SUCCEEDED, node_ids=("n",))
    p = _plan("spot-greedy", [done, job("q")], fleet, offers=[offer("g1", gpus=1, price=0.5)])
    assert _binds(p) == [("q", ("n",), Reason.FITS_FREE_CAPACITY)] and _launches(p) == []


def test_jobs_done_or_bound_to_live_nodes_are_not_placed_again():
    fleet = [_spot_node("n", 1, 1.0)]
    queue = [replace(job("done"), state=JobState.SUCCEEDED), replace(job("failed"), state=JobState.FAILED),
             replace(job("bound"), state=JobState.BOUND, node_ids=("n",))]
    for name in BOTH:
        p = _plan(name, queue, fleet, offers=[offer("g1", gpus=1, price=1.0)])
        assert p.actions == () and p.unplaced == ()


# --------------------------------------------------------------------------- terminations


@pytest.mark.parametrize("idle_since, ready_at, gone", [
    (T0 - timedelta(minutes=10), None, True),  # the idle timeout (10 min) reached
    (T0 - timedelta(minutes=10) + timedelta(seconds=1), None, False),
    (None, T0 - timedelta(minutes=10), True),  # never held a job: idle since ready
    (None, T0 - timedelta(minutes=9), False),
], ids=["at-the-timeout", "a-second-before", "since-ready", "ready-9-min"])
def test_spot_greedy_lets_an_idle_node_go_after_the_idle_timeout(idle_since, ready_at, gone):
    n = replace(_spot_node("n", 1, 1.5), idle_since_utc=idle_since, ready_at_utc=ready_at)
    p = _plan("spot-greedy", [], [n], offers=[])
    assert _terms(p) == ([("n", Reason.IDLE)] if gone else [])
    assert (p.usd_per_hour_before, p.usd_per_hour_after) == (1.5, 0.0 if gone else 1.5)


def test_a_ready_node_without_times_is_kept():
    n = replace(_spot_node("n", 1, 1.5), idle_since_utc=None, ready_at_utc=None)
    assert _terms(_plan("spot-greedy", [], [n], offers=[])) == []


@pytest.mark.parametrize("name", BOTH)
def test_drained_empty_nodes_go_busy_and_launching_ones_stay(name):
    """drained: draining and empty (goes); draining-busy: draining with a job; launching: empty but not ready;
    busy: ready with a job; idle: ready and empty since this instant (goes for failover only)."""
    fleet = [_spot_node("drained", 1, 1.0, state=NodeState.DRAINING),
             _spot_node("draining-busy", 1, 2.0, state=NodeState.DRAINING),
             _spot_node("launching", 1, 4.0, state=NodeState.LAUNCHING),
             _spot_node("busy", 1, 8.0), replace(_spot_node("idle", 1, 16.0), idle_since_utc=T0)]
    queue = [_running("r1", "draining-busy"), _running("r2", "busy")]
    p = _plan(name, queue, fleet, offers=[])
    if name == "spot-greedy":
        assert _terms(p) == [("drained", Reason.INTERRUPTION)]
        assert (p.usd_per_hour_before, p.usd_per_hour_after) == (31.0, 30.0)
    else:
        assert _terms(p) == [("drained", Reason.INTERRUPTION), ("idle", Reason.IDLE)]
        assert (p.usd_per_hour_before, p.usd_per_hour_after) == (31.0, 14.0)


def test_a_node_given_a_job_in_the_plan_is_not_let_go():
    n = replace(_spot_node("n", 1, 1.0), idle_since_utc=T0 - timedelta(hours=1))
    p = _plan("spot-greedy", [job("q")], [n], offers=[])
    assert _binds(p) == [("q", ("n",), Reason.FITS_FREE_CAPACITY)] and _terms(p) == []
