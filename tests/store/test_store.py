"""The store on SQLite and on a real PostgreSQL: migrations, jobs, nodes, atomicity."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import timedelta

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from fleetctl.model import JOB_RUNTIME_FIELDS, Job, JobState, NodeState
from fleetctl.store import ConcurrentApply, DuplicateJob, Store, StoreError
from tests.builders import T0, job, node
from tests.store.migrate import downgrade

REPO = Path(__file__).resolve().parents[2]


def test_migrations_run_and_are_idempotent(store):
    assert store.schema_revision() == "0011"
    again = Store(store.url)
    assert again.schema_revision() == "0011"
    again.close()


def test_schema_head_is_the_newest_migration():
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from fleetctl.store import MIGRATIONS, SCHEMA_HEAD

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(cfg).get_heads() == [SCHEMA_HEAD]


def test_a_current_store_opens_without_alembic_and_an_old_one_is_upgraded(tmp_path):
    """Opening a store at the newest revision is one query: importing alembic
    took a quarter of a second of every command's start. A store one revision
    behind still goes through alembic and is upgraded."""
    db = tmp_path / "state.db"
    Store(f"sqlite:///{db}").close()
    probe = ("import sys; from fleetctl.store import Store; s = Store(sys.argv[1]); "
             "print(s.schema_revision(), 'alembic' in sys.modules)")
    opened = subprocess.run([sys.executable, "-c", probe, f"sqlite:///{db}"], capture_output=True, text=True,
                            check=True, cwd=REPO)
    assert opened.stdout.split() == ["0011", "False"]
    old = Store(f"sqlite:///{db}")
    downgrade(old, "0009")
    old.close()
    upgraded = subprocess.run([sys.executable, "-c", probe, f"sqlite:///{db}"], capture_output=True, text=True,
                              check=True, cwd=REPO)
    assert upgraded.stdout.split() == ["0011", "True"]



def test_the_upgrade_of_an_older_store_is_said_before_and_after(tmp_path, caplog):
    """A store at an older revision is upgraded with a word before (it can take
    minutes on a large store: a silent command looked hung) and its time after;
    a new store and a current one open without a word."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    said: list[str] = []
    Store(url, notify=said.append).close()
    assert said == []  # a new store's schema is created silently
    old = Store(url)
    downgrade(old, "0009")
    old.close()
    upgraded = Store(url, notify=said.append)
    assert upgraded.schema_revision() == "0011"
    upgraded.close()
    assert len(said) == 2
    assert said[0] == (f"upgrading the schema of state store {url} from revision 0009 to 0011 (this fleetctl's); "
                       "on a large store this can take minutes: let it finish")
    assert said[1].startswith(f"upgraded the schema of state store {url} to revision 0011 in ")
    assert said[1].endswith(" s")
    Store(url, notify=said.append).close()
    assert len(said) == 2  # current: nothing said
    # without notify (the daemon): on the fleetctl.store logger, a warning, then an info line
    old = Store(url)
    downgrade(old, "0010")
    old.close()
    with caplog.at_level("INFO", logger="fleetctl.store"):
        Store(url).close()
    records = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "fleetctl.store"]
    assert [level for level, _ in records] == ["WARNING", "INFO"]
    assert "from revision 0010 to 0011" in records[0][1]


def test_a_command_on_an_older_store_says_it_upgrades_it(tmp_path):
    """A one-shot command (no logging set up) prints the upgrade as a note on
    stderr, and its output is unchanged; the next command says nothing."""
    db = tmp_path / "state.db"
    old = Store(f"sqlite:///{db}")
    downgrade(old, "0009")
    old.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}

    def jobs_list() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "fleetctl", "jobs", "list", "--state", f"sqlite:///{db}"],
                              capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)

    first = jobs_list()
    assert first.returncode == 0, first.stderr
    assert first.stderr.startswith(f"note: upgrading the schema of state store sqlite:///{db} from revision 0009 "
                                   "to 0011")
    assert "note: upgraded the schema of state store" in first.stderr
    second = jobs_list()
    assert second.returncode == 0 and second.stderr == "" and second.stdout == first.stdout
    after = Store(f"sqlite:///{db}")
    assert after.schema_revision() == "0011"
    after.close()

def test_jobs_round_trip_and_resubmit(store):
    jobs = [job("b", gpus=2, submitted=T0), job("a", gpus=8, models=("H100-80GB",), submitted=T0)]
    assert store.add_jobs(jobs, T0) == (2, 0)
    assert [j.job_id for j in store.jobs()] == ["a", "b"]
    assert store.jobs()[0] == jobs[1]
    assert store.add_jobs([jobs[0]], T0) == (0, 1)  # identical: no-op
    with pytest.raises(DuplicateJob) as info:
        store.add_jobs([job("c"), replace(jobs[0], gpus_per_worker=4),
                        replace(jobs[1], workers=3, spot_eligible=True)], T0)
    assert [j.job_id for j in store.jobs()] == ["a", "b"]  # nothing of the failed batch landed
    assert info.value.conflicts == (  # every changed job, with what differs (stored -> new)
        ("b", "queued", (("gpus_per_worker", 2, 4),)),
        ("a", "queued", (("workers", 1, 3), ("spot_eligible", None, True))),
    )
    assert str(info.value) == "job 'b' already exists with a different spec (queued) (and 1 more: 'a')"
    store.put_job(replace(jobs[0], state=JobState.SUCCEEDED), T0)
    assert [j.job_id for j in store.jobs(active_only=True)] == ["a"]
    assert store.jobs(job_ids=["b", "a", "nope"]) == (jobs[1], replace(jobs[0], state=JobState.SUCCEEDED))
    assert store.jobs(active_only=True, job_ids=["b"]) == () and store.jobs(job_ids=[]) == ()


def test_resubmitting_a_job_that_ran_is_still_a_no_op(store):
    """What the controller writes as a job runs (state, nodes, start, checkpoints,
    reclaims) is not part of its spec: the same queue file can be re-submitted
    from cron or GitOps at any time."""
    original = job("a", gpus=2, submitted=T0)
    store.add_jobs([original], T0)
    ran = replace(original, state=JobState.RUNNING, node_ids=("n1",), started_at_utc=T0 + timedelta(minutes=5),
                  last_checkpoint_utc=T0 + timedelta(minutes=35), interruptions=1, work_lost_interruptions=1,
                  checkpointed_work_hours=0.5, priority_boost=10.0, avoid_offer_keys=("aws/r/z/t/spot",),
                  requeued_at_utc=T0 + timedelta(minutes=2))
    store.put_job(ran, T0)
    assert store.add_jobs([replace(original, submitted_at_utc=T0 + timedelta(hours=1))], T0) == (0, 1)
    assert store.jobs() == (ran,)  # and the running job is left as it is
    with pytest.raises(DuplicateJob):
        store.add_jobs([replace(original, duration_hours=original.duration_hours + 1)], T0)
    assert JOB_RUNTIME_FIELDS < {f.name for f in fields(Job)}  # no stale name in the list


def test_nodes_and_transactions(store):
    n = node("n1", state=NodeState.LAUNCHING)
    store.put_node(n, T0, idempotency_key="k1")
    assert store.nodes() == (n,)
    assert store.nodes_by_idempotency_key("k1") == (n,)
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.put_node(replace(n, state=NodeState.GONE), T0)
            store.record("terminate", T0, "n1")
            raise RuntimeError("boom")
    assert store.nodes()[0].state is NodeState.LAUNCHING
    assert store.events() == ()
    store.put_node(replace(n, state=NodeState.GONE), T0)
    assert store.nodes() == () and len(store.nodes(include_gone=True)) == 1
    store.put_node(replace(n, state=NodeState.GONE, zone="z"), T0, idempotency_key="k2")  # an update: k1 stays
    assert store.nodes_by_idempotency_key("k1") == (replace(n, state=NodeState.GONE, zone="z"),)
    assert store.nodes_by_idempotency_key("k2") == ()


