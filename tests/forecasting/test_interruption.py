"""The interruption-risk model: time split, features in time, save/load, CLI, and the planner using it."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from fleetctl import model as fm
from fleetctl.sim.market import Market, MarketTrace
from forecasting.interruption import (
    FEATURES,
    STEP,
    InterruptionModel,
    ModelError,
    build_samples,
    evaluate,
    evaluation_mask,
    market_from_observations,
    split_time,
    training_mask,
)

T0 = datetime(2023, 2, 15, tzinfo=timezone.utc)
REPO = Path(__file__).resolve().parents[2]
H = timedelta(hours=1)


def _offer(zone: str, market: fm.Market = fm.Market.SPOT, price: float = 0.9) -> fm.Offer:
    it = fm.InstanceType("aws", "p3.2xlarge", 8, 61.0, "V100-16GB", 1, 16.0)
    return fm.Offer(it, "us-east-1", zone, market, price if market is fm.Market.SPOT else 3.06)


def synthetic(days: int = 12, gap: float = 300.0, seed: int = 0, zones=("a", "b", "c")) -> Market:
    """Zones that lose capacity together now and then (a shared shock), with noise."""
    rng = random.Random(seed)
    n = int(days * 86400 / gap)
    shock = [0] * n
    i = 0
    while i < n:
        i += rng.randint(int(3 * 3600 / gap), int(20 * 3600 / gap))
        for k in range(i, min(n, i + int(2 * 3600 / gap))):
            shock[k] = 1
    traces = []
    for z in zones:
        cap = [0 if shock[k] and rng.random() < 0.9 else (1 if rng.random() > 0.02 else 0) for k in range(n)]
        traces.append(MarketTrace(_offer(z), _offer(z, fm.Market.ON_DEMAND), T0, gap, tuple(cap)))
    return Market(tuple(traces), T0)


def test_split_never_trains_on_the_evaluation_period():
    m = synthetic()
    s = build_samples(m, H)
    split = split_time(m, 0.7)
    train, test = training_mask(s, split, H), evaluation_mask(s, split)
    assert train.any() and test.any() and not (train & test).any()
    assert (s.times[train] + H.total_seconds() <= split).all()  # label windows end before the split
    assert (s.times[test] >= split).all()


def test_features_use_only_the_past():
    m = synthetic(seed=1)
    cut = T0 + timedelta(days=6)
    futures = []
    for seed in (2, 3):  # two different futures after `cut`
        rng = random.Random(seed)
        traces = []
        for t in m.traces:
            i = t.tick_at(cut)
            cap = t.capacity[:i] + tuple(rng.randint(0, 1) for _ in t.capacity[i:])
            traces.append(replace(t, capacity=cap))
        futures.append(build_samples(Market(tuple(traces), T0), H))
    a, b = futures
    past = a.times <= (cut - T0).total_seconds() - STEP.total_seconds()
    assert np.array_equal(a.X[past], b.X[past])
    assert not np.array_equal(a.X[~past], b.X[~past])  # the test can fail: the future does differ


def test_features_are_defined_in_time_not_ticks():
    coarse = synthetic(days=4, gap=600.0, seed=4)
    fine_traces = tuple(replace(t, gap_seconds=60.0, capacity=tuple(c for c in t.capacity for _ in range(10)))
                        for t in coarse.traces)
    fine = Market(fine_traces, T0)
    a, b = build_samples(coarse, H), build_samples(fine, H)
    assert a.X.shape == b.X.shape
    assert np.allclose(a.X, b.X)
    assert np.array_equal(a.y, b.y)


def test_predict_uses_only_data_up_to_now_even_between_grid_points():
    m = synthetic(days=14, seed=7)
    model = InterruptionModel.train([m], train_fraction=0.7)
    now = T0 + timedelta(days=10, hours=4, minutes=13, seconds=20)  # not on the 10-minute grid
    rng = random.Random(8)
    traces = []
    for t in m.traces:
        i = t.tick_at(now) + 1  # ticks starting after `now`
        traces.append(replace(t, capacity=t.capacity[:i] + tuple(rng.randint(0, 1) for _ in t.capacity[i:])))
    other = Market(tuple(traces), T0)
    assert other.traces != m.traces
    assert model.predict(other, now) == model.predict(m, now)
    # a loss of the same type in another zone 2 minutes before `now` is seen at once, not at the next grid point
    lost = replace(m.traces[1], capacity=tuple(1 for _ in m.traces[1].capacity))
    seen = Market((replace(m.traces[0], capacity=tuple(1 for _ in m.traces[0].capacity)), lost, m.traces[2]), T0)
    drop_tick = lost.tick_at(now - timedelta(minutes=2))
    dropped = replace(lost, capacity=lost.capacity[:drop_tick] + (0,) * (len(lost.capacity) - drop_tick))
    after = Market((seen.traces[0], dropped, seen.traces[2]), T0)
    assert model.predict(after, now)[m.traces[0].offer_spot.key] != model.predict(seen, now)[m.traces[0].offer_spot.key]


def test_runtime_features_match_the_training_features():
    from forecasting.interruption import MarketIndex

    m = synthetic(days=5, gap=195.0, seed=9)
    s = build_samples(m, H)
    index = MarketIndex(m)
    for g in (0, 7, 300, 700):
        t = g * STEP.total_seconds()
        row = index.features(np.array([t]))[:, 0, :]
        assert np.array_equal(row, s.X[s.times == t])


def test_label_is_a_drop_below_the_capacity_at_t():
    c = (4, 4, 5, 4, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3)  # 10-minute ticks
    trace = MarketTrace(_offer("a"), _offer("a", fm.Market.ON_DEMAND), T0, 600.0, c)
    s = build_samples(Market((trace,), T0), H)
    y = dict(zip(s.times // 600, s.y))
    assert np.array_equal(build_samples(Market((trace,), T0)).y, s.y)  # the horizon is an hour unless given
    assert y[0] == 0  # 4 -> 5 -> 4 within the hour: never below 4
    assert y[2] == 1  # from 5: down to 4 at tick 3
    assert y[3] == 1  # the drop to 3 starts at tick 9, exactly t + 1 h: (t, t + 1 h] holds it
    assert y[4] == 1 and y[8] == 1
    assert y[9] == 0 and y[10] == 0  # at 3 and never below
    assert y[18] == 0
    assert y[19] == -1 and y[24] == -1  # the horizon reaches the trace's end: censored, not a loss


def test_train_save_load_round_trip_and_version_refusal(tmp_path):
    m = synthetic(days=14, seed=5)
    model = InterruptionModel.train([m], train_fraction=0.7)
    assert model.metadata["features"] == list(FEATURES)
    assert model.metadata["versions"]["scikit-learn"]
    model.save(tmp_path / "m")
    again = InterruptionModel.load(tmp_path / "m")
    now = T0 + timedelta(days=11, hours=3, minutes=7)
    assert again.predict(m, now) == model.predict(m, now)
    assert set(model.predict(m, now)) == {t.offer_spot.key for t in m.traces}
    result = evaluate(again, [m])
    assert result["samples"] > 0 and 0.0 <= result["brier"] <= 1.0
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    meta["versions"]["scikit-learn"] = "0.0.1"
    (tmp_path / "m" / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="scikit-learn 0.0.1"):
        InterruptionModel.load(tmp_path / "m")
    with pytest.warns(UserWarning, match="scikit-learn 0.0.1"):
        InterruptionModel.load(tmp_path / "m", allow_version_mismatch=True)
    (tmp_path / "m" / "model.joblib").write_bytes(b"not a model")
    with pytest.raises(ModelError, match="do not belong together"), pytest.warns(UserWarning):
        InterruptionModel.load(tmp_path / "m", allow_version_mismatch=True)
    (tmp_path / "m" / "model.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "digest"}))
    with pytest.raises(ModelError, match="has no digest"), pytest.warns(UserWarning):  # the digest deleted
        InterruptionModel.load(tmp_path / "m", allow_version_mismatch=True)
    with pytest.raises(ModelError, match="no such model directory"):
        InterruptionModel.load(tmp_path / "missing")
    (tmp_path / "m" / "model.json").write_text("{not json")
    with pytest.raises(ModelError, match="model.json"):
        InterruptionModel.load(tmp_path / "m")
    meta["features"] = meta["features"][:-1]
    (tmp_path / "m" / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="other features"):
        InterruptionModel.load(tmp_path / "m", allow_version_mismatch=True)


def test_the_model_beats_both_baselines_on_a_shared_shock_market():
    m = synthetic(days=30, seed=6)
    model = InterruptionModel.train([m], train_fraction=0.7)
    r = evaluate(model, [m])
    assert r["auc"] > r["baselines"]["recent_rate"]["auc"]
    assert r["brier"] < r["baselines"]["base_rate"]["brier"]


def test_market_from_the_controllers_own_observations(tmp_path):
    from fleetctl.store import Store

    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        a, b = _offer("us-east-1a"), _offer("us-east-1b")
        od = _offer("", fm.Market.ON_DEMAND)
        store.record_offers([a, b, od], T0)
        store.record_offers([a, od], T0 + timedelta(minutes=30))  # b lost
        store.record_offers([a, b, od], T0 + timedelta(minutes=50))
        m = market_from_observations(store.offer_observations(), T0, T0 + timedelta(hours=2), 300.0,
                                     reclaims=[(a.key, T0 + timedelta(minutes=70))])
    finally:
        store.close()
    tb, ta = m.trace_for(b.key), m.trace_for(a.key)
    assert tb.capacity[:6] == (1,) * 6 and tb.capacity[6:10] == (0,) * 4 and tb.capacity[10] == 1
    assert ta.capacity[14] == 0 and ta.capacity[13] == 1  # the reclaim the controller handled
    assert tb.offer_on_demand.usd_per_hour == 3.06
    assert len(ta.capacity) == 24


def test_market_from_observations_folds_in_store_interruptions_and_catalog_prices(tmp_path):
    from fleetctl.model import OfferReclaim
    from fleetctl.sim.market import catalog_price
    from fleetctl.store import Store

    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        a = _offer("us-east-1a")
        store.record_offers([a], T0)  # no on-demand offer listed: the price comes from the catalog
        rows = store.offer_observations()
    finally:
        store.close()
    m = market_from_observations(rows, T0, T0 + timedelta(hours=1), 600.0,
                                 reclaims=[OfferReclaim(a.key, T0 + timedelta(minutes=25))])
    t = m.trace_for(a.key)
    assert t.capacity == (1, 1, 0, 1, 1, 1)
    expected = catalog_price("aws", "p3.2xlarge", "us-east-1", "us-east-1a", fm.Market.ON_DEMAND)
    assert expected is not None and t.offer_on_demand.usd_per_hour == expected
    with pytest.raises(ValueError, match="no offer observations"):
        market_from_observations((), T0, T0 + timedelta(hours=1))
    for end in (T0, T0 - timedelta(microseconds=1)):
        with pytest.raises(ValueError, match=re.escape(f"end {end.isoformat()} is not after start {T0.isoformat()}")):
            market_from_observations(rows, T0, end)
    five_minutes = market_from_observations(rows, T0, T0 + timedelta(hours=1)).trace_for(a.key)  # the default tick
    assert five_minutes.gap_seconds == 300.0 and five_minutes.capacity == (1,) * 12


def test_market_from_observation_rows_hand_built():
    """Rows as Store.offer_observations gives them, in no order. A (p3.2xlarge, us-east-1a): listed at 0 at
    0.9 USD/h, unlisted at 12 minutes, listed at 20 at 1.1 with its on-demand price 2.5 (the first given) and
    reclaimed at 3 minutes (so is it at 0 minutes; reclaims outside the ticks are ignored). B (a type the
    catalog lacks): listed at 7 minutes without a price, at 15 at 0.4 (its price from the start), no
    on-demand price anywhere (3 x 0.4 then). 25 minutes of
    10-minute ticks make 3 ticks, each taking the last row before it ends; 100 seconds make one."""
    a, b = "aws/us-east-1/us-east-1a/p3.2xlarge/spot", "aws/us-east-1/us-east-1b/x9.fake/spot"

    def obs(key, minutes, available, price, on_demand=None):
        return {"observed_at_utc": T0 + timedelta(minutes=minutes), "offer_key": key, "available": available,
                "usd_per_hour": price, "on_demand_usd_per_hour": on_demand}

    rows = [obs(b, 15, True, 0.4), obs(b, 7, True, None), obs(a, 20, True, 1.1, 2.5), obs(a, 12, False, 0.9),
            obs(a, 0, True, 0.9)]
    m = market_from_observations(rows, T0, T0 + timedelta(minutes=25), 600.0, [(a, T0 + timedelta(minutes=3))])
    ta, tb = m.trace_for(a), m.trace_for(b)
    assert (ta.capacity, ta.prices, ta.offer_spot.usd_per_hour) == ((0, 0, 1), (0.9, 0.9, 1.1), 0.9)
    assert ta.offer_on_demand.usd_per_hour == 2.5 and ta.offer_on_demand.market is fm.Market.ON_DEMAND
    assert (tb.capacity, tb.prices) == ((1, 1, 1), (0.4, 0.4, 0.4))
    assert tb.offer_on_demand.usd_per_hour == pytest.approx(1.2)
    assert (tb.offer_spot.instance_type.name, tb.offer_spot.instance_type.gpu_count) == ("x9.fake", 0)
    assert m.start_utc == T0 and ta.start_utc == T0 and ta.gap_seconds == 600.0
    assert ta.offer_spot.instance_type.gpu_model == "V100-16GB" and ta.offer_spot.key == a  # the catalog's type
    regional = market_from_observations([obs("gcp/us-central1/*/g2-standard-4/spot", 0, True, 0.3)], T0,
                                        T0 + timedelta(hours=1)).traces[0].offer_spot
    assert (regional.zone, regional.key) == ("", "gcp/us-central1/*/g2-standard-4/spot")
    reclaims = [(a, T0 + timedelta(minutes=m)) for m in (-5, 0, 30)]  # at the first tick's start, outside the ticks
    assert market_from_observations(rows, T0, T0 + timedelta(minutes=25), 600.0, reclaims).trace_for(a) == ta
    with pytest.raises(ValueError, match="offer key 'aws/us-east-1/p3.2xlarge/spot' is not provider/region/zone/type/"):
        market_from_observations([obs("aws/us-east-1/p3.2xlarge/spot", 0, True, 0.9)], T0, T0 + timedelta(hours=1))
    short = market_from_observations(rows, T0, T0 + timedelta(seconds=100), 300.0)
    assert short.trace_for(a).capacity == (1,) and short.trace_for(b).capacity == (0,)  # B's first row is at 7 min


class _Run:
    """A CliRunner result with the names of subprocess.run's."""

    def __init__(self, result) -> None:  # noqa: ANN001
        self.returncode, self.stdout, self.stderr = result.exit_code, result.stdout, result.stderr


