"""The effectful side: observe the world, execute plans. It decides nothing.

* ``observe(store, provider, now)`` reads nodes (with their passive
  transitions), the active jobs and the offers.
* ``fingerprint(observation, policy)`` names the state a plan was made from,
  so ``apply`` can refuse a plan made against another state.
* ``execute(plan, ...)`` carries a plan out: job actions checked before any
  effect, a launch's intent committed before the cloud is asked and its
  nodes as soon as it answers, destructive actions re-checked against fresh
  state right before they happen, every fact written to the store; an
  ``ApplyError`` part-way says what was carried out. Given ``between``, it
  lets reclaim notices be handled at its safe points and stops
  (``NoticesHandled``) once one was: the rest of the plan predates it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable

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
    Reason,
    Terminate,
)
from fleetctl.codec import str_to_dt
from fleetctl.store import ConcurrentApply, Store, retry_key
from providers.base import InsufficientCapacity, LaunchRequest, Provider, ProviderError


if TYPE_CHECKING:  # pragma: no cover
    from fleetctl.controller.runtime import Runtime


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What ``execute`` carried out and the store committed: all of a plan, or
    (``ApplyError.applied``) what was done before an error stopped it."""

    bound: tuple[str, ...] = ()
    terminated: tuple[str, ...] = ()
    checkpoints: int = 0  # jobs the runtime checkpointed to move them (migrations, preemptions)
    launches: tuple[tuple[Node, Reason], ...] = ()  # each node launched, with the reason of the Launch that bought it
    migrated: tuple[str, ...] = ()  # jobs moved to other nodes
    preempted: tuple[str, ...] = ()  # jobs preempted (requeued) for higher-priority work

    @property
    def launched(self) -> tuple[Node, ...]:
        """The nodes launched (those of ``launches``)."""
        return tuple(node for node, _ in self.launches)


class ApplyError(Exception):
    """A plan could not be carried out; the message says which action and why,
    and ``carried_out`` what was done before it (recorded in the store: a
    cloud's launches and terminations cannot be taken back). ``refused_offer``:
    the offer whose launch the cloud refused for capacity, if that stopped it.
    ``applied``: what was carried out and committed before it, as an
    ``ApplyResult`` (the nodes bought, the jobs moved, their checkpoints), for
    the metrics; ``launches`` is its ``launches``."""

    def __init__(self, message: str, carried_out: tuple[str, ...] = (), refused_offer: str | None = None, *,
                 applied: ApplyResult = ApplyResult()) -> None:
        super().__init__(message)
        self.message = message
        self.carried_out = carried_out
        self.refused_offer = refused_offer
        self.applied = applied

    @property
    def launches(self) -> tuple[tuple[Node, Reason], ...]:
        return self.applied.launches

    def __str__(self) -> str:
        if not self.carried_out:
            return self.message
        return f"{self.message}; carried out before it, and recorded: {'; '.join(self.carried_out)}"


class StalePlan(ApplyError):
    """The state changed since the plan was made."""


class NoticesHandled(ApplyError):
    """Reclaim notices were handled at a safe point part-way through the plan
    (``execute``'s ``between``): they may have cordoned a node the rest of the
    plan binds jobs to, or requeued a job it moves, so the rest, made before
    them, is not carried out. ``carried_out`` and ``applied`` say what was;
    the caller plans again from the fleet as it now is."""


class ApplyInterrupted(ApplyError):
    """Carrying a plan out stopped on an error that is not the cloud's answer:
    none came (connection refused or lost, a timeout), a cloud SDK's own
    error, or a bug. The original is chained (``__cause__``, its traceback
    kept); ``carried_out`` lists what was done and recorded before it. A
    launch under way is recorded with status ``unknown``: the cloud may have
    bought (the next observation lists what it sold), and the next apply of
    the same plan asks again under the same idempotency key, which the cloud
    answers with what it bought."""


@dataclass(frozen=True, slots=True)
class Observation:
    now: datetime
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]  # active jobs: queued, bound, running
    offers: tuple[Offer, ...]


#: An offer whose launch the cloud refused for capacity (spot exhausted, zone
#: out of stock) is left out of the market this long, so the next plans pick
#: another offer instead of asking again on every pass (the simulator's
#: insufficient-capacity cache used the same 3 minutes).
REFUSED_OFFER_TTL = timedelta(minutes=3)


