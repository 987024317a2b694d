"""Hand-worked schedules: three requests under each batching mode.

Requests (block_size 4): A prompt 6 → 3 outputs, B prompt 5 → 2, C prompt 10 → 2.
Each table row is one engine step: tokens scheduled per request, which
requests receive a token (A1 = A's first output), which finish.
"""

from __future__ import annotations

from sched_helpers import make, req, run_table, step

A, B, C = 0, 1, 2


def test_chunked_budget_8_all_arrive_at_once():
    # budget 8, threshold 0. Worked by hand (vLLM v1 order: running first, then waiting):
    # step | scheduled             | emitted        | finished
    #  1   | A:6, B:2 (chunk)      | A1             |
    #  2   | A:1, B:3, C:4 (chunk) | A2, B1         |
    #  3   | A:1, B:1, C:6         | A3, B2, C1     | A, B
    #  4   | C:1                   | C2             | C
    s = make("chunked", max_num_batched_tokens=8)
    rows = run_table(s, {1: [req(A, 6, 3), req(B, 5, 2), req(C, 10, 2)]})
    assert [r[0] for r in rows] == [{A: 6, B: 2}, {A: 1, B: 3, C: 4}, {A: 1, B: 1, C: 6}, {C: 1}]
    assert [r[1] for r in rows] == [[A], [A, B], [A, B, C], [C]]
    assert [r[2] for r in rows] == [[], [], [A, B], [C]]
    # Cost-model inputs of step 2: new tokens and context already cached.
    out2 = rows[1][3]
    assert out2.new_tokens == [1, 3, 4] and out2.context_lens == [6, 2, 0]
    assert out2.num_decode_tokens == 1 and out2.num_prefill_tokens == 7


def test_continuous_prefill_stalls_decodes():
    # budget ≥ max_model_len (64); C arrives before step 2.
    # step | scheduled       | emitted    | finished
    #  1   | A:6, B:5        | A1, B1     |
    #  2   | C:10 (prefill only: A and B stall) | C1 |
    #  3   | A:1, B:1, C:1   | A2, B2, C2 | B, C
    #  4   | A:1             | A3         | A
    s = make("continuous", max_num_batched_tokens=64)
    rows = run_table(s, {1: [req(A, 6, 3), req(B, 5, 2)], 2: [req(C, 10, 2)]})
    assert [r[0] for r in rows] == [{A: 6, B: 5}, {C: 10}, {A: 1, B: 1, C: 1}, {A: 1}]
    assert [r[1] for r in rows] == [[A, B], [C], [A, B, C], [A]]
    assert [r[2] for r in rows] == [[], [], [B, C], [A]]


def test_chunked_same_arrivals_as_continuous_mixes_prefill_and_decode():
    # Same input as the continuous test, budget 8:
    #  1 | A:6, B:2        | A1      |
    #  2 | A:1, B:3, C:4   | A2, B1  |      (C arrived; B's prompt done; C chunked)
    #  3 | A:1, B:1, C:6   | A3,B2,C1| A, B
    #  4 | C:1             | C2      | C
    s = make("chunked", max_num_batched_tokens=8)
    rows = run_table(s, {1: [req(A, 6, 3), req(B, 5, 2)], 2: [req(C, 10, 2)]})
    assert [r[0] for r in rows] == [{A: 6, B: 2}, {A: 1, B: 3, C: 4}, {A: 1, B: 1, C: 6}, {C: 1}]


def test_static_batch_runs_to_the_longest_and_blocks_late_arrivals():
    # C arrives before step 2 but cannot join the running batch.
    # step | scheduled          | cost rows (new, ctx)    | emitted | finished
    #  1   | A:6, B:5 (prefill) | (6,0) (5,0)             | A1, B1  |
    #  2   | A:1, B:1           | (1,6) (1,5)             | A2, B2  | B
    #  3   | A:1 + B as padding | (1,7) (1,6)             | A3      | A  → batch ends, KV freed
    #  4   | C:10 (prefill)     | (10,0)                  | C1      |
    #  5   | C:1                | (1,10)                  | C2      | C
    s = make("static", max_num_batched_tokens=64)
    rows = run_table(s, {1: [req(A, 6, 3), req(B, 5, 2)], 2: [req(C, 10, 2)]})
    assert [r[0] for r in rows] == [{A: 6, B: 5}, {A: 1, B: 1}, {A: 1}, {C: 10}, {C: 1}]
    assert [r[1] for r in rows] == [[A, B], [A, B], [A], [C], [C]]
    assert [r[2] for r in rows] == [[], [B], [A], [], [C]]
    out3 = rows[2][3]
    assert out3.new_tokens == [1, 1] and out3.context_lens == [7, 6]
    # B's reserved blocks stay held while A finishes; all are free at the end.
    assert s.kv.num_free_blocks == s.kv.num_usable_blocks


