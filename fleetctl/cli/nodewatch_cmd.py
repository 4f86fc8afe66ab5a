"""`fleetctl node-watch`: runs on each node, posts reclaim notices from the
instance metadata service to the daemon's notice endpoint (see docs/node-watch.md)."""

from __future__ import annotations

import logging
import signal
import threading
import urllib.parse
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Callable, Iterator, Optional

import typer

from fleetctl.cli.common import (
    LogFormat,
    LogFormatOption,
    LogLevel,
    LogLevelOption,
    console,
    fail,
    one_of,
    read_token_file,
)


class Cloud(str, Enum):
    aws = "aws"
    gcp = "gcp"
    azure = "azure"


def node_watch(
    controller: Annotated[str, typer.Option("--controller", help="The daemon's notice endpoint base URL, e.g. "
                                            "http://10.0.0.5:9109 (notices go to POST /v1/notices).",
                                            show_default=False)],
    cloud: Annotated[Cloud, typer.Option("--cloud", help="Which metadata service to poll.", show_default=False,
                                         **one_of(Cloud))],
    token_file: Annotated[Optional[Path], typer.Option(
        "--token-file", help="File holding the bearer token the daemon expects (its --notice-token-file). "
        "Without it no token is sent (only a loopback daemon accepts that).", show_default=False)] = None,
    node_id: Annotated[Optional[str], typer.Option(
        "--node-id", help="This node's id in fleetctl. Default: from metadata (AWS instance-id, GCP "
        "ZONE/NAME, Azure VM name).", show_default=False)] = None,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between metadata polls (AWS recommends "
                                            "5; at most 30: GCP and Azure give 30 seconds of notice).",
                                            min=0.1, max=30.0)] = 5.0,
    metadata_url: Annotated[str, typer.Option("--metadata-url", envvar="FLEETCTL_METADATA_URL",
                                              help="Base URL of the metadata service (tests point it at a "
                                              "local fake).")] = "http://169.254.169.254",
    gce_wait_for_change: Annotated[bool, typer.Option(
        "--gce-wait-for-change", help="GCP: block on instance/preempted?wait_for_change=true instead of polling "
        "every --interval.")] = False,
    max_attempts: Annotated[int, typer.Option("--max-attempts", help="Posts of one notice before giving up "
                                              "(exponential backoff between them).", min=1, max=10_000)] = 10,
    max_backoff: Annotated[float, typer.Option("--max-backoff", help="Longest wait between two posts, seconds "
                                               "(at most 60: a notice gives 2 minutes at most).",
                                               min=0.0, max=60.0)] = 8.0,
    once: Annotated[bool, typer.Option("--once", help="Poll once, deliver what is announced, exit.")] = False,
    log_format: LogFormatOption = LogFormat.TEXT,
    log_level: LogLevelOption = LogLevel.INFO,
) -> None:
    """Watch this node's instance metadata for reclaim notices and post each one once to the
    controller daemon (`fleetctl daemon --notice-addr`), retrying with backoff until it is accepted.

    AWS: IMDSv2 spot/instance-action and rebalance recommendations. GCP: instance/preempted.
    Azure: Scheduled Events Preempt, approved only once the controller has drained the node
    (checkpointed and requeued its jobs), so approving early never cuts
    a checkpoint short (Azure evicts at NotBefore without it).
    Exits 1 with the reason when a notice cannot be delivered within --max-attempts;
    2 for an unusable option (a --token-file that cannot be read or holds no token)."""
    from fleetctl.nodewatch import (
        MAX_NODE_ID,
        Backoff,
        DeliveryFailed,
        MetadataError,
        NodeWatcher,
        NoticeClient,
        metadata_source,
    )

    for option, url in (("--controller", controller), ("--metadata-url", metadata_url)):
        try:
            parts = urllib.parse.urlsplit(url)
            usable = parts.scheme in ("http", "https") and bool(parts.hostname)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number from 0 to 65535
        except ValueError:  # also an unclosed IPv6 bracket (http://[::1)
            usable = False
        if not usable:
            fail(f"{option} {url!r}: expected an http:// or https:// URL with a host", 2)
    if node_id is not None and not 0 < len(node_id.strip()) <= MAX_NODE_ID:
        fail(f"--node-id must be 1 to {MAX_NODE_ID} characters, as the daemon's notice endpoint accepts "
             f"(got {len(node_id.strip())})", 2)
    from fleetctl.logs import configure

    configure(log_format.value, log_level.value)
    token = _read_token(token_file)
    source = metadata_source(cloud.value, metadata_url, gce_wait_for_change=gce_wait_for_change)
    try:
        node = node_id or source.discover_node_id()
    except (MetadataError, OSError) as exc:
        fail(f"cannot discover this node's id from the {cloud.value} metadata service at {metadata_url}: {exc} "
             "(is --cloud right? or pass --node-id)")
    watcher = NodeWatcher(
        source=source,
        client=NoticeClient(controller, token),
        node_id=node,
        # With --gce-wait-for-change each poll blocks until preempted changes and the watcher does not sleep
        # between them; the interval still applies when it cannot wait (an answer without an ETag).
        interval_seconds=interval,
        backoff=Backoff(max_seconds=max_backoff, max_attempts=max_attempts),
    )
    console.print(f"fleetctl node-watch: {cloud.value} node {node}, notices to {watcher.client.url}", markup=False)
    try:
        if once:
            delivered = watcher.poll_once(approve=False)  # --once never waits for the controller: no approval
            known = [e for e in delivered if e in watcher.already_stored]
            console.print(f"{len(delivered)} notice(s) delivered" + (f": {', '.join(delivered)}" if delivered else "")
                          + (f" ({len(known)} the controller had already: {', '.join(known)})" if known else ""),
                          markup=False)
        else:
            with _stop_on_signals(watcher.request_stop):
                watcher.run()
    except DeliveryFailed as exc:
        fail(str(exc))
    except (MetadataError, OSError) as exc:  # --once: the one poll failed
        fail(f"reading the {cloud.value} metadata service at {metadata_url}: {exc}")


@contextmanager
def _stop_on_signals(request_stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM and SIGINT call ``request_stop`` (``NodeWatcher.request_stop``:
    the watcher finishes what it is doing, but a blocking GCE wait ends at
    once); the previous handlers are put back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _stop(signum, _frame):  # noqa: ANN001
        logging.getLogger("fleetctl.nodewatch").info("signal %d: stopping", signum)
        request_stop()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _read_token(path: Path | None) -> str | None:
    return None if path is None else read_token_file("--token-file", path, "fleetctl.nodewatch")
