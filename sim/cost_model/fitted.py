"""Operator times of the ``fitted_v1`` efficiency form (``sim/hardware/efficiency.py``).

Every function works elementwise on floats and numpy arrays (only + - * / **
and floor division, so the engine's per-step Python path and the vectorised
paths use the same formulas). Times are seconds of one kernel call.

The physics, per kernel family (parameters fitted by ``calibration.fit`` to
the measured tables in ``../shared/kernels``):

- Roofline with size-dependent efficiencies: compute time
  ``F / (peak x e_c(F))``, ``e_c(F) = e_max / (1 + (F_half / F)^a)`` (small
  kernels cannot fill the SMs' pipelines); memory time ``B / (bw x e_m(B))``,
  ``e_m(B) = m_max / (1 + (B_half / B)^b)`` (small transfers are latency-bound).
  Terms are combined as ``sqrt(sum t^2)`` -- a smooth max: near the ridge
  point neither unit is saturated, so the kernel is slower than the plain max
  -- plus ``launch_s``.
- GEMM: m and n rounded up to the tile (``tile_m`` x ``tile_n``, CUTLASS/cuBLAS
  CTA tiles are multiples of 64 on Hopper and Ampere); the k-loop's serial
  latency ``k_serial_s x k / (1 + k / k_split)`` (a CTA walks k in steps; split-K
  caps the growth), which dominates skinny GEMMs (n <= 512). Wave quantization
  of GEMM tiles was tried and its fitted weight was ~0 (cuBLAS picks tile
  shapes and stream-K to avoid partial waves), so it is not in the GEMM form.
  W8A8 (fp8/int8) adds the activation-quantization kernel (vLLM
  ``scaled_fp8_quant``): per token row ``act_quant_row_s`` + 3 B per element
  (read bf16, write fp8) at ``act_quant_memory_efficiency`` of HBM bandwidth.
- Context attention: softmax cost per score element (``softmax_flops_per_score``
  tensor-core FLOP-equivalents: exp runs on the SFUs, FlashAttention-3 paper,
  Shah et al. 2024, section 3) added to the tensor-core time; wave quantization of query tiles
  (``ceil(n / tile_q)`` per sequence and head, over ``num_sms``); a fixed cost
  per (sequence, KV head) (``seq_head_s``: tile setup, varlen bookkeeping).
- Generation attention: each (sequence, KV head) reads its KV cache in whole
  ``kv_tile``-token tiles (a sequence of 3 tokens costs a tile), plus
  ``seq_head_s`` per (sequence, KV head); without split-KV (query heads per KV
  head < ``split_kv_min_group``) each (sequence, KV head) streams from one CTA:
  ``ceil(seq-heads / num_sms) x mean tiled length x cta_token_s``.
- All-reduce: NCCL latency growing with the GPU count, bus bandwidth per GPU
  count saturating with message size (nccl-tests ``busBw`` = 2(p-1)/p x
  bytes / time, nccl-tests doc/PERFORMANCE.md).
"""

from __future__ import annotations

import numpy as np

from sim.cost_model.moe import WORKLOAD_DISTRIBUTIONS, max_rank_load
from sim.hardware.efficiency import (AllReduceParams, ContextAttentionParams, FittedEfficiency,
                            GemmParams, GenerationAttentionParams, KernelParams, MoeParams)

#: bytes per activation element (bf16/fp16)
ACT_BYTES = 2.0


