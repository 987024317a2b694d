"""``moe_backend``: the engine's fused-MoE kernel when it is not the weight
format's default (vLLM's Marlin MoE for MXFP4 experts under
``VLLM_MXFP4_USE_MARLIN=1``), and the InferenceMAX recipes that set it."""

import pytest

from sim.cost_model import CostModel
from sim.cost_model.fitted import moe_fitted_s
from sim.cost_model.fitted_step import MOE_BACKENDS, moe_backend_family
from sim.cost_model.roofline import ACT_BYTES, gemm_precision
from sim.errors import ConfigError
from sim.hardware.profile import get_hardware
from sim.model_spec import get_model
from sim.validate.harness import HARNESSES, eval_formula, harness_from_dict
from sim.validate.rows import ValidateOptions, row_overrides

GPT_OSS = "openai/gpt-oss-120b"


def _experts_s(cm: CostModel, T: float) -> float:
    return float(cm._moe_fitted.experts_s(T))


def test_marlin_times_mxfp4_experts_with_the_marlin_family():
    hw, m = get_hardware("h100_sxm"), get_model(GPT_OSS)
    triton = CostModel(m, hw, tensor_parallel_size=1)
    marlin = CostModel(m, hw, tensor_parallel_size=1, moe_backend="marlin")
    eff = hw.efficiency
    # one layer at 8,192 tokens: the int4_wo (Marlin) family's parameters, MXFP4's weight bytes
    # (4.25 bits), the 16-bit peak and 16-bit activations Marlin computes with (w4a16)
    want = float(moe_fitted_s(eff.moe["int4_wo"], 8192.0, m.hidden_size, m.moe_intermediate_size,
                              m.num_experts, m.num_experts_per_tok, gemm_precision(hw, "bf16").peak_flops_per_s,
                              hw.hbm_bandwidth_bytes_per_s, weight_bytes=4.25 / 8, act_bytes=ACT_BYTES))
    assert gemm_precision(hw, "mxfp4").weight_bytes == 4.25 / 8
    assert _experts_s(marlin, 8192.0) == pytest.approx(want, rel=1e-12)
    # the measured property (H100 table, vllm_compressedtensorsw4a4mxfp4moe_marlin): Marlin's
    # prefill is about twice the Triton MXFP4 kernel's (1.85x at gpt-oss's shape: the Marlin family's
    # 5.39 ms against the Triton kernel's measured 2.93 ms at 8,192 tokens, TP 1; the fitted Triton
    # family predicts 3.00 ms there: 1.79x); at one decode token close
    assert _experts_s(marlin, 8192.0) > 1.75 * _experts_s(triton, 8192.0)
    assert _experts_s(marlin, 1.0) < 2.0 * _experts_s(triton, 1.0)


def test_moe_backend_errors_name_the_key():
    hw = get_hardware("h100_sxm")
    assert MOE_BACKENDS["marlin"][0] == "int4_wo"
    assert moe_backend_family(hw.efficiency, None, "fp8_block") == "fp8_block"
    with pytest.raises(ConfigError, match="moe_backend: 'marlin' serves int4_wo, mxfp4, nvfp4 expert weights, "
                                          "got 'fp8_block'"):
        moe_backend_family(hw.efficiency, "marlin", "fp8_block")
    with pytest.raises(ConfigError, match="moe_backend: unknown value 'cutlass'"):
        moe_backend_family(hw.efficiency, "cutlass", "mxfp4")


def _row(**kw):
    row = dict(backend="vllm", model_path=GPT_OSS, system="h200_sxm", isl=1024, osl=1024, concurrency=8,
               tp_size=1, silicon_ttft_ms=80.0, silicon_tpot_ms=6.0, campaign="2026-04-06", batch_size=8)
    row.update(kw)
    return row


def test_inferencemax_recipe_sets_marlin_for_gpt_oss_on_hopper_vllm_only():
    assert row_overrides(_row(), ValidateOptions())["moe_backend"] == "marlin"
    assert row_overrides(_row(system="h100_sxm"), ValidateOptions())["moe_backend"] == "marlin"
    assert "moe_backend" not in row_overrides(_row(system="b200_sxm"), ValidateOptions())
    trt = row_overrides(_row(backend="trtllm"), ValidateOptions())
    assert "moe_backend" not in trt and trt["max_num_batched_tokens"] == 20000  # --max_num_tokens 20000
    assert "moe_backend" not in row_overrides(_row(campaign="aic-gap-analysis"), ValidateOptions())
    assert all(r.source for r in HARNESSES["inferencemax"].recipe_args)