def test_reads_give_each_rows_current_value_whoever_wrote_it(store):
    """Jobs and nodes read again after a write (through this handle, another
    handle, or a transaction rolled back) are what the store holds now; rows
    unchanged since the last read are equal to what that read gave, and a row
    damaged since is still reported as damaged."""
    from fleetctl.store import StoreError

    a, b = job("a", submitted=T0), job("b", submitted=T0)
    store.add_jobs([a, b], T0)
    store.put_node(node("n1"), T0)
    store.put_node(node("n2", state=NodeState.GONE), T0)
    assert store.jobs(active_only=True) == (a, b)
    assert store.nodes(include_gone=True) == (node("n1"), node("n2", state=NodeState.GONE))
    running = replace(a, state=JobState.RUNNING, node_ids=("n1",), started_at_utc=T0)
    store.put_job(running, T0)
    assert store.jobs(active_only=True) == (running, b)
    other = Store(store.url)  # another process's handle on the same store
    try:
        other.put_job(replace(b, state=JobState.SUCCEEDED), T0)
        other.put_node(node("n1", state=NodeState.DRAINING), T0)
    finally:
        other.close()
    assert store.jobs(active_only=True) == (running,)
    assert store.jobs() == (running, replace(b, state=JobState.SUCCEEDED))
    assert store.nodes(include_gone=True) == (node("n1", state=NodeState.DRAINING), node("n2", state=NodeState.GONE))
    assert store.nodes() == (node("n1", state=NodeState.DRAINING),)
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.put_job(replace(running, state=JobState.QUEUED, node_ids=()), T0)
            assert store.jobs(active_only=True)[0].state is JobState.QUEUED  # seen inside the transaction
            raise RuntimeError("boom")
    assert store.jobs(active_only=True) == (running,)  # rolled back: the stored job again
    with store._engine.begin() as conn:  # noqa: SLF001 - damage the row behind the store's back
        conn.execute(sa.text("UPDATE jobs SET spec = '{' WHERE job_id = 'a'"))
    with pytest.raises(StoreError, match="job 'a' is not valid JSON"):
        store.jobs(active_only=True)


@pytest.mark.parametrize("node_id", ["n_1", "n%1", 'n"1', "n\\1", "nœud-1", "N1"])
def test_jobs_on_a_node_are_those_whose_node_ids_hold_it(store, node_id):
    """``jobs(on_node=)`` gives the jobs bound to that node, whatever the
    characters of its id (LIKE wildcards, JSON escapes, case), and no job that
    names it elsewhere (its own id, an offer to avoid) or a similar id."""
    others = ["n1", "nX1", "n11", "n", "nœud"]
    bound = replace(job("bound", submitted=T0), state=JobState.RUNNING, node_ids=("m", node_id))
    gang = replace(job("gang", submitted=T0 - timedelta(hours=1)), state=JobState.BOUND, node_ids=(node_id, node_id))
    done = replace(job("done", submitted=T0), state=JobState.SUCCEEDED, node_ids=(node_id,))
    elsewhere = [replace(job(f"on-{i}", submitted=T0), state=JobState.RUNNING, node_ids=(o,))
                 for i, o in enumerate(others)]
    named = replace(job(node_id, submitted=T0), avoid_offer_keys=(node_id,))  # queued, on no node
    store.add_jobs([bound, gang, done, named, *elsewhere], T0)
    assert store.jobs(active_only=True, on_node=node_id) == (gang, bound)
    assert store.jobs(on_node=node_id) == (gang, bound, done)
    assert store.jobs(active_only=True, on_node="absent") == ()
    store.put_node(node(node_id, state=NodeState.GONE), T0)
    store.put_node(node("n1"), T0)
    assert store.nodes(include_gone=True, node_ids=[node_id, "n1", "absent"]) == tuple(
        sorted((node(node_id, state=NodeState.GONE), node("n1")), key=lambda n: n.node_id))
    assert store.nodes(node_ids=[node_id]) == () and store.nodes(node_ids=[]) == ()


def test_reads_by_more_ids_than_one_in_list_holds_give_every_row(store):
    """Reads by id lists split them into chunks (a database bounds the
    parameters of one statement): 1,201 ids give every stored row once."""
    from fleetctl.model import InterruptionEvent, InterruptionKind

    ids = [f"x{i:04d}" for i in range(1201)]
    store.add_jobs([job(i, submitted=T0) for i in ids], T0)
    for i in ids:
        store.put_node(node(i), T0)
    for i in ids:
        store.add_interruption(InterruptionEvent(event_id=f"e-{i}", provider="aws", node_id=i,
                                                 kind=InterruptionKind.RECLAIM_WARNING, received_at_utc=T0))
    wanted = [*ids, "absent", ids[0]]
    assert [j.job_id for j in store.jobs(job_ids=wanted)] == ids
    assert store.job_states(wanted) == {i: JobState.QUEUED for i in ids}
    assert [n.node_id for n in store.nodes(node_ids=wanted)] == ids
    assert sorted(e.node_id for e in store.interruptions(unhandled_only=False, node_ids=wanted)) == ids


def test_cancel_by_more_ids_than_one_statement_may_bind(tmp_path):
    """``request_cancel`` reads its jobs in chunks too: on an SQLite built with
    the limit of 999 bound parameters (the default before SQLite 3.32),
    cancelling 1,201 jobs at once cancels them all (one ``IN`` of 1,201 ids
    failed with 'too many SQL variables')."""
    import sqlite3

    s = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        sa.event.listen(s._engine, "connect",
                        lambda dbapi, _record: dbapi.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999))
        s._engine.dispose()  # connections opened from here on have the limit
        ids = [f"x{i:04d}" for i in range(1201)]
        s.add_jobs([job(i, submitted=T0) for i in ids], T0)
        assert s.request_cancel([*ids, ids[0]], T0) == {i: "cancelled" for i in ids}
        assert {j.state for j in s.jobs()} == {JobState.CANCELLED}
        with pytest.raises(StoreError, match="no such job: absent; nothing was cancelled"):
            s.request_cancel([*ids, "absent"], T0)
    finally:
        s.close()


def test_a_node_keeps_the_zone_its_provider_placed_it_in(store):
    """A node of a regional offer (zone "") carries the zone its provider
    reported; the store gives it back, and it is the node's placement domain."""
    from fleetctl.codec import node_from_dict, node_to_dict
    from fleetctl.model import Market
    from tests.builders import offer

    regional = offer("a2-ultragpu-8g", provider="gcp", region="us-central1", zone="", market=Market.ON_DEMAND)
    placed, unknown = node("vm-1", regional, zone="us-central1-b"), node("vm-2", regional)
    store.put_node(placed, T0)
    store.put_node(unknown, T0)
    assert store.nodes() == (placed, unknown)
    assert [n.zone for n in store.nodes()] == ["us-central1-b", ""]
    assert [n.placement_domain for n in store.nodes()] == [("gcp", "us-central1", "us-central1-b"),
                                                            ("gcp", "us-central1", "")]
    older = {k: v for k, v in node_to_dict(placed).items() if k != "zone"}  # written before Node had a zone
    assert node_from_dict(older) == replace(placed, zone="")


def test_launch_intent_is_recorded_once(store):
    assert store.begin_launch("key", "aws/r/z/t/spot", 2, T0) is True
    assert store.begin_launch("key", "aws/r/z/t/spot", 2, T0) is False


def test_a_launch_recorded_by_another_process_at_the_same_moment_is_refused_cleanly(store):
    """Two controllers applying the same plan: both check the launch key, both
    insert; the loser gets ConcurrentApply (its transaction rolls back), not a
    raw IntegrityError. Deterministic: the other process commits only once this
    one has checked the key and is about to insert."""
    other = Store(store.url)
    inserting = threading.Event()

    def about_to_insert(_conn, _cursor, statement, *_):  # noqa: ANN001
        if statement.lstrip().upper().startswith("INSERT INTO LAUNCHES"):
            inserting.set()

    sa.event.listen(store._engine, "before_cursor_execute", about_to_insert)
    outcome: list[object] = []

    def loser():
        try:
            with store.transaction():
                outcome.append(store.begin_launch("k", "aws/r/z/t/spot", 1, T0))
                store.record("launch", T0, "k")
        except Exception as exc:  # the outcome under test, checked below
            outcome.append(exc)

    try:
        with other.transaction():
            assert other.begin_launch("k", "aws/r/z/t/spot", 1, T0) is True
            thread = threading.Thread(target=loser)
            thread.start()
            assert inserting.wait(30)
        thread.join(60)
    finally:
        other.close()
    assert len(outcome) == 1 and isinstance(outcome[0], ConcurrentApply), outcome
    assert "another fleetctl process" in str(outcome[0])
    assert store.events() == ()  # the loser stopped at the launch and kept nothing


