"""`fleetctl plan` and `fleetctl apply`: a terraform-style diff, then carry it out."""

from __future__ import annotations

import enum
import hashlib
import json
import os
import shlex
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from fleetctl.cli.common import (
    given_as,
    CloudOption,
    LockTimeoutOption,
    PolicyOption,
    SeedOption,
    StateOption,
    console,
    err_console,
    errors_exit_1,
    fail,
    is_bug,
    load_policy_or_exit,
    make_provider,
    one_of,
    open_store,
    output_file_or_exit,
    policy_path,
    stop_cleanly_on_sigterm,
    utcnow,
)
from fleetctl.cli.forecast import AllowMismatchOption, ForecastDirOption, load_forecaster_or_exit
from fleetctl.controller import ApplyError, ApplyInterrupted, NoticesHandled, execute, fingerprint, observe
from fleetctl.model import NodeState
from fleetctl.planner import plan as make_plan
from fleetctl.planner.breaches import policy_breaches, policy_gaps
from fleetctl.render import PlanFileError, counted, plan_from_document, plan_to_document, render_text


class OutputFormat(str, enum.Enum):
    text = "text"
    json = "json"


class InitMode(str, enum.Enum):
    init = "init"
    get = "get"


TerraformDirOption = Annotated[
    Optional[Path],
    typer.Option(
        "--terraform-dir", envvar="FLEETCTL_TERRAFORM_DIR", show_default=False,
        help="Render the policy's infrastructure as Terraform (main.tf.json and the modules) into DIR, run "
        "`terraform plan` there and show its changes under a 'Terraform' heading; apply applies that saved "
        "Terraform plan first, then the API actions. DIR must exist (fleetctl does not create it: a mistyped path "
        "would start a second Terraform root). Without it, only the API half is planned.",
    ),
]
TerraformInitOption = Annotated[
    InitMode,
    typer.Option(
        "--terraform-init",
        help="How to prepare DIR: init (terraform init: providers from the registry or your mirror) or get "
        "(modules only, for providers installed through dev_overrides).",
        **one_of(InitMode),
    ),
]
TerraformBinaryOption = Annotated[
    str, typer.Option("--terraform-binary", envvar="FLEETCTL_TERRAFORM_BINARY", help="The terraform executable.")
]


def _rendered_root(pol) -> dict:  # noqa: ANN001
    """The policy's Terraform root document (main.tf.json)."""
    from fleetctl.terraform import render
    from providers.catalog import load_catalog

    return render(pol, load_catalog())


def _root_sha256(document: dict) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def _terraform_plan(directory: Path, pol, init: InitMode, binary: str, name: str,  # noqa: ANN001, ANN202
                    option: str = "--terraform-dir"):
    """Render, write and plan the Terraform half into ``directory/name``; exits with the reason on any failure.

    Design choice: each saved plan has its own Terraform plan file (``name``), so a later `fleetctl plan
    --terraform-dir` of the same directory (to look) does not replace the one a saved plan will apply."""
    from fleetctl.terraform import Terraform, TerraformError, check_destroys, write_root

    try:
        document = _rendered_root(pol)
        if not directory.is_dir():
            # Design choice: never create the root. A mistyped path would otherwise start a second, empty
            # Terraform root beside the real one, and plan every role, queue and template again (as Terraform's
            # own -chdir refuses a missing directory).
            fail(f"{option} {directory}: not a directory" if directory.exists() else
                 f"{option} {directory}: no such directory; fleetctl does not create it, so a mistyped path cannot "
                 f"start a second Terraform root beside yours. For a new root, create it first: mkdir -p "
                 f"{shlex.quote(str(directory))}", 2)
        write_root(directory, document)
        tf = Terraform(directory, binary=binary, init=init.value)
        tf_plan = tf.plan(name)
        try:
            check_destroys(tf_plan, document)
        except TerraformError:
            tf_plan.plan_file.unlink(missing_ok=True)  # a refused plan must not stay behind, applyable
            raise
    except TerraformError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{option} {directory}: {exc.strerror or exc}", 2)
    return tf, tf_plan, document


