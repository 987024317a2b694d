"""The run configuration: one flat set of vLLM-named keys (``../shared/DESIGN.md``,
"The contract"), validated with pydantic v2.

Sources merge in this order, later wins: built-in defaults → YAML config file →
``--workload NAME`` → ``--set key=value`` overrides (dotted keys for nested
fields, e.g. ``workload.request_rate=4``). Every error names the file (or
``--set``), the key and the value; an unknown key is an error with the closest
valid names, never ignored.

Hardware-dependent defaults (``max_num_batched_tokens``, ``max_num_seqs``) are
left ``None`` here and resolved by :func:`resolve_scheduler_limits` once the
hardware profile is known, as vLLM does (``engine/arg_utils.py::get_batch_defaults``).
"""

from __future__ import annotations

import difflib
import math
import re
import typing
from pathlib import Path
from typing import Any, Callable, Literal

import yaml
from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, ValidationError, field_validator,
                      model_validator)

from sim.disaggregation import POOL_KEYS, DisaggregationConfig
from sim.errors import ConfigError, require_file
from sim.presets import PRESETS, apply_preset, get_preset
from sim.schema import error_text, reject_bool_numbers
from sim.vocabulary import canonicalize, check_requirements, lookup
from sim.workload.config import WorkloadConfig
from sim.yaml_io import safe_load_unique

SCHEDULERS = ("static", "continuous", "chunked", "mixed", "prefill_first", "prefill_first_whole",
              "prefill_first_mixed")
#: Modes that split long prompts at the token budget (the budget is then not
#: raised to ``max_model_len``).
CHUNKING_MODES = ("chunked", "prefill_first", "prefill_first_mixed")
#: schedulers with their own admission rule: TensorRT-LLM's capacity_scheduler_policy has no effect on them
OWN_ADMISSION = ("static", "prefill_first", "prefill_first_whole", "prefill_first_mixed")
#: the largest integer a config key takes (tokens, blocks, sequences): far past any real
#: engine, well inside int64 and exact in float64
MAX_CONFIG_INT = 1 << 40
#: ``workload_distribution: power_law_<alpha>`` (sim/cost_model/moe.py): expert weights drawn
#: from the density x^-alpha truncated to aiconfigurator's support (its MoE tables use 1.01 and
#: 1.2). Any finite alpha > 0 is a decaying law there and is computed stably; alpha <= 0 is
#: not a skew toward few experts (alpha 0: uniform weights), so it is refused.
POWER_LAW_ALPHA_RULE = "alpha a finite number > 0, e.g. power_law_1.2; aiconfigurator's tables use 1.01 and 1.2"
WORKLOAD_DISTRIBUTION_RE = re.compile(r"^power_law_(\d+(?:\.\d+)?)$")
KV_MEMORY_RULES = ("utilization", "free_fraction", "static_fraction")
POLICIES = ("fcfs", "priority")
CAPACITY_POLICIES = ("guaranteed_no_evict", "max_utilization")
ROUTERS = ("round_robin", "least_outstanding_requests", "random", "prefix_aware")
QUANTIZATIONS = ("fp8", "fp8_block", "int8", "int4_wo", "nvfp4", "mxfp4")
MAX_TIME_KEY_S = 3600.0  # s: the per-step, per-token, per-request and client time keys


