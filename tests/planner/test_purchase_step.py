"""The purchase step (docs/planner.md, step 7, "Market and diversification
rules"): which offer each admitted job buys, what it says when it buys none,
the preference for a new spot offer while too few are in use, and the jobs
moved to on-demand for the on-demand base and the spot share."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import JobState, Market, Reason
from fleetctl.planner import plan
from tests.builders import T0, job, node, offer, policy


def run(queue=(), fleet=(), offers=(), pol=None, forecast=None, now=T0):
    return plan(now=now, queue=tuple(queue), fleet=tuple(fleet), offers=tuple(offers), forecast=forecast,
                policy=pol or policy())


def running(j, *node_ids, started=T0 - timedelta(hours=1)):
    return replace(j, state=JobState.RUNNING, node_ids=tuple(node_ids), started_at_utc=started)


def launched(p):
    return sorted((l.offer.instance_type.name, l.offer.market, l.count) for l in p.of_kind("launch"))


def unplaced(p):
    return {u.job_id: u.reason for u in p.unplaced}


# ----------------------------------------------------------------------------- the shortlist, then the full list

def test_a_worker_no_shortlisted_offer_holds_buys_from_the_full_list_and_is_not_refused_too():
    # The 30 on-demand 1-GPU nodes of 8 vCPUs are the cheapest per GPU and per node: they fill the shortlist,
    # and none holds a 64-vCPU worker. The scored shortlist is empty; the full list holds the $5 64-vCPU node.
    small = [offer("s1", gpus=1, price=1.0 + 0.01 * i, zone=f"s{i}", vcpus=8, memory_gib=64, market=Market.ON_DEMAND)
             for i in range(30)]
    big = offer("b1", gpus=1, price=5.0, vcpus=64, memory_gib=256, market=Market.ON_DEMAND)
    p = run(queue=[job("j", gpus=1, vcpus=64)], offers=[*small, big])
    assert launched(p) == [("b1", Market.ON_DEMAND, 1)]
    assert not p.unplaced  # the empty shortlist is no refusal


# ----------------------------------------------------------------------------- why a job buys nothing

S1 = offer("s1", gpus=1, price=1.0, vcpus=8, memory_gib=64)
OD8 = offer("o8", gpus=8, price=2.0, market=Market.ON_DEMAND)


@pytest.mark.parametrize("offers, limits", [
    ([S1], {}),
    # an 8-GPU spot node past the GPU cap and the budget too: the spot share refuses it first
    ([S1, offer("s8", price=20.0)], {"max_gpus": 4, "max_usd_per_hour": 5.0}),
], ids=["one-offer", "also-past-the-caps"])
def test_a_job_every_offer_of_which_the_market_rules_refuse_waits_as_no_allowed_offer(offers, limits):
    # spot only, and a 50% spot share: the job's one spot GPU would be all of the fleet's
    p = run(queue=[job("j", gpus=1)], offers=offers, pol=policy(max_spot_share=0.5, **limits))
    assert not p.actions
    assert [(u.job_id, u.reason, u.detail) for u in p.unplaced] == [
        ("j", Reason.NO_ALLOWED_OFFER,
         "needs 1 x any GPU; every fitting offer is ruled out by the market or diversification rules")]


def test_a_job_the_gpu_cap_and_the_spot_share_refuse_at_purchase_waits_as_capacity_limit():
    # Admission counts the $1 1-GPU spot node (within the cap of 4 GPUs). The 50% spot share moves the job to
    # on-demand, where only an 8-GPU node is sold: past the cap. Admitted again after the step, spot would be
    # all of the fleet's GPUs, and the 8-GPU node is still past the cap: the cap is the reason it waits.
    p = run(queue=[job("j", gpus=1)], offers=[S1, OD8], pol=policy(max_spot_share=0.5, max_gpus=4))
    assert not p.actions
    assert [(u.job_id, u.reason, u.detail) for u in p.unplaced] == [
        ("j", Reason.CAPACITY_LIMIT, "needs 1 x any GPU; more GPUs would pass the policy's max of 4")]


@pytest.mark.parametrize("od, limit, reason", [
    (offer("o8", gpus=8, price=8.0, market=Market.ON_DEMAND), {"max_gpus": 4}, Reason.CAPACITY_LIMIT),
    (offer("o1", gpus=1, price=8.0, vcpus=8, memory_gib=64, market=Market.ON_DEMAND), {"max_usd_per_hour": 5.0},
     Reason.BUDGET_EXCEEDED),
], ids=["gpu-cap", "budget"])
def test_a_job_moved_to_on_demand_for_the_base_does_not_buy_spot_when_on_demand_is_refused(od, limit, reason):
    # on_demand_base_gpus=1: the job is moved to on-demand. The one on-demand offer is past max_gpus=4 (8 GPUs)
    # or the $5 budget ($8), so the job cannot meet the base this pass. It must not take spot instead under the
    # base's name: the base is met with on-demand GPUs (docs/planner.md). It waits, for the cap or the budget.
    p = run(queue=[job("j", gpus=1)], offers=[S1, od], pol=policy(on_demand_base_gpus=1, **limit))
    assert not [l for l in p.of_kind("launch") if l.offer.market is Market.SPOT]
    assert unplaced(p) == {"j": reason}


def test_a_job_moved_to_on_demand_for_the_base_may_take_room_on_a_spot_node_the_step_bought_anyway():
    # As above, the one on-demand offer (8 GPUs) is past max_gpus=4, but a second 1-GPU job buys a 2-GPU spot
    # node ($2): both jobs cost the same per GPU on either market ($1), so the base moves the first by id, a.
    # Refused on-demand, a takes the room left on b's node: that node is bought anyway, so neither the fleet's
    # on-demand GPUs nor its spot GPUs change, and a runs instead of waiting. No second spot node is bought.
    s2 = offer("s2", gpus=2, price=2.0, vcpus=16, memory_gib=128)
    od = offer("o8", gpus=8, price=8.0, market=Market.ON_DEMAND)
    p = run(queue=[job("a", gpus=1), job("b", gpus=1, submitted=T0 + timedelta(seconds=1))], offers=[s2, od],
            pol=policy(on_demand_base_gpus=1, max_gpus=4))
    assert launched(p) == [("s2", Market.SPOT, 1)] and not p.unplaced
    binds = {b.job_id: b for b in p.of_kind("bind")}
    assert binds["a"].node_ids == binds["b"].node_ids
    assert binds["a"].reason is Reason.FITS_NEW_CAPACITY


# ----------------------------------------------------------------------------- a new spot offer, too few in use

A8 = offer("a8", gpus=8, price=8.0)


def _spread_world(b_price: float, min_distinct: int, more=()):
    """A fleet with one busy 8-GPU spot node of a8 ($8); two queued 4-GPU jobs; a8 and a 4-GPU b4 spot offer on
    sale (and a $30 4-GPU c4, a third spot offer). Default risk: 0.05/h x (half of the 1-hour run + 5 min)."""
    b4 = offer("b4", gpus=4, price=b_price)
    c4 = offer("c4", gpus=4, price=30.0)
    queue = [running(job("r", gpus=8), "n"), job("j1", gpus=4), job("j2", gpus=4, submitted=T0 + timedelta(seconds=1))]
    return run(queue=queue, fleet=[node("n", A8)], offers=[A8, b4, c4, *more],
               pol=policy(min_distinct_offers=min_distinct))


def test_with_the_offers_wanted_in_use_a_job_reuses_the_best_one():
    # min_distinct_offers=1 is met by the a8 node held: j1 scores a8 at ($8 + $0.12 risk) / 8 GPUs (j2 fills
    # the other 4) = 1.01 per GPU, b4 at ($4.40 + $0.13) / 4 = 1.13, within 25% of it but not preferred now.
    # One a8 holds both jobs ($8); two b4 would cost $8.80.
    p = _spread_world(4.4, 1)
    assert launched(p) == [("a8", Market.SPOT, 1)] and p.usd_per_hour_after == pytest.approx(16.0)


def test_a_new_spot_offer_more_than_a_quarter_dearer_than_reusing_one_is_not_preferred():
    # min_distinct_offers=3 (three spot offers on sale), one in use: a new offer is preferred when it costs at
    # most 25% more. b4 at $6 scores ($6 + $0.18) / 4 = 1.54 per GPU, over 1.25 x a8's 1.01: j1 reuses a8, j2
    # takes its other 4 GPUs; 2 spot nodes, fewer than 3, so the rule does not ask for 3 offers yet.
    p = _spread_world(6.0, 3)
    assert launched(p) == [("a8", Market.SPOT, 1)] and p.usd_per_hour_after == pytest.approx(16.0)
    # nor is an on-demand offer, new as it is: o4 on-demand at $4.10 scores 1.025 per GPU, within 25% of spot
    # a8's ($8 + $0.12) / 8 = 1.015 (two o4 would cost $8.20)
    p = _spread_world(6.0, 3, more=[offer("o4", gpus=4, price=4.1, market=Market.ON_DEMAND)])
    assert launched(p) == [("a8", Market.SPOT, 1)] and p.usd_per_hour_after == pytest.approx(16.0)


def test_spreading_to_a_new_offer_does_not_cost_more_than_the_rule_asks():
    # As above with b4 at $4.40: ($4.40 + $0.13) / 4 = 1.13 per GPU is within 25% of a8's 1.01, so j1 takes b4
    # and j2 a second b4; 3 spot nodes on 2 offers break min_distinct_offers=3, and the redo buys b4 and c4.
    # One a8 for both jobs leaves 2 spot nodes, below the 3 at which the rule asks for 3 offers (at b4 = $5,
    # 1.28 per GPU, that is the plan).
    p = _spread_world(4.4, 3)
    assert launched(p) == [("a8", Market.SPOT, 1)] and p.usd_per_hour_after == pytest.approx(16.0)


def test_a_step_that_breaks_min_distinct_offers_is_redone_spreading_over_any_new_offer():
    # Three 8-GPU jobs, min_distinct_offers=3: b ($11) and c ($12) are more than 25% dearer than a ($8), so the
    # first try buys a three times, 3 spot nodes on 1 offer. The redo prefers any new offer: a, b and c. (Straight
    # to the strict rule, the third purchase could not be a third offer and the job would wait.)
    offers = [offer("a", price=8.0), offer("b", price=11.0), offer("c", price=12.0)]
    queue = [job(f"j{i}", gpus=8, submitted=T0 + timedelta(seconds=i)) for i in range(3)]
    p = run(queue=queue, offers=offers, pol=policy(min_distinct_offers=3))
    assert launched(p) == [("a", Market.SPOT, 1), ("b", Market.SPOT, 1), ("c", Market.SPOT, 1)] and not p.unplaced


# ----------------------------------------------------------------------------- a gang is one unit for the spread caps

def test_a_gangs_nodes_bought_together_are_one_unit_of_the_type_and_zone_caps():
    # 2 x 8 GPUs on spot, alone in the fleet: 16 GPUs of g8 in z1, over 40% of 16 plus one 8-GPU node (14.4),
    # within 40% plus the whole gang (22.4). Spot it is, not on-demand at $20 a node (in z2, so the repair that
    # swaps a gang's node for a cheaper one of its zone cannot undo a wrong choice).
    spot, od = offer("g8", price=8.0), offer("g8", price=20.0, market=Market.ON_DEMAND, zone="z2")
    p = run(queue=[job("gang", workers=2, gpus=8)], offers=[spot, od],
            pol=policy(max_share_per_instance_type=0.4, max_share_per_zone=0.4))
    assert launched(p) == [("g8", Market.SPOT, 2)] and not p.unplaced


# ----------------------------------------------------------------------------- the budget, and what a job is told

def test_a_purchase_that_takes_the_fleet_exactly_to_the_budget_is_made():
    p = run(queue=[job("j", gpus=8)], offers=[offer("g8", price=10.0, market=Market.ON_DEMAND)],
            pol=policy(max_usd_per_hour=10.0))
    assert launched(p) == [("g8", Market.ON_DEMAND, 1)] and not p.unplaced


def test_a_purchase_over_the_budget_is_skipped_for_a_cheaper_one():
    # A 100-hour job that cannot checkpoint: spot at $9 carries 0.05/h x (50 h + 5 min) x $9 = $22.54/h of
    # expected loss, so on-demand at $10 scores better; admission counted the $9 node (within $9.50), and the
    # $10 node is 50 cents over: the job buys spot, and the repair after the step (which weighs dearer but
    # safer offers since 2026-11-28) does not swap its node for the $10 one either.
    spot, od = offer("g8", price=9.0), offer("g8", price=10.0, market=Market.ON_DEMAND)
    p = run(queue=[job("j", gpus=8, duration_hours=100.0)], offers=[spot, od], pol=policy(max_usd_per_hour=9.5))
    assert launched(p) == [("g8", Market.SPOT, 1)] and not p.unplaced
    assert "skipped 1 x g8 on_demand in aws r1/z1 ($10.00/h + $0.00/h expected loss): over budget" in \
        p.explanation("j").considered


def test_a_purchase_says_what_it_chose_the_first_three_it_skipped_and_the_next_two():
    # Four 8-GPU nodes are cheaper than any 1-GPU node but past max_gpus=4 (admission prices the cheapest within
    # the cap, the $2 node): the job skips them, the first three named, and buys the $2 node.
    bigs = [offer("b8", gpus=8, price=1.0 + 0.1 * i, zone=f"b{i}", market=Market.ON_DEMAND) for i in range(4)]
    smalls = [offer("s1", gpus=1, price=2.0 + 0.1 * i, zone=f"s{i}", vcpus=8, memory_gib=64, market=Market.ON_DEMAND)
              for i in range(4)]
    p = run(queue=[job("j", gpus=1)], offers=[*bigs, *smalls], pol=policy(max_gpus=4))
    assert launched(p) == [("s1", Market.ON_DEMAND, 1)]
    assert p.explanation("j").considered == (
        "free capacity: no node (or zone) with room for it",
        "chose 1 x s1 on_demand in aws r1/s0 ($2.00/h + $0.00/h expected loss)",
        "skipped 1 x b8 on_demand in aws r1/b0 ($1.00/h + $0.00/h expected loss): 8 more GPUs would pass the max of 4",
        "skipped 1 x b8 on_demand in aws r1/b1 ($1.10/h + $0.00/h expected loss): 8 more GPUs would pass the max of 4",
        "skipped 1 x b8 on_demand in aws r1/b2 ($1.20/h + $0.00/h expected loss): 8 more GPUs would pass the max of 4",
        "next best 1 x s1 on_demand in aws r1/s1 ($2.10/h + $0.00/h expected loss)",
        "next best 1 x s1 on_demand in aws r1/s2 ($2.20/h + $0.00/h expected loss)",
    )


# ----------------------------------------------------------------------------- the on-demand base and the spot share

H100 = "H100-80GB"


def _markets(p):
    """Each bound job's market."""
    market = {n: l.offer.market for l in p.of_kind("launch") for n in l.node_names}
    return {b.job_id: market[b.node_ids[0]] for b in p.of_kind("bind")}


