"""Terraform: the reviewed, slow half of the fleet (``docs/terraform.md``).

From the policy's ``infrastructure`` section this module renders a root
module as JSON (``main.tf.json``) into a working directory, next to copies of
the modules it calls (``modules/aws-iam``, ``modules/aws-controller``, ...), so
the directory is self-contained and can be committed and reviewed as is:

* one ``aws-iam`` module (``aws_iam``) with the controller's and the nodes'
  IAM roles: IAM is global, so they belong to no region, and adding or
  removing a region leaves them where they are;
* one ``aws-controller`` module per AWS region (interruption queue and
  EventBridge rules);
* one ``aws-pool`` module per GPU pool and region: every GPU model the
  policy allows (``gpu_models``, empty = any) that the catalog sells in that
  region, so allowing a new GPU model in the policy shows up as a new pool in
  the next plan.

It then runs the real ``terraform`` binary: ``init`` (or only ``get`` when
providers are pre-installed, see :class:`Terraform`), ``plan -out``,
``show -json`` of the saved plan, and ``apply`` of exactly that saved plan.

Every user-provided string (cluster, URLs, ids, tags) reaches the JSON as
data: Terraform's JSON syntax reads ``${`` and ``%{`` in any string as a
template, so :func:`literal` escapes them (``$${``, ``%%{``). Expressions are
only ever the references this module writes itself.
"""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from fleetctl.model import CLOUDS, Infrastructure, Offer, Policy
from fleetctl.naming import pool_name

ROOT_FILE: Final[str] = "main.tf.json"
PLAN_FILE: Final[str] = "fleetctl.tfplan"
#: How often ``Terraform.run`` calls its ``while_waiting`` while Terraform runs.
WAIT_POLL_SECONDS: Final[float] = 1.0
MODULES: Final[tuple[str, ...]] = ("aws-iam", "aws-controller", "aws-pool", "gcp-pool", "azure-pool")
#: The modules shipped with fleetctl: package data, so an installed fleetctl has them too (in a
#: source checkout ``fleetctl/terraform_modules`` is a symlink to ``terraform/modules``).
SHIPPED_MODULES: Final[Path] = Path(__file__).resolve().parent / "terraform_modules"


class TerraformError(Exception):
    """Rendering or running Terraform failed; the message says what and where."""


class UnexpectedDestroy(TerraformError):
    """Terraform proposes to destroy or replace something fleetctl did not ask for."""


class ReservedModuleName(TerraformError):
    """A module of the user's own in the directory has a name reserved for fleetctl's modules."""


# =========================================================================== rendering


def literal(value: str) -> str:
    """A user string as a literal in Terraform JSON (no interpolation, no directives)."""
    return value.replace("${", "$${").replace("%{", "%%{")


def _literal_map(values: Mapping[str, str]) -> dict[str, str]:
    return {literal(k): literal(v) for k, v in sorted(values.items())}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


#: The module of the cluster's IAM roles: one, whatever the regions (IAM is global).
IAM_MODULE: Final[str] = "aws_iam"
#: The resources of ``modules/aws-iam``; older fleetctl kept them in a controller module.
IAM_RESOURCES: Final[tuple[str, ...]] = (
    "aws_iam_role.controller", "aws_iam_role_policy.controller", "aws_iam_role.node", "aws_iam_instance_profile.node")


def controller_module_name(region: str) -> str:
    return f"aws_controller_{_slug(region)}"


def pool_module_name(region: str, pool: str) -> str:
    return f"aws_pool_{_slug(region)}_{_slug(pool)}"


def gcp_pool_module_name(region: str, pool: str) -> str:
    return f"gcp_pool_{_slug(region)}_{_slug(pool)}"


def azure_pool_module_name(region: str, pool: str) -> str:
    return f"azure_pool_{_slug(region)}_{_slug(pool)}"


