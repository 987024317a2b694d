"""Decode spans (the fast path's spans that take in arrivals, gated queues
and, on one replica, the sends themselves) give the reference mode's results
exactly."""

from __future__ import annotations

import numpy as np
import pytest

from test_engine import simulate

# Spans that take in arrivals run on the fitted cost form (h100_sxm's profile):
# whole-prompt arrivals join a running span as a mixed step, a prompt over the
# budget as its chunks' steps (where the span sends the arrivals itself); 1-token
# prompts, a full KV cache (refused joins, preemption), max_num_seqs and chunked
# prompts elsewhere end spans instead. Every case must equal the reference mode.
JOIN_SCENARIOS = {
    "sparse": {"workload.request_rate": 6.0, "workload.num_requests": 120,
               "workload.input_len": {"dist": "lognormal", "mean": 400, "sigma": 1.0, "min": 1, "max": 3000},
               "workload.output_len": {"dist": "lognormal", "mean": 120, "sigma": 1.0, "min": 1, "max": 600}},
    "busy_small_budget": {"workload.request_rate": 40.0, "workload.num_requests": 200,
                          "max_num_batched_tokens": 512, "max_num_seqs": 24,
                          "workload.input_len": {"dist": "uniform", "low": 1, "high": 700},
                          "workload.output_len": {"dist": "uniform", "low": 1, "high": 200}},
    "tight_kv": {"workload.request_rate": 10.0, "workload.num_requests": 200, "num_gpu_blocks_override": 300,
                 "max_model_len": 1024,
                 "workload.input_len": {"dist": "uniform", "low": 20, "high": 600},
                 "workload.output_len": {"dist": "uniform", "low": 20, "high": 300}},
    # A queue that never empties: queued spans gate every step (admissions, preemptions).
    "overload_queue": {"workload.request_rate": 80.0, "workload.num_requests": 400,
                       "num_gpu_blocks_override": 1500, "max_model_len": 4096,
                       "workload.input_len": {"dist": "lognormal", "mean": 400, "sigma": 1.0, "min": 1,
                                              "max": 3000},
                       "workload.output_len": {"dist": "lognormal", "mean": 120, "sigma": 1.0, "min": 1,
                                               "max": 1000}},
    # Chunked prompts and preemptions inside queued spans (a prefilling request preempted too).
    "small_budget_tight_kv": {"workload.request_rate": 10.0, "workload.num_requests": 200,
                              "num_gpu_blocks_override": 300, "max_model_len": 1024,
                              "max_num_batched_tokens": 256,
                              "workload.input_len": {"dist": "uniform", "low": 1, "high": 700},
                              "workload.output_len": {"dist": "uniform", "low": 1, "high": 300}},
    # All at t = 0, KV for a few requests, eager-mode host time on prefill steps: a
    # recompute's last single token is a decode (no eager time) in the reference mode.
    "burst_eager_resume": {"workload.arrival": "inf", "workload.num_requests": 150, "seed": 1,
                           "num_gpu_blocks_override": 150, "max_model_len": 1024,
                           "max_num_batched_tokens": 128, "eager_step_overhead_s": 1e-3,
                           "workload.input_len": {"dist": "uniform", "low": 1, "high": 600},
                           "workload.output_len": {"dist": "uniform", "low": 1, "high": 300}},
    "overheads_two_replicas": {"workload.request_rate": 30.0, "workload.num_requests": 200, "num_replicas": 2,
                               "cpu_step_overhead_s": 2e-4, "cpu_seq_overhead_s": 3e-5,
                               "eager_step_overhead_s": 4e-4, "frontend_latency_s": 1e-3,
                               "workload.input_len": {"dist": "uniform", "low": 2, "high": 900},
                               "workload.output_len": {"dist": "uniform", "low": 1, "high": 150}},
    # The frontend streams each step's tokens (the engine presets do): spans still take
    # arrivals in; first tokens and finishes are seen when streamed.
    "frontend_streaming": {"workload.request_rate": 8.0, "workload.num_requests": 200,
                           "frontend_token_s": 1e-4, "frontend_latency_s": 5e-3,
                           "workload.input_len": {"dist": "uniform", "low": 2, "high": 1500},
                           "workload.output_len": {"dist": "uniform", "low": 1, "high": 300}},
    # One replica: spans send the arrivals themselves (no events), a few rejected on
    # the spot (prompt + max_tokens > max_model_len), the frontend's latency before each.
    # One replica, a budget most prompts exceed: chunked prompts join spans (alone, with
    # arrivals joining at their last chunk's step, or the span ends mid-prompt).
    "inline_chunked_prompts": {"workload.request_rate": 15.0, "workload.num_requests": 400, "seed": 5,
                               "max_num_batched_tokens": 384, "max_num_seqs": 32,
                               "workload.input_len": {"dist": "uniform", "low": 2, "high": 500},
                               "workload.output_len": {"dist": "uniform", "low": 1, "high": 300}},
    # ... with a KV cache that refuses some (blocks to completion beyond the span's slack),
    # and with prefix caching on (prompts without shared prefixes: nothing to hit)
    "inline_chunked_tight_kv": {"workload.request_rate": 6.0, "workload.num_requests": 300, "seed": 6,
                                "max_num_batched_tokens": 384, "num_gpu_blocks_override": 700,
                                "max_model_len": 1024,
                                "workload.input_len": {"dist": "uniform", "low": 2, "high": 500},
                                "workload.output_len": {"dist": "uniform", "low": 1, "high": 300}},
    "inline_chunked_prefix_caching": {"workload.request_rate": 15.0, "workload.num_requests": 300, "seed": 7,
                                      "max_num_batched_tokens": 384, "enable_prefix_caching": True,
                                      "workload.input_len": {"dist": "uniform", "low": 2, "high": 500},
                                      "workload.output_len": {"dist": "uniform", "low": 1, "high": 300}},
    # ... and with the frontend streaming each step's tokens (a chunk's step emits none for it)
    "inline_chunked_frontend": {"workload.request_rate": 15.0, "workload.num_requests": 300, "seed": 8,
                                "max_num_batched_tokens": 384, "frontend_token_s": 1e-4,
                                "frontend_latency_s": 5e-3,
                                "workload.input_len": {"dist": "uniform", "low": 2, "high": 500},
                                "workload.output_len": {"dist": "uniform", "low": 1, "high": 300}},
    "inline_rejects_frontend": {"workload.request_rate": 8.0, "workload.num_requests": 200, "seed": 4,
                                "max_model_len": 1024, "frontend_latency_s": 0.03,
                                "workload.input_len": {"dist": "uniform", "low": 1, "high": 1000},
                                "workload.output_len": {"dist": "uniform", "low": 1, "high": 200}},
}


