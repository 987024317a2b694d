"""Synthetic arrivals, lengths, shared prefixes and conversations (sim/workload)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.workload import (WorkloadConfig, arrival_times, arrival_times_until, generate_requests,
                          sample_lengths)
from sim.workload.config import FixedLen, LognormalLen, UniformLen


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def synth(**kw) -> WorkloadConfig:
    base = {"input_len": {"dist": "fixed", "value": 100}, "output_len": {"dist": "fixed", "value": 50},
            "num_requests": 100, "request_rate": 10.0}
    base.update(kw)
    return WorkloadConfig.from_dict(base, source="test")


# ------------------------------------------------------------------ arrivals
def test_poisson_mean_rate_without_rescale():
    # 2000 s at 5 req/s: 10,000 expected, Poisson sd 100.
    t = arrival_times_until(2000.0, "poisson", 5.0, 1.0, rng(1))
    assert abs(len(t) - 10_000) < 400
    assert t.max() <= 2000.0 and np.all(np.diff(t) >= 0)
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(0.2, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV 1


def test_rescale_last_arrival_is_n_over_rate_as_vllm():
    n, rate, b = 1000, 4.0, 0.5
    t = arrival_times(n, "gamma", rate, b, rng(3))
    assert t[-1] == pytest.approx(n / rate, rel=1e-12)
    # vLLM get_request: gaps Gamma(b, 1/(rate·b)), cumulative, times (n/rate)/last.
    g = rng(3).gamma(b, 1.0 / (rate * b), size=n)
    c = np.cumsum(g)
    np.testing.assert_allclose(t, c * (n / rate) / c[-1], rtol=1e-12)
    assert t[0] > 0  # the first request also waits one gap, as in vLLM


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_cv_is_one_over_sqrt_burstiness(burstiness):
    t = arrival_times(100_000, "gamma", 2.0, burstiness, rng(5))
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


def test_constant_and_inf_arrivals():
    np.testing.assert_allclose(arrival_times(4, "constant", 2.0, 1.0, rng()), [0.5, 1.0, 1.5, 2.0])
    np.testing.assert_array_equal(arrival_times(3, "inf", 2.0, 1.0, rng()), [0, 0, 0])
    # gamma with infinite burstiness is constant (vLLM)
    np.testing.assert_allclose(arrival_times(3, "gamma", 1.0, math.inf, rng()), [1, 2, 3])
    assert len(arrival_times_until(10.0, "constant", 2.0, 1.0, rng())) == 20
    # vLLM's default: no rate = every request at t = 0
    specs = generate_requests(synth(request_rate=None), seed=0)
    assert np.all(specs.arrival_time_s == 0)
    specs = generate_requests(synth(request_rate="inf"), seed=0)
    assert np.all(specs.arrival_time_s == 0)


def test_duration_only_workload():
    specs = generate_requests(synth(num_requests=None, duration_s=10.0, arrival="constant", request_rate=3.0), seed=0)
    assert len(specs) == 30 and specs.arrival_time_s[-1] == pytest.approx(10.0)


# ------------------------------------------------------------------ determinism / streams
def test_same_seed_same_requests_different_seed_different_arrivals():
    cfg = synth(input_len={"dist": "lognormal", "mean": 500, "sigma": 1.0, "max": 4000},
                shared_prefix={"fraction": 0.5, "num_prefixes": 3, "prefix_len": 64},
                priority_classes=[{"fraction": 0.5, "priority": 0}, {"fraction": 0.5, "priority": 1}])
    a, b = generate_requests(cfg, seed=11), generate_requests(cfg, seed=11)
    assert a.equals(b)
    c = generate_requests(cfg, seed=12)
    assert not np.array_equal(a.arrival_time_s, c.arrival_time_s)
    assert not np.array_equal(a.num_prompt_tokens, c.num_prompt_tokens)


def test_changing_output_distribution_keeps_arrivals_and_inputs():
    a = generate_requests(synth(input_len={"dist": "uniform", "low": 10, "high": 900}), seed=3)
    b = generate_requests(synth(input_len={"dist": "uniform", "low": 10, "high": 900},
                                output_len={"dist": "uniform", "low": 1, "high": 999}), seed=3)
    np.testing.assert_array_equal(a.arrival_time_s, b.arrival_time_s)
    np.testing.assert_array_equal(a.num_prompt_tokens, b.num_prompt_tokens)
    assert not np.array_equal(a.output_len, b.output_len)


def test_workload_seed_overrides_run_seed():
    cfg = synth(seed=5)
    assert generate_requests(cfg, seed=1).equals(generate_requests(cfg, seed=2))
    assert generate_requests(cfg, seed=1).equals(generate_requests(synth(), seed=5))


# ------------------------------------------------------------------ lengths
def test_lognormal_clipped_within_bounds_and_mean():
    spec = LognormalLen(dist="lognormal", mean=1000, sigma=1.5, min=50, max=3000)
    x = sample_lengths(spec, 50_000, rng(2))
    assert x.min() >= 50 and x.max() <= 3000
    assert x.min() == 50 and x.max() == 3000  # sigma 1.5: both tails hit the clip
    # Unclipped, the sample mean is the distribution mean.
    y = sample_lengths(LognormalLen(dist="lognormal", mean=1000, sigma=0.5), 200_000, rng(2))
    assert y.mean() == pytest.approx(1000, rel=0.01)
    assert np.median(y) == pytest.approx(1000 * math.exp(-0.125), rel=0.01)  # exp(mu)


def test_uniform_forms_and_fixed():
    x = sample_lengths(UniformLen(dist="uniform", mean=100, range_ratio=0.5), 20_000, rng())
    assert x.min() == 50 and x.max() == 150  # [floor(50), ceil(150)] inclusive
    y = sample_lengths(UniformLen(dist="uniform", low=3, high=5), 1000, rng())
    assert set(np.unique(y)) == {3, 4, 5}
    assert np.all(sample_lengths(FixedLen(dist="fixed", value=7), 5, rng()) == 7)


def test_empirical_lengths(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("a,b\n10,1\n20,2\n30,3\n")
    x = sample_lengths(WorkloadConfig.model_validate(
        {"input_len": {"dist": "empirical", "path": str(p), "column": "a"},
         "output_len": {"dist": "fixed", "value": 1}, "num_requests": 1}).input_len, 3000, rng())
    assert set(np.unique(x)) == {10, 20, 30}


def test_max_tokens_fixed_or_output_len():
    s = generate_requests(synth(output_len={"dist": "uniform", "low": 1, "high": 99}), seed=0)
    np.testing.assert_array_equal(s.max_tokens, s.output_len)
    s = generate_requests(synth(max_tokens=64), seed=0)
    assert np.all(s.max_tokens == 64) and np.all(s.output_len == 50)


# ------------------------------------------------------------------ prefixes / conversations
def test_shared_prefix_fraction_and_keys():
    s = generate_requests(synth(num_requests=20_000, shared_prefix={"fraction": 0.3, "num_prefixes": 4,
                                                                      "prefix_len": 100}), seed=0)
    has = np.array([k is not None for k in s.prefix_keys])
    assert has.mean() == pytest.approx(0.3, abs=0.015)
    # prefix_len is added to the body; 100 tokens at 16 per key = 6 whole chunks
    assert np.all(s.num_prompt_tokens[has] == 200) and np.all(s.num_prompt_tokens[~has] == 100)
    distinct = {k for k in s.prefix_keys if k is not None}
    assert len(distinct) == 4 and all(len(k) == 6 for k in distinct)
    assert len(set().union(*distinct)) == 24  # the prompts share no key
    assert s.prefix_chunk_tokens == 16
    assert all(x >= 0 for k in distinct for x in k)


def test_conversation_turns_extend_keys():
    # inf arrivals: all sessions start at 0, so send order is turn 0s, then turn 1s, then turn 2s.
    cfg = synth(num_requests=30, request_rate=None, output_len={"dist": "fixed", "value": 50},
                conversation={"fraction": 1.0, "num_turns": 3, "think_time_s": 10.0,
                              "turn_input_len": {"dist": "fixed", "value": 20}})
    s = generate_requests(cfg, seed=0)
    assert len(s) == 30
    t0, t1, t2 = (slice(0, 10), slice(10, 20), slice(20, 30))
    np.testing.assert_array_equal(s.arrival_time_s[t0], 0.0)
    np.testing.assert_array_equal(s.arrival_time_s[t1], 10.0)
    np.testing.assert_array_equal(s.arrival_time_s[t2], 20.0)
    # prompt_{t+1} = prompt_t + output_t + new message: 100, 170, 240
    assert set(s.num_prompt_tokens[t0]) == {100} and set(s.num_prompt_tokens[t1]) == {170}
    assert set(s.num_prompt_tokens[t2]) == {240}
    k = s.prefix_keys
    for i in range(10):
        a, b, c = k[i], k[10 + i], k[20 + i]
        # turns 0 and 1 are extended: keys cover prompt + output in whole chunks;
        # the last turn carries only what it shares with turn 1 (its own tokens are unique)
        assert (len(a), len(b), len(c)) == (150 // 16, 220 // 16, 220 // 16)
        assert b[: len(a)] == a and c == b
    # different sessions share nothing
    assert not set(k[0]) & set(k[1])


def test_conversation_with_system_prompt_and_max_tokens():
    cfg = synth(num_requests=8, request_rate=None, max_tokens=30,
                shared_prefix={"fraction": 1.0, "num_prefixes": 1, "prefix_len": 32},
                conversation={"fraction": 1.0, "num_turns": 2, "think_time_s": 5.0})
    s = generate_requests(cfg, seed=0)
    # turn 0: 32 + 100; turn 1: 132 + min(50, 30) + 100 = 262
    assert set(s.num_prompt_tokens[:4]) == {132} and set(s.num_prompt_tokens[4:]) == {262}
    prefix = s.prefix_keys[0][:2]
    assert all(k[:2] == prefix for k in s.prefix_keys)  # 32 tokens = 2 keys shared by all
    assert len(s.prefix_keys[0]) == (132 + 30) // 16  # turn 0: prompt + min(output, max_tokens)


def test_conversation_fraction_and_arrival_rate():
    cfg = synth(num_requests=4000, request_rate=2.0,
                conversation={"fraction": 0.5, "num_turns": [2, 4], "think_time_s": [1.0, 3.0]})
    s = generate_requests(cfg, seed=4)
    assert len(s) == 4000 and np.all(np.diff(s.arrival_time_s) >= 0)
    # mean turns 1 + 0.5·(3 − 1) = 2 -> ~2000 sessions; half single-turn -> ~1000 requests without keys
    single = sum(k is None for k in s.prefix_keys)
    assert single == pytest.approx(1000, rel=0.1)
    # sessions start at rate·S/n; the last session starts at n/rate = 2000 s
    assert s.arrival_time_s[-1] == pytest.approx(2000.0, abs=15.0)


def test_priority_classes_and_warmup():
    s = generate_requests(synth(num_requests=10_000, num_warmup_requests=5,
                                priority_classes=[{"fraction": 0.2, "priority": 0},
                                                  {"fraction": 0.8, "priority": 3}]), seed=0)
    assert len(s) == 10_005 and s.num_warmup == 5 and s.num_requests == 10_000
    assert (s.priority == 0).mean() == pytest.approx(0.2, abs=0.015)
    assert set(np.unique(s.priority)) == {0, 3}


def test_clip_synthetic():
    s = generate_requests(synth(input_len={"dist": "fixed", "value": 1000}, clip_to_max_model_len=True),
                          seed=0, max_model_len=500)
    assert np.all(s.num_prompt_tokens == 450) and s.num_clipped == 100
    s = generate_requests(synth(input_len={"dist": "fixed", "value": 1000}), seed=0, max_model_len=500)
    assert np.all(s.num_prompt_tokens == 1000) and s.num_clipped == 0


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize("bad, words", [
    ({"request_rate": -1}, ["request_rate", "-1"]),
    ({"num_requests": None}, ["num_requests", "duration_s"]),
    ({"input_len": {"dist": "lognormal", "mean": 100, "sigma": 1, "min": 50, "max": 10}}, ["min (50) > max (10)"]),
    ({"input_len": {"dist": "uniform", "low": 1, "high": 5, "mean": 3, "range_ratio": 0.1}}, ["either"]),
    ({"input_len": {"dist": "normal", "value": 1}}, ["fixed", "lognormal"]),
    ({"arrival": "poisson", "burstiness": 0.5}, ["burstiness", "gamma"]),
    ({"requst_rate": 3}, ["requst_rate", "unknown key", "request_rate"]),
    ({"burstiness": 0}, ["burstiness"]),
    ({"priority_classes": [{"fraction": 0.5, "priority": 1}]}, ["sum to 1"]),
    ({"window_s": [0, 10]}, ["window_s", "trace"]),
    ({"max_tokens": "all"}, ["max_tokens"]),
    # a duration keeps every request when all are sent at t = 0 (it used to be ignored silently)
    ({"duration_s": 5, "request_rate": None, "max_concurrency": 8}, ["duration_s = 5", "closed-loop clients"]),
    ({"duration_s": 5, "request_rate": None}, ["duration_s = 5 needs a finite request_rate"]),
    ({"duration_s": 5, "request_rate": None, "num_requests": None}, ["duration_s = 5 needs a finite request_rate"]),
])
def test_validation_messages(bad, words):
    with pytest.raises(ConfigError) as exc:
        synth(**bad)
    for w in words:
        assert w in str(exc.value), str(exc.value)
    assert str(exc.value).startswith("test: workload")


def test_integer_length_is_fixed_shorthand():
    w = WorkloadConfig(input_len=1024, output_len="64", num_requests=3)
    assert w.input_len == FixedLen(dist="fixed", value=1024) and w.output_len == FixedLen(dist="fixed", value=64)
    with pytest.raises(Exception, match="greater than or equal to 1"):
        WorkloadConfig(input_len=0, output_len=64)
    with pytest.raises(Exception):
        WorkloadConfig(input_len=True, output_len=64)  # a bool is not a length
