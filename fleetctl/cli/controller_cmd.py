"""`fleetctl reconcile --once` (cron) and `fleetctl daemon` (the loop with /metrics)."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer
from rich.markup import escape

from fleetctl.cli.common import (
    given_as,
    option_source,
    LockTimeoutOption,
    LogFormat,
    LogFormatOption,
    LogLevel,
    LogLevelOption,
    PolicyOption,
    CloudOption,
    SeedOption,
    StateOption,
    console,
    err_console,
    fail,
    is_bug,
    load_policy_or_exit,
    make_provider,
    read_policy_file_or_exit,
    open_store,
    read_token_file,
    stop_cleanly_on_sigterm,
    utcnow,
)
from fleetctl.cli.entry import take_early_hangups
from fleetctl.cli.forecast import AllowMismatchOption, ForecastDirOption, load_forecaster_or_exit

DEFAULT_METRICS_ADDR = "127.0.0.1:9108"  # docs/metrics.md; the notice endpoint's usual port is 9109


def reconcile(
    once: Annotated[bool, typer.Option("--once", help="Run one tick and exit (for cron). Required: for a loop, "
                                       "run `fleetctl daemon`.")] = False,
    forecast_dir: ForecastDirOption = None,
    allow_version_mismatch: AllowMismatchOption = False,
    policy: PolicyOption = None,
    state: StateOption = None,
    seed: SeedOption = 0,
    cloud: CloudOption = "sim",
    lock_timeout: LockTimeoutOption = 60.0,
) -> None:
    """One reconcile tick: handle reclaim notices, start and finish jobs, plan, act, record.

    Idempotent: a second run with nothing new changes nothing. For a loop, use `fleetctl daemon`.
    While it runs it holds the controller lease, so a daemon on the same store cannot handle
    reclaim notices: the tick checks for them itself every few seconds, between its steps."""
    from datetime import timedelta

    from fleetctl.controller.forecast import build_forecast
    from fleetctl.controller.reconcile import ONCE_NOTICE_CHECK_SECONDS, notice_checks, tick
    from fleetctl.controller.runtime import SimRuntime

    if not once:
        fail("reconcile runs one tick and needs --once (for cron); for a loop run `fleetctl daemon`", 2)
    from fleetctl.controller import ApplyError, ApplyInterrupted
    from providers.base import ProviderError

    pol, _ = load_policy_or_exit(policy)
    forecaster = load_forecaster_or_exit(forecast_dir, allow_version_mismatch)
    from fleetctl.controller.lease import controller_lease, holder_id
    from fleetctl.store import LeaseHeld

    stop_cleanly_on_sigterm()
    store = open_store(state)
    try:
        # One controller at a time on this store: an overlapping cron run or the daemon would act on the
        # same fleet (buy it twice, start jobs twice).
        with controller_lease(store, holder_id(), wait_seconds=lock_timeout):
            now = utcnow()
            # only the reclaims the planner still avoids are read (reclaimed_offer_ttl_minutes)
            forecast = build_forecast(store, now, forecaster,
                                      reclaims_within=timedelta(minutes=pol.reclaimed_offer_ttl_minutes))
            report = tick(store=store, provider=make_provider(store, seed, cloud, pol), runtime=SimRuntime(),
                          policy=pol, now=now, forecast=forecast,
                          notices_due=notice_checks(ONCE_NOTICE_CHECK_SECONDS, utcnow))
    except LeaseHeld as exc:
        fail(f"{exc}. This run changed nothing (waited {lock_timeout:g} s: --lock-timeout).")
    except ApplyError as exc:
        done = (f"carried out before it, and recorded: {'; '.join(exc.carried_out)}; the rest was not"
                if exc.carried_out else "nothing of it was recorded as carried out" if isinstance(exc, ApplyInterrupted)
                else "nothing of it was changed")
        message = (f"the tick's plan was not fully applied: {exc.message}; {done} (reclaim notices and job starts "
                   "before it are recorded); the next tick plans again from the fleet as it is")
        if is_bug(exc):  # not the environment's error: the report, then its traceback (fleetctl.cli.main)
            err_console.print(f"[bold red]Error:[/] {escape(message)}")
            raise
        fail(message)
    except ProviderError as exc:
        fail(f"the cloud refused a call: {type(exc).__name__}: {exc}; nothing of the plan was applied (a transient "
             "refusal clears at a later tick; a setting such as a subnet id in the policy's infrastructure does not)")
    finally:
        store.close()
    console.print(f"tick: {report.summary()}", markup=False)


def prune(
    older_than_days: Annotated[float, typer.Option(
        "--older-than-days", min=1.0, max=36500.0,
        help="Delete what is older than this many days.")] = 90.0,
    finished_older_than_days: Annotated[Optional[float], typer.Option(
        "--finished-older-than-days", min=1.0, max=36500.0, show_default=False,
        help="Also delete the finished history older than this many days: jobs that succeeded, failed or were "
        "cancelled (last written before the cut) with their handled cancel requests, nodes gone since before "
        "it with the finished launches (done, partial, failed, abandoned) that bought them, and the decision events "
        "(launch, bind, start, complete, terminate, ...) before it. Always kept: active jobs and a finished "
        "job whose cancel request no tick has handled; nodes not gone, and gone nodes that a kept reclaim "
        "notice or an active job names; pending and unknown launches, and every launch (with its retries and "
        "its nodes) while one of them is not deletable, so a retried launch never buys twice; the latest "
        "event of each kind; the start of each job run open at the cut (`fleetctl report` charges that run "
        "to its job's team from it); and each deleted job's id, final state and spec (a tombstone, a quarter "
        "of the job's row), so its id is never reused: re-submitting the job is a no-op, and a changed job "
        "under it is refused. Off unless given (auditors may want every decision kept).")] = None,
    policy: PolicyOption = None,
    state: StateOption = None,
    lock_timeout: LockTimeoutOption = 60.0,
) -> None:
    """Delete what every reconcile pass writes, older than --older-than-days: the demand and
    spot-market history (each offer's state at the cut is kept), the pass markers in the
    audit log, and handled reclaim notices. Decisions (launches, binds, terminations, ...),
    jobs and nodes are kept, and so are the reclaim notices the planner still reads, even
    when older than the cut (those within the policy's interruptions.reclaimed_offer_ttl_minutes:
    what --policy is read for). With --finished-older-than-days, the finished history goes too
    (in the same transaction, while no reconcile pass runs: it waits for the controller lease,
    --lock-timeout). The daemon does this daily (--retain-days, --retain-finished-days).

    What is kept grows with the fleet's history (about 70 KB a tick for the benchmark's 2,000 nodes), but a
    tick reads only live nodes and recent notices, so it does not slow as the store ages
    (benchmarks/results/tick_history.md). SQLite does not give the freed pages back to the
    file system: run `sqlite3 .fleetctl/state.db VACUUM` with the daemon stopped to shrink the file
    (benchmarks/results/prune_history.md)."""
    from contextlib import nullcontext

    from fleetctl.controller.lease import controller_lease, holder_id
    from fleetctl.controller.loop import prune_history
    from fleetctl.render import PRUNED, PRUNED_FINISHED, deleted_text
    from fleetctl.store import LeaseHeld

    pol, _ = load_policy_or_exit(policy)
    stop_cleanly_on_sigterm()
    store = open_store(state)
    try:
        # finished launches are deleted only while no pass is buying under their keys
        with (controller_lease(store, holder_id(), wait_seconds=lock_timeout)
              if finished_older_than_days is not None else nullcontext()):
            deleted, finished = prune_history(store, pol, utcnow(), older_than_days, finished_older_than_days or 0)
    except LeaseHeld as exc:
        fail(f"{exc}. Nothing was deleted (waited {lock_timeout:g} s: --lock-timeout).")
    finally:
        store.close()
    console.print(f"deleted {deleted_text(deleted, PRUNED)}", markup=False)
    if finished_older_than_days is not None:
        console.print(f"deleted the finished history older than {finished_older_than_days:g} days: "
                      f"{deleted_text(finished, PRUNED_FINISHED)}", markup=False)


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was given on the command line or by its environment variable."""
    return option_source(ctx, name) in ("COMMANDLINE", "ENVIRONMENT")


