"""MultiCloud routes each call to the cloud it concerns."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from fleetctl.model import Market
from fleetctl.store import Store
from providers.base import LaunchRequest, NodeNotFound, UnknownInstanceType
from providers.multi import MultiCloud
from providers.sim import SimProvider

NOW = datetime(2025, 1, 6, 12, 0, tzinfo=timezone.utc)


class Named:
    """A sandbox provider that sells (and answers for) one cloud only."""

    def __init__(self, store: Store, cloud: str) -> None:
        self.name = cloud
        offers = tuple(o for o in SimProvider(store).offers(NOW) if o.provider == cloud)
        self._inner = SimProvider(store, offers=offers, seed=hash(cloud) % 1000)
        self.capabilities = self._inner.capabilities
        self.terminated: list[str] = []

    def offers(self, now):  # noqa: ANN001, ANN201
        return self._inner.offers(now)

    def nodes(self, now):  # noqa: ANN001, ANN201
        return tuple(n for n in self._inner.nodes(now) if n.offer.provider == self.name)

    def launch(self, request, now):  # noqa: ANN001, ANN201
        return self._inner.launch(request, now)

    def terminate(self, node_id, now):  # noqa: ANN001, ANN201
        if node_id not in {n.node_id for n in self.nodes(now)}:
            raise NodeNotFound(node_id)
        self.terminated.append(node_id)
        self._inner.terminate(node_id, now)

    def interruption_events(self, now):  # noqa: ANN001, ANN201
        return tuple(e for e in self._inner.interruption_events(now) if e.provider == self.name)

    def acknowledge(self, event_id):  # noqa: ANN001, ANN201
        self._inner.acknowledge(event_id)


def test_offers_of_all_clouds_and_calls_routed_to_the_right_one(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    aws, gcp = Named(store, "aws"), Named(store, "gcp")
    multi = MultiCloud([aws, gcp])
    assert multi.name == "aws+gcp"
    assert {o.provider for o in multi.offers(NOW)} == {"aws", "gcp"}
    g = next(o for o in multi.offers(NOW) if o.provider == "gcp" and o.market is Market.SPOT)
    [node] = multi.launch(LaunchRequest(g, 1, "k"), NOW).nodes
    fresh = MultiCloud([aws, gcp])  # a new process: finds the owner by asking each cloud
    fresh.terminate(node.node_id, NOW)
    assert gcp.terminated == [node.node_id] and aws.terminated == []
    with pytest.raises(NodeNotFound):
        fresh.terminate("nobody-has-this", NOW)
    azure_offer = next(o for o in SimProvider(store).offers(NOW) if o.provider == "azure")
    with pytest.raises(UnknownInstanceType):
        multi.launch(LaunchRequest(azure_offer, 1, "a"), NOW)
    with pytest.raises(ValueError):
        MultiCloud([aws, Named(store, "aws")])
    store.close()
