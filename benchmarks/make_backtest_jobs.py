"""Make the backtest's job slice (examples/backtest-jobs-v100.csv) from an imported Alibaba 2023 job trace.

    python -m fleetctl trace import alibaba-2023 \\
        /work/shared/data/alibaba-gpu-trace-v2023/openb_pod_list_gpuspec33.csv \\
        --start 2023-02-15T00:00:00Z --checkpointable-fraction 0.5 --deadline-fraction 0.2 -o /tmp/alibaba.csv
    python benchmarks/make_backtest_jobs.py /tmp/alibaba.csv examples/backtest-jobs-v100.csv

Selection (the market is AWS p3.2xlarge = 1 x V100-16GB, 8 vCPUs, 61 GiB):

* jobs of one worker with one GPU, at most 8 vCPUs and 61 GiB, whose GPU
  constraint is empty (any GPU) or names V100-16GB: jobs that fit a
  p3.2xlarge as they are (no job is remapped);
* submitted in [--from, --from + --days) (default 2023-07-01, 2 days: the
  busy end of the trace, where pods are not long-running survivors);
* duration at most --max-hours (default 24);
* submit times and deadlines shifted by the same amount so the first window
  starts at --to (default 2023-02-16T00:00:00Z, a day into the V100 market).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from datetime import datetime, timedelta

from fleetctl.jobspec import parse_utc_timestamp
from fleetctl.sim.traces import read_job_trace, write_job_trace


FROM, DAYS, MAX_HOURS, TO = "2023-07-01T00:00:00Z", 2.0, 24.0, "2023-02-16T00:00:00Z"


def select(jobs, *, start: datetime | None = None, days: float = DAYS, max_hours: float = MAX_HOURS,
           to: datetime | None = None) -> list:
    """The slice described above, shifted to begin at ``to``."""
    lo = start or parse_utc_timestamp(FROM)
    to = to or parse_utc_timestamp(TO)
    hi = lo + timedelta(days=days)
    shift = to - lo
    out = []
    for j in jobs:
        if not (j.workers == 1 and j.gpus_per_worker == 1 and j.vcpus_per_worker <= 8 and j.memory_gib_per_worker <= 61
                and (not j.gpu_models or "V100-16GB" in j.gpu_models)):
            continue
        if not (lo <= j.submitted_at_utc < hi and j.duration_hours <= max_hours):
            continue
        out.append(replace(j, submitted_at_utc=j.submitted_at_utc + shift,
                           deadline_utc=j.deadline_utc + shift if j.deadline_utc else None))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source")
    ap.add_argument("output")
    ap.add_argument("--from", dest="start", default=FROM)
    ap.add_argument("--days", type=float, default=DAYS)
    ap.add_argument("--max-hours", type=float, default=MAX_HOURS)
    ap.add_argument("--to", default=TO)
    a = ap.parse_args()
    out = select(read_job_trace(a.source), start=parse_utc_timestamp(a.start), days=a.days, max_hours=a.max_hours,
                 to=parse_utc_timestamp(a.to))
    write_job_trace(out, a.output)
    print(f"wrote {len(out)} jobs, {sum(j.duration_hours for j in out):.1f} GPU-hours, to {a.output}")


if __name__ == "__main__":
    main()
