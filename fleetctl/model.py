"""The vocabulary of fleetctl: frozen value objects with units in their names.

This module imports nothing of ours. Everything the planner sees is built from
these types; pydantic models (policy YAML, job specs, cloud JSON) live at the
edges and convert to these once.

Conventions: money is USD per hour, time is timezone-aware UTC ``datetime``,
memory is GiB, collections are tuples.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Union

CLOUDS: tuple[str, ...] = ("aws", "gcp", "azure")
"""The clouds fleetctl has adapters for, by the name policies, offers and the CLI use."""

#: Lead time of a spot reclaim notice per cloud, in seconds, the one place it is written: EC2's two-minute
#: interruption notice (docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html),
#: GCE's 30 s preemption notice (cloud.google.com/compute/docs/instances/spot#preemption-process) and
#: Azure Scheduled Events' Preempt, at least 30 s ahead
#: (learn.microsoft.com/azure/virtual-machines/linux/scheduled-events).
RECLAIM_NOTICE_SECONDS: Mapping[str, int] = MappingProxyType({"aws": 120, "gcp": 30, "azure": 30})

# --------------------------------------------------------------------------- enums


class Market(str, enum.Enum):
    SPOT = "spot"
    ON_DEMAND = "on_demand"


class Interconnect(str, enum.Enum):
    """How the GPUs of one machine talk to each other."""

    NVLINK = "nvlink"
    PCIE = "pcie"
    NONE = "none"  # no GPU


class NodeState(str, enum.Enum):
    LAUNCHING = "launching"  # requested, not yet ready for work
    READY = "ready"
    DRAINING = "draining"  # cordoned: takes no new work
    TERMINATING = "terminating"
    GONE = "gone"


class JobState(str, enum.Enum):
    QUEUED = "queued"  # waiting for a place
    BOUND = "bound"  # placed on nodes (which may still be launching)
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        return self in (JobState.QUEUED, JobState.BOUND, JobState.RUNNING)


class InterruptionKind(str, enum.Enum):
    RECLAIM_WARNING = "reclaim_warning"  # AWS 2-minute warning, GCP preemption, Azure Preempt
    REBALANCE = "rebalance"  # AWS rebalance recommendation: elevated risk, no deadline
    TERMINATED = "terminated"  # the node is already gone


class Reason(str, enum.Enum):
    """Why an action is in a plan, or why a job is not placed."""

    FITS_FREE_CAPACITY = "fits_free_capacity"
    FITS_NEW_CAPACITY = "fits_new_capacity"
    CHEAPEST_OFFER = "cheapest_offer"
    ON_DEMAND_FALLBACK = "on_demand_fallback"
    ON_DEMAND_BASE = "on_demand_base"
    IDLE = "idle"
    NODE_GONE = "node_gone"
    CONSOLIDATION = "consolidation"
    FORECAST_HEADROOM = "forecast_headroom"  # bought or kept ahead of forecast demand
    INTERRUPTION = "interruption"
    PREEMPTED_BY_HIGHER_PRIORITY = "preempted_by_higher_priority"
    PREEMPTED_FOR_GUARANTEE = "preempted_for_guarantee"  # its team used more than its guarantee; another team claimed its own
    # reasons a job stays unplaced
    NO_ALLOWED_OFFER = "no_allowed_offer"
    GANG_DOES_NOT_FIT = "gang_does_not_fit"
    BUDGET_EXCEEDED = "budget_exceeded"
    QUOTA_EXCEEDED = "quota_exceeded"
    CAPACITY_LIMIT = "capacity_limit"
    WAITING_FOR_CAPACITY = "waiting_for_capacity"


# --------------------------------------------------------------------------- catalog


@dataclass(frozen=True, slots=True)
class InstanceType:
    """One machine shape of one provider.

    ``gpu_memory_gib`` is per GPU; ``gpu_model`` uses the normalised names
    (``A100-80GB``, ``L4``, ...) and is ``None`` for CPU-only shapes.
    """

    provider: str
    name: str
    vcpus: int
    memory_gib: float
    gpu_model: str | None = None
    gpu_count: int = 0
    gpu_memory_gib: float = 0.0
    interconnect: Interconnect = Interconnect.NONE
    architecture: str = "x86_64"

    @property
    def total_gpu_memory_gib(self) -> float:
        return self.gpu_count * self.gpu_memory_gib


@dataclass(frozen=True, slots=True)
class Offer:
    """An InstanceType in one region and zone, in one market, at a price.

    ``zone`` is ``""`` when the price source is regional (GCP, Azure): the
    provider picks the zone at launch and keeps one request in one zone.
    """

    instance_type: InstanceType
    region: str
    zone: str
    market: Market
    usd_per_hour: float

    @property
    def provider(self) -> str:
        return self.instance_type.provider

    @property
    def key(self) -> str:
        """Stable identity: ``provider/region/zone/type/market`` (zone ``*`` if regional)."""
        return "/".join(
            (self.provider, self.region, self.zone or "*", self.instance_type.name, self.market.value)
        )

    @property
    def placement_domain(self) -> tuple[str, str, str]:
        """Nodes in one domain may hold one gang: same provider, region and zone."""
        return (self.provider, self.region, self.zone)

    @property
    def usd_per_gpu_hour(self) -> float | None:
        if self.instance_type.gpu_count == 0:
            return None
        return self.usd_per_hour / self.instance_type.gpu_count


# --------------------------------------------------------------------------- fleet and queue


@dataclass(frozen=True, slots=True)
class Node:
    """One machine bought from an Offer.

    ``zone`` is the zone the machine runs in, as the provider reports it
    (``""`` when unknown). It matters for a node bought from a regional offer
    (offer zone ``""``): the provider picked its zone at launch, and only the
    provider adapter knows where to read it.
    """

    node_id: str
    offer: Offer
    state: NodeState
    launched_at_utc: datetime
    ready_at_utc: datetime | None = None  # when it became (or becomes) ready
    idle_since_utc: datetime | None = None  # last time the node held no job
    zone: str = ""  # where the provider placed it; "" when unknown (then the offer's zone)

    @property
    def schedulable(self) -> bool:
        return self.state in (NodeState.LAUNCHING, NodeState.READY)

    @property
    def placement_domain(self) -> tuple[str, str, str]:
        """Provider, region and zone of the machine: nodes in one domain may hold one gang.

        A node bought from a regional offer (zone ``""``) sits in the zone the
        provider picked at launch, which its adapter reports as ``zone``: nodes
        of one regional offer in two zones are two domains. With the zone
        unknown, the offer's domain (the region).

        Design choice: the zone is a field the adapter fills, not something
        read from the node id, so the model knows no cloud's id format (GCP's
        ids happen to be ``<zone>/<name>``; store migration 0007 carried the
        zones read that way into stored nodes)."""
        provider, region, zone = self.offer.placement_domain
        return (provider, region, self.zone or zone)


@dataclass(frozen=True, slots=True)
class Job:
    """Work to place: a gang of ``workers`` identical workers, all or nothing.

    Field names match the job-trace CSV so a queue and a trace speak one
    language. ``gpu_models`` empty means any GPU model. ``spot_eligible`` None
    means "the priority class decides". ``node_ids`` holds one node per worker
    once the job is bound.
    """

    job_id: str
    workers: int
    gpus_per_worker: int
    vcpus_per_worker: float
    memory_gib_per_worker: float
    priority: str
    team: str
    duration_hours: float
    submitted_at_utc: datetime
    gpu_models: tuple[str, ...] = ()
    checkpointable: bool = False
    checkpoint_interval_minutes: float | None = None
    deadline_utc: datetime | None = None
    spot_eligible: bool | None = None
    state: JobState = JobState.QUEUED
    node_ids: tuple[str, ...] = ()
    gpu_memory_gib_per_gpu: float = 0.0  # minimum memory of each GPU; 0: any
    started_at_utc: datetime | None = None  # when the current run started (bound/running)
    last_checkpoint_utc: datetime | None = None
    interruptions: int = 0  # times this job lost its nodes to a reclaim
    work_lost_interruptions: int = 0  # of those, the ones that cost it work (no checkpoint, or not in time)
    checkpointed_work_hours: float = 0.0  # work kept by the last checkpoint (resumed from there)
    priority_boost: float = 0.0  # added to the class value after a reclaim, so the job is re-placed first
    avoid_offer_keys: tuple[str, ...] = ()  # offers that failed it recently (re-placed elsewhere)
    requeued_at_utc: datetime | None = None  # last time a reclaim put it back in the queue
    first_started_at_utc: datetime | None = None  # its first start (the end of its wait)

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def queued_since_utc(self) -> datetime:
        """When the job last entered the queue (submission, or its last requeue)."""
        return self.requeued_at_utc or self.submitted_at_utc

    @property
    def remaining_hours(self) -> float:
        """Work left if the job resumed from its last checkpoint now."""
        return max(0.0, self.duration_hours - self.checkpointed_work_hours)

    def work_since_checkpoint_hours(self, now: datetime) -> float:
        """Hours of work a stop now would lose (all of the run if never checkpointed).

        A checkpoint from before the run (a job requeued with its work and
        restarted) does not count: the run resumed from it, so a stop loses
        the run's work, not the time the job waited in the queue as well."""
        since = max((t for t in (self.last_checkpoint_utc, self.started_at_utc) if t is not None), default=None)
        if since is None or self.state is not JobState.RUNNING:
            return 0.0
        return max(0.0, (now - since).total_seconds() / 3600)


