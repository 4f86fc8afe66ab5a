"""`fleetctl jobs list --team` and `fleetctl jobs cancel --team/--only/--dry-run` (in-process, on a store built here)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.model import JobState
from fleetctl.store import Store
from tests.builders import T0, job

runner = CliRunner()


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    try:
        store.add_jobs([job("a-queued", team="a"), job("a-queued-2", team="a"),
                        job("a-running", team="a", state=JobState.RUNNING, node_ids=("n1",)),
                        job("a-done", team="a", state=JobState.SUCCEEDED),
                        job("b-queued", team="b"), job("b-running", team="b", state=JobState.RUNNING,
                                                       node_ids=("n2",))], T0)
    finally:
        store.close()
    return url


def _states(url: str) -> dict[str, str]:
    store = Store(url)
    try:
        return {j.job_id: j.state.value for j in store.jobs()}
    finally:
        store.close()


def _run(url: str, *args: str):
    return runner.invoke(app, [*args, "--state", url])


def test_list_shows_one_teams_jobs(url):
    listed = _run(url, "jobs", "list", "--team", "a", "--format", "json")
    assert listed.exit_code == 0, listed.output
    assert "a-queued" in listed.output and "b-queued" not in listed.output and "a-done" not in listed.output
    both = _run(url, "jobs", "list", "--team", "a", "--team", "b", "--all", "--only", "running", "--format", "json")
    assert both.exit_code == 0 and "a-running" in both.output and "b-running" in both.output
    assert "a-queued" not in both.output, both.output


def test_cancel_selects_by_team_and_state_and_leaves_the_rest(url):
    before = _states(url)
    dry = _run(url, "jobs", "cancel", "--team", "a", "--only", "queued", "--dry-run")
    assert dry.exit_code == 0 and "2 jobs would be cancelled; nothing was changed" in dry.output, dry.output
    assert _states(url) == before
    done = _run(url, "jobs", "cancel", "--team", "a", "--only", "queued", "--reason", "over quota")
    assert done.exit_code == 0, done.output
    assert "a-queued: cancelled" in done.output and "a-queued-2: cancelled" in done.output
    assert _states(url) == {**before, "a-queued": "cancelled", "a-queued-2": "cancelled"}
    team = _run(url, "jobs", "cancel", "--team", "a")  # every unfinished job of the team: the running one too
    assert team.exit_code == 0 and "a-running: cancel requested" in team.output, team.output
    assert "a-done" not in team.output and "b-" not in team.output
    state = _run(url, "jobs", "cancel", "--only", "queued")  # every team's queued jobs
    assert state.exit_code == 0 and "b-queued: cancelled" in state.output and "b-running" not in state.output
    none = _run(url, "jobs", "cancel", "--team", "c")
    assert none.exit_code == 0 and "no unfinished job matches --team c; nothing to cancel" in none.output


@pytest.mark.parametrize("args, words", [
    ((), "name the jobs to cancel by id, or select them with --team and/or --only"),
    (("a-queued", "--team", "a"), "name jobs by id, or select them with --team/--only, not both"),
    (("--only", "succeeded"), "--only succeeded: a finished job cannot be cancelled"),
    (("a-queued", "nope", "--dry-run"), "no such job: nope"),
    # bytes that are not UTF-8 (a shell's $'\xff') reach Python as lone surrogates: a traceback from the store
    (("a-queued", "x\udcff"), "job id 'x\\xff' is not UTF-8 text (byte 0xff at character 2)"),
    (("a-queued", "--reason", "r\udcff"), "--reason 'r\\xff' is not UTF-8 text"),
], ids=["nothing", "both", "finished-state", "dry-run-unknown", "id-not-utf8", "reason-not-utf8"])
def test_a_cancel_that_names_nothing_usable_changes_nothing(url, args, words):
    before = _states(url)
    refused = _run(url, "jobs", "cancel", *args)
    assert refused.exit_code == 2 and words in " ".join(refused.output.split()), refused.output
    assert _states(url) == before


def test_a_damaged_store_exits_1_from_cancel_as_from_list(url, tmp_path):
    """Exit 2 is for an unusable command-line value (an unknown id); a damaged row is the store's (README)."""
    import os
    import sqlite3
    import subprocess
    import sys

    with sqlite3.connect(tmp_path / "state.db") as conn:
        conn.execute("UPDATE jobs SET spec = '{\"bad\": 1}' WHERE job_id = 'a-queued-2'")
    conn.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    for args in (("list", "--team", "a"), ("cancel", "--team", "a"), ("cancel", "--team", "a", "--dry-run"),
                 ("cancel", "a-queued-2")):
        shown = subprocess.run([sys.executable, "-m", "fleetctl", "jobs", *args, "--state", url], cwd=tmp_path,
                               env=env, capture_output=True, text=True, timeout=120)
        assert shown.returncode == 1, (args, shown.returncode, shown.stderr)
        assert "Error: the state store is damaged: job 'a-queued-2' does not decode" in shown.stderr


def test_teams_and_kinds_may_be_comma_separated_as_report_by_is(url):
    """`--team a,b` matched no team (team names hold no comma) and `jobs cancel` then said "nothing to
    cancel", exit 0: a cancel that quietly did nothing. Now it is `--team a --team b`, as `report --by
    team,provider` reads its keys; `events --kind` too."""
    listed = _run(url, "jobs", "list", "--team", "a,b", "--only", "queued", "--format", "json")
    assert listed.exit_code == 0 and "a-queued" in listed.output and "b-queued" in listed.output, listed.output
    dry = _run(url, "jobs", "cancel", "--team", "a, b", "--only", "queued", "--dry-run")
    assert dry.exit_code == 0 and "3 jobs would be cancelled" in dry.output, dry.output
    none = _run(url, "jobs", "cancel", "--team", "c,d", "--only", "queued")
    assert none.exit_code == 0 and "no unfinished job matches --team c,d --only queued" in none.output, none.output
    store = Store(url)
    try:
        store.record("bind", T0, "a-queued", nodes=["n1"], reason="r")
        store.record("launch", T0, "offer-1", nodes=["n1"], reason="r")
        store.record("terminate", T0, "n1", reason="idle")
    finally:
        store.close()
    shown = _run(url, "events", "--kind", "bind,launch", "--since", "2000-01-01T00:00:00Z", "--format", "json")
    assert shown.exit_code == 0, shown.output
    assert '"kind": "terminate"' not in shown.output and '"kind": "bind"' in shown.output \
        and '"kind": "launch"' in shown.output, shown.output
    refused = _run(url, "events", "--kind", "bind,nope")
    assert refused.exit_code == 2 and "--kind nope: no such kind" in refused.output, refused.output
