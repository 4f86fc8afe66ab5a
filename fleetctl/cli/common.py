"""What every command shares: options, the store, the policy, the provider, the clock.

The CLI is the edge where the clock is read and files are opened; everything
below it gets ``now`` and values passed in.
"""

from __future__ import annotations

import enum
import functools
import os
import re
import signal
import sys
from contextvars import ContextVar
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Iterable, NoReturn, Optional, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from fleetctl.model import CLOUDS, Policy
from fleetctl.store import Store, StoreError, default_url

if TYPE_CHECKING:
    from fleetctl.policy import PolicyFile


def piped_width(stream: object) -> int | None:
    """Output that is not a terminal (a file, a pipe to less or grep, a CI log)
    gets up to 400 columns, so a table keeps every cell whole instead of rich's
    80 columns that cut "provider" to "prov…"; a table takes only the width it
    needs. None (rich's own choice) for a terminal, which keeps its width, and
    when $COLUMNS is set, which wins over both."""
    isatty = getattr(stream, "isatty", None)
    if os.environ.get("COLUMNS") or (isatty is not None and isatty()):
        return None
    return 400


#: The exit status of a command whose output was piped into a reader that went away
#: (``fleetctl catalog | head -1``): the shell's status for a process ended by SIGPIPE.
CLOSED_PIPE_EXIT = 128 + signal.SIGPIPE


def exit_on_closed_pipe() -> NoReturn:
    """End quietly with ``CLOSED_PIPE_EXIT`` after a write to a pipe whose reader
    has gone. Design choice: as the Python documentation recommends (the signal
    module's note on SIGPIPE), the BrokenPipeError is caught and stdout pointed
    at /dev/null, so the interpreter's last flush does not fail again; SIGPIPE
    is not set to SIG_DFL, which would also kill the daemon and node-watch on a
    peer's closed socket. The status is the one `cat` or `grep` ends with there
    (141), not click's 1, so `set -o pipefail` scripts see what they see for
    every Unix tool, and nothing is printed: the reader wanted no more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(CLOSED_PIPE_EXIT)


def reader_gone(stream: object) -> bool:
    """Whether ``stream`` writes into a pipe whose reader has gone: poll reports an error
    condition on its descriptor (Linux and the BSDs do; a file, a terminal, a live pipe or a
    stream with no descriptor report none)."""
    import select

    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)  # type: ignore[attr-defined]
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no descriptor, a closed one, or no poll() here
        return False


class _Console(Console):
    """rich's Console, ending as :func:`exit_on_closed_pipe` does on a closed pipe (rich's own exits 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        exit_on_closed_pipe()


# emoji=False: user input such as "127.0.0.1:-1" must print as typed, not as ":-1:" -> an emoji.
console = _Console(highlight=False, soft_wrap=True, emoji=False, width=piped_width(sys.stdout))
err_console = _Console(stderr=True, highlight=False, soft_wrap=True, emoji=False, width=piped_width(sys.stderr))

DEFAULT_POLICY = Path("policies/example.yaml")

