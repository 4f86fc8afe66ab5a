"""`fleetctl status`: nodes, jobs and what the fleet costs now."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from fleetctl.cli.common import (
    CloudOption,
    SeedOption,
    StateOption,
    console,
    load_policy_or_exit,
    make_provider,
    one_of,
    open_store,
    utcnow,
)
from fleetctl.cli.common import TableFormat
from fleetctl.cli.tables import print_table
from fleetctl.codec import dt_to_str, node_to_dict, show_utc
from fleetctl.model import InterruptionKind, NodeState, Policy
from fleetctl.render import counted


def status(state: StateOption = None, seed: SeedOption = 0, cloud: CloudOption = "sim",
           policy: Annotated[Optional[Path], typer.Option(
               "--policy", show_default=False,
               help="Policy YAML. On the sandbox, read only when given, or when $FLEETCTL_POLICY names one; "
                    "with --cloud aws, gcp or azure (it names the cluster), default: $FLEETCTL_POLICY, else "
                    "policies/example.yaml.")] = None,
           output: Annotated[TableFormat, typer.Option(
               "--format", help="table, or json for scripts: {\"nodes\": [...], \"jobs\": {STATE: count}, "
                                "\"gpus\", \"usd_per_hour\", \"pending_notices\"}; each node with its jobs.",
               **one_of(TableFormat))] = TableFormat.table,
           ) -> None:
    """Show nodes (with the jobs on them), job counts by state, and current USD/hour.
    With --cloud aws, gcp or azure, the nodes come from those clouds (the policy names the
    cluster). On the sandbox the policy is not needed, and read (and checked) only when --policy or
    $FLEETCTL_POLICY names one."""
    named = policy is not None or bool(os.environ.get("FLEETCTL_POLICY"))
    pol = load_policy_or_exit(policy)[0] if cloud != "sim" or named else None
    # The sandbox's nodes live in the store, which is only read then; a cloud's nodes are recorded in it.
    store = open_store(state, must_exist=cloud == "sim", read_only=cloud == "sim")
    try:
        provider = make_provider(store, seed, cloud, pol)
        now = utcnow()
        nodes = [n for n in provider.nodes(now) if n.state is not NodeState.GONE]
        jobs = store.jobs(active_only=False)
        pending = store.interruptions(unhandled_only=True)  # received, not yet handled by a tick
    finally:
        store.close()
    on_node: dict[str, list[str]] = {}
    for j in jobs:
        if j.state.active:
            for n in j.node_ids:
                on_node.setdefault(n, []).append(j.job_id)
    counts = Counter(j.state.value for j in jobs)
    usd = sum(n.offer.usd_per_hour for n in nodes)
    gpus = sum(n.offer.instance_type.gpu_count for n in nodes)
    if output is TableFormat.json:
        doc = {"nodes": [{**node_to_dict(n), "jobs": sorted(set(on_node.get(n.node_id, [])))} for n in nodes],
               "jobs": dict(sorted(counts.items())), "gpus": gpus, "usd_per_hour": round(usd, 6),
               "pending_notices": [{"node_id": e.node_id, "kind": e.kind.value, "received_at_utc": dt_to_str(
                   e.received_at_utc), "deadline_utc": dt_to_str(e.deadline_utc)} for e in pending]}
        print(json.dumps(doc, indent=2))
        return
    table = Table(title=counted(len(nodes), "node"))
    for col in ("node", "state", "provider", "instance type", "GPUs", "market", "region/zone", "$/h", "jobs"):
        table.add_column(col, justify="right" if col == "$/h" else "left")
    for n in nodes:
        it = n.offer.instance_type
        table.add_row(
            n.node_id,
            n.state.value,
            n.offer.provider,
            it.name,
            f"{it.gpu_count} x {it.gpu_model}" if it.gpu_count else "-",
            n.offer.market.value,
            f"{n.offer.region}/{n.zone or n.offer.zone or '*'}",  # the zone the cloud put it in, if known
            f"{n.offer.usd_per_hour:.4f}",
            ", ".join(sorted(set(on_node.get(n.node_id, [])))) or "-",
        )
    print_table(console, table)
    console.print("Jobs: " + (", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none"), markup=False)
    console.print(f"Fleet: {counted(len(nodes), 'node')}, {counted(gpus, 'GPU')}, ${usd:.2f}/h", markup=False)
    for e in pending:
        deadline = f", deadline {show_utc(e.deadline_utc)}" if e.deadline_utc else ""
        console.print(f"Pending {e.kind.value} notice for {e.node_id} (received {show_utc(e.received_at_utc)}"
                      f"{deadline}): {_what_happens(e.kind, pol)}", markup=False)


def _what_happens(kind: InterruptionKind, pol: Policy | None) -> str:
    """What the next pass (a reconcile tick, or the daemon's notice pass) does
    with a pending notice of ``kind``, as ``reconcile.handle_interruptions`` does it."""
    if kind is InterruptionKind.REBALANCE:
        threshold = "interruptions.rebalance_drain_probability"
        if pol is not None:
            threshold += f" ({pol.rebalance_drain_probability:g})"
        return ("a rebalance recommendation, not a reclaim: the next reconcile tick or notice pass cordons the "
                "node and requeues its jobs "
                f"only if its offer's interruption risk per hour is at least {threshold}; below that it is "
                "recorded as ignored and the node keeps its jobs")
    if kind is InterruptionKind.TERMINATED:
        return ("the node is gone: the next reconcile tick or notice pass requeues its jobs with the work their "
                "checkpoints kept")
    return ("a reclaim: the next reconcile tick or notice pass cordons the node, asks its checkpointable jobs to "
            "checkpoint before the deadline and requeues its jobs")
