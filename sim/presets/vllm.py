"""vLLM (``vllm serve``): the preset ``engine: vllm``.

Versions: vLLM 0.24, the project's reference (``engine_version`` selects the
older releases' documented differences, e.g. the validation data's 0.12:
``sim/presets/versions.py``). Sources in each default.
"""

from __future__ import annotations

from typing import Any

from sim.presets.types import EAGER_DEFAULT, GiB, Default, EnginePreset


def vllm_batch_defaults(memory_bytes: float, hardware_name: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of ``vllm serve``
    (``engine/arg_utils.py::get_batch_defaults``; ENGINE_SEMANTICS §1.1)."""
    large = memory_bytes >= 70 * GiB and "a100" not in hardware_name.lower()
    return (8192, 1024) if large else (2048, 256)


def hardware_defaults(cfg: Any, memory_bytes: float, hardware_name: str) -> dict[str, Any]:
    """``vllm serve``'s batch limits for the GPU and the 0.24 memory default
    (also the defaults of a config that names no engine)."""
    mnbt, mns = vllm_batch_defaults(memory_bytes, hardware_name)
    return {"max_num_batched_tokens": mnbt, "max_num_seqs": mns, "gpu_memory_utilization": 0.92}


PRESET = EnginePreset(
    name="vllm",
    versions="vLLM 0.24 (older releases through engine_version)",
    defaults={
        "scheduler": Default("chunked", "V1 scheduler, chunked prefill on for generative models "
                                        "(vllm/config/scheduler.py; ENGINE_SEMANTICS §1.1)"),
        "block_size": Default(16, "vllm/config/cache.py block_size default 16 (ENGINE_SEMANTICS §2.1)"),
        "gpu_memory_utilization": Default(0.92, "vllm/config/cache.py: 0.92 in 0.24 (0.9 in 0.11); "
                                                "KV = total x util - weights - activation peak "
                                                "(gpu_worker.py::determine_available_memory)"),
        "kv_memory_rule": Default("utilization", "vllm/v1/worker/gpu_worker.py::determine_available_memory"),
        "memory_profile": Default("after_nccl_init", "vllm/v1/worker/gpu_worker.py::init_device: "
                                                     "init_worker_distributed_environment before the memory "
                                                     "snapshot (github.com/vllm-project/vllm/pull/25359, 0.11); "
                                                     "non-torch increase 0.16 GiB (pull/12126's log)"),
        "enable_prefix_caching": Default(True, "vllm/config/cache.py: on for generative models"),
        "policy": Default("fcfs", "vllm/config/scheduler.py policy='fcfs'"),
        "capacity_scheduler_policy": Default(None, "vLLM allocates blocks on demand and preempts by "
                                                   "recompute (docs/configuration/optimization.md)"),
        "eager_step_overhead_s": EAGER_DEFAULT,
        "overlap_scheduling": Default(True, "async_scheduling on by default from 0.14 (vllm/config/vllm.py "
                                            "in 0.24; off before: engine_version < 0.14, sim/presets/versions.py)"),
    },
    chunked_alias={True: "chunked", False: "mixed"},
    hardware_defaults=hardware_defaults,
    # frontend_latency_s / frontend_token_s: one value for every engine (sim.validate.crossval.SHARED_KEYS)
    fitted={"cpu_step_overhead_s": 2e-3, "cpu_seq_overhead_s": 40e-6, "frontend_latency_s": 10e-3,
            "frontend_token_s": 60e-6},
    client_phase_spread=0.0,
    frontend_token_unit=Default("message", "--stream-interval N (PR 27869): the API server's OutputProcessor."
                                "process_outputs takes every request's new token every step (stats, incremental "
                                "detokenize: a tokenizers DecodeStream step in Rust, a few us; no stop strings in "
                                "a benchmark) and only then gates make_request_output (first token, N tokens "
                                "since the last send, or finish), so the RequestOutput, the generate() hand-off "
                                "and the OpenAI SSE chunk (Python objects, JSON, the asyncio write) are per "
                                "message (vllm/v1/engine/output_processor.py): the fitted 80 us at N = 1 is "
                                "taken as per message, the per-token part being a few us of it. Per token, the "
                                "MiniMax-M2.5 B200 row at 512 clients (--stream-interval 20) queues a 5 s "
                                "backlog behind 512 x 80 us = 41 ms of frontend work per 38 ms step: 6.1 s "
                                "TTFT against 0.82 s measured (reports/validation/moe_notes.md, session 14)"),
    dp_token_padding=Default("max", "coordinate_batch_across_dp (vllm/v1/worker/dp_utils.py) all-reduces "
                                    "the ranks' token counts and pads every rank's forward to the max "
                                    "(num_tokens_across_dp, DPMetadata)"),
    request_len_cap=Default("refuse", "vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory: a KV cache "
                                      "that cannot hold one max_model_len sequence raises ValueError at start-up "
                                      "(lower max_model_len or raise gpu_memory_utilization)"),
    expert_layouts=Default("tp_or_ep", "FusedMoEParallelConfig.make (vllm/model_executor/layers/fused_moe/"
                                       "config.py): without --enable-expert-parallel the experts are "
                                       "tensor-sharded over all tp x dp GPUs (flatten_tp_across_dp_and_pcp, "
                                       "ep_size 1); with it each GPU holds whole experts (ep_size = tp x dp, "
                                       "tp_size 1); vLLM has no flag for a split in between"),
    resolved={
        "max_num_batched_tokens": "8192 on GPUs >= 70 GiB that are not A100, else 2048 "
                                  "(engine/arg_utils.py::get_batch_defaults, vllm serve); a scheduler "
                                  "without chunked prefill raises it to max_model_len",
        "max_num_seqs": "1024 on GPUs >= 70 GiB that are not A100, else 256 (same source)",
    },
)
