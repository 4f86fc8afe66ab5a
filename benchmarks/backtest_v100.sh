#!/usr/bin/env bash
# The committed backtest (benchmarks/results/backtest_v100_late.{json,md}):
#   benchmarks/backtest_v100.sh [SHARED_DATA_DIR]   (default ../shared/data)
# 1. the job slice: Alibaba GPU trace v2023, 1-GPU jobs that fit a p3.2xlarge,
#    2023-07-01..03 shifted to 2023-03-20 (inside the last 30% of the V100 market);
# 2. the interruption model, trained on the first 70% of the V100 market only;
# 3. the backtest: fleetctl (with the model) beside the peers and fleetctl without it.
set -euo pipefail
shared=${1:-../shared/data}
py=${PYTHON:-.venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$py -m fleetctl trace import alibaba-2023 "$shared/alibaba-gpu-trace-v2023/openb_pod_list_gpuspec33.csv" \
    --start 2023-02-15T00:00:00Z --checkpointable-fraction 0.5 --deadline-fraction 0.2 -o "$tmp/all.csv"
$py benchmarks/make_backtest_jobs.py "$tmp/all.csv" examples/backtest-jobs-v100-late.csv --to 2023-03-20T00:00:00Z
$py -m fleetctl forecast train interruption --market examples/markets/aws-v100-availability.yaml \
    --train-fraction 0.7 -o "$tmp/interruption"
/usr/bin/time -v $py -m fleetctl backtest --jobs examples/backtest-jobs-v100-late.csv \
    --market examples/markets/aws-v100-availability.yaml --policy policies/backtest-spot.yaml \
    --compare on-demand,spot-greedy,skypilot-failover,fleetctl-no-forecast \
    --forecast-model "$tmp/interruption" --format json --report benchmarks/results/backtest_v100_late_report \
    > benchmarks/results/backtest_v100_late.json 2> "$tmp/time.txt"
grep -E "Elapsed|Maximum resident" "$tmp/time.txt"
