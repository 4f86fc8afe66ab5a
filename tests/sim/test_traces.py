"""Job traces (round trip, strict validation at the right cell, no exception
but SpecError on garbage) and the Alibaba v2023 importer (pure functions and
the CLI end to end on a small inline pod list)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetctl import model
from fleetctl.policy import GPU_MODELS, load_policy
from fleetctl.sim.importers import (
    DEFAULT_ALIBABA_PRIORITY_MAP,
    AlibabaOptions,
    convert_alibaba_pods,
    import_alibaba_2023,
    parse_alibaba_pods,
    parse_priority_map,
)
from fleetctl.sim.traces import (
    TRACE_COLUMNS,
    CsvCell,
    CsvRecord,
    format_job_trace,
    format_number,
    parse_csv,
    parse_job_trace,
    read_job_trace,
    trace_fields,
    write_job_trace,
)
from fleetctl.yamlerrors import SpecError, ValidationIssue

REPO = Path(__file__).resolve().parents[2]
HEADER = ",".join(TRACE_COLUMNS)
T0 = datetime(2023, 2, 15, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def policy() -> model.Policy:
    return load_policy(REPO / "policies" / "example.yaml")


def job(job_id: str = "j1", **kw: object) -> model.Job:
    fields: dict[str, object] = dict(
        job_id=job_id, workers=1, gpus_per_worker=1, vcpus_per_worker=4.0, memory_gib_per_worker=16.0,
        priority="batch", team="ml", duration_hours=1.5, submitted_at_utc=T0,
    )
    fields.update(kw)
    return model.Job(**fields)  # type: ignore[arg-type]


def issues_of(text: str, policy: model.Policy | None = None) -> list[tuple[int, int, str, str]]:
    with pytest.raises(SpecError) as info:
        parse_job_trace(text, "t.csv", policy)
    assert all(i.file == "t.csv" for i in info.value.issues)
    return [(i.line, i.column, i.field_path, i.message) for i in info.value.issues]


# =========================================================================== round trip


ROUND_TRIP_JOBS = (
    job("plain"),
    job("gang-8x8", workers=8, gpus_per_worker=8, gpu_models=("A100-80GB", "H100-80GB"), vcpus_per_worker=96.0,
        memory_gib_per_worker=1152.0, priority="production", team="ml-research", duration_hours=48.0,
        submitted_at_utc=T0 + timedelta(seconds=1, microseconds=250_000), checkpointable=True,
        checkpoint_interval_minutes=30.0, deadline_utc=T0 + timedelta(days=3), spot_eligible=False),
    job("cpu.only_1", gpus_per_worker=0, vcpus_per_worker=0.5, memory_gib_per_worker=0.0009765625,
        duration_hours=0.23305555555555554, spot_eligible=True, checkpointable=True),
    job("tiny", duration_hours=1e-05, vcpus_per_worker=1 / 3, memory_gib_per_worker=12345.678,
        submitted_at_utc=datetime(2023, 2, 15, 3, 0, tzinfo=timezone(timedelta(hours=2))),
        deadline_utc=datetime(2099, 12, 31, 23, 59, 59, 999_999, tzinfo=timezone.utc)),
)


def test_round_trip_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    write_job_trace(ROUND_TRIP_JOBS, path)
    back = read_job_trace(path)
    assert back == ROUND_TRIP_JOBS
    assert all(j.state is model.JobState.QUEUED for j in back)
    assert back[3].submitted_at_utc.tzinfo is timezone.utc  # +02:00 is stored as UTC
    # Writing what was read gives the same bytes.
    assert format_job_trace(back) == path.read_text(encoding="utf-8")


def test_written_text_is_canonical(tmp_path: Path) -> None:
    text = format_job_trace(ROUND_TRIP_JOBS[:3])
    assert text == (
        HEADER + "\n"
        "plain,2023-02-15T00:00:00Z,1.5,1,1,,4,16,batch,ml,false,,,\n"
        "gang-8x8,2023-02-15T00:00:01.250000Z,48,8,8,A100-80GB|H100-80GB,96,1152,production,ml-research,true,30,"
        "2023-02-18T00:00:00Z,false\n"
        "cpu.only_1,2023-02-15T00:00:00Z,0.23305555555555554,1,0,,0.5,0.0009765625,batch,ml,true,,,true\n"
    )


def test_runtime_fields_are_not_written_and_models_come_back_sorted() -> None:
    running = job("r", state=model.JobState.RUNNING, node_ids=("n1",), interruptions=2, priority_boost=100.0,
                  gpu_models=("T4", "A10"))
    back = parse_job_trace(format_job_trace([running]))
    assert back == (trace_fields(running),)
    assert back[0].gpu_models == ("A10", "T4") and back[0].state is model.JobState.QUEUED


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (job("x", gpu_memory_gib_per_gpu=40.0), "gpu_memory_gib_per_gpu=40.0 is not a job-trace column"),
        (job("x", team=""), "job 'x': team is empty"),
        (job("bad id"), "job 'bad id': job_id: invalid job id 'bad id'"),
        (job("x", duration_hours=float("nan")), "job 'x': duration_hours: must be a number such as 1.5 (got 'nan')"),
        (job("x", workers=0), "job 'x': workers: must be at least 1 (got '0')"),
    ],
)
def test_writer_refuses_jobs_it_could_not_read_back(tmp_path: Path, bad: model.Job, message: str) -> None:
    path = tmp_path / "out.csv"
    with pytest.raises(ValueError) as info:
        write_job_trace([job("ok"), bad], path)
    assert message in str(info.value)
    assert not path.exists()


def test_writer_names_the_job_and_the_row_of_a_problem_without_a_column() -> None:
    for jobs in ([job("ok"), job("x", team='m"l')], [job("x", team='m"l'), job("ok")]):  # the first job too
        with pytest.raises(ValueError) as info:
            format_job_trace(jobs)
        assert str(info.value) == ("cannot write the job trace:\njob 'x': row: a '\"' inside an unquoted cell; quote "
                                   "the whole cell and double the quote (\"\")")


def test_writer_refuses_duplicate_ids() -> None:
    with pytest.raises(ValueError) as info:
        format_job_trace([job("a"), job("a")])
    assert "job 'a': job_id: duplicate job id 'a' (first used at line 2)" in str(info.value)


def test_writer_refuses_naive_times() -> None:
    with pytest.raises(ValueError, match="has no time zone"):
        format_job_trace([job("a", submitted_at_utc=datetime(2023, 1, 1))])


JOB_STRATEGY = st.builds(
    model.Job,
    job_id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True),
    workers=st.integers(1, 100_000),
    gpus_per_worker=st.integers(0, 1024),
    vcpus_per_worker=st.floats(min_value=0.001, max_value=100_000, allow_nan=False),
    memory_gib_per_worker=st.floats(min_value=1 / 1024, max_value=1_000_000, allow_nan=False),
    priority=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,10}", fullmatch=True),
    team=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,10}", fullmatch=True),
    duration_hours=st.floats(min_value=1e-9, max_value=100_000, allow_nan=False),
    submitted_at_utc=st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1),
                                  timezones=st.just(timezone.utc)),
    checkpointable=st.booleans(),
    spot_eligible=st.none() | st.booleans(),
)


@st.composite
def trace_jobs(draw: st.DrawFn) -> list[model.Job]:
    jobs = []
    for index, j in enumerate(draw(st.lists(JOB_STRATEGY, max_size=5))):
        models = draw(st.lists(st.sampled_from(GPU_MODELS), unique=True, max_size=3)) if j.gpus_per_worker else []
        interval = draw(st.none() | st.floats(min_value=1.0, max_value=1e6)) if j.checkpointable else None
        deadline = draw(st.none() | st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=999)))
        jobs.append(replace(
            j, job_id=f"{j.job_id}-{index}", gpu_models=tuple(sorted(models)), checkpoint_interval_minutes=interval,
            deadline_utc=None if deadline is None else j.submitted_at_utc + deadline,
        ))
    return jobs


@settings(max_examples=150, deadline=None)
@given(jobs=trace_jobs())
def test_any_valid_jobs_round_trip(jobs: list[model.Job]) -> None:
    assert parse_job_trace(format_job_trace(jobs)) == tuple(jobs)


# =========================================================================== reading


def test_empty_priority_and_team_take_the_defaults(policy: model.Policy) -> None:
    text = HEADER + "\nj,2023-02-15T00:00:00Z,1,1,0,,1,1,,,false,,,\n"
    assert parse_job_trace(text)[0].priority == "default"  # model.Policy's default class
    (j,) = parse_job_trace(text, policy=policy)
    assert (j.priority, j.team) == (policy.default_priority_class, "default") == ("batch", "default")
    assert (j.gpu_models, j.checkpoint_interval_minutes, j.deadline_utc, j.spot_eligible) == ((), None, None, None)


def test_crlf_quotes_and_bom_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (HEADER + '\r\n"q-1",2023-02-15T00:00:00Z,1,1,1,"T4|A10",2,8,batch,ml,'
                                                 'false,,,\r\n').encode())
    (j,) = read_job_trace(path)
    assert (j.job_id, j.gpu_models) == ("q-1", ("A10", "T4"))


GOOD = "j1,2023-02-15T00:00:00Z,1.5,1,1,T4,4,16,batch,ml,true,30,2023-02-16T00:00:00Z,false"
# Cell columns of BASE: j2 1, submit 4, duration 25, workers 29, gpus 31, models 33, vcpus 36, memory 38,
# priority 41, team 47, checkpointable 50, interval 55, deadline 58, spot_eligible 79.
BASE = dict(zip(TRACE_COLUMNS, ["j2", "2023-02-15T01:00:00Z", "1.5", "1", "1", "T4", "4", "16", "batch", "ml",
                                "true", "30", "2023-02-16T00:00:00Z", "false"]))


def row(**cells: str) -> str:
    return ",".join({**BASE, **cells}.values())


BAD_ROWS = [
    # (third line of the file, expected issues as (line, column, field, message))
    (row(job_id=""), [(3, 1, "job_id", "required value is missing (the cell is empty)")]),
    (row(job_id="a b"), [(3, 1, "job_id", "invalid job id 'a b': use letters, digits, '.', '-' and '_' (at most "
                                          "128, starting with a letter or digit)")]),
    (row(job_id="j1"), [(3, 1, "job_id", "duplicate job id 'j1' (first used at line 2)")]),
    (row(submit_time_utc="2023-02-15T01:00:00"),
     [(3, 4, "submit_time_utc", "timestamp '2023-02-15T01:00:00' has no time zone; add 'Z' or an offset like "
                                "+00:00")]),
    (row(submit_time_utc=""), [(3, 4, "submit_time_utc", "required value is missing (the cell is empty)")]),
    (row(submit_time_utc="yesterday"),
     [(3, 4, "submit_time_utc", "invalid timestamp 'yesterday': use ISO-8601 with a time zone, e.g. "
                                "2030-01-31T18:00:00Z")]),
    (row(duration_hours="0"), [(3, 25, "duration_hours", "must be greater than 0 (got '0')")]),
    (row(duration_hours="nan"), [(3, 25, "duration_hours", "must be a number such as 1.5 (got 'nan')")]),
    (row(duration_hours="1_000"), [(3, 25, "duration_hours", "must be a number such as 1.5 (got '1_000')")]),
    (row(duration_hours="1e999"), [(3, 25, "duration_hours", "must be a finite number (got '1e999')")]),
    (row(duration_hours="100001"), [(3, 25, "duration_hours", "must be at most 100000 (got '100001')")]),
    (row(workers=""), [(3, 29, "workers", "required value is missing (the cell is empty)")]),
    (row(workers="0"), [(3, 29, "workers", "must be at least 1 (got '0')")]),
    (row(workers="1.0"), [(3, 29, "workers", "must be a whole number (got '1.0')")]),
    (row(workers="٣"), [(3, 29, "workers", "must be a whole number (got '٣')")]),
    (row(workers=" 2"), [(3, 29, "workers", "has leading or trailing spaces (' 2'); remove them")]),
    (row(gpus_per_worker="-1"), [(3, 31, "gpus_per_worker", "must be at least 0 (got '-1')")]),
    (row(gpus_per_worker="1025"), [(3, 31, "gpus_per_worker", "must be at most 1024 (got '1025')")]),
    (row(gpus_per_worker="9" * 5000),
     [(3, 31, "gpus_per_worker", "must be at most 1024 (got '999999999999999999999999999999999999...)")]),
    (row(gpu_models="V100M16"),
     [(3, 33, "gpu_models", "unknown GPU model 'V100M16' (did you mean 'V100-16GB'?); allowed: "
                            + ", ".join(GPU_MODELS))]),
    (row(gpu_models="Quantum"),
     [(3, 33, "gpu_models", "unknown GPU model 'Quantum'; allowed: " + ", ".join(GPU_MODELS))]),  # no hint
    (row(gpu_models="T4|T4"), [(3, 33, "gpu_models", "GPU model 'T4' is listed twice")]),
    (row(gpu_models="T4||A10"),
     [(3, 33, "gpu_models", "empty GPU model name in 'T4||A10'; separate names with a single '|'")]),
    (row(gpus_per_worker="0"),
     [(3, 33, "gpu_models", "gpu_models is set but gpus_per_worker is 0; a CPU-only job cannot ask for a GPU "
                            "model")]),
    (row(vcpus_per_worker=""), [(3, 36, "vcpus_per_worker", "required value is missing (the cell is empty)")]),
    (row(memory_gib_per_worker="-16"), [(3, 38, "memory_gib_per_worker", "must be at least 0.0009765625 (got '-16')")]),
    (row(vcpus_per_worker="1e-320"), [(3, 36, "vcpus_per_worker", "must be at least 0.001 (got '1e-320')")]),
    (row(priority="prod class"),
     [(3, 41, "priority", "invalid name 'prod class': use letters, digits, '-' and '_' (at most 63, starting "
                          "with a letter or digit)")]),
    (row(team="ml.research"),
     [(3, 47, "team", "invalid name 'ml.research': use letters, digits, '-' and '_' (at most 63, starting "
                      "with a letter or digit)")]),
    (row(checkpointable="True"), [(3, 50, "checkpointable", "must be true or false (got 'True')")]),
    (row(checkpointable=""),
     [(3, 50, "checkpointable", "required value is missing (the cell is empty); write true or false")]),
    (row(checkpointable="false"),
     [(3, 56, "checkpoint_interval_minutes", "checkpoint_interval_minutes is set but checkpointable is false; "
                                             "set checkpointable to true or leave the interval empty")]),
    (row(checkpoint_interval_minutes="0"),
     [(3, 55, "checkpoint_interval_minutes", "must be at least 1 (got '0')")]),
    (row(checkpoint_interval_minutes="0.5"),
     [(3, 55, "checkpoint_interval_minutes", "must be at least 1 (got '0.5')")]),
    (row(deadline_utc="2023-02-15T01:00:00Z"),
     [(3, 58, "deadline_utc", "deadline_utc must be after submit_time_utc (2023-02-15T01:00:00Z)")]),
    (row(spot_eligible="yes"), [(3, 79, "spot_eligible", "must be true or false (got 'yes')")]),
    (row(spot_eligible='"false"x'),
     [(3, 86, "", "unexpected 'x' after a closing quote; a quoted cell must be followed by ',' or the end of the "
                  "line")]),
    (row(team='m"l'), [(3, 48, "", "a '\"' inside an unquoted cell; quote the whole cell and double the quote "
                                   "(\"\")")]),
    ("j2,2023-02-15T01:00:00Z,1.5", [(3, 1, "", "the row has 3 cells; the header has 14")]),
    ("", [(3, 1, "", "blank line; remove it")]),
    (row(job_id='"j\n2"'), [(3, 1, "job_id", "invalid job id 'j\\n2': use letters, digits, '.', '-' and '_' (at "
                                             "most 128, starting with a letter or digit)")]),
    (row(team='"ml'), [(3, 47, "", "a quoted cell is never closed (a '\"' is missing); nothing after it was "
                                   "read")]),
]


@pytest.mark.parametrize(("line", "expected"), BAD_ROWS, ids=[str(i) for i in range(len(BAD_ROWS))])
def test_bad_row_is_reported_at_its_line_and_column(line: str, expected: list[tuple[int, int, str, str]]) -> None:
    text = f"{HEADER}\n{GOOD}\n{line}\n{GOOD.replace('j1', 'j9')}\n"
    assert issues_of(text) == expected


def test_every_error_of_a_file_is_reported_in_order() -> None:
    text = "\n".join([HEADER, row(workers="0", team="a b"), GOOD, row(job_id="j3", duration_hours="x"),
                      '"j4",2023-02-15T00:00:00Z,1,1,1,,1,1,,,false,,,']) + "\n"
    assert issues_of(text) == [
        (2, 29, "workers", "must be at least 1 (got '0')"),
        (2, 47, "team", "invalid name 'a b': use letters, digits, '-' and '_' (at most 63, starting with a letter "
                        "or digit)"),
        (4, 25, "duration_hours", "must be a number such as 1.5 (got 'x')"),
    ]


def test_rows_without_a_valid_job_id_are_not_duplicates_of_each_other() -> None:
    text = "\n".join([HEADER, row(job_id=""), row(job_id="a b"), row(job_id=""), row(job_id="a b")]) + "\n"
    missing = "required value is missing (the cell is empty)"
    invalid = ("invalid job id 'a b': use letters, digits, '.', '-' and '_' (at most 128, starting with a letter or "
               "digit)")
    assert issues_of(text) == [(2, 1, "job_id", missing), (3, 1, "job_id", invalid), (4, 1, "job_id", missing),
                               (5, 1, "job_id", invalid)]  # and no 'duplicate job id'


def test_multi_line_cell_moves_the_line_numbers_on() -> None:
    text = f'{HEADER}\n{row(team=chr(34) + "m" + chr(10) + "l" + chr(34))}\n{row(job_id="j3", workers="0")}\n'
    assert issues_of(text) == [
        (2, 47, "team", "invalid name 'm\\nl': use letters, digits, '-' and '_' (at most 63, starting with a "
                        "letter or digit)"),
        (4, 29, "workers", "must be at least 1 (got '0')"),
    ]


def test_unknown_priority_class_with_a_policy(policy: model.Policy) -> None:
    assert issues_of(f"{HEADER}\n{row(priority='urgent')}\n", policy) == [
        (2, 41, "priority", "unknown priority class 'urgent'; the policy defines: batch, production"),
    ]
    assert parse_job_trace(f"{HEADER}\n{row(priority='urgent')}\n")[0].priority == "urgent"
    assert parse_job_trace(f"{HEADER}\n{row(priority='production')}\n", policy=policy)[0].priority == "production"
    # an invalid name is reported once, not also as a class the policy lacks
    assert issues_of(f"{HEADER}\n{row(priority='prod class')}\n", policy) == [
        (2, 41, "priority", "invalid name 'prod class': use letters, digits, '-' and '_' (at most 63, starting "
                            "with a letter or digit)"),
    ]


def cells(text: str) -> tuple[list[list[tuple[str, int, int]]], list[tuple[int, int, str]]]:
    """parse_csv's records as lists of (text, line, column) and its issues as (line, column, message)."""
    records, issues = parse_csv(text, "t.csv")
    assert all(isinstance(r, CsvRecord) and all(isinstance(c, CsvCell) for c in r.cells) for r in records)
    assert all(r.line == r.cells[0].line for r in records)
    assert all(i.file == "t.csv" and i.field_path == "" for i in issues)
    return [[(c.text, c.line, c.column) for c in r.cells] for r in records], \
        [(i.line, i.column, i.message) for i in issues]


