"""FreeBlockQueue (head stack + tail list with holes) and OwnRuns (a request's
own cached blocks as runs): orders and counts worked by hand."""

import pytest

from sim.kv_cache.block_pool import BlockPool
from sim.kv_cache.free_queue import FreeBlockQueue
from sim.kv_cache.own_runs import OwnRuns


def test_queue_order_pops_prepends_and_holes():
    q = FreeBlockQueue(range(1, 6))  # [1 2 3 4 5], positions 0..4
    assert q.popleft_n(2) == [1, 2] and q.head_position == 2
    assert q.append_n([7, 8]) == 5  # [3 4 5 7 8]
    q.prepend_n([9, 6])  # 9 first: [9 6 3 4 5 7 8]
    q.remove(3)  # position 3 holds block 4: [9 6 3 5 7 8]
    assert q.block_at(3) == 0 and q.blocks_at(4, 2) == [5, 7]
    assert q.block_ids() == [9, 6, 3, 5, 7, 8]
    assert q.popleft_n(4) == [9, 6, 3, 5]  # the hole is skipped
    assert q.head_position == 5  # positions 2, 3, 4 consumed
    assert q.popleft_n(2) == [7, 8] and q.block_ids() == []
    with pytest.raises(ValueError, match="exhausted"):
        q.popleft_n(1)


def test_queue_keeps_positions_when_it_drops_its_consumed_prefix():
    n = 40_000
    q = FreeBlockQueue(range(1, n))
    p = q.append(n)  # position n - 1
    assert len(q.popleft_n(30_000)) == 30_000  # compacts (consumed prefix >= half)
    assert q._base > 0 and q.head_position == 30_000
    assert q.block_at(p) == n
    q.remove(p)
    assert q.block_ids() == list(range(30_001, n))


def test_own_runs_evicted_from_the_top_and_hit_from_the_bottom():
    q = FreeBlockQueue(range(1, 4))  # [1 2 3]
    runs = OwnRuns(q)
    runs.add(owner=7, blocks_top_first=[14, 13, 12, 11], top=5)  # indices 5 4 3 2 at positions 3..6
    assert runs.num_cached_blocks() == 4
    assert runs.hits(7, 2, 100) == [11, 12, 13, 14]  # from index 2 up, in index order
    with pytest.raises(RuntimeError, match="overlap"):  # a lookup reaches a run at its lowest index
        runs.hits(7, 3, 100)
    assert q.popleft_n(4) == [1, 2, 3, 14]  # evicts index 5
    assert runs.hits(7, 2, 100) == [11, 12, 13]
    assert runs.covers(7, 4, 5) and not runs.covers(7, 5, 9)
    assert runs.hits(7, 2, 4, take=True) == [11, 12]  # indices 2, 3 back into the table
    assert q.block_ids() == [13] and runs.hits(7, 4, 100) == [13]
    assert runs.pop_owner(7) == [(4, 4)]  # block 13 at position 4 holds index 4
    assert not runs and runs.hits(7, 4, 100) == []


def test_pool_frees_a_table_in_three_parts_and_counts_stay_exact():
    """Table [1..6] of request 9: blocks 0-1 hashed (shared prefix), 2-3 its
    own cached blocks, 4-5 uncached. free = free_blocks(reversed(table)):
    6, 5 to the head; 4, 3 then 2, 1 to the tail."""
    pool = BlockPool(10, enable_prefix_caching=True)  # 9 usable
    table = pool.get_new_blocks(6)
    pool.cache_full_blocks(table[:2], [101, 102])
    assert pool.num_free_blocks == 3 and pool.ref_cnt[1:7] == [1] * 6
    pool.free_request_blocks(9, table, num_cached=4, run_start=2)
    assert pool.free_block_ids() == [6, 5, 7, 8, 9, 4, 3, 2, 1]
    assert pool.num_free_blocks == 9 and pool.num_cached_blocks == 4
    assert pool.own_runs.hits(9, 2, 10) == [3, 4]
    pool.check_invariants()
    got = pool.get_new_blocks(6)  # evicts index 3 of request 9 (block 4)
    assert got == [6, 5, 7, 8, 9, 4]
    assert pool.own_runs.hits(9, 2, 10) == [3]
    assert pool.num_free_blocks + 6 == pool.num_usable_blocks
    pool.check_invariants()
