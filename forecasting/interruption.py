"""Interruption risk: the probability that an offer's spot capacity is lost within a horizon.

**Label.** On a fixed time grid (``STEP``, 10 minutes, the same for every trace
whatever its tick length), a sample is an offer at a grid time ``t`` at which it
has spot capacity; it is positive when the offer loses capacity (a tick whose
capacity is below the tick before) within ``(t, t + horizon]``. The end of a
trace is censoring, not a loss; samples whose horizon passes the end of their
trace are dropped.

**Features** (all defined in time, and computed from data at or before ``t``
only): availability (share of grid points with capacity) over the last 1, 6 and
24 hours; capacity relative to its 24-hour maximum; hours since the last loss
and since the current available stretch began (capped at 72); losses in the
last 1, 6 and 24 hours; losses of *other* offers in the same zone and of the
same instance type in other zones, and of the whole market, in the last 1 and 6
hours; spot/on-demand price ratio and its change over 6 hours; hour of day and
day of week.

**Model.** scikit-learn's ``HistGradientBoostingClassifier`` fitted on the
first 80% (in time) of the training window, its probabilities calibrated with
isotonic regression on the last 20% (``CalibratedClassifierCV`` over a
``FrozenEstimator``). **Split by time**: training samples end (``t +
horizon``) before the split time; evaluation samples start at or after it.

**Baselines.** ``base_rate``: the training window's positive rate, for every
sample. ``recent_rate``: the offer's own losses in the last 24 hours per hour
of availability, turned into a probability over the horizon
(``1 - exp(-rate x horizon)``).

**At run time** :meth:`InterruptionModel.predict` gives, for every spot offer
of a :class:`~fleetctl.sim.market.Market`, the probability at the grid point at
or before ``now``: features are precomputed once per market (each grid point's
features use only data up to it), so a call is a lookup.
:func:`market_from_observations` turns the controller's recorded offer
observations (``Store.offer_observations``) and reclaims into such a market,
so the daemon forecasts from what it has seen itself.
"""

from __future__ import annotations

import json
import math
import platform
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from fleetctl import model as fm
from fleetctl.sim.market import Market, MarketTrace

STEP = timedelta(minutes=10)
FORMAT_VERSION = 1
FEATURES = (
    "avail_1h", "avail_6h", "avail_24h", "capacity_rel_24h", "hours_since_loss", "hours_available",
    "losses_1h", "losses_6h", "losses_24h",
    "zone_other_losses_1h", "zone_other_losses_6h", "type_other_losses_1h", "type_other_losses_6h",
    "market_other_losses_1h", "market_other_losses_6h",
    "price_ratio", "price_ratio_change_6h", "hour_of_day", "day_of_week",
)
_CAP_HOURS = 72.0


class ModelError(Exception):
    """A model directory that cannot be used (missing, corrupt, another library version)."""


# =========================================================================== features


@dataclass(frozen=True)
class Samples:
    """Feature rows of one market: ``X[i]`` for offer ``keys[i]`` at ``times[i]``
    (seconds since the market's start), ``y[i]`` the label (-1: unknown,
    horizon past the trace's end), ``available[i]`` whether the offer had
    capacity then, ``recent[i]`` the recent-rate baseline's probability."""

    X: np.ndarray
    y: np.ndarray
    available: np.ndarray
    recent: np.ndarray
    times: np.ndarray
    keys: tuple[str, ...]
    offer_index: np.ndarray
    start_utc: datetime
    end_utc: datetime


def _grid(market: Market) -> np.ndarray:
    span = (market.end_utc - market.start_utc).total_seconds()
    return np.arange(0.0, span, STEP.total_seconds())


def _trace_arrays(trace: MarketTrace, origin: datetime, grid: np.ndarray) -> dict[str, np.ndarray]:
    """Per grid point: capacity, spot and on-demand price; and the trace's loss times (s since origin)."""
    offset = (trace.start_utc - origin).total_seconds()
    gap = trace.gap_seconds
    cap = np.asarray(trace.capacity, dtype=float)
    ticks = np.floor((grid - offset) / gap).astype(np.int64)
    inside = (ticks >= 0) & (ticks < len(cap))
    cap_g = np.where(inside, cap[np.clip(ticks, 0, len(cap) - 1)], 0.0)
    if trace.prices is not None:
        prices = np.asarray(trace.prices, dtype=float)
        spot_g = prices[np.clip(ticks, 0, len(prices) - 1)]
    else:
        spot_g = np.full(len(grid), trace.offer_spot.usd_per_hour)
    drops = np.nonzero(cap[1:] < cap[:-1])[0] + 1
    loss_times = offset + drops * gap
    end = offset + len(cap) * gap
    return {"cap": cap_g, "spot": spot_g, "od": np.full(len(grid), trace.offer_on_demand.usd_per_hour),
            "loss_times": loss_times, "end": np.array(end), "start": np.array(offset)}