#: Fields of ``Job`` the controller writes as the job runs; every other field is
#: the job's spec. Re-submitting a spec compares the spec fields only.
JOB_RUNTIME_FIELDS = frozenset({
    "submitted_at_utc", "state", "node_ids", "started_at_utc", "last_checkpoint_utc", "interruptions",
    "work_lost_interruptions", "checkpointed_work_hours", "priority_boost", "avoid_offer_keys", "requeued_at_utc",
    "first_started_at_utc",
})


# --------------------------------------------------------------------------- policy (core form)


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    preemptible: bool = True
    spot_eligible: bool = True


@dataclass(frozen=True, slots=True)
class Team:
    name: str
    guaranteed_gpus: int = 0
    burst_gpus: int | None = None  # None: no limit
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class AwsRegionSettings:
    """What the AWS pool modules of one region need that only the platform
    team knows: the node image and the network to launch into."""

    region: str
    image_id: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...] = ()
    gang_placement_groups: bool = False  # a cluster placement group per pool, for gangs


@dataclass(frozen=True, slots=True)
class GcpSettings:
    """What the GCP pool modules and the GCP adapter need: project, node image and network."""

    project: str
    regions: tuple[str, ...]
    image: str
    network: str = "global/networks/default"
    subnetwork: str = ""
    service_account_email: str = ""
    termination_action: str = "DELETE"  # what GCE does to a preempted Spot VM: DELETE or STOP


