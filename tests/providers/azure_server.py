"""A small in-memory Azure Resource Manager (Compute) behind a local HTTPS
server, for the real azure-mgmt-compute client to talk to.

HTTPS with a throwaway ``trustme`` CA (the client's ``connection_verify``
points at it), so the SDK's bearer-token policy runs: every request must carry
``Authorization: Bearer <token>`` or gets a 401. Paths (``api-version`` is
required and otherwise ignored):

* ``GET /subscriptions/S/providers/Microsoft.Compute/skus?$filter=location eq 'L'``
* ``GET /subscriptions/S/resourceGroups/G/providers/Microsoft.Compute/virtualMachines[/N]``
* ``PUT .../virtualMachines/N``: 201 ``Creating`` with an ``Azure-AsyncOperation``
  URL on this server; the operation answers ``Succeeded`` (the VM is then
  ``Succeeded``) or ``Failed`` with ``AllocationFailed`` when the region has
  no capacity left for the size. A size the subscription may not use there is
  a synchronous 409 ``SkuNotAvailable``.
* ``DELETE .../virtualMachines/N``: 202 plus an operation; 204 if there is no such VM.
* ``GET /subscriptions/S/providers/Microsoft.Compute/locations/L/operations/ID``

Resources are the SDK's own models (``ResourceSku``, ``VirtualMachine``),
serialised with their ``as_dict()``. Injection: ``fail_next`` (any status and
ARM error code), ``capacity`` (free VMs per (location, size)), ``evict``.
"""

from __future__ import annotations

import itertools
import json
import re
import ssl
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import trustme
from azure.core.credentials import AccessToken
from azure.mgmt.compute import models as m

from tests.providers.localserver import LocalServer

TOKEN = "fleetctl-test-token"


class StaticToken:
    """A TokenCredential handing out one bearer token (the real credential
    classes need Entra ID; the token path in the SDK is what is exercised)."""

    def __init__(self) -> None:
        self.requests = 0

    def get_token(self, *scopes: str, **_: Any) -> AccessToken:
        assert scopes == ("https://management.azure.com/.default",), scopes
        self.requests += 1
        return AccessToken(TOKEN, 4102444800)  # 2100-01-01


def gpu_sku(size: str, location: str, *, restricted: bool = False) -> m.ResourceSku:
    # restrictions are read-only in the SDK (the service fills them): built from their wire form
    restrictions = [m.ResourceSkuRestrictions({"type": "Location", "values": [location],
                                               "reasonCode": "NotAvailableForSubscription"})] if restricted else []
    return m.ResourceSku(resource_type="virtualMachines", name=size, tier="Standard", locations=[location],
                         restrictions=restrictions)


@dataclass
class _Injected:
    method: str
    path_contains: str
    status: int
    code: str
    message: str