def test_yaml_recipe_args():
    h = harness_from_dict({"name": "r", "recipe_args": [
        {"model": "openai/*", "systems": ["h1*"], "engine": "vllm", "args": {"moe_backend": "marlin"}}]})
    assert h.recipe_overrides(_row(system="h100_sxm"), "vllm") == {"moe_backend": "marlin"}
    assert h.recipe_overrides(_row(system="b200_sxm"), "vllm") == {}
    with pytest.raises(ConfigError, match=r"recipe_args\[0\].engine: unknown engine 'tgi'"):
        harness_from_dict({"name": "r", "recipe_args": [
            {"model": "*", "systems": ["*"], "engine": "tgi", "args": {"moe_backend": "marlin"}}]})
    with pytest.raises(ConfigError, match=r"recipe_args\[0\].when: unknown key"):
        harness_from_dict({"name": "r", "recipe_args": [{"model": "*", "when": 1}]})


def test_sglang_recipes_set_the_scheduler_recv_interval_by_concurrency():
    ds = dict(backend="sglang", model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm", gemm_quant_mode="fp8",
              isl=1024, osl=1024, concurrency=8, tp_size=8, silicon_ttft_ms=200.0, silicon_tpot_ms=9.0,
              campaign="2026-03-25", batch_size=8)
    assert row_overrides(ds, ValidateOptions())["scheduler_recv_interval"] == 10      # C < 16
    assert row_overrides(dict(ds, concurrency=16), ValidateOptions())["scheduler_recv_interval"] == 30
    assert row_overrides(dict(ds, tp_size=4, concurrency=64), ValidateOptions())["scheduler_recv_interval"] == 10
    assert "scheduler_recv_interval" not in row_overrides(dict(ds, system="h200_sxm"), ValidateOptions())
    # the single-node recipe scripts say nothing of a disaggregated deployment's pools
    assert not HARNESSES["inferencemax"].recipe_overrides(dict(ds, mode="disagg"), "sglang")
    qw = dict(ds, model_path="Qwen/Qwen3.5-397B-A17B", concurrency=32)
    assert row_overrides(qw, ValidateOptions())["scheduler_recv_interval"] == 30
    # the bf16 recipe (qwen3.5_bf16_b200.sh) has the same branch, but no FP8 KV cache
    bf16 = row_overrides(dict(qw, gemm_quant_mode=""), ValidateOptions())
    assert bf16["scheduler_recv_interval"] == 30 and "kv_cache_dtype" not in bf16
    assert row_overrides(qw, ValidateOptions())["kv_cache_dtype"] == "fp8_e4m3"
    # db-dump names the dsr1 recipes' rows DeepSeek-V3; 64 / 8 / 8 there is TP 8, EP 8 (C < 16: 10)
    v3 = dict(ds, model_path="deepseek-ai/DeepSeek-V3", campaign="db-dump/2026-04-27", tp_size=64,
              moe_tp_size=8, moe_ep_size=8, attention_dp_size=1)
    assert row_overrides(v3, ValidateOptions())["scheduler_recv_interval"] == 10
    h = harness_from_dict({"name": "r", "recipe_args": [
        {"model": "*", "systems": ["*"], "engine": "sglang", "args": {"scheduler_recv_interval": 5},
         "concurrency": [None, 9], "tp": [8], "quant": ["FP8"]}]})
    assert h.recipe_overrides(ds, "sglang") == {"scheduler_recv_interval": 5}
    assert h.recipe_overrides(dict(ds, concurrency=10), "sglang") == {}
    with pytest.raises(ConfigError, match="concurrency \\[min, max\\]"):
        harness_from_dict({"name": "r", "recipe_args": [{"model": "*", "systems": ["*"], "engine": "sglang",
                                                         "args": {"stream_interval": 1}, "concurrency": 4}]})


def test_inferencemax_recipes_fp8_kv_cache():
    mm = dict(backend="vllm", model_path="MiniMaxAI/MiniMax-M2.5", system="b200_sxm", gemm_quant_mode="nvfp4",
              isl=8192, osl=1024, concurrency=32, tp_size=1, silicon_ttft_ms=500.0, silicon_tpot_ms=22.0,
              campaign="db-dump/2026-04-27", batch_size=32)
    assert row_overrides(mm, ValidateOptions())["kv_cache_dtype"] == "fp8"       # minimaxm2.5_fp4_b200.sh
    assert "kv_cache_dtype" not in row_overrides(dict(mm, gemm_quant_mode="fp8"), ValidateOptions())
    assert "kv_cache_dtype" not in row_overrides(dict(mm, system="h200_sxm"), ValidateOptions())
    ds = dict(mm, backend="trtllm", model_path="deepseek-ai/DeepSeek-R1", tp_size=8)
    assert row_overrides(ds, ValidateOptions())["kv_cache_dtype"] == "fp8"       # dsr1_fp4_b200_trt.sh
    go = dict(mm, backend="trtllm", model_path="openai/gpt-oss-120b", tp_size=1)
    assert row_overrides(go, ValidateOptions())["kv_cache_dtype"] == "fp8"       # gptoss_fp4_b200_trt.sh
    assert "kv_cache_dtype" not in row_overrides(dict(go, system="h200_sxm"), ValidateOptions())


