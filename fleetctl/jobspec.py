"""Job spec files (YAML or JSON) validated by pydantic, converted to ``model.Job``.

A file holds one job (a mapping), a list of jobs, or ``{jobs: [...]}``. Field
names are the job-trace names::

    jobs:
      - id: llm-pretrain-7b          # required, unique within the file
        team: ml-research            # required
        priority: batch              # required: a priority class of the policy
        workers: 2                   # gang size, default 1
        gpus_per_worker: 8           # required, 0 for CPU-only work
        gpu_models: [A100-80GB, H100-80GB]   # default [] = any model
        vcpus_per_worker: 64         # required, at least 0.001 (one millicore)
        memory_gib_per_worker: 512   # required, at least 1 MiB (GiB)
        duration_hours: 48           # required, above 0 (expected run time)
        checkpointable: true         # default false
        checkpoint_interval_minutes: 30      # optional, at least 1; only with checkpointable
        deadline_utc: "2030-01-31T18:00:00Z" # optional; ISO-8601 with a zone, after the submission
        spot_eligible: false         # optional; absent = the class decides

Each job is validated on its own, so one bad job does not hide the errors of
the next; then ids are checked for duplicates and, when a policy is given,
priorities and GPU models against it.

Deadlines are checked against the submission time (``submitted_at_utc``,
which ``jobs submit`` sets to now; the parser never reads the clock): a
deadline at or before it is an error, as in a job trace, since no schedule can
meet it. A deadline after it but before ``submitted_at_utc + duration_hours``
cannot be met either, even if the job started at once, but the duration is an
estimate, so that is a warning (see ``warn``), and the job is accepted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, StrictStr, WithJsonSchema

from fleetctl import model
from fleetctl.policy import GpuModelName, Name, StrictModel, close_named_maps, note_integers
from fleetctl.yamlerrors import (
    Document,
    FieldPath,
    SpecError,
    ValidationIssue,
    describe_value,
    did_you_mean,
    read_document,
)

__all__ = [
    "JobSource",
    "JobSpec",
    "job_sources_from_document",
    "jobs_from_document",
    "jobs_json_schema",
    "load_job_sources",
    "load_jobs",
    "TimestampError",
    "parse_utc_timestamp",
    "utc_time",
]

# Anchored for the JSON Schema; used with fullmatch (``$`` accepts a trailing newline).
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

# Least values a job may ask for (the job-trace CSV uses the same): below
# them a division in the planner or runtime overflows or underflows, and no
# real job asks for less.
MIN_VCPUS_PER_WORKER = 0.001  # one millicore, the smallest CPU request Kubernetes takes
MIN_MEMORY_GIB_PER_WORKER = 1 / 1024  # 1 MiB
MIN_CHECKPOINT_INTERVAL_MINUTES = 1.0
# Most values a job may ask for (the job-trace CSV uses the same).
MAX_WORKERS = 100_000
MAX_GPUS_PER_WORKER = 1024
MAX_VCPUS_PER_WORKER = 100_000.0
MAX_MEMORY_GIB_PER_WORKER = 1_000_000.0
MAX_DURATION_HOURS = 100_000.0


def _check_job_id(value: str) -> str:
    if _JOB_ID_RE.fullmatch(value):
        return value
    raise ValueError(
        f"invalid job id {value!r}: use letters, digits, '.', '-' and '_' (at most 128, starting with a letter or "
        "digit)"
    )


class TimestampError(ValueError):
    """Text that is not a time in UTC. ``reason`` says why: ``"syntax"`` (not
    ISO-8601), ``"naive"`` (no time zone) or ``"range"`` (out of range once in
    UTC); callers word the message for their file."""

    def __init__(self, reason: Literal["syntax", "naive", "range"]) -> None:
        super().__init__(reason)
        self.reason = reason


def utc_time(value: str | datetime) -> datetime:
    """ISO-8601 text with a time zone (or an aware ``datetime``) -> aware UTC
    ``datetime``; :class:`TimestampError` otherwise.

    The one parse behind job deadlines (:func:`parse_utc_timestamp`), trace
    times and demand-series times (``forecasting.series``), so a text is a
    time in all of them or in none. Naive timestamps are rejected: fleetctl
    keeps time in UTC and will not guess which zone a person meant.
    """
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise TimestampError("syntax") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise TimestampError("naive")
    try:
        return parsed.astimezone(timezone.utc)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+05:00 is before datetime.min in UTC
        raise TimestampError("range") from None


def parse_utc_timestamp(value: Any) -> datetime:
    """ISO-8601 text with a time zone (spaces around it ignored), or an aware
    ``datetime`` -> aware UTC ``datetime``; ``ValueError`` with a message for
    a job or trace field otherwise (see :func:`utc_time`)."""
    if not isinstance(value, (datetime, str)):
        raise ValueError(
            f"must be an ISO-8601 timestamp with a time zone, e.g. 2030-01-31T18:00:00Z (got {describe_value(value)})"
        )
    try:
        return utc_time(value.strip() if isinstance(value, str) else value)
    except TimestampError as exc:
        reason = exc.reason
    if reason == "syntax":
        raise ValueError(f"invalid timestamp {value!r}: use ISO-8601 with a time zone, e.g. 2030-01-31T18:00:00Z")
    if reason == "naive":
        raise ValueError(f"timestamp {value!r} has no time zone; add 'Z' or an offset like +00:00")
    raise ValueError(f"timestamp {value!r} is out of range")


JobId = Annotated[
    StrictStr,
    AfterValidator(_check_job_id),
    WithJsonSchema({"type": "string", "pattern": _JOB_ID_RE.pattern}),
]
UtcTimestamp = Annotated[
    datetime,
    BeforeValidator(parse_utc_timestamp),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


class JobSpec(StrictModel):
    """One job: a gang of ``workers`` identical workers, placed all or nothing."""

    id: JobId = Field(description="Job id, unique within the file and the queue.")
    workers: int = Field(1, ge=1, le=MAX_WORKERS, description="Workers in the gang (count); all run at once or none.")
    gpus_per_worker: int = Field(ge=0, le=MAX_GPUS_PER_WORKER, description="GPUs per worker (count); 0 for CPU-only work.")
    gpu_models: list[GpuModelName] = Field(
        default_factory=list,
        description="GPU models (normalised names such as A100-80GB) the job may run on; empty = any.",
    )
    vcpus_per_worker: float = Field(ge=MIN_VCPUS_PER_WORKER, le=MAX_VCPUS_PER_WORKER,
                                    description="vCPUs per worker (at least 0.001, one millicore).")
    memory_gib_per_worker: float = Field(ge=MIN_MEMORY_GIB_PER_WORKER, le=MAX_MEMORY_GIB_PER_WORKER,
                                         description="Memory per worker in GiB (at least 1 MiB, 0.0009765625).")
    priority: Name = Field(description="Priority class name, one of the policy's priority_classes.")
    team: Name = Field(description="Team the job belongs to (its guarantee and burst limit apply).")
    checkpointable: bool = Field(False, description="Whether the job can checkpoint and resume after a reclaim.")
    checkpoint_interval_minutes: float | None = Field(
        None, ge=MIN_CHECKPOINT_INTERVAL_MINUTES,
        description="Minutes between checkpoints (at least 1); only for checkpointable jobs."
    )
    deadline_utc: UtcTimestamp | None = Field(
        None, description="When the job must be done: ISO-8601 with a time zone, e.g. 2030-01-31T18:00:00Z."
    )
    spot_eligible: bool | None = Field(
        None, description="Whether the job may run on spot; absent or null = its priority class decides."
    )
    duration_hours: float = Field(gt=0, le=MAX_DURATION_HOURS, description="Expected run time in hours (above 0).")
    gpu_memory_gib_per_gpu: float = Field(
        0.0, ge=0, le=10_000,
        description="Least memory each GPU must have, GiB (0 or absent = any); narrows the GPU models that fit.",
    )


def _job_rules(spec: JobSpec, doc: Document, at: FieldPath, policy: model.Policy | None,
               submitted_at_utc: datetime, stored: Callable[[str], bool] | None = None) -> list[ValidationIssue]:
    """Rules relating the fields of one job, the job to its submission time,
    and the job to the policy."""
    issues: list[ValidationIssue] = []
    if spec.deadline_utc is not None and spec.deadline_utc <= submitted_at_utc \
            and not (stored is not None and stored(spec.id)):
        issues.append(doc.issue(
            at + ("deadline_utc",),
            f"deadline {_utc_text(spec.deadline_utc)} is not after the submission time "
            f"({_utc_text(submitted_at_utc)}); no schedule can meet it",
        ))
    if spec.checkpoint_interval_minutes is not None and not spec.checkpointable:
        issues.append(doc.issue(
            at + ("checkpoint_interval_minutes",),
            "checkpoint_interval_minutes is set but checkpointable is false; set checkpointable: true or drop the "
            "interval",
        ))
    if spec.gpu_models and spec.gpus_per_worker == 0:
        issues.append(doc.issue(
            at + ("gpu_models",),
            "gpu_models is set but gpus_per_worker is 0; a CPU-only job cannot ask for a GPU model",
        ))
    seen: dict[str, int] = {}
    for index, name in enumerate(spec.gpu_models):
        if name in seen:
            issues.append(doc.issue(at + ("gpu_models", index), f"{name!r} is listed twice"))
        seen.setdefault(name, index)

    if policy is not None:
        classes = [pc.name for pc in policy.priority_classes]
        if spec.priority not in classes:
            issues.append(doc.issue(
                at + ("priority",),
                f"unknown priority class {spec.priority!r}; the policy defines: {', '.join(sorted(classes))}",
            ))
        teams = [t.name for t in policy.teams]
        if teams and spec.team not in teams:
            hint = did_you_mean(spec.team, teams)
            issues.append(doc.issue(
                at + ("team",),
                f"unknown team {spec.team!r}{f' (did you mean {hint!r}?)' if hint else ''}; the policy defines: "
                f"{', '.join(sorted(teams))} (a team outside the policy would have no quota)",
            ))
        gpus = spec.workers * spec.gpus_per_worker
        limits = [(policy.max_gpus, "the policy's budget.max_gpus")]
        team = policy.team(spec.team)
        limits.append((team.burst_gpus, f"team {spec.team}'s burst_gpus"))
        for limit, what in limits:
            if limit is not None and gpus > limit:
                issues.append(doc.issue(
                    at + ("gpus_per_worker",),
                    f"the job needs {gpus} GPUs ({spec.workers} workers x {spec.gpus_per_worker}), more than "
                    f"{what} ({limit}): it could never be placed",
                ))
                break
        if policy.gpu_models:
            for index, name in enumerate(spec.gpu_models):
                if name not in policy.gpu_models:
                    issues.append(doc.issue(
                        at + ("gpu_models", index),
                        f"GPU model {name!r} is not allowed by the policy (allowed: {', '.join(policy.gpu_models)})",
                    ))
    return issues


def _utc_text(value: datetime) -> str:
    return value.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _deadline_warning(
    spec: JobSpec, doc: Document, at: FieldPath, submitted_at_utc: datetime
) -> ValidationIssue | None:
    """A deadline after the submission but too soon for the job's duration."""
    if spec.deadline_utc is None:
        return None
    try:
        earliest_end = submitted_at_utc + timedelta(hours=spec.duration_hours)
    except OverflowError:  # runs past year 9999: no deadline is far enough
        earliest_end = datetime.max.replace(tzinfo=timezone.utc)
    if spec.deadline_utc >= earliest_end:
        return None
    return doc.issue(
        at + ("deadline_utc",),
        f"warning: deadline {_utc_text(spec.deadline_utc)} is before the submission time plus duration_hours "
        f"({spec.duration_hours:g} h, {_utc_text(earliest_end)}): the job cannot finish in time even if it "
        "starts now",
    )


