"""The daemon: apscheduler wiring around the plain tick functions.

* reconcile every ``interval_seconds`` (``max_instances=1, coalesce=True``: a
  slow tick is never run twice at once, and missed runs collapse into one);
* interruptions every ``interruption_seconds`` (reclaim notices cannot wait
  for the next reconcile: AWS gives two minutes, GCP and Azure 30 s);
* prices every ``price_seconds`` (offers re-read from the provider);
* with ``retain_days``, daily: the store's per-pass history older than that
  is deleted (``Store.prune``; a 30 s interval writes ~5,800 rows a day);
  with ``retain_finished_days``, the finished history older than that too
  (``Store.prune_finished``, in the same transaction, under the controller
  lease: a pass buying under a launch key never meets its chain half-deleted).

One lock serialises the three, so they never interleave on the store; the
reconcile and interruption passes also take the store's controller lease
(``fleetctl.controller.lease``) for their duration, so a cron ``reconcile
--once``, an ``apply`` or a second daemon on the same store never acts at the
same time (a pass that finds it held is skipped and logged; the next one
tries again).

Reclaim notices do not wait for a reconcile pass to end. A tick at 5,000
nodes took up to 44 s on the sandbox (starting thousands of jobs after a big
placement), longer than the 30 s GCP and Azure give; a notice that came just
after it started waited 42 s for the lock, and its jobs would have missed
their checkpoint (benchmarks/results/notice_latency.md). The notice pass never
waits for the lock: finding it taken, it sets ``notices_waiting`` and
returns, and the tick under way, which checks it at its safe points
(``reconcile.tick``'s ``notices_due``: between its phases, before each job it
starts or finishes, after planning, before each launch, the job moves and
each termination), handles the notices there, in its own thread, under its
own lock and lease: cordon, checkpoint, requeue, as the notice pass would.
A notice handled after the tick observed the fleet drops the rest of its plan
(made before it: it may bind a job to the node just cordoned) and the tick
plans again from the store, so nothing is bound to a cordoned node. A notice
now waits for the poll (``interruption_seconds``) plus the longest stretch
between two safe points: planning, or one plan's job moves (one store
transaction); measured at 5,000 nodes: at most 1.25 s after the poll, and
3.9 s without a safe point at worst (the first tick's plan).

Design choice: the tick yields to notices at safe points rather than a fast
path that checkpoints from the notice thread while the tick runs. The fast
path would need a second store handle and a thread-safe runtime, would run
beside a tick that may start or bind jobs on that very node, and would still
leave the cordon (the store's part) waiting for the tick; and it could not act
while a cron ``reconcile --once`` holds the lease. Yielding keeps one thread
acting on the store, the lease and the order the crash sweep checks, and
``reconcile --once`` gets the same checks, every few seconds
(``notice_checks``). Making the slow phase fast shortens ticks but bounds
nothing: a tick grows with the fleet, the stretch between safe points does
not grow with the jobs started. (It was made faster too: ``advance_jobs``
records job transitions in batches, one commit each, where it committed each
job; the safe point before each job stays, and commits the batch first when a
notice is to be handled.)

A tick
that fails is counted in ``fleetctl_tick_errors`` and logged with its error;
the loop goes on. The log shows a pass's traceback when it first fails and
whenever its error changes; the same error again (a state store or cloud API
down for minutes fails every pass alike) is one line with the count, and the
first success after failures says how many there were (``RepeatedFailures``). A tick refreshes the gauges when it succeeds; after one that
fails, and after a notice pass that handled a notice (or failed), the daemon
refreshes them from the store, so they follow what the store holds. Each
reconcile pass's outcome (succeeded, failed, or skipped for the lease) feeds
the daemon's ``/healthz`` and ``/readyz`` (``fleetctl.controller.health``);
the end of a pass that succeeded sets
``fleetctl_last_successful_tick_timestamp_seconds``.
``request_reload()`` (SIGHUP) has the policy file read again: a valid policy
is swapped in between passes, under the same lock, so every pass plans with
one policy whole; a file with errors, or one that changes what is read at
start only (:data:`READ_AT_START`), is refused and logged, and the daemon
goes on with the policy it has. ``stop()`` (SIGTERM, SIGINT) lets the current tick finish, and a retrain the
model it is refitting (a scikit-learn fit cannot be cut short): a stop during
a retrain waits for that refit, minutes on a long history, and starts no
other.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from dataclasses import fields
from datetime import datetime, timedelta, timezone
from typing import Callable

from apscheduler.schedulers.background import BackgroundScheduler

from fleetctl.controller.forecast import Forecaster, build_forecast
from fleetctl.controller.health import (
    LoopHealth,
    PassOutcome,
    default_max_failing_seconds,
    default_max_inactivity_seconds,
)
from fleetctl.controller.lease import Held, describe_holder, hold as hold_lease, holder_id
from fleetctl.controller.reconcile import handle_interruptions, tick
from fleetctl.controller.runtime import Runtime
from fleetctl.metrics import FleetMetrics
from fleetctl.model import Policy
from fleetctl.policy import READ_AT_START, PolicyFile
from fleetctl.policydiff import setting_changes, setting_lines
from fleetctl.render import PRUNED, PRUNED_FINISHED, deleted_text
from fleetctl.store import Store
from fleetctl.yamlerrors import MAX_FILE_BYTES, SpecError
from providers.base import Provider

log = logging.getLogger("fleetctl.daemon")

#: A host clock further than this from the PostgreSQL store's is logged (fleetctl_store_clock_offset_seconds).
CLOCK_OFFSET_WARN_SECONDS = 5.0


@dataclass
class LoopContext:
    store: Store
    provider: Provider
    runtime: Runtime
    policy: Policy
    metrics: FleetMetrics
    forecaster: Forecaster | None = None  # the trained models (forecasting.runtime); None: the policy's default risk

    @property
    def reclaims_within(self) -> timedelta:
        """How far back a pass reads reclaims: the planner avoids an offer for reclaimed_offer_ttl_minutes."""
        return timedelta(minutes=self.policy.reclaimed_offer_ttl_minutes)


#: Reads the policy file again (``fleetctl.policy.read_policy_file``); raises ``SpecError``.
PolicyReader = Callable[[], PolicyFile]


def changed_sections(old: Policy, new: Policy) -> list[str]:
    """The policy's top-level sections (fields) that differ, in their order."""
    return [f.name for f in fields(Policy) if getattr(old, f.name) != getattr(new, f.name)]


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def prune_history(store: Store, policy: Policy, now: datetime, days: float,
                  finished_days: float) -> tuple[dict[str, int], dict[str, int]]:
    """What `fleetctl prune` and the daemon's daily prune delete, in one
    transaction: the per-pass history older than ``days`` (``Store.prune``,
    keeping the notices within the policy's ``reclaimed_offer_ttl_minutes``,
    which the planner still reads) and the finished history older than
    ``finished_days`` (``Store.prune_finished``); 0 skips either. Returns the
    rows each deleted per table. The caller holds the controller lease when
    ``finished_days`` is set (a pass buying under a launch key must not meet
    its chain half-deleted)."""
    deleted: dict[str, int] = {}
    finished: dict[str, int] = {}
    with store.transaction():
        if days > 0:
            deleted = store.prune(now - timedelta(days=days),
                                  notices_before=now - timedelta(minutes=policy.reclaimed_offer_ttl_minutes))
        if finished_days > 0:
            finished = store.prune_finished(now - timedelta(days=finished_days))
    return deleted, finished


