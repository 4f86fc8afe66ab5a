"""fleetctl.report (pure): hand-computed showback numbers for a small fleet."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import InterruptionEvent, InterruptionKind, Market, NodeState
from fleetctl.report import IDLE, AuditEvent, GroupKey, NodeRecord, build_report, node_end, report_to_document
from tests.builders import T0, job, node, offer

H = timedelta(hours=1)
N1 = replace(node("n1", of=offer("g8", gpus=8, price=16.0, market=Market.ON_DEMAND)), launched_at_utc=T0)  # $2/GPU-h
N2 = replace(node("n2", of=offer("g4", gpus=4, price=12.0, provider="gcp", zone="z2")),  # $3/GPU-h, spot
             launched_at_utc=T0, state=NodeState.GONE)
JOBS = {"A": job("A", gpus=4, team="a"), "B": job("B", workers=2, gpus=2, team="b"),
        "C": job("C", gpus=2, team="a")}


def ev(seq, hours, kind, subject, **payload):
    return AuditEvent(seq, T0 + timedelta(hours=hours), kind, subject, payload)


#: n1 (8 GPUs, $16/h) is live from T0 on; n2 (4 GPUs, $12/h, spot) gets a reclaim notice at 2h58m with its
#: deadline at 3h, and is recorded gone at 3h05m. A runs 0.75h-3h on n1; B (2 workers x 2 GPUs) runs on n2
#: from 0.5h until its requeue at 3h02m (the node went at 3h), losing 2 GPU-hours; C runs on n1 from 4h
#: (past the window's end); C's completion at 6h is after it.
EVENTS = (
    ev(1, 0.5, "start", "B", nodes=["n2", "n2"]),
    ev(2, 0.75, "start", "A", nodes=["n1"]),
    ev(3, 2 + 58 / 60, "interruption", "n2", notice="reclaim_warning", event_id="e1",
       deadline_utc=str(T0 + 3 * H)),
    ev(4, 3, "complete", "A"),
    ev(5, 3 + 2 / 60, "requeue", "B", node="n2", kept_hours=0.0, lost_gpu_hours=2.0, reason="interruption",
       checkpoint="none"),
    ev(6, 4, "start", "C", nodes=["n1"]),
    ev(7, 6, "complete", "C"),
)
NODES = (NodeRecord(N1), NodeRecord(N2, gone_recorded_at_utc=T0 + 3 * H + timedelta(minutes=5)))


def make(by=(GroupKey.team,), since=T0 + H, until=T0 + 5 * H, events=EVENTS, nodes=NODES, **kw):
    return build_report(since=since, until=until, by=by, nodes=nodes, events=events, jobs=JOBS, **kw)


def rows(report):
    return {r.key: r for r in report.rows}


def test_by_team_hand_computed():
    report = make()
    r = rows(report)
    # window 1h-5h. n1: 4 h x $16 = $64, 32 GPU-h; n2: 1h-3h (its deadline) = $24, 8 GPU-h
    assert report.total.usd == pytest.approx(88.0)
    assert report.total.gpu_hours == pytest.approx(40.0)
    assert report.total.node_hours == pytest.approx(6.0)
    # a: A 1h-3h x 4 GPUs (clipped at since) + C 4h-5h x 2 GPUs (clipped at until) = 10 GPU-h at $2
    assert r[("a",)].allocated_gpu_hours == pytest.approx(10.0)
    assert r[("a",)].usd == pytest.approx(20.0)
    assert r[("a",)].node_hours == pytest.approx(2 * 4 / 8 + 1 * 2 / 8)
    assert r[("a",)].jobs_completed == 1  # A; C completes after until
    # b: B 1h-3h (clipped at since, and at n2's end, not at the requeue) x 4 GPUs at $3
    assert r[("b",)].gpu_hours == pytest.approx(8.0)
    assert r[("b",)].usd == pytest.approx(24.0)
    assert r[("b",)].reclaim_lost_gpu_hours == pytest.approx(2.0)
    # idle: n1's 32 - 10 GPU-h at $2; n2 was full
    assert r[(IDLE,)].gpu_hours == pytest.approx(22.0)
    assert r[(IDLE,)].usd == pytest.approx(44.0)
    assert r[(IDLE,)].allocated_usd == 0
    assert list(rows(report)) == [("a",), ("b",), (IDLE,)]
    assert report.notes == ()


def test_team_rows_sum_to_the_node_spend_whatever_the_order():
    shuffled = list(EVENTS)
    random.Random(3).shuffle(shuffled)
    for events in (EVENTS, tuple(shuffled)):
        report = make(events=events)
        assert sum(r.usd for r in report.rows) == pytest.approx(report.total.usd, abs=1e-9)
        assert sum(r.gpu_hours for r in report.rows) == pytest.approx(report.total.gpu_hours, abs=1e-9)
        assert sum(r.node_hours for r in report.rows) == pytest.approx(report.total.node_hours, abs=1e-9)
        assert sum(r.allocated_usd for r in report.rows) == pytest.approx(report.total.allocated_usd, abs=1e-9)
        assert make(events=events) == report


def test_by_provider_and_team():
    r = rows(make(by=(GroupKey.provider, GroupKey.team)))
    assert set(r) == {("aws", "a"), ("aws", IDLE), ("gcp", "b"), ("gcp", IDLE)}
    assert r[("aws", "a")].usd + r[("aws", IDLE)].usd == pytest.approx(64.0)
    assert r[("gcp", "b")].usd == pytest.approx(24.0) and r[("gcp", IDLE)].usd == pytest.approx(0.0)


def test_by_node_keys_rows_are_whole_nodes_with_their_held_share():
    r = rows(make(by=(GroupKey.market,)))
    assert r[("on_demand",)].usd == pytest.approx(64.0) and r[("on_demand",)].allocated_usd == pytest.approx(20.0)
    assert r[("spot",)].usd == pytest.approx(24.0) and r[("spot",)].allocated_usd == pytest.approx(24.0)
    assert r[("spot",)].reclaim_lost_gpu_hours == pytest.approx(2.0)
    assert r[("on_demand",)].jobs_completed == 1


def test_a_window_inside_one_run_and_one_before_anything():
    inside = make(since=T0 + 1.5 * H, until=T0 + 2.5 * H)
    r = rows(inside)
    assert r[("a",)].gpu_hours == pytest.approx(4.0) and r[("b",)].gpu_hours == pytest.approx(4.0)
    assert inside.total.usd == pytest.approx(16 + 12)
    before = make(since=T0 - 5 * H, until=T0)
    assert before.total.usd == 0 and before.rows == ()


def test_a_run_stopped_by_each_kind_ends_there():
    for kind in ("complete", "preempt", "requeue", "migrate", "cancel"):
        events = (ev(1, 1, "start", "A", nodes=["n1"]), ev(2, 2, kind, "A"))
        r = rows(make(events=events, nodes=(NodeRecord(N1),)))
        assert r[("a",)].gpu_hours == pytest.approx(4.0), kind
        assert r[(IDLE,)].gpu_hours == pytest.approx(32.0 - 4.0), kind


def test_a_migrated_job_is_charged_on_its_new_nodes_from_its_next_start():
    n3 = replace(N1, node_id="n3", offer=offer("g8b", gpus=8, price=24.0))  # $3/GPU-h
    events = (ev(1, 1, "start", "A", nodes=["n1"]), ev(2, 2, "migrate", "A", to=["n3"]),
              ev(3, 2.5, "start", "A", nodes=["n3"]))
    r = rows(make(events=events, nodes=(NodeRecord(N1), NodeRecord(n3))))
    assert r[("a",)].gpu_hours == pytest.approx(4 * 1 + 4 * 2.5)
    assert r[("a",)].usd == pytest.approx(4 * 1 * 2 + 4 * 2.5 * 3)


def test_preemption_loss_counted_when_recorded_and_a_note_when_not():
    events = (ev(1, 1, "start", "A", nodes=["n1"]), ev(2, 2, "preempt", "A", by="X", lost_gpu_hours=3.0),
              ev(3, 2.5, "start", "C", nodes=["n1"]), ev(4, 3, "preempt", "C", by="X"))
    report = make(events=events, nodes=(NodeRecord(N1),))
    assert rows(report)[("a",)].preempt_lost_gpu_hours == pytest.approx(3.0)
    assert report.notes == ("1 preemption(s) were recorded without the GPU-hours they lost (by a fleetctl before "
                            "that was recorded): not counted in preempt_lost_gpu_hours",)


def test_a_terminated_node_ends_at_its_termination_not_when_recorded_gone():
    gone = replace(N1, state=NodeState.GONE)
    record = NodeRecord(gone, gone_recorded_at_utc=T0 + 4 * H)
    assert node_end(record, (ev(1, 2, "terminate", "n1"),), ()) == (T0 + 2 * H, "terminate")
    assert node_end(record, (), ()) == (T0 + 4 * H, "gone")
    assert node_end(record, (ev(1, 4, "terminate", "n1"),), ()) == (T0 + 4 * H, "terminate")  # recorded together
    assert node_end(record, (ev(1, 4, "node_lost", "n1"),), ()) == (T0 + 4 * H, "lost")
    assert node_end(NodeRecord(N1), (), ()) == (None, "")
    hint = InterruptionEvent("h", "aws", "n1", InterruptionKind.REBALANCE, T0 + H, None)
    assert node_end(NodeRecord(N1), (), (hint,)) == (None, "")  # a rebalance hint takes nothing
    notice = InterruptionEvent("w", "aws", "n1", InterruptionKind.RECLAIM_WARNING, T0 + H, T0 + 1.5 * H)
    assert node_end(NodeRecord(N1), (), (notice,)) == (T0 + 1.5 * H, "reclaim")  # taken at the deadline
    report = make(nodes=(record,), events=(ev(1, 4, "node_lost", "n1"),))
    assert report.total.usd == pytest.approx(3 * 16.0)
    assert any("lost without a notice" in n for n in report.notes)


def test_a_history_begun_within_the_windows_first_second_is_shown_to_the_fraction():
    """Covered from half a second after the window's start: the note must not read as 'only covered from'
    the window's own start, which the time to the second would show."""
    report = make(covered_from=T0 + H + timedelta(milliseconds=500))
    assert not report.fully_covered
    assert any("only covered from 2026-11-02T10:00:00.500000Z" in n for n in report.notes), report.notes