def test_csv_doubled_quotes_and_a_quoted_cell_before_crlf() -> None:
    # 'say ""hi""' is 12 characters from column 4, so x is at 17; "r" ends its line before \r\n
    text = 'id,"say ""hi""",x\r\n"q","r"\r\nz,""\r\n'
    assert cells(text) == ([[("id", 1, 1), ('say "hi"', 1, 4), ("x", 1, 17)],
                            [("q", 2, 1), ("r", 2, 5)],
                            [("z", 3, 1), ("", 3, 3)]], [])


def test_csv_a_quoted_cell_over_lines_moves_the_lines_and_columns_on() -> None:
    # a,"b<nl>c",d : d is on line 2 after 'c",' (column 4); "e<nl>" ends with its newline, so ,g is on line 4;
    # "h" ends its line: the newline after it is the record's end, counted once
    text = 'a,"b\nc",d\n"e\n",g\n"h"\ni\n'
    assert cells(text) == ([[("a", 1, 1), ("b\nc", 1, 3), ("d", 2, 4)],
                            [("e\n", 3, 1), ("g", 4, 3)],
                            [("h", 5, 1)],
                            [("i", 6, 1)]], [])


STRAY = "a '\"' inside an unquoted cell; quote the whole cell and double the quote (\"\")"
AFTER_QUOTE = "unexpected 'h' after a closing quote; a quoted cell must be followed by ',' or the end of the line"


