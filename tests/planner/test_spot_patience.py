"""Waiting for spot (markets.max_wait_for_spot_minutes) and moving back to spot
(markets.replace_on_demand_with_spot): both opt-in, both bounded."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from fleetctl.model import JobState, Market, Reason
from fleetctl.planner import plan
from tests.builders import T0, job, node, offer, policy

ON_DEMAND = offer("p3", gpus=1, price=3.06, market=Market.ON_DEMAND, vcpus=8, memory_gib=61)
SPOT = offer("p3", gpus=1, price=0.918, market=Market.SPOT, zone="z2", vcpus=8, memory_gib=61)


def run(queue=(), fleet=(), offers=(), pol=None, now=T0):
    return plan(now=now, queue=tuple(queue), fleet=tuple(fleet), offers=tuple(offers), forecast=None,
                policy=pol or policy())


def test_without_patience_no_spot_means_on_demand_at_once():
    p = run(queue=[job("j1", duration_hours=4)], offers=[ON_DEMAND])
    (launch,) = p.of_kind("launch")
    assert launch.offer.market is Market.ON_DEMAND and launch.reason is Reason.ON_DEMAND_FALLBACK


def test_waits_for_spot_within_patience_then_falls_back():
    pol = policy(max_wait_for_spot_minutes=30)
    j = job("j1", duration_hours=4)
    p = run(queue=[j], offers=[ON_DEMAND], pol=pol, now=T0 + timedelta(minutes=10))
    assert p.actions == ()
    (u,) = p.unplaced
    assert u.reason is Reason.WAITING_FOR_CAPACITY and "waits for spot up to 30 min (waited 10)" in u.detail
    # spot comes back: bought at once
    p = run(queue=[j], offers=[ON_DEMAND, SPOT], pol=pol, now=T0 + timedelta(minutes=20))
    assert p.of_kind("launch")[0].offer.market is Market.SPOT
    # patience spent: on-demand
    p = run(queue=[j], offers=[ON_DEMAND], pol=pol, now=T0 + timedelta(minutes=31))
    assert p.of_kind("launch")[0].offer.market is Market.ON_DEMAND


def test_a_policy_without_spot_never_waits_for_it():
    """max_spot_share 0 (the backtest's on-demand baseline uses it): with no spot
    offer on sale the job went on waiting for spot it could never buy."""
    pol = policy(max_wait_for_spot_minutes=30, max_spot_share=0.0)
    p = run(queue=[job("j1", duration_hours=4)], offers=[ON_DEMAND], pol=pol, now=T0 + timedelta(minutes=10))
    (launch,) = p.of_kind("launch")
    assert launch.offer.market is Market.ON_DEMAND and not p.unplaced


def test_patience_counts_from_the_requeue_and_never_spends_deadline_slack():
    pol = policy(max_wait_for_spot_minutes=30)
    later = T0 + timedelta(hours=5)
    requeued = replace(job("j1", duration_hours=4), requeued_at_utc=later - timedelta(minutes=5), interruptions=1)
    assert run(queue=[requeued], offers=[ON_DEMAND], pol=pol, now=later).unplaced[0].reason is Reason.WAITING_FOR_CAPACITY
    # 4 h of work, deadline in 4 h 20 min: 15 min of slack after a restart, less than the 30 min wait left
    tight = replace(job("j2", duration_hours=4), deadline_utc=T0 + timedelta(hours=4, minutes=20))
    p = run(queue=[tight], offers=[ON_DEMAND], pol=pol)
    assert p.of_kind("launch")[0].offer.market is Market.ON_DEMAND


def _running_on_demand(checkpointable: bool, since_checkpoint_minutes: float = 10, duration_hours: float = 6):
    n = node("od1", of=ON_DEMAND)
    j = replace(job("j1", duration_hours=duration_hours, state=JobState.RUNNING, node_ids=("od1",)),
                checkpointable=checkpointable, checkpoint_interval_minutes=30 if checkpointable else None,
                started_at_utc=T0 - timedelta(hours=1),
                checkpointed_work_hours=(60 - since_checkpoint_minutes) / 60 if checkpointable else 0.0,
                last_checkpoint_utc=T0 - timedelta(minutes=since_checkpoint_minutes) if checkpointable else None)
    return n, j


def test_checkpointable_job_moves_from_on_demand_to_spot_when_it_pays_back():
    n, j = _running_on_demand(True)
    pol = policy(replace_on_demand_with_spot=True)
    p = run(queue=[j], fleet=[n], offers=[ON_DEMAND, SPOT], pol=pol)
    (launch,) = p.of_kind("launch")
    (migrate,) = p.of_kind("migrate")
    (terminate,) = p.of_kind("terminate")
    assert launch.offer.market is Market.SPOT and migrate.to_node_ids == launch.node_names
    assert migrate.from_node_ids == ("od1",) and terminate.node_id == "od1"
    assert migrate.reason is Reason.CONSOLIDATION and "pays back" in migrate.detail
    assert p.usd_per_hour_after < p.usd_per_hour_before
    # off by default, and never for a job that cannot checkpoint
    assert run(queue=[j], fleet=[n], offers=[ON_DEMAND, SPOT]).actions == ()
    n2, j2 = _running_on_demand(False)
    assert run(queue=[j2], fleet=[n2], offers=[ON_DEMAND, SPOT], pol=pol).actions == ()


def test_no_move_when_it_does_not_pay_back_before_the_job_ends_or_within_the_horizon():
    pol = policy(replace_on_demand_with_spot=True)
    n, j = _running_on_demand(True, duration_hours=1.05)  # 1 h done: 3 minutes left
    assert run(queue=[j], fleet=[n], offers=[ON_DEMAND, SPOT], pol=pol).actions == ()
    n, j = _running_on_demand(True, since_checkpoint_minutes=25)
    assert run(queue=[j], fleet=[n], offers=[ON_DEMAND, SPOT],
               pol=replace(pol, consolidation_payback_hours=0.1)).actions == ()


def test_idle_on_demand_node_is_skipped_for_cheaper_spot_only_when_enabled():
    idle = node("od1", of=ON_DEMAND)
    j = job("j1", duration_hours=4)
    assert run(queue=[j], fleet=[idle], offers=[ON_DEMAND, SPOT]).of_kind("bind")[0].node_ids == ("od1",)
    p = run(queue=[j], fleet=[idle], offers=[ON_DEMAND, SPOT], pol=policy(replace_on_demand_with_spot=True))
    (launch,) = p.of_kind("launch")
    assert launch.offer.market is Market.SPOT
    assert p.of_kind("bind")[0].node_ids == launch.node_names
    # a short job is not worth a new node: it takes the idle one
    short = job("j2", duration_hours=0.1)
    p = run(queue=[short], fleet=[idle], offers=[ON_DEMAND, SPOT], pol=policy(replace_on_demand_with_spot=True))
    assert p.of_kind("bind")[0].node_ids == ("od1",) and not p.of_kind("launch")


def test_recent_reclaim_ttl_yields_to_a_forecast_number():
    from fleetctl.model import Forecast, OfferReclaim, OfferRisk

    j = job("j1", duration_hours=2)
    pol = policy(reclaimed_offer_ttl_minutes=30)
    reclaimed = (OfferReclaim(SPOT.key, T0 - timedelta(minutes=5)),)
    # without a forecast number the just-reclaimed spot offer is unavailable: on-demand
    p = run(queue=[j], offers=[ON_DEMAND, SPOT], pol=pol)
    assert p.of_kind("launch")[0].offer.market is Market.SPOT
    p = plan(now=T0, queue=(j,), fleet=(), offers=(ON_DEMAND, SPOT), forecast=Forecast(recent_reclaims=reclaimed),
             policy=pol)
    assert p.of_kind("launch")[0].offer.market is Market.ON_DEMAND
    # with one, the forecast decides
    fc = Forecast(interruption=(OfferRisk(SPOT.key, 60, 0.1),), recent_reclaims=reclaimed)
    p = plan(now=T0, queue=(j,), fleet=(), offers=(ON_DEMAND, SPOT), forecast=fc, policy=pol)
    assert p.of_kind("launch")[0].offer.market is Market.SPOT


def test_a_deadline_job_goes_to_spot_only_while_its_slack_survives_one_reclaim():
    """Restart overhead is 5 min. Without checkpoints a reclaim can cost all the
    work done, so 4 h of work needs 8 h 5 min before the deadline to risk spot;
    with 30-minute checkpoints it needs 4 h 35 min."""
    def market_for(j):  # noqa: ANN001, ANN202
        return run(queue=[j], offers=[ON_DEMAND, SPOT]).of_kind("launch")[0].offer.market

    plain = job("plain", duration_hours=4)
    assert market_for(replace(plain, deadline_utc=T0 + timedelta(hours=8, minutes=10))) is Market.SPOT
    assert market_for(replace(plain, deadline_utc=T0 + timedelta(hours=8))) is Market.ON_DEMAND
    saved = replace(plain, checkpointable=True, checkpoint_interval_minutes=30)
    assert market_for(replace(saved, deadline_utc=T0 + timedelta(hours=4, minutes=40))) is Market.SPOT
    assert market_for(replace(saved, deadline_utc=T0 + timedelta(hours=4, minutes=30))) is Market.ON_DEMAND


def test_a_deadline_job_does_not_wait_for_spot_it_could_not_take():
    """2 h of work without checkpoints, deadline in 4 h 20 min: after a 30-minute
    wait the slack would no longer survive a reclaim, so spot would be refused
    anyway; the job goes on-demand now instead of spending its slack waiting."""
    pol = policy(max_wait_for_spot_minutes=30)
    j = replace(job("j1", duration_hours=2), deadline_utc=T0 + timedelta(hours=4, minutes=20))
    p = run(queue=[j], offers=[ON_DEMAND], pol=pol)
    assert p.of_kind("launch")[0].offer.market is Market.ON_DEMAND
    roomy = replace(j, deadline_utc=T0 + timedelta(hours=6))  # 1 h 55 min spare: waits
    assert run(queue=[roomy], offers=[ON_DEMAND], pol=pol).unplaced[0].reason is Reason.WAITING_FOR_CAPACITY


def test_a_checkpointable_gang_moves_from_on_demand_to_spot_whole():
    # 3 workers of 4 GPUs on two 8-GPU on-demand nodes (2 + 1): moved together to spot nodes of one zone
    od8 = offer("od8", gpus=8, price=20.0, market=Market.ON_DEMAND)
    spot8 = offer("sp8", gpus=8, price=6.0, zone="z2")
    fleet = [node("od1", of=od8), node("od2", of=od8)]
    gang = replace(job("gang", workers=3, gpus=4, duration_hours=24, state=JobState.RUNNING,
                       node_ids=("od1", "od1", "od2")),
                   started_at_utc=T0 - timedelta(hours=1), checkpointable=True, checkpoint_interval_minutes=30.0,
                   last_checkpoint_utc=T0 - timedelta(minutes=5))
    pol = policy(replace_on_demand_with_spot=True, disruption_budget_nodes=2)
    p = run(queue=[gang], fleet=fleet, offers=[od8, spot8], pol=pol)
    (launch,) = p.of_kind("launch")
    (migrate,) = p.of_kind("migrate")
    assert launch.offer == spot8 and launch.count == 2
    assert migrate.from_node_ids == ("od1", "od2") and len(migrate.to_node_ids) == 3  # one entry per worker
    assert sorted(set(migrate.to_node_ids)) == sorted(launch.node_names)
    assert sorted(t.node_id for t in p.of_kind("terminate")) == ["od1", "od2"]
    # a disruption budget of one node does not cover a two-node gang
    assert not run(queue=[gang], fleet=fleet, offers=[od8, spot8],
                   pol=replace(pol, disruption_budget_nodes=1)).of_kind("migrate")
