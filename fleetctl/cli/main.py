"""The `fleetctl` command: thin wiring of one module per command."""

from __future__ import annotations

import typer

from fleetctl.cli import forecast, jobs, policy_cmd, trace
from fleetctl.cli.backtest import backtest
from fleetctl.cli.catalog import catalog
from fleetctl.cli.controller_cmd import daemon, reconcile
from fleetctl.cli.explain import explain
from fleetctl.cli.nodewatch_cmd import node_watch
from fleetctl.cli.plan_apply import apply, plan
from fleetctl.cli.status import status

app = typer.Typer(
    name="fleetctl",
    help="A Terraform-driven fleet controller for ML compute on spot capacity across AWS, GCP and Azure.\n\n"
    "With no cloud configured it runs on the sandbox: real catalog prices, simulated nodes, state in "
    ".fleetctl/state.db.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # docstrings reflow as paragraphs in --help
)
app.command()(catalog)
app.command()(plan)
app.command()(apply)
app.command()(status)
app.command()(explain)
app.command()(reconcile)
app.command()(daemon)
app.command()(backtest)
app.command("node-watch")(node_watch)
app.add_typer(policy_cmd.app, name="policy")
app.add_typer(jobs.app, name="jobs")
app.add_typer(trace.app, name="trace")
app.add_typer(forecast.app, name="forecast")


if __name__ == "__main__":  # pragma: no cover
    app()