@dataclass(frozen=True, slots=True)
class AzureRegionSettings:
    region: str
    subnet_id: str
    image_id: str


@dataclass(frozen=True, slots=True)
class AzureSettings:
    """What the Azure pool modules and the Azure adapter need."""

    subscription_id: str
    resource_group: str
    admin_ssh_public_key: str
    regions: tuple[AzureRegionSettings, ...]


@dataclass(frozen=True, slots=True)
class Infrastructure:
    """The slow-changing, reviewed half of the fleet: what Terraform declares
    (``fleetctl.terraform``). The planner never reads it."""

    cluster: str
    controller_url: str = ""  # where node-watch posts reclaim notices (the daemon's --notice-addr)
    aws: tuple[AwsRegionSettings, ...] = ()
    tags: tuple[tuple[str, str], ...] = ()  # extra tags on every resource Terraform declares, sorted by key
    gcp: GcpSettings | None = None
    azure: AzureSettings | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    """The validated policy, in the form the planner reads.

    Built from the YAML by ``fleetctl.policy``; empty allow-lists mean "any".
    """

    providers: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    gpu_models: tuple[str, ...] = ()
    max_spot_share: float = 1.0
    on_demand_base_gpus: int = 0
    max_share_per_instance_type: float = 1.0
    max_share_per_zone: float = 1.0
    min_distinct_offers: int = 1
    max_usd_per_hour: float | None = None
    max_gpus: int | None = None
    teams: tuple[Team, ...] = ()
    priority_classes: tuple[PriorityClass, ...] = (PriorityClass("default", 0),)
    default_priority_class: str = "default"
    idle_timeout_minutes: float = 10.0
    max_headroom_gpus: int = 0  # idle GPUs the planner may hold ahead of forecast demand (p90), per GPU model
    scale_up_cooldown_seconds: float = 0.0
    scale_down_cooldown_minutes: float = 5.0
    checkpoint_grace_seconds: float = 60.0
    max_interruptions_before_on_demand: int = 2
    count_interruptions: str = "all"  # which reclaims count toward that: "all" or "work_lost"
    reclaimed_offer_ttl_minutes: float = 30.0
    default_spot_interruption_probability_per_hour: float = 0.05
    max_wait_for_spot_minutes: float = 0.0  # a spot-eligible job waits this long for spot before on-demand
    replace_on_demand_with_spot: bool = False  # migrate checkpointable jobs from on-demand to spot when it pays back
    aging_priority_per_hour: float = 0.0  # priority points a queued job gains per hour waited
    restart_overhead_minutes: float = 5.0  # time a (re)started job spends before doing new work
    consolidation_payback_hours: float = 2.0  # a migration must pay for itself within this time
    consolidation_max_gpu_utilisation: float = 0.5  # only nodes at most this busy are consolidated
    disruption_budget_nodes: int = 1  # nodes drained for consolidation per pass, at most
    requeue_priority_boost: float = 100.0  # priority points a reclaimed job gets when requeued
    rebalance_drain_probability: float = 0.2  # drain on a rebalance hint when the offer's risk is at least this
    infrastructure: Infrastructure | None = None  # what Terraform declares; None = the sandbox only

    def priority_class(self, name: str) -> PriorityClass:
        for pc in self.priority_classes:
            if pc.name == name:
                return pc
        for pc in self.priority_classes:
            if pc.name == self.default_priority_class:
                return pc
        return PriorityClass(name, 0)

    def team(self, name: str) -> Team:
        for t in self.teams:
            if t.name == name:
                return t
        return Team(name)


