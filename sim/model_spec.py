"""Model architecture (:class:`ModelSpec`) from a Hugging Face ``config.json``
or a built-in preset, and the quantities derived from it: parameter counts,
weight bytes, KV-cache bytes per token, FLOPs of a forward pass.

Units: counts of parameters, bytes, FLOPs (one multiply-add = 2 FLOPs).
Presets live in ``sim/data/model_presets.yaml`` (config.json fields copied from
the published configs).

Layer kinds (HF / vLLM names):

- attention: ``full_attention`` (GQA/MHA, or multi-head latent attention, MLA,
  when ``kv_lora_rank`` is given: DeepSeek-V2/V3/R1), ``sliding_attention``
  (GQA over the last ``sliding_window`` tokens; gpt-oss alternates it with full
  attention, with attention sinks), ``linear_attention`` (Gated DeltaNet,
  Qwen3-Next / Qwen3.5: a constant recurrent state per sequence) -- from
  ``layer_types`` (or ``sliding_window`` alone: every layer sliding);
- MLP: dense gated-SiLU FFN, or MoE (routed experts, ``num_experts_per_tok`` of
  them per token, plus shared experts ``n_shared_experts`` /
  ``shared_expert_intermediate_size``), with dense layers where
  ``first_k_dense_replace`` / ``moe_layer_freq`` (DeepSeek) or
  ``mlp_only_layers`` / ``decoder_sparse_step`` (Qwen MoE) say so;
- multimodal wrappers (``text_config``): the language model under
  ``text_config`` is read; the vision tower is ignored (its weights and
  encoder cost are not modelled: text-only serving);
- multi-token-prediction layers (``num_nextn_predict_layers``,
  ``mtp_num_hidden_layers``) are not counted: vLLM loads them only for
  speculative decoding, which is not modelled.

Weight precision per operator family (:data:`LINEAR_FAMILIES`): a checkpoint's
``quantization_config`` (``modules_to_not_convert`` / ``ignore``) or ModelOpt
``hf_quant_config.json`` (``exclude_modules``) keeps some modules 16-bit
(gpt-oss: attention bf16, experts MXFP4; DeepSeek-V3.1-NVFP4: the MLA low-rank
projections bf16). Architectures not modelled (chunked attention, per-layer
window lists, unknown ``layer_types``, unknown quantization methods) are refused
with a :class:`~sim.errors.ConfigError` naming the key and value.

The fields read from ``config.json`` are validated by :class:`HFConfig` (pydantic
v2, strict: ``"128"``, ``128.5`` or ``true`` is not an integer, ``"no"`` not a
boolean; widths and counts positive, expert counts non-negative); a bad value is a
ConfigError naming the file, field and value. Other keys are ignored.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.errors import ConfigError, ServesimError
from sim.yaml_io import safe_load

_PRESETS_FILE = Path(__file__).parent / "data" / "model_presets.yaml"

#: Weight precisions (the ``quantization`` config key) and bytes per quantized
#: parameter, including the scales stored with them:
#: fp8_block: one fp32 scale per 128x128 block (DeepSeek/Qwen FP8 checkpoints);
#: int4_wo: one fp16 scale per group of 128 (GPTQ/AWQ default group size);
#: nvfp4: one fp8 E4M3 scale per 16 elements (NVIDIA NVFP4 format);
#: mxfp4: one E8M0 (1 B) scale per 32 elements (OCP Microscaling MXFP4, gpt-oss experts).
#: fp8 per-tensor and int8 per-channel scales are < 0.1 % and ignored.
WEIGHT_BYTES_PER_PARAM: dict[str, float] = {
    "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_block": 1.0 + 4.0 / (128 * 128),
    "int8": 1.0, "int4_wo": 0.5 + 2.0 / 128, "nvfp4": 0.5 + 1.0 / 16, "mxfp4": 0.5 + 1.0 / 32,
}

#: ``layer_types`` values modelled (HF transformers / vLLM names).
LAYER_TYPES = ("full_attention", "sliding_attention", "linear_attention")
#: Families of linear weights, each with one precision (the checkpoint's, or
#: 16-bit where its quantization config excludes the family's modules):
#: attention input projections (q/k/v, MLA q_a/q_b/kv_a/kv_b, GDN in_proj),
#: attention output projection (o_proj, GDN out_proj), dense FFN layers,
#: shared experts, routed experts.
LINEAR_FAMILIES = ("attn_qkv", "attn_o", "dense_mlp", "shared_experts", "experts")
#: Bytes per element of the Gated DeltaNet recurrent state by ``mamba_ssm_dtype``.
SSM_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_QUANT_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}

#: KV-cache dtypes (vLLM ``--kv-cache-dtype`` names) and bytes per element;
#: ``auto`` means the model's dtype (2 bytes). vLLM ``config/cache.py``.
KV_CACHE_DTYPE_BYTES: dict[str, int] = {
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}


def normalize_quantization(quantization: str | None, dtype: str = "bf16") -> str:
    """Canonical weight precision: ``None``/``auto`` -> the model dtype."""
    if quantization is None or quantization == "auto":
        return "fp16" if dtype in ("float16", "fp16") else "bf16"
    q = _QUANT_ALIASES.get(quantization, quantization)
    if q not in WEIGHT_BYTES_PER_PARAM:
        raise ConfigError(f"quantization: unknown value {quantization!r}; valid: "
                          f"{', '.join(WEIGHT_BYTES_PER_PARAM)} (or none)")
    return q


def kv_cache_dtype_bytes(kv_cache_dtype: str) -> int:
    """Bytes per KV-cache element for a vLLM ``kv_cache_dtype`` name."""
    if kv_cache_dtype == "auto":
        return 2
    if kv_cache_dtype not in KV_CACHE_DTYPE_BYTES:
        raise ConfigError(f"kv_cache_dtype: unknown value {kv_cache_dtype!r}; valid: auto, "
                          f"{', '.join(KV_CACHE_DTYPE_BYTES)}")
    return KV_CACHE_DTYPE_BYTES[kv_cache_dtype]


class ForwardFlops(NamedTuple):
    """FLOPs of one forward pass (whole model, all ranks together)."""
    linear: float      #: projections, dense FFN or routed experts, MoE router
    attention: float   #: QK^T and PV, causal
    lm_head: float     #: logits of the sampled positions

    @property
    def total(self) -> float:
        return self.linear + self.attention + self.lm_head


def window_keys(n, c, window):
    """Keys attended by ``n`` new tokens after ``c`` cached ones in a causal
    sliding window of ``window`` tokens: sum over i = 1..n of min(c + i, window)
    (the full causal count n.c + n(n+1)/2 when c + n <= window). Works on
    numpy arrays (elementwise) and Python numbers."""
    m = np.clip(window - c, 0, n)  # new tokens whose causal span still fits the window
    return m * c + m * (m + 1) / 2.0 + (n - m) * window


#: Chunk length of the chunked Gated DeltaNet prefill kernel (flash-linear-attention
#: ``chunk_gated_delta_rule``, as vLLM's qwen3_next uses: 64).
GDN_CHUNK = 64


def gdn_flops_per_token(model: ModelSpec, tensor_parallel_size: int = 1, prefill: bool = True) -> float:
    """FLOPs per token of one Gated DeltaNet layer's recurrence on one rank
    (projections and conv1d excluded), per value head with state S (d_k x d_v):
    decode (recurrent form): decay S (d_k.d_v), predict S^T k (2 d_k.d_v),
    rank-1 delta update (2 d_k.d_v), read out S^T q (2 d_k.d_v): 7 d_k.d_v;
    prefill (chunked form, chunk C = :data:`GDN_CHUNK`): the inter-chunk state
    terms (4 d_k.d_v) plus the causal intra-chunk products Q K^T, the WY
    transform and A V (C (2 d_k + d_v)). Linear in the length either way
    (Yang et al., "Gated Delta Networks", ICLR 2025, section 3)."""
    dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
    heads = model.linear_num_value_heads // tensor_parallel_size
    per_head = (4.0 * dk * dv + GDN_CHUNK * (2.0 * dk + dv)) if prefill else 7.0 * dk * dv
    return heads * per_head


class LinearShape(NamedTuple):
    """A linear layer on one TP rank: C[m, n] = A[m, k] . W[k, n] in ``layers`` layers."""
    name: str     #: HF / vLLM module name
    family: str   #: one of :data:`LINEAR_FAMILIES` (sets its precision)
    slot: str     #: cost-model operator it is timed under (qkv_proj, o_proj, ffn)
    n: int
    k: int
    layers: int


@dataclass(frozen=True)
class ModelSpec:
    """Decoder-only transformer shape, HF ``config.json`` names.

    ``intermediate_size`` is the dense FFN width; for MoE models the routed
    experts use ``moe_intermediate_size`` (Mixtral: equal to intermediate_size).
    ``quantization`` is the checkpoint's weight precision (``None`` = ``dtype``).
    """

    name: str
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    qk_norm: bool = False
    #: QK-norm over all heads of q and of k together (MiniMax-M2 ``qk_norm_type: per_layer``),
    #: not per head: with TP each rank holds some heads, so the ranks all-reduce the squared
    #: means, one all-reduce of 2 fp32 values per token per attention layer (vLLM
    #: ``MiniMaxText01RMSNormTP.forward_qk``, ``layers/mamba/linear_attn.py``, used by
    #: ``models/minimax_m2.py``; github.com/vllm-project/vllm)
    qk_norm_across_heads: bool = False
    attention_bias: bool = False
    dtype: str = "bfloat16"
    quantization: str | None = None
    architecture: str = ""
    # -- per-layer attention kinds (empty: every layer full_attention) --------
    # (fields named as config.json keys default to None = absent, as in config.json)
    layer_types: tuple[str, ...] | None = None
    sliding_window: int | None = None    #: tokens a sliding_attention layer attends to
    attention_sinks: bool = False        #: gpt-oss: one learned sink logit per head
    attn_output_gate: bool = False       #: Qwen3.5 gated attention: q_proj also makes the gate
    # -- MLA (DeepSeek): kv_lora_rank > 0 -------------------------------------
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None       #: None: q_proj without low-rank compression
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    # -- MoE structure ----------------------------------------------------------
    shared_expert_intermediate_size: int = 0   #: width of all shared experts together
    dense_mlp_layers: tuple[int, ...] = ()     #: indices of dense-FFN layers in an MoE model
    # -- Gated DeltaNet (linear_attention layers) -------------------------------
    linear_num_key_heads: int | None = None
    linear_num_value_heads: int | None = None
    linear_key_head_dim: int | None = None
    linear_value_head_dim: int | None = None
    linear_conv_kernel_dim: int | None = None
    mamba_ssm_dtype: str = "bfloat16"
    # -- precision per family: these LINEAR_FAMILIES stay 16-bit ------------------
    unquantized_families: tuple[str, ...] = ()

    # -- layer structure ----------------------------------------------------
    @property
    def is_classic(self) -> bool:
        """Every layer full GQA attention and the same FFN (dense, or routed
        experts only), one precision: the shape the original cost model covers
        (its numbers are kept bit for bit)."""
        return (not self.kv_lora_rank and not self.attn_output_gate
                and all(t == "full_attention" for t in self.layer_types or ())
                and not self.shared_expert_intermediate_size and not self.dense_mlp_layers
                and not self.unquantized_families)

    @property
    def is_mla(self) -> bool:
        return bool(self.kv_lora_rank)

    def layer_type_list(self) -> tuple[str, ...]:
        """One ``layer_types`` entry per layer (all full_attention when not given)."""
        return self.layer_types or ("full_attention",) * self.num_hidden_layers

    def layer_type_counts(self) -> dict[str, int]:
        """Layers of each type present, in :data:`LAYER_TYPES` order."""
        lt = self.layer_type_list()
        return {t: lt.count(t) for t in LAYER_TYPES if t in lt}

    @property
    def num_moe_layers(self) -> int:
        return (self.num_hidden_layers - len(self.dense_mlp_layers)) if self.is_moe else 0

    @property
    def num_dense_mlp_layers(self) -> int:
        return len(self.dense_mlp_layers) if self.is_moe else self.num_hidden_layers

    @property
    def qk_head_dim(self) -> int:
        """MLA query/key head width: qk_nope_head_dim + qk_rope_head_dim (192 in DeepSeek-V3)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def family_quantization(self, family: str, quantization: str | None = None) -> str:
        """Weight precision of a :data:`LINEAR_FAMILIES` member: 16-bit (the model
        dtype) when the checkpoint excludes it, else ``quantization`` (None: the
        checkpoint's)."""
        if family in self.unquantized_families:
            return normalize_quantization(None, self.dtype)
        return normalize_quantization(quantization or self.quantization, self.dtype)

    # -- shapes ---------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def q_size(self) -> int:
        """Query width = num_attention_heads x head_dim (elements)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of K (or V) = num_key_value_heads x head_dim (elements)."""
        return self.num_key_value_heads * self.head_dim

    def kv_heads_per_rank(self, tensor_parallel_size: int = 1) -> int:
        """KV heads held by one TP rank: ``max(1, kv_heads // tp)``; replicated
        when tp > kv_heads (vLLM ``config/model.py::get_num_kv_heads``)."""
        return max(1, self.num_key_value_heads // tensor_parallel_size)

    def check_tensor_parallel_size(self, tensor_parallel_size: int) -> None:
        """vLLM's rule: tp divides the attention heads, and tp divides the KV
        heads or the KV heads divide tp (``config/model.py``)."""
        tp, kv = tensor_parallel_size, self.num_key_value_heads
        if self.is_mla:  # the latent is replicated; the query heads are split (vLLM MLA)
            kv = tp if isinstance(tp, int) and tp >= 1 else 1
        lin = (self.linear_num_key_heads, self.linear_num_value_heads)
        if "linear_attention" in (self.layer_types or ()) and isinstance(tp, int) and tp >= 1 and (
                lin[0] % tp or lin[1] % tp):
            raise ConfigError(
                f"tensor_parallel_size: {tp!r} does not fit {self.name}: it must divide "
                f"linear_num_key_heads={lin[0]} and linear_num_value_heads={lin[1]} (Gated DeltaNet heads)")
        if (not isinstance(tp, int) or tp < 1 or self.num_attention_heads % tp
                or (kv % tp and tp % kv)):
            raise ConfigError(
                f"tensor_parallel_size: {tp!r} does not fit {self.name} "
                f"({self.num_attention_heads} heads, {kv} KV heads); it must be >= 1, divide the "
                f"heads, and divide or be a multiple of the KV heads")

    # -- linear weights of every layer kind (general path) -----------------------
    def linear_shapes(self, tensor_parallel_size: int = 1) -> list[LinearShape]:
        """The dense linear layers of one TP rank, HF module names, as GEMM shapes
        ``n`` (outputs) x ``k`` (inputs) with the number of layers holding them.
        Routed experts are not listed (:meth:`expert_shapes`). vLLM sharding:
        column-parallel q/k/v, gate/up, MLA q_b/kv_b, GDN in_proj; row-parallel
        o_proj, down, GDN out_proj; K/V replicated when tp > KV heads; MLA's
        q_a/kv_a (``fused_qkv_a_proj``) replicated (vLLM ``deepseek_v2.py``)."""
        tp, h = tensor_parallel_size, self.hidden_size
        counts = self.layer_type_counts()
        out: list[LinearShape] = []
        n_gqa = counts.get("full_attention", 0) + counts.get("sliding_attention", 0)
        if self.is_mla:
            n_mla, n_gqa = n_gqa, 0
            H_r = self.num_attention_heads // tp
            rope, kvl, ql = self.qk_rope_head_dim, self.kv_lora_rank, self.q_lora_rank
            if ql:
                out += [LinearShape("fused_qkv_a_proj", "attn_qkv", "qkv_proj", ql + kvl + rope, h, n_mla),
                        LinearShape("q_b_proj", "attn_qkv", "qkv_proj", H_r * self.qk_head_dim, ql, n_mla)]
            else:
                out += [LinearShape("q_proj", "attn_qkv", "qkv_proj", H_r * self.qk_head_dim, h, n_mla),
                        LinearShape("kv_a_proj_with_mqa", "attn_qkv", "qkv_proj", kvl + rope, h, n_mla)]
            # kv_b_proj: in prefill the up-projection of the new tokens' latents; in decode
            # the absorbed W_UK (q_nope -> latent) and W_UV (latent -> v) batched matmuls,
            # the same weights and FLOPs per token (vllm/v1/attention/backends/mla/common.py)
            out += [LinearShape("kv_b_proj", "attn_qkv", "qkv_proj",
                                H_r * (self.qk_nope_head_dim + self.v_head_dim), kvl, n_mla),
                    LinearShape("o_proj", "attn_o", "o_proj", h, H_r * self.v_head_dim, n_mla)]
        if n_gqa:
            q_r = self.num_attention_heads // tp * self.head_dim
            kv_r = self.kv_heads_per_rank(tp) * self.head_dim
            q_out = 2 * q_r if self.attn_output_gate else q_r
            out += [LinearShape("qkv_proj", "attn_qkv", "qkv_proj", q_out + 2 * kv_r, h, n_gqa),
                    LinearShape("o_proj", "attn_o", "o_proj", h, q_r, n_gqa)]
        n_lin = counts.get("linear_attention", 0)
        if n_lin:
            kd, vd = self.linear_key_dim // tp, self.linear_value_dim // tp
            out += [LinearShape("in_proj_qkvz", "attn_qkv", "qkv_proj", 2 * kd + 2 * vd, h, n_lin),
                    LinearShape("in_proj_ba", "attn_qkv", "qkv_proj",
                                2 * self.linear_num_value_heads // tp, h, n_lin),
                    LinearShape("out_proj", "attn_o", "o_proj", h, vd, n_lin)]
        n_dense = self.num_dense_mlp_layers
        if n_dense:
            i_r = self.intermediate_size // tp
            out += [LinearShape("gate_up_proj", "dense_mlp", "ffn", 2 * i_r, h, n_dense),
                    LinearShape("down_proj", "dense_mlp", "ffn", h, i_r, n_dense)]
        if self.shared_expert_intermediate_size and self.num_moe_layers:
            s_r = self.shared_expert_intermediate_size // tp
            out += [LinearShape("shared_experts.gate_up_proj", "shared_experts", "ffn", 2 * s_r, h,
                                self.num_moe_layers),
                    LinearShape("shared_experts.down_proj", "shared_experts", "ffn", h, s_r,
                                self.num_moe_layers)]
        return out

    def expert_shapes(self, tensor_parallel_size: int = 1) -> tuple[LinearShape, LinearShape]:
        """One routed expert's w13 (gate+up) and w2 (down) on one rank, experts
        tensor-sharded as vLLM's FusedMoE without expert parallelism."""
        tp, h = tensor_parallel_size, self.hidden_size
        im_r = self.moe_intermediate_size // tp
        return (LinearShape("experts.w13", "experts", "ffn", 2 * im_r, h, self.num_moe_layers),
                LinearShape("experts.w2", "experts", "ffn", h, im_r, self.num_moe_layers))

    @property
    def linear_key_dim(self) -> int:
        """Gated DeltaNet q/k width: linear_num_key_heads x linear_key_head_dim."""
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        """Gated DeltaNet v/z/output width: linear_num_value_heads x linear_value_head_dim."""
        return self.linear_num_value_heads * self.linear_value_head_dim

    def _small_params_per_rank(self, tp: int) -> float:
        """16-bit parameters other than embeddings / lm_head on one rank (all
        replicated here; they are < 0.1 % of any model): norms, biases, router,
        MLA latent norms, GDN conv1d / A_log / dt_bias / norm, attention sinks."""
        h, counts = self.hidden_size, self.layer_type_counts()
        total = float(self.num_hidden_layers * 2 * h + h)
        n_att = counts.get("full_attention", 0) + counts.get("sliding_attention", 0)
        if self.is_mla:
            total += n_att * (self.q_lora_rank + self.kv_lora_rank)
        else:
            if self.qk_norm:  # across heads (MiniMax-M2): one weight per q and k channel
                total += n_att * ((self.q_size + self.kv_size) if self.qk_norm_across_heads
                                  else 2 * self.head_dim)
            if self.attention_bias:
                total += n_att * (self.q_size + 2 * self.kv_size)
            if self.attention_sinks:
                total += n_att * self.num_attention_heads
        n_lin = counts.get("linear_attention", 0)
        if n_lin:
            conv_dim = 2 * self.linear_key_dim + self.linear_value_dim
            total += n_lin * (conv_dim * self.linear_conv_kernel_dim + 2 * self.linear_num_value_heads
                              + self.linear_value_head_dim)
        total += self.num_moe_layers * h * self.num_experts  # router
        return total

    def _general_params(self, active_only: bool) -> float:
        lin = sum(s.n * s.k * s.layers for s in self.linear_shapes(1))
        if self.is_moe:
            w13, w2 = self.expert_shapes(1)
            n_exp = self.num_experts_per_tok if active_only else self.num_experts
            lin += n_exp * (w13.n * w13.k + w2.n * w2.k) * self.num_moe_layers
        emb = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        return lin + emb + self._small_params_per_rank(1)

    def _general_weight_bytes(self, quantization: str | None, tp: int) -> float:
        total = 0.0
        for s in self.linear_shapes(tp):
            total += s.n * s.k * s.layers * WEIGHT_BYTES_PER_PARAM[self.family_quantization(
                s.family, quantization)]
        if self.is_moe:
            w13, w2 = self.expert_shapes(tp)
            total += (self.num_experts * (w13.n * w13.k + w2.n * w2.k) * self.num_moe_layers
                      * WEIGHT_BYTES_PER_PARAM[self.family_quantization("experts", quantization)])
        emb = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2) / tp
        extra = 0.0
        if self.is_mla and self.family_quantization("attn_qkv", quantization) not in ("bf16", "fp16"):
            # vLLM dequantizes kv_b_proj into 16-bit W_UK / W_UV for the absorbed decode and
            # keeps the quantized kv_b_proj for prefill (MLACommonImpl.process_weights_after_loading)
            kv_b = next(s for s in self.linear_shapes(tp) if s.name == "kv_b_proj")
            extra = kv_b.n * kv_b.k * kv_b.layers
        return total + (emb + self._small_params_per_rank(tp) + extra) * 2.0

    # -- parameter counts (per layer and whole model) ---------------------
    def attention_params_per_layer(self) -> int:
        """q, k, v, o projection weights (+ biases, + Qwen3 q/k RMSNorm)."""
        p = 2 * self.hidden_size * self.q_size + 2 * self.hidden_size * self.kv_size
        if self.attention_bias:
            p += self.q_size + 2 * self.kv_size
        return p

    def mlp_params_per_expert(self) -> int:
        """gate, up, down of one gated-SiLU FFN (one expert for MoE)."""
        width = self.moe_intermediate_size if self.is_moe else self.intermediate_size
        return 3 * self.hidden_size * width

    def unquantized_params(self) -> int:
        """Parameters kept in 16-bit under any quantization: embeddings,
        lm_head, all norms, attention biases and the MoE router (vLLM skips
        these in its quantized linear methods; lm_head is excluded by FP8/NVFP4
        checkpoints, e.g. nvidia/Llama-3.1-70B-Instruct-FP8 hf_quant_config)."""
        L, h = self.num_hidden_layers, self.hidden_size
        per_layer = 2 * h + (((self.q_size + self.kv_size) if self.qk_norm_across_heads else 2 * self.head_dim)
                             if self.qk_norm else 0)
        if self.attention_bias:
            per_layer += self.q_size + 2 * self.kv_size
        per_layer += h * self.num_experts  # router
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return L * per_layer + emb + h

    def quantizable_params(self, active_only: bool = False) -> int:
        """Projection and FFN/expert weights (what quantization shrinks)."""
        proj = 2 * self.hidden_size * self.q_size + 2 * self.hidden_size * self.kv_size
        n_exp = (self.num_experts_per_tok if active_only else self.num_experts) if self.is_moe else 1
        return self.num_hidden_layers * (proj + n_exp * self.mlp_params_per_expert())

    def num_params(self) -> int:
        """Total parameters (Llama-3.1-8B: 8.03e9; DeepSeek-V3: 671e9 without
        its multi-token-prediction layer)."""
        if not self.is_classic:
            return int(self._general_params(False))
        return self.quantizable_params() + self.unquantized_params()

    def num_active_params(self) -> int:
        """Parameters used per token: only ``num_experts_per_tok`` experts of an
        MoE layer (Mixtral-8x7B: 12.9e9 of 46.7e9). Equals num_params if dense."""
        if not self.is_classic:
            return int(self._general_params(True))
        return self.quantizable_params(active_only=True) + self.unquantized_params()

    # -- bytes --------------------------------------------------------------
    def weight_bytes(self, quantization: str | None = None, tensor_parallel_size: int = 1) -> float:
        """Weight bytes held by one TP rank (all ranks when tp = 1).

        Projections and FFN/experts take ``WEIGHT_BYTES_PER_PARAM[quantization]``
        bytes per parameter; embeddings, lm_head, norms, biases and router stay
        16-bit. ``quantization=None`` uses the checkpoint's (``self.quantization``).
        Under TP, projections, FFN, embedding and lm_head are split across
        ranks (vocab-parallel); K/V projections are replicated when tp >
        kv_heads; norms and router are replicated.
        """
        tp = tensor_parallel_size
        self.check_tensor_parallel_size(tp)
        if not self.is_classic:  # per family precision, every layer kind
            return self._general_weight_bytes(quantization, tp)
        q = normalize_quantization(quantization or self.quantization, self.dtype)
        h, L = self.hidden_size, self.num_hidden_layers
        kv_r = self.kv_heads_per_rank(tp) * self.head_dim
        proj = h * self.q_size / tp * 2 + 2 * h * kv_r
        n_exp = self.num_experts if self.is_moe else 1
        quant = L * (proj + n_exp * self.mlp_params_per_expert() / tp)
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2) / tp
        replicated = self.unquantized_params() - self.vocab_size * h * (
            1 if self.tie_word_embeddings else 2)
        return quant * WEIGHT_BYTES_PER_PARAM[q] + (emb + replicated) * 2.0

    def kv_bytes_per_token(self, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1) -> int:
        """KV-cache bytes per token on one TP rank:
        2 (K and V) x layers x kv_heads_per_rank x head_dim x dtype bytes
        (vLLM ``kv_cache_interface.py``). Llama-3.1-8B bf16: 131,072."""
        self.check_tensor_parallel_size(tensor_parallel_size)
        if not self.is_classic:
            per = self.kv_bytes_per_token_by_layer_type(kv_cache_dtype, tensor_parallel_size)
            return sum(per[t] * n for t, n in self.layer_type_counts().items())
        return (2 * self.num_hidden_layers * self.kv_heads_per_rank(tensor_parallel_size)
                * self.head_dim * kv_cache_dtype_bytes(kv_cache_dtype))

    def kv_bytes_per_token_by_layer_type(self, kv_cache_dtype: str = "auto",
                                         tensor_parallel_size: int = 1) -> dict[str, int]:
        """KV-cache bytes per token of ONE layer of each type present, one TP rank:

        - full_attention, GQA: 2 (K, V) x kv_heads_per_rank x head_dim x dtype bytes;
        - full_attention, MLA: (kv_lora_rank + qk_rope_head_dim) x dtype bytes, one
          latent per token, the same on every TP rank (vLLM ``MLAAttentionSpec``:
          one "KV head" of head_size 576 stored once, not K and V;
          ``kv_cache_interface.py``). DeepSeek-V3 bf16: 576 x 2 = 1,152 B;
        - sliding_attention: as full GQA per token held. Its tokens older than
          ``sliding_window`` are not needed: vLLM's hybrid KV cache manager gives
          each layer type its own KV cache group and frees a sliding group's
          blocks outside the window (docs.vllm.ai/en/latest/design/hybrid_kv_cache_manager/;
          servesim: :mod:`sim.kv_cache.groups`, :mod:`sim.kv_cache.hybrid`).
          :meth:`kv_bytes_per_token` counts sliding layers at full length (what
          one block table for every layer holds: the conservative pool of the
          engines whose sliding-window pools are not modelled);
        - linear_attention: 0 per token (a constant state per sequence:
          :meth:`state_bytes_per_sequence`).
        """
        self.check_tensor_parallel_size(tensor_parallel_size)
        b = kv_cache_dtype_bytes(kv_cache_dtype)
        out: dict[str, int] = {}
        for t in self.layer_type_counts():
            if t == "linear_attention":
                out[t] = 0
            elif self.is_mla:
                out[t] = (self.kv_lora_rank + self.qk_rope_head_dim) * b
            else:
                out[t] = 2 * self.kv_heads_per_rank(tensor_parallel_size) * self.head_dim * b
        return out

    def state_bytes_per_sequence(self, tensor_parallel_size: int = 1) -> int:
        """Constant per-sequence state of the linear_attention (Gated DeltaNet)
        layers on one TP rank, whatever the sequence length (vLLM
        ``MambaSpec``: conv state + recurrent state per request): per layer the
        causal conv1d state, (linear_conv_kernel_dim - 1) x conv_dim / tp x model
        dtype bytes, conv_dim = 2 x key_dim + value_dim, plus the recurrent state,
        linear_num_value_heads / tp x linear_key_head_dim x linear_value_head_dim x
        ``mamba_ssm_dtype`` bytes (vLLM ``mamba_utils.gated_delta_net_state_shape``).
        0 without linear_attention layers."""
        n_lin = self.layer_type_counts().get("linear_attention", 0)
        if not n_lin:
            return 0
        tp = tensor_parallel_size
        self.check_tensor_parallel_size(tp)
        conv_dim = (2 * self.linear_key_dim + self.linear_value_dim) // tp
        conv = (self.linear_conv_kernel_dim - 1) * conv_dim * 2
        ssm = (self.linear_num_value_heads // tp * self.linear_key_head_dim * self.linear_value_head_dim
               * SSM_DTYPE_BYTES[self.mamba_ssm_dtype])
        return n_lin * (conv + ssm)

    # -- FLOPs --------------------------------------------------------------
    def forward_flops(self, num_new_tokens: int, context_len: int = 0,
                      num_logit_tokens: int = 1) -> ForwardFlops:
        """FLOPs to process ``num_new_tokens`` of one sequence that already has
        ``context_len`` tokens cached. Linear: 2 x tokens x (active projection,
        FFN/expert and router weights). Attention: new token i attends to
        context_len + i + 1 keys (causal), 4 x heads x head_dim FLOPs per key
        (QK^T and PV), summed: n*c + n(n+1)/2 keys. lm_head: 2 x h x vocab per
        logit position (vLLM computes logits only for sampled positions)."""
        n, c = num_new_tokens, context_len
        h, L = self.hidden_size, self.num_hidden_layers
        if not self.is_classic:
            return self._general_forward_flops(n, c, num_logit_tokens)
        per_tok = self.quantizable_params(active_only=True) + L * h * self.num_experts
        keys = n * c + n * (n + 1) / 2
        attn = 4.0 * L * self.num_attention_heads * self.head_dim * keys
        return ForwardFlops(2.0 * n * per_tok, attn, 2.0 * num_logit_tokens * h * self.vocab_size)

    def _general_forward_flops(self, n: int, c: int, num_logit_tokens: int) -> ForwardFlops:
        """forward_flops for every layer kind: sliding layers attend to at most
        ``sliding_window`` keys; MLA runs absorbed for one new token (decode:
        QK over kv_lora_rank + qk_rope_head_dim, PV over kv_lora_rank, per head)
        and expanded for more (prefill: QK over qk_head_dim, PV over v_head_dim,
        plus the kv_b up-projection of the cached context); Gated DeltaNet is
        linear in the tokens (:func:`gdn_flops_per_token`)."""
        h = self.hidden_size
        per_tok = sum(s.n * s.k * s.layers for s in self.linear_shapes(1))
        if self.is_moe:
            w13, w2 = self.expert_shapes(1)
            per_tok += self.num_moe_layers * (self.num_experts_per_tok * (w13.n * w13.k + w2.n * w2.k)
                                              + h * self.num_experts)
        H = self.num_attention_heads
        keys = n * c + n * (n + 1) / 2
        attn = 0.0
        for t, count in self.layer_type_counts().items():
            if t == "linear_attention":
                attn += count * n * gdn_flops_per_token(self, 1, prefill=n > 1)
            elif self.is_mla:
                if n == 1:
                    attn += count * 2.0 * H * (2 * self.kv_lora_rank + self.qk_rope_head_dim) * keys
                else:
                    attn += count * (2.0 * H * (self.qk_head_dim + self.v_head_dim) * keys + 2.0 * c
                                     * self.kv_lora_rank * H * (self.qk_nope_head_dim + self.v_head_dim))
            else:
                k_t = window_keys(n, c, self.sliding_window) if t == "sliding_attention" else keys
                attn += count * 4.0 * H * self.head_dim * k_t
        return ForwardFlops(2.0 * n * per_tok, attn, 2.0 * num_logit_tokens * h * self.vocab_size)

    # -- construction ---------------------------------------------------------
    @classmethod
    def from_hf_config(cls, config: dict[str, Any] | str | Path, name: str | None = None) -> ModelSpec:
        """Build from a HF ``config.json`` (a dict or a path to the file)."""
        if isinstance(config, (str, Path)):
            path = Path(config)
            try:
                data = json.loads(path.read_text(), object_pairs_hook=_unique_keys)
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ConfigError(f"{path}: cannot read model config: {e}") from None
            except _DuplicateKey as e:
                raise ConfigError(f"{path}: key {e.args[0]!r} is given twice; give it once") from None
            return cls(**_parse_hf_config(data, str(path)), name=name or str(path))
        data = dict(config) if isinstance(config, dict) else config
        return cls(**_parse_hf_config(data, name or "<dict>"), name=name or "<dict>")


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json object hook: a key given twice is an error (json keeps the last silently)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