@dataclass
class _Failing:
    error: tuple[str, str]  # the exception's type and message
    times: int
    since: datetime


class RepeatedFailures:
    """The daemon's log of failed passes, one state per kind of pass
    (reconcile, notices, prices, ...). A failure is logged with its traceback
    the first time, and whenever the error differs from that kind's previous
    failure; the same error again is one line with the count and the time of
    the first (a state store or cloud API down for ten minutes failed each
    notice pass, every 5 s, with a 50-line traceback). The first success after
    a failure logs how many there were. Every failure is still counted in
    ``fleetctl_tick_errors``; this only shapes the log."""

    def __init__(self, logger: logging.Logger, clock: Callable[[], datetime]) -> None:
        self.log = logger
        self.clock = clock
        self.failing: dict[str, _Failing] = {}

    def failed(self, kind: str, message: str, *args: object) -> None:
        """Log the exception being handled (call it in an ``except`` block)."""
        exc = sys.exc_info()[1]
        error = (type(exc).__name__, str(exc))
        state = self.failing.get(kind)
        if state is None or state.error != error:
            self.failing[kind] = _Failing(error, 1 if state is None else state.times + 1,
                                          self.clock() if state is None else state.since)
            self.log.exception(message, *args)
            return
        state.times += 1
        text = " ".join(f"{error[0]}: {error[1]}".split())
        if len(text) > 300:
            text = text[:297] + "..."
        self.log.error(message + ": the same error again (%d failures in a row since %s; the traceback is "
                       "logged at the first): %s", *args, state.times, state.since.isoformat(), text)

    def succeeded(self, kind: str, message: str) -> None:
        """``message`` (what succeeded) is logged if ``kind`` had failed since its last success."""
        state = self.failing.pop(kind, None)
        if state is not None:
            self.log.info("%s again after %d failure%s in a row since %s", message, state.times,
                          "" if state.times == 1 else "s", state.since.isoformat())


