"""fleetctl as cron, CI runners, containers and supervisors start it: standard streams closed,
stdout that cannot encode every character, colour forced onto a pipe. Each runs the real
console entry point in a child process (``python -m fleetctl``), as those environments do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from fleetctl.store import Store
from tests.builders import T0, job

REPO = Path(__file__).resolve().parents[2]


def run(cwd: Path, *args: str, redirect: str = "", **env: str) -> subprocess.CompletedProcess:
    """``fleetctl ARGS`` in ``cwd`` with ``env`` added (FLEETCTL_* of the caller dropped), through
    ``sh -c 'exec ... REDIRECT'``: ``<&-`` or ``>&-`` starts it with that stream closed."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    command = ["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, "-m", "fleetctl", *args]
    return subprocess.run(command, cwd=cwd, env={**base, "FLEETCTL_SIM_LAUNCH_DELAY_SECONDS": "0", **env},
                          capture_output=True, text=True, errors="surrogateescape", timeout=120)


def states(cwd: Path) -> dict[str, str]:
    store = Store(f"sqlite:///{cwd / '.fleetctl' / 'state.db'}")
    try:
        return {j.job_id: j.state.value for j in store.jobs()}
    finally:
        store.close()


@pytest.fixture
def workdir(tmp_path):
    """The example policy and a store (the default one, under the working directory) with two queued jobs."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "example.yaml").write_bytes((REPO / "policies" / "example.yaml").read_bytes())
    (tmp_path / ".fleetctl").mkdir()
    store = Store(f"sqlite:///{tmp_path / '.fleetctl' / 'state.db'}")
    try:
        store.add_jobs([job("a", team="ml-research"), job("b", team="ml-product")], T0)
    finally:
        store.close()
    return tmp_path


def test_apply_with_stdin_closed_refuses_as_with_any_stdin_that_is_not_a_terminal(workdir):
    result = run(workdir, "apply", redirect="<&-")
    assert result.returncode == 1, result.stderr
    assert "Error: refusing to apply without confirmation: stdin is not a terminal; pass -auto-approve" in result.stderr
    assert "Traceback" not in result.stderr
    assert states(workdir) == {"a": "queued", "b": "queued"}


@pytest.mark.parametrize("args", [("status",), ("plan",), ("docs", "reasons")], ids=["status", "plan", "docs"])
def test_a_command_with_stdout_closed_ends_as_it_would_have_with_its_output_read(workdir, args):
    result = run(workdir, *args, redirect=">&-")
    assert (result.returncode, result.stderr) == (0, "")


def test_a_change_made_with_stdout_closed_exits_0(workdir):
    """The cancel was made; it must not read as failed (it exited 1 with a traceback after cancelling)."""
    result = run(workdir, "jobs", "cancel", "a", redirect=">&-")
    assert (result.returncode, result.stderr) == (0, "")
    assert states(workdir) == {"a": "cancelled", "b": "queued"}


# Stdout that cannot encode every character: an ASCII locale with Python's UTF-8 mode off (its stdout
# writes undecodable input bytes back as they came), an encoding forced by PYTHONIOENCODING.
NOT_UTF8 = [{"LC_ALL": "C", "PYTHONUTF8": "0"}, {"PYTHONIOENCODING": "ascii"}, {"PYTHONIOENCODING": "latin-1"}]
NOT_UTF8_IDS = ["C-locale", "ascii", "latin-1"]


@pytest.mark.parametrize("env", NOT_UTF8, ids=NOT_UTF8_IDS)
def test_a_page_with_a_character_stdout_cannot_encode_shows_its_ascii_stand_in(tmp_path, env):
    result = run(tmp_path, "docs", "reasons", **env)
    assert (result.returncode, result.stderr) == (0, "")
    page = (REPO / "docs" / "reasons.md").read_text(encoding="utf-8")
    assert "\u2014" in page  # what made it fail
    assert result.stdout == page.replace("\u2014", "-")


@pytest.mark.parametrize("env", NOT_UTF8, ids=NOT_UTF8_IDS)
def test_the_audit_log_shows_a_cancel_reason_stdout_cannot_encode(workdir, env):
    """A reason given where stdout is UTF-8 (the daemon's host, a colleague's laptop) and read where it is not."""
    store = Store(f"sqlite:///{workdir / '.fleetctl' / 'state.db'}")
    try:
        store.request_cancel(["a"], T0, "Umzug \u2013 weil \u2713")
    finally:
        store.close()
    result = run(workdir, "events", "--kind", "cancel_requested", "--since", "2000-01-01", **env)
    assert (result.returncode, result.stderr) == (0, "")
    assert "reason=Umzug - weil \\u2713" in result.stdout  # a dash has a stand-in, a check mark is escaped


def test_a_table_cut_to_a_narrow_terminal_on_an_ascii_stdout_keeps_its_columns(workdir):
    """rich marks a cut cell with U+2026, which an ASCII stdout cannot encode (COLUMNS: a narrow
    terminal). Escaped as \\u2026 it took six cells for one and pushed the columns out of line;
    it is written as "." now."""
    result = run(workdir, "jobs", "list", COLUMNS="40", PYTHONIOENCODING="ascii")
    assert (result.returncode, result.stderr) == (0, "")
    table = [line for line in result.stdout.splitlines() if line[:1] in "|+"]
    assert len(table) > 3 and "\\u" not in result.stdout and "." in "".join(table), result.stdout
    assert len({len(line) for line in table if line.startswith("|")}) == 1, result.stdout
    bars = {tuple(i for i, c in enumerate(line) if c in "|+") for line in table if line.startswith("|")}
    assert len(bars) == 1, result.stdout  # every row's column separators at the same places


def test_a_file_name_that_is_not_utf8_is_written_back_as_given(tmp_path):
    """Undecodable bytes of an argument come back out unchanged (not as an escape of their surrogates)."""
    name = os.fsdecode(b"p\xff.yaml")
    result = run(tmp_path, "policy", "init", "-o", name, LC_ALL="C", PYTHONUTF8="0")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / name).is_file() and f"wrote {name};" in result.stdout


@pytest.mark.parametrize("args", [("catalog", "--gpu", "H100-80GB", "--format", "json"),
                                  ("jobs", "list", "--format", "json"), ("status", "--format", "json")],
                         ids=["catalog", "jobs-list", "status"])
def test_json_into_a_pipe_is_plain_json_with_colour_forced(workdir, args):
    """FORCE_COLOR (CI runners set it for coloured logs) colours tables, never JSON a script reads."""
    plain = run(workdir, *args)
    forced = run(workdir, *args, FORCE_COLOR="1")
    assert (forced.returncode, forced.stderr) == (0, "")
    assert forced.stdout == plain.stdout and json.loads(forced.stdout)


@pytest.mark.parametrize("command, code", [(("jobs", "submit", "jobs.yaml"), 2), (("plan",), 1)],
                         ids=["submit", "plan"])
def test_a_store_url_naming_a_directory_says_so(workdir, command, code):
    """FLEETCTL_STATE set to the directory meant to hold the store: SQLite said only "unable to open
    database file" (exit 1 for every command)."""
    (workdir / "jobs.yaml").write_text("jobs:\n  - {id: c, team: ml-research, priority: batch, gpus_per_worker: 1, "
                                       "vcpus_per_worker: 4, memory_gib_per_worker: 16, duration_hours: 1}\n")
    (workdir / "store").mkdir()
    result = run(workdir, *command, FLEETCTL_STATE=f"sqlite:///{workdir / 'store'}")
    assert result.returncode == code, result.stderr
    assert (f"{workdir / 'store'} is a directory; give the path of the SQLite file, e.g. "
            f"sqlite:///{workdir / 'store' / 'state.db'}") in " ".join(result.stderr.split())
    assert list((workdir / "store").iterdir()) == []