PolicyOption = Annotated[
    Optional[Path],
    typer.Option(
        "--policy",
        help="Policy YAML. Default: $FLEETCTL_POLICY, else policies/example.yaml.",
        show_default=False,
    ),
]
#: --policy of a command that reads the policy only when it is named (report; status on the sandbox).
NamedPolicyOption = Annotated[
    Optional[Path],
    typer.Option(
        "--policy",
        help="Policy YAML, read only when given, or when $FLEETCTL_POLICY names one.",
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


def cloud_names(cloud: str) -> list[str]:
    """The clouds of a --cloud value (``sim`` alone, or aws/gcp/azure separated by commas); raises
    ``typer.BadParameter`` otherwise (a usage error: exit 2, 1 under `plan`)."""
    if cloud == "sim":
        return ["sim"]
    names = [c.strip() for c in cloud.split(",") if c.strip()]
    unknown = [c for c in names if c not in CLOUDS]
    if not names or unknown or len(set(names)) != len(names):
        raise typer.BadParameter(f"{cloud!r}: choose sim, or one or more of {', '.join(CLOUDS)} separated by "
                                 "commas", param_hint="--cloud")
    return names


def _check_cloud(ctx: typer.Context, param: typer.CallbackParam, value: str) -> str:
    try:
        cloud_names(value)  # before any store is opened or created
    except typer.BadParameter as exc:  # click names the option and its variable: a bad FLEETCTL_CLOUD read as --cloud
        raise typer.BadParameter(exc.message, ctx=ctx, param=param) from None
    return value


CloudOption = Annotated[
    str,
    typer.Option(
        "--cloud", callback=_check_cloud,
        help="Where nodes are bought: sim (the sandbox, no account needed), or one or more of aws, gcp, azure "
        "separated by commas (e.g. aws,gcp,azure: one market across the clouds). The policy's infrastructure "
        "section names cluster, regions and networks. Credentials: boto3's usual chain; Google application "
        "default credentials; Azure DefaultAzureCredential (or a token in FLEETCTL_AZURE_ACCESS_TOKEN). "
        "Endpoints for private links and emulators: AWS_ENDPOINT_URL, FLEETCTL_GCP_API_ENDPOINT, "
        "FLEETCTL_AZURE_ENDPOINT (+ FLEETCTL_AZURE_CA_BUNDLE).",
        envvar="FLEETCTL_CLOUD",
    ),
]
LockTimeoutOption = Annotated[
    float,
    typer.Option(
        "--lock-timeout", min=0.0, max=3600.0,
        help="Seconds to wait while another fleetctl process (the daemon, another cron run, an apply) acts on the "
        "same state store; then give up with exit 1, having changed nothing.",
    ),
]
E = TypeVar("E", bound=enum.Enum)


def one_of(choices: type[E], *, case_sensitive: bool = True) -> dict[str, Any]:
    """``typer.Option`` arguments for an option taking one of ``choices``' values:
    ``typer.Option("--format", **one_of(OutputFormat))``.

    Design choice: typer checks an enum option inside a pydantic validator,
    whose message it shows, so a wrong word read "Invalid value for '--format':
    Value error, 'xml' is not one of 'text', 'json'."; this parser (typer's
    public ``parser``) refuses it as click words it, without the "Value error, ".
    The metavar lists the choices, as typer's did."""
    def parse(value: Any) -> E:
        if isinstance(value, choices):
            return value
        for member in choices:
            if member.value == value or (not case_sensitive and str(member.value).casefold() == str(value).casefold()):
                return member
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(repr(m.value) for m in choices)}.")

    return {"parser": parse, "metavar": "<" + "|".join(str(m.value) for m in choices) + ">"}


class TableFormat(str, enum.Enum):
    """--format of the commands that print a table, or JSON for scripts."""
    table = "table"
    json = "json"


class LogFormat(str, enum.Enum):
    TEXT = "text"
    JSON = "json"


class LogLevel(str, enum.Enum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


LogFormatOption = Annotated[
    LogFormat,
    typer.Option("--log-format", envvar="FLEETCTL_LOG_FORMAT", **one_of(LogFormat),
                 help="Log lines on stderr: text, or json (one object a line: time, level, logger, message, "
                 "exception; for a log pipeline). Times are UTC either way."),
]
LogLevelOption = Annotated[
    LogLevel,
    typer.Option("--log-level", envvar="FLEETCTL_LOG_LEVEL", **one_of(LogLevel, case_sensitive=False),
                 help="Least severe log records shown; debug is fleetctl's own (the cloud SDKs stay at info: their "
                 "debug is every HTTP exchange)."),
]
SeedOption = Annotated[
    int,
    typer.Option("--seed", min=0, help="Seed of the sandbox provider (node ids, launch delays; 0 or more).",
                 envvar="FLEETCTL_SEED"),
]


def refuse_repeated(flag: str, paths: list[Path]) -> None:
    """Exit 2 when one file is given twice to ``flag`` (by the same or another
    path): each input would count twice. A path that cannot be followed (a
    symlink loop) is left for its reader to report: os.path.realpath, since
    Path.resolve() raised RuntimeError for a loop before Python 3.13."""
    real = [os.path.realpath(p) for p in paths]
    twice = sorted({str(p) for p, r in zip(paths, real) if real.count(r) > 1})
    if twice:
        fail(f"{flag} given more than once: {', '.join(twice)}", 2)


def output_file_or_exit(flag: str, path: str, example_name: str, inputs: tuple[Path, ...] = ()) -> Path:
    """An output file's option as typed (a str: ``Path`` would drop a trailing
    '/') -> the Path to write; exits 2 when it names a directory, or one of
    ``inputs`` (the files the command reads: `trace import pods.csv -o
    pods.csv` replaced the trace it converts). Design choice: a directory is
    refused, not given a default file name inside, so the same option writes
    the same file whatever exists. '-' (stdout) passes."""
    if path != "-":
        from fleetctl.files import directory_reason

        reason = directory_reason(path)
        if reason is not None:
            fail(f"{flag} {path}: {reason}; give the file's path, e.g. {os.path.join(path, example_name)}", 2)
        for source in inputs:
            if os.path.isfile(path) and os.path.isfile(source) and os.path.samefile(path, source):
                fail(f"{flag} {path}: is the file this command reads ({source}); writing it would replace it. "
                     "Give another output file; nothing was written", 2)
    return Path(path)


def report_dir_or_exit(report: Path | None) -> None:
    """Check the --report directory before the work (a bad path exits 2 at once,
    not after minutes) without creating it: the report's writer does, once
    there is something to write (a failed or interrupted run left an empty
    directory behind)."""
    if report is None:
        return
    if str(report) == "-":  # made a directory named '-'
        fail("--report -: the report is a directory of PNG files; it cannot be written to stdout", 2)
    from fleetctl.files import cannot_create_reason

    reason = cannot_create_reason(report)
    if reason is not None:
        fail(f"--report {report}: cannot write there: {reason}", 2)


def stop_cleanly_on_sigterm() -> None:
    """SIGTERM (a cron deadline, `timeout`, `systemctl stop`, a Kubernetes
    CronJob) ends the command through the normal unwinding, as Ctrl-C does:
    the store's open transaction rolls back and the controller lease is
    released (Python's default ends the process on the spot, leaving the
    lease held until it expired)."""
    import signal

    def _stop(signum, _frame):  # noqa: ANN001
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _stop)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


# Set while `plan` runs: every error exits 1 there, since 2 means "changes" under -detailed-exitcode
# (Terraform does the same); other commands exit 2 for an unusable command-line value or input file.
_ERROR_EXIT: ContextVar[int | None] = ContextVar("fleetctl_error_exit", default=None)

F = TypeVar("F", bound=Callable[..., Any])


#: ``30m``, ``24h``, ``1.5d``: that long before now (``--since``/``--until`` of `report` and `events`).
_SPAN = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd])\s*")
_SPAN_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}

