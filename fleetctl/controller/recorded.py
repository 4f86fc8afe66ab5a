"""A cloud's nodes, seen through what the controller recorded about them.

A cloud knows whether an instance exists and runs; only the controller knows
what it decided about it: that a node is cordoned (``DRAINING``) after a
reclaim notice, and since when it has held no job (``idle_since_utc``, which
the idle timeout reads). :class:`RecordedNodes` wraps a cloud adapter so that
every ``nodes()`` answer carries both, and so the store holds every node the
controller knows (the interruption handler, the forecaster's reclaim history
and ``fleetctl status`` read nodes from the store).

Merge rule, per node (the cloud owns existence and lifecycle, the store owns
decisions):

* the cloud says TERMINATING or GONE: that is the state;
* the store says DRAINING or TERMINATING and the cloud LAUNCHING or READY:
  the store's state (a cordon is never lifted by a fresh listing, and a node
  being terminated is not offered work while the listing lags);
* ``launched_at_utc`` is the cloud's, unless the cloud does not give a
  readable one (``UNKNOWN_LAUNCH_TIME``): then the store's;
* ``idle_since_utc`` comes from the store; a node seen READY for the first
  time is idle since it became ready (as in the sandbox);
* a recorded node the cloud no longer lists is GONE, unless it was launched
  within ``listing_grace`` (listings are eventually consistent: an instance
  just bought may not be listed yet).

The sandbox provider keeps its nodes in the store already and is not wrapped.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from fleetctl.model import InterruptionEvent, Node, NodeState, Offer
from fleetctl.store import Store
from providers.base import UNKNOWN_LAUNCH_TIME, LaunchRequest, LaunchResult, Provider


def merge(cloud: Node, recorded: Node | None, now: datetime) -> Node:
    """One node as the controller sees it (see the module docstring)."""
    if recorded is None:
        idle = cloud.ready_at_utc or now if cloud.state is NodeState.READY else None
        return replace(cloud, idle_since_utc=idle)
    state = cloud.state
    if recorded.state in (NodeState.DRAINING, NodeState.TERMINATING) and cloud.state in (NodeState.LAUNCHING,
                                                                                          NodeState.READY):
        state = recorded.state
    idle = recorded.idle_since_utc
    if idle is None and cloud.state is NodeState.READY and recorded.state is NodeState.LAUNCHING:
        idle = cloud.ready_at_utc or now
    launched = recorded.launched_at_utc if cloud.launched_at_utc == UNKNOWN_LAUNCH_TIME else cloud.launched_at_utc
    return replace(cloud, state=state, idle_since_utc=idle, launched_at_utc=launched,
                   ready_at_utc=cloud.ready_at_utc or recorded.ready_at_utc)


class RecordedNodes:
    """Any cloud Provider, with its nodes merged with and written to the store."""

    def __init__(self, inner: Provider, store: Store, *, listing_grace: timedelta = timedelta(minutes=5)) -> None:
        self._inner = inner
        self._store = store
        self._grace = listing_grace
        self._clouds = frozenset(inner.name.split("+"))  # one cloud, or a MultiCloud's "aws+gcp+azure"
        self.name = inner.name
        self.capabilities = inner.capabilities

    def offers(self, now: datetime) -> tuple[Offer, ...]:
        return self._inner.offers(now)

    def nodes(self, now: datetime) -> tuple[Node, ...]:
        # The live recorded nodes, and the gone ones only where the cloud still lists them: the store keeps
        # every node ever bought, and reading them all made each pass slower with the store's age.
        listed = self._inner.nodes(now)
        live = self._store.nodes()
        known = {n.node_id for n in live}
        gone = self._store.nodes(include_gone=True, node_ids=[n.node_id for n in listed if n.node_id not in known])
        recorded = {n.node_id: n for n in (*live, *gone) if n.offer.provider in self._clouds}
        result: dict[str, Node] = {}
        for cloud in listed:
            node = merge(cloud, recorded.get(cloud.node_id), now)
            result[node.node_id] = node
        for node_id, rec in recorded.items():
            if node_id in result or rec.state is NodeState.GONE:
                continue
            if now - rec.launched_at_utc < self._grace:
                result[node_id] = rec  # just bought, not listed yet
            else:
                result[node_id] = replace(rec, state=NodeState.GONE)
        for node in result.values():
            if recorded.get(node.node_id) != node:
                self._store.put_node(node, now)
        return tuple(sorted((n for n in result.values() if n.state is not NodeState.GONE), key=lambda n: n.node_id))

    def launch(self, request: LaunchRequest, now: datetime) -> LaunchResult:
        result = self._inner.launch(request, now)
        # Just bought: a creation time the answer leaves out is now's, not unknown (the listing grace runs from it).
        nodes = tuple(replace(n, launched_at_utc=now) if n.launched_at_utc == UNKNOWN_LAUNCH_TIME else n
                      for n in result.nodes)
        # All recorded under the launch's key, or none: recorded apart, a controller that died between two of
        # them left some of the nodes bought together under the key and the others (found by the listing)
        # without it, so the launch was taken for a partial one (``settle_launches``).
        with self._store.transaction():
            for node in nodes:
                self._store.put_node(node, now, idempotency_key=request.idempotency_key)
        return replace(result, nodes=nodes)

    def terminate(self, node_id: str, now: datetime) -> None:
        self._inner.terminate(node_id, now)
        for node in self._store.nodes(node_ids=[node_id]):  # the one node, unless it is not recorded (or gone)
            if node.offer.provider in self._clouds:
                self._store.put_node(replace(node, state=NodeState.TERMINATING), now)

    def interruption_events(self, now: datetime) -> tuple[InterruptionEvent, ...]:
        return self._inner.interruption_events(now)

    def acknowledge(self, event_id: str) -> None:
        self._inner.acknowledge(event_id)
