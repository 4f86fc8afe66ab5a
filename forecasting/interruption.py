"""Interruption risk: the probability that an offer's spot capacity is lost within a horizon.

**Label.** On a fixed time grid (``STEP``, 10 minutes from the market's start,
the same for every trace whatever its tick length), a sample is an offer at a
grid time ``t`` at which it has spot capacity; it is positive when its capacity
drops below its value at ``t`` somewhere in ``(t, t + horizon]`` (for a 1-node
trace: the node's capacity goes to 0; a rise and a fall back to the value at
``t`` is not a loss). The end of a trace is censoring, not a loss: samples
whose horizon reaches the end of their trace are dropped (label -1).

**Features** (all defined in time, computed from the ticks that began at or
before ``t`` only, at *any* ``t``, not just grid points): availability (share
of the time with capacity) over the last 1, 6 and 24 hours; capacity relative
to its 24-hour maximum; hours since the last loss and since the current
available stretch began (capped at 72); losses in the last 1, 6 and 24 hours;
losses of *other* offers in the same zone, of the same instance type in other
zones, and of the whole market, in the last 1 and 6 hours; spot/on-demand price
ratio and its change over 6 hours; hour of day and day of week. A loss is the
start of a tick whose capacity is below the tick before.

**Model.** scikit-learn's ``HistGradientBoostingClassifier``. **Split by
time**: training samples' label windows end (``t + horizon``) by the split
time; evaluation samples start at or after it. Inside the training window
only: the hyperparameters (``CANDIDATES``) are chosen by AUC on its [60%, 80%)
slice after fitting on [0, 60%); the chosen one is refitted on [0, 80%) and its
probabilities calibrated with isotonic regression on the last 20%
(``CalibratedClassifierCV`` over a ``FrozenEstimator``); at each inner
boundary, samples whose label window crosses it are dropped. Seeded; OpenMP is
limited to one thread while fitting and predicting (deterministic, and on a
busy 2-core machine the default threading made fitting 400x slower).

**Baselines.** ``base_rate``: the training window's positive rate, for every
sample. ``recent_rate``: the offer's own losses in the last 24 hours per hour
of availability (at least one hour), turned into a probability over the
horizon (``1 - exp(-rate x horizon)``).

**At run time** :meth:`InterruptionModel.predict` gives, for every spot offer
of a :class:`~fleetctl.sim.market.Market`, the probability at ``now`` from
the data at or before ``now``: the market is indexed once (per-trace
cumulative arrays, cached per market object) and a call computes one feature
row per offer by binary search (about 4 ms for 9 offers).
:func:`market_from_observations` turns the controller's recorded offer
observations (``Store.offer_observations``) and reclaims into such a market,
so the daemon forecasts from what it has seen itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from fleetctl import model as fm
from fleetctl.sim.market import Market, MarketTrace
from forecasting import modelfiles
from forecasting.modelfiles import ModelError

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
#: Hyperparameters tried, each scored on a later slice of the training window only.
CANDIDATES = (
    {"max_iter": 300, "learning_rate": 0.05, "max_leaf_nodes": 15, "min_samples_leaf": 40, "l2_regularization": 1.0},
    {"max_iter": 150, "learning_rate": 0.05, "max_leaf_nodes": 7, "min_samples_leaf": 100, "l2_regularization": 1.0},
    {"max_iter": 400, "learning_rate": 0.03, "max_leaf_nodes": 31, "min_samples_leaf": 20, "l2_regularization": 0.1},
)




# =========================================================================== features


@dataclass(frozen=True)
class Samples:
    """Feature rows of one market: ``X[i]`` for offer ``keys[offer_index[i]]`` at
    ``times[i]`` (seconds since the market's start), ``y[i]`` the label (-1:
    unknown, the horizon reaches the trace's end or the time is before its
    start), ``available[i]`` whether the offer had capacity then, ``recent[i]``
    the recent-rate baseline's probability. ``fraction``: the share of the
    usable rows kept (1.0: every row, usable or not; below 1: a seeded sample of
    the usable rows only, see :func:`build_samples`)."""

    X: np.ndarray
    y: np.ndarray
    available: np.ndarray
    recent: np.ndarray
    times: np.ndarray
    keys: tuple[str, ...]
    offer_index: np.ndarray
    start_utc: datetime
    end_utc: datetime
    fraction: float = 1.0


#: The longest market the model samples: a grid point every STEP for every offer costs about a
#: kilobyte of features and tables, so a tiny trace file with a huge tick (the market loader allows
#: 100 years) took gigabytes before "too few losses". The real traces span 45.5 days at most
#: (examples/markets, SkyPilot's spot-traces); the daemon's retraining reads 30 days.
MAX_MARKET_SPAN = timedelta(days=366)


def check_span(market: Market) -> None:
    """``ValueError`` naming the longest trace (its offer) when ``market`` spans
    more than ``MAX_MARKET_SPAN``: refused before any grid is built."""
    span = market.end_utc - market.start_utc
    if span > MAX_MARKET_SPAN:
        longest = max(market.traces, key=lambda t: t.end_utc)
        points = int(MAX_MARKET_SPAN / STEP)
        raise ValueError(f"the market spans {span.total_seconds() / 86400:,.1f} days (to the end of the trace of "
                         f"{longest.offer_spot.key}, {len(longest.capacity)} ticks of {longest.gap_seconds:g} s), "
                         f"more than the {MAX_MARKET_SPAN.days} days ({points} samples of "
                         f"{STEP.total_seconds() / 60:g} minutes per offer) the interruption model reads")


def _grid(market: Market) -> np.ndarray:
    check_span(market)
    span = (market.end_utc - market.start_utc).total_seconds()
    return np.arange(0.0, span, STEP.total_seconds())


def _window_extreme(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, which: str) -> np.ndarray:
    """min or max of ``values[lo..hi]`` for each pair (inclusive; requires ``lo <= hi``).

    Design choice: nothing is kept per trace. A sparse table answered any range in O(1) but held
    ``2 x log2(ticks)`` copies of every trace (1.8 MB for 30 days of 5-minute ticks, so gigabytes
    for a catalog of offers). The windows asked for have a few lengths (24 hours, the horizon), so
    each distinct length is answered with the van Herk / Gil-Werman blocks (a running extreme from
    each block's start and to its end, blocks as long as the window: any window of that length is
    the end of one block and the start of the next), O(ticks) per length; windows clipped at the
    trace's start or end are prefixes or suffixes. Exact: the same elements are compared."""
    op = np.minimum if which == "min" else np.maximum
    n = len(values)
    out = np.empty(len(lo))
    length = hi - lo + 1
    prefix = lo == 0
    suffix = ~prefix & (hi == n - 1)
    if prefix.any():
        out[prefix] = op.accumulate(values)[hi[prefix]]
    if suffix.any():
        out[suffix] = op.accumulate(values[::-1])[::-1][lo[suffix]]
    inner = ~(prefix | suffix)
    for L in np.unique(length[inner]):
        L = int(L)
        sel = inner & (length == L)
        blocks = -(-n // L)
        fill = np.inf if which == "min" else -np.inf
        padded = np.full(blocks * L, fill)
        padded[:n] = values
        grid = padded.reshape(blocks, L)
        from_start = op.accumulate(grid, axis=1).ravel()
        to_end = op.accumulate(grid[:, ::-1], axis=1)[:, ::-1].ravel()
        out[sel] = op(to_end[lo[sel]], from_start[hi[sel]])
    return out


class _TraceIndex:
    """One trace as arrays over its ticks, so any feature at any time ``t``
    (seconds since the market's start) is a few lookups; uses only ticks that
    began at or before ``t``."""

    def __init__(self, trace: MarketTrace, origin: datetime) -> None:
        self.offset = (trace.start_utc - origin).total_seconds()
        self.gap = float(trace.gap_seconds)
        self.cap = np.asarray(trace.capacity, dtype=float)
        self.n = len(self.cap)
        self.end = self.offset + self.n * self.gap
        up = (self.cap > 0).astype(float)
        self.up = up
        self.cum_up = np.concatenate([[0.0], np.cumsum(up)])  # up ticks among the first i
        drops = np.nonzero(self.cap[1:] < self.cap[:-1])[0] + 1
        self.loss_times = self.offset + drops * self.gap
        # first tick of the current run of available ticks (for ticks with capacity)
        starts = np.where(np.concatenate([[True], up[1:] != up[:-1]]), np.arange(self.n), 0)
        self.run_start = np.maximum.accumulate(starts)
        self.prices = None if trace.prices is None else np.asarray(trace.prices, dtype=float)
        self.spot = float(trace.offer_spot.usd_per_hour)
        self.on_demand = float(trace.offer_on_demand.usd_per_hour)

    def tick(self, t: np.ndarray) -> np.ndarray:
        """Tick covering ``t`` (may be < 0 or >= n outside the trace)."""
        return np.floor((t - self.offset) / self.gap).astype(np.int64)

    def capacity(self, t: np.ndarray) -> np.ndarray:
        k = self.tick(t)
        inside = (k >= 0) & (k < self.n)
        return np.where(inside, self.cap[np.clip(k, 0, self.n - 1)], 0.0)

    def up_seconds(self, t: np.ndarray) -> np.ndarray:
        """Seconds with capacity from the trace's start to ``t``."""
        tc = np.clip(t, self.offset, self.end)
        k = np.clip(self.tick(tc), 0, self.n - 1)
        partial = tc - (self.offset + k * self.gap)
        return self.cum_up[k] * self.gap + partial * self.up[k]

    def availability(self, t: np.ndarray, window_s: float) -> np.ndarray:
        """Share of ``(t - window, t]`` with capacity, over the part of it after the trace's start; time
        after the trace's end counts as without capacity (the market's rule: capacity 0 from its end)."""
        lo = np.maximum(t - window_s, self.offset)
        span = t - lo
        return np.where(span > 0, (self.up_seconds(t) - self.up_seconds(lo)) / np.maximum(span, 1e-9), 0.0)

    def losses_upto(self, t: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.loss_times, t, side="right").astype(float)

    def price_ratio(self, t: np.ndarray) -> np.ndarray:
        if self.prices is None:
            spot = np.full(len(t), self.spot)
        else:
            spot = self.prices[np.clip(self.tick(t), 0, self.n - 1)]
        return spot / max(self.on_demand, 1e-9)

    def peak(self, t: np.ndarray, window_s: float) -> np.ndarray:
        """Highest capacity over the ticks covering ``[t - window, t]``."""
        hi = np.clip(self.tick(t), 0, self.n - 1)
        lo = np.clip(self.tick(t - window_s), 0, self.n - 1)
        lo = np.minimum(lo, hi)
        return _window_extreme(self.cap, lo, hi, "max")

    def hours_available(self, t: np.ndarray) -> np.ndarray:
        k = self.tick(t)
        inside = (k >= 0) & (k < self.n)
        kc = np.clip(k, 0, self.n - 1)
        on = inside & (self.up[kc] > 0)
        since = (t - (self.offset + self.run_start[kc] * self.gap)) / 3600
        return np.where(on, np.minimum(since, _CAP_HOURS), 0.0)

    def label(self, t: np.ndarray, horizon_s: float) -> np.ndarray:
        """1 if capacity drops below its value at ``t`` within ``(t, t + horizon]``,
        0 if not, -1 when unknown (``t`` outside the trace or ``t + horizon``
        at or after its end: censored, not a loss)."""
        k = self.tick(t)
        k_end = self.tick(t + horizon_s)
        known = (k >= 0) & (k_end < self.n) & (t >= self.offset)
        out = np.full(len(t), -1.0)
        has_future = known & (k_end > k)
        lo, hi = np.clip(k + 1, 0, self.n - 1), np.clip(k_end, 0, self.n - 1)
        lowest = _window_extreme(self.cap, np.minimum(lo, hi), hi, "min")
        now = self.cap[np.clip(k, 0, self.n - 1)]
        out[known] = 0.0
        out[has_future & (lowest < now)] = 1.0
        return out


class MarketIndex:
    """Every trace of a market indexed for :meth:`features` at arbitrary times."""

    def __init__(self, market: Market) -> None:
        self.market = market
        self.origin = market.start_utc
        self.traces = [_TraceIndex(t, market.start_utc) for t in market.traces]
        self.keys = tuple(t.offer_spot.key for t in market.traces)
        # The cross-offer features are sums over groups of offers (the same zone; the same type in
        # another zone; the whole market), so they are kept per group: memory grows with the groups
        # and the times asked for, not with the square of the offers.
        self.zone_of = [t.offer_spot.placement_domain for t in market.traces]
        self.type_of = [(t.offer_spot.provider, t.offer_spot.instance_type.name) for t in market.traces]

    def _losses(self, k: int, t: np.ndarray, hours: int) -> np.ndarray:
        tr = self.traces[k]
        return tr.losses_upto(t) - tr.losses_upto(t - hours * 3600)

    def _group_losses(self, t: np.ndarray) -> dict:
        """Losses in the last 1 and 6 hours summed per zone, per type in a zone, per type and over
        the market: ``{(group, key, hours): array}``. Counts are whole numbers, so the sums are exact
        whatever their order."""
        sums: dict = {}
        for k in range(len(self.traces)):
            for w in (1, 6):
                c = self._losses(k, t, w)
                for key in (("zone", self.zone_of[k]), ("type_zone", (self.type_of[k], self.zone_of[k])),
                            ("type", self.type_of[k]), ("market", None)):
                    prev = sums.get((*key, w))
                    sums[(*key, w)] = c if prev is None else prev + c
        return sums

    def features(self, t: np.ndarray, offers: Iterable[int] | None = None, *,
                 groups: dict | None = None) -> np.ndarray:
        """Shape ``(offers, len(t), len(FEATURES))``: the features of the offers numbered ``offers``
        (default: every offer, in trace order) at the times ``t`` (seconds since the market's
        start), from data at or before ``t``. ``groups``: :meth:`_group_losses` of the same ``t``,
        when the caller asks for several sets of offers at the same times."""
        t = np.asarray(t, dtype=float)
        wanted = range(len(self.traces)) if offers is None else list(offers)
        groups = self._group_losses(t) if groups is None else groups
        stamps = [self.origin + timedelta(seconds=float(s)) for s in t]
        hours = np.array([s.hour + s.minute / 60 for s in stamps])
        days = np.array([s.weekday() for s in stamps], dtype=float)
        out = np.empty((len(wanted), len(t), len(FEATURES)))
        for row, k in enumerate(wanted):
            tr = self.traces[k]
            zone, kind = self.zone_of[k], self.type_of[k]
            counts = {w: self._losses(k, t, w) for w in (1, 6, 24)}
            # others of the zone; the same type in other zones; every other offer
            zone_other = {w: groups[("zone", zone, w)] - counts[w] for w in (1, 6)}
            type_other = {w: groups[("type", kind, w)] - groups[("type_zone", (kind, zone), w)] for w in (1, 6)}
            market_other = {w: groups[("market", None, w)] - counts[w] for w in (1, 6)}
            cap = tr.capacity(t)
            peak = tr.peak(t, 24 * 3600)
            if len(tr.loss_times):
                last = np.searchsorted(tr.loss_times, t, side="right") - 1
                since = np.where(last >= 0, (t - tr.loss_times[np.maximum(last, 0)]) / 3600, _CAP_HOURS)
            else:
                since = np.full(len(t), _CAP_HOURS)
            ratio = tr.price_ratio(t)
            f = {
                "avail_1h": tr.availability(t, 3600), "avail_6h": tr.availability(t, 6 * 3600),
                "avail_24h": tr.availability(t, 24 * 3600),
                "capacity_rel_24h": np.where(peak > 0, cap / np.maximum(peak, 1e-9), 0.0),
                "hours_since_loss": np.minimum(since, _CAP_HOURS), "hours_available": tr.hours_available(t),
                "losses_1h": counts[1], "losses_6h": counts[6], "losses_24h": counts[24],
                "zone_other_losses_1h": zone_other[1], "zone_other_losses_6h": zone_other[6],
                "type_other_losses_1h": type_other[1], "type_other_losses_6h": type_other[6],
                "market_other_losses_1h": market_other[1], "market_other_losses_6h": market_other[6],
                "price_ratio": ratio, "price_ratio_change_6h": ratio - tr.price_ratio(t - 6 * 3600),
                "hour_of_day": hours, "day_of_week": days,
            }
            out[row] = np.column_stack([f[name] for name in FEATURES])
        return out

    def recent_rate(self, t: np.ndarray, horizon_s: float, offers: Iterable[int] | None = None) -> np.ndarray:
        """The baseline: each offer's losses in the last 24 h per available hour
        (at least one hour), as a probability over the horizon, ``(offers, len(t))``
        (``offers``: their numbers, default every offer)."""
        out = []
        for k in range(len(self.traces)) if offers is None else offers:
            tr = self.traces[k]
            losses = tr.losses_upto(t) - tr.losses_upto(t - 24 * 3600)
            up_hours = (tr.up_seconds(t) - tr.up_seconds(t - 24 * 3600)) / 3600
            rate = losses / np.maximum(up_hours, 1.0)
            out.append(1.0 - np.exp(-rate * horizon_s / 3600))
        return np.stack(out)


#: The most rows :func:`build_samples` keeps of one market: beyond it, a seeded uniform sample of
#: the rows the model can use (an offer with capacity, a known label). The daemon's 30-day retrain
#: on the shipped catalog (1,396 spot offers with an on-demand twin, 5-minute ticks) used 5.2 GB and
#: 291 s with every row (3.5 million in training); with this budget, 1.2 GB and 66 s
#: (``benchmarks/results/interruption_memory.md``). The V100 markets have under 60,000 rows.
MAX_SAMPLE_ROWS = 1_000_000
#: (offer, time) rows whose features are computed at once while sampling.
_CHUNK_ROWS = 200_000


def build_samples(market: Market, horizon: timedelta = timedelta(hours=1),
                  index: MarketIndex | None = None, *, max_rows: int | None = MAX_SAMPLE_ROWS,
                  seed: int = 0) -> Samples:
    """Every (offer, grid time) of ``market`` with its features and label (see the module docstring);
    ``ValueError`` for a market longer than ``MAX_MARKET_SPAN`` (:func:`check_span`).

    When more than ``max_rows`` rows are usable (capacity, and a known label), only a uniform
    sample of them is kept, drawn with ``seed`` (``Samples.fraction`` says which share), and the
    features are computed a few offers at a time, so memory stays bounded whatever the number of
    offers. Rows are in offer order, then time order, either way."""
    check_span(market)
    index = index or MarketIndex(market)
    grid = _grid(market)
    H = horizon.total_seconds()
    n_off = len(index.traces)
    usable = [int(((tr.capacity(grid) > 0) & (tr.label(grid, H) >= 0)).sum()) for tr in index.traces]
    if max_rows is None or sum(usable) <= max_rows:
        X = index.features(grid)
        recent = index.recent_rate(grid, H)
        y = np.stack([tr.label(grid, H) for tr in index.traces])
        avail = np.stack([tr.capacity(grid) > 0 for tr in index.traces])
        return Samples(X.reshape(n_off * len(grid), len(FEATURES)), y.ravel(), avail.ravel(), recent.ravel(),
                       np.tile(grid, n_off), index.keys, np.repeat(np.arange(n_off), len(grid)),
                       market.start_utc, market.end_utc)
    share = max_rows / sum(usable)
    rng = np.random.default_rng(seed)
    keep = []
    for tr in index.traces:  # the draws first, so the rows kept are known before any feature is computed
        mask = (tr.capacity(grid) > 0) & (tr.label(grid, H) >= 0)
        mask[mask] = rng.random(int(mask.sum())) < share
        keep.append(mask)
    rows = int(sum(int(mask.sum()) for mask in keep))
    X = np.empty((rows, len(FEATURES)))
    y, recent, times, offer = np.empty(rows), np.empty(rows), np.empty(rows), np.empty(rows, dtype=np.int64)
    groups = index._group_losses(grid)
    per_chunk = max(1, _CHUNK_ROWS // max(len(grid), 1))
    at = 0
    for first in range(0, n_off, per_chunk):
        chunk = range(first, min(first + per_chunk, n_off))
        features = index.features(grid, chunk, groups=groups)
        for row, k in enumerate(chunk):
            mask, n = keep[k], int(keep[k].sum())
            X[at:at + n] = features[row][mask]
            y[at:at + n] = index.traces[k].label(grid, H)[mask]
            recent[at:at + n] = index.recent_rate(grid[mask], H, offers=(k,))[0]
            times[at:at + n] = grid[mask]
            offer[at:at + n] = k
            at += n
    return Samples(X, y, np.ones(rows, dtype=bool), recent, times, index.keys, offer,
                   market.start_utc, market.end_utc, fraction=share)


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
    _cache: dict[int, tuple[Market, "MarketIndex", dict[float, np.ndarray]]] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ training

    @classmethod
    def train(cls, markets: Iterable[Market], *, horizon: timedelta = timedelta(hours=1),
              train_fraction: float = 0.7, seed: int = 0, max_rows: int | None = MAX_SAMPLE_ROWS,
              progress: Callable[[str], None] | None = None) -> "InterruptionModel":
        """Fit on the first ``train_fraction`` of each market's period (see the module docstring);
        ``max_rows``: per market, the most rows used (a seeded uniform sample beyond it; :func:`build_samples`)."""
        from sklearn.calibration import CalibratedClassifierCV
        from sklearn.ensemble import HistGradientBoostingClassifier
        from sklearn.frozen import FrozenEstimator

        from threadpoolctl import threadpool_limits

        Xs, ys, ts, reach, windows, shares = [], [], [], [], [], []
        for market in markets:
            if progress:
                progress(f"features of {len(market.traces)} offers")
            s = build_samples(market, horizon, max_rows=max_rows, seed=seed)
            shares.append(round(s.fraction, 6))
            split = split_time(market, train_fraction)
            m = training_mask(s, split, horizon)
            Xs.append(s.X[m])
            ys.append(s.y[m])
            ts.append(s.times[m] / split)  # position within the training window (0..1), for the inner splits
            reach.append((s.times[m] + horizon.total_seconds()) / split)  # where the label window ends
            windows.append([market.start_utc.isoformat(), (market.start_utc + timedelta(seconds=split)).isoformat()])
        if not Xs:
            raise ValueError("no market to train on")
        X, y, pos, end = np.vstack(Xs), np.concatenate(ys), np.concatenate(ts), np.concatenate(reach)
        del Xs, s  # the features are in X now; a second copy is what bounds the markets one can train on
        if len(y) == 0 or y.sum() == 0 or y.sum() == len(y):
            raise ValueError("the training window has no losses (or nothing but losses): nothing to learn from")
        # Inner time splits of the training window only: [0, 0.6) fit / [0.6, 0.8) choose the
        # hyperparameters; then [0, 0.8) fit / [0.8, 1] calibrate. Fit samples whose label
        # window reaches into the slice after them are dropped.
        tune_fit, tune_val = end <= 0.6, (pos >= 0.6) & (end <= 0.8)
        fit, cal = end <= 0.8, pos >= 0.8
        for name, mask in (("fit", fit), ("calibrate", cal), ("tune", tune_fit), ("validate", tune_val)):
            if y[mask].sum() == 0 or y[mask].sum() == mask.sum():
                raise ValueError(f"too few losses in the training window to {name} (slice of {int(mask.sum())} "
                                 "samples has one class only); give a longer market or a larger --train-fraction")
        from sklearn.metrics import roc_auc_score

        with threadpool_limits(limits=1, user_api="openmp"):  # deterministic, and no oversubscription
            tried = []
            for params in CANDIDATES:
                if progress:
                    progress(f"choosing hyperparameters: {params}")
                est = HistGradientBoostingClassifier(**params, early_stopping=False, random_state=seed)
                est.fit(X[tune_fit], y[tune_fit])
                tried.append((float(roc_auc_score(y[tune_val], est.predict_proba(X[tune_val])[:, 1])), params))
            best_auc, best = max(tried, key=lambda item: item[0])  # first of the best on ties
            if progress:
                progress(f"fitting on {int(fit.sum())} samples, calibrating on {int(cal.sum())}")
            base = HistGradientBoostingClassifier(**best, early_stopping=False, random_state=seed)
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
            # per market, the share of its usable rows sampled (1.0: all; see MAX_SAMPLE_ROWS)
            "sampled_share": shares,
            "positives": int(y.sum()),
            "base_rate": float(y.mean()),
            "training_metrics": scores(y, train_p),
            "seed": seed,
            "hyperparameters": best,
            "hyperparameter_search": [{"params": p, "validation_auc": round(v, 6)} for v, p in tried],
            "versions": modelfiles.versions(),
            "trained_at_utc": None,
        }
        return cls(calibrated, metadata["horizon_minutes"], metadata)

    # ------------------------------------------------------------------ use

    def probabilities(self, X: np.ndarray) -> np.ndarray:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="openmp"):
            return self.estimator.predict_proba(X)[:, 1]

    def predict(self, history: Market, now: datetime) -> dict[str, float]:
        """Offer key -> probability that its spot capacity is lost within the
        horizon, from the data of ``history`` at or before ``now`` only. The
        market's arrays are indexed once (cached per market object); a call
        computes one row of features per offer."""
        cached = self._cache.get(id(history))
        if cached is None or cached[0] is not history:
            if len(self._cache) >= 8:
                self._cache.clear()
            cached = (history, MarketIndex(history), {})
            self._cache[id(history)] = cached
        _, index, memo = cached
        offset = (now - history.start_utc).total_seconds()
        if offset not in memo:
            if len(memo) > 100_000:
                memo.clear()
            X = index.features(np.array([offset]))[:, 0, :]
            memo[offset] = self.probabilities(X)
        return {k: float(p) for k, p in zip(index.keys, memo[offset])}

    def risks(self, history: Market, now: datetime) -> tuple[fm.OfferRisk, ...]:
        """:meth:`predict` as the Forecast's numbers, sorted by offer key."""
        return tuple(fm.OfferRisk(k, self.horizon_minutes, p) for k, p in sorted(self.predict(history, now).items()))

    # ------------------------------------------------------------------ files

    def save(self, directory: str | Path) -> Path:
        return modelfiles.save(directory, self.estimator, dict(self.metadata))

    @classmethod
    def load(cls, directory: str | Path, *, allow_version_mismatch: bool = False) -> "InterruptionModel":
        """Load a saved model. Refuses (``ModelError``) a model saved with another
        scikit-learn version unless ``allow_version_mismatch`` (then warns)."""
        path, meta = modelfiles.read_metadata(directory)
        meta_path, est_path = path / "model.json", path / "model.joblib"
        if not isinstance(meta, dict) or meta.get("kind") != "interruption" \
                or meta.get("format_version") != FORMAT_VERSION or not isinstance(meta.get("horizon_minutes"), int) \
                or not isinstance(meta.get("versions"), dict):
            raise modelfiles.not_a_model_of(meta_path, meta, "interruption", FORMAT_VERSION)
        if meta.get("features") != list(FEATURES):
            raise ModelError(f"{meta_path}: the model was trained on other features than this version computes; "
                             "retrain it (fleetctl forecast train interruption)")
        estimator = modelfiles.load_estimator(path, meta, kind="interruption",
                                               allow_version_mismatch=allow_version_mismatch)
        if not hasattr(estimator, "predict_proba"):
            raise ModelError(f"{est_path}: holds a {type(estimator).__name__}, not a classifier")
        return cls(estimator, int(meta["horizon_minutes"]), meta)