WHEN_HELP = ("ISO 8601 in UTC (2026-11-01, 2026-11-01T06:00:00Z; a time without an offset is UTC, one with an "
             "offset is converted) or a span before now: 30m, 24h, 7d")


def parse_when(option: str, value: str, now: datetime) -> datetime:
    """``value`` of ``option`` (``--since``/``--until``) as a UTC time (see
    ``WHEN_HELP``); a usage error (exit 2) naming the option and the value otherwise."""
    span = _SPAN.fullmatch(value)
    try:
        if span:
            return now - timedelta(**{_SPAN_UNITS[span.group(2)]: float(span.group(1))})
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            fail(f"{option} {value!r} is not a time: give {WHEN_HELP}", 2)
        return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
    except OverflowError:
        fail(f"{option} {value!r}: out of the range of times", 2)


def utf8_or_exit(option: str, values: Iterable[str]) -> list[str]:
    """``values`` (from the command line) as text; a usage error (exit 2) naming ``option`` when one
    is not UTF-8: Python carries such bytes as lone surrogates, which the store cannot encode (a
    traceback). Where the locale's encoding is not UTF-8 (``LC_ALL=C`` with Python's UTF-8 mode
    off) it carries the bytes of a UTF-8 argument ("Kündigung") so too: those are read as the
    UTF-8 they are, as everywhere else (they were refused as "not UTF-8")."""
    texts = []
    for value in values:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            recovered = _utf8_argument(value)
            if recovered is not None:
                texts.append(recovered)
                continue
            bad = ord(value[exc.start])
            byte = f"byte {bad - 0xDC00:#04x}" if 0xDC80 <= bad <= 0xDCFF else f"U+{bad:04X}"
            try:  # the bytes as given: b"\xff" shown as \xff
                shown = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            except UnicodeEncodeError:
                shown = value.encode("utf-8", "backslashreplace").decode("utf-8")
            fail(f"{option} '{shown}' is not UTF-8 text ({byte} at character {exc.start + 1})", 2)
        texts.append(value)
    return texts


