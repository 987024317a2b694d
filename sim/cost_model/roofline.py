"""The roofline and the precision rules every operator uses.

An operator's time is ``max(FLOPs / (peak x compute_eff), bytes / (bw x mem_eff))
+ launches x launch_overhead_s`` (Williams, Waterman, Patterson, "Roofline: an
insightful visual performance model", CACM 2009; the launch term is the fixed
per-kernel cost a GPU pays even for a tiny kernel).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.errors import ConfigError
from sim.hardware.profile import HardwareProfile
from sim.model_spec import WEIGHT_BYTES_PER_PARAM, normalize_quantization

#: Bytes per activation element: activations run in the model dtype (bf16/fp16).
ACT_BYTES = 2.0


def roofline_time_s(flops, nbytes, peak_flops_per_s: float, bw_bytes_per_s: float,
                    compute_eff: float, memory_eff: float, launch_s: float = 0.0):
    """Roofline time in s; works elementwise on numpy arrays."""
    return np.maximum(flops / (peak_flops_per_s * compute_eff),
                      nbytes / (bw_bytes_per_s * memory_eff)) + launch_s


class GemmPrecision(NamedTuple):
    """How a linear layer runs for one weight precision on one GPU."""
    quantization: str           #: servesim name (bf16, fp8, ...)
    peak_flops_per_s: float     #: tensor-core peak used
    weight_bytes: float         #: bytes per weight element (with scales)
    act_quant_bytes: float      #: bytes per quantized activation element; 0 = none
    num_kernels: int            #: kernels per linear call (GEMM + activation quant)


def gemm_precision(hw: HardwareProfile, quantization: str | None) -> GemmPrecision:
    """Resolve weight precision -> GEMM peak and byte counts.

    - bf16/fp16: 16-bit tensor cores.
    - fp8, fp8_block, int8 (W8A8): activations are quantized per call (one extra
      kernel: read 2 B, write 1 B per element) and the GEMM runs at the fp8/int8
      peak -- where the chip has it. Otherwise vLLM falls back to weight-only
      kernels (Marlin, W8A16): 16-bit peak, no activation quantization.
    - int4_wo: weight-only (W4A16, GPTQ/AWQ Marlin): 16-bit peak.
    - nvfp4: W4A4 at the fp4 peak on Blackwell; weight-only elsewhere.
    - mxfp4 (gpt-oss experts): on chips with fp4 tensor cores (Blackwell) W4A8,
      activations quantized to MXFP8 (1 B + one E8M0 scale per 32), at the fp8
      peak (vLLM's FlashInfer MXFP4 x MXFP8 MoE on SM100); elsewhere weight-only
      W4A16 at the 16-bit peak (Hopper: triton ``matmul_ogs`` / Marlin MXFP4).
    """
    q = normalize_quantization(quantization)
    peaks = hw.peak_flops_per_s
    wb = WEIGHT_BYTES_PER_PARAM[q]
    if q == "mxfp4":
        if peaks.get("fp4") is None or peaks.get("fp8") is None:
            return GemmPrecision(q, peaks.get("bf16"), wb, 0.0, 1)
        return GemmPrecision(q, peaks.get("fp8"), wb, 1.0 + 1.0 / 32, 2)
    act_dtype = {"fp8": "fp8", "fp8_block": "fp8", "int8": "int8", "nvfp4": "fp4"}.get(q)
    fast_peak = peaks.get(act_dtype) if act_dtype else None
    if fast_peak is None:
        return GemmPrecision(q, peaks.get("fp16" if q == "fp16" else "bf16"), wb, 0.0, 1)
    act_b = 0.5 + 1.0 / 16 if q == "nvfp4" else 1.0
    return GemmPrecision(q, fast_peak, wb, act_b, 2)


_GEMM_DTYPE_NAMES = {"bfloat16": "bf16", "float16": "fp16", "bf16": "bf16", "fp16": "fp16",
                     "fp8": "fp8", "fp8_block": "fp8_block", "int8": "int8",
                     "int4_wo": "int4_wo", "nvfp4": "nvfp4", "mxfp4": "mxfp4"}


def gemm_dtype(name: str) -> str:
    """servesim quantization name for a GEMM dtype label (``bfloat16`` -> ``bf16``)."""
    if name not in _GEMM_DTYPE_NAMES:
        raise ConfigError(f"gemm dtype: unknown value {name!r}; valid: {', '.join(_GEMM_DTYPE_NAMES)}")
    return _GEMM_DTYPE_NAMES[name]
