"""Compare two policies as a reviewer of a policy change needs: what each
setting becomes, and which offers of the market each admits. Pure: the
caller reads the files and the catalog; this module compares and renders.

**Settings** are compared after validation (``fleetctl.policy.PolicySpec``,
defaults filled in): writing out a default changes nothing, and changing the
value a default stood for is a change. One :class:`SettingChange` per changed
leaf, in the file's own terms (``teams.ml-research.guaranteed_gpus``), with
where NEW writes it.

* Teams, priority classes, tags and regions of the infrastructure are
  mappings keyed by name, so they are compared by name: reordering them is
  no change, and a changed team reads ``teams.ml-research.weight``.
* Every list in a policy is a set by meaning (allow-lists, subnet and
  security group ids; ``fleetctl.policy.to_core`` sorts the allow-lists, and
  the clouds take the ids as sets), so list items are named by their value
  (``gpu_models[T4]``), never by an index that shifts when a line above
  moves. Design choice: a list that was or becomes empty is shown whole
  (``~ providers: [] -> ["aws"]``), because an empty allow-list means "any":
  ``+ providers[aws]`` would read as a widening where the policy narrows.
* An optional section that is absent (``infrastructure``, its ``gcp`` and
  ``azure``) compares as no leaves: adding one is one ``+`` line per leaf.

**Market effect**: the offers each policy admits, by the planner's own filter
(:func:`fleetctl.planner.policy_allows`: providers, regions, GPU models, a
price), and the difference summed per provider and GPU model, per market.
Only what that filter sees counts: ``markets.max_spot_share: 0`` stops the
planner buying spot, but is a setting change here, not a market one.

**Queue effect** (optional): a job queue planned by the planner itself
(:func:`fleetctl.planner.plan`) on an empty fleet under each policy, as
``fleetctl plan`` plans it on a fresh sandbox: the cost in USD per hour under
each, and the jobs one policy places and the other leaves queued, with why.

The JSON form (:func:`diff_to_document`) carries ``format_version``
(:data:`FORMAT_VERSION`); its shape is in ``docs/policy-diff.md``.
"""

from __future__ import annotations

import enum
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from fleetctl.codec import unplaced_to_dict
from fleetctl.model import Job, Market, Offer, Unplaced
from fleetctl.planner import plan, policy_allows
from fleetctl.policy import READ_AT_START, PolicySpec, to_core
from fleetctl.render import counted
from fleetctl.yamlerrors import Document, FieldPath, Position, format_path

__all__ = [
    "FORMAT_VERSION",
    "ChangeKind",
    "MarketChange",
    "Member",
    "PolicyDiff",
    "QueueEffect",
    "SettingChange",
    "diff_policies",
    "diff_to_document",
    "render_text",
]

FORMAT_VERSION = 1


class ChangeKind(str, enum.Enum):
    ADD = "add"
    REMOVE = "remove"
    CHANGE = "change"

    @property
    def mark(self) -> str:
        """terraform's marker: ``+`` add, ``-`` remove, ``~`` change."""
        return {"add": "+", "remove": "-", "change": "~"}[self.value]


@dataclass(frozen=True, slots=True)
class Member:
    """An item of a list, named by its value (``gpu_models[T4]``)."""

    value: str


#: A setting's path: mapping keys and field names, and list items by value.
SettingPath = tuple[str | Member, ...]


class _Absent:
    """A value one side does not have (a team only NEW lists); not ``None``,
    which is a value (``budget.max_gpus: null``)."""

    def __repr__(self) -> str:
        return "ABSENT"


_ABSENT: Any = _Absent()


@dataclass(frozen=True, slots=True)
class SettingChange:
    """One changed leaf. ``old`` is meaningless for ADD, ``new`` for REMOVE.

    ``at`` is where NEW writes the value, or for a value NEW does not write
    (a default, a removed item) where its nearest written parent is (``budget:``
    for a default ``budget.max_gpus``); ``None`` when NEW writes no part of the
    path. ``written`` says which."""

    kind: ChangeKind
    path: SettingPath
    old: Any
    new: Any
    at: Position | None
    written: bool

    @property
    def field_path(self) -> str:
        """``teams.ml-research.weight``, ``gpu_models[T4]``."""
        out = ""
        run: list[str] = []
        for elem in self.path:
            if isinstance(elem, Member):
                # Members are ids, names and regions the loader checked: no brackets or spaces to quote.
                out = _joined(out, format_path(run)) + f"[{elem.value}]"
                run = []
            else:
                run.append(elem)
        return _joined(out, format_path(run))


