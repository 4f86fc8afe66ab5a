"""`fleetctl plan` and `fleetctl apply`: a terraform-style diff, then carry it out."""

from __future__ import annotations

import enum
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Optional

import typer

from fleetctl.cli.common import (
    PolicyOption,
    SeedOption,
    StateOption,
    console,
    fail,
    load_policy_or_exit,
    make_provider,
    open_store,
    utcnow,
)
from fleetctl.controller import ApplyError, execute, fingerprint, observe
from fleetctl.planner import plan as make_plan
from fleetctl.render import PlanFileError, plan_from_document, plan_to_document, render_text


class OutputFormat(str, enum.Enum):
    text = "text"
    json = "json"


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _compute(policy: Path | None, state: str | None, seed: int):  # noqa: ANN202
    pol, pol_path = load_policy_or_exit(policy)
    store = open_store(state)
    provider = make_provider(store, seed)
    now = utcnow()
    obs = observe(store, provider, now)
    result = make_plan(now=now, queue=obs.jobs, fleet=obs.nodes, offers=obs.offers, forecast=None, policy=pol)
    return pol, pol_path, store, provider, now, obs, result


def plan(
    policy: PolicyOption = None,
    state: StateOption = None,
    seed: SeedOption = 0,
    out: Annotated[
        Optional[Path], typer.Option("-out", "--out", help="Save the plan as versioned JSON for `fleetctl apply`.")
    ] = None,
    output: Annotated[OutputFormat, typer.Option("--format", help="text (the diff) or json.")] = OutputFormat.text,
    detailed_exitcode: Annotated[
        bool,
        typer.Option(
            "-detailed-exitcode", "--detailed-exitcode", help="Exit 0 for no changes, 2 for changes, 1 for errors."
        ),
    ] = False,
) -> None:
    """Show what fleetctl would do: launches, terminations and job bindings, each with
    its reason, then the cost in $/h before -> after. Changes nothing."""
    pol, pol_path, store, _provider, now, obs, result = _compute(policy, state, seed)
    store.close()
    fp = fingerprint(obs, pol)
    doc = plan_to_document(result, fingerprint=fp, created_at_utc=now, policy_path=str(pol_path))
    if out is not None:
        _write_atomically(out, json.dumps(doc, indent=2) + "\n")
    if output is OutputFormat.json:
        print(json.dumps(doc, indent=2))
    else:
        print(render_text(result), end="")
        if out is not None:
            print(f"\nSaved the plan to {out}. To carry it out: fleetctl apply {out}")
    if detailed_exitcode and result.has_changes:
        raise typer.Exit(2)


def apply(
    plan_file: Annotated[
        Optional[Path], typer.Argument(help="A plan saved with `fleetctl plan -out`. Without it, plan and apply now.")
    ] = None,
    policy: PolicyOption = None,
    state: StateOption = None,
    seed: SeedOption = 0,
    auto_approve: Annotated[
        bool, typer.Option("-auto-approve", "--auto-approve", help="Apply without asking for confirmation.")
    ] = False,
) -> None:
    """Carry out a plan. A saved plan is refused if the state changed since it was made
    (nothing is changed then); without a file, fleetctl plans, shows the diff and asks."""
    if plan_file is not None:
        try:
            raw = plan_file.read_text()
        except OSError as exc:
            fail(f"cannot read plan file {plan_file}: {exc.strerror or exc}")
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as exc:
            fail(f"{plan_file}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}")
        try:
            saved, saved_fp = plan_from_document(doc, str(plan_file))
        except PlanFileError as exc:
            fail(str(exc))
    pol, _pol_path, store, provider, now, obs, fresh = _compute(policy, state, seed)
    try:
        fp = fingerprint(obs, pol)
        if plan_file is not None:
            if saved_fp != fp:
                fail(
                    f"the plan in {plan_file} was made from a different state (fingerprint {saved_fp[:12]}, "
                    f"now {fp[:12]}): jobs, nodes, offers or the policy changed since. Nothing was changed; "
                    "run `fleetctl plan` again."
                )
            to_apply = saved
        else:
            to_apply = fresh
            print(render_text(to_apply), end="")
            if not to_apply.has_changes:
                return
            if not auto_approve:
                if not sys.stdin.isatty():
                    fail("refusing to apply without confirmation: stdin is not a terminal; pass -auto-approve")
                answer = typer.prompt("\nDo you want to perform these actions? Only 'yes' will be accepted", default="")
                if answer.strip() != "yes":
                    fail("Apply cancelled; nothing was changed.")
        if not to_apply.has_changes:
            console.print("No changes to apply.")
            return
        try:
            result = execute(to_apply, store=store, provider=provider, now=now, plan_id=fp)
        except ApplyError as exc:
            fail(f"{exc}. Nothing was changed.")
    finally:
        store.close()
    console.print(
        f"Apply complete! {len(result.launched)} launched, {len(result.terminated)} terminated, "
        f"{len(result.bound)} jobs bound. $/h now {to_apply.usd_per_hour_after:.2f}.",
        markup=False,
    )