def _to_core(spec: JobSpec, submitted_at_utc: datetime) -> model.Job:
    return model.Job(
        job_id=spec.id,
        workers=spec.workers,
        gpus_per_worker=spec.gpus_per_worker,
        vcpus_per_worker=float(spec.vcpus_per_worker),
        memory_gib_per_worker=float(spec.memory_gib_per_worker),
        priority=spec.priority,
        team=spec.team,
        duration_hours=float(spec.duration_hours),
        submitted_at_utc=submitted_at_utc,
        # Design choice: a set of acceptable models, so sorted: the same job
        # written with the models in another order is the same job.
        gpu_models=tuple(sorted(set(spec.gpu_models))),
        checkpointable=spec.checkpointable,
        checkpoint_interval_minutes=(
            None if spec.checkpoint_interval_minutes is None else float(spec.checkpoint_interval_minutes)
        ),
        deadline_utc=spec.deadline_utc,
        spot_eligible=spec.spot_eligible,
        gpu_memory_gib_per_gpu=float(spec.gpu_memory_gib_per_gpu),
    )


@dataclass(frozen=True)
class JobSource:
    """A valid job and where it is written: the job at ``at`` in ``doc``."""

    job: model.Job
    doc: Document
    at: FieldPath

    def issue(self, field: str, message: str) -> ValidationIssue:
        """An issue about ``field`` of this job (at the job when the field is
        absent from the file)."""
        return self.doc.issue(self.at + (field,), message)