class SimConfig(BaseModel):
    """Every key of a run. Units: seconds, tokens, bytes; fractions in [0, 1]."""

    # allow_inf_nan: an infinite overhead or latency would run to empty metrics or a traceback
    model_config = ConfigDict(extra="forbid", validate_assignment=False, protected_namespaces=(), allow_inf_nan=False)

    #: where each key given was set ("FILE", "--set", "--model", "--variants FILE: variant NAME", ...):
    #: errors found when the deployment is built name it (:func:`locate_error`)
    _key_sources: dict[str, str] = PrivateAttr(default_factory=dict)

    model: str = "llama-3.1-8b"
    hardware: str = "h100_sxm"
    # A preset of defaults for the keys below (sim/presets/); explicit keys win.
    engine: Literal[tuple(PRESETS)] | None = None  # type: ignore[valid-type]
    # The engine's release (e.g. "0.12.0"): selects its documented behaviour changes
    # (sim/presets/versions.py); None = the preset's newest modelled release.
    engine_version: str | None = Field(default=None, max_length=64)

    # Scheduler (vLLM names; ``vllm/config/scheduler.py``)
    scheduler: str = "chunked"
    enable_chunked_prefill: StrictBool | None = None  # vLLM alias: true → chunked, false → continuous
    policy: Literal["fcfs", "priority"] = "fcfs"
    capacity_scheduler_policy: Literal["guaranteed_no_evict", "max_utilization"] | None = None
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    max_model_len: int | None = Field(default=None, ge=1)
    long_prefill_token_threshold: int = Field(default=0, ge=0)
    # SGLang max_prefill_tokens: new tokens of one prefill batch (prefill_first modes); None = budget
    max_prefill_tokens: int | None = Field(default=None, ge=1)

    # KV cache (``vllm/config/cache.py``)
    block_size: int = 16
    # Fraction of memory for the KV rule below; None = the engine's default
    # (vLLM 0.92; TensorRT-LLM 0.9; SGLang's mem_fraction_static heuristic).
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0)
    # utilization: KV = total x f - weights - activations (vLLM); free_fraction:
    # KV = f x (total - weights - activations) (TensorRT-LLM free_gpu_memory_fraction);
    # static_fraction: KV = f x (total - non-torch) - weights (SGLang mem_fraction_static: (1 - f) of
    # the memory free at its start is kept back; sim/kv_cache/sizing.py).
    kv_memory_rule: Literal["utilization", "free_fraction", "static_fraction"] = "utilization"
    # What vLLM's init-time memory snapshot holds, which sets the non-torch memory
    # subtracted (sim/kv_cache/sizing.py::non_torch_bytes); None = before_cuda_context.
    memory_profile: Literal["before_cuda_context", "after_cuda_context", "after_nccl_init"] | None = None
    num_gpu_blocks_override: int | None = Field(default=None, ge=2)
    enable_prefix_caching: StrictBool = False
    kv_cache_dtype: Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    kv_allocation: Literal["paged", "contiguous"] = "paged"
    contiguous_reserve: Literal["max_model_len", "max_tokens"] = "max_model_len"
    # vLLM --disable-hybrid-kv-cache-manager: one block table for every layer (sliding-window
    # layers at full length) instead of kv_cache_groups (sim/kv_cache/groups.py)
    disable_hybrid_kv_cache_manager: StrictBool = False
    watermark: float = Field(default=0.0, ge=0.0, lt=1.0)

    # Precision
    dtype: Literal["bfloat16", "float16", "auto"] = "bfloat16"
    quantization: Literal["fp8", "fp8_block", "int8", "int4_wo", "nvfp4", "mxfp4"] | None = None
    attention_impl: Literal["flash", "naive"] = "flash"
    # The engine's fused-MoE kernel when it is not the default one of the experts' weight
    # format (sim/cost_model/fitted_step.py MOE_BACKENDS): "marlin" = vLLM's fused_marlin_moe
    # (VLLM_MXFP4_USE_MARLIN=1 for MXFP4 experts; w4a16). None = the format's default kernel.
    moe_backend: Literal["marlin"] | None = None

    # Parallelism and routing
    tensor_parallel_size: int = Field(default=1, ge=1)
    num_replicas: int = Field(default=1, ge=1, le=1024)  # each holds a block pool: 10^4 would need ~15 GB
    router: Literal["round_robin", "least_outstanding_requests", "random", "prefix_aware"] = "round_robin"
    # Router processes behind one load balancer, each with its own round-robin counters; a request
    # meets one at random (nginx worker processes, each its own round-robin): Dynamo frontends behind
    # nginx as NVIDIA's srt-slurm launcher runs them (sim/engine/traffic.py Frontends). Modelled for
    # router round_robin (and random, where it changes nothing)
    num_frontends: int = Field(default=1, ge=1, le=1024)
    # Attention data parallelism and expert parallelism (sim/cost_model/parallel.py). vLLM names;
    # SGLang: --dp-size + --enable-dp-attention, --ep-size; TensorRT-LLM: enable_attention_dp
    # (DP = tp_size ranks), moe_expert_parallel_size / moe_tensor_parallel_size (moe_ep_size /
    # moe_tp_size here, as aiconfigurator's tables name them). On an MoE model each of
    # ``data_parallel_size`` attention ranks (a TP group of ``tensor_parallel_size`` GPUs) has its
    # own scheduler, batch and KV cache and the ranks step together (a DP group of dp x tp GPUs;
    # ``num_replicas`` independent groups). On a dense model DP ranks are independent replicas
    # (vLLM couples them only for MoE): num_replicas x data_parallel_size replicas.
    data_parallel_size: int = Field(default=1, ge=1, le=1024)
    enable_expert_parallel: StrictBool = False  # vLLM: EP size = DP x TP, experts whole on each GPU
    moe_ep_size: int | None = Field(default=None, ge=1, le=1024)  # explicit EP ranks (x moe_tp_size = dp x tp)
    moe_tp_size: int | None = Field(default=None, ge=1, le=1024)  # explicit expert tensor-parallel ranks
    # Redundant expert slots of the expert-parallel load balancer (vLLM EPLBConfig.num_redundant_experts
    # with --enable-eplb; SGLang --ep-num-redundant-experts; TensorRT-LLM load_balancer.num_slots = E + this):
    # E + R physical experts, (E + R) / ep whole on each EP rank (sim/cost_model/parallel.py)
    num_redundant_experts: int = Field(default=0, ge=0, le=4096)
    # A cap on the KV pool, in tokens per attention rank: the pool is min(what memory gives, this)
    # (SGLang --max-total-tokens: model_runner.py max_total_num_tokens = min(profiled,
    # max_total_tokens); TensorRT-LLM kv_cache_config.max_tokens, "if both max_tokens and
    # free_gpu_memory_fraction are specified, memory corresponding to the minimum will be used")
    max_total_tokens: int | None = Field(default=None, ge=1, le=10**10)
    # How routed tokens spread over the experts (aiconfigurator's ModelConfig.workload_distribution
    # and its MoE tables' ``distribution``; sim/cost_model/moe.py): "uniform" (each token picks
    # top_k experts at random), "balanced" (rows dealt evenly), "power_law_<alpha>" (skewed expert
    # loads, e.g. power_law_1.2). With expert parallelism the step waits for the most loaded rank.
    workload_distribution: str = "uniform"

    # The time keys below are at most an hour each: beyond that a run's simulated
    # time drifts toward float64's limits (1e308 s overheads ran to inf/nan times).
    # CPU/framework overheads outside the cost model (sim/cost_model/overheads.py): per
    # engine step (s), per scheduled sequence per step (s); overlapped with the
    # GPU (step = max(gpu, cpu)) or serial (gpu + cpu).
    cpu_step_overhead_s: float = Field(default=0.0, ge=0.0, le=MAX_TIME_KEY_S)
    cpu_seq_overhead_s: float = Field(default=0.0, ge=0.0, le=MAX_TIME_KEY_S)
    overlap_scheduling: StrictBool = False
    # SGLang --scheduler-recv-interval (default 1): the scheduler takes new requests from the
    # tokenizer only when a counter of its forward passes reaches this many (decode passes
    # count 1, a pass with prefill 1000, an idle poll 1): while only decodes run, arrivals wait
    # up to this many steps (sglang/srt/managers/scheduler_recv_skipper.py). Reference mode.
    scheduler_recv_interval: int = Field(default=1, ge=1, le=100000)
    # TensorRT-LLM attention_dp_config (llmapi/llm_args.py AttentionDpConfig: enable_balance False,
    # timeout_iters 50, batching_wait_iters 10; pyexecutor/py_executor.py _balance_adp_requests):
    # with enable_balance a DP group admits new context requests only in a step where every rank
    # has one and a free slot, holding them at most timeout_iters steps (or until a rank has no
    # generation request); with every rank ready and generating it first waits batching_wait_iters
    # steps (sim/engine/dp_group.py AttentionDpBalance). TensorRT-LLM with attention DP only.
    attention_dp_enable_balance: StrictBool = False
    attention_dp_timeout_iters: int = Field(default=50, ge=0, le=100000)
    attention_dp_batching_wait_iters: int = Field(default=10, ge=0, le=100000)
    # Extra host time (s) of a step with prefill tokens (no CUDA graph: every kernel launched).
    eager_step_overhead_s: float = Field(default=0.0, ge=0.0, le=MAX_TIME_KEY_S)
    # Per request (s): sent → seen by the engine's scheduler (HTTP, tokenization,
    # hand-off to the engine process); counted in TTFT.
    frontend_latency_s: float = Field(default=0.0, ge=0.0, le=MAX_TIME_KEY_S)
    # Per streamed output token (s): the frontend's single-threaded output path
    # (detokenize, serialize, send), one step's tokens after the other; clients see
    # tokens (and send their next request) when it is done.
    frontend_token_s: float = Field(default=0.0, ge=0.0, le=MAX_TIME_KEY_S)
    # Streamed output tokens per message after the first (vLLM / SGLang --stream-interval,
    # TensorRT-LLM stream_interval; default 1): a request's first token is sent at once, then
    # a message every this many tokens, and one at its finish. Where the engine's frontend
    # works per message (the preset's ``frontend_token_unit``), its FIFO time per token is
    # frontend_token_s / stream_interval (sim/engine/recording.py streamed_token_s).
    stream_interval: int = Field(default=1, ge=1, le=100000)
    # TensorRT-LLM num_postprocess_workers (LLM API / trtllm-serve, default 0): processes that
    # detokenize the responses and build the OpenAI chunks, each request's responses in one of
    # them (tensorrt_llm/executor/postproc_worker.py); the frontend's per-message work runs on
    # this many in parallel. TensorRT-LLM only.
    num_postprocess_workers: int = Field(default=0, ge=0, le=1024)
    # Closed loop: mean (s) of the exponential delay between a client receiving
    # its last token and sending its next request (client processing, network);
    # not part of TTFT. 0 = at once.
    client_think_time_s: float = Field(default=0.0, ge=0.0, le=MAX_TIME_KEY_S)
    # Closed loop: each client's first send is at a uniform random time in
    # [0, this) (s), then think times as above. 0 = all start together.
    client_start_spread_s: float = Field(default=0.0, ge=0.0, le=MAX_TIME_KEY_S)

    seed: int = 0
    exact_steps: StrictBool = False  # reference mode: one event per engine step, never merged
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    # Prefill and decode on separate workers (sim/disaggregation.py); None = aggregated
    disaggregation: DisaggregationConfig | None = None

    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        """``key: null`` for a key that cannot be unset (``block_size``, ``workload_distribution``)
        restores its default, as README's *Configuration* says (and as the workload keys do,
        :class:`~sim.workload.config.WorkloadConfig`): the key is dropped, so an engine preset
        fills it where it has a value."""
        if not isinstance(data, dict):
            return data
        out = {}
        for k, v in data.items():
            f = cls.model_fields.get(k)
            if (v is None and f is not None and type(None) not in typing.get_args(f.annotation)
                    and f.annotation is not Any and not f.is_required()):
                continue
            out[k] = v
        return out

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        """No bool for a number (``reject_bool_numbers``), no integer beyond any real setting."""
        data = cls._drop_nulls(data)
        reject_bool_numbers(cls, data, "a number or name")
        if isinstance(data, dict):
            ev = data.get("engine_version")
            if isinstance(ev, (int, float)) and not isinstance(ev, bool):
                raise ValueError(f"engine_version: {ev!r} is a number, not a release (YAML reads an unquoted "
                                 f"0.10 as the number 0.1); give the release as text, quoted in YAML: "
                                 f"engine_version: '0.10'")
            for k, v in data.items():
                f = cls.model_fields.get(k)
                if (isinstance(v, (int, float)) and not isinstance(v, bool) and f is not None and k != "seed"
                        and "int" in str(f.annotation) and abs(v) > MAX_CONFIG_INT):
                    raise ValueError(f"{k}: {v!r} is beyond any real setting (at most {MAX_CONFIG_INT:,})")
        return data

    @staticmethod
    def _check_capacity_policy(data: Any) -> None:
        """``capacity_scheduler_policy`` is TensorRT-LLM's admission rule (README, *Configuration*;
        sim/scheduler/chunked.py): honoured by the ``chunked``, ``continuous`` and ``mixed``
        schedulers with ``engine: trtllm`` or no engine. Given by the caller (before a preset fills
        it) with ``engine: vllm`` / ``sglang`` (engines without the key) or with the ``static`` /
        ``prefill_first`` schedulers (their own admission: it would be ignored) it is refused."""
        if not isinstance(data, dict) or data.get("capacity_scheduler_policy") is None:
            return
        pol, engine, sched = data["capacity_scheduler_policy"], data.get("engine"), data.get("scheduler")
        if engine in ("vllm", "sglang"):
            raise ValueError(f"capacity_scheduler_policy {pol!r} is TensorRT-LLM's admission rule; engine "
                             f"{engine!r} has no such key; use engine trtllm or drop capacity_scheduler_policy")
        if sched in OWN_ADMISSION:
            raise ValueError(f"capacity_scheduler_policy {pol!r} has no effect with scheduler {sched!r} (its own "
                             "admission rule); it applies to schedulers chunked, continuous and mixed; drop one")

    @model_validator(mode="before")
    @classmethod
    def _engine_preset(cls, data: Any) -> Any:
        """Fill the keys the caller did not set from ``engine``'s preset."""
        data = cls._drop_nulls(data)
        cls._check_capacity_policy(data)
        if isinstance(data, dict) and isinstance(data.get("engine"), str) and data["engine"] in PRESETS:
            ecp, sched = data.get("enable_chunked_prefill"), data.get("scheduler")
            if isinstance(ecp, bool) and isinstance(sched, str):  # both given: the preset must not hide it
                alias = "chunked" if ecp else "continuous"
                if sched != alias and (ecp or sched == "chunked"):
                    raise ValueError(f"scheduler {sched!r} conflicts with enable_chunked_prefill="
                                     f"{str(ecp).lower()} (vLLM's alias for scheduler {alias!r}); set one of them")
            out = apply_preset(data)
            if "capacity_scheduler_policy" not in data and out.get("scheduler") in OWN_ADMISSION:
                out.pop("capacity_scheduler_policy", None)  # the preset's rule, of no effect there: not recorded
            return out
        return data

    @field_validator("workload_distribution")
    @classmethod
    def _workload_distribution(cls, v: str) -> str:
        """``uniform``, ``balanced`` or ``power_law_<alpha>`` with a finite alpha > 0
        (:data:`POWER_LAW_ALPHA_RULE`); the message lists them."""
        m = WORKLOAD_DISTRIBUTION_RE.match(v)
        if v in ("uniform", "balanced") or (m is not None and 0.0 < float(m.group(1)) < math.inf):
            return v
        raise ValueError(f"expected uniform, balanced or power_law_<alpha> ({POWER_LAW_ALPHA_RULE})")

    @model_validator(mode="after")
    def _check(self) -> "SimConfig":
        if self.engine_version is not None and self.engine is None:
            raise ValueError(f"engine_version {self.engine_version!r} has no effect without engine (it selects "
                             "the documented behaviour changes of that engine's releases): set engine "
                             f"({', '.join(sorted(PRESETS))}) or drop engine_version")
        if self.enable_chunked_prefill is not None and self.engine is None:
            alias = "chunked" if self.enable_chunked_prefill else "continuous"
            if "scheduler" in self.model_fields_set and self.scheduler != alias and (
                    self.enable_chunked_prefill or self.scheduler == "chunked"):
                # e.g. scheduler static + enable_chunked_prefill true: say so rather
                # than run a mode the user did not name
                raise ValueError(f"scheduler {self.scheduler!r} conflicts with enable_chunked_prefill="
                                 f"{str(self.enable_chunked_prefill).lower()} (vLLM's alias for scheduler "
                                 f"{alias!r}); set one of them")
            if "scheduler" not in self.model_fields_set:
                self.scheduler = alias
        if self.memory_profile is not None and self.engine not in (None, "vllm"):
            # vLLM's memory-profiling snapshot (vllm/utils memory_profiling; sim/kv_cache/sizing.py):
            # SGLang and TensorRT-LLM size their pools by their own rules (kv_memory_rule)
            raise ValueError(f"memory_profile {self.memory_profile!r} is vLLM's memory-profiling rule (what its "
                             f"init-time snapshot holds) and has no effect with engine {self.engine!r}; drop "
                             "memory_profile")
        if self.num_postprocess_workers > 0 and self.engine != "trtllm":
            which = "no engine preset is set" if self.engine is None else f"engine {self.engine!r} has no such key"
            raise ValueError(f"num_postprocess_workers = {self.num_postprocess_workers} is TensorRT-LLM's "
                             f"(LLM API postprocess worker processes); {which}: "
                             "use engine trtllm or drop num_postprocess_workers")
        if self.block_size <= 0 or self.block_size > 1024 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two from 1 to 1024 (vLLM accepts 1, 8, 16, 32, "
                             f"64, 128; TensorRT-LLM 32/64/128; SGLang --page-size, default 1), got {self.block_size}")
        if self.tensor_parallel_size & (self.tensor_parallel_size - 1):
            raise ValueError(f"tensor_parallel_size must be a power of two, got {self.tensor_parallel_size}")
        if self.disaggregation is not None and "num_replicas" in self.model_fields_set and self.num_replicas != 1:
            raise ValueError(f"num_replicas = {self.num_replicas} conflicts with disaggregation: the workers are "
                             "disaggregation.num_prefill_workers and num_decode_workers; drop num_replicas")
        wl = self.workload
        if wl.max_concurrency is None or not wl.is_infinite_rate():
            for key in ("client_think_time_s", "client_start_spread_s"):
                if getattr(self, key) > 0:  # no preset sets them: the user did, expecting an effect
                    if wl.max_concurrency is None:
                        why = ("this workload is open loop (requests are sent at their arrival times)", 
                               "set workload.max_concurrency")
                    else:
                        why = (f"with workload.request_rate {wl.request_rate:g} the requests arrive at that rate "
                               "and wait for one of the max_concurrency slots (as vllm bench serve)",
                               "drop workload.request_rate for a closed loop")
                    raise ValueError(f"{key} = {getattr(self, key)!r} applies to closed-loop clients "
                                     f"(workload.max_concurrency without a request rate), but {why[0]}, where it "
                                     f"has no effect; {why[1]}, or drop {key}")
        return self


