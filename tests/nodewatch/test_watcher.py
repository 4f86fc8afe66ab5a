"""The watcher against the metadata fakes and the real endpoint: what each
cloud's service says becomes which notice, retries with bounded backoff,
approval order on Azure (only once the controller drained the node). Sleeps are injected and recorded: nothing
here waits on the wall clock."""

from __future__ import annotations

import hashlib
import json
import logging
import random
import socket
import threading
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest

from fleetctl import nodewatch
from fleetctl.controller.notices import NoticeServer, parse_notice
from fleetctl.model import InterruptionKind
from fleetctl.nodewatch import (
    UNNAMED_PREEMPT,
    AwsImds,
    AzureScheduledEvents,
    Backoff,
    DeliveryFailed,
    DeliveryStopped,
    GceMetadata,
    MetadataError,
    NodeWatcher,
    Notice,
    NoticeClient,
    metadata_source,
)
from tests.builders import T0
from tests.nodewatch.conftest import TOKEN, Clock, Sleeps, watcher_for
from tests.nodewatch.fakes import FakeAzure, FakeGce, FakeImds, FakeServer, _text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- what each cloud says


def test_imdsv2_token_ttl_header_and_refresh_after_expiry():
    with FakeImds("i-0abc") as fake:
        imds = AwsImds(fake.url)
        assert imds.discover_node_id() == "i-0abc"
        puts = [h for m, p, h in fake.requests if m == "PUT"]
        assert len(puts) == 1 and puts[0]["x-aws-ec2-metadata-token-ttl-seconds"] == "21600"
        assert imds.poll("i-0abc", Clock(T0)) == ()  # 404 on both: nothing announced
        assert len([r for r in fake.requests if r[0] == "PUT"]) == 1  # the session token is reused
        fake.revoke_tokens()
        fake.instance_action = {"action": "stop", "time": "2026-11-02T09:02:00Z"}
        fake.rebalance = {"noticeTime": "2026-11-02T08:59:00Z"}
        warning, hint = imds.poll("i-0abc", Clock(T0))
        assert len([r for r in fake.requests if r[0] == "PUT"]) == 2  # a 401 got a new token, once
    assert (warning.kind, warning.deadline_utc, warning.notice_id) == (
        InterruptionKind.RECLAIM_WARNING, T0 + timedelta(minutes=2), "stop@2026-11-02T09:02:00Z")
    assert (hint.kind, hint.deadline_utc, hint.notice_id) == (
        InterruptionKind.REBALANCE, None, "rebalance@2026-11-02T08:59:00Z")


def test_imds_without_a_token_is_refused_by_the_fake():
    """The fake enforces IMDSv2, so the watcher passing above is not vacuous."""
    with FakeImds("i-0abc") as fake:
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(fake.url + "/latest/meta-data/instance-id", timeout=5)
        assert exc.value.code == 401


def test_gce_header_name_and_preemption():
    with FakeGce("gpu-node-7", instance_id="99") as fake:
        req = urllib.request.Request(fake.url + "/computeMetadata/v1/instance/name")
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(req, timeout=5)
        assert exc.value.code == 403  # no Metadata-Flavor: Google
        gce = GceMetadata(fake.url)
        assert gce.discover_node_id() == "us-central1-a/gpu-node-7"  # ZONE/NAME, as the GCP adapter names it
        assert gce.poll("gpu-node-7", Clock(T0)) == ()
        fake.preempt()
        (notice,) = gce.poll("gpu-node-7", Clock(T0))
    assert notice.kind is InterruptionKind.RECLAIM_WARNING
    assert notice.deadline_utc == T0 + timedelta(seconds=30) and notice.notice_id == "preempted@99"


class GceSaying(FakeGce):
    """``preempted`` answers ``said`` (what a newer or broken metadata server might)."""

    said = "MAYBE"

    def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
        status, ctype, data, *rest = super().handle(method, path, query, headers, body)
        if path.endswith("/instance/preempted"):
            data = self.said.encode()
        return (status, ctype, data, *rest)


@pytest.mark.parametrize("said", ["MAYBE", "", "1", "PREEMPTED"], ids=["maybe", "empty", "one", "preempted"])
def test_a_gce_preempted_value_other_than_true_or_false_is_logged_with_the_value_and_is_no_preemption(said, caplog):
    """Only TRUE is a preemption (GCE answers TRUE or FALSE): another value is
    logged with the value at each poll and nothing is posted (the controller
    here is unreachable, so a notice would end the run with DeliveryFailed);
    the watcher keeps polling, and a TRUE after it is delivered as usual."""
    with GceSaying("n1") as fake:
        fake.said = said
        sleeps = Sleeps()
        watcher = watcher_for(GceMetadata(fake.url), f"http://127.0.0.1:{free_port()}", sleeps=sleeps)
        with caplog.at_level(logging.WARNING, logger="fleetctl.nodewatch"):
            watcher.run(max_polls=2)
        warned = [r.getMessage() for r in caplog.records]
        assert warned == [f"metadata: computeMetadata instance/preempted: expected TRUE or FALSE, got {said!r}"] * 2
        assert watcher.delivered == {} and sleeps == [1.0]  # polled again after the error pause
        fake.said = "TRUE"
        (notice,) = GceMetadata(fake.url).poll("us-central1-a/n1", Clock(T0))
    assert notice.kind is InterruptionKind.RECLAIM_WARNING


def test_gce_wait_for_change_delivers_as_soon_as_the_value_flips(make_controller):
    c = make_controller("gcp")
    with FakeGce("gpu-node-7") as fake:
        source = GceMetadata(fake.url, wait_for_change=True, wait_seconds=5)
        watcher = watcher_for(source, c.endpoint.url, clock=c.clock)
        thread = threading.Thread(target=watcher.run)
        thread.start()
        try:
            assert fake.waiting.wait(10)  # the watcher read FALSE, then blocked waiting for a change
            fake.preempt()
            assert watcher_delivered(watcher)
        finally:
            watcher.stop.set()
            fake.close()  # releases a request still waiting for a change
            thread.join(timeout=10)
    assert not thread.is_alive()
    assert any("wait_for_change=true&last_etag=e-false" in p for m, p, h in fake.requests)
    (event,) = c.store.interruptions()
    assert event.node_id == "us-central1-a/gpu-node-7"


def test_gce_wait_for_change_sees_a_notice_that_stood_before_the_watcher_started(make_controller):
    """A restarted watcher must not sit out the wait with the notice already standing."""
    c = make_controller("gcp")
    with FakeGce("gpu-node-7") as fake:
        fake.preempt()
        source = GceMetadata(fake.url, wait_for_change=True, wait_seconds=600)
        watcher = watcher_for(source, c.endpoint.url, clock=c.clock)
        assert len(watcher.poll_once()) == 1  # the first read does not wait
    assert not any("wait_for_change" in p for m, p, h in fake.requests)


