"""Nothing lost on a crash: one busy tick, killed at each of its side effects
in turn, then recovered by a restarted controller.

The tick at ``T1`` handles a reclaim notice (checkpoint, requeue), carries out
a cancellation, starts and finishes jobs, launches nodes (two of them for a
gang), binds queued jobs and terminates the drained node. Every side effect
of that tick is a crash point: each SQL statement on the store's engine and
on the cloud's, and each call of the provider's ``launch`` and
``terminate``. Two wirings: ``sandbox``, as ``reconcile --once`` runs (the
sandbox provider keeps its nodes in the store, so the store's engine is the
cloud's too, and what the sandbox did rolls back with the controller's
transaction); ``cloud``, as ``--cloud aws`` runs (``RecordedNodes`` over a
cloud keeping its own state, here the sandbox on a file of its own, so what
the cloud did stays done whatever the controller's transaction becomes).

For k = 1, 2, ... the same initial files are copied, the tick runs until its
k-th point and dies there with ``Died`` (a ``BaseException``, as a process
killed with SIGKILL: no ``except Exception`` of the product may carry on
after it, and every later point raises it again: a dead process writes
nothing more), and a restarted controller (fresh store, provider and runtime
on the same files, taking over the dead process's lease as a restart on the
same host does) runs ticks until the world is quiet. The sweep ends at the
first k the tick completes without reaching: all of its points are swept.

What a crash may change, and what it may not (``_check_recovered``): every
job is still there and ends as the uncrashed run's does (cancelled or
succeeded); no job is ever bound to more nodes than it has workers, to a
gone or draining node, or to a node beyond its GPUs; no launch intent buys
more nodes than it asked for, and the run as a whole buys no more nodes than
the uncrashed one (a recovered plan may differ, but it is made from the same
queue and a fleet holding whatever was bought before the crash, so it has no
reason to buy more); every node the cloud sold is known to the store and
ends terminated (no paid capacity left behind) and is in the audit log's
launches if the store knows the launch that bought it; each job started once
per run and finished once; the reclaim is handled and counted once, and the
reclaimed job's work from its start until its node was taken (the notice's
deadline, or its handling if sooner) is either kept or counted lost; nothing
is left pending (notices, cancellations, launch intents).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import sqlalchemy as sa

from fleetctl.controller.lease import controller_lease, holder_id
from fleetctl.controller.reconcile import tick
from fleetctl.controller.recorded import RecordedNodes
from fleetctl.controller.runtime import SimRuntime
from fleetctl.model import Job, JobState, Market, NodeState
from fleetctl.store import Store, tables
from providers.base import LaunchRequest, LaunchResult
from providers.sim import SimProvider
from tests.builders import T0, job, offer, policy

OFFERS = (offer("a8", price=8.0, zone="z1"), offer("b8", price=9.0, zone="z2"), offer("c8", price=9.5, zone="z3"),
          offer("a8", price=20.0, zone="z1", market=Market.ON_DEMAND))
POLICY = policy()
LAUNCH_DELAY_SECONDS = 60.0
T1 = T0 + timedelta(minutes=30)  # the tick that dies
STEP = timedelta(minutes=60)  # between its later ticks
MAX_TICKS = 10  # the uncrashed run is quiet after 3


class Died(BaseException):
    """The controller process died here. A BaseException, as ``KeyboardInterrupt``
    is: handlers of ``Exception`` (which may clean up and carry on) do not run."""


@dataclass
class Fuse:
    """Counts the side effects of one controller process and kills it at the
    ``at``-th: that point and every one after it raise ``Died`` (a dead process
    does nothing more, including in ``finally`` blocks on the way out)."""

    at: int | None
    points: list[str] = field(default_factory=list)
    after_death: list[str] = field(default_factory=list)  # what cleanup code tried after the death

    @property
    def dead(self) -> bool:
        return self.at is not None and len(self.points) >= self.at

    def point(self, what: str) -> None:
        if self.dead:
            self.after_death.append(what)
            raise Died(f"already dead: {what}")
        self.points.append(what)
        if self.dead:
            raise Died(f"point {self.at}: {what}")


class DyingProvider:
    """The provider the controller calls, its launches and terminations crash points of ``fuse``."""

    def __init__(self, inner: Any, fuse: Fuse) -> None:
        self._inner, self._fuse = inner, fuse

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def launch(self, request: LaunchRequest, now: datetime) -> LaunchResult:
        self._fuse.point(f"provider.launch {request.idempotency_key} x{request.count}")
        return self._inner.launch(request, now)

    def terminate(self, node_id: str, now: datetime) -> None:
        self._fuse.point(f"provider.terminate {node_id}")
        self._inner.terminate(node_id, now)


class SandboxCloud(SimProvider):
    """The sandbox standing in for AWS behind ``RecordedNodes``, which merges
    the nodes of the clouds it wraps only (by name: the sandbox's is "sim")."""

    name = "aws"


@dataclass(frozen=True)
class Files:
    """Where one run keeps its state: the store, and (wiring ``cloud``) the cloud's own."""

    store: Path
    cloud: Path

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.store}"

    @property
    def cloud_url(self) -> str:
        return f"sqlite:///{self.cloud}"

    def copied_to(self, directory: Path) -> Files:
        """Copies of both files (each closed cleanly: its WAL checkpointed into the main file)."""
        directory.mkdir()
        copy = Files(directory / self.store.name, directory / self.cloud.name)
        for source, target in ((self.store, copy.store), (self.cloud, copy.cloud)):
            if source.exists():
                shutil.copyfile(source, target)
        return copy

    def discard(self) -> None:
        shutil.rmtree(self.store.parent, ignore_errors=True)


