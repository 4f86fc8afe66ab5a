"""A small in-memory Compute Engine behind a local HTTP server, for the real
google-cloud-compute client (REST transport) to talk to.

It speaks the Compute v1 REST paths the GCP adapter uses, and nothing else
(an unknown path or filter is a 400, so a test fails loudly when the adapter
starts using a call the fake does not know):

* ``GET  /aggregated/machineTypes``, ``/aggregated/acceleratorTypes``
* ``GET  /aggregated/instances?filter=``, ``GET /zones/Z/instances/N``
* ``POST /regions/R/instances/bulkInsert?requestId=`` (``ANY_SINGLE_ZONE``, ``min_count``)
* ``POST /regions/R/operations/OP/wait``, ``POST /zones/Z/operations/OP/wait``
* ``DELETE /zones/Z/instances/N?requestId=``
* ``GET  /aggregated/operations?filter=``

Every resource is an SDK message (``compute_v1.Instance``, ``compute_v1.Operation``,
...), serialised with the SDK's own ``to_json``; enums as names, like the real API.
Only the error envelope (``{"error": {"code", "message", "errors": [...]}}``) is
plain JSON: Google's JSON error format has no SDK message class.

Operations: a bulk insert answers RUNNING and finishes on the first ``wait``
(so the adapter's own polling runs); deletes answer DONE at once. Operations
never point the client at compute.googleapis.com.

Injection: ``fail_next`` (HTTP errors such as 429 rateLimitExceeded),
``capacity`` (a zone's free slots per machine type; too few ->
ZONE_RESOURCE_POOL_EXHAUSTED), ``instance_quota`` (-> QUOTA_EXCEEDED),
``preempt`` (a ``compute.instances.preempted`` operation, and the instance
stopped or deleted per its termination action).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from google.cloud import compute_v1 as c

from tests.providers.localserver import LocalServer

API = "/compute/v1/projects/"
SELF_LINK = "https://www.googleapis.com/compute/v1/projects/"
DONE, RUNNING = c.Operation.Status.DONE, c.Operation.Status.RUNNING


def _json(message: Any) -> bytes:
    return type(message).to_json(message, use_integers_for_enums=False).encode()


def _stamp(at: datetime) -> str:
    return at.astimezone(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class Recorded:
    """One request the fake received (for assertions on what the adapter sent)."""

    method: str
    path: str
    query: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class _Injected:
    method: str
    path_contains: str
    status: int
    reason: str
    message: str
    times: int


@dataclass
class FakeGce:
    """The in-memory state of one project. Thread-safe (one lock)."""

    project: str
    now: datetime = field(default_factory=lambda: datetime(2025, 1, 6, 12, 0, tzinfo=timezone.utc))
    page_size: int = 500
    machine_types: dict[str, list[c.MachineType]] = field(default_factory=dict)  # zone -> types
    accelerator_types: dict[str, list[c.AcceleratorType]] = field(default_factory=dict)
    instances: dict[tuple[str, str], c.Instance] = field(default_factory=dict)  # (zone, name)
    operations: dict[str, tuple[str, c.Operation]] = field(default_factory=dict)  # name -> (scope, op)
    request_ids: dict[str, str] = field(default_factory=dict)  # requestId -> operation name
    capacity: dict[tuple[str, str], int] = field(default_factory=dict)  # (zone, machine type) -> free VMs
    instance_quota: int | None = None  # VMs the project may hold; None = no limit
    stockout_code: str = "ZONE_RESOURCE_POOL_EXHAUSTED"
    requests: list[Recorded] = field(default_factory=list)
    _injected: list[_Injected] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1000))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------ set-up

    def add_machine_type(self, zone: str, machine_type: c.MachineType) -> None:
        self.machine_types.setdefault(zone, []).append(
            c.MachineType(machine_type, zone=zone, self_link=f"{SELF_LINK}{self.project}/zones/{zone}/machineTypes/"
                                                                 f"{machine_type.name}"))

    def add_accelerator_type(self, zone: str, accelerator_type: c.AcceleratorType) -> None:
        self.accelerator_types.setdefault(zone, []).append(c.AcceleratorType(accelerator_type, zone=zone))

    def fail_next(self, method: str, path_contains: str, *, status: int, reason: str, message: str = "injected",
                  times: int = 1) -> None:
        """The next ``times`` requests matching ``method`` and ``path_contains`` get this HTTP error."""
        with self._lock:
            self._injected.append(_Injected(method, path_contains, status, reason, message, times))

    def preempt(self, zone: str, name: str, *, done: bool = True) -> c.Operation:
        """GCE reclaims a Spot VM: records the ``compute.instances.preempted``
        system operation and stops or deletes the instance (its termination action)."""
        with self._lock:
            instance = self.instances.get((zone, name))
            if done and instance is not None:
                if instance.scheduling.instance_termination_action == "STOP":
                    instance.status = "TERMINATED"
                else:
                    del self.instances[(zone, name)]
            elif instance is not None:
                instance.status = "STOPPING"
            op = self._operation(f"zones/{zone}", "compute.instances.preempted",
                                 target=f"{SELF_LINK}{self.project}/zones/{zone}/instances/{name}",
                                 status=DONE if done else RUNNING, user="system")
            op.status_message = "Instance was preempted."
            return op

    def created(self) -> list[c.Instance]:
        with self._lock:
            return [self.instances[k] for k in sorted(self.instances)]

    # ------------------------------------------------------------ helpers

    def _operation(self, scope: str, kind: str, *, target: str, status: c.Operation.Status,
                   user: str = "fleetctl@example.iam.gserviceaccount.com") -> c.Operation:
        op_id = next(self._ids)
        name = f"operation-{op_id}"
        op = c.Operation(
            id=op_id, name=name, operation_type=kind, target_link=target, status=status, user=user,
            insert_time=_stamp(self.now), start_time=_stamp(self.now), progress=100 if status == DONE else 0,
            self_link=f"{SELF_LINK}{self.project}/{scope}/operations/{name}",
        )
        if scope.startswith("zones/"):
            op.zone = f"{SELF_LINK}{self.project}/{scope}"
        else:
            op.region = f"{SELF_LINK}{self.project}/{scope}"
        if status == DONE:
            op.end_time = _stamp(self.now)
        self.operations[name] = (scope, op)
        return op

    def _zones(self, region: str) -> list[str]:
        return sorted(z for z in self.machine_types if z.rsplit("-", 1)[0] == region)

    def _bulk_insert(self, region: str, body: dict[str, Any], request_id: str | None) -> c.Operation:
        if request_id and request_id in self.request_ids:
            return self.operations[self.request_ids[request_id]][1]
        resource = c.BulkInsertInstanceResource.from_json(json.dumps(body), ignore_unknown_fields=True)
        props = resource.instance_properties
        # Validation errors come back at once, before any operation exists.
        if not any(mt.name == props.machine_type for z in self._zones(region) for mt in self.machine_types[z]):
            raise _HttpError(400, "invalid", f"Invalid value for field 'resource.instanceProperties.machineType': "
                                             f"'{props.machine_type}'. Machine type with name "
                                             f"'{props.machine_type}' does not exist in region '{region}'.")
        op = self._operation(f"regions/{region}", "bulkInsert", status=RUNNING,
                             target=f"{SELF_LINK}{self.project}/regions/{region}/instances")
        if request_id:
            self.request_ids[request_id] = op.name
        count, min_count = resource.count, resource.min_count or resource.count
        pending: list[c.Errors] = []
        if self.instance_quota is not None and len(self.instances) + min_count > self.instance_quota:
            pending.append(c.Errors(code="QUOTA_EXCEEDED", message=f"Quota 'INSTANCES' exceeded. Limit: "
                                                                     f"{self.instance_quota} in region {region}."))
        zone = next((z for z in self._zones(region)
                     if any(mt.name == props.machine_type for mt in self.machine_types[z])
                     and self.capacity.get((z, props.machine_type), 1 << 30) >= min_count), None)
        if not pending and zone is None:
            pending.append(c.Errors(code=self.stockout_code,
                                    message=f"The zone does not have enough resources available to fulfill the "
                                            f"request. '(resource type:compute)'. {props.machine_type}"))
        if pending:
            op.error = c.Error(errors=pending)
            op.http_error_status_code = 403 if pending[0].code == "QUOTA_EXCEEDED" else 503
            op.http_error_message = "FORBIDDEN" if op.http_error_status_code == 403 else "SERVICE UNAVAILABLE"
            return op
        assert zone is not None
        free = self.capacity.get((zone, props.machine_type), 1 << 30)
        made = min(count, free)
        if (zone, props.machine_type) in self.capacity:
            self.capacity[(zone, props.machine_type)] = free - made
        width = len(re.search(r"#+", resource.name_pattern).group(0))  # type: ignore[union-attr]
        # GCE lists a machine type's bundled GPUs (a2, a3, g2) among the instance's guestAccelerators too.
        bundled = next(mt for mt in self.machine_types[zone] if mt.name == props.machine_type).accelerators
        accelerators = [(a.accelerator_type, a.accelerator_count) for a in props.guest_accelerators] or [
            (a.guest_accelerator_type, a.guest_accelerator_count) for a in bundled]
        for index in range(1, made + 1):
            name = re.sub(r"#+", str(index).zfill(width), resource.name_pattern, count=1)
            self.instances[(zone, name)] = c.Instance(
                id=next(self._ids), name=name, status="RUNNING", labels=dict(props.labels),
                machine_type=f"{SELF_LINK}{self.project}/zones/{zone}/machineTypes/{props.machine_type}",
                zone=f"{SELF_LINK}{self.project}/zones/{zone}",
                scheduling=props.scheduling,
                guest_accelerators=[c.AcceleratorConfig(
                    accelerator_type=f"{SELF_LINK}{self.project}/zones/{zone}/acceleratorTypes/{gpu}",
                    accelerator_count=n) for gpu, n in accelerators],
                creation_timestamp=_stamp(self.now), last_start_timestamp=_stamp(self.now),
            )
        return op

    def _wait(self, name: str) -> c.Operation | None:
        found = self.operations.get(name)
        if found is None:
            return None
        op = found[1]
        op.status, op.progress, op.end_time = DONE, 100, op.end_time or _stamp(self.now)
        return op

    def _delete(self, zone: str, name: str, request_id: str | None) -> c.Operation | None:
        if request_id and request_id in self.request_ids:
            return self.operations[self.request_ids[request_id]][1]
        if self.instances.pop((zone, name), None) is None:
            return None
        op = self._operation(f"zones/{zone}", "delete", status=DONE,
                             target=f"{SELF_LINK}{self.project}/zones/{zone}/instances/{name}")
        if request_id:
            self.request_ids[request_id] = op.name
        return op

    def _page(self, pairs: list[tuple[str, Any]], token: str | None) -> tuple[list[tuple[str, Any]], str]:
        start = int(token or 0)
        end = start + self.page_size
        return pairs[start:end], (str(end) if end < len(pairs) else "")

    # ------------------------------------------------------------ dispatch

    def handle(self, method: str, path: str, query: dict[str, str], body: dict[str, Any] | None
               ) -> tuple[int, bytes]:
        with self._lock:
            self.requests.append(Recorded(method, path, query, body))
            for inj in self._injected:
                if inj.times > 0 and inj.method == method and inj.path_contains in path:
                    inj.times -= 1
                    return inj.status, _error(inj.status, inj.reason, inj.message)
            if not path.startswith(API + self.project + "/"):
                return 404, _error(404, "notFound", f"The resource '{path}' was not found")
            return self._route(method, path[len(API + self.project):], query, body)

    def _route(self, method: str, rest: str, query: dict[str, str], body: dict[str, Any] | None
               ) -> tuple[int, bytes]:
        token = query.get("pageToken")
        try:
            where = _Filter(query.get("filter", ""))
        except ValueError as exc:
            return 400, _error(400, "invalid", str(exc))
        if method == "GET" and rest == "/aggregated/machineTypes":
            pairs = [(z, mt) for z in sorted(self.machine_types) for mt in self.machine_types[z]]
            page, nxt = self._page(pairs, token)
            return 200, _json(c.MachineTypeAggregatedList(
                items=_scoped(page, "zones", lambda items: c.MachineTypesScopedList(machine_types=items)),
                next_page_token=nxt))
        if method == "GET" and rest == "/aggregated/acceleratorTypes":
            pairs = [(z, at) for z in sorted(self.accelerator_types) for at in self.accelerator_types[z]]
            page, nxt = self._page(pairs, token)
            return 200, _json(c.AcceleratorTypeAggregatedList(
                items=_scoped(page, "zones", lambda items: c.AcceleratorTypesScopedList(accelerator_types=items)),
                next_page_token=nxt))
        if method == "GET" and rest == "/aggregated/instances":
            pairs = [(z, i) for (z, _), i in sorted(self.instances.items()) if where.matches(i)]
            page, nxt = self._page(pairs, token)
            return 200, _json(c.InstanceAggregatedList(
                items=_scoped(page, "zones", lambda items: c.InstancesScopedList(instances=items)),
                next_page_token=nxt))
        if method == "GET" and rest == "/aggregated/operations":
            pairs = [(scope, op) for scope, op in self.operations.values() if where.matches(op)]
            page, nxt = self._page(pairs, token)
            return 200, _json(c.OperationAggregatedList(
                items=_scoped(page, "", lambda items: c.OperationsScopedList(operations=items)),
                next_page_token=nxt))
        if m := re.fullmatch(r"/zones/([a-z0-9-]+)/instances/([a-z0-9-]+)", rest):
            zone, name = m.groups()
            if method == "GET":
                instance = self.instances.get((zone, name))
                if instance is None:
                    return 404, _error(404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}/"
                                                        f"instances/{name}' was not found")
                return 200, _json(instance)
            if method == "DELETE":
                op = self._delete(zone, name, query.get("requestId"))
                if op is None:
                    return 404, _error(404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}/"
                                                        f"instances/{name}' was not found")
                return 200, _json(op)
        if method == "POST" and (m := re.fullmatch(r"/regions/([a-z0-9-]+)/instances/bulkInsert", rest)):
            try:
                return 200, _json(self._bulk_insert(m.group(1), body or {}, query.get("requestId")))
            except _HttpError as exc:
                return exc.status, _error(exc.status, exc.reason, exc.message)
        if method == "POST" and (m := re.fullmatch(r"/(?:regions|zones)/[a-z0-9-]+/operations/([a-z0-9-]+)/wait",
                                                   rest)):
            op = self._wait(m.group(1))
            if op is None:
                return 404, _error(404, "notFound", f"operation {m.group(1)} not found")
            return 200, _json(op)
        return 400, _error(400, "invalid", f"the fake GCE does not serve {method} {rest}")


@dataclass
class _HttpError(Exception):
    status: int
    reason: str
    message: str


class _Filter:
    """The subset of the Compute list-filter syntax the adapter sends:
    ``(a = "x") AND (labels.k = "y")``; anything else is refused."""

    _TERM = re.compile(r'^\(?\s*([A-Za-z][A-Za-z0-9_.-]*)\s*=\s*"([^"]*)"\s*\)?$')

    def __init__(self, text: str) -> None:
        self.terms: list[tuple[str, str]] = []
        for part in filter(None, (p.strip() for p in text.split(" AND ")) if text else ()):
            m = self._TERM.match(part)
            if m is None:
                raise ValueError(f"unsupported filter term {part!r}")
            self.terms.append((m.group(1), m.group(2)))

    def matches(self, resource: Any) -> bool:
        for key, want in self.terms:
            if key.startswith("labels."):
                got = resource.labels.get(key[len("labels."):])
            else:
                snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), key)
                got = getattr(resource, snake, None)
                got = getattr(got, "name", got)
            if got != want:
                return False
        return True


def _scoped(pairs: list[tuple[str, Any]], prefix: str, make: Any) -> dict[str, Any]:
    grouped: dict[str, list[Any]] = {}
    for scope, item in pairs:
        grouped.setdefault(f"{prefix}/{scope}" if prefix else scope, []).append(item)
    return {scope: make(items) for scope, items in grouped.items()}


def _error(status: int, reason: str, message: str) -> bytes:
    domain = "usageLimits" if reason in ("rateLimitExceeded", "quotaExceeded") else "global"
    return json.dumps({"error": {"code": status, "message": message,
                                 "errors": [{"domain": domain, "reason": reason, "message": message}]}}).encode()


class GceServer(LocalServer):
    """``FakeGce`` served on ``http://127.0.0.1:PORT`` from a daemon thread."""

    def __init__(self, fake: FakeGce) -> None:
        self.fake = fake
        super().__init__(_handler(fake))


def _handler(fake: FakeGce) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out at once: no 40 ms delayed-ACK stalls

        def _serve(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            status, payload = fake.handle(self.command, url.path, query, body)
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            """Quiet: the fake's request log is ``FakeGce.requests``."""

    return Handler
