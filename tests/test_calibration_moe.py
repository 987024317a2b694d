"""Fused-MoE and block-fp8 calibration: known parameters are recovered from
timings the cost model's own formulas generate, check_tables scores a tiny
MoE table with the expected error, and profiles without the new sections load."""

import math
from pathlib import Path

import numpy as np
import pytest
import pandas as pd

from calibration.check_tables import check_dir
from calibration.fit import Device, fit_block_fp8, fit_family, predict
from sim.cost_model import CostModel
from sim.cost_model.fitted import gemm_fitted_s, gemm_measured_s
from sim.cost_model.operators import gemm_time_s, moe_layer_time_s
from sim.hardware.efficiency import FittedEfficiency, GemmParams, MoeParams
from sim.hardware.profile import get_hardware
from sim.model_spec import get_model

DEV = Device(peak_bf16=1e15, peak_fp8=2e15, hbm_bw=3e12, num_sms=100, link_bw=4e11)
TEST_GPU = Path(__file__).parent / "data" / "test_gpu.yaml"

MOE_TRUE = MoeParams(compute_efficiency_max=0.6, compute_half_flops=2e10, compute_exponent=0.8,
                     memory_efficiency_max=0.8, memory_half_bytes=5e6, memory_exponent=1.0,
                     launch_s=2e-5, expert_s=3e-7, row_s=2e-9)


def moe_rows() -> pd.DataFrame:
    shapes = [(2048, 768, 8, 128), (4096, 1536, 8, 128), (7168, 2048, 8, 256), (2880, 2880, 4, 32)]
    rows = [dict(num_tokens=t, hidden_size=h, inter_size=i, topk=k, num_experts=e, moe_tp_size=tp,
                 moe_ep_size=ep)
            for h, i, k, e in shapes for t in (1, 4, 16, 64, 256, 1024, 4096, 16384)
            for tp, ep in ((1, 1), (2, 1), (1, 4))]
    return pd.DataFrame(rows).astype(float)


def test_moe_fit_recovers_known_parameters():
    rows = moe_rows()
    rows["latency_s"] = predict("moe.bf16", MOE_TRUE, rows, DEV)
    fit = fit_family("moe.bf16", rows, DEV)
    err = np.abs(predict("moe.bf16", fit.params, rows, DEV) / rows["latency_s"] - 1)
    assert err.max() < 0.02
    assert abs(fit.params.launch_s / MOE_TRUE.launch_s - 1) < 0.1
    # saturation exponents capped at 1: a tiny expert-parallel share never costs more than a larger one
    assert fit.params.compute_exponent <= 1.0 and fit.params.memory_exponent <= 1.0
    assert abs(fit.params.memory_efficiency_max / MOE_TRUE.memory_efficiency_max - 1) < 0.1


def test_block_fp8_fit_recovers_the_host_floor():
    fp8 = GemmParams(compute_efficiency_max=0.7, compute_half_flops=1e9, compute_exponent=1.0,
                     memory_efficiency_max=0.85, memory_half_bytes=1e7, memory_exponent=1.0,
                     launch_s=3e-6, k_serial_s=1e-9, k_split=2000.0)
    true = fp8.model_copy(update={"host_s": 80e-6, "compute_efficiency_max": 0.6})
    m, n, k = (a.ravel().astype(float) for a in np.meshgrid([1, 16, 256, 4096, 16384],
                                                             [1024, 4096, 16384], [1024, 7168]))
    rows = pd.DataFrame({"m": m, "n": n, "k": k})
    rows["latency_s"] = predict("gemm.fp8_block", true, rows, DEV)
    fit = fit_block_fp8(rows, DEV, fp8)
    assert abs(fit.params.host_s / 80e-6 - 1) < 0.02
    assert abs(fit.params.compute_efficiency_max / 0.6 - 1) < 0.05
    # measured = max(host floor, device); served steps use the device time alone
    dev_t = gemm_fitted_s(true, 1.0, 4096, 7168, 2e15, 3e12, weight_bytes=1.0, w8a8=True)
    meas = gemm_measured_s(true, 1.0, 4096, 7168, 2e15, 3e12, weight_bytes=1.0, w8a8=True)
    assert dev_t < 80e-6 and float(meas) == 80e-6


