"""The market-driven provider: spot launches refused beyond the market's
capacity, the nodes above a dropped capacity reclaimed newest first with
their cloud's notice, the insufficient-capacity cache, and the price of a
node at a time. Small explicit markets; every expected value by hand."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import InterruptionKind, Market as OfferMarket, NodeState
from fleetctl.sim.market import Market, MarketTrace
from fleetctl.sim.provider import MarketProvider
from fleetctl.store import Store
from providers.base import InsufficientCapacity, LaunchRequest, UnknownInstanceType
from tests.builders import T0, node, offer

GAP = 60.0
S = timedelta(seconds=1)


def trace(provider: str, zone: str, capacity: tuple[int, ...], prices: tuple[float, ...] | None = None) -> MarketTrace:
    spot = offer("g1", gpus=1, price=1.0 if prices is None else prices[0], zone=zone, provider=provider)
    return MarketTrace(spot, replace(spot, market=OfferMarket.ON_DEMAND, usd_per_hour=3.0), T0, GAP, capacity, prices)


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store("sqlite:///:memory:")
    yield s
    s.close()


def spot_of(m: Market, i: int = 0):  # noqa: ANN201
    return m.traces[i].offer_spot


def test_a_spot_launch_is_refused_beyond_the_capacity_not_under_notice(store: Store) -> None:
    m = Market((trace("aws", "z1", (0, 2, 1, 2, 2)),), T0)
    p = MarketProvider(store, m, launch_delay_seconds=0)
    spot = spot_of(m)
    with pytest.raises(InsufficientCapacity, match=r"no spot capacity for 1 more x aws/r1/z1/g1/spot at "
                                                   r"2026-11-02T09:00:00\+00:00: 0 running, capacity 0"):
        p.launch(LaunchRequest(spot, 1, "none"), T0)
    at = T0 + 60 * S
    first = p.launch(LaunchRequest(spot, 2, "two"), at).nodes  # exactly the capacity
    with pytest.raises(InsufficientCapacity, match="2 running, capacity 2"):
        p.launch(LaunchRequest(spot, 1, "three"), at)
    # A retried request gets its nodes back, capacity or not.
    assert sorted(n.node_id for n in p.launch(LaunchRequest(spot, 2, "two"), at + 70 * S).nodes) == \
        sorted(n.node_id for n in first)
    assert len(p.launch(LaunchRequest(m.traces[0].offer_on_demand, 3, "od"), T0).nodes) == 3  # no capacity limit
    # a spot offer the market has no trace for (a plan made against another market) is not sold, and says why
    with pytest.raises(InsufficientCapacity, match=r"no spot capacity for 1 more x aws/r1/z9/g1/spot at .*: the "
                                                   r"simulated market has no trace for this offer"):
        p.launch(LaunchRequest(offer("g1", gpus=1, price=0.25, zone="z9"), 1, "elsewhere"), at)

    # 2 -> 1 at 120 s: the newer of the two (by node id: same launch time) is noticed; it leaves at 240 s.
    (notice,) = p.enforce_capacity(T0 + 120 * S)
    assert notice.node_id == max(n.node_id for n in first)
    assert notice.deadline_utc == T0 + 240 * S
    # 1 -> 2 at 180 s: the noticed node, still listed until its deadline, holds no capacity.
    later = T0 + 180 * S
    assert {n.node_id for n in p.nodes(later) if n.state is not NodeState.GONE} >= {n.node_id for n in first}
    assert [n.node_id for n in p.running_spot_nodes(spot.key, later)] == [min(n.node_id for n in first)]
    store.mark_interruption_handled(notice.event_id, later)  # handled by the controller: still leaving
    (again,) = p.launch(LaunchRequest(spot, 1, "again"), later).nodes
    with pytest.raises(InsufficientCapacity, match="2 running, capacity 2"):
        p.launch(LaunchRequest(spot, 1, "over"), later)
    p.terminate(again.node_id, later)  # a node let go gives its capacity back at once
    assert [n.node_id for n in p.running_spot_nodes(spot.key, later)] == [min(n.node_id for n in first)]
    assert len(p.launch(LaunchRequest(spot, 1, "over"), later).nodes) == 1


def test_a_launch_of_no_nodes_is_a_value_error_whatever_the_capacity(store: Store) -> None:
    m = Market((trace("aws", "z1", (2, 1)),), T0)
    p = MarketProvider(store, m, launch_delay_seconds=0)
    p.launch(LaunchRequest(spot_of(m), 2, "two"), T0)
    at = T0 + 60 * S  # capacity 1, two running: the market change not enforced yet
    with pytest.raises(ValueError, match="at least one node"):
        p.launch(LaunchRequest(spot_of(m), 0, "none"), at)
    elsewhere = replace(m.traces[0].offer_on_demand, zone="z9")  # an offer the market does not have
    with pytest.raises(UnknownInstanceType, match="the sandbox does not sell aws/r1/z9/g1/on_demand"):
        p.launch(LaunchRequest(elsewhere, 1, "elsewhere"), at)


def test_a_rebalance_hint_keeps_the_capacity_and_a_notice_counts_from_its_receipt(store: Store) -> None:
    m = Market((trace("aws", "z1", (2,) * 10),), T0)
    p = MarketProvider(store, m, launch_delay_seconds=0)
    spot = spot_of(m)
    a, b = p.launch(LaunchRequest(spot, 2, "two"), T0).nodes
    assert p.reclaim(a.node_id, T0 + 10 * S, kind=InterruptionKind.REBALANCE).deadline_utc is None  # a hint
    assert p.noticed_node_ids(T0 + 10 * S) == frozenset()
    assert len(p.running_spot_nodes(spot.key, T0 + 10 * S)) == 2
    with pytest.raises(InsufficientCapacity):
        p.launch(LaunchRequest(spot, 1, "more"), T0 + 10 * S)
    p.reclaim(b.node_id, T0 + 30 * S)
    assert p.noticed_node_ids(T0 + 29 * S) == frozenset()  # not received yet
    assert p.noticed_node_ids(T0 + 30 * S) == {b.node_id}
    assert [n.node_id for n in p.running_spot_nodes(spot.key, T0 + 30 * S)] == [a.node_id]


def test_enforce_capacity_reclaims_the_newest_nodes_above_it_with_each_clouds_notice(store: Store) -> None:
    """AWS gives 120 s, GCP and Azure 30 s; notices come by offer key; within
    an offer newest first (launch time, then node id); nodes within capacity,
    below it, on-demand nodes and other offers' nodes are left alone."""
    m = Market((trace("gcp", "z2", (2, 2, 0)), trace("aws", "z1", (3, 3, 1)), trace("azure", "z3", (1, 1, 0)),
                trace("aws", "z4", (3, 3, 3))), T0)
    p = MarketProvider(store, m, launch_delay_seconds=0)
    gcp, aws, azure, steady = (spot_of(m, i) for i in range(4))
    old = p.launch(LaunchRequest(aws, 2, "aws-old"), T0).nodes
    (new,) = p.launch(LaunchRequest(aws, 1, "aws-new"), T0 + 5 * S).nodes
    g = p.launch(LaunchRequest(gcp, 2, "gcp"), T0).nodes
    (z,) = p.launch(LaunchRequest(azure, 1, "azure"), T0).nodes
    p.launch(LaunchRequest(steady, 2, "steady"), T0)  # below its capacity: none reclaimed
    p.launch(LaunchRequest(m.traces[1].offer_on_demand, 2, "od"), T0)
    assert p.enforce_capacity(T0 + 60 * S) == ()  # nothing above capacity

    at = T0 + 120 * S
    events = p.enforce_capacity(at)
    kept_old = min(old, key=lambda n: n.node_id)
    assert [e.node_id for e in events] == [
        new.node_id, max(old, key=lambda n: n.node_id).node_id,  # aws/r1/z1: 3 -> 1
        z.node_id,  # azure/r1/z3
        *sorted((n.node_id for n in g), reverse=True),  # gcp/r1/z2
    ]
    assert [(e.provider, e.kind, e.received_at_utc, e.deadline_utc - at) for e in events] == [
        ("aws", InterruptionKind.RECLAIM_WARNING, at, 120 * S)] * 2 + [
        ("azure", InterruptionKind.RECLAIM_WARNING, at, 30 * S)] + [
        ("gcp", InterruptionKind.RECLAIM_WARNING, at, 30 * S)] * 2
    assert [n.node_id for n in p.running_spot_nodes(aws.key, at)] == [kept_old.node_id]
    assert p.enforce_capacity(at) == ()  # noticed nodes no longer count
    gone = at + 30 * S
    assert {n.node_id for n in p.nodes(gone) if n.state is NodeState.GONE} == {z.node_id, *(n.node_id for n in g)}


