"""The GCP adapter, for real: the google-cloud-compute client (REST transport,
``AnonymousCredentials``) against the local in-memory GCE of ``gcp_server.py``.

Fixtures are the SDK's own message classes; assertions look at what the
adapter returns AND at the requests the fake recorded.
"""

from __future__ import annotations

import logging
import random
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1 as c

from fleetctl.model import InstanceType, Interconnect, InterruptionKind, Market, NodeState, Offer
from providers import gcp
from providers.base import (
    UNKNOWN_LAUNCH_TIME,
    InsufficientCapacity,
    LaunchRequest,
    NodeNotFound,
    Provider,
    ProviderError,
    QuotaExceeded,
    Throttled,
    UnknownInstanceType,
)
from providers.catalog import (
    gcp_n1_gpu_instance_type,
    gcp_n1_gpu_type_name,
    instance_types,
    load_catalog,
    parse_gcp_n1_gpu_type_name,
)
from providers.gcp import GcpConfig, GcpProvider, label_value, request_id
from providers.retry import ThrottleRetry
from tests.providers.gcp_server import FakeGce, GceServer

PROJECT = "ml-fleet"
NOW = datetime(2025, 1, 6, 12, 0, tzinfo=timezone.utc)
REPO = Path(__file__).resolve().parents[2]


def machine_type(name: str, vcpus: int, memory_gib: float, gpu: str | None = None, gpus: int = 0) -> c.MachineType:
    mt = c.MachineType(name=name, guest_cpus=vcpus, memory_mb=int(memory_gib * 1024))
    if gpu:
        mt.accelerators = [c.Accelerators(guest_accelerator_type=gpu, guest_accelerator_count=gpus)]
    return mt


A2_1G = machine_type("a2-highgpu-1g", 12, 85, "nvidia-tesla-a100", 1)
A2_8G = machine_type("a2-highgpu-8g", 96, 680, "nvidia-tesla-a100", 8)
A2_ULTRA_8G = machine_type("a2-ultragpu-8g", 96, 1360, "nvidia-a100-80gb", 8)
G2_4 = machine_type("g2-standard-4", 4, 16, "nvidia-l4", 1)
A3_8G = machine_type("a3-highgpu-8g", 208, 1872, "nvidia-h100-80gb", 8)
N1_8 = machine_type("n1-standard-8", 8, 30)
N1_16 = machine_type("n1-standard-16", 16, 60)
N1_96 = machine_type("n1-standard-96", 96, 360)
N2_8 = machine_type("n2-standard-8", 8, 32)
ACCELERATORS = {
    "nvidia-tesla-v100": c.AcceleratorType(name="nvidia-tesla-v100", maximum_cards_per_instance=8),
    "nvidia-tesla-t4": c.AcceleratorType(name="nvidia-tesla-t4", maximum_cards_per_instance=4),
    "nvidia-tesla-p100": c.AcceleratorType(name="nvidia-tesla-p100", maximum_cards_per_instance=4),
    "nvidia-tesla-p4": c.AcceleratorType(name="nvidia-tesla-p4", maximum_cards_per_instance=4),
}


@pytest.fixture
def fake() -> FakeGce:
    f = FakeGce(PROJECT, now=NOW)
    for zone in ("us-central1-a", "us-central1-b"):
        for mt in (A2_1G, A2_8G, G2_4, N1_8, N2_8):
            f.add_machine_type(zone, mt)
        for at in ACCELERATORS.values():
            f.add_accelerator_type(zone, at)
    f.add_machine_type("us-east4-a", A3_8G)
    return f


@pytest.fixture
def server(fake: FakeGce) -> Iterator[GceServer]:
    with GceServer(fake) as s:
        yield s


def make_provider(server: GceServer, offers: list[Offer] | None = None, **config: object) -> GcpProvider:
    settings: dict[str, object] = {"project": PROJECT, "cluster": "research", "regions": ("us-central1",)}
    settings.update(config)
    return GcpProvider.from_sdk(
        GcpConfig(**settings),  # type: ignore[arg-type]
        client_options=ClientOptions(api_endpoint=server.endpoint),
        credentials=AnonymousCredentials(),
        offers=offers,
    )


@pytest.fixture
def provider(server: GceServer) -> GcpProvider:
    return make_provider(server)


def offer(provider: GcpProvider, type_name: str, market: Market = Market.SPOT) -> Offer:
    return next(o for o in provider.offers(NOW) if o.instance_type.name == type_name and o.market is market)


def bulk_inserts(fake: FakeGce) -> list[dict]:
    return [r.body for r in fake.requests if r.path.endswith("/instances/bulkInsert")]


# ============================================================================ normalisation


@pytest.mark.parametrize("mt", [A2_1G, A2_8G, A2_ULTRA_8G, G2_4, A3_8G], ids=lambda mt: mt.name)
def test_machine_types_normalise_to_the_snapshot_shapes(mt: c.MachineType) -> None:
    assert gcp.machine_type_instance_type(mt) == instance_types()[("gcp", mt.name)]


