"""fleetctl.controller.health: what /healthz and /readyz answer, from the
reconcile passes' outcomes at explicit times (seconds of a monotonic clock;
the daemon started at 0, liveness limit 600 s, readiness limit 900 s)."""

from __future__ import annotations

import pytest

from fleetctl.controller.health import (
    LoopHealth,
    PassOutcome,
    default_max_failing_seconds,
    default_max_inactivity_seconds,
)

OK, FAILED, SKIPPED = PassOutcome.SUCCEEDED, PassOutcome.FAILED, PassOutcome.SKIPPED


def health_after(*passes: tuple[float, float | None, PassOutcome | None]) -> LoopHealth:
    """A daemon started at 0 whose passes each (started, ended, outcome); ended None: still running."""
    health = LoopHealth(started_at=0.0, max_inactivity_seconds=600.0, max_failing_seconds=900.0)
    for started, ended, outcome in passes:
        health.pass_started(started)
        if ended is not None:
            health.pass_ended(outcome, ended)  # type: ignore[arg-type]
    return health


CASES = [
    pytest.param(
        (), 5.0,
        (True, "live: the daemon started 5 s ago; no reconcile pass has ended yet"),
        (False, "no reconcile pass has succeeded since the daemon started 5 s ago (no tick is running)"),
        id="before-the-first-pass"),
    pytest.param(
        ((1.0, None, None),), 600.0,
        (True, "live: the daemon started 600 s ago; no reconcile pass has ended yet"),  # not older than the limit
        (False, "no reconcile pass has succeeded since the daemon started 600 s ago "
                "(a tick started 599 s ago is still running)"),
        id="first-pass-running-at-the-limit"),
    pytest.param(
        ((1.0, None, None),), 640.0,
        (False, "no reconcile pass has ended since the daemon started 640 s ago "
                "(limit 600 s; a tick started 639 s ago is still running)"),
        (False, "no reconcile pass has succeeded since the daemon started 640 s ago "
                "(a tick started 639 s ago is still running)"),
        id="first-pass-hung"),
    pytest.param(
        ((1.0, 3.0, OK),), 10.0,
        (True, "live: the last reconcile pass ended 7 s ago"),
        (True, "ready: the last reconcile pass succeeded 7 s ago"),
        id="after-a-success"),
    pytest.param(
        ((1.0, 3.0, FAILED), (31.0, 32.0, FAILED)), 40.0,
        (True, "live: the last reconcile pass ended 8 s ago"),
        (False, "no reconcile pass has succeeded since the daemon started 40 s ago "
                "(the last 2 passes failed: see the daemon's log)"),
        id="failing-from-the-start"),
    pytest.param(
        ((1.0, 3.0, OK), (400.0, 401.0, FAILED), (800.0, 801.0, FAILED)), 850.0,
        (True, "live: the last reconcile pass ended 49 s ago"),
        (True, "ready: the last reconcile pass succeeded 847 s ago; the 2 since failed: see the daemon's log"),
        id="failing-within-the-limit"),
    pytest.param(
        ((1.0, 3.0, OK), (400.0, 401.0, FAILED), (800.0, 801.0, FAILED), (950.0, 951.0, FAILED)), 960.0,
        (True, "live: the last reconcile pass ended 9 s ago"),
        (False, "no reconcile pass has succeeded for 957 s (limit 900 s; the last 3 passes failed: see the daemon's log)"),
        id="failing-past-the-limit"),
    pytest.param(
        ((1.0, 3.0, OK), (400.0, 401.0, FAILED), (950.0, 951.0, FAILED), (980.0, 981.0, OK)), 990.0,
        (True, "live: the last reconcile pass ended 9 s ago"),
        (True, "ready: the last reconcile pass succeeded 9 s ago"),
        id="a-success-after-failing-resets"),
    pytest.param(
        ((1.0, 2.0, SKIPPED),), 10.0,
        (True, "live: the last reconcile pass ended 8 s ago"),
        (True, "ready: standing by (the last reconcile pass found the controller lease held by another process "
               "8 s ago)"),
        id="lease-held-elsewhere-is-ready"),
    pytest.param(
        ((1.0, 2.0, OK), (31.0, 32.0, SKIPPED)), 40.0,
        (True, "live: the last reconcile pass ended 8 s ago"),
        (True, "ready: standing by (the last reconcile pass found the controller lease held by another process "
               "8 s ago)"),
        id="standing-by-after-acting"),
    pytest.param(
        ((1.0, 2.0, SKIPPED), (31.0, 32.0, FAILED), (940.0, 941.0, FAILED)), 950.0,
        (True, "live: the last reconcile pass ended 9 s ago"),
        (False, "no reconcile pass has succeeded or stood by for 948 s (limit 900 s; the last 2 passes failed: "
                "see the daemon's log)"),
        id="failing-after-standing-by"),
    pytest.param(
        ((1.0, 3.0, OK), (10.0, None, None)), 640.0,
        (False, "no reconcile pass has ended for 637 s (limit 600 s; a tick started 630 s ago is still running)"),
        (True, "ready: the last reconcile pass succeeded 637 s ago"),
        id="hung-tick"),
    pytest.param(
        ((1.0, 3.0, OK), (10.0, None, None)), 1000.0,
        (False, "no reconcile pass has ended for 997 s (limit 600 s; a tick started 990 s ago is still running)"),
        (False, "no reconcile pass has succeeded for 997 s (limit 900 s; a tick started 990 s ago is still running)"),
        id="hung-tick-past-both-limits"),
    pytest.param(
        ((1.0, 3.0, OK), (30.0, 31.0, FAILED), (60.0, None, None)), 1000.0,
        (False, "no reconcile pass has ended for 969 s (limit 600 s; a tick started 940 s ago is still running)"),
        (False, "no reconcile pass has succeeded for 997 s (limit 900 s; the last pass failed; "
                "a tick started 940 s ago is still running)"),
        id="hung-after-a-failure"),
    pytest.param(
        ((1.0, 3.0, OK),), 700.0,
        (False, "no reconcile pass has ended for 697 s (limit 600 s; no tick is running)"),
        (True, "ready: the last reconcile pass succeeded 697 s ago"),
        id="no-tick-started-again"),
]


@pytest.mark.parametrize("passes, now, live, ready", CASES)
def test_liveness_and_readiness(passes, now, live, ready):
    health = health_after(*passes)
    assert health.liveness(now) == live
    assert health.readiness(now) == ready


@pytest.mark.parametrize("interval, inactivity, failing", [
    (30.0, 600.0, 900.0),  # the daemon's default --interval: cluster-autoscaler's 10 and 15 minutes
    (120.0, 660.0, 900.0),
    (600.0, 2100.0, 3300.0),  # three (five) intervals and a slow tick
    (86400.0, 259500.0, 432300.0),
], ids=["30s", "2min", "10min", "1day"])
def test_default_limits_scale_with_the_interval(interval, inactivity, failing):
    assert default_max_inactivity_seconds(interval) == inactivity
    assert default_max_failing_seconds(interval) == failing
