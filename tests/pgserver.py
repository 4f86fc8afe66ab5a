"""A throwaway PostgreSQL server, started from the Debian server binaries:
the tests' (``postgres`` in ``tests/conftest.py``) and the tick benchmark's
(``benchmarks/tick_scaling.py``).

initdb refuses to run as root, so as root the server runs as the ``postgres``
system user (present wherever the Debian server package is installed).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


class PostgresMissing(RuntimeError):
    """The server binaries (initdb, pg_ctl) are not installed."""


_START_ATTEMPTS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def postgres_server(*, fsync: bool, prefix: str = "fleetctl-pg-") -> Iterator[Callable[[str], str]]:
    """Start a server on 127.0.0.1 in a temporary directory; yields a function
    that creates a database and returns its SQLAlchemy URL (its ``restart()``
    restarts the server). ``fsync``: off
    for tests (faster, nothing to keep), on for a benchmark of commits, which
    should pay for them. Stopped and removed on exit."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if not initdb or not pg_ctl:
        for base in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
            initdb, pg_ctl = str(base / "initdb"), str(base / "pg_ctl")
            break
    if not initdb or not Path(initdb).exists():
        raise PostgresMissing("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    root = Path(tempfile.mkdtemp(prefix=prefix))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    run_as: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
        run_as = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*run_as, initdb, "-D", str(data), "-U", "fleetctl", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True)
    log = root / "log"
    # The port is free when asked for and bound by the server a moment later: another process may take
    # it in between (rare), and then every store test of this worker would fail. So try another port.
    for attempt in range(1, _START_ATTEMPTS + 1):
        port = _free_port()
        options = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1" + ("" if fsync else " -c fsync=off")
        logged = log.stat().st_size if log.exists() else 0
        started = subprocess.run([*run_as, pg_ctl, "start", "-D", str(data), "-l", str(log), "-w", "-o", options],
                                 capture_output=True, text=True)
        if started.returncode == 0:
            break
        said = log.read_bytes()[logged:].decode(errors="replace") if log.exists() else ""
        if "already in use" not in said or attempt == _START_ATTEMPTS:
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(f"pg_ctl start failed (exit {started.returncode}, port {port}): "
                               f"{started.stderr.strip()}\n{said[-2000:]}")
    createdb = shutil.which("createdb") or str(Path(initdb).with_name("createdb"))

    def database(name: str) -> str:
        subprocess.run([*run_as, createdb, "-h", "127.0.0.1", "-p", str(port), "-U", "fleetctl", name],
                       check=True, capture_output=True)
        return f"postgresql+psycopg://fleetctl@127.0.0.1:{port}/{name}"

    def restart() -> None:
        """Restart the server (``pg_ctl restart -m fast``): every open connection is closed."""
        subprocess.run([*run_as, pg_ctl, "restart", "-D", str(data), "-m", "fast", "-w", "-l", str(root / "log"),
                        "-o", options], check=True, capture_output=True)

    database.restart = restart  # type: ignore[attr-defined]

    try:
        yield database
    finally:
        subprocess.run([*run_as, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
