"""Moving a checkpointable job from its on-demand node to new spot capacity
(markets.replace_on_demand_with_spot), to the number: the move costs the work
since the last checkpoint plus a restart at the on-demand price, and must pay
back within consolidation_payback_hours and before the job's run ends."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import Forecast, JobState, Market, NodeState, OfferRisk
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
        assert m.from_node_ids == ("od",) and m.detail.endswith("the move costs $6.00, pays back in 1.0 h")
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
    # a node on spot already
    assert not _move(fleet=[node("od", replace(SPOT, zone="z1"))]).actions


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
