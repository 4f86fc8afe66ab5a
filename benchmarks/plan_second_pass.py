"""How often a second plan changes the fleet a first plan left, at the same instant.

For each seed, the random small fleet of ``tests/planner/test_plan_properties.py`` is planned; the plan is
applied with a simplified model of the controller (launches become LAUNCHING nodes, binds and migrations BOUND
jobs on their nodes, preemptions QUEUED jobs, terminations remove the node), and the result is planned again
at the same ``now``. A second plan that launches, terminates, migrates or preempts is counted, by the kinds and
reasons of its actions. Consolidation a disruption budget stopped going on in the second plan is by design and
is counted apart.

    python benchmarks/plan_second_pass.py [--seeds 4000] [--format json]

Results: ``benchmarks/results/plan_second_pass.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleetctl.model import JobState, Node, NodeState, Reason  # noqa: E402
from fleetctl.planner import plan  # noqa: E402
from tests.planner.test_plan_properties import _case  # noqa: E402


def applied(case: dict, first) -> dict:  # noqa: ANN001 - a Plan
    """``case`` with ``first``'s actions carried out (simplified: no cloud, no runtime)."""
    now = case["now"]
    nodes = {n.node_id: n for n in case["fleet"]}
    jobs = {j.job_id: j for j in case["queue"]}
    for a in first.actions:
        if a.kind == "launch":
            for name in a.node_names:
                nodes[name] = Node(node_id=name, offer=a.offer, state=NodeState.LAUNCHING, launched_at_utc=now)
        elif a.kind == "bind":
            jobs[a.job_id] = replace(jobs[a.job_id], state=JobState.BOUND, node_ids=a.node_ids)
        elif a.kind == "migrate":
            j = jobs[a.job_id]
            jobs[a.job_id] = replace(j, state=JobState.BOUND, node_ids=a.to_node_ids, started_at_utc=None,
                                     last_checkpoint_utc=now if j.checkpointable else j.last_checkpoint_utc)
        elif a.kind == "preempt":
            jobs[a.job_id] = replace(jobs[a.job_id], state=JobState.QUEUED, node_ids=(), started_at_utc=None)
        elif a.kind == "terminate":
            nodes.pop(a.node_id)
    return dict(case, fleet=tuple(nodes.values()), queue=tuple(jobs.values()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=4000, help="random cases, seeds 0..N-1 (default 4000)")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    args = ap.parse_args()
    changed: collections.Counter[str] = collections.Counter()
    budget_stopped = 0
    examples: dict[str, list[int]] = collections.defaultdict(list)
    for seed in range(args.seeds):
        case = _case(seed)
        first = plan(**case)
        second = plan(**applied(case, first))
        actions = [a for a in second.actions if a.kind != "bind"]
        if not actions:
            continue
        drained = {n for m in first.of_kind("migrate") for n in m.from_node_ids}
        if len(drained) >= case["policy"].disruption_budget_nodes and \
                all(a.reason is Reason.CONSOLIDATION for a in actions):
            budget_stopped += 1
            continue
        key = ", ".join(sorted({f"{a.kind} ({a.reason.value})" for a in actions}))
        changed[key] += 1
        if len(examples[key]) < 5:
            examples[key].append(seed)
    result = {"seeds": args.seeds, "second_plans_changing_the_fleet": sum(changed.values()),
              "consolidation_the_disruption_budget_stopped": budget_stopped,
              "by_actions": {k: {"count": n, "seeds": examples[k]} for k, n in changed.most_common()}}
    if args.format == "json":
        print(json.dumps(result, indent=2))
        return
    print(f"{args.seeds} random cases: {result['second_plans_changing_the_fleet']} second plans change the fleet; "
          f"{budget_stopped} go on with consolidation the disruption budget stopped (by design)")
    for k, v in result["by_actions"].items():
        print(f"  {v['count']:5d}  {k}  (seeds {', '.join(map(str, v['seeds']))})")


if __name__ == "__main__":
    main()
