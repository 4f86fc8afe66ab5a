"""The one narrow Provider protocol every cloud adapter implements.

Assumptions callers may rely on (in the spirit of Ray's autoscaler v2):

* **Eventually consistent.** ``nodes()`` may lag a ``launch()`` or
  ``terminate()`` by a while; callers reconcile against the store, not against
  one answer.
* **Idempotent.** ``launch()`` with an idempotency key already used returns the
  nodes of the first call instead of buying twice (AWS ClientToken, GCP
  requestId, Azure operation ids). ``terminate()`` of a node that is already
  gone succeeds.
* **Time passed in.** Every call takes ``now``; no adapter reads a clock to
  decide anything the caller could not reproduce.

Errors are typed (``InsufficientCapacity``, ``QuotaExceeded``, ``Throttled``,
``NodeNotFound``, ``UnknownInstanceType``); each adapter translates its
cloud's codes into these, and retries live in wrappers, not in adapters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final, Protocol, runtime_checkable

from fleetctl.model import InterruptionEvent, Node, Offer

#: A listed node's ``launched_at_utc`` when its cloud gives no creation time, or
#: one the adapter cannot read (see ``Provider.nodes``).
#:
#: Design choice: long ago, not ``now``. A creation time of ``now`` read as a
#: launch on every listing, so the scale-up cooldown (from the newest launch)
#: never ran out while the instance lived; failing the listing hid every node
#: of the cluster, on every poll, until the instance went. Long ago delays
#: nothing; the controller keeps the time it recorded when it launched the node
#: (``fleetctl.controller.recorded.merge``), and such a node is not reported
#: ready since an unknown time (``ready_at_utc`` None: idle from when it is seen).
UNKNOWN_LAUNCH_TIME: Final[datetime] = datetime(1970, 1, 1, tzinfo=timezone.utc)


class ProviderError(Exception):
    """Base of every error a provider raises."""


class InsufficientCapacity(ProviderError):
    """The cloud has no capacity for this offer right now (spot exhausted,
    zone out of stock). Try another offer or market."""


class QuotaExceeded(ProviderError):
    """An account limit (vCPU or GPU quota, spot instance count) was hit."""


class Throttled(ProviderError):
    """The API rate limit was hit; the call may be retried after a backoff."""


class NodeNotFound(ProviderError):
    """The node is unknown to the provider (never existed or long gone)."""


class UnknownInstanceType(ProviderError):
    """The provider does not offer this instance type (in this region)."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a provider can do, declared as data rather than as methods that raise."""

    interruption_notice_seconds: int  # lead time of a reclaim warning
    rebalance_recommendations: bool
    idempotent_launch: bool = True
    #: The cloud announces reclaims to the controller (AWS EventBridge, GCP
    #: operations). False: only on the node (Azure Scheduled Events), so the
    #: notices arrive through `fleetctl node-watch` and the daemon's endpoint.
    central_notices: bool = True
    #: The shape of this provider's node ids, a regular expression the whole id
    #: matches (``""``: any id may be one of its). ``MultiCloud`` routes a
    #: terminate of a node it has not listed or launched by it, so a cloud is
    #: never asked to delete another cloud's node, and an id no cloud could own
    #: is refused without a call.
    node_id_pattern: str = ""


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Buy ``count`` nodes of one offer. ``idempotency_key`` makes a retried
    request return the nodes of the first."""

    offer: Offer
    count: int
    idempotency_key: str
    together: bool = False  # the nodes run one multi-node job (a gang): placed close where the cloud can


@dataclass(frozen=True, slots=True)
class LaunchResult:
    """What a launch got: possibly fewer nodes than asked (partial fulfilment
    is reported, never hidden)."""

    request: LaunchRequest
    nodes: tuple[Node, ...]
    error: str | None = None

    @property
    def fulfilled(self) -> bool:
        return len(self.nodes) == self.request.count


@runtime_checkable
class Provider(Protocol):
    """The whole provider contract.

    * ``offers(now)``: every offer this provider can sell now, with prices.
    * ``nodes(now)``: every node this provider holds for fleetctl, any state
      but GONE nodes may be omitted once forgotten. A node's ``zone`` is where
      it runs, in the offers' zone names: a zonal offer's zone; for a regional
      offer the zone the cloud picked, ``""`` if the cloud does not say. The
      nodes ``launch`` returns say the zone ``nodes`` lists (or ``""`` when
      the launch's answer does not name it yet). A node whose creation time
      the cloud leaves out, or gives in a form the adapter cannot read, is
      listed with ``launched_at_utc`` ``UNKNOWN_LAUNCH_TIME`` (and not ready
      since then: no ``ready_at_utc`` unless the cloud gives a readable one
      apart), not left out and not failing the listing; an unreadable value is
      logged once, naming the node and the value.
    * ``launch(request, now)``: buy nodes; idempotent by ``request.idempotency_key``;
      raises ``InsufficientCapacity``/``QuotaExceeded``/``Throttled`` when
      nothing was bought, returns a partial ``LaunchResult`` otherwise.
    * ``terminate(node_id, now)``: idempotent; a node already gone is success.
      Raises ``NodeNotFound`` only for ids it never knew.
    * ``interruption_events(now)``: notices received since the last call that
      were not acknowledged; ``acknowledge(event_id)`` after handling.
    """

    name: str
    capabilities: Capabilities

    def offers(self, now: datetime) -> tuple[Offer, ...]: ...

    def nodes(self, now: datetime) -> tuple[Node, ...]: ...

    def launch(self, request: LaunchRequest, now: datetime) -> LaunchResult: ...

    def terminate(self, node_id: str, now: datetime) -> None: ...

    def interruption_events(self, now: datetime) -> tuple[InterruptionEvent, ...]: ...

    def acknowledge(self, event_id: str) -> None: ...
