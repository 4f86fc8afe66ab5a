"""Saving and loading the forecasting models: one directory, ``model.json`` (metadata) and ``model.joblib``.

Shared by :mod:`forecasting.interruption` and :mod:`forecasting.demand`: the
library versions recorded with a model, the refusal of a model saved with
another scikit-learn version (or a warning with ``allow_version_mismatch``),
and errors that name the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from fleetctl.files import cannot_create_reason, follow_symlink, umask


class ModelWarning(UserWarning):
    """What fleetctl says of a model it loads anyway (saved with another
    scikit-learn version under ``--allow-version-mismatch``, a save put back);
    the CLI prints these as one ``warning:`` line each."""


class ModelError(ValueError):
    """A model directory that cannot be used (missing, corrupt, another library version)."""


def versions() -> dict[str, str]:
    import numpy
    import pandas
    import sklearn

    return {"scikit-learn": sklearn.__version__, "numpy": numpy.__version__, "pandas": pandas.__version__,
            "python": platform.python_version()}


#: The files of a model directory; a directory holding anything else is not overwritten.
MODEL_FILES = ("model.json", "model.joblib")


def _digest(estimator_bytes: bytes, metadata: dict[str, Any]) -> str:
    """Binds ``model.json`` to ``model.joblib``: the SHA-256 of the estimator's
    bytes and of the metadata (but its ``versions``, which only feed a warning,
    and the digest itself)."""
    bound = {k: v for k, v in metadata.items() if k not in ("versions", "digest")}
    h = hashlib.sha256(estimator_bytes)
    h.update(json.dumps(bound, sort_keys=True).encode())
    return h.hexdigest()


def check_target(directory: str | Path, kind: str | None = None) -> Path:
    """The Path a model saved at ``directory`` goes to (``ModelError`` naming
    why it cannot otherwise): checked by ``save`` and, so that a bad ``-o``
    fails at once rather than after training, by the CLI before it trains.

    With ``kind`` (``demand``, ``interruption``), a model there of another
    kind is refused, naming the kind found: a demand model trained into the
    interruption model's directory replaced it (the file names are the same).
    A ``model.json`` that cannot be read, or that records no kind, is refused
    too: what it is cannot be told, so it is not thrown away.

    A symlink is written through, as ``fleetctl.files`` writes output files:
    the path returned is its target, and the link is kept (the save renames
    the target, not the link). The current directory, a directory above it
    and a mount point are refused: a save replaces the whole directory by
    renames, which they cannot take (or a shell in them would be left in a
    deleted directory)."""
    if str(directory) == "-":
        raise ModelError("-: a model is a directory of files; it cannot be written to stdout")
    recover(directory)  # a model a killed save left beside it is the one there (and of its kind)
    path = Path(directory)
    if path.is_symlink():
        try:
            path = follow_symlink(path)
        except OSError as exc:  # a loop (the same on every Python: fleetctl.files.follow_symlink)
            raise ModelError(f"{directory}: cannot follow the symlink ({exc.strerror or exc})") from None
    if path.exists() and not path.is_dir():
        raise ModelError(f"{path}: exists and is not a directory")
    try:
        real, here = path.resolve(), Path.cwd().resolve()
    except (OSError, RuntimeError) as exc:
        raise ModelError(f"{path}: cannot save there: {exc}") from None
    if real == here or real in here.parents:
        raise ModelError(f"{path}: cannot save there: it is the current directory or one above it, and a save "
                         "replaces the whole directory; name a new or empty subdirectory")
    if os.path.ismount(real):
        raise ModelError(f"{path}: cannot save there: it is a mount point, and a save replaces the whole "
                         "directory; name a new or empty directory inside it")
    if path.is_dir():
        others = sorted(p.name for p in path.iterdir() if p.name not in MODEL_FILES)
        if others:
            raise ModelError(f"{path}: holds other files than a model ({', '.join(others[:3])}"
                             f"{', ...' if len(others) > 3 else ''}); save into a new or empty directory")
        if kind is not None and (path / "model.json").exists():
            _check_kind(path, kind)
    reason = cannot_create_reason(path.parent)
    if reason is not None:
        raise ModelError(f"{path}: cannot save there: {reason}")
    return path


def _check_kind(path: Path, kind: str) -> None:
    """``ModelError`` unless ``path/model.json`` records a model of ``kind``."""
    try:
        meta = json.loads((path / "model.json").read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ModelError(f"{path}: holds a model.json that cannot be read ({reason}), so what model it is cannot "
                         f"be told; save the {kind} model into a new or empty directory, or remove it") from None
    found = meta.get("kind") if isinstance(meta, dict) else None
    if found == kind:
        return
    what = f"{_a(found)} model (model.json kind {found!r})" if isinstance(found, str) and found \
        else "a model.json that records no kind"
    raise ModelError(f"{path}: holds {what}, not {_a(kind)} model, and a save would replace it; save the {kind} "
                     "model into another directory")


def not_a_model_of(meta_path: Path, meta: Any, kind: str, format_version: int) -> ModelError:
    """The error for a ``model.json`` that does not load as ``kind``'s: it
    names the kind the directory holds when that is another (a demand model
    given to ``evaluate interruption``), else the format expected."""
    found = meta.get("kind") if isinstance(meta, dict) else None
    if isinstance(found, str) and found and found != kind:
        return ModelError(f"{meta_path}: holds {_a(found)} model, not {_a(kind)} model (`fleetctl forecast train "
                          f"{kind}` saves one)")
    return ModelError(f"{meta_path}: not {_a(kind)} model of format {format_version}")


def _a(word: str) -> str:
    return f"{'an' if word[:1].lower() in tuple('aeiou') else 'a'} {word}"


def save(directory: str | Path, estimator: Any, metadata: dict[str, Any]) -> Path:
    """Save into ``directory`` all at once: the files are written to a staging
    directory beside it and swapped in by renames, so a failed save (a full
    disk, Ctrl-C) leaves the previous model as it was. An existing model is
    replaced, but not one of another kind than ``metadata["kind"]``; a
    directory holding other files is refused (``ModelError``).

    A save killed between its two renames (SIGKILL, power loss) leaves the
    previous model in ``.NAME-old-*/model`` beside ``directory`` and no
    ``directory``: the next load or save puts it back (:func:`recover`), and
    a save removes what killed saves left beside it. The files are synced
    before the renames and the renames after, so after a power loss there is
    one whole model, the new one or the previous (put back if need be)."""
    import joblib

    path = check_target(directory, metadata.get("kind"))  # puts back what a killed save left (recover)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock(path.parent):  # created and locked at once: another save removes only unlocked ones
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}-new-", dir=path.parent))
        held = _acquire(staging)  # until this save ends, by returning, raising or dying
    old = None
    try:
        os.chmod(staging, 0o777 & ~umask())  # mkdtemp's 0700 hid models from the daemon's or CI's user
        joblib.dump(estimator, staging / "model.joblib")
        meta = dict(metadata)
        meta["digest"] = _digest((staging / "model.joblib").read_bytes(), meta)
        (staging / "model.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        for name in MODEL_FILES:
            _fsync(staging / name)
        _fsync(staging)
        with _lock(path.parent):  # no load or save sees the model directory missing between the renames
            try:
                _remove_leftovers(path)
                if path.exists():
                    old = Path(tempfile.mkdtemp(prefix=f".{path.name}-old-", dir=path.parent))
                    path.rename(old / "model")
                staging.rename(path)
                _fsync(path.parent)
            except BaseException:
                if old is not None and not path.exists():
                    (old / "model").rename(path)  # put the previous model back
                raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        _release(held)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return path


def recover(directory: str | Path) -> Path | None:
    """Put back the model a save killed between its two renames left in
    ``.NAME-old-*/model`` when ``directory`` is missing (a warning says so);
    the path it was put back at, or None when there was nothing to do.

    Design choice: the previous model is put back, not the new one complete
    in ``.NAME-new-*``: a save that did not finish is a failed save, which
    keeps the previous model (its caller never heard it had succeeded), and
    a staging directory cannot be told from one another process's save is
    still writing. Done under the lock ``save`` holds across its renames, so
    a save in progress is waited for rather than taken for a killed one.
    ``ModelError`` naming both directories when the model cannot be moved
    back (a directory this user may not write)."""
    path = Path(directory)
    if path.is_symlink():
        try:
            path = follow_symlink(path)
        except OSError:
            return None
    if path.exists() or not path.parent.is_dir():
        return None
    with _lock(path.parent):
        if path.exists():  # a save finished while we waited
            return None
        candidates = sorted(_leftovers(path, "old"), key=_recency, reverse=True)
        found = next((c / "model" for c in candidates if (c / "model").is_dir()), None)
        if found is None:
            return None
        try:
            found.rename(path)
            _fsync(path.parent)
        except OSError as exc:
            raise ModelError(f"{path}: missing: a save killed midway left the previous model in {found}, and it "
                             f"cannot be moved back ({exc.strerror or exc}); move it back (mv {found} {path})"
                             ) from None
        shutil.rmtree(found.parent, ignore_errors=True)
    warnings.warn(f"{path}: a save was interrupted (killed between its renames); the previous model it had moved "
                  f"to {found} is put back", ModelWarning, stacklevel=2)
    return path


def _leftovers(path: Path, which: str) -> list[Path]:
    """The ``.NAME-old-*`` (``which`` "old") or ``.NAME-new-*`` ("new") directories
    saves of ``path`` made beside it (only those: ``.a-old-x-old-*`` is ``a-old-x``'s)."""
    pattern = re.compile(rf"\.{re.escape(path.name)}-{which}-[a-z0-9_]{{8}}")
    try:
        return [p for p in path.parent.iterdir() if pattern.fullmatch(p.name) and p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _recency(directory: Path) -> float:
    try:
        return directory.stat().st_mtime
    except OSError:
        return float("-inf")


def _remove_leftovers(path: Path) -> None:
    """Remove what killed saves of ``path`` left beside it. Called under the
    parent's lock, where no save is between its renames: every ``.NAME-old-*``
    is a killed save's (or a finished one's, being removed by it). A
    ``.NAME-new-*`` is removed only when no save holds its lock: a live save
    holds it from the moment it made it (under the same parent's lock)."""
    for leftover in _leftovers(path, "old"):
        shutil.rmtree(leftover, ignore_errors=True)
    for leftover in _leftovers(path, "new"):
        fd = _acquire(leftover, wait=False)
        if fd is not None:
            try:
                shutil.rmtree(leftover, ignore_errors=True)
            finally:
                _release(fd)


def _acquire(directory: Path, *, wait: bool = True) -> int | None:
    """An exclusive ``flock`` on ``directory``: the descriptor holding it, or
    None where it cannot be taken (no ``fcntl``, a file system without locks;
    there the renames are as safe as before, not more), or, without ``wait``,
    when another holds it. The kernel releases it when the process dies, so a
    killed save leaves no stale lock."""
    try:
        import fcntl

        fd = os.open(directory, os.O_RDONLY)
    except (ImportError, OSError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # releases the lock


@contextmanager
def _lock(directory: Path) -> Iterator[None]:
    """:func:`_acquire` (waiting) while inside."""
    fd = _acquire(directory)
    try:
        yield
    finally:
        _release(fd)


def _fsync(path: Path) -> None:
    """Flush ``path`` (a file, or a directory's entries) to the disk; a
    directory whose file system cannot sync it is left as it is."""
    is_dir = path.is_dir()
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if is_dir:  # Windows opens no directory
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not is_dir:
            raise
    finally:
        os.close(fd)


def read_metadata(directory: str | Path) -> tuple[Path, dict[str, Any]]:
    """The directory and its ``model.json`` as a dict; ``ModelError`` naming the path otherwise.
    A model a killed save left beside a missing directory is put back first (:func:`recover`)."""
    path = Path(directory)
    meta_path = path / "model.json"
    if not path.is_dir():
        recover(path)
    if not path.is_dir():
        raise ModelError(f"{path}: no such model directory")
    if not meta_path.exists():  # a directory of something else (--forecast-dir examples: its demand/ is data)
        raise ModelError(f"{path}: not a model directory: it has no model.json (`fleetctl forecast train` "
                         "writes one into the directory it saves to)")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelError(f"{meta_path}: cannot read the model's metadata ({exc})") from exc
    return path, meta


def load_estimator(path: Path, meta: dict[str, Any], *, kind: str, allow_version_mismatch: bool) -> Any:
    """Check the scikit-learn version the model was saved with, then unpickle it."""
    import joblib

    from sklearn.exceptions import InconsistentVersionWarning

    def mismatch(saved: str | None, here: str) -> str:
        return (f"{path}: the model was saved with scikit-learn {saved}, this is {here}; its predictions may "
                f"differ or fail. Retrain it (fleetctl forecast train {kind})")

    saved, here = meta["versions"].get("scikit-learn"), versions()["scikit-learn"]
    if saved != here:
        if not allow_version_mismatch:
            raise ModelError(mismatch(saved, here) + ", or pass --allow-version-mismatch to use it anyway")
        warnings.warn(mismatch(saved, here), ModelWarning, stacklevel=3)
    est_path = path / "model.joblib"
    recorded = meta.get("digest")
    if recorded is None:  # deleting it must not switch the check off
        raise ModelError(f"{path}: model.json has no digest binding it to model.joblib (edited, or saved by a "
                         f"fleetctl before 2026-11-23); retrain it (fleetctl forecast train {kind})")
    try:
        data = est_path.read_bytes()
    except OSError as exc:
        raise ModelError(f"{est_path}: cannot read the model ({exc.strerror or exc})") from exc
    if recorded != _digest(data, meta):
        raise ModelError(f"{path}: model.json and model.joblib do not belong together (changed or copied "
                         f"after the model was saved: their digest differs from the one recorded); retrain "
                         f"it (fleetctl forecast train {kind})")
    # scikit-learn warns once per estimator it unpickles from another version (six for one model):
    # the version model.json records (not part of the digest) was checked above, and said once.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InconsistentVersionWarning)
        try:
            estimator = joblib.load(est_path)
        except Exception as exc:  # noqa: BLE001 - unpickling raises anything; report it with the path
            raise ModelError(f"{est_path}: cannot load the model ({type(exc).__name__}: {exc})") from exc
    pickled = {getattr(w.message, "original_sklearn_version", None) for w in caught
               if issubclass(w.category, InconsistentVersionWarning)}
    for w in caught:
        if not issubclass(w.category, InconsistentVersionWarning):  # another warning: as if not caught here
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    if pickled and saved == here:  # model.json's versions edited: the pickle itself says otherwise
        text = mismatch(", ".join(sorted(map(str, pickled))), here)
        if not allow_version_mismatch:
            raise ModelError(text + ", or pass --allow-version-mismatch to use it anyway")
        warnings.warn(text, ModelWarning, stacklevel=3)
    return estimator
