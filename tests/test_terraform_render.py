"""Rendering the policy's infrastructure as Terraform JSON, and the guards
around running it (no binary needed here; tests/terraform runs the real one)."""

from __future__ import annotations

import json
import re

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from fleetctl.model import Infrastructure
from fleetctl.policy import load_policy
from fleetctl.terraform import (
    ResourceChange,
    TerraformError,
    TerraformPlan,
    UnexpectedDestroy,
    check_destroys,
    literal,
    render,
    write_root,
)
from providers.aws import API_CALLS
from providers.catalog import load_catalog

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = load_policy(ROOT / "policies" / "example.yaml")


def test_one_pool_per_allowed_gpu_model_sold_in_the_region_and_one_controller() -> None:
    doc = render(EXAMPLE, load_catalog())
    assert sorted(m for m in doc["module"] if m.startswith("aws_")) == [
        "aws_controller_us_east_1", "aws_iam", "aws_pool_us_east_1_a100_40gb", "aws_pool_us_east_1_a100_80gb",
        "aws_pool_us_east_1_a10g", "aws_pool_us_east_1_h100_80gb", "aws_pool_us_east_1_l4",
        "aws_pool_us_east_1_t4", "aws_pool_us_east_1_v100_16gb"]
    pool = doc["module"]["aws_pool_us_east_1_a10g"]
    assert pool["source"] == "./modules/aws-pool" and pool["pool"] == "a10g" and pool["region"] == "us-east-1"
    assert pool["instance_profile_name"] == "${module.aws_iam.node_instance_profile_name}"
    assert pool["gang_placement_group"] is True and pool["controller_url"] == "http://10.0.0.5:9109"
    assert doc["module"]["aws_iam"] == {"source": "./modules/aws-iam", "cluster": "ml-platform",
                                        "tags": {"cost-centre": "4711", "team": "ml-platform"}}
    assert sorted(m for m in doc["module"] if not m.startswith("aws_")) == [
        "azure_pool_eastus_a100_40gb", "azure_pool_eastus_a100_80gb", "azure_pool_eastus_t4",
        "azure_pool_eastus_v100_16gb", "gcp_pool_us_central1_a100_40gb", "gcp_pool_us_central1_a100_80gb",
        "gcp_pool_us_central1_h100_80gb", "gcp_pool_us_central1_l4"]
    gcp = doc["module"]["gcp_pool_us_central1_l4"]
    assert (gcp["machine_type"], gcp["accelerator_count"], gcp["instance_termination_action"]) == (
        "g2-standard-4", 0, "DELETE")
    assert gcp["labels"] == {"cost-centre": "4711", "team": "ml-platform"}
    azure = doc["module"]["azure_pool_eastus_t4"]
    assert azure["vm_size"] == "Standard_NC4as_T4_v3" and azure["location"] == "eastus"
    assert set(doc["provider"]) == {"aws", "google", "azurerm"}


def test_rendering_is_deterministic() -> None:
    assert json.dumps(render(EXAMPLE, load_catalog())) == json.dumps(render(EXAMPLE, tuple(reversed(load_catalog()))))


def test_allowing_a_new_gpu_model_adds_a_pool() -> None:
    narrow = replace(EXAMPLE, gpu_models=("A10G",))
    wider = replace(EXAMPLE, gpu_models=("A10G", "L4"))
    assert set(render(wider, load_catalog())["module"]) - set(render(narrow, load_catalog())["module"]) == {
        "aws_pool_us_east_1_l4", "gcp_pool_us_central1_l4"}


def _with_regions(*regions: str):  # noqa: ANN202 - the example policy with these AWS regions
    infra = EXAMPLE.infrastructure
    assert infra is not None
    return replace(EXAMPLE, infrastructure=replace(infra, aws=tuple(replace(infra.aws[0], region=r) for r in regions)))