def test_cli_train_and_evaluate_json(tmp_path):
    out = tmp_path / "model"
    manifest = REPO / "examples" / "markets" / "aws-v100-16node.yaml"
    from typer.testing import CliRunner

    from fleetctl.cli.main import app

    runner = CliRunner()
    run = lambda *a: _Run(runner.invoke(app, ["forecast", *a], catch_exceptions=False))
    r = run("train", "interruption", "--market", str(manifest), "-o", str(out))
    assert r.returncode == 0, r.stderr
    r = run("evaluate", "interruption", "--model", str(out), "--market", str(manifest), "--format", "json",
            "--report", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"samples", "positives", "auc", "brier", "baselines"}
    assert set(doc["baselines"]) == {"base_rate", "recent_rate"}
    assert all(set(v) == {"auc", "brier"} for v in doc["baselines"].values())
    assert (tmp_path / "rep" / "reliability.png").stat().st_size > 1000
    bad = run("evaluate", "interruption", "--model", str(tmp_path / "nope"), "--market", str(manifest))
    assert bad.returncode == 2 and "no such model directory" in bad.stderr
    bad = run("train", "interruption", "--market", str(manifest), "--horizon", "soon", "-o", str(out))
    assert bad.returncode == 2 and "duration" in bad.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("start_utc: 2023-02-15T00:00:00Z\ntraces:\n  - provider: aws\n")
    bad = run("evaluate", "interruption", "--model", str(out), "--market", str(broken))
    assert bad.returncode == 2 and "broken.yaml" in bad.stderr
    bad = run("train", "interruption", "--market", str(tmp_path / "missing.yaml"), "-o", str(out))
    assert bad.returncode == 2 and "missing.yaml" in bad.stderr
    bad = run("train", "interruption", "--market", str(manifest), "-o", str(broken))  # a file, not a directory
    assert bad.returncode == 2 and "broken.yaml: exists and is not a directory" in bad.stderr, bad.stderr
    meta = json.loads((out / "model.json").read_text())
    meta["versions"]["scikit-learn"] = "0.0.1"
    (out / "model.json").write_text(json.dumps(meta))
    bad = run("evaluate", "interruption", "--model", str(out), "--market", str(manifest), "--format", "json")
    assert bad.returncode == 2 and "scikit-learn 0.0.1" in bad.stderr and "--allow-version-mismatch" in bad.stderr
    ok = run("evaluate", "interruption", "--model", str(out), "--market", str(manifest), "--format", "json",
             "--allow-version-mismatch")
    assert ok.returncode == 0 and json.loads(ok.stdout) == doc
    assert "warning:" in ok.stderr and "scikit-learn 0.0.1" in ok.stderr
    (out / "model.joblib").write_bytes(b"garbage")
    bad = run("evaluate", "interruption", "--model", str(out), "--market", str(manifest), "--allow-version-mismatch")
    assert bad.returncode == 2 and "model.joblib" in bad.stderr


