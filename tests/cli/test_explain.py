"""`fleetctl explain JOB` on jobs the planner no longer places (in-process, on a store built here)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
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


def test_a_job_that_needs_no_plan_is_explained_without_calling_the_cloud(tmp_path, monkeypatch):
    """An unknown, finished or pruned job is looked up before any plan: with
    ``--cloud aws`` and an AWS that cannot be reached, explain still answers
    (it planned first, so it failed on the cloud, exit 1, for a job it then
    had nothing to say about). Bad options are still checked first."""
    monkeypatch.chdir(tmp_path)
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"), ("AWS_DEFAULT_REGION", "us-east-1"),
                        ("AWS_EC2_METADATA_DISABLED", "true")):
        monkeypatch.setenv(name, value)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    try:
        store.add_jobs([job("old-1", state=JobState.FAILED), job("done-1"), job("queued-1")], T0)
        store.put_job(job("done-1", state=JobState.SUCCEEDED), T0 + timedelta(days=2))
        assert store.prune_finished(T0 + timedelta(days=1))["jobs"] == 1  # old-1
    finally:
        store.close()
    policy = str(REPO / "policies" / "example.yaml")
    finished = runner.invoke(app, ["explain", "done-1", "--state", url, "--policy", policy, "--cloud", "aws"])
    assert finished.exit_code == 0 and "nothing to plan: the job has succeeded" in finished.output, finished.output
    unknown = runner.invoke(app, ["explain", "nope", "--state", url, "--policy", policy, "--cloud", "aws"])
    assert unknown.exit_code == 2 and "no job 'nope' in the store" in unknown.output, unknown.output
    pruned = runner.invoke(app, ["explain", "old-1", "--state", url, "--policy", policy, "--cloud", "aws"])
    assert pruned.exit_code == 0 and "old-1: failed, pruned" in pruned.output, pruned.output
    queued = runner.invoke(app, ["explain", "queued-1", "--state", url, "--policy", policy, "--cloud", "aws"])
    assert "Could not connect to the endpoint URL" in str(queued.exception), queued.output  # it plans: AWS asked
    no_infra = runner.invoke(app, ["explain", "nope", "--state", url, "--cloud", "aws",
                                   "--policy", str(REPO / "policies" / "backtest-spot.yaml")])
    assert no_infra.exit_code == 1 and "needs the policy's infrastructure section" in no_infra.output, no_infra.output


def test_explain_shows_the_jobs_history_from_the_audit_log(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    try:
        store.add_jobs([job("big", state=JobState.SUCCEEDED), job("small", state=JobState.CANCELLED)], T0)
        store.record("bind", T0, "big", nodes=["n-1"], reason="fits_new_capacity")
        store.record("preempt", T0 + timedelta(minutes=1), "small", by="big", reason="preempted", detail="room")
        store.record("complete", T0 + timedelta(hours=1), "big")
        store.record("terminate", T0 + timedelta(hours=2), "n-1", reason="idle_timeout")  # a node's: not shown
    finally:
        store.close()
    shown = runner.invoke(app, ["explain", "big", "--state", url, "--policy", str(REPO / "policies" / "example.yaml")])
    assert shown.exit_code == 0, shown.output
    lines = [line.strip() for line in shown.output.splitlines()]
    start = lines.index("history (`fleetctl events --for big --since 2026-11-02T09:00:00Z` for all):")
    assert [line.split("  ", 1)[1] for line in lines[start + 1:start + 4]] == [
        "bind  nodes=n-1 reason=fits_new_capacity", "preempt of small  by=big detail=room reason=preempted", "complete"]
    assert "terminate" not in shown.output
    # the command it names shows those entries: `events --for` alone reads the last 24 hours (these are
    # weeks old), so a hint without --since showed none of them
    hint = lines[start].split("`")[1].split()[1:]
    listed = runner.invoke(app, [*hint, "--state", url, "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert [(e["kind"], e["subject"]) for e in json.loads(listed.output)["events"]] == [
        ("bind", "big"), ("preempt", "small"), ("complete", "big")]


def test_a_job_id_that_is_not_utf8_is_a_usage_error(tmp_path):
    """`fleetctl explain $'\\xff'`: the id reached the store as a lone surrogate, a UnicodeEncodeError traceback."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    Store(url).close()
    result = runner.invoke(app, ["explain", "\udcff", "--state", url,
                                 "--policy", str(REPO / "policies" / "example.yaml")])
    assert result.exit_code == 2, result.output
    assert "job id '\\xff' is not UTF-8 text (byte 0xff at character 1)" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_explain_shows_the_launch_of_each_node_the_job_is_put_on():
    """`fleetctl explain` found a job's launch by the job's name in the launch's
    detail: the last job named before a headroom note ("risk-adjusted best for
    j0, j1; 1 GPU(s) ahead of the forecast demand") and a job whose node the buy
    step's repair moved onto an offer bought for another job were shown no launch."""
    from fleetctl.cli.explain import launches_for
    from fleetctl.model import DemandForecast, Forecast
    from fleetctl.planner import plan
    from tests.builders import offer, policy

    one = offer("g1", gpus=1, price=1.0, vcpus=8, memory_gib=64)
    ahead = plan(now=T0, queue=(job("j0", gpus=1), job("j1", gpus=1)), fleet=(), offers=(one,),
                 forecast=Forecast(demand=(DemandForecast("A100-80GB", 60, 1.8, 3.0),)),
                 policy=policy(max_headroom_gpus=8))
    (launch,) = ahead.of_kind("launch")
    assert launch.detail.endswith("risk-adjusted best for j0, j1; 1 GPU(s) ahead of the forecast demand")
    assert launches_for(ahead.actions, "j0") == launches_for(ahead.actions, "j1") == [launch]
    # a (8 GPUs, 50 vCPUs) buys s16 in z1, b (60 vCPUs) s8 in z2, and the repair makes a's node an s8 too
    offers = (offer("s16", gpus=16, price=10.0, vcpus=100, zone="z1"), offer("s8", price=6.0, zone="z2"))
    swapped = plan(now=T0, queue=(job("a", gpus=8, vcpus=50), job("b", gpus=8, vcpus=60, submitted=T0 + timedelta(seconds=1))),
                   fleet=(), offers=offers, forecast=None, policy=policy())
    (launch,) = swapped.of_kind("launch")
    assert launches_for(swapped.actions, "a") == launches_for(swapped.actions, "b") == [launch]
    assert launches_for(swapped.actions, "nobody") == []


