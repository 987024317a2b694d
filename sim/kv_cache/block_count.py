"""A KV block pool kept as a count: for a cache where no block can be shared.

Without prefix caching no block carries a hash, so no request can ever hit
another's block (nor its own after a preemption): which block id a request
gets changes no simulated time, token, step or usage. Only how many blocks
are free matters. :class:`BlockCount` keeps that number and nothing per
block, so allocating or freeing ``n`` blocks is O(1) whatever the block size:
page size 1 (SGLang's token-granular pool: sgl-project/sglang
``python/sglang/srt/mem_cache/allocator.py`` ``TokenToKVPoolAllocator``, whose
``available_size()`` is the number of free slots) costs what page size 16
costs.

Same accounting as :class:`~sim.kv_cache.block_pool.BlockPool` with caching
off: ``num_gpu_blocks`` includes vLLM's null block 0, so ``N - 1`` blocks are
usable and ``usage = 1 - free / (N - 1)`` (the same float). Used by
:class:`~sim.kv_cache.manager.KVCacheManager` built with ``block_ids=False``
(what :func:`sim.kv_cache.make_kv_cache_manager` chooses for paged allocation
without prefix caching).
"""

from __future__ import annotations

from sim.errors import ConfigError


class FreeBlockAccounting:
    """What a pool of ``num_gpu_blocks`` KV blocks (block 0 is vLLM's null
    block) with ``num_free_blocks`` free reports, as vLLM's ``BlockPool``:
    shared by :class:`BlockCount` and :class:`~sim.kv_cache.block_pool.BlockPool`."""

    __slots__ = ()
    num_gpu_blocks: int
    num_free_blocks: int

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


class BlockCount(FreeBlockAccounting):
    """``num_gpu_blocks`` KV blocks (block 0 is the null block), counted only.

    Args:
        num_gpu_blocks: total blocks including the null block (>= 2).
    """

    __slots__ = ("num_gpu_blocks", "num_free_blocks")

    #: nothing is cached (the attributes :class:`BlockPool` has with caching off)
    enable_caching = False
    own_runs = None
    num_hashed_free_blocks = 0

    def __init__(self, num_gpu_blocks: int) -> None:
        if not isinstance(num_gpu_blocks, int) or isinstance(num_gpu_blocks, bool) or num_gpu_blocks < 2:
            raise ConfigError(
                f"num_gpu_blocks must be an int >= 2 (block 0 is vLLM's null block), got {num_gpu_blocks!r}")
        self.num_gpu_blocks = num_gpu_blocks
        self.num_free_blocks = num_gpu_blocks - 1

    def take(self, num_blocks: int) -> None:
        """Take ``num_blocks`` free blocks. ValueError if fewer are free."""
        if num_blocks > self.num_free_blocks or num_blocks < 0:
            raise ValueError(f"cannot get {num_blocks} free blocks, only {self.num_free_blocks} free")
        self.num_free_blocks -= num_blocks

    def release(self, num_blocks: int) -> None:
        """Return ``num_blocks`` held blocks. ValueError if that would free more
        blocks than are usable (a table freed twice)."""
        if num_blocks < 0 or self.num_free_blocks + num_blocks > self.num_gpu_blocks - 1:
            raise ValueError(f"{num_blocks} blocks freed, but only {self.num_gpu_blocks - 1 - self.num_free_blocks}"
                             " are held")
        self.num_free_blocks += num_blocks

    def reset_prefix_cache(self) -> bool:
        """Nothing is cached: True when no block is held (as ``BlockPool``)."""
        return self.num_free_blocks == self.num_gpu_blocks - 1

    def check_invariants(self) -> None:
        """0 <= free <= usable. Raises AssertionError."""
        assert 0 <= self.num_free_blocks <= self.num_gpu_blocks - 1, f"free count {self.num_free_blocks}"
