"""`fleetctl apply` without a plan file asks on a terminal: a real pseudo-terminal as its stdin."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(cwd: Path, *args: str, answer: str | None = None) -> subprocess.CompletedProcess:
    """``fleetctl ARGS`` in ``cwd``; with ``answer``, stdin is a terminal the answer is typed into."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    env["FLEETCTL_SIM_LAUNCH_DELAY_SECONDS"] = "0"
    env["COLUMNS"] = "200"
    if answer is None:
        return subprocess.run([sys.executable, "-m", "fleetctl", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=120)
    typed, terminal = pty.openpty()
    try:
        os.write(typed, answer.encode() + b"\n")  # waits in the terminal's buffer until the prompt reads it
        return subprocess.run([sys.executable, "-m", "fleetctl", *args], cwd=cwd, env=env, stdin=terminal,
                              capture_output=True, text=True, timeout=120)
    finally:
        os.close(typed)
        os.close(terminal)


@pytest.mark.parametrize("answer, code, words", [
    ("no", 1, "Apply cancelled; nothing was changed."),
    ("yes", 0, "Apply complete! 13 launched"),
], ids=["no", "yes"])
def test_apply_asks_as_terraform_does_and_acts_only_on_yes(answer, code, words, tmp_path):
    shutil.copytree(REPO / "policies", tmp_path / "policies")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    assert run(tmp_path, "jobs", "submit", "examples/jobs.yaml").returncode == 0
    result = run(tmp_path, "apply", answer=answer)
    assert result.returncode == code, result.stdout + result.stderr
    assert words in result.stdout + result.stderr
    # click showed the prompt's empty default as "[]": "... Only 'yes' will be accepted []: "
    assert "Do you want to perform these actions? Only 'yes' will be accepted: " in result.stdout, result.stdout
    assert "[]" not in result.stdout
