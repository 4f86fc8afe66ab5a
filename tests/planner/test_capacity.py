"""The capacity index (planner/capacity.py) on small hand-computed fleets:
how many workers fit a slot, best fit, gangs within one domain, and the
bookkeeping of take, give_back, withdraw and restore."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fleetctl.model import Market
from fleetctl.planner.capacity import CapacityIndex, Slot, _bin, kind_of, market_of
from tests.builders import T0, job, offer

SPOT = ("A100-80GB", "spot")
OD = ("A100-80GB", "on_demand")


def slot(name, gpus=8, vcpus=96, memory_gib=1024.0, zone="z1", market=Market.SPOT, model="A100-80GB", **kw):
    return Slot.of(name, offer(f"g{gpus}", gpus=gpus, vcpus=vcpus, memory_gib=memory_gib, zone=zone, market=market,
                               model=model), new=False, **kw)


def index_of(*slots):
    idx = CapacityIndex()
    for s in slots:
        idx.add(s)
    return idx


# ----------------------------------------------------------------------------- Slot


def test_slot_of_starts_with_the_whole_machine_free_in_the_offers_domain_unless_told():
    s = slot("n1", gpus=4, vcpus=48, memory_gib=512.0, zone="z2")
    assert (s.free_gpus, s.free_vcpus, s.free_memory_gib, s.kind, s.domain) == (
        4, 48.0, 512.0, SPOT, ("aws", "r1", "z2"))
    assert isinstance(s.free_vcpus, float) and (s.new, s.schedulable) == (False, True)
    s = slot("n2", zone="", domain=("aws", "r1", "z3"), schedulable=False)
    assert (s.domain, s.schedulable) == (("aws", "r1", "z3"), False)


@pytest.mark.parametrize("free, per_worker, fit", [
    ((8, 96, 1024.0), (2, 8, 64.0), 4),  # GPUs decide: 8 // 2
    ((8, 20, 1024.0), (2, 8, 64.0), 2),  # vCPUs decide: 20 // 8
    ((8, 96, 130.0), (2, 8, 64.0), 2),  # memory decides: 130 // 64
    ((8, 96, 1024.0), (3, 8, 64.0), 2),  # 8 // 3
    ((8, 7, 1024.0), (2, 8, 64.0), 0),  # not one worker's vCPUs
    ((1, 96, 1024.0), (2, 8, 64.0), 0),  # not one worker's GPUs
    ((8, 96, 63.5), (2, 8, 64.0), 0),  # not one worker's memory
    ((8, 96, 1024.0), (0, 8, 64.0), 12),  # a CPU-only job: vCPUs decide, 96 // 8
    ((8, 96, 1024.0), (2, 0, 0.0), 4),  # a job asking for no vCPUs or memory: GPUs decide
    ((0, 96, 1024.0), (0, 0, 64.0), 16),  # memory alone: 1024 // 64
    ((8, 1.5, 1024.0), (1, 0.5, 64.0), 3),  # half a vCPU per worker: 1.5 // 0.5
    ((8, 96, 1.5), (1, 8, 0.5), 3),  # half a GiB per worker: 1.5 // 0.5
    ((0, 0, 0.0), (0, 0, 0.0), 1 << 30),  # a job asking for nothing fits without bound
    ((-2, 96, 1024.0), (2, 8, 64.0), 0),  # over-committed: none, never a negative count
    ((8, -8, 1024.0), (2, 8, 64.0), 0),
])
def test_workers_fit_is_the_smallest_count_over_every_dimension_asked_for(free, per_worker, fit):
    s = slot("n1")
    s.free_gpus, s.free_vcpus, s.free_memory_gib = free
    g, v, m = per_worker
    assert s.workers_fit(job("j", gpus=g, vcpus=v, memory_gib=m)) == fit


@pytest.mark.parametrize("x, b", [(0, -2), (0.0, -2), (-1.0, -2), (0.25, -1), (0.999, -1), (1, 0), (1.5, 0), (2, 1),
                                  (3.9, 1), (4, 2), (1023.0, 9), (1024, 10)])
def test_bin_is_floor_log2_and_below_one_minus_one_or_nothing_minus_two(x, b):
    assert _bin(x) == b


def test_kind_and_market():
    assert kind_of(offer(market=Market.ON_DEMAND)) == OD
    assert kind_of(offer("c", gpus=0, model=None)) == ("", "spot")
    assert market_of(OD) is Market.ON_DEMAND and market_of(SPOT) is Market.SPOT


# ----------------------------------------------------------------------------- best fit


def test_best_fit_takes_the_slot_left_with_the_fewest_gpus_in_the_order_of_kinds():
    s8, s4, s3 = slot("s8"), slot("s4", gpus=4), slot("s3", gpus=3)
    od2 = slot("od2", gpus=2, market=Market.ON_DEMAND)
    idx = index_of(s8, s4, s3, od2)
    two = job("j", gpus=2)
    assert idx.best_fit(two, (SPOT,), 1, T0) is s3  # 1 GPU left over, not 2 or 6
    assert idx.best_fit(two, (SPOT, OD), 1, T0) is od2  # none left over
    assert idx.best_fit(two, (OD, SPOT), 1, T0) is od2
    assert idx.best_fit(two, (SPOT,), 2, T0) is s4  # 2 workers: 4 GPUs
    assert idx.best_fit(two, (SPOT,), 4, T0) is s8
    assert idx.best_fit(two, (SPOT,), 5, T0) is None
    assert idx.best_fit(job("j", gpus=3), (OD, SPOT), 1, T0) is s3  # a later kind that leaves less wins
    assert idx.best_fit(job("j", gpus=1), (SPOT, OD), 1, T0) is od2  # spot leaves 2 over at best, on-demand 1
    s3b = slot("s3b", gpus=3)
    idx.add(s3b)
    assert idx.best_fit(two, (SPOT,), 1, T0) is s3  # equal fits: the slot filed first
    assert idx.best_fit(two, (SPOT,), 1, T0, exclude="s3") is s3b
    assert idx.best_fit(two, (("H100-80GB", "spot"),), 1, T0) is None  # a kind the fleet has none of
    s2 = slot("s2", gpus=2)
    idx.add(s2)
    assert idx.best_fit(two, (SPOT, OD), 1, T0) is s2  # none over in both kinds: the earlier kind's
    assert idx.best_fit(two, (OD, SPOT), 1, T0) is od2


def test_best_fit_keeps_the_earlier_kind_when_a_later_one_leaves_as_many_gpus_over():
    spot, od = slot("spot", gpus=4), slot("od", gpus=4, market=Market.ON_DEMAND)
    idx = index_of(spot, od)
    assert idx.best_fit(job("j", gpus=2), (SPOT, OD), 1, T0) is spot  # 2 over on both
    assert idx.best_fit(job("j", gpus=2), (OD, SPOT), 1, T0) is od
    idx.add(slot("od3", gpus=3, market=Market.ON_DEMAND))
    assert idx.best_fit(job("j", gpus=2), (SPOT, OD), 1, T0).name == "od3"  # 1 over beats 2


def test_best_fit_skips_slots_short_of_vcpus_or_memory():
    few_vcpus = slot("few-vcpus", gpus=2, vcpus=7)
    little_memory = slot("little-memory", gpus=2, memory_gib=31.5)
    exact = slot("exact", gpus=4, vcpus=8, memory_gib=32.0)
    idx = index_of(few_vcpus, little_memory, exact)
    j = job("j", gpus=1, vcpus=4, memory_gib=16)
    assert idx.best_fit(j, (SPOT,), 2, T0) is exact  # 8 vCPUs and 32 GiB exactly, 2 GPUs over
    assert idx.best_fit(j, (SPOT,), 1, T0) is few_vcpus  # one worker fits both small ones
    assert idx.best_fit(job("j", gpus=1, vcpus=5, memory_gib=16), (SPOT,), 1, T0) is few_vcpus
    assert idx.best_fit(job("j", gpus=1, vcpus=8, memory_gib=16), (SPOT,), 1, T0) is little_memory
    assert idx.best_fit(job("j", gpus=1, vcpus=4, memory_gib=32), (SPOT,), 1, T0) is few_vcpus
    assert idx.best_fit(job("j", gpus=1, vcpus=8, memory_gib=32), (SPOT,), 1, T0) is exact
    assert idx.best_fit(job("j", gpus=1, vcpus=8.5, memory_gib=32), (SPOT,), 1, T0) is None


def test_best_fit_within_one_vcpu_and_memory_bin():
    # 12 vCPUs and 12 GiB free, a need of 9: the same bin (8 to 15), so the slot is looked at and fits
    s = slot("s", gpus=1, vcpus=12, memory_gib=12.0)
    idx = index_of(s)
    assert idx.best_fit(job("j", gpus=1, vcpus=9, memory_gib=9), (SPOT,), 1, T0) is s
    assert idx.best_fit(job("j", gpus=1, vcpus=13, memory_gib=9), (SPOT,), 1, T0) is None
    assert idx.best_fit(job("j", gpus=1, vcpus=9, memory_gib=13), (SPOT,), 1, T0) is None
    half = slot("half", gpus=1, vcpus=0, memory_gib=0.5)  # below one: bin -1; nothing: bin -2
    idx = index_of(half)
    assert idx.best_fit(job("j", gpus=1, vcpus=0, memory_gib=0.5), (SPOT,), 1, T0) is half
    assert idx.best_fit(job("j", gpus=1, vcpus=0.5, memory_gib=0.5), (SPOT,), 1, T0) is None


def test_best_fit_uses_a_reserved_slot_only_for_work_ending_by_the_reservation():
    reserved = slot("reserved", gpus=2)
    reserved.reserved_until = T0 + timedelta(hours=2)
    roomy = slot("roomy")
    idx = index_of(reserved, roomy)
    j = job("j", gpus=2)
    assert idx.best_fit(j, (SPOT,), 1, T0 + timedelta(hours=1)) is reserved
    assert idx.best_fit(j, (SPOT,), 1, T0 + timedelta(hours=2)) is reserved  # ends as the gang starts
    assert idx.best_fit(j, (SPOT,), 1, T0 + timedelta(hours=2, seconds=1)) is roomy


# ----------------------------------------------------------------------------- gangs


def names(placed):
    return None if placed is None else [(s.name, w) for s, w in placed]


def test_a_gang_takes_the_fewest_nodes_of_one_domain_roomiest_first():
    # z1: 6 + 4 + 2 free; z2: 4 + 4 free; z3: 8 + 2 free (in GPUs, 2 per worker)
    idx = index_of(slot("a6", gpus=6, zone="z1"), slot("a4", gpus=4, zone="z1"), slot("a2", gpus=2, zone="z1"),
                   slot("b4", gpus=4, zone="z2"), slot("b4x", gpus=4, zone="z2"),
                   slot("c8", gpus=8, zone="z3"), slot("c2", gpus=2, zone="z3"))
    gang = job("g", workers=5, gpus=2)  # 10 GPUs
    # z1: 3 + 2 workers on two nodes, no GPU left over on them; z3: 4 + 1 on two, none over; z2 holds 4 only
    assert names(idx.gang_in_domain(gang, (SPOT,), T0)) == [("a6", 3), ("a4", 2)]
    gang = job("g", workers=4, gpus=2)  # 8 GPUs: z3 on one node beats two in z1 (2 over) or z2 (none over)
    assert names(idx.gang_in_domain(gang, (SPOT,), T0)) == [("c8", 4)]
    gang = job("g", workers=6, gpus=2)  # 12 GPUs: z1 on three nodes (z3 has 10)
    assert names(idx.gang_in_domain(gang, (SPOT,), T0)) == [("a6", 3), ("a4", 2), ("a2", 1)]
    assert idx.gang_in_domain(job("g", workers=7, gpus=2), (SPOT,), T0) is None


def test_a_gang_spans_kinds_of_one_domain_and_skips_slots_short_of_vcpus_memory_or_time():
    od = slot("od", gpus=4, zone="z1", market=Market.ON_DEMAND)
    spot = slot("spot", gpus=4, zone="z1")
    idx = index_of(od, spot, slot("thin", gpus=8, vcpus=4, zone="z1"), slot("small", gpus=8, memory_gib=16, zone="z1"))
    gang = job("g", workers=4, gpus=2, vcpus=8, memory_gib=64)
    assert names(idx.gang_in_domain(gang, (SPOT, OD), T0)) == [("spot", 2), ("od", 2)]
    assert idx.gang_in_domain(gang, (SPOT,), T0) is None
    spot.reserved_until = T0 + timedelta(hours=1)
    idx.reservations = 1
    assert names(idx.gang_in_domain(gang, (SPOT, OD), T0 + timedelta(hours=1))) == [("spot", 2), ("od", 2)]
    assert idx.gang_in_domain(gang, (SPOT, OD), T0 + timedelta(hours=1, seconds=1)) is None


def test_a_gang_of_cpu_only_workers_takes_nodes_with_no_gpus_free():
    # CPU nodes (no GPUs), and GPU nodes whose GPUs are all taken: 0 GPUs free. Until 2026-11-28 the search
    # stopped above 0 free GPUs, so a CPU-only gang never found room on existing nodes and bought new ones.
    cpu = [Slot.of(f"c{i}", offer("c64", gpus=0, model=None, vcpus=64, memory_gib=256.0), new=False) for i in (1, 2)]
    idx = index_of(*cpu)
    gang = job("cpu", workers=2, gpus=0, vcpus=64, memory_gib=16)
    assert names(idx.gang_in_domain(gang, (("", "spot"),), T0)) == [("c1", 1), ("c2", 1)]
    idx = index_of(slot("full", gpus=8, zone="z1"), slot("other", gpus=8, zone="z1"))
    for s in idx.slots.values():
        idx.take(s, job("x", gpus=8, vcpus=0, memory_gib=0))
    assert names(idx.gang_in_domain(gang, (SPOT,), T0)) == [("full", 1), ("other", 1)]


def test_a_gang_with_the_same_count_and_waste_in_two_domains_takes_the_first_by_name():
    idx = index_of(slot("b1", zone="z2"), slot("b2", zone="z2"), slot("a1", zone="z1"), slot("a2", zone="z1"))
    assert names(idx.gang_in_domain(job("g", workers=2, gpus=8), (SPOT,), T0)) == [("a1", 1), ("a2", 1)]


def test_a_gang_keeps_looking_past_a_domain_with_waste_for_one_without():
    # z1: two 8-GPU nodes; z2: two 6-GPU nodes. 2 workers of 6: both need two nodes; z2 leaves nothing
    idx = index_of(slot("a1", zone="z1"), slot("a2", zone="z1"), slot("b1", gpus=6, zone="z2"),
                   slot("b2", gpus=6, zone="z2"))
    assert names(idx.gang_in_domain(job("g", workers=2, gpus=6), (SPOT,), T0)) == [("b1", 1), ("b2", 1)]
    # ... and stops at the first domain with the fewest nodes a node of the biggest kind allows and no waste
    idx = index_of(slot("a1", gpus=6, zone="z1"), slot("a2", gpus=6, zone="z1"), slot("b1", gpus=6, zone="z2"),
                   slot("b2", gpus=6, zone="z2"), slot("c", zone="z3"))
    assert names(idx.gang_in_domain(job("g", workers=2, gpus=6), (SPOT,), T0)) == [("a1", 1), ("a2", 1)]


# ----------------------------------------------------------------------------- bookkeeping


def filed(idx):
    """Where the index files each slot: by kind, free GPUs and bins; by domain and free GPUs; free per domain."""
    by_kind = {(k, free, b, n) for k, buckets in idx.by_kind.items() for free, groups in buckets.items()
               for b, bucket in groups.items() for n in bucket}
    by_domain = {(d[2], free, n) for (d, _), by_free in idx.by_domain_kind.items() for free, ss in by_free.items()
                 for n in ss}
    return by_kind, by_domain, {d[2]: g for (d, _), g in idx.free_by_domain_kind.items()}


def test_take_and_give_back_move_the_slot_between_buckets_and_count_its_workers():
    s, t = slot("s", gpus=8, vcpus=96, memory_gib=1024.0), slot("t", gpus=4, vcpus=48, memory_gib=512.0)
    idx = index_of(s, t)
    assert filed(idx) == ({(SPOT, 8, (6, 10), "s"), (SPOT, 4, (5, 9), "t")}, {("z1", 8, "s"), ("z1", 4, "t")},
                          {"z1": 12})
    assert (idx.max_gpus_of_kind, idx.gpu_memory_of_kind) == ({SPOT: 8}, {SPOT: 80.0})
    j = job("j", workers=3, gpus=2, vcpus=10, memory_gib=100)
    generation = idx.generation
    idx.take(s, j, 2)
    idx.take(s, j)
    assert (s.free_gpus, s.free_vcpus, s.free_memory_gib, s.jobs, s.version) == (2, 66.0, 724.0, {"j": 3}, 2)
    assert filed(idx) == ({(SPOT, 2, (6, 9), "s"), (SPOT, 4, (5, 9), "t")}, {("z1", 2, "s"), ("z1", 4, "t")},
                          {"z1": 6})
    assert idx.generation == generation  # taking capacity never grows it
    assert idx.give_back(s, job("other")) == 0 and idx.generation == generation and s.version == 2
    assert idx.give_back(s, j) == 3
    assert (s.free_gpus, s.free_vcpus, s.free_memory_gib, s.jobs, s.version) == (8, 96.0, 1024.0, {}, 3)
    assert filed(idx) == ({(SPOT, 8, (6, 10), "s"), (SPOT, 4, (5, 9), "t")}, {("z1", 8, "s"), ("z1", 4, "t")},
                          {"z1": 12})
    assert idx.generation == generation + 1
    assert idx.give_back(s, j) == 0  # nothing left of it


def test_withdraw_and_restore_stop_and_resume_offering_a_slot():
    s, t = slot("s", zone="z1"), slot("t", gpus=4, vcpus=48, memory_gib=512.0, zone="z2")
    idx = index_of(s, t)
    idx.withdraw(s)
    idx.withdraw(s)  # twice: still once
    assert not s.schedulable
    assert filed(idx) == ({(SPOT, 4, (5, 9), "t")}, {("z2", 4, "t")}, {"z1": 0, "z2": 4})
    assert idx.best_fit(job("j", gpus=2), (SPOT,), 1, T0) is t
    j = job("j", gpus=2)
    idx.take(s, j)  # charged while withdrawn: not filed anywhere
    assert s.free_gpus == 6 and filed(idx)[0] == {(SPOT, 4, (5, 9), "t")}
    idx.restore(s)
    idx.restore(s)
    assert s.schedulable
    assert filed(idx) == ({(SPOT, 6, (6, 9), "s"), (SPOT, 4, (5, 9), "t")}, {("z1", 6, "s"), ("z2", 4, "t")},
                          {"z1": 6, "z2": 4})
    idx.withdraw(s)
    assert idx.give_back(s, j) == 1 and s.free_gpus == 8 and not s.schedulable
    assert filed(idx)[1] == {("z2", 4, "t")}
    unfiled = slot("u", schedulable=False)
    idx.add(unfiled)
    assert "u" in idx.slots and ("z1", 8, "u") not in filed(idx)[1]
    assert idx.max_gpus_of_kind == {SPOT: 8} and idx.kinds() == (SPOT,)
    idx.add(slot("od", gpus=2, market=Market.ON_DEMAND, model="L4"))
    assert idx.kinds() == (SPOT, ("L4", "on_demand"))
    assert idx.max_gpus_of_kind == {SPOT: 8, ("L4", "on_demand"): 2}
    idx.add(Slot.of("cpu", offer("c8", gpus=0, model=None), new=False))
    assert idx.max_gpus_of_kind[("", "spot")] == 0 and idx.gpu_memory_of_kind[("", "spot")] == 0.0


def test_a_gang_that_found_no_room_is_remembered_until_capacity_grows():
    idx = index_of(slot("a", gpus=4, zone="z1"), slot("b", gpus=4, zone="z2"))
    assert idx.gang_in_domain(job("g", workers=2, gpus=4), (SPOT,), T0) is None  # 4 + 4 in two zones
    assert idx._no_gang_fit == {((SPOT,), None): [(2, 4, 4, 16)]}
    assert idx.gang_in_domain(job("g", workers=3, gpus=4), (SPOT,), T0) is None  # bigger: known not to fit
    assert idx.gang_in_domain(job("g", workers=2, gpus=2), (SPOT,), T0) is not None  # smaller: looked for
    generation = idx.generation
    idx.add(slot("c", gpus=4, zone="z1"))
    assert idx.generation == generation + 1 and idx._no_gang_fit == {}
    assert names(idx.gang_in_domain(job("g", workers=2, gpus=4), (SPOT,), T0)) == [("a", 1), ("c", 1)]


def test_a_gang_finds_a_slot_restored_after_it_found_no_room():
    # Until 2026-11-28 restore did not forget the gangs that found no room while the slot was withdrawn
    a, c = slot("a", gpus=4, zone="z1"), slot("c", gpus=4, zone="z1")
    idx = index_of(a, c)
    idx.withdraw(c)
    gang = job("g", workers=2, gpus=4)
    assert idx.gang_in_domain(gang, (SPOT,), T0) is None
    idx.restore(c)
    assert names(idx.gang_in_domain(gang, (SPOT,), T0)) == [("a", 1), ("c", 1)]


def test_a_gang_looks_at_16_domains_with_room_and_a_bigger_one_is_not_refused_for_it():
    # z01..z16: 8 one-GPU nodes each, no room for a 4-GPU worker; z17: two free 8-GPU nodes
    slots = [slot(f"z{z:02d}-{i}", gpus=1, vcpus=12, memory_gib=128.0, zone=f"z{z:02d}") for z in range(1, 17)
             for i in range(8)]
    idx = index_of(*slots, slot("z17-0", zone="z17"), slot("z17-1", zone="z17"))
    small, big = job("small", workers=2, gpus=4), job("big", workers=2, gpus=8)
    assert idx.gang_in_domain(small, (SPOT,), T0) is None  # z17 is the 17th domain with 8 GPUs free
    # Until 2026-11-28 the failed search above was remembered as proof that no bigger gang fits, though it
    # never looked at z17, the one domain with the 16 GPUs the big gang needs
    assert names(idx.gang_in_domain(big, (SPOT,), T0)) == [("z17-0", 1), ("z17-1", 1)]
    assert names(idx.gang_in_domain(job("two", workers=2, gpus=1), (SPOT,), T0)) == [("z01-0", 1), ("z01-1", 1)]
    for s in slots[:8]:  # z01 full: z17 is now among the first 16 domains with room
        idx.take(s, job("x", gpus=1, vcpus=0, memory_gib=0))
    assert names(idx.gang_in_domain(small, (SPOT,), T0)) == [("z17-0", 2)]  # the same gang, once z01 is full


def test_a_domain_one_gpu_short_of_the_gang_is_not_among_the_16_it_looks_at():
    # z01..z16: 7 one-GPU nodes each (7 free, the gang needs 8); z17: two free 4-GPU nodes
    slots = [slot(f"z{z:02d}-{i}", gpus=1, vcpus=12, memory_gib=128.0, zone=f"z{z:02d}") for z in range(1, 17)
             for i in range(7)]
    idx = index_of(*slots, slot("z17-0", gpus=4, zone="z17"), slot("z17-1", gpus=4, zone="z17"))
    assert names(idx.gang_in_domain(job("g", workers=2, gpus=4), (SPOT,), T0)) == [("z17-0", 1), ("z17-1", 1)]


def test_a_gang_stops_looking_only_at_the_fewest_nodes_of_the_biggest_kind():
    # z1: two 4-GPU on-demand nodes (two nodes, none over); z2: one 8-GPU spot node (one node)
    idx = index_of(slot("a1", gpus=4, zone="z1", market=Market.ON_DEMAND),
                   slot("a2", gpus=4, zone="z1", market=Market.ON_DEMAND), slot("b", zone="z2"))
    assert names(idx.gang_in_domain(job("g", workers=2, gpus=4), (OD, SPOT), T0)) == [("b", 2)]


def test_a_gang_looks_at_the_roomiest_slots_of_every_kind_in_a_domain():
    idx = index_of(slot("od", gpus=2, market=Market.ON_DEMAND), slot("spot"))
    assert names(idx.gang_in_domain(job("g", workers=2, gpus=4), (OD, SPOT), T0)) == [("spot", 2)]


def test_a_cpu_only_gang_stops_looking_only_at_one_node():
    cpu = [Slot.of(name, offer("c", gpus=0, model=None, vcpus=vcpus, memory_gib=256.0, zone=zone), new=False)
           for name, vcpus, zone in (("a1", 64, "z1"), ("a2", 64, "z1"), ("b", 128, "z2"))]
    idx = index_of(*cpu)
    assert names(idx.gang_in_domain(job("g", workers=2, gpus=0, vcpus=64, memory_gib=16), (("", "spot"),), T0)) == [
        ("b", 2)]


def test_a_gang_looks_at_every_free_gpu_count_down_to_a_workers_and_takes_exact_vcpus():
    idx = index_of(slot("s5", gpus=5, vcpus=8, memory_gib=64.0), slot("s4", gpus=4, vcpus=8, memory_gib=64.0))
    assert names(idx.gang_in_domain(job("g", workers=2, gpus=4, vcpus=8, memory_gib=64), (SPOT,), T0)) == [
        ("s5", 1), ("s4", 1)]


def test_a_gang_placed_stops_taking_slots():
    idx = index_of(slot("od", market=Market.ON_DEMAND), slot("spot"))
    assert names(idx.gang_in_domain(job("g", workers=2, gpus=4), (OD, SPOT), T0)) == [("od", 2)]


def test_a_gang_keeps_looking_past_a_domain_with_one_gpu_over_for_one_with_none():
    idx = index_of(slot("a7", gpus=7, zone="z1"), slot("b6", gpus=6, zone="z2"))
    assert names(idx.gang_in_domain(job("g", workers=2, gpus=3), (SPOT,), T0)) == [("b6", 2)]


def test_best_fit_looks_at_every_vcpu_and_memory_bin_of_a_free_gpu_count():
    # Both have 2 GPUs free, in different vCPU bins; the first is reserved before the job would end
    reserved = slot("reserved", gpus=2, vcpus=20)
    reserved.reserved_until = T0
    roomy, big = slot("roomy", gpus=2, vcpus=40), slot("big", gpus=4)
    idx = index_of(reserved, roomy, big)
    assert idx.best_fit(job("j", gpus=1, vcpus=16), (SPOT,), 1, T0 + timedelta(hours=1)) is roomy