def daemon(
    ctx: typer.Context,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between reconcile ticks (at most a day).", min=0.1, max=86400)] = 30.0,
    interruption_interval: Annotated[
        float, typer.Option("--interruption-interval", help="Seconds between checks for reclaim notices (at most 120: AWS gives 2 minutes of notice).", min=0.1, max=120)
    ] = 5.0,
    price_interval: Annotated[float, typer.Option("--price-interval", help="Seconds between price refreshes (at most a week).", min=1, max=604800)] = 3600.0,
    metrics_addr: Annotated[
        str, typer.Option("--metrics-addr", help="Where to serve Prometheus /metrics, and the probes /healthz "
                          "and /readyz (HOST:PORT).")
    ] = DEFAULT_METRICS_ADDR,
    health_max_inactivity_seconds: Annotated[Optional[float], typer.Option(
        "--health-max-inactivity-seconds", min=1.0, max=31536000.0, show_default=False,
        help="GET /healthz (liveness) answers 503 when no reconcile pass has ended (succeeded, failed, or skipped "
        "while another process holds the controller lease) for this many seconds, counted from the start before "
        "the first: the loop is wedged (a tick hung on a cloud call or a lock), which a restart may mend. More "
        "than --interval. Default: 600, or 3 x --interval + 300 (a slow tick) when longer.")] = None,
    health_max_failing_seconds: Annotated[Optional[float], typer.Option(
        "--health-max-failing-seconds", min=1.0, max=31536000.0, show_default=False,
        help="GET /readyz (readiness) answers 503 until a reconcile pass succeeds, and when the last success is "
        "older than this many seconds: the passes keep failing (the log says why). A pass skipped while another "
        "process holds the controller lease counts as a success (a standby daemon is ready to take over). More "
        "than --interval. Default: 900, or 5 x --interval + 300 when longer.")] = None,
    notice_addr: Annotated[Optional[str], typer.Option(
        "--notice-addr", envvar="FLEETCTL_NOTICE_ADDR", show_default=False,
        help="Serve POST /v1/notices for `fleetctl node-watch` on HOST:PORT (e.g. 127.0.0.1:9109, or the "
        "node-facing address with a token). Off unless set.")] = None,
    notice_token_file: Annotated[Optional[Path], typer.Option(
        "--notice-token-file", show_default=False,
        help="File holding the bearer token node-watch must send. Default: the token itself from "
        "$FLEETCTL_NOTICE_TOKEN (the variable holds the token, not a path). "
        "Required unless --notice-addr is a loopback address.")] = None,
    forecast_dir: ForecastDirOption = None,
    allow_version_mismatch: AllowMismatchOption = False,
    retrain_hours: Annotated[float, typer.Option(
        "--retrain-hours", min=0.0, max=8760.0, callback=_zero_or_at_least_one("hour", "never"),
        help="Hours between refits of the forecast models (interruption on the recorded market, demand on the "
        "recorded demand), each adopted unless it scores worse than the current model on what it did not "
        "see (0 = never, else at least 1; needs --forecast-dir).")] = 24.0,
    retain_days: Annotated[float, typer.Option(
        "--retain-days", min=0.0, max=36500.0, callback=_zero_or_at_least_one("day", "keep everything"),
        help="Each day, delete what every pass writes (demand and market history, pass markers, handled "
        "notices) older than this many days, as `fleetctl prune` does (0 = keep everything; the forecasters "
        "retrain on the last 30 days).")] = 90.0,
    retain_finished_days: Annotated[float, typer.Option(
        "--retain-finished-days", min=0.0, max=36500.0, callback=_zero_or_at_least_one("day", "keep it all"),
        help="Each day, also delete the finished history older than this many days (finished jobs, gone nodes "
        "and their finished launches, decision events), as `fleetctl prune --finished-older-than-days` does, "
        "with what that keeps (0 = keep it all).")] = 0.0,
    policy: PolicyOption = None,
    policy_check_seconds: Annotated[float, typer.Option(
        "--policy-check-seconds", min=0.0, max=86400.0, callback=_zero_or_at_least_one("second", "only on SIGHUP"),
        help="Every this many seconds, read the policy file again if its bytes changed, as SIGHUP does (for a "
        "Kubernetes ConfigMap or a GitOps checkout, where nothing sends a signal); a version refused for errors "
        "is not read again until the file changes again (0 = only on SIGHUP).")] = 0.0,
    state: StateOption = None,
    seed: SeedOption = 0,
    cloud: CloudOption = "sim",
    log_format: LogFormatOption = LogFormat.TEXT,
    log_level: LogLevelOption = LogLevel.INFO,
) -> None:
    """Run the controller loop: reconcile every --interval seconds, handle reclaim notices every
    --interruption-interval seconds, refresh prices hourly, and serve /metrics with the liveness
    and readiness probes /healthz and /readyz (docs/metrics.md). With --notice-addr
    it also takes reclaim notices posted by `fleetctl node-watch` (GCP and Azure announce them only
    on the node). The policy is read at start and again on SIGHUP (`kill -HUP PID`, systemd's
    `ExecReload`), or when it changes with --policy-check-seconds: a valid file is taken up between passes; one with errors, or one that changes
    its infrastructure or providers sections (read at start only: restart for those), is logged
    and refused, and the daemon goes on with the policy it has (fleetctl_policy_reloads_total,
    fleetctl_policy_info). A cron `reconcile --once` reads the policy on every run. SIGTERM or
    Ctrl-C stops it after the current tick; a forecast retrain under way (--retrain-hours) first finishes the model it is refitting
    (minutes on a long history; a fit cannot be cut short), and the next model is not started."""
    # A SIGHUP while the daemon starts (the store's migrations can take a while) is kept for the loop, not
    # left to end the process as the default does (systemd counts that end as clean and would not restart it);
    # the console script caught those sent while Python imported the CLI (fleetctl.cli.entry).
    hangups: list[int] = []
    signal.signal(signal.SIGHUP, lambda signum, _frame: hangups.append(signum))
    hangups[:0] = take_early_hangups()
    from functools import partial

    from fleetctl.controller.health import LoopHealth, default_max_failing_seconds, default_max_inactivity_seconds
    from fleetctl.controller.loop import Daemon, LoopContext
    from fleetctl.controller.runtime import SimRuntime
    from fleetctl.metrics import FleetMetrics, serve
    from fleetctl.policy import read_policy_file

    from fleetctl.logs import configure

    configure(log_format.value, log_level.value)
    # apscheduler logs "Running job ..." and "... executed successfully" at INFO for every run: two lines per
    # interruption pass, every few seconds. Its warnings (a run skipped, missed or still running) stay.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    # alembic logs "Context impl SQLiteImpl." and "Will assume non-transactional DDL." at INFO whenever a store
    # handle opens (two or four lines at each start, meaningless to an operator); its "Running upgrade ..." stays.
    logging.getLogger("alembic.runtime.migration").addFilter(
        lambda record: not record.getMessage().startswith(("Context impl ", "Will assume ")))
    from fleetctl.controller.notices import host_port, split_addr

    try:
        split_addr(metrics_addr, "--metrics-addr", DEFAULT_METRICS_ADDR)
    except ValueError as exc:
        fail(str(exc), 2)
    if notice_token_file is not None and not notice_addr:  # was ignored: node-watch then met a closed port
        fail(f"--notice-token-file {notice_token_file} is for the notice endpoint, which is off without "
             "--notice-addr (or FLEETCTL_NOTICE_ADDR): give that too", 2)
    if forecast_dir is None and retrain_hours and _given(ctx, "retrain_hours"):  # was ignored: nothing to refit
        fail(f"--retrain-hours {retrain_hours:g} refits the models of --forecast-dir, which is not given: give it "
             "too (without it the planner uses the policy's default risk and nothing is retrained)", 2)
    max_inactivity = health_max_inactivity_seconds or default_max_inactivity_seconds(interval)
    max_failing = health_max_failing_seconds or default_max_failing_seconds(interval)
    for option, limit in (("--health-max-inactivity-seconds", max_inactivity),
                          ("--health-max-failing-seconds", max_failing)):
        if limit <= interval:  # the defaults are longer: only a given limit can be this short
            fail(f"{option} {limit:g} is not more than --interval {interval:g}: a reconcile pass ends once an "
                 "interval at best, so the probe would fail between two passes", 2)
    notice_option = given_as(ctx, "notice_addr", "--notice-addr", "FLEETCTL_NOTICE_ADDR")
    notice_token = _check_notice_options(notice_addr, notice_token_file, notice_option) if notice_addr else None
    read, policy_file = read_policy_file_or_exit(policy)
    pol = read.policy
    forecaster = load_forecaster_or_exit(forecast_dir, allow_version_mismatch)
    store = open_store(state)
    notices = _start_notice_server(notice_addr, notice_token, store) if notice_addr else None
    metrics = FleetMetrics()
    health = LoopHealth(started_at=time.monotonic(), max_inactivity_seconds=max_inactivity,
                        max_failing_seconds=max_failing)
    try:
        server, thread = serve(metrics, metrics_addr, health)
    except (OSError, ValueError) as exc:
        if notices is not None:
            notices.shutdown()
            notices.store.close()
        store.close()
        fail(f"cannot serve metrics on {metrics_addr}: {exc}")
    loop = Daemon(LoopContext(store, make_provider(store, seed, cloud, pol), SimRuntime(), pol, metrics, forecaster),
                  interval_seconds=interval, interruption_seconds=interruption_interval, price_seconds=price_interval,
                  retrain_seconds=retrain_hours * 3600 if forecaster is not None else 0.0,
                  retain_days=retain_days, retain_finished_days=retain_finished_days,
                  read_policy=partial(read_policy_file, policy_file), policy_file=read,
                  policy_check_seconds=policy_check_seconds, health=health)

    def _stop(signum, _frame):  # noqa: ANN001
        logging.getLogger("fleetctl.daemon").info(
            "signal %d: stopping after the current tick (and the model refit under way, if a retrain runs)", signum)
        loop.stopped.set()

    def _reload(_signum, _frame):  # noqa: ANN001 - the loop logs it, reading the file in the main thread
        loop.request_reload()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGHUP, _reload)
    if hangups:  # sent while it started: the file may have changed since it was read
        loop.request_reload()
    bound_host, bound_port = server.server_address[:2]  # the real port of --metrics-addr HOST:0
    metrics_url = f"http://{host_port(bound_host, bound_port)}/metrics"
    console.print(f"fleetctl daemon: reconcile every {interval:g} s, metrics on {metrics_url} (probes /healthz, "
                  "/readyz)"
                  + (f", notices on {notices.url}/v1/notices" if notices else ""), markup=False)
    try:
        loop.run_until_stopped()
    finally:
        server.shutdown()
        thread.join(timeout=5)
        server.server_close()  # shutdown() only ends serve_forever; the listening socket stays open
        if notices is not None:
            notices.shutdown()
            notices.store.close()
        store.close()
    console.print(f"stopped after {loop.ticks} tick{'' if loop.ticks == 1 else 's'}", markup=False)


