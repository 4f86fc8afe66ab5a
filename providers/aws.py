"""The AWS adapter: EC2 Spot and on-demand GPU instances through boto3.

What it does, in the words of :class:`providers.base.Provider`:

* ``offers``: the GPU instance types EC2 lists in each configured region
  (``DescribeInstanceTypes``, NVIDIA GPUs only, normalised to the catalog's
  vocabulary), spot prices per type and zone from ``DescribeSpotPriceHistory``
  (latest price per zone within ``spot_price_lookback``; the shipped snapshot
  fills zones the API gave no price for), on-demand prices from the snapshot.
  Spot offers are zonal and named by zone **id** (``use1-az1``), like the
  snapshot, because zone names differ between accounts.
* ``nodes``: every instance tagged ``fleetctl:cluster=<cluster>``, its Offer
  recovered from instance type, zone and lifecycle; its ``zone`` is the zone
  id of its placement (also for a regional on-demand offer's node).
* ``launch``: one ``CreateFleet`` of type ``instant`` from the pool's launch
  template (``fleetctl-<cluster>-<pool>``, declared by Terraform) with the
  planner's chosen override: instance type x zone (as the subnet of that zone)
  x market. A gang is all or nothing and in one zone: ``MinTargetCapacity =
  count`` and ``SingleAvailabilityZone``. Spot uses ``price-capacity-optimized``.
  Idempotent twice over: the ``ClientToken`` is derived from the idempotency
  key, and every instance carries a ``fleetctl:launch`` tag, so a retry after
  a crash finds the first call's instances instead of buying again. A fleet
  that got fewer instances than asked returns them with the fleet's errors
  (partial fulfilment is reported, not hidden); one that got none raises the
  translated error.
* ``terminate``: ``TerminateInstances``; an instance already gone is success;
  an instance that is not this cluster's is ``NodeNotFound`` (fleetctl never
  terminates what it did not buy).
* ``interruption_events``: the region's SQS queue, which EventBridge rules
  fill with "EC2 Spot Instance Interruption Warning", "EC2 Instance Rebalance
  Recommendation" and "EC2 Instance State-change Notification" events
  (``terraform/modules/aws-controller``). Each message becomes an
  InterruptionEvent; it is deleted from the queue only by ``acknowledge``,
  after the controller handled it, so a crash in between redelivers it. A
  poll that fails part-way (a throttled call after the receive) keeps the
  messages it received for the next poll instead of leaving them invisible.
  Messages about other instances are deleted at once; a message that is not
  an EC2 event is logged with its body and deleted (it can never be handled).

Errors are translated to the typed errors of ``providers.base``:
``InsufficientInstanceCapacity`` and other stockouts -> ``InsufficientCapacity``;
``MaxSpotInstanceCountExceeded``, ``VcpuLimitExceeded``, ``InstanceLimitExceeded``
-> ``QuotaExceeded``; ``RequestLimitExceeded``, ``Throttling`` ->
``Throttled``; an unknown or unsupported instance type -> ``UnknownInstanceType``.
An answer EC2 should not have given (a field left out, or one botocore cannot
parse) is a ``ProviderError`` naming the field and where it was, not a
``KeyError`` from deep inside; a spot price that is no price (not finite,
zero or less) gives way to the snapshot's.
The adapter never retries (botocore's own retries are switched off so there
is one retry policy, not two); :class:`providers.retry.ThrottleRetry` does,
bounded and jittered.

boto3 is imported only here, lazily (``pip install 'fleetctl[aws]'``). Every
API call the adapter makes is listed in :data:`API_CALLS`, which the
Terraform aws-iam module's IAM policy grants, and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Final

from fleetctl.model import (
    RECLAIM_NOTICE_SECONDS,
    InstanceType,
    Interconnect,
    InterruptionEvent,
    InterruptionKind,
    Market,
    Node,
    NodeState,
    Offer,
)
from fleetctl.naming import interruption_queue_name, launch_template_name, placement_group_name, pool_name
from providers.base import (
    UNKNOWN_LAUNCH_TIME,
    Capabilities,
    InsufficientCapacity,
    LaunchRequest,
    LaunchResult,
    NodeNotFound,
    ProviderError,
    QuotaExceeded,
    Throttled,
    UnknownInstanceType,
)
from providers.catalog import AWS_NVLINK_TYPES, GPU_MEMORY_GIB, load_catalog, normalise_gpu_model

log = logging.getLogger(__name__)

PROVIDER: Final[str] = "aws"
INSTALL_HINT: Final[str] = "the AWS provider needs boto3: pip install 'fleetctl[aws]'"

TAG_CLUSTER: Final[str] = "fleetctl:cluster"
TAG_POOL: Final[str] = "fleetctl:pool"
TAG_OFFER: Final[str] = "fleetctl:offer"
TAG_LAUNCH: Final[str] = "fleetctl:launch"

#: AWS's spot interruption notice: two minutes before the instance is taken.
INTERRUPTION_NOTICE_SECONDS: Final[int] = RECLAIM_NOTICE_SECONDS["aws"]

#: Every AWS API call the adapter makes, as IAM actions. The controller's IAM
#: policy (``terraform/modules/aws-iam``) grants exactly these, so exactly
#: what the code calls; a test checks both ways.
#: ``ec2:RunInstances``, ``ec2:CreateTags`` and ``iam:PassRole`` are what
#: ``CreateFleet`` needs on the caller's behalf (launching from a template that
#: names an instance profile, tagging at launch).
API_CALLS: Final[tuple[str, ...]] = (
    "ec2:CreateFleet",
    "ec2:CreateTags",
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstances",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeSubnets",
    "ec2:RunInstances",
    "ec2:TerminateInstances",
    "iam:PassRole",
    "sqs:DeleteMessage",
    "sqs:GetQueueUrl",
    "sqs:ReceiveMessage",
)

EVENT_SPOT_WARNING: Final[str] = "EC2 Spot Instance Interruption Warning"
EVENT_REBALANCE: Final[str] = "EC2 Instance Rebalance Recommendation"
EVENT_STATE_CHANGE: Final[str] = "EC2 Instance State-change Notification"
EVENT_DETAIL_TYPES: Final[tuple[str, ...]] = (EVENT_SPOT_WARNING, EVENT_REBALANCE, EVENT_STATE_CHANGE)

# Error codes -> typed errors. Sources: the EC2 API error-code reference
# (docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html) and
# the EC2 Fleet error codes (.../ec2-fleet-troubleshooting).
_CAPACITY_CODES: Final[frozenset[str]] = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "SpotMaxPriceTooLow",
        "capacity-not-available",
        "price-too-low",
        "UnfulfillableCapacity",
    }
)
_QUOTA_CODES: Final[frozenset[str]] = frozenset(
    {
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "InstanceLimitExceeded",
        "MaxFleetCountExceeded",
        "MaxSpotFleetRequestCountExceeded",
    }
)
_THROTTLE_CODES: Final[frozenset[str]] = frozenset(
    {"RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException",
     "RequestThrottled", "SlowDown"}
)
_UNKNOWN_TYPE_CODES: Final[frozenset[str]] = frozenset({"InvalidInstanceType", "Unsupported"})

_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,17}$")
_STATES: Final[Mapping[str, NodeState]] = {
    "pending": NodeState.LAUNCHING,
    "running": NodeState.READY,
    "shutting-down": NodeState.TERMINATING,
    "stopping": NodeState.TERMINATING,
    "stopped": NodeState.GONE,
    "terminated": NodeState.GONE,
}


# =========================================================================== config


@dataclass(frozen=True, slots=True)
class AwsConfig:
    """Where and as whom the adapter works.

    ``subnet_ids`` maps a region to the subnets fleetctl may launch into (one
    per zone is enough; the subnet picks the zone of a spot offer). A region
    without an entry uses the subnets tagged ``fleetctl:cluster=<cluster>``.
    """

    cluster: str
    regions: tuple[str, ...]
    subnet_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    spot_price_lookback: timedelta = timedelta(hours=6)
    cache_seconds: float = 300.0  # catalog, zones and prices are re-read after this long
    max_message_batches: int = 10  # SQS receives per region per poll (10 messages each)
    # Regions whose pools have a cluster placement group (the policy's gang_placement_groups): a gang's
    # launch goes into its pool's group; other launches do not (a cluster group holds one zone).
    placement_group_regions: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.cluster:
            raise ValueError("AwsConfig.cluster must not be empty")
        if not self.regions:
            raise ValueError("AwsConfig.regions must list at least one region")


#: ``client_factory(service, region)`` -> a boto3 client.
ClientFactory = Callable[[str, str], Any]


def boto3_client_factory(*, endpoint_url: str | None = None, **session_kwargs: Any) -> ClientFactory:
    """boto3 clients with botocore's retries off (``ThrottleRetry`` is the one
    retry policy). ``endpoint_url`` points every client at one endpoint (moto
    in the tests; ``AWS_ENDPOINT_URL`` does the same from the environment)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:  # pragma: no cover - the [aws] extra is installed in tests
        raise ImportError(INSTALL_HINT) from exc
    session = boto3.session.Session(**session_kwargs)
    config = Config(retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=30)
    clients: dict[tuple[str, str], Any] = {}

    def factory(service: str, region: str) -> Any:
        key = (service, region)
        if key not in clients:
            clients[key] = session.client(service, region_name=region, endpoint_url=endpoint_url, config=config)
        return clients[key]

    return factory


