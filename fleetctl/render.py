"""Plan -> terraform-style text and versioned JSON. Pure: no I/O, no clock."""

from __future__ import annotations

import json
from typing import Any, Callable, TypeVar

from fleetctl.codec import (
    DecodeError,
    decoded,
    action_from_dict,
    action_to_dict,
    dt_to_str,
    unplaced_from_dict,
    unplaced_to_dict,
)
from fleetctl.model import Bind, Drain, Launch, Migrate, Plan, Preempt, Terminate

T = TypeVar("T")

FORMAT_VERSION = 1

_SYMBOL = {"launch": "+", "bind": "+", "terminate": "-", "drain": "~", "migrate": "-/+", "preempt": "-"}


def _line(action) -> str:  # noqa: ANN001 - the Action union
    sym = _SYMBOL[action.kind]
    if isinstance(action, Launch):
        o = action.offer
        it = o.instance_type
        gpus = f"{it.gpu_count} x {it.gpu_model}" if it.gpu_count else "no GPU"
        target = (
            f"{action.count} x {it.name} ({gpus}) {o.market.value} in {o.provider} {o.region}"
            f"{('/' + o.zone) if o.zone else ''} at ${o.usd_per_hour:.4f}/h each"
        )
        body = f"launch {target} as {', '.join(action.node_names)}"
    elif isinstance(action, Bind):
        body = f"bind job {action.job_id} -> {', '.join(action.node_ids)}"
    elif isinstance(action, Terminate):
        body = f"terminate node {action.node_id}"
    elif isinstance(action, Drain):
        body = f"drain node {action.node_id}"
    elif isinstance(action, Migrate):
        body = f"migrate job {action.job_id}: {', '.join(action.from_node_ids)} -> {', '.join(action.to_node_ids)}"
    elif isinstance(action, Preempt):
        body = f"preempt job {action.job_id} for {action.by_job_id}"
    else:  # pragma: no cover - the union is closed
        raise TypeError(action)
    return f"  {sym:>3} {body}\n        # {action.reason.value}: {action.detail}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` in the number ``n`` asks for: ``1 job``, ``0 jobs``, ``12 jobs``
    (``plural`` for a noun that does not take an "s")."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


#: What ``Store.prune`` and ``Store.prune_finished`` delete, per table they return a count for: (noun, plural).
PRUNED = {"events": ("per-pass audit event", None), "offer_observations": ("spot-market observation", None),
          "interruptions": ("handled reclaim notice", None)}
PRUNED_FINISHED = {"jobs": ("finished job", None), "job_cancellations": ("handled cancel request", None),
                   "nodes": ("gone node", None), "launches": ("finished launch", "finished launches"),
                   "events": ("decision event", None)}


def deleted_text(deleted: dict[str, int], words: dict[str, tuple[str, str | None]]) -> str:
    """The rows a prune deleted, per table, in words (``PRUNED`` or ``PRUNED_FINISHED``),
    as `fleetctl prune` prints them and the daemon logs them: ``3 spot-market observations``."""
    return ", ".join(counted(n, *words[table]) for table, n in deleted.items())


def summary_line(plan: Plan) -> str:
    launch = sum(a.count for a in plan.actions if isinstance(a, Launch))
    terminate = sum(1 for a in plan.actions if isinstance(a, Terminate))
    bind = sum(1 for a in plan.actions if isinstance(a, Bind))
    extra = []
    for kind, label in (("drain", "to drain"), ("migrate", "to migrate"), ("preempt", "to preempt")):
        n = len(plan.of_kind(kind))
        if n:
            extra.append(f"{n} {label}")
    more = (", " + ", ".join(extra)) if extra else ""
    return (
        f"Plan: {launch} to launch, {terminate} to terminate, {counted(bind, 'job')} to bind{more}. "
        f"$/h {plan.usd_per_hour_before:.2f} -> {plan.usd_per_hour_after:.2f}"
    )