@pytest.mark.parametrize(("before", "after"), [
    (("us-east-1",), ("eu-west-1", "us-east-1")),  # a region that sorts first: IAM used to move there
    (("eu-west-1", "us-east-1"), ("us-east-1",)),  # the first region dropped: IAM used to move away
    (("us-east-1",), ("us-east-1", "us-west-2")),
], ids=["add-first", "drop-first", "add-last"])
def test_adding_or_removing_a_region_leaves_the_modules_of_the_others_alone(before: tuple[str, ...],
                                                                            after: tuple[str, ...]) -> None:
    """IAM is global: its roles live in one module of their own, so a region
    added or dropped changes no module of the regions that stay."""
    old, new = (render(_with_regions(*r), load_catalog())["module"] for r in (before, after))
    assert old["aws_iam"] == new["aws_iam"]
    for name in set(old) & set(new):
        assert old[name] == new[name], name
    for region in after:
        pool = new[f"aws_pool_{region.replace('-', '_')}_a10g"]
        assert pool["instance_profile_name"] == "${module.aws_iam.node_instance_profile_name}"


def test_iam_of_an_older_state_moves_to_its_module_from_whichever_region_has_it() -> None:
    """An older fleetctl created the roles (``count``) in the controller
    module of the region that sorted first; the moved blocks chain every
    region's controller module to ``aws_iam``, each address once."""
    moved = render(_with_regions("us-west-2", "eu-west-1", "us-east-1"), load_catalog())["moved"]
    role = [m for m in moved if m["from"].endswith(".aws_iam_role.controller[0]")]
    assert role == [
        {"from": "module.aws_controller_eu_west_1.aws_iam_role.controller[0]",
         "to": "module.aws_controller_us_east_1.aws_iam_role.controller[0]"},
        {"from": "module.aws_controller_us_east_1.aws_iam_role.controller[0]",
         "to": "module.aws_controller_us_west_2.aws_iam_role.controller[0]"},
        {"from": "module.aws_controller_us_west_2.aws_iam_role.controller[0]",
         "to": "module.aws_iam.aws_iam_role.controller"}]
    assert len(moved) == 4 * 3
    assert len({m["from"] for m in moved}) == len({m["to"] for m in moved}) == len(moved)
    assert {m["to"] for m in moved if m["to"].startswith("module.aws_iam.")} == {
        "module.aws_iam.aws_iam_role.controller", "module.aws_iam.aws_iam_role_policy.controller",
        "module.aws_iam.aws_iam_role.node", "module.aws_iam.aws_iam_instance_profile.node"}
    no_aws = replace(EXAMPLE, providers=("gcp", "azure"))
    assert "moved" not in render(no_aws, load_catalog())


def test_user_strings_are_data_never_expressions() -> None:
    assert literal("${file(\"/etc/passwd\")}") == "$${file(\"/etc/passwd\")}"
    assert literal("%{ for x in y }") == "%%{ for x in y }"
    infra = EXAMPLE.infrastructure
    assert infra is not None
    hostile = replace(EXAMPLE, infrastructure=replace(infra, tags=(("owner", "${aws_iam_role.x.arn}"),
                                                                   ("note", "100%{x}"))))
    doc = render(hostile, load_catalog())
    for module in doc["module"].values():
        if "tags" in module:
            assert module["tags"] == {"note": "100%%{x}", "owner": "$${aws_iam_role.x.arn}"}
        else:  # GCP labels: cleaned to label syntax, and still data
            assert module["labels"] == {"note": "100__x_", "owner": "__aws_iam_role_x_arn_"}
    # the only interpolations anywhere are the module references fleetctl writes
    text = json.dumps(doc)
    assert set(re.findall(r"(?<!\$)\$\{([^}]*)\}", text)) <= {
        f"module.{m}.{o}" for m in doc["module"] for o in
        ("node_instance_profile_name", "queue_url", "launch_template_name", "instance_template_name",
         "scale_set_name")}


def test_a_policy_without_infrastructure_is_refused_with_the_reason() -> None:
    with pytest.raises(TerraformError, match="no infrastructure section"):
        render(replace(EXAMPLE, infrastructure=None), load_catalog())
    infra = EXAMPLE.infrastructure
    assert infra is not None
    with pytest.raises(TerraformError, match="does not allow aws"):
        render(replace(EXAMPLE, providers=("gcp",), infrastructure=replace(infra, gcp=None, azure=None)),
               load_catalog())
    with pytest.raises(TerraformError, match="declares no cloud"):
        render(replace(EXAMPLE, infrastructure=Infrastructure(cluster="x")), load_catalog())