def test_static_reserves_prompt_plus_max_tokens():
    # 4 usable blocks of 4 tokens. A: 6 + max_tokens 6 = 12 tokens = 3 blocks; B: 5 + 2 = 7 = 2 blocks.
    # B does not fit beside A, so the first batch is A alone.
    s = make("static", num_gpu_blocks=5, max_num_batched_tokens=64)
    s.add_request(req(A, 6, 3, max_tokens=6))
    s.add_request(req(B, 5, 2))
    out = s.schedule()
    assert [r.request_id for r in out.scheduled] == [A]
    assert s.kv.num_free_blocks == 1


def test_long_prefill_token_threshold_caps_chunks():
    # threshold 3, budget 8: A (prompt 6) and B (prompt 5) both start chunked at 3 tokens.
    s = make("chunked", max_num_batched_tokens=8, long_prefill_token_threshold=3)
    rows = run_table(s, {1: [req(A, 6, 1), req(B, 5, 1)]})
    assert [r[0] for r in rows] == [{A: 3, B: 3}, {A: 3, B: 2}]


def test_max_num_seqs_limits_admission():
    s = make("chunked", max_num_batched_tokens=64, max_num_seqs=2)
    rows = run_table(s, {1: [req(A, 6, 1), req(B, 5, 1), req(C, 10, 1)]})
    assert [r[0] for r in rows] == [{A: 6, B: 5}, {C: 10}]


def test_priority_policy_orders_waiting_queue():
    s = make("chunked", max_num_batched_tokens=10, policy="priority")
    s.add_request(req(A, 6, 1, priority=5))
    s.add_request(req(B, 5, 1, priority=0))
    out = s.schedule()
    # B (priority 0) first, then A gets the remaining 5 tokens of the budget.
    assert [(r.request_id, n) for r, n in zip(out.scheduled, out.num_scheduled_tokens)] == [(B, 5), (A, 5)]


# --------------------------------------------------------------------------- mixed (TRT IFB)


def test_mixed_packs_whole_prompts_with_decodes():
    # budget 12, no chunking: a prompt that does not fit what is left waits whole.
    # step | scheduled            | emitted     | finished
    #  1   | A:6, B:5 (C: 10 > 1) | A1, B1      |
    #  2   | A:1, B:1, C:10       | A2, B2, C1  | B
    #  3   | A:1, C:1             | A3, C2      | A, C
    s = make("mixed", max_num_batched_tokens=12)
    rows = run_table(s, {1: [req(A, 6, 3), req(B, 5, 2), req(C, 10, 2)]})
    assert [r[0] for r in rows] == [{A: 6, B: 5}, {A: 1, B: 1, C: 10}, {A: 1, C: 1}]
    assert [r[1] for r in rows] == [[A, B], [A, B, C], [A, C]]
    assert [r[2] for r in rows] == [[], [B], [A, C]]
    # Step 2 packs two decodes and a whole 10-token context: (new, ctx) rows.
    out2 = rows[1][3]
    assert out2.new_tokens == [1, 1, 10] and out2.context_lens == [6, 5, 0]


def test_mixed_late_arrival_joins_decodes_unlike_continuous():
    # Same arrivals as test_continuous_prefill_stalls_decodes (C before step 2), budget 64:
    # mixed never stalls A and B for C's prefill.
    #  1 | A:6, B:5         | A1, B1     |
    #  2 | A:1, B:1, C:10   | A2, B2, C1 | B
    #  3 | A:1, C:1         | A3, C2     | A, C
    s = make("mixed", max_num_batched_tokens=64)
    rows = run_table(s, {1: [req(A, 6, 3), req(B, 5, 2)], 2: [req(C, 10, 2)]})
    assert [r[0] for r in rows] == [{A: 6, B: 5}, {A: 1, B: 1, C: 10}, {A: 1, C: 1}]


def test_mixed_rejects_prompt_larger_than_budget():
    s = make("mixed", max_num_batched_tokens=8)
    big = req(C, 10, 2)
    assert not s.add_request(big)
    assert "max_num_batched_tokens" in big.reason


