"""fleetctl.codec by hand: the plain-dict forms of the vocabulary that the store and the plan file share,
the times as each reader gets them, and the field path a DecodeError names."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from fleetctl.codec import (DecodeError, decoded, dt_to_str, instance_type_from_dict, job_from_dict, job_to_dict,
                            node_from_dict, node_to_dict, offer_from_dict, offer_to_dict, show_utc, stored_time)
from fleetctl.model import InstanceType, Interconnect, Job, JobState, Market, Node, NodeState, Offer
from tests.builders import offer

PLUS_2 = timezone(timedelta(hours=2))


# --------------------------------------------------------------------------- decoded


def test_a_nested_error_without_a_field_of_its_own_is_named_by_its_key():
    """A decoder that finds its whole object wrong says so with no field; the key it was read from is then
    the whole place (not ``offer.``)."""
    def refuse(value):  # noqa: ANN001, ANN202 - any JSON value
        raise DecodeError("not an offer")

    with pytest.raises(DecodeError) as raised:
        decoded({"offer": {}}, "offer", refuse)
    assert (raised.value.field, raised.value.message, str(raised.value)) == ("offer", "not an offer",
                                                                             "offer: not an offer")


def test_a_conversion_error_without_a_message_is_named_by_its_type():
    def refuse(value):  # noqa: ANN001, ANN202 - any JSON value
        raise ValueError()

    with pytest.raises(DecodeError) as raised:
        decoded({"usd_per_hour": 1}, "usd_per_hour", refuse)
    assert str(raised.value) == "usd_per_hour: ValueError"


# --------------------------------------------------------------------------- times


def test_times_are_written_in_utc_each_as_its_reader_needs():
    """21:56:30 UTC is 23:56:30 at +02:00: JSON keeps every digit and leaves out a zero fraction, the store
    always writes the microseconds (its text columns compare as text), people see whole seconds."""
    whole = datetime(2026, 11, 27, 23, 56, 30, tzinfo=PLUS_2)
    half = whole + timedelta(microseconds=500_000)
    assert (dt_to_str(whole), dt_to_str(half)) == ("2026-11-27T21:56:30Z", "2026-11-27T21:56:30.500000Z")
    assert (stored_time(whole), stored_time(half)) == ("2026-11-27T21:56:30.000000Z", "2026-11-27T21:56:30.500000Z")
    assert (show_utc(whole), show_utc(half)) == ("2026-11-27T21:56:30Z", "2026-11-27T21:56:30Z")
    assert dt_to_str(None) is None and stored_time(None) is None


@pytest.mark.parametrize("write", [dt_to_str, stored_time, show_utc], ids=["json", "store", "shown"])
def test_a_time_without_a_zone_is_refused_not_read_as_local_time(write):
    with pytest.raises(ValueError, match="naive datetime .*: fleetctl keeps time in UTC"):
        write(datetime(2026, 11, 27, 23, 56, 30))


def test_a_stored_time_reads_back_in_utc_from_either_form():
    from fleetctl.codec import str_to_dt

    utc = datetime(2026, 11, 27, 21, 56, 30, tzinfo=timezone.utc)
    assert str_to_dt("2026-11-27T21:56:30Z") == utc and str_to_dt("2026-11-27T21:56:30.000000Z") == utc
    at_plus_2 = str_to_dt("2026-11-27T23:56:30.5+02:00")
    assert at_plus_2 == utc + timedelta(microseconds=500_000) and at_plus_2.tzinfo is timezone.utc
    assert str_to_dt(None) is None


@pytest.mark.parametrize(("value", "message"), [
    (5, "timestamp must be a string, found int"),
    (["2026-11-27T21:56:30Z"], "timestamp must be a string, found list"),
    ("2026-11-27T21:56:30", "timestamp '2026-11-27T21:56:30' has no time zone"),
])
def test_a_stored_time_that_is_not_one_is_a_decode_error(value, message):
    from fleetctl.codec import str_to_dt

    with pytest.raises(DecodeError) as raised:
        str_to_dt(value)
    assert str(raised.value) == message and raised.value.field == ""


# --------------------------------------------------------------------------- offers


def test_an_offer_with_every_field_off_its_default_round_trips():
    it = InstanceType("aws", "g5g.2xlarge", 8, 16.0, "T4G", 1, 16.0, Interconnect.PCIE, "arm64")
    regional = Offer(it, "us-east-1", "", Market.ON_DEMAND, 0.42)
    d = json.loads(json.dumps(offer_to_dict(regional)))
    assert d == {
        "key": "aws/us-east-1/*/g5g.2xlarge/on_demand",
        "instance_type": {"provider": "aws", "name": "g5g.2xlarge", "vcpus": 8, "memory_gib": 16.0, "gpu_model": "T4G",
                          "gpu_count": 1, "gpu_memory_gib": 16.0, "interconnect": "pcie", "architecture": "arm64"},
        "region": "us-east-1", "zone": "", "market": "on_demand", "usd_per_hour": 0.42,
    }
    assert offer_from_dict(d) == regional


def test_an_instance_type_without_its_optional_keys_reads_with_their_defaults():
    """A CPU shape as the fewest keys say it: no GPU, no interconnect, x86_64."""
    assert instance_type_from_dict({"provider": "gcp", "name": "n2-standard-8", "vcpus": 8, "memory_gib": 32}) == \
        InstanceType("gcp", "n2-standard-8", 8, 32.0, None, 0, 0.0, Interconnect.NONE, "x86_64")


def test_a_node_with_every_time_set_round_trips_through_json():
    n = Node("n1", offer(zone=""), NodeState.DRAINING, launched_at_utc=datetime(2026, 11, 27, 20, 0, tzinfo=timezone.utc),
             ready_at_utc=datetime(2026, 11, 27, 20, 3, tzinfo=timezone.utc),
             idle_since_utc=datetime(2026, 11, 27, 21, 30, tzinfo=PLUS_2), zone="r1-b")
    d = json.loads(json.dumps(node_to_dict(n)))
    assert {k: v for k, v in d.items() if k != "offer"} == {
        "node_id": "n1", "state": "draining", "launched_at_utc": "2026-11-27T20:00:00Z",
        "ready_at_utc": "2026-11-27T20:03:00Z", "idle_since_utc": "2026-11-27T19:30:00Z", "zone": "r1-b"}
    assert node_from_dict(d) == n


# --------------------------------------------------------------------------- jobs

T = datetime(2026, 11, 27, 21, 0, tzinfo=timezone.utc)
REQUIRED = {"id": "j1", "workers": 2, "gpus_per_worker": 4, "vcpus_per_worker": 8, "memory_gib_per_worker": 64,
            "priority": "batch", "team": "a", "duration_hours": 1.5, "submitted_at_utc": "2026-11-27T21:00:00Z"}


def test_a_job_with_only_its_required_keys_reads_with_every_default():
    """What a tombstone (or a job an older fleetctl wrote) leaves out reads as the field's default: queued,
    on no node, never started, never interrupted, any GPU model, the class deciding spot."""
    assert job_from_dict(REQUIRED) == Job(
        job_id="j1", workers=2, gpus_per_worker=4, vcpus_per_worker=8.0, memory_gib_per_worker=64.0, priority="batch",
        team="a", duration_hours=1.5, submitted_at_utc=T, gpu_models=(), checkpointable=False,
        checkpoint_interval_minutes=None, deadline_utc=None, spot_eligible=None, state=JobState.QUEUED, node_ids=(),
        gpu_memory_gib_per_gpu=0.0, started_at_utc=None, last_checkpoint_utc=None, interruptions=0,
        work_lost_interruptions=0, checkpointed_work_hours=0.0, priority_boost=0.0, avoid_offer_keys=(),
        requeued_at_utc=None, first_started_at_utc=None)


def test_a_job_with_every_field_set_round_trips_through_json():
    ran = Job(
        job_id="j1", workers=2, gpus_per_worker=4, vcpus_per_worker=8.5, memory_gib_per_worker=64.5, priority="batch",
        team="a", duration_hours=1.5, submitted_at_utc=T, gpu_models=("A100-80GB", "H100-80GB"), checkpointable=True,
        checkpoint_interval_minutes=30.0, deadline_utc=T + timedelta(hours=9), spot_eligible=False,
        state=JobState.RUNNING, node_ids=("n1", "n2"), gpu_memory_gib_per_gpu=40.0,
        started_at_utc=T + timedelta(hours=2), last_checkpoint_utc=T + timedelta(hours=2, minutes=30), interruptions=3,
        work_lost_interruptions=1, checkpointed_work_hours=0.25, priority_boost=100.0,
        avoid_offer_keys=("aws/r1/z1/g8/spot",), requeued_at_utc=T + timedelta(hours=1),
        first_started_at_utc=T + timedelta(minutes=10))
    d = json.loads(json.dumps(job_to_dict(ran)))
    assert (d["id"], d["state"], d["node_ids"], d["deadline_utc"], d["first_started_at_utc"]) == (
        "j1", "running", ["n1", "n2"], "2026-11-28T06:00:00Z", "2026-11-27T21:10:00Z")
    assert job_from_dict(d) == ran


def test_a_job_spec_is_read_from_an_object_only():
    from fleetctl.codec import job_spec_dict

    with pytest.raises(TypeError, match="^a job is a JSON object, not list$"):
        job_spec_dict([REQUIRED])