# =========================================================================== pure helpers


def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ``ClientError`` (duck-typed, so this
    module imports botocore only when it makes clients)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, Mapping):
        return None
    code = response.get("Error", {}).get("Code")
    return str(code) if code else None


def translate_code(code: str, message: str) -> ProviderError:
    """The typed error for an AWS error code (see the module docstring)."""
    detail = f"{code}: {message}" if message else code
    if code in _THROTTLE_CODES:
        return Throttled(detail)
    if code in _QUOTA_CODES or code.endswith("LimitExceeded"):
        return QuotaExceeded(detail)
    if code in _CAPACITY_CODES or code.startswith("Insufficient"):
        return InsufficientCapacity(detail)
    if code in _UNKNOWN_TYPE_CODES or (code == "InvalidParameterValue" and "instance type" in message.lower()):
        return UnknownInstanceType(detail)
    return ProviderError(detail)


def _field(item: Mapping[str, Any], *path: str) -> Any:
    """``item[path[0]][path[1]]...``; ``ValueError`` naming the path when a part is missing."""
    value: Any = item
    for key in path:
        if not isinstance(value, Mapping) or value.get(key) is None:
            raise ValueError(f"no {'.'.join(path)}")
        value = value[key]
    return value


def instance_type_from_api(info: Mapping[str, Any]) -> InstanceType | None:
    """An InstanceType from one ``DescribeInstanceTypes`` entry: a GPU shape
    (NVIDIA GPUs, normalised to the catalog's vocabulary) or a CPU shape
    (``gpu_model`` None). ``None`` for shapes with other accelerators (AMD
    GPUs, Inferentia, Trainium, FPGAs, media accelerators): a CUDA job cannot
    use them, and they are not plain CPU machines either; and for a fraction
    of a GPU (g6f, gr6f), which whole GPU counts cannot describe. ``ValueError``
    naming the field when the entry lacks one it needs."""
    name = str(_field(info, "InstanceType"))
    archs = info.get("ProcessorInfo", {}).get("SupportedArchitectures") or ["x86_64"]
    architecture = "arm64" if "arm64" in archs else "x86_64"
    try:
        vcpus = int(_field(info, "VCpuInfo", "DefaultVCpus"))
        memory = round(float(_field(info, "MemoryInfo", "SizeInMiB")) / 1024, 1)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: {exc}") from exc
    gpus = info.get("GpuInfo", {}).get("Gpus") or []
    others = ("InferenceAcceleratorInfo", "FpgaInfo", "NeuronInfo", "MediaAcceleratorInfo")
    if not gpus:
        if any(info.get(key) for key in others):
            return None
        return InstanceType(PROVIDER, name, vcpus, memory, architecture=architecture)
    nvidia = [g for g in gpus if str(g.get("Manufacturer", "")).upper() == "NVIDIA"]
    if len(nvidia) != len(gpus):
        return None
    gpu = nvidia[0]
    memory_per_gpu = gpu.get("MemoryInfo", {}).get("SizeInMiB", 0) / 1024
    model = normalise_gpu_model(str(gpu.get("Name", "")), memory_per_gpu or None)
    if model is None:
        log.debug("aws: %s has an NVIDIA GPU %r outside the vocabulary; skipped", name, gpu.get("Name"))
        return None
    count = sum(int(g.get("Count", 0)) for g in nvidia)
    if count <= 0:
        # a fraction of a GPU (g6f, gr6f: Count 0 and a GpuPartitionSize such as 0.125): fleetctl counts whole
        # GPUs, so it is neither a GPU shape nor a plain CPU machine (before 2026-11-28: L4 with 0 GPUs)
        log.debug("aws: %s has a fraction of an NVIDIA GPU (%r); skipped", name, gpu.get("GpuPartitionSize"))
        return None
    return InstanceType(
        provider=PROVIDER,
        name=name,
        vcpus=vcpus,
        memory_gib=memory,
        gpu_model=model,
        gpu_count=count,
        gpu_memory_gib=GPU_MEMORY_GIB[model],
        interconnect=(Interconnect.NVLINK if name in AWS_NVLINK_TYPES and count > 1
                      else Interconnect.PCIE),
        architecture=architecture,
    )


