"""client_phase_spread (sim/workload/client_phase.py): the clients' first requests end
early so that later requests start at spread phases; a hand-worked schedule,
the length rule, determinism and the errors."""

from __future__ import annotations

import numpy as np
import pytest

from sim.workload.client_phase import check_phase_spread, disperse_client_phases, first_request_lengths
from sim.errors import ConfigError
from sim.validate.rows import ValidateOptions, row_overrides, row_phase_spread, simulate_row

from tests.test_validate import GPU, MODEL

ROW = {"backend": "vllm", "model_path": MODEL, "system": GPU, "precision": "", "gemm_quant_mode": "",
       "isl": 16, "osl": 4, "concurrency": 2, "tp_size": 1, "silicon_ttft_ms": 1.0, "silicon_tpot_ms": 1.0}
ENGINE = {"max_num_batched_tokens": 128, "cpu_step_overhead_s": 1e-3, "cpu_seq_overhead_s": 1e-4,
          "frontend_latency_s": 0.0, "frontend_token_s": 0.0,
          "overlap_scheduling": False}  # serial host: vLLM before 0.14 (the preset is 0.24's)


def _opts(spread: float) -> ValidateOptions:
    return ValidateOptions(protocol="steady", requests_per_client=1, warmup_per_client=1, think_time_s=0.0, seed=0,
                           engine_overrides={"vllm": dict(ENGINE, client_phase_spread=spread)})


def _step_time():
    from sim.config import build_config
    from sim.engine.deployment import build_deployment

    cm = build_deployment(build_config(overrides=row_overrides(ROW, _opts(0.0)))).cost_model
    return lambda new, ctx: cm.step_time_s(np.array(new), np.array(ctx)) + 1e-3 + 1e-4 * len(new)


def test_first_request_lengths_rule_and_seed():
    # spread 1: uniform in [1, L]; spread 0.5 with L = 10: in [5, 10]; spread 0: unchanged.
    assert list(first_request_lengths(np.array([4, 4]), 1.0, 0)) == [4, 1]
    assert list(first_request_lengths(np.array([10, 10, 10]), 0.5, 0)) == [9, 5, 6]
    assert list(first_request_lengths(np.array([7, 3]), 0.0, 0)) == [7, 3]
    big = first_request_lengths(np.full(10_000, 10), 0.5, 3)
    assert big.min() == 5 and big.max() == 10
    assert np.array_equal(big, first_request_lengths(np.full(10_000, 10), 0.5, 3))
    assert not np.array_equal(big, first_request_lengths(np.full(10_000, 10), 0.5, 4))
    # never below one token, even for a one-token request
    assert list(first_request_lengths(np.array([1, 1]), 1.0, 0)) == [1, 1]


def test_synchronised_start_without_spread():
    # Spread 0: R0, R1 (warm-up) prefill together, decode together, finish together
    # at step 4; R2 and R3 are sent together and share their prefill step 5.
    t = _step_time()
    s5 = t([16, 16], [0, 0])
    s6, s7, s8 = t([1, 1], [16, 16]), t([1, 1], [17, 17]), t([1, 1], [18, 18])
    out = simulate_row(ROW, _opts(0.0))
    assert out["status"] == "ok" and out["num_engine_steps"] == 8
    assert out["pred_ttft_ms"] == pytest.approx(s5 * 1e3, rel=1e-9)
    assert out["pred_tpot_ms"] == pytest.approx((s6 + s7 + s8) / 3 * 1e3, rel=1e-9)


def test_spread_start_hand_schedule():
    # Spread 1, seed 0: the first requests get 4 and 1 output tokens ([4, 1] above).
    # step | scheduled (new@ctx)  | events
    #  1   | R0 16@0, R1 16@0     | R1 done (1 token) → client 1 sends R2 at t1
    #  2   | R0 1@16, R2 16@0     | R2 first token
    #  3   | R0 1@17, R2 1@16     |
    #  4   | R0 1@18, R2 1@17     | R0 done (4 tokens) → client 0 sends R3 at t4
    #  5   | R2 1@18, R3 16@0     | R2 done; R3 first token
    #  6-8 | R3 1@16, 1@17, 1@18  | R3 done
    # The measured requests R2, R3 are no longer prefilled in the same step.
    t = _step_time()
    s2, s3, s4 = t([1, 16], [16, 0]), t([1, 1], [17, 16]), t([1, 1], [18, 17])
    s5, s6, s7, s8 = t([1, 16], [18, 0]), t([1], [16]), t([1], [17]), t([1], [18])
    ttft = (s2 + s5) / 2
    tpot = ((s3 + s4 + s5) / 3 + (s6 + s7 + s8) / 3) / 2
    out = simulate_row(ROW, _opts(1.0))
    assert out["status"] == "ok" and out["num_engine_steps"] == 8
    assert out["pred_ttft_ms"] == pytest.approx(ttft * 1e3, rel=1e-9)
    assert out["pred_tpot_ms"] == pytest.approx(tpot * 1e3, rel=1e-9)
    assert simulate_row(ROW, _opts(1.0))["pred_ttft_ms"] == out["pred_ttft_ms"]  # deterministic


def test_spread_key_is_not_a_config_key_and_defaults_to_fitted():
    ov = row_overrides(ROW, _opts(0.3))
    assert "client_phase_spread" not in ov
    assert row_phase_spread(ROW, _opts(0.3)) == 0.3
    from sim.workload.client_phase import CLIENT_PHASE_SPREAD

    assert row_phase_spread(ROW, ValidateOptions(protocol="steady")) == CLIENT_PHASE_SPREAD["vllm"]


@pytest.mark.parametrize("bad", [-0.1, 1.5, "x", float("nan"), None])
def test_bad_spread_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="client_phase_spread"):
        check_phase_spread(bad)
    out = simulate_row(ROW, _opts(bad))
    assert out["status"] == "error" and "client_phase_spread" in out["reason"]


def test_shortened_requests_must_be_warmup():
    from sim.workload.specs import RequestSpecs

    n = 4
    specs = RequestSpecs(arrival_time_s=np.zeros(n), num_prompt_tokens=np.full(n, 8), output_len=np.full(n, 4),
                         max_tokens=np.full(n, 4), priority=np.zeros(n), num_warmup=1)
    with pytest.raises(ConfigError, match="warm-up"):
        disperse_client_phases(specs, 2, 0.5, 0)
    assert disperse_client_phases(specs, 2, 0.0, 0) is specs
    ok = disperse_client_phases(RequestSpecs(arrival_time_s=np.zeros(n), num_prompt_tokens=np.full(n, 8),
                                             output_len=np.full(n, 4), max_tokens=np.full(n, 4),
                                             priority=np.zeros(n), num_warmup=2), 2, 1.0, 0)
    assert list(ok.output_len) == [4, 1, 4, 4] and list(ok.max_tokens) == [4, 4, 4, 4]
