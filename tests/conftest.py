"""Fixtures shared across test packages."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The tests run fleetctl in subprocesses (`python -m fleetctl ...`) some thousand times. With
# PYTHONDONTWRITEBYTECODE set (this sandbox and CI set it) each of them compiled every fleetctl module
# from source again, 0.3-0.4 s of its start. They write and reuse bytecode under a cache outside the
# checkout instead (what a wheel install does by default); the code run is the same.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None and "PYTHONPYCACHEPREFIX" not in os.environ:
    os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / f"fleetctl-tests-pycache-{os.getuid()}")


@pytest.fixture(scope="session")
def moto_server() -> Iterator["object"]:
    """moto's server on 127.0.0.1 for this test process (each xdist worker has
    its own); tests reset it through ``tests.providers.aws_world.moto_world``."""
    from tests.providers.aws_world import MotoServer

    server = MotoServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Callable[[str], str]]:
    """A real PostgreSQL server for this test process (``tests/pgserver.py``; each
    xdist worker has its own), shared by the store tests and the crash sweep:
    a function that creates a database of that name and returns its URL (its
    ``restart()`` restarts the server)."""
    from tests.pgserver import PostgresMissing, postgres_server

    try:
        with postgres_server(fsync=False) as database:
            yield database
    except PostgresMissing as exc:
        pytest.fail(f"{exc}; see README 'Set-up'")
