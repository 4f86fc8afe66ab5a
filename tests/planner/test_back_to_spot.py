"""Moving a checkpointable job from its on-demand node to new spot capacity
(markets.replace_on_demand_with_spot), to the number: the move costs the work
since the last checkpoint plus a restart at the on-demand price, and must pay
back within consolidation_payback_hours and before the job's run ends."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import DemandForecast, Forecast, JobState, Market, NodeState, OfferRisk, Reason
from fleetctl.planner import plan
from tests.builders import T0, job, node, offer, policy

OD = offer("od1", gpus=1, price=10.0, market=Market.ON_DEMAND, vcpus=8, memory_gib=64)
SPOT = offer("sp1", gpus=1, price=4.0, zone="z2", vcpus=8, memory_gib=64)


def _running(job_id: str, *node_ids: str, duration_hours: float = 10.0, gpus: int = 1, since_minutes: float = 30):
    return replace(job(job_id, workers=len(node_ids), gpus=gpus, duration_hours=duration_hours,
                       state=JobState.RUNNING, node_ids=node_ids),
                   checkpointable=True, checkpoint_interval_minutes=30.0, started_at_utc=T0 - timedelta(hours=2),
                   last_checkpoint_utc=T0 - timedelta(minutes=since_minutes), checkpointed_work_hours=1.5)


def _move(duration_hours: float = 10.0, spot=SPOT, fleet=None, queue=None, **pol):
    """A job alone on a $10/h on-demand node, 30 min since its last checkpoint (1.5 h of work kept), with
    a restart of 6 min: the move costs 10 x (0.5 + 0.1) = $6; spot at $4/h (no risk) saves $6/h."""
    queue = queue or (_running("j", "od", duration_hours=duration_hours),)
    settings = dict(replace_on_demand_with_spot=True, restart_overhead_minutes=6.0) | pol
    return plan(now=T0, queue=tuple(queue), fleet=tuple(fleet or (node("od", OD),)), offers=(spot,),
                forecast=Forecast(interruption=(OfferRisk(spot.key, 60, 0.0),)), policy=policy(**settings))


@pytest.mark.parametrize("payback_hours, duration_hours, moves", [
    (1.0, 10.0, True),  # pays back in 1.0 h: exactly the policy's horizon
    (0.99, 10.0, False),
    (2.0, 3.01, True),  # 1.01 h of work left after the 0.5 h redone
    (2.0, 3.0, False),  # 1 h left: the move would pay back only as the job ends
], ids=["at-the-horizon", "past-the-horizon", "before-the-end", "at-the-end"])
def test_a_move_to_spot_pays_back_within_the_horizon_and_before_the_job_ends(payback_hours, duration_hours, moves):
    p = _move(duration_hours, consolidation_payback_hours=payback_hours)
    migrations = p.of_kind("migrate")
    assert bool(migrations) is moves
    if moves:
        (m,) = migrations
        assert m.from_node_ids == ("od",) and m.detail == (
            "spot is back: 1 x sp1 spot in aws r1/z2 ($4.00/h risk-adjusted) replaces od ($10.00/h); "
            "the move costs $6.00, pays back in 1.0 h")
        assert [t.node_id for t in p.of_kind("terminate")] == ["od"]
        assert [(l.offer.key, l.count) for l in p.of_kind("launch")] == [(SPOT.key, 1)]


def test_no_move_when_spot_saves_nothing_or_the_policy_says_no():
    assert not _move(spot=replace(SPOT, usd_per_hour=10.0)).actions
    assert not _move(replace_on_demand_with_spot=False).actions
    assert not _move(disruption_budget_nodes=0).actions


def test_only_a_job_alone_on_ready_on_demand_nodes_moves():
    od2 = replace(OD, instance_type=replace(OD.instance_type, name="od2", gpu_count=2))
    assert _move(fleet=[node("od", od2)]).of_kind("migrate")  # alone on a 2-GPU node: moves
    # sharing the node with another job
    assert not _move(fleet=[node("od", od2)], queue=[_running("j", "od"), _running("k", "od")]).actions
    # a node that is draining
    assert not _move(fleet=[node("od", OD, state=NodeState.DRAINING)]).of_kind("migrate")
    # a node still launching
    assert not _move(fleet=[node("od", OD, state=NodeState.LAUNCHING)]).of_kind("migrate")
    # a node on spot already, though dearer than the spot offer (beside an on-demand node that runs a job
    # that cannot checkpoint)
    stays = replace(_running("stays", "other"), checkpointable=False)
    assert not _move(fleet=[node("od", replace(SPOT, zone="z1", usd_per_hour=10.0)), node("other", OD)],
                     queue=[_running("j", "od"), stays]).actions


def test_a_gang_moves_only_if_it_holds_every_one_of_its_nodes_alone():
    od2 = replace(OD, instance_type=replace(OD.instance_type, name="od2", gpu_count=2))
    fleet = [node("a", OD), node("b", od2)]
    assert _move(fleet=fleet, queue=[_running("g", "a", "b")], disruption_budget_nodes=2).of_kind("migrate")
    # the gang's second node also holds another job
    assert not _move(fleet=fleet, queue=[_running("g", "a", "b"), _running("k", "b")],
                     disruption_budget_nodes=2).actions


def test_a_move_that_costs_nothing_still_needs_a_payback_horizon():
    # checkpointed just now, no restart overhead: the move costs $0 and pays back at once, but a
    # consolidation_payback_hours of 0 turns moves off
    now = [_running("j", "od", since_minutes=0)]
    assert _move(queue=now, restart_overhead_minutes=0.0, consolidation_payback_hours=0.1).of_kind("migrate")
    assert not _move(queue=now, restart_overhead_minutes=0.0, consolidation_payback_hours=0.0).actions


def test_a_node_reserved_for_a_waiting_gang_is_not_emptied_by_a_move_to_spot():
    # a V100 gang of two waits (no V100 offer on sale) for the node j runs on, beside an idle V100 node
    v100 = offer("v1", gpus=1, model="V100", price=10.0, market=Market.ON_DEMAND, vcpus=8, memory_gib=64)
    gang = job("gang", workers=2, gpus=1, models=("V100",))
    fleet = [node("od", v100), node("idle", v100)]
    p = _move(fleet=fleet, queue=[_running("j", "od"), gang])
    assert "waits for running work to end" in p.unplaced[0].detail
    assert not p.of_kind("migrate") and "od" not in {t.node_id for t in p.of_kind("terminate")}
    # without the gang, j moves
    assert _move(fleet=fleet, queue=[_running("j", "od")]).of_kind("migrate")


def test_the_dearest_on_demand_nodes_move_first_within_the_disruption_budget():
    dear = replace(OD, usd_per_hour=12.0, instance_type=replace(OD.instance_type, name="od12"))
    fleet = [node("a", OD), node("b", dear)]
    p = _move(fleet=fleet, queue=[_running("ja", "a"), _running("jb", "b")])
    assert [(m.job_id, m.from_node_ids) for m in p.of_kind("migrate")] == [("jb", ("b",))]
    # equal prices: the candidate whose first node sorts first; a gang of two $10 nodes and a $20 node
    od20 = replace(OD, usd_per_hour=20.0, instance_type=replace(OD.instance_type, name="od20"))
    fleet = [node("a", OD), node("z", OD), node("m", od20)]
    p = _move(fleet=fleet, queue=[_running("gang", "a", "z"), _running("one", "m")], disruption_budget_nodes=2)
    assert [m.job_id for m in p.of_kind("migrate")] == ["gang"]


def test_moves_keep_the_on_demand_base_of_the_fleet_after_each_move():
    fleet = [node("a", OD), node("b", OD)]
    p = _move(fleet=fleet, queue=[_running("ja", "a"), _running("jb", "b")], on_demand_base_gpus=1,
              disruption_budget_nodes=2)
    assert [m.job_id for m in p.of_kind("migrate")] == ["ja"]
    assert not _move(on_demand_base_gpus=1).actions


def test_a_job_past_its_interruptions_stays_on_demand():
    j = replace(_running("j", "od"), interruptions=3)
    assert not _move(queue=[j], max_interruptions_before_on_demand=2).actions


def test_a_job_moves_to_spot_not_to_a_cheaper_on_demand_node_and_moves_once():
    cheap_od = offer("od-cheap", gpus=1, price=3.0, market=Market.ON_DEMAND, vcpus=8, memory_gib=64)
    other = replace(SPOT, zone="z3", usd_per_hour=4.5)
    stays = replace(_running("stays", "other"), checkpointable=False)  # more GPUs on demand, staying there
    p = plan(now=T0, queue=(_running("j", "od"), stays), fleet=(node("od", OD), node("other", OD)),
             offers=(cheap_od, SPOT, other),
             forecast=Forecast(interruption=(OfferRisk(SPOT.key, 60, 0.0), OfferRisk(other.key, 60, 0.0))),
             policy=policy(replace_on_demand_with_spot=True, restart_overhead_minutes=6.0))
    assert [(l.offer.key, l.count) for l in p.of_kind("launch")] == [(SPOT.key, 1)]
    assert len(p.of_kind("migrate")) == 1


def test_a_move_that_costs_nothing_pays_back_even_a_small_saving():
    now = [_running("j", "od", since_minutes=0)]
    assert _move(queue=now, restart_overhead_minutes=0.0, spot=replace(SPOT, usd_per_hour=9.5)).of_kind("migrate")


@pytest.mark.parametrize("budget, moves", [(14.0, True), (13.95, False)])
def test_a_move_to_spot_keeps_the_budget_counting_both_nodes(budget, moves):
    # the $4 spot node is up before the $10 on-demand node goes
    assert bool(_move(max_usd_per_hour=budget).of_kind("migrate")) is moves


@pytest.mark.parametrize("budget, moves", [(28.0, True), (27.95, False)])
def test_a_gangs_move_keeps_the_budget_counting_all_its_new_nodes(budget, moves):
    fleet = [node("a", OD), node("b", OD)]
    p = _move(fleet=fleet, queue=[_running("g", "a", "b")], disruption_budget_nodes=2, max_usd_per_hour=budget)
    assert bool(p.of_kind("migrate")) is moves


def test_the_budget_check_of_a_move_allows_a_float_rounding():
    # $0.2 + $0.1 is 0.30000000000000004 in floats: within a $0.30 budget
    od, spot = replace(OD, usd_per_hour=0.2), replace(SPOT, usd_per_hour=0.1)
    assert _move(fleet=[node("od", od)], spot=spot, max_usd_per_hour=0.3).of_kind("migrate")


def test_moves_keep_the_spot_share_of_the_fleet_after_each_move():
    # four 1-GPU on-demand nodes, at most half the GPUs on spot: two jobs move, the third would pass it
    fleet = [node(n, OD) for n in "abcd"]
    queue = [_running(f"j{n}", n) for n in "abcd"]
    p = _move(fleet=fleet, queue=queue, max_spot_share=0.5, disruption_budget_nodes=4)
    assert [m.job_id for m in p.of_kind("migrate")] == ["ja", "jb"]


def test_a_move_to_a_regional_spot_offer_names_its_region():
    (m,) = _move(spot=replace(SPOT, zone="")).of_kind("migrate")
    assert m.detail.startswith("spot is back: 1 x sp1 spot in aws r1 ($4.00/h risk-adjusted)")


def test_a_job_moves_into_an_idle_spot_node_of_its_offer_before_one_is_bought():
    # an idle node of the spot offer (idle 1 h, past the timeout): before, the plan launched a new sp1 node for j
    # and terminated the idle one
    p = _move(fleet=[node("od", OD), node("s", SPOT)])
    (m,) = p.of_kind("migrate")
    assert (m.job_id, m.from_node_ids, m.to_node_ids) == ("j", ("od",), ("s",))
    assert m.detail == ("spot is back: s (sp1 spot in aws r1/z2, $4.00/h risk-adjusted) has room and replaces od "
                        "($10.00/h); the move costs $6.00, pays back in 1.0 h")
    assert not p.of_kind("launch") and [t.node_id for t in p.of_kind("terminate")] == ["od"]


def test_a_job_moved_into_an_idle_spot_node_says_so_and_its_node_goes_for_the_move():
    # the move above: j's explanation ends with it, as `fleetctl explain j` shows it, and od is terminated
    # for the move (consolidation: its job went to spot), not as an idle node
    p = _move(fleet=[node("od", OD), node("s", SPOT)])
    (m,) = p.of_kind("migrate")
    assert p.explanation("j").considered[-1] == f"migrates to spot: {m.detail}"
    assert [(t.node_id, t.reason, t.detail) for t in p.of_kind("terminate")] == [
        ("od", Reason.CONSOLIDATION, "its job moved to spot; saves $10.00/h")]


def test_the_on_demand_node_a_job_moves_off_into_a_spot_node_is_no_headroom():
    # The move above with a forecast of 2 A100 GPUs an hour ahead and a budget of $8/h: after it the fleet
    # holds s ($4, j on it), and od goes. One GPU is bought ahead, an sp1 node at $4: the fleet ends at $8/h.
    # Had od stayed counted (its $10, or its GPU with j still on it or idle), the budget or the GPUs held would
    # have bought nothing.
    queue = (_running("j", "od"),)
    forecast = Forecast(interruption=(OfferRisk(SPOT.key, 60, 0.0),),
                        demand=(DemandForecast("A100-80GB", 60, 1.5, 2.0),))
    p = plan(now=T0, queue=queue, fleet=(node("od", OD), node("s", SPOT)), offers=(SPOT,), forecast=forecast,
             policy=policy(replace_on_demand_with_spot=True, restart_overhead_minutes=6.0, max_headroom_gpus=4,
                           max_usd_per_hour=8.0))
    assert [(m.job_id, m.to_node_ids) for m in p.of_kind("migrate")] == [("j", ("s",))]
    assert [(l.offer.instance_type.name, l.count, l.reason) for l in p.of_kind("launch")] == [
        ("sp1", 1, Reason.FORECAST_HEADROOM)]


def test_a_job_moves_into_the_spot_node_its_offer_has_with_the_least_room_left():
    sp2 = replace(SPOT, usd_per_hour=8.0, instance_type=replace(SPOT.instance_type, name="sp2", gpu_count=2,
                                                                vcpus=16, memory_gib=128))
    # "a" idle (2 GPUs free), "b" runs k (1 GPU free; k cannot checkpoint, so consolidation leaves it): j fills b;
    # saving $2/h pays the $6 move back in 3 h
    fleet = [node("od", OD), node("a", sp2), node("b", sp2)]
    k = replace(_running("k", "b"), checkpointable=False)
    p = _move(spot=sp2, fleet=fleet, queue=[_running("j", "od"), k], consolidation_payback_hours=3)
    assert [(m.job_id, m.to_node_ids) for m in p.of_kind("migrate")] == [("j", ("b",))]
    assert not p.of_kind("launch")
    # no room on b (k takes both GPUs) and "a" busy too: a node is bought
    busy = [_running("j", "od"), _running("k", "b", gpus=2), _running("l", "a", gpus=2)]
    p = _move(spot=sp2, fleet=fleet, queue=busy, consolidation_payback_hours=3)
    assert [m.to_node_ids for m in p.of_kind("migrate")] == [("new-1",)]
    assert [(l.offer.key, l.count) for l in p.of_kind("launch")] == [(sp2.key, 1)]


def test_a_job_moves_only_into_a_ready_spot_node():
    for state in (NodeState.DRAINING, NodeState.LAUNCHING):
        p = _move(fleet=[node("od", OD), node("s", SPOT, state=state)])
        assert [m.to_node_ids for m in p.of_kind("migrate")] == [("new-1",)]


def test_a_move_into_a_spot_node_the_fleet_holds_adds_nothing_to_the_budget_or_the_offers():
    # $10 + $4 held: a new $4 node would pass a $14 budget for as long as both run; the idle one does not
    assert _move(fleet=[node("od", OD), node("s", SPOT)], max_usd_per_hour=14.0).of_kind("migrate")
    # likewise 2 GPUs held: a new 1-GPU node would pass max_gpus 2; the idle one does not
    assert [m.to_node_ids for m in _move(fleet=[node("od", OD), node("s", SPOT)], max_gpus=2).of_kind("migrate")] == [
        ("s",)]
    full = [_running("j", "od"), _running("k", "s")]  # no room on s: a new node would be up beside both
    assert not _move(fleet=[node("od", OD), node("s", SPOT)], queue=full, max_usd_per_hour=14.0).of_kind("migrate")
    # min_distinct_offers 2 with two spot offers on sale: a second sp1 node would leave 2 units on one offer
    # (so j would buy the dearer offer); moving into the sp1 node held keeps one unit
    other = replace(SPOT, zone="z3", usd_per_hour=4.5)
    fc = Forecast(interruption=(OfferRisk(SPOT.key, 60, 0.0), OfferRisk(other.key, 60, 0.0)))
    pol = policy(replace_on_demand_with_spot=True, restart_overhead_minutes=6.0, min_distinct_offers=2)
    p = plan(now=T0, queue=(_running("j", "od"),), fleet=(node("od", OD), node("s", SPOT)), offers=(SPOT, other),
             forecast=fc, policy=pol)
    assert [m.to_node_ids for m in p.of_kind("migrate")] == [("s",)] and not p.of_kind("launch")


def test_a_move_into_a_spot_node_the_fleet_holds_keeps_the_spot_share():
    # od and s hold one GPU each: with j on s, all GPUs would be spot, past a half share
    assert not _move(fleet=[node("od", OD), node("s", SPOT)], max_spot_share=0.5).of_kind("migrate")
    assert _move(fleet=[node("od", OD), node("s", SPOT)], max_spot_share=1.0).of_kind("migrate")


def test_a_job_moves_to_spot_into_a_node_consolidation_emptied_in_the_same_pass():
    # consolidation moves r0 (checkpoint 5 min ago) from the half-used spot node "a" onto "b"'s free GPU (b's
    # job cannot checkpoint); j's move back to spot then takes "a" instead of a new node like it, and "a" stays.
    # Before, the plan terminated "a" and launched a node of its offer for j.
    g2 = offer("g2", gpus=2, price=2.0, vcpus=8, memory_gib=64)
    od2 = replace(g2, market=Market.ON_DEMAND, usd_per_hour=6.0)
    r0 = replace(job("r0", state=JobState.RUNNING, node_ids=("a",)), checkpointable=True,
                 started_at_utc=T0 - timedelta(hours=1), last_checkpoint_utc=T0 - timedelta(minutes=5))
    rb = replace(job("rb", state=JobState.RUNNING, node_ids=("b",)), started_at_utc=T0 - timedelta(hours=1))
    j = _running("j", "od", gpus=2)
    p = plan(now=T0, queue=(r0, rb, j), fleet=(node("a", g2), node("b", g2), node("od", od2)), offers=(g2, od2),
             forecast=None, policy=policy(replace_on_demand_with_spot=True, restart_overhead_minutes=6.0,
                                          disruption_budget_nodes=2))
    assert [(m.job_id, m.from_node_ids, m.to_node_ids) for m in p.of_kind("migrate")] == [
        ("r0", ("a",), ("b",)), ("j", ("od",), ("a",))]
    assert p.of_kind("migrate")[0].detail.startswith(
        "makes room on a for j, which moves to spot (a $2.00/h node not bought); migration costs")
    assert not p.of_kind("launch") and [t.node_id for t in p.of_kind("terminate")] == ["od"]


@pytest.mark.parametrize("limit", [{"max_usd_per_hour": 13.5}, {"max_gpus": 1}], ids=["budget", "max-gpus"])
def test_a_move_into_a_spot_node_the_fleet_holds_is_made_by_a_fleet_over_its_limits(limit):
    # $14/h and 2 GPUs held, over a $13.50 budget or a cap of 1 GPU (a policy tightened under a running fleet):
    # the move into s adds nothing to either, and the on-demand node goes. Before, the move was refused because
    # the fleet was over the limit already; j stayed on od and the idle s was terminated ($10/h instead of $4).
    p = _move(fleet=[node("od", OD), node("s", SPOT)], **limit)
    assert [(m.job_id, m.to_node_ids) for m in p.of_kind("migrate")] == [("j", ("s",))]
    assert [t.node_id for t in p.of_kind("terminate")] == ["od"] and p.usd_per_hour_after == pytest.approx(4.0)


@pytest.mark.parametrize("duration_hours, moves", [(3.0, True), (10.0, False)], ids=["ends-before", "ends-after"])
def test_a_job_moves_into_a_spot_node_reserved_for_a_waiting_gang_only_if_it_ends_before(duration_hours, moves):
    # A 2 x 8-GPU gang waits (the $15 budget) for n1 and n2 (sp8 spot, $2), whose jobs (5 of 8 GPUs, not
    # checkpointable) end at T0 + 2 h (11:00): both are reserved for it until then. j (1 GPU on the $10 od) has
    # 1.5 h of work left from its checkpoint: with the 6-minute restart it ends at T0 + 1.6 h, before the
    # reservation, and moves into n1's room (the move costs $6, the $8/h saved pays it back in 0.8 h); with
    # 8.5 h left it stays (a new sp8 node would pass the budget). Before 2026-11-28 reserved nodes were no room
    # for the move back to spot, whatever the job's end.
    sp8 = offer("sp8", gpus=8, price=2.0, zone="z2")
    running = [replace(job(f"r{i}", gpus=5, duration_hours=3.0, state=JobState.RUNNING, node_ids=(f"n{i}",)),
                       started_at_utc=T0 - timedelta(hours=1), checkpointable=False) for i in (1, 2)]
    gang = job("gang", workers=2, gpus=8, submitted=T0 - timedelta(hours=1))
    p = plan(now=T0, queue=(*running, gang, _running("j", "od", duration_hours=duration_hours)),
             fleet=(node("n1", sp8), node("n2", sp8), node("od", OD)), offers=(sp8,),
             forecast=Forecast(interruption=(OfferRisk(sp8.key, 60, 0.0),)),
             policy=policy(replace_on_demand_with_spot=True, restart_overhead_minutes=6.0, max_usd_per_hour=15.0))
    assert "waits for running work to end (~2026-11-02 11:00 UTC)" in p.unplaced[0].detail
    assert [(m.job_id, m.to_node_ids) for m in p.of_kind("migrate")] == ([("j", ("n1",))] if moves else [])
    assert [t.node_id for t in p.of_kind("terminate")] == (["od"] if moves else [])
    assert not p.of_kind("launch")
