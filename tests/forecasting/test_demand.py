"""The demand forecaster: Helios importer, demand-series CSV, features without leakage, scale-freeness,
the time split, save/load, the runtime API and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.model import DemandForecast
from fleetctl.yamlerrors import SpecError
from forecasting import demand
from forecasting import series as demand_csv
from forecasting.demand import CANDIDATES, FEATURES, DemandModel, ModelError, build_samples, evaluate, features
from forecasting.series import (
    DemandSeries,
    HeliosOptions,
    parse_demand_series,
    parse_helios_sequence,
    read_demand_series,
    series_frame,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "demand"
T0 = datetime(2020, 5, 1, tzinfo=timezone.utc)
runner = CliRunner()
FAST = (CANDIDATES[1],)  # one small candidate: the tests check behaviour, not accuracy


def synthetic(days: float = 4, seed: int = 0, size: float = 64, step_s: float = 120.0) -> DemandSeries:
    """A daily rhythm of whole GPUs with jobs arriving and leaving at random."""
    rng = np.random.default_rng(seed)
    n = int(days * 86400 / step_s)
    t = T0.timestamp() + step_s * np.arange(n)
    base = size * (0.55 + 0.3 * np.sin(2 * np.pi * (t - t[0]) / 86400))
    noise = np.cumsum(rng.normal(0, 0.6, n))
    noise -= np.convolve(noise, np.ones(180) / 180, mode="same")
    return DemandSeries("synthetic", "V100-32GB", t, np.clip(np.round(base + noise), 0, None))


#: The tests of ``model`` run in one test process (``make test`` runs ``--dist loadgroup``), which trains it once;
#: split between two xdist workers, each trained it (10 s).
USES_MODEL = pytest.mark.xdist_group("demand-model")


@pytest.fixture(scope="module")
def model() -> DemandModel:
    return DemandModel.train([synthetic(days=3, seed=1), synthetic(days=3, seed=2, size=16)],
                             horizons_minutes=(60, 360), seed=0, candidates=FAST)


# --------------------------------------------------------------------------- Helios importer

HELIOS_HEADER = "time,total_gpu_num,running_gpu_num,pending_gpu_num,idle_gpu_num\n"


def test_helios_demand_is_running_plus_pending_at_the_given_offset():
    text = HELIOS_HEADER + "2020-05-01 00:00:00,64,59,0,5\n2020-05-01 00:01:00,64,60,12,4\n"
    result = parse_helios_sequence(text, "seq.csv", HeliosOptions(gpu_model="V100-32GB"))
    assert [(t.isoformat(), m, g) for t, m, g in result.rows] == [
        ("2020-04-30T16:00:00+00:00", "V100-32GB", 59), ("2020-04-30T16:01:00+00:00", "V100-32GB", 72)]
    utc = parse_helios_sequence(text, "seq.csv", HeliosOptions(utc_offset=timezone.utc))
    assert utc.rows[0][0] == datetime(2020, 5, 1, tzinfo=timezone.utc)


def test_helios_without_time_column_needs_start_and_counts_minutes():
    text = "running_gpu_num,pending_gpu_num\n1,2\n3,4\n"
    with pytest.raises(SpecError, match=r"seq.csv:1:1: .*--start"):
        parse_helios_sequence(text, "seq.csv")
    result = parse_helios_sequence(text, "seq.csv", HeliosOptions(start_utc=T0, gpu_model="A100-80GB"))
    assert [(t, g) for t, _, g in result.rows] == [(T0, 3), (T0 + timedelta(minutes=1), 7)]
    late = datetime(9999, 12, 31, 23, 59, tzinfo=timezone.utc)  # the second row would be in the year 10000
    with pytest.raises(SpecError, match=r"seq.csv:3:1: .*past the year 9999; give an earlier --start"):
        parse_helios_sequence(text, "seq.csv", HeliosOptions(start_utc=late))


@pytest.mark.parametrize("text, expected", [
    (HELIOS_HEADER + "2020-05-01 00:00:00,64,-1,0,5\n", "seq.csv:2:24: running_gpu_num: must be at least 0"),
    (HELIOS_HEADER + "2020-05-01 00:00:00,64,1,x,5\n", "seq.csv:2:26: pending_gpu_num: must be a whole number"),
    (HELIOS_HEADER + "2020-05-01 00:01:00,64,1,0,5\n2020-05-01 00:00:00,64,1,0,5\n",
     "seq.csv:3:1: time: must be after the previous row's time (line 2)"),
    (HELIOS_HEADER + "yesterday,64,1,0,5\n", "seq.csv:2:1: time: must be an ISO-8601 time"),
    ("time,running_gpu_num\n2020-05-01 00:00:00,1\n", "seq.csv:1:1: (root): missing column(s) pending_gpu_num"),
    (HELIOS_HEADER + "2020-05-01 00:00:00,64,1,0\n", "seq.csv:2:1: (root): the row has 4 cells"),
    ("", "seq.csv:1:1: (root): file is empty"),
    # Valid wall times that leave datetime's range at the default +08:00 (an OverflowError traceback before)
    (HELIOS_HEADER + "0001-01-01 00:00:00,64,1,0,5\n", "seq.csv:2:1: time: is out of range once in UTC"),
    (HELIOS_HEADER + "0001-01-01T00:00:00+05:00,64,1,0,5\n", "seq.csv:2:1: time: is out of range once in UTC"),
    # Each count within the limit, their sum (the demand written) above what the demand-series reader takes
    (HELIOS_HEADER + "2020-05-01 00:00:00,64,0,1,5\n2020-05-01 00:01:00,64,10000000,1,5\n",
     "seq.csv:3:33: pending_gpu_num: running_gpu_num + pending_gpu_num is 10000001, more than the 10000000 GPUs"),
    # A series longer than its reader takes (MAX_SERIES_SPAN), e.g. a mistyped year
    (HELIOS_HEADER + "2019-05-01 00:00:00,64,1,0,5\n2020-05-01 08:00:01,64,1,0,5\n",
     "seq.csv:3:1: (root): this row's time (2020-05-01T00:00:01Z) is 366 days, 8:00:01 after the first row's "
     "(2019-04-30T16:00:00Z, line 2): the series would span 366 days, 8:00:01, more than the 366 days"),
], ids=["negative", "not-a-number", "time-goes-back", "bad-time", "missing-column", "short-row", "empty",
        "wall-time-before-year-1", "aware-time-before-year-1", "sum-above-the-readers-limit", "longer-than-a-year"])
def test_helios_bad_input_names_file_line_and_column(text, expected):
    with pytest.raises(SpecError) as info:
        parse_helios_sequence(text, "seq.csv")
    assert any(str(issue).startswith(expected) for issue in info.value.issues), info.value.issues


def test_helios_cli_writes_the_demand_csv_and_nothing_on_error(tmp_path):
    good, bad, out = tmp_path / "good.csv", tmp_path / "bad.csv", tmp_path / "demand.csv"
    good.write_text(HELIOS_HEADER + "2020-05-01 08:00:00,64,5,3,0\n2020-05-01 08:01:00,64,6,0,0\n")
    result = runner.invoke(app, ["trace", "import", "helios-sequence", str(good), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text() == ("time_utc,gpu_model,gpus\n2020-05-01T00:00:00Z,V100-32GB,8\n"
                               "2020-05-01T00:01:00Z,V100-32GB,6\n")
    bad.write_text(HELIOS_HEADER + "2020-05-01 08:00:00,64,5,-3,0\n")
    out2 = tmp_path / "other.csv"
    result = runner.invoke(app, ["trace", "import", "helios-sequence", str(bad), "-o", str(out2)])
    assert result.exit_code == 2
    assert f"{bad}:2:" in result.output and "nothing was written" in result.output
    assert not out2.exists()
    result = runner.invoke(app, ["trace", "import", "helios-sequence", str(good), "-o", str(out2),
                                 "--gpu-model", "V100"])
    assert result.exit_code == 2 and "--gpu-model: unknown GPU model 'V100'" in result.output and not out2.exists()
    result = runner.invoke(app, ["trace", "import", "helios-sequence", str(good), "-o", str(out2),
                                 "--utc-offset", "garbage"])
    assert result.exit_code == 2 and "--utc-offset: 'garbage' is not a UTC offset" in result.output
    result = runner.invoke(app, ["trace", "import", "helios-sequence", str(good), "-o", str(out2),
                                 "--since", "2020-05-02T00:00:00Z", "--until", "2020-05-01T00:00:00Z"])
    assert result.exit_code == 2 and "--until (2020-05-01T00:00:00Z) must be after --since" in result.output
    assert not out2.exists()
    result = runner.invoke(app, ["trace", "import", "helios-sequence", str(good), "-o", f"{tmp_path}/new/"])
    assert result.exit_code == 2 and "names a directory" in result.output  # Path dropped the '/': a file 'new'
    assert not (tmp_path / "new").exists()


def test_helios_cli_writes_to_stdout(tmp_path):
    """``-o -`` wrote a file named '-'; now the CSV is stdout, the summary stderr."""
    (tmp_path / "good.csv").write_text(HELIOS_HEADER + "2020-05-01 08:00:00,64,5,3,0\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    done = subprocess.run([sys.executable, "-m", "fleetctl", "trace", "import", "helios-sequence", "good.csv",
                           "-o", "-"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "time_utc,gpu_model,gpus\n2020-05-01T00:00:00Z,V100-32GB,8\n"
    assert "wrote stdout" in done.stderr and not (tmp_path / "-").exists()


def test_helios_window_counts_and_the_largest_demand_a_row_may_hold():
    """Five rows at +08:00, one a minute from 08:00 (00:00 UTC); running + pending 8, 6, 14, 10^7 (exactly
    the most a demand row may hold), 1. The window [00:02, 00:04) keeps the rows at 00:02 (at since) and
    00:03, not 00:04 (at until). Rows read and the running and pending maxima count every row, in the
    window or not."""
    text = HELIOS_HEADER + "".join(f"2020-05-01 08:0{i}:00,64,{r},{p},0\n" for i, (r, p) in enumerate(
        [(5, 3), (6, 0), (2, 12), (9_999_999, 1), (0, 1)]))
    window = HeliosOptions(since_utc=T0 + timedelta(minutes=2), until_utc=T0 + timedelta(minutes=4))
    result = parse_helios_sequence(text, "seq.csv", window)
    assert [(t, m, g) for t, m, g in result.rows] == [(T0 + timedelta(minutes=2), "V100-32GB", 14),
                                                      (T0 + timedelta(minutes=3), "V100-32GB", 10_000_000)]
    assert (result.rows_read, result.kept, result.running_gpus_max, result.pending_gpus_max) == (5, 2, 9_999_999, 12)
    idle = parse_helios_sequence(HELIOS_HEADER + "2020-05-01 08:00:00,64,0,0,64\n", "seq.csv")
    assert (idle.rows, idle.rows_read, idle.running_gpus_max, idle.pending_gpus_max) == (
        ((T0, "V100-32GB", 0),), 1, 0, 0)
    # a series may span exactly MAX_SERIES_SPAN (366 days), and no more
    year = parse_helios_sequence(HELIOS_HEADER + "2020-05-01 08:00:00,64,1,0,0\n2021-05-02 08:00:00,64,2,0,0\n")
    assert [t for t, _, _ in year.rows] == [T0, T0 + timedelta(days=366)]


def test_helios_reports_each_bad_row_once_and_goes_on_from_the_last_good_time():
    """Every issue, exactly: a time equal to the previous one is refused like an earlier one; a row out of
    order leaves the previous good time in place (line 2's 00:05, so 00:03 on line 4 is refused too); a bad
    time after a good one is its own issue; a sum above 10^7 is one issue, even for a row a year after the
    first (the span is measured over the rows written)."""
    def issues(text: str, options: HeliosOptions = HeliosOptions()) -> list[str]:
        with pytest.raises(SpecError) as info:
            parse_helios_sequence(text, "seq.csv", options)
        return [str(i) for i in info.value.issues]

    rows = ["2020-05-01 08:05:00,64,1,0,5", "2020-05-01 08:00:00,64,1,0,5", "2020-05-01 08:03:00,64,1,0,5",
            "2020-05-01 08:05:00,64,1,0,5", "yesterday,64,1,0,5"]
    said = issues(HELIOS_HEADER + "\n".join(rows) + "\n")
    assert [s.split(": ")[0] for s in said] == ["seq.csv:3:1", "seq.csv:4:1", "seq.csv:5:1", "seq.csv:6:1"]
    assert all("must be after the previous row's time (line 2)" in s for s in said[:3]), said
    assert "must be an ISO-8601 time" in said[3]
    big = issues(HELIOS_HEADER + "2019-05-01 08:00:00,64,1,0,5\n2020-05-03 08:00:00,64,10000000,1,5\n")
    assert len(big) == 1 and big[0].startswith("seq.csv:3:33: pending_gpu_num: running_gpu_num + pending_gpu_num")
    # without a time column, the first row past the year 9999 ends the reading: one issue, not one a row
    late = datetime(9999, 12, 31, 23, 59, tzinfo=timezone.utc)
    past = issues("running_gpu_num,pending_gpu_num\n1,2\n3,4\n5,6\n", HeliosOptions(start_utc=late))
    assert len(past) == 1 and past[0].startswith("seq.csv:3:1: (root): this row's time (--start + 1 x")
    assert issues(HELIOS_HEADER + "2020-05-01 08:00:00,64,1,0,5\n", HeliosOptions(start_utc=T0)) == [
        "seq.csv:1:1: (root): the file has a 'time' column; --start is only for files without one"]
    # the span is from the first row written, not from the one before (half a year, then a year and a day), and
    # the first row past it is named, not the last
    span = issues(HELIOS_HEADER + "2019-05-01 08:00:00,64,1,0,5\n2019-11-01 08:00:00,64,1,0,5\n"
                  "2020-05-02 08:00:00,64,1,0,5\n2020-05-03 08:00:00,64,1,0,5\n")
    assert len(span) == 1 and span[0].startswith("seq.csv:4:1: (root): this row's time (2020-05-02T00:00:00Z) is "
                                                 "367 days, 0:00:00 after the first row's"), span
    assert issues(HELIOS_HEADER + "2020-05-01 08:00:00,64,1,0,5\n", HeliosOptions(since_utc=T0 + timedelta(1))) == [
        "seq.csv:1:1: (root): no rows to write inside the window"]
    assert issues(HELIOS_HEADER) == ["seq.csv:1:1: (root): no rows to write: the file has a header but no rows"]
    # a demand series' GPU counts need not be whole (the importer's are)
    assert demand_csv.format_demand_series([(T0, "L4", 2.5), (T0, "L4", 3.0)]).splitlines()[1:] == [
        "2020-05-01T00:00:00Z,L4,2.5", "2020-05-01T00:00:00Z,L4,3"]



def test_helios_cli_window_summary_and_its_refusals(tmp_path):
    """--since alone keeps the rows from it: 1 of the 2 rows read, 6 GPUs (running 6, pending 0); the summary
    says so. A window that ends where it starts, or a time that is not one, is refused (exit code 2)."""
    good, out = tmp_path / "good.csv", tmp_path / "demand.csv"
    good.write_text(HELIOS_HEADER + "2020-05-01 08:00:00,64,5,3,0\n2020-05-01 08:01:00,64,6,0,0\n")
    result = runner.invoke(app, ["trace", "import", "helios-sequence", str(good), "-o", str(out),
                                 "--since", "2020-05-01T00:01:00Z"])
    assert result.exit_code == 0, result.output
    assert out.read_text() == "time_utc,gpu_model,gpus\n2020-05-01T00:01:00Z,V100-32GB,6\n"
    assert ("good.csv: 2 rows -> 1 demand rows of V100-32GB, 2020-05-01T00:01:00Z .. 2020-05-01T00:01:00Z; "
            "GPUs demanded: mean 6.0, max 6") in " ".join(result.output.split())
    for args, said in ((["--since", "2020-05-01T00:01:00Z", "--until", "2020-05-01T00:01:00Z"],
                        "--until (2020-05-01T00:01:00Z) must be after --since (2020-05-01T00:01:00Z): the window is "
                        "empty"),
                       (["--until", "soon"], "--until: "), (["--start", "soon"], "--start: ")):
        result = runner.invoke(app, ["trace", "import", "helios-sequence", str(good), "-o", str(tmp_path / "x.csv"),
                                     *args])
        assert result.exit_code == 2 and said in " ".join(result.output.split()), (args, result.output)
        assert not (tmp_path / "x.csv").exists()


def test_helios_cli_until_alone_a_window_and_paths_printed_as_they_are(tmp_path, monkeypatch):
    """Rows at 00:00, 00:01, 00:02 UTC of 8, 6 and 4 GPUs. --until 00:01 alone keeps the first (8 GPUs);
    the window [00:01, 00:02) keeps the second (6). The paths hold '[vc]', which rich would take for a
    style tag and drop: the summary, 'wrote' and a bad row's issue print them as they are."""
    monkeypatch.chdir(tmp_path)  # short relative paths: no line is wrapped inside one
    seq, out = Path("seq[vc].csv"), Path("demand[vc].csv")
    seq.write_text(HELIOS_HEADER + "2020-05-01 08:00:00,64,5,3,0\n2020-05-01 08:01:00,64,6,0,0\n"
                   "2020-05-01 08:02:00,64,4,0,0\n")
    for window, kept in ((["--until", "2020-05-01T00:01:00Z"], ("2020-05-01T00:00:00Z", 8)),
                         (["--since", "2020-05-01T00:01:00Z", "--until", "2020-05-01T00:02:00Z"],
                          ("2020-05-01T00:01:00Z", 6))):
        result = runner.invoke(app, ["trace", "import", "helios-sequence", str(seq), "-o", str(out), *window])
        assert result.exit_code == 0, (window, result.output)
        assert out.read_text() == f"time_utc,gpu_model,gpus\n{kept[0]},V100-32GB,{kept[1]}\n"
        text = " ".join(result.output.split())
        assert (f"seq[vc].csv: 3 rows -> 1 demand rows of V100-32GB, {kept[0]} .. {kept[0]}; GPUs demanded: "
                f"mean {kept[1]}.0, max {kept[1]}") in text, text
        assert "wrote demand[vc].csv" in text, text
    seq.write_text(HELIOS_HEADER + "2020-05-01 08:00:00,64,-1,0,5\n")
    result = runner.invoke(app, ["trace", "import", "helios-sequence", str(seq), "-o", "x.csv"])
    assert result.exit_code == 2 and "seq[vc].csv:2:24: running_gpu_num: must be at least 0" in result.output

# --------------------------------------------------------------------------- demand-series CSV


def test_demand_series_round_trip_and_errors(tmp_path):
    series = parse_demand_series("time_utc,gpu_model,gpus\n2020-05-01T00:00:00Z,V100-32GB,3\n"
                                 "2020-05-01T00:00:00Z,A100-80GB,1\n2020-05-01T00:05:00Z,V100-32GB,4\n", "d.csv")
    assert [(s.gpu_model, list(s.gpus)) for s in series] == [("V100-32GB", [3.0, 4.0]), ("A100-80GB", [1.0])]
    with pytest.raises(SpecError) as info:
        parse_demand_series("time_utc,gpu_model,gpus\n2020-05-01T00:05:00Z,V100-32GB,3\n"
                            "2020-05-01T00:00:00Z,V100-32GB,1\n2020-05-01T00:10:00,V100-32GB,1\n"
                            "2020-05-01T00:15:00Z,V100,1\n", "d.csv")
    text = "\n".join(str(i) for i in info.value.issues)
    assert "d.csv:3:1: time_utc: must be after the previous V100-32GB row's time (line 2)" in text
    assert "d.csv:4:1: time_utc: has no time zone" in text
    assert "d.csv:5:22: gpu_model: unknown GPU model 'V100'" in text
    with pytest.raises(SpecError, match="missing.csv:1:1: .*cannot read the file"):
        read_demand_series(tmp_path / "missing.csv")


def test_demand_series_csv_refusals_each_said_once():
    """An empty file, a header alone, a time equal to the previous one of its GPU model (refused as an earlier
    one is); every bad row said and the reading going on past it (a blank line, a gpus that is not a number at
    4:25, an unknown GPU model at 5:22, a last row of 2 cells: the header's width counts); a header with an unknown column (at 1:25) or a
    missing one is said alone, before any row is read."""
    def issues(text: str) -> list[str]:
        with pytest.raises(SpecError) as info:
            parse_demand_series(text, "d.csv")
        return [str(i) for i in info.value.issues]

    header = "time_utc,gpu_model,gpus\n"
    assert issues("") == ["d.csv:1:1: (root): file is empty; expected the header time_utc,gpu_model,gpus"]
    assert issues(header) == ["d.csv:1:1: (root): the file has a header but no rows"]
    assert issues(header + "2020-05-01T00:00:00Z,L4,1\n2020-05-01T00:00:00Z,L4,2\n") == [
        "d.csv:3:1: time_utc: must be after the previous L4 row's time (line 2); times are strictly increasing "
        "per GPU model"]
    said = issues(header + "2020-05-01T00:00:00Z,L4,1\n\n2020-05-01T00:10:00Z,L4,x\n2020-05-01T00:15:00Z,V100,1\n"
                  "2020-05-01T00:05:00Z,L4\n")
    assert [i.split(": ", 1)[0] for i in said] == ["d.csv:3:1", "d.csv:4:25", "d.csv:5:22", "d.csv:6:1"], said
    assert (said[0], said[3]) == ("d.csv:3:1: (root): blank line; remove it",
                                  "d.csv:6:1: (root): the row has 2 cells; the header has 3")
    # a refused row is not a GPU model's previous time: 00:05 after a refused 00:10 (a bad count, a bad
    # model) is the first; 00:03 after a refused 00:00 is still before 00:05 (line 2)
    said = issues(header + "2020-05-01T00:10:00Z,L4,x\n2020-05-01T00:05:00Z,L4,1\n2020-05-01T00:10:00Z,V100,1\n"
                  "2020-05-01T00:05:00Z,V100,1\n")
    assert [i.split(": ", 2)[1] for i in said] == ["gpus", "gpu_model", "gpu_model"], said
    said = issues(header + "2020-05-01T00:05:00Z,L4,1\n2020-05-01T00:00:00Z,L4,1\n2020-05-01T00:03:00Z,L4,1\n")
    assert [i.split(": ", 1)[0] for i in said] == ["d.csv:3:1", "d.csv:4:1"] and all("(line 2)" in i for i in said)
    assert issues("time_utc,gpu_model,gpus,extra\n2020-05-01T00:00:00Z,L4,x,2\n") == [
        "d.csv:1:25: (root): unknown column 'extra'; expected the columns time_utc,gpu_model,gpus"]
    assert issues("time_utc,gpu_model\n,L4\n") == [
        "d.csv:1:1: (root): missing column(s) gpus; expected time_utc,gpu_model,gpus"]


def test_a_demand_series_built_in_code_is_checked():
    """Series built without the reader (the runtime, the API): as many values as times, at least one row,
    times strictly increasing (one equal or earlier time is enough to refuse; half a second later is
    later); the name says which."""
    t = T0.timestamp() + np.array([0.0, 300.0])
    with pytest.raises(ValueError, match=r"^api\[L4\]: 2 times but 1 values$"):
        DemandSeries("api", "L4", t, np.array([1.0]))
    with pytest.raises(ValueError, match=r"^api\[L4\]: the series is empty$"):
        DemandSeries("api", "L4", np.array([]), np.array([]))
    for later in (300.0, 200.0):  # the third time equal to the second, or before it
        with pytest.raises(ValueError, match=r"^api\[L4\]: times must be strictly increasing$"):
            DemandSeries("api", "L4", np.append(t, T0.timestamp() + later), np.array([1.0, 2.0, 3.0]))
    close = DemandSeries("api", "L4", T0.timestamp() + np.array([0.0, 0.5, 300.0]), np.array([1.0, 2.0, 3.0]))
    assert list(close.scaled(2.5).gpus) == [2.5, 5.0, 7.5]  # half a second apart is increasing


def test_a_series_may_span_a_year_and_no_more():
    """A first row of 2002 for 2020 made a series of 18 years: training and evaluation built a 1.9-million x
    289 grid (4 GB) and died with a MemoryError. The reader refuses it, naming the rows and the span."""
    header = "time_utc,gpu_model,gpus\n"
    year = header + "2020-01-01T00:00:00Z,V100-32GB,3\n2021-01-01T00:00:00Z,V100-32GB,4\n"  # 366 days: a leap year
    assert [len(s.times_s) for s in parse_demand_series(year, "d.csv")] == [2]
    with pytest.raises(SpecError) as info:
        parse_demand_series(header + "2002-05-18T00:00:00Z,V100-32GB,50\n2020-05-18T00:01:00Z,V100-32GB,50\n"
                            "2020-05-18T00:02:00Z,A100-80GB,1\n2020-05-20T00:00:00Z,V100-32GB,51\n", "d.csv")
    assert [str(i) for i in info.value.issues] == [
        "d.csv:3:1: time_utc: 2020-05-18T00:01:00Z is 6575 days, 0:01:00 after the first V100-32GB row's time "
        "(2002-05-18T00:00:00Z, line 2): the V100-32GB series spans 6577 days, 0:00:00 (to line 5), more than the "
        "366 days a demand series may span; is a year mistyped?"]
    with pytest.raises(SpecError, match=r"d.csv:3:1: time_utc: 2021-01-01T00:00:01Z is 366 days, 0:00:01 after"):
        parse_demand_series(year.replace("2021-01-01T00:00:00Z", "2021-01-01T00:00:01Z"), "d.csv")


@USES_MODEL
def test_training_and_evaluation_refuse_a_series_longer_than_a_year(model):
    """Series built without the reader (the API, the runtime) are refused before any grid is built."""
    t = T0.timestamp() + np.array([0.0, 400 * 86400.0])
    long = DemandSeries("api", "V100-32GB", t, np.array([3.0, 4.0]))
    words = r"api\[V100-32GB\] spans 400 days, 0:00:00 \(2020-05-01T00:00:00Z .. 2021-06-05T00:00:00Z\), more than the 366"
    with pytest.raises(ValueError, match=words):
        DemandModel.train([synthetic(days=3), long], horizons_minutes=(60,), candidates=FAST)
    with pytest.raises(ValueError, match=words):
        evaluate(model, [long], 60, since_utc=T0 + timedelta(days=399))


@USES_MODEL
def test_cli_refuses_a_series_with_a_mistyped_year_up_front(model, tmp_path):
    model.save(tmp_path / "saved")
    typo = tmp_path / "vc3sl.csv"
    lines = (EXAMPLES / "helios-earth-vc3sl.csv").read_text().splitlines(keepends=True)
    assert lines[1].startswith("2020-05-18T00:00:00Z")
    typo.write_text(lines[0] + "2002" + lines[1][4:] + "".join(lines[2:]))
    for args in (("train", "demand", "--horizons", "1h", "-o", str(tmp_path / "m")),
                 ("evaluate", "demand", "--model", str(tmp_path / "saved"), "--horizon", "1h")):
        result = runner.invoke(app, ["forecast", *args, "--series", str(typo)])
        text = " ".join(result.output.split())
        assert result.exit_code == 2, (text, result.exception)
        assert (f"{typo}:3:1: time_utc: 2020-05-18T00:01:00Z is 6575 days, 0:01:00 after the first V100-32GB row's "
                "time (2002-05-18T00:00:00Z, line 2): the V100-32GB series spans 6577 days, 23:59:00 (to line "
                "4321)") in text, text
    assert not (tmp_path / "m").exists()


# --------------------------------------------------------------------------- features and split


def test_features_at_t_use_only_data_up_to_t():
    s = synthetic(days=3)
    origins = s.times_s[0] + np.array([0.3, 1.2, 1.7, 2.4]) * 86400 + 17.0  # also between observations
    before, _, _ = features(s, origins, 360)
    for t in origins:
        future = s.times_s > t
        changed = DemandSeries(s.source, s.gpu_model, s.times_s, np.where(future, s.gpus * 3 + 7, s.gpus))
        after, _, _ = features(changed, np.array([t]), 360)
        i = int(np.flatnonzero(origins == t)[0])
        np.testing.assert_array_equal(before[i], after[0])
    assert before.shape == (4, len(FEATURES))


def test_clock_features_are_the_origins_utc_hour_and_weekday():
    s = synthetic(days=2)
    origin = datetime(2020, 5, 2, 13, 30, tzinfo=timezone.utc)  # a Saturday
    x, _, _ = features(s, np.array([origin.timestamp()]), 60)
    assert x[0, FEATURES.index("hour_of_day_utc")] == 13.5
    assert x[0, FEATURES.index("day_of_week_utc")] == origin.weekday() == 5


def test_features_are_scale_free():
    s = synthetic(days=2)
    origins = s.times_s[0] + np.array([0.5, 1.5]) * 86400
    a, scale_a, level_a = features(s, origins, 60)
    b, scale_b, level_b = features(s.scaled(10), origins, 60)
    np.testing.assert_allclose(a, b, rtol=1e-12, equal_nan=True)
    np.testing.assert_allclose(scale_b, 10 * scale_a)


def test_training_never_sees_a_target_after_the_split():
    s = synthetic(days=4)
    split = T0 + timedelta(days=3)
    for h in (60, 360):
        samples = build_samples(s, h, until_s=split.timestamp())
        assert samples.origins_s.max() + h * 60 <= split.timestamp()
        assert samples.origins_s.max() + h * 60 >= split.timestamp() - 300  # and it uses the window up to the split
    later = build_samples(s, 60, since_s=split.timestamp(), full_day=True)
    assert later.origins_s.min() >= split.timestamp()


def test_training_data_after_the_split_does_not_change_the_model():
    s = synthetic(days=4, seed=3)
    split = T0 + timedelta(days=3)
    future = s.times_s > split.timestamp()
    changed = DemandSeries(s.source, s.gpu_model, s.times_s, np.where(future, 0.0, s.gpus))
    a = DemandModel.train([s], horizons_minutes=(60,), until_utc=split, candidates=FAST)
    b = DemandModel.train([changed], horizons_minutes=(60,), until_utc=split, candidates=FAST)
    assert a.metadata["calibration"] == "same_series"  # one series: nothing to calibrate across
    x, scale, level = features(s, s.times_s[::97], 60)
    np.testing.assert_array_equal(a.quantiles(x, scale, level, 60)[1], b.quantiles(x, scale, level, 60)[1])


# --------------------------------------------------------------------------- the model


def test_adjustments_are_calibrated_on_series_the_model_was_not_fitted_on(monkeypatch):
    # A volatile series beside a flat one: fitted on both, the model knows which is which, and the p90 offset
    # calibrated on the same series is about 0. Calibrated across series (the default: the model will serve
    # clusters it has not seen), the flat series' model misses the volatile one's moves: a larger offset, and
    # the median keeps none of its predicted change (it lost to the last value on one series).
    volatile = synthetic(days=3, seed=1)
    flat = DemandSeries("flat", volatile.gpu_model, volatile.times_s, np.full(len(volatile.times_s), 32.0))
    across = DemandModel.train([volatile, flat], horizons_minutes=(60,), candidates=FAST)
    monkeypatch.setattr(demand, "CALIBRATION", "same_series")
    same = DemandModel.train([volatile, flat], horizons_minutes=(60,), candidates=FAST)
    assert (across.metadata["calibration"], same.metadata["calibration"]) == ("other_series", "same_series")
    assert across.metadata["adjustments"]["60m_q90"] > same.metadata["adjustments"]["60m_q90"] + 0.05
    assert across.metadata["adjustments"]["60m_q50"] == 0.0
    now = T0 + timedelta(days=2, hours=5)
    for f in across.forecast(volatile, now):
        assert f.gpus_p50 == volatile.gpus[volatile.times_s <= now.timestamp()][-1]  # the last value


def test_p90_candidates_are_scored_as_issued_at_least_the_median():
    # The 90th percentile is issued at least at the median, so a candidate is scored on what would be issued.
    # A cluster whose demand drains steadily (one GPU every 10 minutes, refilled every 6 hours) beside a flat
    # one: the median stays the last value (its predicted fall loses on the flat cluster when calibrated
    # across), the raw 90th percentile predicts the fall. The recorded validation loss is that of
    # max(p90, p50), not of the raw p90.
    from sklearn.ensemble import HistGradientBoostingRegressor

    t = T0.timestamp() + 120.0 * np.arange(int(3 * 86400 / 120))
    draining = DemandSeries("draining", "V100-32GB", t, 64.0 - ((t - t[0]) % (6 * 3600)) // 600)
    flat = DemandSeries("flat", "V100-32GB", t, np.full(len(t), 32.0))
    h, params = 60, FAST[0]
    trained = DemandModel.train([draining, flat], horizons_minutes=(h,), candidates=FAST)
    assert trained.metadata["adjustments"]["60m_q50"] == 0.0  # the median is the last value
    parts = [build_samples(series, h) for series in (draining, flat)]
    fit, val = [], []
    for p in parts:
        lo, span = p.origins_s[0], p.origins_s[-1] + h * 60 - p.origins_s[0]
        fit.append((p.origins_s + h * 60 - lo) / span <= demand.TUNE_FRACTION)
        val.append((p.origins_s - lo) / span >= demand.TUNE_FRACTION)
    fit, val = np.concatenate(fit), np.concatenate(val)
    X, scale, level, y = (np.concatenate([getattr(p, a) for p in parts]) for a in ("X", "scale", "level", "outcome"))
    r = (y - level) / scale
    est = HistGradientBoostingRegressor(loss="quantile", quantile=0.9, early_stopping=False, random_state=0,
                                        **params)
    raw = np.maximum(level[val] + scale[val] * est.fit(X[fit], r[fit], sample_weight=scale[fit]).predict(X[val]),
                     0.0)
    assert (raw < level[val] - 1).any()  # the case: the raw 90th percentile falls below the median
    recorded = trained.metadata["hyperparameter_search"]["60m_q90"][0]["validation_pinball"]
    assert recorded == pytest.approx(demand.pinball(y[val], np.maximum(raw, level[val]), 0.9), abs=1e-6)
    assert recorded != pytest.approx(demand.pinball(y[val], raw, 0.9), abs=1e-3)


@USES_MODEL
def test_forecasts_scale_with_the_series(model):
    s = synthetic(days=3, seed=7, size=32)
    for day in (1.2, 2.6):
        now = T0 + timedelta(days=day)
        small, large = model.forecast(s, now), model.forecast(s.scaled(10), now)
        assert [(f.horizon_minutes) for f in small] == [60, 360]
        for a, b in zip(small, large):
            assert b.gpus_p50 == pytest.approx(10 * a.gpus_p50, rel=1e-6, abs=1e-6)
            assert b.gpus_p90 == pytest.approx(10 * a.gpus_p90, rel=1e-6, abs=1e-6)
            assert 0 <= a.gpus_p50 <= a.gpus_p90


@USES_MODEL
def test_predict_takes_a_frame_and_ignores_rows_after_now(model):
    a, b = synthetic(days=2, seed=4), synthetic(days=2, seed=5, size=8)
    b = DemandSeries("other", "A100-80GB", b.times_s + 30.0, b.gpus)
    frame = series_frame([a, b])
    now = T0 + timedelta(days=1, hours=3)
    out = model.predict(frame, now)
    assert all(isinstance(f, DemandForecast) for f in out)
    assert [(f.gpu_model, f.horizon_minutes) for f in out] == [("A100-80GB", 60), ("A100-80GB", 360),
                                                              ("V100-32GB", 60), ("V100-32GB", 360)]
    future = frame.copy()
    future.loc[future["time_utc"] > pd.Timestamp(now), "gpus"] = 1000.0
    assert model.predict(future, now) == out
    assert model.predict(frame, T0 - timedelta(days=1)) == ()
    with pytest.raises(ValueError, match="no time zone"):
        model.predict(frame, now.replace(tzinfo=None))


@USES_MODEL
def test_save_load_round_trip_and_version_refusal(model, tmp_path):
    path = model.save(tmp_path / "demand")
    loaded = DemandModel.load(path)
    s = synthetic(days=2, seed=9)
    now = T0 + timedelta(hours=30)
    assert loaded.forecast(s, now) == model.forecast(s, now)
    meta = json.loads((path / "model.json").read_text())
    assert meta["features"] == list(FEATURES) and meta["horizons_minutes"] == [60, 360]
    assert set(meta["versions"]) == {"scikit-learn", "numpy", "pandas", "python"}
    assert meta["training_window_utc"][0] == "2020-05-01T00:00:00Z" and meta["training_metrics"]["60"]["mae"] >= 0
    meta["versions"]["scikit-learn"] = "0.0.1"
    (path / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelError, match=r"saved with scikit-learn 0\.0\.1.*--allow-version-mismatch"):
        DemandModel.load(path)
    with pytest.warns(UserWarning, match="0.0.1"):
        assert DemandModel.load(path, allow_version_mismatch=True).forecast(s, now) == model.forecast(s, now)
    with pytest.raises(ModelError, match=r"nowhere: no such model directory"):
        DemandModel.load(tmp_path / "nowhere")
    (path / "model.joblib").write_bytes(b"not a pickle")
    with pytest.raises(ModelError, match=r"model\.json and model\.joblib do not belong together"), \
            pytest.warns(UserWarning):
        DemandModel.load(path, allow_version_mismatch=True)
    meta.pop("digest")  # deleting the digest does not switch the check off
    (path / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelError, match=r"model\.json has no digest"), pytest.warns(UserWarning):
        DemandModel.load(path, allow_version_mismatch=True)


@USES_MODEL
def test_evaluate_scores_the_model_and_both_baselines(model):
    result = evaluate(model, [synthetic(days=3, seed=11)], 60, since_utc=T0 + timedelta(days=1))
    result.pop("_curves")
    assert result["samples"] == (2 * 86400 - 120 - 3600) // 300 + 1  # the series ends 120 s before 3 days
    assert 0.0 <= result["p90_coverage"] <= 1.0 and result["mae"] > 0
    assert set(result["baselines"]) == {"last_value", "seasonal_naive"}
    # On a strong daily rhythm the seasonal baseline has something to say; the last value lags it.
    assert result["baselines"]["seasonal_naive"]["mae"] != result["baselines"]["last_value"]["mae"]


@USES_MODEL
def test_evaluate_with_no_series_to_score_names_them(model):
    """It said "every series is shorter than ..." and left the reader to guess which files."""
    a, b = synthetic(days=0.8, seed=1), synthetic(days=3, seed=2)
    b = DemandSeries("b.csv", "A100-80GB", b.times_s, b.gpus)
    short_b = DemandSeries("b.csv", "A100-80GB", b.times_s[:700], b.gpus[:700])  # 23.3 hours
    with pytest.raises(ValueError, match=r"no series has 24 hours of history plus the 60-minute outcome: "
                                         r"synthetic\[V100-32GB\], b.csv\[A100-80GB\]$"):
        evaluate(model, [a, short_b], 60)
    with pytest.raises(ValueError, match=r"inside the evaluation window \(2020-05-03T23:30:00Z \.\. their end\): "
                                         r"synthetic\[V100-32GB\], b.csv\[A100-80GB\]$"):
        evaluate(model, [a, b], 60, since_utc=T0 + timedelta(days=2, hours=23, minutes=30))


@USES_MODEL
def test_cli_evaluate_with_no_series_to_score_names_them_and_the_default_since(model, tmp_path):
    trained_until = DemandModel(model.estimators, model.horizons_minutes,
                                {**model.metadata, "training_until_utc": "2020-05-02T23:30:00Z"})
    trained_until.save(tmp_path / "m")
    series = tmp_path / "late.csv"
    series.write_text("time_utc,gpu_model,gpus\n" + "".join(
        f"{(T0 + timedelta(minutes=10 * i)).isoformat().replace('+00:00', 'Z')},V100-32GB,{i % 7}\n"
        for i in range(2 * 144 + 1)))  # two days: the last origin with its outcome is before the split
    result = runner.invoke(app, ["forecast", "evaluate", "demand", "--model", str(tmp_path / "m"), "--series",
                                 str(series), "--horizon", "1h"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2, text
    assert (f"no series has 24 hours of history plus the 60-minute outcome inside the evaluation window "
            f"(2020-05-02T23:30:00Z .. their end): {series}[V100-32GB] (--since defaults to the end of the model "
            "training window") in text


# --------------------------------------------------------------------------- CLI


def test_cli_train_and_evaluate_json_keys(tmp_path):
    out = tmp_path / "model"
    result = runner.invoke(app, ["forecast", "train", "demand", "--series", str(EXAMPLES / "helios-earth-vc3sl.csv"),
                                 "--horizons", "1h", "-o", str(out)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["forecast", "evaluate", "demand", "--model", str(out), "--series",
                                 str(EXAMPLES / "helios-earth-vcMod.csv"), "--horizon", "1h", "--format", "json",
                                 "--report", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)  # stdout is the JSON alone (notes go to stderr)
    assert set(payload) == {"samples", "mae", "pinball_p90", "p90_coverage", "baselines"}
    assert {k: set(v) for k, v in payload["baselines"].items()} == {
        "last_value": {"mae", "pinball_p90"}, "seasonal_naive": {"mae", "pinball_p90"}}
    assert payload["samples"] > 0
    assert (tmp_path / "report" / "demand_forecast_60m.png").stat().st_size > 1000


def test_cli_bad_input_names_the_path(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("time_utc,gpu_model,gpus\n2020-05-01T00:00:00Z,V100-32GB,-1\n")
    result = runner.invoke(app, ["forecast", "train", "demand", "--series", str(bad), "-o", str(tmp_path / "m")])
    assert result.exit_code == 2 and f"{bad}:2:32: gpus: must be at least 0" in result.output
    assert not (tmp_path / "m").exists()
    result = runner.invoke(app, ["forecast", "evaluate", "demand", "--model", str(tmp_path / "none"), "--series",
                                 str(EXAMPLES / "helios-earth-vcMod.csv")])
    assert result.exit_code == 2 and "none: no such model directory" in result.output


def test_a_series_too_short_to_train_on_is_left_out_and_named():
    # A few hours of a new cluster beside days of an old one: the short series has no origin with a day of
    # history (its seasonal feature is all missing), which scikit-learn cannot bin. It is left out, said so.
    long = synthetic(days=3, seed=1)
    short = DemandSeries("new-cluster", "V100-32GB", long.times_s[:200], long.gpus[:200])
    trained = DemandModel.train([long, short], horizons_minutes=(60,), candidates=FAST)
    assert [s["source"] for s in trained.metadata["training_series"]] == ["synthetic"]
    (left_out,) = trained.metadata["skipped_series"]
    assert left_out["series"] == "new-cluster[V100-32GB]" and left_out["hours"] == pytest.approx(199 * 120 / 3600, abs=0.01)
    with pytest.raises(ValueError, match=r"new-cluster\[V100-32GB\] has 6.6 hours of data in all"):
        DemandModel.train([short], horizons_minutes=(60,), candidates=FAST)
    # Measured inside the training window: three days, but only one before --until.
    with pytest.raises(ValueError, match="inside the training window"):
        DemandModel.train([long], horizons_minutes=(60,), until_utc=T0 + timedelta(days=1), candidates=FAST)


def test_a_series_is_trained_on_with_36_hours_inside_the_window():
    """5 GPUs from T0, 6 from 12 h, to 36 h: exactly MIN_TRAINING_SECONDS, kept, with no window and inside one
    wider than the series (the span is the series' own, from its first row to its last, not the window's).
    From since 1 h: 35 hours inside the window; to until 35 h 20 m: 35.33; since past the end: 0, not
    negative. Each is left out, with its hours (to 2 decimals) and why (to 1, floored: 35 h 3 m 18 s is 35.055
    hours, 35.0; 35 h 57 m 36 s is 35.96, 35.9). A series of 30 hours with no window has them 'in all'; the series
    after a kept one are looked at too."""
    s = _steps((0, 5), (12, 6), (36, 5))
    at = lambda hours: T0.timestamp() + hours * 3600  # noqa: E731
    assert demand._long_enough([s], None, None) == ([s], [])
    assert demand._long_enough([s], at(-1), at(40)) == ([s], [])
    for since, until, hours in ((at(1), None, 35.0), (None, at(35 + 1 / 3), 35.33), (at(37), at(40), 0.0)):
        kept, skipped = demand._long_enough([s], since, until)
        assert kept == [] and skipped == [{
            "series": "steps[V100-32GB]", "hours": hours,
            "reason": f"steps[V100-32GB] has {hours:.1f} hours of data inside the training window, fewer than the "
                      "36 hours training needs"}], (since, until)
    # floored to a tenth (until 2026-11-28 rounded, so 35.96 hours read "has 36.0 hours ..., fewer than the 36")
    for since, until, said in ((None, at(35) + 198, "35.0"), (at(1) - 162, None, "35.0"), (None, at(35.96), "35.9"),
                               (None, at(35.9), "35.9")):
        [skipped] = demand._long_enough([s], since, until)[1]
        assert skipped["reason"].startswith(f"steps[V100-32GB] has {said} hours of data inside"), skipped
    short = _steps((0, 5), (30, 5))
    assert demand._long_enough([s, short], None, None) == ([s], [{
        "series": "steps[V100-32GB]", "hours": 30.0,
        "reason": "steps[V100-32GB] has 30.0 hours of data in all, fewer than the 36 hours training needs"}])


def test_training_window_samples_and_baseline_quantiles_by_hand():
    """10 GPUs in even hours after T0, 20 in odd ones, to 72 h; trained at 1 h from since 24 h to until 60 h
    (exactly 36 hours). Origins 24 h .. 59 h (the last one's target at until), 35 x 12 + 1 = 421; the window
    is 24 h .. 60 h. Every origin has a full day behind it: 144 grid samples of 10, 144 of 20 and y(t - 24 h)
    = y(t), so the scale is (4320 + y(t)) / 289. The last value's relative error is +10 x 289 / 4330 in even
    hours (216 origins) and -10 x 289 / 4340 in odd ones (205): more than a tenth are the largest, so its
    90th percentile is 2890 / 4330. Yesterday at the target's time is the outcome (a 2-hour period): 0."""
    series = _steps(*((k, 10 if k % 2 == 0 else 20) for k in range(73)))
    trained = DemandModel.train([series], horizons_minutes=(60,), since_utc=T0 + timedelta(hours=24),
                                until_utc=T0 + timedelta(hours=60), candidates=FAST)
    m = trained.metadata
    assert (m["samples"], m["skipped_series"]) == ({"60": 421}, [])
    assert m["training_window_utc"] == ["2020-05-02T00:00:00Z", "2020-05-03T12:00:00Z"]
    assert m["training_until_utc"] == "2020-05-03T12:00:00Z"
    assert m["baseline_residual_q90"]["60"] == pytest.approx({"last_value": 2890 / 4330, "seasonal_naive": 0.0})



def test_hyperparameters_are_fitted_on_targets_before_the_validation_slice(monkeypatch):
    """The series of test_training_window_samples_and_baseline_quantiles_by_hand, with a regressor that
    records what it is given and predicts no change, trained from 24 h to until 60 h 40 m: origins 24 h ..
    59 h 40 m (429), a window of 36 h 40 m, whose 70% (25 h 40 m) falls on the grid. Each candidate is fitted
    on the origins whose target is at most 70% in (24 h .. 48 h 40 m, 297 of them: the last one's target is
    exactly there), validated on the origins from 70% on (49 h 40 m, exactly there, .. 59 h 40 m: 121), and
    the chosen one refitted on all 429; then the training scores predict all 429 once per quantile. The target
    is the change in units of the scale: +10 x 289 / 4330 from an even hour (the first 12, then 153 of the
    297), -10 x 289 / 4340 from an odd one; each sample weighted by its scale, 4330 / 289 or 4340 / 289."""
    import sklearn.ensemble

    calls = []

    class Recorder:
        def __init__(self, **params) -> None:
            self.params = params

        def fit(self, X, y, sample_weight=None):  # noqa: ANN001, ANN201
            calls.append(("fit", len(X), np.asarray(y).copy(), np.asarray(sample_weight).copy()))
            return self

        def predict(self, X):  # noqa: ANN001, ANN201
            calls.append(("predict", len(X)))
            return np.zeros(len(X))

    monkeypatch.setattr(sklearn.ensemble, "HistGradientBoostingRegressor", Recorder)
    series = _steps(*((k, 10 if k % 2 == 0 else 20) for k in range(73)))
    DemandModel.train([series], horizons_minutes=(60,), since_utc=T0 + timedelta(hours=24),
                      until_utc=T0 + timedelta(hours=60, minutes=40), candidates=FAST)
    assert [c[:2] for c in calls] == [("fit", 297), ("predict", 121), ("fit", 429)] * 2 + [("predict", 429)] * 2
    up, down = 10 * 289 / 4330, -10 * 289 / 4340
    _, _, target, weight = calls[0]
    assert list(target[:13]) == pytest.approx([up] * 12 + [down]) and (target > 0).sum() == 153
    assert set(np.round(target, 12)) == {round(up, 12), round(down, 12)}
    assert list(weight[:13]) == pytest.approx([4330 / 289] * 12 + [4340 / 289])


def test_a_series_too_short_for_a_horizon_is_refused_naming_it_and_what_it_needs():
    """40 hours of data: more than the 36 hours a series needs to be kept, so it is. At 6 h the fitting slice
    holds the origins whose target is within 70% of the window (28 h), so origins up to 22 h: none has a day
    behind it, and seasonal_change (y(t + h - 24 h) - y(t - 24 h)) is missing in every fit sample. scikit-learn's binning then stopped
    training with 'window shape cannot be larger than input array shape' (the CLI printed it alone, exit 2;
    found by mutation testing, 2026-11-28). Now a refusal names the features, the hours a series needs at
    that horizon ((24 h + 6 h) / 0.7 = 42.9) and each series' hours. At 1 h (35.7 hours needed) it trains,
    and at 6 h with 43 hours it does too."""
    with pytest.raises(ValueError) as info:
        DemandModel.train([_steps((0, 5), (12, 6), (24, 5), (40, 7))], horizons_minutes=(360,), candidates=FAST)
    assert str(info.value) == (
        "cannot train at horizon 6 h: no series has a fitting sample with seasonal_change (a day of history "
        "before the origin), so a series needs at least 42.9 hours inside the training window there; "
        "steps[V100-32GB] has 40.0. Give longer series, or leave the horizon out (--horizons)")
    assert DemandModel.train([_steps((0, 5), (12, 6), (24, 5), (40, 7))], horizons_minutes=(60,),
                             candidates=FAST).horizons_minutes == (60,)
    assert DemandModel.train([_steps((0, 5), (12, 6), (24, 5), (43, 7))], horizons_minutes=(360,),
                             candidates=FAST).horizons_minutes == (360,)


def test_a_short_series_beside_a_long_one_trains_at_6_hours():
    """The 40-hour series has no seasonal features in its fitting slice at 6 h, the 4-day one has: training
    goes on, and the calibration on the other series skips the fit that would have only the short series
    (scikit-learn could not bin the seasonal features there)."""
    short = _steps((0, 5), (12, 6), (24, 5), (40, 7))
    model = DemandModel.train([short, synthetic(days=4)], horizons_minutes=(360,), candidates=FAST)
    assert model.horizons_minutes == (360,)


def test_training_needs_20_validation_origins():
    """61 hours of data: the validation slice starts at 70% of the window, 42 h 42 m, so from 42 h 45 m. At a
    horizon of 1000 minutes the last origin is 61 h - 1000 min = 44 h 20 m: 20 validation origins, so it
    trains, on 2660 / 5 + 1 = 533 samples. At 1005 minutes the last origin is 44 h 15 m, 19 validation
    origins: refused, saying why (532 samples)."""
    series = _steps((0, 5), (12, 6), (24, 5), (61, 7))
    trained = DemandModel.train([series], horizons_minutes=(1000,), candidates=FAST)
    assert trained.metadata["samples"] == {"1000": 533}
    with pytest.raises(ValueError, match=r"^too little history to train at horizon 1005 min \(532 samples\); give "
                                         r"longer series \(at least a few days\)$"):
        DemandModel.train([series], horizons_minutes=(1005,), candidates=FAST)


def test_training_messages_name_the_horizon_as_the_cli_does():
    """Horizons are named in hours when whole ("1 h", "40 h"), else in minutes, in every refusal and progress
    line, as in "cannot train at horizon 6 h" (before, most said "horizon 60 min"). 61 hours of data at 17 h
    (1020 min): origins from 0 to 44 h, 2640 / 5 + 1 = 529 of them, and only 16 from the validation slice's
    42 h 45 m (as in test_training_needs_20_validation_origins)."""
    series = _steps((0, 5), (12, 6), (24, 5), (61, 7))
    with pytest.raises(ValueError, match=r"^too little history to train at horizon 17 h \(529 samples\); give "
                                         r"longer series \(at least a few days\)$"):
        DemandModel.train([series], horizons_minutes=(1020,), candidates=FAST)
    lines: list[str] = []
    DemandModel.train([synthetic(days=4)], horizons_minutes=(60,), candidates=FAST, progress=lines.append)
    assert any(line.startswith("horizon 1 h, quantile 0.5: fitting on ") for line in lines), lines
    assert any(line.startswith("horizon 1 h, quantile 0.9: fitting on ") for line in lines), lines
    assert all(line.startswith("horizon 1 h, quantile ") for line in lines), lines


@pytest.mark.parametrize("text", [
    "2020-05-01T00:00:00Z", "2020-05-01T05:30:00+05:30", "2020-05-01 00:00:00.5-07:00", "2020-05-01T00:00Z",
    "2020-05-01T00:00:00", "2020-05-01", "yesterday", "2020-13-01T00:00:00Z", "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59-01:00", "1e9",
])
def test_a_demand_series_time_is_a_job_spec_timestamp(text: str) -> None:
    """A demand series' time_utc and a job's deadline_utc are one kind of
    value: both parse with the same function (their messages differ, each
    worded for its file); a text is a time in both or in neither, the same
    instant."""
    from fleetctl.jobspec import parse_utc_timestamp

    try:
        expected = parse_utc_timestamp(text).timestamp()
    except ValueError:
        expected = None
    try:
        (series,) = parse_demand_series(f"time_utc,gpu_model,gpus\n{text},A100-80GB,4\n", "d.csv")
        got = float(series.times_s[0])
    except SpecError as exc:
        assert exc.issues[0].field_path == "time_utc", exc
        got = None
    assert got == expected


# --------------------------------------------------------------------------- samples, metrics, evaluation by hand


def _steps(*points: tuple[float, float]) -> DemandSeries:
    """A series from (hours after T0, GPUs) points."""
    return DemandSeries("steps", "V100-32GB", np.array([T0.timestamp() + h * 3600 for h, _ in points]),
                        np.array([float(g) for _, g in points]))


def test_samples_reach_a_target_exactly_at_the_series_end_or_until():
    """Hour k holds k GPUs, to 26 h (the end). Horizon 1 h with a day of history: origins every 5 minutes
    from 24 h to 25 h, 13 of them, the last one's target exactly the end; its level 25 and outcome 26, the
    others' 24 and 25; the seasonal forecast y(t + 1 h - 24 h) is 1, then 2 at 25 h. np.arange(first,
    hi + 1e-9) dropped that origin: at 1.6e9 seconds 1e-9 is lost to rounding. So did it the origin whose
    target is exactly until (training's split): with until 25 h 30 the origins run to 24 h 30, 7 of them."""
    series = _steps(*((k, k) for k in range(27)))
    s = build_samples(series, 60, full_day=True)
    assert list((s.origins_s - T0.timestamp()) / 300) == list(range(288, 301))
    assert list(s.level) == [24.0] * 12 + [25.0]
    assert list(s.outcome) == [25.0] * 12 + [26.0]
    assert list(s.seasonal) == [1.0] * 12 + [2.0]
    until = build_samples(series, 60, until_s=T0.timestamp() + 25.5 * 3600, full_day=True)
    assert list((until.origins_s - T0.timestamp()) / 300) == list(range(288, 295))
    # half a second short of 26 h, the origin at 25 h would need a target past the end
    short = DemandSeries("steps", "V100-32GB", np.append(series.times_s[:-1], series.times_s[-1] - 0.5), series.gpus)
    assert len(build_samples(short, 60, full_day=True).origins_s) == 12



def test_samples_start_on_the_grid_at_or_after_the_first_observation():
    """3 GPUs from 00:02, 7 from 02:00 (the end): origins from 00:05, the grid point after the start, to
    01:00, 12 of them (floor would put one at 00:00, before any data). A series on the grid from 00:00 to
    01:00, exactly one horizon long, has the one origin at its start. Grid samples before the first
    observation are missing, not the first value: at 00:05 the only known sample is y(00:05) = 3, so
    the scale is 3, and the day's minimum and maximum are 1 (in units of the scale)."""
    later = build_samples(_steps((2 / 60, 3), (2, 7)), 60)
    assert (later.origins_s[0] - T0.timestamp(), len(later.origins_s)) == (300, 12)
    assert (later.scale[0], later.level[0], later.outcome[0]) == (3.0, 3.0, 3.0)
    x = later.X[0]
    assert (x[FEATURES.index("min_24h")], x[FEATURES.index("max_24h")], x[FEATURES.index("mean_1h")]) == (1, 1, 1)
    assert np.isnan(x[FEATURES.index("change_15m")]) and np.isnan(x[FEATURES.index("seasonal_level")])
    on_grid = build_samples(_steps((0, 3), (1, 7)), 60)
    assert list(on_grid.origins_s) == [T0.timestamp()] and (on_grid.level[0], on_grid.outcome[0]) == (3.0, 7.0)

def test_features_with_less_than_a_day_of_history():
    """6 GPUs from half a second after T0 (a Friday), 9 from 00:10 to the end (02:00). Horizon 1 h: origins
    from 00:05, the first grid point at or after the first observation (00:00 is half a second before it), to
    01:00, 12 of them. Grid samples before the first observation are missing and count in nothing. At 00:05
    the one known sample is 6: scale 6, and none differs from the level: 24 hours since a change. At 00:10,
    samples 9 and 6: scale 7.5, level 9 / 7.5 = 1.2, the change 5 minutes back. At 00:15, 9, 9 and 6: scale
    8, level 9 / 8 = 1.125, the change 10 minutes back; the last hour's and 6 hours' means 8 / 8, maximum
    9 / 8, minimum 6 / 8, standard deviation sqrt((1 + 1 + 4) / 3) / 8; the change over 15 minutes (to 00:00)
    and yesterday's levels are missing."""
    series = DemandSeries("steps", "V100-32GB", T0.timestamp() + np.array([0.5, 600.0, 7200.0]),
                          np.array([6.0, 9.0, 9.0]))
    s = build_samples(series, 60)
    assert list((s.origins_s - T0.timestamp()) / 300) == list(range(1, 13))
    assert (list(s.scale[:3]), list(s.level[:3]), s.outcome[0]) == ([6.0, 7.5, 8.0], [6.0, 9.0, 9.0], 9.0)
    got = [dict(zip(FEATURES, x)) for x in s.X[:3]]
    assert [g["level"] for g in got] == pytest.approx([1.0, 1.2, 1.125])
    assert [g["hours_since_change"] for g in got] == pytest.approx([24.0, 1 / 12, 1 / 6])
    assert {k: got[2][k] for k in ("mean_1h", "mean_6h", "max_24h", "min_24h", "hour_of_day_utc",
                                   "day_of_week_utc")} == {"mean_1h": 1.0, "mean_6h": 1.0, "max_24h": 1.125,
                                                           "min_24h": 0.75, "hour_of_day_utc": 0.25,
                                                           "day_of_week_utc": 4.0}
    assert got[2]["std_24h"] == pytest.approx(np.sqrt(2) / 8)
    assert all(np.isnan(got[2][k]) for k in ("change_15m", "change_6h", "seasonal_level", "seasonal_change"))


def test_features_hand_computed():
    """The origin 24 h after T0 (a Saturday, 00:00 UTC) at horizon 1 h, on 5-minute grid samples k = 0 (the
    origin) .. 288 (T0) back: 20 GPUs at k 0-2 (from 23 h 50), 2 at k 3-11 (from 23 h 05), 26 at k 12-35
    (from 21 h 05), 25 at k 36-71 (from 18 h 05), 4 at k 72-276 (from 1 h) and 39 at k 277-288 (from T0).
    The scale is (3 x 20 + 9 x 2 + 24 x 26 + 36 x 25 + 205 x 4 + 12 x 39) / 289 = 2890 / 289 = 10; the
    level 20 / 10; the changes back to k 3, 12, 36 and 72: (20 - 2, 20 - 26, 20 - 25, 20 - 4) / 10; the
    last hour's 13 samples (k 0-12) (60 + 18 + 26) / 13 = 8 (their median is 2); the last 6 hours' 73
    (k 0-72) 1606 / 73 = 22 (median 25); the day's maximum 39, minimum 2, standard deviation from the mean
    square 61492 / 289; 0.25 hours back to the first sample unlike the level (k 3). Yesterday at the
    target's time (1 h) is 4, and 39 at the origin's: seasonal 0.4, its change (4 - 39) / 10. A blip of 7
    from 1 h 00 m 30 s to 1 h 02 m falls between grid samples and the seasonal time."""
    series = _steps((0, 39), (1, 4), (1 + 0.5 / 60, 7), (1 + 2 / 60, 4), (18 + 5 / 60, 25), (21 + 5 / 60, 26),
                    (23 + 5 / 60, 2), (23 + 50 / 60, 20))
    X, scale, level = features(series, np.array([T0.timestamp() + 24 * 3600]), 60)
    assert (list(scale), list(level)) == ([10.0], [20.0])
    got = dict(zip(FEATURES, X[0]))
    assert got.pop("std_24h") == pytest.approx(np.sqrt(61492 / 289 - 10 ** 2) / 10)
    assert got == pytest.approx({
        "level": 2.0, "change_15m": 1.8, "change_1h": -0.6, "change_3h": -0.5, "change_6h": 1.6,
        "mean_1h": 0.8, "mean_6h": 2.2, "max_24h": 3.9, "min_24h": 0.2, "hours_since_change": 0.25,
        "seasonal_level": 0.4, "seasonal_change": -3.5, "hour_of_day_utc": 0.0, "day_of_week_utc": 5.0})


def test_the_scale_is_the_recent_mean_or_1_gpu_when_that_is_0():
    """A day of 0.5 GPUs: the scale is 0.5 and the level 0.5 / 0.5 = 1. A day of 0 GPUs: the mean is 0, so
    the scale is 1 GPU (not 0, which would make every feature infinite or NaN), every change 0."""
    for gpus, expected_scale, expected_level in ((0.5, 0.5, 1.0), (0.0, 1.0, 0.0)):
        X, scale, _ = features(_steps((0, gpus), (24, gpus)), np.array([T0.timestamp() + 24 * 3600]), 60)
        assert list(scale) == [expected_scale]
        got = dict(zip(FEATURES, X[0]))
        assert (got["level"], got["change_1h"], got["max_24h"], got["std_24h"]) == (expected_level, 0.0,
                                                                                    expected_level, 0.0)


def test_pinball_coverage_and_mae_hand_computed():
    """y 10 against 8, 10, 13: under by 2, exact, over by 3. As the 90th percentile: 0.9 x 2, 0, 0.1 x 3
    (mean 0.7; weighted 1, 1, 2: 2.4 / 4); as the median: 0.5 x 2, 0, 0.5 x 3 (2.5 / 3). The scores of a
    median 9, 10, 10 and that 90th percentile: MAE (1 + 0 + 0) / 3; the exact forecast covers its outcome."""
    y, pred = np.array([10.0, 10.0, 10.0]), np.array([8.0, 10.0, 13.0])
    assert demand.pinball(y, pred, 0.9) == pytest.approx(0.7)
    assert demand.pinball(y, pred, 0.9, weights=np.array([1.0, 1.0, 2.0])) == pytest.approx(0.6)
    assert demand.pinball(y, pred, 0.5) == pytest.approx(2.5 / 3)
    assert demand._scores(y, np.array([9.0, 10.0, 10.0]), pred) == {
        "mae": 0.333333, "pinball_p90": 0.7, "p90_coverage": 0.666667}


def test_scores_are_rounded_to_6_decimals_each():
    """Outcomes 1 then six 0s; a median of 1/3 everywhere and a 90th percentile of 0 everywhere. MAE
    (2/3 + 6 x 1/3) / 7 = 8/21 = 0.3809523..; pinball 0.9 x 1 / 7 = 0.1285714.. (only the first outcome is
    above it); coverage 6/7 = 0.8571428..: each rounded to 6 decimals, not 5 or 7."""
    y = np.array([1.0] + [0.0] * 6)
    assert demand._scores(y, np.full(7, 1 / 3), np.zeros(7)) == {
        "mae": 0.380952, "pinball_p90": 0.128571, "p90_coverage": 0.857143}


class _Change:
    """A regressor that predicts the same change (in units of the scale) everywhere."""

    def __init__(self, change: float) -> None:
        self.change = change

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.full(len(X), self.change)


def _fixed_model(median_change: float, p90_change: float, *, shrink: float = 1.0, offset: float = 0.0,
                 baselines: tuple[float, float] = (0.0, 0.0)) -> DemandModel:
    """A 1-hour model whose forecasts are known: ``y(t) + s x shrink x median_change`` and
    ``y(t) + s x (p90_change + offset)``; the baselines' 90th percentiles add ``s x`` each of ``baselines``."""
    return DemandModel({"60m_q50": _Change(median_change), "60m_q90": _Change(p90_change)}, (60,),
                       {"adjustments": {"60m_q50": shrink, "60m_q90": offset},
                        "baseline_residual_q90": {"60": dict(zip(("last_value", "seasonal_naive"), baselines))}})


def test_evaluate_hand_computed_against_both_baselines():
    """10 GPUs from T0 but 299 in [1 h, 1 h 05); 12 from 24 h 10, 11 from 25 h 05 to the end (26 h).
    Horizon 1 h from 24 h (since) with the target at most 25 h 05 (until): the origins 24 h and 24 h 05. Each
    has 289 grid samples over the last day (t - 24 h to t), one of them 299 (at 1 h): the scale is
    (288 x 10 + 299) / 289 = 11 and the level 10; the outcomes y(25 h) = 12 and y(25 h 05) = 11 (an
    observation counts from its own time); the seasonal forecasts y(1 h) = 299 and y(1 h 05) = 10.
    The model's median keeps all of a predicted change of 0.1 (10 + 11 x 0.1 = 11.1), its 90th percentile
    0 plus an offset of 2/11 (10 + 11 x 2/11 = 12, which covers the outcome 12). The baselines' 90th
    percentiles add 11 x 0.25 (last value: 12.75) and 11 x 0.5 (seasonal: 304.5, 15.5). A series without a
    day of history in the window is named, not scored."""
    series = _steps((0, 10), (1, 299), (1 + 5 / 60, 10), (24 + 10 / 60, 12), (25 + 5 / 60, 11), (26, 11))
    young = DemandSeries("young", "A100-80GB", series.times_s[3:], series.gpus[3:])  # from 24 h 10
    model = _fixed_model(0.1, 0.0, offset=2 / 11, baselines=(0.25, 0.5))
    r = evaluate(model, [young, series], 60, since_utc=T0 + timedelta(hours=24),
                 until_utc=T0 + timedelta(hours=25, minutes=5))
    assert r["samples"] == 2 and r["_skipped"] == ["young[A100-80GB]"]
    # |12 - 11.1| + |11 - 11.1| = 1.0; pinball of 12: (0 + 0.1 x 1) / 2; both outcomes at most 12
    assert (r["mae"], r["pinball_p90"], r["p90_coverage"]) == (0.5, 0.05, 1.0)
    assert r["baselines"] == {
        "last_value": {"mae": 1.5, "pinball_p90": 0.125},  # (2 + 1) / 2; (0.1 x 0.75 + 0.1 x 1.75) / 2
        "seasonal_naive": {"mae": 144.0, "pinball_p90": 14.85},  # (287 + 1) / 2; (0.1 x 292.5 + 0.1 x 4.5) / 2
    }
    [(name, target_s, outcome, p50, p90, last)] = r["_curves"]
    assert name == "steps[V100-32GB]" and list(target_s - T0.timestamp()) == [25 * 3600, 25 * 3600 + 300]
    assert list(outcome) == [12, 11] and list(p50) == pytest.approx([11.1, 11.1])
    assert list(p90) == [12, 12] and list(last) == [10, 10]
    # the whole series from 24 h: 13 origins, to the target at its end (26 h)
    assert evaluate(model, [series], 60)["samples"] == 13
    with pytest.raises(ValueError, match=r"the model has no 15-minute horizon \(it has 60 minutes\)"):
        evaluate(model, [series], 15)


def test_evaluate_hand_computed_since_after_a_day_scores_to_6_decimals_and_names_the_window():
    """The series of test_evaluate_hand_computed_against_both_baselines. From the start, 13 origins (24 h to
    25 h); since 24 h 05 leaves 12. The last value over the 13: levels 10, 10 and then 12 (from 24 h 10),
    outcomes 12 (y(25 h)) and then 11: MAE (2 + 1 + 11 x 1) / 13 = 1.076923. On the two origins 24 h and
    24 h 05 (scale 11), a last-value 90th percentile of 11 x 7/33 above the level is 12 1/3, over both
    outcomes: pinball (0.1 x 1/3 + 0.1 x 4/3) / 2 = 1/12 = 0.083333. A series with no origin is named with
    the window: its start when only --until is given, both times when both are."""
    series = _steps((0, 10), (1, 299), (1 + 5 / 60, 10), (24 + 10 / 60, 12), (25 + 5 / 60, 11), (26, 11))
    model = _fixed_model(0.1, 0.0, offset=2 / 11, baselines=(7 / 33, 0.5))
    whole = evaluate(model, [series], 60)
    assert (whole["samples"], whole["baselines"]["last_value"]["mae"]) == (13, 1.076923)
    assert evaluate(model, [series], 60, since_utc=T0 + timedelta(hours=24, minutes=5))["samples"] == 12
    until = T0 + timedelta(hours=25, minutes=5)
    two = evaluate(model, [series], 60, since_utc=T0 + timedelta(hours=24), until_utc=until)
    assert (two["samples"], two["baselines"]["last_value"]["pinball_p90"]) == (2, 0.083333)
    young = DemandSeries("young", "A100-80GB", series.times_s[3:], series.gpus[3:])  # from 24 h 10
    with pytest.raises(ValueError, match=r"outcome inside the evaluation window \(the series' start \.\. "
                                         r"2020-05-02T01:05:00Z\): young\[A100-80GB\]$"):
        evaluate(model, [young], 60, until_utc=until)
    with pytest.raises(ValueError, match=r"outcome inside the evaluation window \(2020-05-02T00:00:00Z \.\. "
                                         r"2020-05-02T01:05:00Z\): young\[A100-80GB\]$"):
        evaluate(model, [young], 60, since_utc=T0 + timedelta(hours=24), until_utc=until)


def test_predict_hand_computed_per_gpu_model():
    """A model whose median is y + 0.5 s and 90th percentile y + s, now = T0 + 1 h. L4: 2 then 4 GPUs at
    T0 (the last counts), so the 13 grid samples from T0 to now are 4 (the earlier ones missing): scale 4,
    forecasts 6 and 8. A10G: 6 GPUs at now itself (at or before now counts): scale 6, 9 and 12. T4: 0 at T0:
    scale 1 GPU, 0.5 and 1. Sorted by GPU model; naive times are UTC. A NaN or a negative count (even
    -0.5, after a good one) is refused, naming the GPU model; so is a frame without a column. A series with
    nothing at or before now has no forecast."""
    model = _fixed_model(0.5, 1.0)
    now = T0 + timedelta(hours=1)
    frame = pd.DataFrame({"time_utc": [T0, T0, now, T0, now + timedelta(minutes=1)],
                          "gpu_model": ["L4", "L4", "A10G", "T4", "T4"], "gpus": [2, 4, 6, 0, 9]})
    expected = (DemandForecast("A10G", 60, 9.0, 12.0), DemandForecast("L4", 60, 6.0, 8.0),
                DemandForecast("T4", 60, 0.5, 1.0))
    assert model.predict(frame, now) == expected
    naive = frame.assign(time_utc=[t.replace(tzinfo=None) for t in frame["time_utc"]])
    assert model.predict(naive, now) == expected
    for bad in (float("nan"), -0.5):
        two = pd.DataFrame({"time_utc": [T0, T0 + timedelta(minutes=5)], "gpu_model": "L4", "gpus": [2, bad]})
        with pytest.raises(ValueError, match=r"^L4: GPU counts must be finite and at least 0$"):
            model.predict(two, now)
    with pytest.raises(ValueError, match=r"lacks the column\(s\) gpus$"):
        model.predict(frame.drop(columns="gpus"), now)
    assert model.forecast(_steps((2, 4)), now) == ()


def test_cli_evaluate_prints_the_hand_computed_scores_as_json_and_refuses_bad_options(tmp_path):
    """test_evaluate_hand_computed_against_both_baselines through the CLI: its fixed model saved, its series
    written as a demand CSV; --format json prints the same scores (without the curves and the skipped, indented
    by 2), and so does --until alone (the first origin with a day of history is since's 24 h), with no note;
    the table too. A bad --format, a --horizon that is not one or that the model lacks, and a window that
    ends where it starts exit 2, each said. Beside a second series from 2 h to 27 h, the series cover 00:00
    (the first's start) .. 03:00 the next day (the second's end): a --since at that end or an --until at that
    start is refused. A series without a day of history is refused with no hint about a default --since."""
    from forecasting import modelfiles

    model = _fixed_model(0.1, 0.0, offset=2 / 11, baselines=(0.25, 0.5))
    model.metadata.update({"kind": "demand", "format_version": demand.FORMAT_VERSION, "horizons_minutes": [60],
                           "features": list(FEATURES), "grid_minutes": 5.0, "versions": modelfiles.versions()})
    model.save(tmp_path / "m")

    def write(name: str, series: DemandSeries) -> str:
        (tmp_path / name).write_text(demand_csv.format_demand_series(
            [(datetime.fromtimestamp(t, timezone.utc), series.gpu_model, g)
             for t, g in zip(series.times_s, series.gpus)]))
        return str(tmp_path / name)

    steps = write("steps.csv", _steps((0, 10), (1, 299), (1 + 5 / 60, 10), (24 + 10 / 60, 12), (25 + 5 / 60, 11),
                                      (26, 11)))
    evaluate_ = ["forecast", "evaluate", "demand", "--model", str(tmp_path / "m"), "--series", steps]
    expected = {"samples": 2, "mae": 0.5, "pinball_p90": 0.05, "p90_coverage": 1.0,
                "baselines": {"last_value": {"mae": 1.5, "pinball_p90": 0.125},
                              "seasonal_naive": {"mae": 144.0, "pinball_p90": 14.85}}}
    for window in (["--since", "2020-05-02T00:00:00Z", "--until", "2020-05-02T01:05:00Z"],
                   ["--until", "2020-05-02T01:05:00Z"]):
        result = runner.invoke(app, [*evaluate_, *window, "--format", "json"])
        assert result.exit_code == 0, (window, result.output)
        assert result.stdout == json.dumps(expected, indent=2) + "\n"
        assert result.stderr == ""  # no note: the model has no training window to start before
    table = runner.invoke(app, [*evaluate_, "--until", "2020-05-02T01:05:00Z"])
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[0] == "demand +60 min, 2 origins (GPUs)"
    assert table.stdout.splitlines()[4:7] == [  # names to the left, numbers to the right
        "│ model          │   0.500 │       0.050 │       100.0% │",
        "│ last_value     │   1.500 │       0.125 │              │",
        "│ seasonal_naive │ 144.000 │      14.850 │              │"]
    late = write("late.csv", _steps((2, 5), (27, 5)))
    cover = "they cover 2020-05-01T00:00:00Z .. 2020-05-02T03:00:00Z"
    for args, said in ((["--format", "yaml"], "--format must be table or json (got 'yaml')"),
                       (["--horizon", "soon"], "--horizon: "),
                       (["--horizon", "6h"], "has no 6h horizon (it has 60 min)"),
                       (["--since", "2020-05-02T00:00:00Z", "--until", "2020-05-02T00:00:00Z"],
                        "--until (2020-05-02T00:00:00Z) must be after --since (2020-05-02T00:00:00Z)"),
                       (["--series", late, "--since", "2020-05-02T03:00:00Z"],
                        f"--since 2020-05-02T03:00:00Z is after the series end: {cover}"),
                       (["--series", late, "--until", "2020-05-01T00:00:00Z"],
                        f"--until 2020-05-01T00:00:00Z is before the series start: {cover}")):
        result = runner.invoke(app, [*evaluate_, *args])
        assert result.exit_code == 2 and said in " ".join(result.output.split()), (args, result.output)
    # a series without a day of history: refused, with no hint about a default --since (the model has no
    # training window to default to)
    young = write("young.csv", _steps((24 + 10 / 60, 12), (26, 11)))
    result = runner.invoke(app, ["forecast", "evaluate", "demand", "--model", str(tmp_path / "m"), "--series", young])
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "no series has 24 hours of history" in said and "--since" not in said, said


def test_cli_evaluate_notes_name_paths_as_they_are(tmp_path, monkeypatch):
    """The fixed model of test_evaluate_hand_computed_against_both_baselines, trained until 24 h on its series
    (a file whose name holds '[vc]', which rich would take for a style tag and drop). --since at exactly that
    end: no note that it is before it (5 minutes earlier: one), one that the series was a training series,
    named as it is. A young series beside it, with no origin, is noted as not scored; the report's path is
    said as it is; trained on all of the series, it is scored from its start. Alone, the young series fails
    with no hint about the default --since, which was given."""
    from forecasting import modelfiles

    monkeypatch.chdir(tmp_path)  # short relative paths: no line is wrapped inside one
    series = _steps((0, 10), (1, 299), (1 + 5 / 60, 10), (24 + 10 / 60, 12), (25 + 5 / 60, 11), (26, 11))
    young = DemandSeries("young", "A100-80GB", series.times_s[3:], series.gpus[3:])  # from 24 h 10
    for name, s in (("steps[vc].csv", series), ("young[vc].csv", young)):
        Path(name).write_text(demand_csv.format_demand_series(
            [(datetime.fromtimestamp(t, timezone.utc), s.gpu_model, g) for t, g in zip(s.times_s, s.gpus)]))
    model = _fixed_model(0.1, 0.0, offset=2 / 11, baselines=(0.25, 0.5))
    model.metadata.update({"kind": "demand", "format_version": demand.FORMAT_VERSION, "horizons_minutes": [60],
                           "features": list(FEATURES), "grid_minutes": 5.0, "versions": modelfiles.versions(),
                           "training_until_utc": "2020-05-02T00:00:00Z",
                           "training_series": [{"sha256": demand.series_digest(series)}]})
    model.save("m")
    evaluate_ = ["forecast", "evaluate", "demand", "--model", "m", "--since", "2020-05-02T00:00:00Z", "--until",
                 "2020-05-02T01:05:00Z", "--format", "json"]
    result = runner.invoke(app, [*evaluate_, "--series", "steps[vc].csv", "--series", "young[vc].csv", "--report",
                                 "report[vc]"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["samples"] == 2
    notes = " ".join(result.stderr.split())
    assert notes == ("note: steps[vc].csv[V100-32GB] was also a training series (scored only from "
                     "2020-05-02T00:00:00Z) note: not scored (no origin with 24 hours of history and the 60-minute "
                     "outcome inside the window): young[vc].csv[A100-80GB] "
                     "wrote report[vc]/demand_forecast_60m.png"), notes
    early = runner.invoke(app, ["forecast", "evaluate", "demand", "--model", "m", "--since", "2020-05-01T23:55:00Z",
                                "--series", "steps[vc].csv"])
    assert early.exit_code == 0 and ("note: --since is before the end of the model training window "
                                     "(2020-05-02T00:00:00Z): the scores include origins of the training period"
                                     ) in " ".join(early.stderr.split()), early.output
    model.metadata["training_until_utc"] = None  # a model trained on all of the series: scored from its start
    model.save("all")
    result = runner.invoke(app, ["forecast", "evaluate", "demand", "--model", "all", "--series", "steps[vc].csv"])
    assert result.exit_code == 0 and "note: steps[vc].csv[V100-32GB] was also a training series (scored only " \
        "from its start)" in " ".join(result.stderr.split()), result.output
    result = runner.invoke(app, [*evaluate_, "--series", "young[vc].csv"])
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and said.endswith("(2020-05-02T00:00:00Z .. 2020-05-02T01:05:00Z): "
                                                   "young[vc].csv[A100-80GB]"), said


def test_quantiles_floor_the_median_at_0_and_the_90th_percentile_at_the_median():
    """Level 10, scale 4: a median change of -1 keeps half (shrink 0.5): 10 - 2 = 8; of -3: 10 - 6 = 4, and
    of -6 with all kept, 10 - 24, at least 0. The 90th percentile 10 + 4 x (0.5 + 0.25) = 13; a change of
    -2 (10 - 7 = 3) is raised to the median it falls below."""
    X, scale, level = np.zeros((1, len(FEATURES))), np.array([4.0]), np.array([10.0])
    def p50_p90(model: DemandModel) -> tuple[float, float]:
        p50, p90 = model.quantiles(X, scale, level, 60)
        return float(p50[0]), float(p90[0])

    assert p50_p90(_fixed_model(-1, 0.5, shrink=0.5, offset=0.25)) == (8.0, 13.0)
    assert p50_p90(_fixed_model(-3, -2, shrink=0.5, offset=0.25)) == (4.0, 4.0)
    assert p50_p90(_fixed_model(-6, -2, offset=0.25)) == (0.0, 3.0)
    with pytest.raises(ValueError, match="no 360-minute horizon"):
        _fixed_model(0, 0).quantiles(X, scale, level, 360)


@USES_MODEL
def test_the_baselines_90th_percentiles_are_those_of_their_relative_errors_on_the_training_origins(model):
    """The definition (module docstring, "Baselines") restated on the training origins of the fixture's two
    series (hundreds of origins: too many to compute by hand): the 90th percentile of (y(t + h) - y(t)) / s,
    and of (y(t + h) - y(t + h - 24 h)) / s where yesterday is known (not the first day)."""
    parts = [build_samples(s, 60) for s in (synthetic(days=3, seed=1), synthetic(days=3, seed=2, size=16))]
    last_value = np.concatenate([(p.outcome - p.level) / p.scale for p in parts])
    seasonal = np.concatenate([(p.outcome - p.seasonal) / p.scale for p in parts])
    assert np.isnan(seasonal).sum() == 2 * (24 * 12 - 12)  # origins before 23 h have no yesterday
    assert model.metadata["baseline_residual_q90"]["60"] == pytest.approx(
        {"last_value": np.quantile(last_value, 0.9), "seasonal_naive": np.nanquantile(seasonal, 0.9)})
    assert model.metadata["baseline_residual_q90"]["60"]["seasonal_naive"] > 0.1  # not the no-yesterday 0.0
    assert model.metadata["samples"]["60"] == len(last_value)
