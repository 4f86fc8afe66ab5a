"""fleetctl's Terraform, for real and offline: the real ``terraform`` binary
validates, plans and applies the modules and the rendered root module against
the real provider schemas (through the schema-serving provider), and
``fleetctl plan/apply --terraform-dir --cloud aws`` carries out both halves,
the API half against moto. Plus the pure-Python schema check, which needs no
binary."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.policy import load_policy
from fleetctl.terraform import Terraform, UnexpectedDestroy, check_destroys, render, render_changes, write_root
from providers.catalog import load_catalog
from tests.providers.aws_world import CREDENTIALS, REGION, moto_world
from tests.tfprovider.harness import terraform
from tests.tfprovider.schemacheck import check_body, check_module, check_root, hcl_body, module_blocks

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / "terraform" / "modules"
EXAMPLE = ROOT / "policies" / "example.yaml"


# ---------------------------------------------------------------- the pure-Python check


def _body(hcl: str, tmp_path: Path) -> dict[str, Any]:
    import hcl2

    (tmp_path / "x.tf").write_text(hcl)
    doc = hcl2.load((tmp_path / "x.tf").open())
    [entry] = doc["resource"]
    [named] = entry.values()
    [body] = [v for k, v in named.items() if not k.startswith("__")]
    return hcl_body(body)


@pytest.mark.parametrize(("hcl", "expected"), [
    ('resource "aws_sqs_queue" "q" {\n  nmae = "x"\n}\n', "unknown argument 'nmae'"),
    ('resource "aws_cloudwatch_event_target" "t" {\n  rule = "r"\n}\n', "missing required argument 'arn'"),
    ('resource "aws_sqs_queue" "q" {\n  delay_seconds = "soon"\n}\n', "delay_seconds: expected a number"),
    ('resource "aws_sqs_queue" "q" {\n  fifo_queue = "maybe"\n}\n', "fifo_queue: expected a bool"),
    ('resource "aws_sqs_queue" "q" {\n  tags = ["a"]\n}\n', "tags: expected a map"),
    ('resource "aws_sqs_queue" "q" {\n  arn = "x"\n}\n', "arn: computed by the provider"),
    ('resource "aws_launch_template" "t" {\n  iam_instance_profile {\n    name = "a"\n  }\n'
     '  iam_instance_profile {\n    name = "b"\n  }\n}\n', "'iam_instance_profile' allows at most 1, has 2"),
    ('resource "aws_launch_template" "t" {\n  metadata_options {\n    http_tokenz = "required"\n  }\n}\n',
     "metadata_options[0]: unknown argument 'http_tokenz'"),
])
def test_the_schema_check_finds_each_kind_of_mistake(hcl: str, expected: str, schemas: dict, tmp_path: Path) -> None:
    type_name = re.search(r'resource "([a-z0-9_]+)"', hcl).group(1)  # type: ignore[union-attr]
    errors = check_body(type_name, _body(hcl, tmp_path), schemas[type_name])
    assert any(expected in e for e in errors), errors


def test_the_modules_pass_the_schema_check(schemas: dict) -> None:
    for module in ("aws-iam", "aws-controller", "aws-pool", "gcp-pool", "azure-pool"):
        assert check_module(MODULES / module, schemas) == [], module


def test_the_rendered_root_calls_the_modules_with_their_variables(tmp_path: Path) -> None:
    doc = render(load_policy(EXAMPLE), load_catalog())
    assert check_root(doc, MODULES.parent) == []
    broken = json.loads(json.dumps(doc))
    broken["module"]["aws_pool_us_east_1_a10g"]["imageid"] = "ami-0123456789abcdef0"
    del broken["module"]["aws_pool_us_east_1_a10g"]["cluster"]
    broken["module"]["aws_pool_us_east_1_t4"]["gang_placement_group"] = "yes"
    errors = check_root(broken, MODULES.parent)
    assert any("unknown argument 'imageid'" in e for e in errors)
    assert any("missing required argument 'cluster'" in e for e in errors)
    assert any("gang_placement_group: expected a bool" in e for e in errors)


# ---------------------------------------------------------------- the real binary


@pytest.mark.parametrize("module", ["aws-iam", "aws-controller", "aws-pool", "gcp-pool", "azure-pool"])
def test_each_module_validates_against_the_real_schema(module: str, tf_env: dict, tmp_path: Path) -> None:
    work = tmp_path / module
    shutil.copytree(MODULES / module, work)
    terraform(work, tf_env, "validate")
    terraform(work, tf_env, "fmt", "-check")


def test_a_wrong_argument_fails_terraform_validate(tf_env: dict, tmp_path: Path) -> None:
    work = tmp_path / "bad"
    shutil.copytree(MODULES / "aws-pool", work)
    main = work / "main.tf"
    main.write_text(main.read_text().replace("update_default_version = true", "update_default_versions = true"))
    done = terraform(work, tf_env, "validate", ok=(1,))
    assert "update_default_versions" in done.stderr


def test_the_rendered_example_validates_plans_applies_and_replans_clean(tf_env: dict, tmp_path: Path) -> None:
    work = tmp_path / "root"
    write_root(work, render(load_policy(EXAMPLE), load_catalog()))
    terraform(work, tf_env, "get")
    terraform(work, tf_env, "validate")
    plan = terraform(work, tf_env, "plan", "-out=tf.plan")
    # AWS: 7 pools x (template + placement group) + the controller's 12; GCP: 4 templates; Azure: 4 scale sets
    assert "Plan: 34 to add, 0 to change, 0 to destroy." in plan.stdout
    for resource in ("module.gcp_pool_us_central1_l4.google_compute_region_instance_template.pool",
                     "module.azure_pool_eastus_t4.azurerm_orchestrated_virtual_machine_scale_set.pool",
                     "module.aws_pool_us_east_1_a10g.aws_launch_template.pool"):
        assert resource in plan.stdout
    terraform(work, tf_env, "apply", "tf.plan")
    again = terraform(work, tf_env, "plan", "-detailed-exitcode")  # exit 0: no changes
    assert "No changes." in again.stdout


def test_terraform_also_starts_the_schema_providers_itself_through_dev_overrides(tmp_path: Path) -> None:
    """The other tests reattach terraform to providers started once (``harness.SchemaProviders``);
    this one has terraform start each provider itself, through the CLI config's dev_overrides, as it
    does a real provider: the set-up DESIGN.md describes, kept working."""
    from tests.tfprovider.harness import install

    env = install(tmp_path / "tf-harness")  # no providers given: no TF_REATTACH_PROVIDERS
    env.pop("TF_REATTACH_PROVIDERS", None)  # nor one from the environment the tests run in
    work = tmp_path / "root"
    write_root(work, render(load_policy(EXAMPLE), load_catalog()))
    terraform(work, env, "get")
    validated = terraform(work, env, "validate")
    assert "Provider development overrides are in effect" in validated.stdout + validated.stderr
    plan = terraform(work, env, "plan")
    assert "Plan: 34 to add, 0 to change, 0 to destroy." in plan.stdout


def _edited(tmp_path: Path, edit, name: str | None = None) -> Path:  # noqa: ANN001 - edit(doc) changes the example
    """The example policy, changed by ``edit``, written to ``name`` (default: a new file)."""
    yaml = YAML()
    doc = yaml.load(EXAMPLE.read_text())
    edit(doc)
    path = tmp_path / (name or f"policy-{len(list(tmp_path.glob('policy-*.yaml')))}.yaml")
    with path.open("w") as fh:
        yaml.dump(doc, fh)
    return path


def test_a_new_gcp_image_replaces_the_templates_create_first_and_a_cluster_rename_is_refused(
        tf_env: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The schema-serving provider answers ForceNew attributes with
    requires_replace, as the real providers do: GCP instance templates are
    immutable, so a new image replaces them (create first, then delete the old
    one), which fleetctl allows; renaming the cluster would replace the AWS
    queues and launch templates the policy still uses, which it refuses."""
    work = tmp_path / "root"
    write_root(work, render(load_policy(EXAMPLE), load_catalog()))
    tf = Terraform(work, init="get", env=tf_env)
    plan = tf.plan()
    # What `fleetctl apply` does while Terraform runs (it handles reclaim notices) is called as it runs; an
    # error there leaves Terraform to finish (a killed apply leaves its state locked and half-written).
    monkeypatch.setattr("fleetctl.terraform.WAIT_POLL_SECONDS", 0.01)
    calls = []

    def fails_while_waiting() -> None:
        calls.append(json.loads((work / "terraform.tfstate").read_text())["serial"]
                     if (work / "terraform.tfstate").exists() else None)
        raise RuntimeError("a notice pass failed")

    with pytest.raises(RuntimeError, match="a notice pass failed"):
        tf.apply(plan, while_waiting=fails_while_waiting)
    assert calls == [None]  # called while Terraform ran, before it wrote any state
    assert not (work / ".terraform.tfstate.lock.info").exists()
    assert not tf.plan().has_changes  # the whole plan was applied

    image = "projects/ml-platform-prod/global/images/fleetctl-node-2026-11-23"
    new_image = _edited(tmp_path, lambda doc: doc["infrastructure"]["gcp"].__setitem__("image", image))
    document = render(load_policy(new_image), load_catalog())
    write_root(work, document)
    plan = tf.plan()
    templates = [c for c in plan.changes if c.type == "google_compute_region_instance_template"]
    assert len(templates) == 4 and all(c.actions == ("create", "delete") for c in templates)
    assert {c.type for c in plan.changes} == {"google_compute_region_instance_template"}  # nothing else moves
    check_destroys(plan, document)  # allowed: replacing is how a template is updated
    assert "+/- module.gcp_pool_us_central1_l4.google_compute_region_instance_template.pool" in render_changes(plan)
    tf.apply(plan)
    assert not tf.plan().has_changes

    renamed = _edited(tmp_path, lambda doc: doc["infrastructure"].__setitem__("cluster", "ml-platform-2"))
    document = render(load_policy(renamed), load_catalog())
    write_root(work, document)
    plan = tf.plan()
    with pytest.raises(UnexpectedDestroy) as refused:
        check_destroys(plan, document)
    message = str(refused.value)
    assert "-/+ module.aws_controller_us_east_1.aws_sqs_queue.interruptions" in message
    assert "aws_launch_template.pool" in message and "infrastructure.cluster" in message
    assert "google_compute_region_instance_template" not in message


