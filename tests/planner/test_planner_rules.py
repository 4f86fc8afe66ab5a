"""The planner's rules, one named case each (issue: queue order, gangs,
preemption, risk-adjusted diversified purchases, consolidation)."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import (
    Forecast,
    JobState,
    Market,
    NodeState,
    OfferReclaim,
    OfferRisk,
    Reason,
    Team,
)
from fleetctl.planner import plan
from tests.builders import T0, job, node, offer, policy


def run(queue=(), fleet=(), offers=(), pol=None, forecast=None, now=T0):
    return plan(now=now, queue=tuple(queue), fleet=tuple(fleet), offers=tuple(offers), forecast=forecast,
                policy=pol or policy())


def bound(j, *node_ids, started=T0 - timedelta(hours=1), checkpoint=None):
    return replace(j, state=JobState.RUNNING, node_ids=tuple(node_ids), started_at_utc=started,
                   last_checkpoint_utc=checkpoint)


def binds(p):
    return {b.job_id: b.node_ids for b in p.of_kind("bind")}


def unplaced(p):
    return {u.job_id: u.reason for u in p.unplaced}


# ----------------------------------------------------------------------------- queue order

def case_gang_waits_rather_than_partially_placing():
    fleet = [node("n1")]  # one free 8-GPU node, nothing to buy
    p = run(queue=[job("gang", workers=2, gpus=8)], fleet=fleet, offers=[])
    assert "gang" not in binds(p) and unplaced(p) == {"gang": Reason.NO_ALLOWED_OFFER}


def case_team_under_guarantee_jumps_ahead_of_bursting_team():
    pol = policy(teams=(Team("a", guaranteed_gpus=8, burst_gpus=64), Team("b", guaranteed_gpus=8, burst_gpus=64)),
                 max_usd_per_hour=22.0)
    fleet = [node("n1"), node("n2")]
    running = [bound(job("a-run1", gpus=8, team="a"), "n1"), bound(job("a-run2", gpus=8, team="a"), "n2")]
    queue = [*running, job("a-next", gpus=8, team="a", submitted=T0 - timedelta(hours=5)),
             job("b-first", gpus=8, team="b", submitted=T0)]
    p = run(queue=queue, fleet=fleet, offers=[offer(price=2.0)], pol=pol)
    assert "b-first" in binds(p) and unplaced(p) == {"a-next": Reason.BUDGET_EXCEEDED}


def case_drf_weights_decide_between_teams_over_guarantee():
    pol = policy(teams=(Team("a", weight=1.0), Team("b", weight=3.0)), max_usd_per_hour=25.0)
    fleet = [node("n1"), node("n2")]
    running = [bound(job("a-run", gpus=8, team="a"), "n1"), bound(job("b-run", gpus=8, team="b"), "n2")]
    queue = [*running, job("a-next", gpus=8, team="a", submitted=T0 - timedelta(hours=1)),
             job("b-next", gpus=8, team="b", submitted=T0)]
    p = run(queue=queue, fleet=fleet, offers=[offer(price=4.0)], pol=pol)
    assert "b-next" in binds(p) and "a-next" in unplaced(p)  # b's weighted share is lower


def case_aging_lifts_a_starved_job_into_a_higher_band():
    pol = policy(aging_priority_per_hour=10.0, max_usd_per_hour=10.0)
    old_batch = job("old-batch", gpus=8, priority="batch", submitted=T0 - timedelta(hours=100))
    prod = job("prod", gpus=8, priority="production", spot=True, submitted=T0 - timedelta(hours=1))
    p = run(queue=[old_batch, prod], offers=[offer(price=10.0)], pol=pol)
    # both compete at 1000 now; same band and team: earlier submission wins
    assert "old-batch" in binds(p) and "prod" in unplaced(p)
    p = run(queue=[old_batch, prod], offers=[offer(price=10.0)], pol=replace(pol, aging_priority_per_hour=0.0))
    assert "prod" in binds(p)


def case_earliest_deadline_first_within_a_team():
    late = job("late", gpus=8, submitted=T0 - timedelta(hours=3))
    urgent = replace(job("urgent", gpus=8, submitted=T0), deadline_utc=T0 + timedelta(hours=12))
    p = run(queue=[late, urgent], offers=[offer(price=10.0)], pol=policy(max_usd_per_hour=10.0))
    assert "urgent" in binds(p) and "late" in unplaced(p)


def case_burst_limit_is_a_quota():
    pol = policy(teams=(Team("a", guaranteed_gpus=0, burst_gpus=8),))
    p = run(queue=[job("j1", gpus=8), job("j2", gpus=8, submitted=T0 + timedelta(seconds=1))], offers=[offer()],
            pol=pol)
    assert "j1" in binds(p) and unplaced(p) == {"j2": Reason.QUOTA_EXCEEDED}


# ----------------------------------------------------------------------------- placement

def case_burst_limit_holds_on_free_capacity_too():
    # burst_gpus is the most a team may use in total: free room on a node it already runs on is no exception
    fleet = [node("n1", offer("g16", gpus=16))]
    pol = policy(teams=(Team("a", guaranteed_gpus=0, burst_gpus=4), Team("b", guaranteed_gpus=0, burst_gpus=64)))
    running = bound(job("a-1", gpus=4, team="a"), "n1")
    p = run(queue=[running, job("a-2", gpus=4, team="a"), job("b-1", gpus=4, team="b")], fleet=fleet, offers=[],
            pol=pol)
    assert unplaced(p) == {"a-2": Reason.QUOTA_EXCEEDED}
    assert binds(p) == {"b-1": ("n1",)}


def case_gang_on_one_node_when_it_fits():
    fleet = [node("a", offer(zone="z1")), node("b", offer(zone="z1")), node("big", offer("g16", gpus=16, zone="z2"))]
    p = run(queue=[job("gang", workers=2, gpus=8)], fleet=fleet)
    assert binds(p) == {"gang": ("big", "big")}


def case_gang_spans_nodes_only_within_one_zone():
    fleet = [node("a1", offer(zone="z1")), node("b1", offer(zone="z2")), node("b2", offer(zone="z2"))]
    p = run(queue=[job("gang", workers=2, gpus=8)], fleet=fleet)
    assert sorted(binds(p)["gang"]) == ["b1", "b2"]


def case_a_cpu_only_gang_takes_free_cpu_nodes():
    # two idle CPU nodes hold one 64-vCPU worker each: the gang takes them and buys nothing (it bought two
    # new nodes before 2026-11-28: the gang search never looked at nodes with no GPUs free)
    cpu = offer("c64", gpus=0, model=None, vcpus=64, memory_gib=256, price=2.0)
    p = run(queue=[job("gang", workers=2, gpus=0, vcpus=64, memory_gib=16)], fleet=[node("c1", cpu), node("c2", cpu)],
            offers=[cpu])
    assert binds(p) == {"gang": ("c1", "c2")} and not p.of_kind("launch")


def case_best_fit_keeps_large_blocks_free():
    fleet = [node("big", offer("g8", gpus=8)), node("small", offer("g2", gpus=2, vcpus=24, memory_gib=256))]
    p = run(queue=[job("one", gpus=1)], fleet=fleet)
    assert binds(p) == {"one": ("small",)}


def case_non_spot_eligible_refuses_spot_capacity():
    fleet = [node("spot", offer(market=Market.SPOT))]
    offers = [offer(price=3.0, market=Market.SPOT), offer(price=12.0, market=Market.ON_DEMAND)]
    p = run(queue=[job("safe", gpus=1, spot=False)], fleet=fleet, offers=offers)
    assert p.of_kind("launch")[0].offer.market is Market.ON_DEMAND


def case_gpu_memory_constraint():
    offers = [offer("small-mem", model="A10G", price=1.0, gpu_memory_gib=24.0), offer("a100", model="A100-80GB", price=9.0)]
    p = run(queue=[replace(job("big-model", gpus=1), gpu_memory_gib_per_gpu=40.0)], offers=offers)
    assert p.of_kind("launch")[0].offer.instance_type.name == "a100"


def case_backfill_only_when_it_ends_before_the_waiting_gang():
    # Two nodes in z1, each half busy until T0+2h; a 2x8 gang must wait (no budget to buy).
    fleet = [node("n1"), node("n2")]
    running = [bound(job("r1", gpus=4, duration_hours=3.0), "n1", started=T0 - timedelta(hours=1)),
               bound(job("r2", gpus=4, duration_hours=3.0), "n2", started=T0 - timedelta(hours=1))]
    gang = job("gang", workers=2, gpus=8, submitted=T0 - timedelta(hours=1))
    short = job("short", gpus=2, duration_hours=1.0, submitted=T0)
    long = job("long", gpus=2, duration_hours=5.0, submitted=T0 + timedelta(seconds=1))
    p = run(queue=[*running, gang, short, long], fleet=fleet, offers=[offer(price=50.0)],
            pol=policy(max_usd_per_hour=25.0))
    assert "gang" in unplaced(p) and "waits for running work" in p.unplaced[0].detail
    assert "short" in binds(p)
    assert "long" in unplaced(p)


# ----------------------------------------------------------------------------- preemption

def case_preempts_smallest_set_checkpointable_first():
    fleet = [node("n1")]
    cp = replace(bound(job("cp", gpus=4), "n1", checkpoint=T0 - timedelta(minutes=5)), checkpointable=True)
    raw = bound(job("raw", gpus=4), "n1")
    prod = job("prod", gpus=4, priority="production", spot=True)
    p = run(queue=[cp, raw, prod], fleet=fleet, offers=[], pol=policy(max_usd_per_hour=10.0))
    (pre,) = p.of_kind("preempt")
    assert pre.job_id == "cp" and pre.by_job_id == "prod" and pre.reason is Reason.PREEMPTED_BY_HIGHER_PRIORITY
    assert "it checkpoints before it stops" in pre.detail and "loses" not in pre.detail  # apply checkpoints it
    assert binds(p) == {"prod": ("n1",)}


def case_two_jobs_preempt_on_one_node_in_one_pass_each_its_own_victim():
    # The victims of a node are worked out once a pass and kept (the planner at 5,000 nodes): the second
    # job must not be offered the first one's victim, nor the first job's own place.
    fleet = [node("n1")]
    cp = replace(bound(job("cp", gpus=4), "n1", checkpoint=T0 - timedelta(minutes=5)), checkpointable=True)
    raw = bound(job("raw", gpus=4), "n1")
    first = job("prod-1", gpus=4, priority="production", spot=True)
    second = job("prod-2", gpus=4, priority="production", spot=True, submitted=T0 + timedelta(seconds=1))
    p = run(queue=[cp, raw, first, second], fleet=fleet, offers=[], pol=policy(max_usd_per_hour=10.0))
    assert sorted((pre.job_id, pre.by_job_id) for pre in p.of_kind("preempt")) == [("cp", "prod-1"),
                                                                                  ("raw", "prod-2")]
    assert binds(p) == {"prod-1": ("n1",), "prod-2": ("n1",)}


def case_a_gang_preempts_across_nodes_of_one_zone():
    # a production gang of 2 x 8 GPU, budget for no new node: it preempts the batch job on each of two nodes
    fleet = [node("n1"), node("n2"), node("n3", offer(zone="z2"))]
    running = [bound(job("b1", gpus=8), "n1"), bound(job("b2", gpus=8), "n2"),
               bound(job("b3", gpus=8, priority="production", spot=True), "n3")]
    gang = job("prod-gang", workers=2, gpus=8, priority="production", spot=True)
    p = run(queue=[*running, gang], fleet=fleet, offers=[offer(price=10.0)], pol=policy(max_usd_per_hour=30.0))
    assert sorted(pre.job_id for pre in p.of_kind("preempt")) == ["b1", "b2"]
    assert sorted(binds(p)["prod-gang"]) == ["n1", "n2"]  # one zone: not n3's (z2, and not preemptible)
    # no zone with enough preemptible room: it waits and preempts nothing
    p = run(queue=[*running[1:], bound(job("p1", gpus=8, priority="production", spot=True), "n1"), gang],
            fleet=fleet, offers=[], pol=policy(max_usd_per_hour=30.0))
    assert not p.of_kind("preempt") and "prod-gang" in unplaced(p)


def case_preempts_where_free_room_and_a_victim_hold_the_job_exactly():
    # try_preempt skips a node whose room with every job it may take gone (its free room plus theirs)
    # does not hold the job: that bound must be exact, not a hair short. Here the room is exactly the
    # job's need in GPUs, vCPUs and memory at once (values a float holds exactly).
    fleet = [node("n1", offer(vcpus=96, memory_gib=1024.0))]  # 8 GPUs
    prod_run = bound(job("prod-run", gpus=3, vcpus=5.5, memory_gib=100.25, priority="production", spot=True), "n1")
    victim = bound(job("b", gpus=4, vcpus=90.0, memory_gib=900.5), "n1")
    # free: 1 GPU, 0.5 vCPU, 23.25 GiB; with b gone: 5 GPUs, 90.5 vCPUs, 923.75 GiB
    prod = job("prod", gpus=5, vcpus=90.5, memory_gib=923.75, priority="production", spot=True)
    p = run(queue=[prod_run, victim, prod], fleet=fleet, offers=[], pol=policy(max_usd_per_hour=10.0))
    assert [(pre.job_id, pre.by_job_id) for pre in p.of_kind("preempt")] == [("b", "prod")]
    assert binds(p) == {"prod": ("n1",)}
    # a hair more in any one of them, and there is no room: nobody is preempted
    for more in ({"gpus": 6}, {"vcpus": 90.75}, {"memory_gib": 924.0}):
        p = run(queue=[prod_run, victim, replace(prod, **{f"{k}_per_worker": v for k, v in more.items()})],
                fleet=fleet, offers=[], pol=policy(max_usd_per_hour=10.0))
        assert not p.of_kind("preempt") and "prod" in unplaced(p), more


def case_a_gang_preempts_where_free_room_and_victims_hold_its_workers_exactly():
    # The same bound on each node of a gang's zone: each of n2 and n3 holds one worker exactly once its
    # batch job goes. n1, alone in the first zone looked at, holds one worker too: no zone there.
    fleet = [node("n1", offer(zone="z1", vcpus=96, memory_gib=1024.0)),
             node("n2", offer(zone="z2", vcpus=96, memory_gib=1024.0)),
             node("n3", offer(zone="z2", vcpus=96, memory_gib=1024.0))]
    running = [bound(job(f"b{i}", gpus=4, vcpus=90.0, memory_gib=900.5), f"n{i}") for i in (1, 2, 3)]
    running += [bound(job(f"p{i}", gpus=3, vcpus=5.5, memory_gib=100.25, priority="production", spot=True), f"n{i}")
                for i in (1, 2, 3)]
    gang = job("prod-gang", workers=2, gpus=5, vcpus=90.5, memory_gib=923.75, priority="production", spot=True)
    p = run(queue=[*running, gang], fleet=fleet, offers=[], pol=policy(max_usd_per_hour=10.0))
    assert sorted(pre.job_id for pre in p.of_kind("preempt")) == ["b2", "b3"]
    assert sorted(binds(p)["prod-gang"]) == ["n2", "n3"]
    p = run(queue=[*running, replace(gang, memory_gib_per_worker=924.0)], fleet=fleet, offers=[],
            pol=policy(max_usd_per_hour=10.0))
    assert not p.of_kind("preempt") and "prod-gang" in unplaced(p)


def case_the_node_whose_victim_loses_least_wins_past_nodes_that_lose_more():
    # Nodes are asked by the least work a job on them loses, and once a node cannot beat the best so far
    # (its key is at least (1 victim, that least lost work, its name)) no later one is. n1's b1 loses 1 h,
    # n2's b2 3 h; n3 and n4 each offer a checkpointable job (15 min lost) beside one that would lose 3 h:
    # n3 wins, over n4 by name. Asked by name, n2 would stop the search at n1's key; asked by the most
    # work lost, likewise.
    fleet = [node("n1"), node("n2"), node("n3"), node("n4")]
    running = [bound(job("b1", gpus=8), "n1", started=T0 - timedelta(hours=1)),
               bound(job("b2", gpus=8), "n2", started=T0 - timedelta(hours=3))]
    for n in ("n3", "n4"):
        running += [replace(bound(job(f"c-{n}", gpus=4), n, started=T0 - timedelta(hours=3),
                                  checkpoint=T0 - timedelta(minutes=15)), checkpointable=True),
                    bound(job(f"r-{n}", gpus=4), n, started=T0 - timedelta(hours=3))]
    prod = job("prod", gpus=4, priority="production", spot=True)
    p = run(queue=[*running, prod], fleet=fleet, offers=[], pol=policy(max_usd_per_hour=10.0))
    assert [(pre.job_id, pre.by_job_id) for pre in p.of_kind("preempt")] == [("c-n3", "prod")]
    assert binds(p) == {"prod": ("n3",)}


def case_a_job_resumed_from_an_older_checkpoint_loses_only_the_work_of_its_current_run():
    # r1 was reclaimed 2 h ago with its work checkpointed, waited in the queue and was restarted 10 min ago:
    # a stop now loses the 10 minutes of this run, not the 2 h 10 min since that checkpoint (the wait and
    # the restart did no work). b2 has run for an hour without a checkpoint: r1 is the cheaper victim.
    fleet = [node("n1"), node("n2")]
    running = [replace(bound(job("r1", gpus=8), "n1", started=T0 - timedelta(minutes=10),
                             checkpoint=T0 - timedelta(hours=2)), checkpointable=True, checkpointed_work_hours=3.0),
               replace(bound(job("b2", gpus=8), "n2", started=T0 - timedelta(hours=1)), checkpointable=True)]
    prod = job("prod", gpus=8, priority="production", spot=True)
    p = run(queue=[*running, prod], fleet=fleet, offers=[], pol=policy(max_usd_per_hour=10.0))
    assert [(pre.job_id, pre.by_job_id) for pre in p.of_kind("preempt")] == [("r1", "prod")]
    assert binds(p) == {"prod": ("n1",)}


def case_a_node_asked_later_still_wins_when_the_first_takes_a_job_that_loses_more():
    # Victims are taken checkpointable first, so a node's victim need not be its job that loses least:
    # n1 is asked first (r1 there lost 6 min) but gives up c1 (2 h lost since its checkpoint); n2, asked
    # next (its job lost 30 min), must still be asked and wins.
    fleet = [node("n1"), node("n2")]
    running = [replace(bound(job("c1", gpus=4), "n1", started=T0 - timedelta(hours=3),
                             checkpoint=T0 - timedelta(hours=2)), checkpointable=True),
               bound(job("r1", gpus=4), "n1", started=T0 - timedelta(minutes=6)),
               bound(job("b2", gpus=8), "n2", started=T0 - timedelta(minutes=30))]
    prod = job("prod", gpus=4, priority="production", spot=True)
    p = run(queue=[*running, prod], fleet=fleet, offers=[], pol=policy(max_usd_per_hour=10.0))
    assert [(pre.job_id, pre.by_job_id) for pre in p.of_kind("preempt")] == [("b2", "prod")]
    assert binds(p) == {"prod": ("n2",)}


def sixteen_busy_zones(prefix: str = "b", **job_fields):  # noqa: ANN201
    """z01..z16, three 8-GPU nodes each, each node running a 2-GPU job ``PREFIX-zNN-K`` (``job_fields``, team b
    by default): 18 GPUs free a zone, no node with 8. The free-capacity search for a gang looks at 16 zones at
    most (capacity._GANG_DOMAINS), so it finds nothing, and no zone after them. ``(fleet, running)``."""
    fleet, running = [], []
    for z in range(1, 17):
        for k in range(3):
            name = f"z{z:02d}-{k}"
            fleet.append(node(name, offer(zone=f"z{z:02d}")))
            running.append(bound(job(f"{prefix}-{name}", gpus=2, **({"team": "b"} | job_fields)), name))
    return fleet, running


def case_a_gang_past_the_zones_free_capacity_looks_at_takes_free_nodes_preempting_nobody():
    # The free-capacity search for a gang looks at 16 zones at most (capacity._GANG_DOMAINS): z01..z16 each
    # have 18 GPUs free over three nodes but no node with 8, so it finds nothing. The preemption search then
    # finds z17's two free nodes; this batch gang may preempt nobody, and it looks only at nodes with a
    # worker's GPUs free (exactly 8 here).
    fleet, running = sixteen_busy_zones()
    fleet += [node("z17-0", offer(zone="z17")), node("z17-1", offer(zone="z17"))]
    gang = job("gang", workers=2, gpus=8)
    p = run(queue=[*running, gang], fleet=fleet, offers=[], pol=policy(max_usd_per_hour=10.0))
    assert not p.of_kind("preempt")
    assert sorted(binds(p)["gang"]) == ["z17-0", "z17-1"]
    (said,) = [e.considered for e in p.explanations if e.job_id == "gang"]
    assert not any("preempted  on" in line for line in said), said  # it said so, with nobody named
    assert any("nobody preempted" in line for line in said), said


def case_never_preempts_non_preemptible_or_equal_priority():
    fleet = [node("n1")]
    other_prod = bound(job("other-prod", gpus=8, priority="production", spot=True), "n1")
    batch_run = bound(job("batch-run", gpus=8), "n1")
    for victim in (other_prod,):
        p = run(queue=[victim, job("prod", gpus=8, priority="production", spot=True)], fleet=fleet, offers=[])
        assert not p.of_kind("preempt") and "prod" in unplaced(p)
    p = run(queue=[batch_run, job("batch2", gpus=8)], fleet=fleet, offers=[])
    assert not p.of_kind("preempt")


def case_a_team_within_its_guarantee_preempts_another_teams_borrowed_work():
    # teams.*.guaranteed_gpus: team a may always get 8 GPUs, preempting other teams' preemptible work of
    # its class or lower, as far as those teams are above their own guarantees.
    pol = policy(teams=(Team("a", guaranteed_gpus=8, burst_gpus=64), Team("b", guaranteed_gpus=0, burst_gpus=64)))
    fleet = [node("n1"), node("n2")]
    borrowed = replace(bound(replace(job("b-job", gpus=8), team="b"), "n1", checkpoint=T0 - timedelta(minutes=5)),
                       checkpointable=True)
    p = run(queue=[borrowed, job("a-job", gpus=8)], fleet=fleet[:1], offers=[], pol=pol)
    (pre,) = p.of_kind("preempt")
    assert (pre.job_id, pre.by_job_id, pre.reason) == ("b-job", "a-job", Reason.PREEMPTED_FOR_GUARANTEE)
    assert "team a within its guaranteed GPUs" in pre.detail and binds(p) == {"a-job": ("n1",)}
    # b at its own guarantee: nothing to take back
    at_guarantee = replace(pol, teams=(Team("a", guaranteed_gpus=8), Team("b", guaranteed_gpus=8)))
    p = run(queue=[borrowed, job("a-job", gpus=8)], fleet=fleet[:1], offers=[], pol=at_guarantee)
    assert not p.of_kind("preempt") and "a-job" in unplaced(p)
    # a already holds its guarantee: a second job of a is no claim on b's work
    mine = bound(job("a-first", gpus=8), "n2")
    p = run(queue=[mine, borrowed, job("a-job", gpus=8)], fleet=fleet, offers=[], pol=pol)
    assert not p.of_kind("preempt") and "a-job" in unplaced(p)
    # a job whose class is not preemptible (production) is never taken
    prod_b = replace(borrowed, priority="production")
    p = run(queue=[prod_b, job("a-job", gpus=8)], fleet=fleet[:1], offers=[], pol=pol)
    assert not p.of_kind("preempt")


def case_risky_spot_loses_to_on_demand_even_among_many_cheap_spot_offers():
    # 30 spot offers, all cheaper than on-demand (the first 24 by price used to be all the planner scored),
    # every one reclaimed within the hour: a 100-hour job that cannot checkpoint goes on-demand.
    spot = [offer("t1", gpus=1, price=0.05 + 0.01 * i, zone=f"z{i}") for i in range(30)]
    od = offer("t1", gpus=1, price=0.53, market=Market.ON_DEMAND)
    long_job = job("long", gpus=1, duration_hours=100.0)
    pol = policy(default_spot_interruption_probability_per_hour=1.0)
    (launch,) = run(queue=[long_job], offers=[*spot, od], pol=pol).of_kind("launch")
    assert launch.offer.market is Market.ON_DEMAND
    calm = policy(default_spot_interruption_probability_per_hour=0.0)
    (launch,) = run(queue=[long_job], offers=[*spot, od], pol=calm).of_kind("launch")
    assert launch.offer.market is Market.SPOT and launch.offer.usd_per_hour == 0.05


def case_a_job_refused_for_the_budget_at_admission_buys_once_packing_spent_less():
    # Admission charges each job its cheapest node of its own (4 x $2.50 = $10 of a $12 budget, so the fifth
    # waits); packing puts the four on one $6 node, and the fifth fits after all ($8.50 in all).
    big = offer("big", gpus=4, price=6.0, vcpus=64, memory_gib=512)
    small = offer("small", gpus=1, price=2.5, vcpus=16, memory_gib=128)
    jobs = [job(f"j{i}", gpus=1, submitted=T0 + timedelta(seconds=i)) for i in range(5)]
    p = run(queue=jobs, offers=[big, small], pol=policy(max_usd_per_hour=12.0))
    assert not p.unplaced, p.unplaced
    assert sorted((a.offer.instance_type.name, a.count) for a in p.of_kind("launch")) == [("big", 1), ("small", 1)]
    assert p.usd_per_hour_after == pytest.approx(8.5)
    assert any("admitted after the step's purchases" in line for line in p.explanation("j4").considered)


def case_buys_instead_of_preempting_when_the_budget_allows():
    fleet = [node("n1")]
    p = run(queue=[bound(job("b", gpus=8), "n1"), job("prod", gpus=8, priority="production", spot=True)],
            fleet=fleet, offers=[offer(price=3.0)])
    assert not p.of_kind("preempt") and p.of_kind("launch")


# ----------------------------------------------------------------------------- new capacity

def case_diversification_cap_forces_a_second_offer():
    offers = [offer("cheap", price=8.0), offer("dear", price=9.0)]
    queue = [job(f"j{i}", gpus=8, submitted=T0 + timedelta(seconds=i)) for i in range(4)]
    p = run(queue=queue, offers=offers, pol=policy(max_share_per_instance_type=0.5, max_share_per_zone=1.0))
    types = sorted(l.offer.instance_type.name for l in p.of_kind("launch") for _ in l.node_names)
    assert types.count("cheap") <= 3 and "dear" in types  # 0.5 x 32 + one node = 24 GPUs of one type at most
    p = run(queue=queue, offers=offers, pol=policy())
    assert {l.offer.instance_type.name for l in p.of_kind("launch")} == {"cheap"}


def case_min_distinct_offers():
    offers = [offer("a", price=8.0), offer("b", price=8.5), offer("c", price=9.0)]
    queue = [job(f"j{i}", gpus=8, submitted=T0 + timedelta(seconds=i)) for i in range(3)]
    p = run(queue=queue, offers=offers, pol=policy(min_distinct_offers=3))
    assert {l.offer.instance_type.name for l in p.of_kind("launch")} == {"a", "b", "c"}


def case_min_distinct_offers_gives_way_to_a_market_with_fewer_spot_offers():
    # One spot offer on sale (say, one zone has capacity): the rule cannot be met, so it
    # must not push the rest to on-demand; with two on sale, both are used and no more.
    od = offer("a", price=20.0, market=Market.ON_DEMAND)
    queue = [job(f"j{i}", gpus=8, submitted=T0 + timedelta(seconds=i)) for i in range(3)]
    p = run(queue=queue, offers=[offer("a", price=8.0), od], pol=policy(min_distinct_offers=3))
    assert [l.offer.market for l in p.of_kind("launch") for _ in l.node_names] == [Market.SPOT] * 3
    p = run(queue=queue, offers=[offer("a", price=8.0), offer("b", price=8.5), od], pol=policy(min_distinct_offers=3))
    launched = [(l.offer.instance_type.name, l.offer.market) for l in p.of_kind("launch") for _ in l.node_names]
    assert {name for name, _ in launched} == {"a", "b"} and all(m is Market.SPOT for _, m in launched)
    # an offer in use counts as a distinct offer even when it is no longer on sale
    fleet = [node("n1", of=offer("b", price=8.5))]
    running = bound(job("run", gpus=8), "n1")
    p = run(queue=[running, *queue[:2]], fleet=fleet, offers=[offer("a", price=8.0), od],
            pol=policy(min_distinct_offers=3))
    assert [l.offer.market for l in p.of_kind("launch") for _ in l.node_names] == [Market.SPOT] * 2


def case_a_lone_gang_is_one_unit_for_diversification():
    # A gang's nodes fail together (losing any one stops it) and sit in one zone on one offer, so
    # the diversification rules count a gang's purchase as one unit: a gang alone goes to spot
    # under rules it could never meet node by node, instead of to on-demand for its whole run.
    offers = [offer("a", price=8.0), offer("b", price=8.5, zone="z2"),
              offer("a", price=20.0, market=Market.ON_DEMAND)]
    pol = policy(min_distinct_offers=2, max_share_per_instance_type=0.5, max_share_per_zone=0.6)
    for workers in (2, 4):
        p = run(queue=[job("gang", workers=workers, gpus=8)], offers=offers, pol=pol)
        launched = [(l.offer.key, l.offer.market) for l in p.of_kind("launch") for _ in l.node_names]
        assert len(launched) == workers and {m for _, m in launched} == {Market.SPOT}, launched
        assert len({k for k, _ in launched}) == 1  # one offer: a gang is one zone
    # the next purchase is diversified against the gang: a one-node job goes to the other offer
    fleet = [node("g1", of=offers[0]), node("g2", of=offers[0])]
    gang = bound(job("gang", workers=2, gpus=8), "g1", "g2")
    p = run(queue=[gang, job("one", gpus=8)], fleet=fleet, offers=offers, pol=pol)
    assert [(l.offer.instance_type.name, l.offer.market) for l in p.of_kind("launch")] == [("b", Market.SPOT)]


def _busy(nodes):
    """A running job on all of each node's GPUs (nothing free to place on)."""
    return [bound(job(f"r-{n.node_id}", gpus=n.offer.instance_type.gpu_count), n.node_id) for n in nodes]


