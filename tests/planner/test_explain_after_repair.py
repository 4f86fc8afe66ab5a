"""After the buy step, local repairs change what was bought: a node is swapped
for a cheaper offer that holds the same jobs (``_downsize_nodes``), or is not
bought at all when its jobs fit in room left on the pass's other new nodes
(``_eliminate_nodes``). The job's explanation said only "chose X", so `fleetctl
explain` named a purchase the plan no longer made (37 of 400 random small worlds).
Now a "then ..." line says what became of it, and the last line that names a
purchase names what the job is bound to."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import Forecast, JobState, Market, OfferRisk, Reason
from fleetctl.planner import plan
from tests.builders import T0, job, node, offer, policy


def _bought(p, job_id: str):  # noqa: ANN001, ANN202 - a Plan
    """The offer of the new node the job is bound to."""
    offers = {n: launch.offer for launch in p.of_kind("launch") for n in launch.node_names}
    [bind] = [b for b in p.of_kind("bind") if b.job_id == job_id]
    return bind.node_ids, offers[bind.node_ids[0]]


def test_a_node_swapped_for_a_cheaper_offer_says_so_in_its_jobs_explanations():
    offers = [offer("t2", gpus=2, price=2.65, zone="z1"), offer("t4", gpus=4, price=2.19, zone="z1"),
              offer("t1", gpus=1, price=1.18, zone="z2")]
    queue = [job(f"j{i}", gpus=g, submitted=T0 + timedelta(seconds=i)) for i, g in enumerate((1, 2, 4))]
    p = plan(now=T0, queue=queue, fleet=(), offers=offers, forecast=None, policy=policy(min_distinct_offers=2))
    _nodes, bought = _bought(p, "j1")
    assert (bought.instance_type.name, bought.market) == ("t4", Market.SPOT)
    considered = p.explanation("j1").considered
    assert considered[1].startswith("chose 1 x t2 spot in aws r1/z1 ($2.65/h")  # what the buy step chose
    assert considered[-1] == ("then its node is bought as 1 x t4 spot in aws r1/z1 ($2.19/h), not t2 spot: cheaper "
                              "for the jobs on it, expected loss included"), considered
    # its bind names the node it runs on as every bind does, with the count (before 2026-11-28: "on new t4")
    assert {b.job_id: b.detail for b in p.of_kind("bind")}["j1"] == "1 x 2 GPU on 1 new t4 (spot) in aws r1/z1"


def test_a_node_not_bought_after_all_names_where_its_job_went():
    offers = [offer("t2", gpus=2, price=2.53, zone="z2"), offer("t8", gpus=8, price=11.21, zone="z1"),
              offer("t8", gpus=8, price=5.01, zone="z1", market=Market.ON_DEMAND),
              offer("t1", gpus=1, price=0.6, zone="z1", market=Market.ON_DEMAND),
              offer("t4", gpus=4, price=3.85, zone="z2", market=Market.ON_DEMAND)]
    queue = [job(f"j{i}", gpus=g, submitted=T0 + timedelta(seconds=i)) for i, g in enumerate((2, 4, 2))]
    p = plan(now=T0, queue=queue, fleet=(), offers=offers, forecast=None, policy=policy(min_distinct_offers=2))
    nodes, bought = _bought(p, "j0")
    assert (bought.instance_type.name, bought.market) == ("t8", Market.ON_DEMAND)
    # the node not bought is not launched: every node launched holds a job
    assert {n for launch in p.of_kind("launch") for n in launch.node_names} == {
        n for b in p.of_kind("bind") for n in b.node_ids}
    considered = p.explanation("j0").considered
    assert considered[1].startswith("chose 1 x t2 spot in aws r1/z2 ($2.53/h")
    assert considered[-2] == (f"then placed on room left on {nodes[0]}, bought in this pass: the 1 x t2 spot in aws "
                              "r1/z2 ($2.53/h) chosen for it is not bought"), considered
    # and the node it went to was then swapped for a cheaper offer itself
    assert considered[-1] == ("then its node is bought as 1 x t8 on_demand in aws r1/z1 ($5.01/h), not t8 spot: "
                              "cheaper for the jobs on it, expected loss included"), considered


def _fallback_swapped_to_spot():  # noqa: ANN202 - a Plan
    """A busy $30 on-demand 8-GPU node, q0 (4 GPUs, any model) and q1 (2 x H100) under a 50% spot share."""
    h100 = "H100-80GB"
    offers = [offer("h8", price=24.0, model=h100), offer("h8", price=72.0, model=h100, market=Market.ON_DEMAND),
              offer("a4", gpus=4, price=4.0), offer("a4", gpus=4, price=12.0, market=Market.ON_DEMAND)]
    busy = node("n", offer("a8", price=30.0, market=Market.ON_DEMAND))
    r = replace(job("r", gpus=8), state=JobState.RUNNING, node_ids=("n",), started_at_utc=T0 - timedelta(hours=1))
    return plan(now=T0, queue=(r, job("q0", gpus=4), job("q1", gpus=2, models=(h100,))), fleet=(busy,), offers=offers,
                forecast=None, policy=policy(max_spot_share=0.5))


def test_a_job_whose_on_demand_node_is_swapped_for_spot_is_no_on_demand_fallback():
    # A busy $30 on-demand 8-GPU node; the 50% spot share is checked against the step's projected 14 GPUs.
    # q0 (4 GPUs, any model) buys a4 spot (4 of 14); q1 (2 x H100) finds h8 spot past the share (12 of 20 spot)
    # and falls back to h8 on-demand ($72), bound as on_demand_fallback. The repairs then move q0 into h8's room
    # (a4 not bought) and swap h8 on-demand for h8 spot ($24; 8 of 16 GPUs spot, at the share). On spot, q1 is
    # no fallback any more (docs/reasons.md: on_demand_fallback is spot-eligible work on on-demand); before,
    # its bind kept the reason.
    p = _fallback_swapped_to_spot()
    (launch,) = p.of_kind("launch")
    assert (launch.offer.instance_type.name, launch.offer.market, launch.count) == ("h8", Market.SPOT, 1)
    assert {b.job_id: b.reason for b in p.of_kind("bind")} == {"q0": Reason.FITS_NEW_CAPACITY,
                                                               "q1": Reason.FITS_NEW_CAPACITY}
    assert p.explanation("q1").considered[-1] == (
        "then its node is bought as 1 x h8 spot in aws r1/z1 ($24.00/h), not h8 on_demand: cheaper for the jobs on "
        "it, expected loss included")


def test_a_spot_node_whose_room_a_long_job_took_is_bought_on_demand():
    # short (1 h) chooses s8 spot ($8 + $0.12/h expected loss) over o8 on-demand ($9); long (100 h, no
    # checkpoints) takes the rest of its node, where a reclaim would lose half its run: 0.05 x 50 h x half of $8
    # = $10/h more. The repair weighs o8, dearer in dollars but cheaper with the loss (before 2026-11-28 it
    # looked only at cheaper offers), and both jobs say what happened.
    offers = [offer("s8", price=8.0), offer("o8", price=9.0, market=Market.ON_DEMAND)]
    queue = [job("short", gpus=4, duration_hours=1.0),
             job("long", gpus=4, duration_hours=100.0, submitted=T0 + timedelta(seconds=1))]
    p = plan(now=T0, queue=tuple(queue), fleet=(), offers=tuple(offers), forecast=None, policy=policy())
    assert [(l.offer.instance_type.name, l.offer.market, l.count) for l in p.of_kind("launch")] == [
        ("o8", Market.ON_DEMAND, 1)]
    assert {b.job_id: (b.node_ids, b.reason) for b in p.of_kind("bind")} == {
        "short": (("new-1",), Reason.ON_DEMAND_FALLBACK), "long": (("new-1",), Reason.ON_DEMAND_FALLBACK)}
    swapped = ("then its node is bought as 1 x o8 on_demand in aws r1/z1 ($9.00/h), not s8 spot: cheaper for the "
               "jobs on it, expected loss included")
    short = p.explanation("short").considered
    assert short[1] == "chose 1 x s8 spot in aws r1/z1 ($8.00/h + $0.12/h expected loss)" and short[-1] == swapped
    # before 2026-11-28 a job that took room on a node bought for another said only "free capacity: ..."
    assert p.explanation("long").considered == ("free capacity: no node (or zone) with room for it",
                                                 "took room left on new-1, bought in this pass for another job",
                                                 swapped)


def test_a_gangs_nodes_swapped_alike_are_one_line_of_its_explanation():
    # A gang of 3 x (1 GPU, 30 vCPUs) chooses three 4-GPU nodes ($2 each, 32 vCPUs) for the GPUs f is expected
    # to fill, but f (30 vCPUs) does not fit beside a worker: the repair makes each node a 1-GPU one ($1.50).
    # One line says so for the three (before 2026-11-28 the same line three times).
    offers = [offer("big", gpus=4, price=2.0, vcpus=32), offer("small", gpus=1, price=1.5, vcpus=32)]
    queue = [job("gang", workers=3, gpus=1, vcpus=30), job("f", gpus=1, vcpus=30, submitted=T0 + timedelta(seconds=1))]
    p = plan(now=T0, queue=tuple(queue), fleet=(), offers=tuple(offers), forecast=None, policy=policy())
    assert [(l.offer.instance_type.name, l.count) for l in p.of_kind("launch")] == [("small", 4)]
    considered = p.explanation("gang").considered
    assert considered[1].startswith("chose 3 x big spot in aws r1/z1 ($6.00/h")
    assert considered[-1] == ("then 3 of its nodes are bought as small spot in aws r1/z1 ($1.50/h each), not big "
                              "spot: cheaper for the jobs on them, expected loss included")
    assert len([line for line in considered if line.startswith("then")]) == 1


def _one_node(offers, queue):
    p = plan(now=T0, queue=tuple(queue), fleet=(), offers=tuple(offers), forecast=None, policy=policy())
    return [(l.offer.instance_type.name, l.offer.market, l.count) for l in p.of_kind("launch")], \
        {b.job_id: b.node_ids for b in p.of_kind("bind")}


def test_a_node_holding_a_job_that_may_not_use_spot_is_not_swapped_for_spot():
    # "safe" (4 GPUs, no spot) buys the $10 on-demand 8-GPU node and "any" (4 GPUs) takes the rest of it; the $5
    # spot node would hold both, but not safe
    offers = [offer("o8", price=10.0, market=Market.ON_DEMAND), offer("s8", price=5.0)]
    queue = [job("safe", gpus=4, spot=False), job("any", gpus=4, submitted=T0 + timedelta(seconds=1))]
    launches, binds = _one_node(offers, queue)
    assert launches == [("o8", Market.ON_DEMAND, 1)] and binds == {"safe": ("new-1",), "any": ("new-1",)}


def test_a_node_holding_a_job_that_needs_80_gib_gpus_is_not_swapped_for_smaller_gpus():
    # "big" (4 GPUs of 80 GiB) buys the $10 80-GiB node and "any" takes the rest; the $6 40-GiB node would hold
    # both, but not big's GPU memory
    offers = [offer("g80", price=10.0), offer("g40", price=6.0, model="A100-40GB", gpu_memory_gib=40.0)]
    queue = [replace(job("big", gpus=4), gpu_memory_gib_per_gpu=80.0),
             job("any", gpus=4, submitted=T0 + timedelta(seconds=1))]
    launches, binds = _one_node(offers, queue)
    assert launches == [("g80", Market.SPOT, 1)] and binds == {"big": ("new-1",), "any": ("new-1",)}


def test_a_node_holding_part_of_a_gang_is_not_swapped_out_of_the_gangs_zone():
    # A 3 x 8-GPU gang: two $15 16-GPU nodes in z1 ($30) beat three $10.50 8-GPU nodes in z2 ($31.50). The
    # second node holds one worker, which a z2 node would hold for less, but the gang must stay in one zone.
    offers = [offer("a16", gpus=16, price=15.0, zone="z1"), offer("b8", price=10.5, zone="z2")]
    launches, binds = _one_node(offers, [job("gang", workers=3, gpus=8)])
    assert launches == [("a16", Market.SPOT, 2)] and sorted(binds["gang"]) == ["new-1", "new-1", "new-2"]


def test_a_swap_that_breaks_a_rule_is_undone_and_not_reported():
    # min_distinct_offers 2: j0 buys a ($8), j1 b ($9). b's node would hold j1 for less as an a node, but then
    # 2 spot nodes would sit on one offer: the swap is undone, and j1's bind and explanation still name b.
    offers = [offer("a", price=8.0), offer("b", price=9.0)]
    queue = [job(f"j{i}", gpus=8, submitted=T0 + timedelta(seconds=i)) for i in range(2)]
    p = plan(now=T0, queue=queue, fleet=(), offers=offers, forecast=None, policy=policy(min_distinct_offers=2))
    assert sorted(l.offer.instance_type.name for l in p.of_kind("launch")) == ["a", "b"]
    _nodes, bought = _bought(p, "j1")
    assert bought.instance_type.name == "b"
    (bind,) = [b for b in p.of_kind("bind") if b.job_id == "j1"]
    assert bind.detail == "1 x 8 GPU on 1 new b (spot) in aws r1/z1"
    assert not any(line.startswith("then") for line in p.explanation("j1").considered)


@pytest.mark.parametrize("thin", [offer("thin", gpus=4, price=5.0, vcpus=16, memory_gib=512),
                                  offer("thin", gpus=4, price=5.0, vcpus=96, memory_gib=64)], ids=["vcpus", "memory"])
def test_a_node_is_not_swapped_for_one_too_small_for_its_jobs_vcpus_or_memory(thin):
    # j (4 GPUs, 64 vCPUs, 256 GiB) on the $10 8-GPU node; the $5 4-GPU node has its GPUs, not its vCPUs or memory
    launches, _binds = _one_node([offer("o8", price=10.0), thin], [job("j", gpus=4, vcpus=64, memory_gib=256)])
    assert launches == [("o8", Market.SPOT, 1)]


def test_a_node_is_not_swapped_for_a_gpu_model_one_of_its_jobs_may_not_use():
    # "h" (4 x H100 only) buys the $10 H100 node and "any" (4 GPUs) takes the rest; the $8 A100 node would hold
    # both, but not h
    offers = [offer("h8", price=10.0, model="H100-80GB"), offer("a8", price=8.0)]
    queue = [job("h", gpus=4, models=("H100-80GB",)), job("any", gpus=4, submitted=T0 + timedelta(seconds=1))]
    launches, binds = _one_node(offers, queue)
    assert launches == [("h8", Market.SPOT, 1)] and binds == {"h": ("new-1",), "any": ("new-1",)}


_GANG_OFFERS = [offer("a16", gpus=16, price=15.0, market=Market.ON_DEMAND),
                offer("a8", price=10.5, market=Market.ON_DEMAND), offer("s8", price=4.0, zone="z2")]


@pytest.mark.parametrize(("offers", "pol", "reason"), [
    (_GANG_OFFERS[:2], policy(), Reason.ON_DEMAND_FALLBACK),  # no spot offer: spot-eligible work on on-demand
    (_GANG_OFFERS, policy(on_demand_base_gpus=24), Reason.ON_DEMAND_BASE),  # moved to on-demand for the base
], ids=["fallback", "base"])
def test_a_gangs_node_swapped_to_another_on_demand_offer_is_launched_for_the_gangs_reason(offers, pol, reason):
    # A 3 x 8-GPU gang on on-demand: two $15 16-GPU nodes ($30) beat three $10.50 8-GPU nodes ($31.50); the
    # second a16 holds one worker, which a8 holds for less, and is swapped for it. Both nodes are on
    # on-demand for the one reason the gang's bind gives.
    p = plan(now=T0, queue=(job("gang", workers=3, gpus=8),), fleet=(), offers=tuple(offers), forecast=None,
             policy=pol)
    assert sorted((l.offer.instance_type.name, l.count) for l in p.of_kind("launch")) == [("a16", 1), ("a8", 1)]
    (bind,) = p.of_kind("bind")
    assert bind.reason is reason
    assert {l.offer.instance_type.name: l.reason for l in p.of_kind("launch")} == {"a16": reason, "a8": reason}


def test_a_gang_with_one_node_swapped_names_each_offer_in_its_bind():
    # As above (no spot offer): new-1 (a16) holds two workers, new-2 (a8, swapped from a16) one. The bind
    # named '3 x 8 GPU on 2 new a16 (on_demand) in aws r1/z1' before the swap (commit: the first node's
    # offer and the node count); after it, each offer with its count (before 2026-11-28: "on new a8", the swapped
    # node's offer for the whole gang).
    p = plan(now=T0, queue=(job("gang", workers=3, gpus=8),), fleet=(), offers=tuple(_GANG_OFFERS[:2]),
             forecast=None, policy=policy())
    (bind,) = p.of_kind("bind")
    assert bind.node_ids == ("new-1", "new-1", "new-2")
    assert bind.detail == "3 x 8 GPU on 1 new a16 (on_demand) and 1 new a8 (on_demand) in aws r1/z1"


def test_a_swap_undone_keeps_the_launch_reason_of_the_node():
    # max_share_per_instance_type 0.5, 24 GPUs projected on spot: j0 and j1 buy s8 spot (16 <= 0.5 x 24 + 8);
    # j2 would take s8 to 24 > 20 and falls back to o8 on-demand ($10). The repair tries j2's node as s8 ($4):
    # 24 spot GPUs of one type break the cap (24 > 0.5 x 24 + 8), and the swap is undone. j2's bind says
    # on_demand_fallback, and so must its node's launch (as without the repair).
    offers = [offer("s8", price=4.0), offer("o8", price=10.0, market=Market.ON_DEMAND)]
    queue = [job(f"j{i}", gpus=8, submitted=T0 + timedelta(seconds=i)) for i in range(3)]
    p = plan(now=T0, queue=queue, fleet=(), offers=offers, forecast=None,
             policy=policy(max_share_per_instance_type=0.5))
    assert {b.job_id: b.reason for b in p.of_kind("bind")} == {
        "j0": Reason.FITS_NEW_CAPACITY, "j1": Reason.FITS_NEW_CAPACITY, "j2": Reason.ON_DEMAND_FALLBACK}
    assert {(l.offer.instance_type.name, l.count): l.reason for l in p.of_kind("launch")} == {
        ("s8", 2): Reason.CHEAPEST_OFFER, ("o8", 1): Reason.ON_DEMAND_FALLBACK}


# A 3 x 8-GPU gang: two $15 16-GPU nodes ($30) beat three 8-GPU nodes at $10.50 or more; the second a16 holds one
# worker, and the repair swaps it for the cheapest 8-GPU offer of the gang's zone it may use. Each offer the
# repair passes over sorts (by key: zone, type, market) before the one it takes.

def test_an_on_demand_gangs_node_is_swapped_past_a_cheaper_spot_offer_it_may_not_use():
    # the gang may not use spot: b8 spot ($4) is passed over, c8 on-demand ($10.50) taken
    offers = [offer("a16", gpus=16, price=15.0, market=Market.ON_DEMAND), offer("b8", price=4.0, zone="z1"),
              offer("c8", price=10.5, market=Market.ON_DEMAND)]
    launches, binds = _one_node(offers, [job("gang", workers=3, gpus=8, spot=False)])
    assert sorted(launches) == [("a16", Market.ON_DEMAND, 1), ("c8", Market.ON_DEMAND, 1)]
    assert sorted(binds["gang"]) == ["new-1", "new-1", "new-2"]


def test_a_gangs_node_is_swapped_past_a_cheaper_offer_of_another_zone():
    # the gang is in z2 (3 x b8 in z1, $31.50, lose to 2 x a16 in z2): b8 ($10.50, z1) is passed over, c8 ($12,
    # z2) taken
    offers = [offer("a16", gpus=16, price=15.0, zone="z2"), offer("b8", price=10.5, zone="z1"),
              offer("c8", price=12.0, zone="z2")]
    launches, _binds = _one_node(offers, [job("gang", workers=3, gpus=8)])
    assert sorted(launches) == [("a16", Market.SPOT, 1), ("c8", Market.SPOT, 1)]


def test_a_gangs_node_is_swapped_past_a_cheaper_offer_that_reclaimed_it():
    # b8 ($9: 3 x b8 would be $27) reclaimed the gang before: it buys 2 x a16, and the repair passes b8 over for
    # c8 ($10.50)
    offers = [offer("a16", gpus=16, price=15.0), offer("b8", price=9.0), offer("c8", price=10.5)]
    gang = replace(job("gang", workers=3, gpus=8), avoid_offer_keys=("aws/r1/z1/b8/spot",))
    launches, _binds = _one_node(offers, [gang])
    assert sorted(launches) == [("a16", Market.SPOT, 1), ("c8", Market.SPOT, 1)]


def test_a_node_holding_whole_jobs_is_swapped_into_another_zone():
    # a (8 GPUs, 50 vCPUs) buys s16 in z1 ($10, 100 vCPUs) for itself and the 8 GPUs b is expected to fill
    # (the fill estimate counts GPUs), but b (60 vCPUs) does not fit beside it and buys s8 in z2 ($6). a alone
    # is then cheaper on s8 too: only a gang's node stays in its zone.
    offers = [offer("s16", gpus=16, price=10.0, vcpus=100, zone="z1"), offer("s8", price=6.0, zone="z2")]
    queue = [job("a", gpus=8, vcpus=50), job("b", gpus=8, vcpus=60, submitted=T0 + timedelta(seconds=1))]
    launches, binds = _one_node(offers, queue)
    assert launches == [("s8", Market.SPOT, 2)] and binds == {"a": ("new-1",), "b": ("new-2",)}


def test_a_node_swapped_onto_an_offer_the_step_bought_adds_its_jobs_to_that_launch():
    # The zone swap above: a's node joins b's s8 launch, which is then risk-adjusted best for both (before
    # 2026-11-28 "for b": a's s16 was not bought, and a was named by no launch)
    offers = [offer("s16", gpus=16, price=10.0, vcpus=100, zone="z1"), offer("s8", price=6.0, zone="z2")]
    queue = [job("a", gpus=8, vcpus=50), job("b", gpus=8, vcpus=60, submitted=T0 + timedelta(seconds=1))]
    p = plan(now=T0, queue=tuple(queue), fleet=(), offers=tuple(offers), forecast=None, policy=policy())
    (launch,) = p.of_kind("launch")
    assert launch.detail == "6.0000 $/h each, risk-adjusted best for b, a"


def _one_node_under(offers, queue, **caps):
    p = plan(now=T0, queue=tuple(queue), fleet=(), offers=tuple(offers), forecast=None, policy=policy(**caps))
    return sorted((l.offer.instance_type.name, l.offer.market, l.count) for l in p.of_kind("launch"))


def test_a_repair_may_take_a_type_and_a_zone_exactly_to_their_caps():
    # The a and b of the zone swap above, with the type and zone caps at 50%: after the swap s8 holds 16 of 16
    # spot GPUs in z2, exactly 0.5 x 16 + one 8-GPU node, for the type and for the zone. Nothing is broken, and
    # the swap stands ($12, not $16).
    offers = [offer("s16", gpus=16, price=10.0, vcpus=100, zone="z1"), offer("s8", price=6.0, zone="z2")]
    queue = [job("a", gpus=8, vcpus=50), job("b", gpus=8, vcpus=60, submitted=T0 + timedelta(seconds=1))]
    assert _one_node_under(offers, queue, max_share_per_instance_type=0.5, max_share_per_zone=0.5) == [
        ("s8", Market.SPOT, 2)]


def test_a_gang_is_one_unit_of_the_type_and_zone_caps_when_its_purchase_is_checked_after_the_step():
    # A 5 x 8-GPU gang: three $15 16-GPU nodes ($45) beat five $10.50 8-GPU nodes ($52.50); the third a16 holds
    # one worker and is swapped for c8: $40.50. With the type and zone caps at 25% of 40 spot GPUs (10), the
    # gang's 32 a16 GPUs are within 10 + the gang's 32 on a16, and its 40 in z1 within 10 + its 40 there (not
    # 10 + the biggest node, 16): nothing is broken, the step is not redone, and the swap stands.
    offers = [offer("a16", gpus=16, price=15.0), offer("c8", price=10.5)]
    assert _one_node_under(offers, [job("gang", workers=5, gpus=8)], max_share_per_instance_type=0.25,
                           max_share_per_zone=0.25) == [("a16", Market.SPOT, 2), ("c8", Market.SPOT, 1)]


@pytest.mark.parametrize("late", [job("late", gpus=8, vcpus=4, memory_gib=8), job("late", gpus=0, vcpus=20, memory_gib=8),
                                  job("late", gpus=0, vcpus=4, memory_gib=100)], ids=["gpus", "vcpus", "memory"])
def test_a_swapped_nodes_room_is_the_room_its_new_offer_leaves(late):
    # The 3 x 8-GPU gang's workers need 90 vCPUs and 500 GiB: two on a16 (16 GPUs, 192 vCPUs, 1024 GiB, $15),
    # one on c8 (8, 96, 512, $10.50), where the repair moves it from the second a16. The budget ($35) admitted
    # the gang's $30 but not late's $10.50 more; the step spent $25.50, and late (8 GPUs, or 20 vCPUs, or
    # 100 GiB) looks for room left on its nodes: c8 has 0 GPUs, 6 vCPUs and 12 GiB left (not the a16's 8, 102
    # and 524), a16 0, 12 and 24. None holds it, and $25.50 + $10.50 is still over the budget: it waits.
    offers = [offer("a16", gpus=16, price=15.0, vcpus=192, memory_gib=1024),
              offer("c8", price=10.5, vcpus=96, memory_gib=512)]
    gang = job("gang", workers=3, gpus=8, vcpus=90, memory_gib=500)
    p = plan(now=T0, queue=(gang, replace(late, submitted_at_utc=T0 + timedelta(seconds=1))), fleet=(),
             offers=tuple(offers), forecast=None, policy=policy(max_usd_per_hour=35.0))
    assert sorted((l.offer.instance_type.name, l.count) for l in p.of_kind("launch")) == [("a16", 1), ("c8", 1)]
    assert {b.job_id for b in p.of_kind("bind")} == {"gang"}
    assert {u.job_id: u.reason for u in p.unplaced} == {"late": Reason.BUDGET_EXCEEDED}


def test_room_left_on_a_swapped_node_is_taken_by_a_job_the_budget_held_back():
    # A 5 x 4-GPU gang: two a16 ($30: four workers, then one) beat three c8 ($31.50); the second a16 becomes a c8
    # with 4 GPUs left. late (4 GPUs) was refused at admission ($30 + $10.50 > $35) and still would be after the
    # step ($25.50 + $10.50): it takes c8's room, which costs nothing more.
    offers = [offer("a16", gpus=16, price=15.0), offer("c8", price=10.5)]
    queue = (job("gang", workers=5, gpus=4), job("late", gpus=4, submitted=T0 + timedelta(seconds=1)))
    p = plan(now=T0, queue=queue, fleet=(), offers=tuple(offers), forecast=None, policy=policy(max_usd_per_hour=35.0))
    c8 = {l.offer.instance_type.name: l.node_names for l in p.of_kind("launch")}["c8"]
    assert sorted((l.offer.instance_type.name, l.count) for l in p.of_kind("launch")) == [("a16", 1), ("c8", 1)]
    assert {b.job_id: b.node_ids for b in p.of_kind("bind")}["late"] == c8 and not p.unplaced
    assert "took room left on a node bought in this step (nothing more to buy)" in p.explanation("late").considered


def test_spot_eligible_jobs_on_the_same_on_demand_launch_are_bound_for_the_same_reason():
    # a (8 GPUs, 50 vCPUs) buys s16 spot ($10, 100 vCPUs) for itself and the 8 GPUs b is expected to fill; b
    # (60 vCPUs) does not fit beside it and buys o8 on-demand ($6). The repair then makes a's node an o8 too.
    offers = [offer("s16", gpus=16, price=10.0, vcpus=100), offer("o8", price=6.0, market=Market.ON_DEMAND)]
    queue = [job("a", gpus=8, vcpus=50), job("b", gpus=8, vcpus=60, submitted=T0 + timedelta(seconds=1))]
    p = plan(now=T0, queue=tuple(queue), fleet=(), offers=tuple(offers), forecast=None, policy=policy())
    (launch,) = p.of_kind("launch")
    assert (launch.offer.instance_type.name, launch.offer.market, launch.count) == ("o8", Market.ON_DEMAND, 2)
    reasons = {b.job_id: b.reason for b in p.of_kind("bind")}
    # spot-eligible work on on-demand is a fallback (docs/reasons.md), whichever step put it there
    assert reasons == {"a": Reason.ON_DEMAND_FALLBACK, "b": Reason.ON_DEMAND_FALLBACK}
    assert launch.reason is Reason.ON_DEMAND_FALLBACK


def test_spot_eligible_work_a_repair_swaps_onto_an_on_demand_offer_new_to_the_step_is_launched_as_a_fallback():
    # As above, but a (70 vCPUs) does not fit b's o8 (64 vCPUs): its s16 ($10) becomes an o8b ($6.50, 96 vCPUs),
    # an offer the step had not bought. Spot-eligible work on on-demand: launched and bound as a fallback, as
    # b's o8 is (before 2026-11-28: launched as cheapest_offer, bound fits_new_capacity).
    offers = [offer("s16", gpus=16, price=10.0, vcpus=100), offer("o8", price=6.0, vcpus=64, market=Market.ON_DEMAND),
              offer("o8b", price=6.5, vcpus=96, market=Market.ON_DEMAND)]
    queue = [job("a", gpus=8, vcpus=70), job("b", gpus=8, vcpus=60, submitted=T0 + timedelta(seconds=1))]
    p = plan(now=T0, queue=tuple(queue), fleet=(), offers=tuple(offers), forecast=None, policy=policy())
    assert {(l.offer.instance_type.name, l.count): l.reason for l in p.of_kind("launch")} == {
        ("o8b", 1): Reason.ON_DEMAND_FALLBACK, ("o8", 1): Reason.ON_DEMAND_FALLBACK}
    assert {b.job_id: (b.node_ids, b.reason) for b in p.of_kind("bind")} == {
        "a": (("new-1",), Reason.ON_DEMAND_FALLBACK), "b": (("new-2",), Reason.ON_DEMAND_FALLBACK)}
    assert p.explanation("a").considered[1].startswith("chose 1 x s16 spot")


def test_a_repair_under_a_gpu_cap_it_keeps_to_is_made():
    # The zone swap above under max_gpus 24: a's s16 and b's s8 hold 24 GPUs; a's node as an s8 holds 16. m32
    # ($9, 32 GPUs) would hold a for less than s16 too, but 40 GPUs: the repair passes it over for s8.
    offers = [offer("m32", gpus=32, price=9.0, zone="z1"), offer("s16", gpus=16, price=10.0, vcpus=100, zone="z1"),
              offer("s8", price=6.0, zone="z2")]
    queue = [job("a", gpus=8, vcpus=50), job("b", gpus=8, vcpus=60, submitted=T0 + timedelta(seconds=1))]
    assert _one_node_under(offers, queue, max_gpus=24) == [("s8", Market.SPOT, 2)]


def test_a_cpu_only_gangs_node_is_swapped_for_a_smaller_cpu_node():
    # A CPU-only gang of 5 x 40 vCPUs and 16 GiB: two c128 ($20: three workers, then two) beat three c80 ($24)
    # and five c64 ($22.50); the second c128 holds 80 vCPUs and 32 GiB, exactly what a c80 has, for $8: $18.
    # c80m ($7) has the vCPUs but 24 GiB.
    cpu = dict(gpus=0, model=None, market=Market.ON_DEMAND)
    offers = [offer("c128", vcpus=128, memory_gib=512, price=10.0, **cpu),
              offer("c80m", vcpus=80, memory_gib=24, price=7.0, **cpu),
              offer("c80", vcpus=80, memory_gib=32, price=8.0, **cpu),
              offer("c64", vcpus=64, memory_gib=256, price=4.5, **cpu)]
    launches, binds = _one_node(offers, [job("gang", workers=5, gpus=0, vcpus=40, memory_gib=16)])
    assert sorted(launches) == [("c128", Market.ON_DEMAND, 1), ("c80", Market.ON_DEMAND, 1)]
    assert sorted(binds["gang"]) == ["new-1"] * 3 + ["new-2"] * 2


def test_a_gang_that_needs_80_gib_gpus_has_its_node_swapped_for_one_with_80_gib_gpus():
    # The 3 x 8-GPU gang, each GPU of 80 GiB: its second a16 becomes c8 (80 GiB GPUs, $10.50), not b8 (40 GiB,
    # $9), which sorts first.
    offers = [offer("a16", gpus=16, price=15.0), offer("b8", price=9.0, model="A100-40GB", gpu_memory_gib=40.0),
              offer("c8", price=10.5)]
    launches, _binds = _one_node(offers, [replace(job("gang", workers=3, gpus=8), gpu_memory_gib_per_gpu=80.0)])
    assert sorted(launches) == [("a16", Market.SPOT, 1), ("c8", Market.SPOT, 1)]


def test_a_repair_takes_the_cheapest_offer_that_holds_the_jobs_not_the_first_or_last():
    # The 3 x 8-GPU gang's second a16 ($15) could be b8 ($12), c8 ($10.50) or d8 ($11), in that key order (three
    # c8 would cost $31.50, more than two a16): c8.
    offers = [offer("a16", gpus=16, price=15.0), offer("b8", price=12.0), offer("c8", price=10.5),
              offer("d8", price=11.0)]
    launches, _binds = _one_node(offers, [job("gang", workers=3, gpus=8)])
    assert sorted(launches) == [("a16", Market.SPOT, 1), ("c8", Market.SPOT, 1)]


def test_a_repair_saving_less_than_a_dollar_an_hour_is_made():
    # The gang's second a16 ($15) as b8 ($14.50; three b8 would cost $43.50) saves 50 cents an hour, 30 with
    # the expected loss (a16's for one worker is half the node's: 0.05 x (0.5 h + 5 min) x 0.5 x $15 = $0.22;
    # b8's 0.05 x 0.58 x 1 x $14.50 = $0.42): still cheaper.
    offers = [offer("a16", gpus=16, price=15.0), offer("b8", price=14.5)]
    launches, _binds = _one_node(offers, [job("gang", workers=3, gpus=8)])
    assert sorted(launches) == [("a16", Market.SPOT, 1), ("b8", Market.SPOT, 1)]


def test_a_swap_undone_does_not_end_the_repairs_of_the_cheaper_nodes():
    # As test_a_swap_that_breaks_a_rule_is_undone_and_not_reported (j0 on a, $8; j1 on b, $9, whose swap for
    # a is undone: A100 jobs only), beside an H100 gang of 3 x 4 GPUs that may not use spot: two h8 ($13) beat
    # three h4 ($13.50), and the second h8, holding one worker, is still swapped for h4 ($4.50) after b's undo.
    a100, h100 = "A100-80GB", "H100-80GB"
    offers = [offer("a", price=8.0), offer("b", price=9.0),
              offer("h8", price=6.5, model=h100, market=Market.ON_DEMAND),
              offer("h4", gpus=4, price=4.5, model=h100, market=Market.ON_DEMAND)]
    queue = [job(f"j{i}", gpus=8, models=(a100,), submitted=T0 + timedelta(seconds=i)) for i in range(2)]
    queue.append(job("gang", workers=3, gpus=4, models=(h100,), spot=False, submitted=T0 + timedelta(seconds=2)))
    assert _one_node_under(offers, queue, min_distinct_offers=2) == [
        ("a", Market.SPOT, 1), ("b", Market.SPOT, 1), ("h4", Market.ON_DEMAND, 1), ("h8", Market.ON_DEMAND, 1)]


def test_a_repair_is_not_made_for_an_offer_cheaper_in_dollars_but_dearer_with_its_expected_loss():
    # The gang's second a16 ($15 + $0.22 expected loss for its worker) could be b8 ($10.50), but b8 is lost with
    # probability 0.85 an hour: 0.85 x 0.58 h x $10.50 = $5.21 more, $15.71 in all, 49 cents over the a16.
    offers = [offer("a16", gpus=16, price=15.0), offer("b8", price=10.5)]
    storm = Forecast(interruption=(OfferRisk(offers[1].key, 60, 0.85),))
    p = plan(now=T0, queue=(job("gang", workers=3, gpus=8),), fleet=(), offers=tuple(offers), forecast=storm,
             policy=policy())
    assert [(l.offer.instance_type.name, l.count) for l in p.of_kind("launch")] == [("a16", 2)]


def test_a_node_holding_part_of_a_gang_beside_a_whole_job_stays_in_the_gangs_zone():
    # The 3 x 8-GPU gang's second a16 (z1) also holds j (4 GPUs) in its room: 12 GPUs, which b12 in z2 ($12, 12
    # GPUs; three would cost $36) holds for less than $15, but the gang's worker must stay in z1.
    offers = [offer("a16", gpus=16, price=15.0, zone="z1"), offer("b12", gpus=12, price=12.0, zone="z2")]
    queue = [job("gang", workers=3, gpus=8), job("j", gpus=4, submitted=T0 + timedelta(seconds=1))]
    launches, binds = _one_node(offers, queue)
    assert launches == [("a16", Market.SPOT, 2)]
    assert sorted(binds["gang"]) == ["new-1", "new-1", "new-2"] and binds["j"] == ("new-2",)


def test_a_gangs_node_is_swapped_past_a_cheaper_offer_of_a_gpu_model_it_may_not_use():
    # The 3 x 8-GPU gang may use A100s only: its second a16 becomes c8 ($10.50), past b8 (H100, $9), sorted first.
    offers = [offer("a16", gpus=16, price=15.0), offer("b8", price=9.0, model="H100-80GB"), offer("c8", price=10.5)]
    launches, _binds = _one_node(offers, [job("gang", workers=3, gpus=8, models=("A100-80GB",))])
    assert sorted(launches) == [("a16", Market.SPOT, 1), ("c8", Market.SPOT, 1)]


# ----------------------------------------------------------------------------- launches after a repair (_unbuy, _rebuy)

def test_a_gangs_node_swapped_off_an_offer_leaves_the_gang_listed_under_the_node_still_on_it():
    # The on-demand gang above: new-1 (a16) keeps two workers, new-2 goes from a16 to a8. The gang still runs on
    # a16's node, so a16's launch still names it, and a8's launch names it too (its node was chosen for it).
    p = plan(now=T0, queue=(job("gang", workers=3, gpus=8),), fleet=(), offers=tuple(_GANG_OFFERS[:2]),
             forecast=None, policy=policy())
    assert {l.offer.instance_type.name: l.detail for l in p.of_kind("launch")} == {
        "a16": "15.0000 $/h each, risk-adjusted best for gang", "a8": "10.5000 $/h each, risk-adjusted best for gang"}


def test_an_on_demand_fallback_node_swapped_for_spot_is_launched_as_the_cheapest_offer():
    # The world of test_a_job_whose_on_demand_node_is_swapped_for_spot_is_no_on_demand_fallback: q1's h8
    # on-demand node, bought as a fallback, becomes h8 spot, an offer new to the step. A spot launch is no
    # on-demand fallback (docs/reasons.md), whatever the node was bought for.
    p = _fallback_swapped_to_spot()
    (launch,) = p.of_kind("launch")
    assert (launch.offer.market, launch.reason) == (Market.SPOT, Reason.CHEAPEST_OFFER)
    assert launch.detail == "24.0000 $/h each, risk-adjusted best for q0, q1"


def test_a_node_swapped_to_a_new_offer_is_launched_for_every_job_on_it():
    # The world of test_a_spot_node_whose_room_a_long_job_took_is_bought_on_demand: s8 spot was chosen for short
    # alone, and long took the rest of its node; the repair makes the node o8 on-demand, chosen for the jobs on
    # it: both (in job id order), not only the one s8 was bought for.
    offers = [offer("s8", price=8.0), offer("o8", price=9.0, market=Market.ON_DEMAND)]
    queue = [job("short", gpus=4, duration_hours=1.0),
             job("long", gpus=4, duration_hours=100.0, submitted=T0 + timedelta(seconds=1))]
    p = plan(now=T0, queue=tuple(queue), fleet=(), offers=tuple(offers), forecast=None, policy=policy())
    (launch,) = p.of_kind("launch")
    assert launch.detail == "9.0000 $/h each, risk-adjusted best for long, short"


def test_a_swap_undone_onto_an_offer_launched_for_another_reason_gives_the_node_its_own_reason_back():
    # On-demand only (the fleet's spot node n runs r), a base of 24 on-demand GPUs. a (8 GPUs, 50 vCPUs, may
    # not use spot) buys o16 ($10, 100 vCPUs) for itself and the 8 GPUs b is expected to fill: cheapest_offer.
    # b (60 vCPUs) does not fit beside it and buys o8 ($6) as a fallback (spot-eligible work). The repair tries
    # a's node as an o8: 16 on-demand GPUs of 24 break the base, and the swap is undone. a's o16 is launched
    # for what it was bought for, not for the reason of the o8 launch it passed through.
    offers = [offer("o16", gpus=16, price=10.0, vcpus=100, market=Market.ON_DEMAND),
              offer("o8", price=6.0, market=Market.ON_DEMAND)]
    r = replace(job("r", gpus=8), state=JobState.RUNNING, node_ids=("n",), started_at_utc=T0 - timedelta(hours=1))
    queue = (r, job("a", gpus=8, vcpus=50, spot=False, submitted=T0 + timedelta(seconds=1)),
             job("b", gpus=8, vcpus=60, submitted=T0 + timedelta(seconds=2)))
    p = plan(now=T0, queue=queue, fleet=(node("n", offer("s8", price=4.0)),), offers=tuple(offers), forecast=None,
             policy=policy(on_demand_base_gpus=24))
    assert {b.job_id: b.node_ids for b in p.of_kind("bind")} == {"a": ("new-1",), "b": ("new-2",)}
    assert {l.offer.instance_type.name: l.reason for l in p.of_kind("launch")} == {
        "o16": Reason.CHEAPEST_OFFER, "o8": Reason.ON_DEMAND_FALLBACK}




_A8 = offer("a8", price=18.0, market=Market.ON_DEMAND)
_SMALL = [offer("o4", gpus=4, price=5.0, market=Market.ON_DEMAND), offer("s4", gpus=4, price=4.5)]


@pytest.mark.parametrize(("offers", "bought"), [
    ([_A8, offer("s8", price=8.0), offer("o8", price=9.0, market=Market.ON_DEMAND), *_SMALL], [("o8", 1)]),
    ([_A8, offer("s8", price=8.0)], [("s8", 1)]),
    ([replace(_A8, usd_per_hour=17.0), offer("s8", price=8.0)], [("a8", 1)]),
], ids=["past-the-budget-then-within", "past-the-budget-only", "within-the-budget"])
def test_a_repair_to_a_safer_dearer_node_keeps_to_the_budget(offers, bought):
    # The short/long world above under a budget of $17/h. With short first the step buys one s8 ($8; $18.12/h
    # with long's loss). a8 (on-demand, sorted first) holds both for less with its loss, but at $18 the fleet
    # would pass the budget: it is passed over, and the search goes on to o8 ($9), taken. (Long first buys o4
    # and short s4, $9.50: only the repair reaches $9.) With neither o8 nor the small offers the node stays s8
    # (a8 passes the budget whoever comes first); a8 at $17 is within it, and is bought.
    queue = [job("short", gpus=4, duration_hours=1.0),
             job("long", gpus=4, duration_hours=100.0, submitted=T0 + timedelta(seconds=1))]
    p = plan(now=T0, queue=tuple(queue), fleet=(), offers=tuple(offers), forecast=None,
             policy=policy(max_usd_per_hour=17.0))
    assert sorted((l.offer.instance_type.name, l.count) for l in p.of_kind("launch")) == bought
    assert not p.unplaced