def _joined(head: str, tail: str) -> str:
    if not head or not tail:
        return head + tail
    return head + ("" if tail.startswith("[") else ".") + tail


@dataclass(frozen=True, slots=True)
class MarketChange:
    """Offers of one provider and GPU model that NEW admits and OLD does not
    (ADD), or the reverse (REMOVE), counted per market; ``old_admitted`` and
    ``new_admitted`` count every offer of that provider and GPU model each
    policy admits, so ``46 -> 0`` says none is left."""

    kind: ChangeKind
    provider: str
    gpu_model: str | None  # None: offers without a GPU
    by_market: tuple[tuple[Market, int], ...]  # spot first, markets with no offer left out
    old_admitted: int
    new_admitted: int

    @property
    def offers(self) -> int:
        return sum(n for _, n in self.by_market)


@dataclass(frozen=True, slots=True)
class QueueEffect:
    """A queue (``jobs`` of them, from ``file``) planned on an empty fleet
    under each policy: what the plan buys costs ``old_usd_per_hour`` and
    ``new_usd_per_hour``; ``old_unplaced`` and ``new_unplaced`` are the jobs
    each plan leaves queued, with the planner's reasons."""

    file: str
    jobs: int
    old_usd_per_hour: float
    new_usd_per_hour: float
    old_unplaced: tuple[Unplaced, ...]
    new_unplaced: tuple[Unplaced, ...]

    @property
    def newly_unplaced(self) -> tuple[Unplaced, ...]:
        """Jobs OLD places and NEW leaves queued, with NEW's reason."""
        before = {u.job_id for u in self.old_unplaced}
        return tuple(u for u in self.new_unplaced if u.job_id not in before)

    @property
    def newly_placed(self) -> tuple[Unplaced, ...]:
        """Jobs OLD leaves queued and NEW places, with OLD's reason."""
        after = {u.job_id for u in self.new_unplaced}
        return tuple(u for u in self.old_unplaced if u.job_id not in after)


@dataclass(frozen=True, slots=True)
class PolicyDiff:
    old_file: str
    new_file: str
    settings: tuple[SettingChange, ...]
    market: tuple[MarketChange, ...]
    catalog_offers: int
    old_admitted: int
    new_admitted: int
    queue: QueueEffect | None = None

    @property
    def changed(self) -> bool:
        """The two policies differ (a market change implies a setting change, not the reverse)."""
        return bool(self.settings or self.market)

    @property
    def restart_sections(self) -> tuple[str, ...]:
        """The changed sections a running daemon reads at start only (``READ_AT_START``): it refuses
        this policy on a reload, and takes it up when restarted."""
        changed = {c.path[0] for c in self.settings}
        return tuple(name for name in READ_AT_START if name in changed)


# --------------------------------------------------------------------------- comparing


def diff_policies(*, old_doc: Document, old: PolicySpec, new_doc: Document, new: PolicySpec,
                  offers: Iterable[Offer], queue: Sequence[Job] | None = None, queue_file: str = "",
                  now: datetime | None = None) -> PolicyDiff:
    """Compare two validated policies (``fleetctl.policy.spec_from_document``
    of ``old_doc`` and ``new_doc``) and the offers of ``offers`` each admits;
    with ``queue`` (read from ``queue_file``), also plan it at ``now`` on an
    empty fleet under each. Deterministic: settings in the order of the
    policy's fields (names and list items sorted), offer groups by provider
    and GPU model, removals first."""
    settings = setting_changes(old, new_doc, new)
    offers = tuple(offers)
    old_core, new_core = to_core(old), to_core(new)
    old_in = [o for o in offers if policy_allows(old_core, o)]
    new_in = [o for o in offers if policy_allows(new_core, o)]
    effect = None
    if queue is not None:
        if now is None:
            raise ValueError("diff_policies: a queue is planned at a time: pass now")
        # The same pass as `fleetctl plan` on a fresh sandbox: no nodes, no forecast, nothing terminated yet.
        before, after = (plan(now=now, queue=tuple(queue), fleet=(), offers=offers, forecast=None, policy=p)
                         for p in (old_core, new_core))
        effect = QueueEffect(queue_file, len(queue), before.usd_per_hour_after, after.usd_per_hour_after,
                             before.unplaced, after.unplaced)
    return PolicyDiff(
        old_file=old_doc.file, new_file=new_doc.file, settings=settings, market=_market(old_in, new_in),
        catalog_offers=len(offers), old_admitted=len(old_in), new_admitted=len(new_in), queue=effect,
    )


