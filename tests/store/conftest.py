"""A real PostgreSQL for the store tests, started by the tests themselves.

initdb refuses to run as root, so as root the server runs as the ``postgres``
system user (present wherever the Debian server package is installed).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_url():
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if not initdb or not pg_ctl:
        for base in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
            initdb, pg_ctl = str(base / "initdb"), str(base / "pg_ctl")
            break
    if not initdb or not Path(initdb).exists():
        pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) are not installed; see README 'Set-up'")
    root = Path(tempfile.mkdtemp(prefix="fleetctl-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    subprocess.run([*prefix, initdb, "-D", str(data), "-U", "fleetctl", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True)
    subprocess.run([*prefix, pg_ctl, "start", "-D", str(data), "-l", str(root / "log"), "-w", "-o",
                    f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"], check=True, capture_output=True)
    subprocess.run([*prefix, "createdb" if shutil.which("createdb") else str(Path(initdb).with_name("createdb")),
                    "-h", "127.0.0.1", "-p", str(port), "-U", "fleetctl", "fleetctl"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://fleetctl@127.0.0.1:{port}/fleetctl"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
