"""The daemon's notice endpoint: ``POST /v1/notices`` for ``fleetctl node-watch``.

GCP (30 s) and Azure (at least 30 s) announce a reclaim only on the node
itself, through its metadata service; AWS announces it there too. The watcher
on each node posts what it sees here, and the endpoint turns it into the same
``InterruptionEvent`` the provider path produces and writes it to the store.
The daemon's next interruptions pass (every few seconds) handles it like any
other notice, or, while a reconcile tick runs, asks that tick to handle it at
its next safe point: cordon, checkpoint, requeue, re-place
(``reconcile.handle_interruptions`` takes unhandled notices from the store as
well as from the provider).

The request body (JSON, at most 64 KiB)::

    {"provider": "gcp",                      # aws | gcp | azure
     "node_id": "my-node",                   # fleetctl's id of the node
     "kind": "reclaim_warning",              # reclaim_warning | rebalance | terminated
     "notice_id": "preempted@7311894",       # the cloud's identity of this notice
     "deadline_utc": "2026-11-02T09:00:30Z", # when the cloud takes the node; null if none
     "detail": "GCE instance/preempted=TRUE"}  # optional, for the audit log

Answers: ``202 {"event_id": ..., "duplicate": false}`` once the notice is
stored (``duplicate: true`` when the same notice was stored before: a re-post
is idempotent, because ``event_id`` is derived from provider, node, kind and
notice id); ``400`` naming each bad field; ``401`` without the right bearer
token; ``404``/``405`` for other paths and methods; ``413`` for a body over
the limit; ``500`` if the store fails (the watcher retries).

``GET /v1/notices/EVENT_ID`` (same bearer token) answers ``200 {"event_id",
"handled": bool, "handled_at_utc", "node_known"}`` or ``404`` for a notice never
stored. ``handled`` turns true once the interruptions pass drained the node: its
jobs checkpointed (within the notice) and requeued; ``node_known`` is then false
if the controller did not know the node, so nothing was drained (null before). The Azure watcher approves the
Scheduled Event (which lets Azure evict at once instead of at ``NotBefore``)
only then, so an early approval never cuts a checkpoint short.

Design choice: the endpoint writes to the store and nothing else, instead of
handling the notice in the request. Handling needs the daemon's lock and may
take a while (checkpoints); the watcher needs an answer at once so it can
acknowledge the cloud (Azure) and stop retrying. Storing first is also what
DESIGN.md asks of every new fact: a daemon restarted between the post and the
handling loses nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import ipaddress
import json
import logging
import socket
import sys
import threading
import time
import urllib.parse
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Annotated, Any, Callable, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from fleetctl.codec import dt_to_str
from fleetctl.model import RECLAIM_NOTICE_SECONDS, InterruptionEvent, InterruptionKind
from fleetctl.nodewatch import MAX_DETAIL, MAX_NODE_ID, MAX_NOTICE_ID, NOTICES_PATH, token_problem
from fleetctl.store import Store

log = logging.getLogger("fleetctl.notices")

MAX_BODY_BYTES = 64 * 1024


def _time_text(value: object) -> object:
    """``deadline_utc`` is a time with a zone, written as ISO 8601; pydantic
    alone also took a number, or a string of one, as seconds since 1970."""
    if value is None:
        return value
    numeric = not isinstance(value, str)
    if not numeric:
        try:
            float(value)
            numeric = True
        except ValueError:
            pass
    if numeric:
        raise ValueError(f"expected an ISO 8601 time with a zone, e.g. 2026-11-02T09:00:30Z, not {value!r}")
    return value


class NoticeBody(BaseModel):
    """The JSON a node posts. Pydantic at the edge; converted to an
    ``InterruptionEvent`` once, by ``to_event``."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    provider: Literal["aws", "gcp", "azure"]
    node_id: str = Field(min_length=1, max_length=MAX_NODE_ID)
    kind: InterruptionKind
    notice_id: str = Field(min_length=1, max_length=MAX_NOTICE_ID)
    deadline_utc: Annotated[AwareDatetime | None, BeforeValidator(_time_text)] = None
    detail: str = Field(default="", max_length=MAX_DETAIL)


