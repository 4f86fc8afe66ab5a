"""The Azure adapter beyond the shared contract: the real azure-mgmt-compute
client against the local HTTPS ARM server (``tests/providers/azure_server.py``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from fleetctl.model import Market, NodeState, Offer
from providers.azure import AzureConfig, AzureProvider, AzureRegion, sku_available, translate, vm_name
from providers.base import (
    UNKNOWN_LAUNCH_TIME,
    InsufficientCapacity,
    LaunchRequest,
    NodeNotFound,
    ProviderError,
    QuotaExceeded,
    Throttled,
    UnknownInstanceType,
)
from providers.catalog import instance_types as snapshot_types
from providers.retry import ThrottleRetry
from tests.providers.azure_server import ArmServer, FakeArm, StaticToken, gpu_sku

NOW = datetime(2025, 1, 6, 12, 0, tzinfo=timezone.utc)
SUB = "00000000-0000-0000-0000-000000000001"
SUBNET = f"/subscriptions/{SUB}/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/v/subnets/nodes"
IMAGE = f"/subscriptions/{SUB}/resourceGroups/img/providers/Microsoft.Compute/images/gpu-node"


@pytest.fixture
def fake() -> FakeArm:
    f = FakeArm(SUB)
    f.skus = [gpu_sku("Standard_NC4as_T4_v3", "eastus"), gpu_sku("Standard_NC6s_v3", "eastus"),
              gpu_sku("Standard_NC24ads_A100_v4", "eastus", restricted=True)]
    return f


@pytest.fixture
def server(fake: FakeArm, tmp_path: Path) -> Iterator[ArmServer]:
    with ArmServer(fake, tmp_path) as s:
        yield s


def make(server: ArmServer, credential: StaticToken | None = None) -> AzureProvider:
    config = AzureConfig(cluster="research", subscription_id=SUB, resource_group="fleet",
                         regions=(AzureRegion("eastus", SUBNET, IMAGE),), ssh_public_key="ssh-ed25519 AAAA test",
                         custom_data_b64="IyEvYmluL3NoCg==")
    return AzureProvider.from_sdk(config, credential or StaticToken(), base_url=server.endpoint,
                                  connection_verify=str(server.ca_file))


def offer(provider: AzureProvider, size: str = "Standard_NC4as_T4_v3", market: Market = Market.SPOT) -> Offer:
    return next(o for o in provider.offers(NOW) if o.instance_type.name == size and o.market is market)


def test_sizes_from_resource_skus_normalise_like_the_snapshot_and_restrictions_count(server: ArmServer) -> None:
    provider = make(server)
    types = {t.name: t for t in provider.instance_types(NOW)}
    shipped = {name: t for (cloud, name), t in snapshot_types().items() if cloud == "azure"}
    assert set(types) == {"Standard_NC4as_T4_v3", "Standard_NC6s_v3"}  # the A100 size is restricted here
    assert all(types[n] == shipped[n] for n in types)
    assert {o.instance_type.name for o in provider.offers(NOW)} == set(types)


def sku(resource_type: str, name: str, locations: list[str], *restrictions: tuple[str, list[str]]) -> Any:
    """A resourceSkus item in ARM's wire form; each restriction is (type, values)."""
    from azure.mgmt.compute import models as m

    return m.ResourceSku({"resourceType": resource_type, "name": name, "locations": locations,
                          "restrictions": [{"type": t, "values": v, "reasonCode": "NotAvailableForSubscription"}
                                           for t, v in restrictions]})


