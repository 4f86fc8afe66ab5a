"""Reclaim notices cut into a reconcile tick under way (``tick``'s ``notices_due``).

A notice gives 30 s on GCP and Azure; a tick at 5,000 nodes took up to 38 s
(benchmarks/results/notice_latency.md). The tick is held mid-way
deterministically (a runtime or provider call that delivers the notice, or
parks on a ``threading.Event``), never with sleeps."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime, timedelta

from fleetctl.controller.loop import Daemon, LoopContext
from fleetctl.controller.reconcile import tick
from fleetctl.controller.runtime import SimRuntime
from fleetctl.metrics import FleetMetrics
from fleetctl.model import Bind, JobState, NodeState
from fleetctl.planner import plan as make_plan
from tests.builders import T0, job, policy
from tests.controller.test_reconcile import OFFERS, invariants, jobs, run_tick


class LoggingRuntime(SimRuntime):
    """``SimRuntime`` that logs each start, checkpoint and stop in order, and
    calls ``on_start(job)`` at each start (the test's hook into the tick)."""

    def __init__(self, log: list[tuple[str, str]], on_start=None) -> None:  # noqa: ANN001
        super().__init__(checkpoint_seconds=30)
        self.log = log
        self.on_start = on_start

    def start(self, job, node_ids, now):  # noqa: ANN001, ANN201
        self.log.append(("start", job.job_id))
        if self.on_start is not None:
            self.on_start(job)
        return super().start(job, node_ids, now)

    def checkpoint(self, job, deadline_utc, now):  # noqa: ANN001, ANN201
        self.log.append(("checkpoint", job.job_id))
        return super().checkpoint(job, deadline_utc, now)

    def stop(self, job, now):  # noqa: ANN001, ANN201
        self.log.append(("stop", job.job_id))
        return super().stop(job, now)


def _running_c_and_bound_x_y(w):
    """``c`` (checkpointable) running on its own spot node; ``x`` and ``y`` bound to new nodes, to start at
    the next tick (its advance_jobs starts x, then y). Returns (the next tick's time, c's node)."""
    w.store.add_jobs([job("c", gpus=8, duration_hours=6.0, spot=True)], T0)
    run_tick(w, T0)
    run_tick(w, T0 + timedelta(minutes=1))
    c = jobs(w)["c"]
    w.store.put_job(replace(c, checkpointable=True, checkpoint_interval_minutes=30.0), T0)
    assert c.state is JobState.RUNNING
    later = T0 + timedelta(minutes=2)
    w.store.add_jobs([job("x", gpus=8, submitted=later, duration_hours=6.0),
                      job("y", gpus=8, submitted=later, duration_hours=6.0)], later)
    run_tick(w, later)
    assert {jobs(w)[j].state for j in ("x", "y")} == {JobState.BOUND}
    return T0 + timedelta(minutes=40), c.node_ids[0]


def test_a_notice_delivered_while_the_tick_starts_jobs_is_checkpointed_before_the_next_start(world_factory):
    w = world_factory(offers=OFFERS)
    now, node_c = _running_c_and_bound_x_y(w)
    log: list[tuple[str, str]] = []
    due = threading.Event()

    def deliver(started):  # noqa: ANN001 - the tick is held in its first start: the notice arrives now
        if started.job_id == "x":
            w.provider.reclaim(node_c, now, lead_seconds=30)  # GCP: 30 s
            due.set()

    def notices_due():
        if not due.is_set():
            return None
        due.clear()
        return now

    w.runtime = LoggingRuntime(log, on_start=deliver)
    report = tick(store=w.store, provider=w.provider, runtime=w.runtime, policy=policy(), now=now,
                  notices_due=notices_due)
    assert log[:3] == [("start", "x"), ("checkpoint", "c"), ("start", "y")], log
    assert report.interruptions == 1 and report.requeued == ["c"] and report.checkpoints == 1
    assert sorted(report.started) == ["x", "y"]
    c = jobs(w)["c"]
    assert c.interruptions == 1 and c.checkpointed_work_hours > 0
    # re-placed in the same tick, elsewhere; the cordoned node holds nothing
    assert c.state is JobState.BOUND and node_c not in c.node_ids
    assert all(node_c not in j.node_ids for j in w.store.jobs(active_only=True))
    assert w.store.interruptions(unhandled_only=True) == ()
    invariants(w, now)


def test_after_a_notice_is_handled_the_next_job_waits_for_another_safe_point(world_factory):
    """Once a notice handled mid-way re-reads the jobs still to go, the next
    of them is not started before notices are asked for again: one that
    arrived meanwhile (for that job's node) is handled first, so the job is
    requeued, never started on a node being reclaimed."""
    w = world_factory(offers=OFFERS)
    now, node_c = _running_c_and_bound_x_y(w)
    node_y = jobs(w)["y"].node_ids[0]
    log: list[tuple[str, str]] = []
    due: list[str] = []

    def deliver(started):  # noqa: ANN001 - the first start: c's node is reclaimed
        if started.job_id == "x":
            w.provider.reclaim(node_c, now, lead_seconds=30)
            due.append("c")

    def notices_due():
        if not due:
            return None
        if due.pop(0) == "c":  # the check after c's notice is handled finds one for y's node
            due.append("y")
        else:
            w.provider.reclaim(node_y, now, lead_seconds=30)
        return now

    w.runtime = LoggingRuntime(log, on_start=deliver)
    report = tick(store=w.store, provider=w.provider, runtime=w.runtime, policy=policy(), now=now,
                  notices_due=notices_due)
    assert log[:2] == [("start", "x"), ("checkpoint", "c")] and ("start", "y") not in log[:3], log
    assert report.started[:1] == ["x"] and report.interruptions == 2 and sorted(report.requeued) == ["c", "y"]
    assert jobs(w)["y"].interruptions == 1 and all(node_y not in j.node_ids for j in w.store.jobs(active_only=True))


class ParkingProvider:
    """The sandbox provider, whose ``launch`` calls ``during_launch()`` once, before the cloud answers."""

    def __init__(self, inner, during_launch) -> None:  # noqa: ANN001
        self._inner = inner
        self.during_launch = during_launch

    def __getattr__(self, name):  # noqa: ANN001, ANN204
        return getattr(self._inner, name)

    def launch(self, request, now):  # noqa: ANN001, ANN201
        hook, self.during_launch = self.during_launch, None
        if hook is not None:
            hook()
        return self._inner.launch(request, now)


def test_a_notice_for_a_node_the_plan_binds_to_stops_the_stale_plan_and_nothing_lands_on_it(world_factory):
    """The plan (made before the notice) binds one job to an idle node and launches another node for the
    second; the notice for the idle node arrives while the launch is under way. Carried out as planned,
    the bind would put a job on a cordoned node. The rest of the plan is dropped and the tick plans again."""
    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("old", gpus=8, duration_hours=0.5, spot=True)], T0)
    run_tick(w, T0)
    run_tick(w, T0 + timedelta(minutes=1))
    run_tick(w, T0 + timedelta(minutes=40))  # old finished: its node is idle (idle timeout 10 min by default)
    (idle,) = w.store.nodes()
    assert jobs(w)["old"].state is JobState.SUCCEEDED
    now = T0 + timedelta(minutes=42)
    w.store.add_jobs([job("p", gpus=8, submitted=now, spot=True), job("q", gpus=8, submitted=now, spot=True)], now)
    due = threading.Event()

    def deliver():
        w.provider.reclaim(idle.node_id, now, lead_seconds=30)
        due.set()

    def notices_due():
        if not due.is_set():
            return None
        due.clear()
        return now

    plans = []

    def planner(**kw):  # noqa: ANN003, ANN202
        plans.append(make_plan(**kw))
        return plans[-1]

    provider = ParkingProvider(w.provider, deliver)
    report = tick(store=w.store, provider=provider, runtime=w.runtime, policy=policy(), now=now,
                  notices_due=notices_due, planner=planner)
    stale = [a for a in plans[0].actions if isinstance(a, Bind)]
    assert [a.kind for a in plans[0].actions] == ["launch", "bind", "bind"]
    assert any(a.node_ids == (idle.node_id,) for a in stale)  # the bind that would land on the cordoned node
    assert report.interruptions == 1 and report.replanned_after_notices == 1 and len(plans) == 2
    by_id = {n.node_id: n for n in w.store.nodes(include_gone=True)}
    assert by_id[idle.node_id].state in (NodeState.DRAINING, NodeState.GONE)
    placed = jobs(w)
    assert {placed["p"].state, placed["q"].state} == {JobState.BOUND}
    assert all(idle.node_id not in placed[j].node_ids for j in ("p", "q"))
    invariants(w, now)
    # and the next tick carries on from there: still nothing on the cordoned node
    run_tick(w, now + timedelta(minutes=1))
    assert all(idle.node_id not in j.node_ids for j in w.store.jobs(active_only=True))
    invariants(w, now + timedelta(minutes=1))


