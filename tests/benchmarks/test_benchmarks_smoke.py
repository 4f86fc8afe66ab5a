"""Smoke tests of the planner benchmarks (a few seconds): the speed script runs
and reports, its case is consistent, and the optimality checker can fail."""

from __future__ import annotations

import collections
import json
import random
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from benchmarks import plan_optimality as po
from benchmarks import plan_speed as ps
from fleetctl.model import Bind, Job, JobState, Launch, Market, Offer, Plan, Reason
from providers.catalog import load_catalog
from tests.builders import T0, offer

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--jobs", "200", "--nodes", "100", "--offers", "50", "--seed", "3"]


def _speed_json(*extra: str) -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plan_speed.py"), *TINY, "--format", "json", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def test_plan_speed_json_has_exactly_the_keys_and_places_jobs():
    doc = _speed_json()
    assert tuple(doc) == ps.JSON_KEYS
    assert (doc["jobs"], doc["nodes"], doc["offers"]) == (200, 100, 50)
    assert doc["seconds"] > 0 and doc["placements_per_second"] > 0 and doc["peak_rss_mib"] > 0


def test_plan_speed_incremental_adds_its_keys():
    doc = _speed_json("--incremental")
    assert tuple(doc)[: len(ps.JSON_KEYS)] == ps.JSON_KEYS
    assert doc["incremental_ms"] > 0 and isinstance(doc["incremental_placed"], bool)


def test_speed_case_is_deterministic_and_consistent():
    case = ps.build_case(200, 100, 50, seed=3)
    assert case == ps.build_case(200, 100, 50, seed=3)
    assert case.queued == 200 and len(case.fleet) == 100 and len(case.offers) == 50
    queued, bound = case.queue[: case.queued], case.queue[case.queued:]
    assert all(j.state is JobState.QUEUED and not j.node_ids for j in queued)
    assert bound and all(j.state in (JobState.BOUND, JobState.RUNNING) for j in bound)
    # every (GPU model, market) pair of the catalog is offered
    pairs = {(o.instance_type.gpu_model, o.market) for o in load_catalog()}
    assert pairs <= {(o.instance_type.gpu_model, o.market) for o in case.offers}
    # bound jobs: never over a node, never production on spot, gangs in one domain
    nodes = {n.node_id: n for n in case.fleet}
    used: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for j in bound:
        assert len(j.node_ids) == j.workers
        assert len({nodes[n].offer.placement_domain for n in j.node_ids}) == 1
        for n in j.node_ids:
            of = nodes[n].offer
            assert not (of.market is Market.SPOT and j.priority == "production")
            assert not j.gpu_models or of.instance_type.gpu_model in j.gpu_models
            used[n][0] += j.gpus_per_worker
            used[n][1] += j.vcpus_per_worker
            used[n][2] += j.memory_gib_per_worker
    for n, (g, v, m) in used.items():
        it = nodes[n].offer.instance_type
        assert g <= it.gpu_count and v <= it.vcpus + 1e-9 and m <= it.memory_gib + 1e-9
    assert 0.4 < len(used) / len(case.fleet) < 0.9  # about 70 % of the nodes hold jobs


def test_settle_binds_every_placed_job():
    case = ps.build_case(100, 50, 50, seed=1)
    result = case.run()
    settled, dropped = ps.settle(case, result)
    assert dropped == len(result.unplaced)
    assert all(j.state is not JobState.QUEUED for j in settled.queue)
    fleet = {n.node_id for n in settled.fleet}
    assert all(set(j.node_ids) <= fleet for j in settled.queue)


# --------------------------------------------------------------------------- the optimality checker


def _job(job_id: str, workers: int = 1, gpus: int = 1, priority: str = "batch") -> Job:
    return Job(job_id=job_id, workers=workers, gpus_per_worker=gpus, vcpus_per_worker=4, memory_gib_per_worker=16,
               priority=priority, team="a", duration_hours=2.0, submitted_at_utc=T0 - timedelta(minutes=5))


def _instance() -> tuple[po.Instance, dict[str, Offer]]:
    offers = {
        "spot_a": offer("t8", gpus=8, price=10.0, market=Market.SPOT, zone="z1"),
        "spot_b": offer("t8", gpus=8, price=11.0, market=Market.SPOT, zone="z2"),
        "od": offer("t8", gpus=8, price=30.0, market=Market.ON_DEMAND, zone="z1"),
    }
    jobs = (_job("batch", gpus=8), _job("prod", gpus=4, priority="production"), _job("gang", workers=2, gpus=8),
            _job("big", gpus=8))
    return po.Instance(0, jobs, tuple(offers.values()), po.instance_policy(random.Random(0))), offers


