"""The capacity index (planner/capacity.py) on small hand-computed fleets."""

from __future__ import annotations

from datetime import timedelta

from fleetctl.model import Market
from fleetctl.planner.capacity import CapacityIndex, Slot
from tests.builders import T0, job, offer

SPOT = ("A100-80GB", "spot")


def slot(name, gpus=8, vcpus=96, memory_gib=1024.0, zone="z1", market=Market.SPOT, model="A100-80GB", **kw):
    return Slot.of(name, offer(f"g{gpus}", gpus=gpus, vcpus=vcpus, memory_gib=memory_gib, zone=zone, market=market,
                               model=model), new=False, **kw)


def index_of(*slots):
    idx = CapacityIndex()
    for s in slots:
        idx.add(s)
    return idx


# ----------------------------------------------------------------------------- gangs


def names(placed):
    return None if placed is None else [(s.name, w) for s, w in placed]


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
