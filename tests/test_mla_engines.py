"""Per-engine MLA module fits (``fitted_v1`` ``mla_engines``): TensorRT-LLM's MLA
module is timed by its own fit, other engines by the default ``mla``."""

import pytest

from sim.config import build_config
from sim.cost_model import CostModel
from sim.cost_model.layer_kinds import mla_layer_s
from sim.engine.deployment import build_deployment
from sim.hardware.profile import get_hardware
from sim.model_spec import get_model

DSV3 = "deepseek-ai/DeepSeek-V3"


def test_mla_for_picks_the_engines_fit():
    eff = get_hardware("h100_sxm").efficiency
    assert eff.mla_for("trtllm").layer_s == 1.402e-05 and eff.mla_for("trtllm").launch_s == 3.752e-06
    assert eff.mla_for("vllm") is eff.mla and eff.mla_for(None) is eff.mla and eff.mla_for("sglang") is eff.mla


def test_trtllm_decode_attention_uses_its_fixed_terms():
    hw, m = get_hardware("h200_sxm"), get_model(DSV3)
    default = CostModel(m, hw, tensor_parallel_size=8)
    trt = CostModel(m, hw, tensor_parallel_size=8, engine="trtllm")
    # one decode token, 61 MLA layers: the fixed terms 2 launch_s + layer_s + token_s a layer
    # (mla_layer_s) are vLLM's 2 x 15.79 + 46.45 + 0.0251 = 78.05 us and TensorRT-LLM's
    # 2 x 3.752 + 14.02 + 0.0073 = 21.53 us: 61 x (78.05 - 21.53) us = 3.45 ms apart, plus the
    # two fits' roofline terms on the same (tiny) FLOPs and bytes
    fixed_vllm = 61 * (2 * 1.579e-05 + 4.645e-05 + 2.51e-08)
    fixed_trt = 61 * (2 * 3.752e-06 + 1.402e-05 + 7.316e-09)
    assert fixed_vllm - fixed_trt == pytest.approx(3.448e-3, rel=1e-3)
    a, b = default.attention_s([1], [1000]), trt.attention_s([1], [1000])
    assert b < a - 0.9 * (fixed_vllm - fixed_trt)
    assert b > fixed_trt
    # the engine reaches the cost model from the config
    dep = build_deployment(build_config(overrides={"model": DSV3, "hardware": "h200_sxm", "engine": "trtllm",
                                                   "tensor_parallel_size": 8}))
    assert dep.cost_model.attention_s([1], [1000]) == pytest.approx(
        CostModel(m, hw, tensor_parallel_size=8, kv_cache_dtype=dep.cfg.kv_cache_dtype,
                  engine="trtllm").attention_s([1], [1000]), rel=1e-12)


def test_sglang_decode_takes_trtllm_module_fit_and_prefill_keeps_the_default():
    """SGLang's decode MLA runs TensorRT-LLM's kernels (trtllm_mla on Blackwell) or kernels
    matching them (H100 tables); its prefill keeps the default fit (sim/presets/sglang.py)."""
    from sim.cost_model.layer_kinds import MlaAttention, mla_decode_engine

    assert mla_decode_engine("sglang") == "trtllm"
    assert mla_decode_engine("vllm") == "vllm" and mla_decode_engine("trtllm") == "trtllm"
    assert mla_decode_engine(None) is None
    hw, m = get_hardware("h200_sxm"), get_model(DSV3)
    kind = MlaAttention(m, hw, 8, 2.0, 61, engine="sglang")
    # 61 layers x layer_s: TensorRT-LLM's 14.02 us for decode steps, vLLM's 46.45 us otherwise
    assert kind.fixed_dec_s == pytest.approx(61 * 1.402e-05, rel=1e-12)   # 855.2 us
    assert kind.fixed_s == pytest.approx(61 * 4.645e-05, rel=1e-12)       # 2833.5 us
    assert kind.token_dec_s == pytest.approx(61 * 7.316e-09, rel=1e-12)
    # decode roofline launches: 2 kernels x 61 layers x TensorRT-LLM's 3.752 us = 457.7 us;
    # prefill: x vLLM's 15.79 us = 1926.4 us
    assert kind.dec.c == pytest.approx(2 * 61 * 3.752e-06, rel=1e-12)
    assert kind.pre.c == pytest.approx(2 * 61 * 1.579e-05, rel=1e-12)
    sg, trt, vl = (CostModel(m, hw, tensor_parallel_size=8, engine=e) for e in ("sglang", "trtllm", "vllm"))
    # a decode-only step: TensorRT-LLM's time exactly (both the general and the decode_C path)
    assert sg.attention_s([1, 1], [1000, 3000]) == trt.attention_s([1, 1], [1000, 3000])
    # the rest of the step is the default's (TensorRT-LLM's own fused-MoE fit, ``moe_engines``,
    # is not SGLang's)
    assert sg.step_time_s([1] * 4, [1500] * 4) == pytest.approx(
        vl.step_time_s([1] * 4, [1500] * 4) - vl.attention_s([1] * 4, [1500] * 4)
        + sg.attention_s([1] * 4, [1500] * 4), rel=1e-12)
    # a prefill-only step: vLLM's (the default fit) exactly
    assert sg.attention_s([512], [0]) == vl.attention_s([512], [0])
    # a mixed step: the default fixed terms once, the decode part at TensorRT-LLM's roofline
    mixed_vllm = vl.attention_s([1, 512], [1000, 0])
    assert sg.attention_s([1, 512], [1000, 0]) == pytest.approx(
        mixed_vllm - vl.attention_s([1], [1000]) + trt.attention_s([1], [1000])
        - 61 * (1.402e-05 + 7.316e-09) + 61 * (4.645e-05 + 2.51e-08), rel=1e-9)
