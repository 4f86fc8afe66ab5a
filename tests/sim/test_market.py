"""Market manifests: the shipped examples load with catalog prices, capacity
and prices follow the ticks of each trace, and broken manifests or trace files
are reported at the right place with a clear message."""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path

import pytest

from fleetctl import model
from fleetctl.sim.market import Market, MarketTrace, catalog_price, load_market, parse_trace_json
from fleetctl.yamlerrors import SpecError

REPO = Path(__file__).resolve().parents[2]
MARKETS = REPO / "examples" / "markets"
START = datetime(2023, 2, 15, tzinfo=timezone.utc)
US = timedelta(microseconds=1)
ZONES_1_NODE = ("us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f", "us-east-2a", "us-east-2b", "us-west-2a",
                "us-west-2b", "us-west-2c")


def trace_data(relative: str) -> list[int]:
    return json.loads((MARKETS / relative).read_text())["data"]


# =========================================================================== the shipped examples


def test_aws_v100_availability_example() -> None:
    market = load_market(MARKETS / "aws-v100-availability.yaml")
    assert market.start_utc == START
    assert [t.offer_spot.zone for t in market.traces] == list(ZONES_1_NODE)
    for t in market.traces:
        assert (t.offer_spot.provider, t.offer_spot.instance_type.name) == ("aws", "p3.2xlarge")
        assert t.offer_spot.region == t.offer_spot.zone[:-1]
        assert t.offer_spot.instance_type.gpu_model == "V100-16GB"
        assert (t.gap_seconds, len(t.capacity), t.prices) == (195, 20158, None)
        assert set(t.capacity) == {0, 1}
        # Defaults from the catalog: the region's mean over its AZ IDs.
        assert t.offer_spot.usd_per_hour == 0.918 and t.offer_on_demand.usd_per_hour == 3.06
        assert t.offer_on_demand.market is model.Market.ON_DEMAND
        assert t.offer_on_demand.zone == t.offer_spot.zone
    assert market.end_utc == START + timedelta(seconds=195 * 20158) == datetime(2023, 4, 1, 11, 53, 30,
                                                                                 tzinfo=timezone.utc)


def test_aws_v100_pools_example_is_the_availability_market_times_eight() -> None:
    one = load_market(MARKETS / "aws-v100-availability.yaml")
    pools = load_market(MARKETS / "aws-v100-pools.yaml")
    assert (pools.start_utc, pools.end_utc) == (one.start_utc, one.end_utc)
    assert [t.offer_spot for t in pools.traces] == [t.offer_spot for t in one.traces]
    for a, b in zip(one.traces, pools.traces):
        assert b.capacity == tuple(8 * c for c in a.capacity)


def test_capacity_at_tick_boundaries() -> None:
    market = load_market(MARKETS / "aws-v100-availability.yaml")
    trace = market.traces[0]  # us-east-1a
    data = trace_data("traces/availability/1-node/aws-02-15-2023/us-east-1a_v100_1.json")
    assert trace.capacity == tuple(data)
    gap = timedelta(seconds=195)
    first_change = next(i for i in range(1, len(data)) if data[i] != data[i - 1])
    boundary = START + first_change * gap
    assert trace.capacity_at(boundary) == data[first_change]  # a boundary belongs to the new tick
    assert trace.capacity_at(boundary - US) == data[first_change - 1]
    assert trace.tick_at(boundary) == first_change and trace.tick_at(boundary - US) == first_change - 1
    assert trace.capacity_at(START) == data[0]
    assert trace.capacity_at(START - US) == 0  # before the trace
    assert trace.capacity_at(trace.end_utc - US) == data[-1]
    assert trace.capacity_at(trace.end_utc) == 0  # after it
    changes = trace.change_times()
    assert changes[0] == boundary or (data[0] > 0 and changes[0] == START)
    expected = sum(1 for i in range(1, len(data)) if data[i] != data[i - 1]) + (data[0] > 0) + (data[-1] > 0)
    assert len(changes) == expected

    times = market.change_times()
    assert times[0] == START and list(times) == sorted(set(times))
    assert set(changes) <= set(times)
    # Between two change times nothing changes.
    for a, b in zip(times[:50], times[1:51]):
        assert market.offers_at(a) == market.offers_at(b - US)


def test_offers_at_has_spot_with_capacity_and_every_on_demand_twin() -> None:
    market = load_market(MARKETS / "aws-v100-availability.yaml")
    t = START + timedelta(days=10)
    offers = market.offers_at(t)
    on_demand = [o for o in offers if o.market is model.Market.ON_DEMAND]
    spot = [o for o in offers if o.market is model.Market.SPOT]
    assert len(on_demand) == 9
    assert {o.zone for o in spot} == {tr.offer_spot.zone for tr in market.traces if tr.capacity_at(t) > 0}
    assert [o.key for o in offers] == sorted(o.key for o in offers)
    after = market.offers_at(market.end_utc + timedelta(days=1))
    assert len(after) == 9 and all(o.market is model.Market.ON_DEMAND for o in after)
    assert market.trace_for("aws/us-west-2/us-west-2c/p3.2xlarge/on_demand") is market.traces[-1]
    assert market.trace_for("aws/eu-west-1/x/p3.2xlarge/spot") is None


