"""Attention of the layer kinds beyond full GQA attention, one TP rank, all
layers of the kind: multi-head latent attention (MLA), sliding-window GQA and
Gated DeltaNet linear attention. Each kind is an object with
``step_s(n, c, decode_C)`` -- seconds of one engine step for sequences with
``n`` new and ``c`` cached tokens (1-D integer arrays; ``decode_C``, when given:
every ``n`` is 1 and ``c`` sums to it, the engine's common step, taken by a
shorter path with the same result) -- so the step model adds them to the
full-attention layers' time (:class:`~sim.cost_model.step.CostModel`).

Efficiencies: a one-new-token part runs at the profile's decode (generation)
attention limits, a prefill part at its context-attention limits
(:func:`attention_limits`): the size-dependent ``fitted_v1`` formulas were fitted
to FlashAttention kernels and are not transferred to other kernels' shapes;
the sliding kind, which is FlashAttention with a window, uses them fully.
"""

from __future__ import annotations

import numpy as np

from sim.cost_model.fitted_step import FittedAttention
from sim.cost_model.roofline import ACT_BYTES
from sim.cost_model.operators import attention_cost, attention_peak_flops, ATTENTION_KERNELS
from sim.hardware.efficiency import FittedEfficiency
from sim.hardware.profile import HardwareProfile
from sim.presets import PRESETS
from sim.model_spec import SSM_DTYPE_BYTES, ModelSpec, gdn_flops_per_token, window_keys


def attention_limits(hw: HardwareProfile) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """((compute eff, memory eff, launch s) of prefill, the same of decode)
    attention kernels: ``fitted_v1``: the context and generation kernels'
    large-size limits; ``scalar``: its attention efficiencies for both."""
    eff = hw.efficiency
    if isinstance(eff, FittedEfficiency):
        c, g = eff.context_attention, eff.generation_attention
        return ((c.compute_efficiency_max, c.memory_efficiency_max, c.launch_s),
                (g.compute_efficiency_max, g.memory_efficiency_max, g.launch_s))
    lim = eff.operator_efficiency("attention")
    return lim, lim


class _Roofline:
    """max(F / (peak x ce), B / (bw x me)) + launches, x layers."""

    def __init__(self, hw: HardwareProfile, limits: tuple[float, float, float], layers: int,
                 kernels: int) -> None:
        ce, me, launch = limits
        self.f = layers / (hw.peak_flops_per_s.bf16 * ce)
        self.b = layers / (hw.hbm_bandwidth_bytes_per_s * me)
        self.c = layers * kernels * launch

    def __call__(self, flops: float, nbytes: float) -> float:
        return max(flops * self.f, nbytes * self.b) + self.c


def _split(n: np.ndarray, c: np.ndarray):
    """(decode contexts, prefill new, prefill cached): one new token is a decode."""
    dec = n == 1
    pre = n > 1
    return c[dec], n[pre], c[pre]


def mla_decode_engine(engine: str | None) -> str | None:
    """The engine whose MLA module fit times ``engine``'s decode steps: the preset's
    ``mla_decode_module`` (SGLang: TensorRT-LLM's, ``sim/presets/sglang.py``), else ``engine``."""
    preset = PRESETS.get(engine or "")
    m = preset.mla_decode_module if preset is not None else None
    return m.value if m is not None else engine


