"""Counting KV bookkeeping (``KVCacheManager(block_ids=False)`` over a
``BlockCount``, what ``make_kv_cache_manager`` builds without prefix caching)
gives the block-id manager's results bit for bit: the same per-request
timestamps, steps, KV usage and preemptions, at block size 1 and 16, with
small KV caches that force preemptions."""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest

import sim.engine.deployment as deployment
from sim.config import build_config
from sim.errors import ConfigError
from sim.kv_cache import KVCacheManager, make_kv_cache_manager
from sim.kv_cache.block_count import BlockCount
from sim.kv_cache.block_pool import BlockPool
from sim.kv_cache.manager import NO_BLOCK_ID
from sim.request import Request, RequestStatus
from sim.runner import run_simulation

_BASE = {"model": "llama-3.1-8b", "hardware": "h100_sxm", "seed": 5, "enable_prefix_caching": False,
         "workload.arrival": "poisson", "workload.request_rate": 20.0, "workload.num_requests": 120,
         "workload.input_len": {"dist": "lognormal", "mean": 800, "sigma": 0.8, "min": 1, "max": 4000},
         "workload.output_len": {"dist": "lognormal", "mean": 200, "sigma": 0.8, "min": 1, "max": 1000},
         "workload.max_tokens": "output_len", "max_model_len": 6000}

#: name -> overrides on _BASE; KV caches of a few requests' worth force preemptions
CONFIGS = {
    "chunked_bs1_preempt": {"block_size": 1, "num_gpu_blocks_override": 6001},
    "chunked_bs16_preempt": {"block_size": 16, "num_gpu_blocks_override": 376},
    "chunked_bs1_reference_preempt": {"block_size": 1, "num_gpu_blocks_override": 6001, "exact_steps": True},
    "sglang_page1_preempt": {"engine": "sglang", "num_gpu_blocks_override": 7000},
    "trtllm_bs1_max_utilization": {"engine": "trtllm", "block_size": 1, "num_gpu_blocks_override": 6001,
                                   "capacity_scheduler_policy": "max_utilization"},
    "continuous_bs16_watermark": {"scheduler": "continuous", "block_size": 16, "num_gpu_blocks_override": 400,
                                  "watermark": 0.01},
    "vllm_bs16_closed_2rep": {"engine": "vllm", "block_size": 16, "num_gpu_blocks_override": 500,
                              "num_replicas": 2, "workload.arrival": "inf", "workload.max_concurrency": 24},
    "static_bs1": {"scheduler": "static", "block_size": 1, "workload.num_requests": 60},
}
#: configs whose KV cache is small enough that requests are preempted
PREEMPTING = {"chunked_bs1_preempt", "chunked_bs16_preempt", "chunked_bs1_reference_preempt",
              "sglang_page1_preempt", "trtllm_bs1_max_utilization", "continuous_bs16_watermark"}


def _run(overrides: dict, block_ids: bool, monkeypatch):
    made = []

    def factory(*args, **kw):
        kv = make_kv_cache_manager(*args, block_ids=block_ids, **kw)
        made.append(kv)
        return kv

    with monkeypatch.context() as m:
        m.setattr(deployment, "make_kv_cache_manager", factory)
        res = run_simulation(build_config(overrides={**_BASE, **overrides}))
    assert made, "no KV cache manager was built"
    assert all(isinstance(kv.pool, BlockPool if block_ids else BlockCount) for kv in made)
    return res.result


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_counting_equals_block_ids(name, monkeypatch):
    ids = _run(CONFIGS[name], True, monkeypatch)
    counts = _run(CONFIGS[name], False, monkeypatch)
    assert ids.num_steps == counts.num_steps and ids.num_events == counts.num_events
    assert ids.sim_time_s == counts.sim_time_s
    assert ids.kv_reserved_unused_fraction == counts.kv_reserved_unused_fraction
    assert ids.rejected_reasons == counts.rejected_reasons
    for table in ("requests", "steps"):
        a, b = getattr(ids, table), getattr(counts, table)
        assert list(a) == list(b)
        for col in a:
            assert np.array_equal(a[col], b[col], equal_nan=a[col].dtype.kind == "f"), f"{table}.{col}"
    for x, y in zip(ids.itl, counts.itl):
        assert np.array_equal(x, y)
    assert len(ids.requests["num_preemptions"]) > 0
    if name in PREEMPTING:  # the configs do what they are for
        assert ids.requests["num_preemptions"].sum() > 0, name
    assert ids.steps["kv_cache_usage"].max() > 0