def test_offer_observations_record_listed_and_vanished_spot_offers(store):
    from datetime import timedelta

    from fleetctl.model import Market
    from tests.builders import offer

    a = offer("g1", gpus=1, price=1.0, zone="z1")
    b = offer("g1", gpus=1, price=1.2, zone="z2")
    od = offer("g1", gpus=1, price=3.0, zone="", market=Market.ON_DEMAND)
    assert store.record_offers([a, b, od], T0) == 2  # spot only
    assert store.record_offers([a, od], T0 + timedelta(minutes=5)) == 1  # only b changed: now unavailable
    rows = store.offer_observations()
    assert [(r["offer_key"], r["available"]) for r in rows] == [(a.key, True), (b.key, True), (b.key, False)]
    assert rows[0]["usd_per_hour"] == 1.0 and rows[0]["on_demand_usd_per_hour"] == 3.0
    assert rows[2]["usd_per_hour"] is None
    assert len(store.offer_observations(since=T0 + timedelta(minutes=1))) == 1
    # nothing changed: nothing written but the observation mark
    assert store.record_offers([a, od], T0 + timedelta(minutes=10)) == 0
    assert len(store.events("offers_observed")) == 3
    # back, and repriced
    assert store.record_offers([a, replace(b, usd_per_hour=1.5), od], T0 + timedelta(minutes=15)) == 1
    assert store.offer_observations()[-1]["usd_per_hour"] == 1.5


def test_an_0003_store_with_offer_history_upgrades_with_its_latest_state_backfilled(store):
    """A store of revision 0003 already holding a change log: migration 0004
    fills offer_latest from it, so the next pass records only real changes."""

    from fleetctl.model import Market
    from tests.builders import offer

    a, b = offer("a1", price=1.0, zone="z1"), offer("b1", price=2.0, zone="z2")
    store.record_offers([a, b], T0)
    store.record_offers([a], T0 + timedelta(minutes=5))  # b vanished
    downgrade(store, "0003")
    assert store.schema_revision() == "0003"
    upgraded = Store(store.url)
    try:
        assert upgraded.schema_revision() == "0011"
        assert upgraded.record_offers([a], T0 + timedelta(minutes=10)) == 0  # nothing changed
        assert upgraded.record_offers([a, b], T0 + timedelta(minutes=15)) == 1  # b is back
        assert upgraded.record_offers([a, b, offer("c1", market=Market.ON_DEMAND)], T0 + timedelta(minutes=20)) == 0
    finally:
        upgraded.close()


def test_an_0006_store_upgrades_with_each_nodes_zone_backfilled_from_the_old_rule(store):
    """Revision 0006 stored nodes without a zone, and the model read the zone
    of a regional offer's node from a <zone>/<name> id (GCP's naming).
    Migration 0007 writes that zone into each stored node, so an upgraded
    store keeps its placement domains; downgrading takes it out again."""
    import json

    from fleetctl.model import Market
    from tests.builders import offer

    gcp = offer("a2-ultragpu-8g", provider="gcp", region="us-central1", zone="", market=Market.ON_DEMAND)
    azure = offer("Standard_NC24ads_A100_v4", provider="azure", region="eastus", zone="", market=Market.SPOT)
    aws = offer("p4d.24xlarge", provider="aws", region="us-east-1", zone="use1-az2")
    nodes = [node("us-central1-b/fleetctl-1", gcp), node("us-central1-a/fleetctl-2", gcp),
             node("fl-research-1", azure), node("i-0abc", aws),
             node("us-central1-c/fleetctl-0", gcp, state=NodeState.GONE)]
    for n in nodes:
        store.put_node(n, T0)
    downgrade(store, "0006")
    with store._engine.begin() as conn:
        docs = [json.loads(d) for (d,) in conn.execute(sa.text("SELECT doc FROM nodes"))]
    assert len(docs) == 5 and not [d for d in docs if "zone" in d]  # as fleetctl of revision 0006 wrote them
    assert store.schema_revision() == "0006"
    upgraded = Store(store.url)
    try:
        assert upgraded.schema_revision() == "0011"
        zones = {n.node_id: n.zone for n in upgraded.nodes(include_gone=True)}
        assert zones == {"us-central1-b/fleetctl-1": "us-central1-b", "us-central1-a/fleetctl-2": "us-central1-a",
                         "fl-research-1": "", "i-0abc": "use1-az2", "us-central1-c/fleetctl-0": "us-central1-c"}
        assert {n.node_id: n.placement_domain for n in upgraded.nodes(include_gone=True)} == {  # as the old rule said
            "us-central1-b/fleetctl-1": ("gcp", "us-central1", "us-central1-b"),
            "us-central1-a/fleetctl-2": ("gcp", "us-central1", "us-central1-a"),
            "fl-research-1": ("azure", "eastus", ""), "i-0abc": ("aws", "us-east-1", "use1-az2"),
            "us-central1-c/fleetctl-0": ("gcp", "us-central1", "us-central1-c")}
        upgraded.put_node(replace(nodes[2], zone="2"), T0)  # what the adapter says now is kept
        again = Store(store.url)
        assert [n.zone for n in again.nodes() if n.node_id == "fl-research-1"] == ["2"]
        again.close()
    finally:
        upgraded.close()


def test_one_process_holds_the_controller_lease_until_it_releases_or_it_expires(store):
    """Two processes (two Store handles): the lease is taken by one, refused
    to the other with who holds it, renewable by its holder, free again once
    released, and taken over once expired (a holder killed with SIGKILL)."""
    other = Store(store.url)
    try:
        assert store.acquire_lease("controller", "A", 60.0) is None
        holder, left = other.acquire_lease("controller", "B", 60.0)
        assert holder == "A" and 55.0 < left <= 60.0
        assert store.acquire_lease("controller", "A", 60.0) is None  # renewal
        store.release_lease("controller", "A")
        assert other.acquire_lease("controller", "B", 0.2) is None
        other.release_lease("controller", "A")  # not A's any more: B keeps it
        assert store.acquire_lease("controller", "A", 60.0)[0] == "B"
        import time

        time.sleep(0.3)  # B's lease expired: B died
        assert store.acquire_lease("controller", "A", 60.0) is None
    finally:
        other.close()


def test_on_postgresql_a_host_whose_clock_runs_ahead_does_not_take_a_live_holders_lease(postgres_url, monkeypatch):
    """Daemons on several hosts share a PostgreSQL store; their clocks differ. The lease is timed by
    the database's clock: a host 10 minutes ahead (past the 2-minute lease) saw the live holder's
    lease expired by its own clock, took it, and both acted. A clock behind cannot hold it longer."""
    import time

    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:  # a clean schema
        conn.execute(sa.text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    here, ahead = Store(postgres_url), Store(postgres_url)
    try:
        real = time.time
        assert here.acquire_lease("controller", "host-a", 120.0) is None
        monkeypatch.setattr(time, "time", lambda: real() + 600.0)  # host-b's clock
        holder, left = ahead.acquire_lease("controller", "host-b", 120.0)
        assert holder == "host-a" and 100.0 < left <= 120.0
        assert not ahead.take_over_lease("controller", "host-c", "host-b", 120.0)  # not its holder: no effect
        monkeypatch.setattr(time, "time", lambda: real() - 600.0)  # and a clock behind
        here.release_lease("controller", "host-a")
        assert here.acquire_lease("controller", "host-a", 0.2) is None
        time.sleep(0.3)  # expired by the database's clock, whatever this host's says
        assert ahead.acquire_lease("controller", "host-b", 120.0) is None
    finally:
        here.close()
        ahead.close()


def test_the_clock_offset_is_this_hosts_clock_minus_postgresqls(postgres_url, tmp_path, monkeypatch):
    """What fleetctl_store_clock_offset_seconds shows: on PostgreSQL, this host's clock minus the
    server's (here one machine: about 0; a host 10 minutes ahead: about +600); SQLite has no clock."""
    import time

    store = Store(postgres_url)
    try:
        assert abs(store.clock_offset_seconds()) < 1.0
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 600.0)
        assert 599.0 < store.clock_offset_seconds() < 601.0
    finally:
        store.close()
    monkeypatch.undo()
    sqlite = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        assert sqlite.clock_offset_seconds() is None
    finally:
        sqlite.close()


