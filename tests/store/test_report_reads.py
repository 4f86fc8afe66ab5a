"""The store reads `fleetctl report` makes, on SQLite and PostgreSQL: bounded by the window, exact at its edges."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
import sqlalchemy as sa

from fleetctl.cli.report import read_report
from fleetctl.model import JobState, NodeState
from fleetctl.report import IDLE, KINDS, STOP_KINDS, GroupKey
from tests.builders import T0, job, node, offer

H = timedelta(hours=1)


def _node(store, node_id, launched, gone_at=None, **kw):
    n = replace(node(node_id, **kw), launched_at_utc=launched)
    store.put_node(n, launched)
    if gone_at is not None:
        store.put_node(replace(n, state=NodeState.GONE), gone_at)
    return n


def test_nodes_live_since_reads_the_live_and_the_recently_gone_with_when_they_went(store):
    since = T0 + 10 * H
    _node(store, "live", T0)
    _node(store, "went-after", T0, gone_at=since + timedelta(microseconds=500_000))
    _node(store, "went-at", T0, gone_at=since)
    _node(store, "went-before", T0, gone_at=since - timedelta(microseconds=1))
    found = {n.node_id: gone for n, gone in store.nodes_live_since(since)}
    assert found == {"live": None, "went-after": since + timedelta(microseconds=500_000), "went-at": since}


def test_events_between_is_exact_at_both_ends_and_reads_only_the_kinds_asked(store):
    start, end = T0, T0 + H
    for at, kind, subject in ((start - timedelta(microseconds=1), "start", "early"), (start, "start", "at-start"),
                              (start + timedelta(microseconds=500_000), "complete", "half-second"),
                              (end - timedelta(microseconds=1), "start", "last"), (end, "start", "at-end"),
                              (start + H / 2, "demand", "per-pass")):
        store.record(kind, at, subject)
    got = store.events_between(start, end, KINDS)
    assert [e["subject"] for e in got] == ["at-start", "half-second", "last"]
    assert got[1]["at_utc"] == start + timedelta(microseconds=500_000)


def test_history_complete_from_is_the_first_event_then_the_prune_cut(store):
    assert store.history_complete_from() is None
    store.record("terminate", T0, "n-old")  # the latest terminate: prune_finished keeps it, however old
    store.record("start", T0 + H, "j")
    store.record("start", T0 + 40 * 24 * H, "j2")
    assert store.history_complete_from() == T0
    cut = T0 + 30 * 24 * H
    store.prune_finished(cut)
    assert min(e["at_utc"] for e in store.events()).startswith("2026-11-02")  # the old terminate stayed
    assert store.history_complete_from() == cut
    assert store.last_event_at("prune_finished") == cut


def test_history_complete_from_a_prune_cut_older_than_the_store_is_its_first_event(store):
    """A year-long retention on a day-old store: the prune's entry (dated at its cut) does not
    date the history's start back to the cut, where nothing was recorded yet."""
    store.record("start", T0, "j")
    store.prune_finished(T0 - 365 * 24 * H)
    assert store.last_event_at("prune_finished") == T0 - 365 * 24 * H
    assert store.history_complete_from() == T0
    store.prune_finished(T0 - 24 * H)  # a later, shorter retention: still older than the store
    assert store.history_complete_from() == T0


def test_history_complete_from_a_prune_that_recorded_no_cut_is_bounded_by_its_tombstones(store):
    store.record("start", T0, "j")
    store.add_jobs([job("done")], T0)
    store.put_job(job("done", state=JobState.SUCCEEDED), T0 + 5 * H)
    store.prune_finished(T0 + 24 * H)
    with store._engine.begin() as conn:  # as an older fleetctl left it: no prune_finished entry
        conn.execute(sa.delete(sa.table("events", sa.column("kind"))).where(sa.column("kind") == "prune_finished"))
    assert store.history_complete_from() == T0 + 5 * H  # the last finish it buried: the cut was later


