"""The Provider contract (``providers/base.py``), one suite for every adapter.

Each adapter runs behind a *harness*: the provider plus the cloud-side levers
a contract needs (an offer with capacity, take that capacity away, reclaim a
node, acknowledge a notice). Only the harnesses are cloud-specific:

* ``sim``: the sandbox provider over a SQLite store;
* ``gcp``: the real google-cloud-compute client against the local GCE server;
* ``aws``: the real boto3 client against moto's server on 127.0.0.1, with
  capacity errors injected at the HTTP layer (moto never runs out);
* ``azure``: the real azure-mgmt-compute client against the local HTTPS ARM
  server (bearer token, ``trustme`` CA, ``polling_interval=0``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Protocol

import pytest
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1 as c

from fleetctl.model import InterruptionEvent, InterruptionKind, Market, Node, NodeState, Offer
from fleetctl.store import Store
from providers.aws import AwsProvider
from providers.azure import AzureConfig, AzureProvider, AzureRegion
from providers.base import InsufficientCapacity, LaunchRequest, NodeNotFound, Provider
from providers.gcp import GcpConfig, GcpProvider
from providers.sim import SimProvider
from tests.providers.aws_world import MotoWorld, moto_world
from tests.providers.azure_server import ArmServer, FakeArm, StaticToken, gpu_sku
from tests.providers.gcp_server import FakeGce, GceServer

NOW = datetime(2025, 1, 6, 12, 0, tzinfo=timezone.utc)


class Harness(Protocol):
    provider: Any
    cloud: str  # the provider name the offers and events carry ("sim" sells every cloud's offers)
    notice_seconds: int
    now: datetime

    def offer(self) -> Offer: ...

    def remove_capacity(self, offer: Offer) -> None: ...

    def reclaim(self, node_id: str) -> None: ...

    def acknowledge(self, event_id: str) -> None: ...


@dataclass
class SimHarness:
    provider: SimProvider
    store: Store
    cloud: str = "aws"
    notice_seconds: int = 120
    now: datetime = NOW

    def offer(self) -> Offer:
        return next(o for o in self.provider.offers(self.now)
                    if o.market is Market.SPOT and o.instance_type.name == "g5.xlarge")

    def remove_capacity(self, offer: Offer) -> None:
        # The sandbox's lever: a provider built without capacity for the offer.
        self.provider = SimProvider(self.store, unavailable_offer_keys=frozenset({offer.key}))

    def reclaim(self, node_id: str) -> None:
        self.provider.reclaim(node_id, self.now)

    def acknowledge(self, event_id: str) -> None:
        # The sandbox keeps notices in the store: handled there is acknowledged.
        self.provider.acknowledge(event_id)
        self.store.mark_interruption_handled(event_id, self.now)


@dataclass
class GcpHarness:
    provider: GcpProvider
    fake: FakeGce
    cloud: str = "gcp"
    notice_seconds: int = 30
    now: datetime = NOW

    def offer(self) -> Offer:
        return next(o for o in self.provider.offers(self.now)
                    if o.market is Market.SPOT and o.instance_type.name == "g2-standard-4")

    def remove_capacity(self, offer: Offer) -> None:
        for zone in self.fake.machine_types:
            self.fake.capacity[(zone, offer.instance_type.name)] = 0

    def reclaim(self, node_id: str) -> None:
        zone, name = node_id.split("/")
        self.fake.preempt(zone, name)

    def acknowledge(self, event_id: str) -> None:
        self.provider.acknowledge(event_id)


@dataclass
class AwsHarness:
    provider: AwsProvider
    world: MotoWorld
    cloud: str = "aws"
    notice_seconds: int = 120
    now: datetime = NOW
    _no_capacity: set[str] = field(default_factory=set)

    def offer(self) -> Offer:
        return next(o for o in self.provider.offers(self.now)
                    if o.market is Market.SPOT and o.instance_type.name == "g5.xlarge" and o.zone == "use1-az2")

    def remove_capacity(self, offer: Offer) -> None:
        # moto never runs out: answer the next fleets as EC2 does when it has none.
        self.world.empty_fleet_next("InsufficientInstanceCapacity", "There is no Spot capacity available",
                                    times=10)

    def reclaim(self, node_id: str) -> None:
        self.world.reclaim(node_id)

    def acknowledge(self, event_id: str) -> None:
        self.provider.acknowledge(event_id)


@dataclass
class AzureHarness:
    provider: AzureProvider
    fake: FakeArm
    cloud: str = "azure"
    notice_seconds: int = 30
    now: datetime = NOW

    def offer(self) -> Offer:
        return next(o for o in self.provider.offers(self.now)
                    if o.market is Market.SPOT and o.instance_type.name == "Standard_NC4as_T4_v3")

    def remove_capacity(self, offer: Offer) -> None:
        self.fake.capacity[(offer.region, offer.instance_type.name)] = 0

    def reclaim(self, node_id: str) -> None:
        self.fake.evict("fleet", node_id)

    def acknowledge(self, event_id: str) -> None:
        self.provider.acknowledge(event_id)


def _azure(tmp_path: Path) -> Iterator[Harness]:
    fake = FakeArm("00000000-0000-0000-0000-000000000001")
    fake.skus = [gpu_sku("Standard_NC4as_T4_v3", "eastus"), gpu_sku("Standard_NC6s_v3", "eastus")]
    with ArmServer(fake, tmp_path) as server:
        config = AzureConfig(cluster="contract", subscription_id=fake.subscription, resource_group="fleet",
                             regions=(AzureRegion("eastus", "/subscriptions/x/subnets/nodes", "/images/gpu"),))
        provider = AzureProvider.from_sdk(config, StaticToken(), base_url=server.endpoint,
                                          connection_verify=str(server.ca_file))
        yield AzureHarness(provider, fake)


def _sim(tmp_path: Path) -> Iterator[Harness]:
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        yield SimHarness(SimProvider(store), store)
    finally:
        store.close()


def _gcp() -> Iterator[Harness]:
    fake = FakeGce("contract", now=NOW)
    for zone in ("us-central1-a", "us-central1-f"):
        fake.add_machine_type(zone, c.MachineType(
            name="g2-standard-4", guest_cpus=4, memory_mb=16384,
            accelerators=[c.Accelerators(guest_accelerator_type="nvidia-l4", guest_accelerator_count=1)]))
    with GceServer(fake) as server:
        provider = GcpProvider.from_sdk(
            GcpConfig(project="contract", cluster="contract", regions=("us-central1",)),
            client_options=ClientOptions(api_endpoint=server.endpoint), credentials=AnonymousCredentials())
        yield GcpHarness(provider, fake)


def _aws(moto_server: Any) -> Iterator[Harness]:
    with moto_world(moto_server) as world:
        yield AwsHarness(world.provider(), world)


@pytest.fixture(params=["sim", "gcp", "aws", "azure"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    if request.param == "sim":
        yield from _sim(tmp_path)
    elif request.param == "gcp":
        yield from _gcp()
    elif request.param == "azure":
        yield from _azure(tmp_path)
    else:
        yield from _aws(request.getfixturevalue("moto_server"))


def test_it_is_a_provider_with_declared_capabilities(harness: Harness) -> None:
    p = harness.provider
    assert isinstance(p, Provider)
    assert p.capabilities.interruption_notice_seconds == harness.notice_seconds
    assert p.capabilities.idempotent_launch


def test_offers_are_priced_offers_of_this_provider(harness: Harness) -> None:
    offers = harness.provider.offers(harness.now)
    assert offers
    assert all(o.usd_per_hour > 0 for o in offers)
    assert harness.cloud in {o.provider for o in offers}
    assert len({o.key for o in offers}) == len(offers)


def test_launched_nodes_show_up_in_nodes(harness: Harness) -> None:
    result = harness.provider.launch(LaunchRequest(harness.offer(), 2, "contract-1"), harness.now)
    assert result.fulfilled and len(result.nodes) == 2
    assert all(n.offer == harness.offer() and n.schedulable for n in result.nodes)
    listed = {n.node_id for n in harness.provider.nodes(harness.now)}
    assert {n.node_id for n in result.nodes} <= listed


def test_a_node_says_the_same_zone_launched_and_listed_and_a_zonal_offers_own(harness: Harness) -> None:
    offer = harness.offer()
    result = harness.provider.launch(LaunchRequest(offer, 2, "contract-zone"), harness.now)
    listed = {n.node_id: n.zone for n in harness.provider.nodes(harness.now)}
    assert {n.node_id: n.zone for n in result.nodes} == {n.node_id: listed[n.node_id] for n in result.nodes}
    if offer.zone:
        assert {n.zone for n in result.nodes} == {offer.zone}


def test_launch_is_idempotent_by_key(harness: Harness) -> None:
    first = harness.provider.launch(LaunchRequest(harness.offer(), 2, "contract-2"), harness.now)
    again = harness.provider.launch(LaunchRequest(harness.offer(), 2, "contract-2"), harness.now)
    other = harness.provider.launch(LaunchRequest(harness.offer(), 1, "contract-3"), harness.now)
    assert {n.node_id for n in again.nodes} == {n.node_id for n in first.nodes}
    assert not {n.node_id for n in other.nodes} & {n.node_id for n in first.nodes}
    assert len(harness.provider.nodes(harness.now)) == 3


def test_launch_of_zero_nodes_is_refused(harness: Harness) -> None:
    with pytest.raises(ValueError):
        harness.provider.launch(LaunchRequest(harness.offer(), 0, "contract-4"), harness.now)


def test_no_capacity_is_insufficient_capacity_and_nothing_is_bought(harness: Harness) -> None:
    harness.remove_capacity(harness.offer())
    with pytest.raises(InsufficientCapacity):
        harness.provider.launch(LaunchRequest(harness.offer(), 1, "contract-5"), harness.now)
    assert harness.provider.nodes(harness.now) == ()


def test_terminate_is_idempotent_and_unknown_ids_are_not_found(harness: Harness) -> None:
    [node] = harness.provider.launch(LaunchRequest(harness.offer(), 1, "contract-6"), harness.now).nodes
    harness.provider.terminate(node.node_id, harness.now)
    harness.provider.terminate(node.node_id, harness.now)
    remaining = {n.node_id: n.state for n in harness.provider.nodes(harness.now)}
    assert remaining.get(node.node_id, NodeState.GONE) in (NodeState.GONE, NodeState.TERMINATING)
    with pytest.raises(NodeNotFound):
        harness.provider.terminate("never-existed", harness.now)


def test_interruptions_are_returned_until_acknowledged(harness: Harness) -> None:
    [node] = harness.provider.launch(LaunchRequest(harness.offer(), 1, "contract-7"), harness.now).nodes
    assert harness.provider.interruption_events(harness.now) == ()
    harness.reclaim(node.node_id)
    later = harness.now + timedelta(seconds=1)
    if not harness.provider.capabilities.central_notices:
        # Announced on the node only (node-watch -> the daemon): the cloud API
        # has no notice to return, and the reclaimed node leaves the listing.
        assert harness.provider.interruption_events(later) == ()
        assert node.node_id not in {n.node_id for n in harness.provider.nodes(later) if n.state is not NodeState.GONE}
        return
    [event] = harness.provider.interruption_events(later)
    assert (event.node_id, event.provider) == (node.node_id, harness.cloud)
    assert event.kind in (InterruptionKind.RECLAIM_WARNING, InterruptionKind.TERMINATED)
    assert harness.provider.interruption_events(later) == (event,)
    harness.acknowledge(event.event_id)
    assert harness.provider.interruption_events(later) == ()



def test_the_sandbox_lists_every_node_it_sold_and_terminates_and_reclaims_by_id(tmp_path: Path) -> None:
    """The sandbox lists every node it sold, those its cloud took as GONE
    (a reclaim past its deadline, a terminate); terminating or reclaiming a node
    finds it among many by its id, and an unknown id is NodeNotFound. A
    pass's passive transitions land together."""
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        sim = SimProvider(store, launch_delay_seconds=10)
        offer = next(o for o in sim.offers(NOW) if o.market is Market.SPOT)
        kept, reclaimed, ended = sim.launch(LaunchRequest(offer, 3, "sandbox-1"), NOW).nodes
        later = NOW + timedelta(seconds=20)
        assert {n.node_id: n.state for n in sim.nodes(later)} == dict.fromkeys(
            (kept.node_id, reclaimed.node_id, ended.node_id), NodeState.READY)
        sim.terminate(ended.node_id, later)
        event = sim.reclaim(reclaimed.node_id, later, lead_seconds=30)
        assert (event.node_id, event.provider, event.deadline_utc) == (reclaimed.node_id, offer.provider,
                                                                       later + timedelta(seconds=30))
        at_deadline = later + timedelta(seconds=30)
        expected = {kept.node_id: NodeState.READY, reclaimed.node_id: NodeState.GONE, ended.node_id: NodeState.GONE}
        assert {n.node_id: n.state for n in sim.nodes(at_deadline)} == expected
        assert {n.node_id: n.state for n in store.nodes(include_gone=True)} == expected
        sim.terminate(ended.node_id, at_deadline)  # still known: idempotent, not NodeNotFound
        with pytest.raises(NodeNotFound):
            sim.reclaim("never-sold", at_deadline)
        with pytest.raises(NodeNotFound):
            sim.terminate("never-sold", at_deadline)
    finally:
        store.close()


