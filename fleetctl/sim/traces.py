"""Job traces: one job per CSV row, read strictly and written canonically.

The format (documented for people in ``docs/traces.md``)::

    job_id,submit_time_utc,duration_hours,workers,gpus_per_worker,gpu_models,vcpus_per_worker,
    memory_gib_per_worker,priority,team,checkpointable,checkpoint_interval_minutes,deadline_utc,spot_eligible

(one header line, exactly those 14 columns in that order). Field names are the
``model.Job`` names, so a trace row and a queued job speak one language.

* :func:`read_job_trace` validates every cell and collects every problem as a
  :class:`~fleetctl.yamlerrors.ValidationIssue` ``FILE:LINE:COLUMN: column:
  message`` (LINE is the CSV line the cell starts on, COLUMN the character
  position of the cell in that line, ``column`` the CSV column name); it
  raises one :class:`~fleetctl.yamlerrors.SpecError` carrying all of them and
  never another exception type on bad input.
* :func:`write_job_trace` writes jobs so that ``read_job_trace`` gives them
  back equal (the trace fields; runtime fields such as ``state`` are not part
  of a trace).

The small CSV tokenizer here (:func:`parse_csv`) records where each cell
starts; :mod:`fleetctl.sim.importers` reads its input CSVs with it too.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, TypeVar

from fleetctl import model
from fleetctl.files import write_text_atomic
from fleetctl.jobspec import (
    MAX_DURATION_HOURS,
    MAX_GPUS_PER_WORKER,
    MAX_MEMORY_GIB_PER_WORKER,
    MAX_VCPUS_PER_WORKER,
    MAX_WORKERS,
    MIN_CHECKPOINT_INTERVAL_MINUTES,
    MIN_MEMORY_GIB_PER_WORKER,
    MIN_VCPUS_PER_WORKER,
    parse_utc_timestamp,
)
from fleetctl.policy import GPU_MODELS
from fleetctl.yamlerrors import SpecError, ValidationIssue, decode_utf8, describe_value, did_you_mean

__all__ = [
    "DEFAULT_TEAM",
    "TRACE_COLUMNS",
    "CsvCell",
    "CsvRecord",
    "CellError",
    "cell_value",
    "format_job_trace",
    "format_number",
    "format_utc",
    "is_valid_job_id",
    "is_valid_name",
    "parse_bool",
    "parse_csv",
    "parse_int",
    "parse_job_trace",
    "parse_number",
    "parse_timestamp",
    "read_job_trace",
    "read_text_file",
    "trace_fields",
    "write_job_trace",
]

#: The header of a job trace, exactly, in this order.
TRACE_COLUMNS: tuple[str, ...] = (
    "job_id",
    "submit_time_utc",
    "duration_hours",
    "workers",
    "gpus_per_worker",
    "gpu_models",
    "vcpus_per_worker",
    "memory_gib_per_worker",
    "priority",
    "team",
    "checkpointable",
    "checkpoint_interval_minutes",
    "deadline_utc",
    "spot_eligible",
)

#: The team of a row whose ``team`` cell is empty.
DEFAULT_TEAM = "default"

# Limits: a job spec's (fleetctl.jobspec), so every trace job could also be
# submitted as a job file.

# Used with fullmatch (``$`` would accept a trailing newline).
_JOB_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62})")
# Plain decimal numbers only: no "nan", "inf", "1_000", "0x10", " 1".
# (ASCII digits only: \d would also accept other scripts' digits.)
_NUMBER_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INTEGER_RE = re.compile(r"[0-9]+")
_NEGATIVE_INTEGER_RE = re.compile(r"-[0-9]+")


# =========================================================================== CSV with positions


@dataclass(frozen=True, slots=True)
class CsvCell:
    """One cell's text (quotes removed) and where it starts (1-based)."""

    text: str
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class CsvRecord:
    """One CSV record: the line it starts on and its cells."""

    line: int
    cells: tuple[CsvCell, ...]

    @property
    def blank(self) -> bool:
        return len(self.cells) == 1 and self.cells[0].text == ""


