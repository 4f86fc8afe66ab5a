"""Rules that must hold across the steps of one pass: what one step decides
(a placement, a move, a purchase) is seen by the steps after it, and every
purchase path keeps the policy's caps. One named case each."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import JobState, Market, PriorityClass
from fleetctl.planner import plan
from tests.builders import T0, job, node, offer, policy


def run(queue=(), fleet=(), offers=(), pol=None, forecast=None, now=T0):
    return plan(now=now, queue=tuple(queue), fleet=tuple(fleet), offers=tuple(offers), forecast=forecast,
                policy=pol or policy())


def running(j, *node_ids, started=T0 - timedelta(hours=1)):
    return replace(j, state=JobState.RUNNING, node_ids=tuple(node_ids), started_at_utc=started)


def binds(p):
    return {b.job_id: b.node_ids for b in p.of_kind("bind")}


HIGH = (PriorityClass("high", 500), PriorityClass("batch", 100))


# ----------------------------------------------------------------------------- preemption

def case_a_job_placed_again_in_this_pass_is_never_preempted():
    # "req"'s node is gone: it goes back to the queue and is bound to n1 (4 of 8 GPUs, beside "small").
    # "high" then needs all 8: preempting "req" as well would put 12 GPUs of work on an 8-GPU node.
    n1 = node("n1", offer("g8"))
    small = running(job("small", gpus=1, team="c"), "n1")
    req = replace(running(job("req", gpus=4, team="a"), "gone-node"), priority_boost=500.0)
    high = job("high", gpus=8, priority="high", team="b")
    p = run(queue=[small, req, high], fleet=[n1], pol=policy(priority_classes=HIGH))
    assert binds(p) == {"req": ("n1",)}
    assert not p.of_kind("preempt")
    assert [u.job_id for u in p.unplaced] == ["high"]


CASES = {name[5:]: fn for name, fn in sorted(globals().items()) if name.startswith("case_")}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_rule(case):
    case()