def test_csv_reading_goes_on_at_the_line_after_a_malformed_one() -> None:
    # line 1: the stray quote is the 4th character; line 3: 'h' is the 4th, after "g"
    text = 'a,b"c,d\ne,f\n"g"h,i\nj,k'
    assert cells(text) == ([[("e", 2, 1), ("f", 2, 3)], [("j", 4, 1), ("k", 4, 3)]],
                           [(1, 4, STRAY), (3, 4, AFTER_QUOTE)])
    # a malformed last line without a line end
    assert cells('a\nb"c') == ([[("a", 1, 1)]], [(2, 2, STRAY)])
    assert cells('a\n"g"h') == ([[("a", 1, 1)]], [(2, 4, AFTER_QUOTE)])


def test_csv_a_carriage_return_ends_a_line_only_before_a_newline() -> None:
    assert cells("a\r,b\r\nc\r") == ([[("a\r", 1, 1), ("b", 1, 4)], [("c\r", 2, 1)]], [])
    assert cells("\n\r\n") == ([[("", 1, 1)], [("", 2, 1)]], [])  # blank lines are records of one empty cell
    assert cells("") == ([], [])


def test_a_row_after_a_malformed_one_is_checked_at_its_own_line_and_columns() -> None:
    text = "\n".join([HEADER, row(team='m"l'), row(job_id="j3", workers="0"), row(job_id="j4", team='"x"y')]) + "\n"
    assert issues_of(text) == [
        (2, 48, "", STRAY),
        (3, 29, "workers", "must be at least 1 (got '0')"),
        (4, 50, "", AFTER_QUOTE.replace("'h'", "'y'")),
    ]


EXPECTED_HEADER = "the header must be exactly: " + HEADER


def test_a_malformed_header_line_is_reported_alone() -> None:
    """Its issue only: not 'file is empty', nor the next line checked as the header."""
    unclosed = "a quoted cell is never closed (a '\"' is missing); nothing after it was read"
    assert issues_of('"job_id,submit_time_utc\n') == [(1, 1, "", unclosed)]
    stray = "a '\"' inside an unquoted cell; quote the whole cell and double the quote (\"\")"
    assert issues_of(f'job_"id{HEADER[6:]}\n{GOOD}\n') == [(1, 5, "", stray)]
    # a header with a wrong name and a malformed row: both
    assert issues_of(HEADER.replace("workers,", "worker,", 1) + "\n" + row(team='m"l') + "\n") == [
        (1, 1, "", "missing column(s) workers; " + EXPECTED_HEADER),
        (1, 39, "", "unknown column 'worker' (did you mean 'workers'?); " + EXPECTED_HEADER), (2, 48, "", stray)]


def test_format_utc_refuses_a_time_zone_without_an_offset() -> None:
    from datetime import tzinfo

    from fleetctl.sim.traces import format_utc

    class NoOffset(tzinfo):
        def utcoffset(self, dt: datetime | None) -> None:
            return None

    for value in (datetime(2023, 2, 15), datetime(2023, 2, 15, tzinfo=NoOffset())):
        with pytest.raises(ValueError, match="has no time zone"):
            format_utc(value)
    assert format_utc(datetime(2023, 2, 15, 3, tzinfo=timezone(timedelta(hours=2)))) == "2023-02-15T01:00:00Z"