_UNQUOTED_CELL = re.compile(r'[^,"\n]*')


def parse_csv(text: str, file: str) -> tuple[list[CsvRecord], list[ValidationIssue]]:
    """Split ``text`` into records of positioned cells (RFC 4180: ``,``
    separates cells, ``"`` quotes a cell, ``""`` is a quote inside a quoted
    cell, records end with ``\\n`` or ``\\r\\n``).

    Returns the well-formed records and an issue for each malformed one (a
    stray quote, text after a closing quote; both skip the rest of the line)
    or for a quoted cell that is never closed (which ends the parse).
    """
    records: list[CsvRecord] = []
    issues: list[ValidationIssue] = []
    i, n, line, line_start = 0, len(text), 1, 0

    def skip_line() -> None:
        nonlocal i, line, line_start
        k = text.find("\n", i)
        i = n if k < 0 else k + 1
        if k >= 0:
            line += 1
            line_start = i

    while i < n:
        record_line = line
        cells: list[CsvCell] = []
        ok = True
        while True:
            cell_line, cell_column = line, i - line_start + 1
            if i < n and text[i] == '"':
                parts: list[str] = []
                j = i + 1
                while True:
                    k = text.find('"', j)
                    if k < 0:
                        issues.append(ValidationIssue(
                            file, cell_line, cell_column, "",
                            "a quoted cell is never closed (a '\"' is missing); nothing after it was read",
                        ))
                        return records, issues
                    parts.append(text[j:k])
                    if text.startswith('"', k + 1):
                        parts.append('"')
                        j = k + 2
                        continue
                    break
                inside = text[i : k + 1]
                newlines = inside.count("\n")
                if newlines:
                    line += newlines
                    line_start = i + inside.rfind("\n") + 1
                i = k + 1
                value = "".join(parts)
                if text.startswith("\r\n", i):
                    i += 1
                if i < n and text[i] not in ",\n":
                    issues.append(ValidationIssue(
                        file, line, i - line_start + 1, "",
                        f"unexpected {describe_value(text[i])} after a closing quote; a quoted cell must be "
                        "followed by ',' or the end of the line",
                    ))
                    ok = False
                    skip_line()
                    break
            else:
                m = _UNQUOTED_CELL.match(text, i)
                assert m is not None  # the pattern matches the empty string
                i = m.end()
                value = m.group()
                if i < n and text[i] == '"':
                    issues.append(ValidationIssue(
                        file, line, i - line_start + 1, "",
                        "a '\"' inside an unquoted cell; quote the whole cell and double the quote (\"\")",
                    ))
                    ok = False
                    skip_line()
                    break
                if value.endswith("\r") and i < n and text[i] == "\n":
                    value = value[:-1]  # \r\n line end
            cells.append(CsvCell(value, cell_line, cell_column))
            if i < n and text[i] == ",":
                i += 1
                continue
            if i < n:  # text[i] == "\n"
                i += 1
                line += 1
                line_start = i
            break
        if ok:
            records.append(CsvRecord(record_line, tuple(cells)))
    return records, issues


def read_text_file(path: str | os.PathLike[str]) -> tuple[str, str]:
    """``(file, text)`` of a UTF-8 file (a byte-order mark is dropped), or
    :class:`SpecError` naming the file when it cannot be read or decoded."""
    try:
        file = os.fspath(path)
    except TypeError:
        raise SpecError([ValidationIssue(str(path), 1, 1, "", "not a file path")]) from None
    try:
        with open(file, "rb") as fh:
            raw = fh.read()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SpecError([ValidationIssue(file, 1, 1, "", f"cannot read the file: {reason}")]) from None
    return file, decode_utf8(file, raw)


# =========================================================================== cell parsers


class CellError(ValueError):
    """A cell's text is not a valid value; the message is for people."""


T = TypeVar("T")