def test_machine_types_without_gpus_are_not_gpu_shapes() -> None:
    assert gcp.machine_type_instance_type(N2_8) is None
    assert gcp.machine_type_instance_type(N1_8) is None
    assert gcp.machine_type_instance_type(A2_8G).interconnect is Interconnect.NVLINK  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("machine", "vcpus", "memory_gib", "accelerator", "count", "gpu_model"),
    [
        ("n1-standard-8", 8, 30.0, "nvidia-tesla-v100", 1, "V100-16GB"),
        ("n1-standard-8", 8, 30.0, "nvidia-tesla-v100", 2, "V100-16GB"),
        ("n1-standard-8", 8, 30.0, "nvidia-tesla-v100", 4, "V100-16GB"),
        ("n1-standard-8", 8, 30.0, "nvidia-tesla-v100", 8, "V100-16GB"),
        ("n1-standard-16", 16, 60.0, "nvidia-tesla-v100", 1, None),  # 1 x V100: at most 12 vCPUs
        ("n1-standard-16", 16, 60.0, "nvidia-tesla-v100", 2, "V100-16GB"),
        ("n1-standard-96", 96, 360.0, "nvidia-tesla-v100", 8, "V100-16GB"),
        ("n1-standard-96", 96, 360.0, "nvidia-tesla-v100", 4, None),
        ("n1-standard-8", 8, 30.0, "nvidia-tesla-t4", 1, "T4"),
        ("n1-standard-96", 96, 360.0, "nvidia-tesla-t4", 2, None),  # 2 x T4: at most 48 vCPUs
        ("n1-standard-96", 96, 360.0, "nvidia-tesla-t4", 4, "T4"),
        ("n1-standard-16", 16, 60.0, "nvidia-tesla-p100", 1, "P100"),
        ("n1-standard-8", 8, 30.0, "nvidia-tesla-p4", 4, "P4"),
        ("n1-standard-8", 8, 30.0, "nvidia-tesla-t4", 3, None),  # GPUs come in 1, 2, 4 (, 8)
        ("n1-standard-8", 8, 30.0, "nvidia-tesla-t4", 8, None),
        ("n2-standard-8", 8, 32.0, "nvidia-tesla-t4", 1, None),  # attached GPUs need N1
        ("n1-standard-8", 8, 30.0, "nvidia-tesla-a100", 1, None),  # A100 is bundled (a2), never attached
    ],
    ids=lambda v: str(v),
)
def test_n1_gpu_shapes(machine: str, vcpus: int, memory_gib: float, accelerator: str, count: int,
                       gpu_model: str | None) -> None:
    t = gcp_n1_gpu_instance_type(machine, vcpus, memory_gib, accelerator, count)
    if gpu_model is None:
        assert t is None
        return
    assert t is not None
    assert (t.name, t.gpu_model, t.gpu_count, t.vcpus, t.memory_gib) == (
        f"{machine}+{count}x{accelerator}", gpu_model, count, vcpus, memory_gib)
    assert t.interconnect is Interconnect.PCIE
    assert parse_gcp_n1_gpu_type_name(t.name) == (machine, accelerator, count)


def test_n1_shapes_from_sdk_types_respect_the_zone_card_limit() -> None:
    names = [t.name for t in gcp.n1_instance_types(N1_8, ACCELERATORS["nvidia-tesla-v100"])]
    assert names == [gcp_n1_gpu_type_name("n1-standard-8", "nvidia-tesla-v100", n) for n in (1, 2, 4, 8)]
    two_cards = c.AcceleratorType(name="nvidia-tesla-v100", maximum_cards_per_instance=2)
    assert [t.gpu_count for t in gcp.n1_instance_types(N1_8, two_cards)] == [1, 2]
    assert gcp.n1_instance_types(N2_8, ACCELERATORS["nvidia-tesla-t4"]) == ()
    # memory_mb / 1024 to 0.01 GiB: 368,640 MB is 360 GiB (only 4 T4 allow 96 vCPUs); n1-highcpu-16's 14,746 is 14.4
    assert [(t.name, t.memory_gib) for t in gcp.n1_instance_types(N1_96, ACCELERATORS["nvidia-tesla-t4"])] == [
        ("n1-standard-96+4xnvidia-tesla-t4", 360.0)]
    highcpu = c.MachineType(name="n1-highcpu-16", guest_cpus=16, memory_mb=14746)
    assert [(t.gpu_count, t.vcpus, t.memory_gib) for t in gcp.n1_instance_types(
        highcpu, ACCELERATORS["nvidia-tesla-t4"])] == [(1, 16, 14.4), (2, 16, 14.4), (4, 16, 14.4)]
    smallest = c.MachineType(name="n1-standard-1", guest_cpus=1, memory_mb=3840)  # 3.75 GB
    assert [t.memory_gib for t in gcp.n1_instance_types(smallest, ACCELERATORS["nvidia-tesla-p4"])] == [3.75] * 3
    assert parse_gcp_n1_gpu_type_name("a2-highgpu-1g") is None
    assert parse_gcp_n1_gpu_type_name("n1-standard-8+1xnvidia-tesla-v100\n") is None  # $ takes a final newline


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("PROVISIONING", NodeState.LAUNCHING),
        ("STAGING", NodeState.LAUNCHING),
        ("REPAIRING", NodeState.LAUNCHING),
        ("RUNNING", NodeState.READY),
        ("STOPPING", NodeState.TERMINATING),
        ("SUSPENDING", NodeState.TERMINATING),
        ("PENDING_STOP", NodeState.TERMINATING),
        ("STOPPED", NodeState.GONE),  # a Spot VM preempted with STOP
        ("SUSPENDED", NodeState.GONE),
        ("TERMINATED", NodeState.GONE),
        ("", NodeState.LAUNCHING),  # unknown or left out: launching, never gone
        ("running", NodeState.LAUNCHING),
    ],
)
def test_every_instance_status_gce_documents_is_a_node_state(status: str, state: NodeState,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="providers.gcp"):
        assert gcp._node_state(status) is state
    # only a status this fleetctl does not know is taken as launching with a warning
    assert ("is unknown to this fleetctl; taken as launching" in caplog.text) is (status in ("", "running"))


@pytest.mark.usefixtures("local_zone_five_hours_west")
def test_resource_urls_zones_and_times_of_the_compute_api_by_hand() -> None:
    url = "https://www.googleapis.com/compute/v1/projects/ml-fleet/zones/us-central1-a/machineTypes/a2-highgpu-1g"
    assert gcp.short_name(url) == gcp.short_name(url + "/") == "a2-highgpu-1g"
    assert gcp.short_name("a2-highgpu-1g") == "a2-highgpu-1g"
    assert gcp.region_of_zone("us-central1-a") == "us-central1"
    assert gcp.region_of_zone("europe-west4-b") == "europe-west4"
    # RFC 3339 with GCE's offset, a Z, none (UTC), and left out
    assert gcp._timestamp("2025-01-06T03:04:05.250-08:00") == datetime(2025, 1, 6, 11, 4, 5, 250000,
                                                                       tzinfo=timezone.utc)
    assert gcp._timestamp("2025-01-06T11:04:05Z") == datetime(2025, 1, 6, 11, 4, 5, tzinfo=timezone.utc)
    assert gcp._timestamp("2025-01-06T11:04:05") == datetime(2025, 1, 6, 11, 4, 5, tzinfo=timezone.utc)
    assert gcp._timestamp("") is None
    with pytest.raises(ProviderError, match="^gcp: the Compute API answered a time this fleetctl cannot read: "
                                            "'yesterday'$"):
        gcp._timestamp("yesterday")
    with pytest.raises(ProviderError, match="cannot read: '0001-01-01T00:00:00\\+01:00'$"):
        gcp._timestamp("0001-01-01T00:00:00+01:00")  # a valid time before datetime's range in UTC


