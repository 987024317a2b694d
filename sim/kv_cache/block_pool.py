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

Block ids are plain ints; per-block state lives in flat lists, and the free
queue is a :class:`~sim.kv_cache.free_queue.FreeBlockQueue` (two Python lists
sliced in C, with vLLM's order), so allocating, freeing and evicting blocks
that carry no hash cost no Python work per block. A request's own cached
blocks (those only it can hit, see ``sim/kv_cache/own_runs.py``) carry no
hash either: the manager frees them as one run
(:meth:`BlockPool.free_request_blocks`) and eviction shrinks the run. Only
blocks in the hash map are visited one by one. Ref counts are kept for those
blocks alone: any other block is held by at most one request, and held iff
it is not in the free queue (:attr:`BlockPool.ref_cnt` derives the rest).

Without prefix caching no block ever carries a hash, so every free goes to
the head and every allocation pops the head: the queue is a stack, kept as a
Python list (head = its end) — the same block ids in the same order.
No KV events. Several KV cache groups share one pool through
:class:`~sim.kv_cache.hybrid.HybridKVCacheManager` (a block's hash then
carries its group, as vLLM's ``BlockHashWithGroupId``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sim.errors import ConfigError
from sim.kv_cache.block_count import FreeBlockAccounting
from sim.kv_cache.free_queue import FreeBlockQueue
from sim.kv_cache.own_runs import OwnRuns


class BlockPool(FreeBlockAccounting):
    """Pool of ``num_gpu_blocks`` KV blocks (block 0 is the null block).

    Args:
        num_gpu_blocks: total blocks including the null block (>= 2).
        enable_prefix_caching: keep hashes of full blocks for reuse.
    """

    __slots__ = ("num_gpu_blocks", "enable_caching", "_ref", "block_hash", "_pos", "_queue", "_num_hashed_free",
                 "num_free_blocks", "_hash_to_blocks", "_stack", "own_runs", "_per_block_owners")

    def __init__(self, num_gpu_blocks: int, enable_prefix_caching: bool = False) -> None:
        if not isinstance(num_gpu_blocks, int) or isinstance(num_gpu_blocks, bool) or num_gpu_blocks < 2:
            raise ConfigError(
                f"num_gpu_blocks must be an int >= 2 (block 0 is vLLM's null block), got {num_gpu_blocks!r}")
        n = num_gpu_blocks
        self.num_gpu_blocks = n
        self.enable_caching = bool(enable_prefix_caching)
        self.num_free_blocks = n - 1
        self.block_hash: list[int | None] = [None] * n
        # hash -> the block holding it, or a dict of the blocks holding it (insertion order) when
        # several do: vLLM ``BlockHashToBlockMap`` (vllm/v1/core/block_pool.py), whose union type
        # spares an inner dict per cached block (a block per token at page size 1)
        self._hash_to_blocks: dict[int, int | dict[int, None]] = {}
        self._per_block_owners: set[int] = set()
        if self.enable_caching:
            # Ref counts and queue positions, meaningful for blocks with a hash only.
            self._ref: list[int] | None = [0] * n
            self._pos: list[int] = [-1] * n
            self._queue: FreeBlockQueue | None = FreeBlockQueue(range(1, n))  # block 0 (null) never enters
            self._num_hashed_free = 0  # blocks with a hash in the free queue (to evict when popped)
            self.own_runs: OwnRuns | None = OwnRuns(self._queue)
            self._stack: list[int] | None = None
        else:
            # Caching off: nothing is shared, a block is held iff it is off the stack (head = its end).
            self._ref = None
            self._pos = []
            self._queue = None
            self._num_hashed_free = 0
            self.own_runs = None
            self._stack = list(range(n - 1, 0, -1))

    @property
    def num_hashed_free_blocks(self) -> int:
        """Free blocks carrying a prefix hash (shareable cached blocks another
        request may still hit; a request's own cached blocks are kept as runs)."""
        return self._num_hashed_free

    @property
    def ref_cnt(self) -> list[int]:
        """Reference count per block id (``num_gpu_blocks`` ints). Only blocks
        with a hash keep a count; any other block counts 1 when held (off the
        free queue) and 0 when free. O(N): for tests and checks."""
        free = self.free_block_ids()
        ref = [1] * self.num_gpu_blocks
        ref[0] = 0
        for b in free:
            ref[b] -= 1  # a block freed twice shows as -1
        if self._ref is not None:
            for b, h in enumerate(self.block_hash):
                if h is not None:
                    ref[b] = self._ref[b]
        return ref

    def is_free(self, block_id: int) -> bool:
        """True when the block is in the free queue (ref count 0, not null). O(N)."""
        if self._stack is not None:
            return block_id in self._stack
        return block_id != 0 and block_id in self._queue.block_ids()

    def free_block_ids(self) -> list[int]:
        """The free queue from head (evicted first) to tail. O(free blocks)."""
        if self._stack is not None:
            return self._stack[::-1]
        return self._queue.block_ids()

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
        if not num_blocks:
            return []
        out = self._queue.popleft_n(num_blocks)
        self.num_free_blocks -= num_blocks
        if self._num_hashed_free:
            self._evict(out)
        if self.own_runs.fifo:
            self.own_runs.prune()
        return out

    def _evict(self, popped: list[int]) -> None:
        """Drop the hashes of the blocks among ``popped`` (just taken from the
        free queue) that carry one."""
        bh, table = self.block_hash, self._hash_to_blocks
        n = 0
        for b in popped:
            h = bh[b]
            if h is None:
                continue
            bh[b] = None
            n += 1
            blocks = table.pop(h, None)  # (one lookup: the entry is put back when others hold h)
            if blocks is None or blocks.__class__ is int:
                if blocks is not None and blocks != b:
                    table[h] = blocks
            else:
                blocks.pop(b, None)
                if blocks:
                    table[h] = blocks
        self._num_hashed_free -= n

    def touch(self, block_ids: Iterable[int]) -> None:
        """Prefix hits on blocks with a hash: ref += 1, taking blocks with ref 0
        out of the free queue. ValueError with caching off: nothing is cached,
        so nothing can be hit."""
        if self._stack is not None:
            raise ValueError("touch: prefix caching is off, no block can be shared")
        ref, pos, queue = self._ref, self._pos, self._queue
        for b in block_ids:
            if ref[b] == 0:
                if self.block_hash[b] is None:
                    raise ValueError(f"touch: block {b} is free and carries no hash")
                queue.remove(pos[b])
                self.num_free_blocks -= 1
                self._num_hashed_free -= 1
            ref[b] += 1

    def touch_own_blocks(self, owner: int, start: int, block_ids: list[int]) -> None:
        """Prefix hits on ``owner``'s own cached blocks ``start, start + 1, ...``
        (``block_ids``, as its lookup found them): out of the free queue and
        its runs. ValueError if the runs no longer hold exactly these blocks."""
        taken = self.own_runs.hits(owner, start, start + len(block_ids), take=True)
        self.num_free_blocks -= len(taken)
        if taken != block_ids:
            raise ValueError(f"request {owner}: stale prefix hits {block_ids[:8]}, runs hold {taken[:8]}")

    def _release_hashed(self, blocks: Iterable[int]) -> None:
        """ref -= 1 of each block (each with a hash), in order; those reaching 0
        go to the tail in that order."""
        ref = self._ref
        zero = []
        for b in blocks:
            r = ref[b] - 1
            if r < 0:
                raise ValueError(f"block {b} freed more often than allocated")
            ref[b] = r
            if not r:
                zero.append(b)
        if zero:
            p = self._queue.append_n(zero)
            pos = self._pos
            for b in zero:
                pos[b] = p
                p += 1
            self.num_free_blocks += len(zero)
            self._num_hashed_free += len(zero)

    def free_blocks(self, ordered_block_ids: Iterable[int]) -> None:
        """ref -= 1 for each block, given in eviction priority order (first is
        evicted first). Blocks reaching 0: hashed → tail, unhashed → head.
        ValueError for a block with a hash freed more often than allocated
        (any other block: detected with caching off when the frees exceed
        the blocks held; ``check_invariants`` finds any duplicate)."""
        stack = self._stack
        if stack is not None:  # caching off: every freed block is unhashed and goes to the head
            blocks = list(ordered_block_ids)
            if self.num_free_blocks + len(blocks) > self.num_gpu_blocks - 1:
                raise ValueError(f"blocks {blocks[:8]} freed more often than allocated")
            blocks.reverse()  # blocks[0] ends at the head (the list's end)
            stack.extend(blocks)
            self.num_free_blocks += len(blocks)
            return
        hashes = self.block_hash
        unhashed, hashed = [], []
        for b in ordered_block_ids:
            (unhashed if hashes[b] is None else hashed).append(b)
        self._release_hashed(hashed)
        self._queue.prepend_n(unhashed)
        self.num_free_blocks += len(unhashed)

    def free_request_blocks(self, owner: int, blocks: list[int], num_cached: int, run_start: int) -> None:
        """Free a request's block table, as ``free_blocks(reversed(blocks))``:
        ``blocks[:run_start]`` carry hashes (ref counted, maybe shared),
        ``blocks[run_start:num_cached]`` are the request's own cached blocks
        (no hash; appended at the tail as one run of ``owner``, see
        ``own_runs.py``), ``blocks[num_cached:]`` are uncached (to the head,
        the table's last block first). With caching off every block is uncached."""
        if self._stack is not None:
            self.free_blocks(reversed(blocks))
            return
        n = len(blocks)
        if num_cached < n:  # uncached: v0.24 prepend_n, in reverse table order
            self._queue.prepend_n(blocks[:num_cached - 1 if num_cached else None:-1])
            self.num_free_blocks += n - num_cached
        if run_start < num_cached:
            self.own_runs.add(owner, blocks[num_cached - 1:run_start - 1 if run_start else None:-1],
                              num_cached - 1)
            self.num_free_blocks += num_cached - run_start
        if run_start:
            self._release_hashed(blocks[run_start - 1::-1])

    # ---- prefix cache -------------------------------------------------------
    def get_cached_block(self, block_hash: int) -> int | None:
        """The first block cached under ``block_hash``, or None on a miss."""
        blocks = self._hash_to_blocks.get(block_hash)
        if blocks is None or blocks.__class__ is int:
            return blocks
        return next(iter(blocks))

    def cache_full_blocks(self, block_ids: list[int], hashes: list[int]) -> None:
        """Record ``hashes[i]`` as the hash of full (held) block ``block_ids[i]``."""
        if not self.enable_caching:
            return
        ref, bh, table = self._ref, self.block_hash, self._hash_to_blocks
        for b, h in zip(block_ids, hashes):
            if bh[b] is not None:
                raise ValueError(f"block {b} is already cached")
            bh[b] = h
            ref[b] = 1  # held by the one request that filled it
            entry = table.setdefault(h, b)  # (one lookup where no other block holds h)
            if entry != b:
                if entry.__class__ is int:
                    table[h] = {entry: None, b: None}
                else:
                    entry[b] = None

    def hashes_own_blocks(self, owner: int) -> bool:
        """Whether ``owner``'s own cached blocks are hashed block by block
        (after :meth:`materialize_own_runs`) rather than kept as runs."""
        return owner in self._per_block_owners

    def materialize_own_runs(self, owner: int, hashes_upto: Callable[[int], list[int]]) -> None:
        """Give ``owner``'s runs their blocks' real hashes and hash its blocks
        one by one from now on: it is about to cache a block index a run still
        holds (``own_runs.py``). ``hashes_upto(n)``: the owner's first ``n``
        block hashes (at least)."""
        self._per_block_owners.add(owner)
        cached = self.own_runs.pop_owner(owner)
        if not cached:
            return
        hashes = hashes_upto(max(idx for _, idx in cached) + 1)
        queue, bh, ref, pos, table = self._queue, self.block_hash, self._ref, self._pos, self._hash_to_blocks
        for p, idx in cached:
            b, h = queue.block_at(p), hashes[idx]
            bh[b] = h
            ref[b] = 0
            pos[b] = p
            self._num_hashed_free += 1
            entry = table.get(h)
            if entry is None:
                table[h] = b
            elif entry.__class__ is int:
                table[h] = {entry: None, b: None}
            else:
                entry[b] = None

    def num_free_among(self, hashed_block_ids: list[int]) -> int:
        """How many of these blocks (with a hash) are in the free queue (ref 0):
        touching them takes them out of the free pool."""
        ref = self._ref
        return sum(1 for b in hashed_block_ids if ref[b] == 0)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks currently findable in the prefix cache: those with a hash
        (held or free) and the free blocks of the requests' own runs (a
        request's own blocks count once freed)."""
        n = sum(1 if v.__class__ is int else len(v) for v in self._hash_to_blocks.values())
        return n + (self.own_runs.num_cached_blocks() if self.own_runs is not None else 0)

    def reset_prefix_cache(self) -> bool:
        """Drop every hash; only allowed when no block is held (vLLM returns
        False otherwise). Returns True on success."""
        if self.num_free_blocks != self.num_gpu_blocks - 1:
            return False
        self._hash_to_blocks.clear()
        self.block_hash = [None] * self.num_gpu_blocks
        self._num_hashed_free = 0
        self._per_block_owners.clear()
        if self.own_runs is not None:
            self.own_runs.clear()
        return True

    # ---- accounting ---------------------------------------------------------
    def check_invariants(self) -> None:
        """O(N) consistency check for tests: the free queue holds exactly the
        non-null blocks with ref 0, once each; the hash map matches the blocks'
        hashes; a free block with a hash sits at its recorded position; runs
        hold no holes and no block with a hash. Raises AssertionError."""
        free = self.free_block_ids()
        assert len(free) == len(set(free)) == self.num_free_blocks, "free queue count/duplicates"
        assert 0 not in free, "null block in free queue"
        free_set = set(free)
        ref = self.ref_cnt
        for b in range(1, self.num_gpu_blocks):
            assert (ref[b] == 0) == (b in free_set), f"block {b}: ref {ref[b]} vs free"
            assert ref[b] >= 0
        for h, blocks in self._hash_to_blocks.items():
            if blocks.__class__ is int:
                blocks = (blocks,)
            assert blocks, f"empty entry for hash {h}"
            for b in blocks:
                assert self.block_hash[b] == h, f"block {b} hash mismatch"
        if self._queue is not None:
            hashed_free = [b for b in free if self.block_hash[b] is not None]
            assert len(hashed_free) == self._num_hashed_free, "count of free blocks with a hash"
            for b in hashed_free:
                assert self._queue.block_at(self._pos[b]) == b, f"block {b}: stale queue position"
            for owner, p, k in self.own_runs.positions():
                run = self._queue.blocks_at(p, k)
                assert 0 not in run, f"hole in a run of request {owner}"
                assert all(self.block_hash[b] is None for b in run), f"hashed block in a run of {owner}"
                assert owner not in self._per_block_owners, f"request {owner}: runs and per-block hashes"
        assert (sum(1 if v.__class__ is int else len(v) for v in self._hash_to_blocks.values())
                == sum(h is not None for h in self.block_hash))
