"""Per-engine fused-MoE fits (``fitted_v1`` ``moe_engines``): TensorRT-LLM's experts are
timed by the fit to its own MoE table (its CUTLASS kernel), other engines by ``moe``."""

import pydantic
import pytest

from sim.config import build_config
from sim.cost_model import CostModel
from sim.cost_model.operators import moe_layer_time_s
from sim.cost_model.parallel import ParallelLayout, ParallelMoe
from sim.engine.deployment import build_deployment
from sim.hardware.efficiency import FittedEfficiency
from sim.hardware.profile import get_hardware
from sim.model_spec import get_model

QWEN_MOE = "Qwen/Qwen3-30B-A3B"


def test_moe_for_merges_the_engines_fits_over_the_default():
    eff = get_hardware("h100_sxm").efficiency
    trt = eff.moe_for("trtllm")
    assert trt["fp8_block"] is eff.moe_engines["trtllm"]["fp8_block"]
    assert trt["fp8_block"].expert_s == 5.219e-07 and eff.moe["fp8_block"].expert_s == 1.013e-07
    # a format TensorRT-LLM's table lacks (int4_wo) keeps the default fit
    assert trt["int4_wo"] is eff.moe["int4_wo"]
    # other engines, and none, take the default families
    assert eff.moe_for("vllm") is eff.moe and eff.moe_for("sglang") is eff.moe and eff.moe_for(None) is eff.moe


def test_trtllm_fp8_block_layer_by_hand():
    """One DeepSeek-V3 MoE layer at TP 8 (h 7168, I/8 = 256, E 256, top-8), T = 1 token,
    uniform routing, on h100_sxm with TensorRT-LLM's fp8_block fit:
    touched = 256 (1 - (1 - 8/256)) = 8 experts, m = 8 rows, padded to 16 each -> 128;
    FLOPs = 6 x 128 x 7168 x 256 = 1,409,286,144; bytes = 8 x 3 x 7168 x 256 x 1 (fp8
    weights) + 8 x (7168 x 1 + 256 x 2) + 8 x (5 x 256 + 2 x 7168) x 2 = 44,351,488;
    compute 1.409e9 (1 + (5.99e8 / 1.409e9)^0.2758) / (1978.9e12 x 0.3092) = 4.122 us;
    memory 44.35e6 (1 + (7.92e7 / 44.35e6)^0.9695) / (3.35e12 x 0.9721) = 37.51 us;
    t = 1e-9 + sqrt(4.122^2 + 37.51^2) us + 8 x 0.5219 us + 8 x 1.474 ns = 41.93 us."""
    hw = get_hardware("h100_sxm")
    eff = hw.efficiency
    trt_eff = FittedEfficiency.model_validate({**eff.model_dump(), "moe": eff.moe_for("trtllm")})
    trt_hw = hw.model_copy(update={"efficiency": trt_eff})
    t = float(moe_layer_time_s(trt_hw, 1, 7168, 256, 256, 8, quantization="fp8_block"))
    assert t == pytest.approx(41.93e-6, rel=1e-3)
    # the vLLM Triton fit on the same layer is slower (its 39.6 us launch_s alone)
    assert float(moe_layer_time_s(hw, 1, 7168, 256, 256, 8, quantization="fp8_block")) > 1.2 * t


def test_engine_reaches_tensor_sharded_and_expert_parallel_experts():
    hw, m = get_hardware("h200_sxm"), get_model(QWEN_MOE)
    # Qwen3-30B-A3B at bf16: 48 MoE layers; the step's experts differ by engine, the rest not
    vl = CostModel(m, hw, tensor_parallel_size=2, engine="vllm")
    trt = CostModel(m, hw, tensor_parallel_size=2, engine="trtllm")
    a, b = vl.step_time([1] * 8, [1000] * 8).ops, trt.step_time([1] * 8, [1000] * 8).ops
    assert b["moe_experts"] < a["moe_experts"]
    assert b["attention"] == a["attention"] and b["qkv_proj"] == a["qkv_proj"]
    lay = ParallelLayout(2, 1, 2, 1, True)
    pm_v, pm_t = ParallelMoe(m, hw, lay, engine="vllm"), ParallelMoe(m, hw, lay, engine="trtllm")
    assert pm_t._fused is hw.efficiency.moe_engines["trtllm"]["bf16"]
    assert pm_v._fused is hw.efficiency.moe["bf16"]
    # the engine reaches the cost model from the config
    dep = build_deployment(build_config(overrides={"model": QWEN_MOE, "hardware": "h200_sxm", "engine": "trtllm",
                                                   "tensor_parallel_size": 2}))
    assert dep.cost_model._moe_fitted.fused is hw.efficiency.moe_engines["trtllm"]["bf16"]


def test_unknown_format_in_moe_engines_is_refused():
    eff = get_hardware("h100_sxm").efficiency.model_dump()
    eff["moe_engines"] = {"trtllm": {"fp7": eff["moe"]["bf16"]}}
    with pytest.raises(pydantic.ValidationError, match=r"moe_engines.trtllm: unknown format\(s\) \['fp7'\]"):
        FittedEfficiency.model_validate(eff)