def _utf8_argument(value: str) -> str | None:
    """The command-line argument ``value`` read from its bytes as UTF-8; None if they are not UTF-8."""
    try:
        return os.fsencode(value).decode("utf-8")
    except UnicodeError:
        return None


def comma_list(values: Iterable[str] | None) -> list[str]:
    """A repeatable option's values, each also split at commas (``--team a,b`` as ``--team a --team b``,
    as ``report --by`` reads its keys): team names, event kinds and the like hold no comma. Blank
    items are dropped, each value is kept once, in order."""
    out: list[str] = []
    for value in values or ():
        for item in value.split(","):
            item = item.strip()
            if item and item not in out:
                out.append(item)
    return out


def errors_exit_1(command: F) -> F:
    """Make every ``fail`` inside ``command`` exit 1 (see ``_ERROR_EXIT``)."""
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        token = _ERROR_EXIT.set(1)
        try:
            return command(*args, **kwargs)
        finally:
            _ERROR_EXIT.reset(token)
    return wrapper  # type: ignore[return-value]


def option_source(ctx: typer.Context, name: str) -> str | None:
    """Where option ``name``'s value came from: "COMMANDLINE", "ENVIRONMENT", "DEFAULT", ... (by name:
    typer's ParameterSource is not click's enum)."""
    source = ctx.get_parameter_source(name)
    return None if source is None else source.name


