"""SIGTERM and SIGINT held back while a unit of work must not be cut short.

``reconcile --once`` and ``apply`` turn SIGTERM into SystemExit
(``fleetctl.cli.common.stop_cleanly_on_sigterm``) and Ctrl-C is
KeyboardInterrupt: both unwind the command, so the store's transaction rolls
back and the controller lease is released. Two places must not be cut in the
middle, and hold the signals back until they end:

* a store transaction: a SystemExit raised inside the database driver (seen
  mid ``executemany`` on SQLite) leaves SQLAlchemy to invalidate the
  connection without a rollback, and the SQLite connection, kept alive by the
  exception's traceback, still holds its write lock while the unwinding
  releases the lease: "database is locked", exit 1 and the lease held for its
  TTL. Transactions are short and never wrap a cloud call, so a signal waits
  milliseconds;
* taking the controller lease and recording it as held (``fleetctl.controller.lease``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def deferred() -> Iterator[None]:
    """SIGTERM and SIGINT noted during the block and delivered at its end, to
    the handlers the process had before (nested blocks deliver at the
    outermost end).

    Done with Python-level handlers that only note the signal, not by masking
    it: ``pthread_sigmask`` masks the calling thread only, and the kernel hands
    a process-directed signal to any thread that has not masked it (a cloud
    SDK's pool, a logging thread), after which Python still runs the handler
    in the main thread. Python runs handlers in the main thread only, so in
    other threads (the daemon's passes) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    signums = (signal.SIGTERM, signal.SIGINT)
    before = {signum: signal.getsignal(signum) for signum in signums}
    for signum in signums:
        if before[signum] not in (signal.SIG_IGN, None):  # None: set outside Python; left as it is
            signal.signal(signum, lambda got, _frame: caught.append(got))
    try:
        yield
    finally:
        for signum, handler in before.items():
            if handler is not None:
                signal.signal(signum, handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)  # now, to the handler the process had before
