"""The node-side watcher: reclaim notices from the instance metadata service
to the controller's notice endpoint (``fleetctl node-watch``).

GCP (30 s) and Azure (at least 30 s) announce a reclaim only on the node
itself; AWS announces it in instance metadata as well as through EventBridge.
The Terraform modules' user data start one watcher per node; it polls the
metadata service every few seconds, posts each distinct notice once to the
daemon's ``POST /v1/notices`` (``fleetctl.controller.notices``) with a bearer
token, retrying with bounded exponential backoff until the controller answers
2xx, and on Azure approves the Scheduled Event only once the controller
reports the notice handled (the node drained: its jobs checkpointed and
requeued), so approving never cuts the checkpoint window short.

What it reads, per cloud (base URL ``http://169.254.169.254`` unless overridden):

* **AWS** (IMDSv2): ``PUT /latest/api/token`` with
  ``X-aws-ec2-metadata-token-ttl-seconds``, then with ``X-aws-ec2-metadata-token``:
  ``/latest/meta-data/spot/instance-action`` (404 until a notice;
  ``{"action": "terminate|stop|hibernate", "time": "2026-11-02T09:02:00Z"}``),
  ``/latest/meta-data/events/recommendations/rebalance`` (404 until a hint;
  ``{"noticeTime": "..."}``) and ``/latest/meta-data/instance-id``.
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
* **GCP**: ``/computeMetadata/v1/instance/preempted`` with ``Metadata-Flavor: Google``
  (``TRUE``/``FALSE``; optionally ``?wait_for_change=true`` to block until it
  changes); the node is ``ZONE/NAME`` from ``instance/zone`` and ``instance/name``
  (the GCP adapter's node id). The preemption notice gives 30 s, so
  the deadline is the moment ``TRUE`` was seen plus 30 s.
  https://cloud.google.com/compute/docs/instances/create-use-preemptible#detecting_if_an_instance_was_preempted
* **Azure** (Scheduled Events): ``/metadata/scheduledevents?api-version=2020-07-01``
  with ``Metadata: true``; an event with ``EventType`` ``Preempt`` whose
  ``Resources`` name this VM (``/metadata/instance/compute/name``) is a notice
  with ``NotBefore`` as the deadline; once the controller answers
  ``GET /v1/notices/EVENT_ID`` with ``"handled": true`` the watcher POSTs
  ``{"StartRequests": [{"EventId": ...}]}`` to the same URL (approval lets
  Azure evict at once instead of at ``NotBefore``).
  https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events

Only the standard library is used (``urllib``): the watcher runs on every
node and should not widen what a node image needs.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import random
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Callable, Protocol

from fleetctl.model import CLOUDS, RECLAIM_NOTICE_SECONDS, InterruptionKind

log = logging.getLogger("fleetctl.nodewatch")

DEFAULT_METADATA_URL = "http://169.254.169.254"
NOTICES_PATH = "/v1/notices"  # served by fleetctl.controller.notices, which imports it from here
#: The longest node id, notice id and detail the daemon's notice endpoint accepts (its NoticeBody's limits).
MAX_NODE_ID = 255
MAX_NOTICE_ID = 255
MAX_DETAIL = 1000
# The notice id of an Azure Preempt event that came without an EventId (not a GUID, so never a real one).
UNNAMED_PREEMPT = "preempt-without-event-id"
AWS_TOKEN_TTL_SECONDS = 21600  # the IMDSv2 maximum
AZURE_API_VERSION = "2020-07-01"
AZURE_COMPUTE_API_VERSION = "2021-02-01"


class MetadataError(Exception):
    """The metadata service could not be read or answered something unexpected."""


class DeliveryFailed(Exception):
    """A notice could not be delivered to the controller within the retry bound."""


class DeliveryStopped(DeliveryFailed):
    """The watcher was stopped (a signal) while it was still retrying a notice."""


class Stopped(Exception):
    """Raised by ``NodeWatcher.request_stop`` out of a blocking metadata wait."""


@dataclass(frozen=True, slots=True)
class Notice:
    """One notice as the metadata service announced it, in the endpoint's terms.

    ``notice_id`` is the cloud's identity of the notice (AWS: action and time;
    GCP: the instance id; Azure: the EventId): the watcher posts each distinct
    one once, and the endpoint derives a deterministic event id from it."""

    provider: str
    node_id: str
    kind: InterruptionKind
    notice_id: str
    deadline_utc: datetime | None
    detail: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.provider, self.node_id, self.kind.value, self.notice_id)

    def to_json(self) -> dict[str, object]:
        """The body to post, always one the endpoint accepts: a notice id
        that is blank, over its 255 characters or not valid Unicode (the
        metadata service's own text) is sent as its digest, an unpaired
        surrogate elsewhere (a JSON escape such as ``\\ud800`` in the
        metadata, or a --node-id that is not UTF-8) becomes U+FFFD, and the
        detail is cut to 1000 characters; the endpoint answered them with a
        400, which is not retried, so the notice was never delivered."""
        notice_id = self.notice_id.strip()
        if not 0 < len(notice_id) <= MAX_NOTICE_ID or _valid_unicode(notice_id) != notice_id:
            # surrogatepass: two ids that differ only in their lone surrogates stay two notices
            notice_id = "sha256:" + hashlib.sha256(self.notice_id.encode("utf-8", "surrogatepass")).hexdigest()
        return {
            "provider": self.provider,
            "node_id": _valid_unicode(self.node_id),
            "kind": self.kind.value,
            "notice_id": notice_id,
            "deadline_utc": _iso(self.deadline_utc),
            "detail": _valid_unicode(self.detail)[:MAX_DETAIL],
        }


def _valid_unicode(text: str) -> str:
    """``text`` with each unpaired UTF-16 surrogate replaced by U+FFFD (a pair
    left apart is joined): a string that holds one cannot be encoded, and the
    endpoint refuses it."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _iso(dt: datetime | None) -> str | None:
    return None if dt is None else dt.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _parse_iso(value: str, what: str) -> datetime:
    """An ISO-8601 time in UTC (one without an offset is taken as UTC)."""
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return dt.astimezone(timezone.utc) if dt.tzinfo else dt.replace(tzinfo=timezone.utc)
    except (ValueError, OverflowError) as exc:  # OverflowError: valid, but past year 9999 (or before 1) in UTC
        raise MetadataError(f"{what}: not an ISO-8601 time: {value!r}") from exc


# --------------------------------------------------------------------------- HTTP


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


# The metadata service is link-local: never ask a proxy for it (a proxy from
# HTTP_PROXY would answer for its own host, not for this node).
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_ENV_PROXIES = urllib.request.build_opener()


def _request(method: str, url: str, *, headers: dict[str, str] | None = None, data: bytes | None = None,
             timeout: float = 5.0, direct: bool = True) -> Response:
    """One request; any HTTP status is returned, only transport failures raise
    (``OSError``). ``direct``: ignore HTTP(S)_PROXY (metadata); else honour it."""
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    opener = _DIRECT if direct else _ENV_PROXIES
    try:
        with opener.open(req, timeout=timeout) as resp:
            return Response(resp.status, resp.read(), {k.lower(): v for k, v in resp.headers.items()})
    except urllib.error.HTTPError as exc:
        with exc:
            return Response(exc.code, exc.read(), {k.lower(): v for k, v in (exc.headers or {}).items()})
    except http.client.HTTPException as exc:  # a garbled answer: a transport failure to the caller
        raise ConnectionError(f"{method} {url}: {type(exc).__name__}: {exc}") from exc


# --------------------------------------------------------------------------- metadata sources


class MetadataSource(Protocol):
    """One cloud's metadata service.

    * ``discover_node_id()``: this node's id as fleetctl knows it.
    * ``poll(node_id, clock)``: the notices announced now (the same notice
      comes back on every poll while it stands; the watcher deduplicates).
      ``clock()`` is read once the metadata service has answered, not before
      the request: a GCE wait-for-change request blocks for up to its timeout,
      and the 30 s of a preemption run from when ``TRUE`` came back.
    * ``next_poll_waits``: the next ``poll`` blocks until the answer changes
      (GCE wait-for-change with an ETag), so the watcher polls again at once
      instead of sleeping its interval first;
    * ``approves``: whether the cloud waits for an approval (``drained``);
    * ``drained(notice)``: the controller has handled ``notice`` (the node's
      jobs are checkpointed and requeued): the cloud may take the node now.
    """

    cloud: str
    approves: bool
    next_poll_waits: bool

    def discover_node_id(self) -> str: ...

    def poll(self, node_id: str, clock: Callable[[], datetime]) -> tuple[Notice, ...]: ...

    def drained(self, notice: Notice) -> None: ...


class AwsImds:
    """EC2 instance metadata, IMDSv2 (session token)."""

    cloud = "aws"
    approves = False
    next_poll_waits = False

    def __init__(self, base_url: str = DEFAULT_METADATA_URL, *, timeout: float = 2.0,
                 token_ttl_seconds: int = AWS_TOKEN_TTL_SECONDS) -> None:
        self.base = base_url.rstrip("/")
        self.timeout = timeout
        self.ttl = token_ttl_seconds
        self._token: str | None = None

    def _new_token(self) -> str:
        r = _request("PUT", f"{self.base}/latest/api/token", timeout=self.timeout,
                     headers={"X-aws-ec2-metadata-token-ttl-seconds": str(self.ttl)})
        if r.status != 200 or not r.body:
            raise MetadataError(f"IMDSv2 token: HTTP {r.status} {r.text()[:200]}")
        return r.text().strip()

    def _get(self, path: str) -> Response:
        """GET with the session token; a token the service no longer takes
        (expired, the service restarted) is replaced once."""
        r = self._get_with_token(path)
        if r.status == 401:
            self._token = None
            r = self._get_with_token(path)
        return r

    def _get_with_token(self, path: str) -> Response:
        if self._token is None:
            self._token = self._new_token()
        return _request("GET", f"{self.base}{path}", timeout=self.timeout,
                        headers={"X-aws-ec2-metadata-token": self._token})

    def discover_node_id(self) -> str:
        r = self._get("/latest/meta-data/instance-id")
        if r.status != 200 or not r.body.strip():
            raise MetadataError(f"instance-id: HTTP {r.status} {r.text()[:200]}")
        return r.text().strip()

    def poll(self, node_id: str, clock: Callable[[], datetime]) -> tuple[Notice, ...]:
        notices = []
        r = self._get("/latest/meta-data/spot/instance-action")
        if r.status == 200:
            # Design choice: IMDS answers 200 here only once the instance is marked for stop or terminate, so
            # the notice stands even when the document cannot be read: it is delivered with the two minutes
            # AWS documents (raising failed every poll and the node was never drained).
            action: object = None
            when: object = None
            try:
                doc = _json_object(r, "spot/instance-action")
                action, when = doc.get("action"), doc.get("time")
                if not isinstance(action, str) or not isinstance(when, str):
                    raise MetadataError(f"spot/instance-action: expected action and time, got {str(doc)[:200]}")
                deadline = _parse_iso(when, "spot/instance-action time")
            except MetadataError as exc:
                log.warning("%s; taken as %d s from now", exc, RECLAIM_NOTICE_SECONDS["aws"])
                deadline = clock() + timedelta(seconds=RECLAIM_NOTICE_SECONDS["aws"])
            action = action if isinstance(action, str) else "unreadable"
            when = when if isinstance(when, str) else r.text().strip()  # the document itself names the notice
            notices.append(Notice("aws", node_id, InterruptionKind.RECLAIM_WARNING, f"{action}@{when}", deadline,
                                  f"IMDS spot/instance-action {action} at {when}"))
        elif r.status != 404:
            raise MetadataError(f"spot/instance-action: HTTP {r.status} {r.text()[:200]}")
        try:
            r = self._get("/latest/meta-data/events/recommendations/rebalance")
            if r.status not in (200, 404):
                raise MetadataError(f"events/recommendations/rebalance: HTTP {r.status} {r.text()[:200]}")
        except (MetadataError, OSError) as exc:
            if not notices:
                raise
            # The reclaim notice read above stands whatever the rebalance path says: raising here held it
            # back on every poll, and the node was never drained.
            log.warning("%s; the spot/instance-action notice is delivered all the same", exc)
            return tuple(notices)
        if r.status == 200:  # a recommendation stands (as above); raising here also held back a reclaim notice
            try:
                when = _json_object(r, "events/recommendations/rebalance").get("noticeTime")
                if not isinstance(when, str):
                    raise MetadataError(f"events/recommendations/rebalance: expected noticeTime, got "
                                        f"{r.text()[:200]!r}")
            except MetadataError as exc:
                log.warning("%s; delivered as a rebalance recommendation all the same", exc)
                when = r.text().strip()
            notices.append(Notice("aws", node_id, InterruptionKind.REBALANCE, f"rebalance@{when}", None,
                                  f"IMDS rebalance recommendation at {when}"))
        return tuple(notices)

    def drained(self, notice: Notice) -> None:
        """Nothing to approve: EC2 takes the instance at the notice's time."""


class GceMetadata:
    """GCE metadata server. With ``wait_for_change`` each poll after the first
    blocks (up to ``wait_seconds``) until ``preempted`` changes, so a notice is
    seen at once.

    Design choice: the wait carries the ``ETag`` of the last answer
    (``last_etag``). A bare ``wait_for_change`` waits for the *next* change,
    so a watcher (re)started after the preemption would sit out the timeout
    with the notice already standing; with the ETag the server answers at once
    when the value is not what the watcher last saw. For the same reason an
    answer without an ETag is not followed by a bare wait (it would sit out
    the timeout if the value changed between two requests) but by a plain
    read after the watcher's usual interval (``next_poll_waits`` is false):
    a wait that cannot block must not be retried in a tight loop."""

    cloud = "gcp"
    approves = False

    def __init__(self, base_url: str = DEFAULT_METADATA_URL, *, timeout: float = 2.0,
                 wait_for_change: bool = False, wait_seconds: int = 30) -> None:
        self.base = base_url.rstrip("/")
        self.timeout = timeout
        self.wait_for_change = wait_for_change
        self.wait_seconds = wait_seconds
        self._instance_id: str | None = None
        self._etag: str | None = None
        self._warned_no_etag = False

    @property
    def next_poll_waits(self) -> bool:
        return self.wait_for_change and bool(self._etag)

    def _get(self, path: str, timeout: float | None = None) -> Response:
        return _request("GET", f"{self.base}/computeMetadata/v1/{path}", headers={"Metadata-Flavor": "Google"},
                        timeout=timeout or self.timeout)

    def _read(self, path: str) -> str:
        r = self._get(path)
        if r.status != 200 or not r.body.strip():
            raise MetadataError(f"computeMetadata {path}: HTTP {r.status} {r.text()[:200]}")
        return r.text().strip()

    def discover_node_id(self) -> str:
        """``ZONE/NAME``, the id the GCP adapter gives its nodes (``providers/gcp.py``);
        ``instance/zone`` reads ``projects/NUMBER/zones/ZONE``."""
        zone = self._read("instance/zone").rsplit("/", 1)[-1]
        return f"{zone}/{self._read('instance/name')}"

    def poll(self, node_id: str, clock: Callable[[], datetime]) -> tuple[Notice, ...]:
        if self._instance_id is None:
            # A MIG recreates a preempted VM under the same name with a new id:
            # the id tells one preemption from the next.
            self._instance_id = self._read("instance/id")
        if self.wait_for_change and self._etag:
            query = urllib.parse.urlencode({"wait_for_change": "true", "last_etag": self._etag,
                                            "timeout_sec": self.wait_seconds})
            r = self._get(f"instance/preempted?{query}", timeout=self.wait_seconds + self.timeout)
        else:
            r = self._get("instance/preempted")
        if r.status != 200:
            self._etag = None
            raise MetadataError(f"computeMetadata instance/preempted: HTTP {r.status} {r.text()[:200]}")
        self._etag = r.headers.get("etag")
        if self.wait_for_change and not self._etag and not self._warned_no_etag:
            self._warned_no_etag = True
            log.warning("computeMetadata instance/preempted answered without an ETag: cannot wait for a change; "
                        "polling it every interval instead")
        value = r.text().strip().upper()
        if value == "FALSE":
            return ()
        if value != "TRUE":
            raise MetadataError(f"computeMetadata instance/preempted: expected TRUE or FALSE, got {r.text()[:50]!r}")
        # The clock is read now, after the answer: a wait-for-change request may have blocked for up to
        # wait_seconds before TRUE came back, and GCE's 30 s run from then (read before the request, the
        # deadline was up to wait_seconds too early).
        return (Notice("gcp", node_id, InterruptionKind.RECLAIM_WARNING, f"preempted@{self._instance_id}",
                       clock() + timedelta(seconds=RECLAIM_NOTICE_SECONDS["gcp"]), "GCE instance/preempted=TRUE"),)

    def drained(self, notice: Notice) -> None:
        """Nothing to approve: GCE stops the VM 30 s after the notice."""


class AzureScheduledEvents:
    """Azure Instance Metadata Service, Scheduled Events."""

    cloud = "azure"
    approves = True
    next_poll_waits = False

    def __init__(self, base_url: str = DEFAULT_METADATA_URL, *, timeout: float = 2.0) -> None:
        self.base = base_url.rstrip("/")
        self.timeout = timeout
        self.events_url = f"{self.base}/metadata/scheduledevents?api-version={AZURE_API_VERSION}"
        self._resource_name: str | None = None
        self._noted: set[str] = set()  # events already logged (each stands for many polls)

    def resource_name(self) -> str:
        """This VM's name as Scheduled Events lists it in ``Resources``."""
        if self._resource_name is None:
            url = f"{self.base}/metadata/instance/compute/name?api-version={AZURE_COMPUTE_API_VERSION}&format=text"
            r = _request("GET", url, headers={"Metadata": "true"}, timeout=self.timeout)
            if r.status != 200 or not r.body.strip():
                raise MetadataError(f"instance/compute/name: HTTP {r.status} {r.text()[:200]}")
            self._resource_name = r.text().strip()
        return self._resource_name

    def discover_node_id(self) -> str:
        return self.resource_name()

    def poll(self, node_id: str, clock: Callable[[], datetime]) -> tuple[Notice, ...]:
        me = self.resource_name()
        r = _request("GET", self.events_url, headers={"Metadata": "true"}, timeout=self.timeout)
        now = clock()
        if r.status != 200:
            raise MetadataError(f"scheduledevents: HTTP {r.status} {r.text()[:200]}")
        doc = _json_object(r, "scheduledevents")
        events = doc.get("Events", [])
        if not isinstance(events, list):
            raise MetadataError(f"scheduledevents: Events is not a list: {events!r}")
        notices = []
        for ev in events:
            if not isinstance(ev, dict):
                continue
            resources = ev.get("Resources") or []
            if not isinstance(resources, list):  # not a list of VM names: whose it is cannot be told
                self._note_once(f"resources:{ev.get('EventId')}", "scheduledevents: event %s has Resources %r, "
                                "not a list of VM names: ignored", ev.get("EventId"), resources)
                continue
            if me not in resources:
                continue
            if ev.get("EventType") != "Preempt":
                self._note_once(str(ev.get("EventId")), "scheduledevents: %s event %s for this VM is not a "
                                "reclaim: ignored (NotBefore %s)", ev.get("EventType"), ev.get("EventId"),
                                ev.get("NotBefore") or "now", level=logging.INFO)
                continue
            event_id = ev.get("EventId")
            if not isinstance(event_id, str) or not event_id:
                # Design choice: the eviction still stands, so it is delivered (raising failed every poll and
                # the node was never drained); it cannot be approved, as StartRequests names the EventId.
                self._note_once(f"unnamed:{ev.get('NotBefore')}", "scheduledevents: a Preempt event for this VM "
                                "has no EventId (%r): delivered as %s, not approved at Azure", ev, UNNAMED_PREEMPT)
                event_id = UNNAMED_PREEMPT
            not_before = ev.get("NotBefore") or ""
            # An event already Started has an empty NotBefore: the VM goes now.
            try:
                deadline = _parse_http_date(not_before) if not_before else now
            except MetadataError as exc:  # the eviction still stands: deliver it, due now
                self._note_once(f"notbefore:{event_id}", "%s; Preempt %s taken as due now", exc, event_id)
                deadline = now
            notices.append(Notice("azure", node_id, InterruptionKind.RECLAIM_WARNING, event_id, deadline,
                                  f"Azure Scheduled Event Preempt {event_id} ({ev.get('EventStatus')}, "
                                  f"NotBefore {not_before or 'now'})"))
        return tuple(notices)

    def _note_once(self, key: str, message: str, *args: object, level: int = logging.WARNING) -> None:
        """Log ``message`` the first time ``key`` is seen (events stand for many polls)."""
        if key not in self._noted:
            self._noted.add(key)
            log.log(level, message, *args)

    def drained(self, notice: Notice) -> None:
        """Approve the Preempt event (``StartRequests``): the controller has
        drained this node, so Azure need not hold the VM until ``NotBefore``.
        A Preempt without an EventId cannot be named, so is not approved."""
        if notice.notice_id == UNNAMED_PREEMPT:
            return
        body = json.dumps({"StartRequests": [{"EventId": notice.notice_id}]}).encode()
        r = _request("POST", self.events_url, data=body, timeout=self.timeout,
                     headers={"Metadata": "true", "Content-Type": "application/json"})
        if not 200 <= r.status < 300:
            raise MetadataError(f"scheduledevents StartRequests {notice.notice_id}: HTTP {r.status} {r.text()[:200]}")


def _json_object(r: Response, what: str) -> dict:
    try:
        doc = json.loads(r.body)
    except ValueError as exc:
        raise MetadataError(f"{what}: not JSON: {r.text()[:200]!r}") from exc
    if not isinstance(doc, dict):
        raise MetadataError(f"{what}: expected a JSON object, got {r.text()[:200]!r}")
    return doc


def _parse_http_date(value: str) -> datetime:
    """Azure's ``NotBefore`` is an HTTP date (``Mon, 19 Sep 2016 18:29:47 GMT``).
    One without a zone (none, or RFC 2822's ``-0000``: parsed as naive) is
    taken as UTC, as ``_parse_iso`` takes an ISO time without an offset: HTTP
    dates are GMT, and the node's local zone has nothing to do with it."""
    if not isinstance(value, str):
        raise MetadataError(f"scheduledevents NotBefore: not a time: {value!r}")
    try:
        dt = parsedate_to_datetime(value)
        return dt.astimezone(timezone.utc) if dt.tzinfo else dt.replace(tzinfo=timezone.utc)
    except (TypeError, ValueError, OverflowError):
        return _parse_iso(value, "scheduledevents NotBefore")


def metadata_source(cloud: str, base_url: str = DEFAULT_METADATA_URL, *,
                    gce_wait_for_change: bool = False) -> MetadataSource:
    if cloud == "aws":
        return AwsImds(base_url)
    if cloud == "gcp":
        return GceMetadata(base_url, wait_for_change=gce_wait_for_change)
    if cloud == "azure":
        return AzureScheduledEvents(base_url)
    raise ValueError(f"unknown cloud {cloud!r}: expected one of {', '.join(CLOUDS)}")


# --------------------------------------------------------------------------- the controller side


@dataclass(frozen=True, slots=True)
class Backoff:
    """Bounded exponential backoff with jitter: attempt ``n`` (from 1) failed,
    wait between half and all of ``min(max_seconds, initial_seconds * 2**(n-1))``
    (the jitter spreads a storm of reclaimed nodes), give up after ``max_attempts``."""

    initial_seconds: float = 0.5
    max_seconds: float = 8.0
    max_attempts: int = 10

    def delay(self, failed_attempts: int, rng: random.Random) -> float:
        # The exponent is capped: 0.5 x 2**1100 is an OverflowError, not a long wait.
        cap = min(self.max_seconds, self.initial_seconds * 2 ** min(failed_attempts - 1, 64))
        return rng.uniform(cap / 2, cap)


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be the notice endpoint's bearer token, or ``None``.

    It travels in an HTTP header (``Authorization: Bearer ...``), which
    ``http.client`` encodes as Latin-1 and refuses with a line break in it; a
    token that broke that was accepted at startup and node-watch crashed with
    a traceback only when it had a notice to deliver, losing the notice. So a
    token must be one line of printable ASCII (spaces allowed inside; the
    readers strip the whitespace around it). Shared by ``node-watch
    --token-file`` and the daemon's ``--notice-token-file`` and
    ``FLEETCTL_NOTICE_TOKEN``, so both sides refuse the same tokens."""
    if "\n" in token or "\r" in token:
        return "it holds more than one line; a token is one line of printable ASCII"
    for i, ch in enumerate(token):
        if not " " <= ch <= "~":
            return (f"character {i + 1} is {ch!r} (U+{ord(ch):04X}), which is not printable ASCII; "
                    "a token is one line of printable ASCII")
    return None


@dataclass(frozen=True, slots=True)
class NoticeStatus:
    """The controller's answer to ``GET /v1/notices/EVENT_ID``: ``handled``:
    its interruptions pass has taken the notice; ``node_known``: false only
    when the controller says it did not know the node (another cluster's, a
    --node-id typo), so handling the notice drained nothing."""

    handled: bool
    node_known: bool


class NoticeClient:
    """Posts notices to ``{controller}/v1/notices`` with a bearer token."""

    def __init__(self, controller_url: str, token: str | None, *, timeout: float = 5.0) -> None:
        base = controller_url.rstrip("/")
        self.url = base if base.endswith(NOTICES_PATH) else base + NOTICES_PATH
        self.token = token
        self.timeout = timeout

    def post(self, notice: Notice) -> Response:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return _request("POST", self.url, headers=headers, data=json.dumps(notice.to_json()).encode(),
                        timeout=self.timeout, direct=False)

    def status(self, event_id: str) -> NoticeStatus:
        """What the controller has done with the notice ``event_id``. Raises
        ``ConnectionError`` when it cannot say."""
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        url = f"{self.url}/{urllib.parse.quote(event_id, safe='')}"
        r = _request("GET", url, headers=headers, timeout=self.timeout, direct=False)
        if r.status != 200:
            raise ConnectionError(f"GET {url}: HTTP {r.status} {r.text()[:200]}")
        try:
            doc = json.loads(r.body)
        except ValueError as exc:
            raise ConnectionError(f"GET {url}: not JSON: {r.text()[:200]!r}") from exc
        if not isinstance(doc, dict):
            return NoticeStatus(False, True)
        # node_known: absent from an older daemon's answer, which is taken as 'known' (as it was before)
        return NoticeStatus(doc.get("handled") is True, doc.get("node_known") is not False)


#: Seconds a watcher waits after a failed metadata poll, at least.
ERROR_PAUSE_SECONDS = 1.0
#: Seconds a watcher waits before a poll that does not block, at least (node-watch's smallest --interval).
MIN_PAUSE_SECONDS = 0.1


@dataclass
class NodeWatcher:
    """Polls one metadata source and delivers each distinct notice once.

    ``sleep`` waits between retries and polls (default: ``stop.wait``, so a
    stop interrupts it); ``clock`` is the watcher's notion of now (GCP's
    deadline is the moment ``TRUE`` was seen plus 30 s). Both are injected by
    tests, which therefore never wait on real time.
    """

    source: MetadataSource
    client: NoticeClient
    node_id: str
    interval_seconds: float = 5.0
    backoff: Backoff = field(default_factory=Backoff)
    clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
    sleep: Callable[[float], None] | None = None
    rng: random.Random = field(default_factory=random.Random)
    stop: threading.Event = field(default_factory=threading.Event)
    delivered: dict[tuple[str, str, str, str], str] = field(default_factory=dict)  # notice key -> event id
    already_stored: set[str] = field(default_factory=set)  # event ids the controller had from an earlier post
    approved: set[tuple[str, str, str, str]] = field(default_factory=set)  # notice keys the source was told of
    not_approved: set[tuple[str, str, str, str]] = field(default_factory=set)  # handled, but nothing drained
    _in_wait: bool = field(default=False, init=False, repr=False)  # in a blocking metadata poll (GCE wait)

    def _sleep(self, seconds: float) -> None:
        if self.sleep is not None:
            self.sleep(seconds)
        else:
            self.stop.wait(seconds)

    def request_stop(self) -> None:
        """Stop the watcher: ``run`` returns after what it is doing. Meant for
        a signal handler in the thread that runs the watcher: a blocking
        metadata poll in progress (GCE wait-for-change, up to 30 s) is
        abandoned at once by raising ``Stopped`` out of it (it only reads, so
        nothing is lost), instead of being waited out; a delivery being
        retried stops with ``DeliveryStopped``.

        Design choice: the exception is raised only during the blocking poll
        (``_in_wait``), never in the middle of a delivery or an approval,
        whose effects must not be cut in half; those are bounded by their own
        short timeouts (a shorter wait per request would instead cost a
        metadata request every few seconds for the whole life of the node)."""
        self.stop.set()
        if self._in_wait:
            raise Stopped("stopped during a blocking metadata poll")

    def poll_once(self, *, approve: bool = True) -> list[str]:
        """Read the metadata service once; deliver what is new; with
        ``approve``, approve at the cloud what the controller has drained
        (``--once`` does not: it never waits for the controller, so it never
        approves, even a notice an earlier run delivered and the controller
        has handled since). Returns the event
        ids the controller gave the notices delivered now. Raises
        ``MetadataError`` (the caller logs it and polls again),
        ``DeliveryFailed`` (the retry bound was reached; ``DeliveryStopped``:
        stopped first) or ``Stopped`` (stopped during a blocking poll)."""
        new = []
        self._in_wait = self.source.next_poll_waits
        try:
            notices = self.source.poll(self.node_id, self.clock)
        finally:
            self._in_wait = False
        for notice in notices:
            if notice.key not in self.delivered:
                self.delivered[notice.key] = self.deliver(notice)
                new.append(self.delivered[notice.key])
            if approve and self.source.approves and notice.key not in self.approved | self.not_approved:
                self._approve_if_drained(notice)
        return new

    def _approve_if_drained(self, notice: Notice) -> None:
        """Approve a delivered notice at the cloud once the controller reports
        it handled; until then (or when it cannot say) ask again at the next
        poll. The cloud takes the node at the notice's deadline regardless, so
        not approving only forgoes an earlier eviction. A failed approval is
        tried again at the next poll; the notice is not posted again.

        A notice the controller handled for a node it does not know drained
        nothing (another cluster's node, or a --node-id typo: this node's jobs
        were not checkpointed), so it is not approved: the error is logged
        once and the cloud evicts at the deadline, as without the watcher."""
        event_id = self.delivered[notice.key]
        try:
            status = self.client.status(event_id)
        except OSError as exc:
            log.warning("notice %s: cannot ask the controller whether it is handled: %s", event_id, exc)
            return
        if not status.handled:
            return
        if not status.node_known:
            self.not_approved.add(notice.key)
            log.error("notice %s: the controller does not know node %s (another cluster's node, or a wrong "
                      "--node-id?), so nothing was drained: %s not approved at the cloud, which takes the node at "
                      "the notice's deadline", event_id, notice.node_id, notice.notice_id)
            return
        self.source.drained(notice)
        self.approved.add(notice.key)
        log.info("notice %s handled by the controller: approved %s at the cloud", event_id, notice.notice_id)

    def deliver(self, notice: Notice) -> str:
        """Post until the controller answers 2xx; returns its event id.

        Retried with ``backoff``: transport errors (controller down or
        unreachable), 401/403 (a token not yet deployed on the controller),
        408, 429 and 5xx. A 400 means the body itself is wrong and is not
        retried."""
        last = ""
        for attempt in range(1, self.backoff.max_attempts + 1):
            if self.stop.is_set() and attempt > 1:
                raise DeliveryStopped(
                    f"stopped by a signal before the {notice.kind.value} notice {notice.notice_id} for node "
                    f"{notice.node_id} was delivered ({attempt - 1} attempt(s), the last: {last}); a restarted "
                    "watcher posts it again")
            try:
                r = self.client.post(notice)
            except OSError as exc:
                last = f"controller unreachable at {self.client.url}: {exc}"
            else:
                if 200 <= r.status < 300:
                    event_id = _event_id(r)
                    duplicate = _answer(r).get("duplicate") is True
                    if duplicate:
                        self.already_stored.add(event_id)
                    log.info("notice %s %s delivered: event %s%s", notice.kind.value, notice.notice_id, event_id,
                             " (the controller had it already)" if duplicate else "")
                    return event_id
                if r.status == 400:
                    raise DeliveryFailed(f"the controller rejected the notice as invalid (HTTP 400): {r.text()[:500]}")
                hint = ""
                if r.status in (401, 403):
                    hint = " (check --token-file against the daemon's --notice-token-file)"
                last = f"HTTP {r.status} from {self.client.url}{hint}: {r.text()[:200]}"
            if attempt == self.backoff.max_attempts:
                break
            delay = self.backoff.delay(attempt, self.rng)
            log.warning("notice %s not delivered (attempt %d of %d): %s; retrying in %.1f s", notice.notice_id,
                        attempt, self.backoff.max_attempts, last, delay)
            self._sleep(delay)
        raise DeliveryFailed(f"gave up delivering {notice.kind.value} notice {notice.notice_id} for node "
                             f"{notice.node_id} after {attempt} attempt(s): {last}")

    def run(self, *, max_polls: int | None = None) -> None:
        """Poll every ``interval_seconds`` until ``stop`` is set (or ``max_polls``
        polls). A metadata hiccup is logged and the next poll tries again;
        ``DeliveryFailed`` propagates (the process exits non-zero and its
        supervisor restarts it; the endpoint deduplicates the re-post).
        ``request_stop`` ends a blocking poll at once."""
        polls = 0
        while not self.stop.is_set():
            failed = True
            try:
                self.poll_once()
                failed = False
            except Stopped:
                return
            except MetadataError as exc:
                log.warning("metadata: %s", exc)
            except OSError as exc:
                log.warning("metadata service unreachable: %s", exc)
            polls += 1
            if max_polls is not None and polls >= max_polls:
                return
            # A blocking poll comes next (GCE wait-for-change): it is the wait, so no pause before it.
            # Otherwise the interval, at least MIN_PAUSE_SECONDS, and after a failed poll at least
            # ERROR_PAUSE_SECONDS: whatever the interval, the metadata service is never polled in a tight loop.
            if failed:
                pause = max(self.interval_seconds, ERROR_PAUSE_SECONDS)
            else:
                pause = 0.0 if self.source.next_poll_waits else max(self.interval_seconds, MIN_PAUSE_SECONDS)
            if pause > 0:
                self._sleep(pause)


def _answer(r: Response) -> dict:
    try:
        doc = json.loads(r.body)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _event_id(r: Response) -> str:
    return str(_answer(r).get("event_id", ""))