def test_aws_v100_16node_example() -> None:
    market = load_market(MARKETS / "aws-v100-16node.yaml")
    start = datetime(2023, 8, 27, tzinfo=timezone.utc)
    assert market.start_utc == start
    east, west_a, west_c = market.traces
    assert [len(t.capacity) for t in market.traces] == [3247, 4736, 4736]
    assert all(t.gap_seconds == 300 for t in market.traces)
    assert max(east.capacity) == 16  # capacity is data[i] itself (capacity_per_unit 1)
    assert east.capacity == tuple(trace_data("traces/availability/16-node/aws-08-27-2023/us-east-2b_v100_1.json"))
    # The market ends with the longest trace; the shorter one has no spot capacity after its end.
    assert market.end_utc == west_a.end_utc == start + timedelta(seconds=300 * 4736)
    assert east.end_utc == start + timedelta(seconds=300 * 3247) < market.end_utc
    later = east.end_utc + timedelta(hours=1)
    assert east.capacity_at(later) == 0
    keys = {o.key for o in market.offers_at(later)}
    assert "aws/us-east-2/us-east-2b/p3.2xlarge/spot" not in keys
    assert "aws/us-east-2/us-east-2b/p3.2xlarge/on_demand" in keys


# =========================================================================== manifests in tmp


def write_manifest(tmp_path: Path, body: str, files: dict[str, object] | None = None) -> Path:
    for name, content in (files or {}).items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    manifest = tmp_path / "market.yaml"
    manifest.write_text(textwrap.dedent(body).lstrip("\n"))
    return manifest


