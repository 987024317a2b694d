"""The ``disaggregation`` config key: prefill and decode on separate workers (xPyD).

Aggregated serving (prefill and decode on the same replicas) is the default;
setting ``disaggregation`` switches the run to ``num_prefill_workers`` prefill
engines and ``num_decode_workers`` decode engines behind one router::

    model: llama-3.1-70b
    hardware: h100_sxm
    tensor_parallel_size: 4          # both pools, unless overridden below
    disaggregation:
      num_prefill_workers: 1
      num_decode_workers: 2
      prefill: {max_num_batched_tokens: 16384}   # overrides for the prefill engines
      decode: {tensor_parallel_size: 8, max_num_seqs: 256}
      kv_connector: NixlConnector
      kv_transfer_link: auto         # nvlink | network | auto

``disaggregation: {}`` is an explicit choice of every default (1P1D, NIXL,
``kv_transfer_link: auto``); ``disaggregation: null`` (or a key with no value)
restores the key's default, aggregated serving, as ``null`` does for every
config key. The run's title line and ``summary.json`` (``config.disaggregation``)
state the pools either way.

Each pool's engine config is the run's top-level keys with the pool's
overrides on top (``prefill:`` / ``decode:``, engine-level keys only: the
model, workload, router and seed are the deployment's). The vocabulary is the
engines':

- vLLM: one ``vllm serve`` per worker with ``--kv-transfer-config
  '{"kv_connector":"NixlConnector","kv_role":"kv_producer"|"kv_consumer"|"kv_both"}'``
  (docs.vllm.ai/en/stable/features/nixl_connector_usage/; connectors NIXL,
  P2P-NCCL, LMCache, Mooncake: docs/features/disagg_prefill.md);
- SGLang: ``--disaggregation-mode prefill|decode`` and
  ``--disaggregation-transfer-backend mooncake|nixl``
  (docs.sglang.io/advanced_features/pd_disaggregation.html);
- NVIDIA Dynamo: prefill workers and decode workers behind the
  ``PrefillRouter``, which picks a prefill worker, then a decode worker; KV
  moves VRAM to VRAM with NIXL, non-blocking for the engines
  (docs.nvidia.com/dynamo/…/design-docs/disaggregated-serving,
  …/architecture-flow).

``kv_connector`` names the transfer library; it does not change the model
(the bandwidth and latency are the hardware's: ``interconnect`` inside an
NVLink domain, ``network`` per-GPU NICs between nodes; ``kv_transfer_*`` keys
override them). ``first_token_from``: ``decode`` (default) is how the engines'
own P/D front ends serve the client: vLLM's proxy (``tests/v1/kv_connector/
nixl_integration/toy_proxy_server.py``) discards the prefill response and
streams the decode instance, which recomputes the last prompt token and samples
the first token after the transfer, so TTFT includes the transfer and one
decode step; SGLang's router and Dynamo likewise stream every token from the
decode worker (docs.sglang.io advanced_features/pd_disaggregation;
docs.nvidia.com/dynamo backends/sglang/disaggregation: the request goes to both
workers, the client reads the decode one). ``prefill`` streams the first token
from the prefill worker (the request runs there with ``max_tokens = 1``), so
TTFT ends there -- a front end that forwards the prefill worker's token at
once (the issue's reading of TensorRT-LLM's disaggregated server); a lower
bound on what clients see. The simulation of a disaggregated run is in
:mod:`sim.engine.disagg`.

Each pool may run attention data parallelism and expert parallelism as an
aggregated deployment does (``data_parallel_size``, ``enable_expert_parallel``,
``moe_ep_size``, ``moe_tp_size`` under ``prefill:`` / ``decode:``; SGLang
``--dp-size --enable-dp-attention --ep-size`` per server, TensorRT-LLM
``enable_attention_dp`` / ``moe_expert_parallel_size`` per worker config):
a worker is then a DP group of ``data_parallel_size`` attention ranks of
``tensor_parallel_size`` GPUs each; ``dp_rank_routing`` picks the rank.
"""

from __future__ import annotations

import difflib

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from sim.schema import reject_bool_numbers

#: engine-level keys a pool may override (each pool is its own engine launch)
POOL_KEYS = (
    "hardware", "scheduler", "enable_chunked_prefill", "policy", "capacity_scheduler_policy", "max_num_seqs",
    "max_num_batched_tokens", "long_prefill_token_threshold", "max_prefill_tokens", "block_size",
    "gpu_memory_utilization", "kv_memory_rule", "num_gpu_blocks_override", "enable_prefix_caching",
    "kv_cache_dtype", "kv_allocation", "watermark", "dtype", "quantization", "attention_impl",
    "tensor_parallel_size", "cpu_step_overhead_s", "cpu_seq_overhead_s", "overlap_scheduling",
    "eager_step_overhead_s", "data_parallel_size", "enable_expert_parallel", "moe_ep_size", "moe_tp_size",
    "num_redundant_experts", "max_total_tokens",
)
#: batching modes a decode pool can run: those whose running pass takes a request
#: that joins with its prompt already computed (static batching forms whole batches)
DECODE_SCHEDULERS = ("chunked", "continuous", "mixed", "prefill_first", "prefill_first_whole",
                     "prefill_first_mixed")