def test_gce_wait_for_change_deadline_runs_from_when_true_came_back(make_controller):
    """The watcher read its clock before the blocking request, so a preemption
    seen 8 s into the wait got a deadline 8 s too early (up to the 30 s wait)."""
    c = make_controller("gcp")
    with FakeGce("gpu-node-7") as fake:
        source = GceMetadata(fake.url, wait_for_change=True, wait_seconds=600)
        watcher = watcher_for(source, c.endpoint.url, clock=c.clock)
        assert watcher.poll_once() == []  # FALSE, and its ETag
        waiting = threading.Thread(target=watcher.poll_once)
        waiting.start()
        try:
            assert fake.waiting.wait(10)  # blocked on wait_for_change
            c.clock.now = T0 + timedelta(seconds=8)  # time passes during the wait
            fake.preempt()
        finally:
            waiting.join(timeout=10)
    (event,) = c.store.interruptions()
    assert event.deadline_utc == T0 + timedelta(seconds=38)  # when TRUE came back + 30 s


class GceWithoutEtag(FakeGce):
    """The same answers, without the ETag header."""

    def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
        status, ctype, data, *_ = super().handle(method, path, query, headers, body)
        return status, ctype, data


def test_gce_wait_for_change_waits_instead_of_the_interval_and_polls_at_the_interval_without_an_etag(
        make_controller, caplog):
    """node-watch passed interval 0 with --gce-wait-for-change (the wait was to
    be the pause), so an answer without an ETag, after which there is no wait,
    had it read instance/preempted in a tight loop (3000 requests in 2 s). It
    passes its interval now, which the watcher skips before a wait."""
    c = make_controller("gcp")
    with FakeGce("gpu-node-7") as fake:
        sleeps = Sleeps()
        watcher = watcher_for(GceMetadata(fake.url, wait_for_change=True, wait_seconds=600), c.endpoint.url,
                              sleeps=sleeps, clock=c.clock)
        watcher.interval_seconds = 5.0
        thread = threading.Thread(target=lambda: watcher.run(max_polls=2))
        thread.start()
        try:
            assert fake.waiting.wait(10)  # the second poll is the wait
            fake.preempt()
        finally:
            thread.join(timeout=10)
    assert sleeps == []  # with an ETag the next poll is the wait: no interval before it
    assert len(c.store.interruptions()) == 1
    with GceWithoutEtag("gpu-node-7") as fake, caplog.at_level(logging.WARNING, logger="fleetctl.nodewatch"):
        sleeps = Sleeps()
        watcher = watcher_for(GceMetadata(fake.url, wait_for_change=True, wait_seconds=600), "http://127.0.0.1:9",
                              sleeps=sleeps, node_id="n1")
        watcher.interval_seconds = 5.0
        watcher.run(max_polls=3)
    assert sleeps == [5.0, 5.0]  # the interval between plain reads
    preempted = [p for m, p, h in fake.requests if "instance/preempted" in p]
    assert len(preempted) == 3 and not any("wait_for_change" in p for p in preempted)
    assert [r.getMessage().count("without an ETag") for r in caplog.records] == [1]


def test_a_watcher_with_a_zero_interval_never_polls_in_a_tight_loop():
    """The auditor's setup: the watcher as node-watch configured it for
    --gce-wait-for-change (interval 0), against answers without an ETag."""
    with GceWithoutEtag("gpu-node-7") as fake:
        sleeps = Sleeps()
        watcher = watcher_for(GceMetadata(fake.url, wait_for_change=True), "http://127.0.0.1:9", sleeps=sleeps,
                              node_id="n1")
        assert watcher.interval_seconds == 0.0
        watcher.run(max_polls=3)
    assert sleeps == [0.1, 0.1]


def watcher_delivered(watcher, timeout=10.0) -> bool:  # noqa: ANN001
    done = threading.Event()

    def check() -> None:
        while not done.is_set() and not watcher.delivered:
            done.wait(0.02)
        done.set()

    t = threading.Thread(target=check)
    t.start()
    t.join(timeout)
    done.set()
    return bool(watcher.delivered)


def test_azure_preempt_for_this_vm_only_and_nothing_else():
    with FakeAzure("vm-gpu-3") as fake:
        az = AzureScheduledEvents(fake.url)
        assert az.discover_node_id() == "vm-gpu-3"
        fake.schedule_preempt("ev-other", T0 + timedelta(seconds=30), resources=["vm-gpu-4"])
        fake.events.append({"EventId": "ev-reboot", "EventType": "Reboot", "Resources": ["vm-gpu-3"],
                            "EventStatus": "Scheduled", "NotBefore": "Mon, 02 Nov 2026 09:15:00 GMT"})
        assert az.poll("vm-gpu-3", Clock(T0)) == ()
        fake.schedule_preempt("ev-mine", T0 + timedelta(seconds=45))
        (notice,) = az.poll("vm-gpu-3", Clock(T0))
        assert not fake.acks  # polling never acknowledges
    assert (notice.notice_id, notice.deadline_utc) == ("ev-mine", T0 + timedelta(seconds=45))
    gets = [h for m, p, h in fake.requests if "scheduledevents" in p]
    assert all(h["metadata"] == "true" for h in gets)
    assert all("api-version=2020-07-01" in p for m, p, h in fake.requests if "scheduledevents" in p)


def test_azure_started_event_has_its_deadline_now():
    with FakeAzure("vm-gpu-3") as fake:
        fake.schedule_preempt("ev", T0 + timedelta(seconds=30))
        fake.events[0].update(EventStatus="Started", NotBefore="")
        (notice,) = AzureScheduledEvents(fake.url).poll("vm-gpu-3", Clock(T0 + timedelta(seconds=5)))
    assert notice.deadline_utc == T0 + timedelta(seconds=5)


def test_a_malformed_azure_event_does_not_hide_this_vms_preempt(caplog):
    """Events of any shape beside a real Preempt for this VM: Resources as a
    string (a substring of it is this VM's name) or a number, an event that is
    not an object. Before, the number raised TypeError (node-watch stopped) and
    the string counted "vm-gpu-3" as "vm-gpu-30"'s."""
    with FakeAzure("vm-gpu-3") as fake:
        fake.events += [{"EventId": "ev-str", "EventType": "Preempt", "Resources": "vm-gpu-30", "NotBefore": ""},
                        {"EventId": "ev-int", "EventType": "Preempt", "Resources": 3, "NotBefore": ""}, [1], None]
        fake.schedule_preempt("ev-mine", T0 + timedelta(seconds=45))
        az = AzureScheduledEvents(fake.url)
        with caplog.at_level(logging.WARNING, logger="fleetctl.nodewatch"):
            (notice,) = az.poll("vm-gpu-3", Clock(T0))
            assert az.poll("vm-gpu-3", Clock(T0)) == (notice,)
    assert notice.notice_id == "ev-mine"
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and "'vm-gpu-30', not a list of VM names" in warned[0], warned  # once per event


@pytest.mark.parametrize("event_id", [None, "", 7])
def test_an_azure_preempt_without_an_event_id_is_delivered_and_not_approved(event_id, caplog):
    """It raised MetadataError on every poll, so the node was never drained
    and a well-formed Preempt beside it was held back too."""
    with FakeAzure("vm-gpu-3") as fake:
        fake.schedule_preempt("unnamed", T0 + timedelta(seconds=30))
        fake.schedule_preempt("ev-mine", T0 + timedelta(seconds=45))
        fake.events[0]["EventId"] = event_id
        az = AzureScheduledEvents(fake.url)
        with caplog.at_level(logging.WARNING, logger="fleetctl.nodewatch"):
            unnamed, mine = az.poll("vm-gpu-3", Clock(T0))
            assert az.poll("vm-gpu-3", Clock(T0)) == (unnamed, mine)
        az.drained(unnamed)
        az.drained(mine)
        assert fake.acks == ["ev-mine"]  # StartRequests cannot name the unnamed one
    assert (unnamed.notice_id, unnamed.deadline_utc) == (UNNAMED_PREEMPT, T0 + timedelta(seconds=30))
    assert (mine.notice_id, mine.deadline_utc) == ("ev-mine", T0 + timedelta(seconds=45))
    assert [r.getMessage().count("has no EventId") for r in caplog.records] == [1]  # once, not every poll


