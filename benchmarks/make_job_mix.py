"""Derive the benchmark job mix from the Alibaba GPU cluster trace v2023.

Reads the raw trace once (``/work/shared/data/alibaba-gpu-trace-v2023/`` by
default) and writes a small, committed distribution file,
``benchmarks/data/alibaba_2023_job_mix.json``, that the benchmarks sample from
with a seeded ``random.Random``. The benchmarks never read the raw trace.

What is taken from the trace (GPU pods only, ``num_gpu >= 1``):

* **pod shapes**: the joint distribution of (GPUs, vCPUs, memory, allowed GPU
  models, QoS) as counted rows. GPUs are ``num_gpu`` (1/2/4/8) of
  ``openb_pod_list_default.csv``; GPU-model constraints are the ``gpu_spec``
  column of ``openb_pod_list_gpuspec33.csv`` (the same pods, same order, with
  about a third of GPU pods given a constraint), mapped to the catalog's
  names by :data:`GPU_MODEL_MAP`. Fractional GPU pods (``gpu_milli < 1000``)
  count as one whole GPU: fleetctl places whole GPUs only.
* **runtimes**: percentiles of ``deletion_time - scheduled_time`` (hours) per
  priority class (pods never scheduled are left out). ``pod_phase`` is the phase
  at deletion: only the few Running pods deleted at the trace's last second are
  cut off by its end (right-censored there); the trace's README says every
  Running pod is, which the data does not bear out (docs/traces.md).

What is synthetic (the trace has no gangs and no checkpoint data), stored in
the file's ``synthetic`` section so the benchmarks read one source:

* gangs: 10 % of jobs get 2/4/8/16 workers (weights 0.4/0.3/0.2/0.1);
* checkpoints: a batch job longer than one hour is checkpointable with
  probability 0.5, every 30 minutes.

Undisclosed GPU codes ``G2``/``G3`` (Alibaba internal models) are mapped, by
default, to ``A100-40GB``/``A100-80GB`` (a guess: they are the trace's most
common modern GPUs); ``--undisclosed drop`` removes them from constraints
instead (a constraint left empty means "any GPU").

Usage::

    python benchmarks/make_job_mix.py [--trace DIR] [--out FILE] [--undisclosed map|drop]
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import re
import statistics
from pathlib import Path
from typing import Final

HERE: Final[Path] = Path(__file__).resolve().parent
DEFAULT_TRACE: Final[Path] = Path("/work/shared/data/alibaba-gpu-trace-v2023")
DEFAULT_OUT: Final[Path] = HERE / "data" / "alibaba_2023_job_mix.json"

#: Trace GPU codes -> fleetctl's normalised GPU model names.
GPU_MODEL_MAP: Final[dict[str, str]] = {
    "T4": "T4",
    "V100M16": "V100-16GB",
    "V100M32": "V100-32GB",
    "P100": "P100",
    "A10": "A10",
}
#: Undisclosed internal codes and what ``--undisclosed map`` turns them into.
UNDISCLOSED_MAP: Final[dict[str, str]] = {"G2": "A100-40GB", "G3": "A100-80GB"}

#: Trace QoS -> the benchmark policy's priority classes.
QOS_TO_PRIORITY: Final[dict[str, str]] = {
    "LS": "production",  # latency sensitive (services): on-demand only, not preemptible
    "Guaranteed": "production",
    "BE": "batch",  # best effort
    "Burstable": "batch",
}

SYNTHETIC: Final[dict[str, object]] = {
    "note": "not in the trace: chosen for the benchmark",
    "gang_fraction": 0.10,
    "gang_workers": {"2": 0.4, "4": 0.3, "8": 0.2, "16": 0.1},
    "checkpointable_fraction_of_batch_over_1h": 0.5,
    "checkpoint_interval_minutes": 30.0,
}

PERCENTILES: Final[int] = 100  # 101 cut points: 0, 1, ..., 100 %


def map_gpu_spec(spec: str, undisclosed: str) -> tuple[str, ...]:
    """The sorted, de-duplicated fleetctl GPU models allowed by a trace ``gpu_spec``.

    ``undisclosed`` is ``"map"`` (G2/G3 -> A100 variants) or ``"drop"``.
    Raises ``ValueError`` on a code that is in neither table.
    """
    models: set[str] = set()
    for code in filter(None, spec.split("|")):
        if code in GPU_MODEL_MAP:
            models.add(GPU_MODEL_MAP[code])
        elif code in UNDISCLOSED_MAP:
            if undisclosed == "map":
                models.add(UNDISCLOSED_MAP[code])
        else:
            raise ValueError(f"unknown GPU code {code!r} in gpu_spec {spec!r}")
    return tuple(sorted(models))


def _percentiles(values: list[float]) -> list[float]:
    """101 cut points (min, 1 %, ..., 99 %, max), rounded to 1e-4 h."""
    cuts = statistics.quantiles(values, n=PERCENTILES, method="inclusive")
    return [round(v, 4) for v in (min(values), *cuts, max(values))]


def derive(trace_dir: Path, undisclosed: str = "map") -> dict[str, object]:
    """Read the two pod lists and return the distribution document."""
    with open(trace_dir / "openb_pod_list_default.csv", newline="") as f:
        default = list(csv.DictReader(f))
    with open(trace_dir / "openb_pod_list_gpuspec33.csv", newline="") as f:
        spec33 = list(csv.DictReader(f))
    if [r["name"] for r in default] != [r["name"] for r in spec33]:
        raise ValueError("default and gpuspec33 pod lists do not hold the same pods in the same order")

    shapes: collections.Counter[tuple[int, float, float, tuple[str, ...], str]] = collections.Counter()
    runtimes: dict[str, list[float]] = {"production": [], "batch": []}
    gpu_pods = constrained = fractional = 0
    for pod, spec_row in zip(default, spec33):
        gpus = int(pod["num_gpu"])
        if gpus == 0:
            continue
        gpu_pods += 1
        fractional += int(pod["gpu_milli"] or 1000) < 1000
        models = map_gpu_spec(spec_row["gpu_spec"], undisclosed)
        constrained += bool(models)
        vcpus = round(int(pod["cpu_milli"]) / 1000, 3)
        memory_gib = round(int(pod["memory_mib"]) / 1024, 3)
        shapes[(gpus, vcpus, memory_gib, models, pod["qos"])] += 1
        if pod["scheduled_time"]:
            hours = (int(pod["deletion_time"]) - int(pod["scheduled_time"])) / 3600
            runtimes[QOS_TO_PRIORITY[pod["qos"]]].append(max(hours, 1 / 60))

    rows = sorted(shapes.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1], kv[0][2], kv[0][3], kv[0][4]))
    return {
        "origin": {
            "trace": "Alibaba GPU cluster trace v2023 (openb), Weng et al., ATC'23",
            "repository": "https://github.com/alibaba/clusterdata",
            "commit": "7a6c496e4f4b6ce6150be8f881cb051bf2abff42",
            "files": ["cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv",
                      "cluster-trace-gpu-v2023/csv/openb_pod_list_gpuspec33.csv"],
            "generated_by": "benchmarks/make_job_mix.py --undisclosed " + undisclosed,
        },
        "gpu_model_map": {**GPU_MODEL_MAP, **(UNDISCLOSED_MAP if undisclosed == "map" else {})},
        "undisclosed": undisclosed,
        "qos_to_priority": QOS_TO_PRIORITY,
        "counts": {
            "gpu_pods": gpu_pods,
            "constrained_gpu_pods": constrained,
            "fractional_gpu_pods_rounded_up_to_one_gpu": fractional,
            "runtime_samples": {k: len(v) for k, v in runtimes.items()},
        },
        "shape_columns": ["gpus_per_worker", "vcpus_per_worker", "memory_gib_per_worker", "gpu_models", "qos", "count"],
        "shapes": [[g, v, m, list(models), qos, n] for (g, v, m, models, qos), n in rows],
        "runtime_hours_percentiles": {k: _percentiles(v) for k, v in runtimes.items()},
        "synthetic": SYNTHETIC,
    }


def render(doc: dict[str, object]) -> str:
    """JSON with one shape row per line, so diffs of the committed file stay readable."""
    shapes = doc["shapes"]
    head = {k: v for k, v in doc.items() if k != "shapes"}
    text = json.dumps(head, indent=1)
    # one line per list of numbers (the runtime percentiles)
    text = re.sub(r"\[\s*([-0-9.e]+(?:,\s*[-0-9.e]+)*)\s*\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text)
    rows = ",\n".join("  " + json.dumps(row) for row in shapes)  # type: ignore[union-attr]
    return text[:-2] + ',\n "shapes": [\n' + rows + "\n ]\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="folder of the raw trace CSVs")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--undisclosed", choices=("map", "drop"), default="map",
                        help="G2/G3 -> A100-40GB/A100-80GB (map, default) or remove them from constraints (drop)")
    args = parser.parse_args(argv)
    doc = derive(args.trace, args.undisclosed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(doc), encoding="utf-8")
    json.loads(args.out.read_text(encoding="utf-8"))  # the custom rendering must stay valid JSON
    counts = doc["counts"]
    print(f"wrote {args.out}: {len(doc['shapes'])} shapes from {counts['gpu_pods']} GPU pods, "  # type: ignore[index]
          f"{counts['constrained_gpu_pods'] / counts['gpu_pods']:.1%} with a GPU-model constraint")  # type: ignore[index]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
