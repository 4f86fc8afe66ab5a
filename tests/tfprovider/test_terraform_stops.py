"""What stops fleetctl does not cut Terraform short (``Terraform.run``), with the real binary.

The configuration is Terraform's own ``terraform_data`` with ``local-exec`` provisioners (built
in: no provider to download). Each instance writes ``started-N``, sleeps, then appends to
``done``. fleetctl runs ``terraform apply`` in a child process, as ``fleetctl apply`` does (its
SIGTERM is ``stop_cleanly_on_sigterm``'s SystemExit), and is stopped once every provisioner has
started. Before the fix, fleetctl read Terraform's output through pipes and closed them on its
way out: Terraform died of SIGPIPE when it next wrote, after creating the resources and before
saving them, and left its state lock behind (measured: three created, none in the state).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetctl.terraform import Terraform

ROOT = Path(__file__).resolve().parents[2]
INSTANCES = 3
CONFIG = """
resource "terraform_data" "slow" {
  count = %d
  provisioner "local-exec" {
    command = "touch started-${count.index}; sleep 3; echo ${count.index} >> done"
  }
}
""" % INSTANCES

CHILD = """
import sys
from pathlib import Path
from fleetctl.cli.common import stop_cleanly_on_sigterm
from fleetctl.terraform import Terraform

stop_cleanly_on_sigterm()
Terraform(Path(sys.argv[1]), init="get").run("apply", "-auto-approve", "-input=false", "-no-color",
                                            while_waiting=lambda: None)
print("applied", file=sys.stderr)
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    assert shutil.which("terraform"), "the terraform binary must be installed (CI has /usr/local/bin/terraform)"
    (tmp_path / "main.tf").write_text(CONFIG)
    Terraform(tmp_path, init="init").init()
    return tmp_path


def _apply_then(workdir: Path, signum: int) -> subprocess.CompletedProcess:
    """Start the child's apply, send it ``signum`` once every provisioner runs, and wait for it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(workdir)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not all((workdir / f"started-{i}").exists() for i in range(INSTANCES)):
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the provisioners never started"
        time.sleep(0.05)
    child.send_signal(signum)
    out, err = child.communicate(timeout=120)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def _resources_in_state(workdir: Path) -> int:
    state = json.loads((workdir / "terraform.tfstate").read_text())
    return sum(len(r["instances"]) for r in state["resources"])


def _terraform_done(workdir: Path) -> None:
    """Wait until the apply left behind by a killed fleetctl has saved its state and let its lock go."""
    deadline = time.monotonic() + 120
    while (workdir / ".terraform.tfstate.lock.info").exists() or not (workdir / "terraform.tfstate").exists():
        assert time.monotonic() < deadline, "terraform never finished"
        time.sleep(0.1)


def test_sigterm_waits_for_terraform_which_saves_its_state(workdir: Path) -> None:
    done = _apply_then(workdir, signal.SIGTERM)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "waiting for terraform apply" in done.stderr and "applied" not in done.stderr
    assert not (workdir / ".terraform.tfstate.lock.info").exists()  # fleetctl exited after Terraform did
    assert (workdir / "done").read_text().split() and _resources_in_state(workdir) == INSTANCES


def test_a_killed_fleetctl_leaves_terraform_to_finish_and_save_its_state(workdir: Path) -> None:
    done = _apply_then(workdir, signal.SIGKILL)
    assert done.returncode == -signal.SIGKILL
    _terraform_done(workdir)
    assert _resources_in_state(workdir) == INSTANCES
    assert sorted((workdir / "done").read_text().split()) == [str(i) for i in range(INSTANCES)]
