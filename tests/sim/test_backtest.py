"""The backtest: JSON shape, determinism, lower bound, exclusions, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fleetctl.model import Market as OfferMarket
from fleetctl.sim.backtest import (
    METRIC_KEYS,
    exclusions,
    lower_bound_cost,
    metrics,
    parse_compare,
    percentile,
    result_document,
    run_backtest,
)
from fleetctl.sim.market import Market, MarketTrace
from fleetctl.sim.simulator import SimResult
from fleetctl.sim.traces import write_job_trace
from tests.builders import T0, job, offer
from tests.sim.sim_fixtures import GAP, jobs, market, sim_policy

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


def _backtest(tmp: Path, jobs_csv: Path, manifest: Path, *args: str, policy: Path | None = None):  # noqa: ANN202
    cmd = [sys.executable, "-m", "fleetctl", "backtest", "--jobs", str(jobs_csv), "--market", str(manifest),
           "--policy", str(policy or ROOT / "policies" / "example.yaml"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, timeout=120)


@pytest.mark.parametrize("args, words", [
    (("--tick-seconds", "inf"), "--tick-seconds must be from 1 to a day"),
    (("--tick-seconds", "1e-300"), "--tick-seconds must be from 1 to a day"),  # was a ZeroDivisionError
    (("--launch-delay-seconds", "nan"), "--launch-delay-seconds must be from 0 to 86400"),
    (("--launch-delay-seconds", "1e12"), "--launch-delay-seconds must be from 0 to 86400"),
    (("--restart-overhead-minutes", "nan"), "--restart-overhead-minutes must be from 0 to 1440"),
    (("--restart-overhead-minutes", "-1"), "--restart-overhead-minutes must be from 0 to 1440"),
])
def test_cli_refuses_numbers_it_cannot_simulate(tmp_path, args, words):
    jobs_csv, manifest = _tiny_case(tmp_path)
    out = _backtest(tmp_path, jobs_csv, manifest, *args)
    assert out.returncode == 2 and words in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_cli_refuses_a_market_too_close_to_year_9999(tmp_path):
    """A market ending within the 30-day overrun of the end of year 9999 was an
    OverflowError traceback (exit 1) when the backtest computed its end."""
    jobs_csv, manifest = _tiny_case(tmp_path)
    manifest.write_text(manifest.read_text().replace("2023-02-15T", "9999-12-20T"))
    jobs_csv.write_text(jobs_csv.read_text().replace("2023-02-15T", "9999-12-20T"))
    out = _backtest(tmp_path, jobs_csv, manifest)
    assert out.returncode == 2 and "Traceback" not in out.stderr and out.stdout == "", out.stderr
    assert " ".join(out.stderr.split()).startswith(
        f"Error: {manifest}: the market ends at 9999-12-20T06:00:00+00:00: that plus 720 hours of overrun, the "
        "longest job"), out.stderr


def test_cli_refuses_a_forecast_model_whose_horizon_is_not_an_hour(tmp_path):
    """A 2-hour model's probability was used as a probability per hour."""
    from datetime import timedelta

    from forecasting.interruption import InterruptionModel
    from tests.forecasting.test_interruption import synthetic

    jobs_csv, manifest = _tiny_case(tmp_path)
    InterruptionModel.train([synthetic(days=6, seed=7)], horizon=timedelta(hours=2)).save(tmp_path / "m2")
    out = _backtest(tmp_path, jobs_csv, manifest, "--forecast-model", str(tmp_path / "m2"))
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr, out.stderr
    assert " ".join(out.stderr.split()) == (
        f"Error: --forecast-model: {tmp_path / 'm2'}: the model's horizon is 2h and the planner reads a "
        "probability per hour; train a model for planning with --horizon 1h (the default)")


def test_cli_forecast_model_of_another_library_version_is_one_warning_line(tmp_path):
    """--allow-version-mismatch printed Python's raw UserWarning and its source
    line; the forecast commands print one 'warning:' line (load_model_or_exit)."""
    from forecasting.interruption import InterruptionModel
    from tests.forecasting.test_interruption import synthetic

    jobs_csv, manifest = _tiny_case(tmp_path)
    model = tmp_path / "m1"
    InterruptionModel.train([synthetic(days=6, seed=7)]).save(model)
    meta = json.loads((model / "model.json").read_text())
    meta["versions"]["scikit-learn"] = "0.0.1"  # not part of the digest
    (model / "model.json").write_text(json.dumps(meta))
    done = _backtest(tmp_path, jobs_csv, manifest, "--forecast-model", str(model), "--compare", "on-demand",
                     "--allow-version-mismatch")
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "scikit-learn 0.0.1" in line]
    assert len(warned) == 1 and warned[0].startswith(f"warning: {model}: the model was saved with"), done.stderr
    assert "UserWarning" not in done.stderr and "load_for_planning(" not in done.stderr, done.stderr
    refused = _backtest(tmp_path, jobs_csv, manifest, "--forecast-model", str(model), "--compare", "on-demand")
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr
    assert " ".join(refused.stderr.split()).startswith(f"Error: --forecast-model: {model}: the model was saved with "
                                                       "scikit-learn 0.0.1"), refused.stderr