def case_a_gangs_allowance_under_the_type_cap_is_its_gpus_not_one_more():
    # A busy t4b spot node (4 GPUs); a gang of 3 x 2 GPUs needs two 4-GPU nodes. On t4b ($4/h) it makes
    # t4b 12 of 12 spot GPUs, past 30% x 12 + the gang's 8 = 11.6; on t4a ($6/h) t4a is 8 <= 3.6 + 8 and
    # t4b 4 <= 3.6 + 4. The gang goes to t4a, and the repair that swaps nodes for cheaper ones must not take
    # it back to t4b (it did when the gang's allowance counted one GPU too many: 12 <= 3.6 + 9).
    a, b = offer("t4a", gpus=4, price=6.0), offer("t4b", gpus=4, price=4.0)
    fleet = [node("n1", b)]
    pol = policy(max_share_per_instance_type=0.3, max_share_per_zone=1.0, max_spot_share=1.0, min_distinct_offers=1)
    p = run(queue=[*_busy(fleet), job("gang", workers=3, gpus=2)], fleet=fleet, offers=[a, b], pol=pol)
    assert [(l.offer.key, l.count) for l in p.of_kind("launch")] == [(a.key, 2)]


def case_a_gangs_allowance_under_the_zone_cap_is_its_gpus_not_one_more():
    # One zone, a 40% zone cap, three busy 1-GPU spot nodes. Gangs of 3 x 2 and 2 x 2 GPUs and a 2-GPU job
    # buy 2-GPU nodes ($2/h spot, $5/h on-demand). The zone's allowance is the biggest gang there (6 GPUs),
    # so spot in the zone may reach 0.4 x S + 6 of S spot GPUs: 9 (3 + the 3-node gang) fits (9 <= 9.6), 11
    # does not (11 > 10.4): three of the six new nodes are on-demand. Counting the gang as 7 GPUs let the
    # repair swap one more node to spot (11 <= 11.4).
    s, od = offer("t2", gpus=2, price=2.0), offer("t2", gpus=2, price=5.0, market=Market.ON_DEMAND)
    t1 = offer("t1", gpus=1, price=2.0)
    fleet = [node(f"n{i}", t1) for i in range(3)]
    queue = [job("g3", workers=3, gpus=2), job("g2", workers=2, gpus=2, submitted=T0 + timedelta(seconds=1)),
             job("one", gpus=2, submitted=T0 + timedelta(seconds=2))]
    pol = policy(max_share_per_instance_type=1.0, max_share_per_zone=0.4, max_spot_share=1.0, min_distinct_offers=1)
    p = run(queue=[*_busy(fleet), *queue], fleet=fleet, offers=[s, od, t1], pol=pol)
    market = {n: l.offer.market for l in p.of_kind("launch") for n in l.node_names}
    assert {j: {market[n] for n in nodes} for j, nodes in binds(p).items()} == {
        "g3": {Market.SPOT}, "g2": {Market.ON_DEMAND}, "one": {Market.ON_DEMAND}}