def render_text(plan: Plan, warnings: tuple[str, ...] = (), notes: tuple[str, ...] = ()) -> str:
    """The terraform-style diff: one line per action with its reason, the
    unplaced jobs with theirs, the policy limits the fleet already breaks
    (``warnings``, see ``fleetctl.planner.breaches``), then the summary line."""
    from fleetctl.planner.breaches import BREACH_NOTE

    out: list[str] = []
    if plan.actions:
        out.append("fleetctl will perform the following actions:\n")
        out.extend(_line(a) for a in plan.actions)
        out.append("")
    elif warnings:
        out.append("No changes to make, but the fleet breaks the policy (below).\n")
    elif plan.unplaced:  # "matches the queue" would be false: some of it waits (cooldown, budget, capacity)
        waiting = len(plan.unplaced)
        out.append(f"No changes to make now; {counted(waiting, 'job')} {'stays' if waiting == 1 else 'stay'} queued "
                   "(below).\n")
    else:
        out.append("No changes. The fleet matches the queue and the policy.\n")
    if warnings:
        out.append("Warning: the fleet is over the policy's limits:\n")
        out.extend(f"    ! {w}" for w in warnings)
        out.append(f"    ({BREACH_NOTE})")
        out.append("")
    if notes:
        out.append("Note: the policy and the queue or the market do not match:\n")
        out.extend(f"    ~ {n}" for n in notes)
        out.append("")
    if plan.unplaced:
        out.append("Jobs that stay queued:\n")
        for u in plan.unplaced:
            out.append(f"    ! job {u.job_id}\n        # {u.reason.value}: {u.detail}")
        out.append("")
    out.append(summary_line(plan))
    out.append(
        f"Risk (expected spot reclaims per hour): {plan.risk_before:.3f} -> {plan.risk_after:.3f}"
    )
    return "\n".join(out) + "\n"


def plan_to_document(plan: Plan, *, fingerprint: str, created_at_utc, policy_path: str) -> dict[str, Any]:  # noqa: ANN001
    """The versioned JSON form of a plan (what ``-out`` writes)."""
    return {
        "format_version": FORMAT_VERSION,
        "fingerprint": fingerprint,
        "created_at_utc": dt_to_str(created_at_utc),
        "policy": policy_path,
        "summary": summary_line(plan),
        "usd_per_hour_before": plan.usd_per_hour_before,
        "usd_per_hour_after": plan.usd_per_hour_after,
        "risk_before": plan.risk_before,
        "risk_after": plan.risk_after,
        "actions": [action_to_dict(a) for a in plan.actions],
        "unplaced": [unplaced_to_dict(u) for u in plan.unplaced],
    }


def render_json(plan: Plan, **meta: Any) -> str:
    return json.dumps(plan_to_document(plan, **meta), indent=2, sort_keys=False) + "\n"


class PlanFileError(ValueError):
    """A saved plan file cannot be read."""


def _problem(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}"
    return str(exc) or type(exc).__name__


def _entries(doc: dict[str, Any], key: str, decode: Callable[[dict[str, Any]], T], source: str) -> tuple[T, ...]:
    """``doc[key]``, a list of objects, decoded one by one; a bad one is named by its index."""
    items = doc[key]
    if not isinstance(items, list):
        raise PlanFileError(f"{source}: {key} must be a list, found {type(items).__name__}")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise PlanFileError(f"{source}: {key}[{i}] must be an object, found {type(item).__name__}")
        try:
            out.append(decode(item))
        except DecodeError as exc:
            where = f"{key}[{i}].{exc.field}" if exc.field else f"{key}[{i}]"
            raise PlanFileError(f"{source}: {where}: {exc.message}") from exc
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise PlanFileError(f"{source}: {key}[{i}]: {_problem(exc)}") from exc
    return tuple(out)


def plan_from_document(doc: Any, source: str = "plan file") -> tuple[Plan, str]:
    """Read a saved plan back; returns (plan, fingerprint). Raises PlanFileError
    naming what is wrong."""
    if not isinstance(doc, dict):
        raise PlanFileError(f"{source}: expected a JSON object, found {type(doc).__name__}")
    if "format_version" not in doc:  # was "format_version None is not supported": say what the file is not
        raise PlanFileError(f"{source}: not a plan file: it has no format_version (a plan file is what "
                            "`fleetctl plan -out FILE` saves)")
    version = doc["format_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version != FORMAT_VERSION:  # not true, not 1.0
        raise PlanFileError(
            f"{source}: format_version {version!r} is not supported (this fleetctl reads the number "
            f"{FORMAT_VERSION!r})"
        )
    for key in ("fingerprint", "actions", "unplaced", "usd_per_hour_before", "usd_per_hour_after"):
        if key not in doc:
            raise PlanFileError(f"{source}: missing field {key!r}")
    actions = _entries(doc, "actions", action_from_dict, source)
    unplaced = _entries(doc, "unplaced", unplaced_from_dict, source)
    try:
        plan = Plan(
            actions=actions,
            unplaced=unplaced,
            usd_per_hour_before=decoded(doc, "usd_per_hour_before", float),
            usd_per_hour_after=decoded(doc, "usd_per_hour_after", float),
            risk_before=decoded(doc, "risk_before", float, 0.0),
            risk_after=decoded(doc, "risk_after", float, 0.0),
        )
    except DecodeError as exc:
        raise PlanFileError(f"{source}: {exc}") from exc
    return plan, str(doc["fingerprint"])
