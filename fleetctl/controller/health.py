"""The daemon's liveness and readiness, from the outcomes of its reconcile passes.

``GET /healthz`` (liveness) fails when no reconcile pass has *ended* for
longer than ``max_inactivity_seconds`` (counted from the daemon's start
before the first pass): the loop is wedged, a tick hung on a cloud call or a
lock, and a restart may help. A pass that ends counts whatever its outcome:
one that failed, or was skipped because another process holds the controller
lease, shows that the loop turns.

``GET /readyz`` (readiness) fails until the first pass succeeds, and when the
last success is older than ``max_failing_seconds``: the loop turns but its
passes keep failing (a cloud refusing every call, a broken store), which a
restart does not mend. A pass skipped because another process holds the lease
counts as a success here: a standby daemon is ready to take over.

Design choice: the same two rules as cluster-autoscaler's ``/health-check``
(``--max-inactivity``, ``--max-failing-time``), split over the two probes
Kubernetes has, as Karpenter serves them. The object only keeps times read
from a monotonic clock by its caller (``time.monotonic`` in the daemon) and
judges them at a given ``now``: it reads no clock itself, so tests give it
explicit times.
"""

from __future__ import annotations

import enum
import threading

#: Time a reconcile tick may take on top of ``--interval``: a slow cloud, or a notice pass checkpointing jobs
#: before a reclaim (a notice gives at most 2 minutes), which holds the loop's lock meanwhile. Ticks of 2,000
#: nodes take seconds (benchmarks/results/tick_history.md).
TICK_ALLOWANCE_SECONDS = 300.0


def default_max_inactivity_seconds(interval_seconds: float) -> float:
    """``--health-max-inactivity-seconds`` unless given: 10 minutes (cluster-autoscaler's
    ``--max-inactivity``), or three intervals and a slow tick when that is longer."""
    return max(600.0, 3 * interval_seconds + TICK_ALLOWANCE_SECONDS)


def default_max_failing_seconds(interval_seconds: float) -> float:
    """``--health-max-failing-seconds`` unless given: 15 minutes (cluster-autoscaler's
    ``--max-failing-time``), or five intervals and a slow tick when that is longer."""
    return max(900.0, 5 * interval_seconds + TICK_ALLOWANCE_SECONDS)


class PassOutcome(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"  # another process holds the controller lease


def _seconds(value: float) -> str:
    return f"{value:.0f} s"


class LoopHealth:
    """What the probes know of the reconcile passes: when the daemon started,
    when the pass under way started, when the last one ended, succeeded or was
    skipped, and how many failed since. The loop's thread records; the HTTP
    server's threads ask (``liveness``, ``readiness``), under one lock."""

    def __init__(self, *, started_at: float, max_inactivity_seconds: float, max_failing_seconds: float) -> None:
        self.started_at = started_at
        self.max_inactivity_seconds = max_inactivity_seconds
        self.max_failing_seconds = max_failing_seconds
        self._lock = threading.Lock()
        self._running_since: float | None = None  # a pass started and not ended
        self._last_ended: float | None = None
        self._last_succeeded: float | None = None
        self._last_skipped: float | None = None
        self._failed_since_good = 0  # failed passes since the last success or skip

    def pass_started(self, now: float) -> None:
        with self._lock:
            self._running_since = now

    def pass_ended(self, outcome: PassOutcome, now: float) -> None:
        with self._lock:
            self._running_since = None
            self._last_ended = now
            if outcome is PassOutcome.FAILED:
                self._failed_since_good += 1
                return
            self._failed_since_good = 0
            if outcome is PassOutcome.SUCCEEDED:
                self._last_succeeded = now
            else:
                self._last_skipped = now

    def liveness(self, now: float) -> tuple[bool, str]:
        """(True, what shows the loop turns), or (False, why not) when no pass
        has ended for more than ``max_inactivity_seconds``."""
        with self._lock:
            if self._last_ended is None:
                age = now - self.started_at
                if age <= self.max_inactivity_seconds:
                    return True, f"live: the daemon started {_seconds(age)} ago; no reconcile pass has ended yet"
                since = f"since the daemon started {_seconds(age)} ago"
            else:
                age = now - self._last_ended
                if age <= self.max_inactivity_seconds:
                    return True, f"live: the last reconcile pass ended {_seconds(age)} ago"
                since = f"for {_seconds(age)}"
            return False, (f"no reconcile pass has ended {since} (limit {_seconds(self.max_inactivity_seconds)}; "
                           f"{self._running(now)})")

    def readiness(self, now: float) -> tuple[bool, str]:
        """(True, the last success or skip), or (False, why not) before the
        first pass that succeeded or was skipped, and when the last one is
        older than ``max_failing_seconds``."""
        with self._lock:
            succeeded, skipped = self._last_succeeded, self._last_skipped
            if succeeded is None and skipped is None:
                return False, (f"no reconcile pass has succeeded since the daemon started "
                               f"{_seconds(now - self.started_at)} ago ({self._since_good(now)})")
            standing_by = skipped is not None and (succeeded is None or skipped > succeeded)
            age = now - (skipped if standing_by else succeeded)  # type: ignore[operator]  # that one is set
            if age > self.max_failing_seconds:
                what = "succeeded or stood by" if standing_by else "succeeded"
                return False, (f"no reconcile pass has {what} for {_seconds(age)} (limit "
                               f"{_seconds(self.max_failing_seconds)}; {self._since_good(now)})")
            if standing_by:
                ok = (f"ready: standing by (the last reconcile pass found the controller lease held by another "
                      f"process {_seconds(age)} ago)")
            else:
                ok = f"ready: the last reconcile pass succeeded {_seconds(age)} ago"
            failed = self._failed()
            return True, ok + (f"; {failed}" if failed else "")

    def _running(self, now: float) -> str:
        if self._running_since is None:
            return "no tick is running"
        return f"a tick started {_seconds(now - self._running_since)} ago is still running"

    def _failed(self) -> str:
        n = self._failed_since_good
        if n == 0:
            return ""
        return ("the one since failed" if n == 1 else f"the {n} since failed") + ": see the daemon's log"

    def _since_good(self, now: float) -> str:
        """What happened since the last success or skip (or the start): failed passes, a tick under way."""
        n = self._failed_since_good
        failed = "" if n == 0 else ("the last pass failed" if n == 1 else f"the last {n} passes failed")
        if self._running_since is None:
            return f"{failed}: see the daemon's log" if failed else "no tick is running"
        return (f"{failed}; " if failed else "") + self._running(now)