#: The names of the module calls fleetctl renders (the functions above): the
#: only modules ``fleetctl apply`` may destroy, and only once the policy drops
#: them. Every other module and resource in the directory is the user's.
FLEETCTL_MODULE: Final[re.Pattern[str]] = re.compile(  # fullmatch
    rf"{IAM_MODULE}|aws_controller_[a-z0-9_]+|aws_pool_[a-z0-9_]+|gcp_pool_[a-z0-9_]+|azure_pool_[a-z0-9_]+")


def pools(policy: Policy, catalog: Iterable[Offer], provider: str, region: str) -> dict[str, Offer]:
    """GPU pools of one provider's region: pool name -> the pool's representative
    offer (the smallest, then cheapest, shape of an allowed GPU model the
    catalog sells there; its type is the template's default)."""
    allowed = set(policy.gpu_models)
    found: dict[str, Offer] = {}
    for o in sorted((o for o in catalog if o.provider == provider and o.region == region
                     and o.instance_type.gpu_model and (not allowed or o.instance_type.gpu_model in allowed)),
                    key=lambda o: (o.instance_type.gpu_count, o.usd_per_hour, o.key)):
        found.setdefault(pool_name(o.instance_type.gpu_model or ""), o)
    return dict(sorted(found.items()))


def aws_pools(policy: Policy, catalog: Iterable[Offer], region: str) -> tuple[str, ...]:
    """GPU pools (pool names) of one AWS region: models the policy allows that the catalog sells there."""
    return tuple(pools(policy, catalog, "aws", region))


def render(policy: Policy, catalog: Iterable[Offer]) -> dict[str, Any]:
    """The root module (Terraform JSON syntax) for ``policy``: the pools of
    every cloud the policy allows and declares. Deterministic: the same policy
    and catalog give the same document, byte for byte."""
    infra = policy.infrastructure
    if infra is None:
        raise TerraformError("the policy has no infrastructure section: add one (cluster, controller_url, and "
                             "aws, gcp and/or azure settings) to render Terraform")
    allowed = set(policy.providers) or set(CLOUDS)
    clouds = {"aws": bool(infra.aws), "gcp": infra.gcp is not None, "azure": infra.azure is not None}
    declared = [c for c, present in clouds.items() if present]
    if not declared:
        raise TerraformError("infrastructure declares no cloud (aws regions, gcp or azure); nothing to render")
    if not set(declared) & allowed:
        raise TerraformError(f"the policy does not allow {', '.join(declared)} (providers: "
                             f"{', '.join(sorted(allowed))}); nothing to render")
    offers = tuple(catalog)
    modules: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    required: dict[str, Any] = {}
    providers: dict[str, Any] = {}
    moved: list[dict[str, str]] = []
    if infra.aws and "aws" in allowed:
        required["aws"] = {"source": "hashicorp/aws", "version": ">= 6.0"}
        providers["aws"] = {"region": literal(infra.aws[0].region)}
        _render_aws(policy, infra, offers, modules, outputs, moved)
    if infra.gcp is not None and "gcp" in allowed:
        required["google"] = {"source": "hashicorp/google", "version": ">= 6.0"}
        providers["google"] = {"project": literal(infra.gcp.project), "region": literal(infra.gcp.regions[0])}
        _render_gcp(policy, infra, offers, modules, outputs)
    if infra.azure is not None and "azure" in allowed:
        required["azurerm"] = {"source": "hashicorp/azurerm", "version": ">= 4.0"}
        providers["azurerm"] = {"features": {}, "subscription_id": literal(infra.azure.subscription_id)}
        _render_azure(policy, infra, offers, modules, outputs)
    return {
        "//": "Rendered by fleetctl from the policy; edit the policy, not this file.",
        "terraform": {"required_providers": required},
        "provider": providers,
        "module": dict(sorted(modules.items())),
        "output": dict(sorted(outputs.items())),
        **({"moved": moved} if moved else {}),
    }


