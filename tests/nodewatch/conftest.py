"""A controller for the watcher to talk to: the real state store, the sandbox
provider as the fleet, the simulated runtime, and the real notice endpoint on
127.0.0.1, all on a virtual clock."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import pytest

from fleetctl.controller.notices import NoticeServer
from fleetctl.controller.reconcile import TickReport, tick
from fleetctl.controller.runtime import SimRuntime
from fleetctl.model import InterruptionEvent, Job, JobState, Market, Node
from fleetctl.nodewatch import Backoff, MetadataSource, NodeWatcher, NoticeClient
from fleetctl.store import Store
from providers.sim import SimProvider
from tests.builders import T0, job, offer, policy

TOKEN = "node-token-3f9c1a"


class Clock:
    """A virtual clock the endpoint and the watcher share with the ticks."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class QueuelessProvider:
    """The sandbox fleet, minus its notice channel: like a cloud adapter whose
    queue holds nothing (GCP, Azure), so a notice can reach the handling only
    through the store, where the endpoint puts it."""

    def __init__(self, sim: SimProvider) -> None:
        self._sim = sim
        self.name = sim.name
        self.capabilities = sim.capabilities

    def offers(self, now):  # noqa: ANN001, ANN201
        return self._sim.offers(now)

    def nodes(self, now):  # noqa: ANN001, ANN201
        return self._sim.nodes(now)

    def launch(self, request, now):  # noqa: ANN001, ANN201
        return self._sim.launch(request, now)

    def terminate(self, node_id, now):  # noqa: ANN001, ANN201
        return self._sim.terminate(node_id, now)

    def interruption_events(self, now: datetime) -> tuple[InterruptionEvent, ...]:
        return ()

    def acknowledge(self, event_id: str) -> None:
        raise AssertionError(f"a store-only notice was acknowledged at the provider: {event_id}")


def offers_of(cloud: str):  # noqa: ANN201
    """Two spot offers in different zones and an on-demand one, all of ``cloud``."""
    return (offer("a8", price=8.0, zone="z1", provider=cloud), offer("b8", price=9.0, zone="z2", provider=cloud),
            offer("a8", price=20.0, zone="z1", market=Market.ON_DEMAND, provider=cloud))


@dataclass
class Controller:
    store: Store  # the loop's handle
    endpoint_store: Store  # the endpoint's own handle on the same database
    provider: QueuelessProvider
    runtime: SimRuntime
    clock: Clock
    endpoint: NoticeServer
    offers: tuple
    ticks: list[TickReport] = field(default_factory=list)

    def tick(self) -> TickReport:
        report = tick(store=self.store, provider=self.provider, runtime=self.runtime, policy=policy(),
                      now=self.clock.now)
        self.ticks.append(report)
        return report

    def jobs(self) -> dict[str, Job]:
        return {j.job_id: j for j in self.store.jobs()}

    def nodes(self) -> dict[str, Node]:
        return {n.node_id: n for n in self.store.nodes(include_gone=True)}

    def run_checkpointable_job(self) -> tuple[Job, Node]:
        """One 8-GPU checkpointable job running on the cheap spot offer."""
        self.store.add_jobs([job("j", gpus=8, duration_hours=4.0, spot=True)], T0)
        self.clock.now = T0
        self.tick()
        j = replace(self.jobs()["j"], checkpointable=True, checkpoint_interval_minutes=30.0)
        self.store.put_job(j, T0)
        self.clock.now = T0 + timedelta(minutes=1)
        self.tick()
        j = self.jobs()["j"]
        assert j.state is JobState.RUNNING
        node = self.nodes()[j.node_ids[0]]
        assert node.offer == self.offers[0]
        return j, node


@pytest.fixture
def make_controller(tmp_path):
    made: list[Controller] = []

    def make(cloud: str = "aws", token: str | None = TOKEN, start: bool = True) -> Controller:
        url = f"sqlite:///{tmp_path / f'state-{len(made)}.db'}"
        store = Store(url)
        endpoint_store = Store(url)
        offers = offers_of(cloud)
        sim = SimProvider(store, seed=1, launch_delay_seconds=0.0, offers=offers)
        clock = Clock(T0)
        endpoint = NoticeServer(endpoint_store, "127.0.0.1:0", token=token, clock=clock)
        c = Controller(store, endpoint_store, QueuelessProvider(sim), SimRuntime(checkpoint_seconds=20), clock,
                       endpoint, offers)
        if start:
            endpoint.start()
        made.append(c)
        return c

    yield make
    for c in made:
        c.endpoint.shutdown()
        c.endpoint_store.close()
        c.store.close()


class Sleeps(list):
    """An injected ``sleep``: records each wait instead of waiting; ``then``
    runs after the n-th wait (to bring a controller up, for instance)."""

    def __init__(self, then: dict | None = None) -> None:
        super().__init__()
        self.then = then or {}

    def __call__(self, seconds: float) -> None:
        self.append(seconds)
        action = self.then.get(len(self))
        if action is not None:
            action()


def watcher_for(source: MetadataSource, controller_url: str, *, token: str | None = TOKEN, clock=None,
                sleeps: Sleeps | None = None, max_attempts: int = 5, node_id: str | None = None) -> NodeWatcher:
    return NodeWatcher(
        source=source,
        client=NoticeClient(controller_url, token),
        node_id=node_id or source.discover_node_id(),
        interval_seconds=0.0,
        backoff=Backoff(initial_seconds=0.5, max_seconds=2.0, max_attempts=max_attempts),
        clock=clock or Clock(T0),
        sleep=sleeps if sleeps is not None else Sleeps(),
        rng=random.Random(7),
    )