def given_as(ctx: typer.Context, name: str, option: str, envvar: str) -> str:
    """How option ``name`` was given, for its errors: ``envvar`` when its value came from there (a unit file's
    line, which nobody typed as ``option``), else ``option``."""
    return envvar if option_source(ctx, name) == "ENVIRONMENT" else option


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``Error: message`` (taken literally: file names and addresses may hold "[...]") and exit."""
    err_console.print(f"[bold red]Error:[/] {escape(message)}")
    raise typer.Exit(_ERROR_EXIT.get() or code)


def read_token_file(option: str, path: Path, logger: str) -> str:
    """The notice endpoint's bearer token from ``path`` (``--token-file``,
    ``--notice-token-file``): its text without the whitespace around it,
    checked by ``fleetctl.nodewatch.token_problem``; exits 2 with the reason if
    it cannot be read or cannot be a token (a value given on the command line
    is unusable, as for ``FLEETCTL_NOTICE_TOKEN``; node-watch keeps 1 for a
    notice it could not deliver). Warns (on ``logger``) when others may read it."""
    import logging

    from fleetctl.nodewatch import token_problem

    try:
        raw = path.read_bytes()
    except OSError as exc:
        fail(f"{option} {path}: {exc.strerror or exc}", 2)
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        fail(f"{option} {path} is not text: byte {raw[exc.start]:#04x} at offset {exc.start} is not UTF-8; "
             "a token is one line of printable ASCII", 2)
    if not token:
        fail(f"{option} {path} is empty", 2)
    problem = token_problem(token)
    if problem:
        fail(f"{option} {path}: {problem}", 2)
    if os.name == "posix" and path.stat().st_mode & 0o077:
        logging.getLogger(logger).warning("%s is readable by other users; chmod 600 it", path)
    return token


def is_bug(exc: BaseException) -> bool:
    """An ``ApplyInterrupted`` whose cause is not the environment's error (a
    cloud unreachable, a store it cannot write: ``fleetctl.cli.main.known_error``)
    but a bug, whose traceback must show after the report (as with
    ``FLEETCTL_DEBUG=1`` for any cause)."""
    from fleetctl.cli.main import DEBUG_ENV, known_error
    from fleetctl.controller import ApplyInterrupted

    if not isinstance(exc, ApplyInterrupted):
        return False
    return exc.__cause__ is None or known_error(exc.__cause__) is None or bool(os.environ.get(DEBUG_ENV))


def policy_path(option: Path | None) -> Path:
    if option is not None:
        return option
    env = os.environ.get("FLEETCTL_POLICY")
    return Path(env) if env else DEFAULT_POLICY


def load_policy_or_exit(option: Path | None, code: int = 1) -> tuple[Policy, Path]:
    """Load and validate the policy, or print every issue and exit."""
    read, path = read_policy_file_or_exit(option, code)
    return read.policy, path


def read_policy_file_or_exit(option: Path | None, code: int = 1) -> tuple[PolicyFile, Path]:
    """:func:`load_policy_or_exit`, keeping what ``fleetctl.policy.read_policy_file``
    keeps (the spec, the document, the file's SHA-256)."""
    from fleetctl.policy import read_policy_file
    from fleetctl.yamlerrors import SpecError

    path = policy_path(option)
    if not path.exists():
        start = "fleetctl policy init" + ("" if path == DEFAULT_POLICY else f" -o {path}")
        fail(
            f"policy file {path} not found: pass --policy FILE or set FLEETCTL_POLICY "
            f"(the default is {DEFAULT_POLICY} under the working directory); to start one from the "
            f"commented example: {start}",
            code,
        )
    try:
        return read_policy_file(path), path
    except SpecError as exc:
        for issue in exc.issues:
            err_console.print(str(issue), markup=False)
        fail(f"{path}: {len(exc.issues)} policy error(s)", code)


#: The URL of the state store this command opened (``open_store``): errors of the store name it.
OPENED_STORE: str | None = None


def open_store(option: str | None, *, must_exist: bool = False, read_only: bool = False) -> Store:
    """The state store (``--state``, else ``$FLEETCTL_STATE``, else ``.fleetctl/state.db``
    here). ``must_exist``: a command that only reads or changes what is stored
    (``status``, ``jobs list``, ``explain``, ...) refuses a SQLite store that does
    not exist yet instead of creating an empty one (run from another directory,
    it would report an empty fleet). ``read_only`` (with ``must_exist``): a
    command that only reads opens it so, and can then read a store where this
    user may not write (``Store``)."""
    url = option or default_url()
    # errors name where the URL came from: a bad FLEETCTL_STATE in a unit file was reported as --state
    label = "FLEETCTL_STATE" if not option and os.environ.get("FLEETCTL_STATE") else "--state"
    if "://" not in url and not url.startswith("sqlite:"):
        from fleetctl.model import JobState

        if url in {s.value for s in JobState}:
            hint = f"; to list the jobs in state {url}, use `fleetctl jobs list --only {url}`"
        elif url.endswith(".db"):  # the path of a SQLite file ('~/state.db' as quoted: ~ unexpanded)
            hint = (f"; for the SQLite file {url}: {label}{' ' if label == '--state' else '='}"
                    f"sqlite:///{Path(os.path.expanduser(url)).absolute()}")
        else:
            hint = ""
        fail(f"{label} {url!r} is not a state store URL (sqlite:///path/state.db, or "
             f"postgresql+psycopg://user@host/db): {label} names where fleetctl keeps its state{hint}", 2)
    scheme = _unknown_scheme(url)
    if scheme is not None:
        from fleetctl.store import safe_url

        fail(f"{label} {safe_url(url)!r}: {scheme!r} is not a database fleetctl knows (sqlite:///path/state.db, or "
             "postgresql+psycopg://user@host/db)", 2)
    is_sqlite, database = _sqlite_database(url)
    if is_sqlite and database in (None, "", ":memory:"):
        fail(f"{label} {url!r} is an in-memory SQLite database: nothing would be kept after this command; give a "
             "file (sqlite:///path/state.db) or a server URL", 2)
    explicit = option is not None or bool(os.environ.get("FLEETCTL_STATE"))
    if is_sqlite and explicit and not Path(database).parent.is_dir():  # type: ignore[arg-type]
        # sqlite:///~/state.db, as a systemd unit or a Kubernetes env value passes it
        if database.startswith("~"):  # type: ignore[union-attr]
            full = os.path.expanduser(database)  # unchanged where there is no such home (Path's raised)
            example = f": sqlite:///{Path(full).absolute()}" if full != database else ""
            fail(f"{label} {url!r}: a URL's path is taken as written, ~ is not expanded there (nothing was "
                 f"created); give the full path{example}", 2)
        fail(f"{label} {url!r}: the directory {Path(database).parent} does not exist (a typo?); nothing was "  # type: ignore[arg-type]
             "created. Create it first to start a new store there", 2)
    # SQLite itself says only "unable to open database file" there
    if is_sqlite and Path(database).is_dir():  # type: ignore[arg-type]
        fail(f"{label} {url!r}: {database} is a directory; give the path of the SQLite file, e.g. "
             f"sqlite:///{Path(database, 'state.db').absolute()}", 2)  # type: ignore[arg-type]
    if must_exist and is_sqlite and not Path(database).exists():  # type: ignore[arg-type]
        where = label if explicit else "the default under the working directory"
        fail(f"no state store at {database} ({where}): nothing has been planned or submitted with it. Run fleetctl "
             "from the directory you use it in, or pass --state / set FLEETCTL_STATE", 1)
    global OPENED_STORE
    try:
        from fleetctl import logs

        # a one-shot command says a schema upgrade itself (the long-running ones log it)
        notify = None if logs.configured() else (lambda message: err_console.print(f"note: {message}", markup=False))
        store = Store(url, read_only=read_only, notify=notify)
        OPENED_STORE = store.url
        return store
    except StoreError as exc:
        if os.environ.get("FLEETCTL_DEBUG"):
            raise
        hint = _unwritable_hint(Path(database), explicit) if is_sqlite and not read_only else ""  # type: ignore[arg-type]
        fail(str(exc) + hint)


def _unwritable_hint(database: Path, explicit: bool) -> str:
    """Why a SQLite store could not be opened when its directory cannot be written (a read-only
    working directory, as in many containers, holds the default store), and where to keep it; ""
    otherwise."""
    from fleetctl.files import cannot_create_reason

    reason = cannot_create_reason(database.parent)
    if reason is None:
        return ""
    where = "" if explicit else " (the default store, under the working directory)"
    return (f"; {reason}{where}: pass --state sqlite:////PATH/state.db or set FLEETCTL_STATE to keep it in a "
            "directory this user may write")


def store_may_exist(option: str | None) -> bool:
    """False only when the store (as :func:`open_store` would pick it) is a SQLite
    file that does not exist: then nothing is stored in it yet."""
    is_sqlite, database = _sqlite_database(option or default_url())
    return not (is_sqlite and database not in (None, "", ":memory:") and not Path(database).exists())


def _unknown_scheme(url: str) -> str | None:
    """The scheme of ``url`` when SQLAlchemy has no dialect for it (``http://...``, a typo such as
    ``postgress://``); None otherwise, also for URLs it cannot parse (Store reports those)."""
    import sqlalchemy as sa

    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        return None
    try:
        parsed.get_dialect()
    except sa.exc.NoSuchModuleError:
        return parsed.drivername
    return None


def _sqlite_database(url: str) -> tuple[bool, str | None]:
    """(is it SQLite, its database path: None, "" or ":memory:" when in memory); (False, None) for
    other databases and URLs SQLAlchemy cannot parse (Store reports those)."""
    import sqlalchemy as sa

    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number (http://[::1)
        return False, None
    return parsed.get_backend_name() == "sqlite", parsed.database


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


def check_cloud(cloud: str, policy: Policy | None) -> list[str]:
    """The clouds ``--cloud`` names, once checked against the policy (its
    infrastructure section, its allowed providers); exits otherwise. No
    adapter is built and no cloud is called."""
    if cloud == "sim":
        return []
    try:
        names = cloud_names(cloud)
    except typer.BadParameter as exc:
        fail(f"--cloud {exc.message}", 2)
    if policy is None or policy.infrastructure is None:
        fail(f"--cloud {cloud} needs the policy's infrastructure section (cluster, controller_url and the "
             "settings of each cloud); see docs/terraform.md")
    if policy.providers:
        refused = [c for c in names if c not in policy.providers]
        if refused:
            fail(f"--cloud {cloud}: the policy does not allow {', '.join(refused)} (providers: "
                 f"{', '.join(policy.providers)})")
    return names


def make_provider(store: Store, seed: int, cloud: str = "sim", policy: Policy | None = None):  # noqa: ANN201
    """The sandbox is the embedded default; ``--cloud aws,gcp,azure`` are the
    real adapters, each with throttled calls retried, several of them behind
    one ``MultiCloud``, and their nodes recorded in the store."""
    if cloud == "sim":
        from providers.sim import SimProvider

        return SimProvider(store, seed=seed, launch_delay_seconds=sim_launch_delay_seconds())
    names = check_cloud(cloud, policy)
    infra = policy.infrastructure
    from fleetctl.controller.recorded import RecordedNodes
    from providers.retry import ThrottleRetry

    try:
        adapters = [ThrottleRetry(_adapter(name, infra)) for name in names]
    except ImportError as exc:
        fail(str(exc))
    if len(adapters) == 1:
        return RecordedNodes(adapters[0], store)
    from providers.multi import MultiCloud

    return RecordedNodes(MultiCloud(adapters), store)


def _adapter(name: str, infra):  # noqa: ANN001, ANN202 - a Provider
    if name == "aws":
        if not infra.aws:
            fail("--cloud aws needs infrastructure.aws with at least one region (image_id, subnet_ids)")
        from providers.aws import AwsConfig, AwsProvider

        return AwsProvider.from_boto3(AwsConfig(
            cluster=infra.cluster,
            regions=tuple(r.region for r in infra.aws),
            subnet_ids={r.region: r.subnet_ids for r in infra.aws},
            placement_group_regions=frozenset(r.region for r in infra.aws if r.gang_placement_groups),
        ))
    if name == "gcp":
        if infra.gcp is None:
            fail("--cloud gcp needs infrastructure.gcp (project, regions, image, network)")
        from providers.gcp import GcpConfig, GcpProvider

        gcp = infra.gcp
        return GcpProvider.from_settings(
            GcpConfig(project=gcp.project, cluster=infra.cluster, regions=gcp.regions, image=gcp.image,
                      network=gcp.network, subnetwork=gcp.subnetwork or None,
                      service_account=gcp.service_account_email or None, termination_action=gcp.termination_action),
            api_endpoint=os.environ.get("FLEETCTL_GCP_API_ENDPOINT") or None,
            anonymous=os.environ.get("FLEETCTL_GCP_CREDENTIALS") == "anonymous")
    if infra.azure is None:
        fail("--cloud azure needs infrastructure.azure (subscription_id, resource_group, admin_ssh_public_key, "
             "regions)")
    from providers.azure import AzureConfig, AzureProvider, AzureRegion, credential_for, node_watch_custom_data

    azure = infra.azure
    credential = credential_for(os.environ.get("FLEETCTL_AZURE_ACCESS_TOKEN"))
    kwargs = {}
    if os.environ.get("FLEETCTL_AZURE_CA_BUNDLE"):
        kwargs["connection_verify"] = os.environ["FLEETCTL_AZURE_CA_BUNDLE"]
    return AzureProvider.from_sdk(
        AzureConfig(cluster=infra.cluster, subscription_id=azure.subscription_id,
                    resource_group=azure.resource_group,
                    regions=tuple(AzureRegion(r.region, r.subnet_id, r.image_id) for r in azure.regions),
                    ssh_public_key=azure.admin_ssh_public_key,
                    custom_data_b64=node_watch_custom_data(infra.controller_url)),
        credential, base_url=os.environ.get("FLEETCTL_AZURE_ENDPOINT") or None, **kwargs)
