"""The Provider contract (``providers/base.py``), checked on the GCP adapter
through the real google-cloud-compute client and the local GCE server.

Written as a harness (provider + the cloud-side levers a contract needs:
take capacity away, reclaim a node), so the same assertions plug into the
shared suite ``tests/providers/contract.py`` once it exists: only
``GcpHarness`` is GCP-specific.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1 as c

from fleetctl.model import InterruptionKind, Market, NodeState, Offer
from providers.base import InsufficientCapacity, LaunchRequest, NodeNotFound, Provider
from providers.gcp import GcpConfig, GcpProvider
from tests.providers.gcp_server import FakeGce, GceServer

NOW = datetime(2025, 1, 6, 12, 0, tzinfo=timezone.utc)


@dataclass
class GcpHarness:
    provider: GcpProvider
    fake: FakeGce
    now: datetime = NOW

    def offer(self) -> Offer:
        """A spot offer the cloud has capacity for."""
        return next(o for o in self.provider.offers(self.now)
                    if o.market is Market.SPOT and o.instance_type.name == "g2-standard-4")

    def remove_capacity(self, offer: Offer) -> None:
        for zone in self.fake.machine_types:
            self.fake.capacity[(zone, offer.instance_type.name)] = 0

    def reclaim(self, node_id: str) -> None:
        zone, name = node_id.split("/")
        self.fake.preempt(zone, name)


@pytest.fixture
def harness() -> Iterator[GcpHarness]:
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


def test_it_is_a_provider_with_declared_capabilities(harness: GcpHarness) -> None:
    p = harness.provider
    assert isinstance(p, Provider)
    assert p.name == "gcp"
    assert p.capabilities.interruption_notice_seconds == 30
    assert p.capabilities.idempotent_launch


def test_offers_are_priced_offers_of_this_provider(harness: GcpHarness) -> None:
    offers = harness.provider.offers(harness.now)
    assert offers
    assert all(o.provider == "gcp" and o.usd_per_hour > 0 for o in offers)
    assert len({o.key for o in offers}) == len(offers)


def test_launched_nodes_show_up_in_nodes(harness: GcpHarness) -> None:
    result = harness.provider.launch(LaunchRequest(harness.offer(), 2, "contract-1"), harness.now)
    assert result.fulfilled and len(result.nodes) == 2
    assert all(n.offer == harness.offer() and n.schedulable for n in result.nodes)
    listed = {n.node_id for n in harness.provider.nodes(harness.now)}
    assert {n.node_id for n in result.nodes} <= listed


def test_launch_is_idempotent_by_key(harness: GcpHarness) -> None:
    first = harness.provider.launch(LaunchRequest(harness.offer(), 2, "contract-2"), harness.now)
    again = harness.provider.launch(LaunchRequest(harness.offer(), 2, "contract-2"), harness.now)
    other = harness.provider.launch(LaunchRequest(harness.offer(), 1, "contract-3"), harness.now)
    assert {n.node_id for n in again.nodes} == {n.node_id for n in first.nodes}
    assert not {n.node_id for n in other.nodes} & {n.node_id for n in first.nodes}
    assert len(harness.provider.nodes(harness.now)) == 3


def test_launch_of_zero_nodes_is_refused(harness: GcpHarness) -> None:
    with pytest.raises(ValueError):
        harness.provider.launch(LaunchRequest(harness.offer(), 0, "contract-4"), harness.now)


def test_no_capacity_is_insufficient_capacity_and_nothing_is_bought(harness: GcpHarness) -> None:
    harness.remove_capacity(harness.offer())
    with pytest.raises(InsufficientCapacity):
        harness.provider.launch(LaunchRequest(harness.offer(), 1, "contract-5"), harness.now)
    assert harness.provider.nodes(harness.now) == ()


def test_terminate_is_idempotent_and_unknown_ids_are_not_found(harness: GcpHarness) -> None:
    [node] = harness.provider.launch(LaunchRequest(harness.offer(), 1, "contract-6"), harness.now).nodes
    harness.provider.terminate(node.node_id, harness.now)
    harness.provider.terminate(node.node_id, harness.now)
    remaining = {n.node_id: n.state for n in harness.provider.nodes(harness.now)}
    assert remaining.get(node.node_id, NodeState.GONE) in (NodeState.GONE, NodeState.TERMINATING)
    with pytest.raises(NodeNotFound):
        harness.provider.terminate("never-existed", harness.now)


def test_interruptions_are_returned_until_acknowledged(harness: GcpHarness) -> None:
    [node] = harness.provider.launch(LaunchRequest(harness.offer(), 1, "contract-7"), harness.now).nodes
    assert harness.provider.interruption_events(harness.now) == ()
    harness.reclaim(node.node_id)
    later = harness.now + timedelta(seconds=1)
    [event] = harness.provider.interruption_events(later)
    assert (event.node_id, event.provider) == (node.node_id, "gcp")
    assert event.kind in (InterruptionKind.RECLAIM_WARNING, InterruptionKind.TERMINATED)
    assert harness.provider.interruption_events(later) == (event,)
    harness.provider.acknowledge(event.event_id)
    assert harness.provider.interruption_events(later) == ()
