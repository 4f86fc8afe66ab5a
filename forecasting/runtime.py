"""The daemon's forecaster: trained models turned into Forecast numbers each pass, from the store.

:class:`ModelForecaster` implements the controller's
:class:`~fleetctl.controller.forecast.Forecaster` protocol over a model
directory (``DIR/interruption``: ``fleetctl forecast train interruption``;
``DIR/demand``: ``fleetctl forecast train demand``, used when present):

* **interruption**: the market the controller recorded itself
  (``Store.offer_observations``, a change log of spot offers listed or gone,
  plus the reclaims it handled) becomes a :class:`~fleetctl.sim.market.Market`
  on a 5-minute grid, and the model gives each spot offer's probability of
  being reclaimed within its horizon at ``now``;
* **demand**: the GPUs demanded per model that each tick records (audit
  events of kind ``demand``) as a series for the demand model;
* **retrain**: refit the interruption model on everything recorded so far
  (the same time split as ``fleetctl forecast train``) and replace the saved
  model atomically; the daemon schedules it (``--retrain-hours``).

A model that cannot be used (missing, another scikit-learn version) is
reported once at start-up (``ModelError``); a pass with too little history
forecasts nothing for that part (the planner then uses the policy's default).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path

from fleetctl.controller.forecast import recent_reclaims
from fleetctl.model import DemandForecast, OfferRisk
from fleetctl.store import Store
from forecasting.interruption import InterruptionModel, ModelError, market_from_observations

log = logging.getLogger("fleetctl.forecast")
GRID_SECONDS = 300.0
# How much recorded history a pass reads: the features look back 24 hours (and
# at the same time the day before), so 49 hours is enough; retraining reads it all.
HISTORY = timedelta(hours=49)


class ModelForecaster:
    def __init__(self, directory: str | Path, *, allow_version_mismatch: bool = False) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise ModelError(f"{self.directory}: no such model directory")
        self.interruption_model: InterruptionModel | None = None
        self.demand_model = None
        if (self.directory / "interruption").is_dir():
            self.interruption_model = InterruptionModel.load(self.directory / "interruption",
                                                             allow_version_mismatch=allow_version_mismatch)
        if (self.directory / "demand").is_dir():
            try:
                from forecasting.demand import DemandModel
            except ImportError as exc:
                raise ModelError(f"{self.directory / 'demand'}: the demand model cannot be loaded here ({exc})") from exc
            self.demand_model = DemandModel.load(self.directory / "demand")
        if self.interruption_model is None and self.demand_model is None:
            raise ModelError(f"{self.directory}: neither interruption/ nor demand/ holds a model")

    # ------------------------------------------------------------------ the Forecaster protocol

    def _market(self, store: Store, now: datetime, window: timedelta | None = None):  # noqa: ANN202 - Market or None
        """The recorded market up to ``now``; with ``window``, only its last stretch
        (the state at the window's start still comes from the rows before it)."""
        first = store.first_offer_observation_utc()
        if first is None or first > now:
            return None
        start = first if window is None else max(first, now - window)
        if now - start < timedelta(seconds=2 * GRID_SECONDS):
            return None
        # Only the window is read, plus each offer's state at its start (a
        # daemon's change log grows for as long as it runs).
        rows = store.offer_observations(since=start, until=now, with_state_at_since=True)
        return market_from_observations(rows, start, now + timedelta(seconds=GRID_SECONDS), GRID_SECONDS,
                                        reclaims=recent_reclaims(store))

    def interruption(self, store: Store, now: datetime) -> tuple[OfferRisk, ...]:
        if self.interruption_model is None:
            return ()
        market = self._market(store, now, HISTORY)
        if market is None:
            return ()
        return self.interruption_model.risks(market, now)

    def demand(self, store: Store, now: datetime) -> tuple[DemandForecast, ...]:
        if self.demand_model is None:
            return ()
        import pandas as pd

        rows = [(e["at_utc"], model, gpus) for e in store.events("demand", since=now - HISTORY)
                for model, gpus in (e["payload"].get("gpus") or {}).items() if model != "any"]
        if not rows:
            return ()
        series = pd.DataFrame(rows, columns=["time_utc", "gpu_model", "gpus"])
        series["time_utc"] = pd.to_datetime(series["time_utc"], utc=True)
        series = series[series["time_utc"] <= pd.Timestamp(now)]
        return tuple(self.demand_model.predict(series, now))

    # ------------------------------------------------------------------ retraining

    def retrain(self, store: Store, now: datetime, *, train_fraction: float = 0.7) -> bool:
        """Refit the interruption model on the recorded market; False (and the
        old model kept) when the history is too short or has no losses."""
        market = self._market(store, now)
        if market is None:
            log.info("retrain: no recorded market yet")
            return False
        horizon = timedelta(minutes=self.interruption_model.horizon_minutes if self.interruption_model else 60)
        try:
            model = InterruptionModel.train([market], horizon=horizon, train_fraction=train_fraction)
        except ValueError as exc:
            log.info("retrain: kept the current model (%s)", exc)
            return False
        model.save(self.directory / "interruption")  # all at once: a failed save keeps the old model
        self.interruption_model = model
        log.info("retrain: interruption model refitted on %d samples", model.metadata["samples"])
        return True


__all__ = ["ModelForecaster"]