def pool_config(cfg: SimConfig, pool: str) -> SimConfig:
    """The engine config of one pool (``prefill`` or ``decode``) of a
    disaggregated ``cfg``: its top-level engine keys with the pool's overrides
    (``disaggregation.<pool>``) on top, validated like the top level (errors
    name ``disaggregation.<pool>``); ``num_replicas`` = the pool's workers,
    no ``disaggregation``."""
    d = cfg.disaggregation
    if d is None:
        raise ValueError("pool_config: the config is not disaggregated")
    over = dict(getattr(d, pool))
    data: dict[str, Any] = {k: getattr(cfg, k) for k in POOL_KEYS if k != "enable_chunked_prefill"}
    if "enable_chunked_prefill" in over and "scheduler" not in over:
        data.pop("scheduler")  # the pool's alias picks its mode
    if cfg.engine is not None:
        data["engine"] = cfg.engine
    data.update(over)
    source = f"disaggregation.{pool}"
    try:
        pc = SimConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source)) from None
    n = d.num_prefill_workers if pool == "prefill" else d.num_decode_workers
    upd = {k: getattr(pc, k) for k in POOL_KEYS}
    upd.update(num_replicas=n, disaggregation=None)
    return cfg.model_copy(update=upd)


def resolve_scheduler_limits(cfg: SimConfig, hbm_bytes: float, hardware_name: str, max_model_len: int,
                             chunked_prefill: bool | None = None) -> SimConfig:
    """Fill the hardware-dependent defaults.

    Without an engine or with ``engine: vllm``, as vLLM 0.24 ``vllm serve``
    (ENGINE_SEMANTICS §1.1): on GPUs with ≥ 70 GiB that are not A100,
    ``max_num_batched_tokens`` = 8192 and ``max_num_seqs`` = 1024; else 2048 /
    256; without chunked prefill the budget is raised to ≥ ``max_model_len``;
    ``gpu_memory_utilization`` 0.92. ``engine: trtllm``: the preset's 8192 /
    2048, never raised (TensorRT-LLM packs at most ``max_num_tokens``).
    ``engine: sglang``: ``chunked_prefill_size`` and ``mem_fraction_static``
    from SGLang's GPU-memory heuristics (:mod:`sim.presets.sglang`);
    ``max_num_seqs`` stays None here and is set from the KV pool by
    :func:`sim.engine.deployment.build_deployment`.

    Raises ConfigError when vLLM's ``chunked`` gets ``max_num_batched_tokens <
    max_num_seqs`` (vLLM rejects that config).
    """

    eng = cfg.engine
    upd: dict[str, Any] = {"max_model_len": max_model_len}
    vllm_like = eng in (None, "vllm")
    # a config that names no engine takes vLLM's limits
    d = get_preset(eng or "vllm").hardware_defaults(cfg, hbm_bytes, hardware_name)
    mnbt = cfg.max_num_batched_tokens or d["max_num_batched_tokens"]
    mns = cfg.max_num_seqs or d["max_num_seqs"]
    if cfg.gpu_memory_utilization is None:
        frac = d["gpu_memory_utilization"]
        if frac <= 0:  # (SGLang's rule: the GPU's memory minus a reserve that grows with the budget)
            raise ConfigError(_sglang_no_room(hbm_bytes, hardware_name, cfg, mnbt, frac))
        upd["gpu_memory_utilization"] = frac
    if chunked_prefill is None:  # (the scheduler class's ``chunked_prefill``, when the caller knows it)
        chunked_prefill = cfg.scheduler in CHUNKING_MODES
    if vllm_like and not chunked_prefill:
        if cfg.max_num_batched_tokens is not None and cfg.max_num_batched_tokens < max_model_len:
            raise ConfigError(
                f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) is smaller than max_model_len "
                f"({max_model_len}) with scheduler {cfg.scheduler!r} (no chunked prefill): a prompt could "
                "never be scheduled, and vLLM rejects this config; raise max_num_batched_tokens, lower "
                "max_model_len, or use scheduler 'chunked'")
        mnbt = max(mnbt, max_model_len)
    elif vllm_like and cfg.max_num_seqs is None:
        mns = min(mns, mnbt)
    if vllm_like and cfg.scheduler == "chunked" and mnbt < mns:
        raise ConfigError(
            f"max_num_batched_tokens ({mnbt}) must be >= max_num_seqs ({mns}) for scheduler 'chunked' "
            "(vLLM rejects this config)"
        )
    upd["max_num_batched_tokens"] = mnbt
    upd["max_num_seqs"] = mns
    return cfg.model_copy(update=upd)


