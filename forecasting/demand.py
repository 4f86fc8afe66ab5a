"""GPU demand: how many GPUs of a model will be demanded (running plus queued) in 15 minutes, 1 hour, 6 hours.

**Series.** A demand series (:class:`~forecasting.series.DemandSeries`) is a
step function: a value holds from its time until the next observation. ``y(t)``
below is the value *as of* ``t`` (the last observation at or before ``t``).

**Features** at an origin ``t`` (any time, not just grid points) come from
``y`` sampled on a 5-minute grid reaching 24 hours back from ``t`` (``t``,
``t - 5 min``, ..., ``t - 24 h``), so only data at or before ``t`` is used and
the tick length of the recording does not matter. All are divided by the
*scale* ``s``, the mean of those samples (the recent mean; 1 GPU when it is 0),
so they are scale-free: the same shape of demand at 10x the size gives the
same features, and one model serves clusters of any size.

| feature | meaning |
|---|---|
| ``level`` | ``y(t) / s`` |
| ``change_15m``, ``change_1h``, ``change_3h``, ``change_6h`` | ``(y(t) - y(t - k)) / s`` |
| ``mean_1h``, ``mean_6h`` | mean of the grid samples of the last 1 / 6 hours, ``/ s`` |
| ``max_24h``, ``min_24h``, ``std_24h`` | of the last 24 hours, ``/ s`` |
| ``hours_since_change`` | hours back to the last grid sample that differs from ``y(t)`` (24 when none) |
| ``seasonal_level`` | ``y(t + h - 24 h) / s``: yesterday at the target's time of day |
| ``seasonal_change`` | ``(y(t + h - 24 h) - y(t - 24 h)) / s``: how demand moved over the same window yesterday |
| ``hour_of_day_utc``, ``day_of_week_utc`` | of the origin ``t`` in UTC (hours, 0-24; Monday = 0) |

The clock features are in UTC: they carry the working day of the clusters the
model was trained on (Helios: +08:00), so a model serves clusters whose users
live in the same zones; the seasonal features carry the daily pattern whatever
the zone. Grid samples before a series' first observation are missing (NaN;
the gradient boosting handles them natively).

**Target and model.** For each horizon ``h`` and each quantile (0.5, 0.9): a
scikit-learn ``HistGradientBoostingRegressor(loss="quantile")`` on the change
``(y(t + h) - y(t)) / s``, each sample weighted by ``s`` (so the training loss
is the pinball loss in GPUs, and a small cluster's noisy relative changes do
not outweigh a large one's). The forecast is ``y(t) + s x prediction``, at
least 0, and the 90th percentile at least the median. Predicting the *change*
keeps the median next to the last value, which is hard to beat on demand that
moves in steps.

**Split and hyperparameters.** Training origins are every 5 minutes (on the
UTC 5-minute grid) with ``t + h`` inside the training window (``until``: the
time split). The hyperparameters (``CANDIDATES``) are chosen per horizon and
quantile inside the training window only: fitted on the first 70% of each
series' window, scored (pinball loss in GPUs) on origins in the last 30%, the
90th percentile as it is issued (at least the median);
fit samples whose target reaches into that slice are dropped. The chosen one
is refitted on the whole window. On the same validation slice, two
adjustments are chosen: the share of the median's predicted change to keep
(``MEDIAN_SHRINK``: 0, 0.5 or 1; 0 makes the median the last value), and a
split-conformal offset added to the 90th percentile (the rank-corrected 90th
percentile of the validation errors in units of ``s``), so that it covers 90%
of the validation outcomes. With two or more training series the adjustments
are calibrated *across series* (``CALIBRATION = "other_series"``): each
series' validation slice is predicted by a model fitted (with the chosen
hyperparameters) on the other series only, because the model will serve
clusters it has not seen, whose errors are larger than a seen cluster's later
errors. The median keeps a share of its predicted change only if that share
is no worse than the last value on every series' slice, both as predicted by
the model fitted on all series and by the one fitted on the others; otherwise
the median is the last value. Seeded, no early stopping, one OpenMP thread:
deterministic.

**Baselines.** ``last_value``: ``y(t)``; ``seasonal_naive``: ``y(t + h - 24 h)``.
Each becomes a 90th percentile by adding ``s`` times the empirical 90th
percentile of its own relative errors (``(y(t + h) - forecast) / s``) on the
training origins (the same scale as the model's, so a baseline is not
penalised for a cluster's size).

**At run time** :meth:`DemandModel.predict` takes the recorded series as a
DataFrame and ``now`` and returns ``DemandForecast`` numbers per GPU model and
horizon, from rows at or before ``now`` only.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from fleetctl.model import DemandForecast
from forecasting import modelfiles
from forecasting.modelfiles import ModelError
from forecasting.series import MAX_SERIES_SPAN, DemandSeries, span_text

FORMAT_VERSION = 2
GRID_SECONDS = 300.0
DAY_SECONDS = 86_400.0
LOOKBACK_POINTS = int(DAY_SECONDS // GRID_SECONDS)  # 288 steps back: 24 hours
DEFAULT_HORIZONS_MINUTES = (15, 60, 360)
QUANTILES = (0.5, 0.9)
MAX_HORIZON_MINUTES = 24 * 60
TUNE_FRACTION = 0.7
# Least span of a series inside the training window for it to be trained on. The features look back
# 24 hours and the seasonal feature needs the same time yesterday; the fitting slice is the first
# TUNE_FRACTION of the window, so below 24 h / 0.7 (34 h) it has no origin with that feature at all,
# which scikit-learn cannot bin when no other series has one either.
MIN_TRAINING_SECONDS = 1.5 * DAY_SECONDS
FEATURES = (
    "level", "change_15m", "change_1h", "change_3h", "change_6h", "mean_1h", "mean_6h",
    "max_24h", "min_24h", "std_24h", "hours_since_change", "seasonal_level", "seasonal_change",
    "hour_of_day_utc", "day_of_week_utc",
)
_CHANGE_STEPS = (3, 12, 36, 72)  # 15 min, 1 h, 3 h, 6 h on the 5-minute grid
#: Hyperparameters tried for each horizon and quantile, scored on a later slice of the training window only.
CANDIDATES = (
    {"max_iter": 200, "learning_rate": 0.05, "max_leaf_nodes": 15, "min_samples_leaf": 50, "l2_regularization": 1.0},
    {"max_iter": 100, "learning_rate": 0.05, "max_leaf_nodes": 7, "min_samples_leaf": 200, "l2_regularization": 1.0},
    {"max_iter": 300, "learning_rate": 0.03, "max_leaf_nodes": 31, "min_samples_leaf": 20, "l2_regularization": 0.1},
    {"max_iter": 50, "learning_rate": 0.05, "max_leaf_nodes": 7, "min_samples_leaf": 500, "l2_regularization": 1.0},
)
#: How much of the median's predicted change to keep, chosen on the same validation slice (0 = the last value).
MEDIAN_SHRINK = (0.0, 0.5, 1.0)
#: How the two adjustments are calibrated: "other_series" (each series' validation slice predicted by a model
#: fitted on the other series only, when there are two or more) or "same_series" (one model fitted on all).
CALIBRATION = "other_series"

__all__ = [
    "CANDIDATES",
    "DEFAULT_HORIZONS_MINUTES",
    "FEATURES",
    "DemandModel",
    "ModelError",
    "Samples",
    "build_samples",
    "check_span",
    "evaluate",
    "features",
    "forecast_plot",
    "pinball",
    "series_digest",
]


# =========================================================================== features


def _asof(series: DemandSeries, query_s: np.ndarray) -> np.ndarray:
    """``y`` at each query time (the last observation at or before it), NaN before the first."""
    idx = np.searchsorted(series.times_s, query_s, side="right") - 1
    return np.where(idx >= 0, series.gpus[np.clip(idx, 0, None)], np.nan)


def features(series: DemandSeries, origins_s: np.ndarray, horizon_minutes: int) -> tuple[np.ndarray, np.ndarray,
                                                                                         np.ndarray]:
    """``(X, scale, level)`` at each origin (seconds since the epoch), from the
    series' data at or before the origin only. ``X`` has the columns
    ``FEATURES``; ``level`` is ``y(t)`` (NaN before the series' first
    observation); ``scale`` is the recent mean (1 when it is 0 or unknown)."""
    t = np.asarray(origins_s, dtype=float)
    grid = _asof(series, t[:, None] - GRID_SECONDS * np.arange(LOOKBACK_POINTS + 1)[None, :])
    level = grid[:, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)  # all-NaN rows (no data yet) stay NaN
        mean = np.nanmean(grid, axis=1)
        scale = np.where(np.isfinite(mean) & (mean > 0), mean, 1.0)
        cols = [level / scale]
        cols += [(level - grid[:, k]) / scale for k in _CHANGE_STEPS]
        cols += [np.nanmean(grid[:, :13], axis=1) / scale, np.nanmean(grid[:, :73], axis=1) / scale]
        cols += [np.nanmax(grid, axis=1) / scale, np.nanmin(grid, axis=1) / scale, np.nanstd(grid, axis=1) / scale]
        # Grid steps back to the first sample that differs from y(t) (24 h when none does in the window).
        differs = (grid != level[:, None]) & ~np.isnan(grid)
        steps = np.where(differs.any(axis=1), differs.argmax(axis=1), LOOKBACK_POINTS)
        cols.append(steps * GRID_SECONDS / 3600.0)
    h = horizon_minutes * 60.0
    seasonal = _asof(series, t + h - DAY_SECONDS)
    cols += [seasonal / scale, (seasonal - _asof(series, t - DAY_SECONDS)) / scale]
    cols += [(t % DAY_SECONDS) / 3600.0, ((t // DAY_SECONDS) + 3) % 7]  # origin's UTC hour, weekday (Monday = 0)
    return np.column_stack(cols), scale, level


@dataclass(frozen=True)
class Samples:
    """Origins of one series for one horizon: features, scale, ``y(t)``, the
    outcome ``y(t + h)`` and the seasonal-naive forecast ``y(t + h - 24 h)``."""

    series: DemandSeries
    horizon_minutes: int
    origins_s: np.ndarray
    X: np.ndarray
    scale: np.ndarray
    level: np.ndarray
    outcome: np.ndarray
    seasonal: np.ndarray


def check_span(series: DemandSeries) -> None:
    """``ValueError`` naming the series and its span when it spans more than
    ``MAX_SERIES_SPAN`` (366 days): refused before any samples are built, which
    would take about 1 GB per year of span. The CSV reader refuses such a file
    with the line; this guards series built otherwise (the runtime, callers of
    the API)."""
    span = float(series.times_s[-1] - series.times_s[0])
    if span > MAX_SERIES_SPAN.total_seconds():
        raise ValueError(f"{series.name} spans {span_text(span)} ({_utc(float(series.times_s[0]))} .. "
                         f"{_utc(float(series.times_s[-1]))}), more than the {MAX_SERIES_SPAN.days} days a demand "
                         "series may span")


def build_samples(series: DemandSeries, horizon_minutes: int, *, since_s: float | None = None,
                  until_s: float | None = None, full_day: bool = False) -> Samples:
    """Origins every 5 minutes (UTC grid) from the series' start (or ``since``)
    whose target time ``t + h`` is at most the series' end (and ``until``).
    ``full_day`` keeps only origins with 24 hours of history before them (both
    baselines are then defined), as evaluation does. ``ValueError`` for a
    series longer than ``MAX_SERIES_SPAN`` (:func:`check_span`)."""
    check_span(series)
    h = horizon_minutes * 60.0
    lo = float(series.times_s[0]) + (DAY_SECONDS if full_day else 0.0)
    if since_s is not None:
        lo = max(lo, since_s)
    hi = float(series.times_s[-1]) - h
    if until_s is not None:
        hi = min(hi, until_s - h)
    first = math.ceil(lo / GRID_SECONDS) * GRID_SECONDS
    # Counted, not np.arange(first, hi + 1e-9): at 1.6e9 seconds the 1e-9 is lost to rounding, and the origin
    # whose target is exactly the end (or until) was dropped.
    count = math.floor((hi - first) / GRID_SECONDS) + 1 if hi >= first else 0
    origins = first + GRID_SECONDS * np.arange(count, dtype=float)
    X, scale, level = features(series, origins, horizon_minutes)
    return Samples(series, horizon_minutes, origins, X, scale, level, _asof(series, origins + h),
                   _asof(series, origins + h - DAY_SECONDS))


def pinball(y: np.ndarray, q_pred: np.ndarray, q: float, weights: np.ndarray | None = None) -> float:
    """Mean pinball (quantile) loss of ``q_pred`` as the ``q`` quantile of ``y``."""
    d = y - q_pred
    loss = np.maximum(q * d, (q - 1) * d)
    return float(np.average(loss, weights=weights))


def _scores(y: np.ndarray, p50: np.ndarray, p90: np.ndarray) -> dict[str, float]:
    return {"mae": round(float(np.mean(np.abs(y - p50))), 6), "pinball_p90": round(pinball(y, p90, 0.9), 6),
            "p90_coverage": round(float(np.mean(y <= p90)), 6)}


def _key(horizon_minutes: int, q: float) -> str:
    return f"{horizon_minutes}m_q{round(q * 100)}"


def _long_enough(series: Sequence[DemandSeries], since_s: float | None,
                 until_s: float | None) -> tuple[list[DemandSeries], list[dict[str, Any]]]:
    """The series with at least ``MIN_TRAINING_SECONDS`` inside ``[since, until]``,
    and a record of each one left out (its name, hours and why)."""
    kept, skipped = [], []
    for s in series:
        span = _span_s(s, since_s, until_s)
        if span >= MIN_TRAINING_SECONDS:
            kept.append(s)
            continue
        where = "inside the training window" if since_s is not None or until_s is not None else "in all"
        skipped.append({"series": s.name, "hours": round(span / 3600, 2),
                        # floored to a tenth of an hour: 35.96 hours are "35.9", not "36.0 ... fewer than 36"
                        "reason": f"{s.name} has {math.floor(span / 360) / 10:.1f} hours of data {where}, fewer than the "
                                  f"{MIN_TRAINING_SECONDS / 3600:.0f} hours training needs"})
    return kept, skipped


def _all_missing(X: np.ndarray) -> list[str]:
    """The features without a single finite value in ``X`` (rows: samples)."""
    return [name for name, known in zip(FEATURES, np.isfinite(X).any(axis=0)) if not known]


def _span_s(s: DemandSeries, since_s: float | None, until_s: float | None) -> float:
    """Seconds of ``s`` inside ``[since, until]``."""
    lo = float(s.times_s[0]) if since_s is None else max(float(s.times_s[0]), since_s)
    hi = float(s.times_s[-1]) if until_s is None else min(float(s.times_s[-1]), until_s)
    return max(hi - lo, 0.0)


def _hours(minutes: int) -> str:
    return f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min"


def series_digest(series: DemandSeries) -> str:
    """SHA-256 of a series' GPU model, times and values (to recognise a training series)."""
    digest = hashlib.sha256(series.gpu_model.encode())
    digest.update(np.ascontiguousarray(series.times_s, dtype=float).tobytes())
    digest.update(np.ascontiguousarray(series.gpus, dtype=float).tobytes())
    return digest.hexdigest()


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat().replace("+00:00", "Z")


