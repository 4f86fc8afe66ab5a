"""The daemon's notice endpoint over real HTTP: auth, validation, idempotence,
and the event it writes (the same InterruptionEvent the provider path makes)."""

from __future__ import annotations

import json
import logging
import socket
import threading
import urllib.error
import urllib.request
from datetime import datetime, timedelta

import pytest

from fleetctl.controller.notices import MAX_BODY_BYTES, NoticeServer, event_id_for, is_loopback, parse_notice, split_addr
from fleetctl.model import InterruptionKind
from tests.builders import T0
from tests.nodewatch.conftest import TOKEN

GOOD = {"provider": "gcp", "node_id": "gke-node-1", "kind": "reclaim_warning", "notice_id": "preempted@42",
        "deadline_utc": "2026-11-02T09:00:30Z", "detail": "GCE instance/preempted=TRUE"}


def post(url, body, token=TOKEN, method="POST", raw=None):  # noqa: ANN001, ANN201
    data = raw if raw is not None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url + "/v1/notices", data=data if method == "POST" else None, headers=headers,
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read()), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read()), dict(exc.headers)


def test_a_notice_is_stored_as_the_same_event_the_provider_path_makes(make_controller):
    c = make_controller("gcp")
    c.clock.now = T0 + timedelta(seconds=3)
    status, answer, _ = post(c.endpoint.url, GOOD)
    assert status == 202 and answer["duplicate"] is False
    (event,) = c.store.interruptions()
    assert event.event_id == answer["event_id"] == event_id_for("gcp", "gke-node-1",
                                                                InterruptionKind.RECLAIM_WARNING, "preempted@42")
    assert event.provider == "gcp" and event.node_id == "gke-node-1"
    assert event.kind is InterruptionKind.RECLAIM_WARNING
    assert event.received_at_utc == T0 + timedelta(seconds=3)
    assert event.deadline_utc == T0 + timedelta(seconds=30)
    (audit,) = c.store.events("notice_received")
    assert audit["payload"]["notice_id"] == "preempted@42" and audit["payload"]["detail"] == GOOD["detail"]


def test_a_re_post_is_idempotent(make_controller):
    c = make_controller()
    first = post(c.endpoint.url, GOOD)
    c.clock.now = T0 + timedelta(seconds=5)
    again = post(c.endpoint.url, GOOD)
    assert first[0] == again[0] == 202
    assert again[1] == {"event_id": first[1]["event_id"], "duplicate": True}
    (event,) = c.store.interruptions()
    assert event.received_at_utc == T0  # the first receipt counts
    other = post(c.endpoint.url, {**GOOD, "notice_id": "preempted@43"})  # a later preemption of a recreated VM
    assert other[1]["event_id"] != first[1]["event_id"] and len(c.store.interruptions()) == 2


def test_a_notice_whose_audit_entry_fails_is_not_kept_so_the_retry_stores_both(make_controller):
    """The notice was committed before its ``notice_received`` audit entry:
    when that write failed (500), node-watch's retry got ``duplicate: true``
    and the audit entry was never written. A real SQLite failure of the audit
    insert (a trigger that aborts it), then the retry once it is gone."""
    import sqlalchemy as sa

    c = make_controller("gcp")
    engine = sa.create_engine(c.store.url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TRIGGER no_audit BEFORE INSERT ON events WHEN NEW.kind = 'notice_received' "
                             "BEGIN SELECT RAISE(ABORT, 'audit log unwritable'); END"))
    failed = post(c.endpoint.url, GOOD)
    assert failed[0] == 500 and "audit log unwritable" in failed[1]["error"], failed
    assert c.store.interruptions() == () and c.store.events("notice_received") == ()  # neither, not half
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TRIGGER no_audit"))
    engine.dispose()
    status, answer, _ = post(c.endpoint.url, GOOD)  # node-watch retries a 500
    assert status == 202 and answer["duplicate"] is False, answer
    (event,) = c.store.interruptions()
    (audit,) = c.store.events("notice_received")
    assert audit["payload"]["event_id"] == event.event_id == answer["event_id"]
    assert post(c.endpoint.url, GOOD)[1]["duplicate"] is True  # and a later re-post is a duplicate again


