"""The fast path (merged decode runs) gives the reference mode's results exactly."""

from __future__ import annotations

import numpy as np
import pytest

from sim.engine.deployment import build_deployment
from sim.runner import make_simulation
from test_engine import cfg_for, simulate

SCENARIOS = {
    "open_loop_poisson": {"workload.arrival": "poisson", "workload.request_rate": 300.0,
                          "workload.num_requests": 600,
                          "workload.input_len": {"dist": "uniform", "low": 20, "high": 300},
                          "workload.output_len": {"dist": "uniform", "low": 5, "high": 120},
                          "max_num_batched_tokens": 512, "max_num_seqs": 64},
    # Runs are timed up to the next send: with three replicas most sends go
    # elsewhere (the run goes on), and the frontend delays each send.
    "open_loop_three_replicas_frontend": {"workload.arrival": "poisson", "workload.request_rate": 400.0,
                                          "workload.num_requests": 500, "num_replicas": 3,
                                          "frontend_latency_s": 2e-3, "frontend_token_s": 2e-5,
                                          "cpu_step_overhead_s": 3e-4, "overlap_scheduling": True,
                                          "workload.input_len": {"dist": "uniform", "low": 20, "high": 300},
                                          "workload.output_len": {"dist": "uniform", "low": 5, "high": 120},
                                          "max_num_batched_tokens": 512},
    # Sparse arrivals, long outputs: runs go on past finishes (Scheduler.max_decode_span),
    # with a host time per sequence and a frontend streaming per token (both per batch size).
    "open_loop_runs_past_finishes": {"workload.arrival": "poisson", "workload.request_rate": 40.0,
                                     "workload.num_requests": 150, "cpu_step_overhead_s": 2e-4,
                                     "cpu_seq_overhead_s": 3e-5, "frontend_token_s": 2e-5,
                                     "workload.input_len": {"dist": "uniform", "low": 20, "high": 300},
                                     "workload.output_len": {"dist": "uniform", "low": 2, "high": 400},
                                     "max_num_batched_tokens": 512},
    "overload_preemption": {"workload.arrival": "inf", "workload.num_requests": 120,
                            "workload.input_len": {"dist": "uniform", "low": 50, "high": 400},
                            "workload.output_len": {"dist": "uniform", "low": 20, "high": 200},
                            "num_gpu_blocks_override": 120, "max_model_len": 1024,
                            "max_num_batched_tokens": 512},
    "prefix_caching_shared_prompts": {"workload.arrival": "poisson", "workload.request_rate": 200.0,
                                      "workload.num_requests": 400, "enable_prefix_caching": True,
                                      "workload.input_len": {"dist": "uniform", "low": 20, "high": 200},
                                      "workload.output_len": {"dist": "uniform", "low": 5, "high": 100},
                                      "workload.shared_prefix": {"fraction": 0.8, "num_prefixes": 3,
                                                                 "prefix_len": 160},
                                      "num_gpu_blocks_override": 200, "max_model_len": 1024},
    "closed_loop_two_replicas": {"workload.max_concurrency": 6, "workload.num_requests": 200,
                                 "num_replicas": 2, "router": "least_outstanding_requests",
                                 "workload.input_len": {"dist": "uniform", "low": 20, "high": 200},
                                 "workload.output_len": {"dist": "uniform", "low": 2, "high": 80}},
    # Sends at unknown times inside merged runs: those runs are interrupted.
    "closed_loop_think_time": {"workload.max_concurrency": 8, "workload.num_requests": 200,
                               "client_think_time_s": 0.03,
                               "workload.input_len": {"dist": "uniform", "low": 20, "high": 200},
                               "workload.output_len": {"dist": "uniform", "low": 20, "high": 200}},
    # Engine CPU overheads (serial and overlapped), frontend latency, client think
    # times and start spread: sends land at arbitrary times inside merged runs.
    "closed_loop_overheads_serial": {"workload.max_concurrency": 12, "workload.num_requests": 240,
                                     "workload.num_warmup_requests": 24,
                                     "workload.input_len": {"dist": "fixed", "value": 120},
                                     "workload.output_len": {"dist": "fixed", "value": 60},
                                     "cpu_step_overhead_s": 2e-4, "cpu_seq_overhead_s": 3e-5,
                                     "frontend_latency_s": 1e-3, "client_think_time_s": 2e-3,
                                     "frontend_token_s": 2e-5, "eager_step_overhead_s": 5e-4,
                                     "client_start_spread_s": 0.01},
    "closed_loop_overheads_overlap": {"workload.max_concurrency": 12, "workload.num_requests": 240,
                                      "workload.input_len": {"dist": "uniform", "low": 20, "high": 200},
                                      "workload.output_len": {"dist": "uniform", "low": 2, "high": 80},
                                      "cpu_step_overhead_s": 3e-4, "cpu_seq_overhead_s": 2e-5,
                                      "overlap_scheduling": True, "client_think_time_s": 1e-3,
                                      "frontend_token_s": 3e-5, "eager_step_overhead_s": 1e-3},
}
MODES = ["chunked", "continuous", "static", "mixed", "prefill_first"]


