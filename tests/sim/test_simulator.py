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
from tests.builders import T0, job, policy
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
    for bad in (replace(js[1], state=JobState.RUNNING), replace(js[1], node_ids=("n1",))):
        with pytest.raises(ValueError, match="job j1: a trace job must be queued and unbound"):
            simulate([js[0], bad], market(), sim_policy())
    for until in (T0, T0 - timedelta(seconds=1)):  # the market and the first job start at T0
        with pytest.raises(ValueError, match="until_utc must be after the start"):
            simulate(js, market(), sim_policy(), until_utc=until)
    assert simulate(js, market(), sim_policy(), until_utc=T0 + timedelta(seconds=1)).end_utc == \
        T0 + timedelta(seconds=1)


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
    (plain, _, plain_done, _), (slow, starts, slow_done, slow_q) = runs[0.0], runs[300.0]
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


# =========================================================================== one job, step by step


def _one_job_run(caps, submitted_s=120.0, until_s=None, deadline=None, config=SimConfig(launch_delay_seconds=60),
                 progress=None):
    """One 1-GPU half-hour job on spot-greedy (price-first, no deadline awareness): the steps, the first
    node's ready time, the run's result."""
    j = replace(job("a", gpus=1, duration_hours=0.5, submitted=T0 + timedelta(seconds=submitted_s), vcpus=4,
                    memory_gib=16), deadline_utc=deadline)
    steps, ready = [], {}

    def hook(now, world):
        steps.append(now)
        for n in world.store.nodes(include_gone=True):
            ready.setdefault(n.node_id, n.ready_at_utc)

    r = simulate([j], market(caps), sim_policy(on_demand_base_gpus=0, max_spot_share=1.0),
                 planner=PLANNERS["spot-greedy"], config=config,
                 until_utc=None if until_s is None else T0 + timedelta(seconds=until_s), on_event=hook,
                 progress=progress)
    return steps, next(iter(ready.values())), r


def _s(seconds):
    return T0 + timedelta(seconds=seconds)


def test_one_job_steps_through_arrival_ready_ticks_completion_and_idle_release():
    """Arrival at 120 s launches a spot node (z1, 1 USD/h), which is ready 30 to 90 s later; the job runs
    there for half an hour and completes at the next whole second past it; the node, idle 10 minutes
    after, is let go at the next tick (2700 s). Ticks every 300 s from the start while anything is
    active. Cost, GPU-hours and wait are integrals over those steps."""
    fractions = []
    steps, ready, r = _one_job_run({"z1": (1,) * 36}, progress=fractions.append)
    done = (ready + timedelta(minutes=30)).replace(microsecond=0) + timedelta(seconds=1)
    assert _s(150) <= ready <= _s(210) and _s(1800) < done < _s(2100)
    span = (6 + 720) * 3600  # to the market's end (36 ticks of 10 minutes) plus the default 30 days of overrun
    assert fractions == pytest.approx([(t - T0).total_seconds() / span for t in steps] + [1.0])
    assert steps == [_s(0), _s(120), ready, *(_s(300 * k) for k in range(1, 7)), done, _s(2100), _s(2400), _s(2700)]
    assert r.end_utc == _s(2700) and r.ticks == len(steps) - 1  # nothing to do at the start
    held_hours = (2700 - 120) / 3600
    assert r.cost_usd == pytest.approx(held_hours * 1.0) and r.held_gpu_hours == pytest.approx(held_hours)
    assert r.gpu_hours_run == pytest.approx((done - ready).total_seconds() / 3600)
    assert r.useful_gpu_hours == pytest.approx(0.5) and r.lost_gpu_hours == pytest.approx(r.gpu_hours_run - 0.5)
    assert r.gpu_utilization == pytest.approx(0.5 / held_hours)
    assert r.wait_hours == pytest.approx(((ready - _s(120)).total_seconds() / 3600,))
    assert (r.jobs_total, r.jobs_completed, r.jobs_lost, r.deadline_misses, r.interruptions, r.migrations,
            r.ice_retries) == (1, 1, 0, 0, 0, 0, 0)
    assert [s.at_utc for s in r.samples] == steps
    assert [(s.usd_per_hour, s.running_gpus, s.held_gpus) for s in r.samples] == \
        [(0, 0, 0), (1.0, 0, 1)] + [(1.0, 1, 1)] * 7 + [(1.0, 0, 1)] * 3 + [(0, 0, 0)]
    assert [s.cost_usd for s in r.samples] == pytest.approx([max(0.0, (t - _s(120)).total_seconds() / 3600)
                                                            for t in steps])


