"""The simulator: the real tick on a market-driven provider, invariants after every event."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import JobState, Market as OfferMarket, NodeState
from fleetctl.sim.baselines import PLANNERS
from fleetctl.sim.provider import MarketProvider
from fleetctl.sim.simulator import SimConfig, simulate
from fleetctl.store import Store
from providers.base import InsufficientCapacity, LaunchRequest
from tests.builders import T0, job
from tests.sim.sim_fixtures import jobs, market, sim_policy

_HELD = (NodeState.LAUNCHING, NodeState.READY, NodeState.DRAINING)


def check_invariants(now, world):
    """No job lost, none on two nodes, nothing bound to a gone or cordoned node,
    every node accounted for, spend never above the budget cap."""
    store, provider, pol = world.store, world.provider, world.policy
    stored = {j.job_id: j for j in store.jobs()}
    assert set(world.submitted) <= set(stored), "a submitted job is missing"
    nodes = {n.node_id: n for n in store.nodes(include_gone=True)}
    used: dict[str, int] = {}
    for j in stored.values():
        assert j.state in (JobState.QUEUED, JobState.BOUND, JobState.RUNNING, JobState.SUCCEEDED), (now, j)
        if j.state in (JobState.BOUND, JobState.RUNNING):
            assert len(j.node_ids) == j.workers
            for nid in set(j.node_ids):
                assert nid in nodes, (now, j.job_id, nid)
                assert nodes[nid].state in (NodeState.LAUNCHING, NodeState.READY), (now, j.job_id, nodes[nid])
                used[nid] = used.get(nid, 0) + j.gpus_per_worker * j.node_ids.count(nid)
        else:
            assert not j.node_ids or j.state is JobState.SUCCEEDED
    for nid, gpus in used.items():
        assert gpus <= nodes[nid].offer.instance_type.gpu_count, (now, nid)  # also: no GPU given to two jobs
    # every node accounted for: the provider reports every live node of the store (those it finds gone in
    # this call as gone) and none the store does not hold (it lists a gone node for an hour, then omits it)
    listed = {n.node_id for n in provider.nodes(now)}
    assert {nid for nid, n in nodes.items() if n.state is not NodeState.GONE} <= listed <= set(nodes)
    live = [n for n in nodes.values() if n.state is not NodeState.GONE]
    assert all(n.state in _HELD for n in live)
    # spot capacity is never exceeded by nodes not under notice
    for t in provider.market.traces:
        assert len(provider.running_spot_nodes(t.offer_spot.key, now)) <= t.capacity_at(now), (now, t.offer_spot.key)
    if pol.max_usd_per_hour is not None:
        assert sum(n.offer.usd_per_hour for n in live) <= pol.max_usd_per_hour + 1e-6, now


@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_invariants_after_every_event_and_every_job_completes(name):
    events = []

    def hook(now, world):
        check_invariants(now, world)
        events.append(now)

    r = simulate(jobs(), market(), sim_policy(), planner=PLANNERS[name], on_event=hook)
    assert events == sorted(events) and len(events) == len(set(events))
    assert r.jobs_completed == r.jobs_total == 8 and r.jobs_lost == 0
    assert r.cost_usd > 0 and r.useful_gpu_hours == pytest.approx(sum(j.duration_hours for j in jobs()))
    if name in ("spot-greedy", "skypilot-failover"):
        assert r.interruptions >= 1  # z1 and z2 lose their capacity while jobs run there


def test_same_seed_same_result():
    a = simulate(jobs(), market(), sim_policy(), config=SimConfig(seed=3))
    b = simulate(jobs(), market(), sim_policy(), config=SimConfig(seed=3))
    assert a == b


def test_idle_stretches_are_skipped():
    far = [replace(j, submitted_at_utc=j.submitted_at_utc + timedelta(hours=4)) for j in jobs(2)]
    ticks = []
    simulate(far, market(), sim_policy(), on_event=lambda now, w: ticks.append(now))
    assert ticks[1] >= T0 + timedelta(hours=4)  # from the first step straight to the first arrival


def test_interruption_storm_through_the_simulator():
    """Every spot zone loses all capacity at once while the fleet is busy;
    every job still completes and the invariants hold after every event."""
    caps = {z: (4,) * 3 + (0,) * 6 + (4,) * 27 for z in ("z1", "z2", "z3")}
    many = [replace(job(f"s{i}", gpus=1, duration_hours=1.0 + (i % 3) * 0.5, submitted=T0 + timedelta(seconds=30 * i),
                        vcpus=4, memory_gib=16), checkpointable=i % 2 == 0,
                    checkpoint_interval_minutes=15.0 if i % 2 == 0 else None) for i in range(10)]
    pol = sim_policy(on_demand_base_gpus=0, max_spot_share=1.0)
    r = simulate(many, market(caps), pol, planner=PLANNERS["spot-greedy"], on_event=check_invariants)
    assert r.interruptions >= 6 and r.jobs_completed == 10 and r.jobs_lost == 0
    r = simulate(many, market(caps), pol, on_event=check_invariants)
    assert r.jobs_completed == 10 and r.jobs_lost == 0


def test_provider_refuses_spot_beyond_capacity_and_reclaims_newest_first():
    m = market({"z1": (2, 2, 1, 1)})
    store = Store("sqlite:///:memory:")
    try:
        p = MarketProvider(store, m, launch_delay_seconds=0)
        spot = m.traces[0].offer_spot
        with pytest.raises(InsufficientCapacity):
            p.launch(LaunchRequest(spot, 3, "k0"), T0)
        p.launch(LaunchRequest(spot, 1, "k1"), T0)
        p.launch(LaunchRequest(spot, 1, "k2"), T0 + timedelta(seconds=5))
        od = m.traces[0].offer_on_demand
        assert len(p.launch(LaunchRequest(od, 5, "k3"), T0).nodes) == 5  # on-demand always available
        newest = max((n for n in store.nodes() if n.offer.market is OfferMarket.SPOT), key=lambda n: n.launched_at_utc)
        (event,) = p.enforce_capacity(T0 + timedelta(seconds=1200))
        assert event.node_id == newest.node_id and event.deadline_utc == event.received_at_utc + timedelta(seconds=120)
        assert p.enforce_capacity(T0 + timedelta(seconds=1200)) == ()  # the noticed node no longer counts
        p.mark_unavailable(spot.key, T0)
        assert spot.key not in {o.key for o in p.offers(T0)}
        assert spot.key in {o.key for o in p.offers(T0 + timedelta(seconds=181))}
    finally:
        store.close()


def test_launch_delays_are_common_random_numbers():
    """The k-th node launched at an instant waits as long in every run with the
    seed, whatever was bought and under whatever request; a retried request
    keeps its nodes."""
    m = market()
    spot, od = m.traces[1].offer_spot, m.traces[0].offer_on_demand

    def ready_times(seed, launches):
        store = Store("sqlite:///:memory:")
        try:
            p = MarketProvider(store, m, seed=seed, launch_delay_seconds=60)
            out = [n.ready_at_utc for req, at in launches for n in p.launch(req, at).nodes]
            first, at = launches[0]
            retried = sorted(n.ready_at_utc for n in p.launch(first, at).nodes)
            assert retried == sorted(out[:first.count])
            return out
        finally:
            store.close()

    t1 = T0 + timedelta(seconds=5)
    a = ready_times(0, [(LaunchRequest(od, 2, "plan-a"), T0), (LaunchRequest(od, 1, "plan-a2"), t1)])
    b = ready_times(0, [(LaunchRequest(spot, 1, "plan-b"), T0), (LaunchRequest(od, 1, "plan-b1"), T0),
                        (LaunchRequest(spot, 1, "plan-b2"), t1)])
    assert a == b
    assert a[0] != a[1]  # the second node of the instant draws anew
    assert all(timedelta(seconds=30) <= r - T0 <= timedelta(seconds=90) for r in a[:2])
    assert ready_times(1, [(LaunchRequest(od, 2, "plan-a"), T0)]) != a[:2]


def test_policies_meet_a_tight_deadline_on_the_same_launch_delays():
    """A one-minute job with 50 s of slack needs a new node (30 to 90 s; the
    first job holds the first node): whether it makes its deadline is the draw
    of the launch delay, and every policy gets the same draw, so none misses it
    where another does not. The policies' fleets differ (spot or on-demand,
    other node ids), so their launch requests do too."""
    busy = job("busy", gpus=1, duration_hours=0.5, submitted=T0, vcpus=4, memory_gib=16)
    one = replace(job("tight", gpus=1, duration_hours=1 / 60, submitted=T0 + timedelta(minutes=3), vcpus=4,
                      memory_gib=16), deadline_utc=T0 + timedelta(minutes=3, seconds=110))
    pol = sim_policy(on_demand_base_gpus=0, max_spot_share=1.0)
    for seed in range(4):
        cfg = SimConfig(seed=seed, launch_delay_seconds=60)
        runs = [simulate([busy, one], market(), pol, planner=PLANNERS[name], config=cfg)
                for name in ("fleetctl", "on-demand", "spot-greedy")]
        assert len({r.wait_hours for r in runs}) == 1, (seed, [r.wait_hours for r in runs])
        assert len({r.deadline_misses for r in runs}) == 1



@pytest.mark.parametrize("checkpointable", [True, False], ids=["checkpointable", "not-checkpointable"])
@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_every_policy_gets_the_same_reclaim_handling(name, checkpointable):
    """Reclaims are the controller's, not the planner's: under every policy a
    job restarted twice (z1 reclaimed at 30 min, z2 at 60 min) checkpoints on
    each 2-minute notice when it can (nothing lost) and loses each run when it
    cannot; the drained node is let go at the notice (no drain time billed);
    the wait ends at the first start, not at a restart."""
    m = market({"z1": (1,) * 3 + (0,) * 33, "z2": (1,) * 6 + (0,) * 30, "z3": (1,) * 36})
    j = replace(job("a", gpus=1, duration_hours=2.0, vcpus=4, memory_gib=16), checkpointable=checkpointable,
                checkpoint_interval_minutes=20.0 if checkpointable else None)
    pol = sim_policy(on_demand_base_gpus=0, max_spot_share=1.0)
    seen = {}

    def hook(now, world):
        seen["events"] = world.store.events()
        seen["nodes"] = world.store.nodes(include_gone=True)

    r = simulate([j], m, pol, planner=PLANNERS[name], config=SimConfig(launch_delay_seconds=60), on_event=hook)
    starts = [_at(e) for e in seen["events"] if e["kind"] == "start"]
    requeues = [e["payload"] for e in seen["events"] if e["kind"] == "requeue"]
    assert r.jobs_completed == 1 and r.useful_gpu_hours == pytest.approx(2.0)
    if name == "on-demand":
        assert r.interruptions == 0 and not requeues and r.lost_gpu_hours < 1e-3
        return
    assert r.interruptions == 2 and len(requeues) == 2 and len(starts) == 3
    assert r.wait_hours == ((starts[0] - T0).total_seconds() / 3600,)
    runs = [(T0 + timedelta(minutes=30) - starts[0]), (T0 + timedelta(minutes=60) - starts[1])]
    run_hours = sum(d.total_seconds() for d in runs) / 3600
    if checkpointable:
        assert [q["checkpoint"] for q in requeues] == ["saved", "saved"]
        assert requeues[-1]["kept_hours"] == pytest.approx(run_hours) and r.lost_gpu_hours < 1e-3
    else:
        assert [q["kept_hours"] for q in requeues] == [0.0, 0.0]
        assert r.lost_gpu_hours == pytest.approx(run_hours, abs=1e-3)
    terminated = {e["subject"]: _at(e) for e in seen["events"] if e["kind"] == "terminate"}
    reclaimed = [n for n in seen["nodes"] if n.offer.zone in ("z1", "z2")]
    assert [terminated[n.node_id] for n in sorted(reclaimed, key=lambda n: n.offer.zone)] == [
        T0 + timedelta(minutes=30), T0 + timedelta(minutes=60)]


def _at(event):
    from fleetctl.codec import str_to_dt

    return str_to_dt(event["at_utc"])

def test_bad_input_is_refused():
    js = jobs(2)
    with pytest.raises(ValueError, match="unique"):
        simulate([js[0], js[0]], market(), sim_policy())
    with pytest.raises(ValueError, match="tick_seconds"):
        SimConfig(tick_seconds=0)
    with pytest.raises(ValueError, match="tick_seconds"):
        SimConfig(tick_seconds=0.5)


def _moved(to):  # noqa: ANN001, ANN202 - the fixture market and jobs, moved to start at ``to``
    m = market()
    m = type(m)(tuple(replace(t, start_utc=to) for t in m.traces), to)
    return m, [replace(j, submitted_at_utc=j.submitted_at_utc - T0 + to,
                       deadline_utc=j.deadline_utc and j.deadline_utc - T0 + to) for j in jobs(3)]


def test_a_run_past_year_9999_is_a_value_error():
    """A market ending within the overrun (30 days) of year 9999's end was an
    OverflowError; so was a long job started near it (the planner computes its end)."""
    late, js = _moved(T0.replace(year=9999, month=12, day=20))
    with pytest.raises(ValueError, match=r"the market ends at 9999-12-20T\S+: that plus 720 hours of overrun, "
                                         r"the longest job \(2 hours\) .* past the end of year 9999"):
        simulate(js, late, sim_policy())
    with pytest.raises(ValueError, match="the run would stop at 9999-12-31T"):
        simulate(js, late, sim_policy(), until_utc=T0.replace(year=9999, month=12, day=31))
    early, js = _moved(T0.replace(year=9990, month=1, day=1))
    longest = replace(js[0], duration_hours=100_000.0)  # 11.4 years
    with pytest.raises(ValueError, match=r"the longest job \(100000 hours\)"):
        simulate([longest, *js[1:]], early, sim_policy())
    r = simulate(js, early, sim_policy())  # far, but the run and its jobs fit
    assert r.jobs_completed == 3 and r.end_utc.year == 9990


@pytest.mark.parametrize("checkpointable", [True, False], ids=["checkpointable", "not-checkpointable"])
def test_restart_overhead_is_paid_on_every_start_and_does_no_work(checkpointable):
    """With ``restart_overhead_seconds`` a run does work only after it: each of the three starts of
    a job reclaimed twice pays it (nodes held, nothing done), the job ends that much later in all,
    and the overhead counts as lost GPU-hours; without it, as before."""
    m = market({"z1": (1,) * 3 + (0,) * 33, "z2": (1,) * 6 + (0,) * 30, "z3": (1,) * 36})
    j = replace(job("a", gpus=1, duration_hours=2.0, vcpus=4, memory_gib=16), checkpointable=checkpointable,
                checkpoint_interval_minutes=20.0 if checkpointable else None)
    pol = sim_policy(on_demand_base_gpus=0, max_spot_share=1.0)
    runs = {}
    for overhead in (0.0, 300.0):
        seen = {}

        def hook(now, world, seen=seen):
            seen["events"] = world.store.events()

        r = simulate([j], m, pol, planner=PLANNERS["fleetctl"],
                     config=SimConfig(launch_delay_seconds=60, restart_overhead_seconds=overhead), on_event=hook)
        starts = [_at(e) for e in seen["events"] if e["kind"] == "start"]
        done = [_at(e) for e in seen["events"] if e["kind"] == "complete"]
        requeues = [e["payload"] for e in seen["events"] if e["kind"] == "requeue"]
        assert r.jobs_completed == 1 and r.useful_gpu_hours == pytest.approx(2.0) and len(starts) == 3
        runs[overhead] = (r, starts, done[0], requeues)
    (plain, _, plain_done, plain_q), (slow, starts, slow_done, slow_q) = runs[0.0], runs[300.0]
    # the last run does its remaining work after its own 5 minutes
    kept = slow_q[-1]["kept_hours"]
    assert (slow_done - starts[-1]).total_seconds() == pytest.approx(300 + (2.0 - kept) * 3600, abs=2)
    # each reclaimed run did 5 minutes less work than it ran
    worked = [((T0 + timedelta(minutes=30) - starts[0]).total_seconds() - 300) / 3600,
              ((T0 + timedelta(minutes=60) - starts[1]).total_seconds() - 300) / 3600]
    if checkpointable:
        assert kept == pytest.approx(sum(worked), abs=1e-3)
        assert slow.lost_gpu_hours == pytest.approx(3 * 300 / 3600, abs=1e-3)  # the three overheads
    else:
        assert kept == 0.0
        assert slow.lost_gpu_hours == pytest.approx(3 * 300 / 3600 + sum(worked), abs=1e-3)
    assert slow.cost_usd > plain.cost_usd and slow_done > plain_done
    assert runs[0.0][1] == starts  # the same starts: the reclaims come at the same times
    if checkpointable:
        assert plain.lost_gpu_hours < 1e-3
    else:  # the reclaimed runs were lost either way; the last run's overhead is what is added
        assert slow.lost_gpu_hours - plain.lost_gpu_hours == pytest.approx(300 / 3600, abs=1e-3)


def test_the_runtime_does_no_work_during_the_restart_overhead():
    from fleetctl.controller.runtime import SimRuntime

    rt = SimRuntime(restart_overhead_seconds=600)
    started = replace(job("a", duration_hours=1.0), checkpointable=True, checkpoint_interval_minutes=15.0,
                      started_at_utc=T0, state=JobState.RUNNING)
    assert rt.progress(started, T0 + timedelta(minutes=9)).done_hours == 0.0
    p = rt.progress(started, T0 + timedelta(minutes=40))
    assert p.done_hours == pytest.approx(0.5) and p.checkpointed_hours == pytest.approx(0.5)
    assert p.last_checkpoint_utc == T0 + timedelta(minutes=40)  # 10 minutes of overhead, then two intervals
    assert not rt.progress(started, T0 + timedelta(minutes=69)).finished
    assert rt.progress(started, T0 + timedelta(minutes=70)).finished
    assert SimRuntime().progress(started, T0 + timedelta(minutes=60)).finished  # no overhead by default