def cell_value(issues: list[ValidationIssue], file: str, cell: CsvCell, column: str,
               parse: Callable[[str], T]) -> T | None:
    """``parse(cell.text)``, or ``None`` with an issue at the cell."""
    text = cell.text
    if text != text.strip():
        issues.append(ValidationIssue(file, cell.line, cell.column, column,
                                      f"has leading or trailing spaces ({describe_value(text)}); remove them"))
        return None
    try:
        return parse(text)
    except CellError as exc:
        issues.append(ValidationIssue(file, cell.line, cell.column, column, str(exc)))
        return None


def parse_int(text: str, *, low: int, high: int) -> int:
    if text == "":
        raise CellError("required value is missing (the cell is empty)")
    if not _INTEGER_RE.fullmatch(text):
        if _NEGATIVE_INTEGER_RE.fullmatch(text):
            raise CellError(f"must be at least {low} (got {describe_value(text)})")
        raise CellError(f"must be a whole number (got {describe_value(text)})")
    if len(text.lstrip("0")) > 12:
        raise CellError(f"must be at most {high} (got {describe_value(text)})")
    value = int(text)
    if value < low:
        raise CellError(f"must be at least {low} (got {describe_value(text)})")
    if value > high:
        raise CellError(f"must be at most {high} (got {describe_value(text)})")
    return value


def parse_number(text: str, *, above: float | None = None, at_least: float | None = None,
                 at_most: float | None = None) -> float:
    if text == "":
        raise CellError("required value is missing (the cell is empty)")
    if not _NUMBER_RE.fullmatch(text):
        raise CellError(f"must be a number such as 1.5 (got {describe_value(text)})")
    value = float(text)
    if not math.isfinite(value):
        raise CellError(f"must be a finite number (got {describe_value(text)})")
    if above is not None and not value > above:
        raise CellError(f"must be greater than {format_number(above)} (got {describe_value(text)})")
    if at_least is not None and value < at_least:
        raise CellError(f"must be at least {format_number(at_least)} (got {describe_value(text)})")
    if at_most is not None and value > at_most:
        raise CellError(f"must be at most {format_number(at_most)} (got {describe_value(text)})")
    return value


def parse_bool(text: str) -> bool:
    if text == "true":
        return True
    if text == "false":
        return False
    if text == "":
        raise CellError("required value is missing (the cell is empty); write true or false")
    raise CellError(f"must be true or false (got {describe_value(text)})")


def parse_timestamp(text: str) -> datetime:
    if text == "":
        raise CellError("required value is missing (the cell is empty)")
    try:
        return parse_utc_timestamp(text)
    except (ValueError, OverflowError) as exc:
        raise CellError(str(exc)) from None


def _optional(parse: Callable[[str], T]) -> Callable[[str], T | None]:
    def wrapped(text: str) -> T | None:
        return None if text == "" else parse(text)

    return wrapped


def _job_id(text: str) -> str:
    if text == "":
        raise CellError("required value is missing (the cell is empty)")
    if not is_valid_job_id(text):
        raise CellError(f"invalid job id {describe_value(text)}: use letters, digits, '.', '-' and '_' (at most 128, "
                        "starting with a letter or digit)")
    return text