def setting_changes(old: PolicySpec, new_doc: Document, new: PolicySpec) -> tuple[SettingChange, ...]:
    """The settings that differ between two validated policies, located in
    ``new_doc`` (the Settings part of :func:`diff_policies`)."""
    return tuple(_located(kind, path, o, n, new_doc, new) for kind, path, o, n in _walk(old, new, ()))


def _walk(old: Any, new: Any, path: SettingPath) -> Iterator[tuple[ChangeKind, SettingPath, Any, Any]]:
    """``(kind, path, old, new)`` for every leaf that differs; either side may be ``_ABSENT``."""
    if old == new:
        return
    if isinstance(old, BaseModel) or isinstance(new, BaseModel):
        fields = type(old if isinstance(old, BaseModel) else new).model_fields
        for name in fields:  # declaration order: the order the policy documents its sections
            yield from _walk(_field(old, name), _field(new, name), path + (name,))
    elif isinstance(old, dict) or isinstance(new, dict):
        o = old if isinstance(old, dict) else {}
        n = new if isinstance(new, dict) else {}
        for key in sorted(o.keys() | n.keys()):
            yield from _walk(o.get(key, _ABSENT), n.get(key, _ABSENT), path + (key,))
    elif isinstance(old, list) and isinstance(new, list) and old and new:
        for item in sorted(set(old) ^ set(new)):
            yield (ChangeKind.ADD, path + (Member(item),), _ABSENT, item) if item in new else \
                (ChangeKind.REMOVE, path + (Member(item),), item, _ABSENT)
    elif isinstance(old, list) and old and new is _ABSENT:  # its section went: item by item
        yield from ((ChangeKind.REMOVE, path + (Member(item),), item, _ABSENT) for item in sorted(set(old)))
    elif isinstance(new, list) and new and old is _ABSENT:
        yield from ((ChangeKind.ADD, path + (Member(item),), _ABSENT, item) for item in sorted(set(new)))
    else:  # a scalar, or a list that is or was empty (shown whole)
        kind = ChangeKind.ADD if old is _ABSENT else ChangeKind.REMOVE if new is _ABSENT else ChangeKind.CHANGE
        yield kind, path, old, new


def _field(obj: Any, name: str) -> Any:
    """A field of a section, or ``_ABSENT`` when the section is (absent or ``null``)."""
    return getattr(obj, name) if isinstance(obj, BaseModel) else _ABSENT


def _located(kind: ChangeKind, path: SettingPath, old: Any, new: Any, doc: Document,
             spec: PolicySpec) -> SettingChange:
    where, exact = _document_path(path, spec)
    written = exact and doc.exists(where)
    at = None
    for cut in range(len(where), 0, -1):  # the value, else the key of its nearest written parent
        if doc.exists(where[:cut]):
            at = doc.position(where[:cut], at="value" if written and cut == len(where) else "key")
            break
    return SettingChange(kind, path, None if old is _ABSENT else old, None if new is _ABSENT else new, at, written)


def _document_path(path: SettingPath, spec: PolicySpec) -> tuple[FieldPath, bool]:
    """``path`` as NEW's document spells it, a list item by its index there
    (validation keeps a list's order), and whether NEW has that item (else
    the path stops at its list)."""
    out: list[str | int] = []
    value: Any = spec
    for elem in path:
        if isinstance(elem, Member):
            if not (isinstance(value, list) and elem.value in value):
                return tuple(out), False
            out.append(value.index(elem.value))
            break
        out.append(elem)
        value = (getattr(value, elem, None) if isinstance(value, BaseModel)
                 else value.get(elem) if isinstance(value, dict) else None)
    return tuple(out), True