def test_explain_shows_the_launch_of_the_node_a_job_migrates_to():
    """A running job the plan moves to a new spot node (the move back to spot)
    has no bind: its launch is the one of the node its move goes to."""
    from fleetctl.cli.explain import launches_for
    from fleetctl.model import Forecast, Market, OfferRisk
    from fleetctl.planner import plan
    from tests.builders import node, offer, policy

    # j alone on a $10 on-demand node, checkpointed 30 min ago; spot at $4/h with no risk pays the move back
    od = offer("od1", gpus=1, price=10.0, market=Market.ON_DEMAND, vcpus=8, memory_gib=64)
    spot = offer("sp1", gpus=1, price=4.0, zone="z2", vcpus=8, memory_gib=64)
    j = replace(job("j", state=JobState.RUNNING, node_ids=("od",), duration_hours=10.0), checkpointable=True,
                checkpoint_interval_minutes=30.0, started_at_utc=T0 - timedelta(hours=2),
                last_checkpoint_utc=T0 - timedelta(minutes=30), checkpointed_work_hours=1.5)
    p = plan(now=T0, queue=(j,), fleet=(node("od", od),), offers=(spot,),
             forecast=Forecast(interruption=(OfferRisk(spot.key, 60, 0.0),)),
             policy=policy(replace_on_demand_with_spot=True, restart_overhead_minutes=6.0))
    (launch,) = p.of_kind("launch")
    (move,) = p.of_kind("migrate")
    assert move.to_node_ids == launch.node_names == ("new-1",)
    assert launches_for(p.actions, "j") == [launch]