def _add_region(region: str):  # noqa: ANN202 - an edit for _edited: one more AWS region
    def edit(doc) -> None:  # noqa: ANN001
        doc["infrastructure"]["aws"][region] = {"image_id": "ami-0123456789abcdef1",
                                                "subnet_ids": ["subnet-0aaaaaaaaaaaaaaa9"],
                                                "security_group_ids": ["sg-0ccccccccccccccc9"]}
    return edit


def _terraform_lines(output: str) -> list[str]:
    """The resource lines of the Terraform section of `fleetctl plan`."""
    section = output[output.index("\nTerraform:\n"):]
    return [line.strip() for line in section.splitlines()[2:] if line.startswith("  ") and "Terraform:" not in line]


def _plan_and_apply(tf_env: dict, tmp_path: Path):  # noqa: ANN202
    """``plan(policy, out)`` (its output) and ``apply(policy, out)`` of the CLI on the sandbox and the
    Terraform directory ``tmp_path/infra``, each asserted to succeed."""
    runner = CliRunner()
    env = {**tf_env, "FLEETCTL_STATE": f"sqlite:///{tmp_path / 'state.db'}", "FLEETCTL_SIM_LAUNCH_DELAY_SECONDS": "0"}
    infra = tmp_path / "infra"
    infra.mkdir()  # fleetctl does not create a missing --terraform-dir

    def plan(policy: Path, out: str) -> str:
        done = runner.invoke(app, ["plan", "--policy", str(policy), "--terraform-dir", str(infra),
                                   "--terraform-init", "get", "-out", str(tmp_path / out)], env=env)
        assert done.exit_code == 0, done.output
        return done.output

    def apply(policy: Path, out: str) -> None:
        done = runner.invoke(app, ["apply", str(tmp_path / out), "--policy", str(policy), "--terraform-init", "get"],
                             env=env)
        assert done.exit_code == 0, done.output

    return plan, apply


