"""Prometheus metrics of the controller, and the /metrics server.

Each ``FleetMetrics`` has its own registry (tests and the simulator make as
many as they like); ``serve`` exposes one over HTTP, with the daemon's
liveness and readiness probes (``/healthz``, ``/readyz``) beside it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter as Tally
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from fleetctl.model import Job, JobState, Market, Node, NodeState

if TYPE_CHECKING:
    from fleetctl.controller.health import LoopHealth

WAIT_BUCKETS_SECONDS = (30, 60, 180, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 259200)
TICK_BUCKETS_SECONDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
#: The outcomes of a policy reload (``Daemon.reload_policy``), each a series of ``fleetctl_policy_reloads_total``.
POLICY_RELOAD_OUTCOMES = ("applied", "unchanged", "invalid", "refused", "failed")


@dataclass(frozen=True, slots=True)
class FleetState:
    """The fleet's gauges at one moment; a labelled gauge as (label values, value) pairs."""

    nodes: tuple[tuple[tuple[str, str, str], float], ...] = ()  # (provider, market, state)
    gpus: tuple[tuple[tuple[str, str, str], float], ...] = ()  # (provider, market, state)
    gpu_allocation_ratio: float = 0.0
    queued_jobs: tuple[tuple[tuple[str, str], float], ...] = ()  # (priority, team)
    usd_per_hour: tuple[tuple[tuple[str, str], float], ...] = ()  # (provider, market)
    team_usd_per_hour: tuple[tuple[tuple[str], float], ...] = ()  # (team,), and IDLE_TEAM


#: The gauge families of a FleetState: its field, the metric's name, HELP and label names.
_FLEET_GAUGES = (
    ("nodes", "fleetctl_nodes", "Nodes by provider, market and state.", ("provider", "market", "state")),
    ("gpus", "fleetctl_gpus", "GPUs by provider, market and state.", ("provider", "market", "state")),
    ("gpu_allocation_ratio", "fleetctl_gpu_allocation_ratio", "Allocated GPUs over GPUs of ready nodes (0..1).", ()),
    ("queued_jobs", "fleetctl_queued_jobs", "Queued jobs by priority class and team.", ("priority", "team")),
    ("usd_per_hour", "fleetctl_usd_per_hour", "What the fleet costs now, USD per hour, by provider and market.",
     ("provider", "market")),
    ("team_usd_per_hour", "fleetctl_team_usd_per_hour",
     "What the fleet costs now, USD per hour, charged to each team by the GPUs its running jobs hold (a node's USD "
     "per GPU-hour times the GPUs held, as `fleetctl report` charges); team=\"(idle)\": the GPUs no running job "
     "holds. The series sum to fleetctl_usd_per_hour's.", ("team",)),
)

#: The team label of the GPUs no running job holds (``fleetctl report``'s row of the same name).
IDLE_TEAM = "(idle)"


class _FleetGauges(Collector):
    """The gauges ``observe_state`` refreshes, as one collector of the registry.

    Design choice: a scrape reads them from one immutable ``FleetState``,
    which ``observe_state`` replaces with a single assignment, so it sees the
    fleet before a refresh or after it, never part-way. prometheus-client's
    labelled Gauges are refreshed by ``clear()`` and then one ``set()`` per
    series: a scrape in between saw a family with no series (50 ready nodes
    exported as none), or the new nodes beside the old queue. A lock shared
    with the scrape would do as well, but makes a scrape wait for a refresh."""

    def __init__(self) -> None:
        self.state = FleetState()

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families(FleetState())  # the names, for the registry's duplicate check

    def collect(self) -> Iterable[GaugeMetricFamily]:
        return self._families(self.state)  # the state read once

    @staticmethod
    def _families(state: FleetState) -> list[GaugeMetricFamily]:
        families = []
        for field_name, name, documentation, labels in _FLEET_GAUGES:
            value = getattr(state, field_name)
            if not labels:
                families.append(GaugeMetricFamily(name, documentation, value=value))
                continue
            family = GaugeMetricFamily(name, documentation, labels=labels)
            for label_values, sample in value:
                family.add_metric(label_values, sample)
            families.append(family)
        return families


class FleetMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self._fleet = _FleetGauges()
        r.register(self._fleet)
        self.job_wait = Histogram("fleetctl_job_wait_seconds",
                                  "Seconds from submission to a job's first start (observed once per job; restarts "
                                  "after a reclaim or a migration are not waits).", buckets=WAIT_BUCKETS_SECONDS,
                                  registry=r)
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
        self.tick_seconds = Histogram("fleetctl_tick_duration_seconds",
                                      "Duration of the reconcile ticks that succeeded (one that fails is counted "
                                      "in fleetctl_tick_errors_total instead).",
                                      buckets=TICK_BUCKETS_SECONDS, registry=r)
        self.retrains = Counter("fleetctl_forecast_retrains",
                                "Scheduled refits of each forecasting model (interruption, demand) by outcome: "
                                "adopted (it replaced the model), kept (too little history, or it scored worse "
                                "than the current model), failed (an error).", ["model", "outcome"], registry=r)
        self.last_retrain = Gauge("fleetctl_forecast_last_retrain_timestamp_seconds",
                                  "Unix time of the last refit that replaced the model (0 until one does).",
                                  ["model"], registry=r)
        self.last_successful_tick = Gauge("fleetctl_last_successful_tick_timestamp_seconds",
                                          "Unix time of the end of the last reconcile tick that succeeded (0 until "
                                          "one does).", registry=r)
        self.tick_errors = Counter("fleetctl_tick_errors",
                                   "Reconcile ticks, notice passes, price refreshes, retrains, prunes and gauge "
                                   "refreshes that failed (logged, with the traceback unless the same pass failed "
                                   "the same way before; the daemon goes on).",
                                   registry=r)
        self.policy_reloads = Counter("fleetctl_policy_reloads",
                                      "Policy reloads asked for by SIGHUP or by a changed file "
                                      "(--policy-check-seconds), by outcome: applied (the daemon plans "
                                      "with it from the next pass), unchanged (no setting changed), invalid (the "
                                      "file has errors; the old policy stays), refused (it changes what is read "
                                      "at start only; the old policy stays), failed (an error of fleetctl's, "
                                      "logged with its traceback; the old policy stays).", ["outcome"], registry=r)
        for outcome in POLICY_RELOAD_OUTCOMES:  # each at 0 from the start: increase() misses a series born at 1
            self.policy_reloads.labels(outcome)
        self._policy_sha256: str | None = None
        self.policy_info = Gauge("fleetctl_policy_info",
                                 "1 for the policy the daemon plans with, labelled with the SHA-256 of the "
                                 "file's bytes it was read from (sha256sum of that version of the file).",
                                 ["sha256"], registry=r)
        self.clock_offset = Gauge("fleetctl_store_clock_offset_seconds",
                                  "This host's clock minus the PostgreSQL state store's, read each reconcile pass "
                                  "(0 on SQLite). Daemons on several hosts record times by their own clocks; a few "
                                  "seconds or more means NTP is not keeping them in step.", registry=r)
        self.lease_held = Gauge("fleetctl_controller_lease_held",
                                "1 if this daemon's last pass held the controller lease and acted, 0 if it was skipped "
                                "because another process (a cron reconcile, an apply, a second daemon) held it.",
                                registry=r)

    def observe_policy(self, sha256: str) -> None:
        """The policy the daemon runs now: its one ``fleetctl_policy_info``
        series (the new one is set before the old one goes, so a scrape in
        between sees both rather than none)."""
        self.policy_info.labels(sha256).set(1)
        if self._policy_sha256 not in (None, sha256):
            self.policy_info.remove(self._policy_sha256)
        self._policy_sha256 = sha256

    def observe_state(self, nodes: Iterable[Node], jobs: Iterable[Job]) -> None:
        """Refresh the fleet's gauges (nodes, GPUs, allocation, queue, USD/h)
        from the current nodes and jobs, all at once for a scrape."""
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
        ready = {n.node_id for n in node_list if n.state is NodeState.READY}
        live = {n.node_id: n for n in node_list}
        allocated = 0
        queued: Tally = Tally()
        team_usd: Tally = Tally()
        idle_usd = {n.node_id: n.offer.usd_per_hour for n in node_list}  # less what running jobs are charged
        for j in jobs:
            if j.state is JobState.RUNNING:
                allocated += sum(j.gpus_per_worker for nid in j.node_ids if nid in ready)
                for nid in sorted(set(j.node_ids) & live.keys()):
                    node = live[nid]
                    if node.offer.instance_type.gpu_count:
                        charged = (j.node_ids.count(nid) * j.gpus_per_worker * node.offer.usd_per_hour
                                   / node.offer.instance_type.gpu_count)
                        team_usd[(j.team,)] += charged
                        idle_usd[nid] -= charged
            elif j.state is JobState.QUEUED:
                queued[(j.priority, j.team)] += 1
        team_usd[(IDLE_TEAM,)] += sum(idle_usd.values())  # negative only on a node booked beyond its GPUs
        providers = sorted({n.offer.provider for n in node_list})
        self._fleet.state = FleetState(  # one assignment: a scrape sees the old state or this one, whole
            nodes=tuple((key, float(node_count[key])) for key in sorted(node_count)),
            gpus=tuple((key, float(gpu_count[key])) for key in sorted(node_count)),
            gpu_allocation_ratio=allocated / ready_gpus if ready_gpus else 0.0,
            queued_jobs=tuple((key, float(queued[key])) for key in sorted(queued)),
            usd_per_hour=tuple(((provider, market.value), float(usd.get((provider, market.value), 0.0)))
                               for provider in providers for market in Market),
            team_usd_per_hour=tuple((key, float(team_usd[key])) for key in sorted(team_usd)),
        )


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """A WSGI server with a daemon thread per request, bound in the family of its address."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[WSGIRequestHandler]) -> None:
        # The socketserver default is IPv4 only: '[::1]:9108' failed with "Address family for hostname not
        # supported" (prometheus-client's own server picks the family the same way)
        self.address_family = socket.getaddrinfo(address[0], address[1], type=socket.SOCK_STREAM,
                                                 flags=socket.AI_PASSIVE)[0][0]
        super().__init__(address, handler)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
        """No line on stderr per request: Prometheus scrapes and Kubernetes probes every few seconds."""


def make_app(metrics: FleetMetrics, health: LoopHealth | None = None) -> Callable:
    """The WSGI application: ``/healthz`` and ``/readyz`` answer ``health``'s
    liveness and readiness now (``time.monotonic``, the daemon's clock for
    it): 200 or 503, one line of plain text. Every other path is
    prometheus-client's metrics application, as before (without ``health``,
    every path is)."""
    metrics_app = make_wsgi_app(metrics.registry)
    if health is None:
        return metrics_app
    probes = {"/healthz": health.liveness, "/readyz": health.readiness}

    def app(environ: dict, start_response: Callable) -> list[bytes]:
        probe = probes.get(environ.get("PATH_INFO", ""))
        if probe is None:
            return metrics_app(environ, start_response)
        ok, message = probe(time.monotonic())
        body = f"{message}\n".encode()
        start_response("200 OK" if ok else "503 Service Unavailable",
                       [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))),
                        ("Cache-Control", "no-store")])
        return [body]

    return app


def serve(metrics: FleetMetrics, addr: str, health: LoopHealth | None = None):  # noqa: ANN201 - (server, thread)
    """Serve ``/metrics`` (and, with ``health``, ``/healthz`` and ``/readyz``:
    ``make_app``) on ``HOST:PORT``; returns the server to shut down and its thread."""
    from fleetctl.controller.notices import split_addr

    host, port = split_addr(addr, "--metrics-addr", "127.0.0.1:9108")
    server = make_server(host, port, make_app(metrics, health), _ThreadingWSGIServer, _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="fleetctl-metrics", daemon=True)
    thread.start()
    return server, thread