#: vLLM's smallest default max_num_seqs (256 on small GPUs, 1024 on large ones:
#: vllm/engine/arg_utils.py get_batch_defaults); below it a default was lowered
VLLM_MIN_DEFAULT_MAX_NUM_SEQS = 256


def scheduler_limit_warnings(given: SimConfig, resolved: SimConfig, chunked_prefill: bool) -> list[str]:
    """What vLLM would only warn about, or run slowly without a word, in the
    scheduler limits: ``given`` the config as the user gave it, ``resolved`` with
    the hardware-dependent limits filled in (:func:`resolve_scheduler_limits`,
    which raises vLLM's errors). vLLM's checks are ``SchedulerConfig.verify_max_model_len``
    (vllm/config/scheduler.py): an error when ``max_num_batched_tokens`` <
    ``max_model_len`` without chunked prefill or < ``max_num_seqs``, a warning when it
    exceeds ``max_num_seqs * max_model_len``; and ``EngineArgs`` (vllm/engine/arg_utils.py)
    lowers a default ``max_num_seqs`` to ``max_num_batched_tokens``. Recorded in
    summary.json's ``warnings`` and printed by run."""
    out: list[str] = []
    mnbt, mns, mml = resolved.max_num_batched_tokens, resolved.max_num_seqs, resolved.max_model_len
    if mnbt is None or mns is None or mml is None:
        return out
    vllm_like = resolved.engine in (None, "vllm")
    if vllm_like and mnbt > mns * mml:
        out.append(f"max_num_batched_tokens ({mnbt:,}) exceeds max_num_seqs * max_model_len ({mns * mml:,}): "
                   "no step can fill it; vLLM warns that this may lead to unexpected behavior "
                   "(vllm/config/scheduler.py)")
    if chunked_prefill and given.max_num_batched_tokens is not None and mnbt < resolved.block_size:
        out.append(f"max_num_batched_tokens {mnbt:,} is below one KV block (block_size {resolved.block_size}): "
                   f"each step computes at most {mnbt:,} token(s), so a prompt of L tokens takes L/{mnbt:,} steps, "
                   "each paying the step's whole fixed cost (the weights are read once per step); engines accept "
                   "it and run as slowly (their defaults are 2,048 to 16,384 tokens)")
    if (vllm_like and chunked_prefill and given.max_num_seqs is None and mns == mnbt
            and mnbt < VLLM_MIN_DEFAULT_MAX_NUM_SEQS):
        out.append(f"max_num_seqs defaults to {mns:,} here: vLLM lowers its default max_num_seqs to "
                   f"max_num_batched_tokens ({mnbt:,}) (vllm/engine/arg_utils.py), so at most {mns:,} "
                   "sequence(s) run per step; set max_num_seqs, or raise max_num_batched_tokens")
    return out