def test_pruned_history_is_said_not_hidden():
    report = make(covered_from=T0 + 2 * H)
    assert not report.fully_covered
    assert any("only covered from 2026-11-02T11:00:00Z" in n for n in report.notes)
    doc = report_to_document(report)
    assert doc["format_version"] == 1 and doc["fully_covered"] is False
    assert doc["covered_from_utc"] == "2026-11-02T11:00:00Z"
    # covered from before the window: no caveat
    assert make(covered_from=T0).notes == ()


def test_a_team_with_nothing_in_the_window_has_float_zeros_in_json():
    """A row nobody added to (a policy team without work) prints 0.0, not 0, in JSON and CSV: the
    same type as every other row's hours and USD; jobs_completed stays an integer."""
    report = build_report(since=T0 + H, until=T0 + 5 * H, by=(GroupKey.team,), nodes=NODES, events=EVENTS,
                          jobs=JOBS, teams=("z",))
    [z] = [row for row in report_to_document(report)["rows"] if row["team"] == "z"]
    assert {k: (type(v), v) for k, v in z.items() if k != "team"} == {
        **{k: (float, 0.0) for k in ("node_hours", "gpu_hours", "usd", "allocated_gpu_hours", "allocated_usd",
                                     "reclaim_lost_gpu_hours", "preempt_lost_gpu_hours")},
        "jobs_completed": (int, 0)}


