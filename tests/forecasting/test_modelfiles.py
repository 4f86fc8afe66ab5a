"""Model directories: saved all at once, bound together by a digest; and the
forecast CLI's answers to output and input it cannot use."""

from __future__ import annotations

import json
import os
import pickle
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from forecasting import modelfiles
from forecasting.modelfiles import ModelError

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "demand"
runner = CliRunner()

META = {"kind": "toy", "format_version": 1, "horizon_minutes": 60, "versions": modelfiles.versions()}


def _load(path: Path):  # noqa: ANN202
    _, meta = modelfiles.read_metadata(path)
    return modelfiles.load_estimator(path, meta, kind="toy", allow_version_mismatch=False)


def test_a_failed_save_keeps_the_previous_model_and_leaves_nothing_behind(tmp_path):
    target = tmp_path / "model"
    modelfiles.save(target, {"weights": [1, 2, 3]}, META)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        modelfiles.save(target, {"weights": lambda x: x}, META)  # cannot be pickled: fails mid-save
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging directory left
    assert _load(target) == {"weights": [1, 2, 3]}
    modelfiles.save(target, {"weights": [4]}, META)  # a model is replaced whole
    assert _load(target) == {"weights": [4]} and sorted(p.name for p in target.iterdir()) == ["model.joblib",
                                                                                              "model.json"]


def _killed_between_the_renames(target: Path, new: dict) -> tuple[Path, Path]:
    """The directory a save killed (SIGKILL, power loss) between its two renames
    leaves: the model moved into ``.NAME-old-*/model``, the new one complete in
    its ``.NAME-new-*`` staging directory, and no ``target``. Made by the same
    steps as ``save``, stopped where the kill stops it."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-new-", dir=target.parent))
    modelfiles.save(target.parent / "elsewhere", new, META)
    for name in modelfiles.MODEL_FILES:
        (target.parent / "elsewhere" / name).rename(staging / name)
    (target.parent / "elsewhere").rmdir()
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}-old-", dir=target.parent))
    target.rename(old / "model")
    return old, staging


def test_a_save_killed_between_its_renames_is_recovered_by_the_next_load(tmp_path):
    """Safe against exceptions and Ctrl-C, not against a kill between the two
    renames: the model was left only in a hidden .NAME-old-* directory, and a
    load (the daemon's, a plan's) found no model."""
    target = tmp_path / "model"
    modelfiles.save(target, {"weights": [1]}, META)
    old, staging = _killed_between_the_renames(target, {"weights": [2]})
    assert not target.exists()
    with pytest.warns(UserWarning, match=rf"{target}: a save was interrupted .* the previous model .*{old.name}.* "
                                         r"is put back"):
        assert _load(target) == {"weights": [1]}  # the previous model: the save never finished
    assert sorted(p.name for p in target.iterdir()) == ["model.joblib", "model.json"]
    assert not old.exists()
    assert staging.exists()  # another process's save may still be writing it: left to saves
    modelfiles.save(target, {"weights": [3]}, META)
    assert _load(target) == {"weights": [3]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # the next save removes what is left


def test_a_save_killed_between_its_renames_is_recovered_by_the_next_save(tmp_path):
    """The next save puts the previous model back first, so its checks (a
    model of another kind is not replaced) see it."""
    target = tmp_path / "model"
    modelfiles.save(target, {"w": 1}, {**META, "kind": "interruption"})
    _killed_between_the_renames(target, {"w": 2})
    with pytest.warns(UserWarning, match="a save was interrupted"), \
            pytest.raises(ModelError, match="holds an interruption model"):
        modelfiles.save(target, {"w": 3}, {**META, "kind": "demand"})
    assert modelfiles.read_metadata(target)[1]["kind"] == "interruption"
    modelfiles.save(target, {"w": 4}, {**META, "kind": "interruption"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_save_removes_a_killed_saves_staging_directory_but_not_one_a_live_save_holds(tmp_path):
    import fcntl

    target = tmp_path / "model"
    live = Path(tempfile.mkdtemp(prefix=".model-new-", dir=tmp_path))
    dead = Path(tempfile.mkdtemp(prefix=".model-new-", dir=tmp_path))
    (tmp_path / ".model-old-x-new-abcdefgh").mkdir()  # model-old-x's, not model's
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a save in another process holds while it writes
        modelfiles.save(target, {"w": 1}, META)
        assert live.exists() and not dead.exists() and (tmp_path / ".model-old-x-new-abcdefgh").exists()
    finally:
        os.close(fd)
    modelfiles.save(target, {"w": 2}, META)
    assert not live.exists() and _load(target) == {"w": 2}


def test_a_directory_with_other_files_is_refused(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "notes.txt").write_text("keep me")
    with pytest.raises(ModelError, match=r"results: holds other files than a model \(notes.txt\)"):
        modelfiles.save(tmp_path / "results", {"w": 1}, META)
    assert [p.name for p in (tmp_path / "results").iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("found, training", [("interruption", "demand"), ("demand", "interruption")])
def test_a_model_of_another_kind_is_refused_not_replaced(tmp_path, found, training):
    """Both kinds save model.json and model.joblib, and only the file names were checked: training a
    demand model into the interruption model's directory printed "replaced the model" and lost it."""
    target = tmp_path / "models"
    modelfiles.save(target, {"w": 1}, {**META, "kind": found})
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    with pytest.raises(ModelError, match=rf"models: holds an? {found} model \(model.json kind '{found}'\), not "
                                         rf"an? {training} model"):
        modelfiles.save(target, {"w": 2}, {**META, "kind": training})
    missing = str(tmp_path / "missing.csv")  # -o is checked first: nothing is read, nothing trained
    refused = _invoke("train", training, "--series" if training == "demand" else "--market", missing,
                      "-o", str(target))
    text = " ".join(refused.output.split())
    assert refused.exit_code == 2 and f"-o {target}: holds a" in text and f"{found} model" in text, text
    assert "missing.csv" not in text
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    modelfiles.save(target, {"w": 3}, {**META, "kind": found})  # the same kind is still replaced
    assert _load(target) == {"w": 3} and modelfiles.read_metadata(target)[1]["kind"] == found


