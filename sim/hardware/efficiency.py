"""Efficiency forms of a hardware profile's ``efficiency`` section.

A form says how far below the datasheet roofline real kernels run. The profile
declares it (``form: scalar`` or ``form: fitted_v1``); :data:`EFFICIENCY_FORMS`
maps the name to the pydantic model that validates the section, and
:func:`register_efficiency_form` lets others add forms. The cost model
(``sim/cost_model``) turns a form's numbers into operator times:
``scalar`` through :meth:`EfficiencyBase.operator_efficiency`, ``fitted_v1``
through ``sim/cost_model/fitted.py``.

``fitted_v1`` is what ``calibration.fit`` fits to measured kernels, one
parameter set per kernel family (GEMM per dtype, context attention, generation
attention, all-reduce); the formulas and their physics are documented in
``sim/cost_model/fitted.py``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sim.errors import ConfigError
from sim.schema import reject_bool_numbers

#: Operator classes the cost model asks efficiencies for.
OPERATOR_CLASSES = ("gemm", "attention", "elementwise", "all_reduce")
#: GEMM kernel families of ``fitted_v1`` (``bf16`` is required; the others
#: fall back to it, see ``sim.cost_model.fitted.gemm_family``).
GEMM_FAMILIES = ("bf16", "fp8", "fp8_block")

#: Smallest efficiency (fraction of a datasheet peak) a profile may give: below it a
#: kernel would run > 1000x slower than the roofline (``calibration.fit`` fits >= 0.01).
MIN_EFFICIENCY = 1e-3
#: Largest fixed cost (launch, per-step overhead, per-element serial latency), s.
MAX_FIXED_COST_S = 1.0
#: Largest half-efficiency point (FLOPs or bytes) of a fitted family: (half/x)^exponent
#: stays finite (exponent <= 10); the fits span 1 .. 1e15.
MAX_HALF_POINT = 1e20
_Eff = Field(ge=MIN_EFFICIENCY, le=1.5)  # fraction of a datasheet peak; > 1 only where hardware beats it (NVLS)
_Cost = Field(ge=0, le=MAX_FIXED_COST_S)
_Half = Field(gt=0, le=MAX_HALF_POINT)
_Tile = Field(gt=0, le=2 ** 16)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        """``step_overhead_s: true`` is a mistake, not 1.0."""
        return reject_bool_numbers(cls, data)


class EfficiencyBase(_Strict):
    """Base of the efficiency forms; subclasses set ``form`` to a Literal and
    also provide ``step_overhead_s`` (s per step) and ``all_reduce_efficiency``
    (fraction of link bandwidth an all-reduce achieves)."""
    form: str

    def operator_efficiency(self, op_class: str) -> tuple[float, float, float]:
        """(compute efficiency, memory efficiency, launch overhead s per kernel)."""
        raise NotImplementedError


def _check_op_class(op_class: str) -> None:
    if op_class not in OPERATOR_CLASSES:
        raise ConfigError(f"efficiency: unknown operator class {op_class!r}; "
                          f"valid: {', '.join(OPERATOR_CLASSES)}")


class ScalarEfficiency(EfficiencyBase):
    """``form: scalar`` -- the same efficiencies for every operator.

    time = max(FLOPs / (peak x compute_efficiency), bytes / (bw x memory_efficiency))
           + launch_overhead_s per kernel; + step_overhead_s once per step
    (scheduler, input preparation, sampling); all-reduce bandwidth is scaled
    by all_reduce_efficiency.
    """
    form: Literal["scalar"]
    compute_efficiency: float = Field(ge=MIN_EFFICIENCY, le=1)
    memory_efficiency: float = Field(ge=MIN_EFFICIENCY, le=1)
    launch_overhead_s: float = _Cost
    step_overhead_s: float = _Cost
    all_reduce_efficiency: float = Field(ge=MIN_EFFICIENCY, le=1)

    def operator_efficiency(self, op_class: str) -> tuple[float, float, float]:
        _check_op_class(op_class)
        return self.compute_efficiency, self.memory_efficiency, self.launch_overhead_s


# -- fitted_v1 ------------------------------------------------------------------------
class KernelParams(_Strict):
    """Roofline of one kernel family with size-dependent efficiencies.

    compute efficiency(F) = compute_efficiency_max / (1 + (compute_half_flops / F)^compute_exponent)
    memory efficiency(B) = memory_efficiency_max / (1 + (memory_half_bytes / B)^memory_exponent)
    (F FLOPs, B bytes of one kernel call); the compute, memory and family
    terms are combined as sqrt(sum of squares) (a smooth max), + launch_s.
    """
    compute_efficiency_max: float = _Eff
    compute_half_flops: float = _Half      #: FLOPs at which compute efficiency is half its max
    compute_exponent: float = Field(gt=0, le=10)
    memory_efficiency_max: float = _Eff
    memory_half_bytes: float = _Half       #: bytes at which memory efficiency is half its max
    memory_exponent: float = Field(gt=0, le=10)
    launch_s: float = _Cost                #: fixed cost of one call (launch, setup), s


class GemmParams(KernelParams):
    """One GEMM family (dtype and kernel). Adds the serial latency of the
    k-loop (``k_serial_s`` s per element of k, growth halved at ``k_split``
    where split-K spreads the loop over more CTAs), m and n rounded up to the
    tile, and for W8A8 dtypes the activation-quantization pass (per row
    ``act_quant_row_s`` + reading 2 B and writing 1 B per element at
    ``act_quant_memory_efficiency`` of HBM bandwidth)."""
    k_serial_s: float = _Cost
    k_split: float = Field(gt=0, le=MAX_HALF_POINT)
    tile_m: int = Field(default=64, gt=0, le=2 ** 16)
    tile_n: int = Field(default=64, gt=0, le=2 ** 16)
    act_quant_row_s: float = Field(default=0.0, ge=0, le=MAX_FIXED_COST_S)
    act_quant_memory_efficiency: float = Field(default=1.0, ge=MIN_EFFICIENCY, le=1.5)
    #: per-call host floor (Python dispatch, scale-tensor preparation, JIT lookup)
    #: that overlaps the device work: an eager one-call-at-a-time benchmark
    #: measures max(host_s, device time) (``fitted.gemm_measured_s``); a served
    #: step replayed from a CUDA graph (vLLM decode) does not pay it, so the cost
    #: model's step times use the device time alone. Default 0 (none measured).
    host_s: float = Field(default=0.0, ge=0, le=MAX_FIXED_COST_S)


class ContextAttentionParams(KernelParams):
    """Prefill attention (FlashAttention varlen): adds the softmax cost per
    score element (exp on the SFU, not the tensor cores) as tensor-core
    FLOP-equivalents at the bf16 peak (so it scales with the chip), a fixed
    cost per (sequence, KV head), and wave quantization of ``tile_q``-row query
    tiles over the SMs."""
    softmax_flops_per_score: float = Field(ge=0, le=1e9)
    seq_head_s: float = _Cost
    tile_q: int = Field(default=128, gt=0, le=2 ** 16)


class GenerationAttentionParams(KernelParams):
    """Decode attention (one query token per sequence): the KV cache of each
    (sequence, KV head) is read in whole ``kv_tile``-token tiles, plus a fixed
    cost per (sequence, KV head). Where the kernel does not split the KV
    sequence over CTAs (query heads per KV head < ``split_kv_min_group``; e.g.
    FlashAttention-2 decode without GQA), each (sequence, KV head) streams its
    cache from one CTA at ``cta_token_s`` s per token, in waves over the SMs."""
    seq_head_s: float = _Cost
    kv_tile: int = Field(default=64, gt=0, le=2 ** 16)
    cta_token_s: float = Field(default=0.0, ge=0, le=MAX_FIXED_COST_S)
    split_kv_min_group: int = Field(default=1, ge=1, le=2 ** 16)


class MoeParams(KernelParams):
    """One fused-MoE kernel (routing + grouped expert GEMMs w13 and w2 + SiLU-and-mul
    + weighted combine) for one expert weight format. Per rank: m = T top_k / ep routed
    rows over ``touched`` = E/ep (1 - (1 - top_k/E)^T) local experts (uniform
    routing), each expert's rows padded to ``tile_m_small`` while T <= E, else ``tile_m``
    (vLLM ``fused_moe.get_default_config``); FLOPs 6 m_tiled h I, bytes the
    touched experts' weights + the rows' activations; the roofline terms as the
    other families, + ``expert_s`` per touched expert (per-expert tile setup, scale
    loads, the grouped kernel's serial expert loop) + ``row_s`` per routed row of the
    whole batch, T top_k, local or not (top-k, align/sort, permute, combine, and the
    grouped GEMM's grid, all sized by every routed row: blocks of other ranks' experts
    launch and exit, vLLM ``fused_moe`` with an ``expert_map``), + ``launch_s``."""
    expert_s: float = _Cost
    row_s: float = _Cost
    #: True: the intermediate caches (w13 output, activation, w2 output, moe_sum) span
    #: every routed row of the batch, T top_k, local or not (vLLM's Triton fused_moe
    #: with an expert_map writes zeros for other ranks' experts' rows); False: only
    #: the rank's T top_k / ep rows (the gpt-oss OAI Triton kernel, whose time falls
    #: as 1/ep at large T); chosen from the table by ``calibration.fit.fit_moe``
    whole_batch_rows: bool = True
    #: fixed cost of the expert-parallel path, paid where ep > 1 (the routing remapped to
    #: local experts, the local rows gathered and scattered: the gpt-oss OAI Triton
    #: kernel's floor is ~68 us at EP 2-128 against ~38-48 us at TP 2-32 on H100)
    ep_s: float = Field(default=0.0, ge=0, le=MAX_FIXED_COST_S)
    tile_m: int = Field(default=64, gt=0, le=2 ** 16)        #: rows per expert block, T > E
    tile_m_small: int = Field(default=16, gt=0, le=2 ** 16)  #: rows per expert block, T <= E


class MlaParams(_Strict):
    """Multi-head latent attention (``sim/cost_model/layer_kinds.MlaAttention``), fitted
    to whole MLA modules (projections + attention; the projections keep the ``gemm``
    families): the absorbed decode and expanded prefill attention as rooflines at
    these efficiencies, 2 kernels of ``launch_s`` each, + per layer and step
    ``layer_s`` (the module's other small kernels: the q/kv latent RMSNorms, RoPE,
    the latent cache write, the absorbed W_UK / W_UV batched matmuls' launches) +
    ``token_s`` per new token (their per-token work)."""
    decode_compute_efficiency: float = _Eff
    decode_memory_efficiency: float = _Eff
    prefill_compute_efficiency: float = _Eff
    prefill_memory_efficiency: float = _Eff
    launch_s: float = _Cost
    layer_s: float = _Cost
    token_s: float = _Cost


class GdnParams(_Strict):
    """Gated DeltaNet layers (``sim/cost_model/layer_kinds.GatedDeltaNet``: causal
    conv1d + gated delta rule, 2 kernels per layer), fitted to the engines'
    GDN kernel tables: decode and prefill rooflines at these efficiencies, +
    ``seq_s`` per sequence and layer (per-sequence state setup, chunk bookkeeping).
    The two paths run different kernels, so each has its fixed cost per kernel:
    prefill ``launch_s`` (vLLM 0.24 on Hopper: ``causal_conv1d_fn`` + FlashInfer's
    chunked ``chunk_gated_delta_rule``, 2.3 + 11.6 us floor on H100), decode
    ``decode_launch_s`` (``causal_conv1d_update`` + the Triton
    ``fused_recurrent_gated_delta_rule_packed_decode``, 1.9 + 4.4 us floor;
    ../shared/kernels/h100_sxm/vllm-0.24.0_gdn at batch 1); None: ``launch_s``.
    The chunked prefill kernel gives each (sequence, value head) one CTA that walks
    the sequence's chunks in order (the inter-chunk state recurrence, FLA / FlashInfer
    ``chunk_gated_delta_rule``), so with few (sequence, head) pairs it is bound by that
    serial walk: ``cta_token_s`` per token of the longest sequence, per wave of
    (sequence, value head) pairs over the SMs (the third term of the max)."""
    decode_compute_efficiency: float = _Eff
    decode_memory_efficiency: float = _Eff
    prefill_compute_efficiency: float = _Eff
    prefill_memory_efficiency: float = _Eff
    launch_s: float = _Cost
    seq_s: float = _Cost
    decode_launch_s: float | None = Field(default=None, ge=0, le=MAX_FIXED_COST_S)
    cta_token_s: float = Field(default=0.0, ge=0, le=MAX_FIXED_COST_S)

    @property
    def decode_launch(self) -> float:
        """Fixed cost per decode kernel (``decode_launch_s``, else ``launch_s``)."""
        return self.launch_s if self.decode_launch_s is None else self.decode_launch_s


#: expert weight formats of ``fitted_v1``'s optional ``moe`` section (servesim names)
MOE_FAMILIES = ("bf16", "fp8", "fp8_block", "int4_wo", "mxfp4", "nvfp4")


class ElementwiseParams(_Strict):
    """Memory-bound kernels (norms, activations, RoPE)."""
    memory_efficiency: float = _Eff
    launch_s: float = _Cost


class AllReduceParams(_Strict):
    """NCCL all-reduce over p GPUs: latency_s + latency_per_gpu_s x (p - 1) +
    2(p-1)/p x bytes / (link bandwidth x bus efficiency(p) / (1 + (half_bytes /
    bytes)^exponent)). ``bus_efficiency`` lists p -> fraction of the link's
    per-direction bandwidth (NVLS in-switch reduction can exceed 1); other p
    use the nearest listed p."""
    latency_s: float = _Cost
    latency_per_gpu_s: float = _Cost
    bus_efficiency: dict[int, float]
    half_bytes: float = _Half
    exponent: float = Field(gt=0, le=10)

    @field_validator("bus_efficiency")
    @classmethod
    def _check_bus(cls, v: dict[int, float]) -> dict[int, float]:
        if not v:
            raise ValueError("bus_efficiency: needs at least one GPU count")
        bad = {p: e for p, e in v.items() if p < 2 or not MIN_EFFICIENCY <= e <= 1.5}
        if bad:
            raise ValueError(f"bus_efficiency: GPU counts must be >= 2 and efficiencies in "
                             f"[{MIN_EFFICIENCY:g}, 1.5], got {bad}")
        return dict(sorted(v.items()))


#: largest shape a calibrated grid may state (tokens, context or batch)
MAX_GRID_SHAPE = 2 ** 31


class CalibratedGrid(_Strict):
    """The largest shapes of the kernel tables a ``fitted_v1`` profile was
    fitted to (``calibration.datasets.table_grid``; a transferred profile keeps
    its source GPU's). A run whose steps reach beyond them uses the fitted
    formulas outside their data: ``sim.results.warnings.grid_warnings`` says so
    in the run's ``warnings``. None: that family was not fitted to measured rows."""
    #: GEMM ``m`` (tokens of one step through a linear layer)
    gemm_max_tokens: int | None = Field(default=None, ge=1, le=MAX_GRID_SHAPE)
    #: context attention: query + cached tokens of one prompt (``isl + step`` of the table)
    context_attention_max_tokens: int | None = Field(default=None, ge=1, le=MAX_GRID_SHAPE)
    #: generation attention: tokens in one sequence's KV cache (``isl + step``)
    generation_attention_max_context: int | None = Field(default=None, ge=1, le=MAX_GRID_SHAPE)
    #: generation attention: sequences decoding in one step
    generation_attention_max_batch: int | None = Field(default=None, ge=1, le=MAX_GRID_SHAPE)
    #: fused MoE: tokens routed into one MoE layer per step (before top-k)
    moe_max_tokens: int | None = Field(default=None, ge=1, le=MAX_GRID_SHAPE)


class FittedEfficiency(EfficiencyBase):
    """``form: fitted_v1`` -- per-family parameters fitted to measured kernels
    (``calibration.fit``); formulas in ``sim/cost_model/fitted.py``."""
    form: Literal["fitted_v1"]
    step_overhead_s: float = _Cost
    gemm: dict[str, GemmParams]
    context_attention: ContextAttentionParams
    generation_attention: GenerationAttentionParams
    elementwise: ElementwiseParams
    all_reduce: AllReduceParams
    #: optional: the engines' own all-reduce kernels replayed in CUDA graphs (vLLM
    #: ``CustomAllreduce``, SGLang's, TensorRT-LLM's one-/two-shot; ``calibration.custom_all_reduce``),
    #: in the NCCL family's form; a step's all-reduce inside one NVLink domain takes the
    #: faster of the two (``sim/cost_model/fitted_step.FittedAllReduce``); absent: NCCL only
    custom_all_reduce: AllReduceParams | None = None
    #: optional: fused-MoE kernels per expert weight format (``MOE_FAMILIES``); a
    #: format not listed (or a profile without the section) times the experts as
    #: grouped GEMMs of the ``gemm`` family (``sim/cost_model/fitted_step.FittedMoe``)
    moe: dict[str, MoeParams] = Field(default_factory=dict)
    #: optional: MLA attention fitted to whole-module tables; absent: MLA runs at the
    #: context / generation attention families' large-size limits
    mla: MlaParams | None = None
    #: optional: engine -> MLA module parameters fitted to that engine's own module
    #: tables (its MLA implementation: TensorRT-LLM's fused module is ~1.5x faster at
    #: decode than vLLM's, whose tables ``mla`` is fitted to); an engine not listed uses ``mla``
    mla_engines: dict[str, MlaParams] = Field(default_factory=dict)

    def mla_for(self, engine: str | None) -> MlaParams | None:
        """The MLA parameters of ``engine`` (its own fit if listed, else ``mla``)."""
        return self.mla_engines.get(engine or "", self.mla)
    #: optional: engine -> fused-MoE kernels per expert weight format fitted to that
    #: engine's own MoE table (its own kernel: TensorRT-LLM's CUTLASS fused MoE runs
    #: 1.1-1.5x faster than vLLM's Triton fused_moe, whose table ``moe`` is fitted to,
    #: on the same H100 shapes); a format the engine's entry lacks uses ``moe``'s
    moe_engines: dict[str, dict[str, MoeParams]] = Field(default_factory=dict)

    def moe_for(self, engine: str | None) -> dict[str, MoeParams]:
        """The fused-MoE families ``engine`` runs: its own fits (``moe_engines``)
        over the default ``moe`` ones."""
        own = self.moe_engines.get(engine or "")
        return {**self.moe, **own} if own else self.moe
    #: optional: Gated DeltaNet fitted to the GDN kernel tables; absent: the attention
    #: families' limits
    gdn: GdnParams | None = None
    #: optional: the largest shapes of the tables fitted (warnings beyond them)
    calibrated_grid: CalibratedGrid | None = None

    @field_validator("moe")
    @classmethod
    def _check_moe(cls, v: dict[str, MoeParams]) -> dict[str, MoeParams]:
        unknown = sorted(set(v) - set(MOE_FAMILIES))
        if unknown:
            raise ValueError(f"moe: unknown format(s) {unknown}; valid: {', '.join(MOE_FAMILIES)}")
        return v

    @field_validator("moe_engines")
    @classmethod
    def _check_moe_engines(cls, v: dict[str, dict[str, MoeParams]]) -> dict[str, dict[str, MoeParams]]:
        for engine, fams in v.items():
            unknown = sorted(set(fams) - set(MOE_FAMILIES))
            if unknown:
                raise ValueError(f"moe_engines.{engine}: unknown format(s) {unknown}; "
                                 f"valid: {', '.join(MOE_FAMILIES)}")
        return v

    @field_validator("gemm")
    @classmethod
    def _check_gemm(cls, v: dict[str, GemmParams]) -> dict[str, GemmParams]:
        unknown = sorted(set(v) - set(GEMM_FAMILIES))
        if unknown:
            raise ValueError(f"gemm: unknown famil(ies) {unknown}; valid: {', '.join(GEMM_FAMILIES)}")
        if "bf16" not in v:
            raise ValueError("gemm: the bf16 family is required")
        return v

    @property
    def all_reduce_efficiency(self) -> float:
        """Bus efficiency at the smallest listed GPU count (legacy scalar view)."""
        return next(iter(self.all_reduce.bus_efficiency.values()))

    def operator_efficiency(self, op_class: str) -> tuple[float, float, float]:
        """Large-kernel limits (max compute and memory efficiency, launch s), a
        summary for callers that want one number; the cost model uses the
        size-dependent formulas instead."""
        _check_op_class(op_class)
        if op_class == "gemm":
            g = self.gemm["bf16"]
            return g.compute_efficiency_max, g.memory_efficiency_max, g.launch_s
        if op_class == "attention":
            a = self.context_attention
            return a.compute_efficiency_max, a.memory_efficiency_max, a.launch_s
        if op_class == "elementwise":
            return 1.0, self.elementwise.memory_efficiency, self.elementwise.launch_s
        return 1.0, self.all_reduce_efficiency, 0.0


#: form name -> model class; calibration may register richer forms here.
EFFICIENCY_FORMS: dict[str, type[EfficiencyBase]] = {"scalar": ScalarEfficiency,
                                                     "fitted_v1": FittedEfficiency}


def register_efficiency_form(name: str, cls: type[EfficiencyBase]) -> None:
    """Make ``form: <name>`` loadable (``cls`` validates that section)."""
    EFFICIENCY_FORMS[name] = cls