def _count_upto(loss_times: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.searchsorted(loss_times, t, side="right").astype(float)


def _window_mean(values: np.ndarray, steps: int) -> np.ndarray:
    c = np.concatenate([[0.0], np.cumsum(values)])
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(0, idx - steps)
    return (c[idx] - c[lo]) / (idx - lo)


def _window_max(values: np.ndarray, steps: int) -> np.ndarray:
    from numpy.lib.stride_tricks import sliding_window_view

    padded = np.concatenate([np.zeros(steps - 1), values])
    return sliding_window_view(padded, steps).max(axis=1)


def build_samples(market: Market, horizon: timedelta = timedelta(hours=1)) -> Samples:
    """Every (offer, grid time) of ``market`` with its features and label (see the module docstring)."""
    grid = _grid(market)
    step_s = STEP.total_seconds()
    H = horizon.total_seconds()
    per = [_trace_arrays(t, market.start_utc, grid) for t in market.traces]
    counts = {w: [] for w in (1, 6, 24)}
    for a in per:
        for w in counts:
            counts[w].append(_count_upto(a["loss_times"], grid) - _count_upto(a["loss_times"], grid - w * 3600))
    rows, labels, avail, recent, times, index = [], [], [], [], [], []
    hours = np.array([(market.start_utc + timedelta(seconds=float(s))).hour for s in grid], dtype=float)
    days = np.array([(market.start_utc + timedelta(seconds=float(s))).weekday() for s in grid], dtype=float)
    for k, (trace, a) in enumerate(zip(market.traces, per)):
        up = (a["cap"] > 0).astype(float)
        feats: dict[str, np.ndarray] = {
            "avail_1h": _window_mean(up, int(3600 / step_s)),
            "avail_6h": _window_mean(up, int(6 * 3600 / step_s)),
            "avail_24h": _window_mean(up, int(24 * 3600 / step_s)),
        }
        peak = _window_max(a["cap"], int(24 * 3600 / step_s))
        feats["capacity_rel_24h"] = np.where(peak > 0, a["cap"] / np.maximum(peak, 1e-9), 0.0)
        last = np.searchsorted(a["loss_times"], grid, side="right") - 1
        since = np.where(last >= 0, (grid - a["loss_times"][np.maximum(last, 0)]) / 3600, _CAP_HOURS)
        feats["hours_since_loss"] = np.minimum(since, _CAP_HOURS)
        stretch = np.zeros(len(grid))
        run = 0.0
        for g in range(len(grid)):
            run = run + step_s / 3600 if up[g] else 0.0
            stretch[g] = min(run, _CAP_HOURS)
        feats["hours_available"] = stretch
        for w in (1, 6, 24):
            feats[f"losses_{w}h"] = counts[w][k]
        zone, itype = trace.offer_spot.placement_domain, trace.offer_spot.instance_type.name
        for w in (1, 6):
            same_zone = [counts[w][j] for j, t in enumerate(market.traces)
                         if j != k and t.offer_spot.placement_domain == zone]
            same_type = [counts[w][j] for j, t in enumerate(market.traces)
                         if j != k and t.offer_spot.instance_type.name == itype and t.offer_spot.placement_domain != zone]
            others = [counts[w][j] for j in range(len(market.traces)) if j != k]
            feats[f"zone_other_losses_{w}h"] = np.sum(same_zone, axis=0) if same_zone else np.zeros(len(grid))
            feats[f"type_other_losses_{w}h"] = np.sum(same_type, axis=0) if same_type else np.zeros(len(grid))
            feats[f"market_other_losses_{w}h"] = np.sum(others, axis=0) if others else np.zeros(len(grid))
        ratio = a["spot"] / np.maximum(a["od"], 1e-9)
        lag = int(6 * 3600 / step_s)
        feats["price_ratio"] = ratio
        feats["price_ratio_change_6h"] = ratio - np.concatenate([np.full(lag, ratio[0]), ratio[:-lag]])[:len(ratio)]
        feats["hour_of_day"] = hours
        feats["day_of_week"] = days
        X = np.column_stack([feats[f] for f in FEATURES])
        future = _count_upto(a["loss_times"], grid + H) - _count_upto(a["loss_times"], grid)
        known = (grid + H <= float(a["end"])) & (grid >= float(a["start"]))
        y = np.where(known, (future > 0).astype(float), -1.0)
        rate = counts[24][k] / np.maximum(feats["avail_24h"] * 24.0, 1.0)
        rows.append(X)
        labels.append(y)
        avail.append(a["cap"] > 0)
        recent.append(1.0 - np.exp(-rate * H / 3600))
        times.append(grid)
        index.append(np.full(len(grid), k))
    return Samples(np.vstack(rows), np.concatenate(labels), np.concatenate(avail), np.concatenate(recent),
                   np.concatenate(times), tuple(t.offer_spot.key for t in market.traces), np.concatenate(index),
                   market.start_utc, market.end_utc)


def split_time(market: Market, train_fraction: float) -> float:
    """Seconds after the market's start where training ends and evaluation begins."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train fraction must be between 0 and 1 (got {train_fraction})")
    return (market.end_utc - market.start_utc).total_seconds() * train_fraction


def training_mask(s: Samples, split_s: float, horizon: timedelta) -> np.ndarray:
    """Labelled samples with capacity whose label window ends by the split (no look into evaluation)."""
    return s.available & (s.y >= 0) & (s.times + horizon.total_seconds() <= split_s)


def evaluation_mask(s: Samples, split_s: float) -> np.ndarray:
    return s.available & (s.y >= 0) & (s.times >= split_s)


# =========================================================================== the model


def _versions() -> dict[str, str]:
    import pandas
    import sklearn

    return {"scikit-learn": sklearn.__version__, "numpy": np.__version__, "pandas": pandas.__version__,
            "python": platform.python_version()}


def scores(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import brier_score_loss, roc_auc_score

    auc = float(roc_auc_score(y, p)) if 0 < y.sum() < len(y) else float("nan")
    return {"auc": round(auc, 6), "brier": round(float(brier_score_loss(y, p)), 6)}


@dataclass
class InterruptionModel:
    """A calibrated classifier and what it was trained on."""

    estimator: Any
    horizon_minutes: int
    metadata: dict[str, Any]
    _cache: dict[int, tuple[Market, Samples, dict[int, np.ndarray]]] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ training

    @classmethod
    def train(cls, markets: Iterable[Market], *, horizon: timedelta = timedelta(hours=1),
              train_fraction: float = 0.7, seed: int = 0,
              progress: Callable[[str], None] | None = None) -> "InterruptionModel":
        """Fit on the first ``train_fraction`` of each market's period (see the module docstring)."""
        from sklearn.calibration import CalibratedClassifierCV
        from sklearn.ensemble import HistGradientBoostingClassifier
        from sklearn.frozen import FrozenEstimator

        Xs, ys, ts, windows = [], [], [], []
        for market in markets:
            if progress:
                progress(f"features of {len(market.traces)} offers")
            s = build_samples(market, horizon)
            split = split_time(market, train_fraction)
            m = training_mask(s, split, horizon)
            Xs.append(s.X[m])
            ys.append(s.y[m])
            ts.append(s.times[m] / split)  # position within the training window (0..1), for the inner split
            windows.append([market.start_utc.isoformat(), (market.start_utc + timedelta(seconds=split)).isoformat()])
        X, y, pos = np.vstack(Xs), np.concatenate(ys), np.concatenate(ts)
        if len(y) == 0 or y.sum() == 0 or y.sum() == len(y):
            raise ValueError("the training window has no losses (or nothing but losses): nothing to learn from")
        fit, cal = pos < 0.8, pos >= 0.8
        if y[cal].sum() == 0 or y[fit].sum() == 0:
            raise ValueError("too few losses in the training window to fit and calibrate")
        base = HistGradientBoostingClassifier(max_iter=300, learning_rate=0.05, max_leaf_nodes=15,
                                              min_samples_leaf=40, l2_regularization=1.0, random_state=seed)
        if progress:
            progress(f"fitting on {int(fit.sum())} samples, calibrating on {int(cal.sum())}")
        base.fit(X[fit], y[fit])
        calibrated = CalibratedClassifierCV(FrozenEstimator(base), method="isotonic")
        calibrated.fit(X[cal], y[cal])
        train_p = calibrated.predict_proba(X)[:, 1]
        metadata = {
            "format_version": FORMAT_VERSION,
            "kind": "interruption",
            "features": list(FEATURES),
            "step_minutes": STEP.total_seconds() / 60,
            "horizon_minutes": int(horizon.total_seconds() // 60),
            "train_fraction": train_fraction,
            "training_windows_utc": windows,
            "samples": int(len(y)),
            "positives": int(y.sum()),
            "base_rate": float(y.mean()),
            "training_metrics": scores(y, train_p),
            "seed": seed,
            "versions": _versions(),
            "trained_at_utc": None,
        }
        return cls(calibrated, metadata["horizon_minutes"], metadata)

    # ------------------------------------------------------------------ use

    def probabilities(self, X: np.ndarray) -> np.ndarray:
        return self.estimator.predict_proba(X)[:, 1]

    def predict(self, history: Market, now: datetime) -> dict[str, float]:
        """Offer key -> probability that its spot capacity is lost within the
        horizon, at the grid point at or before ``now`` (data up to it only)."""
        cached = self._cache.get(id(history))
        if cached is None or cached[0] is not history:
            s = build_samples(history, timedelta(minutes=self.horizon_minutes))
            cached = (history, s, {})
            self._cache[id(history)] = cached
        market, s, memo = cached
        offset = (now - market.start_utc).total_seconds()
        if offset < 0:
            return {k: float(self.metadata["base_rate"]) for k in s.keys}
        n = len(s.times) // len(s.keys)
        g = min(int(offset // STEP.total_seconds()), n - 1)
        if g not in memo:
            memo[g] = self.probabilities(s.X[np.arange(len(s.keys)) * n + g])
        return {k: float(p) for k, p in zip(s.keys, memo[g])}

    # ------------------------------------------------------------------ files

    def save(self, directory: str | Path) -> Path:
        import joblib

        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        joblib.dump(self.estimator, path / "model.joblib")
        meta = dict(self.metadata)
        (path / "model.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | Path, *, allow_version_mismatch: bool = False) -> "InterruptionModel":
        """Load a saved model. Refuses (``ModelError``) a model saved with another
        scikit-learn version unless ``allow_version_mismatch`` (then warns)."""
        import joblib

        path = Path(directory)
        meta_path, est_path = path / "model.json", path / "model.joblib"
        if not path.is_dir():
            raise ModelError(f"{path}: no such model directory")
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelError(f"{meta_path}: cannot read the model's metadata ({exc})") from exc
        if meta.get("kind") != "interruption" or meta.get("format_version") != FORMAT_VERSION:
            raise ModelError(f"{meta_path}: not an interruption model of format {FORMAT_VERSION}")
        saved, here = meta.get("versions", {}).get("scikit-learn"), _versions()["scikit-learn"]
        if saved != here:
            text = (f"{path}: the model was saved with scikit-learn {saved}, this is {here}; its predictions may "
                    f"differ or fail. Retrain it (fleetctl forecast train interruption)")
            if not allow_version_mismatch:
                raise ModelError(text + ", or pass --allow-version-mismatch to use it anyway")
            warnings.warn(text, stacklevel=2)
        try:
            estimator = joblib.load(est_path)
        except Exception as exc:  # noqa: BLE001 - unpickling raises anything; report it with the path
            raise ModelError(f"{est_path}: cannot load the model ({type(exc).__name__}: {exc})") from exc
        return cls(estimator, int(meta["horizon_minutes"]), meta)


# =========================================================================== evaluation


def evaluate(model: InterruptionModel, markets: Iterable[Market]) -> dict[str, Any]:
    """Scores on the part of each market after the model's training split, beside the two baselines."""
    horizon = timedelta(minutes=model.horizon_minutes)
    frac = float(model.metadata["train_fraction"])
    ys, ps, rs, ts = [], [], [], []
    for market in markets:
        s = build_samples(market, horizon)
        m = evaluation_mask(s, split_time(market, frac))
        ys.append(s.y[m])
        ps.append(model.probabilities(s.X[m]))
        rs.append(s.recent[m])
        ts.append(s.times[m])
    y, p, r = np.concatenate(ys), np.concatenate(ps), np.concatenate(rs)
    if len(y) == 0:
        raise ValueError("no evaluation samples after the training split")
    base = np.full(len(y), float(model.metadata["base_rate"]))
    out = {"samples": int(len(y)), "positives": int(y.sum()), **scores(y, p),
           "baselines": {"base_rate": scores(y, base), "recent_rate": scores(y, r)}}
    out["_arrays"] = (y, p)  # for the reliability plot; dropped from JSON
    return out


def reliability_plot(y: np.ndarray, p: np.ndarray, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.calibration import calibration_curve

    frac, mean = calibration_curve(y, p, n_bins=10, strategy="quantile")
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], ":", color="grey", label="perfectly calibrated")
    ax.plot(mean, frac, "o-", label="model")
    ax.set_xlabel("predicted probability of a loss within the horizon")
    ax.set_ylabel("observed frequency")
    ax.legend()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


# =========================================================================== the controller's own history


def market_from_observations(rows: Iterable[dict[str, Any]], start_utc: datetime, end_utc: datetime,
                             gap_seconds: float = 300.0,
                             reclaims: Iterable[tuple[str, datetime]] = ()) -> Market:
    """A :class:`Market` from ``Store.offer_observations()`` rows (a change log:
    an offer listed = capacity 1 until it is seen unlisted) on a grid of
    ``gap_seconds`` from ``start_utc`` to ``end_utc``; a reclaim ``(offer_key,
    at)`` the controller handled forces capacity 0 at that tick. On-demand
    price: the row's, else 3x the spot price (a documented placeholder; only
    the price-ratio features use it). ``ValueError`` without observations."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_key.setdefault(r["offer_key"], []).append(r)
    if not by_key or end_utc <= start_utc:
        raise ValueError("no offer observations to build a market from")
    n = max(1, int((end_utc - start_utc).total_seconds() // gap_seconds))
    lost: dict[str, list[datetime]] = {}
    for key, at in reclaims:
        lost.setdefault(key, []).append(at)
    traces = []
    for key in sorted(by_key):
        obs = sorted(by_key[key], key=lambda r: r["observed_at_utc"])
        offer = _offer_from_key(key, next((r["usd_per_hour"] for r in obs if r["usd_per_hour"]), 1.0))
        od_price = next((r["on_demand_usd_per_hour"] for r in obs if r["on_demand_usd_per_hour"]), None) \
            or offer.usd_per_hour * 3
        cap, prices = [0] * n, [offer.usd_per_hour] * n
        j, state, price = 0, 0, offer.usd_per_hour
        for i in range(n):
            t_end = start_utc + timedelta(seconds=(i + 1) * gap_seconds)
            while j < len(obs) and obs[j]["observed_at_utc"] < t_end:
                state = 1 if obs[j]["available"] else 0
                price = obs[j]["usd_per_hour"] or price
                j += 1
            cap[i], prices[i] = state, price
        for at in lost.get(key, ()):
            i = int((at - start_utc).total_seconds() // gap_seconds)
            if 0 <= i < n:
                cap[i] = 0
        traces.append(MarketTrace(offer, fm.Offer(offer.instance_type, offer.region, offer.zone,
                                                  fm.Market.ON_DEMAND, od_price),
                                  start_utc, gap_seconds, tuple(cap), tuple(prices)))
    return Market(tuple(traces), start_utc)


def _offer_from_key(key: str, price: float) -> fm.Offer:
    """Rebuild a spot offer from its key (``provider/region/zone/type/spot``) and the catalog's type."""
    from providers.catalog import instance_types

    parts = key.split("/")
    if len(parts) != 5:
        raise ValueError(f"offer key {key!r} is not provider/region/zone/type/market")
    provider, region, zone, name, _ = parts
    zone = "" if zone == "*" else zone
    it = instance_types().get((provider, name))
    if it is None:
        it = fm.InstanceType(provider=provider, name=name, vcpus=1, memory_gib=1.0, gpu_model=None, gpu_count=0,
                             gpu_memory_gib=0.0)
    return fm.Offer(it, region, zone, fm.Market.SPOT, price)


__all__ = ["FEATURES", "InterruptionModel", "ModelError", "STEP", "build_samples", "evaluate",
           "market_from_observations", "reliability_plot", "split_time"]
_ = (math, timezone)
