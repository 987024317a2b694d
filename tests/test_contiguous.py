"""ContiguousKVCacheManager: up-front reservation, all-or-nothing, and the
reserved-but-unused fraction, all hand-computed."""

import pytest

from sim.errors import ConfigError
from sim.kv_cache import ContiguousKVCacheManager
from sim.request import Request, RequestStatus


def req(rid, prompt, max_tokens):
    return Request(rid, 0.0, prompt, max_tokens)


def test_reserves_max_model_len_all_or_nothing():
    kv = ContiguousKVCacheManager(10, 16, max_model_len=64)  # 9 usable; 64 tokens = 4 blocks
    a, b, c = req(1, 10, 5), req(2, 30, 5), req(3, 1, 1)
    assert kv.allocate_slots(a, 10) == [1, 2, 3, 4]
    assert kv.allocate_slots(b, 16) == [5, 6, 7, 8]  # a chunk still reserves the whole buffer
    free_before = kv.pool.free_block_ids()
    assert kv.allocate_slots(c, 1) is None  # 4 > 1 free
    assert kv.pool.free_block_ids() == free_before == [9] and kv.num_requests == 2
    # Later steps are served from the reservation.
    a.num_computed_tokens = 10
    for _ in range(54):  # up to 64 tokens
        a.num_output_tokens += 1
        assert kv.allocate_slots(a, 1) == []
        a.num_computed_tokens += 1
    assert kv.num_held_blocks(a) == 4 and kv.usage == pytest.approx(8 / 9)
    kv.free(a)
    assert kv.pool.free_block_ids() == [4, 3, 2, 1, 9]  # unhashed frees go to the head
    kv.check_invariants()


def test_reserved_unused_fraction_max_model_len():
    kv = ContiguousKVCacheManager(10, 16, max_model_len=64)
    assert kv.reserved_unused_fraction == 0.0
    a, b = req(1, 10, 5), req(2, 30, 5)
    kv.allocate_slots(a, 10)
    kv.allocate_slots(b, 30)
    a.num_computed_tokens, b.num_computed_tokens = 10, 30
    # reserved 2 x 64 = 128 slots, 40 hold tokens: (128 - 40) / 128
    assert kv.reserved_unused_fraction == pytest.approx(88 / 128)


def test_reserve_max_tokens():
    kv = ContiguousKVCacheManager(10, 16, max_model_len=64, reserve="max_tokens")
    a = req(1, 10, 7)  # 17 tokens -> 2 blocks
    assert kv.allocate_slots(a, 10) == [1, 2]
    a.num_computed_tokens = 10
    assert kv.reserved_unused_fraction == pytest.approx(22 / 32)
    b = req(2, 60, 30)  # 90 > max_model_len: capped at 64 -> 4 blocks
    assert len(kv.allocate_slots(b, 60)) == 4
    assert kv.get_num_blocks_to_allocate(req(3, 20, 20), 40) == 3  # reservation of 40 tokens
    assert kv.get_num_blocks_to_allocate(a, 17) == 0


def test_watermark_and_resume():
    kv = ContiguousKVCacheManager(10, 16, max_model_len=64, watermark=0.3)  # int(3.0) = 3 blocks
    a = req(1, 10, 5)
    assert kv.allocate_slots(a, 10) == [1, 2, 3, 4]  # 4 + 3 <= 9
    b = req(2, 10, 5)
    assert kv.allocate_slots(b, 10) is None  # 4 + 3 > 5
    assert kv.allocate_slots(b, 10, has_scheduled_reqs=False) is not None
    # A preempted request reserves again on resume.
    kv.free(a)
    a.status = RequestStatus.PREEMPTED
    a.num_output_tokens = 3
    assert kv.allocate_slots(a, 13, has_scheduled_reqs=False) is not None


def test_can_ever_fit():
    mml = ContiguousKVCacheManager(4, 16, max_model_len=64)  # 3 usable; reservation 4 blocks
    assert not mml.can_ever_fit(10)
    mt = ContiguousKVCacheManager(4, 16, max_model_len=64, reserve="max_tokens")
    assert mt.can_ever_fit(48) and not mt.can_ever_fit(49)


def test_config_errors():
    with pytest.raises(ConfigError, match="enable_prefix_caching"):
        ContiguousKVCacheManager(10, 16, max_model_len=64, enable_prefix_caching=True)
    with pytest.raises(ConfigError, match="max_model_len, max_tokens"):
        ContiguousKVCacheManager(10, 16, max_model_len=64, reserve="prompt")
    kv = ContiguousKVCacheManager(10, 16, max_model_len=64)
    assert kv.get_computed_blocks(req(1, 40, 4)) == ([], 0)
