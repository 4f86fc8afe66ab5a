"""The state store: every fact fleetctl learns or acts on, in SQL.

SQLite under the working directory by default (``.fleetctl/state.db``), any
SQLAlchemy URL through ``--state`` or ``FLEETCTL_STATE`` (PostgreSQL when
several controllers share state). The schema is managed by alembic from the
first revision; opening a store upgrades it to the latest revision.

Contract: every public method is atomic on its own; ``transaction()`` groups
several calls into one all-or-nothing unit (``apply`` uses it so that a failed
apply leaves the store as it was).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from fleetctl import signals
from fleetctl.codec import (dt_to_str, job_from_dict, job_spec_dict, job_to_dict, node_from_dict, node_to_dict,
                           stored_time, str_to_dt)
from fleetctl.model import JOB_RUNTIME_FIELDS, InterruptionEvent, InterruptionKind, Job, JobState, Market, Node, NodeState, Offer
from fleetctl.report import STOP_KINDS
from fleetctl.store import tables

DEFAULT_STATE_DIR = ".fleetctl"
log = logging.getLogger("fleetctl.store")
MIGRATIONS = Path(__file__).with_name("migrations")
#: The newest schema revision, the head of ``migrations/versions`` (a test keeps the two equal). A store
#: at it opens without importing alembic, which took a quarter of a second of every command's start.
SCHEMA_HEAD = "0011"
#: pg_advisory_xact_lock key serialising schema upgrades on a PostgreSQL database ("fleetmig" in ASCII)
PG_MIGRATION_LOCK_KEY = 0x666C6565746D6967


class StoreError(Exception):
    """The store cannot be opened or a write contradicts what it holds."""


def _shown(stored: str) -> str:
    """A stored time in the form the store hands out (``dt_to_str``: no zero fraction)."""
    return dt_to_str(str_to_dt(stored))  # type: ignore[return-value]


def _about_a_second_wider(query: Any, column: Any, since: datetime | None, until: datetime | None) -> Any:
    """``query`` limited to ``column`` (a stored timestamp) in ``[since,
    until)``, a second wider each side: timestamps are compared as text, and
    ISO 8601 with and without a fraction sorts a fraction of a second wrong
    ("...:14.25Z" < "...:14Z"). ``_within`` then filters the rows exactly.
    Since migration 0011 every stored time has one width (``stored_time``), so the
    text bounds alone would do; the widening stays as a guard for rows written
    by other tools."""
    if since is not None:
        query = query.where(column >= stored_time(since - timedelta(seconds=1)))
    if until is not None:
        query = query.where(column < stored_time(until + timedelta(seconds=1)))
    return query


def _within(stored: str, since: datetime | None, until: datetime | None) -> bool:
    """Whether a stored timestamp is in ``[since, until)`` (either open)."""
    if since is None and until is None:
        return True
    at = str_to_dt(stored)
    return at is not None and (since is None or since <= at) and (until is None or at < until)


class _UnknownSchema(Exception):
    """alembic's CommandError: the store's revision is none of this
    fleetctl's (so that opening a store does not import alembic)."""


class ConcurrentApply(StoreError):
    """Another fleetctl process wrote the same launch intent first (two
    controllers applying the same plan); this one's transaction is rolled back."""


class LeaseHeld(StoreError):
    """Another process holds a lease on this store (see ``Store.acquire_lease``).
    ``holder`` is the stored id; ``shown``, if given, how the message shows it."""

    def __init__(self, name: str, holder: str, seconds_left: float, shown: str | None = None) -> None:
        super().__init__(
            f"another fleetctl process is acting on this state store ({shown or holder}; its {name!r} lease runs "
            f"{seconds_left:.0f} s more unless it finishes first; a process that died holds it no longer than that)")
        self.name = name
        self.holder = holder
        self.seconds_left = seconds_left


class UnknownJobs(StoreError):
    """Job ids the store does not hold (nor their tombstones): ``job_ids``."""

    def __init__(self, job_ids: list[str], message: str) -> None:
        super().__init__(message)
        self.job_ids = tuple(job_ids)


class DuplicateJob(StoreError):
    """Job ids already stored with another spec. ``conflicts`` holds
    ``(job id, stored state, changes)`` for each, ``changes`` being
    ``(field, stored value, new value)`` for each ``Job`` field that differs;
    ``job_id`` and ``state`` are the first's."""

    def __init__(self, job_id: str, state: str = "", changes: tuple[tuple[str, Any, Any], ...] = (),
                 more: tuple[tuple[str, str, tuple[tuple[str, Any, Any], ...]], ...] = ()) -> None:
        others = f" (and {len(more)} more: {', '.join(repr(m[0]) for m in more)})" if more else ""
        super().__init__(f"job {job_id!r} already exists with a different spec" + (f" ({state})" if state else "")
                         + others)
        self.job_id = job_id
        self.state = state
        self.conflicts = ((job_id, state, changes), *more)


def default_url(cwd: Path | None = None) -> str:
    """``$FLEETCTL_STATE`` if set, else SQLite in ``.fleetctl/state.db`` under ``cwd``."""
    env = os.environ.get("FLEETCTL_STATE")
    if env:
        return env
    try:
        base = (cwd or Path.cwd()) / DEFAULT_STATE_DIR
    except FileNotFoundError:  # os.getcwd() names no file: "Error: No such file or directory" said no more
        raise StoreError("the working directory no longer exists (removed or replaced since the shell entered it), "
                         f"and the default state store is {DEFAULT_STATE_DIR}/state.db under it: "
                         "run fleetctl from the directory of the store, or pass --state / set FLEETCTL_STATE") \
            from None
    return f"sqlite:///{base / 'state.db'}"


def safe_url(url: str) -> str:
    """``url`` with its password masked, for messages and logs."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)  # user:password@ still masked


def _sa_text(exc: Exception) -> str:
    """SQLAlchemy's message without its "(Background on this error at: ...)" link."""
    return " ".join(line.strip() for line in str(exc).splitlines() if not line.startswith("(Background on this error"))


def _decode(text: str, what: str) -> Any:
    """A stored JSON document, or a StoreError naming the row."""
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"the state store is damaged: {what} is not valid JSON ({exc})") from exc


def _row(decode: Any, text: str, what: str) -> Any:
    """A value object from its stored JSON, or a StoreError naming the row."""
    try:
        return decode(_decode(text, what))
    except StoreError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"the state store is damaged: {what} does not decode ({type(exc).__name__}: {exc})") from exc


#: Ids bound into one ``IN (...)``: under every supported database's bound-parameter limit.
_IN_CHUNK = 500


def _chunks(ids: Iterable[str]) -> Iterator[list[str]]:
    """``ids`` (each once, sorted) in lists of at most ``_IN_CHUNK``."""
    wanted = sorted(set(ids))
    return (wanted[i:i + _IN_CHUNK] for i in range(0, len(wanted), _IN_CHUNK))


def _rows_with(conn: Connection, query: Any, column: Any, ids: Iterable[str]) -> list[Any]:
    """The rows of ``query`` whose ``column`` is one of ``ids``, read in
    chunks of ``_IN_CHUNK`` ids (a long list would pass the bound-parameter limit)."""
    return [r for chunk in _chunks(ids) for r in conn.execute(query.where(column.in_(chunk))).all()]


def _delete_with(conn: Connection, table: Any, column: Any, ids: Iterable[str]) -> int:
    """Delete the rows of ``table`` whose ``column`` is one of ``ids``, in
    chunks as ``_rows_with`` reads them; returns how many were deleted."""
    return sum(conn.execute(table.delete().where(column.in_(chunk))).rowcount for chunk in _chunks(ids))


#: How ``retry_key`` marks a new purchase under a launch key used before: ``<key>-r<attempt>``.
_RETRY = re.compile(r"-r[0-9]+$")


def retry_key(key: str, attempt: int) -> str:
    """The idempotency key of the ``attempt``-th new purchase of a plan's
    launch ``key`` (``fleetctl.controller``: every node bought under the
    earlier keys is gone, and the same state has come back). Defined here
    because retention keeps or deletes a key's launches together
    (``Store.prune_finished``)."""
    return f"{key}-r{attempt}"


def _launch_chain(key: str) -> str:
    """The launch key ``key`` is a ``retry_key`` of (itself if none)."""
    return _RETRY.sub("", key)


