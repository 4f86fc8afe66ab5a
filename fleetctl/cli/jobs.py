"""`fleetctl jobs submit|list|cancel`."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from fleetctl.cli.common import PolicyOption, StateOption, console, err_console, fail, load_policy_or_exit, one_of, \
    open_store, store_may_exist, TableFormat, utcnow, utf8_or_exit, comma_list
from fleetctl.cli.tables import print_table
from fleetctl.codec import dt_to_str, job_to_dict
from fleetctl.model import JobState
from fleetctl.render import counted

app = typer.Typer(help="Submit jobs to the queue, list them, cancel them.", no_args_is_help=True)


@app.command()
def submit(
    files: Annotated[list[Path], typer.Argument(help="Job files (YAML or JSON): one job, a list, or {jobs: [...]}.")],
    policy: PolicyOption = None,
    state: StateOption = None,
) -> None:
    """Validate job specs against the policy and store them in the queue.

    All files are checked first; if any has an error, every error is printed as
    FILE:LINE:COLUMN: field.path: message, nothing is stored, and the exit code is 2.
    A deadline_utc at or before now is such an error; one before now plus the job's
    duration_hours (it cannot finish in time even if it starts at once) is printed as a
    warning on stderr, and the job is submitted; so is a job that no offer of the shipped
    catalog which the policy allows can hold (too many GPUs per worker, a GPU model no
    offer has), with the reason `plan` and `explain` will give.
    Re-submitting an identical job is a no-op (one that finished or was cancelled is
    not run again, and the output says so); a different job under an existing id is
    refused, at that job, with the fields that differ: ids are never reused, even after
    `fleetctl prune --finished-older-than-days` deleted the finished job (its id and
    spec are kept for this). An id in two files is an error at the second, naming the
    first; a file given twice is read once. A job already in the queue (or pruned) is
    not checked against the deadline rule again: re-submitting the same file stays a
    no-op after one of its deadlines passes."""
    pol, _ = load_policy_or_exit(policy, code=2)
    now = utcnow()
    store = _OpenedOnUse(state)
    try:
        _submit(files, pol, now, store)
    finally:
        store.close()


class _OpenedOnUse:
    """The state store, opened when first needed: files with errors leave no store behind."""

    def __init__(self, state: str | None) -> None:
        self._state, self._store = state, None

    def get(self):  # noqa: ANN201
        if self._store is None:
            self._store = open_store(self._state)
        return self._store

    def holds(self, job_id: str) -> bool:
        """Whether ``job_id`` is stored (or was, and was pruned: its tombstone is); a store not created yet
        holds nothing (and is not created here)."""
        if self._store is None and not store_may_exist(self._state):
            return False
        return bool(self.get().job_states([job_id], pruned=True))

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def _submit(files: list[Path], pol, now: datetime, opened: _OpenedOnUse) -> None:  # noqa: ANN001
    from fleetctl.jobspec import JobSource, load_job_sources
    from fleetctl.store import DuplicateJob
    from fleetctl.yamlerrors import SpecError

    sources: list[JobSource] = []
    warnings = []
    bad = False
    for path in _distinct_files(files):
        try:
            sources.extend(load_job_sources(path, submitted_at_utc=now, policy=pol, warn=warnings.append,
                                            stored=opened.holds))  # asked only of deadlines past or too soon
        except SpecError as exc:
            bad = True
            for issue in exc.issues:
                err_console.print(str(issue), markup=False)
    if bad:
        fail("no job was submitted", 2)
    first: dict[str, JobSource] = {}
    for source in sources:
        job_id = source.job.job_id
        if job_id in first:  # within a file the parser has refused it already
            bad = True
            other = first[job_id]
            where = other.doc.position(other.at + ("id",))
            err_console.print(str(source.issue("id", f"job id {job_id!r} is also used at {other.doc.file}:"
                                                     f"{where.line}:{where.column}; ids are unique across the "
                                                     "files of a submission")), markup=False)
        first.setdefault(job_id, source)
    if bad:
        fail("no job was submitted", 2)
    warnings.extend(_no_offer_warnings(sources, pol))
    for warning in warnings:
        err_console.print(str(warning), markup=False)
    jobs = [source.job for source in sources]
    ids = [j.job_id for j in jobs]
    store = opened.get()
    try:
        added, unchanged = store.add_jobs(jobs, now)
    except DuplicateJob as exc:
        changed = []
        for job_id, job_state, changes in exc.conflicts:
            source = first[job_id]
            state_text = f" ({job_state})" if job_state else ""
            for name, old, new in changes:
                changed.append(source.issue(
                    name, f"job {job_id!r} already exists{state_text} with a different {name}: "
                          f"{_spec_value(old)} -> {_spec_value(new)}"))
        for issue in sorted(changed):
            err_console.print(str(issue), markup=False)
        fail(f"{exc}; no job was submitted (a job id is never reused, even after the job finished or was "
             "cancelled, and after `fleetctl prune --finished-older-than-days` deleted it: give the changed job "
             "a new id)", 2)
    states = store.job_states(ids, pruned=True) if unchanged else {}
    console.print(f"{added} job(s) submitted, {unchanged} already in the store unchanged", markup=False)
    finished: dict[str, list[str]] = {}
    for job_id in ids:
        if job_id in states and not states[job_id].active:
            finished.setdefault(states[job_id].value, []).append(job_id)
    if finished:  # re-submitting a cancelled job does not run it again: say so rather than look like success
        parts = [f"{name}: {', '.join(sorted(found)[:5])}{f' and {len(found) - 5} more' if len(found) > 5 else ''}"
                 for name, found in sorted(finished.items())]
        console.print(f"{sum(map(len, finished.values()))} of them finished and will not run again "
                      f"({'; '.join(parts)}); to run a job again, give it a new id", markup=False)


def _no_offer_warnings(sources: list, pol) -> list:  # noqa: ANN001
    """A warning at each job that no offer of the shipped catalog snapshots which the policy allows
    can hold, with the planner's reason (what `plan` and `explain` will say). Design choice: a
    warning, not an error: offers change, and a team may submit ahead of a pool it is adding."""
    from fleetctl.planner import no_offer_holds_each
    from providers.catalog import load_catalog

    warnings = []
    for source, found in zip(sources, no_offer_holds_each((s.job for s in sources), load_catalog(), pol)):
        if found is not None:
            reason, detail = found
            warnings.append(source.doc.issue(source.at, (
                f"warning: job {source.job.job_id!r} fits no offer of the shipped catalog that the policy "
                f"allows: {detail}; `fleetctl plan` leaves it queued ({reason.value}) until one is sold")))
    return warnings


def _distinct_files(files: list[Path]) -> list[Path]:
    """``files`` without repeats: a file named twice (or by two paths) is one
    file, not two files with the same job ids."""
    seen: set[Any] = set()
    out = []
    for path in files:
        try:
            st = os.stat(path)
            ident: Any = (st.st_dev, st.st_ino)
        except OSError:  # the reader reports it
            ident = os.path.abspath(path)
        if ident not in seen:
            seen.add(ident)
            out.append(path)
    return out


def _spec_value(value: Any) -> str:
    """A job field's value as a job file writes it."""
    if value is None:
        return "null (absent)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, datetime):
        return dt_to_str(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(map(_spec_value, value)) + "]" if value else "[] (any)"
    return str(value)


TeamOption = Annotated[Optional[list[str]], typer.Option(
    "--team", help="Only this team's jobs (repeatable, or comma-separated).", metavar="TEAM", show_default=False)]


@app.command("list")
def list_jobs(
    state: StateOption = None,
    all_: Annotated[bool, typer.Option("--all", help="Include finished jobs.")] = False,
    only: Annotated[Optional[list[JobState]], typer.Option(
        "--only", help=f"Only jobs in this state: {', '.join(s.value for s in JobState)} (repeatable); "
                       "finished states (succeeded, failed, cancelled) imply --all.",
        show_default=False, **{**one_of(JobState, case_sensitive=False), "metavar": "STATE"})] = None,
    team: TeamOption = None,
    output: Annotated[TableFormat, typer.Option("--format", help="table or json.", **one_of(TableFormat))] = TableFormat.table,
) -> None:
    """Show the jobs in the store with their state and nodes. A bound or running
    job whose cancel is requested shows as `running, cancel requested` (or `bound, ...`) (JSON:
    "cancel_requested": true) until the next reconcile tick stops it."""
    wanted = set(only or ())
    team = comma_list(team)
    store = open_store(state, must_exist=True, read_only=True)
    try:
        jobs = _selected(store.jobs(active_only=not all_ and all(s.active for s in wanted)), wanted, team)
        cancelling = set(store.pending_cancellations())
    finally:
        store.close()
    if output is TableFormat.json:
        print(json.dumps([{**job_to_dict(j), "cancel_requested": j.job_id in cancelling and j.state.active}
                          for j in jobs], indent=2))
        return
    table = Table(title=counted(len(jobs), "job"))
    for col in ("id", "state", "team", "priority", "workers x GPUs", "GPU models", "spot", "nodes"):
        table.add_column(col)
    for j in jobs:
        table.add_row(
            j.job_id,
            f"{j.state.value}, cancel requested" if j.job_id in cancelling and j.state.active else j.state.value,
            j.team,
            j.priority,
            f"{j.workers} x {j.gpus_per_worker}",
            ", ".join(j.gpu_models) or "any",
            "class default" if j.spot_eligible is None else ("yes" if j.spot_eligible else "no"),
            ", ".join(j.node_ids) or "-",
        )
    print_table(console, table)


@app.command()
def cancel(
    job_ids: Annotated[Optional[list[str]], typer.Argument(
        help="Ids of the jobs to cancel; or none, with --team or --only.", show_default=False)] = None,
    team: Annotated[Optional[list[str]], typer.Option(
        "--team", help="Instead of ids: cancel the unfinished jobs of this team (repeatable, or comma-separated).",
        metavar="TEAM",
        show_default=False)] = None,
    only: Annotated[Optional[list[JobState]], typer.Option(
        "--only", help="Instead of ids: cancel the jobs in this state: queued, bound or running (repeatable); "
                       "with --team, that team's jobs in it.",
        show_default=False, **{**one_of(JobState, case_sensitive=False), "metavar": "STATE"})] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Show the jobs it would cancel, and cancel none.")] = False,
    reason: Annotated[str, typer.Option("--reason", help="Why, for the audit log.")] = "",
    state: StateOption = None,
) -> None:
    """Cancel jobs, by id or by team and state.

    Name them by id, or select the unfinished jobs of a team and/or a state
    (`--team ml-research --only queued`; `--dry-run` shows them). A queued job is cancelled at once; a bound or running one at the next
    reconcile tick (`fleetctl reconcile --once`, or the daemon's next pass), which stops it
    and leaves its nodes idle for the policy's idle timeout. Finished jobs are left as they
    are, and so are those `fleetctl prune --finished-older-than-days` deleted (the output
    gives their final state and when they finished). An unknown id is an error (exit code 2)
    and nothing is cancelled; a selection that matches no job cancels nothing and exits 0."""
    from fleetctl.store import UnknownJobs

    states = set(only or ())
    team = comma_list(team)
    job_ids = utf8_or_exit("job id", job_ids or ())
    team = utf8_or_exit("--team", team)
    [reason] = utf8_or_exit("--reason", (reason,))
    if job_ids and (team or states):
        fail("name jobs by id, or select them with --team/--only, not both", 2)
    if not job_ids and not (team or states):
        fail("name the jobs to cancel by id, or select them with --team and/or --only "
             "(`fleetctl jobs cancel --help`)", 2)
    finished = sorted(s.value for s in states if not s.active)
    if finished:
        fail(f"--only {', '.join(finished)}: a finished job cannot be cancelled; choose queued, bound or running", 2)
    store = open_store(state, must_exist=True)
    try:
        if not job_ids:
            job_ids = [j.job_id for j in _selected(store.jobs(active_only=True), states, team)]
            if not job_ids:  # as `kubectl delete -l` and `scancel --user` end: not an error
                console.print(f"no unfinished job matches {_selection(team, states)}; nothing to cancel",
                              markup=False)
                return
        if dry_run:
            known = store.job_states(job_ids, pruned=True)
            unknown = [i for i in dict.fromkeys(job_ids) if i not in known]
            if unknown:
                fail(f"no such job: {', '.join(unknown)}", 2)
            for job_id in dict.fromkeys(job_ids):
                left = "" if known[job_id].active else ", left as it is"
                console.print(f"{job_id}: {known[job_id].value}{left}", markup=False)
            console.print(f"--dry-run: {counted(sum(known[i].active for i in set(job_ids)), 'job')} would be "
                          "cancelled; nothing was changed", markup=False)
            return
        outcome = store.request_cancel(job_ids, utcnow(), reason)
    except UnknownJobs as exc:  # an id on the command line; a damaged store is not (exit 1, as `jobs list`)
        fail(str(exc), 2)
    finally:
        store.close()
    words = {"cancelled": "cancelled", "requested": "cancel requested: stopped at the next reconcile tick"}
    for job_id, result in outcome.items():
        console.print(f"{job_id}: {words.get(result, result + ', left as it is')}", markup=False)


def _selected(jobs, states, teams):  # noqa: ANN001, ANN202 - Iterable[Job], set[JobState], list[str] | None
    """The jobs in one of ``states`` (any when empty) of one of ``teams`` (any when None or empty)."""
    return tuple(j for j in jobs if (not states or j.state in states) and (not teams or j.team in teams))


def _selection(teams: list[str] | None, states: set[JobState]) -> str:
    parts = ([f"--team {','.join(teams)}"] if teams else []) + \
            ([f"--only {' '.join(sorted(s.value for s in states))}"] if states else [])
    return " ".join(parts)
