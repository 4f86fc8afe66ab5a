"""The Azure adapter: Spot and pay-as-you-go GPU VMs through azure-mgmt-compute.

What it does, in the words of :class:`providers.base.Provider`:

* ``offers``: the snapshot's Azure offers (``providers/catalog.py``) in the
  configured regions, for the sizes the subscription may use there: listed by
  ``resourceSkus`` for the location and not restricted for it
  (``restrictions[].type == Location``, e.g. ``NotAvailableForSubscription``).
  Offers are regional (zone ``""``).
* ``nodes``: every VM in the resource group tagged ``fleetctl-cluster=<cluster>``,
  its Offer recovered from size, location and priority, compared without case
  as ARM compares them (``EastUS`` is ``eastus``); its ``zone`` is the VM's
  availability zone when ARM lists one (``"2"``), else ``""``. A VM listed without its
  size or location is a ``ProviderError`` naming it; a resource SKU without a
  name is skipped with a warning.
* ``launch``: one ``PUT virtualMachines/{name}`` per node, Spot as
  ``priority=Spot, evictionPolicy=Delete, billingProfile.maxPrice=-1`` (pay up
  to the on-demand price, never evicted for price), each VM in the pool's
  Flexible-orchestration scale set (``fleetctl-<cluster>-<pool>``, declared by
  Terraform). Every VM names its pool's scale set, so Terraform must have made
  it before fleetctl launches into the pool. Why VMs and not scale-set capacity:
  ``docs/azure.md``. Idempotent: VM names are derived from the idempotency
  key, and ARM's PUT is create-or-update, so a retried launch re-PUTs the same
  VMs instead of buying more. All or nothing: if one VM of a gang cannot be
  placed, every VM of the launch (those an earlier, interrupted call under the
  same key made too) is deleted and the error is raised; a VM whose delete
  fails is named in that error, and the others are deleted all the same.
* ``terminate``: ``DELETE virtualMachines/{name}`` (with its OS disk and NIC,
  ``deleteOption=Delete``); a VM already gone is success.
* ``interruption_events``: none. Azure announces a Spot eviction only on the
  node (Scheduled Events ``Preempt``): ``fleetctl node-watch`` posts it to the
  daemon, which records it (``Capabilities.central_notices`` is False).

Errors are translated to the typed errors of ``providers.base``:
``SkuNotAvailable``, ``AllocationFailed``, ``ZonalAllocationFailed``,
``OverconstrainedAllocationRequest`` -> ``InsufficientCapacity``;
``QuotaExceeded`` and ``OperationNotAllowed`` about quota -> ``QuotaExceeded``;
HTTP 429 -> ``Throttled``; an unknown VM size -> ``UnknownInstanceType``. The
adapter never retries (the SDK's retry policy is off);
:class:`providers.retry.ThrottleRetry` does. Missing or refused credentials
stay azure-core's ``ClientAuthenticationError`` (as boto3's and google-auth's
credential errors do in their adapters), re-raised with one line that says
where fleetctl looks for credentials (``CREDENTIALS_HINT``).

azure-mgmt-compute is imported only here, lazily (``pip install 'fleetctl[azure]'``).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final, TypeVar

from fleetctl.model import RECLAIM_NOTICE_SECONDS, InstanceType, InterruptionEvent, Market, Node, NodeState, Offer
from fleetctl.naming import pool_name
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
from providers.catalog import azure_instance_type, load_catalog

log = logging.getLogger(__name__)

PROVIDER: Final[str] = "azure"
INSTALL_HINT: Final[str] = "the Azure provider needs azure-mgmt-compute: pip install 'fleetctl[azure]'"

TAG_CLUSTER: Final[str] = "fleetctl-cluster"
TAG_POOL: Final[str] = "fleetctl-pool"
TAG_OFFER: Final[str] = "fleetctl-offer"
TAG_LAUNCH: Final[str] = "fleetctl-launch"

#: Scheduled Events gives a Spot VM at least 30 s between Preempt and eviction.
PREEMPT_NOTICE_SECONDS: Final[int] = RECLAIM_NOTICE_SECONDS["azure"]

_CAPACITY_CODES: Final[frozenset[str]] = frozenset({
    "SkuNotAvailable", "AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest",
    "OverconstrainedZonalAllocationRequest", "SpotVMEvictionPolicyNotSupported",
})
_QUOTA_CODES: Final[frozenset[str]] = frozenset({"QuotaExceeded", "OperationNotAllowed"})
_THROTTLE_CODES: Final[frozenset[str]] = frozenset({"TooManyRequests", "RetryableError"})
_NAME_INVALID = re.compile(r"[^a-z0-9-]")
#: An ARM message about the VM size ("parameter vmSize", "hardwareProfile.vmSize", "The requested VM
#: size ..."), not any other size ("'osDisk.diskSizeGB' is out of range" is not an unknown instance type).
_VM_SIZE = re.compile(r"\bvm ?size\b|virtual machine size", re.IGNORECASE)

#: Where ``credential_for`` finds credentials (its token, then DefaultAzureCredential's
#: chain), for the one-line error when none gives a token.
CREDENTIALS_HINT: Final[str] = (
    "set FLEETCTL_AZURE_ACCESS_TOKEN (a bearer token), or AZURE_TENANT_ID, AZURE_CLIENT_ID and "
    "AZURE_CLIENT_SECRET (a service principal) or AZURE_FEDERATED_TOKEN_FILE (workload identity), "
    "or run `az login`, or run on a VM with a managed identity"
)
#: azure-identity's logger: DefaultAzureCredential logs a WARNING of a dozen lines that
#: repeats the error it then raises, which fleetctl reports in one line.
_SDK_CREDENTIAL_LOGGER: Final[str] = "azure.identity"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AzureRegion:
    """Where and from what the VMs of one region are made."""

    region: str
    subnet_id: str
    image_id: str


@dataclass(frozen=True, slots=True)
class AzureConfig:
    cluster: str
    subscription_id: str
    resource_group: str
    regions: tuple[AzureRegion, ...]
    admin_username: str = "fleetctl"
    ssh_public_key: str = ""
    custom_data_b64: str = ""  # cloud-init that starts node-watch (rendered by the caller)
    max_operation_polls: int = 600

    def __post_init__(self) -> None:
        if not self.cluster or not self.subscription_id or not self.resource_group:
            raise ValueError("AzureConfig needs cluster, subscription_id and resource_group")
        if not self.regions:
            raise ValueError("AzureConfig.regions must list at least one region")

    def region(self, name: str) -> AzureRegion | None:
        return next((r for r in self.regions if r.region == name), None)


class StaticTokenCredential:
    """A bearer token handed in from outside (``az account get-access-token``
    for a short job, a workload-identity sidecar); valid for about an hour."""

    def __init__(self, token: str) -> None:
        self._token = token

    def get_token(self, *scopes: str, **_: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken(self._token, int(datetime.now(timezone.utc).timestamp()) + 3000)


def credential_for(token: str | None) -> Any:
    """A ``StaticTokenCredential`` for ``token``, else azure-identity's
    ``DefaultAzureCredential`` (environment, managed identity, Azure CLI)."""
    if token:
        return StaticTokenCredential(token)
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError as exc:
        raise ImportError("Azure credentials need azure-identity: pip install 'fleetctl[azure]'") from exc
    sdk_log = logging.getLogger(_SDK_CREDENTIAL_LOGGER)
    if sdk_log.level == logging.NOTSET:  # a level someone set on purpose (to debug a login) is kept
        sdk_log.setLevel(logging.ERROR)
    return DefaultAzureCredential()


def credentials_error(exc: Any) -> Any:
    """A ``ClientAuthenticationError`` of one line for ``exc`` (one too): no
    credential could make a token (raised locally, no response), or Resource
    Manager refused the token it was given (HTTP 401). Both say where fleetctl
    looks for credentials; ``exc`` stays the cause, with azure-identity's list
    of what each credential tried."""
    from azure.core.exceptions import ClientAuthenticationError

    if getattr(exc, "response", None) is None:
        return ClientAuthenticationError(message=f"no credential gave a token: {CREDENTIALS_HINT}")
    code = getattr(getattr(exc, "error", None), "code", None) or exc.status_code
    message = getattr(getattr(exc, "error", None), "message", None) or exc.message or ""
    first = str(message).strip().splitlines()[0] if str(message).strip() else ""
    return ClientAuthenticationError(message=f"Resource Manager refused the token ({code}: {first}); "
                                             f"{CREDENTIALS_HINT}")


def node_watch_custom_data(controller_url: str, token_file: str = "/etc/fleetctl/notice-token") -> str:
    """Base64 cloud-init that starts node-watch on a VM fleetctl creates (the
    same unit the azure-pool module's scale-set profile installs)."""
    import base64

    script = (
        "#!/bin/bash\nset -euo pipefail\n"
        "cat > /etc/systemd/system/fleetctl-node-watch.service <<'UNIT'\n"
        "[Unit]\nDescription=fleetctl node-watch\nAfter=network-online.target\n\n"
        f"[Service]\nExecStart=/usr/local/bin/fleetctl node-watch --cloud azure --controller {controller_url} "
        f"--token-file {token_file}\nRestart=always\nRestartSec=5\n\n[Install]\nWantedBy=multi-user.target\nUNIT\n"
        "systemctl daemon-reload\nsystemctl enable --now fleetctl-node-watch.service\n"
    )
    return base64.b64encode(script.encode()).decode()


def translate(status: int | None, code: str, message: str) -> ProviderError:
    """The typed error for an ARM failure (see the module docstring)."""
    detail = f"{code or status}: {message}"
    if status == 429 or code in _THROTTLE_CODES:
        return Throttled(detail)
    if code == "QuotaExceeded" or (code in _QUOTA_CODES and "quota" in message.lower()):
        return QuotaExceeded(detail)
    if code in _CAPACITY_CODES:
        return InsufficientCapacity(detail)
    if code in ("InvalidParameter", "BadRequest") and _VM_SIZE.search(message):
        return UnknownInstanceType(detail)
    return ProviderError(detail)


def sku_available(sku: Any, location: str) -> bool:
    """A ``virtualMachines`` resource SKU the subscription may use in ``location``."""
    if sku.resource_type != "virtualMachines":
        return False
    if location.lower() not in {loc.lower() for loc in (sku.locations or [])}:
        return False
    for restriction in sku.restrictions or []:
        if restriction.type == "Location" and location.lower() in {
                v.lower() for v in (restriction.values_property or [])}:  # `values` is Mapping.values
            return False
    return True


def vm_name(cluster: str, key: str, index: int) -> str:
    slug = _NAME_INVALID.sub("-", cluster.lower()).strip("-")[:20].strip("-") or "x"
    return f"fl-{slug}-{hashlib.sha256(f'{cluster}:{key}'.encode()).hexdigest()[:12]}-{index:03d}"


class AzureProvider:
    """Azure Compute behind the Provider protocol. See the module docstring."""

    name = PROVIDER
    capabilities = Capabilities(interruption_notice_seconds=PREEMPT_NOTICE_SECONDS,
                                rebalance_recommendations=False, central_notices=False,
                                node_id_pattern=r"fl-[a-z0-9-]+")  # vm_name: the only VM names fleetctl gives

    def __init__(self, config: AzureConfig, client: Any, *, offers: Iterable[Offer] | None = None) -> None:
        self._config = config
        self._client = client
        regions = {r.region for r in config.regions}
        catalog = tuple(o for o in (load_catalog() if offers is None else offers)
                        if o.provider == PROVIDER and o.region in regions)
        self._catalog = catalog
        self._by_size_region_market = {(o.instance_type.name, o.region, o.market): o for o in catalog}
        # ARM compares sizes and locations without case ("EastUS" is eastus): a VM's are looked up so
        self._sizes = {o.instance_type.name.lower(): o.instance_type.name for o in catalog}
        self._regions = {r.region.lower(): r.region for r in config.regions}

    @classmethod
    def from_sdk(cls, config: AzureConfig, credential: Any, *, base_url: str | None = None,
                 offers: Iterable[Offer] | None = None, **client_kwargs: Any) -> AzureProvider:
        """The adapter over the real ComputeManagementClient (ImportError with an
        install hint without the ``[azure]`` extra). The SDK's retries are off:
        ``ThrottleRetry`` is the one retry policy."""
        try:
            from azure.core.pipeline.policies import RetryPolicy
            from azure.mgmt.compute import ComputeManagementClient
        except ImportError as exc:  # pragma: no cover - the [azure] extra is installed in tests
            raise ImportError(INSTALL_HINT) from exc
        kwargs: dict[str, Any] = {"retry_policy": RetryPolicy(retry_total=0), **client_kwargs}
        if base_url is not None:
            kwargs["base_url"] = base_url
        return cls(config, ComputeManagementClient(credential, config.subscription_id, **kwargs), offers=offers)

    # ------------------------------------------------------------------ contract

    def offers(self, now: datetime) -> tuple[Offer, ...]:
        usable = {(sku.name, region.region) for region in self._config.regions for sku in self._skus(region.region)}
        return tuple(o for o in self._catalog if (o.instance_type.name, o.region) in usable)

    def instance_types(self, now: datetime) -> tuple[InstanceType, ...]:
        """Every N-series GPU size the subscription may use in the configured
        regions (reviewed shapes from the catalog table), priced or not."""
        found: dict[str, InstanceType] = {}
        for region in self._config.regions:
            for sku in self._skus(region.region):
                size = sku.name.removeprefix("Standard_")
                try:
                    shape = azure_instance_type(size)
                except KeyError:
                    log.debug("azure: %s is an N-series size the catalog has not reviewed; skipped", sku.name)
                    continue
                if shape is not None:
                    found[shape.name] = shape
        return tuple(found[name] for name in sorted(found))

    def nodes(self, now: datetime) -> tuple[Node, ...]:
        vms = self._vms()
        return tuple(sorted((n for n in (self._node(vm, now) for vm in vms) if n is not None),
                            key=lambda n: n.node_id))

    def launch(self, request: LaunchRequest, now: datetime) -> LaunchResult:
        if request.count < 1:
            raise ValueError("a launch asks for at least one node")
        offer = request.offer
        if offer.provider != PROVIDER:
            raise UnknownInstanceType(f"{offer.key} is not an Azure offer")
        region = self._config.region(offer.region)
        if region is None or (offer.instance_type.name, offer.region, offer.market) not in self._by_size_region_market:
            raise UnknownInstanceType(f"{offer.key}: not sold in the configured Azure regions")
        names = [vm_name(self._config.cluster, request.idempotency_key, i) for i in range(request.count)]
        existing = {vm.name: vm for vm in self._vms() if vm.name in names}
        # Every VM of this launch, made by this call or by an earlier one under the same key (a
        # controller that crashed part-way): a create that failed may leave a Failed VM behind too.
        made: list[str] = [name for name in names if name in existing]
        try:
            for name in names:
                if name in existing and existing[name].provisioning_state == "Succeeded":
                    continue
                if name not in made:
                    made.append(name)
                poller = self._call(lambda name=name: self._client.virtual_machines.begin_create_or_update(
                    self._config.resource_group, name, self._vm(name, offer, region, request.idempotency_key),
                    polling_interval=0))
                self._call(lambda poller=poller: poller.result())
        except ProviderError as exc:
            left = self._roll_back(made)
            if left:  # the launch's own error stays the one raised (its type is what the planner acts on)
                raise type(exc)(f"{exc}; rolling back, these VMs could not be deleted and are left: "
                                f"{', '.join(left)}") from exc
            raise
        vms = [self._call(lambda name=name: self._client.virtual_machines.get(self._config.resource_group, name))
               for name in names]
        return LaunchResult(request, tuple(n for n in (self._node(vm, now) for vm in vms) if n is not None))

    def terminate(self, node_id: str, now: datetime) -> None:
        vm = self._get(node_id)
        if vm is None:
            if not node_id.startswith("fl-"):
                raise NodeNotFound(f"{node_id} is not a VM fleetctl named")
            return  # already gone
        if (vm.tags or {}).get(TAG_CLUSTER) != self._config.cluster:
            raise NodeNotFound(f"{node_id} is not managed by fleetctl cluster {self._config.cluster}")
        self._delete(node_id)

    def interruption_events(self, now: datetime) -> tuple[InterruptionEvent, ...]:
        return ()  # announced on the node only: node-watch -> the daemon's notice endpoint -> the store

    def acknowledge(self, event_id: str) -> None:
        """Nothing to acknowledge here: node-watch approves the Scheduled Event once the node is drained."""

    # ------------------------------------------------------------------ helpers

    def _call(self, fn: Callable[[], T]) -> T:
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError

        try:
            return fn()
        except ClientAuthenticationError as exc:  # an HttpResponseError too: caught first, not a refused call
            raise credentials_error(exc) from exc
        except HttpResponseError as exc:
            code = getattr(getattr(exc, "error", None), "code", None) or ""
            message = getattr(getattr(exc, "error", None), "message", None) or exc.message or str(exc)
            raise translate(exc.status_code, str(code), str(message)) from exc
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # DeserializationError is a ValueError
            raise ProviderError(f"azure: Resource Manager answered something this fleetctl cannot read: "
                                f"{type(exc).__name__}: {str(exc)[:300]}") from exc

    def _listed(self, pager: Callable[[], Any], what: str) -> list[Any]:
        """Every item of an ARM list (``ItemPaged``), page by page. A next link
        the listing gave before is a ProviderError: ``ItemPaged`` would follow
        it forever."""
        def pages() -> list[Any]:
            items: list[Any] = []
            seen: set[str] = set()
            by_page = pager().by_page()
            for page in by_page:
                items.extend(page)
                link = by_page.continuation_token
                if link in seen:
                    raise ProviderError(f"azure: the list of {what} gave the next link {str(link)[:200]!r} a "
                                        f"second time, after {len(seen) + 1} pages; the listing would never end")
                if link:
                    seen.add(link)
            return items

        return self._call(pages)

    def _vms(self) -> list[Any]:
        """The resource group's VMs, each once (by name: a VM listed on two pages is one VM)."""
        unique: dict[str, Any] = {}
        for vm in self._listed(lambda: self._client.virtual_machines.list(self._config.resource_group),
                               f"virtual machines in resource group {self._config.resource_group}"):
            unique.setdefault(vm.name, vm)
        return list(unique.values())

    def _skus(self, location: str) -> list[Any]:
        skus = self._listed(lambda: self._client.resource_skus.list(filter=f"location eq '{location}'"),
                            f"resource SKUs in {location}")
        usable = []
        for sku in skus:
            if not sku_available(sku, location):
                continue
            if not sku.name:  # nothing can be bought or looked up by it: skipped, as unusable SKUs are
                log.warning("azure: resourceSkus lists a %s SKU without a name in %s; skipped", sku.resource_type,
                            location)
                continue
            usable.append(sku)
        return usable

    def _get(self, name: str) -> Any | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return self._call(lambda: self._client.virtual_machines.get(self._config.resource_group, name))
        except ProviderError as exc:
            if isinstance(exc.__cause__, ResourceNotFoundError):
                return None
            raise

    def _delete(self, name: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            poller = self._call(lambda: self._client.virtual_machines.begin_delete(
                self._config.resource_group, name, polling_interval=0))
            self._call(poller.result)
        except ProviderError as exc:
            if not isinstance(exc.__cause__, ResourceNotFoundError):
                raise

    def _roll_back(self, names: list[str]) -> list[str]:
        """All or nothing: delete every VM of a launch that failed, the one whose
        create failed too. A delete that fails does not stop the others.
        Returns the VMs left behind, each with why; they carry the cluster's
        tag, so ``nodes()`` lists them and the reconciler terminates them."""
        left: list[str] = []
        for name in names:
            try:
                self._delete(name)
            except ProviderError as exc:
                log.warning("azure: rolling back a failed launch: VM %s could not be deleted: %s", name, exc)
                left.append(f"{name} ({type(exc).__name__}: {exc})")
        return left

    def _vm(self, name: str, offer: Offer, region: AzureRegion, key: str) -> Any:
        from azure.mgmt.compute import models as m

        pool = pool_name(offer.instance_type.gpu_model or "cpu")
        spot = offer.market is Market.SPOT
        scale_set = (f"/subscriptions/{self._config.subscription_id}/resourceGroups/{self._config.resource_group}"
                     f"/providers/Microsoft.Compute/virtualMachineScaleSets/fleetctl-{self._config.cluster}-{pool}")
        os_profile = m.OSProfile(computer_name=name, admin_username=self._config.admin_username,
                                 custom_data=self._config.custom_data_b64 or None,
                                 linux_configuration=m.LinuxConfiguration(
                                     disable_password_authentication=True,
                                     ssh=m.SshConfiguration(public_keys=[m.SshPublicKey(
                                         path=f"/home/{self._config.admin_username}/.ssh/authorized_keys",
                                         key_data=self._config.ssh_public_key)]) if self._config.ssh_public_key
                                     else None))
        return m.VirtualMachine(
            location=offer.region,
            tags={TAG_CLUSTER: self._config.cluster, TAG_POOL: pool, TAG_OFFER: offer.key,
                  TAG_LAUNCH: hashlib.sha256(f"{self._config.cluster}:{key}".encode()).hexdigest()[:16]},
            properties=m.VirtualMachineProperties(
                hardware_profile=m.HardwareProfile(vm_size=offer.instance_type.name),
                storage_profile=m.StorageProfile(
                    image_reference=m.ImageReference(id=region.image_id),
                    os_disk=m.OSDisk(create_option="FromImage", delete_option="Delete")),
                os_profile=os_profile,
                network_profile=m.NetworkProfile(
                    network_api_version="2022-11-01",
                    network_interface_configurations=[m.VirtualMachineNetworkInterfaceConfiguration(
                        name=f"{name}-nic",
                        properties=m.VirtualMachineNetworkInterfaceConfigurationProperties(
                            primary=True, delete_option="Delete",
                            ip_configurations=[m.VirtualMachineNetworkInterfaceIPConfiguration(
                                name="ipconfig", properties=m.VirtualMachineNetworkInterfaceIPConfigurationProperties(
                                    subnet=m.SubResource(id=region.subnet_id), primary=True))]))]),
                virtual_machine_scale_set=m.SubResource(id=scale_set),
                priority="Spot" if spot else "Regular",
                eviction_policy="Delete" if spot else None,
                billing_profile=m.BillingProfile(max_price=-1) if spot else None,
            ),
        )

    def _node(self, vm: Any, now: datetime) -> Node | None:
        tags = vm.tags or {}
        if tags.get(TAG_CLUSTER) != self._config.cluster:
            return None
        if vm.priority:
            priority = str(getattr(vm.priority, "value", vm.priority))  # the SDK's enum, or a str it does not know
            market = Market.SPOT if priority.lower() in ("spot", "low") else Market.ON_DEMAND
        else:  # a listing without the field: the offer fleetctl bought it from (its tag) says which market
            market = Market.SPOT if str(tags.get(TAG_OFFER, "")).endswith("/spot") else Market.ON_DEMAND
            log.warning("azure: %s is listed without a priority; taken as %s from its %s tag", vm.name,
                        market.value, TAG_OFFER)
        listed_size = vm.hardware_profile.vm_size if vm.hardware_profile else None
        if not listed_size:
            raise ProviderError(f"azure: VM {vm.name} is listed without hardwareProfile.vmSize")
        if not vm.location:
            raise ProviderError(f"azure: VM {vm.name} is listed without a location")
        size = self._sizes.get(listed_size.lower(), listed_size)
        location = str(vm.location).lower().replace(" ", "")  # "East US" and "EastUS" are eastus
        region = self._regions.get(location, location)
        offer = self._by_size_region_market.get((size, region, market))
        if offer is None:
            log.warning("azure: %s is %s %s in %s, not in the catalog", vm.name, market.value, size, region)
            offer = Offer(azure_instance_type_or_unknown(size), region, "", market, 0.0)
        state = {"Creating": NodeState.LAUNCHING, "Updating": NodeState.LAUNCHING, "Succeeded": NodeState.READY,
                 "Deleting": NodeState.TERMINATING, "Failed": NodeState.GONE}.get(vm.provisioning_state or "",
                                                                                  NodeState.LAUNCHING)
        # The SDK refuses a whole answer with a timeCreated it cannot read; one left out is unknown.
        created = vm.time_created
        if created is not None and not isinstance(created, datetime):
            raise ProviderError(f"azure: VM {vm.name} has timeCreated {created!r}, which this fleetctl cannot "
                                "read as a time")
        if created is not None:
            created = created if created.tzinfo else created.replace(tzinfo=timezone.utc)
        # A VM pinned to one availability zone lists it ("zones": ["2"]); a
        # regional VM (no zone) lists none, and its zone stays unknown.
        zones = [str(z) for z in vm.zones or ()]
        return Node(node_id=vm.name, offer=offer, state=state, launched_at_utc=created or UNKNOWN_LAUNCH_TIME,
                    ready_at_utc=created if state is NodeState.READY else None,
                    zone=zones[0] if len(zones) == 1 else "")


def azure_instance_type_or_unknown(size: str) -> InstanceType:
    try:
        known = azure_instance_type(size.removeprefix("Standard_"))
    except KeyError:
        known = None
    return known or InstanceType(PROVIDER, size, 0, 0.0)