def test_a_completion_without_its_start_is_a_note_and_its_time_idle():
    report = make(events=(ev(1, 2, "complete", "A"),), nodes=(NodeRecord(N1),))
    assert rows(report)[(IDLE,)].gpu_hours == pytest.approx(32.0)
    assert any("without a recorded start" in n for n in report.notes)
    # before the window (read only to find the runs open at since): nothing to say
    assert make(events=(ev(1, 0.5, "complete", "A"),), nodes=(NodeRecord(N1),)).notes == ()


def test_unknown_jobs_and_policy_teams():
    report = build_report(since=T0 + H, until=T0 + 5 * H, by=(GroupKey.team,), nodes=NODES, events=EVENTS,
                          jobs={k: v for k, v in JOBS.items() if k != "B"}, teams=("a", "z"))
    r = rows(report)
    assert ("z",) in r and r[("z",)].usd == 0
    assert r[(IDLE,)].gpu_hours == pytest.approx(22.0 + 8.0)  # B's GPUs: nobody's known
    assert any("not in the store" in n and "B" in n for n in report.notes)
    later = build_report(since=T0 + 3.5 * H, until=T0 + 5 * H, by=(GroupKey.team,), nodes=NODES, events=EVENTS,
                         jobs={k: v for k, v in JOBS.items() if k != "B"})
    assert later.notes == ()  # B's run ended before the window: its spec is not needed
    with pytest.raises(ValueError):
        make(since=T0 + H, until=T0 + H)