@dataclass
class FakeArm:
    subscription: str
    now: datetime = field(default_factory=lambda: datetime(2025, 1, 6, 12, 0, tzinfo=timezone.utc))
    skus: list[m.ResourceSku] = field(default_factory=list)
    vms: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (group, name) -> wire JSON
    capacity: dict[tuple[str, str], int] = field(default_factory=dict)  # (location, size) -> free VMs
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, Any] | None]] = field(default_factory=list)
    injected: list[_Injected] = field(default_factory=list)
    base_url: str = ""
    _ids: Any = field(default_factory=itertools.count)

    def fail_next(self, method: str, path_contains: str, *, status: int, code: str, message: str = "injected") -> None:
        self.injected.append(_Injected(method, path_contains, status, code, message))

    def evict(self, group: str, name: str) -> None:
        """Spot eviction with policy Delete: the VM is gone."""
        del self.vms[(group, name)]

    def puts(self) -> list[dict[str, Any]]:
        return [body for method, _path, body in self.requests if method == "PUT" and body is not None]

    # ------------------------------------------------------------------ routing

    def handle(self, method: str, path: str, query: dict[str, str], body: dict[str, Any] | None,
               authorization: str) -> tuple[int, dict[str, str], bytes]:
        self.requests.append((method, path, body))
        if authorization != f"Bearer {TOKEN}":
            return _error(401, "AuthenticationFailed", "missing or wrong bearer token")
        if "api-version" not in query:
            return _error(400, "MissingApiVersionParameter", "The api-version query parameter is required")
        for i, inj in enumerate(self.injected):
            if inj.method == method and inj.path_contains in path:
                del self.injected[i]
                return _error(inj.status, inj.code, inj.message)
        prefix = f"/subscriptions/{self.subscription}"
        if not path.startswith(prefix):
            return _error(404, "SubscriptionNotFound", path)
        rest = path[len(prefix):]
        if method == "GET" and rest == "/providers/Microsoft.Compute/skus":
            location = re.fullmatch(r"location eq '([^']+)'", query.get("$filter", ""))
            skus = [s for s in self.skus if location is None or location.group(1) in (s.locations or [])]
            return _ok(200, {"value": [s.as_dict() for s in skus]})
        op = re.fullmatch(r"/providers/Microsoft.Compute/locations/([^/]+)/operations/([^/]+)", rest)
        if op and method == "GET":
            return _ok(200, self.operations[op.group(2)])
        vm = re.fullmatch(r"/resourceGroups/([^/]+)/providers/Microsoft.Compute/virtualMachines(?:/([^/]+))?", rest)
        if vm is None:
            return _error(400, "UnknownPath", f"the fake does not serve {method} {path}")
        group, name = vm.group(1), vm.group(2)
        if name is None and method == "GET":
            return _ok(200, {"value": [v for (g, _), v in sorted(self.vms.items()) if g == group]})
        if method == "GET":
            found = self.vms.get((group, name))
            return _ok(200, found) if found else _error(404, "ResourceNotFound", f"VM {name} not found")
        if method == "PUT":
            return self._put(group, name, body or {})
        if method == "DELETE":
            if (group, name) not in self.vms:
                return 204, {}, b""
            self.vms[(group, name)]["properties"]["provisioningState"] = "Deleting"
            location = self.vms[(group, name)]["location"]
            del self.vms[(group, name)]
            return self._async(202, location, {"status": "Succeeded"}, None)
        return _error(405, "MethodNotAllowed", method)

    def _put(self, group: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        request = m.VirtualMachine(body)  # parsed with the SDK's model: what the client sent, as Azure reads it
        location, size = request.location, request.hardware_profile.vm_size
        sku = next((s for s in self.skus if s.name == size and location in (s.locations or [])), None)
        if sku is None or any(r.type == "Location" for r in (sku.restrictions or [])):
            return _error(409, "SkuNotAvailable", f"The requested VM size {size} is currently not available in "
                                                  f"location '{location}' for this subscription.")
        existing = self.vms.get((group, name))
        if existing is not None:  # create-or-update: the same VM, nothing new bought
            existing["tags"] = body.get("tags", existing.get("tags"))
            return _ok(200, existing)
        free = self.capacity.get((location, size), 10**6)
        vm_id = (f"/subscriptions/{self.subscription}/resourceGroups/{group}/providers/Microsoft.Compute/"
                 f"virtualMachines/{name}")
        if free <= 0:
            # As ARM does: the VM resource stays behind in the Failed state until someone deletes it.
            self.vms[(group, name)] = {**body, "id": vm_id, "name": name, "type": "Microsoft.Compute/virtualMachines",
                                       "properties": {**body.get("properties", {}), "provisioningState": "Failed"}}
            return self._async(201, location, {"status": "Failed", "error": {
                "code": "AllocationFailed",
                "message": f"Allocation failed. We do not have sufficient capacity for the requested VM size "
                           f"{size} in this region."}}, {**body, "id": vm_id, "name": name,
                                                         "properties": {**body.get("properties", {}),
                                                                        "provisioningState": "Creating"}})
        self.capacity[(location, size)] = free - 1
        stored = {**body, "id": vm_id, "name": name, "type": "Microsoft.Compute/virtualMachines",
                  "properties": {**body.get("properties", {}), "provisioningState": "Succeeded",
                                 "vmId": f"{next(self._ids):08d}-0000-0000-0000-000000000000",
                                 "timeCreated": self.now.isoformat().replace("+00:00", "Z")}}
        self.vms[(group, name)] = stored
        creating = json.loads(json.dumps(stored))
        creating["properties"]["provisioningState"] = "Creating"
        return self._async(201, location, {"status": "Succeeded"}, creating)

    def _async(self, status: int, location: str, outcome: dict[str, Any],
               body: dict[str, Any] | None) -> tuple[int, dict[str, str], bytes]:
        op_id = f"op-{next(self._ids)}"
        self.operations[op_id] = {"name": op_id, **outcome}
        url = (f"{self.base_url}/subscriptions/{self.subscription}/providers/Microsoft.Compute/locations/"
               f"{location}/operations/{op_id}?api-version=2024-11-01")
        payload = json.dumps(body).encode() if body is not None else b""
        return status, {"Azure-AsyncOperation": url, "Retry-After": "0"}, payload


def _ok(status: int, body: Any) -> tuple[int, dict[str, str], bytes]:
    return status, {}, json.dumps(body).encode()


def _error(status: int, code: str, message: str) -> tuple[int, dict[str, str], bytes]:
    return status, {"x-ms-error-code": code}, json.dumps({"error": {"code": code, "message": message}}).encode()


class ArmServer(LocalServer):
    """``FakeArm`` on ``https://127.0.0.1:PORT``; ``ca_file`` is the CA to trust."""

    def __init__(self, fake: FakeArm, directory: Path) -> None:
        self.fake = fake
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = directory / "arm-ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(context)
        super().__init__(_handler(fake), tls=context)
        fake.base_url = self.endpoint


def _handler(fake: FakeArm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def _serve(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            status, headers, payload = fake.handle(self.command, url.path, query, body,
                                                   self.headers.get("Authorization", ""))
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Quiet: the fake's request log is ``FakeArm.requests``."""

    return Handler