@pytest.mark.parametrize("not_before", [17, "next Tuesday"])
def test_an_azure_preempt_with_an_unreadable_not_before_is_delivered_due_now(not_before, caplog):
    with FakeAzure("vm-gpu-3") as fake:
        fake.schedule_preempt("ev-mine", T0 + timedelta(seconds=45))
        fake.events[0]["NotBefore"] = not_before
        (notice,) = AzureScheduledEvents(fake.url).poll("vm-gpu-3", Clock(T0))
    assert (notice.notice_id, notice.deadline_utc) == ("ev-mine", T0)
    assert "Preempt ev-mine taken as due now" in caplog.text


def test_an_aws_notice_with_an_unreadable_time_is_delivered_with_two_minutes():
    with FakeImds("i-0abc") as fake:
        fake.instance_action = {"action": "terminate", "time": "soon"}
        (notice,) = AwsImds(fake.url).poll("i-0abc", Clock(T0))
    assert (notice.kind, notice.deadline_utc) == (InterruptionKind.RECLAIM_WARNING, T0 + timedelta(minutes=2))


def _accepted_by_the_endpoint(notice: Notice) -> None:
    """The body node-watch posts passes the endpoint's own validation (a 400 is not retried)."""
    event, body = parse_notice(json.dumps(notice.to_json()).encode(), T0)
    assert (event.node_id, event.kind, event.deadline_utc) == (notice.node_id, notice.kind, notice.deadline_utc)


@pytest.mark.parametrize("instance_action, rebalance", [
    ({"action": "terminate"}, None),  # no time: was MetadataError on every poll, never delivered
    ("terminate", None),  # not an object
    ({"action": "stop", "time": "9999-12-31T23:59:59-05:00"}, None),  # past year 9999 in UTC: OverflowError
    ({"action": "terminate", "time": "2026-11-02T09:02:00Z"}, {"noticeTime": 7}),  # held back by the rebalance
    ({"action": "terminate", "time": "x" * 400}, None),  # a notice id over the endpoint's 255 characters
])
def test_an_aws_notice_whose_document_cannot_be_read_is_delivered_with_two_minutes(instance_action, rebalance,
                                                                                   caplog):
    """IMDS answers 200 on spot/instance-action only once the instance is
    marked, so the notice stands whatever its document says."""
    with FakeImds("i-0abc") as fake:
        fake.instance_action, fake.rebalance = instance_action, rebalance
        imds = AwsImds(fake.url)
        notices = imds.poll("i-0abc", Clock(T0))
        assert imds.poll("i-0abc", Clock(T0)) == notices  # the same notice on every poll: delivered once
    reclaim = notices[0]
    assert reclaim.kind is InterruptionKind.RECLAIM_WARNING
    readable = isinstance(instance_action, dict) and instance_action.get("time") == "2026-11-02T09:02:00Z"
    assert reclaim.deadline_utc == (datetime(2026, 11, 2, 9, 2, tzinfo=timezone.utc) if readable
                                    else T0 + timedelta(minutes=2))
    assert [n.kind for n in notices[1:]] == ([InterruptionKind.REBALANCE] if rebalance else [])
    for notice in notices:
        _accepted_by_the_endpoint(notice)
    assert "expected" in caplog.text or "not an ISO-8601 time" in caplog.text


@pytest.mark.parametrize("event_id", ["e" * 300, "   "])
def test_an_azure_event_id_the_endpoint_would_refuse_is_posted_as_its_digest(event_id):
    with FakeAzure("vm-gpu-3") as fake:
        fake.schedule_preempt(event_id, T0 + timedelta(seconds=30))
        (notice,) = AzureScheduledEvents(fake.url).poll("vm-gpu-3", Clock(T0))
    assert notice.notice_id == event_id  # kept for the approval, which must name it
    posted = notice.to_json()["notice_id"]
    assert posted == "sha256:" + hashlib.sha256(event_id.encode()).hexdigest()
    _accepted_by_the_endpoint(notice)


def test_an_azure_not_before_past_year_9999_is_due_now():
    with FakeAzure("vm-gpu-3") as fake:
        fake.schedule_preempt("ev-mine", T0 + timedelta(seconds=30))
        fake.events[0]["NotBefore"] = "Fri, 31 Dec 9999 23:59:59 -0500"  # was an OverflowError: node-watch died
        (notice,) = AzureScheduledEvents(fake.url).poll("vm-gpu-3", Clock(T0))
    assert notice.deadline_utc == T0
    _accepted_by_the_endpoint(notice)


# --------------------------------------------------------------------------- delivery and retries


def test_wrong_token_is_retried_with_bounded_backoff_then_given_up(make_controller):
    c = make_controller("aws")
    with FakeImds("i-0abc") as fake:
        fake.instance_action = {"action": "terminate", "time": "2026-11-02T09:02:00Z"}
        sleeps = Sleeps()
        watcher = watcher_for(AwsImds(fake.url), c.endpoint.url, token="not-the-token", sleeps=sleeps,
                              max_attempts=6)
        with pytest.raises(DeliveryFailed) as exc:
            watcher.poll_once()
    message = str(exc.value)
    assert "after 6 attempt(s)" in message and "HTTP 401" in message and "--token-file" in message
    assert len(sleeps) == 5  # between the six attempts
    caps = [min(2.0, 0.5 * 2 ** i) for i in range(5)]  # 0.5, 1, 2, 2, 2: exponential, then capped
    assert all(cap / 2 <= s <= cap for s, cap in zip(sleeps, caps)), sleeps
    assert watcher.delivered == {}
    assert c.store.interruptions(unhandled_only=False) == ()


def test_controller_down_is_retried_until_it_comes_up(make_controller):
    c = make_controller("aws", start=False)
    port = free_port()
    late: list[NoticeServer] = []

    def bring_up() -> None:
        late.append(NoticeServer(c.endpoint_store, f"127.0.0.1:{port}", token=TOKEN, clock=c.clock).start())

    sleeps = Sleeps(then={2: bring_up})  # refused twice, then the daemon is up
    try:
        with FakeImds("i-0abc") as fake:
            fake.instance_action = {"action": "terminate", "time": "2026-11-02T09:02:00Z"}
            watcher = watcher_for(AwsImds(fake.url), f"http://127.0.0.1:{port}", sleeps=sleeps)
            (event_id,) = watcher.poll_once()
    finally:
        for s in late:
            s.shutdown()
    assert len(sleeps) == 2
    (event,) = c.store.interruptions()
    assert event.event_id == event_id and event.node_id == "i-0abc"


