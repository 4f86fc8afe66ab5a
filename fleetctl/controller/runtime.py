"""Where jobs run: a small Runtime protocol, and the simulated runtime.

The controller starts jobs on nodes, asks how far they got, asks them to
checkpoint before a reclaim deadline, and stops them. Real runtimes (a
Kubernetes operator, Slurm, Ray) come behind the same protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from fleetctl.model import Job


@dataclass(frozen=True, slots=True)
class Progress:
    """How far one run of a job got, in hours of work (wall-clock at full speed)."""

    job_id: str
    done_hours: float  # work done in total, including since the last checkpoint
    checkpointed_hours: float  # work a stop now keeps
    last_checkpoint_utc: datetime | None
    finished: bool

    @property
    def at_risk_hours(self) -> float:
        return max(0.0, self.done_hours - self.checkpointed_hours)


class Runtime(Protocol):
    """Start, observe, checkpoint and stop jobs.

    * ``start(job, node_ids, now)``: begin (or resume from ``job.checkpointed_work_hours``).
      It may be asked again for a run it started: the controller asks first and then
      records the start, so a controller that died in between asks again on restart.
    * ``progress(job, now)``: where the current run is; ``finished`` once all work is done.
    * ``checkpoint(job, deadline_utc, now)``: write a checkpoint that must complete by
      ``deadline_utc``; returns the progress kept (the last completed checkpoint if
      this one cannot finish in time, or if the job cannot checkpoint).
    * ``stop(job, now)``: stop without a new checkpoint; returns the progress kept.
    """

    def start(self, job: Job, node_ids: tuple[str, ...], now: datetime) -> None: ...

    def progress(self, job: Job, now: datetime) -> Progress: ...

    def checkpoint(self, job: Job, deadline_utc: datetime | None, now: datetime) -> Progress: ...

    def stop(self, job: Job, now: datetime) -> Progress: ...


class SimRuntime:
    """Jobs progress at full speed in (simulated) time from ``job.started_at_utc``
    plus ``restart_overhead_seconds``.

    Stateless: everything follows from the job's fields and ``now``, so the
    same job and time always give the same answer, across processes too.
    A checkpointable job with an interval checkpoints every interval of its
    run; an on-demand checkpoint takes ``checkpoint_seconds``, so work lost on a
    reclaim is exactly the work since the last completed checkpoint.
    ``restart_overhead_seconds``: what every start (the first and each restart)
    spends before doing work (pulling the image, loading the checkpoint); the
    job holds its nodes meanwhile. 0 by default: a run does work at once.
    """

    def __init__(self, checkpoint_seconds: float = 30.0, restart_overhead_seconds: float = 0.0) -> None:
        self.checkpoint_seconds = checkpoint_seconds
        self.restart_overhead_seconds = restart_overhead_seconds

    def work_starts_at(self, job: Job) -> datetime | None:
        """When the current run begins doing work (its start plus the overhead); None if not started."""
        if job.started_at_utc is None:
            return None
        return job.started_at_utc + timedelta(seconds=self.restart_overhead_seconds)

    def start(self, job: Job, node_ids: tuple[str, ...], now: datetime) -> None:
        """Nothing to do: the run is described by the job's ``started_at_utc``."""

    def progress(self, job: Job, now: datetime) -> Progress:
        work_from = self.work_starts_at(job)
        if work_from is None:
            return Progress(job.job_id, job.checkpointed_work_hours, job.checkpointed_work_hours,
                            job.last_checkpoint_utc, False)
        ran = max(0.0, (now - work_from).total_seconds() / 3600)
        remaining = job.remaining_hours
        done_now = min(ran, remaining)
        finished = ran >= remaining
        kept = 0.0
        last = job.last_checkpoint_utc if job.checkpointed_work_hours else None
        if finished:
            kept, last = done_now, work_from + timedelta(hours=remaining)
        elif job.checkpointable and job.checkpoint_interval_minutes:
            interval = job.checkpoint_interval_minutes / 60
            periods = math.floor(ran / interval + 1e-9)
            if periods:
                kept = periods * interval
                last = work_from + timedelta(hours=kept)
        return Progress(job.job_id, job.checkpointed_work_hours + done_now, job.checkpointed_work_hours + kept,
                        last, finished)

    def checkpoint(self, job: Job, deadline_utc: datetime | None, now: datetime) -> Progress:
        current = self.progress(job, now)
        if not job.checkpointable or current.finished:
            return current
        done_at = now + timedelta(seconds=self.checkpoint_seconds)
        if deadline_utc is not None and done_at > deadline_utc:
            return current  # not enough time: the last periodic checkpoint is what survives
        return Progress(job.job_id, current.done_hours, current.done_hours, now, False)

    def stop(self, job: Job, now: datetime) -> Progress:
        current = self.progress(job, now)
        if not job.checkpointable and not current.finished:
            return Progress(job.job_id, current.done_hours, job.checkpointed_work_hours, job.last_checkpoint_utc, False)
        return current
