"""Block hashes of prefix caching (sim/kv_cache/hashing.py): chunk keys to
chained block hashes, uniqueness past the keys, stability across processes."""

import pytest

from sim.errors import ConfigError
from sim.kv_cache.hashing import NONE_HASH, block_hash, ensure_block_hashes
from sim.request import Request


def req(rid, prompt, keys=(1000,), chunk=512):
    return Request(rid, 0.0, prompt, 8, prefix_keys=keys, prefix_chunk_tokens=chunk)


def test_block_hashes_follow_chunks_and_uniqueness():
    bs = 16
    # Two 8-token chunks per block: block 0 = keys (1, 2); differ in chunk 1 -> differ.
    a = req(1, 64, keys=(1, 2, 3, 4), chunk=8)
    b = req(2, 64, keys=(1, 9, 3, 4), chunk=8)
    c = req(3, 64, keys=(1, 2, 3, 4), chunk=8)
    ha, hb, hc = (ensure_block_hashes(r, bs, 3) for r in (a, b, c))
    assert ha[:2] == hc[:2]  # same keys, different request ids: same content
    assert ha[2] != hc[2]  # block 2 (32..47) is past the keys: unique to each request
    assert ha[0] != hb[0] and ha[1] != hb[1]  # chain broken from block 0 on
    # Keys cover 24 tokens: block 1 (16..31) is half keyed, half unique -> not shared.
    assert ha[1] != ensure_block_hashes(req(4, 64, keys=(1, 2, 3), chunk=8), bs, 2)[1]
    d, e = req(5, 64, keys=(1, 2, 3), chunk=8), req(6, 64, keys=(1, 2, 3), chunk=8)
    hd, he = ensure_block_hashes(d, bs, 2), ensure_block_hashes(e, bs, 2)
    assert hd[0] == he[0] and hd[1] != he[1]
    # The fast path in ensure_block_hashes agrees with the generic chain.
    p = NONE_HASH
    for i, h in enumerate(ensure_block_hashes(req(7, 64, keys=(5, 6), chunk=32), bs, 4)):
        p = block_hash(p, req(7, 64, keys=(5, 6), chunk=32), i, bs)
        assert p == h
    # Lazily extended, never recomputed.
    r = req(8, 64)
    first = ensure_block_hashes(r, bs, 1)
    assert ensure_block_hashes(r, bs, 3)[:1] == first[:1] and len(r.block_hashes) == 3


def test_hashes_identical_across_processes():
    """No salted str hashes: another interpreter with a different
    PYTHONHASHSEED computes the same block hashes."""
    import os
    import subprocess
    import sys
    code = ("from sim.request import Request; from sim.kv_cache.hashing import ensure_block_hashes; "
            "print(ensure_block_hashes(Request(3, 0.0, 100, 1, prefix_keys=(7, -1, 2**40), "
            "prefix_chunk_tokens=24), 16, 6))")
    outs = set()
    for seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True, cwd=os.path.dirname(os.path.dirname(__file__))).stdout)
    assert len(outs) == 1


def test_negative_keys_do_not_collide():
    # CPython: hash(-1) == hash(-2); the doubling keeps -1 and -2 apart.
    assert ensure_block_hashes(req(1, 32, keys=(-1,), chunk=16), 16, 1) != \
        ensure_block_hashes(req(2, 32, keys=(-2,), chunk=16), 16, 1)
    with pytest.raises(ConfigError, match="prefix_keys"):
        ensure_block_hashes(req(3, 32, keys=(2**61,), chunk=16), 16, 1)
