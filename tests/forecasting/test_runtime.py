"""The daemon's forecaster: models -> Forecast numbers from the store, and retraining from what it recorded."""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest

from fleetctl.controller.forecast import build_forecast
from fleetctl.store import Store
from forecasting.interruption import InterruptionModel, ModelError
from forecasting.runtime import ModelForecaster
from tests.forecasting.test_interruption import T0, synthetic


def _replay(store: Store, market, until) -> None:
    """What a controller would have recorded: the spot offers listed at each 5-minute tick."""
    t = market.start_utc
    while t < until:
        store.record_offers([o for o in market.offers_at(t)], t)
        t += timedelta(minutes=5)


def _recorded(tmp_path):  # noqa: ANN001, ANN202
    """A synthetic market, a model trained on it in tmp_path/models, and a store that recorded 9 days of it."""
    market = synthetic(days=10, seed=7, zones=("us-east-1a", "us-east-1b", "us-east-1c"))
    InterruptionModel.train([market]).save(tmp_path / "models" / "interruption")
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    now = T0 + timedelta(days=9, minutes=3)
    _replay(store, market, now)
    return market, store, now


def test_forecast_from_recorded_history_and_retraining(tmp_path):
    market, store, now = _recorded(tmp_path)
    try:
        forecaster = ModelForecaster(tmp_path / "models")
        risks = forecaster.interruption(store, now)
        assert {r.offer_key for r in risks} == {t.offer_spot.key for t in market.traces}
        assert all(0.0 <= r.interruption_probability <= 1.0 and r.horizon_minutes == 60 for r in risks)
        fc = build_forecast(store, now, forecaster)
        assert fc.interruption == risks and fc.demand == ()
        before = (tmp_path / "models" / "interruption" / "model.json").read_text()
        assert forecaster.retrain(store, now)
        after = (tmp_path / "models" / "interruption" / "model.json").read_text()
        assert before != after  # refitted on the recorded market and replaced
        assert ModelForecaster(tmp_path / "models").interruption(store, now)
        # too little history: nothing forecast, nothing retrained
        empty = Store(f"sqlite:///{tmp_path / 'empty.db'}")
        try:
            assert forecaster.interruption(empty, now) == ()
            assert forecaster.retrain(empty, now) is False
        finally:
            empty.close()
    finally:
        store.close()


def test_the_forecaster_reads_and_retrains_the_same_after_the_finished_history_is_pruned(tmp_path):
    """Reclaimed nodes gone before the cut, whose handled notices the per-pass
    retention still keeps: pruning the finished history keeps them, so the
    recorded reclaims (read through each node's offer), the forecast and a
    retrain are what they were; the other finished history goes."""
    from fleetctl.controller.forecast import recent_reclaims
    from fleetctl.model import InterruptionEvent, InterruptionKind, JobState, NodeState
    from tests.builders import job, node

    market, store, now = _recorded(tmp_path)
    try:
        for i, trace in enumerate(market.traces):
            at = now - timedelta(hours=36 - i)
            store.put_node(node(f"reclaimed-{i}", of=trace.offer_spot, state=NodeState.GONE), at)
            store.add_interruption(InterruptionEvent(f"notice-{i}", "aws", f"reclaimed-{i}",
                                                     InterruptionKind.RECLAIM_WARNING, at))
            store.mark_interruption_handled(f"notice-{i}", at)
        store.put_node(node("retired", of=market.traces[0].offer_spot, state=NodeState.GONE), now - timedelta(days=5))
        store.add_jobs([job("done", state=JobState.SUCCEEDED)], now - timedelta(days=5))
        forecaster = ModelForecaster(tmp_path / "models")
        reclaims, risks = recent_reclaims(store), forecaster.interruption(store, now)
        assert len(reclaims) == len(market.traces)

        deleted = store.prune_finished(now - timedelta(days=1))

        assert (deleted["nodes"], deleted["jobs"]) == (1, 1)
        assert recent_reclaims(store) == reclaims
        assert forecaster.interruption(store, now) == risks
        assert forecaster.retrain(store, now)
    finally:
        store.close()


def test_unusable_model_directories_are_refused(tmp_path):
    with pytest.raises(ModelError, match="no such model directory"):
        ModelForecaster(tmp_path / "nope")
    (tmp_path / "m").mkdir()
    with pytest.raises(ModelError, match="neither interruption/ nor demand/"):
        ModelForecaster(tmp_path / "m")