# --------------------------------------------------------------------------- prefill_first (SGLang)


def test_prefill_first_runs_prefill_batches_before_any_decode():
    # chunk budget 8, input budget (max_prefill_tokens) 16, ample KV.
    # step | scheduled                      | emitted    | finished
    #  1   | A:6, B:2 (B cut at the chunk)  | A1         |
    #  2   | B:3 (chunked first), C:5 (cut) | B1         |       A stalls: no decode
    #  3   | C:5                            | C1         |       A, B stall
    #  4   | A:1, B:1, C:1 (decode)         | A2, B2, C2 | B, C
    #  5   | A:1                            | A3         | A
    s = make("prefill_first", max_num_batched_tokens=8, max_prefill_tokens=16)
    rows = run_table(s, {1: [req(A, 6, 3), req(B, 5, 2), req(C, 10, 2)]})
    assert [r[0] for r in rows] == [{A: 6, B: 2}, {B: 3, C: 5}, {C: 5}, {A: 1, B: 1, C: 1}, {A: 1}]
    assert [r[1] for r in rows] == [[A], [B], [C], [A, B, C], [A]]
    assert [r[2] for r in rows] == [[], [], [], [B, C], [A]]
    assert rows[1][3].num_decode_tokens == 0  # prefill steps carry no decodes


def test_prefill_first_whole_never_cuts_prompts():
    # input budget 16: A (6) and B (5) fit; C (10 >= 5 left) waits for the next batch.
    #  1 | A:6, B:5        | A1, B1     |
    #  2 | C:10            | C1         |
    #  3 | A:1, B:1, C:1   | A2, B2, C2 | B, C
    #  4 | A:1             | A3         | A
    s = make("prefill_first_whole", max_num_batched_tokens=8, max_prefill_tokens=16)
    rows = run_table(s, {1: [req(A, 6, 3), req(B, 5, 2), req(C, 10, 2)]})
    assert [r[0] for r in rows] == [{A: 6, B: 5}, {C: 10}, {A: 1, B: 1, C: 1}, {A: 1}]
    assert [r[2] for r in rows] == [[], [], [B, C], [A]]


def test_prefill_first_admission_takes_the_cached_prefix():
    # SGLang's radix cache (on by default): B shares A's first 8 tokens (two blocks of 4, one
    # key each); admitted after A's prefill, it matches them and prefills its other 2 tokens
    # (req.extend_input_len), which is also what the budgets count. Cache off: all 10.
    #  1 | A:12       | A1
    #  2 | B:2 (8 hit) | B1      (A stalls: a prefill batch)
    #  3 | A:1, B:1   | A2, B2  | A, B
    for prefix, b_tokens, hit in ((True, 2, 8), (False, 10, 0)):
        s = make("prefill_first_whole", max_num_batched_tokens=16, max_prefill_tokens=16, prefix=prefix)
        b = req(B, 10, 2, prefix_keys=(7, 8), prefix_chunk_tokens=4)
        rows = run_table(s, {1: [req(A, 12, 2, prefix_keys=(7, 8), prefix_chunk_tokens=4)], 2: [b]})
        assert [r[0] for r in rows] == [{A: 12}, {B: b_tokens}, {A: 1, B: 1}]
        assert b.num_cached_tokens == hit


def test_prefill_first_mixed_decodes_running_requests_in_prefill_batches():
    # SGLang --enable-mixed-chunk: chunk budget 8, input budget 16, ample KV. A prefill batch
    # carries one decode token of every running request (the one mid-chunk excepted) and
    # their count comes off both budgets (PrefillAdder mixed_with_decode_tokens = running_bs).
    # step | running decodes | budgets (chunk, input) | scheduled            | emitted
    #  1   | -               | 8, 16                  | A:6, B:2 (B cut)     | A1
    #  2   | A               | 8-1=7, 16-1=15         | B:3, C:4 (cut), A:1  | B1, A2
    #  3   | A, B            | 8-2=6, 16-2=14         | C:6, A:1, B:1        | C1, A3, B2  (A, B done)
    #  4   | C               | (no waiting: decode)   | C:1                  | C2          (C done)
    # (prefill_first on the same arrivals, test above, cuts C at 5 in step 2 and stalls A, B.)
    s = make("prefill_first_mixed", max_num_batched_tokens=8, max_prefill_tokens=16)
    rows = run_table(s, {1: [req(A, 6, 3), req(B, 5, 2), req(C, 10, 2)]})
    assert [r[0] for r in rows] == [{A: 6, B: 2}, {B: 3, C: 4, A: 1}, {C: 6, A: 1, B: 1}, {C: 1}]
    assert [r[1] for r in rows] == [[A], [B, A], [C, A, B], [C]]
    assert [sorted(r[2]) for r in rows] == [[], [], [A, B], [C]]
    assert (rows[1][3].num_prefill_tokens, rows[1][3].num_decode_tokens) == (7, 1)
    assert (rows[2][3].num_prefill_tokens, rows[2][3].num_decode_tokens) == (6, 2)