def _plan(launches: list[tuple[Offer, tuple[str, ...]]], binds: list[tuple[str, tuple[str, ...]]]) -> Plan:
    actions = [Launch(o, names, Reason.CHEAPEST_OFFER, "") for o, names in launches]
    actions += [Bind(j, nodes, Reason.FITS_NEW_CAPACITY, "") for j, nodes in binds]
    return Plan(actions=tuple(actions), unplaced=(), usd_per_hour_before=0.0, usd_per_hour_after=0.0)


def test_checker_flags_a_violating_plan():
    instance, offers = _instance()
    bad = _plan(
        [(offers["spot_a"], ("a1", "a2", "a3", "a4")), (offers["spot_b"], ("b1",))],
        [("batch", ("a1",)), ("prod", ("a2",)),  # production job on spot
         ("gang", ("a3", "b1")),  # gang over two zones
         ("big", ("a1",))],  # a1 now holds 16 of 8 GPUs
    )
    evaluation = po.evaluate(instance, po.solution_of_plan(bad))
    codes = {v.code for v in evaluation.violations}
    assert {"spot_not_allowed", "gang_domain", "capacity", "type_share", "zone_share"} <= codes
    assert not evaluation.feasible


def test_checker_accepts_a_valid_plan_and_prices_it():
    instance, offers = _instance()
    good = _plan(
        [(offers["od"], ("o1", "o2", "o3", "o4", "spare"))],
        [("batch", ("o1",)), ("prod", ("o2",)), ("gang", ("o3", "o4"))],
    )
    solution = po.solution_of_plan(good)
    # "big" is neither bound nor reported unplaced
    assert [v.code for v in po.evaluate(instance, solution).violations] == ["missing_job"]
    reported = po.Solution(solution.nodes, solution.placements, unplaced=("big",))
    evaluation = po.evaluate(instance, reported)
    assert evaluation.violations == () and evaluation.unplaced == ("big",) and not evaluation.feasible
    assert evaluation.cost == pytest.approx(5 * 30.0)  # on demand: no risk term
    assert evaluation.empty_nodes == 1


def test_distinct_offers_rule():
    instance, offers = _instance()
    one_offer = _plan([(offers["spot_a"], ("a1", "a2", "a3"))], [("batch", ("a1",)), ("gang", ("a2", "a3"))])
    codes = {v.code for v in po.evaluate(instance, po.solution_of_plan(one_offer)).violations}
    assert "distinct_offers" in codes


def test_milp_solution_passes_the_checker():
    pytest.importorskip("highspy")
    instance = po.make_instance(0, seed=7, max_jobs=6, max_offers=8)
    result = po.solve_milp(instance, time_limit=10)
    assert result.solution is not None and result.proved_optimal
    evaluation = po.evaluate(instance, result.solution)
    assert evaluation.feasible, evaluation.violations
    assert evaluation.cost == pytest.approx(result.objective, rel=1e-6)


def test_tick_scaling_runs_whole_ticks_on_a_real_store_and_reports_them(tmp_path):
    """A tiny tick benchmark (20 nodes, 3 ticks): every tick is measured by
    phase, its SQL counted, and the report written as Markdown and JSON; the
    instrumentation is gone afterwards."""
    from benchmarks import tick_scaling as tsc
    from fleetctl.controller import reconcile

    before = reconcile.handle_interruptions
    out = tmp_path / "tick.md"
    tsc.main(["--sizes", "20", "--ticks", "3", "--seed", "1", "--out", str(out)])
    doc = json.loads(out.with_suffix(".json").read_text())
    [r] = doc["results"]
    assert (r["nodes"], r["ticks"], len(r["per_tick"])) == (20, 3, 3)
    for t in r["per_tick"]:
        assert set(t["phases"]) == set(tsc.PHASES) and t["sql"] > 0 and t["node_listings"] >= 1
        assert abs(sum(t["phases"].values()) - t["seconds"]) < 0.01
    assert r["per_tick"][0]["actions"] > 0  # the first tick places the queue
    assert "| 20 |" in out.read_text() and doc["command"].startswith("python benchmarks/tick_scaling.py")
    assert reconcile.handle_interruptions is before