def test_a_base_of_one_gpu_moves_one_job_to_on_demand():
    p = run(queue=[job("j", gpus=1)], offers=[S1, offer("o1", gpus=1, price=3.0, vcpus=8, memory_gib=64,
                                                         market=Market.ON_DEMAND)],
            pol=policy(on_demand_base_gpus=1))
    assert _markets(p) == {"j": Market.ON_DEMAND}
    assert [(l.offer.instance_type.name, l.reason) for l in p.of_kind("launch")] == [("o1", Reason.ON_DEMAND_BASE)]


def test_a_job_that_may_not_use_spot_counts_toward_the_base_and_is_no_move():
    # A base of 2 GPUs: "safe" (may not use spot, 1 x A100) is on-demand anyway, so one GPU is missing and the
    # spot-eligible "cheap" (1 x H100) moves, though its move costs more per GPU ($2 against safe's $0.50).
    offers = [offer("a1", gpus=1, price=1.0, vcpus=8, memory_gib=64),
              offer("a1", gpus=1, price=1.5, vcpus=8, memory_gib=64, market=Market.ON_DEMAND),
              offer("h1", gpus=1, price=1.0, vcpus=8, memory_gib=64, model=H100),
              offer("h1", gpus=1, price=3.0, vcpus=8, memory_gib=64, model=H100, market=Market.ON_DEMAND)]
    queue = [job("safe", gpus=1, models=("A100-80GB",), spot=False),
             job("cheap", gpus=1, models=(H100,), submitted=T0 + timedelta(seconds=1))]
    p = run(queue=queue, offers=offers, pol=policy(on_demand_base_gpus=2))
    assert _markets(p) == {"safe": Market.ON_DEMAND, "cheap": Market.ON_DEMAND}
    # a base of 1 GPU: safe meets it alone, and cheap stays on spot
    p = run(queue=queue, offers=offers, pol=policy(on_demand_base_gpus=1))
    assert _markets(p) == {"safe": Market.ON_DEMAND, "cheap": Market.SPOT}