def legacy_iam_moves(regions: Iterable[str]) -> list[dict[str, str]]:
    """``moved`` blocks that bring the IAM resources of a state written by an
    older fleetctl into :data:`IAM_MODULE`.

    fleetctl used to create them (with ``count``) in the controller module of
    the region that sorted first, which is the first region of some past
    policy: which one, only the state knows. So the blocks chain every
    controller module of ``regions`` to the next and the last to
    :data:`IAM_MODULE` (``A -> B -> ... -> aws_iam``): Terraform follows a
    chain from wherever the state has the resources, and a ``moved`` block
    whose ``from`` is not in the state does nothing. A chain, because two
    blocks may not move to the same address.

    Design choice: the blocks depend on the policy only, not on the state, so
    rendering stays pure (``fleetctl apply`` renders again and compares); they
    stay in the document, as Terraform recommends for published modules. The
    one case they cannot cover, IAM in a region the same edit drops, is
    refused by :func:`check_destroys`."""
    chain = [controller_module_name(r) for r in sorted(set(regions))]
    moves = []
    for resource in IAM_RESOURCES:
        for here, there in zip(chain, [*chain[1:], None]):
            to = f"module.{there}.{resource}[0]" if there else f"module.{IAM_MODULE}.{resource}"
            moves.append({"from": f"module.{here}.{resource}[0]", "to": to})
    return moves


def _render_aws(policy: Policy, infra: Infrastructure, offers: tuple[Offer, ...], modules: dict[str, Any],
                outputs: dict[str, Any], moved: list[dict[str, str]]) -> None:
    extra_tags = _literal_map(dict(infra.tags))
    modules[IAM_MODULE] = {
        "source": "./modules/aws-iam",
        "cluster": literal(infra.cluster),
        "tags": extra_tags,
    }
    moved.extend(legacy_iam_moves(s.region for s in infra.aws))
    for settings in infra.aws:
        controller = controller_module_name(settings.region)
        modules[controller] = {
            "source": "./modules/aws-controller",
            "cluster": literal(infra.cluster),
            "region": literal(settings.region),
            "tags": extra_tags,
        }
        outputs[f"{controller}_queue_url"] = {"value": f"${{module.{controller}.queue_url}}"}
        for pool in aws_pools(policy, offers, settings.region):
            name = pool_module_name(settings.region, pool)
            modules[name] = {
                "source": "./modules/aws-pool",
                "cluster": literal(infra.cluster),
                "pool": literal(pool),
                "region": literal(settings.region),
                "image_id": literal(settings.image_id),
                "instance_profile_name": f"${{module.{IAM_MODULE}.node_instance_profile_name}}",
                "security_group_ids": [literal(s) for s in settings.security_group_ids],
                "controller_url": literal(infra.controller_url),
                "gang_placement_group": settings.gang_placement_groups,
                "tags": extra_tags,
            }
            outputs[f"{name}_launch_template"] = {"value": f"${{module.{name}.launch_template_name}}"}