@lru_cache(maxsize=1)
def _presets() -> dict[str, dict[str, Any]]:
    return safe_load(_PRESETS_FILE.read_text())


@lru_cache(maxsize=1)
def _alias_index() -> dict[str, tuple[str, str | None]]:
    """lowercase name or HF id -> (preset, quantization override)."""
    idx: dict[str, tuple[str, str | None]] = {}
    for key, entry in _presets().items():
        idx[key.lower()] = (key, None)
        for hf_id in entry.get("hf_ids", []):
            idx[hf_id.lower()] = (key, None)
        for hf_id, quant in (entry.get("quantized_ids") or {}).items():
            idx[hf_id.lower()] = (key, quant)
    return idx


def list_models() -> list[str]:
    """Short names of the built-in presets."""
    return sorted(_presets())


@lru_cache(maxsize=64)
def _preset_spec(key: str) -> ModelSpec:
    return ModelSpec.from_hf_config(_presets()[key]["config"], name=key)


def get_model(name_or_path: str | Path) -> ModelSpec:
    """A preset by short name or HF id (case-insensitive), or a ``config.json``
    path. A pre-quantized id (e.g. ``nvidia/Llama-3.1-70B-Instruct-FP8``) sets
    ``quantization``. Unknown name -> ConfigError listing the valid names."""
    text = str(name_or_path)
    hit = _alias_index().get(text.lower())
    if hit is not None:
        key, quant = hit
        spec = _preset_spec(key)  # a pre-quantized checkpoint's own precision unless the id names one
        return replace(spec, name=text if text.lower() != key else key,
                       quantization=quant if quant is not None else spec.quantization)
    path = Path(text)
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ConfigError(f"model: {text} is a folder without a config.json")
    if path.is_file():
        spec = ModelSpec.from_hf_config(path)
        found = _modelopt_quantization(path)
        if found and spec.quantization is None:
            quant, excluded = found
            return replace(spec, quantization=quant,
                           unquantized_families=excluded_families(spec, excluded))
        return spec
    if path.suffix == ".json":
        raise ConfigError(f"model: {text}: no such file")
    raise ConfigError(f"model: unknown model {text!r} (not a preset, HF id or config.json path); "
                      f"presets: {', '.join(list_models())}")


