"""Consolidation (docs/planner.md, step 8): which under-used nodes are emptied,
what a migration costs and saves, where the jobs go, and the disruption budget."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from fleetctl.model import DemandForecast, Forecast, JobState, Market, NodeState, Reason
from fleetctl.planner import plan
from tests.builders import T0, job, node, offer, policy


def run(queue=(), fleet=(), offers=(), pol=None, forecast=None, now=T0):
    return plan(now=now, queue=tuple(queue), fleet=tuple(fleet), offers=tuple(offers), forecast=forecast,
                policy=pol or policy())


def bound(j, node_id, started=T0 - timedelta(hours=1), checkpoint=None, checkpointable=True):
    return replace(j, state=JobState.RUNNING, node_ids=(node_id,), started_at_utc=started,
                   last_checkpoint_utc=checkpoint, checkpointable=checkpointable)


def moves(p):
    return [(m.job_id, m.from_node_ids, m.to_node_ids) for m in p.of_kind("migrate")]


CPU = offer("c8", gpus=0, model=None, vcpus=8, memory_gib=32, price=2.0, market=Market.ON_DEMAND)


@pytest.mark.parametrize("checkpoint_hours_ago, migrates, said", [
    # $2 x 4/8 vCPUs x (5 min since the checkpoint + 5 min restart) = $0.17, paid back in 0.08 h
    (5 / 60, True, "frees light ($2.00/h); migration costs $0.17, pays back in 0.1 h"),
    # $2 x 4/8 x (30 h + 5 min) = $30.08, paid back in 15.04 h, past the 2 h the policy allows
    (30.0, False, "consolidation of light declined: migration pays back in 15.0 h, policy allows 2 h"),
], ids=["fresh-checkpoint", "30-hours-of-work"])
def test_a_cpu_only_jobs_migration_costs_its_vcpus_share_of_the_node(checkpoint_hours_ago, migrates, said):
    # Two 8-vCPU CPU nodes: "light" with a checkpointable 4-vCPU job, "busy" with one that cannot checkpoint.
    # Before, the migration was priced at the job's GPUs over the node's (none: $0.00), so a job 30 hours past
    # its checkpoint was moved, losing them, to save $2/h.
    mover = bound(job("mover", gpus=0, vcpus=4, memory_gib=8), "light", started=T0 - timedelta(hours=31),
                  checkpoint=T0 - timedelta(hours=checkpoint_hours_ago))
    stay = bound(job("stay", gpus=0, vcpus=4, memory_gib=8), "busy", checkpointable=False)
    p = run(queue=[mover, stay], fleet=[node("light", CPU), node("busy", CPU)],
            pol=policy(consolidation_payback_hours=2.0))
    if migrates:
        assert moves(p) == [("mover", ("light",), ("busy",))] and p.of_kind("migrate")[0].detail == said
    else:
        assert not p.of_kind("migrate") and not p.of_kind("terminate")
        assert said in p.explanation("mover").considered


@pytest.mark.parametrize("duration_hours, checkpointed_hours, migrates", [
    (5.0, 0.0, False),  # 5 h to go: past the reservation
    (5.0, 4.5, True),  # resumes from its checkpoint with 30 min to go (plus a 5-minute restart)
    (5.0, 5.0 - 118 / 60, False),  # 1 h 58 min to go ends at 10:58, but the restart takes it to 11:03
    (1.0, 0.0, True),
], ids=["5-hours-left", "half-an-hour-left", "past-it-with-the-restart", "1-hour-job"])
def test_a_job_moves_into_a_node_reserved_for_a_waiting_gang_only_if_it_ends_before(duration_hours, checkpointed_hours,
                                                                                   migrates):
    # A 2 x 8-GPU gang waits (no budget) for n1 and n2, whose jobs (5 of 8 GPUs, not checkpointable) end at
    # T0 + 2 h: both are reserved for it until then. The mover (2 GPUs of the under-used 4-GPU $5 node "light",
    # checkpointed 5 minutes ago) may use their room only if it ends before (docs/planner.md, steps 6 and 8).
    # Before, a job's whole duration counted, not the work left after its checkpoint: with 30 minutes to go
    # it stayed.
    fleet = [node("n1"), node("n2"), node("light", offer("g4", gpus=4, price=5.0))]
    running = [bound(job(f"r{i}", gpus=5, duration_hours=3.0), f"n{i}", checkpointable=False) for i in (1, 2)]
    gang = job("gang", workers=2, gpus=8, submitted=T0 - timedelta(hours=1))
    mover = replace(bound(job("mover", gpus=2, duration_hours=duration_hours), "light",
                          started=T0 - timedelta(minutes=10), checkpoint=T0 - timedelta(minutes=5)),
                    checkpointed_work_hours=checkpointed_hours)
    p = run(queue=[*running, gang, mover], fleet=fleet, offers=[offer(price=50.0)], pol=policy(max_usd_per_hour=30.0))
    assert "waits for running work to end (~2026-11-02 11:00 UTC)" in p.unplaced[0].detail
    assert moves(p) == ([("mover", ("light",), ("n1",))] if migrates else [])


def test_the_best_fit_comes_before_the_cost_of_the_target():
    # The mover (2 GPUs of "light", $10/h) fits an idle 2-GPU $2 node exactly and a busy node with 4 GPUs free:
    # the best fit is the idle node, though the busy one would cost nothing more (docs/planner.md, step 8:
    # among targets that leave as few GPUs over, the cheapest). $10 x 2/8 x 10 min = $0.42 over $8/h saved.
    mover = bound(job("mover", gpus=2), "light", checkpoint=T0 - timedelta(minutes=5))
    busy = bound(job("busy", gpus=4), "half", checkpointable=False)
    fleet = [node("light", offer(price=10.0)), node("small", offer("g2", gpus=2, price=2.0)),
             node("half", offer(price=10.0))]
    p = run(queue=[mover, busy], fleet=fleet)
    assert moves(p) == [("mover", ("light",), ("small",))]
    assert p.of_kind("migrate")[0].detail == (
        "frees light ($10.00/h) into idle small ($2.00/h); migration costs $0.42, pays back in 0.1 h")


@pytest.mark.parametrize("spot_price, target", [(5.9, "od"), (5.8, "spot")])
def test_an_idle_spot_target_costs_its_price_plus_the_jobs_expected_loss_there(spot_price, target):
    # Two idle 2-GPU nodes the mover (2 GPUs of an under-used $10/h on-demand node) fills exactly: on-demand at
    # $6, spot at spot_price. On spot the job's expected loss is 0.05/h x (half its 60-minute checkpoint interval
    # + 5 min restart) x the node's price: $0.17 at $5.90 ($6.07 in all, dearer than $6), $0.17 at $5.80 ($5.97).
    mover = replace(bound(job("mover", gpus=2, duration_hours=5.0), "light", checkpoint=T0 - timedelta(minutes=5)),
                    checkpoint_interval_minutes=60.0)
    fleet = [node("light", offer(price=10.0, market=Market.ON_DEMAND)),
             node("od", offer("g2", gpus=2, price=6.0, market=Market.ON_DEMAND)),
             node("spot", offer("g2", gpus=2, price=spot_price))]
    p = run(queue=[mover], fleet=fleet, pol=policy(idle_timeout_minutes=120.0))
    assert moves(p) == [("mover", ("light",), (target,))]


def test_a_job_may_move_into_a_dearer_node_that_stays_busy():
    # "dear" ($30) has 6 of 8 GPUs busy: not under-used, so it is not emptied next, and the mover may go there
    mover = bound(job("mover", gpus=2), "light", checkpoint=T0 - timedelta(minutes=5))
    busy = bound(job("busy", gpus=6), "dear", checkpointable=False)
    p = run(queue=[mover, busy], fleet=[node("light", offer(price=10.0)), node("dear", offer(price=30.0))])
    assert moves(p) == [("mover", ("light",), ("dear",))]


def test_room_on_a_busy_node_costs_nothing_beside_an_idle_node_of_equal_fit():
    # The mover fills both the 2 free GPUs of "busy" ($8, 4 GPUs) and the idle 2-GPU "idle" ($0.50): the busy
    # node is paid for anyway, the idle one would idle out. It goes to the busy node.
    mover = bound(job("mover", gpus=2), "light", checkpoint=T0 - timedelta(minutes=5))
    other = bound(job("other", gpus=2), "busy", checkpointable=False)
    fleet = [node("light", offer(price=10.0, market=Market.ON_DEMAND)),
             node("busy", offer("g4", gpus=4, price=8.0, market=Market.ON_DEMAND)),
             node("idle", offer("g2", gpus=2, price=0.5, market=Market.ON_DEMAND))]
    p = run(queue=[mover, other], fleet=fleet, pol=policy(idle_timeout_minutes=120.0))
    assert moves(p) == [("mover", ("light",), ("busy",))]


# ----------------------------------------------------------------------------- when consolidation is off or limited

def test_a_payback_horizon_of_zero_turns_consolidation_off_even_for_a_free_move():
    # no restart overhead and a checkpoint this instant: the move costs $0.00, and would pay back in 0 h
    mover = bound(job("mover", gpus=2), "light", checkpoint=T0)
    busy = bound(job("busy", gpus=4), "half", checkpointable=False)
    fleet = [node("light", offer(price=10.0)), node("half", offer(price=10.0))]
    pol = policy(restart_overhead_minutes=0.0)
    assert moves(run(queue=[mover, busy], fleet=fleet, pol=pol)) == [("mover", ("light",), ("half",))]
    p = run(queue=[mover, busy], fleet=fleet, pol=replace(pol, consolidation_payback_hours=0.0))
    assert not p.of_kind("migrate") and not p.of_kind("terminate")


def test_the_forecasts_idle_gpus_do_not_hold_a_node_while_purchases_wait_for_the_scale_up_cooldown():
    # As test_headroom.py's test_consolidation_keeps_a_node_whose_idle_gpus_the_forecast_wants: a p90 of 4 with
    # 2 GPUs busy wants 2 idle, and emptying "a" leaves none. But "b" was launched 3 minutes ago, within a
    # 10-minute scale-up cooldown: no headroom is bought in this pass, so none is kept either, and r moves.
    g2 = offer("g2", gpus=2, price=2.0, vcpus=16, memory_gib=128)
    r = bound(job("r"), "a", checkpoint=T0 - timedelta(minutes=5))
    rb = bound(job("rb"), "b", checkpointable=False)
    fleet = [node("a", of=g2), node("b", of=g2, ready_at=T0 - timedelta(minutes=2))]
    forecast = Forecast(demand=(DemandForecast("A100-80GB", 60, 2.4, 4.0),))
    p = run(queue=[r, rb], fleet=fleet, offers=[g2], forecast=forecast,
            pol=policy(max_headroom_gpus=8, scale_up_cooldown_seconds=600))
    assert moves(p) == [("r", ("a",), ("b",))] and [t.node_id for t in p.of_kind("terminate")] == ["a"]


def test_a_node_still_launching_is_not_emptied():
    # "a-up" is launching with w (2 of 8 GPUs, checkpointable) bound to it: not a ready, under-used node
    # (docs/planner.md, step 8), though w would fit "half"'s free GPUs
    w = replace(job("w", gpus=2), state=JobState.BOUND, node_ids=("a-up",), checkpointable=True)
    busy = bound(job("busy", gpus=4), "half", checkpointable=False)
    up = replace(node("a-up", offer(price=10.0)), state=NodeState.LAUNCHING, ready_at_utc=None)
    p = run(queue=[w, busy], fleet=[up, node("half", offer(price=10.0))])
    assert not p.of_kind("migrate") and not p.of_kind("terminate")
    # the ready nodes after it are still looked at: "light"'s mover goes to "half"
    mover = bound(job("mover", gpus=2), "light", checkpoint=T0 - timedelta(minutes=5))
    p = run(queue=[w, busy, mover], fleet=[up, node("half", offer(price=10.0)), node("light", offer(price=10.0))])
    assert moves(p) == [("mover", ("light",), ("half",))]


def test_without_headroom_the_forecast_holds_no_node():
    # scaling.max_headroom_gpus 0: a p90 of 4 A100 GPUs keeps nothing idle. The mover (2 GPUs, any model) leaves
    # the only A100 node for a busy H100 node with room, and "light" goes, though no A100 GPU is left idle.
    mover = bound(job("mover", gpus=2), "light", checkpoint=T0 - timedelta(minutes=5))
    busy = bound(job("busy", gpus=4, models=("H100-80GB",)), "h100", checkpointable=False)
    fleet = [node("light", offer(price=10.0)), node("h100", offer(price=10.0, model="H100-80GB"))]
    forecast = Forecast(demand=(DemandForecast("A100-80GB", 60, 2.4, 4.0),))
    p = run(queue=[mover, busy], fleet=fleet, forecast=forecast, pol=policy(max_headroom_gpus=0))
    assert moves(p) == [("mover", ("light",), ("h100",))] and [t.node_id for t in p.of_kind("terminate")] == ["light"]


@pytest.mark.parametrize("back_to_spot, cooldown_seconds", [(False, 0), (True, 600)],
                         ids=["no-move-back-to-spot", "scale-up-cooldown"])
def test_a_node_is_left_to_the_move_back_to_spot_only_when_that_move_can_run(back_to_spot, cooldown_seconds):
    # One node may be emptied (the disruption budget). "light" ($10, on-demand) is the dearest: its one
    # spot-eligible job m1 goes into the idle $2 on-demand node. Without markets.replace_on_demand_with_spot, or
    # within the scale-up cooldown (which stops the move back to spot), nothing else would take m1 to spot, so
    # "light" is emptied now, not left for that move while "light2"'s m2 (which may not use spot) takes the
    # budget.
    m1 = bound(job("m1", gpus=2), "light", checkpoint=T0 - timedelta(minutes=5))
    m2 = bound(job("m2", gpus=2, spot=False), "light2", checkpoint=T0 - timedelta(minutes=5))
    od = Market.ON_DEMAND
    fleet = [node("light", offer(price=10.0, market=od)), node("light2", offer(price=9.0, market=od)),
             node("idle", offer("g2", gpus=2, price=2.0, market=od), ready_at=T0 - timedelta(minutes=2))]
    pol = policy(replace_on_demand_with_spot=back_to_spot, scale_up_cooldown_seconds=cooldown_seconds,
                 idle_timeout_minutes=120.0)
    p = run(queue=[m1, m2], fleet=fleet, offers=[offer("g2", gpus=2, price=0.5)], pol=pol)
    assert moves(p) == [("m1", ("light",), ("idle",))] and [t.node_id for t in p.of_kind("terminate")] == ["light"]


def test_each_node_emptied_counts_against_the_idle_gpus_the_forecast_wants():
    # Two under-used 4-GPU A100 nodes, a and b (one 1-GPU checkpointable job each), and c (8 GPUs, 6 busy):
    # 8 of 16 GPUs idle. A p90 of 12 wants 4 idle. Emptying a (its job into c) leaves 4; emptying b as well
    # would leave 0, so b stays, though the disruption budget allows two nodes.
    g4 = offer("g4", gpus=4, price=4.0)
    queue = [bound(job("ra"), "a", checkpoint=T0 - timedelta(minutes=5)),
             bound(job("rb"), "b", checkpoint=T0 - timedelta(minutes=5)),
             bound(job("rc", gpus=6), "c", checkpointable=False)]
    fleet = [node("a", g4), node("b", g4), node("c", offer(price=8.0))]
    forecast = Forecast(demand=(DemandForecast("A100-80GB", 60, 7.2, 12.0),))
    p = run(queue=queue, fleet=fleet, offers=[g4], forecast=forecast,
            pol=policy(max_headroom_gpus=8, disruption_budget_nodes=2))
    assert moves(p) == [("ra", ("a",), ("c",))] and [t.node_id for t in p.of_kind("terminate")] == ["a"]
    assert p.explanation("rb").considered == ("consolidation of b declined: the forecast wants 4 A100-80GB GPU(s) "
                                              "idle (scaling.max_headroom_gpus), and emptying it leaves 0",)
    # a p90 of 13 wants 5 idle: emptying either node would leave 4
    forecast = Forecast(demand=(DemandForecast("A100-80GB", 60, 7.8, 13.0),))
    p = run(queue=queue, fleet=fleet, offers=[g4], forecast=forecast,
            pol=policy(max_headroom_gpus=8, disruption_budget_nodes=2))
    assert not p.of_kind("migrate")
    assert p.explanation("ra").considered == ("consolidation of a declined: the forecast wants 5 A100-80GB GPU(s) "
                                              "idle (scaling.max_headroom_gpus), and emptying it leaves 4",)


def test_a_node_reserved_for_a_waiting_gang_is_not_emptied():
    # The gang (2 x 8 GPUs, no budget to buy) waits for n1 and n2, whose jobs end at T0 + 2 h. n2's job can
    # checkpoint and would fit "spare"'s free GPUs; n2 is kept for the gang all the same.
    running = [bound(job("r1", gpus=5, duration_hours=3.0), "n1", checkpointable=False),
               bound(job("r2", gpus=4, duration_hours=3.0), "n2", checkpoint=T0 - timedelta(minutes=5)),
               bound(job("rs", gpus=4, duration_hours=20.0), "spare", checkpointable=False)]
    gang = job("gang", workers=2, gpus=8, submitted=T0 - timedelta(hours=1))
    p = run(queue=[*running, gang], fleet=[node("n1"), node("n2"), node("spare")], offers=[offer(price=50.0)],
            pol=policy(max_usd_per_hour=30.0))
    assert "waits for running work to end (~2026-11-02 11:00 UTC)" in p.unplaced[0].detail
    assert not p.of_kind("migrate") and not p.of_kind("terminate")


def test_a_node_emptied_by_consolidation_is_refilled_past_a_gangs_new_nodes_of_its_offer():
    # As test_planner_rules.py's case_a_node_emptied_by_consolidation_takes_the_job_a_node_like_it_was_bought_for:
    # r0 moves from n0 onto n1's free GPU, and q's new g2 node is not bought, q taking n0. A gang (2 x 2 GPUs)
    # bought two g2 nodes first (new-1, new-2): they are a gang's, passed over, not the end of the search.
    g2 = offer("g2", gpus=2, price=4.0)
    r0 = bound(job("r0"), "n0", checkpoint=T0 - timedelta(minutes=5))
    r1 = bound(job("r1"), "n1", checkpointable=False)
    gang = job("gang", workers=2, gpus=2)
    p = run(queue=[r0, r1, gang, job("q", gpus=2, submitted=T0 + timedelta(seconds=1))],
            fleet=[node("n0", g2), node("n1", g2)], offers=[g2])
    assert [(l.offer.key, l.node_names) for l in p.of_kind("launch")] == [(g2.key, ("new-1", "new-2"))]
    assert moves(p) == [("r0", ("n0",), ("n1",))] and not p.of_kind("terminate")
    assert {b.job_id: b.node_ids for b in p.of_kind("bind")} == {"gang": ("new-1", "new-2"), "q": ("n0",)}
    (bind,) = [b for b in p.of_kind("bind") if b.job_id == "q"]
    assert (bind.reason, bind.detail) == (Reason.FITS_FREE_CAPACITY, "1 x 2 GPU on 1 g2 (spot) in aws r1/z1")
    # a node of another offer is no refill: q needs 4 GPUs, buys a g4 node, and n0 goes
    g4 = offer("g4", gpus=4, price=8.0)
    p = run(queue=[r0, r1, gang, job("q", gpus=4, submitted=T0 + timedelta(seconds=1))],
            fleet=[node("n0", g2), node("n1", g2)], offers=[g2, g4])
    assert sorted((l.offer.key, l.count) for l in p.of_kind("launch")) == sorted([(g2.key, 2), (g4.key, 1)])
    assert [t.node_id for t in p.of_kind("terminate")] == ["n0"]


def test_a_node_with_a_job_that_cannot_checkpoint_is_not_emptied():
    # "light" holds the checkpointable mover and "pinned", which cannot checkpoint: neither moves
    mover = bound(job("mover", gpus=1), "light", checkpoint=T0 - timedelta(minutes=5))
    pinned = bound(job("pinned", gpus=1), "light", checkpointable=False)
    busy = bound(job("busy", gpus=4), "half", checkpointable=False)
    p = run(queue=[mover, pinned, busy], fleet=[node("light", offer(price=10.0)), node("half", offer(price=10.0))])
    assert not p.of_kind("migrate") and not p.of_kind("terminate")


H100 = "H100-80GB"


@pytest.mark.parametrize("why", ["moved-recently", "payback", "headroom", "idle-target-saves-too-little"])
def test_a_node_declined_does_not_end_the_search(why):
    # "dear" ($20) is looked at first and declined (its job d was moved 20 minutes ago; or d is 30 hours past its
    # checkpoint; or the forecast wants 2 of its 6 idle H100 GPUs kept idle; or d's move into an idle $19 node
    # saves $1/h, and its $0.83 pays back in 0.8 h, past 0.5 h). "light" comes next, and its mover goes to
    # "half" ($0.42 paid back by $10/h in 0.04 h).
    d = bound(job("d", gpus=2), "dear", checkpoint=T0 - timedelta(minutes=5))
    dear, forecast, pol, more = offer(price=20.0), None, policy(), []
    if why == "moved-recently":
        d = replace(d, first_started_at_utc=T0 - timedelta(hours=5), started_at_utc=T0 - timedelta(minutes=20))
    elif why == "payback":
        d = replace(d, started_at_utc=T0 - timedelta(hours=31), last_checkpoint_utc=T0 - timedelta(hours=30))
    elif why == "headroom":
        dear = offer(price=20.0, model=H100)
        forecast = Forecast(demand=(DemandForecast(H100, 60, 2.4, 4.0),))
        pol = policy(max_headroom_gpus=8)
    else:
        more = [node("i19", offer("g2", gpus=2, price=19.0))]
        pol = policy(consolidation_payback_hours=0.5, idle_timeout_minutes=120.0)
    mover = bound(job("mover", gpus=2, models=("A100-80GB",)), "light", checkpoint=T0 - timedelta(minutes=5))
    busy = bound(job("busy", gpus=4), "half", checkpointable=False)
    fleet = [node("dear", dear), node("light", offer(price=10.0)), node("half", offer(price=10.0)), *more]
    p = run(queue=[d, mover, busy], fleet=fleet, forecast=forecast, pol=pol)
    assert moves(p) == [("mover", ("light",), ("half",))]
    assert len(p.explanation("d").considered) == 1  # one line saying why, and no move tried after it
    if why == "headroom":  # 6 idle H100 GPUs less dear's 8: none left (not fewer than none)
        assert p.explanation("d").considered == (
            "consolidation of dear declined: the forecast wants 2 H100-80GB GPU(s) idle (scaling.max_headroom_gpus), "
            "and emptying it leaves 0",)


def test_a_move_that_pays_back_exactly_within_the_horizon_is_made():
    # $10 x 2/8 GPUs x 8 h of work since the checkpoint (no restart overhead) = $20, paid back by $10/h in 2 h
    mover = bound(job("mover", gpus=2), "light", started=T0 - timedelta(hours=9), checkpoint=T0 - timedelta(hours=8))
    busy = bound(job("busy", gpus=4), "half", checkpointable=False)
    p = run(queue=[mover, busy], fleet=[node("light", offer(price=10.0)), node("half", offer(price=10.0))],
            pol=policy(restart_overhead_minutes=0.0, consolidation_payback_hours=2.0))
    assert moves(p) == [("mover", ("light",), ("half",))]
    assert p.of_kind("migrate")[0].detail == "frees light ($10.00/h); migration costs $20.00, pays back in 2.0 h"


@pytest.mark.parametrize("price", [6.0, 5.0])
def test_jobs_that_would_keep_idle_nodes_as_dear_together_as_their_node_stay(price):
    # m1 and m2 (1 GPU each) fit two idle 1-GPU nodes exactly; each is cheaper than "light" ($10), but kept
    # together they cost $12 (or exactly $10): the move saves nothing
    ms = [bound(job(f"m{i}", gpus=1), "light", checkpoint=T0 - timedelta(minutes=5)) for i in (1, 2)]
    g1 = offer("g1", gpus=1, price=price, vcpus=12, memory_gib=128)
    p = run(queue=ms, fleet=[node("light", offer(price=10.0)), node("i1", g1), node("i2", g1)],
            pol=policy(idle_timeout_minutes=120.0))
    assert not p.of_kind("migrate") and not p.of_kind("terminate")
    assert p.explanation("m1").considered == (
        f"consolidation of light declined: the move into idle i1, i2 (${2 * price:.2f}/h) saves nothing",)


def test_a_node_whose_job_has_nowhere_to_go_is_not_said_to_be_declined():
    mover = bound(job("mover", gpus=2), "light", checkpoint=T0 - timedelta(minutes=5))
    p = run(queue=[mover], fleet=[node("light", offer(price=10.0))])
    assert not p.actions and p.explanation("mover") is None


def test_a_migration_paid_back_past_the_horizon_says_in_how_long():
    # $10 x 2/8 GPUs x 10 h since the checkpoint (no restart overhead) = $25, paid back by $10/h in 2.5 h
    mover = bound(job("mover", gpus=2), "light", started=T0 - timedelta(hours=11), checkpoint=T0 - timedelta(hours=10))
    busy = bound(job("busy", gpus=4), "half", checkpointable=False)
    p = run(queue=[mover, busy], fleet=[node("light", offer(price=10.0)), node("half", offer(price=10.0))],
            pol=policy(restart_overhead_minutes=0.0, consolidation_payback_hours=2.0))
    assert not p.of_kind("migrate")
    assert p.explanation("mover").considered == (
        "consolidation of light declined: migration pays back in 2.5 h, policy allows 2 h",)


def test_the_forecasts_idle_gpus_hold_a_node_under_a_headroom_cap_of_one():
    # two 2-GPU A100 nodes, one GPU busy on each; a p90 of 4 wants min(1, 4 - 2) = 1 GPU idle: emptying "a"
    # would leave none, so r stays
    g2 = offer("g2", gpus=2, price=2.0, vcpus=16, memory_gib=128)
    r = bound(job("r"), "a", checkpoint=T0 - timedelta(minutes=5))
    rb = bound(job("rb"), "b", checkpointable=False)
    forecast = Forecast(demand=(DemandForecast("A100-80GB", 60, 2.4, 4.0),))
    p = run(queue=[r, rb], fleet=[node("a", g2), node("b", g2)], offers=[g2], forecast=forecast,
            pol=policy(max_headroom_gpus=1))
    assert not p.of_kind("migrate") and not p.of_kind("terminate")
    assert p.explanation("r").considered == ("consolidation of a declined: the forecast wants 1 A100-80GB GPU(s) "
                                             "idle (scaling.max_headroom_gpus), and emptying it leaves 0",)


@pytest.mark.parametrize("case", ["two-jobs", "spot-node", "into-idle-spot", "no-spot-job", "deferred"])
def test_only_a_node_the_move_back_to_spot_could_take_is_left_to_it(case):
    # With markets.replace_on_demand_with_spot, consolidation leaves to the move back to spot an on-demand node
    # whose one spot-eligible job would go into an idle on-demand node. "light" is none of these (two jobs; or a
    # spot node; or its job goes into an idle spot node; or may not use spot): it is emptied at once, before
    # "light2" (m2 may not use spot; it would go to "half"), which the disruption budget of one node then leaves.
    # When it is one ("deferred"), the search goes on: light2 is emptied, and the budget is spent (no spot is
    # sold, so the move back to spot takes nothing, and light stays).
    od, spot = Market.ON_DEMAND, Market.SPOT
    jobs = [bound(job("m1", gpus=2), "light", checkpoint=T0 - timedelta(minutes=5))]
    light, idle = offer(price=10.0, market=od), offer("g2", gpus=2, price=2.0, market=od)
    if case == "two-jobs":
        jobs = [bound(job(f"m1{x}", gpus=1), "light", checkpoint=T0 - timedelta(minutes=5)) for x in "ab"]
    elif case == "spot-node":
        light = offer(price=10.0, market=spot)
    elif case == "into-idle-spot":
        idle = offer("g2", gpus=2, price=2.0, market=spot)
    elif case == "no-spot-job":
        jobs = [bound(job("m1", gpus=2, spot=False), "light", checkpoint=T0 - timedelta(minutes=5))]
    m2 = bound(job("m2", gpus=2, spot=False), "light2", checkpoint=T0 - timedelta(minutes=5))
    busy = bound(job("busy", gpus=4), "half", checkpointable=False)
    fleet = [node("light", light), node("light2", offer(price=9.0, market=od)), node("idle", idle),
             node("half", offer(price=9.0, market=od))]
    p = run(queue=[*jobs, m2, busy], fleet=fleet,
            pol=policy(replace_on_demand_with_spot=True, idle_timeout_minutes=120.0))
    emptied = "light2" if case == "deferred" else "light"
    assert {m.from_node_ids for m in p.of_kind("migrate")} == {(emptied,)}
    assert [t.node_id for t in p.of_kind("terminate")] == [emptied]


@pytest.mark.parametrize("gpus, migrates", [(4, True), (5, False), (6, False)])
def test_only_a_node_at_most_half_busy_is_emptied(gpus, migrates):
    # consolidation_max_gpu_utilisation 0.5: 4 of 8 GPUs busy is under-used, 5 or 6 are not; "roomy" (16 GPUs,
    # 8 busy) could take the job either way
    j = bound(job("j", gpus=gpus), "heavy", checkpoint=T0 - timedelta(minutes=5))
    busy = bound(job("busy", gpus=8), "roomy", checkpointable=False)
    p = run(queue=[j, busy], fleet=[node("heavy", offer(price=10.0)), node("roomy", offer("g16", gpus=16, price=10.0))])
    assert moves(p) == ([("j", ("heavy",), ("roomy",))] if migrates else [])


def test_a_gangs_worker_is_not_moved_alone():
    # a checkpointable gang with a worker on each of two under-used nodes: moving either worker alone would
    # split it from the other; neither moves, though "half" has room
    gang = replace(job("gang", workers=2, gpus=2), state=JobState.RUNNING, node_ids=("g1", "g2"),
                   started_at_utc=T0 - timedelta(hours=1), last_checkpoint_utc=T0 - timedelta(minutes=5),
                   checkpointable=True)
    busy = bound(job("busy", gpus=4), "half", checkpointable=False)
    p = run(queue=[gang, busy], fleet=[node("g1", offer(price=10.0)), node("g2", offer(price=10.0)),
                                       node("half", offer(price=10.0))])
    assert not p.of_kind("migrate") and not p.of_kind("terminate")


def test_a_job_that_started_recently_but_was_never_moved_may_move():
    # first started 20 minutes ago and running since: no move of it has yet to pay back
    mover = replace(bound(job("mover", gpus=2), "light", started=T0 - timedelta(minutes=20),
                          checkpoint=T0 - timedelta(minutes=5)), first_started_at_utc=T0 - timedelta(minutes=20))
    busy = bound(job("busy", gpus=4), "half", checkpointable=False)
    p = run(queue=[mover, busy], fleet=[node("light", offer(price=10.0)), node("half", offer(price=10.0))])
    assert moves(p) == [("mover", ("light",), ("half",))]


def test_a_node_of_one_dollar_an_hour_is_emptied_too():
    # $1 x 2/8 GPUs x 10 min = $0.04, paid back by $1/h in 0.04 h
    mover = bound(job("mover", gpus=2), "light", checkpoint=T0 - timedelta(minutes=5))
    busy = bound(job("busy", gpus=4), "half", checkpointable=False)
    p = run(queue=[mover, busy], fleet=[node("light", offer(price=1.0)), node("half", offer(price=1.0))])
    assert moves(p) == [("mover", ("light",), ("half",))]
    assert p.of_kind("migrate")[0].detail == "frees light ($1.00/h); migration costs $0.04, pays back in 0.0 h"


def test_a_job_moved_by_the_last_plan_and_not_yet_restarted_is_not_moved_again():
    # bound to "light" by a migration (first started 5 h ago, not started again yet): its move has not paid back
    mover = replace(job("mover", gpus=2), state=JobState.BOUND, node_ids=("light",), checkpointable=True,
                    first_started_at_utc=T0 - timedelta(hours=5), last_checkpoint_utc=T0 - timedelta(minutes=5))
    busy = bound(job("busy", gpus=4), "half", checkpointable=False)
    p = run(queue=[mover, busy], fleet=[node("light", offer(price=10.0)), node("half", offer(price=10.0))])
    assert not p.of_kind("migrate")
    assert p.explanation("mover").considered == (
        "consolidation of light waits: mover was moved or restarted within the last 2 h (consolidation_payback_hours)",)


def test_a_job_restarted_exactly_the_payback_horizon_ago_may_move():
    mover = replace(bound(job("mover", gpus=2), "light", started=T0 - timedelta(hours=2),
                          checkpoint=T0 - timedelta(minutes=5)), first_started_at_utc=T0 - timedelta(hours=5))
    busy = bound(job("busy", gpus=4), "half", checkpointable=False)
    p = run(queue=[mover, busy], fleet=[node("light", offer(price=10.0)), node("half", offer(price=10.0))],
            pol=policy(consolidation_payback_hours=2.0))
    assert moves(p) == [("mover", ("light",), ("half",))]


def test_the_dearest_under_used_node_is_emptied_first():
    # one node may be emptied: "b-dear" ($12) before "a-cheap" ($10), whatever their names
    jobs = [bound(job(f"m-{n}", gpus=2), n, checkpoint=T0 - timedelta(minutes=5)) for n in ("a-cheap", "b-dear")]
    busy = bound(job("busy", gpus=2), "half", checkpointable=False)
    fleet = [node("a-cheap", offer(price=10.0)), node("b-dear", offer(price=12.0)), node("half", offer(price=10.0))]
    p = run(queue=[*jobs, busy], fleet=fleet)
    assert [t.node_id for t in p.of_kind("terminate")] == ["b-dear"]
