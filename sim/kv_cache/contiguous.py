"""Contiguous (pre-PagedAttention) KV allocation: the ``kv_allocation:
contiguous`` baseline.

Before PagedAttention (Kwon et al., SOSP '23, §3 "Memory Challenges in
Existing Systems"; FasterTransformer/Orca-style servers), a request's KV
cache was one contiguous buffer sized up front for the longest sequence it
might reach. Here an admitted request reserves, on its first allocation and
all-or-nothing, blocks for

- ``reserve='max_model_len'``: ``max_model_len`` tokens, or
- ``reserve='max_tokens'``: ``min(num_prompt_tokens + max_tokens +
  lookahead, max_model_len)`` tokens (a server that trusts the client's
  ``max_tokens``).

Later ``allocate_slots`` calls are served from that reservation.
``reserved_unused_fraction`` reports the internal fragmentation
(reserved slots not holding a token) that PagedAttention removes.

Simplifications: the reservation is counted in blocks of ``block_size`` from
the same pool, so only *internal* fragmentation and over-reservation are
modelled; *external* fragmentation (a free region too scattered for one
contiguous buffer) is not, which makes this baseline optimistic. If a request
ever needs more than its reservation (lookahead past ``max_tokens``), the
extra blocks are allocated all-or-nothing as in the paged manager. No prefix
caching.
"""

from __future__ import annotations

from sim.errors import ConfigError
from sim.kv_cache.manager import _WAITING_STATES, KVCacheManager, _cdiv, _ReqState

RESERVE_MODES = ("max_model_len", "max_tokens")


class ContiguousKVCacheManager(KVCacheManager):
    """Up-front reservation per request; same interface as
    :class:`~sim.kv_cache.manager.KVCacheManager`.

    Args: as ``KVCacheManager``, plus ``reserve`` in ``RESERVE_MODES``.
    ``enable_prefix_caching=True`` raises ConfigError.
    """

    grows_by_block = False  # past the reservation: the slow path's rules

    def __init__(self, num_gpu_blocks: int, block_size: int = 16, *, enable_prefix_caching: bool = False,
                 max_model_len: int, watermark: float = 0.0, reserve: str = "max_model_len") -> None:
        if enable_prefix_caching:
            raise ConfigError("enable_prefix_caching=true is not supported with kv_allocation=contiguous "
                              "(prefix caching needs paged blocks); set enable_prefix_caching: false")
        if reserve not in RESERVE_MODES:
            raise ConfigError(f"contiguous reserve must be one of {', '.join(RESERVE_MODES)}, got {reserve!r}")
        super().__init__(num_gpu_blocks, block_size, enable_prefix_caching=False,
                         max_model_len=max_model_len, watermark=watermark)
        self.reserve = reserve

    def reservation_tokens(self, num_prompt_tokens: int, max_tokens: int, num_lookahead_tokens: int = 0) -> int:
        """Tokens reserved at a request's first allocation."""
        if self.reserve == "max_model_len":
            return self.max_model_len
        return min(num_prompt_tokens + max_tokens + num_lookahead_tokens, self.max_model_len)

    def _allocate_slow(self, request, st, num_new_tokens, num_new_computed_tokens, new_computed_blocks,
                       num_lookahead_tokens, full_sequence_check, has_scheduled_reqs) -> list[int] | None:
        """Reached from ``allocate_slots`` when the fast path (room left in
        the reservation) does not apply. First call: reserve the whole buffer
        (all-or-nothing, plus the watermark for a waiting request); returns
        its blocks or None with no side effects. ``full_sequence_check`` adds
        nothing: the reservation already covers the whole sequence."""
        if num_new_tokens < 1:
            raise ValueError(f"num_new_tokens must be >= 1, got {num_new_tokens}")
        if new_computed_blocks or num_new_computed_tokens:
            raise ValueError("contiguous allocation has no prefix cache hits")
        bs = self.block_size
        slots = min(request.num_computed_tokens + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        held = len(st.blocks) if st is not None else 0
        if slots <= held * bs:
            return []
        if st is None:
            reserve = self.reservation_tokens(request.num_prompt_tokens, request.max_tokens, num_lookahead_tokens)
            need = _cdiv(max(slots, reserve, min(request.num_tokens, self.max_model_len)), bs)
        else:
            need = _cdiv(slots, bs) - held
        wm = self.watermark_blocks if (has_scheduled_reqs and request.status in _WAITING_STATES) else 0
        if need + wm > self.pool.num_free_blocks:
            return None
        if st is None:
            st = self._states[request.request_id] = _ReqState(request)
        new = self.pool.get_new_blocks(need)
        st.blocks.extend(new)
        st.capacity = request.kv_capacity = len(st.blocks) * bs
        return new

    def get_num_blocks_to_allocate(self, request, num_total_tokens: int) -> int:
        """Blocks beyond those held: the whole reservation for a request that
        holds none, else what ``num_total_tokens`` needs past it."""
        total = min(num_total_tokens, self.max_model_len)
        held = self.num_held_blocks(request)
        if held == 0:
            total = max(total, self.reservation_tokens(request.num_prompt_tokens, request.max_tokens))
        return max(0, _cdiv(total, self.block_size) - held)

    def can_ever_fit(self, num_tokens: int) -> bool:
        """Whether a request whose prompt + ``max_tokens`` is ``num_tokens``
        can ever get its reservation (``max_model_len`` mode: every request
        reserves ``max_model_len``)."""
        tokens = max(num_tokens, self.max_model_len) if self.reserve == "max_model_len" else num_tokens
        return _cdiv(tokens, self.block_size) <= self.num_usable_blocks

    @property
    def reserved_unused_fraction(self) -> float:
        """(reserved slots − slots holding computed tokens) / reserved slots
        over the requests holding a reservation; 0.0 when none. Read at step
        boundaries (tokens = ``num_computed_tokens``)."""
        reserved, used = self._reserved_and_used()
        return (reserved - used) / reserved if reserved else 0.0

    def _reserved_and_used(self) -> tuple[int, int]:
        """(reserved slots, slots holding computed tokens) over the reservations."""
        bs = self.block_size
        reserved = used = 0
        for st in self._states.values():
            r = len(st.blocks) * bs
            reserved += r
            used += min(st.request.num_computed_tokens, r)
        return reserved, used

    def reserved_unused_fractions(self, growing: list, k: int) -> list[float]:
        """:attr:`reserved_unused_fraction` after d = 0 .. k−1 more computed
        tokens of each request in ``growing`` (a merged decode run's steps;
        each request's count stops at its reservation), in O(requests + k)."""
        bs = self.block_size
        reserved, used = self._reserved_and_used()
        if not reserved:
            return [0.0] * k
        stops = [0] * (k + 1)  # growing requests by slack (slots left in their reservation) < k
        active = 0  # growing requests still below their reservation at offset d
        for req in growing:
            st = self._states.get(req.request_id)
            if st is None:
                continue
            r = len(st.blocks) * bs
            slack = r - min(req.num_computed_tokens, r)
            active += 1
            if slack < k:
                stops[slack] += 1
        out = []
        for d in range(k):
            if d:
                used += active
            out.append((reserved - used) / reserved)
            active -= stops[d]
        return out
