"""The test harness's PostgreSQL (tests/pgserver.py) starts even when the port it
was handed is taken before the server binds it (another process on the machine
asked for a free port in between): every store test of that worker failed then."""

from __future__ import annotations

import socket

import sqlalchemy as sa

from tests import pgserver


def test_a_server_whose_first_port_is_taken_meanwhile_starts_on_another(monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    handed: list[int] = []
    free = pgserver._free_port

    def first_the_taken_one() -> int:
        handed.append(taken.getsockname()[1] if not handed else free())
        return handed[-1]

    monkeypatch.setattr(pgserver, "_free_port", first_the_taken_one)
    try:
        with pgserver.postgres_server(fsync=False, prefix="fleetctl-pg-port-") as database:
            url = database("porttest")
            engine = sa.create_engine(url)
            try:
                with engine.connect() as conn:
                    assert conn.execute(sa.text("select 1")).scalar() == 1
            finally:
                engine.dispose()
    finally:
        taken.close()
    assert len(handed) == 2 and f":{handed[1]}/" in url and handed[0] != handed[1]
