"""Importers: public cluster traces -> job traces (:mod:`fleetctl.sim.traces`).

Pure functions; ``fleetctl trace import ...`` (:mod:`fleetctl.cli.trace`) is a
thin wrapper. One importer so far:

**Alibaba GPU cluster trace v2023** (``openb_pod_list_*.csv`` of
github.com/alibaba/clusterdata, ``cluster-trace-gpu-v2023``): one pod -> one
job of one worker. :func:`read_alibaba_pods` validates the CSV strictly
(``FILE:LINE:COLUMN: column: message``, every problem at once);
:func:`convert_alibaba_pods` turns the pods into jobs and an
:class:`ImportSummary`; :func:`import_alibaba_2023` does both. The rules are
documented in ``docs/traces.md``; in short:

* times are seconds since the trace start, added to ``start_utc``;
  submit = ``creation_time``, duration = ``deletion_time - scheduled_time``;
* ``pod_phase`` is the phase when the pod was deleted: a ``Running`` pod was
  deleted while it ran, and its run time ends at ``deletion_time`` like any
  other; one whose ``deletion_time`` is the pod list's last one was still
  running when the trace ended (right-censored): kept with the duration
  observed, counted as censored;
* ``Pending`` pods never ran (no ``scheduled_time``): dropped, or kept with
  ``pending_duration_hours`` when given;
* zero or negative durations and pods requesting 0 vCPU or 0 memory are dropped;
* CPU-only pods are dropped unless ``include_cpu``;
* a fractional GPU (``gpu_milli < 1000``, GPU-sharing pods) is rounded up to
  one whole GPU: clouds sell whole GPUs;
* ``gpu_spec`` codes map to our GPU names; the undisclosed ``G2``/``G3`` are
  removed from the constraint (if nothing is left, the job accepts any GPU);
* ``qos`` maps to a priority class through ``priority_map``.

Seeded choices (checkpointable jobs, deadlines) use one random stream per pod,
seeded by ``(seed, pod name)``, so a pod gets the same choices whatever else is
filtered, windowed or limited.
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Final

from fleetctl import model
from fleetctl.jobspec import MIN_CHECKPOINT_INTERVAL_MINUTES
from fleetctl.sim.traces import (
    CellError,
    CsvRecord,
    cell_value,
    is_valid_job_id,
    is_valid_name,
    parse_csv,
    parse_int,
    parse_number,
    read_text_file,
)
from fleetctl.yamlerrors import SpecError, ValidationIssue, describe_value, did_you_mean

__all__ = [
    "ALIBABA_2023_COLUMNS",
    "ALIBABA_GPU_SPEC",
    "ALIBABA_QOS",
    "ALIBABA_UNDISCLOSED_GPU_SPEC",
    "DEFAULT_ALIBABA_PRIORITY_MAP",
    "DROP_REASONS",
    "AlibabaOptions",
    "AlibabaPod",
    "ImportResult",
    "ImportSummary",
    "convert_alibaba_pods",
    "import_alibaba_2023",
    "parse_alibaba_pods",
    "parse_priority_map",
    "read_alibaba_pods",
]

# =========================================================================== vocabulary

#: Columns of ``openb_pod_list_default.csv`` / ``openb_pod_list_gpuspec33.csv``
#: (any order; all required).
ALIBABA_2023_COLUMNS: Final[tuple[str, ...]] = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)

#: ``gpu_spec`` codes -> our GPU model names (the node list's ``model`` column
#: uses the same codes).
ALIBABA_GPU_SPEC: Final[Mapping[str, str]] = MappingProxyType(
    {
        "A10": "A10",
        "P100": "P100",
        "T4": "T4",
        "V100M16": "V100-16GB",
        "V100M32": "V100-32GB",
    }
)

#: Alibaba-internal GPU codes whose model was not disclosed.
ALIBABA_UNDISCLOSED_GPU_SPEC: Final[frozenset[str]] = frozenset({"G2", "G3"})

#: The QoS classes of the trace.
ALIBABA_QOS: Final[tuple[str, ...]] = ("LS", "Guaranteed", "Burstable", "BE")

#: Default ``qos`` -> priority class: latency-sensitive and guaranteed pods are
#: ``production``, burstable and best-effort pods ``batch`` (the two classes of
#: ``policies/example.yaml``).
DEFAULT_ALIBABA_PRIORITY_MAP: Final[Mapping[str, str]] = MappingProxyType(
    {"LS": "production", "Guaranteed": "production", "Burstable": "batch", "BE": "batch"}
)

_PHASES: Final[tuple[str, ...]] = ("Running", "Succeeded", "Failed", "Pending")

#: Why a pod was dropped, in the order the rules are applied, with the text
#: the summary shows.
DROP_REASONS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "cpu_only": "CPU-only pod (keep with --include-cpu)",
        "pending": "Pending: never scheduled, duration unknown (keep with --pending-duration-hours)",
        "zero_request": "requests 0 vCPU or 0 memory",
        "non_positive_duration": "zero or negative duration (deletion_time <= scheduled_time)",
        "outside_window": "submitted after the --window-hours window",
        "over_limit": "beyond --limit",
    }
)

_NAME_CHARS = "letters, digits, '.', '-' and '_' (at most 128, starting with a letter or digit)"


# =========================================================================== pods


@dataclass(frozen=True, slots=True)
class AlibabaPod:
    """One row of the pod list, validated. Times are seconds since the trace
    start; ``scheduled_time`` is ``None`` for Pending pods."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...]
    qos: str
    pod_phase: str
    creation_time: float
    deletion_time: float | None
    scheduled_time: float | None
    line: int = 0