def _fitted_cfg(**kw):
    base = {"model": "llama-3.1-8b", "hardware": "h100_sxm", "scheduler": "chunked", "seed": 3,
            "enable_prefix_caching": False, "workload.arrival": "poisson", "workload.max_tokens": "output_len"}
    base.update(kw)
    from sim.config import build_config
    return build_config(overrides=base)


@pytest.mark.parametrize("scenario", sorted(JOIN_SCENARIOS))
def test_arrivals_join_spans_as_the_reference_schedules_them(scenario, monkeypatch):
    from sim.accelerated.spans import AcceleratedStepping as Sim
    from sim.accelerated.decode_span import DecodeSpan
    from sim.accelerated.queued_span import QueuedSpan

    joined, refused = [], []
    join, join_span, gate = DecodeSpan.join, Sim._join_span, QueuedSpan.gate

    def gated(*a):
        g = gate(*a)
        if g is None:
            refused.append(1)
        else:
            joined.append(len(g.admitted))
        return g

    monkeypatch.setattr(DecodeSpan, "join", lambda self, step, reqs: joined.append(len(reqs)) or join(self, step, reqs))
    monkeypatch.setattr(Sim, "_join_span", lambda *a: join_span(*a) or refused.append(1))
    monkeypatch.setattr(QueuedSpan, "gate", gated)
    _, ref, _ = simulate(_fitted_cfg(exact_steps=True, **JOIN_SCENARIOS[scenario]))
    _, fast, _ = simulate(_fitted_cfg(exact_steps=False, **JOIN_SCENARIOS[scenario]))
    assert sum(joined) >= 20  # requests really joined spans
    if scenario in ("busy_small_budget", "tight_kv", "overload_queue", "small_budget_tight_kv",
                    "inline_chunked_tight_kv"):
        # ... and some steps could not be taken (chunked prompts, KV, 1-token prompts, preemption)
        assert refused
    _assert_same_run(fast, ref)


