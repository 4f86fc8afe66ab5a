"""Fixtures shared across test packages."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def moto_server() -> Iterator["object"]:
    """moto's server on 127.0.0.1 for this test process (each xdist worker has
    its own); tests reset it through ``tests.providers.aws_world.moto_world``."""
    from tests.providers.aws_world import MotoServer

    server = MotoServer()
    yield server
    server.stop()
