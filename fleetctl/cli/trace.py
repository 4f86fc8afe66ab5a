"""`fleetctl trace import alibaba-2023|helios-sequence`: public cluster traces -> job traces and demand series."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from fleetctl.cli.common import console, err_console, fail, output_file_or_exit
from fleetctl.cli.tables import print_table

app = typer.Typer(help="Import public cluster traces: job traces for the simulator, demand series for the "
                  "forecaster.", short_help="Import public cluster traces.", no_args_is_help=True)
import_app = typer.Typer(help="Convert a public cluster trace into a job trace (docs/traces.md) or a demand series "
                         "(docs/forecasting.md).", short_help="Convert a public cluster trace into a CSV.",
                         no_args_is_help=True)
app.add_typer(import_app, name="import")


@import_app.command("alibaba-2023", short_help="Alibaba GPU trace v2023 pod list -> job trace.")
def alibaba_2023(
    pod_csv: Annotated[Path, typer.Argument(help="Pod list of the Alibaba GPU trace v2023, e.g. "
                                                 "openb_pod_list_gpuspec33.csv.", show_default=False)],
    start: Annotated[str, typer.Option("--start", help="Wall-clock time of the trace's second 0, ISO-8601 with a "
                                                       "time zone, e.g. 2023-02-15T00:00:00Z.", show_default=False)],
    output_text: Annotated[str, typer.Option("-o", "--output", help="Job-trace CSV file to write ('-' for stdout; "
                                                                    "the summary then goes to stderr); a directory, "
                                                                    "a path ending in '/', or pod_csv itself is "
                                                                    "refused.",
                                             metavar="<path>", show_default=False)],
    include_cpu: Annotated[bool, typer.Option("--include-cpu", help="Keep CPU-only pods too.")] = False,
    pending_duration_hours: Annotated[Optional[float], typer.Option(
        "--pending-duration-hours",
        help="Keep Pending pods (never scheduled) with this duration in hours. Default: drop them.",
        show_default=False)] = None,
    priority_map: Annotated[Optional[str], typer.Option(
        "--priority-map",
        help="qos -> priority class, e.g. LS=production,BE=batch; entries replace those of the default: "
             "LS=production, Guaranteed=production, Burstable=batch, BE=batch.", show_default=False)] = None,
    team: Annotated[str, typer.Option("--team", help="Team of every job (the trace has none).")] = "default",
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the random choices below (0 or more).")] = 0,
    checkpointable_fraction: Annotated[float, typer.Option(
        "--checkpointable-fraction", min=0.0, max=1.0, help="Fraction of jobs (0..1) made checkpointable.")] = 0.0,
    checkpoint_interval_minutes: Annotated[float, typer.Option(
        "--checkpoint-interval-minutes",
        help="Checkpoint interval of the checkpointable jobs (at least 1, finite).")] = 30.0,
    deadline_fraction: Annotated[float, typer.Option(
        "--deadline-fraction", min=0.0, max=1.0,
        help="Fraction of jobs (0..1) given a deadline: submit + duration x a random slack in [1.5, 3].")] = 0.0,
    limit: Annotated[Optional[int], typer.Option("--limit", min=0, help="Keep at most N jobs (the earliest).",
                                                 show_default=False)] = None,
    window_hours: Annotated[Optional[float], typer.Option(
        "--window-hours",
        help="Keep pods submitted within H hours after the earliest kept pod (at most 100000).",
        show_default=False)] = None,
) -> None:
    """Convert the Alibaba GPU cluster trace v2023 pod list into a job trace.

    One pod is one job of one worker. GPU pods only unless --include-cpu;
    a pod still Running at the trace's end (its last deletion_time) is kept
    with the duration observed (right-censored); Pending
    pods are dropped unless --pending-duration-hours; fractional GPUs are
    rounded up to one GPU; G2/G3 GPU codes (undisclosed models) are removed from
    the GPU constraint. Every rule is in docs/traces.md. Bad input is reported
    as FILE:LINE:COLUMN: column: message (exit code 2)."""
    from fleetctl.jobspec import MIN_CHECKPOINT_INTERVAL_MINUTES, parse_utc_timestamp
    from fleetctl.sim.importers import DEFAULT_ALIBABA_PRIORITY_MAP, START_YEARS, AlibabaOptions, \
        import_alibaba_2023, parse_priority_map
    from fleetctl.sim.traces import format_job_trace, is_valid_name, write_job_trace
    from fleetctl.yamlerrors import SpecError

    output = output_file_or_exit("-o", output_text, "jobs.csv", inputs=(pod_csv,))
    try:
        start_utc = parse_utc_timestamp(start)
    except ValueError as exc:
        fail(f"--start: {exc}", 2)
    if not START_YEARS[0] <= start_utc.year <= START_YEARS[1]:
        fail(f"--start must be within the years {START_YEARS[0]}..{START_YEARS[1]} (got {start})", 2)
    try:
        mapping = DEFAULT_ALIBABA_PRIORITY_MAP if priority_map is None else parse_priority_map(priority_map)
    except ValueError as exc:
        fail(str(exc), 2)
    if not is_valid_name(team):
        fail(f"--team: invalid name {team!r}: use letters, digits, '-' and '_' (at most 63, starting with a letter "
             "or digit)", 2)
    for flag, value, high in (("--pending-duration-hours", pending_duration_hours, 100_000.0),
                              ("--window-hours", window_hours, 100_000.0)):
        if value is not None and not (0 < value and (high is None or value <= high)):
            fail(f"{flag} must be above 0" + (f" and at most {high:g}" if high else "") + f" (got {value:g})", 2)
    interval = checkpoint_interval_minutes  # `>=` also refuses NaN; a job trace cannot hold inf
    if not (interval >= MIN_CHECKPOINT_INTERVAL_MINUTES and math.isfinite(interval)):
        fail(f"--checkpoint-interval-minutes must be a finite number of at least {MIN_CHECKPOINT_INTERVAL_MINUTES:g} "
             f"(got {interval:g})", 2)
    try:
        options = AlibabaOptions(
            start_utc=start_utc,
            include_cpu=include_cpu,
            pending_duration_hours=pending_duration_hours,
            priority_map=mapping,
            team=team,
            seed=seed,
            checkpointable_fraction=checkpointable_fraction,
            checkpoint_interval_minutes=checkpoint_interval_minutes,
            deadline_fraction=deadline_fraction,
            limit=limit,
            window_hours=window_hours,
        )
    except ValueError as exc:
        fail(str(exc), 2)
    try:
        result = import_alibaba_2023(pod_csv, options)
    except SpecError as exc:
        for issue in exc.issues:
            err_console.print(str(issue), markup=False)
        fail(f"{pod_csv}: {len(exc.issues)} error(s); nothing was written", 2)
    if not result.jobs:
        fail(f"{pod_csv}: no job is left to write (every pod was filtered out or --limit is 0); nothing was written",
             2)
    _write_output(output, lambda: format_job_trace(result.jobs), lambda: write_job_trace(result.jobs, output))
    _print_summary(pod_csv, output, result.summary)


def _write_output(output: Path, text: Callable[[], str], write: Callable[[], object]) -> None:
    """``-o -``: the text on stdout (a file named '-' was written before); else ``write()``, all or nothing.

    Rows the output format cannot hold (``text()`` and ``write()`` raise
    ``ValueError`` listing them, one a line) are one error line naming the
    first and how many there are, exit 2, and nothing is written."""
    to_stdout = str(output) == "-"
    try:
        if to_stdout:
            body = text()
        else:
            write()
    except ValueError as exc:
        first, *rest = [line for line in str(exc).splitlines() if line.strip()][1:] or [str(exc)]
        more = f" (and {len(rest)} more)" if rest else ""
        fail(f"cannot write {'stdout' if to_stdout else output}: {first}{more}; nothing was written", 2)
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror or exc}; nothing was written", 2)
    if to_stdout:
        sys.stdout.write(body)
        sys.stdout.flush()


def _summary_target(output: Path):  # noqa: ANN202 - (a rich Console, str)
    """Where the summary goes and how it names the output: stderr and
    "stdout" when the CSV itself went to stdout."""
    return (err_console, "stdout") if str(output) == "-" else (console, str(output))


def _print_summary(source: Path, output: Path, s) -> None:  # noqa: ANN001 - an ImportSummary
    from fleetctl.sim.importers import DROP_REASONS
    from fleetctl.sim.traces import format_utc

    table = Table(title=f"{source.name}: {s.pods_read} pods -> {s.kept} jobs")
    table.add_column("", style="bold")
    table.add_column("pods", justify="right")
    table.add_column("note")
    table.add_row("read", str(s.pods_read), "")
    table.add_row("kept", str(s.kept), "")
    for reason, count in s.dropped.items():
        table.add_row("dropped", str(count), DROP_REASONS[reason])
    notes = (
        ("censored", s.censored, "Running at trace end (last deletion_time): duration = time observed so far"),
        ("pending kept", s.pending_with_assumed_duration, "never scheduled: duration assumed"),
        ("fractional GPU", s.fractional_gpu_rounded_up, "gpu_milli < 1000: rounded up to 1 GPU"),
        ("CPU-only", s.cpu_only, "kept with --include-cpu"),
        ("GPU constraint", s.gpu_spec_mapped, "gpu_spec mapped to GPU models"),
        ("G2/G3 only", s.gpu_spec_undisclosed_dropped, "only G2/G3: constraint dropped (any GPU)"),
        ("G2/G3 removed", s.gpu_spec_undisclosed_narrowed, "G2/G3 removed, the named models kept"),
        ("checkpointable", s.checkpointable, ""),
        ("with deadline", s.with_deadline, ""),
    )
    for label, count, note in notes:
        if count:
            table.add_row(label, str(count), note)
    out, written = _summary_target(output)
    print_table(out, table)
    if s.first_submit_utc is not None and s.last_submit_utc is not None:
        out.print(f"submits from {format_utc(s.first_submit_utc)} to {format_utc(s.last_submit_utc)}", markup=False)
    out.print(f"wrote {s.kept} jobs to {written}", markup=False)


@import_app.command("helios-sequence", short_help="Helios virtual-cluster sequence -> demand series.")
def helios_sequence(
    sequence_csv: Annotated[Path, typer.Argument(help="Per-minute virtual-cluster sequence of the Helios trace, "
                                                      "e.g. cluster_sequence_vc.csv.", show_default=False)],
    output_text: Annotated[str, typer.Option("-o", "--output", help="Demand-series CSV file to write (time_utc,"
                                                                    "gpu_model,gpus; '-' for stdout, the summary "
                                                                    "then goes to stderr); a directory, a path "
                                                                    "ending in '/', or sequence_csv itself is "
                                                                    "refused.",
                                             metavar="<path>", show_default=False)],
    gpu_model: Annotated[str, typer.Option(
        "--gpu-model", help="GPU model of the cluster's GPUs. Default: V100-32GB (Helios Earth is a Volta "
                            "cluster of V100-SXM2 32 GB; docs/forecasting.md).")] = "V100-32GB",
    utc_offset: Annotated[str, typer.Option(
        "--utc-offset", help="Zone of the file's wall-clock times, e.g. +08:00 (SenseTime's clusters are in "
                             "China) or Z.")] = "+08:00",
    start: Annotated[Optional[str], typer.Option(
        "--start", help="Time of the first row, ISO-8601 with a zone, for a file without a 'time' column (rows "
                        "are then one minute apart).", show_default=False)] = None,
    since: Annotated[Optional[str], typer.Option(
        "--since", help="Keep rows at or after this time (ISO-8601 with a zone).", show_default=False)] = None,
    until: Annotated[Optional[str], typer.Option(
        "--until", help="Keep rows before this time (ISO-8601 with a zone).", show_default=False)] = None,
) -> None:
    """Convert a Helios per-minute virtual-cluster sequence into a demand series.

    Demand at a minute = running_gpu_num + pending_gpu_num (GPUs in use plus
    GPUs requested by queued jobs). Bad input is reported as
    FILE:LINE:COLUMN: column: message (exit code 2) and nothing is written."""
    from fleetctl.jobspec import parse_utc_timestamp
    from fleetctl.sim.traces import format_utc
    from fleetctl.yamlerrors import SpecError
    from forecasting.series import HeliosOptions, check_gpu_model, format_demand_series, import_helios_sequence, \
        parse_offset, write_demand_series

    output = output_file_or_exit("-o", output_text, "demand.csv", inputs=(sequence_csv,))
    times = {}
    for flag, value in (("--start", start), ("--since", since), ("--until", until)):
        try:
            times[flag] = None if value is None else parse_utc_timestamp(value)
        except ValueError as exc:
            fail(f"{flag}: {exc}", 2)
    try:
        zone = parse_offset(utc_offset)
    except ValueError as exc:
        fail(f"--utc-offset: {exc}", 2)
    try:
        check_gpu_model(gpu_model)
    except ValueError as exc:
        fail(f"--gpu-model: {exc}", 2)
    if times["--since"] is not None and times["--until"] is not None and times["--until"] <= times["--since"]:
        fail(f"--until ({until}) must be after --since ({since}): the window is empty", 2)
    try:
        options = HeliosOptions(gpu_model=gpu_model, utc_offset=zone, start_utc=times["--start"],
                                since_utc=times["--since"], until_utc=times["--until"])
    except ValueError as exc:  # each option is checked above; this is the options' own contract
        fail(str(exc), 2)
    try:
        result = import_helios_sequence(sequence_csv, options)
    except SpecError as exc:
        for issue in exc.issues:
            err_console.print(str(issue), markup=False)
        fail(f"{sequence_csv}: {len(exc.issues)} error(s); nothing was written", 2)
    _write_output(output, lambda: format_demand_series(result.rows), lambda: write_demand_series(result.rows, output))
    gpus = [g for _, _, g in result.rows]
    out, written = _summary_target(output)
    out.print(f"{sequence_csv.name}: {result.rows_read} rows -> {result.kept} demand rows of {gpu_model}, "
              f"{format_utc(result.rows[0][0])} .. {format_utc(result.rows[-1][0])}; GPUs demanded: mean "
              f"{sum(gpus) / len(gpus):.1f}, max {max(gpus)}", markup=False)
    out.print(f"wrote {written}", markup=False)