def test_a_market_longer_than_the_limit_is_refused_before_its_grid_is_built(tmp_path):
    """A two-tick trace with a 1.5e9 s tick took 34 s and 2.9 GB (2.5 million
    grid points) before "too few losses"; now it is refused up front."""
    from typer.testing import CliRunner

    from fleetctl.cli.main import app

    gap = 200 * 86400.0  # two ticks: 400 days (cheap enough for the old code to get through, too)
    (tmp_path / "t.json").write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": [1, 0]}))
    (tmp_path / "long.yaml").write_text(
        'start_utc: "2023-02-15T00:00:00Z"\ntraces:\n  - provider: aws\n    instance_type: p3.2xlarge\n'
        "    region: us-east-1\n    zone: us-east-1a\n    file: t.json\n")
    model = tmp_path / "model"
    InterruptionModel.train([synthetic(days=6, seed=7)]).save(model)
    runner = CliRunner()
    for args in (("train", "interruption", "--market", str(tmp_path / "long.yaml"), "-o", str(tmp_path / "m")),
                 ("evaluate", "interruption", "--model", str(model), "--market", str(tmp_path / "long.yaml"))):
        r = _Run(runner.invoke(app, ["forecast", *args], catch_exceptions=False))
        assert r.returncode == 2 and r.stdout == "", r.stderr
        assert " ".join(r.stderr.split()).startswith(
            f"Error: {tmp_path / 'long.yaml'}: the market spans 400.0 days (to the end of the trace of "
            "aws/us-east-1/us-east-1a/p3.2xlarge/spot"), r.stderr
    assert not (tmp_path / "m").exists()

    from forecasting.interruption import MAX_MARKET_SPAN, check_span

    assert MAX_MARKET_SPAN == timedelta(days=366)
    long = Market((MarketTrace(_offer("a"), _offer("a", fm.Market.ON_DEMAND), T0, gap, (1, 0)),), T0)
    with pytest.raises(ValueError, match=r"the market spans 400\.0 days \(to the end of the trace of "
                                         r"aws/us-east-1/a/p3\.2xlarge/spot, 2 ticks of 1\.728e\+07 s\), more than "
                                         r"the 366 days \(52704 samples of 10 minutes per offer\)"):
        build_samples(long, H)
    # the longest of two traces is named; half a day shows
    longest = MarketTrace(_offer("b"), _offer("b", fm.Market.ON_DEMAND), T0, 200.25 * 86400, (1, 0))
    short = MarketTrace(_offer("a"), _offer("a", fm.Market.ON_DEMAND), T0, 600.0, (1, 0))
    with pytest.raises(ValueError, match=r"the market spans 400\.5 days \(to the end of the trace of "
                                         r"aws/us-east-1/b/p3\.2xlarge/spot, 2 ticks of 1\.73016e\+07 s\)"):
        check_span(Market((short, longest), T0))
    fits = Market((MarketTrace(_offer("a"), _offer("a", fm.Market.ON_DEMAND), T0, 183 * 86400.0, (1, 0)),), T0)
    check_span(fits)  # 366 days exactly


