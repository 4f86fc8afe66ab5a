"""The planner's spot decisions to the number: the expected loss it prices
into an offer, when a job may still use spot (reclaims counted, deadline
slack), how long it waits for spot, and which existing nodes a job's GPU
model, GPU memory and market allow (docs/planner.md, "Risk-adjusted cost")."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import DemandForecast, Explanation, Forecast, JobState, Market, OfferRisk, Reason
from fleetctl.planner import PlannedFleet, plan
from tests.builders import T0, job, node, offer, policy

SPOT = offer("s1", gpus=1, price=10.0, vcpus=8, memory_gib=64)
ON_DEMAND = offer("s1", gpus=1, price=30.0, market=Market.ON_DEMAND, vcpus=8, memory_gib=64)


def run(queue=(), fleet=(), offers=(SPOT, ON_DEMAND), pol=None, forecast=None, now=T0):
    return plan(now=now, queue=tuple(queue), fleet=tuple(fleet), offers=tuple(offers), forecast=forecast,
                policy=pol or policy())


def chosen_loss(p, job_id: str) -> str:
    """The expected loss (USD/h, as shown) of the offer the plan chose for ``job_id``."""
    (line,) = [c for c in p.explanation(job_id).considered if c.startswith("chose ")]
    return re.search(r"\+ \$([0-9.]+)/h expected loss", line).group(1)


def risk(p: float, of=SPOT) -> Forecast:
    return Forecast(interruption=(OfferRisk(of.key, 60, p),))


# ----------------------------------------------------------------------------- expected loss

@pytest.mark.parametrize("checkpointable, interval, hours, restart, loss", [
    # p 0.4 x $10/h x the job's share 1 x L; L = half the run (no checkpoints) + the restart
    (False, None, 4.0, 6.0, "8.40"),  # 4 x (4 / 2 + 0.1)
    (False, 30.0, 4.0, 6.0, "8.40"),  # an interval without checkpointing saves nothing
    (True, 30.0, 4.0, 6.0, "1.40"),  # half the interval: 4 x (0.5 / 2 + 0.1)
    (True, 30.0, 4.0, 30.0, "3.00"),  # 4 x (0.25 + 0.5)
    (True, 30.0, 0.2, 6.0, "0.80"),  # less work left than an interval: half of it, 4 x (0.1 + 0.1)
    (True, None, 4.0, 6.0, "8.40"),  # checkpointable with no interval known: as if it did not checkpoint
], ids=["no-checkpoints", "interval-but-not-checkpointable", "checkpoints", "long-restart", "short-run",
        "checkpointable-without-interval"])
def test_the_expected_loss_is_p_times_hours_lost_times_the_jobs_share_of_the_price(
        checkpointable, interval, hours, restart, loss):
    j = replace(job("j", duration_hours=hours), checkpointable=checkpointable, checkpoint_interval_minutes=interval)
    p = run(queue=[j], offers=[SPOT], forecast=risk(0.4), pol=policy(restart_overhead_minutes=restart))
    assert chosen_loss(p, "j") == loss


def test_the_expected_loss_is_the_jobs_share_of_a_bigger_node():
    # a 2-GPU job on an 8-GPU $16/h node: 0.5 x 2/8 x 16 x (4 / 2 + 0.1)
    big = offer("g8", gpus=8, price=16.0)
    p = run(queue=[job("j", gpus=2, duration_hours=4.0)], offers=[big], forecast=risk(0.5, big),
            pol=policy(restart_overhead_minutes=6.0))
    assert chosen_loss(p, "j") == "4.20"


# ----------------------------------------------------------------------------- spot after reclaims

@pytest.mark.parametrize("interruptions, market", [(2, Market.SPOT), (3, Market.ON_DEMAND)])
@pytest.mark.parametrize("count, counted", [("all", ""), ("work_lost", "with work lost ")])
def test_more_interruptions_than_the_policy_allows_means_on_demand(interruptions, market, count, counted):
    j = replace(job("j"), interruptions=interruptions, work_lost_interruptions=interruptions)
    p = run(queue=[j], pol=policy(max_interruptions_before_on_demand=2, count_interruptions=count))
    assert p.of_kind("launch")[0].offer.market is market
    note = f"on-demand only: interrupted 3 times {counted}(policy allows 2 on spot)"
    assert (note in p.explanation("j").considered) is (market is Market.ON_DEMAND)


# ----------------------------------------------------------------------------- deadline slack

def _deadline_job(slack_seconds: float, checkpointable: bool = True, interval: float | None = 30.0):
    """4 h of work, checkpoints every 30 min, a 30-minute restart: one reclaim costs
    0.5 + 0.5 h, so spot needs 5 h to the deadline; ``slack_seconds`` more (or less)."""
    return replace(job("j", duration_hours=4.0), checkpointable=checkpointable,
                   checkpoint_interval_minutes=interval,
                   deadline_utc=T0 + timedelta(hours=5, seconds=slack_seconds))


@pytest.mark.parametrize("slack_seconds, checkpointable, interval, market", [
    (0, True, 30.0, Market.SPOT),  # the slack survives one reclaim exactly
    (-3, True, 30.0, Market.ON_DEMAND),  # 3 s short
    (3.5 * 3600 - 3, False, 30.0, Market.ON_DEMAND),  # no checkpoints: a reclaim loses all 4 h, not 30 min
    (3.5 * 3600, False, 30.0, Market.SPOT),
    (3.5 * 3600 - 3, True, None, Market.ON_DEMAND),  # checkpointable, but how often is unknown: all 4 h
], ids=["exactly-enough", "3s-short", "no-checkpoints-short", "no-checkpoints-enough", "no-interval-short"])
def test_spot_only_while_the_deadline_survives_one_reclaim_and_a_restart(slack_seconds, checkpointable, interval,
                                                                          market):
    j = _deadline_job(slack_seconds, checkpointable, interval)
    p = run(queue=[j], pol=policy(restart_overhead_minutes=30.0))
    assert p.of_kind("launch")[0].offer.market is market
    if market is Market.ON_DEMAND:
        assert "on-demand only: deadline at risk: the slack would not survive one reclaim" in \
            p.explanation("j").considered


# ----------------------------------------------------------------------------- waiting for spot

@pytest.mark.parametrize("waited, waits", [
    (timedelta(minutes=29, seconds=59.8), True),
    (timedelta(minutes=30), False),
])
def test_patience_for_spot_ends_at_the_policys_minute(waited, waits):
    p = run(queue=[job("j", duration_hours=4.0)], offers=[ON_DEMAND], pol=policy(max_wait_for_spot_minutes=30),
            now=T0 + waited)
    if waits:
        assert [u.reason for u in p.unplaced] == [Reason.WAITING_FOR_CAPACITY] and not p.actions
    else:
        assert p.of_kind("launch")[0].offer.market is Market.ON_DEMAND and not p.unplaced
        assert "no spot offer after 30 min of waiting (policy waits 30): on-demand" in p.explanation("j").considered


@pytest.mark.parametrize("waited_minutes, slack_minutes, waits", [
    (0, 30, True),  # 30 min of slack left after a reclaim: the whole wait fits
    (0, 29.9, False),
    (15, 15, True),  # 15 min waited, 15 to go: exactly the slack
    (15, 14.9, False),
])
def test_a_deadline_job_waits_for_spot_only_while_the_rest_of_the_wait_fits_its_slack(
        waited_minutes, slack_minutes, waits):
    # 4 h of work, checkpoints every 30 min, a 30-minute restart: spot needs 5 h to the deadline, plus the wait
    now = T0 + timedelta(minutes=waited_minutes)
    j = replace(job("j", duration_hours=4.0), checkpointable=True, checkpoint_interval_minutes=30.0,
                deadline_utc=now + timedelta(hours=5, minutes=slack_minutes))
    p = run(queue=[j], offers=[ON_DEMAND], pol=policy(max_wait_for_spot_minutes=30, restart_overhead_minutes=30.0),
            now=now)
    if waits:
        assert [u.reason for u in p.unplaced] == [Reason.WAITING_FOR_CAPACITY] and not p.actions
    else:
        assert p.of_kind("launch")[0].offer.market is Market.ON_DEMAND and not p.unplaced


def test_without_patience_a_job_goes_to_on_demand_without_a_word_about_waiting():
    p = run(queue=[job("j", duration_hours=4.0)], offers=[ON_DEMAND], now=T0 + timedelta(minutes=5))
    assert p.of_kind("launch")[0].offer.market is Market.ON_DEMAND
    assert not [c for c in p.explanation("j").considered if "wait" in c]


# ----------------------------------------------------------------------------- which existing nodes


def test_a_cpu_only_job_and_a_gpu_job_of_the_same_constraints_see_different_nodes():
    # the GPU job comes first; the CPU-only job after it still sees the CPU node (its kinds are its own)
    gpu = offer("g1", gpus=1, vcpus=4, memory_gib=16, price=3.0, market=Market.ON_DEMAND)
    cpu = offer("c16", gpus=0, model=None, vcpus=16, memory_gib=64, price=1.0, market=Market.ON_DEMAND)
    queue = [job("gpu", gpus=1, vcpus=4, memory_gib=16), job("cpu", gpus=0, vcpus=8, memory_gib=16,
                                                              submitted=T0 + timedelta(seconds=1))]
    p = run(queue=queue, fleet=[node("g", gpu), node("c", cpu)], offers=[gpu, cpu])
    assert {b.job_id: b.node_ids for b in p.of_kind("bind")} == {"gpu": ("g",), "cpu": ("c",)}
    assert not p.of_kind("launch")


def test_a_job_kept_off_spot_takes_a_free_on_demand_node_beside_a_tighter_spot_one():
    spot2 = offer("s2", gpus=2, price=2.0)
    od8 = offer("o8", gpus=8, price=20.0, market=Market.ON_DEMAND)
    p = run(queue=[job("j", gpus=1, spot=False)], fleet=[node("s", spot2), node("o", od8)], offers=[])
    assert p.of_kind("bind")[0].node_ids == ("o",)


def test_existing_nodes_of_another_gpu_model_are_not_used():
    # the V100 node is the tighter fit, but the job asks for A100s
    v100 = offer("v2", gpus=2, model="V100", price=2.0, market=Market.ON_DEMAND)
    a100 = offer("a8", gpus=8, price=10.0, market=Market.ON_DEMAND)
    p = run(queue=[job("j", gpus=1, models=("A100-80GB",))], fleet=[node("v", v100), node("a", a100)],
            offers=[v100, a100])
    assert p.of_kind("bind")[0].node_ids == ("a",) and not p.of_kind("launch")


@pytest.mark.parametrize("need, placed", [(0.0, "small"), (40.0, "big"), (80.0, "big"), (81.0, None)])
def test_existing_nodes_with_too_little_gpu_memory_are_not_used(need, placed):
    small = offer("a10", gpus=2, model="A10G", gpu_memory_gib=24.0, price=2.0, market=Market.ON_DEMAND)
    big = offer("a8", gpus=8, gpu_memory_gib=80.0, price=10.0, market=Market.ON_DEMAND)
    p = run(queue=[replace(job("j", gpus=1), gpu_memory_gib_per_gpu=need)],
            fleet=[node("small", small), node("big", big)], offers=[])
    assert [b.node_ids for b in p.of_kind("bind")] == ([(placed,)] if placed else [])


# ----------------------------------------------------------------------------- min_distinct_offers

@pytest.mark.parametrize("want", [2, 3])
def test_min_distinct_offers_gives_way_when_one_spot_offer_is_on_sale(want):
    # one spot offer on sale: two nodes on it, not one node on spot and one on on-demand
    big, big_od = offer("a", price=8.0), offer("a", price=20.0, market=Market.ON_DEMAND)
    queue = [job(f"j{i}", gpus=8, submitted=T0 + timedelta(seconds=i)) for i in range(2)]
    p = run(queue=queue, offers=[big, big_od], pol=policy(min_distinct_offers=want))
    assert [(l.offer.market, l.count) for l in p.of_kind("launch")] == [(Market.SPOT, 2)]


# ----------------------------------------------------------------------------- the market rules, at their bounds

def _busy(node_id: str, of, gpus: int | None = None):
    """A node of ``of`` with a running job on all its GPUs."""
    j = replace(job(f"run-{node_id}", gpus=gpus or of.instance_type.gpu_count, vcpus=1, memory_gib=1),
                state=JobState.RUNNING, node_ids=(node_id,), started_at_utc=T0 - timedelta(hours=1))
    return node(node_id, of), j


def _market_of_new_job(fleet_offers, pol, new_gpus: int = 8, offers=None):
    """The market of the node bought for a new job beside busy nodes of ``fleet_offers``, in a
    full pass and placed alone into the fleet after one (``PlannedFleet.place``: the rules are
    checked at the purchase itself, with no step to project or improve)."""
    fleet, running = zip(*(_busy(f"n{i}", o) for i, o in enumerate(fleet_offers)))
    new = job("new", gpus=new_gpus, vcpus=1, memory_gib=1)
    offers = offers or (A8, A8_OD)
    whole = run(queue=[*running, new], fleet=fleet, offers=offers, pol=pol)
    alone = PlannedFleet(now=T0, queue=running, fleet=fleet, offers=offers, forecast=None, policy=pol).place(new)
    markets = {p.of_kind("launch")[0].offer.market for p in (whole, alone)}
    assert len(markets) == 1, markets
    return markets.pop()


A8, A8_OD = offer("a", price=8.0), offer("a", price=20.0, market=Market.ON_DEMAND)
B8_Z2 = offer("b", price=8.0, zone="z2")


@pytest.mark.parametrize("share, market", [(0.5, Market.SPOT), (0.49, Market.ON_DEMAND)])
def test_spot_share_is_met_exactly(share, market):
    # 8 GPUs on demand held: 8 more spot is 50% of 16
    assert _market_of_new_job([A8_OD], policy(max_spot_share=share)) is market


@pytest.mark.parametrize("share, market", [
    (0.58, Market.SPOT),  # 29 spot GPUs of 50 is 58%, though 0.58 x 50 is 28.999999999999996 in floats
    (0.579, Market.ON_DEMAND),  # 28.95: 0.05 GPU over
])
def test_spot_share_is_exact_to_a_float_rounding_not_to_a_tenth_of_a_gpu(share, market):
    s28, o21 = offer("s28", gpus=28, price=20.0), offer("o21", gpus=21, price=60.0, market=Market.ON_DEMAND)
    one, one_od = offer("one", gpus=1, price=1.0), offer("one", gpus=1, price=3.0, market=Market.ON_DEMAND)
    assert _market_of_new_job([s28, o21], policy(max_spot_share=share), new_gpus=1, offers=(one, one_od)) is market


@pytest.mark.parametrize("share, market", [(0.5, Market.SPOT), (0.497, Market.ON_DEMAND)])
def test_instance_type_cap_is_share_of_spot_plus_one_node(share, market):
    # 8 spot GPUs of type a held; 8 more: 16 <= 0.5 x 16 + one node of 8, and 0.497 x 16 + 8 = 15.95 < 16
    pol = policy(max_share_per_instance_type=share)
    assert _market_of_new_job([A8], pol) is market


@pytest.mark.parametrize("share, market", [(0.5, Market.SPOT), (0.497, Market.ON_DEMAND)])
def test_zone_cap_is_share_of_spot_plus_the_largest_node_there(share, market):
    pol = policy(max_share_per_zone=share)
    assert _market_of_new_job([A8], pol) is market


@pytest.mark.parametrize("zone, shown", [("z1", "r1/z1"), ("", "r1/*")])
def test_the_zone_cap_names_the_zone_or_a_regional_offers_region(zone, shown):
    spot, od = replace(A8, zone=zone), replace(A8_OD, zone=zone)
    n, running = _busy("n1", spot)
    step = PlannedFleet(now=T0, queue=[running], fleet=[n], offers=[spot, od], forecast=None,
                        policy=policy(max_share_per_zone=0.4)).place(job("new", gpus=8, vcpus=1, memory_gib=1))
    assert step.of_kind("launch")[0].offer.market is Market.ON_DEMAND
    assert any(c.startswith("skipped 1 x a spot") and c.endswith(
        f"zone {shown} would pass 40% of spot GPUs (diversification)") for c in step.explanations[0].considered)


def test_the_first_node_of_a_type_and_in_a_zone_is_always_allowed():
    # 0.1 of 8 spot GPUs is under one GPU: the one-node allowance still lets the first node in
    assert _market_of_new_job([A8_OD], policy(max_share_per_instance_type=0.1, max_share_per_zone=0.1)) is Market.SPOT


# ----------------------------------------------------------------------------- skipping an idle node for spot

IDLE = offer("od1", gpus=1, price=30.0, market=Market.ON_DEMAND, vcpus=8, memory_gib=64)
CHEAP = offer("s1", gpus=1, price=10.0, vcpus=8, memory_gib=64)
NO_RISK = Forecast(interruption=(OfferRisk(CHEAP.key, 60, 0.0),))


def _idle_or_spot(hours: float = 4.0, fleet=None, offers=(IDLE, CHEAP), forecast=NO_RISK, queue=(), **pol):
    """Where the new 1-GPU job goes with an idle $30/h on-demand node held ($10/h spot, no risk, on sale),
    and whether it noted skipping the idle node."""
    fleet = fleet or [node("idle", IDLE)]
    p = run(queue=[*queue, job("j", duration_hours=hours, vcpus=1, memory_gib=1)], fleet=fleet, offers=offers,
            forecast=forecast, pol=policy(replace_on_demand_with_spot=True, **pol))
    (bind,) = [b for b in p.of_kind("bind") if b.job_id == "j"]
    skipped = any(c.startswith("skipped idle") for c in (p.explanation("j") or Explanation("j", ())).considered)
    where = bind.node_ids[0] if not bind.node_ids[0].startswith("new") else "new " + \
        next(l for l in p.of_kind("launch") if bind.node_ids[0] in l.node_names).offer.market.value
    return where, skipped


@pytest.mark.parametrize("hours, where", [
    (0.25, "idle"),  # saves (30 - 10) x 0.25 = $5, what the idle node costs for its 10 idle minutes
    (0.252, "new spot"),  # $5.04
    (0.5, "new spot"),
])
def test_an_idle_node_is_skipped_when_spot_saves_more_over_the_run_than_its_idle_timeout_costs(hours, where):
    assert _idle_or_spot(hours)[0] == where


@pytest.mark.parametrize("budget, where, skipped", [
    (40.0, "new spot", True),  # the idle node and the spot node together: exactly the budget
    (39.95, "idle", False),
])
def test_an_idle_node_is_skipped_only_if_the_budget_holds_both(budget, where, skipped):
    assert _idle_or_spot(max_usd_per_hour=budget) == (where, skipped)


def test_the_budget_check_for_skipping_an_idle_node_allows_a_float_rounding():
    # $0.2 + $0.1 is 0.30000000000000004 in floats: within a $0.30 budget
    idle, cheap = replace(IDLE, usd_per_hour=0.2), replace(CHEAP, usd_per_hour=0.1)
    assert _idle_or_spot(fleet=[node("idle", idle)], offers=(idle, cheap), max_usd_per_hour=0.3) == ("new spot", True)


@pytest.mark.parametrize("max_gpus, offers, where, skipped", [
    (2, (IDLE, CHEAP), "new spot", True),  # the idle GPU and the new one: exactly the cap
    (1, (IDLE, CHEAP), "idle", False),
    # the cheapest spot node holds 2 GPUs: 1 + 2 is past a cap of 2
    (2, (IDLE, offer("s2", gpus=2, price=10.0, vcpus=8, memory_gib=64)), "idle", False),
])
def test_an_idle_node_is_skipped_only_if_the_gpu_cap_holds_both(max_gpus, offers, where, skipped):
    forecast = Forecast(interruption=tuple(OfferRisk(o.key, 60, 0.0) for o in offers))
    assert _idle_or_spot(max_gpus=max_gpus, offers=offers, forecast=forecast) == (where, skipped)


def test_an_idle_node_is_taken_when_no_offer_could_hold_the_job():
    assert _idle_or_spot(offers=()) == ("idle", False)


def test_an_idle_node_is_kept_for_a_cheaper_on_demand_node():
    # only spot is worth skipping an idle node for: the cheaper on-demand offer is not bought
    cheap_od = offer("o1", gpus=1, price=10.0, market=Market.ON_DEMAND, vcpus=8, memory_gib=64)
    assert _idle_or_spot(offers=(IDLE, cheap_od)) == ("idle", False)


def test_an_idle_spot_node_is_taken_even_when_a_new_spot_node_would_be_cheaper():
    dear_spot = offer("s9", gpus=1, price=30.0, vcpus=8, memory_gib=64, zone="z3")
    assert _idle_or_spot(fleet=[node("idle", dear_spot)], offers=(dear_spot, CHEAP)) == ("idle", False)


def test_free_room_on_a_busy_on_demand_node_is_taken_not_skipped():
    od2 = offer("od2", gpus=2, price=30.0, market=Market.ON_DEMAND, vcpus=8, memory_gib=64)
    n, running = _busy("busy", od2, gpus=1)
    assert _idle_or_spot(fleet=[n], offers=(od2, CHEAP), queue=[running]) == ("busy", False)


def test_a_gang_takes_an_idle_node_beside_a_busy_one_rather_than_skipping_both():
    # the gang's two 2-GPU workers fit only across the idle node and the busy node's free half
    od2, od4 = (offer(f"od{g}", gpus=g, price=30.0, market=Market.ON_DEMAND, vcpus=8, memory_gib=64) for g in (2, 4))
    s4 = offer("s4", gpus=4, price=10.0, vcpus=8, memory_gib=64)
    n, running = _busy("busy", od4, gpus=2)
    gang = replace(job("j", workers=2, gpus=2, vcpus=1, memory_gib=1, duration_hours=4.0))
    p = run(queue=[running, gang], fleet=[node("idle", od2), n], offers=(od2, od4, s4),
            forecast=Forecast(interruption=(OfferRisk(s4.key, 60, 0.0),)), pol=policy(replace_on_demand_with_spot=True))
    assert [sorted(b.node_ids) for b in p.of_kind("bind") if b.job_id == "j"] == [["busy", "idle"]]
    assert not p.of_kind("launch")


def _idle_pair(queue, fleet, offers, forecast=None, **pol):
    p = run(queue=queue, fleet=fleet, offers=offers, forecast=forecast, pol=policy(**pol))
    return ({b.job_id: b.node_ids for b in p.of_kind("bind")}, [l.count for l in p.of_kind("launch")],
            [t.node_id for t in p.of_kind("terminate")], p)


IDLE_6 = offer("g1", gpus=1, price=6.0, market=Market.ON_DEMAND, vcpus=8, memory_gib=64)
SPOT_2 = offer("g1", gpus=1, price=2.0, vcpus=8, memory_gib=64)


@pytest.mark.parametrize("replace_on_demand_with_spot", [False, True])
def test_a_job_takes_an_idle_spot_node_before_an_idle_on_demand_node(replace_on_demand_with_spot):
    # both idle, both fit with nothing left over: the best fit's tie went to on-demand (its kind sorts first),
    # and the idle spot node idled out (or, with the move back to spot, the job skipped the on-demand node
    # for a new spot node like the idle one). A 1 h job without checkpoints risks p 0.05 x (0.5 h + 5 min)
    # x $2/h = $0.06/h on spot: $2.06/h against $6.00/h.
    fleet = [node("a", IDLE_6), node("b", SPOT_2)]
    binds, launched, terminated, p = _idle_pair([job("q")], fleet, (IDLE_6, SPOT_2),
                                                replace_on_demand_with_spot=replace_on_demand_with_spot)
    assert (binds, launched, terminated) == ({"q": ("b",)}, [], ["a"])
    assert "took room on spot b ($2.06/h risk-adjusted) before idle a ($6.00/h)" in p.explanation("q").considered


def test_a_job_takes_room_on_a_busy_spot_node_before_an_idle_on_demand_node():
    # room on a busy 2-GPU spot node costs only the expected loss: 0.05 x 0.583 h x 1/2 x $4/h = $0.06/h
    spot2 = offer("g2", gpus=2, price=4.0, vcpus=16, memory_gib=128)
    r = job("r", state=JobState.RUNNING, node_ids=("s",))
    binds, launched, terminated, p = _idle_pair([r, job("q")], [node("a", IDLE_6), node("s", spot2)],
                                                (IDLE_6, spot2))
    assert (binds["q"], launched, terminated) == (("s",), [], ["a"])
    assert "took room on spot s ($0.06/h risk-adjusted) before idle a ($6.00/h)" in p.explanation("q").considered


def test_a_job_keeps_the_idle_on_demand_node_when_spot_risks_more_than_it_saves():
    # a 10 h job without checkpoints at a 40%/h risk: $2 + 0.4 x (5 h + 5 min) x $2 = $6.07/h, past $6.00
    fleet = [node("a", IDLE_6), node("b", SPOT_2)]
    binds, _, terminated, _ = _idle_pair([job("q", duration_hours=10.0)], fleet, (IDLE_6, SPOT_2),
                                         forecast=risk(0.4, SPOT_2))
    assert (binds, terminated) == ({"q": ("a",)}, ["b"])
    # at 39%/h: $5.96/h, the spot node
    binds, _, terminated, _ = _idle_pair([job("q", duration_hours=10.0)], fleet, (IDLE_6, SPOT_2),
                                         forecast=risk(0.39, SPOT_2))
    assert (binds, terminated) == ({"q": ("b",)}, ["a"])
    # a job that may not use spot keeps the on-demand node whatever the risk
    binds, _, _, _ = _idle_pair([job("q", priority="production")], fleet, (IDLE_6, SPOT_2))
    assert binds == {"q": ("a",)}


def test_a_job_that_skipped_an_idle_on_demand_node_but_was_bought_on_demand_takes_it_after_all():
    # a 50% spot share: q skips the idle $6 on-demand node "a" for new spot, then the spot share sends it to
    # on-demand. Before, the plan launched a $6 on-demand node like "a" and terminated "a".
    r = job("r", state=JobState.RUNNING, node_ids=("s",), duration_hours=5.0)
    fleet = [node("a", IDLE_6, ready_at=T0 - timedelta(minutes=30)), node("s", SPOT_2)]
    binds, launched, terminated, p = _idle_pair([r, job("q", duration_hours=5.0)], fleet, (IDLE_6, SPOT_2),
                                                max_spot_share=0.5, replace_on_demand_with_spot=True)
    assert (binds["q"], launched, terminated) == (("a",), [], [])
    assert p.explanation("q").considered[-1] == ("then took idle a ($6.00/h) after all: its purchase came out "
                                                 "on-demand, not spot (g1 on_demand in aws r1/z1 ($6.00/h))")
    # an idle node dearer than the on-demand node bought, or with fewer GPUs than it (a 2-GPU node is the only
    # on-demand offer on sale): the purchase stands
    od2 = replace(IDLE_6, instance_type=replace(IDLE_6.instance_type, name="g2", gpu_count=2))
    for idle, on_sale in ((replace(IDLE_6, usd_per_hour=6.5), IDLE_6), (IDLE_6, od2)):
        fleet = [node("a", idle, ready_at=T0 - timedelta(minutes=30)), node("s", SPOT_2)]
        binds, launched, terminated, _ = _idle_pair([r, job("q", duration_hours=5.0)], fleet, (on_sale, SPOT_2),
                                                    max_spot_share=0.5, replace_on_demand_with_spot=True)
        assert binds["q"] == ("new-1",) and launched == [1] and terminated == ["a"]


def _took_idle_after_all(forecast=None) -> dict:
    # the world above: q's on-demand node new-1 is not bought, and q takes idle a
    r = job("r", state=JobState.RUNNING, node_ids=("s",), duration_hours=5.0)
    fleet = (node("a", IDLE_6, ready_at=T0 - timedelta(minutes=30)), node("s", SPOT_2))
    return dict(now=T0, queue=(r, job("q", duration_hours=5.0)), fleet=fleet, offers=(IDLE_6, SPOT_2),
                forecast=forecast, policy=policy(max_spot_share=0.5, replace_on_demand_with_spot=True,
                                                 max_headroom_gpus=4))


def test_the_node_not_bought_when_a_job_takes_an_idle_node_after_all_is_no_headroom():
    # The forecast wants 3 A100 GPUs; the fleet holds 2 (s, and a with q on it). new-1, not bought, holds
    # none: one GPU is bought ahead (on-demand: the spot share is at 50%).
    p = plan(**_took_idle_after_all(Forecast(demand=(DemandForecast("A100-80GB", 60, 2.4, 3.0),))))
    assert p.of_kind("bind")[0].node_ids == ("a",)
    assert [(l.offer.market, l.count, l.reason) for l in p.of_kind("launch")] == [
        (Market.ON_DEMAND, 1, Reason.FORECAST_HEADROOM)]


def test_a_job_placed_after_the_plan_does_not_land_on_the_node_not_bought():
    # After the plan, a new 1-GPU job finds a and s busy and new-1 gone: it buys a node (on-demand, the spot
    # share at 50%) and is bound to it, not to new-1, which no launch makes.
    fleet = PlannedFleet(**_took_idle_after_all())
    late = fleet.place(job("late", submitted=T0 + timedelta(seconds=5)))
    (launch,) = late.of_kind("launch")
    (bind,) = late.of_kind("bind")
    assert launch.offer.market is Market.ON_DEMAND and bind.node_ids == launch.node_names == ("new-2",)


# ----------------------------------------------------------------------------- min_distinct_offers and headroom

def test_min_distinct_offers_does_not_hold_back_on_demand_headroom():
    # 2 spot nodes on one offer, min_distinct_offers 3: a third spot node would have to go to a new offer,
    # but an on-demand node (headroom for a model sold on demand only) is no spot node at all
    a, b, c = (offer(name, price=8.0, zone=z) for name, z in (("a", "z1"), ("b", "z2"), ("c", "z3")))
    v100 = offer("v", gpus=8, model="V100", price=12.0, market=Market.ON_DEMAND)
    fleet, running = zip(*(_busy(f"n{i}", a) for i in range(2)))
    demand = Forecast(demand=(DemandForecast("V100", 60, 8.0, 8.0),))
    p = run(queue=running, fleet=fleet, offers=[a, b, c, v100], forecast=demand,
            pol=policy(min_distinct_offers=3, max_headroom_gpus=8))
    assert [(l.offer.instance_type.name, l.reason) for l in p.of_kind("launch")] == [("v", Reason.FORECAST_HEADROOM)]


# ----------------------------------------------------------------------------- the scale-up cooldown and deadlines

@pytest.mark.parametrize("slack_seconds, buys", [(603, False), (597, True)])
def test_within_the_scale_up_cooldown_a_deadline_job_buys_only_if_it_cannot_afford_the_wait(slack_seconds, buys):
    # a node launched just now, a 600 s cooldown; 1 h of work and a 6-minute restart: the job's slack
    # is the deadline minus 1 h 6 min, 3 s more or less than the 600 s the cooldown has left
    fresh = replace(node("n", A8_OD), launched_at_utc=T0)
    running = replace(job("run", gpus=8, vcpus=1, memory_gib=1), state=JobState.RUNNING, node_ids=("n",),
                      started_at_utc=T0)
    j = replace(job("j", gpus=8, vcpus=1, memory_gib=1), deadline_utc=T0 + timedelta(hours=1, minutes=6,
                                                                                    seconds=slack_seconds))
    p = run(queue=[running, j], fleet=[fresh], offers=[A8, A8_OD],
            pol=policy(scale_up_cooldown_seconds=600, restart_overhead_minutes=6.0))
    assert bool(p.of_kind("launch")) is buys
    if not buys:
        (u,) = p.unplaced
        assert u.reason is Reason.WAITING_FOR_CAPACITY and "the last launch was 0 s ago" in u.detail


@pytest.mark.parametrize("cooldown_seconds, restart_minutes, slack_seconds, buys", [
    # a 100 h cooldown: the deadline's hours and the cooldown left's hours are each read to the second
    # (a 3601 or 3599 s hour moves either by about 100 s)
    (360_000, 6.0, 60, False),
    (360_000, 6.0, -60, True),
    # a slack of exactly the cooldown left (2 h - 1 h of work - a 30-minute restart = 1800 s, all exact in
    # binary): the job can afford the wait, buying when the cooldown ends, so it waits
    (1800, 30.0, 0, False),
])
def test_a_deadline_job_buys_within_the_cooldown_only_if_its_slack_is_shorter_than_the_cooldown_left(
        cooldown_seconds, restart_minutes, slack_seconds, buys):
    fresh = replace(node("n", A8_OD), launched_at_utc=T0)  # the cooldown left is all of it
    running = replace(job("run", gpus=8, vcpus=1, memory_gib=1), state=JobState.RUNNING, node_ids=("n",),
                      started_at_utc=T0)
    deadline = T0 + timedelta(hours=1, minutes=restart_minutes, seconds=cooldown_seconds + slack_seconds)
    j = replace(job("j", gpus=8, vcpus=1, memory_gib=1), deadline_utc=deadline)
    p = run(queue=[running, j], fleet=[fresh], offers=[A8, A8_OD],
            pol=policy(scale_up_cooldown_seconds=cooldown_seconds, restart_overhead_minutes=restart_minutes))
    assert bool(p.of_kind("launch")) is buys
    assert [u.reason for u in p.unplaced] == ([] if buys else [Reason.WAITING_FOR_CAPACITY])