def _make_engine(url: str, read_only: bool = False) -> Engine:
    database = sa.engine.make_url(url).database if url.startswith("sqlite:") else None
    on_file = database not in (None, "", ":memory:") and not str(database).startswith("file:")
    if read_only and on_file:
        engine = sa.create_engine(url, future=True, creator=lambda: _connect_read_only(str(database)))
    else:
        if on_file:
            Path(str(database)).parent.mkdir(parents=True, exist_ok=True)
        # A server's connections die with it (a PostgreSQL restart or failover): the pool checks each one
        # before use and opens a new one for a dead one, so the first pass after a restart does not fail.
        engine = sa.create_engine(url, future=True, pool_pre_ping=not url.startswith("sqlite"))
    if engine.dialect.name == "sqlite":

        @sa.event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:  # pragma: no cover - trivial
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA busy_timeout=10000")
            if not read_only:  # setting it writes the file's header (a store of an old fleetctl may not be WAL)
                cur.execute("PRAGMA journal_mode=WAL")
            cur.close()

    return engine


def _connect_read_only(database: str) -> Any:
    """A SQLite connection that cannot write ``database`` (``mode=ro``).

    Design choice: a WAL-mode database is read through ``DATABASE-shm``,
    which SQLite creates beside it; in a directory this user cannot write
    (a copy of the daemon's store, a read-only mount) and without that file,
    even ``mode=ro`` fails ("attempt to write a readonly database"). Then,
    and only when no ``-wal`` file holds changes the main file lacks, it is
    opened ``immutable=1``: read as it is, without the shared-memory file.
    No writer is running on it then (a running one keeps its ``-shm`` there);
    one starting during this short read is not guarded against. With changes
    in a ``-wal`` (or a rollback ``-journal``) the open fails naming the files
    and the fix: those changes would otherwise be skipped without a word."""
    import sqlite3
    from urllib.parse import quote

    uri = "file:" + quote(os.path.abspath(database))
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # reads: needs -shm on a WAL database
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        if exc.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN) \
                or not Path(database).is_file():
            raise
        for log in (Path(f"{database}-wal"), Path(f"{database}-journal")):
            if log.exists() and log.stat().st_size > 0:
                raise StoreError(
                    f"cannot read state store {database}: it has changes in {log} that SQLite cannot read here: "
                    f"it cannot create its files beside them in {Path(database).parent} ({exc}); copy {database} "
                    f"and {log} into a writable directory and pass --state sqlite:///COPY") from None
    return sqlite3.connect(f"{uri}?immutable=1", uri=True, check_same_thread=False)


