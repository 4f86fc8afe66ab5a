"""`fleetctl report` end to end: real reconcile passes on the sandbox with a virtual clock write the
store, the real entry point reads it; and its refusals of bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.codec import dt_to_str
from fleetctl.controller.reconcile import tick
from fleetctl.controller.runtime import SimRuntime
from fleetctl.model import JobState, Market
from fleetctl.store import Store
from providers.sim import SimProvider
from tests.builders import T0, job, offer, policy

SPOT = offer("a8", gpus=8, price=8.0, zone="z1")
OD = offer("a8", gpus=8, price=20.0, zone="z1", market=Market.ON_DEMAND)
MIN = timedelta(minutes=1)


def fleetctl(cwd, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "fleetctl", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def history(tmp_path):
    """Two teams on the sandbox: a's 1-hour job runs and completes, its node is terminated idle; b's
    4-hour job is reclaimed at 2 h, requeued and restarted on a new node, still running at 3 h."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    provider = SimProvider(store, seed=1, launch_delay_seconds=0.0, offers=(SPOT, OD))
    runtime = SimRuntime(checkpoint_seconds=30)
    pol = policy(idle_timeout_minutes=10)

    def run(now):
        return tick(store=store, provider=provider, runtime=runtime, policy=pol, now=now)

    store.add_jobs([job("a1", gpus=8, team="a", duration_hours=1.0),
                    job("b1", gpus=8, team="b", duration_hours=4.0)], T0)
    for minutes in (0, 1, 62, 75, 90):
        run(T0 + minutes * MIN)
    states = {j.job_id: j.state for j in store.jobs()}
    assert states == {"a1": JobState.SUCCEEDED, "b1": JobState.RUNNING}
    (b_node,) = store.jobs(job_ids=["b1"])[0].node_ids
    provider.reclaim(b_node, T0 + 120 * MIN)  # AWS: gone at 2 h 2 min
    for minutes in (120, 123, 124, 150):
        run(T0 + minutes * MIN)
    assert {j.job_id: j.state for j in store.jobs()}["b1"] is JobState.RUNNING
    yield tmp_path, url, store
    store.close()


