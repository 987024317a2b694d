"""Preemption (recompute) and TensorRT-LLM's guaranteed_no_evict, worked by hand.

Pool: 5 blocks of 4 tokens, block 0 is the null block → 4 usable (16 tokens).
A and B: prompt 4, 8 outputs each (max_tokens 8). Step k writes token index
``num_computed``; a request that has emitted j tokens holds ceil((4 + j) / 4)
blocks after writing: 1 block at step 1, 2 blocks at steps 2–5, 3 from step 6.
"""

from __future__ import annotations

from sched_helpers import make, req, run_table

from sim.errors import ConfigError
from sim.scheduler import SchedulerLimits, get_scheduler_class

import pytest

A, B = 0, 1


def test_recompute_preemption_of_running_tail():
    # step | scheduled | notes
    #  1   | A:4, B:4  | 1 block each (free 2)
    #  2-5 | A:1, B:1  | 2 blocks each (free 0)
    #  6   | A:1       | A needs a 3rd block: preempt the tail B (frees 2); no admission this step
    #  7   | A:1       | B (9 tokens = 3 blocks) does not fit the 1 free block
    #  8   | A:1       | A emits its 8th token, finishes, frees 3 blocks
    #  9   | B:9       | B recomputes prompt 4 + its 5 outputs, then samples its 6th
    #  10,11 | B:1     | B finishes at step 11
    s = make("chunked", num_gpu_blocks=5, max_num_batched_tokens=16)
    rows = run_table(s, {1: [req(A, 4, 8), req(B, 4, 8)]})
    toks = [r[0] for r in rows]
    assert toks == [{A: 4, B: 4}] + [{A: 1, B: 1}] * 4 + [{A: 1}] * 3 + [{B: 9}, {B: 1}, {B: 1}]
    assert [r.request_id for r in rows[5][3].preempted] == [B]
    assert all(not r[3].preempted for i, r in enumerate(rows) if i != 5)
    assert [r[2] for r in rows][7] == [A] and rows[-1][2] == [B]
    b = s.finished[-1]
    assert b.request_id == B and b.num_preemptions == 1 and b.num_output_tokens == 8
    assert s.num_preemptions == 1
    assert s.kv.num_free_blocks == s.kv.num_usable_blocks


def test_guaranteed_no_evict_never_preempts_and_admits_later():
    # A reserves blocks to completion: 4 + 8 = 12 tokens = 3 blocks of the 4.
    # B needs 3 blocks but only 4 − 3 = 1 is unreserved, so B waits until A is done.
    s = make("chunked", num_gpu_blocks=5, max_num_batched_tokens=16,
             capacity_scheduler_policy="guaranteed_no_evict")
    rows = run_table(s, {1: [req(A, 4, 8), req(B, 4, 8)]})
    toks = [r[0] for r in rows]
    assert toks == [{A: 4}] + [{A: 1}] * 7 + [{B: 4}] + [{B: 1}] * 7
    assert all(not r[3].preempted for r in rows)
    assert s.num_preemptions == 0


def test_max_utilization_pauses_last_started():
    # Same as the recompute case: B (last started, not yet scheduled) is paused at step 6.
    s = make("chunked", num_gpu_blocks=5, max_num_batched_tokens=16, capacity_scheduler_policy="max_utilization")
    rows = run_table(s, {1: [req(A, 4, 8), req(B, 4, 8)]})
    assert [r.request_id for r in rows[5][3].preempted] == [B]
    assert s.finished[-1].num_output_tokens == 8


def test_continuous_decode_preemption():
    s = make("continuous", num_gpu_blocks=5, max_num_batched_tokens=64)
    rows = run_table(s, {1: [req(A, 4, 8), req(B, 4, 8)]})
    toks = [r[0] for r in rows]
    # Step 6: A's decode needs a block → B preempted; B re-enters by a prefill-only step after A ends.
    assert toks[5] == {A: 1} and [r.request_id for r in rows[5][3].preempted] == [B]
    assert {B: 9} in toks
    assert s.num_preemptions == 1


def test_request_that_can_never_fit_is_rejected_with_reason():
    s = make("chunked", num_gpu_blocks=3, max_num_batched_tokens=16, max_model_len=64)
    r = req(A, 20, 4)  # 24 tokens > 2 usable blocks × 4
    assert s.add_request(r) is False
    assert "KV cache" in r.reason and s.rejected == [r]
    r2 = req(B, 60, 10)
    assert s.add_request(r2) is False and "max_model_len (64)" in r2.reason


def test_bad_limits_and_unknown_scheduler_name_the_key():
    with pytest.raises(ConfigError, match="block_size"):
        SchedulerLimits(max_num_seqs=4, max_num_batched_tokens=8, max_model_len=64, block_size=0)
    with pytest.raises(ConfigError, match="policy"):
        SchedulerLimits(max_num_seqs=4, max_num_batched_tokens=8, max_model_len=64, policy="lifo")
    with pytest.raises(ConfigError, match=r"scheduler.*valid values: chunked, continuous, mixed, prefill_first, prefill_first_mixed, prefill_first_whole, static"):
        get_scheduler_class("orca")


def test_sglang_out_of_kv_with_one_request_left_is_the_engines_own_stop():
    """SGLang's retract_decode keeps one request; with the rest of the pool held
    by the request mid-prefill, that one has no room for its next token and
    SGLang asserts ('No space left for only one request'): a clear
    InfeasibleError naming the requests and blocks, not a crash."""
    import re

    import servesim

    with pytest.raises(servesim.InfeasibleError) as e:
        servesim.simulate(
            model="llama-3.1-8b", hardware="h200_sxm", engine="sglang", seed=5093, max_model_len=2048,
            max_num_seqs=32, max_num_batched_tokens=32, num_gpu_blocks_override=2459,
            workload={"num_requests": 117, "input_len": 370, "arrival": "poisson", "request_rate": 0.9077,
                      "output_len": {"dist": "lognormal", "mean": 108, "sigma": 0.6, "min": 2, "max": 256},
                      "conversation": {"fraction": 1.0, "num_turns": [2, 3], "think_time_s": [0.1, 1.0]}})
    m = re.search(r"one request left decoding: SGLang's retract_decode stops the server here \('No space left for "
                  r"only one request'\)\. Request \d+ holds (\d+) of the (\d+) usable blocks; request \d+, "
                  r"mid-prefill \((\d+) of (\d+) prompt tokens\), holds (\d+);", str(e.value))
    assert m, str(e.value)
    decoding, usable, computed, prompt, prefilling = map(int, m.groups())
    assert usable == 2459 - 1  # the pool less the null block
    assert decoding + prefilling == usable  # nothing free: the two hold the whole pool
    assert prefilling == computed < prompt  # page size 1: a block per computed token, mid-prompt