def test_concurrent_posts_of_one_notice_store_one_event(make_controller):
    c = make_controller()
    answers: list[tuple] = []
    threads = [threading.Thread(target=lambda: answers.append(post(c.endpoint.url, GOOD))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [a[0] for a in answers] == [202] * 8
    assert sorted(a[1]["duplicate"] for a in answers) == [False] + [True] * 7
    assert len(c.store.interruptions()) == 1


@pytest.mark.parametrize("token", [None, "wrong", TOKEN + "x", ""], ids=["none", "wrong", "longer", "empty"])
def test_without_the_right_token_401_and_nothing_stored(make_controller, token):
    c = make_controller()
    status, answer, headers = post(c.endpoint.url, GOOD, token=token)
    assert status == 401 and "token" in answer["error"]
    assert headers["WWW-Authenticate"].startswith("Bearer")
    assert c.store.interruptions(unhandled_only=False) == ()


def test_a_non_bearer_scheme_is_refused(make_controller):
    c = make_controller()
    req = urllib.request.Request(c.endpoint.url + "/v1/notices", data=json.dumps(GOOD).encode(),
                                 headers={"Authorization": f"Basic {TOKEN}"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=5)
    assert exc.value.code == 401


@pytest.mark.parametrize(
    "body, field, words",
    [
        (b"{not json", "body", "not JSON"),
        (b"[1, 2]", "body", "JSON object"),
        ({k: v for k, v in GOOD.items() if k != "node_id"}, "node_id", "required"),
        ({**GOOD, "node_id": ""}, "node_id", "at least 1"),
        ({**GOOD, "kind": "evicted"}, "kind", "reclaim_warning"),
        ({**GOOD, "provider": "ibm"}, "provider", "aws"),
        ({**GOOD, "deadline_utc": "2026-11-02T09:00:30"}, "deadline_utc", "timezone"),
        ({**GOOD, "deadline_utc": "soon"}, "deadline_utc", "datetime"),
        ({**GOOD, "notice_id": None}, "notice_id", "string"),
        ({**GOOD, "colour": "red"}, "colour", "not permitted"),
        # valid ISO 8601, but outside what a datetime holds once in UTC: was a 500 (OverflowError),
        # which the watcher retries for ever
        ({**GOOD, "deadline_utc": "9999-12-31T23:59:59-05:00"}, "deadline_utc", "out of range"),
        ({**GOOD, "deadline_utc": "0001-01-01T00:00:00+05:00"}, "deadline_utc", "out of range"),
        # valid JSON the parser cannot take: were a 500 (RecursionError, ValueError), retried for ever
        (b"[" * 30000 + b"]" * 30000, "body", "nested too deeply"),
        (b'{"deadline_utc": ' + b"9" * 5000 + b"}", "body", "integer of over 4300 digits"),
        # seconds since 1970, which pydantic alone took for a time: the docs say a time with a zone
        ({**GOOD, "deadline_utc": 1767225630}, "deadline_utc", "ISO 8601 time with a zone"),
        ({**GOOD, "deadline_utc": "1767225630"}, "deadline_utc", "ISO 8601 time with a zone"),
        ({**GOOD, "deadline_utc": 1.7e9}, "deadline_utc", "ISO 8601 time with a zone"),
    ],
    ids=["not-json", "not-object", "no-node", "empty-node", "bad-kind", "bad-provider", "naive-deadline",
         "bad-deadline", "null-notice-id", "extra-field", "deadline-past-9999", "deadline-before-year-1",
         "nested-too-deeply", "5000-digits", "epoch-number", "epoch-string", "epoch-float"],
)
def test_an_invalid_body_is_400_naming_the_field(make_controller, body, field, words, caplog):
    c = make_controller()
    raw = body if isinstance(body, bytes) else None
    with caplog.at_level(logging.ERROR, logger="fleetctl.notices"):
        status, answer, _ = post(c.endpoint.url, body, raw=raw)
    assert not caplog.records  # the client's mistake, not the endpoint's failure
    assert status == 400
    assert field in [i["field"] for i in answer["issues"]]
    assert f"{field}:" in answer["error"] and words.lower() in answer["error"].lower()
    assert c.store.interruptions(unhandled_only=False) == ()


def get_status(url, event_id, token=TOKEN):  # noqa: ANN001, ANN201
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    req = urllib.request.Request(f"{url}/v1/notices/{event_id}", headers=headers, method="GET")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_a_notice_reads_unhandled_until_the_interruptions_pass_handled_it(make_controller):
    c = make_controller("gcp")
    _, answer, _ = post(c.endpoint.url, GOOD)
    event_id = answer["event_id"]
    assert get_status(c.endpoint.url, event_id) == (
        200, {"event_id": event_id, "handled": False, "handled_at_utc": None, "node_known": None})
    c.clock.now = T0 + timedelta(seconds=4)
    c.tick()  # the node is unknown to this controller: the notice is recorded and handled all the same
    assert get_status(c.endpoint.url, event_id) == (  # ... and the answer says nothing was drained
        200, {"event_id": event_id, "handled": True, "handled_at_utc": "2026-11-02T09:00:04Z", "node_known": False})
    c.run_checkpointable_job()
    (node_id,) = c.nodes()
    _, known, _ = post(c.endpoint.url, {**GOOD, "node_id": node_id})
    c.tick()
    assert get_status(c.endpoint.url, known["event_id"])[1]["node_known"] is True
    status, answer = get_status(c.endpoint.url, "no-such-event")
    assert status == 404 and "no-such-event" in answer["error"]
    assert get_status(c.endpoint.url, event_id, token="wrong")[0] == 401
    assert get_status(c.endpoint.url, event_id, token=None)[0] == 401


def test_other_methods_paths_and_sizes(make_controller):
    c = make_controller()
    assert post(c.endpoint.url, GOOD, method="GET")[0] == 405
    req = urllib.request.Request(c.endpoint.url + "/v1/other", data=b"{}", method="POST",
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=5)
    assert exc.value.code == 404
    status, answer, _ = post(c.endpoint.url, None, raw=b" " * (MAX_BODY_BYTES + 1))
    assert status == 413
    assert c.store.interruptions(unhandled_only=False) == ()


def test_a_tokenless_endpoint_only_on_loopback(make_controller):
    c = make_controller(token=None)
    assert post(c.endpoint.url, GOOD, token=None)[0] == 202  # loopback: no token needed
    for addr in ("0.0.0.0:0", "10.0.0.5:9109", "[::]:0", "controller.internal:9109"):
        with pytest.raises(ValueError, match="without a token"):
            NoticeServer(c.endpoint_store, addr, token=None)
    with pytest.raises(ValueError, match="HOST:PORT"):
        NoticeServer(c.endpoint_store, "9109", token=TOKEN)


@pytest.mark.parametrize("token", ["two\nlines", "s3cr\u00e9t", "tok\u20ac"])
def test_the_endpoint_refuses_a_token_no_watcher_could_send(make_controller, token):
    c = make_controller(start=False)
    with pytest.raises(ValueError, match="the notice token cannot be used: "):
        NoticeServer(c.endpoint_store, "127.0.0.1:0", token=token)


def test_an_ipv6_endpoint_serves_and_names_itself_with_brackets(make_controller):
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    c = make_controller(token=None)
    server = NoticeServer(c.endpoint_store, "[::1]:0", token=None, clock=c.clock).start()
    try:
        assert server.url.startswith("http://[::1]:")
        assert post(server.url, GOOD, token=None)[0] == 202
        assert [e.node_id for e in c.store.interruptions()] == ["gke-node-1"]
    finally:
        server.shutdown()


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.3.2.1", True), ("::1", True),
                                            ("[::1]", True), ("localhost", True), ("0.0.0.0", False),
                                            ("10.1.2.3", False), ("example.org", False)])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("addr, expected", [
    ("127.0.0.1:9109", ("127.0.0.1", 9109)), ("[::1]:0", ("::1", 0)), ("::1:65535", ("::1", 65535)),
    ("controller.internal:80", ("controller.internal", 80)),
])
def test_split_addr(addr, expected):
    assert split_addr(addr) == expected


@pytest.mark.parametrize("addr", [":9109", "127.0.0.1:65536", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:9\u00b2",
                                  "127.0.0.1:-1", "9109"],
                         ids=["no-host", "port-over-65535", "no-port", "a-name-for-a-port", "superscript-digit",
                              "negative", "no-colon"])
def test_split_addr_refuses_anything_but_host_and_port_naming_the_option(addr):
    with pytest.raises(ValueError) as exc:
        split_addr(addr)
    assert str(exc.value) == (f"--notice-addr {addr!r}: expected HOST:PORT with a port up to 65535, "
                              "e.g. 127.0.0.1:9109")
    with pytest.raises(ValueError, match="^--metrics-addr .* e.g. 127.0.0.1:9108$"):
        split_addr(addr, "--metrics-addr", "127.0.0.1:9108")


@pytest.mark.parametrize("deadline, warned", [
    ("2026-11-02T09:04:59Z", True), ("2026-11-02T09:05:00Z", True), ("2026-11-02T09:05:01Z", False), (None, False),
], ids=["a-second-past", "at-arrival", "a-second-left", "none"])
def test_a_notice_that_arrives_after_its_deadline_is_stored_with_a_warning_the_first_time(make_controller, caplog,
                                                                                         deadline, warned):
    c = make_controller(start=False)
    c.clock.now = T0 + timedelta(minutes=5)
    raw = json.dumps({**GOOD, "provider": "aws", "notice_id": "i-1", "deadline_utc": deadline}).encode()
    for duplicate in (False, True):  # a re-post is not warned of again
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="fleetctl.notices"):
            status, answer = c.endpoint.accept(raw)
        assert (status, answer["duplicate"]) == (202, duplicate)
        late = [r.getMessage() for r in caplog.records if "after its deadline" in r.getMessage()]
        assert len(late) == (warned and not duplicate), late
        (stored,) = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        assert f": {'duplicate' if duplicate else 'new'} reclaim_warning on gke-node-1 " in stored, stored
    (event,) = c.store.interruptions()
    assert event.deadline_utc == (None if deadline is None else datetime.fromisoformat(deadline))