def test_the_daemons_notice_pass_does_not_wait_for_a_tick_held_mid_way(world_factory):
    """A reconcile pass is held inside its first job start (a threading.Event); a notice arrives and the
    notice pass runs. It must not wait for the lock: the tick handles the notice at its next safe point,
    before it starts the next job, and the invariants hold when the tick then finishes."""
    w = world_factory(offers=OFFERS)
    now, node_c = _running_c_and_bound_x_y(w)
    log: list[tuple[str, str]] = []
    parked, release = threading.Event(), threading.Event()

    def park(started):  # noqa: ANN001
        if started.job_id == "x":
            parked.set()
            release.wait()

    w.runtime = LoggingRuntime(log, on_start=park)
    loop = Daemon(LoopContext(w.store, w.provider, w.runtime, policy(), FleetMetrics()),
                  interval_seconds=3600, interruption_seconds=5, price_seconds=3600, clock=lambda: now)
    ticking = threading.Thread(target=loop.reconcile)
    ticking.start()
    notice_pass = None
    try:
        assert parked.wait(60)
        w.provider.reclaim(node_c, now, lead_seconds=30)
        notice_pass = threading.Thread(target=loop.interruptions)
        notice_pass.start()
        notice_pass.join(30)  # it returns at once; the old pass waited for the lock, i.e. the tick's end
        assert not notice_pass.is_alive(), "the notice pass waits for the reconcile tick to end"
    finally:
        release.set()
        ticking.join(60)
        if notice_pass is not None:
            notice_pass.join(60)
    log.append(("tick ended", ""))
    assert log.index(("checkpoint", "c")) < log.index(("start", "y")), log
    assert loop.ticks == 1
    c = jobs(w)["c"]
    assert c.interruptions == 1 and node_c not in c.node_ids
    assert w.store.interruptions(unhandled_only=True) == ()
    invariants(w, now)