def _assert_same_run(fast, ref) -> None:
    """The accelerated run ``fast`` gives the reference run ``ref``'s results."""
    assert fast.num_steps == ref.num_steps
    for key in ("num_output_tokens", "num_prompt_tokens", "num_preemptions", "status", "replica"):
        assert np.array_equal(fast.requests[key], ref.requests[key]), key
    for key in ("arrival_time_s", "first_scheduled_time_s", "first_token_time_s", "finish_time_s"):
        np.testing.assert_allclose(fast.requests[key], ref.requests[key], rtol=1e-9, atol=0)
    np.testing.assert_allclose(fast.requests["preempted_s"], ref.requests["preempted_s"], rtol=1e-9, atol=1e-12)
    for col in ("num_batched_tokens", "num_prefill_tokens", "num_decode_tokens", "num_steps", "num_preempted"):
        assert fast.steps[col].sum() == ref.steps[col].sum(), col
    fv, fw = fast.itl
    rv, rw = ref.itl
    assert fw.sum() == rw.sum()
    assert np.average(fv, weights=fw) == pytest.approx(np.average(rv, weights=rw), rel=1e-12)
    from sim.results.metrics import summarize

    sr, sf = summarize(ref.requests, ref.steps, ref.itl), summarize(fast.requests, fast.steps, fast.itl)
    assert sf["max_kv_cache_usage"] == sr["max_kv_cache_usage"]
    for key in ("mean_kv_cache_usage", "mean_num_running_seqs", "p99_itl_ms", "median_tpot_ms"):
        assert sf[key] == pytest.approx(sr[key], rel=1e-9), key


def test_chunked_prompts_join_spans_as_the_reference_schedules_them(monkeypatch):
    """A prompt over the step's token budget joins a free-running span (one
    replica: the span sends the arrivals itself) as the running passes chunk
    it: alone, with arrivals admitted whole at its last chunk's step, or the
    span ends mid-prompt where an arrival must wait (the chunk takes the
    whole budget) and the engine loop goes on from its computed tokens. Each
    outcome is seen; results equal the reference mode's."""
    from collections import Counter

    from sim.accelerated.spans import AcceleratedStepping as Sim

    outcomes: Counter = Counter()
    chunk_join = Sim._chunk_join

    def spy(self, rep, span, clock, m):
        joins = len(span.joins)
        got = chunk_join(self, rep, span, clock, m)
        if got:
            outcomes["with arrivals" if len(span.joins) > joins + 1 else "alone"] += 1
        elif span.prefilling is not None:
            outcomes["mid-prompt"] += 1
        return got

    monkeypatch.setattr(Sim, "_chunk_join", spy)
    cfg = JOIN_SCENARIOS["inline_chunked_prompts"]
    _, ref, _ = simulate(_fitted_cfg(exact_steps=True, **cfg))
    _, fast, _ = simulate(_fitted_cfg(exact_steps=False, **cfg))
    assert outcomes["alone"] >= 20 and outcomes["with arrivals"] >= 4 and outcomes["mid-prompt"] >= 4, outcomes
    _assert_same_run(fast, ref)