# =========================================================================== the model


@dataclass
class DemandModel:
    """Quantile regressors per horizon and quantile, and what they were trained on."""

    estimators: dict[str, Any]
    horizons_minutes: tuple[int, ...]
    metadata: dict[str, Any]

    # ------------------------------------------------------------------ training

    @classmethod
    def train(cls, series: Sequence[DemandSeries], *,
              horizons_minutes: Iterable[int] = DEFAULT_HORIZONS_MINUTES,
              since_utc: datetime | None = None, until_utc: datetime | None = None, seed: int = 0,
              candidates: Sequence[dict[str, Any]] = CANDIDATES,
              progress: Callable[[str], None] | None = None) -> "DemandModel":
        """Fit on the origins at or after ``since`` whose target is at or before
        ``until`` (all of each series by default); see the module docstring.
        A series with less than ``MIN_TRAINING_SECONDS`` (36 hours) inside the window
        is left out and recorded in ``metadata["skipped_series"]``; ValueError when
        none is left. ``candidates``: the hyperparameters to choose from (tests pass one, to be fast)."""
        from sklearn.ensemble import HistGradientBoostingRegressor
        from threadpoolctl import threadpool_limits

        horizons = tuple(sorted(set(int(h) for h in horizons_minutes)))
        if not series:
            raise ValueError("no series to train on")
        if not horizons or any(not 0 < h <= MAX_HORIZON_MINUTES for h in horizons):
            raise ValueError(f"horizons must be between 1 minute and {MAX_HORIZON_MINUTES // 60} hours "
                             f"(got {list(horizons_minutes)})")
        since_s = since_utc.timestamp() if since_utc is not None else None
        until_s = until_utc.timestamp() if until_utc is not None else None
        series, skipped = _long_enough(series, since_s, until_s)
        if not series:
            raise ValueError(f"no series has the {MIN_TRAINING_SECONDS / 3600:.0f} hours of data inside the "
                             "training window that training needs (the features look back 24 hours): " + "; ".join(s["reason"] for s in skipped))
        estimators: dict[str, Any] = {}
        adjust: dict[str, float] = {}
        hyper: dict[str, Any] = {}
        search: dict[str, Any] = {}
        metrics: dict[str, Any] = {}
        baseline_q90: dict[str, dict[str, float]] = {}
        samples_per_horizon: dict[str, int] = {}
        first_s, last_s = math.inf, -math.inf
        calibrated_across = False  # whether any adjustment was calibrated on another series' predictions
        with threadpool_limits(limits=1, user_api="openmp"):  # deterministic, and no oversubscription
            for h in horizons:
                parts = [build_samples(s, h, since_s=since_s, until_s=until_s) for s in series]
                parts = [p for p in parts if len(p.origins_s)]
                if not parts:
                    raise ValueError(f"no training samples at horizon {_hours(h)}: every series is shorter than the "
                                     "horizon inside the training window")
                X = np.vstack([p.X for p in parts])
                scale = np.concatenate([p.scale for p in parts])
                level = np.concatenate([p.level for p in parts])
                y = np.concatenate([p.outcome for p in parts])
                seasonal = np.concatenate([p.seasonal for p in parts])
                r = (y - level) / scale
                # Position of each origin and of its target within its own series' training window.
                pos, reach = [], []
                for p in parts:
                    lo, hi = float(p.origins_s[0]), float(p.origins_s[-1]) + h * 60.0
                    span = max(hi - lo, 1.0)
                    pos.append((p.origins_s - lo) / span)
                    reach.append((p.origins_s + h * 60.0 - lo) / span)
                    first_s, last_s = min(first_s, lo), max(last_s, hi)
                pos_a, reach_a = np.concatenate(pos), np.concatenate(reach)
                group = np.concatenate([np.full(len(p.origins_s), i) for i, p in enumerate(parts)])
                fit, val = reach_a <= TUNE_FRACTION, pos_a >= TUNE_FRACTION
                if fit.sum() < 50 or val.sum() < 20:
                    raise ValueError(f"too little history to train at horizon {_hours(h)} ({len(y)} samples); give "
                                     "longer series (at least a few days)")
                missing = _all_missing(X[fit])
                if missing:
                    # scikit-learn cannot bin a feature without a value ("window shape cannot be larger than
                    # input array shape"); the seasonal ones need a day behind an origin of the fitting slice
                    need = (DAY_SECONDS + h * 60.0) / TUNE_FRACTION / 3600
                    raise ValueError(
                        f"cannot train at horizon {_hours(h)}: no series has a fitting sample with "
                        f"{', '.join(missing)} (a day of history before the origin), so a series needs at least "
                        f"{need:.1f} hours inside the training window there; "
                        + ", ".join(f"{s.name} has {_span_s(s, since_s, until_s) / 3600:.1f}" for s in series)
                        + ". Give longer series, or leave the horizon out (--horizons)")
                samples_per_horizon[str(h)] = int(len(y))
                # The validation slice's median as it will be issued (set once the 0.5 quantile is chosen):
                # the 90th percentile is issued at least at the median, so its candidates are scored so too.
                floor_val = np.zeros(int(val.sum()))
                for q in QUANTILES:
                    tried = []
                    for params in candidates:
                        if progress:
                            progress(f"horizon {_hours(h)}, quantile {q}: trying {params}")
                        est = HistGradientBoostingRegressor(loss="quantile", quantile=q, early_stopping=False,
                                                            random_state=seed, **params)
                        est.fit(X[fit], r[fit], sample_weight=scale[fit])
                        f_val = est.predict(X[val])
                        loss = pinball(y[val], np.maximum(level[val] + scale[val] * f_val, floor_val), q)
                        tried.append((loss, params, f_val))
                    best_i = min(range(len(tried)), key=lambda i: tried[i][0])  # first of the best on ties
                    _, best, f_val = tried[best_i]
                    f_val_same = f_val
                    if CALIBRATION == "other_series" and len(parts) >= 2:
                        # The model will serve clusters it has not seen: calibrate on predictions for each
                        # series' validation slice from a model fitted on the *other* series only (the
                        # same-series prediction stays where the others have too little to fit on).
                        f_val = f_val_same.copy()
                        val_group = group[val]
                        for i in range(len(parts)):
                            others = fit & (group != i)
                            if others.sum() < 50 or not (val_group == i).any() or _all_missing(X[others]):
                                continue  # (a feature only series i has: the others cannot be fitted alone)
                            est = HistGradientBoostingRegressor(loss="quantile", quantile=q, early_stopping=False,
                                                                random_state=seed, **best)
                            est.fit(X[others], r[others], sample_weight=scale[others])
                            f_val[val_group == i] = est.predict(X[val & (group == i)])
                            calibrated_across = True
                    if q == 0.5:
                        # Keep the share of the predicted change that scores best on the validation slice,
                        # among the shares no worse than the last value (share 0) on *every* series' slice,
                        # both as predicted by the model fitted on all series and by the one fitted on the
                        # others: the median must not lose to the last value later in time on a cluster
                        # it has seen, nor on one it has not, not just on average.
                        val_group = group[val]

                        def median_loss(a: float, rows: np.ndarray, pred: np.ndarray) -> float:
                            return pinball(y[val][rows], np.maximum(level[val][rows] + a * scale[val][rows]
                                                                    * pred[rows], 0.0), 0.5)

                        every = np.ones(len(val_group), dtype=bool)
                        groups = [val_group == i for i in range(len(parts)) if (val_group == i).any()]
                        allowed = [a for a in MEDIAN_SHRINK
                                   if all(median_loss(a, g, pred) <= median_loss(0.0, g, pred)
                                          for g in groups for pred in (f_val_same, f_val))]
                        adjust[_key(h, q)] = min(allowed, key=lambda a: median_loss(a, every, f_val))
                        floor_val = np.maximum(level[val] + adjust[_key(h, q)] * scale[val] * f_val_same, 0.0)
                    else:
                        # Split-conformal correction: the offset (in units of the scale) that makes the
                        # validation slice's coverage 90% (finite-sample rank), added to every forecast.
                        e = np.sort((y[val] - level[val]) / scale[val] - f_val)
                        adjust[_key(h, q)] = float(e[min(math.ceil((len(e) + 1) * q), len(e)) - 1])
                    est = HistGradientBoostingRegressor(loss="quantile", quantile=q, early_stopping=False,
                                                        random_state=seed, **best)
                    if progress:
                        progress(f"horizon {_hours(h)}, quantile {q}: fitting on {len(y)} samples")
                    est.fit(X, r, sample_weight=scale)
                    estimators[_key(h, q)] = est
                    hyper[_key(h, q)] = best
                    search[_key(h, q)] = [{"params": p, "validation_pinball": round(v, 6)} for v, p, _ in tried]
                model = cls(estimators, horizons, {"adjustments": adjust})
                p50, p90 = model.quantiles(X, scale, level, h)
                known = np.isfinite(seasonal)
                baseline_q90[str(h)] = {
                    "last_value": float(np.quantile((y - level) / scale, 0.9)),
                    "seasonal_naive": float(np.quantile((y[known] - seasonal[known]) / scale[known], 0.9))
                    if known.any() else 0.0,
                }
                metrics[str(h)] = _scores(y, p50, p90)
        metadata = {
            "format_version": FORMAT_VERSION,
            "kind": "demand",
            "features": list(FEATURES),
            "grid_minutes": GRID_SECONDS / 60,
            "lookback_hours": DAY_SECONDS / 3600,
            "horizons_minutes": list(horizons),
            "quantiles": list(QUANTILES),
            "training_window_utc": [_utc(first_s), _utc(last_s)],
            "training_until_utc": _utc(until_s) if until_s is not None else None,
            "training_series": [{"source": s.source, "gpu_model": s.gpu_model, "rows": int(len(s.times_s)),
                                 "start_utc": _utc(float(s.times_s[0])), "end_utc": _utc(float(s.times_s[-1])),
                                 "sha256": series_digest(s)} for s in series],
            "skipped_series": skipped,
            "samples": samples_per_horizon,
            "training_metrics": metrics,
            "baseline_residual_q90": baseline_q90,
            "seed": seed,
            "hyperparameters": hyper,
            "adjustments": adjust,
            "calibration": "other_series" if calibrated_across else "same_series",
            "hyperparameter_search": search,
            "versions": modelfiles.versions(),
        }
        return cls(estimators, horizons, metadata)

    # ------------------------------------------------------------------ use

    def quantiles(self, X: np.ndarray, scale: np.ndarray, level: np.ndarray,
                  horizon_minutes: int) -> tuple[np.ndarray, np.ndarray]:
        """``(p50, p90)`` in GPUs for feature rows of one horizon."""
        from threadpoolctl import threadpool_limits

        if horizon_minutes not in self.horizons_minutes:
            raise ValueError(f"the model has no {horizon_minutes}-minute horizon (it has "
                             f"{', '.join(str(h) for h in self.horizons_minutes)} minutes)")
        k50, k90 = _key(horizon_minutes, 0.5), _key(horizon_minutes, 0.9)
        shrink, offset = self.metadata["adjustments"][k50], self.metadata["adjustments"][k90]
        with threadpool_limits(limits=1, user_api="openmp"):
            p50 = np.maximum(level + shrink * scale * self.estimators[k50].predict(X), 0.0)
            p90 = np.maximum(level + scale * (self.estimators[k90].predict(X) + offset), p50)
        return p50, p90

    def forecast(self, series: DemandSeries, now: datetime) -> tuple[DemandForecast, ...]:
        """One forecast per horizon for one series, from its data at or before ``now``."""
        t = np.array([_timestamp(now)])
        out = []
        for h in self.horizons_minutes:
            X, scale, level = features(series, t, h)
            if not np.isfinite(level[0]):
                return ()
            p50, p90 = self.quantiles(X, scale, level, h)
            out.append(DemandForecast(series.gpu_model, h, float(p50[0]), float(p90[0])))
        return tuple(out)

    def predict(self, series_up_to_now: Any, now: datetime) -> tuple[DemandForecast, ...]:
        """Forecasts per GPU model and horizon (sorted) from a DataFrame with the
        columns ``time_utc`` (UTC), ``gpu_model`` and ``gpus``, using only rows at or
        before ``now``. A GPU model with no such row gets no forecast; several rows
        at one time count as the last of them."""
        import pandas as pd

        missing = {"time_utc", "gpu_model", "gpus"} - set(series_up_to_now.columns)
        if missing:
            raise ValueError(f"the demand series lacks the column(s) {', '.join(sorted(missing))}")
        frame = pd.DataFrame({"t": pd.to_datetime(series_up_to_now["time_utc"], utc=True),
                              "gpu_model": series_up_to_now["gpu_model"].astype(str),
                              "gpus": pd.to_numeric(series_up_to_now["gpus"], errors="raise").astype(float)})
        frame = frame[frame["t"] <= pd.Timestamp(_timestamp(now), unit="s", tz="UTC")]
        if frame.empty:
            return ()
        frame["s"] = (frame["t"] - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
        out: list[DemandForecast] = []
        for gpu_model, rows in sorted(frame.groupby("gpu_model", sort=True), key=lambda item: item[0]):
            rows = rows.sort_values("s", kind="stable").drop_duplicates("s", keep="last")
            values = rows["gpus"].to_numpy()
            if not np.all(np.isfinite(values)) or np.any(values < 0):
                raise ValueError(f"{gpu_model}: GPU counts must be finite and at least 0")
            out.extend(self.forecast(DemandSeries("runtime", gpu_model, rows["s"].to_numpy(), values), now))
        return tuple(out)

    # ------------------------------------------------------------------ files

    def save(self, directory: str | Path) -> Path:
        return modelfiles.save(directory, self.estimators, dict(self.metadata))

    @classmethod
    def load(cls, directory: str | Path, *, allow_version_mismatch: bool = False) -> "DemandModel":
        """Load a saved model. Refuses (``ModelError``) a model saved with another
        scikit-learn version unless ``allow_version_mismatch`` (then warns)."""
        path, meta = modelfiles.read_metadata(directory)
        meta_path, est_path = path / "model.json", path / "model.joblib"
        horizons = meta.get("horizons_minutes") if isinstance(meta, dict) else None
        if not isinstance(meta, dict) or meta.get("kind") != "demand" or meta.get("format_version") != FORMAT_VERSION \
                or not isinstance(horizons, list) or not horizons \
                or not all(isinstance(h, int) and 0 < h <= MAX_HORIZON_MINUTES for h in horizons) \
                or not isinstance(meta.get("versions"), dict):
            raise modelfiles.not_a_model_of(meta_path, meta, "demand", FORMAT_VERSION)
        if meta.get("features") != list(FEATURES) or meta.get("grid_minutes") != GRID_SECONDS / 60:
            raise ModelError(f"{meta_path}: the model was trained on other features than this version computes; "
                             "retrain it (fleetctl forecast train demand)")
        estimators = modelfiles.load_estimator(path, meta, kind="demand",
                                                allow_version_mismatch=allow_version_mismatch)
        wanted = {_key(h, q) for h in horizons for q in QUANTILES}
        adjustments = meta.get("adjustments")
        if not isinstance(adjustments, dict) or set(adjustments) != wanted \
                or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in adjustments.values()):
            raise ModelError(f"{meta_path}: the adjustments do not match the horizons {horizons} minutes")
        if not isinstance(estimators, dict) or set(estimators) != wanted \
                or not all(hasattr(e, "predict") for e in estimators.values()):
            raise ModelError(f"{est_path}: does not hold the regressors for horizons {horizons} minutes and "
                             f"quantiles {list(QUANTILES)}")
        return cls(estimators, tuple(horizons), meta)