# -- HF config.json parsing -------------------------------------------------------
_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
             "vocab_size", "max_position_embeddings")
#: Widths and counts of a config.json (hidden size, heads, layers, experts, vocabulary):
#: no model comes near 2^24; beyond it products of them overflow int64 downstream.
MAX_HF_DIM = 2 ** 24
#: Context length (max_position_embeddings): int32, as the checkpoints' position ids.
MAX_HF_POSITIONS = 2 ** 31 - 1
#: Checkpoint dtypes (``torch_dtype`` / ``dtype``); a quantized checkpoint says so in
#: ``quantization_config``, not here.
HF_DTYPES = ("bfloat16", "float16", "float32")

_Dim = Annotated[int, Field(ge=1, le=MAX_HF_DIM)]
_Count = Annotated[int, Field(ge=0, le=MAX_HF_DIM)]
# bool is not an int and "128" is not a number here (pydantic strict mode); keys
# servesim does not read are ignored, as vLLM ignores them.
_HF_STRICT = ConfigDict(strict=True, extra="ignore", frozen=True)


class HFQuantizationConfig(BaseModel):
    """The ``quantization_config`` keys servesim reads."""

    model_config = _HF_STRICT
    quant_method: str | None = None
    quant_algo: str | None = None
    bits: int | None = Field(default=None, ge=1, le=64)
    weight_block_size: list[_Dim] | None = None
    #: modules kept unquantized: ``modules_to_not_convert`` (fp8, mxfp4, awq),
    #: ``ignore`` (compressed-tensors), ``exclude_modules`` (modelopt)
    modules_to_not_convert: list[str] | None = None
    ignore: list[str] | None = None
    exclude_modules: list[str] | None = None
    config_groups: dict[str, Any] | None = None  # compressed-tensors schemes
    format: str | None = None


