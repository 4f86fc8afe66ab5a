"""The daemon: apscheduler loop, /metrics read with prometheus-client's own
parser, clean stop on SIGTERM."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetctl.controller.loop import Daemon, LoopContext
from fleetctl.metrics import FleetMetrics, serve
from fleetctl.model import JobState
from tests.builders import job, offer, policy
from tests.processes import daemon_run, served_ports

REPO = Path(__file__).resolve().parents[2]


def scrape(port: int) -> dict[str, list]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_daemon_reconciles_and_serves_metrics(world_factory):
    w = world_factory(offers=(offer("a8", price=8.0), offer("b1", gpus=1, price=1.0, vcpus=8, memory_gib=64)))
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc)
    w.store.add_jobs([job("big", gpus=8, submitted=now, duration_hours=5), job("small", gpus=1, submitted=now,
                                                                             duration_hours=5)], now)
    metrics = FleetMetrics()
    server, thread = serve(metrics, "127.0.0.1:0")
    port = server.server_address[1]
    loop = Daemon(LoopContext(w.store, w.provider, w.runtime, policy(), metrics), interval_seconds=0.2,
                  interruption_seconds=0.1, price_seconds=60)
    loop.start()
    try:
        assert wait_for(lambda: all(j.state is JobState.RUNNING for j in w.store.jobs()))
        # the gauges are set at the end of a tick: wait for one that saw both jobs running
        assert wait_for(lambda: [s.value for s in scrape(port)["fleetctl_gpu_allocation_ratio"]] == [1.0])
        families = scrape(port)
    finally:
        loop.stop()
        server.shutdown()
    assert not loop.scheduler.running
    for name in ("fleetctl_nodes", "fleetctl_gpus", "fleetctl_gpu_allocation_ratio", "fleetctl_queued_jobs",
                 "fleetctl_job_wait_seconds", "fleetctl_usd_per_hour", "fleetctl_interruptions",
                 "fleetctl_checkpoints", "fleetctl_migrations", "fleetctl_on_demand_fallbacks",
                 "fleetctl_tick_duration_seconds", "fleetctl_tick_errors"):
        assert name in families, name
    gpus = {tuple(sorted(s.labels.items())): s.value for s in families["fleetctl_gpus"]}
    assert gpus[(("market", "spot"), ("provider", "aws"), ("state", "ready"))] == 9
    assert [s.value for s in families["fleetctl_gpu_allocation_ratio"]] == [1.0]
    usd = {s.labels["market"]: s.value for s in families["fleetctl_usd_per_hour"] if s.labels["provider"] == "aws"}
    assert usd["spot"] == 9.0
    waits = [s for s in families["fleetctl_job_wait_seconds"] if s.name.endswith("_count")]
    assert waits[0].value == 2
    ticks = [s for s in families["fleetctl_tick_duration_seconds"] if s.name.endswith("_count")]
    assert ticks[0].value >= 2
    assert [s.value for s in families["fleetctl_tick_errors"] if s.name.endswith("_total")] == [0.0]


def test_tick_errors_are_counted_and_the_loop_goes_on(world_factory):
    w = world_factory(offers=(offer("a8", price=8.0),))

    class Broken:
        def __getattr__(self, name):
            return getattr(w.provider, name)

        def offers(self, now):
            raise RuntimeError("cloud API down")

    metrics = FleetMetrics()
    loop = Daemon(LoopContext(w.store, Broken(), w.runtime, policy(), metrics), interval_seconds=0.1,
                  interruption_seconds=10, price_seconds=60)
    loop.start()
    try:
        assert wait_for(lambda: metrics.tick_errors._value.get() >= 3)
    finally:
        loop.stop()


def _sandbox_with_jobs(tmp_path) -> dict[str, str]:
    """A working directory with the example policy and queue, the queue submitted; the environment to run in."""
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    env["FLEETCTL_SIM_LAUNCH_DELAY_SECONDS"] = "0"
    subprocess.run([sys.executable, "-m", "fleetctl", "jobs", "submit", "examples/jobs.yaml"], cwd=tmp_path, env=env,
                   check=True, capture_output=True)
    return env


def test_cli_daemon_stops_cleanly_on_sigterm(tmp_path):
    env = _sandbox_with_jobs(tmp_path)
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "daemon", "--interval", "0.5",
                             "--metrics-addr", "127.0.0.1:0"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _first, port, _ = served_ports(proc)

        def running() -> bool:
            try:
                fams = scrape(port)
            except OSError:
                return False
            return any(s.value > 0 for s in fams.get("fleetctl_gpus", []))

        assert wait_for(running, timeout=30), proc.stderr.read() if proc.poll() is not None else "no gpus yet"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stopped after" in out
    assert "executed successfully" not in err and "Running job" not in err  # apscheduler's INFO line per run
    assert "Context impl" not in err and "non-transactional DDL" not in err  # alembic's INFO lines per store opened
    listed = subprocess.run([sys.executable, "-m", "fleetctl", "jobs", "list", "--format", "json"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, check=True)
    assert '"running"' in listed.stdout or '"bound"' in listed.stdout


def test_cli_daemon_on_port_0_prints_the_port_it_serves_metrics_on(tmp_path):
    """``--metrics-addr 127.0.0.1:0`` binds a free port: the daemon printed
    "metrics on http://127.0.0.1:0/metrics". Now the URL it prints answers."""
    import queue
    import re
    import threading

    env = _sandbox_with_jobs(tmp_path)
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "daemon", "--interval", "30",
                             "--metrics-addr", "127.0.0.1:0"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()
    try:
        first = lines.get(timeout=60)
        shown = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", first)
        assert shown is not None and shown[1] != "0", first
        assert "fleetctl_gpus" in scrape(int(shown[1]))
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        reader.join(timeout=30)
    assert proc.returncode == 0, proc.stderr.read()


def test_cli_daemon_closes_its_metrics_socket_on_stop(tmp_path):
    """Under PYTHONWARNINGS=error (or -X dev) a socket left open printed "Exception ignored in:
    <socket.socket ... laddr=...>" with a ResourceWarning traceback as the daemon ended."""
    env = {**_sandbox_with_jobs(tmp_path), "PYTHONWARNINGS": "error"}
    with daemon_run(tmp_path, "--interval", "30", env=env) as run:
        code = run.stop()
    assert code == 0, run.err
    assert "ResourceWarning" not in run.err and "Exception ignored" not in run.err, run.err


