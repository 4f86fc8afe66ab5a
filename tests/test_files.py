"""fleetctl.files: atomic writes that keep the permissions a user expects."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from fleetctl.files import directory_reason, follow_symlink, umask, write_text_atomic


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


def test_a_symlink_is_written_through_and_a_loop_refused_the_same_on_every_python(tmp_path):
    """Path.resolve() raised RuntimeError for a symlink loop before Python 3.13 and returns
    the loop unresolved since: on 3.13 the write replaced the looping link with a file."""
    (tmp_path / "link.csv").symlink_to("target.csv")  # dangling: the write creates its target
    assert follow_symlink(tmp_path / "link.csv") == tmp_path / "target.csv"
    assert write_text_atomic(tmp_path / "link.csv", "a\n") == tmp_path / "target.csv"
    assert (tmp_path / "link.csv").is_symlink() and (tmp_path / "target.csv").read_text() == "a\n"
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    for loop in ("a", "b"):
        with pytest.raises(OSError) as caught:
            write_text_atomic(tmp_path / loop, "x\n")
        assert caught.value.errno == errno.ELOOP and caught.value.filename == str(tmp_path / loop)
    assert (tmp_path / "a").is_symlink() and (tmp_path / "b").is_symlink()  # both links kept