def listed_instance(**fields: object) -> c.Instance:
    """An instance as GCE lists it: a spot g2-standard-4 of cluster 'research' (keyword arguments override)."""
    base: dict[str, object] = {
        "name": "fl-research-0123abcd-0123456789-001", "status": "RUNNING",
        "machine_type": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/us-central1-a/"
                        "machineTypes/g2-standard-4",
        "labels": {"fleetctl-managed": "true", "fleetctl-cluster": "research"},
        "scheduling": c.Scheduling(provisioning_model="SPOT"),
        "creation_timestamp": "2025-01-06T03:00:00.000-08:00",
        "last_start_timestamp": "2025-01-06T03:01:00.000-08:00",
    }
    base.update(fields)
    return c.Instance(**base)


def test_a_listed_instance_becomes_the_node_of_its_offer_by_hand() -> None:
    config = GcpConfig(project=PROJECT, cluster="research", regions=("us-central1",))
    p = GcpProvider(config, api=None)  # type: ignore[arg-type]  # reading a listing makes no call
    sold = {o.key: o for o in p._catalog}
    spot, on_demand = sold["gcp/us-central1/*/g2-standard-4/spot"], sold["gcp/us-central1/*/g2-standard-4/on_demand"]
    node = p._node("us-central1-a", listed_instance())
    assert node is not None
    assert (node.node_id, node.offer, node.state, node.zone) == (
        "us-central1-a/fl-research-0123abcd-0123456789-001", spot, NodeState.READY, "us-central1-a")
    assert (node.launched_at_utc, node.ready_at_utc) == (datetime(2025, 1, 6, 11, 0, tzinfo=timezone.utc),
                                                         datetime(2025, 1, 6, 11, 1, tzinfo=timezone.utc))
    assert p._node("us-central1-a", listed_instance(status="STAGING")).ready_at_utc is None  # type: ignore[union-attr]
    # the market: the provisioning model, a legacy preemptible VM, else the offer label
    offer_label = {"fleetctl-managed": "true", "fleetctl-cluster": "research", "fleetctl-offer": label_value(spot.key)}
    for scheduling, labels, expected in (
            (c.Scheduling(provisioning_model="STANDARD"), offer_label, on_demand),
            (c.Scheduling(preemptible=True), None, spot),
            (c.Scheduling(), offer_label, spot),
            (c.Scheduling(), None, on_demand)):
        fields: dict[str, object] = {"scheduling": scheduling}
        if labels:
            fields["labels"] = labels
        assert p._node("us-central1-a", listed_instance(**fields)).offer == expected  # type: ignore[union-attr]
    # an instance of no priced offer stays visible at 0 USD: with its shape where the catalog knows it
    elsewhere = p._node("asia-south2-a", listed_instance())
    assert elsewhere is not None and (elsewhere.offer.instance_type, elsewhere.offer.region, elsewhere.offer.zone,
                                      elsewhere.offer.usd_per_hour) == (spot.instance_type, "asia-south2", "", 0.0)
    unknown = p._node("us-central1-a", listed_instance(machine_type="zones/us-central1-a/machineTypes/n2-standard-8"))
    assert unknown is not None and unknown.offer.instance_type == InstanceType("gcp", "n2-standard-8", 0, 0.0)
    # what the listing's filter should have left out is no node
    for labels in ({"fleetctl-managed": "true", "fleetctl-cluster": "research-2"},
                   {"fleetctl-cluster": "research"}, {}):
        assert p._node("us-central1-a", listed_instance(labels=labels)) is None


def test_label_values_are_valid_gcp_labels_and_stay_distinct() -> None:
    keys = [o.key for o in load_catalog() if o.provider == "gcp"] + ["Team/Ünïcode Cluster " * 5]
    values = [label_value(k) for k in keys]
    assert all(re.fullmatch(r"[a-z0-9_-]{1,63}", v) for v in values)
    assert len(set(values)) == len(set(keys))
    assert label_value("gcp/us-central1/*/a2-highgpu-1g/spot") == "gcp-us-central1---a2-highgpu-1g-spot"


# ============================================================================ offers and nodes


def test_instance_types_list_bundled_and_n1_gpu_shapes_of_the_region(provider: GcpProvider) -> None:
    names = {t.name for t in provider.instance_types(NOW)}
    assert {"a2-highgpu-1g", "a2-highgpu-8g", "g2-standard-4"} <= names
    assert {f"n1-standard-8+{n}xnvidia-tesla-v100" for n in (1, 2, 4, 8)} <= names
    assert {"n1-standard-8+1xnvidia-tesla-t4", "n1-standard-8+4xnvidia-tesla-p100",
            "n1-standard-8+2xnvidia-tesla-p4"} <= names
    assert "a3-highgpu-8g" not in names  # us-east4 is not configured
    assert not [n for n in names if n.startswith("n2-")]
    # N1 + GPU shapes are recognised but not sold: the snapshot has no price for them.
    assert not [o for o in provider.offers(NOW) if "+" in o.instance_type.name]




def test_offers_are_snapshot_prices_for_types_listed_in_the_region(provider: GcpProvider) -> None:
    offers = provider.offers(NOW)
    snapshot = {o.key: o for o in load_catalog()}
    assert {o.instance_type.name for o in offers} == {"a2-highgpu-1g", "a2-highgpu-8g", "g2-standard-4"}
    assert {o.market for o in offers} == {Market.SPOT, Market.ON_DEMAND}
    for o in offers:
        assert (o.region, o.zone) == ("us-central1", "")
        assert snapshot[o.key] == o  # the price is the snapshot's, unchanged
    assert offer(provider, "a2-highgpu-1g", Market.SPOT).usd_per_hour < offer(
        provider, "a2-highgpu-1g", Market.ON_DEMAND).usd_per_hour


