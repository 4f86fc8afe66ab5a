"""The tick on the sandbox with a virtual clock: the job lifecycle, idempotence,
reclaim handling, and an interruption storm."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest
import sqlalchemy as sa

from fleetctl.controller import ApplyError
from fleetctl.controller.reconcile import TickReport, handle_interruptions, tick
from fleetctl.metrics import FleetMetrics
from fleetctl.model import Forecast, InterruptionKind, JobState, Market, NodeState, OfferRisk
from fleetctl.store import tables
from providers.base import LaunchRequest, Throttled
from tests.builders import T0, job, offer, policy

SPOT_A = offer("a8", price=8.0, zone="z1")
SPOT_B = offer("b8", price=9.0, zone="z2")
OD = offer("a8", price=20.0, zone="z1", market=Market.ON_DEMAND)
OFFERS = (SPOT_A, SPOT_B, OD)


def run_tick(w, now, pol=None, forecast=None, metrics=None):
    return tick(store=w.store, provider=w.provider, runtime=w.runtime, policy=pol or policy(), now=now,
                forecast=forecast, metrics=metrics)


def jobs(w):
    return {j.job_id: j for j in w.store.jobs()}


def invariants(w, now, pol=None):
    """Checked after every event: no job lost, none on two nodes, nothing bound
    to a gone or cordoned node (unless being requeued), budget kept."""
    nodes = {n.node_id: n for n in w.store.nodes(include_gone=True)}
    all_jobs = w.store.jobs()
    for j in all_jobs:
        assert j.state in (JobState.QUEUED, JobState.BOUND, JobState.RUNNING, JobState.SUCCEEDED), j
        if j.state in (JobState.BOUND, JobState.RUNNING):
            assert len(j.node_ids) == j.workers
            for nid in j.node_ids:
                assert nid in nodes and nodes[nid].state in (NodeState.LAUNCHING, NodeState.READY), (j, nodes.get(nid))
    used: dict[str, int] = {}
    for j in all_jobs:
        if j.state in (JobState.BOUND, JobState.RUNNING):
            for nid in j.node_ids:
                used[nid] = used.get(nid, 0) + j.gpus_per_worker
    for nid, gpus in used.items():
        assert gpus <= nodes[nid].offer.instance_type.gpu_count
    pol = pol or policy()
    if pol.max_usd_per_hour is not None:
        live = [n for n in nodes.values() if n.state is not NodeState.GONE]
        assert sum(n.offer.usd_per_hour for n in live) <= pol.max_usd_per_hour + 1e-6


def test_lifecycle_launch_start_finish_idle_terminate(world_factory):
    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("j", gpus=8, duration_hours=1.0)], T0)
    r = run_tick(w, T0)
    assert [a.kind for a in r.plan.actions] == ["launch", "bind"]
    r = run_tick(w, T0 + timedelta(minutes=1))
    assert r.started == ["j"] and jobs(w)["j"].state is JobState.RUNNING
    r = run_tick(w, T0 + timedelta(minutes=62))
    assert r.completed == ["j"] and jobs(w)["j"].state is JobState.SUCCEEDED
    r = run_tick(w, T0 + timedelta(minutes=62 + 11), pol=policy(idle_timeout_minutes=10))
    assert [a.kind for a in r.plan.actions] == ["terminate"]
    assert w.store.nodes() == ()


def test_a_running_jobs_periodic_checkpoints_are_recorded_as_the_runtime_reports_them(world_factory):
    w = world_factory(offers=OFFERS)
    w.store.add_jobs([replace(job("j", gpus=8, duration_hours=4.0), checkpointable=True,
                              checkpoint_interval_minutes=30.0)], T0)
    run_tick(w, T0)
    run_tick(w, T0 + timedelta(minutes=1))  # started at T0 + 1 min: checkpoints at + 31, + 61, ...
    run_tick(w, T0 + timedelta(minutes=20))
    assert jobs(w)["j"].last_checkpoint_utc is None
    run_tick(w, T0 + timedelta(minutes=45))
    assert jobs(w)["j"].last_checkpoint_utc == T0 + timedelta(minutes=31)
    before = w.store.jobs()
    run_tick(w, T0 + timedelta(minutes=50))  # no newer checkpoint: nothing written
    assert w.store.jobs() == before
    run_tick(w, T0 + timedelta(minutes=95))
    assert jobs(w)["j"].last_checkpoint_utc == T0 + timedelta(minutes=91) and jobs(w)["j"].state is JobState.RUNNING


def test_a_gang_starts_only_once_every_one_of_its_nodes_is_ready(world_factory):
    w = world_factory(offers=(OD,), launch_delay_seconds=120)
    w.store.add_jobs([job("gang", workers=2, gpus=8, duration_hours=4.0)], T0)
    run_tick(w, T0)
    gang = jobs(w)["gang"]
    assert gang.state is JobState.BOUND and len(set(gang.node_ids)) == 2
    first = {n.node_id: n for n in w.store.nodes()}[gang.node_ids[0]]
    w.store.put_node(replace(first, state=NodeState.READY, ready_at_utc=T0 + timedelta(seconds=30)),
                     T0 + timedelta(seconds=30))  # one node up early, the other still launching
    assert run_tick(w, T0 + timedelta(seconds=60)).started == []
    assert {n.node_id: n.state for n in w.store.nodes()} == {gang.node_ids[0]: NodeState.READY,
                                                             gang.node_ids[1]: NodeState.LAUNCHING}
    assert run_tick(w, T0 + timedelta(seconds=121)).started == ["gang"]


def test_a_job_bound_to_a_node_the_provider_does_not_list_is_not_started(world_factory):
    from fleetctl.controller.reconcile import advance_jobs

    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("j", gpus=8, state=JobState.BOUND, node_ids=("unlisted",)),
                      job("none", gpus=8, state=JobState.BOUND)], T0)  # and one bound to no node at all
    report = TickReport()
    advance_jobs(store=w.store, provider=w.provider, runtime=w.runtime, now=T0, report=report)
    assert report.started == [] and {j.state for j in jobs(w).values()} == {JobState.BOUND}


def test_a_tick_that_carries_out_a_plan_records_it_and_one_with_nothing_to_do_does_not(world_factory):
    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("j", gpus=8, duration_hours=5.0, spot=True)], T0)
    run_tick(w, T0)  # launch and bind
    (applied,) = w.store.events("plan_applied")
    assert applied["payload"] == {"summary": "2 actions", "usd_per_hour": SPOT_A.usd_per_hour}
    metrics = FleetMetrics()
    assert not run_tick(w, T0 + timedelta(minutes=1), metrics=metrics).plan.has_changes
    assert len(w.store.events("plan_applied")) == 1
    # each tick observes its duration and the fleet it leaves
    assert _count(metrics, "fleetctl_tick_duration_seconds_count") == 1
    assert _count(metrics, "fleetctl_gpu_allocation_ratio") == 1.0  # the job runs on all 8 GPUs of its node


def test_reconcile_is_idempotent(world_factory):
    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("j", gpus=8, duration_hours=5.0)], T0)
    run_tick(w, T0)
    run_tick(w, T0 + timedelta(minutes=1))
    before = (w.store.jobs(), w.store.nodes(include_gone=True))
    r = run_tick(w, T0 + timedelta(minutes=2))
    assert not r.plan.has_changes and not r.started and not r.completed
    assert (w.store.jobs(), w.store.nodes(include_gone=True)) == before


def _running_on_spot(w, **job_kw):
    w.store.add_jobs([job("j", gpus=8, duration_hours=4.0, **job_kw)], T0)
    run_tick(w, T0)
    run_tick(w, T0 + timedelta(minutes=1))
    j = jobs(w)["j"]
    assert j.state is JobState.RUNNING
    return j



def _checkpointing_on_spot(w):  # noqa: ANN001, ANN202
    """Job j running on a spot node since T0 + 1 min, checkpointing every 30 minutes; its node."""
    j = _running_on_spot(w, spot=True)
    w.store.put_job(replace(j, checkpointable=True, checkpoint_interval_minutes=30.0), T0)
    return w.store.nodes()[0]

def test_reclaim_checkpoints_requeues_and_replaces_elsewhere(world_factory):
    w = world_factory(offers=OFFERS)
    j = _running_on_spot(w, spot=True)
    j = replace(j, checkpointable=True, checkpoint_interval_minutes=30.0)
    w.store.put_job(j, T0)
    node = w.store.nodes()[0]
    assert node.offer == SPOT_A
    now = T0 + timedelta(minutes=1, seconds=100 * 60)  # 100 minutes into the run
    w.provider.reclaim(node.node_id, now)  # AWS: 120 s notice
    metrics = FleetMetrics()
    r = run_tick(w, now, metrics=metrics)
    assert r.interruptions == 1 and r.requeued == ["j"] and r.checkpoints == 1
    assert r.lost_gpu_hours == pytest.approx(0.0)  # checkpointed within the 2-minute notice
    j = jobs(w)["j"]
    assert j.checkpointed_work_hours == pytest.approx(100 / 60) and j.interruptions == 1
    assert j.work_lost_interruptions == 0  # it lost nothing: counted apart for count_interruptions: work_lost
    assert j.priority_boost == policy().requeue_priority_boost and SPOT_A.key in j.avoid_offer_keys
    # re-placed in the same tick, on capacity that does not fail with the lost node
    assert j.state is JobState.BOUND
    new_node = {n.node_id: n for n in w.store.nodes()}[j.node_ids[0]]
    assert new_node.offer == SPOT_B
    # the drained, now empty node is terminated in the same pass (the cloud would take it anyway)
    (term,) = r.plan.of_kind("terminate")
    assert term.node_id == node.node_id and term.reason.value == "interruption"
    assert node.node_id not in {n.node_id for n in w.store.nodes()}
    assert w.store.interruptions() == ()  # handled, acknowledged
    invariants(w, now)


class AcknowledgeThrottledOnce:
    """The sandbox provider, whose first acknowledgement is throttled."""

    def __init__(self, inner, message="DeleteMessage: Rate exceeded"):  # noqa: ANN001
        self._inner = inner
        self.message = message
        self.acknowledged: list[str] = []
        self.refused: list[str] = []

    def __getattr__(self, name):  # noqa: ANN001, ANN204
        return getattr(self._inner, name)

    def acknowledge(self, event_id):  # noqa: ANN001, ANN201
        if not self.refused:
            self.refused.append(event_id)
            raise Throttled(self.message)
        self.acknowledged.append(event_id)


def test_a_throttled_acknowledgement_holds_back_no_other_notice(world_factory):
    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job(name, gpus=8, duration_hours=4.0, spot=True) for name in ("a", "b")], T0)
    run_tick(w, T0)
    run_tick(w, T0 + timedelta(minutes=1))
    now = T0 + timedelta(minutes=30)
    nodes = sorted(n.node_id for n in w.store.nodes())
    assert len(nodes) == 2
    for node_id in nodes:
        w.provider.reclaim(node_id, now)
    provider = AcknowledgeThrottledOnce(w.provider)
    handled = handle_interruptions(store=w.store, provider=provider, runtime=w.runtime, policy=policy(), now=now)
    assert handled == 2
    assert {(j.state, j.interruptions) for j in jobs(w).values()} == {(JobState.QUEUED, 1)}  # both requeued
    assert len(provider.refused) == 1 and len(provider.acknowledged) == 1
    [failed] = [e for e in w.store.events() if e["kind"] == "interruption_acknowledge_failed"]
    assert failed["subject"] == nodes[0] and w.store.interruptions() == ()  # handled, though not acknowledged


def test_a_notice_whose_acknowledgement_is_refused_records_the_error_up_to_500_characters(world_factory):
    w = world_factory(offers=OFFERS)
    _running_on_spot(w, spot=True)
    now = T0 + timedelta(minutes=30)
    w.provider.reclaim(w.store.nodes()[0].node_id, now)
    provider = AcknowledgeThrottledOnce(w.provider, message="".join(f"{i % 10}" for i in range(600)))
    assert handle_interruptions(store=w.store, provider=provider, runtime=w.runtime, policy=policy(), now=now) == 1
    [failed] = w.store.events("interruption_acknowledge_failed")
    assert failed["payload"]["error"] == provider.message[:500]


def test_a_notice_from_the_store_is_handled_once_its_received_time_has_come(world_factory):
    """The store's notices (the endpoint's) are handled at or after the time
    they were received, not by a pass whose time is before it."""
    from fleetctl.model import InterruptionEvent
    from tests.nodewatch.conftest import QueuelessProvider

    w = world_factory(offers=OFFERS)
    _running_on_spot(w, spot=True)
    node = w.store.nodes()[0]
    posted = T0 + timedelta(minutes=30)
    w.store.add_interruption(InterruptionEvent("posted-1", "aws", node.node_id, InterruptionKind.RECLAIM_WARNING,
                                               posted, posted + timedelta(minutes=2)))
    provider = QueuelessProvider(w.provider)
    early = posted - timedelta(seconds=1)
    assert handle_interruptions(store=w.store, provider=provider, runtime=w.runtime, policy=policy(), now=early) == 0
    assert jobs(w)["j"].state is JobState.RUNNING and [e.event_id for e in w.store.interruptions()] == ["posted-1"]
    assert handle_interruptions(store=w.store, provider=provider, runtime=w.runtime, policy=policy(), now=posted) == 1
    assert jobs(w)["j"].state is JobState.QUEUED and w.store.interruptions() == ()


def test_a_reclaim_of_a_node_whose_job_finished_requeues_nothing(world_factory):
    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("j", gpus=8, duration_hours=1.0, spot=True)], T0)
    run_tick(w, T0)
    run_tick(w, T0 + timedelta(minutes=1))
    now = T0 + timedelta(minutes=62)
    assert run_tick(w, now).completed == ["j"]
    (node,) = w.store.nodes()
    w.provider.reclaim(node.node_id, now + timedelta(minutes=1))
    r = run_tick(w, now + timedelta(minutes=1))
    assert r.interruptions == 1 and r.requeued == [] and r.lost_gpu_hours == 0.0
    done = jobs(w)["j"]
    assert (done.state, done.interruptions, done.node_ids) == (JobState.SUCCEEDED, 0, (node.node_id,))
    assert w.store.events("requeue") == ()


def test_a_notice_is_counted_under_its_nodes_provider_not_the_senders_word(world_factory):
    from fleetctl.model import InterruptionEvent

    w = world_factory(offers=OFFERS)  # AWS offers
    _running_on_spot(w, spot=True)
    node = w.store.nodes()[0]
    now = T0 + timedelta(minutes=30)
    w.provider.notify(InterruptionEvent("posted-1", "gcp", node.node_id, InterruptionKind.RECLAIM_WARNING, now,
                                        now + timedelta(seconds=30)))
    metrics = FleetMetrics()
    assert run_tick(w, now, metrics=metrics).requeued == ["j"]
    counted = {tuple(sorted(s.labels.items())): s.value for m in metrics.interruptions.collect() for s in m.samples
               if s.name.endswith("_total")}
    assert counted == {(("kind", "reclaim_warning"), ("provider", "aws")): 1.0}


def test_a_reclaim_before_the_job_started_loses_no_work(world_factory):
    w = world_factory(offers=OFFERS)
    w.store.add_jobs([replace(job("j", gpus=8, duration_hours=4.0, spot=True), checkpointable=True,
                              checkpoint_interval_minutes=30.0)], T0)
    run_tick(w, T0)
    bound = jobs(w)["j"]
    assert bound.state is JobState.BOUND
    now = T0 + timedelta(seconds=30)
    w.provider.reclaim(bound.node_ids[0], now)
    report = TickReport()
    r = handle_interruptions(store=w.store, provider=w.provider, runtime=w.runtime, policy=policy(), now=now,
                             report=report)
    assert r == 1 and report.requeued == ["j"] and report.lost_gpu_hours == 0.0 and report.checkpoints == 0
    again = jobs(w)["j"]
    assert (again.state, again.interruptions, again.work_lost_interruptions) == (JobState.QUEUED, 1, 0)
    (requeue,) = w.store.events("requeue")
    assert (requeue["payload"]["checkpoint"], requeue["payload"]["lost_gpu_hours"]) == ("none", 0.0)


def test_non_checkpointable_job_restarts_and_its_work_is_counted(world_factory):
    w = world_factory(offers=OFFERS)
    _running_on_spot(w, spot=True)
    now = T0 + timedelta(minutes=61)
    w.provider.reclaim(w.store.nodes()[0].node_id, now)
    r = run_tick(w, now)
    assert r.lost_gpu_hours == pytest.approx(8 * 1.0)
    assert jobs(w)["j"].checkpointed_work_hours == 0.0
    assert (jobs(w)["j"].interruptions, jobs(w)["j"].work_lost_interruptions) == (1, 1)


def test_too_many_interruptions_fall_back_to_on_demand(world_factory):
    spot_c = offer("c8", price=9.5, zone="z3")
    w = world_factory(offers=(*OFFERS, spot_c))
    _running_on_spot(w, spot=True)
    now = T0 + timedelta(minutes=2)
    pol = policy(max_interruptions_before_on_demand=1)
    markets = []
    for _ in range(2):
        (node,) = w.store.nodes()
        w.provider.reclaim(node.node_id, now)
        run_tick(w, now, pol=pol)
        j = jobs(w)["j"]
        markets.append({n.node_id: n for n in w.store.nodes()}[j.node_ids[0]].offer.market)
        now += timedelta(minutes=3)
        run_tick(w, now, pol=pol)
    # after the first reclaim another spot offer (a third one is still untried);
    # after the second, more than the policy allows: on-demand
    assert markets == [Market.SPOT, Market.ON_DEMAND] and jobs(w)["j"].interruptions == 2


def test_reclaims_a_checkpoint_saved_from_need_not_count(world_factory):
    # count_interruptions: work_lost: a checkpointable job that saves its work within every
    # notice stays on spot however often it moves; one that cannot checkpoint still falls back.
    spare = (offer("c8", price=9.5, zone="z3"), offer("d8", price=9.6, zone="z4"))  # a fresh zone each time
    pol = policy(max_interruptions_before_on_demand=1, count_interruptions="work_lost")
    for checkpointable, expected in ((True, [Market.SPOT] * 3), (False, [Market.SPOT, Market.ON_DEMAND])):
        w = world_factory(offers=(*OFFERS, *spare))
        j = _running_on_spot(w, spot=True)
        w.store.put_job(replace(j, checkpointable=checkpointable, checkpoint_interval_minutes=30.0), T0)
        now = T0 + timedelta(minutes=30)
        markets = []
        for _ in range(len(expected)):
            (node,) = [n for n in w.store.nodes() if n.node_id in jobs(w)["j"].node_ids]
            w.provider.reclaim(node.node_id, now)
            run_tick(w, now, pol=pol)
            j = jobs(w)["j"]
            markets.append({n.node_id: n for n in w.store.nodes()}[j.node_ids[0]].offer.market)
            run_tick(w, now + timedelta(minutes=5), pol=pol)  # the new node is up: the job runs again
            invariants(w, now + timedelta(minutes=5))
            now += timedelta(minutes=30)  # and does 25 minutes of work before the next reclaim
        assert markets == expected, checkpointable
        assert jobs(w)["j"].interruptions == len(expected)
        assert jobs(w)["j"].work_lost_interruptions == (0 if checkpointable else len(expected))


def test_avoided_offers_are_a_preference_not_a_ban(world_factory):
    w = world_factory(offers=(SPOT_A,))
    _running_on_spot(w, spot=True)
    (node,) = w.store.nodes()
    w.provider.reclaim(node.node_id, T0 + timedelta(minutes=5))
    r = run_tick(w, T0 + timedelta(minutes=5))
    assert not r.plan.unplaced and jobs(w)["j"].state is JobState.BOUND  # the only offer, failed or not


@pytest.mark.parametrize("risk, drains, horizon", [(0.05, False, 60), (0.5, True, 60), (0.2, True, 60),
                                                   (0.5, False, 24 * 60)],
                         ids=["low-risk-ignored", "high-risk-drains", "a-risk-at-the-threshold-drains",
                              "a-day's-risk-is-not-an-hour's"])
def test_rebalance_recommendation_drains_only_when_risk_is_high(world_factory, risk, drains, horizon):
    w = world_factory(offers=OFFERS)
    _running_on_spot(w, spot=True)
    node = w.store.nodes()[0]
    now = T0 + timedelta(minutes=30)
    w.provider.reclaim(node.node_id, now, kind=InterruptionKind.REBALANCE)
    fc = Forecast(interruption=(OfferRisk(node.offer.key, horizon, risk),))  # 0.5 a day is 0.03 an hour
    r = run_tick(w, now, pol=policy(rebalance_drain_probability=0.2), forecast=fc)
    assert (r.requeued == ["j"]) is drains
    # drained and then terminated in the same pass, or left running
    assert (node.node_id not in {n.node_id for n in w.store.nodes()}) is drains


def test_a_rebalance_drain_checkpoints_without_the_reclaim_grace(world_factory):
    """A rebalance hint has no deadline and the drain is fleetctl's choice: the
    checkpoint is not cut to the grace a reclaim warning without one gets."""
    w = world_factory(offers=OFFERS)  # the sim runtime's checkpoint takes 30 s
    node = _checkpointing_on_spot(w)  # its job started at T0 + 1 min
    now = T0 + timedelta(minutes=50)
    w.provider.reclaim(node.node_id, now, kind=InterruptionKind.REBALANCE)
    fc = Forecast(interruption=(OfferRisk(node.offer.key, 60, 0.5),))
    r = run_tick(w, now, pol=policy(rebalance_drain_probability=0.2, checkpoint_grace_seconds=20), forecast=fc)
    assert r.requeued == ["j"] and (r.checkpoints, r.checkpoints_missed) == (1, 0)
    assert r.lost_gpu_hours == pytest.approx(0.0) and jobs(w)["j"].checkpointed_work_hours == pytest.approx(49 / 60)
    (requeue,) = w.store.events("requeue")
    assert requeue["payload"]["checkpoint"] == "saved"


def test_a_rebalance_hint_for_a_node_already_gone_is_counted_and_drains_nothing(world_factory):
    w = world_factory(offers=OFFERS)
    _running_on_spot(w, spot=True)
    node = w.store.nodes()[0]
    now = T0 + timedelta(minutes=30)
    w.store.put_node(replace(node, state=NodeState.GONE), now)
    w.provider.reclaim(node.node_id, now, kind=InterruptionKind.REBALANCE)
    fc = Forecast(interruption=(OfferRisk(node.offer.key, 60, 0.5),))
    report = TickReport()
    assert handle_interruptions(store=w.store, provider=w.provider, runtime=w.runtime, now=now, forecast=fc,
                                policy=policy(rebalance_drain_probability=0.2), report=report) == 1
    assert report.interruptions == 1 and report.requeued == [] and jobs(w)["j"].state is JobState.RUNNING
    assert w.store.events("rebalance_ignored") == () and w.store.interruptions() == ()


def test_a_rebalance_hint_with_a_deadline_checkpoints_within_the_grace(world_factory):
    from fleetctl.model import InterruptionEvent

    w = world_factory(offers=OFFERS)  # the sim runtime's checkpoint takes 30 s
    node = _checkpointing_on_spot(w)  # its job started at T0 + 1 min
    now = T0 + timedelta(minutes=50)  # 49 minutes into the run: 19 since the last periodic checkpoint
    w.provider.notify(InterruptionEvent("posted-rebalance", "aws", node.node_id, InterruptionKind.REBALANCE, now,
                                        now + timedelta(minutes=2)))
    fc = Forecast(interruption=(OfferRisk(node.offer.key, 60, 0.5),))
    r = run_tick(w, now, pol=policy(rebalance_drain_probability=0.2, checkpoint_grace_seconds=20), forecast=fc)
    assert r.requeued == ["j"] and (r.checkpoints, r.checkpoints_missed) == (1, 1)  # 30 s do not fit 20
    assert r.lost_gpu_hours == pytest.approx(8 * 19 / 60)



def test_a_rebalance_hint_handled_after_its_deadline_still_asks_for_a_checkpoint(world_factory):
    """A rebalance recommendation's node keeps working: its deadline (a drain
    budget a watcher posted) is not the end of the machine, so a late
    handling still asks the job to checkpoint, and reads its work at the
    handling, unlike a reclaim warning past its deadline."""
    from fleetctl.model import InterruptionEvent

    w = world_factory(offers=OFFERS)
    node = _checkpointing_on_spot(w)  # its job started at T0 + 1 min
    posted = T0 + timedelta(minutes=50)
    w.provider.notify(InterruptionEvent("posted-rebalance", "aws", node.node_id, InterruptionKind.REBALANCE, posted,
                                        posted + timedelta(minutes=2)))
    fc = Forecast(interruption=(OfferRisk(node.offer.key, 60, 0.5),))
    r = run_tick(w, posted + timedelta(minutes=15), pol=policy(rebalance_drain_probability=0.2), forecast=fc)
    assert r.requeued == ["j"] and r.checkpoints == 1  # asked (and missed: its deadline is past)
    # read at the handling: 64 minutes into the run, the periodic checkpoint at 60 kept, 4 minutes lost
    again = jobs(w)["j"]
    assert again.checkpointed_work_hours == pytest.approx(1.0)
    assert r.lost_gpu_hours == pytest.approx(8 * 4 / 60)

def test_one_rebalance_hint_through_two_paths_is_counted_once(world_factory):
    from fleetctl.model import InterruptionEvent

    w = world_factory(offers=OFFERS)
    _running_on_spot(w, spot=True)
    node = w.store.nodes()[0]
    now = T0 + timedelta(minutes=30)
    w.provider.reclaim(node.node_id, now, kind=InterruptionKind.REBALANCE)  # the queue's
    w.store.add_interruption(InterruptionEvent("node-watch-rebalance", "aws", node.node_id,
                                               InterruptionKind.REBALANCE, now, None))  # node-watch's
    metrics = FleetMetrics()
    r = run_tick(w, now, pol=policy(rebalance_drain_probability=0.9), metrics=metrics)
    assert r.interruptions == 1 and len(w.store.events("interruption_duplicate")) == 1
    # a reclaim notice after the hint is still a reclaim
    w.provider.reclaim(node.node_id, now + timedelta(minutes=1))
    r = run_tick(w, now + timedelta(minutes=1), metrics=metrics)
    assert r.interruptions == 1 and r.requeued == ["j"]


def test_interruption_storm_every_job_completes(world_factory):
    """Half the spot fleet is reclaimed within two minutes; every job still completes
    and the invariants hold after every event."""
    offers = (SPOT_A, SPOT_B, offer("c8", price=9.5, zone="z3"), OD)
    w = world_factory(offers=offers)
    pol = policy(max_usd_per_hour=400.0, max_share_per_instance_type=0.5)
    queue = [replace(job(f"j{i}", gpus=8, duration_hours=2.0 + (i % 3), submitted=T0 + timedelta(seconds=i)),
                     checkpointable=i % 2 == 0, checkpoint_interval_minutes=20.0 if i % 2 == 0 else None)
             for i in range(12)]
    w.store.add_jobs(queue, T0)
    now = T0
    for _ in range(3):
        run_tick(w, now, pol=pol)
        invariants(w, now, pol)
        now += timedelta(minutes=1)
    spot = sorted((n for n in w.store.nodes() if n.offer.market is Market.SPOT), key=lambda n: n.node_id)
    assert len(spot) >= 4
    for k, n in enumerate(spot[: len(spot) // 2]):
        w.provider.reclaim(n.node_id, now + timedelta(seconds=10 * k))
    for _ in range(24 * 60 // 5):
        run_tick(w, now, pol=pol)
        invariants(w, now, pol)
        if all(j.state is JobState.SUCCEEDED for j in w.store.jobs()):
            break
        now += timedelta(seconds=30) if now < T0 + timedelta(minutes=10) else timedelta(minutes=5)
    assert all(j.state is JobState.SUCCEEDED for j in w.store.jobs()), [(j.job_id, j.state) for j in w.store.jobs()]
    assert any(e["kind"] == "requeue" for e in w.store.events())


def test_demand_by_model_counts_active_gpus_where_they_run_or_what_they_ask():
    from dataclasses import replace as _replace

    from fleetctl.controller.reconcile import demand_by_model
    from fleetctl.model import JobState
    from tests.builders import job, node, offer

    n = node("n1", of=offer("g8", gpus=8, model="A100-80GB"))
    jobs = [
        _replace(job("run", gpus=4, state=JobState.RUNNING, node_ids=("n1",)), gpu_models=("A100-80GB", "H100-80GB")),
        _replace(job("wait", gpus=2), gpu_models=("L4",)),
        job("any", gpus=1),
        job("done", gpus=8, state=JobState.SUCCEEDED),
    ]
    assert demand_by_model(jobs, [n]) == {"A100-80GB": 4, "L4": 2, "any": 1}


def test_demand_by_model_leaves_out_cpu_only_jobs_and_reads_a_job_on_an_unlisted_node_by_what_it_asks():
    from fleetctl.controller.reconcile import demand_by_model
    from tests.builders import node

    cpu = node("c1", of=offer("c4", gpus=0, model=None))
    gang = replace(job("gang", workers=2, gpus=4, state=JobState.RUNNING, node_ids=("gone-1", "c1")), gpu_models=("L4",))
    jobs = [gang, job("cpu", gpus=0, state=JobState.RUNNING, node_ids=("c1",)), job("wait-cpu", gpus=0)]
    assert demand_by_model(jobs, [cpu]) == {"L4": 8}  # no node it is listed on has a GPU model


def test_one_reclaim_through_two_paths_is_handled_and_counted_once(world_factory):
    """AWS announces a reclaim both on the EventBridge queue and on the node
    (node-watch): two notices, one interruption."""
    from fleetctl.model import InterruptionEvent

    w = world_factory(offers=OFFERS)
    j = _running_on_spot(w, spot=True)
    node = w.store.nodes()[0]
    now = T0 + timedelta(minutes=30)
    w.provider.reclaim(node.node_id, now)  # the queue's notice
    w.store.add_interruption(InterruptionEvent("node-watch-aws-1", "aws", node.node_id,
                                               InterruptionKind.RECLAIM_WARNING, now,
                                               now + timedelta(minutes=2)))  # node-watch's notice
    metrics = FleetMetrics()
    r = run_tick(w, now, metrics=metrics)
    assert r.interruptions == 1 and r.requeued == [j.job_id]
    assert sum(s.value for m in metrics.interruptions.collect() for s in m.samples
               if s.name.endswith("_total")) == 1
    assert w.store.interruptions() == ()  # both notices handled
    assert len(w.store.events("interruption_duplicate")) == 1
    assert jobs(w)["j"].interruptions == 1


def test_cancel_stops_a_running_job_drops_a_queued_one_and_survives_a_stale_write(world_factory):
    from fleetctl.controller.runtime import SimRuntime
    from fleetctl.store import StoreError

    stopped: list[str] = []

    class Recording(SimRuntime):  # the real sim runtime, with its stops written down
        def stop(self, job, now):  # noqa: ANN001, ANN201
            stopped.append(job.job_id)
            return super().stop(job, now)

    w = world_factory(offers=OFFERS)
    w.runtime = Recording(checkpoint_seconds=30)
    w.store.add_jobs([job("run", gpus=8, duration_hours=4.0)], T0)
    run_tick(w, T0)
    run_tick(w, T0 + timedelta(minutes=1))
    node_id = jobs(w)["run"].node_ids[0]
    w.store.add_jobs([job("wait", gpus=8, duration_hours=4.0, submitted=T0 + timedelta(minutes=2))], T0)
    with pytest.raises(StoreError, match="no such job: nope; nothing was cancelled"):
        w.store.request_cancel(["wait", "nope"], T0 + timedelta(minutes=2))
    assert jobs(w)["wait"].state is JobState.QUEUED and w.store.pending_cancellations() == ()
    assert w.store.request_cancel(["run", "wait"], T0 + timedelta(minutes=2), "wrong data") == {
        "run": "requested", "wait": "cancelled"}
    assert jobs(w)["wait"].state is JobState.CANCELLED and jobs(w)["run"].state is JobState.RUNNING
    r = run_tick(w, T0 + timedelta(minutes=3), pol=policy(idle_timeout_minutes=10))
    assert r.cancelled == ["run"] and stopped == ["run"]
    assert jobs(w)["run"].state is JobState.CANCELLED and jobs(w)["run"].node_ids == ()
    assert not any(a.kind in ("launch", "bind") for a in r.plan.actions)  # "wait" is not placed
    assert w.store.pending_cancellations() == ()
    assert w.store.request_cancel(["run"], T0 + timedelta(minutes=4)) == {"run": "already cancelled"}
    r = run_tick(w, T0 + timedelta(minutes=14), pol=policy(idle_timeout_minutes=10))
    assert [(a.kind, a.node_id) for a in r.plan.actions] == [("terminate", node_id)]

    # A tick that read a job before its cancel and writes it back afterwards does not undo the cancel.
    w.store.add_jobs([job("late", gpus=8, duration_hours=1.0, submitted=T0 + timedelta(minutes=20))], T0)
    stale = jobs(w)["late"]
    assert w.store.request_cancel(["late"], T0 + timedelta(minutes=20)) == {"late": "cancelled"}
    w.store.put_job(replace(stale, state=JobState.BOUND, node_ids=("sim-x",)), T0 + timedelta(minutes=20))
    r = run_tick(w, T0 + timedelta(minutes=21))
    assert r.cancelled == ["late"] and jobs(w)["late"].state is JobState.CANCELLED
    assert stopped == ["run"]  # a job that was not running has nothing to stop


def _count(metrics, name):  # noqa: ANN001, ANN202
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client import generate_latest

    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    return None


def test_the_wait_is_observed_once_per_job_and_restarts_are_not_waits(world_factory):
    w = world_factory(offers=OFFERS)
    metrics = FleetMetrics()
    w.store.add_jobs([replace(job("j", gpus=8, duration_hours=4.0, spot=True), checkpointable=True,
                              checkpoint_interval_minutes=30.0)], T0)
    run_tick(w, T0, metrics=metrics)
    run_tick(w, T0 + timedelta(minutes=1), metrics=metrics)
    assert _count(metrics, "fleetctl_job_wait_seconds_count") == 1
    assert _count(metrics, "fleetctl_job_wait_seconds_sum") == pytest.approx(60.0)
    now = T0 + timedelta(minutes=40)
    w.provider.reclaim(w.store.nodes()[0].node_id, now)
    run_tick(w, now, metrics=metrics)  # requeued and re-placed
    run_tick(w, now + timedelta(minutes=1), metrics=metrics)  # started again
    assert jobs(w)["j"].state is JobState.RUNNING and jobs(w)["j"].interruptions == 1
    assert _count(metrics, "fleetctl_job_wait_seconds_count") == 1  # the restart is not a second wait
    assert jobs(w)["j"].first_started_at_utc == T0 + timedelta(minutes=1)


def test_a_job_started_the_moment_it_was_submitted_waited_0_seconds_and_a_spot_launch_is_no_fallback(
        world_factory):
    w = world_factory(offers=OFFERS)
    metrics = FleetMetrics()
    w.store.add_jobs([job("j", gpus=8, duration_hours=4.0, spot=True)], T0)
    r = run_tick(w, T0, metrics=metrics)  # bound to a new spot node, ready at once
    assert [a.kind for a in r.plan.actions] == ["launch", "bind"] and r.plan.actions[0].offer == SPOT_A
    assert run_tick(w, T0, metrics=metrics).started == ["j"]  # started in a second pass at the same time
    assert _count(metrics, "fleetctl_job_wait_seconds_count") == 1
    assert _count(metrics, "fleetctl_job_wait_seconds_sum") == 0.0
    assert _count(metrics, "fleetctl_on_demand_fallbacks_total") == 0.0


def test_a_deadline_at_risk_on_on_demand_is_a_fallback_and_migration_checkpoints_count(world_factory):
    w = world_factory(offers=OFFERS)
    metrics = FleetMetrics()
    # spot-eligible, but 1 hour of work due in 1.5 hours: one reclaim would miss it, so on-demand
    w.store.add_jobs([replace(job("due", gpus=8, duration_hours=1.0, spot=True),
                              deadline_utc=T0 + timedelta(hours=1.5))], T0)
    r = run_tick(w, T0, metrics=metrics)
    (launch,) = r.plan.of_kind("launch")
    assert launch.offer.market is Market.ON_DEMAND and launch.reason.value == "on_demand_fallback"
    assert _count(metrics, "fleetctl_on_demand_fallbacks_total") == 1

    # A migration checkpoints the running job it moves, and the executor counts it.
    from fleetctl.controller import execute
    from fleetctl.model import Migrate, Plan, Reason

    w.store.add_jobs([replace(job("k", gpus=8, duration_hours=0.25, spot=True))], T0)
    run_tick(w, T0 + timedelta(minutes=1), metrics=metrics)
    run_tick(w, T0 + timedelta(minutes=2), metrics=metrics)
    run_tick(w, T0 + timedelta(minutes=20), metrics=metrics)  # k is done; its node is idle
    due = jobs(w)["due"]
    assert due.state is JobState.RUNNING and jobs(w)["k"].state is JobState.SUCCEEDED
    idle = next(n.node_id for n in w.store.nodes() if n.node_id not in due.node_ids)
    w.store.put_job(replace(due, checkpointable=True), T0 + timedelta(minutes=20))
    moved = execute(Plan((Migrate("due", due.node_ids, (idle,), Reason.CONSOLIDATION, "test"),), (), 0.0, 0.0),
                    store=w.store, provider=w.provider, now=T0 + timedelta(minutes=21), plan_id="0" * 64,
                    runtime=w.runtime)
    assert moved.checkpoints == 1 and jobs(w)["due"].node_ids == (idle,)
    # it resumes from the checkpoint taken for the move, and records when that was
    assert jobs(w)["due"].checkpointed_work_hours == pytest.approx(20 / 60)
    assert jobs(w)["due"].last_checkpoint_utc == T0 + timedelta(minutes=21)


def test_a_node_gone_without_a_notice_is_handled_as_a_reclaim_and_a_late_notice_is_a_duplicate(world_factory):
    from fleetctl.model import InterruptionEvent

    w = world_factory(offers=OFFERS)
    metrics = FleetMetrics()
    j = _running_on_spot(w, spot=True)
    node = w.store.nodes()[0]
    now = T0 + timedelta(minutes=31)
    w.provider.terminate(node.node_id, now)  # behind fleetctl's back: no notice
    r = run_tick(w, now, metrics=metrics)
    assert r.lost_nodes == [node.node_id] and r.requeued == ["j"] and r.interruptions == 1
    assert r.lost_gpu_hours == pytest.approx(8 * 0.5)  # it cannot checkpoint: its half hour is lost
    again = jobs(w)["j"]
    assert (again.interruptions, again.work_lost_interruptions) == (1, 1) and node.offer.key in again.avoid_offer_keys
    assert again.state is JobState.BOUND and again.node_ids != j.node_ids  # re-placed in the same tick
    assert _count(metrics, "fleetctl_lost_gpu_hours_total") == pytest.approx(4.0)
    late = InterruptionEvent(event_id="aws-state-change-1", provider="aws", node_id=node.node_id,
                             kind=InterruptionKind.TERMINATED, received_at_utc=now + timedelta(minutes=1),
                             deadline_utc=now + timedelta(minutes=1))
    w.provider.notify(late)
    r = run_tick(w, now + timedelta(minutes=1), metrics=metrics)
    assert r.interruptions == 0 and r.requeued == [] and jobs(w)["j"].interruptions == 1  # handled once
    assert [e["subject"] for e in w.store.events("interruption_duplicate")] == [node.node_id]
    invariants(w, now + timedelta(minutes=1))


def test_a_reclaim_warning_for_a_node_already_gone_checkpoints_nothing_and_leaves_it_gone(world_factory):
    """The notice came late (the watcher retried): the store says the node is
    gone, so there is nothing to checkpoint on and nothing to cordon."""
    from fleetctl.model import InterruptionEvent

    w = world_factory(offers=OFFERS)
    node = _checkpointing_on_spot(w)  # its job started at T0 + 1 min
    now = T0 + timedelta(minutes=50)  # 49 minutes into the run: 19 since the last periodic checkpoint
    w.store.put_node(replace(node, state=NodeState.GONE), now)
    w.provider.notify(InterruptionEvent("late-1", "aws", node.node_id, InterruptionKind.RECLAIM_WARNING, now,
                                        now + timedelta(minutes=2)))
    metrics = FleetMetrics()
    assert handle_interruptions(store=w.store, provider=w.provider, runtime=w.runtime, policy=policy(), now=now,
                                metrics=metrics) == 1
    assert _count(metrics, "fleetctl_checkpoints_total") == 0 and _count(metrics, "fleetctl_lost_gpu_hours_total") \
        == pytest.approx(8 * 19 / 60)
    again = jobs(w)["j"]
    assert again.state is JobState.QUEUED and again.checkpointed_work_hours == pytest.approx(0.5)
    assert again.work_lost_interruptions == 1 and node.offer.key in again.avoid_offer_keys
    assert {n.node_id: n.state for n in w.store.nodes(include_gone=True)}[node.node_id] is NodeState.GONE


def test_a_lost_node_whose_audit_entry_fails_is_recorded_with_it_by_the_next_tick(world_factory):
    """The controller's own notice for a node gone without one, and its ``node_lost`` audit entry,
    land in one transaction: a failed audit write leaves neither, and the next tick records both
    and handles the node once."""
    import sqlalchemy as sa

    w = world_factory(offers=OFFERS)
    _running_on_spot(w, spot=True)
    node = w.store.nodes()[0]
    now = T0 + timedelta(minutes=31)
    w.provider.terminate(node.node_id, now)  # behind fleetctl's back: no notice
    engine = sa.create_engine(w.store.url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TRIGGER no_audit BEFORE INSERT ON events WHEN NEW.kind = 'node_lost' "
                             "BEGIN SELECT RAISE(ABORT, 'audit log unwritable'); END"))
    with pytest.raises(sa.exc.IntegrityError, match="audit log unwritable"):
        run_tick(w, now)
    assert w.store.interruptions(unhandled_only=False) == () and w.store.events("node_lost") == ()  # neither
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TRIGGER no_audit"))
    engine.dispose()
    later = now + timedelta(minutes=1)
    r = run_tick(w, later)
    assert r.lost_nodes == [node.node_id] and r.requeued == ["j"] and r.interruptions == 1
    (event,) = w.store.interruptions(unhandled_only=False)
    (audit,) = w.store.events("node_lost")
    assert event.node_id == audit["subject"] == node.node_id
    invariants(w, later)


def test_a_lost_on_demand_node_is_its_providers_termination_and_its_offer_is_not_avoided(world_factory):
    from fleetctl.controller.reconcile import handle_lost_nodes

    w = world_factory(offers=(OD,))
    w.store.add_jobs([job("j", gpus=8, duration_hours=4.0)], T0)
    run_tick(w, T0)
    run_tick(w, T0 + timedelta(minutes=1))
    (node,) = w.store.nodes()
    now = T0 + timedelta(minutes=31)
    kw = dict(store=w.store, provider=w.provider, runtime=w.runtime, policy=policy(), now=now)
    assert handle_lost_nodes(**kw) == 0  # nothing lost yet
    w.provider.terminate(node.node_id, now)  # behind fleetctl's back: no notice
    w.store.put_node(replace(node, state=NodeState.GONE), now)  # and the store has it gone (a listing said so)
    report = TickReport()
    assert handle_lost_nodes(**kw, report=report) == 1 and handle_lost_nodes(**kw) == 0
    assert report.lost_nodes == [node.node_id] and report.requeued == ["j"]
    again = jobs(w)["j"]
    assert again.state is JobState.QUEUED and again.avoid_offer_keys == ()  # on-demand: nothing to avoid
    (event,) = w.store.interruptions(unhandled_only=False)
    assert (event.provider, event.kind, event.node_id, event.deadline_utc) == (
        "aws", InterruptionKind.TERMINATED, node.node_id, now)


def test_a_job_on_a_node_the_store_never_recorded_is_requeued_by_an_unknown_providers_termination(world_factory):
    from fleetctl.controller.reconcile import handle_lost_nodes

    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("j", gpus=8, duration_hours=4.0, state=JobState.RUNNING, node_ids=("ghost",))], T0)
    metrics = FleetMetrics()
    assert handle_lost_nodes(store=w.store, provider=w.provider, runtime=w.runtime, policy=policy(), now=T0,
                             metrics=metrics) == 1  # without a report to add to
    again = jobs(w)["j"]
    assert (again.state, again.interruptions, again.avoid_offer_keys) == (JobState.QUEUED, 1, ())
    (event,) = w.store.interruptions(unhandled_only=False)
    assert (event.provider, event.node_id) == ("unknown", "ghost")
    counted = {tuple(sorted(s.labels.items())): s.value for m in metrics.interruptions.collect() for s in m.samples
               if s.name.endswith("_total")}
    assert counted == {(("kind", "terminated"), ("provider", "unknown")): 1.0}


def test_apply_cancellations_says_how_many_jobs_it_cancelled(world_factory):
    from fleetctl.controller.reconcile import apply_cancellations

    w = world_factory(offers=OFFERS)
    kw = dict(store=w.store, provider=w.provider, runtime=w.runtime)
    assert apply_cancellations(**kw, now=T0) == 0  # nothing asked
    w.store.add_jobs([job("run", gpus=8, duration_hours=4.0)], T0)
    run_tick(w, T0)
    run_tick(w, T0 + timedelta(minutes=1))
    assert w.store.request_cancel(["run"], T0 + timedelta(minutes=2)) == {"run": "requested"}
    report = TickReport()
    assert apply_cancellations(**kw, now=T0 + timedelta(minutes=3), report=report) == 1
    assert report.cancelled == ["run"] and jobs(w)["run"].state is JobState.CANCELLED
    assert apply_cancellations(**kw, now=T0 + timedelta(minutes=4)) == 0
    w.store.add_jobs([job("a", gpus=8), job("b", gpus=8)], T0)
    assert w.store.request_cancel(["a", "b"], T0 + timedelta(minutes=5)) == {"a": "cancelled", "b": "cancelled"}
    w.store.put_job(replace(jobs(w)["a"], state=JobState.BOUND), T0 + timedelta(minutes=5))  # a stale write: 1 left
    assert apply_cancellations(**kw, now=T0 + timedelta(minutes=6)) == 1  # without a report to add to
    assert jobs(w)["a"].state is JobState.CANCELLED


def test_a_gang_survivor_is_idle_from_the_reclaim_not_from_an_older_idle_time(world_factory):
    od = offer("a8", price=20.0, zone="z1", market=Market.ON_DEMAND)
    w = world_factory(offers=(od,))
    pol = policy(idle_timeout_minutes=15)
    w.store.add_jobs([job("gang", workers=2, gpus=8, duration_hours=4.0)], T0)
    run_tick(w, T0, pol=pol)
    run_tick(w, T0 + timedelta(minutes=1), pol=pol)
    gang = jobs(w)["gang"]
    assert gang.state is JobState.RUNNING and len(set(gang.node_ids)) == 2
    lost, survivor = sorted(set(gang.node_ids))
    now = T0 + timedelta(minutes=60)
    w.provider.terminate(lost, now)
    r = run_tick(w, now, pol=pol)
    assert r.lost_nodes == [lost] and r.requeued == ["gang"]
    assert survivor not in {t.node_id for t in r.plan.of_kind("terminate")}  # it ran the gang a moment ago
    assert {n.node_id: n for n in w.store.nodes()}[survivor].idle_since_utc in (now, None)


def test_a_notice_is_handled_once_even_when_two_controllers_both_saw_it_unhandled(world_factory):
    from fleetctl.controller.reconcile import _handle_and_mark

    w = world_factory(offers=OFFERS)
    _running_on_spot(w, spot=True)
    node = w.store.nodes()[0]
    now = T0 + timedelta(minutes=20)
    event = w.provider.reclaim(node.node_id, now)
    first, second = FleetMetrics(), FleetMetrics()
    for metrics in (first, second):  # the second stands for a controller that read the notice before the first
        report = TickReport()  # handled it (daemon and cron on one store)
        _handle_and_mark(event, store=w.store, runtime=w.runtime, policy=policy(), now=now, forecast=None,
                         metrics=metrics, report=report)
    assert (_count(first, "fleetctl_interruptions_total"), _count(second, "fleetctl_interruptions_total")) == (1, None)
    assert len(w.store.events("interruption")) == 1 and jobs(w)["j"].interruptions == 1


def test_a_node_a_preempted_gang_leaves_is_idle_from_the_preemption(world_factory):
    od = offer("a8", price=20.0, zone="z1", market=Market.ON_DEMAND)
    w = world_factory(offers=(od,))
    pol = policy(idle_timeout_minutes=15, max_usd_per_hour=40.0)  # two nodes: no third for the newcomer
    w.store.add_jobs([job("gang", workers=2, gpus=8, duration_hours=4.0)], T0)
    run_tick(w, T0, pol=pol)
    run_tick(w, T0 + timedelta(minutes=1), pol=pol)
    assert jobs(w)["gang"].state is JobState.RUNNING
    now = T0 + timedelta(minutes=60)
    w.store.add_jobs([job("prod", gpus=8, priority="production", submitted=now)], now)
    r = run_tick(w, now, pol=pol)
    assert [p.job_id for p in r.plan.of_kind("preempt")] == ["gang"]
    (taken,) = jobs(w)["prod"].node_ids
    (freed,) = set(jobs(w)["gang"].node_ids or ()) | ({n.node_id for n in w.store.nodes()} - {taken})
    assert {n.node_id: n for n in w.store.nodes()}[freed].idle_since_utc == now
    r = run_tick(w, now + timedelta(minutes=1), pol=pol)  # it ran the gang a minute ago: not idle for an hour
    assert freed not in {t.node_id for t in r.plan.of_kind("terminate")}
    invariants(w, now + timedelta(minutes=1), pol)


@pytest.mark.parametrize("lead, handled_after, grace, outcome", [
    (120, 0, 90, "saved"),    # AWS: a 30-second checkpoint fits the two minutes
    (120, 0, 20, "missed"),   # ... but not the policy's 20-second grace
    (30, 5, 90, "missed"),    # GCP/Azure: 30 s, handled 5 s later, leaves 25 s
    (30, 0, 90, "saved"),
])
def test_a_checkpoint_that_cannot_finish_in_time_is_counted_as_missed(world_factory, lead, handled_after, grace,
                                                                      outcome):
    w = world_factory(offers=OFFERS)  # the sim runtime's checkpoint takes 30 s
    node = _checkpointing_on_spot(w)  # its job started at T0 + 1 min
    notice = T0 + timedelta(minutes=50)  # 49 minutes into the run: 19 since the last periodic checkpoint
    w.provider.reclaim(node.node_id, notice, lead_seconds=lead)
    metrics = FleetMetrics()
    r = run_tick(w, notice + timedelta(seconds=handled_after), pol=policy(checkpoint_grace_seconds=grace),
                 metrics=metrics)
    assert r.requeued == ["j"] and r.checkpoints == 1
    assert r.checkpoints_missed == (outcome == "missed")
    assert _count(metrics, "fleetctl_checkpoints_missed_total") == (outcome == "missed")
    (requeue,) = w.store.events("requeue")
    assert requeue["payload"]["checkpoint"] == outcome
    if outcome == "missed":
        assert r.lost_gpu_hours == pytest.approx(8 * (19 / 60 + handled_after / 3600))
    else:
        assert r.lost_gpu_hours == pytest.approx(0.0)


def test_a_checkpoint_that_misses_only_minutes_of_work_is_still_missed(world_factory):
    w = world_factory(offers=OFFERS)  # the sim runtime's checkpoint takes 30 s
    node = _checkpointing_on_spot(w)  # its job started at T0 + 1 min
    notice = T0 + timedelta(minutes=34)  # 33 minutes into the run: 3 since the last periodic checkpoint
    w.provider.reclaim(node.node_id, notice, lead_seconds=20)
    r = run_tick(w, notice)
    assert (r.checkpoints, r.checkpoints_missed) == (1, 1)
    assert r.lost_gpu_hours == pytest.approx(8 * 3 / 60)
    (requeue,) = w.store.events("requeue")
    assert requeue["payload"]["checkpoint"] == "missed"


@pytest.mark.parametrize("deadline_after", [None, 30], ids=["no-deadline", "a-deadline"])
def test_a_terminated_node_is_not_checkpointed_its_work_since_the_last_checkpoint_is_lost(world_factory,
                                                                                        deadline_after):
    """AWS's state change and GCP's finished preemption come without a
    deadline, so the job was 'checkpointed' with no limit: a node already gone
    saved 19 minutes of work, and nothing was counted lost."""
    from fleetctl.model import InterruptionEvent

    w = world_factory(offers=OFFERS)
    node = _checkpointing_on_spot(w)  # its job started at T0 + 1 min
    now = T0 + timedelta(minutes=50)  # 49 minutes into the run: 19 since the last periodic checkpoint
    w.provider.notify(InterruptionEvent(
        "aws-state-change-1", "aws", node.node_id, InterruptionKind.TERMINATED, received_at_utc=now,
        deadline_utc=None if deadline_after is None else now + timedelta(seconds=deadline_after)))
    metrics = FleetMetrics()
    r = run_tick(w, now, metrics=metrics)
    assert r.requeued == ["j"] and r.checkpoints == 0  # nothing left to checkpoint on
    assert r.lost_gpu_hours == pytest.approx(8 * 19 / 60)
    assert _count(metrics, "fleetctl_lost_gpu_hours_total") == pytest.approx(8 * 19 / 60)
    again = jobs(w)["j"]
    assert again.checkpointed_work_hours == pytest.approx(0.5) and again.work_lost_interruptions == 1
    (requeue,) = w.store.events("requeue")
    assert requeue["payload"]["checkpoint"] == "none"



@pytest.mark.parametrize("kind", [InterruptionKind.TERMINATED, InterruptionKind.RECLAIM_WARNING])
def test_a_notice_handled_after_the_node_was_taken_counts_the_work_until_then(world_factory, kind):
    """A notice handled late (a cron pass 35 minutes after it, a controller
    that was down): the machine stopped working when it was taken (a
    termination when it came, a reclaim warning at its deadline). Counted
    at the handling, the 35 minutes were work done, and the sim runtime's
    periodic checkpoints in them work kept: the job resumed from 1 h of work
    that no checkpoint ever saved, and nothing was counted lost."""
    from fleetctl.model import InterruptionEvent

    w = world_factory(offers=OFFERS)
    node = _checkpointing_on_spot(w)  # its job started at T0 + 1 min
    taken = T0 + timedelta(minutes=50)  # 49 minutes into the run: 19 since the periodic checkpoint at 30
    received = taken if kind is InterruptionKind.TERMINATED else taken - timedelta(minutes=2)
    w.provider.notify(InterruptionEvent(
        "late-1", "aws", node.node_id, kind, received_at_utc=received,
        deadline_utc=None if kind is InterruptionKind.TERMINATED else taken))
    r = run_tick(w, taken + timedelta(minutes=35))  # 84 minutes into the run: two checkpoints later
    assert r.requeued == ["j"] and r.checkpoints == 0  # nothing asked of a machine that is gone
    assert r.lost_gpu_hours == pytest.approx(8 * 19 / 60)
    again = jobs(w)["j"]
    assert again.checkpointed_work_hours == pytest.approx(0.5) and again.work_lost_interruptions == 1
    assert again.last_checkpoint_utc == T0 + timedelta(minutes=31)  # the checkpoint kept, not the handling
    (requeue,) = w.store.events("requeue")
    assert requeue["payload"]["checkpoint"] == "none"
    assert requeue["payload"]["kept_hours"] == pytest.approx(0.5)

def test_a_reclaim_warning_without_a_deadline_gets_the_policy_grace(world_factory):
    """A null deadline skipped the grace cap: the checkpoint was given as long
    as it took, though the cloud takes the node all the same."""
    from fleetctl.model import InterruptionEvent

    w = world_factory(offers=OFFERS)  # the sim runtime's checkpoint takes 30 s
    node = _checkpointing_on_spot(w)  # its job started at T0 + 1 min
    now = T0 + timedelta(minutes=50)
    w.provider.notify(InterruptionEvent("posted-1", "gcp", node.node_id, InterruptionKind.RECLAIM_WARNING,
                                        received_at_utc=now, deadline_utc=None))
    r = run_tick(w, now, pol=policy(checkpoint_grace_seconds=20))
    assert r.checkpoints == 1 and r.checkpoints_missed == 1  # 30 s do not fit the 20-second grace
    assert r.lost_gpu_hours == pytest.approx(8 * 19 / 60)
    (requeue,) = w.store.events("requeue")
    assert requeue["payload"]["checkpoint"] == "missed"


def test_a_notice_for_a_node_this_controller_does_not_know_is_not_counted(world_factory):
    from fleetctl.model import InterruptionEvent

    w = world_factory(offers=OFFERS)
    _running_on_spot(w, spot=True)
    now = T0 + timedelta(minutes=30)
    w.store.add_interruption(InterruptionEvent("typo-1", "gcp", "no-such-node", InterruptionKind.RECLAIM_WARNING,
                                               now, now + timedelta(seconds=30)))
    metrics = FleetMetrics()
    r = run_tick(w, now, metrics=metrics)
    assert r.interruptions == 0 and r.requeued == [] and jobs(w)["j"].state is JobState.RUNNING
    assert _count(metrics, "fleetctl_interruptions_total") is None
    assert [e["subject"] for e in w.store.events("interruption_unknown_node")] == ["no-such-node"]
    assert w.store.interruptions() == ()  # handled: not retried every pass


def test_the_scale_down_cooldown_counts_from_the_last_termination_in_the_store(world_factory):
    w = world_factory(offers=(OD,))
    pol = policy(idle_timeout_minutes=10, scale_down_cooldown_minutes=5)
    w.store.add_jobs([job("a", gpus=8, duration_hours=1.0), job("b", gpus=8, duration_hours=1.05)], T0)
    run_tick(w, T0, pol=pol)
    run_tick(w, T0 + timedelta(minutes=1), pol=pol)
    run_tick(w, T0 + timedelta(minutes=62), pol=pol)  # a done
    run_tick(w, T0 + timedelta(minutes=65), pol=pol)  # b done: its node idle from now
    first = run_tick(w, T0 + timedelta(minutes=72), pol=pol)
    assert len(first.plan.of_kind("terminate")) == 1  # a's node, idle for 10 min
    kept = run_tick(w, T0 + timedelta(minutes=75), pol=pol)  # b's node is past its timeout too, but 3 min after
    assert not kept.plan.of_kind("terminate")  # ... a termination: the cooldown holds it
    gone = run_tick(w, T0 + timedelta(minutes=77), pol=pol)
    assert len(gone.plan.of_kind("terminate")) == 1 and w.store.nodes() == ()


def test_a_production_gang_preempts_batch_work_on_two_nodes(world_factory):
    od = offer("a8", price=20.0, zone="z1", market=Market.ON_DEMAND)
    w = world_factory(offers=(od,))
    pol = policy(max_usd_per_hour=40.0)  # two nodes, no third
    w.store.add_jobs([job("b1", gpus=8, duration_hours=4.0), job("b2", gpus=8, duration_hours=4.0)], T0)
    run_tick(w, T0, pol=pol)
    run_tick(w, T0 + timedelta(minutes=1), pol=pol)
    assert {j.state for j in jobs(w).values()} == {JobState.RUNNING}
    now = T0 + timedelta(minutes=30)
    w.store.add_jobs([job("gang", workers=2, gpus=8, priority="production", submitted=now)], now)
    r = run_tick(w, now, pol=pol)
    assert sorted(p.job_id for p in r.plan.of_kind("preempt")) == ["b1", "b2"]
    assert len(set(jobs(w)["gang"].node_ids)) == 2 and jobs(w)["b1"].state is JobState.QUEUED
    run_tick(w, now + timedelta(minutes=1), pol=pol)
    assert jobs(w)["gang"].state is JobState.RUNNING
    invariants(w, now + timedelta(minutes=1), pol)


def test_a_gang_moved_back_to_spot_is_bound_one_node_per_worker(world_factory):
    od8 = offer("od8", price=20.0, zone="z1", market=Market.ON_DEMAND)
    spot8 = offer("sp8", price=6.0, zone="z2")
    w = world_factory(offers=(od8, spot8))
    w.store.add_jobs([replace(job("gang", workers=3, gpus=4, duration_hours=24.0), checkpointable=True,
                              checkpoint_interval_minutes=30.0)], T0)
    no_spot = policy(max_spot_share=0.0)
    run_tick(w, T0, pol=no_spot)
    run_tick(w, T0 + timedelta(minutes=1), pol=no_spot)
    before = jobs(w)["gang"]
    assert before.state is JobState.RUNNING and len(set(before.node_ids)) == 2
    pol = policy(replace_on_demand_with_spot=True, disruption_budget_nodes=2)
    now = T0 + timedelta(minutes=32)  # just after a periodic checkpoint
    r = run_tick(w, now, pol=pol)
    assert [m.job_id for m in r.plan.of_kind("migrate")] == ["gang"]
    moved = jobs(w)["gang"]
    assert len(moved.node_ids) == 3 and not set(moved.node_ids) & set(before.node_ids)
    nodes = {n.node_id: n for n in w.store.nodes()}
    assert {nodes[n].offer.market for n in moved.node_ids} == {Market.SPOT}
    run_tick(w, now + timedelta(minutes=1), pol=pol)
    assert jobs(w)["gang"].state is JobState.RUNNING
    invariants(w, now + timedelta(minutes=1), pol)


# ----------------------------------------------------------------------------- apply part-way


def _two_launch_plan():
    from fleetctl.model import Bind, Launch, Plan, Reason

    return Plan((
        Launch(SPOT_A, ("new-1",), Reason.CHEAPEST_OFFER, "test"),
        Launch(SPOT_B, ("new-2",), Reason.CHEAPEST_OFFER, "test"),
        Bind("a", ("new-1",), Reason.FITS_NEW_CAPACITY, "test"),
        Bind("b", ("new-2",), Reason.FITS_NEW_CAPACITY, "test"),
    ), (), 0.0, 17.0)


def test_a_launch_refused_part_way_keeps_and_reports_what_the_cloud_sold(world_factory, monkeypatch):
    """A cloud's purchase cannot be rolled back with a store transaction: the
    first launch's nodes stay recorded (intent, nodes, audit event), the error
    lists them, and nothing after the refusal is applied."""
    from fleetctl.controller import ApplyError, execute
    from providers.base import InsufficientCapacity
    from providers.sim import SimProvider

    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("a", gpus=8), job("b", gpus=8)], T0)
    real = SimProvider.launch

    def second_refused(self, request, now):  # noqa: ANN001, ANN202
        if request.offer.key == SPOT_B.key:
            raise InsufficientCapacity(f"no capacity for {request.offer.key}")
        return real(self, request, now)

    monkeypatch.setattr(SimProvider, "launch", second_refused)
    with pytest.raises(ApplyError) as caught:
        execute(_two_launch_plan(), store=w.store, provider=w.provider, now=T0, plan_id="1" * 64)
    (node,) = w.store.nodes()
    assert node.offer.key == SPOT_A.key
    assert caught.value.carried_out == (f"launched 1 x {SPOT_A.key} ({node.node_id})",)
    assert "no capacity for" in caught.value.message and node.node_id in str(caught.value)
    assert {j.state for j in w.store.jobs()} == {JobState.QUEUED}  # the binds came after the refusal
    assert [e["kind"] for e in w.store.events() if e["kind"] == "launch"] == ["launch"]
    # The next tick starts from that fleet: the idle node serves a job, and the other gets its own.
    r = run_tick(w, T0 + timedelta(minutes=1))
    assert {j.state for j in w.store.jobs()} == {JobState.BOUND}, r.plan


def _launch_rows(store):  # noqa: ANN001, ANN202
    import sqlalchemy as sa

    from fleetctl.store import tables

    with store._tx() as conn:
        return {r.offer_key: r.status for r in conn.execute(sa.select(tables.launches))}


@pytest.mark.parametrize("error", [ConnectionRefusedError(111, "Connection refused"), TimeoutError("timed out"),
                                   KeyError("a bug in the provider")])
def test_an_error_that_is_not_the_clouds_answer_part_way_reports_what_was_carried_out(world_factory, monkeypatch,
                                                                                      error):
    """The second launch gets no answer (connection refused, a timeout: an
    SDK's errors that are not a ProviderError), or a bug stops it: the error
    still lists the first launch (it escaped as the bare error before), chains
    the original, and the store holds the first launch's nodes; the second
    launch's intent is closed as 'unknown' (it stayed 'pending'), and nothing
    after it was applied."""
    from fleetctl.controller import ApplyError, ApplyInterrupted, execute
    from providers.sim import SimProvider

    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("a", gpus=8), job("b", gpus=8)], T0)
    real = SimProvider.launch

    def second_fails(self, request, now):  # noqa: ANN001, ANN202
        if request.offer.key == SPOT_B.key:
            raise error
        return real(self, request, now)

    monkeypatch.setattr(SimProvider, "launch", second_fails)
    with pytest.raises(ApplyError) as caught:
        execute(_two_launch_plan(), store=w.store, provider=w.provider, now=T0, plan_id="6" * 64)
    (node,) = w.store.nodes()
    assert isinstance(caught.value, ApplyInterrupted) and caught.value.__cause__ is error
    assert caught.value.carried_out == (f"launched 1 x {SPOT_A.key} ({node.node_id})",)
    assert caught.value.message.startswith(f"launch of 1 x {SPOT_B.key} failed: {type(error).__name__}")
    assert _launch_rows(w.store) == {SPOT_A.key: "done", SPOT_B.key: "unknown"}
    assert {j.state for j in w.store.jobs()} == {JobState.QUEUED}
    assert [e["kind"] for e in w.store.events() if e["kind"] in ("launch", "bind")] == ["launch"]


def test_a_retried_launch_after_the_finished_history_is_pruned_buys_nothing_more(world_factory, monkeypatch):
    """A plan's launch bought a node that is long gone; the same state came back
    40 days later and its launch (the next key, ``-r1``) bought but the answer
    was lost. A prune of the finished history older than 30 days runs before
    the retry: it must not delete the old key (or its gone node), or the retry
    would read the old key as never used and buy a second node."""
    from fleetctl.controller import ApplyInterrupted, execute
    from fleetctl.model import Launch, Plan, Reason
    from providers.sim import SimProvider

    w = world_factory(offers=OFFERS)
    plan = Plan((Launch(SPOT_A, ("new-1",), Reason.CHEAPEST_OFFER, "test"),), (), 0.0, 8.0)
    execute(plan, store=w.store, provider=w.provider, now=T0, plan_id="9" * 64)
    (first,) = w.store.nodes()
    w.store.put_node(replace(first, state=NodeState.GONE), T0 + timedelta(hours=1))
    real = SimProvider.launch

    def answer_lost(self, request, now):  # noqa: ANN001, ANN202
        real(self, request, now)  # the cloud bought
        raise ConnectionResetError(104, "Connection reset by peer")

    now = T0 + timedelta(days=40)
    monkeypatch.setattr(SimProvider, "launch", answer_lost)
    with pytest.raises(ApplyInterrupted):
        execute(plan, store=w.store, provider=w.provider, now=now, plan_id="9" * 64)
    (bought,) = w.store.nodes()
    monkeypatch.setattr(SimProvider, "launch", real)
    w.store.prune_finished(now - timedelta(days=30))
    retried = execute(plan, store=w.store, provider=w.provider, now=now + timedelta(minutes=1), plan_id="9" * 64)
    assert [n.node_id for n, _ in retried.launches] == [bought.node_id]
    assert w.store.nodes() == (bought,)  # one live node: the retry was answered with what the lost answer bought


def test_a_terminate_without_an_answer_reports_what_was_carried_out(world_factory, monkeypatch):
    from fleetctl.controller import ApplyInterrupted, execute
    from fleetctl.model import Launch, Plan, Reason, Terminate
    from providers.sim import SimProvider

    w = world_factory(offers=OFFERS)
    execute(Plan((Launch(SPOT_A, ("n-1", "n-2"), Reason.CHEAPEST_OFFER, "test"),), (), 0.0, 16.0),
            store=w.store, provider=w.provider, now=T0, plan_id="7" * 64)
    first, second = sorted(n.node_id for n in w.store.nodes())
    real = SimProvider.terminate

    def second_unreachable(self, node_id, now):  # noqa: ANN001, ANN202
        if node_id == second:
            raise ConnectionResetError(104, "Connection reset by peer")
        return real(self, node_id, now)

    monkeypatch.setattr(SimProvider, "terminate", second_unreachable)
    plan = Plan((Terminate(first, Reason.IDLE, "test"), Terminate(second, Reason.IDLE, "test")),
                (), 16.0, 0.0)
    with pytest.raises(ApplyInterrupted) as caught:
        execute(plan, store=w.store, provider=w.provider, now=T0, plan_id="8" * 64)
    assert caught.value.carried_out == (f"terminated {first}",)
    assert f"terminate of {second} failed: ConnectionResetError" in caught.value.message
    assert [e["subject"] for e in w.store.events("terminate")] == [first]


def test_a_partly_fulfilled_launch_records_the_nodes_it_got(world_factory, monkeypatch):
    from fleetctl.controller import ApplyError, execute
    from providers.base import LaunchResult
    from providers.sim import SimProvider

    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("a", gpus=8), job("b", gpus=8)], T0)
    real = SimProvider.launch

    def one_of_two(self, request, now):  # noqa: ANN001, ANN202
        got = real(self, replace(request, count=1), now)
        return LaunchResult(request, got.nodes, "capacity for 1 of 2")

    from fleetctl.model import Bind, Launch, Plan, Reason
    monkeypatch.setattr(SimProvider, "launch", one_of_two)
    two = Plan((Launch(SPOT_A, ("new-1", "new-2"), Reason.CHEAPEST_OFFER, "test"),
                Bind("a", ("new-1",), Reason.FITS_NEW_CAPACITY, "test"),
                Bind("b", ("new-2",), Reason.FITS_NEW_CAPACITY, "test")), (), 0.0, 16.0)
    with pytest.raises(ApplyError) as caught:
        execute(two, store=w.store, provider=w.provider, now=T0, plan_id="2" * 64)
    (node,) = w.store.nodes()
    assert "got 1 nodes: capacity for 1 of 2" in caught.value.message
    assert caught.value.carried_out == (f"launched 1 x {SPOT_A.key} ({node.node_id})",)


def test_a_plan_the_store_no_longer_allows_changes_nothing(world_factory):
    """Job actions are checked before any launch: a bind of a job no longer
    active buys nothing."""
    from fleetctl.controller import ApplyError, execute

    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("a", gpus=8)], T0)  # no job "b"
    with pytest.raises(ApplyError) as caught:
        execute(_two_launch_plan(), store=w.store, provider=w.provider, now=T0, plan_id="3" * 64)
    assert "job 'b' is no longer active" in str(caught.value) and not caught.value.carried_out
    assert w.store.nodes() == () and not [e for e in w.store.events() if e["kind"] == "launch"]


def test_a_gangs_nodes_are_asked_for_apart_and_together(world_factory):
    """One Launch of an offer holds a gang's nodes and another job's node: the
    cloud is asked for the gang's nodes together (a cluster placement group on
    AWS) and for the other node alone."""
    from fleetctl.controller import execute
    from fleetctl.model import Bind, Launch, Plan, Reason
    from providers.sim import SimProvider

    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("gang", workers=2, gpus=8), job("solo", gpus=8)], T0)
    asked = []
    real = SimProvider.launch

    class Recording(SimProvider):
        def launch(self, request, now):  # noqa: ANN001, ANN202
            asked.append((request.count, request.together, request.idempotency_key[-4:]))
            return real(self, request, now)

    w.provider.__class__ = Recording
    plan = Plan((Launch(SPOT_A, ("new-1", "new-2", "new-3"), Reason.CHEAPEST_OFFER, "test"),
                 Bind("gang", ("new-1", "new-3"), Reason.FITS_NEW_CAPACITY, "test"),
                 Bind("solo", ("new-2",), Reason.FITS_NEW_CAPACITY, "test")), (), 0.0, 24.0)
    execute(plan, store=w.store, provider=w.provider, now=T0, plan_id="5" * 64)
    assert asked == [(1, False, "55-0"), (2, True, "0-g0")]
    jobs_now = {j.job_id: j for j in w.store.jobs()}
    assert len(set(jobs_now["gang"].node_ids)) == 2 and not set(jobs_now["gang"].node_ids) & set(jobs_now["solo"].node_ids)

    from fleetctl.controller import _launch_parts
    from fleetctl.model import Migrate

    moved = Plan((Launch(SPOT_B, ("new-1", "new-2"), Reason.CHEAPEST_OFFER, "test"),
                  Migrate("gang", ("a", "b"), ("new-1", "new-2"), Reason.CONSOLIDATION, "back to spot")), (), 0.0, 9.0)
    assert [(suffix, together) for suffix, _, together in _launch_parts(moved)] == [("0", True)]


def test_an_offer_refused_for_capacity_is_planned_around_at_once_and_left_out_for_a_while(world_factory,
                                                                                       monkeypatch):
    """A cloud out of stock for one offer must not stop the fleet: the tick
    records the refusal, plans again at once without that offer, and leaves it
    out of the next passes for REFUSED_OFFER_TTL (it asked again on every tick,
    failing each one, while paid nodes sat idle)."""
    from fleetctl.controller import REFUSED_OFFER_TTL, observe
    from providers.base import InsufficientCapacity
    from providers.sim import SimProvider

    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("j", gpus=8, spot=True)], T0)
    asked = []
    real = SimProvider.launch

    def out_of_stock(self, request, now):  # noqa: ANN001, ANN202
        asked.append(request.offer.key)
        if request.offer.key == SPOT_A.key:
            raise InsufficientCapacity("ZONE_RESOURCE_POOL_EXHAUSTED")
        return real(self, request, now)

    monkeypatch.setattr(SimProvider, "launch", out_of_stock)
    report = run_tick(w, T0)
    assert asked == [SPOT_A.key, SPOT_B.key] and report.refused_offers == [SPOT_A.key]
    assert jobs(w)["j"].state is JobState.BOUND  # on the other offer, in the same tick
    assert [e["subject"] for e in w.store.events("launch_refused")] == [SPOT_A.key]
    assert SPOT_A.key not in {o.key for o in observe(w.store, w.provider, T0 + timedelta(minutes=2)).offers}
    assert SPOT_A.key in {o.key for o in observe(w.store, w.provider, T0 + REFUSED_OFFER_TTL).offers}


def test_a_tick_plans_around_at_most_ten_refused_offers_then_fails_with_the_next_refusal(world_factory):
    from fleetctl.controller.reconcile import MAX_REFUSED_PER_TICK
    from providers.base import InsufficientCapacity

    offers = tuple(offer("a8", price=8.0 + k / 10, zone=f"z{k:02d}") for k in range(MAX_REFUSED_PER_TICK + 2))
    w = world_factory(offers=offers)
    w.store.add_jobs([job("j", gpus=8, spot=True)], T0)
    # out of stock for every offer
    provider = _SpotRefused(w.provider, InsufficientCapacity("ZONE_RESOURCE_POOL_EXHAUSTED"), markets=tuple(Market))
    with pytest.raises(ApplyError) as caught:
        tick(store=w.store, provider=provider, runtime=w.runtime, policy=policy(), now=T0)
    assert caught.value.refused_offer == offers[MAX_REFUSED_PER_TICK].key
    assert provider.asked == [o.key for o in offers[:MAX_REFUSED_PER_TICK + 1]]  # the cheapest first, 11 in all
    assert jobs(w)["j"].state is JobState.QUEUED


def test_a_notice_whose_handling_fails_part_way_is_counted_once_when_handled_again(world_factory):
    """The handling of a notice is one store transaction; one that fails
    part-way (the runtime's checkpoint call times out on the third job) is
    rolled back and handled again by the next pass. The counters were
    incremented inside the transaction, so the notice, the first jobs'
    checkpoint and their lost GPU-hours were counted twice; they now count
    what the store committed, once."""
    from fleetctl.controller.runtime import SimRuntime

    class TimesOutOnce(SimRuntime):
        failures = 0

        def checkpoint(self, job, deadline_utc, now):  # noqa: ANN001, ANN201
            if job.job_id == "c" and self.failures:
                self.failures -= 1
                raise TimeoutError("runtime API timed out")
            return super().checkpoint(job, deadline_utc, now)

    w = world_factory(offers=OFFERS)
    w.runtime = TimesOutOnce(checkpoint_seconds=30)
    w.store.add_jobs([replace(job("a", gpus=2, duration_hours=5), checkpointable=True),
                      replace(job("b", gpus=2, duration_hours=5), checkpointable=False),
                      replace(job("c", gpus=2, duration_hours=5), checkpointable=True)], T0)
    metrics = FleetMetrics()
    run_tick(w, T0, metrics=metrics)
    run_tick(w, T0 + timedelta(minutes=1), metrics=metrics)
    (node,) = w.store.nodes()
    assert {j.state for j in w.store.jobs()} == {JobState.RUNNING}
    now = T0 + timedelta(hours=1)
    w.provider.reclaim(node.node_id, now, lead_seconds=120)
    w.runtime.failures = 1
    with pytest.raises(TimeoutError):
        run_tick(w, now, metrics=metrics)
    assert w.store.events("requeue") == () and len(w.store.interruptions(unhandled_only=True)) == 1  # rolled back
    run_tick(w, now + timedelta(seconds=10), metrics=metrics)
    requeued = w.store.events("requeue")
    assert sorted(e["subject"] for e in requeued) == ["a", "b", "c"]
    assert _count(metrics, "fleetctl_interruptions_total") == 1
    assert _count(metrics, "fleetctl_checkpoints_total") == 2  # a and c; b cannot checkpoint
    lost = sum(e["payload"]["lost_gpu_hours"] for e in requeued)
    assert lost > 0 and _count(metrics, "fleetctl_lost_gpu_hours_total") == pytest.approx(lost)


class _SpotRefused:
    """The sandbox provider, with a cloud that refuses every spot launch (of ``markets``) with ``error``."""

    def __init__(self, inner, error, markets=(Market.SPOT,)):  # noqa: ANN001
        self._inner = inner
        self._error = error
        self._markets = markets
        self.asked: list[str] = []

    def __getattr__(self, name):  # noqa: ANN001, ANN204
        return getattr(self._inner, name)

    def launch(self, request, now):  # noqa: ANN001, ANN201
        self.asked.append(request.offer.key)
        if request.offer.market in self._markets:
            raise self._error
        return self._inner.launch(request, now)


@pytest.mark.parametrize("error, tick_fails", [
    ("InsufficientCapacity", False),
    ("ProviderError", True),
], ids=["spot-refused-for-capacity-re-planned", "spot-launch-failed-tick-fails"])
def test_every_on_demand_fallback_launched_is_counted_once(world_factory, error, tick_fails):
    """A job interrupted too often falls back to on-demand, and its launch comes
    before the spot launch of another job, which the cloud refuses. The counter
    counted the last plan's launches only, when it was applied whole: the
    fallback bought before a capacity refusal was not counted (the re-plan's
    own fallback was), nor one bought before an error that fails the tick."""
    import providers.base

    w = world_factory(offers=OFFERS)
    w.store.add_jobs([replace(job("x", gpus=8, spot=True), interruptions=5), job("y", gpus=8, spot=True)], T0)
    provider = _SpotRefused(w.provider, getattr(providers.base, error)(f"{error} for spot"))
    metrics = FleetMetrics()
    if tick_fails:
        with pytest.raises(ApplyError):
            tick(store=w.store, provider=provider, runtime=w.runtime, policy=policy(), now=T0, metrics=metrics)
    else:
        tick(store=w.store, provider=provider, runtime=w.runtime, policy=policy(), now=T0, metrics=metrics)
    assert provider.asked[:2] == [OD.key, SPOT_A.key]  # the fallback is bought first
    fallbacks = [node for e in w.store.events("launch") if e["payload"]["reason"] == "on_demand_fallback"
                 for node in e["payload"]["nodes"]]
    assert len(fallbacks) == (1 if tick_fails else 2)
    assert _count(metrics, "fleetctl_on_demand_fallbacks_total") == len(fallbacks)


class _TerminateFails:
    """The sandbox provider, with a cloud whose terminate calls fail with ``error`` while ``failing``."""

    def __init__(self, inner, error):  # noqa: ANN001
        self._inner = inner
        self._error = error
        self.failing = True

    def __getattr__(self, name):  # noqa: ANN001, ANN204
        return getattr(self._inner, name)

    def terminate(self, node_id, now):  # noqa: ANN001, ANN201
        if self.failing:
            raise self._error
        return self._inner.terminate(node_id, now)


def _consolidation_migrates(w):  # noqa: ANN001, ANN202
    """Two half-used spot nodes: the tick that starts their jobs moves one job and terminates its node."""
    from fleetctl.controller import execute
    from fleetctl.model import Bind, Launch, Plan, Reason

    w.store.add_jobs([replace(job(name, gpus=4, duration_hours=8.0, spot=True), checkpointable=True,
                              checkpoint_interval_minutes=30.0) for name in ("a", "b")], T0)
    execute(Plan((Launch(SPOT_A, ("n-1", "n-2"), Reason.CHEAPEST_OFFER, "test"),
                  Bind("a", ("n-1",), Reason.FITS_NEW_CAPACITY, "test"),
                  Bind("b", ("n-2",), Reason.FITS_NEW_CAPACITY, "test")), (), 0.0, 16.0),
            store=w.store, provider=w.provider, now=T0, plan_id="9" * 64)
    # One checkpoint: the moved job's. A later plan terminates the emptied node once the idle timeout has
    # passed (10 min, counted from when it became ready: a migration does not reset it).
    return policy(), T0 + timedelta(minutes=1), "migrate", 1, timedelta(minutes=11)


def _reclaim_preempts(w):  # noqa: ANN001, ANN202
    """Two spot nodes at the budget: a reclaim of the urgent job's node preempts the batch job for it, and the
    drained node is terminated in the same plan."""
    from fleetctl.model import PriorityClass

    pol = policy(priority_classes=(*policy().priority_classes, PriorityClass("urgent", 500, preemptible=False)),
                 max_usd_per_hour=16.0)
    w.store.add_jobs([replace(job(name, gpus=8, duration_hours=8.0, priority=priority), checkpointable=True,
                              checkpoint_interval_minutes=30.0) for name, priority in (("u", "urgent"), ("b", "batch"))],
                     T0)
    run_tick(w, T0, pol=pol)
    run_tick(w, T0 + timedelta(minutes=1), pol=pol)
    now = T0 + timedelta(minutes=20)
    w.provider.reclaim(jobs(w)["u"].node_ids[0], now)
    # Two checkpoints: the reclaimed job's and the preempted job's. The drained node is terminated at once.
    return pol, now, "preempt", 2, timedelta(seconds=30)


@pytest.mark.parametrize("error", [Throttled("rate exceeded"), ConnectionResetError(104, "Connection reset by peer")],
                         ids=["cloud-refuses", "no-answer"])
@pytest.mark.parametrize("scenario", [_consolidation_migrates, _reclaim_preempts], ids=["migrate", "preempt"])
def test_moves_carried_out_before_an_apply_stops_are_counted_once(world_factory, scenario, error):
    """The job moves land in one transaction before the terminations; a
    termination that fails stops the apply with the moves committed. The
    migrations, preemptions and their checkpoints were counted from the plan,
    and only when it was applied whole: the store recorded a move that
    fleetctl_migrations_total / _preemptions_total / _checkpoints_total did
    not count. The next tick, which carries out the termination, must not
    count them again."""
    w = world_factory(offers=(SPOT_A,))
    pol, now, kind, checkpoints, later = scenario(w)
    provider = _TerminateFails(w.provider, error)
    metrics = FleetMetrics()
    with pytest.raises(ApplyError) as caught:
        tick(store=w.store, provider=provider, runtime=w.runtime, policy=pol, now=now, metrics=metrics)
    said = {"migrate": "migrated 1 job(s)", "preempt": "preempted 1 job(s)"}[kind]
    assert any(said in step for step in caught.value.carried_out), caught.value.carried_out
    moved = {kind: len(w.store.events(kind)) for kind in ("migrate", "preempt")}
    assert moved[kind] == 1
    assert _count(metrics, "fleetctl_migrations_total") == moved["migrate"]
    assert _count(metrics, "fleetctl_preemptions_total") == moved["preempt"]
    assert _count(metrics, "fleetctl_checkpoints_total") == checkpoints
    provider.failing = False
    r = tick(store=w.store, provider=provider, runtime=w.runtime, policy=pol, now=now + later,
             metrics=metrics)
    assert r.plan.of_kind("terminate") and not r.plan.of_kind(kind)
    assert _count(metrics, "fleetctl_migrations_total") == moved["migrate"]
    assert _count(metrics, "fleetctl_preemptions_total") == moved["preempt"]
    assert _count(metrics, "fleetctl_checkpoints_total") == checkpoints


@pytest.mark.parametrize("scenario", [_consolidation_migrates, _reclaim_preempts], ids=["migrate", "preempt"])
def test_the_ticks_report_counts_the_checkpoints_of_the_moves_it_applied(world_factory, scenario):
    w = world_factory(offers=(SPOT_A,))
    pol, now, kind, checkpoints, _ = scenario(w)
    metrics = FleetMetrics()
    r = tick(store=w.store, provider=w.provider, runtime=w.runtime, policy=pol, now=now, metrics=metrics)
    assert len(r.plan.of_kind(kind)) == 1 and r.checkpoints == checkpoints
    assert _count(metrics, "fleetctl_checkpoints_total") == checkpoints


@pytest.mark.parametrize("fails", ["start", "complete"])
def test_a_start_or_completion_whose_record_fails_is_counted_once_when_done_again(world_factory, monkeypatch, fails):
    """A job's start (or completion) wrote the job and then its audit event,
    each committed on its own, and was observed (counted) after both. A write
    that failed in between (SQLite's lock timeout, a lost PostgreSQL
    connection) failed the tick with the job committed as running (or
    succeeded): its wait was never observed (fleetctl_jobs_completed_total
    never counted it), since the job was never started (or finished) again."""
    import sqlalchemy as sa

    w = world_factory(offers=OFFERS)
    metrics = FleetMetrics()
    w.store.add_jobs([job("j", gpus=8, duration_hours=0.25)], T0)
    run_tick(w, T0, metrics=metrics)
    real = w.store.record
    failures = [fails]

    def record_fails_once(kind, now, subject="", **payload):  # noqa: ANN001, ANN202
        if kind in failures:
            failures.remove(kind)
            raise sa.exc.OperationalError("INSERT INTO events", {}, Exception("database is locked"))
        return real(kind, now, subject, **payload)

    monkeypatch.setattr(w.store, "record", record_fails_once)
    at = {"start": T0 + timedelta(minutes=1), "complete": T0 + timedelta(minutes=20)}
    if fails == "complete":
        run_tick(w, at["start"], metrics=metrics)
    with pytest.raises(sa.exc.OperationalError):
        run_tick(w, at[fails], metrics=metrics)
    run_tick(w, at[fails] + timedelta(seconds=30), metrics=metrics)
    if fails == "start":
        run_tick(w, at["complete"], metrics=metrics)
    assert jobs(w)["j"].state is JobState.SUCCEEDED
    assert _count(metrics, "fleetctl_job_wait_seconds_count") == 1
    assert _count(metrics, "fleetctl_jobs_completed_total") == 1
    assert [len(w.store.events(kind)) for kind in ("start", "complete")] == [1, 1]  # the audit log is whole too


def _launch_statuses(w) -> dict[str, tuple[str, list[str]]]:
    with w.store._engine.connect() as conn:  # noqa: SLF001 - the store has no reader of settled launches
        rows = conn.execute(sa.select(tables.launches)).all()
    return {r.idempotency_key: (r.status, json.loads(r.node_ids)) for r in rows}


def test_launches_a_dead_process_left_open_are_settled_from_what_was_bought(world_factory):
    """A controller died after the cloud answered a launch and before it
    recorded the answer (and another died before asking). The plan made after
    it is another (the node bought is in the fleet now), so no retry records
    it: the intents stayed pending for ever and the node, used by the next
    plan, had no launch in the audit log. The next tick finishes them."""
    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("j", gpus=8, duration_hours=1.0, spot=True)], T0)
    assert w.store.begin_launch("fleetctl-dead-0", SPOT_A.key, 1, T0)
    [bought] = w.provider.launch(LaunchRequest(SPOT_A, 1, "fleetctl-dead-0"), T0).nodes  # ... and died
    assert w.store.begin_launch("fleetctl-dead-1", SPOT_B.key, 1, T0)  # died before asking
    r = run_tick(w, T0 + timedelta(minutes=1))
    assert [a.kind for a in r.plan.actions] == ["bind"] and jobs(w)["j"].node_ids == (bought.node_id,)
    assert _launch_statuses(w) == {"fleetctl-dead-0": ("done", [bought.node_id]), "fleetctl-dead-1": ("abandoned", [])}
    [logged] = w.store.events("launch")
    assert logged["subject"] == SPOT_A.key
    assert logged["payload"] == {"nodes": [bought.node_id], "reason": None, "recovered": True, "was": "pending"}
    run_tick(w, T0 + timedelta(minutes=2))
    assert len(w.store.events("launch")) == 1  # settled once


@pytest.mark.parametrize("scenario", [_consolidation_migrates, _reclaim_preempts], ids=["migrate", "preempt"])
def test_a_nodes_history_shows_the_jobs_that_left_it(world_factory, scenario):
    """`fleetctl events --for NODE` (``Store.audit_log(about=...)``) lists a job's bind and start on
    the node, and its end there: a move away and a completion name the nodes the job left (they named
    none, so a node's history stopped at the start)."""
    w = world_factory(offers=(SPOT_A,))
    pol, now, kind, _, _ = scenario(w)
    before = {j.job_id: j.node_ids for j in jobs(w).values()}
    tick(store=w.store, provider=w.provider, runtime=w.runtime, policy=pol, now=now)
    (moved,) = w.store.events(kind)
    left = before[moved["subject"]]
    assert left and moved["payload"]["nodes"] == list(left)
    history, _ = w.store.audit_log(about=left[0], since=T0 - timedelta(days=1))
    assert [e["subject"] for e in history if e["kind"] == kind] == [moved["subject"]]
    # and the completion of a job on a node: run the rest of the day
    for minutes in range(30, 60 * 24, 30):
        run_tick(w, T0 + timedelta(minutes=minutes), pol=pol)
    done = w.store.events("complete")
    assert done and all(e["payload"]["nodes"] for e in done)
    for e in done:
        history, _ = w.store.audit_log(about=e["payload"]["nodes"][0], since=T0 - timedelta(days=1))
        assert any(h["kind"] == "complete" and h["subject"] == e["subject"] for h in history), e