def launch_token(cluster: str, key: str) -> str:
    """The tag value and ClientToken of one launch (<= 64 chars, as CreateFleet allows)."""
    return hashlib.sha256(f"{cluster}:{key}".encode()).hexdigest()[:32]


def parse_event(body: str) -> dict[str, Any]:
    """Parse one EventBridge message body; raises ``ValueError`` naming what is wrong."""
    try:
        event = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    if not isinstance(event, dict):
        raise ValueError("not a JSON object")
    for key in ("id", "detail-type", "time", "detail"):
        if key not in event:
            raise ValueError(f"no {key!r} field: not an EventBridge event")
    if not isinstance(event["detail"], dict) or not event["detail"].get("instance-id"):
        raise ValueError("detail.instance-id missing")
    instance_id = event["detail"]["instance-id"]
    if not isinstance(instance_id, str) or not _INSTANCE_ID.fullmatch(instance_id):
        raise ValueError(f"detail.instance-id {instance_id!r} is not an EC2 instance id")
    return event


def event_to_interruption(event: Mapping[str, Any]) -> InterruptionEvent | None:
    """The InterruptionEvent of one parsed EC2 event; ``None`` for events that
    need no action (a state change to ``pending``/``running``)."""
    kind_name = event["detail-type"]
    detail = event["detail"]
    try:
        at = datetime.fromisoformat(str(event["time"]).replace("Z", "+00:00"))
        at = at.astimezone(timezone.utc) if at.tzinfo else at.replace(tzinfo=timezone.utc)
        notice_end = at + timedelta(seconds=INTERRUPTION_NOTICE_SECONDS)
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"time {event['time']!r} is not an ISO 8601 time EC2 could have sent ({exc})") from exc
    deadline = None
    if kind_name == EVENT_SPOT_WARNING:
        kind = InterruptionKind.RECLAIM_WARNING
        deadline = notice_end
    elif kind_name == EVENT_REBALANCE:
        kind = InterruptionKind.REBALANCE
    elif kind_name == EVENT_STATE_CHANGE:
        if detail.get("state") not in ("shutting-down", "terminated", "stopping", "stopped"):
            return None
        kind = InterruptionKind.TERMINATED
    else:
        raise ValueError(f"detail-type {kind_name!r} is not one fleetctl subscribes to")
    return InterruptionEvent(
        event_id=f"aws-{event['id']}",
        provider=PROVIDER,
        node_id=str(detail["instance-id"]),
        kind=kind,
        received_at_utc=at,
        deadline_utc=deadline,
    )


