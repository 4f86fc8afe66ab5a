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
    port = _free_port()
    subprocess.run([*run_as, initdb, "-D", str(data), "-U", "fleetctl", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True)
    options = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1" + ("" if fsync else " -c fsync=off")
    subprocess.run([*run_as, pg_ctl, "start", "-D", str(data), "-l", str(root / "log"), "-w", "-o", options],
                   check=True, capture_output=True)
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