def test_cli_checks_the_report_path_before_running_and_stops_when_nothing_can_run(tmp_path):
    jobs_csv, manifest = _tiny_case(tmp_path)
    (tmp_path / "afile").write_text("x")
    report = _backtest(tmp_path, jobs_csv, manifest, "--report", str(tmp_path / "afile"))
    assert report.returncode == 2 and f"--report {tmp_path / 'afile'}: cannot write there" in report.stderr
    assert report.stdout == ""  # refused before the run
    example = (ROOT / "policies" / "example.yaml").read_text()
    no_v100 = tmp_path / "no-v100.yaml"  # the market sells only V100s
    no_v100.write_text(example.replace("  - T4\n  - V100-16GB\n", "  - T4\n", 1))
    assert no_v100.read_text() != example
    out = _backtest(tmp_path, jobs_csv, manifest, "--report", str(tmp_path / "new" / "report"), policy=no_v100)
    assert out.returncode == 2 and "excludes every offer" in out.stderr and "nothing was simulated" in out.stderr
    assert not (tmp_path / "new").exists()  # checked, not created: a run that stops leaves no empty directory
    broke = tmp_path / "broke.yaml"
    broke.write_text(example.replace("max_usd_per_hour: 400", "max_usd_per_hour: 0.5", 1))
    assert broke.read_text() != example
    out = _backtest(tmp_path, jobs_csv, manifest, policy=broke)
    assert out.returncode == 2 and "no node fits the policy's budget" in out.stderr, out.stderr


def test_cli_refuses_jobs_submitted_after_the_simulation_ends(tmp_path):
    jobs_csv, manifest = _tiny_case(tmp_path)  # the market ends 6 hours after 2023-02-15
    rows = jobs_csv.read_text().splitlines()
    header = rows[0].split(",")
    col = header.index("submit_time_utc")
    late = rows[1].split(",")
    late[col] = "2023-02-15T07:00:00Z"
    far = rows[2].split(",")
    far[col] = "2024-06-01T00:00:00Z"
    jobs_csv.write_text("\n".join([rows[0], ",".join(late), ",".join(far), *rows[3:]]) + "\n")
    out = _backtest(tmp_path, jobs_csv, manifest, "--format", "json")
    assert out.returncode == 2 and "1 job(s) are submitted after the simulation ends" in out.stderr, out.stderr
    jobs_csv.write_text("\n".join([rows[0], ",".join(late), *rows[3:]]) + "\n")
    out = _backtest(tmp_path, jobs_csv, manifest, "--format", "json", "--compare", "on-demand")
    assert out.returncode == 0, out.stderr
    assert "1 job(s) are submitted after" in out.stderr and "only on-demand" in out.stderr
    assert all(m["jobs_lost"] == 0 for m in json.loads(out.stdout)["policies"].values())


def test_cli_notes_jobs_submitted_before_the_market_starts(tmp_path):
    """A job before the market's start has no spot there, and the run starts
    at it: the Alibaba trace (February 2023) beside the shipped markets (August)
    ran months of on-demand only, silently. Times print in UTC with a Z."""
    jobs_csv, manifest = _tiny_case(tmp_path)  # the market starts 2023-02-15 and ends 6 hours later
    rows = jobs_csv.read_text().splitlines()
    col = rows[0].split(",").index("submit_time_utc")
    early = rows[1].split(",")
    early[col] = "2023-02-14T22:00:00Z"
    late = rows[2].split(",")
    late[col] = "2023-02-15T07:00:00Z"
    jobs_csv.write_text("\n".join([rows[0], ",".join(early), ",".join(late), *rows[3:]]) + "\n")
    out = _backtest(tmp_path, jobs_csv, manifest, "--format", "json", "--compare", "on-demand")
    assert out.returncode == 0, out.stderr
    said = " ".join(out.stderr.split())
    assert (f"note: 1 job(s) are submitted before {manifest} starts (2023-02-15T00:00:00Z), where it has no spot "
            "capacity, only on-demand; the run starts at the first of them (2023-02-14T22:00:00Z): "
            f"{early[0]}") in said, out.stderr
    assert f"1 job(s) are submitted after {manifest} ends (2023-02-15T06:00:00Z)" in said, out.stderr
    assert all(m["jobs_lost"] == 0 for m in json.loads(out.stdout)["policies"].values())