@dataclass(frozen=True)
class PgState:
    """The store in a PostgreSQL database (wiring ``sandbox`` only: the
    sandbox's nodes are in the store). ``admin_url``: a database of the same
    server, to create and drop the copies from."""

    admin_url: str
    name: str

    @property
    def store_url(self) -> str:
        return sa.engine.make_url(self.admin_url).set(database=self.name).render_as_string(hide_password=False)

    cloud_url = store_url

    def _admin(self, sql: str) -> None:
        engine = sa.create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(sql)
        finally:
            engine.dispose()

    def copied_to(self, directory: Path) -> PgState:
        """A copy of the database (``CREATE DATABASE ... TEMPLATE``: nobody is connected to it between runs)."""
        copy = PgState(self.admin_url, f"{self.name}_{directory.name}")
        self._admin(f'CREATE DATABASE "{copy.name}" TEMPLATE "{self.name}"')
        return copy

    def discard(self) -> None:
        self._admin(f'DROP DATABASE "{self.name}"')


@contextmanager
def controller(files: Files | PgState, wiring: str, fuse: Fuse | None = None) -> Iterator[tuple[Store, Any, Any, SimRuntime]]:
    """One controller process: its store, the provider it calls, the sandbox
    underneath (to deliver notices) and its runtime. ``sandbox``: as
    ``reconcile --once`` wires it (the sandbox keeps its nodes in the store);
    ``cloud``: as ``--cloud aws`` does (``RecordedNodes`` over a cloud keeping
    its own state, here the sandbox on a file of its own, so that what the
    cloud did is not undone by a rollback of the controller's transaction)."""
    store = Store(files.store_url)
    cloud_store = Store(files.cloud_url) if wiring == "cloud" else store
    if fuse is not None:
        def statement(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
            fuse.point(" ".join(sql.split())[:120])

        for engine in {id(s._engine): s._engine for s in (store, cloud_store)}.values():  # noqa: SLF001
            sa.event.listen(engine, "before_cursor_execute", statement)
    sandbox = (SimProvider if wiring == "sandbox" else SandboxCloud)(
        cloud_store, seed=1, launch_delay_seconds=LAUNCH_DELAY_SECONDS, offers=OFFERS)
    provider: Any = sandbox if wiring == "sandbox" else RecordedNodes(sandbox, store)
    try:
        yield store, (DyingProvider(provider, fuse) if fuse is not None else provider), sandbox, SimRuntime(30)
    finally:
        store.close()
        cloud_store.close()


def _checkpointable(j: Job) -> Job:
    return replace(j, checkpointable=True, checkpoint_interval_minutes=30.0)


def _run_tick(store: Store, provider: Any, runtime: SimRuntime, now: datetime, holder: str) -> None:
    """One tick as ``reconcile --once`` runs it: under the controller lease."""
    with controller_lease(store, holder):
        tick(store=store, provider=provider, runtime=runtime, policy=POLICY, now=now)


JOBS = ("reclaimed", "gang", "cancelled", "finishing", "late", "gang2", "single", "single2")


def _initial_world(files: Files | PgState, wiring: str) -> None:
    """A busy world just before ``T1``: four jobs running (one a gang of 2), one
    bound to a launching node, three queued (one a gang of 2); a reclaim notice
    for the node of ``reclaimed``, a cancel request for ``cancelled``, and
    ``finishing`` done by ``T1``."""
    me = holder_id()
    with controller(files, wiring) as (store, provider, sandbox, runtime):
        store.add_jobs([_checkpointable(job("reclaimed", gpus=8, duration_hours=1.0, spot=True)),
                        _checkpointable(job("gang", workers=2, gpus=8, duration_hours=1.25, spot=True)),
                        job("cancelled", gpus=8, duration_hours=3.0, spot=True),
                        job("finishing", gpus=8, duration_hours=0.45, spot=True)], T0)
        _run_tick(store, provider, runtime, T0, me)
        _run_tick(store, provider, runtime, T0 + timedelta(minutes=2), me)
        late = T1 - timedelta(minutes=3)
        store.add_jobs([job("late", gpus=8, duration_hours=0.75, spot=True, submitted=late)], late)
        _run_tick(store, provider, runtime, late, me)
        store.add_jobs([_checkpointable(job("gang2", workers=2, gpus=8, duration_hours=0.75, spot=True, submitted=T1)),
                        job("single", gpus=4, duration_hours=0.5, spot=True, submitted=T1),
                        job("single2", gpus=8, duration_hours=0.5, spot=True, submitted=T1)], T1)
        jobs = {j.job_id: j for j in store.jobs()}
        sandbox.reclaim(jobs["reclaimed"].node_ids[0], T1 - timedelta(seconds=10))
        store.request_cancel(["cancelled"], T1)
        states = {j.job_id: j.state for j in store.jobs()}
    assert states == {"reclaimed": JobState.RUNNING, "gang": JobState.RUNNING, "cancelled": JobState.RUNNING,
                      "finishing": JobState.RUNNING, "late": JobState.BOUND, "gang2": JobState.QUEUED,
                      "single": JobState.QUEUED, "single2": JobState.QUEUED}


@pytest.fixture(scope="module")
def dead_holder() -> str:
    """The lease holder id of a controller process that has exited (as the
    crashed one has): a restarted controller on this host takes its lease over."""
    out = subprocess.run([sys.executable, "-c", "from fleetctl.controller.lease import holder_id; print(holder_id())"],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """Where the runs keep their files: in memory (``/dev/shm``) where there is
    one. Every tick commits a dozen transactions and the sweep runs hundreds
    of ticks; on a disk their fsyncs were most of its time. A simulated death
    does not depend on them (it happens in this process, and the database
    rolls back what it did not commit in memory as on a disk)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="fleetctl-crash-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class Outcome:
    fuse: Fuse
    completed: bool  # the tick at T1 ran to its end


def _run(initial: Files | PgState, workdir: Path, wiring: str, restart: datetime, dead_holder: str,
         at: int | None) -> tuple[Outcome, Files | PgState]:
    """On copies of ``initial``: the tick at ``T1`` dying at point ``at``
    (None: never), then a restarted controller from ``restart`` until the
    world is quiet, checking the bindings after each of its ticks."""
    files = initial.copied_to(workdir)
    fuse = Fuse(at)
    completed = False
    try:
        with controller(files, wiring, fuse) as (store, provider, _sandbox, runtime):
            _run_tick(store, provider, runtime, T1, dead_holder)
            completed = True
    except Died:
        pass  # the process is gone: what it committed is in the files, and nothing else
    me = holder_id()
    now = restart
    with controller(files, wiring) as (store, provider, _sandbox, runtime):
        for _ in range(MAX_TICKS):
            _run_tick(store, provider, runtime, now, me)
            _check_bindings(store, f"after the tick at T1 + {now - T1}")
            if all(not j.state.active for j in store.jobs()) and not provider.nodes(now):
                break
            now += STEP
        else:
            raise AssertionError(f"not quiet after {MAX_TICKS} ticks of the restarted controller: "
                                 f"{[(j.job_id, j.state.value) for j in store.jobs() if j.state.active]}")
    return Outcome(fuse, completed), files


def _check_bindings(store: Store, when: str) -> None:
    """No job on more nodes than it has workers, on a node that is gone or
    draining, or on a node beyond its GPUs."""
    nodes = {n.node_id: n for n in store.nodes(include_gone=True)}
    used: dict[str, int] = {}
    for j in store.jobs():
        if j.state in (JobState.BOUND, JobState.RUNNING):
            assert len(j.node_ids) == j.workers, (when, j)
            for nid in j.node_ids:
                assert nid in nodes and nodes[nid].state in (NodeState.LAUNCHING, NodeState.READY), \
                    (when, j.job_id, nodes.get(nid))
                used[nid] = used.get(nid, 0) + j.gpus_per_worker
    for nid, gpus in used.items():
        assert gpus <= nodes[nid].offer.instance_type.gpu_count, (when, nid, gpus)


def _rows(url: str, table: sa.Table) -> list[dict[str, Any]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.select(table))]
    finally:
        engine.dispose()


@dataclass(frozen=True)
class Summary:
    """What a run ended with, for comparison with the uncrashed run."""

    states: dict[str, JobState]
    nodes_bought: int


def _check_recovered(files: Files | PgState, wiring: str) -> Summary:
    """The world after recovery (see the module's docstring)."""
    with controller(files, wiring) as (store, _provider, _sandbox, _runtime):
        jobs = {j.job_id: j for j in store.jobs()}
        known = {n.node_id for n in store.nodes(include_gone=True)}
        events = store.events()
        unhandled = store.interruptions(unhandled_only=True)
        cancels = store.pending_cancellations()
    launches = {r["idempotency_key"]: r for r in _rows(files.store_url, tables.launches)}
    keyed = {r["node_id"]: r["idempotency_key"] for r in _rows(files.store_url, tables.nodes)}
    sold = _rows(files.store_url if wiring == "sandbox" else files.cloud_url, tables.nodes)
    assert sorted(jobs) == sorted(JOBS)
    # quiet: every node the cloud sold terminated and known to the store; nothing pending
    assert [r["node_id"] for r in sold if r["state"] != NodeState.GONE.value] == []
    assert sorted(r["node_id"] for r in sold if r["node_id"] not in known) == []
    assert unhandled == () and cancels == ()
    # each launch intent settled: answered, or abandoned with nothing the store knows bought under its key
    # (the cloud wiring: what the cloud sold as the controller died inside the call is known by its listing,
    # without the key)
    sold_under: dict[str, list[str]] = {}
    for r in sold:
        sold_under.setdefault(r["idempotency_key"], []).append(r["node_id"])
    assert {k: r["status"] for k, r in launches.items()
            if not (r["status"] == "done" and k in sold_under or r["status"] == "abandoned"
                    and all(keyed[n] is None for n in sold_under.get(k, ())))} == {}
    # no intent bought more than it asked for, and no node was bought without one
    assert {k: v for k, v in sold_under.items() if k not in launches or len(v) > launches[k]["count"]} == {}
    # every node the store knows bought under an intent is in the audit log's launches, once
    logged = sorted(n for e in events if e["kind"] == "launch" for n in e["payload"]["nodes"])
    assert logged == sorted(n for n, key in keyed.items() if key is not None)
    # each job: started once per run, finished (or cancelled) once
    for j in jobs.values():
        kinds = [e["kind"] for e in events if e["subject"] == j.job_id]
        runs = 1 + kinds.count("requeue")
        assert kinds.count("start") == (runs if j.job_id != "cancelled" else 1), (j.job_id, kinds)
        assert kinds.count("complete") + kinds.count("cancel") == 1, (j.job_id, kinds)
    # the reclaim: handled once, counted once; the reclaimed job's work from its start until the node was
    # taken (the notice's deadline; its handling, if sooner) kept or counted lost
    reclaimed = jobs["reclaimed"]
    assert reclaimed.interruptions == 1, reclaimed
    [notice] = [e for e in events if e["kind"] == "interruption"]
    [requeue] = [e for e in events if e["kind"] == "requeue" and e["subject"] == "reclaimed"]
    [start, *_] = [e for e in events if e["kind"] == "start" and e["subject"] == "reclaimed"]
    taken = min(datetime.fromisoformat(requeue["at_utc"]), datetime.fromisoformat(notice["payload"]["deadline_utc"]))
    ran = (taken - datetime.fromisoformat(start["at_utc"])).total_seconds()
    kept, lost = requeue["payload"]["kept_hours"], requeue["payload"]["lost_gpu_hours"] / reclaimed.gpus
    assert kept + lost == pytest.approx(ran / 3600), requeue
    return Summary({j.job_id: j.state for j in jobs.values()}, len(sold))


#: The points that change something: a death at any other (a read) ends the same as one at the next of these
#: (the same transactions committed, the same cloud calls made), or at the lease's release after the last one.
_EFFECTS = ("INSERT ", "UPDATE ", "DELETE ", "provider.")


def _sweep(initial: Files | PgState, workdir: Path, wiring: str, restart: datetime, dead_holder: str, *,
           effects_only: bool = False) -> None:
    """The uncrashed run, then one run dying at each of its tick's points (see
    the module's docstring); ``effects_only``: at each of those in ``_EFFECTS``."""
    reference, files = _run(initial, workdir / "uncrashed", wiring, restart, dead_holder, None)
    assert reference.completed
    expected = _check_recovered(files, wiring)
    files.discard()
    assert expected.states == {**{j: JobState.SUCCEEDED for j in JOBS}, "cancelled": JobState.CANCELLED}
    points = reference.fuse.points
    assert len(points) > 50 and any(p.startswith("provider.launch") for p in points) \
        and any(p.startswith("provider.terminate") for p in points)
    failures = []
    for k in range(1, len(points) + 2):  # the last one is past every point: the tick completes
        if effects_only and k <= len(points) and not points[k - 1].startswith(_EFFECTS):
            continue
        try:
            outcome, files = _run(initial, workdir / f"k{k}", wiring, restart, dead_holder, k)
            # the same points as the uncrashed tick, in the same order: the sweep is deterministic
            assert outcome.completed == (k > len(points)) and outcome.fuse.points == points[:k]
            if outcome.completed:
                continue
            # After the death, only the lease's release was tried (controller_lease's finally), and refused:
            # no other cleanup code writes on the way out of a dead process.
            assert all(p.startswith("UPDATE leases") for p in outcome.fuse.after_death), outcome.fuse.after_death
            got = _check_recovered(files, wiring)
            assert got.states == expected.states, got.states
            assert got.nodes_bought <= expected.nodes_bought, (got.nodes_bought, expected.nodes_bought)
        except AssertionError as exc:
            failures.append(f"died at point {k} ({points[k - 1] if k <= len(points) else 'none'}): {exc}")
        else:
            files.discard()
    assert failures == [], "\n".join(failures)


@pytest.mark.parametrize(("wiring", "restart_after"), [
    pytest.param("sandbox", timedelta(0), id="sandbox-restarted-at-once"),
    pytest.param("cloud", timedelta(minutes=5), id="cloud-restarted-after-the-deadline"),
])
def test_a_tick_killed_at_any_side_effect_loses_nothing(workdir: Path, dead_holder: str, wiring: str,
                                                        restart_after: timedelta) -> None:
    """``restart_after``: at once (the same clock: the same plan is made again,
    and its launches are retried under the same idempotency keys), or after
    the reclaim notice's deadline (the cloud took the node meanwhile, and the
    plans after the crash are others). Each wiring failed with the other
    restart too, before the fixes the sweep led to (launch intents left
    pending; a launch's nodes recorded apart); two of the four pairs keep the
    sweep's time within a minute on two cores."""
    initial = Files(workdir / "initial" / "state.db", workdir / "initial" / "cloud.db")
    initial.store.parent.mkdir()
    _initial_world(initial, wiring)
    _sweep(initial, workdir, wiring, T1 + restart_after, dead_holder)


def test_on_postgresql_a_tick_killed_at_any_side_effect_loses_nothing(
        workdir: Path, dead_holder: str, postgres: Callable[[str], str]) -> None:
    """The same sweep with the store in PostgreSQL (the sandbox wiring, restarted
    after the deadline): a transaction the dead process did not commit is rolled
    back by the server when its connection goes, as SQLite drops it. At the
    points with an effect only (a copy of a database takes longer than a copy
    of a file): a death at a read ends as one at the next write does."""
    url = postgres("initial")
    admin = sa.engine.make_url(url).set(database="postgres").render_as_string(hide_password=False)
    initial = PgState(admin, "initial")
    _initial_world(initial, "sandbox")
    _sweep(initial, workdir, "sandbox", T1 + timedelta(minutes=5), dead_holder, effects_only=True)