class HFConfig(BaseModel):
    """The fields of a Hugging Face ``config.json`` that servesim reads, strictly
    typed: integers that are JSON integers (no strings, floats or booleans), booleans
    that are JSON booleans, widths and counts positive (expert counts and refusal
    markers may be 0), ``null`` = the field's default. The required shape fields
    are optional here: architectures servesim refuses are named before a missing
    field is (:func:`_parse_hf_config`)."""

    model_config = _HF_STRICT
    architectures: list[str] | None = None
    model_type: str | None = None
    text_config: Any = None
    num_hidden_layers: _Dim | None = None
    hidden_size: _Dim | None = None
    num_attention_heads: _Dim | None = None
    intermediate_size: _Dim | None = None
    vocab_size: _Dim | None = None
    max_position_embeddings: Annotated[int, Field(ge=1, le=MAX_HF_POSITIONS)] | None = None
    num_key_value_heads: _Dim | None = None
    head_dim: _Dim | None = None
    tie_word_embeddings: bool | None = None
    attention_bias: bool | None = None
    torch_dtype: Literal[HF_DTYPES] | None = None  # type: ignore[valid-type]
    dtype: Literal[HF_DTYPES] | None = None  # type: ignore[valid-type]
    # MoE
    num_local_experts: _Count | None = None
    num_experts: _Count | None = None
    num_experts_per_tok: _Count | None = None
    moe_intermediate_size: _Count | None = None  # 0 or absent: intermediate_size (dense: unused)
    n_routed_experts: _Count | None = None  # DeepSeek's name for num_experts
    # MLA (DeepSeek-V2/V3)
    kv_lora_rank: _Dim | None = None
    q_lora_rank: _Dim | None = None   # null: q_proj without compression (DeepSeek-V2-Lite)
    qk_nope_head_dim: _Dim | None = None
    qk_rope_head_dim: _Dim | None = None
    v_head_dim: _Dim | None = None
    # sliding window / hybrid layers
    sliding_window: _Dim | list[_Dim | None] | None = None  # a list: per-layer windows
    use_sliding_window: bool | None = None
    max_window_layers: _Count | None = None
    layer_types: list[str] | None = None
    attention_chunk_size: _Count | None = None
    attn_output_gate: bool | None = None
    use_qk_norm: bool | None = None      # MiniMax-M2's QK-norm switch
    qk_norm_type: Literal["per_layer", "per_head"] | None = None  # MiniMax-M2: per_layer = over all heads
    # Gated DeltaNet (linear_attention layers)
    linear_num_key_heads: _Dim | None = None
    linear_num_value_heads: _Dim | None = None
    linear_key_head_dim: _Dim | None = None
    linear_value_head_dim: _Dim | None = None
    linear_conv_kernel_dim: _Dim | None = None
    mamba_ssm_dtype: Literal[tuple(SSM_DTYPE_BYTES)] | None = None  # type: ignore[valid-type]
    # MoE structure
    n_shared_experts: _Count | None = None
    shared_expert_intermediate_size: _Count | None = None
    shared_intermediate_size: _Count | None = None  # MiniMax-M2's name
    num_shared_experts: _Count | None = None
    mlp_only_layers: list[Annotated[int, Field(ge=0)]] | None = None
    decoder_sparse_step: Annotated[int, Field(ge=1)] | None = None
    first_k_dense_replace: _Count | None = None
    moe_layer_freq: Annotated[int, Field(ge=1)] | None = None
    quantization_config: HFQuantizationConfig | None = None