def test_a_notice_deadline_reads_the_same_as_written_now_and_as_older_entries_wrote_it():
    """Interruption entries write their deadline as ISO 8601 with a Z (null without one); older ones
    wrote str(datetime) ("2026-11-02 12:00:00+00:00") and "None": both are read."""
    now_written = tuple(replace(e, payload={**e.payload, "deadline_utc": "2026-11-02T12:00:00Z"})
                        if e.kind == "interruption" else e for e in EVENTS)
    assert make(events=now_written).total == make().total
    assert node_end(NODES[1], (ev(3, 2.9, "interruption", "n2", notice="reclaim_warning", deadline_utc=None),), ()) \
        == node_end(NODES[1], (ev(3, 2.9, "interruption", "n2", notice="reclaim_warning", deadline_utc="None"),), ())


def test_the_total_row_and_the_json_rows_carry_every_column():
    """The fleet's row sums what its team rows hold; the JSON puts each number under its own name."""
    report = make()
    # allocated: a 10 GPU-h at $2 + b 8 GPU-h at $3 = 18 GPU-h, $44; A completes at 3h; B's requeue lost 2 GPU-h
    assert report.total.allocated_gpu_hours == pytest.approx(18.0)
    assert report.total.allocated_usd == pytest.approx(44.0)
    assert report.total.jobs_completed == 1
    assert report.total.reclaim_lost_gpu_hours == pytest.approx(2.0)
    assert report.total.preempt_lost_gpu_hours == 0
    doc = report_to_document(report)
    assert (doc["since_utc"], doc["until_utc"]) == ("2026-11-02T10:00:00Z", "2026-11-02T14:00:00Z")
    assert doc["rows"][0] == {"team": "a", "node_hours": 1.25, "gpu_hours": 10.0, "usd": 20.0,
                              "allocated_gpu_hours": 10.0, "allocated_usd": 20.0, "jobs_completed": 1,
                              "reclaim_lost_gpu_hours": 0.0, "preempt_lost_gpu_hours": 0.0}
    assert doc["total"] == {"node_hours": 6.0, "gpu_hours": 40.0, "usd": 88.0, "allocated_gpu_hours": 18.0,
                            "allocated_usd": 44.0, "jobs_completed": 1, "reclaim_lost_gpu_hours": 2.0,
                            "preempt_lost_gpu_hours": 0.0}


def test_completions_and_losses_count_inside_the_half_open_window_only():
    """[since, until): an entry at since counts, one at until does not; a run that overlaps a live
    node for no time adds no row."""
    at_since = make(since=T0 + 3 * H)  # A's completion is at 3h; B's requeue (3h02m) is inside too
    assert at_since.total.jobs_completed == 1 and at_since.total.reclaim_lost_gpu_hours == pytest.approx(2.0)
    after = make(since=T0 + 3.5 * H)  # both before the window
    assert after.total.jobs_completed == 0 and after.total.reclaim_lost_gpu_hours == 0
    at_until = make(until=T0 + 3 * H)
    assert at_until.total.jobs_completed == 0 and rows(at_until)[("a",)].jobs_completed == 0
    # A ran 0.75h-3h on n1, which is live in 3.5h-5h: no time in the window, so no row for team a
    only_a = make(since=T0 + 3.5 * H, events=(EVENTS[1], EVENTS[3]), nodes=(NodeRecord(N1),))
    assert list(rows(only_a)) == [(IDLE,)]


