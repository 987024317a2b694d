"""KVCacheManager: allocate_slots arithmetic, prefix hits, eviction order,
failure without side effects, watermark / full-sequence check, stats.
Every expected number is worked by hand in the comments (block size 16
unless said otherwise; vLLM v0.24 semantics, ENGINE_SEMANTICS §2)."""

import pytest

from sim.errors import ConfigError
from sim.kv_cache import ContiguousKVCacheManager, KVCacheManager, make_kv_cache_manager
from sim.request import Request, RequestStatus

KEYS = (1000,)  # one 512-token chunk: every request with these keys shares its first 512 tokens


def req(rid, prompt, max_tokens=8, keys=KEYS, chunk=512):
    return Request(rid, 0.0, prompt, max_tokens, prefix_keys=keys, prefix_chunk_tokens=chunk)


def prefill(kv, r, record=False):
    """Admit ``r`` as the scheduler would: lookup, allocate the rest, advance."""
    hits, n_hit = kv.get_computed_blocks(r, record_stats=record)
    new = kv.allocate_slots(r, r.num_tokens - n_hit, n_hit, hits)
    assert new is not None
    r.num_computed_tokens = r.num_tokens
    r.status = RequestStatus.RUNNING
    return hits, n_hit, new


def decode(kv, r, steps):
    """``steps`` decode steps: sample a token, then compute it next step."""
    for _ in range(steps):
        r.num_output_tokens += 1
        assert kv.allocate_slots(r, 1) is not None
        r.num_computed_tokens += 1


def snapshot(kv):
    pool = kv.pool
    return (pool.free_block_ids(), list(pool.ref_cnt), list(pool.block_hash),
            {k: v if isinstance(v, int) else dict(v) for k, v in pool._hash_to_blocks.items()},
            {rid: list(st.blocks) for rid, st in kv._states.items()})


@pytest.mark.parametrize("prompt, hit, recompute", [(32, 16, 16), (33, 32, 1), (40, 32, 8)])
def test_fully_cached_prompt_hits(prompt, hit, recompute):
    kv = KVCacheManager(64, 16, enable_prefix_caching=True, max_model_len=4096)
    a = req(1, prompt)
    prefill(kv, a)
    kv.free(a)
    b = req(2, prompt)
    hits, n_hit = kv.get_computed_blocks(b)
    assert n_hit == hit and len(hits) == hit // 16
    assert b.num_tokens - n_hit == recompute


def test_no_hits_when_caching_off_or_keys_differ():
    off = KVCacheManager(64, 16, max_model_len=4096)
    a = req(1, 64)
    prefill(off, a)
    assert off.get_computed_blocks(req(2, 64)) == ([], 0)
    on = KVCacheManager(64, 16, enable_prefix_caching=True, max_model_len=4096)
    prefill(on, req(1, 64))
    assert on.get_computed_blocks(req(2, 64, keys=(999,))) == ([], 0)
    assert on.get_computed_blocks(req(3, 64, keys=None)) == ([], 0)  # unique tokens


def test_chain_breaks_at_first_miss():
    # 16-token chunks = one block each. Keys (1,2,3) vs (1,9,3): block 2's key
    # matches but its parent differs, so only block 0 hits.
    kv = KVCacheManager(64, 16, enable_prefix_caching=True, max_model_len=4096)
    prefill(kv, req(1, 49, keys=(1, 2, 3), chunk=16))
    assert kv.get_computed_blocks(req(2, 49, keys=(1, 9, 3), chunk=16))[1] == 16
    assert kv.get_computed_blocks(req(3, 49, keys=(1, 2, 3), chunk=16))[1] == 48


def test_sharing_a_prefix_shares_physical_blocks():
    kv = KVCacheManager(64, 16, enable_prefix_caching=True, max_model_len=4096)
    a, b = req(1, 40), req(2, 40)
    _, _, a_new = prefill(kv, a)  # blocks 1, 2, 3; 1 and 2 full and cached
    hits, n_hit, b_new = prefill(kv, b)
    assert hits == [1, 2] and n_hit == 32 and b_new == [4]
    assert kv.block_table(b) == [1, 2, 4]
    assert kv.pool.ref_cnt[1] == kv.pool.ref_cnt[2] == 2 and kv.pool.ref_cnt[3] == 1
    assert kv.num_free_blocks == 63 - 4  # 4 distinct blocks held
    kv.check_invariants()