def test_tick_scaling_prunes_after_the_ticks_and_measures_the_store_before_and_after(tmp_path):
    """``--prune-days``: the prune ``fleetctl prune`` runs, on a tiny store with 20 days of history;
    it deletes the finished history older than the finished cut and the rows after are the rows
    before less what it deleted; on SQLite a VACUUM shrinks the file."""
    from benchmarks import tick_scaling as tsc

    out = tmp_path / "tick.json"
    tsc.main(["--sizes", "20", "--ticks", "1", "--history-days", "20", "--prune-days", "15,5", "--format", "json",
              "--out", str(out)])
    [r] = json.loads(out.read_text())["results"]
    p = r["prune"]
    assert (p["older_than_days"], p["finished_older_than_days"]) == (15.0, 5.0)
    assert p["deleted_finished"]["jobs"] > 0 and p["deleted"]["events"] > 0
    for table in ("jobs", "nodes", "launches", "job_cancellations"):
        assert p["rows_after"][table] == p["rows_before"][table] - p["deleted_finished"][table], table
    assert p["rows_after"]["events"] == (p["rows_before"]["events"] - p["deleted"]["events"]
                                         - p["deleted_finished"]["events"] + 1)  # + the prune_finished entry
    assert p["bytes_after"] == p["bytes_before"] and p["free_bytes_after"] > 0
    assert p["bytes_after_vacuum"] < p["bytes_before"]


def test_plan_preemption_plans_a_world_that_preempts_and_gives_a_digest(tmp_path):
    out = tmp_path / "pp.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plan_preemption.py"), "--sizes", "60",
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(out.read_text())["results"]
    assert result["nodes"] == 60 and result["actions"].get("preempt", 0) > 0 and len(result["digest"]) == 64


def test_cli_tables_times_the_read_commands_and_compares_two_checkouts(tmp_path):
    out = tmp_path / "cli.md"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cli_tables.py"), "--sizes", "30", "--runs", "1",
                           "--before", str(ROOT), "--out", str(out)], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line for line in out.read_text().splitlines() if line.startswith("| 30 |")]
    assert len(rows) == 4 and all("| yes |" in row for row in rows), rows  # the same checkout: the same bytes


def test_jobs_submit_times_a_submit_and_a_resubmit(tmp_path):
    out = tmp_path / "submit.md"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "jobs_submit.py"), "--jobs", "20",
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line for line in out.read_text().splitlines() if line.startswith("| 20 |")]
    assert len(rows) == 2, out.read_text()


def test_plan_second_pass_carries_a_plan_out_and_counts_second_plans():
    from benchmarks.plan_second_pass import applied
    from fleetctl.model import NodeState
    from fleetctl.planner import plan
    from tests.builders import job, policy

    case = dict(now=T0, queue=(job("q", gpus=2),), fleet=(), offers=(offer("g2", gpus=2, price=2.0),), forecast=None,
                policy=policy())
    first = plan(**case)
    after = applied(case, first)
    (n,) = after["fleet"]
    assert (n.node_id, n.state) == ("new-1", NodeState.LAUNCHING)
    (q,) = after["queue"]
    assert (q.state, q.node_ids) == (JobState.BOUND, ("new-1",))
    assert not plan(**after).actions  # the job is placed; nothing more to buy
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plan_second_pass.py"), "--seeds", "40",
                           "--format", "json"], capture_output=True, text=True, timeout=300, check=True)
    result = json.loads(done.stdout)
    assert result["seeds"] == 40 and set(result) == {
        "seeds", "second_plans_changing_the_fleet", "consolidation_the_disruption_budget_stopped", "by_actions"}
    assert result["second_plans_changing_the_fleet"] == sum(v["count"] for v in result["by_actions"].values())


@pytest.mark.parametrize("seed", [126])  # a small one with a reclaim of fleetctl's spot node
def test_sim_fuzz_runs_a_random_case_through_every_policy_with_the_invariants(seed):
    """benchmarks/sim_fuzz.py on one of its seeds: every policy keeps the invariants after every event,
    completes every job and costs no less than the lower bound (``failures`` is empty)."""
    from benchmarks.sim_fuzz import failures
    from fleetctl.sim.baselines import PLANNERS

    assert failures(seed, sorted(PLANNERS)) == []


def test_sim_fuzz_reports_what_breaks_with_its_seed(monkeypatch):
    """A run that breaks an invariant is a failure naming the seed, the policy and what broke, not a crash of
    the fuzzer; the exit status says so."""
    import benchmarks.sim_fuzz as fuzz

    def broken(now, world):
        raise AssertionError("a job is on two nodes")

    monkeypatch.setattr(fuzz, "check_invariants", broken)
    assert fuzz.failures(126, ["on-demand"]) == [
        {"seed": 126, "policy": "on-demand", "kind": "error", "detail": "AssertionError: a job is on two nodes"}]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sim_fuzz.py"), "--seeds", "126:127",
                           "--policies", "on-demand", "--format", "json"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result.pop("totals")["on-demand"]["runs_not_completed"] == 0
    assert result | {"seconds": 0} == {"seeds": "126:127", "cases": 1, "policies": ["on-demand"], "runs": 1,
                                       "failures": [], "seconds": 0}
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sim_fuzz.py"), "--policies", "nope"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown policies ['nope']" in bad.stderr