def case_a_type_new_to_the_fleet_gets_no_slack_past_its_cap():
    # An empty fleet; a gang of 3 x 2 GPUs takes two t4 spot nodes (8 GPUs: 8 <= 25% x 8 + the gang's 8).
    # A third spot t4 for the 4-GPU job would make t4 12 of 12 spot GPUs, past 0.25 x 12 + 8 = 11: it goes
    # on-demand, and the repair that swaps nodes for cheaper ones keeps it there. The type had no breach
    # before the step (it was not in the fleet), so a breach of 1 GPU is a breach; reading a missing
    # "before" as 1 GPU past the cap let the swap to spot through.
    s, od = offer("t4", gpus=4, price=12.0), offer("t4", gpus=4, price=30.0, market=Market.ON_DEMAND)
    queue = [job("gang", workers=3, gpus=2), job("one", gpus=4, submitted=T0 + timedelta(seconds=1))]
    pol = policy(max_share_per_instance_type=0.25, max_share_per_zone=1.0, max_spot_share=1.0, min_distinct_offers=1)
    p = run(queue=queue, offers=[s, od], pol=pol)
    market = {n: l.offer.market for l in p.of_kind("launch") for n in l.node_names}
    assert {j: [market[n] for n in dict.fromkeys(nodes)] for j, nodes in binds(p).items()} == {
        "gang": [Market.SPOT, Market.SPOT], "one": [Market.ON_DEMAND]}


