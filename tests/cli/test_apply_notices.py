"""`fleetctl apply` handles reclaim notices while it holds the controller
lease: no daemon or cron run can then, and Terraform's apply alone can take
many minutes. A notice handled part-way stops the plan, which was made before
it (it may bind a job to the node just cordoned)."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.store import Store
from providers.sim import SimProvider

REPO = Path(__file__).resolve().parents[2]

MORE_JOBS = """\
jobs:
  - id: late-sweep
    team: ml-product
    priority: batch
    gpus_per_worker: 8
    gpu_models: [T4]
    vcpus_per_worker: 32
    memory_gib_per_worker: 128
    duration_hours: 4
"""


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    example = tmp_path / "policies" / "example.yaml"  # a second plan buys again at once
    example.write_text(example.read_text().replace("scale_up_cooldown_seconds: 60", "scale_up_cooldown_seconds: 0"))
    monkeypatch.chdir(tmp_path)
    for name in [k for k in __import__("os").environ if k.startswith("FLEETCTL_")]:
        monkeypatch.delenv(name)
    return {"FLEETCTL_STATE": f"sqlite:///{tmp_path / 'state.db'}", "FLEETCTL_SIM_LAUNCH_DELAY_SECONDS": "0",
            "COLUMNS": "200"}


def run(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.output


def test_a_notice_that_arrives_during_apply_is_handled_and_stops_the_stale_plan(
        env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(env, "jobs", "submit", str(REPO / "examples" / "jobs.yaml"))[0] == 0
    for _ in range(2):
        assert run(env, "reconcile", "--once")[0] == 0
    (tmp_path / "more.yaml").write_text(MORE_JOBS)
    assert run(env, "jobs", "submit", "more.yaml")[0] == 0
    code, out = run(env, "plan", "-out", "p.json")
    assert code == 0 and "+ launch" in out, out

    store = Store(env["FLEETCTL_STATE"])
    try:
        nodes_before = {n.node_id for n in store.nodes()}
        busy = {n for j in store.jobs(active_only=True) for n in j.node_ids}
        node = next(n for n in store.nodes() if n.offer.market.value == "spot" and n.node_id in busy)
        # Posted after the plan was made: the notice arrives while apply runs.
        SimProvider(store).reclaim(node.node_id, datetime.now(timezone.utc))
    finally:
        store.close()

    # Every safe point checks (apply checks every few seconds; the sandbox's apply takes less than that)
    monkeypatch.setattr("fleetctl.controller.reconcile.ONCE_NOTICE_CHECK_SECONDS", 0.0)
    code, out = run(env, "apply", "p.json")
    text = " ".join(out.split())
    assert code == 1, out
    assert "reclaim notices were handled before the launch of" in text, out
    assert "no action of it was carried out" in text and "Run `fleetctl plan` again" in text, out
    assert "While applying, 1 reclaim notice handled:" in text, out

    store = Store(env["FLEETCTL_STATE"])
    try:
        assert not store.interruptions(unhandled_only=True)
        cordoned = next(iter(store.nodes(include_gone=True, node_ids=[node.node_id])))
        assert cordoned.state.value in ("cordoned", "draining", "gone"), cordoned.state
        assert {n.node_id for n in store.nodes()} <= nodes_before  # nothing of the stale plan was launched
        assert not any(node.node_id in j.node_ids for j in store.jobs(active_only=True))
    finally:
        store.close()
    events = json.loads(run(env, "events", "--kind", "interruption", "--format", "json")[1])["events"]
    assert [e["subject"] for e in events] == [node.node_id]

    # Planned again from the fleet as it is, the queue is placed.
    code, out = run(env, "apply", "-auto-approve")
    assert code == 0 and "Apply complete!" in out, out


def test_without_a_notice_apply_carries_out_the_whole_plan(env: dict[str, str], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The check at every safe point alone stops nothing."""
    monkeypatch.setattr("fleetctl.controller.reconcile.ONCE_NOTICE_CHECK_SECONDS", 0.0)
    assert run(env, "jobs", "submit", str(REPO / "examples" / "jobs.yaml"))[0] == 0
    assert run(env, "plan", "-out", "p.json")[0] == 0
    code, out = run(env, "apply", "p.json")
    assert code == 0 and "Apply complete!" in out and "While applying" not in out, out
