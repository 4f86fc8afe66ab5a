"""The policy file: YAML validated by pydantic, converted to ``model.Policy``.

Shape of the file (every section but ``budget`` is optional; see
``policies/example.yaml`` for a commented example and
:func:`policy_json_schema` for the full schema)::

    providers: [aws, gcp, azure]          # allow-lists; empty or absent = any
    regions: [us-east-1, europe-west4]
    gpu_models: [A100-80GB, H100-80GB]
    markets: {max_spot_share, on_demand_base_gpus,
              default_spot_interruption_probability_per_hour,
              max_wait_for_spot_minutes, replace_on_demand_with_spot}
    diversification: {max_share_per_instance_type, max_share_per_zone, min_distinct_offers}
    budget: {max_usd_per_hour, max_gpus}
    teams: {<name>: {guaranteed_gpus, burst_gpus, weight}}
    priority_classes: {<name>: {value, preemptible, spot_eligible}}
    default_priority_class: <name>
    scaling: {idle_timeout_minutes, scale_up_cooldown_seconds, scale_down_cooldown_minutes, max_headroom_gpus}
    interruptions: {checkpoint_grace_seconds, max_interruptions_before_on_demand, count_interruptions,
                    reclaimed_offer_ttl_minutes}

Validation happens in two passes. First pydantic checks each field on its own
(types, ranges, names, unknown keys) - strict: ``"ten"`` is not a number,
``8.0`` is not a GPU count and ``yes`` is not a boolean. Then, if every field
is valid, the rules that relate fields are checked (see
:func:`_contradictions`). Design choice: a cross-field rule needs all of its
inputs to be valid to say anything true, so it waits for the first pass.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Annotated, Any, Iterator, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr, WithJsonSchema

from fleetctl import model
from fleetctl.naming import CLUSTER_NAME
from fleetctl.yamlerrors import (
    Document,
    SpecError,
    ValidationIssue,
    did_you_mean,
    read_document,
    read_document_and_bytes,
)
from providers import catalog

__all__ = [
    "GPU_MODELS",
    "PROVIDERS",
    "PolicySpec",
    "StrictModel",
    "load_policy",
    "note_integers",
    "close_named_maps",
    "policy_json_schema",
    "policy_from_document",
    "spec_from_document",
    "to_core",
]

# --------------------------------------------------------------------------- vocabularies

#: The normalised GPU model names used across catalogs, jobs and policies: the
#: catalog's vocabulary (the keys of ``providers.catalog.GPU_MEMORY_GIB``), so
#: every model the planner may buy can be named, allowed or left out.
GPU_MODELS: tuple[str, ...] = catalog.GPU_MODELS

#: Cloud providers fleetctl can buy from.
PROVIDERS: tuple[str, ...] = model.CLOUDS

# The name and id patterns below are anchored ``^...$`` for the JSON Schema
# (ECMA regexes, where ``$`` is the end of the text) and used with
# ``fullmatch``: in Python ``$`` also matches before a final newline, so
# ``pattern.match`` would accept "us-east-1\n".
_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62})$")
_REGION_RE = re.compile(r"^[a-z][a-z0-9-]{1,39}$")


def _one_of(what: str, allowed: tuple[str, ...]):  # noqa: ANN202 - returns a validator
    def check(value: str) -> str:
        if value in allowed:
            return value
        hint = did_you_mean(value, allowed)
        prefix = f"unknown {what} {value!r}" + (f" (did you mean {hint!r}?)" if hint else "")
        raise ValueError(f"{prefix}; allowed: {', '.join(allowed)}")

    return check


def _matches(what: str, pattern: re.Pattern[str], rule: str):  # noqa: ANN202 - returns a validator
    def check(value: str) -> str:
        if pattern.fullmatch(value):  # not match: its $ accepts a trailing newline
            return value
        raise ValueError(f"invalid {what} {value!r}: {rule}")

    return check


GpuModelName = Annotated[
    StrictStr,
    AfterValidator(_one_of("GPU model", GPU_MODELS)),
    WithJsonSchema({"type": "string", "enum": list(GPU_MODELS)}),
]
ProviderName = Annotated[
    StrictStr,
    AfterValidator(_one_of("provider", PROVIDERS)),
    WithJsonSchema({"type": "string", "enum": list(PROVIDERS)}),
]
RegionName = Annotated[
    StrictStr,
    AfterValidator(
        _matches("region", _REGION_RE, "use the provider's region id, e.g. us-east-1, europe-west4, eastus")
    ),
    WithJsonSchema({"type": "string", "pattern": _REGION_RE.pattern}),
]
#: Team and priority-class names (also used by job specs).
Name = Annotated[
    StrictStr,
    AfterValidator(_matches("name", _NAME_RE, "use letters, digits, '-' and '_' (at most 63, starting with a letter "
                                              "or digit)")),
    WithJsonSchema({"type": "string", "pattern": _NAME_RE.pattern}),
]


# --------------------------------------------------------------------------- the YAML models

_D = model.Policy()  # defaults come from the core type so the two cannot drift


# Durations are bounded at a year: a larger value means nothing for a fleet, and passed date
# arithmetic (an overflow in plan, reconcile and explain) before it was refused here.
_YEAR_MINUTES = 525_600

class StrictModel(BaseModel):
    """Base of every spec model: unknown keys are errors, no type coercion
    (``"10"`` is not 10, ``1`` is not ``true``), no NaN or infinity."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class MarketsSpec(StrictModel):
    """How much of the fleet may run on spot capacity."""

    max_spot_share: float = Field(
        _D.max_spot_share, ge=0, le=1,
        description="Largest fraction of the fleet's GPUs that may run on spot capacity (0..1; 0 = on-demand only, "
                    "1 = no limit).",
    )
    on_demand_base_gpus: int = Field(
        _D.on_demand_base_gpus, ge=0,
        description="GPUs (count) kept on on-demand capacity before any spot is bought: a base that reclaims "
                    "cannot take away.",
    )
    default_spot_interruption_probability_per_hour: float = Field(
        _D.default_spot_interruption_probability_per_hour, ge=0, le=1,
        description="Probability (0..1) that a spot node is reclaimed within an hour, assumed for offers the "
                    "forecast has no number for.",
    )
    max_wait_for_spot_minutes: float = Field(
        _D.max_wait_for_spot_minutes, ge=0, le=_YEAR_MINUTES,
        description="Minutes a spot-eligible job waits for spot capacity when none is available, before it falls "
                    "back to on-demand (0 = fall back at once). Never longer than its deadline's slack allows, "
                    "and never with max_spot_share 0.",
    )
    replace_on_demand_with_spot: bool = Field(
        _D.replace_on_demand_with_spot,
        description="Move checkpointable jobs from on-demand nodes to new spot nodes once spot is available again, "
                    "when the saving pays back the migration within scaling.consolidation_payback_hours (counts "
                    "against scaling.disruption_budget_nodes).",
    )


