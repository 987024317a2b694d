"""What an engine preset is (:class:`EnginePreset`) and the sources its
fitted values share. One module per engine (:mod:`sim.presets.vllm`,
:mod:`sim.presets.sglang`, :mod:`sim.presets.trtllm`) fills one in; the
registry is :mod:`sim.presets` itself.

This package holds data and pure functions only (it imports nothing from sim).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MiB = float(1 << 20)
GiB = float(1 << 30)

#: Config keys of the CPU/framework overhead model (``sim/cost_model/overheads.py``).
OVERHEAD_KEYS = ("cpu_step_overhead_s", "cpu_seq_overhead_s", "eager_step_overhead_s", "overlap_scheduling",
                 "frontend_latency_s", "frontend_token_s")

FIT_PROVENANCE = (
    "the in-sample fit of benchmarks/validate_silicon.py on every row of "
    "../shared/silicon/dense_agg_dev.csv (580 rows; coordinate search on sim.validate.crossval.GRID, "
    "the host overheads per engine, frontend_latency_s and frontend_token_s one value for every engine), "
    "2026-12-05; held-out scores (leave one model / GPU / campaign out, and the MoE table scored with "
    "these values) in reports/validation/README.md"
)
EAGER_SOURCE = ("0: knob for the host cost of steps without a CUDA graph (steps with prefill tokens); "
                "not fitted, its effect was not identifiable on the silicon rows")


@dataclass(frozen=True)
class Default:
    """A preset default: ``value`` and where it comes from."""
    value: Any
    source: str


#: every engine's ``eager_step_overhead_s`` (the fitted host overheads are ``EnginePreset.fitted``)
EAGER_DEFAULT = Default(0.0, EAGER_SOURCE)
#: :attr:`EnginePreset.dp_token_padding` values
DP_TOKEN_PADDINGS = ("max", "sum", "sum_in_prefill")
#: :attr:`EnginePreset.frontend_token_unit` values
FRONTEND_TOKEN_UNITS = ("message", "token")
#: :attr:`EnginePreset.expert_layouts` values
EXPERT_LAYOUTS = ("any", "tp_or_ep")
#: :attr:`EnginePreset.request_len_cap` values
REQUEST_LEN_CAPS = ("refuse", "kv_pool")


@dataclass(frozen=True)
class EnginePreset:
    """One serving engine's defaults and rules.

    ``defaults``: static values with their sources. ``fitted``: the values
    fitted on measured data (source :data:`FIT_PROVENANCE`), defaults too: per engine,
      cpu_step_overhead_s  host time per engine step (scheduling, input preparation,
                           graph launch, sampling bookkeeping), s;
      cpu_seq_overhead_s   host time per scheduled sequence per step, s;
      frontend_latency_s   send -> scheduler latency of a request (HTTP, tokenization,
                           hand-off to the engine process), s; counted in TTFT;
      frontend_token_s     the frontend's time to stream one output token (detokenize,
                           serialize, send), s; a FIFO that every step's tokens pass.
    ``frontend_token_unit``: what ``frontend_token_s`` is the time of, with its source:
    ``message`` (the frontend sees a request only in the messages the engine sends it:
    with ``stream_interval`` N it works 1/N of it per token; the values were fitted at N = 1,
    one message per token) or ``token`` (the frontend handles every token whatever the
    interval; ``stream_interval`` has no modelled effect).
    ``client_phase_spread``: the closed-loop clients' initial phase spread
    fitted for this engine (``sim/workload/client_phase.py``).
    ``chunked_alias``: ``enable_chunked_prefill`` (vLLM's alias) -> batching mode.
    ``resolved``: keys resolved once hardware and TP are known, key -> rule and
    source; ``hardware_defaults(cfg, memory_bytes, hardware_name)`` computes them
    (a dict of ``max_num_batched_tokens``, ``max_num_seqs`` (None: from the KV
    pool, ``max_num_seqs_from_kv(kv_tokens, max_model_len)``) and
    ``gpu_memory_utilization``) for the keys ``cfg`` leaves unset.
    ``mla_decode_module``: the engine whose MLA module fit (``fitted_v1`` ``mla_engines``)
    times this engine's decode-only steps of MLA layers, with its source (None: its own
    name, i.e. its own fit where the profile has one, else the default ``mla``); steps
    with a prefill chunk take the engine's own.
    ``dp_token_padding``: how the ranks of an attention data-parallel group size
    the routed experts' tokens in a step (:meth:`CostModel.dp_group_step_s`):
    ``max`` (every rank padded to the largest rank's count, the whole forward),
    ``sum`` (each rank's own tokens; the experts see the group's real total),
    ``sum_in_prefill`` (``sum`` in a step with prefill tokens; a decode-only step
    pads to the largest count when that moves less data, ``2 x sum > max x D``).
    ``expert_layouts``: how the engine can lay the routed experts over a DP
    group's G GPUs: ``any`` (``moe_ep_size`` x ``moe_tp_size`` = G, any split)
    or ``tp_or_ep`` (either tensor-sharded over all G, or whole experts over all
    G: ``moe_ep_size`` 1 or G).
    ``request_len_cap``: a KV pool smaller than one ``max_model_len`` sequence
    is refused at start-up (``refuse``), or the engine starts and caps each
    request at the pool (``kv_pool``: ``max_req_len`` = min(max_model_len - 1,
    pool tokens - 1); longer prompts are rejected, longer outputs stop there)."""
    name: str
    versions: str
    defaults: dict[str, Default]
    chunked_alias: dict[bool, str]
    hardware_defaults: Callable[[Any, float, str], dict[str, Any]]
    fitted: dict[str, Any] = field(default_factory=dict)
    client_phase_spread: float = 0.0
    resolved: dict[str, str] = field(default_factory=dict)
    max_num_seqs_from_kv: Callable[[int, int], int] | None = None
    mla_decode_module: Default | None = None
    dp_token_padding: Default = Default("max", "vLLM's rule (sim/presets/vllm.py)")
    frontend_token_unit: Default = Default("token", "the frontend handles every token")
    expert_layouts: Default = Default("any", "moe_ep_size x moe_tp_size = the group's GPUs, any split")
    request_len_cap: Default = Default("refuse", "a pool that cannot hold one max_model_len sequence is refused")