def test_the_same_market_twice_is_refused(tmp_path, monkeypatch):
    """--market M --market M counted every sample twice; --series is refused twice already."""
    from typer.testing import CliRunner

    from fleetctl.cli.main import app

    manifest = REPO / "examples" / "markets" / "aws-v100-16node.yaml"
    monkeypatch.chdir(REPO / "examples")
    model = tmp_path / "model"
    InterruptionModel.train([synthetic(days=6, seed=7)]).save(model)
    runner = CliRunner()
    for args in (("train", "interruption", "--market", str(manifest), "--market", "markets/../markets/"
                  "aws-v100-16node.yaml", "-o", str(tmp_path / "m")),
                 ("evaluate", "interruption", "--model", str(model), "--market", str(manifest), "--market",
                  str(manifest))):
        r = _Run(runner.invoke(app, ["forecast", *args], catch_exceptions=False))
        assert r.returncode == 2 and r.stdout == "", r.stderr
        assert " ".join(r.stderr.split()).startswith("Error: --market given more than once: "), r.stderr
        assert str(manifest) in r.stderr
    assert not (tmp_path / "m").exists()


def test_planner_choice_changes_when_risk_changes():
    from fleetctl.model import Forecast, OfferRisk
    from fleetctl.planner import plan
    from tests.builders import job, policy

    a, b = _offer("us-east-1a", price=0.90), _offer("us-east-1b", price=0.95)
    j = replace(job("long", gpus=1, duration_hours=10, vcpus=4, memory_gib=16), gpu_models=("V100-16GB",))
    pol = policy(gpu_models=())

    def chosen(risk_a: float, risk_b: float) -> str:
        fc = Forecast(interruption=(OfferRisk(a.key, 60, risk_a), OfferRisk(b.key, 60, risk_b)))
        p = plan(now=T0, queue=(j,), fleet=(), offers=(a, b), forecast=fc, policy=pol)
        return p.of_kind("launch")[0].offer.zone

    assert chosen(0.01, 0.01) == "us-east-1a"  # cheaper
    assert chosen(0.40, 0.01) == "us-east-1b"  # a is about to be reclaimed


def _mixed_market(seed: int = 11) -> Market:
    """Offers of two types in shared zones, one regional offer, each with its own losses."""
    rng = random.Random(seed)
    v100 = fm.InstanceType("aws", "p3.2xlarge", 8, 61.0, "V100-16GB", 1, 16.0)
    t4 = fm.InstanceType("aws", "g4dn.xlarge", 4, 16.0, "T4", 1, 16.0)
    l4 = fm.InstanceType("gcp", "g2-standard-4", 4, 16.0, "L4", 1, 24.0)
    shapes = [(v100, "us-east-1", "a"), (v100, "us-east-1", "b"), (t4, "us-east-1", "a"), (t4, "us-east-1", "b"),
              (t4, "us-east-1", "c"), (l4, "us-central1", ""), (l4, "us-east4", "")]
    traces = []
    for it, region, zone in shapes:
        n = 5 * 288
        cap = tuple(1 if rng.random() > 0.08 else 0 for _ in range(n))
        traces.append(MarketTrace(fm.Offer(it, region, zone, fm.Market.SPOT, 0.5),
                                  fm.Offer(it, region, zone, fm.Market.ON_DEMAND, 1.5), T0, 300.0, cap))
    return Market(tuple(traces), T0)


def test_cross_offer_features_are_the_pairwise_definition():
    """Losses of others in the same zone, of the same type in other zones and of the whole market,
    against a plain loop over every pair of offers (the grouped sums must give the same numbers)."""
    from forecasting.interruption import MarketIndex

    m = _mixed_market()
    index = MarketIndex(m)
    t = np.arange(0.0, 5 * 86400, 600.0)
    X = index.features(t)
    col = {name: i for i, name in enumerate(FEATURES)}
    own = {w: [index._losses(k, t, w) for k in range(len(m.traces))] for w in (1, 6)}
    for k, tk in enumerate(m.traces):
        zk, yk = tk.offer_spot.placement_domain, tk.offer_spot.instance_type.name
        for w in (1, 6):
            zone = sum((own[w][j] for j, tj in enumerate(m.traces)
                        if j != k and tj.offer_spot.placement_domain == zk), np.zeros(len(t)))
            kind = sum((own[w][j] for j, tj in enumerate(m.traces)
                        if j != k and tj.offer_spot.instance_type.name == yk
                        and tj.offer_spot.placement_domain != zk), np.zeros(len(t)))
            market = sum((own[w][j] for j in range(len(m.traces)) if j != k), np.zeros(len(t)))
            assert np.array_equal(X[k, :, col[f"zone_other_losses_{w}h"]], zone)
            assert np.array_equal(X[k, :, col[f"type_other_losses_{w}h"]], kind)
            assert np.array_equal(X[k, :, col[f"market_other_losses_{w}h"]], market)
        assert X[k, :, col["market_other_losses_6h"]].sum() > 0  # the test can fail: others do lose capacity
    # asked for some offers only, the rows are those of the whole market
    assert np.array_equal(index.features(t, (5, 2)), X[[5, 2]])