def _pod_name(text: str) -> str:
    if text == "":
        raise CellError("required value is missing (the cell is empty)")
    if not is_valid_job_id(text):
        raise CellError(f"invalid pod name {describe_value(text)} for a job id: use {_NAME_CHARS}")
    return text


def _gpu_spec(text: str) -> tuple[str, ...]:
    if text == "":
        return ()
    codes = text.split("|")
    known = sorted(set(ALIBABA_GPU_SPEC) | ALIBABA_UNDISCLOSED_GPU_SPEC)
    for code in codes:
        if code == "":
            raise CellError(f"empty GPU code in {describe_value(text)}; separate codes with a single '|'")
        if code not in ALIBABA_GPU_SPEC and code not in ALIBABA_UNDISCLOSED_GPU_SPEC:
            hint = did_you_mean(code, known)
            raise CellError(f"unknown GPU code {describe_value(code)}" + (f" (did you mean {hint!r}?)" if hint else "")
                            + f"; known: {', '.join(known)}")
    return tuple(codes)


def _one_of(allowed: tuple[str, ...], what: str):  # noqa: ANN202 - returns a parser
    def parse(text: str) -> str:
        if text in allowed:
            return text
        if text == "":
            raise CellError("required value is missing (the cell is empty)")
        hint = did_you_mean(text, allowed)
        raise CellError(f"unknown {what} {describe_value(text)}" + (f" (did you mean {hint!r}?)" if hint else "")
                        + f"; allowed: {', '.join(allowed)}")

    return parse


#: Latest time accepted, seconds since the trace start (10 years; the trace
#: spans 149 days). Keeps every duration within a job trace's limit.
MAX_TRACE_SECONDS: Final[float] = 10 * 365 * 86400.0


def _seconds(text: str) -> float:
    return parse_number(text, at_least=0, at_most=MAX_TRACE_SECONDS)


def _optional_seconds(text: str) -> float | None:
    return None if text == "" else _seconds(text)


def parse_alibaba_pods(text: str, file: str = "<string>") -> tuple[AlibabaPod, ...]:
    """Validate pod-list CSV ``text``; see :func:`read_alibaba_pods`."""
    records, issues = parse_csv(text, file)
    if not records and not issues:
        raise SpecError([ValidationIssue(file, 1, 1, "", "file is empty; expected a header with the columns "
                                                         + ",".join(ALIBABA_2023_COLUMNS))])
    if not records or records[0].line != 1:
        raise SpecError(issues or [ValidationIssue(file, 1, 1, "", "the first line must be the header")])
    header = records[0]
    index, header_issues = _pod_header(header, file)
    if header_issues:
        raise SpecError(issues + header_issues)

    pods: list[AlibabaPod] = []
    first_line: dict[str, int] = {}
    for record in records[1:]:
        pod = _pod_row(record, index, file, issues, first_line)
        if pod is not None:
            pods.append(pod)
    if issues:
        raise SpecError(issues)
    return tuple(pods)


