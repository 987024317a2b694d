"""The physical KV block pool: ref counts, LRU free queue, prefix hash map.

Mirrors vLLM v0.24 ``vllm/v1/core/block_pool.py`` (``BlockPool``) and
``vllm/v1/core/kv_cache_utils.py`` (``FreeKVCacheBlockQueue``), see
``ENGINE_SEMANTICS.md`` §2.2–§3:

- ``num_gpu_blocks`` blocks with ids ``0 .. N-1``. Block 0 is the *null block*
  (vLLM's placeholder): never allocated, never freed, so ``N - 1`` blocks are
  usable and ``usage = 1 - free / (N - 1)``.
- Every block with ref count 0 sits in the free queue, a doubly linked list
  kept in eviction order (head = evicted first), initially in block-id order.
  Allocation pops the head; a popped block that still carries a prefix hash is
  evicted from the hash map then (lazy eviction: a freed block stays findable
  until its slot is reused).
- ``free_blocks(ordered)`` takes blocks in eviction priority order (the
  manager passes a request's table reversed, so a chain's tail is evicted
  before its head). Blocks that reach ref 0 and carry a hash go to the *tail*
  (LRU); those without a hash go to the *head*, in the given order, so they
  are reused first (v0.24 ``prepend_n``). Later vLLM (PR #48017) appends
  everything when caching is off; that only changes which block ids are
  reused, never a simulated time, and is not modelled.
- A block with ref count > 0 is never in the free queue and never evicted.
- The hash map allows duplicates (``hash -> {block_id: None}`` in insertion
  order, first one wins on lookup), as vLLM's ``BlockHashToBlockMap``: two
  requests that fill the same content concurrently each keep their own block,
  so block tables stay append-only.

Block ids are plain ints; per-block state lives in flat lists (ref counts,
hashes, prev/next links), so every operation is O(blocks touched). Without
prefix caching no block ever carries a hash, so every free goes to the head
and every allocation pops the head: the queue is a stack, kept as a Python
list (head = its end) whose slice operations run in C — the same block ids in
the same order as the linked list, several times faster — and, as no block is
shared, no ref count is kept: a block is held iff it is off the stack.
Simplification: one KV-cache group (full attention); no KV events, no
sliding window, no hybrid models.
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.errors import ConfigError


class BlockPool:
    """Pool of ``num_gpu_blocks`` KV blocks (block 0 is the null block).

    Args:
        num_gpu_blocks: total blocks including the null block (>= 2).
        enable_prefix_caching: keep hashes of full blocks for reuse.
    """

    __slots__ = ("num_gpu_blocks", "enable_caching", "_ref", "block_hash",
                 "_prev", "_next", "_head", "_tail", "num_free_blocks", "_hash_to_blocks", "_stack")

    def __init__(self, num_gpu_blocks: int, enable_prefix_caching: bool = False) -> None:
        if not isinstance(num_gpu_blocks, int) or isinstance(num_gpu_blocks, bool) or num_gpu_blocks < 2:
            raise ConfigError(
                f"num_gpu_blocks must be an int >= 2 (block 0 is vLLM's null block), got {num_gpu_blocks!r}")
        n = num_gpu_blocks
        self.num_gpu_blocks = n
        self.enable_caching = bool(enable_prefix_caching)
        # Ref counts with caching on. Off, nothing is shared: a block is held iff it is
        # off the stack, so no count is kept (allocation and free stay C-level slices).
        self._ref: list[int] | None = [0] * n if self.enable_caching else None
        self.block_hash: list[int | None] = [None] * n
        # Doubly linked free list over block ids; n and n+1 are the head/tail
        # sentinels; -1 marks "not in the queue".
        self._head, self._tail = n, n + 1
        self._prev: list[int] = []
        self._next: list[int] = []
        if self.enable_caching:  # without caching the stack below replaces the linked list
            self._prev = [-1] * (n + 2)
            self._next = [-1] * (n + 2)
            order = [self._head, *range(1, n), self._tail]  # block 0 (null) never enters
            for a, b in zip(order, order[1:]):
                self._next[a] = b
                self._prev[b] = a
        self.num_free_blocks = n - 1
        self._hash_to_blocks: dict[int, dict[int, None]] = {}
        # Caching off: the free queue as a stack, head at the list's end.
        self._stack: list[int] | None = None if self.enable_caching else list(range(n - 1, 0, -1))

    @property
    def ref_cnt(self) -> list[int]:
        """Reference count per block id (``num_gpu_blocks`` ints). With caching
        off it is derived from the free stack, O(N): for tests and checks."""
        if self._ref is not None:
            return self._ref
        ref = [1] * self.num_gpu_blocks
        ref[0] = 0
        for b in self._stack:
            ref[b] -= 1  # a block on the stack twice (freed twice) shows as -1
        return ref

    # ---- free queue primitives (O(1) each) ---------------------------------
    def _unlink(self, b: int) -> None:
        p, q = self._prev[b], self._next[b]
        self._next[p] = q
        self._prev[q] = p
        self._prev[b] = self._next[b] = -1
        self.num_free_blocks -= 1

    def _append(self, b: int) -> None:
        last = self._prev[self._tail]
        self._next[last] = b
        self._prev[b] = last
        self._next[b] = self._tail
        self._prev[self._tail] = b
        self.num_free_blocks += 1

    def _prepend_n(self, blocks: list[int]) -> None:
        """Put ``blocks`` at the head, ``blocks[0]`` first."""
        if not blocks:
            return
        first = self._next[self._head]
        prev = self._head
        for b in blocks:
            self._prev[b] = prev
            self._next[prev] = b
            prev = b
        self._next[prev] = first
        self._prev[first] = prev
        self.num_free_blocks += len(blocks)

    def is_free(self, block_id: int) -> bool:
        """True when the block is in the free queue (ref count 0, not null)."""
        if self._stack is not None:
            return block_id in self._stack
        return self._prev[block_id] != -1

    def free_block_ids(self) -> list[int]:
        """The free queue from head (evicted first) to tail. O(free blocks)."""
        if self._stack is not None:
            return self._stack[::-1]
        out = []
        b = self._next[self._head]
        while b != self._tail:
            out.append(b)
            b = self._next[b]
        return out

    # ---- allocation ---------------------------------------------------------
    def get_new_blocks(self, num_blocks: int) -> list[int]:
        """Pop ``num_blocks`` from the head (ref count 1 each), evicting any
        prefix hash they carry. Raises ValueError if fewer are free."""
        if num_blocks > self.num_free_blocks:
            raise ValueError(f"cannot get {num_blocks} free blocks, only {self.num_free_blocks} free")
        stack = self._stack
        if stack is not None:
            if num_blocks == 1:  # a decode crossing into its next block: the common case
                self.num_free_blocks -= 1
                return [stack.pop()]
            out = stack[-num_blocks:][::-1] if num_blocks else []
            del stack[len(stack) - num_blocks:]
            self.num_free_blocks -= num_blocks
            return out
        out = []
        nxt, ref = self._next, self._ref
        for _ in range(num_blocks):
            b = nxt[self._head]
            self._unlink(b)
            if self.block_hash[b] is not None:
                self._evict(b)
            ref[b] = 1
            out.append(b)
        return out

    def _evict(self, b: int) -> None:
        h = self.block_hash[b]
        self.block_hash[b] = None
        blocks = self._hash_to_blocks.get(h)
        if blocks is not None:
            blocks.pop(b, None)
            if not blocks:
                del self._hash_to_blocks[h]

    def touch(self, block_ids: Iterable[int]) -> None:
        """Prefix hits: ref += 1, taking blocks with ref 0 out of the free queue.
        ValueError with caching off: nothing is cached, so nothing can be hit."""
        if self._stack is not None:
            raise ValueError("touch: prefix caching is off, no block can be shared")
        ref = self._ref
        for b in block_ids:
            if ref[b] == 0:
                self._unlink(b)
            ref[b] += 1

    def free_blocks(self, ordered_block_ids: Iterable[int]) -> None:
        """ref -= 1 for each block, given in eviction priority order (first is
        evicted first). Blocks reaching 0: hashed → tail, unhashed → head.
        ValueError for a block freed more often than allocated (caching off:
        detected when the frees exceed the blocks held; ``check_invariants``
        finds any duplicate)."""
        stack = self._stack
        if stack is not None:  # caching off: every freed block is unhashed and goes to the head
            blocks = list(ordered_block_ids)
            if self.num_free_blocks + len(blocks) > self.num_gpu_blocks - 1:
                raise ValueError(f"blocks {blocks[:8]} freed more often than allocated")
            blocks.reverse()  # blocks[0] ends at the head (the list's end)
            stack.extend(blocks)
            self.num_free_blocks += len(blocks)
            return
        ref, hashes = self._ref, self.block_hash
        freed = []
        for b in ordered_block_ids:
            r = ref[b] - 1
            if r < 0:
                raise ValueError(f"block {b} freed more often than allocated")
            ref[b] = r
            if r == 0:
                freed.append(b)
        unhashed = []
        for b in freed:
            if hashes[b] is None:
                unhashed.append(b)
            else:
                self._append(b)
        self._prepend_n(unhashed)

    # ---- prefix cache -------------------------------------------------------
    def get_cached_block(self, block_hash: int) -> int | None:
        """The first block cached under ``block_hash``, or None on a miss."""
        blocks = self._hash_to_blocks.get(block_hash)
        if not blocks:
            return None
        return next(iter(blocks))

    def cache_full_blocks(self, block_ids: list[int], hashes: list[int]) -> None:
        """Record ``hashes[i]`` as the hash of full block ``block_ids[i]``."""
        if not self.enable_caching:
            return
        for b, h in zip(block_ids, hashes):
            if self.block_hash[b] is not None:
                raise ValueError(f"block {b} is already cached")
            self.block_hash[b] = h
            self._hash_to_blocks.setdefault(h, {})[b] = None

    @property
    def num_cached_blocks(self) -> int:
        """Blocks currently findable in the prefix cache (held or free)."""
        return sum(len(v) for v in self._hash_to_blocks.values())

    def reset_prefix_cache(self) -> bool:
        """Drop every hash; only allowed when no block is held (vLLM returns
        False otherwise). Returns True on success."""
        if self.num_free_blocks != self.num_gpu_blocks - 1:
            return False
        self._hash_to_blocks.clear()
        self.block_hash = [None] * self.num_gpu_blocks
        return True

    # ---- accounting ---------------------------------------------------------
    @property
    def num_usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1

    def get_num_free_blocks(self) -> int:
        return self.num_free_blocks

    def get_usage(self) -> float:
        """1 - free / (N - 1), in [0, 1] (vLLM ``BlockPool.get_usage``)."""
        return 1.0 - self.num_free_blocks / (self.num_gpu_blocks - 1)

    def usage_at(self, num_free_blocks: int) -> float:
        """:meth:`get_usage` with ``num_free_blocks`` free (the same float)."""
        return 1.0 - num_free_blocks / (self.num_gpu_blocks - 1)

    def check_invariants(self) -> None:
        """O(N) consistency check for tests: the free queue holds exactly the
        non-null blocks with ref 0, once each; the hash map matches the blocks'
        hashes. Raises AssertionError."""
        free = self.free_block_ids()
        assert len(free) == len(set(free)) == self.num_free_blocks, "free queue count/duplicates"
        assert 0 not in free, "null block in free queue"
        free_set = set(free)
        ref = self.ref_cnt
        for b in range(1, self.num_gpu_blocks):
            assert (ref[b] == 0) == (b in free_set), f"block {b}: ref {ref[b]} vs free"
            assert ref[b] >= 0
        for h, blocks in self._hash_to_blocks.items():
            assert blocks, f"empty entry for hash {h}"
            for b in blocks:
                assert self.block_hash[b] == h, f"block {b} hash mismatch"
        assert self.num_cached_blocks == sum(h is not None for h in self.block_hash)