def test_cli_names_compare_for_an_unknown_baseline(tmp_path):
    jobs_csv, manifest = _tiny_case(tmp_path)
    out = _backtest(tmp_path, jobs_csv, manifest, "--compare", "on-demand,karpenter")
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert " ".join(out.stderr.split()).startswith(
        "Error: --compare on-demand,karpenter: unknown policy 'karpenter'; known: fleetctl,"), out.stderr


def test_lower_bound_prices_spot_only_when_it_could_be_bought():
    """A spot price is in the bound only at ticks with capacity: the price at tick 0 (``offer_spot``'s)
    counts only if tick 0 had capacity, as for every other tick."""
    base = market({"z1": (0,) + (1,) * 35}).traces[0]
    # cheap (0.5) only at tick 0, when nothing can be bought; 2.0 whenever there is capacity
    trace = replace(base, offer_spot=replace(base.offer_spot, usd_per_hour=0.5), prices=(0.5,) + (2.0,) * 35)
    js = jobs(2)
    hours = sum(j.duration_hours for j in js)
    assert lower_bound_cost(js, Market((trace,), T0), sim_policy()) == pytest.approx(hours * 2.0)
    # with capacity at tick 0, its price counts
    open_at_0 = replace(trace, capacity=(1,) * 36)
    assert lower_bound_cost(js, Market((open_at_0,), T0), sim_policy()) == pytest.approx(hours * 0.5)
    # spot never has capacity (one price for the whole trace): on-demand, 3.0 per GPU-hour
    assert lower_bound_cost(js, market({"z1": (0,) * 36}), sim_policy()) == pytest.approx(hours * 3.0)


@pytest.mark.parametrize("spot_eligible, by_class, per_gpu_hour", [
    (False, True, 3.0),  # the job opts out of spot: on-demand is the cheapest it may use
    (None, False, 3.0),  # its priority class is not spot-eligible
    (None, True, 1.0),
    (True, False, 1.0),
], ids=["job-opts-out", "class-not-eligible", "class-eligible", "job-opts-in"])
def test_lower_bound_prices_a_job_only_on_markets_it_may_use(spot_eligible, by_class, per_gpu_hour):
    from fleetctl.model import PriorityClass

    pol = sim_policy(priority_classes=(PriorityClass("production", 1000, preemptible=False, spot_eligible=False),
                                       PriorityClass("batch", 100, preemptible=True, spot_eligible=by_class)))
    js = [replace(j, spot_eligible=spot_eligible) for j in jobs(3)]
    assert lower_bound_cost(js, market(), pol) == pytest.approx(sum(j.duration_hours for j in js) * per_gpu_hour)


def test_cli_restart_overhead_costs_every_policy_more(tmp_path):
    jobs_csv, manifest = _tiny_case(tmp_path)
    costs = []
    for minutes in ("0", "30"):
        out = _backtest(tmp_path, jobs_csv, manifest, "--format", "json", "--compare", "on-demand",
                        "--restart-overhead-minutes", minutes)
        assert out.returncode == 0, out.stderr
        costs.append({name: p["cost_usd"] for name, p in json.loads(out.stdout)["policies"].items()})
    assert costs[0].keys() == costs[1].keys() == {"fleetctl", "on-demand"}
    assert all(costs[1][name] > costs[0][name] for name in costs[0])


def _with_a_four_gpu_type() -> Market:
    """The fixture's three zones of g1 (1 V100-16GB, 12 vCPUs, 128 GiB; spot from 1.0 per GPU-hour, on-demand
    3.0) and g4 (4 A100-80GB, 48 vCPUs, 512 GiB; spot 8.0 an hour, 2.0 per GPU-hour), always available."""
    g4 = offer("g4", gpus=4, price=8.0, zone="z1", model="A100-80GB", gpu_memory_gib=80.0)
    four = MarketTrace(g4, replace(g4, market=OfferMarket.ON_DEMAND, usd_per_hour=16.0), T0, GAP, (1,) * 36)
    return Market(market().traces + (four,), T0)


def _job(gpu_memory_gib: float = 0.0, **kw):
    """A 1-hour job (1 GPU, 4 vCPUs, 16 GiB a worker unless told)."""
    return replace(job("j", duration_hours=1.0, **kw), gpu_memory_gib_per_gpu=gpu_memory_gib)