def _terraform_dir_label(ctx: typer.Context) -> str:
    return given_as(ctx, "terraform_dir", "--terraform-dir", "FLEETCTL_TERRAFORM_DIR")


def _terraform_doc(tf_plan, document: dict) -> dict:  # noqa: ANN001
    return {
        "directory": str(tf_plan.directory.resolve()),
        "plan_file": str(tf_plan.plan_file.resolve()),
        "plan_sha256": tf_plan.sha256,
        "root_sha256": _root_sha256(document),  # what the policy rendered: apply renders it again and compares
        "changes": [{"address": c.address, "type": c.type, "actions": list(c.actions),
                     **({"previous_address": c.previous_address} if c.previous_address else {})}
                    for c in tf_plan.changes],
    }


def _compute(policy: Path | None, state: str | None, seed: int, cloud: str = "sim",  # noqa: ANN202
             plan_at: datetime | None = None, forecast_dir: Path | None = None,
             allow_version_mismatch: bool = False, must_exist: bool = False):
    """Observe now and plan; at ``plan_at`` instead of now when given (a saved
    plan's own time: the pure planner then gives that plan's actions again).
    With ``forecast_dir``, the models' forecast from what the store recorded,
    as the daemon and ``reconcile --once`` plan."""
    pol, pol_path = load_policy_or_exit(policy)
    forecaster = load_forecaster_or_exit(forecast_dir, allow_version_mismatch)
    store = open_store(state, must_exist=must_exist)
    return (pol, pol_path, store, *_plan_now(pol, store, forecaster, seed, cloud, plan_at))


def _plan_now(pol, store, forecaster, seed: int, cloud: str, plan_at: datetime | None):  # noqa: ANN001, ANN202
    """:func:`_compute` once its inputs are read: (provider, now, observation,
    plan, forecast)."""
    from fleetctl.controller.forecast import build_forecast

    provider = make_provider(store, seed, cloud, pol)
    now = utcnow()
    obs = observe(store, provider, now)
    # As reconcile plans: the models' numbers (with --forecast-dir) and the reclaims the store recorded
    # (an offer reclaimed within the policy's TTL is avoided), so plan and apply agree with the daemon.
    forecast = build_forecast(store, plan_at or now, forecaster)
    result = make_plan(now=plan_at or now, queue=obs.jobs, fleet=obs.nodes, offers=obs.offers, forecast=forecast,
                       policy=pol, last_termination_utc=store.last_event_at("terminate"))
    return provider, now, obs, result, forecast


