"""One controller acts on a store at a time.

``reconcile --once`` (cron), ``apply`` and each pass of ``fleetctl daemon``
take the store's ``controller`` lease around what they do, so two of them
never observe, plan and act on the same fleet at once (which would buy it
twice and start jobs twice). The lease is held for one pass and released
after it, so several daemons on one store take turns pass by pass, never at
once; a pass that finds it held is skipped.

Design choice: a lease row with an expiry in wall-clock time rather than a
database lock held for the pass: it works the same on SQLite and PostgreSQL,
does not keep a transaction open across cloud calls, and a process killed
with SIGKILL holds it only until it expires: 2 minutes, as a heartbeat thread
renews it every 30 s while a pass runs (at once when its holder ran in this
PID namespace of this host and its process is gone: ``_dead_here``). ``reconcile --once`` and
``apply`` release it on SIGTERM (a cron deadline, ``timeout``,
``systemctl stop``), also when the signal lands while the lease is being
taken (``fleetctl.signals``).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

import sqlalchemy as sa

from fleetctl import signals
from fleetctl.store import LeaseHeld, Store, StoreError

log = logging.getLogger("fleetctl.lease")

NAME = "controller"
TTL_SECONDS = 600.0  # without a heartbeat (an in-memory store): longer than any pass
HEARTBEAT_TTL_SECONDS = 120.0  # renewed every 30 s while held: a holder that died blocks others at most 2 minutes


_NAMESPACE = re.compile(r"pid:\[\d+\]")
_BOOT = re.compile(r"[0-9a-f-]{1,64}")
_HOLDER = re.compile(r"(?P<host>\S+) pid (?P<pid>\d+) in (?P<namespace>pid:\[\d+\]) start (?P<start>\d+) "
                     r"boot (?P<boot>[0-9a-f-]+) \([0-9a-f]+\)")


def _identity() -> tuple[str, str, int] | None:
    """This process's PID namespace (``pid:[4026531836]``), the boot it runs in
    (``/proc/sys/kernel/random/boot_id``) and its start time (clock ticks
    after boot, ``/proc/self/stat``): with the PID, what names a process
    beyond doubt on Linux. None where /proc does not show them, or shows
    another PID namespace's processes (``unshare --pid`` without
    ``--mount-proc``): no holder is judged dead from such a process."""
    try:
        if os.readlink("/proc/self") != str(os.getpid()):
            return None  # /proc is another PID namespace's: its pids are not ours
        namespace = os.readlink("/proc/self/ns/pid")
    except (OSError, ValueError):
        return None
    boot = _boot_id()
    start = _start_ticks(os.getpid())
    if start is None or boot is None or not _NAMESPACE.fullmatch(namespace) or not _BOOT.fullmatch(boot):
        return None
    return namespace, boot, start


def _boot_id() -> str | None:
    """This machine's current boot (``/proc/sys/kernel/random/boot_id``), or None."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except (OSError, ValueError):
        return None


def _start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (field 22 of /proc/PID/stat), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            stat = fh.read()
        return int(stat[stat.rindex(")") + 2:].split()[19])  # after "(comm) ": comm may hold spaces
    except (OSError, ValueError, IndexError):
        return None


def holder_id() -> str:
    """This process, as other processes see it in an error (and as
    ``_dead_here`` reads it): host, PID, PID namespace, start time, boot, and a
    random tag. Not ``HOST pid N (tag)``, the form before namespaces were
    written, which a fleetctl of that time would judge by its own PIDs."""
    host, tag, me = socket.gethostname(), uuid.uuid4().hex[:8], _identity()
    if me is None:
        return f"{host} pid {os.getpid()} in an unknown pid namespace ({tag})"
    namespace, boot, start = me
    return f"{host} pid {os.getpid()} in {namespace} start {start} boot {boot} ({tag})"


_ANY_HOLDER = re.compile(r"(?P<host>\S+) pid (?P<pid>\d+) (?:in an unknown pid namespace )?\([0-9a-f]+\)")


def describe_holder(holder: str) -> str:
    """A lease holder as a reader wants it in a message: ``pid 1234 on host vm,
    started 2026-11-27 12:01:03 UTC`` for a ``holder_id`` (the start time only
    when the holder ran in this machine's current boot, the one whose clock
    ticks it counts), ``pid 1234 on host vm`` for the older forms, and any
    other text as it is. Only the display: the stored id keeps every field,
    as ``_dead_here`` reads them."""
    m = _HOLDER.fullmatch(holder)
    if m is None:
        old = _ANY_HOLDER.fullmatch(holder)
        return f"pid {old['pid']} on host {old['host']}" if old else holder
    shown = f"pid {m['pid']} on host {m['host']}"
    booted = _boot_unix(m["boot"])
    if booted is not None:
        started = datetime.fromtimestamp(booted + int(m["start"]) / os.sysconf("SC_CLK_TCK"), timezone.utc)
        shown += f", started {started:%Y-%m-%d %H:%M:%S} UTC"
    return shown