def test_the_daemon_puts_back_a_model_a_killed_save_left_beside_its_directory(tmp_path):
    """A save killed between its two renames left the interruption model only in
    models/.interruption-old-*/model: the daemon started without it ("neither
    interruption/ nor demand/ holds a model")."""
    InterruptionModel.train([synthetic(days=6, seed=7)]).save(tmp_path / "models" / "interruption")
    old = Path(tempfile.mkdtemp(prefix=".interruption-old-", dir=tmp_path / "models"))
    (tmp_path / "models" / "interruption").rename(old / "model")  # the first rename; killed before the second
    with pytest.warns(UserWarning, match="a save was interrupted"):
        forecaster = ModelForecaster(tmp_path / "models")
    assert forecaster.interruption_model is not None and forecaster.interruption_model.horizon_minutes == 60
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["interruption"]


def test_a_model_of_another_horizon_than_an_hour_is_refused(tmp_path):
    """The planner reads p per hour: a 2-hour model's probability of a loss
    within 2 hours was used as one per hour (so was a 24-hour model's)."""
    model = InterruptionModel.train([synthetic(days=6, seed=7)], horizon=timedelta(hours=2))
    model.save(tmp_path / "models" / "interruption")
    with pytest.raises(ModelError, match=r"interruption: the model's horizon is 2h and the planner reads a "
                                         r"probability per hour; train a model for planning with --horizon 1h"):
        ModelForecaster(tmp_path / "models")
    assert InterruptionModel.load(tmp_path / "models" / "interruption").horizon_minutes == 120  # evaluate reads it


def test_a_demand_model_through_the_daemons_forecast_path_buys_bounded_headroom(tmp_path):
    """Train a demand model, record demand as the controller does each pass, and
    run the pass the daemon runs (build_forecast, then tick): the planner buys
    ahead of the forecast, at most max_headroom_gpus, with reason forecast_headroom."""
    from fleetctl.controller.reconcile import tick
    from fleetctl.controller.runtime import SimRuntime
    from fleetctl.model import Reason
    from forecasting.demand import DemandModel
    from providers.sim import SimProvider
    from tests.builders import offer, policy
    from tests.forecasting.test_demand import FAST, synthetic

    DemandModel.train([synthetic(days=3, seed=1), synthetic(days=3, seed=2, size=16)], horizons_minutes=(60,),
                      candidates=FAST).save(tmp_path / "models" / "demand")
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        now = T0 + timedelta(days=3)
        t = now - timedelta(hours=12)
        while t < now:  # the queue held 6 V100-32GB GPUs' worth of work all morning
            store.record("demand", t, "", gpus={"V100-32GB": 6})
            t += timedelta(minutes=5)
        forecaster = ModelForecaster(tmp_path / "models")
        fc = build_forecast(store, now, forecaster)
        [demand] = fc.demand
        assert demand.gpu_model == "V100-32GB" and demand.horizon_minutes == 60 and demand.gpus_p90 >= 5
        v100 = offer("v100", gpus=1, price=2.0, model="V100-32GB", zone="z1")
        provider = SimProvider(store, seed=1, launch_delay_seconds=0, offers=(v100,))
        report = tick(store=store, provider=provider, runtime=SimRuntime(), policy=policy(max_headroom_gpus=3),
                      now=now, forecast=fc)
        launches = report.plan.of_kind("launch")
        assert launches and all(a.reason is Reason.FORECAST_HEADROOM for a in launches)
        assert sum(a.count * a.offer.instance_type.gpu_count for a in launches) == 3  # capped by the policy
        without = tick(store=Store(f"sqlite:///{tmp_path / 'other.db'}"), provider=provider, runtime=SimRuntime(),
                       policy=policy(max_headroom_gpus=3), now=now, forecast=None)
        assert not without.plan.of_kind("launch")  # no forecast, no buying ahead
    finally:
        store.close()


def test_the_window_read_gives_the_same_forecast_as_the_whole_change_log(tmp_path):
    """Each pass reads only the last HISTORY of the change log plus every offer's
    state at its start; the market (and so the forecast) is the same as from all rows."""
    from forecasting.interruption import market_from_observations
    from forecasting.runtime import GRID_SECONDS, HISTORY
    from fleetctl.controller.forecast import recent_reclaims

    market = synthetic(days=6, seed=3, zones=("us-east-1a", "us-east-1b"))
    InterruptionModel.train([market]).save(tmp_path / "models" / "interruption")
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        now = T0 + timedelta(days=5, minutes=7)
        _replay(store, market, now)
        start = now - HISTORY
        window = store.offer_observations(since=start, until=now, with_state_at_since=True)
        everything = [r for r in store.offer_observations() if r["observed_at_utc"] <= now]
        assert len(window) < len(everything)
        end = now + timedelta(seconds=GRID_SECONDS)
        a = market_from_observations(window, start, end, GRID_SECONDS, reclaims=recent_reclaims(store))
        b = market_from_observations(everything, start, end, GRID_SECONDS, reclaims=recent_reclaims(store))
        assert [(t.offer_spot.key, list(t.capacity)) for t in a.traces] == \
            [(t.offer_spot.key, list(t.capacity)) for t in b.traces]
        model = InterruptionModel.load(tmp_path / "models" / "interruption")
        assert model.predict(a, now) == model.predict(b, now)
        assert ModelForecaster(tmp_path / "models").interruption(store, now)
    finally:
        store.close()


