"""A database for the store tests on the real PostgreSQL the tests start
(``postgres`` in ``tests/conftest.py``; see README 'Set-up' for the server
package), and the ``store`` fixture: each test once on SQLite and once on
PostgreSQL."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from fleetctl.store import Store


@pytest.fixture(scope="session")
def postgres_url(postgres):
    return postgres("fleetctl")


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    """A new store: SQLite in a directory not made yet (the store makes it), or a clean PostgreSQL schema."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sub' / 'state.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
        engine = sa.create_engine(url)
        with engine.begin() as conn:  # a clean schema per test
            conn.execute(sa.text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        engine.dispose()
    s = Store(url)
    yield s
    s.close()