def test_notice_checks_are_due_every_so_many_seconds_at_the_clocks_time():
    from fleetctl.controller.reconcile import notice_checks  # what reconcile --once gives its tick

    ticks = [100.0]
    at = datetime(2026, 11, 2, 9, 0)
    due = notice_checks(5.0, lambda: at, monotonic=lambda: ticks[0])
    assert due() is None
    ticks[0] = 104.9
    assert due() is None
    ticks[0] = 105.0
    assert due() == at
    assert due() is None  # counted again from the check
    ticks[0] = 110.0
    assert due() == at


def test_notices_cutting_into_every_plan_leave_the_rest_to_the_next_tick(world_factory):
    """A notice during each launch (for the node the previous launch bought): after
    MAX_NOTICE_REPLANS_PER_TICK plans again, the tick stops planning; nothing was bound to a cordoned
    node, no plan is recorded as applied, and the next tick places the jobs."""
    from fleetctl.controller.reconcile import MAX_NOTICE_REPLANS_PER_TICK

    w = world_factory(offers=OFFERS)
    w.store.add_jobs([job("old", gpus=8, duration_hours=0.5, spot=True)], T0)
    run_tick(w, T0)
    run_tick(w, T0 + timedelta(minutes=1))
    run_tick(w, T0 + timedelta(minutes=40))
    (idle,) = w.store.nodes()
    now = T0 + timedelta(minutes=42)
    w.store.add_jobs([job("p", gpus=8, submitted=now, spot=True), job("q", gpus=8, submitted=now, spot=True)], now)
    victims = [idle.node_id]
    reclaimed = []

    class EveryLaunch:
        def __init__(self, inner):  # noqa: ANN001
            self._inner = inner

        def __getattr__(self, name):  # noqa: ANN001, ANN204
            return getattr(self._inner, name)

        def launch(self, request, now_):  # noqa: ANN001, ANN201
            if victims:
                node_id = victims.pop()
                w.provider.reclaim(node_id, now, lead_seconds=30)
                reclaimed.append(node_id)
            result = self._inner.launch(request, now_)
            victims.extend(n.node_id for n in result.nodes)
            return result

    report = tick(store=w.store, provider=EveryLaunch(w.provider), runtime=w.runtime, policy=policy(), now=now,
                  notices_due=lambda: now)
    assert report.replanned_after_notices == MAX_NOTICE_REPLANS_PER_TICK + 1
    assert report.interruptions == len(reclaimed) == MAX_NOTICE_REPLANS_PER_TICK + 1
    assert {jobs(w)[j].state for j in ("p", "q")} == {JobState.QUEUED}
    assert not w.store.events("plan_applied", since=now)
    invariants(w, now)
    run_tick(w, now + timedelta(minutes=1))
    placed = jobs(w)
    assert {placed["p"].state, placed["q"].state} == {JobState.BOUND}
    assert not set(reclaimed) & {n for j in ("p", "q") for n in placed[j].node_ids}
    invariants(w, now + timedelta(minutes=1))