def test_controller_down_for_good_gives_up_with_the_reason():
    port = free_port()
    with FakeGce("n1") as fake:
        fake.preempt()
        sleeps = Sleeps()
        watcher = watcher_for(GceMetadata(fake.url), f"http://127.0.0.1:{port}", sleeps=sleeps, max_attempts=3)
        with pytest.raises(DeliveryFailed, match=r"after 3 attempt\(s\): controller unreachable"):
            watcher.poll_once()
    assert len(sleeps) == 2


def test_an_invalid_notice_is_not_retried(make_controller):
    c = make_controller()

    class Odd:
        cloud = "aws"
        approves = True
        next_poll_waits = False

        def discover_node_id(self) -> str:
            return "n1"

        def poll(self, node_id, now):  # noqa: ANN001, ANN201
            return (Notice("sim", node_id, InterruptionKind.RECLAIM_WARNING, "x", None),)

        def drained(self, notice) -> None:  # noqa: ANN001
            raise AssertionError("never approved")

    sleeps = Sleeps()
    with pytest.raises(DeliveryFailed, match="HTTP 400.*provider"):
        watcher_for(Odd(), c.endpoint.url, sleeps=sleeps).poll_once()
    assert sleeps == []


def test_azure_is_approved_only_once_the_controller_drained_the_node(make_controller):
    c = make_controller("azure")
    _, node = c.run_checkpointable_job()
    state_at_approval: list[tuple[int, int]] = []  # (notices stored, notices still unhandled)
    with FakeAzure(node.node_id, on_ack=lambda _id: state_at_approval.append(
            (len(c.store.interruptions(unhandled_only=False)), len(c.store.interruptions())))) as fake:
        fake.schedule_preempt("ev-1", c.clock.now + timedelta(seconds=30))
        refused = watcher_for(AzureScheduledEvents(fake.url), c.endpoint.url, token="stale", max_attempts=2)
        with pytest.raises(DeliveryFailed):
            refused.poll_once()
        assert fake.acks == []  # not delivered, not approved
        watcher = watcher_for(AzureScheduledEvents(fake.url), c.endpoint.url)
        (event_id,) = watcher.poll_once()
        watcher.poll_once()
        assert fake.acks == []  # stored, but the node is not drained yet: Azure keeps it until NotBefore
        c.tick()  # the interruptions pass handles the stored notice
        assert c.store.interruptions() == ()
        watcher.poll_once()
        assert fake.acks == ["ev-1"] and state_at_approval == [(1, 0)]
        watcher.poll_once()  # the event is Started now; still one notice, approved once
        assert fake.acks == ["ev-1"]
    assert c.store.interruption_handled_at(event_id)[0]


def test_azure_is_not_approved_while_the_controller_cannot_say(make_controller):
    c = make_controller("azure")
    with FakeAzure("vm-gpu-3") as fake:
        fake.schedule_preempt("ev-1", T0 + timedelta(seconds=30))
        watcher = watcher_for(AzureScheduledEvents(fake.url), c.endpoint.url)
        watcher.poll_once()
        c.store.mark_interruption_handled(watcher.delivered[next(iter(watcher.delivered))], T0)
        stale = watcher_for(AzureScheduledEvents(fake.url), c.endpoint.url)
        stale.delivered = dict(watcher.delivered)
        stale.client.token = "stale"  # the status answer is 401: no approval, no exception
        stale.poll_once()
        assert fake.acks == []
        watcher.poll_once()
        assert fake.acks == ["ev-1"]


def test_a_failed_azure_approval_is_retried_without_re_posting(make_controller):
    c = make_controller("azure")
    _, node = c.run_checkpointable_job()
    with FakeAzure(node.node_id) as fake:
        fake.schedule_preempt("ev-1", c.clock.now + timedelta(seconds=30))
        watcher = watcher_for(AzureScheduledEvents(fake.url), c.endpoint.url)
        posts: list[str] = []
        original = watcher.client.post
        watcher.client.post = lambda n: posts.append(n.notice_id) or original(n)
        fake.refuse_acks = True
        watcher.poll_once()
        c.tick()  # handled: the watcher may approve now
        with pytest.raises(MetadataError, match="StartRequests ev-1: HTTP 500"):
            watcher.poll_once()
        assert posts == ["ev-1"] and fake.acks == []  # delivered, not approved
        fake.refuse_acks = False
        watcher.poll_once()
        assert posts == ["ev-1"] and fake.acks == ["ev-1"]  # approved now, not posted again
    assert len(c.store.interruptions(unhandled_only=False)) == 1


def test_run_survives_an_unreachable_metadata_service(caplog):
    port = free_port()
    sleeps = Sleeps()
    watcher = watcher_for(AwsImds(f"http://127.0.0.1:{port}"), f"http://127.0.0.1:{free_port()}", sleeps=sleeps,
                          node_id="i-0abc")
    watcher.interval_seconds = 5.0
    with caplog.at_level(logging.WARNING, logger="fleetctl.nodewatch"):
        watcher.run(max_polls=3)
    assert sleeps == [5.0, 5.0]  # polled three times, waited the interval between
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 3
    sleeps.clear()
    watcher.interval_seconds = 0.0  # GCE wait-for-change: the poll itself blocks
    watcher.run(max_polls=3)
    assert sleeps == [1.0, 1.0]  # a failing metadata service is not polled in a tight loop


def test_backoff_bounds():
    b = Backoff(initial_seconds=1.0, max_seconds=4.0, max_attempts=5)
    rng = random.Random(1)
    caps = [1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0]  # doubling from initial_seconds, capped at max_seconds
    for failed, cap in enumerate(caps, start=1):
        for _ in range(20):
            assert cap / 2 <= b.delay(failed, rng) <= cap
    assert 2.0 <= b.delay(5000, rng) <= 4.0  # a long run of failures stays capped (was an OverflowError)


def test_metadata_source_names_the_clouds():
    assert isinstance(metadata_source("aws"), AwsImds)
    assert isinstance(metadata_source("gcp", gce_wait_for_change=True), GceMetadata)
    assert isinstance(metadata_source("azure"), AzureScheduledEvents)
    with pytest.raises(ValueError, match="aws, gcp, azure"):
        metadata_source("ibm")


def test_clock_is_used_for_the_gce_deadline(make_controller):
    c = make_controller("gcp")
    c.clock.now = T0 + timedelta(minutes=7)
    with FakeGce("n1") as fake:
        fake.preempt()
        watcher_for(GceMetadata(fake.url), c.endpoint.url, clock=Clock(T0 + timedelta(minutes=7))).poll_once()
    (event,) = c.store.interruptions()
    assert event.deadline_utc == T0 + timedelta(minutes=7, seconds=30)


def test_a_stop_while_retrying_a_delivery_says_it_stopped_not_that_it_gave_up():
    """SIGTERM during the retries read "gave up delivering ... after 2
    attempt(s)", as if the retry bound had been reached."""
    with FakeGce("n1") as fake:
        fake.preempt()
        watcher = watcher_for(GceMetadata(fake.url), f"http://127.0.0.1:{free_port()}", max_attempts=10)
        watcher.sleep = Sleeps(then={1: watcher.request_stop})  # the signal comes during the first backoff
        with pytest.raises(DeliveryStopped) as exc:
            watcher.poll_once()
    message = str(exc.value)
    assert message.startswith("stopped by a signal before the reclaim_warning notice preempted@")
    assert "(1 attempt(s), the last: controller unreachable" in message and "gave up" not in message


