"""Per-operator costs, vectorised over numpy arrays (one layer, one TP rank).

Each ``*_cost`` returns (FLOPs, bytes); each ``*_time_s`` applies the roofline
with the profile's efficiencies for that operator class -- for ``form:
fitted_v1`` profiles, the size-dependent formulas of ``sim/cost_model/fitted.py``.
The cost model sums these per step; ``calibration.check_tables`` predicts
measured kernels with them directly.
"""

from __future__ import annotations

import numpy as np

from sim.cost_model.fitted import (all_reduce_fitted_s, gemm_family, gemm_fitted_s, gemm_measured_s, moe_touched_rows,
                                   uniform_attention_s)
from sim.cost_model.fitted_step import FittedGemm, FittedMoe
from sim.cost_model.roofline import ACT_BYTES, GemmPrecision, gemm_precision, roofline_time_s
from sim.hardware.efficiency import FittedEfficiency
from sim.errors import ConfigError
from sim.hardware.profile import HardwareProfile

ATTENTION_IMPLS = ("flash", "naive")


# -- GEMM ---------------------------------------------------------------------
def gemm_cost(m, n, k, prec: GemmPrecision, num_weight_matrices=1.0):
    """C[m, n] = A[m, k] . B[k, n], m = tokens.

    FLOPs = 2mnk. Bytes = A (m.k x 2 B; with W8A8 also the quantize kernel's
    write and the GEMM's read of the quantized copy) + B (k.n x weight bytes,
    x ``num_weight_matrices`` for grouped MoE GEMMs touching several experts)
    + C (m.n x 2 B).
    """
    m = np.asarray(m, dtype=float)
    flops = 2.0 * m * n * k
    a_bytes = m * k * (ACT_BYTES + 2.0 * prec.act_quant_bytes)
    nbytes = a_bytes + num_weight_matrices * (k * n * prec.weight_bytes) + m * n * ACT_BYTES
    return flops, nbytes


def gemm_time_s(hw: HardwareProfile, m, n, k, quantization: str | None = "bf16", *,
                measured: bool = False):
    """Time in s of one linear layer (arrays broadcast). ``quantization`` as
    the config key (bf16, fp8, fp8_block, int8, int4_wo, nvfp4). ``measured``:
    as an eager one-call benchmark times it (``fitted_v1``: with the family's
    per-call host floor, ``fitted.gemm_measured_s``), not as a served step runs it."""
    prec = gemm_precision(hw, quantization)
    eff = hw.efficiency
    if isinstance(eff, FittedEfficiency):
        w8a8 = prec.act_quant_bytes > 0
        return (gemm_measured_s if measured else gemm_fitted_s)(gemm_family(eff, prec.quantization, w8a8), np.asarray(m, dtype=float),
                             n, k, prec.peak_flops_per_s, hw.hbm_bandwidth_bytes_per_s,
                             weight_bytes=prec.weight_bytes, w8a8=w8a8,
                             act_quant_bytes=prec.act_quant_bytes)
    ce, me, launch = eff.operator_efficiency("gemm")
    flops, nbytes = gemm_cost(m, n, k, prec)
    return roofline_time_s(flops, nbytes, prec.peak_flops_per_s, hw.hbm_bandwidth_bytes_per_s,
                           ce, me, prec.num_kernels * launch)


# -- attention ------------------------------------------------------------------
def attention_cost(sum_new, sum_ctx, sum_new_ctx, sum_new_sq, num_heads, num_kv_heads,
                   head_dim, kv_bytes=2.0, impl="flash"):
    """Attention of a batch from four per-sequence sums (n = new tokens,
    c = tokens already cached): sum n, sum c, sum n.c, sum n^2.

    FLOPs (flash, causal, exact): 4 . heads . head_dim . sum(n.c + n(n+1)/2) --
    QK^T and PV, each 2 FLOPs per (query, key, dim) (FlashAttention-2 paper,
    Dao 2023, section 4). Naive computes the full n x (c+n) score matrix:
    4 . heads . head_dim . sum(n(c+n)).
    Bytes (flash, I/O-aware: Q, K, V, O move once; Dao et al. 2022): Q read +
    O write, n . heads . head_dim . 2 B each; the whole K and V of each sequence
    read once ((c+n) . 2 . kv_heads . head_dim . kv_bytes; GQA heads share it);
    the new K, V read in bf16 and written to the cache (reshape_and_cache).
    Naive adds 4 passes over the score matrix per head (write S, read S for
    softmax, write P, read P for PV): 4 . heads . sum(n(c+n)) . 2 B.
    """
    if impl not in ATTENTION_IMPLS:
        raise ConfigError(f"attention_impl: unknown value {impl!r}; valid: {', '.join(ATTENTION_IMPLS)}")
    hd = num_heads * head_dim
    kvd = num_kv_heads * head_dim
    bytes_ = (2.0 * ACT_BYTES * hd * sum_new
              + 2.0 * kvd * kv_bytes * (sum_ctx + sum_new)
              + 2.0 * kvd * (ACT_BYTES + kv_bytes) * sum_new)
    if impl == "flash":
        return 4.0 * hd * (sum_new_ctx + (sum_new_sq + sum_new) / 2.0), bytes_
    full = sum_new_ctx + sum_new_sq
    return 4.0 * hd * full, bytes_ + 4.0 * ACT_BYTES * num_heads * full