def _job_entries(doc: Document) -> tuple[list[tuple[FieldPath, Any]], list[ValidationIssue]]:
    """Where the jobs are: ``(path, raw job)`` for each, and issues of the
    file's outer shape."""
    data = doc.data
    if isinstance(data, list):
        container: FieldPath = ()
        items = data
    elif isinstance(data, dict) and "jobs" in data:
        issues = [
            doc.issue((key,), f"unknown field {key!r}; a jobs file has only `jobs` (or is one job, or a list)",
                      at="key")
            for key in data
            if key != "jobs"
        ]
        container = ("jobs",)
        items = data["jobs"]
        if not isinstance(items, list):
            if container not in doc.reported:  # a tag there was reported while reading (and read as null)
                issues.append(doc.issue(container, f"must be a list of jobs (got {describe_value(items)})"))
            return [], issues
        if not items:
            issues.append(doc.issue(container, "the list of jobs is empty"))
        return [((*container, i), item) for i, item in enumerate(items)], issues
    elif isinstance(data, dict):
        return [((), data)], []
    elif () in doc.reported:  # a tag on the whole document, reported while reading (and read as null)
        return [], []
    else:
        return [], [doc.issue((), f"a job file must be a job (mapping), a list of jobs or {{jobs: [...]}} "
                                  f"(got {describe_value(data)})")]
    if not items:
        return [], [doc.issue(container, "the list of jobs is empty")]
    return [((i,), item) for i, item in enumerate(items)], []