def test_format_number_is_the_shortest_text_of_the_float() -> None:
    assert [format_number(v) for v in (12.0, 0.25, 1e-05, 999999999999999.0, 1e16, 1e20, -3.0)] == [
        "12", "0.25", "1e-05", "999999999999999", "1e+16", "1e+20", "-3"]


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (HEADER.replace("workers,", "worker,", 1),
         [(1, 39, "", "unknown column 'worker' (did you mean 'workers'?); " + EXPECTED_HEADER),
          (1, 1, "", "missing column(s) workers; " + EXPECTED_HEADER)]),
        (HEADER.replace(",spot_eligible", ""), [(1, 1, "", "missing column(s) spot_eligible; " + EXPECTED_HEADER)]),
        (HEADER.replace("job_id,submit_time_utc", "submit_time_utc,job_id"),
         [(1, 1, "", "columns are out of order; " + EXPECTED_HEADER)]),
        (HEADER + ",job_id", [(1, 197, "job_id", "column is listed twice in the header")]),
        # two empty names: the first unknown (no hint for it), the second listed twice, named '""'
        (HEADER + ",,", [(1, 197, "", "unknown column ''; " + EXPECTED_HEADER),
                         (1, 198, '""', "column is listed twice in the header")]),
    ],
)
def test_header_must_be_exact(header: str, expected: list[tuple[int, int, str, str]]) -> None:
    assert sorted(issues_of(f"{header}\n{GOOD}\n")) == sorted(expected)


def test_unreadable_files(tmp_path: Path) -> None:
    def issues(path: Path) -> list[str]:
        with pytest.raises(SpecError) as info:
            read_job_trace(path)
        return [str(i) for i in info.value.issues]

    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert issues(empty) == [f"{empty}:1:1: (root): file is empty; expected the header {HEADER}"]
    latin = tmp_path / "latin.csv"
    latin.write_bytes((HEADER + "\nj\xe9,").encode("latin-1"))
    assert issues(latin) == [f"{latin}:2:2: (root): file is not UTF-8 text (byte 0xe9); save it as UTF-8"]
    missing = tmp_path / "missing.csv"
    assert issues(missing) == [f"{missing}:1:1: (root): cannot read the file: No such file or directory"]
    assert issues(tmp_path) == [f"{tmp_path}:1:1: (root): cannot read the file: Is a directory"]


# =========================================================================== garbage in, SpecError out


def check_trace_text(text: str, policy: model.Policy | None = None) -> None:
    try:
        jobs = parse_job_trace(text, "g.csv", policy)
    except SpecError as exc:
        assert exc.issues
        lines = text.count("\n") + 1
        for issue in exc.issues:
            assert isinstance(issue, ValidationIssue) and issue.file == "g.csv"
            assert 1 <= issue.line <= lines, str(issue)
            assert issue.column >= 1 and issue.message
    else:
        assert all(isinstance(j, model.Job) for j in jobs)
        assert len({j.job_id for j in jobs}) == len(jobs)
        # What was accepted can be written and read back unchanged.
        assert parse_job_trace(format_job_trace(jobs), policy=policy) == jobs


VALID_TEXT = f"{HEADER}\n{GOOD}\n{row()}\n"
SNIPPETS = [",", '"', '""', "\n", "\r\n", "\r", "|", "||", "T4", "-1", "0", "1e309", "nan", "true", "True", " ",
            "\x00", "\ufeff", "2023-02-30T00:00:00Z", "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00",
            "٣", "1_0", "A100-80GB|T4"]


@st.composite
def mutated(draw: st.DrawFn, base: str) -> str:
    text = base
    for _ in range(draw(st.integers(1, 5))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 30)))
        text = text[:i] + draw(st.text(max_size=6) | st.sampled_from(SNIPPETS)) + text[j:]
    return text


@st.composite
def random_rows(draw: st.DrawFn) -> str:
    cell = st.sampled_from(SNIPPETS) | st.text(max_size=8) | st.sampled_from(list(BASE.values()))
    rows = draw(st.lists(st.lists(cell, min_size=12, max_size=15), max_size=4))
    return HEADER + "\n" + "\n".join(",".join(r) for r in rows)


GARBAGE_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@GARBAGE_SETTINGS
@given(text=mutated(VALID_TEXT) | random_rows() | st.text(max_size=300), use_policy=st.booleans())
def test_garbage_text_gives_jobs_or_spec_error(policy: model.Policy, text: str, use_policy: bool) -> None:
    check_trace_text(text, policy if use_policy else None)