def test_own_blocks_hit_on_resume_after_preemption():
    kv = KVCacheManager(64, 16, enable_prefix_caching=True, max_model_len=4096)
    a = req(7, 30, keys=None)  # unique content
    prefill(kv, a)
    decode(kv, a, 5)  # num_tokens 35, computed 35 -> 2 full blocks cached
    kv.free(a)  # preempted: computed reset, outputs kept
    a.num_computed_tokens = 0
    a.num_preemptions = 1
    a.status = RequestStatus.PREEMPTED
    hits, n_hit = kv.get_computed_blocks(a, record_stats=True)
    assert n_hit == 32  # floor((35 - 1) / 16) = 2 blocks
    assert (kv.preempted_prefix_cache_queries, kv.preempted_prefix_cache_hits) == (35, 32)
    assert (kv.prefix_cache_queries, kv.prefix_cache_hits) == (0, 0)


def test_output_blocks_are_cached_as_they_fill():
    # Keys cover 64 tokens, so A's outputs at 20..31 are "the conversation".
    kv = KVCacheManager(64, 16, enable_prefix_caching=True, max_model_len=4096)
    a = req(1, 20, max_tokens=20, keys=(5,), chunk=64)
    prefill(kv, a)
    assert kv.pool.num_cached_blocks == 1
    decode(kv, a, 11)  # num_tokens 31: block 1 covers 16..31, not yet full
    assert kv.pool.num_cached_blocks == 1
    decode(kv, a, 1)  # the step computing token 31 fills block 1
    assert kv.pool.num_cached_blocks == 2
    assert kv.get_computed_blocks(req(2, 40, keys=(5,), chunk=64))[1] == 32


def test_lookahead_slots_are_allocated_but_not_cached():
    kv = KVCacheManager(64, 16, enable_prefix_caching=True, max_model_len=4096)
    a = req(1, 14)
    # 14 + 4 lookahead = 18 slots -> 2 blocks; only 14 real tokens: nothing full.
    assert kv.allocate_slots(a, 14, num_lookahead_tokens=4) == [1, 2]
    assert kv.pool.num_cached_blocks == 0


def test_max_model_len_caps_slots():
    kv = KVCacheManager(64, 16, max_model_len=40)
    a = req(1, 30)
    # 30 + 20 lookahead = 50 -> capped at 40 -> ceil(40/16) = 3 blocks.
    assert len(kv.allocate_slots(a, 30, num_lookahead_tokens=20)) == 3


def test_decode_fast_path_and_block_boundaries():
    kv = KVCacheManager(16, 4, max_model_len=4096)
    a = req(1, 5)
    assert kv.allocate_slots(a, 5) == [1, 2]  # 5 tokens, block size 4
    a.num_computed_tokens = 5
    assert kv.slots_free_in_last_block(a) == 3
    new = []
    for _ in range(4):  # tokens 6, 7, 8 fit; token 9 needs block 3
        a.num_output_tokens += 1
        new.append(kv.allocate_slots(a, 1))
        a.num_computed_tokens += 1
    assert new == [[], [], [], [3]]
    assert kv.num_held_blocks(a) == 3 and kv.slots_free_in_last_block(a) == 3


def test_grow_for_decode_equals_one_allocation_after_the_other():
    """A merged decode run's bulk growth takes the blocks allocate_slots would
    take request by request: the same ids in the same tables."""
    def setup():
        kv = KVCacheManager(64, 4, max_model_len=30)
        rs = [req(i, p, keys=()) for i, p in enumerate((5, 8, 3, 27), start=1)]
        for r in rs:
            prefill(kv, r)
        return kv, rs
    # slots wanted: 13 (5 -> 4 blocks), 8 (fits in 2), 9 (3 blocks), 35 (capped at 30: 8 blocks)
    slots = [13, 8, 9, 35]
    kv, rs = setup()
    assert kv.grows_decode_in_bulk
    for r, s in zip(rs, slots):
        n = s - r.num_computed_tokens
        if n > 0:
            assert kv.allocate_slots(r, n) is not None
    expected = snapshot(kv)
    kv, rs = setup()
    kv.grow_for_decode(rs, slots)
    assert snapshot(kv) == expected
    assert [kv.num_held_blocks(r) for r in rs] == [4, 2, 3, 8]
    assert [r.kv_capacity for r in rs] == [16, 8, 12, 32]
    kv.check_invariants()
    small = KVCacheManager(8, 4, max_model_len=100)  # 7 usable blocks
    r = req(9, 20, keys=())
    prefill(small, r)  # 5 blocks
    before = snapshot(small)
    with pytest.raises(RuntimeError, match="needs 5 blocks, 2 free"):
        small.grow_for_decode([r], [40])
    assert snapshot(small) == before
    assert not KVCacheManager(64, 4, max_model_len=30, enable_prefix_caching=True).grows_decode_in_bulk


