from __future__ import annotations

import pytest

from fleetctl.controller.runtime import SimRuntime
from fleetctl.store import Store
from providers.sim import SimProvider


class World:
    """A sandbox with a virtual clock: store, sim provider, sim runtime."""

    def __init__(self, tmp_path, offers=None, launch_delay_seconds=0.0):
        self.store = Store(f"sqlite:///{tmp_path / 'state.db'}")
        self.provider = SimProvider(self.store, seed=1, launch_delay_seconds=launch_delay_seconds, offers=offers)
        self.runtime = SimRuntime(checkpoint_seconds=30)


@pytest.fixture
def world_factory(tmp_path):
    made = []

    def make(**kw):
        w = World(tmp_path / str(len(made)), **kw)
        made.append(w)
        return w

    (tmp_path / "0").mkdir()
    for i in range(1, 5):
        (tmp_path / str(i)).mkdir()
    yield make
    for w in made:
        w.store.close()