def _required(item: Mapping[str, Any], key: str, where: str) -> Any:
    """``item[key]``; a ProviderError naming ``where`` and the field when EC2 left it out."""
    value = item.get(key)
    if value is None or value == "":
        raise ProviderError(f"aws: {where} has no {key}")
    return value


def _type_from_api(region: str, info: Mapping[str, Any]) -> InstanceType | None:
    """``instance_type_from_api``, a malformed entry a ProviderError naming the region."""
    try:
        return instance_type_from_api(info)
    except ValueError as exc:
        raise ProviderError(f"aws: DescribeInstanceTypes in {region} lists an instance type this fleetctl cannot "
                            f"read: {exc}") from exc


def _utc(value: Any, what: str) -> datetime:
    """A time of an EC2 answer, in UTC (one without an offset is taken as
    UTC, as the GCP and Azure adapters do)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ProviderError(f"aws: {what} {value!r} is not a time") from None
    if not isinstance(value, datetime):
        raise ProviderError(f"aws: {what} {value!r} is not a time")
    return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _price(value: Any, where: str) -> float:
    """A SpotPrice (a decimal string). Not finite, zero or less is returned as
    it is: the caller falls back to the snapshot for those."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ProviderError(f"aws: {where} has SpotPrice {value!r}, which is not a number") from None


def _state(instance: Mapping[str, Any], region: str) -> NodeState:
    """The NodeState of an instance. Design choice, as in the GCP adapter: a
    state this adapter does not know, or none in a malformed listing, is
    not taken as gone (that would requeue its jobs and buy again while it
    runs) but as launching, with a warning."""
    info = instance.get("State")
    name = info.get("Name") if isinstance(info, Mapping) else None
    state = _STATES.get(str(name))
    if state is None:
        log.warning("aws: instance %s in %s has state %r, unknown to this fleetctl; taken as launching",
                    instance.get("InstanceId"), region, name)
        return NodeState.LAUNCHING
    return state


# =========================================================================== the adapter


@dataclass
class _Pending:
    event: InterruptionEvent
    region: str
    receipt_handle: str


@dataclass
class _RegionCache:
    expires: datetime
    types: dict[str, InstanceType]  # GPU shapes: what is sold
    zone_ids: dict[str, str]  # zone name -> zone id
    subnets: dict[str, tuple[str, ...]]  # zone id -> this cluster's subnets there
    offers: tuple[Offer, ...]


