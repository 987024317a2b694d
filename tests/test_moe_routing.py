"""MoE routing (sim/cost_model/moe.py): the most loaded expert-parallel rank
under uniform routing (exact enumeration on a tiny case, a fixed-seed Monte
Carlo on a larger one), aiconfigurator's power-law routing (hand-computed
moments, the generator re-done in numpy with a fixed seed), and an EP 8 step
costing the slowest rank."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from sim.config import build_config
from sim.cost_model.moe import (expected_max_std_normal, max_rank_load, parse_workload_distribution,
                                power_law_max_rank_load, power_law_moments, power_law_touched_experts,
                                uniform_max_rank_load)
from sim.cost_model.parallel import ParallelLayout, ParallelMoe
from sim.engine.deployment import build_deployment
from sim.errors import ConfigError
from sim.hardware.profile import get_hardware
from sim.model_spec import ModelSpec
from tests.test_parallel import GPU, MOE


# -- uniform routing: the most loaded rank -----------------------------------------------
def test_tiny_case_against_exact_enumeration():
    """T = 2 tokens, top-1 of E = 4 experts, EP 2 (experts 0-1 on rank 0, 2-3 on rank 1)."""
    rows_max, touched_max = [], []
    for picks in itertools.product(range(4), repeat=2):  # 16 equally likely routings
        ranks = [[p for p in picks if p // 2 == r] for r in range(2)]
        hot = max(ranks, key=len)
        rows_max.append(len(hot))
        touched_max.append(len(set(hot)))
    assert np.mean(rows_max) == 1.5  # both tokens on one rank half the time
    assert np.mean(touched_max) == 1.25
    rows, touched = uniform_max_rank_load(2, 4, 1, 2)
    # mean 1, sd sqrt(2 x 1/4), z(2) sqrt(2) = sqrt(2/pi): 1 + 1/sqrt(pi)
    assert float(rows) == pytest.approx(1 + 1 / math.sqrt(math.pi), rel=1e-6)
    assert float(rows) == pytest.approx(1.5, rel=0.05)  # the normal limit, 4 % high here
    # its 2 experts hit as by T' = 2 x rows / 1 tokens of top-1 of 4
    assert float(touched) == pytest.approx(2 * (1 - 0.75 ** (2 * float(rows))), rel=1e-9)
    assert float(touched) == pytest.approx(1.25, rel=0.06)


def test_uniform_max_rank_against_fixed_seed_monte_carlo():
    T, E, k, ep = 64, 64, 4, 8
    rng = np.random.default_rng(0)
    picks = np.argsort(rng.random((2000, T, E)), axis=2)[:, :, :k]  # k distinct experts per token
    counts = np.stack([np.bincount(p.ravel(), minlength=E) for p in picks]).reshape(2000, ep, E // ep)
    per_rank = counts.sum(axis=2)
    hot = per_rank.argmax(axis=1)
    mc_rows = per_rank.max(axis=1).mean()
    mc_touched = (counts[np.arange(2000), hot] > 0).sum(axis=1).mean()
    rows, touched = uniform_max_rank_load(T, E, k, ep)
    assert float(rows) == pytest.approx(mc_rows, rel=0.02)
    assert float(touched) == pytest.approx(mc_touched, rel=0.02)
    # EP 1: all T k rows, E (1 - (1 - k/E)^T) experts, as before
    rows1, touched1 = uniform_max_rank_load(T, E, k, 1)
    assert (float(rows1), float(touched1)) == (256.0, pytest.approx(64 * (1 - (60 / 64) ** 64)))


# -- power-law routing -----------------------------------------------------------------
def _aiconfigurator_power_law(T, E, k, ep, alpha, rng):
    """aiconfigurator's collector routing (collector/helper.py
    _generate_power_law_distribution), re-done: rows and experts of the most loaded rank."""
    a, b = (1.0, 0.8 * T) if T * k > E else (0.01, 2.0)
    u = rng.random(E)
    x = ((b ** (1 - alpha) - a ** (1 - alpha)) * u + a ** (1 - alpha)) ** (1 / (1 - alpha))
    c = np.round(x / x.sum() * T * k).astype(int)
    order = np.argsort(-c, kind="stable")
    for i in range(T * k - c.sum()):  # shortfall: one row each, largest first
        c[order[i % E]] += 1
    for i in range(c.sum() - T * k):  # surplus: off the smallest nonzero, else the largest
        j = order[-(i % E) - 1]
        c[j if c[j] > 0 else c.argmax()] -= 1
    r = c.reshape(ep, E // ep)
    hot = r.sum(axis=1).argmax()
    return r[hot].sum(), (r[hot] > 0).sum(), (c > 0).sum()


def test_power_law_moments_and_hot_rank_by_hand():
    # alpha 2 on [1, 8] (T = 10 tokens x top-8 > 16 experts: support [1, 0.8 T]):
    # Z = 7/8, m1 = ln 8 / Z, m2 = 7 / Z
    m1, v = power_law_moments(1.0, 8.0, 2.0)
    assert float(m1) == pytest.approx(math.log(8) / 0.875)
    assert float(v) == pytest.approx(8.0 - (math.log(8) / 0.875) ** 2)
    # EP 2 of 16 experts: share 1/2 + sqrt(8 v) z(2) / (16 m1) of the 80 rows
    share = 0.5 + math.sqrt(8 * float(v)) / math.sqrt(math.pi) / (16 * float(m1))
    rows, _ = power_law_max_rank_load(10, 16, 8, 2, 2.0)
    assert float(rows) == pytest.approx(80 * share, rel=1e-9)
    assert parse_workload_distribution("power_law_1.2") == ("power_law", 1.2)
    with pytest.raises(ValueError, match="workload_distribution: 'zipf'"):
        parse_workload_distribution("zipf")


@pytest.mark.parametrize("T,E,k,ep,alpha", [(256, 256, 8, 8, 1.01), (256, 256, 8, 8, 1.2),
                                            (1024, 64, 6, 4, 1.2), (64, 128, 8, 2, 1.01)])
def test_power_law_hot_rank_against_the_generator(T, E, k, ep, alpha):
    rng = np.random.default_rng(1)
    mc = np.array([_aiconfigurator_power_law(T, E, k, ep, alpha, rng) for _ in range(300)]).mean(axis=0)
    rows, touched = power_law_max_rank_load(T, E, k, ep, alpha)
    assert float(rows) == pytest.approx(mc[0], rel=0.05)  # normal limit of the rank sums: 1-3 % low here
    assert float(touched) == pytest.approx(mc[1], rel=0.05)
    assert float(power_law_touched_experts(T, E, k, alpha)) == pytest.approx(mc[2], rel=0.02)
    # skew loads the hot rank beyond uniform routing's maximum
    assert float(rows) > float(uniform_max_rank_load(T, E, k, ep)[0])


def test_power_law_one_token_touches_its_k_experts():
    # T k = 8 <= E = 128: weights on [0.01, 2] round to 0, the 8-row shortfall is dealt one each
    assert float(power_law_touched_experts(1, 128, 8, 1.2)) == pytest.approx(8.0, abs=0.3)
    rows, touched = max_rank_load(1, 128, 8, 1, "power_law_1.2")
    assert float(rows) == 8.0 and float(touched) == pytest.approx(8.0, abs=0.3)


# -- an EP 8 step costs the slowest rank ------------------------------------------------
def test_ep8_step_costs_the_most_loaded_rank():
    """Attention DP 8 x EP 8 on the round-number GPU (memory-bound at 8 tokens a rank):
    router + 2 layers x (w13 + w2 bytes of the hot rank's rows and experts) / 1e12."""
    moe = ModelSpec.from_hf_config(MOE, name="tiny-moe")
    hw = get_hardware(GPU)
    m = ParallelMoe(moe, hw, ParallelLayout(1, 8, 8, 1, True))
    N = 64  # 8 tokens on each of 8 ranks
    sd = math.sqrt(N * 4 * (1 / 8) * (7 / 8) * 60 / 63)
    rows = 32 + sd * expected_max_std_normal(8) * math.sqrt(8 / 7)  # 39.86
    touched = 8 * (1 - (60 / 64) ** (N * rows / 32))
    r, t = m.rows_and_touched(8)
    assert (float(r), float(t)) == (pytest.approx(rows, rel=1e-9), pytest.approx(touched, rel=1e-9))
    assert rows == pytest.approx(39.86, abs=0.01)
    router = 2 * (8 * 1024 * 2 + 1024 * 64 * 2 + 8 * 64 * 2) / 1e12
    # w13: A rows x 1024 x 2 B + C rows x 1024 x 2 B + 2 MiB per expert; w2: rows x (512 + 1024) x 2 B + 1 MiB
    per_layer = (rows * 7168 + touched * 3 * 1024 * 1024) / 1e12
    assert float(m.experts_s(8)) == pytest.approx(router + 2 * per_layer, rel=1e-9)
    mean_rank = router + 2 * (32 * 7168 + 8 * (1 - (60 / 64) ** N) * 3 * 1024 * 1024) / 1e12
    assert float(m.experts_s(8)) > mean_rank
    # skewed routing on the same layout: a hotter rank at a large batch
    skew = ParallelMoe(moe, hw, ParallelLayout(1, 8, 8, 1, True), workload_distribution="power_law_1.2")
    assert float(skew.rows_and_touched(512)[0]) > float(m.rows_and_touched(512)[0])
    assert skew(512) > m(512)


def test_workload_distribution_config_key(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(MOE))
    base = {"model": str(p), "hardware": GPU, "scheduler": "chunked", "max_num_batched_tokens": 256,
            "max_num_seqs": 16, "workload.num_requests": 1, "workload.arrival": "inf",
            "workload.input_len": {"dist": "fixed", "value": 100},
            "workload.output_len": {"dist": "fixed", "value": 5}}
    uni = build_deployment(build_config(overrides={**base, "enable_expert_parallel": True,
                                                   "data_parallel_size": 8}))
    skew = build_deployment(build_config(overrides={**base, "enable_expert_parallel": True,
                                                    "data_parallel_size": 8,
                                                    "workload_distribution": "power_law_1.01"}))
    assert skew.cost_model.workload_distribution == "power_law_1.01"
    with pytest.raises(ConfigError, match="workload_distribution"):
        build_config(overrides={**base, "workload_distribution": "zipf"})
    # a 256-token prefill step: the hot rank of the skewed routing takes longer
    assert skew.cost_model.step_time_s([256], [0]) > uni.cost_model.step_time_s([256], [0])
    # EP 1 (experts tensor-sharded), 8 decode tokens x top-4 = 32 rows: balanced routing deals
    # them to 32 experts, uniform hits 64 (1 - (15/16)^8) = 25.3; the step differs by the
    # other experts' weights, 2 layers x 3 MiB each at 1e12 B/s
    bal = build_deployment(build_config(overrides={**base, "workload_distribution": "balanced"}))
    one = build_deployment(build_config(overrides=base))
    diff = bal.cost_model.step_time_s([1] * 8, [99] * 8) - one.cost_model.step_time_s([1] * 8, [99] * 8)
    assert diff == pytest.approx(2 * (32 - 64 * (1 - (15 / 16) ** 8)) * 3 * 1024 * 512 * 2 / 1e12, rel=1e-6)


# -- the accelerated stepping times the same routing --------------------------------------
@pytest.mark.parametrize("keys", [{"workload_distribution": "power_law_1.2"},
                                  {"workload_distribution": "power_law_1.01", "data_parallel_size": 2,
                                   "enable_expert_parallel": True},
                                  {"workload_distribution": "balanced", "tensor_parallel_size": 2,
                                   "enable_expert_parallel": True}])
def test_accelerated_is_bit_identical_with_skewed_routing(tmp_path, keys):
    import importlib.util  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "fuzz_equivalence.py"
    spec = importlib.util.spec_from_file_location("fuzz_equivalence", path)
    fuzz = sys.modules.get("fuzz_equivalence")
    if fuzz is None:
        fuzz = importlib.util.module_from_spec(spec)
        sys.modules["fuzz_equivalence"] = fuzz
        spec.loader.exec_module(fuzz)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(MOE))
    cfg = {"model": str(p), "hardware": "h100_sxm", "scheduler": "chunked", "max_num_batched_tokens": 256,
           "max_num_seqs": 16, "workload.num_requests": 24, "workload.arrival": "poisson",
           "workload.request_rate": 50.0, "workload.input_len": {"dist": "uniform", "low": 20, "high": 300},
           "workload.output_len": {"dist": "uniform", "low": 2, "high": 40}, **keys}
    res = fuzz.run_pair(cfg)
    assert res["status"] == "ok", res