@pytest.mark.parametrize("saved, loaded", [("demand", "interruption"), ("interruption", "demand")])
def test_a_model_of_another_kind_is_named_when_loaded(tmp_path, saved, loaded):
    """`forecast evaluate demand --model models/interruption` said only "not a demand model of format 2"."""
    from forecasting.demand import DemandModel
    from forecasting.interruption import InterruptionModel

    modelfiles.save(tmp_path / "m", {"weights": [1]}, {**META, "kind": saved})
    load = {"demand": DemandModel.load, "interruption": InterruptionModel.load}[loaded]
    a = {"demand": "a demand", "interruption": "an interruption"}
    with pytest.raises(ModelError) as exc:
        load(tmp_path / "m")
    assert str(exc.value) == (f"{tmp_path / 'm' / 'model.json'}: holds {a[saved]} model, not {a[loaded]} model "
                              f"(`fleetctl forecast train {loaded}` saves one)")
    modelfiles.save(tmp_path / "old", {"weights": [1]}, {**META, "kind": loaded, "format_version": 0})
    with pytest.raises(ModelError, match=f"model.json: not {a[loaded]} model of format"):  # the right kind
        load(tmp_path / "old")


def test_a_model_json_that_names_no_kind_is_not_replaced(tmp_path):
    for name, text, words in (("list", "[1]", "records no kind"), ("broken", "{", "cannot be read")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.json").write_text(text)
        with pytest.raises(ModelError, match=f"{name}: holds a model.json that {words}"):
            modelfiles.save(tmp_path / name, {"w": 1}, META)
        assert (tmp_path / name / "model.json").read_text() == text
    modelfiles.save(tmp_path / "new", {"w": 1}, {k: v for k, v in META.items() if k != "kind"})  # no kind: no check


def test_train_refuses_an_output_it_cannot_save_into_before_training(tmp_path, monkeypatch):
    """``-o -`` saved the model into a directory named '-', and an -o under a
    file failed only once training was done; both are refused first now."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    missing = str(tmp_path / "missing.yaml")  # read after -o is checked, so -o's error is the one shown
    for args, words in ((("interruption", "--market", missing, "-o", "-"), "-o -: a model is a directory of files"),
                        (("demand", "--series", missing, "-o", "-"), "-o -: a model is a directory of files"),
                        (("interruption", "--market", missing, "-o", "afile/m"),
                         "-o afile/m: cannot save there: afile is not a directory")):
        refused = _invoke("train", *args)
        assert refused.exit_code == 2 and words in " ".join(refused.output.split()), refused.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    with pytest.raises(ModelError, match="cannot be written to stdout"):
        modelfiles.save("-", {"w": 1}, META)
    report = runner.invoke(app, ["backtest", "--jobs", missing, "--market", missing, "--report", "-"])
    assert report.exit_code == 2 and "--report -: the report is a directory" in report.output, report.output


def test_a_symlink_to_a_directory_is_saved_through_and_kept(tmp_path):
    """The save renamed the link itself away and put a real directory in its
    place; output files are written through a symlink (fleetctl.files)."""
    (tmp_path / "store").mkdir()
    (tmp_path / "link").symlink_to("store")
    assert modelfiles.save(tmp_path / "link", {"w": 1}, META) == tmp_path / "store"
    assert (tmp_path / "link").is_symlink() and (tmp_path / "link").readlink() == Path("store")
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["model.joblib", "model.json"]
    modelfiles.save(tmp_path / "link", {"w": 2}, META)  # replaced through the link
    assert (tmp_path / "link").is_symlink() and _load(tmp_path / "store") == {"w": 2}
    (tmp_path / "new-link").symlink_to("new")  # dangling: the model is saved at its target
    modelfiles.save(tmp_path / "new-link", {"w": 3}, META)
    assert (tmp_path / "new-link").is_symlink() and _load(tmp_path / "new") == {"w": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "new", "new-link", "store"]
    (tmp_path / "store" / "notes.txt").write_text("keep me")
    with pytest.raises(ModelError, match=r"store: holds other files than a model \(notes.txt\)"):
        modelfiles.check_target(tmp_path / "link")
    (tmp_path / "loop").symlink_to("loop")
    # The same message on every Python (resolve() raised RuntimeError for a loop before 3.13,
    # and returns it unresolved since): fleetctl.files.follow_symlink.
    with pytest.raises(ModelError, match=r"loop: cannot follow the symlink \(Too many levels of symbolic links\)$"):
        modelfiles.check_target(tmp_path / "loop")


def test_the_current_directory_its_ancestors_and_mount_points_are_refused_before_training(tmp_path, monkeypatch):
    """'-o .' passed the check, trained, then failed to rename the current
    directory ("Device or resource busy")."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    for target in (".", "..", str(tmp_path), "/", "../work/."):
        with pytest.raises(ModelError, match="cannot save there: it is the current directory or one above it"):
            modelfiles.check_target(target)
    (tmp_path / "here").symlink_to("work")
    with pytest.raises(ModelError, match="cannot save there: it is the current directory or one above it"):
        modelfiles.check_target(tmp_path / "here")
    assert modelfiles.check_target("sub") == Path("sub")  # a subdirectory is fine
    missing = str(tmp_path / "missing.csv")  # read after -o is checked, so -o's error is the one shown
    refused = _invoke("train", "demand", "--series", missing, "--horizons", "1h", "-o", ".")
    assert refused.exit_code == 2, refused.output
    assert "-o .: cannot save there: it is the current directory or one above it" in " ".join(refused.output.split())
    assert list((tmp_path / "work").iterdir()) == []
    if os.path.ismount("/proc") and os.path.isdir("/proc"):
        with pytest.raises(ModelError, match="/proc: cannot save there: it is a mount point"):
            modelfiles.check_target("/proc")


def test_the_digest_binds_the_metadata_to_the_estimator(tmp_path):
    modelfiles.save(tmp_path / "a", {"w": 1}, META)
    modelfiles.save(tmp_path / "b", {"w": 2}, {**META, "horizon_minutes": 7})
    (tmp_path / "a" / "model.joblib").write_bytes((tmp_path / "b" / "model.joblib").read_bytes())
    with pytest.raises(ModelError, match="do not belong together"):  # an estimator copied from another model
        _load(tmp_path / "a")
    meta = json.loads((tmp_path / "b" / "model.json").read_text())
    (tmp_path / "b" / "model.json").write_text(json.dumps({**meta, "horizon_minutes": 60}))
    with pytest.raises(ModelError, match="do not belong together"):  # metadata edited by hand
        _load(tmp_path / "b")
    (tmp_path / "b" / "model.json").write_text(json.dumps({**meta, "versions": {"scikit-learn": "0.0.1"}}))
    with pytest.raises(ModelError, match="scikit-learn 0.0.1"):  # the versions only feed the version check
        _load(tmp_path / "b")


def _invoke(*args: str):  # noqa: ANN202
    return runner.invoke(app, ["forecast", *args])


def test_forecast_cli_refuses_unusable_output_and_input(tmp_path):
    market = REPO / "examples" / "markets" / "aws-v100-16node.yaml"
    vc3sl, vcmod = EXAMPLES / "helios-earth-vc3sl.csv", EXAMPLES / "helios-earth-vcMod.csv"
    odd = _invoke("train", "interruption", "--market", str(market), "--horizon", "7.5m", "-o", str(tmp_path / "m"))
    assert odd.exit_code == 2 and "a horizon must be a whole number of minutes" in odd.output
    long = _invoke("train", "interruption", "--market", str(market), "--horizon", "30d", "-o", str(tmp_path / "m"))
    assert long.exit_code == 2 and "at most 24h" in long.output
    twice = _invoke("train", "demand", "--series", str(vc3sl), "--series", str(vc3sl), "-o", str(tmp_path / "d"))
    assert twice.exit_code == 2 and "--series given more than once" in twice.output
    copy = tmp_path / "copy.csv"
    copy.write_bytes(vc3sl.read_bytes())
    same = _invoke("train", "demand", "--series", str(vc3sl), "--series", str(copy), "-o", str(tmp_path / "d"))
    assert same.exit_code == 2 and "are the same series" in same.output
    (tmp_path / "loop.yaml").symlink_to("loop.yaml")  # a traceback (RuntimeError) before Python 3.13
    loop = _invoke("train", "interruption", "--market", str(tmp_path / "loop.yaml"), "-o", str(tmp_path / "m"))
    assert loop.exit_code == 2 and "cannot read the file: Too many levels of symbolic links" in loop.output
    assert not (tmp_path / "m").exists() and not (tmp_path / "d").exists()

    trained = _invoke("train", "demand", "--series", str(vc3sl), "--horizons", "1h", "--until",
                      "2020-05-21T00:00:00Z", "-o", str(tmp_path / "d"))
    assert trained.exit_code == 0, trained.output
    again = _invoke("train", "demand", "--series", str(vc3sl), "--horizons", "1h", "--until",
                    "2020-05-21T00:00:00Z", "-o", str(tmp_path / "d"))
    assert again.exit_code == 0 and "replaced the model in" in again.output
    evaluate = ("evaluate", "demand", "--model", str(tmp_path / "d"), "--series", str(vcmod), "--horizon", "1h")
    late = _invoke(*evaluate, "--since", "2021-01-01T00:00:00Z")
    assert late.exit_code == 2 and "is after the series end: they cover 2020-05-21" in late.output, late.output
    # times in UTC with a Z, as everywhere else in the CLI (they printed +00:00)
    assert ("--since 2021-01-01T00:00:00Z is after the series end: they cover 2020-05-21T00:00:00Z .. "
            "2020-05-22T23:59:00Z") in " ".join(late.output.split()), late.output
    seen = _invoke("evaluate", "demand", "--model", str(tmp_path / "d"), "--series", str(vc3sl), "--horizon", "1h",
                   "--since", "2020-05-20T00:00:00Z", "--format", "json")
    assert seen.exit_code == 0, seen.output
    assert "was also a training series (scored only from 2020-05-20T00:00:00Z)" in " ".join(seen.stderr.split())
    backwards = _invoke(*evaluate, "--since", "2020-05-25T00:00:00Z", "--until", "2020-05-24T00:00:00Z")
    assert backwards.exit_code == 2 and "must be after --since" in backwards.output
    early = _invoke(*evaluate, "--since", "2020-05-20T00:00:00Z", "--format", "json")
    assert early.exit_code == 0 and "the scores include origins of the training period" in early.stderr
    short = tmp_path / "short.csv"
    short.write_text("\n".join(vcmod.read_text().splitlines()[:120]).replace("V100-32GB", "V100-16GB") + "\n")
    partly = _invoke(*evaluate, "--series", str(short), "--format", "json")
    assert partly.exit_code == 0, partly.output
    assert "note: not scored" in partly.stderr and "short" in partly.stderr.split("not scored")[1]
    (tmp_path / "afile").write_text("x")
    report = _invoke(*evaluate, "--report", str(tmp_path / "afile"))
    # checked before the scoring, so nothing computed is thrown away
    assert report.exit_code == 2 and f"--report {tmp_path / 'afile'}: cannot write there" in report.output


def test_evaluate_interruption_prints_valid_json_when_auc_is_undefined(tmp_path):
    """A held-out window without a single loss: AUC is undefined; JSON says null, not NaN."""
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "steady.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1] * 3000}))
    (traces / "flaky.json").write_text(json.dumps(
        {"metadata": {"gap_seconds": 600}, "data": [1 if (i // 6) % 4 else 0 for i in range(2100)] + [1] * 900}))
    manifest = tmp_path / "market.yaml"
    manifest.write_text("start_utc: 2023-02-15T00:00:00Z\ntraces:\n"
                        + "".join(f"  - {{provider: aws, instance_type: p3.2xlarge, region: us-east-1, zone: {z}, "
                                  f"file: traces/{f}}}\n" for z, f in (("us-east-1a", "steady.json"),
                                                                       ("us-east-1b", "flaky.json"))))
    trained = _invoke("train", "interruption", "--market", str(manifest), "-o", str(tmp_path / "m"))
    assert trained.exit_code == 0, trained.output
    result = _invoke("evaluate", "interruption", "--model", str(tmp_path / "m"), "--market", str(manifest),
                     "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert doc["positives"] == 0 and doc["auc"] is None and doc["brier"] >= 0
    assert "AUC is undefined" in result.stderr
    (tmp_path / "afile").write_text("x")
    report = _invoke("evaluate", "interruption", "--model", str(tmp_path / "m"), "--market", str(manifest),
                     "--report", str(tmp_path / "afile"))
    assert report.exit_code == 2 and "--report" in report.output and "cannot write there" in report.output


HUGE = "1" + "0" * 400  # float() of it is inf
CUT = "'1" + "0" * 35 + "..."  # the value as messages show it: shortened to 40 characters


@pytest.mark.parametrize("args, words", [
    (("train", "demand", "--horizons", "99999999999999d"), "--horizons: '99999999999999d': a horizon is at most 24h"),
    (("train", "demand", "--horizons", f"15m,{HUGE}m"), f"--horizons: {CUT}: a horizon is at most 24h"),
    (("train", "demand", "--horizons", "25h"), "--horizons: '25h': a horizon is at most 24h"),
    (("train", "demand", "--horizons", ""), "--horizons: give at least one horizon"),
    (("train", "demand", "--horizons", " , "), "--horizons: give at least one horizon"),
    (("evaluate", "demand", "--model", "none", "--horizon", "99999999999999d"),
     "--horizon: '99999999999999d': a horizon is at most 24h"),
    (("evaluate", "demand", "--model", "none", "--horizon", f"{HUGE}m"), f"--horizon: {CUT}: a horizon is at most 24h"),
    (("train", "interruption", "--horizon", "99999999999999d"), "--horizon: '99999999999999d': a horizon is at most 24h"),
    (("train", "interruption", "--horizon", f"{HUGE}h"), f"--horizon: {CUT}: a horizon is at most 24h"),
], ids=["demand-days", "demand-400-zeros", "demand-25h", "demand-empty", "demand-only-commas", "evaluate-days",
        "evaluate-400-zeros", "interruption-days", "interruption-400-zeros"])
def test_a_horizon_out_of_range_names_the_option_before_any_file_is_read(tmp_path, args, words):
    """Huge horizons were an OverflowError traceback (timedelta), and --horizons 25h or '' was
    "horizons must be between ..." without the option, once every series had been read."""
    missing = str(tmp_path / "missing.csv")  # never read: the option is refused first
    kind = "--series" if args[1] == "demand" else "--market"
    result = _invoke(*args, kind, missing, *(("-o", str(tmp_path / "m")) if args[0] == "train" else ()))
    assert result.exit_code == 2, (result.output, result.exception)
    text = " ".join(result.output.split())
    assert words in text, text
    assert "missing.csv" not in text and "Traceback" not in text, text
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("kind, seed, words", [
    ("demand", "-1", "greater than or equal to 0"),
    ("demand", str(2**32), "less than or equal to 4294967295"),
    ("interruption", "-1", "greater than or equal to 0"),
], ids=["demand-negative", "demand-too-large", "interruption-negative"])
def test_a_seed_out_of_range_is_refused_up_front_naming_the_option(tmp_path, kind, seed, words):
    """scikit-learn's own "The 'random_state' parameter of HistGradientBoostingRegressor must be ..."
    came once the data had been read, naming no option."""
    missing = str(tmp_path / "missing.csv")
    result = _invoke("train", kind, "--series" if kind == "demand" else "--market", missing, "--seed", seed,
                     "-o", str(tmp_path / "m"))
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "Invalid value for '--seed'" in text and words in text, text
    assert "missing.csv" not in text and "random_state" not in text, text


def test_the_check_before_training_sees_the_model_a_killed_save_left(tmp_path):
    """The CLI checks -o before it trains, so a model of another kind is refused at once; a model a
    killed save left beside the directory is put back first, not found only at the save, after the
    training."""
    target = tmp_path / "model"
    modelfiles.save(target, {"w": 1}, {**META, "kind": "interruption"})
    _killed_between_the_renames(target, {"w": 2})
    with pytest.warns(UserWarning, match="a save was interrupted"), \
            pytest.raises(ModelError, match="holds an interruption model"):
        modelfiles.check_target(target, "demand")
    assert modelfiles.read_metadata(target)[1]["kind"] == "interruption"


def _pickled_by_another_sklearn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, meta_version: str | None = None):
    """A model whose estimators were pickled by "scikit-learn 0.0.1" (their own
    ``_sklearn_version``); model.json records this version unless ``meta_version``."""
    import sklearn.base

    from forecasting.interruption import InterruptionModel
    from tests.forecasting.test_interruption import synthetic

    model = InterruptionModel.train([synthetic(days=6, seed=7)])
    with monkeypatch.context() as m:
        m.setattr(sklearn.base, "__version__", "0.0.1")
        model.save(tmp_path / "m")
    if meta_version is not None:
        meta = json.loads((tmp_path / "m" / "model.json").read_text())
        meta["versions"]["scikit-learn"] = meta_version  # not part of the digest
        (tmp_path / "m" / "model.json").write_text(json.dumps(meta))
    return tmp_path / "m"


def test_a_model_pickled_by_another_scikit_learn_is_one_warning_not_one_per_estimator(tmp_path, monkeypatch):
    """scikit-learn warns once per estimator it unpickles from another version
    (six for the interruption model), and the CLI printed every
    warning caught while loading. Now: refused unless allowed, then one
    ``ModelWarning``, whatever model.json says of the version."""
    import warnings

    from sklearn.exceptions import InconsistentVersionWarning

    from forecasting.interruption import InterruptionModel
    from forecasting.modelfiles import ModelWarning

    for meta_version in (None, "0.0.1"):  # model.json edited to match this version, or saying the other
        path = _pickled_by_another_sklearn(tmp_path / str(meta_version), monkeypatch, meta_version)
        with pytest.raises(ModelError, match="saved with scikit-learn 0.0.1"):
            InterruptionModel.load(path)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            InterruptionModel.load(path, allow_version_mismatch=True)
        assert [w.category for w in caught] == [ModelWarning], [str(w.message)[:80] for w in caught]
        assert "saved with scikit-learn 0.0.1" in str(caught[0].message)
        assert not any(issubclass(w.category, InconsistentVersionWarning) for w in caught)


def test_the_cli_prints_fleetctls_model_warnings_and_leaves_other_warnings_to_python(tmp_path, capfd):
    """load_model_or_exit printed every warning raised while a model loaded,
    a library's deprecation too; it prints ModelWarning lines only."""
    import warnings

    from fleetctl.cli.forecast import load_model_or_exit
    from forecasting.modelfiles import ModelWarning

    def load(path, allow_version_mismatch):  # noqa: ANN001, ANN202
        warnings.warn("fleetctl's own word on the model", ModelWarning)
        warnings.warn("a library deprecation", DeprecationWarning)
        return "model"

    with warnings.catch_warnings(record=True) as passed_on:
        warnings.simplefilter("always")
        assert load_model_or_exit(load, tmp_path, True) == "model"
    err = capfd.readouterr().err
    assert "warning: fleetctl's own word on the model" in err and "deprecation" not in err
    assert [w.category for w in passed_on] == [DeprecationWarning]  # to Python's filters: hidden by default