def test_a_sku_is_usable_where_it_is_a_vm_size_listed_and_not_restricted_for_the_location() -> None:
    assert sku_available(sku("virtualMachines", "Standard_NC4as_T4_v3", ["eastus"]), "eastus")
    assert sku_available(sku("virtualMachines", "Standard_NC4as_T4_v3", ["EastUS"]), "eastus")  # case does not count
    assert sku_available(sku("virtualMachines", "Standard_NC4as_T4_v3", ["eastus"]), "EastUS")
    assert not sku_available(sku("disks", "Premium_LRS", ["eastus"]), "eastus")
    assert not sku_available(sku("virtualMachines", "Standard_NC4as_T4_v3", ["westus2"]), "eastus")
    assert not sku_available(sku("virtualMachines", "Standard_NC4as_T4_v3", []), "eastus")
    from azure.mgmt.compute import models as m

    # locations and restrictions left out of the listing: none
    assert not sku_available(m.ResourceSku({"resourceType": "virtualMachines", "name": "Standard_NC6s_v3"}), "eastus")
    assert sku_available(m.ResourceSku({"resourceType": "virtualMachines", "name": "Standard_NC6s_v3",
                                        "locations": ["eastus"]}), "eastus")
    assert sku_available(m.ResourceSku({"resourceType": "virtualMachines", "name": "Standard_NC6s_v3",
                                        "locations": ["eastus"], "restrictions": [{"type": "Location"}]}), "eastus")
    assert not sku_available(sku("virtualMachines", "Standard_NC4as_T4_v3", ["eastus"],
                                 ("Location", ["EASTUS"])), "eastus")
    # restricted elsewhere, or only in some zones: usable here (offers are regional)
    assert sku_available(sku("virtualMachines", "Standard_NC4as_T4_v3", ["eastus"], ("Location", ["westus2"])),
                         "eastus")
    assert sku_available(sku("virtualMachines", "Standard_NC4as_T4_v3", ["eastus"], ("Zone", ["eastus"])), "eastus")


def arm_vm(**properties: Any) -> Any:
    """A VM as ARM lists it (wire form), tagged for cluster 'research'; keyword arguments override properties,
    and the top-level location, zones and tags."""
    from azure.mgmt.compute import models as m

    top = {key: properties.pop(key) for key in ("location", "zones", "tags") if key in properties}
    body: dict[str, Any] = {"name": "fl-research-0123456789ab-000", "location": "eastus",
                            "tags": {"fleetctl-cluster": "research"},
                            "properties": {"priority": "Spot", "provisioningState": "Succeeded",
                                           "timeCreated": "2025-01-06T11:00:00.5+00:00",
                                           "hardwareProfile": {"vmSize": "Standard_NC4as_T4_v3"}}}
    body.update(top)
    body["properties"].update(properties)
    return m.VirtualMachine({k: v for k, v in body.items() if v is not None})


@pytest.fixture
def unconnected() -> AzureProvider:
    """The adapter without a client: enough to read listings."""
    return AzureProvider(AzureConfig(cluster="research", subscription_id=SUB, resource_group="fleet",
                                     regions=(AzureRegion("eastus", SUBNET, IMAGE),)), client=None)


@pytest.mark.parametrize(("provisioning", "state"), [
    ("Creating", NodeState.LAUNCHING), ("Updating", NodeState.LAUNCHING), ("Succeeded", NodeState.READY),
    ("Deleting", NodeState.TERMINATING), ("Failed", NodeState.GONE), ("Migrating", NodeState.LAUNCHING),
    (None, NodeState.LAUNCHING),
])
def test_a_vms_provisioning_state_is_its_node_state(unconnected: AzureProvider, provisioning: str | None,
                                                    state: NodeState) -> None:
    node = unconnected._node(arm_vm(provisioningState=provisioning), NOW)
    assert node is not None and node.state is state
    created = datetime(2025, 1, 6, 11, 0, 0, 500000, tzinfo=timezone.utc)
    assert node.launched_at_utc == created
    assert node.ready_at_utc == (created if state is NodeState.READY else None)


