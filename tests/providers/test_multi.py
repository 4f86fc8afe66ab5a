"""MultiCloud routes each call to the cloud it concerns."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from fleetctl.model import Market
from fleetctl.store import Store
from providers.base import LaunchRequest, NodeNotFound, Throttled, UnknownInstanceType
from providers.multi import MultiCloud
from providers.retry import ThrottleRetry
from providers.sim import SimProvider

NOW = datetime(2025, 1, 6, 12, 0, tzinfo=timezone.utc)


class Named:
    """A sandbox provider that sells (and answers for) one cloud only."""

    def __init__(self, store: Store, cloud: str) -> None:
        self.name = cloud
        offers = tuple(o for o in SimProvider(store).offers(NOW) if o.provider == cloud)
        self._inner = SimProvider(store, offers=offers, seed=hash(cloud) % 1000)
        # The sandbox names a node sim-<cloud>-<hex>: the shape of this cloud's ids.
        self.capabilities = replace(self._inner.capabilities, node_id_pattern=rf"sim-{cloud}-[0-9a-f]+")
        self.terminated: list[str] = []
        self.asked: list[str] = []  # every terminate this cloud was asked for, whether it knew the node or not

    def offers(self, now):  # noqa: ANN001, ANN201
        return self._inner.offers(now)

    def nodes(self, now):  # noqa: ANN001, ANN201
        return tuple(n for n in self._inner.nodes(now) if n.offer.provider == self.name)

    def launch(self, request, now):  # noqa: ANN001, ANN201
        return self._inner.launch(request, now)

    def terminate(self, node_id, now):  # noqa: ANN001, ANN201
        self.asked.append(node_id)
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
    fresh = MultiCloud([aws, gcp])  # a new process: routes by the shape of the id, asks no other cloud
    fresh.terminate(node.node_id, NOW)
    assert gcp.terminated == gcp.asked == [node.node_id] and aws.asked == []
    fresh.terminate(node.node_id, NOW)  # already gone: success, from the cloud that owns the id
    assert aws.asked == []
    with pytest.raises(NodeNotFound, match=r"^nobody-has-this: not a node id of aws or gcp \(aws: "
                                           r"sim-aws-\[0-9a-f\]\+; gcp: sim-gcp-\[0-9a-f\]\+\)$"):
        fresh.terminate("nobody-has-this", NOW)
    assert aws.asked == [] and gcp.asked == [node.node_id] * 2  # no cloud was asked about it
    azure_offer = next(o for o in SimProvider(store).offers(NOW) if o.provider == "azure")
    with pytest.raises(UnknownInstanceType):
        multi.launch(LaunchRequest(azure_offer, 1, "a"), NOW)
    with pytest.raises(ValueError):
        MultiCloud([aws, Named(store, "aws")])
    store.close()


class ThrottledAcknowledgements(Named):
    """A cloud whose next ``throttled`` acknowledgements are throttled; records every one asked for."""

    def __init__(self, store: Store, cloud: str, throttled: int) -> None:
        super().__init__(store, cloud)
        self.throttled = throttled
        self.acknowledged: list[str] = []

    def acknowledge(self, event_id):  # noqa: ANN001, ANN201
        self.acknowledged.append(event_id)
        if self.throttled:
            self.throttled -= 1
            raise Throttled("DeleteMessage: Rate exceeded")
        super().acknowledge(event_id)


def _reclaimed(store: Store, cloud: Named) -> str:
    """An event id of ``cloud``: one of its nodes reclaimed."""
    spot = next(o for o in cloud.offers(NOW) if o.market is Market.SPOT)
    [node] = cloud.launch(LaunchRequest(spot, 1, f"k-{cloud.name}"), NOW).nodes
    return SimProvider(store).reclaim(node.node_id, NOW).event_id


def test_an_acknowledgement_that_failed_reaches_the_cloud_when_asked_again(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    aws, gcp = ThrottledAcknowledgements(store, "aws", throttled=1), Named(store, "gcp")
    multi = MultiCloud([aws, gcp])
    event_id = _reclaimed(store, aws)
    assert event_id in {e.event_id for e in multi.interruption_events(NOW)}
    with pytest.raises(Throttled):
        multi.acknowledge(event_id)
    multi.acknowledge(event_id)  # the caller's retry: not dropped
    assert aws.acknowledged == [event_id, event_id]
    store.close()


def test_throttle_retry_retries_an_acknowledgement(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    aws = ThrottledAcknowledgements(store, "aws", throttled=2)
    sleeps: list[float] = []
    multi = MultiCloud([ThrottleRetry(aws, attempts=3, sleep=sleeps.append), Named(store, "gcp")])
    event_id = _reclaimed(store, aws)
    multi.interruption_events(NOW)
    multi.acknowledge(event_id)
    assert aws.acknowledged == [event_id] * 3 and len(sleeps) == 2
    store.close()


def test_a_cloud_that_does_not_say_its_id_shape_is_asked_in_turn(tmp_path: Path) -> None:
    """A provider without a node_id_pattern may own any id: asked after the cloud whose shape the id
    has, and in turn with the others that state none."""
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    aws, gcp = Named(store, "aws"), Named(store, "gcp")
    aws.capabilities = replace(aws.capabilities, node_id_pattern="")
    g = next(o for o in gcp.offers(NOW) if o.market is Market.SPOT)
    [node, other] = MultiCloud([aws, gcp]).launch(LaunchRequest(g, 2, "k"), NOW).nodes
    fresh = MultiCloud([aws, gcp])
    assert fresh.capabilities.node_id_pattern == ""  # nothing to say about the ids of the whole
    fresh.terminate(node.node_id, NOW)
    assert gcp.terminated == [node.node_id] and aws.asked == []  # the shape's cloud first: it knew the node
    with pytest.raises(NodeNotFound):
        fresh.terminate("i-0123456789abcdef0", NOW)  # of no stated shape: only the cloud that states none
    assert aws.asked == ["i-0123456789abcdef0"] and gcp.asked == [node.node_id]
    gcp.capabilities = replace(gcp.capabilities, node_id_pattern="")
    unshaped = MultiCloud([aws, gcp])
    unshaped.terminate(other.node_id, NOW)
    assert aws.asked[-1] == other.node_id and gcp.terminated == [node.node_id, other.node_id]
    with pytest.raises(NodeNotFound, match="none of aws, gcp knows it"):
        unshaped.terminate("nobody-has-this", NOW)
    store.close()


def test_the_clouds_node_ids_have_shapes_that_do_not_overlap() -> None:
    """What MultiCloud routes a terminate by when the node was not listed in this process."""
    import re

    from providers.aws import AwsProvider
    from providers.azure import AzureProvider, vm_name
    from providers.gcp import GcpProvider

    ids = {"aws": "i-0123456789abcdef0", "gcp": "us-central1-a/fl-research-0a1b2c3d-0123456789abcdef-000",
           "azure": vm_name("ml-platform", "launch-key", 3)}
    patterns = {p.name: p.capabilities.node_id_pattern for p in (AwsProvider, GcpProvider, AzureProvider)}
    for cloud, pattern in patterns.items():
        assert {c for c, node_id in ids.items() if re.fullmatch(pattern, node_id)} == {cloud}, (cloud, pattern)
    multi = MultiCloud([AwsProvider.__new__(AwsProvider), GcpProvider.__new__(GcpProvider)])
    assert re.fullmatch(multi.capabilities.node_id_pattern, ids["gcp"])
    assert not re.fullmatch(multi.capabilities.node_id_pattern, ids["azure"])