def jobs_from_document(
    doc: Document, *, submitted_at_utc: datetime, policy: model.Policy | None = None,
    warn: Callable[[ValidationIssue], None] | None = None, stored: Callable[[str], bool] | None = None,
) -> tuple[model.Job, ...]:
    """Validate a parsed document as job specs; raise :class:`SpecError` with
    every issue found. Jobs come back in file order. ``warn`` receives the
    warnings of valid jobs (a deadline sooner than submission plus duration),
    once the whole document is valid. ``stored(job_id)`` (optional) says
    whether a job id is already in the queue: such a job's deadline is not
    checked against this submission's time, since it was when the job was
    first submitted (re-submitting an identical job stays a no-op after its
    deadline has passed, and the store refuses a changed one)."""
    sources = job_sources_from_document(doc, submitted_at_utc=submitted_at_utc, policy=policy, warn=warn,
                                        stored=stored)
    return tuple(source.job for source in sources)


def job_sources_from_document(
    doc: Document, *, submitted_at_utc: datetime, policy: model.Policy | None = None,
    warn: Callable[[ValidationIssue], None] | None = None, stored: Callable[[str], bool] | None = None,
) -> tuple[JobSource, ...]:
    """:func:`jobs_from_document`, each job with where it is written (to
    report a problem found later, e.g. by the store, at the job)."""
    if submitted_at_utc.tzinfo is None or submitted_at_utc.utcoffset() is None:
        raise ValueError("submitted_at_utc must be timezone-aware")
    submitted = submitted_at_utc.astimezone(timezone.utc)

    entries, issues = _job_entries(doc)
    issues = list(doc.issues) + issues
    jobs: list[JobSource] = []
    warnings: list[ValidationIssue] = []
    first_line_of_id: dict[str, int] = {}
    for at, raw in entries:
        # Duplicate ids are checked on the raw text, so they are reported even
        # when the jobs have other errors.
        raw_id = raw.get("id") if isinstance(raw, dict) else None
        if isinstance(raw_id, str):
            if raw_id in first_line_of_id:
                issues.append(doc.issue(
                    at + ("id",), f"duplicate job id {raw_id!r} (first used at line {first_line_of_id[raw_id]})"
                ))
            else:
                first_line_of_id[raw_id] = doc.position(at + ("id",)).line
        spec, errors = doc.validate(JobSpec, raw, at)
        issues.extend(errors)
        if spec is not None:
            rules = _job_rules(spec, doc, at, policy, submitted, stored)
            issues.extend(rules)
            if not rules:
                jobs.append(JobSource(_to_core(spec, submitted), doc, at))
                warning = _deadline_warning(spec, doc, at, submitted)
                if warning is not None and stored is not None and stored(spec.id):
                    warning = None  # warned of when it was first submitted
                if warning is not None:
                    warnings.append(warning)
    if issues:
        raise SpecError(issues)
    if warn is not None:
        for warning in warnings:
            warn(warning)
    return tuple(jobs)


