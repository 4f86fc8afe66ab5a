"""A store this user can only read: a copy of a WAL-mode ``state.db``, without
its ``-wal`` and ``-shm`` files, in a directory nobody here may write.

SQLite reads a WAL database through ``state.db-shm``, which it must create,
so every open failed there, ``mode=ro`` too ("attempt to write a readonly
database"), and ``status`` and ``jobs list`` could not show the copy. The
commands run in a subprocess: as root (the tests' user) permission bits are
ignored, so there the subprocess runs without the capabilities that ignore
them (``setpriv``), as root; elsewhere it runs as this user."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from fleetctl.store import Store
from tests.builders import T0, job

REPO = Path(__file__).resolve().parents[2]
CAPS = "-dac_override,-dac_read_search,-fowner"


def _unprivileged() -> list[str]:
    """The command prefix that makes permission bits apply to a subprocess."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    prefix = [setpriv, f"--inh-caps={CAPS}", f"--bounding-set={CAPS}"] if setpriv else []
    if not prefix or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("as root, permission bits apply only without CAP_DAC_OVERRIDE, and setpriv cannot drop it here")
    return prefix


def _run(prefix: list[str], *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    return subprocess.run([*prefix, sys.executable, *args], cwd=REPO, env={**env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def read_only_copy(tmp_path):
    """(the copy's path, the subprocess prefix); the copy holds jobs a and b."""
    prefix = _unprivileged()
    live = Store(f"sqlite:///{tmp_path / 'live' / 'state.db'}")
    live.add_jobs([job("a"), job("b")], T0)
    live.close()
    copy = tmp_path / "ro" / "state.db"
    copy.parent.mkdir()
    shutil.copy(tmp_path / "live" / "state.db", copy)
    assert copy.read_bytes()[18:20] == b"\x02\x02"  # WAL mode, recorded in the file's header
    copy.chmod(0o444)
    copy.parent.chmod(0o555)
    # The situation is real: SQLite alone cannot read it, mode=ro or not.
    probe = _run(prefix, "-c", f"import sqlite3; sqlite3.connect('file:{copy}?mode=ro', uri=True)"
                               ".execute('SELECT count(*) FROM jobs').fetchall()")
    assert probe.returncode != 0 and "readonly database" in probe.stderr, probe.stderr
    yield copy, prefix
    copy.parent.chmod(0o755)


def test_status_and_jobs_list_read_a_wal_store_in_a_read_only_directory(read_only_copy):
    copy, prefix = read_only_copy
    url = f"sqlite:///{copy}"
    listed = _run(prefix, "-m", "fleetctl", "jobs", "list", "--format", "json", "--state", url)
    assert listed.returncode == 0, listed.stderr
    assert sorted(j["id"] for j in json.loads(listed.stdout)) == ["a", "b"]
    status = _run(prefix, "-m", "fleetctl", "status", "--format", "json", "--state", url)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["jobs"] == {"queued": 2}
    assert sorted(p.name for p in copy.parent.iterdir()) == ["state.db"]  # nothing created, nothing changed


def test_changes_only_in_the_wal_file_are_refused_naming_the_files_and_the_fix(tmp_path):
    """With a ``-wal`` beside the copy, reading without ``-shm`` would skip
    the changes in it: refused, saying what to copy where."""
    prefix = _unprivileged()
    live = Store(f"sqlite:///{tmp_path / 'live' / 'state.db'}")
    live.add_jobs([job("a")], T0)
    live.close()
    held = sqlite3.connect(tmp_path / "live" / "state.db")  # a daemon's connection: its changes stay in -wal
    held.execute("PRAGMA wal_autocheckpoint=0")
    held.execute("INSERT INTO events (at_utc, kind, subject, payload) VALUES ('2026-11-02T09:00:00Z', 'x', '', '{}')")
    held.commit()
    copy = tmp_path / "ro" / "state.db"
    copy.parent.mkdir()
    for suffix in ("", "-wal"):
        shutil.copy(tmp_path / "live" / f"state.db{suffix}", tmp_path / "ro" / f"state.db{suffix}")
    held.close()
    assert (tmp_path / "ro" / "state.db-wal").stat().st_size > 0
    copy.parent.chmod(0o555)
    try:
        listed = _run(prefix, "-m", "fleetctl", "jobs", "list", "--state", f"sqlite:///{copy}")
    finally:
        copy.parent.chmod(0o755)
    text = " ".join(listed.stderr.split())
    assert listed.returncode == 1 and "Traceback" not in text, listed.stderr
    assert f"{copy}-wal" in text and "copy" in text and "writable directory" in text, text


@pytest.mark.parametrize("state", [None, "explicit"], ids=["default", "state-option"])
def test_a_store_in_a_directory_this_user_cannot_write_says_where_to_keep_it(tmp_path, state):
    """Run from a read-only working directory (a container's), `plan` said only "cannot open
    state store sqlite:////app/.fleetctl/state.db: Permission denied: /app/.fleetctl": not that
    this is the default store, nor how to keep the store elsewhere."""
    prefix = _unprivileged()
    here = tmp_path / "here"
    here.mkdir()
    here.chmod(0o555)
    store = here / ".fleetctl" / "state.db" if state is None else here / "state.db"
    option = () if state is None else ("--state", f"sqlite:///{store}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    try:
        planned = subprocess.run([*prefix, sys.executable, "-m", "fleetctl", "plan", *option,
                                  "--policy", str(REPO / "policies" / "example.yaml")],
                                 cwd=here, env={**env, "COLUMNS": "200"},
                                 capture_output=True, text=True, timeout=120)
    finally:
        here.chmod(0o755)
    text = " ".join(planned.stderr.split())
    assert planned.returncode == 1 and "Traceback" not in text, planned.stderr
    assert f"cannot open state store sqlite:///{store}" in text, text
    where = " (the default store, under the working directory)" if state is None else ""
    assert (f"{here} is not writable{where}: pass --state sqlite:////PATH/state.db or set FLEETCTL_STATE to "
            "keep it in a directory this user may write") in text, text
    assert list(here.iterdir()) == []


def test_a_read_only_store_refuses_writes_and_keeps_the_file_as_it_was(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    Store(url).close()
    before = (tmp_path / "state.db").read_bytes()
    store = Store(url, read_only=True)
    try:
        assert store.read_only and store.jobs() == ()
        with pytest.raises(Exception, match="readonly"):
            store.add_jobs([job("a")], T0)
    finally:
        store.close()
    assert (tmp_path / "state.db").read_bytes() == before


def _downgrade(url: str, revision: str) -> None:
    """The store at ``url`` as a fleetctl of schema ``revision`` left it (the migrations' own downgrade)."""
    from tests.store.migrate import downgrade

    store = Store(url)
    downgrade(store, revision)
    store.close()


def test_a_read_only_command_upgrades_an_older_store_it_may_write(tmp_path):
    """The first command after upgrading fleetctl is often ``status``: a store of an older schema
    that this user may write is upgraded, not refused as "this command only reads"."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    store.add_jobs([job("a")], T0)
    head = store.schema_revision()
    store.close()
    _downgrade(url, "0005")
    reader = Store(url, read_only=True)
    try:
        assert reader.schema_revision() == head and [j.job_id for j in reader.jobs()] == ["a"]
    finally:
        reader.close()


def test_a_read_only_command_on_an_older_store_it_cannot_write_says_so(read_only_copy):
    copy, prefix = read_only_copy
    copy.parent.chmod(0o755)
    copy.chmod(0o644)
    _downgrade(f"sqlite:///{copy}", "0005")
    for extra in ("-wal", "-shm"):
        (copy.parent / f"state.db{extra}").unlink(missing_ok=True)
    copy.chmod(0o444)
    copy.parent.chmod(0o555)
    listed = _run(prefix, "-m", "fleetctl", "jobs", "list", "--state", f"sqlite:///{copy}")
    text = " ".join(listed.stderr.split())
    assert listed.returncode == 1 and "Traceback" not in text, listed.stderr
    assert "schema revision 0005, older than this fleetctl's" in text and "only reads" in text, text
    assert sorted(p.name for p in copy.parent.iterdir()) == ["state.db"]  # nothing created, nothing changed


def test_a_write_refused_by_the_files_permissions_names_the_store_and_why(tmp_path):
    """A store whose file this user may only read, in a directory it may write: a command that
    only reads works; one that writes fails in one line naming the store (a user with several
    stores could not tell which) and what is wrong, and changes nothing."""
    prefix = _unprivileged()
    path = tmp_path / "store" / "state.db"
    store = Store(f"sqlite:///{path}")
    store.add_jobs([job("a")], T0)
    store.close()
    path.chmod(0o444)
    url = f"sqlite:///{path}"
    listed = _run(prefix, "-m", "fleetctl", "jobs", "list", "--format", "json", "--state", url)
    assert listed.returncode == 0, listed.stderr
    cancel = _run(prefix, "-m", "fleetctl", "jobs", "cancel", "a", "--state", url)
    assert cancel.returncode == 1 and "Traceback" not in cancel.stderr, cancel.stderr
    assert " ".join(cancel.stderr.split()) == (
        f"Error: state store error ({url}): OperationalError: attempt to write a readonly database; this user may "
        "not write the store's file (or its directory): run the command as a user who may, or make them writable")
    path.chmod(0o644)
    again = Store(url)
    try:
        assert [(j.job_id, j.state.value) for j in again.jobs()] == [("a", "queued")]
    finally:
        again.close()
