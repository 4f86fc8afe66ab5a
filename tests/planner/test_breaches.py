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