#: The horizon of the probabilities the planner and the controller use: a probability per hour
#: (docs/planner.md, "Risk-adjusted cost"; the policy's rebalance_drain_probability).
PLANNING_HORIZON_MINUTES = 60


def load_for_planning(directory: str | Path, *, allow_version_mismatch: bool = False) -> InterruptionModel:
    """:meth:`InterruptionModel.load` for the planner (``backtest --forecast-model``,
    ``--forecast-dir``): refuses (``ModelError``) a model whose horizon is not
    an hour, whose probability of a loss within, say, 24 hours the planner
    would read as a probability per hour."""
    model = InterruptionModel.load(directory, allow_version_mismatch=allow_version_mismatch)
    if model.horizon_minutes != PLANNING_HORIZON_MINUTES:
        m = model.horizon_minutes
        shown = f"{m // 60}h" if m % 60 == 0 else f"{m}m"
        raise ModelError(f"{directory}: the model's horizon is {shown} and the planner reads a probability per hour; "
                         "train a model for planning with --horizon 1h (the default)")
    return model


# =========================================================================== evaluation


def evaluate(model: InterruptionModel, markets: Iterable[Market]) -> dict[str, Any]:
    """Scores on the part of each market after the model's training split, beside the two baselines."""
    horizon = timedelta(minutes=model.horizon_minutes)
    frac = float(model.metadata["train_fraction"])
    ys, ps, rs, ts = [], [], [], []
    for market in markets:
        s = build_samples(market, horizon)
        m = evaluation_mask(s, split_time(market, frac))
        if not m.any():  # too short to leave samples after the split
            continue
        ys.append(s.y[m])
        ps.append(model.probabilities(s.X[m]))
        rs.append(s.recent[m])
        ts.append(s.times[m])
    if not ys:
        raise ValueError(f"no evaluation samples: no market has a sample after the model's training split (the "
                         f"first {frac:.0%} of its period) whose {model.horizon_minutes}-minute horizon ends inside "
                         "its traces; give a longer market")
    y, p, r = np.concatenate(ys), np.concatenate(ps), np.concatenate(rs)
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
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