def test_power_law_alpha_is_checked_and_large_alpha_is_finite():
    """alpha 0 is refused with ConfigError (the API's error) naming the key and listing the values;
    a large alpha (200, 1000: 0.01^-alpha overflowed to NaN step times) puts every weight at the
    support's lower end, so the hot rank carries T k / ep rows (balanced): 256 x 8 / 8 = 256."""
    from sim.config import build_config
    from sim.errors import ConfigError

    for bad in ("power_law_0", "power_law_0.0", "zipf"):
        with pytest.raises(ConfigError, match=rf"^workload_distribution: '{bad}' is not one of uniform, balanced"):
            parse_workload_distribution(bad)
        with pytest.raises(ConfigError, match=r"workload_distribution: expected uniform, balanced or "
                                              r"power_law_<alpha> \(alpha a finite number > 0"):
            build_config(overrides={"workload_distribution": bad})
    for alpha in (200.0, 1000.0):
        for T in (4, 256):  # support [0.01, 2] (T k <= E) and [1, 0.8 T]
            rows, touched = power_law_max_rank_load(T, 256, 8, 8, alpha)
            assert np.isfinite(rows) and np.isfinite(touched)
            assert float(rows) == pytest.approx(T * 8 / 8, rel=0.01)
    # null in a file restores the default, as for every other key
    assert build_config(overrides={"workload_distribution": None}).workload_distribution == "uniform"
    assert build_config(overrides={"block_size": None}).block_size == 16
