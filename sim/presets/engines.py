"""Serving-engine presets: ``engine: vllm | sglang | trtllm``.

A preset is a bundle of defaults for the other config keys: what differs
between the engines and matters for timing. Keys given explicitly (YAML,
``--set``, CLI options, or a ``SimConfig(...)`` argument) always win over the
preset: :func:`apply_preset` only fills keys the caller did not set.

Three kinds of defaults:

- **static** (:attr:`EnginePreset.defaults`): a value and its source.
- **hardware-dependent** (resolved by :func:`sim.config.resolve_scheduler_limits`
  once the GPU and TP are known): token budget and sequence limit (vLLM),
  SGLang's ``chunked_prefill_size`` and ``mem_fraction_static`` heuristics;
  SGLang's ``max_running_requests`` after KV sizing
  (:func:`sglang_max_running_requests`).
- **fitted** CPU/framework overheads (:data:`OVERHEAD_KEYS`): per step and per
  scheduled sequence, and whether the engine overlaps that CPU work with the
  GPU (``step = max(gpu, cpu)``) or not (``gpu + cpu``). Their values were fitted
  on half of ``../shared/silicon/dense_agg_dev.csv``
  (``benchmarks/validate_silicon.py``; provenance in :data:`FIT_PROVENANCE`).

Versions: vLLM 0.12 (the validation data's; 0.24 where the project's
reference differs and it does not matter here), SGLang 0.5.x, TensorRT-LLM
1.0 PyTorch backend (``trtllm-serve`` / LLM API).

This module holds data and pure functions only (it imports nothing from sim).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MiB = float(1 << 20)
GiB = float(1 << 30)

#: Config keys of the CPU/framework overhead model (``sim/cost_model/overheads.py``).
OVERHEAD_KEYS = ("cpu_step_overhead_s", "cpu_seq_overhead_s", "eager_step_overhead_s", "overlap_scheduling",
                 "frontend_latency_s", "frontend_token_s")


@dataclass(frozen=True)
class Default:
    """A preset default: ``value`` and where it comes from."""
    value: Any
    source: str


@dataclass(frozen=True)
class EnginePreset:
    name: str
    versions: str
    defaults: dict[str, Default]
    #: ``enable_chunked_prefill`` (vLLM's alias) → batching mode for this engine
    chunked_alias: dict[bool, str]
    #: keys resolved once hardware/TP are known: key → rule and source
    resolved: dict[str, str] = field(default_factory=dict)


FIT_PROVENANCE = (
    "fitted by benchmarks/validate_silicon.py on the seeded fit half (SPLIT_SEED 0, 290 rows) of "
    "../shared/silicon/dense_agg_dev.csv, 2026-11-30; see reports/validation/README.md"
)
EAGER_SOURCE = ("0: knob for the host cost of steps without a CUDA graph (steps with prefill tokens); "
                "not fitted, its effect was not identifiable on the silicon rows")

_VLLM = EnginePreset(
    name="vllm",
    versions="vLLM 0.12 (validation data); 0.24 semantics where noted",
    defaults={
        "scheduler": Default("chunked", "V1 scheduler, chunked prefill on for generative models "
                                        "(vllm/config/scheduler.py; ENGINE_SEMANTICS §1.1)"),
        "block_size": Default(16, "vllm/config/cache.py block_size default 16 (ENGINE_SEMANTICS §2.1)"),
        "gpu_memory_utilization": Default(0.92, "vllm/config/cache.py: 0.92 in 0.24 (0.9 in 0.11); "
                                                "KV = total x util - weights - activation peak "
                                                "(gpu_worker.py::determine_available_memory)"),
        "kv_memory_rule": Default("utilization", "vllm/v1/worker/gpu_worker.py::determine_available_memory"),
        "enable_prefix_caching": Default(True, "vllm/config/cache.py: on for generative models"),
        "policy": Default("fcfs", "vllm/config/scheduler.py policy='fcfs'"),
        "capacity_scheduler_policy": Default(None, "vLLM allocates blocks on demand and preempts by "
                                                   "recompute (docs/configuration/optimization.md)"),
        "cpu_step_overhead_s": Default(0.0, FIT_PROVENANCE),
        "cpu_seq_overhead_s": Default(0.0, FIT_PROVENANCE),
        "eager_step_overhead_s": Default(0.0, EAGER_SOURCE),
        "frontend_latency_s": Default(0.0, FIT_PROVENANCE),
        "frontend_token_s": Default(0.0, FIT_PROVENANCE),
        "overlap_scheduling": Default(False, "async_scheduling defaults off before 0.14 (on from 0.14, "
                                             "vllm/config/vllm.py); the data is 0.12"),
    },
    chunked_alias={True: "chunked", False: "mixed"},
    resolved={
        "max_num_batched_tokens": "8192 on GPUs >= 70 GiB that are not A100, else 2048 "
                                  "(engine/arg_utils.py::get_batch_defaults, vllm serve)",
        "max_num_seqs": "1024 on GPUs >= 70 GiB that are not A100, else 256 (same source)",
    },
)

_TRTLLM = EnginePreset(
    name="trtllm",
    versions="TensorRT-LLM 1.0 PyTorch backend (trtllm-serve, LLM API)",
    defaults={
        "scheduler": Default("mixed", "in-flight batching: whole contexts packed with generation tokens; "
                                      "enable_chunked_prefill=False by default (llmapi/llm_args.py; "
                                      "docs/source/features/paged-attention-ifb-scheduler.md)"),
        "capacity_scheduler_policy": Default("guaranteed_no_evict", "CapacitySchedulerPolicy default "
                                             "GUARANTEED_NO_EVICT (capacityScheduler.cpp; ENGINE_SEMANTICS §4)"),
        "max_num_batched_tokens": Default(8192, "max_num_tokens default 8192 since v0.11 (ENGINE_SEMANTICS §4)"),
        "max_num_seqs": Default(2048, "max_batch_size default 2048 (BuildConfig / LLM API)"),
        "block_size": Default(32, "KvCacheConfig tokens_per_block 32 in the LLM API (ENGINE_SEMANTICS §4)"),
        "gpu_memory_utilization": Default(0.9, "KvCacheConfig free_gpu_memory_fraction 0.9 of the memory "
                                               "free after the model is loaded (ENGINE_SEMANTICS §4)"),
        "kv_memory_rule": Default("free_fraction", "KvCacheConfig free_gpu_memory_fraction"),
        "enable_prefix_caching": Default(True, "KvCacheConfig enable_block_reuse=True "
                                               "(docs/source/features/kvcache.md)"),
        "policy": Default("fcfs", "requests are scheduled in arrival order (capacityScheduler.cpp)"),
        "cpu_step_overhead_s": Default(0.0, FIT_PROVENANCE),
        "cpu_seq_overhead_s": Default(0.0, FIT_PROVENANCE),
        "eager_step_overhead_s": Default(0.0, EAGER_SOURCE),
        "frontend_latency_s": Default(0.0, FIT_PROVENANCE),
        "frontend_token_s": Default(0.0, FIT_PROVENANCE),
        "overlap_scheduling": Default(True, "PyTorch backend overlap scheduler on by default "
                                            "(disable_overlap_scheduler=False, llmapi/llm_args.py; "
                                            "pyexecutor/py_executor.py::_executor_loop_overlap)"),
    },
    chunked_alias={True: "chunked", False: "mixed"},
)

_SGLANG = EnginePreset(
    name="sglang",
    versions="SGLang 0.5.x",
    defaults={
        "scheduler": Default("prefill_first", "Scheduler.get_next_batch_to_run runs a new prefill batch "
                                              "whenever one can be formed, else decodes; "
                                              "enable_mixed_chunk=False (python/sglang/srt/managers/"
                                              "scheduler.py, server_args.py)"),
        "max_prefill_tokens": Default(16384, "server_args.py max_prefill_tokens=16384 (PrefillAdder "
                                             "rem_input_tokens)"),
        "block_size": Default(1, "server_args.py page_size=1 (token-granular KV pool)"),
        "kv_memory_rule": Default("static_fraction", "mem_fraction_static = (weights + KV pool) / total "
                                                     "memory (server_args.py::_handle_gpu_memory_settings; "
                                                     "model_runner.py::profile_max_num_token)"),
        "enable_prefix_caching": Default(True, "RadixAttention cache on unless --disable-radix-cache"),
        "policy": Default("fcfs", "schedule_policy: with no shared prefixes the waiting queue is "
                                  "served in arrival order"),
        "capacity_scheduler_policy": Default(None, "admission by PrefillAdder's token reservation "
                                                   "(schedule_policy.py), not TRT-LLM's"),
        "cpu_step_overhead_s": Default(0.0, FIT_PROVENANCE),
        "cpu_seq_overhead_s": Default(0.0, FIT_PROVENANCE),
        "eager_step_overhead_s": Default(0.0, EAGER_SOURCE),
        "frontend_latency_s": Default(0.0, FIT_PROVENANCE),
        "frontend_token_s": Default(0.0, FIT_PROVENANCE),
        "overlap_scheduling": Default(True, "overlap scheduler on unless --disable-overlap-schedule "
                                            "(server_args.py)"),
    },
    chunked_alias={True: "prefill_first", False: "prefill_first_whole"},
    resolved={
        "max_num_batched_tokens": "chunked_prefill_size by GPU memory: < 20 GiB 2048, < 35 GiB 2048, "
                                  "< 60 GiB 4096, < 90 GiB 8192 (H100), < 160 GiB 8192 (H200), else 16384 "
                                  "(server_args.py::_handle_gpu_memory_settings)",
        "gpu_memory_utilization": "mem_fraction_static = (gpu_mem - reserved) / gpu_mem, reserved (MiB) = "
                                  "512 + 1.5 x chunked_prefill_size + 2 x cuda_graph_max_bs + tp/8 x 1024, "
                                  "at least 10 GiB on GPUs > 60 GiB (same function)",
        "max_num_seqs": "max_running_requests = request pool size min(max(kv_tokens / context_len x 512, "
                        "2048), 4096) (model_runner.py::init_memory_pool)",
    },
)

PRESETS: dict[str, EnginePreset] = {p.name: p for p in (_VLLM, _TRTLLM, _SGLANG)}

#: Fitted values (benchmarks/validate_silicon.py → reports/validation/fitted_params.json;
#: FIT_PROVENANCE). Meaning, per engine:
#:   cpu_step_overhead_s  host time per engine step (scheduling, input preparation,
#:                        graph launch, sampling bookkeeping), s;
#:   cpu_seq_overhead_s   host time per scheduled sequence per step, s;
#:   frontend_latency_s   send → scheduler latency of a request (HTTP, tokenization,
#:                        hand-off to the engine process), s; counted in TTFT;
#:   frontend_token_s     the frontend's time to stream one output token (detokenize,
#:                        serialize, send), s; a FIFO that every step's tokens pass.
#: Fitted 2026-11-30 under the ``aic`` validation protocol by coordinate search
#: on the fit half (loss: |log| TTFT error + 3 x |log| TPOT error, each metric in
#: units of its target). Grid edge hit: sglang frontend_latency_s (80 ms), an
#: upper bound that absorbs what the model misses (report). SGLang's 50 µs per
#: streamed token is what makes its TPOT at 512 clients flat across TP (its
#: detokenizer is one CPU process, whatever the GPU count).
FITTED: dict[str, dict[str, Any]] = {
    "vllm": {"cpu_step_overhead_s": 0.5e-3, "cpu_seq_overhead_s": 40e-6, "frontend_latency_s": 5e-3,
             "frontend_token_s": 80e-6},
    "sglang": {"cpu_step_overhead_s": 0.0, "cpu_seq_overhead_s": 40e-6, "frontend_latency_s": 80e-3,
               "frontend_token_s": 50e-6},
    "trtllm": {"cpu_step_overhead_s": 0.5e-3, "cpu_seq_overhead_s": 60e-6, "frontend_latency_s": 10e-3,
               "frontend_token_s": 80e-6},
}


def get_preset(name: str) -> EnginePreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; valid: {', '.join(PRESETS)}") from None


def preset_defaults(name: str) -> dict[str, Any]:
    """Static defaults of ``name`` as plain values (fitted overheads included)."""
    p = get_preset(name)
    out = {k: d.value for k, d in p.defaults.items()}
    out.update(FITTED.get(name, {}))
    return out


def apply_preset(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (explicit config keys) completed with the preset of
    ``data['engine']``: preset keys fill only what ``data`` does not set.
    ``enable_chunked_prefill`` given without ``scheduler`` selects the engine's
    mode through :attr:`EnginePreset.chunked_alias`."""
    name = data.get("engine")
    if not name:
        return data
    p = get_preset(name)
    out = dict(data)
    ecp = out.get("enable_chunked_prefill")
    if ecp is not None and "scheduler" not in out:
        out["scheduler"] = p.chunked_alias[bool(ecp)]
    for k, v in preset_defaults(name).items():
        out.setdefault(k, v)
    return out


