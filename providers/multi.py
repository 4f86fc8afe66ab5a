"""Several clouds behind one Provider: one policy, one queue, three markets.

``MultiCloud`` sells the offers of every cloud it holds and routes each call
to the cloud it concerns: a launch by its offer's provider, a termination by
the cloud that listed (or launched) the node, else by the shape of its id, an acknowledgement by the cloud
that sent the notice. The planner sees one market and picks across clouds by
risk-adjusted cost; nothing above this class knows there is more than one.

A failing cloud fails the call (its nodes must not look gone because its API
was down for a moment); retries live in the per-cloud ``ThrottleRetry``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from fleetctl.model import InterruptionEvent, Node, Offer
from providers.base import Capabilities, LaunchRequest, LaunchResult, NodeNotFound, Provider, UnknownInstanceType


class MultiCloud:
    def __init__(self, clouds: Sequence[Provider]) -> None:
        if not clouds:
            raise ValueError("MultiCloud needs at least one cloud")
        names = [c.name for c in clouds]
        if len(set(names)) != len(names):
            raise ValueError(f"each cloud once: {', '.join(names)}")
        self._clouds = {c.name: c for c in clouds}
        self.name = "+".join(names)
        patterns = [c.capabilities.node_id_pattern for c in clouds]
        self.capabilities = Capabilities(
            interruption_notice_seconds=min(c.capabilities.interruption_notice_seconds for c in clouds),
            rebalance_recommendations=any(c.capabilities.rebalance_recommendations for c in clouds),
            idempotent_launch=all(c.capabilities.idempotent_launch for c in clouds),
            central_notices=all(c.capabilities.central_notices for c in clouds),
            node_id_pattern="|".join(f"(?:{p})" for p in patterns) if all(patterns) else "",
        )
        self._patterns = {c.name: re.compile(c.capabilities.node_id_pattern) for c in clouds}
        self._node_cloud: dict[str, str] = {}
        self._event_cloud: dict[str, str] = {}

    def offers(self, now: datetime) -> tuple[Offer, ...]:
        return tuple(sorted((o for c in self._clouds.values() for o in c.offers(now)), key=lambda o: o.key))

    def nodes(self, now: datetime) -> tuple[Node, ...]:
        found = []
        for name, cloud in self._clouds.items():
            for node in cloud.nodes(now):
                self._node_cloud[node.node_id] = name
                found.append(node)
        return tuple(sorted(found, key=lambda n: n.node_id))

    def launch(self, request: LaunchRequest, now: datetime) -> LaunchResult:
        cloud = self._clouds.get(request.offer.provider)
        if cloud is None:
            raise UnknownInstanceType(f"{request.offer.key}: {request.offer.provider} is not one of "
                                      f"{', '.join(self._clouds)}")
        result = cloud.launch(request, now)
        for node in result.nodes:
            self._node_cloud[node.node_id] = cloud.name
        return result

    def terminate(self, node_id: str, now: datetime) -> None:
        """At the cloud that listed or launched the node; one not seen since this
        process started (a new ``apply`` or tick, the listing lagging a launch)
        at the cloud whose ids have its shape (``Capabilities.node_id_pattern``),
        which answers for it alone: gone is success, not its own is
        ``NodeNotFound``. Design choice: no other cloud is asked to delete an id
        it does not own (each adapter's idea of a foreign id was the only guard,
        and one cloud down failed the termination of another's node). An id of
        no cloud's shape is ``NodeNotFound`` without a call; a cloud that states
        no shape is asked in turn after those whose shape the id has."""
        owner = self._node_cloud.get(node_id)
        if owner is not None:
            self._clouds[owner].terminate(node_id, now)
            return
        candidates = ([name for name, p in self._patterns.items() if p.pattern and p.fullmatch(node_id)]
                      + [name for name, p in self._patterns.items() if not p.pattern])
        if len(candidates) == 1:
            self._clouds[candidates[0]].terminate(node_id, now)
            return
        if not candidates:
            names = list(self._clouds)
            clouds = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
            shapes = "; ".join(f"{name}: {p.pattern}" for name, p in self._patterns.items())
            raise NodeNotFound(f"{node_id}: not a node id of {clouds} ({shapes})")
        for name in candidates:
            try:
                self._clouds[name].terminate(node_id, now)
            except NodeNotFound:
                continue
            return
        raise NodeNotFound(f"{node_id}: none of {', '.join(candidates)} knows it")

    def interruption_events(self, now: datetime) -> tuple[InterruptionEvent, ...]:
        events = []
        for name, cloud in self._clouds.items():
            for event in cloud.interruption_events(now):
                self._event_cloud[event.event_id] = name
                events.append(event)
        return tuple(sorted(events, key=lambda e: (e.received_at_utc, e.event_id)))

    def acknowledge(self, event_id: str) -> None:
        """Acknowledge at the cloud that sent the notice; its route is forgotten
        only once the cloud took the acknowledgement, so a retry after a
        failure (throttled) reaches the cloud again instead of nothing."""
        owner = self._event_cloud.get(event_id)
        if owner is not None:
            self._clouds[owner].acknowledge(event_id)
            del self._event_cloud[event_id]
