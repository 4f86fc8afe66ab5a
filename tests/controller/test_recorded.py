"""The merge of a cloud's node listing with what the controller recorded."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from fleetctl.controller.recorded import RecordedNodes, merge
from fleetctl.model import NodeState
from fleetctl.store import Store
from providers.base import UNKNOWN_LAUNCH_TIME, Capabilities, LaunchRequest, LaunchResult
from tests.builders import T0, node, offer

OFFER = offer("a8", price=8.0, zone="z1")


def test_a_cordon_survives_a_fresh_listing_and_the_cloud_owns_the_end() -> None:
    cloud = node("n", OFFER, NodeState.READY)
    drained = replace(cloud, state=NodeState.DRAINING)
    assert merge(cloud, drained, T0).state is NodeState.DRAINING
    assert merge(replace(cloud, state=NodeState.TERMINATING), drained, T0).state is NodeState.TERMINATING
    assert merge(replace(cloud, state=NodeState.GONE), drained, T0).state is NodeState.GONE
    assert merge(cloud, replace(cloud, state=NodeState.TERMINATING), T0).state is NodeState.TERMINATING


def test_idle_since_is_the_controllers_and_starts_when_a_node_becomes_ready() -> None:
    launching = replace(node("n", OFFER, NodeState.LAUNCHING), ready_at_utc=None)
    ready = replace(launching, state=NodeState.READY, ready_at_utc=T0)
    assert merge(ready, launching, T0 + timedelta(minutes=1)).idle_since_utc == T0
    busy_since = replace(ready, idle_since_utc=T0 - timedelta(hours=3))
    assert merge(ready, busy_since, T0).idle_since_utc == T0 - timedelta(hours=3)


def test_a_launch_time_the_cloud_does_not_give_is_the_recorded_one() -> None:
    """A listing without a readable creation time (UNKNOWN_LAUNCH_TIME) does not replace the time the
    controller recorded when it launched the node."""
    recorded = node("n", OFFER, NodeState.LAUNCHING)
    unknown = replace(recorded, state=NodeState.READY, launched_at_utc=UNKNOWN_LAUNCH_TIME, ready_at_utc=None)
    merged = merge(unknown, recorded, T0 + timedelta(minutes=5))
    assert merged.launched_at_utc == recorded.launched_at_utc and merged.state is NodeState.READY
    assert merge(unknown, None, T0).launched_at_utc == UNKNOWN_LAUNCH_TIME  # nothing better known


class Cloud:
    name = "aws"
    capabilities = Capabilities(interruption_notice_seconds=120, rebalance_recommendations=True)

    def __init__(self) -> None:
        self.listed: list = []

    def offers(self, now):  # noqa: ANN001, ANN201
        return (OFFER,)

    def nodes(self, now):  # noqa: ANN001, ANN201
        return tuple(self.listed)

    def launch(self, request, now):  # noqa: ANN001, ANN201
        n = replace(node("i-1", request.offer, NodeState.LAUNCHING), launched_at_utc=now, ready_at_utc=None)
        return LaunchResult(request, (n,))

    def terminate(self, node_id, now): ...  # noqa: ANN001, ANN201

    def interruption_events(self, now):  # noqa: ANN001, ANN201
        return ()

    def acknowledge(self, event_id): ...  # noqa: ANN001, ANN201


def test_launched_nodes_are_recorded_and_vanish_only_after_the_listing_grace(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    cloud = Cloud()
    wrapped = RecordedNodes(cloud, store, listing_grace=timedelta(minutes=5))
    [launched] = wrapped.launch(LaunchRequest(OFFER, 1, "k"), T0).nodes
    assert [n.node_id for n in store.nodes()] == ["i-1"]
    assert [n.node_id for n in wrapped.nodes(T0 + timedelta(minutes=1))] == ["i-1"]  # not listed yet: kept
    assert wrapped.nodes(T0 + timedelta(minutes=6)) == ()  # still not listed: gone
    assert [n.state for n in store.nodes(include_gone=True)] == [NodeState.GONE]
    store.close()


def test_recent_reclaims_name_the_offer_of_each_reclaimed_node_gone_or_not(tmp_path):
    """A reclaim names the offer of its node, also once the node is gone; a
    rebalance hint, a notice for a node the store never held, and one received
    after ``now`` are left out. Only the reclaimed nodes are read."""
    from fleetctl.controller.forecast import recent_reclaims
    from fleetctl.model import InterruptionEvent, InterruptionKind, OfferReclaim

    a, b = offer("g8", zone="z1"), offer("g8", zone="z2")
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        store.put_node(node("n-a", a, state=NodeState.GONE), T0)
        store.put_node(node("n-b", b), T0)
        for i in range(50):  # nodes nobody reclaimed
            store.put_node(node(f"other-{i}", b, state=NodeState.GONE), T0)

        def notice(event_id, node_id, minutes, kind=InterruptionKind.RECLAIM_WARNING):
            store.add_interruption(InterruptionEvent(event_id=event_id, provider="aws", node_id=node_id, kind=kind,
                                                     received_at_utc=T0 + timedelta(minutes=minutes)))

        notice("e1", "n-a", 1)
        notice("e2", "n-b", 2)
        notice("e3", "n-b", 3, InterruptionKind.REBALANCE)
        notice("e4", "never-stored", 4)
        notice("e5", "n-a", 30)
        read = []
        nodes = store.nodes
        store.nodes = lambda **kw: read.append(kw) or nodes(**kw)  # type: ignore[method-assign]
        assert recent_reclaims(store, T0 + timedelta(minutes=10)) == (
            OfferReclaim(a.key, T0 + timedelta(minutes=1)), OfferReclaim(b.key, T0 + timedelta(minutes=2)))
        assert [set(kw["node_ids"]) for kw in read] == [{"n-a", "n-b", "never-stored"}]
        assert len(recent_reclaims(store)) == 3
        # within the policy's TTL only: the notices received in the 8.5 minutes before now (the planner uses no older)
        assert recent_reclaims(store, T0 + timedelta(minutes=10), within=timedelta(minutes=8.5)) == (
            OfferReclaim(b.key, T0 + timedelta(minutes=2)),)
        assert recent_reclaims(store, T0 + timedelta(minutes=10), within=timedelta(minutes=9)) == (
            OfferReclaim(a.key, T0 + timedelta(minutes=1)), OfferReclaim(b.key, T0 + timedelta(minutes=2)))
    finally:
        store.close()


def test_a_launch_answer_without_a_creation_time_is_recorded_as_launched_now(tmp_path: Path) -> None:
    """The listing grace runs from the recorded launch time: an unknown one (long ago) would
    take a node just bought, not listed yet, for gone at the next pass."""
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    cloud = Cloud()
    cloud.launch = lambda request, now: LaunchResult(request, (replace(  # type: ignore[method-assign]
        node("i-1", request.offer, NodeState.LAUNCHING), launched_at_utc=UNKNOWN_LAUNCH_TIME, ready_at_utc=None),))
    wrapped = RecordedNodes(cloud, store, listing_grace=timedelta(minutes=5))
    [launched] = wrapped.launch(LaunchRequest(OFFER, 1, "k"), T0).nodes
    assert launched.launched_at_utc == T0 and [n.launched_at_utc for n in store.nodes()] == [T0]
    assert [n.node_id for n in wrapped.nodes(T0 + timedelta(minutes=1))] == ["i-1"]  # not listed yet: kept
    cloud.listed = [replace(launched, state=NodeState.READY, launched_at_utc=UNKNOWN_LAUNCH_TIME)]
    assert [n.launched_at_utc for n in wrapped.nodes(T0 + timedelta(minutes=2))] == [T0]
    store.close()


class Died(BaseException):
    """The controller process died (not an Exception: no handler carries on after it)."""


def test_the_nodes_of_one_launch_are_recorded_under_its_key_all_or_none(tmp_path: Path) -> None:
    """A controller that died between recording the first and the second node
    of a launch of two left one under the launch's key and the other (found by
    the next listing) without it, so the launch was taken for a partial one."""
    import sqlalchemy as sa

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    cloud = Cloud()
    cloud.launch = lambda request, now: LaunchResult(request, tuple(  # type: ignore[method-assign]
        replace(node(f"i-{i}", request.offer, NodeState.LAUNCHING), launched_at_utc=now, ready_at_utc=None)
        for i in (1, 2)))
    inserts: list[str] = []

    def die_at_the_second_insert(_conn, _cursor, statement, *_):  # noqa: ANN001, ANN202
        if statement.lstrip().upper().startswith("INSERT INTO NODES"):
            inserts.append(statement)
            if len(inserts) == 2:
                raise Died(statement)

    sa.event.listen(store._engine, "before_cursor_execute", die_at_the_second_insert)  # noqa: SLF001
    try:
        with pytest.raises(Died):
            RecordedNodes(cloud, store).launch(LaunchRequest(OFFER, 2, "k"), T0)
    finally:
        sa.event.remove(store._engine, "before_cursor_execute", die_at_the_second_insert)  # noqa: SLF001
    assert store.nodes_by_idempotency_key("k") == () and store.nodes() == ()
    store.close()