def issues(path: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_market(path)
    return [str(i) for i in info.value.issues]


TWO_TRACES = """
    start_utc: "2023-02-15T00:00:00Z"
    traces:
      - provider: aws
        instance_type: p3.2xlarge
        region: us-east-1
        zone: us-east-1a
        file: traces/a.json
        spot_usd_per_hour: 0.5
        on_demand_usd_per_hour: 3.0
        capacity_per_unit: 8
      - provider: aws
        instance_type: p3.2xlarge
        region: us-west-2
        zone: us-west-2b
        file: traces/b.json
    """
A = {"metadata": {"gap_seconds": 60}, "data": [0, 1, 1, 2]}
B = {"metadata": {"gap_seconds": 90}, "data": [1, 1, 0], "prices": [0.9, 1.1, 1.1]}


def test_two_traces_with_different_gaps(tmp_path: Path) -> None:
    market = load_market(write_manifest(tmp_path, TWO_TRACES, {"traces/a.json": A, "traces/b.json": B}))
    a, b = market.traces
    assert (a.gap_seconds, a.capacity, a.prices) == (60, (0, 8, 8, 16), None)
    assert (b.gap_seconds, b.capacity, b.prices) == (90, (1, 1, 0), (0.9, 1.1, 1.1))
    assert (a.offer_spot.usd_per_hour, a.offer_on_demand.usd_per_hour) == (0.5, 3.0)
    assert (b.offer_spot.usd_per_hour, b.offer_on_demand.usd_per_hour) == (0.9, 3.06)  # b: tick-0 price, catalog

    def at(seconds: float) -> datetime:
        return START + timedelta(seconds=seconds)

    assert [a.capacity_at(at(s)) for s in (-1, 0, 59.999999, 60, 119, 120, 180, 239.999999, 240)] == \
        [0, 0, 0, 8, 8, 8, 16, 16, 0]
    assert [b.capacity_at(at(s)) for s in (0, 89, 90, 179, 180, 269, 270)] == [1, 1, 1, 1, 0, 0, 0]
    assert [b.spot_price_at(at(s)) for s in (-5, 0, 89.999999, 90, 200, 10_000)] == [0.9, 0.9, 0.9, 1.1, 1.1, 1.1]
    assert a.spot_price_at(at(100)) == 0.5

    assert market.end_utc == b.end_utc == at(270) and a.end_utc == at(240)
    assert market.change_times() == (at(0), at(60), at(90), at(180), at(240))

    offers = market.offers_at(at(100))
    assert [(o.key, o.usd_per_hour) for o in offers] == [
        ("aws/us-east-1/us-east-1a/p3.2xlarge/on_demand", 3.0),
        ("aws/us-east-1/us-east-1a/p3.2xlarge/spot", 0.5),
        ("aws/us-west-2/us-west-2b/p3.2xlarge/on_demand", 3.06),
        ("aws/us-west-2/us-west-2b/p3.2xlarge/spot", 1.1),
    ]
    assert [o.key for o in market.offers_at(at(30))] == [
        "aws/us-east-1/us-east-1a/p3.2xlarge/on_demand",
        "aws/us-west-2/us-west-2b/p3.2xlarge/on_demand",
        "aws/us-west-2/us-west-2b/p3.2xlarge/spot",
    ]


def test_value_objects_check_their_inputs() -> None:
    load = load_market(MARKETS / "aws-v100-16node.yaml").traces[0]
    with pytest.raises(ValueError, match="gap_seconds must be a positive number"):
        MarketTrace(load.offer_spot, load.offer_on_demand, START, 0, (1,))
    with pytest.raises(ValueError, match="prices has 1 ticks, capacity 2"):
        MarketTrace(load.offer_spot, load.offer_on_demand, START, 60, (1, 0), (1.0,))
    with pytest.raises(ValueError, match="must be timezone-aware"):
        load.capacity_at(datetime(2023, 8, 27))
    with pytest.raises(ValueError, match="two traces have the same offer"):
        Market((load, load), START)


def test_catalog_price_lookup() -> None:
    spot, od = model.Market.SPOT, model.Market.ON_DEMAND
    # Zone-specific (AWS rows are per AZ ID).
    assert catalog_price("aws", "p3.16xlarge", "us-east-1", "use1-az5", spot) == 10.6335
    # No such zone: the mean over the region's zones.
    assert catalog_price("aws", "p3.16xlarge", "us-east-1", "us-east-1a", spot) == round((9.7359 + 10.6335) / 2, 6)
    assert catalog_price("aws", "p3.16xlarge", "us-east-1", "us-east-1a", od) == 24.48
    # Regional (GCP rows have zone "").
    assert catalog_price("gcp", "a2-highgpu-1g", "asia-east1", "asia-east1-a", spot) == 1.102016
    assert catalog_price("gcp", "a2-highgpu-1g", "asia-east1", "asia-east1-a", od) == 3.790142
    assert catalog_price("aws", "p3.2xlarge", "eu-central-1", "eu-central-1a", od) is None


def test_catalog_defaults_in_a_manifest(tmp_path: Path) -> None:
    path = write_manifest(tmp_path, """
        start_utc: "2023-02-15T00:00:00+01:00"
        traces:
          - {provider: gcp, instance_type: a2-highgpu-1g, region: asia-east1, zone: asia-east1-a, file: t.json}
          - {provider: aws, instance_type: p3.16xlarge, region: us-east-1, zone: use1-az5, file: t.json}
        """, {"t.json": {"metadata": {"gap_seconds": 30}, "data": [1]}})
    market = load_market(path)
    assert market.start_utc == datetime(2023, 2, 14, 23, tzinfo=timezone.utc)
    assert [(t.offer_spot.usd_per_hour, t.offer_on_demand.usd_per_hour) for t in market.traces] == [
        (1.102016, 3.790142), (10.6335, 24.48)]
    assert market.traces[0].offer_spot.instance_type.gpu_model == "A100-40GB"


def test_no_known_price_names_the_trace(tmp_path: Path) -> None:
    body = """
        start_utc: "2023-02-15T00:00:00Z"
        traces:
          - provider: aws
            instance_type: p3.2xlarge
            region: eu-central-1
            zone: eu-central-1a
            file: t.json
        """
    path = write_manifest(tmp_path, body, {"t.json": {"metadata": {"gap_seconds": 30}, "data": [1]}})
    assert issues(path) == [
        f"{path}:3:5: traces[0]: trace aws/eu-central-1/eu-central-1a/p3.2xlarge: the catalog has no on-demand "
        "price for aws p3.2xlarge in eu-central-1; set on_demand_usd_per_hour",
    ]
    path = write_manifest(tmp_path, body + "    on_demand_usd_per_hour: 3.9\n")
    (trace,) = load_market(path).traces
    assert (trace.offer_spot.usd_per_hour, trace.offer_on_demand.usd_per_hour) == (1.1469, 3.9)


ONE_TRACE = """
    start_utc: "2023-02-15T00:00:00Z"
    traces:
      - provider: aws
        instance_type: p3.2xlarge
        region: us-east-1
        zone: us-east-1a
        file: t.json
    """
GOOD_JSON = {"metadata": {"gap_seconds": 30}, "data": [1, 0]}


@pytest.mark.parametrize(
    ("body", "trace_file", "expected"),
    [
        (ONE_TRACE + "    capacity: 2\n", GOOD_JSON,
         "8:5: traces[0].capacity: unknown field 'capacity' (did you mean 'capacity_per_unit'?); allowed: "
         "provider, instance_type, region, zone, file, spot_usd_per_hour, on_demand_usd_per_hour, capacity_per_unit"),
        (ONE_TRACE + "    capacity_per_unit: 0\n", GOOD_JSON,
         "8:24: traces[0].capacity_per_unit: must be greater than or equal to 1 (got 0)"),
        (ONE_TRACE.replace("file: t.json", "file: nope.json"), None,
         "7:11: traces[0].file: trace file 'nope.json' cannot be read: No such file or directory"),
        (ONE_TRACE, '{"metadata": {"gap_seconds": 30} "data": [1]}',
         "7:11: traces[0].file: trace file 't.json' is not valid JSON: Expecting ',' delimiter at line 1, "
         "column 34"),
        (ONE_TRACE, '{"metadata": {"gap_seconds": NaN}, "data": [1]}',
         "7:11: traces[0].file: trace file 't.json' is not valid JSON: NaN is not a number in JSON"),
        (ONE_TRACE, [1, 0],
         "7:11: traces[0].file: trace file 't.json' must hold a JSON object with metadata and data (got a list)"),
        (ONE_TRACE, {"data": [1]},
         "7:11: traces[0].file: trace file 't.json' metadata must be an object with gap_seconds (it is missing)"),
        (ONE_TRACE, {"metadata": {"gap_seconds": "30"}, "data": [1]},
         "7:11: traces[0].file: trace file 't.json' metadata.gap_seconds must be a positive number of seconds "
         "(got '30')"),
        (ONE_TRACE, {"metadata": {"gap_seconds": 30}, "data": [1, True]},
         "7:11: traces[0].file: trace file 't.json' data[1] must be a whole number >= 0 (got true)"),
        (ONE_TRACE, {"metadata": {"gap_seconds": 30}, "data": [1, -1]},
         "7:11: traces[0].file: trace file 't.json' data[1] must be a whole number >= 0 (got -1)"),
        (ONE_TRACE, {"metadata": {"gap_seconds": 30}, "data": []},
         "7:11: traces[0].file: trace file 't.json' data must be a non-empty list of instance counts"),
        (ONE_TRACE, {"metadata": {"gap_seconds": 30}, "data": [1, 0], "prices": [1.0]},
         "7:11: traces[0].file: trace file 't.json' prices has 1 entries but data has 2; give one price per tick"),
        (ONE_TRACE, {"metadata": {"gap_seconds": 30}, "data": [1], "prices": [0]},
         "7:11: traces[0].file: trace file 't.json' prices[0] must be a price above 0 USD per hour (got 0)"),
        (ONE_TRACE, {"metadata": {"gap_seconds": 30}, "data": [1], "price": [1.0]},
         "7:11: traces[0].file: trace file 't.json' has unknown key(s) 'price'; expected metadata, data and "
         "optionally prices"),
        (ONE_TRACE, {"metadata": {"gap_seconds": 1e9}, "data": [1] * 10},
         "7:11: traces[0].file: trace file 't.json' spans 317 years (gap_seconds x ticks); at most 100 years are "
         "supported"),
        (ONE_TRACE + "    spot_usd_per_hour: 0.9\n", {"metadata": {"gap_seconds": 30}, "data": [1], "prices": [1.0]},
         "8:24: traces[0].spot_usd_per_hour: trace aws/us-east-1/us-east-1a/p3.2xlarge: the trace file has "
         "per-tick prices; remove spot_usd_per_hour (or the prices)"),
        (ONE_TRACE.replace("p3.2xlarge", "p3.2xlarg"), GOOD_JSON,
         "4:20: traces[0].instance_type: unknown instance type 'p3.2xlarg' for aws (did you mean 'p3.2xlarge'?); "
         "the catalog (providers/data/instance_types.csv) holds GPU types only"),
        (ONE_TRACE.replace("p3.2xlarge", "c3-highcpu-88").replace("aws", "gcp"), GOOD_JSON,
         "4:20: traces[0].instance_type: unknown instance type 'c3-highcpu-88' for gcp (did you mean "
         "'a3-highgpu-8g'?); the catalog "
         "(providers/data/instance_types.csv) holds GPU types only"),
        (ONE_TRACE.replace("aws", "amazon"), GOOD_JSON,
         "3:15: traces[0].provider: unknown provider 'amazon'; allowed: aws, gcp, azure"),
        (ONE_TRACE.replace('"2023-02-15T00:00:00Z"', "2023-02-15T00:00:00"), GOOD_JSON,
         "1:12: start_utc: timestamp '2023-02-15T00:00:00' has no time zone; add 'Z' or an offset like +00:00"),
        ('start_utc: "2023-02-15T00:00:00Z"\ntraces: []\n', None,
         "2:9: traces: the list of traces is empty; add at least one trace"),
        ("- a\n", None, "1:1: (root): a market manifest must be a mapping with start_utc and traces (got a list)"),
        # a zone with a "/" or a "*" would make an offer key that is not one, or the regional offer's
        (ONE_TRACE.replace("zone: us-east-1a", "zone: us-east-1a/b"), GOOD_JSON,
         "6:11: traces[0].zone: invalid zone 'us-east-1a/b': use the provider's zone id, e.g. us-east-1a, "
         "europe-west4-a or 1 (\"\" for a regional offer)"),
        (ONE_TRACE.replace("zone: us-east-1a", 'zone: "*"'), GOOD_JSON,
         "6:11: traces[0].zone: invalid zone '*': use the provider's zone id, e.g. us-east-1a, "
         "europe-west4-a or 1 (\"\" for a regional offer)"),
    ],
)
def test_bad_manifest(tmp_path: Path, body: str, trace_file: object, expected: str) -> None:
    path = write_manifest(tmp_path, body, None if trace_file is None else {"t.json": trace_file})
    assert issues(path) == [f"{path}:{expected}"]


def test_every_problem_of_a_manifest_is_reported(tmp_path: Path) -> None:
    path = write_manifest(tmp_path, """
        start_utc: "2023-02-15T00:00:00Z"
        traces:
          - {provider: aws, instance_type: p3.2xlarge, region: us-east-1, zone: us-east-1a, file: a.json}
          - {provider: aws, instance_type: p3.2xlarge, region: us-east-1, zone: us-east-1a, file: a.json}
          - {provider: aws, instance_type: p9.huge, region: us-east-1, zone: us-east-1b, file: missing.json}
        """, {"a.json": GOOD_JSON})
    assert issues(path) == [
        f"{path}:4:5: traces[1]: trace aws/us-east-1/us-east-1a/p3.2xlarge is listed twice (first at traces[0]); "
        "one trace per offer",
        f"{path}:5:36: traces[2].instance_type: unknown instance type 'p9.huge' for aws; the catalog "
        "(providers/data/instance_types.csv) holds GPU types only",
        f"{path}:5:88: traces[2].file: trace file 'missing.json' cannot be read: No such file or directory",
    ]


def test_a_schema_error_does_not_hide_an_unreadable_trace_file(tmp_path: Path) -> None:
    path = write_manifest(tmp_path, """
        start_utc: "2023-02-15T00:00:00Z"
        traces:
          - {provider: aws, instance_type: p3.2xlarge, region: us-east-1, zone: us-east-1a, file: nope.json,
             capacity_per_unit: 0}
        """, None)
    found = issues(path)
    assert any("traces[0].capacity_per_unit: must be greater than or equal to 1" in line for line in found), found
    assert any("traces[0].file: trace file 'nope.json' cannot be read" in line for line in found), found


def test_parse_trace_json_accepts_the_skypilot_shapes() -> None:
    assert parse_trace_json(b'{"metadata": {"gap_seconds": 195}, "data": [0, 1, 1]}') == (195, (0, 1, 1), None)
    assert parse_trace_json(b'\xef\xbb\xbf{"metadata": {"gap_seconds": 34, "extra": 1}, "data": [1], '
                            b'"prices": [1.2754]}') == (34, (1,), (1.2754,))
    with pytest.raises(ValueError, match=r"is not UTF-8 text \(byte 0xff at offset 0\)"):
        parse_trace_json(b"\xff")


# =========================================================================== small explicit traces


def small_trace(capacity: tuple[int, ...], prices: tuple[float, ...] | None = None, gap: float = 60,
                start: datetime = START) -> MarketTrace:
    from tests.builders import offer

    spot = offer("g1", gpus=1, price=1.0 if prices is None else prices[0], zone="z1")
    return MarketTrace(spot, replace(spot, market=model.Market.ON_DEMAND, usd_per_hour=3.0), start, gap, capacity,
                       prices)


@pytest.mark.parametrize(
    ("capacity", "prices", "expected_seconds"),
    [
        ((0, 1, 1, 0), None, (60, 180)),
        ((1, 1, 0, 1), None, (0, 120, 180, 240)),  # a capacity of 1 at the start and at the end counts
        ((0, 1), None, (60, 120)),  # the start is not a change when tick 0 has no capacity
        ((1, 0), None, (0, 60)),  # nor the end when the last tick has none
        ((2,), None, (0, 60)),
        ((1, 1, 1), (1.0, 1.0, 2.0), (0, 120, 180)),  # a price change is a change; the same price is not
        ((0, 0, 3), (1.0, 2.0, 2.0), (60, 120, 180)),  # a price change without capacity still counts
    ],
    ids=["empty-at-both-ends", "one-at-both-ends", "empty-start", "empty-end", "one-tick", "prices",
         "price-without-capacity"],
)
def test_change_times_of_one_trace(capacity: tuple[int, ...], prices: tuple[float, ...] | None,
                                   expected_seconds: tuple[int, ...]) -> None:
    trace = small_trace(capacity, prices)
    assert trace.change_times() == tuple(START + timedelta(seconds=s) for s in expected_seconds)


def test_spot_price_outside_the_trace_is_the_first_or_the_last_price() -> None:
    trace = small_trace((1, 1, 1), (0.9, 1.1, 1.3))
    assert [trace.spot_price_at(START + timedelta(seconds=s)) for s in (-1, 0, 60, 179, 180, 10_000)] == \
        [0.9, 0.9, 1.1, 1.3, 1.3, 1.3]
    assert trace.spot_offer_at(START + timedelta(seconds=180)) is None  # no capacity after the end
    assert trace.spot_offer_at(START + timedelta(seconds=120)).usd_per_hour == 1.3


class _NoOffset(tzinfo):
    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"gap": 1e-7}, "gap_seconds must be a positive number"),  # positive, but a timedelta of 0
        ({"gap": float("nan")}, "gap_seconds must be a positive number"),
        ({"gap": float("inf")}, "gap_seconds must be a positive number"),
        ({"gap": "60"}, "gap_seconds must be a positive number"),
        ({"gap": -60}, "gap_seconds must be a positive number"),
        ({"capacity": ()}, "capacity must have at least one tick"),
        ({"capacity": (0, -1)}, "capacity must not be negative"),
        ({"capacity": (-1,)}, "capacity must not be negative"),
        ({"start": datetime(2023, 2, 15, tzinfo=_NoOffset())}, "must be timezone-aware"),
    ],
    ids=["tiny-gap", "nan-gap", "inf-gap", "string-gap", "negative-gap", "no-ticks", "one-negative", "all-negative",
         "tzinfo-without-offset"],
)
def test_a_trace_refuses_bad_values(change: dict[str, object], words: str) -> None:
    args = {"capacity": (1,), "gap": 60, "start": START} | change
    with pytest.raises(ValueError, match=words):
        small_trace(args["capacity"], gap=args["gap"], start=args["start"])