def test_write_root_is_atomic_and_idempotent(tmp_path: Path) -> None:
    doc = render(EXAMPLE, load_catalog())
    assert write_root(tmp_path, doc) is True
    assert (tmp_path / "modules" / "aws-pool" / "main.tf").is_file()
    assert json.loads((tmp_path / "main.tf.json").read_text()) == doc
    assert write_root(tmp_path, doc) is False  # nothing changed
    (tmp_path / "modules" / "aws-pool" / "stale.tf").write_text("# left over\n")
    assert write_root(tmp_path, doc) is True and not (tmp_path / "modules" / "aws-pool" / "stale.tf").exists()


def _plan(*changes: tuple[str, tuple[str, ...]]) -> TerraformPlan:
    return TerraformPlan(Path("."), Path("p"), "0" * 64,
                         tuple(ResourceChange(a, a.split(".")[-2], acts) for a, acts in changes))


def test_destroys_are_allowed_only_for_modules_the_policy_dropped() -> None:
    doc = render(replace(EXAMPLE, gpu_models=("A10G",)), load_catalog())
    check_destroys(_plan(("module.aws_pool_us_east_1_l4.aws_launch_template.pool", ("delete",)),
                         ("module.aws_pool_us_east_1_a10g.aws_launch_template.pool", ("update",))), doc)
    with pytest.raises(UnexpectedDestroy, match="aws_sqs_queue.interruptions"):
        check_destroys(_plan(("module.aws_controller_us_east_1.aws_sqs_queue.interruptions",
                              ("delete", "create"))), doc)
    with pytest.raises(UnexpectedDestroy):
        check_destroys(_plan(("aws_instance.stray", ("delete",))), doc)


def test_a_users_module_with_a_reserved_name_is_refused_before_any_destroy_is_judged(tmp_path: Path) -> None:
    """Whose a module is, is decided by its name; a user's module named like
    fleetctl's (aws_iam, aws_controller_*, aws_pool_*, gcp_pool_*,
    azure_pool_*) is refused, so it can never be destroyed as a dropped pool."""
    from fleetctl.terraform import ReservedModuleName

    doc = render(EXAMPLE, load_catalog())
    (tmp_path / "mine.tf.json").write_text('{"module": {"azure_pool_mine": {"source": "./mine"}}}')
    ours = tuple(doc["module"])
    check_destroys(TerraformPlan(tmp_path, tmp_path / "p", "0" * 64, (), (*ours, "mine", "aws_pools")), doc)
    plan = TerraformPlan(tmp_path, tmp_path / "p", "0" * 64,
                         (ResourceChange("module.azure_pool_mine.azurerm_x.y", "azurerm_x", ("delete",)),),
                         (*ours, "azure_pool_mine"))
    with pytest.raises(ReservedModuleName) as refused:
        check_destroys(plan, doc)
    assert 'module "azure_pool_mine" (in mine.tf.json): the prefix azure_pool_ is reserved' in str(refused.value)
    assert isinstance(refused.value, TerraformError)


@pytest.mark.parametrize("address", [
    "module.mine.aws_sqs_queue.jobs",  # the user's own module in the directory
    "module.mine.module.inner.aws_sqs_queue.jobs",
    'module.queues["jobs"].aws_sqs_queue.q',
    "module.aws_pools.aws_launch_template.pool",  # a fleetctl-like name, not fleetctl's scheme
    "aws_sqs_queue.jobs",  # a resource of the root module
], ids=["module", "nested", "for-each", "lookalike", "root"])
@pytest.mark.parametrize("actions", [("delete",), ("delete", "create"), ("create", "delete")],
                         ids=["delete", "replace", "replace-create-first"])
def test_what_fleetctl_does_not_render_is_never_destroyed(address: str, actions: tuple[str, ...]) -> None:
    """The directory may hold the user's own Terraform next to main.tf.json:
    a module fleetctl does not render is not one the policy dropped."""
    doc = render(EXAMPLE, load_catalog())
    with pytest.raises(UnexpectedDestroy) as refused:
        check_destroys(_plan((address, actions)), doc)
    message = str(refused.value)
    assert address in message and "Not fleetctl's" in message and "rename" not in message


