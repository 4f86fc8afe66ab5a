"""Demand series: GPUs demanded per GPU model over time, as CSV, and the Helios importer.

**The demand-series CSV** (what ``fleetctl forecast train|evaluate demand``
read, and what ``fleetctl trace import helios-sequence`` writes)::

    time_utc,gpu_model,gpus
    2020-04-30T16:00:00Z,V100-32GB,59

One row is an observation: from ``time_utc`` on, ``gpus`` GPUs of
``gpu_model`` are demanded (running plus queued) until the next row of the
same model. Times are ISO-8601 with a time zone, strictly increasing per GPU
model; ``gpu_model`` is a normalised name (``fleetctl.policy.GPU_MODELS``);
``gpus`` is a number of at least 0 (and at most ``MAX_GPUS``). One file may
hold several GPU models; each (file, GPU model) pair is one *series*, spanning
at most ``MAX_SERIES_SPAN`` (366 days) from its first row to its last.

**Helios "Earth" per-minute virtual-cluster sequences**
(``cluster_sequence_vc.csv`` of github.com/S-Lab-System-Group/HeliosArtifact,
``analysis/2_cluster characterization/Earth_vcs/<vc>/``): demand at a minute is
``running_gpu_num + pending_gpu_num`` (GPUs in use plus GPUs requested by
queued jobs). The ``time`` column is a wall-clock time without a zone; it is
read at ``utc_offset`` (default ``+08:00``: SenseTime's clusters are in China,
and the artifact names no zone). Earth is a Volta cluster (Hu et al., SC'21,
Table 1; the artifact's Volta node lists 8 x Tesla V100-SXM2 32 GB), so the
default GPU model is ``V100-32GB``.

Every reader validates strictly and reports every problem at once as
``FILE:LINE:COLUMN: column: message`` (:class:`~fleetctl.yamlerrors.SpecError`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Final

import numpy as np

from fleetctl.policy import GPU_MODELS
from fleetctl.files import write_text_atomic
from fleetctl.jobspec import TimestampError, utc_time
from fleetctl.sim.traces import CellError, cell_value, format_utc, parse_csv, parse_int, parse_number, \
    read_text_file
from fleetctl.yamlerrors import SpecError, ValidationIssue, describe_value, did_you_mean

#: The header of a demand series, in this order.
DEMAND_COLUMNS: Final[tuple[str, ...]] = ("time_utc", "gpu_model", "gpus")
#: Columns of a Helios sequence that the importer reads (``time`` is optional; the others are ignored).
HELIOS_COLUMNS: Final[tuple[str, ...]] = ("running_gpu_num", "pending_gpu_num")
#: The GPU model of the Helios Earth cluster (module docstring).
HELIOS_EARTH_GPU_MODEL: Final[str] = "V100-32GB"
#: The zone the Helios wall-clock times are read in.
HELIOS_UTC_OFFSET: Final[str] = "+08:00"
#: The most GPUs a demand-series row may hold (and so the most a Helios row's running plus pending may sum to).
MAX_GPUS: Final[int] = 10_000_000

#: The longest a demand series may span (first row to last, per GPU model). Training and evaluation
#: sample every series every 5 minutes from its first row to its last, with 24 hours of lookback per
#: sample, which costs about 1 GB of memory per year of span at once: a file whose first row had the
#: year 2002 for 2020 asked for 1.9 million samples (4 GB) and died with a MemoryError, or trained on
#: 18 years of one stale value. The real series are far shorter (the Helios Earth per-minute sequences
#: cover May 2020, its daily GPU counts six months; the daemon retrains on its last 30 days), so the
#: cap is a year, as for the market traces (forecasting.interruption.MAX_MARKET_SPAN). Gaps between
#: rows are not capped: a row holds until the next one, so a series that records only its changes is
#: sparse by design, and a gap adds no samples beyond those of the span.
MAX_SERIES_SPAN: Final[timedelta] = timedelta(days=366)

_NAIVE_TIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?")
_OFFSET_RE = re.compile(r"([+-])(\d{2}):(\d{2})")


@dataclass(frozen=True, slots=True)
class DemandSeries:
    """One GPU model's demand in one source: ``gpus[i]`` from ``times_s[i]``
    (seconds since the Unix epoch, strictly increasing) until the next time."""

    source: str
    gpu_model: str
    times_s: np.ndarray
    gpus: np.ndarray

    def __post_init__(self) -> None:
        if len(self.times_s) != len(self.gpus):
            raise ValueError(f"{self.name}: {len(self.times_s)} times but {len(self.gpus)} values")
        if len(self.times_s) == 0:
            raise ValueError(f"{self.name}: the series is empty")
        if np.any(np.diff(self.times_s) <= 0):
            raise ValueError(f"{self.name}: times must be strictly increasing")

    @property
    def name(self) -> str:
        return f"{self.source}[{self.gpu_model}]"

    @property
    def start_utc(self) -> datetime:
        return datetime.fromtimestamp(float(self.times_s[0]), tz=timezone.utc)

    @property
    def end_utc(self) -> datetime:
        return datetime.fromtimestamp(float(self.times_s[-1]), tz=timezone.utc)

    def scaled(self, factor: float) -> "DemandSeries":
        return DemandSeries(self.source, self.gpu_model, self.times_s, self.gpus * factor)


# =========================================================================== time cells


def parse_offset(text: str) -> timezone:
    """``+08:00``, ``-05:30`` or ``Z`` -> a fixed zone; ``ValueError`` otherwise."""
    if text in ("Z", "z", "UTC"):
        return timezone.utc
    m = _OFFSET_RE.fullmatch(text.strip())
    if not m or int(m.group(3)) >= 60 or int(m.group(2)) > 14:
        raise ValueError(f"{text!r} is not a UTC offset like +08:00, -05:30 or Z")
    delta = timedelta(hours=int(m.group(2)), minutes=int(m.group(3)))
    return timezone(-delta if m.group(1) == "-" else delta)


def _aware_time(text: str) -> datetime:
    """A time cell: parsed as a job's deadline is (``fleetctl.jobspec.utc_time``),
    worded for a cell (``time_utc: has no time zone ...``)."""
    if text == "":
        raise CellError("required value is missing (the cell is empty)")
    try:
        return utc_time(text)
    except TimestampError as exc:
        reason = exc.reason
    if reason == "syntax":
        raise CellError(f"must be an ISO-8601 time with a zone, e.g. 2020-05-01T00:00:00Z (got {describe_value(text)})")
    if reason == "naive":
        raise CellError(f"has no time zone ({describe_value(text)}); add 'Z' or an offset like +00:00")
    raise CellError(f"is out of range once in UTC (got {describe_value(text)})")


def _wall_time(zone: timezone):  # noqa: ANN202 - a cell parser
    def parse(text: str) -> datetime:
        if text == "":
            raise CellError("required value is missing (the cell is empty)")
        if _NAIVE_TIME_RE.fullmatch(text):
            try:
                wall = datetime.fromisoformat(text)
            except ValueError:
                raise CellError(f"is not a valid date and time (got {describe_value(text)})") from None
            try:
                return wall.replace(tzinfo=zone).astimezone(timezone.utc)
            except OverflowError:
                raise CellError(f"is out of range once in UTC at offset {zone} (got {describe_value(text)})") from None
        return _aware_time(text)

    return parse


def _gpu_model(text: str) -> str:
    if text == "":
        raise CellError("required value is missing (the cell is empty)")
    if text not in GPU_MODELS:
        hint = did_you_mean(text, GPU_MODELS)
        raise CellError(f"unknown GPU model {describe_value(text)}" + (f" (did you mean {hint!r}?)" if hint else "")
                        + f"; allowed: {', '.join(GPU_MODELS)}")
    return text


def check_gpu_model(name: str) -> str:
    """``name`` if it is a normalised GPU model, else ``ValueError`` with a hint."""
    try:
        return _gpu_model(name)
    except CellError as exc:
        raise ValueError(str(exc)) from None


# =========================================================================== CSV plumbing


def _header(records, file: str, required: tuple[str, ...], optional: tuple[str, ...] = (),
            others_allowed: bool = False) -> tuple[dict[str, int], list[ValidationIssue]]:
    """Column name -> index of the first record, with an issue per unknown, repeated or missing column."""
    issues: list[ValidationIssue] = []
    index: dict[str, int] = {}
    known = required + optional
    header = records[0]
    for i, cell in enumerate(header.cells):
        if cell.text in index:
            issues.append(ValidationIssue(file, cell.line, cell.column, cell.text, "column is listed twice"))
            continue
        if not others_allowed and cell.text not in known:
            hint = did_you_mean(cell.text, known)
            issues.append(ValidationIssue(
                file, cell.line, cell.column, "",
                f"unknown column {describe_value(cell.text)}" + (f" (did you mean {hint!r}?)" if hint else "")
                + f"; expected the columns {','.join(known)}"))
        index[cell.text] = i
    missing = [c for c in required if c not in index]
    if missing:
        issues.append(ValidationIssue(file, header.line, 1, "", f"missing column(s) {', '.join(missing)}; "
                                                                f"expected {','.join(known)}"))
    return index, issues


def _records(text: str, file: str, what: str):  # noqa: ANN202 - (records, issues)
    records, issues = parse_csv(text, file)
    if not records and not issues:
        raise SpecError([ValidationIssue(file, 1, 1, "", f"file is empty; expected {what}")])
    if not records or records[0].line != 1:
        raise SpecError(issues or [ValidationIssue(file, 1, 1, "", "the first line must be the header")])
    return records, issues


def _row_cells(record, index: dict[str, int], width: int, file: str, issues: list[ValidationIssue]):  # noqa: ANN202
    if record.blank:
        issues.append(ValidationIssue(file, record.line, 1, "", "blank line; remove it"))
        return None
    if len(record.cells) != width:
        issues.append(ValidationIssue(file, record.line, 1, "", f"the row has {len(record.cells)} cells; the "
                                                                f"header has {width}"))
        return None
    return {name: record.cells[i] for name, i in index.items()}


# =========================================================================== demand-series CSV


def parse_demand_series(text: str, file: str = "<string>") -> tuple[DemandSeries, ...]:
    """Validate demand-series CSV ``text``; one :class:`DemandSeries` per GPU
    model, in order of first appearance. Raises :class:`SpecError`."""
    records, issues = _records(text, file, "the header " + ",".join(DEMAND_COLUMNS))
    index, header_issues = _header(records, file, DEMAND_COLUMNS)
    if header_issues:
        raise SpecError(issues + header_issues)
    width = len(records[0].cells)
    rows: dict[str, tuple[list[float], list[float]]] = {}
    last: dict[str, tuple[float, int]] = {}
    first: dict[str, tuple[float, int]] = {}
    beyond: dict[str, tuple[float, int, int]] = {}  # the first row past MAX_SERIES_SPAN: time, line, column
    for record in records[1:]:
        cells = _row_cells(record, index, width, file, issues)
        if cells is None:
            continue
        t = cell_value(issues, file, cells["time_utc"], "time_utc", _aware_time)
        m = cell_value(issues, file, cells["gpu_model"], "gpu_model", _gpu_model)
        g = cell_value(issues, file, cells["gpus"], "gpus", lambda s: parse_number(s, at_least=0, at_most=MAX_GPUS))
        if t is None or m is None or g is None:
            continue
        ts = t.timestamp()
        if m in last and ts <= last[m][0]:
            c = cells["time_utc"]
            issues.append(ValidationIssue(file, c.line, c.column, "time_utc",
                                          f"must be after the previous {m} row's time (line {last[m][1]}); "
                                          "times are strictly increasing per GPU model"))
            continue
        last[m] = (ts, record.line)
        first.setdefault(m, (ts, record.line))
        if m not in beyond and ts - first[m][0] > MAX_SERIES_SPAN.total_seconds():
            beyond[m] = (ts, record.line, cells["time_utc"].column)
        times, values = rows.setdefault(m, ([], []))
        times.append(ts)
        values.append(g)
    for m, (ts, line, column) in beyond.items():
        (t0, line0), (t1, line1) = first[m], last[m]
        issues.append(ValidationIssue(
            file, line, column, "time_utc",
            f"{_utc_text(ts)} is {span_text(ts - t0)} after the first {m} row's time ({_utc_text(t0)}, line "
            f"{line0}): the {m} series spans {span_text(t1 - t0)} (to line {line1}), more than the "
            f"{MAX_SERIES_SPAN.days} days a demand series may span; is a year mistyped?"))
    if issues:
        raise SpecError(issues)
    if not rows:
        raise SpecError([ValidationIssue(file, 1, 1, "", "the file has a header but no rows")])
    return tuple(DemandSeries(file, m, np.asarray(t, dtype=float), np.asarray(v, dtype=float))
                 for m, (t, v) in rows.items())


def _utc_text(seconds: float) -> str:
    return format_utc(datetime.fromtimestamp(seconds, tz=timezone.utc))


def span_text(seconds: float) -> str:
    """A span for messages, exact to the second ('366 days, 0:01:00'): one just
    past MAX_SERIES_SPAN must not read as the limit itself."""
    return str(timedelta(seconds=round(seconds)))


def read_demand_series(path: str | os.PathLike[str]) -> tuple[DemandSeries, ...]:
    """Read a demand-series CSV (module docstring); :class:`SpecError` naming
    the file (and line and column) on any problem."""
    file, text = read_text_file(path)
    return parse_demand_series(text, file)


def series_frame(series: Iterable[DemandSeries]):  # noqa: ANN201 - a pandas DataFrame
    """``time_utc`` (UTC), ``gpu_model``, ``gpus`` rows of several series, as
    :meth:`forecasting.demand.DemandModel.predict` takes them."""
    import pandas as pd

    parts = [pd.DataFrame({"time_utc": pd.to_datetime(s.times_s, unit="s", utc=True), "gpu_model": s.gpu_model,
                           "gpus": s.gpus}) for s in series]
    if not parts:
        return pd.DataFrame({"time_utc": pd.to_datetime([], utc=True), "gpu_model": [], "gpus": []})
    return pd.concat(parts, ignore_index=True)


def format_demand_series(rows: Iterable[tuple[datetime, str, float]]) -> str:
    """``(time, gpu_model, gpus)`` rows as the text of a demand-series CSV."""
    lines = [",".join(DEMAND_COLUMNS)]
    for t, m, g in rows:
        gs = str(int(g)) if float(g).is_integer() else repr(float(g))
        lines.append(f"{format_utc(t)},{m},{gs}")
    return "\n".join(lines) + "\n"


def write_demand_series(rows: Iterable[tuple[datetime, str, float]], path: str | os.PathLike[str]) -> Path:
    """Write ``(time, gpu_model, gpus)`` rows as a demand-series CSV, all at
    once (``fleetctl.files.write_text_atomic``)."""
    return write_text_atomic(Path(path), format_demand_series(rows))


# =========================================================================== Helios Earth sequences


@dataclass(frozen=True, slots=True)
class HeliosOptions:
    """How to read a Helios sequence: the GPU model of its GPUs, the zone of
    its wall-clock times, the time of its first row when it has no ``time``
    column (rows are then one minute apart), and an optional window
    ``[since, until)`` of rows to keep."""

    gpu_model: str = HELIOS_EARTH_GPU_MODEL
    utc_offset: timezone = timezone(timedelta(hours=8))
    start_utc: datetime | None = None
    since_utc: datetime | None = None
    until_utc: datetime | None = None
    step: timedelta = timedelta(minutes=1)

    def __post_init__(self) -> None:
        check_gpu_model(self.gpu_model)
        for name in ("start_utc", "since_utc", "until_utc"):
            value = getattr(self, name)
            if value is not None and (value.tzinfo is None or value.utcoffset() is None):
                raise ValueError(f"{name} must have a time zone")
        if self.since_utc is not None and self.until_utc is not None and self.until_utc <= self.since_utc:
            raise ValueError("the window is empty: until must be after since")


@dataclass(frozen=True, slots=True)
class HeliosImport:
    """What the importer kept: demand rows and a few counts for the summary."""

    rows: tuple[tuple[datetime, str, int], ...]
    rows_read: int
    running_gpus_max: int
    pending_gpus_max: int

    @property
    def kept(self) -> int:
        return len(self.rows)


def parse_helios_sequence(text: str, file: str = "<string>", options: HeliosOptions = HeliosOptions()) -> HeliosImport:
    """Validate a Helios ``cluster_sequence_vc.csv`` and turn it into demand
    rows (``running_gpu_num + pending_gpu_num`` per row). Raises
    :class:`SpecError` with every problem."""
    records, issues = _records(text, file, "the Helios sequence header (time,...,running_gpu_num,pending_gpu_num,...)")
    index, header_issues = _header(records, file, HELIOS_COLUMNS, ("time",), others_allowed=True)
    has_time = "time" in index
    if not has_time and options.start_utc is None:
        header_issues.append(ValidationIssue(file, records[0].line, 1, "",
                                             "no 'time' column: give the time of the first row (--start)"))
    if has_time and options.start_utc is not None:
        header_issues.append(ValidationIssue(file, records[0].line, 1, "",
                                             "the file has a 'time' column; --start is only for files without one"))
    if header_issues:
        raise SpecError(issues + header_issues)
    width = len(records[0].cells)
    wall = _wall_time(options.utc_offset)
    start = options.start_utc.astimezone(timezone.utc) if options.start_utc is not None else None
    count = lambda s: parse_int(s, low=0, high=MAX_GPUS)  # noqa: E731
    rows: list[tuple[datetime, str, int]] = []
    previous: tuple[datetime, int] | None = None
    first_line, beyond = 0, None  # the first row kept; the first past MAX_SERIES_SPAN from it (time, line)
    running_max = pending_max = read = 0
    for n, record in enumerate(records[1:]):
        cells = _row_cells(record, index, width, file, issues)
        if cells is None:
            continue
        read += 1
        if has_time:
            t = cell_value(issues, file, cells["time"], "time", wall)
        else:
            try:
                t = start + n * options.step  # type: ignore[operator]
            except OverflowError:
                issues.append(ValidationIssue(file, record.line, 1, "", f"this row's time (--start + {n} x "
                                              f"{options.step}) is past the year 9999; give an earlier --start"))
                break
        running = cell_value(issues, file, cells["running_gpu_num"], "running_gpu_num", count)
        pending = cell_value(issues, file, cells["pending_gpu_num"], "pending_gpu_num", count)
        if t is not None and has_time:
            if previous is not None and t <= previous[0]:
                c = cells["time"]
                issues.append(ValidationIssue(file, c.line, c.column, "time",
                                              f"must be after the previous row's time (line {previous[1]}); "
                                              "times are strictly increasing"))
                continue
            previous = (t, record.line)
        if t is None or running is None or pending is None:
            continue
        if running + pending > MAX_GPUS:  # each is at most MAX_GPUS, their sum need not be
            c = cells["pending_gpu_num"]
            issues.append(ValidationIssue(file, c.line, c.column, "pending_gpu_num",
                                          f"running_gpu_num + pending_gpu_num is {running + pending}, more than the "
                                          f"{MAX_GPUS} GPUs a demand series may hold (its reader refuses it)"))
            continue
        running_max, pending_max = max(running_max, running), max(pending_max, pending)
        if options.since_utc is not None and t < options.since_utc:
            continue
        if options.until_utc is not None and t >= options.until_utc:
            continue
        if not rows:
            first_line = record.line
        elif beyond is None and t - rows[0][0] > MAX_SERIES_SPAN:
            beyond = (t, record.line)
        rows.append((t, options.gpu_model, running + pending))
    if beyond is not None:  # what the demand-series reader would refuse (parse_demand_series)
        issues.append(ValidationIssue(
            file, beyond[1], 1, "", f"this row's time ({format_utc(beyond[0])}) is "
            f"{span_text((beyond[0] - rows[0][0]).total_seconds())} after the first row's "
            f"({format_utc(rows[0][0])}, line {first_line}): the series would span "
            f"{span_text((rows[-1][0] - rows[0][0]).total_seconds())}, more than the {MAX_SERIES_SPAN.days} "
            "days a demand series may span; cut a window with --since and --until"))
    if issues:
        raise SpecError(issues)
    if not rows:
        where = ValidationIssue(file, 1, 1, "", "no rows to write" + (" inside the window" if read else
                                                                       ": the file has a header but no rows"))
        raise SpecError([where])
    return HeliosImport(tuple(rows), read, running_max, pending_max)


def import_helios_sequence(path: str | os.PathLike[str], options: HeliosOptions = HeliosOptions()) -> HeliosImport:
    """Read and convert a Helios per-minute sequence file (module docstring)."""
    file, text = read_text_file(path)
    return parse_helios_sequence(text, file, options)


__all__ = [
    "DEMAND_COLUMNS",
    "HELIOS_COLUMNS",
    "HELIOS_EARTH_GPU_MODEL",
    "HELIOS_UTC_OFFSET",
    "MAX_SERIES_SPAN",
    "DemandSeries",
    "HeliosImport",
    "HeliosOptions",
    "check_gpu_model",
    "import_helios_sequence",
    "parse_demand_series",
    "parse_helios_sequence",
    "parse_offset",
    "read_demand_series",
    "series_frame",
    "write_demand_series",
]
