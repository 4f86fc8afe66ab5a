"""Job spec files: the example queue loads and fits the example policy, the
three file shapes agree, every broken job is reported at the right place, and
no input makes ``load_jobs`` raise anything but SpecError."""

from __future__ import annotations

import io
import json
import textwrap
from collections import Counter
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from fleetctl import model
from fleetctl.jobspec import TimestampError, jobs_json_schema, load_jobs, parse_utc_timestamp, utc_time
from fleetctl.policy import GPU_MODELS, load_policy
from fleetctl.yamlerrors import SpecError, ValidationIssue

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_JOBS = ROOT / "examples" / "jobs.yaml"
EXAMPLE_POLICY = ROOT / "policies" / "example.yaml"
NOW = datetime(2025, 11, 22, 9, 30, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def policy() -> model.Policy:
    return load_policy(EXAMPLE_POLICY)


def write(tmp_path: Path, text: str, name: str = "jobs.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def issues_of(path: Path, policy: model.Policy | None = None) -> tuple[ValidationIssue, ...]:
    with pytest.raises(SpecError) as info:
        load_jobs(path, submitted_at_utc=NOW, policy=policy)
    return info.value.issues


# --------------------------------------------------------------------------- the example queue


def test_example_jobs_load_and_fit_the_example_policy(policy: model.Policy) -> None:
    jobs = load_jobs(EXAMPLE_JOBS, submitted_at_utc=NOW, policy=policy)
    assert 8 <= len(jobs) <= 12
    assert len({j.job_id for j in jobs}) == len(jobs)
    assert all(j.submitted_at_utc == NOW and j.state is model.JobState.QUEUED for j in jobs)

    assert any(j.gpus_per_worker == 1 for j in jobs), "a single-GPU job"
    assert any(j.workers == 1 and j.gpus_per_worker == 8 for j in jobs), "a single-node 8-GPU job"
    assert any(j.workers >= 2 and j.gpus_per_worker == 8 for j in jobs), "a multi-node gang"
    assert any(set(j.gpu_models) == {"A100-80GB", "H100-80GB"} for j in jobs), "a GPU-model constraint"
    assert any(j.spot_eligible is False for j in jobs), "a job kept off spot"
    assert {j.team for j in jobs} == {t.name for t in policy.teams}
    assert {j.priority for j in jobs} == {c.name for c in policy.priority_classes}

    # Placeable within the policy: GPU cap, burst limits, allowed models.
    assert sum(j.gpus for j in jobs) <= (policy.max_gpus or 0)
    per_team = Counter()
    for j in jobs:
        per_team[j.team] += j.gpus
    for team in policy.teams:
        assert per_team[team.name] <= (team.burst_gpus or 0)
    assert all(set(j.gpu_models) <= set(policy.gpu_models) for j in jobs)


def test_example_jobs_load_without_a_policy() -> None:
    assert load_jobs(EXAMPLE_JOBS, submitted_at_utc=NOW)


def test_job_fields_and_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, """
        id: one
        team: ml-research
        priority: batch
        gpus_per_worker: 2
        gpu_models: [H100-80GB, A100-80GB]
        vcpus_per_worker: 16
        memory_gib_per_worker: 120.5
        duration_hours: 1.5
        deadline_utc: 2030-01-31T20:00:00+02:00
    """)
    (job,) = load_jobs(path, submitted_at_utc=NOW)
    assert job == model.Job(
        job_id="one",
        workers=1,
        gpus_per_worker=2,
        vcpus_per_worker=16.0,
        memory_gib_per_worker=120.5,
        priority="batch",
        team="ml-research",
        duration_hours=1.5,
        submitted_at_utc=NOW,
        gpu_models=("A100-80GB", "H100-80GB"),
        checkpointable=False,
        checkpoint_interval_minutes=None,
        deadline_utc=datetime(2030, 1, 31, 18, 0, tzinfo=timezone.utc),
        spot_eligible=None,
    )
    assert job.deadline_utc is not None and job.deadline_utc.utcoffset() == timedelta(0)


JOB_A = {"id": "a", "team": "t", "priority": "batch", "gpus_per_worker": 1, "vcpus_per_worker": 4,
         "memory_gib_per_worker": 8, "duration_hours": 1}
JOB_B = {**JOB_A, "id": "b", "workers": 2, "checkpointable": True, "checkpoint_interval_minutes": 10}


@pytest.mark.parametrize(
    ("name", "content"),
    [
        pytest.param("list.yaml", [JOB_A, JOB_B], id="yaml-list"),
        pytest.param("wrapped.yaml", {"jobs": [JOB_A, JOB_B]}, id="yaml-jobs-key"),
        pytest.param("list.json", [JOB_A, JOB_B], id="json-list"),
        pytest.param("wrapped.json", {"jobs": [JOB_A, JOB_B]}, id="json-jobs-key"),
    ],
)
def test_file_shapes_agree(tmp_path: Path, name: str, content: object) -> None:
    path = tmp_path / name
    if name.endswith(".json"):
        path.write_text(json.dumps(content, indent=2))
    else:
        out = io.StringIO()
        YAML().dump(content, out)
        path.write_text(out.getvalue())
    jobs = load_jobs(path, submitted_at_utc=NOW)
    assert [j.job_id for j in jobs] == ["a", "b"]
    assert jobs[1].workers == 2 and jobs[1].checkpoint_interval_minutes == 10.0


def test_single_job_file(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    path.write_text(json.dumps(JOB_A))
    (job,) = load_jobs(path, submitted_at_utc=NOW)
    assert job.job_id == "a" and job.workers == 1


_DEADLINE_JOB = """\
    id: d1
    team: ml-research
    priority: batch
    gpus_per_worker: 1
    vcpus_per_worker: 4
    memory_gib_per_worker: 14
    duration_hours: 3
    deadline_utc: {deadline}
"""


@pytest.mark.parametrize("deadline", ["0001-01-01T00:00:00Z", "2025-11-22T09:29:59Z", "2025-11-22T09:30:00Z",
                                      "2025-11-22T11:30:00+02:00"])
def test_a_deadline_at_or_before_the_submission_is_refused(tmp_path: Path, deadline: str) -> None:
    """No schedule meets a deadline already past (the job-trace CSV refuses it
    too); it must not be queued to show up as "deadline at risk"."""
    path = write(tmp_path, _DEADLINE_JOB.format(deadline=deadline))
    (issue,) = issues_of(path)
    assert (issue.line, issue.column, issue.field_path) == (8, 15, "deadline_utc")
    assert "is not after the submission time (2025-11-22T09:30:00Z)" in issue.message, issue.message


def test_a_deadline_too_soon_for_the_duration_is_a_warning(tmp_path: Path) -> None:
    """After the submission but before submission + duration_hours: the job
    cannot finish in time even if it starts now; the duration is an estimate,
    so it is accepted, with a warning at the deadline."""
    path = write(tmp_path, _DEADLINE_JOB.format(deadline="2025-11-22T12:29:59Z"))
    warnings: list[ValidationIssue] = []
    (job,) = load_jobs(path, submitted_at_utc=NOW, warn=warnings.append)
    assert job.deadline_utc == datetime(2025, 11, 22, 12, 29, 59, tzinfo=timezone.utc)
    (warning,) = warnings
    assert (warning.line, warning.column, warning.field_path) == (8, 15, "deadline_utc")
    assert warning.message.startswith("warning: deadline 2025-11-22T12:29:59Z is before the submission time plus "
                                      "duration_hours (3 h, 2025-11-22T12:30:00Z)"), warning.message
    assert load_jobs(path, submitted_at_utc=NOW)  # without ``warn`` the job loads all the same
    in_time = write(tmp_path, _DEADLINE_JOB.format(deadline="2025-11-22T12:30:00Z"), "in-time.yaml")
    assert load_jobs(in_time, submitted_at_utc=NOW, warn=warnings.append) and len(warnings) == 1


def test_naive_submission_time_is_a_programming_error(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    path.write_text(json.dumps(JOB_A))
    with pytest.raises(ValueError, match="timezone-aware"):
        load_jobs(path, submitted_at_utc=datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        load_jobs(path, submitted_at_utc=datetime(2025, 1, 1, tzinfo=_NoOffset()))


class _NoOffset(tzinfo):
    """A time zone that does not know its offset: a datetime with it is naive."""

    def utcoffset(self, dt: datetime | None) -> None:
        return None


def test_aware_datetimes_are_taken_as_they_are_and_others_refused() -> None:
    """utc_time and parse_utc_timestamp (also behind traces and demand series)
    take an aware datetime as it is, in UTC; a naive one, or one whose zone
    has no offset, is naive like text without a zone."""
    two_hours_east = datetime(2030, 1, 31, 20, 0, tzinfo=timezone(timedelta(hours=2)))
    utc = datetime(2030, 1, 31, 18, 0, tzinfo=timezone.utc)
    assert utc_time(two_hours_east) == utc and utc_time(two_hours_east).tzinfo is timezone.utc
    assert parse_utc_timestamp(two_hours_east) == utc
    assert parse_utc_timestamp(" 2030-01-31T20:00:00+02:00\n") == utc
    for value, reason in [(datetime(2030, 1, 31), "naive"), (datetime(2030, 1, 31, tzinfo=_NoOffset()), "naive"),
                          ("2030-01-31T18:00:00", "naive"), ("0001-01-01T00:00:00+05:00", "range"),
                          ("31/01/2030", "syntax")]:
        with pytest.raises(TimestampError) as info:
            utc_time(value)
        assert info.value.reason == reason, value
    with pytest.raises(ValueError, match=r" has no time zone; add 'Z' or an offset like \+00:00$"):
        parse_utc_timestamp(datetime(2030, 1, 31, tzinfo=_NoOffset()))
    with pytest.raises(ValueError, match=r"^timestamp '0001-01-01T00:00:00\+05:00' is out of range$"):
        parse_utc_timestamp("0001-01-01T00:00:00+05:00")


def test_json_schema_describes_every_field() -> None:
    schema = jobs_json_schema()
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"id", "gpus_per_worker", "vcpus_per_worker", "memory_gib_per_worker",
                                       "priority", "team", "duration_hours"}
    for name, prop in schema["properties"].items():
        assert prop.get("description"), name


# --------------------------------------------------------------------------- broken jobs

_HEAD = "jobs:\n  - id: a\n    team: t\n    priority: batch\n    gpus_per_worker: 1\n" \
        "    vcpus_per_worker: 4\n    memory_gib_per_worker: 8\n    duration_hours: 1\n"
# _HEAD is lines 1-8; the tests below add to job a (line 9+) or add jobs.

BROKEN = [
    pytest.param(
        _HEAD + "  - id: b\n    team: t\n    priority: batch\n    gpus_per_worker: 1\n"
                "    vcpus_per_worker: 4\n    memory_gib_per_worker: 8\n    duration_hours: 1\n"
                "  - id: a\n    team: t\n    priority: batch\n    gpus_per_worker: 1\n"
                "    vcpus_per_worker: 4\n    memory_gib_per_worker: 8\n    duration_hours: 1\n",
        None, 16, 9, "jobs[2].id", "duplicate job id 'a' (first used at line 2)",
        id="duplicate-id-points-at-second",
    ),
    pytest.param(_HEAD + "    workers: 0\n", None, 9, 14, "jobs[0].workers",
                 "must be greater than or equal to 1 (got 0)", id="zero-workers"),
    pytest.param(_HEAD + "    workers: two\n", None, 9, 14, "jobs[0].workers",
                 "must be a valid integer (got 'two')", id="workers-not-a-number"),
    pytest.param(_HEAD.replace("gpus_per_worker: 1", "gpus_per_worker: -1"), None, 5, 22,
                 "jobs[0].gpus_per_worker", "must be greater than or equal to 0 (got -1)", id="negative-gpus"),
    pytest.param(_HEAD.replace("vcpus_per_worker: 4", "vcpus_per_worker: 0"), None, 6, 23,
                 "jobs[0].vcpus_per_worker", "must be greater than or equal to 0.001 (got 0)", id="zero-vcpus"),
    # below the least values a division in the planner or runtime overflowed (every tick crashed)
    pytest.param(_HEAD.replace("vcpus_per_worker: 4", "vcpus_per_worker: 1e-320"), None, 6, 23,
                 "jobs[0].vcpus_per_worker", "must be greater than or equal to 0.001 (got 1e-320)",
                 id="denormal-vcpus"),
    pytest.param(_HEAD.replace("memory_gib_per_worker: 8", "memory_gib_per_worker: 0.0009"), None, 7, 28,
                 "jobs[0].memory_gib_per_worker", "must be greater than or equal to 0.0009765625 (got 0.0009)",
                 id="memory-below-1-mib"),
    pytest.param(_HEAD + "    checkpointable: true\n    checkpoint_interval_minutes: 5e-324\n", None, 10, 34,
                 "jobs[0].checkpoint_interval_minutes", "must be greater than or equal to 1 (got 5e-324)",
                 id="denormal-interval"),
    pytest.param(_HEAD.replace("duration_hours: 1", "duration_hours: '1'"), None, 8, 21,
                 "jobs[0].duration_hours", "must be a valid number (got '1')", id="quoted-number"),
    pytest.param(_HEAD.replace("    duration_hours: 1\n", ""), None, 2, 5, "jobs[0].duration_hours",
                 "required field is missing", id="missing-field-points-at-job"),
    pytest.param(_HEAD + "    gpu_models: [A100]\n", None, 9, 18, "jobs[0].gpu_models[0]",
                 "unknown GPU model 'A100'", id="unknown-gpu-model"),
    pytest.param(_HEAD + "    gpu_models: [L4, L4]\n", None, 9, 22, "jobs[0].gpu_models[1]",
                 "'L4' is listed twice", id="duplicate-gpu-model"),
    pytest.param(_HEAD.replace("gpus_per_worker: 1", "gpus_per_worker: 0") + "    gpu_models: [L4]\n", None,
                 9, 17, "jobs[0].gpu_models", "gpus_per_worker is 0", id="gpu-model-for-cpu-job"),
    pytest.param(_HEAD + "    checkpoint_interval_minutes: 30\n", None, 9, 34,
                 "jobs[0].checkpoint_interval_minutes", "checkpointable is false", id="interval-not-checkpointable"),
    pytest.param(_HEAD + "    checkpointable: true\n    checkpoint_interval_minutes: 0\n", None, 10, 34,
                 "jobs[0].checkpoint_interval_minutes", "must be greater than or equal to 1 (got 0)", id="zero-interval"),
    pytest.param(_HEAD + "    gpu_memory_gib_per_gpu: -0.5\n", None, 9, 29, "jobs[0].gpu_memory_gib_per_gpu",
                 "must be greater than or equal to 0 (got -0.5)", id="negative-gpu-memory"),
    pytest.param(_HEAD + "    gpu_memory_gib_per_gpu: 10000.5\n", None, 9, 29, "jobs[0].gpu_memory_gib_per_gpu",
                 "must be less than or equal to 10000 (got 10000.5)", id="gpu-memory-above-10000-gib"),
    pytest.param(_HEAD + "    checkpointable: 1\n", None, 9, 21, "jobs[0].checkpointable",
                 "must be a valid boolean (got 1)", id="int-for-bool"),
    pytest.param(_HEAD + "    spot_eligible: no\n", None, 9, 20, "jobs[0].spot_eligible",
                 "must be true or false (got 'no'", id="no-for-bool"),
    pytest.param(_HEAD + "    deadline_utc: 2030-01-01T12:00:00\n", None, 9, 19, "jobs[0].deadline_utc",
                 "has no time zone", id="naive-deadline"),
    pytest.param(_HEAD + "    deadline_utc: 2030-01-01\n", None, 9, 19, "jobs[0].deadline_utc",
                 "has no time zone", id="date-only-deadline"),
    pytest.param(_HEAD + "    deadline_utc: next tuesday\n", None, 9, 19, "jobs[0].deadline_utc",
                 "invalid timestamp 'next tuesday'", id="unparseable-deadline"),
    pytest.param(_HEAD + "    deadline_utc: 1767225600\n", None, 9, 19, "jobs[0].deadline_utc",
                 "must be an ISO-8601 timestamp", id="epoch-deadline"),
    pytest.param(_HEAD + "    gpus: 1\n", None, 9, 5, "jobs[0].gpus",
                 "unknown field 'gpus' (did you mean 'gpus_per_worker'?)", id="unknown-field"),
    pytest.param(_HEAD.replace("id: a", "id: 42"), None, 2, 9, "jobs[0].id",
                 "must be a valid string (got 42)", id="numeric-id"),
    pytest.param(_HEAD.replace("id: a", "id: 'a b'"), None, 2, 9, "jobs[0].id",
                 "invalid job id 'a b'", id="id-with-space"),
    # Python's $ also matches before a final newline: "a\n" was accepted (and listed as a second job "a")
    pytest.param(_HEAD.replace("id: a", 'id: "a\\n"'), None, 2, 9, "jobs[0].id",
                 "invalid job id 'a\\n'", id="id-with-trailing-newline"),
    pytest.param(_HEAD.replace("team: t", 'team: "t\\n"'), None, 3, 11, "jobs[0].team",
                 "invalid name 't\\n'", id="team-with-trailing-newline"),
    pytest.param(_HEAD.replace("priority: batch", 'priority: "batch\\n"'), None, 4, 15, "jobs[0].priority",
                 "invalid name 'batch\\n'", id="priority-with-trailing-newline"),
    pytest.param(_HEAD.replace("priority: batch", "priority: urgent").replace("team: t", "team: ml-research"), "policy", 4, 15, "jobs[0].priority",
                 "unknown priority class 'urgent'; the policy defines: batch, production", id="unknown-class"),
    pytest.param(_HEAD.replace("team: t", "team: ml-research") + "    gpu_models: [A100-80GB, K80]\n", "policy", 9, 29, "jobs[0].gpu_models[1]",
                 "GPU model 'K80' is not allowed by the policy", id="gpu-model-outside-policy"),
    pytest.param(_HEAD.replace("gpus_per_worker: 1", "gpus_per_worker: 1000").replace("team: t", "team: ml-research"),
                 "policy", 5, 22,
                 "jobs[0].gpus_per_worker", "needs 1000 GPUs (1 workers x 1000), more than the policy's "
                 "budget.max_gpus (96): it could never be placed", id="more-gpus-than-the-fleet-may-have"),
    pytest.param(_HEAD.replace("team: t", "team: ml-research").replace("gpus_per_worker: 1", "gpus_per_worker: 8")
                 + "    workers: 9\n", "policy", 5, 22, "jobs[0].gpus_per_worker",
                 "needs 72 GPUs (9 workers x 8), more than team ml-research's burst_gpus (64)",
                 id="more-gpus-than-the-team-may-burst-to"),
    pytest.param(_HEAD.replace("team: t", "team: ml-reserch"), "policy", 3, 11, "jobs[0].team",
                 "unknown team 'ml-reserch' (did you mean 'ml-research'?)", id="unknown-team"),
    pytest.param(_HEAD.replace("team: t", "team: zzz"), "policy", 3, 11, "jobs[0].team",
                 "unknown team 'zzz'; the policy defines: ml-product, ml-research (a team outside the policy would "
                 "have no quota)", id="unknown-team-without-a-hint"),
    pytest.param(_HEAD + "other: 1\n", None, 9, 1, "other", "unknown field 'other'", id="extra-envelope-key"),
    pytest.param("jobs: {id: a}\n", None, 1, 7, "jobs", "must be a list of jobs (got a mapping)",
                 id="jobs-not-a-list"),
    pytest.param("jobs: []\n", None, 1, 7, "jobs", "the list of jobs is empty", id="empty-jobs"),
    pytest.param("[]\n", None, 1, 1, "", "the list of jobs is empty", id="empty-list"),
    pytest.param("42\n", None, 1, 1, "", "a job file must be a job (mapping), a list of jobs", id="scalar"),
    pytest.param("- 42\n", None, 1, 3, "[0]", "must be a mapping (got 42)", id="list-of-scalars"),
    pytest.param("", None, 1, 1, "", "file is empty", id="empty-file"),
    pytest.param("jobs:\n  - {id: a\n", None, 3, 1, "", "YAML syntax error", id="yaml-syntax-error"),
    pytest.param(_HEAD + "    team: u\n", None, 9, 5, "jobs[0].team", "duplicate key 'team' (first defined at line 3)",
                 id="duplicate-key"),
    # A tag is reported while reading and its value read as null; the shape checks used to add a second,
    # false issue ('jobs: must be a list of jobs (got null)', '(root): a job file must be a job ...').
    pytest.param("jobs: !x []\n", None, 1, 7, "jobs", "unsupported YAML tag '!x'; remove it", id="tagged-jobs-list"),
    pytest.param("!x\n- {id: a}\n", None, 1, 1, "", "unsupported YAML tag '!x'; remove it", id="tagged-root"),
]


@pytest.mark.parametrize(("text", "with_policy", "line", "column", "field_path", "message"), BROKEN)
def test_broken_jobs_are_reported_at_the_right_place(
    tmp_path: Path, policy: model.Policy, text: str, with_policy: str | None,
    line: int, column: int, field_path: str, message: str,
) -> None:
    path = write(tmp_path, text)
    issues = issues_of(path, policy if with_policy else None)
    assert len(issues) == 1, "\n".join(map(str, issues))
    issue = issues[0]
    assert (issue.line, issue.column, issue.field_path) == (line, column, field_path), str(issue)
    assert message in issue.message
    assert str(issue).startswith(f"{path}:{line}:{column}: {field_path or '(root)'}: ")


def test_errors_in_aliased_jobs_point_at_the_alias(tmp_path: Path) -> None:
    """Content reached through an alias is reported where the alias is (the
    path leads there), naming the anchor, not at the anchor's lines: the
    duplicate below is the alias on line 10, not the id on line 3."""
    path = write(tmp_path, """
        jobs:
          - &b
            id: a
            team: ml-research
            priority: batch
            gpus_per_worker: 1
            vcpus_per_worker: 1
            memory_gib_per_worker: 1
            duration_hours: 1
          - *b
    """)
    rendered = [str(i).removeprefix(f"{path}:") for i in issues_of(path)]
    note = "(reached through the alias *b; the anchor &b is at line 2)"
    assert f"10:5: jobs[1].id: duplicate job id 'a' (first used at line 3) {note}" in rendered, rendered
    assert len(rendered) == 1 and not [r for r in rendered if r.startswith(("2:", "3:", "4:", "5:", "6:", "7:", "8:", "9:"))], rendered


def test_a_null_job_reached_through_an_alias_is_reported_at_the_alias(tmp_path: Path) -> None:
    """jobs[2] is ``- *none`` on line 5 (the ``*`` at column 5); it was
    reported at 3:5, the line of jobs[1], without the alias note."""
    path = write(tmp_path, """
        jobs:
          - &none
          - {id: a, team: ml-research, priority: batch, gpus_per_worker: 1, vcpus_per_worker: 1,
             memory_gib_per_worker: 1, duration_hours: 1}
          - *none
    """)
    rendered = [str(i).removeprefix(f"{path}:") for i in issues_of(path)]
    assert rendered == [
        "2:5: jobs[0]: must be a mapping (got null)",
        "5:5: jobs[2]: must be a mapping (got null) (reached through the alias *none; the anchor &none is at line 2)",
    ], rendered


def test_an_error_in_anchored_content_is_reported_at_the_anchor_and_at_each_alias(tmp_path: Path) -> None:
    path = write(tmp_path, """
        jobs:
          - id: a
            team: ml-research
            priority: batch
            gpus_per_worker: 1
            vcpus_per_worker: 1
            memory_gib_per_worker: 1
            duration_hours: &d -1
          - {id: b, team: ml-research, priority: batch, gpus_per_worker: 1, vcpus_per_worker: 1,
             memory_gib_per_worker: 1, duration_hours: *d}
    """)
    rendered = [str(i).removeprefix(f"{path}:") for i in issues_of(path)]
    assert rendered == [
        "8:21: jobs[0].duration_hours: must be greater than 0 (got -1)",
        # ``key: *name`` is reported at its key, on the alias's line.
        "10:32: jobs[1].duration_hours: must be greater than 0 (got -1) (reached through the alias *d; the anchor "
        "&d is at line 8)",
    ], rendered


def test_an_error_merged_in_from_shared_job_settings_is_reported_at_the_merge_key(tmp_path: Path) -> None:
    """Shared settings merged into a job with ``<<: *name``: a bad one is
    reported at the ``<<`` of each job that pulls it in, naming the anchor."""
    path = write(tmp_path, """
        jobs:
          - &defaults
            id: a
            team: ml-research
            priority: batch
            gpus_per_worker: 1
            vcpus_per_worker: 1
            memory_gib_per_worker: 1
            duration_hours: -1
          - id: b
            <<: *defaults
    """)
    rendered = [str(i).removeprefix(f"{path}:") for i in issues_of(path)]
    assert rendered == [
        "9:21: jobs[0].duration_hours: must be greater than 0 (got -1)",
        "11:5: jobs[1].duration_hours: must be greater than 0 (got -1) (merged in by <<: *defaults; the anchor "
        "&defaults is at line 2)",
    ], rendered


@pytest.mark.parametrize(("field", "value", "message"), [
    (field, value, message)
    for field in ("workers", "gpus_per_worker")
    for value, message in [("8.0", "must be an integer written without a decimal point (got 8.0; write 8)"),
                           ("8.5", "must be an integer (got 8.5)")]
])
def test_an_integer_field_refuses_a_decimal(tmp_path: Path, field: str, value: str, message: str) -> None:
    """The job schema says "integer" (which a JSON Schema validator reads as
    taking 8.0) and notes that 8.0 is refused; the loader refuses it."""
    fields = {"id": "a", "team": "ml-research", "priority": "batch", "workers": "1", "gpus_per_worker": "1",
              "vcpus_per_worker": "1", "memory_gib_per_worker": "1", "duration_hours": "1", field: value}
    path = write(tmp_path, "jobs:\n" + "".join(
        f"{'  - ' if i == 0 else '    '}{k}: {v}\n" for i, (k, v) in enumerate(fields.items())))
    line = list(fields).index(field) + 2
    column = 5 + len(field) + 2
    assert [str(i) for i in issues_of(path)] == [f"{path}:{line}:{column}: jobs[0].{field}: {message}"]
    assert jobs_json_schema()["properties"][field]["description"].endswith(
        "Written without a decimal point: 8, not 8.0.")


def test_a_job_can_ask_for_every_gpu_model_the_catalog_sells(tmp_path: Path) -> None:
    from providers.catalog import load_catalog

    sold = sorted({offer.instance_type.gpu_model for offer in load_catalog()})
    path = write(tmp_path, _HEAD + f"    gpu_models: [{', '.join(sold)}]\n")
    assert load_jobs(path, submitted_at_utc=NOW)[0].gpu_models == tuple(sold)  # K520 was refused


def test_policy_checks_apply_only_with_a_policy(tmp_path: Path) -> None:
    path = write(tmp_path, _HEAD.replace("priority: batch", "priority: urgent") + "    gpu_models: [K80]\n")
    assert load_jobs(path, submitted_at_utc=NOW)[0].priority == "urgent"


def test_a_job_may_ask_for_each_most_value(tmp_path: Path) -> None:
    path = write(tmp_path, """
        id: big
        team: t
        priority: batch
        workers: 100000
        gpus_per_worker: 1024
        vcpus_per_worker: 100000
        memory_gib_per_worker: 1000000
        duration_hours: 100000
    """)
    (job,) = load_jobs(path, submitted_at_utc=NOW)
    assert (job.workers, job.gpus_per_worker, job.vcpus_per_worker, job.memory_gib_per_worker,
            job.duration_hours) == (100_000, 1024, 100_000.0, 1_000_000.0, 100_000.0)


@pytest.mark.parametrize("gib", [0, 10000])
def test_gpu_memory_per_gpu_may_be_0_to_10000_gib(tmp_path: Path, gib: int) -> None:
    (job,) = load_jobs(write(tmp_path, _HEAD + f"    gpu_memory_gib_per_gpu: {gib}\n"), submitted_at_utc=NOW)
    assert job.gpu_memory_gib_per_gpu == gib


def test_only_ids_written_as_text_are_checked_for_duplicates(tmp_path: Path) -> None:
    """Two jobs without an id, or with the same number as id, are each
    refused for their id, not as a duplicate of the other."""
    path = write(tmp_path, """
        - {team: t, priority: batch, gpus_per_worker: 1, vcpus_per_worker: 4, memory_gib_per_worker: 8, duration_hours: 1}
        - {team: t, priority: batch, gpus_per_worker: 1, vcpus_per_worker: 4, memory_gib_per_worker: 8, duration_hours: 1}
        - {id: 7, team: t, priority: batch, gpus_per_worker: 1, vcpus_per_worker: 4, memory_gib_per_worker: 8,
           duration_hours: 1}
        - {id: 7, team: t, priority: batch, gpus_per_worker: 1, vcpus_per_worker: 4, memory_gib_per_worker: 8,
           duration_hours: 1}
    """)
    assert [str(i).removeprefix(f"{path}:") for i in issues_of(path)] == [
        "1:3: [0].id: required field is missing",
        "2:3: [1].id: required field is missing",
        "3:8: [2].id: must be a valid string (got 7)",
        "5:8: [3].id: must be a valid string (got 7)",
    ]


def test_a_policy_without_teams_or_gpu_models_allows_any_and_a_job_may_need_exactly_a_cap(tmp_path: Path) -> None:
    """No teams in the policy: any team; no gpu_models: any model; a job
    needing as many GPUs as budget.max_gpus (2 x 8 of 16) or as its team's
    burst_gpus (3 x 2 of 6) can be placed; a CPU-only job asks for no model."""
    def policy_of(text: str) -> model.Policy:
        return load_policy(write(tmp_path, "budget: {max_usd_per_hour: 100, max_gpus: 16}\n"
                                 "priority_classes: {batch: {value: 1}}\ndefault_priority_class: batch\n" + text,
                                 "policy.yaml"))

    path = write(tmp_path, """
        - {id: a, team: anyone, priority: batch, workers: 2, gpus_per_worker: 8, gpu_models: [K80],
           vcpus_per_worker: 4, memory_gib_per_worker: 8, duration_hours: 1}
        - {id: b, team: anyone, priority: batch, gpus_per_worker: 0, vcpus_per_worker: 4, memory_gib_per_worker: 8,
           duration_hours: 1}
    """)
    a, b = load_jobs(path, submitted_at_utc=NOW, policy=policy_of(""))
    assert (a.team, a.workers * a.gpus_per_worker, a.gpu_models) == ("anyone", 16, ("K80",))
    assert (b.gpus_per_worker, b.gpu_models) == (0, ())
    bursting = write(tmp_path, _HEAD.replace("gpus_per_worker: 1", "gpus_per_worker: 2") + "    workers: 3\n",
                     "burst.yaml")
    (job,) = load_jobs(bursting, submitted_at_utc=NOW, policy=policy_of("teams: {t: {burst_gpus: 6}}\n"))
    assert job.workers * job.gpus_per_worker == 6


def test_errors_in_several_jobs_are_all_reported(tmp_path: Path, policy: model.Policy) -> None:
    path = write(tmp_path, """
        jobs:
          - id: first
            team: ml-research
            priority: batch
            gpus_per_worker: 1
            vcpus_per_worker: 4
            memory_gib_per_worker: -8
            duration_hours: 1
          - id: second
            team: ml-research
            priority: nightly
            gpus_per_worker: 1
            gpu_models: [A100-80GB, M60]
            vcpus_per_worker: 4
            memory_gib_per_worker: 8
            duration_hours: 1
          - id: first
            team: ml-product
            priority: batch
            workers: 0
            gpus_per_worker: 8
            vcpus_per_worker: 4
            memory_gib_per_worker: 8
            duration_hours: 1
    """)
    found = [(i.line, i.column, i.field_path) for i in issues_of(path, policy)]
    assert found == [
        (7, 28, "jobs[0].memory_gib_per_worker"),
        (11, 15, "jobs[1].priority"),
        (13, 29, "jobs[1].gpu_models[1]"),
        (17, 9, "jobs[2].id"),
        (20, 14, "jobs[2].workers"),
    ]


# --------------------------------------------------------------------------- never anything but SpecError

JOB_KEYS = ["id", "workers", "gpus_per_worker", "gpu_models", "vcpus_per_worker", "memory_gib_per_worker",
            "priority", "team", "checkpointable", "checkpoint_interval_minutes", "deadline_utc", "spot_eligible",
            "duration_hours"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=64),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["a", "a", "b", "batch", "production", "ml-research", "2030-01-01T00:00:00Z",
                     "2030-01-01T00:00:00", "2030-02-30T00:00:00Z", "yes", *GPU_MODELS]),
)
garbage = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6) | st.integers(), children, max_size=4),
    max_leaves=10,
)
jobs_strategy = st.lists(
    st.dictionaries(st.sampled_from(JOB_KEYS) | st.text(max_size=6), scalars | garbage, max_size=15) | garbage,
    max_size=4,
)