class Daemon:
    def __init__(self, ctx: LoopContext, *, interval_seconds: float = 30.0, interruption_seconds: float = 5.0,
                 price_seconds: float = 3600.0, retrain_seconds: float = 0.0, retain_days: float = 0.0,
                 retain_finished_days: float = 0.0, clock: Callable[[], datetime] = _utcnow,
                 read_policy: PolicyReader | None = None, policy_file: PolicyFile | None = None,
                 policy_check_seconds: float = 0.0, health: LoopHealth | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.ctx = ctx
        self.clock = clock
        # /healthz and /readyz (fleetctl.controller.health): fed with each reconcile pass's outcome, at
        # ``monotonic`` times (the clock the health's start was read from)
        self.monotonic = monotonic
        self.health = health or LoopHealth(started_at=monotonic(),
                                           max_inactivity_seconds=default_max_inactivity_seconds(interval_seconds),
                                           max_failing_seconds=default_max_failing_seconds(interval_seconds))
        self.lock = threading.Lock()
        self.read_policy = read_policy  # None: no file to read again (request_reload logs so)
        self.policy_file = policy_file  # the version of the file ctx.policy was read from
        self.reload_requested = threading.Event()  # set by SIGHUP; the main thread's loop reloads
        self.policy_check_seconds = policy_check_seconds  # 0: only on SIGHUP
        self._seen_digest: str | None = None  # the file's digest at the last look
        self._refused_digest: str | None = None  # the version of the file last refused
        if policy_file is not None:
            ctx.metrics.observe_policy(policy_file.sha256)
        self.holder = holder_id()
        self.standing_by: str | None = None  # who held the lease when a pass last found it taken
        self.stopped = threading.Event()
        # Set by a notice pass that found the lock taken: the reconcile pass under way handles the notices at
        # its next safe point (``reconcile.tick``'s ``notices_due``) instead of making them wait for its end.
        self.notices_waiting = threading.Event()
        self.ticks = 0
        self.failures = RepeatedFailures(log, clock)
        self.clock_off = False  # this host's clock was off the store's at the last look
        # The last reconcile pass's forecast: the interruptions pass (every few seconds) reuses it
        # instead of rebuilding it from the store each time (seconds on a large market, under the lock).
        self.last_forecast = None
        self.scheduler = BackgroundScheduler(timezone=timezone.utc)
        common = dict(max_instances=1, coalesce=True, next_run_time=datetime.now(timezone.utc))
        self.scheduler.add_job(self.reconcile, "interval", seconds=interval_seconds, id="reconcile", **common)
        self.scheduler.add_job(self.interruptions, "interval", seconds=interruption_seconds, id="interruptions", **common)
        self.scheduler.add_job(self.prices, "interval", seconds=price_seconds, id="prices", **common)
        self.retain_days = retain_days
        self.retain_finished_days = retain_finished_days
        if retain_days > 0 or retain_finished_days > 0:  # the store's history, pruned daily (fleetctl prune)
            self.scheduler.add_job(self.prune, "interval", hours=24, id="prune", **common)
        if retrain_seconds > 0 and hasattr(ctx.forecaster, "retrain"):
            self.scheduler.add_job(self.retrain, "interval", seconds=retrain_seconds, id="retrain",
                                   max_instances=1, coalesce=True)
            for model in ctx.forecaster.models:  # type: ignore[union-attr]
                ctx.metrics.last_retrain.labels(model).set(0)  # 0 until a refit replaces it (alert on the age)

    @contextmanager
    def _leased(self) -> Iterator[bool]:
        """The store's controller lease for one pass: True while held (released
        after the pass), False when another process holds it (the pass is skipped)."""
        lease = self._take_lease()
        if lease is None:
            yield False
            return
        try:
            yield True
        finally:
            lease.release()

    def _take_lease(self) -> Held | None:
        """Take the store's controller lease for one pass; None (logged once
        per holder) while another process holds it."""
        got = hold_lease(self.ctx.store, self.holder)
        self.ctx.metrics.lease_held.set(1 if isinstance(got, Held) else 0)
        if isinstance(got, Held):
            if self.standing_by is not None:
                log.info("controller lease taken: acting on the store again")
                self.standing_by = None
            return got
        if self.standing_by != got[0]:
            log.info("another process acts on this store (%s, lease %.0f s more): this daemon stands by",
                     describe_holder(got[0]), got[1])
            self.standing_by = got[0]
        return None

    def _observe_clock_offset(self) -> None:
        """``fleetctl_store_clock_offset_seconds``, and a warning when this host's clock leaves the
        store's by more than ``CLOCK_OFFSET_WARN_SECONDS`` (once, and once when it is back in step)."""
        offset = self.ctx.store.clock_offset_seconds()
        self.ctx.metrics.clock_offset.set(offset or 0.0)
        off = offset is not None and abs(offset) > CLOCK_OFFSET_WARN_SECONDS
        if off and not self.clock_off:
            log.warning("this host's clock is %.1f s %s the state store's (PostgreSQL): the times this daemon "
                        "records (idle timers, checkpoints, notices) disagree with other hosts'; keep the hosts' "
                        "clocks in step (NTP)", abs(offset), "ahead of" if offset > 0 else "behind")
        elif self.clock_off and not off:
            log.info("this host's clock is back in step with the state store's (%+.1f s)", offset or 0.0)
        self.clock_off = off

    def reconcile(self) -> None:
        self.health.pass_started(self.monotonic())  # before the lock: a pass waiting for it has not ended
        with self.lock:
            if self.stopped.is_set():
                return
            now = self.clock()
            acted = False
            try:
                self._observe_clock_offset()
                with self._leased() as held:
                    if not held:
                        self.health.pass_ended(PassOutcome.SKIPPED, self.monotonic())
                        return
                    acted = True
                    forecast = build_forecast(self.ctx.store, now, self.ctx.forecaster,
                                              reclaims_within=self.ctx.reclaims_within)
                    self.last_forecast = forecast
                    self.notices_waiting.clear()  # the tick's first step handles every notice stored by now
                    report = tick(store=self.ctx.store, provider=self.ctx.provider, runtime=self.ctx.runtime,
                                  policy=self.ctx.policy, now=now, metrics=self.ctx.metrics, forecast=forecast,
                                  notices_due=self._notices_due)
            except Exception:  # the tick boundary: count, log (with the traceback when new), go on
                self.ctx.metrics.tick_errors.inc()
                self.failures.failed("reconcile", "reconcile tick failed at %s", now.isoformat())
                if acted:  # a tick refreshes the gauges only when it succeeds; what it did before failing is stored
                    self._refresh_gauges("a failed reconcile tick")
                self.health.pass_ended(PassOutcome.FAILED, self.monotonic())
                return
            self.ticks += 1
            self.ctx.metrics.last_successful_tick.set(self.clock().timestamp())
            self.health.pass_ended(PassOutcome.SUCCEEDED, self.monotonic())
            self.failures.succeeded("reconcile", "a reconcile tick succeeded")
            self.failures.succeeded("gauges", "refreshing the gauges (by a reconcile tick) succeeded")  # tick did
            log.info("tick %d: %s", self.ticks, report.summary())

    def _notices_due(self) -> datetime | None:
        """The tick's ``notices_due``: now, once a notice pass asked for the
        notices to be handled while the tick held the lock; else None."""
        if not self.notices_waiting.is_set():
            return None
        self.notices_waiting.clear()  # before handling: a pass asking meanwhile is served at the next safe point
        return self.clock()

    def interruptions(self) -> None:
        """The notice pass (every ``interruption_seconds``). It never waits
        for the lock: while another pass holds it, it asks the reconcile pass
        under way to handle the notices at its next safe point
        (``notices_waiting``) and returns; the scheduler calls it again at its
        next interval (a pass still waiting for the lock made apscheduler skip
        those, so notices that came later in a long tick waited for its end)."""
        if not self.lock.acquire(blocking=False):
            self.notices_waiting.set()
            return
        try:
            self._interruptions_locked()
        finally:
            self.lock.release()

    def _interruptions_locked(self) -> None:
        if self.stopped.is_set():
            return
        changed = False  # the store changed: a notice handled (a node cordoned, jobs requeued)
        try:
            with self._leased() as held:
                if not held:
                    return
                now = self.clock()
                forecast = self.last_forecast
                if forecast is None:
                    forecast = self.last_forecast = build_forecast(self.ctx.store, now, self.ctx.forecaster,
                                                                   reclaims_within=self.ctx.reclaims_within)
                changed = True  # until it says otherwise: a pass that fails may have handled notices first
                changed = handle_interruptions(
                    store=self.ctx.store, provider=self.ctx.provider, runtime=self.ctx.runtime,
                    policy=self.ctx.policy, now=now, metrics=self.ctx.metrics, forecast=forecast) > 0
            self.failures.succeeded("interruptions", "interruption handling succeeded")
        except Exception:  # the tick boundary, as above
            self.ctx.metrics.tick_errors.inc()
            self.failures.failed("interruptions", "interruption handling failed")
        if changed:
            self._refresh_gauges("a notice pass")

    def _refresh_gauges(self, after: str) -> None:
        """The fleet gauges from what the store holds now, after a pass that
        changed it without refreshing them (a notice pass, a failed tick). A
        failure here is logged and counted, never raised: it must not hide or
        replace the pass's own error, which was logged first."""
        try:
            self.ctx.metrics.observe_state(self.ctx.store.nodes(), self.ctx.store.jobs(active_only=True))
            self.failures.succeeded("gauges", "refreshing the gauges succeeded")
        except Exception:  # the tick boundary, as above
            self.ctx.metrics.tick_errors.inc()
            self.failures.failed("gauges", "refreshing the gauges after %s failed", after)

    def prices(self) -> None:
        with self.lock:
            try:
                offers = self.ctx.provider.offers(self.clock())
                self.failures.succeeded("prices", "a price refresh succeeded")
                log.info("prices: %d offers", len(offers))
            except Exception:  # the tick boundary, as above
                self.ctx.metrics.tick_errors.inc()
                self.failures.failed("prices", "price refresh failed")

    def prune(self) -> None:
        with self.lock:
            if self.stopped.is_set():
                return
            try:
                with self._leased() if self.retain_finished_days > 0 else nullcontext(True) as held:
                    if not held:  # the holder's daemon prunes, if it is told to; else the next day's run
                        log.info("pruning skipped: another process acts on the store")
                        return
                    deleted, finished = prune_history(self.ctx.store, self.ctx.policy, self.clock(),
                                                      self.retain_days, self.retain_finished_days)
                if self.retain_days > 0:  # in the words `fleetctl prune` prints
                    log.info("pruned history older than %g days: %s", self.retain_days, deleted_text(deleted, PRUNED))
                if self.retain_finished_days > 0:
                    log.info("pruned finished history older than %g days: %s", self.retain_finished_days,
                             deleted_text(finished, PRUNED_FINISHED))
            except Exception:  # the tick boundary, as above
                self.ctx.metrics.tick_errors.inc()
                log.exception("pruning the store failed")

    def retrain(self) -> None:
        """Refit the forecaster's models on what the store recorded (daily by default).

        Fitting takes minutes and must not hold up reclaim handling (a notice
        gives 30 s to 2 min), so it runs without the loop's lock, reading
        through its own connection to the store; only the finished model is
        swapped in (one reference assignment). An in-memory store cannot be
        opened twice, so there it runs under the lock."""
        if self.stopped.is_set():
            return
        url = self.ctx.store.url
        if ":memory:" in url or url.rstrip("/") in ("sqlite:", "sqlite:/"):
            with self.lock:
                self._retrain_with(self.ctx.store)
            return
        try:
            store = Store(url)
        except Exception:  # the tick boundary, as above
            self.ctx.metrics.tick_errors.inc()
            log.exception("forecaster retraining could not open the store")
            return
        try:
            self._retrain_with(store)
        finally:
            store.close()

    def _retrain_with(self, store: Store) -> None:
        forecaster = self.ctx.forecaster
        for model in forecaster.models:  # type: ignore[union-attr]
            if self.stopped.is_set():
                return
            now = self.clock()
            try:
                adopted = forecaster.retrain(store, now, model)  # type: ignore[union-attr]
            except Exception:  # the tick boundary, as above; the other model is still refitted
                self.ctx.metrics.tick_errors.inc()
                self.ctx.metrics.retrains.labels(model, "failed").inc()
                log.exception("forecaster retraining failed (%s model)", model)
                continue
            self.ctx.metrics.retrains.labels(model, "adopted" if adopted else "kept").inc()
            if adopted:
                self.ctx.metrics.last_retrain.labels(model).set(now.timestamp())

    def request_reload(self) -> None:
        """Ask for the policy file to be read again (safe in a signal handler:
        ``run_until_stopped`` does the reading, in the main thread)."""
        self.reload_requested.set()

    def reload_policy(self) -> str:
        """Read the policy file again and swap it in between passes. Returns the
        outcome counted in ``fleetctl_policy_reloads_total``: ``applied`` (each
        changed setting logged, as ``fleetctl policy diff`` prints it),
        ``unchanged``, ``invalid`` (errors in the file: each logged as
        FILE:LINE:COLUMN) or ``refused`` (it changes :data:`READ_AT_START`).
        Anything but ``applied`` leaves the running policy as it was."""
        if self.read_policy is None:
            log.warning("SIGHUP: this daemon has no policy file to read again; the policy is unchanged")
            return self._reloaded("refused")
        running = self.policy_file.sha256[:12] if self.policy_file is not None else "unknown"
        try:
            new = self.read_policy()
        except SpecError as exc:
            for issue in exc.issues:
                log.error("policy reload: %s", issue)
            log.error("policy reload refused: %d error(s) in the file; still planning with the policy read before "
                      "(sha256 %s)", len(exc.issues), running)
            return self._reloaded("invalid")
        source = new.document.file
        with self.lock:  # between passes: every pass plans with one policy, whole
            fixed = [name for name in changed_sections(self.ctx.policy, new.policy) if name in READ_AT_START]
            if fixed:
                log.error("policy reload refused: %s changes %s, which the daemon reads at start only (its cloud "
                          "adapters are built from it); nothing of it is applied: restart the daemon to use it "
                          "(still planning with sha256 %s)", source, " and ".join(fixed), running)
                return self._reloaded("refused")
            changes = (setting_changes(self.policy_file.spec, new.document, new.spec)
                       if self.policy_file is not None else None)
            self.ctx.policy = new.policy
            self.last_forecast = None  # the interruptions pass rebuilds it with the new policy's settings
            self.policy_file = new
        self.ctx.metrics.observe_policy(new.sha256)
        if changes == ():
            log.info("policy reload: %s has no setting changed (sha256 %s)", source, new.sha256[:12])
            return self._reloaded("unchanged")
        said = "" if changes is None else f": {len(changes)} setting{'' if len(changes) == 1 else 's'} changed"
        log.info("policy reloaded from %s (sha256 %s)%s; the next pass plans with it", source, new.sha256[:12], said)
        for line in setting_lines(changes or (), source):
            log.info("policy reload: %s", line.strip())
        return self._reloaded("applied")

    def _reloaded(self, outcome: str) -> str:
        self.ctx.metrics.policy_reloads.labels(outcome).inc()
        return outcome

    def start(self) -> None:
        self.scheduler.start()

    def stop(self) -> None:
        """Stop after the current tick (waits for it, and for the model refit
        under way if a retrain runs; the next model is not started), then return."""
        self.stopped.set()
        self.scheduler.shutdown(wait=True)

    def policy_file_changed(self) -> bool:
        """Whether the policy file's bytes differ from the version the daemon
        runs and from the version it last refused (so a file with errors is
        reported once, not at every check). A file that cannot be read counts
        as changed (the reload then says why)."""
        if self.policy_file is None or self.read_policy is None:
            return False
        try:
            with open(self.policy_file.document.file, "rb") as fh:
                digest = hashlib.sha256(fh.read(MAX_FILE_BYTES + 1)).hexdigest()
        except OSError as exc:
            digest = f"unreadable: {exc.strerror or exc}"
        self._seen_digest = digest
        if digest == self.policy_file.sha256:
            self._refused_digest = None  # back at the version running: a refused one is news again
            return False
        return digest != self._refused_digest

    def _reload_guarded(self, why: str) -> None:
        """``reload_policy`` at the loop's boundary: an error of fleetctl's is
        logged and counted, and the daemon goes on with the policy it has."""
        log.info("%s: reading the policy file again", why)
        try:
            outcome = self.reload_policy()
        except Exception:  # the tick boundary, as above: the loop goes on with the policy it has
            self.ctx.metrics.tick_errors.inc()
            outcome = self._reloaded("failed")
            log.exception("policy reload failed; still planning with the policy read before")
        # the version refused is not tried again by --policy-check-seconds until the file changes again
        self._refused_digest = self._seen_digest if outcome in ("invalid", "refused", "failed") else None

    def run_until_stopped(self, poll_seconds: float = 0.2) -> None:
        self.start()
        next_check = time.monotonic() + self.policy_check_seconds
        try:
            while not self.stopped.is_set():
                if self.reload_requested.is_set():
                    self.reload_requested.clear()
                    self.policy_file_changed()  # notes the version read, for the refusal memo
                    self._reload_guarded("SIGHUP")
                elif self.policy_check_seconds and time.monotonic() >= next_check:
                    next_check = time.monotonic() + self.policy_check_seconds
                    if self.policy_file_changed():
                        self._reload_guarded(f"the policy file {self.policy_file.document.file} changed")
                time.sleep(poll_seconds)
        finally:
            if self.scheduler.running:
                self.scheduler.shutdown(wait=True)