def test_the_daemon_retrains_without_holding_up_reclaim_handling(tmp_path):
    """While a (slow) refit runs, the loop's lock stays free for ticks and notices."""
    import threading

    from fleetctl.controller.loop import Daemon, LoopContext
    from fleetctl.controller.runtime import SimRuntime
    from fleetctl.metrics import FleetMetrics
    from providers.sim import SimProvider
    from tests.builders import policy

    started, release, seen = threading.Event(), threading.Event(), []

    class SlowForecaster:
        def interruption(self, store, now):  # noqa: ANN001, ANN201
            return ()

        def demand(self, store, now):  # noqa: ANN001, ANN201
            return ()

        models = ("interruption", "demand")

        def retrain(self, store, now, model):  # noqa: ANN001, ANN201
            seen.append((store, model))
            if model == "demand":
                raise RuntimeError("a failed demand refit")  # counted; the other model is refitted still
            started.set()
            assert release.wait(10)
            return True

    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        ctx = LoopContext(store, SimProvider(store), SimRuntime(), policy(), FleetMetrics(), SlowForecaster())
        daemon = Daemon(ctx, retrain_seconds=3600)
        worker = threading.Thread(target=daemon.retrain)
        worker.start()
        assert started.wait(10)
        assert daemon.lock.acquire(timeout=1)  # free while the refit runs
        daemon.lock.release()
        daemon.interruptions()  # a notice pass runs meanwhile
        release.set()
        worker.join(10)
        assert [m for _, m in seen] == ["interruption", "demand"]
        assert seen[0][0] is not store  # its own connection to the same store
        assert ctx.metrics.tick_errors._value.get() == 1  # the failed demand refit
        retrains = {(smp.labels["model"], smp.labels["outcome"]): smp.value for m in ctx.metrics.retrains.collect()
                    for smp in m.samples if smp.name.endswith("_total")}
        assert retrains == {("interruption", "adopted"): 1.0, ("demand", "failed"): 1.0}
        last = {smp.labels["model"]: smp.value for m in ctx.metrics.last_retrain.collect() for smp in m.samples}
        assert last["interruption"] > 0 and last["demand"] == 0  # set at start: operators can alert on the age
    finally:
        release.set()
        store.close()


def test_a_gpu_model_whose_jobs_all_finished_is_forecast_from_zero_not_its_last_level(tmp_path):
    """A pass records every model with active jobs; a model missing from a later row had none."""
    seen = []

    class Capture:
        def predict(self, series, now):  # noqa: ANN001, ANN201
            seen.append(series)
            return ()

    forecaster = object.__new__(ModelForecaster)
    forecaster.demand_model = Capture()
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        store.record("demand", T0, "", gpus={"V100-16GB": 4, "any": 2})
        assert forecaster.demand(store, T0 + timedelta(minutes=59)) == () and not seen  # under an hour recorded
        store.record("demand", T0 + timedelta(minutes=60), "", gpus={"V100-16GB": 4})
        store.record("demand", T0 + timedelta(minutes=61), "", gpus={})  # its job completed
        forecaster.demand(store, T0 + timedelta(minutes=62))
    finally:
        store.close()
    (series,) = seen
    assert series["gpu_model"].tolist() == ["V100-16GB"] * 3 and series["gpus"].tolist() == [4, 4, 0]


def test_a_retrain_keeps_the_current_model_unless_the_refit_scores_better_on_what_it_did_not_see(tmp_path,
                                                                                                   monkeypatch):
    market, store, now = _recorded(tmp_path)
    try:
        forecaster = ModelForecaster(tmp_path / "models")
        before = (tmp_path / "models" / "interruption" / "model.json").read_text()

        class Worse:  # a refit that calls every offer certain to be reclaimed
            metadata = {"samples": 1}

            def probabilities(self, X):  # noqa: ANN001, ANN201
                import numpy as np

                return np.ones(len(X))

        real_train = InterruptionModel.train
        monkeypatch.setattr(InterruptionModel, "train", classmethod(lambda cls, *a, **kw: Worse()))
        assert forecaster.retrain(store, now) is False
        assert (tmp_path / "models" / "interruption" / "model.json").read_text() == before
        assert isinstance(forecaster.interruption_model, InterruptionModel)
        monkeypatch.setattr(InterruptionModel, "train", real_train)
        # a directory with a demand model only: no interruption model is created by a retrain
        demand_only = object.__new__(ModelForecaster)
        demand_only.directory, demand_only.interruption_model = tmp_path / "demand-only", None
        assert demand_only.retrain(store, now) is False and not (tmp_path / "demand-only").exists()
    finally:
        store.close()