def attention_peak_flops(hw: HardwareProfile, kv_bytes=2.0) -> float:
    """Attention runs at the 16-bit tensor-core peak, whatever the KV dtype:
    an fp8 KV cache halves the KV bytes but, measured on H100 with vLLM 0.24
    FlashAttention-3 (../shared/kernels/h100_sxm context-attention table),
    fp8-KV prefill ran at about the bf16 rate, not twice it."""
    return hw.peak_flops_per_s.bf16


#: kernels per attention call: reshape_and_cache + the attention kernel.
ATTENTION_KERNELS = 2


def attention_time_s(hw: HardwareProfile, sum_new, sum_ctx, sum_new_ctx, sum_new_sq,
                     num_heads, num_kv_heads, head_dim, kv_bytes=2.0, impl="flash",
                     num_seqs=None):
    """Time in s of one layer's attention over a batch (one varlen kernel).
    ``fitted_v1`` profiles need the batch's sequences: give ``num_seqs``
    (the batch is then taken as ``num_seqs`` identical sequences), or use
    :func:`attention_uniform_time_s`; the cost model passes per-sequence
    lengths itself."""
    if isinstance(hw.efficiency, FittedEfficiency):
        if num_seqs is None:
            raise ConfigError("attention_time_s: a fitted_v1 profile needs num_seqs "
                              "(the tile and per-sequence terms depend on sequence lengths)")
        b = np.asarray(num_seqs, dtype=float)
        return attention_uniform_time_s(hw, b, np.asarray(sum_new) / b, np.asarray(sum_ctx) / b,
                                        num_heads, num_kv_heads, head_dim, kv_bytes, impl)
    ce, me, launch = hw.efficiency.operator_efficiency("attention")
    flops, nbytes = attention_cost(sum_new, sum_ctx, sum_new_ctx, sum_new_sq, num_heads,
                                   num_kv_heads, head_dim, kv_bytes, impl)
    return roofline_time_s(flops, nbytes, attention_peak_flops(hw, kv_bytes),
                           hw.hbm_bandwidth_bytes_per_s, ce, me, ATTENTION_KERNELS * launch)


def attention_uniform_time_s(hw: HardwareProfile, batch_size, new_tokens, context_tokens,
                             num_heads, num_kv_heads, head_dim, kv_bytes=2.0, impl="flash"):
    """Time in s of one attention call over ``batch_size`` identical sequences
    of ``new_tokens`` new and ``context_tokens`` cached tokens (arrays
    broadcast); any efficiency form. ``fitted_v1``: generation parameters where
    one new token, context parameters otherwise; naive adds its score-matrix
    passes at the context kernel's peak memory efficiency."""
    eff = hw.efficiency
    if not isinstance(eff, FittedEfficiency):
        return attention_time_s(hw, *uniform_batch_sums(batch_size, new_tokens, context_tokens),
                                num_heads, num_kv_heads, head_dim, kv_bytes, impl)
    if impl not in ATTENTION_IMPLS:
        raise ConfigError(f"attention_impl: unknown value {impl!r}; valid: {', '.join(ATTENTION_IMPLS)}")
    bw = hw.hbm_bandwidth_bytes_per_s
    t = uniform_attention_s(eff, attention_peak_flops(hw, kv_bytes), bw, hw.num_sms, batch_size,
                            new_tokens, context_tokens, num_heads, num_kv_heads, head_dim, kv_bytes)
    if impl == "naive":
        _, sum_ctx, sum_nc, sum_nn = uniform_batch_sums(batch_size, new_tokens, context_tokens)
        t = t + 4.0 * ACT_BYTES * np.asarray(num_heads) * (sum_nc + sum_nn) / (
            bw * eff.context_attention.memory_efficiency_max)
    return t


