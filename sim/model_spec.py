"""Model architecture (:class:`ModelSpec`) from a Hugging Face ``config.json``
or a built-in preset, and the quantities derived from it: parameter counts,
weight bytes, KV-cache bytes per token, FLOPs of a forward pass.

Units: counts of parameters, bytes, FLOPs (one multiply-add = 2 FLOPs).
Presets live in ``sim/data/model_presets.yaml`` (config.json fields copied from
the published configs). Architectures the cost model does not handle (MLA,
sliding-window or hybrid attention, shared MoE experts, mixed dense/MoE layers)
are refused with a :class:`~sim.errors.ConfigError`.

The fields read from ``config.json`` are validated by :class:`HFConfig` (pydantic
v2, strict: ``"128"``, ``128.5`` or ``true`` is not an integer, ``"no"`` not a
boolean; widths and counts positive, expert counts non-negative); a bad value is a
ConfigError naming the file, field and value. Other keys are ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.errors import ConfigError

_PRESETS_FILE = Path(__file__).parent / "data" / "model_presets.yaml"

#: Weight precisions (the ``quantization`` config key) and bytes per quantized
#: parameter, including the scales stored with them:
#: fp8_block: one fp32 scale per 128x128 block (DeepSeek/Qwen FP8 checkpoints);
#: int4_wo: one fp16 scale per group of 128 (GPTQ/AWQ default group size);
#: nvfp4: one fp8 E4M3 scale per 16 elements (NVIDIA NVFP4 format).
#: fp8 per-tensor and int8 per-channel scales are < 0.1 % and ignored.
WEIGHT_BYTES_PER_PARAM: dict[str, float] = {
    "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_block": 1.0 + 4.0 / (128 * 128),
    "int8": 1.0, "int4_wo": 0.5 + 2.0 / 128, "nvfp4": 0.5 + 1.0 / 16,
}
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
    attention_bias: bool = False
    dtype: str = "bfloat16"
    quantization: str | None = None
    architecture: str = ""

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
        if (not isinstance(tp, int) or tp < 1 or self.num_attention_heads % tp
                or (kv % tp and tp % kv)):
            raise ConfigError(
                f"tensor_parallel_size: {tp!r} does not fit {self.name} "
                f"({self.num_attention_heads} heads, {kv} KV heads); it must be >= 1, divide the "
                f"heads, and divide or be a multiple of the KV heads")

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
        per_layer = 2 * h + (2 * self.head_dim if self.qk_norm else 0)
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
        """Total parameters (Llama-3.1-8B: 8.03e9)."""
        return self.quantizable_params() + self.unquantized_params()

    def num_active_params(self) -> int:
        """Parameters used per token: only ``num_experts_per_tok`` experts of an
        MoE layer (Mixtral-8x7B: 12.9e9 of 46.7e9). Equals num_params if dense."""
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
        return (2 * self.num_hidden_layers * self.kv_heads_per_rank(tensor_parallel_size)
                * self.head_dim * kv_cache_dtype_bytes(kv_cache_dtype))

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
        per_tok = self.quantizable_params(active_only=True) + L * h * self.num_experts
        keys = n * c + n * (n + 1) / 2
        attn = 4.0 * L * self.num_attention_heads * self.head_dim * keys
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
    return yaml.safe_load(_PRESETS_FILE.read_text())


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
        return replace(_preset_spec(key), name=text if text.lower() != key else key,
                       quantization=quant)
    path = Path(text)
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ConfigError(f"model: {text} is a folder without a config.json")
    if path.is_file():
        spec = ModelSpec.from_hf_config(path)
        quant = _modelopt_quantization(path)
        return replace(spec, quantization=quant) if quant and spec.quantization is None else spec
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
    # architectures refused (not modelled)
    kv_lora_rank: Any = None
    q_lora_rank: Any = None
    sliding_window: _Dim | list[_Dim | None] | None = None  # a list: per-layer windows
    use_sliding_window: bool | None = None
    layer_types: list[str] | None = None
    attention_chunk_size: _Count | None = None
    n_shared_experts: _Count | None = None
    shared_expert_intermediate_size: _Count | None = None
    num_shared_experts: _Count | None = None
    mlp_only_layers: list[Annotated[int, Field(ge=0)]] | None = None
    decoder_sparse_step: Annotated[int, Field(ge=1)] | None = None
    first_k_dense_replace: _Count | None = None
    moe_layer_freq: Annotated[int, Field(ge=1)] | None = None
    quantization_config: HFQuantizationConfig | None = None


_TYPE_TAGS = {"int", "str", "bool", "float", "none", "list", "dict"}


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


def _parse_hf_config(cfg: dict[str, Any], source: str) -> dict[str, Any]:
    """ModelSpec fields from config.json keys; refuses what is not modelled."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"{source}: a Hugging Face config.json must be a JSON object, got {type(cfg).__name__}")
    try:
        hf = HFConfig.model_validate(cfg)
    except ValidationError as exc:
        raise ConfigError(_format_hf_errors(exc, source)) from None
    if hf.text_config is not None and hf.hidden_size is None:
        raise _refuse(source, "text_config", "...", "multimodal wrapper config; pass the text "
                      "model's config")
    for key in ("kv_lora_rank", "q_lora_rank"):
        if getattr(hf, key) is not None:
            raise _refuse(source, key, getattr(hf, key), "multi-head latent attention (MLA)")
    window = hf.sliding_window
    if isinstance(window, list):
        if any(w is not None for w in window):
            raise _refuse(source, "sliding_window", window, "sliding-window attention")
    elif (window is not None and hf.use_sliding_window is not False
            and window < (hf.max_position_embeddings or window + 1)):
        raise _refuse(source, "sliding_window", window, "sliding-window attention")
    layer_types = hf.layer_types or []
    if any(t != "full_attention" for t in layer_types):
        raise _refuse(source, "layer_types", sorted(set(layer_types)), "hybrid attention layers")
    if layer_types and len(layer_types) != hf.num_hidden_layers:
        raise ConfigError(f"{source}: layer_types: {len(layer_types)} entries for num_hidden_layers="
                          f"{hf.num_hidden_layers} (one per layer)")
    if hf.attention_chunk_size:
        raise _refuse(source, "attention_chunk_size", hf.attention_chunk_size, "chunked attention")
    for key in ("n_shared_experts", "shared_expert_intermediate_size", "num_shared_experts"):
        if getattr(hf, key):
            raise _refuse(source, key, getattr(hf, key), "shared MoE experts")
    for key, dense_too in (("mlp_only_layers", bool(hf.mlp_only_layers)),
                           ("decoder_sparse_step", (hf.decoder_sparse_step or 1) != 1),
                           ("first_k_dense_replace", bool(hf.first_k_dense_replace)),
                           ("moe_layer_freq", (hf.moe_layer_freq or 1) != 1)):
        if dense_too:
            raise _refuse(source, key, getattr(hf, key), "mixed dense and MoE layers")
    archs = hf.architectures or []
    if archs and not any(a.endswith("ForCausalLM") for a in archs):
        raise _refuse(source, "architectures", archs, "not a decoder-only causal LM")
    missing = [k for k in _REQUIRED if getattr(hf, k) is None]
    if missing:
        raise ConfigError(f"{source}: missing required config.json key(s): {', '.join(missing)}")
    heads, hidden = hf.num_attention_heads, hf.hidden_size
    kv_heads = hf.num_key_value_heads or heads
    if hf.head_dim is None and hidden % heads:
        raise ConfigError(f"{source}: hidden_size={hidden}: not a multiple of num_attention_heads={heads}, "
                          f"and no head_dim is given (the head width would be fractional)")
    head_dim = hf.head_dim or hidden // heads
    if heads % kv_heads:
        raise ConfigError(f"{source}: num_key_value_heads={kv_heads}: must divide "
                          f"num_attention_heads={heads}")
    experts = [(k, getattr(hf, k)) for k in ("num_local_experts", "num_experts") if getattr(hf, k)]
    if len(experts) == 2 and experts[0][1] != experts[1][1]:
        raise ConfigError(f"{source}: num_local_experts={experts[0][1]} and num_experts={experts[1][1]} "
                          f"disagree; give one")
    experts_key, num_experts = experts[0] if experts else ("num_experts", 0)
    top_k = hf.num_experts_per_tok or 0
    if num_experts and not 1 <= top_k <= num_experts:
        raise ConfigError(f"{source}: num_experts_per_tok={hf.num_experts_per_tok!r}: must be in "
                          f"1..{num_experts} ({experts_key}={num_experts})")
    if num_experts and hf.moe_intermediate_size == 0:
        raise ConfigError(f"{source}: moe_intermediate_size=0: an expert's FFN width must be >= 1 "
                          f"({experts_key}={num_experts}); omit it to use intermediate_size")
    model_type = hf.model_type or ""
    dtype = hf.torch_dtype or hf.dtype or "bfloat16"
    if dtype == "float32":
        dtype = "float16"  # vLLM dtype=auto serves a float32 checkpoint in 16 bits
    return dict(
        num_hidden_layers=hf.num_hidden_layers, hidden_size=hidden,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        intermediate_size=hf.intermediate_size, vocab_size=hf.vocab_size,
        max_position_embeddings=hf.max_position_embeddings,
        tie_word_embeddings=bool(hf.tie_word_embeddings),
        num_experts=num_experts, num_experts_per_tok=top_k if num_experts else 0,
        moe_intermediate_size=(hf.moe_intermediate_size or hf.intermediate_size) if num_experts else 0,
        qk_norm=model_type in ("qwen3", "qwen3_moe"),
        attention_bias=(hf.attention_bias if hf.attention_bias is not None
                        else model_type in ("qwen2", "qwen2_moe")),
        dtype=dtype, quantization=_parse_quantization(hf.quantization_config, source),
        architecture=archs[0] if archs else model_type,
    )


