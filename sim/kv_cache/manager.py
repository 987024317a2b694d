"""Paged KV-cache manager (PagedAttention), as vLLM v0.24's ``KVCacheManager``.

Follows ``vllm/v1/core/kv_cache_manager.py`` and
``single_type_kv_cache_manager.py`` (ENGINE_SEMANTICS §2.2–§2.3): a request
holds an append-only block table; ``allocate_slots`` grows it or returns None
with no side effects; ``free`` releases it in reverse order; prefix-cache hits
come from ``get_computed_blocks`` at admission.

Clock-free: it counts tokens and blocks only. The scheduler owns
``request.num_computed_tokens`` and sets it *after* ``allocate_slots``.

Simplifications: one KV-cache group (every layer in one block table; a
model with sliding-window layers runs on :mod:`sim.kv_cache.hybrid` when
its engine is vLLM's), no KV connector / external tokens, no encoder
tokens; the v0.24
``reserved_blocks`` argument (async KV loads) is absent. Block hashes come
from content keys (``sim/kv_cache/hashing.py``), not token ids.

Hashing only what can be shared: a table's first ``num_shareable_blocks``
blocks (inside the request's content keys) are hashed and cached block by
block, as vLLM does; the blocks after them can only ever be hit by the same
request after a preemption, so they are cached without a hash, as the
request's own runs (``sim/kv_cache/own_runs.py``) — the same hits, evictions
and free-queue order as vLLM's, at no Python cost per block. Page size 1
(SGLang) then costs about what page size 16 costs.

Counting only where no block can be shared: built with ``block_ids=False``
(prefix caching off; what :func:`sim.kv_cache.make_kv_cache_manager` chooses
then), a request's table is its slot count (``kv_capacity``, a whole number of
blocks) and the pool a count of free blocks
(:class:`~sim.kv_cache.block_count.BlockCount`): no block can ever be hit, so
which block ids a request holds is unobservable, and every allocation, growth
and free is O(1) whatever the block size. Every count, usage, admission and
preemption is the block-id manager's (``tests/test_kv_count_equivalence.py``).
"""

from __future__ import annotations

from sim.errors import ConfigError
from sim.kv_cache.block_count import BlockCount
from sim.kv_cache.block_pool import BlockPool
from sim.kv_cache.hashing import ensure_block_hashes, num_shareable_blocks
from sim.kv_cache.prefix_stats import PrefixCacheStats
from sim.request import RequestStatus

_WAITING_STATES = (RequestStatus.WAITING, RequestStatus.PREEMPTED)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


_ALL = 1 << 62  # "every block": a request whose own blocks are hashed block by block
#: the entries of the list ``allocate_slots`` returns when no block ids are kept
#: (``block_ids=False``): its length is the number of blocks taken
NO_BLOCK_ID = -1


class _ReqState:
    """Per-request block table, its capacity in slots (len(blocks) × bs; the
    table itself stays empty when the manager keeps no block ids), how
    many of its leading blocks are cached, and how many of those carry a hash
    (``num_hashed_limit``: the shareable blocks; every cached block once the
    request's own blocks are hashed block by block)."""

    __slots__ = ("request", "blocks", "capacity", "num_cached", "num_hashed_limit")

    def __init__(self, request, num_hashed_limit: int = 0) -> None:
        self.request = request
        self.blocks: list[int] = []
        self.capacity = 0
        self.num_cached = 0
        self.num_hashed_limit = num_hashed_limit


def check_manager_args(block_size, max_model_len, watermark) -> None:
    """The arguments every KV manager takes, checked (ConfigError naming the value)."""
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
        raise ConfigError(f"block_size must be a positive int, got {block_size!r}")
    if not isinstance(max_model_len, int) or max_model_len < 1:
        raise ConfigError(f"max_model_len must be a positive int, got {max_model_len!r}")
    if not (0.0 <= watermark < 1.0):
        raise ConfigError(f"watermark must be in [0, 1), got {watermark!r}")


