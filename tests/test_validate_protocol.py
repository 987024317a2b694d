"""The ``aic`` validation protocol (sim/validate/rows.py): aiconfigurator's generated
deployment limits, a cold start with every request measured; hand-computed
budgets and a hand-worked schedule."""

from __future__ import annotations

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.validate.rows import (AIC_SGLANG_MIXED_SCHEDULER, ValidateOptions, aic_deploy_overrides,
                              aic_sglang_mixed_chunk, row_overrides, row_phase_spread, simulate_row,
                              warmup_per_client)

from tests.test_validate import GPU, MODEL

ROW = {"backend": "vllm", "model_path": MODEL, "system": GPU, "precision": "", "gemm_quant_mode": "",
       "isl": 1600, "osl": 3, "concurrency": 2, "tp_size": 1, "silicon_ttft_ms": 1.0, "silicon_tpot_ms": 1.0}


def test_aic_deploy_budgets():
    # C + isl + 1500; TensorRT-LLM rounded up to a multiple of 32; SGLang caps a prefill batch at isl + 1500
    # and mixes the running decodes into it (enable_mixed_chunk: AIC_SGLANG_MIXED_SCHEDULER, chunked for now).
    assert aic_deploy_overrides("vllm", 1024, 8) == {"max_num_batched_tokens": 2532, "max_num_seqs": 8}
    assert aic_deploy_overrides("trtllm", 1024, 8) == {"max_num_batched_tokens": 2560, "max_num_seqs": 8}
    assert aic_deploy_overrides("trtllm", 1028, 4) == {"max_num_batched_tokens": 2560, "max_num_seqs": 4}
    assert aic_deploy_overrides("sglang", 4096, 64) == {"max_prefill_tokens": 5596, "max_num_seqs": 64,
                                                        "scheduler": AIC_SGLANG_MIXED_SCHEDULER}


def test_aic_sglang_mixed_chunk_by_release():
    # aiconfigurator's generator wrote --enable-mixed-chunk from 2026-01-19 (PRs #257/#258); the
    # SGLang 0.5.6.post2 template (2026-01-23) always had it, the 0.5.1.post1 rows ran without it.
    assert aic_sglang_mixed_chunk("0.5.6.post2") and aic_sglang_mixed_chunk("0.5.8.post1")
    assert aic_sglang_mixed_chunk(None)  # release not recorded: the generator as it is now
    assert not aic_sglang_mixed_chunk("0.5.1.post1") and not aic_sglang_mixed_chunk("0.5.4.post3")
    assert aic_deploy_overrides("sglang", 1000, 16, "0.5.1.post1") == {
        "max_prefill_tokens": 2500, "max_num_seqs": 16, "scheduler": "prefill_first"}
    assert aic_deploy_overrides("sglang", 1000, 16, "0.5.6.post2")["scheduler"] == AIC_SGLANG_MIXED_SCHEDULER
    # a dense-table row reaches it through its backend_version
    row = {**ROW, "backend": "sglang", "backend_version": "0.5.1.post1"}
    assert row_overrides(row, ValidateOptions(protocol="aic"))["scheduler"] == "prefill_first"
    assert row_overrides({**row, "backend_version": "0.5.6.post2"},
                         ValidateOptions(protocol="aic"))["scheduler"] == AIC_SGLANG_MIXED_SCHEDULER


def test_protocol_row_overrides():
    aic = row_overrides(ROW, ValidateOptions())
    assert aic["workload.num_requests"] == 20 and aic["workload.num_warmup_requests"] == 0
    assert aic["max_num_batched_tokens"] == 3102 and aic["max_num_seqs"] == 2
    steady = row_overrides(ROW, ValidateOptions(protocol="steady"))
    assert steady["workload.num_requests"] == 20 and steady["workload.num_warmup_requests"] == 4
    assert "max_num_batched_tokens" not in steady and "max_num_seqs" not in steady
    # engine overrides still win over the protocol's limits
    ov = row_overrides(ROW, ValidateOptions(engine_overrides={"vllm": {"max_num_batched_tokens": 128}}))
    assert ov["max_num_batched_tokens"] == 128
    assert warmup_per_client(ValidateOptions(warmup_per_client=3)) == 3
    # no phase spread under aic (cold start; the burst is part of the measurement)
    assert row_phase_spread(dict(ROW, backend="trtllm"), ValidateOptions()) == 0.0
    with pytest.raises(ConfigError, match="protocol"):
        row_overrides(ROW, ValidateOptions(protocol="burst"))


def test_aic_cold_burst_hand_schedule():
    # Two clients, one request each, both sent at t = 0 and both measured. vLLM preset,
    # aic budget 2 + 1600 + 1500 = 3102 tokens; serial CPU 1 ms + 0.1 ms per sequence.
    # step | scheduled (new@ctx)       | events
    #  1   | R0 1600@0, R1 1502@0      | R0 first token
    #  2   | R0 1@1600, R1 98@1502     | R1 first token
    #  3   | R0 1@1601, R1 1@1600      | R0 done (3 tokens)
    #  4   | R1 1@1601                 | R1 done
    from sim.config import build_config
    from sim.engine.deployment import build_deployment

    eng = {"cpu_step_overhead_s": 1e-3, "cpu_seq_overhead_s": 1e-4, "frontend_latency_s": 0.0,
           "frontend_token_s": 0.0, "overlap_scheduling": False}  # serial host: vLLM before 0.14
    opts = ValidateOptions(requests_per_client=1, think_time_s=0.0, engine_overrides={"vllm": eng})
    cm = build_deployment(build_config(overrides=row_overrides(ROW, opts))).cost_model

    def t(new, ctx):
        return cm.step_time_s(np.array(new), np.array(ctx)) + 1e-3 + 1e-4 * len(new)

    s1, s2 = t([1600, 1502], [0, 0]), t([1, 98], [1600, 1502])
    s3, s4 = t([1, 1], [1601, 1600]), t([1], [1601])
    ttft = (s1 + (s1 + s2)) / 2
    tpot = ((s2 + s3) / 2 + (s3 + s4) / 2) / 2
    out = simulate_row(ROW, opts)
    assert out["status"] == "ok"
    assert out["num_engine_steps"] == 4
    assert out["pred_ttft_ms"] == pytest.approx(ttft * 1e3, rel=1e-9)
    assert out["pred_tpot_ms"] == pytest.approx(tpot * 1e3, rel=1e-9)