@errors_exit_1  # 2 means "changes" under -detailed-exitcode: every error of plan exits 1, as in Terraform
def plan(
    ctx: typer.Context,
    policy: PolicyOption = None,
    state: StateOption = None,
    seed: SeedOption = 0,
    cloud: CloudOption = "sim",
    terraform_dir: TerraformDirOption = None,
    terraform_init: TerraformInitOption = InitMode.init,
    terraform_binary: TerraformBinaryOption = "terraform",
    out_text: Annotated[
        Optional[str], typer.Option("-out", "--out", help="Save the plan as versioned JSON for `fleetctl apply` "
                                                          "(a file; a directory is refused).", metavar="<path>")
    ] = None,
    output: Annotated[OutputFormat, typer.Option("--format", help="text (the diff) or json.",
                                                         **one_of(OutputFormat))] = OutputFormat.text,
    forecast_dir: ForecastDirOption = None,
    allow_version_mismatch: AllowMismatchOption = False,
    detailed_exitcode: Annotated[
        bool,
        typer.Option(
            "-detailed-exitcode", "--detailed-exitcode", help="Exit 0 for no changes, 2 for changes, 1 for errors."
        ),
    ] = False,
) -> None:
    """Show what fleetctl would do: launches, terminations and job bindings, each with
    its reason, then the cost in $/h before -> after. With --terraform-dir, also the
    Terraform changes the policy's infrastructure asks for. Changes no fleet and no cloud (on the sandbox
    its simulated nodes catch up with the clock as a cloud's would: launched ones become ready, reclaimed
    ones go)."""
    if out_text == "-":  # saved a file named '-', which `apply -` then read
        fail("-out -: the saved plan is a file for `fleetctl apply` (and a Terraform plan beside it); for the "
             "plan document on stdout use --format json", 2)
    out = None if out_text is None else output_file_or_exit("-out", out_text, "plan.json",
                                                            inputs=(policy_path(policy),))
    pol, pol_path, store, _provider, now, obs, result, _forecast = _compute(policy, state, seed, cloud,
                                                                 forecast_dir=forecast_dir,
                                                                 allow_version_mismatch=allow_version_mismatch)
    store.close()
    tf_plan = None
    if terraform_dir is not None:
        # A saved plan's own Terraform plan file; a plan only looked at gets a temporary one (removed below).
        name = (f"fleetctl-{hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:12]}.tfplan" if out is not None
                else f"fleetctl-look-{os.getpid()}.tfplan")
        _tf, tf_plan, tf_root = _terraform_plan(terraform_dir, pol, terraform_init, terraform_binary, name,
                                                _terraform_dir_label(ctx))
        if out is None:
            tf_plan.plan_file.unlink(missing_ok=True)
    fp = fingerprint(obs, pol)
    doc = plan_to_document(result, fingerprint=fp, created_at_utc=now, policy_path=str(Path(pol_path).resolve()))
    doc["cloud"] = cloud  # apply refuses another --cloud by name (a different market is another state)
    warnings = policy_breaches(obs.nodes, obs.jobs, pol)
    doc["warnings"] = list(warnings)
    notes = policy_gaps(obs.jobs, obs.offers, pol)
    doc["notes"] = list(notes)
    if forecast_dir is not None:
        doc["forecast_dir"] = str(forecast_dir.resolve())  # apply re-plans with the same models
    if tf_plan is not None:
        doc["terraform"] = _terraform_doc(tf_plan, tf_root)
    if out is not None:
        from fleetctl.files import write_text_atomic

        try:
            write_text_atomic(out, json.dumps(doc, indent=2) + "\n")
        except OSError as exc:
            fail(f"-out {out}: cannot write the plan: {exc.strerror or exc}", 2)
    if output is OutputFormat.json:
        print(json.dumps(doc, indent=2))
    else:
        print(render_text(result, warnings, notes), end="")
        if tf_plan is not None:
            from fleetctl.terraform import render_changes

            print(render_changes(tf_plan), end="")
        if out is not None:
            print(f"\nSaved the plan to {out}. To carry it out: fleetctl apply {out}")
    if detailed_exitcode and (result.has_changes or (tf_plan is not None and tf_plan.has_changes)):
        raise typer.Exit(2)


def _saved_terraform(doc: dict, plan_file: Path, init: InitMode, binary: str, pol,  # noqa: ANN001, ANN202
                     terraform_dir: Path | None):
    """The Terraform half of a saved plan, re-read and re-checked: its plan
    file unchanged, made from what this policy renders (a terraform section
    copied from another plan file, or a policy changed since, is refused), in
    the directory --terraform-dir names if given."""
    from fleetctl.terraform import Terraform, TerraformError, check_destroys, sha256_of

    info = doc.get("terraform")
    if info is None:
        if terraform_dir is not None:
            fail(f"{plan_file} has no Terraform half (it was made without --terraform-dir); nothing was changed. "
                 "Run `fleetctl plan --terraform-dir` to plan both.")
        return None, None
    if not isinstance(info, dict):
        fail(f"{plan_file}: the terraform section is malformed (an object expected, found {type(info).__name__})")
    for key in ("directory", "plan_file"):
        _path_field(info, key, plan_file, f"terraform.{key}", required=True)
    try:
        directory = Path(info["directory"])
        tf_file = Path(info["plan_file"])
        if terraform_dir is not None and terraform_dir.resolve() != directory:
            fail(f"--terraform-dir {terraform_dir} is not the directory {plan_file} was planned in ({directory}); "
                 "nothing was changed")
        rendered = _rendered_root(pol)
        if info.get("root_sha256") != _root_sha256(rendered):
            fail(f"the Terraform plan in {plan_file} was not made from what this policy renders (another policy's "
                 "infrastructure, or the policy changed since); nothing was changed. Run `fleetctl plan "
                 "--terraform-dir` again.")
        if sha256_of(tf_file) != info["plan_sha256"]:
            fail(f"{tf_file} is not the Terraform plan {plan_file} was made with (its hash changed); nothing was "
                 "changed. Run `fleetctl plan --terraform-dir` again.")
        tf = Terraform(directory, binary=binary, init=init.value)
        tf_plan = tf.read_plan(tf_file)
        check_destroys(tf_plan, rendered)
    except (KeyError, TypeError) as exc:
        fail(f"{plan_file}: the terraform section is malformed ({exc})")
    except (TerraformError, OSError, json.JSONDecodeError) as exc:
        fail(f"{exc}. Nothing was changed.")
    except ValueError as exc:
        fail(f"{plan_file}: the terraform section is malformed ({exc}); nothing was changed")
    return tf, tf_plan