def test_a_cpu_only_job_is_not_moved_for_the_base():
    # A base of 2 GPUs, more than the queue asks for: the GPU job moves (to a node its 4 vCPUs fill, so the CPU
    # job cannot share it); the CPU-only job would add no GPU to the base, however cheap its move ($0.10).
    offers = [offer("c8", gpus=0, model=None, vcpus=8, memory_gib=32, price=0.1),
              offer("c8", gpus=0, model=None, vcpus=8, memory_gib=32, price=0.2, market=Market.ON_DEMAND),
              S1, offer("o1", gpus=1, price=3.0, vcpus=4, memory_gib=64, market=Market.ON_DEMAND)]
    queue = [job("cpu", gpus=0, vcpus=4, memory_gib=8), job("gpu", gpus=1, submitted=T0 + timedelta(seconds=1))]
    p = run(queue=queue, offers=offers, pol=policy(on_demand_base_gpus=2))
    assert _markets(p) == {"cpu": Market.SPOT, "gpu": Market.ON_DEMAND}


def test_moves_the_base_does_not_need_are_dropped_dearest_first():
    # A base of 2 GPUs. Cheapest move first: "small" (1 x A100, +$0.10 per GPU), then "big" (2 x H100, +$0.20):
    # 3 GPUs, 1 more than the base asks. Without small's GPU, big's 2 meet it exactly: small stays on spot.
    offers = [offer("a1", gpus=1, price=1.0, vcpus=8, memory_gib=64),
              offer("a1", gpus=1, price=1.1, vcpus=8, memory_gib=64, market=Market.ON_DEMAND),
              offer("h2", gpus=2, price=2.0, model=H100), offer("h2", gpus=2, price=2.4, model=H100,
                                                               market=Market.ON_DEMAND)]
    queue = [job("small", gpus=1, models=("A100-80GB",)),
             job("big", gpus=2, models=(H100,), submitted=T0 + timedelta(seconds=1))]
    p = run(queue=queue, offers=offers, pol=policy(on_demand_base_gpus=2))
    assert _markets(p) == {"small": Market.SPOT, "big": Market.ON_DEMAND}
    assert "on-demand to meet the policy's on-demand base (2 GPUs) and spot share (100%); cheapest move: " \
        "+$0.20/h per GPU" in p.explanation("big").considered