def gcp_labels(tags: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Tags as GCP labels (lowercase letters, digits, '-' and '_'; keys start with a letter)."""
    def clean(text: str) -> str:
        return re.sub(r"[^a-z0-9_-]", "_", text.lower())[:63]

    labels = {}
    for key, value in tags:
        k = clean(key)
        k = k if k[:1].isalpha() else f"t{k}"[:63]
        labels[k] = clean(value)
    return dict(sorted(labels.items()))


def _render_gcp(policy: Policy, infra: Infrastructure, offers: tuple[Offer, ...], modules: dict[str, Any],
                outputs: dict[str, Any]) -> None:
    from providers.catalog import parse_gcp_n1_gpu_type_name

    gcp = infra.gcp
    assert gcp is not None
    for region in gcp.regions:
        for pool, offer in pools(policy, offers, "gcp", region).items():
            name = gcp_pool_module_name(region, pool)
            n1 = parse_gcp_n1_gpu_type_name(offer.instance_type.name)
            machine, accelerator, count = n1 if n1 else (offer.instance_type.name, "", 0)
            modules[name] = {
                "source": "./modules/gcp-pool",
                "cluster": literal(infra.cluster),
                "pool": literal(pool),
                "project": literal(gcp.project),
                "region": literal(region),
                "machine_type": literal(machine),
                "accelerator_type": literal(accelerator),
                "accelerator_count": count,
                "image": literal(gcp.image),
                "network": literal(gcp.network),
                "subnetwork": literal(gcp.subnetwork),
                "service_account_email": literal(gcp.service_account_email),
                "controller_url": literal(infra.controller_url),
                "instance_termination_action": gcp.termination_action,
                "labels": _literal_map(gcp_labels(infra.tags)),
            }
            outputs[f"{name}_template"] = {"value": f"${{module.{name}.instance_template_name}}"}


def _render_azure(policy: Policy, infra: Infrastructure, offers: tuple[Offer, ...], modules: dict[str, Any],
                  outputs: dict[str, Any]) -> None:
    azure = infra.azure
    assert azure is not None
    for settings in azure.regions:
        for pool, offer in pools(policy, offers, "azure", settings.region).items():
            name = azure_pool_module_name(settings.region, pool)
            modules[name] = {
                "source": "./modules/azure-pool",
                "cluster": literal(infra.cluster),
                "pool": literal(pool),
                "resource_group_name": literal(azure.resource_group),
                "location": literal(settings.region),
                "vm_size": literal(offer.instance_type.name),
                "subnet_id": literal(settings.subnet_id),
                "image_id": literal(settings.image_id),
                "admin_ssh_public_key": literal(azure.admin_ssh_public_key),
                "controller_url": literal(infra.controller_url),
                "tags": _literal_map(dict(infra.tags)),
            }
            outputs[f"{name}_scale_set"] = {"value": f"${{module.{name}.scale_set_name}}"}


def write_root(directory: Path, document: Mapping[str, Any], *, modules_from: Path = SHIPPED_MODULES) -> bool:
    """Write the root module and the module copies into ``directory``; returns
    whether anything changed. Files are replaced atomically and only when
    their content differs, so an unchanged policy leaves the directory alone."""
    if not all((modules_from / m / "main.tf").is_file() for m in MODULES):
        raise TerraformError(f"fleetctl's Terraform modules are not in {modules_from} (expected {', '.join(MODULES)})")
    directory.mkdir(parents=True, exist_ok=True)
    changed = _write_if_changed(directory / ROOT_FILE, json.dumps(document, indent=2, sort_keys=False) + "\n")
    for module in MODULES:
        source, target = modules_from / module, directory / "modules" / module
        target.mkdir(parents=True, exist_ok=True)
        wanted = {p.name for p in source.iterdir() if p.is_file()}
        for stale in (p for p in target.iterdir() if p.is_file() and p.name not in wanted):
            stale.unlink()
            changed = True
        for name in sorted(wanted):
            if not (target / name).exists() or not filecmp.cmp(source / name, target / name, shallow=False):
                _write_if_changed(target / name, (source / name).read_text())
                changed = True
    return changed


def _write_if_changed(path: Path, text: str) -> bool:
    if path.exists() and path.read_text() == text:
        return False
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


# =========================================================================== running


@dataclass(frozen=True, slots=True)
class ResourceChange:
    """One resource change of a saved Terraform plan (``terraform show -json``)."""

    address: str
    type: str
    actions: tuple[str, ...]  # ("create",), ("update",), ("delete", "create"), ("delete",), ...
    previous_address: str | None = None  # a `moved` block moves it here (actions ("no-op",) when only moved)

    @property
    def symbol(self) -> str:
        return {("create",): "+", ("update",): "~", ("delete",): "-", ("read",): "<=",
                ("delete", "create"): "-/+", ("create", "delete"): "+/-", ("no-op",): "->"}.get(self.actions, "?")

    @property
    def destroys(self) -> bool:
        return "delete" in self.actions


@dataclass(frozen=True, slots=True)
class TerraformPlan:
    """A saved Terraform plan and what it changes."""

    directory: Path
    plan_file: Path
    sha256: str  # of the plan file: `fleetctl apply` refuses a plan file that changed
    changes: tuple[ResourceChange, ...]
    #: The names of the module calls in the root module (fleetctl's and the user's), as Terraform read them.
    module_calls: tuple[str, ...] = ()

    @property
    def has_changes(self) -> bool:
        return bool(self.changes)

    def counts(self) -> dict[str, int]:
        add = sum(1 for c in self.changes if "create" in c.actions)
        change = sum(1 for c in self.changes if c.actions == ("update",))
        destroy = sum(1 for c in self.changes if c.destroys)
        return {"add": add, "change": change, "destroy": destroy}


class Terraform:
    """The ``terraform`` binary in one working directory.

    ``init``: ``"init"`` runs ``terraform init`` (providers from the registry or
    your mirror); ``"get"`` only installs the local modules, for setups whose
    providers need no installing (``dev_overrides`` in the CLI config, as in
    fleetctl's tests).
    """

    def __init__(self, directory: Path, *, binary: str = "terraform", init: str = "init",
                 env: Mapping[str, str] | None = None, timeout_seconds: float = 1800) -> None:
        if init not in ("init", "get"):
            raise ValueError("init must be 'init' or 'get'")
        self.directory = directory
        self.binary = binary
        self.init_mode = init
        self.env = {**os.environ, "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1", **(env or {})}
        self.timeout = timeout_seconds

    def run(self, *args: str, ok: Sequence[int] = (0,),
            while_waiting: Callable[[], object] | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``terraform ARGS`` in the directory; ``TerraformError`` if it
        exits other than ``ok`` or outlives the timeout. ``while_waiting`` is
        called every ``WAIT_POLL_SECONDS`` while it runs (``apply`` handles
        reclaim notices there).

        Design choice: Terraform is never cut short by what stops fleetctl. If
        ``while_waiting`` raises, or fleetctl is interrupted (Ctrl-C, or
        SIGTERM's SystemExit), Terraform is waited for and the error raised
        then: a Terraform killed mid-apply leaves resources it created out of
        its state, and the state locked. A terminal's Ctrl-C reaches Terraform
        too (the same process group), which stops at its next safe point, and
        a second one stops it at once, as when it runs alone. Its output goes
        to files, not pipes: if fleetctl itself is killed, Terraform, writing
        to a pipe nobody reads, would die of SIGPIPE before it saved its
        state (it did, measured with SIGTERM sent to fleetctl alone: three
        resources created, none in the state, the lock left)."""
        if shutil.which(self.binary, path=self.env.get("PATH")) is None and not Path(self.binary).is_file():
            raise TerraformError(f"terraform binary {self.binary!r} not found: install Terraform >= 1.5 or pass "
                                 "--terraform-binary")
        command = [self.binary, *args]
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out, \
                tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
            proc = subprocess.Popen(command, cwd=self.directory, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=err)
            try:
                self._wait(proc, args[0], while_waiting)
            except BaseException:
                self._wait_out(proc, args[0])
                raise
            out.seek(0)
            err.seek(0)
            done = subprocess.CompletedProcess(command, proc.returncode, out.read(), err.read())
        if done.returncode not in ok:
            detail = (done.stderr.strip() or done.stdout.strip())[-4000:]
            raise TerraformError(f"terraform {' '.join(args[:1])} failed in {self.directory} "
                                 f"(exit {done.returncode}):\n{detail}")
        return done

    def _wait(self, proc: subprocess.Popen, verb: str, while_waiting: Callable[[], object] | None) -> None:
        """Until ``proc`` exits; kills it past the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            try:
                proc.wait(timeout=max(0.0, min(left, WAIT_POLL_SECONDS) if while_waiting else left))
                return
            except subprocess.TimeoutExpired as exc:
                if time.monotonic() >= deadline:
                    proc.kill()
                    proc.wait()
                    raise TerraformError(f"terraform {verb} in {self.directory} timed out after "
                                         f"{self.timeout:.0f} s") from exc
            if while_waiting is not None:
                while_waiting()

    @staticmethod
    def _wait_out(proc: subprocess.Popen, verb: str) -> None:
        """Wait for ``proc`` to exit whatever interrupts the wait (another Ctrl-C reaches Terraform
        too, and its second stops it at once), saying so once on stderr."""
        if proc.poll() is None:
            sys.stderr.write(f"fleetctl: waiting for terraform {verb} (pid {proc.pid}) to exit before stopping, "
                             "so that its state is saved and unlocked\n")
            sys.stderr.flush()
        while True:
            try:
                proc.wait()
                return
            except (KeyboardInterrupt, SystemExit):
                continue

    def init(self) -> None:
        if self.init_mode == "init":
            self.run("init", "-input=false", "-no-color")
        else:
            self.run("get", "-no-color")

    def validate(self) -> None:
        self.run("validate", "-no-color")

    def plan(self, name: str = PLAN_FILE) -> TerraformPlan:
        """``terraform plan -out=NAME`` (in the directory) and the changes of the saved plan."""
        self.init()
        plan_file = self.directory / name
        self.run("plan", "-input=false", "-no-color", "-lock-timeout=60s", f"-out={name}")
        return self.read_plan(plan_file)

    def read_plan(self, plan_file: Path) -> TerraformPlan:
        shown = self.run("show", "-json", "-no-color", plan_file.name)
        try:
            doc = json.loads(shown.stdout)
        except json.JSONDecodeError as exc:
            raise TerraformError(f"terraform show -json {plan_file}: not JSON ({exc.msg})") from exc
        # A move alone is a no-op with a previous address; it is kept: the state records it only on apply.
        changes = tuple(
            ResourceChange(rc["address"], rc["type"], tuple(rc["change"]["actions"]), rc.get("previous_address"))
            for rc in doc.get("resource_changes", [])
            if rc.get("mode", "managed") == "managed"
            and (tuple(rc["change"]["actions"]) != ("no-op",) or rc.get("previous_address"))
        )
        root = (doc.get("configuration") or {}).get("root_module") or {}
        calls = tuple(sorted(root.get("module_calls") or {}))
        return TerraformPlan(self.directory, plan_file, sha256_of(plan_file), changes, calls)

    def apply(self, plan: TerraformPlan, while_waiting: Callable[[], object] | None = None) -> None:
        """Apply exactly the saved plan (refused if the file changed since it
        was read). ``while_waiting``: as ``run``'s."""
        if sha256_of(plan.plan_file) != plan.sha256:
            raise TerraformError(f"{plan.plan_file} changed since it was planned; run `fleetctl plan` again")
        self.run("apply", "-input=false", "-no-color", "-lock-timeout=60s", plan.plan_file.name,
                 while_waiting=while_waiting)


def sha256_of(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise TerraformError(f"cannot read {path}: {exc.strerror or exc}") from exc


#: Resources the modules replace to change them: immutable by design (a GCP
#: instance template cannot be edited) and declared ``create_before_destroy``
#: with a ``name_prefix``, so the new one exists before the old one goes and
#: nothing that refers to it breaks. A replacement of these (``create`` then
#: ``delete``) is how a policy edit reaches them, never a loss.
REPLACED_TO_UPDATE: frozenset[str] = frozenset({"google_compute_region_instance_template"})


#: Resources a module declares only while one of its inputs is on: (address in
#: the module, input). Turning the input off in the policy deletes the resource
#: from a module that stays, which is what the edit asks for.
SWITCHED_BY_INPUT: tuple[tuple[str, str], ...] = (("aws_placement_group.gang[0]", "gang_placement_group"),)


def _switched_off(document: Mapping[str, Any], module: str, resource: str) -> bool:
    """Whether ``resource`` of the kept ``module`` is one an input of the
    rendered module turns off (``SWITCHED_BY_INPUT``), and that input is off."""
    inputs = document.get("module", {}).get(module, {})
    return any(resource == address and inputs.get(name) is False for address, name in SWITCHED_BY_INPUT)


def check_destroys(plan: TerraformPlan, document: Mapping[str, Any]) -> None:
    """Refuse destroys the policy did not ask for: a resource may only be
    destroyed when its whole module is one fleetctl renders (``FLEETCTL_MODULE``)
    and left the rendered configuration (a GPU pool or region the policy no
    longer allows), or, in such a module that stays, replaced create-first when
    replacing is how it is updated (``REPLACED_TO_UPDATE``), or deleted when
    the policy turned off the input that declares it (``SWITCHED_BY_INPUT``:
    a pool's gang placement group; before 2026-11-28 that edit was refused,
    blamed on edited module copies). Refused: replacing or deleting anything
    else in a module that stays (a queue, a launch template, a scale set);
    anything of the user's own in the directory (their modules and resources);
    and IAM roles an older fleetctl kept in the controller module of a region
    the policy drops (see :func:`legacy_iam_moves`).

    Whose a module is, is decided by its name, so first the names are checked
    (:func:`check_module_names`)."""
    check_module_names(plan, document)
    kept = set(document.get("module", {}))
    in_kept: list[ResourceChange] = []
    not_ours: list[ResourceChange] = []
    legacy_iam: list[ResourceChange] = []
    for change in plan.changes:
        if not change.destroys:
            continue
        match = re.match(r"^module\.([A-Za-z0-9_-]+)\.(.*)$", change.address)
        if match is None or not FLEETCTL_MODULE.fullmatch(match.group(1)):
            not_ours.append(change)  # the user's, even a template replaced create-first
        elif match.group(1) in kept:
            if change.type in REPLACED_TO_UPDATE and change.actions == ("create", "delete"):
                continue
            if change.actions == ("delete",) and _switched_off(document, match.group(1), match.group(2)):
                continue
            in_kept.append(change)
        elif IAM_MODULE in kept and re.sub(r"\[0\]$", "", match.group(2)) in IAM_RESOURCES:
            legacy_iam.append(change)
    if not (in_kept or not_ours or legacy_iam):
        return
    parts = ["Terraform proposes to destroy or replace resources that fleetctl apply does not destroy. "
             "Nothing was applied."]
    if in_kept:
        replaced = any("create" in c.actions for c in in_kept)
        deleted = any(c.actions == ("delete",) for c in in_kept)
        causes = []
        if replaced:
            causes.append("a replacement comes from a change Terraform cannot make in place, such as a new name "
                          "after a policy edit that renames what the modules create (infrastructure.cluster, an "
                          "Azure resource group)")
        if deleted:
            causes.append("a delete means the module no longer declares the resource (the module copies in the "
                          "directory were edited)")
        causes.append("or the resources were changed outside fleetctl")
        parts.append("In modules the policy still asks for, where it would take live capacity or pending notices "
                     "with it (" + "; ".join(causes) + "):\n" + _change_lines(in_kept))
    if legacy_iam:
        parts.append(f"The cluster's IAM roles, in the controller module of a region the policy drops: fleetctl "
                     f"before module.{IAM_MODULE} kept them in the module of the region that sorted first, and "
                     f"dropping it in the same edit would delete the roles and create them again (nodes lose their "
                     f"instance profile meanwhile). Keep that region for one `fleetctl apply`, which moves them to "
                     f"module.{IAM_MODULE}, then drop it:\n" + _change_lines(legacy_iam))
    if not_ours:
        parts.append("Not fleetctl's: fleetctl renders only main.tf.json and its modules (aws_iam, "
                     "aws_controller_*, aws_pool_*, gcp_pool_*, azure_pool_*); the rest of the directory is "
                     "yours, and fleetctl apply never destroys or replaces it:\n" + _change_lines(not_ours))
    parts.append("Undo the change, or make it with terraform yourself in the directory, then plan again.")
    raise UnexpectedDestroy("\n".join(parts))


#: The reserved names, as docs/terraform.md and the messages spell them.
RESERVED_MODULE_NAMES: Final[str] = f"{IAM_MODULE}, aws_controller_*, aws_pool_*, gcp_pool_*, azure_pool_*"


def check_module_names(plan: TerraformPlan, document: Mapping[str, Any]) -> None:
    """Refuse a directory whose own Terraform files call a module by a name
    reserved for fleetctl's (:data:`FLEETCTL_MODULE`; docs/terraform.md).

    Design choice: :func:`check_destroys` lets a module that left the
    rendered document be destroyed when its name is one of fleetctl's, so a
    module of the user's named ``aws_pool_...`` would be destroyed by
    `fleetctl apply` once the user removed it, and one named exactly like a
    rendered pool would clash with it the day the policy allows that pool.
    Names are the only record of whose a module is (the state keeps no
    source), so they are kept apart here, before anything is applied. The
    names come from Terraform's own reading of the directory (``terraform
    show -json``), so ``.tf`` and ``.tf.json`` files count alike."""
    rendered = set(document.get("module", {}))
    taken = [name for name in plan.module_calls if FLEETCTL_MODULE.fullmatch(name) and name not in rendered]
    if not taken:
        return
    lines = []
    for name in taken:
        files = _files_naming(plan.directory, name)
        where = f" (in {', '.join(files)})" if files else ""
        prefix = IAM_MODULE if name == IAM_MODULE else re.sub(r"^((?:aws|gcp|azure)_(?:pool|controller)_).*$", r"\1",
                                                              name)
        reserved = f"the name {IAM_MODULE}" if name == IAM_MODULE else f"the prefix {prefix}"
        lines.append(f'  module "{name}"{where}: {reserved} is reserved for fleetctl\'s modules')
    raise ReservedModuleName(
        f"Your Terraform files in {plan.directory} call modules by names fleetctl reserves for the modules it "
        f"renders ({RESERVED_MODULE_NAMES}); fleetctl would take them for its own, and destroy them once they "
        "leave the configuration. Nothing was applied.\n" + "\n".join(lines)
        + "\nRename them (with a `moved` block if they are already applied), then plan again.")


def _files_naming(directory: Path, name: str) -> list[str]:
    """The user's Terraform files in ``directory`` that mention the module ``name`` (for the message only)."""
    found = []
    for path in sorted([*directory.glob("*.tf"), *directory.glob("*.tf.json")]):
        if path.name == ROOT_FILE:
            continue
        try:
            if re.search(rf'"{re.escape(name)}"', path.read_text(errors="replace")):
                found.append(path.name)
        except OSError:
            continue
    return found


def _change_lines(changes: Iterable[ResourceChange]) -> str:
    return "\n".join(f"  {c.symbol} {c.address}" for c in changes)


def infrastructure_or_error(policy: Policy) -> Infrastructure:
    if policy.infrastructure is None:
        raise TerraformError("the policy has no infrastructure section (see docs/terraform.md)")
    return policy.infrastructure


def render_changes(plan: TerraformPlan) -> str:
    """The "Terraform" section of `fleetctl plan`."""
    lines = ["", "Terraform:"]
    if not plan.changes:
        lines.append("  No changes. The infrastructure matches the policy.")
        return "\n".join(lines) + "\n"
    for change in plan.changes:
        moved = f" (moved from {change.previous_address})" if change.previous_address else ""
        lines.append(f"  {change.symbol} {change.address}{moved}")
    counts = plan.counts()
    lines.append(f"  Terraform: {counts['add']} to add, {counts['change']} to change, {counts['destroy']} to destroy.")
    return "\n".join(lines) + "\n"