def test_the_sandbox_stops_listing_a_node_an_hour_after_it_went(tmp_path: Path) -> None:
    """A node gone (terminated, or taken by a reclaim) is listed as GONE for
    GONE_LISTED_SECONDS, then no longer (the store keeps it: a long-running
    sandbox does not list every node it ever sold); live nodes are listed
    whatever their age."""
    from providers.sim import GONE_LISTED_SECONDS

    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        sim = SimProvider(store, launch_delay_seconds=10)
        offer = next(o for o in sim.offers(NOW) if o.market is Market.SPOT)
        kept, ended = sim.launch(LaunchRequest(offer, 2, "sandbox-1"), NOW).nodes
        sim.terminate(ended.node_id, NOW + timedelta(seconds=20))
        within = NOW + timedelta(seconds=20 + GONE_LISTED_SECONDS)
        assert {n.node_id: n.state for n in sim.nodes(within)} == {kept.node_id: NodeState.READY,
                                                                    ended.node_id: NodeState.GONE}
        after = within + timedelta(seconds=1)
        assert {n.node_id: n.state for n in sim.nodes(after)} == {kept.node_id: NodeState.READY}
        assert {n.node_id for n in store.nodes(include_gone=True)} == {kept.node_id, ended.node_id}
        sim.terminate(ended.node_id, after)  # still known: idempotent, not NodeNotFound
    finally:
        store.close()