def _name(default: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text == "":
            return default
        if not is_valid_name(text):
            raise CellError(f"invalid name {describe_value(text)}: use letters, digits, '-' and '_' (at most 63, "
                            "starting with a letter or digit)")
        return text

    return parse


def _gpu_models(text: str) -> tuple[str, ...]:
    if text == "":
        return ()
    names = text.split("|")
    seen: set[str] = set()
    for name in names:
        if name == "":
            raise CellError(f"empty GPU model name in {describe_value(text)}; separate names with a single '|'")
        if name not in GPU_MODELS:
            message = f"unknown GPU model {describe_value(name)}"
            hint = _gpu_hint(name)
            if hint:
                message += f" (did you mean {hint!r}?)"
            raise CellError(f"{message}; allowed: {', '.join(GPU_MODELS)}")
        if name in seen:
            raise CellError(f"GPU model {name!r} is listed twice")
        seen.add(name)
    # A set of acceptable models, kept sorted (as fleetctl.jobspec does).
    return tuple(sorted(names))


def _gpu_hint(name: str) -> str | None:
    try:
        from providers.catalog import normalise_gpu_model

        normal = normalise_gpu_model(name)
    except Exception:  # noqa: BLE001 - a hint must never break validation
        normal = None
    if normal is not None and normal in GPU_MODELS:
        return normal
    return did_you_mean(name, GPU_MODELS)


def is_valid_job_id(text: str) -> bool:
    """Job ids: letters, digits, '.', '-', '_', at most 128, starting with a
    letter or digit (as in job specs)."""
    return _JOB_ID_RE.fullmatch(text) is not None


def is_valid_name(text: str) -> bool:
    """Team and priority-class names (as in the policy)."""
    return _NAME_RE.fullmatch(text) is not None


# =========================================================================== reading


def parse_job_trace(text: str, file: str = "<string>", policy: model.Policy | None = None) -> tuple[model.Job, ...]:
    """Validate job-trace CSV ``text`` (named ``file`` in messages); see
    :func:`read_job_trace`."""
    records, issues = parse_csv(text, file)
    if not records and not issues:
        raise SpecError([ValidationIssue(file, 1, 1, "", "file is empty; expected the header "
                                                         + ",".join(TRACE_COLUMNS))])
    if not records or records[0].line != 1:
        # The header itself was malformed.
        raise SpecError(issues or [ValidationIssue(file, 1, 1, "", "the first line must be the header")])
    header_issues = _check_header(records[0], file)
    if header_issues:
        raise SpecError(issues + header_issues)

    default_priority = (policy or model.Policy()).default_priority_class
    classes = None if policy is None else [pc.name for pc in policy.priority_classes]
    jobs: list[model.Job] = []
    first_line_of_id: dict[str, int] = {}
    for record in records[1:]:
        job = _row(record, file, issues, default_priority, classes, first_line_of_id)
        if job is not None:
            jobs.append(job)
    if issues:
        raise SpecError(issues)
    return tuple(jobs)


def read_job_trace(path: str | os.PathLike[str], policy: model.Policy | None = None) -> tuple[model.Job, ...]:
    """Read a job-trace CSV file: the jobs in file order, each QUEUED with
    ``submitted_at_utc`` = its ``submit_time_utc``.

    An empty ``priority`` is the policy's ``default_priority_class`` (without
    a policy, the default of ``model.Policy``: ``"default"``), an empty
    ``team`` is ``"default"``. With ``policy``, a priority the policy does not
    define is an error. Raises :class:`SpecError` carrying every problem as
    ``FILE:LINE:COLUMN: column: message``.
    """
    file, text = read_text_file(path)
    return parse_job_trace(text, file, policy)


def _check_header(record: CsvRecord, file: str) -> list[ValidationIssue]:
    names = [c.text for c in record.cells]
    if tuple(names) == TRACE_COLUMNS:
        return []
    issues: list[ValidationIssue] = []
    expected = ",".join(TRACE_COLUMNS)
    seen: set[str] = set()
    for cell in record.cells:
        if cell.text in seen:
            issues.append(ValidationIssue(file, cell.line, cell.column, cell.text or '""',
                                          "column is listed twice in the header"))
        elif cell.text not in TRACE_COLUMNS:
            hint = did_you_mean(cell.text, TRACE_COLUMNS)
            message = f"unknown column {describe_value(cell.text)}" + (f" (did you mean {hint!r}?)" if hint else "")
            issues.append(ValidationIssue(file, cell.line, cell.column, "", f"{message}; the header must be exactly: "
                                                                            f"{expected}"))
        seen.add(cell.text)
    missing = [c for c in TRACE_COLUMNS if c not in seen]
    if missing:
        issues.append(ValidationIssue(file, record.line, 1, "", f"missing column(s) {', '.join(missing)}; the header "
                                                                f"must be exactly: {expected}"))
    if not issues:
        issues.append(ValidationIssue(file, record.line, 1, "", f"columns are out of order; the header must be "
                                                                f"exactly: {expected}"))
    return issues


def _row(record: CsvRecord, file: str, issues: list[ValidationIssue], default_priority: str,
         classes: list[str] | None, first_line_of_id: dict[str, int]) -> model.Job | None:
    if record.blank:
        issues.append(ValidationIssue(file, record.line, 1, "", "blank line; remove it"))
        return None
    if len(record.cells) != len(TRACE_COLUMNS):
        issues.append(ValidationIssue(file, record.line, 1, "", f"the row has {len(record.cells)} cells; the header "
                                                                f"has {len(TRACE_COLUMNS)}"))
        return None
    cell = dict(zip(TRACE_COLUMNS, record.cells))
    before = len(issues)

    def get(column: str, parse: Callable[[str], T]) -> T | None:
        return cell_value(issues, file, cell[column], column, parse)

    job_id = get("job_id", _job_id)
    submitted = get("submit_time_utc", parse_timestamp)
    duration = get("duration_hours", lambda t: parse_number(t, above=0, at_most=MAX_DURATION_HOURS))
    workers = get("workers", lambda t: parse_int(t, low=1, high=MAX_WORKERS))
    gpus = get("gpus_per_worker", lambda t: parse_int(t, low=0, high=MAX_GPUS_PER_WORKER))
    gpu_models = get("gpu_models", _gpu_models)
    vcpus = get("vcpus_per_worker", lambda t: parse_number(t, at_least=MIN_VCPUS_PER_WORKER,
                                                                   at_most=MAX_VCPUS_PER_WORKER))
    memory = get("memory_gib_per_worker", lambda t: parse_number(t, at_least=MIN_MEMORY_GIB_PER_WORKER,
                                                                         at_most=MAX_MEMORY_GIB_PER_WORKER))
    priority = get("priority", _name(default_priority))
    team = get("team", _name(DEFAULT_TEAM))
    checkpointable = get("checkpointable", parse_bool)
    interval = get("checkpoint_interval_minutes", _optional(lambda t: parse_number(t, at_least=MIN_CHECKPOINT_INTERVAL_MINUTES)))
    deadline = get("deadline_utc", _optional(parse_timestamp))
    spot_eligible = get("spot_eligible", _optional(parse_bool))

    def issue(column: str, message: str) -> None:
        c = cell[column]
        issues.append(ValidationIssue(file, c.line, c.column, column, message))

    if job_id is not None:
        if job_id in first_line_of_id:
            issue("job_id", f"duplicate job id {job_id!r} (first used at line {first_line_of_id[job_id]})")
        else:
            first_line_of_id[job_id] = record.line
    if interval is not None and checkpointable is False:
        issue("checkpoint_interval_minutes", "checkpoint_interval_minutes is set but checkpointable is false; set "
                                             "checkpointable to true or leave the interval empty")
    if gpu_models and gpus == 0:
        issue("gpu_models", "gpu_models is set but gpus_per_worker is 0; a CPU-only job cannot ask for a GPU model")
    if deadline is not None and submitted is not None and deadline <= submitted:
        issue("deadline_utc", f"deadline_utc must be after submit_time_utc ({format_utc(submitted)})")
    if classes is not None and cell["priority"].text != "" and priority is not None and priority not in classes:
        issue("priority", f"unknown priority class {priority!r}; the policy defines: {', '.join(sorted(classes))}")
    if len(issues) > before:
        return None
    assert job_id is not None and submitted is not None and duration is not None and workers is not None
    assert gpus is not None and gpu_models is not None and vcpus is not None and memory is not None
    assert priority is not None and team is not None and checkpointable is not None
    return model.Job(
        job_id=job_id,
        workers=workers,
        gpus_per_worker=gpus,
        vcpus_per_worker=vcpus,
        memory_gib_per_worker=memory,
        priority=priority,
        team=team,
        duration_hours=duration,
        submitted_at_utc=submitted,
        gpu_models=gpu_models,
        checkpointable=checkpointable,
        checkpoint_interval_minutes=interval,
        deadline_utc=deadline,
        spot_eligible=spot_eligible,
    )


# =========================================================================== writing


def format_number(value: float) -> str:
    """Text that reads back as the same float, short for the values a trace holds: ``12`` for 12.0,
    ``0.25``, ``1e-05`` (whole numbers from 1e15 on keep Python's ``repr``, ``1000000000000000.0``)."""
    value = float(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def format_utc(value: datetime) -> str:
    """``2023-02-15T00:00:00Z`` (microseconds only when not zero)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"timestamp {value!r} has no time zone")
    utc = value.astimezone(timezone.utc)
    spec = "microseconds" if utc.microsecond else "seconds"
    return utc.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def _optional_bool(value: bool | None) -> str:
    return "" if value is None else ("true" if value else "false")


def _job_cells(job: model.Job) -> list[str]:
    if not isinstance(job, model.Job):
        raise ValueError(f"not a model.Job: {describe_value(job)}")
    if job.gpu_memory_gib_per_gpu:
        raise ValueError(f"job {job.job_id!r}: gpu_memory_gib_per_gpu={job.gpu_memory_gib_per_gpu} is not a "
                         "job-trace column; name the acceptable gpu_models instead")
    for name in ("job_id", "priority", "team"):
        if getattr(job, name) == "":
            raise ValueError(f"job {job.job_id!r}: {name} is empty")
    return [
        job.job_id,
        format_utc(job.submitted_at_utc),
        format_number(job.duration_hours),
        str(job.workers),
        str(job.gpus_per_worker),
        "|".join(sorted(job.gpu_models)),
        format_number(job.vcpus_per_worker),
        format_number(job.memory_gib_per_worker),
        job.priority,
        job.team,
        "true" if job.checkpointable else "false",
        "" if job.checkpoint_interval_minutes is None else format_number(job.checkpoint_interval_minutes),
        "" if job.deadline_utc is None else format_utc(job.deadline_utc),
        _optional_bool(job.spot_eligible),
    ]


def format_job_trace(jobs: Iterable[model.Job]) -> str:
    """The job-trace CSV text of ``jobs`` (header first, ``\\n`` line ends,
    rows in the order given, ``gpu_models`` sorted).

    Raises ``ValueError`` (listing every problem) when a job cannot be read
    back from a trace: an invalid value, a duplicate id, or a field the format
    has no column for (``gpu_memory_gib_per_gpu``). Runtime fields (state,
    nodes, checkpoints, interruptions) are not written: a trace records
    submissions.
    """
    jobs = list(jobs)
    lines = [",".join(TRACE_COLUMNS)]
    for job in jobs:
        lines.append(",".join(_job_cells(job)))
    text = "\n".join(lines) + "\n"
    try:
        parse_job_trace(text, "<jobs>")
    except SpecError as exc:
        problems = []
        for issue in exc.issues:
            index = issue.line - 2
            who = f"job {jobs[index].job_id!r}" if 0 <= index < len(jobs) else f"line {issue.line}"
            problems.append(f"{who}: {issue.field_path or 'row'}: {issue.message}")
        raise ValueError("cannot write the job trace:\n" + "\n".join(problems)) from None
    return text


def write_job_trace(jobs: Iterable[model.Job], path: str | os.PathLike[str]) -> None:
    """Write ``jobs`` as a job-trace CSV file (see :func:`format_job_trace`);
    ``read_job_trace(path)`` gives back jobs equal to ``jobs`` (trace fields,
    ``gpu_models`` sorted, state QUEUED)."""
    write_text_atomic(path, format_job_trace(jobs))  # whole or not at all


def trace_fields(job: model.Job) -> model.Job:
    """``job`` as a trace records it: runtime fields reset, models sorted."""
    return model.Job(
        job_id=job.job_id,
        workers=job.workers,
        gpus_per_worker=job.gpus_per_worker,
        vcpus_per_worker=job.vcpus_per_worker,
        memory_gib_per_worker=job.memory_gib_per_worker,
        priority=job.priority,
        team=job.team,
        duration_hours=job.duration_hours,
        submitted_at_utc=job.submitted_at_utc,
        gpu_models=tuple(sorted(job.gpu_models)),
        checkpointable=job.checkpointable,
        checkpoint_interval_minutes=job.checkpoint_interval_minutes,
        deadline_utc=job.deadline_utc,
        spot_eligible=job.spot_eligible,
    )