def test_a_run_stopped_at_until_counts_up_to_it():
    """Stopped at 1000 s, mid-run: everything is integrated up to 1000 s exactly, the running job keeps
    its progress, its deadline is missed (not completed), its wait is to its start."""
    fractions = []
    steps, ready, r = _one_job_run({"z1": (1,) * 36}, until_s=1000, deadline=_s(3600), progress=fractions.append)
    assert steps == [_s(0), _s(120), ready, _s(300), _s(600), _s(900)] and r.end_utc == _s(1000)
    assert fractions == pytest.approx([(t - T0).total_seconds() / 1000 for t in steps] + [1.0])
    assert r.cost_usd == pytest.approx((1000 - 120) / 3600) and r.held_gpu_hours == pytest.approx((1000 - 120) / 3600)
    run_hours = (_s(1000) - ready).total_seconds() / 3600
    assert r.gpu_hours_run == pytest.approx(run_hours) and r.useful_gpu_hours == pytest.approx(run_hours)
    assert 0.0 <= r.lost_gpu_hours < 1e-9  # never below 0 (here the float difference is -3e-17)
    assert (r.jobs_completed, r.jobs_lost, r.deadline_misses) == (0, 0, 1)
    assert r.wait_hours == pytest.approx(((ready - _s(120)).total_seconds() / 3600,))
    # Stopped at a step's instant (a tick), the run makes that step.
    steps, _, r = _one_job_run({"z1": (1,) * 36}, until_s=900)
    assert steps[-1] == r.end_utc == _s(900) and r.ticks == len(steps) - 1


def test_a_job_cancelled_while_running_is_lost_and_keeps_no_work():
    """The job, running from its node's ready time, is cancelled (``fleetctl jobs cancel``) at once; the next
    tick (300 s) stops it: lost, not completed, its deadline missed, none of its run kept (it never
    checkpointed), so every GPU-hour it ran is lost; its wait is to its start."""
    asked = []

    def cancel_once_running(now, world):
        running = [j for j in world.store.jobs(active_only=True) if j.state is JobState.RUNNING]
        if running and not asked:
            asked.append(now)
            world.store.request_cancel(["a"], now)

    j = replace(job("a", gpus=1, duration_hours=0.5, submitted=_s(120), vcpus=4, memory_gib=16),
                deadline_utc=_s(7200))
    r = simulate([j], market({"z1": (1,) * 36}), sim_policy(on_demand_base_gpus=0, max_spot_share=1.0),
                 planner=PLANNERS["spot-greedy"], config=SimConfig(launch_delay_seconds=60), on_event=cancel_once_running)
    (ready,) = asked
    assert _s(150) <= ready <= _s(210)
    assert (r.jobs_total, r.jobs_completed, r.jobs_lost, r.deadline_misses, r.interruptions) == (1, 0, 1, 1, 0)
    assert r.useful_gpu_hours == 0.0
    assert r.gpu_hours_run == pytest.approx((300 - (ready - T0).total_seconds()) / 3600)
    assert r.lost_gpu_hours == r.gpu_hours_run
    assert r.wait_hours == pytest.approx(((ready - _s(120)).total_seconds() / 3600,))