class ImdsWithABrokenRebalancePath(FakeImds):
    """spot/instance-action as usual; events/recommendations/rebalance answers ``status``."""

    def __init__(self, instance_id: str, status: int) -> None:
        super().__init__(instance_id)
        self.status = status

    def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
        if path == "/latest/meta-data/events/recommendations/rebalance" and \
                headers.get("x-aws-ec2-metadata-token") in self.tokens:
            return _text(self.status, "Internal Server Error" if self.status == 500 else "Forbidden")
        return super().handle(method, path, query, headers, body)


@pytest.mark.parametrize("status", [500, 403])
def test_an_aws_reclaim_notice_is_delivered_though_the_rebalance_path_fails(make_controller, status, caplog):
    """The rebalance read raised after the instance-action notice was read, on
    every poll: the reclaim notice was never delivered."""
    c = make_controller("aws")
    with ImdsWithABrokenRebalancePath("i-0abc", status) as fake:
        fake.instance_action = {"action": "terminate", "time": "2026-11-02T09:02:00Z"}
        with caplog.at_level(logging.WARNING, logger="fleetctl.nodewatch"):
            (event_id,) = watcher_for(AwsImds(fake.url), c.endpoint.url).poll_once()
        fake.instance_action = None
        with pytest.raises(MetadataError, match=f"rebalance: HTTP {status}"):  # nothing else to deliver: raised
            AwsImds(fake.url).poll("i-0abc", Clock(T0))
    (event,) = c.store.interruptions()
    assert event.event_id == event_id and event.kind is InterruptionKind.RECLAIM_WARNING
    assert f"rebalance: HTTP {status}" in caplog.text and "delivered all the same" in caplog.text


def test_an_aws_reclaim_notice_is_delivered_though_the_rebalance_read_cannot_connect(make_controller):
    c = make_controller("aws")

    class Imds(AwsImds):
        def _get(self, path):  # noqa: ANN001, ANN202 - the connection drops on the second read
            if path.endswith("/rebalance"):
                raise ConnectionResetError("connection reset by peer")
            return super()._get(path)

    with FakeImds("i-0abc") as fake:
        fake.instance_action = {"action": "terminate", "time": "2026-11-02T09:02:00Z"}
        assert len(watcher_for(Imds(fake.url), c.endpoint.url).poll_once()) == 1
    assert len(c.store.interruptions()) == 1


@pytest.fixture
def local_zone_five_hours_west(monkeypatch):
    """The process's local time zone is UTC-5 for the test (a POSIX TZ: no tz database needed)."""
    import time

    monkeypatch.setenv("TZ", "EST5")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("not_before", ["Mon, 02 Nov 2026 09:03:00 -0000", "Mon, 02 Nov 2026 09:03:00",
                                        "Mon, 02 Nov 2026 09:03:00 GMT", "Mon, 02 Nov 2026 04:03:00 -0500"])
def test_an_azure_not_before_without_a_zone_is_utc_not_the_nodes_local_time(not_before,
                                                                          local_zone_five_hours_west):
    """Read without a zone, it was taken as the node's local time: 5 hours off here."""
    with FakeAzure("vm-gpu-3") as fake:
        fake.schedule_preempt("ev-mine", T0)
        fake.events[0]["NotBefore"] = not_before
        (notice,) = AzureScheduledEvents(fake.url).poll("vm-gpu-3", Clock(T0))
    assert notice.deadline_utc == T0 + timedelta(minutes=3)


@pytest.mark.parametrize("cloud", ["aws", "azure"])
def test_a_lone_surrogate_in_the_metadata_does_not_keep_the_notice_from_being_delivered(make_controller, cloud):
    """A JSON escape such as \\ud800 in the metadata service's answer reads as
    an unpaired surrogate, which the endpoint refuses with a 400 (not retried):
    the notice was never delivered."""
    c = make_controller(cloud)
    if cloud == "aws":
        fake = FakeImds("i-0abc")
        fake.instance_action = {"action": "termin\ud800ate", "time": "2026-11-02T09:02:00Z"}
        source, node_id = AwsImds, "i-0abc"
    else:
        fake = FakeAzure("vm-gpu-3")
        fake.schedule_preempt("ev-\ud800", T0 + timedelta(seconds=30))
        fake.schedule_preempt("ev-\udfff", T0 + timedelta(seconds=30))  # another one: not taken for the first
        fake.events[0]["EventStatus"] = "Sched\udc00uled"
        source, node_id = AzureScheduledEvents, "vm-gpu-3"
    with fake:
        delivered = watcher_for(source(fake.url), c.endpoint.url).poll_once()
    events = c.store.interruptions()
    assert len(delivered) == len(events) == (1 if cloud == "aws" else 2)
    assert {e.node_id for e in events} == {node_id}
    details = [e["payload"]["detail"] for e in c.store.events("notice_received")]
    assert len(details) == len(events) and all("\ufffd" in d for d in details), details


def test_a_node_id_that_is_not_valid_unicode_is_posted_with_a_replacement_character():
    """--node-id from bytes that are not UTF-8 reaches Python as lone surrogates."""
    notice = Notice("gcp", "z/n\udcff", InterruptionKind.RECLAIM_WARNING, "preempted@1", T0)
    event, _ = parse_notice(json.dumps(notice.to_json()).encode(), T0)
    assert event.node_id == "z/n\ufffd"


def test_azure_is_not_approved_for_a_node_the_controller_does_not_know(make_controller, caplog):
    """The controller marks such a notice handled without draining anything
    (another cluster's node, a --node-id typo), and the watcher approved it:
    Azure then took the node early, with nothing checkpointed. Now it says so,
    once, and leaves the eviction to NotBefore."""
    c = make_controller("azure")
    c.run_checkpointable_job()
    with FakeAzure("vm-gpu-3") as fake:
        fake.schedule_preempt("ev-1", c.clock.now + timedelta(seconds=30))
        watcher = watcher_for(AzureScheduledEvents(fake.url), c.endpoint.url, node_id="vm-gpu-3-typo")
        watcher.poll_once()
        c.tick()  # handled: an unknown node, nothing drained
        assert c.store.interruptions() == () and c.jobs()["j"].interruptions == 0
        with caplog.at_level(logging.ERROR, logger="fleetctl.nodewatch"):
            watcher.poll_once()
            watcher.poll_once()
        assert fake.acks == []
    errors = [r.getMessage() for r in caplog.records if r.name == "fleetctl.nodewatch"]
    assert len(errors) == 1, errors  # once, not at every poll
    (error,) = errors
    assert "does not know node vm-gpu-3-typo" in error and "ev-1 not approved" in error


# --------------------------------------------------------------------------- found by mutation testing (h16)


@pytest.mark.parametrize("instance_action, notice_id", [
    # Readable: the notice is named by its action and time.
    ({"action": "stop", "time": "2026-11-02T09:02:00Z"}, "stop@2026-11-02T09:02:00Z"),
    # No time: the action is known, the document itself stands for the time.
    ({"action": "terminate"}, 'terminate@{"action": "terminate"}'),
    # Not an object: neither is known; the document (a JSON string) names the notice.
    ("terminate", 'unreadable@"terminate"'),
])
def test_an_aws_notice_is_named_by_its_action_and_time_or_by_the_document(instance_action, notice_id):
    """The notice id is ACTION@TIME (docs/node-watch.md: AWS, action and time); what cannot be read of the
    document is 'unreadable' for the action and the document's text for the time, so the same document is the
    same notice on every poll."""
    with FakeImds("i-0abc") as fake:
        fake.instance_action = instance_action
        (notice,) = AwsImds(fake.url).poll("i-0abc", Clock(T0))
    action, when = notice_id.split("@", 1)
    assert (notice.provider, notice.node_id, notice.notice_id) == ("aws", "i-0abc", notice_id)
    assert notice.detail == f"IMDS spot/instance-action {action} at {when}"


