"""examples/deploy: the systemd unit and the Kubernetes Deployment pass the daemon
options it has, with values it accepts, and probe and scrape what it serves."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer
from ruamel.yaml import YAML

from fleetctl.cli.main import app

DEPLOY = Path(__file__).resolve().parents[1] / "examples" / "deploy"


def _daemon_params(args: list[str]) -> dict:
    """The daemon command's parameters as click parses ``args`` (an unknown option or a refused
    value raises, as on the command line), without running it."""
    command = typer.main.get_command(app).commands["daemon"]
    return command.make_context("fleetctl daemon", list(args)).params


def _port(addr: str) -> int:
    return int(addr.rsplit(":", 1)[1])


def _unit_section(path: Path, section: str) -> dict[str, list[str]]:
    """A systemd unit's ``section``: each key with its values in order (systemd keys repeat, as
    Environment= does, which configparser cannot hold)."""
    values: dict[str, list[str]] = {}
    current = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
        elif current == section:
            key, value = line.split("=", 1)
            values.setdefault(key, []).append(value)
    return values


def test_the_systemd_unit_runs_the_daemon_with_options_it_accepts():
    service = _unit_section(DEPLOY / "fleetctl.service", "Service")
    (exec_start,) = service["ExecStart"]
    argv = shlex.split(exec_start)
    assert Path(argv[0]).name == "fleetctl" and argv[1] == "daemon"
    params = _daemon_params(argv[2:])
    assert params["log_format"].value == "json"
    assert service["ExecReload"] == ["/bin/kill -HUP $MAINPID"]  # the daemon reads its policy again on SIGHUP
    assert int(service["TimeoutStopSec"][0]) >= 120  # SIGTERM waits for the tick under way
    env = dict(value.split("=", 1) for value in service["Environment"])
    assert env["FLEETCTL_POLICY"].startswith("/") and env["FLEETCTL_STATE"].startswith("sqlite:////")
    assert env["FLEETCTL_STATE"].removeprefix("sqlite:///").startswith(service["WorkingDirectory"][0])


def test_the_kubernetes_deployment_runs_the_daemon_with_options_it_accepts_and_probes_what_it_serves():
    docs = [d for d in YAML(typ="safe").load_all(DEPLOY / "kubernetes.yaml") if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["args"][0] == "daemon"
    params = _daemon_params(container["args"][1:])
    port = _port(params["metrics_addr"])
    assert params["metrics_addr"].startswith("0.0.0.0:")  # the kubelet and Prometheus reach it from outside the pod
    assert params["policy_check_seconds"] > 0  # nothing sends SIGHUP when the ConfigMap changes
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in (container["livenessProbe"], container["readinessProbe"]):
        assert named[probe["httpGet"]["port"]] == port
    assert int(pod["metadata"]["annotations"]["prometheus.io/port"]) == port
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    policy = Path(params["policy"])
    assert str(policy.parent) == mounts["policy"]  # the ConfigMap's file is the policy the daemon reads
    assert pod["spec"]["terminationGracePeriodSeconds"] >= 120
    assert any(e["name"] == "FLEETCTL_STATE" for e in container["env"])