_TYPE_TAGS = {"int", "str", "bool", "float", "none", "list", "dict"}


def routed_experts_of(name_or_path: str | Path) -> int | None:
    """The routed experts of a model (None for a dense model or one that does not
    load: the caller's own path names the model's error)."""
    try:
        return int(get_model(name_or_path).num_experts) or None
    except (ServesimError, OSError, ValueError):
        return None


def _is_union_tag(part: Any) -> bool:
    """A part of a pydantic error location that names a union member, not a field."""
    return isinstance(part, str) and (part in _TYPE_TAGS or "[" in part
                                      or part.startswith(("function-", "constrained-", "literal")))


def _format_hf_errors(exc: ValidationError, source: str) -> str:
    """One clause per offending field: ``SOURCE: FIELD=VALUE: must be ...``."""
    seen: dict[str, str] = {}
    for err in exc.errors():
        loc = [str(p) for p in err["loc"] if not _is_union_tag(p)]
        key = ".".join(loc) or "<root>"
        msg = err["msg"].removeprefix("Value error, ").replace("Input should be", "must be")
        if err["type"] in ("int_type", "int_from_float") or "valid integer" in msg:
            msg = "must be a JSON integer (not a string, float or boolean)"
        elif "valid boolean" in msg:
            msg = "must be a JSON boolean (true or false)"
        elif err["type"] in ("model_type", "model_attributes_type", "dict_type"):
            msg = "must be a JSON object"
        elif err["type"] == "list_type":
            msg = "must be a JSON list"
        elif err["type"] == "string_type":
            msg = "must be a JSON string"
        if key in seen:
            continue  # a union: the first alternative's complaint is enough
        seen[key] = f"{key}={err.get('input')!r}: {msg}"
    return f"{source}: " + "; ".join(seen.values())


