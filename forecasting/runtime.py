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
  events of kind ``demand``) as a series for the demand model, once at least
  ``MIN_DEMAND_HISTORY`` is recorded (a model missing from a row had 0);
* **retrain**: refit each model on the last ``RETRAIN_WINDOW`` recorded (the
  market, or the demand series; a time split as in ``fleetctl forecast
  train``), adopt it only if it scores at least as well as the current model
  on the stretch it did not see, and replace the saved model atomically; the
  daemon schedules it (``--retrain-hours``), each model on its own.

A model that cannot be used (missing, another scikit-learn version) is
reported once at start-up (``ModelError``); a pass with too little history
forecasts nothing for that part (the planner then uses the policy's default).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from fleetctl.controller.forecast import recent_reclaims
from fleetctl.model import DemandForecast, OfferRisk
from fleetctl.store import Store
from forecasting import modelfiles
from forecasting.interruption import InterruptionModel, ModelError, load_for_planning, market_from_observations

log = logging.getLogger("fleetctl.forecast")
GRID_SECONDS = 300.0
# How much recorded history a pass reads: the features look back 24 hours (and
# at the same time the day before), so 49 hours is enough; retraining reads it all.
HISTORY = timedelta(hours=49)
#: What a retrain reads of the recorded market (the newest stretch): memory grows with the window.
RETRAIN_WINDOW = timedelta(days=30)
#: Recorded demand needed before the demand model is asked (its features compare the level with the last
#: 15 minutes to 24 hours; from a few seconds of rows it bought headroom on noise).
MIN_DEMAND_HISTORY = timedelta(hours=1)


class ModelForecaster:
    """``demand_candidates``: the hyperparameters a demand refit chooses from
    (default ``forecasting.demand.CANDIDATES``; tests pass one, to be fast, as
    to ``DemandModel.train``)."""

    def __init__(self, directory: str | Path, *, allow_version_mismatch: bool = False,
                 demand_candidates: Sequence[dict[str, Any]] | None = None) -> None:
        self.directory = Path(directory)
        self.demand_candidates = demand_candidates
        if not self.directory.is_dir():
            raise ModelError(f"{self.directory}: no such model directory")
        self.interruption_model: InterruptionModel | None = None
        self.demand_model = None
        for name in ("interruption", "demand"):  # a model a killed save left beside its directory: put back
            modelfiles.recover(self.directory / name)
        if (self.directory / "interruption").is_dir():
            self.interruption_model = load_for_planning(self.directory / "interruption",
                                                        allow_version_mismatch=allow_version_mismatch)
        if (self.directory / "demand").is_dir():
            try:
                from forecasting.demand import DemandModel
            except ImportError as exc:
                raise ModelError(f"{self.directory / 'demand'}: the demand model cannot be loaded here ({exc})") from exc
            self.demand_model = DemandModel.load(self.directory / "demand",
                                                 allow_version_mismatch=allow_version_mismatch)
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
        first = store.first_event_at("demand")
        if first is None or now - first < MIN_DEMAND_HISTORY:
            return ()  # too little recorded yet: no demand forecast (no headroom)
        series = _recorded_demand(store, now - HISTORY, now)
        if series is None:
            return ()
        return tuple(self.demand_model.predict(series, now))

    # ------------------------------------------------------------------ retraining

    @property
    def models(self) -> tuple[str, ...]:
        """The models this directory holds, which ``retrain`` can refit."""
        return tuple(name for name, m in (("interruption", self.interruption_model), ("demand", self.demand_model))
                     if m is not None)

    def retrain(self, store: Store, now: datetime, model: str = "interruption", *,
                train_fraction: float = 0.7) -> bool:
        """Refit ``model`` (``interruption`` or ``demand``) on what the store
        recorded; True if the refit replaced it (see the two methods)."""
        if model == "demand":
            return self.retrain_demand(store, now, train_fraction=train_fraction)
        if model != "interruption":
            raise ValueError(f"no model {model!r} to retrain (interruption or demand)")
        return self.retrain_interruption(store, now, train_fraction=train_fraction)

    def retrain_demand(self, store: Store, now: datetime, *, train_fraction: float = 0.7) -> bool:
        """Refit the demand model on the demand the controller recorded (its last
        ``RETRAIN_WINDOW``; one series per GPU model), with the current model's
        horizons and seed, up to the time split at ``train_fraction`` of the
        recorded stretch; adopt it only if on the rest (which it did not see) its
        MAE plus 90th-percentile pinball loss, summed over the horizons, is no
        worse than the current model's on the same origins; then fit it again on
        the whole window and replace the saved model atomically. False (the
        current model kept) when there is no demand model, the history is too
        short to train or to score (about 2.2 days: 36 hours to train on, and a
        day of history before each scored origin), or the refit scores worse."""
        import pandas as pd

        from forecasting.demand import CANDIDATES, DemandModel
        from forecasting.series import DemandSeries

        current = self.demand_model
        if current is None:
            log.info("retrain: %s has no demand model to refit", self.directory)
            return False
        frame = _recorded_demand(store, now - RETRAIN_WINDOW, now)
        if frame is None:
            log.info("retrain: no recorded demand yet")
            return False
        frame["s"] = (frame["time_utc"] - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
        series = []
        for gpu_model, rows in frame.groupby("gpu_model", sort=True):
            rows = rows.sort_values("s", kind="stable").drop_duplicates("s", keep="last")
            series.append(DemandSeries("recorded", str(gpu_model), rows["s"].to_numpy(),
                                       rows["gpus"].to_numpy(dtype=float)))
        start = min(float(s.times_s[0]) for s in series)
        split = datetime.fromtimestamp(start + train_fraction * (now.timestamp() - start), tz=timezone.utc)
        horizons, seed = current.horizons_minutes, int(current.metadata.get("seed", 0))
        candidates = CANDIDATES if self.demand_candidates is None else self.demand_candidates
        try:
            candidate = DemandModel.train(series, horizons_minutes=horizons, until_utc=split, seed=seed,
                                          candidates=candidates)
            new, old = (_demand_loss(m, series, split) for m in (candidate, current))
        except ValueError as exc:
            log.info("retrain: kept the current demand model (%s)", exc)
            return False
        if new > old:
            log.info("retrain: kept the current demand model: on the last %.0f%% of the recorded demand the refit "
                     "scores %.4f (MAE + pinball p90, summed over horizons), the current model %.4f",
                     100 * (1 - train_fraction), new, old)
            return False
        model = candidate
        try:
            model = DemandModel.train(series, horizons_minutes=horizons, seed=seed, candidates=candidates)
        except ValueError as exc:  # cannot happen when the split could be trained on; keep the checked refit
            log.info("retrain: demand refit on the first %.0f%% only (%s)", 100 * train_fraction, exc)
        model.save(self.directory / "demand")  # all at once: a failed save keeps the old model
        self.demand_model = model
        log.info("retrain: demand model refitted on %d recorded series (unseen stretch: %.4f, current model %.4f)",
                 len(series), new, old)
        return True

    def retrain_interruption(self, store: Store, now: datetime, *, train_fraction: float = 0.7) -> bool:
        """Refit the interruption model on the recorded market (its last
        ``RETRAIN_WINDOW``) and adopt the refit only if it scores at least as
        well as the current model, by Brier score, on the recorded stretch the
        refit did not see (the last ``1 - train_fraction``); then it is fitted
        again on the whole window, so the newest history counts. False (and the
        current model kept) when there is no interruption model to refit (a
        model nobody trained is not created here), the history is too short or
        has no losses, or the refit does not score better."""
        current = self.interruption_model
        if current is None:
            log.info("retrain: %s has no interruption model to refit", self.directory)
            return False
        market = self._market(store, now, RETRAIN_WINDOW)
        if market is None:
            log.info("retrain: no recorded market yet")
            return False
        horizon = timedelta(minutes=current.horizon_minutes)
        try:
            candidate = InterruptionModel.train([market], horizon=horizon, train_fraction=train_fraction)
        except ValueError as exc:
            log.info("retrain: kept the current model (%s)", exc)
            return False
        held_out = _held_out(market, horizon, train_fraction)
        if held_out is None:
            log.info("retrain: kept the current model (the recorded market leaves no unseen stretch to compare on)")
            return False
        X, y = held_out
        new, old = _brier(y, candidate.probabilities(X)), _brier(y, current.probabilities(X))
        if new > old:
            log.info("retrain: kept the current model: on the last %.0f%% of the recorded market the refit scores "
                     "Brier %.4f, the current model %.4f", 100 * (1 - train_fraction), new, old)
            return False
        model = candidate
        try:
            model = InterruptionModel.train([market], horizon=horizon, train_fraction=1.0)
        except ValueError as exc:  # the whole window cannot be split as training needs: keep the checked refit
            log.info("retrain: refit on the first %.0f%% only (%s)", 100 * train_fraction, exc)
        model.save(self.directory / "interruption")  # all at once: a failed save keeps the old model
        self.interruption_model = model
        log.info("retrain: interruption model refitted on %d samples (unseen stretch: Brier %.4f, current model "
                 "%.4f)", model.metadata["samples"], new, old)
        return True


def _recorded_demand(store: Store, since: datetime, now: datetime):  # noqa: ANN202 - a DataFrame or None
    """The GPUs demanded per model that the passes recorded from ``since`` to
    ``now``: ``time_utc`` (UTC), ``gpu_model``, ``gpus`` rows (None: none)."""
    import pandas as pd

    events = store.events("demand", since=since)
    # Each pass records every model with active jobs: a model missing from a row had none then (0 GPUs),
    # not an unknown value, so a model whose jobs all finished falls to 0 instead of keeping its last level.
    models = sorted({m for e in events for m in (e["payload"].get("gpus") or {}) if m != "any"})
    rows = [(e["at_utc"], model, (e["payload"].get("gpus") or {}).get(model, 0)) for e in events
            for model in models]
    if not rows:
        return None
    series = pd.DataFrame(rows, columns=["time_utc", "gpu_model", "gpus"])
    series["time_utc"] = pd.to_datetime(series["time_utc"], utc=True)
    series = series[series["time_utc"] <= pd.Timestamp(now)]
    return series if len(series) else None


def _demand_loss(model, series, split: datetime) -> float:  # noqa: ANN001
    """MAE + pinball p90 of ``model`` on the origins after ``split``, summed over its horizons."""
    from forecasting.demand import evaluate

    total = 0.0
    for h in model.horizons_minutes:
        scores = evaluate(model, series, h, since_utc=split)
        total += scores["mae"] + scores["pinball_p90"]
    return total


def _held_out(market, horizon: timedelta, train_fraction: float):  # noqa: ANN001, ANN202
    """Features and labels of the market after its training split (None: none, or one class only)."""
    from forecasting.interruption import build_samples, evaluation_mask, split_time

    s = build_samples(market, horizon)
    m = evaluation_mask(s, split_time(market, train_fraction))
    if not m.any() or s.y[m].min() == s.y[m].max():
        return None
    return s.X[m], s.y[m]


def _brier(y, p) -> float:  # noqa: ANN001
    return float(((p - y) ** 2).mean())


__all__ = ["ModelForecaster"]