def test_check_tables_scores_a_tiny_moe_table(tmp_path):
    hw = get_hardware(str(TEST_GPU))
    rows = moe_rows().head(24)
    pred = moe_layer_time_s(hw, rows["num_tokens"], rows["hidden_size"],
                            rows["inter_size"] / rows["moe_tp_size"], rows["num_experts"],
                            rows["topk"], "bf16", rows["moe_ep_size"].to_numpy(), routing="balanced")
    # balanced rows are scored with the table's balanced routing
    df = rows.assign(kernel_source="k", moe_dtype="bfloat16", distribution="balanced",
                     latency=1e3 * pred * 1.25)  # measured 25 % above: APE 20 %
    df.to_csv(tmp_path / "x_moe.csv", index=False)
    (r,) = check_dir(tmp_path, hw, model_free=True)
    n, mape, med = r.bands["all"]
    assert n == 24 and abs(mape - 20.0) < 1e-6 and abs(med - 20.0) < 1e-6


def test_profiles_without_the_new_sections_load_and_default():
    hw = get_hardware(str(TEST_GPU))
    eff = hw.efficiency
    if isinstance(eff, FittedEfficiency):
        assert all(g.host_s >= 0 for g in eff.gemm.values())
    data = get_hardware("a100_sxm").efficiency.model_dump()
    data.pop("moe", None)
    for g in data["gemm"].values():
        g.pop("host_s", None)
    e = FittedEfficiency.model_validate(data)
    assert e.moe == {} and all(g.host_s == 0.0 for g in e.gemm.values())


def test_fused_moe_section_drives_the_step_model():
    hw = get_hardware("h100_sxm")
    model = get_model("/work/shared/models/Qwen--Qwen3-30B-A3B_config.json") if Path(
        "/work/shared/models/Qwen--Qwen3-30B-A3B_config.json").exists() else None
    if model is None or not model.is_moe:
        return
    eff = hw.efficiency.model_copy(update={"moe": {"bf16": MOE_TRUE}})
    hw2 = hw.model_copy(update={"efficiency": eff})
    cm = CostModel(model, hw2)
    T = 64.0
    want = float(moe_layer_time_s(hw2, T, model.hidden_size, model.moe_intermediate_size,
                                  model.num_experts, model.num_experts_per_tok, "bf16"))
    assert abs(cm._moe_fitted.experts_s(T) - want) < 1e-12
    assert gemm_time_s(hw, 4.0, 4096, 4096, "fp8_block") <= gemm_time_s(hw, 4.0, 4096, 4096,
                                                                          "fp8_block", measured=True)


def test_live_moe_csv_is_fitted_into_the_profile(tmp_path):
    """``calibrate --device cuda`` writes bench_moe's rows as ``torch_moe.csv`` (the
    MoE table format): fit_directory fits ``moe.bf16`` from it and the profile carries it."""
    from calibration.cli import fit_directory
    from calibration.microbench import MOE_COLUMNS
    from calibration.profile_writer import build_efficiency
    rows = moe_rows()
    rows["latency_s"] = predict("moe.bf16", MOE_TRUE, rows, DEV)
    df = rows.assign(kernel_source="torch_grouped_mm", moe_dtype="bfloat16", distribution="balanced",
                     latency=rows["latency_s"] * 1e3)
    df[list(MOE_COLUMNS)].to_csv(tmp_path / "torch_moe.csv", index=False)
    fits, scores, _ = fit_directory(tmp_path, DEV, quiet=True)
    assert list(fits) == ["moe.bf16"] and scores["moe.bf16"][2] < 2.0
    eff = build_efficiency(fits, get_hardware("h100_sxm"))
    assert eff.moe["bf16"] == fits["moe.bf16"].params


