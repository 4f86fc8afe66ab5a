"""Free capacity of the fleet, indexed for fast best-fit placement.

A ``Slot`` is the planner's working copy of one node (existing, or bought in
this pass). The ``CapacityIndex`` files slots by *kind* (GPU model x market)
and by free GPU count, so placing a job looks at a handful of buckets instead
of every node, and by placement domain for gangs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from fleetctl.model import Job, Market, Offer

Kind = tuple[str, str]  # (gpu model or "", market)

# Domains a gang looks at, at most (those with enough free GPUs in total, in a
# fixed order, so it stays deterministic): bounds the work per gang in a large
# fleet. A gang that fits in none of them buys new capacity instead.
_GANG_DOMAINS = 16
Domain = tuple[str, str, str]  # (provider, region, zone)


def kind_of(offer: Offer) -> Kind:
    return (offer.instance_type.gpu_model or "", offer.market.value)


@dataclass(slots=True)
class Slot:
    name: str
    offer: Offer
    new: bool
    schedulable: bool
    free_gpus: int
    free_vcpus: float
    free_memory_gib: float
    jobs: dict[str, int] = field(default_factory=dict)  # job id -> workers here
    reserved_until: datetime | None = None  # a waiting gang may start here then (backfill)
    reserved_for: str | None = None
    touched: bool = False  # received work in this pass
    kind: Kind = ("", "")
    domain: Domain = ("", "", "")
    bin: tuple[int, int] = (0, 0)  # where the index filed it: (vCPU bin, memory bin)
    # Bumped whenever ``jobs`` or the free room change: what a pass keeps about a slot (its victims) is
    # valid while the version it was worked out at is the slot's.
    version: int = 0

    @classmethod
    def of(cls, name: str, offer: Offer, *, new: bool, schedulable: bool = True,
           domain: Domain | None = None) -> "Slot":
        """``domain``: the node's own (``Node.placement_domain``), else the offer's."""
        it = offer.instance_type
        return cls(name, offer, new, schedulable, it.gpu_count, float(it.vcpus), it.memory_gib,
                   kind=kind_of(offer), domain=offer.placement_domain if domain is None else domain)

    def workers_fit(self, job: Job) -> int:
        """How many workers of ``job`` fit in the free capacity."""
        n = 1 << 30
        v, m, g = job.vcpus_per_worker, job.memory_gib_per_worker, job.gpus_per_worker
        if v > 0:
            n = int(self.free_vcpus // v)
        if m > 0:
            k = int(self.free_memory_gib // m)
            if k < n:
                n = k
        if g > 0:
            k = self.free_gpus // g
            if k < n:
                n = k
        return n if n > 0 else 0


class CapacityIndex:
    """Slots by kind and free GPUs, and by domain. Slots are filed in the
    order they are added, which the planner keeps deterministic."""

    def __init__(self) -> None:
        # kind -> free GPUs -> (vCPU bin, memory bin) -> slots. The bins keep a
        # best-fit lookup from scanning nodes whose GPUs are free but whose
        # vCPUs or memory are not (fragmentation), which made it quadratic.
        self.by_kind: dict[Kind, dict[int, dict[tuple[int, int], dict[str, Slot]]]] = {}
        # (domain, kind) -> free GPUs -> slots, for gangs (roomiest first).
        self.by_domain_kind: dict[tuple[Domain, Kind], dict[int, dict[str, Slot]]] = {}
        self.domains_of_kind: dict[Kind, set[Domain]] = {}
        self.free_by_domain_kind: dict[tuple[Domain, Kind], int] = {}
        self.slots: dict[str, Slot] = {}
        # Gang shapes known not to fit anywhere; capacity only shrinks between
        # changes of ``generation`` (bumped whenever capacity is added or returned).
        self.generation = 0
        self._no_gang_fit: dict[tuple, list[tuple]] = {}
        self.reservations = 0  # slots reserved by waiting gangs (then the end time matters)
        self.max_gpus_of_kind: dict[Kind, int] = {}
        self.gpu_memory_of_kind: dict[Kind, float] = {}

    def _grew(self) -> None:
        self.generation += 1
        self._no_gang_fit.clear()

    def add(self, slot: Slot) -> None:
        self.slots[slot.name] = slot
        self._grew()
        it = slot.offer.instance_type
        self.max_gpus_of_kind[slot.kind] = max(self.max_gpus_of_kind.get(slot.kind, 0), it.gpu_count)
        self.gpu_memory_of_kind[slot.kind] = it.gpu_memory_gib
        if slot.schedulable:
            self._file(slot)

    def _file(self, slot: Slot) -> None:
        slot.bin = (_bin(slot.free_vcpus), _bin(slot.free_memory_gib))
        self.by_kind.setdefault(slot.kind, {}).setdefault(slot.free_gpus, {}).setdefault(slot.bin, {})[slot.name] = slot
        key = (slot.domain, slot.kind)
        self.by_domain_kind.setdefault(key, {}).setdefault(slot.free_gpus, {})[slot.name] = slot
        self.domains_of_kind.setdefault(slot.kind, set()).add(slot.domain)
        self.free_by_domain_kind[key] = self.free_by_domain_kind.get(key, 0) + slot.free_gpus

    def _unfile(self, slot: Slot) -> None:
        buckets = self.by_kind[slot.kind]
        groups = buckets[slot.free_gpus]
        bucket = groups[slot.bin]
        del bucket[slot.name]
        if not bucket:
            del groups[slot.bin]
            if not groups:
                del buckets[slot.free_gpus]
        key = (slot.domain, slot.kind)
        by_free = self.by_domain_kind[key]
        del by_free[slot.free_gpus][slot.name]
        if not by_free[slot.free_gpus]:
            del by_free[slot.free_gpus]
        self.free_by_domain_kind[key] -= slot.free_gpus

    def withdraw(self, slot: Slot) -> None:
        """Stop offering a slot's capacity (a node being drained)."""
        if slot.schedulable:
            self._unfile(slot)
            slot.schedulable = False

    def restore(self, slot: Slot) -> None:
        """Offer a withdrawn slot's capacity again."""
        if not slot.schedulable:
            slot.schedulable = True
            self._grew()  # a gang that found no room while it was withdrawn may find it now
            self._file(slot)

    def take(self, slot: Slot, job: Job, workers: int = 1) -> None:
        """Charge ``workers`` workers of ``job`` to ``slot``."""
        filed = slot.schedulable
        if filed:
            self._unfile(slot)
        slot.free_gpus -= job.gpus_per_worker * workers
        slot.free_vcpus -= job.vcpus_per_worker * workers
        slot.free_memory_gib -= job.memory_gib_per_worker * workers
        slot.jobs[job.job_id] = slot.jobs.get(job.job_id, 0) + workers
        slot.version += 1
        if filed:
            self._file(slot)

    def give_back(self, slot: Slot, job: Job) -> int:
        """Release every worker of ``job`` on ``slot``; returns how many."""
        workers = slot.jobs.pop(job.job_id, 0)
        if not workers:
            return 0
        self._grew()
        filed = slot.schedulable
        if filed:
            self._unfile(slot)
        slot.free_gpus += job.gpus_per_worker * workers
        slot.free_vcpus += job.vcpus_per_worker * workers
        slot.free_memory_gib += job.memory_gib_per_worker * workers
        slot.version += 1
        if filed:
            self._file(slot)
        return workers

    # ------------------------------------------------------------------ queries

    def best_fit(self, job: Job, kinds: tuple[Kind, ...], workers: int, ends_at: datetime, exclude: str | None = None) -> Slot | None:
        """The slot that holds ``workers`` workers of ``job`` with the fewest GPUs
        left over (keeping large blocks free), or None."""
        need = job.gpus_per_worker * workers
        need_v = job.vcpus_per_worker * workers
        need_m = job.memory_gib_per_worker * workers
        need_vb, need_mb = _bin(need_v), _bin(need_m)
        best: Slot | None = None
        best_left = 1 << 30
        by_kind, max_gpus = self.by_kind, self.max_gpus_of_kind
        for kind in kinds:
            buckets = by_kind.get(kind)
            if not buckets:
                continue
            top = need + best_left - 1
            cap = max_gpus[kind]
            if cap < top:
                top = cap
            for free in range(need, top + 1):
                groups = buckets.get(free)
                if groups is None:
                    continue
                found = False
                for (vb, mb), bucket in groups.items():
                    if vb < need_vb or mb < need_mb:
                        continue  # every slot here has less than 2**(bin+1) <= the need
                    for slot in bucket.values():
                        if (
                            slot.free_vcpus >= need_v
                            and slot.free_memory_gib >= need_m
                            and (slot.reserved_until is None or ends_at <= slot.reserved_until)
                            and slot.name != exclude
                        ):
                            best, best_left, found = slot, free - need, True
                            break
                    if found:
                        break
                if found:
                    break  # larger buckets of this kind only leave more over
            if best_left == 0:
                break
        return best

    def gang_in_domain(self, job: Job, kinds: tuple[Kind, ...], ends_at: datetime) -> list[tuple[Slot, int]] | None:
        """Place a gang on several slots of one domain: the domain whose chosen
        slots leave the fewest GPUs unused; within it, the roomiest slots first
        (fewest nodes). Returns [(slot, workers)] or None."""
        need_gpus = job.gpus_per_worker * job.workers
        # A gang at least as big in every dimension as one that found no room
        # finds none either (capacity has not grown since).
        where = (kinds, ends_at if self.reservations else None)
        shape = (job.workers, job.gpus_per_worker, job.vcpus_per_worker, job.memory_gib_per_worker)
        failed = self._no_gang_fit.get(where, ())
        if any(all(a >= b for a, b in zip(shape, f)) for f in failed):
            return None
        best: list[tuple[Slot, int]] | None = None
        best_key: tuple | None = None
        free = self.free_by_domain_kind
        sums: dict[Domain, int] = {}
        for k in kinds:
            for d in self.domains_of_kind.get(k, ()):
                sums[d] = sums.get(d, 0) + free.get((d, k), 0)
        g = job.gpus_per_worker
        biggest = max((self.max_gpus_of_kind.get(k, 0) for k in kinds), default=0)
        fewest = -(-need_gpus // biggest) if g and biggest else 1
        examined = 0
        cut = False  # stopped at _GANG_DOMAINS with domains left unseen
        for domain in sorted(d for d, total in sums.items() if total >= need_gpus):
            if examined >= _GANG_DOMAINS:
                cut = True
                break
            # Roomiest slots first (fewest nodes), looking only as far as needed.
            by_free = [self.by_domain_kind.get((domain, k), {}) for k in kinds]
            top = max((max(b) for b in by_free if b), default=0)
            chosen: list[tuple[Slot, int]] = []
            left = job.workers
            examined += 1  # a domain looked at counts, found or not: the work per gang stays bounded
            v, m = job.vcpus_per_worker, job.memory_gib_per_worker
            for free in range(top, g - 1, -1):  # down to a worker's GPUs: to 0 for CPU-only workers
                for b in by_free:
                    for slot in b.get(free, {}).values():
                        if slot.free_vcpus < v or slot.free_memory_gib < m:
                            continue
                        if slot.reserved_until is not None and ends_at > slot.reserved_until:
                            continue
                        fit = slot.workers_fit(job)
                        if fit:
                            take = min(fit, left)
                            chosen.append((slot, take))
                            left -= take
                            if left == 0:
                                break
                    if left == 0:
                        break
                if left == 0:
                    break
            if left:
                continue
            waste = sum(s.free_gpus - job.gpus_per_worker * w for s, w in chosen)
            key = (len(chosen), waste, domain)
            if best_key is None or key < best_key:
                best, best_key = chosen, key
            if key[:2] == (fewest, 0):
                break  # nothing can beat the fewest nodes with no waste
        # Only a search that saw every domain with room proves that no bigger gang fits: one cut at
        # _GANG_DOMAINS left domains unseen, and a bigger gang (fewer domains with room for it), or the same
        # one once capacity shrank, looks at some of those.
        if best is None and not cut:
            known = self._no_gang_fit.setdefault(where, [])
            if len(known) < 64:
                known.append(shape)
        return best

    def kinds(self) -> tuple[Kind, ...]:
        return tuple(sorted(self.by_kind))


def _bin(x: float) -> int:
    """floor(log2(x)) for x >= 1, else -1 (0 < x < 1) or -2 (nothing)."""
    if x >= 1:
        return int(x).bit_length() - 1
    return -1 if x > 0 else -2


def market_of(kind: Kind) -> Market:
    return Market(kind[1])