def test_finished_requests_blocks_make_room_for_joins(monkeypatch):
    """A span's slack counts every member's growth to its finish as taken; the
    blocks a finished request returns are room for later joins
    (``DecodeSpan.room``): joins beyond the slack are taken where finishes
    made room, and no allocation fails (results equal the reference mode's)."""
    from sim.accelerated.decode_span import DecodeSpan

    beyond = []
    join = DecodeSpan.join

    def spy(self, step, reqs):
        slack = self.slack
        lasts = join(self, step, reqs)
        if lasts is not None and self.slack < 0:
            beyond.append(slack)
        return lasts

    monkeypatch.setattr(DecodeSpan, "join", spy)
    cfg = JOIN_SCENARIOS["tight_kv"]
    _, ref, _ = simulate(_fitted_cfg(exact_steps=True, **cfg))
    _, fast, _ = simulate(_fitted_cfg(exact_steps=False, **cfg))
    assert len(beyond) >= 5
    _assert_same_run(fast, ref)


def test_spans_take_no_join_past_their_step_cap(monkeypatch):
    """A span takes joins up to ``DecodeSpan.max_join_step`` (its per-step
    records stay bounded): past it the arrival ends the span, the engine loop
    admits it and plans the next; results equal the reference mode's."""
    from sim.accelerated.decode_span import DecodeSpan
    from sim.accelerated.spans import AcceleratedStepping as Sim

    lengths = []
    done = Sim._span_done
    monkeypatch.setattr(Sim, "_span_done", lambda self, rep, span, ends, j, start: lengths.append(j)
                        or done(self, rep, span, ends, j, start))
    monkeypatch.setattr(DecodeSpan, "max_join_step", 300)
    cfg = JOIN_SCENARIOS["sparse"]
    _, ref, _ = simulate(_fitted_cfg(exact_steps=True, **cfg))
    _, fast, _ = simulate(_fitted_cfg(exact_steps=False, **cfg))
    assert len(lengths) >= 5
    # a span past the cap goes on only to its members' finishes (at most 600 output tokens)
    assert max(lengths) <= 300 + 600
    _assert_same_run(fast, ref)


def test_sparse_arrivals_take_few_engine_events():
    """At 6 req/s nearly every arrival joins the span in progress, which sends
    it itself (one replica, open loop): events only where a span ends (an idle
    replica, a prompt chunked), whatever the number of arrivals and steps."""
    _, fast, _ = simulate(_fitted_cfg(exact_steps=False, **JOIN_SCENARIOS["sparse"]))
    n = 120
    assert fast.num_steps > 10 * n
    assert fast.num_events < n // 2


def test_inline_sends_reject_and_count_as_the_reference():
    """Requests a span sends itself that can never run are rejected on the spot
    with their reason and counted, as the arrivals process would."""
    _, ref, _ = simulate(_fitted_cfg(exact_steps=True, **JOIN_SCENARIOS["inline_rejects_frontend"]))
    _, fast, _ = simulate(_fitted_cfg(exact_steps=False, **JOIN_SCENARIOS["inline_rejects_frontend"]))
    from sim.results.metrics import STATUS_REJECTED

    rej = fast.requests["status"] == STATUS_REJECTED
    assert 10 <= rej.sum() < 200
    assert np.array_equal(rej, ref.requests["status"] == STATUS_REJECTED)
    assert fast.rejected_reasons == ref.rejected_reasons
    assert fast.num_events < 100  # events where spans end, not one or two per arrival (200)


def test_overloaded_queue_steps_are_gated_inside_spans(monkeypatch):
    """Requests always waiting and KV full: most steps are taken inside queued
    spans (gated one by one, without an engine event each), and the span ends
    only before steps it cannot take (preemptions among them). Arrivals join
    the queue's tail without waking the replica."""
    from sim.accelerated.queued_span import QueuedSpan

    gated = []
    gate = QueuedSpan.gate
    monkeypatch.setattr(QueuedSpan, "gate", lambda *a: (lambda r: gated.append(r is not None) or r)(gate(*a)))
    _, fast, _ = simulate(_fitted_cfg(exact_steps=False, **JOIN_SCENARIOS["overload_queue"]))
    assert fast.requests["num_preemptions"].sum() > 20
    assert sum(gated) > 0.75 * fast.num_steps
    # ... and the span sends the arrivals itself (one replica): no event per arrival (400)
    assert fast.num_events < 0.1 * len(fast.requests["request_id"])
