"""Property tests: random request streams, pool sizes and limits, every mode."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sched_helpers import make
from sim.request import Request, RequestStatus

request_st = st.tuples(st.integers(1, 40), st.integers(1, 20), st.integers(0, 12), st.integers(0, 3))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=st.sampled_from(["chunked", "continuous", "static", "mixed", "prefill_first", "prefill_first_whole"]),
    cap=st.sampled_from([None, "guaranteed_no_evict", "max_utilization"]),
    policy=st.sampled_from(["fcfs", "priority"]),
    reqs=st.lists(request_st, min_size=1, max_size=12),
    num_blocks=st.integers(3, 30),
    budget=st.integers(4, 48),
    max_num_seqs=st.integers(1, 6),
    prefix=st.booleans(),
)
def test_invariants_hold_for_random_streams(mode, cap, policy, reqs, num_blocks, budget, max_num_seqs, prefix):
    if mode in ("static", "prefill_first", "prefill_first_whole"):
        cap = None  # these modes have their own admission rules
    max_model_len = 64
    budget = max(budget, max_num_seqs)
    if mode in ("continuous", "mixed"):
        budget = max(budget, max_model_len)
    s = make(mode, num_gpu_blocks=num_blocks, max_num_batched_tokens=budget, max_num_seqs=max_num_seqs,
             max_model_len=max_model_len, prefix=prefix, policy=policy, capacity_scheduler_policy=cap)
    kv = s.kv
    requests = []
    for i, (prompt, out, arrive, prio) in enumerate(reqs):
        keys = (1, 2, 3) if prefix and i % 2 else None  # half share a 3-chunk prefix
        requests.append((arrive, Request(i, float(arrive), prompt, out, out, priority=prio,
                                         prefix_keys=keys, prefix_chunk_tokens=4)))
    added: set[int] = set()
    for k in range(2000):
        for arrive, r in requests:
            if arrive == k:
                s.add_request(r)
                added.add(r.request_id)
        if len(added) == len(requests) and not s.has_unfinished_requests():
            break
        out = s.schedule()
        # Nothing unadmitted is scheduled; limits hold.
        running_ids = {r.request_id for r in s.running}
        assert all(r.request_id in running_ids for r in out.scheduled)
        assert len(s.running) <= max_num_seqs
        if mode not in ("static", "prefill_first_whole"):  # these run a whole batch / prompt
            assert sum(out.num_scheduled_tokens) <= budget
        if mode.startswith("prefill_first"):  # prefill steps never carry decodes
            assert out.num_prefill_tokens == 0 or out.num_decode_tokens == 0
        assert all(n >= 1 for n in out.num_scheduled_tokens)
        s.update_from_output(out)
        # Blocks conserved: free + held = usable.
        kv.check_invariants()
        if s._no_evict_headroom is not None and s._no_evict_num_running == len(s.running):
            # guaranteed_no_evict's kept headroom is the rule counted afresh
            assert s._no_evict_headroom == kv.num_free_blocks - s._no_evict_reserved_blocks()
        held = {b for r in s.running for b in kv.block_table(r)}
        if mode == "static":
            held |= {b for r in s.batch for b in kv.block_table(r)}
        assert kv.num_free_blocks + len(held) == kv.num_usable_blocks
    else:
        raise AssertionError("did not drain in 2000 steps")
    # Every request finished or was rejected with a reason; nothing lost.
    for _, r in requests:
        assert r.status in (RequestStatus.FINISHED, RequestStatus.REJECTED)
        if r.status == RequestStatus.REJECTED:
            assert r.reason
        else:
            assert r.num_output_tokens == r.num_output_tokens_target
    assert len(s.finished) + len(s.rejected) == len(requests)
    assert kv.num_free_blocks == kv.num_usable_blocks
    if cap == "guaranteed_no_evict":
        assert s.num_preemptions == 0