def case_count_interruptions_work_lost_counts_only_reclaims_that_cost_work():
    offers = [offer("s", gpus=1, price=1.0), offer("od", gpus=1, price=3.0, market=Market.ON_DEMAND)]
    moved_often = replace(job("j", gpus=1), checkpointable=True, checkpoint_interval_minutes=30.0,
                          interruptions=5, work_lost_interruptions=1)

    def market(pol, j=moved_often):
        (launch,) = run(queue=[j], offers=offers, pol=pol).of_kind("launch")
        return launch.offer.market

    assert market(policy(max_interruptions_before_on_demand=2)) is Market.ON_DEMAND  # "all": 5 > 2
    assert market(policy(max_interruptions_before_on_demand=2, count_interruptions="work_lost")) is Market.SPOT
    assert market(policy(max_interruptions_before_on_demand=2, count_interruptions="work_lost"),
                  replace(moved_often, work_lost_interruptions=3)) is Market.ON_DEMAND


def case_a_job_reclaimed_in_every_spot_offer_goes_back_to_spot_not_on_demand_for_good():
    a, b = offer("a", gpus=1, price=1.0, zone="z1"), offer("b", gpus=1, price=1.1, zone="z2")
    od = offer("a", gpus=1, price=3.0, zone="z1", market=Market.ON_DEMAND)
    j = replace(job("j", gpus=1), checkpointable=True, checkpoint_interval_minutes=30.0, interruptions=2)

    def launched(avoid, forecast=None):
        p = run(queue=[replace(j, avoid_offer_keys=avoid)], offers=[a, b, od], forecast=forecast)
        return [(l.offer.zone, l.offer.market) for l in p.of_kind("launch")]

    assert launched((a.key,)) == [("z2", Market.SPOT)]  # the other zone, though dearer
    # every spot offer failed it: the avoid list no longer decides, the risk does
    assert launched((a.key, b.key)) == [("z1", Market.SPOT)]
    risk = Forecast(interruption=(OfferRisk(a.key, 60, 0.9), OfferRisk(b.key, 60, 0.05)))
    assert launched((a.key, b.key), risk) == [("z2", Market.SPOT)]