def test_prefill_first_mixed_runs_in_the_reference_mode():
    # no merged-run rules: its prefill batches decode too, which PrefillFirstRuns' spans do not do
    from sim.accelerated.policies import decode_runs_for

    assert decode_runs_for(make("prefill_first_mixed")) is None
    assert decode_runs_for(make("prefill_first")) is not None


def test_prefill_first_mixed_running_decodes_shrink_the_input_budget():
    # max_prefill_tokens = isl + 1500 as aiconfigurator writes it, isl 1000, 400 running decodes:
    # rem_input = 2500 - 400 = 2100; the first prompt always fits an empty batch (1000 left 1100),
    # the second needs 1000 < 1100: admitted; the third (1000 >= 100 left) waits. Without the
    # running decodes (prefill_first) the same budget takes two as well, and with 600 running
    # (rem_input 1900 -> 900 after one) only one.
    for running, admitted in ((400, 2), (600, 1)):
        s = make("prefill_first_mixed", num_gpu_blocks=10**6, block_size=1, max_num_seqs=10**4,
                 max_num_batched_tokens=8192, max_prefill_tokens=2500, max_model_len=4096)
        for i in range(running):  # one-token prompts, long outputs: all running after one batch
            s.add_request(req(1000 + i, 1, 100))
        step(s)
        assert len(s.running) == running
        for i in range(3):
            s.add_request(req(i, 1000, 10))
        tokens, *_ = step(s)
        assert sum(1 for k, n in tokens.items() if n == 1000) == admitted
        assert sum(1 for n in tokens.values() if n == 1) == running  # every running request decoded


def test_prefill_first_admission_reserves_and_decode_oom_retracts():
    # Token-granular pool (block_size 1) of 20 usable tokens; A, B, C: prompt 2, 6 outputs.
    # Admission (SGLang PrefillAdder): input + min(max_new, 4096) must stay below
    # free − Σ running (max_new − generated) × new_token_ratio (0.7 before any decode).
    #  1 | A:2, B:2  | A: 2+6=8 < 20; B: 8 < 20-8=12; C: 8 >= 20-16=4 stops
    #  2 | C:2       | free 16, reserved (5+5) x 0.7 = 7: 8 < 9 → C admitted; A, B stall
    #  3-6 | A,B,C:1 | decodes; held 9, 12, 15, 18 tokens
    #  7 | A:1       | 3 more tokens needed, 2 free → retract C (fewest outputs, ties keep
    #    |           | order: the last), then B (the rest need 20 steps x 1 token each);
    #    |           | A emits its 6th token and finishes
    #  8 | C:7, B:1  | retracted requests recompute prompt + 5 outputs: C whole, B cut at
    #    |           | the 8-token chunk budget; C emits its 6th token
    #  9 | B:6       | B's last chunk; B emits its 6th token
    s = make("prefill_first", num_gpu_blocks=21, block_size=1, max_num_batched_tokens=8, max_prefill_tokens=16)
    rows = run_table(s, {1: [req(A, 2, 6), req(B, 2, 6), req(C, 2, 6)]})
    assert [r[0] for r in rows] == ([{A: 2, B: 2}, {C: 2}] + [{A: 1, B: 1, C: 1}] * 4
                                    + [{A: 1}, {C: 7, B: 1}, {B: 6}])
    assert [r.request_id for r in rows[6][3].preempted] == [C, B]
    assert [r[2] for r in rows] == [[]] * 6 + [[A], [C], [B]]
    assert s.num_preemptions == 2
    # After the retraction the ratio is recomputed from A alone: (5 + 20) / 6 → capped at 1.
    assert s.new_token_ratio == 1.0
    assert s.kv.num_free_blocks == s.kv.num_usable_blocks
