"""The reclaim handling's small pieces, each on explicit values: the job a
reclaim puts back in the queue (``requeue``) and the risk a rebalance hint is
weighed by (``_risk``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.controller.reconcile import _risk, requeue
from fleetctl.model import Forecast, JobState, Market, OfferRisk
from tests.builders import T0, job, offer, policy

NOW = T0 + timedelta(hours=2)


def _ran(**kw):  # noqa: ANN003, ANN202
    """A job that ran on n1 and was reclaimed once before (boost 100, one offer to avoid)."""
    base = job("j", gpus=8, duration_hours=4.0, state=JobState.RUNNING, node_ids=("n1",))
    return replace(base, started_at_utc=T0, last_checkpoint_utc=T0 + timedelta(minutes=30), checkpointed_work_hours=0.5,
                   interruptions=1, work_lost_interruptions=1, priority_boost=100.0, avoid_offer_keys=("m",), **kw)


def test_a_reclaimed_job_is_queued_with_the_work_it_kept_a_boost_and_the_offer_to_avoid():
    pol = policy(requeue_priority_boost=40.0)
    again = requeue(_ran(), 1.25, NOW, pol, avoid="b", interrupted=True, work_lost=True)
    assert (again.state, again.node_ids, again.started_at_utc) == (JobState.QUEUED, (), None)
    assert (again.checkpointed_work_hours, again.last_checkpoint_utc, again.requeued_at_utc) == (1.25, NOW, NOW)
    assert (again.interruptions, again.work_lost_interruptions) == (2, 2)
    assert again.priority_boost == 140.0
    assert again.avoid_offer_keys == ("b", "m")  # sorted, with the ones it had


def test_a_requeue_records_when_the_work_it_kept_was_saved():
    saved = NOW - timedelta(minutes=20)
    again = requeue(_ran(), 1.25, NOW, policy(), avoid=None, interrupted=True, checkpoint_utc=saved)
    assert (again.checkpointed_work_hours, again.last_checkpoint_utc, again.requeued_at_utc) == (1.25, saved, NOW)
    assert requeue(_ran(), 0.0, NOW, policy(), avoid=None, interrupted=True,
                   checkpoint_utc=saved).last_checkpoint_utc is None  # nothing kept: no checkpoint


def test_a_requeue_that_kept_no_work_has_no_checkpoint_time_and_one_that_lost_none_is_not_counted_as_lost():
    again = requeue(_ran(), 0.0, NOW, policy(), avoid="m", interrupted=True, work_lost=False)
    assert again.checkpointed_work_hours == 0.0 and again.last_checkpoint_utc is None
    assert (again.interruptions, again.work_lost_interruptions) == (2, 1)
    assert again.avoid_offer_keys == ("m",)  # once, however often it failed the job


def test_a_requeue_that_is_not_a_reclaim_counts_nothing_and_adds_no_boost():
    again = requeue(_ran(), 0.5, NOW, policy(requeue_priority_boost=40.0), avoid=None, interrupted=False,
                    work_lost=True)
    assert (again.interruptions, again.work_lost_interruptions, again.priority_boost) == (1, 1, 100.0)
    assert again.avoid_offer_keys == ("m",) and again.state is JobState.QUEUED and again.requeued_at_utc == NOW


def test_the_risk_a_rebalance_hint_is_weighed_by():
    spot, od = offer("a8"), offer("a8", market=Market.ON_DEMAND)
    pol = policy(default_spot_interruption_probability_per_hour=0.07)
    fc = Forecast(interruption=(OfferRisk(spot.key, 60, 0.3), OfferRisk(od.key, 60, 0.3)))
    assert _risk(pol, fc, spot.key, Market.SPOT) == pytest.approx(0.3)
    assert _risk(pol, fc, "another-offer", Market.SPOT) == pytest.approx(0.07)  # not forecast: the policy's
    assert _risk(pol, None, spot.key, Market.SPOT) == pytest.approx(0.07)
    assert _risk(pol, fc, od.key, Market.ON_DEMAND) == 0.0  # on-demand is not reclaimed, whatever a forecast says
    assert _risk(pol, None, od.key, Market.ON_DEMAND) == 0.0


def test_a_job_resumed_from_a_checkpoint_before_its_run_would_lose_only_the_work_of_the_run():
    """``work_since_checkpoint_hours`` of a requeued job restarted later: its
    checkpoint (at the requeue) predates the run, whose work is what a stop
    loses; the time it waited in the queue did no work."""
    again = requeue(_ran(), 1.25, NOW, policy(), avoid=None, interrupted=True)
    restarted = replace(again, state=JobState.RUNNING, node_ids=("n2",), started_at_utc=NOW + timedelta(hours=2))
    assert restarted.work_since_checkpoint_hours(NOW + timedelta(hours=2, minutes=15)) == pytest.approx(0.25)
    checkpointed = replace(restarted, last_checkpoint_utc=NOW + timedelta(hours=2, minutes=10))  # in this run
    assert checkpointed.work_since_checkpoint_hours(NOW + timedelta(hours=2, minutes=15)) == pytest.approx(5 / 60)
    fresh = replace(restarted, last_checkpoint_utc=None)  # never checkpointed: all of the run
    assert fresh.work_since_checkpoint_hours(NOW + timedelta(hours=2, minutes=15)) == pytest.approx(0.25)
    assert again.work_since_checkpoint_hours(NOW + timedelta(hours=1)) == 0.0  # queued: nothing to lose