def test_a_vm_listing_becomes_the_node_of_its_offer_by_hand(unconnected: AzureProvider) -> None:
    sold = {o.key: o for o in unconnected._catalog}
    spot = sold["azure/eastus/*/Standard_NC4as_T4_v3/spot"]
    on_demand = sold["azure/eastus/*/Standard_NC4as_T4_v3/on_demand"]
    for priority, offer in (("Spot", spot), ("Low", spot), ("Regular", on_demand)):
        node = unconnected._node(arm_vm(priority=priority), NOW)
        assert node is not None and (node.node_id, node.offer) == ("fl-research-0123456789ab-000", offer)
    # without a priority, the offer tag says the market
    assert unconnected._node(arm_vm(priority=None, tags={"fleetctl-cluster": "research",
                                                         "fleetctl-offer": spot.key}), NOW).offer == spot
    assert unconnected._node(arm_vm(priority=None, tags={"fleetctl-cluster": "research",
                                                         "fleetctl-offer": on_demand.key}), NOW).offer == on_demand
    assert unconnected._node(arm_vm(priority=None), NOW).offer == on_demand
    # ARM's display name of the location is the same region
    assert unconnected._node(arm_vm(location="East US"), NOW).offer == spot
    with pytest.raises(ProviderError, match="^azure: VM fl-research-0123456789ab-000 is listed without "
                                            "hardwareProfile.vmSize$"):
        unconnected._node(arm_vm(hardwareProfile=None), NOW)
    # another cluster's VM, or an untagged one, is no node
    assert unconnected._node(arm_vm(tags={"fleetctl-cluster": "research-2"}), NOW) is None
    assert unconnected._node(arm_vm(tags={}), NOW) is None
    assert unconnected._node(arm_vm(tags=None), NOW) is None  # another VM of the group, listed without tags
    # one availability zone is the node's zone; none or several leave it unknown
    assert unconnected._node(arm_vm(zones=["2"]), NOW).zone == "2"
    assert unconnected._node(arm_vm(zones=["1", "2"]), NOW).zone == ""
    assert unconnected._node(arm_vm(), NOW).zone == ""
    # a time without an offset is UTC; one with an offset keeps its instant
    assert unconnected._node(arm_vm(timeCreated="2025-01-06T11:00:00"), NOW).launched_at_utc == NOW - timedelta(
        hours=1)
    assert unconnected._node(arm_vm(timeCreated="2025-01-06T13:00:00+02:00"), NOW).launched_at_utc == (
        NOW - timedelta(hours=1))


def test_a_vm_of_an_offer_not_sold_here_stays_visible_at_no_price(unconnected: AzureProvider) -> None:
    # a reviewed size the catalog does not price in eastus keeps its shape; an unknown size has none
    for size, shape in (("Standard_ND96amsr_A100_v4", (96, 1900.0, "A100-80GB", 8)),
                        ("Standard_D4s_v5", (0, 0.0, None, 0)), ("Standard_NC999x_v9", (0, 0.0, None, 0))):
        node = unconnected._node(arm_vm(hardwareProfile={"vmSize": size}, location="westus3"), NOW)
        assert node is not None
        t = node.offer.instance_type
        assert (node.offer.region, node.offer.zone, node.offer.market, node.offer.usd_per_hour) == (
            "westus3", "", Market.SPOT, 0.0)
        assert (t.provider, t.name, t.vcpus, t.memory_gib, t.gpu_model, t.gpu_count) == ("azure", size, *shape)


def test_a_spot_vm_is_put_with_spot_priority_delete_eviction_and_no_price_cap(server: ArmServer,
                                                                             fake: FakeArm) -> None:
    credential = StaticToken()
    provider = make(server, credential)
    [node] = provider.launch(LaunchRequest(offer(provider), 1, "plan-1/launch-0"), NOW).nodes
    assert node.node_id == vm_name("research", "plan-1/launch-0", 0) and node.offer == offer(provider)
    [body] = fake.puts()
    props = body["properties"]
    assert (props["priority"], props["evictionPolicy"], props["billingProfile"]) == ("Spot", "Delete",
                                                                                   {"maxPrice": -1})
    assert props["hardwareProfile"] == {"vmSize": "Standard_NC4as_T4_v3"}
    assert props["storageProfile"]["imageReference"] == {"id": IMAGE}
    assert props["virtualMachineScaleSet"]["id"].endswith("/virtualMachineScaleSets/fleetctl-research-t4")
    nic = props["networkProfile"]["networkInterfaceConfigurations"][0]["properties"]
    assert nic["ipConfigurations"][0]["properties"]["subnet"] == {"id": SUBNET}
    assert props["osProfile"]["customData"] == "IyEvYmluL3NoCg=="
    assert body["tags"]["fleetctl-cluster"] == "research" and body["tags"]["fleetctl-pool"] == "t4"
    assert credential.requests >= 1  # the SDK's bearer-token policy ran


