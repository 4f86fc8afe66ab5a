"""One controller acts on a store at a time.

``reconcile --once`` (cron), ``apply`` and each pass of ``fleetctl daemon``
take the store's ``controller`` lease around what they do, so two of them
never observe, plan and act on the same fleet at once (which would buy it
twice and start jobs twice). With PostgreSQL several daemons can run: the one
that holds the lease acts, the others stand by and take over within a pass
when it stops (its lease is released) or dies (its lease expires).

Design choice: a lease row with an expiry in wall-clock time rather than a
database lock held for the pass: it works the same on SQLite and PostgreSQL,
does not keep a transaction open across cloud calls, and a process killed
with SIGKILL holds it only until it expires (at once, on the same host: a
holder whose process is gone is taken over). ``reconcile --once`` and
``apply`` release it on SIGTERM (a cron deadline, ``timeout``,
``systemctl stop``).
"""

from __future__ import annotations

import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from fleetctl.store import LeaseHeld, Store

NAME = "controller"
TTL_SECONDS = 600.0  # longer than any pass; a dead holder blocks others at most this long


def holder_id() -> str:
    """This process, as other processes see it in an error (and as
    ``_dead_here`` reads it)."""
    return f"{socket.gethostname()} pid {os.getpid()} ({uuid.uuid4().hex[:8]})"


_HOLDER = re.compile(r"^(?P<host>\S+) pid (?P<pid>\d+) \(")


def _dead_here(holder: str) -> bool:
    """The holder ran on this host and its process is gone (killed with
    SIGKILL, or an older fleetctl that did not release on SIGTERM): its lease
    can be taken at once instead of after its expiry."""
    m = _HOLDER.match(holder)
    if m is None or m["host"] != socket.gethostname():
        return False
    pid = int(m["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


def take(store: Store, holder: str, ttl_seconds: float = TTL_SECONDS) -> tuple[str, float] | None:
    """Take the controller lease once: None when taken, else (holder, seconds
    left). A holder of this host whose process is gone is taken over; a lease
    released between the two reads is tried again."""
    held = store.acquire_lease(NAME, holder, ttl_seconds)
    if held is not None and (not held[0] or held[1] <= 0):
        held = store.acquire_lease(NAME, holder, ttl_seconds)  # released (or expired) just now
    if held is not None and _dead_here(held[0]) and store.take_over_lease(NAME, held[0], holder, ttl_seconds):
        return None
    return held


@contextmanager
def controller_lease(store: Store, holder: str, *, wait_seconds: float = 0.0, ttl_seconds: float = TTL_SECONDS,
                     poll_seconds: float = 0.5) -> Iterator[None]:
    """Hold the controller lease for the block; wait up to ``wait_seconds``
    for another holder to finish, then raise ``LeaseHeld``."""
    deadline = time.monotonic() + wait_seconds
    while True:
        held = take(store, holder, ttl_seconds)
        if held is None:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            raise LeaseHeld(NAME, *held)
        time.sleep(min(poll_seconds, left))
    try:
        yield
    finally:
        store.release_lease(NAME, holder)
