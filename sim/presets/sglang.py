"""SGLang (``python -m sglang.launch_server``): the preset ``engine: sglang``.

Versions: SGLang 0.5.x. Sources in each default; the GPU-memory heuristics are
``server_args.py::_handle_gpu_memory_settings`` and
``model_runner.py::init_memory_pool``.
"""

from __future__ import annotations

from typing import Any

from sim.presets.types import EAGER_DEFAULT, MiB, Default, EnginePreset


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


def hardware_defaults(cfg: Any, memory_bytes: float, hardware_name: str) -> dict[str, Any]:
    """``chunked_prefill_size`` and ``mem_fraction_static`` from the GPU's
    memory; ``max_running_requests`` is left to the KV pool
    (:func:`sglang_max_running_requests`)."""
    mnbt = cfg.max_num_batched_tokens or sglang_chunked_prefill_size(memory_bytes)
    return {"max_num_batched_tokens": mnbt, "max_num_seqs": None,
            "gpu_memory_utilization": sglang_mem_fraction_static(memory_bytes, cfg.tensor_parallel_size, mnbt)}


#: why SGLang's decode steps of MLA layers take TensorRT-LLM's module fit (``fitted_v1``
#: ``mla_engines.trtllm``) rather than vLLM's (``mla``): SGLang has no module table, and its decode kernels are
#: TensorRT-LLM's or match them. On Blackwell its DeepSeek recipes run
#: ``--attention-backend trtllm_mla`` (InferenceMAX ``dsr1_fp8_b200.sh`` / ``dsr1_fp4_b200.sh``),
#: TensorRT-LLM's decode kernel through FlashInfer (decode only; prefill falls back to
#: FlashInfer MLA: sgl-project/sglang ``docs/backend/attention_backend.md``); on Hopper its
#: default is FA3 (same page). Against the H100 kernel tables
#: (../shared/kernels/h100_sxm), SGLang 0.5.14's generation MLA kernel over TensorRT-LLM
#: 1.3's, bf16 KV, batch <= 64, context < 16k: median 0.99x (10-90 %: 0.85-1.13x, 784
#: shapes); its absorb BMMs (``mla_bmm``, <= 64 tokens): bf16 0.98x, fp8 1.08x. vLLM's
#: module fit carries 2 x 15.8 + 46.5 us a layer of fixed terms against TensorRT-LLM's
#: 2 x 3.8 + 14.0 (reports/calibration/README.md); SGLang replays decode as CUDA graphs like
#: TensorRT-LLM (``--cuda-graph-max-bs``). Not covered: SGLang on Hopper with an fp8 KV cache,
#: whose kernel is 1.6x TensorRT-LLM's (median, 1.25-5.8x) in the same tables. Prefill keeps
#: the default fit: SGLang's context MLA kernel (FlashInfer / FA3) runs at ~170 TFLOP/s on the
#: H100 table against TensorRT-LLM's 525-590 (``MlaAttention`` docstring).
SGLANG_MLA_SOURCE = ("TensorRT-LLM's MLA decode kernels (trtllm_mla on Blackwell) or kernels matching them "
                     "on the H100 tables (generation MLA 0.99x, absorb BMMs 0.98x, bf16 KV); "
                     "sim/presets/sglang.py SGLANG_MLA_SOURCE")

PRESET = EnginePreset(
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
        "eager_step_overhead_s": EAGER_DEFAULT,
        "overlap_scheduling": Default(True, "overlap scheduler on unless --disable-overlap-schedule "
                                            "(server_args.py)"),
    },
    chunked_alias={True: "prefill_first", False: "prefill_first_whole"},
    hardware_defaults=hardware_defaults,
    # In-sample fit on the dense table's 130 SGLang rows (benchmarks/validate_silicon.py, 2026-12-05,
    # with the aic harness's per-release schedule: reports/validation/sglang_mixed_chunk.md), the
    # frontend's two keys fitted as one value for every engine (sim.validate.crossval.SHARED_KEYS).
    # The earlier 80 ms frontend latency (grid edge) absorbed the 0.5.1.post1 rows' prefill stalls,
    # which the harness now simulates (SGLang's default schedule). The 60 us per streamed token is
    # what makes SGLang's TPOT at 512 clients flat across TP.
    fitted={"cpu_step_overhead_s": 2e-3, "cpu_seq_overhead_s": 40e-6, "frontend_latency_s": 10e-3,
            "frontend_token_s": 60e-6},
    client_phase_spread=0.0,
    frontend_token_unit=Default("message", "--stream-interval N (default 1): the scheduler puts a running "
                                "request in the batch it sends to the detokenizer only when len(output_ids) % N "
                                "== 1 (N > 1; every token for N = 1) or it finished (python/sglang/srt/managers/"
                                "scheduler_output_processor_mixin.py stream_output_generation); the detokenizer, "
                                "the tokenizer manager and the HTTP server see only those messages"),
    max_num_seqs_from_kv=sglang_max_running_requests,
    mla_decode_module=Default("trtllm", SGLANG_MLA_SOURCE),
    dp_token_padding=Default("sum_in_prefill", "--enable-dp-attention: DpPaddingMode.get_dp_padding_mode "
                                               "(python/sglang/srt/layers/dp_attention.py): SUM_LEN when "
                                               "the batch extends (prefill), else MAX_LEN if sum x 2 > "
                                               "max x dp_size, else SUM_LEN"),
    request_len_cap=Default("kv_pool", "managers/scheduler.py: max_req_len = min(context_len - 1, "
                                       "max_total_num_tokens - 1), max_req_input_len = max_req_len - 5; a longer "
                                       "prompt is aborted (validate_input_length) and max_new_tokens is cut to "
                                       "max_req_len - len(input) - 1 (handle_generate_request / "
                                       "init_req_max_new_tokens): SGLang starts with a pool smaller than one "
                                       "context_len sequence"),
    expert_layouts=Default("any", "--ep-size divides --tp-size; the experts' TP is tp_size / ep_size "
                                  "(moe_tp_size, python/sglang/srt/server_args.py, "
                                  "distributed/parallel_state.py)"),
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