def observe(store: Store, provider: Provider, now: datetime,
            refused_ttl: timedelta = REFUSED_OFFER_TTL) -> Observation:
    """The fleet, the active jobs and the offers, less those the cloud refused
    for capacity within ``refused_ttl`` (``launch_refused`` in the audit log)."""
    nodes = tuple(n for n in provider.nodes(now) if n.state is not NodeState.GONE)
    offers = provider.offers(now)
    if refused_ttl > timedelta(0):
        refused = {e["subject"] for e in store.events("launch_refused", since=now - refused_ttl)
                   if now - refused_ttl < str_to_dt(e["at_utc"]) <= now}
        if refused:
            offers = tuple(o for o in offers if o.key not in refused)
    return Observation(now=now, nodes=nodes, jobs=store.jobs(active_only=True), offers=offers)


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
        candidate = retry_key(key, attempt)
    return candidate


def settle_launches(store: Store, now: datetime) -> tuple[str, ...]:
    """Finish the launch intents whose answer was never recorded, from the
    nodes the store holds under their keys. Returns the keys finished.

    An intent stays open (``Store.OPEN_LAUNCH_STATUSES``) when its controller
    died between asking the cloud and recording the answer, or the call got
    none. A retry of the same plan asks again under the same key and records
    the answer; but the plan made after a crash is usually another (the nodes
    bought before it are in the fleet now, so its fingerprint differs), and
    then nothing recorded that launch: the intent stayed ``pending`` for ever
    and its nodes, though used, had no ``launch`` entry in the audit log. Each
    open intent with nodes under its key is finished ``done`` (``partial``
    when fewer than asked) and its nodes get that entry, marked ``recovered``;
    one without is ``abandoned`` (a node the cloud sold without the store
    learning it, when the controller died inside the call, is listed by the
    next observation all the same, without its key).

    Call it under the controller lease at the end of a pass: an intent still
    open then is not this pass's own (each launch of a pass records its
    answer, or its failure, before the pass ends) and no plan of the pass can
    retry it any more."""
    settled = []
    for key, offer_key, count, status in store.open_launches():
        got = [n.node_id for n in store.nodes_by_idempotency_key(key)]
        with store.transaction():
            store.finish_launch(key, got, ("done" if len(got) >= count else "partial") if got else "abandoned")
            if got:
                # The Launch's reason is not recorded with its intent: null, so every launch entry has the key.
                store.record("launch", now, offer_key, nodes=got, reason=None, recovered=True, was=status)
        settled.append(key)
    return tuple(settled)


def left_behind(store: Store, nodes: dict[str, Node], job: Job, now: datetime, except_nodes: set[str] | frozenset[str] = frozenset()) -> None:
    """The nodes ``job`` leaves (finished, cancelled, preempted, or a gang's
    survivors after a reclaim) are idle from now, not from an older idle time, so the
    idle timeout counts from the moment they emptied."""
    for nid in sorted(set(job.node_ids) - set(except_nodes)):
        node = nodes.get(nid)
        if node is not None and node.state is not NodeState.GONE:
            store.put_node(replace(node, idle_since_utc=now), now)


def _launch_parts(plan: Plan) -> list[tuple[str, Launch, bool]]:
    """The plan's launches as the cloud is asked for them: (key suffix, launch,
    together). The planner buys one Launch per offer; the nodes of a gang in it
    (a job bound or moved to several of its new nodes) are asked for apart and together
    (AWS puts them in the pool's cluster placement group), under the suffix
    ``<index>-g<n>``; the other nodes keep the launch's own ``<index>``."""
    gangs = [a.node_ids if isinstance(a, Bind) else a.to_node_ids for a in plan.actions
             if (isinstance(a, Bind) and len(set(a.node_ids)) > 1)
             or (isinstance(a, Migrate) and len(set(a.to_node_ids)) > 1)]  # a gang bound, or moved whole
    parts: list[tuple[str, Launch, bool]] = []
    for index, action in enumerate(plan.actions):
        if not isinstance(action, Launch):
            continue
        mine = set(action.node_names)
        groups = []
        for names in gangs:
            members = [n for n in dict.fromkeys(names) if n in mine]
            if len(members) > 1:
                groups.append(members)
                mine -= set(members)
        if len(groups) == 1 and not mine:
            parts.append((str(index), action, True))
            continue
        rest = tuple(n for n in action.node_names if n in mine)
        if rest:
            parts.append((str(index), replace(action, node_names=rest), False))
        for g, members in enumerate(groups):
            parts.append((f"{index}-g{g}", replace(action, node_names=tuple(members)), True))
    return parts


