"""The `fleetctl` console script and `python -m fleetctl`, kept apart from the
CLI so that it can act before the CLI's imports (typer, rich, SQLAlchemy,
pandas: about a second).

A daemon catches SIGHUP from its first instant: SIGHUP's default action ends
the process, and a `systemctl reload` (or a ConfigMap watcher's `kill -HUP`)
sent just after `systemctl start` ended the daemon while it imported, an end
that systemd counts as clean and does not restart. The signals caught before
the daemon command sets its own handler wait in ``EARLY_HANGUPS``; the command
takes them (``take_early_hangups``) and reads the policy file again once it
runs. Only the standard library is imported here."""

from __future__ import annotations

import signal
import sys

#: SIGHUPs caught before `fleetctl daemon` set its own handler.
EARLY_HANGUPS: list[int] = []


def runs_daemon(args: list[str]) -> bool:
    """Whether the command line runs `fleetctl daemon` (the top level takes no
    option with a value, so the first word that is not an option is the command)."""
    words = [a for a in args if not a.startswith("-")]
    return bool(words) and words[0] == "daemon"


def keep_hangups() -> None:
    """Catch SIGHUP into ``EARLY_HANGUPS`` (where the platform has it)."""
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda signum, _frame: EARLY_HANGUPS.append(signum))


def take_early_hangups() -> list[int]:
    """The SIGHUPs caught so far, once (the list is emptied)."""
    taken = list(EARLY_HANGUPS)
    del EARLY_HANGUPS[:len(taken)]
    return taken


def main() -> None:
    if runs_daemon(sys.argv[1:]):
        keep_hangups()
    from fleetctl.cli.main import main as cli_main

    cli_main()