def test_a_trace_takes_a_gap_under_a_second() -> None:
    trace = small_trace((1, 2), gap=0.5)
    assert trace.capacity_at(START + timedelta(seconds=0.5)) == 2 and trace.end_utc == START + timedelta(seconds=1)


def test_a_trace_needs_a_spot_offer_and_an_on_demand_twin() -> None:
    good = small_trace((1,))
    spot, od = good.offer_spot, good.offer_on_demand
    for a, b in ((spot, spot), (od, od), (od, spot)):
        with pytest.raises(ValueError, match="offer_spot must be a spot offer"):
            MarketTrace(a, b, START, 60, (1,))
    with pytest.raises(ValueError, match="a market needs at least one trace"):
        Market((), START)


def test_catalog_price_from_given_offers() -> None:
    """Zone, else regional, else the mean of the region's zones to 6 decimals;
    only offers of that provider, type, region and market count."""
    from tests.builders import offer

    spot, od = model.Market.SPOT, model.Market.ON_DEMAND
    offers = [
        offer("g1", price=1.0, zone="z1"),
        offer("g1", price=1.0000246, zone="z2"),
        offer("g1", price=7.0, zone="z1", provider="gcp"),  # another cloud's type of the same name
        offer("g1", price=8.0, zone="z1", market=od),
        offer("g1", price=9.0, zone="z1", region="r2"),
        offer("g2", price=5.0, zone="", region="r3"),  # regional, beside a zone of its own region
        offer("g2", price=6.0, zone="r3-a", region="r3"),
    ]
    assert catalog_price("aws", "g1", "r1", "z2", spot, offers) == 1.0000246
    assert catalog_price("aws", "g1", "r1", "z9", spot, offers) == 1.000012  # (1.0 + 1.0000246) / 2, 6 decimals
    assert catalog_price("aws", "g1", "r1", "z9", od, offers) == 8.0
    assert catalog_price("gcp", "g1", "r1", "z9", spot, offers) == 7.0
    assert catalog_price("aws", "g2", "r3", "r3-b", spot, offers) == 5.0  # the regional price, not the mean
    assert catalog_price("aws", "g2", "r3", "r3-a", spot, offers) == 6.0
    assert catalog_price("aws", "g1", "r4", "z1", spot, offers) is None
    assert catalog_price("aws", "p3.2xlarge", "us-east-1", "us-east-1a", spot, offers) is None  # not the catalog's