class Store:
    """A handle on the state store. Cheap to create; close() when done."""

    def __init__(self, url: str, *, read_only: bool = False, notify: Callable[[str], None] | None = None) -> None:
        """``read_only``: for commands that only read (``status``, ``jobs list``,
        ``events``, ``report``);
        a SQLite file is opened so that nothing can be written to it, and it can
        be read where this user may not write (``_connect_read_only``). Its
        schema must be current then: an upgrade would write.

        ``notify``: where the upgrade of an older schema is said (``_upgrade``);
        the ``fleetctl.store`` logger by default."""
        self.url = url
        self.read_only = read_only
        self._notify = notify
        shown = safe_url(url)
        try:
            self._engine = _make_engine(url, read_only)
        except ImportError as exc:
            # psycopg (3) is what postgresql:// and postgresql+psycopg:// load; it ships in the [postgres] extra
            hint = "; install it with: pip install 'fleetctl[postgres]'" if exc.name == "psycopg" else ""
            raise StoreError(f"cannot open state store {shown}: its database driver is not installed ({exc}){hint}") \
                from exc
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"cannot open state store {shown}: {_sa_text(exc)}") from exc
        except ValueError as exc:  # make_url's int(port): "http://[::1", "host:abc"
            raise StoreError(f"cannot open state store {shown}: not a valid database URL ({exc})") from exc
        except OSError as exc:
            raise StoreError(f"cannot open state store {shown}: {exc.strerror or exc}: {exc.filename}") from exc
        try:
            self._migrate()
        except StoreError:
            self._engine.dispose()
            raise
        except sa.exc.SQLAlchemyError as exc:
            self._engine.dispose()
            raise StoreError(f"cannot open state store {shown}: {_sa_text(exc)}") from exc
        except _UnknownSchema as exc:
            self._engine.dispose()
            raise StoreError(
                f"cannot open state store {shown}: its schema ({exc}) is not one this fleetctl knows; it was "
                "probably written by a newer fleetctl (upgrade fleetctl, or point --state at another store)"
            ) from exc
        self._conn: Connection | None = None
        #: per query (``_decoded``): the stored text and value object of each row of its last answer
        self._memo: dict[tuple[Any, ...], dict[str, tuple[str, Any]]] = {}
        #: SQLite in memory: this process's alone (the simulator's), so no other process can be locked out of it
        self.in_memory = ":memory:" in url or url.rstrip("/") in ("sqlite:", "sqlite:/")
        # SIGTERM and Ctrl-C wait for a transaction's end (fleetctl.signals) where another process shares the store
        self._deferred = nullcontext if self.in_memory else signals.deferred

    def _migrate(self) -> None:
        """Upgrade the schema to the latest revision. Checked first without a
        lock, so that a current store is only read (a read-only mount,
        ``status`` beside a running daemon); upgraded under the migration lock
        otherwise, where ``command.upgrade`` reads the revision again (another
        process may have upgraded it meanwhile). A store at ``SCHEMA_HEAD``
        is told by one query, without alembic."""
        if self._at_schema_head():
            return
        from alembic import util as alembic_util

        try:
            self._migrate_with_alembic()
        except alembic_util.CommandError as exc:
            raise _UnknownSchema(str(exc)) from exc

    def _migrate_with_alembic(self) -> None:
        from alembic import util as alembic_util
        from alembic.config import Config
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        with self._engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
        script = ScriptDirectory.from_config(cfg)
        if current is not None:
            if current == script.get_current_head():
                return
            if current not in {rev.revision for rev in script.walk_revisions()}:  # a newer fleetctl's: no lock needed
                raise alembic_util.CommandError(f"Can't locate revision identified by '{current}'")
        head = script.get_current_head()
        if self.read_only:
            # The first command after upgrading fleetctl is often `status`: an older schema is upgraded
            # through a writable handle where this user may write the store; only a store that cannot
            # be written here (a read-only copy or mount) is refused.
            if current is not None and self._upgrade(cfg, writable_only=True, from_revision=current, to=head):
                return
            if current is None:
                with self._engine.connect() as conn:
                    self._refuse_another_programs(conn)
            what = "holds no fleetctl state" if current is None else \
                f"has schema revision {current}, older than this fleetctl's ({head})"
            raise StoreError(f"cannot read state store {safe_url(self.url)}: it {what}, and this command only reads; "
                             "run a command that writes (fleetctl jobs submit, reconcile --once) on it first "
                             "where it is writable")
        self._upgrade(cfg, from_revision=current, to=head)

    def _at_schema_head(self) -> bool:
        """Whether the store's schema revision is ``SCHEMA_HEAD``. False for
        anything else, an error included (no ``alembic_version`` table yet):
        ``_migrate``'s alembic path then says what it is."""
        try:
            with self._engine.connect() as conn:
                rows = conn.execute(sa.text("SELECT version_num FROM alembic_version")).fetchall()
        except sa.exc.DBAPIError:
            return False
        return [tuple(row) for row in rows] == [(SCHEMA_HEAD,)]

    def _upgrade(self, cfg: Any, *, writable_only: bool = False, from_revision: str | None = None,
                 to: str | None = None) -> bool:
        """Run the migrations to head, under the migration lock. ``writable_only``
        (a read-only handle): through a writable engine of its own, and False,
        with nothing changed, when the store cannot be written here.

        The upgrade of an existing store (``from_revision``) is said before it
        (a command that waits minutes on a large store with nothing said looks
        hung, and stopping it only delays it: the upgrade is one transaction)
        and with its time after: to ``notify``, else on the ``fleetctl.store``
        logger (a warning, then an info line). A new store's schema is created
        without a word."""
        engine = _make_engine(self.url) if writable_only else self._engine
        began = time.monotonic()
        if from_revision is not None:
            self._say(logging.WARNING, f"upgrading the schema of state store {safe_url(self.url)} from revision "
                      f"{from_revision} to {to} (this fleetctl's); on a large store this can take minutes: let it "
                      "finish")
        try:
            with self._migration_lock(), signals.deferred(), engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    # Not serialised by PostgreSQL itself: processes opening a fresh database together each
                    # created alembic_version (UniqueViolation), and each ran an upgrade's CREATE TABLE
                    # ("relation ... already exists"). Held to this transaction's end, the upgrade's.
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_MIGRATION_LOCK_KEY})
                self._refuse_another_programs(conn)  # under the lock: no other fleetctl is half-way creating it
                cfg.attributes["connection"] = conn
                from alembic import command

                command.upgrade(cfg, "head")
        except (StoreError, sa.exc.OperationalError, OSError):
            if not writable_only:
                raise
            return False  # no lock file, or "attempt to write a readonly database": a read-only store
        finally:
            if writable_only:
                engine.dispose()
        if from_revision is not None:
            self._say(logging.INFO, f"upgraded the schema of state store {safe_url(self.url)} to revision {to} in "
                      f"{time.monotonic() - began:.1f} s")
        return True

    def _say(self, level: int, message: str) -> None:
        if self._notify is not None:
            self._notify(message)
        else:
            log.log(level, "%s", message)

    def _refuse_another_programs(self, conn: Connection) -> None:
        """``StoreError`` for a database with no fleetctl schema version but
        tables of fleetctl's names: another program's (--state at the wrong
        file). The upgrade created alembic_version in it, then failed on "table
        jobs already exists"; a reading command said to write fleetctl's state
        into it. A database with other tables only (a shared PostgreSQL one)
        passes."""
        from alembic.runtime.migration import MigrationContext

        if MigrationContext.configure(conn).get_current_revision() is not None:
            return
        taken = sorted(set(sa.inspect(conn).get_table_names()) & set(tables.metadata.tables))
        if taken:
            raise StoreError(f"cannot open state store {safe_url(self.url)}: it has tables of the names fleetctl "
                             f"uses ({', '.join(taken)}) but no fleetctl schema version: another program's database, "
                             "or a first start of fleetctl cut short. Nothing was written to it; point --state at "
                             "fleetctl's store, or at a new file")

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        """On a SQLite file, one process at a time upgrades the schema: SQLite
        runs DDL outside the transaction, so processes started together on an
        old store (cron beside a restarted daemon) each created the new table,
        and all but one failed. An advisory lock on ``<db>.migrate.lock``,
        taken only when the schema needs an upgrade (a current store may be on
        a read-only mount). PostgreSQL takes an advisory lock in the upgrade's
        transaction instead (``_migrate``)."""
        database = self._engine.url.database if self._engine.url.get_backend_name() == "sqlite" else None
        if not database or database == ":memory:" or os.name != "posix":
            yield
            return
        import fcntl

        try:
            fh = open(f"{database}.migrate.lock", "a+")
        except OSError as exc:
            raise StoreError(f"cannot open state store {safe_url(self.url)}: its schema needs an upgrade, and its "
                             f"migration lock cannot be created: {exc.strerror or exc}: {exc.filename}") from exc
        with fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def schema_revision(self) -> str | None:
        with self._engine.connect() as conn:
            return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()

    def close(self) -> None:
        self._engine.dispose()

    # ------------------------------------------------------------------ transactions

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group calls into one unit: all of them land, or none. SIGTERM and
        Ctrl-C wait for its end (``fleetctl.signals``; not in memory)."""
        if self._conn is not None:
            yield
            return
        with self._deferred(), self._engine.begin() as conn:
            self._conn = conn
            try:
                yield
            finally:
                self._conn = None

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        if self._conn is not None:
            yield self._conn
        else:
            with self._deferred(), self._engine.begin() as conn:
                yield conn

    def _decoded(self, query: tuple[Any, ...], rows: Iterable[tuple[str, str]], decode: Any, what: str) -> list[Any]:
        """The value objects of ``rows`` (id, stored JSON text), each decoded
        only if its text differs from the last answer of the same ``query``.

        Design choice: every pass reads the whole fleet and the active jobs
        several times (each step of a tick reads them fresh), and decoding the
        JSON was most of a read's time. Jobs and nodes are frozen value
        objects, so the one decoded from the same text can be handed out again;
        the text is compared, so a row written since (by this handle or another
        process) is decoded anew. Only each query's last answer is kept, so the
        memo holds no more than the query returned; handles shared by threads
        (the notice endpoint's) at worst decode a row twice."""
        last = self._memo.get(query, {})
        fresh: dict[str, tuple[str, Any]] = {}
        for key, text in rows:
            hit = last.get(key)
            fresh[key] = hit if hit is not None and hit[0] == text else (text, _row(decode, text, f"{what} {key!r}"))
        self._memo[query] = fresh
        return [value for _, value in fresh.values()]

    # ------------------------------------------------------------------ jobs

    def add_jobs(self, jobs: Iterable[Job], now: datetime) -> tuple[int, int]:
        """Store new jobs. Re-submitting an identical spec is a no-op; a
        different spec under an existing id raises ``DuplicateJob`` (naming
        every such job and what differs) and nothing is stored. An id that
        ``prune_finished`` deleted is an existing id too (its tombstone keeps
        the spec; the state in ``DuplicateJob`` then reads ``<state>, pruned``).
        Returns (added, unchanged)."""
        added = unchanged = 0
        conflicts: list[tuple[str, str, tuple[tuple[str, Any, Any], ...]]] = []
        new: list[Job] = []
        with self.transaction(), self._tx() as conn:
            for job in jobs:
                row = conn.execute(
                    sa.select(tables.jobs.c.spec, tables.jobs.c.state).where(tables.jobs.c.job_id == job.job_id)
                ).first()
                if row is not None:
                    old = _row(job_from_dict, row.spec, f"job {job.job_id!r}")
                    if _same_spec(old, job):
                        unchanged += 1
                        continue
                    conflicts.append((job.job_id, row.state, _spec_changes(old, job)))
                    continue
                new.append(job)
            # Read after the jobs: a prune committing in between has deleted a job read as absent above
            # and written its tombstone in the same transaction, so this read sees the tombstone.
            t = tables.job_tombstones
            pruned = {r.job_id: r for r in _rows_with(conn, sa.select(t), t.c.job_id, (j.job_id for j in new))}
            for job in new:
                tomb = pruned.get(job.job_id)
                if tomb is not None:
                    old = _tombstone_job(tomb)
                    if _same_spec(old, job):
                        unchanged += 1
                    else:
                        conflicts.append((job.job_id, f"{tomb.state}, pruned", _spec_changes(old, job)))
                    continue
                conn.execute(
                    tables.jobs.insert().values(
                        job_id=job.job_id,
                        state=job.state.value,
                        spec=json.dumps(job_to_dict(job), sort_keys=True),
                        submitted_at_utc=stored_time(job.submitted_at_utc),
                        updated_at_utc=stored_time(now),
                    )
                )
                added += 1
            if conflicts:  # inside the transaction: nothing of the batch lands
                raise DuplicateJob(*conflicts[0], more=tuple(conflicts[1:]))
        return added, unchanged

    def job_states(self, job_ids: Iterable[str], *, pruned: bool = False) -> dict[str, JobState]:
        """The stored state of each of ``job_ids`` that is in the store
        (``pruned``: and the final state of each that ``prune_finished``
        deleted, kept in its tombstone)."""
        ids = list(job_ids)
        t = tables.job_tombstones
        with self._tx() as conn:
            rows = _rows_with(conn, sa.select(tables.jobs.c.job_id, tables.jobs.c.state), tables.jobs.c.job_id, ids)
            if pruned:
                rows += _rows_with(conn, sa.select(t.c.job_id, t.c.state), t.c.job_id, ids)
        return {r.job_id: JobState(r.state) for r in rows}

    def pruned_jobs(self, job_ids: Iterable[str]) -> dict[str, tuple[Job, datetime]]:
        """Each of ``job_ids`` that ``prune_finished`` deleted: the job its
        tombstone keeps (``_tombstone_job``: its spec and final state; no
        nodes, no runtime counters) and when it finished (its last write)."""
        t = tables.job_tombstones
        with self._tx() as conn:
            rows = _rows_with(conn, sa.select(t), t.c.job_id, list(job_ids))
        return {r.job_id: (_tombstone_job(r), str_to_dt(r.finished_at_utc)) for r in rows}

    def jobs(self, *, active_only: bool = False, job_ids: Iterable[str] | None = None,
             on_node: str | None = None) -> tuple[Job, ...]:
        """Every job (``job_ids``: those of them in the store; ``on_node``:
        those whose ``node_ids`` hold that node), ordered by submission time
        then id."""
        query = sa.select(tables.jobs.c.job_id, tables.jobs.c.spec)
        if active_only:
            query = query.where(tables.jobs.c.state.in_([s.value for s in JobState if s.active]))
        if on_node is not None:
            # node_ids live in the spec's JSON: only specs holding the id as a JSON string are read and decoded
            # (it may be there in another field: the decoded jobs are checked), not every job of the query.
            with self._tx() as conn:
                rows = conn.execute(query.where(_holds_json_string(tables.jobs.c.spec, on_node))).all()
            found = [job for job in (_row(job_from_dict, r.spec, f"job {r.job_id!r}") for r in rows)
                     if on_node in job.node_ids]
            return tuple(sorted(found, key=lambda j: (j.submitted_at_utc, j.job_id)))
        if job_ids is not None:
            with self._tx() as conn:
                rows = _rows_with(conn, query, tables.jobs.c.job_id, job_ids)
            found = [_row(job_from_dict, r.spec, f"job {r.job_id!r}") for r in rows]
        else:
            with self._tx() as conn:
                rows = conn.execute(query).all()
            found = self._decoded(("jobs", active_only), ((r.job_id, r.spec) for r in rows), job_from_dict, "job")
        return tuple(sorted(found, key=lambda j: (j.submitted_at_utc, j.job_id)))

    def put_job(self, job: Job, now: datetime) -> None:
        """Update a stored job (state, bindings)."""
        with self._tx() as conn:
            result = conn.execute(
                tables.jobs.update()
                .where(tables.jobs.c.job_id == job.job_id)
                .values(
                    state=job.state.value,
                    spec=json.dumps(job_to_dict(job), sort_keys=True),
                    updated_at_utc=stored_time(now),
                )
            )
            if result.rowcount != 1:
                raise StoreError(f"job {job.job_id!r} is not in the store")

    def request_cancel(self, job_ids: Iterable[str], now: datetime, reason: str = "") -> dict[str, str]:
        """Record cancel requests, all or none: ``UnknownJobs`` naming unknown
        ids (nothing recorded). A queued job is cancelled at once; a bound or
        running one by the next reconcile tick (``pending_cancellations``),
        which stops it first. Returns each job's outcome: ``cancelled``,
        ``requested`` or ``already <state>`` (finished jobs are left alone;
        one that ``prune_finished`` deleted is finished too, and reads
        ``already <state> (finished <when>, pruned)`` from its tombstone)."""
        ids = list(dict.fromkeys(job_ids))
        outcome: dict[str, str] = {}
        with self.transaction(), self._tx() as conn:
            # FOR UPDATE (PostgreSQL): a tick binding one of these jobs right now commits first, and the job
            # is then read as bound (its cancel waits for the next tick) instead of overwritten as queued.
            # In chunks, sorted (``_rows_with``): two cancels lock shared jobs in one order.
            found = {r.job_id: r for r in _rows_with(
                conn, sa.select(tables.jobs.c.job_id, tables.jobs.c.spec).with_for_update(), tables.jobs.c.job_id, ids)}
            # Read after the jobs, as add_jobs does: a prune committing in between wrote the tombstone of a
            # job read as absent above.
            tomb = tables.job_tombstones
            pruned = {r.job_id: r for r in _rows_with(
                conn, sa.select(tomb.c.job_id, tomb.c.state, tomb.c.finished_at_utc), tomb.c.job_id,
                [i for i in ids if i not in found])}
            unknown = [i for i in ids if i not in found and i not in pruned]
            if unknown:
                raise UnknownJobs(unknown, f"no such job: {', '.join(unknown)}; nothing was cancelled")
            t = tables.job_cancellations
            for job_id in ids:
                gone = pruned.get(job_id)
                if gone is not None:
                    outcome[job_id] = f"already {gone.state} (finished {_shown(gone.finished_at_utc)}, pruned)"
                    continue
                job = _row(job_from_dict, found[job_id].spec, f"job {job_id!r}")
                if not job.state.active:
                    outcome[job_id] = f"already {job.state.value}"
                    continue
                if conn.execute(sa.select(t.c.job_id).where(t.c.job_id == job_id)).first() is None:
                    conn.execute(t.insert().values(job_id=job_id, requested_at_utc=stored_time(now), reason=reason,
                                                   handled_at_utc=None))
                if job.state is JobState.QUEUED and not job.node_ids:
                    self.put_job(dataclasses.replace(job, state=JobState.CANCELLED), now)
                    outcome[job_id] = "cancelled"
                else:
                    outcome[job_id] = "requested"
                self.record("cancel_requested", now, job_id, reason=reason, state=job.state.value)
        return outcome

    def pending_cancellations(self) -> tuple[str, ...]:
        """Job ids with a cancel request no tick has carried out yet, oldest first."""
        t = tables.job_cancellations
        with self._tx() as conn:
            rows = conn.execute(sa.select(t.c.job_id).where(t.c.handled_at_utc.is_(None))
                                .order_by(t.c.requested_at_utc, t.c.job_id)).all()
        return tuple(r.job_id for r in rows)

    def mark_cancel_handled(self, job_id: str, now: datetime) -> None:
        t = tables.job_cancellations
        with self._tx() as conn:
            conn.execute(t.update().where(t.c.job_id == job_id).values(handled_at_utc=stored_time(now)))

    # ------------------------------------------------------------------ nodes

    def put_node(self, node: Node, now: datetime, idempotency_key: str | None = None) -> None:
        """Insert or update a node."""
        values = dict(
            provider=node.offer.provider,
            offer_key=node.offer.key,
            state=node.state.value,
            doc=json.dumps(node_to_dict(node), sort_keys=True),
            updated_at_utc=stored_time(now),
        )
        with self._tx() as conn:
            # one statement for a node already stored (the common case: every passive transition), two otherwise;
            # an update keeps the node's idempotency key (that of the launch that bought it)
            updated = conn.execute(tables.nodes.update().where(tables.nodes.c.node_id == node.node_id)
                                   .values(**values)).rowcount
            if not updated:
                conn.execute(
                    tables.nodes.insert().values(node_id=node.node_id, idempotency_key=idempotency_key, **values)
                )

    def nodes(self, *, provider: str | None = None, include_gone: bool = False,
              node_ids: Iterable[str] | None = None) -> tuple[Node, ...]:
        """The nodes (``node_ids``: those of them in the store), ordered by id."""
        return self._nodes(provider=provider, include_gone=include_gone, node_ids=node_ids)

    def nodes_gone_since(self, since: datetime) -> tuple[Node, ...]:
        """The GONE nodes recorded gone at ``since`` or later (their last
        write), ordered by id: read through the index on (state, updated_at),
        not through every gone node the store keeps."""
        t = tables.nodes
        return self._nodes(include_gone=True, where=(t.c.state == NodeState.GONE.value)
                           & (t.c.updated_at_utc >= stored_time(since)), memo="gone_since")

    def _nodes(self, *, provider: str | None = None, include_gone: bool = False,
               node_ids: Iterable[str] | None = None, where: Any = None, memo: str = "") -> tuple[Node, ...]:
        query = sa.select(tables.nodes.c.node_id, tables.nodes.c.doc)
        if where is not None:
            query = query.where(where)
        if provider is not None:
            query = query.where(tables.nodes.c.provider == provider)
        if not include_gone:
            # IN the live states, not != gone: the index on state then reads the live nodes only, however
            # many gone ones the store keeps (!= reads every row)
            query = query.where(tables.nodes.c.state.in_([s.value for s in NodeState if s is not NodeState.GONE]))
        if node_ids is not None:
            with self._tx() as conn:
                rows = _rows_with(conn, query, tables.nodes.c.node_id, node_ids)
            return tuple(sorted((_row(node_from_dict, r.doc, f"node {r.node_id!r}") for r in rows),
                                key=lambda n: n.node_id))
        with self._tx() as conn:
            rows = conn.execute(query).all()
        found = self._decoded(("nodes", provider, include_gone, memo), ((r.node_id, r.doc) for r in rows),
                              node_from_dict, "node")
        return tuple(sorted(found, key=lambda n: n.node_id))

    def nodes_live_since(self, since: datetime) -> tuple[tuple[Node, datetime | None], ...]:
        """Every node not gone, and every GONE node recorded gone at ``since``
        or later, each with when it was recorded gone (its row's last write;
        None for a node not gone), ordered by id: the nodes that may have been
        live at some time from ``since`` on (``fleetctl report``). Read through
        the indexes on state and (state, updated_at), not through every gone
        node kept: a node that ended before ``since`` was recorded gone before
        it (its row is written when it goes, and only then or later)."""
        t = tables.nodes
        live = [s.value for s in NodeState if s is not NodeState.GONE]
        # a second early: timestamps are compared as text, and ISO 8601 with and without microseconds
        # ("...:00.5Z" < "...:00Z") sorts a fraction of a second wrong; the gone time is exact below
        cut = stored_time(since - timedelta(seconds=1))
        with self._tx() as conn:
            rows = conn.execute(sa.select(t.c.node_id, t.c.doc, t.c.state, t.c.updated_at_utc).where(
                t.c.state.in_(live) | ((t.c.state == NodeState.GONE.value) & (t.c.updated_at_utc >= cut)))).all()
        out = []
        for r in sorted(rows, key=lambda r: r.node_id):
            gone_at = str_to_dt(r.updated_at_utc) if r.state == NodeState.GONE.value else None
            if gone_at is not None and gone_at < since:
                continue
            out.append((_row(node_from_dict, r.doc, f"node {r.node_id!r}"), gone_at))
        return tuple(out)

    def nodes_by_idempotency_key(self, key: str) -> tuple[Node, ...]:
        with self._tx() as conn:
            rows = conn.execute(sa.select(tables.nodes.c.node_id, tables.nodes.c.doc)
                                .where(tables.nodes.c.idempotency_key == key)).all()
        return tuple(sorted((_row(node_from_dict, r.doc, f"node {r.node_id!r}") for r in rows),
                            key=lambda n: n.node_id))

    # ------------------------------------------------------------------ launches (intent)

    def begin_launch(self, key: str, offer_key: str, count: int, now: datetime) -> bool:
        """Record the intent to launch. Returns False if this key was seen before.

        Raises ``ConcurrentApply`` when another process inserts the same key
        between the check and the insert (two controllers applying the same
        plan at once): the caller's transaction is then rolled back, and the
        other process carries the plan out."""
        with self._tx() as conn:
            if conn.execute(
                sa.select(tables.launches.c.idempotency_key).where(tables.launches.c.idempotency_key == key)
            ).first():
                return False
            try:
                conn.execute(
                    tables.launches.insert().values(
                        idempotency_key=key,
                        offer_key=offer_key,
                        count=count,
                        status="pending",
                        node_ids="[]",
                        created_at_utc=stored_time(now),
                    )
                )
            except sa.exc.IntegrityError as exc:
                raise ConcurrentApply(
                    f"launch {key} was recorded by another fleetctl process at the same moment (a concurrent "
                    "reconcile, apply or daemon on this state store); this process applied nothing of its plan"
                ) from exc
            return True

    #: Launch intents whose outcome the store does not know: the cloud was (or was about to be) asked
    #: and no answer was recorded (``pending``: the process died; ``unknown``: the call got none).
    OPEN_LAUNCH_STATUSES = ("pending", "unknown")

    def open_launches(self) -> tuple[tuple[str, str, int, str], ...]:
        """The launch intents in ``OPEN_LAUNCH_STATUSES``, oldest first:
        (idempotency key, offer key, count, status), read through the index on
        status (not through every launch the store keeps)."""
        t = tables.launches
        with self._tx() as conn:
            rows = conn.execute(sa.select(t.c.idempotency_key, t.c.offer_key, t.c.count, t.c.status)
                                .where(t.c.status.in_(self.OPEN_LAUNCH_STATUSES))
                                .order_by(t.c.created_at_utc, t.c.idempotency_key)).all()
        return tuple((r.idempotency_key, r.offer_key, r.count, r.status) for r in rows)

    def finish_launch(self, key: str, node_ids: Iterable[str], status: str) -> None:
        with self._tx() as conn:
            conn.execute(
                tables.launches.update()
                .where(tables.launches.c.idempotency_key == key)
                .values(status=status, node_ids=json.dumps(sorted(node_ids)))
            )

    # ------------------------------------------------------------------ retention

    #: Audit-log kinds written on every pass whatever happens (the forecasters' history and the
    #: pass markers); the others record decisions and are kept.
    PER_PASS_EVENTS = ("demand", "offers_observed", "plan_applied")
    #: Audit-log kinds that begin and end a job's run on its nodes (``start``, then one of the
    #: report's ``STOP_KINDS``): `fleetctl report` charges a team for its jobs' runs.
    RUN_EVENTS = ("start", *STOP_KINDS)

    def prune(self, before: datetime, notices_before: datetime | None = None) -> dict[str, int]:
        """Delete what every pass adds, older than ``before``: the per-pass
        audit rows (``PER_PASS_EVENTS``), the spot market's change log except
        each offer's last row before ``before`` (the market's state then, which
        a forecaster reading a window from there needs), and handled notices.
        Decisions (launch, bind, terminate, ...), jobs and nodes are kept.
        ``notices_before`` (earlier than ``before``) keeps the notices the
        planner still reads (the policy's ``reclaimed_offer_ttl_minutes``).
        Returns the rows deleted per table."""
        cut = stored_time(before)
        notice_cut = stored_time(min(before, notices_before) if notices_before is not None else before)
        events, obs, notices = tables.events, tables.offer_observations, tables.interruptions
        with self.transaction(), self._tx() as conn:
            deleted_events = conn.execute(events.delete().where(events.c.at_utc < cut)
                                          .where(events.c.kind.in_(self.PER_PASS_EVENTS))).rowcount
            anchors = sa.select(sa.func.max(obs.c.seq)).where(obs.c.observed_at_utc < cut).group_by(obs.c.offer_key)
            anchor_seqs = [r[0] for r in conn.execute(anchors).all()]
            deleted_obs = conn.execute(obs.delete().where(obs.c.observed_at_utc < cut)
                                       .where(obs.c.seq.not_in(anchor_seqs))).rowcount
            deleted_notices = conn.execute(notices.delete().where(notices.c.handled_at_utc.is_not(None))
                                           .where(notices.c.received_at_utc < notice_cut)).rowcount
        return {"events": deleted_events, "offer_observations": deleted_obs, "interruptions": deleted_notices}

    #: Launch statuses that hold the cloud's answer, or the end of waiting for one (``abandoned``:
    #: settled with no node under its key, ``fleetctl.controller.settle_launches``). The
    #: ``OPEN_LAUNCH_STATUSES`` are a retry's (or the next pass's settling) to finish.
    FINISHED_LAUNCHES = ("done", "partial", "failed", "abandoned")

    def prune_finished(self, before: datetime) -> dict[str, int]:
        """Delete the finished history older than ``before`` (opt-in retention,
        ``fleetctl prune --finished-older-than-days``): jobs in a final state
        last written before it (and their handled cancel requests), nodes GONE
        since before it, their finished launches, and the decision events
        (every kind but ``PER_PASS_EVENTS``) before it. Returns the rows
        deleted per table. Kept whatever their age:

        * a final job with a cancel request no tick has handled yet (the next
          tick reads it);
        * a gone node that a kept reclaim notice or an active job names: the
          forecasters read a reclaimed node's offer through its row for as
          long as the notice is kept (``prune`` governs notices with the
          market history they label), and a lost node's through its row;
        * a launch key with the nodes bought under it, and the retries of one
          plan's launch (``retry_key``) together: all of them go, or none. A
          launch is deleted only when it is finished
          (``FINISHED_LAUNCHES``), older than ``before``, and every node
          bought under the launches of its chain is deleted too. A key seen
          before whose nodes are all gone starts a new purchase under the next
          ``-rN`` key; with some of them deleted, a retry of an apply that
          crashed would read an earlier key as free (or its nodes as never
          bought) and buy again;
        * the latest event of each kind (a pass reads when the last
          termination was);
        * the ``start`` entry of each job run open at the cut (the job's last
          ``RUN_EVENTS`` entry before it is a start): `fleetctl report` over a
          window from the cut on charges the run to its job's team from it
          (without it, the run's GPU-hours counted as idle);
        * each deleted job's id, final state and submitted spec, as a
          tombstone (``_bury``), so that ``add_jobs`` never reuses the id.

        Atomic (one transaction, which ``transaction()`` may widen: run after
        ``prune`` in it, the notices that one deletes no longer keep nodes)."""
        cut = stored_time(before)
        jobs, nodes, launches = tables.jobs, tables.nodes, tables.launches
        events, cancels, notices = tables.events, tables.job_cancellations, tables.interruptions
        final = [s.value for s in JobState if not s.active]
        with self.transaction(), self._tx() as conn:
            doomed_jobs = [r.job_id for r in conn.execute(
                sa.select(jobs.c.job_id).where(jobs.c.state.in_(final)).where(jobs.c.updated_at_utc < cut)
                .where(jobs.c.job_id.not_in(sa.select(cancels.c.job_id).where(cancels.c.handled_at_utc.is_(None)))))]
            self._bury(conn, doomed_jobs)
            deleted_cancels = _delete_with(conn, cancels, cancels.c.job_id, doomed_jobs)
            deleted_jobs = _delete_with(conn, jobs, jobs.c.job_id, doomed_jobs)
            named = {n for j in self.jobs(active_only=True) for n in j.node_ids}
            gone = {r.node_id: r.idempotency_key for r in conn.execute(
                sa.select(nodes.c.node_id, nodes.c.idempotency_key).where(nodes.c.state == NodeState.GONE.value)
                .where(nodes.c.updated_at_utc < cut).where(nodes.c.node_id.not_in(sa.select(notices.c.node_id))))
                if r.node_id not in named}
            chains: dict[str, list[str]] = {}  # the key retries are made of -> every launch key of it
            kept: set[str] = set()  # chains with a launch that stays (so all of theirs stay)
            for r in conn.execute(sa.select(launches.c.idempotency_key, launches.c.status, launches.c.created_at_utc)):
                chain = _launch_chain(r.idempotency_key)
                chains.setdefault(chain, []).append(r.idempotency_key)
                if r.status not in self.FINISHED_LAUNCHES or r.created_at_utc >= cut:
                    kept.add(chain)
            bought = _rows_with(conn, sa.select(nodes.c.node_id, nodes.c.idempotency_key), nodes.c.idempotency_key,
                                (k for c, keys in chains.items() if c not in kept for k in keys))
            kept.update(_launch_chain(r.idempotency_key) for r in bought if r.node_id not in gone)
            doomed = [n for n, key in gone.items() if key is None or _launch_chain(key) not in kept]
            deleted_nodes = _delete_with(conn, nodes, nodes.c.node_id, doomed)
            deleted_launches = _delete_with(conn, launches, launches.c.idempotency_key,
                                            (k for c, keys in chains.items() if c not in kept for k in keys))
            latest = sa.select(sa.func.max(events.c.seq)).group_by(events.c.kind)
            last_run_entry = (sa.select(sa.func.max(events.c.seq)).where(events.c.at_utc < cut)
                              .where(events.c.kind.in_(self.RUN_EVENTS)).group_by(events.c.subject))
            open_runs = sa.select(events.c.seq).where(events.c.seq.in_(last_run_entry)).where(events.c.kind == "start")
            deleted_events = conn.execute(events.delete().where(events.c.at_utc < cut)
                                          .where(events.c.kind.not_in(self.PER_PASS_EVENTS))
                                          .where(events.c.seq.not_in(latest))
                                          .where(events.c.seq.not_in(open_runs))).rowcount
            # where the finished history now starts: `fleetctl report` says a window before it is not covered
            # (and that it kept the starts of the runs open at the cut: the report sees every run after it)
            self._insert_event(conn, "prune_finished", before, "", {"before_utc": dt_to_str(before),
                                                                    "open_runs_kept": True})
        return {"jobs": deleted_jobs, "job_cancellations": deleted_cancels, "nodes": deleted_nodes,
                "launches": deleted_launches, "events": deleted_events}

    @staticmethod
    def _bury(conn: Connection, job_ids: Iterable[str]) -> None:
        """Write a tombstone (``tables.job_tombstones``) for each of the stored
        jobs ``job_ids``, about to be deleted; read and written ``_IN_CHUNK``
        jobs at a time (the first prune of a long history deletes 100,000s).

        Design choice: the submitted spec (``job_spec_dict``: the fields not at
        their defaults, about 0.15 KB, a seventh of a finished job's row), not
        a digest of it: a refused re-submission names the fields that changed,
        with their values, as it does while the job is stored. One digest
        cannot name them, and one per field takes more room than the values;
        a single SHA-256 would save under 100 bytes a job (docs/retention.md)."""
        jobs = tables.jobs
        for chunk in _chunks(job_ids):
            rows = conn.execute(sa.select(jobs.c.job_id, jobs.c.state, jobs.c.spec, jobs.c.updated_at_utc)
                                .where(jobs.c.job_id.in_(chunk))).all()
            if not rows:  # deleted meanwhile by another transaction: nothing to keep, nothing to delete
                continue
            conn.execute(tables.job_tombstones.insert(), [dict(
                job_id=r.job_id, state=r.state, finished_at_utc=r.updated_at_utc,
                spec=json.dumps(_row(job_spec_dict, r.spec, f"job {r.job_id!r}"), sort_keys=True,
                                separators=(",", ":"))) for r in rows])

    # ------------------------------------------------------------------ leases

    def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> tuple[str, float] | None:
        """Take the lease ``name`` for ``ttl_seconds`` of wall-clock time, or
        renew it when ``holder`` has it already. Returns None when taken, else
        (who holds it, seconds left). Atomic on SQLite and PostgreSQL: the row
        is created expired if missing, then taken by one conditional update."""
        t = tables.leases
        if self._engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        with self._tx() as conn:
            now = self._lease_clock(conn)
            conn.execute(insert(t).values(name=name, holder="", acquired_at_unix=0.0, expires_at_unix=0.0)
                         .on_conflict_do_nothing(index_elements=["name"]))
            taken = conn.execute(
                t.update().where(t.c.name == name).where(sa.or_(t.c.holder == holder, t.c.expires_at_unix <= now))
                .values(holder=holder, acquired_at_unix=now, expires_at_unix=now + ttl_seconds)
            ).rowcount
            if taken:
                return None
            row = conn.execute(sa.select(t.c.holder, t.c.expires_at_unix).where(t.c.name == name)).one()
        return row.holder, max(0.0, row.expires_at_unix - now)

    def take_over_lease(self, name: str, old_holder: str, holder: str, ttl_seconds: float) -> bool:
        """Take the lease from ``old_holder`` (a process known to be gone), if it still holds it."""
        t = tables.leases
        with self._tx() as conn:
            now = self._lease_clock(conn)
            return bool(conn.execute(
                t.update().where(t.c.name == name).where(t.c.holder == old_holder)
                .values(holder=holder, acquired_at_unix=now, expires_at_unix=now + ttl_seconds)).rowcount)

    def _lease_clock(self, conn: Connection) -> float:
        """Now, in Unix seconds, by the clock every holder of a lease reads: PostgreSQL's own (daemons
        on several hosts share it; by their own clocks, one whose clock ran ahead of the holder's by
        more than the lease's time took it from a live holder, and both acted), this host's for
        SQLite (a file store has one host)."""
        if conn.dialect.name == "postgresql":
            return float(conn.execute(sa.text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one())
        return time.time()

    def clock_offset_seconds(self) -> float | None:
        """This host's clock minus PostgreSQL's, in seconds (read at the middle of the query's round
        trip); None for SQLite, which has no clock of its own. Daemons on several hosts record times
        by their own clocks: an offset of more than a few seconds means NTP is not keeping them in step."""
        if self._engine.dialect.name != "postgresql":
            return None
        with self._engine.connect() as conn:
            before = time.time()
            server = float(conn.execute(sa.text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one())
            after = time.time()
        return (before + after) / 2 - server

    def release_lease(self, name: str, holder: str) -> None:
        """Give the lease up (only ``holder``'s: one that expired and was taken stays taken)."""
        t = tables.leases
        with self._tx() as conn:
            conn.execute(t.update().where(t.c.name == name).where(t.c.holder == holder)
                         .values(holder="", expires_at_unix=0.0))

    # ------------------------------------------------------------------ interruptions

    def add_interruption(self, event: InterruptionEvent, *, audit: str | None = None, **payload: Any) -> bool:
        """Record a notice; False if it was already recorded (notices may be delivered twice).

        With ``audit``, a new notice's audit entry of that kind (subject its
        node, at its ``received_at_utc``, ``payload``) is written in the same
        transaction: both land or neither does, so a caller whose audit write
        failed is not told "already recorded" when it retries. Done here, not
        with ``transaction()``, because that keeps its connection on the handle
        and the notice endpoint's threads share one."""
        with self._tx() as conn:
            t = tables.interruptions
            if conn.execute(sa.select(t.c.event_id).where(t.c.event_id == event.event_id)).first():
                return False
            conn.execute(t.insert().values(
                event_id=event.event_id, provider=event.provider, node_id=event.node_id, kind=event.kind.value,
                received_at_utc=stored_time(event.received_at_utc), deadline_utc=stored_time(event.deadline_utc),
                handled_at_utc=None,
            ))
            if audit is not None:
                self._insert_event(conn, audit, event.received_at_utc, event.node_id, payload)
            return True

    def interruptions(self, *, unhandled_only: bool = True, node_id: str | None = None,
                      node_ids: Iterable[str] | None = None,
                      received_since: datetime | None = None) -> tuple[InterruptionEvent, ...]:
        """Recorded notices, oldest first (``node_id``: one node's only;
        ``node_ids``: those nodes' only; ``received_since``: those received
        then or later)."""
        t = tables.interruptions
        query = sa.select(t)
        if unhandled_only:
            query = query.where(t.c.handled_at_utc.is_(None))
        if node_id is not None:
            query = query.where(t.c.node_id == node_id)
        if received_since is not None:
            query = query.where(t.c.received_at_utc >= stored_time(received_since))
        with self._tx() as conn:
            if node_ids is not None:
                rows = _rows_with(conn, query, t.c.node_id, node_ids)
            else:
                rows = conn.execute(query).all()
        events = [
            InterruptionEvent(
                event_id=r.event_id, provider=r.provider, node_id=r.node_id, kind=InterruptionKind(r.kind),
                received_at_utc=str_to_dt(r.received_at_utc),  # type: ignore[arg-type]
                deadline_utc=str_to_dt(r.deadline_utc),
            )
            for r in rows
        ]
        return tuple(sorted(events, key=lambda e: (e.received_at_utc, e.event_id)))

    def interruption_handled_at(self, event_id: str) -> tuple[bool, datetime | None]:
        """(recorded?, when it was handled or None while it is not)."""
        t = tables.interruptions
        with self._tx() as conn:
            row = conn.execute(sa.select(t.c.handled_at_utc).where(t.c.event_id == event_id)).first()
        if row is None:
            return False, None
        return True, str_to_dt(row.handled_at_utc)

    def claim_interruption(self, event_id: str, now: datetime) -> bool:
        """Mark a recorded notice handled if nobody has yet; True if this call
        did (an atomic compare-and-set: of two controllers handling the same
        notice at once, one gets True, the other waits for its row lock, then
        False). Call it first in the transaction that handles the notice."""
        t = tables.interruptions
        with self._tx() as conn:
            result = conn.execute(t.update().where((t.c.event_id == event_id) & t.c.handled_at_utc.is_(None))
                                  .values(handled_at_utc=stored_time(now)))
            return result.rowcount == 1

    def mark_interruption_handled(self, event_id: str, now: datetime) -> None:
        t = tables.interruptions
        with self._tx() as conn:
            conn.execute(t.update().where(t.c.event_id == event_id).values(handled_at_utc=stored_time(now)))

    # ------------------------------------------------------------------ offer observations

    def record_offers(self, offers: Iterable[Offer], now: datetime) -> int:
        """Record what changed in the spot market since the last observation:
        spot offers newly listed or repriced (available) and offers seen before
        but not listed now (unavailable). A change log, so a static market
        costs nothing; ``offers_observed`` in the audit log marks each
        observation. The interruption forecaster's history (forecasting/).
        Returns the rows written."""
        offers = list(offers)
        on_demand = {(o.provider, o.instance_type.name, o.region): o.usd_per_hour
                     for o in offers if o.market is Market.ON_DEMAND}
        listed = {o.key: o for o in offers if o.market is Market.SPOT}
        t = tables.offer_observations
        stamp = stored_time(now)
        latest = tables.offer_latest
        with self._tx() as conn:
            last = {r.offer_key: (bool(r.available), r.usd_per_hour) for r in conn.execute(sa.select(latest)).all()}
            rows = []
            for key, o in sorted(listed.items()):
                if last.get(key) != (True, o.usd_per_hour):
                    rows.append(dict(observed_at_utc=stamp, offer_key=key, available=1, usd_per_hour=o.usd_per_hour,
                                     on_demand_usd_per_hour=on_demand.get((o.provider, o.instance_type.name, o.region))))
            for key in sorted(k for k, (available, _) in last.items() if available and k not in listed):
                rows.append(dict(observed_at_utc=stamp, offer_key=key, available=0, usd_per_hour=None,
                                 on_demand_usd_per_hour=None))
            if rows:
                conn.execute(t.insert(), rows)
                changed = {r["offer_key"] for r in rows}
                conn.execute(latest.delete().where(latest.c.offer_key.in_(sorted(changed))))
                conn.execute(latest.insert(), [dict(offer_key=r["offer_key"], available=r["available"],
                                                    usd_per_hour=r["usd_per_hour"]) for r in rows])
            conn.execute(tables.events.insert().values(at_utc=stamp, kind="offers_observed", subject="",
                                                       payload=json.dumps({"changes": len(rows)})))
        return len(rows)

    def offer_observations(self, since: datetime | None = None, *, until: datetime | None = None,
                           with_state_at_since: bool = False) -> tuple[dict[str, Any], ...]:
        """Recorded observations, oldest first: ``observed_at_utc`` (datetime),
        ``offer_key``, ``available`` (bool), ``usd_per_hour``, ``on_demand_usd_per_hour``.

        ``since``/``until`` bound ``observed_at_utc`` (both inclusive). With
        ``with_state_at_since``, each offer's last observation before ``since``
        comes first too: the state of the market at ``since``, so a window of
        the change log can be read without reading all of it."""
        t = tables.offer_observations
        query = sa.select(t).order_by(t.c.observed_at_utc, t.c.offer_key)
        if since is not None:
            query = query.where(t.c.observed_at_utc >= stored_time(since))
        if until is not None:
            query = query.where(t.c.observed_at_utc <= stored_time(until))
        with self._tx() as conn:
            rows = conn.execute(query).all()
            if since is not None and with_state_at_since:
                last = (sa.select(sa.func.max(t.c.seq)).where(t.c.observed_at_utc < stored_time(since))
                        .group_by(t.c.offer_key))
                before = conn.execute(sa.select(t).where(t.c.seq.in_(last))
                                      .order_by(t.c.observed_at_utc, t.c.offer_key)).all()
                rows = [*before, *rows]
        return tuple({"observed_at_utc": str_to_dt(r.observed_at_utc), "offer_key": r.offer_key,
                      "available": bool(r.available), "usd_per_hour": r.usd_per_hour,
                      "on_demand_usd_per_hour": r.on_demand_usd_per_hour} for r in rows)

    def first_offer_observation_utc(self) -> datetime | None:
        """When the change log starts (``None`` when nothing was recorded)."""
        t = tables.offer_observations
        with self._tx() as conn:
            first = conn.execute(sa.select(sa.func.min(t.c.observed_at_utc))).scalar()
        return str_to_dt(first) if first else None

    # ------------------------------------------------------------------ events

    def last_event_at(self, kind: str) -> datetime | None:
        """When the latest event of ``kind`` was recorded (None: never)."""
        return self._event_at(kind, tables.events.c.seq.desc())

    def first_event_at(self, kind: str) -> datetime | None:
        """When the first event of ``kind`` was recorded (None: never)."""
        return self._event_at(kind, tables.events.c.seq.asc())

    def _event_at(self, kind: str, order: Any) -> datetime | None:
        query = sa.select(tables.events.c.at_utc).where(tables.events.c.kind == kind).order_by(order).limit(1)
        with self._tx() as conn:
            at = conn.execute(query).scalar()
        return str_to_dt(at) if at is not None else None

    def record(self, kind: str, now: datetime, subject: str = "", **payload: Any) -> None:
        """Append to the audit log: what happened, to what, when."""
        with self._tx() as conn:
            self._insert_event(conn, kind, now, subject, payload)

    @staticmethod
    def _insert_event(conn: Connection, kind: str, now: datetime, subject: str, payload: dict[str, Any]) -> None:
        conn.execute(
            tables.events.insert().values(
                at_utc=stored_time(now),
                kind=kind,
                subject=subject,
                payload=json.dumps(payload, sort_keys=True, default=str),
            )
        )

    def audit_log(self, *, kinds: Iterable[str] = (), since: datetime | None = None, until: datetime | None = None,
                  about: str | None = None, limit: int = 500) -> tuple[tuple[dict[str, Any], ...], bool]:
        """The newest ``limit`` audit entries at or after ``since`` and before
        ``until`` (of ``kinds``, when given), oldest first, and whether older
        ones matched too. ``about``: the entries about one job or node, its
        subject or named in its payload as a JSON string (a launch's nodes,
        a preemption's ``by``); the payload test is a LIKE on the stored JSON,
        checked again once decoded. The time bounds use the ``at_utc`` index."""
        e = tables.events
        query = sa.select(e)
        kinds = list(kinds)
        if kinds:
            query = query.where(e.c.kind.in_(kinds))
        query = _about_a_second_wider(query, e.c.at_utc, since, until)
        if about is not None:
            query = query.where(sa.or_(e.c.subject == about, _holds_json_string(e.c.payload, about)))
        found: list[dict[str, Any]] = []
        more = False
        page = query.order_by(e.c.seq.desc()).limit(limit + 1)
        with self._tx() as conn:
            while True:  # pages of the newest first; a LIKE match that decodes as not naming it is read past
                rows = conn.execute(page).all()
                if rows:
                    page = query.where(e.c.seq < rows[-1].seq).order_by(e.c.seq.desc()).limit(limit + 1)
                for r in rows:
                    entry = {"seq": r.seq, "at_utc": _shown(r.at_utc), "kind": r.kind, "subject": r.subject,
                             "payload": _decode(r.payload, f"event {r.seq}")}
                    if (about is None or r.subject == about or _names(entry["payload"], about)) \
                            and _within(r.at_utc, since, until):
                        if len(found) == limit:
                            more = True
                            break
                        found.append(entry)
                if more or len(rows) <= limit:
                    break
        return tuple(reversed(found)), more

    def events(self, kind: str | None = None, since: datetime | None = None) -> tuple[dict[str, Any], ...]:
        query = sa.select(tables.events).order_by(tables.events.c.seq)
        if kind is not None:
            query = query.where(tables.events.c.kind == kind)
        query = _about_a_second_wider(query, tables.events.c.at_utc, since, None)
        with self._tx() as conn:
            rows = conn.execute(query).all()
        return tuple(
            {"seq": r.seq, "at_utc": _shown(r.at_utc), "kind": r.kind, "subject": r.subject,
             "payload": _decode(r.payload, f"event {r.seq}")}
            for r in rows if _within(r.at_utc, since, None)
        )

    def events_between(self, start: datetime, end: datetime, kinds: Iterable[str]) -> tuple[dict[str, Any], ...]:
        """The audit log's entries of ``kinds`` at ``start`` or later and
        before ``end``, in time order (then ``seq``), as ``events`` gives them
        (``at_utc`` parsed to a datetime). Read through the index on
        ``at_utc``: a window's rows, not the whole log."""
        t = tables.events
        query = _about_a_second_wider(sa.select(t).where(t.c.kind.in_(sorted(set(kinds)))), t.c.at_utc, start, end)
        with self._tx() as conn:
            rows = conn.execute(query).all()
        found = [{"seq": r.seq, "at_utc": str_to_dt(r.at_utc), "kind": r.kind, "subject": r.subject,
                  "payload": _decode(r.payload, f"event {r.seq}")}
                 for r in rows if _within(r.at_utc, start, end)]
        return tuple(sorted(found, key=lambda e: (e["at_utc"], e["seq"])))

    def open_runs_kept(self) -> bool:
        """Whether the store was pruned (``prune_finished``) and every prune
        kept the start of each job run open at its cut (its entry says
        ``open_runs_kept``; an older fleetctl's deleted them), so that a
        window from the last cut on sees every run (`fleetctl report`). As far
        as the entries tell: a prune by a fleetctl that recorded no entry (only
        tombstones) before one of this fleetctl is not seen."""
        t = tables.events
        with self._tx() as conn:
            entries = conn.execute(sa.select(t.c.payload).where(t.c.kind == "prune_finished")).scalars().all()
        return bool(entries) and all(_decode(text, "a prune_finished event").get("open_runs_kept") is True
                                     for text in entries)

    def history_complete_from(self) -> datetime | None:
        """From when the audit log, the jobs and the nodes are complete: the
        first event kept (a ``prune_finished`` entry aside), or, when ``prune_finished`` deleted the
        finished history, its latest cut (its ``prune_finished`` entry; for a prune by
        a fleetctl that did not record one, the last finish its job
        tombstones keep, a lower bound of that cut). None for an empty log.

        Design choice: not the oldest event alone: ``prune_finished`` keeps
        the latest event of each kind, however old, so a rare kind's old
        entry would date the log's start long before the cut."""
        t = tables.events
        with self._tx() as conn:
            # not the prune_finished entries, dated at their cuts: a cut older than the store is not its start
            first = conn.execute(sa.select(sa.func.min(t.c.at_utc)).where(t.c.kind != "prune_finished")).scalar()
            cuts = conn.execute(sa.select(t.c.payload).where(t.c.kind == "prune_finished")).scalars().all()
            buried = conn.execute(sa.select(sa.func.max(tables.job_tombstones.c.finished_at_utc))).scalar()
        found = [str_to_dt(first)] if first else []
        for text in cuts:
            cut = _decode(text, "a prune_finished event").get("before_utc")
            if isinstance(cut, str):
                found.append(str_to_dt(cut))
        if buried:
            found.append(str_to_dt(buried))
        return max(found) if found else None  # type: ignore[type-var]


def _holds_json_string(column: Any, value: str) -> Any:
    """A filter: the JSON text in ``column`` holds ``value`` as a JSON string
    (a LIKE, so also where it is a key, or inside a longer string escaped
    alike: decode and check the rows it keeps)."""
    quoted = json.dumps(value)
    pattern = "%" + quoted.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    return column.like(pattern, escape="\\")


def _names(value: Any, wanted: str) -> bool:
    """Whether a decoded JSON value holds ``wanted`` as a string, at any depth."""
    if isinstance(value, str):
        return value == wanted
    if isinstance(value, dict):
        return any(_names(v, wanted) for v in value.values())
    if isinstance(value, list):
        return any(_names(v, wanted) for v in value)
    return False


def _tombstone_job(row: Any) -> Job:
    """The job a tombstone row (``Store._bury``) keeps: its spec and final state (the runtime fields a
    spec comparison ignores are their defaults; ``submitted_at_utc`` reads as when it finished)."""
    return _row(lambda spec: job_from_dict({**spec, "id": row.job_id, "submitted_at_utc": row.finished_at_utc,
                                            "state": row.state}),
                row.spec, f"the tombstone of pruned job {row.job_id!r}")


def _same_spec(a: Job, b: Job) -> bool:
    """Same job spec, ignoring what the controller wrote as the job ran
    (state, bindings, progress, reclaims: ``JOB_RUNTIME_FIELDS``)."""
    return not _spec_changes(a, b)


def _spec_changes(old: Job, new: Job) -> tuple[tuple[str, Any, Any], ...]:
    """``(field, old value, new value)`` for each spec field that differs, in
    ``Job`` field order (runtime fields, as in ``_same_spec``, do not count)."""
    return tuple((f.name, getattr(old, f.name), getattr(new, f.name)) for f in dataclasses.fields(Job)
                 if f.name not in JOB_RUNTIME_FIELDS and getattr(old, f.name) != getattr(new, f.name))