def case_zone_cap_spreads_across_zones():
    offers = [offer("g", price=8.0, zone="z1"), offer("g", price=8.2, zone="z2")]
    queue = [job(f"j{i}", gpus=8, submitted=T0 + timedelta(seconds=i)) for i in range(4)]
    p = run(queue=queue, offers=offers, pol=policy(max_share_per_zone=0.5))
    assert {l.offer.zone for l in p.of_kind("launch")} == {"z1", "z2"}


def case_risk_changes_the_choice():
    offers = [offer("risky", price=5.0), offer("steady", price=6.0)]
    j = job("j", gpus=8, duration_hours=10.0)
    calm = run(queue=[j], offers=offers)
    assert calm.of_kind("launch")[0].offer.instance_type.name == "risky"
    stormy = Forecast(interruption=(OfferRisk(offers[0].key, 60, 0.6), OfferRisk(offers[1].key, 60, 0.01)))
    p = run(queue=[j], offers=offers, forecast=stormy)
    assert p.of_kind("launch")[0].offer.instance_type.name == "steady"


def case_checkpointing_makes_risk_cheaper():
    offers = [offer("spot", price=5.0), offer("od", price=6.5, market=Market.ON_DEMAND)]
    risky = Forecast(interruption=(OfferRisk(offers[0].key, 60, 0.3),))
    long_job = job("j", gpus=8, duration_hours=8.0)
    assert run(queue=[long_job], offers=offers, forecast=risky).of_kind("launch")[0].offer.market is Market.ON_DEMAND
    ckpt = replace(long_job, checkpointable=True, checkpoint_interval_minutes=10.0)
    assert run(queue=[ckpt], offers=offers, forecast=risky).of_kind("launch")[0].offer.market is Market.SPOT


def case_a_risk_of_another_horizon_is_read_per_hour():
    """p is a probability per hour: a 24-hour model's 0.3 (a loss within a day)
    was read as 0.3 per hour, which sent a job that a 1.5%/h risk leaves on spot
    to on-demand."""
    offers = [offer("spot", price=5.0), offer("od", price=6.5, market=Market.ON_DEMAND)]
    long_job = job("j", gpus=8, duration_hours=8.0)

    def market_of(*risks):
        return run(queue=[long_job], offers=offers, forecast=Forecast(interruption=risks)).of_kind("launch")[0] \
            .offer.market

    assert market_of(OfferRisk(offers[0].key, 60, 0.3)) is Market.ON_DEMAND
    assert market_of(OfferRisk(offers[0].key, 24 * 60, 0.3)) is Market.SPOT  # 1 - 0.7 ** (1/24) = 1.5% per hour
    assert market_of(OfferRisk(offers[0].key, 24 * 60, 0.3), OfferRisk(offers[0].key, 60, 0.3)) is Market.ON_DEMAND
    assert market_of(OfferRisk(offers[0].key, 10, 0.3)) is Market.ON_DEMAND  # 1 - 0.7 ** 6 = 88% per hour
    hour = run(queue=[long_job], offers=offers, forecast=Forecast(interruption=(OfferRisk(offers[0].key, 60, 0.0148),)))
    day = run(queue=[long_job], offers=offers,
              forecast=Forecast(interruption=(OfferRisk(offers[0].key, 24 * 60, 0.3),)))
    assert day.explanations == hour.explanations  # the same expected loss, to the rounding shown


def case_recently_reclaimed_offer_is_avoided():
    offers = [offer("g", price=5.0), offer("g", price=15.0, market=Market.ON_DEMAND)]
    fc = Forecast(recent_reclaims=(OfferReclaim(offers[0].key, T0 - timedelta(minutes=5)),))
    p = run(queue=[job("j", gpus=8)], offers=offers, forecast=fc, pol=policy(reclaimed_offer_ttl_minutes=30))
    assert p.of_kind("launch")[0].offer.market is Market.ON_DEMAND
    fc_old = Forecast(recent_reclaims=(OfferReclaim(offers[0].key, T0 - timedelta(minutes=50)),))
    p = run(queue=[job("j", gpus=8)], offers=offers, forecast=fc_old, pol=policy(reclaimed_offer_ttl_minutes=30))
    assert p.of_kind("launch")[0].offer.market is Market.SPOT


def case_on_demand_base_uses_the_cheapest_move():
    offers = [offer("big", gpus=8, price=8.0), offer("big", gpus=8, price=30.0, market=Market.ON_DEMAND),
              offer("small", gpus=1, price=0.2, vcpus=8, memory_gib=64),
              offer("small", gpus=1, price=0.5, vcpus=8, memory_gib=64, market=Market.ON_DEMAND)]
    queue = [job("big-job", gpus=8)] + [job(f"s{i}", gpus=1, submitted=T0 + timedelta(seconds=i)) for i in range(2)]
    p = run(queue=queue, offers=offers, pol=policy(on_demand_base_gpus=2))
    by_market = {l.offer.instance_type.name + "/" + l.offer.market.value: l.count for l in p.of_kind("launch")}
    assert by_market == {"big/spot": 1, "small/on_demand": 2}
    assert {l.reason for l in p.of_kind("launch") if l.offer.market is Market.ON_DEMAND} == {Reason.ON_DEMAND_BASE}


def case_packs_small_jobs_into_a_bigger_node_when_cheaper():
    offers = [offer("one", gpus=1, price=1.0, vcpus=8, memory_gib=64), offer("eight", gpus=8, price=6.0)]
    queue = [job(f"s{i}", gpus=1, submitted=T0 + timedelta(seconds=i)) for i in range(8)]
    p = run(queue=queue, offers=offers)
    assert [(l.offer.instance_type.name, l.count) for l in p.of_kind("launch")] == [("eight", 1)]
    assert p.usd_per_hour_after == pytest.approx(6.0)


