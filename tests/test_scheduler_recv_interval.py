"""SGLang's --scheduler-recv-interval (``scheduler_recv_interval``): a working
scheduler takes new requests only when its pass counter reaches the interval
(decode pass 1, pass with prefill 1000, idle poll 1)."""

from types import SimpleNamespace

import numpy as np
import pytest

from sim.config import build_config
from sim.engine.replica import RECV_WEIGHT_DECODE, RECV_WEIGHT_IDLE, RECV_WEIGHT_OTHER
from sim.engine.simulation import Simulation
from sim.errors import ConfigError
from sim.runner import run_simulation


class _Sched:
    def __init__(self, running):
        self.running = running

    def has_unfinished_requests(self):
        return self.running


def _rep(interval, running=True):
    return SimpleNamespace(recv_interval=interval, recv_counter=0, recv_weight=RECV_WEIGHT_DECODE, held=[],
                           scheduler=_Sched(running))


def _sim():
    got = []
    return SimpleNamespace(admit_to=lambda rep, req: got.append(req), got=got)


def test_held_requests_are_received_on_the_intervals_decode_pass():
    sim, rep = _sim(), _rep(10)
    rep.held = ["a"]
    for n in range(1, 10):  # passes 1..9 of decode: counter 1..9 < 10, still held
        Simulation._maybe_recv(sim, rep)
        assert sim.got == [] and rep.recv_counter == n
    Simulation._maybe_recv(sim, rep)  # the 10th: received, counter reset
    assert sim.got == ["a"] and rep.recv_counter == 0 and rep.held == []
    # after a pass with prefill (weight 1000) the next loop receives at once
    rep.held, rep.recv_weight = ["b"], RECV_WEIGHT_OTHER
    Simulation._maybe_recv(sim, rep)
    assert sim.got == ["a", "b"]
    # nothing running: the loop only polls, held arrivals are taken at once
    rep2 = _rep(30, running=False)
    rep2.held, rep2.recv_weight = ["c"], RECV_WEIGHT_IDLE
    Simulation._maybe_recv(sim, rep2)
    assert sim.got[-1] == "c"
    assert (RECV_WEIGHT_DECODE, RECV_WEIGHT_IDLE, RECV_WEIGHT_OTHER) == (1, 1, 1000)


def _run(interval):
    cfg = build_config(overrides={
        "model": "qwen3-0.6b", "hardware": "h100_sxm", "engine": "sglang", "scheduler_recv_interval": interval,
        "workload.max_concurrency": 4, "workload.num_requests": 24, "workload.arrival": "inf",
        "workload.input_len": {"dist": "fixed", "value": 256}, "workload.output_len": {"dist": "fixed", "value": 64},
        "client_think_time_s": 0.002, "seed": 0,
        # no host time per step: the test is about when arrivals are seen, not about the
        # fewer (batched) prefill steps holding them brings, which a per-step cost rewards
        "cpu_step_overhead_s": 0.0, "cpu_seq_overhead_s": 0.0})
    out = run_simulation(cfg)
    req = out.result.requests
    return req


def test_interval_delays_first_tokens_not_decode():
    base, held = _run(1), _run(10)
    from sim.results.metrics import request_latencies

    ttft = lambda r: float(np.mean(request_latencies(r)["ttft_s"]))  # noqa: E731
    tpot = lambda r: float(np.nanmean(request_latencies(r)["tpot_s"]))  # noqa: E731
    assert ttft(held) > ttft(base)
    # the held requests' prefills batch together; decode steps are the same size class
    assert tpot(held) == pytest.approx(tpot(base), rel=0.15)
    assert len(held["request_id"]) == 24 and (held["status"] == base["status"]).all()


def test_refused_with_attention_dp_or_disaggregation():
    from sim.engine.deployment import build_deployment

    with pytest.raises(ConfigError, match="scheduler_recv_interval: 10 is modelled for aggregated replicas without"):
        build_deployment(build_config(overrides={
            "model": "qwen3-30b-a3b", "hardware": "h100_sxm", "engine": "sglang", "scheduler_recv_interval": 10,
            "data_parallel_size": 2, "enable_expert_parallel": True}))
