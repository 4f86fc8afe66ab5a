"""One policy, one queue, three markets: `fleetctl plan --cloud aws,gcp,azure`
places the example queue across AWS (moto), GCP (the local GCE server) and
Azure (the local HTTPS ARM server) by risk-adjusted cost, and renders
Terraform for all three that validates, plans and applies with the real
binary against the real schemas; `fleetctl apply` carries out both halves."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from google.cloud import compute_v1 as c
from ruamel.yaml import YAML
from typer.testing import CliRunner

from fleetctl.cli.main import app
from providers.catalog import load_catalog
from tests.providers.aws_world import REGION, moto_world
from tests.providers.azure_server import TOKEN, ArmServer, FakeArm, gpu_sku
from tests.providers.gcp_server import FakeGce, GceServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "policies" / "example.yaml"
SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"  # the example policy's


def _gce() -> FakeGce:
    fake = FakeGce("ml-platform-prod")
    for offer in load_catalog():
        if offer.provider == "gcp" and offer.region == "us-central1":
            t = offer.instance_type
            for zone in ("us-central1-a", "us-central1-b"):
                if all(m.name != t.name for m in fake.machine_types.get(zone, [])):
                    fake.add_machine_type(zone, c.MachineType(name=t.name, guest_cpus=t.vcpus,
                                                              memory_mb=int(t.memory_gib * 1024)))
    return fake


def _arm() -> FakeArm:
    fake = FakeArm(SUBSCRIPTION)
    sizes = sorted({o.instance_type.name for o in load_catalog() if o.provider == "azure" and o.region == "eastus"})
    fake.skus = [gpu_sku(size, "eastus") for size in sizes]
    return fake


def test_one_queue_is_placed_across_three_clouds_and_terraform_covers_all_three(moto_server: Any, tf_env: dict,
                                                                                tmp_path: Path) -> None:
    runner = CliRunner()
    gce, arm = _gce(), _arm()
    with moto_world(moto_server, cluster="ml-platform") as world, GceServer(gce) as gce_server, \
            ArmServer(arm, tmp_path) as arm_server:
        yaml = YAML()
        doc = yaml.load(EXAMPLE.read_text())
        doc["infrastructure"]["aws"][REGION]["subnet_ids"] = sorted(world.subnets.values())
        doc["infrastructure"]["aws"][REGION]["security_group_ids"] = []
        policy = tmp_path / "policy.yaml"
        with policy.open("w") as fh:
            yaml.dump(doc, fh)
        env = {**tf_env,
               "AWS_ENDPOINT_URL": world.endpoint, "AWS_DEFAULT_REGION": REGION,
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "FLEETCTL_GCP_API_ENDPOINT": gce_server.endpoint, "FLEETCTL_GCP_CREDENTIALS": "anonymous",
               "FLEETCTL_AZURE_ENDPOINT": arm_server.endpoint, "FLEETCTL_AZURE_CA_BUNDLE": str(arm_server.ca_file),
               "FLEETCTL_AZURE_ACCESS_TOKEN": TOKEN,
               "FLEETCTL_STATE": f"sqlite:///{tmp_path / 'state.db'}", "FLEETCTL_CLOUD": "aws,gcp,azure"}
        infra = tmp_path / "infra"
        infra.mkdir()  # fleetctl does not create a missing --terraform-dir
        submitted = runner.invoke(app, ["jobs", "submit", str(ROOT / "examples" / "jobs.yaml")], env=env)
        assert submitted.exit_code == 0, submitted.output

        planned = runner.invoke(app, ["plan", "--policy", str(policy), "--terraform-dir", str(infra),
                                      "--terraform-init", "get", "-out", str(tmp_path / "plan.json")], env=env)
        assert planned.exit_code == 0, planned.output
        launches = re.findall(r"\+ launch (\d+) x (\S+) .* in (aws|gcp|azure) ", planned.output)
        clouds = Counter(cloud for _, _, cloud in launches)
        assert set(clouds) == {"aws", "gcp", "azure"}, planned.output  # one market across the three
        assert "Terraform: 34 to add, 0 to change, 0 to destroy." in planned.output, planned.output

        done = subprocess.run(["terraform", "validate", "-no-color"], cwd=infra, env=env, capture_output=True,
                              text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr

        applied = runner.invoke(app, ["apply", str(tmp_path / "plan.json"), "--policy", str(policy),
                                      "--terraform-init", "get"], env=env)
        assert applied.exit_code == 0, applied.output
        assert "Terraform: 34 added, 0 changed, 0 destroyed." in applied.output
        bought = {cloud: sum(int(n) for n, _, c2 in launches if c2 == cloud) for cloud in clouds}
        assert f"Apply complete! {sum(bought.values())} launched" in applied.output, applied.output
        aws_instances = [i for r in world.client("ec2").describe_instances(
            Filters=[{"Name": "tag:fleetctl:cluster", "Values": ["ml-platform"]}])["Reservations"]
            for i in r["Instances"]]
        assert len(aws_instances) == bought["aws"]
        assert len(gce.instances) == bought["gcp"]
        assert len(arm.vms) == bought["azure"]

        again = subprocess.run(["terraform", "plan", "-detailed-exitcode", "-no-color"], cwd=infra, env=env,
                               capture_output=True, text=True, check=False)
        assert again.returncode == 0 and "No changes." in again.stdout, again.stdout + again.stderr

        status = runner.invoke(app, ["status", "--policy", str(policy)], env=env)
        assert status.exit_code == 0, status.output
        assert f"Fleet: {sum(bought.values())} nodes" in status.output