def test_the_refusal_names_a_rename_only_for_a_replacement() -> None:
    doc = render(EXAMPLE, load_catalog())
    with pytest.raises(UnexpectedDestroy) as replaced:
        check_destroys(_plan(("module.aws_controller_us_east_1.aws_sqs_queue.interruptions", ("delete", "create"))),
                       doc)
    assert "infrastructure.cluster" in str(replaced.value)
    with pytest.raises(UnexpectedDestroy) as deleted:
        check_destroys(_plan(("module.aws_controller_us_east_1.aws_sqs_queue.interruptions", ("delete",))), doc)
    message = str(deleted.value)
    assert "- module.aws_controller_us_east_1.aws_sqs_queue.interruptions" in message
    assert "no longer declares the resource" in message and "rename" not in message


def test_iam_of_an_older_state_in_a_dropped_region_is_not_destroyed() -> None:
    """Dropping the region whose controller module held the IAM roles (before
    module.aws_iam) in the same edit would delete and recreate them: refused,
    with what to do instead. The rest of the dropped region may go."""
    doc = render(_with_regions("us-east-1"), load_catalog())
    dropped = [("module.aws_controller_eu_west_1.aws_sqs_queue.interruptions", ("delete",)),
               ("module.aws_pool_eu_west_1_a10g.aws_launch_template.pool", ("delete",))]
    check_destroys(_plan(*dropped), doc)
    with pytest.raises(UnexpectedDestroy) as refused:
        check_destroys(_plan(*dropped, ("module.aws_controller_eu_west_1.aws_iam_role.controller[0]", ("delete",)),
                             ("module.aws_iam.aws_iam_role.controller", ("create",))), doc)
    message = str(refused.value)
    assert "- module.aws_controller_eu_west_1.aws_iam_role.controller[0]" in message
    assert "Keep that region for one `fleetctl apply`" in message
    assert "aws_sqs_queue" not in message and "rename" not in message


def test_an_immutable_template_may_be_replaced_create_first_only() -> None:
    doc = render(EXAMPLE, load_catalog())
    template = "module.gcp_pool_us_central1_l4.google_compute_region_instance_template.pool"
    check_destroys(_plan((template, ("create", "delete"))), doc)  # how a template is updated (+/-)
    with pytest.raises(UnexpectedDestroy, match=r"-/\+ module.gcp_pool_us_central1_l4"):
        check_destroys(_plan((template, ("delete", "create"))), doc)  # delete first: a gap, refused
    with pytest.raises(UnexpectedDestroy, match="scale_set"):
        check_destroys(_plan(("module.azure_pool_eastus_t4.azurerm_orchestrated_virtual_machine_scale_set.pool",
                              ("create", "delete"))), doc)


def test_the_controller_iam_policy_lists_exactly_the_calls_the_provider_makes() -> None:
    text = (ROOT / "terraform" / "modules" / "aws-iam" / "main.tf").read_text()
    lists = re.findall(r"\b(?:ec2|sqs|iam)_actions = \[(.*?)\]", text, flags=re.S)
    assert len(lists) == 3
    actions = {a for block in lists for a in re.findall(r'"([a-z0-9]+:[A-Za-z]+)"', block)}
    assert actions == set(API_CALLS)
    # every statement of the controller policy takes its actions from those lists
    policy = text[text.index("controller_policy = jsonencode"):]
    assert not re.search(r'Action\s*=\s*\[\s*"', policy)