def _check_job_actions(plan: Plan, jobs: dict[str, Job]) -> None:
    """Check the plan's job actions against the store before any effect:
    each job still active, each migration from where the job is, no node
    terminated while a job is on it (after the plan's own moves), and the
    actions in the planner's order (launches, then job moves, then
    terminations), so a failure here changes nothing."""
    phase = {"launch": 0, "preempt": 1, "bind": 1, "migrate": 1, "terminate": 2}
    last = 0
    where = {jid: set(j.node_ids) for jid, j in jobs.items()}
    for action in plan.actions:
        if phase[action.kind] < last:
            raise ApplyError(f"{action.kind} after a later kind of action: the plan is not in the order fleetctl "
                             "plans (launches, job moves, terminations)")
        last = phase[action.kind]
        if isinstance(action, (Bind, Preempt, Migrate)) and action.job_id not in where:
            raise ApplyError(f"{action.kind}: job {action.job_id!r} is no longer active")
        if isinstance(action, Bind):
            where[action.job_id] = set(action.node_ids)
        elif isinstance(action, Preempt):
            where[action.job_id] = set()
        elif isinstance(action, Migrate):
            if where[action.job_id] != set(action.from_node_ids):
                raise ApplyError(f"migrate: job {action.job_id!r} is no longer on {', '.join(action.from_node_ids)}")
            where[action.job_id] = set(action.to_node_ids)
        elif isinstance(action, Terminate):
            holders = sorted(jid for jid, nodes in where.items() if action.node_id in nodes)
            if holders:
                raise ApplyError(f"terminate: node {action.node_id} still holds jobs {', '.join(holders)}")


def execute(plan: Plan, *, store: Store, provider: Provider, now: datetime, plan_id: str,
            runtime: "Runtime | None" = None, between: Callable[[], bool] | None = None) -> ApplyResult:
    """Carry out ``plan``. ``plan_id`` (the plan's fingerprint) seeds the
    idempotency keys, so applying the same plan twice never buys twice.

    ``runtime`` (if given) checkpoints and stops the jobs that preemptions and
    migrations move; without one, they are moved as they stand.

    ``between`` (if given) is called at each safe point: before each launch,
    before the job moves and before each termination, never inside a store
    transaction. It handles the reclaim notices that wait (the daemon's tick:
    ``reconcile.tick``'s ``notices_due``) and says whether it handled any; if
    it did, the rest of the plan is not carried out (``NoticesHandled``).

    Design choice: the job actions are checked first (``_check_job_actions``),
    so a plan the store no longer allows changes nothing. Then, in the plan's
    order: each launch is recorded as an intent (committed) before the cloud
    is asked and its nodes as soon as it answers, since a cloud's purchase
    cannot be rolled back with a store transaction; the job moves (preempt,
    bind, migrate) land together in one transaction; each termination is
    re-checked against fresh state right before it and recorded at once. A
    launch or termination the cloud refuses stops the apply with an
    ``ApplyError`` that lists what was carried out before it: the next plan
    starts from that fleet (its new nodes idle, its jobs still queued). Any
    other error part-way (no answer from the cloud, a bug) is an
    ``ApplyInterrupted`` that lists the same and chains the original.
    """
    unsupported = sorted({a.kind for a in plan.actions if a.kind not in _SUPPORTED})
    if unsupported:
        raise ApplyError(f"this fleetctl cannot apply {', '.join(unsupported)} actions yet; nothing was changed")
    jobs = {j.job_id: j for j in store.jobs(active_only=True)}
    _check_job_actions(plan, jobs)
    progress = _Progress()
    try:
        return _carry_out(plan, store=store, provider=provider, now=now, plan_id=plan_id, runtime=runtime,
                          progress=progress, between=between)
    except (ApplyError, ConcurrentApply):
        raise
    except Exception as exc:  # not the cloud's answer: reported with what was carried out, the original chained
        raise ApplyInterrupted(f"{progress.step} failed: {type(exc).__name__}: {exc}",
                               tuple(progress.carried), applied=progress.result()) from exc


@dataclass(slots=True)
class _Progress:
    """What ``_carry_out`` did so far (``carried``, and the rest once the store
    committed it) and is doing (``step``), for its result or an error part-way."""

    carried: list[str] = field(default_factory=list)
    step: str = "the plan"
    launches: list[tuple[Node, Reason]] = field(default_factory=list)  # each node bought, with its launch's reason
    bound: list[str] = field(default_factory=list)
    migrated: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    checkpoints: int = 0
    terminated: list[str] = field(default_factory=list)

    def result(self) -> ApplyResult:
        return ApplyResult(bound=tuple(self.bound),
                           terminated=tuple(self.terminated), checkpoints=self.checkpoints,
                           launches=tuple(self.launches), migrated=tuple(self.migrated),
                           preempted=tuple(self.preempted))


