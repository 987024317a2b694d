#!/usr/bin/env bash
# Regenerates reports/plan-llama70b-chat from scratch (a few minutes on 2 cores):
# the sweep grid (sweep/results.csv) and the capacity plan (plan.md, plan.csv, results.csv, figures).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=reports/plan-llama70b-chat
SERVESIM="${SERVESIM:-python -m sim}"
rm -rf "$OUT/sweep" "$OUT/latency_vs_load"   # start fresh: a re-run would otherwise resume (skip every point)
$SERVESIM sweep "$OUT/sweep.yaml" --out "$OUT/sweep" --quiet
$SERVESIM plan --model llama-3.1-70b --workload chat \
  --hardware h100_sxm,h200_sxm --tp 2,4,8 --scheduler chunked,mixed \
  --slo p99_ttft_ms=1000 --slo p99_tpot_ms=60 --target-rate 20 \
  --set max_model_len=8192 --set workload.num_requests=800 --set workload.num_warmup_requests=100 \
  --out "$OUT" --quiet
rm -f "$OUT/results.parquet" "$OUT/sweep/results.parquet" "$OUT/sweep/points.jsonl"   # keep the CSVs in git