def _sglang_no_room(hbm_bytes: float, hardware_name: str, cfg: SimConfig, mnbt: int, frac: float) -> str:
    """Why ``engine: sglang`` derived a ``gpu_memory_utilization`` (SGLang's
    ``mem_fraction_static``) of zero or less, and what to change."""
    from sim.presets import sglang

    mib = hbm_bytes / sglang.MiB
    reserved = sglang.sglang_reserved_mib(hbm_bytes, cfg.tensor_parallel_size, mnbt)
    fixed = reserved - 1.5 * max(mnbt, 2048)
    default = sglang.sglang_chunked_prefill_size(hbm_bytes)
    return (f"engine sglang on {hardware_name}: SGLang's rule for its default mem_fraction_static (servesim's "
            f"gpu_memory_utilization) reserves 1.5 MiB per token of max_num_batched_tokens {mnbt:,} (its "
            f"chunked_prefill_size) plus {fixed / 1024:.1f} GiB for CUDA graphs and workspace, "
            f"{reserved / 1024:.1f} GiB in all of the GPU's {mib / 1024:.1f} GiB, so it leaves no memory for "
            f"weights and KV cache (fraction {frac}); lower max_num_batched_tokens (SGLang's default on this GPU "
            f"is {default:,}), or set gpu_memory_utilization yourself (SGLang's --mem-fraction-static)")