def test_a_move_dropped_gives_its_gpus_back_to_the_deficit():
    # A base of 4 GPUs. Cheapest move first: "w" (2 x A100, +$0.10 per GPU), "y" (1 x H100, +$0.15), "x"
    # (3 x L4, +$0.20): 6 GPUs, 2 over. Dearest first: x is needed (3 GPUs short without it); y is not (w and x
    # hold 5); then, 1 over, w is (x alone holds 3): w and x move, y stays on spot.
    offers = [offer("a2", gpus=2, price=2.0), offer("a2", gpus=2, price=2.2, market=Market.ON_DEMAND),
              offer("h1", gpus=1, price=1.0, vcpus=8, memory_gib=64, model=H100),
              offer("h1", gpus=1, price=1.15, vcpus=8, memory_gib=64, model=H100, market=Market.ON_DEMAND),
              offer("l4", gpus=4, price=4.0, model="L4"), offer("l4", gpus=4, price=4.8, model="L4",
                                                                market=Market.ON_DEMAND)]
    queue = [job("w", gpus=2, models=("A100-80GB",)),
             job("y", gpus=1, models=(H100,), submitted=T0 + timedelta(seconds=1)),
             job("x", gpus=3, models=("L4",), submitted=T0 + timedelta(seconds=2))]
    p = run(queue=queue, offers=offers, pol=policy(on_demand_base_gpus=4))
    assert _markets(p) == {"w": Market.ON_DEMAND, "y": Market.SPOT, "x": Market.ON_DEMAND}