def test_report_json_matches_the_store_and_sums_to_the_spend(history):
    cwd, url, store = history
    since, until = T0, T0 + 180 * MIN
    shown = fleetctl(cwd, "report", "--state", url, "--since", dt_to_str(since), "--until", dt_to_str(until),
                     "--format", "json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["format_version"] == 1 and doc["by"] == ["team"] and doc["fully_covered"] is True
    rows = {r["team"]: r for r in doc["rows"]}
    assert set(rows) == {"a", "b", "(idle)"}

    # What the store says, read directly: each node's price over its life in the window, ended by its
    # termination (the drained node is terminated at once, before its notice's deadline) or that deadline.
    ends: dict[str, list] = {}
    for e in store.events("terminate"):
        ends.setdefault(e["subject"], []).append(_dt(e["at_utc"]))
    for notice in store.interruptions(unhandled_only=False):
        ends.setdefault(notice.node_id, []).append(notice.deadline_utc)
    spend = 0.0
    nodes = store.nodes(include_gone=True)
    assert len(nodes) == 3  # a's, b's reclaimed one, b's second
    assert sum(1 for n in nodes if n.node_id in ends) == 2
    for n in nodes:
        end = min([until, *ends.get(n.node_id, [])])
        spend += n.offer.usd_per_hour * (end - max(since, n.launched_at_utc)).total_seconds() / 3600
    assert doc["total"]["usd"] == pytest.approx(spend, abs=1e-5)
    assert sum(r["usd"] for r in doc["rows"]) == pytest.approx(doc["total"]["usd"], abs=1e-5)
    assert sum(r["gpu_hours"] for r in doc["rows"]) == pytest.approx(doc["total"]["gpu_hours"], abs=1e-5)

    # a1 ran from its start to its completion on 8 GPUs; b1 from its start to the reclaim's requeue, then
    # from its restart to the window's end
    starts = [(e["subject"], _dt(e["at_utc"])) for e in store.events("start")]
    a_start = next(at for j, at in starts if j == "a1")
    a_done = _dt(store.events("complete")[0]["at_utc"])
    assert rows["a"]["allocated_gpu_hours"] == pytest.approx(8 * (a_done - a_start).total_seconds() / 3600)
    assert rows["a"]["jobs_completed"] == 1 and rows["b"]["jobs_completed"] == 0
    b_runs = [at for j, at in starts if j == "b1"]
    (requeue,) = store.events("requeue")
    b_hours = (_dt(requeue["at_utc"]) - b_runs[0]) + (until - b_runs[1])
    assert rows["b"]["allocated_gpu_hours"] == pytest.approx(8 * b_hours.total_seconds() / 3600)
    assert rows["b"]["reclaim_lost_gpu_hours"] == pytest.approx(requeue["payload"]["lost_gpu_hours"])
    assert rows["b"]["reclaim_lost_gpu_hours"] > 0  # not checkpointable: the run was lost
    assert rows["(idle)"]["usd"] > 0  # boot, the idle timeout, the reclaimed node after the requeue
    assert rows["(idle)"]["allocated_usd"] == 0
    assert doc["notes"] == []  # every node's end is recorded: a termination, or a notice's deadline


def test_report_table_and_csv_show_the_same_totals(history):
    cwd, url, _ = history
    window = ("--since", dt_to_str(T0), "--until", dt_to_str(T0 + 180 * MIN))
    doc = json.loads(fleetctl(cwd, "report", "--state", url, *window, "--format", "json").stdout)
    table = fleetctl(cwd, "report", "--state", url, *window)
    assert table.returncode == 0, table.stderr
    assert f"{doc['total']['usd']:,.2f}" in table.stdout and "(idle)" in table.stdout
    shown = fleetctl(cwd, "report", "--state", url, *window, "--format", "csv", "--by", "provider,market")
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("provider,market,node_hours,gpu_hours,usd,")
    assert lines[-1].startswith("(total),(total),")
    assert float(lines[-1].split(",")[4]) == pytest.approx(doc["total"]["usd"], abs=1e-5)


def test_a_window_older_than_the_pruned_history_says_so(history):
    cwd, url, store = history
    store.prune_finished(T0 + 100 * MIN)  # a1 and its node go; the cut is recorded
    shown = fleetctl(cwd, "report", "--state", url, "--since", dt_to_str(T0), "--until",
                     dt_to_str(T0 + 180 * MIN), "--format", "json")
    doc = json.loads(shown.stdout)
    assert doc["fully_covered"] is False and doc["covered_from_utc"] == dt_to_str(T0 + 100 * MIN)
    assert any("only covered from" in n for n in doc["notes"])
    table = fleetctl(cwd, "report", "--state", url, "--since", dt_to_str(T0), "--until", dt_to_str(T0 + 180 * MIN))
    assert "only covered from 2026-11-02T10:40:00Z" in table.stdout


def _dt(text: str):
    from fleetctl.codec import str_to_dt

    return str_to_dt(text)


@pytest.mark.parametrize("args, words", [
    (["--since", "yesterday"], "--since 'yesterday' is not a time"),
    (["--until", "2026-13-01"], "--until '2026-13-01' is not a time"),
    (["--since", "2026-11-02", "--until", "2026-11-01"], "is not after --since"),
    (["--since", "1d", "--until", "1d"], "is not after --since"),
    (["--by", "team,owner"], "--by 'owner' is not one of"),
], ids=["since", "until", "until-before-since", "empty", "by"])
def test_bad_input_is_a_usage_error_and_writes_nothing(tmp_path, args, words):
    from fleetctl.cli.main import app

    db = tmp_path / "state.db"
    Store(f"sqlite:///{db}").close()
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    shown = CliRunner().invoke(app, ["report", "--state", f"sqlite:///{db}", *args], env={"COLUMNS": "200"})
    assert shown.exit_code == 2, shown.output
    assert words in shown.output
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before


def test_a_missing_store_exits_1_as_for_status_and_none_is_created(tmp_path):
    for command in ("report", "status"):
        shown = fleetctl(tmp_path, command)
        assert shown.returncode == 1, shown.stdout + shown.stderr
        assert "no state store at" in shown.stderr
        assert list(tmp_path.iterdir()) == []
    shown = fleetctl(tmp_path, "report", "--state", f"sqlite:///{tmp_path / 'none.db'}")
    assert shown.returncode == 1 and list(tmp_path.iterdir()) == []


def test_a_named_policy_gives_each_of_its_teams_a_row_and_a_bad_one_is_a_usage_error(history):
    cwd, url, _ = history
    repo = Path(__file__).resolve().parents[2]
    window = ("--since", dt_to_str(T0), "--until", dt_to_str(T0 + 180 * MIN), "--format", "json")
    shown = fleetctl(cwd, "report", "--state", url, *window, "--policy", str(repo / "policies" / "example.yaml"))
    assert shown.returncode == 0, shown.stderr
    rows = {r["team"]: r for r in json.loads(shown.stdout)["rows"]}
    assert {"a", "b", "(idle)", "ml-research", "ml-product"} <= set(rows)
    assert rows["ml-research"]["usd"] == 0
    (cwd / "bad.yaml").write_text("teams: [\n")
    shown = fleetctl(cwd, "report", "--state", url, *window, "--policy", str(cwd / "bad.yaml"))
    assert shown.returncode == 2 and "bad.yaml" in shown.stderr


def test_a_window_ending_after_now_is_reported_up_to_now(history):
    """A node still live is charged up to now, not up to a future --until (a year ahead read as a year spent)."""
    from datetime import datetime, timezone

    cwd, url, _ = history
    shown = fleetctl(cwd, "report", "--state", url, "--since", dt_to_str(T0), "--until", "2099-01-01",
                     "--format", "json")
    after = datetime.now(timezone.utc)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert _dt(doc["until_utc"]) <= after
    # b's second node is live from T0 + 2 h 4 min at most: at 8 USD/h, up to now and not to 2099
    assert doc["total"]["usd"] <= 8.0 * (after - T0).total_seconds() / 3600 * 2
    assert any("'2099-01-01'" in n and "is in the future" in n for n in doc["notes"]), doc["notes"]
    ahead = fleetctl(cwd, "report", "--state", url, "--since", "2099-01-01", "--until", "2099-02-01")
    assert ahead.returncode == 2 and "--since '2099-01-01'" in ahead.stderr and "not before now" in ahead.stderr
