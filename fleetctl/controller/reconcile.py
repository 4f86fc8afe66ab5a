"""One tick of the controller: a plain function that cron, the daemon, the
tests and the simulator all call.

    handle interruptions -> cancel jobs -> advance jobs (start, finish) -> observe -> plan -> act -> record

The tick decides nothing itself: placement, purchases, terminations and
migrations come from the planner; the tick carries out the runtime's side of
them (start, checkpoint, stop) and writes every fact to the store first.

Reclaim handling (in the spirit of Can't Be Late's uniform progress): the node
is cordoned; each job on it is asked to checkpoint before the notice's
deadline (a job that cannot checkpoint is stopped and its run is lost); the
job is requeued with the work it kept, a priority boost, and the failed offer
to avoid, and the next plan re-places it. The planner moves it to on-demand
when spot is scarce, when it was interrupted more often than the policy allows,
or when its deadline no longer covers the remaining work plus a restart.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Callable

from fleetctl.codec import dt_to_str
from fleetctl.controller import (
    REFUSED_OFFER_TTL,
    ApplyError,
    ApplyResult,
    NoticesHandled,
    execute,
    fingerprint,
    left_behind,
    observe,
    settle_launches,
)
from fleetctl.controller.runtime import Runtime
from fleetctl.metrics import FleetMetrics
from fleetctl.model import (
    Forecast,
    InterruptionEvent,
    InterruptionKind,
    Job,
    JobState,
    Market,
    NodeState,
    Plan,
    Policy,
    Reason,
)
from fleetctl.planner import plan as make_plan
from fleetctl.render import counted
from fleetctl.store import Store
from providers.base import Provider, ProviderError

log = logging.getLogger("fleetctl.reconcile")


@dataclass(slots=True)
class TickReport:
    """What one tick did (also what the simulator counts)."""

    plan: Plan | None = None
    started: list[str] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    lost_nodes: list[str] = field(default_factory=list)  # gone without a notice while jobs were on them
    interruptions: int = 0
    lost_gpu_hours: float = 0.0
    checkpoints: int = 0
    checkpoints_missed: int = 0  # of those, how many could not finish before the deadline
    refused_offers: list[str] = field(default_factory=list)  # launches refused for capacity, planned again without
    replanned_after_notices: int = 0  # plans dropped because notices were handled while they were made or applied

    def summary(self) -> str:
        """One line of what the tick did, the same for `reconcile --once` and
        the daemon's log: ``3 actions, 1 job started, 0 completed, 0 requeued
        after 0 notices``, then the nodes lost without a notice and the jobs
        cancelled when there are any."""
        actions = self.plan.actions if self.plan else ()
        return (f"{counted(len(actions), 'action')}, {counted(len(self.started), 'job')} started, "
                f"{len(self.completed)} completed, {len(self.requeued)} requeued after "
                f"{counted(self.interruptions, 'notice')}"
                + (f" ({len(self.lost_nodes)} for nodes gone without one)" if self.lost_nodes else "")
                + (f", {len(self.cancelled)} cancelled" if self.cancelled else ""))


#: Offers refused for capacity that one tick plans around before it gives up with the error (a cloud
#: refusing everything, e.g. an account-wide problem, must not make a tick try the whole catalog).
MAX_REFUSED_PER_TICK = 10

#: Work (hours) a reclaim may cost a job and still count as costing it nothing (float noise).
_NO_LOSS_HOURS = 1e-6


def _risk(policy: Policy, forecast: Forecast | None, offer_key: str, market: Market) -> float:
    if market is not Market.SPOT:
        return 0.0
    risks = forecast.risks_per_hour() if forecast else {}  # per hour, as the planner reads them
    return risks.get(offer_key, policy.default_spot_interruption_probability_per_hour)


def requeue(job: Job, kept_hours: float, now: datetime, policy: Policy, avoid: str | None, interrupted: bool,
            work_lost: bool = False, checkpoint_utc: datetime | None = None) -> Job:
    """The job back in the queue, resuming from ``kept_hours`` of work
    saved at ``checkpoint_utc`` (``now`` if not given) (``work_lost``: the
    reclaim cost it work, counted apart for ``count_interruptions: work_lost``)."""
    return replace(
        job,
        state=JobState.QUEUED,
        node_ids=(),
        started_at_utc=None,
        checkpointed_work_hours=kept_hours,
        last_checkpoint_utc=(checkpoint_utc or now) if kept_hours else None,
        interruptions=job.interruptions + (1 if interrupted else 0),
        work_lost_interruptions=job.work_lost_interruptions + (1 if interrupted and work_lost else 0),
        priority_boost=job.priority_boost + (policy.requeue_priority_boost if interrupted else 0.0),
        avoid_offer_keys=tuple(sorted({*job.avoid_offer_keys, avoid})) if avoid else job.avoid_offer_keys,
        requeued_at_utc=now,
    )


def handle_interruptions(*, store: Store, provider: Provider, runtime: Runtime, policy: Policy, now: datetime,
                         forecast: Forecast | None = None, metrics: FleetMetrics | None = None,
                         report: TickReport | None = None) -> int:
    """Drain nodes named by reclaim notices and requeue their jobs. Each notice
    is recorded before it is handled and acknowledged only after; an
    acknowledgement the cloud refuses (throttled) is recorded and logged, and
    the other notices are still handled: the cloud delivers that notice again
    and it is acknowledged then (the store knows it is handled). Returns how
    many notices were handled.

    Notices come from the provider (AWS's queue, the sandbox) and from the
    store: the daemon's notice endpoint (``fleetctl node-watch`` on GCP and
    Azure nodes) writes them there, and a pass that crashed after recording a
    notice left it there unhandled. Store-only notices have nothing to
    acknowledge at the provider."""
    report = report or TickReport()
    done: set[str] = set()
    for event in provider.interruption_events(now):
        store.add_interruption(event)
        _handle_and_mark(event, store=store, runtime=runtime, policy=policy, now=now, forecast=forecast,
                         metrics=metrics, report=report)
        try:
            provider.acknowledge(event.event_id)
        except ProviderError as exc:
            # Handled and recorded, so not lost: the cloud delivers it again, the store knows it is handled,
            # and it is acknowledged then. The other notices of this pass must not wait for that.
            store.record("interruption_acknowledge_failed", now, event.node_id, event_id=event.event_id,
                         error=str(exc)[:500])
            log.warning("%s notice %s was handled, but acknowledging it failed (%s: %s); it is acknowledged when "
                        "it is delivered again", event.kind.value, event.event_id, type(exc).__name__, exc)
        done.add(event.event_id)
    for event in store.interruptions(unhandled_only=True):
        if event.event_id in done or event.received_at_utc > now:
            continue
        _handle_and_mark(event, store=store, runtime=runtime, policy=policy, now=now, forecast=forecast,
                         metrics=metrics, report=report)
        done.add(event.event_id)
    return len(done)


def _handle_and_mark(event: InterruptionEvent, *, store: Store, runtime: Runtime, policy: Policy, now: datetime,
                     forecast: Forecast | None, metrics: FleetMetrics | None, report: TickReport) -> None:
    """Handle one notice in one store transaction, then count it.

    Design choice: what the handling counts (the notice, checkpoints, lost
    GPU-hours) goes to the metrics and the report only once the transaction
    has committed. A handling that fails part-way (the runtime's checkpoint
    call times out) is rolled back, the notice left unhandled, and the next
    pass handles it again: counted as it happened, the one notice was counted
    twice."""
    handled = TickReport()
    with store.transaction():
        if not store.claim_interruption(event.event_id, now):
            return  # another controller on this store (the daemon, cron) handled it
        counted_as = _handle_one(event, store=store, runtime=runtime, policy=policy, now=now, forecast=forecast,
                                 report=handled)
    report.interruptions += handled.interruptions
    report.checkpoints += handled.checkpoints
    report.checkpoints_missed += handled.checkpoints_missed
    report.lost_gpu_hours += handled.lost_gpu_hours
    report.requeued.extend(handled.requeued)
    if metrics:
        if counted_as is not None:
            metrics.interruptions.labels(*counted_as).inc()
        if handled.checkpoints:
            metrics.checkpoints.inc(handled.checkpoints)
        if handled.checkpoints_missed:
            metrics.checkpoints_missed.inc(handled.checkpoints_missed)
        if handled.lost_gpu_hours:
            metrics.lost_gpu_hours.inc(handled.lost_gpu_hours)


def _handle_one(event: InterruptionEvent, *, store: Store, runtime: Runtime, policy: Policy, now: datetime,
                forecast: Forecast | None, report: TickReport) -> tuple[str, str] | None:
    """Handle one claimed notice inside its transaction, adding what it did to
    ``report``; returns the (provider, kind) it counts under, or None when it
    does not count (a duplicate, a node this controller does not know)."""
    # Only the jobs on the node and their nodes are read (not the whole fleet and queue for each notice).
    active = store.jobs(active_only=True, on_node=event.node_id)
    nodes = {n.node_id: n for n in store.nodes(include_gone=True,
                                                 node_ids={event.node_id, *(n for j in active for n in j.node_ids)})}
    node = nodes.get(event.node_id)
    if _already_handled(store, event):
        # The same reclaim through a second path (AWS: the EventBridge queue and
        # node-watch on the node): handled once, counted once.
        store.record("interruption_duplicate", now, event.node_id, event_id=event.event_id)
        return None
    if node is None and not active:
        # Not a node of this controller (another cluster's, a --node-id typo): nothing to drain or count.
        store.record("interruption_unknown_node", now, event.node_id, notice=event.kind.value,
                     event_id=event.event_id, provider=event.provider)
        log.warning("%s notice %s names node %s, which this controller does not know: ignored",
                    event.kind.value, event.event_id, event.node_id)
        return None
    provider = node.offer.provider if node is not None else event.provider  # the node's own, not the sender's word
    store.record("interruption", now, event.node_id, notice=event.kind.value, event_id=event.event_id,
                 deadline_utc=dt_to_str(event.deadline_utc))
    counted_as = (provider, event.kind.value)
    report.interruptions += 1
    gone = node is None or node.state is NodeState.GONE
    if gone and event.kind is InterruptionKind.REBALANCE:
        return counted_as
    # A termination (AWS's state change, GCP's finished preemption, a posted 'terminated', a lost node) says
    # the machine is gone already: there is nothing left to checkpoint on, whatever the store still says of
    # the node or the notice's deadline (often null). Its jobs keep their last checkpoint and the work since
    # is lost and counted; checkpointing them saved work that was never saved.
    # When the machine stops working: a termination's time (its deadline, else when it was received), a
    # reclaim warning's deadline. A notice handled after that (a cron pass minutes later, a controller
    # that was down) must not count the work of those minutes as done, nor checkpoints the runtime would
    # have taken in them as kept, and asks no checkpoint of a machine that is gone.
    # A rebalance recommendation's node keeps working, whatever deadline came with it.
    ran_until = now
    taken = False  # the machine is past its end: nothing to checkpoint on
    if event.kind is not InterruptionKind.REBALANCE:
        ends = event.deadline_utc
        if ends is None and event.kind is InterruptionKind.TERMINATED:
            ends = event.received_at_utc
        if ends is not None:
            ran_until = min(now, ends)
            taken = ends <= now
    can_checkpoint = not gone and not taken and event.kind is not InterruptionKind.TERMINATED
    if event.kind is InterruptionKind.REBALANCE:
        risk = _risk(policy, forecast, node.offer.key, node.offer.market)
        if risk < policy.rebalance_drain_probability:
            store.record("rebalance_ignored", now, node.node_id, risk=risk)
            return counted_as
    if not gone:
        store.put_node(replace(node, state=NodeState.DRAINING), now)  # type: ignore[arg-type]
    for job in active:
        if event.node_id not in job.node_ids:
            continue
        kept, kept_at = job.checkpointed_work_hours, job.last_checkpoint_utc
        lost = 0.0
        checkpoint = "none"
        if job.state is JobState.RUNNING:
            before = runtime.progress(job, ran_until)
            if job.checkpointable and can_checkpoint:
                # The job gets the policy's grace after the notice, never past the notice's deadline; a
                # reclaim warning without a deadline gets the grace (the cloud takes the node all the same).
                # A rebalance recommendation has none: the drain is fleetctl's own choice.
                deadline = event.deadline_utc
                if deadline is not None or event.kind is InterruptionKind.RECLAIM_WARNING:
                    grace_end = event.received_at_utc + timedelta(seconds=policy.checkpoint_grace_seconds)
                    deadline = grace_end if deadline is None else min(deadline, grace_end)
                after = runtime.checkpoint(job, deadline, now)
                report.checkpoints += 1
                checkpoint = "saved" if after.checkpointed_hours >= before.done_hours - 1e-9 else "missed"
                if checkpoint == "missed":
                    report.checkpoints_missed += 1
            else:
                after = runtime.stop(job, ran_until)
            kept, kept_at = after.checkpointed_hours, after.last_checkpoint_utc
            lost = max(0.0, before.done_hours - kept)
        lost_gpu_hours = lost * job.gpus
        report.lost_gpu_hours += lost_gpu_hours
        avoid = node.offer.key if node is not None and node.offer.market is Market.SPOT else None
        store.put_job(requeue(job, kept, now, policy, avoid, interrupted=True, work_lost=lost > _NO_LOSS_HOURS,
                              checkpoint_utc=kept_at), now)
        left_behind(store, nodes, job, now, except_nodes={event.node_id})
        report.requeued.append(job.job_id)
        store.record("requeue", now, job.job_id, node=event.node_id, kept_hours=kept, lost_gpu_hours=lost_gpu_hours,
                     reason=Reason.INTERRUPTION.value, checkpoint=checkpoint)
        log.info("%s notice for node %s: job %s requeued (checkpoint %s, %.2f h of work kept, %.2f GPU-h lost)",
                 event.kind.value, event.node_id, job.job_id, checkpoint, kept, lost_gpu_hours)
    return counted_as


def handle_lost_nodes(*, store: Store, provider: Provider, runtime: Runtime, policy: Policy, now: datetime,
                      forecast: Forecast | None = None, metrics: FleetMetrics | None = None,
                      report: TickReport | None = None) -> int:
    """Nodes that vanished without a notice (terminated behind fleetctl's
    back, a notice lost or not yet delivered) while jobs were on them: each is
    handled as a ``terminated`` notice the controller gives itself, so its jobs
    are requeued with the work their checkpoints kept, the reclaim counted and
    the offer avoided, as for a notice. A late notice for the same node is then
    recognised as a duplicate. Returns how many nodes were lost."""
    report = report or TickReport()
    live = {n.node_id for n in provider.nodes(now) if n.state is not NodeState.GONE}
    lost = sorted({nid for j in store.jobs(active_only=True) if j.state in (JobState.BOUND, JobState.RUNNING)
                   for nid in j.node_ids if nid not in live})
    if not lost:
        return 0
    known = {n.node_id: n for n in store.nodes(include_gone=True, node_ids=lost)}  # not every node ever recorded
    for node_id in lost:
        node = known.get(node_id)
        event = InterruptionEvent(
            event_id=f"fleetctl-lost-{node_id}-{now.isoformat()}", provider=node.offer.provider if node else "unknown",
            node_id=node_id, kind=InterruptionKind.TERMINATED, received_at_utc=now, deadline_utc=now)
        # the notice and its audit entry land together (a failed write leaves neither, for the next tick)
        store.add_interruption(event, audit="node_lost", detail="gone without a notice while jobs were on it")
        _handle_and_mark(event, store=store, runtime=runtime, policy=policy, now=now, forecast=forecast,
                         metrics=metrics, report=report)
        report.lost_nodes.append(node_id)
    return len(lost)


def _already_handled(store: Store, event: InterruptionEvent) -> bool:
    """Another notice for the same node was handled already: for a reclaim or
    termination, another reclaim or termination (a rebalance hint before it
    does not make it a duplicate); for a rebalance hint, any notice (AWS
    sends one hint per instance, through the queue and on the node)."""
    unhandled = {e.event_id for e in store.interruptions(unhandled_only=True, node_id=event.node_id)}
    rebalance = event.kind is InterruptionKind.REBALANCE
    return any(e.event_id != event.event_id and e.event_id not in unhandled
               and (rebalance or e.kind is not InterruptionKind.REBALANCE)
               for e in store.interruptions(unhandled_only=False, node_id=event.node_id))


def apply_cancellations(*, store: Store, provider: Provider, runtime: Runtime, now: datetime,
                        report: TickReport | None = None) -> int:
    """Carry out ``fleetctl jobs cancel``: each requested job that is still
    active is stopped (if running) and marked cancelled, its nodes left idle
    for the planner's idle timeout; each request is marked handled in the same
    transaction. Returns how many jobs were cancelled."""
    report = report or TickReport()
    pending = store.pending_cancellations()
    if not pending:
        return 0
    jobs = {j.job_id: j for j in store.jobs(job_ids=pending)}
    nodes = {n.node_id: n for n in provider.nodes(now)}
    done = 0
    for job_id in pending:
        with store.transaction():
            job = jobs.get(job_id)
            if job is not None and job.state.active:
                if job.state is JobState.RUNNING:
                    runtime.stop(job, now)
                store.put_job(replace(job, state=JobState.CANCELLED, node_ids=()), now)
                left_behind(store, nodes, job, now)
                store.record("cancel", now, job_id, state=job.state.value, nodes=list(job.node_ids))
                report.cancelled.append(job_id)
                done += 1
            store.mark_cancel_handled(job_id, now)
    return done


#: ``advance_jobs`` records job transitions in batches, each one store transaction: one commit per job
#: (an fsync each on SQLite, 3 ms) was most of a tick that starts or finishes thousands. A batch is
#: committed once it has gathered this many seconds of work or ``ADVANCE_BATCH_JOBS`` jobs, so the
#: stretch between two safe points (where reclaim notices cut in) stays about this short.
ADVANCE_BATCH_SECONDS = 0.25
ADVANCE_BATCH_JOBS = 500


def advance_jobs(*, store: Store, provider: Provider, runtime: Runtime, now: datetime,
                 metrics: FleetMetrics | None = None, report: TickReport | None = None,
                 between: Callable[[Callable[[], None]], bool] | None = None) -> None:
    """Passive transitions: bound jobs start once all their nodes are ready;
    running jobs finish when their work is done (their nodes become idle);
    a running job's newer checkpoint is recorded.

    The runtime is asked first (outside any transaction), then the
    transitions are recorded in batches (``ADVANCE_BATCH_SECONDS``,
    ``ADVANCE_BATCH_JOBS``), each batch one store transaction, counted once
    it has committed. A write that fails rolls its batch back: those jobs
    stay as they were, and the next pass starts (the runtime's ``start``
    is idempotent) or finishes them again and counts them then. A runtime
    call that fails part-way has what was asked before it recorded first.

    ``between`` (if given) is called before each job, outside any
    transaction (a safe point: ``tick``'s ``notices_due``), with the function
    that commits the batch gathered so far, which it calls before it handles
    a notice (the notice pass must read the jobs as started). When it says it
    handled reclaim notices, the jobs still to go and the nodes are read
    again, so a job a notice requeued is not started from the list read
    before it."""
    report = report or TickReport()
    nodes = {n.node_id: n for n in provider.nodes(now)}
    todo = list(store.jobs(active_only=True))
    writes: list[Callable[[], None]] = []  # the batch: store writes, in order
    counts: list[Callable[[], None]] = []  # and what to count once they committed
    batch_began = time.monotonic()

    def commit() -> None:
        batch, counted_after = list(writes), list(counts)
        writes.clear()  # a batch that fails to commit is rolled back whole, not tried again
        counts.clear()
        if not batch:
            return
        with store.transaction():
            for write in batch:
                write()
        for count in counted_after:
            count()

    def started(job: Job) -> None:
        def write() -> None:
            store.put_job(replace(job, state=JobState.RUNNING, started_at_utc=now,
                                  first_started_at_utc=job.first_started_at_utc or now), now)
            store.record("start", now, job.job_id, nodes=list(job.node_ids))

        def count() -> None:
            report.started.append(job.job_id)
            if metrics and job.first_started_at_utc is None:  # the wait is submission to first start
                metrics.job_wait.observe(max(0.0, (now - job.submitted_at_utc).total_seconds()))
        writes.append(write)
        counts.append(count)

    def finished(job: Job) -> None:
        def write() -> None:
            store.put_job(replace(job, state=JobState.SUCCEEDED, checkpointed_work_hours=job.duration_hours), now)
            store.record("complete", now, job.job_id, nodes=list(job.node_ids))  # `events --for NODE` finds it
            left_behind(store, nodes, job, now)

        def count() -> None:
            report.completed.append(job.job_id)
            if metrics:
                metrics.completed.inc()
        writes.append(write)
        counts.append(count)

    i = 0
    try:
        while i < len(todo):
            if between is not None and between(commit):
                left = {j.job_id for j in todo[i:]}
                todo, i = [j for j in store.jobs(active_only=True) if j.job_id in left], 0
                nodes = {n.node_id: n for n in provider.nodes(now)}
                continue
            if not writes:
                batch_began = time.monotonic()
            job = todo[i]
            i += 1
            if job.state is JobState.BOUND and job.node_ids and all(
                nodes.get(n) is not None and nodes[n].state is NodeState.READY for n in job.node_ids
            ):
                runtime.start(job, job.node_ids, now)
                started(job)
            elif job.state is JobState.RUNNING:
                progress = runtime.progress(job, now)
                if progress.finished:
                    runtime.stop(job, now)
                    finished(job)
                elif progress.last_checkpoint_utc != job.last_checkpoint_utc:
                    writes.append(lambda job=job, at=progress.last_checkpoint_utc:
                                  store.put_job(replace(job, last_checkpoint_utc=at), now))
            if len(writes) >= ADVANCE_BATCH_JOBS or time.monotonic() - batch_began >= ADVANCE_BATCH_SECONDS:
                commit()
    except BaseException:
        commit()  # what the runtime was asked before the error is recorded; then the error
        raise
    commit()


def demand_by_model(jobs, nodes) -> dict[str, int]:  # noqa: ANN001 - Jobs and Nodes
    """GPUs demanded now (queued, bound and running jobs) per GPU model: the
    model of the node a job runs on, else the one model it asks for; jobs that
    accept several models and wait count under "any"."""
    where = {n.node_id: n.offer.instance_type.gpu_model for n in nodes}
    out: dict[str, int] = {}
    for job in jobs:
        if not job.state.active or not job.gpus:
            continue
        model = next((where[n] for n in job.node_ids if where.get(n)), None)
        if model is None:
            model = job.gpu_models[0] if len(job.gpu_models) == 1 else "any"
        out[model] = out.get(model, 0) + job.gpus
    return dict(sorted(out.items()))


def _count_applied(metrics: FleetMetrics | None, report: TickReport, applied: ApplyResult) -> None:
    """Count what one apply carried out and the store committed: the
    on-demand fallbacks among the nodes it bought, the jobs it migrated and
    preempted, and the checkpoints it asked for to move them.

    Design choice: counted from what was carried out, not from the plan. A
    tick may apply several plans (one re-planned after each capacity refusal)
    and stop on an error part-way (a termination refused after the job moves
    committed); what was done before a refusal or an error happened as much as
    what a plan applied whole did, which alone was counted. The next tick
    plans from the store, so it does not do (or count) it again."""
    report.checkpoints += applied.checkpoints
    if not metrics:
        return
    bought = sum(1 for _, reason in applied.launches if reason is Reason.ON_DEMAND_FALLBACK)
    for counter, n in ((metrics.fallbacks, bought), (metrics.migrations, len(applied.migrated)),
                       (metrics.preemptions, len(applied.preempted)), (metrics.checkpoints, applied.checkpoints)):
        if n:
            counter.inc(n)


#: When a tick under way stops at a safe point to handle reclaim notices: called at each safe point, it
#: returns the time to handle them at when some may wait (the daemon's notice pass found the tick holding
#: the loop's lock; ``reconcile --once``: every few seconds, ``notice_checks``), else None.
NoticeCheck = Callable[[], "datetime | None"]

#: Plans one tick makes again after notices handled part-way through one (``NoticesHandled``) before it
#: leaves the rest to the next tick (a storm of notices must not keep one tick re-planning for ever).
MAX_NOTICE_REPLANS_PER_TICK = 3


#: How often ``reconcile --once`` checks for reclaim notices during its tick: the daemon's default
#: interruptions interval (``fleetctl daemon --interruption-interval``).
ONCE_NOTICE_CHECK_SECONDS = 5.0


def notice_checks(every_seconds: float, clock: Callable[[], datetime],
                  monotonic: Callable[[], float] = time.monotonic) -> NoticeCheck:
    """A ``NoticeCheck`` that is due every ``every_seconds`` (of ``monotonic``
    time), at ``clock()``: what ``reconcile --once`` gives its tick, since no
    other pass can handle a notice while it holds the controller lease."""
    last = [monotonic()]

    def due() -> datetime | None:
        if monotonic() - last[0] < every_seconds:
            return None
        last[0] = monotonic()
        return clock()

    return due


def tick(*, store: Store, provider: Provider, runtime: Runtime, policy: Policy, now: datetime,
         forecast: Forecast | None = None, metrics: FleetMetrics | None = None,
         planner: Callable[..., Plan] = make_plan, refused_ttl: timedelta = REFUSED_OFFER_TTL,
         notices_due: NoticeCheck | None = None) -> TickReport:
    """One reconcile pass. Exceptions propagate: the caller (daemon, cron)
    decides what a failed tick means. Each step is one store transaction,
    except the plan's cloud calls: an ``ApplyError`` part-way lists the
    launches and terminations carried out (and recorded) before it. ``planner`` has the signature of
    ``fleetctl.planner.plan`` (the backtest swaps in the baselines' planners).
    ``refused_ttl``: how long an offer the cloud refused for capacity is left
    out (``observe``); a refusal mid-plan re-plans at once without it.

    ``notices_due`` (the daemon, ``reconcile --once``; never the simulator)
    lets reclaim notices cut into the tick: at each safe point it is asked,
    and when it answers a time, ``handle_interruptions`` runs there, at that
    time, in this pass (under its lease): the node cordoned, its jobs
    checkpointed and requeued, as at the start of a tick. The safe points are
    between the phases, before each job of ``advance_jobs``, after the plan is
    made and inside ``execute`` (before each launch, the job moves, each
    termination): never inside a store transaction, never between a plan's
    observation and its use. A notice handled after the observation makes the
    plan stale (it may bind a job to the node just cordoned, or move a job
    just requeued): the rest of it is dropped and the fleet observed and
    planned again (at most ``MAX_NOTICE_REPLANS_PER_TICK`` times; then the
    next tick plans)."""
    started = time.perf_counter()
    report = TickReport()

    def handle_waiting(first: Callable[[], None] | None = None) -> bool:
        """A safe point: handle the notices that wait, if ``notices_due`` says
        some may; True if any was handled (the store may have changed).
        ``first`` runs before they are handled (``advance_jobs`` commits the
        job transitions it has gathered)."""
        at = notices_due() if notices_due is not None else None
        if at is None:
            return False
        if first is not None:
            first()
        return handle_interruptions(store=store, provider=provider, runtime=runtime, policy=policy, now=at,
                                    forecast=forecast, metrics=metrics, report=report) > 0

    between = handle_waiting if notices_due is not None else None
    handle_interruptions(store=store, provider=provider, runtime=runtime, policy=policy, now=now, forecast=forecast,
                         metrics=metrics, report=report)
    handle_lost_nodes(store=store, provider=provider, runtime=runtime, policy=policy, now=now, forecast=forecast,
                      metrics=metrics, report=report)
    handle_waiting()
    apply_cancellations(store=store, provider=provider, runtime=runtime, now=now, report=report)
    advance_jobs(store=store, provider=provider, runtime=runtime, now=now, metrics=metrics, report=report,
                 between=between)
    handle_waiting()
    obs = observe(store, provider, now, refused_ttl)
    store.record_offers(obs.offers, now)  # the market history the interruption forecaster learns from
    store.record("demand", now, "", gpus=demand_by_model(obs.jobs, obs.nodes))  # ... and the demand forecaster
    refused: set[str] = set()
    replans = 0
    applied_plan = True  # False: notices cut into this tick's plans too often; the next tick plans
    while True:
        result = planner(now=now, queue=obs.jobs, fleet=obs.nodes, offers=obs.offers, forecast=forecast,
                         policy=policy, last_termination_utc=store.last_event_at("terminate"))
        report.plan = result
        if not result.has_changes:
            break
        try:
            if handle_waiting():  # while planning: the observation it was made from is stale
                raise NoticesHandled("reclaim notices were handled after the fleet was observed for this plan")
            applied = execute(result, store=store, provider=provider, now=now, plan_id=fingerprint(obs, policy),
                              runtime=runtime, between=between)
        except NoticesHandled as exc:
            _count_applied(metrics, report, exc.applied)  # done before the notices: the next plan starts from it
            report.replanned_after_notices += 1
            if replans >= MAX_NOTICE_REPLANS_PER_TICK:
                log.info("reclaim notices cut into %d plans of this tick; the next tick plans again", replans + 1)
                applied_plan = False
                break
            replans += 1
            obs = observe(store, provider, now, refused_ttl)
            continue
        except ApplyError as exc:
            _count_applied(metrics, report, exc.applied)  # done before the error: the next plan starts from it
            # The cloud refused an offer for capacity: plan again at once without it (at most once per
            # offer), from the fleet as it now is, as a controller retrying after an ICE error would.
            if (exc.refused_offer is None or exc.refused_offer in refused or refused_ttl <= timedelta(0)
                    or len(refused) >= MAX_REFUSED_PER_TICK):
                raise
            refused.add(exc.refused_offer)
            report.refused_offers.append(exc.refused_offer)
            obs = observe(store, provider, now, refused_ttl)
            continue
        _count_applied(metrics, report, applied)
        break
    if result.has_changes and applied_plan:
        store.record("plan_applied", now, "", summary=f"{len(result.actions)} actions",
                     usd_per_hour=result.usd_per_hour_after)
    settled = settle_launches(store, now)  # a dead process's launches: after any retry of them in this pass
    if settled:
        log.info("settled %d launch(es) a previous pass left open: %s", len(settled), ", ".join(settled))
    if metrics:
        metrics.observe_state(provider.nodes(now), store.jobs(active_only=True))
        metrics.tick_seconds.observe(time.perf_counter() - started)
    return report