def test_adding_or_dropping_a_region_plans_only_that_region(tf_env: dict, tmp_path: Path) -> None:
    """docs/terraform.md: a new region is a normal policy change. A region
    that sorts before the existing one used to take the IAM roles over
    (destroy in one controller module, create in the other), which fleetctl
    refused; now the roles have a module of their own and stay put."""
    plan, apply = _plan_and_apply(tf_env, tmp_path)
    plan(EXAMPLE, "one.json")
    apply(EXAMPLE, "one.json")
    two = _edited(tmp_path, _add_region("eu-west-1"))  # sorts before us-east-1
    output = plan(two, "two.json")
    assert "Terraform: 12 to add, 0 to change, 0 to destroy." in output, output
    added = _terraform_lines(output)
    assert [line for line in added if not line.startswith("+ ")] == [], added
    assert all("eu_west_1" in line for line in added), added
    apply(two, "two.json")
    dropped = _terraform_lines(plan(EXAMPLE, "back.json"))  # and dropping it again destroys only its modules
    assert dropped and all(line.startswith("- ") and "eu_west_1" in line for line in dropped), dropped
    apply(EXAMPLE, "back.json")
    assert "No changes. The infrastructure matches the policy." in plan(EXAMPLE, "again.json")


def test_turning_gang_placement_groups_off_deletes_only_the_pools_placement_groups(tf_env: dict,
                                                                                   tmp_path: Path) -> None:
    """infrastructure.aws.REGION.gang_placement_groups true -> false: the real
    binary plans the delete of each pool's placement group, in modules that
    stay, and nothing else; fleetctl applies it (before 2026-11-28 it refused
    the edit, blaming edited module copies) and the next plan is clean."""
    plan, apply = _plan_and_apply(tf_env, tmp_path)
    plan(EXAMPLE, "one.json")
    apply(EXAMPLE, "one.json")

    def off(doc) -> None:  # noqa: ANN001
        for region in doc["infrastructure"]["aws"].values():
            region["gang_placement_groups"] = False

    edited = _edited(tmp_path, off)
    lines = _terraform_lines(plan(edited, "two.json"))
    assert lines and all(line.startswith("- module.aws_pool_") and line.endswith(".aws_placement_group.gang[0]")
                         for line in lines), lines
    apply(edited, "two.json")
    assert "No changes. The infrastructure matches the policy." in plan(edited, "again.json")


def test_every_regional_aws_resource_of_the_modules_names_its_region(schemas: dict) -> None:
    """The root's ``provider "aws"`` block has one region of the policy: a resource of the
    AWS modules that left out ``region`` (provider v6's per-resource argument) would be created
    there, whichever region its module is for. The IAM resources are global (no such argument)."""
    regional = []
    for module in ("aws-pool", "aws-controller", "aws-iam"):
        for address, type_name, body in module_blocks(MODULES / module):
            if "region" in schemas[type_name].get("attributes", {}):
                regional.append(address)
                assert "region" in body["attributes"], (module, address)  # its value: the test below
    assert len(regional) >= 6, regional  # pool: template, placement group; controller: queue, rules, target, policy


def test_pools_and_queues_of_a_second_aws_region_are_planned_in_that_region(tf_env: dict, tmp_path: Path) -> None:
    """The real terraform's plan of a two-region policy: every regional resource is in the
    region of its module, not in the provider block's."""
    work = tmp_path / "root"
    document = render(load_policy(_edited(tmp_path, _add_region("eu-west-1"))), load_catalog())
    assert document["provider"]["aws"]["region"] in ("us-east-1", "eu-west-1")  # one of them: the other's must not
    write_root(work, document)
    plan = Terraform(work, init="get", env=tf_env).plan()
    shown = json.loads(terraform(work, tf_env, "show", "-json", plan.plan_file.name).stdout)
    planned = {(rc["module_address"], (rc["change"]["after"] or {}).get("region"))
               for rc in shown["resource_changes"] if rc["type"].startswith("aws_") and not rc["type"].startswith(
                   "aws_iam_")}
    assert {region for _, region in planned} == {"us-east-1", "eu-west-1"}, planned
    # module.aws_pool_eu_west_1_t4, module.aws_controller_us_east_1, ...: the region is in the module's name
    assert all(f"_{region.replace('-', '_')}" in module for module, region in planned), planned


#: The IAM resources fleetctl kept in a controller module (with count) before module.aws_iam.
OLDER_IAM = ("aws_iam_role.controller", "aws_iam_role_policy.controller", "aws_iam_role.node",
             "aws_iam_instance_profile.node")


