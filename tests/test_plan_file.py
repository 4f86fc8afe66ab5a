"""Reading a saved plan (`fleetctl plan -out`) back: a file edited by hand, in
any way, gives the plan or a PlanFileError naming what is wrong, never another
exception (which `fleetctl apply` would show as a traceback)."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetctl.model import Bind, Drain, Launch, Market, Migrate, Plan, Preempt, Reason, Terminate, Unplaced
from fleetctl.render import PlanFileError, plan_from_document, plan_to_document
from tests.builders import offer

PLAN = Plan(
    actions=(
        Launch(offer(), ("new-1", "new-2"), Reason.FITS_NEW_CAPACITY, "2 x g8"),
        Launch(offer(name="g1", gpus=1, price=1.0, market=Market.ON_DEMAND, zone=""), ("new-3",),
               Reason.ON_DEMAND_BASE, "base"),
        Bind("j1", ("new-1", "new-2"), Reason.FITS_NEW_CAPACITY, "gang"),
        Terminate("n9", Reason.IDLE, "idle 10 min"),
        Drain("n8", Reason.IDLE, "draining"),
        Migrate("j2", ("n8",), ("new-3",), Reason.INTERRUPTION, "move"),
        Preempt("j3", "j1", Reason.PREEMPTED_BY_HIGHER_PRIORITY, "priority"),
    ),
    unplaced=(Unplaced("j4", Reason.NO_ALLOWED_OFFER, "no offer"),),
    usd_per_hour_before=1.0,
    usd_per_hour_after=21.0,
    risk_before=0.0,
    risk_after=0.5,
)
DOC = plan_to_document(PLAN, fingerprint="f" * 64, created_at_utc=datetime(2026, 11, 24, tzinfo=timezone.utc),
                       policy_path="policies/example.yaml")


def leaf_paths(doc, prefix=()):  # noqa: ANN001 - any JSON value
    yield prefix
    children = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in children:
        yield from leaf_paths(value, (*prefix, key))


PATHS = [p for p in leaf_paths(DOC) if p]
VALUES = st.sampled_from([None, 0, -1, 1.5, float("nan"), float("inf"), 10**30, "", "x", "spot", "launch",
                          "2026-02-30T00:00:00Z", [], [1], {}, {"a": 1}, True])


@st.composite
def edited(draw: st.DrawFn) -> dict:
    """The document with one to four fields replaced, removed or added."""
    doc = copy.deepcopy(DOC)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(PATHS))
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            how = draw(st.sampled_from(["replace", "remove", "add"]))
            if how == "replace":
                parent[path[-1]] = draw(VALUES)
            elif isinstance(parent, dict):
                if how == "remove":
                    del parent[path[-1]]
                else:
                    parent[draw(st.text(max_size=5))] = draw(VALUES)
        except (KeyError, IndexError, TypeError):  # an earlier edit replaced a parent of this path
            continue
    return doc


def test_a_plan_round_trips():
    plan, fingerprint = plan_from_document(json.loads(json.dumps(DOC)))
    assert plan == PLAN and fingerprint == "f" * 64


def test_a_launch_of_a_shape_without_gpus_round_trips():
    """A CPU shape's gpu_model is null in the file, and read back as None."""
    cpu = Plan((Launch(offer(name="c8", gpus=0, price=0.4), ("new-1",), Reason.FITS_NEW_CAPACITY, "cpu"),), (),
               0.0, 0.4)
    doc = json.loads(json.dumps(plan_to_document(cpu, fingerprint="f" * 64, created_at_utc=datetime(2026, 11, 24,
                                                 tzinfo=timezone.utc), policy_path="p.yaml")))
    it = doc["actions"][0]["offer"]["instance_type"]
    assert (it["gpu_model"], it["gpu_count"], it["interconnect"]) == (None, 0, "none")
    assert plan_from_document(doc) == (cpu, "f" * 64)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=edited())
def test_an_edited_plan_file_gives_a_plan_or_a_plan_file_error(doc):
    try:
        plan_from_document(doc, "p.json")
    except PlanFileError as exc:
        assert str(exc).startswith("p.json: ")