def test_the_insufficient_capacity_cache_leaves_a_spot_offer_out_for_its_ttl(store: Store) -> None:
    m = Market((trace("aws", "z1", (1,) * 10),), T0)
    spot, od = m.traces[0].offer_spot, m.traces[0].offer_on_demand
    p = MarketProvider(store, m, ice_ttl_seconds=180)
    assert p.offers(T0) == (od, spot)
    p.mark_unavailable(spot.key, T0)
    p.mark_unavailable(od.key, T0)  # on-demand is always offered
    assert p.offers(T0) == p.offers(T0 + 180 * S - timedelta(microseconds=1)) == (od,)
    assert p.offers(T0 + 180 * S) == (od, spot)

    zero = MarketProvider(store, m, ice_ttl_seconds=0)
    zero.mark_unavailable(spot.key, T0)
    assert zero.offers(T0) == (od,)  # left out for the rest of the instant
    assert zero.offers(T0 + timedelta(microseconds=1)) == (od, spot)
    with pytest.raises(ValueError, match="ice_ttl_seconds must be >= 0"):
        MarketProvider(store, m, ice_ttl_seconds=-1)


def test_a_node_costs_the_spot_price_of_the_moment_or_its_offers_price() -> None:
    m = Market((trace("aws", "z1", (1, 1, 1), prices=(0.5, 0.75, 1.25)),), T0)
    store = Store("sqlite:///:memory:")
    try:
        p = MarketProvider(store, m)
        spot, od = m.traces[0].offer_spot, m.traces[0].offer_on_demand
        assert [p.usd_per_hour_at(node(of=spot), T0 + s * S) for s in (0, 59, 60, 120, 1000)] == \
            [0.5, 0.5, 0.75, 1.25, 1.25]
        assert p.usd_per_hour_at(node(of=od), T0 + 60 * S) == 3.0
        elsewhere = offer("g1", gpus=1, price=0.25, zone="z9")  # a spot offer of no trace
        assert p.usd_per_hour_at(node(of=elsewhere), T0 + 60 * S) == 0.25
    finally:
        store.close()