def case_budget_cap_holds():
    queue = [job(f"j{i}", gpus=8, submitted=T0 + timedelta(seconds=i)) for i in range(5)]
    p = run(queue=queue, offers=[offer(price=10.0)], pol=policy(max_usd_per_hour=35.0))
    assert p.usd_per_hour_after <= 35.0 and len(p.of_kind("bind")) == 3
    assert all(u.reason is Reason.BUDGET_EXCEEDED for u in p.unplaced)


# ----------------------------------------------------------------------------- scale down

def _consolidation_fleet(checkpoint_age_minutes: float, checkpointable: bool = True,
                         run_minutes: float = 60):
    fleet = [node("busy", offer(price=10.0)), node("light", offer(price=10.0))]
    on_busy = bound(job("stay", gpus=4), "busy")
    mover = replace(bound(job("mover", gpus=2), "light", started=T0 - timedelta(minutes=run_minutes),
                          checkpoint=T0 - timedelta(minutes=checkpoint_age_minutes)),
                    checkpointable=checkpointable)
    return fleet, [on_busy, mover]


def case_consolidation_when_payback_is_short():
    fleet, jobs = _consolidation_fleet(checkpoint_age_minutes=5)
    p = run(queue=jobs, fleet=fleet)
    (mig,) = p.of_kind("migrate")
    assert mig.job_id == "mover" and mig.to_node_ids == ("busy",)
    assert [t.node_id for t in p.of_kind("terminate")] == ["light"]
    assert p.of_kind("terminate")[0].reason is Reason.CONSOLIDATION
    assert p.usd_per_hour_after == pytest.approx(10.0)


def case_consolidation_declined_when_payback_too_long():
    # 30 h of work would be lost (a checkpoint 30 h into a run of 31 h; one from before the run loses only the run)
    fleet, jobs = _consolidation_fleet(checkpoint_age_minutes=60 * 30, run_minutes=60 * 31)
    p = run(queue=jobs, fleet=fleet, pol=policy(consolidation_payback_hours=2.0))
    assert not p.of_kind("migrate") and not p.of_kind("terminate")
    assert any("declined" in line for line in p.explanation("mover").considered)


def case_a_job_moved_recently_is_not_moved_again_by_consolidation():
    # Moved (restarted) 20 minutes ago: its move has not paid back yet, so it stays; 3 hours ago: it may go.
    fleet, jobs = _consolidation_fleet(checkpoint_age_minutes=5)
    pol = policy(consolidation_payback_hours=2.0)
    recent = [*jobs[:1], replace(jobs[1], first_started_at_utc=T0 - timedelta(hours=5),
                                 started_at_utc=T0 - timedelta(minutes=20))]
    p = run(queue=recent, fleet=fleet, pol=pol)
    assert not p.of_kind("migrate") and not p.of_kind("terminate")
    assert any("moved or restarted within the last 2 h" in line for line in p.explanation("mover").considered)
    settled = [*jobs[:1], replace(recent[1], started_at_utc=T0 - timedelta(hours=3))]
    assert [m.job_id for m in run(queue=settled, fleet=fleet, pol=pol).of_kind("migrate")] == ["mover"]


def case_consolidation_does_not_move_a_job_into_a_dearer_node_it_would_empty_next():
    # "dear" is under-used too (its one job cannot checkpoint, so it is not emptied now): moving the mover
    # there would free the cheap node now and move the mover again once "dear"'s job ends.
    fleet = [node("light", offer(price=10.0)), node("dear", offer(price=30.0))]
    pinned = replace(bound(job("pinned", gpus=1), "dear"), checkpointable=False)
    mover = replace(bound(job("mover", gpus=2), "light", checkpoint=T0 - timedelta(minutes=5)), checkpointable=True)
    p = run(queue=[pinned, mover], fleet=fleet)
    assert not p.of_kind("migrate") and not p.of_kind("terminate")
    # the other way round is fine: a dear under-used node is emptied into a cheaper one
    fleet = [node("light", offer(price=30.0)), node("cheap", offer(price=10.0))]
    pinned = replace(bound(job("pinned", gpus=1), "cheap"), checkpointable=False)
    p = run(queue=[pinned, mover], fleet=fleet)
    assert [(m.job_id, m.to_node_ids) for m in p.of_kind("migrate")] == [("mover", ("cheap",))]


def case_consolidation_into_an_idle_node_saves_only_the_difference():
    # The mover (2 GPUs, checkpoint 5 min ago, restart 5 min: $10 x 2/8 x 1/6 h = $0.42) could go into an idle
    # node; that node would otherwise idle out, so the move saves the emptied node's price less the idle one's.
    mover = replace(bound(job("mover", gpus=2), "light", checkpoint=T0 - timedelta(minutes=5)), checkpointable=True)
    # an identical idle node saves nothing: it is no target, so no move, and the idle node goes (before, mover
    # moved into it and "light" was terminated, a restart for nothing)
    p = run(queue=[mover], fleet=[node("light", offer(price=10.0)), node("idle", offer(price=10.0))])
    assert not p.of_kind("migrate") and [(t.node_id, t.reason) for t in p.of_kind("terminate")] == [
        ("idle", Reason.IDLE)]
    # a busy node with room beside it still takes the mover (before, the best fit stopped at the idle node:
    # 8 GPUs free against the busy node's 4, and the mover stayed until the idle node was gone)
    busy = bound(job("busy", gpus=4), "half")
    p = run(queue=[mover, busy], fleet=[node("light", offer(price=10.0)), node("idle", offer("g2", gpus=2, price=10.0)),
                                        node("half", offer(price=10.0))])
    assert [(m.job_id, m.to_node_ids) for m in p.of_kind("migrate")] == [("mover", ("half",))]
    # a cheaper idle node: $10 - $2 saved, paid back in 0.42 / 8 = 0.05 h
    small = offer("g2", gpus=2, price=2.0)
    p = run(queue=[mover], fleet=[node("light", offer(price=10.0)), node("small", small)])
    (m,) = p.of_kind("migrate")
    assert m.to_node_ids == ("small",) and m.detail == (
        "frees light ($10.00/h) into idle small ($2.00/h); migration costs $0.42, pays back in 0.1 h")
    assert [(t.node_id, t.detail) for t in p.of_kind("terminate")] == [
        ("light", "emptied by migrating 1 checkpointable job(s); saves $8.00/h")]
    # a $9 idle node: $1 saved pays back in 0.42 h, past a 0.3 h horizon (the $10 alone would in 0.04 h)
    fleet = [node("light", offer(price=10.0)), node("small", offer("g2", gpus=2, price=9.0))]
    assert run(queue=[mover], fleet=fleet, pol=policy(consolidation_payback_hours=0.5)).of_kind("migrate")
    p = run(queue=[mover], fleet=fleet, pol=policy(consolidation_payback_hours=0.3))
    assert not p.of_kind("migrate") and "consolidation of light declined: the move into idle small ($9.00/h) saves " \
        "$1.00/h, pays back in 0.4 h, policy allows 0.3 h" in p.explanation("mover").considered


def case_consolidation_into_idle_nodes_of_equal_fit_takes_the_cheapest():
    # The mover (2 GPUs of an under-used $10/h 8-GPU on-demand node) fits two idle 2-GPU nodes exactly: an
    # on-demand one at $6/h and a spot one at $1/h (risk 0.05/h x (5 min restart + half of the 4 h left, no
    # checkpoint interval) x $1 = $0.10/h). Each would otherwise idle out, so the spot one costs less for the
    # run and is taken. Before, the best fit's tie went to the first kind, on-demand: the mover went into the
    # $6/h node and a pass later moved again, to spot (benchmarks/plan_second_pass.py).
    mover = replace(bound(job("mover", gpus=2, models=("A100-80GB",), duration_hours=5.0), "light",
                          checkpoint=T0 - timedelta(minutes=5)), checkpointable=True)
    fleet = [node("light", offer(price=10.0, market=Market.ON_DEMAND)),
             node("od", offer("g2", gpus=2, price=6.0, market=Market.ON_DEMAND)),
             node("spot", offer("g2", gpus=2, price=1.0))]
    p = run(queue=[mover], fleet=fleet, pol=policy(idle_timeout_minutes=120.0))
    (m,) = p.of_kind("migrate")
    assert m.to_node_ids == ("spot",) and m.detail == (
        "frees light ($10.00/h) into idle spot ($1.00/h); migration costs $0.42, pays back in 0.0 h")
    # a dear spot node ($7/h) costs more than the on-demand one, risk or not: on-demand it is
    fleet[2] = node("spot", offer("g2", gpus=2, price=7.0))
    (m,) = run(queue=[mover], fleet=fleet, pol=policy(idle_timeout_minutes=120.0)).of_kind("migrate")
    assert m.to_node_ids == ("od",)


