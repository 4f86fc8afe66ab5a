"""SIGHUP: the daemon reads its policy file again, takes a valid one up between
passes, and refuses (keeping the policy it runs) a file with errors or one that
changes what is read at start only."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path

from fleetctl.controller.loop import Daemon, LoopContext
from fleetctl.metrics import FleetMetrics
from fleetctl.model import JobState, Market
from fleetctl.policy import load_policy, read_policy_file
from tests.builders import job, offer
from tests.controller.test_daemon import REPO, scrape, wait_for
from tests.processes import daemon_run

EXAMPLE = (REPO / "policies" / "example.yaml").read_text()
WITHOUT_A100_80 = EXAMPLE.replace("  - A100-80GB\n", "", 1)  # the world's only GPU model, no longer allowed


def _daemon(world, path: Path) -> Daemon:
    read = read_policy_file(path)
    return Daemon(LoopContext(world.store, world.provider, world.runtime, read.policy, FleetMetrics()),
                  interval_seconds=3600, interruption_seconds=60, price_seconds=3600,
                  read_policy=partial(read_policy_file, path), policy_file=read)


def _value(metrics: FleetMetrics, name: str, **labels) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_a_reloaded_policy_is_what_the_next_pass_plans_with(world_factory, tmp_path):
    w = world_factory(offers=(offer("a8", price=8.0), offer("a8", price=20.0, market=Market.ON_DEMAND)))
    path = tmp_path / "policy.yaml"
    path.write_text(WITHOUT_A100_80)
    loop = _daemon(w, path)
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc)
    w.store.add_jobs([job("j", gpus=8, models=("A100-80GB",), team="ml-research", submitted=now)], now)
    loop.reconcile()
    assert [j.state for j in w.store.jobs()] == [JobState.QUEUED]  # no allowed offer holds it
    assert w.store.nodes() == ()

    path.write_text(EXAMPLE)
    assert loop.reload_policy() == "applied"
    assert loop.ctx.policy == load_policy(path)
    loop.reconcile()
    assert [j.state for j in w.store.jobs()] != [JobState.QUEUED]
    assert len(w.store.nodes()) == 1
    assert _value(loop.ctx.metrics, "fleetctl_policy_reloads_total", outcome="applied") == 1
    assert _value(loop.ctx.metrics, "fleetctl_policy_info",
                  sha256=hashlib.sha256(EXAMPLE.encode()).hexdigest()) == 1
    assert _value(loop.ctx.metrics, "fleetctl_policy_info",
                  sha256=hashlib.sha256(WITHOUT_A100_80.encode()).hexdigest()) == 0  # the old series is gone


def test_a_policy_file_with_errors_is_refused_and_the_running_policy_kept(world_factory, tmp_path, caplog):
    w = world_factory(offers=(offer("a8", price=8.0),))
    path = tmp_path / "policy.yaml"
    path.write_text(EXAMPLE)
    loop = _daemon(w, path)
    before = loop.ctx.policy
    path.write_text(EXAMPLE.replace("max_spot_share: 0.8", "max_spot_share: 1.8"))
    with caplog.at_level(logging.INFO, logger="fleetctl.daemon"):
        assert loop.reload_policy() == "invalid"
    assert loop.ctx.policy is before
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(f"{path}:" in m and "markets.max_spot_share" in m for m in errors), errors
    assert any("still planning with the policy read before" in m for m in errors), errors
    assert _value(loop.ctx.metrics, "fleetctl_policy_reloads_total", outcome="invalid") == 1
    assert _value(loop.ctx.metrics, "fleetctl_policy_info", sha256=hashlib.sha256(EXAMPLE.encode()).hexdigest()) == 1

    path.unlink()  # a file that went away is refused the same way
    assert loop.reload_policy() == "invalid"
    assert loop.ctx.policy is before


def test_a_change_to_what_is_read_at_start_only_is_refused_whole(world_factory, tmp_path, caplog):
    w = world_factory(offers=(offer("a8", price=8.0),))
    path = tmp_path / "policy.yaml"
    path.write_text(EXAMPLE)
    loop = _daemon(w, path)
    before = loop.ctx.policy
    # a change the daemon could take up (the budget) beside one it cannot (the infrastructure): neither is applied
    path.write_text(EXAMPLE.replace("cluster: ml-platform", "cluster: ml-platform-2", 1)
                    .replace("max_usd_per_hour: 400", "max_usd_per_hour: 300"))
    with caplog.at_level(logging.INFO, logger="fleetctl.daemon"):
        assert loop.reload_policy() == "refused"
    assert loop.ctx.policy is before
    assert any("changes infrastructure" in r.getMessage() and "restart the daemon" in r.getMessage()
               for r in caplog.records if r.levelno == logging.ERROR)
    assert _value(loop.ctx.metrics, "fleetctl_policy_reloads_total", outcome="refused") == 1


def test_a_comment_only_edit_changes_no_setting_but_the_file_digest(world_factory, tmp_path):
    w = world_factory(offers=(offer("a8", price=8.0),))
    path = tmp_path / "policy.yaml"
    path.write_text(EXAMPLE)
    loop = _daemon(w, path)
    edited = "# reviewed in PR 42\n" + EXAMPLE
    path.write_text(edited)
    assert loop.reload_policy() == "unchanged"
    assert _value(loop.ctx.metrics, "fleetctl_policy_info", sha256=hashlib.sha256(edited.encode()).hexdigest()) == 1
    assert _value(loop.ctx.metrics, "fleetctl_policy_reloads_total", outcome="unchanged") == 1


def test_cli_daemon_reloads_its_policy_on_sighup(tmp_path):
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    policy_file = tmp_path / "policies" / "example.yaml"
    with daemon_run(tmp_path, "--interval", "30", "--retain-days", "0", env=env) as run:
        def info() -> list[str]:
            return [s.labels["sha256"] for s in scrape(run.port).get("fleetctl_policy_info", []) if s.value == 1]

        def reloads(outcome: str) -> float:
            return sum(s.value for s in scrape(run.port).get("fleetctl_policy_reloads", [])
                       if s.name.endswith("_total") and s.labels["outcome"] == outcome)

        assert info() == [hashlib.sha256(EXAMPLE.encode()).hexdigest()]
        edited = EXAMPLE.replace("max_usd_per_hour: 400", "max_usd_per_hour: 300")
        policy_file.write_text(edited)
        run.signal(signal.SIGHUP)
        assert wait_for(lambda: reloads("applied") == 1), run.err
        assert info() == [hashlib.sha256(edited.encode()).hexdigest()]

        policy_file.write_text(edited.replace("max_gpus: 96", "max_gpus: -1"))
        run.signal(signal.SIGHUP)
        assert wait_for(lambda: reloads("invalid") == 1), run.err
        assert info() == [hashlib.sha256(edited.encode()).hexdigest()]  # still the last valid one
        assert run.stop() == 0, run.err
    err = run.err
    assert "policy reloaded from policies/example.yaml (sha256 " in err and "1 setting changed" in err, err
    line = next(n for n in EXAMPLE.splitlines() if "max_usd_per_hour:" in n)
    at = EXAMPLE.splitlines().index(line) + 1
    assert f"policy reload: ~ budget.max_usd_per_hour: 400.0 -> 300.0  # policies/example.yaml:{at}" in err, err
    assert "policies/example.yaml:" in err and "budget.max_gpus" in err, err


def test_a_changed_file_is_read_again_and_a_refused_version_only_once(world_factory, tmp_path):
    """--policy-check-seconds: what a ConfigMap or a GitOps checkout needs, where nothing sends SIGHUP."""
    w = world_factory(offers=(offer("a8", price=8.0),))
    path = tmp_path / "policy.yaml"
    path.write_text(EXAMPLE)
    loop = _daemon(w, path)
    assert not loop.policy_file_changed()
    path.write_text("# a comment\n" + EXAMPLE)
    assert loop.policy_file_changed()
    loop._reload_guarded("changed")
    assert not loop.policy_file_changed()  # that version runs now

    broken = EXAMPLE.replace("max_spot_share: 0.8", "max_spot_share: 1.8")
    path.write_text(broken)
    assert loop.policy_file_changed()
    loop._reload_guarded("changed")
    assert _value(loop.ctx.metrics, "fleetctl_policy_reloads_total", outcome="invalid") == 1
    assert not loop.policy_file_changed()  # the refused version is not read (and reported) at every check
    path.unlink()
    assert loop.policy_file_changed()  # gone is a change: the reload says the file cannot be read
    loop._reload_guarded("changed")
    assert _value(loop.ctx.metrics, "fleetctl_policy_reloads_total", outcome="invalid") == 2
    assert not loop.policy_file_changed()
    path.write_text(EXAMPLE.replace("max_usd_per_hour: 400", "max_usd_per_hour: 350"))
    assert loop.policy_file_changed()
    loop._reload_guarded("changed")
    assert loop.ctx.policy.max_usd_per_hour == 350

    # a version refused, the running one put back, then the refused one again: reported again
    running = path.read_text()
    path.write_text(broken)
    assert loop.policy_file_changed()
    loop._reload_guarded("changed")
    path.write_text(running)
    assert not loop.policy_file_changed()
    path.write_text(broken)
    assert loop.policy_file_changed()


def test_cli_daemon_takes_up_a_changed_policy_file_with_policy_check_seconds(tmp_path):
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    policy_file = tmp_path / "policies" / "example.yaml"
    with daemon_run(tmp_path, "--interval", "30", "--retain-days", "0", "--policy-check-seconds", "1",
                    env=env) as run:
        edited = EXAMPLE.replace("max_usd_per_hour: 400", "max_usd_per_hour: 300")
        policy_file.write_text(edited)

        def running() -> list[str]:
            return [s.labels["sha256"] for s in scrape(run.port).get("fleetctl_policy_info", []) if s.value == 1]

        assert wait_for(lambda: running() == [hashlib.sha256(edited.encode()).hexdigest()], timeout=60), run.err
        assert run.stop() == 0, run.err
    assert "the policy file policies/example.yaml changed: reading the policy file again" in run.err, run.err


def test_cli_daemon_keeps_a_sighup_sent_while_it_starts(tmp_path):
    """A SIGHUP before the loop ran ended the daemon (the default action), which systemd counts as clean."""
    # A store whose opening waits: another connection holds SQLite's write lock for a few seconds, so the
    # daemon is still starting (migrating the store) when the signal comes.
    import sqlite3

    (tmp_path / ".fleetctl").mkdir()
    db = sqlite3.connect(tmp_path / ".fleetctl" / "state.db", isolation_level=None)
    db.execute("BEGIN EXCLUSIVE")
    try:
        # signal it once it has reached the store, while the lock holds it there
        logged = _hangup_while_starting(tmp_path, lambda pid: _opened(pid, tmp_path / ".fleetctl" / "state.db"),
                                        after_signal=lambda: db.execute("COMMIT"))
    finally:
        db.close()
    assert "policy reload: policies/example.yaml has no setting changed" in logged


def _hangup_while_starting(tmp_path: Path, ready, after_signal=lambda: None) -> str:  # noqa: ANN001
    """`python -m fleetctl daemon` in ``tmp_path``, sent SIGHUP once ``ready(pid)``: it must then serve,
    read its policy again and stop cleanly on SIGTERM. Returns what it logged."""
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "daemon", "--interval", "30", "--retain-days", "0",
                             "--metrics-addr", "127.0.0.1:0"], cwd=tmp_path, env={**env, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    logged: list[str] = []
    reader = threading.Thread(target=lambda: logged.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        assert wait_for(lambda: ready(proc.pid), timeout=60), proc.poll()
        proc.send_signal(signal.SIGHUP)
        after_signal()
        first = proc.stdout.readline()
        assert "metrics on" in first, (first, proc.poll(), "".join(logged))
        assert wait_for(lambda: "SIGHUP: reading the policy file again" in "".join(logged)), "".join(logged)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, "".join(logged)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        reader.join(timeout=30)
    return "".join(logged)


def _opened(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (it reached the store)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.path.realpath(fd) == str(path.resolve()) for fd in fds.iterdir())
    except OSError:
        return False


def test_the_console_script_keeps_a_sighup_sent_while_python_imports_the_cli(tmp_path):
    """The daemon command set its handler after the CLI's imports (about a second), and a SIGHUP in that
    second ended it: `python -m fleetctl daemon` (and the `fleetctl` script) now catch it from their first
    line. Signalled as soon as /proc shows SIGHUP caught, it runs on and reads its policy again."""
    _hangup_while_starting(tmp_path, lambda pid: _catches(pid, signal.SIGHUP))


def test_only_the_daemon_command_line_catches_sighup_early():
    from fleetctl.cli import entry

    assert entry.runs_daemon(["daemon", "--interval", "30"]) and entry.runs_daemon(["-h", "daemon"])
    assert not entry.runs_daemon(["reconcile", "--once"]) and not entry.runs_daemon(["jobs", "daemon"])
    assert not entry.runs_daemon([]) and not entry.runs_daemon(["--version"])
    before = signal.getsignal(signal.SIGHUP)
    try:
        entry.keep_hangups()
        os.kill(os.getpid(), signal.SIGHUP)
        assert entry.take_early_hangups() == [signal.SIGHUP] and entry.take_early_hangups() == []
    finally:
        signal.signal(signal.SIGHUP, before)


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (/proc/PID/status SigCgt)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) >> (signum - 1) & 1)