def test_an_aws_instance_action_path_that_fails_is_an_error_not_no_notice():
    """spot/instance-action answers 404 while no notice stands and 200 with one: any other status (here a 500
    from IMDS) says nothing either way, so the poll raises (logged, polled again) instead of reading 'no notice',
    even though the rebalance path answers 404 as usual."""

    class Imds(FakeImds):
        def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
            if path == "/latest/meta-data/spot/instance-action" and \
                    headers.get("x-aws-ec2-metadata-token") in self.tokens:
                return _text(500, "Internal Server Error " + "x" * 300)
            return super().handle(method, path, query, headers, body)

    with Imds("i-0abc") as fake, pytest.raises(MetadataError) as info:
        AwsImds(fake.url).poll("i-0abc", Clock(T0))
    # The body is cut to its first 200 characters.
    assert str(info.value) == "spot/instance-action: HTTP 500 Internal Server Error " + "x" * (200 - 22)


@pytest.mark.parametrize("rebalance, notice_id", [
    ({"noticeTime": "2026-11-02T08:58:00Z"}, "rebalance@2026-11-02T08:58:00Z"),
    # noticeTime not a string: the recommendation stands, named by the document itself.
    ({"noticeTime": 7}, 'rebalance@{"noticeTime": 7}'),
])
def test_an_aws_rebalance_recommendation_is_named_by_its_notice_time_or_by_the_document(rebalance, notice_id):
    """No instance-action (404), a rebalance recommendation: one REBALANCE notice without a deadline (EC2 does not
    take the instance for it), named rebalance@noticeTime."""
    with FakeImds("i-0abc") as fake:
        fake.rebalance = rebalance
        (notice,) = AwsImds(fake.url).poll("i-0abc", Clock(T0))
    assert (notice.kind, notice.notice_id, notice.deadline_utc) == (InterruptionKind.REBALANCE, notice_id, None)
    assert notice.detail == f"IMDS rebalance recommendation at {notice_id.removeprefix('rebalance@')}"


def test_a_gce_preempted_read_that_fails_is_an_http_error_whatever_its_body():
    """A metadata server having a bad moment (HTTP 503) is reported as such, and its body is not read as the value:
    here it even says TRUE, which is no preemption notice (only a 200 answer is the value)."""

    class Gce(FakeGce):
        def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
            if path.endswith("/instance/preempted"):
                return _text(503, "TRUE")
            return super().handle(method, path, query, headers, body)

    with Gce("gpu-node-7") as fake, pytest.raises(MetadataError) as info:
        GceMetadata(fake.url).poll("us-central1-a/gpu-node-7", Clock(T0))
    assert str(info.value) == "computeMetadata instance/preempted: HTTP 503 TRUE"


def test_a_failed_gce_preempted_read_is_followed_by_a_plain_read_not_a_wait():
    """After an answer with an ETag the next poll is a wait-for-change; after a failed read (HTTP 503) the ETag is
    forgotten, so the next poll is a plain read (next_poll_waits is false: the watcher pauses first), and the polls
    wait again once a read has succeeded."""

    class Gce(FakeGce):
        failing = False

        def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
            if self.failing and path.endswith("/instance/preempted"):
                return _text(503, "Service Unavailable")
            return super().handle(method, path, query, headers, body)

    with Gce("gpu-node-7") as fake:
        gce = GceMetadata(fake.url, wait_for_change=True)
        assert gce.poll("us-central1-a/gpu-node-7", Clock(T0)) == ()
        assert gce.next_poll_waits
        fake.failing = True
        with pytest.raises(MetadataError):
            gce.poll("us-central1-a/gpu-node-7", Clock(T0))
        assert not gce.next_poll_waits
        fake.failing = False
        assert gce.poll("us-central1-a/gpu-node-7", Clock(T0)) == ()
        assert gce.next_poll_waits
    assert [p for m, p, h in fake.requests if "preempted" in p][2] == "/computeMetadata/v1/instance/preempted"


def test_a_gce_wait_asks_for_the_servers_timeout_and_gives_the_request_that_long_and_more():
    """The wait-for-change read names the last ETag and timeout_sec (wait_seconds, 30): the server holds the
    answer up to that long, so the request's own timeout is that plus the usual one (30 + 2 = 32 s), or every wait
    with no change would end as a timeout error. The first reads (instance/id, then a plain preempted) take the
    usual timeout (None: the default)."""
    timeouts = []

    class Gce(GceMetadata):
        def _get(self, path, timeout=None):  # noqa: ANN001, ANN202
            timeouts.append(timeout)
            return super()._get(path, timeout)

    with FakeGce("gpu-node-7") as fake:
        gce = Gce(fake.url, wait_for_change=True)
        assert gce.poll("us-central1-a/gpu-node-7", Clock(T0)) == ()
        fake.preempt()  # the value is no longer the one of ETag e-false: the wait answers at once
        assert len(gce.poll("us-central1-a/gpu-node-7", Clock(T0))) == 1
    assert timeouts == [None, None, 32.0]
    assert fake.requests[-1][1] == \
        "/computeMetadata/v1/instance/preempted?wait_for_change=true&last_etag=e-false&timeout_sec=30"


def test_azure_scheduled_events_that_fail_or_are_not_a_list_are_errors_not_no_events():
    """Scheduled Events answers {"DocumentIncarnation": N, "Events": [...]}. An HTTP error (IMDS answers 500),
    an Events that is not a list (here one event object without its list) or a body that is not JSON say nothing
    about this VM: the poll raises (logged, polled again) instead of reading 'no eviction'."""

    class Azure(FakeAzure):
        failing = False
        garbled = False

        def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
            if self.failing and path == "/metadata/scheduledevents":
                return _text(500, "Internal Server Error")
            if self.garbled and path == "/metadata/scheduledevents":
                return _text(200, "<html>")
            return super().handle(method, path, query, headers, body)

    with Azure("vm-gpu-3") as fake:
        azure = AzureScheduledEvents(fake.url)
        fake.failing = True
        with pytest.raises(MetadataError) as info:
            azure.poll("vm-gpu-3", Clock(T0))
        assert str(info.value) == "scheduledevents: HTTP 500 Internal Server Error"
        fake.failing = False
        fake.events = {"EventId": "ev-1", "EventType": "Preempt", "Resources": ["vm-gpu-3"]}
        with pytest.raises(MetadataError) as info:
            azure.poll("vm-gpu-3", Clock(T0))
        assert str(info.value) == ("scheduledevents: Events is not a list: {'EventId': 'ev-1', 'EventType': "
                                   "'Preempt', 'Resources': ['vm-gpu-3']}")
        fake.garbled = True  # a 200 that is not JSON
        with pytest.raises(MetadataError) as info:
            azure.poll("vm-gpu-3", Clock(T0))
        assert str(info.value) == "scheduledevents: not JSON: '<html>'"