class MlaAttention:
    """Multi-head latent attention (DeepSeek-V2/V3), vLLM's two paths
    (``vllm/v1/attention/backends/mla/common.py``; SGLang does the same):

    - decode (one new token), *absorbed*: W_UK is folded into the query and
      W_UV into the output, so attention runs over the cached latent itself,
      MQA-like: every one of the rank's ``H`` query heads attends to the
      (kv_lora_rank + qk_rope_head_dim)-wide latent (one shared "KV head").
      Per (query, key): QK over 576 and PV over 512 (DeepSeek-V3):
      FLOPs = 2 H (2 kv_lora_rank + qk_rope_head_dim) per key; bytes = the
      latent read once per sequence (keys x 576 x kv bytes), the absorbed query
      (H x 576) read and the latent output (H x 512) written in bf16, the new
      latent written to the cache. The absorption matmuls are timed with
      kv_b_proj under qkv_proj (``ModelSpec.linear_shapes``).
    - prefill (more new tokens), *expanded*: the cached latents are up-projected
      by kv_b_proj (2 c kv_lora_rank H (qk_nope + v) FLOPs) and attention is
      MHA with QK over qk_head_dim (192) and PV over v_head_dim (128): FLOPs =
      2 H (qk_head_dim + v_head_dim) per causal score (+ the profile's softmax cost
      per score and head, as FlashAttention's); bytes: Q, the expanded
      K and V (written by the up-projection and read by attention), O, the
      cached latents read and the new ones written.

    Against the H100 MLA kernel tables (../shared/kernels/h100_sxm, DeepSeek-V3
    shapes, 128 heads, bf16 cache), with no parameter fitted to them: decode
    predictions are 0.75-0.9x the measured FlashMLA / TRT-LLM times (the kernels
    reach 65-85 % of HBM bandwidth; fitting that is calibration's job); prefill
    runs at the context-attention limits, near TRT-LLM's 525-590 TFLOP/s
    causal, while SGLang 0.5.14's table shows ~170 TFLOP/s.
    """

    def __init__(self, model: ModelSpec, hw: HardwareProfile, tp: int, kv_bytes: float, layers: int,
                 engine: str | None = None) -> None:
        self.H = model.num_attention_heads // tp
        self.kvl, self.rope = model.kv_lora_rank, model.qk_rope_head_dim
        self.nope, self.v, self.qk = model.qk_nope_head_dim, model.v_head_dim, model.qk_head_dim
        self.kvb = kv_bytes
        prefill, decode = attention_limits(hw)
        eff = hw.efficiency
        # the engine's own MLA module fit where the profile has one (``mla_engines``), else
        # ``mla``; its decode steps may run another engine's kernels (``mla_decode_engine``)
        fitted = isinstance(eff, FittedEfficiency)
        mp = eff.mla_for(engine) if fitted else None
        md = eff.mla_for(mla_decode_engine(engine)) if fitted else None
        #: per step: fixed s and s per new token, all layers (``fitted_v1`` ``mla``: the
        #: module's small kernels; 0 without it); a step of decodes only takes the decode
        #: module's (``fixed_dec_s``, ``token_dec_s``), a step with a prefill chunk these
        self.fixed_s, self.token_s = (layers * mp.layer_s, layers * mp.token_s) if mp else (0.0, 0.0)
        self.fixed_dec_s, self.token_dec_s = (layers * md.layer_s, layers * md.token_s) if md else (0.0, 0.0)
        if mp is not None:
            prefill = (mp.prefill_compute_efficiency, mp.prefill_memory_efficiency, mp.launch_s)
            decode = (md.decode_compute_efficiency, md.decode_memory_efficiency, md.launch_s)
        self.pre, self.dec = _Roofline(hw, prefill, layers, 2), _Roofline(hw, decode, layers, 2)
        #: softmax per (query, key, head) in tensor-core FLOP-equivalents (exp on the SFUs), the
        #: fitted context-attention term (``fitted_v1``); 0 for the scalar form
        self.softmax = (eff.context_attention.softmax_flops_per_score
                        if isinstance(eff, FittedEfficiency) else 0.0)

    def decode_cost(self, b: float, keys: float) -> tuple[float, float]:
        """(FLOPs, bytes) of one layer's absorbed attention: ``b`` sequences with
        one new token reading ``keys`` cached latents in all (context + 1 each)."""
        lat = self.kvl + self.rope
        flops = 2.0 * self.H * (2 * self.kvl + self.rope) * keys
        nbytes = (keys * lat * self.kvb + b * self.H * (lat + self.kvl) * ACT_BYTES
                  + b * lat * (ACT_BYTES + self.kvb))
        return flops, nbytes

    def prefill_cost(self, sn: float, sc: float, scores: float) -> tuple[float, float]:
        """(FLOPs, bytes) of one layer's expanded attention over chunks with
        ``sn`` new and ``sc`` cached tokens in all and ``scores`` causal
        (query, key) pairs."""
        H, lat, kvb = self.H, self.kvl + self.rope, self.kvb
        up = 2.0 * sc * self.kvl * H * (self.nope + self.v)
        flops = (2.0 * H * (self.qk + self.v) + self.softmax * H) * scores + up
        nbytes = (sn * H * (self.qk + self.v) * ACT_BYTES                 # Q read, O written
                  + (sc + sn) * H * (self.qk + self.v) * ACT_BYTES        # expanded K, V read
                  + sc * H * (self.nope + self.v) * ACT_BYTES             # up-projection written
                  + sc * lat * kvb + sn * lat * (ACT_BYTES + kvb))        # latents read / cached
        return flops, nbytes

    def step_s(self, n: np.ndarray, c: np.ndarray, decode_C: int | None = None) -> float:
        if decode_C is not None:
            b = n.shape[0]
            t = self.fixed_dec_s + self.token_dec_s * float(b)  # the general path's order: same floats
            return t + self.dec(*self.decode_cost(float(b), float(decode_C + b)))
        cd, npf, cpf = _split(n, c)
        fixed, tok = (self.fixed_s, self.token_s) if npf.size else (self.fixed_dec_s, self.token_dec_s)
        t = fixed + tok * float(n.sum()) if n.size else 0.0
        if cd.size:
            t += self.dec(*self.decode_cost(float(cd.size), float(cd.sum() + cd.size)))
        if npf.size:
            scores = float(npf @ cpf) + float(npf @ npf + npf.sum()) / 2.0
            t += self.pre(*self.prefill_cost(float(npf.sum()), float(cpf.sum()), scores))
        return t