US = timedelta(microseconds=1)


def test_the_sandbox_names_a_node_by_its_seed_key_and_place_and_makes_it_ready_at_its_time(tmp_path: Path) -> None:
    """A node's id is sim-PROVIDER- and 10 hex digits of sha256("SEED:KEY:INDEX"), its ready time the
    launch plus the mean delay times delay_spread of that digest; it is LAUNCHING until then, READY
    (recorded) from exactly then, idle since its ready time."""
    import hashlib

    from providers.sim import delay_spread

    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        sim = SimProvider(store, seed=7, launch_delay_seconds=10)
        offer = next(o for o in sim.offers(NOW) if o.market is Market.SPOT)
        digests = [hashlib.sha256(f"7:k:{i}".encode()).hexdigest() for i in (0, 1)]
        first, second = sim.launch(LaunchRequest(offer, 2, "k"), NOW).nodes
        assert [first.node_id, second.node_id] == [f"sim-{offer.provider}-{d[:10]}" for d in digests]
        ready = NOW + timedelta(seconds=10 * delay_spread(digests[0]))
        assert first.ready_at_utc == ready
        assert {n.node_id: (n.state, n.idle_since_utc) for n in sim.nodes(ready - US)}[first.node_id] == \
            (NodeState.LAUNCHING, None)
        assert {n.node_id: (n.state, n.idle_since_utc) for n in sim.nodes(ready)}[first.node_id] == \
            (NodeState.READY, ready)
        (recorded,) = store.nodes(node_ids=[first.node_id])
        assert (recorded.state, recorded.idle_since_utc) == (NodeState.READY, ready)
    finally:
        store.close()