@pytest.mark.parametrize("home", ["eu-west-1", "us-east-1"], ids=["first-of-chain", "last-of-chain"])
def test_iam_roles_of_an_older_state_move_to_their_module_without_a_destroy(home: str, tf_env: dict,
                                                                            tmp_path: Path) -> None:
    """A state written by fleetctl before module.aws_iam has the roles (with
    ``count``) in the controller module of the region that sorted first; the
    rendered moved blocks bring them over from any region of the policy, and
    `fleetctl plan` shows the moves. Dropping that region in the same edit is
    refused, since the roles would be deleted and created again."""
    work = tmp_path / "root"
    policy = load_policy(_edited(tmp_path, _add_region("eu-west-1")))
    document = render(policy, load_catalog())
    write_root(work, document)
    tf = Terraform(work, init="get", env=tf_env)
    tf.apply(tf.plan())
    legacy = f"aws_controller_{home.replace('-', '_')}"
    for resource in OLDER_IAM:  # the older layout
        terraform(work, tf_env, "state", "mv", f"module.aws_iam.{resource}", f"module.{legacy}.{resource}[0]")

    if home == "eu-west-1":
        one = render(load_policy(EXAMPLE), load_catalog())
        write_root(work, one)
        with pytest.raises(UnexpectedDestroy) as refused:
            check_destroys(tf.plan(), one)
        message = str(refused.value)
        assert "- module.aws_controller_eu_west_1.aws_iam_role.controller[0]" in message
        assert "Keep that region for one `fleetctl apply`" in message and "aws_sqs_queue" not in message
        write_root(work, document)

    plan = tf.plan()
    assert {(c.address, c.previous_address, c.actions) for c in plan.changes} == {
        (f"module.aws_iam.{r}", f"module.{legacy}.{r}[0]", ("no-op",)) for r in OLDER_IAM}
    check_destroys(plan, document)
    assert (f"-> module.aws_iam.aws_iam_role.controller (moved from module.{legacy}.aws_iam_role.controller[0])"
            in render_changes(plan))
    tf.apply(plan)
    assert not tf.plan().has_changes


def test_apply_never_destroys_a_module_of_the_users_own_in_the_directory(tf_env: dict, tmp_path: Path) -> None:
    """Only the modules fleetctl renders may go when the policy drops them;
    a module of the user's own next to main.tf.json is not fleetctl's to destroy."""
    runner = CliRunner()
    env = {**tf_env, "FLEETCTL_STATE": f"sqlite:///{tmp_path / 'state.db'}", "FLEETCTL_SIM_LAUNCH_DELAY_SECONDS": "0"}
    infra = tmp_path / "infra"
    (infra / "mine").mkdir(parents=True)
    (infra / "mine.tf").write_text('module "mine" {\n  source = "./mine"\n}\n')
    (infra / "mine" / "main.tf").write_text(
        'terraform {\n  required_providers {\n    aws = { source = "hashicorp/aws" }\n  }\n}\n\n'
        'resource "aws_sqs_queue" "jobs" {\n  name = "team-jobs"\n}\n')
    common = ["--terraform-dir", str(infra), "--terraform-init", "get"]
    planned = runner.invoke(app, ["plan", *common, "-out", str(tmp_path / "plan.json")], env=env)
    assert planned.exit_code == 0 and "+ module.mine.aws_sqs_queue.jobs" in planned.output, planned.output
    applied = runner.invoke(app, ["apply", str(tmp_path / "plan.json"), "--terraform-init", "get"], env=env)
    assert applied.exit_code == 0, applied.output

    (infra / "mine.tf").unlink()
    refused = runner.invoke(app, ["plan", *common], env=env)
    assert refused.exit_code == 1, refused.output
    assert "Not fleetctl's" in refused.output and "- module.mine.aws_sqs_queue.jobs" in refused.output
    assert "rename" not in refused.output
    assert "module.mine.aws_sqs_queue.jobs" in terraform(infra, tf_env, "state", "list").stdout
    assert not list(infra.glob("fleetctl-look-*.tfplan"))  # the refused plan is not left behind, applyable
    before = sorted(p.name for p in infra.glob("*.tfplan"))
    refused_out = runner.invoke(app, ["plan", *common, "-out", str(tmp_path / "again.json")], env=env)
    assert refused_out.exit_code == 1 and not (tmp_path / "again.json").exists(), refused_out.output
    assert sorted(p.name for p in infra.glob("*.tfplan")) == before  # nor a refused saved plan's


@pytest.mark.parametrize(("name", "prefix"), [
    ("aws_pool_team_queue", "aws_pool_"), ("gcp_pool_x", "gcp_pool_"), ("aws_controller_mine", "aws_controller_")])
