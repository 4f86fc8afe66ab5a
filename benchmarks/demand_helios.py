"""Demand forecaster on the Helios Earth virtual clusters, held out by series and by time, through the CLI.

    python benchmarks/demand_helios.py /work/shared/data/helios-earth-vc-sequences

For each of the three virtual clusters (vc3sl, vcJkd, vcMod), in turn held
out: ``fleetctl forecast train demand`` on the *other two* up to the split
time (``--until``), then ``fleetctl forecast evaluate demand`` on the held-out
one from the split on (``--since``), at each horizon. The per-fold JSON of the
CLI is kept as it is; ``pooled`` weights each fold by its samples (all three
metrics are means over origins, so this is exact). The converted series and
the models go to ``--work`` (a temporary directory by default), never into the
repository; the results JSON and a forecast-versus-actual PNG per horizon of
the first fold go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

VCS = ("vc3sl", "vcMod", "vcJkd")
HORIZONS = ("15m", "1h", "6h")
SPLIT = "2020-05-21T00:00:00Z"
REPO = Path(__file__).resolve().parents[1]


def fleetctl(*args: str) -> str:
    cmd = [sys.executable, "-m", "fleetctl", *args]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr}")
    return done.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path, help="folder with earth_<vc>_sequence_1min.csv (helios-earth-vc-sequences)")
    ap.add_argument("--work", type=Path, help="where converted series and models go (default: a temporary folder)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "demand_helios.json")
    ap.add_argument("--split", default=SPLIT, help=f"the time split (default {SPLIT})")
    ap.add_argument("--seed", default="0")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="demand-helios-"))
    work.mkdir(parents=True, exist_ok=True)
    series = {}
    for vc in VCS:
        series[vc] = work / f"{vc}.csv"
        print(fleetctl("trace", "import", "helios-sequence", str(args.data / f"earth_{vc}_sequence_1min.csv"),
                       "-o", str(series[vc])).strip(), file=sys.stderr)
    folds = {}
    for i, held in enumerate(VCS):
        train = [v for v in VCS if v != held]
        model = work / f"model-without-{held}"
        cmd = ["forecast", "train", "demand", *sum((["--series", str(series[v])] for v in train), []),
               "--until", args.split, "--horizons", ",".join(HORIZONS), "--seed", args.seed, "-o", str(model)]
        print(f"fold {held}: training on {', '.join(train)}", file=sys.stderr)
        fleetctl(*cmd)
        meta = json.loads((model / "model.json").read_text())
        results = {}
        for h in HORIZONS:
            extra = ["--report", str(args.out.parent / "demand_helios_report")] if i == 0 else []
            results[h] = json.loads(fleetctl("forecast", "evaluate", "demand", "--model", str(model), "--series",
                                             str(series[held]), "--horizon", h, "--since", args.split,
                                             "--format", "json", *extra))
        folds[held] = {"trained_on": train, "training_window_utc": meta["training_window_utc"],
                       "hyperparameters": meta["hyperparameters"], "adjustments": meta["adjustments"],
                       "results": results}
    pooled = {}
    for h in HORIZONS:
        rs = [folds[v]["results"][h] for v in VCS]
        n = sum(r["samples"] for r in rs)

        def mean(get):  # noqa: ANN001, ANN202
            return round(sum(get(r) * r["samples"] for r in rs) / n, 6)

        pooled[h] = {"samples": n, "mae": mean(lambda r: r["mae"]), "pinball_p90": mean(lambda r: r["pinball_p90"]),
                     "p90_coverage": mean(lambda r: r["p90_coverage"]),
                     "baselines": {b: {k: mean(lambda r, b=b, k=k: r["baselines"][b][k]) for k in ("mae", "pinball_p90")}
                                   for b in ("last_value", "seasonal_naive")}}

    def criteria(r):  # noqa: ANN001, ANN202
        b = r["baselines"]
        return {"p90_pinball_below_both_baselines": r["pinball_p90"] < min(b["last_value"]["pinball_p90"],
                                                                           b["seasonal_naive"]["pinball_p90"]),
                "p90_coverage_in_85_95": 0.85 <= r["p90_coverage"] <= 0.95,
                "median_mae_not_worse_than_best_baseline": r["mae"] <= min(b["last_value"]["mae"],
                                                                           b["seasonal_naive"]["mae"])}

    out = {
        "what": "demand forecaster on Helios Earth VCs, leave-one-VC-out and split by time",
        "command": f"python benchmarks/demand_helios.py {args.data}",
        "split_utc": args.split,
        "train": f"the two other VCs, origins whose target is at or before {args.split}",
        "evaluate": f"the held-out VC, origins from {args.split} (every 5 minutes, 24 h of history before them)",
        "units": "GPUs",
        "folds": folds,
        "pooled": pooled,
        "criteria": {h: {"pooled": criteria(pooled[h]), **{v: criteria(folds[v]["results"][h]) for v in VCS}}
                     for h in HORIZONS},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
