"""fleetctl.metrics: what /metrics exposes, read with prometheus-client's own
parser, against docs/metrics.md."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetctl.metrics import FleetMetrics
from fleetctl.model import JobState, Market, NodeState
from tests.builders import job, node, offer

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


def families(metrics: FleetMetrics) -> dict:
    text = generate_latest(metrics.registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def documented() -> dict[str, tuple[str, frozenset[str]]]:
    """docs/metrics.md's table: family name (a counter's without ``_total``, as the parser names it) -> (type, labels)."""
    out = {}
    for name, kind, labels in re.findall(r"^\| `(fleetctl_\w+)` \| (\w+) \|([^|]*)\|", DOC.read_text(), re.M):
        if kind == "counter":
            name = name.removesuffix("_total")
        out[name] = (kind, frozenset(word.strip() for word in labels.split(",") if word.strip()))
    return out


def a_fleet(metrics: FleetMetrics) -> FleetMetrics:
    """Every labelled metric with a series, so its label names show."""
    nodes = [node("n1", of=offer("a8", price=8.0)), node("n2", of=offer("o8", price=20.0, market=Market.ON_DEMAND))]
    jobs = [replace(job("r", gpus=8), state=JobState.RUNNING, node_ids=("n1",)), job("q")]
    metrics.observe_state(nodes, jobs)
    metrics.interruptions.labels("aws", "reclaim_warning").inc()
    metrics.retrains.labels("demand", "adopted").inc()
    metrics.last_retrain.labels("demand").set(0)
    metrics.policy_reloads.labels("applied").inc()
    metrics.observe_policy("0" * 64)
    return metrics


def test_every_metric_is_exported_with_the_type_and_labels_docs_metrics_md_gives_it():
    exported = families(a_fleet(FleetMetrics()))
    # The text format gives each counter's and histogram's creation time as a gauge family of its own.
    got = {name: (f.type, frozenset(k for s in f.samples for k in s.labels if k != "le"))
           for name, f in exported.items()
           if name.startswith("fleetctl_") and name.removesuffix("_created") not in exported.keys() - {name}}
    assert got == documented()


@pytest.mark.parametrize("name, says, not_says", [
    ("fleetctl_forecast_last_retrain_timestamp_seconds", ("0 until one does",), ("absent",)),
    ("fleetctl_tick_errors", ("reconcile ticks", "notice passes", "price refreshes", "retrains", "prunes", "gauge refreshes"), ()),
    ("fleetctl_migrations", ("consolidation", "spot again after on-demand"), ()),
    ("fleetctl_tick_duration_seconds", ("ticks that succeeded",), ()),
], ids=["last-retrain-is-0-not-absent", "tick-errors-names-every-pass", "migrations-both-reasons",
        "tick-duration-of-successes-only"])
def test_help_says_what_docs_metrics_md_and_the_code_do(name, says, not_says):
    text = families(FleetMetrics())[name].documentation
    for words in says:
        assert words in text.lower(), text
    for words in not_says:
        assert words not in text.lower(), text


def test_every_policy_reload_outcome_is_exported_at_0_before_the_first_reload():
    # Prometheus' increase() cannot see a series appear at 1: the alert on a reload that did not take
    # (docs/metrics.md, docs/operations.md) would miss the first one unless the series exists from the start.
    samples = {s.labels["outcome"]: s.value for s in families(FleetMetrics())["fleetctl_policy_reloads"].samples
               if s.name == "fleetctl_policy_reloads_total"}
    assert samples == {"applied": 0, "unchanged": 0, "invalid": 0, "refused": 0, "failed": 0}


def test_the_policy_reloads_help_names_both_ways_a_reload_is_asked_for():
    text = families(FleetMetrics())["fleetctl_policy_reloads"].documentation
    assert "SIGHUP" in text and "--policy-check-seconds" in text, text


FLEET_GAUGES = ("fleetctl_nodes", "fleetctl_gpus", "fleetctl_gpu_allocation_ratio", "fleetctl_queued_jobs",
                "fleetctl_usd_per_hour")


def fleet_gauges(metrics: FleetMetrics) -> dict[str, list]:
    exported = families(metrics)
    return {name: sorted((tuple(sorted(s.labels.items())), s.value) for s in exported[name].samples)
            for name in FLEET_GAUGES}


def test_a_scrape_during_a_refresh_sees_the_fleet_before_it_whole():
    """observe_state cleared each labelled gauge and then set its series again,
    so a scrape in between (the /metrics server's thread) saw a family with no
    series, or the new nodes beside the old queue. Scrapes made while the
    refresh reads its jobs stand for a scrape at any moment of it."""
    metrics = FleetMetrics()
    two = [node(f"n{i}", of=offer("a8", price=8.0)) for i in range(2)]
    metrics.observe_state(two, [job("q1", team="a")])
    before = fleet_gauges(metrics)
    during = []

    def jobs_read_while_scraped():
        during.append(fleet_gauges(metrics))
        yield job("q2", team="b")
        during.append(fleet_gauges(metrics))

    metrics.observe_state([*two, node("n9", of=offer("o8", price=20.0, market=Market.ON_DEMAND),
                                      state=NodeState.LAUNCHING)], jobs_read_while_scraped())
    assert during == [before, before]
    after = fleet_gauges(metrics)
    assert after["fleetctl_nodes"] == [
        ((("market", "on_demand"), ("provider", "aws"), ("state", "launching")), 1.0),
        ((("market", "spot"), ("provider", "aws"), ("state", "ready")), 2.0)]
    assert after["fleetctl_queued_jobs"] == [((("priority", "batch"), ("team", "b")), 1.0)]
    assert after["fleetctl_usd_per_hour"] == [((("market", "on_demand"), ("provider", "aws")), 20.0),
                                              ((("market", "spot"), ("provider", "aws")), 16.0)]


def test_the_fleets_cost_is_charged_to_teams_by_the_gpus_their_running_jobs_hold():
    """fleetctl_team_usd_per_hour: a node's USD per GPU-hour times the GPUs each running job holds
    there, the rest (idle GPUs, booting nodes, bound jobs) as team "(idle)"; the series sum to the
    fleet's USD/hour, as `fleetctl report`'s rows do."""
    metrics = FleetMetrics()
    nodes = [node("n1", of=offer("a8", gpus=8, price=8.0)),
             node("n2", of=offer("b4", gpus=4, price=20.0, market=Market.ON_DEMAND)),
             node("n3", of=offer("c1", gpus=1, price=3.0), state=NodeState.LAUNCHING),
             node("gone", of=offer("d1", gpus=1, price=99.0), state=NodeState.GONE)]
    jobs = [replace(job("a-gang", workers=2, gpus=4, team="a"), state=JobState.RUNNING, node_ids=("n1", "n1")),
            replace(job("b-one", gpus=1, team="b"), state=JobState.RUNNING, node_ids=("n2",)),
            replace(job("b-bound", gpus=2, team="b"), state=JobState.BOUND, node_ids=("n2",)),
            replace(job("b-gone", gpus=1, team="b"), state=JobState.RUNNING, node_ids=("gone",)),
            job("c-queued", team="c")]
    metrics.observe_state(nodes, jobs)
    charged = {s.labels["team"]: s.value for s in families(metrics)["fleetctl_team_usd_per_hour"].samples}
    assert charged == pytest.approx({"a": 8.0, "b": 5.0, "(idle)": 15.0 + 3.0})
    fleet = sum(s.value for s in families(metrics)["fleetctl_usd_per_hour"].samples)
    assert sum(charged.values()) == pytest.approx(fleet) == pytest.approx(31.0)