@pytest.mark.parametrize("scheduler", MODES)
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_fast_mode_equals_reference(scheduler, scenario):
    kw = dict(SCENARIOS[scenario], scheduler=scheduler)
    if scheduler in ("continuous", "mixed", "static"):  # whole prompts: a budget >= max_model_len
        kw["max_num_batched_tokens"] = 4096
    _, ref, _ = simulate(cfg_for(exact_steps=True, **kw))
    _, fast, _ = simulate(cfg_for(exact_steps=False, **kw))
    # Identical schedules: same number of engine steps and tokens; same per-request timings.
    assert fast.num_steps == ref.num_steps
    assert fast.num_events < ref.num_steps  # steps really were merged
    assert ref.num_events >= ref.num_steps
    for key in ("num_output_tokens", "num_prompt_tokens", "num_preemptions", "status", "replica",
                "num_cached_tokens"):
        assert np.array_equal(fast.requests[key], ref.requests[key]), key
    for key in ("arrival_time_s", "first_scheduled_time_s", "first_token_time_s", "finish_time_s"):
        np.testing.assert_allclose(fast.requests[key], ref.requests[key], rtol=1e-9, atol=0)
    assert fast.steps["num_batched_tokens"].sum() == ref.steps["num_batched_tokens"].sum()
    assert fast.steps["num_steps"].sum() == ref.num_steps
    # ITL: same pooled distribution (weights are token counts).
    fv, fw = fast.itl
    rv, rw = ref.itl
    assert fw.sum() == rw.sum()
    for q in (50, 90, 99):
        from sim.results.metrics import weighted_percentile
        assert weighted_percentile(fv, fw, q) == pytest.approx(weighted_percentile(rv, rw, q), rel=1e-9)
    if scenario == "overload_preemption" and scheduler != "static":
        assert ref.requests["num_preemptions"].sum() > 0


@pytest.mark.parametrize("scheduler, scenario, kv_allocation", [
    ("chunked", "open_loop_poisson", "paged"), ("static", "open_loop_poisson", "paged"),
    ("chunked", "open_loop_runs_past_finishes", "paged"), ("chunked", "overload_preemption", "paged"),
    ("chunked", "closed_loop_think_time", "contiguous"), ("static", "open_loop_poisson", "contiguous"),
])
def test_fast_mode_kv_usage_matches_reference(scheduler, scenario, kv_allocation):
    # A merged row records the usage of its last step (the peak is identical) and
    # its time average over its steps (mean_kv_cache_usage), as single steps would:
    # the means agree to rounding, sparse traffic and contiguous reservations included.
    from sim.results.metrics import summarize

    kw = dict(SCENARIOS[scenario], scheduler=scheduler, kv_allocation=kv_allocation)
    if scheduler in ("continuous", "mixed", "static"):  # whole prompts: a budget >= max_model_len
        kw["max_num_batched_tokens"] = 4096
    _, ref, _ = simulate(cfg_for(exact_steps=True, **kw))
    _, fast, _ = simulate(cfg_for(exact_steps=False, **kw))
    assert fast.num_events < ref.num_steps
    sr = summarize(ref.requests, ref.steps, ref.itl, kv_reserved_unused_fraction=ref.kv_reserved_unused_fraction)
    sf = summarize(fast.requests, fast.steps, fast.itl, kv_reserved_unused_fraction=fast.kv_reserved_unused_fraction)
    assert sf["max_kv_cache_usage"] == sr["max_kv_cache_usage"]
    assert sf["mean_kv_cache_usage"] == pytest.approx(sr["mean_kv_cache_usage"], rel=1e-9)
    assert sf["mean_num_running_seqs"] == pytest.approx(sr["mean_num_running_seqs"], rel=1e-9)
    if kv_allocation == "contiguous":
        assert 0.05 < sr["kv_reserved_unused_fraction"] < 1.0
    assert sf["kv_reserved_unused_fraction"] == pytest.approx(sr["kv_reserved_unused_fraction"], rel=1e-9)
    # single steps: the row's mean is its usage
    one = ref.steps["num_steps"] == 1
    assert np.array_equal(ref.steps["mean_kv_cache_usage"][one], ref.steps["kv_cache_usage"][one])


