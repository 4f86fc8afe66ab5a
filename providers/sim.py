"""The sandbox provider: the embedded default, no cloud account needed.

It sells the offers of the shipped catalog snapshots (real AWS, GCP and Azure
prices), keeps its nodes in the state store, and makes launched nodes ready
after a delay, so a person trying fleetctl sees nodes go from ``launching`` to
``ready``. Everything is deterministic for a seed: node ids and launch delays
are derived from the seed and the launch's idempotency key, never from a clock
or a uuid; time is passed in.

Design choice: one sim provider stands in for all three clouds (the offers keep
their real ``provider``), because the sandbox is about trying the product,
not about one cloud's quirks; the per-cloud adapters have their own contract
tests.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import datetime, timedelta

from fleetctl.model import RECLAIM_NOTICE_SECONDS, InterruptionEvent, InterruptionKind, Node, NodeState, Offer
from fleetctl.store import Store
from providers.base import (
    Capabilities,
    InsufficientCapacity,
    LaunchRequest,
    LaunchResult,
    NodeNotFound,
    UnknownInstanceType,
)
from providers.catalog import load_catalog

DEFAULT_LAUNCH_DELAY_SECONDS = 30.0


#: How long the sandbox lists a node after it went GONE (EC2 lists a terminated instance for about an hour).
GONE_LISTED_SECONDS = 3600.0


class SimProvider:
    """Simulated multi-cloud provider backed by the state store.

    ``launch_delay_seconds`` is the mean time from launch to ready; each node's
    delay is spread between 0.5x and 1.5x of it, deterministically per node.
    ``offers`` defaults to the shipped catalog; tests pass their own.
    ``unavailable_offer_keys`` simulates offers without capacity (launches of
    them raise ``InsufficientCapacity``).
    """

    name = "sim"
    capabilities = Capabilities(interruption_notice_seconds=RECLAIM_NOTICE_SECONDS["aws"],
                                rebalance_recommendations=True)

    def __init__(
        self,
        store: Store,
        *,
        seed: int = 0,
        launch_delay_seconds: float = DEFAULT_LAUNCH_DELAY_SECONDS,
        offers: tuple[Offer, ...] | None = None,
        unavailable_offer_keys: frozenset[str] = frozenset(),
    ) -> None:
        if launch_delay_seconds < 0:
            raise ValueError("launch_delay_seconds must be >= 0")
        self._store = store
        self._seed = seed
        self._delay = launch_delay_seconds
        self._offers = tuple(sorted(offers if offers is not None else load_catalog(), key=lambda o: o.key))
        self._by_key = {o.key: o for o in self._offers}
        self._unavailable = unavailable_offer_keys

    # ------------------------------------------------------------------ contract

    def offers(self, now: datetime) -> tuple[Offer, ...]:
        return self._offers

    def nodes(self, now: datetime) -> tuple[Node, ...]:
        """Nodes of the sandbox: the live ones, and the gone ones for
        ``GONE_LISTED_SECONDS`` after they went (as EC2 lists a terminated
        instance for about an hour); passive transitions launching -> ready
        when due and reclaimed -> gone (recorded in the store, all of a call's
        in one transaction, unless it is opened read-only: then derived again
        on each call until a command that writes records it).

        Design choice: a node gone longer is not listed (the contract lets
        GONE nodes be omitted once forgotten, and every caller skips them):
        the store keeps every node ever bought, and listing them all made each
        tick of a long-running sandbox slower with its age. Only the live
        nodes' notices are read, for the same reason."""
        result = []
        changed = []
        live = self._store.nodes()
        # The cloud takes a reclaimed node at the notice's deadline, handled or not.
        taken = {
            e.node_id
            for e in self._store.interruptions(unhandled_only=False, node_ids=[n.node_id for n in live])
            if e.kind is not InterruptionKind.REBALANCE and (e.deadline_utc is None or e.deadline_utc <= now)
            and e.received_at_utc <= now
        }
        for node in live:  # none GONE
            if node.node_id in taken:
                node = replace(node, state=NodeState.GONE)
                changed.append(node)
            if node.state is NodeState.LAUNCHING and node.ready_at_utc is not None and node.ready_at_utc <= now:
                node = replace(node, state=NodeState.READY, idle_since_utc=node.idle_since_utc or node.ready_at_utc)
                changed.append(node)
            result.append(node)
        recently_gone = self._store.nodes_gone_since(now - timedelta(seconds=GONE_LISTED_SECONDS))
        result = sorted([*result, *recently_gone], key=lambda n: n.node_id)
        if changed and not getattr(self._store, "read_only", False):
            # One commit, not one per node: a big launch's nodes all become ready in the same pass. Each
            # write is derived again from the same facts if it does not land, so all-or-none loses nothing.
            with self._store.transaction():
                for node in changed:
                    self._store.put_node(node, now)
        return tuple(result)

    def launch(self, request: LaunchRequest, now: datetime) -> LaunchResult:
        if request.count < 1:
            raise ValueError("a launch asks for at least one node")
        already = self._store.nodes_by_idempotency_key(request.idempotency_key)
        if already:
            return LaunchResult(request, already)
        offer = self._by_key.get(request.offer.key)
        if offer is None:
            raise UnknownInstanceType(f"the sandbox does not sell {request.offer.key}")
        if offer.key in self._unavailable:
            raise InsufficientCapacity(f"no capacity for {offer.key}")
        nodes = []
        with self._store.transaction():  # a launch's nodes are bought together: all recorded, or none
            for index in range(request.count):
                digest = self._digest(request.idempotency_key, index)
                delay = self._delay * self._launch_delay_factor(digest, now)
                node = Node(
                    node_id=f"sim-{offer.provider}-{digest[:10]}",
                    offer=offer,
                    state=NodeState.LAUNCHING,
                    launched_at_utc=now,
                    ready_at_utc=now + timedelta(seconds=delay),
                    zone=offer.zone,
                )
                self._store.put_node(node, now, idempotency_key=request.idempotency_key)
                nodes.append(node)
        return LaunchResult(request, tuple(nodes))

    def terminate(self, node_id: str, now: datetime) -> None:
        node = next(iter(self._store.nodes(include_gone=True, node_ids=[node_id])), None)
        if node is None:
            raise NodeNotFound(node_id)
        if node.state is not NodeState.GONE:
            self._store.put_node(replace(node, state=NodeState.GONE), now)

    def interruption_events(self, now: datetime) -> tuple[InterruptionEvent, ...]:
        """Notices not yet handled (the sandbox's notices live in the store, so
        they survive between `reconcile --once` runs)."""
        return tuple(e for e in self._store.interruptions(unhandled_only=True) if e.received_at_utc <= now)

    def acknowledge(self, event_id: str) -> None:
        """Nothing to do: the controller marks the notice handled in the same store."""

    def notify(self, event: InterruptionEvent) -> None:
        """Deliver a notice (tests, the simulator)."""
        self._store.add_interruption(event)

    def reclaim(self, node_id: str, now: datetime, lead_seconds: float | None = None,
                kind: InterruptionKind = InterruptionKind.RECLAIM_WARNING) -> InterruptionEvent:
        """Announce that the cloud takes ``node_id`` back after ``lead_seconds``
        (default: the provider's notice: AWS 120 s, GCP and Azure 30 s)."""
        node = next(iter(self._store.nodes(include_gone=True, node_ids=[node_id])), None)
        if node is None:
            raise NodeNotFound(node_id)
        lead = RECLAIM_NOTICE_SECONDS.get(node.offer.provider, 30) if lead_seconds is None else lead_seconds
        event = InterruptionEvent(
            event_id=f"sim-{kind.value}-{node_id}-{now.isoformat()}",
            provider=node.offer.provider,
            node_id=node_id,
            kind=kind,
            received_at_utc=now,
            deadline_utc=None if kind is InterruptionKind.REBALANCE else now + timedelta(seconds=lead),
        )
        self.notify(event)
        return event

    # ------------------------------------------------------------------ helpers

    def _digest(self, key: str, index: int) -> str:
        return hashlib.sha256(f"{self._seed}:{key}:{index}".encode()).hexdigest()

    def _launch_delay_factor(self, node_digest: str, now: datetime) -> float:
        """A new node's launch delay over the mean, 0.5 to 1.5: drawn from the
        node's own digest (its launch request and place in it), so a retried
        request gets the same delay. The simulator's provider draws it another
        way (``fleetctl.sim.provider.MarketProvider``)."""
        return delay_spread(node_digest)


def delay_spread(digest: str) -> float:
    """0.5 to 1.5, from four hex digits of ``digest``."""
    return 0.5 + int(digest[10:14], 16) / 0xFFFF