def test_grow_decode_block_equals_allocate_slots_of_one_token():
    """A plain decode at a block boundary (the chunked running pass's shortcut)
    takes the block allocate_slots(req, 1) would, or changes nothing when the
    pool is empty."""
    def setup():
        kv = KVCacheManager(6, 4, max_model_len=100)  # 5 usable blocks
        a, b = req(1, 8, keys=()), req(2, 4, keys=())
        prefill(kv, a)  # 2 blocks, both full
        prefill(kv, b)  # 1 block, full
        return kv, a, b
    kv, a, b = setup()
    assert kv.allocate_slots(a, 1) == [4]
    expected = snapshot(kv)
    kv, a, b = setup()
    assert kv.grow_decode_block(a) is True
    assert snapshot(kv) == expected and a.kv_capacity == 12
    assert kv.grow_decode_block(b) is True  # the last free block
    before = snapshot(kv)
    assert kv.allocate_slots(a, 4 + 1) is None  # none left: allocate_slots fails...
    assert kv.grow_decode_block(a) is False  # ...and so does the shortcut, with no side effects
    assert snapshot(kv) == before and a.kv_capacity == 12
    kv.check_invariants()


@pytest.mark.parametrize("prompt", [1, 3, 4, 5, 12, 13, 16, 17])
def test_allocate_prompt_equals_allocate_slots_with_the_full_sequence_check(prompt):
    """A decode span admits a new request's whole prompt with allocate_prompt:
    the blocks, capacity and free count of allocate_slots(full_sequence_check);
    False with nothing changed where allocate_slots fails (5 usable blocks of 4)."""
    def setup():
        kv = KVCacheManager(6, 4, max_model_len=100)
        prefill(kv, req(1, 4, keys=()))  # 1 block held, 4 free
        return kv, req(2, prompt, keys=())
    kv, r = setup()
    expected_ok = kv.allocate_slots(r, prompt, full_sequence_check=True) is not None
    expected = snapshot(kv), r.kv_capacity
    kv, r = setup()
    before = snapshot(kv)
    assert kv.allocate_prompt(r, prompt) is expected_ok
    assert (snapshot(kv), r.kv_capacity) == (expected if expected_ok else (before, 0))
    assert expected_ok == (prompt <= 16)
    kv.check_invariants()


def test_eviction_order_on_tiny_pool_block_by_block():
    # 7 blocks -> 6 usable (1..6), block size 4, caching on.
    kv = KVCacheManager(7, 4, enable_prefix_caching=True, max_model_len=64)
    a = req(1, 10, keys=(1,), chunk=64)  # blocks 1, 2 full (cached), 3 partial
    b = req(2, 6, keys=(2,), chunk=64)  # block 4 full (cached), 5 partial
    prefill(kv, a)
    prefill(kv, b)
    assert kv.pool.free_block_ids() == [6]
    kv.free(a)  # reverse table 3, 2, 1: 3 unhashed -> head; 2, 1 -> tail
    assert kv.pool.free_block_ids() == [3, 6, 2, 1]
    kv.free(b)  # reverse 5, 4: 5 -> head; 4 -> tail
    assert kv.pool.free_block_ids() == [5, 3, 6, 2, 1, 4]
    # A new 16-token request (no hits) takes 4 blocks from the head: 5, 3, 6,
    # then 2 -- evicting a's chain tail; a's block 1 and b's block 4 survive.
    c = req(3, 16, keys=(3,), chunk=64)
    assert kv.allocate_slots(c, 16) == [5, 3, 6, 2]
    assert kv.pool.free_block_ids() == [1, 4]
    assert kv.get_computed_blocks(req(4, 10, keys=(1,), chunk=64))[0] == [1]
    assert kv.get_computed_blocks(req(5, 6, keys=(2,), chunk=64))[0] == [4]
    kv.check_invariants()


def test_failed_allocation_has_no_side_effects():
    kv = KVCacheManager(7, 4, enable_prefix_caching=True, max_model_len=64)
    a = req(1, 12, keys=(1,), chunk=64)
    prefill(kv, a)
    kv.free(a)  # 3 cached blocks in the free queue
    held = req(2, 8, keys=(9,), chunk=64)
    prefill(kv, held)  # takes 2 blocks from the head: 4, 5
    before = snapshot(kv)
    big = req(3, 24, keys=(1,), chunk=64)  # hits 3 blocks (all in the free queue) + 3 new
    hits, n_hit = kv.get_computed_blocks(big)
    assert (hits, n_hit) == ([1, 2, 3], 12)
    # needs 3 new + 3 evictable hits = 6 > 4 free
    assert kv.allocate_slots(big, 12, n_hit, hits) is None
    assert snapshot(kv) == before
    assert kv.block_table(big) == [] and kv.num_requests == 1
    assert kv.allocate_slots(req(4, 100, keys=None), 100) is None
    assert snapshot(kv) == before


