"""Saving and loading the forecasting models: one directory, ``model.json`` (metadata) and ``model.joblib``.

Shared by :mod:`forecasting.interruption` and :mod:`forecasting.demand`: the
library versions recorded with a model, the refusal of a model saved with
another scikit-learn version (or a warning with ``allow_version_mismatch``),
and errors that name the file.
"""

from __future__ import annotations

import json
import platform
import warnings
from pathlib import Path
from typing import Any


class ModelError(ValueError):
    """A model directory that cannot be used (missing, corrupt, another library version)."""


def versions() -> dict[str, str]:
    import numpy
    import pandas
    import sklearn

    return {"scikit-learn": sklearn.__version__, "numpy": numpy.__version__, "pandas": pandas.__version__,
            "python": platform.python_version()}


def save(directory: str | Path, estimator: Any, metadata: dict[str, Any]) -> Path:
    import joblib

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    joblib.dump(estimator, path / "model.joblib")
    (path / "model.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    return path


def read_metadata(directory: str | Path) -> tuple[Path, dict[str, Any]]:
    """The directory and its ``model.json`` as a dict; ``ModelError`` naming the path otherwise."""
    path = Path(directory)
    meta_path = path / "model.json"
    if not path.is_dir():
        raise ModelError(f"{path}: no such model directory")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelError(f"{meta_path}: cannot read the model's metadata ({exc})") from exc
    return path, meta


def load_estimator(path: Path, meta: dict[str, Any], *, kind: str, allow_version_mismatch: bool) -> Any:
    """Check the scikit-learn version the model was saved with, then unpickle it."""
    import joblib

    saved, here = meta["versions"].get("scikit-learn"), versions()["scikit-learn"]
    if saved != here:
        text = (f"{path}: the model was saved with scikit-learn {saved}, this is {here}; its predictions may "
                f"differ or fail. Retrain it (fleetctl forecast train {kind})")
        if not allow_version_mismatch:
            raise ModelError(text + ", or pass --allow-version-mismatch to use it anyway")
        warnings.warn(text, stacklevel=3)
    est_path = path / "model.joblib"
    try:
        return joblib.load(est_path)
    except Exception as exc:  # noqa: BLE001 - unpickling raises anything; report it with the path
        raise ModelError(f"{est_path}: cannot load the model ({type(exc).__name__}: {exc})") from exc