def corrupt(draw: st.DrawFn, document: object) -> object:
    """Maybe replace one value somewhere in ``document`` with garbage."""
    slots: list[tuple[object, object]] = []

    def collect(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                slots.append((node, key))
                collect(value)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                slots.append((node, index))
                collect(value)

    collect(document)
    if slots and draw(st.booleans()):
        container, key = draw(st.sampled_from(slots))
        container[key] = draw(garbage)  # type: ignore[index]
    return document


offsets = st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
timestamps = st.datetimes(timezones=st.just(timezone.utc) | st.builds(timezone, offsets)).map(datetime.isoformat)
near_valid_job = st.fixed_dictionaries(
    {
        "id": st.sampled_from(["a", "b", "c"]) | st.from_regex(r"[a-z0-9][a-z0-9._-]{0,12}", fullmatch=True),
        "team": st.sampled_from(["ml-research", "ml-product", "other"]),
        "priority": st.sampled_from(["batch", "production"]),
        "gpus_per_worker": st.integers(0, 8),
        "vcpus_per_worker": st.integers(1, 96) | st.floats(min_value=0.25, max_value=96),
        "memory_gib_per_worker": st.integers(1, 1024) | st.floats(min_value=0.5, max_value=1024),
        "duration_hours": st.floats(min_value=0.01, max_value=100),
    },
    optional={
        "workers": st.integers(1, 4),
        "gpu_models": st.lists(st.sampled_from(GPU_MODELS), max_size=3),
        "checkpointable": st.booleans(),
        "checkpoint_interval_minutes": st.none() | st.floats(min_value=1, max_value=120),
        "deadline_utc": st.none() | timestamps,
        "spot_eligible": st.none() | st.booleans(),
    },
)


@st.composite
def job_documents(draw: st.DrawFn) -> object:
    if draw(st.booleans()):
        jobs = draw(st.lists(near_valid_job, min_size=1, max_size=4))
        return corrupt(draw, jobs if draw(st.booleans()) else {"jobs": jobs})
    jobs = draw(jobs_strategy)
    shape = draw(st.integers(0, 4))
    if shape == 0:
        return jobs
    if shape == 1:
        doc: dict[object, object] = {"jobs": jobs}
        if draw(st.booleans()):
            doc[draw(st.text(max_size=5))] = draw(garbage)
        return doc
    if shape == 2:
        return jobs[0] if jobs else {}
    if shape == 3:
        return {"jobs": draw(garbage)}
    return draw(garbage)


def dump(document: object, as_json: bool) -> str:
    if as_json:
        return json.dumps(document, default=str)
    out = io.StringIO()
    YAML(typ="safe", pure=True).dump(document, out)
    return out.getvalue()


EXAMPLE_TEXT = EXAMPLE_JOBS.read_text()
SNIPPETS = [":", "- ", "\t", "[", "]", "{", "}", "&a ", "*a", "!!int ", "!x ", "'", '"', "\n  ", "---\n",
            "<<: *a", "? ", "\x00", "\ufeff", "\u2028", ": -1", ": .inf", "id: llm-pretrain-7b\n"]


@st.composite
def mutated_text(draw: st.DrawFn, base: str) -> str:
    text = base
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 40)))
        text = text[:i] + draw(st.text(max_size=8) | st.sampled_from(SNIPPETS)) + text[j:]
    return text