def case_a_node_emptied_by_consolidation_takes_the_job_a_node_like_it_was_bought_for():
    # two half-used 2-GPU nodes: r0 (checkpoint 5 min ago) moves onto n1's free GPU, as before. The queued 2-GPU
    # job q found no room when it was placed and bought a node of the same offer; it takes n0 instead, which is
    # not terminated (before: a launch and a termination of two identical nodes). The migration costs
    # $4 x 1/2 x (5 + 5) min = $0.33 and pays back in 0.33 / 4 = 0.08 h.
    g2 = offer("g2", gpus=2, price=4.0)
    r0 = replace(bound(job("r0"), "n0", checkpoint=T0 - timedelta(minutes=5)), checkpointable=True)
    r1 = bound(job("r1"), "n1")  # cannot checkpoint: n1 is not emptied
    p = run(queue=[r0, r1, job("q", gpus=2)], fleet=[node("n0", g2), node("n1", g2)], offers=[g2])
    assert not p.of_kind("launch") and not p.of_kind("terminate")
    (m,) = p.of_kind("migrate")
    assert (m.job_id, m.to_node_ids, m.detail) == (
        "r0", ("n1",), "makes room on n0 for q (a $4.00/h node not bought); migration costs $0.33, pays back in 0.1 h")
    assert binds(p)["q"] == ("n0",)
    assert p.explanation("q").considered[-1] == ("then placed on n0, emptied by consolidation in this pass: the new "
                                                 "g2 spot in aws r1/z1 ($4.00/h) chosen for it is not bought")
    # q needs 4 GPUs: its node is of another offer, and n0 goes
    g4 = offer("g4", gpus=4, price=8.0)
    p = run(queue=[r0, r1, job("q", gpus=4)], fleet=[node("n0", g2), node("n1", g2)], offers=[g2, g4])
    assert [(l.offer.key, l.count) for l in p.of_kind("launch")] == [(g4.key, 1)]
    assert [t.node_id for t in p.of_kind("terminate")] == ["n0"]
    # a node refilled counts against the disruption budget: with one, only n0 is drained (n2's r2 could move too)
    r2 = replace(bound(job("r2"), "n2", checkpoint=T0 - timedelta(minutes=5)), checkpointable=True)
    fleet = [node(n, g2) for n in ("n0", "n1", "n2", "n3")]
    queue = [r0, r1, r2, bound(job("r3"), "n3"), job("q", gpus=2)]
    assert [m.job_id for m in run(queue=queue, fleet=fleet, offers=[g2]).of_kind("migrate")] == ["r0"]
    assert len(run(queue=queue, fleet=fleet, offers=[g2], pol=policy(disruption_budget_nodes=2)).of_kind("migrate")) == 2


def case_consolidation_does_not_move_a_job_onto_a_node_still_launching():
    # "light" (8 GPUs, the mover's 2 busy) could empty into "up", a launching node whose bound job leaves room:
    # the mover would stop until "up" is ready, and for good if its launch fails. Before, it went there.
    mover = replace(bound(job("mover", gpus=2), "light", checkpoint=T0 - timedelta(minutes=5)), checkpointable=True)
    waiting = replace(job("w", gpus=4), state=JobState.BOUND, node_ids=("up",))
    up = replace(node("up", offer(price=10.0)), state=NodeState.LAUNCHING, ready_at_utc=None)
    p = run(queue=[mover, waiting], fleet=[node("light", offer(price=10.0)), up])
    assert not p.of_kind("migrate") and not p.of_kind("terminate")
    # once it is ready, the mover goes
    p = run(queue=[mover, waiting], fleet=[node("light", offer(price=10.0)), node("up", offer(price=10.0))])
    assert [(m.job_id, m.to_node_ids) for m in p.of_kind("migrate")] == [("mover", ("up",))]


def case_never_migrates_jobs_that_cannot_checkpoint():
    fleet, jobs = _consolidation_fleet(checkpoint_age_minutes=5, checkpointable=False)
    p = run(queue=jobs, fleet=fleet)
    assert not p.of_kind("migrate")


def case_disruption_budget_limits_nodes_per_pass():
    fleet = [node("busy", offer("g16", gpus=16, price=20.0))] + [node(f"l{i}", offer(price=10.0)) for i in range(3)]
    jobs = [bound(job("stay", gpus=2), "busy")] + [
        replace(bound(job(f"m{i}", gpus=2), f"l{i}", checkpoint=T0), checkpointable=True) for i in range(3)]
    p = run(queue=jobs, fleet=fleet, pol=policy(disruption_budget_nodes=2))
    assert len(p.of_kind("terminate")) == 2


def case_idle_nodes_terminated_after_timeout():
    p = run(fleet=[node("old", ready_at=T0 - timedelta(hours=1)), node("new", ready_at=T0 - timedelta(minutes=1))],
            pol=policy(idle_timeout_minutes=10))
    assert [(t.node_id, t.reason) for t in p.of_kind("terminate")] == [("old", Reason.IDLE)]


def case_jobs_refused_for_the_budget_at_admission_take_room_the_step_bought():
    """Admission charges each job a node of its own: under a $10/h budget only
    one $8 node fits, and that node has room for all three 2-GPU jobs."""
    od = offer("g8", gpus=8, price=8.0, market=Market.ON_DEMAND)
    queue = [job(f"j{i}", gpus=2, submitted=T0 + timedelta(seconds=i)) for i in range(3)]
    result = run(queue, offers=[od], pol=policy(max_usd_per_hour=10.0))
    assert [a.kind for a in result.actions] == ["launch", "bind", "bind", "bind"]
    assert result.unplaced == () and result.usd_per_hour_after == 8.0


CASES = {name[5:]: fn for name, fn in sorted(globals().items()) if name.startswith("case_")}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_rule(case):
    case()


def test_every_action_and_unplaced_job_says_why():
    offers = [offer(price=10.0)]
    queue = [job(f"j{i}", gpus=8, workers=1 + i % 2, submitted=T0 + timedelta(seconds=i)) for i in range(6)]
    p = run(queue=queue, offers=offers, pol=policy(max_usd_per_hour=45.0))
    assert p.actions and p.unplaced
    for item in (*p.actions, *p.unplaced):
        assert isinstance(item.reason, Reason) and item.detail and "\n" not in item.detail


def test_shuffled_inputs_give_an_identical_plan():
    rng = random.Random(11)
    zones = ["z1", "z2", "z3"]
    offers = [offer(f"t{g}", gpus=g, price=round(g * rng.uniform(0.8, 1.6), 3), zone=z, market=m,
                    vcpus=12 * g, memory_gib=96.0 * g, model=mod)
              for g in (1, 4, 8) for z in zones for m in Market for mod in ("A100-80GB", "L4")]
    fleet = [node(f"n{i}", offers[rng.randrange(len(offers))], ready_at=T0 - timedelta(minutes=rng.randrange(5, 90)))
             for i in range(12)]
    queue = []
    for i in range(40):
        j = job(f"j{i}", workers=rng.choice([1, 1, 1, 2]), gpus=rng.choice([1, 2, 4, 8]),
                models=rng.choice([(), ("L4",), ("A100-80GB",)]), priority=rng.choice(["batch", "production"]),
                team=rng.choice(["a", "b"]), submitted=T0 - timedelta(minutes=rng.randrange(0, 600)),
                spot=rng.choice([None, True, False]), duration_hours=rng.choice([0.5, 2.0, 8.0]))
        if rng.random() < 0.3:
            j = replace(j, deadline_utc=T0 + timedelta(hours=rng.randrange(2, 48)))
        if rng.random() < 0.4:
            j = replace(j, checkpointable=True, checkpoint_interval_minutes=30.0)
        queue.append(j)
    # a few running jobs so preemption and consolidation have something to consider
    queue[0] = bound(replace(queue[0], workers=1, gpus_per_worker=1, gpu_models=()), fleet[0].node_id)
    pol = policy(max_usd_per_hour=150.0, max_share_per_instance_type=0.5, min_distinct_offers=3,
                 on_demand_base_gpus=8, aging_priority_per_hour=5.0)
    risk = Forecast(interruption=tuple(OfferRisk(o.key, 60, rng.uniform(0, 0.3)) for o in offers[::3]))
    base = run(queue, fleet, offers, pol, risk)
    assert base.actions
    for _ in range(5):
        q, f, o = list(queue), list(fleet), list(offers)
        rng.shuffle(q), rng.shuffle(f), rng.shuffle(o)
        assert run(q, f, o, pol, risk) == base


