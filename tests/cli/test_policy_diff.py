"""`fleetctl policy diff OLD NEW`: output forms, bad input, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "policies" / "example.yaml"
runner = CliRunner()


def without_t4(tmp_path: Path) -> Path:
    """The example policy without T4 and with a lower budget."""
    text = EXAMPLE.read_text()
    text = text.replace("  - T4\n", "", 1).replace("max_usd_per_hour: 400\n", "max_usd_per_hour: 300\n", 1)
    path = tmp_path / "new.yaml"
    path.write_text(text)
    return path


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_text_shows_settings_with_lines_of_new_and_the_market_effect(tmp_path):
    new = without_t4(tmp_path)
    result = runner.invoke(app, ["policy", "diff", str(EXAMPLE), str(new)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith(f"Comparing {EXAMPLE} (old) with {new} (new).\n")
    assert f"  - gpu_models[T4]  " in out and f"# {new}:{line_of(new, 'gpu_models:')}\n" in out
    assert f"  ~ budget.max_usd_per_hour: 400.0 -> 300.0  # {new}:{line_of(new, 'max_usd_per_hour')}\n" in out
    assert "Market effect on the shipped catalog: offers admitted " in out
    assert "  - 194 offers: aws T4 (spot 150, on_demand 44); aws T4 admitted 194 -> 0\n" in out
    assert out.rstrip().splitlines()[-1].startswith("Policy diff: 2 settings differ (1 removed, 1 changed); ")


def test_json_shape(tmp_path):
    new = without_t4(tmp_path)
    result = runner.invoke(app, ["policy", "diff", "--format", "json", str(EXAMPLE), str(new)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert list(doc) == ["format_version", "old", "new", "changed", "summary", "restart_required",
                         "restart_sections", "settings", "market", "queue"]
    assert doc["format_version"] == 1 and doc["old"] == str(EXAMPLE) and doc["new"] == str(new)
    assert doc["changed"] is True
    assert doc["restart_required"] is False and doc["restart_sections"] == []
    assert doc["settings"] == [
        {"action": "remove", "path": "gpu_models[T4]", "old": "T4", "written": False,
         "file": str(new), "line": line_of(new, "gpu_models:"), "column": 1},
        {"action": "change", "path": "budget.max_usd_per_hour", "old": 400.0, "new": 300.0, "written": True,
         "file": str(new), "line": line_of(new, "max_usd_per_hour"), "column": 21},
    ]
    market = doc["market"]
    assert list(market) == ["catalog_offers", "old_admitted", "new_admitted", "changes"]
    assert market["old_admitted"] - market["new_admitted"] == sum(c["offers"] for c in market["changes"])
    assert market["changes"][0] == {"action": "remove", "provider": "aws", "gpu_model": "T4", "offers": 194,
                                    "by_market": {"spot": 150, "on_demand": 44}, "old_admitted": 194,
                                    "new_admitted": 0}
    assert [(c["provider"], c["action"]) for c in market["changes"]] == [("aws", "remove"), ("azure", "remove")]
    assert doc["queue"] is None  # no --jobs


def test_jobs_planned_under_each_policy_show_the_jobs_a_change_leaves_queued(tmp_path):
    """examples/jobs.yaml has a job that runs on T4 only: the example without T4 cannot place it."""
    new = without_t4(tmp_path)
    jobs = REPO / "examples" / "jobs.yaml"
    result = runner.invoke(app, ["policy", "diff", "--format", "json", "--jobs", str(jobs), str(EXAMPLE), str(new)])
    assert result.exit_code == 0, result.output
    queue = json.loads(result.output)["queue"]
    assert list(queue) == ["file", "jobs", "old_usd_per_hour", "new_usd_per_hour", "old_unplaced", "new_unplaced",
                           "newly_unplaced", "newly_placed"]
    assert queue["file"] == str(jobs) and queue["jobs"] == 12
    assert (queue["old_unplaced"], queue["new_unplaced"]) == (0, 1)
    assert queue["newly_unplaced"] == [{"job_id": "call-transcription-backlog", "reason": "no_allowed_offer",
                                        "detail": "needs 4 x T4; no allowed offer has that GPU model"}]
    assert queue["newly_placed"] == []
    assert 0 < queue["new_usd_per_hour"] < queue["old_usd_per_hour"]  # the T4 job's nodes are not bought

    text = runner.invoke(app, ["policy", "diff", "--jobs", str(jobs), str(EXAMPLE), str(new)]).output
    assert (f"Queue {jobs} (12 jobs) planned on an empty sandbox fleet: $/h {queue['old_usd_per_hour']:.2f} -> "
            f"{queue['new_usd_per_hour']:.2f}, jobs placed 12 -> 11\n"
            "  ! job call-transcription-backlog stays queued under the new policy\n"
            "      # no_allowed_offer: needs 4 x T4; no allowed offer has that GPU model\n") in text


def test_a_budget_raised_back_places_the_jobs_a_cut_left_queued(tmp_path):
    cut = tmp_path / "cut.yaml"
    cut.write_text(EXAMPLE.read_text().replace("max_usd_per_hour: 400\n", "max_usd_per_hour: 20\n", 1))
    jobs = REPO / "examples" / "jobs.yaml"
    result = runner.invoke(app, ["policy", "diff", "--format", "json", "--jobs", str(jobs), str(cut), str(EXAMPLE)])
    queue = json.loads(result.output)["queue"]
    assert queue["newly_unplaced"] == [] and queue["newly_placed"]
    assert queue["old_usd_per_hour"] <= 20 < queue["new_usd_per_hour"]
    assert {u["reason"] for u in queue["newly_placed"]} == {"budget_exceeded"}
    text = runner.invoke(app, ["policy", "diff", "--jobs", str(jobs), str(cut), str(EXAMPLE)]).output
    first = queue["newly_placed"][0]["job_id"]
    assert f"  + job {first} is placed under the new policy; under the old one it stayed queued\n" in text


def test_an_added_setting_has_new_and_no_old_in_json(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("budget: {max_usd_per_hour: 100}\n")
    new = tmp_path / "new.yaml"
    new.write_text("budget: {max_usd_per_hour: 100}\nteams: {a: {guaranteed_gpus: 2}}\n")
    result = runner.invoke(app, ["policy", "diff", "--format", "json", str(old), str(new)])
    first = json.loads(result.output)["settings"][0]
    assert first == {"action": "add", "path": "teams.a.guaranteed_gpus", "new": 2, "written": True,
                     "file": str(new), "line": 2, "column": 30}


@pytest.mark.parametrize(("flag", "same", "different"), [([], 0, 0), (["--exit-code"], 0, 1)],
                         ids=["default", "exit-code"])
def test_exit_codes(tmp_path, flag, same, different):
    reordered = tmp_path / "same.yaml"  # the teams the other way round, a default written out: the same policy
    text = EXAMPLE.read_text()
    research = text[text.index("  # Research:"):text.index("  # Product:")]
    product = text[text.index("  # Product:"):text.index("# Priority classes")]
    reordered.write_text("regions: []\n" + text.replace(research + product, product + research, 1))
    assert reordered.read_text().index("ml-product:") < reordered.read_text().index("ml-research:")
    result = runner.invoke(app, ["policy", "diff", *flag, str(EXAMPLE), str(reordered)])
    assert result.exit_code == same, result.output
    assert "No differences" in result.output
    result = runner.invoke(app, ["policy", "diff", *flag, str(EXAMPLE), str(without_t4(tmp_path))])
    assert result.exit_code == different, result.output
    assert "gpu_models[T4]" in result.output


def test_bad_files_exit_2_listing_every_problem_of_both(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("budget:\n  max_usd_per_hour: ten\n")
    new = tmp_path / "new.yaml"
    new.write_text("budget: {max_usd_per_hour: 100}\nteams:\n  a: {weight: 0}\n")
    result = runner.invoke(app, ["policy", "diff", "--exit-code", str(old), str(new)])
    assert result.exit_code == 2
    assert f"{old}:2:21: budget.max_usd_per_hour: must be a valid number (got 'ten')" in result.output
    assert f"{new}:3:15: teams.a.weight: must be greater than 0 (got 0)" in result.output
    assert "Comparing" not in result.output


def test_a_bad_job_file_exits_2_at_its_line(tmp_path):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - id: a\n    team: t\n    priority: batch\n    gpus_per_worker: many\n"
                    "    vcpus_per_worker: 4\n    memory_gib_per_worker: 8\n    duration_hours: 1\n")
    result = runner.invoke(app, ["policy", "diff", "--jobs", str(jobs), str(EXAMPLE), str(EXAMPLE)])
    assert result.exit_code == 2, result.output
    assert f"{jobs}:5:22: jobs[0].gpus_per_worker: " in result.output
    assert "Comparing" not in result.output


def test_a_missing_file_and_a_bad_option_exit_2(tmp_path):
    missing = tmp_path / "nope.yaml"
    result = runner.invoke(app, ["policy", "diff", str(EXAMPLE), str(missing)])
    assert result.exit_code == 2 and f"{missing}:1:1: (root): cannot read the file" in result.output
    result = runner.invoke(app, ["policy", "diff", "--format", "yaml", str(EXAMPLE), str(EXAMPLE)])
    assert result.exit_code == 2, result.output


def test_a_change_a_running_daemon_cannot_take_up_says_it_needs_a_restart(tmp_path):
    """The daemon refuses a reload that changes infrastructure or providers; the diff a reviewer reads says so."""
    new = tmp_path / "new.yaml"
    new.write_text(EXAMPLE.read_text().replace("cluster: ml-platform", "cluster: ml-platform-2", 1))
    shown = runner.invoke(app, ["policy", "diff", str(EXAMPLE), str(new)])
    assert shown.exit_code == 0, shown.output
    assert "Restart needed: a running daemon reads infrastructure at start only" in " ".join(shown.output.split())
    doc = json.loads(runner.invoke(app, ["policy", "diff", "--format", "json", str(EXAMPLE), str(new)]).output)
    assert doc["restart_required"] is True and doc["restart_sections"] == ["infrastructure"]
    budget_only = without_t4(tmp_path)
    assert "Restart needed" not in runner.invoke(app, ["policy", "diff", str(EXAMPLE), str(budget_only)]).output
