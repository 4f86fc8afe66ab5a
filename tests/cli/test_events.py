"""`fleetctl events` and the audit log's kinds (fleetctl.audit), on a store a real reconcile wrote."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.audit import EVENT_KINDS
from fleetctl.cli.main import app
from fleetctl.store import Store
from tests.builders import T0

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_every_kind_the_code_records_is_listed_and_documented():
    """A new kind of audit entry gets its meaning in fleetctl.audit, and docs/events.md lists them all."""
    recorded = set()
    for folder in ("fleetctl", "providers"):
        for f in (REPO / folder).rglob("*.py"):
            text = f.read_text(encoding="utf-8")
            recorded |= set(re.findall(r"\brecord\(\s*\"([a-z_]+)\"", text))
            recorded |= set(re.findall(r"\baudit=\"([a-z_]+)\"", text))
            recorded |= set(re.findall(r"kind=\"([a-z_]+)\"", text))
            recorded |= set(re.findall(r"_insert_event\(\s*conn,\s*\"([a-z_]+)\"", text))
    assert {"launch", "bind", "requeue", "notice_received", "node_lost", "offers_observed", "prune_finished"} <= recorded
    assert recorded <= set(EVENT_KINDS), sorted(recorded - set(EVENT_KINDS))
    documented = re.findall(r"^\| `([a-z_]+)` \| ([a-z-]+) \| (.+) \|$", (REPO / "docs" / "events.md").read_text(),
                            re.MULTILINE)
    assert [(k, s, m) for k, s, m in documented] == [(k, s or "-", m) for k, (s, m) in EVENT_KINDS.items()]


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    try:
        store.record("launch", T0, "aws/us-east-1/a/p3.2xlarge/spot", nodes=["n-1", "n-2"], reason="cheapest_offer")
        store.record("demand", T0, "", gpus={"V100-16GB": 2})
        store.record("bind", T0 + timedelta(minutes=1), "job-a", nodes=["n-1"], reason="fits_new_capacity")
        store.record("bind", T0 + timedelta(minutes=1), "job-b", nodes=["n-2"], reason="fits_new_capacity")
        store.record("preempt", T0 + timedelta(minutes=5), "job-b", by="job-a", reason="preempted", detail="x")
        store.record("terminate", T0 + timedelta(hours=2), "n-2", reason="idle_timeout", detail="idle 10 min")
        store.record("bind", T0 + timedelta(hours=3), "job_a", nodes=["n%1"], reason="fits")  # LIKE's wildcards
    finally:
        store.close()
    return url


def _events(url: str, *args: str) -> dict:
    shown = runner.invoke(app, ["events", "--state", url, "--since", "2000-01-01T00:00:00Z", "--format", "json",
                                *args])
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.output)


def test_events_filter_by_kind_subject_and_window(url):
    every = _events(url)
    assert [e["kind"] for e in every["events"]] == ["launch", "bind", "bind", "preempt", "terminate", "bind"]
    assert every["format_version"] == 1 and every["more"] is False  # demand (per-pass history) left out
    assert [e["kind"] for e in _events(url, "--kind", "demand")["events"]] == ["demand"]
    job_a = _events(url, "--for", "job-a")["events"]  # its bind, and the preemption made for it
    assert [(e["kind"], e["subject"]) for e in job_a] == [("bind", "job-a"), ("preempt", "job-b")]
    node = _events(url, "--for", "n-2")["events"]  # named in a launch's and a bind's details, subject of its end
    assert [(e["kind"], e["subject"]) for e in node] == [("launch", "aws/us-east-1/a/p3.2xlarge/spot"),
                                                          ("bind", "job-b"), ("terminate", "n-2")]
    assert [e["subject"] for e in _events(url, "--for", "n%1")["events"]] == ["job_a"]
    assert _events(url, "--for", "n-")["events"] == []  # a prefix names nothing
    window = _events(url, "--since", (T0 + timedelta(minutes=1)).isoformat(), "--until",
                     (T0 + timedelta(hours=2)).isoformat())["events"]
    assert [e["kind"] for e in window] == ["bind", "bind", "preempt"]
    newest = _events(url, "--limit", "2")
    assert [e["kind"] for e in newest["events"]] == ["terminate", "bind"] and newest["more"] is True
    table = runner.invoke(app, ["events", "--state", url, "--since", "2000-01-01T00:00:00Z", "--limit", "2"])
    assert table.exit_code == 0 and "older entries of the window are left out" in table.output, table.output


@pytest.mark.parametrize("args, words", [
    (("--kind", "terminated"), "--kind terminated: no such kind"),
    (("--since", "yesterday"), "--since 'yesterday' is not a time: give ISO 8601"),
    (("--since", "5w"), "--since '5w' is not a time"),
    (("--until", "9999-12-31T23:00:00-05:00"), "--until '9999-12-31T23:00:00-05:00': out of the range of times"),
    (("--since", "1h", "--until", "2h"), "--until 2h is not after --since 1h"),
    (("--limit", "0"), "Invalid value for '--limit'"),
    (("--for", "n\udcff"), "--for 'n\\xff' is not UTF-8 text (byte 0xff at character 2)"),
], ids=["kind", "since", "unit", "overflow", "until", "limit", "for-not-utf8"])
def test_events_refuses_bad_options(url, args, words):
    refused = runner.invoke(app, ["events", "--state", url, *args])
    assert refused.exit_code == 2 and words in " ".join(refused.output.split()), refused.output


def test_events_needs_a_store(tmp_path):
    missing = runner.invoke(app, ["events", "--state", f"sqlite:///{tmp_path / 'none.db'}"])
    assert missing.exit_code != 0 and not (tmp_path / "none.db").exists(), missing.output


def test_details_with_brackets_are_shown_as_written(url, monkeypatch):
    """A cancel --reason (or a node id a notice posted) is text: "[/bold]" crashed the table, "[red]" vanished."""
    from fleetctl.cli.common import console

    monkeypatch.setattr(console, "width", 200)  # made at import, whatever COLUMNS was then: one line a row
    store = Store(url)
    try:
        store.record("cancel_requested", T0 + timedelta(hours=4), "job-a", reason="[/bold] per [red]OPS-1[/red]",
                     state="running")
    finally:
        store.close()
    shown = runner.invoke(app, ["events", "--state", url, "--since", "2000-01-01T00:00:00Z",
                                "--kind", "cancel_requested"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "reason=[/bold] per [red]OPS-1[/red]" in shown.output


def test_the_deadline_in_a_notice_entry_is_written_as_every_time_of_the_log(tmp_path):
    """The deadline in the details of an `interruption` and a `notice_received` entry was written with
    str(): "2026-11-02 09:05:00+00:00" beside the entry's own "2026-11-02T09:03:00Z" (and status's JSON
    deadline_utc), and the string "None" for a notice without one, which `events --format json` showed as
    a string rather than null. Now as every time of the log: ISO 8601 in UTC with a Z, or null."""
    from fleetctl.controller.notices import NoticeServer
    from fleetctl.controller.reconcile import tick
    from fleetctl.controller.runtime import SimRuntime
    from fleetctl.model import InterruptionKind
    from providers.sim import SimProvider
    from tests.builders import job, offer, policy

    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    try:
        provider = SimProvider(store, seed=1, launch_delay_seconds=0.0, offers=(offer("a8", gpus=8, price=8.0),))
        pol = policy(rebalance_drain_probability=0.9)  # the hint is recorded and ignored

        def run(minutes):
            tick(store=store, provider=provider, runtime=SimRuntime(), policy=pol, now=T0 + timedelta(minutes=minutes))

        store.add_jobs([job("j1", gpus=8)], T0)
        run(0)
        run(1)
        (node_id,) = store.jobs(job_ids=["j1"])[0].node_ids
        provider.reclaim(node_id, T0 + timedelta(minutes=2), kind=InterruptionKind.REBALANCE)
        run(2)
        posted = NoticeServer(store, "127.0.0.1:0", token=None, clock=lambda: T0 + timedelta(minutes=3))
        body = {"node_id": node_id, "provider": "aws", "kind": "reclaim_warning", "notice_id": "i-1",
                "deadline_utc": "2026-11-02T09:05:00Z"}
        assert posted.accept(json.dumps(body).encode())[0] == 202
        posted.shutdown()
        run(3)
    finally:
        store.close()
    shown = [(e["kind"], e["payload"]["notice"], e["payload"]["deadline_utc"])
             for e in _events(url, "--kind", "notice_received,interruption")["events"]]
    assert shown == [("interruption", "rebalance", None),
                     ("notice_received", "reclaim_warning", "2026-11-02T09:05:00Z"),
                     ("interruption", "reclaim_warning", "2026-11-02T09:05:00Z")]