def test_an_on_demand_vm_is_regular_priority(server: ArmServer, fake: FakeArm) -> None:
    provider = make(server)
    provider.launch(LaunchRequest(offer(provider, market=Market.ON_DEMAND), 1, "od"), NOW)
    [body] = fake.puts()
    assert body["properties"]["priority"] == "Regular"
    assert "evictionPolicy" not in body["properties"] and "billingProfile" not in body["properties"]


def test_a_retried_launch_after_a_crash_buys_nothing_more(server: ArmServer, fake: FakeArm) -> None:
    first = make(server).launch(LaunchRequest(offer(make(server)), 2, "k"), NOW)
    again = make(server).launch(LaunchRequest(offer(make(server)), 2, "k"), NOW)
    assert {n.node_id for n in again.nodes} == {n.node_id for n in first.nodes}
    assert len(fake.vms) == 2 and len(fake.puts()) == 2


def test_a_gang_is_all_or_nothing(server: ArmServer, fake: FakeArm) -> None:
    provider = make(server)
    fake.capacity[("eastus", "Standard_NC4as_T4_v3")] = 1
    with pytest.raises(InsufficientCapacity, match="AllocationFailed"):
        provider.launch(LaunchRequest(offer(provider), 2, "gang"), NOW)
    assert fake.vms == {}  # the one VM that got capacity was deleted again
    assert provider.nodes(NOW) == ()


def test_a_failed_rollback_delete_neither_stops_the_rollback_nor_hides_the_capacity_error(
        server: ArmServer, fake: FakeArm) -> None:
    provider = make(server)
    fake.capacity[("eastus", "Standard_NC4as_T4_v3")] = 1
    first, second = (vm_name("research", "gang", i) for i in range(2))
    fake.fail_next("DELETE", f"/virtualMachines/{first}", status=429, code="TooManyRequests", message="slow down")
    with pytest.raises(InsufficientCapacity, match="AllocationFailed") as raised:
        provider.launch(LaunchRequest(offer(provider), 2, "gang"), NOW)
    assert f"could not be deleted and are left: {first} (Throttled" in str(raised.value)
    assert set(fake.vms) == {("fleet", first)}  # the Failed VM was deleted all the same
    deletes = [path.rsplit("/", 1)[-1] for method, path, _ in fake.requests if method == "DELETE"]
    assert deletes == [first, second]


def test_a_retried_gang_launch_rolls_back_the_vms_an_interrupted_first_call_made(server: ArmServer,
                                                                                  fake: FakeArm) -> None:
    """A controller crashed after the first VM of a gang of 2 was made; the
    retry under the same key finds no capacity for the second: neither stays."""
    make(server).launch(LaunchRequest(offer(make(server)), 1, "gang"), NOW)  # what the first call got to
    assert set(fake.vms) == {("fleet", vm_name("research", "gang", 0))}
    fake.capacity[("eastus", "Standard_NC4as_T4_v3")] = 0
    provider = make(server)
    with pytest.raises(InsufficientCapacity, match="AllocationFailed"):
        provider.launch(LaunchRequest(offer(provider), 2, "gang"), NOW)
    assert fake.vms == {} and provider.nodes(NOW) == ()


def test_a_listing_arm_did_not_fill_in_keeps_the_market_or_is_one_clear_error(server: ArmServer,
                                                                               fake: FakeArm) -> None:
    """A VM listed without its priority keeps the market of the offer it was
    bought from (its tag), not on-demand; a body the SDK cannot deserialise is
    a one-line ProviderError, not a traceback."""
    provider = make(server)
    spot = offer(provider)
    [node] = provider.launch(LaunchRequest(spot, 1, "k"), NOW).nodes
    [vm] = fake.vms.values()
    del vm["properties"]["priority"]
    assert [n.offer for n in provider.nodes(NOW)] == [spot]
    del vm["properties"]["timeCreated"]  # unknown, as on AWS and GCP (it was now: a launch on every poll)
    vm["properties"]["provisioningState"] = "Succeeded"
    [listed] = provider.nodes(NOW)
    assert (listed.state, listed.launched_at_utc, listed.ready_at_utc) == (NodeState.READY, UNKNOWN_LAUNCH_TIME, None)
    vm["properties"]["timeCreated"] = "yesterday"  # the SDK refuses the whole answer before the adapter sees it
    with pytest.raises(ProviderError, match="cannot read"):
        provider.nodes(NOW)


