"""Preemption, admission and the guarantees on small hand-built fleets (docs/planner.md, steps 4 and 5):
who may be taken, on which node, and what refuses a purchase first."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import JobState, Market, NodeState, PriorityClass, Reason, Team
from fleetctl.planner import plan
from tests.builders import T0, job, node, offer, policy
from tests.planner.test_planner_rules import binds, bound, sixteen_busy_zones, unplaced


def run(queue=(), fleet=(), offers=(), pol=None, now=T0):
    return plan(now=now, queue=tuple(queue), fleet=tuple(fleet), offers=tuple(offers), forecast=None,
                policy=pol or policy())




def preempts(p):
    return sorted((pre.job_id, pre.by_job_id) for pre in p.of_kind("preempt"))


# production 1000 (not preemptible) > high 500 > batch 100, both preemptible
CLASSES = (PriorityClass("production", 1000, preemptible=False, spot_eligible=False),
           PriorityClass("high", 500, preemptible=True), PriorityClass("batch", 100, preemptible=True))
# no team holds a guarantee: no job claims one, so only a lower class is ever taken
NO_CLAIMS = policy(priority_classes=CLASSES, teams=(Team("a"), Team("b"), Team("c")))

CPU = offer("c4", gpus=0, model=None, vcpus=4, memory_gib=16, market=Market.ON_DEMAND, price=1.0)


def test_a_cpu_only_job_preempts_where_the_room_is_exactly_its_need():
    # No GPU anywhere, and half a vCPU and half a GiB free once b goes: the job needs 0 GPUs, 0.5 vCPU and
    # 0.5 GiB, which the room holds exactly (nothing to buy: no offer).
    prod_run = bound(job("prod-run", gpus=0, vcpus=3.5, memory_gib=15.5, priority="production"), "c1")
    victim = bound(job("b", gpus=0, vcpus=0.5, memory_gib=0.5), "c1")
    prod = job("prod", gpus=0, vcpus=0.5, memory_gib=0.5, priority="production")
    p = run(queue=[prod_run, victim, prod], fleet=[node("c1", CPU)])
    assert preempts(p) == [("b", "prod")] and binds(p) == {"prod": ("c1",)}


def test_preemption_never_places_the_job_on_a_draining_node():
    # b1 on the draining n1 loses least (6 minutes against b2's hour) and n1 sorts first, but a draining
    # node takes no new work: prod preempts b2 on n2. With n2 gone, it preempts nobody.
    fleet = [node("n1", state=NodeState.DRAINING), node("n2")]
    b1 = bound(job("b1", gpus=8), "n1", started=T0 - timedelta(minutes=6))
    b2 = bound(job("b2", gpus=8), "n2", started=T0 - timedelta(hours=1))
    prod = job("prod", gpus=8, priority="production", spot=True)
    p = run(queue=[b1, b2, prod], fleet=fleet)
    assert preempts(p) == [("b2", "prod")] and binds(p) == {"prod": ("n2",)}
    p = run(queue=[b1, prod], fleet=fleet[:1])
    assert not p.of_kind("preempt") and "prod" in unplaced(p)


def test_a_job_takes_a_lower_class_only_never_its_own_beside_it():
    # n1: b1 (batch, 4 GPUs) and h1 (high, 4 GPUs), both preemptible; a high job of 8 GPUs would need both
    # gone, but h1 is of its own class: nobody is preempted. With h1 batch too, both go.
    fleet = [node("n1")]
    b1 = bound(job("b1", gpus=4, team="b"), "n1")
    h1 = bound(job("h1", gpus=4, team="b", priority="high"), "n1")
    high = job("high", gpus=8, priority="high")
    p = run(queue=[b1, h1, high], fleet=fleet, pol=NO_CLAIMS)
    assert not p.of_kind("preempt") and "high" in unplaced(p)
    p = run(queue=[b1, replace(h1, priority="batch"), high], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b1", "high"), ("h1", "high")] and binds(p) == {"high": ("n1",)}
    assert not p.unplaced  # placed by preemption: not also reported waiting
    # a high job of 4 GPUs takes b1 beside h1
    p = run(queue=[b1, h1, replace(high, gpus_per_worker=4)], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b1", "high")] and binds(p) == {"high": ("n1",)}


def test_the_node_with_the_best_key_wins_over_one_asked_after_it():
    # Victims are taken checkpointable first. n1 is asked first (r1 there lost 6 minutes) and gives up c1,
    # 2 h lost; n2 is asked next (r2 lost 30 minutes, under n1's 2 h) and would give up c2, 3 h lost:
    # n1 keeps the job.
    fleet = [node("n1"), node("n2")]
    running = [replace(bound(job("c1", gpus=4, team="b"), "n1", started=T0 - timedelta(hours=3),
                             checkpoint=T0 - timedelta(hours=2)), checkpointable=True),
               bound(job("r1", gpus=4, team="b"), "n1", started=T0 - timedelta(minutes=6)),
               replace(bound(job("c2", gpus=4, team="b"), "n2", started=T0 - timedelta(hours=4),
                             checkpoint=T0 - timedelta(hours=3)), checkpointable=True),
               bound(job("r2", gpus=4, team="b"), "n2", started=T0 - timedelta(minutes=30))]
    prod = job("prod", gpus=4, priority="high")
    p = run(queue=[*running, prod], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("c1", "prod")] and binds(p) == {"prod": ("n1",)}


def claims_policy(b_guarantee=4, a_guarantee=8):
    """Team a holds a guarantee (8 GPUs) and uses none: an 8-GPU job or smaller of a claims it."""
    return policy(priority_classes=CLASSES, teams=(Team("a", guaranteed_gpus=a_guarantee),
                                                   Team("b", guaranteed_gpus=b_guarantee), Team("c")))


def test_a_claim_takes_borrowed_work_of_its_own_class_or_lower_only():
    # b (no guarantee) borrows 8 GPUs with a job of class high: a's batch job claims a's guarantee, but a
    # claim takes only work of its own class or lower. The same job as batch is taken.
    fleet = [node("n1")]
    borrowed = bound(job("b-high", gpus=8, team="b", priority="high"), "n1")
    a_job = job("a-job", gpus=8, team="a")
    p = run(queue=[borrowed, a_job], fleet=fleet, pol=claims_policy(b_guarantee=0))
    assert not p.of_kind("preempt") and "a-job" in unplaced(p)
    p = run(queue=[replace(borrowed, priority="batch"), a_job], fleet=fleet, pol=claims_policy(b_guarantee=0))
    (pre,) = p.of_kind("preempt")
    assert (pre.job_id, pre.by_job_id, pre.reason) == ("b-high", "a-job", Reason.PREEMPTED_FOR_GUARANTEE)
    assert pre.detail == ("makes room on n1 for a-job (batch, team a within its guaranteed GPUs; b is above its "
                          "own); not checkpointable: loses 1.00 h of work")
    assert binds(p) == {"a-job": ("n1",)} and not p.unplaced


def test_a_claim_skips_work_whose_team_it_would_take_below_its_guarantee_for_other_work_there():
    # n1 (16 GPUs): b-cp (b's 4 GPUs, checkpointable: taken first if it may be) and c-raw (c's 4 GPUs, no
    # guarantee) beside 8 GPUs of production. b uses exactly its guarantee of 4, so a's claim may not take
    # b-cp; nor its own team's a-cp (a claims only other teams' work): it takes c-raw.
    fleet = [node("n1", offer("g16", gpus=16))]
    running = [replace(bound(job("b-cp", gpus=4, team="b"), "n1", checkpoint=T0 - timedelta(minutes=5)),
                       checkpointable=True),
               bound(job("c-raw", gpus=4, team="c"), "n1"),
               bound(job("prod", gpus=8, team="c", priority="production", spot=True), "n1")]
    a_job = job("a-job", gpus=4, team="a")
    p = run(queue=[*running, a_job], fleet=fleet, pol=claims_policy(b_guarantee=4))
    assert preempts(p) == [("c-raw", "a-job")] and binds(p) == {"a-job": ("n1",)}
    # b's job as a's own: a uses 4 of its 8, and the 4 more are within it, but its own work is no victim
    own = replace(running[0], job_id="a-cp", team="a")
    p = run(queue=[own, *running[1:], a_job], fleet=fleet, pol=claims_policy(b_guarantee=4))
    assert preempts(p) == [("c-raw", "a-job")] and binds(p) == {"a-job": ("n1",)}


def test_a_claim_keeps_each_lending_team_at_its_guarantee_counting_all_its_victims_together():
    # b (guarantee 4) runs two 4-GPU jobs on n1: either alone leaves it at 4, both take it to 0. a's 8-GPU
    # job would need both: refused. With b's guarantee 0 both go.
    fleet = [node("n1")]
    running = [bound(job("b1", gpus=4, team="b"), "n1"), bound(job("b2", gpus=4, team="b"), "n1")]
    a_job = job("a-job", gpus=8, team="a")
    p = run(queue=[*running, a_job], fleet=fleet, pol=claims_policy(b_guarantee=4))
    assert not p.of_kind("preempt") and "a-job" in unplaced(p)
    p = run(queue=[*running, a_job], fleet=fleet, pol=claims_policy(b_guarantee=0))
    assert preempts(p) == [("b1", "a-job"), ("b2", "a-job")]
    # by one GPU: b (guarantee 1) runs 4 + 1 GPUs beside 3 of production; either alone leaves it at 1 or
    # more, both at 0, and a's 5-GPU job needs both
    running = [bound(job("b1", gpus=4, team="b"), "n1"), bound(job("b2", gpus=1, team="b"), "n1"),
               bound(job("p", gpus=3, team="c", priority="production", spot=True), "n1")]
    p = run(queue=[*running, job("a-job", gpus=5, team="a")], fleet=fleet, pol=claims_policy(b_guarantee=1))
    assert not p.of_kind("preempt") and "a-job" in unplaced(p)


def test_a_gang_claim_keeps_each_lending_team_at_its_guarantee_counting_all_its_victims_together():
    # The same across two nodes of one zone: a gang of 2 x 4 GPUs needs b1 on n1 and b2 on n2 gone (the other
    # half of each node runs production work); b would fall from 8 to 0 GPUs, below its 4.
    fleet = [node("n1"), node("n2")]
    running = [bound(job("b1", gpus=4, team="b"), "n1"), bound(job("b2", gpus=4, team="b"), "n2"),
               bound(job("p1", gpus=4, team="c", priority="production", spot=True), "n1"),
               bound(job("p2", gpus=4, team="c", priority="production", spot=True), "n2")]
    gang = job("gang", workers=2, gpus=4, team="a")
    p = run(queue=[*running, gang], fleet=fleet, pol=claims_policy(b_guarantee=4))
    assert not p.of_kind("preempt") and "gang" in unplaced(p)
    p = run(queue=[*running, gang], fleet=fleet, pol=claims_policy(b_guarantee=0))
    assert preempts(p) == [("b1", "gang"), ("b2", "gang")] and sorted(binds(p)["gang"]) == ["n1", "n2"]
    assert not p.unplaced


def cpu_job(job_id, team, state=JobState.QUEUED):
    j = job(job_id, gpus=0, vcpus=4, memory_gib=8, team=team)
    if state is JobState.RUNNING:
        j = bound(j, "c1")
    return j


def test_a_cpu_only_job_never_preempts_its_own_teams_work_of_its_class():
    # Team a has no guarantee and uses no GPUs: a CPU-only job of a is 'within' it (0 + 0 <= 0), but a
    # guarantee only takes other teams' work. The node is full with a's own job: a-2 waits.
    pol = policy(teams=(Team("a"),))
    p = run(queue=[cpu_job("a-1", "a", JobState.RUNNING), cpu_job("a-2", "a")], fleet=[node("c1", CPU)], pol=pol)
    assert not p.of_kind("preempt") and "a-2" in unplaced(p)


def test_cpu_only_jobs_of_teams_without_guarantees_do_not_preempt_each_other():
    # Before the fix a CPU-only job counted as within its team's guaranteed GPUs when the team had none
    # (0 + 0 <= 0), and another team's CPU-only job as borrowed work (0 - 0 >= 0): two teams without
    # guarantees preempted each other's CPU-only batch jobs, one each pass, 'for guarantee'.
    pol = policy(teams=(Team("a"), Team("b")))
    p = run(queue=[cpu_job("b-1", "b", JobState.RUNNING), cpu_job("a-1", "a")], fleet=[node("c1", CPU)], pol=pol)
    assert not p.of_kind("preempt") and "a-1" in unplaced(p)


def test_nodes_asked_first_that_cannot_serve_do_not_end_the_search():
    # Nodes are asked by the least work a job on them loses. Each of n1..n3 loses less than n4 but cannot
    # serve the high job (8 GPUs): n1 drains; n3's batch job frees 4 GPUs beside 4 of production; n2's
    # batch job frees 4 beside a job of the high class itself (not preemptible by it). n4's batch job goes.
    fleet = [node("n1", state=NodeState.DRAINING), node("n2"), node("n3"), node("n4")]
    running = [bound(job("b1", gpus=8, team="b"), "n1", started=T0 - timedelta(minutes=6)),
               bound(job("b2", gpus=4, team="b"), "n2", started=T0 - timedelta(minutes=18)),
               bound(job("h2", gpus=4, team="b", priority="high"), "n2", started=T0 - timedelta(minutes=18)),
               bound(job("b3", gpus=4, team="b"), "n3", started=T0 - timedelta(minutes=12)),
               bound(job("p3", gpus=4, team="b", priority="production", spot=True), "n3"),
               bound(job("b4", gpus=8, team="b"), "n4", started=T0 - timedelta(hours=1))]
    high = job("high", gpus=8, priority="high")
    p = run(queue=[*running, high], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b4", "high")] and binds(p) == {"high": ("n4",)}


def test_a_node_reserved_for_a_waiting_gang_is_skipped_not_the_end_of_the_search():
    # The gang (high, 2 x 8 GPUs, first in the queue) finds no room and no victim of a lower class, and
    # reserves n1 and n2, whose high jobs end at T0 + 1 h. The 3-hour high job that follows ends after that:
    # n1 and n2 (asked first: 1 h lost against n3's 2 h) are not for it, n3's batch job is.
    fleet = [node("n1"), node("n2"), node("n3")]
    running = [bound(job("h1", gpus=8, team="b", priority="high", duration_hours=2.0), "n1"),
               bound(job("h2", gpus=8, team="b", priority="high", duration_hours=2.0), "n2"),
               bound(job("b3", gpus=8, team="b", duration_hours=7.0), "n3", started=T0 - timedelta(hours=2))]
    gang = job("gang", workers=2, gpus=8, priority="high", submitted=T0 - timedelta(hours=1))
    high = job("high", gpus=8, priority="high", duration_hours=3.0)
    p = run(queue=[*running, gang, high], fleet=fleet, pol=NO_CLAIMS)
    assert "waits for running work to end (~2026-11-02 10:00 UTC)" in p.unplaced[0].detail
    assert preempts(p) == [("b3", "high")] and binds(p) == {"high": ("n3",)}


def test_a_claim_passes_over_a_node_where_it_may_take_nobody():
    # a (guarantee 8) runs a-own on n1, asked first (6 minutes lost): with a-job's 4 GPUs a stays within
    # its 8, but its own job is no victim. n2's c-job (c borrows: no guarantee) is taken.
    fleet = [node("n1"), node("n2")]
    running = [bound(job("a-own", gpus=4, team="a"), "n1", started=T0 - timedelta(minutes=6)),
               bound(job("p1", gpus=4, team="c", priority="production", spot=True), "n1"),
               bound(job("c-job", gpus=4, team="c"), "n2"),
               bound(job("p2", gpus=4, team="c", priority="production", spot=True), "n2")]
    a_job = job("a-job", gpus=4, team="a")
    p = run(queue=[*running, a_job], fleet=fleet, pol=claims_policy())
    assert preempts(p) == [("c-job", "a-job")] and binds(p) == {"a-job": ("n2",)}


def test_work_that_ends_when_the_reservation_starts_may_preempt_on_a_reserved_node():
    # The gang (high, 2 x 8 GPUs) may take the batch half of n1 and n2 but not their high half: it reserves
    # both until T0 + 1 h, when every job there ends. A high job of 4 GPUs for exactly 1 h ends then, so
    # it may preempt there (b1: n1 sorts first); for 1 h and a minute it may not.
    fleet = [node("n1"), node("n2")]
    running = [bound(job(f"{c}{i}", gpus=4, team="b", priority=p, duration_hours=2.0), f"n{i}")
               for i in (1, 2) for c, p in (("b", "batch"), ("h", "high"))]
    gang = job("gang", workers=2, gpus=8, priority="high", submitted=T0 - timedelta(hours=1))
    short = job("short", gpus=4, priority="high", duration_hours=1.0)
    p = run(queue=[*running, gang, short], fleet=fleet, pol=NO_CLAIMS)
    assert "waits for running work to end (~2026-11-02 10:00 UTC)" in p.unplaced[0].detail
    assert preempts(p) == [("b1", "short")] and binds(p) == {"short": ("n1",)}
    longer = replace(short, duration_hours=1.0 + 1 / 60)
    p = run(queue=[*running, gang, longer], fleet=fleet, pol=NO_CLAIMS)
    assert not p.of_kind("preempt") and set(unplaced(p)) == {"gang", "short"}


def test_among_victims_that_lose_as_much_the_one_with_the_most_gpus_goes_first():
    # n1: 2 GPUs free, a-small (2 GPUs) and z-big (4 GPUs) started together, neither checkpointable: the
    # victim order takes z-big first, whose 4 GPUs hold the 4-GPU job with 2 to spare; a-small stays.
    fleet = [node("n1")]
    running = [bound(job("a-small", gpus=2, team="b"), "n1"), bound(job("z-big", gpus=4, team="b"), "n1")]
    high = job("high", gpus=4, priority="high")
    p = run(queue=[*running, high], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("z-big", "high")] and binds(p) == {"high": ("n1",)}
    (pre,) = p.of_kind("preempt")
    assert pre.reason is Reason.PREEMPTED_BY_HIGHER_PRIORITY
    assert pre.detail == "makes room on n1 for high (high); not checkpointable: loses 1.00 h of work"


def test_a_gang_on_one_node_frees_all_its_workers_there():
    # A batch gang runs both its workers on n1 (2 x 4 GPUs, 48 vCPUs, 512 GiB: the whole node). The high job
    # needs the whole node; the gang's room counts both workers, and it goes.
    fleet = [node("n1")]  # 8 GPUs, 96 vCPUs, 1024 GiB
    gang = bound(job("gang", workers=2, gpus=4, vcpus=48, memory_gib=512, team="b"), "n1", "n1")
    high = job("high", gpus=8, vcpus=96, memory_gib=1024, priority="high")
    p = run(queue=[gang, high], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("gang", "high")] and binds(p) == {"high": ("n1",)}


def test_a_job_of_a_lower_class_that_is_not_preemptible_is_never_taken():
    # 'pinned' (200) is below high (500) but not preemptible: the high job may take n1's batch job, whose
    # 4 GPUs are not enough, and not the pinned one beside it.
    classes = (*CLASSES, PriorityClass("pinned", 200, preemptible=False))
    pol = replace(NO_CLAIMS, priority_classes=classes)
    fleet = [node("n1")]
    running = [bound(job("pinned", gpus=4, team="b", priority="pinned"), "n1", started=T0 - timedelta(minutes=6)),
               bound(job("b1", gpus=4, team="b"), "n1")]
    high = job("high", gpus=8, priority="high")
    p = run(queue=[*running, high], fleet=fleet, pol=pol)
    assert not p.of_kind("preempt") and "high" in unplaced(p)
    p = run(queue=[*running, replace(high, gpus_per_worker=4)], fleet=fleet, pol=pol)
    assert preempts(p) == [("b1", "high")]


def test_a_job_claims_its_teams_guarantee_only_up_to_the_guarantee():
    # a (guarantee 8) uses no GPU: an 8-GPU job of a is within it and takes b's borrowed batch work of its
    # class on n1 (16 GPUs); a 9-GPU job is not, and preempts nobody.
    fleet = [node("n1", offer("g16", gpus=16))]
    borrowed = bound(job("b-job", gpus=16, team="b"), "n1")
    p = run(queue=[borrowed, job("a-job", gpus=8, team="a")], fleet=fleet, pol=claims_policy(b_guarantee=0))
    assert preempts(p) == [("b-job", "a-job")]
    p = run(queue=[borrowed, job("a-job", gpus=9, team="a")], fleet=fleet, pol=claims_policy(b_guarantee=0))
    assert not p.of_kind("preempt") and "a-job" in unplaced(p)


def test_a_victims_gpus_leave_its_teams_use_so_a_second_claim_finds_it_at_its_guarantee():
    # b (guarantee 4) borrows 4 GPUs: b1 on n1 and b2 on n2, 4 GPUs each. a's first job takes b1 back, which
    # leaves b at its 4; a's second job, still within a's 8, finds nothing more to take back.
    fleet = [node("n1", offer("g4", gpus=4)), node("n2", offer("g4", gpus=4))]
    running = [bound(job("b1", gpus=4, team="b"), "n1"), bound(job("b2", gpus=4, team="b"), "n2")]
    first = job("a-1", gpus=4, team="a")
    second = job("a-2", gpus=4, team="a", submitted=T0 + timedelta(seconds=1))
    p = run(queue=[*running, first, second], fleet=fleet, pol=claims_policy(b_guarantee=4))
    assert preempts(p) == [("b1", "a-1")] and binds(p) == {"a-1": ("n1",)} and "a-2" in unplaced(p)
    assert "preempted b1 on n1" in p.explanation("a-1").considered
    # b borrows 8 over its 4 on three nodes, and a's guarantee is 12: a-1 and a-2 take b1 and b2 back (b at
    # 8, then 4), and a-3, though a stays within its 12, finds b at its guarantee
    fleet = [node(f"n{i}", offer("g4", gpus=4)) for i in (1, 2, 3)]
    running = [bound(job(f"b{i}", gpus=4, team="b"), f"n{i}") for i in (1, 2, 3)]
    a_jobs = [job(f"a-{i}", gpus=4, team="a", submitted=T0 + timedelta(seconds=i)) for i in (1, 2, 3)]
    p = run(queue=[*running, *a_jobs], fleet=fleet, pol=claims_policy(b_guarantee=4, a_guarantee=12))
    assert preempts(p) == [("b1", "a-1"), ("b2", "a-2")] and "a-3" in unplaced(p)


# ----------------------------------------------------------------------------- admission

def test_admission_under_max_gpus_counts_the_gpus_the_fleet_holds():
    # n1 holds 8 GPUs (busy); max_gpus 16 leaves room for 8 more. The cheapest purchase in dollars, a
    # 16-GPU node ($5), would pass the cap; the cheapest that fits it, an 8-GPU node ($6), is bought.
    g16, g8 = offer("g16", gpus=16, price=5.0), offer("g8", gpus=8, price=6.0)
    busy = bound(job("prod-run", gpus=8, priority="production", spot=True), "n1")
    p = run(queue=[busy, job("j", gpus=4)], fleet=[node("n1")], offers=[g16, g8], pol=policy(max_gpus=16))
    (launch,) = p.of_kind("launch")
    assert launch.offer.instance_type.name == "g8" and binds(p)["j"] == launch.node_names and not p.unplaced


def test_a_job_the_gpu_cap_refuses_preempts_and_one_it_allows_buys():
    # n1 holds 8 GPUs (b1, batch). The production job's cheapest purchase is one more 8-GPU node: under
    # max_gpus 9 that passes the cap (16 > 9), so it may not buy and preempts b1; at 16 (8 + 8, the cap
    # exactly) and at 24 it buys and preempts nobody.
    busy = bound(job("b1", gpus=8, team="b"), "n1")
    prod = job("prod", gpus=8, priority="production", spot=True)
    p = run(queue=[busy, prod], fleet=[node("n1")], offers=[offer(price=1.0)], pol=policy(max_gpus=9))
    assert preempts(p) == [("b1", "prod")] and binds(p) == {"prod": ("n1",)} and not p.of_kind("launch")
    for cap in (16, 24):
        p = run(queue=[busy, prod], fleet=[node("n1")], offers=[offer(price=1.0)], pol=policy(max_gpus=cap))
        assert not p.of_kind("preempt") and [a.count for a in p.of_kind("launch")] == [1], cap


def test_a_gang_the_gpu_cap_refuses_counts_every_node_it_would_buy():
    # n1 and n2 hold 16 GPUs; a production gang of 2 x 8 would buy two 8-GPU nodes: 16 + 16 > 24, so it
    # preempts b1 and b2 instead. At a cap of 32 it buys both.
    fleet = [node("n1"), node("n2")]
    running = [bound(job("b1", gpus=8, team="b"), "n1"), bound(job("b2", gpus=8, team="b"), "n2")]
    gang = job("gang", workers=2, gpus=8, priority="production", spot=True)
    p = run(queue=[*running, gang], fleet=fleet, offers=[offer(price=1.0)], pol=policy(max_gpus=24))
    assert preempts(p) == [("b1", "gang"), ("b2", "gang")] and not p.of_kind("launch")
    p = run(queue=[*running, gang], fleet=fleet, offers=[offer(price=1.0)], pol=policy(max_gpus=32))
    assert not p.of_kind("preempt") and [a.count for a in p.of_kind("launch")] == [2]


def test_a_budget_refusal_names_the_cheapest_fit_and_the_fleet_it_would_make():
    # n1 ($10/h) is busy with production work; one more $3 node would take the fleet to $13/h, past $12.
    busy = bound(job("prod-run", gpus=8, priority="production", spot=True), "n1")
    p = run(queue=[busy, job("j", gpus=8)], fleet=[node("n1")], offers=[offer(price=3.0)],
            pol=policy(max_usd_per_hour=12.0))
    (waiting,) = p.unplaced
    assert waiting.reason is Reason.BUDGET_EXCEEDED
    assert waiting.detail == ("needs 8 x any GPU; the cheapest fit (g8, $3.00/h) would take the fleet to $13.00/h, "
                              "above the budget of $12.00/h")


def test_the_victims_are_the_smallest_set_a_victim_taken_first_dropped_when_a_later_one_suffices():
    # n1: c-small (2 GPUs, checkpointable: taken first), r-big (4 GPUs) and 2 GPUs of production. The
    # 4-GPU job takes c-small, then r-big, and then gives c-small back: r-big alone frees 4.
    fleet = [node("n1")]
    running = [replace(bound(job("c-small", gpus=2, team="b"), "n1", checkpoint=T0 - timedelta(minutes=5)),
                       checkpointable=True),
               bound(job("r-big", gpus=4, team="b"), "n1"),
               bound(job("p", gpus=2, team="c", priority="production", spot=True), "n1")]
    p = run(queue=[*running, job("high", gpus=4, priority="high")], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("r-big", "high")] and binds(p) == {"high": ("n1",)}


def test_a_gang_on_one_node_preempts_room_for_all_its_workers():
    # The production gang of 2 x 4 GPUs fits n1 whole once b1 and b2 (4 GPUs each) go: both go.
    fleet = [node("n1")]
    running = [bound(job("b1", gpus=4, team="b"), "n1"), bound(job("b2", gpus=4, team="b"), "n1")]
    gang = job("gang", workers=2, gpus=4, priority="production", spot=True)
    p = run(queue=[*running, gang], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b1", "gang"), ("b2", "gang")] and binds(p) == {"gang": ("n1", "n1")}


@pytest.mark.parametrize("dimension", ["vcpus", "memory_gib"])
def test_a_gang_on_one_node_preempts_the_vcpus_or_memory_of_all_its_workers(dimension):
    # n1 (8 GPUs, 96 vCPUs, 1024 GiB): b1 and b2 hold 1 GPU each and half the node's vCPUs (or memory);
    # the gang's two workers need 1 GPU and 40 vCPUs (or 400 GiB) each: 6 GPUs are free, but the 80 vCPUs
    # (800 GiB) need both gone.
    small = {"vcpus": 4, "memory_gib": 8}
    half = dict(small, **{dimension: {"vcpus": 48, "memory_gib": 512}[dimension]})
    worker = dict(small, **{dimension: {"vcpus": 40, "memory_gib": 400}[dimension]})
    running = [bound(job(f"b{i}", gpus=1, team="b", **half), "n1") for i in (1, 2)]
    gang = job("gang", workers=2, gpus=1, priority="production", spot=True, **worker)
    p = run(queue=[*running, gang], fleet=[node("n1")], pol=NO_CLAIMS)
    assert preempts(p) == [("b1", "gang"), ("b2", "gang")] and binds(p) == {"gang": ("n1", "n1")}


@pytest.mark.parametrize("dimension", ["vcpus", "memory_gib"])
def test_victims_are_taken_until_every_dimension_is_free_not_only_the_gpus(dimension):
    # n1: a-cp (4 GPUs, checkpointable: taken first), r-more (2 GPUs and 80 vCPUs, or 800 GiB) and 2 GPUs of
    # production. The 4-GPU job needs 80 vCPUs (800 GiB) too: a-cp frees the GPUs, r-more the rest.
    small = {"vcpus": 8, "memory_gib": 16}
    more = dict(small, **{dimension: {"vcpus": 80, "memory_gib": 1000}[dimension]})
    running = [replace(bound(job("a-cp", gpus=4, team="b", **small), "n1", checkpoint=T0 - timedelta(minutes=5)),
                       checkpointable=True),
               bound(job("r-more", gpus=2, team="b", **more), "n1"),
               bound(job("p", gpus=2, team="c", priority="production", spot=True, vcpus=8, memory_gib=8), "n1")]
    need = dict(small, **{dimension: {"vcpus": 80, "memory_gib": 800}[dimension]})
    p = run(queue=[*running, job("high", gpus=4, priority="high", **need)], fleet=[node("n1")], pol=NO_CLAIMS)
    assert preempts(p) == [("a-cp", "high"), ("r-more", "high")] and binds(p) == {"high": ("n1",)}


@pytest.mark.parametrize("dimension", ["vcpus", "memory_gib"])
def test_no_victims_when_the_takeable_ones_free_the_gpus_but_not_the_vcpus_or_memory(dimension):
    # n1: b1 (batch, 4 GPUs) and h1 (high, 2 GPUs and 80 vCPUs, or 1000 GiB) beside 2 GPUs of production.
    # The high job (4 GPUs, 80 vCPUs or 800 GiB) may take b1, whose GPUs suffice, but not h1, whose vCPUs
    # (memory) it needs as well: nobody is preempted.
    small = {"vcpus": 8, "memory_gib": 16}
    more = dict(small, **{dimension: {"vcpus": 80, "memory_gib": 1000}[dimension]})
    running = [bound(job("b1", gpus=4, team="b", **small), "n1"),
               bound(job("h1", gpus=2, team="b", priority="high", **more), "n1"),
               bound(job("p", gpus=2, team="c", priority="production", spot=True, vcpus=8, memory_gib=8), "n1")]
    need = dict(small, **{dimension: {"vcpus": 80, "memory_gib": 800}[dimension]})
    p = run(queue=[*running, job("high", gpus=4, priority="high", **need)], fleet=[node("n1")], pol=NO_CLAIMS)
    assert not p.of_kind("preempt") and "high" in unplaced(p)


@pytest.mark.parametrize("dimension", ["gpus", "vcpus", "memory_gib"])
def test_a_victim_gang_is_not_given_back_when_its_workers_together_are_needed(dimension):
    # n1 (8 GPUs, 96 vCPUs, 1024 GiB): a batch gang with both workers there (2 GPUs, 24 vCPUs, 256 GiB each)
    # and production work of the same size; 2 GPUs, 24 vCPUs and 256 GiB free. The high job needs 4 GPUs
    # (or 48 vCPUs, or 512 GiB) and little else: the gang goes, and it is not given back (without its two
    # workers only 2 GPUs, 24 vCPUs, 256 GiB are free).
    worker = {"gpus": 2, "vcpus": 24, "memory_gib": 256}
    gang = bound(job("gang", workers=2, team="b", **worker), "n1", "n1")
    prod = bound(job("p", team="c", priority="production", spot=True, **worker), "n1")
    need = {"gpus": 1, "vcpus": 4, "memory_gib": 16}
    need[dimension] = {"gpus": 4, "vcpus": 48, "memory_gib": 512}[dimension]
    p = run(queue=[gang, prod, job("high", priority="high", **need)], fleet=[node("n1")], pol=NO_CLAIMS)
    assert preempts(p) == [("gang", "high")] and binds(p) == {"high": ("n1",)}


@pytest.mark.parametrize("dimension", ["gpus", "vcpus", "memory_gib"])
def test_victims_are_taken_until_each_dimension_holds_its_own_need(dimension):
    # n1 (4 GPUs, 4 vCPUs, 4 GiB) runs b1 and b2, 2 of each apiece. The high job needs 4 of one dimension and
    # 2 of the others: after b1 every dimension holds 2, which is the other dimensions' need, not this one's.
    tiny = offer("t4", gpus=4, vcpus=4, memory_gib=4)
    running = [bound(job(f"b{i}", gpus=2, vcpus=2, memory_gib=2, team="b"), "n1") for i in (1, 2)]
    need = {"gpus": 2, "vcpus": 2, "memory_gib": 2, dimension: 4}
    p = run(queue=[*running, job("high", priority="high", **need)], fleet=[node("n1", tiny)], pol=NO_CLAIMS)
    assert preempts(p) == [("b1", "high"), ("b2", "high")] and binds(p) == {"high": ("n1",)}


@pytest.mark.parametrize("dimension", ["vcpus", "memory_gib"])
def test_a_victim_taken_first_is_given_back_when_the_rest_frees_exactly_the_need(dimension):
    # n1 (8 GPUs, 96 vCPUs, 1024 GiB, all used): c-first (checkpointable: taken first; 2 GPUs and 16 vCPUs,
    # or 256 GiB), r-big (4 GPUs, 64 vCPUs or 512 GiB) and production work. The job needs 4 GPUs and 64 vCPUs
    # (512 GiB): with both taken, giving c-first back leaves exactly that, so only r-big goes.
    def shape(gpus, vcpus, memory):
        s = {"vcpus": 8, "memory_gib": 16}
        s[dimension] = {"vcpus": vcpus, "memory_gib": memory}[dimension]
        return dict(s, gpus=gpus)
    running = [replace(bound(job("c-first", team="b", **shape(2, 16, 256)), "n1", checkpoint=T0 - timedelta(minutes=5)),
                       checkpointable=True),
               bound(job("r-big", team="b", **shape(4, 64, 512)), "n1"),
               bound(job("p", team="c", priority="production", spot=True, **shape(2, 16, 256)), "n1")]
    p = run(queue=[*running, job("high", priority="high", **shape(4, 64, 512))], fleet=[node("n1")], pol=NO_CLAIMS)
    assert preempts(p) == [("r-big", "high")] and binds(p) == {"high": ("n1",)}


def test_a_gang_preempts_in_the_zone_with_the_fewest_victims_then_the_least_work_lost():
    # The production gang (2 x 8 GPUs) needs two whole nodes of one zone. z1's batch jobs lost 1 h each, z2's
    # 2 h; z3's lost 6 minutes each, but there are three (n6 runs two of 4 GPUs): z1, the fewest victims and
    # the least work lost. With z1's jobs 3 h old, z2 wins: 4 h lost in all against 6 h, though asked after z1.
    fleet = [node("n1", offer(zone="z1")), node("n2", offer(zone="z1")), node("n3", offer(zone="z2")),
             node("n4", offer(zone="z2")), node("n5", offer(zone="z3")), node("n6", offer(zone="z3"))]

    def running(z1_hours):
        return [bound(job("b1", gpus=8, team="b"), "n1", started=T0 - timedelta(hours=z1_hours)),
                bound(job("b2", gpus=8, team="b"), "n2", started=T0 - timedelta(hours=z1_hours)),
                bound(job("b3", gpus=8, team="b"), "n3", started=T0 - timedelta(hours=2)),
                bound(job("b4", gpus=8, team="b"), "n4", started=T0 - timedelta(hours=2)),
                bound(job("b5", gpus=8, team="b"), "n5", started=T0 - timedelta(minutes=6)),
                bound(job("b6a", gpus=4, team="b"), "n6", started=T0 - timedelta(minutes=6)),
                bound(job("b6b", gpus=4, team="b"), "n6", started=T0 - timedelta(minutes=6))]
    gang = job("gang", workers=2, gpus=8, priority="production", spot=True)
    p = run(queue=[*running(1), gang], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b1", "gang"), ("b2", "gang")] and sorted(binds(p)["gang"]) == ["n1", "n2"]
    p = run(queue=[*running(3), gang], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b3", "gang"), ("b4", "gang")] and sorted(binds(p)["gang"]) == ["n3", "n4"]


def test_a_gang_preempts_only_on_schedulable_nodes_of_its_kinds():
    # z1: n1 drains and n2 is an L4 node (the gang wants A100s); their batch jobs lost 6 minutes against
    # n3's and n4's hour, but the gang takes n3 and n4.
    l4 = offer("l4x8", model="L4")
    fleet = [node("n1", state=NodeState.DRAINING), node("n2", l4), node("n3"), node("n4")]
    running = [bound(job(f"b{i}", gpus=8, team="b"), f"n{i}", started=T0 - timedelta(minutes=6)) for i in (1, 2)]
    running += [bound(job(f"b{i}", gpus=8, team="b"), f"n{i}") for i in (3, 4)]
    gang = job("gang", workers=2, gpus=8, models=("A100-80GB",), priority="production", spot=True)
    p = run(queue=[*running, gang], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b3", "gang"), ("b4", "gang")] and sorted(binds(p)["gang"]) == ["n3", "n4"]


def test_a_gang_looks_past_a_node_of_its_zone_without_room():
    # z1: n1 runs production work (no room for a worker however many go), n2 and n3 batch jobs: the gang
    # takes n2 and n3.
    fleet = [node("n1"), node("n2"), node("n3")]
    running = [bound(job("p1", gpus=8, team="c", priority="production", spot=True), "n1"),
               bound(job("b2", gpus=8, team="b"), "n2"), bound(job("b3", gpus=8, team="b"), "n3")]
    gang = job("gang", workers=2, gpus=8, priority="production", spot=True)
    p = run(queue=[*running, gang], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b2", "gang"), ("b3", "gang")] and sorted(binds(p)["gang"]) == ["n2", "n3"]


def _halves_and_a_waiting_gang():  # noqa: ANN202
    """z1: n1, n2 and n3 each run a batch job (b1..b3) and a high job (h1..h3) of 4 GPUs, those of n1 and n2
    ending at T0 + 1 h, n3's at T0 + 5 h; ``first`` (high, 2 x 8 GPUs) may take only the batch halves, waits,
    and reserves n1 and n2 until T0 + 1 h. ``(fleet, running, first)``."""
    fleet = [node("n1"), node("n2"), node("n3")]
    running = [bound(job(f"{c}{i}", gpus=4, team="b", priority=pc, duration_hours=2.0 if i < 3 else 6.0), f"n{i}")
               for i in (1, 2, 3) for c, pc in (("b", "batch"), ("h", "high"))]
    return fleet, running, job("first", workers=2, gpus=8, priority="high", submitted=T0 - timedelta(hours=1))


def test_a_gang_that_ends_after_a_reservation_preempts_nobody_on_the_reserved_nodes():
    # z1: n1, n2 and n3 each run a batch and a high job of 4 GPUs. The first gang (high, 2 x 8 GPUs) may
    # take only the batch halves: it waits and reserves n1 and n2, whose jobs end first (T0 + 1 h). The
    # second gang (high, 2 x 4 GPUs, 5 hours) would fit the batch halves of n1 and n2, but ends after the
    # reservation: only n3 is open to it, one worker's room, and nobody is preempted.
    fleet, running, first = _halves_and_a_waiting_gang()
    second = job("second", workers=2, gpus=4, priority="high", duration_hours=5.0)
    p = run(queue=[*running, first, second], fleet=fleet, pol=NO_CLAIMS)
    details = {u.job_id: u.detail for u in p.unplaced}
    assert "waits for running work to end (~2026-11-02 10:00 UTC)" in details["first"]
    assert not p.of_kind("preempt") and set(unplaced(p)) == {"first", "second"}


def test_a_gang_takes_each_node_once_with_the_most_workers_it_can_host_there():
    # A production gang of 3 x 4 GPUs: n1 hosts two workers once b1a and b1b go, n2 one once b2 goes (its
    # other half is production work). Each node is counted once, at its most workers: all three go.
    fleet = [node("n1"), node("n2")]
    running = [bound(job("b1a", gpus=4, team="b"), "n1"), bound(job("b1b", gpus=4, team="b"), "n1"),
               bound(job("b2", gpus=4, team="b"), "n2"),
               bound(job("p2", gpus=4, team="c", priority="production", spot=True), "n2")]
    gang = job("gang", workers=3, gpus=4, priority="production", spot=True)
    p = run(queue=[*running, gang], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b1a", "gang"), ("b1b", "gang"), ("b2", "gang")]
    assert sorted(binds(p)["gang"]) == ["n1", "n1", "n2"]


def test_a_gang_claim_takes_the_next_zone_when_the_best_would_take_a_team_below_its_guarantee():
    # z1 (n1, n2): b's b1 and b2 (4 GPUs each, 1 h lost) beside production; b uses 8 GPUs of its guarantee
    # of 4, so either may go but not both. z2 (n3, n4): c's c3 and c4 (no guarantee, 2 h lost each) beside
    # production. The gang of 2 x 4 GPUs (team a, within its 8) needs two victims in either zone; z1 loses
    # less work (2 h against 4 h) but would take b to 0: it takes c3 and c4.
    fleet = [node("n1", offer(zone="z1")), node("n2", offer(zone="z1")),
             node("n3", offer(zone="z2")), node("n4", offer(zone="z2"))]
    running = [bound(job("b1", gpus=4, team="b"), "n1"), bound(job("b2", gpus=4, team="b"), "n2"),
               bound(job("c3", gpus=4, team="c"), "n3", started=T0 - timedelta(hours=2)),
               bound(job("c4", gpus=4, team="c"), "n4", started=T0 - timedelta(hours=2))]
    running += [bound(job(f"p{i}", gpus=4, team="c", priority="production", spot=True), f"n{i}") for i in (1, 2, 3, 4)]
    gang = job("gang", workers=2, gpus=4, team="a")
    p = run(queue=[*running, gang], fleet=fleet, pol=claims_policy(b_guarantee=4))
    assert preempts(p) == [("c3", "gang"), ("c4", "gang")] and sorted(binds(p)["gang"]) == ["n3", "n4"]


def test_a_gang_that_ends_before_a_reservation_may_preempt_on_the_reserved_nodes():
    # As above, but the second gang runs 30 minutes and ends before first's reservation of n1 and n2
    # (T0 + 1 h): like a one-worker job of 30 minutes, which takes b1 on n1, it may take the batch halves
    # there. Every node offers one worker for one victim who lost 1 h: n1 and n2 by name.
    fleet, running, first = _halves_and_a_waiting_gang()
    single = job("single", gpus=4, priority="high", duration_hours=0.5)
    p = run(queue=[*running, first, single], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b1", "single")] and binds(p) == {"single": ("n1",)}
    second = job("second", workers=2, gpus=4, priority="high", duration_hours=0.5)
    p = run(queue=[*running, first, second], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b1", "second"), ("b2", "second")] and sorted(binds(p)["second"]) == ["n1", "n2"]
    assert set(unplaced(p)) == {"first"}


def test_a_gang_takes_free_room_for_its_last_worker_rather_than_one_more_victim():
    # z1: n1 has 4 GPUs free beside v1a and v1b (2 GPUs each), n2 4 free beside v2 (4), n3 runs v3 (8). A
    # production gang of 3 x 4 GPUs needs 12 GPUs; 8 are free, so someone goes, and v2 is enough: n2 then
    # hosts two workers and n1 one in its free room (before 2026-11-28 the planner took v2 and v3 as well, the
    # gang on n2, n2, n3: n1 counted only through its most workers, two, for two victims).
    fleet = [node("n1"), node("n2"), node("n3")]
    running = [bound(job("v1a", gpus=2, team="b"), "n1"), bound(job("v1b", gpus=2, team="b"), "n1"),
               bound(job("v2", gpus=4, team="b"), "n2"), bound(job("v3", gpus=8, team="b"), "n3")]
    gang = job("gang", workers=3, gpus=4, priority="production", spot=True)
    p = run(queue=[*running, gang], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("v2", "gang")] and sorted(binds(p)["gang"]) == ["n1", "n2", "n2"]


def test_a_gang_that_may_preempt_nobody_takes_nodes_with_more_than_a_workers_gpus_free():
    # As test_planner_rules' gang past the zones the free-capacity search looks at (16: z01..z16 with 18 GPUs
    # free each, no node with 8), but z17's two 16-GPU nodes each run a 4-GPU job: 12 GPUs free on each,
    # more than a worker's 8 and less than two workers'. The batch gang may take nobody; it takes both.
    fleet, running = sixteen_busy_zones()
    for k in range(2):
        name = f"z17-{k}"
        fleet.append(node(name, offer("g16", gpus=16, zone="z17")))
        running.append(bound(job(f"b-{name}", gpus=4, team="b"), name))
    gang = job("gang", workers=2, gpus=8)
    p = run(queue=[*running, gang], fleet=fleet, offers=[], pol=policy(max_usd_per_hour=10.0))
    assert not p.of_kind("preempt") and sorted(binds(p)["gang"]) == ["z17-0", "z17-1"]


def _past_16_zones_with_z17_reserved():
    """z01..z16 each run 2 GPUs of production work (10 h) on three nodes: 18 GPUs free, no node with 8, and the
    free-capacity search looks at no zone after them. z17-a and z17-b are free, z17-c runs production work that
    ends at T0 + 1 h: w (high, 3 x 8 GPUs) reserves the three until then."""
    fleet, running = sixteen_busy_zones("p", team="c", priority="production", duration_hours=10.0)
    fleet += [node(f"z17-{k}", offer(zone="z17")) for k in "abc"]
    running.append(bound(job("p-z17-c", gpus=8, team="c", priority="production", duration_hours=2.0), "z17-c"))
    return fleet, [*running, job("w", workers=3, gpus=8, priority="high", submitted=T0 - timedelta(hours=1))]


def test_a_gang_that_may_preempt_nobody_leaves_the_free_room_of_nodes_reserved_past_its_end():
    # g (batch, 2 x 8 GPUs, 5 h) may take nobody and would end after w starts: it does not take z17-a and
    # z17-b, and waits.
    fleet, queue = _past_16_zones_with_z17_reserved()
    p = run(queue=[*queue, job("g", workers=2, gpus=8, duration_hours=5.0)], fleet=fleet, pol=NO_CLAIMS)
    assert not p.of_kind("preempt") and set(unplaced(p)) == {"w", "g"}
    details = {u.job_id: u.detail for u in p.unplaced}
    assert "waits for running work to end (~2026-11-02 10:00 UTC)" in details["w"]


def test_a_gang_that_may_preempt_nobody_backfills_the_free_room_of_nodes_reserved_after_its_end():
    # g runs 30 minutes, ending before w starts (T0 + 1 h): it takes z17-a and z17-b's free room.
    fleet, queue = _past_16_zones_with_z17_reserved()
    p = run(queue=[*queue, job("g", workers=2, gpus=8, duration_hours=0.5)], fleet=fleet, pol=NO_CLAIMS)
    assert not p.of_kind("preempt") and sorted(binds(p)["g"]) == ["z17-a", "z17-b"]


def test_a_gang_takes_on_a_node_as_many_workers_as_its_vcpus_hold_with_gpus_to_spare():
    # z1: n1 and n2 (8 GPUs, 96 vCPUs) each run production work of 56 vCPUs and no GPU beside a batch job of
    # 8 GPUs and 4 vCPUs: with it gone, 8 GPUs and 40 vCPUs. The gang's workers need 2 GPUs and 20 vCPUs: two
    # on a node (4 of its 8 GPUs), not three (60 vCPUs). Both batch jobs go: n1 two workers, n2 one.
    fleet = [node("n1"), node("n2")]
    running = [bound(job(f"p{i}", gpus=0, vcpus=56, team="c", priority="production", spot=True), f"n{i}")
               for i in (1, 2)]
    running += [bound(job(f"b{i}", gpus=8, team="b"), f"n{i}") for i in (1, 2)]
    gang = job("gang", workers=3, gpus=2, vcpus=20, priority="production", spot=True)
    p = run(queue=[*running, gang], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b1", "gang"), ("b2", "gang")] and binds(p)["gang"] == ("n1", "n1", "n2")


def test_a_cpu_only_gang_preempts_across_cpu_nodes():
    # c1 and c2 (4 vCPUs, 16 GiB, no GPU) each run a batch job of 4 vCPUs: the production gang of 2 x 4 vCPUs
    # takes both.
    fleet = [node("c1", CPU), node("c2", CPU)]
    running = [bound(job(f"b{i}", gpus=0, vcpus=4, memory_gib=8, team="b"), f"c{i}") for i in (1, 2)]
    gang = job("gang", workers=2, gpus=0, vcpus=4, memory_gib=8, priority="production", spot=True)
    p = run(queue=[*running, gang], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b1", "gang"), ("b2", "gang")] and sorted(binds(p)["gang"]) == ["c1", "c2"]


@pytest.mark.parametrize(("used", "worker"), [({"vcpus": 3, "memory_gib": 4}, {"vcpus": 0.5, "memory_gib": 1}),
                                           ({"vcpus": 1, "memory_gib": 15}, {"vcpus": 0.25, "memory_gib": 0.5})],
                         ids=["vcpus", "memory"])
def test_a_gang_of_workers_under_one_vcpu_or_gib_takes_as_many_as_a_nodes_room_holds(used, worker):
    # c1 and c2 (4 vCPUs, 16 GiB) each run production work (3 vCPUs, or 15 GiB) beside a batch job of 1 vCPU
    # and 1 GiB. The gang's three workers need half a vCPU (or half a GiB) each: two fit the room c1's batch
    # job frees, the third c2's.
    fleet = [node("c1", CPU), node("c2", CPU)]
    running = [bound(job(f"p{i}", gpus=0, team="c", priority="production", spot=True, **used), f"c{i}")
               for i in (1, 2)]
    running += [bound(job(f"b{i}", gpus=0, vcpus=1, memory_gib=1, team="b"), f"c{i}") for i in (1, 2)]
    gang = job("gang", workers=3, gpus=0, priority="production", spot=True, **worker)
    p = run(queue=[*running, gang], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b1", "gang"), ("b2", "gang")] and binds(p)["gang"] == ("c1", "c1", "c2")


def test_a_gang_takes_the_nodes_with_the_fewest_victims_first_whatever_their_names():
    # z1: n1 runs two batch jobs of 4 GPUs, n2 and n3 one of 8 each. Each node hosts one worker of the 2 x 8
    # gang; n2 and n3 cost one victim each, n1 two: b2 and b3 go.
    fleet = [node("n1"), node("n2"), node("n3")]
    running = [bound(job("b1a", gpus=4, team="b"), "n1"), bound(job("b1b", gpus=4, team="b"), "n1"),
               bound(job("b2", gpus=8, team="b"), "n2"), bound(job("b3", gpus=8, team="b"), "n3")]
    gang = job("gang", workers=2, gpus=8, priority="production", spot=True)
    p = run(queue=[*running, gang], fleet=fleet, pol=NO_CLAIMS)
    assert preempts(p) == [("b2", "gang"), ("b3", "gang")] and sorted(binds(p)["gang"]) == ["n2", "n3"]
    # the room is made on the two nodes the gang takes, not on n1 as well
    assert {pre.detail for pre in p.of_kind("preempt")} == {
        "makes room on n2, n3 for gang (production); not checkpointable: loses 1.00 h of work"}


def test_a_waiting_gangs_start_is_estimated_in_one_zone():
    # Production work ends on n1 (z1) and n2 (z2) at T0 + 1 h, on n3 (z1) at T0 + 3 h. w (high, 2 x 8 GPUs)
    # needs two nodes of one zone: z1's two are free at T0 + 3 h (12:00 UTC); z2 has one node.
    fleet = [node("n1", offer(zone="z1")), node("n2", offer(zone="z2")), node("n3", offer(zone="z1"))]
    running = [bound(job(f"p{i}", gpus=8, team="c", priority="production", duration_hours=hours), f"n{i}")
               for i, hours in ((1, 2.0), (2, 2.0), (3, 4.0))]
    w = job("w", workers=2, gpus=8, priority="high", submitted=T0 - timedelta(hours=1))
    p = run(queue=[*running, w], fleet=fleet, pol=NO_CLAIMS)
    (waiting,) = p.unplaced
    assert "waits for running work to end (~2026-11-02 12:00 UTC)" in waiting.detail, waiting.detail


def test_a_gang_claim_makes_room_only_on_the_nodes_it_takes():
    # Team a (guarantee 16, using none) claims it for a batch gang of 2 x 8 GPUs; b (no guarantee) runs batch
    # jobs on n1 and n2 and a high one on n3. The claim may take b's batch work, not its high work: n3's room
    # with every preemptible job gone would hold a worker, but the gang may take nobody there. It takes b1 and
    # b2, and makes room on n1 and n2 alone.
    fleet = [node("n1"), node("n2"), node("n3")]
    running = [bound(job("b1", gpus=8, team="b"), "n1"), bound(job("b2", gpus=8, team="b"), "n2"),
               bound(job("h3", gpus=8, team="b", priority="high"), "n3")]
    gang = job("gang", workers=2, gpus=8, team="a")
    p = run(queue=[*running, gang], fleet=fleet, pol=claims_policy(b_guarantee=0, a_guarantee=16))
    assert preempts(p) == [("b1", "gang"), ("b2", "gang")] and sorted(binds(p)["gang"]) == ["n1", "n2"]
    assert {pre.detail for pre in p.of_kind("preempt")} == {
        "makes room on n1, n2 for gang (batch, team a within its guaranteed GPUs; b is above its own); not "
        "checkpointable: loses 1.00 h of work"}