def load_jobs(
    path: str | os.PathLike[str], *, submitted_at_utc: datetime, policy: model.Policy | None = None,
    warn: Callable[[ValidationIssue], None] | None = None,
) -> tuple[model.Job, ...]:
    """Read and validate a job file (YAML or JSON): one job, a list, or
    ``{jobs: [...]}``.

    ``submitted_at_utc`` (timezone-aware) stamps every job, and is the time
    deadlines are checked against: a ``deadline_utc`` at or before it is an
    error; one before it plus ``duration_hours`` (the job cannot finish in
    time even if it starts at once) is passed to ``warn``, if given, as an
    issue whose message starts with ``warning:``, and the job is accepted.
    With ``policy``,
    an unknown priority class or a GPU model outside ``policy.gpu_models``
    (when that list is not empty) is an error at that job. Raises
    :class:`fleetctl.yamlerrors.SpecError` carrying every problem as
    ``FILE:LINE:COLUMN: field.path: message``.
    """
    return jobs_from_document(read_document(path), submitted_at_utc=submitted_at_utc, policy=policy, warn=warn)


def load_job_sources(
    path: str | os.PathLike[str], *, submitted_at_utc: datetime, policy: model.Policy | None = None,
    warn: Callable[[ValidationIssue], None] | None = None, stored: Callable[[str], bool] | None = None,
) -> tuple[JobSource, ...]:
    """:func:`load_jobs`, each job with where it is written; ``stored`` as in
    :func:`jobs_from_document`."""
    return job_sources_from_document(read_document(path), submitted_at_utc=submitted_at_utc, policy=policy,
                                     warn=warn, stored=stored)


def jobs_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one job spec."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **close_named_maps(note_integers(JobSpec.model_json_schema()))}