def test_a_priced_n1_gpu_shape_is_sold_where_its_machine_and_gpu_are_and_launched_as_sold(
        fake: FakeGce, server: GceServer) -> None:
    """docs/gcp.md: once the snapshot prices N1 + GPU shapes, the adapter sells them with no code change."""
    shape = gcp_n1_gpu_instance_type("n1-standard-8", 8, 30.0, "nvidia-tesla-t4", 1)
    assert shape is not None
    priced = Offer(shape, "us-central1", "", Market.SPOT, 0.2)
    nowhere = Offer(shape, "us-east4", "", Market.SPOT, 0.2)  # the fake's us-east4 lists no n1 machine type
    catalog = [o for o in load_catalog() if o.provider == "gcp"] + [priced, nowhere]
    p = make_provider(server, offers=catalog, regions=("us-central1", "us-east4"))
    sold = {o.key for o in p.offers(NOW)}
    assert priced.key in sold and nowhere.key not in sold
    result = p.launch(LaunchRequest(priced, 1, "n1"), NOW)
    assert result.fulfilled and [n.offer for n in result.nodes] == [priced]
    [body] = bulk_inserts(fake)
    assert body["instanceProperties"]["machineType"] == "n1-standard-8"
    assert body["instanceProperties"]["guestAccelerators"] == [
        {"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}]


def test_offers_follow_the_configured_regions(server: GceServer) -> None:
    p = make_provider(server, regions=("us-central1", "us-east4"))
    assert {(o.instance_type.name, o.region) for o in p.offers(NOW)} >= {("a3-highgpu-8g", "us-east4")}
    assert not [o for o in p.offers(NOW) if o.instance_type.name == "a2-highgpu-1g" and o.region == "us-east4"]


def test_nodes_are_this_clusters_labelled_instances_with_states(fake: FakeGce, server: GceServer,
                                                                provider: GcpProvider) -> None:
    fake.page_size = 1  # every instance on its own page: the pager must follow them all
    result = provider.launch(LaunchRequest(offer(provider, "g2-standard-4"), 3, "job-7"), NOW)
    other = make_provider(server, cluster="other-team")
    other.launch(LaunchRequest(offer(other, "g2-standard-4"), 1, "job-7"), NOW)
    fake.instances[("us-central1-a", "hand-made")] = c.Instance(name="hand-made", status="RUNNING")
    assert [n.node_id for n in provider.nodes(NOW)] == [n.node_id for n in result.nodes]
    assert len(other.nodes(NOW)) == 1

    states = {"STAGING": NodeState.LAUNCHING, "RUNNING": NodeState.READY, "STOPPING": NodeState.TERMINATING}
    for node, status in zip(result.nodes, states, strict=True):
        zone, name = node.node_id.split("/")
        fake.instances[(zone, name)].status = status
    assert [n.state for n in provider.nodes(NOW)] == list(states.values())
    assert {n.offer for n in provider.nodes(NOW)} == {offer(provider, "g2-standard-4")}


def test_a_page_token_given_twice_is_an_error_not_an_endless_listing(fake: FakeGce, provider: GcpProvider,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    provider.launch(LaunchRequest(offer(provider, "g2-standard-4"), 1, "k"), NOW)
    pages, served = fake._page, []

    def again(pairs: list, token: str | None) -> tuple[list, str]:  # GCE repeats its token (50 times at most)
        served.append(token)
        return pages(pairs, None)[0], "again" if len(served) < 50 else ""

    monkeypatch.setattr(fake, "_page", again)
    before = len(fake.requests)
    with pytest.raises(ProviderError, match="aggregated list of instances gave the page token 'again' a second "
                                            "time, after 2 pages"):
        provider.nodes(NOW)
    assert len(fake.requests) - before == 2


def test_an_instance_on_two_pages_is_one_node(fake: FakeGce, provider: GcpProvider,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = provider.launch(LaunchRequest(offer(provider, "g2-standard-4"), 2, "k"), NOW).nodes
    pages = fake._page
    # every page is the whole listing: the second repeats the first's instances
    monkeypatch.setattr(fake, "_page", lambda pairs, token: (pages(pairs, None)[0], "" if token else "2"))
    assert provider.nodes(NOW) == nodes


def test_an_unpriced_instance_stays_visible_instead_of_leaking(fake: FakeGce, provider: GcpProvider) -> None:
    [node] = provider.launch(LaunchRequest(offer(provider, "g2-standard-4"), 1, "k"), NOW).nodes
    instance = fake.instances[tuple(node.node_id.split("/"))]  # type: ignore[index]
    instance.machine_type = instance.machine_type.replace("g2-standard-4", "n1-standard-8")
    instance.guest_accelerators = [c.AcceleratorConfig(accelerator_type="nvidia-tesla-t4", accelerator_count=1)]
    [seen] = provider.nodes(NOW)
    assert (seen.node_id, seen.offer.instance_type.name, seen.offer.usd_per_hour) == (
        node.node_id, "n1-standard-8+1xnvidia-tesla-t4", 0.0)


def test_a_node_of_a_machine_type_with_bundled_gpus_is_its_offer_though_gce_lists_the_gpus(
        fake: FakeGce, provider: GcpProvider) -> None:
    """GCE lists the GPUs of an accelerator-optimized machine type among an
    instance's guestAccelerators too (an a2-highgpu-8g instance shows 8 x
    nvidia-tesla-a100, a g2-standard-4 one 1 x nvidia-l4), though none was
    asked for. Such a node is its machine type's offer, not an unpriced
    '<machine>+<n>x<gpu>' shape of 0 GPUs at 0 USD; only N1 machines carry
    attached GPUs, and only their GPUs are part of the shape's name."""
    bought = {}
    for type_name, gpu, count in (("g2-standard-4", "nvidia-l4", 1), ("a2-highgpu-8g", "nvidia-tesla-a100", 8)):
        sold = offer(provider, type_name)
        [node] = provider.launch(LaunchRequest(sold, 1, type_name), NOW).nodes
        zone, name = node.node_id.split("/")
        fake.instances[(zone, name)].guest_accelerators = [c.AcceleratorConfig(
            accelerator_type=f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{zone}/"
                             f"acceleratorTypes/{gpu}", accelerator_count=count)]
        bought[node.node_id] = sold
    assert {n.node_id: n.offer for n in provider.nodes(NOW)} == bought
    n1 = c.Instance(machine_type=f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/us-central1-a/"
                                 "machineTypes/n1-standard-8",
                    guest_accelerators=[c.AcceleratorConfig(
                        accelerator_type=f"projects/{PROJECT}/zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
                        accelerator_count=2)])
    assert gcp.instance_type_name(n1) == "n1-standard-8+2xnvidia-tesla-t4"


def test_a_listing_gce_did_not_fill_in_is_read_safely_or_refused(fake: FakeGce, provider: GcpProvider) -> None:
    """A malformed or newer listing must not lead to a wrong action: an
    instance with no (or an unknown) status is not gone (that requeued every
    job and bought the fleet again while the instances ran); one without
    scheduling keeps the market of the offer it was bought from (its label),
    not on-demand; a creation time that cannot be read is unknown (below)."""
    spot = offer(provider, "g2-standard-4")
    [node] = provider.launch(LaunchRequest(spot, 1, "k"), NOW).nodes
    instance = fake.instances[tuple(node.node_id.split("/"))]  # type: ignore[index]
    instance.status = ""
    instance.scheduling = c.Scheduling()
    [seen] = provider.nodes(NOW)
    assert seen.state is NodeState.LAUNCHING and seen.offer == spot
    instance.status = "SOME_NEW_STATUS"
    assert provider.nodes(NOW)[0].state is NodeState.LAUNCHING
    instance.status = "TERMINATED"
    assert provider.nodes(NOW)[0].state is NodeState.GONE
    instance.creation_timestamp = "2025-01-06T11:00:00"  # no offset: UTC (a naive time was a TypeError later)
    assert provider.nodes(NOW)[0].launched_at_utc == NOW - timedelta(hours=1)


def test_an_instance_with_an_unreadable_creation_time_is_listed_with_it_unknown_and_a_warning(
        fake: FakeGce, provider: GcpProvider, caplog: pytest.LogCaptureFixture) -> None:
    """One instance whose creationTimestamp (or lastStartTimestamp) cannot be
    read failed the whole listing, on every poll: no node of the cluster was
    seen until it went. It is listed with the creation time unknown
    (UNKNOWN_LAUNCH_TIME, as one the listing leaves out; not ready since an
    unknown time), the others as they are, and the operator is told once
    which instance and which value."""
    spot = offer(provider, "g2-standard-4")
    [odd] = provider.launch(LaunchRequest(spot, 1, "odd"), NOW).nodes
    [fine] = provider.launch(LaunchRequest(spot, 1, "fine"), NOW).nodes
    instance = fake.instances[tuple(odd.node_id.split("/"))]  # type: ignore[index]
    instance.status = "RUNNING"
    instance.creation_timestamp = "yesterday"
    instance.last_start_timestamp = "today"
    with caplog.at_level(logging.WARNING, logger="providers.gcp"):
        listed = {n.node_id: n for n in provider.nodes(NOW)}
        provider.nodes(NOW)
    assert set(listed) == {odd.node_id, fine.node_id}
    assert listed[odd.node_id].launched_at_utc == UNKNOWN_LAUNCH_TIME and listed[odd.node_id].ready_at_utc is None
    assert listed[odd.node_id].state is NodeState.READY and listed[odd.node_id].offer == spot
    assert listed[fine.node_id].launched_at_utc != UNKNOWN_LAUNCH_TIME
    warned = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert warned == [
        f"gcp: {odd.node_id} has creationTimestamp 'yesterday', which this fleetctl cannot read; its creation "
        "time is taken as unknown",
        f"gcp: {odd.node_id} has lastStartTimestamp 'today', which this fleetctl cannot read; its start "
        "time is taken as unknown",
    ], warned  # once, not on every poll
    instance.creation_timestamp = ""
    assert {n.node_id: n for n in provider.nodes(NOW)}[odd.node_id].launched_at_utc == UNKNOWN_LAUNCH_TIME  # left out


# ============================================================================ launch


@pytest.mark.parametrize("action", ["DELETE", "STOP"])
def test_spot_launch_is_one_all_or_nothing_bulk_insert(fake: FakeGce, server: GceServer, action: str) -> None:
    p = make_provider(server, termination_action=action)
    spot = offer(p, "a2-highgpu-8g")
    result = p.launch(LaunchRequest(spot, 3, "plan-42/launch-0"), NOW)

    assert result.fulfilled and result.error is None
    assert {n.offer for n in result.nodes} == {spot}
    assert len({n.node_id.split("/")[0] for n in result.nodes}) == 1  # a gang lives in one zone
    [body] = bulk_inserts(fake)
    assert (body["count"], body["minCount"]) == ("3", "3")
    assert body["locationPolicy"]["targetShape"] == "ANY_SINGLE_ZONE"
    props = body["instanceProperties"]
    assert props["machineType"] == "a2-highgpu-8g"
    assert props["scheduling"]["provisioningModel"] == "SPOT"
    assert props["scheduling"]["instanceTerminationAction"] == action
    assert props["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert props["labels"]["fleetctl-managed"] == "true"
    assert props["labels"]["fleetctl-cluster"] == "research"
    assert props["labels"]["fleetctl-offer"] == label_value(spot.key)
    [query] = [r.query for r in fake.requests if r.path.endswith("/bulkInsert")]
    assert uuid.UUID(query["requestId"]).version == 5
    assert query["requestId"] == request_id("launch:research", "plan-42/launch-0")


def test_on_demand_launch_uses_the_standard_model(fake: FakeGce, provider: GcpProvider) -> None:
    provider.launch(LaunchRequest(offer(provider, "g2-standard-4", Market.ON_DEMAND), 1, "k"), NOW)
    [body] = bulk_inserts(fake)
    scheduling = body["instanceProperties"]["scheduling"]
    assert scheduling["provisioningModel"] == "STANDARD"
    assert "instanceTerminationAction" not in scheduling


def test_request_ids_are_derived_from_the_key() -> None:
    assert request_id("launch:a", "k1") == request_id("launch:a", "k1")
    assert len({request_id("launch:a", "k1"), request_id("launch:a", "k2"), request_id("launch:b", "k1")}) == 3


def test_launch_is_idempotent_across_calls_and_restarts(fake: FakeGce, server: GceServer,
                                                        provider: GcpProvider) -> None:
    request = LaunchRequest(offer(provider, "a2-highgpu-1g"), 2, "plan-1/launch-0")
    first = provider.launch(request, NOW)
    again = provider.launch(request, NOW)
    restarted = make_provider(server).launch(request, NOW + timedelta(hours=3))
    assert first.nodes == again.nodes == restarted.nodes
    assert len(bulk_inserts(fake)) == 1
    assert len(fake.created()) == 2


def test_a_launch_interrupted_after_gce_accepted_it_is_not_bought_twice(fake: FakeGce,
                                                                        provider: GcpProvider) -> None:
    request = LaunchRequest(offer(provider, "a2-highgpu-1g"), 2, "plan-2/launch-0")
    fake.fail_next("POST", "/wait", status=503, reason="backendError", message="Backend Error")
    with pytest.raises(ProviderError):
        provider.launch(request, NOW)
    result = provider.launch(request, NOW)
    assert result.fulfilled
    assert len(bulk_inserts(fake)) == 1 and len(fake.created()) == 2


def lagging_listing(fake: FakeGce, monkeypatch: pytest.MonkeyPatch, listings: int) -> None:
    """The first ``listings`` instance listings after a bulk insert show none
    of its instances (GCE's aggregated list is eventually consistent)."""
    pages, lagging = fake._page, [listings]

    def page(pairs: list, token: str | None) -> tuple[list, str]:
        inserted = any(r.path.endswith("/bulkInsert") for r in fake.requests)
        if inserted and lagging[0] > 0 and any(isinstance(item, c.Instance) for _, item in pairs):
            lagging[0] -= 1
            return [], ""
        return pages(pairs, token)

    monkeypatch.setattr(fake, "_page", page)


def test_a_finished_launch_the_listing_lags_behind_is_listed_again(fake: FakeGce, server: GceServer,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    provider = make_provider(server, launch_listing_pause_seconds=0)
    lagging_listing(fake, monkeypatch, listings=2)
    result = provider.launch(LaunchRequest(offer(provider, "g2-standard-4"), 2, "lag"), NOW)
    assert result.fulfilled and result.error is None


def test_a_finished_launch_still_not_listed_says_so_and_a_retry_finds_it(fake: FakeGce, server: GceServer,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    provider = make_provider(server, launch_listing_pause_seconds=0, launch_listings=3)
    lagging_listing(fake, monkeypatch, listings=3)
    request = LaunchRequest(offer(provider, "g2-standard-4"), 2, "lag")
    result = provider.launch(request, NOW)
    assert result.nodes == () and not result.fulfilled
    assert result.error is not None and "finished, but 0 of its 2 instances are listed after 3 listings" in result.error
    assert len(fake.created()) == 2  # bought: the error says so rather than a launch of nothing
    again = provider.launch(request, NOW)
    assert again.fulfilled and len(bulk_inserts(fake)) == 1


def test_the_gang_goes_to_the_zone_that_holds_all_of_it(fake: FakeGce, provider: GcpProvider) -> None:
    fake.capacity[("us-central1-a", "a2-highgpu-8g")] = 1
    fake.capacity[("us-central1-b", "a2-highgpu-8g")] = 4
    result = provider.launch(LaunchRequest(offer(provider, "a2-highgpu-8g"), 2, "k"), NOW)
    assert {n.node_id.split("/")[0] for n in result.nodes} == {"us-central1-b"}


def test_a_node_of_a_regional_offer_carries_the_zone_gce_put_it_in(fake: FakeGce, provider: GcpProvider) -> None:
    """GCP offers are regional (zone ""); GCE picks the zone. The adapter says
    which on Node.zone, when it launches and when it lists, so nodes of one
    offer in two zones are two placement domains without anyone reading ids."""
    fake.capacity[("us-central1-a", "a2-highgpu-8g")] = 0
    fake.capacity[("us-central1-b", "a2-highgpu-8g")] = 2
    regional = offer(provider, "a2-highgpu-8g")
    assert regional.zone == ""
    first = provider.launch(LaunchRequest(regional, 2, "k1"), NOW).nodes
    assert [n.zone for n in first] == ["us-central1-b", "us-central1-b"]
    fake.capacity[("us-central1-a", "a2-highgpu-8g")] = 1  # b is full now: the next one goes to a
    [second] = provider.launch(LaunchRequest(regional, 1, "k2"), NOW).nodes
    assert second.zone == "us-central1-a"

    listed = {n.node_id: n for n in provider.nodes(NOW)}
    assert {i: n.zone for i, n in listed.items()} == {n.node_id: n.zone for n in (*first, second)}
    assert {n.offer for n in listed.values()} == {regional}
    assert {n.placement_domain for n in listed.values()} == {("gcp", "us-central1", "us-central1-a"),
                                                             ("gcp", "us-central1", "us-central1-b")}


@pytest.mark.parametrize("code", ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"])
def test_stockout_is_insufficient_capacity_and_buys_nothing(fake: FakeGce, provider: GcpProvider,
                                                            code: str) -> None:
    fake.stockout_code = code
    fake.capacity[("us-central1-a", "a2-highgpu-8g")] = 1
    fake.capacity[("us-central1-b", "a2-highgpu-8g")] = 1
    with pytest.raises(InsufficientCapacity, match=code):
        provider.launch(LaunchRequest(offer(provider, "a2-highgpu-8g"), 2, "k"), NOW)
    assert fake.created() == []


def test_quota_exceeded_in_the_operation(fake: FakeGce, provider: GcpProvider) -> None:
    fake.instance_quota = 1
    with pytest.raises(QuotaExceeded, match="QUOTA_EXCEEDED"):
        provider.launch(LaunchRequest(offer(provider, "g2-standard-4"), 2, "k"), NOW)
    assert fake.created() == []


@pytest.mark.parametrize(
    ("status", "reason", "error"),
    [
        (403, "quotaExceeded", QuotaExceeded),
        (429, "rateLimitExceeded", Throttled),
        (403, "rateLimitExceeded", Throttled),  # GCE also answers 403 for per-minute API limits
        (429, "", Throttled),
        (400, "invalid", UnknownInstanceType),
    ],
    ids=["403-quota", "429-rate", "403-rate", "429-bare", "400-machine-type"],
)
def test_http_errors_are_translated(fake: FakeGce, provider: GcpProvider, status: int, reason: str,
                                    error: type[Exception]) -> None:
    spot = offer(provider, "g2-standard-4")
    message = ("Invalid value for field 'resource.instanceProperties.machineType': 'g2-standard-4'. "
               "Machine type with name 'g2-standard-4' does not exist in zone 'us-central1-c'.")
    fake.fail_next("POST", "/bulkInsert", status=status, reason=reason, message=message if status == 400 else "no")
    with pytest.raises(error):
        provider.launch(LaunchRequest(spot, 1, "k"), NOW)


def test_a_machine_type_the_region_does_not_have_is_unknown(fake: FakeGce, provider: GcpProvider) -> None:
    fake.machine_types = {z: [mt for mt in types if mt.name != "a2-highgpu-8g"] for z, types in
                          fake.machine_types.items()}  # the region stops listing it after offers() was read
    spot = offer(provider, "a2-highgpu-1g")
    gone = Offer(instance_types()[("gcp", "a2-highgpu-8g")], "us-central1", "", Market.SPOT, spot.usd_per_hour)
    with pytest.raises(UnknownInstanceType, match="a2-highgpu-8g"):
        provider.launch(LaunchRequest(gone, 1, "k"), NOW)
    assert fake.created() == [] and not [op for _, op in fake.operations.values()]


def test_an_offer_of_a_region_not_configured_or_not_priced_is_refused_before_any_call(
        fake: FakeGce, server: GceServer, provider: GcpProvider) -> None:
    east = next(o for o in load_catalog() if o.provider == "gcp" and o.region == "us-east4"
                and o.instance_type.name == "a2-highgpu-1g" and o.market is Market.SPOT)
    fake.add_machine_type("us-east4-a", A2_1G)  # GCE would sell it there
    with pytest.raises(UnknownInstanceType, match="region us-east4 is not configured for GCP \\(us-central1\\)"):
        provider.launch(LaunchRequest(east, 1, "east"), NOW)
    everywhere = make_provider(server, regions=())  # every region of the snapshot
    mega = next(o for o in load_catalog() if o.provider == "gcp" and o.instance_type.name == "a3-megagpu-8g")
    unpriced = Offer(mega.instance_type, "us-central1", "", Market.SPOT, 1.0)  # priced elsewhere, not here
    with pytest.raises(UnknownInstanceType, match="the catalog does not price a3-megagpu-8g spot in us-central1"):
        everywhere.launch(LaunchRequest(unpriced, 1, "mega"), NOW)
    assert bulk_inserts(fake) == [] and fake.created() == []


def test_offers_outside_the_catalog_are_unknown_instance_types(fake: FakeGce, provider: GcpProvider) -> None:
    known = offer(provider, "g2-standard-4")
    made_up = Offer(type(known.instance_type)("gcp", "a9-imaginary-1g", 1, 1.0), "us-central1", "",
                    Market.SPOT, 1.0)
    with pytest.raises(UnknownInstanceType):
        provider.launch(LaunchRequest(made_up, 1, "k"), NOW)
    aws = next(o for o in load_catalog() if o.provider == "aws")
    with pytest.raises(UnknownInstanceType):
        provider.launch(LaunchRequest(aws, 1, "k"), NOW)
    assert bulk_inserts(fake) == []


# ============================================================================ throttling (the wrapper)


def test_throttle_retry_backs_off_with_bounded_jitter_then_succeeds(fake: FakeGce, provider: GcpProvider) -> None:
    sleeps: list[float] = []
    wrapped = ThrottleRetry(provider, attempts=4, base_delay_seconds=0.5, max_delay_seconds=1.0, sleep=sleeps.append)
    fake.fail_next("POST", "/bulkInsert", status=429, reason="rateLimitExceeded", times=3)
    result = wrapped.launch(LaunchRequest(offer(provider, "g2-standard-4"), 1, "k"), NOW)
    assert result.fulfilled
    assert len(sleeps) == 3
    assert all(0.0 <= s <= bound for s, bound in zip(sleeps, (0.5, 1.0, 1.0), strict=True))
    assert len(bulk_inserts(fake)) == 4 and len(fake.created()) == 1


def test_throttle_retry_jitter_differs_between_wrappers_unless_an_rng_is_given(fake: FakeGce,
                                                                                provider: GcpProvider) -> None:
    """Two controllers throttled together must not retry in step (a fixed seed made every process wait the same)."""
    def waits(rng: random.Random | None) -> list[float]:
        sleeps: list[float] = []
        fake.fail_next("GET", "/aggregated/instances", status=429, reason="rateLimitExceeded", times=3)
        ThrottleRetry(provider, attempts=4, sleep=sleeps.append, rng=rng).nodes(NOW)
        assert len(sleeps) == 3
        return sleeps

    assert waits(None) != waits(None)
    assert waits(random.Random(7)) == waits(random.Random(7))  # injected: reproducible


def test_throttle_retry_gives_up_and_does_not_retry_other_errors(fake: FakeGce, provider: GcpProvider) -> None:
    sleeps: list[float] = []
    wrapped = ThrottleRetry(provider, attempts=3, sleep=sleeps.append)
    fake.fail_next("GET", "/aggregated/instances", status=429, reason="rateLimitExceeded", times=3)
    with pytest.raises(Throttled):
        wrapped.nodes(NOW)
    assert len(sleeps) == 2
    fake.instance_quota = 0
    with pytest.raises(QuotaExceeded):
        wrapped.launch(LaunchRequest(offer(provider, "g2-standard-4"), 1, "k"), NOW)
    assert len(sleeps) == 2
    assert isinstance(wrapped, Provider)


# ============================================================================ terminate


def test_terminate_deletes_and_is_idempotent(fake: FakeGce, provider: GcpProvider) -> None:
    [node] = provider.launch(LaunchRequest(offer(provider, "g2-standard-4"), 1, "k"), NOW).nodes
    provider.terminate(node.node_id, NOW)
    provider.terminate(node.node_id, NOW)  # already gone (404): success
    assert provider.nodes(NOW) == ()
    deletes = [r for r in fake.requests if r.method == "DELETE"]
    assert len(deletes) == 1 and uuid.UUID(deletes[0].query["requestId"]).version == 5


def test_terminate_refuses_what_fleetctl_did_not_buy(fake: FakeGce, provider: GcpProvider) -> None:
    fake.instances[("us-central1-a", "database")] = c.Instance(name="database", status="RUNNING")
    with pytest.raises(NodeNotFound):
        provider.terminate("us-central1-a/database", NOW)
    with pytest.raises(NodeNotFound):
        provider.terminate("not-a-node-id", NOW)
    assert ("us-central1-a", "database") in fake.instances
    assert not [r for r in fake.requests if r.method == "DELETE"]


# ============================================================================ preemptions


def test_preemptions_become_deduplicated_events_until_acknowledged(fake: FakeGce, provider: GcpProvider) -> None:
    nodes = provider.launch(LaunchRequest(offer(provider, "g2-standard-4"), 2, "k"), NOW).nodes
    zone, name = nodes[0].node_id.split("/")
    fake.preempt(zone, name)
    fake.preempt("us-central1-a", "someone-elses-vm")

    [event] = provider.interruption_events(NOW + timedelta(seconds=5))
    assert (event.provider, event.node_id, event.kind) == ("gcp", nodes[0].node_id, InterruptionKind.TERMINATED)
    assert provider.interruption_events(NOW + timedelta(seconds=10)) == (event,)  # same event, once
    provider.acknowledge(event.event_id)
    assert provider.interruption_events(NOW + timedelta(seconds=15)) == ()
    assert [n.node_id for n in provider.nodes(NOW)] == [nodes[1].node_id]  # DELETE action: the VM is gone


def test_preemptions_of_a_cluster_with_a_longer_name_are_not_ours(fake: FakeGce, server: GceServer) -> None:
    ours, theirs = make_provider(server, cluster="research"), make_provider(server, cluster="research-2")
    [node] = theirs.launch(LaunchRequest(offer(theirs, "g2-standard-4"), 1, "k"), NOW).nodes
    fake.preempt(*node.node_id.split("/"))
    assert ours.interruption_events(NOW) == ()
    assert [e.node_id for e in theirs.interruption_events(NOW)] == [node.node_id]


def test_a_running_preemption_is_a_warning_with_the_30s_deadline(fake: FakeGce, server: GceServer) -> None:
    p = make_provider(server, termination_action="STOP")
    [node] = p.launch(LaunchRequest(offer(p, "a2-highgpu-1g"), 1, "k"), NOW).nodes
    op = fake.preempt(*node.node_id.split("/"), done=False)
    [warning] = p.interruption_events(NOW)
    assert warning.kind is InterruptionKind.RECLAIM_WARNING
    assert warning.deadline_utc == NOW + timedelta(seconds=30)
    assert [n.state for n in p.nodes(NOW)] == [NodeState.TERMINATING]

    op.status = c.Operation.Status.DONE  # the preemption completes; STOP keeps the VM, TERMINATED
    fake.instances[tuple(node.node_id.split("/"))].status = "TERMINATED"  # type: ignore[index]
    [done] = p.interruption_events(NOW + timedelta(seconds=30))
    assert (done.event_id, done.kind) == (warning.event_id, InterruptionKind.TERMINATED)
    assert [n.state for n in p.nodes(NOW)] == [NodeState.GONE]


@pytest.mark.parametrize("start_time, insert_time, started", [
    ("yesterday", "", NOW + timedelta(seconds=5)),  # unreadable: as if seen now
    ("yesterday", "2025-01-06T11:59:50-08:00", NOW + timedelta(seconds=5)),  # insert time in the future: now
    ("yesterday", "2025-01-06T03:59:50-08:00", NOW - timedelta(seconds=10)),  # the insert time, in UTC
    ("2025-01-06T11:59:58", "", NOW - timedelta(seconds=2)),  # no offset: UTC, as AWS and Azure take it
    ("9999-12-31T23:59:59-05:00", "", NOW + timedelta(seconds=5)),  # past year 9999 in UTC: unreadable
])
def test_a_preemption_with_unreadable_times_is_delivered_and_holds_back_no_other(
        fake: FakeGce, provider: GcpProvider, caplog: pytest.LogCaptureFixture,
        start_time: str, insert_time: str, started: datetime) -> None:
    """A preemption operation of ours whose times cannot be read is still a
    preemption; it raised on every poll, so no preemption of the cluster was
    delivered until it left the lookback."""
    nodes = provider.launch(LaunchRequest(offer(provider, "g2-standard-4"), 2, "k"), NOW).nodes
    odd = fake.preempt(*nodes[0].node_id.split("/"), done=False)
    odd.start_time, odd.insert_time = start_time, insert_time
    fake.preempt(*nodes[1].node_id.split("/"))
    now = NOW + timedelta(seconds=5)
    with caplog.at_level("WARNING", logger="providers.gcp"):
        events = provider.interruption_events(now)
        assert provider.interruption_events(now + timedelta(seconds=5)) == events  # same times on the next poll
    by_node = {e.node_id: e for e in events}
    assert sorted(by_node) == sorted(n.node_id for n in nodes)
    warning = by_node[nodes[0].node_id]
    assert warning.kind is InterruptionKind.RECLAIM_WARNING
    assert warning.received_at_utc == started and warning.received_at_utc.tzinfo is not None
    assert warning.deadline_utc == started + timedelta(seconds=30)
    unreadable = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert len(unreadable) == (start_time != "2025-01-06T11:59:58")  # once, not on every poll


def test_old_preemptions_are_outside_the_lookback(fake: FakeGce, provider: GcpProvider) -> None:
    [node] = provider.launch(LaunchRequest(offer(provider, "g2-standard-4"), 1, "k"), NOW).nodes
    fake.preempt(*node.node_id.split("/"))
    assert provider.interruption_events(NOW + timedelta(hours=2)) == ()
    assert len(provider.interruption_events(NOW + timedelta(minutes=30))) == 1


# ============================================================================ boundaries


def test_the_sdk_is_imported_lazily_and_only_by_the_gcp_module() -> None:
    code = "import sys, providers.gcp; print('google.cloud.compute_v1' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    importers = [p.relative_to(REPO).as_posix() for folder in ("fleetctl", "providers", "forecasting")
                 for p in (REPO / folder).rglob("*.py") if "google.cloud" in p.read_text(encoding="utf-8")]
    assert importers == ["providers/gcp.py"]


def test_a_missing_sdk_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.cloud.compute_v1", None)
    with pytest.raises(ImportError, match=r"pip install 'fleetctl\[gcp\]'"):
        GcpProvider.from_sdk(GcpConfig(project=PROJECT, cluster="c"))


def test_config_rejects_unknown_termination_actions() -> None:
    with pytest.raises(ValueError, match="DELETE or STOP"):
        GcpConfig(project=PROJECT, cluster="c", termination_action="HIBERNATE")