def test_an_azure_preempt_notice_names_the_event_its_status_and_not_before():
    """Two Preempts for this VM: ev-1 with NotBefore 30 s after T0, ev-2 already Started (NotBefore empty: due
    now). Each notice is its event id with that deadline, and its detail (shown by the controller) names the event,
    its status and NotBefore as Azure wrote it ('now' when empty)."""
    with FakeAzure("vm-gpu-3") as fake:
        fake.schedule_preempt("ev-1", T0 + timedelta(seconds=30))
        fake.schedule_preempt("ev-2", T0)
        fake.events[1].update(EventStatus="Started", NotBefore="")
        notices = AzureScheduledEvents(fake.url).poll("vm-gpu-3", Clock(T0))
    assert [(n.provider, n.node_id, n.notice_id, n.deadline_utc, n.detail) for n in notices] == [
        ("azure", "vm-gpu-3", "ev-1", T0 + timedelta(seconds=30),
         "Azure Scheduled Event Preempt ev-1 (Scheduled, NotBefore Mon, 02 Nov 2026 09:00:30 GMT)"),
        ("azure", "vm-gpu-3", "ev-2", T0, "Azure Scheduled Event Preempt ev-2 (Started, NotBefore now)"),
    ]


def test_a_notice_is_posted_as_json_with_the_bearer_token_to_the_notices_path():
    """What the endpoint is sent (docs/node-watch.md): POST /v1/notices (appended to the controller URL), the
    notice as a JSON body, Content-Type application/json, and Authorization: Bearer TOKEN."""

    class Controller(FakeServer):
        def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
            self.body = body
            return _text(202, '{"event_id": "ev-9"}')

    notice = Notice("gcp", "us-central1-a/gpu-node-7", InterruptionKind.RECLAIM_WARNING, "preempted@1", T0, "d")
    with Controller() as controller:
        r = NoticeClient(controller.url + "/", "s3cret").post(notice)
    assert r.status == 202
    ((method, path, headers),) = controller.requests
    assert (method, path) == ("POST", "/v1/notices")
    assert (headers["content-type"], headers["authorization"]) == ("application/json", "Bearer s3cret")
    assert json.loads(controller.body) == notice.to_json()


def test_an_unreadable_aws_notice_is_logged_with_the_path_and_what_was_read(caplog):
    """The warning names the IMDS path and shows what came back, so the operator can tell which document could not
    be read; the notices still go out (the reclaim with AWS's two minutes). Both documents here are JSON strings,
    not the documented objects."""
    with FakeImds("i-0abc") as fake:
        fake.instance_action, fake.rebalance = "terminate", "soon"
        with caplog.at_level(logging.WARNING, logger="fleetctl.nodewatch"):
            notices = AwsImds(fake.url).poll("i-0abc", Clock(T0))
    assert [n.kind for n in notices] == [InterruptionKind.RECLAIM_WARNING, InterruptionKind.REBALANCE]
    assert caplog.messages == [
        "spot/instance-action: expected a JSON object, got '\"terminate\"'; taken as 120 s from now",
        "events/recommendations/rebalance: expected a JSON object, got '\"soon\"'; delivered as a rebalance "
        "recommendation all the same",
    ]


def test_gce_answers_with_an_etag_give_no_warning_about_a_missing_one(caplog):
    """FakeGce answers carry an ETag: --gce-wait-for-change can wait, so nothing is logged over two polls (the
    warning is for a server that leaves the ETag out)."""
    with FakeGce("gpu-node-7") as fake:
        gce = GceMetadata(fake.url, wait_for_change=True)
        with caplog.at_level(logging.INFO, logger="fleetctl.nodewatch"):
            assert gce.poll("us-central1-a/gpu-node-7", Clock(T0)) == ()
            fake.preempt()
            assert len(gce.poll("us-central1-a/gpu-node-7", Clock(T0))) == 1
    assert caplog.messages == []


def test_azure_events_for_this_vm_that_are_not_reclaims_are_noted_once_each_at_info(caplog):
    """A Reboot and a Redeploy (already Started: NotBefore empty, it happens now) scheduled for this VM are no
    reclaims: no notice, and one INFO line per event however many polls see them (events stand until they
    happen)."""
    with FakeAzure("vm-gpu-3") as fake:
        fake.schedule_preempt("ev-reboot", T0 + timedelta(minutes=5))
        fake.schedule_preempt("ev-redeploy", T0)
        fake.events[0]["EventType"] = "Reboot"
        fake.events[1].update(EventType="Redeploy", EventStatus="Started", NotBefore="")
        azure = AzureScheduledEvents(fake.url)
        with caplog.at_level(logging.INFO, logger="fleetctl.nodewatch"):
            assert azure.poll("vm-gpu-3", Clock(T0)) == ()
            assert azure.poll("vm-gpu-3", Clock(T0)) == ()
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "scheduledevents: Reboot event ev-reboot for this VM is not a reclaim: ignored (NotBefore "
                       "Mon, 02 Nov 2026 09:05:00 GMT)"),
        (logging.INFO, "scheduledevents: Redeploy event ev-redeploy for this VM is not a reclaim: ignored (NotBefore "
                       "now)"),
    ]

def test_an_azure_event_whose_resources_are_not_a_list_is_logged_by_its_event_id_once(caplog):
    """Resources as one string (not the documented list of VM names): whose event it is cannot be told, so it is
    ignored, and the warning names the event (ev-odd) and what Resources held, once over two polls."""
    with FakeAzure("vm-gpu-3") as fake:
        fake.schedule_preempt("ev-odd", T0 + timedelta(seconds=30), resources="vm-gpu-3")  # type: ignore[arg-type]
        azure = AzureScheduledEvents(fake.url)
        with caplog.at_level(logging.INFO, logger="fleetctl.nodewatch"):
            assert azure.poll("vm-gpu-3", Clock(T0)) == ()
            assert azure.poll("vm-gpu-3", Clock(T0)) == ()
    assert caplog.messages == [
        "scheduledevents: event ev-odd has Resources 'vm-gpu-3', not a list of VM names: ignored",
    ]


def test_notices_go_through_the_proxy_of_the_environment_and_metadata_reads_do_not(monkeypatch):
    """The controller may sit behind HTTP_PROXY (the opener that honours it is built at import, so the test puts
    one with a proxy in its place); the metadata service is link-local and never goes through it
    (docs/node-watch.md). The proxy here answers every request as the controller would: a proxied request names the
    whole URL, controller.invalid (a name that does not resolve)."""

    class Proxy(FakeServer):
        def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
            return _text(202, '{"event_id": "ev-9"}')

    notice = Notice("gcp", "us-central1-a/gpu-node-7", InterruptionKind.RECLAIM_WARNING, "preempted@1", T0, "d")
    with Proxy() as proxy, FakeGce("gpu-node-7") as gce:
        monkeypatch.setattr(nodewatch, "_ENV_PROXIES", urllib.request.build_opener(
            urllib.request.ProxyHandler({"http": proxy.url})))
        assert NoticeClient("http://controller.invalid:8080", None).post(notice).status == 202
        assert GceMetadata(gce.url).poll("us-central1-a/gpu-node-7", Clock(T0)) == ()
    assert [(m, p) for m, p, h in proxy.requests] == [("POST", "http://controller.invalid:8080/v1/notices")]