def _trace_json(**doc: object) -> bytes:
    return json.dumps({"metadata": {"gap_seconds": 30}, "data": [1]} | doc).encode()


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (_trace_json(metadata={"gap_seconds": 0}), "metadata.gap_seconds must be a positive number"),
        (_trace_json(metadata={"gap_seconds": -30}), "metadata.gap_seconds must be a positive number"),
        (_trace_json(metadata={"gap_seconds": 1e-7}), "metadata.gap_seconds must be a positive number"),
        (_trace_json(metadata={"gap_seconds": True}), "metadata.gap_seconds must be a positive number"),
        (_trace_json(metadata={"gap_seconds": 1e12}), "metadata.gap_seconds must be a positive number"),
        (_trace_json(metadata=[30]), "metadata must be an object with gap_seconds$"),
        (_trace_json(data=5), "data must be a non-empty list of instance counts$"),
        (_trace_json(data=[1, 1.5]), r"data\[1\] must be a whole number >= 0 \(got 1.5\)"),
        (_trace_json(data=[1_000_001]), r"data\[0\] must be at most 1000000 \(got 1000001\)"),
        (_trace_json(metadata={"gap_seconds": 3153600.0001}, data=[1] * 1000), "spans 100 years"),
        (_trace_json(prices=None), r"prices must be a list of USD per hour, one per tick \(got null\)"),
        (_trace_json(prices={"0": 1.0}), r"prices must be a list of USD per hour, one per tick \(got an object\)"),
        (_trace_json(prices=[100_000.5]), r"prices\[0\] must be a price above 0 USD per hour \(got 100000.5\)"),
        (_trace_json(prices=[True]), r"prices\[0\] must be a price above 0 USD per hour \(got true\)"),
        (_trace_json(prices=[[1.0]]), r"prices\[0\] must be a price above 0 USD per hour \(got a list\)"),
        (_trace_json(prices=[{"usd": 1.0}]), r"prices\[0\] must be a price above 0 USD per hour \(got an object\)"),
    ],
    ids=["zero-gap", "negative-gap", "tiny-gap", "bool-gap", "huge-gap", "metadata-list", "data-number",
         "fractional-count", "count-over-a-million", "over-100-years", "null-prices", "prices-object",
         "price-over-100000", "bool-price", "list-price", "object-price"],
)
def test_parse_trace_json_refuses(raw: bytes, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_trace_json(raw)


def test_parse_trace_json_takes_the_limits() -> None:
    assert parse_trace_json(_trace_json(data=[1_000_000], prices=[100_000])) == (30, (1_000_000,), (100_000.0,))
    span = 100 * 365 * 86400
    assert parse_trace_json(_trace_json(metadata={"gap_seconds": span / 1000}, data=[0] * 1000))[0] == span / 1000
    assert parse_trace_json(_trace_json(metadata={"gap_seconds": 1e-6}))[0] == 1e-6


# =========================================================================== limits and problems, by hand


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("spot_usd_per_hour: 0", "8:24: traces[0].spot_usd_per_hour: must be greater than 0 (got 0)"),
        ("spot_usd_per_hour: 100000.5",
         "8:24: traces[0].spot_usd_per_hour: must be less than or equal to 100000 (got 100000.5)"),
        ("on_demand_usd_per_hour: 0", "8:29: traces[0].on_demand_usd_per_hour: must be greater than 0 (got 0)"),
        ("on_demand_usd_per_hour: 100000.5",
         "8:29: traces[0].on_demand_usd_per_hour: must be less than or equal to 100000 (got 100000.5)"),
        ("capacity_per_unit: 1000001",
         "8:24: traces[0].capacity_per_unit: must be less than or equal to 1000000 (got 1000001)"),
    ],
)
def test_a_trace_refuses_prices_and_capacity_out_of_bounds(tmp_path: Path, line: str, expected: str) -> None:
    path = write_manifest(tmp_path, ONE_TRACE + "    " + line + "\n", {"t.json": GOOD_JSON})
    assert issues(path) == [f"{path}:{expected}"]