def test_prune_deletes_what_every_pass_adds_and_keeps_decisions_and_the_market_state(store):
    """A daemon writes demand and offers_observed rows every pass: prune
    deletes those older than the cut, keeps launches and other decisions, and
    keeps each offer's last observation before the cut (its state then)."""
    from fleetctl.model import InterruptionEvent, InterruptionKind
    from tests.builders import offer

    spot = offer("a8", price=8.0)
    for hour in range(10):
        at = T0 + timedelta(hours=hour)
        store.record("demand", at, "", gpus={"A100-80GB": hour})
        store.record_offers([replace(spot, usd_per_hour=8.0 + hour)], at)
    store.record("launch", T0, spot.key, nodes=["n1"])
    store.add_interruption(InterruptionEvent("old", "aws", "n1", InterruptionKind.RECLAIM_WARNING, T0))
    store.mark_interruption_handled("old", T0)
    store.add_interruption(InterruptionEvent("open", "aws", "n2", InterruptionKind.RECLAIM_WARNING, T0))
    cut = T0 + timedelta(hours=5)
    state_before = store.offer_observations(cut, with_state_at_since=True)
    deleted = store.prune(cut)
    assert deleted == {"events": 10, "offer_observations": 4, "interruptions": 1}
    assert [e["kind"] for e in store.events() if e["at_utc"] < "2026-11-02T14"].count("launch") == 1
    assert len(store.events("demand")) == 5 and len(store.events("offers_observed")) == 5
    assert store.offer_observations(cut, with_state_at_since=True) == state_before  # the state at the cut kept
    assert [e.event_id for e in store.interruptions(unhandled_only=False)] == ["open"]

    # a notice the planner still reads (reclaimed_offer_ttl_minutes) is kept whatever the cut
    store.add_interruption(InterruptionEvent("recent", "aws", "n3", InterruptionKind.RECLAIM_WARNING, cut))
    store.mark_interruption_handled("recent", cut)
    assert store.prune(cut + timedelta(hours=1), notices_before=cut - timedelta(hours=1))["interruptions"] == 0


def _launched(store, key, node_ids, status, created, gone_at=None):
    """A launch row ``key`` (begun at ``created``, finished with ``status``) and
    its nodes, GONE since ``gone_at`` when given (else ready)."""
    store.begin_launch(key, "aws/r1/z1/g8/spot", max(1, len(node_ids)), created)
    if status != "pending":
        store.finish_launch(key, node_ids, status)
    for nid in node_ids:
        if gone_at is None:
            store.put_node(node(nid), created, idempotency_key=key)
        else:
            store.put_node(node(nid, state=NodeState.GONE), gone_at, idempotency_key=key)


def _left(store):
    """What the store holds of the finished history's tables: job ids, node ids, launch keys, cancel requests."""
    with store._engine.connect() as conn:  # noqa: SLF001 - every launch row and cancel request, as stored
        keys = {r[0] for r in conn.execute(sa.text("SELECT idempotency_key FROM launches"))}
        cancels = {r[0] for r in conn.execute(sa.text("SELECT job_id FROM job_cancellations"))}
    return ({j.job_id for j in store.jobs()}, {n.node_id for n in store.nodes(include_gone=True)}, keys, cancels)


def test_prune_finished_deletes_the_finished_history_before_the_cut_and_keeps_the_rest(store):
    """At the boundary: a final job last written just before the cut goes, one
    written at the cut stays; active jobs, live nodes, pending and unknown
    launches, the per-pass rows and each kind's latest event stay whatever
    their age."""
    cut = T0 + timedelta(days=30)
    just_before = cut - timedelta(seconds=1)
    for state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
        store.add_jobs([job(state.value)], T0)
        store.put_job(job(state.value, state=state), just_before)
    store.add_jobs([job("at-cut"), job("queued"), job("running"), job("asked"), job("stopped")], T0)
    store.put_job(job("at-cut", state=JobState.SUCCEEDED), cut)
    store.put_job(job("running", state=JobState.RUNNING, node_ids=("live",)), just_before)
    store.request_cancel(["asked", "stopped"], T0)  # both cancelled at once (queued); one request handled since
    store.mark_cancel_handled("stopped", T0)
    _launched(store, "k-gone", ["gone"], "done", T0, gone_at=just_before)
    _launched(store, "k-at-cut", ["gone-at-cut"], "done", T0, gone_at=cut)
    _launched(store, "k-live", ["live"], "done", T0)
    _launched(store, "k-failed", [], "failed", T0)
    _launched(store, "k-pending", [], "pending", T0)
    _launched(store, "k-unknown", [], "unknown", T0)
    _launched(store, "k-new", [], "failed", cut)
    for kind, at in (("launch", T0), ("launch", cut), ("terminate", T0), ("demand", T0), ("bind", just_before)):
        store.record(kind, at, "x")

    deleted = store.prune_finished(cut)

    assert deleted == {"jobs": 4, "job_cancellations": 1, "nodes": 1, "launches": 2, "events": 2}
    jobs, nodes, keys, cancels = _left(store)
    assert jobs == {"at-cut", "queued", "running", "asked"}  # "asked": cancelled, its request not handled yet
    assert _tombstones(store) == {"succeeded": "succeeded", "failed": "failed", "cancelled": "cancelled",
                                  "stopped": "cancelled"}  # the deleted jobs' ids, never reused
    assert cancels == {"asked"}
    assert nodes == {"gone-at-cut", "live"}
    assert keys == {"k-at-cut", "k-live", "k-pending", "k-unknown", "k-new"}
    assert sorted((e["kind"], e["at_utc"][:10]) for e in store.events()) == [
        ("bind", "2026-12-02"),  # the latest bind, though before the cut
        ("cancel_requested", "2026-11-02"),  # the latest of two
        ("demand", "2026-11-02"),  # per-pass: prune's, not prune_finished's
        ("launch", "2026-12-02"),
        ("prune_finished", "2026-12-02"),  # the cut, for `fleetctl report` (Store.history_complete_from)
        ("terminate", "2026-11-02")]
    assert store.last_event_at("terminate") == T0  # what a pass reads (the planner's cooldown)
    assert store.prune_finished(cut) == {"jobs": 0, "job_cancellations": 0, "nodes": 0, "launches": 0, "events": 0}


def test_prune_finished_keeps_the_gone_nodes_that_kept_notices_or_active_jobs_name(store):
    """A reclaim notice names its node, and the forecasters read the reclaimed
    offer through the node's row: the node stays while the notice does, and
    goes in the same transaction as a prune that deletes the notice. A gone
    node an active job still names (a lost node not handled yet) stays too."""
    from fleetctl.controller.forecast import recent_reclaims
    from fleetctl.model import InterruptionEvent, InterruptionKind
    from tests.builders import offer

    spot = offer("a8", price=8.0)
    cut = T0 + timedelta(days=30)
    store.put_node(node("reclaimed", of=spot, state=NodeState.GONE), T0 + timedelta(minutes=2))
    store.add_interruption(InterruptionEvent("notice", "aws", "reclaimed", InterruptionKind.RECLAIM_WARNING, T0))
    store.mark_interruption_handled("notice", T0)
    store.put_node(node("lost", state=NodeState.GONE), T0)
    store.add_jobs([job("bound", state=JobState.BOUND, node_ids=("lost",))], T0)
    reclaims = recent_reclaims(store)
    assert [r.offer_key for r in reclaims] == [spot.key]

    assert store.prune_finished(cut)["nodes"] == 0
    assert recent_reclaims(store) == reclaims
    assert _left(store)[1] == {"reclaimed", "lost"}

    with store.transaction():  # as `fleetctl prune --finished-older-than-days` runs them
        assert store.prune(cut)["interruptions"] == 1
        assert store.prune_finished(cut)["nodes"] == 1
    assert recent_reclaims(store) == () and _left(store)[1] == {"lost"}