def _path_field(doc: dict, key: str, plan_file: Path, name: str | None = None, required: bool = False) -> str | None:
    """The path a saved plan names under ``key`` (None if absent and not ``required``); exits if it is not a
    string, is empty, or holds a NUL byte (no file name has one: pathlib raises ValueError)."""
    value = doc.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        problem = f"found {type(value).__name__}"
    elif not value:
        problem = "empty"
    elif "\0" in value:
        problem = "a NUL byte in it"
    else:
        return value
    fail(f"{plan_file}: {name or key} is not a path ({problem}); nothing was changed")


def apply(
    ctx: typer.Context,
    plan_file: Annotated[
        Optional[Path], typer.Argument(help="A plan saved with `fleetctl plan -out`. Without it, plan and apply now.")
    ] = None,
    policy: PolicyOption = None,
    state: StateOption = None,
    seed: SeedOption = 0,
    cloud: CloudOption = "sim",
    terraform_dir: TerraformDirOption = None,
    terraform_init: TerraformInitOption = InitMode.init,
    terraform_binary: TerraformBinaryOption = "terraform",
    auto_approve: Annotated[
        bool, typer.Option("-auto-approve", "--auto-approve", help="Apply without asking for confirmation.")
    ] = False,
    forecast_dir: Annotated[Optional[Path], typer.Option(
        "--forecast-dir", show_default=False,
        help="Models for the planner's forecast (`fleetctl forecast train ...`), without a plan file. A saved plan "
        "made with --forecast-dir is re-planned with the models it names.")] = None,
    allow_version_mismatch: AllowMismatchOption = False,
    lock_timeout: LockTimeoutOption = 60.0,
) -> None:
    """Carry out a plan: first the saved Terraform plan (if the plan has one), then the API
    actions. A saved plan is refused if the state changed since it was made, or if its
    Terraform plan changed or would destroy what the policy still asks for (nothing is
    changed then); without a file, fleetctl plans, shows the diff and asks.

    It holds the controller lease throughout, so it handles reclaim notices itself every
    few seconds; one handled part-way stops the plan (exit 1, saying what was carried out):
    plan again. docs/operations.md."""
    tf = tf_plan = None
    tf_applied = None  # what Terraform did, once it applied: an API error after it must not say "nothing changed"
    stop_cleanly_on_sigterm()
    if plan_file is not None:
        try:
            raw = plan_file.read_text(encoding="utf-8")
        except OSError as exc:
            fail(f"cannot read plan file {plan_file}: {exc.strerror or exc}")
        except UnicodeDecodeError as exc:
            fail(f"{plan_file}: not a plan file: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                 f"{exc.start})")
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as exc:
            fail(f"{plan_file}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}")
        except RecursionError:
            fail(f"{plan_file}: not a plan file: its JSON is nested too deeply")
        except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
            fail(f"{plan_file}: not a plan file: {exc}")
        try:
            saved, saved_fp = plan_from_document(doc, str(plan_file))
        except PlanFileError as exc:
            fail(str(exc))
        made_at = _made_at(doc, plan_file)
        saved_cloud = doc.get("cloud", cloud)
        if saved_cloud != cloud:
            fail(f"{plan_file} was made with --cloud {saved_cloud}; this apply uses --cloud {cloud} (another market "
                 f"and fleet). Nothing was changed; pass --cloud {saved_cloud}.")
        saved_policy = _path_field(doc, "policy", plan_file)
        if policy is None and not os.environ.get("FLEETCTL_POLICY") and isinstance(saved_policy, str) \
                and Path(saved_policy).is_file():
            policy = Path(saved_policy)  # the policy the plan was made with, unless told otherwise
        saved_models = _path_field(doc, "forecast_dir", plan_file)
        if forecast_dir is not None and saved_models is not None and forecast_dir.resolve() != Path(saved_models):
            fail(f"--forecast-dir {forecast_dir} is not the model directory {plan_file} was made with "
                 f"({saved_models}); nothing was changed")
        if saved_models is not None and not Path(saved_models).is_dir():
            fail(f"{plan_file}: the plan was made with the models in {saved_models}, which is no longer a "
                 "directory; nothing was changed. Run `fleetctl plan` again.")
        forecast_dir = Path(saved_models) if saved_models is not None else forecast_dir
    # A saved plan was made from a store: one that does not exist is another directory's or a typo, not an
    # empty state to create (the plan would only be refused as made "from a different state").
    pol, _pol_path, store, provider, now, obs, fresh, forecast = _compute(
        policy, state, seed, cloud, plan_at=made_at if plan_file is not None else None, forecast_dir=forecast_dir,
        allow_version_mismatch=allow_version_mismatch, must_exist=plan_file is not None)
    try:
        fp = fingerprint(obs, pol)
        if plan_file is not None:
            if saved_fp != fp:
                other = (f" (it was made with the policy {saved_policy}; this apply read {_pol_path})"
                         if isinstance(saved_policy, str) and Path(saved_policy).resolve() != Path(_pol_path).resolve()
                         else "")
                fail(
                    f"the plan in {plan_file} was made from a different state (fingerprint {saved_fp[:12]}, "
                    f"now {fp[:12]}): jobs, nodes, offers or the policy changed since{other}. Nothing was changed; "
                    "run `fleetctl plan` again."
                )
            tf, tf_plan = _saved_terraform(doc, plan_file, terraform_init, terraform_binary, pol, terraform_dir)
            _check_saved_actions(saved, fresh, plan_file, doc)
            to_apply = saved
        else:
            to_apply = fresh
            if terraform_dir is not None:
                tf, tf_plan, _root = _terraform_plan(terraform_dir, pol, terraform_init, terraform_binary,
                                                     f"fleetctl-apply-{os.getpid()}.tfplan", _terraform_dir_label(ctx))
            print(render_text(to_apply), end="")
            if tf_plan is not None:
                from fleetctl.terraform import render_changes

                print(render_changes(tf_plan), end="")
            if not to_apply.has_changes and not (tf_plan is not None and tf_plan.has_changes):
                return
            if not auto_approve:
                if not sys.stdin.isatty():
                    fail("refusing to apply without confirmation: stdin is not a terminal; pass -auto-approve")
                answer = typer.prompt("\nDo you want to perform these actions? Only 'yes' will be accepted", default="",
                                      show_default=False)  # else click shows the empty default as "[]"
                if answer.strip() != "yes":
                    fail("Apply cancelled; nothing was changed.")
        if not to_apply.has_changes and not (tf_plan is not None and tf_plan.has_changes):
            console.print("No API actions to apply.")
            return
        from fleetctl.controller.lease import controller_lease, holder_id
        from fleetctl.store import LeaseHeld

        # While this apply holds the lease no daemon or cron run can handle a reclaim notice: it does.
        notices = _NoticesWhileApplying(store, provider, pol, forecast)
        try:
            # One controller at a time on this store (the daemon, a cron reconcile): the lease is taken
            # before anything is done, Terraform included, and the state checked again under it.
            with controller_lease(store, holder_id(), wait_seconds=lock_timeout):
                if fingerprint(observe(store, provider, utcnow()), pol) != fp:
                    fail("another fleetctl process changed the fleet or the jobs while this apply waited or asked; "
                         "nothing of the plan was carried out. Run `fleetctl plan` again.")
                if tf_plan is not None and tf_plan.has_changes:
                    from fleetctl.terraform import TerraformError

                    try:
                        tf.apply(tf_plan, while_waiting=notices.check)  # type: ignore[union-attr]
                    except TerraformError as exc:
                        fail(f"{exc}\nNo API action was carried out. Terraform keeps its own state of what it did; "
                             f"run `fleetctl plan --terraform-dir` again.{notices.said()}")
                    counts = tf_plan.counts()
                    tf_applied = (f"Terraform: {counts['add']} added, {counts['change']} changed, "
                                  f"{counts['destroy']} destroyed")
                    console.print(f"{tf_applied}.", markup=False)
                    if notices.handled and to_apply.has_changes:
                        fail(f"{tf_applied}. {notices.said().strip()} The plan's API actions were made before it (they "
                             "may bind a job to the node it cordoned), so none was carried out. Run `fleetctl plan "
                             "--terraform-dir` again: it starts from the infrastructure and the fleet as they are now.")
                if not to_apply.has_changes:
                    console.print("No API actions to apply." + notices.said())
                    return
                result = execute(to_apply, store=store, provider=provider, now=now, plan_id=fp,
                                 between=notices.check)
        except LeaseHeld as exc:
            fail(f"{exc}. Nothing of the plan was carried out, Terraform included (waited {lock_timeout:g} s: "
                 "--lock-timeout).")
        except ApplyError as exc:
            message = _apply_error_message(exc, tf_applied) + notices.said()
            if is_bug(exc):  # not the environment's error: the report, then its traceback (fleetctl.cli.main)
                err_console.print(f"[bold red]Error:[/] {escape(message)}")
                raise
            fail(message)
        held = [n for n in provider.nodes(now) if n.state is not NodeState.GONE]
    finally:
        store.close()
        if plan_file is None and tf_plan is not None:
            tf_plan.plan_file.unlink(missing_ok=True)  # this apply's own Terraform plan, planned above
    moved = {kind: len(to_apply.of_kind(kind)) for kind in ("preempt", "migrate")}
    console.print(
        f"Apply complete! {len(result.launched)} launched, {len(result.terminated)} terminated, "
        f"{counted(len(result.bound), 'job')} bound"
        + "".join(f", {n} {word}" for word, n in (("preempted", moved["preempt"]), ("migrated", moved["migrate"])) if n)
        + f". $/h now {sum(n.offer.usd_per_hour for n in held):.2f}.",
        markup=False,
    )


