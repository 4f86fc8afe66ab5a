"""`fleetctl forecast train|evaluate demand`: the GPU demand forecaster (docs/forecasting.md)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from fleetctl.cli.common import console, err_console, fail, refuse_repeated, report_dir_or_exit
from fleetctl.cli.forecast import SeedOption, check_output_or_exit, evaluate_app, finite_or_null, \
    load_model_or_exit, save_model_or_exit, train_app
from fleetctl.cli.forecast_interruption import whole_minutes
from fleetctl.cli.tables import print_table
from fleetctl.codec import dt_to_str

SeriesOption = Annotated[list[Path], typer.Option(
    "--series", help="Demand-series CSV (time_utc,gpu_model,gpus; docs/forecasting.md); repeat for several.",
    show_default=False, metavar="<path>")]
SinceOption = Annotated[Optional[str], typer.Option(
    "--since", help="Only origins at or after this time (ISO-8601 with a zone).", show_default=False)]
UntilOption = Annotated[Optional[str], typer.Option(
    "--until", help="Only origins whose target time (origin + horizon) is at or before this time (ISO-8601 with "
                    "a zone).", show_default=False)]


def _time(flag: str, text: str | None) -> datetime | None:
    from fleetctl.jobspec import parse_utc_timestamp

    if text is None:
        return None
    try:
        return parse_utc_timestamp(text)
    except ValueError as exc:
        fail(f"{flag}: {exc}", 2)


def _series(paths: list[Path]):  # noqa: ANN202 - list of DemandSeries
    from fleetctl.yamlerrors import SpecError
    from forecasting.series import read_demand_series

    if not paths:
        fail("give at least one --series CSV", 2)
    refuse_repeated("--series", paths)
    out, bad = [], False
    for path in paths:
        try:
            out.extend(read_demand_series(path))
        except SpecError as exc:
            for issue in exc.issues:
                err_console.print(str(issue), markup=False)
            bad = True
    if bad:
        raise typer.Exit(2)
    return out


@train_app.command("demand", short_help="Train the demand model on demand series.")
def train_demand(
    series: SeriesOption = [],  # noqa: B006 - typer needs a list default
    output: Annotated[Path, typer.Option("-o", "--output", help="Directory to save the model into (a model "
                                         "of the same kind there is replaced; one of another kind, or other "
                                         "files, are refused).")]
    = Path("models/demand"),
    horizons: Annotated[str, typer.Option("--horizons", help="Comma-separated horizons, e.g. 15m,1h,6h "
                                                             "(at most 24h).")] = "15m,1h,6h",
    since: SinceOption = None,
    until: UntilOption = None,
    seed: SeedOption = 0,
) -> None:
    """Train the demand model (median and 90th percentile per horizon) and save it.

    Samples every series every 5 minutes; features are scale-free and use only
    the past 24 hours; the target is the change from the last value. --until
    is the time split: nothing after it is trained on. Hyperparameters are
    chosen on the last 30% of the training window. A series with less than 36
    hours inside the training window is left out (and said so); exit code 2 for
    bad input or when no series is left."""
    from forecasting.demand import DemandModel

    try:
        wanted = [whole_minutes(h) for h in horizons.split(",") if h.strip()]
    except ValueError as exc:
        fail(f"--horizons: {exc}", 2)
    if not wanted:  # checked here, before the series are read, not by the training after
        fail(f"--horizons: give at least one horizon, e.g. 15m,1h,6h (got {horizons!r})", 2)
    since_utc, until_utc = _time("--since", since), _time("--until", until)
    if since_utc is not None and until_utc is not None and until_utc <= since_utc:
        fail("--until must be after --since", 2)
    check_output_or_exit(output, "demand")  # before training, not after
    data = _series(series)
    from forecasting.demand import series_digest

    first_of: dict[str, str] = {}
    for s in data:
        key = series_digest(s)
        if key in first_of:
            fail(f"{s.name} and {first_of[key]} are the same series (the same demand twice would defeat the "
                 "calibration across series)", 2)
        first_of[key] = s.name
    with err_console.status("training") as status:  # stderr, as backtest's progress: stdout is the result
        try:
            model = DemandModel.train(data, horizons_minutes=wanted, since_utc=since_utc, until_utc=until_utc,
                                      seed=seed, progress=lambda text: status.update(text))
        except ValueError as exc:
            fail(str(exc), 2)
    path, replaced = save_model_or_exit(model, output)
    m = model.metadata
    first, last = m["training_window_utc"]
    for left_out in m["skipped_series"]:
        console.print(f"left out {left_out['reason']}", markup=False)
    console.print(f"{'replaced the model in' if replaced else 'saved'} {path}: {len(m['training_series'])} series, "
                  f"training window {first} .. {last}", markup=False)
    for h in model.horizons_minutes:
        t = m["training_metrics"][str(h)]
        console.print(f"  +{h} min: {m['samples'][str(h)]} samples, training MAE {t['mae']:.3f} GPUs, pinball p90 "
                      f"{t['pinball_p90']:.3f}, p90 coverage {t['p90_coverage']:.1%}", markup=False)


@evaluate_app.command("demand", short_help="Score the demand model beside two baselines.")
def evaluate_demand(
    model_dir: Annotated[Path, typer.Option("--model", help="Model directory (from `forecast train demand`).",
                                            show_default=False)],
    series: SeriesOption = [],  # noqa: B006
    horizon: Annotated[str, typer.Option("--horizon", help="One of the model's horizons, e.g. 1h.")] = "1h",
    since: Annotated[Optional[str], typer.Option(
        "--since", help="Only origins at or after this time (ISO-8601 with a zone). Default: the end of the "
                        "model's training window (--until of `train`), else every origin.",
        show_default=False)] = None,
    until: UntilOption = None,
    output_format: Annotated[str, typer.Option("--format", help="table or json.", metavar="<table|json>")] = "table",
    report: Annotated[Optional[Path], typer.Option(
        "--report", help="Directory to write demand_forecast_MINUTESm.png into (e.g. demand_forecast_60m.png).", show_default=False)] = None,
    allow_version_mismatch: Annotated[bool, typer.Option(
        "--allow-version-mismatch", help="Use a model saved with another scikit-learn version (warns).")] = False,
) -> None:
    """Score the model at one horizon beside the last-value and seasonal-naive baselines.

    Origins every 5 minutes with 24 hours of history before them. JSON:
    {"samples", "mae", "pinball_p90", "p90_coverage", "baselines":
    {"last_value": {"mae", "pinball_p90"}, "seasonal_naive": {"mae",
    "pinball_p90"}}}, in GPUs."""
    from forecasting.demand import DemandModel, evaluate, forecast_plot, series_digest

    if output_format not in ("table", "json"):
        fail(f"--format must be table or json (got {output_format!r})", 2)
    try:
        h = whole_minutes(horizon)
    except ValueError as exc:
        fail(f"--horizon: {exc}", 2)
    model = load_model_or_exit(DemandModel.load, model_dir, allow_version_mismatch)
    if h not in model.horizons_minutes:
        fail(f"--horizon: {model_dir} has no {horizon} horizon (it has "
             f"{', '.join(f'{m} min' for m in model.horizons_minutes)})", 2)
    since_utc = _time("--since", since)
    if since_utc is None and model.metadata.get("training_until_utc"):
        since_utc = _time("training_until_utc", model.metadata["training_until_utc"])
    until_utc = _time("--until", until)
    if since_utc is not None and until_utc is not None and until_utc <= since_utc:
        fail(f"--until ({dt_to_str(until_utc)}) must be after --since "
             f"({dt_to_str(since_utc)}{'' if since else ', the end of the model training window'})", 2)
    data = _series(series)
    first_s, last_s = min(float(s.times_s[0]) for s in data), max(float(s.times_s[-1]) for s in data)
    span = (f"{dt_to_str(datetime.fromtimestamp(first_s, timezone.utc))} .. "
            f"{dt_to_str(datetime.fromtimestamp(last_s, timezone.utc))}")
    if since_utc is not None and since_utc.timestamp() >= last_s:
        fail(f"--since {dt_to_str(since_utc)}{'' if since else ' (the end of the model training window)'} is "
             f"after the series end: they cover {span}", 2)
    if until_utc is not None and until_utc.timestamp() <= first_s:
        fail(f"--until {dt_to_str(until_utc)} is before the series start: they cover {span}", 2)
    trained_until = model.metadata.get("training_until_utc")
    if since and trained_until and since_utc is not None and since_utc < _time("training_until_utc", trained_until):
        err_console.print(f"note: --since is before the end of the model training window ({trained_until}): "
                          "the scores include origins of the training period", markup=False)
    seen = {s["sha256"] for s in model.metadata.get("training_series", [])}
    for s in data:
        if series_digest(s) in seen:
            err_console.print(f"note: {s.name} was also a training series (scored only from "
                              f"{dt_to_str(since_utc) if since_utc else 'its start'})", markup=False)
    report_dir_or_exit(report)
    try:
        result = evaluate(model, data, h, since_utc=since_utc, until_utc=until_utc)
    except ValueError as exc:
        default = "" if since or since_utc is None else \
            " (--since defaults to the end of the model training window; give an earlier one to score earlier origins)"
        fail(f"{exc}{default}", 2)
    curves = result.pop("_curves")
    skipped = result.pop("_skipped")
    if skipped:
        err_console.print(f"note: not scored (no origin with 24 hours of history and the {h}-minute outcome inside "
                          f"the window): {', '.join(skipped)}", markup=False)
    if output_format == "json":
        print(json.dumps(finite_or_null(result), indent=2, allow_nan=False))
    else:
        table = Table(title=f"demand +{h} min, {result['samples']} origins (GPUs)")
        for col in ("", "MAE", "pinball p90", "p90 coverage"):
            table.add_column(col, justify="right" if col else "left")
        table.add_row("model", f"{result['mae']:.3f}", f"{result['pinball_p90']:.3f}",
                      f"{result['p90_coverage']:.1%}")
        for name, s in result["baselines"].items():
            table.add_row(name, f"{s['mae']:.3f}", f"{s['pinball_p90']:.3f}", "")
        print_table(console, table)
    if report is not None:  # after the results: a failure here loses nothing
        try:
            err_console.print(f"wrote {forecast_plot(curves, h, report / f'demand_forecast_{h}m.png')}",
                              markup=False)
        except OSError as exc:
            fail(f"--report {report}: cannot write the report: {exc.strerror or exc} (the results are above)")
