"""Output into a pipe whose reader has gone (`fleetctl catalog | head -1`): a quiet end with
the status Unix tools end with (141), not click's or rich's silent exit 1, which reads as an error."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_into_closed_pipe(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """Run fleetctl with stdout a real pipe whose read end is closed before it starts, as
    `head -1` leaves it once it has its line (closed first, so the outcome is the same every run)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "fleetctl", *args], cwd=cwd, env=env, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A directory with the example policy and queue submitted (for `jobs list`)."""
    cwd = tmp_path_factory.mktemp("pipe")
    shutil.copytree(REPO / "policies", cwd / "policies")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    submit = [sys.executable, "-m", "fleetctl", "jobs", "submit", str(REPO / "examples" / "jobs.yaml")]
    submitted = subprocess.run(submit, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert submitted.returncode == 0, submitted.stderr
    return cwd


@pytest.mark.parametrize("args", [
    ("catalog", "--format", "json"),
    ("catalog",),
    ("jobs", "list"),
    ("jobs", "list", "--format", "json"),
    ("status",),
    ("catalog", "--help"),
    ("--version",),
], ids=["print", "rich-table", "jobs-list", "jobs-list-json", "status", "subcommand-help", "root-option"])
def test_output_into_a_closed_pipe_ends_quietly_with_the_sigpipe_status(workdir, args):
    result = run_into_closed_pipe(workdir, *args)
    assert result.returncode == 141, (result.returncode, result.stderr)
    assert result.stderr == ""


def test_only_a_pipe_whose_reader_has_gone_counts_as_closed(tmp_path):
    from fleetctl.cli.common import reader_gone

    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as stream:
        assert not reader_gone(stream)  # a live pipe
        os.close(read_end)
        assert reader_gone(stream)
    with open(tmp_path / "out.txt", "w") as plain:
        assert not reader_gone(plain)
    assert not reader_gone(object())  # no descriptor (click's test runner's streams)


def test_a_broken_pipe_that_is_not_stdout_is_an_error_not_a_quiet_end(tmp_path):
    """A BrokenPipeError from a socket or a child's pipe must not pass for `| head` having had enough:
    it is reported, exit 1 (click alone exited 1 in silence for both)."""
    script = (
        "import sys, typer\n"
        "from fleetctl.cli.main import app\n"
        "@app.command('boom')\n"
        "def boom() -> None:\n"
        "    raise BrokenPipeError(32, 'Broken pipe')\n"
        "sys.argv = ['fleetctl', 'boom']\n"
        "app()\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "the other end of a connection or pipe closed while fleetctl wrote to it" in result.stderr
    assert "Broken pipe" in result.stderr