# =========================================================================== the controller's own history


def market_from_observations(rows: Iterable[dict[str, Any]], start_utc: datetime, end_utc: datetime,
                             gap_seconds: float = 300.0,
                             reclaims: Iterable[Any] = ()) -> Market:
    """A :class:`Market` from ``Store.offer_observations()`` rows, so the daemon
    can forecast from what it recorded itself.

    The rows are a change log: an offer listed (``available``) has capacity 1
    from that observation until it is recorded unavailable (capacity 0), forward
    filled onto ticks of ``gap_seconds`` from ``start_utc`` to ``end_utc`` (a
    tick takes the last observation made before the tick ends); before its first
    observation an offer has capacity 0. Spot price: the row's, carried forward.
    On-demand price: the first the rows give, else the catalog's
    (:func:`fleetctl.sim.market.catalog_price`), else 3x the first spot price
    (a documented placeholder; only the price-ratio features use it).

    ``reclaims``: interruptions the controller handled, as
    :class:`fleetctl.model.OfferReclaim` (``fleetctl.controller.forecast.recent_reclaims(store)``)
    or ``(offer_key, at_utc)`` pairs; each forces capacity 0 on the tick
    holding it, so a reclaim counts as a loss even between two observations.
    ``ValueError`` without observations or with ``end_utc <= start_utc``."""
    from fleetctl.sim.market import catalog_price

    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_key.setdefault(r["offer_key"], []).append(r)
    if not by_key:
        raise ValueError("no offer observations to build a market from")
    if end_utc <= start_utc:
        raise ValueError(f"end {end_utc.isoformat()} is not after start {start_utc.isoformat()}")
    n = max(1, math.ceil((end_utc - start_utc).total_seconds() / gap_seconds))
    lost: dict[str, list[datetime]] = {}
    for item in reclaims:
        key, at = (item.offer_key, item.at_utc) if hasattr(item, "offer_key") else item
        lost.setdefault(key, []).append(at)
    traces = []
    for key in sorted(by_key):
        obs = sorted(by_key[key], key=lambda r: r["observed_at_utc"])
        offer = _offer_from_key(key, next((r["usd_per_hour"] for r in obs if r["usd_per_hour"]), 1.0))
        od_price = next((r["on_demand_usd_per_hour"] for r in obs if r.get("on_demand_usd_per_hour")), None)
        if od_price is None:
            od_price = catalog_price(offer.provider, offer.instance_type.name, offer.region, offer.zone,
                                     fm.Market.ON_DEMAND)
        if od_price is None:
            od_price = offer.usd_per_hour * 3
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
                                                  fm.Market.ON_DEMAND, float(od_price)),
                                  start_utc, gap_seconds, tuple(cap), tuple(float(p) for p in prices)))
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


__all__ = ["CANDIDATES", "FEATURES", "InterruptionModel", "MAX_MARKET_SPAN", "MarketIndex", "ModelError", "STEP",
           "build_samples", "check_span",
           "evaluate", "evaluation_mask", "market_from_observations", "reliability_plot", "split_time",
           "training_mask"]
