"""The `fleetctl` console script and `python -m fleetctl`, kept apart from the
CLI so that it can act before the CLI's imports (typer, rich, SQLAlchemy,
pandas: about a second).

A daemon catches SIGHUP from its first instant: SIGHUP's default action ends
the process, and a `systemctl reload` (or a ConfigMap watcher's `kill -HUP`)
sent just after `systemctl start` ended the daemon while it imported, an end
that systemd counts as clean and does not restart. The signals caught before
the daemon command sets its own handler wait in ``EARLY_HANGUPS``; the command
takes them (``take_early_hangups``) and reads the policy file again once it
runs. Only the standard library is imported here.

A standard stream that whoever started fleetctl closed is /dev/null from the
start too (``open_closed_streams``), before any import could open a file, and
stdout writes what its encoding cannot (``replace_unencodable_output``)."""

from __future__ import annotations

import codecs
import os
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


def open_closed_streams() -> None:
    """Point a standard stream that was closed when fleetctl started (`fleetctl
    apply <&-`, `fleetctl status >&-`, a supervisor that closes descriptors 0-2)
    at /dev/null. Python leaves ``sys.stdin``/``sys.stdout`` None there, and
    each read or write of it raised AttributeError: a traceback and exit 1,
    also after a command that had done its work. Opened in order 0, 1, 2, each
    takes the lowest free descriptor, which is its own: a file opened later
    (the state store) cannot become descriptor 1 and receive the output."""
    for name, mode in (("stdin", "r"), ("stdout", "w"), ("stderr", "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, mode))


#: The ``errors`` handler of stdout (``replace_unencodable_output``).
STDOUT_ERRORS = "fleetctl-stdout"


#: Typographic characters fleetctl's own output uses, and the one ASCII character each is written as
#: where stdout cannot encode it: one cell for one, so a table rich cut with "…" keeps its columns.
ASCII_STAND_INS = {"\u2026": ".", "\u2013": "-", "\u2014": "-", "\u2018": "'", "\u2019": "'",
                   "\u201c": '"', "\u201d": '"', "\u2192": ">"}


def _unencodable(exc: UnicodeError) -> tuple[str | bytes, int]:
    """Bytes that came in undecodable (a file name's, as lone surrogates) go out as they came
    ("surrogateescape"); a character of ``ASCII_STAND_INS`` as its stand-in; any other character
    the encoding lacks as an escape ("\\u00e9"), as Python's stderr writes it."""
    try:
        return codecs.lookup_error("surrogateescape")(exc)
    except UnicodeError:
        text = exc.object[exc.start:exc.end]  # type: ignore[attr-defined]
        return "".join(ASCII_STAND_INS.get(c) or c.encode("ascii", "backslashreplace").decode() for c in text), \
            exc.end  # type: ignore[attr-defined]


def replace_unencodable_output() -> None:
    """Make stdout write a character its encoding cannot as its ASCII stand-in (an ellipsis,
    dash, quote or arrow: ``ASCII_STAND_INS``) or as an escape (as Python's stderr does)
    instead of raising UnicodeEncodeError. Under an ASCII or Latin-1 locale
    (`LC_ALL=C PYTHONUTF8=0`, `PYTHONIOENCODING=ascii`, en_US.ISO-8859-1) a traceback
    ended `fleetctl docs reasons` (its em dash), `fleetctl events` once a cancel reason
    held an accent, and every table rich cut with "…" on a terminal."""
    codecs.register_error(STDOUT_ERRORS, _unencodable)
    reconfigure = getattr(sys.stdout, "reconfigure", None)  # a TextIOWrapper's (not a test runner's stream)
    if reconfigure is not None:
        reconfigure(errors=STDOUT_ERRORS)


def main() -> None:
    open_closed_streams()
    replace_unencodable_output()
    if runs_daemon(sys.argv[1:]):
        keep_hangups()
    from fleetctl.cli.main import main as cli_main

    cli_main()