def test_prune_finished_keeps_a_launch_with_its_nodes_and_its_retries_or_deletes_them_all(store):
    """A launch key seen before is a retry unless every node bought under it is
    gone (then the next ``-rN`` key buys anew): deleting an old key, or its
    gone nodes, while a later retry of the same launch is kept would let a
    crashed apply's retry read the old key as never used and buy again."""
    from fleetctl.store import retry_key

    cut = T0 + timedelta(days=30)
    old = cut - timedelta(days=1)
    _launched(store, "k", ["k-node"], "done", T0, gone_at=old)
    _launched(store, retry_key("k", 1), [], "pending", T0)  # a retry under way (no answer yet), however old
    _launched(store, "m", ["m-node"], "done", T0, gone_at=old)
    _launched(store, retry_key("m", 1), ["m-r1-node"], "done", T0, gone_at=cut)  # its node gone since the cut
    _launched(store, "n", ["n-node"], "done", T0, gone_at=old)
    _launched(store, retry_key("n", 1), ["n-r1-node"], "partial", T0, gone_at=old)
    _launched(store, "p", ["p-node", "p-live"], "done", T0)
    store.put_node(node("p-node", state=NodeState.GONE), old)  # one of a launch's two nodes gone
    _launched(store, "q", [], "abandoned", T0)  # settled after a dead process: no node under its key
    _launched(store, "u", [], "unknown", T0)  # no answer yet: the next pass settles it
    _launched(store, "w", [], "abandoned", T0)
    store.put_node(node("w-late"), old, idempotency_key="w")  # bought after all, and listed later

    assert store.prune_finished(cut)["launches"] == 3
    _, nodes, keys, _ = _left(store)
    assert keys == {"k", "k-r1", "m", "m-r1", "p", "u", "w"}
    assert nodes == {"k-node", "m-node", "m-r1-node", "p-node", "p-live", "w-late"}
    assert [n.node_id for n in store.nodes_by_idempotency_key("k")] == ["k-node"]


def test_prune_finished_deletes_more_rows_than_one_statement_binds(store):
    """Job ids, node ids and launch keys are deleted in chunks (``_IN_CHUNK``) under the bound-parameter
    limit, and the jobs' tombstones are written and read back in chunks too."""
    count = 1_201
    finished = [job(f"j{i:04d}", state=JobState.SUCCEEDED) for i in range(count)]
    with store.transaction():
        store.add_jobs(finished, T0)
        for i in range(count):
            _launched(store, f"k{i:04d}", [f"n{i:04d}"], "done", T0, gone_at=T0)
    assert store.prune_finished(T0 + timedelta(days=1)) == {
        "jobs": count, "job_cancellations": 0, "nodes": count, "launches": count, "events": 0}
    assert _left(store)[:3] == (set(), set(), set())
    assert _tombstones(store) == {j.job_id: "succeeded" for j in finished}
    assert store.add_jobs(finished, T0 + timedelta(days=2)) == (0, count)


def _tombstones(store) -> dict[str, str]:
    """The ids of the pruned jobs the store keeps, with their final states, as stored."""
    with store._engine.connect() as conn:  # noqa: SLF001 - the table itself, not what add_jobs reads of it
        return dict(conn.execute(sa.text("SELECT job_id, state FROM job_tombstones")).all())


def test_a_pruned_job_id_is_never_reused(store):
    """``prune_finished`` keeps a tombstone of each job it deletes: re-submitting
    the same spec is a no-op, as while the job was stored (whatever its
    runtime fields were), and a changed spec under its id is refused with what
    changed, for each pruned and stored job alike, and nothing of the batch lands."""
    cut = T0 + timedelta(days=30)
    done = replace(job("done", gpus=2, models=("A100-80GB", "H100-80GB"), spot=True), deadline_utc=T0 + timedelta(days=1),
                   checkpointable=True, checkpoint_interval_minutes=30.0, gpu_memory_gib_per_gpu=40.0)
    dropped, queued = job("dropped"), job("queued")
    assert store.add_jobs([done, dropped, queued], T0) == (3, 0)
    store.put_job(replace(done, state=JobState.SUCCEEDED, node_ids=("n1", "n1"), started_at_utc=T0,
                          first_started_at_utc=T0, interruptions=1, checkpointed_work_hours=0.5), T0)
    store.put_job(replace(dropped, state=JobState.CANCELLED), T0)

    assert store.prune_finished(cut)["jobs"] == 2
    assert _left(store)[0] == {"queued"} and _tombstones(store) == {"done": "succeeded", "dropped": "cancelled"}
    later = T0 + timedelta(days=60)
    assert store.add_jobs([replace(done, submitted_at_utc=later), replace(dropped, submitted_at_utc=later), queued],
                          later) == (0, 3)
    assert _left(store)[0] == {"queued"}  # nothing runs again
    assert store.job_states(["done", "dropped", "queued", "new"]) == {"queued": JobState.QUEUED}
    assert store.job_states(["done", "dropped", "queued", "new"], pruned=True) == {
        "done": JobState.SUCCEEDED, "dropped": JobState.CANCELLED, "queued": JobState.QUEUED}

    with pytest.raises(DuplicateJob) as info:
        store.add_jobs([job("new"), replace(done, gpus_per_worker=4, deadline_utc=None), replace(queued, workers=2),
                        replace(dropped, team="b")], later)
    assert info.value.conflicts == (
        ("queued", "queued", (("workers", 1, 2),)),
        ("done", "succeeded, pruned", (("gpus_per_worker", 2, 4), ("deadline_utc", T0 + timedelta(days=1), None))),
        ("dropped", "cancelled, pruned", (("team", "a", "b"),)),
    )
    assert _left(store)[0] == {"queued"} and len(_tombstones(store)) == 2  # "new" did not land either
    assert store.prune_finished(cut)["jobs"] == 0 and len(_tombstones(store)) == 2


def test_a_pruned_job_reads_back_from_its_tombstone_and_cancels_as_finished(store):
    """``pruned_jobs`` gives each pruned job's spec, final state and when it
    finished; ``request_cancel`` leaves a pruned job alone as it does a finished
    one still stored (saying it was pruned), and an id never stored is still
    unknown, with nothing recorded."""
    done = replace(job("done", gpus=2, models=("A100-80GB",)), deadline_utc=T0 + timedelta(days=1))
    assert store.add_jobs([done, job("dropped"), job("queued")], T0) == (3, 0)
    store.put_job(replace(done, state=JobState.SUCCEEDED, node_ids=("n1",), interruptions=1), T0 + timedelta(hours=5))
    store.put_job(replace(job("dropped"), state=JobState.CANCELLED), T0 + timedelta(hours=1))
    assert store.prune_finished(T0 + timedelta(days=30))["jobs"] == 2

    pruned = store.pruned_jobs(["done", "dropped", "queued", "new"])
    assert set(pruned) == {"done", "dropped"}
    kept, finished = pruned["done"]
    assert (kept.state, kept.gpus_per_worker, kept.gpu_models, kept.deadline_utc, kept.node_ids, kept.interruptions) \
        == (JobState.SUCCEEDED, 2, ("A100-80GB",), T0 + timedelta(days=1), (), 0)
    assert finished == T0 + timedelta(hours=5)
    assert (pruned["dropped"][0].state, pruned["dropped"][1]) == (JobState.CANCELLED, T0 + timedelta(hours=1))
    assert store.pruned_jobs([]) == {}

    later = T0 + timedelta(days=31)
    with pytest.raises(StoreError, match="no such job: new; nothing was cancelled"):
        store.request_cancel(["queued", "done", "new"], later)
    assert store.job_states(["queued"]) == {"queued": JobState.QUEUED} and store.pending_cancellations() == ()
    assert store.request_cancel(["done", "queued", "dropped"], later) == {
        "done": "already succeeded (finished 2026-11-02T14:00:00Z, pruned)", "queued": "cancelled",
        "dropped": "already cancelled (finished 2026-11-02T10:00:00Z, pruned)"}
    assert _left(store)[0] == {"queued"} and _left(store)[3] == {"queued"}  # no cancel request for a pruned job