def test_a_loss_goes_to_the_group_of_the_node_it_names_else_of_the_node_the_job_held():
    """B runs a worker on n1 (aws) and one on n2 (gcp). A requeue naming n2 charges gcp; one naming a
    node not live in the window falls back to the run's first node (n1, aws). A preemption goes to the
    job's own run (C on n2, gcp), whatever entry came before it."""
    by = (GroupKey.provider, GroupKey.team)
    nodes = (NodeRecord(N1), NodeRecord(N2))
    for named, provider in (("n2", "gcp"), ("n9", "aws")):
        events = (ev(1, 1, "start", "B", nodes=["n1", "n2"]), ev(2, 2, "requeue", "B", node=named, lost_gpu_hours=2.0))
        r = rows(make(by=by, events=events, nodes=nodes))
        assert r[(provider, "b")].reclaim_lost_gpu_hours == pytest.approx(2.0), named
    events = (ev(1, 1, "start", "A", nodes=["n1"]), ev(2, 1.5, "start", "C", nodes=["n2"]),
              ev(3, 2, "complete", "A"), ev(4, 2.5, "preempt", "C", by="X", lost_gpu_hours=1.0))
    report = make(by=by, events=events, nodes=nodes)
    assert rows(report)[("gcp", "a")].preempt_lost_gpu_hours == pytest.approx(1.0)
    assert rows(report)[("aws", "a")].preempt_lost_gpu_hours == 0
    assert report.total.preempt_lost_gpu_hours == pytest.approx(1.0)


def test_a_second_start_closes_the_open_run_and_is_noted_only_inside_the_window():
    """A starts on n1 (4 GPUs) at 0.5h, 0.75h, 1h (= since) and 2h, and completes at 3h. Each start closes
    the run before it; only the one after since changes the window's numbers, so the note counts 1.
    In the window (1h-5h): 1h-2h + 2h-3h = 2 h x 4 GPUs = 8 GPU-hours."""
    events = tuple(ev(i, h, "start", "A", nodes=["n1"]) for i, h in enumerate((0.5, 0.75, 1, 2))) + \
        (ev(9, 3, "complete", "A"),)
    report = make(events=events, nodes=(NodeRecord(N1),))
    assert rows(report)[("a",)].gpu_hours == pytest.approx(8.0)
    assert report.notes == ("1 job start(s) came while the job's previous run had no recorded stop: that run is "
                            "taken to end at the new start",)


@pytest.mark.parametrize("events, count", [
    ((ev(1, 1, "complete", "A"),), 1),  # at since: in the window
    ((ev(1, 2, "cancel", "C", state="running"),), 1),
    ((ev(1, 1, "complete", "A"), ev(2, 2, "cancel", "C", state="running"), ev(3, 2.5, "cancel", "Q1", state="queued"),
      ev(4, 2.6, "cancel", "Q2", state="queued")), 2),  # a queued job's cancel ends no run
], ids=["complete", "running-cancel", "both-and-queued-cancels"])
def test_runs_ended_without_their_start_are_counted_in_the_note(events, count):
    report = make(events=events, nodes=(NodeRecord(N1),))
    assert report.notes == (f"{count} job run(s) ended in the window without a recorded start (started before the "
                            "retained audit log): their GPU-hours are counted as idle",)


def test_nodes_gone_without_a_termination_are_counted_in_the_notes():
    """n2 is recorded gone at 3h05m with nothing else known, n1 found lost at 4h: one note each, with its
    count. A node recorded gone at until went outside [since, until): no note."""
    lost = NodeRecord(replace(N1, state=NodeState.GONE), gone_recorded_at_utc=T0 + 4 * H)
    report = make(events=(ev(1, 4, "node_lost", "n1"),), nodes=(lost, NODES[1]))
    assert report.notes == (
        "1 node(s) were lost without a notice: each is charged until fleetctl found it gone (an upper bound: "
        "the cloud does not say when it went)",
        "1 node(s) went without a recorded termination or notice: each is charged until fleetctl recorded it gone "
        "(an upper bound)")
    assert make(until=T0 + 3 * H + timedelta(minutes=5), events=(), nodes=NODES[1:]).notes == ()