def test_a_trace_takes_the_most_prices_and_capacity_and_a_one_letter_file(tmp_path: Path) -> None:
    path = write_manifest(tmp_path, ONE_TRACE.replace("file: t.json", "file: t") + "    spot_usd_per_hour: 100000\n"
                          "        on_demand_usd_per_hour: 100000\n        capacity_per_unit: 1000000\n",
                          {"t": GOOD_JSON})
    (trace,) = load_market(path).traces
    assert (trace.offer_spot.usd_per_hour, trace.offer_on_demand.usd_per_hour, trace.capacity) == \
        (100_000.0, 100_000.0, (1_000_000, 0))
    path = write_manifest(tmp_path, ONE_TRACE + "    spot_usd_per_hour: 0.25\n        on_demand_usd_per_hour: 0.5\n",
                          {"t.json": GOOD_JSON})
    (trace,) = load_market(path).traces
    assert (trace.offer_spot.usd_per_hour, trace.offer_on_demand.usd_per_hour) == (0.25, 0.5)


def test_an_empty_instance_type_or_file_is_one_schema_issue(tmp_path: Path) -> None:
    path = write_manifest(tmp_path, ONE_TRACE.replace("p3.2xlarge", '""'), {"t.json": GOOD_JSON})
    assert issues(path) == [f"{path}:4:20: traces[0].instance_type: must have at least 1 character (got '')"]
    # a one-letter type is looked up in the catalog
    path = write_manifest(tmp_path, ONE_TRACE.replace("p3.2xlarge", "x"))
    assert issues(path) == [f"{path}:4:20: traces[0].instance_type: unknown instance type 'x' for aws; the catalog "
                            "(providers/data/instance_types.csv) holds GPU types only"]
    # an empty file name is not read as the manifest's directory
    path = write_manifest(tmp_path, ONE_TRACE.replace("file: t.json", 'file: ""'))
    assert issues(path) == [f"{path}:7:11: traces[0].file: must have at least 1 character (got '')"]