def test_the_sandbox_keeps_an_idle_time_recorded_while_launching_and_never_readies_a_node_without_a_time(
        tmp_path: Path) -> None:
    """A node a job left while it launched (the controller records it idle from then) stays idle from
    then once ready; a launching node with no ready time is never due."""
    from tests.builders import offer as build_offer

    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        sim = SimProvider(store)
        o = build_offer("g1", gpus=1)
        left = Node("left", o, NodeState.LAUNCHING, NOW, ready_at_utc=NOW + timedelta(seconds=60),
                    idle_since_utc=NOW + timedelta(seconds=5))
        timeless = Node("timeless", o, NodeState.LAUNCHING, NOW)
        store.put_node(left, NOW)
        store.put_node(timeless, NOW)
        later = NOW + timedelta(days=1)
        assert {n.node_id: (n.state, n.idle_since_utc) for n in sim.nodes(later)} == {
            "left": (NodeState.READY, NOW + timedelta(seconds=5)), "timeless": (NodeState.LAUNCHING, None)}
    finally:
        store.close()


def test_the_sandbox_derives_its_transitions_without_writing_a_read_only_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    try:
        (launched,) = SimProvider(store, launch_delay_seconds=10).launch(
            LaunchRequest(next(o for o in SimProvider(store).offers(NOW) if o.market is Market.SPOT), 1, "k"),
            NOW).nodes
    finally:
        store.close()
    reader = Store(url, read_only=True)
    try:
        sim = SimProvider(reader, launch_delay_seconds=10)
        later = NOW + timedelta(seconds=20)
        for _ in range(2):  # derived again on each call
            assert [(n.node_id, n.state) for n in sim.nodes(later)] == [(launched.node_id, NodeState.READY)]
        assert [n.state for n in reader.nodes()] == [NodeState.LAUNCHING]
    finally:
        reader.close()


