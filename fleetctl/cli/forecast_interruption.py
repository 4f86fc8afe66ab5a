"""`fleetctl forecast train|evaluate interruption`: the spot interruption-risk model (docs/forecasting.md)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from fleetctl.cli.common import console, err_console, fail, refuse_repeated, report_dir_or_exit
from fleetctl.cli.forecast import SeedOption, check_output_or_exit, evaluate_app, finite_or_null, \
    load_model_or_exit, save_model_or_exit, train_app
from fleetctl.cli.tables import print_table
from fleetctl.yamlerrors import describe_value

MarketsOption = Annotated[list[Path], typer.Option(
    "--market", help="Market manifest YAML (docs/traces.md); repeat for several.", show_default=False,
    metavar="<path>")]


#: The longest horizon either model forecasts: their features look back a day (forecasting.demand's
#: MAX_HORIZON_MINUTES), and the planner asks for 1h.
MAX_HORIZON_MINUTES = 24 * 60
_UNIT_MINUTES = {"m": 1.0, "h": 60.0, "d": 1440.0}
_DURATION_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([mhd])\s*")


def parse_duration(text: str) -> timedelta:
    """``90m``, ``1h``, ``6h``, ``1d`` -> a timedelta; ``ValueError`` otherwise
    (also for a duration longer than a timedelta holds, about 2.7 million years)."""
    m = _DURATION_RE.fullmatch(text)
    if not m:
        raise ValueError(f"{describe_value(text)} is not a duration like 15m, 1h or 6h")
    value, unit = float(m.group(1)), m.group(2)
    try:
        out = timedelta(minutes=value) if unit == "m" else timedelta(hours=value) if unit == "h" \
            else timedelta(days=value)
    except OverflowError:  # float('1' + 400 zeros) is inf; 99999999999999d is past timedelta's range
        raise ValueError(f"{describe_value(text)} is too long a duration") from None
    if out <= timedelta(0):
        raise ValueError(f"{describe_value(text)}: the duration must be above 0")
    return out


def whole_minutes(text: str, at_most_minutes: int = MAX_HORIZON_MINUTES) -> int:
    """A horizon: a duration (``parse_duration``) that is a whole number of
    minutes, above 0 and at most ``at_most_minutes`` (24 hours); ``ValueError``
    otherwise. The bound is checked on the number as written, before any
    timedelta is made, so a huge value is refused with the bound rather than
    an OverflowError."""
    m = _DURATION_RE.fullmatch(text)
    if m and not float(m.group(1)) * _UNIT_MINUTES[m.group(2)] <= at_most_minutes:  # inf too
        raise ValueError(f"{describe_value(text)}: a horizon is at most {at_most_minutes // 60}h (the features look "
                         "back a day)")
    minutes = parse_duration(text).total_seconds() / 60
    if not minutes.is_integer():
        raise ValueError(f"{describe_value(text)}: a horizon must be a whole number of minutes")
    return int(minutes)


def _markets(paths: list[Path]):  # noqa: ANN202 - list of Market
    from fleetctl.sim.market import load_market
    from fleetctl.yamlerrors import SpecError
    from forecasting.interruption import check_span

    if not paths:
        fail("give at least one --market MANIFEST", 2)
    refuse_repeated("--market", paths)
    out = []
    for path in paths:
        try:
            out.append(load_market(path))
        except SpecError as exc:
            for issue in exc.issues:
                err_console.print(str(issue), markup=False)
            raise typer.Exit(2)
        except OSError as exc:
            fail(f"{path}: {exc.strerror or exc}", 2)
        try:
            check_span(out[-1])  # before the grid of samples is built, which would take gigabytes
        except ValueError as exc:
            fail(f"{path}: {exc}", 2)
    return out


@train_app.command("interruption", short_help="Train the interruption-risk model on market traces.")
def train_interruption(
    market: MarketsOption = [],  # noqa: B006 - typer needs a list default
    output: Annotated[Path, typer.Option("-o", "--output", help="Directory to save the model into (a model "
                                         "of the same kind there is replaced; one of another kind, or other "
                                         "files, are refused).")]
    = Path("models/interruption"),
    train_fraction: Annotated[float, typer.Option(
        "--train-fraction", help="Share (0..1) of each market's period, from its start, to train on; the rest "
                                 "is left for `evaluate`.")] = 0.7,
    horizon: Annotated[str, typer.Option("--horizon", help="Horizon of the probability, e.g. 30m, 1h (whole minutes, at most "
                                                     "24h).")] = "1h",
    seed: SeedOption = 0,
) -> None:
    """Train the interruption-risk model on market traces and save it.

    Samples every offer every 10 minutes; the label is whether its spot
    capacity drops within the horizon; features use only the past (availability,
    losses of the offer, of its zone, of its type elsewhere, prices, time of
    day). Trains on the first --train-fraction of the period, split by time.
    Exit code 2 for bad input."""
    from forecasting.interruption import InterruptionModel

    try:
        h = timedelta(minutes=whole_minutes(horizon))
    except ValueError as exc:
        fail(f"--horizon: {exc}", 2)
    if not 0 < train_fraction < 1:
        fail(f"--train-fraction must be between 0 and 1 (got {train_fraction})", 2)
    check_output_or_exit(output, "interruption")  # before training, not after
    markets = _markets(market)
    with err_console.status("training") as status:  # stderr, as backtest's progress: stdout is the result
        try:
            model = InterruptionModel.train(markets, horizon=h, train_fraction=train_fraction, seed=seed,
                                            progress=lambda text: status.update(text))
        except ValueError as exc:
            fail(str(exc), 2)
    path, replaced = save_model_or_exit(model, output)
    m = model.metadata
    console.print(f"{'replaced the model in' if replaced else 'saved'} {path}: {m['samples']} samples ({m['positives']} losses), training AUC "
                  f"{m['training_metrics']['auc']:.3f}, Brier {m['training_metrics']['brier']:.4f}", markup=False)


@evaluate_app.command("interruption", short_help="Score the interruption model beside two baselines.")
def evaluate_interruption(
    model_dir: Annotated[Path, typer.Option("--model", help="Model directory (from `forecast train "
                                                            "interruption`).", show_default=False)],
    market: MarketsOption = [],  # noqa: B006
    output_format: Annotated[str, typer.Option("--format", help="table or json.", metavar="<table|json>")] = "table",
    report: Annotated[Optional[Path], typer.Option(
        "--report", help="Directory to write reliability.png into.", show_default=False)] = None,
    allow_version_mismatch: Annotated[bool, typer.Option(
        "--allow-version-mismatch", help="Use a model saved with another scikit-learn version (warns).")] = False,
) -> None:
    """Score the model on the part of each market after its training window, beside two baselines.

    Baselines: the training base rate, and each offer's own loss rate over the
    last 24 hours. JSON: {"samples", "positives", "auc", "brier", "baselines":
    {"base_rate": {"auc", "brier"}, "recent_rate": {"auc", "brier"}}}."""
    from forecasting.interruption import InterruptionModel, evaluate, reliability_plot

    if output_format not in ("table", "json"):
        fail(f"--format must be table or json (got {output_format!r})", 2)
    model = load_model_or_exit(InterruptionModel.load, model_dir, allow_version_mismatch)
    markets = _markets(market)
    report_dir_or_exit(report)
    try:
        result = evaluate(model, markets)
    except ValueError as exc:
        fail(str(exc), 2)
    y, p = result.pop("_arrays")
    if result["positives"] in (0, result["samples"]):
        err_console.print(f"note: AUC is undefined: the {result['samples']} evaluation samples have "
                          f"{'no' if result['positives'] == 0 else 'only'} losses (JSON shows null)", markup=False)
    if output_format == "json":
        print(json.dumps(finite_or_null(result), indent=2, allow_nan=False))
    else:
        table = Table(title=f"interruption risk, {result['samples']} samples, {result['positives']} losses")
        for col in ("", "AUC", "Brier"):
            table.add_column(col, justify="right" if col else "left")
        table.add_row("model", f"{result['auc']:.3f}", f"{result['brier']:.4f}")
        for name, s in result["baselines"].items():
            table.add_row(name, f"{s['auc']:.3f}", f"{s['brier']:.4f}")
        print_table(console, table)
    if report is not None:  # after the results: a failure here loses nothing
        try:
            err_console.print(f"wrote {reliability_plot(y, p, report / 'reliability.png')}", markup=False)
        except OSError as exc:
            fail(f"--report {report}: cannot write the report: {exc.strerror or exc} (the results are above)")
