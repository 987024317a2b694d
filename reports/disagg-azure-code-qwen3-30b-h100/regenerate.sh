#!/usr/bin/env bash
# Regenerates this report (run from the repository root, with ../shared beside it):
#   bash reports/disagg-azure-code-qwen3-30b-h100/regenerate.sh
# Aggregated vs disaggregated (1P1D, 2P1D, 1P2D) serving of Qwen3-30B-A3B at TP 2 on H100 SXM, on the
# real Azure code trace replayed 3x faster (8,819 requests), the identical request stream for every variant.
set -euo pipefail
cd "$(dirname "$0")/../.."
servesim compare --model qwen3-30b-a3b --hardware h100_sxm --set tensor_parallel_size=2 \
    --set workload.trace=../shared/traces/azure_llm_2023/AzureLLMInferenceTrace_code.csv \
    --set workload.speedup=3 \
    --variants reports/disagg-azure-code-qwen3-30b-h100/variants.yaml \
    --goodput 'ttft:2000 tpot:100' \
    --out reports/disagg-azure-code-qwen3-30b-h100 --quiet
