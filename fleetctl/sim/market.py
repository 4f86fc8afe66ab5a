"""Spot markets for the simulator: a YAML manifest of spot capacity traces.

A manifest (see ``examples/markets/`` and ``docs/traces.md``)::

    start_utc: "2023-02-15T00:00:00Z"    # wall-clock time of tick 0 of every trace
    traces:
      - provider: aws
        instance_type: p3.2xlarge         # must be in providers.catalog.instance_types()
        region: us-east-1
        zone: us-east-1a
        file: traces/availability/1-node/aws-02-15-2023/us-east-1a_v100_1.json   # relative to the manifest
        spot_usd_per_hour: 0.918          # optional; default: the catalog
        on_demand_usd_per_hour: 3.06      # optional; default: the catalog
        capacity_per_unit: 1              # optional; capacity = data[i] x this

Each ``file`` is in the spot-traces JSON format of SkyPilot's
github.com/skypilot-org/spot-traces: ``{"metadata": {"gap_seconds": 195},
"data": [0, 1, ...], "prices": [...]}`` where ``data[i]`` is how many spot
instances were available at tick ``i`` (tick ``i`` starts ``i * gap_seconds``
after ``start_utc``) and the optional ``prices[i]`` is the spot price then.

:func:`load_market` validates everything and raises one
:class:`~fleetctl.yamlerrors.SpecError` with every problem
(``FILE:LINE:COLUMN: field.path: message``, positioned in the manifest; a
broken trace file is named in the message). The result is frozen value
objects: :class:`MarketTrace` (one offer's capacity and price over time) and
:class:`Market` (all of them).

Design choices:

* **Time outside a trace.** Before ``start_utc`` and from a trace's end on, its
  spot capacity is 0 (its price stays the first / last known price). The
  market ends at the *latest* trace end, so a shorter trace (the 16-node
  us-east-2b file) simply has no spot capacity for the rest of the run.
* **On-demand is always there.** Every trace has an on-demand twin of the same
  type, region and zone, offered at every time.
* **Catalog prices.** A price not given comes from ``providers.catalog``: the
  offer of that provider, type, region and zone; else the regional offer
  (zone ``""``); else the mean over the region's zones (AWS catalog rows are
  per AZ *ID* such as ``use1-az1``, which do not match zone *names* such as
  ``us-east-1a``). No price at all is an error naming the trace.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StrictStr, WithJsonSchema

from fleetctl import model
from fleetctl.jobspec import UtcTimestamp
from fleetctl.policy import ProviderName, RegionName, StrictModel
from fleetctl.yamlerrors import (
    Document,
    SpecError,
    ValidationIssue,
    describe_value,
    did_you_mean,
    read_document,
)

__all__ = [
    "MAX_TRACE_FILE_BYTES",
    "Market",
    "MarketManifestSpec",
    "MarketTrace",
    "MarketTraceSpec",
    "catalog_price",
    "load_market",
    "market_from_document",
    "parse_trace_json",
]

#: Trace files above this size are refused (the largest SkyPilot file is 176 kB).
MAX_TRACE_FILE_BYTES = 64 * 1024 * 1024

#: Longest time a trace may span (gap_seconds x ticks).
MAX_TRACE_SPAN_SECONDS = 100 * 365 * 86400


# =========================================================================== value objects


def _aware(t: datetime) -> datetime:
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"time {t!r} must be timezone-aware (UTC)")
    return t


@dataclass(frozen=True, slots=True)
class MarketTrace:
    """One spot offer's capacity (and maybe price) over time, with its
    on-demand twin.

    Tick ``i`` covers ``[start_utc + i*gap, start_utc + (i+1)*gap)`` where
    ``gap = timedelta(seconds=gap_seconds)``. ``capacity[i]`` is how many spot
    instances can be had then; ``prices[i]`` (if given) the spot price, else
    ``offer_spot.usd_per_hour`` throughout. ``offer_spot.usd_per_hour`` is the
    price at tick 0.
    """

    offer_spot: model.Offer
    offer_on_demand: model.Offer
    start_utc: datetime
    gap_seconds: float
    capacity: tuple[int, ...]
    prices: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        _aware(self.start_utc)
        if not (isinstance(self.gap_seconds, (int, float)) and math.isfinite(self.gap_seconds)
                and self.gap_seconds > 0 and timedelta(seconds=self.gap_seconds) > timedelta(0)):
            raise ValueError(f"gap_seconds must be a positive number (got {self.gap_seconds!r})")
        if not self.capacity:
            raise ValueError("capacity must have at least one tick")
        if any(c < 0 for c in self.capacity):
            raise ValueError("capacity must not be negative")
        if self.prices is not None and len(self.prices) != len(self.capacity):
            raise ValueError(f"prices has {len(self.prices)} ticks, capacity {len(self.capacity)}")
        if self.offer_spot.market is not model.Market.SPOT or self.offer_on_demand.market is not model.Market.ON_DEMAND:
            raise ValueError("offer_spot must be a spot offer and offer_on_demand an on-demand offer")

    @property
    def gap(self) -> timedelta:
        return timedelta(seconds=self.gap_seconds)

    @property
    def end_utc(self) -> datetime:
        """When the last tick ends (capacity is 0 from then on)."""
        return self.start_utc + self.gap * len(self.capacity)

    def tick_at(self, t: datetime) -> int | None:
        """The tick covering ``t``, or ``None`` before the start or from the end on."""
        offset = _aware(t) - self.start_utc
        if offset < timedelta(0):
            return None
        tick = offset // self.gap
        return tick if tick < len(self.capacity) else None

    def tick_start(self, tick: int) -> datetime:
        return self.start_utc + self.gap * tick

    def capacity_at(self, t: datetime) -> int:
        """Spot instances available at ``t`` (0 outside the trace)."""
        tick = self.tick_at(t)
        return 0 if tick is None else self.capacity[tick]

    def spot_price_at(self, t: datetime) -> float:
        """Spot USD per hour at ``t`` (the first / last price outside the trace)."""
        if self.prices is None:
            return self.offer_spot.usd_per_hour
        tick = self.tick_at(t)
        if tick is None:
            return self.prices[0] if _aware(t) < self.start_utc else self.prices[-1]
        return self.prices[tick]

    def spot_offer_at(self, t: datetime) -> model.Offer | None:
        """The spot offer at its price at ``t``, or ``None`` when there is no capacity."""
        if self.capacity_at(t) <= 0:
            return None
        price = self.spot_price_at(t)
        return self.offer_spot if price == self.offer_spot.usd_per_hour else replace(self.offer_spot,
                                                                                      usd_per_hour=price)

    def change_times(self) -> tuple[datetime, ...]:
        """Times at which capacity or price differs from the instant before:
        tick starts where either changes, the start if capacity[0] > 0, the
        end if the last capacity > 0."""
        out: list[datetime] = []
        if self.capacity[0] > 0:
            out.append(self.start_utc)
        cap, prices = self.capacity, self.prices
        for i in range(1, len(cap)):
            if cap[i] != cap[i - 1] or (prices is not None and prices[i] != prices[i - 1]):
                out.append(self.tick_start(i))
        if cap[-1] > 0:
            out.append(self.end_utc)
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Market:
    """Every trace of a manifest. ``end_utc`` is the latest trace end (see the
    module docstring)."""

    traces: tuple[MarketTrace, ...]
    start_utc: datetime

    def __post_init__(self) -> None:
        _aware(self.start_utc)
        if not self.traces:
            raise ValueError("a market needs at least one trace")
        keys = [t.offer_spot.key for t in self.traces]
        if len(set(keys)) != len(keys):
            raise ValueError("two traces have the same offer")

    @property
    def end_utc(self) -> datetime:
        return max(t.end_utc for t in self.traces)

    def trace_for(self, offer_key: str) -> MarketTrace | None:
        """The trace whose spot or on-demand offer has ``offer_key``."""
        for t in self.traces:
            if offer_key in (t.offer_spot.key, t.offer_on_demand.key):
                return t
        return None

    def offers_at(self, t: datetime) -> tuple[model.Offer, ...]:
        """Spot offers with capacity at ``t`` (at their price then) and every
        on-demand twin, sorted by :attr:`model.Offer.key`."""
        offers: list[model.Offer] = []
        for trace in self.traces:
            spot = trace.spot_offer_at(t)
            if spot is not None:
                offers.append(spot)
            offers.append(trace.offer_on_demand)
        return tuple(sorted(offers, key=lambda o: o.key))

    def change_times(self) -> tuple[datetime, ...]:
        """Sorted, distinct times at which any trace's capacity or price changes
        (the simulator's market events), plus ``start_utc``."""
        times = {self.start_utc}
        for trace in self.traces:
            times.update(trace.change_times())
        return tuple(sorted(times))


# =========================================================================== the manifest


#: A zone as the catalogs write it (us-east-1a, europe-west4-a, use1-az1, Azure's 1), or "" for a regional
#: offer: a "/" or a "*" would make an offer key (provider/region/zone/type/market, "*" for a regional
#: offer) that is another offer's or not one at all.
_ZONE_RE = re.compile(r"([a-z0-9][a-z0-9-]{0,39})?")


def _zone(value: str) -> str:
    if _ZONE_RE.fullmatch(value):
        return value
    raise ValueError(f"invalid zone {value!r}: use the provider's zone id, e.g. us-east-1a, europe-west4-a or 1 "
                     "(\"\" for a regional offer)")


ZoneName = Annotated[StrictStr, AfterValidator(_zone), WithJsonSchema({"type": "string", "pattern": "^" + _ZONE_RE.pattern + "$"})]


class MarketTraceSpec(StrictModel):
    """One trace of the manifest."""

    provider: ProviderName = Field(description="aws, gcp or azure.")
    instance_type: StrictStr = Field(min_length=1, description="Instance type, as in the catalog (p3.2xlarge).")
    region: RegionName = Field(description="Region of the offer (us-east-1).")
    zone: ZoneName = Field(description="Zone of the offer (us-east-1a); \"\" for a regional offer.")
    file: StrictStr = Field(min_length=1, description="Spot-traces JSON file, relative to the manifest.")
    spot_usd_per_hour: float | None = Field(
        None, gt=0, le=100_000, description="Spot price, USD/h; default: the catalog. Not with per-tick prices.")
    on_demand_usd_per_hour: float | None = Field(
        None, gt=0, le=100_000, description="On-demand price, USD/h; default: the catalog.")
    capacity_per_unit: int = Field(
        1, ge=1, le=1_000_000, description="Instances per unit of data[i] (capacity = data[i] x this).")


class MarketManifestSpec(StrictModel):
    """A market manifest."""

    start_utc: UtcTimestamp = Field(description="Wall-clock time of tick 0 of every trace (ISO-8601 with a zone).")
    traces: list[MarketTraceSpec] = Field(description="The spot traces, one per offer (at least one).")


def catalog_price(provider: str, instance_type: str, region: str, zone: str, market: model.Market,
                  offers: Iterable[model.Offer] | None = None) -> float | None:
    """The catalog price of an offer: that zone's, else the regional one
    (zone ``""``), else the mean over the region's zones (6 decimals); ``None``
    if the catalog has no such offer in the region."""
    if offers is None:
        from providers.catalog import load_catalog

        offers = load_catalog()
    same = [o for o in offers if o.provider == provider and o.instance_type.name == instance_type
            and o.region == region and o.market is market]
    for o in same:
        if o.zone == zone:
            return o.usd_per_hour
    for o in same:
        if o.zone == "":
            return o.usd_per_hour
    if not same:
        return None
    return round(sum(o.usd_per_hour for o in same) / len(same), 6)


def parse_trace_json(raw: bytes) -> tuple[float, tuple[int, ...], tuple[float, ...] | None]:
    """``(gap_seconds, data, prices)`` of a spot-traces JSON file's bytes.
    Raises ``ValueError`` with a message for people."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"is not UTF-8 text (byte 0x{raw[exc.start:exc.start + 1].hex()} at offset "
                         f"{exc.start})") from None

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not a number in JSON")

    try:
        doc = json.loads(text, parse_constant=no_constants)
    except json.JSONDecodeError as exc:
        raise ValueError(f"is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise ValueError("is not valid JSON: nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"must hold a JSON object with metadata and data (got {_json_kind(doc)})")
    unknown = sorted(set(doc) - {"metadata", "data", "prices"})
    if unknown:
        raise ValueError(f"has unknown key(s) {', '.join(repr(k) for k in unknown)}; expected metadata, data and "
                         "optionally prices")
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        raise ValueError("metadata must be an object with gap_seconds" + ("" if "metadata" in doc else
                                                                          " (it is missing)"))
    gap = metadata.get("gap_seconds")
    if not _is_number(gap) or not gap > 0 or timedelta(seconds=gap) <= timedelta(0):
        raise ValueError(f"metadata.gap_seconds must be a positive number of seconds (got {_json_value(gap)})")
    data = doc.get("data")
    if not isinstance(data, list) or not data:
        raise ValueError("data must be a non-empty list of instance counts" + ("" if "data" in doc else
                                                                               " (it is missing)"))
    for i, value in enumerate(data):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"data[{i}] must be a whole number >= 0 (got {_json_value(value)})")
        if value > 1_000_000:
            raise ValueError(f"data[{i}] must be at most 1000000 (got {value})")
    if gap * len(data) > MAX_TRACE_SPAN_SECONDS:
        raise ValueError(f"spans {gap * len(data) / 86400 / 365:.0f} years (gap_seconds x ticks); at most 100 "
                         "years are supported")
    prices = doc.get("prices")
    if prices is not None or "prices" in doc:
        if not isinstance(prices, list):
            raise ValueError(f"prices must be a list of USD per hour, one per tick (got {_json_kind(prices)})")
        if len(prices) != len(data):
            raise ValueError(f"prices has {len(prices)} entries but data has {len(data)}; give one price per tick")
        for i, value in enumerate(prices):
            if not _is_number(value) or not 0 < value <= 100_000:
                raise ValueError(f"prices[{i}] must be a price above 0 USD per hour (got {_json_value(value)})")
        return gap, tuple(data), tuple(float(p) for p in prices)
    return gap, tuple(data), None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and abs(value) < 1e12


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return _json_value(value)


def _json_value(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return describe_value(value)


def _read_trace_file(path: Path) -> tuple[float, tuple[int, ...], tuple[float, ...] | None]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_TRACE_FILE_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    if len(raw) > MAX_TRACE_FILE_BYTES:
        raise ValueError(f"is larger than {MAX_TRACE_FILE_BYTES} bytes")
    return parse_trace_json(raw)


def _trace_label(spec: MarketTraceSpec) -> str:
    return f"{spec.provider}/{spec.region}/{spec.zone or '*'}/{spec.instance_type}"


def market_from_document(doc: Document) -> Market:
    """Validate a parsed manifest and load its trace files (relative to the
    directory of ``doc.file``); raise :class:`SpecError` with every issue."""
    issues: list[ValidationIssue] = list(doc.issues)
    if not isinstance(doc.data, dict):
        issues.append(doc.issue((), f"a market manifest must be a mapping with start_utc and traces (got "
                                    f"{describe_value(doc.data)})"))
        raise SpecError(issues)
    base = Path(os.path.dirname(os.path.abspath(doc.file)))  # trace files are relative to the manifest
    spec, errors = doc.validate(MarketManifestSpec, doc.data)
    issues.extend(errors)
    if spec is None:
        # The trace files too, so one run names every problem (not the schema's, then the files' next time).
        raw = doc.data.get("traces")
        for i, t in enumerate(raw if isinstance(raw, list) else ()):
            file = t.get("file") if isinstance(t, dict) else None
            if isinstance(file, str) and file:
                try:
                    _read_trace_file(base / file)
                except ValueError as exc:
                    issues.append(doc.issue(("traces", i, "file"), f"trace file {file!r} {exc}"))
        raise SpecError(sorted(issues, key=lambda x: (x.line, x.column))
                        or [doc.issue((), "invalid market manifest")])
    if not spec.traces:
        issues.append(doc.issue(("traces",), "the list of traces is empty; add at least one trace"))
        raise SpecError(issues)

    from providers.catalog import instance_types, load_catalog

    types = instance_types()
    offers = load_catalog()
    start = spec.start_utc.astimezone(timezone.utc)
    traces: list[MarketTrace] = []
    first_index: dict[str, int] = {}
    for i, t in enumerate(spec.traces):
        at = ("traces", i)
        label = _trace_label(t)
        if label in first_index:
            issues.append(doc.issue(at, f"trace {label} is listed twice (first at traces[{first_index[label]}]); "
                                        "one trace per offer"))
            continue
        first_index[label] = i
        before = len(issues)

        itype = types.get((t.provider, t.instance_type))
        if itype is None:
            names = sorted(name for provider, name in types if provider == t.provider)
            hint = did_you_mean(t.instance_type, names)
            issues.append(doc.issue(at + ("instance_type",), (
                f"unknown instance type {t.instance_type!r} for {t.provider}"
                + (f" (did you mean {hint!r}?)" if hint else "")
                + "; the catalog (providers/data/instance_types.csv) holds GPU types only"
            )))

        gap = data = prices = None
        try:
            gap, data, prices = _read_trace_file(base / t.file)
        except ValueError as exc:
            issues.append(doc.issue(at + ("file",), f"trace file {t.file!r} {exc}"))

        if prices is not None and t.spot_usd_per_hour is not None:
            issues.append(doc.issue(at + ("spot_usd_per_hour",), (
                f"trace {label}: the trace file has per-tick prices; remove spot_usd_per_hour (or the prices)"
            )))
        spot = t.spot_usd_per_hour
        if prices is not None:
            spot = prices[0]
        elif spot is None and itype is not None:
            spot = catalog_price(t.provider, t.instance_type, t.region, t.zone, model.Market.SPOT, offers)
            if spot is None:
                issues.append(doc.issue(at, (
                    f"trace {label}: the catalog has no spot price for {t.provider} {t.instance_type} in "
                    f"{t.region}; set spot_usd_per_hour"
                )))
        on_demand = t.on_demand_usd_per_hour
        if on_demand is None and itype is not None:
            on_demand = catalog_price(t.provider, t.instance_type, t.region, t.zone, model.Market.ON_DEMAND, offers)
            if on_demand is None:
                issues.append(doc.issue(at, (
                    f"trace {label}: the catalog has no on-demand price for {t.provider} {t.instance_type} in "
                    f"{t.region}; set on_demand_usd_per_hour"
                )))
        if len(issues) > before:
            continue
        assert itype is not None and spot is not None and on_demand is not None and gap is not None
        assert data is not None
        trace = MarketTrace(
            offer_spot=model.Offer(itype, t.region, t.zone, model.Market.SPOT, float(spot)),
            offer_on_demand=model.Offer(itype, t.region, t.zone, model.Market.ON_DEMAND, float(on_demand)),
            start_utc=start,
            gap_seconds=gap,
            capacity=tuple(v * t.capacity_per_unit for v in data),
            prices=prices,
        )
        try:
            trace.end_utc  # noqa: B018 - checks that the end is a representable time
        except OverflowError:
            issues.append(doc.issue(at + ("file",), f"trace file {t.file!r} ends after the year 9999 when started "
                                                    f"at start_utc"))
            continue
        traces.append(trace)
    if issues:
        raise SpecError(issues)
    return Market(traces=tuple(traces), start_utc=start)


def load_market(path: str | os.PathLike[str]) -> Market:
    """Read and validate a market manifest (YAML or JSON) and every trace file
    it names. Raises :class:`SpecError` carrying every problem as
    ``FILE:LINE:COLUMN: field.path: message``."""
    return market_from_document(read_document(path))