class DiversificationSpec(StrictModel):
    """How the fleet is spread so one reclaim wave cannot take all of it."""

    max_share_per_instance_type: float = Field(
        _D.max_share_per_instance_type, gt=0, le=1,
        description="Largest fraction (0..1, above 0) of the fleet's spot GPUs on one instance type, plus one "
                    "node or one gang (so the first node or gang of a type is always allowed); 1 = no limit.",
    )
    max_share_per_zone: float = Field(
        _D.max_share_per_zone, gt=0, le=1,
        description="Largest fraction (0..1, above 0) of the fleet's spot GPUs in one availability zone, plus "
                    "one node or one gang; 1 = no limit.",
    )
    min_distinct_offers: int = Field(
        _D.min_distinct_offers, ge=1,
        description="Fewest distinct spot offers (provider/region/zone/instance type) the spot fleet is spread "
                    "over once it has that many spot nodes, a gang's counting once (count, at least 1); when fewer spot "
                    "offers are on sale, as many as there are.",
    )


class BudgetSpec(StrictModel):
    """Hard limits on spend and size."""

    max_usd_per_hour: float = Field(
        gt=0, le=10_000_000,
        description="Most the whole fleet may cost, in USD per hour (above 0). Required: a spot fleet without a "
                    "spending cap is a foot-gun.",
    )
    max_gpus: int | None = Field(
        _D.max_gpus, gt=0,
        description="Most GPUs (count) the fleet may hold; null or absent = no limit beyond the budget.",
    )


class TeamSpec(StrictModel):
    """One team's share of the fleet."""

    guaranteed_gpus: int = Field(
        0, ge=0,
        description="GPUs (count) the team can always get, preempting other teams' preemptible work if needed.",
    )
    burst_gpus: int | None = Field(
        None, ge=0,
        description="Most GPUs (count) the team may use in total, guarantee included; null or absent = no limit.",
    )
    weight: float = Field(
        1.0, gt=0,
        description="Relative share (above 0, unitless) of spare capacity beyond the guarantees.",
    )