def test_a_rebalance_hint_is_no_interruption():
    """A rebalance hint on the job's node (the offer's risk, the default 0.05, is under the 0.2 that drains):
    the job runs on and completes; the hint is not counted as an interruption, a reclaim notice is."""
    from fleetctl.model import InterruptionKind

    def hint_once_running(kind):
        sent = []

        def hook(now, world):
            running = [j for j in world.store.jobs(active_only=True) if j.state is JobState.RUNNING]
            if running and not sent:
                sent.append(world.provider.reclaim(running[0].node_ids[0], now, kind=kind))
        return hook

    j = job("a", gpus=1, duration_hours=0.5, submitted=_s(120), vcpus=4, memory_gib=16)
    pol = sim_policy(on_demand_base_gpus=0, max_spot_share=1.0)
    for kind, counted in ((InterruptionKind.REBALANCE, 0), (InterruptionKind.RECLAIM_WARNING, 1)):
        r = simulate([j], market({"z1": (1,) * 36, "z2": (1,) * 36}), pol, planner=PLANNERS["spot-greedy"],
                     config=SimConfig(launch_delay_seconds=60), on_event=hint_once_running(kind))
        assert (r.interruptions, r.jobs_completed) == (counted, 1), kind


def test_a_deadline_is_met_by_a_completion_at_it_and_missed_a_microsecond_before():
    _, ready, _ = _one_job_run({"z1": (1,) * 36})
    done = (ready + timedelta(minutes=30)).replace(microsecond=0) + timedelta(seconds=1)
    assert _one_job_run({"z1": (1,) * 36}, deadline=done)[2].deadline_misses == 0
    assert _one_job_run({"z1": (1,) * 36}, deadline=done - timedelta(microseconds=1))[2].deadline_misses == 1


def test_a_job_before_the_market_starts_the_run_and_a_capacity_drop_is_a_step():
    """The run starts at the first job, before the market (no spot then: on-demand, 3 USD/h), the market's
    start is a step and the ticks count from the run's start. On the market, z1 (the cheapest) drops to 0
    at 1200 s, between two ticks (every 420 s): a market change is a step, its node is reclaimed then, and
    the job restarts on z2."""
    steps, ready, r = _one_job_run({"z1": (1,) * 36}, submitted_s=-90)
    assert steps[:3] == [_s(-90), ready, _s(0)] and _s(210) in steps and _s(300) not in steps
    assert r.cost_usd == pytest.approx(3.0 * (r.end_utc - _s(-90)).total_seconds() / 3600)
    steps, _, r = _one_job_run({"z1": (1,) * 2 + (0,) * 34, "z2": (1,) * 36},
                               config=SimConfig(launch_delay_seconds=60, tick_seconds=420))
    after = steps[steps.index(_s(1200)) + 1]
    assert steps[steps.index(_s(1200)) - 1] == _s(840) and _s(1230) <= after <= _s(1260)  # z2's node ready
    assert _s(1320) not in steps  # the reclaimed node was let go at the notice: its deadline is no step
    assert r.interruptions == 1 and r.jobs_completed == 1


@pytest.mark.parametrize("reclaim_forecast", [True, False], ids=["own-reclaims", "no-own-reclaims"])
def test_the_planner_sees_the_forecasters_risks_and_the_stores_own_reclaims(reclaim_forecast):
    """z1 is reclaimed at 1200 s: from then on the planner's forecast holds that reclaim (unless
    ``reclaim_forecast`` is off) beside the forecaster's risks of the moment, asked at each tick's instant."""
    from fleetctl.model import OfferRisk
    from fleetctl.planner import plan as fleetctl_plan

    seen, asked = [], []

    def planner(**kw):
        seen.append((kw["now"], kw["forecast"]))
        return fleetctl_plan(**kw)

    def forecaster(now):
        asked.append(now)
        return (OfferRisk("aws/r1/z3/g1/spot", 60, 0.25),)

    m = market({"z1": (1,) * 2 + (0,) * 34, "z2": (1,) * 36})
    z1 = m.traces[0].offer_spot.key
    j = job("a", gpus=1, duration_hours=0.5, submitted=T0 + timedelta(seconds=120), vcpus=4, memory_gib=16)
    simulate([j], m, sim_policy(on_demand_base_gpus=0, max_spot_share=1.0), planner=planner, forecaster=forecaster,
             config=SimConfig(launch_delay_seconds=60, reclaim_forecast=reclaim_forecast))
    assert {now for now, _ in seen} <= set(asked) and asked == sorted(set(asked))
    assert all(f.interruption == (OfferRisk("aws/r1/z3/g1/spot", 60, 0.25),) for _, f in seen)
    before = [f.recent_reclaims for now, f in seen if now < _s(1200)]
    after = [f.recent_reclaims for now, f in seen if now >= _s(1200)]
    assert before and after and all(r == () for r in before)
    assert [{r.offer_key for r in reclaims} for reclaims in after] == [{z1} if reclaim_forecast else set()] * len(after)


