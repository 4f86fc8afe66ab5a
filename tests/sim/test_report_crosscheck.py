"""`fleetctl report` on the store the simulator's real controller wrote: its spend is the simulator's
own cost accounting of the run (constant prices: the simulator bills spot at the market's price of
each moment, the report at the node's offer price when it was bought, which are then the same)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fleetctl.cli.report import read_report
from fleetctl.report import IDLE, GroupKey
from fleetctl.sim.simulator import simulate
from tests.builders import T0
from tests.sim.sim_fixtures import jobs, market, sim_policy


def test_report_spend_equals_the_simulators_cost_and_its_rows_sum_to_it():
    seen = []

    def hook(now, world):  # noqa: ANN001 - the last call sees the run's whole store (closed after the run)
        seen[:] = [now, read_report(world.store, T0, now, (GroupKey.team,)) if now > T0 else None,
                   read_report(world.store, T0, now, (GroupKey.market,)) if now > T0 else None,
                   {j.job_id for j in world.store.jobs() if j.state.value == "succeeded"}]

    trace = [replace(j, team="a" if i % 2 else "b") for i, j in enumerate(jobs(8))]
    result = simulate(trace, market(), sim_policy(), on_event=hook)
    end, by_team, by_market, succeeded = seen
    assert end == result.end_utc and result.cost_usd > 0 and result.interruptions > 0
    assert by_team.total.usd == pytest.approx(result.cost_usd, rel=1e-9)
    assert sum(r.usd for r in by_team.rows) == pytest.approx(result.cost_usd, rel=1e-9)
    assert sum(r.usd for r in by_market.rows) == pytest.approx(result.cost_usd, rel=1e-9)
    assert by_team.total.gpu_hours == pytest.approx(result.held_gpu_hours, rel=1e-9)
    # what jobs held is what ran: the simulator's integral of the running jobs' GPUs
    assert by_team.total.allocated_gpu_hours == pytest.approx(result.gpu_hours_run, rel=1e-9)
    assert by_team.total.jobs_completed == result.jobs_completed == len(succeeded)
    rows = {r.key: r for r in by_team.rows}
    assert set(rows) <= {("a",), ("b",), (IDLE,)} and rows[("a",)].usd > 0 and rows[("b",)].usd > 0
    assert by_team.notes == ()