@GARBAGE_SETTINGS
@given(raw=st.binary(max_size=300) | mutated(VALID_TEXT).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_garbage_bytes_give_jobs_or_spec_error(tmp_path_factory: pytest.TempPathFactory, raw: bytes) -> None:
    path = tmp_path_factory.getbasetemp() / "garbage.csv"
    path.write_bytes(raw)
    try:
        read_job_trace(path)
    except SpecError as exc:
        assert all(i.file == str(path) for i in exc.issues)


# =========================================================================== the Alibaba importer

PODS = textwrap.dedent("""\
    name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
    p-done,8000,30720,1,1000,V100M16|V100M32|V100M32,LS,Succeeded,3600,10800,3660
    p-run,4000,8192,1,500,T4,BE,Running,0,86400,120
    p-pend,2000,4096,1,1000,,LS,Pending,7200,9000,
    p-zero,6000,12288,2,1000,P100,Burstable,Failed,1800,1800,1800
    p-cpu,1000,2048,0,0,,BE,Succeeded,60,660,60
    p-g2,12000,49152,8,1000,G2,Guaranteed,Failed,5400,9000,5400
    p-g3mix,6000,24576,1,1000,G3|A10|T4,BE,Succeeded,600,4200,900
    p-mem0,14000,0,1,1000,,Burstable,Succeeded,100,200,100
    """)

EXPECTED_JOBS_CSV = HEADER + "\n" + textwrap.dedent("""\
    p-run,2023-02-15T00:00:00Z,23.966666666666665,1,1,T4,4,8,batch,default,false,,,
    p-g3mix,2023-02-15T00:10:00Z,0.9166666666666666,1,1,A10|T4,6,24,batch,default,false,,,
    p-done,2023-02-15T01:00:00Z,1.9833333333333334,1,1,V100-16GB|V100-32GB,8,30,production,default,false,,,
    p-g2,2023-02-15T01:30:00Z,1,1,8,,12,48,production,default,false,,,
    """)


def options(**kw: object) -> AlibabaOptions:
    return AlibabaOptions(start_utc=T0, **kw)  # type: ignore[arg-type]


def test_importer_default_options_exact_output() -> None:
    result = convert_alibaba_pods(parse_alibaba_pods(PODS, "pods.csv"), options())
    assert format_job_trace(result.jobs) == EXPECTED_JOBS_CSV
    s = result.summary
    assert (s.pods_read, s.kept) == (8, 4)
    assert dict(s.dropped) == {"cpu_only": 1, "pending": 1, "zero_request": 1, "non_positive_duration": 1}
    assert list(s.dropped) == ["cpu_only", "pending", "zero_request", "non_positive_duration"]
    assert (s.censored, s.fractional_gpu_rounded_up, s.gpu_spec_mapped) == (1, 1, 3)
    assert (s.gpu_spec_undisclosed_dropped, s.gpu_spec_undisclosed_narrowed) == (1, 1)
    assert (s.checkpointable, s.with_deadline, s.pending_with_assumed_duration, s.cpu_only) == (0, 0, 0, 0)
    assert (s.first_submit_utc, s.last_submit_utc) == (T0, T0 + timedelta(minutes=90))


def test_importer_counts_as_censored_only_running_pods_deleted_at_the_trace_end() -> None:
    """``pod_phase`` is the phase at deletion: a pod deleted while it ran is ``Running`` too. Only a Running pod
    whose ``deletion_time`` is the pod list's last one was still running when the trace ended (right-censored).
    In the published trace 5,193 pods are Running, but 34 have the last second (12,902,960) as deletion_time; the
    others were deleted at 4,940 different times over days 115-149, and their run time is complete. The summary
    called all of them censored (4,149 of the 6,202 jobs imported by default instead of 32)."""
    text = PODS + "p-killed,4000,8192,1,1000,,BE,Running,600,7200,600\n"
    result = convert_alibaba_pods(parse_alibaba_pods(text, "pods.csv"), options())
    by_id = {j.job_id: j for j in result.jobs}
    assert by_id["p-killed"].duration_hours == (7200 - 600) / 3600  # the job itself is unchanged
    assert result.summary.kept == 5
    assert result.summary.censored == 1  # p-run, deleted at 86400, the last deletion_time; not p-killed
    # The end is that of the whole pod list, whatever is filtered: here the CPU-only pod ends last.
    later = text + "p-cpu-late,1000,2048,0,0,,BE,Succeeded,60,90000,60\n"
    assert convert_alibaba_pods(parse_alibaba_pods(later), options()).summary.censored == 0


def test_importer_keeps_cpu_and_pending_pods_when_asked() -> None:
    pods = parse_alibaba_pods(PODS)
    result = convert_alibaba_pods(pods, options(include_cpu=True, pending_duration_hours=2.0))
    by_id = {j.job_id: j for j in result.jobs}
    assert [j.job_id for j in result.jobs] == ["p-run", "p-cpu", "p-g3mix", "p-done", "p-g2", "p-pend"]
    assert by_id["p-pend"].duration_hours == 2.0
    assert by_id["p-pend"].submitted_at_utc == T0 + timedelta(hours=2)
    assert (by_id["p-cpu"].gpus_per_worker, by_id["p-cpu"].vcpus_per_worker, by_id["p-cpu"].duration_hours) == \
        (0, 1.0, 600 / 3600)
    assert dict(result.summary.dropped) == {"zero_request": 1, "non_positive_duration": 1}
    assert (result.summary.pending_with_assumed_duration, result.summary.cpu_only) == (1, 1)


def test_importer_priority_map_window_and_limit() -> None:
    pods = parse_alibaba_pods(PODS)
    mapped = convert_alibaba_pods(pods, options(priority_map=parse_priority_map("BE=low, LS=high")))
    assert [j.priority for j in mapped.jobs] == ["low", "low", "high", "production"]
    window = convert_alibaba_pods(pods, options(window_hours=1.0))  # [00:00, 01:00): p-done at 01:00 is out
    assert [j.job_id for j in window.jobs] == ["p-run", "p-g3mix"]
    assert window.summary.dropped["outside_window"] == 2
    limited = convert_alibaba_pods(pods, options(limit=3))
    assert [j.job_id for j in limited.jobs] == ["p-run", "p-g3mix", "p-done"]
    assert limited.summary.dropped["over_limit"] == 1


def test_importer_seeded_choices_are_stable_per_pod() -> None:
    pods = parse_alibaba_pods(PODS)
    everything = options(checkpointable_fraction=1.0, checkpoint_interval_minutes=15.0, deadline_fraction=1.0,
                         seed=3)
    jobs = convert_alibaba_pods(pods, everything).jobs
    assert all(j.checkpointable and j.checkpoint_interval_minutes == 15.0 for j in jobs)
    for j in jobs:
        assert j.deadline_utc is not None
        slack = (j.deadline_utc - j.submitted_at_utc).total_seconds() / (j.duration_hours * 3600)
        assert 1.5 <= slack <= 3.0 + 1 / (j.duration_hours * 3600)
    assert convert_alibaba_pods(pods, everything).jobs == jobs  # same seed, same jobs
    assert convert_alibaba_pods(pods, replace(everything, seed=4)).jobs != jobs
    # A pod's choices do not depend on which other pods are kept.
    assert convert_alibaba_pods(pods, replace(everything, limit=2)).jobs == jobs[:2]
    half = convert_alibaba_pods(pods, options(checkpointable_fraction=0.5, deadline_fraction=0.5, seed=3)).jobs
    assert [j.checkpointable for j in half] == [j.checkpointable for j in
                                                convert_alibaba_pods(pods, options(checkpointable_fraction=0.5,
                                                                                   seed=3)).jobs]


def test_importer_seeded_choices_are_the_same_from_one_release_to_the_next() -> None:
    """The same command gives the same file (docs/traces.md): the streams are seeded by the text
    'alibaba-2023/SEED/NAME', so the choices of seed 1 at fraction 0.5 are fixed. Pinned from the code as it is: a
    change of the seed text or of the deadline's rounding changes which jobs are checkpointable or their deadlines.
    p-done draws no checkpoint and no deadline; p-run's deadline is 23.97 h x a slack in [1.5, 3] after its submit
    (here 1.97: 2023-02-16T23:15:55Z)."""
    pods = parse_alibaba_pods(PODS)
    result = convert_alibaba_pods(pods, options(seed=1, checkpointable_fraction=0.5, deadline_fraction=0.5))
    jobs = result.jobs
    assert (result.summary.checkpointable, result.summary.with_deadline) == (3, 3)
    assert format_job_trace(jobs) == HEADER + "\n" + textwrap.dedent("""\
        p-run,2023-02-15T00:00:00Z,23.966666666666665,1,1,T4,4,8,batch,default,true,30,2023-02-16T23:15:55Z,
        p-g3mix,2023-02-15T00:10:00Z,0.9166666666666666,1,1,A10|T4,6,24,batch,default,true,30,2023-02-15T01:47:00Z,
        p-done,2023-02-15T01:00:00Z,1.9833333333333334,1,1,V100-16GB|V100-32GB,8,30,production,default,false,,,
        p-g2,2023-02-15T01:30:00Z,1,1,8,,12,48,production,default,true,30,2023-02-15T03:29:09Z,
        """)


def test_importer_takes_the_pods_from_any_iterable() -> None:
    """``convert_alibaba_pods`` takes an Iterable: pods from a generator (read once) give the same jobs and summary
    as from a tuple, though the trace end (max deletion_time) is taken before the pods are converted."""
    pods = parse_alibaba_pods(PODS)
    from_tuple = convert_alibaba_pods(pods, options())
    from_generator = convert_alibaba_pods((p for p in pods), options())
    assert format_job_trace(from_generator.jobs) == EXPECTED_JOBS_CSV
    assert from_generator.summary == from_tuple.summary


def test_importer_gives_a_cpu_only_pod_no_gpu_models_whatever_its_gpu_spec() -> None:
    """A CPU-only pod (num_gpu 0) asks for no GPU, so a gpu_spec in its row constrains nothing: the job has no
    gpu_models, and the pod counts neither as mapped nor as undisclosed (G2)."""
    text = PODS.splitlines()[0] + "\n" + textwrap.dedent("""\
        c-t4,1000,2048,0,0,T4,BE,Succeeded,0,3600,0
        c-g2,1000,2048,0,0,G2|P100,BE,Succeeded,0,3600,0
        c-g3,1000,2048,0,0,G3,BE,Succeeded,0,3600,0
        """)
    result = convert_alibaba_pods(parse_alibaba_pods(text), options(include_cpu=True))
    assert [(j.job_id, j.gpus_per_worker, j.gpu_models) for j in result.jobs] == \
        [("c-t4", 0, ()), ("c-g2", 0, ()), ("c-g3", 0, ())]
    s = result.summary
    assert (s.cpu_only, s.gpu_spec_mapped, s.gpu_spec_undisclosed_dropped, s.gpu_spec_undisclosed_narrowed) == \
        (3, 0, 0, 0)


def test_importer_drops_a_pod_of_0_vcpu_and_keeps_one_of_a_single_second() -> None:
    """Zero requests are 0 vCPU as well as 0 memory (PODS has only the latter); a run of one second (scheduled at
    10, deleted at 11) is a positive duration, kept as 1/3600 h."""
    text = PODS.splitlines()[0] + "\n" + textwrap.dedent("""\
        p-cpu0,0,2048,1,1000,,BE,Succeeded,0,3600,0
        p-1s,1000,2048,1,1000,,BE,Succeeded,10,11,10
        """)
    result = convert_alibaba_pods(parse_alibaba_pods(text), options())
    assert [(j.job_id, j.duration_hours) for j in result.jobs] == [("p-1s", 1 / 3600)]
    assert dict(result.summary.dropped) == {"zero_request": 1}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("LS=prod", None),
        # Blank (spaces only): said to be empty, not read as one entry "" that is not QOS=CLASS.
        (" ", "--priority-map is empty; write QOS=CLASS pairs such as LS=production,BE=batch"),
        ("XX=a", "--priority-map: unknown qos 'XX'; the trace uses LS, Guaranteed, Burstable, BE"),
        ("ls=a", "--priority-map: unknown qos 'ls' (did you mean 'LS'?); the trace uses LS, Guaranteed, "
                 "Burstable, BE"),
        ("LS", "--priority-map entry 'LS' is not QOS=CLASS (e.g. LS=production)"),
        ("LS=a,LS=b", "--priority-map: qos 'LS' is mapped twice"),
        ("LS=a b", "--priority-map: invalid priority class name 'a b': use letters, digits, '-' and '_' (at most "
                   "63, starting with a letter or digit)"),
    ],
)
def test_parse_priority_map(text: str, message: str | None) -> None:
    if message is None:
        assert parse_priority_map(text) == {**DEFAULT_ALIBABA_PRIORITY_MAP, "LS": "prod"}
    else:
        with pytest.raises(ValueError) as info:
            parse_priority_map(text)
        assert str(info.value) == message