@pytest.mark.parametrize("spec", [
    pytest.param(job("x"), id="defaults"),
    pytest.param(replace(job("x", models=("L4",), spot=False), checkpointable=True, checkpoint_interval_minutes=0.5,
                         deadline_utc=T0, gpu_memory_gib_per_gpu=24.0), id="every-field-set"),
])
def test_a_tombstone_keeps_the_spec_and_no_runtime_field(spec):
    """``job_spec_dict`` drops the runtime fields by their keys in ``job_to_dict`` (each key must be its
    field's name) and the fields at their defaults (``job_from_dict`` reads them back); every other
    field is kept, and reads back as it was."""
    from fleetctl.codec import job_from_dict, job_spec_dict, job_to_dict

    ran = replace(spec, state=JobState.SUCCEEDED, node_ids=("n1",), started_at_utc=T0, interruptions=2,
                  avoid_offer_keys=("o",), priority_boost=1.0)
    kept = job_spec_dict(job_to_dict(ran))
    assert not set(kept) & JOB_RUNTIME_FIELDS and "id" not in kept
    assert {f.name for f in fields(Job) if f.name not in JOB_RUNTIME_FIELDS and getattr(spec, f.name) != f.default
            and f.name != "job_id"} == set(kept)
    back = job_from_dict({**kept, "id": "x", "submitted_at_utc": "2030-01-01T00:00:00Z"})
    assert [(f.name, getattr(back, f.name)) for f in fields(Job) if f.name not in JOB_RUNTIME_FIELDS] \
        == [(f.name, getattr(spec, f.name)) for f in fields(Job) if f.name not in JOB_RUNTIME_FIELDS]


def test_an_0009_store_upgrades_to_job_tombstones_and_back(store):
    """Migration 0010 adds the job_tombstones table as ``tables.job_tombstones``
    declares it; downgrading drops it (and with it the pruned ids); the jobs
    are untouched either way."""
    from fleetctl.store import tables

    dialect = store._engine.dialect

    def columns() -> dict[str, tuple[str, bool, bool]]:
        """Each column's SQL type, nullability and whether it is the primary key."""
        inspector = sa.inspect(store._engine)
        if "job_tombstones" not in inspector.get_table_names():
            return {}
        key = inspector.get_pk_constraint("job_tombstones")["constrained_columns"]
        return {c["name"]: (c["type"].compile(dialect=dialect), c["nullable"], c["name"] in key)
                for c in inspector.get_columns("job_tombstones")}

    declared = {c.name: (c.type.compile(dialect=dialect), c.nullable, c.primary_key)
                for c in tables.job_tombstones.columns}
    store.add_jobs([job("pruned", state=JobState.SUCCEEDED), job("queued")], T0)
    store.prune_finished(T0 + timedelta(days=1))
    assert columns() == declared and _tombstones(store) == {"pruned": "succeeded"}
    downgrade(store, "0009")
    assert store.schema_revision() == "0009" and columns() == {}
    upgraded = Store(store.url)
    try:
        assert upgraded.schema_revision() == "0011" and columns() == declared
        assert _tombstones(upgraded) == {}  # the guard went with the downgrade
        assert [j.job_id for j in upgraded.jobs()] == ["queued"]
        assert upgraded.add_jobs([job("pruned")], T0) == (1, 0)
    finally:
        upgraded.close()


def test_processes_opening_an_old_sqlite_store_together_upgrade_it_once(tmp_path):
    """Six processes open a store at an older schema at the same moment (cron
    beside a restarted daemon after an upgrade): every one opens it."""
    import subprocess
    import sys

    from alembic import command
    from alembic.config import Config

    from fleetctl.store import MIGRATIONS

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = sa.create_engine(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0005")
    engine.dispose()
    code = f"from fleetctl.store import Store; s = Store({url!r}); print(s.schema_revision()); s.close()"
    runs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(6)]
    outs = [p.communicate(timeout=120) for p in runs]
    assert [p.returncode for p in runs] == [0] * 6, [err for _, err in outs]
    assert {out.strip() for out, _ in outs} == {"0011"}


def _open_together(url: str, count: int) -> list[str]:
    """``count`` processes open the store at ``url`` at the same moment (each
    imports fleetctl first, says so, and opens the store when told to): each
    one's schema revision, or its error. Processes, not threads: alembic keeps
    its migration context in module globals, so threads of one process are not
    a fair test."""
    import subprocess
    import sys

    code = ("import sys\nfrom fleetctl.store import Store, StoreError\nprint('ready', flush=True)\n"
            "sys.stdin.readline()\ntry:\n    s = Store(sys.argv[1])\nexcept StoreError as exc:\n"
            "    print('error:', exc)\nelse:\n    print(s.schema_revision())\n    s.close()\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(count)]
    try:
        for p in procs:  # a barrier: every one has imported fleetctl and waits
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    assert [p.returncode for p in procs] == [0] * count, [err for _, err in outs]
    return [out.strip() for out, _ in outs]


@pytest.mark.parametrize("start_at", [None, "0001", "0005", "0006"])
def test_processes_opening_a_postgresql_store_together_create_or_upgrade_it_once(postgres_url, start_at):
    """Several processes open a PostgreSQL store at the same moment, fresh or
    at an older revision (cron beside a restarted daemon): PostgreSQL does not
    serialise the upgrade itself, so some failed with UniqueViolation on
    alembic_version or "relation ... already exists". Every one opens it."""
    from alembic import command
    from alembic.config import Config

    from fleetctl.store import MIGRATIONS

    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        if start_at:
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, start_at)
    engine.dispose()
    assert _open_together(postgres_url, 8) == ["0011"] * 8


def test_opening_a_current_sqlite_store_does_not_touch_its_migration_lock(tmp_path):
    """A store whose schema is current is only read: ``status`` and ``jobs
    list`` on a read-only mount failed with "Read-only file system:
    <db>.migrate.lock", the lock file being opened for writing on every open.
    Made read-only with chmod the test would prove nothing as root (root writes
    anyway), so it checks that the lock file is not created at all, which
    opening it with "a+" does. A store that needs an upgrade still takes it."""

    db = tmp_path / "state.db"
    lock = tmp_path / "state.db.migrate.lock"
    Store(f"sqlite:///{db}").close()
    lock.unlink()
    again = Store(f"sqlite:///{db}")
    try:
        assert again.schema_revision() == "0011"
        assert not lock.exists()
        downgrade(again, "0005")
    finally:
        again.close()
    Store(f"sqlite:///{db}").close()  # an upgrade: under the lock
    assert lock.exists()