#: vLLM KV connectors (``--kv-transfer-config kv_connector``) and SGLang transfer backends
KV_CONNECTORS = ("NixlConnector", "P2pNcclConnector", "LMCacheConnectorV1", "MooncakeConnector",
                 "mooncake", "nixl")


class DisaggregationConfig(BaseModel):
    """``disaggregation:`` — see the module docstring."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    num_prefill_workers: int = Field(default=1, ge=1, le=512)
    num_decode_workers: int = Field(default=1, ge=1, le=512)
    #: overrides of the top-level engine keys for each pool (keys: ``POOL_KEYS``)
    prefill: dict[str, Any] = Field(default_factory=dict)
    decode: dict[str, Any] = Field(default_factory=dict)
    kv_connector: Literal[KV_CONNECTORS] = "NixlConnector"  # type: ignore[valid-type]
    #: ``nvlink``: every pair of workers in one NVLink domain; ``network``: per-GPU NICs
    #: between nodes; ``auto``: NVLink when all the workers' GPUs fit one domain of one
    #: hardware type, else the network
    kv_transfer_link: Literal["auto", "nvlink", "network"] = "auto"
    #: per-GPU bandwidth (B/s, per direction) and one-way latency (s) of the link,
    #: overriding the hardware profile's
    kv_transfer_bandwidth_bytes_per_s: float | None = Field(default=None, gt=0.0, le=1e14)
    kv_transfer_latency_s: float | None = Field(default=None, ge=0.0, le=1.0)
    #: fixed host cost per transfer (connector metadata, notification), s
    kv_transfer_overhead_s: float = Field(default=0.0, ge=0.0, le=3600.0)
    #: the KV of layer l is sent while layer l+1 computes (LMCache / Mooncake layer-wise
    #: connectors, Splitwise): only the part the last prefill step cannot hide is exposed.
    #: Off: the transfer starts when the prefill ends (vLLM NIXL, SGLang, TensorRT-LLM)
    kv_transfer_layerwise: StrictBool = False
    #: where the client's first token comes from (see the module docstring)
    first_token_from: Literal["prefill", "decode"] = "decode"
    #: decode-worker choice; ``None`` = the top-level ``router`` (``prefix_aware``
    #: falls back to ``least_outstanding_requests``: decode workers hold no prompt cache)
    decode_router: Literal["round_robin", "least_outstanding_requests", "random"] | None = None
    #: the attention-DP rank inside a worker of a pool with ``data_parallel_size`` > 1;
    #: ``None`` = the engine's: SGLang ``follow_bootstrap_room``, TensorRT-LLM
    #: ``attention_dp_balance``, else vLLM's ``dp_load_balancer`` (sim/engine/disagg.py)
    dp_rank_routing: Literal["follow_bootstrap_room", "dp_load_balancer", "attention_dp_balance"] | None = None
    #: SGLang's ``--num-reserved-decode-tokens``: a decode server pre-allocates a
    #: request's prompt KV only while prompt + this fits in its free KV less this many
    #: tokens per request it already holds (``DecodePreallocQueue._allocatable_tokens``,
    #: sim/engine/disagg.py); ``None`` = the engine's (SGLang 512; other engines do not
    #: run this rule: vLLM's full-sequence / watermark check, TensorRT-LLM's no-evict);
    #: a value set on another engine replaces that engine's rule with this one
    num_reserved_decode_tokens: int | None = Field(default=None, ge=0, le=1_000_000)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        reject_bool_numbers(cls, data, "a number")
        return data

    @field_validator("prefill", "decode")
    @classmethod
    def _pool_keys(cls, v: dict) -> dict:
        for k in v:
            if k not in POOL_KEYS:
                if k in _DEPLOYMENT_KEYS:
                    raise ValueError(f"{k}: is the deployment's, set it at the top level; a pool overrides: "
                                     f"{', '.join(POOL_KEYS)}")
                close = difflib.get_close_matches(str(k), POOL_KEYS, n=3)
                hint = (f"did you mean {', '.join(close)}?" if close
                        else f"a pool overrides: {', '.join(POOL_KEYS)}")
                raise ValueError(f"{k}: is not an engine key a pool may override; {hint}")
        return v

    @property
    def num_workers(self) -> int:
        return self.num_prefill_workers + self.num_decode_workers


_DEPLOYMENT_KEYS = ("model", "engine", "router", "num_frontends", "num_replicas", "seed", "workload", "exact_steps",
                    "max_model_len", "frontend_latency_s", "frontend_token_s", "stream_interval",
                    "num_postprocess_workers", "client_think_time_s", "client_start_spread_s", "disaggregation")