class InvalidNotice(ValueError):
    """A body that is not a valid notice; ``issues`` are ``(field, message)``."""

    def __init__(self, issues: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{f}: {m}" for f, m in issues))
        self.issues = issues


def event_id_for(provider: str, node_id: str, kind: InterruptionKind, notice_id: str) -> str:
    """Deterministic: the same notice posted twice (a retry, a restarted
    watcher) gets the same id, so the store keeps one event."""
    digest = hashlib.sha256("\0".join((provider, node_id, kind.value, notice_id)).encode()).hexdigest()
    return f"node-{provider}-{digest[:24]}"


#: Seconds a client may take to send its whole request (line, headers and body) before the endpoint
#: drops the connection.
REQUEST_TIMEOUT_SECONDS = 10

#: Connections served at once; more are closed at once (a fleet's watchers post a few notices a
#: minute at most; hundreds of open connections are a client bug or an attack).
MAX_CONNECTIONS = 64


class _BoundedServer(ThreadingHTTPServer):
    """A threading HTTP server that serves at most ``MAX_CONNECTIONS`` connections at once."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        # The family of the address, as prometheus-client's server picks it: the socketserver default is
        # IPv4 only, so '[::1]:9109' failed with "Address family for hostname not supported"
        self.address_family = socket.getaddrinfo(address[0], address[1], type=socket.SOCK_STREAM,
                                                 flags=socket.AI_PASSIVE)[0][0]
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request, client_address) -> None:  # noqa: ANN001
        if not self._slots.acquire(blocking=False):
            log.warning("notice endpoint: %d connections open, refusing one from %s", MAX_CONNECTIONS,
                        client_address[0])
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:  # noqa: ANN001
        # socketserver's, with the slot given back before the connection is closed: a client that sees its
        # connection end may connect again at once and find the slot free.
        try:
            self.finish_request(request, client_address)
        except Exception:  # socketserver's boundary: handle_error reports it
            self.handle_error(request, client_address)
        finally:
            self._slots.release()
            self.shutdown_request(request)


class _DeadlineReader(io.RawIOBase):
    """The request side of one connection, read against one deadline for the
    whole request. A socket timeout alone bounds each read, not the request: a
    client sending a header line (or a byte) every few seconds held its
    connection, and one of the ``MAX_CONNECTIONS`` slots, for as long as it
    liked, so 64 such clients locked real notices out. Each read here waits
    at most for what is left of the deadline, and none starts after it."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline  # time.monotonic()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # noqa: ANN001 - a writable buffer
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the request did not arrive within {REQUEST_TIMEOUT_SECONDS} s")
        self._sock.settimeout(left)
        try:
            return self._sock.recv_into(buffer)
        finally:
            self._sock.settimeout(REQUEST_TIMEOUT_SECONDS)  # what the answer's writes get


def parse_notice(raw: bytes, received_at_utc: datetime) -> tuple[InterruptionEvent, NoticeBody]:
    """Validate a posted body and build its event. Raises ``InvalidNotice``."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidNotice([("body", f"not JSON: {exc}")]) from exc
    # Valid JSON all the same, but not what a notice can be; both were a 500 logged as a failed store, which
    # the watcher retries: arrays or objects nested past the parser's recursion limit (64 KiB of '['), and
    # an integer of over 4300 digits (Python's limit on converting one: a ValueError).
    except RecursionError:
        raise InvalidNotice([("body", "JSON nested too deeply for a notice")]) from None
    except ValueError as exc:  # what else json.loads raises is a JSONDecodeError or a UnicodeDecodeError
        raise InvalidNotice([("body", f"a JSON integer of over {sys.get_int_max_str_digits()} digits")]) from exc
    if not isinstance(data, dict):
        raise InvalidNotice([("body", "expected a JSON object")])
    try:
        body = NoticeBody.model_validate(data)
    except ValidationError as exc:
        issues = [(".".join(str(p) for p in err["loc"]) or "body", err["msg"]) for err in exc.errors()]
        raise InvalidNotice(issues) from exc
    try:
        deadline = body.deadline_utc.astimezone(timezone.utc) if body.deadline_utc else None
    except OverflowError:
        raise InvalidNotice([("deadline_utc", f"{body.deadline_utc.isoformat()} is out of range in UTC")]) from None
    if body.provider == "gcp":
        deadline = _gcp_deadline(deadline, body.kind, received_at_utc)
    event = InterruptionEvent(
        event_id=event_id_for(body.provider, body.node_id, body.kind, body.notice_id),
        provider=body.provider,
        node_id=body.node_id,
        kind=body.kind,
        received_at_utc=received_at_utc,
        deadline_utc=deadline,
    )
    return event, body


def _gcp_deadline(deadline: datetime | None, kind: InterruptionKind, received_at_utc: datetime) -> datetime | None:
    """GCE stops a preempted VM 30 s after the notice, and the watcher's
    deadline for it (the moment it saw ``TRUE`` + 30 s) is on the node's own
    clock. It is kept when it falls within the 30 s after the notice arrived
    here (the node saw it a little before it was posted); outside them the
    node's clock is off, and the deadline is taken as 30 s after the notice
    arrived (so is a reclaim warning posted without one).

    Design choice: a deadline already past on arrival is not clamped to the
    arrival, but moved to 30 s after it. A node clock running behind cannot
    be told from a late delivery (the watcher retried while the daemon was
    down); taken as past, the first throws away a checkpoint window the job
    really has. Taken as 30 s, the second costs nothing: the runtime reports
    what a checkpoint actually saved, and a VM already gone saves nothing.
    Capping only a clock that runs ahead (as before) left a clock 2 minutes
    behind with a deadline already past."""
    notice_end = received_at_utc + timedelta(seconds=RECLAIM_NOTICE_SECONDS["gcp"])
    if deadline is None:
        return notice_end if kind is InterruptionKind.RECLAIM_WARNING else None
    return deadline if received_at_utc <= deadline <= notice_end else notice_end


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def split_addr(addr: str, option: str = "--notice-addr", example: str = "127.0.0.1:9109") -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT``; ``ValueError`` naming ``option`` and
    citing ``example`` (that option's usual value) otherwise."""
    host, _, port = addr.rpartition(":")
    # ASCII digits only: str.isdigit() also takes '²' (then int() failed with a bare "invalid literal")
    # and other scripts' digits ('٩١٠٨' served on 9108)
    if not host or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError(f"{option} {addr!r}: expected HOST:PORT with a port up to 65535, e.g. {example}")
    return host.strip("[]"), int(port)


def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class NoticeServer:
    """``POST /v1/notices`` on ``HOST:PORT`` in a background thread.

    ``store`` should be a handle of its own (``Store(url)`` on the daemon's
    URL), not the loop's: ``Store.transaction`` keeps its connection on the
    handle, so two threads must not share one. Writes are serialised by a
    lock, so two concurrent posts of one notice store it once.

    ``token`` is the bearer token nodes must send (compared in constant time).
    Without one the endpoint only starts on a loopback address: anyone who can
    reach it could otherwise drain the fleet. ``clock`` stamps
    ``received_at_utc`` (tests pass a virtual one).
    """

    def __init__(self, store: Store, addr: str, *, token: str | None,
                 clock: Callable[[], datetime] = _utcnow) -> None:
        host, port = split_addr(addr)
        problem = token_problem(token) if token else None
        if problem:
            raise ValueError(f"the notice token cannot be used: {problem}")
        if not token and not is_loopback(host):
            raise ValueError(
                f"refusing to serve notices on {addr} without a token: pass --notice-token-file FILE "
                "or set FLEETCTL_NOTICE_TOKEN (a tokenless endpoint is allowed on a loopback address only)"
            )
        self.store = store
        self.token = token or None
        self.clock = clock
        self._write_lock = threading.Lock()
        self._httpd = _BoundedServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        host, port = self._httpd.server_address[:2]
        return host_port(host, port)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self) -> "NoticeServer":
        self._thread = threading.Thread(target=lambda: self._httpd.serve_forever(poll_interval=0.1),
                                        name="fleetctl-notices", daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop serving and close the socket (also for a server never started)."""
        if self._thread is not None:
            self._httpd.shutdown()  # waits for serve_forever to return: only if it ran
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> "NoticeServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ request handling

    def authorized(self, header: str | None) -> bool:
        if self.token is None:
            return True
        scheme, _, given = (header or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode(), self.token.encode())

    def accept(self, raw: bytes) -> tuple[int, dict[str, Any]]:
        """Validate and store one posted notice; returns (status, JSON answer)."""
        now = self.clock()
        try:
            event, body = parse_notice(raw, now)
        except InvalidNotice as exc:
            return 400, {"error": f"invalid notice: {exc}",
                         "issues": [{"field": f, "message": m} for f, m in exc.issues]}
        with self._write_lock:
            # The audit entry in the notice's own transaction: written after it, a failed entry (500) left
            # the notice stored, so the watcher's retry was a "duplicate" and the entry never came.
            new = self.store.add_interruption(
                event, audit="notice_received", event_id=event.event_id, provider=event.provider,
                notice=event.kind.value, notice_id=body.notice_id, deadline_utc=dt_to_str(event.deadline_utc),
                detail=body.detail)
        if new and event.deadline_utc is not None and event.deadline_utc <= now:
            log.warning("notice %s for %s arrived after its deadline (%s): its jobs cannot checkpoint; the node "
                        "may be gone already", event.event_id, event.node_id, event.deadline_utc)
        log.info("notice %s from %s: %s %s on %s (deadline %s)", event.event_id, event.provider,
                 "new" if new else "duplicate", event.kind.value, event.node_id, event.deadline_utc)
        return 202, {"event_id": event.event_id, "duplicate": not new}

    def status(self, event_id: str) -> tuple[int, dict[str, Any]]:
        """Whether a stored notice was handled yet, and, once it is, whether
        the controller knew its node (``node_known``: false when handling it
        drained nothing, the node being unknown); (status, JSON answer)."""
        found, handled_at = self.store.interruption_handled_at(event_id)
        if not found:
            return 404, {"error": f"no notice {event_id!r} was stored"}
        node_known = None
        if handled_at is not None:  # the handling recorded interruption_unknown_node at handled_at, if at all
            node_known = not any(e["payload"].get("event_id") == event_id
                                 for e in self.store.events("interruption_unknown_node", since=handled_at))
        return 200, {"event_id": event_id, "handled": handled_at is not None,
                     "handled_at_utc": dt_to_str(handled_at), "node_known": node_known}


def _handler_for(server: NoticeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "fleetctl-notices/1"
        timeout = REQUEST_TIMEOUT_SECONDS  # the socket's, for writing the answer; reads: _DeadlineReader

        def setup(self) -> None:
            super().setup()
            # One deadline for the whole request (HTTP/1.0: one request per connection), so a client that
            # dribbles it does not hold a thread and a connection slot for ever.
            self.rfile.close()
            self.rfile = io.BufferedReader(_DeadlineReader(self.connection,
                                                           time.monotonic() + REQUEST_TIMEOUT_SECONDS))

        def _answer(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload, sort_keys=True).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":  # an answer to HEAD has the headers of one to GET, and no body
                self.wfile.write(data)

        def _authorized(self) -> bool:
            """True for the right bearer token; else answers 401."""
            if server.authorized(self.headers.get("Authorization")):
                return True
            self._answer(401, {"error": "missing or wrong bearer token"},
                         {"WWW-Authenticate": 'Bearer realm="fleetctl-notices"'})
            return False

        def _allowed(self) -> str | None:
            """The one method the path takes (``POST /v1/notices``, ``GET
            /v1/notices/EVENT_ID``), or ``None`` for a path that is not the endpoint's."""
            path = self.path.split("?", 1)[0]
            if path == NOTICES_PATH:
                return "POST"
            event_id = path.removeprefix(NOTICES_PATH + "/") if path.startswith(NOTICES_PATH + "/") else ""
            return "GET" if event_id and "/" not in event_id else None

        def _refuse(self) -> bool:
            """Answer 404 for another path, 405 (with ``Allow``) for another method
            on one of the endpoint's paths, as the docs say; True if refused."""
            allowed = self._allowed()
            if allowed == self.command:
                return False
            path = self.path.split("?", 1)[0]
            if allowed is None:
                self._answer(404, {"error": f"no such endpoint: {path} (notices go to POST {NOTICES_PATH}, their "
                                            f"state is GET {NOTICES_PATH}/EVENT_ID)"})
            else:
                self._answer(405, {"error": f"{self.command} is not allowed on {path}: use {allowed}"},
                             {"Allow": allowed})
            return True

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            if self._refuse() or not self._authorized():
                return
            try:
                length = int(self.headers.get("Content-Length") or "0")
            except ValueError:
                self._answer(400, {"error": "invalid Content-Length"})
                return
            if length < 0:
                self._answer(400, {"error": "invalid Content-Length"})
                self.close_connection = True
                return
            if length > MAX_BODY_BYTES:
                self._answer(413, {"error": f"body over {MAX_BODY_BYTES} bytes"})
                self.close_connection = True
                return
            raw = self.rfile.read(length)
            try:
                status, payload = server.accept(raw)
            except Exception as exc:  # the request boundary: the watcher retries on 5xx
                log.exception("storing a notice failed")
                self._answer(500, {"error": f"cannot store the notice: {type(exc).__name__}: {exc}"})
                return
            self._answer(status, payload)

        def do_GET(self) -> None:  # noqa: N802
            if self._refuse() or not self._authorized():
                return
            event_id = self.path.split("?", 1)[0].removeprefix(NOTICES_PATH + "/")
            try:
                status, payload = server.status(urllib.parse.unquote(event_id))
            except Exception as exc:  # the request boundary: the watcher asks again on its next poll
                log.exception("reading a notice's state failed")
                self._answer(500, {"error": f"cannot read the notice: {type(exc).__name__}: {exc}"})
                return
            self._answer(status, payload)

        # Every other method HTTP defines: without a do_ method, http.server answered 501 (a method it does
        # not know) where the docs say 405. A word that is not an HTTP method still gets its 501.
        do_HEAD = do_OPTIONS = do_PUT = do_DELETE = do_PATCH = do_TRACE = do_CONNECT = _refuse  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            log.debug("%s - %s", self.address_string(), format % args)

    return Handler
