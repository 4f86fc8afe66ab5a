"""A market-driven sandbox provider for the simulator.

:class:`MarketProvider` extends :class:`providers.sim.SimProvider` (nodes in
the store, deterministic node ids and launch delays, reclaim notices with each
cloud's lead time: AWS 120 s, GCP and Azure 30 s) with a spot market read from
a :class:`fleetctl.sim.market.Market`:

* ``offers(now)`` is ``market.offers_at(now)``: the spot offers with capacity
  at ``now`` (at their price then) and every on-demand twin, minus the spot
  offers in the *insufficient-capacity cache* (below).
* ``launch`` of a spot offer raises :class:`providers.base.InsufficientCapacity`
  when the offer's running spot nodes plus the nodes asked for exceed its
  capacity at ``now`` (all or nothing: the executor needs full fulfilment).
  On-demand is always available.
* ``enforce_capacity(now)`` (the simulator calls it at every market change)
  reclaims, with notice, the spot nodes above an offer's capacity: newest
  first (by launch time, then node id, descending), so the choice is
  deterministic.

"Running" spot nodes of an offer are its nodes that are not gone and not
already under a reclaim notice (a noticed node is leaving: the cloud already
took its capacity back).

**Insufficient-capacity cache.** Clouds do not publish spot capacity; a
controller learns it from failed launches. Like Karpenter's ICE cache, an
offer whose launch failed is left out of ``offers`` for ``ice_ttl_seconds``
(``mark_unavailable``), for callers that drive the provider directly; the
simulator relies on the controller's own memory of refused offers instead
(``fleetctl.controller.observe``), as a real cloud's controller must.

**Launch delays: common random numbers.** A node's launch-to-ready delay
(0.5x to 1.5x of the mean, uniform) is drawn from the seed, the instant of the
launch and the node's place among the nodes launched at that instant, not from
the launch request: the first node any policy launches at 23:31:39 waits as
long as the first node another policy launches then, whatever it buys. So a
backtest compares policies on the same draws, and a difference between them
(a deadline missed by a one-minute job with under a minute of slack) comes
from the policies, not from each drawing its own luck; before 2026-11-25 the
delay came from the request's idempotency key, which differs between
policies, and one-job differences in deadline misses were a coin toss.
Node ids still come from the request.

Contract: time is passed in; the same seed, market and calls give the same
nodes, notices and errors.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from fleetctl.model import InterruptionEvent, InterruptionKind, Market as OfferMarket, Node, NodeState, Offer
from fleetctl.sim.market import Market
from fleetctl.store import Store
from providers.base import InsufficientCapacity, LaunchRequest, LaunchResult
from providers.sim import DEFAULT_LAUNCH_DELAY_SECONDS, SimProvider, delay_spread


class MarketProvider(SimProvider):
    """SimProvider whose spot offers, capacity and reclaims follow ``market``."""

    def __init__(self, store: Store, market: Market, *, seed: int = 0,
                 launch_delay_seconds: float = DEFAULT_LAUNCH_DELAY_SECONDS, ice_ttl_seconds: float = 180.0) -> None:
        if ice_ttl_seconds < 0:
            raise ValueError("ice_ttl_seconds must be >= 0")
        offers = tuple(o for t in market.traces for o in (t.offer_spot, t.offer_on_demand))
        super().__init__(store, seed=seed, launch_delay_seconds=launch_delay_seconds, offers=offers)
        self.market = market
        self._ice_ttl = timedelta(seconds=ice_ttl_seconds)
        self._ice: dict[str, datetime] = {}  # offer key -> until when it is left out
        self._launch_instant: datetime | None = None  # the instant of the latest new node
        self._launched_at_instant = 0  # new nodes launched at that instant so far

    # ------------------------------------------------------------------ contract

    def offers(self, now: datetime) -> tuple[Offer, ...]:
        return tuple(o for o in self.market.offers_at(now)
                     if not (o.market is OfferMarket.SPOT and self._ice.get(o.key, now) > now))

    def launch(self, request: LaunchRequest, now: datetime) -> LaunchResult:
        if request.count >= 1 and not self._store.nodes_by_idempotency_key(request.idempotency_key) \
                and request.offer.market is OfferMarket.SPOT:
            trace = self.market.trace_for(request.offer.key)
            if trace is None:  # a plan made against another market (a plan file): not sold here at all
                raise InsufficientCapacity(
                    f"no spot capacity for {request.count} more x {request.offer.key} at {now.isoformat()}: the "
                    "simulated market has no trace for this offer (it sells only its manifest's offers and their "
                    "on-demand twins)")
            capacity = trace.capacity_at(now)
            running = len(self.running_spot_nodes(request.offer.key, now))
            if running + request.count > capacity:
                raise InsufficientCapacity(
                    f"no spot capacity for {request.count} more x {request.offer.key} at {now.isoformat()}: "
                    f"{running} running, capacity {capacity}")
        return super().launch(request, now)

    def _launch_delay_factor(self, node_digest: str, now: datetime) -> float:
        """Common random numbers (module docstring): the k-th new node of the
        instant ``now`` gets the same draw in every run with this seed."""
        if now != self._launch_instant:
            self._launch_instant, self._launched_at_instant = now, 0
        k = self._launched_at_instant
        self._launched_at_instant += 1
        return delay_spread(hashlib.sha256(f"{self._seed}:launch-delay:{now.isoformat()}:{k}".encode()).hexdigest())

    # ------------------------------------------------------------------ the market's side

    def mark_unavailable(self, offer_key: str, now: datetime) -> None:
        """Leave ``offer_key`` out of ``offers`` until ``now + ice_ttl_seconds``
        (at least to the end of the instant ``now``)."""
        self._ice[offer_key] = now + max(self._ice_ttl, timedelta(microseconds=1))

    def noticed_node_ids(self, now: datetime) -> frozenset[str]:
        """Nodes under a reclaim notice (not a rebalance hint) received by ``now``."""
        return frozenset(e.node_id for e in self._store.interruptions(unhandled_only=False)
                         if e.kind is not InterruptionKind.REBALANCE and e.received_at_utc <= now)

    def running_spot_nodes(self, offer_key: str, now: datetime) -> tuple[Node, ...]:
        """Spot nodes of ``offer_key`` that hold capacity: not gone, not under notice."""
        noticed = self.noticed_node_ids(now)
        return tuple(n for n in self.nodes(now)
                     if n.offer.key == offer_key and n.offer.market is OfferMarket.SPOT
                     and n.state is not NodeState.GONE and n.node_id not in noticed)

    def enforce_capacity(self, now: datetime) -> tuple[InterruptionEvent, ...]:
        """Reclaim (with notice) the spot nodes above each offer's capacity at
        ``now``, newest first. Returns the notices posted."""
        events: list[InterruptionEvent] = []
        for trace in sorted(self.market.traces, key=lambda t: t.offer_spot.key):
            held = self.running_spot_nodes(trace.offer_spot.key, now)
            excess = len(held) - trace.capacity_at(now)
            if excess <= 0:
                continue
            newest = sorted(held, key=lambda n: (n.launched_at_utc, n.node_id), reverse=True)[:excess]
            for node in newest:
                events.append(self.reclaim(node.node_id, now))
        return tuple(events)

    def usd_per_hour_at(self, node: Node, now: datetime) -> float:
        """What ``node`` costs per hour at ``now``: the spot price then (spot is
        billed at the current price), else its offer's price."""
        if node.offer.market is OfferMarket.SPOT:
            trace = self.market.trace_for(node.offer.key)
            if trace is not None:
                return trace.spot_price_at(now)
        return node.offer.usd_per_hour