def test_event_ids_are_the_provider_and_24_hex_digits_of_a_digest_of_the_four_parts():
    one = event_id_for("gcp", "n1", InterruptionKind.RECLAIM_WARNING, "preempted@42")
    assert one == event_id_for("gcp", "n1", InterruptionKind.RECLAIM_WARNING, "preempted@42")
    prefix, digest = one[:len("node-gcp-")], one[len("node-gcp-"):]
    assert prefix == "node-gcp-" and len(digest) == 24 and int(digest, 16) >= 0
    others = {event_id_for("aws", "n1", InterruptionKind.RECLAIM_WARNING, "preempted@42")[len("node-aws-"):],
              event_id_for("gcp", "n2", InterruptionKind.RECLAIM_WARNING, "preempted@42")[len("node-gcp-"):],
              event_id_for("gcp", "n1", InterruptionKind.TERMINATED, "preempted@42")[len("node-gcp-"):],
              event_id_for("gcp", "n1", InterruptionKind.RECLAIM_WARNING, "preempted@43")[len("node-gcp-"):],
              event_id_for("gcpn", "1", InterruptionKind.RECLAIM_WARNING, "preempted@42")[len("node-gcpn-"):]}
    assert len(others | {digest}) == 6  # each part counts, and where one ends and the next begins