def test_a_market_larger_than_the_row_budget_is_sampled_uniformly_and_reproducibly(monkeypatch):
    import forecasting.interruption as interruption

    m = _mixed_market()
    full = build_samples(m, H)
    usable = full.available & (full.y >= 0)
    budget = int(usable.sum() * 0.3)
    a = build_samples(m, H, max_rows=budget, seed=3)
    assert a.fraction == pytest.approx(0.3, rel=0.01)
    assert 0.8 * budget < len(a.y) < 1.2 * budget
    assert a.available.all() and (a.y >= 0).all()
    # every kept row is the row of the full build for that offer and time
    where = {(int(o), float(t)): i for i, (o, t) in enumerate(zip(full.offer_index, full.times))}
    rows = [where[(int(o), float(t))] for o, t in zip(a.offer_index, a.times)]
    assert np.array_equal(a.X, full.X[rows]) and np.array_equal(a.y, full.y[rows])
    assert np.array_equal(a.recent, full.recent[rows])
    assert full.available[rows].all()  # only rows with capacity are drawn
    # each offer keeps about its share, and the positives keep theirs (the labels are not skewed)
    for k in range(len(m.traces)):
        assert (a.offer_index == k).sum() == pytest.approx(0.3 * (usable & (full.offer_index == k)).sum(), rel=0.35)
    assert a.y.mean() == pytest.approx(full.y[usable].mean(), rel=0.25)
    b = build_samples(m, H, max_rows=budget, seed=3)
    assert np.array_equal(a.X, b.X) and np.array_equal(a.times, b.times)
    # computed two offers at a time (720 grid times; the last chunk holds the 7th offer alone): the same rows
    monkeypatch.setattr(interruption, "_CHUNK_ROWS", 2 * 720)
    c = build_samples(m, H, max_rows=budget, seed=3)
    assert np.array_equal(a.X, c.X) and np.array_equal(a.y, c.y) and np.array_equal(a.recent, c.recent)
    assert np.array_equal(a.times, c.times) and np.array_equal(a.offer_index, c.offer_index)
    monkeypatch.undo()
    assert not np.array_equal(build_samples(m, H, max_rows=budget, seed=4).times, a.times)
    # within the budget (to the row), nothing is sampled: every row, usable or not
    exact = build_samples(m, H, max_rows=int(usable.sum()))
    assert exact.fraction == 1.0 and len(exact.y) == len(full.y) and np.array_equal(exact.X, full.X)
    unbounded = build_samples(m, H, max_rows=None)
    assert unbounded.fraction == 1.0 and np.array_equal(unbounded.X, full.X) and np.array_equal(unbounded.y, full.y)


def test_training_on_a_sampled_market_records_the_share():
    m = synthetic(days=14, seed=7)
    full = build_samples(m, H)
    usable = int((full.available & (full.y >= 0)).sum())
    assert InterruptionModel.train([m], train_fraction=0.7).metadata["sampled_share"] == [1.0]
    model = InterruptionModel.train([m], train_fraction=0.7, max_rows=usable // 2)
    assert model.metadata["sampled_share"][0] == pytest.approx(0.5, rel=0.01)
    assert model.metadata["samples"] < usable * 0.7


@pytest.mark.parametrize("which", ["min", "max"])
def test_window_extremes_are_those_of_the_values_in_the_window(which):
    from forecasting.interruption import _window_extreme

    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 50, 333):
        values = rng.integers(0, 9, n).astype(float)
        lo = rng.integers(0, n, 400)
        hi = np.minimum(lo + rng.integers(0, 40, 400), n - 1)  # all lengths, clipped at both ends too
        lo = np.concatenate([lo, [0, n - 1, 0]])
        hi = np.concatenate([hi, [n - 1, n - 1, 0]])
        want = [values[a:b + 1].min() if which == "min" else values[a:b + 1].max() for a, b in zip(lo, hi)]
        assert np.array_equal(_window_extreme(values, lo, hi, which), want)


def _one_trace(capacity: tuple[int, ...], gap: float) -> Market:
    return Market((MarketTrace(_offer("a"), _offer("a", fm.Market.ON_DEMAND), T0, gap, capacity),), T0)