def test_read_report_from_the_store(store):
    """A node live before the window with a job started before it: found through the node, not all history."""
    since, until = T0 + 10 * H, T0 + 12 * H
    n1 = _node(store, "n1", T0 + 8 * H, of=offer("g8", gpus=8, price=16.0))
    _node(store, "n2", T0 + 9 * H, gone_at=T0 + 11 * H, of=offer("g4", gpus=4, price=8.0))
    _node(store, "ancient", T0, gone_at=T0 + H)  # gone long before: not read
    store.add_jobs([job("a", gpus=4, team="a"), job("b", gpus=4, team="b")], T0)
    store.record("start", T0 + 9 * H, "a", nodes=["n1"])  # before since, after n1's launch
    store.record("start", T0 + 10.5 * H, "b", nodes=["n2"])
    store.record("terminate", T0 + 11 * H, "n2", reason="idle")
    store.record("requeue", T0 + 11 * H, "b", node="n2", kept_hours=0.0, lost_gpu_hours=2.0)
    result = read_report(store, since, until, (GroupKey.team,))
    rows = {r.key: r for r in result.rows}
    assert rows[("a",)].gpu_hours == pytest.approx(4 * 2)  # 10h-12h x 4 GPUs
    assert rows[("b",)].gpu_hours == pytest.approx(4 * 0.5)
    assert rows[("b",)].reclaim_lost_gpu_hours == pytest.approx(2.0)
    assert result.total.usd == pytest.approx(16 * 2 + 8 * 1)
    assert sum(r.usd for r in result.rows) == pytest.approx(result.total.usd)
    assert rows[(IDLE,)].gpu_hours == pytest.approx(16 + 4 - 8 - 2)
    assert result.covered_from_utc == T0 + 9 * H and result.fully_covered
    assert n1.node_id in {n.node_id for n, _ in store.nodes_live_since(since)}


def test_a_run_open_at_a_prune_cut_keeps_its_start_and_is_charged_to_its_team_after_it(store):
    """`prune --finished-older-than-days` deleted the start entry of a job running across its cut (every
    decision before the cut went), so `fleetctl report` over a window from the cut on, which it calls fully
    covered, charged that run to (idle) while `status`, `jobs list` and the team gauge showed the job
    running there. The start of each run open at the cut stays; one that ended before the cut does not."""
    cut = T0 + 10 * H
    _node(store, "n1", T0, of=offer("g8", gpus=8, price=16.0))
    store.add_jobs([job("long", gpus=4, team="a"), job("moved", gpus=2, team="b"), job("done", gpus=2, team="b")],
                   T0)
    store.record("start", T0 + H, "done", nodes=["n1"])
    store.record("complete", T0 + 2 * H, "done")  # ended before the cut: its start goes
    store.record("start", T0 + 2 * H, "long", nodes=["n1"])  # still running
    store.record("start", T0 + 3 * H, "moved", nodes=["n1"])
    store.record("requeue", cut + H, "moved", node="n1", kept_hours=0.0, lost_gpu_hours=0.0)  # ended after the cut
    store.record("complete", cut + 2 * H, "done-elsewhere")  # the latest complete (kept as such)

    store.prune_finished(cut)

    assert sorted((e["kind"], e["subject"]) for e in store.events() if e["kind"] == "start") == [
        ("start", "long"), ("start", "moved")]
    result = read_report(store, cut, cut + 4 * H, (GroupKey.team,))
    assert result.fully_covered
    rows = {r.key: r for r in result.rows}
    assert rows[("a",)].allocated_gpu_hours == pytest.approx(4 * 4)
    assert rows[("b",)].allocated_gpu_hours == pytest.approx(2 * 1)
    assert rows[(IDLE,)].gpu_hours == pytest.approx(8 * 4 - 16 - 2)
    assert set(store.RUN_EVENTS) == {"start", *STOP_KINDS}  # the kinds the report pairs into runs


def test_the_caveat_about_runs_started_before_a_prune_cut_is_given_only_when_a_prune_dropped_them(store):
    """A prune by this fleetctl keeps the start of each run open at its cut, so a window from the cut on
    sees every run on the nodes launched before it: no caveat that such runs count as idle. A prune by
    an older fleetctl (its entry does not say it kept them) deleted them: the caveat stays, and says that
    a run still going is not seen either."""
    cut = T0 + 10 * H
    _node(store, "n1", T0, of=offer("g8", gpus=8, price=16.0))
    store.add_jobs([job("long", gpus=4, team="a")], T0)
    store.record("start", T0 + 2 * H, "long", nodes=["n1"])
    store.prune_finished(cut)
    assert store.events("prune_finished")[-1]["payload"] == {"before_utc": "2026-11-02T19:00:00Z",
                                                              "open_runs_kept": True}
    result = read_report(store, cut, cut + 4 * H, (GroupKey.team,))
    assert result.fully_covered and result.notes == ()

    with store._engine.begin() as conn:  # as an older fleetctl recorded its prune: no open_runs_kept
        conn.execute(sa.update(sa.table("events", sa.column("kind"), sa.column("payload")))
                     .where(sa.column("kind") == "prune_finished")
                     .values(payload='{"before_utc": "2026-11-02T19:00:00Z"}'))
    (note,) = read_report(store, cut, cut + 4 * H, (GroupKey.team,)).notes
    assert note.startswith("nodes live at the window's start were launched before 2026-11-02T19:00:00Z")
    assert "or is still running" in note