# --------------------------------------------------------------------------- hardware-dependent rules


def vllm_batch_defaults(memory_bytes: float, hardware_name: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of ``vllm serve``
    (``engine/arg_utils.py::get_batch_defaults``; ENGINE_SEMANTICS §1.1)."""
    large = memory_bytes >= 70 * GiB and "a100" not in hardware_name.lower()
    return (8192, 1024) if large else (2048, 256)


def sglang_chunked_prefill_size(memory_bytes: float) -> int:
    """``chunked_prefill_size`` by GPU memory (``_handle_gpu_memory_settings``)."""
    mib = memory_bytes / MiB
    if mib < 20 * 1024 or mib < 35 * 1024:
        return 2048
    if mib < 60 * 1024:
        return 4096
    if mib < 160 * 1024:
        return 8192
    return 16384


def sglang_cuda_graph_max_bs(memory_bytes: float, tensor_parallel_size: int) -> int:
    """Largest CUDA-graph decode batch (same function): 256 below TP 4 and 512
    from TP 4 on GPUs of 60-160 GiB; 512 above; smaller GPUs less."""
    mib = memory_bytes / MiB
    if mib < 20 * 1024:
        return 8
    if mib < 35 * 1024:
        return 24 if tensor_parallel_size < 4 else 80
    if mib < 60 * 1024:
        return 32 if tensor_parallel_size < 4 else 160
    if mib < 160 * 1024:
        return 256 if tensor_parallel_size < 4 else 512
    return 512


def sglang_mem_fraction_static(memory_bytes: float, tensor_parallel_size: int,
                               chunked_prefill_size: int) -> float:
    """SGLang's default ``mem_fraction_static`` (fraction of total memory for
    weights + KV pool): reserved MiB = 512 + 1.5 x max(chunked_prefill_size,
    2048) + 2 x cuda_graph_max_bs + tp/8 x 1024, at least 10 GiB on GPUs over
    60 GiB; fraction = (gpu_mem - reserved) / gpu_mem rounded to 3 digits
    (``server_args.py::_handle_gpu_memory_settings``, 0.5.x)."""
    mib = memory_bytes / MiB
    return round((mib - sglang_reserved_mib(memory_bytes, tensor_parallel_size, chunked_prefill_size)) / mib, 3)


def sglang_reserved_mib(memory_bytes: float, tensor_parallel_size: int, chunked_prefill_size: int) -> float:
    """The MiB SGLang's ``mem_fraction_static`` rule keeps out of the static pool
    (activations, CUDA graphs): see :func:`sglang_mem_fraction_static`."""
    reserved = 512 + 1.5 * max(chunked_prefill_size, 2048)
    reserved += 2 * sglang_cuda_graph_max_bs(memory_bytes, tensor_parallel_size)
    reserved += tensor_parallel_size / 8 * 1024
    if memory_bytes / MiB > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return reserved


def sglang_max_running_requests(kv_tokens: int, context_len: int) -> int:
    """Request-pool size, SGLang's default ``max_running_requests``:
    min(max(kv_tokens / context_len x 512, 2048), 4096)
    (``model_runner.py::init_memory_pool``)."""
    return int(min(max(kv_tokens / context_len * 512, 2048), 4096))


def preset_table() -> list[dict[str, str]]:
    """Rows (engine, key, value, source) documenting every preset default."""
    rows = []
    for p in PRESETS.values():
        vals = preset_defaults(p.name)
        for k, d in p.defaults.items():
            rows.append({"engine": p.name, "key": k, "value": repr(vals[k]), "source": d.source})
        for k, rule in p.resolved.items():
            rows.append({"engine": p.name, "key": k, "value": "(hardware-dependent)", "source": rule})
    return rows
