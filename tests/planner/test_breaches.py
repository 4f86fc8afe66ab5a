"""policy_breaches: the limits a running fleet already breaks, each named."""

from __future__ import annotations

from dataclasses import replace

from fleetctl.model import JobState, Market, NodeState, Team
from fleetctl.planner.breaches import policy_breaches
from tests.builders import job, node, offer, policy


def test_each_broken_limit_is_named_and_a_fleet_within_them_has_none():
    spot, od = offer("g8", gpus=8, price=10.0), offer("g8", gpus=8, price=30.0, market=Market.ON_DEMAND)
    fleet = [node("a", of=spot), node("b", of=od), node("gone", of=od, state=NodeState.GONE)]
    jobs = [job("x", gpus=8, team="a", state=JobState.RUNNING, node_ids=("a",)),
            job("y", gpus=8, team="a", state=JobState.BOUND, node_ids=("b",)),
            job("z", gpus=8, team="b")]  # queued: uses nothing yet
    assert policy_breaches(fleet, jobs, policy()) == ()
    tight = replace(policy(), max_usd_per_hour=35.0, max_gpus=8, max_spot_share=0.25,
                    teams=(Team("a", guaranteed_gpus=0, burst_gpus=12), Team("b", burst_gpus=1)))
    assert policy_breaches(fleet, jobs, tight) == (
        "the fleet costs $40.00/h, above budget.max_usd_per_hour ($35.00/h)",
        "the fleet holds 16 GPUs, above budget.max_gpus (8)",
        "8 of the fleet's 16 GPUs are spot (50%), above markets.max_spot_share (25%)",
        "team a uses 16 GPUs, above its burst_gpus (12)",
    )


def test_a_policy_edit_that_leaves_jobs_or_regions_behind_is_noted():
    """A pull request renames a team, drops a class, or mistypes a region:
    plan says so (it used to plan those jobs silently with no limit)."""
    from fleetctl.planner.breaches import policy_gaps

    jobs = [job("x", team="a"), job("y", team="ml-product"), job("z", team="ml-product", priority="urgent"),
            job("done", team="gone", state=JobState.SUCCEEDED)]
    offers = [offer(region="us-east-1")]
    assert policy_gaps(jobs, offers, policy()) == (
        "2 active job(s) of team ml-product, which the policy does not name: no guarantee and no burst limit "
        "apply to them (was the team renamed or removed?)",
        "1 active job(s) name priority class urgent, which the policy does not define: they are planned as "
        "batch (default_priority_class)",
    )
    regions = replace(policy(), regions=("us-east-1", "us-eest-1"))
    assert policy_gaps(jobs[:1], offers, regions) == (
        "region us-eest-1 (policy regions): the allowed providers sell nothing there on this market (a typo, or "
        "another provider's region?)",)
    gcp_region = replace(policy(), providers=("aws",), regions=("us-east-1", "us-central1"))
    assert policy_gaps(jobs[:1], [*offers, offer(region="us-central1", provider="gcp")], gcp_region) == (
        "region us-central1 (policy regions): the allowed providers sell nothing there on this market (a typo, or "
        "another provider's region?)",)


def test_a_fleet_exactly_at_each_limit_breaks_none():
    od = offer("g8", gpus=8, price=30.0, market=Market.ON_DEMAND)
    fleet = [node("s1", of=offer("g4", gpus=4, price=10.0)), node("o1", of=od, state=NodeState.DRAINING),
             node("s2", of=offer("g4", gpus=4, price=10.0), state=NodeState.LAUNCHING)]
    jobs = [job("x", gpus=8, team="a", state=JobState.RUNNING), job("y", workers=2, gpus=2, team="b",
                                                                     state=JobState.BOUND)]
    at = replace(policy(), max_usd_per_hour=50.0, max_gpus=16, max_spot_share=0.5,
                 teams=(Team("a", burst_gpus=8), Team("b", burst_gpus=4)))
    assert policy_breaches(fleet, jobs, at) == ()
    # one past each: $50.01/h, 17 GPUs, 9 of 17 spot, 9 and 5 GPUs for the teams
    fleet.append(node("s3", of=offer("g1", gpus=1, price=0.01)))
    jobs += [job("x2", gpus=1, team="a", state=JobState.RUNNING), job("y2", gpus=1, team="b", state=JobState.BOUND),
             job("q", gpus=8, team="b"), job("done", gpus=8, team="b", state=JobState.SUCCEEDED)]
    assert policy_breaches(fleet, jobs, at) == (
        "the fleet costs $50.01/h, above budget.max_usd_per_hour ($50.00/h)",
        "the fleet holds 17 GPUs, above budget.max_gpus (16)",
        "9 of the fleet's 17 GPUs are spot (53%), above markets.max_spot_share (50%)",
        "team a uses 9 GPUs, above its burst_gpus (8)",
        "team b uses 5 GPUs, above its burst_gpus (4)",
    )