@pytest.mark.parametrize("path, value, message", [
    (("actions", 2), None, "p.json: actions[2] must be an object, found NoneType"),
    (("actions",), {}, "p.json: actions must be a list, found dict"),
    (("actions", 2, "job_id"), 7, "p.json: actions[2].job_id: must be a string, found int"),
    (("actions", 0, "offer", "instance_type", "provider"), 0, "actions[0].offer.instance_type.provider: must be a string, found int"),
    (("actions", 0, "offer", "region"), ["us"], "actions[0].offer.region: must be a string, found list"),
    (("actions", 0, "node_names"), ["new-1", 2], "actions[0].node_names: must be a list of strings"),
    (("actions", 0, "node_names"), "new-1", "actions[0].node_names: must be a list of strings"),  # not 5 names
    (("actions", 2, "node_ids"), {"new-1": 0}, "actions[2].node_ids: must be a list of strings"),
    (("actions", 0, "offer", "instance_type", "vcpus"), float("inf"), "actions[0].offer.instance_type.vcpus: cannot convert float infinity"),
    (("actions", 3, "node_id"), None, "actions[3].node_id: must be a string, found NoneType"),
    (("actions", 0, "offer", "usd_per_hour"), "cheap",
     "p.json: actions[0].offer.usd_per_hour: could not convert string to float: 'cheap'"),
    (("actions", 0, "offer", "market"), "cheap", "p.json: actions[0].offer.market: 'cheap' is not a valid Market"),
    (("actions", 0, "offer", "instance_type"), {}, "p.json: actions[0].offer.instance_type: missing field 'provider'"),
    (("actions", 0, "reason"), 3, "p.json: actions[0].reason: 3 is not a valid Reason"),
    (("actions", 3, "kind"), "resize", "p.json: actions[3]: unknown action kind 'resize'"),
    (("unplaced", 0, "job_id"), 4, "unplaced[0].job_id: must be a string, found int"),
    (("unplaced", 0, "reason"), "bored", "unplaced[0].reason: 'bored' is not a valid Reason"),
])
def test_what_is_wrong_is_named_with_its_place(path, value, message):
    doc = copy.deepcopy(DOC)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    with pytest.raises(PlanFileError) as raised:
        plan_from_document(doc, "p.json")
    assert message in str(raised.value)


def test_a_number_too_large_for_a_float_is_named():
    doc = copy.deepcopy(DOC)
    doc["usd_per_hour_before"] = json.loads("1" + "0" * 400)  # JSON allows it; float() raises OverflowError
    with pytest.raises(PlanFileError, match="p.json: usd_per_hour_before: int too large"):
        plan_from_document(doc, "p.json")


@pytest.mark.parametrize("version", [True, 1.0, "1", None])
def test_only_the_integer_1_is_format_version_1(version):
    """``true == 1`` and ``1.0 == 1`` in Python: both were read as version 1."""
    with pytest.raises(PlanFileError, match=f"p.json: format_version {version!r} is not supported"):
        plan_from_document({**copy.deepcopy(DOC), "format_version": version}, "p.json")


@pytest.mark.parametrize("doc", [{}, {"nodes": [], "jobs": {}}], ids=["empty", "status-json"])
def test_a_json_object_without_format_version_is_named_as_not_a_plan_file(doc):
    """``{}`` (or `fleetctl status --format json` output) said "format_version None is not supported"."""
    with pytest.raises(PlanFileError, match=r"^p.json: not a plan file: it has no format_version \(a plan file is "
                                            r"what `fleetctl plan -out FILE` saves\)$"):
        plan_from_document(doc, "p.json")


def test_a_plan_without_actions_but_with_waiting_jobs_does_not_say_the_fleet_matches_the_queue():
    from fleetctl.render import render_text

    waiting = Plan((), (Unplaced("j1", Reason.WAITING_FOR_CAPACITY, "within the scale-up cooldown"),), 1.0, 1.0)
    text = render_text(waiting)
    assert text.startswith("No changes to make now; 1 job stays queued (below).") and "matches the queue" not in text
    assert render_text(Plan((), (), 1.0, 1.0)).startswith("No changes. The fleet matches the queue and the policy.")


def test_every_reason_is_explained_in_the_docs():
    """docs/reasons.md has one table row per Reason value, and no row for a reason that does not exist."""
    import re
    from pathlib import Path

    from fleetctl.model import Reason

    text = (Path(__file__).resolve().parents[1] / "docs" / "reasons.md").read_text()
    documented = re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.M)
    assert sorted(documented) == sorted(r.value for r in Reason)
