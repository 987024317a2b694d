"""Paged KV cache of a hybrid model (full + sliding-window attention layers,
or full attention + linear-attention state):
vLLM v1's ``KVCacheManager`` over a ``HybridKVCacheCoordinator``.

Follows ``vllm/v1/core/kv_cache_manager.py::allocate_slots``,
``kv_cache_coordinator.py`` (``HybridKVCacheCoordinator``,
``KVCacheCoordinatorNoPrefixCache``) and
``single_type_kv_cache_manager.py`` (``FullAttentionManager``,
``SlidingWindowManager``); design notes:
docs.vllm.ai/en/latest/design/hybrid_kv_cache_manager/. The groups come
from :mod:`sim.kv_cache.groups`.

- ONE :class:`BlockPool` (block 0 = the null block); each KV cache group
  keeps its own block table per request, all tables the same length
  (``ceil(slots / block_size)`` entries, the null block standing for freed ones).
- ``allocate_slots``: first each group drops the blocks it no longer needs,
  even if the allocation then fails (``remove_skipped_blocks`` with the
  request's computed tokens): a sliding-window group replaces by the null
  block, last first, every block wholly before ``num_computed_tokens -
  sliding_window + 1``; then the blocks to take are summed over the groups
  (plus every prefix hit still in the free queue, plus the watermark for a
  waiting request) and compared with the free blocks; on success each group,
  in group order, takes its new blocks from the pool.
- ``full_sequence_check`` (v0.24 ``scheduler_reserve_full_isl``): the
  blocks of the whole current sequence must fit too, a sliding-window group
  counting at most its admission cap ``ceil(min(sliding_window - 1 +
  max_num_batched_tokens, max_model_len) / block_size) + 1`` blocks
  (``get_num_blocks_to_allocate(..., apply_admission_cap=True)``,
  ``SlidingWindowSpec.max_admission_blocks_per_request``, the same bound as
  the pool's sizing; vllm-project/vllm@b8142294 ``kv_cache_manager.py``
  L348-L420). Here the skipped blocks are released before that check, vLLM
  releases them after it: the same for the requests it applies to (waiting
  ones, which hold no blocks).
- a linear-attention (Gated DeltaNet) group (``MambaManager``,
  ``mamba_cache_mode`` "none", block size ``max_model_len``): one state page
  per request from its first allocation to its end; refused with prefix
  caching (vLLM's "align" mode caches states at block boundaries: not modelled).
- ``free``: group after group, each table in reverse order (null blocks skipped).
- Prefix caching: block hashes are per group (vLLM ``BlockHashWithGroupId``).
  Lookup (``HybridKVCacheCoordinator.find_longest_cache_hit``, one full
  kind + one sliding kind): the full-attention groups hit left to right up
  to ``num_tokens - 1`` tokens; the sliding-window groups then search that
  prefix right to left for ``ceil((sliding_window - 1) / block_size)``
  contiguous cached blocks (the null block before them), else the cached run
  from block 0; the full hit is cut to the sliding one. A hit's blocks
  before the window are not taken (null blocks in the table).
  Every full block is hashed block by block (no own-run shortcut of
  :class:`~sim.kv_cache.manager.KVCacheManager`: the hits and free-queue
  order are vLLM's, at more Python cost).

Reference mode only: the accelerated stepping's bulk growth assumes one
table whose blocks are never freed before the request ends, which a sliding
window breaks; the runner picks reference stepping for this manager
(:attr:`supports_accelerated_stepping`). Clock-free, like the other managers.
Simplifications: no KV connector, no EAGLE, no cascade attention, no
speculative lookahead beyond ``num_lookahead_tokens`` slots.
"""

from __future__ import annotations

from sim.errors import ConfigError
from sim.kv_cache.block_pool import BlockPool
from sim.kv_cache.groups import FULL, LINEAR, SLIDING, KVCacheGroups
from sim.kv_cache.hashing import ensure_block_hashes
from sim.kv_cache.manager import PoolQueries, check_manager_args
from sim.kv_cache.prefix_stats import PrefixCacheStats
from sim.request import RequestStatus

