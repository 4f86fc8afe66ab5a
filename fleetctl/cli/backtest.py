"""`fleetctl backtest`: replay a job trace on a spot market, fleetctl against its peers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Annotated, Optional

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rich.markup import escape

from fleetctl.cli.forecast import AllowMismatchOption
from fleetctl.cli.common import report_dir_or_exit
from fleetctl.cli.common import PolicyOption, console, err_console, fail, load_policy_or_exit
from fleetctl.cli.tables import print_table


def backtest(
    jobs: Annotated[Path, typer.Option("--jobs", help="Job-trace CSV (docs/traces.md).", show_default=False)],
    market: Annotated[Path, typer.Option("--market", help="Market manifest YAML (docs/traces.md).",
                                         show_default=False)],
    policy: PolicyOption = None,
    compare: Annotated[str, typer.Option(
        "--compare", help="Baselines to run besides fleetctl, comma-separated: on-demand, spot-greedy, "
                          "skypilot-failover, fleetctl-no-forecast (fleetctl without --forecast-model).")
    ] = "on-demand,spot-greedy,skypilot-failover",
    forecast_model: Annotated[Optional[Path], typer.Option(
        "--forecast-model",
        help="Interruption model directory (`fleetctl forecast train interruption`). The fleetctl run then "
             "sees, at each moment, the model's reclaim probability per offer computed from the market up to "
             "that moment (never later); without it, the policy's default risk.", show_default=False)] = None,
    allow_version_mismatch: AllowMismatchOption = False,
    output_format: Annotated[str, typer.Option("--format", help="table or json.", metavar="<table|json>")] = "table",
    report: Annotated[Optional[Path], typer.Option(
        "--report", help="Directory to write backtest.png into (cumulative cost and running GPUs over "
                         "time).", show_default=False)] = None,
    tick_seconds: Annotated[float, typer.Option("--tick-seconds", help="Simulated seconds between reconcile "
                                                                       "ticks (1 to 86400).")] = 300.0,
    launch_delay_seconds: Annotated[float, typer.Option(
        "--launch-delay-seconds", help="Mean simulated launch-to-ready time of a node (0 to 86400).")] = 60.0,
    restart_overhead_minutes: Annotated[float, typer.Option(
        "--restart-overhead-minutes",
        help="Simulated minutes every start and restart of a job spends before doing work (pulling the image, "
             "loading the checkpoint), for every policy alike; its nodes are paid meanwhile and the time counts "
             "as lost GPU-hours (0 to 1440). 0, the default, starts work at once, as the committed results do; "
             "the policy's interruptions.restart_overhead_minutes is what fleetctl's planner assumes.")] = 0.0,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the simulated provider (node ids, launch "
                                                            "delays; 0 or more).", envvar="FLEETCTL_SEED")] = 0,
) -> None:
    """Simulate fleetctl and baselines on a job trace and a spot market (docs/backtest.md).

    Every policy runs through the same controller tick on a virtual clock; the
    result is the cost, useful and lost GPU-hours, waits, deadline misses and
    interruptions of each, and a lower bound of the cost. Offers the policy
    excludes are listed on stderr before the run. Exit code 2 for bad input."""
    from fleetctl.sim.backtest import NO_OFFER, NO_OFFER_IN_BUDGET, exclusions, parse_compare, result_document, run_backtest, write_report
    from fleetctl.sim.market import load_market
    from fleetctl.sim.simulator import SimConfig
    from fleetctl.sim.traces import read_job_trace
    from fleetctl.yamlerrors import SpecError

    if output_format not in ("table", "json"):
        fail(f"--format must be table or json (got {output_format!r})", 2)
    try:
        names = parse_compare(compare)
    except ValueError as exc:
        fail(f"--compare {compare}: {exc}", 2)
    try:
        if not 0 <= restart_overhead_minutes <= 1440:  # also refuses NaN
            raise ValueError(f"--restart-overhead-minutes must be from 0 to 1440 (got {restart_overhead_minutes:g})")
        config = SimConfig(tick_seconds=tick_seconds, launch_delay_seconds=launch_delay_seconds, seed=seed,
                           restart_overhead_seconds=restart_overhead_minutes * 60)
    except ValueError as exc:
        fail(str(exc).replace("tick_seconds", "--tick-seconds").replace("launch_delay_seconds",
                                                                         "--launch-delay-seconds"), 2)
    report_dir_or_exit(report)  # before minutes of simulation, not after
    pol, pol_path = load_policy_or_exit(policy, 2)
    try:
        mkt = load_market(market)
        trace = read_job_trace(jobs, pol)
    except SpecError as exc:
        for issue in exc.issues:
            err_console.print(str(issue), markup=False)
        raise typer.Exit(2)
    if not trace:
        fail(f"{jobs}: no jobs", 2)
    forecaster = None
    if forecast_model is not None:
        forecaster = _market_forecaster(forecast_model, mkt, allow_version_mismatch)
    lines = exclusions(mkt, pol, trace)
    for line in lines:
        err_console.print(f"[yellow]note:[/] policy {pol_path}: {escape(line)}")
    if any(line.startswith((NO_OFFER, NO_OFFER_IN_BUDGET)) for line in lines):
        fail(f"policy {pol_path} leaves no usable offer of {market} (see the note above): no job could run; "
             "nothing was simulated", 2)
    _check_times(trace, mkt, config, jobs, market)
    if "fleetctl-no-forecast" in names and forecast_model is None:
        err_console.print("[yellow]note:[/] without --forecast-model, fleetctl-no-forecast is the same run as "
                          "fleetctl")
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), console=err_console, transient=True) as bar:
        tasks = {name: bar.add_task(name, total=1.0) for name in names}
        result = run_backtest(trace, mkt, pol, names, config,
                              progress=lambda name, f: bar.update(tasks[name], completed=f), forecaster=forecaster)
    doc = result_document(result)
    _print(doc, output_format, len(trace))
    if report is not None:  # after the results, so a failure here loses nothing
        try:
            path = write_report(result, str(report))
        except ImportError:
            fail("--report needs matplotlib (pip install matplotlib)", 2)
        except OSError as exc:
            fail(f"--report {report}: cannot write the report: {exc.strerror or exc} (the results are above)")
        err_console.print(f"wrote {path}", markup=False)


def _check_times(trace, mkt, config, jobs_path: Path, market_path: Path) -> None:  # noqa: ANN001
    """Jobs the simulation would never submit (after the market's end plus the
    overrun) are an error; jobs after the market's end get a note (no spot there),
    and so do jobs before its start: the run then starts at the first job, and
    simulates every day up to the market without spot (an Alibaba trace of
    February beside a market of August is months of on-demand only)."""
    from fleetctl.codec import dt_to_str
    from fleetctl.sim.simulator import simulation_end

    start, end = mkt.start_utc, mkt.end_utc
    try:
        cap = simulation_end(mkt, trace, config)
    except ValueError as exc:
        fail(f"{market_path}: {exc}", 2)
    never = [j.job_id for j in trace if j.submitted_at_utc >= cap]
    if never:
        fail(f"{jobs_path}: {len(never)} job(s) are submitted after the simulation ends ({dt_to_str(cap)}: the end "
             f"of {market_path}, {dt_to_str(end)}, plus {config.overrun_hours:g} hours for unfinished work): "
             f"{_some(never)}", 2)
    early = [j for j in trace if j.submitted_at_utc < start]
    if early:
        first = min(j.submitted_at_utc for j in early)
        err_console.print(f"note: {len(early)} job(s) are submitted before {market_path} starts ({dt_to_str(start)}), "
                          f"where it has no spot capacity, only on-demand; the run starts at the first of them "
                          f"({dt_to_str(first)}): {_some([j.job_id for j in early])}", markup=False)
    late = [j.job_id for j in trace if j.submitted_at_utc >= end]
    if late:
        err_console.print(f"note: {len(late)} job(s) are submitted after {market_path} ends ({dt_to_str(end)}), "
                          f"where no spot capacity is left, only on-demand: {_some(late)}", markup=False)


def _some(job_ids: list[str]) -> str:
    """The first five ids, then ' ...' if there are more."""
    return f"{', '.join(job_ids[:5])}{' ...' if len(job_ids) > 5 else ''}"


def _print(doc: dict, output_format: str, jobs: int) -> None:
    if output_format == "json":
        print(json.dumps(doc, indent=2, sort_keys=False))
        return
    od = doc["policies"].get("on-demand", {}).get("cost_usd")
    lb = doc["lower_bound_cost_usd"]
    # One column per policy, one row per metric: stays readable in an 80-column terminal.
    table = Table(title=f"backtest: {jobs} jobs, lower bound ${lb:,.2f}")
    table.add_column("metric", justify="left")
    for name in doc["policies"]:
        table.add_column(name, justify="right")
    rows: list[tuple[str, Callable[[dict], str]]] = [
        ("cost $", lambda m: f"{m['cost_usd']:,.2f}"),
        ("x on-demand", lambda m: f"{m['cost_usd'] / od:.3f}" if od else "-"),
        ("x lower bound", lambda m: f"{m['cost_usd'] / lb:.3f}" if lb else "-"),
        ("useful GPU-h", lambda m: f"{m['useful_gpu_hours']:,.1f}"),
        ("lost GPU-h", lambda m: f"{m['lost_gpu_hours']:,.2f}"),
        ("GPU utilisation", lambda m: f"{m['gpu_utilization']:.3f}"),
        ("wait p50 h", lambda m: f"{m['wait_p50_hours']:.3f}"),
        ("wait p95 h", lambda m: f"{m['wait_p95_hours']:.3f}"),
        ("deadline misses", lambda m: str(m["deadline_misses"])),
        ("jobs done/total", lambda m: f"{m['jobs_completed']}/{m['jobs_total']}"),
        ("jobs lost", lambda m: str(m["jobs_lost"])),
        ("interruptions", lambda m: str(m["interruptions"])),
        ("migrations", lambda m: str(m["migrations"])),
    ]
    for label, cell in rows:
        table.add_row(label, *(cell(m) for m in doc["policies"].values()))
    print_table(console, table)


def _market_forecaster(path: Path, market, allow_version_mismatch: bool = False):  # noqa: ANN001, ANN202
    """Load the interruption model at ``path`` (a RiskForecaster over ``market``) as the forecast
    commands and --forecast-dir do: exit 2 with the reason if it cannot be used, a version
    mismatch allowed as one ``warning:`` line (it was Python's UserWarning with a source line)."""
    from fleetctl.cli.forecast import load_model_or_exit
    from forecasting.interruption import load_for_planning

    model = load_model_or_exit(load_for_planning, path, allow_version_mismatch, what="--forecast-model")
    return lambda now: model.risks(market, now)

