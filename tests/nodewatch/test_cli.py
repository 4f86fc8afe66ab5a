"""`fleetctl node-watch` and `fleetctl daemon --notice-addr` as commands: the
options the Terraform user data passes, exit codes and messages, and the whole
path with the daemon as a separate process."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.model import InterruptionKind
from fleetctl.store import Store
from tests.builders import T0
from tests.nodewatch.conftest import TOKEN
from tests.nodewatch.fakes import FakeAzure, FakeGce, FakeImds
from tests.processes import served_ports

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "notice-token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


def node_watch(*args: str):  # noqa: ANN201
    return runner.invoke(app, ["node-watch", *args], catch_exceptions=False)


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_node_watch_once_delivers_the_notice(cloud, make_controller, token_file):
    c = make_controller(cloud)
    if cloud == "aws":
        fake = FakeImds("i-0f00")
        fake.instance_action = {"action": "terminate", "time": "2026-11-02T09:02:00Z"}
        node, deadline = "i-0f00", T0 + timedelta(minutes=2)
    elif cloud == "gcp":
        fake = FakeGce("gpu-node-1")
        fake.preempt()
        # the watcher's clock + 30 s, capped by the controller at 30 s after it received the notice: its
        # clock here stands at T0, far behind the watcher's (the cap: a node clock that runs ahead)
        node, deadline = "us-central1-a/gpu-node-1", T0 + timedelta(seconds=30)
    else:
        fake = FakeAzure("vm-gpu-1")
        fake.schedule_preempt("ev-9", T0 + timedelta(seconds=40))
        node, deadline = "vm-gpu-1", T0 + timedelta(seconds=40)
    with fake:
        result = node_watch("--controller", c.endpoint.url, "--token-file", str(token_file), "--cloud", cloud,
                            "--metadata-url", fake.url, "--once")
    assert result.exit_code == 0, result.output
    (event,) = c.store.interruptions()
    assert f"1 notice(s) delivered: {event.event_id}" in result.output
    assert (event.provider, event.node_id, event.kind) == (cloud, node, InterruptionKind.RECLAIM_WARNING)
    assert event.deadline_utc == deadline
    if cloud == "azure":
        assert fake.acks == []  # delivered, not yet handled by the controller: not approved


def test_node_watch_takes_the_metadata_url_from_the_environment_and_an_explicit_node_id(make_controller,
                                                                                      token_file):
    c = make_controller("aws")
    with FakeImds("i-0f00") as fake:
        fake.rebalance = {"noticeTime": "2026-11-02T08:58:00Z"}
        result = runner.invoke(app, ["node-watch", "--controller", c.endpoint.url + "/", "--token-file",
                                     str(token_file), "--cloud", "aws", "--node-id", "sim-aws-1", "--once"],
                               env={"FLEETCTL_METADATA_URL": fake.url}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (event,) = c.store.interruptions()
    assert (event.node_id, event.kind, event.deadline_utc) == ("sim-aws-1", InterruptionKind.REBALANCE, None)


def test_node_watch_gives_up_on_a_wrong_token_with_a_clear_error(make_controller, tmp_path):
    c = make_controller("gcp")
    wrong = tmp_path / "wrong"
    wrong.write_text("not-it")
    wrong.chmod(0o600)
    with FakeGce("n1") as fake:
        fake.preempt()
        result = node_watch("--controller", c.endpoint.url, "--token-file", str(wrong), "--cloud", "gcp",
                            "--metadata-url", fake.url, "--once", "--max-attempts", "3", "--max-backoff", "0")
    assert result.exit_code == 1
    assert "gave up delivering" in result.output and "after 3 attempt(s)" in result.output
    assert "HTTP 401" in result.output
    assert c.store.interruptions(unhandled_only=False) == ()


@pytest.mark.parametrize("setup, words", [
    ("missing", "--token-file"),
    ("empty", "is empty"),
    ("wrong-cloud", "cannot discover this node's id from the gcp metadata service"),
])
def test_node_watch_start_errors(setup, words, tmp_path, token_file):
    path = token_file
    if setup == "missing":
        path = tmp_path / "nope"
    elif setup == "empty":
        path = tmp_path / "empty"
        path.write_text("\n")
    with FakeImds("i-0f00") as imds:  # an AWS metadata service, asked as if it were GCE
        result = node_watch("--controller", "http://127.0.0.1:9", "--token-file", str(path), "--cloud", "gcp",
                            "--metadata-url", imds.url, "--once")
    # a token file it cannot use is a usage error (2), told apart from the environment's (1)
    assert result.exit_code == (1 if setup == "wrong-cloud" else 2)
    assert words in result.output


def test_daemon_refuses_a_node_facing_endpoint_without_a_token(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLEETCTL_NOTICE_TOKEN", raising=False)
    result = runner.invoke(app, ["daemon", "--notice-addr", "0.0.0.0:9109"])
    assert result.exit_code == 2  # a usage error, as the token variable's below
    assert "refusing to serve notices on 0.0.0.0:9109 without a token" in result.output
    assert not (tmp_path / ".fleetctl").exists()  # refused before anything was opened


def test_daemon_refuses_a_token_variable_that_names_a_file(tmp_path, monkeypatch, token_file):
    # The variable holds the token itself; a path there would be sent as the token and every notice refused.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLEETCTL_NOTICE_TOKEN", str(token_file))
    result = runner.invoke(app, ["daemon", "--notice-addr", "127.0.0.1:9109"])
    assert result.exit_code == 2
    assert "FLEETCTL_NOTICE_TOKEN holds the token itself, not a file" in result.output
    assert f"--notice-token-file {token_file}" in result.output
    assert not (tmp_path / ".fleetctl").exists()  # refused before anything was opened


@pytest.mark.parametrize("args, words", [
    (["daemon", "--metrics-addr", "127.0.0.1:99999"], "--metrics-addr '127.0.0.1:99999': expected HOST:PORT"),
    (["daemon", "--metrics-addr", "127.0.0.1:-1"], "--metrics-addr '127.0.0.1:-1': expected HOST:PORT"),
    # str.isdigit() takes these: '²' was "invalid literal for int()", '٩١٠٨' (Arabic-Indic) served on 9108
    (["daemon", "--metrics-addr", "127.0.0.1:²"], "--metrics-addr '127.0.0.1:²': expected HOST:PORT"),
    (["daemon", "--metrics-addr", "127.0.0.1:٩١٠٨"], "--metrics-addr '127.0.0.1:٩١٠٨': expected HOST:PORT"),
    (["daemon", "--notice-addr", "127.0.0.1:٩١٠٩"], "--notice-addr '127.0.0.1:٩١٠٩': expected HOST:PORT"),
    (["daemon", "--notice-addr", "127.0.0.1:70000"], "--notice-addr '127.0.0.1:70000': expected HOST:PORT"),
    # each option's example is its own usual address: --metrics-addr cited the notice endpoint's 9109
    (["daemon", "--metrics-addr", "localhost"], "--metrics-addr 'localhost': expected HOST:PORT with a port up "
     "to 65535, e.g. 127.0.0.1:9108"),
    (["daemon", "--notice-addr", "localhost"], "--notice-addr 'localhost': expected HOST:PORT with a port up "
     "to 65535, e.g. 127.0.0.1:9109"),
    (["daemon", "--interval", "inf"], "--interval"),
    (["daemon", "--interruption-interval", "1e308"], "--interruption-interval"),
    (["daemon", "--price-interval", "inf"], "--price-interval"),
    (["daemon", "--notice-token-file", "token"], "--notice-token-file token is for the notice endpoint"),
    # node-watch slept for --interval: inf or 1e308 was an OverflowError traceback on the first poll
    (["node-watch", "--controller", "http://127.0.0.1:9", "--cloud", "aws", "--interval", "inf"], "--interval"),
    (["node-watch", "--controller", "http://127.0.0.1:9", "--cloud", "gcp", "--interval", "60"], "--interval"),
    (["node-watch", "--controller", "http://127.0.0.1:9", "--cloud", "aws", "--max-backoff", "inf"],
     "--max-backoff"),
    (["node-watch", "--controller", "http://127.0.0.1:9", "--cloud", "gcp", "--metadata-url", "garbage", "--once"],
     "--metadata-url 'garbage': expected an http:// or https:// URL"),
    (["node-watch", "--controller", "127.0.0.1:9109", "--cloud", "gcp", "--once"],
     "--controller '127.0.0.1:9109': expected an http:// or https:// URL"),
    # urlsplit raises ValueError for an unclosed IPv6 bracket: it was a traceback
    (["node-watch", "--controller", "http://[::1", "--cloud", "gcp", "--once"],
     "--controller 'http://[::1': expected an http:// or https:// URL"),
    (["node-watch", "--controller", "http://127.0.0.1:9", "--metadata-url", "http://h:99999", "--cloud", "gcp"],
     "--metadata-url 'http://h:99999': expected an http:// or https:// URL"),
    # the endpoint refuses a node id over 255 characters with a 400, which node-watch does not retry
    (["node-watch", "--controller", "http://127.0.0.1:9", "--cloud", "aws", "--node-id", "x" * 256, "--once",
      "--metadata-url", "http://127.0.0.1:9"],
     "--node-id must be 1 to 255 characters"),
])
def test_bad_addresses_and_intervals_are_usage_errors_before_anything_starts(args, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no traceback
    assert not (tmp_path / ".fleetctl").exists()


# --------------------------------------------------------------------------- the whole path, two processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout=25.0):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return None


JOBS = """jobs:
  - id: train
    team: ml-research
    priority: batch
    gpus_per_worker: 1
    vcpus_per_worker: 4
    memory_gib_per_worker: 16
    duration_hours: 10
    checkpointable: true
    checkpoint_interval_minutes: 30
    spot_eligible: true