def window_sums(n: np.ndarray, c: np.ndarray, window: int) -> tuple[float, float, float, float]:
    """(sum n, sum c', sum n.c', sum n^2) of a batch under a causal sliding
    window of ``window`` tokens, such that the full-attention formulas
    (``operators.attention_cost``: scores = sum n.c + (sum n^2 + sum n) / 2, KV
    read = sum c + sum n) give the windowed ones: c' = min(c, window - 1) cached
    tokens read (with the n new ones, the keys of the oldest new token's window:
    min(c + 1, window) for a decode), and sum n.c' set so the score count is exactly
    sum of :func:`~sim.model_spec.window_keys`."""
    nf, cf = n.astype(float), c.astype(float)
    scores = float(window_keys(nf, cf, window).sum())
    sn, snn = float(nf.sum()), float(nf @ nf)
    return sn, float(np.minimum(cf, window - 1).sum()), scores - (snn + sn) / 2.0, snn


class SlidingAttention:
    """Sliding-window GQA layers (gpt-oss ``sliding_attention``, window 128):
    each new token attends to at most ``sliding_window`` keys, so a step's
    scores and KV reads stop growing with the context at the window
    (:func:`window_sums`); otherwise FlashAttention as the full layers, with
    the profile's attention formulas (``fitted_v1``: a decode reads
    min(c + 1, window) keys in tiles; prefill chunks the windowed score count).
    gpt-oss's attention sinks (one learned logit per head added to the softmax
    denominator) cost one score per (query, head): not counted (< 1/window)."""

    def __init__(self, model: ModelSpec, hw: HardwareProfile, tp: int, kv_bytes: float, layers: int,
                 impl: str = "flash") -> None:
        self.W = model.sliding_window
        self.heads, self.kv_heads, self.d = (model.num_attention_heads // tp, model.kv_heads_per_rank(tp),
                                             model.head_dim)
        self.kvb, self.impl = kv_bytes, impl
        eff = hw.efficiency
        self.fitted = FittedAttention(eff, hw, self.heads, self.kv_heads, self.d, kv_bytes, layers,
                                      impl == "naive") if isinstance(eff, FittedEfficiency) else None
        if self.fitted is None:
            ce, me, launch = eff.operator_efficiency("attention")
            self.f = layers / (attention_peak_flops(hw, kv_bytes) * ce)
            self.b = layers / (hw.hbm_bandwidth_bytes_per_s * me)
            self.c = layers * ATTENTION_KERNELS * launch

    def step_s(self, n: np.ndarray, c: np.ndarray, decode_C: int | None = None) -> float:
        if decode_C is not None and self.fitted is not None:
            fa, W, t = self.fitted, self.W, self.fitted.tile
            keys = [x + 1 if x < W else W for x in c.tolist()]  # min(c + 1, window)
            return fa.sums_s(len(keys), sum(keys), sum([(x - 1 + t) // t for x in keys]),
                             0, 0, 0, 0, 0, 0)
        if self.fitted is None:
            f, by = attention_cost(*window_sums(n, c, self.W), self.heads, self.kv_heads, self.d,
                                   self.kvb, self.impl)
            return max(f * self.f, by * self.b) + self.c
        fa, W = self.fitted, self.W
        cd, npf, cpf = _split(n, c)
        keys = np.minimum(cd + 1, W)  # a decode reads min(c + 1, window) keys
        b = int(cd.size)
        tiled = int(((keys - 1 + fa.tile) // fa.tile).sum())
        if not npf.size:
            return fa.sums_s(b, int(keys.sum()), tiled, 0, 0, 0, 0, 0, 0)
        sn, sc, snc, snn = window_sums(npf, cpf, W)
        qtiles = int(((npf + fa.ca.tile_q - 1) // fa.ca.tile_q).sum())
        return fa.sums_s(b, int(keys.sum()), tiled, int(npf.size), sn, sc, snc, snn, qtiles)


class GatedDeltaNet:
    """Gated DeltaNet linear-attention layers (Qwen3-Next / Qwen3.5
    ``linear_attention``), the sequence mixer between the in_proj and
    out_proj GEMMs (timed under qkv_proj / o_proj): a causal conv1d over
    q, k, v (``linear_conv_kernel_dim`` taps) and the gated delta rule
    recurrence. A sequence keeps a constant state (conv state + one
    d_k x d_v matrix per value head, ``ModelSpec.state_bytes_per_sequence``):
    decode costs the same at any context length (the state read and written
    once per step); prefill is linear in the new tokens
    (:func:`~sim.model_spec.gdn_flops_per_token`, chunked algorithm).
    Bytes: the state read and written once per sequence and step, and per
    token q, k, v in and the output out (bf16) through both kernels.

    Against vLLM 0.24's H100 GDN table (../shared/kernels/h100_sxm/vllm-0.24.0_gdn,
    Qwen3.5-397B-A17B shapes, conv1d + recurrence kernels summed; nothing fitted):
    median predicted / measured 1.2 in decode (large batches are the fp32 state
    streamed at near HBM bandwidth, as modelled) and 1.4 in prefill."""

    def __init__(self, model: ModelSpec, hw: HardwareProfile, tp: int, layers: int) -> None:
        kd, vd = model.linear_key_dim // tp, model.linear_value_dim // tp
        self.conv_dim = 2 * kd + vd
        self.K = model.linear_conv_kernel_dim
        n_lin = model.layer_type_counts().get("linear_attention", 1)
        self.state = model.state_bytes_per_sequence(tp) / n_lin  # one layer, one sequence
        self.act_per_tok = ACT_BYTES * (2 * self.conv_dim + 2 * kd + 2 * vd)  # conv in/out, rule in/out
        self.flops_dec = gdn_flops_per_token(model, tp, prefill=False) + 2.0 * self.K * self.conv_dim
        self.flops_pre = gdn_flops_per_token(model, tp, prefill=True) + 2.0 * self.K * self.conv_dim
        prefill, decode = attention_limits(hw)
        eff = hw.efficiency
        gp = eff.gdn if isinstance(eff, FittedEfficiency) else None
        self.seq_s = layers * gp.seq_s if gp else 0.0  #: per sequence with new tokens, all layers
        if gp is not None:
            prefill = (gp.prefill_compute_efficiency, gp.prefill_memory_efficiency, gp.launch_s)
            decode = (gp.decode_compute_efficiency, gp.decode_memory_efficiency, gp.decode_launch)
        self.pre, self.dec = _Roofline(hw, prefill, layers, 2), _Roofline(hw, decode, layers, 2)
        self.ssm_bytes = SSM_DTYPE_BYTES[model.mamba_ssm_dtype]
        self.v_heads = model.linear_num_value_heads // tp
        self.num_sms = hw.num_sms
        self.cta_token_s = layers * gp.cta_token_s if gp else 0.0  #: serial chunk walk, all layers

    def step_s(self, n: np.ndarray, c: np.ndarray, decode_C: int | None = None) -> float:
        if decode_C is not None:
            dec = n.shape[0]
            return (self.dec(dec * self.flops_dec, dec * (2.0 * self.state + self.act_per_tok))
                    + self.seq_s * dec)
        dec = int((n == 1).sum())
        pre = n > 1
        t = 0.0
        if dec:
            t += self.dec(dec * self.flops_dec, dec * (2.0 * self.state + self.act_per_tok)) + self.seq_s * dec
        npre = int(pre.sum())
        if npre:
            sn = float(n[pre].sum())
            serial = self.cta_token_s * gdn_serial_tokens(npre * self.v_heads, self.num_sms,
                                                          float(n[pre].max()), sn / npre)
            t += (max(self.pre(sn * self.flops_pre, npre * 2.0 * self.state + sn * self.act_per_tok),
                      serial + self.pre.c)
                  + self.seq_s * npre)
        return t


def mla_layer_s(p, hw: HardwareProfile, flops, nbytes, new_tokens, decode):
    """One layer of :class:`MlaAttention` with ``fitted_v1`` ``mla`` parameters
    ``p`` (arrays broadcast; the same terms as ``step_s`` for a batch that is all
    decodes or all prefill chunks): ``flops``/``nbytes`` from ``decode_cost`` or
    ``prefill_cost``, ``new_tokens`` in the step, ``decode`` True for the absorbed path."""
    peak, bw = hw.peak_flops_per_s.bf16, hw.hbm_bandwidth_bytes_per_s
    ce = np.where(decode, p.decode_compute_efficiency, p.prefill_compute_efficiency)
    me = np.where(decode, p.decode_memory_efficiency, p.prefill_memory_efficiency)
    return (np.maximum(flops / (peak * ce), nbytes / (bw * me)) + 2.0 * p.launch_s + p.layer_s
            + p.token_s * new_tokens)


def gdn_serial_tokens(seq_heads, num_sms, longest, mean):
    """Tokens one CTA of the chunked GDN prefill walks in order: the longest
    sequence's, or, where the (sequence, value head) pairs take several waves over
    the SMs, waves x the mean length (arrays broadcast)."""
    waves = -(-seq_heads // num_sms)
    return np.maximum(longest, waves * mean)


def gdn_layer_s(p, hw: HardwareProfile, flops, nbytes, seqs, decode, tokens_per_seq=1.0,
                v_heads=0.0):
    """One layer of :class:`GatedDeltaNet` with ``fitted_v1`` ``gdn`` parameters ``p``
    for a batch that is all decodes or all prefill chunks of ``tokens_per_seq``
    tokens each (arrays broadcast; the terms of ``step_s``): FLOPs, bytes,
    sequences, ``decode`` True for one new token, ``v_heads`` value heads per rank."""
    peak, bw = hw.peak_flops_per_s.bf16, hw.hbm_bandwidth_bytes_per_s
    ce = np.where(decode, p.decode_compute_efficiency, p.prefill_compute_efficiency)
    me = np.where(decode, p.decode_memory_efficiency, p.prefill_memory_efficiency)
    launch = 2.0 * np.where(decode, p.decode_launch, p.launch_s)
    serial = np.where(decode, 0.0, p.cta_token_s * gdn_serial_tokens(
        np.asarray(seqs) * v_heads, hw.num_sms, tokens_per_seq, tokens_per_seq))
    roof = np.maximum(flops / (peak * ce), nbytes / (bw * me))
    return np.maximum(roof, serial) + launch + p.seq_s * seqs
