"""KV cache: block pool, paged manager (PagedAttention + prefix caching) and
the contiguous-reservation baseline. Clock-free: tokens and blocks only."""

from __future__ import annotations

from sim.errors import ConfigError
from sim.kv_cache.block_pool import BlockPool
from sim.kv_cache.contiguous import RESERVE_MODES, ContiguousKVCacheManager
from sim.kv_cache.groups import KVCacheGroups, kv_cache_groups
from sim.kv_cache.hybrid import HybridKVCacheManager
from sim.kv_cache.manager import KVCacheManager

KV_ALLOCATIONS = ("paged", "contiguous")

__all__ = ["BlockPool", "KVCacheManager", "ContiguousKVCacheManager", "HybridKVCacheManager", "KVCacheGroups",
           "kv_cache_groups", "make_kv_cache_manager",
           "KV_ALLOCATIONS", "RESERVE_MODES"]


def make_kv_cache_manager(kv_allocation: str, num_gpu_blocks: int, block_size: int, *,
                          enable_prefix_caching: bool, max_model_len: int, watermark: float = 0.0,
                          contiguous_reserve: str = "max_model_len", kv_cache_groups: KVCacheGroups | None = None,
                          max_num_batched_tokens: int = 8192, block_ids: bool = False) -> KVCacheManager:
    """Build the manager selected by the ``kv_allocation`` config key;
    ``kv_cache_groups`` (paged only): vLLM's hybrid manager over them. A
    paged manager without prefix caching counts blocks only unless
    ``block_ids`` (the same results; ``KVCacheManager`` ``block_ids``)."""
    if kv_allocation == "paged" and kv_cache_groups is not None and kv_cache_groups.hybrid:
        return HybridKVCacheManager(num_gpu_blocks, block_size, kv_cache_groups,
                                    enable_prefix_caching=enable_prefix_caching, max_model_len=max_model_len,
                                    max_num_batched_tokens=max_num_batched_tokens, watermark=watermark)
    if kv_allocation == "paged":
        # without prefix caching no block can be shared: count blocks, keep no ids (manager.py)
        return KVCacheManager(num_gpu_blocks, block_size, enable_prefix_caching=enable_prefix_caching,
                              max_model_len=max_model_len, watermark=watermark,
                              block_ids=enable_prefix_caching or block_ids)
    if kv_allocation == "contiguous":
        return ContiguousKVCacheManager(num_gpu_blocks, block_size, enable_prefix_caching=enable_prefix_caching,
                                        max_model_len=max_model_len, watermark=watermark,
                                        reserve=contiguous_reserve)
    raise ConfigError(f"kv_allocation must be one of {', '.join(KV_ALLOCATIONS)}, got {kv_allocation!r}")