class AwsProvider:
    """EC2 behind the Provider protocol. See the module docstring.

    ``offers`` defaults to the shipped snapshot (the fallback for prices);
    tests may pass their own.
    """

    name = PROVIDER
    capabilities = Capabilities(interruption_notice_seconds=INTERRUPTION_NOTICE_SECONDS,
                                rebalance_recommendations=True, node_id_pattern=r"i-[0-9a-f]{8,17}")

    def __init__(self, config: AwsConfig, client_factory: ClientFactory, *,
                 offers: Iterable[Offer] | None = None) -> None:
        self._config = config
        self._client = client_factory
        snapshot = tuple(o for o in (load_catalog() if offers is None else offers) if o.provider == PROVIDER)
        self._snapshot = {(o.instance_type.name, o.region, o.zone, o.market): o for o in snapshot}
        self._on_demand: dict[tuple[str, str], list[Offer]] = {}
        for o in snapshot:
            if o.market is Market.ON_DEMAND:
                self._on_demand.setdefault((o.instance_type.name, o.region), []).append(o)
        self._cache: dict[str, _RegionCache] = {}
        self._pending: dict[str, _Pending] = {}
        # Per region: messages received but not yet sorted (a poll failed part-way); see ``_receive``.
        self._received: dict[str, dict[str, tuple[dict[str, Any], str]]] = {}
        self._queue_urls: dict[str, str] = {}

    @classmethod
    def from_boto3(cls, config: AwsConfig, *, endpoint_url: str | None = None,
                   offers: Iterable[Offer] | None = None, **session_kwargs: Any) -> AwsProvider:
        """The adapter over real boto3 clients (raises ImportError with an
        install hint when the ``[aws]`` extra is missing)."""
        return cls(config, boto3_client_factory(endpoint_url=endpoint_url, **session_kwargs), offers=offers)

    # ------------------------------------------------------------------ contract

    def offers(self, now: datetime) -> tuple[Offer, ...]:
        return tuple(o for region in self._config.regions for o in self._region(region, now).offers)

    def instance_types(self, now: datetime) -> tuple[InstanceType, ...]:
        """Every GPU and CPU shape EC2 lists in the configured regions,
        normalised like the shipped snapshot, priced or not. Only GPU shapes
        are sold (:meth:`offers`): the snapshot has no CPU on-demand prices and
        Terraform declares no CPU pool, so CPU-only jobs run on GPU nodes' CPUs
        (``docs/terraform.md``)."""
        found: dict[str, InstanceType] = {}
        for region in self._config.regions:
            for info in self._pages("ec2", region, "describe_instance_types", "InstanceTypes"):
                t = _type_from_api(region, info)
                if t is not None:
                    found[t.name] = t
        return tuple(found[name] for name in sorted(found))

    def nodes(self, now: datetime) -> tuple[Node, ...]:
        result = []
        for region in self._config.regions:
            for instance in self._instances(region, [{"Name": f"tag:{TAG_CLUSTER}", "Values": [self._config.cluster]}]):
                result.append(self._node(region, instance, now))
        return tuple(sorted(result, key=lambda n: n.node_id))

    def launch(self, request: LaunchRequest, now: datetime) -> LaunchResult:
        """Buy ``request.count`` nodes of one offer in one zone, all or nothing per fleet.

        Recovery: repeating a launch with the same idempotency key returns the
        first call's instances (found by their ``fleetctl:launch`` tag), and
        EC2 answers a repeated ``ClientToken`` with the first fleet.
        """
        if request.count < 1:
            raise ValueError("a launch asks for at least one node")
        offer = request.offer
        if offer.provider != PROVIDER:
            raise UnknownInstanceType(f"{offer.key} is not an AWS offer")
        if offer.region not in self._config.regions:
            raise UnknownInstanceType(f"{offer.key}: region {offer.region} is not configured for AWS")
        cache = self._region(offer.region, now)
        if offer.instance_type.name not in cache.types:
            raise UnknownInstanceType(f"EC2 lists no {offer.instance_type.name} in {offer.region}")
        if offer.market is Market.SPOT and not offer.zone:
            raise UnknownInstanceType(f"{offer.key}: an AWS spot offer names its zone")
        if offer.zone and offer.zone not in cache.zone_ids.values():
            raise UnknownInstanceType(f"{offer.key}: {offer.region} has no zone {offer.zone}")
        token = launch_token(self._config.cluster, request.idempotency_key)
        existing = self._instances(offer.region, [{"Name": f"tag:{TAG_LAUNCH}", "Values": [token]},
                                                  {"Name": f"tag:{TAG_CLUSTER}", "Values": [self._config.cluster]}])
        if existing:
            return LaunchResult(request, tuple(sorted((self._node(offer.region, i, now) for i in existing),
                                                      key=lambda n: n.node_id)))
        subnets = self._subnets(offer.region, offer.zone, now)
        if not subnets:
            where = f"zone {offer.zone}" if offer.zone else offer.region
            raise InsufficientCapacity(f"{offer.key}: no subnet of cluster {self._config.cluster} in {where}")
        response = self._call("ec2", offer.region, "create_fleet", **self.fleet_request(request, token, subnets))
        groups = response.get("Instances", [])
        ids = [i for group in groups for i in group.get("InstanceIds", [])]
        errors = response.get("Errors", [])
        if not ids:
            coded = [e for e in errors if e.get("ErrorCode")]
            if coded:
                raise translate_code(str(coded[0]["ErrorCode"]), str(coded[0].get("ErrorMessage", "")))
            if errors:  # not even a code to translate: say what is known
                messages = "; ".join(str(e.get("ErrorMessage")) for e in errors if e.get("ErrorMessage"))
                raise ProviderError(f"{offer.key}: CreateFleet (EC2 Fleet {response.get('FleetId')}) returned no "
                                    f"instances and errors without an error code{': ' + messages if messages else ''}")
            raise InsufficientCapacity(f"{offer.key}: EC2 Fleet {response.get('FleetId')} launched nothing")
        zones = {i: offer.zone or self._launched_zone(cache, group) for group in groups
                 for i in group.get("InstanceIds", [])}
        nodes = tuple(
            Node(node_id=i, offer=offer, state=NodeState.LAUNCHING, launched_at_utc=now, zone=zones[i])
            for i in sorted(ids)
        )
        error = None
        if len(ids) < request.count:
            codes = sorted({str(e.get("ErrorCode") or "no error code") for e in errors}) or ["no error given"]
            error = f"EC2 Fleet {response.get('FleetId')} launched {len(ids)} of {request.count}: {', '.join(codes)}"
        return LaunchResult(request, nodes, error=error)

    @staticmethod
    def _launched_zone(cache: _RegionCache, group: Mapping[str, Any]) -> str:
        """The zone id a CreateFleet instance group landed in (a regional offer's
        launch picks one of the cluster's subnets): its override's subnet, else
        its override's zone name; ``""`` if the answer names neither (the next
        ``nodes`` listing reads the instance's placement)."""
        overrides = group.get("LaunchTemplateAndOverrides", {}).get("Overrides", {})
        subnet = overrides.get("SubnetId")
        zone = next((z for z, ids in cache.subnets.items() if subnet in ids), "") if subnet else ""
        return zone or cache.zone_ids.get(overrides.get("AvailabilityZone", ""), "")

    def fleet_request(self, request: LaunchRequest, token: str, subnets: tuple[str, ...]) -> dict[str, Any]:
        """The ``CreateFleet`` parameters of one launch (public so tests can
        assert on the spot share moto does not act on)."""
        offer = request.offer
        pool = pool_name(offer.instance_type.gpu_model or "cpu")
        spot = offer.market is Market.SPOT
        tags = [
            {"Key": TAG_CLUSTER, "Value": self._config.cluster},
            {"Key": TAG_POOL, "Value": pool},
            {"Key": TAG_OFFER, "Value": offer.key},
            {"Key": TAG_LAUNCH, "Value": token},
        ]
        placement: dict[str, Any] = {}
        if request.together and request.count > 1 and offer.region in self._config.placement_group_regions:
            placement = {"Placement": {"GroupName": placement_group_name(self._config.cluster, pool)}}
        params: dict[str, Any] = {
            "Type": "instant",
            "ClientToken": token,
            "LaunchTemplateConfigs": [{
                "LaunchTemplateSpecification": {
                    "LaunchTemplateName": launch_template_name(self._config.cluster, pool),
                    "Version": "$Latest",
                },
                "Overrides": [{"InstanceType": offer.instance_type.name, "SubnetId": s, **placement}
                              for s in subnets],
            }],
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": request.count,
                "DefaultTargetCapacityType": "spot" if spot else "on-demand",
                "SpotTargetCapacity" if spot else "OnDemandTargetCapacity": request.count,
            },
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags},
                                  {"ResourceType": "fleet", "Tags": tags}],
        }
        market_options = {"MinTargetCapacity": request.count, "SingleAvailabilityZone": True,
                          "SingleInstanceType": True}
        if spot:
            params["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized", **market_options}
        else:
            params["OnDemandOptions"] = {"AllocationStrategy": "lowest-price", **market_options}
        return params

    def terminate(self, node_id: str, now: datetime) -> None:
        if not _INSTANCE_ID.fullmatch(node_id):
            raise NodeNotFound(f"{node_id!r} is not an EC2 instance id")
        for region in self._config.regions:
            instance = next((i for i in self._instances(region, [], instance_ids=[node_id])
                             if i["InstanceId"] == node_id), None)
            if instance is None:
                continue
            tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
            if tags.get(TAG_CLUSTER) != self._config.cluster:
                raise NodeNotFound(f"{node_id} is not managed by fleetctl cluster {self._config.cluster}")
            if instance.get("State", {}).get("Name") in ("shutting-down", "terminated"):
                return
            self._call("ec2", region, "terminate_instances", InstanceIds=[node_id])
            return
        # Not listed in any region: terminated long ago (EC2 forgets them after
        # about an hour) or never ours. Either way nothing runs: success.
        log.info("aws: terminate %s: no such instance in %s; treated as gone", node_id,
                 ", ".join(self._config.regions))

    def interruption_events(self, now: datetime) -> tuple[InterruptionEvent, ...]:
        """Events received and not yet acknowledged, oldest first. Messages
        stay in the queue (invisible) until ``acknowledge`` deletes them."""
        for region in self._config.regions:
            self._receive(region)
        pending = sorted(self._pending.values(), key=lambda p: (p.event.received_at_utc, p.event.event_id))
        return tuple(p.event for p in pending)

    def acknowledge(self, event_id: str) -> None:
        """Delete the event's message; unknown ids are ignored (already deleted)."""
        pending = self._pending.get(event_id)
        if pending is None:
            return
        self._call("sqs", pending.region, "delete_message", QueueUrl=self._queue_url(pending.region),
                   ReceiptHandle=pending.receipt_handle)
        del self._pending[event_id]

    # ------------------------------------------------------------------ helpers

    def _call(self, service: str, region: str, method: str, /, **kwargs: Any) -> Any:
        """One API call, its failure translated into a typed error."""
        client = self._client(service, region)
        try:
            return getattr(client, method)(**kwargs)
        except Exception as exc:  # botocore's ClientError, caught by duck type: boto3 is optional
            code = error_code(exc)
            if code is None:
                if isinstance(exc, (ValueError, TypeError, KeyError, OverflowError)):
                    # botocore could not parse the answer (an Integer field "two", a Timestamp "yesterday")
                    raise ProviderError(f"aws: {method} in {region} answered something this fleetctl cannot read: "
                                        f"{type(exc).__name__}: {str(exc)[:300]}") from exc
                raise  # no answer (connection refused, a timeout) or missing credentials: not the cloud's word
            message = str(exc.response.get("Error", {}).get("Message", ""))  # type: ignore[attr-defined]
            raise translate_code(code, message) from exc

    def _pages(self, service: str, region: str, method: str, key: str, /, **kwargs: Any) -> list[Any]:
        """Every page's ``key`` items. A page token the listing gave before is
        a ProviderError: following it would list the same pages forever."""
        items: list[Any] = []
        seen: set[str] = set()
        while True:
            page = self._call(service, region, method, **kwargs)
            items.extend(page.get(key, []))
            token = page.get("NextToken")
            if not token:
                return items
            if token in seen:
                raise ProviderError(f"aws: {method} in {region} gave the page token {str(token)[:100]!r} a second "
                                    f"time, after {len(seen) + 1} pages; the listing would never end")
            seen.add(token)
            kwargs["NextToken"] = token

    def _region(self, region: str, now: datetime) -> _RegionCache:
        cache = self._cache.get(region)
        if cache is not None and now < cache.expires:
            return cache
        types: dict[str, InstanceType] = {}
        # Every NVIDIA GPU family is g* or p* (g4dn ... g6e, gr6, p3 ... p6): listing
        # just those keeps a pass cheap; the CPU shapes are listed on demand.
        for info in self._pages("ec2", region, "describe_instance_types", "InstanceTypes",
                                Filters=[{"Name": "instance-type", "Values": ["g*", "p*"]}]):
            t = _type_from_api(region, info)
            if t is not None and t.gpu_count:
                types[t.name] = t
        zones = self._call("ec2", region, "describe_availability_zones", Filters=[
            {"Name": "zone-type", "Values": ["availability-zone"]}]).get("AvailabilityZones", [])
        zone_ids = {_required(z, "ZoneName", f"a zone of {region}"):
                    _required(z, "ZoneId", f"zone {z.get('ZoneName')} of {region}") for z in zones}
        subnets = self._cluster_subnets(region)
        # Only zones the cluster has a subnet in can be launched into, so only they are offered.
        usable = {z: zid for z, zid in zone_ids.items() if zid in subnets}
        offers = self._priced_offers(region, types, usable, now)
        cache = _RegionCache(now + timedelta(seconds=self._config.cache_seconds), types, zone_ids, subnets, offers)
        self._cache[region] = cache
        return cache

    def _priced_offers(self, region: str, types: Mapping[str, InstanceType], zone_ids: Mapping[str, str],
                       now: datetime) -> tuple[Offer, ...]:
        latest: dict[tuple[str, str], tuple[datetime, float]] = {}
        names = sorted(types)
        for start in range(0, len(names), 100):
            history = self._pages("ec2", region, "describe_spot_price_history", "SpotPriceHistory",
                                  InstanceTypes=names[start:start + 100], ProductDescriptions=["Linux/UNIX"],
                                  StartTime=now - self._config.spot_price_lookback, EndTime=now)
            for row in history:
                zone = zone_ids.get(row.get("AvailabilityZone", ""))
                if zone is None:
                    continue
                where = f"a spot price of {region} ({row.get('InstanceType')} in {row.get('AvailabilityZone')})"
                at = _utc(_required(row, "Timestamp", where), f"{where}: Timestamp")
                if at < now - self._config.spot_price_lookback:
                    continue  # stale (EC2 honours StartTime; not every endpoint does)
                key = (_required(row, "InstanceType", where), zone)
                if key not in latest or at > latest[key][0]:
                    latest[key] = (at, _price(_required(row, "SpotPrice", where), where))
        offers: dict[str, Offer] = {}
        for name, t in types.items():
            for zone in sorted(set(zone_ids.values())):
                price = latest.get((name, zone))
                fallback = self._snapshot.get((name, region, zone, Market.SPOT))
                usable = price is not None and math.isfinite(price[1]) and price[1] > 0  # not NaN, inf, 0 or less
                usd = price[1] if usable else (fallback.usd_per_hour if fallback else None)  # type: ignore[index]
                if usd is not None:
                    o = Offer(t, region, zone, Market.SPOT, usd)
                    offers[o.key] = o
            # On-demand list prices come from the snapshot, regional or per
            # zone as the snapshot has them (a zonal one launches in that zone).
            for o in self._on_demand.get((name, region), ()):
                if not o.zone or o.zone in zone_ids.values():
                    o = Offer(t, region, o.zone, Market.ON_DEMAND, o.usd_per_hour)
                    offers[o.key] = o
        return tuple(offers[k] for k in sorted(offers))

    def _instances(self, region: str, filters: list[dict[str, Any]], *,
                   instance_ids: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Instances matching ``filters``; ``instance_ids`` is a filter too, not
        ``InstanceIds``, so an id EC2 no longer knows narrows the answer instead
        of failing the whole call."""
        ids = sorted(set(instance_ids))
        if ids:
            filters = [*filters, {"Name": "instance-id", "Values": ids}]
        reservations = self._pages("ec2", region, "describe_instances", "Reservations", Filters=filters)
        unique: dict[str, dict[str, Any]] = {}  # an instance listed twice (on two pages) is one instance
        for reservation in reservations:
            for instance in reservation.get("Instances", []):
                instance_id = instance.get("InstanceId")
                if not instance_id:
                    raise ProviderError(f"aws: DescribeInstances in {region} lists an instance without an "
                                        f"InstanceId (reservation {reservation.get('ReservationId')})")
                unique.setdefault(instance_id, instance)
        return list(unique.values())

    def _cluster_subnets(self, region: str) -> dict[str, tuple[str, ...]]:
        """Zone id -> the subnets fleetctl may launch into there: the configured
        ones, else those tagged ``fleetctl:cluster=<cluster>``."""
        configured = self._config.subnet_ids.get(region)
        kwargs: dict[str, Any] = ({"SubnetIds": list(configured)} if configured else
                                  {"Filters": [{"Name": f"tag:{TAG_CLUSTER}", "Values": [self._config.cluster]}]})
        by_zone: dict[str, list[str]] = {}
        try:
            subnets = list(self._pages("ec2", region, "describe_subnets", "Subnets", **kwargs))
        except ProviderError as exc:
            if configured and "InvalidSubnetID" in str(exc):
                raise ProviderError(f"the policy's infrastructure.aws subnet_ids for {region} name a subnet EC2 "
                                    f"does not know ({', '.join(configured)}): {exc}") from exc
            raise
        for subnet in subnets:
            subnet_id = _required(subnet, "SubnetId", f"a subnet of {region}")
            zone_id = _required(subnet, "AvailabilityZoneId", f"subnet {subnet_id} of {region}")
            by_zone.setdefault(zone_id, []).append(subnet_id)
        return {zone: tuple(sorted(set(ids))) for zone, ids in sorted(by_zone.items())}  # a subnet listed twice is one

    def _subnets(self, region: str, zone_id: str, now: datetime) -> tuple[str, ...]:
        """Subnets to launch into: those of ``zone_id`` for a zonal offer, all for a regional one."""
        subnets = self._region(region, now).subnets
        if zone_id:
            return subnets.get(zone_id, ())
        return tuple(s for ids in subnets.values() for s in ids)

    def _node(self, region: str, instance: Mapping[str, Any], now: datetime) -> Node:
        cache = self._region(region, now)
        instance_id = instance["InstanceId"]  # _instances refuses a listing without it
        type_name = _required(instance, "InstanceType", f"instance {instance_id} in {region}")
        spot = instance.get("InstanceLifecycle") == "spot"
        zone = cache.zone_ids.get(instance.get("Placement", {}).get("AvailabilityZone", ""), "")
        market = Market.SPOT if spot else Market.ON_DEMAND
        candidates = [o for o in cache.offers if o.instance_type.name == type_name and o.market is market]
        offer = next((o for o in candidates if o.zone == zone), None) or next(
            (o for o in candidates if not o.zone and not spot), None)
        key_zone = zone if spot else ""
        if offer is None:
            # Bought from an offer that is not priced (any more): keep the node
            # visible at price 0 so nothing is placed on it blindly and it is
            # terminated when idle instead of leaking.
            log.warning("aws: %s is %s %s in %s, not a priced offer", instance_id, market.value,
                        type_name, zone or region)
            known = cache.types.get(type_name) or InstanceType(PROVIDER, type_name, 0, 0.0)
            offer = Offer(known, region, key_zone, market, 0.0)
        # botocore refuses a whole answer with a LaunchTime it cannot read; one left out is unknown.
        raw = instance.get("LaunchTime")
        launched = _utc(raw, f"instance {instance_id} in {region}: LaunchTime") if raw else None
        state = _state(instance, region)
        return Node(node_id=instance_id, offer=offer, state=state, launched_at_utc=launched or UNKNOWN_LAUNCH_TIME,
                    ready_at_utc=launched if state is NodeState.READY else None, zone=zone)

    def _queue_url(self, region: str) -> str:
        url = self._queue_urls.get(region)
        if url is None:
            name = interruption_queue_name(self._config.cluster)
            try:
                url = self._call("sqs", region, "get_queue_url", QueueName=name)["QueueUrl"]
            except ProviderError as exc:
                raise ProviderError(
                    f"aws: no interruption queue {name} in {region} ({exc}); apply the Terraform controller "
                    "module (fleetctl apply --terraform-dir DIR) first"
                ) from exc
            self._queue_urls[region] = url
        return url

    def _receive(self, region: str) -> None:
        """Receive the region's messages and sort them: this cluster's events
        into ``_pending``, the rest deleted.

        Design choice: a received message is invisible in the queue for its
        visibility timeout, so one that is dropped when a later call of the
        poll fails (DescribeInstances throttled) hides its notice for that
        long. Received messages are kept in ``_received`` until they are
        sorted, and a failed poll leaves them there for the next; a redelivery
        of one replaces its receipt handle (by message id).
        """
        url = self._queue_url(region)
        received = self._received.setdefault(region, {})  # message id -> (event, receipt handle)
        garbage: list[tuple[Mapping[str, Any], ValueError]] = []
        for _ in range(self._config.max_message_batches):
            messages = self._call("sqs", region, "receive_message", QueueUrl=url, MaxNumberOfMessages=10,
                                  WaitTimeSeconds=0).get("Messages", [])
            for message in messages:
                try:
                    received[message["MessageId"]] = (parse_event(message["Body"]), message["ReceiptHandle"])
                except ValueError as exc:
                    garbage.append((message, exc))
            if len(messages) < 10:
                break
        for message, exc in garbage:
            log.error("aws: deleting message %s from %s that is not an EC2 event (%s): %.500s",
                      message.get("MessageId"), url, exc, message.get("Body"))
            self._call("sqs", region, "delete_message", QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        if not received:
            return
        ours = {i["InstanceId"] for i in self._instances(
            region, [{"Name": f"tag:{TAG_CLUSTER}", "Values": [self._config.cluster]}],
            instance_ids=sorted({e["detail"]["instance-id"] for e, _ in received.values()}))}
        for message_id, (event, handle) in sorted(received.items()):
            try:
                interruption = event_to_interruption(event)
            except ValueError as exc:
                log.error("aws: deleting message %s: %s", message_id, exc)
                interruption = None
            if interruption is None or interruption.node_id not in ours:
                self._call("sqs", region, "delete_message", QueueUrl=url, ReceiptHandle=handle)
            else:
                # A redelivered message (its visibility timeout ran out before we
                # acknowledged) carries a new receipt handle; keep the newest.
                self._pending[interruption.event_id] = _Pending(interruption, region, handle)
            del received[message_id]