def test_moe_routing_touched_experts_and_rows_by_hand():
    from sim.cost_model.fitted import moe_touched_rows  # noqa: PLC0415
    # uniform, EP 1: 64 experts, top-4, 4 tokens: 64 (1 - (60/64)^4) experts, 16 rows
    t, m = moe_touched_rows(4.0, 64.0, 4.0, 1.0, "uniform")
    assert (float(t), float(m)) == (pytest.approx(64 * (1 - (60 / 64) ** 4)), 16.0)
    # uniform, EP 8, one token: the most loaded rank, mean 0.5 rows + sd sqrt(4 (1/8)(7/8)(60/63))
    # x 1.4236 sqrt(8/7); its 8 experts hit as by 1 x rows / 0.5 tokens
    rows = 0.5 + math.sqrt(4 * (1 / 8) * (7 / 8) * 60 / 63) * 1.4236 * math.sqrt(8 / 7)
    t, m = moe_touched_rows(1.0, 64.0, 4.0, 8.0, "uniform")
    assert float(m) == pytest.approx(rows, rel=1e-4)
    assert float(t) == pytest.approx(8 * (1 - (60 / 64) ** (rows / 0.5)), rel=1e-4)
    # balanced (the tables): at least one expert with one row on the measured rank
    assert moe_touched_rows(1.0, 64.0, 4.0, 8.0, "balanced") == (1.0, 1.0)
    # 32 tokens x top-4 = 128 rows over min(64, 128) = 64 experts: 8 local experts, 16 rows
    t, m = moe_touched_rows(32.0, 64.0, 4.0, 8.0, "balanced")
    assert (float(t), float(m)) == (8.0, 16.0)
    # 8 tokens x top-4 = 32 distinct experts (< 64): 4 per rank, 4 rows
    t, m = moe_touched_rows(8.0, 64.0, 4.0, 8.0, "balanced")
    assert (float(t), float(m)) == (4.0, 4.0)


def test_moe_layer_terms_by_hand():
    from sim.cost_model.fitted import moe_fitted_s  # noqa: PLC0415
    p = MoeParams(compute_efficiency_max=0.5, compute_half_flops=1.0, compute_exponent=1.0,
                  memory_efficiency_max=0.8, memory_half_bytes=1.0, memory_exponent=1.0,
                  launch_s=1e-5, expert_s=1e-6, row_s=1e-9, ep_s=2e-5)
    h, i, E, k, ep = 1024.0, 512.0, 64.0, 4.0, 8.0

    def want(flops, nbytes, touched, fixed_ep):
        tc = flops / (1e15 * 0.5) * (1 + 1 / flops)
        tm = nbytes / (3e12 * 0.8) * (1 + 1 / nbytes)
        return (tc * tc + tm * tm) ** 0.5 + 1e-5 + 1e-6 * touched + 1e-9 * 4 + fixed_ep

    # T = 1, balanced: 1 expert, 1 row padded to 16; weights 3 h I x 2 B; the local row's
    # A reads (h + I) x 2 B; all 4 routed rows' caches (5 I + 2 h) x 2 B
    flops = 6.0 * 16 * h * i
    local = 3 * h * i * 2 + (h + i) * 2
    nbytes = local + 4 * (5 * i + 2 * h) * 2
    got = moe_fitted_s(p, 1.0, h, i, E, k, 1e15, 3e12, weight_bytes=2.0, ep=ep, routing="balanced")
    assert float(got) == pytest.approx(want(flops, nbytes, 1.0, 2e-5), rel=1e-12)
    # a kernel whose caches hold the rank's rows only: 1 row's caches
    q = p.model_copy(update={"whole_batch_rows": False})
    got = moe_fitted_s(q, 1.0, h, i, E, k, 1e15, 3e12, weight_bytes=2.0, ep=ep, routing="balanced")
    assert float(got) == pytest.approx(want(flops, local + (5 * i + 2 * h) * 2, 1.0, 2e-5), rel=1e-12)
    # EP 1: no EP-path cost
    got = moe_fitted_s(p, 1.0, h, i, E, k, 1e15, 3e12, weight_bytes=2.0, ep=1.0, routing="balanced")
    flops1 = 6.0 * 4 * 16 * h * i  # 4 experts x 1 row, each padded to 16
    nbytes1 = 4 * 3 * h * i * 2 + 4 * (h + i) * 2 + 4 * (5 * i + 2 * h) * 2
    assert float(got) == pytest.approx(want(flops1, nbytes1, 4.0, 0.0), rel=1e-12)