def read_alibaba_pods(path: str | os.PathLike[str]) -> tuple[AlibabaPod, ...]:
    """Read an Alibaba v2023 pod list (``openb_pod_list_default.csv`` or
    ``..._gpuspec33.csv``), in file order. Raises :class:`SpecError` with every
    problem as ``FILE:LINE:COLUMN: column: message``."""
    file, text = read_text_file(path)
    return parse_alibaba_pods(text, file)


def _pod_header(record: CsvRecord, file: str) -> tuple[dict[str, int], list[ValidationIssue]]:
    issues: list[ValidationIssue] = []
    index: dict[str, int] = {}
    for i, cell in enumerate(record.cells):
        if cell.text in index:
            issues.append(ValidationIssue(file, cell.line, cell.column, cell.text, "column is listed twice"))
        elif cell.text not in ALIBABA_2023_COLUMNS:
            hint = did_you_mean(cell.text, ALIBABA_2023_COLUMNS)
            issues.append(ValidationIssue(
                file, cell.line, cell.column, "",
                f"unknown column {describe_value(cell.text)}" + (f" (did you mean {hint!r}?)" if hint else "")
                + f"; expected the columns {', '.join(ALIBABA_2023_COLUMNS)}",
            ))
        index.setdefault(cell.text, i)
    missing = [c for c in ALIBABA_2023_COLUMNS if c not in index]
    if missing:
        note = ""
        if "creation_time" in missing and "name" in index:
            note = " (openb_pod_list_multigpu50.csv has no times or qos; use openb_pod_list_default.csv or " \
                   "openb_pod_list_gpuspec33.csv)"
        issues.append(ValidationIssue(file, record.line, 1, "", f"missing column(s) {', '.join(missing)}{note}"))
    return index, issues


def _pod_row(record: CsvRecord, index: dict[str, int], file: str, issues: list[ValidationIssue],
             first_line: dict[str, int]) -> AlibabaPod | None:
    if record.blank:
        issues.append(ValidationIssue(file, record.line, 1, "", "blank line; remove it"))
        return None
    if len(record.cells) != len(index):
        issues.append(ValidationIssue(file, record.line, 1, "", f"the row has {len(record.cells)} cells; the header "
                                                                f"has {len(index)}"))
        return None
    cells = {name: record.cells[i] for name, i in index.items()}
    before = len(issues)

    def get(column: str, parse):  # noqa: ANN001, ANN202
        return cell_value(issues, file, cells[column], column, parse)

    def issue(column: str, message: str) -> None:
        c = cells[column]
        issues.append(ValidationIssue(file, c.line, c.column, column, message))

    name = get("name", _pod_name)
    # Upper limits: those of a job trace (100,000 vCPU, 1,000,000 GiB).
    cpu_milli = get("cpu_milli", lambda t: parse_int(t, low=0, high=100_000_000))
    memory_mib = get("memory_mib", lambda t: parse_int(t, low=0, high=1_024_000_000))
    num_gpu = get("num_gpu", lambda t: parse_int(t, low=0, high=1024))
    gpu_milli = get("gpu_milli", lambda t: parse_int(t, low=0, high=1000))
    gpu_spec = get("gpu_spec", _gpu_spec)
    qos = get("qos", _one_of(ALIBABA_QOS, "qos"))
    phase = get("pod_phase", _one_of(_PHASES, "pod_phase"))
    creation = get("creation_time", _seconds)
    deletion = get("deletion_time", _optional_seconds)
    scheduled = get("scheduled_time", _optional_seconds)

    if name is not None:
        if name in first_line:
            issue("name", f"duplicate pod name {name!r} (first used at line {first_line[name]})")
        else:
            first_line[name] = record.line
    if num_gpu is not None and gpu_milli is not None:
        if num_gpu == 0 and gpu_milli != 0:
            issue("gpu_milli", f"must be 0 for a pod without GPUs (got {gpu_milli})")
        elif num_gpu >= 1 and gpu_milli == 0:
            issue("gpu_milli", "must be above 0 for a pod with GPUs (got 0)")
        elif num_gpu > 1 and gpu_milli != 1000:
            issue("gpu_milli", f"must be 1000 for a pod with {num_gpu} GPUs (only 1-GPU pods share a GPU; "
                               f"got {gpu_milli})")
    if phase is not None and "scheduled_time" in cells and cells["scheduled_time"].text.strip() == "":
        if phase != "Pending":
            issue("scheduled_time", f"required value is missing (the cell is empty) for a {phase} pod; only "
                                    "Pending pods have none")
    elif phase == "Pending" and scheduled is not None:
        issue("scheduled_time", "must be empty for a Pending pod (it was never scheduled)")
    if phase is not None and phase != "Pending" and cells["deletion_time"].text.strip() == "":
        issue("deletion_time", f"required value is missing (the cell is empty) for a {phase} pod")
    if creation is not None and scheduled is not None and scheduled < creation:
        # Never so in the published trace (0 of 25,365 pods); a cut-off last row reads this way, and its
        # duration came out as thousands of hours.
        issue("scheduled_time", f"{scheduled:g} is before creation_time {creation:g} (a truncated or edited row?)")
    if len(issues) > before:
        return None
    return AlibabaPod(
        name=name, cpu_milli=cpu_milli, memory_mib=memory_mib, num_gpu=num_gpu, gpu_milli=gpu_milli,
        gpu_spec=gpu_spec, qos=qos, pod_phase=phase, creation_time=creation, deletion_time=deletion,
        scheduled_time=scheduled, line=record.line,
    )


