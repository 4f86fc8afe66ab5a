"""Builders with defaults for the vocabulary, so each test states only what matters."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from fleetctl.model import InstanceType, Interconnect, Job, JobState, Market, Node, NodeState, Offer, Policy, PriorityClass, Team

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)


def itype(name: str = "g8", gpus: int = 8, model: str | None = "A100-80GB", vcpus: int = 96, memory_gib: float = 1152,
          provider: str = "aws", gpu_memory_gib: float = 80.0) -> InstanceType:
    return InstanceType(
        provider=provider,
        name=name,
        vcpus=vcpus,
        memory_gib=memory_gib,
        gpu_model=model if gpus else None,
        gpu_count=gpus,
        gpu_memory_gib=gpu_memory_gib if gpus else 0.0,
        interconnect=Interconnect.NVLINK if gpus >= 8 else (Interconnect.PCIE if gpus else Interconnect.NONE),
    )


def offer(name: str = "g8", gpus: int = 8, price: float = 10.0, market: Market = Market.SPOT, zone: str = "z1",
          region: str = "r1", provider: str = "aws", model: str | None = "A100-80GB", vcpus: int | None = None,
          memory_gib: float | None = None, gpu_memory_gib: float = 80.0) -> Offer:
    it = itype(name, gpus, model, vcpus if vcpus is not None else max(4, 12 * gpus),
               memory_gib if memory_gib is not None else max(16.0, 128.0 * gpus), provider, gpu_memory_gib)
    return Offer(instance_type=it, region=region, zone=zone, market=market, usd_per_hour=price)


def job(job_id: str = "j1", workers: int = 1, gpus: int = 1, models: tuple[str, ...] = (), priority: str = "batch",
        team: str = "a", submitted: datetime = T0, spot: bool | None = None, vcpus: float = 4, memory_gib: float = 16,
        state: JobState = JobState.QUEUED, node_ids: tuple[str, ...] = (), duration_hours: float = 1.0) -> Job:
    return Job(
        job_id=job_id, workers=workers, gpus_per_worker=gpus, gpu_models=models, vcpus_per_worker=vcpus,
        memory_gib_per_worker=memory_gib, priority=priority, team=team, duration_hours=duration_hours,
        submitted_at_utc=submitted, spot_eligible=spot, state=state, node_ids=node_ids,
    )


def node(node_id: str = "n1", of: Offer | None = None, state: NodeState = NodeState.READY,
         ready_at: datetime | None = None, zone: str = "") -> Node:
    """``zone``: where the provider placed it (``""``: unknown, so the offer's zone)."""
    of = of or offer()
    ready = ready_at or T0 - timedelta(hours=1)
    return Node(node_id=node_id, offer=of, state=state, launched_at_utc=ready - timedelta(minutes=1), ready_at_utc=ready,
                zone=zone)


def policy(**overrides) -> Policy:
    base = Policy(
        priority_classes=(
            PriorityClass("production", 1000, preemptible=False, spot_eligible=False),
            PriorityClass("batch", 100, preemptible=True, spot_eligible=True),
        ),
        default_priority_class="batch",
        teams=(Team("a", guaranteed_gpus=8, burst_gpus=64), Team("b", guaranteed_gpus=8, burst_gpus=64)),
        scale_down_cooldown_minutes=0.0,  # no cooldown unless a test is about it (tests/planner: cooldowns)
    )
    return replace(base, **overrides)
