"""The human-readable counts of plan, apply, status and reconcile: "1 job", not "1 jobs"."""

from __future__ import annotations

import pytest

from fleetctl.model import Bind, Launch, Plan, Reason, Unplaced
from fleetctl.render import counted, render_text, summary_line
from tests.builders import offer


def _plan(binds: int, unplaced: int = 0) -> Plan:
    launch = Launch(offer(), ("new-1",), Reason.FITS_NEW_CAPACITY, "1 x g8")
    return Plan(
        actions=(launch,) + tuple(Bind(f"j{i}", ("new-1",), Reason.FITS_NEW_CAPACITY, "") for i in range(binds)),
        unplaced=tuple(Unplaced(f"w{i}", Reason.WAITING_FOR_CAPACITY, "cooldown") for i in range(unplaced)),
        usd_per_hour_before=0.0,
        usd_per_hour_after=10.0,
    )


@pytest.mark.parametrize(("binds", "words"), [(0, "0 jobs to bind"), (1, "1 job to bind"), (12, "12 jobs to bind")],
                         ids=["none", "one", "several"])
def test_the_plan_summary_counts_jobs_in_the_right_number(binds, words):
    assert summary_line(_plan(binds)) == f"Plan: 1 to launch, 0 to terminate, {words}. $/h 0.00 -> 10.00"


@pytest.mark.parametrize(("waiting", "words"), [(1, "1 job stays queued"), (2, "2 jobs stay queued")],
                         ids=["one", "several"])
def test_a_plan_that_only_waits_counts_the_waiting_jobs_in_the_right_number(waiting, words):
    empty = Plan((), tuple(Unplaced(f"w{i}", Reason.WAITING_FOR_CAPACITY, "cooldown") for i in range(waiting)),
                 1.0, 1.0)
    assert render_text(empty).startswith(f"No changes to make now; {words} (below).")


@pytest.mark.parametrize(("n", "noun", "plural", "expected"), [
    (0, "job", None, "0 jobs"), (1, "job", None, "1 job"), (2, "node", None, "2 nodes"),
    (1, "GPU", None, "1 GPU"), (3, "GPU", None, "3 GPUs"), (1, "notice", None, "1 notice"),
    (2, "child", "children", "2 children"),
], ids=["zero", "one", "two", "one-gpu", "gpus", "one-notice", "irregular"])
def test_counted(n, noun, plural, expected):
    assert counted(n, noun, plural) == expected
