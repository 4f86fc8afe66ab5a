"""The simulated runtime: progress, periodic and on-demand checkpoints, stops."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.controller.runtime import SimRuntime
from fleetctl.model import JobState
from tests.builders import T0, job

RT = SimRuntime(checkpoint_seconds=30)


def running(**kw):
    return replace(job("j", duration_hours=4.0, **kw), state=JobState.RUNNING, started_at_utc=T0)


@pytest.mark.parametrize(
    "checkpointable, interval, minutes, done, kept",
    [
        (False, None, 90, 1.5, 0.0),  # no checkpoints: a stop loses the whole run
        (True, 30.0, 90, 1.5, 1.5),  # exactly at a checkpoint
        (True, 30.0, 100, 100 / 60, 1.5),  # 10 minutes since the last one
        (True, None, 100, 100 / 60, 0.0),  # checkpointable, but only on demand
    ],
    ids=["not-checkpointable", "at-checkpoint", "between-checkpoints", "on-demand-only"],
)
def test_progress_and_periodic_checkpoints(checkpointable, interval, minutes, done, kept):
    j = replace(running(), checkpointable=checkpointable, checkpoint_interval_minutes=interval)
    p = RT.progress(j, T0 + timedelta(minutes=minutes))
    assert p.done_hours == pytest.approx(done) and p.checkpointed_hours == pytest.approx(kept)
    assert not p.finished
    assert RT.stop(j, T0 + timedelta(minutes=minutes)).checkpointed_hours == pytest.approx(kept)


def test_checkpoint_before_deadline_keeps_all_work_too_late_keeps_the_last():
    j = replace(running(), checkpointable=True, checkpoint_interval_minutes=30.0)
    now = T0 + timedelta(minutes=100)
    assert RT.checkpoint(j, now + timedelta(seconds=120), now).checkpointed_hours == pytest.approx(100 / 60)
    assert RT.checkpoint(j, now + timedelta(seconds=10), now).checkpointed_hours == pytest.approx(1.5)


def test_resume_from_checkpoint_and_finish():
    j = replace(running(), checkpointable=True, checkpointed_work_hours=3.0)
    assert not RT.progress(j, T0 + timedelta(minutes=59)).finished
    p = RT.progress(j, T0 + timedelta(minutes=60))
    assert p.finished and p.done_hours == pytest.approx(4.0)
