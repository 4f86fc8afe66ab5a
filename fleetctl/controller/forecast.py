"""The Forecast the planner sees each pass: numbers built from what the store recorded.

The controller never decides with a model directly: each pass it asks a
:class:`Forecaster` (the trained models of ``forecasting/``, see
``forecasting.runtime``) for interruption probabilities per offer and demand
per GPU model, adds the reclaims it saw itself (the planner avoids an offer
reclaimed within the policy's TTL), and hands the planner a frozen
:class:`~fleetctl.model.Forecast`. Without a forecaster the planner uses the
policy's default risk per market.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from fleetctl.model import DemandForecast, Forecast, InterruptionKind, OfferReclaim, OfferRisk
from fleetctl.store import Store


class Forecaster(Protocol):
    """What the controller needs of the forecasting models; both methods read
    only what the store recorded up to ``now``."""

    def interruption(self, store: Store, now: datetime) -> tuple[OfferRisk, ...]: ...

    def demand(self, store: Store, now: datetime) -> tuple[DemandForecast, ...]: ...


def recent_reclaims(store: Store, now: datetime | None = None,
                    within: timedelta | None = None) -> tuple[OfferReclaim, ...]:
    """The reclaims the controller itself saw (its own notices, not rebalance
    hints), received by ``now`` when given (a saved plan re-planned at its own
    time sees what it saw then); with ``now`` and ``within``, only those
    received in the ``within`` before ``now`` (the policy's
    ``reclaimed_offer_ttl_minutes``: the planner uses no older one), so a pass
    does not read every notice the store keeps."""
    since = now - within if now is not None and within is not None else None
    events = [e for e in store.interruptions(unhandled_only=False, received_since=since)
              if e.kind is not InterruptionKind.REBALANCE and (now is None or e.received_at_utc <= now)]
    if not events:
        return ()
    # only the reclaimed nodes are read, not every node the store ever recorded (it keeps gone ones)
    offer_of = {n.node_id: n.offer.key for n in store.nodes(include_gone=True, node_ids={e.node_id for e in events})}
    return tuple(OfferReclaim(offer_of[e.node_id], e.received_at_utc) for e in events if e.node_id in offer_of)


def build_forecast(store: Store, now: datetime, forecaster: Forecaster | None = None, *,
                   reclaims_within: timedelta | None = None) -> Forecast:
    """This pass's Forecast: the forecaster's numbers (if any) and the recent
    reclaims (``reclaims_within``: only those received that long before ``now``
    or later; the controller passes the policy's ``reclaimed_offer_ttl_minutes``)."""
    reclaims = recent_reclaims(store, now, reclaims_within)
    if forecaster is None:
        return Forecast(recent_reclaims=reclaims)
    return Forecast(interruption=tuple(forecaster.interruption(store, now)),
                    demand=tuple(forecaster.demand(store, now)),
                    recent_reclaims=reclaims)
