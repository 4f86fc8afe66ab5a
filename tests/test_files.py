"""fleetctl.files: atomic writes that keep the permissions a user expects."""

from __future__ import annotations

import os
import stat

from fleetctl.files import directory_reason, umask, write_text_atomic


def test_a_new_file_gets_the_umask_mode_and_a_replaced_one_keeps_its_own(tmp_path):
    """mkstemp's 0600 made job traces, demand series and plans unreadable to
    the daemon's or CI's user, and tightened a file it replaced."""
    old = os.umask(0o022)
    try:
        assert umask() == 0o022
        new = write_text_atomic(tmp_path / "new.csv", "a\n")
        assert stat.S_IMODE(new.stat().st_mode) == 0o644
        shared = tmp_path / "shared.csv"
        shared.write_text("old\n")
        shared.chmod(0o664)
        write_text_atomic(shared, "new\n")
        assert stat.S_IMODE(shared.stat().st_mode) == 0o664 and shared.read_text() == "new\n"
    finally:
        os.umask(old)


def test_an_output_path_that_names_a_directory_is_told_apart_from_a_file(tmp_path):
    (tmp_path / "adir").mkdir()
    for path in ("new/", f"{tmp_path}/new/", "new/.", ".", "..", "", f"{tmp_path}/adir/"):
        assert "names a directory" in directory_reason(path), path
    assert directory_reason(str(tmp_path / "adir")) == "is a directory"
    for path in ("new", "new/schema.json", f"{tmp_path}/adir/schema.json", "-"):
        assert directory_reason(path) is None, path
