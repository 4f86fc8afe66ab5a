"""The store's audit log: the kinds of entry the controller writes, what each
means and what its subject is (``Store.record``; read by ``fleetctl events``,
``fleetctl explain`` and docs/events.md, which a test keeps equal to this)."""

from __future__ import annotations

from typing import Final

#: kind -> (subject, meaning). Every kind the code records is here (a test greps for them).
EVENT_KINDS: Final[dict[str, tuple[str, str]]] = {
    "launch": ("offer", "nodes bought (payload: nodes, reason; recovered: settled after a crash)"),
    "launch_refused": ("offer", "the cloud refused a launch for capacity; the offer is left out for a while"),
    "terminate": ("node", "a node terminated (reason, detail)"),
    "bind": ("job", "a job bound to nodes (nodes, reason)"),
    "start": ("job", "a job started on its nodes (nodes)"),
    "complete": ("job", "a job finished its work (nodes: the nodes it ran on)"),
    "preempt": ("job", "a job preempted for a higher-priority one (by, reason, detail, nodes: the nodes it left)"),
    "migrate": ("job", "a job moved to other nodes (to, reason, detail, nodes: the nodes it left)"),
    "requeue": ("job", "a job taken off a reclaimed node and queued again (node, checkpoint, kept_hours, "
                       "lost_gpu_hours)"),
    "cancel_requested": ("job", "`fleetctl jobs cancel` asked for it (reason, state)"),
    "cancel": ("job", "a bound or running job stopped for its cancel request (state, nodes)"),
    "notice_received": ("node", "a reclaim notice posted to the daemon's notice endpoint (node-watch)"),
    "interruption": ("node", "a reclaim notice or rebalance recommendation taken up (notice, deadline_utc): the "
                             "node drained, unless a rebalance_ignored follows"),
    "interruption_duplicate": ("node", "the same reclaim again through a second path; counted once"),
    "interruption_unknown_node": ("node", "a notice for a node this controller does not know; ignored"),
    "interruption_acknowledge_failed": ("node", "a notice handled, but acknowledging it to the cloud failed"),
    "rebalance_ignored": ("node", "a rebalance recommendation below the policy's drain risk (risk)"),
    "node_lost": ("node", "a node gone without a notice while jobs were on it"),
    "plan_applied": ("", "a pass carried out a plan with changes (summary, usd_per_hour)"),
    "prune_finished": ("", "`prune --finished-older-than-days` deleted the finished history before its cut "
                           "(before_utc; open_runs_kept: the start of each job run open at the cut is kept; dated "
                           "at the cut: `fleetctl report` reads where history is whole from)"),
    "demand": ("", "the GPUs demanded per model at a pass (the demand forecaster's history)"),
    "offers_observed": ("", "the spot market was observed (the interruption forecaster's history)"),
}

#: Written every pass for the forecasters, not decisions: `fleetctl events` shows them only when --kind names them.
HISTORY_KINDS: Final[tuple[str, ...]] = ("demand", "offers_observed")