def test_full_sequence_check_and_watermark():
    kv = KVCacheManager(11, 16, max_model_len=4096)  # 10 usable
    a = req(1, 200, keys=None)  # 13 blocks for the whole sequence
    assert kv.allocate_slots(a, 64, full_sequence_check=True) is None
    assert kv.allocate_slots(a, 64) == [1, 2, 3, 4]  # v0.11-style: first chunk only
    kv.free(a)
    wm = KVCacheManager(11, 16, max_model_len=4096, watermark=0.2)  # int(0.2*11) = 2 blocks
    b = req(2, 144, keys=None)  # 9 blocks; 9 + 2 > 10 free
    assert wm.allocate_slots(b, 144, full_sequence_check=True) is None
    assert wm.allocate_slots(b, 144, full_sequence_check=True, has_scheduled_reqs=False) is not None
    c = req(3, 16, keys=None)
    c.status = RequestStatus.RUNNING  # running requests never see the watermark
    assert wm.allocate_slots(c, 16) == [10]


def test_stats_only_when_recorded():
    kv = KVCacheManager(64, 16, enable_prefix_caching=True, max_model_len=4096)
    prefill(kv, req(1, 40))
    b = req(2, 40)
    kv.get_computed_blocks(b)
    kv.get_computed_blocks(b)
    assert (kv.prefix_cache_queries, kv.prefix_cache_hits) == (0, 0)
    kv.get_computed_blocks(b, record_stats=True)
    kv.record_prefix_lookup(10, 0)
    assert (kv.prefix_cache_queries, kv.prefix_cache_hits, kv.prefix_cache_requests) == (50, 32, 2)


def test_queries_and_reservation_helpers():
    kv = KVCacheManager(11, 16, max_model_len=100)
    a = req(1, 20, keys=None)
    assert kv.get_num_blocks_to_allocate(a, 50) == 4
    kv.allocate_slots(a, 20)
    a.num_computed_tokens = 20
    assert kv.get_num_blocks_to_allocate(a, 50) == 2  # 4 - 2 held
    assert kv.get_num_blocks_to_allocate(a, 500) == 5  # capped at 100 tokens: 7 - 2
    assert kv.usage == pytest.approx(0.2)  # 1 - 8/10
    assert kv.can_ever_fit(160) and not kv.can_ever_fit(161)
    assert kv.reserved_unused_fraction == pytest.approx(12 / 32)
    kv.free(a)
    assert kv.usage == 0.0 and kv.reserved_unused_fraction == 0.0 and kv.block_table(a) == []
    kv.free(a)  # freeing twice is a no-op


@pytest.mark.parametrize("kwargs, field", [
    (dict(num_gpu_blocks=1, block_size=16, max_model_len=10), "num_gpu_blocks"),
    (dict(num_gpu_blocks=10, block_size=0, max_model_len=10), "block_size"),
    (dict(num_gpu_blocks=10, block_size=16, max_model_len=0), "max_model_len"),
    (dict(num_gpu_blocks=10, block_size=16, max_model_len=10, watermark=1.0), "watermark"),
])
def test_bad_config(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        KVCacheManager(**kwargs)


def test_bad_prefix_keys():
    kv = KVCacheManager(10, 16, enable_prefix_caching=True, max_model_len=100)
    with pytest.raises(ConfigError, match="prefix_chunk_tokens"):
        kv.get_computed_blocks(req(1, 40, keys=(1,), chunk=0))


def test_factory():
    assert type(make_kv_cache_manager("paged", 10, 16, enable_prefix_caching=True, max_model_len=64)) \
        is KVCacheManager
    c = make_kv_cache_manager("contiguous", 10, 16, enable_prefix_caching=False, max_model_len=64,
                              contiguous_reserve="max_tokens")
    assert isinstance(c, ContiguousKVCacheManager) and c.reserve == "max_tokens"
    with pytest.raises(ConfigError, match="paged, contiguous"):
        make_kv_cache_manager("radix", 10, 16, enable_prefix_caching=False, max_model_len=64)


def test_hit_rate():
    kv = KVCacheManager(64, 16, enable_prefix_caching=True, max_model_len=4096)
    assert kv.prefix_cache_hit_rate == 0.0
    prefill(kv, req(1, 40), record=True)  # 40 queried, 0 hit
    prefill(kv, req(2, 40), record=True)  # 40 queried, 32 hit
    assert kv.prefix_cache_hit_rate == pytest.approx(32 / 80)


def test_a_request_that_never_fits_is_told_why():
    """11 blocks of 16, one the null block: 160 tokens fit, 161 (11 blocks) never."""
    kv = KVCacheManager(11, 16, max_model_len=4096)
    assert kv.can_ever_fit(160) and not kv.can_ever_fit(161)
    assert kv.never_fits(161) == "161 tokens (11 blocks) exceed the whole KV cache (10 blocks of 16)"