def test_a_launch_refused_for_capacity_is_counted_and_planned_again_at_once():
    """Two jobs at 120 s, z1 (the cheapest) holds one node: spot-greedy's second z1 launch is refused,
    counted once, and the job goes to z2 at the same instant."""
    js = [job(f"a{i}", gpus=1, duration_hours=0.5, submitted=T0 + timedelta(seconds=120), vcpus=4, memory_gib=16)
          for i in range(2)]
    launched = {}

    def hook(now, world):
        for n in world.store.nodes(include_gone=True):
            launched.setdefault(n.offer.zone, n.launched_at_utc)

    r = simulate(js, market({"z1": (1,) * 36, "z2": (1,) * 36}), sim_policy(on_demand_base_gpus=0, max_spot_share=1.0),
                 planner=PLANNERS["spot-greedy"], config=SimConfig(launch_delay_seconds=60), on_event=hook)
    assert r.ice_retries == 1 and r.jobs_completed == 2
    assert launched == {"z1": _s(120), "z2": _s(120)}


def test_a_gang_counts_every_gpu_and_a_job_not_arrived_by_the_end_is_lost():
    """A 2-worker gang on z1 (two 1-GPU nodes at 1 USD/h) starts when its second node is ready; every
    GPU-hour counts twice. A job submitted after ``until_utc`` never arrives: lost, no wait, its deadline
    missed. The run idles from 2700 s (nodes let go) to its end at 4000 s."""
    gang = job("g", workers=2, gpus=1, duration_hours=0.5, submitted=_s(120), vcpus=4, memory_gib=16)
    late = replace(job("late", gpus=1, duration_hours=0.5, submitted=_s(5000), vcpus=4, memory_gib=16),
                   deadline_utc=_s(5 * 3600))
    steps, ready = [], []

    def hook(now, world):
        steps.append(now)
        ready[:] = sorted(n.ready_at_utc for n in world.store.nodes(include_gone=True))

    r = simulate([late, gang], market({"z1": (2,) * 36}), sim_policy(on_demand_base_gpus=0, max_spot_share=1.0),
                 planner=PLANNERS["spot-greedy"], config=SimConfig(launch_delay_seconds=60), until_utc=_s(4000),
                 on_event=hook)
    first, start = ready
    done = (start + timedelta(minutes=30)).replace(microsecond=0) + timedelta(seconds=1)
    assert steps == [_s(0), _s(120), first, start, *(_s(300 * k) for k in range(1, 7)), done, _s(2100), _s(2400),
                     _s(2700)]
    assert r.end_utc == _s(4000)
    assert r.useful_gpu_hours == pytest.approx(1.0)
    assert r.gpu_hours_run == pytest.approx(2 * (done - start).total_seconds() / 3600)
    assert r.held_gpu_hours == pytest.approx(2 * (2700 - 120) / 3600) and r.cost_usd == pytest.approx(r.held_gpu_hours)
    assert r.wait_hours == pytest.approx(((start - _s(120)).total_seconds() / 3600, 0.0))  # by submission time
    assert (r.jobs_total, r.jobs_completed, r.jobs_lost, r.deadline_misses) == (2, 1, 1, 1)