def _boot_unix(boot: str) -> int | None:
    """When this machine booted (``btime`` in /proc/stat), if ``boot`` is its
    current boot id; None otherwise, or where /proc does not say."""
    if _boot_id() != boot:
        return None
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _dead_here(holder: str) -> bool:
    """The holder is provably gone (killed with SIGKILL, or an older fleetctl
    that did not release on SIGTERM): it ran on this host, in this boot and in
    this PID namespace, and its PID is free or now another process's (another
    start time). Its lease can be taken at once instead of after its expiry.

    Anything else is waited for: a holder in another PID namespace (a
    container with host networking shares the hostname, not the PIDs: it was
    taken over mid-pass), of another boot or host, or written in a form that
    does not say its namespace (an older fleetctl's ``HOST pid N (tag)``)."""
    m = _HOLDER.fullmatch(holder)
    me = _identity()
    if m is None or me is None or m["host"] != socket.gethostname() or (m["namespace"], m["boot"]) != me[:2]:
        return False
    pid = int(m["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's: the same process only if it started when the holder did
    started = _start_ticks(pid)
    return started is not None and started != int(m["start"])


def take(store: Store, holder: str, ttl_seconds: float = TTL_SECONDS) -> tuple[str, float] | None:
    """Take the controller lease once: None when taken, else (holder, seconds
    left). A holder provably gone (``_dead_here``) is taken over; a lease
    released between the two reads is tried again."""
    held = store.acquire_lease(NAME, holder, ttl_seconds)
    if held is not None and (not held[0] or held[1] <= 0):
        held = store.acquire_lease(NAME, holder, ttl_seconds)  # released (or expired) just now
    if held is not None and _dead_here(held[0]) and store.take_over_lease(NAME, held[0], holder, ttl_seconds):
        return None
    return held


class _Heartbeat:
    """Renews a held lease from its own thread and store handle while a pass
    runs, so a long pass (a Terraform apply, a slow cloud) keeps it, and the
    lease can expire soon after its holder dies (``HEARTBEAT_TTL_SECONDS``)."""

    def __init__(self, url: str, holder: str, ttl_seconds: float) -> None:
        self._url, self._holder, self._ttl = url, holder, ttl_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleetctl-lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        store: Store | None = None
        try:
            while not self._stop.wait(self._ttl / 4):
                try:
                    # Opened at the first renewal only: most passes end long before it, and a daemon's
                    # interruption pass runs every few seconds.
                    store = store or Store(self._url)
                    held = store.acquire_lease(NAME, self._holder, self._ttl)
                except (StoreError, sa.exc.SQLAlchemyError) as exc:
                    # A transient failure ("database is locked" past the busy timeout, a PostgreSQL
                    # reconnect): the lease is still this process's until it expires, so try again on
                    # the next beat rather than let it lapse for the rest of the pass.
                    log.warning("renewing the controller lease failed (%s); trying again in %.0f s (it expires "
                                "%.0f s after the last renewal)", exc, self._ttl / 4, self._ttl)
                    continue
                if held is not None:
                    log.error("the controller lease was lost to %s while this pass ran", describe_holder(held[0]))
                    return
        finally:
            if store is not None:
                store.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


class Held:
    """The controller lease, held by this process until ``release()``."""

    def __init__(self, store: Store, holder: str, heartbeat: _Heartbeat | None) -> None:
        self._store, self._holder, self._heartbeat = store, holder, heartbeat

    def release(self) -> None:
        with signals.deferred():  # a second Ctrl-C or SIGTERM must not cut the release short
            if self._heartbeat is not None:
                self._heartbeat.stop()
            self._store.release_lease(NAME, self._holder)


def hold(store: Store, holder: str) -> Held | tuple[str, float]:
    """Take the lease for a pass (renewed from a heartbeat thread where the
    store can be opened twice): a ``Held``, else (holder, seconds left)."""
    beating = not store.in_memory
    ttl = HEARTBEAT_TTL_SECONDS if beating else TTL_SECONDS
    held = take(store, holder, ttl)
    if held is not None:
        return held
    try:
        heartbeat = _Heartbeat(store.url, holder, ttl) if beating else None
    except BaseException:  # no thread (or interrupted): nobody would renew or release it
        store.release_lease(NAME, holder)
        raise
    return Held(store, holder, heartbeat)


@contextmanager
def controller_lease(store: Store, holder: str, *, wait_seconds: float = 0.0,
                     poll_seconds: float = 0.5) -> Iterator[None]:
    """Hold the controller lease for the block; wait up to ``wait_seconds``
    for another holder to finish, then raise ``LeaseHeld``."""
    deadline = time.monotonic() + wait_seconds
    held: Held | None = None
    try:
        while True:
            with signals.deferred():  # taken and recorded in `held` before a signal can stop this
                got = hold(store, holder)
                if isinstance(got, Held):
                    held = got
            if held is not None:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise LeaseHeld(NAME, *got, shown=describe_holder(got[0]))
            time.sleep(min(poll_seconds, left))
        yield
    finally:
        if held is not None:
            held.release()