def test_a_node_without_gpus_is_all_idle_and_noted():
    """n0 has no GPU ($1/h, launched at T0) and runs a job of no GPU: over 1h-5h, 4 node-hours and $4,
    all in the idle row; nothing allocated."""
    n0 = replace(node("n0", of=offer("c4", gpus=0, price=1.0, model=None)), launched_at_utc=T0)
    cpu_job = {"D": job("D", gpus=0, team="a")}
    events = (ev(1, 0.5, "start", "D", nodes=["n0"]), ev(2, 3, "complete", "D"))
    report = build_report(since=T0 + H, until=T0 + 5 * H, by=(GroupKey.gpu_model,), nodes=(NodeRecord(n0),),
                          events=events, jobs=cpu_job)
    assert report.total.usd == pytest.approx(4.0) and report.total.gpu_hours == 0
    assert report.total.allocated_usd == 0 and report.total.allocated_gpu_hours == 0
    assert rows(report)[("(none)",)].usd == pytest.approx(4.0)
    assert report.notes == ("1 node(s) have no GPUs: their spend is all in the idle row",)


def test_a_node_recorded_holding_more_gpus_than_it_has_is_noted():
    """B (2 GPUs a worker) recorded with three workers on n2 (4 GPUs): 6 GPUs held, 2 more than it has."""
    events = (ev(1, 1, "start", "B", nodes=["n2", "n2", "n2"]),)
    report = make(events=events, nodes=(NodeRecord(N2, gone_recorded_at_utc=T0 + 3 * H),), until=T0 + 3 * H)
    assert rows(report)[(IDLE,)].gpu_hours == pytest.approx(2 * 4 - 2 * 6)  # 1h-3h: 8 bought, 12 held
    assert report.notes == ("1 node(s) had jobs recorded holding more GPUs than the node has: their idle rows "
                            "are negative",)


def test_rows_by_gpu_model_and_region():
    n3 = replace(N1, node_id="n3", offer=offer("h8", gpus=8, price=24.0, model="H100-80GB", region="r2"))
    r = rows(make(by=(GroupKey.gpu_model, GroupKey.region), events=(), nodes=(NodeRecord(N1), NodeRecord(n3))))
    assert r[("A100-80GB", "r1")].usd == pytest.approx(4 * 16.0)
    assert r[("H100-80GB", "r2")].usd == pytest.approx(4 * 24.0)


def test_policy_teams_get_their_zero_rows_only_in_a_report_by_team_alone():
    report = build_report(since=T0 + H, until=T0 + 5 * H, by=(GroupKey.provider, GroupKey.team), nodes=NODES,
                          events=EVENTS, jobs=JOBS, teams=("z",))
    assert all(len(row.key) == 2 for row in report.rows) and not any("z" in row.key for row in report.rows)


def test_the_caveat_on_pruned_history_is_dated_by_the_oldest_node_live_at_since():
    """n1 was launched at T0 - 5h, n3 at T0 (both live at since, T0 + 1h); the audit log begins at T0 - 3h:
    a run on n1 may have started before it, unseen. Not so when the prunes kept every open run's start."""
    old = NodeRecord(replace(N1, launched_at_utc=T0 - 5 * H))
    n3 = NodeRecord(replace(N1, node_id="n3"))
    report = make(events=(), nodes=(old, n3), covered_from=T0 - 3 * H)
    assert len(report.notes) == 1
    assert report.notes[0].startswith("nodes live at the window's start were launched before 2026-11-02T06:00:00Z")
    assert make(events=(), nodes=(old, n3), covered_from=T0 - 3 * H, open_runs_kept=True).notes == ()
    assert make(events=(), nodes=(n3,), covered_from=T0 - 3 * H).notes == ()  # n3 was launched after it


def test_recorded_reclaim_notices_end_their_node_at_the_deadline():
    """n1 ($16/h) with a notice whose deadline is 2h: 1h-2h of the window, $16."""
    notice = InterruptionEvent("w", "aws", "n1", InterruptionKind.RECLAIM_WARNING, T0 + 1.9 * H, T0 + 2 * H)
    assert make(events=(), nodes=(NodeRecord(N1),), notices=(notice,)).total.usd == pytest.approx(16.0)


def test_a_nodes_end_is_read_from_its_own_entries_and_a_rebalance_entry_takes_nothing():
    assert node_end(NodeRecord(N1), (ev(1, 2, "terminate", "n2"),), ()) == (None, "")
    rebalance = ev(1, 2, "interruption", "n1", notice=InterruptionKind.REBALANCE.value, deadline_utc=None)
    assert node_end(NodeRecord(N1), (rebalance,), ()) == (None, "")