# --------------------------------------------------------------------------- loading


#: keys whose ``--set`` / flag value is the text as typed, never a YAML scalar (a release
#: ``0.10`` is not the number 0.1)
TEXT_KEYS = ("engine_version",)


def is_text_key(name: str) -> bool:
    """``name`` as given (``engine_version``, ``engine-version``, ``--engine-version``) is a :data:`TEXT_KEYS` key."""
    return name.strip().lstrip("-").replace("-", "_") in TEXT_KEYS


def parse_value(text: str) -> Any:
    """``--set`` values are YAML scalars: ``4`` → int, ``true`` → bool, ``inf`` → float."""
    if text.strip().lower() in ("inf", "+inf", "infinity"):
        return math.inf
    try:
        return safe_load_unique(text)
    except yaml.YAMLError:
        return text


def set_dotted(d: dict, key: str, value: Any) -> None:
    """``d[a][b] = value`` for ``key`` "a.b". A workload given by name and by
    keys, in either order (``workload=chat`` and ``workload.num_requests=100``),
    merges into ``{"name": "chat", "num_requests": 100}``: the keys override the
    named workload's, as a nested mapping would."""
    parts = key.split(".")
    cur = d
    for p in parts[:-1]:
        nxt = cur.get(p)
        if isinstance(nxt, str) and p == "workload" and cur is d:
            nxt = {"name": nxt}
            cur[p] = nxt
        elif not isinstance(nxt, dict):
            nxt = {}
            cur[p] = nxt
        cur = nxt
    last = parts[-1]
    old = cur.get(last)
    if cur is d and last == "workload" and isinstance(old, dict) and isinstance(value, (str, dict)):
        merged = dict(old)
        merged.update({"name": value} if isinstance(value, str) else value)
        cur[last] = merged
        return
    cur[last] = value


def config_keys() -> dict[str, bool]:
    """The top-level config keys (``workload`` aside) → whether each is a boolean
    (a command-line flag without a value: ``--enable-prefix-caching``)."""
    return {k: "bool" in str(f.annotation).lower() for k, f in SimConfig.model_fields.items() if k != "workload"}


def canonical_keys(d: dict, source: str, used: list | None = None) -> dict:
    """A config mapping with every spelling of :mod:`sim.vocabulary` (kebab case,
    vLLM / ``vllm bench serve`` / SGLang / TensorRT-LLM aliases) as servesim's key,
    the keys of a nested ``workload:`` mapping in snake case; ConfigError when two
    spellings of one key disagree. ``used`` collects the aliases given (for
    :func:`sim.vocabulary.check_requirements`)."""
    items = []
    for k, v in d.items():
        if k == "workload" and isinstance(v, dict):
            inner, _ = canonicalize([(f"workload.{k2}" if isinstance(k2, str) else k2, v2)
                                     for k2, v2 in v.items()], source, {})
            v = {(k2.removeprefix("workload.") if isinstance(k2, str) else k2): v2 for k2, v2 in inner.items()}
        items.append((k, v))
    out, aliases = canonicalize(items, source, config_keys())
    if used is not None:
        used.extend(aliases)
    return out


#: the config's nested sections and the models that define their keys
_SECTIONS = {"workload": WorkloadConfig, "disaggregation": DisaggregationConfig}


def _valid_keys() -> list[str]:
    """The keys a user may give (the sections' internal bookkeeping fields left out)."""
    keys = [k for k in SimConfig.model_fields if k not in _SECTIONS]
    for name, model in _SECTIONS.items():
        keys += [f"{name}.{k}" for k in model.model_fields if k not in _INTERNAL_KEYS]
    return keys


#: section fields servesim sets itself (never a user's key)
_INTERNAL_KEYS = ("expanded_from",)


