"""KV cache groups of a hybrid model: vLLM v1's layout of layers of different
kinds (full attention, sliding-window attention, linear-attention state) in
ONE block pool.

Follows vLLM v1 (docs.vllm.ai/en/latest/design/hybrid_kv_cache_manager/;
``vllm/v1/core/kv_cache_utils.py::_get_kv_cache_groups_uniform_page_size``,
``get_num_blocks``, ``get_max_concurrency_for_kv_cache_config``;
``vllm/v1/kv_cache_interface.py::SlidingWindowSpec.max_memory_usage_bytes``):

- the attention layers are grouped by kind into ``kv_cache_groups`` of the
  same number of layers, ``group_size`` = the fewest layers of a kind (or the
  most, when max < 1.5 x min: gpt-oss-20b + a drafter, 12 + 13 layers, pads to
  13 + 13); a kind with ``n`` layers gives ``ceil(n / group_size)`` groups, the
  last one padded. gpt-oss-120b (18 sliding + 18 full): two groups of 18.
- every group draws its blocks from the same :class:`BlockPool`; one block
  id is a page of ``block_size`` tokens in each of ``group_size`` layers, so
  ``num_gpu_blocks = available // (page_size_bytes x group_size)`` with
  ``page_size_bytes = block_size x`` one layer's KV bytes per token (the same
  for every layer: vLLM requires a uniform page size; a model whose layer
  kinds differ in bytes per token is sized here as one group, declared by
  :func:`kv_cache_groups`' reason).
- a full-attention group holds ``ceil(tokens / block_size)`` blocks of a
  request; a sliding-window group frees the blocks wholly outside the window
  (``SlidingWindowManager``) and needs, per request at most,
  ``ceil(min(sliding_window - 1 + max_num_batched_tokens, max_model_len) /
  block_size) + 1`` blocks (``SlidingWindowSpec.max_memory_usage_bytes``).
- linear-attention (Gated DeltaNet) layers (``linear_state_pages=True``):
  each request holds ONE state page per linear group from the same pool
  (``MambaManager``, ``mamba_cache_mode`` "none": the group's block size is
  ``max_model_len``), and the attention ``block_size`` is raised so that an
  attention page holds a layer's state: ``16 x ceil(state_page / (16 x
  attention bytes per token per layer))`` tokens, the state page padded to the
  attention page (``vllm/model_executor/models/config.py``
  ``HybridAttentionMambaModelConfig.verify_and_update_config``: "Setting
  attention block size to N tokens to ensure that attention page size is >=
  mamba page size"). With prefix caching vLLM switches to ``mamba_cache_mode``
  "align" (states cached at block boundaries), not modelled: then the linear
  layers stay out of the groups and their state is reserved for
  ``max_num_seqs`` sequences beside the pool (``sim/kv_cache/sizing.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.model_spec import ModelSpec

FULL = "full_attention"
SLIDING = "sliding_attention"
LINEAR = "linear_attention"


@dataclass(frozen=True)
class KVCacheGroupSpec:
    """One vLLM ``KVCacheGroupSpec``: ``num_layers`` layers of one kind sharing
    a block table (``num_padding_layers`` of them padding, as vLLM pads the
    last group of a kind), each page ``page_size_bytes`` (one layer, one
    block, one rank)."""
    kind: str                        #: "full_attention", "sliding_attention" or "linear_attention"
    num_layers: int                  #: layers of the group, padding included (= group_size)
    num_padding_layers: int
    page_size_bytes: int             #: block_size x one layer's KV bytes per token
    sliding_window: int | None = None
    state_bytes: int = 0             #: linear_attention: one layer's state, padded to page_size_bytes

    def max_blocks_per_request(self, block_size: int, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Blocks one request of ``max_model_len`` tokens holds at most in this
        group (vLLM ``max_memory_usage_bytes`` / page size)."""
        if self.kind == SLIDING:
            return math.ceil(min(self.sliding_window - 1 + max_num_batched_tokens, max_model_len)
                             / block_size) + 1
        if self.kind == LINEAR:
            return 1  # one state page
        return math.ceil(max_model_len / block_size)

    def blocks_held(self, block_size: int, num_computed_tokens: int, num_tokens: int) -> int:
        """Blocks a running request with ``num_computed_tokens`` computed and
        slots for ``num_tokens`` holds in this group: ``ceil(num_tokens / bs)``
        less, for a sliding window, the whole blocks before the window
        (``num_computed_tokens - sliding_window + 1`` tokens skipped)."""
        if self.kind == LINEAR:
            return 1 if num_tokens else 0
        n = math.ceil(num_tokens / block_size)
        if self.kind == SLIDING:
            n -= max(0, num_computed_tokens - self.sliding_window + 1) // block_size
        return n