def test_a_move_to_on_demand_cheaper_per_gpu_than_spot_is_shown_with_its_sign():
    # A base of 1 GPU. Spot sells one 8-GPU node at $8 ($1 per GPU), on demand a 1-GPU node at $0.25: the move
    # costs -$0.75 per GPU (before, "+$-0.75").
    offers = [offer("s8", price=8.0), offer("o1", gpus=1, price=0.25, vcpus=8, memory_gib=64, market=Market.ON_DEMAND)]
    p = run(queue=[job("j", gpus=1)], offers=offers, pol=policy(on_demand_base_gpus=1))
    assert "on-demand to meet the policy's on-demand base (1 GPU) and spot share (100%); cheapest move: " \
        "-$0.75/h per GPU" in p.explanation("j").considered


def test_a_job_with_no_move_to_price_is_passed_over_for_the_next():
    # "first" may use only H100, sold on spot alone: no move to price. The next job moves for the base.
    offers = [offer("h1", gpus=1, price=1.0, vcpus=8, memory_gib=64, model=H100), S1,
              offer("o1", gpus=1, price=3.0, vcpus=8, memory_gib=64, market=Market.ON_DEMAND)]
    queue = [job("first", gpus=1, models=(H100,)),
             job("next", gpus=1, models=("A100-80GB",), submitted=T0 + timedelta(seconds=1))]
    p = run(queue=queue, offers=offers, pol=policy(on_demand_base_gpus=1))
    assert _markets(p) == {"first": Market.SPOT, "next": Market.ON_DEMAND}