# --------------------------------------------------------------------------- forecasts and events


@dataclass(frozen=True, slots=True)
class OfferRisk:
    offer_key: str
    horizon_minutes: int
    interruption_probability: float  # of a loss within the horizon

    @property
    def probability_per_hour(self) -> float:
        """The probability of a loss within an hour: the probability itself for
        a 60-minute horizon, else converted under a constant hazard,
        ``1 - (1 - p) ** (60 / horizon_minutes)`` (1 stays 1, 0 stays 0)."""
        p, minutes = self.interruption_probability, self.horizon_minutes
        if minutes == 60 or not 0.0 < p < 1.0 or not minutes > 0:
            return p
        return -math.expm1(60.0 / minutes * math.log1p(-p))


@dataclass(frozen=True, slots=True)
class DemandForecast:
    gpu_model: str
    horizon_minutes: int
    gpus_p50: float
    gpus_p90: float


@dataclass(frozen=True, slots=True)
class OfferReclaim:
    """A spot reclaim seen on an offer (the planner avoids it for a while)."""

    offer_key: str
    at_utc: datetime


@dataclass(frozen=True, slots=True)
class Forecast:
    """Numbers, not models: what the forecaster expects, and the recent
    reclaims it is based on."""

    interruption: tuple[OfferRisk, ...] = ()
    demand: tuple[DemandForecast, ...] = ()
    recent_reclaims: tuple[OfferReclaim, ...] = ()

    def risks_per_hour(self) -> dict[str, float]:
        """Each offer's probability of a loss within an hour, the planner's and
        the rebalance check's p: its 60-minute risk, else its first risk of
        another horizon converted (:attr:`OfferRisk.probability_per_hour`),
        never a 24-hour probability read as an hour's."""
        out: dict[str, float] = {}
        for r in self.interruption:
            if r.horizon_minutes == 60:
                out[r.offer_key] = r.interruption_probability
        for r in self.interruption:
            out.setdefault(r.offer_key, r.probability_per_hour)
        return out