def _record_demand(store: Store, series, until) -> None:
    """What the passes record: the GPUs demanded per model, here every 5 minutes."""
    import numpy as np

    from tests.forecasting.test_demand import T0 as D0

    t = D0
    while t < until:
        i = int(np.searchsorted(series.times_s, t.timestamp(), side="right")) - 1
        store.record("demand", t, "", gpus={series.gpu_model: int(series.gpus[i])})
        t += timedelta(minutes=5)


def test_the_demand_model_is_refitted_on_recorded_demand_and_adopted_only_if_it_scores_better(tmp_path):
    from forecasting.demand import DemandModel
    from tests.forecasting.test_demand import FAST, T0 as D0, synthetic

    # The model in use was fitted on another cluster (16 GPUs, other noise); this one (64 GPUs) recorded 3 days.
    DemandModel.train([synthetic(days=3, seed=2, size=16)], horizons_minutes=(60,), candidates=FAST) \
        .save(tmp_path / "models" / "demand")
    here = synthetic(days=3, seed=5)
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        forecaster = ModelForecaster(tmp_path / "models", demand_candidates=FAST)
        assert forecaster.models == ("demand",)
        assert forecaster.retrain(store, D0, "demand") is False  # nothing recorded yet
        _record_demand(store, here, D0 + timedelta(days=1))
        assert forecaster.retrain(store, D0 + timedelta(days=1), "demand") is False  # a day: too short
        now = D0 + timedelta(days=3)
        _record_demand(store, here, now)
        before = (tmp_path / "models" / "demand" / "model.json").read_text()
        assert forecaster.retrain(store, now, "demand") is True
        meta = json.loads((tmp_path / "models" / "demand" / "model.json").read_text())
        assert meta != json.loads(before) and meta["horizons_minutes"] == [60]
        assert [(s["source"], s["gpu_model"]) for s in meta["training_series"]] == [("recorded", "V100-32GB")]
        assert meta["training_until_utc"] is None  # adopted, then fitted on the whole window
        reloaded = ModelForecaster(tmp_path / "models").demand_model.metadata
        assert {k: v for k, v in reloaded.items() if k != "digest"} == forecaster.demand_model.metadata
        # Now the model in use has seen all of it: a refit that did not see the last 30% scores worse there.
        after = (tmp_path / "models" / "demand" / "model.json").read_text()
        assert forecaster.retrain(store, now, "demand") is False
        assert (tmp_path / "models" / "demand" / "model.json").read_text() == after
        with pytest.raises(ValueError, match="no model 'price'"):
            forecaster.retrain(store, now, "price")
    finally:
        store.close()


def test_a_stop_during_a_retrain_waits_for_the_model_being_refitted_and_starts_no_other(tmp_path):
    """A scikit-learn fit cannot be cut short: a stop (SIGTERM) asked for while
    a model is refitted lets that refit finish (and keeps it), and the next
    model is not started. The daemon's --help says so (it said the stop comes
    after the current tick, which a retrain, minutes long, outlasts)."""
    from typer.testing import CliRunner

    from fleetctl.cli.main import app
    from fleetctl.controller.loop import Daemon, LoopContext
    from fleetctl.controller.runtime import SimRuntime
    from fleetctl.metrics import FleetMetrics
    from providers.sim import SimProvider
    from tests.builders import policy

    refitted = []

    class StoppedDuringTheFirstRefit:
        models = ("interruption", "demand")

        def retrain(self, store, now, model):  # noqa: ANN001, ANN201
            refitted.append(model)
            daemon.stopped.set()  # SIGTERM arrives while this model is refitted
            return True

    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        metrics = FleetMetrics()
        daemon = Daemon(LoopContext(store, SimProvider(store), SimRuntime(), policy(), metrics,
                                    StoppedDuringTheFirstRefit()), retrain_seconds=3600)
        daemon.retrain()
    finally:
        store.close()
    assert refitted == ["interruption"]
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    retrains = {(s.labels["model"], s.labels["outcome"]): s.value
                for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())
                if f.name == "fleetctl_forecast_retrains" for s in f.samples if s.name.endswith("_total")}
    assert retrains == {("interruption", "adopted"): 1.0}
    shown = CliRunner().invoke(app, ["daemon", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": None})
    assert "first finishes the model it is refitting" in " ".join(shown.output.split())