def test_a_store_url_with_a_tilde_gives_the_full_path_to_use(workdir, tmp_path_factory):
    """~ in FLEETCTL_STATE (a systemd unit, a Kubernetes env value: no shell expands it) read as a
    directory named "~" that did not exist, "a typo?"; the file path given quoted ('~/state.db')
    was spelled out as a URL under the working directory."""
    home = tmp_path_factory.mktemp("home")
    in_url = run(workdir, "jobs", "list", FLEETCTL_STATE="sqlite:///~/state.db", HOME=str(home))
    assert in_url.returncode == 2, in_url.stderr
    assert f"~ is not expanded there (nothing was created); give the full path: sqlite:///{home / 'state.db'}" \
        in " ".join(in_url.stderr.split())
    quoted = run(workdir, "jobs", "list", "--state", "~/state.db", HOME=str(home))
    assert quoted.returncode == 2, quoted.stderr
    assert f"for the SQLite file ~/state.db: --state sqlite:///{home / 'state.db'}" in " ".join(quoted.stderr.split())
    assert list(home.iterdir()) == [] and not (workdir / "~").exists()
    for value, words in (("sqlite:///~no-such-user-x/state.db", "~ is not expanded there (nothing was created); "
                                                                  "give the full path\n"),
                         ("~no-such-user-x/state.db", "--state sqlite:///" + str(workdir / "~no-such-user-x"))):
        unknown = run(workdir, "jobs", "list", "--state", value)  # no such user: no home to spell out
        assert unknown.returncode == 2 and words in unknown.stderr, unknown.stderr  # was a RuntimeError traceback