def test_plan_refuses_a_module_of_the_users_own_with_a_reserved_name(name: str, prefix: str, tf_env: dict,
                                                                     tmp_path: Path) -> None:
    """docs/terraform.md reserves the module names fleetctl renders (aws_iam,
    aws_controller_*, aws_pool_*, gcp_pool_*, azure_pool_*): a module of the
    user's so named would be taken for fleetctl's, and `fleetctl apply` would
    destroy it once the user removed it. `fleetctl plan` refuses it, naming the
    module, its file and what is reserved, and leaves no plan to apply. (A
    name equal to one fleetctl renders, aws_iam say, Terraform refuses itself:
    "Duplicate module call", naming both files.)"""
    runner = CliRunner()
    env = {**tf_env, "FLEETCTL_STATE": f"sqlite:///{tmp_path / 'state.db'}", "FLEETCTL_SIM_LAUNCH_DELAY_SECONDS": "0"}
    infra = tmp_path / "infra"
    (infra / "mine").mkdir(parents=True)
    (infra / "mine.tf").write_text(f'module "{name}" {{\n  source = "./mine"\n}}\n')
    (infra / "mine" / "main.tf").write_text(
        'terraform {\n  required_providers {\n    aws = { source = "hashicorp/aws" }\n  }\n}\n\n'
        'resource "aws_sqs_queue" "jobs" {\n  name = "team-jobs"\n}\n')
    common = ["--terraform-dir", str(infra), "--terraform-init", "get"]
    refused = runner.invoke(app, ["plan", *common, "-out", str(tmp_path / "plan.json")], env=env)
    assert refused.exit_code == 1, refused.output
    text = " ".join(refused.output.split())
    assert f'module "{name}" (in mine.tf): the prefix {prefix} is reserved for fleetctl\'s modules' in text, text
    assert "Nothing was applied" in text and "Rename them" in text
    assert not (tmp_path / "plan.json").exists() and not list(infra.glob("*.tfplan"))


# ---------------------------------------------------------------- fleetctl plan/apply, both halves


def _policy_for(world, tmp_path: Path, gpu_models: list[str] | None = None) -> Path:  # noqa: ANN001
    def edit(doc) -> None:  # noqa: ANN001
        doc["infrastructure"]["cluster"] = world.cluster
        doc["infrastructure"]["aws"][REGION]["subnet_ids"] = sorted(world.subnets.values())
        doc["infrastructure"]["aws"][REGION]["security_group_ids"] = []
        if gpu_models is not None:
            doc["gpu_models"] = gpu_models

    return _edited(tmp_path, edit, "policy.yaml")  # one file, edited in place between plans