class _NoticesWhileApplying:
    """Reclaim notices handled by ``apply`` while it holds the controller
    lease (Terraform's apply can take many minutes; the API actions, a while):
    every ``ONCE_NOTICE_CHECK_SECONDS``, as ``reconcile --once`` does, the
    node cordoned, its jobs checkpointed and requeued. ``check`` is
    ``Terraform.apply``'s ``while_waiting`` and ``execute``'s ``between``:
    True once it handled one, and ``execute`` then stops (``NoticesHandled``)."""

    def __init__(self, store, provider, pol, forecast) -> None:  # noqa: ANN001
        from fleetctl.controller.reconcile import ONCE_NOTICE_CHECK_SECONDS, TickReport, notice_checks

        self._due = notice_checks(ONCE_NOTICE_CHECK_SECONDS, utcnow)
        self._args = {"store": store, "provider": provider, "policy": pol, "forecast": forecast}
        self.report = TickReport()
        self.handled = 0

    def check(self) -> bool:
        from fleetctl.controller.reconcile import handle_interruptions
        from fleetctl.controller.runtime import SimRuntime

        at = self._due()
        if at is None:
            return False
        handled = handle_interruptions(**self._args, runtime=SimRuntime(), now=at, report=self.report)
        self.handled += handled
        return handled > 0

    def said(self) -> str:
        """What the notices handled did, as a sentence after a message ("" for none)."""
        if not self.handled:
            return ""
        return (f"\nWhile applying, {counted(self.handled, 'reclaim notice')} handled: "
                f"{counted(len(self.report.requeued), 'job')} requeued (see `fleetctl events --kind interruption`).")