def _base_world(premiums: dict[str, tuple[int, float, float]], base: int):
    """One queued job per GPU model: name -> (its GPUs, spot and on-demand USD per GPU of a node that fits it)."""
    offers, queue = [], []
    for i, (name, (gpus, spot, od)) in enumerate(premiums.items()):
        offers += [offer(f"n-{name}", gpus=gpus, price=spot * gpus, model=name),
                   offer(f"n-{name}", gpus=gpus, price=od * gpus, model=name, market=Market.ON_DEMAND)]
        queue.append(job(name, gpus=gpus, models=(name,), submitted=T0 + timedelta(seconds=i)))
    return run(queue=queue, offers=offers, pol=policy(on_demand_base_gpus=base))


def test_the_base_moves_the_job_whose_move_costs_least_not_the_cheapest_job():
    # "cheap" costs $1 per GPU on spot and $3 on demand (+$2); "dear" $3 and $4 (+$1): dear moves
    p = _base_world({"cheap": (1, 1.0, 3.0), "dear": (1, 3.0, 4.0)}, base=1)
    assert _markets(p) == {"cheap": Market.SPOT, "dear": Market.ON_DEMAND}


def test_of_two_moves_either_of_which_the_base_can_spare_the_dearer_is_dropped():
    # A base of 3 GPUs: a (1 GPU, +$0.10), b (1 GPU, +$0.20), c (2 GPUs, +$0.30) are 4 GPUs, 1 over. Dearest
    # first, c is needed; b is not: a and c move.
    p = _base_world({"a": (1, 1.0, 1.1), "b": (1, 1.0, 1.2), "c": (2, 1.0, 1.3)}, base=3)
    assert _markets(p) == {"a": Market.ON_DEMAND, "b": Market.SPOT, "c": Market.ON_DEMAND}


def test_equal_moves_are_taken_by_job_id():
    # "b" was submitted (and admitted) first; both moves cost +$2 per GPU: "a" moves
    queue = [job("b", gpus=1), job("a", gpus=1, submitted=T0 + timedelta(seconds=1))]
    p = run(queue=queue, offers=[S1, offer("o1", gpus=1, price=3.0, vcpus=8, memory_gib=64, market=Market.ON_DEMAND)],
            pol=policy(on_demand_base_gpus=1))
    assert _markets(p) == {"a": Market.ON_DEMAND, "b": Market.SPOT}


def test_the_spot_share_is_met_by_moving_jobs_before_the_purchases():
    # max_spot_share 50% of the step's 2 GPUs: 1 GPU must be on demand. Equal moves (+$2): j1 moves, by id,
    # under the reason of the base and the share, not as a fallback after spot was refused.
    queue = [job("j1", gpus=1), job("j2", gpus=1, submitted=T0 + timedelta(seconds=1))]
    o1 = offer("o1", gpus=1, price=3.0, vcpus=8, memory_gib=64, market=Market.ON_DEMAND)
    p = run(queue=queue, offers=[S1, o1], pol=policy(max_spot_share=0.5))
    assert _markets(p) == {"j1": Market.ON_DEMAND, "j2": Market.SPOT}
    assert {(l.offer.market, l.reason) for l in p.of_kind("launch")} == {
        (Market.ON_DEMAND, Reason.ON_DEMAND_BASE), (Market.SPOT, Reason.CHEAPEST_OFFER)}
    assert "on-demand to meet the policy's on-demand base (0 GPUs) and spot share (50%); cheapest move: " \
        "+$2.00/h per GPU" in p.explanation("j1").considered


def test_a_moves_price_is_per_gpu_of_the_cheapest_offer_that_holds_a_worker():
    # A base of 1 GPU. "a" (1 x A100, 64 vCPUs): spot $1; on demand the $1 node has 8 vCPUs, too few, so its
    # move costs $2.90 - $1 = +$1.90. "b" (1 x H100): an 8-GPU node, $8 spot and $22 on demand, +$1.75 per GPU.
    # b moves (and its 8-GPU on-demand node is bought; a stays on spot).
    offers = [offer("a1", gpus=1, price=1.0, vcpus=64, memory_gib=64),
              offer("a1-small", gpus=1, price=1.0, vcpus=8, memory_gib=64, market=Market.ON_DEMAND),
              offer("a1", gpus=1, price=2.9, vcpus=64, memory_gib=64, market=Market.ON_DEMAND),
              offer("h8", price=8.0, model=H100), offer("h8", price=22.0, model=H100, market=Market.ON_DEMAND)]
    queue = [job("a", gpus=1, vcpus=64, models=("A100-80GB",)),
             job("b", gpus=1, models=(H100,), submitted=T0 + timedelta(seconds=1))]
    p = run(queue=queue, offers=offers, pol=policy(on_demand_base_gpus=1))
    assert _markets(p) == {"a": Market.SPOT, "b": Market.ON_DEMAND}
    assert "on-demand to meet the policy's on-demand base (1 GPU) and spot share (100%); cheapest move: " \
        "+$1.75/h per GPU" in p.explanation("b").considered