def test_factory_counts_only_without_prefix_caching():
    kv = make_kv_cache_manager("paged", 10, 1, enable_prefix_caching=False, max_model_len=64)
    assert isinstance(kv.pool, BlockCount)
    kv = make_kv_cache_manager("paged", 10, 1, enable_prefix_caching=True, max_model_len=64)
    assert isinstance(kv.pool, BlockPool)
    kv = make_kv_cache_manager("contiguous", 10, 1, enable_prefix_caching=False, max_model_len=8)
    assert isinstance(kv.pool, BlockPool)
    with pytest.raises(ConfigError, match="block_ids=False"):
        KVCacheManager(10, 4, enable_prefix_caching=True, max_model_len=64, block_ids=False)


def test_block_count_by_hand():
    """10 blocks with the null block: 9 usable; take 4 -> usage 4/9."""
    pool = BlockCount(10)
    assert pool.num_free_blocks == 9 and pool.get_usage() == 0.0
    pool.take(4)
    assert pool.num_free_blocks == 5 and pool.get_usage() == 1.0 - 5 / 9
    assert not pool.reset_prefix_cache()  # blocks held
    with pytest.raises(ValueError):
        pool.take(6)
    assert pool.num_free_blocks == 5  # a failed take changes nothing
    pool.release(4)
    assert pool.reset_prefix_cache()
    with pytest.raises(ValueError):
        pool.release(1)  # nothing is held
    with pytest.raises(ConfigError):
        BlockCount(1)


def test_counting_manager_by_hand():
    """bs 4, 6 blocks (5 usable): a 10-token prompt takes 3 blocks (12 slots);
    decodes to 12 tokens fit; the 13th takes a 4th block; a 9-token prompt
    (3 blocks) then does not fit (1 free); freeing returns all 4."""
    kv = KVCacheManager(6, 4, max_model_len=64, block_ids=False)
    a, b = Request(0, 0.0, 10, 8, 8), Request(1, 0.0, 9, 4, 4)
    got = kv.allocate_slots(a, 10, full_sequence_check=True)
    assert got == [NO_BLOCK_ID] * 3 and a.kv_capacity == 12 and kv.num_free_blocks == 2
    a.num_computed_tokens = 10
    assert kv.allocate_slots(a, 2) == [] and kv.num_held_blocks(a) == 3
    a.num_computed_tokens = 12
    assert kv.allocate_slots(a, 1) == [NO_BLOCK_ID] and a.kv_capacity == 16 and kv.num_free_blocks == 1
    assert kv.allocate_slots(b, 9, full_sequence_check=True) is None
    assert kv.num_free_blocks == 1 and kv.num_held_blocks(b) == 0 and b.kv_capacity == 0
    kv.check_invariants()
    with pytest.raises(ValueError, match="counts blocks only"):
        kv.block_table(a)
    a.status = RequestStatus.FINISHED
    kv.free(a)
    assert kv.num_free_blocks == 5 and a.kv_capacity == 0 and kv.num_requests == 0
    kv.check_invariants()