def test_a_gcp_deadline_from_a_node_clock_that_runs_ahead_is_capped_at_the_30_second_notice(make_controller):
    c = make_controller("gcp")
    ahead = {**GOOD, "deadline_utc": "2026-11-02T10:00:30Z"}  # the node's clock runs an hour ahead
    assert post(c.endpoint.url, ahead)[0] == 202
    (event,) = c.store.interruptions()
    assert event.deadline_utc == T0 + timedelta(seconds=30)  # GCE stops the VM 30 s after the notice
    aws = {**GOOD, "provider": "aws", "notice_id": "i-1", "deadline_utc": "2026-11-02T09:02:00Z"}
    assert post(c.endpoint.url, aws)[0] == 202  # AWS's time comes from the instance metadata service: kept
    assert {e.provider: e.deadline_utc for e in c.store.interruptions()}["aws"] == T0 + timedelta(minutes=2)


@pytest.mark.parametrize("posted, stored", [
    ("2026-11-02T08:58:30Z", T0 + timedelta(seconds=30)),  # the node's clock 2 minutes behind: was already past
    ("2026-11-02T08:59:59Z", T0 + timedelta(seconds=30)),  # a second before it arrived
    ("2026-11-02T09:00:00Z", T0),  # within the 30 s after it arrived: the node saw it a little earlier
    ("2026-11-02T09:00:21Z", T0 + timedelta(seconds=21)),
    ("2026-11-02T09:00:31Z", T0 + timedelta(seconds=30)),  # a clock running ahead
    (None, T0 + timedelta(seconds=30)),
], ids=["2-min-behind", "1-s-behind", "at-arrival", "within", "1-s-ahead", "none"])
def test_a_gcp_deadline_outside_the_30_seconds_after_arrival_is_30_seconds_after_arrival(make_controller, posted,
                                                                                       stored):
    """Only a node clock running ahead was corrected; one running behind gave
    a deadline already past, so the job could not checkpoint."""
    c = make_controller("gcp")
    assert post(c.endpoint.url, {**GOOD, "deadline_utc": posted})[0] == 202
    (event,) = c.store.interruptions()
    assert event.deadline_utc == stored


@pytest.mark.parametrize("kind, deadline", [("reclaim_warning", T0 + timedelta(seconds=30)), ("terminated", None),
                                            ("rebalance", None)])
def test_a_gcp_notice_without_a_deadline_gets_the_30_seconds_only_if_it_is_a_reclaim_warning(kind, deadline):
    event, body = parse_notice(json.dumps({**GOOD, "kind": kind, "deadline_utc": None}).encode(), T0)
    assert (event.kind.value, event.received_at_utc, event.deadline_utc) == (kind, T0, deadline)
    assert body.detail == GOOD["detail"]


