#!/usr/bin/env bash
# Regenerates this report (run from the repository root, with ../shared beside it):
#   bash reports/azure-code-llama8b-h100/regenerate.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
servesim compare --model llama-3.1-8b --hardware h100_sxm --schedulers static,continuous,chunked \
    --set workload.trace=../shared/traces/azure_llm_2023/AzureLLMInferenceTrace_code.csv \
    --goodput 'ttft:2000 tpot:100' \
    --out reports/azure-code-llama8b-h100 --quiet