@pytest.mark.parametrize("bs", [1, 3, 16])
def test_counting_manager_tracks_block_id_manager(bs):
    """Random allocate / grow / free sequences on both managers: the same
    success or failure, the same lengths, free counts, capacities and usage."""
    rng = random.Random(bs)
    seen = {"ok": 0, "none": 0, "bulk": 0, "boundary": 0, "freed": 0}
    for _ in range(40):
        num_blocks = rng.randint(2, 40)
        mml = rng.randint(1, 80)
        wm = rng.choice([0.0, 0.0, 0.1])
        ids = KVCacheManager(num_blocks, bs, max_model_len=mml, watermark=wm)
        cnt = KVCacheManager(num_blocks, bs, max_model_len=mml, watermark=wm, block_ids=False)
        reqs = {}
        for _ in range(60):
            op = rng.random()
            if op < 0.35 or not reqs:  # a new request's prompt
                rid = rng.randint(0, 10**6)
                if rid in reqs:
                    continue
                p = rng.randint(1, 60)
                pair = (Request(rid, 0.0, p, 8, 8), Request(rid, 0.0, p, 8, 8))
                n = rng.randint(1, p)
                full = rng.random() < 0.5
                x = ids.allocate_slots(pair[0], n, full_sequence_check=full, has_scheduled_reqs=bool(reqs))
                y = cnt.allocate_slots(pair[1], n, full_sequence_check=full, has_scheduled_reqs=bool(reqs))
                assert (x is None) == (y is None)
                seen["none" if x is None else "ok"] += 1
                if x is not None:
                    assert len(x) == len(y)
                    for r in pair:
                        r.num_computed_tokens = n
                        r.status = RequestStatus.RUNNING
                    reqs[rid] = pair
            elif op < 0.75:  # grow one request
                rid = rng.choice(sorted(reqs))
                n = rng.randint(1, 2 * bs + 1)
                la = rng.choice([0, 0, 2])
                x = ids.allocate_slots(reqs[rid][0], n, num_lookahead_tokens=la)
                y = cnt.allocate_slots(reqs[rid][1], n, num_lookahead_tokens=la)
                assert (x is None) == (y is None)
                seen["none" if x is None else "ok"] += 1
                if x is not None:
                    assert len(x) == len(y)
                    for r in reqs[rid]:
                        r.num_computed_tokens = min(r.num_computed_tokens + n, mml)
            elif op < 0.8 and ids.grows_decode_in_bulk:  # decodes at a block boundary: one block each
                full = [rid for rid in sorted(reqs) if reqs[rid][0].kv_capacity < mml and rng.random() < 0.5]
                for rid in full:  # their decodes filled the blocks held
                    for r in reqs[rid]:
                        r.num_computed_tokens = r.kv_capacity
                if full and rng.random() < 0.5:
                    x = ids.grow_decode_block(reqs[full[0]][0])
                    assert x == cnt.grow_decode_block(reqs[full[0]][1])
                    seen["boundary"] += x
                elif 0 < len(full) <= ids.num_free_blocks:
                    ids.grow_decode_blocks([reqs[rid][0] for rid in full])
                    cnt.grow_decode_blocks([reqs[rid][1] for rid in full])
                    seen["boundary"] += 1
            elif op < 0.9 and ids.grows_decode_in_bulk:  # bulk growth
                group = [rid for rid in sorted(reqs) if rng.random() < 0.5]
                slots = [reqs[rid][0].num_computed_tokens + rng.randint(0, 2 * bs) for rid in group]
                need = sum(max(0, -(-min(s, mml) // bs) - ids.num_held_blocks(reqs[rid][0]))
                           for rid, s in zip(group, slots))
                if need <= ids.num_free_blocks:
                    ids.grow_for_decode([reqs[rid][0] for rid in group], slots)
                    cnt.grow_for_decode([reqs[rid][1] for rid in group], slots)
                    seen["bulk"] += 1
                else:
                    with pytest.raises(RuntimeError):
                        cnt.grow_for_decode([reqs[rid][1] for rid in group], slots)
            else:  # free one
                rid = rng.choice(sorted(reqs))
                ids.free(reqs[rid][0])
                cnt.free(reqs.pop(rid)[1])
                seen["freed"] += 1
            assert ids.num_free_blocks == cnt.num_free_blocks and ids.usage == cnt.usage
            assert ids.num_requests == cnt.num_requests
            assert ids.reserved_unused_fraction == cnt.reserved_unused_fraction
            for a, b in reqs.values():
                assert a.kv_capacity == b.kv_capacity
                assert ids.num_held_blocks(a) == cnt.num_held_blocks(b)
                assert ids.slots_free_in_last_block(a) == cnt.slots_free_in_last_block(b)
            ids.check_invariants()
            cnt.check_invariants()
    assert min(seen.values()) >= 20, seen  # every kind of operation ran, allocations both fit and failed