# =========================================================================== conversion


def parse_priority_map(text: str) -> dict[str, str]:
    """``"LS=production,BE=batch"`` -> the default map with those entries
    replaced. Raises ``ValueError`` with a message for people."""
    result = dict(DEFAULT_ALIBABA_PRIORITY_MAP)
    if text.strip() == "":
        raise ValueError("--priority-map is empty; write QOS=CLASS pairs such as LS=production,BE=batch")
    seen: set[str] = set()
    for part in text.split(","):
        qos, sep, cls = (s.strip() for s in part.partition("="))
        if not sep or not qos or not cls:
            raise ValueError(f"--priority-map entry {part.strip()!r} is not QOS=CLASS (e.g. LS=production)")
        if qos not in ALIBABA_QOS:
            hint = did_you_mean(qos, ALIBABA_QOS)
            raise ValueError(f"--priority-map: unknown qos {qos!r}" + (f" (did you mean {hint!r}?)" if hint else "")
                             + f"; the trace uses {', '.join(ALIBABA_QOS)}")
        if qos in seen:
            raise ValueError(f"--priority-map: qos {qos!r} is mapped twice")
        if not is_valid_name(cls):
            raise ValueError(f"--priority-map: invalid priority class name {cls!r}: use letters, digits, '-' and "
                             "'_' (at most 63, starting with a letter or digit)")
        seen.add(qos)
        result[qos] = cls
    return result


#: Years a trace's --start may fall in: the pods' offsets (up to weeks) stay far inside datetime's range.
START_YEARS = (1970, 9000)


@dataclass(frozen=True, slots=True)
class AlibabaOptions:
    """How pods become jobs. ``start_utc`` is the wall-clock time of the
    trace's second 0 (the trace has no absolute timestamps)."""

    start_utc: datetime
    include_cpu: bool = False
    pending_duration_hours: float | None = None
    priority_map: Mapping[str, str] = field(default_factory=lambda: DEFAULT_ALIBABA_PRIORITY_MAP)
    team: str = "default"
    seed: int = 0
    checkpointable_fraction: float = 0.0
    checkpoint_interval_minutes: float = 30.0
    deadline_fraction: float = 0.0
    deadline_slack: tuple[float, float] = (1.5, 3.0)
    limit: int | None = None
    window_hours: float | None = None

    def __post_init__(self) -> None:
        if self.start_utc.tzinfo is None or self.start_utc.utcoffset() is None:
            raise ValueError("start_utc must be timezone-aware")
        if not START_YEARS[0] <= self.start_utc.year <= START_YEARS[1]:
            raise ValueError(f"start_utc must be within the years {START_YEARS[0]}..{START_YEARS[1]} "
                             f"(got {self.start_utc.year})")
        for name in ("checkpointable_fraction", "deadline_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within 0..1 (got {value})")
        if not (self.checkpoint_interval_minutes >= MIN_CHECKPOINT_INTERVAL_MINUTES
                and math.isfinite(self.checkpoint_interval_minutes)):
            raise ValueError("checkpoint_interval_minutes must be finite and at least "
                             f"{MIN_CHECKPOINT_INTERVAL_MINUTES:g} "
                             f"(got {self.checkpoint_interval_minutes})")
        if self.pending_duration_hours is not None and not 0 < self.pending_duration_hours <= 100_000:
            raise ValueError(f"pending_duration_hours must be above 0 (got {self.pending_duration_hours})")
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"limit must be 0 or more (got {self.limit})")
        if self.window_hours is not None and not 0 < self.window_hours <= 100_000:
            raise ValueError(f"window_hours must be above 0 and at most 100000 (got {self.window_hours})")
        low, high = self.deadline_slack
        if not 1.0 < low <= high:
            raise ValueError(f"deadline_slack must be (low, high) with 1 < low <= high (got {self.deadline_slack})")
        missing = [q for q in ALIBABA_QOS if q not in self.priority_map]
        if missing:
            raise ValueError(f"priority_map has no class for qos {', '.join(missing)}")
        bad = sorted(str(v) for v in self.priority_map.values() if not isinstance(v, str) or not is_valid_name(v))
        if bad:
            raise ValueError(f"priority_map: invalid priority class name(s) {', '.join(bad)}")
        if not is_valid_name(self.team):
            raise ValueError(f"team: invalid name {self.team!r}")