def test_modules_are_formatted() -> None:
    done = subprocess.run(["terraform", "fmt", "-check", "-recursive", "-diff", str(ROOT / "terraform")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("address", [
    "google_compute_region_instance_template.mine",  # a resource of the root module
    "module.mine.google_compute_region_instance_template.pool",
    "module.gcp_pools.google_compute_region_instance_template.pool",  # a fleetctl-like name, not fleetctl's scheme
], ids=["root", "module", "lookalike"])
def test_a_users_own_instance_template_is_not_replaced_even_create_first(address: str) -> None:
    """Replacing create-first is how fleetctl's GCP templates take a policy edit; the user's own template
    of the same type is still the user's, which fleetctl apply never replaces (docs/terraform.md). It was
    let through: the type was checked before whose the resource is."""
    doc = render(EXAMPLE, load_catalog())
    with pytest.raises(UnexpectedDestroy) as refused:
        check_destroys(_plan((address, ("create", "delete"))), doc)
    message = str(refused.value)
    assert f"+/- {address}" in message and "Not fleetctl's" in message


def test_turning_gang_placement_groups_off_lets_the_pools_placement_groups_go() -> None:
    infra = EXAMPLE.infrastructure
    assert infra is not None
    off = replace(EXAMPLE, infrastructure=replace(infra, aws=tuple(replace(a, gang_placement_groups=False)
                                                                   for a in infra.aws)))
    doc = render(off, load_catalog())
    assert doc["module"]["aws_pool_us_east_1_a10g"]["gang_placement_group"] is False
    check_destroys(_plan(("module.aws_pool_us_east_1_a10g.aws_placement_group.gang[0]", ("delete",))), doc)


def test_the_pools_of_a_region_are_the_allowed_gpu_models_its_provider_sells_there() -> None:
    """One pool per GPU model, named by it, represented by its smallest shape (fewest GPUs), then the cheapest:
    not a model sold only in another region or by another provider in a region of the same name, not a
    CPU shape; an empty allow-list allows every model."""
    from fleetctl.model import Policy
    from fleetctl.terraform import pools
    from tests.builders import offer

    small_dear = offer("g5.2xlarge", gpus=1, price=1.2, model="A10G", region="r1")
    small_cheap = offer("g5.xlarge", gpus=1, price=1.0, model="A10G", region="r1")
    catalog = (
        offer("g5.12xlarge", gpus=4, price=0.5, model="A10G", region="r1"),  # cheaper per hour, but 4 GPUs
        small_dear, small_cheap,
        offer("g6.xlarge", gpus=1, price=0.8, model="L4", region="r1"),
        offer("p5.48xlarge", gpus=8, price=98.0, model="H100-80GB", region="r2"),  # sold in r2 only
        offer("a2-highgpu-1g", gpus=1, price=3.0, model="A100-40GB", region="r1", provider="gcp"),
        offer("m5.xlarge", gpus=0, price=0.2, region="r1"),  # no GPU: no pool
    )
    assert pools(Policy(), catalog, "aws", "r1") == {"a10g": small_cheap, "l4": catalog[3]}
    assert pools(Policy(gpu_models=("L4", "H100-80GB")), catalog, "aws", "r1") == {"l4": catalog[3]}
    assert pools(Policy(), catalog, "aws", "r2") == {"h100-80gb": catalog[4]}
    assert pools(Policy(), catalog, "gcp", "r1") == {"a100-40gb": catalog[5]}
    assert pools(Policy(), tuple(reversed(catalog)), "aws", "r1") == {"a10g": small_cheap, "l4": catalog[3]}


def test_a_slug_is_lower_case_words_joined_by_underscores() -> None:
    from fleetctl.terraform import _slug

    assert _slug("-US East 1-") == "us_east_1" and _slug("A100-80GB") == "a100_80gb"


def _three_clouds(**policy_fields):  # noqa: ANN202 - (policy, catalog)
    """Two AWS regions (a pool in the second), two GCP regions (an N1 pool in the second), one Azure region."""
    from fleetctl.model import (AwsRegionSettings, AzureRegionSettings, AzureSettings, GcpSettings, Infrastructure,
                                Policy)
    from tests.builders import offer

    infra = Infrastructure(
        cluster="ml", controller_url="http://10.0.0.5:9109", tags=(("cost-centre", "4711"), ("team", "ml")),
        aws=(AwsRegionSettings("eu-west-1", "ami-1", ("subnet-1",)),
             AwsRegionSettings("us-east-1", "ami-2", ("subnet-2",), ("sg-1", "sg-2"), gang_placement_groups=True)),
        gcp=GcpSettings("ml-proj", ("europe-west4", "us-central1"), "img", network="net", subnetwork="sub",
                        service_account_email="sa@ml-proj.iam.gserviceaccount.com", termination_action="STOP"),
        azure=AzureSettings("sub-id", "rg", "ssh-ed25519 AAAA", (AzureRegionSettings("eastus", "/s/subnet", "/s/img"),)))
    catalog = (offer("g5.xlarge", gpus=1, price=1.0, model="A10G", region="us-east-1"),
               offer("n1-standard-8+2xnvidia-tesla-t4", gpus=2, price=0.9, model="T4", region="us-central1",
                     provider="gcp", zone=""),
               offer("Standard_NC4as_T4_v3", gpus=1, price=0.5, model="T4", region="eastus", provider="azure", zone=""))
    return Policy(infrastructure=infra, **policy_fields), catalog


def test_the_whole_document_of_three_clouds_by_hand() -> None:
    policy, catalog = _three_clouds()
    tags = {"cost-centre": "4711", "team": "ml"}
    url = "http://10.0.0.5:9109"
    chain = ("aws_controller_eu_west_1", "aws_controller_us_east_1")
    moved = []
    for resource in ("aws_iam_role.controller", "aws_iam_role_policy.controller", "aws_iam_role.node",
                     "aws_iam_instance_profile.node"):
        moved += [{"from": f"module.{chain[0]}.{resource}[0]", "to": f"module.{chain[1]}.{resource}[0]"},
                  {"from": f"module.{chain[1]}.{resource}[0]", "to": f"module.aws_iam.{resource}"}]
    expected = {
        "//": "Rendered by fleetctl from the policy; edit the policy, not this file.",
        "terraform": {"required_providers": {
            "aws": {"source": "hashicorp/aws", "version": ">= 6.0"},
            "google": {"source": "hashicorp/google", "version": ">= 6.0"},
            "azurerm": {"source": "hashicorp/azurerm", "version": ">= 4.0"}}},
        "provider": {"aws": {"region": "eu-west-1"}, "google": {"project": "ml-proj", "region": "europe-west4"},
                     "azurerm": {"features": {}, "subscription_id": "sub-id"}},
        "module": {
            "aws_controller_eu_west_1": {"source": "./modules/aws-controller", "cluster": "ml", "region": "eu-west-1",
                                         "tags": tags},
            "aws_controller_us_east_1": {"source": "./modules/aws-controller", "cluster": "ml", "region": "us-east-1",
                                         "tags": tags},
            "aws_iam": {"source": "./modules/aws-iam", "cluster": "ml", "tags": tags},
            "aws_pool_us_east_1_a10g": {
                "source": "./modules/aws-pool", "cluster": "ml", "pool": "a10g", "region": "us-east-1",
                "image_id": "ami-2", "instance_profile_name": "${module.aws_iam.node_instance_profile_name}",
                "security_group_ids": ["sg-1", "sg-2"], "controller_url": url, "gang_placement_group": True,
                "tags": tags},
            "azure_pool_eastus_t4": {
                "source": "./modules/azure-pool", "cluster": "ml", "pool": "t4", "resource_group_name": "rg",
                "location": "eastus", "vm_size": "Standard_NC4as_T4_v3", "subnet_id": "/s/subnet", "image_id": "/s/img",
                "admin_ssh_public_key": "ssh-ed25519 AAAA", "controller_url": url, "tags": tags},
            "gcp_pool_us_central1_t4": {
                "source": "./modules/gcp-pool", "cluster": "ml", "pool": "t4", "project": "ml-proj",
                "region": "us-central1", "machine_type": "n1-standard-8", "accelerator_type": "nvidia-tesla-t4",
                "accelerator_count": 2, "image": "img", "network": "net", "subnetwork": "sub",
                "service_account_email": "sa@ml-proj.iam.gserviceaccount.com", "controller_url": url,
                "instance_termination_action": "STOP", "labels": tags},
        },
        "output": {
            "aws_controller_eu_west_1_queue_url": {"value": "${module.aws_controller_eu_west_1.queue_url}"},
            "aws_controller_us_east_1_queue_url": {"value": "${module.aws_controller_us_east_1.queue_url}"},
            "aws_pool_us_east_1_a10g_launch_template": {
                "value": "${module.aws_pool_us_east_1_a10g.launch_template_name}"},
            "azure_pool_eastus_t4_scale_set": {"value": "${module.azure_pool_eastus_t4.scale_set_name}"},
            "gcp_pool_us_central1_t4_template": {"value": "${module.gcp_pool_us_central1_t4.instance_template_name}"},
        },
        "moved": moved,
    }
    assert json.dumps(render(policy, catalog), indent=1) == json.dumps(expected, indent=1)  # the order too


@pytest.mark.parametrize(("providers", "rendered"), [
    (("gcp",), {"google"}), (("azure",), {"azurerm"}), (("aws", "azure"), {"aws", "azurerm"}),
    ((), {"aws", "google", "azurerm"}),
])
def test_only_the_clouds_the_policy_allows_are_rendered(providers, rendered) -> None:
    policy, catalog = _three_clouds(providers=providers)
    doc = render(policy, catalog)
    prefixes = {"aws": "aws_", "google": "gcp_", "azurerm": "azure_"}
    assert set(doc["provider"]) == set(doc["terraform"]["required_providers"]) == rendered
    assert {p for p, prefix in prefixes.items() if any(m.startswith(prefix) for m in doc["module"])} == rendered
    assert {p for p, prefix in prefixes.items() if any(o.startswith(prefix) for o in doc["output"])} == rendered
    assert ("moved" in doc) is ("aws" in rendered)


def test_a_cloud_the_infrastructure_does_not_declare_is_not_rendered_though_allowed() -> None:
    policy, catalog = _three_clouds()
    infra = policy.infrastructure
    assert infra is not None
    doc = render(replace(policy, infrastructure=replace(infra, aws=(), azure=None)), catalog)
    assert set(doc["provider"]) == {"google"} and list(doc["module"]) == ["gcp_pool_us_central1_t4"]
    assert "moved" not in doc
    only_aws = render(replace(policy, infrastructure=replace(infra, gcp=None, azure=None)), catalog)
    assert set(only_aws["provider"]) == {"aws"}


@pytest.mark.parametrize(("declared", "providers", "message"), [
    (("aws", "gcp"), ("azure",), "the policy does not allow aws, gcp (providers: azure); nothing to render"),
    (("aws",), ("azure", "gcp"), "the policy does not allow aws (providers: azure, gcp); nothing to render"),
])
def test_a_policy_that_allows_none_of_the_declared_clouds_says_which_are_which(declared, providers, message) -> None:
    policy, catalog = _three_clouds(providers=providers)
    infra = policy.infrastructure
    assert infra is not None
    infra = replace(infra, gcp=infra.gcp if "gcp" in declared else None,
                    azure=infra.azure if "azure" in declared else None)
    with pytest.raises(TerraformError) as refused:
        render(replace(policy, infrastructure=infra), catalog)
    assert str(refused.value) == message


def test_tags_become_gcp_labels_of_label_syntax() -> None:
    """Lower case letters, digits, '-' and '_', at most 63 characters; a key starts with a letter (else 't')."""
    from fleetctl.terraform import gcp_labels

    labels = gcp_labels((("Cost Centre", "R&D"), ("2024-budget", "Yes"), ("k8s", "x" * 70), ("9" + "a" * 70, "v"),
                         ("l" * 70, "")))
    assert labels == {"cost_centre": "r_d", "t2024-budget": "yes", "k8s": "x" * 63, "t9" + "a" * 61: "v",
                      "l" * 63: ""}
    assert list(labels) == sorted(labels)


def test_a_placement_group_the_policy_keeps_or_another_resource_of_its_module_is_not_deleted() -> None:
    # The delete above is let through only for the resource the off input removes, and only while it is off.
    infra = EXAMPLE.infrastructure
    assert infra is not None
    on = render(EXAMPLE, load_catalog())
    assert on["module"]["aws_pool_us_east_1_a10g"]["gang_placement_group"] is True
    group = "module.aws_pool_us_east_1_a10g.aws_placement_group.gang[0]"
    with pytest.raises(UnexpectedDestroy, match=re.escape(f"- {group}")):
        check_destroys(_plan((group, ("delete",))), on)
    off = render(replace(EXAMPLE, infrastructure=replace(infra, aws=tuple(replace(a, gang_placement_groups=False)
                                                                            for a in infra.aws))), load_catalog())
    template = "module.aws_pool_us_east_1_a10g.aws_launch_template.pool"
    with pytest.raises(UnexpectedDestroy, match=re.escape(f"- {template}")):
        check_destroys(_plan((template, ("delete",))), off)
    with pytest.raises(UnexpectedDestroy, match=re.escape(f"-/+ {group}")):  # a replacement is no switch-off
        check_destroys(_plan((group, ("delete", "create"))), off)