def uniform_batch_sums(batch_size, new_tokens, context_tokens):
    """(sum n, sum c, sum n.c, sum n^2) of ``batch_size`` identical sequences."""
    b = np.asarray(batch_size, dtype=float)
    n = np.asarray(new_tokens, dtype=float)
    c = np.asarray(context_tokens, dtype=float)
    return b * n, b * c, b * n * c, b * n * n


# -- elementwise and communication ------------------------------------------------
def elementwise_time_s(hw: HardwareProfile, nbytes, num_kernels):
    """Memory-bound kernels (norms, activations, RoPE): bytes / (bw x eff) + launches."""
    _, me, launch = hw.efficiency.operator_efficiency("elementwise")
    return np.asarray(nbytes, dtype=float) / (hw.hbm_bandwidth_bytes_per_s * me) + num_kernels * launch


def all_reduce_time_s(hw: HardwareProfile, nbytes, num_gpus, *, custom: bool = False):
    """Ring all-reduce of ``nbytes`` per GPU over ``num_gpus``: each GPU sends
    and receives 2(p-1)/p x bytes (Patarasuk & Yuan 2009; NCCL "busBw" in
    nccl-tests PERFORMANCE.md) over its link, plus the link latency. 0 if p = 1.
    ``fitted_v1``: NCCL latency and bus bandwidth fitted per GPU count; with
    ``custom`` (the step model's all-reduce inside one NVLink domain), the faster
    of that and the engines' CUDA-graph custom kernels where the profile has them
    (``custom_all_reduce``; ``fitted_step.FittedAllReduce``)."""
    p = np.asarray(num_gpus, dtype=float)
    ic = hw.interconnect
    if isinstance(hw.efficiency, FittedEfficiency):
        t = all_reduce_fitted_s(hw.efficiency.all_reduce, ic.bandwidth_bytes_per_s, nbytes, p)
        cp = hw.efficiency.custom_all_reduce
        if custom and cp is not None:
            t = np.minimum(t, all_reduce_fitted_s(cp, ic.bandwidth_bytes_per_s, nbytes, p))
        return t
    t = (2.0 * (p - 1.0) / p * np.asarray(nbytes, dtype=float)
         / (ic.bandwidth_bytes_per_s * hw.efficiency.all_reduce_efficiency) + ic.latency_s)
    return np.where(p > 1, t, 0.0)


# -- fused MoE --------------------------------------------------------------------
def moe_layer_time_s(hw: HardwareProfile, num_tokens, hidden, inter, num_experts, top_k,
                     quantization: str | None = "bf16", ep: float = 1.0, routing: str = "uniform",
                     gated=True):
    """One MoE layer's routed experts on one rank (no router GEMM; arrays
    broadcast): ``inter`` = the rank's expert intermediate size (I / moe_tp),
    ``ep`` the expert-parallel size, ``routing`` how rows spread over the experts
    (``fitted.MOE_ROUTINGS``: uniform when serving, balanced as the kernel tables'
    balanced rows). ``fitted_v1``: the step model's own
    :class:`~sim.cost_model.fitted_step.FittedMoe` (the profile's fused-MoE kernel
    for the weight format where fitted, else grouped GEMMs); ``scalar``: the
    roofline of the grouped GEMMs (touched experts' weights, 6 m h I FLOPs). ``gated``
    (bool or bool array): False for non-gated experts (w13 is I wide, not 2I:
    :func:`~sim.cost_model.fitted.moe_fitted_s`)."""
    prec = gemm_precision(hw, quantization)
    eff, bw = hw.efficiency, hw.hbm_bandwidth_bytes_per_s
    T = np.asarray(num_tokens, dtype=float)
    h, i = np.asarray(hidden, dtype=float), np.asarray(inter, dtype=float)
    up = np.where(gated, 2.0, 1.0)  # up-projection matrices per expert
    if isinstance(eff, FittedEfficiency):
        w13, w2 = FittedGemm(eff, up * i, h, prec, bw, 1), FittedGemm(eff, h, i, prec, bw, 1)
        moe = FittedMoe(w13, w13, w2, num_experts, top_k)
        moe.ep, moe.routing, moe.gated = ep, routing, gated
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(T > 0, moe.experts_s(T), 0.0)
    ce, me, launch = eff.operator_efficiency("gemm")
    E, k = np.asarray(num_experts, dtype=float), np.asarray(top_k, dtype=float)
    touched, m = moe_touched_rows(T, E, k, ep, routing)
    flops = 2.0 * (up + 1.0) * m * h * i
    nbytes = touched * (up + 1.0) * h * i * prec.weight_bytes + m * ACT_BYTES * (2.0 * h + (up + 1.0) * i)
    return roofline_time_s(flops, nbytes, prec.peak_flops_per_s, bw, ce, me, 3 * launch)
