"""Local fakes of the three instance metadata services, each a real HTTP
server on 127.0.0.1 checking what the real one checks:

* ``FakeImds``: EC2 IMDSv2 (a session token from ``PUT /latest/api/token``
  with a TTL header; every GET without a valid token is 401);
* ``FakeGce``: the GCE metadata server (``Metadata-Flavor: Google`` or 403;
  ``wait_for_change=true`` blocks until ``preempted`` changes);
* ``FakeAzure``: Azure IMDS Scheduled Events (``Metadata: true`` and an
  ``api-version`` or 400; acknowledgements (``StartRequests``) recorded).
"""

from __future__ import annotations

import abc
import json
import secrets
import threading
import urllib.parse
from datetime import datetime, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


class FakeServer(abc.ABC):
    """Subclasses implement ``handle(method, path, query, headers, body) -> (status, content_type, body)``."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parsed.query))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                fake.requests.append((self.command, self.path, headers))
                status, ctype, data, *extra = fake.handle(self.command, parsed.path, query, headers, body)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                for name, value in (extra[0] if extra else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = _any  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=lambda: self._httpd.serve_forever(poll_interval=0.05), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @abc.abstractmethod
    def handle(self, method: str, path: str, query: dict[str, str], headers: dict[str, str],
               body: bytes) -> tuple[int, str, bytes]: ...

    def __enter__(self):  # noqa: ANN204
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __exit__(self, *exc: object) -> None:
        self.close()


def _text(status: int, text: str) -> tuple[int, str, bytes]:
    return status, "text/plain", text.encode()


def _json(status: int, doc: object) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(doc).encode()


class FakeImds(FakeServer):
    def __init__(self, instance_id: str) -> None:
        super().__init__()
        self.instance_id = instance_id
        self.instance_action: dict | None = None  # {"action": ..., "time": ...} once a notice stands
        self.rebalance: dict | None = None  # {"noticeTime": ...}
        self.tokens: set[str] = set()

    def revoke_tokens(self) -> None:
        """As if the tokens expired: the next GET with one is 401."""
        self.tokens.clear()

    def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
        if path == "/latest/api/token":
            if method != "PUT":
                return _text(405, "token requests are PUT")
            ttl = headers.get("x-aws-ec2-metadata-token-ttl-seconds", "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return _text(400, "missing or invalid X-aws-ec2-metadata-token-ttl-seconds")
            token = secrets.token_urlsafe(16)
            self.tokens.add(token)
            return _text(200, token)
        if headers.get("x-aws-ec2-metadata-token") not in self.tokens:
            return _text(401, "Unauthorized")
        if method != "GET":
            return _text(405, "GET only")
        if path == "/latest/meta-data/instance-id":
            return _text(200, self.instance_id)
        if path == "/latest/meta-data/spot/instance-action":
            return _json(200, self.instance_action) if self.instance_action else _text(404, "Not Found")
        if path == "/latest/meta-data/events/recommendations/rebalance":
            return _json(200, self.rebalance) if self.rebalance else _text(404, "Not Found")
        return _text(404, "Not Found")


class FakeGce(FakeServer):
    """``preempted`` answers carry an ``ETag``; ``wait_for_change=true`` waits
    until the value changes, or answers at once when ``last_etag`` is not the
    current one (as the real server does)."""

    def __init__(self, name: str, instance_id: str = "7311894150011125221", zone: str = "us-central1-a") -> None:
        super().__init__()
        self.name = name
        self.zone = zone
        self.instance_id = instance_id
        self.first_true_served: datetime | None = None  # when TRUE was first answered (wall clock)
        self.waiting = threading.Event()  # set while a wait_for_change request is blocked
        self._preempted = False
        self._changed = threading.Condition()
        self._closing = False

    @staticmethod
    def etag(value: bool) -> str:
        return "e-true" if value else "e-false"

    def preempt(self) -> None:
        with self._changed:
            self._preempted = True
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        super().close()

    def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
        if headers.get("metadata-flavor") != "Google":
            return _text(403, "Missing Metadata-Flavor:Google header.")
        base = "/computeMetadata/v1/instance/"
        if method != "GET" or not path.startswith(base):
            return _text(404, "Not Found")
        key = path.removeprefix(base)
        if key == "name":
            return _text(200, self.name)
        if key == "zone":
            return _text(200, f"projects/431279911012/zones/{self.zone}")
        if key == "id":
            return _text(200, self.instance_id)
        if key == "preempted":
            with self._changed:
                if query.get("wait_for_change") == "true":
                    seen = query.get("last_etag") or self.etag(self._preempted)
                    timeout = float(query.get("timeout_sec", "30"))
                    self.waiting.set()
                    self._changed.wait_for(lambda: self.etag(self._preempted) != seen or self._closing,
                                           timeout=timeout)
                    self.waiting.clear()
                value = self._preempted
            if value and self.first_true_served is None:
                self.first_true_served = datetime.now(timezone.utc)
            return (*_text(200, "TRUE" if value else "FALSE"), {"ETag": self.etag(value)})
        return _text(404, "Not Found")


class FakeAzure(FakeServer):
    def __init__(self, vm_name: str, on_ack: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.vm_name = vm_name
        self.events: list[dict] = []
        self.incarnation = 1
        self.acks: list[str] = []
        self.on_ack = on_ack  # called with each acknowledged EventId, before the answer
        self.refuse_acks = False  # answer acknowledgements with 500 (IMDS having a bad moment)

    def schedule_preempt(self, event_id: str, not_before: datetime, resources: list[str] | None = None) -> None:
        self.events.append({
            "EventId": event_id,
            "EventType": "Preempt",
            "ResourceType": "VirtualMachine",
            "Resources": resources if resources is not None else [self.vm_name],
            "EventStatus": "Scheduled",
            "NotBefore": format_datetime(not_before, usegmt=True),  # "Mon, 02 Nov 2026 09:03:00 GMT"
            "Description": "The virtual machine is being evicted.",
            "EventSource": "Platform",
            "DurationInSeconds": -1,
        })
        self.incarnation += 1

    def handle(self, method, path, query, headers, body):  # noqa: ANN001, ANN201
        if headers.get("metadata") != "true":
            return _json(400, {"error": "Bad request. Required metadata header not specified"})
        if "api-version" not in query:
            return _json(400, {"error": "Bad request. api-version was not specified in the request"})
        if path == "/metadata/instance/compute/name" and method == "GET":
            if query.get("format") == "text":
                return _text(200, self.vm_name)
            return _json(200, self.vm_name)
        if path != "/metadata/scheduledevents":
            return _json(404, {"error": "Not found"})
        if method == "GET":
            return _json(200, {"DocumentIncarnation": self.incarnation, "Events": self.events})
        if method == "POST":
            if self.refuse_acks:
                return _json(500, {"error": "Internal server error"})
            try:
                starts = json.loads(body)["StartRequests"]
                ids = [s["EventId"] for s in starts]
            except (ValueError, KeyError, TypeError):
                return _json(400, {"error": "Bad request. Invalid StartRequests"})
            for event_id in ids:
                if self.on_ack is not None:
                    self.on_ack(event_id)
                self.acks.append(event_id)
                for ev in self.events:
                    if ev["EventId"] == event_id:
                        ev["EventStatus"] = "Started"
                        ev["NotBefore"] = ""
            self.incarnation += 1
            return _text(200, "")
        return _json(405, {"error": "Method not allowed"})
