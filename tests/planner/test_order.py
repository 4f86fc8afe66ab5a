"""Queue order (planner/order.py) on small hand-computed inputs: bands after
aging and boosts, fair share between teams, the order within a team, burst
limits."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import PriorityClass, Team
from fleetctl.planner.order import QueueOrder, TeamUsage, ceil_div, effective_band, over_burst
from tests.builders import T0, job, policy

# batch 100 < high 500 < production 1000
CLASSES = (PriorityClass("production", 1000), PriorityClass("high", 500), PriorityClass("batch", 100))
VALUES = (100, 500, 1000)


@pytest.mark.parametrize("aging, waited, boost, band", [
    (0.0, timedelta(hours=1000), 0.0, 100),  # no aging, no boost: its own class
    (0.5, timedelta(hours=2000), 0.0, 1000),  # 100 + 0.5 x 2000 = 1100: a rate below one still ages
    (9.0, timedelta(hours=100), 0.0, 1000),  # 100 + 9 x 100 = 1000 exactly: reaches production
    (9.0, timedelta(hours=100) - timedelta(seconds=36), 0.0, 500),  # 999.91: the highest class reached is 500
    (9.0, timedelta(hours=45), 0.0, 500),  # 100 + 405 = 505: past 500 only
    (9000.0, timedelta(0), 0.0, 100),  # just queued: has waited nothing
    (9000.0, -timedelta(hours=1), 0.0, 100),  # queued after now (clock skew): waited nothing, not less
    (9000.0, -timedelta(hours=1), 400.0, 500),  # the same with a boost: 100 + 0 + 400, the skew takes nothing off
    (9.0, timedelta(hours=44, minutes=30), 0.0, 500),  # 100 + 9 x 44.5 = 500.5: part of an hour counts
    (0.0, timedelta(hours=1000), 400.0, 500),  # a requeue boost alone lifts it: 100 + 400
    (1.0, timedelta(hours=100), 300.0, 500),  # aging and boost add up: 100 + 100 + 300
    (1.0, timedelta(hours=100), 800.0, 1000),  # 100 + 100 + 800
], ids=["no-aging", "slow-aging", "exactly-at-a-class", "just-below-a-class", "past-a-middle-class", "just-queued",
        "queued-in-the-future", "queued-in-the-future-with-a-boost", "part-of-an-hour", "boost-alone", "aging-plus-boost", "aging-plus-boost-to-the-top"])
def test_effective_band_is_the_highest_class_value_reached(aging, waited, boost, band):
    pol = policy(priority_classes=CLASSES, aging_priority_per_hour=aging)
    j = replace(job("j", priority="batch", submitted=T0 - waited), priority_boost=boost)
    assert effective_band(j, pol, T0, VALUES) == band


def test_effective_band_counts_the_wait_since_the_last_requeue_and_never_lowers_the_own_class():
    pol = policy(priority_classes=CLASSES, aging_priority_per_hour=1.0)
    requeued = replace(job("j", submitted=T0 - timedelta(hours=1000)), requeued_at_utc=T0 - timedelta(hours=10))
    assert effective_band(requeued, pol, T0, VALUES) == 100  # 100 + 10, not 100 + 1000
    prod = job("p", priority="production", submitted=T0 - timedelta(hours=1000))
    assert effective_band(prod, pol, T0, VALUES) == 1000  # nothing above it
    negative = policy(priority_classes=CLASSES, aging_priority_per_hour=-5.0)
    assert effective_band(job("n", submitted=T0 - timedelta(hours=100)), negative, T0, VALUES) == 100


def test_team_usage_adds_and_subtracts_every_dimension_per_worker():
    u = TeamUsage()
    j = job("j", workers=3, gpus=2, vcpus=4, memory_gib=16)
    u.add(j)
    assert (u.gpus, u.vcpus, u.memory_gib) == (6, 12, 48)
    u.add(j, workers=1, sign=-1)
    assert (u.gpus, u.vcpus, u.memory_gib) == (4, 8, 32)
    u.add(j, sign=-1)
    assert (u.gpus, u.vcpus, u.memory_gib) == (-2, -4, -16)


def order_of(jobs, usage=None, totals=(16.0, 100.0, 1000.0), **pol):
    return [j.job_id for j in QueueOrder(list(jobs), policy(**pol), T0, usage or {}, totals)]


def test_within_a_team_boosted_first_then_earliest_deadline_then_submission_then_id():
    jobs = [
        job("late-sub", submitted=T0 - timedelta(hours=1)),
        job("early-sub-b", submitted=T0 - timedelta(hours=2)),
        job("early-sub-a", submitted=T0 - timedelta(hours=2)),
        replace(job("far-deadline", submitted=T0), deadline_utc=T0 + timedelta(hours=9)),
        replace(job("near-deadline", submitted=T0), deadline_utc=T0 + timedelta(hours=3)),
        replace(job("boosted", submitted=T0), priority_boost=1.0),  # 101: still in the batch band
    ]
    assert order_of(jobs) == ["boosted", "near-deadline", "far-deadline", "early-sub-a", "early-sub-b", "late-sub"]


def test_bands_are_served_highest_first_and_each_job_knows_its_band():
    jobs = [job("b1", priority="batch"), job("p1", priority="production", team="b"),
            job("aged", priority="batch", submitted=T0 - timedelta(hours=100))]
    order = QueueOrder(jobs, policy(aging_priority_per_hour=9.0), T0, {}, (16.0, 100.0, 1000.0))
    assert [j.job_id for j in order] == ["aged", "p1", "b1"]  # aged: 100 + 900 = 1000, team a before b
    assert order.band_of == {"aged": 1000, "p1": 1000, "b1": 100}


# totals 16 GPUs, 100 vCPUs, 1000 GiB: each team's dominant share is named in its comment
@pytest.mark.parametrize("usage, expected", [
    ({"a": TeamUsage(8, 10, 100), "b": TeamUsage(2, 60, 100), "c": TeamUsage(2, 10, 700)},
     ["a", "b", "c"]),  # a 8/16 = 0.5 (GPUs), b 60/100 = 0.6 (vCPUs), c 700/1000 = 0.7 (memory)
    ({"a": TeamUsage(12, 10, 100), "b": TeamUsage(2, 70, 100), "c": TeamUsage(2, 10, 650)},
     ["c", "b", "a"]),  # a 0.75, b 0.7, c 0.65
    ({"a": TeamUsage(1, 55, 100), "b": TeamUsage(1, 10, 500), "c": TeamUsage(9, 10, 100)},
     ["b", "a", "c"]),  # a 0.55, b 0.5, c 0.5625
    ({"b": TeamUsage(1, 1, 1)}, ["a", "c", "b"]),  # a and c use nothing: tie broken by name
], ids=["gpus-vcpus-memory", "memory-vcpus-gpus", "vcpus-and-memory-close", "unused-teams-by-name"])
def test_the_team_with_the_lowest_dominant_share_goes_first(usage, expected):
    teams = (Team("a"), Team("b"), Team("c"))
    jobs = [job(f"{t}", team=t) for t in ("c", "b", "a")]
    assert order_of(jobs, usage=usage, teams=teams) == expected


def test_weights_divide_the_share_and_a_weight_of_zero_counts_as_one():
    usage = {"a": TeamUsage(8, 0, 0), "b": TeamUsage(4, 0, 0), "c": TeamUsage(3, 0, 0)}
    jobs = [job(t, team=t) for t in ("a", "b", "c")]
    # a 0.5 / 4 = 0.125, b 0.25 / 0.5 = 0.5, c 0.1875 / 1 (weight 0) = 0.1875
    teams = (Team("a", weight=4.0), Team("b", weight=0.5), Team("c", weight=0.0))
    assert order_of(jobs, usage=usage, teams=teams) == ["a", "c", "b"]


def test_a_weight_between_zero_and_one_raises_the_share():
    usage = {"a": TeamUsage(4, 0, 0), "b": TeamUsage(6, 0, 0)}
    jobs = [job(t, team=t) for t in ("a", "b")]
    # a 0.25 / 0.5 = 0.5 is above b's 0.375 / 1: b first, though a uses fewer GPUs
    teams = (Team("a", weight=0.5), Team("b", weight=1.0))
    assert order_of(jobs, usage=usage, teams=teams) == ["b", "a"]


def test_a_team_below_its_guarantee_goes_first_and_one_at_it_does_not():
    usage = {"a": TeamUsage(8, 0, 0), "b": TeamUsage(12, 0, 0), "c": TeamUsage(4, 0, 0)}
    jobs = [job(t, team=t) for t in ("a", "b", "c")]
    # b is below its 16: first despite the largest share; a is at its 8 and c has none: by share
    teams = (Team("a", guaranteed_gpus=8), Team("b", guaranteed_gpus=16), Team("c"))
    assert order_of(jobs, usage=usage, teams=teams) == ["b", "c", "a"]


def test_charging_a_placement_moves_the_team_back_in_the_order():
    teams = (Team("a"), Team("b"))
    jobs = [job("a1", team="a", gpus=8, submitted=T0), job("a2", team="a", gpus=8, submitted=T0 + timedelta(seconds=1)),
            job("b1", team="b", gpus=4)]
    usage = {"b": TeamUsage(2, 0, 0)}
    order = QueueOrder(jobs, policy(teams=teams), T0, usage, (16.0, 100.0, 1000.0))
    seen = []
    for j in order:
        seen.append(j.job_id)
        order.charge(j)  # a1 takes a to 8/16 = 0.5; b1 takes b to 6/16 = 0.375
    assert seen == ["a1", "b1", "a2"]
    assert (usage["a"].gpus, usage["b"].gpus) == (16, 6)
    order.charge(jobs[0], sign=-1)
    assert usage["a"].gpus == 8


def test_a_total_of_zero_counts_as_one():
    """An empty fleet with a queue of no GPUs: no division by zero, and a
    dimension without a total counts what a team uses of it as a share of one."""
    usage = {"a": TeamUsage(1, 60, 0), "b": TeamUsage(0, 80, 0)}
    jobs = [job(t, team=t, gpus=0) for t in ("a", "b")]
    # a: max(1 / 1, 60 / 100) = 1.0; b: 0.8
    assert order_of(jobs, usage=usage, totals=(0.0, 100.0, 0.0), teams=(Team("a"), Team("b"))) == ["b", "a"]
    # a total below one is a total: a's 0.2 of 0.5 vCPU is 0.4, above b's 5 of 16 GPUs (0.3125)
    usage = {"a": TeamUsage(4, 0.2, 0), "b": TeamUsage(5, 0, 0)}
    assert order_of(jobs, usage=usage, totals=(16.0, 0.5, 1000.0), teams=(Team("a"), Team("b"))) == ["b", "a"]


@pytest.mark.parametrize("used, gpus, burst, said", [
    (None, 8, 8, None),  # nothing used: exactly the limit is allowed
    (4, 4, 8, None),  # 4 + 4 = 8: at the limit
    (4, 5, 8, "team a uses 4 GPUs; 5 more would pass its burst limit of 8"),
    (7.5, 1, 8, "team a uses 7.5 GPUs; 1 more would pass its burst limit of 8"),
    (100, 8, None, None),  # no limit
], ids=["empty", "at-the-limit", "past-the-limit", "fractional-use", "no-limit"])
def test_over_burst_names_the_use_the_job_and_the_limit(used, gpus, burst, said):
    usage = {} if used is None else {"a": TeamUsage(used, 0, 0)}
    usage["b"] = TeamUsage(100, 0, 0)  # another team's use does not count
    pol = policy(teams=(Team("a", burst_gpus=burst), Team("b", burst_gpus=0)))
    assert over_burst(job("j", gpus=gpus), usage, pol) == said


def test_ceil_div_rounds_up_and_division_by_zero_is_infinite():
    assert [ceil_div(a, 4) for a in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert ceil_div(3, 0) == float("inf")