@pytest.mark.parametrize("env", [{}, {"LC_ALL": "C", "PYTHONUTF8": "0"}], ids=["default", "C-locale"])
def test_a_utf8_cancel_reason_is_recorded_as_given_whatever_the_locale(workdir, env):
    """An ASCII locale carries the UTF-8 bytes of an argument as lone surrogates: the reason was
    refused as "not UTF-8 text (byte 0xe2 ...)", though it is UTF-8, and nothing was cancelled."""
    reason = "Umzug \u2013 weil \u2713"
    cancelled = run(workdir, "jobs", "cancel", "a", "--reason", reason, **env)
    assert (cancelled.returncode, cancelled.stderr) == (0, "")
    log = json.loads(run(workdir, "events", "--for", "a", "--since", "2000-01-01", "--format", "json").stdout)
    assert [e["payload"].get("reason") for e in log["events"]] == [reason]


def test_forecast_trains_with_its_spinner_off_stdout_with_colour_forced(tmp_path):
    """With FORCE_COLOR (rich then animates as on a terminal) the training spinner went to stdout, so
    `fleetctl forecast train ... > train.log` held its frames and cursor codes before the result."""
    start = datetime(2020, 5, 18, tzinfo=timezone.utc)
    rows = [f"{(start + timedelta(minutes=10 * i)).strftime('%Y-%m-%dT%H:%M:%SZ')},V100-32GB,{40 + i % 7 + i % 24}"
            for i in range(250)]  # 41.5 hours: training needs 36
    (tmp_path / "series.csv").write_text("time_utc,gpu_model,gpus\n" + "\n".join(rows) + "\n")
    result = run(tmp_path, "forecast", "train", "demand", "--series", "series.csv", "-o", "model", "--horizons", "15m",
                 FORCE_COLOR="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("saved model: 1 series") and "\x1b" not in result.stdout, repr(result.stdout[:200])


def test_a_working_directory_removed_under_the_command_is_named_as_the_reason(tmp_path):
    """A cron line or a shell left in a release directory a deploy has since replaced: the default
    store's path needs the working directory, and the error said only "No such file or directory"."""
    gone = tmp_path / "release"
    gone.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    result = subprocess.run(["sh", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh", str(gone),
                             sys.executable, "-m", "fleetctl", "jobs", "list"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "Error: the working directory no longer exists" in result.stderr and "Traceback" not in result.stderr
    assert "pass --state / set FLEETCTL_STATE" in " ".join(result.stderr.split())
