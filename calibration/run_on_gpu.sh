#!/usr/bin/env bash
# Calibrate servesim's cost model on this machine's GPU, in one command.
#
#   calibration/run_on_gpu.sh                       # full sweep, a few minutes
#   calibration/run_on_gpu.sh my_gpu.yaml --quick   # smaller sweep, about a minute
#   calibration/run_on_gpu.sh my_gpu.yaml --base-profile h100_sxm   # datasheet peaks to use
#
# Needs torch with CUDA (pip install torch). Measures GEMMs (bf16, and fp8 where
# the GPU has fp8 tensor cores), causal SDPA prefill attention, decode attention
# with GQA shapes, device copies and, with several GPUs, NCCL all-reduce; fits
# the fitted_v1 efficiencies; writes
#   OUT.yaml             the profile (use it: servesim run --hardware OUT.yaml ...)
#   OUT_kernels/*.csv    the raw measurements, in the ../shared/kernels format
#   OUT_kernels/*.png    fit-vs-measured plots, one per kernel family
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "error: needs torch with a CUDA device (pip install torch); for a dry run on the CPU:" >&2
  echo "  python -m calibration --device cpu --out /tmp/cpu.yaml --quick" >&2
  exit 1
fi
name=$(python -c "import re, torch; print(re.sub(r'[^a-z0-9]+', '_', torch.cuda.get_device_name(0).lower()).strip('_'))")
out=hardware_profiles/measured_${name}.yaml
if [[ $# -gt 0 && $1 != --* ]]; then out=$1; shift; fi

python -m calibration --device cuda --out "$out" "$@"
kernels="${out%.yaml}_kernels"
echo "profile:      $out"
echo "measurements: $kernels/*.csv"
echo "plots:        $kernels/fit_*.png"
echo "score it:     python -m calibration.check_tables $kernels --profile $out --model-free"