def test_plan_and_apply_carry_out_the_terraform_and_the_api_halves(moto_server: Any, tf_env: dict,
                                                                    tmp_path: Path) -> None:
    runner = CliRunner()
    with moto_world(moto_server, cluster="ml-platform") as world:
        env = {**tf_env, "AWS_ENDPOINT_URL": world.endpoint, "AWS_DEFAULT_REGION": REGION,
               "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
               "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
               "FLEETCTL_STATE": f"sqlite:///{tmp_path / 'state.db'}", "FLEETCTL_CLOUD": "aws"}
        policy = _policy_for(world, tmp_path)  # the example, with moto's subnets
        infra = tmp_path / "infra"
        infra.mkdir()  # fleetctl does not create a missing --terraform-dir
        common = ["--policy", str(policy), "--terraform-dir", str(infra), "--terraform-init", "get"]
        submitted = runner.invoke(app, ["jobs", "submit", str(ROOT / "examples" / "jobs.yaml")], env=env)
        assert submitted.exit_code == 0, submitted.output

        planned = runner.invoke(app, ["plan", *common, "-out", str(tmp_path / "plan.json")], env=env)
        assert planned.exit_code == 0, planned.output
        assert "Terraform:" in planned.output
        assert "+ module.aws_pool_us_east_1_a10g.aws_launch_template.pool" in planned.output
        assert "+ module.aws_controller_us_east_1.aws_sqs_queue.interruptions" in planned.output
        assert "Terraform: 34 to add, 0 to change, 0 to destroy." in planned.output, planned.output
        launches = re.findall(r"\+ launch (\d+) x (\S+) .* in aws us-east-1", planned.output)
        assert launches, planned.output  # the API half: EC2 instances for the example queue

        # Another controller acts on the store: apply changes nothing, Terraform included.
        from fleetctl.store import Store

        other = Store(env["FLEETCTL_STATE"])
        assert other.acquire_lease("controller", "daemon elsewhere", 60.0) is None
        waited = runner.invoke(app, ["apply", str(tmp_path / "plan.json"), "--policy", str(policy),
                                     "--terraform-init", "get", "--lock-timeout", "0.2"], env=env)
        other.release_lease("controller", "daemon elsewhere")
        other.close()
        assert waited.exit_code == 1 and "Terraform included" in waited.output, waited.output
        assert not (infra / "terraform.tfstate").exists()

        applied = runner.invoke(app, ["apply", str(tmp_path / "plan.json"), "--policy", str(policy),
                                      "--terraform-init", "get"], env=env)
        assert applied.exit_code == 0, applied.output
        assert "Terraform: 34 added, 0 changed, 0 destroyed." in applied.output
        assert f"Apply complete! {sum(int(n) for n, _ in launches)} launched" in applied.output, applied.output
        instances = [i for r in world.client("ec2").describe_instances(
            Filters=[{"Name": "tag:fleetctl:cluster", "Values": ["ml-platform"]}])["Reservations"]
            for i in r["Instances"]]
        assert len(instances) == sum(int(n) for n, _ in launches)
        assert {i["InstanceType"] for i in instances} == {t for _, t in launches}

        unchanged = runner.invoke(app, ["plan", *common], env=env)
        assert unchanged.exit_code == 0, unchanged.output
        assert "No changes. The infrastructure matches the policy." in unchanged.output

        # a reclaim warning for the spot node reaches `fleetctl reconcile --once` through EventBridge and SQS
        spot = sorted(i["InstanceId"] for i in instances if i.get("InstanceLifecycle") == "spot")
        assert spot
        world.reclaim(spot[0])
        tick = runner.invoke(app, ["reconcile", "--once", "--policy", str(policy)], env=env)
        assert tick.exit_code == 0, tick.output
        assert "1 requeued after 1 notice\n" in tick.output, tick.output
        attrs = world.client("sqs").get_queue_attributes(
            QueueUrl=world.queue_url, AttributeNames=["ApproximateNumberOfMessages",
                                                      "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        assert attrs == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}

        # a policy edit that allows a new GPU pool is a Terraform change in the next plan
        wider = _policy_for(world, tmp_path, gpu_models=[*load_policy(EXAMPLE).gpu_models, "L40S"])
        edited = runner.invoke(app, ["plan", "--policy", str(wider), "--terraform-dir", str(infra),
                                     "--terraform-init", "get"], env=env)
        assert edited.exit_code == 0, edited.output
        assert "+ module.aws_pool_us_east_1_l40s.aws_launch_template.pool" in edited.output
        assert "Terraform: 2 to add, 0 to change, 0 to destroy." in edited.output


def test_apply_refuses_a_terraform_plan_that_changed_since_plan(moto_server: Any, tf_env: dict,
                                                               tmp_path: Path) -> None:
    runner = CliRunner()
    with moto_world(moto_server, cluster="ml-platform") as world:
        env = {**tf_env, "AWS_ENDPOINT_URL": world.endpoint, "AWS_DEFAULT_REGION": REGION,
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "FLEETCTL_STATE": f"sqlite:///{tmp_path / 'state.db'}", "FLEETCTL_CLOUD": "aws"}
        policy = _policy_for(world, tmp_path, gpu_models=["A10G"])
        infra = tmp_path / "infra"
        infra.mkdir()  # fleetctl does not create a missing --terraform-dir
        planned = runner.invoke(app, ["plan", "--policy", str(policy), "--terraform-dir", str(infra),
                                      "--terraform-init", "get", "-out", str(tmp_path / "plan.json")], env=env)
        assert planned.exit_code == 0, planned.output
        saved = json.loads((tmp_path / "plan.json").read_text())
        tf_file = Path(saved["terraform"]["plan_file"])
        assert tf_file.parent == infra.resolve() and tf_file.name != "fleetctl.tfplan"  # its own file
        # Looking again (plan without -out) does not replace the saved plan's Terraform plan.
        looked = runner.invoke(app, ["plan", "--policy", str(policy), "--terraform-dir", str(infra),
                                     "--terraform-init", "get"], env=env)
        assert looked.exit_code == 0, looked.output
        assert sorted(p.name for p in infra.glob("*.tfplan")) == [tf_file.name]
        # Another directory named at apply, another cloud: refused by name.
        elsewhere = runner.invoke(app, ["apply", str(tmp_path / "plan.json"), "--terraform-dir", str(tmp_path / "x"),
                                        "--terraform-init", "get"], env=env)
        assert elsewhere.exit_code == 1 and "is not the directory" in elsewhere.output, elsewhere.output
        sandbox = runner.invoke(app, ["apply", str(tmp_path / "plan.json"), "--cloud", "sim"], env=env)
        assert sandbox.exit_code == 1 and "was made with --cloud aws" in sandbox.output, sandbox.output
        # A terraform section copied from a plan of another policy's infrastructure: refused.
        (tmp_path / "other").mkdir()
        other_policy = _policy_for(world, tmp_path / "other", gpu_models=["A10G", "T4"])
        (tmp_path / "infra2").mkdir()
        other = runner.invoke(app, ["plan", "--policy", str(other_policy), "--state",
                                    f"sqlite:///{tmp_path / 'other.db'}", "--terraform-dir", str(tmp_path / "infra2"),
                                    "--terraform-init", "get", "-out", str(tmp_path / "other.json")], env=env)
        assert other.exit_code == 0, other.output
        swapped = {**saved, "terraform": json.loads((tmp_path / "other.json").read_text())["terraform"]}
        (tmp_path / "swapped.json").write_text(json.dumps(swapped))
        refused = runner.invoke(app, ["apply", str(tmp_path / "swapped.json"), "--terraform-init", "get"], env=env)
        assert refused.exit_code == 1
        assert "was not made from what this policy renders" in refused.output, refused.output
        assert not (tmp_path / "infra2" / "terraform.tfstate").exists()
        # The saved Terraform plan file changed since: refused.
        tf_file.write_bytes(b"tampered")
        refused = runner.invoke(app, ["apply", str(tmp_path / "plan.json"), "--terraform-init", "get"], env=env)
        assert refused.exit_code == 1
        assert "is not the Terraform plan" in refused.output and "nothing was changed" in refused.output
        assert not (infra / "terraform.tfstate").exists()


def test_an_api_launch_refused_after_terraform_applied_says_what_terraform_did(tf_env: dict, tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Terraform applies, then the cloud refuses the first API launch: the
    error says Terraform's half was applied and no API action ran (it said
    "Nothing was changed.")."""
    from providers.base import InsufficientCapacity
    from providers.sim import SimProvider

    runner = CliRunner()
    env = {**tf_env, "FLEETCTL_STATE": f"sqlite:///{tmp_path / 'state.db'}", "FLEETCTL_SIM_LAUNCH_DELAY_SECONDS": "0"}
    infra = tmp_path / "infra"
    infra.mkdir()  # fleetctl does not create a missing --terraform-dir
    assert runner.invoke(app, ["jobs", "submit", str(ROOT / "examples" / "jobs.yaml")], env=env).exit_code == 0
    planned = runner.invoke(app, ["plan", "--policy", str(EXAMPLE), "--terraform-dir", str(infra),
                                  "--terraform-init", "get", "-out", str(tmp_path / "plan.json")], env=env)
    assert planned.exit_code == 0, planned.output
    added = re.search(r"Terraform: (\d+) to add, 0 to change, 0 to destroy\.", planned.output)
    assert added and "+ launch" in planned.output, planned.output

    def refused(self, request, now):  # noqa: ANN001, ANN202
        raise InsufficientCapacity(f"no capacity for {request.offer.key}")

    monkeypatch.setattr(SimProvider, "launch", refused)
    applied = runner.invoke(app, ["apply", str(tmp_path / "plan.json"), "--terraform-init", "get"], env=env)
    assert applied.exit_code == 1, applied.output
    output = " ".join(applied.output.split())
    assert "Nothing was changed" not in output, output
    assert f"Applied before the API actions: Terraform: {added.group(1)} added, 0 changed, 0 destroyed" in output
    assert "No cloud API action was carried out" in output and "no capacity for" in output
    assert (infra / "terraform.tfstate").exists()


def test_missing_infrastructure_is_a_clear_error_and_nothing_is_written(tmp_path: Path) -> None:
    runner = CliRunner()
    env = {"FLEETCTL_STATE": f"sqlite:///{tmp_path / 'state.db'}"}
    policy = ROOT / "policies" / "backtest-spot.yaml"
    no_infra = runner.invoke(app, ["plan", "--policy", str(policy), "--terraform-dir", str(tmp_path / "infra")],
                             env=env)
    assert no_infra.exit_code == 1 and "no infrastructure section" in no_infra.output
    assert not (tmp_path / "infra").exists()
    aws = runner.invoke(app, ["plan", "--policy", str(policy), "--cloud", "aws"], env=env)
    assert aws.exit_code == 1 and "--cloud aws needs the policy's infrastructure section" in aws.output, aws.output
    explained = runner.invoke(app, ["explain", "any-job", "--policy", str(policy), "--cloud", "aws"], env=env)
    assert explained.exit_code == 1 and "--cloud aws needs the policy's infrastructure section" in explained.output
    unknown = runner.invoke(app, ["status", "--policy", str(policy), "--cloud", "aws,oracle"], env=env)
    assert unknown.exit_code == 2
    assert "choose sim, or one or more of aws, gcp, azure" in " ".join(unknown.output.replace("│", " ").split())
    assert not (tmp_path / ".fleetctl").exists()  # refused before a store was opened


def test_a_missing_terraform_directory_is_refused_not_created(tmp_path: Path) -> None:
    """A mistyped --terraform-dir must not start a second, empty Terraform root
    that plans every role, queue and template again: plan and apply refuse a
    directory that does not exist, name how it was given, create nothing and
    apply nothing (as `terraform -chdir` refuses one)."""
    runner = CliRunner()
    env = {"FLEETCTL_STATE": f"sqlite:///{tmp_path / 'state.db'}", "FLEETCTL_SIM_LAUNCH_DELAY_SECONDS": "0"}
    assert runner.invoke(app, ["jobs", "submit", str(ROOT / "examples" / "jobs.yaml")], env=env).exit_code == 0
    typo = tmp_path / "infra" / "prdo"
    (tmp_path / "infra").mkdir()
    planned = runner.invoke(app, ["plan", "--policy", str(EXAMPLE), "--terraform-dir", str(typo),
                                  "-out", str(tmp_path / "plan.json")], env=env)
    output = " ".join(planned.output.split())
    assert planned.exit_code == 1, planned.output  # every error of plan exits 1, as in Terraform
    assert f"--terraform-dir {typo}: no such directory" in output, output
    assert f"create it first: mkdir -p {typo}" in output, output
    assert not typo.exists() and not (tmp_path / "plan.json").exists()
    applied = runner.invoke(app, ["apply", "--policy", str(EXAMPLE), "--auto-approve"],
                            env={**env, "FLEETCTL_TERRAFORM_DIR": str(typo)})
    output = " ".join(applied.output.split())
    assert applied.exit_code == 2, applied.output
    assert f"FLEETCTL_TERRAFORM_DIR {typo}: no such directory" in output, output
    assert not typo.exists()
    status = runner.invoke(app, ["status", "--policy", str(EXAMPLE), "--format", "json"], env=env)
    assert status.exit_code == 0, status.output
    assert json.loads(status.output)["nodes"] == [], status.output  # nothing was launched
    a_file = tmp_path / "infra" / "main.tf"
    a_file.write_text("")
    not_dir = runner.invoke(app, ["plan", "--policy", str(EXAMPLE), "--terraform-dir", str(a_file)], env=env)
    assert not_dir.exit_code == 1 and f"--terraform-dir {a_file}: not a directory" in not_dir.output


def test_a_missing_terraform_binary_is_named(tmp_path: Path) -> None:
    runner = CliRunner()
    env = {"FLEETCTL_STATE": f"sqlite:///{tmp_path / 'state.db'}"}
    (tmp_path / "infra").mkdir()
    done = runner.invoke(app, ["plan", "--policy", str(EXAMPLE), "--terraform-dir", str(tmp_path / "infra"),
                               "--terraform-binary", "/nonexistent/terraform"], env=env)
    assert done.exit_code == 1 and "terraform binary '/nonexistent/terraform' not found" in done.output


def test_the_daemon_runs_against_aws_on_moto_and_takes_a_reclaim_from_the_queue(moto_server: Any,
                                                                                tmp_path: Path) -> None:
    """`fleetctl daemon --cloud aws`: launches through EC2 Fleet, serves /metrics
    with AWS nodes, takes a reclaim warning from the EventBridge queue, and stops
    cleanly on SIGTERM."""
    import os
    import signal
    import sys

    from tests.controller.test_daemon import scrape, wait_for
    from tests.processes import served_ports

    with moto_world(moto_server, cluster="ml-platform") as world:
        policy = _policy_for(world, tmp_path, gpu_models=["A10G", "T4"])
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
        env.update({"AWS_ENDPOINT_URL": world.endpoint, "AWS_DEFAULT_REGION": REGION,
                    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "FLEETCTL_STATE": f"sqlite:///{tmp_path / 'state.db'}", "FLEETCTL_POLICY": str(policy)})
        jobs = tmp_path / "jobs.yaml"
        jobs.write_text("jobs:\n"
                        "  - {id: finetune, team: ml-product, priority: batch, gpus_per_worker: 1,\n"
                        "     gpu_models: [A10G], vcpus_per_worker: 4, memory_gib_per_worker: 16,\n"
                        "     duration_hours: 3, checkpointable: true, checkpoint_interval_minutes: 30}\n")
        subprocess.run([sys.executable, "-m", "fleetctl", "jobs", "submit", str(jobs)], env=env, check=True,
                       capture_output=True, cwd=tmp_path)
        proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "daemon", "--cloud", "aws", "--policy", str(policy),
                                 "--interval", "0.5", "--interruption-interval", "0.5",
                                 "--metrics-addr", "127.0.0.1:0"],
                                cwd=tmp_path, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            _first, port, _ = served_ports(proc)

            def aws_gpus() -> float:
                try:
                    fams = scrape(port)
                except OSError:
                    return 0.0
                return sum(s.value for s in fams.get("fleetctl_gpus", []) if s.labels.get("provider") == "aws")

            assert wait_for(lambda: aws_gpus() > 0, timeout=30), \
                proc.stderr.read() if proc.poll() is not None else "no AWS GPUs yet"
            [instance] = [i for r in world.client("ec2").describe_instances(
                Filters=[{"Name": "tag:fleetctl:cluster", "Values": ["ml-platform"]}])["Reservations"]
                for i in r["Instances"]]
            world.reclaim(instance["InstanceId"])

            def handled() -> bool:
                fams = scrape(port)
                return any(s.value > 0 for s in fams.get("fleetctl_interruptions", [])
                           if s.name.endswith("_total"))

            assert wait_for(handled, timeout=30)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err
        assert "stopped after" in out
        attrs = world.client("sqs").get_queue_attributes(
            QueueUrl=world.queue_url, AttributeNames=["ApproximateNumberOfMessages",
                                                      "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        assert attrs == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def test_a_notice_handled_while_terraform_applies_stops_the_api_half(tf_env: dict, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`fleetctl apply` holds the controller lease through Terraform's apply, so it
    handles reclaim notices itself meanwhile. Terraform finishes; the plan's API
    actions, made before the notice (they may bind a job to the node it
    cordoned), are not carried out, and the message says what Terraform did."""
    from datetime import datetime, timezone

    from fleetctl.store import Store
    from providers.sim import SimProvider

    runner = CliRunner()
    policy = _edited(tmp_path, lambda doc: doc["scaling"].__setitem__("scale_up_cooldown_seconds", 0))
    infra = tmp_path / "infra"
    infra.mkdir()  # fleetctl does not create a missing --terraform-dir
    env = {**tf_env, "FLEETCTL_STATE": f"sqlite:///{tmp_path / 'state.db'}", "FLEETCTL_SIM_LAUNCH_DELAY_SECONDS": "0",
           "COLUMNS": "200"}
    assert runner.invoke(app, ["jobs", "submit", str(ROOT / "examples" / "jobs.yaml")], env=env).exit_code == 0
    for _ in range(2):
        assert runner.invoke(app, ["reconcile", "--once", "--policy", str(policy)], env=env).exit_code == 0
    (tmp_path / "more.yaml").write_text("id: late-sweep\nteam: ml-product\npriority: batch\ngpus_per_worker: 8\n"
                                        "gpu_models: [T4]\nvcpus_per_worker: 32\nmemory_gib_per_worker: 128\n"
                                        "duration_hours: 4\n")
    assert runner.invoke(app, ["jobs", "submit", str(tmp_path / "more.yaml")], env=env).exit_code == 0
    planned = runner.invoke(app, ["plan", "--policy", str(policy), "--terraform-dir", str(infra),
                                  "--terraform-init", "get", "-out", str(tmp_path / "p.json")], env=env)
    assert planned.exit_code == 0 and "+ launch" in planned.output and "Terraform: 34 to add" in planned.output, \
        planned.output
    store = Store(env["FLEETCTL_STATE"])
    try:
        before = {n.node_id for n in store.nodes()}
        busy = {n for j in store.jobs(active_only=True) for n in j.node_ids}
        node = next(n for n in store.nodes() if n.offer.market.value == "spot" and n.node_id in busy)
        SimProvider(store).reclaim(node.node_id, datetime.now(timezone.utc))  # arrives as apply starts
    finally:
        store.close()
    monkeypatch.setattr("fleetctl.controller.reconcile.ONCE_NOTICE_CHECK_SECONDS", 0.0)
    monkeypatch.setattr("fleetctl.terraform.WAIT_POLL_SECONDS", 0.01)
    applied = runner.invoke(app, ["apply", str(tmp_path / "p.json"), "--policy", str(policy),
                                  "--terraform-init", "get"], env=env)
    text = " ".join(applied.output.split())
    assert applied.exit_code == 1, applied.output
    assert "Terraform: 34 added, 0 changed, 0 destroyed." in text, applied.output
    assert "While applying, 1 reclaim notice handled" in text and "so none was carried out" in text, applied.output
    assert (infra / "terraform.tfstate").exists()
    store = Store(env["FLEETCTL_STATE"])
    try:
        assert not store.interruptions(unhandled_only=True)
        assert {n.node_id for n in store.nodes()} <= before  # none of the plan's launches
    finally:
        store.close()