def check_known_keys(d: dict, source: str, prefix: str = "") -> None:
    """Every key of ``d`` (the config, or with ``prefix`` one of its
    :data:`_SECTIONS`) is a config key; else ConfigError naming the closest."""
    fields = SimConfig.model_fields if not prefix else _SECTIONS[prefix.rstrip(".")].model_fields
    for k, v in d.items():
        full = f"{prefix}{k}"
        if k not in fields:
            from sim.vocabulary import lookup

            hit = lookup(full, config_keys()) if isinstance(full, str) else None
            if hit is not None and hit[1] is not None:  # an engine's name (the command line and files take it)
                a = hit[1]
                raise ConfigError(f"{source}: '{full}' is {a.engine}'s name for {a.key}; give {a.key} here")
            close = difflib.get_close_matches(full, _valid_keys(), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; valid keys: {', '.join(_valid_keys())}"
            raise ConfigError(f"{source}: unknown config key '{full}'{hint}")
        if k in _SECTIONS and not prefix and isinstance(v, dict):
            check_known_keys(v, source, f"{k}.")


def read_yaml(path: str | Path, what: str = "config file") -> dict:
    """Read a YAML mapping; a syntax error names the file and line; a missing
    file is named as ``what`` (config file, sweep file, variants file)."""
    p = Path(path)
    require_file(p, what)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); "
                          "save the file as UTF-8") from None
    try:
        data = safe_load_unique(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{p}:{where}: malformed YAML: {getattr(e, 'problem', e)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of config keys, got {type(data).__name__}")
    return data


def _flatten_dotted(d: dict, source: str = "config") -> dict:
    """Accept dotted keys inside YAML too (``workload.request_rate: 4``); a key
    given both dotted and nested (``workload: {request_rate: 5}``) is an error."""
    out: dict = {}

    def leaves(prefix: str, v: Any) -> list[str]:
        if isinstance(v, dict):
            return [x for k2, v2 in v.items() for x in leaves(f"{prefix}.{k2}", v2)]
        if prefix == "workload" and isinstance(v, str):
            return ["workload.name"]  # workload: chat is workload.name: chat
        return [prefix]

    seen: set[str] = set()
    for k, v in d.items():
        for leaf in leaves(str(k), v):
            if leaf in seen:
                raise ConfigError(f"{source}: {leaf} is given twice")
            seen.add(leaf)
        if isinstance(k, str) and ("." in k or k == "workload"):
            set_dotted(out, k, v)
        elif isinstance(v, dict) and k in out and isinstance(out[k], dict):
            out[k].update(v)
        else:
            out[k] = v
    return out


def format_validation_error(e: ValidationError, source: str | Callable[[str], str]) -> str:
    """One line per offending key: ``SOURCE: KEY: why (got VALUE)``; the members
    of a union (``workload.max_tokens``: an int or 'output_len') share one line.
    ``source``: the source of every key, or a function of the key (dotted; for
    an error of the whole config, the key its message starts with) giving its source."""
    from sim.workload.config import _UNION_TAGS

    lines: dict[str, list] = {}
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]
                       if not str(x).startswith("function-") and str(x) not in _UNION_TAGS)
        val = err.get("input")
        msg = error_text(err)
        if loc in lines:  # another member of a union: say every alternative
            lines[loc][1] += f" or {msg[0].lower()}{msg[1:]}"
            continue
        # Our own validators already quote the value; pydantic's built-in checks do not.
        val_s = "" if isinstance(val, dict) or "got " in msg else f" (got {val!r})"
        if callable(source):
            m = _KEY_AT_START.match(msg) if not loc else None
            src = source(loc or (m.group(1) if m else ""))
        else:
            src = source
        lines[loc] = [f"{src}: {loc + ': ' if loc else ''}", msg, val_s]
    return "\n".join("".join(parts) for parts in lines.values())


def _workload_mapping(value: Any, source: str) -> dict:
    """``workload:`` is a mapping of workload keys, or a built-in name / workload
    file (``workload: chat`` = ``workload: {name: chat}``)."""
    if value is None:
        return {}
    if isinstance(value, str) and value:
        return {"name": value}
    if isinstance(value, dict):
        return dict(value)
    raise ConfigError(f"{source}: workload: expected a built-in workload name, a workload file or a mapping of "
                      f"workload keys, got {value!r}")


def _is_preset_name(key: str, value: str) -> bool:
    """``value`` is a built-in name for ``key`` (``model``: preset or HF id;
    ``hardware``: profile name), which wins over any file of that name."""
    if key == "model":
        from sim.model_spec import _alias_index  # noqa: PLC0415 (the index get_model looks names up in)

        return value.lower() in _alias_index()
    from sim.paths import hardware_profiles_dir  # noqa: PLC0415

    return "/" not in value and (hardware_profiles_dir() / f"{value}.yaml").is_file()


def file_relative_paths(data: dict, base_dir: Path, source: str) -> dict:
    """``model`` / ``hardware`` of a config (or sweep) file given as relative paths
    become absolute against ``base_dir``, the file's folder, as ``workload.trace``
    does (a preset name stays a name). A path found only relative to the working
    directory is an error saying so, not silently used."""
    for key in ("model", "hardware"):
        v = data.get(key)
        if not isinstance(v, str) or not v or _is_preset_name(key, v):
            continue
        p = Path(v).expanduser()
        if p.is_absolute():
            continue
        cand = base_dir / p
        if cand.exists():
            data[key] = str(cand.resolve())
        elif p.exists():
            raise ConfigError(f"{source}: {key}: {v!r} is not in the file's folder {base_dir} (relative paths in "
                              f"a config file are relative to the file); {p.resolve()} exists relative to the "
                              "working directory: write its path relative to the file, or absolute")
    return data