def test_a_run_without_jobs_ends_at_the_start_with_nothing_counted():
    r = simulate([], market(), sim_policy())
    assert (r.end_utc, r.ticks, r.cost_usd, r.held_gpu_hours, r.gpu_utilization, r.wait_hours) == (T0, 0, 0.0, 0.0,
                                                                                                   0.0, ())
    assert [s.at_utc for s in r.samples] == [T0]


def test_the_markets_end_reclaims_its_spot_nodes_and_the_run_goes_on_past_it():
    """z1's trace ends at 1200 s: its node is reclaimed then (no spot capacity after a trace) and the job
    finishes on on-demand, the run stepping on past the market's last change."""
    steps, _, r = _one_job_run({"z1": (1,) * 2})
    assert _s(1200) in steps and steps[-1] > _s(1200 + 1800)
    assert r.interruptions == 1 and r.jobs_completed == 1 and r.end_utc == steps[-1]


def test_a_reclaimed_node_not_let_go_is_billed_until_the_cloud_takes_it_at_the_deadline():
    """A planner that never terminates keeps z1's node after its notice at 1200 s: the notice's deadline
    (AWS: 1320 s) is a step, the node is held and billed until then, and z2's replacement from 1200 s on."""
    from fleetctl.model import Terminate

    def keeping(**kw):
        p = PLANNERS["spot-greedy"](**kw)
        return replace(p, actions=tuple(a for a in p.actions if not isinstance(a, Terminate)))

    j = job("a", gpus=1, duration_hours=0.5, submitted=_s(120), vcpus=4, memory_gib=16)
    steps = []
    r = simulate([j], market({"z1": (1,) * 2 + (0,) * 34, "z2": (1,) * 36}),
                 sim_policy(on_demand_base_gpus=0, max_spot_share=1.0), planner=keeping,
                 config=SimConfig(launch_delay_seconds=60), until_utc=_s(1500), on_event=lambda now, w: steps.append(now))
    assert _s(1320) in steps and r.interruptions == 1
    assert r.held_gpu_hours == pytest.approx((1320 - 120 + 1500 - 1200) / 3600)
    assert r.cost_usd == pytest.approx((1320 - 120) / 3600 * 1.0 + (1500 - 1200) / 3600 * 1.1)


def test_a_queued_job_with_nothing_held_keeps_the_clock_ticking_until_spot_capacity_comes():
    """On-demand (3 USD/h) is over the 2 USD/h budget and z1 has no spot capacity before 1200 s: the job
    waits, nothing held, the run ticking every 300 s, and starts on the node launched at 1200 s."""
    j = job("a", gpus=1, duration_hours=0.5, submitted=_s(120), vcpus=4, memory_gib=16)
    steps = []
    r = simulate([j], market({"z1": (0,) * 2 + (1,) * 34}),
                 policy(on_demand_base_gpus=0, max_spot_share=1.0, max_usd_per_hour=2.0),
                 planner=PLANNERS["spot-greedy"], config=SimConfig(launch_delay_seconds=60),
                 on_event=lambda now, w: steps.append(now))
    assert steps[:6] == [_s(0), _s(120), _s(300), _s(600), _s(900), _s(1200)]
    assert r.jobs_completed == 1 and 30 / 3600 <= r.wait_hours[0] - (1200 - 120) / 3600 <= 90 / 3600


@pytest.mark.parametrize(
    ("name", "most"),
    [("tick_seconds", 86400.0), ("launch_delay_seconds", 86400.0), ("checkpoint_seconds", 86400.0),
     ("restart_overhead_seconds", 86400.0), ("ice_ttl_seconds", 86400.0), ("overrun_hours", 24.0 * 366)],
)
def test_sim_config_takes_each_knob_within_its_bounds_and_refuses_it_outside(name, most):
    least = 1.0 if name == "tick_seconds" else 0.0
    for ok in (least, most):
        assert getattr(SimConfig(**{name: ok}), name) == ok
    for bad in (least - 0.5, most + 0.5, float("nan")):
        with pytest.raises(ValueError, match=f"{name} must be from {least:g} to"):
            SimConfig(**{name: bad})