@dataclass(frozen=True)
class ImportSummary:
    """What an import kept and dropped, for people and tests.

    ``dropped`` counts pods per reason (keys of :data:`DROP_REASONS`, in that
    order, zero counts left out). The other counts are of kept jobs.
    """

    pods_read: int
    kept: int
    dropped: Mapping[str, int] = field(default_factory=dict)
    censored: int = 0  # Running when the trace ended (deletion_time = the last one): duration is what was observed
    pending_with_assumed_duration: int = 0
    fractional_gpu_rounded_up: int = 0
    cpu_only: int = 0
    gpu_spec_mapped: int = 0  # kept a GPU-model constraint
    gpu_spec_undisclosed_dropped: int = 0  # only G2/G3: constraint dropped (any GPU)
    gpu_spec_undisclosed_narrowed: int = 0  # G2/G3 removed, the disclosed models kept
    checkpointable: int = 0
    with_deadline: int = 0
    first_submit_utc: datetime | None = None
    last_submit_utc: datetime | None = None

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


@dataclass(frozen=True)
class ImportResult:
    jobs: tuple[model.Job, ...]
    summary: ImportSummary


@dataclass(frozen=True, slots=True)
class _Kept:
    pod: AlibabaPod
    submitted: datetime
    duration_hours: float
    gpu_models: tuple[str, ...]
    undisclosed: str  # "", "dropped" or "narrowed"


def _gpu_models(pod: AlibabaPod) -> tuple[tuple[str, ...], str]:
    if pod.num_gpu == 0 or not pod.gpu_spec:
        return (), ""
    named = tuple(sorted({ALIBABA_GPU_SPEC[c] for c in pod.gpu_spec if c in ALIBABA_GPU_SPEC}))
    if not any(c in ALIBABA_UNDISCLOSED_GPU_SPEC for c in pod.gpu_spec):
        return named, ""
    return named, ("narrowed" if named else "dropped")


