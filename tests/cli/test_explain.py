"""`fleetctl explain JOB` on jobs the planner no longer places (in-process, on a store built here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.model import JobState
from fleetctl.store import Store
from tests.builders import T0, job

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.mark.parametrize("state, words", [
    (JobState.SUCCEEDED, "nothing to plan: the job has succeeded;"),
    (JobState.FAILED, "nothing to plan: the job has failed;"),
    (JobState.CANCELLED, "nothing to plan: the job is cancelled;"),
], ids=["succeeded", "failed", "cancelled"])
def test_a_finished_job_reads_as_finished(state, words, tmp_path, monkeypatch):
    """It said "the job is succeeded" and "now on: NODE" for a job that had ended."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    try:
        store.add_jobs([job("done-1", team="ml-research", state=state, node_ids=("sim-aws-0123456789",))], T0)
    finally:
        store.close()
    policy = str(REPO / "policies" / "example.yaml")
    result = runner.invoke(app, ["explain", "done-1", "--state", url, "--policy", policy])
    assert result.exit_code == 0, result.output
    assert words in result.output
    assert "now on:" not in result.output
    assert "  ran on: sim-aws-0123456789" in result.output
