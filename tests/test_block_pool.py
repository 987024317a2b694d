"""BlockPool: null block, free-queue order (LRU, reverse frees, unhashed to
head), lazy eviction, ref counts. Expected orders are worked by hand from
vLLM v0.24 block_pool.py semantics (ENGINE_SEMANTICS §2.2)."""

import pytest

from sim.errors import ConfigError
from sim.kv_cache.block_pool import BlockPool


def test_initial_state_null_block_and_usage():
    pool = BlockPool(5, enable_prefix_caching=True)
    assert pool.num_usable_blocks == 4
    assert pool.free_block_ids() == [1, 2, 3, 4]  # block 0 is the null block
    assert pool.get_usage() == 0.0
    assert not pool.is_free(0)
    pool.check_invariants()


@pytest.mark.parametrize("n", [0, 1, -3, 2.0, True])
def test_bad_size(n):
    with pytest.raises(ConfigError, match="num_gpu_blocks"):
        BlockPool(n)


def test_allocate_pops_head_and_usage():
    pool = BlockPool(5)
    assert pool.get_new_blocks(2) == [1, 2]
    assert pool.ref_cnt[1] == pool.ref_cnt[2] == 1
    assert pool.free_block_ids() == [3, 4]
    assert pool.get_usage() == 0.5  # 1 - 2/4
    with pytest.raises(ValueError):
        pool.get_new_blocks(3)
    assert pool.free_block_ids() == [3, 4]  # failed get changed nothing
    pool.check_invariants()


def test_unhashed_blocks_go_to_head_in_given_order():
    pool = BlockPool(6)
    table = pool.get_new_blocks(3)  # [1, 2, 3]; free [4, 5]
    pool.free_blocks(reversed(table))
    assert pool.free_block_ids() == [3, 2, 1, 4, 5]
    assert pool.get_new_blocks(1) == [3]  # reused first
    pool.check_invariants()


def test_hashed_blocks_go_to_tail_chain_tail_first():
    pool = BlockPool(6, enable_prefix_caching=True)
    table = pool.get_new_blocks(3)  # [1, 2, 3]
    pool.cache_full_blocks([1, 2], [101, 102])  # block 3 is partial: no hash
    pool.free_blocks(reversed(table))
    # 3 (unhashed) to the head; 2 then 1 appended to the tail.
    assert pool.free_block_ids() == [3, 4, 5, 2, 1]
    assert pool.get_cached_block(101) == 1 and pool.get_cached_block(102) == 2
    # Allocating 4 pops 3, 4, 5, 2: block 2 (chain tail) is evicted, 1 survives.
    assert pool.get_new_blocks(4) == [3, 4, 5, 2]
    assert pool.get_cached_block(102) is None
    assert pool.block_hash[2] is None
    assert pool.get_cached_block(101) == 1
    assert pool.free_block_ids() == [1]
    pool.check_invariants()


def test_lru_across_requests():
    pool = BlockPool(5, enable_prefix_caching=True)
    a = pool.get_new_blocks(2)  # [1, 2]
    b = pool.get_new_blocks(2)  # [3, 4]
    pool.cache_full_blocks(a, [11, 12])
    pool.cache_full_blocks(b, [21, 22])
    pool.free_blocks(reversed(b))  # b finishes first: its blocks are older
    pool.free_blocks(reversed(a))
    assert pool.free_block_ids() == [4, 3, 2, 1]
    assert pool.get_new_blocks(1) == [4]
    assert pool.get_cached_block(22) is None and pool.get_cached_block(21) == 3
    pool.check_invariants()


def test_touch_removes_from_middle_and_shares():
    pool = BlockPool(5, enable_prefix_caching=True)
    a = pool.get_new_blocks(3)  # [1, 2, 3]
    pool.cache_full_blocks(a, [1, 2, 3])
    pool.free_blocks(reversed(a))
    assert pool.free_block_ids() == [4, 3, 2, 1]
    pool.touch([1, 2])  # a hit on the first two blocks
    assert pool.free_block_ids() == [4, 3]
    assert pool.ref_cnt[1] == 1 and pool.num_free_blocks == 2
    pool.touch([1])  # second sharer
    assert pool.ref_cnt[1] == 2
    pool.free_blocks([1])
    assert pool.ref_cnt[1] == 1 and not pool.is_free(1)  # still held: never evictable
    with pytest.raises(ValueError):
        pool.get_new_blocks(3)
    pool.check_invariants()


def test_duplicate_hashes_first_wins_then_second():
    pool = BlockPool(4, enable_prefix_caching=True)
    x, y = pool.get_new_blocks(2)
    pool.cache_full_blocks([x], [7])
    pool.cache_full_blocks([y], [7])
    assert pool.get_cached_block(7) == x
    pool.free_blocks([x])  # free queue: [3, 1]
    assert pool.num_cached_blocks == 2
    pool.get_new_blocks(2)  # pops 3 then 1: evicts x's hash only
    assert pool.get_cached_block(7) == y and pool.num_cached_blocks == 1
    pool.check_invariants()
    pool.free_blocks([y])
    pool.get_new_blocks(1)  # y's block: its hash goes, no block holds 7 any more
    assert pool.get_cached_block(7) is None and pool.num_cached_blocks == 0
    pool.check_invariants()


def test_caching_off_keeps_no_hashes_and_over_free_raises():
    pool = BlockPool(4)
    b = pool.get_new_blocks(1)
    pool.cache_full_blocks(b, [5])
    assert pool.get_cached_block(5) is None and pool.num_cached_blocks == 0
    pool.free_blocks(b)
    with pytest.raises(ValueError):
        pool.free_blocks(b)


def test_reset_prefix_cache_only_when_idle():
    pool = BlockPool(4, enable_prefix_caching=True)
    b = pool.get_new_blocks(1)
    pool.cache_full_blocks(b, [9])
    assert pool.reset_prefix_cache() is False
    pool.free_blocks(b)
    assert pool.reset_prefix_cache() is True
    assert pool.get_cached_block(9) is None
    pool.check_invariants()


def test_caching_off_keeps_no_counts_but_catches_double_frees():
    """Caching off: held = off the stack (no ref counts kept), ref_cnt derived.
    Freeing more than is held is refused; a duplicate is caught by the checks."""
    pool = BlockPool(6)  # 5 usable blocks
    a = pool.get_new_blocks(3)  # [1, 2, 3]
    assert pool.ref_cnt == [0, 1, 1, 1, 0, 0]
    assert [pool.is_free(b) for b in range(6)] == [False, False, False, False, True, True]
    pool.free_blocks(reversed(a))
    assert pool.free_block_ids() == [3, 2, 1, 4, 5] and pool.ref_cnt == [0] * 6
    with pytest.raises(ValueError, match="freed more often than allocated"):
        pool.free_blocks([1])  # all 5 are free already
    assert pool.num_free_blocks == 5
    b = pool.get_new_blocks(2)  # [3, 2]
    pool.free_blocks([b[0], b[0]])  # within the count, but a duplicate
    with pytest.raises(AssertionError, match="duplicates"):
        pool.check_invariants()
    with pytest.raises(ValueError, match="prefix caching is off"):
        BlockPool(4).touch([1])