def _timestamp(now: datetime) -> float:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now={now!r} has no time zone; pass an aware UTC datetime")
    return now.timestamp()


# =========================================================================== evaluation


def evaluate(model: DemandModel, series: Sequence[DemandSeries], horizon_minutes: int, *,
             since_utc: datetime | None = None, until_utc: datetime | None = None) -> dict[str, Any]:
    """Scores at one horizon over the origins of every series with 24 hours of
    history, ``t >= since`` and ``t + h <= until`` (every 5 minutes), beside the
    two baselines. Result: ``{"samples", "mae", "pinball_p90", "p90_coverage",
    "baselines": {"last_value": {"mae", "pinball_p90"}, "seasonal_naive": {...}}}``
    plus ``"_curves"`` (per series: target times, outcome, p50, p90, last value)
    for :func:`forecast_plot` and ``"_skipped"`` (names of series with no origin
    in the window)."""
    if horizon_minutes not in model.horizons_minutes:
        raise ValueError(f"the model has no {horizon_minutes}-minute horizon (it has "
                         f"{', '.join(str(h) for h in model.horizons_minutes)} minutes)")
    q90 = model.metadata["baseline_residual_q90"][str(horizon_minutes)]
    since_s = since_utc.timestamp() if since_utc is not None else None
    until_s = until_utc.timestamp() if until_utc is not None else None
    ys, p50s, p90s, lvs, lv90s, sns, sn90s, curves, skipped = [], [], [], [], [], [], [], [], []
    for s in series:
        smp = build_samples(s, horizon_minutes, since_s=since_s, until_s=until_s, full_day=True)
        if not len(smp.origins_s):
            skipped.append(s.name)
            continue
        p50, p90 = model.quantiles(smp.X, smp.scale, smp.level, horizon_minutes)
        ys.append(smp.outcome)
        p50s.append(p50)
        p90s.append(p90)
        lvs.append(smp.level)
        lv90s.append(smp.level + smp.scale * q90["last_value"])
        sns.append(smp.seasonal)
        sn90s.append(smp.seasonal + smp.scale * q90["seasonal_naive"])
        curves.append((s.name, smp.origins_s + horizon_minutes * 60.0, smp.outcome, p50, p90, smp.level))
    if not ys:
        window = "" if since_s is None and until_s is None else " inside the evaluation window ({} .. {})".format(
            _utc(since_s) if since_s is not None else "the series' start",
            _utc(until_s) if until_s is not None else "their end")
        raise ValueError(f"no evaluation origins: no series has 24 hours of history plus the {horizon_minutes}-minute "
                         f"outcome{window}: {', '.join(skipped)}")
    y, p50, p90 = np.concatenate(ys), np.concatenate(p50s), np.concatenate(p90s)
    lv, lv90, sn, sn90 = (np.concatenate(a) for a in (lvs, lv90s, sns, sn90s))
    model_scores = _scores(y, p50, p90)
    out: dict[str, Any] = {"samples": int(len(y)), **model_scores, "baselines": {}}
    for name, point, upper in (("last_value", lv, lv90), ("seasonal_naive", sn, sn90)):
        out["baselines"][name] = {"mae": round(float(np.mean(np.abs(y - point))), 6),
                                  "pinball_p90": round(pinball(y, upper, 0.9), 6)}
    out["_curves"] = curves
    out["_skipped"] = skipped  # series with no origin in the window (too short): named by the CLI
    return out


def forecast_plot(curves: list[tuple], horizon_minutes: int, path: str | Path) -> Path:
    """Forecast versus actual, one panel per series (at most 6): the outcome
    ``y(t + h)``, the median, the 90th percentile and the last value, against
    the target time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = curves[:6]
    fig, axes = plt.subplots(len(shown), 1, figsize=(11, 3.2 * len(shown)), squeeze=False)
    for ax, (name, target_s, y, p50, p90, last) in zip(axes[:, 0], shown):
        times = np.array(target_s, dtype="datetime64[s]")
        ax.fill_between(times, p50, p90, step="post", alpha=0.25, label="median .. 90th percentile")
        ax.step(times, y, where="post", color="black", lw=1.0, label="actual")
        ax.step(times, p50, where="post", lw=1.0, label="median forecast")
        ax.step(times, last, where="post", lw=0.8, ls=":", color="grey", label="last value")
        ax.set_title(f"{Path(name).name}, +{horizon_minutes} min")  # the file, not where it was
        ax.set_ylabel("GPUs demanded")
        ax.legend(loc="upper left", fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