class _NoOffset(tzinfo):
    """A time zone that cannot say its offset: the time is as good as naive."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"start_utc": datetime(2023, 2, 15)}, "start_utc must be timezone-aware"),
        ({"start_utc": datetime(2023, 2, 15, tzinfo=_NoOffset())}, "start_utc must be timezone-aware"),
        ({"start_utc": datetime(1969, 12, 31, 23, tzinfo=timezone.utc)},
         "start_utc must be within the years 1970..9000 (got 1969)"),
        ({"start_utc": datetime(9001, 1, 1, tzinfo=timezone.utc)},
         "start_utc must be within the years 1970..9000 (got 9001)"),
        ({"checkpointable_fraction": -0.1}, "checkpointable_fraction must be within 0..1 (got -0.1)"),
        ({"checkpointable_fraction": 1.1}, "checkpointable_fraction must be within 0..1 (got 1.1)"),
        ({"deadline_fraction": -0.1}, "deadline_fraction must be within 0..1 (got -0.1)"),
        ({"deadline_fraction": 1.1}, "deadline_fraction must be within 0..1 (got 1.1)"),
        ({"checkpoint_interval_minutes": 0.99}, "checkpoint_interval_minutes must be finite and at least 1 (got 0.99)"),
        ({"checkpoint_interval_minutes": float("nan")},
         "checkpoint_interval_minutes must be finite and at least 1 (got nan)"),
        ({"pending_duration_hours": 0.0}, "pending_duration_hours must be above 0 (got 0.0)"),
        ({"pending_duration_hours": 100_000.5}, "pending_duration_hours must be above 0 (got 100000.5)"),
        ({"limit": -1}, "limit must be 0 or more (got -1)"),
        ({"window_hours": 0.0}, "window_hours must be above 0 and at most 100000 (got 0.0)"),
        ({"window_hours": 100_000.5}, "window_hours must be above 0 and at most 100000 (got 100000.5)"),
        ({"deadline_slack": (1.0, 2.0)}, "deadline_slack must be (low, high) with 1 < low <= high (got (1.0, 2.0))"),
        ({"deadline_slack": (2.0, 1.5)}, "deadline_slack must be (low, high) with 1 < low <= high (got (2.0, 1.5))"),
        ({"priority_map": {"LS": "production"}}, "priority_map has no class for qos Guaranteed, Burstable, BE"),
        ({"priority_map": {**DEFAULT_ALIBABA_PRIORITY_MAP, "LS": "a b", "BE": 3}},
         "priority_map: invalid priority class name(s) 3, a b"),
        ({"team": "a b"}, "team: invalid name 'a b'"),
    ],
)
def test_importer_options_out_of_range_are_refused_by_name(kw: dict[str, object], message: str) -> None:
    """Each option just outside what it allows (the other options are the defaults, which are fine): the error
    names the option and the value. A time zone without an offset is no time zone; NaN is not at least 1."""
    with pytest.raises(ValueError) as info:
        AlibabaOptions(**{"start_utc": T0, **kw})  # type: ignore[arg-type]
    assert str(info.value) == message


def test_importer_options_at_their_limits_are_accepted() -> None:
    """Every limit is inclusive where the message says 'at least', 'at most' or 'within', and 'above 0' takes any
    positive amount: the first and the last year, fractions 0 and 1, an interval of 1 minute, 0.001 and 100,000
    hours, a limit of 0 and a slack of (low, low) just above 1."""
    for start in (datetime(1970, 1, 1, tzinfo=timezone.utc), datetime(9000, 12, 31, 23, tzinfo=timezone.utc)):
        for fraction, hours in ((0.0, 0.001), (1.0, 100_000.0)):
            accepted = AlibabaOptions(start_utc=start, checkpointable_fraction=fraction, deadline_fraction=fraction,
                                      checkpoint_interval_minutes=1.0, pending_duration_hours=hours, limit=0,
                                      window_hours=hours, deadline_slack=(1.01, 1.01))
            assert (accepted.start_utc, accepted.window_hours) == (start, hours)


def test_bad_pod_list_reports_every_problem() -> None:
    text = PODS.splitlines()[0] + "\n" + textwrap.dedent("""\
        p1,8000,30720,0,500,,LS,Succeeded,0,10,0
        p2,8000,30720,1,1000,H800,LS,Succeeded,0,10,0
        p3,8000,30720,1,1000,,XX,Succeeded,0,10,0
        p4,8000,30720,1,1000,,LS,Pending,0,10,5
        p5,8000,30720,1,1000,,LS,Failed,0,10,
        p1,8000,30720,4,250,,LS,Done,-1,10,0
        p6,8000,30720,1,1000,,LS,Running,100,200,50
        """)
    with pytest.raises(SpecError) as info:
        parse_alibaba_pods(text, "pods.csv")
    assert [str(i) for i in info.value.issues] == [
        "pods.csv:2:17: gpu_milli: must be 0 for a pod without GPUs (got 500)",
        "pods.csv:3:22: gpu_spec: unknown GPU code 'H800'; known: A10, G2, G3, P100, T4, V100M16, V100M32",
        "pods.csv:4:23: qos: unknown qos 'XX'; allowed: LS, Guaranteed, Burstable, BE",
        "pods.csv:5:39: scheduled_time: must be empty for a Pending pod (it was never scheduled)",
        "pods.csv:6:38: scheduled_time: required value is missing (the cell is empty) for a Failed pod; only "
        "Pending pods have none",
        "pods.csv:7:1: name: duplicate pod name 'p1' (first used at line 2)",
        "pods.csv:7:17: gpu_milli: must be 1000 for a pod with 4 GPUs (only 1-GPU pods share a GPU; got 250)",
        "pods.csv:7:25: pod_phase: unknown pod_phase 'Done'; allowed: Running, Succeeded, Failed, Pending",
        "pods.csv:7:30: creation_time: must be at least 0 (got '-1')",
        "pods.csv:8:42: scheduled_time: 50 is before creation_time 100 (a truncated or edited row?)",
    ]


def test_pod_list_refuses_a_blank_line_and_a_missing_deletion_time() -> None:
    """A blank line between pods is named as such (not as a row of 1 cell); a pod that ran (Succeeded, Running)
    needs its deletion_time, its run time ends there; only a Pending pod may leave it empty (p3 is fine)."""
    header = PODS.splitlines()[0] + "\n"
    with pytest.raises(SpecError) as info:
        parse_alibaba_pods(header + "p1,8000,30720,1,1000,,LS,Succeeded,0,10,0\n"
                           "\n"
                           "p2,8000,30720,1,1000,,LS,Succeeded,0,10,0\n", "pods.csv")
    assert [str(i) for i in info.value.issues] == ["pods.csv:3:1: (root): blank line; remove it"]
    with pytest.raises(SpecError) as info:
        parse_alibaba_pods(header + textwrap.dedent("""\
            p1,8000,30720,1,1000,,LS,Succeeded,0,,0
            p2,8000,30720,1,1000,,LS,Running,0,,0
            p3,8000,30720,1,1000,,LS,Pending,0,,
            """), "pods.csv")
    assert [str(i) for i in info.value.issues] == [
        "pods.csv:2:38: deletion_time: required value is missing (the cell is empty) for a Succeeded pod",
        "pods.csv:3:36: deletion_time: required value is missing (the cell is empty) for a Running pod",
    ]


def test_pod_list_refuses_a_row_of_the_wrong_number_of_cells() -> None:
    """A row cut short (3 cells) or with a cell too many (12) under the 11-column header is named at its line with
    both counts; the other rows are read on (p-ok is fine, so these are the only problems)."""
    header = PODS.splitlines()[0] + "\n"
    with pytest.raises(SpecError) as info:
        parse_alibaba_pods(header + textwrap.dedent("""\
            p-short,8000,30720
            p-ok,8000,30720,1,1000,,LS,Succeeded,0,10,0
            p-long,8000,30720,1,1000,,LS,Succeeded,0,10,0,0
            """), "pods.csv")
    assert [str(i) for i in info.value.issues] == [
        "pods.csv:2:1: (root): the row has 3 cells; the header has 11",
        "pods.csv:4:1: (root): the row has 12 cells; the header has 11",
    ]


def test_pod_list_gpu_milli_must_agree_with_num_gpu() -> None:
    """gpu_milli is the share of each GPU: a pod with GPUs needs more than 0 of it (g1-zero with 1 GPU and g2-zero
    with 2 both give 0: the 'above 0' rule, not the 1000 one); one GPU may be shared (g1-half, 500) and a pod of 2 or
    more takes whole GPUs (g2-whole, 1000); a pod without GPUs asks for none (c-none). Only the two zeros are
    refused."""
    header = PODS.splitlines()[0] + "\n"
    with pytest.raises(SpecError) as info:
        parse_alibaba_pods(header + textwrap.dedent("""\
            g1-zero,8000,30720,1,0,,LS,Succeeded,0,10,0
            g2-zero,8000,30720,2,0,,LS,Succeeded,0,10,0
            g1-half,8000,30720,1,500,,LS,Succeeded,0,10,0
            g2-whole,8000,30720,2,1000,,LS,Succeeded,0,10,0
            c-none,8000,30720,0,0,,LS,Succeeded,0,10,0
            """), "pods.csv")
    assert [str(i) for i in info.value.issues] == [
        "pods.csv:2:22: gpu_milli: must be above 0 for a pod with GPUs (got 0)",
        "pods.csv:3:22: gpu_milli: must be above 0 for a pod with GPUs (got 0)",
    ]


def test_pod_list_upper_limits_are_inclusive() -> None:
    """The upper limits (those of a job trace: 100,000 vCPU, 1,000,000 GiB, 1024 GPUs, a whole GPU's 1000 milli):
    a pod at every limit (top) is read; one unit over any of them is refused at its cell, and the message names the
    limit."""
    header = PODS.splitlines()[0] + "\n"
    with pytest.raises(SpecError) as info:
        parse_alibaba_pods(header + textwrap.dedent("""\
            top,100000000,1024000000,1024,1000,,LS,Succeeded,0,10,0
            cpu,100000001,30720,1,1000,,LS,Succeeded,0,10,0
            mem,8000,1024000001,1,1000,,LS,Succeeded,0,10,0
            gpus,8000,30720,1025,1000,,LS,Succeeded,0,10,0
            share,8000,30720,1,1001,,LS,Succeeded,0,10,0
            """), "pods.csv")
    assert [str(i) for i in info.value.issues] == [
        "pods.csv:3:5: cpu_milli: must be at most 100000000 (got '100000001')",
        "pods.csv:4:10: memory_mib: must be at most 1024000000 (got '1024000001')",
        "pods.csv:5:17: num_gpu: must be at most 1024 (got '1025')",
        "pods.csv:6:20: gpu_milli: must be at most 1000 (got '1001')",
    ]


def test_pod_list_header_problems_are_named_at_their_column() -> None:
    """A column listed twice is named by itself at its second place; an unknown one gets the near miss (nmae is
    name) or only the list (xyz is near nothing); the multigpu50 note is only for a list with a name column and
    no creation_time, not for one that also lacks name."""
    columns = PODS.splitlines()[0]
    cases = {
        columns + ",qos,nmae\n": [
            "pods.csv:1:111: qos: column is listed twice",
            "pods.csv:1:115: (root): unknown column 'nmae' (did you mean 'name'?); expected the columns name, "
            "cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time, deletion_time, "
            "scheduled_time",
        ],
        columns.replace("creation_time,", "") + ",xyz\n": [
            "pods.csv:1:1: (root): missing column(s) creation_time (openb_pod_list_multigpu50.csv has no times or "
            "qos; use openb_pod_list_default.csv or openb_pod_list_gpuspec33.csv)",
            "pods.csv:1:97: (root): unknown column 'xyz'; expected the columns name, cpu_milli, memory_mib, num_gpu, "
            "gpu_milli, gpu_spec, qos, pod_phase, creation_time, deletion_time, scheduled_time",
        ],
        "cpu_milli,memory_mib\n1,2\n": [
            "pods.csv:1:1: (root): missing column(s) name, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, "
            "creation_time, deletion_time, scheduled_time",
        ],
    }
    for text, expected in cases.items():
        with pytest.raises(SpecError) as info:
            parse_alibaba_pods(text, "pods.csv")
        assert [str(i) for i in info.value.issues] == expected, text


def test_pod_list_without_times_is_refused() -> None:
    with pytest.raises(SpecError) as info:
        parse_alibaba_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,1000\n", "multigpu50.csv")
    assert [str(i) for i in info.value.issues] == [
        "multigpu50.csv:1:1: (root): missing column(s) gpu_spec, qos, pod_phase, creation_time, deletion_time, "
        "scheduled_time (openb_pod_list_multigpu50.csv has no times or qos; use openb_pod_list_default.csv or "
        "openb_pod_list_gpuspec33.csv)",
    ]


def test_import_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(PODS)
    assert format_job_trace(import_alibaba_2023(path, options()).jobs) == EXPECTED_JOBS_CSV


# =========================================================================== the CLI, end to end


def run_fleetctl(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "fleetctl", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_cli_import_alibaba_2023(tmp_path: Path) -> None:
    (tmp_path / "pods.csv").write_text(PODS)
    done = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", "--start", "2023-02-15T00:00:00Z",
                        "-o", "jobs.csv")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "jobs.csv").read_text() == EXPECTED_JOBS_CSV
    out = " ".join(done.stdout.split())
    for expected in ("pods.csv: 8 pods -> 4 jobs", "dropped │ 1 │ CPU-only pod", "censored │ 1 │",
                     "fractional GPU │ 1 │", "G2/G3 only │ 1 │", "G2/G3 removed │ 1 │",
                     "wrote 4 jobs to jobs.csv"):
        assert expected in out, done.stdout
    assert read_job_trace(tmp_path / "jobs.csv") == import_alibaba_2023(tmp_path / "pods.csv", options()).jobs

    seeded = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", "--start", "2023-02-15T00:00:00Z",
                          "-o", "seeded.csv", "--include-cpu", "--pending-duration-hours", "2", "--seed", "3",
                          "--checkpointable-fraction", "1", "--checkpoint-interval-minutes", "15",
                          "--deadline-fraction", "1", "--priority-map", "BE=low", "--limit", "5")
    assert seeded.returncode == 0, seeded.stderr
    expected = convert_alibaba_pods(parse_alibaba_pods(PODS), options(
        include_cpu=True, pending_duration_hours=2.0, seed=3, checkpointable_fraction=1.0,
        checkpoint_interval_minutes=15.0, deadline_fraction=1.0, priority_map=parse_priority_map("BE=low"),
        limit=5)).jobs
    assert read_job_trace(tmp_path / "seeded.csv") == expected and len(expected) == 5


def test_cli_import_to_stdout(tmp_path: Path) -> None:
    """``-o -`` wrote a file named '-'; now the CSV is stdout, the summary stderr."""
    (tmp_path / "pods.csv").write_text(PODS)
    done = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", "--start", "2023-02-15T00:00:00Z",
                        "-o", "-")
    assert done.returncode == 0, done.stderr
    assert done.stdout == EXPECTED_JOBS_CSV and not (tmp_path / "-").exists()
    assert "wrote 4 jobs to stdout" in done.stderr and "pods.csv: 8 pods -> 4 jobs" in done.stderr


def test_cli_import_errors(tmp_path: Path) -> None:
    (tmp_path / "pods.csv").write_text(PODS.replace("p-run,4000", "p-run,4k"))
    bad = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", "--start", "2023-02-15T00:00:00Z",
                       "-o", "jobs.csv")
    assert bad.returncode == 2
    assert "pods.csv:3:7: cpu_milli: must be a whole number (got '4k')" in bad.stderr
    assert "nothing was written" in bad.stderr and not (tmp_path / "jobs.csv").exists()

    naive = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", "--start", "2023-02-15",
                         "-o", "jobs.csv")
    assert naive.returncode == 2
    assert "--start: timestamp '2023-02-15' has no time zone" in " ".join(naive.stderr.split())
    far = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", "--start", "9999-01-01T00:00:00Z",
                       "-o", "jobs.csv")
    assert far.returncode == 2 and not (tmp_path / "jobs.csv").exists()
    assert "--start must be within the years 1970..9000" in " ".join(far.stderr.split())
    endless = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", "--start", "2023-02-15T00:00:00Z",
                           "--window-hours", "inf", "-o", "jobs.csv")  # was an OverflowError traceback
    assert endless.returncode == 2 and not (tmp_path / "jobs.csv").exists()
    assert "--window-hours must be above 0 and at most 100000 (got inf)" in " ".join(endless.stderr.split())
    often = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", "--start", "2023-02-15T00:00:00Z",
                         "--checkpointable-fraction", "1", "--checkpoint-interval-minutes", "0.5", "-o", "jobs.csv")
    assert often.returncode == 2 and not (tmp_path / "jobs.csv").exists()
    assert "--checkpoint-interval-minutes must be a finite number of at least 1 (got 0.5)" in " ".join(
        often.stderr.split())


@pytest.mark.parametrize("output", ["jobs.csv", "-"])
@pytest.mark.parametrize("interval", ["inf", "1e999"])
def test_cli_import_refuses_an_endless_checkpoint_interval(tmp_path: Path, output: str, interval: str) -> None:
    """--checkpoint-interval-minutes inf passed the `>= 1` check, then the job
    trace writer refused every row with a ValueError: a traceback, exit 1."""
    (tmp_path / "pods.csv").write_text(PODS)
    done = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", "--start", "2023-02-15T00:00:00Z",
                        "--checkpointable-fraction", "1", "--checkpoint-interval-minutes", interval, "-o", output)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert " ".join(done.stderr.split()) == \
        "Error: --checkpoint-interval-minutes must be a finite number of at least 1 (got inf)"
    assert done.stdout == "" and sorted(p.name for p in tmp_path.iterdir()) == ["pods.csv"]
    with pytest.raises(ValueError, match="checkpoint_interval_minutes must be finite"):
        options(checkpointable_fraction=1.0, checkpoint_interval_minutes=float("inf"))


def test_cli_import_refuses_to_write_over_the_file_it_reads(tmp_path: Path) -> None:
    """`-o pods.csv` (or a link to it) replaced the raw trace with the converted one."""
    (tmp_path / "pods.csv").write_text(PODS)
    os.symlink(tmp_path / "pods.csv", tmp_path / "link.csv")
    for output in ("pods.csv", "./pods.csv", "link.csv"):
        done = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", "--start",
                            "2023-02-15T00:00:00Z", "-o", output)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert " ".join(done.stderr.split()) == (f"Error: -o {output}: is the file this command reads (pods.csv); "
                                                 "writing it would replace it. Give another output file; nothing "
                                                 "was written")
        assert (tmp_path / "pods.csv").read_text() == PODS
    helios = tmp_path / "seq.csv"
    helios.write_text("time,running_gpu_num,pending_gpu_num\n2020-05-01 08:00:00,5,3\n")
    done = run_fleetctl(tmp_path, "trace", "import", "helios-sequence", "seq.csv", "-o", "seq.csv")
    assert done.returncode == 2 and "is the file this command reads (seq.csv)" in done.stderr, done.stderr
    assert helios.read_text().startswith("time,running_gpu_num")


@pytest.mark.parametrize("output", ["jobs.csv", "-"])
def test_import_output_a_writer_refuses_is_one_error_line(tmp_path: Path, output: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The writers raise ValueError for rows the format cannot hold; the
    importers' output step caught only OSError (a traceback, exit 1)."""
    import typer

    from fleetctl.cli.trace import _write_output

    def refuse() -> str:
        raise ValueError("cannot write the job trace:\njob 'a': checkpoint_interval_minutes: bad\n"
                         "job 'b': checkpoint_interval_minutes: bad")

    with pytest.raises(typer.Exit) as exited:
        _write_output(tmp_path / output if output != "-" else Path("-"), refuse, refuse)
    assert exited.value.exit_code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and list(tmp_path.iterdir()) == []
    err = " ".join(captured.err.split())
    assert err.startswith("Error: cannot write ") and err.endswith(
        ": job 'a': checkpoint_interval_minutes: bad (and 1 more); nothing was written"), err


@GARBAGE_SETTINGS
@given(text=mutated(PODS) | st.text(max_size=200), include_cpu=st.booleans())
def test_garbage_pod_lists_give_jobs_or_spec_error(text: str, include_cpu: bool) -> None:
    try:
        pods = parse_alibaba_pods(text, "pods.csv")
    except SpecError as exc:
        assert all(i.file == "pods.csv" and i.line >= 1 and i.column >= 1 for i in exc.issues)
        return
    result = convert_alibaba_pods(pods, options(include_cpu=include_cpu, pending_duration_hours=1.0,
                                                deadline_fraction=0.5, checkpointable_fraction=0.5))
    assert parse_job_trace(format_job_trace(result.jobs)) == result.jobs


def test_cli_import_writes_whole_files_through_symlinks_and_refuses_other_targets(tmp_path: Path) -> None:
    (tmp_path / "pods.csv").write_text(PODS)
    start = ("--start", "2023-02-15T00:00:00Z")
    (tmp_path / "real.csv").write_text("old\n")
    (tmp_path / "link.csv").symlink_to("real.csv")
    done = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", *start, "-o", "link.csv")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "link.csv").is_symlink() and (tmp_path / "real.csv").read_text() == EXPECTED_JOBS_CSV
    (tmp_path / "adir").mkdir()
    refused = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", *start, "-o", "adir")
    assert refused.returncode == 2 and "-o adir: is a directory" in refused.stderr, refused.stderr
    assert list((tmp_path / "adir").iterdir()) == []
    # Path drops a trailing '/': this wrote a file named newdir
    slash = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", *start, "-o", "newdir/")
    assert slash.returncode == 2 and "-o newdir/: names a directory" in slash.stderr, slash.stderr
    assert "e.g. newdir/jobs.csv" in slash.stderr and not (tmp_path / "newdir").exists()
    nested = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", *start, "-o", "new/dir/jobs.csv")
    assert nested.returncode == 0 and (tmp_path / "new" / "dir" / "jobs.csv").read_text() == EXPECTED_JOBS_CSV
    empty = run_fleetctl(tmp_path, "trace", "import", "alibaba-2023", "pods.csv", *start, "--limit", "0",
                         "-o", "none.csv")
    assert empty.returncode == 2 and "no job is left to write" in empty.stderr, empty.stderr
    assert not (tmp_path / "none.csv").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary file left