def test_traces_of_the_wrong_shape_are_schema_issues_only(tmp_path: Path) -> None:
    start = 'start_utc: "2023-02-15T00:00:00Z"\n'
    path = write_manifest(tmp_path, start + "traces: 5\n")
    assert issues(path) == [f"{path}:2:9: traces: must be a list (got 5)"]
    # an item that is not a mapping, a file that is not text: no trace file is read for either
    path = write_manifest(tmp_path, start + "traces: [5, {provider: aws, instance_type: p3.2xlarge, region: us-east-1, "
                                            "zone: us-east-1a, file: 5}]\n")
    assert issues(path) == [f"{path}:2:10: traces[0]: must be a mapping (got 5)",
                            f"{path}:2:99: traces[1].file: must be a valid string (got 5)"]


def test_an_offer_listed_again_is_reported_against_its_first_trace_only(tmp_path: Path) -> None:
    """The repeats are not read further (a missing file not reported) and each
    names the first; a regional offer's zone is '*'."""
    trace = "  - {provider: gcp, instance_type: a2-highgpu-1g, region: asia-east1, zone: '', file: %s}\n"
    path = write_manifest(tmp_path, 'start_utc: "2023-02-15T00:00:00Z"\ntraces:\n' + trace % "t.json"
                          + trace % "missing.json" + trace % "t.json", {"t.json": GOOD_JSON})
    twice = "trace gcp/asia-east1/*/a2-highgpu-1g is listed twice (first at traces[0]); one trace per offer"
    assert issues(path) == [f"{path}:4:5: traces[1]: {twice}", f"{path}:5:5: traces[2]: {twice}"]


