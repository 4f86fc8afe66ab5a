"""`fleetctl report`: spend and GPU-hours by team (or provider, market, GPU
model, region) over a window, for showback. Read-only; the computation is
``fleetctl.report`` (pure), this module reads the store and prints."""

from __future__ import annotations

import csv
import dataclasses
import enum
import json
import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Optional

import typer
from rich.table import Table

from fleetctl.cli.common import WHEN_HELP, NamedPolicyOption, StateOption, console, err_console, fail, \
    load_policy_or_exit, comma_list, one_of, open_store, parse_when, utcnow
from fleetctl.codec import show_utc
from fleetctl.model import Job
from fleetctl.report import IDLE, KINDS, STOP_KINDS, AuditEvent, GroupKey, NodeRecord, Report, Row, build_report, \
    job_runs, report_to_document


class ReportFormat(str, enum.Enum):
    table = "table"
    json = "json"
    csv = "csv"


DEFAULT_SINCE = "7d"


def parse_by(values: list[str] | None) -> tuple[GroupKey, ...]:
    """The ``--by`` keys (repeatable, or comma-separated), each once, in order."""
    keys: list[GroupKey] = []
    for word in comma_list(values or ["team"]):
        try:
            key = GroupKey(word)
        except ValueError:
            fail(f"--by {word!r} is not one of {', '.join(repr(k.value) for k in GroupKey)}", 2)
        if key not in keys:
            keys.append(key)
    return tuple(keys)


def report(
    since: Annotated[Optional[str], typer.Option(
        "--since", show_default=False, metavar="WHEN",
        help=f"Start of the window (included): {WHEN_HELP}. Default: {DEFAULT_SINCE}.")] = None,
    until: Annotated[Optional[str], typer.Option(
        "--until", show_default=False, metavar="WHEN", help="End of the window (excluded), as --since. Default: now.")] = None,
    by: Annotated[Optional[list[str]], typer.Option(
        "--by", show_default=False, metavar="KEY",
        help="Group rows by team (the job's), provider, market, gpu_model or region (the node's offer); "
        "repeatable or comma-separated (--by team,provider). Default: team. By team, the GPUs no job held "
        "are the (idle) row, and the rows sum to the fleet's spend.")] = None,
    output: Annotated[ReportFormat, typer.Option(
        "--format", help="table; json for scripts (with format_version; docs/report.md); csv (one line per row, "
        "then (total); the notes go to stderr).", **one_of(ReportFormat))] = ReportFormat.table,
    state: StateOption = None,
    policy: NamedPolicyOption = None,
) -> None:
    """Spend and GPU-hours per team (or per provider, market, GPU model, region) over a window,
    from the store's nodes and audit log: node-hours, GPU-hours bought, USD spent (each node's
    USD/hour over its live time in the window), GPU-hours held by jobs and the USD they are
    charged (the node's USD per GPU-hour times the GPUs a job holds while it runs), jobs
    completed, and GPU-hours lost to reclaims and preemptions. Read-only.

    The policy is read only when --policy or $FLEETCTL_POLICY names one: then every team it names
    gets a row (by team alone), even one that used nothing. A window older than the store's pruned
    history (`fleetctl prune --finished-older-than-days`) is reported as covered only from the cut.
    Columns, the attribution formula and examples: docs/report.md."""
    now = utcnow()
    start = parse_when("--since", since if since is not None else DEFAULT_SINCE, now)
    end = parse_when("--until", until, now) if until is not None else now
    if end <= start:
        fail(f"--until {until or 'now'!r} ({show_utc(end)}) is not after --since {since or DEFAULT_SINCE!r} "
             f"({show_utc(start)}): the window is empty", 2)
    future = None
    if end > now:  # nothing is spent after now: a node live now would be charged up to a future --until
        if start >= now:
            fail(f"--since {since!r} ({show_utc(start)}) is not before now ({show_utc(now)}): the window has not "
                 "begun, nothing is spent in it yet", 2)
        future, end = end, now
    keys = parse_by(by)
    named = policy is not None or bool(os.environ.get("FLEETCTL_POLICY"))
    teams = tuple(t.name for t in load_policy_or_exit(policy, 2)[0].teams) if named else ()
    store = open_store(state, must_exist=True, read_only=True)  # none: exit 1, as status and jobs list
    try:
        result = read_report(store, start, end, keys, teams)
    finally:
        store.close()
    if future is not None:
        result = dataclasses.replace(result, notes=(
            f"--until {until!r} ({show_utc(future)}) is in the future: the window is reported up to now "
            f"({show_utc(end)})", *result.notes))
    if output is ReportFormat.json:
        print(json.dumps(report_to_document(result), indent=2))
    elif output is ReportFormat.csv:
        write_csv(result)
    else:
        print_table(result)


@dataclass(frozen=True)
class ReportInputs:
    """What ``read_inputs`` reads for a window; ``build_report`` takes the rest."""

    records: tuple[NodeRecord, ...]
    reach: datetime  # the audit log is read from here (the oldest node live at ``since``'s launch)
    events: tuple[AuditEvent, ...]
    jobs: dict[str, Job]
    notices: tuple
    covered_from: datetime | None
    open_runs_kept: bool = False  # the prunes kept the start of each run open at their cut