def test_a_store_needing_an_upgrade_where_its_lock_cannot_be_made_is_a_store_error(tmp_path, monkeypatch):
    """An old store on a read-only mount: one clear StoreError, not an OSError
    traceback (the lock file made unopenable by a stand-in ``open``: chmod
    does not stop root)."""
    import errno

    import fleetctl.store as store_module
    from fleetctl.store import StoreError

    def read_only(path, *args, **kw):
        if str(path).endswith(".migrate.lock"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return open(path, *args, **kw)

    url = f"sqlite:///{tmp_path / 'state.db'}"
    Store(url).close()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0005'"))
    monkeypatch.setattr(store_module, "open", read_only, raising=False)
    with pytest.raises(StoreError, match="migration lock cannot be created: Read-only file system"):
        Store(url)
    with engine.begin() as conn:  # a newer fleetctl's store says so, lock or not
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(StoreError, match="written by a newer fleetctl"):
        Store(url)


def test_sigterm_during_a_store_write_lets_the_write_finish_then_stops(store):
    """SIGTERM raised as SystemExit inside the database driver (seen mid
    ``executemany`` on SQLite under load) left the SQLite connection holding its
    write lock while the command unwound, so releasing the controller lease
    failed with "database is locked" (exit 1, lease held for its TTL). A store
    write now finishes, and the signal stops the command right after it."""
    import os
    import signal

    from fleetctl.cli.common import stop_cleanly_on_sigterm
    from fleetctl.controller import lease
    from tests.builders import offer

    sent = []

    def signal_mid_write(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001, ARG001
        if executemany and not sent:
            sent.append(statement)
            os.kill(os.getpid(), signal.SIGTERM)  # a cron deadline, inside the statement's execution

    previous = signal.getsignal(signal.SIGTERM)
    stop_cleanly_on_sigterm()
    sa.event.listen(store._engine, "before_cursor_execute", signal_mid_write)
    try:
        with pytest.raises(SystemExit) as stopped:
            store.record_offers([offer("g1", gpus=1, price=1.0, zone=f"z{i}") for i in range(3)], T0)
        assert stopped.value.code == 128 + signal.SIGTERM
        assert sent  # the signal did land inside the write
    finally:
        sa.event.remove(store._engine, "before_cursor_execute", signal_mid_write)
        signal.signal(signal.SIGTERM, previous)
    assert len(store.offer_observations()) == 3  # the write finished: all of it, not part
    other = Store(store.url)
    try:  # and nothing holds the database: another process takes and gives back the lease at once
        assert other.acquire_lease(lease.NAME, "next-run", 60.0) is None
        other.release_lease(lease.NAME, "next-run")
    finally:
        other.close()


def test_a_signal_inside_a_transaction_waits_for_its_end(store):
    """Calls grouped by ``transaction()`` land together: a signal between
    them is delivered after the commit, not in the middle."""
    import os
    import signal

    from fleetctl.cli.common import stop_cleanly_on_sigterm

    previous = signal.getsignal(signal.SIGTERM)
    stop_cleanly_on_sigterm()
    reached = False
    try:
        with pytest.raises(SystemExit):
            with store.transaction():
                store.add_jobs([job("a")], T0)
                os.kill(os.getpid(), signal.SIGTERM)
                store.add_jobs([job("b")], T0)
                reached = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert reached
    assert sorted(j.job_id for j in store.jobs()) == ["a", "b"]


@pytest.mark.parametrize("url, shown", [
    ("http://[::1", "http://[::1"),
    ("postgresql+psycopg://fleet:s3cret@db:abc/fleet", "postgresql+psycopg://fleet:***@db:abc/fleet"),
])
def test_an_unparseable_url_is_a_store_error_that_hides_the_password(url, shown):
    # SQLAlchemy's URL parser raises ValueError for a port that is not a number: it was a traceback
    # (from safe_url, before Store could report it), and the password would have been printed.
    from fleetctl.store import StoreError, safe_url

    assert safe_url(url) == shown
    with pytest.raises(StoreError, match="not a valid database URL") as info:
        Store(url)
    assert shown in str(info.value) and "s3cret" not in str(info.value)


@pytest.mark.parametrize("url", ["postgresql://fleet@127.0.0.1:1/fleet",
                                 "postgresql+psycopg://fleet@127.0.0.1:1/fleet"])
def test_a_missing_postgresql_driver_names_the_extra_that_installs_it(url, monkeypatch):
    """Without psycopg (a plain `pip install fleetctl`), a PostgreSQL URL said only "No module named 'psycopg'"."""
    from fleetctl.store import StoreError

    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` now raises ModuleNotFoundError
    with pytest.raises(StoreError, match=r"database driver is not installed \(.*psycopg.*\); install it with: "
                                         r"pip install 'fleetctl\[postgres\]'$"):
        Store(url)


def test_an_0007_store_upgrades_to_the_nodes_state_updated_at_index_and_back(store):
    """Migration 0008 adds the (state, updated_at_utc) index on nodes that
    ``nodes_gone_since`` reads through; downgrading drops it; the nodes are
    untouched either way."""

    store.put_node(node("n1"), T0)
    store.put_node(node("n2", state=NodeState.GONE), T0)

    def indexes() -> set[str]:
        return {ix["name"] for ix in sa.inspect(store._engine).get_indexes("nodes")}

    assert "ix_nodes_state_updated_at_utc" in indexes()
    downgrade(store, "0007")
    assert store.schema_revision() == "0007"
    assert "ix_nodes_state_updated_at_utc" not in indexes()
    upgraded = Store(store.url)
    try:
        assert upgraded.schema_revision() == "0011"
        assert "ix_nodes_state_updated_at_utc" in indexes()
        assert [n.node_id for n in upgraded.nodes(include_gone=True)] == ["n1", "n2"]
    finally:
        upgraded.close()


def test_the_reads_a_tick_makes_skip_the_gone_nodes_and_old_notices_the_store_keeps(store):
    """The store keeps gone nodes and handled notices; the live nodes, the
    nodes gone since a time, and the notices of some nodes or since a time are
    read without them."""
    from fleetctl.model import InterruptionEvent, InterruptionKind

    store.put_node(node("live-1"), T0)
    store.put_node(node("draining-1", state=NodeState.DRAINING), T0)
    store.put_node(node("gone-old", state=NodeState.GONE), T0)
    store.put_node(node("gone-new", state=NodeState.GONE), T0 + timedelta(hours=2))
    assert [n.node_id for n in store.nodes()] == ["draining-1", "live-1"]
    assert [n.node_id for n in store.nodes_gone_since(T0 + timedelta(hours=1))] == ["gone-new"]
    assert [n.node_id for n in store.nodes_gone_since(T0)] == ["gone-new", "gone-old"]
    for i, (node_id, at) in enumerate([("gone-old", T0), ("live-1", T0 + timedelta(hours=1)),
                                       ("draining-1", T0 + timedelta(hours=2))]):
        store.add_interruption(InterruptionEvent(f"e{i}", "aws", node_id, InterruptionKind.RECLAIM_WARNING, at))
    store.mark_interruption_handled("e0", T0)
    everything = store.interruptions(unhandled_only=False)
    assert [e.event_id for e in everything] == ["e0", "e1", "e2"]
    assert [e.event_id for e in store.interruptions(unhandled_only=False, node_ids=["live-1", "draining-1"])] \
        == ["e1", "e2"]
    assert store.interruptions(unhandled_only=False, node_ids=[]) == ()
    assert [e.event_id for e in store.interruptions(unhandled_only=False, received_since=T0 + timedelta(hours=1))] \
        == ["e1", "e2"]


def _query_plans(s: Store, table: str, reads) -> list[str]:  # noqa: ANN001 - reads: a call
    """SQLite's plan of each read of ``table`` that ``reads()`` makes."""
    statements: list[tuple[str, object]] = []

    def _seen(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        if statement.lstrip().startswith(f"SELECT {table}."):
            statements.append((statement, parameters))

    sa.event.listen(s._engine, "before_cursor_execute", _seen)
    try:
        reads()
    finally:
        sa.event.remove(s._engine, "before_cursor_execute", _seen)
    with s._engine.connect() as conn:
        return [" ".join(r[-1] for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters))
                for statement, parameters in statements]


def test_on_sqlite_the_live_nodes_and_the_recently_gone_are_read_through_an_index(tmp_path):
    """The query plans, not a timing: neither read scans the nodes table (a
    scan reads every gone node a long-running store keeps)."""
    s = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        plans = _query_plans(s, "nodes", lambda: (s.nodes(), s.nodes_gone_since(T0)))
        assert len(plans) == 2
        for plan in plans:
            assert "SCAN nodes" not in plan and "USING INDEX" in plan, plan
    finally:
        s.close()


def test_an_0008_store_upgrades_to_the_launches_status_index_and_back(store):
    """Migration 0009 adds the index on launches.status that ``open_launches``
    (every tick) reads through; downgrading drops it; the launches are
    untouched either way."""
    assert store.begin_launch("k1", "aws/r/z/t/spot", 1, T0)
    store.finish_launch("k1", ["n1"], "done")
    assert store.begin_launch("k2", "aws/r/z/t/spot", 2, T0)

    def indexes() -> set[str]:
        return {ix["name"] for ix in sa.inspect(store._engine).get_indexes("launches")}

    assert "ix_launches_status" in indexes()
    downgrade(store, "0008")
    assert store.schema_revision() == "0008" and "ix_launches_status" not in indexes()
    upgraded = Store(store.url)
    try:
        assert upgraded.schema_revision() == "0011" and "ix_launches_status" in indexes()
        assert upgraded.open_launches() == (("k2", "aws/r/z/t/spot", 2, "pending"),)
    finally:
        upgraded.close()


def test_on_sqlite_the_open_launches_are_read_through_an_index(tmp_path):
    """The query plan, not a timing: the read of the open launch intents (every
    tick) does not scan the launches table, which keeps every launch ever made."""
    s = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        [plan] = _query_plans(s, "launches", s.open_launches)
        assert "SCAN launches" not in plan and "ix_launches_status" in plan, plan
    finally:
        s.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("read_only", [False, True], ids=["writes", "reads"])
def test_another_programs_database_is_refused_untouched(request, tmp_path, backend, read_only):
    """--state at another program's database with a `jobs` table: the upgrade wrote alembic_version into it,
    then failed with SQLAlchemy's "table jobs already exists" and the CREATE statement; a reading command
    said to run `jobs submit` on it. Now refused, naming the tables, with nothing written."""
    from fleetctl.store import StoreError

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'app.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        if backend == "postgresql":
            conn.execute(sa.text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        conn.execute(sa.text("CREATE TABLE jobs (x INTEGER)"))
        conn.execute(sa.text("CREATE TABLE invoices (y INTEGER)"))
    with pytest.raises(StoreError) as exc:
        Store(url, read_only=read_only)
    assert "it has tables of the names fleetctl uses (jobs) but no fleetctl schema version" in str(exc.value)
    assert "Nothing was written to it" in str(exc.value)
    assert sorted(sa.inspect(engine).get_table_names()) == ["invoices", "jobs"]
    engine.dispose()


def test_the_audit_log_window_is_exact_to_the_fraction_of_a_second(store):
    """Times are stored as ISO 8601 text, with a fraction only when there is
    one: "...:14.25Z" sorts before "...:14Z" as text. A bound at 14.1 s took
    the entry at 14 s as after it and the one at 14.25 s as before it."""
    whole, later = T0 + timedelta(seconds=14), T0 + timedelta(seconds=14.25)
    store.record("bind", whole, "at-14", reason="r")
    store.record("bind", later, "at-14.25", reason="r")
    bound = T0 + timedelta(seconds=14.1)
    assert [e["subject"] for e in store.audit_log(since=bound)[0]] == ["at-14.25"]
    assert [e["subject"] for e in store.audit_log(until=bound)[0]] == ["at-14"]
    assert [e["subject"] for e in store.events("bind", since=bound)] == ["at-14.25"]
    assert [e["subject"] for e in store.events_between(whole, bound, ["bind"])] == ["at-14"]
    assert [e["subject"] for e in store.audit_log(since=whole, until=later)[0]] == ["at-14"]


def test_the_audit_log_reads_by_kind_window_and_subject_newest_first(store):
    """``audit_log`` on both databases: the newest ``limit`` of the window,
    oldest first; ``about`` matches a subject or a JSON string in the
    details exactly (SQLite's LIKE ignores case, and ``_``/``%`` are its
    wildcards: the decoded entries are checked again)."""
    for i in range(7):
        store.record("bind", T0 + timedelta(minutes=i), f"job-{i}", nodes=[f"n-{i % 2}"], reason="r")
    store.record("bind", T0 + timedelta(minutes=8), "other", nodes=["N-1", "nx1", "n-1x"], reason="r")
    store.record("terminate", T0 + timedelta(minutes=9), "n-1", reason="idle_timeout")
    entries, more = store.audit_log(limit=3)
    assert [e["subject"] for e in entries] == ["job-6", "other", "n-1"] and more
    entries, more = store.audit_log(about="n-1", limit=100)
    assert [e["subject"] for e in entries] == ["job-1", "job-3", "job-5", "n-1"] and not more
    entries, more = store.audit_log(about="n-1", limit=2)  # "other" matched the LIKE only, and is read past
    assert [e["subject"] for e in entries] == ["job-5", "n-1"] and more
    entries, _ = store.audit_log(about="n_1", limit=100)
    assert entries == ()
    entries, _ = store.audit_log(kinds=["bind"], since=T0 + timedelta(minutes=2), until=T0 + timedelta(minutes=4))
    assert [e["subject"] for e in entries] == ["job-2", "job-3"]


def test_a_postgresql_store_goes_on_after_the_server_restarts(postgres):
    """A PostgreSQL restart (maintenance, a failover) closes every connection the store's pool holds.
    The first use after it must open a new one, not fail on the dead one (a daemon's first pass after
    a restart failed with AdminShutdown): the pool checks a connection before use."""
    store = Store(postgres("restarted"))
    try:
        store.add_jobs([job("before")], T0)
        assert [j.job_id for j in store.jobs()] == ["before"]  # the pool now holds an open connection
        postgres.restart()
        assert [j.job_id for j in store.jobs()] == ["before"]
        store.add_jobs([job("after")], T0)
        assert sorted(j.job_id for j in store.jobs()) == ["after", "before"]
    finally:
        store.close()


def test_times_on_a_whole_second_compare_right_at_sub_second_bounds(store):
    """Stored times are text, compared and ordered as text. A whole second was
    written without a fraction ("...:00Z"), which sorts after "...:00.5Z": a
    node gone at T counted as gone since T + 0.5 s, a notice received at T as
    received since then, and an observation at T fell inside [T + 0.5 s, ...).
    Since migration 0011 every time is stored to the microsecond."""
    from fleetctl.model import InterruptionEvent, InterruptionKind
    from tests.builders import offer

    half = timedelta(milliseconds=500)
    store.put_node(node("gone-at-t", state=NodeState.GONE), T0)
    store.put_node(node("gone-later", state=NodeState.GONE), T0 + timedelta(seconds=1))
    assert [n.node_id for n in store.nodes_gone_since(T0 + half)] == ["gone-later"]
    assert [n.node_id for n in store.nodes_gone_since(T0)] == ["gone-at-t", "gone-later"]
    assert [n.node_id for n, gone in store.nodes_live_since(T0 + half)] == ["gone-later"]
    store.add_interruption(InterruptionEvent("at-t", "aws", "gone-at-t", InterruptionKind.RECLAIM_WARNING, T0))
    store.add_interruption(InterruptionEvent("at-t-half", "aws", "gone-later", InterruptionKind.RECLAIM_WARNING,
                                             T0 + half))
    assert [e.event_id for e in store.interruptions(unhandled_only=False, received_since=T0 + half)] \
        == ["at-t-half"]
    assert [e.event_id for e in store.interruptions(unhandled_only=False)] == ["at-t", "at-t-half"]  # in time order
    store.record_offers([offer("a8", price=8.0)], T0)
    store.record_offers([], T0 + half)
    assert [r["observed_at_utc"] for r in store.offer_observations(since=T0 + half)] == [T0 + half]
    assert [r["observed_at_utc"] for r in store.offer_observations(until=T0 + half - timedelta(microseconds=1))] \
        == [T0]
    # the store hands times out as before: no zero fraction
    assert store.events("offers_observed")[0]["at_utc"] == T0.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_an_0010_store_gets_its_whole_second_times_to_the_microsecond_and_back(store):
    """Migration 0011 rewrites every time stored the short way ("...:00Z") to
    the microsecond, in each of the twelve time columns, and downgrading writes
    the whole seconds the short way again; a time with a fraction is untouched."""
    import importlib.util

    from fleetctl.store import MIGRATIONS, tables

    spec = importlib.util.spec_from_file_location("m0011", MIGRATIONS / "versions" / "0011_fixed_width_times.py")
    m0011 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m0011)
    declared = {(t.name, c.name) for t in tables.metadata.sorted_tables for c in t.columns if c.name.endswith("_utc")}
    assert set(m0011.TIME_COLUMNS) == declared and len(declared) == 12

    def raw(table: str, column: str) -> list[str]:
        with store._engine.connect() as conn:
            return sorted(conn.execute(sa.text(f"SELECT {column} FROM {table}")).scalars())

    frac = T0 + timedelta(microseconds=250)
    store.add_jobs([job("a"), job("b", submitted=frac)], T0)
    store.put_node(node("n", state=NodeState.GONE), T0)
    store.record_offers([], frac)
    whole, long = T0.strftime("%Y-%m-%dT%H:%M:%SZ"), T0.strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    with_fraction = frac.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert raw("jobs", "submitted_at_utc") == [long, with_fraction] and raw("nodes", "updated_at_utc") == [long]
    downgrade(store, "0010")
    assert store.schema_revision() == "0010"
    # sorted as text: the short form after the fraction of the same second (the misorder 0011 ends)
    assert raw("jobs", "submitted_at_utc") == [with_fraction, whole] and raw("nodes", "updated_at_utc") == [whole]
    assert raw("jobs", "updated_at_utc") == [whole, whole] and raw("events", "at_utc") == [with_fraction]
    upgraded = Store(store.url)
    try:
        assert upgraded.schema_revision() == "0011"
        assert raw("jobs", "submitted_at_utc") == [long, with_fraction] and raw("nodes", "updated_at_utc") == [long]
        assert raw("jobs", "updated_at_utc") == [long, long] and raw("events", "at_utc") == [with_fraction]
        assert [n.node_id for n in upgraded.nodes_gone_since(T0 + timedelta(milliseconds=500))] == []
        assert [j.submitted_at_utc for j in upgraded.jobs()] == [T0, frac]
    finally:
        upgraded.close()