@dataclass(frozen=True)
class KVCacheGroups:
    """The model's ``kv_cache_groups`` (``groups``), or why it is sized as one
    pool of all layers (``reason``; ``groups`` is then empty)."""
    groups: tuple[KVCacheGroupSpec, ...] = ()
    reason: str | None = None
    block_size: int = 16              #: tokens per attention block (raised for linear-attention states)

    @property
    def has_linear(self) -> bool:
        return any(g.kind == LINEAR for g in self.groups)

    @property
    def hybrid(self) -> bool:
        return bool(self.groups)

    @property
    def group_size(self) -> int:
        return self.groups[0].num_layers

    @property
    def page_size_bytes(self) -> int:
        return self.groups[0].page_size_bytes

    @property
    def block_bytes(self) -> int:
        """Bytes of one block id: a page in each layer of a group."""
        return self.page_size_bytes * self.group_size

    def num_gpu_blocks(self, available_bytes: float) -> int:
        """Block ids that fit in ``available_bytes`` (vLLM ``get_num_blocks``:
        available // page_size // group_size)."""
        return int(available_bytes // self.page_size_bytes // self.group_size)

    def blocks_per_request(self, block_size: int, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Blocks one ``max_model_len`` request needs, summed over the groups
        (vLLM ``get_max_concurrency_for_kv_cache_config``'s denominator)."""
        return sum(g.max_blocks_per_request(block_size, max_model_len, max_num_batched_tokens)
                   for g in self.groups)


def attention_block_size(model: ModelSpec, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1,
                         block_size: int = 16) -> int:
    """``block_size``, or for a model with linear-attention layers the
    attention block size vLLM raises it to so an attention page holds one
    layer's state: ``16 x ceil(state_page / (16 x attention bytes per token
    per layer))`` when that is larger (module docstring)."""
    n_lin = model.layer_type_counts().get(LINEAR, 0)
    if not n_lin:
        return block_size
    per = model.kv_bytes_per_token_by_layer_type(kv_cache_dtype, tensor_parallel_size)
    attn = max(v for t, v in per.items() if t != LINEAR)
    state = model.state_bytes_per_sequence(tensor_parallel_size) // n_lin
    return max(block_size, 16 * -(-state // (16 * attn)))


def kv_cache_groups(model: ModelSpec, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1,
                    block_size: int = 16, linear_state_pages: bool = False) -> KVCacheGroups:
    """vLLM's grouping of ``model``'s layers (module docstring). No groups
    (one pool, every attention layer at full length, as before) when there
    is no sliding-window layer (nor, with ``linear_state_pages``, a
    linear-attention layer), or when the attention kinds' pages differ in
    size. ``block_size``: the attention block size (with linear-attention
    layers, :func:`attention_block_size`'s)."""
    counts = model.layer_type_counts()
    linear = linear_state_pages and bool(counts.get(LINEAR))
    if not counts.get(SLIDING) and not linear:
        return KVCacheGroups(reason="no sliding-window layers: one group", block_size=block_size)
    per = model.kv_bytes_per_token_by_layer_type(kv_cache_dtype, tensor_parallel_size)
    kept = (FULL, SLIDING, LINEAR) if linear else (FULL, SLIDING)
    order = dict.fromkeys(t for t in model.layer_type_list() if t in kept)  # first layer first
    kinds = {t: counts[t] for t in order}
    attn = {per[t] for t in kinds if t != LINEAR}
    if len(attn) != 1:
        return KVCacheGroups(reason="layer kinds differ in KV bytes per token (vLLM needs a uniform page size): "
                                    "one pool, sliding layers at full length", block_size=block_size)
    page = block_size * attn.pop()
    state = model.state_bytes_per_sequence(tensor_parallel_size) // counts[LINEAR] if linear else 0
    if state > page:
        raise ValueError(f"block_size {block_size}: an attention page of {page} B cannot hold a linear-attention "
                         f"state of {state} B (use attention_block_size)")
    lo, hi = min(kinds.values()), max(kinds.values())
    group_size = hi if hi < 1.5 * lo else lo
    groups = []
    for t, n in kinds.items():
        num_groups = math.ceil(n / group_size)
        pad = num_groups * group_size - n
        for i in range(num_groups):
            groups.append(KVCacheGroupSpec(t, group_size, pad if i == num_groups - 1 else 0, page,
                                           model.sliding_window if t == SLIDING else None,
                                           state if t == LINEAR else 0))
    return KVCacheGroups(tuple(groups), block_size=block_size)