def read_inputs(store, since: datetime, until: datetime,  # noqa: ANN001 - a Store
                timings: dict[str, float] | None = None) -> ReportInputs:
    """Read what the window needs from ``store`` (``timings``: each step's
    seconds, for benchmarks/report_history.py).

    Design choice: bounded reads, none of all history. The nodes are those
    not gone plus those recorded gone at ``since`` or later
    (``Store.nodes_live_since``: through the state indexes). A job running
    at ``since`` runs on nodes live then, so it started after the oldest of
    those nodes launched: the audit log is read from that launch (or from
    ``since``, if later) to ``until``, through the index on ``at_utc`` and
    only the kinds the report uses (``fleetctl.report.KINDS``). A fleet
    whose oldest live node has run for months reads those months of job
    starts and stops; nothing older. The specs are read for the jobs those
    entries name for a run in the window or a stop in it only (stored
    jobs, else pruned jobs' tombstones), and the reclaim notices for the
    nodes read only."""
    clock = [time.perf_counter()]

    def lap(step: str) -> None:
        if timings is not None:
            now = time.perf_counter()
            timings[step] = now - clock[0]
            clock[0] = now

    records = tuple(NodeRecord(node, gone) for node, gone in store.nodes_live_since(since)
                    if node.launched_at_utc < until)
    lap("nodes")
    reach = min((r.node.launched_at_utc for r in records if r.node.launched_at_utc < since), default=since)
    events = tuple(AuditEvent(seq=e["seq"], at_utc=e["at_utc"], kind=e["kind"], subject=e["subject"],
                              payload=e["payload"] if isinstance(e["payload"], dict) else {})
                   for e in store.events_between(reach, until, KINDS))
    lap("events")
    # the specs of the jobs that count: those with a run in the window on a node read, or a stop entry in it
    runs, _ = job_runs((e for e in events if e.kind == "start" or e.kind in STOP_KINDS), since, until)
    read = {r.node.node_id for r in records}
    job_ids = sorted({r.job_id for r in runs if r.stop_utc > since and read.intersection(r.node_ids)}
                     | {e.subject for e in events if e.kind in STOP_KINDS and e.at_utc >= since})
    jobs = {j.job_id: j for j in store.jobs(job_ids=job_ids)}
    missing = [i for i in job_ids if i not in jobs]
    if missing:
        jobs.update({job_id: job for job_id, (job, _) in store.pruned_jobs(missing).items()})
    lap("jobs")
    notices = store.interruptions(unhandled_only=False, node_ids=[r.node.node_id for r in records]) if records else ()
    covered = store.history_complete_from()
    kept = store.open_runs_kept()
    lap("notices_and_coverage")
    return ReportInputs(records, reach, events, jobs, tuple(notices), covered, kept)


def read_report(store, since: datetime, until: datetime, by: tuple[GroupKey, ...],  # noqa: ANN001 - a Store
                teams: tuple[str, ...] = ()) -> Report:
    """Read what the window needs from ``store`` (``read_inputs``) and build the report."""
    i = read_inputs(store, since, until)
    return build_report(since=since, until=until, by=by, nodes=i.records, events=i.events, jobs=i.jobs,
                        notices=i.notices, covered_from=i.covered_from, teams=teams,
                        open_runs_kept=i.open_runs_kept)


_COLUMNS = (("node_hours", "node-h", 2), ("gpu_hours", "GPU-h", 2), ("usd", "USD", 2),
            ("allocated_gpu_hours", "GPU-h held by jobs", 2), ("allocated_usd", "USD charged to jobs", 2),
            ("jobs_completed", "jobs done", 0), ("reclaim_lost_gpu_hours", "GPU-h lost: reclaims", 2),
            ("preempt_lost_gpu_hours", "GPU-h lost: preemptions", 2))


def _cells(row: Row) -> list[str]:
    return [f"{getattr(row, name):,.{places}f}" if places else str(getattr(row, name))
            for name, _, places in _COLUMNS]


def print_table(result: Report) -> None:
    keys = [k.value for k in result.by]
    table = Table(title=f"{show_utc(result.since_utc)} to {show_utc(result.until_utc)} (UTC), by {', '.join(keys)}")
    for key in keys:
        table.add_column(key)
    for _, title, _ in _COLUMNS:
        table.add_column(title, justify="right")
    for row in result.rows:
        table.add_row(*row.key, *_cells(row))
    table.add_section()
    table.add_row(*(["total"] + [""] * (len(keys) - 1)), *_cells(result.total))
    console.print(table)
    for note in result.notes:
        console.print(f"Note: {note}.", markup=False)
    if GroupKey.team in result.by:
        console.print(f"By team, the rows (with {IDLE}) sum to the total spend.", markup=False)


def write_csv(result: Report) -> None:
    keys = [k.value for k in result.by]
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow([*keys, *(name for name, _, _ in _COLUMNS)])
    for row in (*result.rows, result.total):
        out.writerow([*row.key, *(round(getattr(row, name), 6) if places else getattr(row, name)
                                  for name, _, places in _COLUMNS)])
    for note in result.notes:
        err_console.print(f"warning: {note}", markup=False)
