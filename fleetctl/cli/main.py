"""The `fleetctl` command: thin wiring of one module per command."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import typer
from typer.core import TyperGroup

from fleetctl.cli import forecast, jobs, policy_cmd, trace
from fleetctl.cli.backtest import backtest
from fleetctl.cli.catalog import catalog
from fleetctl.cli.common import exit_on_closed_pipe, fail, reader_gone
from fleetctl.cli.controller_cmd import daemon, prune, reconcile
from fleetctl.cli.docs_cmd import docs
from fleetctl.cli.events_cmd import events
from fleetctl.cli.explain import explain
from fleetctl.cli.nodewatch_cmd import node_watch
from fleetctl.cli.plan_apply import apply, plan
from fleetctl.cli.report import report
from fleetctl.cli.status import status


class _Group(TyperGroup):
    """The root command: a closed output pipe ends it as it ends Unix tools
    (click's own handling exits 1, which reads as an error). Both steps write:
    parsing prints --help and --version, invoking runs the command."""

    def make_context(self, *args: Any, **kwargs: Any):  # noqa: ANN201 - click's signature
        with _closed_pipe_exits():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):  # noqa: ANN001, ANN201 - click's signature
        with _closed_pipe_exits():
            return super().invoke(ctx)


@contextlib.contextmanager
def _closed_pipe_exits() -> Iterator[None]:
    """A broken pipe on stdout ends quietly (``exit_on_closed_pipe``); one anywhere else (a socket
    or a child's pipe the command wrote to) is an error and says so, where click would exit 1 in
    silence for both."""
    try:
        yield
    except BrokenPipeError as exc:
        if reader_gone(sys.stdout):
            exit_on_closed_pipe()
        fail(f"the other end of a connection or pipe closed while fleetctl wrote to it ({exc}); the "
             "command stopped there")


app = typer.Typer(
    cls=_Group,
    name="fleetctl",
    help="A Terraform-driven fleet controller for ML compute on spot capacity across AWS, GCP and Azure.\n\n"
    "With no cloud configured it runs on the sandbox: real catalog prices, simulated nodes, state in "
    ".fleetctl/state.db. The pages that help and errors name as docs/NAME.md are installed with it: "
    "`fleetctl docs`.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: rich's option table cut env var names and paths to "…"
    # every subcommand inherits these: -h, and help up to 100 columns on a wide terminal (80 when piped)
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"fleetctl {version('fleetctl')}")
        except PackageNotFoundError:  # run from a checkout that was never installed
            typer.echo("fleetctl (not installed: no version metadata)")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print fleetctl's version and exit."),
) -> None:
    # the help text is app's (above); this callback only adds the global --version
    return None


# short_help: the one line `fleetctl --help` lists (click would cut the first sentence to fit)
app.command(short_help="List catalog offers, cheapest per GPU-hour first.")(catalog)
app.command(short_help="Show what fleetctl would launch, terminate and bind.")(plan)
app.command(short_help="Carry out a plan: one saved with plan -out, or one made now.")(apply)
app.command(short_help="Show nodes with their jobs, job counts and current USD/hour.")(status)
app.command(short_help="Explain the planner's decision for one job.")(explain)
app.command(short_help="Spend and GPU-hours by team over a window, for showback.")(report)
app.command(short_help="Run one reconcile tick (for cron).")(reconcile)
app.command(short_help="Run the controller loop and serve /metrics.")(daemon)
app.command(short_help="Delete recorded history older than a number of days.")(prune)
app.command(short_help="Simulate fleetctl and baselines on job and market traces.")(backtest)
app.command(short_help="Show the audit log: what the controller did, to what, when and why.")(events)
app.command("node-watch", short_help="Forward this node's reclaim notices to the daemon.")(node_watch)
app.add_typer(policy_cmd.app, name="policy")
app.add_typer(jobs.app, name="jobs")
app.add_typer(trace.app, name="trace")
app.add_typer(forecast.app, name="forecast", short_help="Train and evaluate the forecasting models.")
app.command(short_help="Show the docs pages that help and errors name (docs/NAME.md).")(docs)


#: Set to 1 to see the traceback of the errors ``main`` reports in one line.
DEBUG_ENV = "FLEETCTL_DEBUG"


def known_error(exc: BaseException) -> str | None:
    """A one-line message for an error that is the environment's, not a bug of
    fleetctl's (a store it cannot read, a file it may not write, missing cloud
    credentials); None for anything else, which keeps its traceback."""
    import sqlalchemy as sa

    from fleetctl.store import StoreError

    if isinstance(exc, StoreError):
        return str(exc)
    if isinstance(exc, sa.exc.SQLAlchemyError):
        from fleetctl.cli.common import OPENED_STORE
        from fleetctl.store import safe_url

        detail = getattr(exc, "orig", None) or exc
        first = str(detail).strip().splitlines()[0]
        which = f" ({safe_url(OPENED_STORE)})" if OPENED_STORE else ""
        hint = ("; this user may not write the store's file (or its directory): run the command as a user who "
                "may, or make them writable" if "readonly database" in first else "")
        return f"state store error{which}: {type(detail).__name__}: {first}{hint}"
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or exc}{where}"
    for module, names, cloud in (
        ("botocore.exceptions", ("NoCredentialsError", "PartialCredentialsError", "NoRegionError"), "AWS"),
        ("google.auth.exceptions", ("DefaultCredentialsError",), "Google Cloud"),
        ("azure.core.exceptions", ("ClientAuthenticationError",), "Azure"),
        ("azure.identity", ("CredentialUnavailableError",), "Azure"),
    ):
        if _is(exc, module, names):
            # every command that reaches a cloud takes the same --cloud option, whose help lists the credentials
            return (f"{cloud} credentials or configuration: {_first_line(exc)} (--cloud in this command's --help "
                    "says where fleetctl looks for them)")
    from providers.base import ProviderError

    if isinstance(exc, ProviderError):
        return f"the cloud refused a call: {type(exc).__name__}: {_first_line(exc)}"
    for module, names, cloud in (
        ("botocore.exceptions", ("BotoCoreError",), "AWS"),  # endpoint unreachable, timeouts, bad responses
        ("google.api_core.exceptions", ("GoogleAPIError",), "Google Cloud"),
        ("azure.core.exceptions", ("AzureError",), "Azure"),
    ):
        if _is(exc, module, names):
            return f"{cloud}: {type(exc).__name__}: {_first_line(exc)}"
    return None


def _is(exc: BaseException, module: str, names: tuple[str, ...]) -> bool:
    """``exc`` is one of ``module``'s ``names`` (only if that SDK was imported at all)."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(exc, tuple(getattr(loaded, n) for n in names if hasattr(loaded, n)))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _plan_usage_errors_exit_1(args: list[str]) -> None:
    """`fleetctl plan` with an option the parser rejects (a typo, a bad value)
    exits 1, as Terraform's does: click's usual 2 means "changes" under
    `plan -detailed-exitcode`, so a CI job would read a typo as a drift to
    apply. Every other command keeps click's 2 for a usage error."""
    command = next((a for a in args if not a.startswith("-")), None)
    if command == "plan":
        try:
            from typer import _click as parser  # typer >= 0.16 vendors click: its copy raises the errors
        except ImportError:
            import click as parser
        parser.exceptions.UsageError.exit_code = 1  # this process runs one command; BadParameter inherits it


def main() -> None:
    """The console script: ``app`` with the environment's errors (see
    ``known_error``) reported in one line and exit code 1 instead of a
    traceback (``FLEETCTL_DEBUG=1`` shows it)."""
    _plan_usage_errors_exit_1(sys.argv[1:])
    try:
        try:
            app(prog_name="fleetctl")
        finally:  # output still buffered goes now, where a closed pipe is caught, not at interpreter exit
            sys.stdout.flush()
    except BrokenPipeError:
        exit_on_closed_pipe()
    except Exception as exc:  # the CLI boundary: known errors become one line, the rest propagate
        message = known_error(exc)
        if message is None or os.environ.get(DEBUG_ENV):
            raise
        from fleetctl.cli.common import err_console
        from rich.markup import escape

        err_console.print(f"[bold red]Error:[/] {escape(message)}")
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