@pytest.mark.parametrize("scheduler, extra", [
    ("static", {}), ("chunked", {"max_num_seqs": 4}), ("chunked", {"max_num_seqs": 4, "overlap_scheduling": True}),
])
def test_fast_mode_queue_length_matches_reference(scheduler, extra):
    """Requests arriving during a merged run wait behind a blocked queue (a static
    batch, max_num_seqs reached): a merged row records the queue at its last step
    and its time average, so the time-averaged queue (what stability checks and
    the timeline read) equals the reference mode's."""
    kw = dict(SCENARIOS["open_loop_poisson"], scheduler=scheduler, **extra)
    if scheduler == "static":
        kw["max_num_batched_tokens"] = 4096
    _, ref, _ = simulate(cfg_for(exact_steps=True, **kw))
    _, fast, _ = simulate(cfg_for(exact_steps=False, **kw))
    assert fast.num_events < ref.num_steps

    def mean_waiting(st):
        return float((st["mean_num_waiting_reqs"] * st["step_time_s"]).sum() / st["step_time_s"].sum())

    assert mean_waiting(ref.steps) > 1.0  # the queue really was blocked
    assert mean_waiting(fast.steps) == pytest.approx(mean_waiting(ref.steps), rel=1e-9)
    assert fast.steps["num_waiting_reqs"].max() == ref.steps["num_waiting_reqs"].max()


@pytest.mark.parametrize("engine", ["vllm", "trtllm", "sglang"])
def test_fast_mode_equals_reference_with_engine_presets(engine):
    # Each preset's batching mode, admission and KV rules with nonzero CPU overheads,
    # frontend latency and client think times (the validate protocol, in small).
    kw = {"engine": engine, "scheduler": None, "max_num_batched_tokens": None, "max_num_seqs": None,
          "workload.max_concurrency": 16, "workload.num_requests": 320, "workload.num_warmup_requests": 32,
          "workload.input_len": {"dist": "fixed", "value": 300}, "workload.output_len": {"dist": "fixed", "value": 40},
          "num_gpu_blocks_override": 400, "max_model_len": 340, "enable_prefix_caching": False,
          "cpu_step_overhead_s": 1e-4, "cpu_seq_overhead_s": 2e-5, "frontend_latency_s": 5e-4,
          "frontend_token_s": 2e-5, "eager_step_overhead_s": 5e-4, "client_think_time_s": 1e-3}
    _, ref, _ = simulate(cfg_for(exact_steps=True, **kw))
    _, fast, _ = simulate(cfg_for(exact_steps=False, **kw))
    assert fast.num_steps == ref.num_steps
    assert fast.num_events < ref.num_events
    for key in ("num_output_tokens", "num_preemptions", "status"):
        assert np.array_equal(fast.requests[key], ref.requests[key]), key
    for key in ("arrival_time_s", "first_scheduled_time_s", "first_token_time_s", "finish_time_s"):
        np.testing.assert_allclose(fast.requests[key], ref.requests[key], rtol=1e-9, atol=0)