def test_rounding_noise_is_no_breach_and_teams_are_named_in_order():
    # $0.1 + $0.2 is 0.30000000000000004 in floating point: not above a budget of $0.30
    fleet = [node("a", of=offer("g1", gpus=1, price=0.1)), node("b", of=offer("g2", gpus=2, price=0.2))]
    # a spot share of 1/3 (0.333...) within a billionth of 0.333333333: at the limit, not past it
    fleet.append(node("c", of=offer("g6", gpus=6, price=0.0, market=Market.ON_DEMAND)))
    jobs = [job("z", gpus=2, team="z", state=JobState.RUNNING), job("m", gpus=3, team="m", state=JobState.RUNNING)]
    pol = replace(policy(), max_usd_per_hour=0.3, max_spot_share=0.333333333,
                  teams=(Team("z", burst_gpus=1), Team("m", burst_gpus=2)))
    assert policy_breaches(fleet, jobs, pol) == ("team m uses 3 GPUs, above its burst_gpus (2)",
                                                 "team z uses 2 GPUs, above its burst_gpus (1)")
    pol = replace(pol, max_usd_per_hour=0.25, max_spot_share=0.25)
    assert policy_breaches(fleet, jobs, pol)[:2] == (
        "the fleet costs $0.30/h, above budget.max_usd_per_hour ($0.25/h)",
        "3 of the fleet's 9 GPUs are spot (33%), above markets.max_spot_share (25%)")


def test_an_empty_fleet_breaks_no_spot_share_and_a_team_without_a_limit_none():
    pol = replace(policy(), max_spot_share=0.0, max_usd_per_hour=0.0, max_gpus=0, teams=(Team("a"),))
    assert policy_breaches([], [job("x", gpus=64, team="a", state=JobState.RUNNING),
                                job("y", gpus=8, team="unnamed", state=JobState.RUNNING)], pol) == ()
    gone = [node("g", of=offer(price=10.0), state=NodeState.GONE)]
    assert policy_breaches(gone, [], pol) == ()


def test_policy_gaps_count_active_jobs_only_in_name_order_and_no_teams_means_none_named():
    from fleetctl.planner.breaches import policy_gaps

    jobs = [job("1", team="zeta", priority="zz", state=JobState.RUNNING), job("2", team="eta", priority="yy"),
            job("3", team="zeta", priority="zz", state=JobState.BOUND),
            job("4", team="old", priority="old", state=JobState.FAILED),
            job("5", team="old", priority="old", state=JobState.CANCELLED)]
    assert policy_gaps(jobs, [offer()], policy()) == (
        "1 active job(s) of team eta, which the policy does not name: no guarantee and no burst limit apply to them "
        "(was the team renamed or removed?)",
        "2 active job(s) of team zeta, which the policy does not name: no guarantee and no burst limit apply to "
        "them (was the team renamed or removed?)",
        "1 active job(s) name priority class yy, which the policy does not define: they are planned as batch "
        "(default_priority_class)",
        "2 active job(s) name priority class zz, which the policy does not define: they are planned as batch "
        "(default_priority_class)",
    )
    assert policy_gaps(jobs[1:2], [offer()], replace(policy(), teams=())) == (
        "1 active job(s) name priority class yy, which the policy does not define: they are planned as batch "
        "(default_priority_class)",)
    assert policy_gaps([job("ok", team="a", priority="production")], [], policy()) == ()


def test_unsold_regions_keep_the_policys_order_and_any_provider_counts_when_none_is_named():
    from fleetctl.planner.breaches import unsold_regions

    offers = [offer(region="r2", provider="gcp"), offer(region="r1")]
    assert unsold_regions(offers, replace(policy(), regions=("r3", "r2", "r1", "r0"))) == ("r3", "r0")
    assert unsold_regions(offers, replace(policy(), regions=("r2", "r1"), providers=("aws",))) == ("r2",)
    assert unsold_regions(offers, replace(policy(), regions=("r2", "r1"), providers=("aws", "gcp"))) == ()
    assert unsold_regions([], policy()) == ()  # no regions named: every region is allowed