def test_gpu_memory_constraint_holds_in_leftovers_of_new_nodes():
    offers = [offer("small-mem", model="A10G", gpus=8, price=1.0, gpu_memory_gib=24.0),
              offer("a100", model="A100-80GB", gpus=1, price=9.0, vcpus=12, memory_gib=128)]
    queue = [job("any", gpus=1, submitted=T0), replace(job("big", gpus=1, submitted=T0 + timedelta(seconds=1)),
                                                       gpu_memory_gib_per_gpu=40.0)]
    p = run(queue=queue, offers=offers)
    launched = {n: l.offer.instance_type.name for l in p.of_kind("launch") for n in l.node_names}
    assert launched[binds(p)["big"][0]] == "a100"


def test_planned_fleet_places_a_new_job_like_a_full_plan():
    from fleetctl.planner import PlannedFleet

    offers = [offer("g8", price=8.0), offer("g1", gpus=1, price=1.5, vcpus=12, memory_gib=128)]
    queue = [job(f"j{i}", gpus=[1, 4, 8][i % 3], submitted=T0 + timedelta(seconds=i)) for i in range(6)]
    fleet = [node("n1")]
    pf = PlannedFleet(now=T0, queue=queue, fleet=fleet, offers=offers, forecast=None, policy=policy())
    assert pf.plan == run(queue, fleet, offers)
    newcomer = job("late", gpus=1, submitted=T0 + timedelta(minutes=5))
    step = pf.place(newcomer)
    (bind,) = step.of_kind("bind")
    assert bind.job_id == "late" and step.usd_per_hour_after >= step.usd_per_hour_before
    # a huge gang that cannot fit anywhere says why
    step = pf.place(job("huge", gpus=16))
    assert not step.actions and step.unplaced[0].reason is Reason.GANG_DOES_NOT_FIT



@pytest.mark.parametrize("minutes, p, hourly", [
    (60, 0.3, 0.3), (24 * 60, 0.3, 1 - 0.7 ** (1 / 24)), (30, 0.5, 0.75), (24 * 60, 1.0, 1.0), (24 * 60, 0.0, 0.0),
    (10, 1e-12, 6e-12),
])
def test_offer_risk_per_hour_assumes_a_constant_hazard(minutes, p, hourly):
    assert OfferRisk("k", minutes, p).probability_per_hour == pytest.approx(hourly, rel=1e-9, abs=0)


def test_a_retry_of_the_purchase_step_projects_the_spot_the_previous_try_bought(monkeypatch):
    """When a try of the purchase step breaks diversification, the next try
    projects a little less spot than the previous try *bought*, not than the
    fleet held before the step (read after the step was rolled back: on an
    empty fleet that is 0, which skipped every projected retry and went
    straight to the strict rule). A random world of a property search."""
    from fleetctl.planner import core

    offers = [offer("t4", gpus=4, price=3.504, zone="z0", market=Market.ON_DEMAND),
              offer("t4", gpus=4, price=4.688, zone="z1", market=Market.ON_DEMAND),
              offer("t4", gpus=4, price=2.103, zone="z1"),
              offer("t1", gpus=1, price=1.475, zone="z0", market=Market.ON_DEMAND),
              offer("t1", gpus=1, price=0.43, zone="z0"),
              offer("t1", gpus=1, price=0.989, zone="z1", market=Market.ON_DEMAND),
              offer("t1", gpus=1, price=0.364, zone="z1")]
    shapes = [(1, 1, "batch", "b"), (1, 2, "batch", "b"), (1, 1, "production", "a"), (1, 1, "batch", "a"),
              (1, 1, "batch", "b"), (1, 1, "production", "a"), (1, 1, "production", "a"), (1, 2, "production", "a"),
              (2, 4, "production", "b"), (1, 1, "batch", "a"), (1, 2, "batch", "a"), (1, 1, "production", "b"),
              (1, 4, "batch", "b"), (1, 4, "batch", "b"), (1, 1, "production", "a"), (1, 1, "batch", "a")]
    queue = [job(f"j{i}", workers=w, gpus=g, priority=p, team=t) for i, (w, g, p, t) in enumerate(shapes)]
    pol = policy(max_share_per_zone=0.34, min_distinct_offers=2)

    steps = []  # per purchase step: its tries as (strict, projected spot GPUs, spot GPUs held after the try)
    buy_in_order, buy_pass = core._Pass._buy_in_order, core._Pass._buy_pass

    def recording_step(self, *args, **kwargs):
        steps.append([])
        return buy_in_order(self, *args, **kwargs)

    def recording_try(self, *args, **kwargs):
        result = buy_pass(self, *args, **kwargs)
        steps[-1].append((self.strict, self.projected_spot_gpus, self.spot_gpus))
        return result

    monkeypatch.setattr(core._Pass, "_buy_in_order", recording_step)
    monkeypatch.setattr(core._Pass, "_buy_pass", recording_try)
    result = plan(now=T0, queue=queue, fleet=[], offers=offers, forecast=None, policy=pol)

    reductions = [(before, after) for tries in steps for before, after in zip(tries, tries[1:])
                  if not before[0] and not after[0] and after[1] < before[1]]
    assert reductions, steps
    for (_, projected, bought), (_, next_projected, _) in reductions:
        assert next_projected == min(int(projected * 0.9), bought)
    assert not result.unplaced


def test_a_job_avoids_offers_that_reclaimed_it_beyond_the_shortlist():
    """40 spot offers and no on-demand: every shortlisted one (the 24 cheapest
    per GPU and per node, the safest spot) reclaimed this job before, two dearer
    ones did not. The shortlist's options were all avoided, so the avoid list
    was dropped as if nothing else were left, and the job bought the cheapest
    offer that had reclaimed it. Now the full list is tried and it buys one
    that did not."""
    offers = [offer("g8", gpus=8, price=10.0 + k / 10, zone=f"z{k:02d}") for k in range(40)]
    avoid = tuple(o.key for o in offers[:38])
    p = plan(now=T0, queue=[replace(job("j", gpus=8), avoid_offer_keys=avoid)], fleet=(), offers=offers,
             forecast=None, policy=policy())
    assert [launch.offer.key for launch in p.of_kind("launch")] == [offers[38].key]
    # with every offer avoided, the avoid list gives way (a preference, not a ban): the cheapest
    everywhere = tuple(o.key for o in offers)
    p = plan(now=T0, queue=[replace(job("j", gpus=8), avoid_offer_keys=everywhere)], fleet=(), offers=offers,
             forecast=None, policy=policy())
    assert [launch.offer.key for launch in p.of_kind("launch")] == [offers[0].key]


def test_a_cpu_only_job_weighs_the_risk_of_spot_as_a_gpu_job_does():
    """A CPU-only job's expected loss is its share of the node's vCPUs: the
    choice of offers priced it so, but the repair after the buy step
    (``_downsize_nodes``) priced no risk on a node without GPUs and swapped the
    on-demand node it chose for the risky spot one; the plan's risk ignored it
    too. 10 h without checkpoints at p = 0.3/h on a 4.0 USD/h spot node: 4.0 +
    0.3 x 5 h x 4.0 = 10.0 USD/h expected, against 6.5 on-demand."""
    spot = offer("c64", gpus=0, model=None, vcpus=64, memory_gib=256, price=4.0)
    od = offer("c64", gpus=0, model=None, vcpus=64, memory_gib=256, price=6.5, market=Market.ON_DEMAND)
    risky = Forecast(interruption=(OfferRisk(spot.key, 60, 0.3),))
    long_job = job("cpu", gpus=0, vcpus=64, memory_gib=64, duration_hours=10.0)
    (launch,) = run(queue=[long_job], offers=[spot, od], forecast=risky).of_kind("launch")
    assert launch.offer.market is Market.ON_DEMAND
    # checkpoints every 10 minutes: 4.0 + 0.3 x 5 min x 4.0 = 4.1 USD/h, so spot
    ckpt = replace(long_job, checkpointable=True, checkpoint_interval_minutes=10.0)
    (launch,) = run(queue=[ckpt], offers=[spot, od], forecast=risky).of_kind("launch")
    assert launch.offer.market is Market.SPOT
    # half the node's vCPUs carry half its price's expected loss: still on-demand (4.0 + 0.3 x 5 x 2.0 = 7.0)
    half = replace(long_job, vcpus_per_worker=32)
    (launch,) = run(queue=[half], offers=[spot, od], forecast=risky).of_kind("launch")
    assert launch.offer.market is Market.ON_DEMAND
