"""TensorRT-LLM (``trtllm-serve``, PyTorch backend): the preset ``engine: trtllm``.

Versions: TensorRT-LLM 1.0 PyTorch backend (``trtllm-serve`` / LLM API); the
fitted host overheads are of 1.0.0rc3 (the dense table's rows), and from the
1.2 series the host time per sequence is the measured one of
``RELEASE_VALUES`` (``sim/presets/versions.py``). Sources in each default.
"""

from __future__ import annotations

from typing import Any

from sim.presets.types import EAGER_DEFAULT, Default, EnginePreset


def hardware_defaults(cfg: Any, memory_bytes: float, hardware_name: str) -> dict[str, Any]:
    """TensorRT-LLM's limits do not depend on the GPU: ``max_num_tokens`` 8192,
    ``max_batch_size`` 2048, ``free_gpu_memory_fraction`` 0.9 (the static defaults)."""
    return {"max_num_batched_tokens": 8192, "max_num_seqs": 2048, "gpu_memory_utilization": 0.9}


PRESET = EnginePreset(
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
        "eager_step_overhead_s": EAGER_DEFAULT,
        "overlap_scheduling": Default(True, "PyTorch backend overlap scheduler on by default "
                                            "(disable_overlap_scheduler=False, llmapi/llm_args.py; "
                                            "pyexecutor/py_executor.py::_executor_loop_overlap)"),
    },
    chunked_alias={True: "chunked", False: "mixed"},
    hardware_defaults=hardware_defaults,
    fitted={"cpu_step_overhead_s": 2e-3, "cpu_seq_overhead_s": 80e-6, "frontend_latency_s": 10e-3,
            "frontend_token_s": 60e-6},
    client_phase_spread=0.02,
    frontend_token_unit=Default("message", "stream_interval N (default 1): PyExecutor._handle_responses creates "
                                "a request's response only at py_decoding_iter 1, every N-th iteration and its "
                                "finish (tensorrt_llm/_torch/pyexecutor/py_executor.py; PR 5284); detokenization "
                                "and the OpenAI chunks are made per response (executor/result.py, "
                                "executor/postproc_worker.py; docs tech blog 8, 'Support Stream Interval')"),
    dp_token_padding=Default("sum", "attention DP: no padding across ranks; the MoE all-gathers / "
                                    "dispatches each rank's real token count (all_rank_num_tokens): "
                                    "compute_routed_output sets use_dp_padding = False ('max-throughput'; "
                                    "padding only on SM120), tensorrt_llm/_torch/models/modeling_deepseekv3.py "
                                    "and modeling_qwen3_moe.py, 1.1 on"),
    expert_layouts=Default("any", "moe_tensor_parallel_size x moe_expert_parallel_size = tp_size, any split "
                                  "(tensorrt_llm/mapping.py checks the product; llmapi/llm_args.py)"),
)