def _carry_out(plan: Plan, *, store: Store, provider: Provider, now: datetime, plan_id: str,
               runtime: "Runtime | None", progress: _Progress,
               between: Callable[[], bool] | None = None) -> ApplyResult:
    """``execute`` once the job actions are checked."""
    names: dict[str, str] = {}
    carried = progress.carried  # what was done, for an error part-way

    def failed(message: str, refused_offer: str | None = None) -> ApplyError:
        return ApplyError(message, tuple(carried), refused_offer, applied=progress.result())

    def safe_point(before: str) -> None:
        """Let ``between`` handle the notices that wait; stop if it handled any (outside any transaction)."""
        if between is not None and between():
            raise NoticesHandled(f"reclaim notices were handled before the {before}; the rest of the plan was made "
                                 "before them and is not carried out", tuple(carried), applied=progress.result())

    for index, action, together in _launch_parts(plan):
        safe_point(f"launch of {action.count} x {action.offer.key}")
        progress.step = f"launch of {action.count} x {action.offer.key}"
        try:
            with store.transaction():  # the intent, committed before the cloud is asked
                key = _launch_key(store, f"fleetctl-{plan_id[:24]}-{index}", action, now)
        except ConcurrentApply as exc:
            if carried:
                raise failed(str(exc)) from exc
            raise
        try:
            result = provider.launch(LaunchRequest(action.offer, action.count, key, together=together), now)
        except ProviderError as exc:
            with store.transaction():
                store.finish_launch(key, (), "failed")
                if isinstance(exc, InsufficientCapacity):  # left out of the next plans for a while (observe)
                    store.record("launch_refused", now, action.offer.key, error=str(exc)[:500])
            raise failed(f"launch of {action.count} x {action.offer.key} failed: {exc}",
                         action.offer.key if isinstance(exc, InsufficientCapacity) else None) from exc
        except Exception:  # no answer (connection lost, a timeout), or a bug: execute reports it (ApplyInterrupted)
            with store.transaction():
                store.finish_launch(key, (), "unknown")
            raise
        got = [n.node_id for n in result.nodes]
        for name, node in zip(action.node_names, result.nodes):
            names[name] = node.node_id
        with store.transaction():
            store.finish_launch(key, got, "done" if result.fulfilled else "partial")
            if got:
                store.record("launch", now, action.offer.key, nodes=got, reason=action.reason.value)
        progress.launches.extend((node, action.reason) for node in result.nodes)
        if got:
            carried.append(f"launched {len(got)} x {action.offer.key} ({', '.join(got)})")
        if not result.fulfilled:
            raise failed(f"launch of {action.count} x {action.offer.key} got {len(got)} nodes"
                         f"{': ' + result.error if result.error else ''}")
    vacated: list[Job] = []  # preempted jobs, as they were: the nodes they leave are idle from now
    moves = [a for a in plan.actions if isinstance(a, (Preempt, Bind, Migrate))]
    if moves:
        safe_point("job moves")
        progress.step = "the job moves (preempt, bind, migrate)"
        checkpoints = 0
        bound: list[str] = []
        with store.transaction():  # all the moves or none: each goes into progress once it has committed
            jobs = {j.job_id: j for j in store.jobs(active_only=True)}
            for action in moves:
                if isinstance(action, Bind):
                    job = jobs.get(action.job_id)
                    if job is None:
                        raise failed(f"bind: job {action.job_id!r} is no longer active")
                    node_ids = tuple(names.get(n, n) for n in action.node_ids)
                    job = replace(job, state=JobState.BOUND, node_ids=node_ids)
                    store.put_job(job, now)
                    jobs[job.job_id] = job
                    store.record("bind", now, job.job_id, nodes=list(node_ids), reason=action.reason.value)
                    bound.append(job.job_id)
                elif isinstance(action, Preempt):
                    victim = jobs.get(action.job_id)
                    if victim is None:
                        raise failed(f"preempt: job {action.job_id!r} is no longer active")
                    # Requeued with its checkpoint; the runtime stops it (checkpointing first if it can).
                    kept, kept_at = victim.checkpointed_work_hours, victim.last_checkpoint_utc
                    # the work the preemption cost it, for `fleetctl report`: known when the runtime says how far
                    # the run got (or it was not running); without a runtime it is moved as it stands, unmeasured
                    loss: dict[str, float] = {} if victim.state is JobState.RUNNING else {"lost_gpu_hours": 0.0}
                    if runtime is not None and victim.state is JobState.RUNNING:
                        done = runtime.progress(victim, now).done_hours
                        saved = (runtime.checkpoint(victim, None, now) if victim.checkpointable
                                 else runtime.stop(victim, now))
                        kept, kept_at = saved.checkpointed_hours, saved.last_checkpoint_utc
                        checkpoints += 1 if victim.checkpointable else 0
                        loss = {"lost_gpu_hours": max(0.0, done - kept) * victim.gpus}
                    vacated.append(victim)
                    held = list(victim.node_ids)
                    victim = replace(victim, state=JobState.QUEUED, node_ids=(), started_at_utc=None,
                                     checkpointed_work_hours=kept, last_checkpoint_utc=kept_at if kept else None)
                    store.put_job(victim, now)
                    jobs[victim.job_id] = victim
                    store.record("preempt", now, victim.job_id, by=action.by_job_id, reason=action.reason.value,
                                 detail=action.detail, nodes=held, **loss)
                else:
                    job = jobs.get(action.job_id)
                    if job is None or tuple(sorted(set(job.node_ids))) != tuple(sorted(set(action.from_node_ids))):
                        raise failed(f"migrate: job {action.job_id!r} is no longer on "
                                     f"{', '.join(action.from_node_ids)}")
                    targets = tuple(names.get(n, n) for n in action.to_node_ids)
                    kept, kept_at = job.checkpointed_work_hours, job.last_checkpoint_utc
                    if runtime is not None and job.state is JobState.RUNNING:
                        saved = runtime.checkpoint(job, None, now)
                        kept, kept_at = saved.checkpointed_hours, saved.last_checkpoint_utc
                        checkpoints += 1
                    # Checkpointed, stopped, and bound to its new nodes: it resumes there.
                    # one node per worker (as the planner names them), or each node for as many workers
                    per_worker = targets if len(targets) == job.workers else \
                        targets * (job.workers // max(1, len(targets))) or targets
                    held = list(job.node_ids)
                    job = replace(job, state=JobState.BOUND, started_at_utc=None, checkpointed_work_hours=kept,
                                  last_checkpoint_utc=kept_at if kept else None, node_ids=per_worker)
                    store.put_job(job, now)
                    jobs[job.job_id] = job
                    store.record("migrate", now, job.job_id, to=list(targets), reason=action.reason.value,
                                 detail=action.detail, nodes=held)
            if vacated:
                terminating = {a.node_id for a in plan.actions if isinstance(a, Terminate)}
                nodes = {n.node_id: n for n in provider.nodes(now)}
                for victim in vacated:
                    left_behind(store, nodes, victim, now, except_nodes=terminating)
        progress.bound.extend(bound)
        progress.migrated.extend(a.job_id for a in moves if isinstance(a, Migrate))
        progress.preempted.extend(a.job_id for a in moves if isinstance(a, Preempt))
        progress.checkpoints += checkpoints
        counts = {word: sum(a.kind == kind for a in moves)
                  for kind, word in (("preempt", "preempted"), ("bind", "bound"), ("migrate", "migrated"))}
        carried.append(", ".join(f"{word} {n} job(s)" for word, n in counts.items() if n))
    terminates = [a for a in plan.actions if isinstance(a, Terminate)]
    # Re-check the destructive actions against fresh state (read once: the lease keeps other
    # controllers out while this one acts).
    fresh = store.jobs(active_only=True) if terminates else ()
    for action in terminates:
        safe_point(f"termination of {action.node_id}")
        progress.step = f"terminate of {action.node_id}"
        with store.transaction():
            holders = sorted(j.job_id for j in fresh if action.node_id in j.node_ids)
            if holders:
                raise failed(f"terminate: node {action.node_id} still holds jobs {', '.join(holders)}")
            try:
                provider.terminate(action.node_id, now)
            except ProviderError as exc:
                raise failed(f"terminate of {action.node_id} failed: {exc}") from exc
            store.record("terminate", now, action.node_id, reason=action.reason.value, detail=action.detail)
        progress.terminated.append(action.node_id)
        carried.append(f"terminated {action.node_id}")
    return progress.result()
