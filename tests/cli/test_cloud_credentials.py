"""Missing cloud credentials are one line on stderr and exit 1, whichever
command meets them, and name a place that command's own --help covers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.providers.azure_server import ArmServer, FakeArm

REPO = Path(__file__).resolve().parents[2]
SUB = "00000000-0000-0000-0000-000000000000"  # policies/example.yaml's subscription


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    return tmp_path


def run(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fleetctl", *args], cwd=cwd, env={**env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=120)


def bare_env(home: Path) -> dict[str, str]:
    """This process's environment without any fleetctl, Azure or AWS settings and
    with an empty HOME and PATH: no `az login` session, token cache or CLI to ask."""
    dropped = ("FLEETCTL_", "AZURE_", "AWS_", "IDENTITY_", "MSI_", "IMDS_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    (home / "bin").mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), PATH=str(home / "bin"))
    return env


def test_azure_without_credentials_is_one_line_naming_where_fleetctl_looks(workdir: Path, tmp_path: Path) -> None:
    env = bare_env(tmp_path / "home")
    # developer credentials only: keeps the managed-identity probe of 169.254.169.254 off (no network in tests)
    env["AZURE_TOKEN_CREDENTIALS"] = "dev"
    with ArmServer(FakeArm(SUB), tmp_path) as server:
        env.update(FLEETCTL_AZURE_ENDPOINT=server.endpoint, FLEETCTL_AZURE_CA_BUNDLE=str(server.ca_file))
        result = run(workdir, env, "plan", "--cloud", "azure")
        assert server.fake.requests == []  # no token, so nothing was sent
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: Azure credentials or configuration: no credential gave a token: "
                               "set FLEETCTL_AZURE_ACCESS_TOKEN"), lines[0]
    assert "AZURE_CLIENT_SECRET" in lines[0] and "`az login`" in lines[0]
    assert "the cloud refused a call" not in lines[0]


@pytest.mark.parametrize("command", [("plan",), ("status",), ("reconcile", "--once")], ids=" ".join)
def test_aws_credentials_error_points_at_the_running_commands_help(workdir: Path, tmp_path: Path,
                                                                   command: tuple[str, ...]) -> None:
    env = bare_env(tmp_path / "home")
    env.update(AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_CONFIG_FILE="/nonexistent",
               AWS_EC2_METADATA_DISABLED="true", AWS_DEFAULT_REGION="us-east-1")
    result = run(workdir, env, *command, "--cloud", "aws")
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        "Error: AWS credentials or configuration: Unable to locate credentials (--cloud in this command's "
        "--help says where fleetctl looks for them)"], result.stderr