def test_the_kth_node_launched_at_an_instant_draws_the_kth_delay_of_that_instant(store: Store) -> None:
    """The draw is sha256("SEED:launch-delay:INSTANT:K"), K counting from 0 at each new instant, whatever
    was launched at an earlier one."""
    import hashlib

    from providers.sim import delay_spread

    def expected_ready(at, k):  # noqa: ANN001, ANN202
        draw = delay_spread(hashlib.sha256(f"7:launch-delay:{at.isoformat()}:{k}".encode()).hexdigest())
        return at + timedelta(seconds=60 * draw)

    m = Market((trace("aws", "z1", (4,) * 10),), T0)
    p = MarketProvider(store, m, seed=7, launch_delay_seconds=60)
    od = m.traces[0].offer_on_demand
    t1 = T0 + 5 * S
    launched = [p.launch(LaunchRequest(od, 2, "a"), T0), p.launch(LaunchRequest(spot_of(m), 1, "b"), T0),
                p.launch(LaunchRequest(od, 2, "c"), t1)]
    ready = [sorted(n.ready_at_utc for n in result.nodes) for result in launched]
    assert ready == [sorted([expected_ready(T0, 0), expected_ready(T0, 1)]), [expected_ready(T0, 2)],
                     sorted([expected_ready(t1, 0), expected_ready(t1, 1)])]


def test_delay_spread_is_half_to_one_and_a_half_from_hex_digits_10_to_13() -> None:
    from providers.sim import delay_spread

    assert delay_spread("f" * 10 + "0000" + "f" * 50) == 0.5
    assert delay_spread("0" * 10 + "ffff" + "0" * 50) == 1.5
    assert delay_spread("0" * 10 + "8000" + "f" * 50) == 0.5 + 0x8000 / 0xFFFF
    assert delay_spread("0" * 10 + "0001" + "0" * 50) == 0.5 + 1 / 65535


def test_a_reclaim_notice_of_a_node_let_go_and_of_a_cloud_without_a_known_lead(store: Store) -> None:
    """The sandbox knows a node it let go (a late notice is still recorded); a cloud it has no notice
    time for gets 30 s."""
    m = Market((trace("aws", "z1", (2,) * 10), trace("oci", "z2", (1,) * 10)), T0)
    p = MarketProvider(store, m, launch_delay_seconds=0)
    (gone,) = p.launch(LaunchRequest(spot_of(m), 1, "a"), T0).nodes
    p.terminate(gone.node_id, T0 + 10 * S)
    assert p.reclaim(gone.node_id, T0 + 20 * S).deadline_utc == T0 + 140 * S
    (other,) = p.launch(LaunchRequest(spot_of(m, 1), 1, "b"), T0).nodes
    event = p.reclaim(other.node_id, T0 + 20 * S)
    assert (event.provider, event.deadline_utc) == ("oci", T0 + 50 * S)
