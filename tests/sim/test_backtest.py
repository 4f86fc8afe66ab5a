"""The backtest: JSON shape, determinism, lower bound, exclusions, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fleetctl.sim.backtest import (
    METRIC_KEYS,
    exclusions,
    lower_bound_cost,
    parse_compare,
    result_document,
    run_backtest,
)
from fleetctl.sim.traces import write_job_trace
from tests.builders import T0
from tests.sim.sim_fixtures import jobs, market, sim_policy

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("fleetctl", "on-demand", "spot-greedy", "skypilot-failover")


def test_json_keys_and_determinism():
    a = result_document(run_backtest(jobs(6), market(), sim_policy(), NAMES))
    b = result_document(run_backtest(jobs(6), market(), sim_policy(), NAMES))
    assert json.dumps(a) == json.dumps(b)
    assert list(a) == ["format_version", "lower_bound_cost_usd", "policies"] and a["format_version"] == "1"
    assert list(a["policies"]) == list(NAMES)
    for m in a["policies"].values():
        assert tuple(m) == METRIC_KEYS
        assert m["jobs_lost"] == 0 and m["jobs_completed"] == m["jobs_total"] == 6
        assert m["cost_usd"] >= a["lower_bound_cost_usd"] - 1e-9


def test_lower_bound_is_useful_gpu_hours_at_the_cheapest_price():
    js = jobs(4)
    assert lower_bound_cost(js, market(), sim_policy()) == pytest.approx(sum(j.duration_hours for j in js) * 1.0)
    # on-demand only: the cheapest allowed offer costs 3.0 per GPU-hour
    assert lower_bound_cost(js, market(), sim_policy(max_spot_share=0.0)) == pytest.approx(
        sum(j.duration_hours for j in js) * 3.0)


def test_exclusions_are_named():
    lines = exclusions(market(), sim_policy(regions=("eu-west-1",)), jobs(2))
    assert any("region r1 is not in the policy's regions" in line for line in lines)
    assert any("every offer" in line for line in lines)
    assert exclusions(market(), sim_policy(), jobs(2)) == ()


def test_parse_compare():
    assert parse_compare("on-demand, spot-greedy,on-demand") == ("fleetctl", "on-demand", "spot-greedy")
    with pytest.raises(ValueError, match="unknown policy 'karpenter'"):
        parse_compare("karpenter")


def _tiny_case(tmp: Path) -> tuple[Path, Path]:
    (tmp / "t").mkdir()
    (tmp / "t" / "a.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1] * 6 + [0] * 6 + [1] * 24}))
    (tmp / "market.yaml").write_text(
        'start_utc: "2023-02-15T00:00:00Z"\ntraces:\n  - provider: aws\n    instance_type: p3.2xlarge\n'
        "    region: us-east-1\n    zone: us-east-1a\n    file: t/a.json\n")
    start = T0.replace(year=2023, month=2, day=15, hour=0)
    js = [replace(j, submitted_at_utc=j.submitted_at_utc - T0 + start, deadline_utc=None, gpu_models=("V100-16GB",),
                  priority="batch", team="ml-research") for j in jobs(3)]
    write_job_trace(js, tmp / "jobs.csv")
    return tmp / "jobs.csv", tmp / "market.yaml"


def test_cli_json_in_a_subprocess(tmp_path):
    jobs_csv, manifest = _tiny_case(tmp_path)
    cmd = [sys.executable, "-m", "fleetctl", "backtest", "--jobs", str(jobs_csv), "--market", str(manifest),
           "--policy", str(ROOT / "policies" / "example.yaml"), "--compare", "on-demand,spot-greedy", "--format", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert list(doc["policies"]) == ["fleetctl", "on-demand", "spot-greedy"]
    assert all(m["jobs_completed"] == 3 for m in doc["policies"].values())


def test_cli_rejects_bad_input(tmp_path):
    jobs_csv, manifest = _tiny_case(tmp_path)
    cmd = [sys.executable, "-m", "fleetctl", "backtest", "--jobs", str(jobs_csv), "--market", str(manifest),
           "--policy", str(ROOT / "policies" / "example.yaml"), "--compare", "karpenter"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 2 and "unknown policy 'karpenter'" in out.stderr
