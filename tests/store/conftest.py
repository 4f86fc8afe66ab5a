"""A real PostgreSQL for the store tests, started by the tests themselves
(``tests/pgserver.py``; see README 'Set-up' for the server package)."""

from __future__ import annotations

import pytest

from tests.pgserver import PostgresMissing, postgres_server


@pytest.fixture(scope="session")
def postgres_url():
    try:
        with postgres_server(fsync=False) as database:
            yield database("fleetctl")
    except PostgresMissing as exc:
        pytest.fail(f"{exc}; see README 'Set-up'")
