"""Property tests (hypothesis): random admit / step / free sequences on random
pools. After every operation: free + held (distinct blocks with ref > 0) =
usable; each block's ref count = number of tables holding it; no block both
free and held; the free queue holds no duplicates and never the null block;
a failed allocation changes nothing. Checked from the outside (pool state
read directly), independently of the managers' own check_invariants."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.kv_cache import ContiguousKVCacheManager, KVCacheManager
from sim.request import Request, RequestStatus

ops = st.lists(
    st.tuples(st.sampled_from(["admit", "step", "free"]), st.integers(0, 10**6), st.integers(1, 80)),
    min_size=1, max_size=60)


def check(kv, live):
    pool = kv.pool
    free = pool.free_block_ids()
    assert len(free) == len(set(free)) == pool.num_free_blocks
    assert 0 not in free
    counts = {}
    for r in live.values():
        for b in kv.block_table(r):
            counts[b] = counts.get(b, 0) + 1
    assert 0 not in counts
    held = set(counts)
    assert not held & set(free), "a block both free and held"
    assert len(free) + len(held) == kv.num_usable_blocks
    for b in range(1, pool.num_gpu_blocks):
        assert pool.ref_cnt[b] == counts.get(b, 0)
    assert 0.0 <= kv.usage <= 1.0
    assert 0.0 <= kv.reserved_unused_fraction <= 1.0
    kv.check_invariants()


def state(kv):
    pool = kv.pool
    return (pool.free_block_ids(), list(pool.ref_cnt), list(pool.block_hash),
            {rid: list(s.blocks) for rid, s in kv._states.items()})


def run(kv, program, with_keys):
    live: dict[int, Request] = {}
    next_id = 0
    for op, x, n in program:
        if op == "admit":
            # Keys from a tiny alphabet so that requests share prefixes.
            keys = (x % 2, x % 3, x % 5) if with_keys else None
            r = Request(next_id, 0.0, n, 1 + x % 40, prefix_keys=keys, prefix_chunk_tokens=8)
            next_id += 1
            hits, n_hit = kv.get_computed_blocks(r)
            chunk = min(r.num_tokens - n_hit, 1 + x % 64)
            before = state(kv)
            got = kv.allocate_slots(r, chunk, n_hit, hits, full_sequence_check=bool(x & 1))
            if got is None:
                assert state(kv) == before
            else:
                r.num_computed_tokens = n_hit + chunk
                r.status = RequestStatus.RUNNING
                live[r.request_id] = r
        elif op == "step" and live:
            r = live[sorted(live)[x % len(live)]]
            if r.num_computed_tokens >= r.num_tokens:
                r.num_output_tokens += 1  # sampled; compute it now
            k = min(r.num_tokens - r.num_computed_tokens, n)
            before = state(kv)
            if kv.allocate_slots(r, k, num_lookahead_tokens=x % 3) is None:
                assert state(kv) == before
            else:
                r.num_computed_tokens += k
        elif op == "free" and live:
            r = live.pop(sorted(live)[x % len(live)])
            kv.free(r)
            r.num_computed_tokens = 0  # preempted or finished
        check(kv, live)
    for r in list(live.values()):
        kv.free(r)
    assert kv.num_free_blocks == kv.num_usable_blocks and kv.usage == 0.0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=ops, num_blocks=st.integers(2, 24), block_size=st.sampled_from([1, 4, 16]),
       caching=st.booleans(), with_keys=st.booleans())
def test_paged_invariants(program, num_blocks, block_size, caching, with_keys):
    kv = KVCacheManager(num_blocks, block_size, enable_prefix_caching=caching, max_model_len=200)
    run(kv, program, with_keys)


@settings(max_examples=60, deadline=None)
@given(program=ops, num_blocks=st.integers(2, 24), block_size=st.sampled_from([4, 16]),
       reserve=st.sampled_from(["max_model_len", "max_tokens"]))
def test_contiguous_invariants(program, num_blocks, block_size, reserve):
    kv = ContiguousKVCacheManager(num_blocks, block_size, max_model_len=200, reserve=reserve)
    run(kv, program, with_keys=False)


@settings(max_examples=60, deadline=None)
@given(prefix_blocks=st.integers(1, 6), tail_a=st.integers(1, 20), tail_b=st.integers(1, 20))
def test_shared_prefix_shares_blocks(prefix_blocks, tail_a, tail_b):
    """Two requests whose keys agree on the first ``prefix_blocks`` blocks (4
    tokens each) and differ after share exactly those physical blocks."""
    bs = 4
    kv = KVCacheManager(64, bs, enable_prefix_caching=True, max_model_len=400)
    shared = tuple(range(prefix_blocks))
    a = Request(1, 0.0, prefix_blocks * bs + tail_a, 4, prefix_keys=shared + (100,), prefix_chunk_tokens=bs)
    b = Request(2, 0.0, prefix_blocks * bs + tail_b, 4, prefix_keys=shared + (200,), prefix_chunk_tokens=bs)
    assert kv.allocate_slots(a, a.num_tokens) is not None
    hits, n_hit = kv.get_computed_blocks(b)
    assert n_hit == prefix_blocks * bs  # b has >= 1 token past the prefix, so all prefix blocks can hit
    assert kv.allocate_slots(b, b.num_tokens - n_hit, n_hit, hits) is not None
    ta, tb = kv.block_table(a), kv.block_table(b)
    assert ta[:prefix_blocks] == tb[:prefix_blocks]
    assert not set(ta[prefix_blocks:]) & set(tb[prefix_blocks:])
    assert all(kv.pool.ref_cnt[x] == 2 for x in ta[:prefix_blocks])
