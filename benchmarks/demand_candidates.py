"""What each hyperparameter candidate of the demand model would score on the held-out clusters (a diagnostic).

    python benchmarks/demand_candidates.py /work/shared/data/helios-earth-vc-sequences

The same folds as ``benchmarks/demand_helios.py`` (each Helios Earth virtual
cluster held out in turn; trained on the other two up to the split, scored on
the held-out one after it), but trained once per entry of
``forecasting.demand.CANDIDATES`` alone (``DemandModel.train(candidates=(c,))``:
the same calibration, median rule and offsets, only the hyperparameters fixed).
It shows how far the choice made on the training window (``chosen``, the
candidate ``demand_helios.py`` reports) is from each fixed candidate on data
the choice could not see. It is a diagnostic, not a way to choose: choosing by
these numbers would be choosing on the test folds. Results: JSON on stdout (or
``--out``); ~3 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.demand_helios import SPLIT as HELIOS_SPLIT, VCS  # noqa: E402
from fleetctl.jobspec import parse_utc_timestamp  # noqa: E402
from forecasting.demand import CANDIDATES, DemandModel, evaluate  # noqa: E402
from forecasting.series import import_helios_sequence, read_demand_series, write_demand_series  # noqa: E402

HORIZONS = {"1h": 60, "6h": 360}
SPLIT = parse_utc_timestamp(HELIOS_SPLIT)  # the folds and split of demand_helios.py


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path, help="folder with earth_<vc>_sequence_1min.csv (helios-earth-vc-sequences)")
    ap.add_argument("--out", type=Path, help="write the JSON here (default: stdout)")
    args = ap.parse_args()
    series = {}
    with tempfile.TemporaryDirectory() as work:
        for vc in VCS:  # as `fleetctl trace import helios-sequence` writes it, and the CLI reads it back
            path = write_demand_series(import_helios_sequence(args.data / f"earth_{vc}_sequence_1min.csv").rows,
                                       Path(work) / f"{vc}.csv")
            series[vc] = read_demand_series(path)[0]
    rows = []
    for held in VCS:
        train = [series[v] for v in VCS if v != held]
        models = {"chosen": DemandModel.train(train, horizons_minutes=HORIZONS.values(), until_utc=SPLIT, seed=0)}
        for i, params in enumerate(CANDIDATES):
            print(f"fold {held}: candidate {i} {params}", file=sys.stderr)
            models[f"candidate_{i}"] = DemandModel.train(train, horizons_minutes=HORIZONS.values(), until_utc=SPLIT,
                                                         seed=0, candidates=(params,))
        for name, model in models.items():
            for label, h in HORIZONS.items():
                r = evaluate(model, [series[held]], h, since_utc=SPLIT)
                rows.append({"held_out": held, "horizon": label, "model": name,
                             "min_samples_leaf_q90": model.metadata["hyperparameters"][f"{h}m_q90"]["min_samples_leaf"],
                             "pinball_p90": r["pinball_p90"], "p90_coverage": r["p90_coverage"], "mae": r["mae"],
                             "last_value_pinball_p90": r["baselines"]["last_value"]["pinball_p90"]})
    out = {"command": f"python benchmarks/demand_candidates.py {args.data}", "candidates": list(CANDIDATES),
           "split_utc": HELIOS_SPLIT, "rows": rows}
    text = json.dumps(out, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