class PriorityClassSpec(StrictModel):
    """One priority class jobs can name."""

    value: int = Field(
        ge=-1_000_000_000, le=1_000_000_000,
        description="Priority (integer; higher is placed first and may preempt lower preemptible work).",
    )
    preemptible: bool = Field(
        True, description="Whether jobs of this class may be stopped to make room for higher-priority work."
    )
    spot_eligible: bool = Field(
        True, description="Whether jobs of this class may run on spot capacity unless a job says otherwise."
    )


class ScalingSpec(StrictModel):
    """How fast the fleet grows and shrinks."""

    idle_timeout_minutes: float = Field(
        _D.idle_timeout_minutes, ge=0, le=_YEAR_MINUTES,
        description="Minutes a node may sit without work before it is terminated (0 = at once).",
    )
    scale_up_cooldown_seconds: float = Field(
        _D.scale_up_cooldown_seconds, ge=0, le=_YEAR_MINUTES * 60,
        description="Seconds to wait after a launch before launching again (0 = no wait).",
    )
    scale_down_cooldown_minutes: float = Field(
        _D.scale_down_cooldown_minutes, ge=0, le=_YEAR_MINUTES,
        description="Minutes to wait after a launch or termination before terminating idle nodes (0 = no wait).",
    )
    consolidation_payback_hours: float = Field(
        _D.consolidation_payback_hours, ge=0, le=_YEAR_MINUTES / 60,
        description="Hours within which the USD/hour saved by emptying an under-used node must pay back the "
                    "migration (work lost since the last checkpoint plus restart); 0 = never consolidate.",
    )
    consolidation_max_gpu_utilisation: float = Field(
        _D.consolidation_max_gpu_utilisation, ge=0, le=1,
        description="Only nodes whose GPUs are at most this busy (0..1) are considered for consolidation.",
    )
    max_headroom_gpus: int = Field(
        _D.max_headroom_gpus, ge=0,
        description="GPUs (count, per GPU model) the planner may buy or keep idle ahead of the 90th-percentile "
                    "demand forecast, so the fleet is warm before the queue arrives (0 = never buy ahead).",
    )
    disruption_budget_nodes: int = Field(
        _D.disruption_budget_nodes, ge=0,
        description="Most nodes (count) emptied by consolidation in one pass (0 = none).",
    )


class InterruptionsSpec(StrictModel):
    """What to do when spot capacity is reclaimed."""

    checkpoint_grace_seconds: float = Field(
        _D.checkpoint_grace_seconds, ge=0, le=_YEAR_MINUTES * 60,
        description="Seconds a checkpointable job gets to write a checkpoint after a reclaim notice, never "
                    "past the notice's deadline (a notice without one gets these seconds); a checkpoint that cannot finish by then is missed (counted in "
                    "fleetctl_checkpoints_missed_total) and the job keeps its last periodic checkpoint.",
    )
    max_interruptions_before_on_demand: int = Field(
        _D.max_interruptions_before_on_demand, ge=0,
        description="Spot interruptions (count) a job may suffer before it is placed on on-demand capacity "
                    "(0 = move after the first).",
    )
    count_interruptions: Literal["all", "work_lost"] = Field(
        "all",
        description="Which interruptions count toward max_interruptions_before_on_demand: all, or work_lost "
                    "(only those that cost the job work: it cannot checkpoint, or its checkpoint was not done "
                    "before the node went). A checkpointable job that saves its work within the notice then "
                    "stays on spot however often it is moved; its deadline still sends it to on-demand in time.",
    )
    reclaimed_offer_ttl_minutes: float = Field(
        _D.reclaimed_offer_ttl_minutes, ge=0, le=_YEAR_MINUTES,
        description="Minutes an offer that was just reclaimed is avoided for new spot launches, when the "
                    "interruption forecast has no probability for it (a forecast's number already weighs recent "
                    "losses).",
    )
    requeue_priority_boost: float = Field(
        _D.requeue_priority_boost, ge=0,
        description="Priority points a job gets when it is requeued after a reclaim, so it is re-placed before "
                    "new work of its class (0 = none).",
    )
    rebalance_drain_probability: float = Field(
        _D.rebalance_drain_probability, ge=0, le=1,
        description="On a rebalance recommendation (an early hint, no deadline), drain the node proactively if "
                    "the offer's interruption probability per hour is at least this (0..1; 1 = never drain early).",
    )
    restart_overhead_minutes: float = Field(
        _D.restart_overhead_minutes, ge=0, le=_YEAR_MINUTES,
        description="Minutes a restarted job spends (scheduling, image pull, loading a checkpoint) before it does "
                    "new work; part of the cost of every interruption and migration.",
    )


