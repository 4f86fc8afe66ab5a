"""``advance_jobs`` records job starts, completions and checkpoints in batches,
each one store transaction (one commit per job, an fsync each on SQLite, was
most of a tick that starts thousands: benchmarks/results/tick_scaling.md).
What the runtime was asked before an error is recorded; a batch whose commit
fails is rolled back whole and the next pass does it again."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

import pytest

from fleetctl.controller.reconcile import TickReport, advance_jobs
from fleetctl.controller.runtime import SimRuntime
from fleetctl.model import JobState
from tests.builders import T0, job
from tests.controller.test_reconcile import OFFERS, invariants, jobs, run_tick

N = 24


def _bound_jobs(w):
    """N one-GPU jobs bound to nodes that are ready a minute later. Returns that time."""
    w.store.add_jobs([job(f"j{i:02d}", gpus=1, duration_hours=6.0) for i in range(N)], T0)
    run_tick(w, T0)
    assert {j.state for j in jobs(w).values()} == {JobState.BOUND}
    later = T0 + timedelta(minutes=1)
    w.provider.nodes(later)  # the sandbox records its nodes ready (a transaction of its own)
    return later


def _count_transactions(store, monkeypatch):  # noqa: ANN001, ANN202
    opened = []
    plain = store.transaction

    @contextmanager
    def counted():
        opened.append(1)
        with plain():
            yield

    monkeypatch.setattr(store, "transaction", counted)
    return opened


def test_one_pass_starts_many_jobs_in_one_transaction(world_factory, monkeypatch):
    w = world_factory(offers=OFFERS)
    now = _bound_jobs(w)
    opened = _count_transactions(w.store, monkeypatch)
    report = TickReport()
    advance_jobs(store=w.store, provider=w.provider, runtime=w.runtime, now=now, report=report)
    assert sorted(report.started) == [f"j{i:02d}" for i in range(N)]
    assert {j.state for j in jobs(w).values()} == {JobState.RUNNING}
    assert len(opened) == 1  # was one per job
    assert len(w.store.audit_log(kinds=("start",), limit=100)[0]) == N
    invariants(w, now)


def test_a_batch_is_committed_at_its_size_limit(world_factory, monkeypatch):
    w = world_factory(offers=OFFERS)
    now = _bound_jobs(w)
    monkeypatch.setattr("fleetctl.controller.reconcile.ADVANCE_BATCH_JOBS", 5)
    opened = _count_transactions(w.store, monkeypatch)
    advance_jobs(store=w.store, provider=w.provider, runtime=w.runtime, now=now)
    assert len(opened) == -(-N // 5)
    assert {j.state for j in jobs(w).values()} == {JobState.RUNNING}


class FailingRuntime(SimRuntime):
    def __init__(self, fail_at: str) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.started: list[str] = []

    def start(self, job, node_ids, now):  # noqa: ANN001, ANN201
        if job.job_id == self.fail_at:
            raise ConnectionError("the runtime's API is unreachable")
        self.started.append(job.job_id)
        return super().start(job, node_ids, now)


def test_the_starts_asked_before_a_runtime_error_are_recorded(world_factory):
    w = world_factory(offers=OFFERS)
    now = _bound_jobs(w)
    runtime = FailingRuntime(fail_at="j10")
    report = TickReport()
    with pytest.raises(ConnectionError):
        advance_jobs(store=w.store, provider=w.provider, runtime=runtime, now=now, report=report)
    states = {j.job_id: j.state for j in jobs(w).values()}
    assert runtime.started and sorted(report.started) == sorted(runtime.started)
    assert {k for k, s in states.items() if s is JobState.RUNNING} == set(runtime.started)
    assert states["j10"] is JobState.BOUND
    invariants(w, now)
    # the next pass starts the rest
    advance_jobs(store=w.store, provider=w.provider, runtime=SimRuntime(), now=now + timedelta(seconds=30))
    assert {j.state for j in jobs(w).values()} == {JobState.RUNNING}


def test_a_batch_whose_commit_fails_is_rolled_back_whole_and_done_again(world_factory, monkeypatch):
    w = world_factory(offers=OFFERS)
    now = _bound_jobs(w)
    plain = w.store.record
    seen = []

    def record(kind, at, subject, **details):  # noqa: ANN001, ANN202
        seen.append(subject)
        if kind == "start" and len(seen) == N // 2:
            raise OSError("disk full")
        return plain(kind, at, subject, **details)

    monkeypatch.setattr(w.store, "record", record)
    report = TickReport()
    with pytest.raises(OSError, match="disk full"):
        advance_jobs(store=w.store, provider=w.provider, runtime=w.runtime, now=now, report=report)
    assert report.started == []  # nothing counted: nothing committed
    assert {j.state for j in jobs(w).values()} == {JobState.BOUND}
    assert w.store.audit_log(kinds=("start",), limit=100)[0] == ()
    monkeypatch.setattr(w.store, "record", plain)
    report = TickReport()
    advance_jobs(store=w.store, provider=w.provider, runtime=w.runtime, now=now, report=report)
    assert len(report.started) == N and {j.state for j in jobs(w).values()} == {JobState.RUNNING}
    invariants(w, now)
