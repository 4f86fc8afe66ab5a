"""`fleetctl jobs submit` after `fleetctl prune --finished-older-than-days`, end to
end on SQLite and on a real PostgreSQL: a pruned job's id is never reused."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from fleetctl.jobspec import load_jobs
from fleetctl.model import JobState
from fleetctl.store import Store

REPO = Path(__file__).resolve().parents[2]
JOB = ("id: nightly-eval\nteam: ml-research\npriority: batch\ngpus_per_worker: 1\nvcpus_per_worker: 4\n"
       "memory_gib_per_worker: 14\nduration_hours: 3\ndeadline_utc: {deadline}\n")


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    url = request.getfixturevalue("postgres_url")
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # a clean schema per test
        conn.execute(sa.text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    return url


def test_a_job_resubmitted_after_prune_deleted_it_is_a_no_op_and_a_changed_one_is_refused(tmp_path, url):
    """A cron job re-submits the same file every day: after the finished job is
    pruned, it is not run again (exit 0, the no-op's very words; its deadline,
    passed since, is not held against it), and the file changed under the same
    id is refused naming the field, as before the prune."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    env["COLUMNS"] = "200"

    def fleetctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fleetctl", *args, "--state", url,
                               "--policy", str(REPO / "policies" / "example.yaml")],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    then = datetime.now(timezone.utc) - timedelta(days=40)
    spec = tmp_path / "nightly.yaml"
    spec.write_text(JOB.format(deadline=(then + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")))
    store = Store(url)
    try:
        assert store.add_jobs(load_jobs(spec, submitted_at_utc=then), then) == (1, 0)  # submitted 40 days ago
        (submitted,) = store.jobs()
        store.put_job(replace(submitted, state=JobState.SUCCEEDED), then + timedelta(hours=3))
        before = fleetctl("jobs", "submit", str(spec))
        assert before.returncode == 0 and not before.stderr, before.stderr
        assert "0 job(s) submitted, 1 already in the store unchanged\n1 of them finished and will not run again " \
            "(succeeded: nightly-eval); to run a job again, give it a new id" in before.stdout, before.stdout

        pruned = fleetctl("prune", "--finished-older-than-days", "30")
        assert pruned.returncode == 0 and "1 finished job," in pruned.stdout, pruned.stderr
        assert store.jobs() == ()
        again = fleetctl("jobs", "submit", str(spec))
        assert (again.returncode, again.stdout, again.stderr) == (0, before.stdout, "")
        assert store.jobs() == ()  # not queued again

        spec.write_text(spec.read_text().replace("duration_hours: 3", "duration_hours: 4"))
        refused = fleetctl("jobs", "submit", str(spec))
        assert refused.returncode == 2, refused.stderr
        assert f"{spec}:7:17: duration_hours: job 'nightly-eval' already exists (succeeded, pruned) with a " \
            "different duration_hours: 3 -> 4" in refused.stderr, refused.stderr
        assert "no job was submitted (a job id is never reused, even after the job finished or was cancelled, " \
            "and after `fleetctl prune --finished-older-than-days` deleted it: give the changed job a new id)" \
            in " ".join(refused.stderr.split()), refused.stderr
        assert store.jobs() == ()
    finally:
        store.close()


def test_explain_and_cancel_name_a_pruned_job_as_finished_and_pruned(tmp_path, url):
    """`explain` and `jobs cancel` read a pruned job's tombstone: the job
    finished (its final state, when) and was pruned, as a finished job still
    stored is (exit 0, left as it is); an id never stored stays unknown (exit 2)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    env["COLUMNS"] = "200"

    def fleetctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fleetctl", *args, "--state", url],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    policy = str(REPO / "policies" / "example.yaml")
    then = datetime(2024, 3, 1, tzinfo=timezone.utc)
    spec = tmp_path / "nightly.yaml"
    spec.write_text(JOB.format(deadline="2024-03-02T00:00:00Z"))
    store = Store(url)
    try:
        assert store.add_jobs(load_jobs(spec, submitted_at_utc=then), then) == (1, 0)
        (submitted,) = store.jobs()
        store.put_job(replace(submitted, state=JobState.FAILED), then + timedelta(hours=3))
        assert store.prune_finished(then + timedelta(days=30))["jobs"] == 1
    finally:
        store.close()

    explained = fleetctl("explain", "nightly-eval", "--policy", policy)
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout == (
        "job nightly-eval: failed, pruned, team ml-research, priority batch, 1 x 1 GPU (any model)\n"
        "  finished 2024-03-01T03:00:00Z; deleted since by `fleetctl prune --finished-older-than-days`, which keeps "
        "its id, final state and spec (not its nodes or reclaims)\n"
        "  nothing to plan: the job has failed; the planner only places queued, bound and running jobs\n")
    unknown = fleetctl("explain", "nightly-evil", "--policy", policy)
    assert unknown.returncode == 2 and "no job 'nightly-evil' in the store" in unknown.stderr, unknown.stderr

    refused = fleetctl("jobs", "cancel", "nightly-eval", "nightly-evil")
    assert refused.returncode == 2, refused.stderr
    assert "no such job: nightly-evil; nothing was cancelled" in refused.stderr, refused.stderr
    cancelled = fleetctl("jobs", "cancel", "nightly-eval")
    assert (cancelled.returncode, cancelled.stderr) == (0, ""), cancelled.stderr
    assert cancelled.stdout == "nightly-eval: already failed (finished 2024-03-01T03:00:00Z, pruned), left as it is\n"
