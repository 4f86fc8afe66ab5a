"""The effectful side: observe the world, execute plans. It decides nothing.

* ``observe(store, provider, now)`` reads nodes (with their passive
  transitions), the active jobs and the offers.
* ``fingerprint(observation, policy)`` names the state a plan was made from,
  so ``apply`` can refuse a plan made against another state.
* ``execute(plan, ...)`` carries a plan out: intent recorded before each
  effect, destructive actions re-checked against fresh state right before
  they happen, every fact written to the store.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from datetime import datetime

from fleetctl.model import (
    Bind,
    Migrate,
    Preempt,
    Job,
    JobState,
    Launch,
    Node,
    NodeState,
    Offer,
    Plan,
    Policy,
    Terminate,
)
from fleetctl.store import Store
from providers.base import LaunchRequest, Provider, ProviderError

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from fleetctl.controller.runtime import Runtime


class ApplyError(Exception):
    """A plan could not be carried out; the message says which action and why."""


class StalePlan(ApplyError):
    """The state changed since the plan was made."""


@dataclass(frozen=True, slots=True)
class Observation:
    now: datetime
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]  # active jobs: queued, bound, running
    offers: tuple[Offer, ...]


def observe(store: Store, provider: Provider, now: datetime) -> Observation:
    nodes = tuple(n for n in provider.nodes(now) if n.state is not NodeState.GONE)
    return Observation(now=now, nodes=nodes, jobs=store.jobs(active_only=True), offers=provider.offers(now))


def fingerprint(obs: Observation, policy: Policy) -> str:
    """A hash of everything a plan depends on, except the passage of time.

    Design choice: a node going from launching to ready does not change the
    fingerprint (both are "up"): a plan made while nodes boot stays valid once
    they are ready. A new job, a job bound elsewhere, a node gone, a price or
    a policy change all do.
    """
    up = {NodeState.LAUNCHING.value, NodeState.READY.value}
    doc = {
        "nodes": sorted(
            (n.node_id, n.offer.key, "up" if n.state.value in up else n.state.value) for n in obs.nodes
        ),
        "jobs": sorted(
            (
                j.job_id,
                j.state.value,
                list(j.node_ids),
                j.priority,
                j.workers,
                j.gpus_per_worker,
                list(j.gpu_models),
                j.vcpus_per_worker,
                j.memory_gib_per_worker,
                j.spot_eligible,
            )
            for j in obs.jobs
        ),
        "offers": sorted((o.key, round(o.usd_per_hour, 6)) for o in obs.offers),
        "policy": repr(policy),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ApplyResult:
    launched: tuple[Node, ...]
    bound: tuple[str, ...]
    terminated: tuple[str, ...]
    checkpoints: int = 0  # jobs the runtime checkpointed to move them (migrations, preemptions)


_SUPPORTED = ("launch", "bind", "terminate", "preempt", "migrate")


def _launch_key(store: Store, key: str, action: Launch, now: datetime) -> str:
    """The idempotency key of a launch, its intent recorded. A key seen before
    is a retry of an apply that crashed (the cloud returns what it bought
    then), unless every node bought under it is gone: then the same state has
    come back (a node lost, its job requeued exactly as before) and this is a
    new purchase, under the next free ``-rN`` key."""
    attempt = 0
    candidate = key
    while not store.begin_launch(candidate, action.offer.key, action.count, now):
        prior = store.nodes_by_idempotency_key(candidate)
        if not prior or any(n.state is not NodeState.GONE for n in prior):
            return candidate  # a retry: the provider answers for this key
        attempt += 1
        candidate = f"{key}-r{attempt}"
    return candidate


def left_behind(store: Store, nodes: dict[str, Node], job: Job, now: datetime, except_nodes: set[str] | frozenset[str] = frozenset()) -> None:
    """The nodes ``job`` leaves (finished, cancelled, preempted, or a gang's
    survivors after a reclaim) are idle from now, not from an older idle time, so the
    idle timeout counts from the moment they emptied."""
    for nid in sorted(set(job.node_ids) - set(except_nodes)):
        node = nodes.get(nid)
        if node is not None and node.state is not NodeState.GONE:
            store.put_node(replace(node, idle_since_utc=now), now)


def execute(plan: Plan, *, store: Store, provider: Provider, now: datetime, plan_id: str,
            runtime: "Runtime | None" = None) -> ApplyResult:
    """Carry out ``plan``. ``plan_id`` (the plan's fingerprint) seeds the
    idempotency keys, so applying the same plan twice never buys twice.

    ``runtime`` (if given) checkpoints and stops the jobs that preemptions and
    migrations move; without one, they are moved as they stand.

    Everything happens in one store transaction: if an action fails, the
    store is left as it was (the sandbox keeps its nodes in the store, so it
    is rolled back too; a real cloud's launches are found again through their
    idempotency keys on the next apply).
    """
    unsupported = sorted({a.kind for a in plan.actions if a.kind not in _SUPPORTED})
    if unsupported:
        raise ApplyError(f"this fleetctl cannot apply {', '.join(unsupported)} actions yet; nothing was changed")
    launched: list[Node] = []
    checkpoints = 0
    bound: list[str] = []
    terminated: list[str] = []
    names: dict[str, str] = {}
    vacated: list[Job] = []  # preempted jobs, as they were: the nodes they leave are idle from now
    with store.transaction():
        jobs = {j.job_id: j for j in store.jobs(active_only=True)}
        for index, action in enumerate(plan.actions):
            if isinstance(action, Launch):
                key = _launch_key(store, f"fleetctl-{plan_id[:24]}-{index}", action, now)
                try:
                    result = provider.launch(LaunchRequest(action.offer, action.count, key), now)
                except ProviderError as exc:
                    raise ApplyError(f"launch of {action.count} x {action.offer.key} failed: {exc}") from exc
                if not result.fulfilled:
                    raise ApplyError(
                        f"launch of {action.count} x {action.offer.key} got {len(result.nodes)} nodes"
                        f"{': ' + result.error if result.error else ''}"
                    )
                for name, node in zip(action.node_names, result.nodes):
                    names[name] = node.node_id
                store.finish_launch(key, (n.node_id for n in result.nodes), "done")
                store.record("launch", now, action.offer.key, nodes=[n.node_id for n in result.nodes], reason=action.reason.value)
                launched.extend(result.nodes)
            elif isinstance(action, Bind):
                job = jobs.get(action.job_id)
                if job is None:
                    raise ApplyError(f"bind: job {action.job_id!r} is no longer active")
                node_ids = tuple(names.get(n, n) for n in action.node_ids)
                job = replace(job, state=JobState.BOUND, node_ids=node_ids)
                store.put_job(job, now)
                jobs[job.job_id] = job
                store.record("bind", now, job.job_id, nodes=list(node_ids), reason=action.reason.value)
                bound.append(job.job_id)
            elif isinstance(action, Preempt):
                victim = jobs.get(action.job_id)
                if victim is None:
                    raise ApplyError(f"preempt: job {action.job_id!r} is no longer active")
                # Requeued with its checkpoint; the runtime stops it (checkpointing first if it can).
                kept = victim.checkpointed_work_hours
                if runtime is not None and victim.state is JobState.RUNNING:
                    kept = (runtime.checkpoint(victim, None, now) if victim.checkpointable
                            else runtime.stop(victim, now)).checkpointed_hours
                    checkpoints += 1 if victim.checkpointable else 0
                vacated.append(victim)
                victim = replace(victim, state=JobState.QUEUED, node_ids=(), started_at_utc=None,
                                 checkpointed_work_hours=kept)
                store.put_job(victim, now)
                jobs[victim.job_id] = victim
                store.record("preempt", now, victim.job_id, by=action.by_job_id, reason=action.reason.value,
                             detail=action.detail)
            elif isinstance(action, Migrate):
                job = jobs.get(action.job_id)
                if job is None or tuple(sorted(set(job.node_ids))) != tuple(sorted(set(action.from_node_ids))):
                    raise ApplyError(f"migrate: job {action.job_id!r} is no longer on {', '.join(action.from_node_ids)}")
                targets = tuple(names.get(n, n) for n in action.to_node_ids)
                kept = job.checkpointed_work_hours
                if runtime is not None and job.state is JobState.RUNNING:
                    kept = runtime.checkpoint(job, None, now).checkpointed_hours
                    checkpoints += 1
                # Checkpointed, stopped, and bound to its new nodes: it resumes there.
                # one node per worker (as the planner names them), or each node for as many workers
                per_worker = targets if len(targets) == job.workers else \
                    targets * (job.workers // max(1, len(targets))) or targets
                job = replace(job, state=JobState.BOUND, started_at_utc=None, checkpointed_work_hours=kept,
                              node_ids=per_worker)
                store.put_job(job, now)
                jobs[job.job_id] = job
                store.record("migrate", now, job.job_id, to=list(targets), reason=action.reason.value,
                             detail=action.detail)
            elif isinstance(action, Terminate):
                # Re-check the destructive action against fresh state.
                holders = sorted(j.job_id for j in jobs.values() if action.node_id in j.node_ids)
                if holders:
                    raise ApplyError(f"terminate: node {action.node_id} still holds jobs {', '.join(holders)}")
                try:
                    provider.terminate(action.node_id, now)
                except ProviderError as exc:
                    raise ApplyError(f"terminate of {action.node_id} failed: {exc}") from exc
                store.record("terminate", now, action.node_id, reason=action.reason.value, detail=action.detail)
                terminated.append(action.node_id)
        if vacated:
            nodes = {n.node_id: n for n in provider.nodes(now)}
            for victim in vacated:
                left_behind(store, nodes, victim, now, except_nodes=set(terminated))
    return ApplyResult(tuple(launched), tuple(bound), tuple(terminated), checkpoints)
