"""Queue order: priority bands with aging, then guarantees, weighted DRF, EDF.

1. **Band.** A job's effective priority is its class value plus
   ``policy.aging_priority_per_hour`` per hour waited; it competes in the band
   of the highest class value its effective priority reaches. Bands are served
   highest first.
2. **Within a band**, the next job comes from the team that is below its
   guaranteed GPUs (first), else the team with the lowest weighted dominant
   share (DRF over GPUs, vCPUs and memory, divided by the team's weight); ties
   by team name.
3. **Within a team**, earliest deadline first, then submission order, then id.

Teams at their burst limit are not skipped here: the planner reports their
jobs as over quota, so the reason is visible.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from datetime import datetime

from fleetctl.model import Job, Policy

_FAR = datetime.max.replace(tzinfo=None)


def effective_band(job: Job, policy: Policy, now: datetime, class_values: tuple[int, ...]) -> int:
    """The class value a queued job competes at (after aging)."""
    own = policy.priority_class(job.priority).value
    if policy.aging_priority_per_hour <= 0 and not job.priority_boost:
        return own
    # Hours waited since the job last entered the queue (its submission, or its last requeue): a job
    # requeued after running for days has not waited those days.
    waited_hours = max(0.0, (now - job.queued_since_utc).total_seconds() / 3600)
    effective = own + policy.aging_priority_per_hour * waited_hours + job.priority_boost
    band = own
    for value in class_values:  # ascending
        if own < value <= effective:
            band = value
    return band


@dataclass(slots=True)
class TeamUsage:
    gpus: float = 0.0
    vcpus: float = 0.0
    memory_gib: float = 0.0

    def add(self, job: Job, workers: int | None = None, sign: int = 1) -> None:
        w = job.workers if workers is None else workers
        self.gpus += sign * job.gpus_per_worker * w
        self.vcpus += sign * job.vcpus_per_worker * w
        self.memory_gib += sign * job.memory_gib_per_worker * w


def _team_job_key(job: Job) -> tuple:
    deadline = job.deadline_utc.replace(tzinfo=None) if job.deadline_utc else _FAR
    return (-job.priority_boost, deadline, job.submitted_at_utc, job.job_id)


class QueueOrder:
    """Yields queued jobs in order; the caller reports placements with
    ``charge`` so the fair-share order adapts as the pass goes."""

    def __init__(self, jobs: list[Job], policy: Policy, now: datetime, usage: dict[str, TeamUsage],
                 totals: tuple[float, float, float]) -> None:
        self.policy = policy
        self.usage = usage
        self.totals = tuple(t if t > 0 else 1.0 for t in totals)
        values = tuple(sorted({pc.value for pc in policy.priority_classes}))
        bands: dict[int, dict[str, list[Job]]] = {}
        for job in jobs:
            band = effective_band(job, policy, now, values)
            bands.setdefault(band, {}).setdefault(job.team, []).append(job)
        self._bands = [
            {team: deque(sorted(js, key=_team_job_key)) for team, js in sorted(teams.items())}
            for _, teams in sorted(bands.items(), key=lambda kv: -kv[0])
        ]
        self._band_values = sorted(bands, reverse=True)
        self.band_of: dict[str, int] = {}
        for value, teams in zip(self._band_values, self._bands):
            for js in teams.values():
                for job in js:
                    self.band_of[job.job_id] = value

    def _share(self, team: str) -> tuple:
        u = self.usage.get(team) or TeamUsage()
        t = self.policy.team(team)
        under = u.gpus < t.guaranteed_gpus
        dominant = max(u.gpus / self.totals[0], u.vcpus / self.totals[1], u.memory_gib / self.totals[2])
        return (0 if under else 1, dominant / (t.weight if t.weight > 0 else 1.0), team)

    def __iter__(self):
        for teams in self._bands:
            while teams:
                team = min(teams, key=self._share)
                queue = teams[team]
                job = queue.popleft()
                if not queue:
                    del teams[team]
                yield job

    def charge(self, job: Job, workers: int | None = None, sign: int = 1) -> None:
        self.usage.setdefault(job.team, TeamUsage()).add(job, workers, sign)


def over_burst(job: Job, usage: dict[str, TeamUsage], policy: Policy) -> str | None:
    """A one-line reason if placing ``job`` would take its team past its burst limit."""
    team = policy.team(job.team)
    if team.burst_gpus is None:
        return None
    used = (usage.get(job.team) or TeamUsage()).gpus
    if used + job.gpus > team.burst_gpus:
        return (
            f"team {job.team} uses {used:g} GPUs; {job.gpus} more would pass its burst limit of "
            f"{team.burst_gpus}"
        )
    return None


def ceil_div(a: int, b: int) -> int:
    return -(-a // b) if b else math.inf  # type: ignore[return-value]
