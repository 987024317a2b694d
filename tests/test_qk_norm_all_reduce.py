"""MiniMax-M2's QK-norm spans all heads (``qk_norm_type: per_layer``): under TP the ranks
all-reduce the squared means once per attention layer (``ModelSpec.qk_norm_across_heads``)."""

import dataclasses

import pytest

from sim.cost_model import CostModel
from sim.hardware.profile import get_hardware
from sim.model_spec import get_model

MINIMAX = "MiniMaxAI/MiniMax-M2.5"


def test_minimax_qk_norm_spans_all_heads():
    m = get_model(MINIMAX)  # use_qk_norm: true, qk_norm_type: per_layer
    assert m.qk_norm and m.qk_norm_across_heads
    q = get_model("Qwen/Qwen3-30B-A3B")  # per-head q/k norms (Qwen3): no all-reduce
    assert q.qk_norm and not q.qk_norm_across_heads


def test_minimax_qk_norm_all_reduce_by_hand():
    """MiniMax-M2.5 at TP 4 on h200_sxm, T = 4 tokens: 62 layers x one all-reduce of
    4 x 2 fp32 = 32 B; the custom all-reduce (faster than NCCL here): latency 2.513 us +
    3 x 0.1905 us = 3.0845 us, rate 450e9 x 0.4259 x 4 / 6 = 1.2777e11 B/s,
    32 (1 + (7.965e5 / 32)^0.3766) / 1.2777e11 = 0.0116 us -> 3.0961 us a call,
    x 62 = 191.96 us more than the same model with per-head norms."""
    hw, m = get_hardware("h200_sxm"), get_model(MINIMAX)
    per_head = dataclasses.replace(m, qk_norm_across_heads=False)
    a = CostModel(m, hw, tensor_parallel_size=4).step_time([1] * 4, [1000] * 4).ops["tp_all_reduce"]
    b = CostModel(per_head, hw, tensor_parallel_size=4).step_time([1] * 4, [1000] * 4).ops["tp_all_reduce"]
    assert a - b == pytest.approx(62 * 3.0961e-6, rel=1e-3)
    # one GPU: no all-reduce at all
    assert CostModel(m, hw, tensor_parallel_size=1).step_time([1] * 4, [1000] * 4).ops["tp_all_reduce"] == 0.0