def test_label_edges_first_tick_a_rise_at_t_the_last_tick_and_a_loss_past_the_end():
    """10-minute ticks, a 1-hour horizon (6 ticks); 14 ticks: 5, 4, 4, 6 x 10, 2."""
    s = build_samples(_one_trace((5, 4, 4) + (6,) * 10 + (2,), 600.0), H)
    y = dict(zip(s.times // 600, s.y))
    assert y[0] == 1  # from tick 0's 5 down to 4 at tick 1
    assert y[3] == 0  # at 6 after a rise from 4: never below 6 in ticks 4-9
    assert y[7] == 1  # the drop to 2 is at tick 13, the trace's last, exactly t + 1 h
    assert y[8] == -1  # the horizon reaches past the end: censored, though the drop at tick 13 is inside it


def test_recent_rate_is_losses_in_the_last_24_hours_per_available_hour():
    """Hourly ticks, 30 of them: down at ticks 1, 4, 26 and 29 (a loss at 1 h, 4 h, 26 h and 29 h), up
    otherwise. Over a 2-hour horizon the probability is 1 - exp(-2 x rate):
    at 2.5 h, 1 loss over 1.5 available hours (ticks 0 and 2, half of tick 2): rate 1 / 1.5;
    at 28 h, the window (4 h, 28 h] leaves out the loss at 4 h, not tick 4 (down): 1 loss (26 h) over
    24 - 1 (tick 4) - 1 (tick 26) = 22 hours;
    at 28.5 h, the window is 4.5 h-28.5 h: 1 loss (26 h) over 24 - 0.5 (tick 4) - 1 (tick 26) = 22.5 hours;
    at 29.5 h, the window 5.5 h-29.5 h holds 2 losses (26 h, 29 h) over 24 - 1 - 0.5 (tick 29) = 22.5 hours."""
    from forecasting.interruption import MarketIndex

    capacity = (1, 0, 1, 1, 0) + (1,) * 21 + (0, 1, 1, 0)
    index = MarketIndex(_one_trace(capacity, 3600.0))
    got = index.recent_rate(np.array([2.5, 28, 28.5, 29.5]) * 3600, 2 * 3600.0)
    assert got[0] == pytest.approx([1 - np.exp(-2 / 1.5), 1 - np.exp(-2 / 22), 1 - np.exp(-2 / 22.5),
                                    1 - np.exp(-2 * 2 / 22.5)])


def test_split_time_is_the_fraction_of_the_period_strictly_inside_it():
    m = _one_trace((1,) * 24, 600.0)  # 4 hours
    assert split_time(m, 0.5) == 2 * 3600.0
    for fraction in (0.0, 1.0):
        with pytest.raises(ValueError, match="train fraction must be between 0 and 1"):
            split_time(m, fraction)


def test_training_mask_keeps_samples_with_capacity_and_a_label_whose_hour_ends_by_the_split():
    """Split at 2 h, a 1-hour horizon: samples up to 1 h (the hour ending at the split exactly is kept).
    A: 4 hours of 10-minute ticks, no capacity at tick 3 (30 minutes): its samples at 0-20 and 40-60
    minutes. B: 1.5 hours with capacity: from 30 minutes on its hour reaches its end (no label), so 0-20."""
    trace_a = MarketTrace(_offer("a"), _offer("a", fm.Market.ON_DEMAND), T0, 600.0, (1, 1, 1, 0) + (1,) * 20)
    trace_b = MarketTrace(_offer("b"), _offer("b", fm.Market.ON_DEMAND), T0, 600.0, (1,) * 9)
    s = build_samples(Market((trace_a, trace_b), T0), H)
    m = training_mask(s, 2 * 3600.0, H)
    assert sorted(zip(s.offer_index[m].tolist(), (s.times[m] / 60).tolist())) == [
        (0, 0), (0, 10), (0, 20), (0, 40), (0, 50), (0, 60), (1, 0), (1, 10), (1, 20)]


def test_scores_auc_and_brier_hand_computed():
    from forecasting.interruption import scores

    # AUC: positives 0.4 and 0.8 against negatives 0.1 and 0.6 win 3 of 4 pairs;
    # Brier: (0.1^2 + 0.6^2 + 0.6^2 + 0.2^2) / 4 = 0.77 / 4
    assert scores(np.array([0, 0, 1, 1]), np.array([0.1, 0.6, 0.4, 0.8])) == {"auc": 0.75, "brier": 0.1925}
    # one positive (0.4) wins 2 of 3 pairs; Brier (0.01 + 0.25 + 0.09 + 0.36) / 4
    assert scores(np.array([0, 0, 0, 1]), np.array([0.1, 0.5, 0.3, 0.4])) == {"auc": 0.666667, "brier": 0.1775}
    # one class: no AUC, and scikit-learn is not asked for one (it warns)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        no_loss = scores(np.array([0, 0, 0]), np.array([0.1, 0.2, 0.3]))
        all_lost = scores(np.array([1, 1]), np.array([0.2, 0.9]))
    assert np.isnan(no_loss["auc"]) and no_loss["brier"] == pytest.approx((0.01 + 0.04 + 0.09) / 3, abs=1e-6)
    assert np.isnan(all_lost["auc"]) and all_lost["brier"] == pytest.approx((0.64 + 0.01) / 2)


def test_evaluate_counts_the_samples_after_the_split_and_scores_both_baselines():
    """4 hours of 10-minute ticks, split at 2 h (tick 12): up except tick 14 (a loss at 8400 s). The samples
    are ticks 12, 13 (positive: the loss is within the hour), 15, 16, 17 (negative), not 14 (no capacity)
    nor 18 on (the hour reaches the end). The model (a classifier fitted on 0, 1) says 0.5 everywhere.
    recent_rate: 0 before the loss; then 1 loss over the available hours since the start:
    8400 s at tick 15, 9000 s at 16, 9600 s at 17 (1 - exp(-3600 / those))."""
    from sklearn.dummy import DummyClassifier

    m = _one_trace((1,) * 14 + (0,) + (1,) * 9, 600.0)
    model = InterruptionModel(DummyClassifier(strategy="prior").fit([[0], [0]], [0, 1]), 60,
                              {"train_fraction": 0.5, "base_rate": 0.25})
    r = evaluate(model, [m])
    assert (r["samples"], r["positives"]) == (5, 2)
    assert r["auc"] == 0.5 and r["brier"] == 0.25  # (2 x 0.5^2 + 3 x 0.5^2) / 5
    assert r["baselines"]["base_rate"] == {"auc": 0.5, "brier": 0.2625}  # (2 x 0.75^2 + 3 x 0.25^2) / 5
    # recent: 0, 0, 0.348561, 0.329680, 0.312711: both positives below every negative (AUC 0);
    # Brier (1 + 1 + 0.348561^2 + 0.329680^2 + 0.312711^2) / 5
    assert r["baselines"]["recent_rate"] == {"auc": 0.0, "brier": 0.465594}
    with pytest.raises(ValueError, match="no evaluation samples"):
        evaluate(model, [_one_trace((1,) * 6, 600.0)])  # 1 hour: no sample's hour ends inside it


def _steps(gap: float, hours: float, changes: tuple[tuple[float, float], ...]) -> tuple[float, ...]:
    """Values of the ticks of ``gap`` seconds over ``hours``: tick i takes the value of the last change
    ``(from_hour, value)`` at or before its start (the changes fall on both test gaps' ticks)."""
    n = round(hours * 3600 / gap)
    return tuple(next(v for h, v in reversed(changes) if h * 3600 <= i * gap) for i in range(n))


_OWN = ("avail_1h", "avail_6h", "avail_24h", "capacity_rel_24h", "hours_since_loss", "hours_available",
        "losses_1h", "losses_6h", "losses_24h")


@pytest.mark.parametrize("gap", [600.0, 900.0])
@pytest.mark.parametrize("lead_h", [0.0, 2.0])
def test_an_offers_own_features_hand_computed_in_hours_whatever_the_tick(gap, lead_h):
    """One 100-hour trace, 10- or 15-minute ticks, starting at the market's start or 2 hours after it
    (times below are hours since the trace's start). Capacity 3 to 1 h, 1 to 1.5 h, 2 to 20 h, 0 to
    21 h, 2 to 25 h, 1 to 25.5 h, then 2: losses at 1 h, 20 h and 25 h (the rises are not losses).
    Windows are (t - w, t], clipped to the trace; the peak is over the ticks covering [t - 24 h, t]."""
    from forecasting.interruption import MarketIndex

    cap = _steps(gap, 100, ((0, 3), (1, 1), (1.5, 2), (20, 0), (21, 2), (25, 1), (25.5, 2)))
    trace = MarketTrace(_offer("a"), _offer("a", fm.Market.ON_DEMAND), T0 + timedelta(hours=lead_h), gap, cap)
    want = {  # hours since the trace's start: avail 1/6/24 h, capacity/peak, since loss, available, losses 1/6/24 h
        -1: (0, 0, 0, 0, 72, 0, 0, 0, 0),  # before the trace
        -0.125: (0, 0, 0, 0, 72, 0, 0, 0, 0),  # in the tick before the first
        0.125: (1, 1, 1, 1, 72, 0.125, 0, 0, 0),  # in the first tick: windows clipped to the trace; no loss yet
        0.5: (1, 1, 1, 1, 72, 0.5, 0, 0, 0),
        1.25: (1, 1, 1, 1 / 3, 0.25, 1.25, 1, 1, 1),  # down to 1 is still available
        20.5: (0.5, 5.5 / 6, 20 / 20.5, 0, 0.5, 0, 1, 1, 2),
        24.75: (1, 5 / 6, 23 / 24, 2 / 3, 4.75, 3.75, 0, 1, 2),  # the 3 of 0.75 h is in the peak's window
        25 - 10 / 3600: (1, 5 / 6, 23 / 24, 2 / 3, 5 - 10 / 3600, 4 - 10 / 3600, 0, 1, 2),  # 1 h: 10 s inside the day
        25: (1, 5 / 6, 23 / 24, 1 / 2, 0, 4, 1, 2, 2),  # the loss at t counts, the one at t - 24 h not
        96.75: (1, 1, 1, 1, 71.75, 72, 0, 0, 0),  # hours available capped at 72
        97.25: (1, 1, 1, 1, 72, 72, 0, 0, 0),  # and hours since the loss
        100: (1, 1, 1, 0, 72, 0, 0, 0, 0),  # the trace's end: no capacity from it on
        100.5: (0.5, 5.5 / 6, 23.5 / 24, 0, 72, 0, 0, 0, 0),  # the time past the end counts as without capacity
    }
    X = MarketIndex(Market((trace,), T0)).features(np.array([(r + lead_h) * 3600 for r in want]))[0]
    col = [FEATURES.index(name) for name in _OWN]
    for row, (r, values) in zip(X, want.items()):
        assert row[col] == pytest.approx(values, abs=1e-12), r


def _one_node(zone: str, it: fm.InstanceType, gap: float, down: tuple[tuple[float, float], ...],
              start_h: float = 0.0) -> MarketTrace:
    """A 12-hour 1-node trace from T0 + start_h, down in each (from, to) hour span (absolute hours)."""
    changes = ((start_h, 1),) + tuple(p for a, b in down for p in ((a, 0), (b, 1)))
    cap = _steps(gap, 12 - start_h, tuple((h - start_h, v) for h, v in changes))
    return MarketTrace(fm.Offer(it, "us-east-1", zone, fm.Market.SPOT, 0.5),
                       fm.Offer(it, "us-east-1", zone, fm.Market.ON_DEMAND, 1.5), T0 + timedelta(hours=start_h), gap,
                       cap)


def test_cross_offer_losses_hand_computed_at_ten_hours():
    """Four offers with their own ticks: two types (p3, g4dn) in two zones (a, b); b's p3 trace starts
    an hour late. Losses (hours) and their counts in (9 h, 10 h] and (4 h, 10 h]:
    p3/a (10 min): 3, 5, 9.5 -> 1, 2;  p3/b (15 min): 4, 4.5, 9.5, 10 -> 2, 3 (4 h is t - 6 h: out);
    g4dn/a (30 min): 5, 6, 7, 8 -> 0, 4;  g4dn/b (5 min): 5, 6, 9h20, 9h40, 10 -> 3, 5.
    Others in the zone, the same type in the other zone, every other offer, each for 1 and 6 hours."""
    from forecasting.interruption import MarketIndex

    p3 = fm.InstanceType("aws", "p3.2xlarge", 8, 61.0, "V100-16GB", 1, 16.0)
    g4 = fm.InstanceType("aws", "g4dn.xlarge", 4, 16.0, "T4", 1, 16.0)
    m = Market((
        _one_node("a", p3, 600.0, ((3, 3.5), (5, 5.5), (9.5, 10.5))),
        _one_node("b", p3, 900.0, ((4, 4.25), (4.5, 5), (9.5, 9.75), (10, 11)), start_h=1),
        _one_node("a", g4, 1800.0, ((5, 5.5), (6, 6.5), (7, 7.5), (8, 8.5))),
        _one_node("b", g4, 300.0, ((5, 5.5), (6, 6.5), (28 / 3, 9.5), (29 / 3, 59 / 6), (10, 10 + 1 / 6))),
    ), T0)
    names = ("losses_1h", "losses_6h", "zone_other_losses_1h", "zone_other_losses_6h", "type_other_losses_1h",
             "type_other_losses_6h", "market_other_losses_1h", "market_other_losses_6h")
    X = MarketIndex(m).features(np.array([10 * 3600.0]))[:, 0, [FEATURES.index(n) for n in names]]
    assert X.tolist() == [
        [1, 2, 0, 4, 2, 3, 2 + 0 + 3, 3 + 4 + 5],  # p3/a: g4dn/a; p3/b; the other three
        [2, 3, 3, 5, 1, 2, 1 + 0 + 3, 2 + 4 + 5],  # p3/b: g4dn/b; p3/a
        [0, 4, 1, 2, 3, 5, 1 + 2 + 3, 2 + 3 + 5],  # g4dn/a: p3/a; g4dn/b
        [3, 5, 2, 3, 0, 4, 1 + 2 + 0, 2 + 3 + 4],  # g4dn/b: p3/b; g4dn/a
    ]


@pytest.mark.parametrize("gap", [600.0, 900.0])
@pytest.mark.parametrize("lead_h", [0.0, 2.0])
def test_price_ratio_and_its_six_hour_change_hand_computed(gap, lead_h):
    """Spot 0.6 to 2 h, 1.2 to 8 h, then 2.1 until the trace ends at 12 h (hours since the trace's start),
    on-demand 3.0: ratios 0.2, 0.4, 0.7. Before the trace the first price holds, after it the last.
    A trace without prices has its offer's price throughout (0.9 / 3.0)."""
    from forecasting.interruption import MarketIndex

    it = fm.InstanceType("aws", "p3.2xlarge", 8, 61.0, "V100-16GB", 1, 16.0)
    start = T0 + timedelta(hours=lead_h)

    def trace(zone, spot, prices):
        return MarketTrace(fm.Offer(it, "us-east-1", zone, fm.Market.SPOT, spot),
                           fm.Offer(it, "us-east-1", zone, fm.Market.ON_DEMAND, 3.0), start, gap,
                           (1,) * round(12 * 3600 / gap), prices)

    priced = trace("a", 0.6, _steps(gap, 12, ((0, 0.6), (2, 1.2), (8, 2.1))))
    want = {-0.5: (0.2, 0.0), 1: (0.2, 0.0), 7: (0.4, 0.2), 8 - 3 / 3600: (0.4, 0.2), 8: (0.7, 0.3), 13: (0.7, 0.3)}
    X = MarketIndex(Market((priced, trace("b", 0.9, None)), T0)).features(
        np.array([(r + lead_h) * 3600 for r in want]))
    cols = [FEATURES.index("price_ratio"), FEATURES.index("price_ratio_change_6h")]
    for row, (r, values) in zip(X[0], want.items()):
        assert row[cols] == pytest.approx(values, abs=1e-12), r
    assert X[1][:, cols] == pytest.approx(np.array([[0.3, 0.0]] * len(want)), abs=1e-12)


def test_hour_of_day_and_day_of_week_are_those_of_the_market_clock():
    """The market starts on Sunday 2023-02-19 at 21:00 UTC; its trace an hour later (the clock is the
    market's, not the trace's)."""
    start = datetime(2023, 2, 19, 21, tzinfo=timezone.utc)
    from forecasting.interruption import MarketIndex

    trace = MarketTrace(_offer("a"), _offer("a", fm.Market.ON_DEMAND), start + timedelta(hours=1), 600.0, (1,) * 36)
    t = np.array([0, 2 * 3600 + 45 * 60, 3 * 3600 + 15 * 60, 27 * 3600 + 50 * 60])
    X = MarketIndex(Market((trace,), start)).features(t)[0]
    assert X[:, FEATURES.index("hour_of_day")].tolist() == [21.0, 23.75, 0.25, 0 + 50 / 60]
    assert X[:, FEATURES.index("day_of_week")].tolist() == [6.0, 6.0, 0.0, 1.0]


@pytest.mark.parametrize("gap", [600.0, 900.0])
@pytest.mark.parametrize("lead_h", [0.0, 2.0])
def test_capacity_hours_available_and_price_at_a_traces_first_and_last_tick_and_outside_it(gap, lead_h):
    """Three traces from 2 hours after the market's start or at it, on-demand 0.75 USD/h. One of three
    ticks, capacity 1, 2, 3 at spot prices 0.15, 0.3, 0.45; two of four, capacity 3, 0, 0, 2 and 0, 0, 0, 1
    at 0.225 throughout. Times in ticks: half a tick before the traces, in the first tick, in the third, at
    the first trace's end (the others' last tick) and half a tick after. Capacity relative to the
    24-hour peak is 0 outside a trace; hours available count from the start of a stretch with
    capacity; before a trace its first price holds, after it its last."""
    from forecasting.interruption import MarketIndex

    it = fm.InstanceType("aws", "p3.2xlarge", 8, 61.0, "V100-16GB", 1, 16.0)

    def trace(zone, capacity, spot, prices=None, tick=gap):
        return MarketTrace(fm.Offer(it, "us-east-1", zone, fm.Market.SPOT, spot),
                           fm.Offer(it, "us-east-1", zone, fm.Market.ON_DEMAND, 0.75),
                           T0 + timedelta(hours=lead_h), tick, capacity, prices)

    index = MarketIndex(Market((trace("a", (1, 2, 3), 0.15, (0.15, 0.3, 0.45)), trace("b", (3, 0, 0, 2), 0.225),
                                trace("c", (0, 0, 0, 1), 0.225)), T0))
    X = index.features(lead_h * 3600 + np.array([-0.5, 0.5, 2.5, 3.0, 3.5]) * gap)
    rel, available, ratio = (FEATURES.index(f) for f in ("capacity_rel_24h", "hours_available", "price_ratio"))
    assert X[0, :, rel].tolist() == [0, 1, 1, 0, 0]  # exactly 1 at the peak
    assert X[1, :, rel] == pytest.approx([0, 1, 0, 2 / 3, 2 / 3])  # the peak of 3 is tick 0's
    assert X[2, :, rel] == pytest.approx([0, 0, 0, 1, 1])  # no capacity in the last 24 hours: 0
    assert X[0, :, available] * 3600 / gap == pytest.approx([0, 0.5, 2.5, 0, 0])
    assert X[1, :, available] * 3600 / gap == pytest.approx([0, 0.5, 0, 0, 0.5])
    assert X[0, :, ratio] == pytest.approx([0.2, 0.2, 0.6, 0.6, 0.6])
    assert X[1, :, ratio] == pytest.approx([0.3] * 5)
    # half a second into the traces, every window holds that half second, with capacity
    first = index.features(np.array([lead_h * 3600 + 0.5]))[0, 0]
    assert [first[FEATURES.index(f"avail_{w}h")] for w in (1, 6, 24)] == [1, 1, 1]
    # ticks of 2 days: at 72 hours the 24-hour window holds the second tick only
    days = MarketIndex(Market((trace("a", (2, 1), 0.15, tick=2 * 86400.0),), T0))
    assert days.features(np.array([lead_h * 3600 + 72 * 3600]))[0, 0, rel] == 1.0