"""


def test_daemon_takes_a_notice_from_node_watch_and_replaces_the_job(tmp_path, token_file):
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    (tmp_path / "jobs.yaml").write_text(JOBS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    env["FLEETCTL_SIM_LAUNCH_DELAY_SECONDS"] = "0"
    subprocess.run([sys.executable, "-m", "fleetctl", "jobs", "submit", "jobs.yaml"], cwd=tmp_path, env=env,
                   check=True, capture_output=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetctl", "daemon", "--interval", "0.3", "--interruption-interval", "0.2",
         "--metrics-addr", "127.0.0.1:0", "--notice-addr", "127.0.0.1:0", "--notice-token-file", str(token_file)],
        cwd=tmp_path, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    store = Store(f"sqlite:///{tmp_path / '.fleetctl' / 'state.db'}")
    try:
        first, _metrics_port, notice_port = served_ports(proc)  # HOST:0 binds free ports; the line names them
        assert notice_port, first
        def running():  # noqa: ANN202
            jobs = [j for j in store.jobs() if j.job_id == "train" and j.state.value == "running"]
            return jobs[0] if jobs else None

        job = wait_for(running)
        assert job is not None, proc.stderr.read() if proc.poll() is not None else "the job never ran"
        node = {n.node_id: n for n in store.nodes()}[job.node_ids[0]]
        cloud = node.offer.provider
        fakes = {"aws": lambda: FakeImds(node.node_id), "gcp": lambda: FakeGce(node.node_id),
                 "azure": lambda: FakeAzure(node.node_id)}
        with fakes[cloud]() as fake:
            if cloud == "aws":
                when = datetime.now(timezone.utc) + timedelta(minutes=2)
                fake.instance_action = {"action": "terminate", "time": when.strftime("%Y-%m-%dT%H:%M:%SZ")}
            elif cloud == "gcp":
                fake.preempt()
            else:
                fake.schedule_preempt("ev-daemon", datetime.now(timezone.utc) + timedelta(seconds=60))
            result = node_watch("--controller", f"http://127.0.0.1:{notice_port}", "--token-file", str(token_file),
                                "--cloud", cloud, "--metadata-url", fake.url, "--node-id", node.node_id, "--once")
        assert result.exit_code == 0, result.output

        def replaced():  # noqa: ANN202
            j = next(j for j in store.jobs() if j.job_id == "train")
            return j if j.interruptions == 1 and j.node_ids and node.node_id not in j.node_ids else None

        moved = wait_for(replaced)
        assert moved is not None, next(j for j in store.jobs() if j.job_id == "train")
        assert moved.checkpointed_work_hours > 0 and moved.last_checkpoint_utc is not None  # checkpointed
        assert store.interruptions() == ()  # handled by the daemon's pass
        requeue = [e for e in store.events("requeue") if e["subject"] == "train"]
        assert requeue and requeue[0]["payload"]["node"] == node.node_id
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        store.close()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert f"notices on http://127.0.0.1:{notice_port}/v1/notices" in first + out


def test_the_daemon_warns_of_a_readable_token_file_and_a_plain_http_endpoint_off_loopback(tmp_path, caplog):
    import logging
    import os

    from fleetctl.cli.controller_cmd import _check_notice_options

    token = tmp_path / "token"
    token.write_text("s3cret\n")
    os.chmod(token, 0o644)
    with caplog.at_level(logging.WARNING, logger="fleetctl.daemon"):
        assert _check_notice_options("0.0.0.0:19999", token) == "s3cret"
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "readable by other users" in text and "plain HTTP" in text
    caplog.clear()
    os.chmod(token, 0o600)
    with caplog.at_level(logging.WARNING, logger="fleetctl.daemon"):
        _check_notice_options("127.0.0.1:19999", token)
    assert not caplog.records


def test_node_watch_once_says_when_the_controller_had_the_notice_already(make_controller, token_file):
    c = make_controller("aws")
    fake = FakeImds("i-0f00")
    fake.instance_action = {"action": "terminate", "time": "2026-11-02T09:02:00Z"}
    with fake:
        args = ("--controller", c.endpoint.url, "--token-file", str(token_file), "--cloud", "aws",
                "--metadata-url", fake.url, "--once")
        first, again = node_watch(*args), node_watch(*args)  # a cron'd --once, or a restarted watcher
    assert first.exit_code == again.exit_code == 0
    assert "had already" not in first.output
    (event,) = c.store.interruptions()
    assert f"1 notice(s) delivered: {event.event_id} (1 the controller had already: {event.event_id})" in again.output


def test_node_watch_stops_at_once_on_sigterm_during_a_gce_wait(token_file):
    """The blocking wait_for_change request was not interrupted: SIGTERM took
    up to its 30 s. The fake answers the wait only after its 30 s timeout, so a
    watcher that exits while the wait is still open did not wait it out."""
    with FakeGce("gpu-node-1") as fake:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "fleetctl", "node-watch", "--controller", f"http://127.0.0.1:{free_port()}",
             "--token-file", str(token_file), "--cloud", "gcp", "--metadata-url", fake.url,
             "--gce-wait-for-change"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert fake.waiting.wait(120), "the watcher never waited for a change"  # a loaded machine starts it slowly
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
            still_waiting = fake.waiting.is_set()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err
    assert still_waiting  # exited with the wait still open: it was abandoned, not waited out
    assert "signal 15: stopping" in err


def refusal(args: list, capsys) -> tuple[int, str]:  # noqa: ANN001
    """(exit code, output) of ``node-watch ... --once`` through the CLI, or of
    the daemon's checks of its notice options: a daemon that accepted the token
    would run on, so it is not started here."""
    if args[0] == "node-watch":
        result = runner.invoke(app, args)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception  # no traceback
        return result.exit_code, result.output
    import typer

    from fleetctl.cli.controller_cmd import _check_notice_options

    with pytest.raises(typer.Exit) as exc:
        _check_notice_options("127.0.0.1:0", args[1] if len(args) > 1 else None)
    return exc.value.exit_code, capsys.readouterr().err


@pytest.mark.parametrize("content, words", [
    ("tok\u20acen\n".encode(), "character 4 is '€' (U+20AC), which is not printable ASCII"),  # not Latin-1 either
    ("tök\n".encode(), "character 2 is 'ö' (U+00F6), which is not printable ASCII"),
    (b"first-line\nsecond-line\n", "it holds more than one line"),
    (b"tok\tx\n", "character 4 is '\\t' (U+0009)"),
    (b"\xff\xfetoken\n", "is not text: byte 0xff at offset 0 is not UTF-8"),
], ids=["euro", "umlaut", "two-lines", "tab", "not-utf8"])
@pytest.mark.parametrize("command", ["node-watch", "daemon"])
def test_a_token_that_cannot_travel_in_a_header_is_refused_at_startup(command, content, words, tmp_path,
                                                                      monkeypatch, capsys):
    """Such a token was accepted, and node-watch crashed with a traceback
    (UnicodeEncodeError, 'Invalid header value') only when it posted a notice,
    losing it; a non-UTF-8 file was a UnicodeDecodeError traceback in both."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "token"
    path.write_bytes(content)
    path.chmod(0o600)
    if command == "node-watch":
        option = "--token-file"
        args = ["node-watch", "--controller", "http://127.0.0.1:9", "--cloud", "aws", "--node-id", "i-1",
                "--metadata-url", "http://127.0.0.1:9", "--once", "--token-file", str(path)]
    else:
        option = "--notice-token-file"
        args = ["daemon", path]
    code, output = refusal(args, capsys)
    assert code == 2, output  # as FLEETCTL_NOTICE_TOKEN's refusal below
    assert f"{option} {path}" in output and words in output