_WAITING_STATES = (RequestStatus.WAITING, RequestStatus.PREEMPTED)
_NULL = 0


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _HybridState:
    """A request's block table per group (``_NULL`` for freed/skipped
    entries, always a prefix), leading null entries per group, and leading
    entries cached per group."""

    __slots__ = ("request", "tables", "num_null", "num_cached")

    def __init__(self, request, num_groups: int) -> None:
        self.request = request
        self.tables: list[list[int]] = [[] for _ in range(num_groups)]
        self.num_null = [0] * num_groups
        self.num_cached = [0] * num_groups


class HybridKVCacheManager(PoolQueries, PrefixCacheStats):
    """Paged KV cache over one :class:`BlockPool` shared by ``groups``
    (module docstring). The scheduler-facing interface of
    :class:`~sim.kv_cache.manager.KVCacheManager` for the reference stepping.

    Args:
        num_gpu_blocks: blocks including the null block 0 (>= 2).
        block_size: tokens per block, every group.
        groups: the model's ``kv_cache_groups`` (:func:`sim.kv_cache.groups.kv_cache_groups`).
        max_num_batched_tokens: the scheduler's token budget (a sliding-window
            group's admission cap).
    """

    grows_by_block = True
    #: a decode's allocate_slots is a no-op while ``num_computed_tokens < kv_capacity``:
    #: here kv_capacity is the next token count at which it changes anything
    #: (:meth:`_update_capacity`), so schedulers may skip the call below it
    decode_skips_allocation = True
    grows_decode_in_bulk = False
    #: declared: merged steps cannot represent per-group tables (sim/runner.py)
    supports_accelerated_stepping = False
    use_eagle = False

    def __init__(self, num_gpu_blocks: int, block_size: int, groups: KVCacheGroups, *,
                 enable_prefix_caching: bool = False, max_model_len: int, max_num_batched_tokens: int,
                 watermark: float = 0.0) -> None:
        check_manager_args(block_size, max_model_len, watermark)
        if not groups.hybrid:
            raise ConfigError(f"HybridKVCacheManager needs kv_cache_groups, got none ({groups.reason})")
        if enable_prefix_caching and groups.has_linear:
            raise ConfigError("enable_prefix_caching: prefix caching of linear-attention states "
                              "(vLLM mamba_cache_mode 'align') is not modelled")
        self.pool = BlockPool(num_gpu_blocks, enable_prefix_caching)
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.groups = groups.groups
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self.max_model_len = max_model_len
        self.max_num_batched_tokens = max_num_batched_tokens
        self.watermark = watermark
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        #: per group: the sliding window (None for full attention)
        self._windows = [g.sliding_window if g.kind == SLIDING else None for g in self.groups]
        #: per group: most blocks a request holds at once (the admission cap; None: unbounded)
        self._caps = [g.max_blocks_per_request(block_size, max_model_len, max_num_batched_tokens)
                      if g.kind != FULL else None for g in self.groups]
        #: per group: tokens per block (a linear-attention group's is max_model_len: one state
        #: page per request, vLLM MambaSpec in mamba_cache_mode "none")
        self._gbs = [max_model_len if g.kind == LINEAR else block_size for g in self.groups]
        self._full_ids = [i for i, g in enumerate(self.groups) if g.kind == FULL]
        self._sliding_ids = [i for i, g in enumerate(self.groups) if g.kind == SLIDING]
        #: the attention groups (tables of ceil(slots / block_size) entries); the first gives kv_capacity
        self._attn_ids = [i for i, g in enumerate(self.groups) if g.kind != LINEAR]
        self._a0 = self._attn_ids[0]
        if len({self._windows[i] for i in self._sliding_ids}) > 1:  # pragma: no cover - one window per model
            raise ConfigError("sliding-window groups with different windows are not modelled")
        self._states: dict[int, _HybridState] = {}
        self._reset_prefix_stats()

    # ---- per-group rules --------------------------------------------------------
    def _num_skipped_blocks(self, g: int, num_computed_tokens: int) -> int:
        """Whole blocks of group ``g`` before its window (``get_num_skipped_tokens // block_size``)."""
        w = self._windows[g]
        if w is None:
            return 0
        skipped = num_computed_tokens - w + 1
        return skipped // self.block_size if skipped > 0 else 0

    def _remove_skipped(self, st: _HybridState, num_computed_tokens: int) -> None:
        pool = self.pool
        for g in self._sliding_ids:
            table = st.tables[g]
            n = min(self._num_skipped_blocks(g, num_computed_tokens), len(table))
            start = st.num_null[g]
            if n > start:
                removed = table[n - 1:start - 1 if start else None:-1]  # last first
                table[start:n] = [_NULL] * (n - start)
                st.num_null[g] = n
                pool.free_blocks(removed)
        self._update_capacity(st)

    def _update_capacity(self, st: _HybridState) -> None:
        """``request.kv_capacity`` = the fewest computed tokens at which a
        decode's ``allocate_slots(request, 1)`` would change anything: the
        held slots (a new block), a sliding group's next block leaving the
        window (``sliding_window - 1 + (nulls + 1) x block_size``), and with
        prefix caching the next block to fill (``(cached + 1) x block_size - 1``).
        Below it the call is a no-op returning ``[]``, as vLLM's every-step call is."""
        bs = self.block_size
        cap = len(st.tables[self._a0]) * bs
        for g in self._sliding_ids:
            nxt = self._windows[g] - 1 + (st.num_null[g] + 1) * bs
            if nxt < cap:
                cap = nxt
        if self.enable_prefix_caching:
            nxt = (min(st.num_cached) + 1) * bs - 1
            if nxt < cap:
                cap = nxt
        st.request.kv_capacity = cap

    # ---- prefix cache -----------------------------------------------------------
    def _cached(self, h: int, gids: list[int]) -> list[int] | None:
        """The cached block of hash ``h`` in each group of ``gids``, or None
        unless every one has it (vLLM ``BlockPool.get_cached_block``)."""
        out = []
        for g in gids:
            b = self.pool.get_cached_block((h, g))
            if b is None:
                return None
            out.append(b)
        return out

    def get_computed_blocks(self, request, record_stats: bool = False):
        """Longest prefix hit over all groups (module docstring): (per-group
        hit blocks, hit tokens); ``([], 0)`` on a miss or with caching off."""
        if not self.enable_prefix_caching:
            return [], 0
        bs = self.block_size
        max_blocks = (request.num_tokens - 1) // bs
        hits: list[list[int]] = [[] for _ in self.groups]
        n = 0
        while n < max_blocks:  # full attention: left to right, to the first miss
            hashes = ensure_block_hashes(request, bs, n + 1)
            found = self._cached(hashes[n], self._full_ids)
            if found is None:
                break
            for g, b in zip(self._full_ids, found):
                hits[g].append(b)
            n += 1
        if self._sliding_ids and n:
            w = self._windows[self._sliding_ids[0]]
            need = _cdiv(w - 1, bs)
            hashes = ensure_block_hashes(request, bs, n)
            sw = [[_NULL] * n for _ in self._sliding_ids]
            run, end = 0, None
            for i in range(n - 1, -1, -1):  # right to left
                found = self._cached(hashes[i], self._sliding_ids)
                if found is None:
                    run = 0
                    continue
                for lst, b in zip(sw, found):
                    lst[i] = b
                run += 1
                if run >= need:
                    end = i + run
                    break
            n = end if end is not None else run  # else: the cached run from block 0
            for g, lst in zip(self._sliding_ids, sw):
                hits[g] = lst[:n]
            for g in self._full_ids:
                del hits[g][n:]
        num_hit = n * bs
        if record_stats:
            self.record_prefix_cache_stats(request, num_hit)
        return (hits if n else []), num_hit

    def _cache_full(self, st: _HybridState, num_tokens: int) -> None:
        """Hash each group's blocks full within ``num_tokens`` (vLLM ``cache_blocks``)."""
        bs = self.block_size
        num_full = num_tokens // bs
        hashes = None
        for g, table in enumerate(st.tables):
            start = st.num_cached[g]
            if num_full <= start:
                continue
            if hashes is None:
                hashes = ensure_block_hashes(st.request, bs, num_full)
            ids = [(b, (hashes[i], g)) for i, b in enumerate(table[start:num_full], start) if b != _NULL]
            if ids:
                self.pool.cache_full_blocks([b for b, _ in ids], [h for _, h in ids])
            st.num_cached[g] = num_full

    def reset_prefix_cache(self) -> bool:
        return self.pool.reset_prefix_cache()

    # ---- allocation -------------------------------------------------------------
    def allocate_slots(self, request, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed_blocks=None, num_lookahead_tokens: int = 0,
                       full_sequence_check: bool = False, has_scheduled_reqs: bool = True) -> list[int] | None:
        """As :meth:`KVCacheManager.allocate_slots`, over the groups (module
        docstring); returns the new block ids of all groups, or None with no
        side effects but the skipped blocks' release."""
        if num_new_tokens < 1:
            raise ValueError(f"num_new_tokens must be >= 1, got {num_new_tokens}")
        bs = self.block_size
        st = self._states.get(request.request_id)
        hits = new_computed_blocks or None
        if hits is not None and st is not None and any(st.tables):
            raise ValueError(f"request {request.request_id}: prefix hits for a request that already holds blocks")
        num_hit_blocks = len(hits[0]) if hits is not None else 0
        if num_new_computed_tokens != num_hit_blocks * bs:
            raise ValueError(f"num_new_computed_tokens={num_new_computed_tokens} does not match "
                             f"{num_hit_blocks} hit blocks of {bs}")
        computed = request.num_computed_tokens + num_new_computed_tokens
        slots = min(computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        if st is not None:
            self._remove_skipped(st, computed)
        required = [-(-slots // gbs) for gbs in self._gbs]
        pool = self.pool
        need = 0
        evictable = 0
        skipped = [self._num_skipped_blocks(g, computed) for g in range(len(self.groups))]
        for g in range(len(self.groups)):
            held = len(st.tables[g]) if st is not None else 0
            if hits is None:
                need += max(0, required[g] - held)
            else:  # a new request with prefix hits: the skipped ones are not taken
                need += max(0, required[g] - max(skipped[g], num_hit_blocks))
                kept = [b for b in hits[g][skipped[g]:] if b != _NULL]
                evictable += pool.num_free_among(kept)
        wm = self.watermark_blocks if (has_scheduled_reqs and request.status in _WAITING_STATES) else 0
        free = pool.num_free_blocks
        if full_sequence_check:
            full = _cdiv(min(request.num_tokens, self.max_model_len), bs)
            full_need = 0
            for g, cap in enumerate(self._caps):
                target = full if cap is None else min(full, cap)
                have = len(st.tables[g]) if st is not None else max(skipped[g], num_hit_blocks)
                full_need += max(0, target - have)
            if full_need + evictable + wm > free:
                return None
        if need + evictable + wm > free:
            return None
        # Commit.
        if st is None:
            st = self._states[request.request_id] = _HybridState(request, len(self.groups))
        if hits is not None:
            for g in range(len(self.groups)):
                k = min(skipped[g], num_hit_blocks)
                kept = hits[g][k:]
                pool.touch([b for b in kept if b != _NULL])
                st.tables[g] = [_NULL] * k + list(kept)
                st.num_null[g] = k  # a sliding hit's blocks after the skipped ones are its window: all real
                st.num_cached[g] = num_hit_blocks
        new: list[int] = []
        for g, table in enumerate(st.tables):
            n = required[g] - len(table)
            if n > 0:
                got = pool.get_new_blocks(n)
                table += got
                new += got
        if self.enable_prefix_caching:
            self._cache_full(st, min(computed + num_new_tokens, request.num_tokens))
        self._update_capacity(st)
        return new

    def free(self, request) -> None:
        """Release the request's tables, group after group, each last block
        first; forget it. No-op for a request holding nothing."""
        st = self._states.pop(request.request_id, None)
        if st is not None:
            request.kv_capacity = 0
            for table in st.tables:
                self.pool.free_blocks([b for b in reversed(table) if b != _NULL])

    # ---- queries ----------------------------------------------------------------
    def num_held_blocks(self, request) -> int:
        """Blocks the request holds, all groups (null entries not counted)."""
        st = self._states.get(request.request_id)
        return sum(len(t) - n for t, n in zip(st.tables, st.num_null)) if st is not None else 0

    def num_held_blocks_by_group(self, request) -> list[int]:
        st = self._states.get(request.request_id)
        if st is None:
            return [0] * len(self.groups)
        return [len(t) - n for t, n in zip(st.tables, st.num_null)]

    def block_table(self, request) -> list[list[int]]:
        """A copy of the request's table per group (0 = the null block)."""
        st = self._states.get(request.request_id)
        return [list(t) for t in st.tables] if st is not None else [[] for _ in self.groups]

    def _blocks_for(self, num_tokens: int) -> int:
        """Blocks a request holding ``num_tokens`` slots needs at most, all groups."""
        n = _cdiv(min(num_tokens, self.max_model_len), self.block_size)
        return sum(n if cap is None else min(n, cap) for cap in self._caps)

    def get_num_blocks_to_allocate(self, request, num_total_tokens: int) -> int:
        """Blocks beyond those held to hold ``num_total_tokens`` (sliding
        groups at most their cap); prefix hits are not counted."""
        return max(0, self._blocks_for(num_total_tokens) - self.num_held_blocks(request))

    def can_ever_fit(self, num_tokens: int) -> bool:
        return self._blocks_for(num_tokens) <= self.num_usable_blocks

    def never_fits(self, num_tokens: int) -> str:
        return (f"{num_tokens} tokens ({self._blocks_for(num_tokens)} blocks over {len(self.groups)} KV cache "
                f"groups) exceed the whole KV cache ({self.num_usable_blocks} blocks of {self.block_size})")

    def slots_free_in_last_block(self, request) -> int:
        st = self._states.get(request.request_id)
        held = len(st.tables[self._a0]) * self.block_size if st is not None else 0
        return max(0, held - request.num_computed_tokens)

    @property
    def reserved_unused_fraction(self) -> float:
        """(held slots − slots holding computed tokens) / held slots, over all
        groups: each group's table wastes its last block's empty slots."""
        held_blocks = self.num_usable_blocks - self.pool.num_free_blocks
        if held_blocks == 0:
            return 0.0
        bs = self.block_size
        waste = 0
        for st in self._states.values():
            w = len(st.tables[self._a0]) * bs - st.request.num_computed_tokens
            if w > 0:
                waste += w * len(self._attn_ids)
        return min(1.0, waste / (held_blocks * bs))

    def check_invariants(self) -> None:
        """O(N) test helper: pool invariants; every block's ref count equals
        the table entries holding it; null entries form a prefix."""
        self.pool.check_invariants()
        counts = [0] * self.pool.num_gpu_blocks
        for st in self._states.values():
            assert len({len(st.tables[g]) for g in self._attn_ids}) == 1, "attention tables of different lengths"
            assert all(len(st.tables[g]) <= 1 for g in range(len(self.groups)) if g not in self._attn_ids)
            for t, n in zip(st.tables, st.num_null):
                assert all(b == _NULL for b in t[:n]) and all(b != _NULL for b in t[n:]), "nulls not a prefix"
                for b in t[n:]:
                    counts[b] += 1
        assert counts[1:] == self.pool.ref_cnt[1:], "ref counts differ from table membership"
        assert self.num_usable_blocks == self.pool.num_free_blocks + sum(c > 0 for c in counts)