def _modelopt_quantization(config_path: Path) -> str | None:
    """A ModelOpt checkpoint's quantization (NVIDIA's FP8 / NVFP4 models): in
    ``hf_quant_config.json`` beside ``config.json`` (``NAME_hf_quant_config.json``
    beside ``NAME_config.json``, the ``../shared/models`` naming), as vLLM reads it."""
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
            if algo in ("FP8", "NVFP4"):
                return algo.lower()
            raise ConfigError(f"{cand}: quantization.quant_algo={algo or None!r}: not modelled; valid: FP8, NVFP4")
    return None


def _parse_quantization(qc: HFQuantizationConfig | None, source: str) -> str | None:
    """servesim quantization name of a checkpoint's ``quantization_config``."""
    if qc is None or not qc.model_fields_set:
        return None  # absent or {}: not quantized
    method = (qc.quant_method or "").lower()
    algo = (qc.quant_algo or "").upper()
    if method == "fp8":
        return "fp8_block" if qc.weight_block_size else "fp8"
    if method in ("gptq", "awq") and (qc.bits if qc.bits is not None else 4) == 4:
        return "int4_wo"
    if method == "modelopt" and algo in ("FP8", "NVFP4"):
        return algo.lower()
    raise ConfigError(f"{source}: quantization_config.quant_method={method!r}: not modelled; "
                      f"valid: fp8, gptq/awq (4-bit), modelopt (FP8, NVFP4)")
