"""`fleetctl explain JOB`: why the planner does what it does with one job."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated

import typer

from fleetctl.audit import EVENT_KINDS
from fleetctl.cli.common import (CloudOption, PolicyOption, SeedOption, StateOption, check_cloud, fail,
                                 load_policy_or_exit, open_store, utf8_or_exit)
from fleetctl.cli.forecast import AllowMismatchOption, ForecastDirOption, load_forecaster_or_exit
from fleetctl.cli.events_cmd import details
from fleetctl.cli.plan_apply import _plan_now
from fleetctl.codec import dt_to_str, show_utc
from fleetctl.model import Action, Bind, Job, JobState, Launch, Migrate, Preempt
from fleetctl.store import Store


def explain(
    job_id: Annotated[str, typer.Argument(help="The job's id (see `fleetctl jobs list`).", show_default=False)],
    policy: PolicyOption = None,
    state: StateOption = None,
    seed: SeedOption = 0,
    cloud: CloudOption = "sim",
    forecast_dir: ForecastDirOption = None,
    allow_version_mismatch: AllowMismatchOption = False,
) -> None:
    """Explain one job: the planner's decision for it with its reason, and the
    alternatives it considered (offers with their risk-adjusted cost, rules that
    ruled some out). A finished job that `fleetctl prune --finished-older-than-days`
    deleted reads as such, with its final state and when it finished. Changes no fleet and no job (on the
    sandbox its simulated nodes catch up with the clock as a cloud's would: launched ones become ready,
    reclaimed ones go)."""
    [job_id] = utf8_or_exit("job id", (job_id,))
    pol, _path = load_policy_or_exit(policy)
    check_cloud(cloud, pol)
    forecaster = load_forecaster_or_exit(forecast_dir, allow_version_mismatch)
    store = open_store(state, must_exist=True)
    try:
        # The job alone first: an unknown, pruned or finished one needs no plan (with --cloud, no cloud calls).
        stored = _stored(store, job_id)
        if isinstance(stored, Job) and stored.state.active:
            _provider, _now, _obs, result, _forecast = _plan_now(pol, store, forecaster, seed, cloud, None)
            stored = _stored(store, job_id)  # as planned: it may have finished since the first read
        history, more = store.audit_log(kinds=JOB_KINDS, about=job_id, limit=HISTORY) if stored else ((), False)
    finally:
        store.close()
    if stored is None:
        fail(f"no job {job_id!r} in the store; `fleetctl jobs list --all` shows the jobs", 2)
    if isinstance(stored, tuple):
        _explain_pruned(*stored)
        return
    job = stored
    _describe(job)
    _history(job, history, more)
    if not job.state.active:
        _nothing_to_plan(job)
        return
    decided = False
    launches = launches_for(result.actions, job_id)
    for action in result.actions:
        mine = (
            (isinstance(action, Bind) and action.job_id == job_id)
            or (isinstance(action, Preempt) and job_id in (action.job_id, action.by_job_id))
            or (isinstance(action, Migrate) and action.job_id == job_id)
        )
        if action in launches:
            it = action.offer.instance_type
            print(f"  + launch {action.count} x {it.name} {action.offer.market.value} in {action.offer.provider} "
                  f"{action.offer.region}{('/' + action.offer.zone) if action.offer.zone else ''} "
                  f"as {', '.join(action.node_names)}\n      # {action.reason.value}: {action.detail}")
        elif mine:
            decided = True
            target = getattr(action, "node_ids", None) or getattr(action, "to_node_ids", None) or ()
            print(f"  {action.kind} {('-> ' + ', '.join(target)) if target else ''}\n"
                  f"      # {action.reason.value}: {action.detail}")
    for u in result.unplaced:
        if u.job_id == job_id:
            decided = True
            print(f"  stays queued\n      # {u.reason.value}: {u.detail}")
    if not decided:
        print("  nothing to do: it is placed and the plan leaves it where it is" if job.node_ids
              else "  nothing to do")
    explanation = result.explanation(job_id)
    if explanation and explanation.considered:
        print("  considered:")
        for line in explanation.considered:
            print(f"    - {line}")


def launches_for(actions: Sequence[Action], job_id: str) -> list[Launch]:
    """The plan's launches of the nodes it puts the job on (its bind's or
    move's nodes). Before 2026-11-28 they were found by the job's name in a
    launch's detail ("risk-adjusted best for a, b"), which missed the last job
    named before a headroom note ("...; 1 GPU(s) ahead of the forecast
    demand") and a job whose node a repair had moved to another offer."""
    nodes: set[str] = set()
    for action in actions:
        if isinstance(action, Bind) and action.job_id == job_id:
            nodes.update(action.node_ids)
        elif isinstance(action, Migrate) and action.job_id == job_id:
            nodes.update(action.to_node_ids)
    return [a for a in actions if isinstance(a, Launch) and nodes.intersection(a.node_names)]


def _stored(store: Store, job_id: str) -> Job | tuple[Job, datetime] | None:
    """The stored job, a pruned one's tombstone (the job and when it
    finished), or None for an id the store never had."""
    found = store.jobs(job_ids=[job_id])
    if found:
        return found[0]
    return store.pruned_jobs([job_id]).get(job_id)


#: The audit log's kinds whose subject is a job, and how many of the newest explain shows.
JOB_KINDS = tuple(k for k, (subject, _meaning) in EVENT_KINDS.items() if subject == "job")
HISTORY = 10


def _history(job: Job, entries, more: bool) -> None:  # noqa: ANN001 - Store.audit_log's entries
    """The job's newest audit entries, and the `fleetctl events` command that lists them all: from the
    job's submission (before its every entry), since `events` alone reads the last 24 hours only."""
    if not entries:
        return
    job_id = job.job_id
    since = show_utc(job.submitted_at_utc)
    print(f"  history ({'the newest ' + str(len(entries)) + '; ' if more else ''}"
          f"`fleetctl events --for {job_id} --since {since}` for all):")
    for e in entries:
        what = e["kind"] if e["subject"] == job_id else f"{e['kind']} of {e['subject']}"  # e.g. a job it preempted
        print(f"    {e['at_utc']}  {what}  {details(e['payload'])}".rstrip())


def _describe(job: Job) -> None:
    print(f"job {job.job_id}: {job.state.value}, team {job.team}, priority {job.priority}, "
          f"{job.workers} x {job.gpus_per_worker} GPU ({', '.join(job.gpu_models) or 'any model'})")
    if job.node_ids:
        print(f"  {'now on' if job.state.active else 'ran on'}: {', '.join(job.node_ids)}")
    if job.interruptions:
        avoid = f"; avoids {', '.join(job.avoid_offer_keys)}" if job.avoid_offer_keys else ""
        print(f"  reclaimed {job.interruptions} time(s) ({job.work_lost_interruptions} cost it work); "
              f"{job.checkpointed_work_hours:.2f} h of {job.duration_hours:.2f} h kept by checkpoints{avoid}")


def _explain_pruned(job: Job, finished: datetime) -> None:
    """A job that `fleetctl prune --finished-older-than-days` deleted: what its tombstone keeps
    (``Store.pruned_jobs``: the spec, final state and when it finished; not its nodes or reclaims)."""
    print(f"job {job.job_id}: {job.state.value}, pruned, team {job.team}, priority {job.priority}, "
          f"{job.workers} x {job.gpus_per_worker} GPU ({', '.join(job.gpu_models) or 'any model'})")
    print(f"  finished {dt_to_str(finished)}; deleted since by `fleetctl prune --finished-older-than-days`, "
          "which keeps its id, final state and spec (not its nodes or reclaims)")
    _nothing_to_plan(job)


def _nothing_to_plan(job: Job) -> None:
    ended = {JobState.SUCCEEDED: "has succeeded", JobState.FAILED: "has failed"}.get(job.state, "is cancelled")
    print(f"  nothing to plan: the job {ended}; the planner only places queued, bound and running jobs")