def _market(old_in: list[Offer], new_in: list[Offer]) -> tuple[MarketChange, ...]:
    old_keys, new_keys = {o.key for o in old_in}, {o.key for o in new_in}
    group_old = Counter(_group(o) for o in old_in)
    group_new = Counter(_group(o) for o in new_in)
    moved: dict[tuple[str, str | None, ChangeKind], Counter[Market]] = {}
    for offer in old_in:
        if offer.key not in new_keys:
            moved.setdefault((*_group(offer), ChangeKind.REMOVE), Counter())[offer.market] += 1
    for offer in new_in:
        if offer.key not in old_keys:
            moved.setdefault((*_group(offer), ChangeKind.ADD), Counter())[offer.market] += 1
    changes = [
        MarketChange(kind, provider, gpu, tuple((m, markets[m]) for m in (Market.SPOT, Market.ON_DEMAND) if markets[m]),
                     group_old[(provider, gpu)], group_new[(provider, gpu)])
        for (provider, gpu, kind), markets in moved.items()
    ]
    return tuple(sorted(changes, key=lambda c: (c.provider, c.gpu_model is None, c.gpu_model or "",
                                                c.kind is ChangeKind.ADD)))


def _group(offer: Offer) -> tuple[str, str | None]:
    return offer.provider, offer.instance_type.gpu_model


# --------------------------------------------------------------------------- rendering


def _show(value: Any) -> str:
    """A value as JSON spells it (and YAML reads it): ``"all"``, ``null``, ``true``, ``0.8``, ``["aws"]``."""
    return json.dumps(value)


def _setting_line(change: SettingChange) -> str:
    if isinstance(change.path[-1], Member):
        body = change.field_path
    elif change.kind is ChangeKind.CHANGE:
        body = f"{change.field_path}: {_show(change.old)} -> {_show(change.new)}"
    else:
        body = f"{change.field_path}: {_show(change.new if change.kind is ChangeKind.ADD else change.old)}"
    if change.kind is not ChangeKind.REMOVE and not change.written:
        body += " (default)"
    return f"  {change.kind.mark} {body}"


def _market_line(change: MarketChange) -> str:
    gpu = change.gpu_model or "no GPU"
    markets = ", ".join(f"{m.value} {n}" for m, n in change.by_market)
    return (f"  {change.kind.mark} {counted(change.offers, 'offer')}: {change.provider} {gpu} ({markets}); "
            f"{change.provider} {gpu} admitted {change.old_admitted} -> {change.new_admitted}")


def summary_line(diff: PolicyDiff) -> str:
    kinds = Counter(c.kind for c in diff.settings)
    parts = ", ".join(f"{kinds[k]} {word}" for k, word in ((ChangeKind.ADD, "added"), (ChangeKind.REMOVE, "removed"),
                                                          (ChangeKind.CHANGE, "changed")) if kinds[k])
    verb = "differs" if len(diff.settings) == 1 else "differ"
    settings = f"{counted(len(diff.settings), 'setting')} {verb} ({parts})" if diff.settings else "no setting differs"
    queue = "" if diff.queue is None else (
        f"; queue $/h {diff.queue.old_usd_per_hour:.2f} -> {diff.queue.new_usd_per_hour:.2f}, "
        f"jobs left queued {len(diff.queue.old_unplaced)} -> {len(diff.queue.new_unplaced)}")
    return (f"Policy diff: {settings}; offers admitted {diff.old_admitted} -> {diff.new_admitted} "
            f"of the catalog's {diff.catalog_offers}{queue}.")