def test_open_loop_runs_are_timed_up_to_the_next_send(monkeypatch):
    """Open loop: a merged run is timed up to the next send, so the arrival that
    cuts it lands in its last timed step and no SimPy interrupt is needed. Closed
    loop too: a client's send is known from when its think time starts
    (``Traffic.next_send_s``), and the results above hold for both."""
    import simpy

    calls = []
    orig = simpy.Process.interrupt
    monkeypatch.setattr(simpy.Process, "interrupt", lambda self, cause=None: (calls.append(1), orig(self, cause)))
    _, res, _ = simulate(cfg_for(exact_steps=False, scheduler="chunked", **SCENARIOS["open_loop_poisson"]))
    assert res.num_events < res.num_steps and calls == []
    _, res, _ = simulate(cfg_for(exact_steps=False, scheduler="chunked", **SCENARIOS["closed_loop_think_time"]))
    assert res.num_events < res.num_steps and calls == []


def test_run_goes_on_past_finishes_hand_schedule():
    """Three 20-token prompts at t = 0 with 3, 5 and 8 output tokens. Step 1 is
    their prefill (first tokens); then decode steps with 3, 3, 2, 2, 1, 1, 1
    sequences: A finishes at step 3, B at 5, C at 8. The fast mode advances steps
    2-8 in one run that goes on past both finishes, recorded as three merged
    rows; finish times are the sums of the eight steps' times."""
    from sim.workload.specs import RequestSpecs

    specs = RequestSpecs(arrival_time_s=np.zeros(3), num_prompt_tokens=np.full(3, 20),
                         output_len=np.array([3, 5, 8]), max_tokens=np.array([3, 5, 8]), priority=np.zeros(3))
    results = {}
    for exact in (True, False):
        dep = build_deployment(cfg_for(exact_steps=exact, **{"workload.num_requests": 3}))
        results[exact] = make_simulation(dep, specs).run()
    cm = dep.cost_model
    t = 0.0
    ends = []
    t += cm.step_time_s([20, 20, 20], [0, 0, 0])
    ends.append(t)
    for ctx in ([20] * 3, [21] * 3, [22] * 2, [23] * 2, [24], [25], [26]):
        t += cm.step_time_s([1] * len(ctx), ctx)
        ends.append(t)
    fast, ref = results[False], results[True]
    for res in (fast, ref):
        assert res.num_steps == 8
        assert res.requests["finish_time_s"].tolist() == [ends[2], ends[4], ends[7]]
        assert res.requests["num_output_tokens"].tolist() == [3, 5, 8]
    rows = list(zip(fast.steps["num_steps"].tolist(), fast.steps["num_running_seqs"].tolist()))
    assert rows == [(1, 3), (2, 3), (2, 2), (3, 1)]
    assert fast.steps["start_time_s"].tolist() == [0.0, ends[0], ends[2], ends[4]]
    assert fast.num_events < ref.num_events - 5  # steps 2-8: one event instead of seven
    # ITL: 7 pooled decode gaps per request's later tokens (2 + 4 + 7 = 13 tokens)
    assert fast.itl[1].sum() == ref.itl[1].sum() == 13


@pytest.mark.parametrize("scheduler", ["chunked", "static", "prefill_first"])
def test_load_aware_router_with_overlap_scheduling_routes_as_the_reference(scheduler):
    """Requests waiting for an overlap-scheduled replica's next batch are in
    flight for the router (counted as outstanding from the send), so a merged
    run, which admits them later than single steps do, routes the same."""
    kw = {"model": "llama-3.1-8b", "hardware": "h100_sxm", "scheduler": scheduler,
          "max_num_batched_tokens": 1024, "max_num_seqs": 4, "max_model_len": 1024,
          "workload.input_len": {"dist": "uniform", "low": 1, "high": 513},
          "workload.output_len": {"dist": "uniform", "low": 6, "high": 60}, "workload.num_requests": 120,
          "workload.arrival": "poisson", "workload.request_rate": 300.0, "overlap_scheduling": True,
          "num_replicas": 2, "router": "least_outstanding_requests"}
    _, ref, _ = simulate(cfg_for(exact_steps=True, **kw))
    _, fast, _ = simulate(cfg_for(exact_steps=False, **kw))
    assert fast.num_events < ref.num_steps
    assert np.array_equal(fast.requests["replica"], ref.requests["replica"])
    for key in ("first_scheduled_time_s", "first_token_time_s", "finish_time_s"):
        np.testing.assert_allclose(fast.requests[key], ref.requests[key], rtol=1e-9, atol=0)


