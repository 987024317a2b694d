"""Prefix-cache statistics of a KV-cache manager (a mixin of
:class:`sim.kv_cache.manager.KVCacheManager`): vLLM's ``PrefixCacheStats``,
first admissions counted apart from resumed (preempted) ones. Uses the
manager's ``enable_prefix_caching``."""

from __future__ import annotations


class PrefixCacheStats:
    """Lookup counters and the hit rate."""

    def _reset_prefix_stats(self) -> None:
        self.prefix_cache_requests = 0
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.preempted_prefix_cache_requests = 0
        self.preempted_prefix_cache_queries = 0
        self.preempted_prefix_cache_hits = 0

    def record_prefix_cache_stats(self, request, num_hits: int) -> None:
        """Count one admission's lookup (vLLM ``record_prefix_cache_stats``)."""
        self.record_prefix_lookup(request.num_tokens, num_hits, preempted=request.num_preemptions > 0)

    def record_prefix_lookup(self, num_tokens: int, num_hits: int, preempted: bool = False) -> None:
        """Count a lookup of ``num_tokens`` tokens with ``num_hits`` hit tokens;
        ``preempted`` lookups go to the ``preempted_*`` counters (vLLM
        ``PrefixCacheStats.record``). No-op when caching is off."""
        if not self.enable_prefix_caching:
            return
        if preempted:
            self.preempted_prefix_cache_requests += 1
            self.preempted_prefix_cache_queries += num_tokens
            self.preempted_prefix_cache_hits += num_hits
        else:
            self.prefix_cache_requests += 1
            self.prefix_cache_queries += num_tokens
            self.prefix_cache_hits += num_hits

    @property
    def prefix_cache_hit_rate(self) -> float:
        """hits / queries over first admissions, whole run (vLLM's logged rate
        uses the last 1000 requests); 0.0 before any query."""
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0
