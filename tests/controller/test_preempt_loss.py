"""The preempt entry of the audit log says what the preemption cost the job (``lost_gpu_hours``, for
`fleetctl report`), as the requeue entry of a reclaim does."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.controller.reconcile import tick
from fleetctl.model import JobState, Market
from tests.builders import T0, job, offer, policy


@pytest.mark.parametrize("checkpointable, lost", [(False, 59 / 60 * 16), (True, 0.0)], ids=["stopped", "checkpointed"])
def test_a_preempted_running_job_records_the_gpu_hours_it_lost(world_factory, checkpointable, lost):
    w = world_factory(offers=(offer("a8", price=20.0, zone="z1", market=Market.ON_DEMAND),))
    pol = policy(max_usd_per_hour=40.0)  # two nodes, no third for the newcomer

    def run(now):
        return tick(store=w.store, provider=w.provider, runtime=w.runtime, policy=pol, now=now)

    w.store.add_jobs([replace(job("gang", workers=2, gpus=8, duration_hours=4.0), checkpointable=checkpointable,
                              checkpoint_interval_minutes=None)], T0)
    run(T0)
    run(T0 + timedelta(minutes=1))
    assert {j.job_id: j.state for j in w.store.jobs()}["gang"] is JobState.RUNNING
    now = T0 + timedelta(minutes=60)
    w.store.add_jobs([job("prod", gpus=8, priority="production", submitted=now)], now)
    run(now)
    (entry,) = w.store.events("preempt")
    assert entry["subject"] == "gang"
    assert entry["payload"]["lost_gpu_hours"] == pytest.approx(lost)
    # the job records when the work it keeps was saved: the checkpoint taken at the preemption, or none
    gang = {j.job_id: j for j in w.store.jobs()}["gang"]
    assert (gang.checkpointed_work_hours > 0, gang.last_checkpoint_utc) == \
        ((True, now) if checkpointable else (False, None))
