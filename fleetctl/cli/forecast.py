"""`fleetctl forecast train|evaluate`: the interruption-risk and demand models.

The commands themselves live in ``forecast_interruption.py`` and
``forecast_demand.py``; this module only groups them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(help="Train and evaluate the forecasting models (interruption risk, demand).",
                  no_args_is_help=True)
train_app = typer.Typer(help="Train a model on market traces or demand series and save it to a directory (the daemon's "
                        "retraining uses what its store recorded).", short_help="Train a model and save it to a directory.",
                        no_args_is_help=True)
evaluate_app = typer.Typer(help="Measure a saved model against naive baselines on held-out data.",
                           no_args_is_help=True)
app.add_typer(train_app, name="train")
app.add_typer(evaluate_app, name="evaluate")


#: The models the controller commands plan with (daemon, reconcile, plan, explain).
ForecastDirOption = Annotated[Optional[Path], typer.Option(
    "--forecast-dir", show_default=False,
    help="Model directory with interruption/ and/or demand/ (`fleetctl forecast train ...`): each pass turns "
    "them into the planner's forecast from what the store recorded. Without it, the policy's default risk.")]
#: The models' seed: scikit-learn takes a random_state of 0 .. 2**32 - 1 (numpy's legacy seed), and said so in
#: its own words, naming no option, only once the series had been read; typer refuses it up front.
SeedOption = Annotated[int, typer.Option("--seed", min=0, max=2**32 - 1, help="Seed of the model (0 .. 2**32 - 1).")]
AllowMismatchOption = Annotated[bool, typer.Option(
    "--allow-version-mismatch", help="Use models saved with another scikit-learn version (warns).")]


def load_forecaster_or_exit(forecast_dir: Path | None, allow_version_mismatch: bool):  # noqa: ANN201
    """The ``ModelForecaster`` of ``--forecast-dir`` (None without it); an unusable directory exits 2."""
    if forecast_dir is None:
        return None
    from forecasting.runtime import ModelForecaster

    return load_model_or_exit(ModelForecaster, forecast_dir, allow_version_mismatch, what="--forecast-dir")


def load_model_or_exit(load, model_dir, allow_version_mismatch: bool, what: str = ""):  # noqa: ANN001, ANN201
    """``load(model_dir, allow_version_mismatch=...)`` (a model class's ``load``); a
    model that cannot be used exits 2 with the reason (after ``what``, the option
    that named it); what fleetctl warns of it (``ModelWarning``: another
    scikit-learn version, a save put back) is printed as one ``warning:`` line
    each. Other warnings (a library's deprecation) go through Python's
    filters, as if not caught here."""
    import warnings

    from fleetctl.cli.common import err_console, fail
    from forecasting.modelfiles import ModelError, ModelWarning

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ModelWarning)
            model = load(model_dir, allow_version_mismatch=allow_version_mismatch)
    except ModelError as exc:
        fail(f"{what}: {exc}" if what else str(exc), 2)
    for w in caught:
        if issubclass(w.category, ModelWarning):
            err_console.print(f"warning: {w.message}", markup=False)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    return model


def finite_or_null(value):  # noqa: ANN001, ANN201 - JSON-like
    """``value`` with every NaN or infinity replaced by None: ``--format json`` prints valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    return value


def check_output_or_exit(output: Path, kind: str) -> None:
    """Refuse a -o the ``kind`` model could not be saved into (or that holds a
    model of another kind) before training, not after."""
    from fleetctl.cli.common import fail
    from forecasting.modelfiles import ModelError, check_target

    try:
        check_target(output, kind)
    except ModelError as exc:
        fail(f"-o {exc}", 2)


def save_model_or_exit(model, output: Path) -> tuple[Path, bool]:  # noqa: ANN001 - a model with .save
    """Save (all at once; see forecasting.modelfiles.save); (path, whether a model was replaced)."""
    from fleetctl.cli.common import fail
    from forecasting.modelfiles import ModelError

    replaced = (output / "model.json").exists()
    try:
        return model.save(output), replaced
    except ModelError as exc:
        fail(f"-o {exc}", 2)
    except OSError as exc:
        fail(f"{output}: cannot save the model: {exc.strerror or exc} (the previous model, if any, is kept)", 2)


def _register() -> None:
    # Each module adds its `train X` and `evaluate X` commands to the two groups above.
    from fleetctl.cli import forecast_demand, forecast_interruption  # noqa: F401


_register()