def _refuse(source: str, key: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"{source}: {key}={value!r}: {why}; servesim's cost model does not "
                       f"handle this architecture (refused rather than approximated)")


def _text_model_config(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """A multimodal wrapper's language model: ``text_config`` with the wrapper's
    ``quantization_config``, ``tie_word_embeddings`` and ``architectures`` where
    the text part lacks them. The vision tower (``vision_config``) is ignored:
    servesim serves text only (no image encoder cost or weights)."""
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise ConfigError(f"{source}: text_config={text!r}: must be a JSON object (the language model's config)")
    merged = dict(text)
    for key in ("quantization_config", "tie_word_embeddings", "torch_dtype"):
        if key in cfg and key not in merged:
            merged[key] = cfg[key]
    merged["architectures"] = cfg.get("architectures")
    return merged


def _layer_types(hf: HFConfig, source: str) -> tuple[str, ...]:
    """Per-layer attention kind (() = all full_attention), from ``layer_types``,
    or from ``sliding_window`` (every layer, as Mistral-7B-v0.1; Qwen2 with
    ``use_sliding_window``: layers from ``max_window_layers`` on, as HF)."""
    L = hf.num_hidden_layers
    if hf.layer_types is not None:
        bad = sorted({t for t in hf.layer_types if t not in LAYER_TYPES})
        if bad:
            raise ConfigError(f"{source}: layer_types={bad[0]!r}: not modelled; valid: {', '.join(LAYER_TYPES)}")
        if len(hf.layer_types) != L:
            raise ConfigError(f"{source}: layer_types: {len(hf.layer_types)} entries for num_hidden_layers="
                              f"{L} (one per layer)")
        if all(t == "full_attention" for t in hf.layer_types):
            return ()
        return tuple(hf.layer_types)
    window = hf.sliding_window
    if window is None or isinstance(window, list) or hf.use_sliding_window is False:
        return ()
    if window >= (hf.max_position_embeddings or window + 1):
        return ()  # the window covers every position: full attention
    first = hf.max_window_layers if hf.use_sliding_window and hf.max_window_layers is not None else 0
    return tuple("sliding_attention" if i >= first else "full_attention" for i in range(L or 0))


def _moe_dense_layers(hf: HFConfig, num_experts: int, source: str) -> tuple[int, ...]:
    """Indices of the dense-FFN layers of an MoE model: DeepSeek's
    ``first_k_dense_replace`` and ``moe_layer_freq`` (layer i is MoE when
    i >= first_k_dense_replace and i % moe_layer_freq == 0, HF
    ``modeling_deepseek_v3``), Qwen-MoE's ``mlp_only_layers`` and
    ``decoder_sparse_step`` (MoE when i is not listed and (i + 1) % step == 0,
    HF ``modeling_qwen3_moe``)."""
    L = hf.num_hidden_layers
    if not num_experts:
        return ()
    first, freq = hf.first_k_dense_replace or 0, hf.moe_layer_freq or 1
    step, only = hf.decoder_sparse_step or 1, set(hf.mlp_only_layers or ())
    if any(i >= L for i in only):
        raise ConfigError(f"{source}: mlp_only_layers={sorted(only)}: a layer index >= "
                          f"num_hidden_layers={L}")
    if first > L:
        raise ConfigError(f"{source}: first_k_dense_replace={first}: more than num_hidden_layers={L}")
    dense = tuple(i for i in range(L)
                  if i < first or i % freq or i in only or (i + 1) % step)
    if len(dense) == L:
        raise ConfigError(f"{source}: first_k_dense_replace/moe_layer_freq/mlp_only_layers/decoder_sparse_step "
                          f"leave no MoE layer although experts are given; drop the expert keys")
    return dense


def _parse_hf_config(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """ModelSpec fields from config.json keys; refuses what is not modelled."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{source}: a Hugging Face config.json must be a JSON object, got {type(cfg).__name__}")
    wrapper = "text_config" in cfg and cfg.get("hidden_size") is None
    if wrapper:
        cfg = _text_model_config(cfg, source)
    try:
        hf = HFConfig.model_validate(cfg)
    except ValidationError as exc:
        raise ConfigError(_format_hf_errors(exc, source)) from None
    window = hf.sliding_window
    if isinstance(window, list) and any(w is not None for w in window):
        raise _refuse(source, "sliding_window", window, "a window per layer")
    if hf.attention_chunk_size:
        raise _refuse(source, "attention_chunk_size", hf.attention_chunk_size, "chunked attention")
    archs = hf.architectures or []
    if archs and not any(a.endswith("ForCausalLM") or (wrapper and a.endswith("ForConditionalGeneration"))
                         for a in archs):
        raise _refuse(source, "architectures", archs, "not a decoder-only causal LM")
    required = [k for k in _REQUIRED if k != "intermediate_size"]
    missing = [k for k in required if getattr(hf, k) is None]
    if missing:
        raise ConfigError(f"{source}: missing required config.json key(s): {', '.join(missing)}")
    layer_types = _layer_types(hf, source)
    sliding = "sliding_attention" in layer_types
    if sliding and not isinstance(window, int):
        raise ConfigError(f"{source}: layer_types has sliding_attention but sliding_window={window!r}: "
                          f"give the window (tokens)")
    heads, hidden = hf.num_attention_heads, hf.hidden_size
    kv_heads = hf.num_key_value_heads or heads
    if hf.head_dim is None and hidden % heads:
        raise ConfigError(f"{source}: hidden_size={hidden}: not a multiple of num_attention_heads={heads}, "
                          f"and no head_dim is given (the head width would be fractional)")
    head_dim = hf.head_dim or hidden // heads
    mla = {}
    if hf.kv_lora_rank is not None:
        absent = [k for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") if getattr(hf, k) is None]
        if absent:
            raise ConfigError(f"{source}: kv_lora_rank={hf.kv_lora_rank}: multi-head latent attention (MLA) "
                              f"needs {', '.join(absent)}")
        if sliding or "linear_attention" in layer_types:
            raise _refuse(source, "layer_types", sorted(set(layer_types)), "MLA with non-full layers")
        mla = dict(kv_lora_rank=hf.kv_lora_rank, q_lora_rank=hf.q_lora_rank,
                   qk_nope_head_dim=hf.qk_nope_head_dim, qk_rope_head_dim=hf.qk_rope_head_dim,
                   v_head_dim=hf.v_head_dim)
        kv_heads = heads  # MLA has no KV-head grouping (the latent is shared by all heads)
    elif hf.q_lora_rank is not None:
        raise ConfigError(f"{source}: q_lora_rank={hf.q_lora_rank}: given without kv_lora_rank (MLA)")
    elif heads % kv_heads:
        raise ConfigError(f"{source}: num_key_value_heads={kv_heads}: must divide "
                          f"num_attention_heads={heads}")
    gdn = {}
    if "linear_attention" in layer_types:
        keys = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                "linear_value_head_dim", "linear_conv_kernel_dim")
        absent = [k for k in keys if getattr(hf, k) is None]
        if absent:
            raise ConfigError(f"{source}: layer_types has linear_attention (Gated DeltaNet) but "
                              f"{', '.join(absent)} missing")
        gdn = {k: getattr(hf, k) for k in keys}
        if gdn["linear_num_value_heads"] % gdn["linear_num_key_heads"]:
            raise ConfigError(f"{source}: linear_num_value_heads={gdn['linear_num_value_heads']}: must be a "
                              f"multiple of linear_num_key_heads={gdn['linear_num_key_heads']}")
        gdn["mamba_ssm_dtype"] = hf.mamba_ssm_dtype or hf.torch_dtype or hf.dtype or "bfloat16"
    experts = [(k, getattr(hf, k)) for k in ("num_local_experts", "num_experts", "n_routed_experts")
               if getattr(hf, k)]
    if len({v for _, v in experts}) > 1:
        raise ConfigError(f"{source}: {experts[0][0]}={experts[0][1]} and {experts[1][0]}={experts[1][1]} "
                          f"disagree; give one")
    experts_key, num_experts = experts[0] if experts else ("num_experts", 0)
    top_k = hf.num_experts_per_tok or 0
    if num_experts and not 1 <= top_k <= num_experts:
        raise ConfigError(f"{source}: num_experts_per_tok={hf.num_experts_per_tok!r}: must be in "
                          f"1..{num_experts} ({experts_key}={num_experts})")
    if num_experts and hf.moe_intermediate_size == 0:
        raise ConfigError(f"{source}: moe_intermediate_size=0: an expert's FFN width must be >= 1 "
                          f"({experts_key}={num_experts}); omit it to use intermediate_size")
    moe_width = (hf.moe_intermediate_size or hf.intermediate_size or 0) if num_experts else 0
    shared = 0
    if num_experts:
        n_shared = hf.n_shared_experts or hf.num_shared_experts or 0
        shared = (hf.shared_expert_intermediate_size or hf.shared_intermediate_size
                  or n_shared * moe_width)
        if n_shared and hf.shared_expert_intermediate_size:
            shared = n_shared * hf.shared_expert_intermediate_size
    else:
        for key in ("n_shared_experts", "shared_expert_intermediate_size", "num_shared_experts"):
            if getattr(hf, key):
                raise ConfigError(f"{source}: {key}={getattr(hf, key)}: shared experts without routed "
                                  f"experts (num_experts / num_local_experts / n_routed_experts)")
    dense_layers = _moe_dense_layers(hf, num_experts, source)
    intermediate = hf.intermediate_size
    if intermediate is None:
        if not num_experts or dense_layers:
            raise ConfigError(f"{source}: missing required config.json key(s): intermediate_size")
        intermediate = moe_width
    if num_experts and not moe_width:
        raise ConfigError(f"{source}: {experts_key}={num_experts}: needs moe_intermediate_size "
                          f"(or intermediate_size)")
    model_type = hf.model_type or ""
    dtype = hf.torch_dtype or hf.dtype or "bfloat16"
    if dtype == "float32":
        dtype = "float16"  # vLLM dtype=auto serves a float32 checkpoint in 16 bits
    quant, not_converted = _parse_quantization(hf.quantization_config, source)
    fields = dict(
        num_hidden_layers=hf.num_hidden_layers, hidden_size=hidden,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=intermediate, vocab_size=hf.vocab_size,
        max_position_embeddings=hf.max_position_embeddings,
        tie_word_embeddings=bool(hf.tie_word_embeddings),
        num_experts=num_experts, num_experts_per_tok=top_k if num_experts else 0,
        moe_intermediate_size=moe_width,
        qk_norm=(model_type in ("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text", "qwen3_5_text")
                 or bool(hf.use_qk_norm)),
        qk_norm_across_heads=bool(hf.use_qk_norm) and hf.qk_norm_type == "per_layer",
        attention_bias=(hf.attention_bias if hf.attention_bias is not None
                        else model_type in ("qwen2", "qwen2_moe")),
        dtype=dtype, quantization=quant,
        architecture=archs[0] if archs else model_type,
        layer_types=layer_types or None, sliding_window=window if sliding else None,
        attention_sinks=model_type == "gpt_oss", attn_output_gate=bool(hf.attn_output_gate),
        shared_expert_intermediate_size=shared, dense_mlp_layers=dense_layers if num_experts else (),
        **mla, **gdn)
    if not_converted:
        probe = ModelSpec(name=source, **fields)
        try:
            fields["unquantized_families"] = excluded_families(probe, not_converted)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
    return fields


#: HF module names of each family (``{i}`` = layer index), matched against a
#: checkpoint's excluded-module patterns.
_FAMILY_MODULES = {
    "attn_qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.q_a_proj",
                 "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj",
                 "linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba"),
    "attn_o": ("self_attn.o_proj", "linear_attn.out_proj"),
    "dense_mlp": ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"),
    "shared_experts": ("mlp.shared_experts.gate_proj", "mlp.shared_expert.gate_proj"),
    "experts": ("mlp.experts", "block_sparse_moe.experts"),
}


def _module_excluded(name: str, patterns: list[str]) -> bool:
    """vLLM's rule for ignored modules, as its quantization configs apply it:
    an exact or ``fnmatch`` glob match, a listed parent module, a listed last
    component (``lm_head``, ``gate``), or a ``re:`` regular expression
    (compressed-tensors ``ignore``)."""
    parts = name.split(".")
    for pat in patterns:
        if pat.startswith("re:"):  # compressed-tensors: a regular expression
            try:
                if re.match(pat[3:], name):
                    return True
            except re.error:
                raise ConfigError(f"quantization_config: ignored-module pattern {pat!r}: not a valid "
                                  f"regular expression") from None
            continue
        if fnmatch.fnmatchcase(name, pat) or fnmatch.fnmatchcase(name, pat + ".*"):
            return True
        if "." not in pat and pat in parts[-1:]:
            return True
    return False


def excluded_families(model: ModelSpec, patterns: list[str]) -> tuple[str, ...]:
    """:data:`LINEAR_FAMILIES` a checkpoint keeps 16-bit: those whose modules
    the ``patterns`` (``modules_to_not_convert`` / ``ignore`` /
    ``exclude_modules``) cover in at least half of the layers holding them (a
    family has one precision here; every shared checkpoint excludes a family in
    all its layers or in none)."""
    lt = model.layer_type_list()
    dense = set(model.dense_mlp_layers) if model.is_moe else set(range(model.num_hidden_layers))
    holders = {
        "attn_qkv": range(model.num_hidden_layers), "attn_o": range(model.num_hidden_layers),
        "dense_mlp": sorted(dense),
        "shared_experts": [i for i in range(model.num_hidden_layers) if i not in dense]
        if model.shared_expert_intermediate_size else [],
        "experts": [i for i in range(model.num_hidden_layers) if i not in dense] if model.is_moe else [],
    }
    out = []
    for fam in LINEAR_FAMILIES:
        layers = list(holders[fam])
        if not layers:
            continue
        hits = 0
        for i in layers:
            mods = _FAMILY_MODULES[fam]
            if fam.startswith("attn"):
                prefix = "linear_attn." if lt[i] == "linear_attention" else "self_attn."
                mods = tuple(m for m in mods if m.startswith(prefix))
            if any(_module_excluded(f"model.layers.{i}.{m}", patterns) for m in mods):
                hits += 1
        if 2 * hits >= len(layers):
            out.append(fam)
    return tuple(out)


def _modelopt_quantization(config_path: Path) -> tuple[str, list[str]] | None:
    """A ModelOpt checkpoint's quantization (NVIDIA's FP8 / NVFP4 models) and
    its ``exclude_modules``: in ``hf_quant_config.json`` beside ``config.json``
    (``NAME_hf_quant_config.json`` beside ``NAME_config.json``, the
    ``../shared/models`` naming), as vLLM reads it."""
    stem = config_path.name.removesuffix("config.json")
    names = dict.fromkeys((f"{stem}hf_quant_config.json", "hf_quant_config.json"))
    for cand in (config_path.with_name(n) for n in names):
        if cand.is_file():
            try:
                data = json.loads(cand.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ConfigError(f"{cand}: cannot read the quantization config: {e}") from e
            q = data.get("quantization") if isinstance(data, dict) else None
            algo = str((q or {}).get("quant_algo") or "").upper()
            excluded = (q or {}).get("exclude_modules") or []
            if not isinstance(excluded, list) or not all(isinstance(x, str) for x in excluded):
                raise ConfigError(f"{cand}: quantization.exclude_modules: must be a list of module names")
            if algo in ("FP8", "NVFP4"):
                return algo.lower(), excluded
            raise ConfigError(f"{cand}: quantization.quant_algo={algo or None!r}: not modelled; valid: FP8, NVFP4")
    return None


def _compressed_tensors(qc: HFQuantizationConfig, source: str) -> str:
    """servesim name of a compressed-tensors checkpoint's scheme (the first of
    its ``config_groups``): weights int4 (W4A16, group 128) -> int4_wo; int8
    weights and activations -> int8; fp8 -> fp8; fp4 weights with group 16
    (NVFP4) -> nvfp4."""
    groups = qc.config_groups or {}
    for group in groups.values():
        w = (group or {}).get("weights") or {}
        a = (group or {}).get("input_activations") or {}
        bits, kind = w.get("num_bits"), w.get("type")
        if bits == 4 and kind == "int":
            return "int4_wo"
        if bits == 4 and kind == "float":
            return "nvfp4"
        if bits == 8 and kind == "float":
            return "fp8_block" if w.get("block_structure") else "fp8"
        if bits == 8 and kind == "int" and a.get("num_bits") == 8:
            return "int8"
        raise ConfigError(f"{source}: quantization_config.config_groups weights num_bits={bits!r} "
                          f"type={kind!r}: not modelled; valid: int4, int8 (W8A8), fp8, fp4 (NVFP4)")
    raise ConfigError(f"{source}: quantization_config.quant_method='compressed-tensors' without "
                      f"config_groups: the scheme is not given")


def _parse_quantization(qc: HFQuantizationConfig | None, source: str) -> tuple[str | None, list[str]]:
    """servesim quantization name of a checkpoint's ``quantization_config`` and
    the module patterns it leaves unquantized."""
    if qc is None or not qc.model_fields_set:
        return None, []  # absent or {}: not quantized
    method = (qc.quant_method or "").lower()
    algo = (qc.quant_algo or "").upper()
    excluded = list(qc.modules_to_not_convert or []) + list(qc.ignore or []) + list(qc.exclude_modules or [])
    if method == "fp8":
        return ("fp8_block" if qc.weight_block_size else "fp8"), excluded
    if method in ("gptq", "awq") and (qc.bits if qc.bits is not None else 4) == 4:
        return "int4_wo", excluded
    if method == "modelopt" and algo in ("FP8", "NVFP4"):
        return algo.lower(), excluded
    if method == "mxfp4":
        return "mxfp4", excluded
    if method == "compressed-tensors":
        return _compressed_tensors(qc, source), excluded
    raise ConfigError(f"{source}: quantization_config.quant_method={method!r}: not modelled; "
                      f"valid: fp8, gptq/awq (4-bit), modelopt (FP8, NVFP4), mxfp4, compressed-tensors")
