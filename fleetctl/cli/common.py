"""What every command shares: options, the store, the policy, the provider, the clock.

The CLI is the edge where the clock is read and files are opened; everything
below it gets ``now`` and values passed in.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer
from rich.console import Console

from fleetctl.model import Policy
from fleetctl.store import Store, StoreError, default_url

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

DEFAULT_POLICY = Path("policies/example.yaml")

PolicyOption = Annotated[
    Optional[Path],
    typer.Option(
        "--policy",
        help="Policy YAML. Default: $FLEETCTL_POLICY, else policies/example.yaml.",
        show_default=False,
    ),
]
StateOption = Annotated[
    Optional[str],
    typer.Option(
        "--state",
        help="State store as an SQLAlchemy URL. Default: $FLEETCTL_STATE, else sqlite:///.fleetctl/state.db "
        "under the working directory.",
        show_default=False,
    ),
]
CloudOption = Annotated[
    str,
    typer.Option(
        "--cloud",
        help="Where nodes are bought: sim (the sandbox, no account needed) or aws (EC2 through boto3 with the "
        "usual AWS credentials; the policy's infrastructure section names cluster, regions and subnets; "
        "AWS_ENDPOINT_URL points boto3 elsewhere, e.g. at moto).",
        envvar="FLEETCTL_CLOUD",
    ),
]
SeedOption = Annotated[
    int,
    typer.Option("--seed", help="Seed of the sandbox provider (node ids, launch delays).", envvar="FLEETCTL_SEED"),
]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def fail(message: str, code: int = 1) -> NoReturn:
    err_console.print(f"[bold red]Error:[/] {message}")
    raise typer.Exit(code)


def policy_path(option: Path | None) -> Path:
    if option is not None:
        return option
    env = os.environ.get("FLEETCTL_POLICY")
    return Path(env) if env else DEFAULT_POLICY


def load_policy_or_exit(option: Path | None, code: int = 1) -> tuple[Policy, Path]:
    """Load and validate the policy, or print every issue and exit."""
    from fleetctl.policy import load_policy
    from fleetctl.yamlerrors import SpecError

    path = policy_path(option)
    if not path.exists():
        fail(
            f"policy file {path} not found: pass --policy FILE or set FLEETCTL_POLICY "
            f"(the default is {DEFAULT_POLICY} under the working directory)",
            code,
        )
    try:
        return load_policy(path), path
    except SpecError as exc:
        for issue in exc.issues:
            err_console.print(str(issue), markup=False)
        fail(f"{path}: {len(exc.issues)} policy error(s)", code)


def open_store(option: str | None) -> Store:
    try:
        return Store(option or default_url())
    except StoreError as exc:
        fail(str(exc))


def sim_launch_delay_seconds() -> float:
    raw = os.environ.get("FLEETCTL_SIM_LAUNCH_DELAY_SECONDS")
    if raw is None:
        from providers.sim import DEFAULT_LAUNCH_DELAY_SECONDS

        return DEFAULT_LAUNCH_DELAY_SECONDS
    try:
        value = float(raw)
    except ValueError:
        fail(f"FLEETCTL_SIM_LAUNCH_DELAY_SECONDS={raw!r} is not a number")
    if value < 0:
        fail("FLEETCTL_SIM_LAUNCH_DELAY_SECONDS must be >= 0")
    return value


CLOUDS = ("sim", "aws")


def make_provider(store: Store, seed: int, cloud: str = "sim", policy: Policy | None = None):  # noqa: ANN201
    """The sandbox is the embedded default; ``--cloud aws`` is EC2 through the
    AWS adapter, with throttled calls retried and its nodes recorded in the store."""
    if cloud == "sim":
        from providers.sim import SimProvider

        return SimProvider(store, seed=seed, launch_delay_seconds=sim_launch_delay_seconds())
    if cloud != "aws":
        fail(f"--cloud {cloud!r}: choose one of {', '.join(CLOUDS)}")
    infra = policy.infrastructure if policy is not None else None
    if infra is None or not infra.aws:
        fail("--cloud aws needs the policy's infrastructure section with at least one AWS region "
             "(cluster, controller_url, aws: {REGION: {image_id, subnet_ids}}); see docs/terraform.md")
    from fleetctl.controller.recorded import RecordedNodes
    from providers.retry import ThrottleRetry

    try:
        from providers.aws import AwsConfig, AwsProvider

        adapter = AwsProvider.from_boto3(AwsConfig(
            cluster=infra.cluster,
            regions=tuple(r.region for r in infra.aws),
            subnet_ids={r.region: r.subnet_ids for r in infra.aws},
        ))
    except ImportError as exc:
        fail(str(exc))
    return RecordedNodes(ThrottleRetry(adapter), store)
