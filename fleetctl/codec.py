"""Plain-dict (JSON) forms of the vocabulary, for the store and plan files.

One place turns value objects into JSON-able dicts and back, so the store and
the plan file cannot drift apart.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from collections.abc import Callable
from typing import Any, TypeVar

from fleetctl.model import (
    JOB_RUNTIME_FIELDS,
    Action,
    Bind,
    Drain,
    InstanceType,
    Interconnect,
    Job,
    JobState,
    Launch,
    Market,
    Migrate,
    Node,
    NodeState,
    Offer,
    Preempt,
    Reason,
    Terminate,
    Unplaced,
)

T = TypeVar("T")


class DecodeError(ValueError):
    """A stored or saved document does not have the expected shape. ``field``
    says where, as a path below the object being decoded (``offer.usd_per_hour``;
    ``""``: the object itself), so that a reader can name the whole path."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.message = message
        self.field = field


_REQUIRED: Any = object()


def decoded(d: dict[str, Any], key: str, convert: Callable[[Any], T], default: Any = _REQUIRED) -> T:
    """``convert(d[key])`` (``d.get(key, default)`` with a ``default``). A value
    that does not convert (``float("cheap")``, a nested object with a bad field)
    is a DecodeError whose ``field`` starts with ``key``; a missing required key
    stays a KeyError, as ``d[key]`` raises it."""
    value = d[key] if default is _REQUIRED else d.get(key, default)
    try:
        return convert(value)
    except DecodeError as exc:
        raise DecodeError(exc.message, f"{key}.{exc.field}" if exc.field else key) from exc
    except KeyError as exc:  # of a nested object
        raise DecodeError(f"missing field {exc.args[0]!r}", key) from exc
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an integer too large for a float
        raise DecodeError(str(exc) or type(exc).__name__, key) from exc


def _text(d: dict[str, Any], key: str, default: Any = _REQUIRED) -> Any:
    """``d[key]``, which must be a string (a saved plan is edited by hand). With a
    ``default``: that when absent, and that value itself is accepted too (a
    stored ``"gpu_model": null``)."""
    value = d[key] if default is _REQUIRED else d.get(key, default)
    if not isinstance(value, str) and value is not default:
        raise DecodeError(f"must be a string, found {type(value).__name__}", key)
    return value


