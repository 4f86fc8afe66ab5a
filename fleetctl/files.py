"""Writing output files all at once.

A file that fleetctl writes (a job trace, a demand series) appears whole or
not at all: the text goes to a temporary file beside the target and is
renamed over it at the end, so a full disk or a Ctrl-C never leaves half a
file that a later command would read. A symlink is written through (its
target is replaced, the link kept); a device, directory or other non-regular
file is refused rather than replaced by a regular file.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def umask() -> int:
    """The process's umask, read without changing it where the system tells
    (Linux); elsewhere set and restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass  # no /proc: ask the system call instead, below
    current = os.umask(0o077)
    os.umask(current)
    return current


def cannot_create_reason(path: Path) -> str | None:
    """Why nothing can be created at ``path`` (its nearest existing ancestor
    is not a directory, or is not writable), or None: checked before long
    work, so a bad output path fails at once rather than after it."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def directory_reason(path: str) -> str | None:
    """Why ``path``, an output file as typed, names a directory, or None: it
    ends in a path separator, '.' or '..' (``Path`` drops a trailing separator,
    so ``Path("out/")`` would write a file named ``out``), or it is an
    existing directory."""
    if os.path.basename(path) in ("", ".", ".."):
        return "names a directory (the path ends with a separator, '.' or '..')"
    if os.path.isdir(path):
        return "is a directory"
    return None


def follow_symlink(path: str | os.PathLike[str]) -> Path:
    """The absolute path symlink ``path`` leads to, through every link on the
    way; a dangling link's target too (the file a write would create).
    ``OSError`` (``ELOOP``, naming ``path``) for a symlink loop, on every
    Python: ``Path.resolve()`` raised ``RuntimeError`` for one before 3.13 and
    returns the loop unresolved since, so a write went over the link itself."""
    link = Path(path)
    try:
        return link.resolve(strict=True)
    except RuntimeError:  # a loop, Python 3.11 and 3.12
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a loop, Python 3.13
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from None
    try:
        return link.resolve()  # dangling: where the link points
    except RuntimeError:  # a loop made since, before Python 3.13
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from None


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8, line endings as given) to ``path`` all at once;
    returns the path written (a symlink's target). Creates missing parent
    directories. Raises ``OSError`` (with ``filename``) when it cannot."""
    out = Path(path)
    if out.is_symlink():
        out = follow_symlink(out)
    if out.exists() and not out.is_file():
        raise OSError(errno.EEXIST, "exists and is not a regular file", str(out))
    blocking = next((p for p in reversed(out.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:  # mkdir's own error would say only "File exists"
        raise OSError(errno.ENOTDIR, f"{blocking} is a file, not a directory", str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    # The mode of the file it replaces, else what the umask gives a new file (mkstemp's 0600 made
    # traces and plans unreadable to the daemon's or CI's user, and tightened replaced files).
    mode = out.stat().st_mode & 0o7777 if out.exists() else 0o666 & ~umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
