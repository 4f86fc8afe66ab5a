"""The GCP adapter: Compute Engine Spot and on-demand GPU VMs through google-cloud-compute.

What it does, in the words of :class:`providers.base.Provider`:

* ``offers``: the snapshot's GCP offers (``providers/catalog.py``) in the
  configured regions, for the machine types Compute Engine lists in at least
  one zone of the region (``machineTypes.aggregatedList``; an N1 + GPU shape
  also needs its GPU in that zone, ``acceleratorTypes.aggregatedList``).
  Offers are regional (zone ``""``): GCE picks the zone at launch.
* ``nodes``: every instance labelled ``fleetctl-managed=true`` and
  ``fleetctl-cluster=<cluster>`` (``instances.aggregatedList``), its Offer
  recovered from machine type, attached GPUs, region and provisioning model,
  its ``zone`` the instance's (the node id is ``<zone>/<name>``).
* ``launch``: one regional ``instances.bulkInsert`` with ``count`` and
  ``min_count = count`` (a gang is all or nothing) in ONE zone
  (``locationPolicy.targetShape = ANY_SINGLE_ZONE``); spot as
  ``scheduling.provisioningModel = SPOT`` with the configured
  ``instanceTerminationAction`` (DELETE or STOP). Idempotent twice over: the
  ``requestId`` is a UUID derived from the idempotency key (GCE returns the
  first operation for a repeated id), and every instance carries a
  ``fleetctl-launch`` label, so a retry after the request-id window or a
  restart finds the first call's instances instead of buying again. A
  finished insert whose instances the listing does not show yet (it lags) is
  listed again a few times, then returned short of its nodes with the reason
  in ``LaunchResult.error``.
  Why bulk insert and not a managed instance group: ``docs/gcp.md``.
* ``terminate``: ``instances.delete``; an instance already gone (404) is success.
* ``interruption_events``: ``compute.instances.preempted`` operations
  (``operations.aggregatedList`` over every zone, one call), deduplicated by
  operation id, returned until acknowledged.

Errors are translated to the typed errors of ``providers.base``, from HTTP
errors and from the ``error.errors[].code`` of finished operations:
``ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS]`` and other stockouts ->
``InsufficientCapacity``; ``QUOTA_EXCEEDED`` / ``quotaExceeded`` ->
``QuotaExceeded``; HTTP 429 / ``rateLimitExceeded`` -> ``Throttled``; an
unknown machine type -> ``UnknownInstanceType``. The adapter never retries;
:class:`providers.retry.ThrottleRetry` is the wrapper that does (bounded, jittered).

google-cloud-compute is imported only here, lazily (``pip install 'fleetctl[gcp]'``).
Every SDK call the adapter makes goes through :class:`ComputeApi`, a small
private seam listing exactly those calls; :class:`SdkComputeApi` is the real one.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Final, Protocol, TypeVar

from fleetctl.model import (
    RECLAIM_NOTICE_SECONDS,
    InstanceType,
    InterruptionEvent,
    InterruptionKind,
    Market,
    Node,
    NodeState,
    Offer,
)
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
from providers.catalog import (
    gcp_instance_type,
    gcp_n1_gpu_instance_type,
    gcp_n1_gpu_type_name,
    load_catalog,
    parse_gcp_n1_gpu_type_name,
)

log = logging.getLogger(__name__)

PROVIDER: Final[str] = "gcp"
INSTALL_HINT: Final[str] = "the GCP provider needs google-cloud-compute: pip install 'fleetctl[gcp]'"

LABEL_MANAGED: Final[str] = "fleetctl-managed"
LABEL_CLUSTER: Final[str] = "fleetctl-cluster"
LABEL_OFFER: Final[str] = "fleetctl-offer"
LABEL_LAUNCH: Final[str] = "fleetctl-launch"

#: GCE's preemption notice: a Spot VM gets 30 s between the ACPI shutdown signal
#: and being stopped or deleted (cloud.google.com/compute/docs/instances/spot#preemption-process).
PREEMPTION_NOTICE_SECONDS: Final[int] = RECLAIM_NOTICE_SECONDS["gcp"]
PREEMPTED_OPERATION_TYPE: Final[str] = "compute.instances.preempted"

#: Namespace of the requestIds derived from idempotency keys (uuid5). Any fixed
#: UUID works; changing it would make a restarted controller re-buy a launch
#: still inside GCE's request-id window, so never change it.
REQUEST_ID_NAMESPACE: Final[uuid.UUID] = uuid.UUID("5b0c3c62-5d0e-4a4a-9d3f-6f1c2e8a7b10")

# Operation error codes (Operation.error.errors[].code) and HTTP error reasons
# (error.errors[].reason) -> typed error. Codes: cloud.google.com/compute/docs/troubleshooting/troubleshooting-vm-creation
# and .../troubleshooting-resource-availability; reasons: the Compute API's standard error reasons.
_CAPACITY_CODES: Final[frozenset[str]] = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    }
)
_QUOTA_CODES: Final[frozenset[str]] = frozenset({"QUOTA_EXCEEDED", "QUOTAEXCEEDED"})
_THROTTLE_CODES: Final[frozenset[str]] = frozenset(
    {"RATELIMITEXCEEDED", "USERRATELIMITEXCEEDED", "RATE_LIMIT_EXCEEDED"}
)

_LABEL_VALUE_MAX: Final[int] = 63
_LABEL_INVALID = re.compile(r"[^a-z0-9_-]")
_NAME_INVALID = re.compile(r"[^a-z0-9-]")

T = TypeVar("T")


# =========================================================================== config


@dataclass(frozen=True, slots=True)
class GcpConfig:
    """Where and how the adapter buys.

    ``termination_action`` is what GCE does to a preempted Spot VM: ``DELETE``
    (the default: fleetctl replaces nodes, it never restarts them) or ``STOP``
    (keeps the boot disk; the node is GONE for fleetctl all the same).
    ``regions`` empty means every region of the snapshot.
    """

    project: str
    cluster: str
    regions: tuple[str, ...] = ()
    image: str = "projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11"
    boot_disk_gib: int = 200
    network: str = "global/networks/default"
    subnetwork: str | None = None
    service_account: str | None = None
    termination_action: str = "DELETE"
    #: How far back preemption operations are read (GCE keeps operations for days).
    preemption_lookback: timedelta = timedelta(hours=1)
    #: Operation waits per launch (GCE's ``wait`` returns after at most ~2 min).
    max_operation_waits: int = 5
    #: Listings of a finished launch's instances, and the pause between them: the aggregated
    #: list may lag the operation (eventually consistent), so a short one is listed again.
    launch_listings: int = 3
    launch_listing_pause_seconds: float = 2.0

    def __post_init__(self) -> None:
        if self.termination_action not in ("DELETE", "STOP"):
            raise ValueError(f"termination_action must be DELETE or STOP, got {self.termination_action!r}")
        if not self.project or not self.cluster:
            raise ValueError("project and cluster are required")
        if self.launch_listings < 1 or self.launch_listing_pause_seconds < 0:
            raise ValueError("launch_listings must be >= 1 and launch_listing_pause_seconds >= 0")


# =========================================================================== the SDK seam


@dataclass(frozen=True, slots=True)
class ApiError(Exception):
    """A failed Compute API call or operation, before translation.

    ``http_status`` is 0 for an operation that finished with errors;
    ``codes`` holds the operation error codes or the HTTP error reasons.
    """

    http_status: int
    codes: tuple[str, ...]
    message: str

    def __str__(self) -> str:
        return f"{self.http_status or 'operation'} {','.join(self.codes)}: {self.message}"


class ComputeApi(Protocol):
    """Every Compute Engine call the adapter makes, and nothing else.

    Resources are the SDK's own message classes (``compute_v1.Instance``,
    ...); failures raise :class:`ApiError`. ``wait_*`` return the operation
    once DONE, or as it stands when GCE's wait gives up (status not DONE).
    """

    def machine_types(self, project: str) -> list[tuple[str, Any]]:
        """(zone, MachineType) for every zone."""

    def accelerator_types(self, project: str) -> list[tuple[str, Any]]:
        """(zone, AcceleratorType) for every zone."""

    def instances(self, project: str, filter_: str) -> list[tuple[str, Any]]:
        """(zone, Instance) matching ``filter_`` in every zone."""

    def get_instance(self, project: str, zone: str, name: str) -> Any | None:
        """The Instance, or None if it does not exist."""

    def bulk_insert(self, project: str, region: str, resource: Any, request_id: str) -> Any:
        """Start a regional bulk insert; returns the Operation."""

    def wait_region_operation(self, project: str, region: str, operation: str) -> Any: ...

    def delete_instance(self, project: str, zone: str, name: str, request_id: str) -> Any | None:
        """Start a delete; returns the Operation, or None if the instance is gone (404)."""

    def operations(self, project: str, filter_: str) -> list[tuple[str, Any]]:
        """(scope, Operation) matching ``filter_`` in every zone and region."""

    def bulk_insert_resource(self, *, count: int, name_pattern: str, machine_type: str,
                             accelerators: tuple[tuple[str, int], ...], labels: Mapping[str, str],
                             spot: bool, config: GcpConfig) -> Any:
        """The ``BulkInsertInstanceResource`` message of one launch."""


def _compute_v1() -> Any:
    try:
        import google.cloud.compute_v1 as compute_v1
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return compute_v1


class SdkComputeApi:
    """:class:`ComputeApi` over the real google-cloud-compute clients (REST).

    ``client_options`` and ``credentials`` go to every client, so an
    ``api_endpoint`` (e.g. ``http://127.0.0.1:PORT`` in tests) holds for every
    call, operation waits included: waits go through our own operations
    clients, never through ``ExtendedOperation``'s, which would poll
    compute.googleapis.com whatever the endpoint. ``timeout_seconds`` bounds
    each HTTP call; the SDK's own retries are switched off (``retry=None``)
    because retries live in :class:`ThrottleRetry`.
    """

    def __init__(self, *, client_options: Any = None, credentials: Any = None,
                 timeout_seconds: float = 60.0) -> None:
        compute_v1 = _compute_v1()
        from google.api_core import exceptions as api_exceptions

        self._errors = api_exceptions
        kwargs = {"client_options": client_options, "credentials": credentials, "transport": "rest"}
        self._instances = compute_v1.InstancesClient(**kwargs)
        self._region_instances = compute_v1.RegionInstancesClient(**kwargs)
        self._machine_types = compute_v1.MachineTypesClient(**kwargs)
        self._accelerator_types = compute_v1.AcceleratorTypesClient(**kwargs)
        self._region_operations = compute_v1.RegionOperationsClient(**kwargs)
        self._global_operations = compute_v1.GlobalOperationsClient(**kwargs)
        self._compute_v1 = compute_v1
        self._call = {"retry": None, "timeout": timeout_seconds}

    def _run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs, **self._call)
        except self._errors.GoogleAPICallError as exc:
            raise self._api_error(exc) from exc

    def _api_error(self, exc: Any) -> ApiError:
        reasons = tuple(str(e.get("reason", "")) for e in (exc.errors or ()) if isinstance(e, Mapping))
        if getattr(exc, "reason", None):
            reasons += (str(exc.reason),)
        return ApiError(int(exc.code or 0), tuple(r for r in reasons if r), str(exc.message))

    def _aggregated(self, pager: Any, attr: str) -> list[tuple[str, Any]]:
        """Every (scope, item) of an aggregated list, each once (by scope and
        name: an item on two pages is one item). The pager fetches later pages
        while iterating: it is consumed here, so an error on any page is an
        ApiError too, and a page token given twice is a ProviderError (the
        pager would follow it forever)."""
        found: dict[tuple[str, str], Any] = {}
        seen: set[str] = set()
        try:
            for page in pager.pages:
                for scope, scoped in page.items.items():
                    for item in getattr(scoped, attr):
                        key = item.name or f"#{len(found)}"  # a nameless item is kept, not merged
                        found.setdefault((scope.rsplit("/", 1)[-1], key), item)
                token = page.next_page_token
                if token in seen:
                    raise ProviderError(f"gcp: the aggregated list of {attr} gave the page token "
                                        f"{token[:100]!r} a second time, after {len(seen) + 1} pages; "
                                        "the listing would never end")
                if token:
                    seen.add(token)
        except self._errors.GoogleAPICallError as exc:
            raise self._api_error(exc) from exc
        return [(scope, item) for (scope, _), item in found.items()]

    def machine_types(self, project: str) -> list[tuple[str, Any]]:
        request = self._compute_v1.AggregatedListMachineTypesRequest(project=project)
        return self._aggregated(self._run(self._machine_types.aggregated_list, request=request), "machine_types")

    def accelerator_types(self, project: str) -> list[tuple[str, Any]]:
        request = self._compute_v1.AggregatedListAcceleratorTypesRequest(project=project)
        return self._aggregated(self._run(self._accelerator_types.aggregated_list, request=request),
                                "accelerator_types")

    def instances(self, project: str, filter_: str) -> list[tuple[str, Any]]:
        request = self._compute_v1.AggregatedListInstancesRequest(project=project, filter=filter_)
        return self._aggregated(self._run(self._instances.aggregated_list, request=request), "instances")

    def get_instance(self, project: str, zone: str, name: str) -> Any | None:
        try:
            return self._run(self._instances.get, project=project, zone=zone, instance=name)
        except ApiError as exc:
            if exc.http_status == 404:
                return None
            raise

    def bulk_insert(self, project: str, region: str, resource: Any, request_id: str) -> Any:
        request = self._compute_v1.BulkInsertRegionInstanceRequest(
            project=project, region=region, bulk_insert_instance_resource_resource=resource, request_id=request_id,
        )
        return self._run(self._region_instances.bulk_insert_unary, request=request)

    def wait_region_operation(self, project: str, region: str, operation: str) -> Any:
        return self._run(self._region_operations.wait, project=project, region=region, operation=operation)

    def delete_instance(self, project: str, zone: str, name: str, request_id: str) -> Any | None:
        request = self._compute_v1.DeleteInstanceRequest(project=project, zone=zone, instance=name,
                                                         request_id=request_id)
        try:
            return self._run(self._instances.delete_unary, request=request)
        except ApiError as exc:
            if exc.http_status == 404:
                return None
            raise

    def operations(self, project: str, filter_: str) -> list[tuple[str, Any]]:
        request = self._compute_v1.AggregatedListGlobalOperationsRequest(project=project, filter=filter_)
        return self._aggregated(self._run(self._global_operations.aggregated_list, request=request), "operations")

    # ----------------------------------------------------------- message builders (SDK types)

    def bulk_insert_resource(self, *, count: int, name_pattern: str, machine_type: str,
                             accelerators: tuple[tuple[str, int], ...], labels: Mapping[str, str],
                             spot: bool, config: GcpConfig) -> Any:
        """The ``BulkInsertInstanceResource`` of one launch."""
        c = self._compute_v1
        scheduling = c.Scheduling(
            # GPUs cannot live-migrate: host maintenance stops the VM, and it
            # does not restart on its own (fleetctl replaces nodes instead).
            on_host_maintenance="TERMINATE",
            automatic_restart=False,
            provisioning_model="SPOT" if spot else "STANDARD",
        )
        if spot:
            scheduling.instance_termination_action = config.termination_action
        interface = c.NetworkInterface(network=config.network)
        if config.subnetwork:
            interface.subnetwork = config.subnetwork
        properties = c.InstanceProperties(
            machine_type=machine_type,
            labels=dict(labels),
            scheduling=scheduling,
            disks=[c.AttachedDisk(
                boot=True, auto_delete=True,
                initialize_params=c.AttachedDiskInitializeParams(
                    source_image=config.image, disk_size_gb=config.boot_disk_gib),
            )],
            network_interfaces=[interface],
            guest_accelerators=[c.AcceleratorConfig(accelerator_type=a, accelerator_count=n)
                                for a, n in accelerators],
        )
        if config.service_account:
            properties.service_accounts = [c.ServiceAccount(
                email=config.service_account, scopes=["https://www.googleapis.com/auth/cloud-platform"])]
        return c.BulkInsertInstanceResource(
            count=count,
            min_count=count,  # all or nothing: a gang never gets part of its nodes
            name_pattern=name_pattern,
            instance_properties=properties,
            location_policy=c.LocationPolicy(target_shape="ANY_SINGLE_ZONE"),
        )


# =========================================================================== normalisation


def region_of_zone(zone: str) -> str:
    """``"us-central1-a"`` -> ``"us-central1"``."""
    return zone.rsplit("-", 1)[0]


def short_name(url_or_name: str) -> str:
    """The last path segment of a resource URL (``.../machineTypes/a2-highgpu-1g``)."""
    return url_or_name.rstrip("/").rsplit("/", 1)[-1]


def label_value(raw: str) -> str:
    """``raw`` as a GCP label value: only ``[a-z0-9_-]``, at most 63 characters.

    Other characters become ``-``; a value that would be longer keeps 54
    characters and a hash of the whole, so distinct inputs stay distinct.
    """
    value = _LABEL_INVALID.sub("-", raw.lower())
    if len(value) <= _LABEL_VALUE_MAX:
        return value
    return f"{value[:54]}-{hashlib.sha256(raw.encode()).hexdigest()[:8]}"


def request_id(scope: str, key: str) -> str:
    """The requestId (a UUID, as GCE requires) for an idempotency key: the same
    key always gives the same id."""
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, f"{scope}:{key}"))


def machine_type_instance_type(machine_type: Any) -> InstanceType | None:
    """The InstanceType of a ``compute_v1.MachineType`` with bundled GPUs
    (a2, a3, g2, ...), normalised exactly as the snapshot's rows are
    (``catalog.gcp_instance_type``); ``None`` for one without GPUs or with a
    GPU outside the vocabulary (e.g. a model newer than the catalog).
    Memory is ``memory_mb / 1024`` (GCE's MB are MiB)."""
    if not machine_type.accelerators:
        return None
    accel = machine_type.accelerators[0]
    row = {
        "machine_type": machine_type.name,
        "series": machine_type.name.split("-", 1)[0],
        "vcpus": str(machine_type.guest_cpus),
        "memory_gb": str(round(machine_type.memory_mb / 1024, 2)),
        "accelerator_type": accel.guest_accelerator_type,
        "accelerator_count": str(accel.guest_accelerator_count),
    }
    try:
        return gcp_instance_type(row)
    except ValueError as exc:  # a GPU the vocabulary does not name: not sellable, not fatal
        log.info("gcp: skipping machine type %s: %s", machine_type.name, exc)
        return None


def n1_instance_types(machine_type: Any, accelerator_type: Any) -> tuple[InstanceType, ...]:
    """Every N1 + GPU shape of one ``compute_v1.MachineType`` and one
    ``compute_v1.AcceleratorType`` (one per GPU count GCE allows, capped by
    ``maximum_cards_per_instance``)."""
    shapes = []
    for count in (1, 2, 4, 8):
        if count > accelerator_type.maximum_cards_per_instance:
            break
        t = gcp_n1_gpu_instance_type(machine_type.name, int(machine_type.guest_cpus),
                                     round(machine_type.memory_mb / 1024, 2), accelerator_type.name, count)
        if t is not None:
            shapes.append(t)
    return tuple(shapes)


def _n1_shapes(machines: Iterable[tuple[str, Any]],
               accelerators: Mapping[str, Iterable[Any]]) -> Iterator[tuple[str, InstanceType]]:
    """(zone, shape) for every N1 + GPU shape a zone offers: an N1 machine type
    and an accelerator type listed in the same zone (``n1_instance_types``)."""
    for zone, mt in machines:
        if machine_type_instance_type(mt) is None:  # GPUs attach only to machine types without bundled ones
            for at in accelerators.get(zone, ()):
                for t in n1_instance_types(mt, at):
                    yield zone, t


def instance_type_name(instance: Any) -> str:
    """The fleetctl instance-type name of a ``compute_v1.Instance``: the machine
    type, or the N1 + GPU shape name when GPUs are attached to an N1 machine.
    GCE lists the GPUs of a machine type with bundled GPUs (a2, a3, g2) among an
    instance's guestAccelerators too: they belong to the machine type's name."""
    machine = short_name(instance.machine_type)
    if instance.guest_accelerators and machine.startswith("n1-"):  # GPUs attach only to N1 (catalog)
        accel = instance.guest_accelerators[0]
        return gcp_n1_gpu_type_name(machine, short_name(accel.accelerator_type), accel.accelerator_count)
    return machine


def _node_state(status: str) -> NodeState:
    # Instance.status: PROVISIONING, STAGING, RUNNING, STOPPING, STOPPED,
    # SUSPENDING, SUSPENDED, REPAIRING, TERMINATED, PENDING_STOP.
    if status == "RUNNING":
        return NodeState.READY
    if status in ("PROVISIONING", "STAGING", "REPAIRING"):
        return NodeState.LAUNCHING
    if status in ("STOPPING", "SUSPENDING", "PENDING_STOP"):
        return NodeState.TERMINATING
    if status in ("TERMINATED", "STOPPED", "SUSPENDED"):
        return NodeState.GONE  # stopped, e.g. a Spot VM preempted with STOP
    # Design choice: a status this adapter does not know (a new one, or none in a malformed listing) is
    # not taken as gone: that requeued every job and bought the fleet again while the instances ran.
    log.warning("gcp: instance status %r is unknown to this fleetctl; taken as launching", status)
    return NodeState.LAUNCHING


def _timestamp(raw: str) -> datetime | None:
    """An RFC 3339 time of the Compute API, in UTC (one without an offset is
    taken as UTC, as the AWS and Azure adapters do); None when empty."""
    if not raw:
        return None
    try:
        at = datetime.fromisoformat(raw)
        return at.astimezone(timezone.utc) if at.tzinfo else at.replace(tzinfo=timezone.utc)
    except (ValueError, OverflowError):  # OverflowError: a valid time that leaves datetime's range in UTC
        raise ProviderError(f"gcp: the Compute API answered a time this fleetctl cannot read: {raw!r}") from None


def translate(error: ApiError) -> ProviderError:
    """The typed error for a Compute API failure (see the module docstring)."""
    codes = {c.upper() for c in error.codes}
    detail = str(error)
    if error.http_status == 429 or codes & _THROTTLE_CODES:
        return Throttled(detail)
    if codes & _QUOTA_CODES:
        return QuotaExceeded(detail)
    # Other stockout spellings (e.g. "... currently unavailable due to a stockout")
    # are caught by their message, so a new code never reads as a plain error.
    if codes & _CAPACITY_CODES or "EXHAUSTED" in error.message.upper() or "STOCKOUT" in error.message.upper():
        return InsufficientCapacity(detail)
    if "machinetype" in error.message.lower().replace(" ", "") and error.http_status in (400, 404):
        return UnknownInstanceType(detail)
    return ProviderError(detail)


# =========================================================================== the adapter


@dataclass
class _Preemption:
    event: InterruptionEvent
    acknowledged: bool = False


class GcpProvider:
    """Compute Engine behind the Provider protocol. See the module docstring.

    ``offers`` defaults to the shipped snapshot; tests may pass their own.
    """

    name = PROVIDER
    capabilities = Capabilities(interruption_notice_seconds=PREEMPTION_NOTICE_SECONDS,
                                rebalance_recommendations=False, node_id_pattern=r"[^/]+/[^/]+")  # ZONE/NAME

    def __init__(self, config: GcpConfig, api: ComputeApi, *, offers: Iterable[Offer] | None = None) -> None:
        self._config = config
        self._api = api
        catalog = tuple(o for o in (load_catalog() if offers is None else offers) if o.provider == PROVIDER)
        regions = set(config.regions)
        self._catalog = tuple(o for o in catalog if not regions or o.region in regions)
        self._by_type_region_market = {(o.instance_type.name, o.region, o.market): o for o in self._catalog}
        self._types = {o.instance_type.name: o.instance_type for o in self._catalog}
        self._preemptions: dict[str, _Preemption] = {}
        self._unreadable_times: set[tuple[str, str, str]] = set()  # (node id, field, value) already logged
        # Instance names: fl-<cluster slug>-<cluster hash>-<launch hash>-NNN (<= 43 chars).
        # The cluster hash keeps "research" from matching "research-2"'s names.
        slug = _NAME_INVALID.sub("-", config.cluster.lower()).strip("-")[:16].strip("-") or "x"
        self._name_prefix = f"fl-{slug}-{hashlib.sha256(config.cluster.encode()).hexdigest()[:8]}-"

    @classmethod
    def from_settings(cls, config: GcpConfig, *, api_endpoint: str | None = None, anonymous: bool = False,
                      offers: Iterable[Offer] | None = None) -> GcpProvider:
        """``from_sdk`` with the SDK's options built here: another API endpoint
        (a local fake, a private endpoint) and anonymous credentials (tests);
        by default Google's endpoint and application-default credentials."""
        options = credentials = None
        if api_endpoint:
            from google.api_core.client_options import ClientOptions

            options = ClientOptions(api_endpoint=api_endpoint)
        if anonymous:
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()
        return cls.from_sdk(config, client_options=options, credentials=credentials, offers=offers)

    @classmethod
    def from_sdk(cls, config: GcpConfig, *, client_options: Any = None, credentials: Any = None,
                 offers: Iterable[Offer] | None = None) -> GcpProvider:
        """The adapter over the real SDK clients (raises ImportError with an
        install hint when the ``[gcp]`` extra is missing)."""
        return cls(config, SdkComputeApi(client_options=client_options, credentials=credentials), offers=offers)

    # ------------------------------------------------------------------ contract

    def offers(self, now: datetime) -> tuple[Offer, ...]:
        """Snapshot offers whose shape GCE lists in some zone of the region: the
        machine type, and for an N1 + GPU shape the N1 machine type and its GPU
        (as many per instance) in the same zone, as :meth:`instance_types` finds them.
        Accelerator types are read only when the snapshot prices N1 + GPU shapes."""
        machines = self._call(self._api.machine_types, self._config.project)
        available = {(mt.name, region_of_zone(zone)) for zone, mt in machines}
        if any(parse_gcp_n1_gpu_type_name(o.instance_type.name) for o in self._catalog):
            accelerators = self._accelerators_by_zone()
            available |= {(t.name, region_of_zone(zone)) for zone, t in _n1_shapes(machines, accelerators)}
        return tuple(o for o in self._catalog if (o.instance_type.name, o.region) in available)

    def instance_types(self, now: datetime) -> tuple[InstanceType, ...]:
        """Every GPU shape Compute Engine lists in the configured regions,
        priced or not: machine types with bundled GPUs (a2, a3, g2, ...) and
        N1 machine types x the GPUs attachable in the same zone (T4, P4, V100,
        P100, one shape per allowed count). :meth:`offers` sells the subset the
        snapshot prices; N1 + GPU shapes have no price yet (``docs/gcp.md``)."""
        regions = set(self._config.regions)
        machines = [(z, mt) for z, mt in self._call(self._api.machine_types, self._config.project)
                    if not regions or region_of_zone(z) in regions]
        shapes: dict[str, InstanceType] = {}
        for zone, mt in machines:
            bundled = machine_type_instance_type(mt)
            if bundled:
                shapes[bundled.name] = bundled
        shapes.update((t.name, t) for _zone, t in _n1_shapes(machines, self._accelerators_by_zone()))
        return tuple(shapes[name] for name in sorted(shapes))

    def nodes(self, now: datetime) -> tuple[Node, ...]:
        result = []
        for zone, instance in self._call(self._api.instances, self._config.project, self._managed_filter()):
            node = self._node(zone, instance)
            if node is not None:
                result.append(node)
        return tuple(sorted(result, key=lambda n: n.node_id))

    def launch(self, request: LaunchRequest, now: datetime) -> LaunchResult:
        """Buy ``request.count`` nodes in one zone of the offer's region, all or nothing.

        Recovery: a call that dies after GCE accepted the request is repeated
        with the same idempotency key; the instances of the first call are
        found by their ``fleetctl-launch`` label (or GCE answers the repeated
        ``requestId`` with the first operation), so nothing is bought twice.
        """
        if request.count < 1:
            raise ValueError("a launch asks for at least one node")
        offer = request.offer
        if offer.provider != PROVIDER:
            raise UnknownInstanceType(f"{offer.key} is not a GCP offer")
        if offer.instance_type.name not in self._types:
            raise UnknownInstanceType(f"GCP sells no {offer.instance_type.name} in the catalog")
        if self._config.regions and offer.region not in self._config.regions:
            raise UnknownInstanceType(f"{offer.key}: region {offer.region} is not configured for GCP "
                                      f"({', '.join(self._config.regions)})")
        if (offer.instance_type.name, offer.region, offer.market) not in self._by_type_region_market:
            raise UnknownInstanceType(f"{offer.key}: the catalog does not price {offer.instance_type.name} "
                                      f"{offer.market.value} in {offer.region}")
        if offer.zone:
            raise UnknownInstanceType(f"{offer.key}: GCP offers are regional; the zone is chosen at launch")
        launch_label = self._launch_label(request.idempotency_key)
        existing = self._launched(launch_label)
        if existing:
            return LaunchResult(request, existing)
        machine, accelerators = self._shape(offer.instance_type.name)
        resource = self._api.bulk_insert_resource(
            count=request.count,
            name_pattern=f"{self._name_prefix}{launch_label[:10]}-###",
            machine_type=machine,
            accelerators=accelerators,
            labels={
                LABEL_MANAGED: "true",
                LABEL_CLUSTER: label_value(self._config.cluster),
                LABEL_OFFER: label_value(offer.key),
                LABEL_LAUNCH: launch_label,
            },
            spot=offer.market is Market.SPOT,
            config=self._config,
        )
        operation = self._call(self._api.bulk_insert, self._config.project, offer.region, resource,
                               request_id(f"launch:{self._config.cluster}", request.idempotency_key))
        operation = self._wait(offer.region, operation)
        nodes = self._launched(launch_label)
        if not _is_done(operation):
            return LaunchResult(request, nodes, error=f"operation {operation.name} still {operation.status}")
        # DONE without errors and min_count = count: GCE made every instance, but the listing may lag.
        listings = 1
        while len(nodes) < request.count and listings < self._config.launch_listings:
            time.sleep(self._config.launch_listing_pause_seconds)
            nodes = self._launched(launch_label)
            listings += 1
        error = None
        if len(nodes) < request.count:
            error = (f"bulkInsert operation {operation.name} finished, but {len(nodes)} of its {request.count} "
                     f"instances are listed after {listings} listings: GCE made them and its listing lags; the next "
                     "observation lists them, and a retry under the same key returns them instead of buying again")
        return LaunchResult(request, nodes, error=error)

    def terminate(self, node_id: str, now: datetime) -> None:
        """Delete the instance; a 404 (already gone) is success. Raises
        ``NodeNotFound`` for an id that is not ``zone/name`` of an instance
        this cluster manages (fleetctl never deletes what it did not buy)."""
        zone, _, name = node_id.partition("/")
        if not zone or not name or "/" in name:
            raise NodeNotFound(node_id)
        instance = self._call(self._api.get_instance, self._config.project, zone, name)
        if instance is None:
            return
        if not self._is_managed(instance.labels):
            raise NodeNotFound(f"{node_id} is not managed by fleetctl cluster {self._config.cluster}")
        self._call(self._api.delete_instance, self._config.project, zone, name,
                   request_id(f"terminate:{self._config.cluster}", f"{node_id}:{instance.id}"))

    def interruption_events(self, now: datetime) -> tuple[InterruptionEvent, ...]:
        """Preemptions of this cluster's instances seen in the last
        ``preemption_lookback`` and not yet acknowledged, oldest first.

        Kind: ``TERMINATED`` once the preemption operation is DONE (the VM is
        already stopped or deleted), else ``RECLAIM_WARNING`` with the
        deadline 30 s after the operation started.
        """
        since = now - self._config.preemption_lookback
        operations = self._call(self._api.operations, self._config.project,
                                f'operationType = "{PREEMPTED_OPERATION_TYPE}"')
        for _scope, op in operations:
            event = self._preemption_event(op, now)
            if event is None or event.received_at_utc < since:
                continue
            seen = self._preemptions.get(event.event_id)
            if seen is None or (seen.event.kind is not event.kind and not seen.acknowledged):
                self._preemptions[event.event_id] = _Preemption(event)
        pending = [p.event for p in self._preemptions.values() if not p.acknowledged]
        # Forget acknowledged events that left the lookback window (bounded memory).
        self._preemptions = {k: p for k, p in self._preemptions.items()
                             if not p.acknowledged or p.event.received_at_utc >= since}
        return tuple(sorted(pending, key=lambda e: (e.received_at_utc, e.event_id)))

    def acknowledge(self, event_id: str) -> None:
        """Stop returning ``event_id`` (unknown ids are ignored: the event may have aged out)."""
        seen = self._preemptions.get(event_id)
        if seen is not None:
            seen.acknowledged = True

    # ------------------------------------------------------------------ helpers

    def _accelerators_by_zone(self) -> dict[str, list[Any]]:
        accelerators: dict[str, list[Any]] = {}
        for zone, at in self._call(self._api.accelerator_types, self._config.project):
            accelerators.setdefault(zone, []).append(at)
        return accelerators

    def _call(self, fn: Callable[..., T], /, *args: Any) -> T:
        """Run one seam call, translating its failure into a typed error (an
        answer the client library cannot parse too: one line, not a traceback)."""
        from google.protobuf.json_format import ParseError

        try:
            return fn(*args)
        except ApiError as exc:
            raise translate(exc) from exc
        except (ParseError, ValueError, TypeError, KeyError) as exc:
            raise ProviderError(f"gcp: the Compute API answered something this fleetctl cannot read: "
                                f"{type(exc).__name__}: {str(exc)[:300]}") from exc

    def _wait(self, region: str, operation: Any) -> Any:
        for _ in range(self._config.max_operation_waits):
            if _is_done(operation):
                break
            operation = self._call(self._api.wait_region_operation, self._config.project, region, operation.name)
        if _is_done(operation) and operation.error and operation.error.errors:
            codes = tuple(e.code for e in operation.error.errors)
            message = "; ".join(e.message for e in operation.error.errors)
            raise translate(ApiError(0, codes, message))
        return operation

    def _managed_filter(self, extra: str = "") -> str:
        parts = [f'labels.{LABEL_MANAGED} = "true"', f'labels.{LABEL_CLUSTER} = "{label_value(self._config.cluster)}"']
        if extra:
            parts.append(extra)
        return " AND ".join(f"({p})" for p in parts)

    def _is_managed(self, labels: Mapping[str, str]) -> bool:
        return labels.get(LABEL_MANAGED) == "true" and labels.get(LABEL_CLUSTER) == label_value(self._config.cluster)

    def _launch_label(self, key: str) -> str:
        return hashlib.sha256(f"{self._config.cluster}:{key}".encode()).hexdigest()[:16]

    def _launched(self, launch_label: str) -> tuple[Node, ...]:
        found = self._call(self._api.instances, self._config.project,
                           self._managed_filter(f'labels.{LABEL_LAUNCH} = "{launch_label}"'))
        nodes = (self._node(zone, instance) for zone, instance in found)
        return tuple(sorted((n for n in nodes if n is not None), key=lambda n: n.node_id))

    def _shape(self, type_name: str) -> tuple[str, tuple[tuple[str, int], ...]]:
        n1 = parse_gcp_n1_gpu_type_name(type_name)
        if n1 is None:
            return type_name, ()
        machine, accelerator, count = n1
        return machine, ((accelerator, count),)

    def _node(self, zone: str, instance: Any) -> Node | None:
        if not self._is_managed(instance.labels):
            return None  # the filter is the API's job; never trust a fake or a future API blindly
        region = region_of_zone(zone)
        scheduling = instance.scheduling
        if scheduling.provisioning_model or scheduling.preemptible:
            spot = scheduling.provisioning_model == "SPOT" or bool(scheduling.preemptible)
        else:  # a listing without scheduling: the offer fleetctl bought it from (its label) says which market
            spot = str(instance.labels.get(LABEL_OFFER, "")).endswith("spot")
            log.warning("gcp: %s/%s is listed without a provisioning model; taken as %s from its %s label", zone,
                        instance.name, "spot" if spot else "on-demand", LABEL_OFFER)
        market = Market.SPOT if spot else Market.ON_DEMAND
        type_name = instance_type_name(instance)
        offer = self._by_type_region_market.get((type_name, region, market))
        if offer is None:
            # Bought from an offer the snapshot does not price (any more): keep
            # the node visible at price 0, shape unknown if need be, so nothing
            # is placed on it and it is terminated when idle instead of leaking.
            log.warning("gcp: %s/%s has %s %s in %s, not in the catalog", zone, instance.name, market.value,
                        type_name, region)
            known = self._types.get(type_name) or InstanceType(PROVIDER, type_name, 0, 0.0)
            offer = Offer(known, region, "", market, 0.0)
        node_id = f"{zone}/{instance.name}"
        created = self._listed_time(node_id, "creationTimestamp", instance.creation_timestamp, "creation")
        state = _node_state(instance.status)
        ready = (self._listed_time(node_id, "lastStartTimestamp", instance.last_start_timestamp, "start")
                 if state is NodeState.READY else None)
        return Node(node_id=node_id, offer=offer, state=state, launched_at_utc=created or UNKNOWN_LAUNCH_TIME,
                    ready_at_utc=ready, zone=zone)

    def _listed_time(self, node_id: str, field: str, raw: str, what: str) -> datetime | None:
        """A time of an instance listing; None when it is left out or cannot be
        read. Design choice, as for a preemption's times: an unreadable time of
        one instance does not fail the listing (that hid every node of the
        cluster on every poll); it is logged once per instance and value, as
        the listing is polled every few seconds (``UNKNOWN_LAUNCH_TIME``)."""
        try:
            return _timestamp(raw)
        except ProviderError:
            if (node_id, field, raw) not in self._unreadable_times:
                self._unreadable_times.add((node_id, field, raw))
                log.warning("gcp: %s has %s %r, which this fleetctl cannot read; its %s time is taken as unknown",
                            node_id, field, raw, what)
            return None

    def _preemption_event(self, op: Any, now: datetime) -> InterruptionEvent | None:
        if op.operation_type != PREEMPTED_OPERATION_TYPE or not op.target_link:
            return None
        name = short_name(op.target_link)
        if not name.startswith(self._name_prefix):
            return None  # another cluster's (or nobody's) instance
        zone = short_name(op.zone) if op.zone else op.target_link.split("/zones/", 1)[-1].split("/", 1)[0]
        event_id = f"gcp-preempted-{op.id or op.name}"
        started = self._preemption_start(op, event_id, now)
        done = _is_done(op)
        return InterruptionEvent(
            event_id=event_id,
            provider=PROVIDER,
            node_id=f"{zone}/{name}",
            kind=InterruptionKind.TERMINATED if done else InterruptionKind.RECLAIM_WARNING,
            received_at_utc=started,
            deadline_utc=None if done else started + timedelta(seconds=PREEMPTION_NOTICE_SECONDS),
        )

    def _preemption_start(self, op: Any, event_id: str, now: datetime) -> datetime:
        """When a preemption began: its start time, else its insert time, else
        ``now``, and never later than ``now``.

        Design choice: a preemption of our instance is real even when its times
        cannot be read, so it is delivered as if seen now, with a warning the
        first time; raising instead failed the whole listing on every poll and
        held back every other preemption until the operation left the lookback.
        A start in the future (clock skew) is taken as now: the deadline comes
        no later than the 30 s GCE gives from now.
        """
        for raw in (op.start_time, op.insert_time):
            try:
                started = _timestamp(raw)
            except ProviderError as exc:
                if event_id not in self._preemptions:
                    log.warning("%s (preemption of %s); taken as now if no other time is readable",
                                exc, short_name(op.target_link))
                continue
            if started is not None:
                return min(started, now)
        return now


def _is_done(operation: Any) -> bool:
    status = operation.status
    return getattr(status, "name", status) == "DONE"
