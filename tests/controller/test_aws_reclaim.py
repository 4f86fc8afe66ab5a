"""A reclaim warning put on the EventBridge bus reaches the controller through
SQS and leads to drain and migration of the jobs on that instance: the real
tick, the AWS adapter and boto3 against moto's server. The SQS message is
deleted only after the notice was handled."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from fleetctl.controller.reconcile import tick
from fleetctl.controller.recorded import RecordedNodes
from fleetctl.controller.runtime import SimRuntime
from fleetctl.model import JobState, Market, NodeState
from fleetctl.store import Store
from tests.builders import job, policy
from tests.providers.aws_world import MotoWorld, moto_world


def queue_depth(world: MotoWorld) -> int:
    attrs = world.client("sqs").get_queue_attributes(
        QueueUrl=world.queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


class FailingRuntime(SimRuntime):
    """Crashes the first checkpoint request, as a controller dying mid-notice would."""

    def __init__(self) -> None:
        super().__init__(checkpoint_seconds=30)
        self.fail = True

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail:
            self.fail = False
            raise RuntimeError("controller died while checkpointing")
        return super().checkpoint(*args, **kwargs)


@pytest.fixture
def world(moto_server: Any) -> Iterator[MotoWorld]:
    with moto_world(moto_server) as w:
        w.client("sqs").set_queue_attributes(QueueUrl=w.queue_url, Attributes={"VisibilityTimeout": "0"})
        yield w


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield s
    s.close()


POLICY = policy(providers=("aws",), gpu_models=("A10G",), regions=("us-east-1",), max_usd_per_hour=50.0)


def _running(world: MotoWorld, store: Store, runtime: SimRuntime, t0: datetime):  # noqa: ANN202
    provider = RecordedNodes(world.provider(), store)

    j = replace(job("train", gpus=1, models=("A10G",), duration_hours=6.0, spot=True), checkpointable=True,
                checkpoint_interval_minutes=30.0, submitted_at_utc=t0)
    store.add_jobs([j], t0)
    first = tick(store=store, provider=provider, runtime=runtime, policy=POLICY, now=t0)
    [launch] = first.plan.of_kind("launch")
    assert launch.offer.market is Market.SPOT and launch.offer.provider == "aws"
    tick(store=store, provider=provider, runtime=runtime, policy=POLICY, now=t0 + timedelta(minutes=1))
    [running] = store.jobs()
    assert running.state is JobState.RUNNING
    return provider, running


def test_a_reclaim_warning_on_the_bus_drains_and_migrates_the_job(world: MotoWorld, store: Store) -> None:
    runtime = SimRuntime(checkpoint_seconds=30)
    t0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=2)
    provider, running = _running(world, store, runtime, t0)
    [node_id] = running.node_ids
    lost_offer = {n.node_id: n for n in provider.nodes(t0)}[node_id].offer

    now = t0 + timedelta(minutes=91)
    world.reclaim(node_id, at=now)  # EC2 -> EventBridge rule -> SQS, as in an account
    assert queue_depth(world) == 1
    report = tick(store=store, provider=provider, runtime=runtime, policy=POLICY, now=now)

    assert report.interruptions == 1 and report.requeued == ["train"] and report.checkpoints == 1
    [moved] = store.jobs()
    assert moved.interruptions == 1 and moved.checkpointed_work_hours == pytest.approx(1.5)
    assert moved.state is JobState.BOUND and moved.node_ids != (node_id,)
    new_offer = {n.node_id: n for n in provider.nodes(now)}[moved.node_ids[0]].offer
    assert new_offer.key != lost_offer.key  # placed on capacity that does not fail with the lost node
    # the reclaimed instance was terminated through EC2, the notice handled and its message deleted
    states = {n.node_id: n.state for n in provider.nodes(now)}
    assert states.get(node_id, NodeState.GONE) in (NodeState.TERMINATING, NodeState.GONE)
    [instance] = [i for r in world.client("ec2").describe_instances(InstanceIds=[node_id])["Reservations"]
                  for i in r["Instances"]]
    assert instance["State"]["Name"] in ("shutting-down", "terminated")
    assert store.interruptions() == ()
    assert queue_depth(world) == 0


def test_the_message_stays_in_the_queue_until_the_notice_is_handled(world: MotoWorld, store: Store) -> None:
    runtime = FailingRuntime()
    t0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=2)
    provider, running = _running(world, store, runtime, t0)
    now = t0 + timedelta(minutes=31)
    world.reclaim(running.node_ids[0], at=now)
    with pytest.raises(RuntimeError, match="died while checkpointing"):
        tick(store=store, provider=provider, runtime=runtime, policy=POLICY, now=now)
    assert queue_depth(world) == 1  # not acknowledged: the next controller sees it again
    [unmoved] = store.jobs()
    assert unmoved.state is JobState.RUNNING and unmoved.interruptions == 0  # nothing half-applied

    restarted = RecordedNodes(world.provider(), store)
    report = tick(store=store, provider=restarted, runtime=runtime, policy=POLICY, now=now + timedelta(seconds=5))
    assert report.interruptions == 1 and report.requeued == ["train"]
    assert queue_depth(world) == 0


def test_an_apply_refused_part_way_keeps_what_ec2_sold_recorded(world: MotoWorld, store: Store) -> None:
    """EC2 sells the first launch and refuses the second: the store holds the
    first instance (node, launch intent, audit event), the error names it,
    and the jobs stay queued for the next tick."""
    from fleetctl.controller import ApplyError, execute
    from fleetctl.model import Bind, Launch, Plan, Reason

    now = datetime.now(timezone.utc).replace(microsecond=0)
    provider = RecordedNodes(world.provider(), store)
    a10g = sorted((o for o in provider.offers(now) if o.instance_type.gpu_model == "A10G"
                   and o.market is Market.SPOT and o.instance_type.gpu_count == 1), key=lambda o: o.key)
    first, second = a10g[0], next(o for o in a10g if o.zone != a10g[0].zone)
    store.add_jobs([job("a", gpus=1, models=("A10G",)), job("b", gpus=1, models=("A10G",))], now)
    inner_launch = provider.launch

    def refuse_after_first(request, at):  # noqa: ANN001, ANN202
        result = inner_launch(request, at)
        world.fail_next("CreateFleet", "InsufficientInstanceCapacity", "no capacity in the zone")
        return result

    provider.launch = refuse_after_first  # type: ignore[method-assign]
    plan = Plan((Launch(first, ("new-1",), Reason.CHEAPEST_OFFER, "test"),
                 Launch(second, ("new-2",), Reason.CHEAPEST_OFFER, "test"),
                 Bind("a", ("new-1",), Reason.FITS_NEW_CAPACITY, "test"),
                 Bind("b", ("new-2",), Reason.FITS_NEW_CAPACITY, "test")), (), 0.0, 1.0)
    with pytest.raises(ApplyError) as caught:
        execute(plan, store=store, provider=provider, now=now, plan_id="4" * 64)
    running = [i["InstanceId"] for r in world.client("ec2").describe_instances()["Reservations"]
               for i in r["Instances"] if i["State"]["Name"] in ("pending", "running")]
    assert len(running) == 1
    assert [n.node_id for n in store.nodes()] == running
    assert running[0] in str(caught.value) and "InsufficientInstanceCapacity" in str(caught.value)
    assert [e["payload"]["nodes"] for e in store.events("launch")] == [running]
    assert {j.state for j in store.jobs()} == {JobState.QUEUED}