def test_the_daemon_refuses_a_token_variable_that_cannot_travel_in_a_header(monkeypatch, capsys):
    monkeypatch.setenv("FLEETCTL_NOTICE_TOKEN", "s3cr\u00e9t")
    code, output = refusal(["daemon"], capsys)
    assert code == 2
    assert "FLEETCTL_NOTICE_TOKEN: character 5 is 'é' (U+00E9), which is not printable ASCII" in output


def test_node_watch_once_never_approves_even_a_notice_the_controller_has_handled(make_controller, token_file):
    """A second --once (cron) after the controller drained the node approved
    the event at Azure, though --once is documented never to approve."""
    c = make_controller("azure")
    _, node = c.run_checkpointable_job()
    with FakeAzure(node.node_id) as fake:
        fake.schedule_preempt("ev-9", c.clock.now + timedelta(seconds=40))
        args = ("--controller", c.endpoint.url, "--token-file", str(token_file), "--cloud", "azure",
                "--metadata-url", fake.url, "--once")
        first = node_watch(*args)
        c.tick()  # drained: the notice is handled
        assert c.store.interruptions() == () and c.jobs()["j"].interruptions == 1
        again = node_watch(*args)
    assert first.exit_code == again.exit_code == 0, again.output
    assert fake.acks == []