@pytest.mark.parametrize("closed_loop", [False, True])
def test_overlap_scheduling_rejects_arrivals_at_the_next_step_as_the_reference(closed_loop):
    """With overlap scheduling an arrival waits for the next batch; one that can
    never run (prompt + max_tokens > max_model_len) is rejected there. A merged
    run behind a blocked queue must not defer it to the run's end: the load a
    router sees (open loop, two replicas) and the client's next send (closed
    loop) depend on when it is rejected."""
    kw = {"model": "llama-3.1-8b", "hardware": "h100_sxm", "scheduler": "chunked", "seed": 60,
          "num_gpu_blocks_override": 150, "max_model_len": 2048, "overlap_scheduling": True,
          "workload.input_len": {"dist": "uniform", "low": 50, "high": 4000},
          "workload.output_len": {"dist": "uniform", "low": 1, "high": 800}, "workload.num_requests": 134,
          "workload.max_tokens": "output_len"}
    if closed_loop:
        kw.update({"workload.max_concurrency": 6, "client_think_time_s": 0.05})
    else:
        kw.update({"workload.arrival": "poisson", "workload.request_rate": 8.0, "num_replicas": 2,
                   "router": "least_outstanding_requests"})
    _, ref, _ = simulate(cfg_for(exact_steps=True, **kw))
    _, fast, _ = simulate(cfg_for(exact_steps=False, **kw))
    from sim.results.metrics import STATUS_REJECTED

    assert (ref.requests["status"] == STATUS_REJECTED).sum() > 10
    assert fast.num_events < ref.num_steps / 2
    assert fast.num_steps == ref.num_steps
    for key in ("replica", "status", "num_preemptions"):
        assert np.array_equal(fast.requests[key], ref.requests[key]), key
    for key in ("arrival_time_s", "first_scheduled_time_s", "first_token_time_s", "finish_time_s"):
        np.testing.assert_allclose(fast.requests[key], ref.requests[key], rtol=1e-9, atol=0)


def test_a_step_that_only_preempts_runs_nothing_and_goes_on():
    """Priority policy, KV nearly full: the running pass preempts the request it
    was making room for and stops (vLLM does the same). That round runs nothing;
    the next one goes on (it used to be taken for a stuck replica: RuntimeError)."""
    kw = {"model": "llama-3.1-8b", "hardware": "h100_sxm", "scheduler": "mixed", "max_model_len": 2048,
          "max_num_batched_tokens": 4096, "max_num_seqs": 8, "num_gpu_blocks_override": 130,
          "enable_prefix_caching": True, "policy": "priority", "seed": 55144, "frontend_token_s": 2e-5,
          "workload.input_len": {"dist": "uniform", "low": 1, "high": 1984}, "workload.output_len": 31,
          "workload.num_requests": 265, "workload.max_concurrency": 37,
          "workload.shared_prefix": {"fraction": 0.3, "num_prefixes": 3, "prefix_len": 16},
          "workload.priority_classes": [{"fraction": 0.8, "priority": 1}, {"fraction": 0.2, "priority": 0}]}
    _, ref, _ = simulate(cfg_for(exact_steps=True, **kw))
    _, fast, _ = simulate(cfg_for(exact_steps=False, **kw))
    assert (ref.requests["status"] == 0).all() and ref.requests["num_preemptions"].sum() > 0
    assert np.array_equal(fast.requests["num_preemptions"], ref.requests["num_preemptions"])
    np.testing.assert_allclose(fast.requests["finish_time_s"], ref.requests["finish_time_s"], rtol=1e-9, atol=0)
