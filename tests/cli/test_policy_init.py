"""`fleetctl policy init`: a user who installed fleetctl has no policies/example.yaml to copy,
and `plan` without a policy said only where it looked."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from fleetctl.cli.main import app

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = (REPO / "policies" / "example.yaml").read_text()
runner = CliRunner()


def test_init_writes_the_example_policy_where_commands_look_for_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLEETCTL_POLICY", raising=False)
    result = runner.invoke(app, ["policy", "init"])
    assert result.exit_code == 0, result.output
    assert result.output == ("wrote policies/example.yaml; edit it, then check it with: "
                             "fleetctl policy validate policies/example.yaml\n")
    assert (tmp_path / "policies" / "example.yaml").read_text() == EXAMPLE
    checked = runner.invoke(app, ["policy", "validate", "policies/example.yaml"])
    assert checked.exit_code == 0 and checked.output == "policies/example.yaml: ok\n", checked.output


def test_init_to_another_path_and_to_stdout(tmp_path):
    result = runner.invoke(app, ["policy", "init", "-o", str(tmp_path / "infra" / "prod.yaml")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "infra" / "prod.yaml").read_text() == EXAMPLE
    printed = runner.invoke(app, ["policy", "init", "-o", "-"])
    assert printed.exit_code == 0 and printed.stdout == EXAMPLE


def test_init_leaves_an_existing_policy_alone(tmp_path):
    mine = tmp_path / "prod.yaml"
    mine.write_text("providers: [aws]\n")
    result = runner.invoke(app, ["policy", "init", "-o", str(mine)])
    assert result.exit_code == 2
    assert f"-o {mine}: exists; writing the example policy would replace it" in " ".join(result.output.split())
    assert mine.read_text() == "providers: [aws]\n"


def test_a_missing_policy_says_how_to_start_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLEETCTL_POLICY", raising=False)
    default = runner.invoke(app, ["plan"])
    assert default.exit_code == 1
    assert default.output.rstrip().endswith("to start one from the commented example: fleetctl policy init")
    named = runner.invoke(app, ["jobs", "submit", "--policy", "prod.yaml", "jobs.yaml"])
    assert named.exit_code == 2
    assert named.output.rstrip().endswith("fleetctl policy init -o prod.yaml")
    assert not (tmp_path / "policies").exists() and not (tmp_path / "prod.yaml").exists()