@dataclass(frozen=True, slots=True)
class InterruptionEvent:
    """A provider's reclaim notice, rebalance hint or eviction, normalised."""

    event_id: str
    provider: str
    node_id: str
    kind: InterruptionKind
    received_at_utc: datetime
    deadline_utc: datetime | None = None


# --------------------------------------------------------------------------- plans


@dataclass(frozen=True, slots=True)
class Launch:
    """Buy ``len(node_names)`` nodes of ``offer``; the names are placeholders
    that Binds in the same plan refer to until the provider gives real ids."""

    offer: Offer
    node_names: tuple[str, ...]
    reason: Reason
    detail: str
    kind: str = field(default="launch", init=False)

    @property
    def count(self) -> int:
        return len(self.node_names)


@dataclass(frozen=True, slots=True)
class Terminate:
    node_id: str
    reason: Reason
    detail: str
    kind: str = field(default="terminate", init=False)


@dataclass(frozen=True, slots=True)
class Bind:
    """Place every worker of a job: ``node_ids[i]`` runs worker ``i``."""

    job_id: str
    node_ids: tuple[str, ...]
    reason: Reason
    detail: str
    kind: str = field(default="bind", init=False)


@dataclass(frozen=True, slots=True)
class Drain:
    node_id: str
    reason: Reason
    detail: str
    kind: str = field(default="drain", init=False)


@dataclass(frozen=True, slots=True)
class Migrate:
    job_id: str
    from_node_ids: tuple[str, ...]
    to_node_ids: tuple[str, ...]
    reason: Reason
    detail: str
    kind: str = field(default="migrate", init=False)


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: str
    by_job_id: str
    reason: Reason
    detail: str
    kind: str = field(default="preempt", init=False)


Action = Union[Launch, Terminate, Bind, Drain, Migrate, Preempt]


@dataclass(frozen=True, slots=True)
class Unplaced:
    job_id: str
    reason: Reason
    detail: str


@dataclass(frozen=True, slots=True)
class Explanation:
    """What the planner considered for one job, best first, for ``fleetctl explain``."""

    job_id: str
    considered: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """An ordered tuple of Actions, what could not be placed and why, and the
    cost and risk before and after.

    Risk is the expected number of spot reclaims per hour across the fleet.
    """

    actions: tuple[Action, ...]
    unplaced: tuple[Unplaced, ...]
    usd_per_hour_before: float
    usd_per_hour_after: float
    risk_before: float = 0.0
    risk_after: float = 0.0
    explanations: tuple[Explanation, ...] = ()

    def explanation(self, job_id: str) -> Explanation | None:
        for e in self.explanations:
            if e.job_id == job_id:
                return e
        return None

    @property
    def has_changes(self) -> bool:
        return bool(self.actions)

    def of_kind(self, kind: str) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.kind == kind)