@pytest.mark.parametrize("the_job, usd", [
    (_job(vcpus=12, memory_gib=128, gpu_memory_gib=16.0), 1.0),  # fills g1 to the edge: 1 x 1.0
    (_job(vcpus=13), 2.0),  # a vCPU more than g1 has: g4
    (_job(memory_gib=129), 2.0),  # a GiB more than g1 has: g4
    (_job(gpus=2), 2 * 2.0),  # 2 GPUs a worker: only g4 holds it, 2 GPUs x 2.0
    (_job(gpus=1, models=("A100-80GB",)), 2.0),  # only on an A100: g4's 2.0 per GPU-hour
    (_job(gpu_memory_gib=32.0), 2.0),  # a GPU of 32 GiB or more: g4
    (_job(workers=2), 2 * 1.0),  # 2 workers x 1 GPU on g1
    (_job(gpus=8), 0.0),  # no instance type holds a worker: adds nothing
], ids=["fills-g1", "g1-vcpus", "g1-memory", "two-gpus-a-worker", "a100-only", "gpu-memory", "two-workers", "held-by-none"])
def test_lower_bound_prices_each_job_on_the_cheapest_instance_type_that_holds_a_worker(the_job, usd):
    assert lower_bound_cost([the_job], _with_a_four_gpu_type(), sim_policy()) == pytest.approx(usd)


def test_the_policys_providers_bound_the_offers_priced():
    pol = sim_policy(providers=("gcp",))
    assert lower_bound_cost(jobs(2), market(), pol) == 0.0
    assert any("provider aws is not in the policy's providers (gcp)" in line for line in exclusions(market(), pol))


def test_percentile_interpolates_linearly_between_the_sorted_values():
    # sorted 1, 2, 3, 4: the 50th sits at position 3 x 0.5 = 1.5, halfway between 2 and 3
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    # 0, 10: the 95th at position 0.95, 0 + (10 - 0) x 0.95
    assert percentile([10.0, 0.0], 95) == pytest.approx(9.5)
    # sorted 0, 1, 2, 3, 4: the 95th at position 4 x 0.95 = 3.8, 3 + (4 - 3) x 0.8
    assert percentile([4.0, 0.0, 1.0, 2.0, 3.0], 95) == pytest.approx(3.8)
    assert percentile([7.0, 5.0, 6.0], 50) == 6.0  # on a value: no interpolation
    assert percentile([5.0], 95) == 5.0
    assert percentile([], 50) == 0.0


def test_the_summary_reads_each_number_from_its_own_field():
    """A result whose every field has its own value: each lands under its own key, rounded to 6 decimals.
    Waits sorted are 0, 1, 2, 3, 4: p50 at position 2 (2.0), p95 at 3.8 (3 + 0.8 x (4 - 3))."""
    r = SimResult(cost_usd=12.3456789, useful_gpu_hours=2.5, lost_gpu_hours=3.5, gpu_hours_run=6.0,
                  held_gpu_hours=8.0, gpu_utilization=0.4375, wait_hours=(4.0, 0.0, 1.0, 2.0, 3.0),
                  deadline_misses=7, jobs_total=8, jobs_completed=5, jobs_lost=1, interruptions=11, migrations=12,
                  ticks=100, ice_retries=3, end_utc=T0)
    assert metrics(r) == {"cost_usd": 12.345679, "useful_gpu_hours": 2.5, "lost_gpu_hours": 3.5,
                          "gpu_utilization": 0.4375, "wait_p50_hours": 2.0, "wait_p95_hours": 3.8,
                          "deadline_misses": 7, "jobs_total": 8, "jobs_completed": 5, "jobs_lost": 1,
                          "interruptions": 11, "migrations": 12}
    # Every float 1.4e-6 past those: each rounds to 1e-6 past, not to 5 decimals (none past) nor 7 (all of it).
    # The waits' p95 is 3.0000014 + 0.8 x 1 = 3.8000014.
    e = 1.4e-6
    fine = replace(r, useful_gpu_hours=2.5 + e, lost_gpu_hours=3.5 + e, gpu_utilization=0.4375 + e,
                   wait_hours=tuple(w + e for w in r.wait_hours))
    got = metrics(fine)
    assert {k: got[k] for k in ("useful_gpu_hours", "lost_gpu_hours", "gpu_utilization", "wait_p50_hours",
                                "wait_p95_hours")} == {"useful_gpu_hours": 2.500001, "lost_gpu_hours": 3.500001,
                                                       "gpu_utilization": 0.437501, "wait_p50_hours": 2.000001,
                                                       "wait_p95_hours": 3.800001}


