"""`fleetctl daemon` as a child process, for the tests that drive it through
signals and HTTP: started with /metrics on a free port, its stderr drained as
it runs (a full pipe would stall its logging), stopped with SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class DaemonRun:
    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.port = 0
        self.first_line = ""
        self._stderr: list[str] = []
        self._reader = threading.Thread(target=lambda: self._stderr.extend(proc.stderr), daemon=True)
        self._reader.start()

    @property
    def err(self) -> str:
        """What it logged so far (all of it once stopped)."""
        return "".join(self._stderr)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self) -> int:
        """SIGTERM, then its exit code (it stops after the tick under way)."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self._reader.join(timeout=30)
        return code


@contextmanager
def daemon_run(cwd: Path, *args: str, env: dict[str, str]) -> Iterator[DaemonRun]:
    """``fleetctl daemon ARGS --metrics-addr 127.0.0.1:0`` in ``cwd``; yields once it serves (``run.port``).
    Killed at the end if the test left it running."""
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl", "daemon", *args, "--metrics-addr", "127.0.0.1:0"],
                            cwd=cwd, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    run = DaemonRun(proc)
    try:
        run.first_line = proc.stdout.readline()  # "fleetctl daemon: reconcile every ..., metrics on http://HOST:PORT/metrics"
        shown = re.search(r"metrics on http://[^ ]+:(\d+)/metrics", run.first_line)
        assert shown is not None, (run.first_line, proc.wait(timeout=60), run.err)
        run.port = int(shown[1])
        yield run
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def served_ports(proc: subprocess.Popen) -> tuple[str, int, int | None]:
    """A `fleetctl daemon` child's first line (``--metrics-addr``/``--notice-addr`` HOST:0 bind free ports and
    it names the real ones) and the ports it names: metrics, and notices or None. Asking the OS for a free port
    first and handing it over leaves a window in which another process may take it."""
    first = proc.stdout.readline()
    metrics = re.search(r"metrics on http://[^ ]+:(\d+)/metrics", first)
    if metrics is None:
        assert first, ("the daemon printed nothing", proc.wait(timeout=60), proc.stderr.read())
        raise AssertionError(first)
    notices = re.search(r"notices on http://[^ ]+:(\d+)/v1/notices", first)
    return first, int(metrics[1]), None if notices is None else int(notices[1])
