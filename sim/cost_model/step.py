"""Step time of one engine step (a batch of prefill chunks and decodes).

A step is one forward pass on every TP rank; ranks run in lock-step, so the
step time is one rank's time. Per layer (x num_hidden_layers):
qkv_proj, attention, o_proj, ffn (dense) or moe_experts (router + grouped
expert GEMMs), norms/elementwise, two TP all-reduces. Per step: embedding and
final norm (in norms_elementwise), lm_head on sampled positions, one more
all-reduce for the vocab-parallel embedding (vLLM
``vocab_parallel_embedding.py``), and the fixed step overhead.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from sim.cost_model.count_table import CountTable, linear_at
from sim.cost_model.decode_clock import DecodeClock
from sim.cost_model.operators import (ATTENTION_IMPLS, ATTENTION_KERNELS, attention_cost,
                                      attention_peak_flops, gemm_cost)
from sim.cost_model.fitted_step import (AllReduceSum, FittedAllReduce, FittedAttention, FittedGemm,
                                        FittedMoe, inter_node_all_reduce_s, moe_backend_family)
from sim.cost_model.layer_kinds import GatedDeltaNet, MlaAttention, SlidingAttention
from sim.cost_model.moe import expected_experts_touched, max_rank_load, parse_workload_distribution
from sim.cost_model.roofline import ACT_BYTES, gemm_precision
from sim.hardware.efficiency import FittedEfficiency
from sim.errors import ConfigError
from sim.hardware.profile import HardwareProfile
from sim.model_spec import ModelSpec, kv_cache_dtype_bytes
from sim.presets import PRESETS

OP_NAMES_DENSE = ("qkv_proj", "attention", "o_proj", "ffn", "norms_elementwise", "lm_head",
                  "tp_all_reduce", "step_overhead")
OP_NAMES_MOE = tuple("moe_experts" if o == "ffn" else o for o in OP_NAMES_DENSE)


#: bytes per token of the QK-norm all-reduce of a model whose q/k RMSNorm spans all heads
#: (``ModelSpec.qk_norm_across_heads``): the q and k squared means, 2 fp32 values
QK_NORM_ALL_REDUCE_BYTES = 8.0
_LIST_MAX = 64  # batches up to this many sequences given as lists are summed in Python
PY_RUN_MAX_STEPS = 40  # decode runs timed first in parts of this many steps (most runs end sooner)


@dataclass(frozen=True)
class StepTime:
    """``total_s`` = sum of ``ops`` (seconds, per operator, all layers)."""
    total_s: float
    ops: dict[str, float]


class _Gemm:
    """Linear time coefficients of one GEMM shape for all layers:
    t(m) = max(f.m, b0 + b1.m) + c  (m tokens), = roofline of gemm_cost x layers."""
    __slots__ = ("f", "b0", "b1", "c")

    def __init__(self, n, k, prec, peak, bw, ce, me, launch, layers, weight_mats=1.0):
        f1, by1 = gemm_cost(1.0, n, k, prec, weight_mats)
        _, by0 = gemm_cost(0.0, n, k, prec, weight_mats)
        self.f = float(f1) / (peak * ce) * layers
        self.b0 = float(by0) / (bw * me) * layers
        self.b1 = float(by1 - by0) / (bw * me) * layers
        self.c = prec.num_kernels * launch * layers

    def __call__(self, m: float) -> float:
        return max(self.f * m, self.b0 + self.b1 * m) + self.c if m > 0 else 0.0


class _GemmSum:
    """Several GEMM shapes timed as one operator (their times added)."""
    __slots__ = ("parts",)

    def __init__(self, parts) -> None:
        self.parts = parts

    def __call__(self, m: float) -> float:
        t = 0.0
        for p in self.parts:
            t += p(m)
        return t

    def table(self, m: np.ndarray) -> np.ndarray:
        return sum((p.table(m) for p in self.parts), np.zeros_like(m, dtype=float))


def _gemm_sum(parts):
    """One GEMM as itself (the classic path's floats), several (or none) summed."""
    return parts[0] if len(parts) == 1 else _GemmSum(parts)


def _layer_kinds(model: ModelSpec, hw: HardwareProfile, tp: int, kv_bytes: float, impl: str,
                 engine: str | None = None) -> list:
    """The layer-kind attention objects of a non-classic model (``layer_kinds.py``)."""
    counts = model.layer_type_counts()
    out: list = []
    if model.is_mla:
        out.append(MlaAttention(model, hw, tp, kv_bytes, counts.get("full_attention", 0), engine))
    if counts.get("sliding_attention"):
        out.append(SlidingAttention(model, hw, tp, kv_bytes, counts["sliding_attention"], impl))
    if counts.get("linear_attention"):
        out.append(GatedDeltaNet(model, hw, tp, counts["linear_attention"]))
    return out


class CostModel:
    """Roofline step-time model of ``model`` on ``hw`` (one replica, TP ranks).

    ``routed_experts`` (optional): replaces the router and routed-expert
    GEMMs of an MoE model by that callable of the step's tokens (expert
    parallelism, :class:`~sim.cost_model.parallel.ParallelMoe`).

    ``quantization`` (None = the checkpoint's, else bf16/fp16/fp8/fp8_block/
    int8/int4_wo/nvfp4) sets weight bytes and GEMM peak; ``kv_cache_dtype``
    (auto, fp8, ...) sets KV bytes; ``attention_impl`` is flash or naive.
    ``moe_backend`` (None = the profile's fused-MoE kernel of the experts' weight
    format): the engine's fused-MoE kernel, timed by another ``fitted_v1`` ``moe``
    family (:data:`~sim.cost_model.fitted_step.MOE_BACKENDS`, e.g. ``marlin``).
    It applies to tensor-sharded experts on a fitted profile; the expert-parallel
    path (``routed_experts``) times experts by the fused family of their weight
    format whatever the backend (grouped GEMMs where the profile has none), scalar
    profiles as grouped GEMMs. ``engine`` (a preset name): kernels
    that differ by engine and were fitted per engine take that engine's fit
    (MLA: ``fitted_v1`` ``mla_engines``; fused MoE: ``moe_engines``); None or an engine
    without one, the default.
    ``workload_distribution`` (:data:`~sim.cost_model.moe.WORKLOAD_DISTRIBUTIONS`):
    how the routed rows spread over the experts (uniform random by default).
    """

    def __init__(self, model: ModelSpec, hw: HardwareProfile, *, tensor_parallel_size: int = 1,
                 quantization: str | None = None, kv_cache_dtype: str = "auto",
                 attention_impl: str = "flash", routed_experts=None, moe_backend: str | None = None,
                 engine: str | None = None, workload_distribution: str = "uniform") -> None:
        model.check_tensor_parallel_size(tensor_parallel_size)
        # expert / attention-data parallelism: the routed part (router + experts +
        # dispatch) as a callable of T with ``table`` (sim/cost_model/parallel.py ParallelMoe);
        # None = experts tensor-sharded over the TP ranks as below
        self._routed_override = routed_experts
        # how a DP group's ranks size the experts' tokens (the engine preset's dp_token_padding)
        preset = PRESETS.get(engine or "vllm")
        self.dp_token_padding = preset.dp_token_padding.value if preset is not None else "max"
        parse_workload_distribution(workload_distribution)  # ValueError naming the key
        self.workload_distribution = workload_distribution
        if attention_impl not in ATTENTION_IMPLS:
            raise ConfigError(f"attention_impl: unknown value {attention_impl!r}; "
                              f"valid: {', '.join(ATTENTION_IMPLS)}")
        self.model, self.hw, self.tp = model, hw, tensor_parallel_size
        self.attention_impl = attention_impl
        self.kv_bytes = float(kv_cache_dtype_bytes(kv_cache_dtype))
        tp, L, h = tensor_parallel_size, model.num_hidden_layers, model.hidden_size
        self.prec = prec = gemm_precision(hw, quantization or model.quantization)
        bf16 = gemm_precision(hw, "bf16")
        bw = hw.hbm_bandwidth_bytes_per_s
        eff = hw.efficiency
        self.fitted = isinstance(eff, FittedEfficiency)
        self._memo: dict[tuple[float, float], float] = {}  # _linear_s by (T, ns) (the fitted form: tables)
        ce, me, launch = eff.operator_efficiency("gemm")
        self.heads_r = model.num_attention_heads // tp
        self.kv_heads_r = model.kv_heads_per_rank(tp)
        d = model.head_dim
        q_r, kv_r = self.heads_r * d, self.kv_heads_r * d

        def gemm(n, k, p=prec, layers=L, mats=1.0):
            if self.fitted:
                return FittedGemm(eff, n, k, p, bw, layers)
            return _Gemm(n, k, p, p.peak_flops_per_s, bw, ce, me, launch, layers, mats)

        classic = model.is_classic
        # layers of each kind: full GQA attention timed by the FlashAttention
        # operators below; MLA, sliding-window and Gated DeltaNet layers by
        # sim/cost_model/layer_kinds.py (``self._extras``); MoE and dense FFN layers
        counts = model.layer_type_counts()
        L_attn = L if classic else (0 if model.is_mla else counts.get("full_attention", 0))
        L_moe = model.num_moe_layers if model.is_moe else 0
        self._lm = gemm(math.ceil(model.vocab_size / tp), h, p=bf16, layers=1)
        if classic:
            self._qkv = gemm(q_r + 2 * kv_r, h)
            self._o = gemm(h, q_r)
            self._dense_ffn = None
        else:
            def fam_prec(s):
                # MLA's kv_b_proj runs as the absorbed W_UK / W_UV batched matmuls in 16 bits
                # (vLLM MLACommonImpl.process_weights_after_loading dequantizes them)
                if s.name == "kv_b_proj":
                    return bf16
                return gemm_precision(hw, model.family_quantization(s.family, quantization))
            shapes = model.linear_shapes(tp)
            self._qkv, self._o, self._dense_ffn = (
                _gemm_sum([gemm(s.n, s.k, p=fam_prec(s), layers=s.layers)
                           for s in shapes if s.slot == slot]) for slot in ("qkv_proj", "o_proj", "ffn"))
            if model.is_moe:
                prec = gemm_precision(hw, model.family_quantization("experts", quantization))
        if model.is_moe:
            im_r = model.moe_intermediate_size // tp
            self._router = gemm(model.num_experts, h, p=bf16, layers=L_moe)
            if self.fitted:
                kernel = moe_backend_family(eff, moe_backend, prec.quantization) if moe_backend else None
                self._moe_fitted = FittedMoe(self._router, gemm(2 * im_r, h, layers=L_moe),
                                             gemm(h, im_r, layers=L_moe),
                                             model.num_experts, model.num_experts_per_tok, moe_backend,
                                             gemm_precision(hw, kernel) if kernel else None, engine=engine)
                self._moe_fitted.routing = workload_distribution
                if routed_experts is not None:
                    self._moe_fitted = routed_experts
            # grouped expert GEMMs w13 (n=2I, k=h) and w2 (n=h, k=I), all MoE layers:
            # t = sum over both of max(f.m, a.m + w.touched) + c, m = T x top_k
            # routed token rows, touched = distinct experts hit (gemm_cost terms)
            self._moe = []
            for n, k in ((2 * im_r, h), (h, im_r)):
                f1, by1 = gemm_cost(1.0, n, k, prec, 0.0)
                _, w1 = gemm_cost(0.0, n, k, prec, 1.0)
                self._moe.append((float(f1) / (prec.peak_flops_per_s * ce) * L_moe,
                                  float(by1) / (bw * me) * L_moe, float(w1) / (bw * me) * L_moe,
                                  prec.num_kernels * launch * L_moe))
            act_per_tok = model.num_experts_per_tok * 3 * im_r
            moe_kernels = 3  # topk softmax, align/sort, un-permute sum
        else:
            i_r = model.intermediate_size // tp
            if classic:
                self._up = gemm(2 * i_r, h)
                self._down = gemm(h, i_r)
            act_per_tok, moe_kernels = 3 * i_r, 0
        # norms/elementwise: 2 fused add+RMSNorm (4h each), RoPE on q,k (r+w),
        # Qwen3 q/k RMSNorm (r+w), SiLU-and-mul (read 2I, write I); per step:
        # embedding gather (r+w h) and final norm (3h).
        _, me_e, launch_e = eff.operator_efficiency("elementwise")
        if classic:
            per_tok_layer = 8 * h + 2 * (q_r + kv_r) * (2 if model.qk_norm else 1) + act_per_tok
            self._elem_per_tok = ACT_BYTES * (L * per_tok_layer + 5 * h) / (bw * me_e)
            kernels = L * (4 + (2 if model.qk_norm else 0) + moe_kernels) + 2
        else:  # the same terms, per layer kind: RoPE/norm passes over each qkv output,
            # SiLU-and-mul over each gate_up output (dense, shared) and the routed rows
            shapes = model.linear_shapes(tp)
            per_tok = (L * 8 * h + 5 * h
                       + sum(2 * s.n * s.layers for s in shapes if s.slot == "qkv_proj")
                       + sum(3 * s.n // 2 * s.layers for s in shapes if s.name.endswith("gate_up_proj"))
                       + (act_per_tok * L_moe if model.is_moe else 0))
            self._elem_per_tok = ACT_BYTES * per_tok / (bw * me_e)
            kernels = L * 4 + L_moe * moe_kernels + 2
        self._elem_const = kernels * launch_e
        # attention: time(layer) = max(flops/peak_eff, bytes/bw_eff) + launches
        ce_a, me_a, launch_a = eff.operator_efficiency("attention")
        self._attn_f = L_attn / (attention_peak_flops(hw, self.kv_bytes) * ce_a)
        self._attn_b = L_attn / (bw * me_a)
        self._attn_c = L_attn * ATTENTION_KERNELS * launch_a
        self._extras = [] if classic else _layer_kinds(model, hw, tp, self.kv_bytes, attention_impl, engine)
        # all-reduces: 2 per layer + 1 (embedding) of T.h activations
        ic = hw.interconnect
        self._ar_count = 2 * L + 1 if tp > 1 else 0
        if self.fitted:
            self._attn_fitted = FittedAttention(eff, hw, self.heads_r, self.kv_heads_r, d,
                                                self.kv_bytes, L_attn, attention_impl == "naive")
            self._ar_fitted = FittedAllReduce(eff, hw, h, tp, self._ar_count)
            if tp > 1 and model.qk_norm_across_heads and L_attn:
                # MiniMax-M2: one all-reduce of the q and k squared means (2 fp32 values per
                # token) per attention layer (ModelSpec.qk_norm_across_heads)
                self._ar_fitted = AllReduceSum(self._ar_fitted, FittedAllReduce(
                    eff, hw, h, tp, L_attn, bytes_per_tok=QK_NORM_ALL_REDUCE_BYTES))
            self._t_ops = CountTable(self._t_ops_block, self._t_ops_scalar)
            self._t_sum = CountTable(self._t_sum_block, self._t_sum_scalar)
            self._lm_rows = CountTable(lambda m: self._lm.table(m).tolist(), self._lm)
        else:  # (the scalar form leaves out the QK-norm all-reduces of qk_norm_across_heads)
            nodes = hw.tensor_parallel_nodes(tp)  # beyond one NVLink domain: + the NICs (hierarchical)
            g = tp // nodes
            self._ar_per_tok = (2.0 * (g - 1) / g * h * ACT_BYTES
                                / (ic.bandwidth_bytes_per_s * eff.all_reduce_efficiency)) if g > 1 else 0.0
            self._ar_lat = ic.latency_s if g > 1 else 0.0
            if nodes > 1:
                self._ar_per_tok += float(inter_node_all_reduce_s(hw, tp, h * ACT_BYTES)
                                          - inter_node_all_reduce_s(hw, tp, 0.0))
                self._ar_lat += float(inter_node_all_reduce_s(hw, tp, 0.0))
        self._overhead = eff.step_overhead_s
        if self.fitted:  # (a decode clock's reads of _linear_s at integer counts)
            self._linear_at = linear_at(self._t_sum, self._lm_rows, self._overhead)
        self.op_names = OP_NAMES_MOE if model.is_moe else OP_NAMES_DENSE

    # -- operators -------------------------------------------------------------
    def _ffn(self, T: float) -> float:
        if self._dense_ffn is not None:  # dense FFN / shared-expert layers (+ the experts)
            return self._dense_ffn(T) + (self._routed(T) if self.model.is_moe else 0.0)
        if not self.model.is_moe:
            return self._up(T) + self._down(T)
        return self._routed(T)

    def _routed(self, T: float) -> float:
        """Router and routed-expert GEMMs of all MoE layers for T tokens (s)."""
        if self._routed_override is not None:
            return self._routed_override(T)
        if self.fitted:
            return self._moe_fitted(T)
        E, k = self.model.num_experts, self.model.num_experts_per_tok
        if self.workload_distribution == "uniform" or T <= 0:
            touched = expected_experts_touched(E, k, T)  # distinct experts hit (uniform routing)
            m = T * k
        else:
            m, touched = (float(x) for x in max_rank_load(T, E, k, 1, self.workload_distribution))
        t = self._router(T)
        for f, a, w, c in self._moe:
            t += max(f * m, a * m + w * touched) + c
        return t

    def _extra_s(self, n: np.ndarray, c: np.ndarray, decode_C: int | None = None) -> float:
        """MLA, sliding-window and Gated DeltaNet layers' attention (s);
        ``decode_C``: every sequence has one new token and C cached tokens in all."""
        t = 0.0
        for kind in self._extras:
            t += kind.step_s(n, c, decode_C)
        return t

    def _attention(self, N, C, X, Q2, maximum):
        f, by = attention_cost(N, C, X, Q2, self.heads_r, self.kv_heads_r, self.model.head_dim,
                               self.kv_bytes, self.attention_impl)
        return maximum(f * self._attn_f, by * self._attn_b) + self._attn_c

    def _linear_ops(self, T: float, ns: float) -> tuple[float, ...]:
        """(qkv, o, ffn, norms, lm_head, all_reduce, overhead) for T tokens and
        ns sampled rows (s)."""
        if self.fitted:
            qkv, o, ffn, norms, ar = self._t_ops(T)
            return (qkv, o, ffn, norms, self._lm_rows(ns), ar, self._overhead)
        ar = self._ar_count * (self._ar_per_tok * T + self._ar_lat)
        return (self._qkv(T), self._o(T), self._ffn(T), self._elem_per_tok * T + self._elem_const,
                self._lm(ns), ar, self._overhead)

    def _t_ops_scalar(self, T: float) -> tuple[float, ...]:
        """(qkv, o, ffn, norms, all_reduce) of the fitted form for T tokens (s)."""
        return (self._qkv(T), self._o(T), self._ffn(T), self._elem_per_tok * T + self._elem_const,
                self._ar_fitted(T))

    def _t_ops_cols(self, T: np.ndarray) -> tuple[np.ndarray, ...]:
        """:meth:`_t_ops_scalar`'s five columns at each count of ``T``, vectorised."""
        if self._dense_ffn is not None:
            ffn = self._dense_ffn.table(T) + (self._moe_fitted.table(T) if self.model.is_moe else 0.0)
        else:
            ffn = (self._moe_fitted.table(T) if self.model.is_moe
                   else self._up.table(T) + self._down.table(T))
        return (self._qkv.table(T), self._o.table(T), ffn, self._elem_per_tok * T + self._elem_const,
                np.broadcast_to(self._ar_fitted(T), T.shape))

    def _t_ops_block(self, T: np.ndarray) -> list[tuple[float, ...]]:
        """:meth:`_t_ops_scalar` at each count of ``T``, vectorised."""
        return list(zip(*(c.tolist() for c in self._t_ops_cols(T))))

    def _t_sum_scalar(self, T: float) -> tuple[float, float]:
        """(qkv + o + ffn + norms, all_reduce): :meth:`_linear_s`'s terms before the
        lm head, added in its order, and the all-reduce after it."""
        qkv, o, ffn, norms, ar = self._t_ops_scalar(T)
        return qkv + o + ffn + norms, ar

    def _t_sum_block(self, T: np.ndarray) -> list[tuple[float, float]]:
        """:meth:`_t_sum_scalar` at each count of ``T``: the columns of :meth:`_t_ops_block`
        added element by element in the same order (IEEE adds: the same floats as the
        tuples summed one by one), without building the 5-tuples."""
        qkv, o, ffn, norms, ar = self._t_ops_cols(T)
        return list(zip((((qkv + o) + ffn) + norms).tolist(), ar.tolist()))

    def _linear_s(self, T: float, ns: float) -> float:
        """A step's time outside attention (s): :meth:`_linear_ops` summed in
        its order. Every step lasts ``attention + _linear_s`` — single steps,
        merged runs and decode clocks add the same floats in the same order."""
        if self.fitted:  # tabulated (CountTable): a lookup per count; (qkv + o + ffn + norms) + lm + ar + ov
            head, ar = self._t_sum(T)
            return head + self._lm_rows(ns) + ar + self._overhead
        key = (T, ns)
        total = self._memo.get(key)
        if total is None:
            if len(self._memo) > 1 << 16:
                self._memo.clear()
            qkv, o, ffn, norms, lm, ar, ov = self._linear_ops(T, ns)
            total = self._memo[key] = qkv + o + ffn + norms + lm + ar + ov
        return total

    @staticmethod
    def _sums(n: np.ndarray, c: np.ndarray) -> tuple[int, int, int, int]:
        if n.shape != c.shape or n.ndim != 1:
            raise ConfigError(f"step batch: num_new_tokens shape {n.shape} and num_context_tokens "
                              f"shape {c.shape} must be equal 1-D arrays")
        return int(n.sum()), int(c.sum()), int(n @ c), int(n @ n)

    # -- public API --------------------------------------------------------------
    def attention_s(self, num_new_tokens, num_context_tokens) -> float:
        """Attention of every layer kind for one batch (s): the part of a step
        that depends on each sequence (a DP rank's own batch)."""
        n, c = np.asarray(num_new_tokens), np.asarray(num_context_tokens)
        T, C, X, Q2 = self._sums(n, c)
        return self._attention_all(n, c, T, C, X, Q2) if T else 0.0

    def dp_group_step_s(self, batches) -> float:
        """Step time (s) of a DP group's ranks stepping together (attention
        data parallelism, ``sim/cost_model/parallel.py``): ``batches`` = one
        ``(num_new_tokens, num_context_tokens)`` per rank with work; the step
        lasts as long as the slowest rank. How the ranks' token counts meet in
        the experts is the engine's (``dp_token_padding``, sim/presets/):

        - ``max`` (vLLM): every rank runs its dense layers and expert dispatch
          on the largest rank's count: max over ranks of its own attention +
          the linear part at the padded count with its own sampled rows;
        - ``sum`` (TensorRT-LLM): each rank's attention and dense layers on its
          own tokens, the routed experts on the group's real total N (ParallelMoe
          at N / D per rank): max over ranks of (attention + linear part at its
          own count without the routed part) + the routed part at N / D;
        - ``sum_in_prefill`` (SGLang): ``sum`` in a step with prefill tokens;
          a decode-only step pads to the largest count where that moves less
          data (2 x sum > largest x D), else ``sum``."""
        counts = [int(sum(n)) for n, _ in batches]
        T_pad = max(counts, default=0)
        if T_pad == 0:
            return 0.0
        mode = self.dp_token_padding
        moe = self._routed_override
        if mode != "max" and moe is not None:
            D = moe.D
            total = sum(counts)
            if mode == "sum_in_prefill" and all(x <= 1 for n, _ in batches for x in n):
                mode = "max" if 2 * total > T_pad * D else "sum"
            if mode != "max":
                routed = self._routed
                own = max(self.attention_s(n, c) + self._linear_s(float(t), float(len(n))) - routed(float(t))
                          for (n, c), t in zip(batches, counts))
                return own + routed(total / D)
        return max(self.attention_s(n, c) + self._linear_s(float(T_pad), float(len(n))) for n, c in batches)

    def step_time_s(self, num_new_tokens, num_context_tokens, num_sampled: int | None = None) -> float:
        """Total step time in s. Arrays or lists of ints (one entry per
        sequence): tokens computed this step and tokens already in the KV cache
        before it; equal lengths, else ConfigError.
        ``num_sampled`` (lm_head rows) defaults to the number of sequences: vLLM
        computes logits at every scheduled request's last position."""
        if self._extras:
            return self._step_with_extras_s(np.asarray(num_new_tokens), np.asarray(num_context_tokens),
                                            num_sampled)
        if self.fitted and type(num_new_tokens) is list and len(num_new_tokens) <= _LIST_MAX:
            # The engine's lists, a small batch: plain Python sums, no arrays.
            nl, cl = num_new_tokens, num_context_tokens
            if len(nl) != len(cl):
                raise ConfigError(f"step batch: {len(nl)} num_new_tokens but {len(cl)} num_context_tokens")
            T = sum(nl)
            if T == 0:
                return 0.0
            C, Q2 = sum(cl), sum([a * a for a in nl])
            ns = len(nl) if num_sampled is None else num_sampled
            return self._attn_fitted.step_s_lists(nl, cl, T, C, Q2) + self._linear_s(float(T), float(ns))
        n = np.asarray(num_new_tokens)
        T, C, X, Q2 = self._sums(n, np.asarray(num_context_tokens))
        if T == 0:
            return 0.0
        ns = n.shape[0] if num_sampled is None else num_sampled
        if self.fitted:
            attn = self._attn_fitted.step_s(n, np.asarray(num_context_tokens), T, C, Q2)
        else:
            attn = self._attention(float(T), float(C), float(X), float(Q2), max)
        return attn + self._linear_s(float(T), float(ns))

    def _attention_all(self, n: np.ndarray, c: np.ndarray, T: int, C: int, X: int, Q2: int) -> float:
        """Attention of every layer kind for one step (s): full GQA layers, then the extras."""
        if self.fitted:
            attn = self._attn_fitted.step_s(n, c, T, C, Q2)
        else:
            attn = self._attention(float(T), float(C), float(X), float(Q2), max)
        if not self._extras:
            return attn
        return attn + self._extra_s(n, c, C if T == Q2 == n.shape[0] else None)

    def _step_with_extras_s(self, n: np.ndarray, c: np.ndarray, num_sampled) -> float:
        """:meth:`step_time_s` of a model with MLA / sliding / linear-attention layers."""
        T, C, X, Q2 = self._sums(n, c)
        if T == 0:
            return 0.0
        ns = n.shape[0] if num_sampled is None else num_sampled
        return self._attention_all(n, c, T, C, X, Q2) + self._linear_s(float(T), float(ns))

    def step_time(self, num_new_tokens, num_context_tokens, num_sampled: int | None = None) -> StepTime:
        """As :meth:`step_time_s`, with the per-operator breakdown (s)."""
        n = np.asarray(num_new_tokens)
        c = np.asarray(num_context_tokens)
        if n.size and (n.min() < 0 or c.min() < 0):
            raise ConfigError("step batch: token counts must be >= 0")
        if num_sampled is not None and num_sampled < 0:
            raise ConfigError(f"num_sampled: must be >= 0, got {num_sampled}")
        T, C, X, Q2 = self._sums(n, c)
        if T == 0:
            return StepTime(0.0, dict.fromkeys(self.op_names, 0.0))
        ns = n.shape[0] if num_sampled is None else num_sampled
        qkv, o, ffn, norms, lm, ar, ov = self._linear_ops(float(T), float(ns))
        attn = self._attention_all(n, c, T, C, X, Q2)
        total = attn + self._linear_s(float(T), float(ns))
        return StepTime(total, dict(zip(self.op_names, (qkv, attn, o, ffn, norms, lm, ar, ov))))

    def decode_steps_time_s(self, num_context_tokens, k: int, num_growing: int | None = None) -> np.ndarray:
        """Times (s, shape (k,)) of k consecutive decode-only steps of an
        unchanged batch: step j has one new token per sequence and contexts
        ``num_context_tokens + j``. Equal to k calls of :meth:`step_time_s`
        (same floating-point operations, vectorised over j).

        ``num_growing`` (default: all): only the first that many sequences'
        contexts grow by one per step; the others stay fixed — static batching's finished
        sequences computed as padding at their final length."""
        c = np.asarray(num_context_tokens)
        S = c.shape[0]
        if k < 0:
            raise ConfigError(f"decode_steps_time_s: k must be >= 0, got {k}")
        if S == 0 or k == 0:
            return np.zeros(k)
        g = S if num_growing is None else num_growing
        lin = self._linear_s(float(S), float(S))
        if self._extras:  # step by step, the same floats as step_time_s (_step_with_extras_s)
            ones, grow = np.ones(S, dtype=np.int64), np.zeros(S, dtype=np.int64)
            grow[:g] = 1
            C0 = int(c.sum())
            out = []
            for j in range(k):
                C = C0 + j * g
                out.append(self._attention_all(ones, c + j * grow, S, C, C, S) + lin)
            return np.array(out)
        if self.fitted:
            return self._attn_fitted.decode_run_s(c, k, g) + lin
        C = float(int(c.sum()))
        Cj = C + float(g) * np.arange(k, dtype=float)  # exact: integers < 2**53
        return self._attention(float(S), Cj, Cj, float(S), np.maximum) + lin

    def decode_run_ends(self, num_context_tokens: list[int], k: int, start: float, cpu_s=0.0,
                        overlap: bool = False, until: float = math.inf,
                        lasts: list[int] | None = None) -> list[float]:
        """End times (s) of k decode steps of an unchanged batch (every context
        growing) starting at ``start``, each step lasting its GPU time plus the
        host time ``cpu_s`` (``max`` of the two when ``overlap``; see
        ``sim/cost_model/overheads.py``). The same floats as k single steps accumulated
        with ``t += dt``: the engine's merged runs end exactly where the
        reference mode's steps do. The list stops after the first step that
        ends at or after ``until`` (s): the engine times a run up to the next
        arrival that may cut it.

        ``lasts`` (optional, one per sequence): the last step (1-based) in which
        sequence i takes part; it leaves the batch after it (it finished), and the
        later steps are those of the smaller batch (its contexts grown meanwhile).
        ``cpu_s`` may then be a function of the number of sequences (s), as
        ``Overheads.cpu_s``."""
        if lasts is not None:
            leave = sorted({f for f in lasts if f < k})
            if leave:
                return self._run_ends_leaving(num_context_tokens, k, start, cpu_s, overlap, until, lasts,
                                              leave)
        if callable(cpu_s):
            cpu_s = cpu_s(len(num_context_tokens))
        return self._run_ends(num_context_tokens, k, start, cpu_s, overlap, until)

    @property
    def decode_clock_joins(self) -> bool:
        """Whether :meth:`decode_clock` times mixed steps (sequences joining a run)."""
        return self.fitted and not self._extras

    def decode_clock(self, num_context_tokens: list[int], lasts: list[int] | None, start: float, cpu_s,
                     overlap: bool = False, terms: dict | None = None):
        """A resumable timer of a decode run (``ends``: step end times, s), as
        :meth:`decode_run_ends` with ``lasts``: ``advance(k, until)`` times up to
        k more steps. For the ``fitted_v1`` form a
        :class:`~sim.cost_model.decode_clock.DecodeClock`, which also times a
        mixed step that prefills joining sequences (:attr:`decode_clock_joins`); otherwise a
        clock of decode steps only. ``cpu_s``: host time (s) per step, or a
        function of the number of sequences. ``terms``: optional, a dict the
        caller keeps to share the clock's per-batch-size terms between its
        clocks of the same ``cpu_s`` function (``DecodeClock``)."""
        cpu_of = cpu_s if callable(cpu_s) else (lambda _s: cpu_s)
        if self.fitted and not self._extras:
            return DecodeClock(self._attn_fitted, self._linear_at, num_context_tokens, lasts, start, cpu_of,
                               overlap, terms)
        return _RunClock(self, num_context_tokens, lasts, start, cpu_of, overlap)

    def _run_ends_leaving(self, ctx: list[int], k: int, start: float, cpu_s, overlap: bool,
                          until: float, lasts: list[int], leave: list[int]) -> list[float]:
        """:meth:`decode_run_ends` of a batch that shrinks after the steps in
        ``leave``: in one Python loop when short, else each part as its own run
        (continuing the same float adds)."""
        cpu_of = cpu_s if callable(cpu_s) else (lambda _s: cpu_s)
        if self.fitted and not self._extras:  # (always the step-by-step clock: see _run_ends)
            clock = self.decode_clock(ctx, lasts, start, cpu_of, overlap)
            clock.advance(k, until)
            return clock.ends
        ends: list[float] = []
        j0 = 0
        t = start
        for step in leave + [k]:
            cl = [c + j0 for c, f in zip(ctx, lasts) if f > j0]
            ends += self._run_ends(cl, step - j0, t, cpu_of(len(cl)), overlap, until)
            t = ends[-1]
            if t >= until:
                break
            j0 = step
        return ends

    def _run_ends(self, num_context_tokens: list[int], k: int, start: float, cpu_s: float, overlap: bool,
                  until: float) -> list[float]:
        """:meth:`decode_run_ends` of an unchanged batch."""
        S = len(num_context_tokens)
        # The fitted form's decode attention raises to fitted (non-integer) powers:
        # numpy's vectorised ``**`` differs from Python's float ``**`` (libm) by an ulp
        # for a few per cent of inputs, so a run timed with numpy would not end where
        # single steps (step_time_s) do. The step-by-step clock uses Python's floats,
        # at ~1 us a step, whatever the run's length.
        if self.fitted and not self._extras and 0 < k and S:
            clock = self.decode_clock(num_context_tokens, None, start, lambda _s: cpu_s, overlap)
            clock.advance(k, until)
            return clock.ends
        gpu = self.decode_steps_time_s(np.asarray(num_context_tokens, dtype=np.int64), k)
        dts = np.maximum(gpu, cpu_s) if overlap else gpu + cpu_s
        # add.accumulate adds left to right (no pairwise summation): t += dt, step by step
        ends = np.cumsum(np.concatenate(([start], dts)))[1:].tolist()
        return ends[:bisect_left(ends, until) + 1] if ends and until < ends[-1] else ends


class _RunClock:
    """:meth:`CostModel.decode_clock` for cost forms without a step-by-step
    decode timer: each ``advance`` times its steps with
    :meth:`CostModel.decode_run_ends` from the contexts grown so far."""

    def __init__(self, cost: CostModel, contexts: list[int], lasts: list[int] | None, start: float, cpu_of,
                 overlap: bool) -> None:
        self.cost, self.contexts, self.lasts, self.cpu_of, self.overlap = cost, contexts, lasts, cpu_of, overlap
        self.ends: list[float] = []
        self.start = start

    def advance(self, k: int, until: float = math.inf) -> None:
        m = len(self.ends)
        if self.lasts is None:
            ctx, lasts = [c + m for c in self.contexts], None
        else:  # those still in the batch after step m
            ctx = [c + m for c, f in zip(self.contexts, self.lasts) if f > m]
            lasts = [f - m for f in self.lasts if f > m]
        t = self.ends[-1] if m else self.start
        self.ends += self.cost.decode_run_ends(ctx, k, t, self.cpu_of, self.overlap, until, lasts)
