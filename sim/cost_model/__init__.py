"""Roofline cost model: time of one engine step as a per-operator breakdown.

``CostModel(model, hw, ...).step_time_s(num_new_tokens, num_context_tokens)``
is the engine's per-step call; ``operators`` holds the vectorised per-operator
formulas (GEMM, attention, elementwise, all-reduce) that calibration checks
against measured kernels.
"""

from sim.cost_model.operators import (ATTENTION_IMPLS, all_reduce_time_s, attention_cost,
                                      attention_time_s, attention_uniform_time_s,
                                      elementwise_time_s, gemm_cost, gemm_time_s,
                                      uniform_batch_sums)
from sim.cost_model.roofline import GemmPrecision, gemm_dtype, gemm_precision, roofline_time_s
from sim.cost_model.step import PY_RUN_MAX_STEPS, CostModel, StepTime

__all__ = [
    "ATTENTION_IMPLS", "CostModel", "PY_RUN_MAX_STEPS", "GemmPrecision", "StepTime", "all_reduce_time_s",
    "attention_cost", "attention_time_s", "attention_uniform_time_s", "elementwise_time_s",
    "gemm_cost", "gemm_dtype", "gemm_precision", "gemm_time_s", "roofline_time_s", "uniform_batch_sums",
]