def _texts(d: dict[str, Any], key: str) -> tuple[str, ...]:
    value = d[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DecodeError("must be a list of strings", key)
    return tuple(value)


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: fleetctl keeps time in UTC")
    return value.astimezone(timezone.utc)


def dt_to_str(value: datetime | None) -> str | None:
    return None if value is None else _utc(value).isoformat().replace("+00:00", "Z")


def stored_time(value: datetime | None) -> str | None:
    """A time as the state store keeps it: ISO 8601 in UTC, always to the microsecond
    (``2026-11-27T23:56:30.000000Z``). The store's columns are text, compared and
    ordered as text, so every value has the same width; ``dt_to_str`` leaves out
    a zero fraction, and "...:30Z" sorted after "...:30.5Z" (store migration 0011).
    Reads parse either form (``str_to_dt``)."""
    return None if value is None else _utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def show_utc(value: datetime) -> str:
    """A time as the CLI shows it to people: ISO 8601 in UTC to the second (``2026-11-27T23:56:30Z``).
    JSON keeps every digit (``dt_to_str``)."""
    return _utc(value).strftime("%Y-%m-%dT%H:%M:%SZ")


def str_to_dt(value: str | None) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise DecodeError(f"timestamp must be a string, found {type(value).__name__}")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise DecodeError(f"timestamp {value!r} has no time zone")
    return parsed.astimezone(timezone.utc)


def instance_type_to_dict(it: InstanceType) -> dict[str, Any]:
    return {
        "provider": it.provider,
        "name": it.name,
        "vcpus": it.vcpus,
        "memory_gib": it.memory_gib,
        "gpu_model": it.gpu_model,
        "gpu_count": it.gpu_count,
        "gpu_memory_gib": it.gpu_memory_gib,
        "interconnect": it.interconnect.value,
        "architecture": it.architecture,
    }


def instance_type_from_dict(d: dict[str, Any]) -> InstanceType:
    return InstanceType(
        provider=_text(d, "provider"),
        name=_text(d, "name"),
        vcpus=decoded(d, "vcpus", int),
        memory_gib=decoded(d, "memory_gib", float),
        gpu_model=_text(d, "gpu_model", None),
        gpu_count=decoded(d, "gpu_count", int, 0),
        gpu_memory_gib=decoded(d, "gpu_memory_gib", float, 0.0),
        interconnect=decoded(d, "interconnect", Interconnect, "none"),
        architecture=_text(d, "architecture", "x86_64"),
    )


def offer_to_dict(offer: Offer) -> dict[str, Any]:
    return {
        "key": offer.key,
        "instance_type": instance_type_to_dict(offer.instance_type),
        "region": offer.region,
        "zone": offer.zone,
        "market": offer.market.value,
        "usd_per_hour": offer.usd_per_hour,
    }


def offer_from_dict(d: dict[str, Any]) -> Offer:
    return Offer(
        instance_type=decoded(d, "instance_type", instance_type_from_dict),
        region=_text(d, "region"),
        zone=_text(d, "zone", ""),
        market=decoded(d, "market", Market),
        usd_per_hour=decoded(d, "usd_per_hour", float),
    )


def node_to_dict(node: Node) -> dict[str, Any]:
    return {
        "node_id": node.node_id,
        "offer": offer_to_dict(node.offer),
        "state": node.state.value,
        "launched_at_utc": dt_to_str(node.launched_at_utc),
        "ready_at_utc": dt_to_str(node.ready_at_utc),
        "idle_since_utc": dt_to_str(node.idle_since_utc),
        "zone": node.zone,
    }


def node_from_dict(d: dict[str, Any]) -> Node:
    return Node(
        node_id=d["node_id"],
        offer=offer_from_dict(d["offer"]),
        state=NodeState(d["state"]),
        launched_at_utc=str_to_dt(d["launched_at_utc"]),  # type: ignore[arg-type]
        ready_at_utc=str_to_dt(d.get("ready_at_utc")),
        idle_since_utc=str_to_dt(d.get("idle_since_utc")),
        zone=_text(d, "zone", ""),  # absent from nodes an older fleetctl wrote (the store backfills: 0007)
    )


def job_to_dict(job: Job) -> dict[str, Any]:
    return {
        "id": job.job_id,
        "workers": job.workers,
        "gpus_per_worker": job.gpus_per_worker,
        "gpu_models": list(job.gpu_models),
        "vcpus_per_worker": job.vcpus_per_worker,
        "memory_gib_per_worker": job.memory_gib_per_worker,
        "priority": job.priority,
        "team": job.team,
        "checkpointable": job.checkpointable,
        "checkpoint_interval_minutes": job.checkpoint_interval_minutes,
        "deadline_utc": dt_to_str(job.deadline_utc),
        "spot_eligible": job.spot_eligible,
        "duration_hours": job.duration_hours,
        "submitted_at_utc": dt_to_str(job.submitted_at_utc),
        "state": job.state.value,
        "node_ids": list(job.node_ids),
        "gpu_memory_gib_per_gpu": job.gpu_memory_gib_per_gpu,
        "started_at_utc": dt_to_str(job.started_at_utc),
        "last_checkpoint_utc": dt_to_str(job.last_checkpoint_utc),
        "interruptions": job.interruptions,
        "work_lost_interruptions": job.work_lost_interruptions,
        "checkpointed_work_hours": job.checkpointed_work_hours,
        "priority_boost": job.priority_boost,
        "avoid_offer_keys": list(job.avoid_offer_keys),
        "requeued_at_utc": dt_to_str(job.requeued_at_utc),
        "first_started_at_utc": dt_to_str(job.first_started_at_utc),
    }


#: The value ``job_to_dict`` writes for each spec field (not ``JOB_RUNTIME_FIELDS``) at its default, which
#: ``job_from_dict`` also reads for the field when its key is missing.
_JOB_SPEC_DEFAULTS = {f.name: list(f.default) if isinstance(f.default, tuple) else f.default
                      for f in dataclasses.fields(Job)
                      if f.name not in JOB_RUNTIME_FIELDS and f.default is not dataclasses.MISSING}


def job_spec_dict(d: dict[str, Any]) -> dict[str, Any]:
    """The spec of a job as ``job_to_dict`` wrote it (``d``): without its id,
    the fields the controller writes as the job runs (``JOB_RUNTIME_FIELDS``:
    their keys are the field names), and the fields at their defaults. What a
    tombstone of a pruned job keeps; read back by ``job_from_dict`` given
    ``id`` and ``submitted_at_utc``."""
    if not isinstance(d, dict):
        raise TypeError(f"a job is a JSON object, not {type(d).__name__}")
    missing = object()
    return {key: value for key, value in d.items() if key != "id" and key not in JOB_RUNTIME_FIELDS
            and _JOB_SPEC_DEFAULTS.get(key, missing) != value}


def job_from_dict(d: dict[str, Any]) -> Job:
    return Job(
        job_id=d["id"],
        workers=int(d["workers"]),
        gpus_per_worker=int(d["gpus_per_worker"]),
        gpu_models=tuple(d.get("gpu_models") or ()),
        vcpus_per_worker=float(d["vcpus_per_worker"]),
        memory_gib_per_worker=float(d["memory_gib_per_worker"]),
        priority=d["priority"],
        team=d["team"],
        checkpointable=bool(d.get("checkpointable", False)),
        checkpoint_interval_minutes=d.get("checkpoint_interval_minutes"),
        deadline_utc=str_to_dt(d.get("deadline_utc")),
        spot_eligible=d.get("spot_eligible"),
        duration_hours=float(d["duration_hours"]),
        submitted_at_utc=str_to_dt(d["submitted_at_utc"]),  # type: ignore[arg-type]
        state=JobState(d.get("state", "queued")),
        node_ids=tuple(d.get("node_ids") or ()),
        gpu_memory_gib_per_gpu=float(d.get("gpu_memory_gib_per_gpu") or 0.0),
        started_at_utc=str_to_dt(d.get("started_at_utc")),
        last_checkpoint_utc=str_to_dt(d.get("last_checkpoint_utc")),
        interruptions=int(d.get("interruptions") or 0),
        work_lost_interruptions=int(d.get("work_lost_interruptions") or 0),
        checkpointed_work_hours=float(d.get("checkpointed_work_hours") or 0.0),
        priority_boost=float(d.get("priority_boost") or 0.0),
        avoid_offer_keys=tuple(d.get("avoid_offer_keys") or ()),
        requeued_at_utc=str_to_dt(d.get("requeued_at_utc")),
        first_started_at_utc=str_to_dt(d.get("first_started_at_utc")),
    )


def action_to_dict(action: Action) -> dict[str, Any]:
    base: dict[str, Any] = {"kind": action.kind, "reason": action.reason.value, "detail": action.detail}
    if isinstance(action, Launch):
        base.update(offer=offer_to_dict(action.offer), node_names=list(action.node_names))
    elif isinstance(action, (Terminate, Drain)):
        base.update(node_id=action.node_id)
    elif isinstance(action, Bind):
        base.update(job_id=action.job_id, node_ids=list(action.node_ids))
    elif isinstance(action, Migrate):
        base.update(
            job_id=action.job_id,
            from_node_ids=list(action.from_node_ids),
            to_node_ids=list(action.to_node_ids),
        )
    elif isinstance(action, Preempt):
        base.update(job_id=action.job_id, by_job_id=action.by_job_id)
    else:  # pragma: no cover - the union is closed
        raise TypeError(f"unknown action {action!r}")
    return base


def action_from_dict(d: dict[str, Any]) -> Action:
    kind = d.get("kind")
    reason = decoded(d, "reason", Reason)
    detail = str(d.get("detail", ""))
    if kind == "launch":
        return Launch(decoded(d, "offer", offer_from_dict), _texts(d, "node_names"), reason, detail)
    if kind == "terminate":
        return Terminate(_text(d, "node_id"), reason, detail)
    if kind == "drain":
        return Drain(_text(d, "node_id"), reason, detail)
    if kind == "bind":
        return Bind(_text(d, "job_id"), _texts(d, "node_ids"), reason, detail)
    if kind == "migrate":
        return Migrate(_text(d, "job_id"), _texts(d, "from_node_ids"), _texts(d, "to_node_ids"), reason, detail)
    if kind == "preempt":
        return Preempt(_text(d, "job_id"), _text(d, "by_job_id"), reason, detail)
    raise DecodeError(f"unknown action kind {kind!r}")


def unplaced_to_dict(u: Unplaced) -> dict[str, Any]:
    return {"job_id": u.job_id, "reason": u.reason.value, "detail": u.detail}


def unplaced_from_dict(d: dict[str, Any]) -> Unplaced:
    return Unplaced(_text(d, "job_id"), decoded(d, "reason", Reason), str(d.get("detail", "")))