def _apply_error_message(exc: ApplyError, tf_applied: str | None) -> str:
    """What an apply stopped part-way did: Terraform's half if it was applied (``tf_applied``), the API
    actions carried out and recorded, and whether the cloud may have acted on the call under way."""
    # Terraform keeps its own state of what it applied; the store records the API half.
    terraform_done = (f"\nApplied before the API actions: {tf_applied} (Terraform keeps its own state of it)."
                      if tf_applied is not None else "")
    unknown = ("\nThe call under way got no answer, or fleetctl failed on it: whether the cloud acted on it is "
               "unknown, and the next plan starts from what the cloud lists." if isinstance(exc, ApplyInterrupted)
               else "")
    if exc.carried_out:
        return (f"{exc.message}.{terraform_done}\nCarried out before the error, and recorded: "
                + "; ".join(exc.carried_out) + f".{unknown}\nThe rest of the plan was not carried out. Run "
                "`fleetctl plan` again: it starts from the fleet as it is now (new nodes idle, their jobs still "
                "queued).")
    if tf_applied is not None or unknown:
        again = ("`fleetctl plan --terraform-dir` again: it starts from the infrastructure and the fleet as they "
                 "are now" if tf_applied is not None else "`fleetctl plan` again: it starts from the fleet as it is now")
        return (f"{exc.message}.{terraform_done}{unknown}\nNo cloud API action "
                f"{'is recorded as' if unknown else 'was'} carried out. Run {again}.")
    if isinstance(exc, NoticesHandled):
        return (f"{exc.message}: no action of it was carried out. Run `fleetctl plan` again: it starts from the "
                "fleet as it is now.")
    return f"{exc}. Nothing was changed."