def test_a_controller_answering_503_is_retried_with_a_warning_per_attempt_and_no_token_hint(caplog):
    """A controller answering 503 (restarting) twice, then 200: the notice is delivered at the third attempt, after
    two waits; each failed attempt is one warning with the status (a 503 is no token problem: no hint about
    --token-file), and the delivery one INFO line with the event id."""

    class Controller(FakeServer):
        def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
            if len(self.requests) <= 2:
                return _text(503, "Service Unavailable")
            return _text(200, '{"event_id": "ev-9"}')

    notice = Notice("gcp", "us-central1-a/gpu-node-7", InterruptionKind.RECLAIM_WARNING, "preempted@1", T0, "d")
    sleeps = Sleeps()
    with Controller() as controller:
        watcher = NodeWatcher(source=GceMetadata("http://127.0.0.1:9"), client=NoticeClient(controller.url, None),
                              node_id="us-central1-a/gpu-node-7", sleep=sleeps, rng=random.Random(7),
                              backoff=Backoff(initial_seconds=0.5, max_seconds=2.0, max_attempts=5))
        with caplog.at_level(logging.INFO, logger="fleetctl.nodewatch"):
            assert watcher.deliver(notice) == "ev-9"
    assert len(sleeps) == 2
    url = f"{controller.url}/v1/notices"
    assert caplog.messages == [
        f"notice preempted@1 not delivered (attempt {n} of 5): HTTP 503 from {url}: Service Unavailable; retrying "
        f"in {s:.1f} s" for n, s in ((1, sleeps[0]), (2, sleeps[1]))
    ] + ["notice reclaim_warning preempted@1 delivered: event ev-9"]


def test_a_watcher_stopped_before_a_delivery_still_makes_its_first_attempt():
    """A stop (SIGTERM) only ends the retries: the first post of a notice is always made, so a watcher stopped
    just as the notice came still delivers it when the controller answers at once."""

    class Controller(FakeServer):
        def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
            return _text(202, '{"event_id": "ev-9"}')

    notice = Notice("gcp", "us-central1-a/gpu-node-7", InterruptionKind.RECLAIM_WARNING, "preempted@1", T0, "d")
    with Controller() as controller:
        watcher = NodeWatcher(source=GceMetadata("http://127.0.0.1:9"), client=NoticeClient(controller.url, None),
                              node_id="us-central1-a/gpu-node-7", sleep=Sleeps())
        watcher.stop.set()
        assert watcher.deliver(notice) == "ev-9"
    assert len(controller.requests) == 1


def test_a_controller_answering_403_gives_up_with_the_token_hint():
    """403 (a token the controller does not take) is retried like 401, and the last error says to check the token
    files; here two attempts, both refused."""

    class Controller(FakeServer):
        def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
            return _text(403, "Forbidden")

    notice = Notice("gcp", "us-central1-a/gpu-node-7", InterruptionKind.RECLAIM_WARNING, "preempted@1", T0, "d")
    with Controller() as controller:
        watcher = NodeWatcher(source=GceMetadata("http://127.0.0.1:9"), client=NoticeClient(controller.url, "t"),
                              node_id="us-central1-a/gpu-node-7", sleep=Sleeps(),
                              backoff=Backoff(initial_seconds=0.5, max_seconds=2.0, max_attempts=2))
        with pytest.raises(DeliveryFailed) as info:
            watcher.deliver(notice)
    assert len(controller.requests) == 2
    assert str(info.value) == (
        f"gave up delivering reclaim_warning notice preempted@1 for node us-central1-a/gpu-node-7 after 2 attempt(s): "
        f"HTTP 403 from {controller.url}/v1/notices (check --token-file against the daemon's --notice-token-file): "
        "Forbidden")


def test_the_status_of_a_notice_is_read_from_the_controllers_answer():
    """GET /v1/notices/EVENT_ID (the id quoted whole, '/' too), asking for JSON with the bearer token (none without
    a token). Only handled: true (the JSON true, not 1) is handled; node_known is false only when the controller
    says false (absent: an older daemon, taken as known); an answer that is JSON but not an object says nothing:
    not handled. A non-200 answer or one that is not JSON is a ConnectionError: the watcher asks again later."""
    answers = {
        "/v1/notices/handled": _text(200, '{"handled": true}'),
        "/v1/notices/handled-unknown": _text(200, '{"handled": true, "node_known": false}'),
        "/v1/notices/handled-null": _text(200, '{"handled": true, "node_known": null}'),
        "/v1/notices/one": _text(200, '{"handled": 1, "node_known": true}'),
        "/v1/notices/list": _text(200, '[true]'),
        "/v1/notices/a%2Fb%20c": _text(200, '{"handled": false}'),
        "/v1/notices/down": _text(503, "busy"),
        "/v1/notices/html": _text(200, "<html>"),
    }

    class Controller(FakeServer):
        def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
            return answers[path]

    with Controller() as controller:
        client = NoticeClient(controller.url, "s3cret")
        statuses = map(client.status, ("handled", "handled-unknown", "handled-null", "one", "list", "a/b c"))
        assert [(s.handled, s.node_known) for s in statuses] == [
            (True, True), (True, False), (True, True), (False, True), (False, True), (False, True)]
        with pytest.raises(ConnectionError, match="HTTP 503 busy"):
            client.status("down")
        with pytest.raises(ConnectionError, match="not JSON: '<html>'"):
            client.status("html")
        NoticeClient(controller.url, None).status("handled")
    method, path, headers = controller.requests[0]
    assert (method, path, headers["accept"], headers["authorization"]) == (
        "GET", "/v1/notices/handled", "application/json", "Bearer s3cret")
    assert "authorization" not in controller.requests[-1][2]


def test_the_status_of_a_notice_is_asked_through_the_proxy_of_the_environment(monkeypatch):
    """Like the post, the status question goes to the controller, so it honours HTTP_PROXY (the proxy answers as the
    controller would; controller.invalid does not resolve, so a direct request could not be answered)."""

    class Proxy(FakeServer):
        def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
            return _text(200, '{"handled": true}')

    with Proxy() as proxy:
        monkeypatch.setattr(nodewatch, "_ENV_PROXIES", urllib.request.build_opener(
            urllib.request.ProxyHandler({"http": proxy.url})))
        assert NoticeClient("http://controller.invalid:8080", None).status("ev-9").handled
    assert [(m, p) for m, p, h in proxy.requests] == [("GET", "http://controller.invalid:8080/v1/notices/ev-9")]


def test_a_stop_after_a_blocking_poll_returned_does_not_raise_out_of_what_follows():
    """Stopped is raised only during the blocking poll itself: once the poll has returned (here a source whose polls
    block, like GCE's wait-for-change, that finds nothing), a stop only sets the event, since what follows the poll
    (a delivery, an approval) must not be cut in half."""

    class Waiting:
        approves = False
        next_poll_waits = True

        def poll(self, node_id, clock):  # noqa: ANN001, ANN201
            return ()

    watcher = NodeWatcher(source=Waiting(), client=NoticeClient("http://127.0.0.1:9", None), node_id="n")
    assert watcher.poll_once() == []
    watcher.request_stop()
    assert watcher.stop.is_set()