def test_inferencemax_recipe_token_budget_formulas():
    ds = dict(backend="trtllm", model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm", gemm_quant_mode="nvfp4",
              isl=8192, osl=1024, concurrency=4, tp_size=8, silicon_ttft_ms=300.0, silicon_tpot_ms=6.0,
              campaign="2026-03-25", batch_size=4)
    # (4 + 8192 + 64 + 63) // 64 * 64 = 8320; at 1k: (4 + 1024 + 127) // 64 * 64 = 1152 -> at least 8192
    assert row_overrides(ds, ValidateOptions())["max_num_batched_tokens"] == 8320
    assert row_overrides(dict(ds, isl=1024), ValidateOptions())["max_num_batched_tokens"] == 8192
    # C = 64: 8383 // 64 * 64 = 8320; C = 128: 8447 // 64 * 64 = 8384
    assert row_overrides(dict(ds, concurrency=64), ValidateOptions())["max_num_batched_tokens"] == 8320
    assert row_overrides(dict(ds, concurrency=128), ValidateOptions())["max_num_batched_tokens"] == 8384
    mm = dict(ds, backend="vllm", model_path="MiniMaxAI/MiniMax-M2.5", tp_size=1)
    assert row_overrides(mm, ValidateOptions())["max_num_batched_tokens"] == 16384       # 2 x ISL
    h = harness_from_dict({"name": "r", "recipe_args": [
        {"model": "*", "systems": ["*"], "engine": "vllm", "formulas": {"max_num_batched_tokens": "isl + 3 * osl"}}]})
    assert h.recipe_overrides(mm, "vllm") == {"max_num_batched_tokens": 8192 + 3 * 1024}
    with pytest.raises(ConfigError, match=r"recipe_args\[0\].formulas.max_num_seqs: 'open\(1\)': only whole"):
        harness_from_dict({"name": "r", "recipe_args": [
            {"model": "*", "systems": ["*"], "engine": "vllm", "formulas": {"max_num_seqs": "open(1)"}}]})
    with pytest.raises(ConfigError, match="divides by zero"):
        eval_formula("isl // (osl - osl)", {"isl": 1, "osl": 2, "concurrency": 3})


def test_grouped_expert_gemms_quantize_the_input_once_per_token():
    """NVFP4 experts have no fused-MoE family in the profile: grouped w13 / w2 GEMMs.
    Their input is quantized once per token before the routed rows are gathered (vLLM
    ``fused_experts_impl``: ``moe_kernel_quantize_input`` on the T-row hidden states for
    w13, on the T top_k-row intermediate cache for w2), not once per routed row."""
    hw, m = get_hardware("b200_sxm"), get_model("deepseek-r1")
    cm = CostModel(m, hw, tensor_parallel_size=8, quantization="nvfp4")
    moe = cm._moe_fitted
    assert not moe.fused and moe.w13.w8a8  # the grouped path, W4A4
    eff = moe.w13.p
    # one token row of h = 7,168 activations: act_quant_row_s + (2 B read + 1 B written) per element
    row = eff.act_quant_row_s + 3.0 * 7168 / (hw.hbm_bandwidth_bytes_per_s * eff.act_quant_memory_efficiency)
    assert moe.w13.quant_row == pytest.approx(row, rel=1e-12)
    T = 4096.0
    rows = T * 8  # top-8 of 256 experts, all local at EP 1: 32,768 routed rows, 4,096 tokens
    per_routed_row = float(moe.w13.time_s(rows, 256.0) + moe.w2.time_s(rows, 256.0))
    assert float(moe.experts_s(T)) == pytest.approx(per_routed_row - (rows - T) * row, rel=1e-12)
    # at one token the rows are its top_k picks: one quantized row either way
    assert float(moe.experts_s(1.0)) < float(moe.w13.time_s(8.0, 8.0, 16.0) + moe.w2.time_s(8.0, 8.0, 16.0))


def test_yaml_recipe_args_values_are_checked_when_read():
    """A recipe's fixed settings get the config field's type and bounds when the harness is
    read, naming the entry and key, not later per row."""
    def read(args):
        return harness_from_dict({"name": "r", "recipe_args": [
            {"model": "*", "systems": ["*"], "engine": "sglang", "args": args}]})
    with pytest.raises(ConfigError, match=r"recipe_args\[0\]\.args\.stream_interval: Input should be greater "
                                          r"than or equal to 1, got 0"):
        read({"stream_interval": 0})
    with pytest.raises(ConfigError, match=r"recipe_args\[0\]\.args\.max_num_seq: unknown config key "
                                          r"'max_num_seq'; did you mean max_num_seqs\?"):
        read({"max_num_seq": 64})
    with pytest.raises(ConfigError, match=r"recipe_args\[0\]\.args\.model: a recipe sets engine keys"):
        read({"model": "llama-3.1-8b"})
    assert read({"stream_interval": 30, "scheduler_recv_interval": 10}).recipe_args[0].args == {
        "stream_interval": 30, "scheduler_recv_interval": 10}