def test_moe_fit_chooses_local_rows_from_the_table():
    from calibration.fit import fit_any  # noqa: PLC0415
    rows = moe_rows()
    true = MOE_TRUE.model_copy(update={"whole_batch_rows": False, "ep_s": 3e-5})
    rows["latency_s"] = predict("moe.mxfp4", true, rows, DEV)
    fit = fit_any("moe.mxfp4", rows, DEV)
    assert fit.params.whole_batch_rows is False
    assert np.abs(predict("moe.mxfp4", fit.params, rows, DEV) / rows["latency_s"] - 1).max() < 0.02


def test_non_gated_moe_layer_by_hand():
    """Nemotron-3's squared-ReLU experts: w1 is [E, I, h] (no gate), 2 h I weights and
    4 m h I FLOPs per expert, and the w13 output is I wide (caches (3 I + 2 h) x 2 B)."""
    from sim.cost_model.fitted import moe_fitted_s  # noqa: PLC0415
    p = MoeParams(compute_efficiency_max=0.5, compute_half_flops=1.0, compute_exponent=1.0,
                  memory_efficiency_max=0.8, memory_half_bytes=1.0, memory_exponent=1.0,
                  launch_s=1e-5, expert_s=1e-6, row_s=1e-9, ep_s=2e-5)
    h, i, E, k, ep = 1024.0, 512.0, 64.0, 4.0, 8.0
    # T = 1, balanced, EP 8: 1 expert, 1 row padded to 16
    flops = 4.0 * 16 * h * i                      # 67,108,864
    nbytes = 2 * h * i * 2 + (h + i) * 2 + 4 * (3 * i + 2 * h) * 2  # 2,097,152 + 3,072 + 28,672
    assert nbytes == 2_128_896
    tc = flops / (1e15 * 0.5) * (1 + 1 / flops)
    tm = nbytes / (3e12 * 0.8) * (1 + 1 / nbytes)
    want = (tc * tc + tm * tm) ** 0.5 + 1e-5 + 1e-6 + 4e-9 + 2e-5
    got = moe_fitted_s(p, 1.0, h, i, E, k, 1e15, 3e12, weight_bytes=2.0, ep=ep, routing="balanced",
                       gated=False)
    assert float(got) == pytest.approx(want, rel=1e-12)
    # arrays mix both kinds; gated rows are the default form
    both = moe_fitted_s(p, np.array([1.0, 1.0]), h, i, E, k, 1e15, 3e12, weight_bytes=2.0, ep=ep,
                        routing="balanced", gated=np.array([True, False]))
    assert both[1] == pytest.approx(want, rel=1e-12)
    assert both[0] == float(moe_fitted_s(p, 1.0, h, i, E, k, 1e15, 3e12, weight_bytes=2.0, ep=ep,
                                         routing="balanced"))


def test_unaligned_w2_term_by_hand():
    """Where the rank's intermediate size is no multiple of 16 the w2 GEMM adds
    m_tiled h (out_s + mac_s I); a multiple of 16 adds nothing."""
    from sim.cost_model.fitted import moe_fitted_s  # noqa: PLC0415
    base = MoeParams(compute_efficiency_max=0.5, compute_half_flops=1.0, compute_exponent=1.0,
                     memory_efficiency_max=0.8, memory_half_bytes=1.0, memory_exponent=1.0,
                     launch_s=1e-5, expert_s=1e-6, row_s=1e-9)
    p = base.model_copy(update={"unaligned_w2_mac_s": 1e-14, "unaligned_w2_out_s": 2e-12})
    h, E, k = 1024.0, 64.0, 4.0

    def t(params, inter):
        return float(moe_fitted_s(params, 1.0, h, inter, E, k, 1e15, 3e12, weight_bytes=2.0,
                                  routing="balanced"))
    # T = 1, EP 1: 4 experts x 1 row, each padded to 16: m_tiled = 64 rows;
    # I = 88: 64 x 1024 x (2e-12 + 88e-14) = 65,536 x 2.88e-12 s = 1.8874368e-7 s
    assert t(p, 88.0) - t(base, 88.0) == pytest.approx(1.8874368e-7, rel=1e-9)
    assert t(p, 96.0) == t(base, 96.0)