def _with_next_link(fake: FakeArm, monkeypatch: pytest.MonkeyPatch, link: Callable[[int], str | None]) -> list[int]:
    """Every VM listing answers with ``nextLink = link(n)`` (n: the listing's
    number, from 1), as a misbehaving ARM could; returns the listing count."""
    answer, served = fake.handle, [0]

    def handle(method: str, path: str, query: dict[str, str], body: Any,
               auth: str) -> tuple[int, dict[str, str], bytes]:
        status, headers, payload = answer(method, path, query, body, auth)
        if method == "GET" and path.endswith("/virtualMachines"):
            served[0] += 1
            data = json.loads(payload)
            token = link(served[0])
            if token:
                data["nextLink"] = (f"{fake.base_url}/subscriptions/{SUB}/resourceGroups/fleet/providers/"
                                    f"Microsoft.Compute/virtualMachines?api-version=2024-11-01&$skiptoken={token}")
            payload = json.dumps(data).encode()
        return status, headers, payload

    monkeypatch.setattr(fake, "handle", handle)
    return served


def test_a_next_link_given_twice_is_an_error_not_an_endless_listing(server: ArmServer, fake: FakeArm,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    provider = make(server)
    provider.launch(LaunchRequest(offer(provider), 1, "k"), NOW)
    served = _with_next_link(fake, monkeypatch, lambda n: "same" if n < 50 else None)
    with pytest.raises(ProviderError, match=r"list of virtual machines in resource group fleet gave the next link "
                                            r".*skiptoken=same' a second time, after 2 pages"):
        provider.nodes(NOW)
    assert served == [2]


def test_a_vm_on_two_pages_is_one_node(server: ArmServer, fake: FakeArm, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = make(server)
    [node] = provider.launch(LaunchRequest(offer(provider), 1, "k"), NOW).nodes
    _with_next_link(fake, monkeypatch, lambda n: "2" if n == 1 else None)  # page 2 repeats page 1
    assert provider.nodes(NOW) == (node,)


def test_a_vm_in_an_availability_zone_is_a_node_of_that_zone(server: ArmServer, fake: FakeArm) -> None:
    """Azure offers are regional: a VM ARM lists in one availability zone is a
    node of that zone (its placement domain); a regional VM's zone is unknown."""
    provider = make(server)
    regional = offer(provider)
    pinned, loose = provider.launch(LaunchRequest(regional, 2, "k"), NOW).nodes
    assert regional.zone == "" and (pinned.zone, loose.zone) == ("", "")
    fake.vms[("fleet", pinned.node_id)]["zones"] = ["2"]
    assert {n.node_id: n.zone for n in provider.nodes(NOW)} == {pinned.node_id: "2", loose.node_id: ""}
    assert {n.node_id: n.placement_domain for n in provider.nodes(NOW)} == {
        pinned.node_id: ("azure", "eastus", "2"), loose.node_id: ("azure", "eastus", "")}


@pytest.mark.parametrize(("field", "value"), [("location", "EastUS"), ("priority", "spot"),
                                              ("vmSize", "standard_nc4as_t4_v3")])
def test_a_listing_in_another_case_is_the_same_offer(server: ArmServer, fake: FakeArm, field: str,
                                                     value: str) -> None:
    """ARM compares names without case: "EastUS" is eastus (not an unpriced
    offer at 0 USD/h in a region fleetctl does not know), "spot" is Spot."""
    provider = make(server)
    spot = offer(provider)
    provider.launch(LaunchRequest(spot, 1, "k"), NOW)
    [vm] = fake.vms.values()
    where = {"location": vm, "priority": vm["properties"], "vmSize": vm["properties"]["hardwareProfile"]}[field]
    where[field] = value
    assert [n.offer for n in provider.nodes(NOW)] == [spot]


@pytest.mark.parametrize(("field", "error"), [
    ("vmSize", "VM fl-research-[0-9a-f]+-000 is listed without hardwareProfile.vmSize"),
    ("location", "VM fl-research-[0-9a-f]+-000 is listed without a location"),
])
def test_a_vm_listed_without_its_size_or_location_is_one_clear_error(server: ArmServer, fake: FakeArm, field: str,
                                                                     error: str) -> None:
    provider = make(server)
    provider.launch(LaunchRequest(offer(provider), 1, "k"), NOW)
    [vm] = fake.vms.values()
    del (vm["properties"]["hardwareProfile"] if field == "vmSize" else vm)[field]
    with pytest.raises(ProviderError, match=error):
        provider.nodes(NOW)


def test_a_resource_sku_without_a_name_is_skipped(server: ArmServer, fake: FakeArm,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    fake.skus.append(gpu_sku("Standard_NC4as_T4_v3", "eastus"))
    fake.skus[-1].name = None
    provider = make(server)
    with caplog.at_level(logging.WARNING, logger="providers.azure"):
        assert {t.name for t in provider.instance_types(NOW)} == {"Standard_NC4as_T4_v3", "Standard_NC6s_v3"}
        assert {o.instance_type.name for o in provider.offers(NOW)} == {"Standard_NC4as_T4_v3", "Standard_NC6s_v3"}
    assert "resourceSkus lists a virtualMachines SKU without a name in eastus; skipped" in caplog.text


def test_errors_are_translated_and_throttling_is_retried(server: ArmServer, fake: FakeArm) -> None:
    provider = make(server)
    fake.fail_next("PUT", "/virtualMachines/", status=409, code="OperationNotAllowed",
                   message="Operation could not be completed as it results in exceeding approved "
                           "standardNCASv3_T4Family Cores quota.")
    with pytest.raises(QuotaExceeded):
        provider.launch(LaunchRequest(offer(provider), 1, "quota"), NOW)
    fake.fail_next("PUT", "/virtualMachines/", status=409, code="SkuNotAvailable", message="not available")
    with pytest.raises(InsufficientCapacity, match="SkuNotAvailable"):
        provider.launch(LaunchRequest(offer(provider), 1, "sku"), NOW)
    sleeps: list[float] = []
    wrapped = ThrottleRetry(provider, attempts=3, sleep=sleeps.append)
    fake.fail_next("GET", "/virtualMachines", status=429, code="TooManyRequests", message="slow down")
    assert wrapped.nodes(NOW) == () and len(sleeps) == 1
    for _ in range(3):
        fake.fail_next("GET", "/virtualMachines", status=429, code="TooManyRequests", message="slow down")
    with pytest.raises(Throttled):
        wrapped.nodes(NOW)


@pytest.mark.parametrize(("status", "code", "message", "error"), [
    (409, "SkuNotAvailable", "size not available", InsufficientCapacity),
    (200, "AllocationFailed", "no capacity", InsufficientCapacity),
    (200, "ZonalAllocationFailed", "no capacity in zone", InsufficientCapacity),
    (409, "OperationNotAllowed", "exceeding approved Total Regional Cores quota", QuotaExceeded),
    (429, "TooManyRequests", "throttled", Throttled),
    (400, "InvalidParameter", "The value Standard_X of parameter vmSize is not allowed", UnknownInstanceType),
    (400, "InvalidParameter", "The requested VM size Standard_X is not valid in this region", UnknownInstanceType),
    (400, "InvalidParameter", "The value 10 of parameter 'osDisk.diskSizeGB' is out of range", ProviderError),
    (400, "BadRequest", "Request body size exceeds the limit", ProviderError),
    (403, "AuthorizationFailed", "no", ProviderError),
])
def test_arm_codes_translate(status: int, code: str, message: str, error: type[ProviderError]) -> None:
    assert type(translate(status, code, message)) is error


def test_terminate_deletes_only_this_clusters_vms_and_gone_is_success(server: ArmServer, fake: FakeArm) -> None:
    provider = make(server)
    [node] = provider.launch(LaunchRequest(offer(provider), 1, "t"), NOW).nodes
    fake.vms[("fleet", "someone-else")] = {**fake.vms[("fleet", node.node_id)], "name": "someone-else",
                                          "tags": {"owner": "data-team"}}
    with pytest.raises(NodeNotFound):
        provider.terminate("someone-else", NOW)
    provider.terminate(node.node_id, NOW)
    provider.terminate(node.node_id, NOW)  # already gone: success
    assert ("fleet", node.node_id) not in fake.vms and ("fleet", "someone-else") in fake.vms