def convert_alibaba_pods(pods: Iterable[AlibabaPod], options: AlibabaOptions) -> ImportResult:
    """Turn pods into jobs (sorted by submit time, then pod order) and a summary.

    Rules in order: CPU-only, Pending, zero request, non-positive duration
    (each a drop reason); then the ``window_hours`` window from the earliest
    remaining submit time, then ``limit``; then the seeded choices.
    """
    pods = list(pods)
    start = options.start_utc.astimezone(timezone.utc)
    # Design choice: the end of observation is the pod list's last deletion_time (of every pod read, whatever is
    # filtered). The trace gives a pod alive at its end that second; a Running pod deleted earlier was deleted
    # while it ran (in the published trace, 34 of the 5,193 Running pods end at the last second, the others at
    # 4,940 different times), so its run time is complete, not a lower bound.
    trace_end = max((p.deletion_time for p in pods if p.deletion_time is not None), default=None)
    dropped: Counter[str] = Counter()
    kept: list[_Kept] = []
    for pod in pods:
        if pod.num_gpu == 0 and not options.include_cpu:
            dropped["cpu_only"] += 1
            continue
        if pod.pod_phase == "Pending" and options.pending_duration_hours is None:
            dropped["pending"] += 1
            continue
        if pod.cpu_milli == 0 or pod.memory_mib == 0:
            dropped["zero_request"] += 1
            continue
        if pod.pod_phase == "Pending":
            assert options.pending_duration_hours is not None
            duration = float(options.pending_duration_hours)
        else:
            assert pod.deletion_time is not None and pod.scheduled_time is not None
            seconds = pod.deletion_time - pod.scheduled_time
            if seconds <= 0:
                dropped["non_positive_duration"] += 1
                continue
            duration = seconds / 3600
        models, undisclosed = _gpu_models(pod)
        kept.append(_Kept(pod, start + timedelta(seconds=pod.creation_time), duration, models, undisclosed))

    kept.sort(key=lambda k: (k.submitted, k.pod.line))
    if options.window_hours is not None and kept:
        end = kept[0].submitted + timedelta(hours=options.window_hours)
        inside = [k for k in kept if k.submitted < end]
        dropped["outside_window"] += len(kept) - len(inside)
        kept = inside
    if options.limit is not None and len(kept) > options.limit:
        dropped["over_limit"] += len(kept) - options.limit
        kept = kept[: options.limit]

    jobs = tuple(_job(k, options) for k in kept)
    summary = ImportSummary(
        pods_read=len(pods),
        kept=len(jobs),
        dropped={reason: dropped[reason] for reason in DROP_REASONS if dropped[reason]},
        censored=sum(1 for k in kept if k.pod.pod_phase == "Running" and k.pod.deletion_time == trace_end),
        pending_with_assumed_duration=sum(1 for k in kept if k.pod.pod_phase == "Pending"),
        fractional_gpu_rounded_up=sum(1 for k in kept if k.pod.num_gpu == 1 and k.pod.gpu_milli < 1000),
        cpu_only=sum(1 for k in kept if k.pod.num_gpu == 0),
        gpu_spec_mapped=sum(1 for j in jobs if j.gpu_models),
        gpu_spec_undisclosed_dropped=sum(1 for k in kept if k.undisclosed == "dropped"),
        gpu_spec_undisclosed_narrowed=sum(1 for k in kept if k.undisclosed == "narrowed"),
        checkpointable=sum(1 for j in jobs if j.checkpointable),
        with_deadline=sum(1 for j in jobs if j.deadline_utc is not None),
        first_submit_utc=jobs[0].submitted_at_utc if jobs else None,
        last_submit_utc=jobs[-1].submitted_at_utc if jobs else None,
    )
    return ImportResult(jobs, summary)


def _job(k: _Kept, options: AlibabaOptions) -> model.Job:
    pod = k.pod
    # One stream per pod: its choices do not depend on which other pods are kept.
    rng = random.Random(f"alibaba-2023/{options.seed}/{pod.name}")
    checkpointable = rng.random() < options.checkpointable_fraction
    has_deadline = rng.random() < options.deadline_fraction
    low, high = options.deadline_slack
    slack = low + (high - low) * rng.random()
    deadline = None
    if has_deadline:
        # Whole seconds, rounded up, so the trace text stays short.
        deadline = k.submitted + timedelta(seconds=math.ceil(k.duration_hours * 3600 * slack))
    return model.Job(
        job_id=pod.name,
        workers=1,
        gpus_per_worker=pod.num_gpu,  # a fractional GPU (num_gpu 1, gpu_milli < 1000) is one whole GPU
        vcpus_per_worker=pod.cpu_milli / 1000,
        memory_gib_per_worker=pod.memory_mib / 1024,
        priority=options.priority_map[pod.qos],
        team=options.team,
        duration_hours=k.duration_hours,
        submitted_at_utc=k.submitted,
        gpu_models=k.gpu_models,
        checkpointable=checkpointable,
        checkpoint_interval_minutes=float(options.checkpoint_interval_minutes) if checkpointable else None,
        deadline_utc=deadline,
    )


def import_alibaba_2023(path: str | os.PathLike[str], options: AlibabaOptions) -> ImportResult:
    """Read and convert an Alibaba v2023 pod list. Raises :class:`SpecError`
    when the file is invalid."""
    return convert_alibaba_pods(read_alibaba_pods(path), options)
