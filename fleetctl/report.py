"""Showback: what the fleet bought in a window of time, and who used it.

PURE: :func:`build_report` takes the nodes, the audit-log events and the
jobs' specs read from the store (``fleetctl.cli.report`` reads them) and
``since``/``until``, and returns a :class:`Report`. No clock, no I/O.

Over the window ``[since, until)``, every interval is clipped to it:

* **A node's live time** runs from its ``launched_at_utc`` to the first of
  (:func:`node_end`): the ``terminate`` entry of the audit log (fleetctl
  asked the cloud to end it), the deadline of a reclaim notice (``interruption``
  entries and the ``interruptions`` table; a rebalance hint takes nothing),
  and the write that recorded it GONE (``nodes.updated_at_utc``: when
  fleetctl saw it gone; an upper bound, the only one for a node lost without
  a notice). A node that is not gone and has no such end runs to ``until``.
  It costs its offer's ``usd_per_hour`` for all of that time.
* **A job's run on its nodes** starts at its ``start`` entry (its payload
  names one node per worker) and stops at the job's next ``complete``,
  ``preempt``, ``requeue`` (a reclaim or a lost node: the job leaves every
  node), ``migrate`` (it leaves its nodes for new ones, where a later
  ``start`` begins the next run) or ``cancel``; a run not stopped by
  ``until`` runs to it. It holds ``gpus_per_worker`` GPUs on a node for each
  of its workers there, and only while the node is live.
* **Attribution.** A job holding ``g`` GPUs of a node for ``h`` hours is
  charged ``g * h * usd_per_hour / gpu_count``; the node's GPUs nobody
  holds are charged to :data:`IDLE`. So, per node, the jobs' share plus the
  idle share is the node's spend, exactly: the rows of a report by team sum
  to the fleet's spend. A node without GPUs is all idle.

Time a job is bound but not yet started (a node booting, the pass between a
migration and the restart) is idle: the job does not run then.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping

from fleetctl.codec import dt_to_str, show_utc
from fleetctl.model import InterruptionEvent, InterruptionKind, Job, Node

FORMAT_VERSION = 1

#: The row of GPUs no job holds.
IDLE = "(idle)"
#: The team of a job whose spec the store no longer holds.
UNKNOWN_TEAM = "(unknown)"


class GroupKey(str, enum.Enum):
    """What ``--by`` groups rows by: the job's team, or the node's offer."""

    team = "team"
    provider = "provider"
    market = "market"
    gpu_model = "gpu_model"
    region = "region"


#: Audit-log kinds that end a job's run on its nodes.
STOP_KINDS = ("complete", "preempt", "requeue", "migrate", "cancel")
#: Audit-log kinds that end a node (or date its end).
NODE_END_KINDS = ("terminate", "interruption", "node_lost")
#: Every kind the report reads.
KINDS = ("start", *STOP_KINDS, *NODE_END_KINDS)


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One row of the audit log (``Store.events``), its time parsed."""

    seq: int
    at_utc: datetime
    kind: str
    subject: str
    payload: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A node as the store holds it; ``gone_recorded_at_utc``: when the store
    recorded it GONE (its row's last write), None while it is not."""

    node: Node
    gone_recorded_at_utc: datetime | None = None


@dataclass(frozen=True, slots=True)
class Row:
    """One group's numbers (see docs/report.md for each)."""

    key: tuple[str, ...]
    node_hours: float = 0.0
    gpu_hours: float = 0.0
    usd: float = 0.0
    allocated_gpu_hours: float = 0.0
    allocated_usd: float = 0.0
    jobs_completed: int = 0
    reclaim_lost_gpu_hours: float = 0.0
    preempt_lost_gpu_hours: float = 0.0


@dataclass(frozen=True, slots=True)
class Report:
    since_utc: datetime
    until_utc: datetime
    by: tuple[GroupKey, ...]
    rows: tuple[Row, ...]
    total: Row
    covered_from_utc: datetime | None  # the audit log is complete from then on (None: nothing recorded)
    notes: tuple[str, ...] = ()

    @property
    def fully_covered(self) -> bool:
        return self.covered_from_utc is None or self.covered_from_utc <= self.since_utc


def _parse_time(value: Any) -> datetime | None:
    """A time of an event's payload (``str(datetime)`` or ISO 8601), None when absent."""
    if not isinstance(value, str) or value in ("", "None"):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def node_end(record: NodeRecord, events: Iterable[AuditEvent], notices: Iterable[InterruptionEvent]) -> \
        tuple[datetime | None, str]:
    """When ``record``'s node ended, and what says so: ``terminate``,
    ``reclaim`` (a notice's deadline, or its receipt for a notice that the
    node was already gone), ``lost`` (gone without a notice: when fleetctl
    found it gone), ``gone`` (recorded gone, nothing else known), or
    ``(None, "")`` for a node still live. The earliest of them: each is a
    time by which the node had ended."""
    node = record.node
    found: list[tuple[datetime, str]] = []
    lost = False
    for e in events:
        if e.subject != node.node_id:
            continue
        if e.kind == "terminate":
            found.append((e.at_utc, "terminate"))
        elif e.kind == "node_lost":
            lost = True
        elif e.kind == "interruption" and e.payload.get("notice") != InterruptionKind.REBALANCE.value:
            deadline = _parse_time(e.payload.get("deadline_utc"))
            found.append((deadline or e.at_utc, "reclaim"))
    for n in notices:
        if n.node_id == node.node_id and n.kind is not InterruptionKind.REBALANCE \
                and not n.event_id.startswith("fleetctl-lost-"):
            found.append((n.deadline_utc or n.received_at_utc, "reclaim"))
    if record.gone_recorded_at_utc is not None:
        found.append((record.gone_recorded_at_utc, "lost" if lost else "gone"))
    if not found:
        return None, ""
    # the earliest; at a tie, what says why (a termination is recorded gone at the same instant)
    when, source = min(found, key=lambda f: (f[0], f[1] in ("gone", "lost")))
    return max(when, node.launched_at_utc), source


@dataclass(frozen=True, slots=True)
class _Run:
    job_id: str
    node_ids: tuple[str, ...]  # one per worker
    start_utc: datetime
    stop_utc: datetime


def job_runs(events: Iterable[AuditEvent], since: datetime, until: datetime) -> \
        tuple[tuple[_Run, ...], dict[str, int]]:
    """The runs of jobs on nodes from ``start`` to the next stop entry (or
    ``until``), and the counts of what could not be paired:
    ``<kind>_without_start`` (at ``since`` or later, a ``complete`` or a
    running job's ``cancel`` whose ``start`` is not among ``events``) and
    ``start_without_stop`` (after ``since``, a start while a run was open:
    the open run is closed there; one at ``since`` closes a run that lies
    wholly before the window, which changes none of its numbers)."""
    open_runs: dict[str, tuple[datetime, tuple[str, ...]]] = {}
    runs: list[_Run] = []
    unpaired: dict[str, int] = defaultdict(int)
    for e in sorted(events, key=lambda e: (e.at_utc, e.seq)):
        if e.kind == "start":
            if e.subject in open_runs:
                began, nodes = open_runs.pop(e.subject)
                runs.append(_Run(e.subject, nodes, began, e.at_utc))
                if e.at_utc > since:
                    unpaired["start_without_stop"] += 1
            open_runs[e.subject] = (e.at_utc, tuple(str(n) for n in e.payload.get("nodes") or ()))
        elif e.kind in STOP_KINDS:
            if e.subject in open_runs:
                began, nodes = open_runs.pop(e.subject)
                runs.append(_Run(e.subject, nodes, began, e.at_utc))
            elif e.at_utc >= since and (e.kind == "complete"
                                        or (e.kind == "cancel" and e.payload.get("state") == "running")):
                unpaired[f"{e.kind}_without_start"] += 1
    for job_id, (began, nodes) in open_runs.items():
        runs.append(_Run(job_id, nodes, began, until))
    return tuple(runs), dict(unpaired)


def _overlap_hours(a0: datetime, a1: datetime, b0: datetime, b1: datetime) -> float:
    start, stop = max(a0, b0), min(a1, b1)
    return max(0.0, (stop - start).total_seconds() / 3600.0)


def _node_key(node: Node, by: tuple[GroupKey, ...], team: str) -> tuple[str, ...]:
    offer = node.offer
    values = {GroupKey.team: team, GroupKey.provider: offer.provider, GroupKey.market: offer.market.value,
              GroupKey.gpu_model: offer.instance_type.gpu_model or "(none)", GroupKey.region: offer.region}
    return tuple(values[k] for k in by)


class _Acc:
    """A row being summed."""

    __slots__ = ("node_hours", "gpu_hours", "usd", "allocated_gpu_hours", "allocated_usd", "jobs_completed",
                 "reclaim_lost_gpu_hours", "preempt_lost_gpu_hours")

    def __init__(self) -> None:
        for name in self.__slots__:  # floats, but a count (0.0 printed 0 in JSON and CSV)
            setattr(self, name, 0 if name == "jobs_completed" else 0.0)

    def row(self, key: tuple[str, ...]) -> Row:
        return Row(key, **{name: getattr(self, name) for name in self.__slots__})


def build_report(*, since: datetime, until: datetime, by: tuple[GroupKey, ...], nodes: Iterable[NodeRecord],
                 events: Iterable[AuditEvent], jobs: Mapping[str, Job],
                 notices: Iterable[InterruptionEvent] = (), covered_from: datetime | None = None,
                 teams: Iterable[str] = (), open_runs_kept: bool = False) -> Report:
    """The report of ``[since, until)`` grouped ``by`` those keys (see the
    module docstring for the rules).

    ``nodes``: every node live at some time of the window (others add
    nothing). ``events``: the audit log's entries of ``KINDS`` from before
    the start of every run still open at ``since`` (the launch of the oldest
    node live then) up to ``until``; entries after ``until`` are ignored.
    ``jobs``: the spec of each job those entries name (a stored job, or a
    pruned one's tombstone). ``notices``: the recorded reclaim notices of
    those nodes. ``covered_from``: when the store's audit log starts being
    complete (retention). ``teams``: teams that get a row even when they used
    nothing (with ``by == (team,)``). ``open_runs_kept``: the prunes that set
    ``covered_from`` kept the start of each run open at their cut
    (``Store.open_runs_kept``), so a window from it on sees every run."""
    if until <= since:
        raise ValueError("until must be after since")
    events = tuple(e for e in events if e.at_utc < until)
    notices = tuple(notices)
    notes: list[str] = []
    rows: dict[tuple[str, ...], _Acc] = defaultdict(_Acc)
    total = _Acc()

    by_node_events: dict[str, list[AuditEvent]] = defaultdict(list)
    for e in events:
        if e.kind in NODE_END_KINDS:
            by_node_events[e.subject].append(e)
    by_node_notices: dict[str, list[InterruptionEvent]] = defaultdict(list)
    for n in notices:
        by_node_notices[n.node_id].append(n)

    live: dict[str, tuple[Node, datetime, datetime]] = {}  # node id -> node, live from, live to (clipped)
    ended: dict[str, int] = defaultdict(int)
    no_gpus = 0
    for record in sorted(nodes, key=lambda r: r.node.node_id):
        node = record.node
        end, source = node_end(record, by_node_events.get(node.node_id, ()), by_node_notices.get(node.node_id, ()))
        start = max(node.launched_at_utc, since)
        stop = min(end or until, until)
        if stop <= start:
            continue
        live[node.node_id] = (node, start, stop)
        if source in ("lost", "gone") and end is not None and end < until:
            ended[source] += 1
        if node.offer.instance_type.gpu_count == 0:
            no_gpus += 1

    runs, paired = job_runs((e for e in events if e.kind == "start" or e.kind in STOP_KINDS), since, until)
    unpaired: dict[str, int] = defaultdict(int, paired)
    held: dict[str, float] = defaultdict(float)  # node id -> GPU-hours held by jobs
    held_node_hours: dict[str, float] = defaultdict(float)
    unknown_jobs: set[str] = set()
    overbooked: set[str] = set()
    for run in runs:
        job = jobs.get(run.job_id)
        for node_id in sorted(set(run.node_ids)):
            if node_id not in live:
                continue
            node, n0, n1 = live[node_id]
            gpu_count = node.offer.instance_type.gpu_count
            hours = _overlap_hours(run.start_utc, run.stop_utc, n0, n1)
            if hours <= 0 or gpu_count == 0:
                continue
            if job is None:  # a run in the window whose job the store no longer knows: its GPUs stay idle
                unknown_jobs.add(run.job_id)
                continue
            gpus = run.node_ids.count(node_id) * job.gpus_per_worker
            if gpus > gpu_count:
                overbooked.add(node_id)
            acc = rows[_node_key(node, by, job.team)]
            gpu_hours = gpus * hours
            usd = gpu_hours * node.offer.usd_per_hour / gpu_count
            acc.node_hours += hours * gpus / gpu_count
            acc.gpu_hours += gpu_hours
            acc.usd += usd
            acc.allocated_gpu_hours += gpu_hours
            acc.allocated_usd += usd
            held[node_id] += gpu_hours
            held_node_hours[node_id] += hours * gpus / gpu_count

    for node_id, (node, n0, n1) in live.items():
        hours = (n1 - n0).total_seconds() / 3600.0
        gpu_count = node.offer.instance_type.gpu_count
        bought = hours * gpu_count
        usd = hours * node.offer.usd_per_hour
        total.node_hours += hours
        total.gpu_hours += bought
        total.usd += usd
        # the GPUs nobody held: the idle row of the node's group by team (what makes the team rows sum to
        # the spend); the node's own row otherwise, beside its jobs' share (its allocated part)
        held_usd = held[node_id] * node.offer.usd_per_hour / gpu_count if gpu_count else 0.0
        total.allocated_gpu_hours += held[node_id]
        total.allocated_usd += held_usd
        acc = rows[_node_key(node, by, IDLE)]
        acc.node_hours += hours - held_node_hours[node_id]
        acc.gpu_hours += bought - held[node_id]
        acc.usd += usd - held_usd

    # completions and losses: the group of the node the job was on (the run the entry stopped)
    where = _run_nodes_at_stop(runs)
    for e in events:
        if e.at_utc < since:
            continue
        job = jobs.get(e.subject)
        team = job.team if job is not None else UNKNOWN_TEAM
        if e.kind == "complete":
            node = _first_node(where.get((e.subject, e.at_utc), ()), live)
            _acc_for(rows, node, by, team).jobs_completed += 1
            total.jobs_completed += 1
        elif e.kind == "requeue" and isinstance(e.payload.get("lost_gpu_hours"), (int, float)):
            node = live.get(str(e.payload.get("node")), (None,))[0] or \
                _first_node(where.get((e.subject, e.at_utc), ()), live)
            lost = float(e.payload["lost_gpu_hours"])
            _acc_for(rows, node, by, team).reclaim_lost_gpu_hours += lost
            total.reclaim_lost_gpu_hours += lost
        elif e.kind == "preempt":
            lost_value = e.payload.get("lost_gpu_hours")
            if isinstance(lost_value, (int, float)):
                node = _first_node(where.get((e.subject, e.at_utc), ()), live)
                _acc_for(rows, node, by, team).preempt_lost_gpu_hours += float(lost_value)
                total.preempt_lost_gpu_hours += float(lost_value)
            else:
                unpaired["preempt_without_loss"] += 1

    if GroupKey.team in by and by == (GroupKey.team,):
        for team in teams:
            rows[(team,)]  # noqa: B018 - a zero row for a team that used nothing

    # notes: what the recorded data could not say exactly
    # the launch of the oldest node live at since: a run open at since started after it
    reach = min((n.launched_at_utc for n, _, _ in live.values() if n.launched_at_utc <= since), default=since)
    if covered_from is not None and covered_from > since:
        # to the second, unless that would read as the window's own start (a store begun in its first second)
        shown = show_utc(covered_from) if show_utc(covered_from) != show_utc(since) else dt_to_str(covered_from)
        notes.append(f"the window is only covered from {shown}: the store's history begins there "
                     "(older history was pruned, or nothing was recorded before); what ran before it is not "
                     "counted")
    elif covered_from is not None and covered_from > reach and not open_runs_kept:
        notes.append(f"nodes live at the window's start were launched before {show_utc(covered_from)}, where the "
                     "audit log begins (older history was pruned): a job run on them that started before then "
                     "and ended with a reclaim, preemption or migration, or is still running, is not seen, and "
                     "its GPU-hours count as idle")
    if unpaired.get("complete_without_start") or unpaired.get("cancel_without_start"):
        n = unpaired.get("complete_without_start", 0) + unpaired.get("cancel_without_start", 0)
        notes.append(f"{n} job run(s) ended in the window without a recorded start (started before the retained "
                     "audit log): their GPU-hours are counted as idle")
    if unpaired.get("start_without_stop"):
        notes.append(f"{unpaired['start_without_stop']} job start(s) came while the job's previous run had no "
                     "recorded stop: that run is taken to end at the new start")
    if unpaired.get("preempt_without_loss"):
        notes.append(f"{unpaired['preempt_without_loss']} preemption(s) were recorded without the GPU-hours they "
                     "lost (by a fleetctl before that was recorded): not counted in preempt_lost_gpu_hours")
    if unknown_jobs:
        notes.append(f"{len(unknown_jobs)} job(s) named by the audit log are not in the store (no spec, no "
                     f"tombstone): their GPU-hours are counted as idle ({', '.join(sorted(unknown_jobs)[:5])}"
                     f"{', ...' if len(unknown_jobs) > 5 else ''})")
    if ended.get("lost"):
        notes.append(f"{ended['lost']} node(s) were lost without a notice: each is charged until fleetctl found it "
                     "gone (an upper bound: the cloud does not say when it went)")
    if ended.get("gone"):
        notes.append(f"{ended['gone']} node(s) went without a recorded termination or notice: each is charged "
                     "until fleetctl recorded it gone (an upper bound)")
    if no_gpus:
        notes.append(f"{no_gpus} node(s) have no GPUs: their spend is all in the idle row")
    if overbooked:
        notes.append(f"{len(overbooked)} node(s) had jobs recorded holding more GPUs than the node has: their idle "
                     "rows are negative")

    def order(item: tuple[tuple[str, ...], _Acc]) -> tuple[Any, ...]:
        key, _ = item
        return tuple((k in (IDLE, UNKNOWN_TEAM), k) for k in key)

    return Report(since_utc=since, until_utc=until, by=by,
                  rows=tuple(acc.row(key) for key, acc in sorted(rows.items(), key=order)),
                  total=total.row(("(total)",) * len(by)), covered_from_utc=covered_from, notes=tuple(notes))


def _run_nodes_at_stop(runs: tuple[_Run, ...]) -> dict[tuple[str, datetime], tuple[str, ...]]:
    return {(r.job_id, r.stop_utc): r.node_ids for r in runs}


def _first_node(node_ids: tuple[str, ...], live: Mapping[str, tuple[Node, datetime, datetime]]) -> Node | None:
    for node_id in node_ids:
        if node_id in live:
            return live[node_id][0]
    return None


def _acc_for(rows: dict[tuple[str, ...], _Acc], node: Node | None, by: tuple[GroupKey, ...], team: str) -> _Acc:
    """The row a job's count goes to: its team's, on the group of ``node`` (``(unknown)`` node values
    when it ran on no node of the window)."""
    if node is None:
        values = {GroupKey.team: team}
        return rows[tuple(values.get(k, UNKNOWN_TEAM) for k in by)]
    return rows[_node_key(node, by, team)]


def report_to_document(report: Report) -> dict[str, Any]:
    """The versioned JSON form (docs/report.md)."""

    def row(r: Row, key: dict[str, str]) -> dict[str, Any]:
        return {**key, "node_hours": round(r.node_hours, 6), "gpu_hours": round(r.gpu_hours, 6),
                "usd": round(r.usd, 6), "allocated_gpu_hours": round(r.allocated_gpu_hours, 6),
                "allocated_usd": round(r.allocated_usd, 6), "jobs_completed": r.jobs_completed,
                "reclaim_lost_gpu_hours": round(r.reclaim_lost_gpu_hours, 6),
                "preempt_lost_gpu_hours": round(r.preempt_lost_gpu_hours, 6)}

    keys = [k.value for k in report.by]
    return {
        "format_version": FORMAT_VERSION,
        "since_utc": show_utc(report.since_utc),
        "until_utc": show_utc(report.until_utc),
        "by": keys,
        "covered_from_utc": show_utc(report.covered_from_utc) if report.covered_from_utc else None,
        "fully_covered": report.fully_covered,
        "rows": [row(r, dict(zip(keys, r.key))) for r in report.rows],
        "total": row(report.total, {}),
        "notes": list(report.notes),
    }
