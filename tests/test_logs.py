"""Log output of the long-running commands: text or JSON lines, times in UTC."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys

import pytest

from fleetctl.logs import JsonFormatter, TextFormatter
from tests.controller.test_daemon import REPO, wait_for
from tests.processes import daemon_run


def _record(message: str, *args, exc_info=None, **extra) -> logging.LogRecord:
    record = logging.LogRecord("fleetctl.daemon", logging.ERROR, __file__, 1, message, args, exc_info)
    record.created = 1795774152.538  # 2026-11-27T10:09:12.538Z
    record.msecs = 538.0
    record.__dict__.update(extra)
    return record


def test_a_json_line_holds_the_record_with_its_traceback_on_one_line():
    try:
        raise RuntimeError("cloud API down")
    except RuntimeError:
        exc_info = sys.exc_info()
    line = JsonFormatter().format(_record("tick %d failed:\nsee below", 3, exc_info=exc_info, offer="aws/p3"))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["time"] == "2026-11-27T10:09:12.538Z"
    assert (entry["level"], entry["logger"], entry["message"]) == ("error", "fleetctl.daemon", "tick 3 failed:\nsee below")
    assert entry["exception"].startswith("Traceback") and "RuntimeError: cloud API down" in entry["exception"]
    assert entry["offer"] == "aws/p3"  # an extra= field
    assert not {"args", "msg", "levelno", "exc_info", "created"} & entry.keys()


def test_text_lines_give_the_time_in_utc_whatever_the_local_zone(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    import time

    time.tzset()
    try:
        line = TextFormatter().format(_record("tick 1: 0 actions"))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert line == "2026-11-27T10:09:12.538Z ERROR fleetctl.daemon: tick 1: 0 actions"


def test_cli_daemon_logs_json_lines(tmp_path):
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    env["FLEETCTL_LOG_FORMAT"] = "json"
    with daemon_run(tmp_path, "--interval", "30", "--retain-days", "0", env=env) as run:
        # the first tick runs at start and logs its line when it ends
        assert wait_for(lambda: '"tick 1: ' in run.err, timeout=60), run.err
        assert run.stop() == 0, run.err
    entries = [json.loads(line) for line in run.err.splitlines()]  # every line is one JSON object
    assert any(e["logger"] == "fleetctl.daemon" and re.match(r"tick 1: ", e["message"]) for e in entries), run.err
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["time"]) for e in entries)


@pytest.mark.parametrize(("level", "shown"), [
    ("debug", ["fleetctl.daemon DEBUG", "fleetctl.daemon INFO", "fleetctl.daemon WARNING", "botocore INFO",
               "botocore WARNING"]),
    ("info", ["fleetctl.daemon INFO", "fleetctl.daemon WARNING", "botocore INFO", "botocore WARNING"]),
    ("warning", ["fleetctl.daemon WARNING", "botocore WARNING"]),
])
def test_log_level_debug_is_fleetctls_own_and_the_libraries_stay_at_info(level, shown):
    """--log-level debug set the root logger: botocore then logged every request it signed, headers included."""
    code = ("import logging; from fleetctl.logs import configure; configure('text', %r)\n"
            "for name in ('fleetctl.daemon', 'botocore'):\n"
            "    for lv in ('DEBUG', 'INFO', 'WARNING'):\n"
            "        logging.getLogger(name).log(getattr(logging, lv), name + ' ' + lv)\n") % level
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert [line.split(": ", 1)[1] for line in run.stderr.splitlines()] == shown, run.stderr


@pytest.mark.parametrize("encoding", ["ascii", "latin-1", "utf-8"])
def test_json_lines_stay_json_on_a_stderr_that_cannot_encode_them(encoding):
    """On a non-UTF-8 stderr (PYTHONIOENCODING=ascii, LC_ALL=C PYTHONUTF8=0, a Latin-1
    locale) Python escaped what it could not encode as \\xe9 or \\U0001f600, which no
    JSON parser reads: now such lines are ASCII with JSON's own escapes. On UTF-8 they
    stay readable."""
    message = "job 'Kündigung' \U0001f600 failed"
    code = ("import logging; from fleetctl.logs import configure; configure('json')\n"
            f"logging.getLogger('fleetctl.daemon').warning({message!r})\n")
    env = {**os.environ, "PYTHONIOENCODING": encoding}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, cwd=REPO, env=env)
    assert run.returncode == 0, run.stderr
    line = run.stderr.decode(encoding, errors="strict")  # every byte as the stream wrote it
    assert json.loads(line)["message"] == message, line
    assert (line.isascii()) is (encoding != "utf-8"), line