def test_the_sandbox_takes_a_node_at_a_notice_without_a_deadline_once_received_and_at_a_handled_ones(
        tmp_path: Path) -> None:
    """A notice without a deadline takes its node when it is received (not before); a handled notice
    still takes its node at its deadline."""
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        sim = SimProvider(store, launch_delay_seconds=0)
        offer = next(o for o in sim.offers(NOW) if o.market is Market.SPOT)
        sudden, noticed = sim.launch(LaunchRequest(offer, 2, "k"), NOW).nodes
        at = NOW + timedelta(seconds=30)
        sim.notify(InterruptionEvent("e1", offer.provider, sudden.node_id, InterruptionKind.TERMINATED, at))
        event = sim.reclaim(noticed.node_id, NOW, lead_seconds=60)
        store.mark_interruption_handled(event.event_id, NOW + timedelta(seconds=1))

        def states(t: datetime) -> dict[str, NodeState]:
            return {n.node_id: n.state for n in sim.nodes(t)}

        assert states(at - US) == {sudden.node_id: NodeState.READY, noticed.node_id: NodeState.READY}
        assert states(at) == {sudden.node_id: NodeState.GONE, noticed.node_id: NodeState.READY}
        assert states(NOW + timedelta(seconds=60) - US)[noticed.node_id] is NodeState.READY
        assert states(NOW + timedelta(seconds=60)) == {sudden.node_id: NodeState.GONE,
                                                       noticed.node_id: NodeState.GONE}
    finally:
        store.close()