#: How far ahead of this machine's clock a saved plan's time may be (made on another machine).
CLOCK_SKEW = timedelta(minutes=5)


def _made_at(doc: dict, plan_file: Path) -> datetime:
    """When a saved plan was made (its ``created_at_utc``)."""
    from fleetctl.codec import str_to_dt

    try:
        made_at = str_to_dt(doc.get("created_at_utc"))
    except (TypeError, ValueError, OverflowError):  # OverflowError: a valid time that leaves datetime's range in UTC
        made_at = None
    if made_at is None:
        fail(f"{plan_file}: created_at_utc is missing or not a timestamp; nothing was changed")
    if made_at > utcnow() + CLOCK_SKEW:  # apply plans again at this time: a plan cannot come from the future
        fail(f"{plan_file}: created_at_utc {doc['created_at_utc']} is in the future; nothing was changed")
    return made_at


def _check_saved_actions(saved, again, plan_file: Path, saved_doc: dict) -> None:  # noqa: ANN001
    """The planner is pure: from the same state (the fingerprint matched) and
    the plan's own time (``again`` is planned then) it gives the same actions.
    A saved plan whose actions differ was edited (or made by another fleetctl)
    and is refused, so a hand edit cannot launch past the policy's budget or GPU cap."""
    from fleetctl.codec import action_to_dict, unplaced_to_dict
    from fleetctl.render import summary_line

    same = [action_to_dict(a) for a in again.actions] == [action_to_dict(a) for a in saved.actions]
    # What the reviewer read too (cost and risk before and after, the summary, the jobs left waiting).
    shown = [(round(p.usd_per_hour_before, 6), round(p.usd_per_hour_after, 6), round(p.risk_before, 6),
              round(p.risk_after, 6), [unplaced_to_dict(u) for u in p.unplaced]) for p in (again, saved)]
    summary = saved_doc.get("summary", summary_line(again))
    if not same or shown[0] != shown[1] or summary != summary_line(again):
        fail(f"the actions in {plan_file} are not what fleetctl plans for this state and policy (the file was "
             "edited, or written by another fleetctl version); nothing was changed. Run `fleetctl plan` again.")