def _default_classes() -> dict[str, PriorityClassSpec]:
    return {
        pc.name: PriorityClassSpec(value=pc.value, preemptible=pc.preemptible, spot_eligible=pc.spot_eligible)
        for pc in _D.priority_classes
    }


_AMI_RE = re.compile(r"^ami-[0-9a-f]{8,17}$")
_SUBNET_RE = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_SG_RE = re.compile(r"^sg-[0-9a-f]{8,17}$")
_URL_RE = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(?::[0-9]{1,5})?/?$")


def _id(what: str, pattern: re.Pattern[str], example: str):  # noqa: ANN202 - an Annotated type
    return Annotated[
        StrictStr,
        AfterValidator(_matches(what, pattern, f"expected an id like {example}")),
        WithJsonSchema({"type": "string", "pattern": pattern.pattern}),
    ]


AmiId = _id("AMI id", _AMI_RE, "ami-0123456789abcdef0")
SubnetId = _id("subnet id", _SUBNET_RE, "subnet-0123456789abcdef0")
SecurityGroupId = _id("security group id", _SG_RE, "sg-0123456789abcdef0")


class AwsRegionSpec(StrictModel):
    """The node image and network of one AWS region."""

    image_id: AmiId = Field(
        description="AMI the GPU nodes boot (with NVIDIA drivers and fleetctl installed).")
    subnet_ids: list[SubnetId] = Field(
        min_length=1, description="Subnets fleetctl launches into; one per zone it may use.")
    security_group_ids: list[SecurityGroupId] = Field(
        default_factory=list, description="Security groups of the GPU nodes.")
    gang_placement_groups: bool = Field(
        False, description="Create a cluster placement group per GPU pool; fleetctl launches each gang into it "
                           "(its nodes sit close together in one zone), other launches not.")


def _text(what: str, pattern: str, rule: str):  # noqa: ANN202 - an Annotated type
    compiled = re.compile(pattern)
    return Annotated[
        StrictStr,
        AfterValidator(_matches(what, compiled, rule)),
        WithJsonSchema({"type": "string", "pattern": pattern}),
    ]