def test_moe_table_marks_non_gated_layers(tmp_path):
    from calibration.tables import read_moe_table  # noqa: PLC0415
    path = tmp_path / "vllm-0.24.0_moe.csv"
    path.write_text("kernel_source,moe_dtype,num_tokens,hidden_size,inter_size,topk,num_experts,"
                    "moe_tp_size,moe_ep_size,distribution,latency\n"
                    "k,bfloat16,1,2688,1856,6,128,1,1,balanced,0.065\n"
                    "k,bfloat16,1,2048,768,8,128,1,1,balanced,0.03\n")
    assert read_moe_table(path)["gated"].tolist() == [False, True]


def test_moe_fit_recovers_the_unaligned_w2_cost_and_pins_it_without_such_rows():
    from calibration.fit import fit_any  # noqa: PLC0415
    rows = moe_rows()
    assert not ((rows["inter_size"] / rows["moe_tp_size"]) % 16 != 0).any()
    fit = fit_any("moe.bf16", rows.assign(latency_s=predict("moe.bf16", MOE_TRUE, rows, DEV)), DEV)
    assert fit.params.unaligned_w2_mac_s == 0.0 and fit.params.unaligned_w2_out_s == 0.0
    # 2816 x 704 at TP 8, 16, 32: I / TP = 88, 44, 22
    extra = pd.DataFrame([dict(num_tokens=t, hidden_size=2816, inter_size=704, topk=8, num_experts=128,
                               moe_tp_size=tp, moe_ep_size=1)
                          for t in (1, 16, 256, 4096, 16384) for tp in (4, 8, 16, 32)]).astype(float)
    rows = pd.concat([rows, extra], ignore_index=True)
    true = MOE_TRUE.model_copy(update={"unaligned_w2_mac_s": 2e-14, "unaligned_w2_out_s": 3.5e-12})
    rows["latency_s"] = predict("moe.bf16", true, rows, DEV)
    fit = fit_any("moe.bf16", rows, DEV)
    assert np.abs(predict("moe.bf16", fit.params, rows, DEV) / rows["latency_s"] - 1).max() < 0.02
    assert fit.params.unaligned_w2_out_s == pytest.approx(3.5e-12, rel=0.2)


def test_moe_block_m_rules_by_hand():
    """vLLM's Triton fused_moe: 16-row blocks while T <= E, else 64; OpenAI's
    triton_kernels matmul_ogs (gpt-oss MXFP4): from the tokens per expert r,
    next_pow2(2 r) in [16, 64] while r <= 64, else next_pow2(r) in [16, 128]."""
    from calibration.fit import moe_block_m_rule  # noqa: PLC0415
    from sim.cost_model.fitted import moe_block_m  # noqa: PLC0415
    fused = MOE_TRUE
    ogs = MOE_TRUE.model_copy(update={"block_m_rule": "matmul_ogs"})
    T = np.array([32.0, 160.0, 768.0, 3072.0, 16384.0])
    assert moe_block_m(fused, T, 128.0, T * 4 / 128).tolist() == [16, 64, 64, 64, 64]
    # r = 1, 5, 24, 96, 512 (E = 128, top-4): 2r = 2 -> 16, 10 -> 16, 48 -> 64; r = 96 -> 128; 512 -> 128
    assert moe_block_m(ogs, T, 128.0, T * 4 / 128).tolist() == [16, 16, 64, 128, 128]
    # r = 20 (2r = 40 -> 64) and 12.5 (floor 12: 24 -> 32)
    assert moe_block_m(ogs, 0.0, 1.0, np.array([20.0, 12.5])).tolist() == [64, 32]
    # the kernel decides the rule
    assert moe_block_m_rule(pd.DataFrame({"kernel_source": [
        "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"]})) == "matmul_ogs"
    assert moe_block_m_rule(pd.DataFrame({"kernel_source": [
        "vllm_unquantizedfusedmoe_triton_tritonexperts"]})) == "fused_moe"
    assert moe_block_m_rule(moe_rows()) == "fused_moe"  # no kernel_source column