def test_the_breakdown_benchmark_bills_what_the_backtest_bills(tmp_path):
    """benchmarks/backtest_breakdown.py splits a policy's cost by market and by
    what the nodes did; its parts add up to the backtest's cost_usd for the
    same inputs and seed, and every job is listed with the GPU-hours it ran."""
    jobs_csv, manifest = _tiny_case(tmp_path)
    policy = ROOT / "policies" / "example.yaml"
    out = tmp_path / "breakdown.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "backtest_breakdown.py"), "--jobs", str(jobs_csv),
                           "--market", str(manifest), "--policy", str(policy), "--json", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    cost = json.loads(_backtest(tmp_path, jobs_csv, manifest, "--format", "json", "--compare", "on-demand").stdout)[
        "policies"]["fleetctl"]["cost_usd"]
    assert doc["cost_usd"] == pytest.approx(cost, abs=1e-6)
    assert sum(row["usd"] for row in doc["by_market_and_activity"]) == pytest.approx(cost, abs=1e-4)
    assert sorted(j["job_id"] for j in doc["jobs"]) == sorted(r.split(",")[0] for r in
                                                             jobs_csv.read_text().splitlines()[1:])
    ran = sum(j["on_demand_gpu_hours"] + j["spot_gpu_hours"] for j in doc["jobs"])
    busy = sum(row["gpu_hours"] for row in doc["by_market_and_activity"] if row["node"] == "running")
    assert ran == pytest.approx(busy, abs=1e-4)  # the GPU-hours of running jobs are the busy nodes' GPU-hours
    assert f"# fleetctl, seed 0: {cost:.2f} USD" in done.stdout


@pytest.mark.parametrize("kw, usd", [
    ({"gpu_models": ("A100-80GB",)}, 2.0),  # g1's V100s are excluded: g4's 2.0 per GPU-hour
    ({"gpu_models": ("V100-16GB",)}, 1.0),
    ({"gpu_models": ("A100-80GB", "V100-16GB")}, 1.0),
    ({"providers": ("aws",)}, 1.0),  # the allow-lists that name the market's own provider and region keep it
    ({"regions": ("r1",)}, 1.0),
    ({"regions": ("r2",)}, 0.0),
], ids=["a100", "v100", "both-models", "aws", "r1", "r2"])
def test_the_policys_allow_lists_bound_the_offers_priced(kw, usd):
    """One 1-hour, 1-GPU job on the fixture's g1 (V100, spot from 1.0 per GPU-hour) and g4 (A100, 2.0)."""
    assert lower_bound_cost([_job()], _with_a_four_gpu_type(), sim_policy(**kw)) == pytest.approx(usd)


def test_exclusions_name_each_offer_outside_the_gpu_models_and_never_a_cpu_offer():
    """The policy allows only A100s: g1's spot and on-demand V100 offers of each zone are named; a CPU-only type
    (no GPU model) is not, as the planner admits it."""
    cpu = offer("c8", gpus=0, price=0.5, zone="z1", model=None)
    cpu_trace = MarketTrace(cpu, replace(cpu, market=OfferMarket.ON_DEMAND, usd_per_hour=1.0), T0, GAP, (1,) * 36)
    m = Market(_with_a_four_gpu_type().traces + (cpu_trace,), T0)
    lines = exclusions(m, sim_policy(gpu_models=("A100-80GB",)))
    assert lines == tuple(f"excluded aws/r1/{z}/g1/{market}: GPU model V100-16GB is not in the policy's gpu_models"
                          for z in ("z1", "z2", "z3") for market in ("spot", "on_demand"))


def test_a_job_without_gpus_is_held_whatever_its_gpu_model_and_memory_say():
    """The fixture's market sells V100-16GB only; a CPU job asking for A100s with 80 GiB is held there (as the
    planner reads it: GPU fields bind only GPUs), so it is not reported stuck, and it adds nothing to the bound.
    The same job with one GPU fits nothing."""
    cpu = replace(_job(gpus=0, models=("A100-80GB",)), gpu_memory_gib_per_gpu=80.0)
    models = _job(gpus=1, models=("A100-80GB",))
    memory = _job(gpus=1, gpu_memory_gib=80.0)
    assert exclusions(market(), sim_policy(), [cpu]) == ()
    assert lower_bound_cost([cpu], market(), sim_policy()) == 0.0
    for stuck in (models, memory):
        assert exclusions(market(), sim_policy(), [stuck]) == ("1 job(s) fit no allowed offer and cannot run: j",)