def line_breaks(text: str) -> int:
    return sum(text.count(c) for c in "\n\r\x85\u2028\u2029")


def check_jobs_file(path: Path, text: str, policy: model.Policy | None) -> None:
    try:
        jobs = load_jobs(path, submitted_at_utc=NOW, policy=policy)
    except SpecError as exc:
        assert exc.issues
        for issue in exc.issues:
            assert issue.file == str(path)
            assert 1 <= issue.line <= line_breaks(text) + 1, str(issue)
            assert issue.column >= 1
            assert issue.message
    else:
        assert isinstance(jobs, tuple) and jobs
        assert all(isinstance(j, model.Job) for j in jobs)
        assert len({j.job_id for j in jobs}) == len(jobs)


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jobs-fuzz") / "jobs.yaml"


@SETTINGS
@given(document=job_documents(), as_json=st.booleans(), use_policy=st.booleans())
def test_random_documents_give_jobs_or_spec_error(
    scratch: Path, policy: model.Policy, document: object, as_json: bool, use_policy: bool
) -> None:
    text = dump(document, as_json)
    scratch.write_text(text, encoding="utf-8")
    check_jobs_file(scratch, text, policy if use_policy else None)


@SETTINGS
@given(text=mutated_text(EXAMPLE_TEXT) | st.text(max_size=200), use_policy=st.booleans())
def test_malformed_text_gives_jobs_or_spec_error(
    scratch: Path, policy: model.Policy, text: str, use_policy: bool
) -> None:
    scratch.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    check_jobs_file(scratch, text, policy if use_policy else None)


@SETTINGS
@given(raw=st.binary(max_size=300))
def test_random_bytes_give_jobs_or_spec_error(scratch: Path, raw: bytes) -> None:
    scratch.write_bytes(raw)
    check_jobs_file(scratch, raw.decode("utf-8", errors="replace"), None)
