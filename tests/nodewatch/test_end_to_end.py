"""For each cloud: a preemption announced by the node's metadata service (a
local fake) reaches the controller through the watcher and the real notice
endpoint, and the next interruptions pass checkpoints the job, requeues it and
re-places it on capacity that does not fail with the lost node."""

from __future__ import annotations

import json
import urllib.request
from datetime import timedelta

import pytest

from fleetctl.model import InterruptionKind, JobState, NodeState
from fleetctl.nodewatch import metadata_source
from tests.nodewatch.conftest import TOKEN, watcher_for
from tests.nodewatch.fakes import FakeAzure, FakeGce, FakeImds

AZURE_EVENT_ID = "602d9444-d2cd-49c7-8624-8643e7171297"


def announce(cloud, node_id, now, store):  # noqa: ANN001, ANN201
    """A fake metadata service for ``node_id`` announcing a preemption at ``now``;
    returns (fake, the deadline the cloud gives)."""
    if cloud == "aws":
        fake = FakeImds(instance_id=node_id)
        deadline = now + timedelta(minutes=2)
        fake.instance_action = {"action": "terminate", "time": deadline.strftime("%Y-%m-%dT%H:%M:%SZ")}
        return fake, deadline
    if cloud == "gcp":
        fake = FakeGce(name=node_id)
        fake.preempt()
        return fake, now + timedelta(seconds=30)  # GCE: 30 s from the notice
    ack_saw_event: list[bool] = []  # at each approval: was the notice stored and handled (node drained)?

    def on_ack(_event_id: str) -> None:
        stored = any(e.node_id == node_id for e in store.interruptions(unhandled_only=False))
        unhandled = any(e.node_id == node_id for e in store.interruptions())
        ack_saw_event.append(stored and not unhandled)

    fake = FakeAzure(vm_name=node_id, on_ack=on_ack)
    fake.ack_saw_event = ack_saw_event
    deadline = now + timedelta(seconds=30)
    fake.schedule_preempt(AZURE_EVENT_ID, deadline)
    return fake, deadline


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_preemption_on_the_node_leads_to_checkpoint_and_replacement(cloud, make_controller):
    c = make_controller(cloud)
    j, node = c.run_checkpointable_job()
    now = j.started_at_utc + timedelta(minutes=100)  # 100 minutes into the run, between periodic checkpoints
    c.clock.now = now
    fake, deadline = announce(cloud, node.node_id, now, c.store)
    with fake:
        source = metadata_source(cloud, fake.url)
        # what the metadata service says this node is (GCP: ZONE/NAME, the GCP adapter's form;
        # the sandbox names its nodes otherwise, so the id is passed as --node-id would)
        assert source.discover_node_id() == (f"us-central1-a/{node.node_id}" if cloud == "gcp" else node.node_id)
        watcher = watcher_for(source, c.endpoint.url, clock=c.clock, node_id=node.node_id)
        delivered = watcher.poll_once()
        assert len(delivered) == 1
        assert watcher.poll_once() == []  # the notice still stands; it is not posted again
        (event,) = c.store.interruptions()
        assert event.event_id == delivered[0]
        assert (event.provider, event.node_id, event.kind) == (cloud, node.node_id, InterruptionKind.RECLAIM_WARNING)
        assert event.received_at_utc == now and event.deadline_utc == deadline
        if cloud == "azure":
            assert fake.acks == []  # not drained yet: Azure holds the VM until NotBefore

        r = c.tick()  # the next pass: the provider has no notice, the store has the endpoint's

        watcher.poll_once()
        if cloud == "azure":  # drained now: the watcher approves the event, once
            assert fake.acks == [AZURE_EVENT_ID] and fake.ack_saw_event == [True]

    assert r.interruptions == 1 and r.checkpoints == 1 and r.requeued == ["j"]
    assert r.lost_gpu_hours == pytest.approx(0.0)  # checkpointed within the notice
    j = c.jobs()["j"]
    assert j.checkpointed_work_hours == pytest.approx(100 / 60) and j.last_checkpoint_utc == now
    assert j.interruptions == 1 and node.offer.key in j.avoid_offer_keys
    assert j.state is JobState.BOUND and node.node_id not in j.node_ids
    new_node = c.nodes()[j.node_ids[0]]
    assert new_node.offer == c.offers[1]  # the other zone's spot offer
    assert c.nodes()[node.node_id].state is NodeState.GONE  # drained, then terminated by the plan
    assert c.store.interruptions() == ()  # handled
    # and the job runs again on the new node at the next pass
    c.clock.now = now + timedelta(minutes=1)
    assert c.tick().started == ["j"]


def test_a_standing_notice_from_a_restarted_watcher_is_one_event(make_controller):
    """Deduplication on both sides: a watcher posts a standing notice once; a
    restarted watcher (no memory) posts it again and the endpoint keeps one event."""
    c = make_controller("gcp")
    _, node = c.run_checkpointable_job()
    with FakeGce(name=node.node_id) as fake:
        fake.preempt()
        posts: list[str] = []
        first = watcher_for(metadata_source("gcp", fake.url), c.endpoint.url, clock=c.clock, node_id=node.node_id)
        original_post = first.client.post
        first.client.post = lambda n: posts.append(n.notice_id) or original_post(n)
        for _ in range(3):
            first.poll_once()
        restarted = watcher_for(metadata_source("gcp", fake.url), c.endpoint.url, clock=c.clock,
                                node_id=node.node_id)
        assert restarted.poll_once() == list(first.delivered.values())
    assert len(posts) == 1
    assert len(c.store.interruptions(unhandled_only=False)) == 1
    received = c.store.events("notice_received")
    assert len(received) == 1 and received[0]["subject"] == node.node_id


def test_a_posted_terminated_notice_loses_the_work_since_the_last_checkpoint(make_controller):
    """The node is gone already: its job cannot checkpoint. It was
    'checkpointed' all the same (a null deadline meant no limit), so the work
    since its last periodic checkpoint counted as saved and never as lost."""
    c = make_controller("gcp")
    j, node = c.run_checkpointable_job()
    now = j.started_at_utc + timedelta(minutes=100)  # 10 minutes after the periodic checkpoint at 90
    c.clock.now = now
    body = {"provider": "gcp", "node_id": node.node_id, "kind": "terminated", "notice_id": "stopped@1",
            "deadline_utc": None}
    req = urllib.request.Request(c.endpoint.url + "/v1/notices", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 202
    r = c.tick()
    assert r.requeued == ["j"] and r.checkpoints == 0
    assert r.lost_gpu_hours == pytest.approx(8 * 10 / 60)
    assert c.jobs()["j"].checkpointed_work_hours == pytest.approx(1.5)
