"""TensorRT-LLM ``max_utilization``: pause, freed blocks and recompute, worked by hand.

Sources (``NVIDIA/TensorRT-LLM``): ``cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp``
(``MaxUtilizationScheduler``: on a shortfall pause the last started request in
``[current, end)`` of ``active_requests``), ``tensorrt_llm/_torch/pyexecutor/py_executor.py``
(``_pause_requests``: ``req.pause(max_input_len)`` then ``_terminate_request`` →
``free_resources``), ``llmRequest.h::pause`` (generated tokens folded into the
prompt, state back to ``CONTEXT_INIT``), ``resource_manager.py``
(``add_sequence(prompt_len)`` at the first context chunk: the whole prompt's
blocks at once).

Pool: 5 blocks of 4 tokens, block 0 is the null block → 4 usable. Token budget 4.
A: prompt 4, 8 outputs. B: prompt 8, 4 outputs. A request holds
ceil(tokens written / 4) blocks; A writes slot 3 + k at step k ≥ 2.

step | scheduled  | blocks A, B, free | notes
 1   | A:4        | 1, 0, 3           | A's prompt; B waits (budget spent)
 2   | A:1, B:3   | 2, 2, 0           | B's first chunk takes its whole prompt's 2 blocks
 3   | A:1, B:3   | 2, 2, 0           |
 4   | A:1, B:2   | 2, 2, 0           | B's prompt done: its 1st output
 5   | A:1        | 2, 0, 2           | B's decode needs a 3rd block: B (last started) paused, its 2 blocks freed
 6   | A:1        | 3, 0, 1           | A's 3rd block; B (8 + 1 generated = 9 tokens, 3 blocks) does not fit
 7,8 | A:1        |                   | A finishes at step 8 (8 outputs), frees 3 blocks
 9   | B:4        | 0, 3, 1           | B resumes: recompute of prompt + its 1 output, whole 3 blocks taken
 10  | B:4        |                   |
 11  | B:1        |                   | recompute done (9 tokens): B's 2nd output
 12,13 | B:1      |                   | B finishes at step 13
"""

from __future__ import annotations

from sched_helpers import make, req, step

A, B = 0, 1


def _sched():
    return make("chunked", num_gpu_blocks=5, max_num_batched_tokens=4,
                capacity_scheduler_policy="max_utilization")


def test_pause_frees_blocks_and_resume_recomputes_prompt_and_outputs():
    s = _sched()
    a, b = req(A, 4, 8), req(B, 8, 4)
    s.add_request(a)
    s.add_request(b)
    rows, free = [], []
    while s.has_unfinished_requests():
        rows.append(step(s))
        free.append(s.kv.num_free_blocks)
    toks = [r[0] for r in rows]
    assert toks == ([{A: 4}, {A: 1, B: 3}, {A: 1, B: 3}, {A: 1, B: 2}] + [{A: 1}] * 4
                    + [{B: 4}, {B: 4}, {B: 1}, {B: 1}, {B: 1}])
    # blocks free after each step: B's whole prompt taken at its first chunk (step 2);
    # B's 2 freed at its pause (step 5); A's 3 freed at its end (step 8); B's 3 at its end
    assert free == [3, 0, 0, 0, 2, 1, 1, 4, 1, 1, 1, 1, 4]
    paused = [i + 1 for i, r in enumerate(rows) if r[3].preempted]
    assert paused == [5] and rows[4][3].preempted == [b]
    assert rows[3][1] == [A, B]          # B's 1st output at step 4
    assert rows[10][1] == [B]            # its 2nd only after the 9-token recompute
    assert b.num_preemptions == 1 and b.num_output_tokens == 4 and a.num_output_tokens == 8
    assert s.finished == [a, b]


def test_whole_prompt_blocks_taken_at_first_chunk_only_with_a_capacity_policy():
    # vLLM (no capacity policy) takes blocks chunk by chunk: after step 2 B holds
    # 1 block for its 3 tokens, leaving 1 free; TensorRT-LLM takes both at once.
    for policy, free_after_2 in ((None, 1), ("max_utilization", 0), ("guaranteed_no_evict", None)):
        s = make("chunked", num_gpu_blocks=5, max_num_batched_tokens=4, capacity_scheduler_policy=policy)
        s.add_request(req(A, 4, 8))
        s.add_request(req(B, 8, 4))
        step(s)
        tokens = step(s)[0]
        if policy == "guaranteed_no_evict":
            # A reserves 3 blocks to completion, B needs 3: B waits for A's end
            assert tokens == {A: 1} and s.kv.num_free_blocks == 2
        else:
            assert tokens == {A: 1, B: 3} and s.kv.num_free_blocks == free_after_2