# ----------------------------------------------------------------------------- packing estimates and projections

def test_spot_eligible_jobs_with_only_on_demand_to_buy_pack_into_a_bigger_node_when_cheaper():
    # Eight 1-GPU jobs that may use spot, but only on-demand is sold: their expected fill goes to the on-demand
    # nodes, so one $6 8-GPU node beats eight $1 1-GPU nodes (as on spot: test_planner_rules.py,
    # case_packs_small_jobs_into_a_bigger_node_when_cheaper).
    offers = [offer("one", gpus=1, price=1.0, vcpus=8, memory_gib=64, market=Market.ON_DEMAND),
              offer("eight", gpus=8, price=6.0, market=Market.ON_DEMAND)]
    queue = [job(f"s{i}", gpus=1, submitted=T0 + timedelta(seconds=i)) for i in range(8)]
    p = run(queue=queue, offers=offers)
    assert launched(p) == [("eight", Market.ON_DEMAND, 1)] and p.usd_per_hour_after == pytest.approx(6.0)


def test_a_large_steps_first_spot_purchase_is_checked_against_the_whole_steps_projected_gpus():
    # 401 jobs: one order only (largest first). The 8-GPU A100 job, sold on spot alone, is bought first: 8 spot
    # GPUs of the 408 the step is expected to hold (the 400 1-GPU H100 jobs go on-demand), within a 50% spot
    # share. Checked against the 8 GPUs bought so far, it would be all spot and wait.
    h100 = "H100-80GB"
    offers = [offer("a8", price=8.0), offer("h8", price=30.0, model=h100, market=Market.ON_DEMAND)]
    queue = [job("big", gpus=8, models=("A100-80GB",))] + [
        job(f"h{i:03d}", gpus=1, models=(h100,), submitted=T0 + timedelta(seconds=i)) for i in range(400)]
    p = run(queue=queue, offers=offers, pol=policy(max_spot_share=0.5, teams=()))
    assert launched(p) == [("a8", Market.SPOT, 1), ("h8", Market.ON_DEMAND, 50)] and not p.unplaced


def test_a_step_whose_on_demand_move_is_not_bought_buys_no_spot_past_the_spot_share():
    # max_spot_share 0.5: j1 is moved to on-demand for the share, but o8 ($20) is over the $12 budget and j1
    # waits. j2's s8 was checked against the 16 GPUs the step was to hold (8 of 16); with j1 not bought it
    # would be all the fleet's GPUs: the step is redone, and checked as it buys, j2 buys no spot either.
    offers = [offer("s8", price=5.0), offer("o8", price=20.0, market=Market.ON_DEMAND)]
    queue = [job("j1", gpus=8), job("j2", gpus=8, submitted=T0 + timedelta(seconds=1))]
    p = run(queue=queue, offers=offers, pol=policy(max_spot_share=0.5, max_usd_per_hour=12.0))
    assert not p.of_kind("launch") and unplaced(p) == {"j1": Reason.BUDGET_EXCEEDED, "j2": Reason.BUDGET_EXCEEDED}
    assert "skipped 1 x s8 spot in aws r1/z1 ($5.00/h + $0.15/h expected loss): spot would pass 50% of the " \
        "fleet's GPUs" in p.explanation("j2").considered


# ----------------------------------------------------------------------------- a fleet already past a spread cap