def _zero_or_at_least_one(unit: str, zero_means: str) -> Callable[[float], float]:
    """An option callback: 0 (``zero_means``) or at least one ``unit``; a shorter period would have the daemon
    refit or prune back to back (apscheduler turns an interval under a second into one second)."""
    def check(value: float) -> float:
        if 0 < value < 1:
            raise typer.BadParameter(f"0 ({zero_means}) or at least 1 {unit}")
        return value

    return check


def _check_notice_options(addr: str, path: Path | None, option: str = "--notice-addr") -> str | None:
    """The endpoint's bearer token (from ``path``, else ``$FLEETCTL_NOTICE_TOKEN``, else none),
    checked before anything starts: no token is allowed on a loopback address only. ``option``:
    where ``addr`` came from, as errors name it."""
    from fleetctl.controller.notices import is_loopback, split_addr
    from fleetctl.nodewatch import token_problem

    try:
        host, _ = split_addr(addr, option)
    except ValueError as exc:
        fail(str(exc), 2)
    if path is None:
        token = os.environ.get("FLEETCTL_NOTICE_TOKEN", "").strip() or None
        if token is not None and os.sep in token and Path(token).is_file():
            # Every notice would be refused as "wrong bearer token" while node-watch sends the file's content.
            fail(f"FLEETCTL_NOTICE_TOKEN holds the token itself, not a file, but it names the file {token}: pass "
                 f"--notice-token-file {token} instead (or put the token in the variable)", 2)
        problem = token_problem(token) if token is not None else None
        if problem:
            fail(f"FLEETCTL_NOTICE_TOKEN: {problem}", 2)
    else:
        token = read_token_file("--notice-token-file", path, "fleetctl.daemon")
    if token is not None and not is_loopback(host):
        logging.getLogger("fleetctl.daemon").warning(
            "the notice endpoint on %s is plain HTTP: the bearer token crosses the network in clear text; keep it "
            "on a private network or behind a TLS proxy", addr)
    if token is None and not is_loopback(host):
        fail(f"refusing to serve notices on {addr} without a token: pass --notice-token-file FILE or set "
             "FLEETCTL_NOTICE_TOKEN (a tokenless endpoint is allowed on a loopback address only)", 2)
    return token


def _start_notice_server(addr: str, token: str | None, store):  # noqa: ANN001, ANN202
    """The endpoint gets its own store handle (the loop's is not shared across threads)."""
    from fleetctl.controller.notices import NoticeServer

    endpoint_store = open_store(store.url)
    try:
        return NoticeServer(endpoint_store, addr, token=token).start()
    except (OSError, ValueError) as exc:
        endpoint_store.close()
        store.close()
        fail(f"cannot serve notices on {addr}: {exc}")
