"""Prometheus metrics of the controller, and the /metrics server.

Each ``FleetMetrics`` has its own registry (tests and the simulator make as
many as they like); ``serve`` exposes one over HTTP.
"""

from __future__ import annotations

from collections import Counter as Tally
from typing import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from fleetctl.model import Job, JobState, Market, Node, NodeState

WAIT_BUCKETS_SECONDS = (30, 60, 180, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 259200)
TICK_BUCKETS_SECONDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class FleetMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.nodes = Gauge("fleetctl_nodes", "Nodes by provider, market and state.", ["provider", "market", "state"], registry=r)
        self.gpus = Gauge("fleetctl_gpus", "GPUs by provider, market and state.", ["provider", "market", "state"], registry=r)
        self.gpu_allocation = Gauge("fleetctl_gpu_allocation_ratio", "Allocated GPUs over GPUs of ready nodes (0..1).", registry=r)
        self.queued = Gauge("fleetctl_queued_jobs", "Queued jobs by priority class and team.", ["priority", "team"], registry=r)
        self.job_wait = Histogram("fleetctl_job_wait_seconds",
                                  "Seconds from submission to a job's first start (observed once per job; restarts "
                                  "after a reclaim or a migration are not waits).", buckets=WAIT_BUCKETS_SECONDS,
                                  registry=r)
        self.usd_per_hour = Gauge("fleetctl_usd_per_hour", "What the fleet costs now, USD per hour, by provider and market.",
                                  ["provider", "market"], registry=r)
        self.interruptions = Counter("fleetctl_interruptions", "Reclaim notices and rebalance hints handled.",
                                     ["provider", "kind"], registry=r)
        self.checkpoints = Counter("fleetctl_checkpoints", "Checkpoints requested before a reclaim, a migration or a preemption.", registry=r)
        self.checkpoints_missed = Counter("fleetctl_checkpoints_missed",
                                          "Checkpoints asked for before a reclaim that could not finish in time "
                                          "(the notice's deadline, or the policy's checkpoint_grace_seconds): the "
                                          "work since the job's last checkpoint was lost.", registry=r)
        self.migrations = Counter("fleetctl_migrations", "Jobs moved to other nodes (consolidation, spot again after "
                                  "on-demand).", registry=r)
        self.preemptions = Counter("fleetctl_preemptions", "Jobs preempted for higher-priority work.", registry=r)
        self.fallbacks = Counter("fleetctl_on_demand_fallbacks", "On-demand launches for spot-eligible work: spot scarce, or the job interrupted more than the policy allows or its deadline at risk.", registry=r)
        self.lost_gpu_hours = Counter("fleetctl_lost_gpu_hours", "GPU-hours (a domain unit, like kWh) of work lost to reclaims (since the last checkpoint).", registry=r)
        self.completed = Counter("fleetctl_jobs_completed", "Jobs that finished.", registry=r)
        self.tick_seconds = Histogram("fleetctl_tick_duration_seconds", "Duration of one reconcile tick.",
                                      buckets=TICK_BUCKETS_SECONDS, registry=r)
        self.retrains = Counter("fleetctl_forecast_retrains",
                                "Scheduled refits of each forecasting model (interruption, demand) by outcome: "
                                "adopted (it replaced the model), kept (too little history, or it scored worse "
                                "than the current model), failed (an error).", ["model", "outcome"], registry=r)
        self.last_retrain = Gauge("fleetctl_forecast_last_retrain_timestamp_seconds",
                                  "Unix time of the last refit that replaced the model (0 until one does).",
                                  ["model"], registry=r)
        self.tick_errors = Counter("fleetctl_tick_errors",
                                   "Reconcile ticks, notice passes, price refreshes, retrains and prunes that failed "
                                   "(logged with the traceback; the daemon goes on).", registry=r)
        self.lease_held = Gauge("fleetctl_controller_lease_held",
                                "1 if this daemon's last pass held the controller lease and acted, 0 if it was skipped "
                                "because another process (a cron reconcile, an apply, a second daemon) held it.",
                                registry=r)

    def observe_state(self, nodes: Iterable[Node], jobs: Iterable[Job]) -> None:
        """Refresh the gauges from the current nodes and jobs."""
        node_count: Tally = Tally()
        gpu_count: Tally = Tally()
        usd: Tally = Tally()
        ready_gpus = 0
        node_list = [n for n in nodes if n.state is not NodeState.GONE]
        for n in node_list:
            key = (n.offer.provider, n.offer.market.value, n.state.value)
            node_count[key] += 1
            gpu_count[key] += n.offer.instance_type.gpu_count
            usd[(n.offer.provider, n.offer.market.value)] += n.offer.usd_per_hour
            if n.state is NodeState.READY:
                ready_gpus += n.offer.instance_type.gpu_count
        self.nodes.clear()
        self.gpus.clear()
        self.usd_per_hour.clear()
        for key, value in node_count.items():
            self.nodes.labels(*key).set(value)
            self.gpus.labels(*key).set(gpu_count[key])
        for provider in sorted({n.offer.provider for n in node_list}):
            for market in Market:
                self.usd_per_hour.labels(provider, market.value).set(usd.get((provider, market.value), 0.0))
        ready = {n.node_id for n in node_list if n.state is NodeState.READY}
        allocated = 0
        queued: Tally = Tally()
        for j in jobs:
            if j.state is JobState.RUNNING:
                allocated += sum(j.gpus_per_worker for nid in j.node_ids if nid in ready)
            elif j.state is JobState.QUEUED:
                queued[(j.priority, j.team)] += 1
        self.gpu_allocation.set(allocated / ready_gpus if ready_gpus else 0.0)
        self.queued.clear()
        for key, value in queued.items():
            self.queued.labels(*key).set(value)


def serve(metrics: FleetMetrics, addr: str):  # noqa: ANN201 - returns (server, thread)
    """Serve ``/metrics`` on ``HOST:PORT``; returns the server to shut down."""
    from fleetctl.controller.notices import split_addr

    host, port = split_addr(addr, "--metrics-addr")
    return start_http_server(port, addr=host, registry=metrics.registry)