GcpProject = _text("GCP project id", r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$", "6-30 lowercase letters, digits and '-'")
GcpPath = _text("GCP resource path", r"^[A-Za-z0-9][A-Za-z0-9_./:-]{0,511}$",
                "a resource path such as global/networks/default or projects/P/global/images/family/F")
# One pattern, not GcpPath | Literal[""]: pydantic reports a union's members apart, so a bad value was two
# issues at its key, each named by a member's internals (subnetwork["literal['']"]).
GcpSubnetwork = _text("GCP resource path", r"^$|^[A-Za-z0-9][A-Za-z0-9_./:-]{0,511}$",
                      "empty (the network's auto subnet) or a path such as regions/R/subnetworks/S")
ServiceAccount = _text("service account email", r"^[a-z0-9-]+@[a-z0-9.-]+\.iam\.gserviceaccount\.com$|^$",
                       "NAME@PROJECT.iam.gserviceaccount.com")
AzureSubscription = _text("subscription id", r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
                          "a GUID such as 00000000-0000-0000-0000-000000000000")
AzureGroup = _text("resource group", r"^[-\w._()]{1,89}[-\w_()]$", "1-90 letters, digits, '-', '_', '.', '(' or ')'")
AzureId = _text("Azure resource id", r"^/subscriptions/[^\s]{1,1000}$", "a full id starting with /subscriptions/")
SshKey = _text("SSH public key", r"^(ssh-(ed25519|rsa)|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( [^\n]*)?$",
               "one OpenSSH public key line (ssh-ed25519 AAAA... comment)")


class GcpSpec(StrictModel):
    """GCP project, node image and network for the GCP pools."""

    project: GcpProject = Field(description="The project fleetctl buys GPU VMs in.")
    regions: list[RegionName] = Field(min_length=1, description="Regions to declare GPU pools in.")
    image: GcpPath = Field(description="Boot image of the GPU nodes (self link or family path).")
    network: GcpPath = Field("global/networks/default", description="VPC network of the GPU nodes.")
    subnetwork: GcpSubnetwork = Field("", description="Subnetwork (empty: the network's auto subnet).")
    service_account_email: ServiceAccount = Field("", description="Service account of the GPU nodes.")
    termination_action: Literal["DELETE", "STOP"] = Field(
        "DELETE", description="What GCE does to a preempted Spot VM (fleetctl replaces nodes either way).")


class AzureRegionSpec(StrictModel):
    subnet_id: AzureId = Field(description="Subnet of the GPU nodes (full resource id).")
    image_id: AzureId = Field(description="Image of the GPU nodes (full resource id of an image or gallery image).")


class AzureSpec(StrictModel):
    """Azure subscription, resource group and per-region network and image for the Azure pools."""

    subscription_id: AzureSubscription = Field(description="The subscription fleetctl buys VMs in.")
    resource_group: AzureGroup = Field(description="The resource group of the pools and their VMs.")
    admin_ssh_public_key: SshKey = Field(description="SSH key of the nodes' admin user (no passwords).")
    regions: dict[RegionName, AzureRegionSpec] = Field(min_length=1, description="Regions with GPU pools.")


class InfrastructureSpec(StrictModel):
    """What Terraform declares: rendered by `fleetctl plan --terraform-dir`."""

    cluster: Annotated[
        StrictStr,
        AfterValidator(_matches("cluster name", CLUSTER_NAME, "2-24 lowercase letters, digits and '-', starting "
                                                              "with a letter")),
        WithJsonSchema({"type": "string", "pattern": CLUSTER_NAME.pattern}),
    ] = Field(description="Names and tags every cloud resource fleetctl creates; one per controller.")
    controller_url: Annotated[
        StrictStr,
        AfterValidator(_matches("controller URL", _URL_RE, "use http(s)://HOST:PORT of the daemon's --notice-addr")),
        WithJsonSchema({"type": "string", "pattern": _URL_RE.pattern}),
    ] = Field(description="Where `fleetctl node-watch` on each node posts reclaim notices.")
    aws: dict[RegionName, AwsRegionSpec] = Field(
        default_factory=dict, description="AWS regions to declare GPU pools in, with their image and network.")
    tags: dict[Annotated[StrictStr, Field(min_length=1, max_length=128)],
               Annotated[StrictStr, Field(max_length=256)]] = Field(
        default_factory=dict, description="Extra tags (cost centre, owner, ...) on every resource Terraform declares.")
    gcp: GcpSpec | None = Field(None, description="GCP project, image and network for GCP pools.")
    azure: AzureSpec | None = Field(None, description="Azure subscription, group, network and image for Azure pools.")


class PolicySpec(StrictModel):
    """A fleetctl policy file."""

    model_config = ConfigDict(
        title="fleetctl policy",
        json_schema_extra={"description": "A fleetctl policy: what may be bought, how much, and for whom."},
    )

    providers: list[ProviderName] = Field(
        default_factory=list,
        description="Cloud providers fleetctl may buy from (aws, gcp, azure); empty or absent = any.",
    )
    regions: list[RegionName] = Field(
        default_factory=list,
        description="Region ids fleetctl may buy in (e.g. us-east-1, us-central1, eastus); empty or absent = any.",
    )
    gpu_models: list[GpuModelName] = Field(
        default_factory=list,
        description="GPU models (normalised names such as A100-80GB, L4) fleetctl may buy; empty or absent = any.",
    )
    markets: MarketsSpec = Field(default_factory=MarketsSpec, description="Spot versus on-demand rules.")
    diversification: DiversificationSpec = Field(
        default_factory=DiversificationSpec, description="How the fleet is spread over instance types and zones."
    )
    budget: BudgetSpec = Field(description="Hard limits on spend (USD per hour) and size (GPUs). Required.")
    teams: dict[Name, TeamSpec] = Field(
        default_factory=dict,
        description="Teams by name with their guaranteed and burst GPUs; when any are listed, `fleetctl jobs "
                    "submit` refuses jobs of other teams (those already queued get no guarantee).",
    )
    priority_classes: dict[Name, PriorityClassSpec] = Field(
        default_factory=_default_classes, min_length=1,
        description="Priority classes by name that jobs refer to in their `priority` field.",
    )
    aging_priority_per_hour: float = Field(
        _D.aging_priority_per_hour, ge=0,
        description="Priority points a queued job gains per hour it waits, so low classes are not starved "
                    "(0 = no aging). A job that has aged past a higher class's value competes as that class.",
    )
    default_priority_class: Name = Field(
        _D.default_priority_class,
        description="The class the planner falls back to for a queued job whose priority names no class (e.g. "
                    "after a class was removed); must be one of priority_classes.",
    )
    scaling: ScalingSpec = Field(default_factory=ScalingSpec, description="Scale-up and scale-down timing.")
    interruptions: InterruptionsSpec = Field(
        default_factory=InterruptionsSpec, description="Handling of spot reclaims."
    )
    infrastructure: InfrastructureSpec | None = Field(
        None, description="What Terraform declares (cluster name, node images, networks); needed by "
                          "`--terraform-dir` and the cloud providers, not by the sandbox.")


# --------------------------------------------------------------------------- cross-field rules


def _contradictions(spec: PolicySpec, doc: Document) -> list[ValidationIssue]:
    """Rules that relate fields; each issue points at the field to change.

    Only true contradictions are flagged - settings no fleet can satisfy.
    Design choice, things deliberately *not* flagged:

    * ``max_share_per_instance_type`` below 1 with ``min_distinct_offers`` 1:
      a share of s simply needs ``ceil(1/s)`` instance types, which the
      catalog usually has; the two rules never conflict.
    * ``max_spot_share: 0`` with a spot interruption probability: the
      probability is then unused, not wrong.
    * ``burst_gpus`` above ``budget.max_gpus``: the global cap applies first.
    * regions of a provider missing from ``providers``: without the catalog we
      cannot say which provider a region id belongs to.
    """
    issues: list[ValidationIssue] = []
    max_gpus = spec.budget.max_gpus

    if max_gpus is not None and spec.markets.on_demand_base_gpus > max_gpus:
        issues.append(doc.issue(
            ("markets", "on_demand_base_gpus"),
            f"on_demand_base_gpus {spec.markets.on_demand_base_gpus} is above budget.max_gpus {max_gpus}: "
            "the on-demand base alone would break the GPU cap",
        ))

    for name, team in spec.teams.items():
        if team.burst_gpus is not None and team.guaranteed_gpus > team.burst_gpus:
            issues.append(doc.issue(
                ("teams", name, "guaranteed_gpus"),
                f"guaranteed_gpus {team.guaranteed_gpus} is above burst_gpus {team.burst_gpus}: a team cannot be "
                "guaranteed more than it may use",
            ))

    total = sum(t.guaranteed_gpus for t in spec.teams.values())
    if max_gpus is not None and total > max_gpus:
        parts = ", ".join(f"{n} {t.guaranteed_gpus}" for n, t in sorted(spec.teams.items()) if t.guaranteed_gpus)
        issues.append(doc.issue(
            ("teams",),
            f"guaranteed GPUs add up to {total} ({parts}), above budget.max_gpus {max_gpus}: "
            "the guarantees cannot all be honoured",
            at="key",
        ))

    if spec.default_priority_class not in spec.priority_classes:
        # If the field is absent, its default ("default") is the problem, and
        # the place to fix it is next to the classes.
        anchor = None if doc.exists(("default_priority_class",)) else ("priority_classes",)
        defined = ", ".join(sorted(spec.priority_classes))
        issues.append(doc.issue(
            ("default_priority_class",),
            f"default_priority_class {spec.default_priority_class!r} is not one of the priority_classes "
            f"({defined})",
            anchor=anchor, at="key" if anchor else "value",
        ))

    infra = spec.infrastructure
    if infra is not None:
        declared = {
            "aws": [(("infrastructure", "aws", r), r) for r in infra.aws],
            "gcp": [(("infrastructure", "gcp", "regions", i), r) for i, r in enumerate(infra.gcp.regions)]
            if infra.gcp else [],
            "azure": [(("infrastructure", "azure", "regions", r), r) for r in infra.azure.regions]
            if infra.azure else [],
        }
        for cloud, regions in declared.items():
            if regions and spec.providers and cloud not in spec.providers:
                issues.append(doc.issue(("infrastructure", cloud), f"{cloud} pools are declared but {cloud!r} is not "
                                        f"in providers ({', '.join(spec.providers)})", at="key"))
            for path, region in regions:
                if spec.regions and region not in spec.regions:
                    issues.append(doc.issue(path, f"region {region!r} is not in regions ({', '.join(spec.regions)})",
                                            at="key" if cloud != "gcp" else "value"))

    for list_name in ("providers", "regions", "gpu_models"):
        seen: dict[str, int] = {}
        for index, item in enumerate(getattr(spec, list_name)):
            if item in seen:
                first = doc.position((list_name, seen[item]))
                issues.append(doc.issue(
                    (list_name, index), f"{item!r} is listed twice (first at line {first.line})"
                ))
            else:
                seen[item] = index
    return issues


# --------------------------------------------------------------------------- conversion and entry points


def to_core(spec: PolicySpec) -> model.Policy:
    """The frozen core form. Allow-lists, teams and classes are sorted by name
    so the same policy always gives the same value."""
    return model.Policy(
        providers=tuple(sorted(set(spec.providers))),
        regions=tuple(sorted(set(spec.regions))),
        gpu_models=tuple(sorted(set(spec.gpu_models))),
        max_spot_share=spec.markets.max_spot_share,
        on_demand_base_gpus=spec.markets.on_demand_base_gpus,
        default_spot_interruption_probability_per_hour=spec.markets.default_spot_interruption_probability_per_hour,
        max_wait_for_spot_minutes=spec.markets.max_wait_for_spot_minutes,
        replace_on_demand_with_spot=spec.markets.replace_on_demand_with_spot,
        max_share_per_instance_type=spec.diversification.max_share_per_instance_type,
        max_share_per_zone=spec.diversification.max_share_per_zone,
        min_distinct_offers=spec.diversification.min_distinct_offers,
        max_usd_per_hour=spec.budget.max_usd_per_hour,
        max_gpus=spec.budget.max_gpus,
        teams=tuple(
            model.Team(name=n, guaranteed_gpus=t.guaranteed_gpus, burst_gpus=t.burst_gpus, weight=t.weight)
            for n, t in sorted(spec.teams.items())
        ),
        priority_classes=tuple(
            model.PriorityClass(name=n, value=c.value, preemptible=c.preemptible, spot_eligible=c.spot_eligible)
            for n, c in sorted(spec.priority_classes.items())
        ),
        default_priority_class=spec.default_priority_class,
        idle_timeout_minutes=spec.scaling.idle_timeout_minutes,
        max_headroom_gpus=spec.scaling.max_headroom_gpus,
        scale_up_cooldown_seconds=spec.scaling.scale_up_cooldown_seconds,
        scale_down_cooldown_minutes=spec.scaling.scale_down_cooldown_minutes,
        checkpoint_grace_seconds=spec.interruptions.checkpoint_grace_seconds,
        max_interruptions_before_on_demand=spec.interruptions.max_interruptions_before_on_demand,
        count_interruptions=spec.interruptions.count_interruptions,
        reclaimed_offer_ttl_minutes=spec.interruptions.reclaimed_offer_ttl_minutes,
        restart_overhead_minutes=spec.interruptions.restart_overhead_minutes,
        requeue_priority_boost=spec.interruptions.requeue_priority_boost,
        rebalance_drain_probability=spec.interruptions.rebalance_drain_probability,
        consolidation_payback_hours=spec.scaling.consolidation_payback_hours,
        consolidation_max_gpu_utilisation=spec.scaling.consolidation_max_gpu_utilisation,
        disruption_budget_nodes=spec.scaling.disruption_budget_nodes,
        aging_priority_per_hour=spec.aging_priority_per_hour,
        infrastructure=None if spec.infrastructure is None else model.Infrastructure(
            cluster=spec.infrastructure.cluster,
            controller_url=spec.infrastructure.controller_url,
            aws=tuple(
                model.AwsRegionSettings(region=region, image_id=r.image_id, subnet_ids=tuple(r.subnet_ids),
                                        security_group_ids=tuple(r.security_group_ids),
                                        gang_placement_groups=r.gang_placement_groups)
                for region, r in sorted(spec.infrastructure.aws.items())
            ),
            tags=tuple(sorted(spec.infrastructure.tags.items())),
            gcp=None if spec.infrastructure.gcp is None else model.GcpSettings(
                project=spec.infrastructure.gcp.project,
                regions=tuple(sorted(set(spec.infrastructure.gcp.regions))),
                image=spec.infrastructure.gcp.image,
                network=spec.infrastructure.gcp.network,
                subnetwork=spec.infrastructure.gcp.subnetwork,
                service_account_email=spec.infrastructure.gcp.service_account_email,
                termination_action=spec.infrastructure.gcp.termination_action,
            ),
            azure=None if spec.infrastructure.azure is None else model.AzureSettings(
                subscription_id=spec.infrastructure.azure.subscription_id,
                resource_group=spec.infrastructure.azure.resource_group,
                admin_ssh_public_key=spec.infrastructure.azure.admin_ssh_public_key,
                regions=tuple(model.AzureRegionSettings(region=r, subnet_id=a.subnet_id, image_id=a.image_id)
                              for r, a in sorted(spec.infrastructure.azure.regions.items())),
            ),
        ),
    )


def policy_from_document(doc: Document) -> model.Policy:
    """Validate a parsed document as a policy; raise :class:`SpecError` with
    every issue found."""
    return to_core(spec_from_document(doc))


def spec_from_document(doc: Document) -> PolicySpec:
    """The validated policy in the file's own shape (sections, teams and
    classes by name, defaults filled in), for what compares policies as they
    are written (`fleetctl policy diff`); raise :class:`SpecError` with every
    issue found. :func:`to_core` gives what the planner reads."""
    issues = list(doc.issues)
    if not isinstance(doc.data, dict):
        if () not in doc.reported or not issues:  # a tag on the whole document was reported while reading
            issues.append(doc.issue((), "a policy must be a mapping of sections (providers, budget, teams, ...)"))
        raise SpecError(issues)
    spec, errors = doc.validate(PolicySpec, doc.data)
    issues.extend(errors)
    if spec is None:
        raise SpecError(issues or [doc.issue((), "invalid policy")])
    issues.extend(_contradictions(spec, doc))
    if issues:
        raise SpecError(issues)
    return spec


def load_policy(path: str | os.PathLike[str]) -> model.Policy:
    """Read, validate and convert a policy file (YAML or JSON).

    Raises :class:`fleetctl.yamlerrors.SpecError` carrying every problem as
    ``FILE:LINE:COLUMN: field.path: message``.
    """
    return policy_from_document(read_document(path))


#: Policy sections a running daemon cannot take up on a reload (SIGHUP,
#: ``--policy-check-seconds``): the cloud adapters of ``--cloud`` are built
#: from them at start (regions, subnets, images, which clouds), so a reload that
#: changes them is refused whole until the daemon restarts
#: (``fleetctl.controller.loop``); ``fleetctl policy diff`` says so of a change.
READ_AT_START = ("infrastructure", "providers")


@dataclass(frozen=True, slots=True)
class PolicyFile:
    """One version of a policy file as read: what the planner reads
    (``policy``), the validated spec and its document (to compare two
    versions setting by setting, with lines: ``fleetctl.policydiff``), and
    the SHA-256 (hex) of the bytes it was read from, what ``sha256sum``
    prints for that version (``fleetctl_policy_info``)."""

    policy: model.Policy
    spec: PolicySpec
    document: Document
    sha256: str


def read_policy_file(path: str | os.PathLike[str]) -> PolicyFile:
    """:func:`load_policy`, keeping the spec, the document and the digest
    (:class:`PolicyFile`). Raises :class:`SpecError` as it does."""
    doc, raw = read_document_and_bytes(path)
    spec = spec_from_document(doc)
    return PolicyFile(to_core(spec), spec, doc, hashlib.sha256(raw).hexdigest())


#: Said of every integer field in the JSON Schemas (see :func:`note_integers`).
INTEGER_NOTE = "Written without a decimal point: 8, not 8.0."


def note_integers(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with :data:`INTEGER_NOTE` added to the description of every
    integer field (in place; returned for convenience).

    Design choice: the loader refuses ``8.0`` where an integer is required
    (strict, like ``"8"`` for a number: a GPU count written as a decimal is
    more often a slip than a count), but JSON Schema cannot say so: its
    ``"type": "integer"`` is any number with a zero fractional part, so a
    schema validator (and an editor using one) accepts ``8.0``. The schema
    keeps ``"integer"``, the truest type it has, and says the rest in words
    where an editor shows them.
    """
    for node in _schema_objects(schema):
        for prop in node.get("properties", {}).values():
            types = [prop.get("type")] + [alt.get("type") for alt in prop.get("anyOf", [])]
            if "integer" in types and INTEGER_NOTE not in prop.get("description", ""):
                prop["description"] = f"{prop.get('description', '')} {INTEGER_NOTE}".strip()
    return schema


def close_named_maps(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``"additionalProperties": false`` on every map keyed by
    names (``patternProperties`` and no ``properties``: teams, priority
    classes, regions), in place; returned for convenience. pydantic writes
    the name pattern but leaves other keys allowed, so an editor accepted a
    team named ``a.b`` that the loader refuses."""
    for node in _schema_objects(schema):
        if "patternProperties" in node and "properties" not in node:
            node.setdefault("additionalProperties", False)
    return schema


def _schema_objects(node: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in ``node`` (a JSON Schema), outermost first."""
    if isinstance(node, dict):
        yield node
        for value in list(node.values()):
            yield from _schema_objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from _schema_objects(value)


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the policy file, for editors."""
    schema = close_named_maps(note_integers(PolicySpec.model_json_schema()))
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}