def test_a_spread_cap_the_fleet_broke_before_the_step_does_not_stop_its_repairs():
    # An on-demand gang of 3 x 8 GPUs: two $15 16-GPU nodes ($30) beat three $10.50 8-GPU nodes ($31.50), and
    # the repair then swaps the second a16, which holds one worker, for an a8: $25.50. Beside two busy spot
    # nodes in z1 (16 GPUs <= 0.5 x 16 + 8) it does, and beside three too (24 > 0.5 x 24 + 8: the zone cap is
    # broken before anything is bought, by nodes the step does not touch; before 2026-11-28 that stopped the
    # swap).
    s8 = offer("s8", price=4.0)
    offers = [offer("a16", gpus=16, price=15.0, market=Market.ON_DEMAND),
              offer("a8", price=10.5, market=Market.ON_DEMAND), s8]
    gang = job("gang", workers=3, gpus=8, spot=False)
    for busy in (2, 3):
        fleet = [node(f"n{i}", s8) for i in range(busy)]
        queue = [running(job(f"r{i}", gpus=8), f"n{i}") for i in range(busy)] + [gang]
        p = run(queue=queue, fleet=fleet, offers=offers, pol=policy(max_share_per_zone=0.5))
        assert launched(p) == [("a16", Market.ON_DEMAND, 1), ("a8", Market.ON_DEMAND, 1)], busy
        assert p.usd_per_hour_after - p.usd_per_hour_before == pytest.approx(25.5)


# ----------------------------------------------------------------------------- the purchase orders tried

def test_a_small_step_tries_more_shuffled_purchase_orders():
    # Nine jobs, a 50% spot share with no spot in the fleet (so all on-demand in the end), found by a
    # differential search over the orders tried. The eight fixed orders and the first six shuffles end at
    # $92.16/h; a step of nine jobs tries min(24, 1000 // 9) = 24 shuffles, and one of the later ones packs
    # the jobs into seven o2 and two o3 nodes: $89.49/h.
    offers = [offer("o0", gpus=2, price=2.67, vcpus=8, memory_gib=256, market=Market.ON_DEMAND),
              offer("o1", gpus=4, price=7.54, vcpus=32, memory_gib=512),
              offer("o2", gpus=8, price=11.89, vcpus=64, memory_gib=1024, zone="z2", market=Market.ON_DEMAND),
              offer("o3", gpus=2, price=3.13, vcpus=64, memory_gib=256, zone="z2", market=Market.ON_DEMAND),
              offer("o4", gpus=4, price=5.49, vcpus=64, memory_gib=512)]
    shapes = [(1, 2, 4, None), (3, 1, 8, None), (1, 2, 8, False), (2, 8, 16, None), (1, 8, 2, False),
              (1, 2, 16, None), (1, 8, 30, None), (2, 8, 8, None), (3, 1, 16, False)]
    queue = [job(f"j{i}", workers=w, gpus=g, vcpus=v, spot=s, submitted=T0 + timedelta(seconds=i))
             for i, (w, g, v, s) in enumerate(shapes)]
    p = run(queue=queue, offers=offers, pol=policy(max_spot_share=0.5))
    assert not p.unplaced
    assert launched(p) == [("o2", Market.ON_DEMAND, 7), ("o3", Market.ON_DEMAND, 2)]
    assert p.usd_per_hour_after == pytest.approx(89.49)


def test_the_most_constrained_first_order_counts_the_offers_a_job_may_buy_in_its_market():
    # Eight jobs and a base of 8 on-demand GPUs (found by a differential search over the orders tried). j1, j3
    # and j4 may not use spot, and jobs the base moves are bound to on-demand: the "fewest offers first" orders
    # count for them the on-demand offers that hold them only, not the spot one too. So counted, the step ends at
    # $20.54/h (o2 and o0 on-demand, one o3 spot node); counted with the spot offer, at $24.35/h.
    offers = [offer("o0", gpus=8, price=8.07, vcpus=256, memory_gib=1024, zone="z2", market=Market.ON_DEMAND),
              offer("o1", gpus=8, price=8.88, vcpus=64, memory_gib=1024, market=Market.ON_DEMAND),
              offer("o2", gpus=16, price=8.66, vcpus=64, memory_gib=2048, market=Market.ON_DEMAND),
              offer("o3", gpus=4, price=3.81, vcpus=32, memory_gib=512)]
    shapes = [(1, 8, 16, None), (1, 4, 16, False), (1, 2, 30, None), (1, 1, 2, False), (3, 2, 4, False),
              (3, 1, 30, None), (1, 1, 16, None), (1, 1, 30, None)]
    queue = [job(f"j{i}", workers=w, gpus=g, vcpus=v, spot=s, submitted=T0 + timedelta(seconds=i))
             for i, (w, g, v, s) in enumerate(shapes)]
    p = run(queue=queue, offers=offers, pol=policy(on_demand_base_gpus=8))
    assert not p.unplaced
    assert launched(p) == [("o0", Market.ON_DEMAND, 1), ("o2", Market.ON_DEMAND, 1), ("o3", Market.SPOT, 1)]
    assert p.usd_per_hour_after == pytest.approx(20.54)
