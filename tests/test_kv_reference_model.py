"""KVCacheManager against a plain model of vLLM v0.24's prefix cache.

The model (:class:`RefKV`) is the textbook per-block implementation —
``FreeKVCacheBlockQueue`` as an OrderedDict, a ref count and a real chained
hash for every full block, ``BlockHashToBlockMap`` with duplicates (first
inserted wins) — written for clarity, not speed. The manager keeps blocks
only their own request can hit as runs without hashes (``own_runs.py``);
random admit / decode / preempt / resume / finish programs must give the same
hits, the same block ids, the same failures and the same free counts. The
hand-made case at the end forces a second cached copy of a block (the
resumed request's lookup stops one block short and it recomputes that
block), the path where a request's runs get real hashes."""

from collections import OrderedDict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.kv_cache import KVCacheManager
from sim.kv_cache.hashing import ensure_block_hashes
from sim.request import Request, RequestStatus


class RefKV:
    """vLLM's KVCacheManager + BlockPool, block by block (no watermark, no lookahead)."""

    def __init__(self, num_gpu_blocks, block_size):
        self.bs = block_size
        self.free = OrderedDict((b, None) for b in range(1, num_gpu_blocks))
        self.ref = [0] * num_gpu_blocks
        self.block_hash = [None] * num_gpu_blocks
        self.cached: dict[int, dict[int, None]] = {}
        self.tables: dict[int, list[int]] = {}
        self.num_cached: dict[int, int] = {}

    def lookup(self, r):
        hashes = ensure_block_hashes(r, self.bs, (r.num_tokens - 1) // self.bs)
        hits = []
        for h in hashes[:(r.num_tokens - 1) // self.bs]:
            blocks = self.cached.get(h)
            if not blocks:
                break
            hits.append(next(iter(blocks)))
        return hits

    def allocate(self, r, num_new_tokens, hits=()):
        table = self.tables.get(r.request_id, [])
        evictable = sum(1 for b in hits if self.ref[b] == 0)
        slots = r.num_computed_tokens + len(hits) * self.bs + num_new_tokens
        need = max(0, -(-slots // self.bs) - len(hits) - len(table))
        if need + evictable > len(self.free):
            return None
        for b in hits:
            if self.ref[b] == 0:
                del self.free[b]
            self.ref[b] += 1
        new = []
        for _ in range(need):
            b, _ = self.free.popitem(last=False)
            h = self.block_hash[b]
            if h is not None:
                self.block_hash[b] = None
                del self.cached[h][b]
                if not self.cached[h]:
                    del self.cached[h]
            self.ref[b] = 1
            new.append(b)
        table = self.tables[r.request_id] = table + list(hits) + new
        done = self.num_cached.get(r.request_id, 0) if not hits else len(hits)
        full = min(r.num_computed_tokens + len(hits) * self.bs + num_new_tokens, r.num_tokens) // self.bs
        hashes = ensure_block_hashes(r, self.bs, full)
        for i in range(done, full):
            self.block_hash[table[i]] = hashes[i]
            self.cached.setdefault(hashes[i], {})[table[i]] = None
        self.num_cached[r.request_id] = max(done, full)
        return new

    def release(self, r):
        table = self.tables.pop(r.request_id, [])
        self.num_cached.pop(r.request_id, None)
        unhashed = []
        for b in reversed(table):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if self.block_hash[b] is None:
                    unhashed.append(b)
                else:
                    self.free[b] = None
        for b in reversed(unhashed):  # prepend_n: unhashed[0] ends first
            self.free[b] = None
            self.free.move_to_end(b, last=False)


def _new(rid, prompt, keys):
    return Request(rid, 0.0, prompt, 64, prefix_keys=keys, prefix_chunk_tokens=4)


def _admit(kv, ref, r, r2, chunk):
    """Lookup + first allocation on both; returns whether it was admitted."""
    hits, n_hit = kv.get_computed_blocks(r)
    assert hits == ref.lookup(r2)
    n = min(r.num_tokens - n_hit, chunk)
    got = kv.allocate_slots(r, n, n_hit, hits)
    assert got == ref.allocate(r2, n, hits)
    if got is None:
        return False
    for q in (r, r2):
        q.num_computed_tokens = n_hit + n
        q.status = RequestStatus.RUNNING
    return True


ops = st.lists(st.tuples(st.sampled_from(["admit", "admit", "step", "step", "step", "preempt", "resume", "resume",
                                          "finish"]),
                         st.integers(0, 10**6), st.integers(1, 40)), min_size=10, max_size=100)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=ops, num_blocks=st.integers(4, 80), block_size=st.sampled_from([1, 2, 4]))
def test_same_hits_blocks_and_failures_as_the_per_block_model(program, num_blocks, block_size):
    kv = KVCacheManager(num_blocks, block_size, enable_prefix_caching=True, max_model_len=10**6)
    ref = RefKV(num_blocks, block_size)
    running, preempted = {}, {}  # rid -> (manager's request, model's request)
    next_id = 0
    for op, x, n in program:
        if op == "admit":
            keys = (x % 2, x % 3) if x % 3 else None  # some share a prefix, some are unique throughout
            pair = (_new(next_id, n, keys), _new(next_id, n, keys))
            next_id += 1
            if _admit(kv, ref, *pair, chunk=1 + x % 50):
                running[pair[0].request_id] = pair
        elif op == "step" and running:
            r, r2 = running[sorted(running)[x % len(running)]]
            k = min(r.num_tokens - r.num_computed_tokens, n)
            if k == 0:  # decode: sample a token, compute it
                r.num_output_tokens += 1
                r2.num_output_tokens += 1
                k = 1
            got = kv.allocate_slots(r, k)
            assert got == ref.allocate(r2, k)
            if got is not None:
                r.num_computed_tokens += k
                r2.num_computed_tokens += k
        elif op in ("preempt", "finish") and running:
            r, r2 = running.pop(sorted(running)[x % len(running)])
            kv.free(r)
            ref.release(r2)
            if op == "preempt":
                for q in (r, r2):
                    q.num_computed_tokens = 0
                    q.num_preemptions += 1
                    q.status = RequestStatus.PREEMPTED
                preempted[r.request_id] = (r, r2)
        elif op == "resume" and preempted:
            rid = sorted(preempted)[x % len(preempted)]
            if _admit(kv, ref, *preempted[rid], chunk=1 + x % 50):
                running[rid] = preempted.pop(rid)
        assert kv.num_free_blocks == len(ref.free)
        assert kv.pool.free_block_ids() == list(ref.free)
        kv.check_invariants()


def test_a_resumed_request_recomputing_a_cached_block_gets_its_runs_hashed():
    """bs 4, unique content. A computes 8 tokens (2 full blocks, its own: a
    run when freed). Resumed with 8 tokens, its lookup may hit only
    floor(7/4) = 1 block, so it recomputes block 1 while the run still caches
    the old copy: the run's blocks get real hashes, and the old copy (first
    inserted) is the one a later lookup finds, as in vLLM."""
    kv = KVCacheManager(10, 4, enable_prefix_caching=True, max_model_len=100)
    a = Request(1, 0.0, 8, 4)
    assert kv.allocate_slots(a, 8) == [1, 2]
    a.num_computed_tokens = 8
    kv.free(a)  # run [2, 1] at the tail after the free blocks 3..9
    assert kv.pool.free_block_ids() == [3, 4, 5, 6, 7, 8, 9, 2, 1]
    assert not kv.pool.hashes_own_blocks(1) and kv.pool.num_cached_blocks == 2
    a.num_computed_tokens = 0
    a.status = RequestStatus.PREEMPTED
    hits, n_hit = kv.get_computed_blocks(a)
    assert (hits, n_hit) == ([1], 4)
    assert kv.allocate_slots(a, 4, n_hit, hits) == [3]  # block 1 recomputed in block 3
    assert kv.pool.hashes_own_blocks(1)
    h = a.block_hashes
    assert kv.pool.block_hash[2] == kv.pool.block_hash[3] == h[1]  # two copies of block 1
    assert kv.pool.get_cached_block(h[1]) == 2  # the first inserted
    assert kv.pool.free_block_ids() == [4, 5, 6, 7, 8, 9, 2]
    a.num_computed_tokens = 8
    kv.free(a)  # table [1, 3]: both hashed, to the tail 3 then 1
    assert kv.pool.free_block_ids() == [4, 5, 6, 7, 8, 9, 2, 3, 1]
    a.num_computed_tokens = 0
    a.num_output_tokens = 1  # 9 tokens: both blocks may hit, the old copy of block 1 first
    assert kv.get_computed_blocks(a) == ([1, 2], 8)
    kv.check_invariants()