def build_config(
    config_file: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    set_args: list[str] | None = None,
    workload: str | None = None,
    api: str | None = None,
) -> SimConfig:
    """Merge the sources (see module docstring) and validate.

    ``overrides`` are dotted keys → values from CLI options (``--model``...);
    ``set_args`` are raw ``key=value`` strings from ``--set``.
    Raises ConfigError naming the source, key and value. ``api``: the Python
    function the ``overrides`` are the keyword arguments of (``servesim.simulate()``):
    errors then name it and the key path (``servesim.simulate(): max_num_seqs: ...``), not
    the command line's ``--set`` / ``--max-num-seqs``.
    """
    from sim.workload import merge_workload_dicts, resolve_workload_dict
    from sim.workload.builtin import absolute_paths

    data: dict = {}
    wl: dict = {}  # raw workload keys, merged in order; names are expanded at the end
    used: list = []  # the engine aliases given (sim.vocabulary), checked once the config is valid
    if config_file is not None:
        file_data = _flatten_dotted(canonical_keys(read_yaml(config_file), str(config_file), used),
                                    str(config_file))
        check_known_keys(file_data, str(config_file))
        file_relative_paths(file_data, Path(config_file).parent, str(config_file))
        wl = absolute_paths(_workload_mapping(file_data.pop("workload", None), str(config_file)),
                            Path(config_file).parent)
        file_wl = dict(wl)
        data.update(file_data)
    # who named the workload, for an error in expanding it (an unknown name, a bad workload file)
    name_src = str(config_file) if wl.get("name") is not None else None
    if workload is not None:
        wl = merge_workload_dicts(wl, {"name": workload})
        name_src = None  # its errors name the option's value already (workload file: PATH ...)
    set_src = api or "--set"
    flat: dict = {}
    for k, v in (overrides or {}).items():
        if v is not None:
            set_dotted(flat, k, v)
    given_items: list[tuple[str, Any, str]] = []
    for item in set_args or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value (e.g. workload.request_rate=4)")
        k, v = item.split("=", 1)
        if not v.strip():
            flag = k.strip().startswith("--")
            x = "0.12.0" if is_text_key(k) else "4"
            where, after, eg = ((k.strip(), "", f"{k.strip()} {x}") if flag
                                else (f"--set {item!r}", " after '='", f"{k.strip()}={x}"))
            raise ConfigError(f"{where}: no value{after}; give one (e.g. {eg}), "
                              "or leave the key out to keep its default")
        given_items.append((k.strip(), parse_value(v.strip()), v.strip()))
    canon, aliases = canonicalize([(k, v) for k, v, _ in given_items], set_src, config_keys())
    used.extend(aliases)
    raw_text = {}
    for k, _, text in given_items:
        hit = lookup(k, config_keys())
        raw_text[hit[0] if hit else k] = (k, text)
    for key, value in canon.items():
        spelled, text = raw_text.get(key, (key, str(value)))
        v = text
        if key in TEXT_KEYS and key in raw_text:  # as typed: --engine-version 0.10 is no number 0.1
            value = text
        if workload is not None and key in ("workload", "workload.name") and value != workload:
            raise ConfigError(f"{_spelled(spelled, v)} conflicts with --workload {workload}; give one of them")
        given = (overrides or {}).get(key)
        if given is not None and given != value:  # e.g. --scheduler continuous --set scheduler=mixed
            flag = "--" + key.replace("_", "-")
            opt = (flag if given else "--no-" + flag[2:]) if isinstance(given, bool) else f"{flag} {given}"
            raise ConfigError(f"{_spelled(spelled, v)} conflicts with {opt}; give one of them")
        set_dotted(flat, key, value)
    check_known_keys(flat, set_src)
    set_wl = _workload_mapping(flat.pop("workload", None), set_src)
    if "name" in set_wl:
        name_src = set_src
    wl = merge_workload_dicts(wl, set_wl)
    data.update(flat)
    # A named (or, with nothing given, the built-in 'default') workload, overridden key by key.
    try:
        data["workload"] = resolve_workload_dict(wl)
    except ConfigError as e:
        if name_src is None or str(e).startswith(f"{name_src}:"):
            raise
        raise ConfigError(f"{name_src}: {e}") from None
    _closed_loop_default(wl, data["workload"])
    sources: dict[str, str] = {}
    if config_file is not None:
        sources.update({k: str(config_file) for k in file_data})
        sources.update({f"workload.{k}": str(config_file) for k in file_wl})
    sources.update({k: set_src for k in flat})  # flat holds the options' keys too: named below
    sources.update({f"workload.{k}": set_src for k in set_wl})
    try:
        cfg = SimConfig.model_validate(data)
    except ValidationError as e:
        fallback = str(config_file) if config_file else set_src

        def source_of(key: str) -> str:  # where the offending key was given (a --set over a file: --set)
            parts = key.split(".") if key else []
            while parts:
                if ".".join(parts) in sources:
                    return sources[".".join(parts)]
                parts.pop()
            return fallback

        msg = format_validation_error(e, source_of)
        for key, (spelled, text) in raw_text.items():  # a key given as a flag: name the flag
            if spelled.startswith("-"):
                msg = msg.replace(f"{set_src}: {key}: ", f"{spelled} {text}: ")
        # a check across keys (no field in the error) whose message starts with a flag's key
        m = re.match(rf"{re.escape(set_src)}: ([A-Za-z_][\w.]*)\b", msg)
        if m and m.group(1) in raw_text and raw_text[m.group(1)][0].startswith("-"):
            spelled, text = raw_text[m.group(1)]
            msg = f"{spelled} {text}: " + msg[len(set_src) + 2:]
        raise ConfigError(msg) from None
    check_requirements(cfg, used, None)
    if api is None:  # the options' keys, for errors found when the deployment is built (locate_error)
        sources.update({k: f"--{k.replace('_', '-')}" for k, v in (overrides or {}).items() if v is not None})
        # keys given as vLLM-style flags (carried as set items): the flag as the user spelled it
        sources.update({key: spelled for key, (spelled, _) in raw_text.items() if spelled.startswith("-")})
    cfg._key_sources = sources
    return cfg


_KEY_AT_START = re.compile(r"^([A-Za-z_][\w.]*)\s*[:= ]")


def locate_error(cfg: SimConfig, message: str) -> str:
    """``message`` (an error about one config key, e.g. ``"scheduler: unknown
    batching mode 'bogus'"``, found when the deployment is built) prefixed with
    where that key was set -- the config file, ``--set``, an option, a variant --
    unless the message names it already."""
    m = _KEY_AT_START.match(message)
    if not m:
        return message
    key = m.group(1)
    src = cfg._key_sources.get(key)
    if src is None and "." in key:  # a nested key (disaggregation.decode): where its mapping was set
        src = cfg._key_sources.get(key.split(".")[0])
    if src is None and key.startswith("workload"):
        src = next((v for k, v in cfg._key_sources.items() if k.startswith("workload.")), None)
    if src is None or message.startswith(src):
        return message
    return f"{src}: {message}"


def _closed_loop_default(given: dict, resolved: Any) -> None:
    """``max_concurrency`` given without a request rate is a closed loop, as
    ``vllm bench serve --max-concurrency C`` is with its default ``--request-rate inf``:
    the rate a built-in workload carries is dropped (set to inf) rather than gating
    arrivals at it. Given together (``--request-rate 4 --max-concurrency 16``) both
    apply (:mod:`sim.engine.traffic`). ``given``: the workload keys the user gave
    (file, ``--set``, flags); ``resolved``: the expanded workload mapping (changed here)."""
    if (not isinstance(resolved, dict) or given.get("max_concurrency") is None or "request_rate" in given
            or "arrival" in given or resolved.get("trace") is not None or resolved.get("num_requests") is None):
        return
    rate = resolved.get("request_rate")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate):
        resolved["request_rate"] = math.inf


def _spelled(spelling: str, text: str) -> str:
    """How the user gave a key: ``--max-num-seqs 64`` (a flag) or ``--set key=64``."""
    return f"{spelling} {text}" if spelling.startswith("--") else f"--set {spelling}={text}"
