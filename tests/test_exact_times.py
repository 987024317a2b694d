"""Events at absolute simulated times: ``env.timeout(t - now)`` fires at
``now + (t - now)``, a neighbour of ``t`` for some pairs, so an arrival's or a
merged run's end would depend on when the waiting process last woke. The
engine schedules such events at exactly ``t`` (``Environment.timeout_at``);
the reference and the accelerated stepping then agree to the last bit."""

import numpy as np
import pytest

from sim.config import build_config
from sim.engine.simulation import Environment
from sim.runner import run_simulation

NOW, T = 4.802269730176029, 79.74042475543028  # now + (T - now) != T in float64


def test_a_relative_timeout_misses_the_time_timeout_at_hits():
    assert NOW + (T - NOW) != T
    env = Environment()
    seen = []
    env.timeout(NOW).callbacks.append(lambda _e: (
        env.timeout(T - env.now).callbacks.append(lambda _f: seen.append(("relative", env.now))),
        env.timeout_at(T).callbacks.append(lambda _f: seen.append(("exact", env.now)))))
    env.run()
    assert dict(seen)["exact"] == T
    assert dict(seen)["relative"] != T
    with pytest.raises(ValueError, match="in the past"):
        env.timeout_at(T - 1.0)


@pytest.mark.parametrize("kw", [
    # a span ending at its clock's last step end (it was off by one ulp: a relative timeout)
    {"engine": "vllm", "enable_prefix_caching": False, "num_gpu_blocks_override": 600,
     "workload.request_rate": 25, "seed": 0},
    # an arrival after requests a span sent inline (the arrival process woke elsewhere)
    {"engine": "vllm", "num_gpu_blocks_override": 1500, "workload.request_rate": 25, "seed": 1},
])
def test_reference_and_accelerated_agree_to_the_bit(kw):
    def run(exact):
        base = {"model": "llama-3.1-8b", "hardware": "h100_sxm", "exact_steps": exact, "max_model_len": 8192,
                "workload.arrival": "poisson", "workload.num_requests": 300,
                "workload.input_len": {"dist": "lognormal", "mean": 1024, "sigma": 1.0, "min": 1, "max": 8192},
                "workload.output_len": {"dist": "lognormal", "mean": 256, "sigma": 1.0, "min": 1, "max": 2048},
                "workload.max_tokens": "output_len", **kw}
        return run_simulation(build_config(overrides=base)).result

    ref, fast = run(True), run(False)
    assert fast.num_events < ref.num_events
    assert ref.num_steps == fast.num_steps
    for k in ref.requests:
        np.testing.assert_array_equal(ref.requests[k], fast.requests[k], err_msg=k)


def test_a_clock_past_float_resolution_is_an_error_not_rounded_latencies(monkeypatch):
    """A run whose clock passes MAX_SIMULATED_CLOCK_S (2e9 s, where float64 no
    longer resolves a microsecond; a profile far too slow, or a backlog that
    never drains) is refused rather than reported with rounded latencies. The
    limit is lowered here so that a short run reaches it."""
    import sim.engine.simulation as simulation
    from sim.errors import InfeasibleError

    cfg = build_config(overrides={"model": "llama-3.1-8b", "hardware": "h100_sxm", "max_model_len": 2048,
                                  "workload.arrival": "inf", "workload.num_requests": 4,
                                  "workload.input_len": {"dist": "fixed", "value": 1000},
                                  "workload.output_len": {"dist": "fixed", "value": 50}})
    end = run_simulation(cfg).result.sim_time_s
    monkeypatch.setattr(simulation, "MAX_SIMULATED_CLOCK_S", end / 2)
    with pytest.raises(InfeasibleError, match=r"simulated clock reached .* beyond .* s \(~63 years\)"):
        run_simulation(cfg)
