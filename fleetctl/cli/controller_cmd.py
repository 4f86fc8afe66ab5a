"""`fleetctl reconcile --once` (cron) and `fleetctl daemon` (the loop with /metrics)."""

from __future__ import annotations

import logging
import signal
from typing import Annotated

import typer

from fleetctl.cli.common import (
    PolicyOption,
    SeedOption,
    StateOption,
    console,
    fail,
    load_policy_or_exit,
    make_provider,
    open_store,
    utcnow,
)


def reconcile(
    once: Annotated[bool, typer.Option("--once", help="Run one tick and exit (for cron).")] = False,
    policy: PolicyOption = None,
    state: StateOption = None,
    seed: SeedOption = 0,
) -> None:
    """One reconcile tick: handle reclaim notices, start and finish jobs, plan, act, record.

    Idempotent: a second run with nothing new changes nothing. For a loop, use `fleetctl daemon`."""
    from fleetctl.controller.reconcile import tick
    from fleetctl.controller.runtime import SimRuntime

    if not once:
        fail("reconcile runs one tick and needs --once (for cron); for a loop run `fleetctl daemon`", 2)
    pol, _ = load_policy_or_exit(policy)
    store = open_store(state)
    try:
        report = tick(store=store, provider=make_provider(store, seed), runtime=SimRuntime(), policy=pol, now=utcnow())
    finally:
        store.close()
    actions = report.plan.actions if report.plan else ()
    console.print(
        f"tick: {len(actions)} actions, {len(report.started)} jobs started, {len(report.completed)} completed, "
        f"{len(report.requeued)} requeued after {report.interruptions} notices",
        markup=False,
    )


def daemon(
    interval: Annotated[float, typer.Option("--interval", help="Seconds between reconcile ticks.", min=0.1)] = 30.0,
    interruption_interval: Annotated[
        float, typer.Option("--interruption-interval", help="Seconds between checks for reclaim notices.", min=0.1)
    ] = 5.0,
    price_interval: Annotated[float, typer.Option("--price-interval", help="Seconds between price refreshes.", min=1)] = 3600.0,
    metrics_addr: Annotated[
        str, typer.Option("--metrics-addr", help="Where to serve Prometheus /metrics (HOST:PORT).")
    ] = "127.0.0.1:9108",
    policy: PolicyOption = None,
    state: StateOption = None,
    seed: SeedOption = 0,
) -> None:
    """Run the controller loop: reconcile every --interval seconds, handle reclaim notices every
    --interruption-interval seconds, refresh prices hourly, and serve /metrics. SIGTERM or Ctrl-C
    stops it after the current tick."""
    from fleetctl.controller.loop import Daemon, LoopContext
    from fleetctl.controller.runtime import SimRuntime
    from fleetctl.metrics import FleetMetrics, serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    pol, _ = load_policy_or_exit(policy)
    store = open_store(state)
    metrics = FleetMetrics()
    try:
        server, thread = serve(metrics, metrics_addr)
    except (OSError, ValueError) as exc:
        store.close()
        fail(f"cannot serve metrics on {metrics_addr}: {exc}")
    loop = Daemon(LoopContext(store, make_provider(store, seed), SimRuntime(), pol, metrics),
                  interval_seconds=interval, interruption_seconds=interruption_interval, price_seconds=price_interval)

    def _stop(signum, _frame):  # noqa: ANN001
        logging.getLogger("fleetctl.daemon").info("signal %d: stopping after the current tick", signum)
        loop.stopped.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    console.print(f"fleetctl daemon: reconcile every {interval:g} s, metrics on http://{metrics_addr}/metrics",
                  markup=False)
    try:
        loop.run_until_stopped()
    finally:
        server.shutdown()
        thread.join(timeout=5)
        store.close()
    console.print(f"stopped after {loop.ticks} ticks", markup=False)