def test_reconcile_once_twice_changes_nothing_the_second_time(tmp_path):
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    env["FLEETCTL_SIM_LAUNCH_DELAY_SECONDS"] = "0"

    def fleetctl(*args):
        return subprocess.run([sys.executable, "-m", "fleetctl", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True)

    fleetctl("jobs", "submit", "examples/jobs.yaml")
    assert "tick: 0 actions" not in fleetctl("reconcile", "--once").stdout
    fleetctl("reconcile", "--once")  # starts the jobs on the now-ready nodes
    before = fleetctl("jobs", "list", "--format", "json").stdout
    again = fleetctl("reconcile", "--once")
    assert again.returncode == 0 and "tick: 0 actions, 0 jobs started, 0 completed" in again.stdout
    assert fleetctl("jobs", "list", "--format", "json").stdout == before
    assert fleetctl("reconcile").returncode == 2


def test_the_interruptions_pass_reuses_the_last_reconcile_forecast(world_factory):
    """It runs every few seconds under the loop's lock: rebuilding the forecast there took seconds on a large
    recorded market. It uses the last reconcile pass's (at most one interval old)."""
    w = world_factory(offers=(offer("a8", price=8.0),))
    calls = []

    class Counting:
        def interruption(self, store, now):  # noqa: ANN001, ANN201
            calls.append(now)
            return ()

        def demand(self, store, now):  # noqa: ANN001, ANN201
            return ()

    loop = Daemon(LoopContext(w.store, w.provider, w.runtime, policy(), FleetMetrics(), Counting()),
                  interval_seconds=60, interruption_seconds=5, price_seconds=3600)
    loop.interruptions()  # before any reconcile pass: builds one
    loop.reconcile()
    for _ in range(3):
        loop.interruptions()
    assert len(calls) == 2 and loop.ticks == 1


def test_the_daemons_tick_log_says_what_reconcile_once_says(world_factory, caplog):
    """The daemon logged "1 actions, 0 started, 0 completed, 0 requeued": no notices handled and no
    cancels carried out, which `reconcile --once` reports for the same tick."""
    from datetime import datetime, timezone

    w = world_factory(offers=(offer("a8", price=8.0),))
    now = datetime.now(timezone.utc)
    w.store.add_jobs([job("keep", gpus=8, submitted=now), job("drop", gpus=8, submitted=now)], now)
    loop = Daemon(LoopContext(w.store, w.provider, w.runtime, policy(), FleetMetrics()),
                  interval_seconds=60, interruption_seconds=5, price_seconds=3600)
    with caplog.at_level("INFO", logger="fleetctl.daemon"):
        loop.reconcile()  # one launch of two nodes, two binds
        w.store.request_cancel(["drop"], now, "test")
        loop.reconcile()
    ticks = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tick ")]
    assert ticks[0] == "tick 1: 3 actions, 0 jobs started, 0 completed, 0 requeued after 0 notices", ticks
    assert ticks[1].startswith("tick 2: ") and ticks[1].endswith(", 1 cancelled"), ticks


def test_the_daemon_stands_by_while_another_process_holds_the_lease(world_factory):
    """A cron reconcile, an apply or a second daemon on the same store holds
    the controller lease: this daemon's passes do nothing until it is free."""
    from datetime import datetime, timezone

    from fleetctl.store import Store

    w = world_factory(offers=(offer("a8", price=8.0),))
    now = datetime.now(timezone.utc)
    w.store.add_jobs([job("j", gpus=8, submitted=now, duration_hours=5)], now)
    other = Store(w.store.url)
    assert other.acquire_lease("controller", "cron on host-b", 60.0) is None
    metrics = FleetMetrics()
    loop = Daemon(LoopContext(w.store, w.provider, w.runtime, policy(), metrics), interval_seconds=0.1,
                  interruption_seconds=0.1, price_seconds=60)
    loop.start()
    try:
        assert wait_for(lambda: loop.standing_by == "cron on host-b")
        time.sleep(0.5)
        assert w.store.nodes() == () and metrics.lease_held._value.get() == 0  # nothing bought meanwhile
        assert metrics.tick_errors._value.get() == 0
        other.release_lease("controller", "cron on host-b")
        assert wait_for(lambda: w.store.jobs()[0].state is not JobState.QUEUED)
        assert metrics.lease_held._value.get() == 1
    finally:
        loop.stop()
        other.close()


def test_overlapping_cron_runs_act_one_at_a_time(tmp_path):
    """Three `reconcile --once` at once on one store: each job is started
    once and the fleet bought once (they took turns on the lease)."""
    import sqlite3

    env = _sandbox_with_jobs(tmp_path)
    runs = [subprocess.Popen([sys.executable, "-m", "fleetctl", "reconcile", "--once"], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in runs]
    assert all(p.returncode == 0 for p in runs), outs
    db = sqlite3.connect(tmp_path / ".fleetctl" / "state.db")
    try:
        starts = db.execute("SELECT subject, COUNT(*) FROM events WHERE kind = 'start' GROUP BY subject").fetchall()
        launched = db.execute("SELECT COUNT(*) FROM nodes").fetchone()[0]
    finally:
        db.close()
    assert len(starts) == 12 and {n for _, n in starts} == {1}
    assert launched == 13  # the README's plan: 13 to launch


def test_reconcile_gives_up_with_exit_1_while_another_process_acts(tmp_path):
    from fleetctl.store import Store

    shutil.copytree(REPO / "policies", tmp_path / "policies")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    store = Store(f"sqlite:///{tmp_path / '.fleetctl' / 'state.db'}")
    try:
        assert store.acquire_lease("controller", "daemon on host-a pid 7", 60.0) is None
        run = subprocess.run([sys.executable, "-m", "fleetctl", "reconcile", "--once", "--lock-timeout", "0.5"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    finally:
        store.close()
    assert run.returncode == 1
    assert "another fleetctl process is acting on this state store (daemon on host-a pid 7" in run.stderr
    assert "This run changed nothing" in run.stderr


def test_the_daemon_prunes_the_per_pass_history_daily(world_factory, caplog):
    """... and logs what it deleted in the words `fleetctl prune` prints (it named the tables: "offer_observations")."""
    import logging
    from datetime import datetime, timedelta, timezone

    w = world_factory(offers=(offer("a8", price=8.0),))
    now = datetime.now(timezone.utc)
    w.store.record("demand", now - timedelta(days=120), "", gpus={})
    w.store.record("demand", now - timedelta(days=10), "", gpus={})
    w.store.record("launch", now - timedelta(days=120), "x", nodes=[])
    loop = Daemon(LoopContext(w.store, w.provider, w.runtime, policy(), FleetMetrics()), interval_seconds=60,
                  interruption_seconds=60, price_seconds=60, retain_days=90)
    assert loop.scheduler.get_job("prune") is not None
    with caplog.at_level(logging.INFO, logger="fleetctl"):
        loop.prune()
    assert ("pruned history older than 90 days: 1 per-pass audit event, 0 spot-market observations, 0 handled "
            "reclaim notices") in caplog.messages, caplog.messages
    kinds = sorted((e["kind"], e["at_utc"][:10]) for e in w.store.events() if e["kind"] in ("demand", "launch"))
    assert kinds == [("demand", (now - timedelta(days=10)).strftime("%Y-%m-%d")),
                     ("launch", (now - timedelta(days=120)).strftime("%Y-%m-%d"))]
    assert Daemon(LoopContext(w.store, w.provider, w.runtime, policy(), FleetMetrics()),
                  retain_days=0).scheduler.get_job("prune") is None


def test_the_daemon_prunes_the_finished_history_daily_under_the_lease_when_told_to(world_factory):
    from datetime import datetime, timedelta, timezone

    w = world_factory(offers=(offer("a8", price=8.0),))
    now = datetime.now(timezone.utc)
    w.store.add_jobs([job("old", state=JobState.SUCCEEDED)], now - timedelta(days=40))
    w.store.add_jobs([job("recent", state=JobState.SUCCEEDED)], now - timedelta(days=10))
    for kind, days in (("launch", 40), ("launch", 10), ("demand", 40)):
        w.store.record(kind, now - timedelta(days=days), "x")
    loop = Daemon(LoopContext(w.store, w.provider, w.runtime, policy(), FleetMetrics()), interval_seconds=60,
                  interruption_seconds=60, price_seconds=60, retain_days=0, retain_finished_days=30)
    assert loop.scheduler.get_job("prune") is not None
    assert w.store.acquire_lease("controller", "daemon on host-a pid 7", 60.0) is None
    loop.prune()  # another process acts on the store: nothing is deleted
    assert {j.job_id for j in w.store.jobs()} == {"old", "recent"}
    w.store.release_lease("controller", "daemon on host-a pid 7")
    before = datetime.now(timezone.utc)
    loop.prune()
    after = datetime.now(timezone.utc)
    assert {j.job_id for j in w.store.jobs()} == {"recent"}
    # the per-pass "demand" row stays (--retain-days 0: keep it), and so does the launch after the cut; the
    # prune records its cut (dated at it), where `fleetctl report` reads the history is whole from
    events = sorted(w.store.events(), key=lambda e: e["kind"])
    assert [(e["kind"], e["at_utc"][:10]) for e in events[:2]] == [
        ("demand", (now - timedelta(days=40)).strftime("%Y-%m-%d")),
        ("launch", (now - timedelta(days=10)).strftime("%Y-%m-%d"))]
    [cut] = events[2:]
    cut_at = datetime.fromisoformat(cut["at_utc"].replace("Z", "+00:00"))
    assert cut["kind"] == "prune_finished"  # dated by the daemon's clock: a day's date may turn meanwhile
    assert before - timedelta(days=30, seconds=1) <= cut_at <= after - timedelta(days=30), cut["at_utc"]


def test_cli_daemon_passes_retain_finished_days_to_its_daily_prune(tmp_path):
    from datetime import datetime, timedelta, timezone

    from fleetctl.store import Store

    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    store.add_jobs([job("old", state=JobState.SUCCEEDED)], datetime.now(timezone.utc) - timedelta(days=40))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "daemon", "--interval", "30", "--retain-days", "0",
                             "--retain-finished-days", "30", "--metrics-addr", "127.0.0.1:0", "--state", url,
                             "--policy", str(REPO / "policies" / "example.yaml")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pruned = wait_for(lambda: not store.jobs(), timeout=60)  # the first prune runs at start
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        store.close()
    assert pruned, err
    assert proc.returncode == 0, err
    assert "pruned finished history older than 30 days: 1 finished job, 0 handled cancel requests" in err


def test_cli_prune(tmp_path):
    from datetime import datetime, timedelta, timezone

    from fleetctl.store import Store

    store = Store(f"sqlite:///{tmp_path / '.fleetctl' / 'state.db'}")
    store.record("offers_observed", datetime.now(timezone.utc) - timedelta(days=40), "", offers=0)
    store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    run = subprocess.run([sys.executable, "-m", "fleetctl", "prune", "--older-than-days", "30", "--policy",
                          str(REPO / "policies" / "example.yaml")], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "deleted 1 per-pass audit event, 0 spot-market observations, 0 handled reclaim notices" in run.stdout


def test_cli_prune_deletes_the_finished_history_when_asked_and_says_what_per_table(tmp_path):
    from datetime import datetime, timedelta, timezone

    from fleetctl.store import Store

    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    old = datetime.now(timezone.utc) - timedelta(days=40)
    store.add_jobs([job("old", state=JobState.SUCCEEDED), job("queued")], old)
    store.record("launch", old, "x")
    store.record("launch", old + timedelta(seconds=1), "x")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}

    def prune(*more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fleetctl", "prune", "--older-than-days", "30", "--state", url,
                               "--policy", str(REPO / "policies" / "example.yaml"), *more], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    try:
        plain = prune()
        assert plain.returncode == 0, plain.stderr
        assert "finished" not in plain.stdout and len(store.jobs()) == 2  # opt-in: kept without the option
        assert store.acquire_lease("controller", "daemon on host-a pid 7", 60.0) is None
        held = prune("--finished-older-than-days", "30", "--lock-timeout", "0.5")
        assert held.returncode == 1 and "Nothing was deleted" in held.stderr, held.stderr
        assert len(store.jobs()) == 2
        store.release_lease("controller", "daemon on host-a pid 7")
        run = prune("--finished-older-than-days", "30")
        assert run.returncode == 0, run.stderr
        assert ("deleted the finished history older than 30 days: 1 finished job, 0 handled cancel requests, "
                "0 gone nodes, 0 finished launches, 1 decision event") in run.stdout
        assert [j.job_id for j in store.jobs()] == ["queued"]
        refused = prune("--finished-older-than-days", "0.5")
        assert refused.returncode == 2 and "--finished-older-than-days" in refused.stderr
    finally:
        store.close()


def _holder_of(pid: int, *, start: int | None = None, namespace: str | None = None) -> str:
    """A holder string as process ``pid`` of this host wrote it (``holder_id``'s form)."""
    from fleetctl.controller import lease

    me = lease._identity()
    assert me is not None, "the lease tests need Linux's /proc"
    return (f"{socket.gethostname()} pid {pid} in {namespace or me[0]} start {start or lease._start_ticks(pid) or 1} "
            f"boot {me[1]} (deadbeef)")


def test_a_held_lease_names_its_holder_readably_and_keeps_the_stored_id(tmp_path):
    """The error showed the stored id ("vm pid 1234 in pid:[4026531836] start 2254701 boot 25171b0c-... (b94a)"):
    accurate, but hard to read. It shows the process, its host and when it started; the id is kept."""
    import re
    from datetime import datetime, timezone

    from fleetctl.controller.lease import controller_lease
    from fleetctl.store import LeaseHeld, Store

    live = _holder_of(os.getppid())  # this test's parent process: alive, of this host and boot
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        assert store.acquire_lease("controller", live, 600.0) is None
        with pytest.raises(LeaseHeld) as raised, controller_lease(store, "me"):
            pass
        assert store.acquire_lease("controller", live, 600.0) is None  # still the same id's lease
    finally:
        store.close()
    assert raised.value.holder == live
    shown = re.search(r"acting on this state store \(pid (\d+) on host (\S+), started "
                      r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC; its 'controller' lease runs", str(raised.value))
    assert shown is not None, str(raised.value)
    assert shown.groups()[:2] == (str(os.getppid()), socket.gethostname())
    started = datetime.strptime(shown[3], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    assert started <= datetime.now(timezone.utc)


@pytest.mark.parametrize("holder, shown", [
    ("vm pid 12 in pid:[4026531836] start 100 boot 0000-1111 (abcdef01)", "pid 12 on host vm"),  # another boot
    ("vm pid 12 in an unknown pid namespace (abcdef01)", "pid 12 on host vm"),
    ("vm pid 12 (abcdef01)", "pid 12 on host vm"),  # written by a fleetctl before namespaces
    ("daemon on host-a pid 7", "daemon on host-a pid 7"),  # not fleetctl's form: as it is
], ids=["another-boot", "unknown-namespace", "before-namespaces", "other-text"])
def test_a_holder_of_another_boot_or_form_is_shown_without_a_start_time(holder, shown):
    from fleetctl.controller.lease import describe_holder

    assert describe_holder(holder) == shown


def test_a_lease_held_by_a_dead_process_of_this_host_is_taken_at_once(tmp_path):
    """A cron run killed with SIGKILL held the lease for its whole expiry (10
    minutes: a restarted daemon skipped its reclaim passes meanwhile). A holder
    of this host and PID namespace whose process is gone, or whose PID is now
    another process's, is taken over; a live one is not."""
    from fleetctl.controller.lease import take
    from fleetctl.store import Store

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        assert store.acquire_lease("controller", _holder_of(dead.pid, start=12345), 600.0) is None
        assert take(store, "me") is None
        store.release_lease("controller", "me")
        live = _holder_of(os.getppid())  # this test's parent process: alive
        assert store.acquire_lease("controller", live, 600.0) is None
        assert take(store, "me")[0] == live
        store.release_lease("controller", live)
        from fleetctl.controller.lease import _start_ticks
        reused = _holder_of(os.getppid(), start=_start_ticks(os.getppid()) + 1)  # its PID, another process's now
        assert store.acquire_lease("controller", reused, 600.0) is None
        assert take(store, "me") is None
        store.release_lease("controller", "me")
        other_host = _holder_of(dead.pid, start=12345).replace(socket.gethostname(), "other-host", 1)
        assert store.acquire_lease("controller", other_host, 600.0) is None
        assert take(store, "me")[0] == other_host  # another host's pid says nothing here
    finally:
        store.close()


def test_a_holder_that_does_not_say_its_pid_namespace_waits_for_its_expiry(tmp_path):
    """A holder of this hostname whose PID is free here may be alive in another
    PID namespace: it is not taken over unless it ran in this one. Neither in
    the form fleetctl wrote before namespaces were written (``HOST pid N
    (tag)``: it was taken over at once), nor from another namespace."""
    from fleetctl.controller.lease import take
    from fleetctl.store import Store

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        for holder in (f"{socket.gethostname()} pid {dead.pid} (deadbeef)",
                       f"{socket.gethostname()} pid {dead.pid} in an unknown pid namespace (deadbeef)",
                       "other namespace"):
            if holder == "other namespace":
                holder = _holder_of(dead.pid, start=12345, namespace="pid:[1]")
            assert store.acquire_lease("controller", holder, 600.0) is None
            got = take(store, "me")
            assert got is not None and got[0] == holder and got[1] > 500
            store.release_lease("controller", holder)
    finally:
        store.close()


def _unshare_pid() -> list[str]:
    """A command prefix running its command in a new PID namespace (with its
    own /proc), as a container with host networking does; skips without one."""
    if not shutil.which("unshare"):
        pytest.skip("unshare(1) is not installed")
    for prefix in (["unshare", "--pid", "--fork", "--mount-proc"],
                   ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0:
                return prefix
        except subprocess.TimeoutExpired:
            continue
    pytest.skip("no PID namespace can be made here (unshare --pid refused)")


def test_a_live_holder_in_another_pid_namespace_of_this_host_is_not_taken_over(tmp_path):
    """A cron pod with host networking shares the daemon's hostname, not its
    PIDs: it saw the daemon's PID free in its own namespace and took the lease
    over mid-pass. Now the process in the other namespace waits."""
    from fleetctl.controller.lease import controller_lease, holder_id
    from fleetctl.store import Store

    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    me = holder_id()
    code = ("import sys; from fleetctl.controller.lease import holder_id, take; from fleetctl.store import Store\n"
            "s = Store(sys.argv[1]); got = take(s, holder_id()); s.close()\n"
            "print('held by', got[0]) if got else print('taken')\n")
    try:
        with controller_lease(store, me):
            run = subprocess.run([*_unshare_pid(), sys.executable, "-c", code, url], cwd=REPO,
                                 capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, run.stderr
            assert run.stdout.strip() == f"held by {me}"
    finally:
        store.close()


def test_reconcile_releases_the_lease_on_sigterm(tmp_path):
    """A cron deadline or `timeout` sends SIGTERM mid-pass: the lease is released
    and the next run does not wait for it (it waited 10 minutes)."""
    import sqlite3

    env = _sandbox_with_jobs(tmp_path)
    env["FLEETCTL_SIM_LAUNCH_DELAY_SECONDS"] = "0"
    # A pass made slow on purpose: each sandbox launch sleeps, so SIGTERM lands inside the pass.
    slow = ("import sys, time; import providers.sim as s; real = s.SimProvider.launch\n"
            "def launch(self, request, now):\n    time.sleep(2)\n    return real(self, request, now)\n"
            "s.SimProvider.launch = launch\nfrom fleetctl.cli.main import app\n"
            "sys.argv = ['fleetctl', 'reconcile', '--once']\napp()\n")
    proc = subprocess.Popen([sys.executable, "-c", slow], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    db = tmp_path / ".fleetctl" / "state.db"

    def holding() -> bool:
        try:
            with sqlite3.connect(db) as conn:
                return bool(conn.execute("SELECT holder FROM leases WHERE holder != ''").fetchall())
        except sqlite3.OperationalError:
            return False

    assert wait_for(holding, timeout=60)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert not holding()
    again = subprocess.run([sys.executable, "-m", "fleetctl", "reconcile", "--once", "--lock-timeout", "0"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr


def test_a_long_pass_keeps_its_lease_by_heartbeat(tmp_path, monkeypatch):
    """The lease expires soon after its holder dies (2 minutes) yet a pass
    longer than that keeps it: a heartbeat thread renews it while held."""
    from fleetctl.controller import lease
    from fleetctl.store import Store

    monkeypatch.setattr(lease, "HEARTBEAT_TTL_SECONDS", 0.4)  # renewed every 0.1 s
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store, other = Store(url), Store(url)
    try:
        with lease.controller_lease(store, "long pass"):
            for _ in range(10):  # 1 s: more than twice the TTL
                time.sleep(0.1)
                held = other.acquire_lease("controller", "other", 0.4)
                assert held is not None and held[0] == "long pass"
        assert other.acquire_lease("controller", "other", 0.4) is None  # released at the end
    finally:
        store.close()
        other.close()


@pytest.mark.parametrize("failure", ["database is locked", "store error"])
def test_a_failed_lease_renewal_is_logged_and_tried_again_on_the_next_beat(tmp_path, monkeypatch, caplog, failure):
    """One transient error (SQLite "database is locked" past its busy timeout,
    a PostgreSQL reconnect) stopped the heartbeat for the rest of the pass: the
    raw OperationalError was not caught at all, and a StoreError ended the loop;
    the lease then expired under a live pass. Now it is a warning, and the next
    beat renews the lease."""
    import sqlite3
    import threading

    import sqlalchemy as sa

    from fleetctl.controller import lease
    from fleetctl.store import Store, StoreError

    renewals: list[object] = []
    renewed = threading.Event()

    class FlakyStore(Store):
        def acquire_lease(self, name, holder, ttl_seconds):
            if not renewals:
                renewals.append("failed")
                if failure == "store error":
                    raise StoreError("the state store is damaged")
                raise sa.exc.OperationalError("UPDATE leases", {}, sqlite3.OperationalError("database is locked"))
            renewals.append(super().acquire_lease(name, holder, ttl_seconds))
            renewed.set()
            return renewals[-1]

    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)  # takes the lease; the heartbeat opens its own FlakyStore
    monkeypatch.setattr(lease, "Store", FlakyStore)
    monkeypatch.setattr(lease, "HEARTBEAT_TTL_SECONDS", 2.0)  # a beat every 0.5 s
    try:
        with caplog.at_level("WARNING", logger="fleetctl.lease"):
            with lease.controller_lease(store, "long pass"):
                assert renewed.wait(timeout=60), "no renewal after the failed one"
        assert renewals[:2] == ["failed", None]  # None: renewed, still this pass's
        assert "renewing the controller lease failed" in caplog.text
    finally:
        store.close()


def test_a_lease_lost_to_another_holder_is_not_renewed_again(tmp_path, monkeypatch, caplog):
    """A renewal that finds another holder (the lease expired while the
    database was unreachable, and another process took it) is an error and
    the heartbeat stops: it does not take the lease back from under it."""
    import threading

    from fleetctl.controller import lease
    from fleetctl.store import Store

    calls: list[object] = []
    lost = threading.Event()

    class Renewals(Store):
        def acquire_lease(self, name, holder, ttl_seconds):
            calls.append(super().acquire_lease(name, holder, ttl_seconds))
            if calls[-1] is not None:
                lost.set()
            return calls[-1]

    url = f"sqlite:///{tmp_path / 'state.db'}"
    store, other = Store(url), Store(url)
    monkeypatch.setattr(lease, "Store", Renewals)
    monkeypatch.setattr(lease, "HEARTBEAT_TTL_SECONDS", 2.0)
    try:
        with caplog.at_level("ERROR", logger="fleetctl.lease"):
            held = lease.hold(store, "long pass")
            assert isinstance(held, lease.Held)
            other.release_lease(lease.NAME, "long pass")  # as if it had expired
            assert other.acquire_lease(lease.NAME, "next run", 60.0) is None
            assert lost.wait(timeout=60)
            held._heartbeat._thread.join(timeout=60)
            assert not held._heartbeat._thread.is_alive()  # stopped after the loss
            held.release()
        assert [c[0] for c in calls if c is not None] == ["next run"]
        assert "lost to next run" in caplog.text
        assert other.acquire_lease(lease.NAME, "next run", 60.0) is None  # still the other's
    finally:
        store.close()
        other.close()


@pytest.mark.parametrize("to", ["process", "another-thread"])
def test_a_signal_just_after_the_lease_is_taken_still_releases_it(tmp_path, monkeypatch, to):
    """SIGTERM landing between the commit that takes the lease and the block
    that releases it (the lease held, not yet recorded as held) used to leave it
    held for its TTL. Here the signal is sent from inside the take itself.

    The kernel hands a process-directed signal to any thread that has not
    masked it (CI's test worker had such a thread, and the lease was left held
    there), and Python then runs the handler in the main thread: masking the
    signal in the main thread did not defer it. "another-thread" sends it to
    such a thread directly, and waits until its C handler has run (the wakeup
    fd), so the test does not depend on which thread the kernel picks."""
    import os
    import socket
    import threading

    from fleetctl.cli.common import stop_cleanly_on_sigterm
    from fleetctl.controller import lease
    from fleetctl.store import Store

    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    real_take = lease.take
    done = threading.Event()
    other = threading.Thread(target=done.wait, daemon=True)
    woken, wakeup = socket.socketpair()
    wakeup.setblocking(False)

    def take_then_signal(*args, **kwargs):  # noqa: ANN002, ANN003
        got = real_take(*args, **kwargs)
        if to == "process":
            os.kill(os.getpid(), signal.SIGTERM)  # as a cron deadline would, at the worst moment
        else:
            signal.pthread_kill(other.ident, signal.SIGTERM)
            assert woken.recv(1) == bytes([signal.SIGTERM])  # its C handler ran, in the other thread
        return got

    monkeypatch.setattr(lease, "take", take_then_signal)
    previous = signal.getsignal(signal.SIGTERM)
    previous_wakeup = signal.set_wakeup_fd(wakeup.fileno(), warn_on_full_buffer=False)
    stop_cleanly_on_sigterm()
    other.start()
    entered = False
    try:
        with pytest.raises(SystemExit) as stopped:
            with lease.controller_lease(store, "cron-run"):
                entered = True
        assert stopped.value.code == 128 + signal.SIGTERM
        assert not entered  # the pass itself never ran
        assert store.acquire_lease(lease.NAME, "next-run", 60.0) is None  # free at once, not after 2 minutes
    finally:
        done.set()
        signal.set_wakeup_fd(previous_wakeup)
        signal.signal(signal.SIGTERM, previous)
        woken.close()
        wakeup.close()
        store.close()


@pytest.mark.parametrize("option, value, words", [
    ("--retrain-hours", "0.001", "0 (never) or at least 1 hour"),  # was accepted: a refit every second
    ("--retain-days", "0.5", "0 (keep everything) or at least 1 day"),
    ("--retain-finished-days", "0.5", "0 (keep it all) or at least 1 day"),
    # was accepted and ignored: with no --forecast-dir there is nothing to refit
    ("--retrain-hours", "6", "--retrain-hours 6 refits the models of --forecast-dir, which is not given"),
    # a pass ends once an --interval (30 s) at best: the probe would fail between any two
    ("--health-max-inactivity-seconds", "30", "--health-max-inactivity-seconds 30 is not more than --interval 30"),
    ("--health-max-failing-seconds", "12", "--health-max-failing-seconds 12 is not more than --interval 30"),
])
def test_daemon_refuses_intervals_it_would_run_back_to_back(tmp_path, option, value, words):
    # A subprocess with a timeout: a daemon that accepted the value would run until killed.
    shown = subprocess.run([sys.executable, "-m", "fleetctl", "daemon", option, value, "--metrics-addr", "127.0.0.1:0",
                            "--policy", str(Path(__file__).parents[2] / "policies" / "example.yaml"),
                            "--state", f"sqlite:///{tmp_path / 's.db'}"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 2 and words in " ".join(shown.stderr.split()), shown.stderr
    assert not (tmp_path / "s.db").exists()  # refused before the store is opened


def _fleet_gauges(metrics: FleetMetrics) -> dict[str, dict]:
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    return {f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples}
            for f in text_string_to_metric_families(text)
            if f.name in ("fleetctl_nodes", "fleetctl_gpu_allocation_ratio", "fleetctl_queued_jobs",
                          "fleetctl_usd_per_hour", "fleetctl_tick_errors")}


class _RefusingLaunches:
    """The sandbox provider, with a cloud that refuses every launch (IAM denies RunInstances)."""

    def __init__(self, inner):  # noqa: ANN001
        self._inner = inner

    def __getattr__(self, name):  # noqa: ANN001, ANN204
        return getattr(self._inner, name)

    def launch(self, request, now):  # noqa: ANN001, ANN201
        from providers.base import ProviderError

        raise ProviderError("UnauthorizedOperation: not allowed to RunInstances")


def test_the_gauges_follow_the_store_after_a_notice_pass_and_after_a_failed_tick(world_factory):
    """The gauges were refreshed only at the end of a tick that succeeded: once
    launches failed and the notice pass reclaimed the node, /metrics kept the
    node ready, 8 USD/h, allocation 1.0 and no queued job, tick after tick."""
    from datetime import timedelta

    from fleetctl.model import Market
    from tests.builders import T0

    w = world_factory(offers=(offer("a8", price=8.0), offer("o8", price=20.0, market=Market.ON_DEMAND)))
    w.store.add_jobs([job("j1", gpus=8, submitted=T0, duration_hours=5)], T0)
    clock = [T0]
    metrics = FleetMetrics()
    ctx = LoopContext(w.store, w.provider, w.runtime, policy(), metrics)
    loop = Daemon(ctx, interval_seconds=1000, interruption_seconds=1000, clock=lambda: clock[0])
    for minute in range(3):
        clock[0] = T0 + timedelta(minutes=minute)
        loop.reconcile()
    spot_ready = (("market", "spot"), ("provider", "aws"), ("state", "ready"))
    queued = (("priority", "batch"), ("team", "a"))
    running = _fleet_gauges(metrics)
    assert running["fleetctl_nodes"] == {spot_ready: 1.0} and running["fleetctl_gpu_allocation_ratio"] == {(): 1.0}
    assert running["fleetctl_queued_jobs"] == {}

    ctx.provider = _RefusingLaunches(w.provider)
    (node,) = w.store.nodes()
    w.provider.reclaim(node.node_id, clock[0], lead_seconds=0)
    clock[0] += timedelta(seconds=5)
    loop.interruptions()  # cordons the node, requeues the job
    drained = _fleet_gauges(metrics)
    assert drained["fleetctl_nodes"] == {(("market", "spot"), ("provider", "aws"), ("state", "draining")): 1.0}
    assert drained["fleetctl_gpu_allocation_ratio"] == {(): 0.0} and drained["fleetctl_queued_jobs"] == {queued: 1.0}

    for _ in range(2):
        clock[0] += timedelta(minutes=1)
        loop.reconcile()  # the node is gone; the on-demand launch that would replace it is refused
    failed = _fleet_gauges(metrics)
    assert failed["fleetctl_tick_errors"] == {(): 2.0}
    assert w.store.nodes() == () and [j.state for j in w.store.jobs()] == [JobState.QUEUED]
    assert failed["fleetctl_nodes"] == {} and failed["fleetctl_usd_per_hour"] == {}
    assert failed["fleetctl_gpu_allocation_ratio"] == {(): 0.0} and failed["fleetctl_queued_jobs"] == {queued: 1.0}


def test_a_gauge_refresh_that_fails_after_a_failed_tick_is_logged_and_counted_not_raised(world_factory, caplog):
    """The refresh after a failed tick must not hide the tick's error: both are
    logged, each with its own traceback, and both counted."""
    import logging

    from fleetctl.controller import ApplyError
    from tests.builders import T0

    class RefreshBroken(FleetMetrics):
        def observe_state(self, nodes, jobs):  # noqa: ANN001, ANN201
            raise RuntimeError("refresh broken")

    w = world_factory(offers=(offer("a8", price=8.0),))
    w.store.add_jobs([job("j1", gpus=8, submitted=T0)], T0)
    metrics = RefreshBroken()
    loop = Daemon(LoopContext(w.store, _RefusingLaunches(w.provider), w.runtime, policy(), metrics),
                  interval_seconds=1000, interruption_seconds=1000, clock=lambda: T0)
    with caplog.at_level(logging.ERROR, logger="fleetctl.daemon"):
        loop.reconcile()
    assert [(r.getMessage().split(" at ")[0], type(r.exc_info[1])) for r in caplog.records] == [
        ("reconcile tick failed", ApplyError),
        ("refreshing the gauges after a failed reconcile tick failed", RuntimeError)]
    assert "RunInstances" in str(caplog.records[0].exc_info[1])
    assert _fleet_gauges(metrics)["fleetctl_tick_errors"] == {(): 2.0}


class _CloudDown:
    """The sandbox provider, with a cloud API that answers nothing (every tick fails observing the
    offers, raising ``error``)."""

    def __init__(self, inner, error: Exception | None = None):  # noqa: ANN001
        self._inner = inner
        self._error = error or RuntimeError("cloud API down")

    def __getattr__(self, name):  # noqa: ANN001, ANN204
        return getattr(self._inner, name)

    def offers(self, now):  # noqa: ANN001, ANN201
        raise self._error


def test_a_pass_failing_the_same_way_again_logs_one_line_not_the_traceback(world_factory, caplog):
    """A state store or cloud API down for minutes fails every pass alike: the log shows the
    traceback at the first failure and when the error changes, then one line per failure with
    the count; the first success says how many failed. Every failure is still counted."""
    import logging
    from datetime import timedelta

    from tests.builders import T0

    w = world_factory(offers=(offer("a8", price=8.0),))
    clock = [T0]
    metrics = FleetMetrics()
    ctx = LoopContext(w.store, _CloudDown(w.provider), w.runtime, policy(), metrics)
    loop = Daemon(ctx, interval_seconds=60, interruption_seconds=1000, clock=lambda: clock[0])

    def passes(n: int) -> list[logging.LogRecord]:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="fleetctl.daemon"):
            for _ in range(n):
                loop.reconcile()
                clock[0] += timedelta(seconds=60)
        return [r for r in caplog.records if r.name == "fleetctl.daemon"]

    first, *again = passes(3)
    assert first.exc_info and "cloud API down" in str(first.exc_info[1])
    assert [r.exc_info for r in again] == [None, None]
    assert [r.getMessage() for r in again] == [
        f"reconcile tick failed at {(T0 + timedelta(seconds=60 * i)).isoformat()}: the same error again ({i + 1} "
        f"failures in a row since {T0.isoformat()}; the traceback is logged at the first): RuntimeError: cloud API "
        "down" for i in (1, 2)]

    # another error: its traceback, once; the streak goes on
    ctx.provider = _CloudDown(w.provider, ConnectionError("connection refused\n\tIs the server running?"))
    changed, repeated = passes(2)
    assert changed.exc_info and isinstance(changed.exc_info[1], ConnectionError)
    assert repeated.exc_info is None and repeated.getMessage().endswith(
        f"(5 failures in a row since {T0.isoformat()}; the traceback is logged at the first): ConnectionError: "
        "connection refused Is the server running?")

    ctx.provider = w.provider
    recovered = passes(1)
    assert recovered[0].getMessage() == (f"a reconcile tick succeeded again after 5 failures in a row since "
                                         f"{T0.isoformat()}")
    assert recovered[1].getMessage().startswith("tick 1: ")  # the gauges never failed: nothing said of them
    assert metrics.tick_errors._value.get() == 5

    ctx.provider = _CloudDown(w.provider)  # a new streak starts with the traceback again
    (fresh,) = passes(1)
    assert fresh.exc_info and "cloud API down" in str(fresh.exc_info[1])


def test_a_host_clock_off_the_stores_is_a_gauge_and_one_warning(world_factory, caplog, monkeypatch):
    """Each reconcile pass reads this host's clock offset from the PostgreSQL store's into
    fleetctl_store_clock_offset_seconds; past 5 s it is logged once as a warning (not every pass),
    and once more when the clocks are back in step."""
    import logging

    w = world_factory(offers=(offer("a8", price=8.0),))
    offsets = iter([0.4, 612.5, 611.9, -7.0, 0.2, None])
    monkeypatch.setattr(w.store, "clock_offset_seconds", lambda: next(offsets))
    metrics = FleetMetrics()
    loop = Daemon(LoopContext(w.store, w.provider, w.runtime, policy(), metrics), interval_seconds=60,
                  interruption_seconds=1000)
    shown = []
    with caplog.at_level(logging.INFO, logger="fleetctl.daemon"):
        for _ in range(6):
            loop.reconcile()
            shown.append(metrics.clock_offset._value.get())
    assert shown == [0.4, 612.5, 611.9, -7.0, 0.2, 0.0]
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "clock" in r.getMessage()]
    assert said == [
        ("WARNING", "this host's clock is 612.5 s ahead of the state store's (PostgreSQL): the times this daemon "
                    "records (idle timers, checkpoints, notices) disagree with other hosts'; keep the hosts' clocks in "
                    "step (NTP)"),
        ("INFO", "this host's clock is back in step with the state store's (+0.2 s)")]


def test_each_reconcile_pass_feeds_the_probes_and_a_success_its_timestamp(world_factory):
    """A pass that succeeds, fails or is skipped (another process holds the
    lease) is recorded for /healthz and /readyz at the daemon's monotonic
    clock; fleetctl_last_successful_tick_timestamp_seconds is the end of the
    last success (0 before one)."""
    from datetime import timedelta

    from fleetctl.controller.health import LoopHealth
    from fleetctl.store import Store
    from tests.builders import T0

    w = world_factory(offers=(offer("a8", price=8.0),))
    w.store.add_jobs([job("j1", gpus=8, submitted=T0, duration_hours=5)], T0)
    clock, monotonic = [T0], [0.0]
    metrics = FleetMetrics()
    ctx = LoopContext(w.store, w.provider, w.runtime, policy(), metrics)
    health = LoopHealth(started_at=0.0, max_inactivity_seconds=600.0, max_failing_seconds=900.0)
    loop = Daemon(ctx, interval_seconds=60, interruption_seconds=1000, clock=lambda: clock[0], health=health,
                  monotonic=lambda: monotonic[0])

    def at(seconds: float) -> None:
        clock[0], monotonic[0] = T0 + timedelta(seconds=seconds), seconds

    def last_success() -> float:
        (family,) = [f for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())
                     if f.name == "fleetctl_last_successful_tick_timestamp_seconds"]
        return family.samples[0].value

    assert last_success() == 0.0 and health.readiness(0.0)[0] is False
    at(5)
    loop.reconcile()
    assert last_success() == (T0 + timedelta(seconds=5)).timestamp()
    assert health.readiness(5) == (True, "ready: the last reconcile pass succeeded 0 s ago")

    ctx.provider = _CloudDown(w.provider)
    for seconds in (300, 600, 950):
        at(seconds)
        loop.reconcile()
    assert metrics.tick_errors._value.get() == 3 and last_success() == (T0 + timedelta(seconds=5)).timestamp()
    assert health.liveness(950) == (True, "live: the last reconcile pass ended 0 s ago")
    assert health.readiness(950) == (False, "no reconcile pass has succeeded for 945 s (limit 900 s; the last 3 "
                                            "passes failed: see the daemon's log)")

    other = Store(w.store.url)
    try:
        assert other.acquire_lease("controller", "cron on host-b", 60.0) is None
        at(960)
        loop.reconcile()
        assert loop.standing_by == "cron on host-b"
        assert health.readiness(960) == (True, "ready: standing by (the last reconcile pass found the controller "
                                               "lease held by another process 0 s ago)")
        other.release_lease("controller", "cron on host-b")
    finally:
        other.close()
    ctx.provider = w.provider
    at(970)
    loop.reconcile()
    assert last_success() == (T0 + timedelta(seconds=970)).timestamp()
    assert health.readiness(980) == (True, "ready: the last reconcile pass succeeded 10 s ago")


def probe(port: int, path: str) -> tuple[int | None, str]:
    """GET one of the daemon's probes: (status, body); (None, why) while nothing answers on the port."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:  # not listening yet
        return None, str(exc)


def test_the_probes_answer_over_http_beside_the_metrics(world_factory):
    """/healthz and /readyz on the metrics server: 200 once a tick succeeded;
    /readyz 503 once the passes have failed for longer than its limit (they
    still end: /healthz stays 200); /healthz 503 while a tick hangs on a cloud
    call for longer than its limit. /metrics is served as before."""
    import threading
    from datetime import datetime, timezone

    from fleetctl.controller.health import LoopHealth

    w = world_factory(offers=(offer("a8", price=8.0),))
    now = datetime.now(timezone.utc)
    w.store.add_jobs([job("j", gpus=8, submitted=now, duration_hours=5)], now)
    metrics = FleetMetrics()
    health = LoopHealth(started_at=time.monotonic(), max_inactivity_seconds=3.0, max_failing_seconds=3.0)
    server, thread = serve(metrics, "127.0.0.1:0", health)
    port = server.server_address[1]
    ctx = LoopContext(w.store, w.provider, w.runtime, policy(), metrics)
    loop = Daemon(ctx, interval_seconds=0.2, interruption_seconds=0.1, price_seconds=60, health=health)
    answered = threading.Event()

    class Hung(_CloudDown):
        def offers(self, now):  # noqa: ANN001, ANN201
            answered.wait(60)  # a cloud call that does not return
            raise RuntimeError("cloud API timed out")

    loop.start()
    try:
        assert wait_for(lambda: probe(port, "/healthz")[0] == 200 and probe(port, "/readyz")[0] == 200)
        assert probe(port, "/readyz")[1].startswith("ready: the last reconcile pass succeeded ")
        families = scrape(port)
        assert [s.value for s in families["fleetctl_last_successful_tick_timestamp_seconds"]][0] > 0
        assert "fleetctl_tick_errors" in families

        ctx.provider = _CloudDown(w.provider)
        assert wait_for(lambda: probe(port, "/readyz")[0] == 503 and probe(port, "/healthz")[0] == 200)
        # a probe while the next failing tick runs says so instead of pointing at the log; on a machine so
        # loaded that no other pass ended within the 3 s, one failed pass reads "the last pass failed"
        assert re.fullmatch(r"no reconcile pass has succeeded for \d+ s \(limit 3 s; the last (\d+ passes|pass) "
                            r"failed(: see the daemon's log|; a tick started \d+ s ago is still running)\)\n",
                            probe(port, "/readyz")[1])

        ctx.provider = Hung(w.provider)
        assert wait_for(lambda: probe(port, "/healthz")[0] == 503)
        assert re.fullmatch(r"no reconcile pass has ended for \d+ s \(limit 3 s; a tick started \d+ s ago is still "
                            r"running\)\n", probe(port, "/healthz")[1])
    finally:
        answered.set()
        loop.stop()
        server.shutdown()
        thread.join(timeout=5)


def test_cli_daemon_serves_the_probes_with_the_limits_it_is_given(tmp_path):
    """`fleetctl daemon --health-max-inactivity-seconds 3 --health-max-failing-seconds 4`:
    /healthz and /readyz answer 200 once a tick has run. While another process
    holds the state store's write lock, each pass waits out SQLite's busy
    timeout (10 s) and fails ("database is locked"): both answer 503 with those
    limits, /readyz naming the failed passes. Once the lock is given back, 200
    again."""
    import sqlite3

    env = _sandbox_with_jobs(tmp_path)
    env["PYTHONUNBUFFERED"] = "1"
    # --interruption-interval 120: the notice pass runs at the start only, and no pass waits behind one
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "daemon", "--interval", "0.5",
                             "--interruption-interval", "120", "--metrics-addr", "127.0.0.1:0",
                             "--health-max-inactivity-seconds", "3", "--health-max-failing-seconds", "4"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    locker = sqlite3.connect(tmp_path / ".fleetctl" / "state.db", timeout=30, isolation_level=None)
    seen: dict[str, tuple[int | None, str]] = {}

    def answers(status: int, failed: str = "") -> bool:
        seen["live"], seen["ready"] = probe(port, "/healthz"), probe(port, "/readyz")
        return seen["live"][0] == status and seen["ready"][0] == status and failed in seen["ready"][1]

    try:
        _first, port, _ = served_ports(proc)
        assert wait_for(lambda: answers(200), timeout=60), (
            proc.stderr.read() if proc.poll() is not None else seen)
        locker.execute("BEGIN EXCLUSIVE")
        live = re.compile(r"no reconcile pass has ended for \d+ s \(limit 3 s; a tick started \d+ s ago is still "
                          r"running\)\n")
        ready = re.compile(r"no reconcile pass has succeeded for \d+ s \(limit 4 s; the last (pass|\d+ passes) "
                           r"failed; a tick started \d+ s ago is still running\)\n")

        # The two probes are two requests: a failed pass may end between them, and
        # until the next starts (0.5 s later) /readyz rightly says no tick is running.
        # So wait for one pair of answers taken while a tick was running.
        def both_say_a_failing_tick_is_running() -> bool:
            return (answers(503, failed="failed") and live.fullmatch(seen["live"][1]) is not None
                    and ready.fullmatch(seen["ready"][1]) is not None)

        assert wait_for(both_say_a_failing_tick_is_running, timeout=90), seen
        locker.execute("ROLLBACK")
        assert wait_for(lambda: answers(200), timeout=60), seen
        assert "fleetctl_last_successful_tick_timestamp_seconds" in scrape(port)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        locker.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 0, err
    assert "reconcile tick failed" in err and "database is locked" in err, err[-3000:]