def test_each_trace_is_checked_after_one_with_a_problem(tmp_path: Path) -> None:
    """A type whose region has no spot price in the catalog (aws g2.2xlarge in
    us-east-1: on demand only, 0.65 regional), a trace ending past the year
    9999 (a day from 9999-12-31) and one ending a second before it."""
    path = write_manifest(tmp_path, """
        start_utc: "9999-12-31T00:00:00Z"
        traces:
          - {provider: aws, instance_type: g2.2xlarge, region: us-east-1, zone: us-east-1a, file: day.json}
          - {provider: aws, instance_type: p3.2xlarge, region: us-east-1, zone: us-east-1a, file: day.json}
          - {provider: aws, instance_type: p3.2xlarge, region: us-east-1, zone: us-east-1b, file: short.json}
          - {provider: aws, instance_type: p3.2xlarge, region: us-east-1, zone: us-east-1c, file: missing.json}
        """, {"day.json": {"metadata": {"gap_seconds": 86400}, "data": [1]},
              "short.json": {"metadata": {"gap_seconds": 86399}, "data": [1]}})
    assert issues(path) == [
        f"{path}:3:5: traces[0]: trace aws/us-east-1/us-east-1a/g2.2xlarge: the catalog has no spot price for aws "
        "g2.2xlarge in us-east-1; set spot_usd_per_hour",
        f"{path}:4:91: traces[1].file: trace file 'day.json' ends after the year 9999 when started at start_utc",
        f"{path}:6:91: traces[3].file: trace file 'missing.json' cannot be read: No such file or directory",
    ]
    path = write_manifest(tmp_path, """
        start_utc: "9999-12-30T00:00:00Z"
        traces:
          - {provider: aws, instance_type: g2.2xlarge, region: us-east-1, zone: us-east-1a, file: day.json,
             spot_usd_per_hour: 0.2}
          - {provider: aws, instance_type: p3.2xlarge, region: us-east-1, zone: us-east-1b, file: short.json}
        """)
    g2, p3 = load_market(path).traces
    assert (g2.offer_spot.usd_per_hour, g2.offer_on_demand.usd_per_hour) == (0.2, 0.65)
    assert g2.end_utc == datetime(9999, 12, 31, tzinfo=timezone.utc)
    assert p3.end_utc == datetime(9999, 12, 30, 23, 59, 59, tzinfo=timezone.utc)


def test_an_unknown_type_is_hinted_from_its_own_providers_types_only(tmp_path: Path) -> None:
    path = write_manifest(tmp_path, ONE_TRACE.replace("p3.2xlarge", "a2-highgpu-1"), {"t.json": GOOD_JSON})
    assert issues(path) == [f"{path}:4:20: traces[0].instance_type: unknown instance type 'a2-highgpu-1' for aws; "
                            "the catalog (providers/data/instance_types.csv) holds GPU types only"]


def test_a_trace_file_name_that_cannot_be_opened_is_reported_with_the_reason(tmp_path: Path) -> None:
    path = write_manifest(tmp_path, ONE_TRACE.replace("file: t.json", 'file: "a\\0b"'))
    assert issues(path) == [f"{path}:7:11: traces[0].file: trace file 'a\\x00b' cannot be read: embedded null byte"]


def test_a_trace_file_over_the_size_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fleetctl.sim.market as market_module

    content = '{"metadata": {"gap_seconds": 30}, "data": [1]}'  # 46 bytes
    path = write_manifest(tmp_path, ONE_TRACE, {"t.json": content})
    monkeypatch.setattr(market_module, "MAX_TRACE_FILE_BYTES", 46)
    assert load_market(path).traces[0].capacity == (1,)
    monkeypatch.setattr(market_module, "MAX_TRACE_FILE_BYTES", 45)
    assert issues(path) == [f"{path}:7:11: traces[0].file: trace file 't.json' is larger than 45 bytes"]


def test_parse_trace_json_names_a_missing_data_a_bad_byte_and_the_span_in_whole_years() -> None:
    with pytest.raises(ValueError, match=r"^data must be a non-empty list of instance counts \(it is missing\)$"):
        parse_trace_json(b'{"metadata": {"gap_seconds": 30}}')
    with pytest.raises(ValueError, match=r"^is not UTF-8 text \(byte 0xff at offset 13\)$"):
        parse_trace_json(b'{"metadata": \xff\xfe')
    # 10 ticks of 316938528 s: 36682.7 days, 100.50055 years of 365 days; 10 of 316935754 s: 100.49967 years
    with pytest.raises(ValueError, match=r"^spans 101 years \(gap_seconds x ticks\)"):
        parse_trace_json(_trace_json(metadata={"gap_seconds": 316938528}, data=[0] * 10))
    with pytest.raises(ValueError, match=r"^spans 100 years \(gap_seconds x ticks\)"):
        parse_trace_json(_trace_json(metadata={"gap_seconds": 316935754}, data=[0] * 10))