def ceil_div(a, b):
    """ceil(a / b) for non-negative numbers or arrays (exact on integers)."""
    return -(-a // b)


def _saturating_time(amount, half: float, exponent: float, rate: float):
    """amount x (1 + (half / amount)^exponent) / rate; 0 where amount <= 0."""
    if isinstance(amount, np.ndarray):
        a = np.maximum(amount, 1e-300)
        return np.where(amount > 0, a * (1.0 + (half / a) ** exponent) / rate, 0.0)
    return amount * (1.0 + (half / amount) ** exponent) / rate if amount > 0 else 0.0


def compute_time_s(p: KernelParams, flops, peak_flops_per_s: float):
    """FLOPs / (peak x e_c(FLOPs)); 0 where FLOPs = 0."""
    return _saturating_time(flops, p.compute_half_flops, p.compute_exponent,
                            peak_flops_per_s * p.compute_efficiency_max)


def memory_time_s(p: KernelParams, nbytes, bw_bytes_per_s: float):
    """bytes / (bw x e_m(bytes)); 0 where bytes = 0."""
    return _saturating_time(nbytes, p.memory_half_bytes, p.memory_exponent,
                            bw_bytes_per_s * p.memory_efficiency_max)


def smooth_max(*terms):
    """sqrt(sum t^2) of non-negative terms."""
    total = 0.0
    for t in terms:
        total = total + t * t
    return total ** 0.5


# -- GEMM -------------------------------------------------------------------------
def gemm_family(eff: FittedEfficiency, quantization: str, w8a8: bool) -> GemmParams:
    """Parameters for a linear layer: W8A8 fp8/int8/nvfp4 use ``fp8``
    (``fp8_block`` its own where fitted, else ``fp8``); weight-only kernels and
    16-bit GEMMs use ``bf16``; a missing family falls back to ``bf16``."""
    g = eff.gemm
    if not w8a8:
        return g["bf16"]
    if quantization == "fp8_block" and "fp8_block" in g:
        return g["fp8_block"]
    return g.get("fp8", g["bf16"])


def gemm_core_s(p: GemmParams, m, n, k, peak: float, bw: float, *, weight_bytes: float,
                act_bytes: float, num_weight_matrices=1.0, num_groups=1.0):
    """GEMM time without ``launch_s``: C[m, n] = A[m, k] . B[k, n] (m = token
    rows). ``act_bytes``: bytes per element of A as the GEMM reads it (2 bf16,
    1 fp8). Grouped MoE GEMMs: ``num_groups`` experts share the m rows (each
    rounded up to the tile) and ``num_weight_matrices`` weight matrices are
    read. Add :func:`act_quant_s` for W8A8."""
    m_tiled = num_groups * ceil_div(m / num_groups, p.tile_m) * p.tile_m
    n_tiled = ceil_div(n, p.tile_n) * p.tile_n
    flops = 2.0 * m_tiled * n_tiled * k
    nbytes = m * k * act_bytes + num_weight_matrices * k * n * weight_bytes + m * n * ACT_BYTES
    serial = p.k_serial_s * k / (1.0 + k / p.k_split)
    return smooth_max(compute_time_s(p, flops, peak), memory_time_s(p, nbytes, bw), serial)


def act_quant_s(p: GemmParams, m, k, bw: float):
    """Activation quantization of m x k bf16 -> fp8: per-row cost + 3 B/element."""
    return m * (p.act_quant_row_s + 3.0 * k / (bw * p.act_quant_memory_efficiency))


def gemm_fitted_s(p: GemmParams, m, n, k, peak: float, bw: float, *, weight_bytes: float,
                  w8a8: bool, act_quant_bytes: float = 1.0):
    """Time of one linear layer (arrays broadcast); 0 where m = 0."""
    act = act_quant_bytes if w8a8 else ACT_BYTES
    t = p.launch_s + gemm_core_s(p, m, n, k, peak, bw, weight_bytes=weight_bytes, act_bytes=act)
    if w8a8:
        t = t + act_quant_s(p, m, k, bw)
    return np.where(np.asarray(m) > 0, t, 0.0)


def gemm_measured_s(p: GemmParams, m, n, k, peak: float, bw: float, *, weight_bytes: float,
                    w8a8: bool, act_quant_bytes: float = 1.0):
    """One linear layer as an eager kernel benchmark measures it, one call at a
    time: max(``host_s``, device time). The host floor runs concurrently with
    the device work, so it shows only where it is longer (H100 vLLM 0.24
    ``fp8_block``: a flat 55-175 us per call at small shapes, and ~the per-tensor
    fp8 GEMM's time at large ones). Served steps use :func:`gemm_fitted_s`."""
    t = gemm_fitted_s(p, m, n, k, peak, bw, weight_bytes=weight_bytes, w8a8=w8a8,
                      act_quant_bytes=act_quant_bytes)
    return np.where(np.asarray(m) > 0, np.maximum(t, p.host_s), 0.0)


# -- fused MoE --------------------------------------------------------------------------
#: how routed rows spread over the experts (``sim.cost_model.moe``'s
#: ``workload_distribution`` values): ``uniform`` (each token picks top_k experts at
#: random, the serving model), ``balanced`` (the kernel tables' balanced
#: distribution: the T top_k rows dealt evenly over min(E, T top_k) experts, and the
#: measured rank always gets at least one expert with one row), ``power_law_<alpha>``
#: (the tables' skewed rows: aiconfigurator's power-law expert loads, the most
#: loaded EP rank measured)
MOE_ROUTINGS = WORKLOAD_DISTRIBUTIONS
#: Triton specialises an integer kernel argument (a size or a stride) that is a multiple
#: of 16 as such (``tt.divisibility = 16``), which is what lets it prove 16-byte aligned
#: rows and issue vectorised (128-bit) loads; another value gets element-wise loads
UNALIGNED_ELEMENTS = 16


def moe_touched_rows(T, E, k, ep, routing: str = "uniform"):
    """(local experts touched, local routed rows) on the most loaded EP rank (arrays
    broadcast; :func:`sim.cost_model.moe.max_rank_load`). ``uniform``: at EP 1
    E (1 - (1 - k/E)^T) experts (expected distinct picks) and T k rows; at EP > 1 the
    expected maximum over the ranks. ``balanced``: min(E, T k) / ep experts and
    T k / ep rows, each at least 1 (vLLM 0.24's H100 fused-MoE table: at EP 1 the
    layer's time grows with T until T top_k = E and is flat after, e.g. hidden 2048,
    256 experts, top-8 at T = 32; at T = 1 and EP 128 a layer of 128 experts costs
    one expert's weight read, 146 us for hidden 5120 x 8192, not 1/128 of one)."""
    try:
        rows, touched = max_rank_load(T, E, k, ep, routing)
    except ValueError as e:
        raise ValueError(f"routing={routing!r}: {e}") from None
    return np.maximum(touched, 1e-9), rows


def moe_block_m(p: MoeParams, T, E, rows_per_expert):
    """Rows per expert block (each expert's rows are padded to it). ``fused_moe``:
    vLLM's Triton fused_moe without a tuned config (``get_default_config``):
    ``tile_m_small`` while the token count T <= E, else ``tile_m``. ``matmul_ogs``:
    OpenAI's triton_kernels grouped matmul (gpt-oss MXFP4 on Hopper,
    ``opt_flags.make_default_opt_flags_nvidia``) sizes the block from the tokens per
    expert r = floor(rows / experts): next_pow2(2 r) within [16, 64] while r <= 64
    (ragged, weight-bound: fewer weight re-reads), else next_pow2(r) within [16, 128]."""
    if p.block_m_rule == "fused_moe":
        return np.where(T <= E, p.tile_m_small, p.tile_m)
    r = np.maximum(np.floor(rows_per_expert), 1.0)
    return np.where(r <= 64.0, np.clip(2.0 ** np.ceil(np.log2(2.0 * r)), 16.0, 64.0),
                    np.clip(2.0 ** np.ceil(np.log2(r)), 16.0, 128.0))


def moe_fitted_s(p: MoeParams, num_tokens, hidden, inter, num_experts, top_k, peak: float,
                 bw: float, *, weight_bytes: float, act_bytes: float = ACT_BYTES, ep=1.0,
                 routing: str = "uniform", gated=True):
    """One fused-MoE layer on one rank (``MoeParams``; arrays broadcast): ``inter``
    is the rank's expert intermediate size (I / moe_tp), ``ep`` the expert-parallel
    size (the rank holds E/ep experts and gets T top_k / ep routed rows), ``routing``
    one of :data:`MOE_ROUTINGS` (:func:`moe_touched_rows`); 0 where T = 0. ``gated``
    (bool or bool array): the experts' up projection is gated (SwiGLU: w13 holds gate
    and up, [E, 2I, h], and ``silu_and_mul`` halves its 2I output) -- the models
    servesim serves; False for non-gated experts (Nemotron-3's squared ReLU, vLLM
    ``MoEActivation.RELU2_NO_MUL``: w1 is [E, I, h], no gate), which read 2 h I
    weights per expert and run 4 m h I FLOPs instead of 3 h I and 6 m h I."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # T = 0 rows: masked below
        return _moe_fitted_s(p, num_tokens, hidden, inter, num_experts, top_k, peak, bw,
                             weight_bytes, act_bytes, ep, routing, gated)


def _moe_fitted_s(p, num_tokens, hidden, inter, num_experts, top_k, peak, bw, weight_bytes,
                  act_bytes, ep, routing, gated=True):
    T = np.asarray(num_tokens, dtype=float)
    E, k = np.asarray(num_experts, dtype=float), np.asarray(top_k, dtype=float)
    touched, m = moe_touched_rows(T, E, k, ep, routing)
    tile = moe_block_m(p, T, E, m / touched)
    m_tiled = touched * ceil_div(m / touched, tile) * tile
    up = np.where(gated, 2.0, 1.0)  # up-projection matrices per expert (gate + up, or up)
    flops = 2.0 * (up + 1.0) * m_tiled * hidden * inter
    # local rows: the w13 GEMM's A read (h) and the w2 GEMM's (I); every routed row of
    # the batch, local or not (vLLM's Triton fused_moe with an expert_map writes zeros
    # for blocks of other ranks' experts, ``write_zeros_to_output``, and
    # silu_and_mul / moe_sum run over the whole T top_k intermediate caches): the w13
    # output (2I gated, I not) written and read, the activation (I) written, the w2
    # output (h) written and read by moe_sum (``MoeParams.whole_batch_rows``; else
    # local rows only)
    nbytes = (touched * (up + 1.0) * hidden * inter * weight_bytes
              + m * (hidden * act_bytes + inter * ACT_BYTES)
              + (T * k if p.whole_batch_rows else m) * ((2.0 * up + 1.0) * inter + 2.0 * hidden) * ACT_BYTES)
    t = (p.launch_s + smooth_max(compute_time_s(p, flops, peak), memory_time_s(p, nbytes, bw))
         + p.expert_s * touched + p.row_s * T * k + p.ep_s * (np.asarray(ep) > 1))
    if p.unaligned_w2_mac_s > 0 or p.unaligned_w2_out_s > 0:
        # the w2 GEMM C[m, h] = A[m, I] B[I, h] where I (its K, and the row stride of A
        # and B) is no multiple of 16: element-wise loads (UNALIGNED_ELEMENTS)
        unaligned = np.asarray(inter) % UNALIGNED_ELEMENTS != 0
        t = t + unaligned * m_tiled * hidden * (p.unaligned_w2_out_s + p.unaligned_w2_mac_s * inter)
    return np.where(T > 0, t, 0.0)


# -- attention ----------------------------------------------------------------------
def context_attention_core_s(p: ContextAttentionParams, peak: float, bw: float, num_sms: int, *,
                             flops, nbytes, num_q_tiles, num_seq_heads, head_dim):
    """Prefill attention without ``launch_s``. ``flops`` = 4 heads d sum(n c +
    n(n+1)/2) (causal); ``num_q_tiles`` = heads x sum ceil(n / tile_q) (CTAs);
    ``num_seq_heads`` = sequences x KV heads."""
    waves = ceil_div(num_q_tiles, num_sms)
    util = num_q_tiles / (waves * num_sms)  # share of the last wave's SMs busy, averaged
    scores = flops / (4.0 * head_dim)
    tc = (compute_time_s(p, flops, peak) + scores * p.softmax_flops_per_score / peak) / util
    tb = memory_time_s(p, nbytes, bw) + num_seq_heads * p.seq_head_s
    return smooth_max(tc, tb)


def generation_attention_core_s(p: GenerationAttentionParams, peak: float, bw: float,
                                num_sms: int, *, flops, nbytes, num_seqs, num_kv_heads,
                                tiled_kv_tokens, group):
    """Decode attention without ``launch_s``. ``nbytes`` counts the KV read in
    whole tiles; ``tiled_kv_tokens`` = sum over sequences of the tiled length;
    ``group`` = query heads per KV head."""
    seq_heads = num_seqs * num_kv_heads
    tc = compute_time_s(p, flops, peak)
    tb = memory_time_s(p, nbytes, bw) + seq_heads * p.seq_head_s
    if p.cta_token_s > 0:
        unsplit = group < p.split_kv_min_group  # bool or bool array
        tpar = ceil_div(seq_heads, num_sms) * (tiled_kv_tokens / num_seqs) * p.cta_token_s * unsplit
        return smooth_max(tc, tb, tpar)
    return smooth_max(tc, tb)


def attention_bytes(num_heads, num_kv_heads, head_dim, kv_bytes, sum_new, sum_kv_read):
    """Q read + O write (bf16), the KV read (``sum_kv_read`` tokens), the new
    K, V read in bf16 and written to the cache (vLLM ``reshape_and_cache``)."""
    hd = num_heads * head_dim
    kvd = num_kv_heads * head_dim
    return (2.0 * ACT_BYTES * hd * sum_new + 2.0 * kvd * kv_bytes * sum_kv_read
            + 2.0 * kvd * (ACT_BYTES + kv_bytes) * sum_new)


def uniform_context_s(p: ContextAttentionParams, peak: float, bw: float, num_sms: int,
                      batch_size, new_tokens, context_tokens, num_heads, num_kv_heads, head_dim,
                      kv_bytes=2.0):
    """Prefill attention over ``batch_size`` identical sequences (arrays broadcast)."""
    b, n, c, h, kvh, d = (np.asarray(x, dtype=float) for x in (
        batch_size, new_tokens, context_tokens, num_heads, num_kv_heads, head_dim))
    flops = 4.0 * h * d * b * (n * c + (n * n + n) / 2.0)
    return p.launch_s + context_attention_core_s(
        p, peak, bw, num_sms, flops=flops,
        nbytes=attention_bytes(h, kvh, d, kv_bytes, b * n, b * (c + n)),
        num_q_tiles=h * b * ceil_div(n, p.tile_q), num_seq_heads=b * kvh, head_dim=d)


def uniform_generation_s(p: GenerationAttentionParams, peak: float, bw: float, num_sms: int,
                         batch_size, context_tokens, num_heads, num_kv_heads, head_dim,
                         kv_bytes=2.0):
    """Decode attention (one new token each) over ``batch_size`` identical
    sequences with ``context_tokens`` cached (arrays broadcast)."""
    b, c, h, kvh, d = (np.asarray(x, dtype=float) for x in (
        batch_size, context_tokens, num_heads, num_kv_heads, head_dim))
    tiled = b * ceil_div(c + 1.0, p.kv_tile) * p.kv_tile
    return p.launch_s + generation_attention_core_s(
        p, peak, bw, num_sms, flops=4.0 * h * d * b * (c + 1.0),
        nbytes=attention_bytes(h, kvh, d, kv_bytes, b, tiled), num_seqs=b, num_kv_heads=kvh,
        tiled_kv_tokens=tiled, group=h / kvh)


def uniform_attention_s(eff: FittedEfficiency, peak: float, bw: float, num_sms: int,
                        batch_size, new_tokens, context_tokens, num_heads, num_kv_heads,
                        head_dim, kv_bytes=2.0):
    """One attention call over ``batch_size`` identical sequences (arrays
    broadcast): generation parameters where ``new_tokens`` == 1, else context."""
    n = np.asarray(new_tokens, dtype=float)
    ctx = uniform_context_s(eff.context_attention, peak, bw, num_sms, batch_size, n,
                            context_tokens, num_heads, num_kv_heads, head_dim, kv_bytes)
    gen = uniform_generation_s(eff.generation_attention, peak, bw, num_sms, batch_size,
                               context_tokens, num_heads, num_kv_heads, head_dim, kv_bytes)
    return np.where(n == 1, gen, ctx)


# -- all-reduce ------------------------------------------------------------------------
def bus_efficiency(p: AllReduceParams, num_gpus):
    """Listed bus efficiency of the nearest GPU count (log2 distance)."""
    keys = np.array(list(p.bus_efficiency), dtype=float)
    vals = np.array(list(p.bus_efficiency.values()), dtype=float)
    g = np.asarray(num_gpus, dtype=float)
    idx = np.abs(np.log2(np.maximum(g, 1.0))[..., None] - np.log2(keys)).argmin(axis=-1)
    return vals[idx]


def all_reduce_fitted_s(p: AllReduceParams, link_bw: float, nbytes, num_gpus):
    """All-reduce time (arrays broadcast); 0 for one GPU or 0 bytes."""
    g = np.asarray(num_gpus, dtype=float)
    b = np.maximum(np.asarray(nbytes, dtype=float), 1e-30)
    eff = bus_efficiency(p, g) / (1.0 + (p.half_bytes / b) ** p.exponent)
    t = p.latency_s + p.latency_per_gpu_s * (g - 1.0) + 2.0 * (g - 1.0) / g * b / (link_bw * eff)
    return np.where((g > 1) & (np.asarray(nbytes) > 0), t, 0.0)