class PoolQueries:
    """The block-pool queries of a KV manager over ``self.pool`` (a
    :class:`BlockPool` or :class:`BlockCount`) with per-request states in
    ``self._states``: shared by :class:`KVCacheManager` and
    :class:`~sim.kv_cache.hybrid.HybridKVCacheManager`."""

    @property
    def usage(self) -> float:
        """Fraction of usable blocks not free, in [0, 1]; cached-but-free
        blocks count as free (vLLM ``kv_cache_usage``)."""
        return self.pool.get_usage()

    def usage_at(self, num_free_blocks: int) -> float:
        """:attr:`usage` if ``num_free_blocks`` were free (a merged run's earlier steps)."""
        return self.pool.usage_at(num_free_blocks)

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_usable_blocks(self) -> int:
        return self.pool.num_gpu_blocks - 1

    @property
    def num_requests(self) -> int:
        """Requests currently holding a block table."""
        return len(self._states)


class KVCacheManager(PoolQueries, PrefixCacheStats):
    """Paged KV cache over a :class:`BlockPool`.

    ``grows_by_block``: a table grows by the blocks its next tokens need (so a
    running request crossing a block boundary takes them directly); False for
    managers with other growth rules (the contiguous reservation).

    Keeps ``request.kv_capacity`` (slots held) up to date. Without prefix
    caching, ``allocate_slots(req, n)`` of a request with
    ``num_computed_tokens + n <= kv_capacity`` is a no-op returning ``[]``
    (:attr:`decode_skips_allocation`): schedulers may skip the call.

    Args:
        num_gpu_blocks: blocks including vLLM's null block 0 (>= 2).
        block_size: tokens per block (vLLM default 16).
        enable_prefix_caching: automatic prefix caching (APC).
        max_model_len: tokens; slot requests are capped here, as in vLLM.
        watermark: fraction of ``num_gpu_blocks`` kept free when admitting a
            WAITING/PREEMPTED request while others are scheduled (v0.24
            ``watermark_blocks = int(watermark * num_blocks)``), in [0, 1).
        use_eagle: drop the last hit block (vLLM does so for EAGLE drafters).
        block_ids: keep block ids (a block table per request over a
            :class:`BlockPool`); False (only without prefix caching): count
            blocks only (module docstring) — the same results, O(1) per
            allocation; ``allocate_slots`` then returns ``NO_BLOCK_ID``
            entries and :meth:`block_table` raises.
    """

    grows_by_block = True

    def __init__(self, num_gpu_blocks: int, block_size: int = 16, *, enable_prefix_caching: bool = False,
                 max_model_len: int, watermark: float = 0.0, use_eagle: bool = False,
                 block_ids: bool = True) -> None:
        check_manager_args(block_size, max_model_len, watermark)
        if not block_ids and enable_prefix_caching:
            raise ConfigError("block_ids=False (counting blocks only) needs enable_prefix_caching=False: "
                              "cached blocks can be shared, so their ids matter")
        #: block tables of ids over a BlockPool (else counts over a BlockCount)
        self._block_ids = bool(block_ids)
        self.pool = BlockPool(num_gpu_blocks, enable_prefix_caching) if block_ids else BlockCount(num_gpu_blocks)
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self.max_model_len = max_model_len
        self.watermark = watermark
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.use_eagle = use_eagle
        #: allocate_slots within the held capacity does nothing (no hashing)
        self.decode_skips_allocation = not self.enable_prefix_caching
        self._states: dict[int, _ReqState] = {}
        #: a request freed before it finished (preempted) left cached blocks of its own
        #: behind, which it may hit when it resumes (see :meth:`cached_free_blocks_are_dead`)
        self._resumable_blocks_freed = False
        self._reset_prefix_stats()

    # ---- prefix cache ---------------------------------------------------------
    def get_computed_blocks(self, request, record_stats: bool = False) -> tuple[list[int], int]:
        """Longest prefix-cache hit: (hit block ids, hit tokens).

        Walks the hash chain from block 0 and stops at the first miss, over at
        most ``floor((request.num_tokens - 1) / block_size)`` blocks: the last
        token is always recomputed for its logits, and hits end on block
        boundaries. ``([], 0)`` when caching is off. The pool is not touched
        (hashes are memoised on ``request.block_hashes``).

        Statistics: vLLM 0.24 records ``queries += num_tokens, hits += hit
        tokens`` once per *admission* ("record at admission so unscheduled
        lookups are not counted"), separately for resumed requests. The
        scheduler may look a request up on several steps before it fits, so
        counting happens only when ``record_stats=True`` (call with it on the
        lookup that admits), or via :meth:`record_prefix_cache_stats`.
        """
        if not self.enable_prefix_caching:
            return [], 0
        bs = self.block_size
        max_blocks = (request.num_tokens - 1) // bs
        limit = self._num_hashed_limit(request)
        n = min(max_blocks, limit)
        # the blocks' hashes at once (memoised; the same ones its prefill caches, a
        # hash per block either way)
        hashes = ensure_block_hashes(request, bs, n) if n > 0 else []
        get = self.pool.get_cached_block
        hits: list[int] = []
        for i in range(n):
            b = get(hashes[i])
            if b is None:
                break
            hits.append(b)
        else:
            if limit < max_blocks:  # every shareable block hit: the request's own blocks next
                hits += self._own_hits(request, limit, max_blocks)
        if self.use_eagle and hits:
            hits.pop()
        num_hit = len(hits) * bs
        if record_stats:
            self.record_prefix_cache_stats(request, num_hit)
        return hits, num_hit

    def _num_hashed_limit(self, request) -> int:
        """How many leading blocks of ``request`` are hashed: its shareable ones,
        or all once its own blocks are hashed block by block."""
        if self.pool.hashes_own_blocks(request.request_id):
            return _ALL
        return num_shareable_blocks(request, self.block_size)

    def _own_hits(self, request, start: int, stop: int) -> list[int]:
        """Cached blocks ``start, start + 1, ...`` (< ``stop``) only ``request``
        can hit: those it holds (a lookup of a request holding a table), then
        those in its runs."""
        st = self._states.get(request.request_id)
        held: list[int] = []
        if st is not None and st.num_cached > start:
            held = st.blocks[start:min(st.num_cached, stop)]
            start += len(held)
        return held + self.pool.own_runs.hits(request.request_id, start, stop)

    def reset_prefix_cache(self) -> bool:
        """Drop all cached hashes; False (and nothing done) if any block is held."""
        return self.pool.reset_prefix_cache()

    # ---- allocation -----------------------------------------------------------
    def allocate_slots(self, request, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed_blocks: list[int] | None = None, num_lookahead_tokens: int = 0,
                       full_sequence_check: bool = False, has_scheduled_reqs: bool = True) -> list[int] | None:
        """Make room for ``num_new_tokens`` more tokens; return the newly taken
        block ids (possibly ``[]`` — test the result with ``is None``), or
        None with no side effects when they do not fit.

        Slots = min(num_computed + num_new_computed + num_new + lookahead,
        max_model_len). Blocks to take = ceil(slots / bs) − held − hit blocks,
        plus every hit block now in the free queue (touching it removes it
        from the free pool). Fails if that + watermark exceeds free blocks.

        ``full_sequence_check`` (v0.24 ``scheduler_reserve_full_isl``): also
        fail unless the blocks for the request's whole current sequence
        (``min(num_tokens, max_model_len)``) plus the watermark fit; only this
        chunk is allocated. The watermark applies (as in v0.24) only to
        WAITING/PREEMPTED requests and only if ``has_scheduled_reqs`` (pass
        ``bool(running)``).

        On success: touch the hit blocks, pop new ones from the free-queue
        head, append both to the table, then hash the blocks that became full
        counting tokens only up to ``request.num_tokens`` (drafts are never
        cached).
        """
        st = self._states.get(request.request_id)
        # Fast path (every decode step): a held table, nothing to touch, no watermark.
        if st is not None and not new_computed_blocks and not full_sequence_check and num_new_tokens > 0 \
                and (not self.watermark_blocks or request.status not in _WAITING_STATES):
            end = request.num_computed_tokens + num_new_tokens
            slots = end + num_lookahead_tokens
            if slots > self.max_model_len:
                slots = self.max_model_len
            if slots <= st.capacity:
                if self.enable_prefix_caching and end // self.block_size > st.num_cached:
                    self._cache_full(st, min(end, request.num_tokens))
                return []
            if self.grows_by_block:
                # Crossing into new blocks: the slow path's arithmetic with no
                # hits and no watermark.
                bs = self.block_size
                pool = self.pool
                if not self._block_ids:  # counting: the same arithmetic on counts
                    num_new_blocks = -(-slots // bs) - st.capacity // bs
                    if num_new_blocks > pool.num_free_blocks:
                        return None
                    pool.num_free_blocks -= num_new_blocks
                    st.capacity = request.kv_capacity = st.capacity + num_new_blocks * bs
                    return [NO_BLOCK_ID] * num_new_blocks
                num_new_blocks = -(-slots // bs) - len(st.blocks)
                if num_new_blocks > pool.num_free_blocks:
                    return None
                new = pool.get_new_blocks(num_new_blocks)
                st.blocks += new
                st.capacity = request.kv_capacity = len(st.blocks) * bs
                if self.enable_prefix_caching:
                    self._cache_full(st, min(end, request.num_tokens))
                return new
        return self._allocate_slow(request, st, num_new_tokens, num_new_computed_tokens, new_computed_blocks,
                                   num_lookahead_tokens, full_sequence_check, has_scheduled_reqs)

    @property
    def grows_decode_in_bulk(self) -> bool:
        """:meth:`grow_for_decode` applies: caching off, no watermark, tables
        growing by whole blocks (a running request's growth is pure counting)."""
        return self.decode_skips_allocation and not self.watermark_blocks and self.grows_by_block

    def cached_free_blocks_are_dead(self) -> bool:
        """With prefix caching: can no free cached block ever be hit again? True
        when no free block carries a shareable hash and no request was freed
        before it finished (a preempted request hits its own cached blocks when
        it resumes; a finished one's own blocks can never be hit).

        Then *which* free blocks an allocation takes is unobservable: a block
        taken early or late evicts nothing anyone can see, and every block a
        request can still hit is appended later, behind the same number of free
        blocks either way. Growth can be applied in bulk (:meth:`grow_for_decode`,
        :meth:`allocate_prompt`, then :meth:`cache_computed`) in another order
        than the reference mode's step-by-step allocations, with the same hits,
        evictions that matter and counts. (Caching off: True.)"""
        return not self.enable_prefix_caching or (self.pool.num_hashed_free_blocks == 0
                                                  and not self._resumable_blocks_freed)

    def hashes_when_grown(self, request, num_slots: int) -> bool:
        """Would caching ``request``'s blocks full within ``num_slots`` tokens
        hash one (a shareable block, or any block of a request whose own blocks
        are hashed one by one)? Bulk growth defers caching to its end, which is
        exact only for blocks without a hash (no one else can hit them)."""
        if not self.enable_prefix_caching:
            return False
        st = self._states.get(request.request_id)
        if st is None:
            return num_slots // self.block_size > 0 and self._num_hashed_limit(request) > 0
        return min(num_slots // self.block_size, st.num_hashed_limit) > st.num_cached

    def may_share_blocks(self, request) -> bool:
        """Could another request hold some of ``request``'s blocks too (blocks
        carrying a prefix hash, which a hit shares)? Then freeing it returns
        fewer blocks than it holds, which a merged run's block arithmetic does
        not model. False without prefix caching and for a request whose cached
        blocks are all its own."""
        if not self.enable_prefix_caching:
            return False
        st = self._states.get(request.request_id)
        return st is not None and min(st.num_cached, st.num_hashed_limit) > 0

    def cache_computed(self, requests: list) -> None:
        """After bulk growth with prefix caching: cache each request's blocks
        full within its computed tokens, as its last ``allocate_slots`` would
        have (:meth:`hashes_when_grown` was False for them). No-op without caching."""
        if not self.enable_prefix_caching:
            return
        states = self._states
        for r in requests:
            st = states[r.request_id]
            n = r.num_computed_tokens
            self._cache_full(st, n if n < r.num_tokens else r.num_tokens)

    def grow_decode_block(self, request) -> bool:
        """``allocate_slots(request, 1) is not None`` for a running decode whose
        held slots are all computed (``num_computed_tokens == kv_capacity``):
        one more block from the free stack, or False (nothing changed) when
        none is free. Only when :attr:`grows_decode_in_bulk`."""
        pool = self.pool
        if not pool.num_free_blocks:
            return False
        st = self._states[request.request_id]
        if self._block_ids:
            st.blocks += pool.get_new_blocks(1)
        else:
            pool.num_free_blocks -= 1
        st.capacity = request.kv_capacity = st.capacity + self.block_size
        return True

    def grow_decode_blocks(self, requests: list) -> None:
        """:meth:`grow_decode_block` for each request in order, with one pool
        call (the same block ids); the caller has checked that that many blocks
        are free. Only when :attr:`grows_decode_in_bulk`."""
        bs, states = self.block_size, self._states
        if not self._block_ids:
            self.pool.take(len(requests))
            for r in requests:
                st = states[r.request_id]
                st.capacity = r.kv_capacity = st.capacity + bs
            return
        new = self.pool.get_new_blocks(len(requests))
        for r, b in zip(requests, new):
            st = states[r.request_id]
            st.blocks.append(b)
            st.capacity = r.kv_capacity = st.capacity + bs

    def allocate_prompt(self, request, num_tokens: int) -> bool:
        """Blocks for ``num_tokens`` slots of a request holding none, when
        :attr:`grows_decode_in_bulk` (no cache to look up, no watermark), or with
        prefix caching for a request that can hit nothing (no shareable blocks,
        never freed) when :meth:`cached_free_blocks_are_dead` (then
        :meth:`cache_computed`): from the free blocks, or False (nothing
        changed) when they do not fit. For a new request's prompt this is
        ``allocate_slots(request, num_prompt_tokens, full_sequence_check=True)
        is not None``; a decode span also gives its joining requests the slots
        they computed in it."""
        bs = self.block_size
        n = -(-min(num_tokens, self.max_model_len) // bs)
        pool = self.pool
        if n > pool.num_free_blocks or request.request_id in self._states:
            return False
        limit = self._num_hashed_limit(request) if self.enable_prefix_caching else 0
        st = self._states[request.request_id] = _ReqState(request, limit)
        if self._block_ids:
            st.blocks = pool.get_new_blocks(n)
        else:
            pool.take(n)
        st.capacity = request.kv_capacity = n * bs
        return True

    def grow_for_decode(self, requests: list, slots: list[int]) -> None:
        """Grow each running request's table to hold ``slots[i]`` tokens (capped
        at ``max_model_len``), as ``allocate_slots`` would one request after
        the other (the same block ids, in the same order), with one pool call.
        Only when :attr:`grows_decode_in_bulk`, or with prefix caching when
        :meth:`cached_free_blocks_are_dead` (then :meth:`cache_computed`
        afterwards); the caller has checked that the
        free blocks suffice (a merged decode run plans its blocks), else
        RuntimeError."""
        bs, mml, states = self.block_size, self.max_model_len, self._states
        if not self._block_ids:
            self._grow_counts(requests, slots)
            return
        sts, counts = [], []
        total = 0
        for r, s in zip(requests, slots):
            st = states[r.request_id]
            n = -(-(s if s < mml else mml) // bs) - len(st.blocks)
            if n > 0:
                sts.append(st)
                counts.append(n)
                total += n
        if total > self.pool.num_free_blocks:
            raise RuntimeError(f"decode growth needs {total} blocks, {self.pool.num_free_blocks} free")
        new = self.pool.get_new_blocks(total)
        pos = 0
        for st, n in zip(sts, counts):
            blocks = st.blocks
            blocks += new[pos:pos + n]
            pos += n
            st.capacity = st.request.kv_capacity = len(blocks) * bs

    def _grow_counts(self, requests: list, slots: list[int]) -> None:
        """:meth:`grow_for_decode` counting blocks only: each table's capacity
        becomes its blocks for ``slots[i]`` tokens (if more than it holds)."""
        bs, mml, states = self.block_size, self.max_model_len, self._states
        grown = []
        total = 0
        for r, s in zip(requests, slots):
            st = states[r.request_id]
            cap = -(-(s if s < mml else mml) // bs) * bs
            if cap > st.capacity:
                grown.append((st, cap))
                total += (cap - st.capacity) // bs
        pool = self.pool
        if total > pool.num_free_blocks:
            raise RuntimeError(f"decode growth needs {total} blocks, {pool.num_free_blocks} free")
        pool.take(total)
        for st, cap in grown:
            st.capacity = st.request.kv_capacity = cap

    def _allocate_slow(self, request, st, num_new_tokens, num_new_computed_tokens, new_computed_blocks,
                       num_lookahead_tokens, full_sequence_check, has_scheduled_reqs) -> list[int] | None:
        if num_new_tokens < 1:
            raise ValueError(f"num_new_tokens must be >= 1, got {num_new_tokens}")
        bs = self.block_size
        hits = new_computed_blocks or []
        held = (len(st.blocks) if self._block_ids else st.capacity // bs) if st is not None else 0
        if hits and held:
            raise ValueError(f"request {request.request_id}: prefix hits for a request that already holds blocks")
        if num_new_computed_tokens != len(hits) * bs:
            raise ValueError(f"num_new_computed_tokens={num_new_computed_tokens} does not match "
                             f"{len(hits)} hit blocks of {bs}")
        pool = self.pool
        limit = self._num_hashed_limit(request) if self.enable_prefix_caching else 0
        hashed_hits, own_hits = hits[:limit], hits[limit:]
        evictable = pool.num_free_among(hashed_hits) + len(own_hits) if hits else 0
        free = pool.num_free_blocks
        wm = self.watermark_blocks if (has_scheduled_reqs and request.status in _WAITING_STATES) else 0
        if full_sequence_check:
            full = min(request.num_tokens, self.max_model_len)
            if max(0, _cdiv(full, bs) - len(hits) - held) + evictable + wm > free:
                return None
        computed = request.num_computed_tokens + num_new_computed_tokens
        slots = min(computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        num_new_blocks = max(0, _cdiv(slots, bs) - len(hits) - held)
        if num_new_blocks + evictable + wm > free:
            return None
        # Commit.
        if st is None:
            st = self._states[request.request_id] = _ReqState(request, limit)
        if hits:
            pool.touch(hashed_hits)
            if own_hits:
                pool.touch_own_blocks(request.request_id, limit, own_hits)
            st.blocks.extend(hits)
            st.num_cached = len(hits)
        if not self._block_ids:  # (no hits: caching is off)
            pool.take(num_new_blocks)
            st.capacity = request.kv_capacity = (held + num_new_blocks) * bs
            return [NO_BLOCK_ID] * num_new_blocks
        new = pool.get_new_blocks(num_new_blocks) if num_new_blocks else []
        st.blocks.extend(new)
        st.capacity = request.kv_capacity = len(st.blocks) * bs
        if self.enable_prefix_caching:
            self._cache_full(st, min(computed + num_new_tokens, request.num_tokens))
        return new

    def _cache_full(self, st: _ReqState, num_tokens: int) -> None:
        """Cache the table's blocks that are full within ``num_tokens``: hash
        those below ``st.num_hashed_limit``; the request's own blocks after
        them are cached as they are (they become a run when freed)."""
        num_full = num_tokens // self.block_size
        start = st.num_cached
        if num_full <= start:
            return
        limit = st.num_hashed_limit
        if num_full > limit and self.pool.own_runs.covers(st.request.request_id, max(start, limit), num_full):
            self._hash_own_blocks(st)
            limit = _ALL
        if start < limit:
            stop = num_full if num_full < limit else limit
            hashes = ensure_block_hashes(st.request, self.block_size, stop)
            self.pool.cache_full_blocks(st.blocks[start:stop], hashes[start:stop])
        st.num_cached = num_full

    def _hash_own_blocks(self, st: _ReqState) -> None:
        """The request is about to cache a block index that one of its runs
        still holds (a second copy, as vLLM allows): from now on hash its own
        blocks one by one — the runs' blocks and the cached ones it holds."""
        req, bs, limit = st.request, self.block_size, st.num_hashed_limit
        self.pool.materialize_own_runs(req.request_id, lambda n: ensure_block_hashes(req, bs, n))
        if limit < st.num_cached:
            hashes = ensure_block_hashes(req, bs, st.num_cached)
            self.pool.cache_full_blocks(st.blocks[limit:st.num_cached], hashes[limit:st.num_cached])
        st.num_hashed_limit = _ALL

    def free(self, request) -> None:
        """Release the request's table in reverse order (chain tail evicted
        first) and forget it. No-op for a request holding nothing."""
        st = self._states.pop(request.request_id, None)
        if st is not None:
            request.kv_capacity = 0
            if not self._block_ids:
                self.pool.release(st.capacity // self.block_size)
                return
            n = st.num_cached
            if n and request.status != RequestStatus.FINISHED:
                self._resumable_blocks_freed = True
            self.pool.free_request_blocks(request.request_id, st.blocks, n,
                                          n if n < st.num_hashed_limit else st.num_hashed_limit)

    # ---- queries --------------------------------------------------------------
    def num_held_blocks(self, request) -> int:
        st = self._states.get(request.request_id)
        if st is None:
            return 0
        return len(st.blocks) if self._block_ids else st.capacity // self.block_size

    def block_table(self, request) -> list[int]:
        """A copy of the request's block table ([] if it holds none).
        ValueError when the manager counts blocks only (``block_ids=False``)."""
        if not self._block_ids:
            raise ValueError("block_table: this KV cache counts blocks only (block_ids=False, prefix caching off); "
                             "use num_held_blocks")
        st = self._states.get(request.request_id)
        return list(st.blocks) if st is not None else []

    def get_num_blocks_to_allocate(self, request, num_total_tokens: int) -> int:
        """Blocks beyond those held to hold ``min(num_total_tokens,
        max_model_len)`` tokens (TensorRT-LLM ``getRemainingBlocksToCompletion``
        style); prefix hits are not counted."""
        total = min(num_total_tokens, self.max_model_len)
        return max(0, _cdiv(total, self.block_size) - self.num_held_blocks(request))

    def can_ever_fit(self, num_tokens: int) -> bool:
        """ceil(num_tokens / block_size) <= usable blocks."""
        return -(-num_tokens // self.block_size) <= self.pool.num_gpu_blocks - 1  # (num_usable_blocks)

    def never_fits(self, num_tokens: int) -> str:
        """Why a request that must hold ``num_tokens`` at once can never fit
        (for its rejection; :meth:`can_ever_fit` is False)."""
        return (f"{num_tokens} tokens ({_cdiv(num_tokens, self.block_size)} blocks) exceed the whole KV "
                f"cache ({self.num_usable_blocks} blocks of {self.block_size})")

    def slots_free_in_last_block(self, request) -> int:
        """Tokens that still fit in the held blocks past ``num_computed_tokens``
        (decode steps that need no new block)."""
        return max(0, self.num_held_blocks(request) * self.block_size - request.num_computed_tokens)

    @property
    def reserved_unused_fraction(self) -> float:
        """(held slots − slots holding computed tokens) / held slots: for paged
        allocation the waste in partly filled last blocks. Held slots count
        distinct blocks (a shared prefix block once); a request's tokens are
        its ``num_computed_tokens``, so read this at step boundaries. 0.0 when
        nothing is held."""
        held_blocks = self.num_usable_blocks - self.pool.num_free_blocks
        if held_blocks == 0:
            return 0.0
        bs = self.block_size
        waste = 0
        for st in self._states.values():
            w = st.capacity - st.request.num_computed_tokens
            if w > 0:
                waste += w
        return min(1.0, waste / (held_blocks * bs))

    def check_invariants(self) -> None:
        """O(N) test helper: pool invariants, and every block's ref count
        equals the number of table entries holding it. Counting blocks only:
        each table's capacity is whole blocks and matches its request's
        ``kv_capacity``, and held + free blocks = usable blocks."""
        self.pool.check_invariants()
        if not self._block_ids:
            bs = self.block_size
            for st in self._states.values():
                assert st.capacity >= 0 and st.capacity % bs == 0, f"capacity {st.capacity} of a table"
                assert st.request.kv_capacity == st.capacity, "kv_capacity differs from the table's"
                assert not st.blocks, "block ids kept while counting"
            held = sum(st.capacity // bs for st in self._states.values())
            assert self.num_usable_blocks == self.pool.num_free_blocks + held, "blocks not conserved"
            return
        counts = [0] * self.pool.num_gpu_blocks
        for st in self._states.values():
            for b in st.blocks:
                counts[b] += 1
        assert counts[0] == 0, "null block in a table"
        assert counts[1:] == self.pool.ref_cnt[1:], "ref counts differ from table membership"
        assert self.num_usable_blocks == self.pool.num_free_blocks + sum(c > 0 for c in counts)