def test_a_negative_length_is_refused_and_a_stalled_client_is_dropped(make_controller, monkeypatch):
    import socket

    from fleetctl.controller import notices

    monkeypatch.setattr(notices, "REQUEST_TIMEOUT_SECONDS", 0.5)
    c = make_controller()
    host, port = c.endpoint.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        # read(-1) would read whatever follows (megabytes, past the size limit) until the client hangs up
        sock.sendall(b"POST /v1/notices HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
                     + b"\r\nContent-Length: -1\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 400") and b"invalid Content-Length" in answer
    assert c.store.interruptions() == ()
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"POST /v1/notices HTTP/1.1\r\n")  # and then nothing
        assert sock.recv(1024) == b""  # the endpoint hangs up after its timeout (the client's is 5 s)


def test_connections_beyond_the_limit_are_closed_at_once(make_controller, monkeypatch):
    import socket

    from fleetctl.controller import notices

    monkeypatch.setattr(notices, "MAX_CONNECTIONS", 2)
    c = make_controller()
    host, port = c.endpoint.url.removeprefix("http://").rsplit(":", 1)
    held = [socket.create_connection((host, int(port)), timeout=5) for _ in range(2)]
    try:
        for sock in held:
            sock.sendall(b"POST /v1/notices HTTP/1.1\r\n")  # stalled mid-request: each holds a slot
        import time

        time.sleep(0.3)
        with socket.create_connection((host, int(port)), timeout=5) as third:
            assert third.recv(1024) == b""  # closed without an answer
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    assert post(c.endpoint.url, GOOD)[0] == 202  # slots come back when connections end


def test_clients_dribbling_their_requests_are_dropped_at_the_request_deadline(make_controller, monkeypatch):
    """The timeout bounded each read, not the request: clients sending a
    header line (or a byte of one) more often than it held every connection
    slot for ever, and real notices were refused."""
    from fleetctl.controller import notices

    monkeypatch.setattr(notices, "REQUEST_TIMEOUT_SECONDS", 1.0)
    monkeypatch.setattr(notices, "MAX_CONNECTIONS", 2)
    c = make_controller()
    host, port = c.endpoint.url.removeprefix("http://").rsplit(":", 1)
    dribblers = [socket.create_connection((host, int(port)), timeout=5) for _ in range(2)]
    try:
        for sock in dribblers:
            sock.sendall(b"POST /v1/notices HTTP/1.1\r\nX-Dribble: ")
            sock.settimeout(0.25)  # a byte every 0.5 s, well within the per-read timeout
        open_ = list(dribblers)
        for _ in range(80):  # 40 s of dribbling at most
            for sock in list(open_):
                try:
                    sock.sendall(b"1")
                    if sock.recv(1024) == b"":
                        open_.remove(sock)  # the endpoint hung up
                except TimeoutError:
                    pass  # still open, nothing said: dribble on
                except OSError:
                    open_.remove(sock)  # reset by the endpoint
            if not open_:
                break
        assert open_ == []  # both dropped, though neither ever stalled for a whole timeout
    finally:
        for sock in dribblers:
            sock.close()
    assert post(c.endpoint.url, GOOD)[0] == 202  # their slots came back: a real notice gets in


@pytest.mark.parametrize("method, path, status, allow", [
    ("GET", "/metrics", 404, None),  # were 405
    ("GET", "/nope", 404, None),
    ("PUT", "/nope", 404, None),
    ("GET", "/v1/notices/", 404, None),
    ("HEAD", "/v1/notices/x", 405, "GET"),  # were 501
    ("OPTIONS", "/v1/notices", 405, "POST"),
    ("TRACE", "/v1/notices", 405, "POST"),
    ("DELETE", "/v1/notices", 405, "POST"),
    ("GET", "/v1/notices", 405, "POST"),
    ("POST", "/v1/notices/x", 405, "GET"),
    ("PATCH", "/v1/notices/x", 405, "GET"),
])
def test_another_path_is_404_and_another_method_405_as_the_docs_say(make_controller, method, path, status, allow):
    import http.client

    c = make_controller()
    host, port = c.endpoint.url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request(method, path, headers={"Authorization": f"Bearer {TOKEN}"})
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    assert (resp.status, resp.getheader("Allow")) == (status, allow)
    if method == "HEAD":
        assert body == b""
    else:
        assert (path if status == 404 else f"use {allow}") in json.loads(body)["error"]
    assert c.store.interruptions(unhandled_only=False) == ()