def render_text(diff: PolicyDiff) -> str:
    """The terraform-style text: changed settings with NEW's FILE:LINE, the
    market effect, a summary line."""
    out = [f"Comparing {diff.old_file} (old) with {diff.new_file} (new).", ""]
    if not diff.changed:
        out.append("No differences: the two policies are the same once defaults are filled in.")
        out.append("")
    if diff.settings:
        out.append("Settings:")
        out.extend(setting_lines(diff.settings, diff.new_file))
        out.append("")
    if diff.restart_sections:
        out.append(f"Restart needed: a running daemon reads {' and '.join(diff.restart_sections)} at start only, so "
                   "it refuses this policy on a reload (SIGHUP, --policy-check-seconds) and keeps the old one; "
                   "restart it to take the new policy up.")
        out.append("")
    if diff.market:
        out.append(f"Market effect on the shipped catalog: offers admitted {diff.old_admitted} -> {diff.new_admitted}")
        out.extend(_market_line(c) for c in diff.market)
        out.append("")
    if diff.queue is not None:
        out.extend(_queue_lines(diff.queue))
        out.append("")
    out.append(summary_line(diff))
    return "\n".join(out) + "\n"


def setting_lines(changes: Sequence[SettingChange], new_file: str) -> list[str]:
    """One line per changed setting, terraform-style marks, aligned, each with
    ``# NEW_FILE:LINE`` where NEW writes it (the daemon logs these on a policy
    reload)."""
    if not changes:
        return []
    lines = [_setting_line(c) for c in changes]
    width = min(max(len(line) for line in lines), 72)
    return [f"{line:<{width}}{f'  # {new_file}:{c.at.line}' if c.at is not None else ''}".rstrip()
            for line, c in zip(lines, changes)]


def _queue_lines(q: QueueEffect) -> list[str]:
    placed_old, placed_new = q.jobs - len(q.old_unplaced), q.jobs - len(q.new_unplaced)
    out = [f"Queue {q.file} ({counted(q.jobs, 'job')}) planned on an empty sandbox fleet: "
           f"$/h {q.old_usd_per_hour:.2f} -> {q.new_usd_per_hour:.2f}, jobs placed {placed_old} -> {placed_new}"]
    for u in q.newly_unplaced:
        out.append(f"  ! job {u.job_id} stays queued under the new policy\n      # {u.reason.value}: {u.detail}")
    for u in q.newly_placed:
        out.append(f"  + job {u.job_id} is placed under the new policy; under the old one it stayed queued\n"
                   f"      # {u.reason.value}: {u.detail}")
    return out


def diff_to_document(diff: PolicyDiff) -> dict[str, Any]:
    """The versioned JSON form (shape: ``docs/policy-diff.md``)."""
    settings = []
    for c in diff.settings:
        entry: dict[str, Any] = {"action": c.kind.value, "path": c.field_path}
        if c.kind is not ChangeKind.ADD:
            entry["old"] = c.old
        if c.kind is not ChangeKind.REMOVE:
            entry["new"] = c.new
        entry["written"] = c.written
        entry["file"] = diff.new_file if c.at is not None else None
        entry["line"] = c.at.line if c.at is not None else None
        entry["column"] = c.at.column if c.at is not None else None
        settings.append(entry)
    market = [
        {"action": c.kind.value, "provider": c.provider, "gpu_model": c.gpu_model, "offers": c.offers,
         "by_market": {m.value: n for m, n in c.by_market}, "old_admitted": c.old_admitted,
         "new_admitted": c.new_admitted}
        for c in diff.market
    ]
    q = diff.queue
    return {
        "format_version": FORMAT_VERSION,
        "old": diff.old_file,
        "new": diff.new_file,
        "changed": diff.changed,
        "summary": summary_line(diff),
        "restart_required": bool(diff.restart_sections),
        "restart_sections": list(diff.restart_sections),
        "settings": settings,
        "market": {"catalog_offers": diff.catalog_offers, "old_admitted": diff.old_admitted,
                   "new_admitted": diff.new_admitted, "changes": market},
        "queue": None if q is None else {
            "file": q.file, "jobs": q.jobs, "old_usd_per_hour": q.old_usd_per_hour,
            "new_usd_per_hour": q.new_usd_per_hour, "old_unplaced": len(q.old_unplaced),
            "new_unplaced": len(q.new_unplaced),
            "newly_unplaced": [unplaced_to_dict(u) for u in q.newly_unplaced],
            "newly_placed": [unplaced_to_dict(u) for u in q.newly_placed],
        },
    }
