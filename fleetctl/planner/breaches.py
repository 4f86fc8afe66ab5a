"""Limits of the policy that the fleet already breaks.

A policy can be tightened under a running fleet (a lower budget, a smaller
team burst, less spot). The planner then buys nothing that adds to a breach,
but it does not stop running work to meet a limit: that is the platform
team's call. ``policy_breaches`` names each breach so ``plan`` and ``status``
can say so instead of reporting a fleet that matches the policy. Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from fleetctl.model import Job, JobState, Market, Node, NodeState, Offer, Policy

#: What the planner does about a breach (printed after them).
BREACH_NOTE = ("fleetctl buys nothing that adds to these and does not stop running jobs to meet them: cancel "
               "jobs (fleetctl jobs cancel) or raise the limit")


def policy_breaches(fleet: Iterable[Node], jobs: Iterable[Job], policy: Policy) -> tuple[str, ...]:
    """One line per policy limit the current fleet and its jobs exceed."""
    held = [n for n in fleet if n.state is not NodeState.GONE]
    usd = sum(n.offer.usd_per_hour for n in held)
    gpus = sum(n.offer.instance_type.gpu_count for n in held)
    spot = sum(n.offer.instance_type.gpu_count for n in held if n.offer.market is Market.SPOT)
    out = []
    if policy.max_usd_per_hour is not None and usd > policy.max_usd_per_hour + 1e-9:
        out.append(f"the fleet costs ${usd:.2f}/h, above budget.max_usd_per_hour (${policy.max_usd_per_hour:.2f}/h)")
    if policy.max_gpus is not None and gpus > policy.max_gpus:
        out.append(f"the fleet holds {gpus} GPUs, above budget.max_gpus ({policy.max_gpus})")
    if gpus and spot / gpus > policy.max_spot_share + 1e-9:
        out.append(f"{spot} of the fleet's {gpus} GPUs are spot ({spot / gpus:.0%}), above markets.max_spot_share "
                   f"({policy.max_spot_share:.0%})")
    used: dict[str, int] = {}
    for job in jobs:
        if job.state in (JobState.BOUND, JobState.RUNNING):
            used[job.team] = used.get(job.team, 0) + job.gpus
    for team, team_gpus in sorted(used.items()):
        burst = policy.team(team).burst_gpus
        if burst is not None and team_gpus > burst:
            out.append(f"team {team} uses {team_gpus} GPUs, above its burst_gpus ({burst})")
    return tuple(out)


def policy_gaps(jobs: Iterable[Job], offers: Iterable[Offer], policy: Policy) -> tuple[str, ...]:
    """What a policy edit may have left behind, for a reviewer to see in the
    plan: active jobs of a team or priority class the policy no longer names
    (a rename or a removal in a pull request), and allowed regions where the
    market sells nothing (a typo such as us-eest-1)."""
    active = [j for j in jobs if j.state in (JobState.QUEUED, JobState.BOUND, JobState.RUNNING)]
    out = []
    if policy.teams:
        named = {t.name for t in policy.teams}
        for team, n in sorted(Counter(j.team for j in active if j.team not in named).items()):
            out.append(f"{n} active job(s) of team {team}, which the policy does not name: no guarantee and no "
                       "burst limit apply to them (was the team renamed or removed?)")
    classes = {c.name for c in policy.priority_classes}
    for name, n in sorted(Counter(j.priority for j in active if j.priority not in classes).items()):
        out.append(f"{n} active job(s) name priority class {name}, which the policy does not define: they are "
                   f"planned as {policy.default_priority_class} (default_priority_class)")
    for region in unsold_regions(offers, policy):
        out.append(f"region {region} (policy regions): the allowed providers sell nothing there on this "
                   "market (a typo, or another provider's region?)")
    return tuple(out)


def unsold_regions(offers: Iterable[Offer], policy: Policy) -> tuple[str, ...]:
    """The policy's allowed regions where no offer of an allowed provider is
    sold (``plan`` notes them; ``policy validate`` warns of them)."""
    if not policy.regions:
        return ()
    sold = {o.region for o in offers if not policy.providers or o.provider in policy.providers}
    return tuple(region for region in policy.regions if region not in sold)
