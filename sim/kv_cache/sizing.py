"""How many KV-cache blocks fit on a GPU (vLLM ``gpu_worker.py::determine_available_memory``
and ``kv_cache_utils.py::get_num_blocks``; ENGINE_SEMANTICS.md section 2.1).

    available  = memory_bytes x gpu_memory_utilization
                 - weight bytes per rank - activation/workspace estimate
    num_blocks = floor(available / block_bytes),
    block_bytes = block_size x kv_bytes_per_token (all layers, one rank)

That is ``kv_memory_rule="utilization"`` (vLLM). Two other engines' rules
(``sim/presets/``), with f = ``gpu_memory_utilization``:
  - ``free_fraction`` (TensorRT-LLM ``KvCacheConfig.free_gpu_memory_fraction``,
    default 0.9): available = f x (memory - weights - activation/workspace
    estimate), a fraction of the memory still free after loading the model
    and profiling a forward pass;
  - ``static_fraction`` (SGLang ``mem_fraction_static``): SGLang keeps
    (1 - f) of the memory that was free when its model runner started, after
    the CUDA context and torch distributed init (the non-torch memory below),
    out of what is free after loading the weights:
    available = free_after_load - free_at_start x (1 - f)
              = f x (memory - non-torch memory) - weights.
    SGLang 0.5.8 ``model_runner.py``: ``init_torch_distributed`` returns
    ``min_per_gpu_memory`` (free memory after ``initialize_model_parallel``),
    ``initialize`` passes it to ``init_memory_pool``, whose
    ``profile_max_num_token`` (``model_runner_kv_cache_mixin.py``) takes
    ``rest_memory = available_gpu_memory - total_gpu_memory x (1 -
    mem_fraction_static)`` with ``available_gpu_memory`` read after loading
    (the same form in SGLang 0.4-0.5.x; a public QwQ-32B startup log at TP 4
    on 4 x L4, 2025-03-08, mem_fraction_static 0.85, "Load weight begin.
    avail mem=21.63 GB", "Load weight end. ... avail mem=6.09 GB", gives
    (6.09 - 21.63 x 0.15) GiB / 65,536 B = 46,621 tokens against its
    "KV Cache is allocated. #tokens: 46611").
    The non-torch memory used before that snapshot costs only f of itself;
    activations live in the reserved (1 - f).

Layer kinds (``ModelSpec.kv_bytes_per_token_by_layer_type``): MLA layers hold
one latent per token (kv_lora_rank + qk_rope_head_dim elements, the same on every
TP rank); linear-attention (Gated DeltaNet) layers hold no per-token KV but a
constant state per sequence.

Sliding-window and linear-attention layers with ``hybrid_kv_cache=True`` (the
engine's manager is :class:`~sim.kv_cache.hybrid.HybridKVCacheManager`):
vLLM's hybrid KV cache manager
(docs.vllm.ai/en/latest/design/hybrid_kv_cache_manager/) puts the layers
in ``kv_cache_groups`` of ``group_size`` layers sharing one block pool
(:mod:`sim.kv_cache.groups`): ``num_gpu_blocks = available //
(page_size_bytes x group_size)`` (``kv_cache_utils.py::get_num_blocks``) and
a ``max_model_len`` request needs the sum over groups of its blocks, a
sliding group's bounded by its window, a linear group's one state page
(the attention block size raised so a page holds a state). Otherwise
(another engine's scheduler, ``kv_allocation: contiguous``,
``disable_hybrid_kv_cache_manager``, prefix caching with linear-attention
layers, or layer kinds whose pages differ) the attention layers share one
block table, sliding layers counted at full length, and the linear-attention
state is reserved up front for ``max_num_seqs`` sequences
(``state_bytes_reserved``): conservative, capacity understated, never
overstated; the ``servesim kv`` report says which and why.

Activation/workspace estimate (vLLM profiles a dummy forward pass of
``max_num_batched_tokens`` tokens and the sampler on ``max_num_seqs`` rows):
  - persistent: hidden states and residual, 2 x T x hidden x 2 B;
  - largest transient: max(q,k,v + attention output, gate_up + SiLU output) per rank,
    MoE: x num_experts_per_tok routed copies;
  - sampler: fp32 logits and probabilities, 2 x min(max_num_seqs, T) x vocab/tp x 4 B;
  - non-torch memory: what vLLM's profiler counts as memory used outside
    PyTorch's allocator *since its init-time snapshot* (``memory_profiling`` in
    vllm/utils; memory already used at the snapshot comes out of the
    1 - ``gpu_memory_utilization`` headroom instead). What the snapshot holds
    changed with the release (``memory_profile``, :func:`non_torch_bytes`):

    - ``before_cuda_context`` (vLLM 0.6.5-0.6.x, PR 10511's profiler, and the
      value used without an engine, and for SGLang / TensorRT-LLM, whose own
      non-torch memory is not modelled apart): the CUDA context, NCCL and the
      rest: 1.79 GiB at TP 1, 3.58 GiB at TP > 1 as logged for Llama-3-8B on
      H100 (github.com/vllm-project/vllm/pull/10511: activation peak 1.26 GiB);
    - ``after_cuda_context`` (0.7-0.10: PR 11809 / 12126 take the snapshot after
      the CUDA context is made, but before ``init_worker_distributed_environment``):
      what the profile run allocates outside PyTorch, 0.16 GiB (PR 12126's log,
      H100, TP 1), plus at TP > 1 the NCCL and custom all-reduce buffers made
      after the snapshot (PR 25359: they "show up as non-torch memory increase"),
      1.79 GiB (PR 10511's TP 2 less TP 1 figure; their growth with the TP size
      is not modelled);
    - ``after_nccl_init`` (0.11 on, vLLM's preset: PR 25359, merged 2025-09,
      moved ``init_worker_distributed_environment`` before the snapshot in
      ``vllm/v1/worker/gpu_worker.py::init_device``): the profile run's 0.16 GiB
      at every TP size.

    The CUDA-graph estimate vLLM 0.24 also subtracts (a few hundred MiB for
    small models) is not modelled separately.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.errors import ConfigError, InfeasibleError
from sim.hardware.profile import HardwareProfile
from sim.kv_cache.groups import LINEAR, KVCacheGroups, attention_block_size, kv_cache_groups
from sim.model_spec import ModelSpec

GiB = float(1 << 30)
NON_TORCH_BYTES_TP1 = 1.79 * GiB
NON_TORCH_BYTES_TP_GT1 = 3.58 * GiB
#: non-torch increase of vLLM's profile run once the CUDA context is in the snapshot (PR 12126 log)
NON_TORCH_PROFILE_RUN_BYTES = 0.16 * GiB
#: NCCL + custom all-reduce buffers at TP > 1 (PR 10511: 3.58 - 1.79 GiB at TP 2)
NCCL_BUFFER_BYTES = NON_TORCH_BYTES_TP_GT1 - NON_TORCH_BYTES_TP1
#: what vLLM's init-time memory snapshot already holds (module docstring)
MEMORY_PROFILES = ("before_cuda_context", "after_cuda_context", "after_nccl_init")
KV_MEMORY_RULES = ("utilization", "free_fraction", "static_fraction")
#: each rule's formula as ``servesim kv`` states it (f = ``gpu_memory_utilization``, the engine's own name for it)
KV_MEMORY_RULE_FORMULAS = {
    "utilization": "vLLM: KV = memory x f - weights - activation estimate - non-torch (f: gpu_memory_utilization)",
    "free_fraction": "TensorRT-LLM: KV = f x (memory - weights - activation estimate - non-torch) "
                     "(f: free_gpu_memory_fraction)",
    "static_fraction": "SGLang: KV = f x (memory - non-torch) - weights (f: mem_fraction_static)",
}


@dataclass(frozen=True)
class KVSizing:
    """Result of :func:`compute_kv_sizing`. Bytes are per TP rank."""
    num_gpu_blocks: int
    kv_bytes_per_token: int          #: one rank, all layers
    block_bytes: int                 #: one block, all layers, one rank
    weight_bytes_per_rank: float
    activation_bytes_estimate: float
    kv_cache_bytes: int              #: num_gpu_blocks x block_bytes
    max_model_len: int
    max_concurrency: float           #: blocks / ceil(max_model_len / block_size)
    block_size: int
    tensor_parallel_size: int
    memory_bytes: int
    gpu_memory_utilization: float
    #: one layer of each type present -> KV bytes per token on one rank
    kv_bytes_per_token_by_layer_type: dict[str, int] | None = None
    layer_type_counts: dict[str, int] | None = None
    state_bytes_per_sequence: int = 0     #: linear-attention state of one sequence, one rank
    state_bytes_reserved: float = 0.0     #: state_bytes_per_sequence x max_num_seqs
    sliding_window: int | None = None
    kv_layout: str = "gqa"                #: "gqa" (K and V per KV head) or "mla" (one latent)
    classic: bool = True                  #: every layer full GQA attention
    #: the model's vLLM kv_cache_groups (empty groups: one pool; see its reason)
    kv_cache_groups: KVCacheGroups = KVCacheGroups()
    #: the pool is sized and run as those groups (HybridKVCacheManager)
    hybrid: bool = False
    #: why a model with kv_cache_groups runs as one pool, sliding layers at full length
    hybrid_off_reason: str | None = None
    blocks_per_request: int = 0           #: blocks of one max_model_len request, all groups
    max_num_batched_tokens: int = 8192    #: (a sliding-window group's admission cap)
    #: what vLLM's init-time memory snapshot holds (None: ``before_cuda_context``, :func:`non_torch_bytes`)
    memory_profile: str | None = None
    #: the non-torch memory subtracted under it, per rank (part of ``activation_bytes_estimate``)
    non_torch_bytes: float = 0.0
    #: SGLang's cap on one request's tokens where the pool cannot hold a max_model_len
    #: sequence (``request_len_cap`` ``kv_pool``: pool tokens - 1); None: not capped
    max_req_len: int | None = None
    #: ``max_total_tokens`` (the cap asked for; None: none) and the blocks memory gave before it
    max_total_tokens: int | None = None
    memory_gpu_blocks: int | None = None

    @property
    def longest_request(self) -> int:
        """The most tokens one request may hold: ``max_req_len`` where the engine caps
        it, else ``max_model_len``; a longer one is refused."""
        return self.max_req_len if self.max_req_len is not None else self.max_model_len


def non_torch_bytes(tensor_parallel_size: int = 1, memory_profile: str | None = None) -> float:
    """Non-torch memory the KV rule subtracts, per rank, under ``memory_profile``
    (one of :data:`MEMORY_PROFILES`; None = ``before_cuda_context``; module docstring)."""
    tp = tensor_parallel_size
    if memory_profile is None or memory_profile == "before_cuda_context":
        return NON_TORCH_BYTES_TP1 if tp == 1 else NON_TORCH_BYTES_TP_GT1
    if memory_profile == "after_cuda_context":
        return NON_TORCH_PROFILE_RUN_BYTES + (NCCL_BUFFER_BYTES if tp > 1 else 0.0)
    if memory_profile == "after_nccl_init":
        return NON_TORCH_PROFILE_RUN_BYTES
    raise ConfigError(f"memory_profile: invalid value {memory_profile!r}; must be one of {', '.join(MEMORY_PROFILES)}")


def activation_bytes_estimate(model: ModelSpec, *, tensor_parallel_size: int = 1,
                              max_num_batched_tokens: int = 8192, max_num_seqs: int = 1024,
                              memory_profile: str | None = None) -> float:
    """Peak activation + workspace bytes per rank (see module docstring)."""
    tp, T, h = tensor_parallel_size, max_num_batched_tokens, model.hidden_size
    if model.is_classic:
        q_r = model.num_attention_heads // tp * model.head_dim
        kv_r = model.kv_heads_per_rank(tp) * model.head_dim
        attn = q_r + 2 * kv_r + q_r
    else:  # the widest input projection's output and the attention output
        shapes = model.linear_shapes(tp)
        attn = (max(s.n for s in shapes if s.slot == "qkv_proj")
                + max(s.k for s in shapes if s.slot == "o_proj"))
    if model.is_moe:
        mlp = model.num_experts_per_tok * 3 * (model.moe_intermediate_size // tp)
    else:
        mlp = 3 * (model.intermediate_size // tp)
    if model.num_dense_mlp_layers and model.is_moe:
        mlp = max(mlp, 3 * (model.intermediate_size // tp))
    torch_bytes = 2.0 * T * (2 * h + max(attn, mlp))
    sampler = 2.0 * min(max_num_seqs, T) * math.ceil(model.vocab_size / tp) * 4.0
    return torch_bytes + sampler + non_torch_bytes(tp, memory_profile)


def _check(name: str, value, ok: bool, rule: str) -> None:
    if not ok:
        raise ConfigError(f"{name}: invalid value {value!r}; {rule}")


def compute_kv_sizing(model: ModelSpec, hw: HardwareProfile, *, tensor_parallel_size: int = 1,
                      gpu_memory_utilization: float = 0.92, block_size: int = 16,
                      kv_cache_dtype: str = "auto", quantization: str | None = None,
                      max_num_batched_tokens: int = 8192, max_model_len: int | None = None,
                      num_gpu_blocks_override: int | None = None,
                      max_num_seqs: int = 1024, kv_memory_rule: str = "utilization",
                      weight_bytes: float | None = None, hybrid_kv_cache: bool = False,
                      hybrid_off_reason: str | None = None, memory_profile: str | None = None,
                      request_len_cap: str = "refuse", max_total_tokens: int | None = None) -> KVSizing:
    """Number of KV blocks per rank (defaults: vLLM 0.24 serve on a large GPU).

    Raises InfeasibleError when the weights (plus the activation estimate) do
    not fit in memory x utilization, or when one ``max_model_len`` sequence
    needs more blocks than exist (vLLM ``check_enough_kv_cache_memory``) and
    ``request_len_cap`` is ``refuse``; with ``kv_pool`` (SGLang) the engine
    starts and caps each request at ``max_req_len`` = min(max_model_len - 1,
    pool tokens - 1) instead (``KVSizing.max_req_len``).
    ``hybrid_kv_cache``: size a model with sliding-window or linear-attention
    layers as vLLM's kv_cache_groups (module docstring; ``block_size`` then at
    least :func:`~sim.kv_cache.groups.attention_block_size`);
    ``hybrid_off_reason``: why not, when False (shown by ``servesim kv``).
    ``memory_profile``: what vLLM's init-time memory snapshot holds, which sets
    the non-torch memory subtracted (:func:`non_torch_bytes`).
    ``max_total_tokens``: a cap on the pool's tokens (SGLang
    ``--max-total-tokens``, TensorRT-LLM ``kv_cache_config.max_tokens``): the
    blocks memory gives, at most ``max_total_tokens // block_size`` (servesim's
    null block counted in, as SGLang's pool of ``max_total_num_tokens`` gives
    ``max_req_len`` = that - 1).
    """
    tp = tensor_parallel_size
    model.check_tensor_parallel_size(tp)
    _check("gpu_memory_utilization", gpu_memory_utilization,
           isinstance(gpu_memory_utilization, (int, float)) and 0 < gpu_memory_utilization <= 1,
           "must be in (0, 1]")
    _check("block_size", block_size, isinstance(block_size, int) and block_size >= 1, "must be an integer >= 1")
    _check("max_num_batched_tokens", max_num_batched_tokens,
           isinstance(max_num_batched_tokens, int) and max_num_batched_tokens >= 1, "must be an integer >= 1")
    _check("max_num_seqs", max_num_seqs, isinstance(max_num_seqs, int) and max_num_seqs >= 1,
           "must be an integer >= 1")
    if max_model_len is None:
        max_model_len = model.max_position_embeddings
    _check("max_model_len", max_model_len,
           isinstance(max_model_len, int) and 1 <= max_model_len <= model.max_position_embeddings,
           f"must be an integer in 1..{model.max_position_embeddings} (max_position_embeddings of {model.name})")
    if num_gpu_blocks_override is not None:
        _check("num_gpu_blocks_override", num_gpu_blocks_override,
               isinstance(num_gpu_blocks_override, int) and num_gpu_blocks_override >= 1,
               "must be an integer >= 1")
    if max_total_tokens is not None:
        _check("max_total_tokens", max_total_tokens, isinstance(max_total_tokens, int) and max_total_tokens >= 1,
               "must be an integer >= 1")
        if num_gpu_blocks_override is not None:
            raise ConfigError(f"max_total_tokens: {max_total_tokens} caps the KV pool that num_gpu_blocks_override "
                              f"{num_gpu_blocks_override} fixes; set one of them")

    kv_tok = model.kv_bytes_per_token(kv_cache_dtype, tp)
    if hybrid_kv_cache and block_size < attention_block_size(model, kv_cache_dtype, tp, block_size):
        raise ConfigError(f"block_size: invalid value {block_size!r}; an attention page must hold one "
                          f"linear-attention layer's state: vLLM raises it to "
                          f"{attention_block_size(model, kv_cache_dtype, tp, block_size)}")
    groups = kv_cache_groups(model, kv_cache_dtype, tp, block_size, linear_state_pages=bool(hybrid_kv_cache))
    hybrid = bool(hybrid_kv_cache) and groups.hybrid
    if max_total_tokens is not None and hybrid:
        raise ConfigError(f"max_total_tokens: {max_total_tokens} is modelled for one block table (SGLang's "
                          "and TensorRT-LLM's pools); this run sizes vLLM's hybrid KV cache groups, where "
                          "vLLM has no such cap")
    # one block id: a page in every layer (one pool), or in each layer of one group
    block_bytes = groups.block_bytes if hybrid else block_size * kv_tok
    if num_gpu_blocks_override is not None and num_gpu_blocks_override * block_bytes > hw.memory_bytes:
        # vLLM takes any override (a testing knob); here a pool larger than the
        # whole GPU is a typo, and would only exhaust this machine's memory.
        raise ConfigError(
            f"num_gpu_blocks_override: invalid value {num_gpu_blocks_override!r}; "
            f"{num_gpu_blocks_override} blocks of {block_bytes} bytes = "
            f"{num_gpu_blocks_override * block_bytes / GiB:,.1f} GiB of KV cache per rank, more than "
            f"{hw.name}'s {hw.memory_bytes / GiB:.1f} GiB")
    # ``weight_bytes``: per GPU when it is not the TP shard (expert parallelism:
    # sim/cost_model/parallel.py weight_bytes_per_gpu)
    weights = model.weight_bytes(quantization, tp) if weight_bytes is None else weight_bytes
    act = activation_bytes_estimate(model, tensor_parallel_size=tp,
                                    max_num_batched_tokens=max_num_batched_tokens,
                                    max_num_seqs=max_num_seqs, memory_profile=memory_profile)
    _check("kv_memory_rule", kv_memory_rule, kv_memory_rule in KV_MEMORY_RULES,
           f"must be one of {', '.join(KV_MEMORY_RULES)}")
    usable = hw.memory_bytes * gpu_memory_utilization
    if kv_memory_rule == "utilization":
        available = usable - weights - act
    elif kv_memory_rule == "free_fraction":
        usable = hw.memory_bytes - weights - act  # free after load and profiling
        available = gpu_memory_utilization * usable
    else:  # static_fraction: f of the memory free at SGLang's start (module docstring)
        act = non_torch_bytes(tp, memory_profile)
        usable = gpu_memory_utilization * (hw.memory_bytes - act)  # weights + KV pool
        available = usable - weights
    state_seq = model.state_bytes_per_sequence(tp)
    # linear-attention states as pages of the pool (hybrid), else reserved for max_num_seqs
    state = 0.0 if hybrid and groups.has_linear else float(state_seq * max_num_seqs)
    if state:
        if num_gpu_blocks_override is None and available >= block_bytes > available - state:
            raise InfeasibleError(
                f"{model.name} on {hw.name} at TP {tp}: the linear-attention state of max_num_seqs "
                f"{max_num_seqs:,} sequences ({state_seq / 2**20:,.1f} MiB each per rank, "
                f"{state / GiB:.2f} GiB) does not fit beside the weights: "
                f"{available / GiB:.2f} GiB are left for KV cache and state; lower max_num_seqs "
                f"or raise tensor_parallel_size")
        available -= state
    if num_gpu_blocks_override is None and available < block_bytes:
        if kv_memory_rule == "static_fraction":  # SGLang: f x (memory - non-torch) holds weights + KV
            raise InfeasibleError(
                f"{model.name} does not fit on {hw.name} at TP {tp}: weights {weights / GiB:.2f} GiB per rank "
                f"leave {available / GiB:.2f} GiB for the KV cache of the {usable / GiB:.2f} GiB kept for weights "
                f"and KV cache (kv_memory_rule static_fraction: mem_fraction_static (gpu_memory_utilization) "
                f"{gpu_memory_utilization} x (the GPU's {hw.memory_bytes / GiB:.2f} GiB - non-torch "
                f"{act / GiB:.2f} GiB))")
        raise InfeasibleError(
            f"{model.name} does not fit on {hw.name} at TP {tp}: weights {weights / GiB:.2f} GiB "
            f"+ activation/workspace estimate {act / GiB:.2f} GiB per rank (for max_num_batched_tokens "
            f"{max_num_batched_tokens:,} and max_num_seqs {max_num_seqs:,}) leave "
            f"{available / GiB:.2f} GiB for the KV cache (of the GPU's {hw.memory_bytes / GiB:.2f} GiB, "
            f"{usable / GiB:.2f} GiB usable under kv_memory_rule {kv_memory_rule} with "
            f"gpu_memory_utilization {gpu_memory_utilization})")
    num_blocks = (num_gpu_blocks_override if num_gpu_blocks_override is not None
                  else groups.num_gpu_blocks(available) if hybrid else int(available // block_bytes))
    memory_blocks = num_blocks
    if max_total_tokens is not None:  # the pool (servesim's null block included, as SGLang's
        num_blocks = min(num_blocks, max_total_tokens // block_size)  # max_total_num_tokens: max_req_len)
    blocks_per_seq = (groups.blocks_per_request(block_size, max_model_len, max_num_batched_tokens) if hybrid
                      else math.ceil(max_model_len / block_size))
    max_req_len = None
    if (blocks_per_seq > num_blocks - 1 and request_len_cap == "kv_pool" and not hybrid
            and (num_blocks - 1) * block_size - 1 > 5):
        # SGLang starts and caps each request at its pool: max_req_len = min(context_len - 1,
        # max_total_num_tokens - 1) (the preset's request_len_cap source)
        # (SGLang's max_total_num_tokens is the whole pool, here num_blocks x block_size with
        # servesim's null block; a request may not need more than the usable blocks)
        max_req_len = min(max_model_len - 1, num_blocks * block_size - 1, (num_blocks - 1) * block_size)
    if blocks_per_seq > num_blocks - 1 and max_req_len is None:  # block 0 is the pool's null block (vLLM BlockPool)
        raise InfeasibleError(
            f"one sequence of max_model_len {max_model_len} needs {blocks_per_seq} blocks "
            + (f"over {len(groups.groups)} KV cache groups " if hybrid else "")
            +
            f"({blocks_per_seq * block_bytes / GiB:.3g} GiB of KV cache per rank) but only "
            f"{num_blocks - 1} usable blocks ({num_blocks} less the null block; "
            f"{(num_blocks - 1) * block_bytes / GiB:.3g} GiB) fit on {hw.name} "
            f"at TP {tp}; lower max_model_len or "
            + (f"raise num_gpu_blocks_override ({num_gpu_blocks_override} is set)" if num_gpu_blocks_override
               is not None else f"raise max_total_tokens ({max_total_tokens} is set)"
               if max_total_tokens is not None and num_blocks < memory_blocks
               else "raise gpu_memory_utilization / tensor_parallel_size"))
    return KVSizing(num_blocks, kv_tok, block_bytes, weights, act, num_blocks * block_bytes,
                    max_model_len, num_blocks / blocks_per_seq, block_size, tp,
                    hw.memory_bytes, float(gpu_memory_utilization),
                    model.kv_bytes_per_token_by_layer_type(kv_cache_dtype, tp), model.layer_type_counts(),
                    state_seq, state, model.sliding_window, "mla" if model.is_mla else "gqa",
                    model.is_classic, groups, hybrid,
                    None if hybrid else (hybrid_off_reason or groups.reason or "hybrid KV cache manager off"),
                    blocks_per_seq, max_num_batched_tokens, memory_profile, non_torch_bytes(tp, memory_profile),
                    max_req_len, max_total_tokens, memory_blocks)


def _layer_type_rows(sizing: KVSizing) -> dict:
    """Per layer type (``servesim kv``): layers, KV bytes per token of one
    layer and of all of them; the linear-attention state per sequence; the
    sliding window. Absent for a model of full-attention layers only (whose
    ``kv_bytes_per_token`` says it all)."""
    per, counts = sizing.kv_bytes_per_token_by_layer_type or {}, sizing.layer_type_counts or {}
    if sizing.classic:
        return {}
    rows: dict = {"kv_layout": sizing.kv_layout}
    for t, n in counts.items():
        rows[f"{t}_layers"] = n
        rows[f"{t}_kv_bytes_per_token_per_layer"] = per.get(t, 0)
        rows[f"{t}_kv_bytes_per_token"] = per.get(t, 0) * n
    if sizing.sliding_window:
        rows["sliding_window"] = sizing.sliding_window
        if sizing.hybrid:
            rows["sliding_attention_counted_at"] = "its window (vLLM hybrid KV cache manager: kv_cache_groups)"
        else:
            why = sizing.hybrid_off_reason
            rows["sliding_attention_counted_at"] = f"full length (one block pool, conservative: {why})"
        # what a token past the window costs where sliding layers free their blocks (vLLM hybrid manager)
        rows["kv_bytes_per_token_beyond_window"] = sum(
            per.get(t, 0) * n for t, n in counts.items() if t != "sliding_attention")
    if sizing.state_bytes_per_sequence:
        rows["linear_attention_state_bytes_per_sequence"] = sizing.state_bytes_per_sequence
        if sizing.hybrid and sizing.kv_cache_groups.has_linear:
            rows["linear_attention_state_held_as"] = "one page per linear group per running request (block pool)"
        else:
            why = sizing.hybrid_off_reason
            rows["linear_attention_state_gib_reserved"] = sizing.state_bytes_reserved / GiB
            rows["linear_attention_state_reserved_for"] = f"max_num_seqs sequences ({why})"
    if sizing.hybrid:
        rows.update(_group_rows(sizing))
    return rows


def _group_rows(sizing: KVSizing) -> dict:
    """The kv_cache_groups (vLLM names): per group its kind, layers, page
    bytes and blocks held by one ``max_model_len`` request."""
    groups = sizing.kv_cache_groups
    bs, mml = sizing.block_size, sizing.max_model_len
    mnbt = sizing.max_num_batched_tokens
    rows: dict = {"kv_cache_groups": len(groups.groups), "layers_per_kv_cache_group": groups.group_size,
                  "page_size_bytes": groups.page_size_bytes}
    for i, g in enumerate(groups.groups):
        kind = g.kind if g.sliding_window is None else f"{g.kind} (window {g.sliding_window})"
        if g.kind == LINEAR:
            kind = f"{g.kind} (state {g.state_bytes:,} B per layer, padded to the page)"
        rows[f"kv_cache_group_{i}"] = kind
        rows[f"kv_cache_group_{i}_layers"] = (g.num_layers if not g.num_padding_layers
                                              else f"{g.num_layers} ({g.num_padding_layers} padding)")
        rows[f"kv_cache_group_{i}_blocks_at_max_model_len"] = g.max_blocks_per_request(bs, mml, mnbt)
    rows["blocks_per_request_at_max_model_len"] = sizing.blocks_per_request
    return rows


def kv_report(sizing: KVSizing, lengths: tuple[int, ...] = (1024, 4096, 32768),
              kv_allocation: str = "paged", contiguous_reserve: str = "max_model_len") -> dict:
    """The capacity arithmetic for ``servesim kv`` (GiB = 2**30 bytes): bytes
    per token, weight / activation / KV memory per rank, blocks, token capacity,
    and how many sequences of ``max_model_len`` and of each length fit
    (``sequences_of_<n>_tokens``, whole sequences, each rounded up to blocks).

    ``kv_allocation="contiguous"`` with ``contiguous_reserve="max_model_len"``
    (the pre-PagedAttention baseline of ``sim/kv_cache/contiguous.py``): every
    sequence, whatever its length, takes a ``max_model_len`` reservation; with
    ``"max_tokens"`` a sequence reserves its own length, as paged blocks."""
    for n in lengths:
        _check("lengths", n, isinstance(n, int) and n >= 1, "each length must be an integer >= 1")
    _check("kv_allocation", kv_allocation, kv_allocation in ("paged", "contiguous"), "must be paged or contiguous")
    bs = sizing.block_size
    report = {
        "kv_bytes_per_token": sizing.kv_bytes_per_token,
        **_layer_type_rows(sizing),
        "block_size": bs,
        "block_bytes": sizing.block_bytes,
        "tensor_parallel_size": sizing.tensor_parallel_size,
        "gpu_memory_gib": sizing.memory_bytes / GiB,
        "gpu_memory_utilization": sizing.gpu_memory_utilization,
        "weight_gib_per_rank": sizing.weight_bytes_per_rank / GiB,
        # the estimate's torch part (activations, sampler) and the non-torch memory under the
        # memory profile, each its own line (their sum is what the KV rule subtracts)
        "activation_gib_estimate": (sizing.activation_bytes_estimate - sizing.non_torch_bytes) / GiB,
        "memory_profile": sizing.memory_profile or "before_cuda_context (default)",
        "non_torch_gib": sizing.non_torch_bytes / GiB,
        "kv_cache_gib": sizing.kv_cache_bytes / GiB,
        # the cap and whether it sized the pool (SGLang logs when the cap is above what memory gives)
        **({"max_total_tokens": sizing.max_total_tokens,
            "kv_pool_sized_by": ("max_total_tokens" if sizing.num_gpu_blocks < sizing.memory_gpu_blocks
                                 else f"memory ({sizing.memory_gpu_blocks * bs:,} tokens fit; the cap is above)")}
           if sizing.max_total_tokens is not None else {}),
        "num_gpu_blocks": sizing.num_gpu_blocks,
        # hybrid: vLLM's "GPU KV cache size" (max concurrency x max_model_len), tokens of
        # max_model_len requests that fit; else blocks x block_size
        "kv_cache_tokens": (int(sizing.max_concurrency * sizing.max_model_len) if sizing.hybrid
                            else sizing.num_gpu_blocks * bs),
        "max_model_len": sizing.max_model_len,
        "max_concurrency_at_max_model_len": sizing.max_concurrency,
        # SGLang's cap where the pool cannot hold one max_model_len sequence (request_len_cap kv_pool)
        **({"max_req_len": sizing.max_req_len} if sizing.max_req_len is not None else {}),
        "sequences_at_max_model_len": sizing.num_gpu_blocks // _blocks_per_sequence(sizing, sizing.max_model_len),
    }
    report["kv_allocation"] = kv_allocation
    # a sequence longer than one request may be (max_model_len, or the engine's cap) is never served: 0
    longest = sizing.longest_request
    for n in lengths:  # flat keys, one per length: sequences_of_<n>_tokens
        whole = kv_allocation == "contiguous" and contiguous_reserve == "max_model_len"
        held = max(int(n), sizing.max_model_len) if whole else int(n)
        report[f"sequences_of_{int(n)}_tokens"] = (
            0 if n > longest else sizing.num_gpu_blocks // _blocks_per_sequence(sizing, held))
    return report


def _blocks_per_sequence(sizing: KVSizing, num_tokens: int) -> int:
    """Blocks one sequence of ``num_tokens`` holds at most: ceil(n / block_size),
    or with kv_cache_groups that per group, a sliding group's at most its cap."""
    n = math.ceil(num_tokens / sizing.block_size)
    if not sizing.hybrid:
        return n
    bs, mml, mnbt = sizing.block_size, sizing.max_model_len, sizing.max_num_batched_tokens
    return sum(min(n, g.max_blocks_per_request(bs, mml, mnbt)) for g in sizing.kv_cache_groups.groups)
