"""Routed-expert (MoE) quantities shared by the step model and its tests.

Uniform routing: each of a step's T tokens picks ``num_experts_per_tok`` = k of
the E experts; the grouped expert GEMMs (vLLM ``fused_moe``) compute T x k
token rows and read the weights of every expert hit at least once, E (1 - (1 -
k/E)^T) in expectation (k of E at T = 1; all E once T >> E/k). Experts are
tensor-sharded here (vLLM FusedMoE without expert parallelism): each rank
holds 1/tp of every expert's columns.
"""

from __future__ import annotations

from sim.model_spec import WEIGHT_BYTES_PER_PARAM, ModelSpec


def expected_experts_touched(num_experts: int, top_k: int, num_tokens):
    """Expected number of distinct experts hit by ``num_tokens`` tokens routing
    uniformly to ``top_k`` of ``num_experts`` each: E (1 - (1 - k/E)^T)."""
    E, k = num_experts, top_k
    return E * (1.0 - (1.0 - k / E) ** num_tokens)


def expert_weight_bytes_per_step(model: ModelSpec, num_tokens, tensor_parallel_size: int = 1,
                                 quantization: str | None = None):
    """Routed-expert weight bytes one rank reads in one step (all MoE layers):
    distinct experts touched x (w13 + w2 bytes of one expert's shard)."""
    w13, w2 = model.expert_shapes(tensor_parallel_size)
    wb = WEIGHT_BYTES_PER_PARAM[model.family_quantization("experts", quantization)]
    per_expert = (w13.n * w13.k + w2.n * w2.k) * wb
    return (expected_experts_touched(model.num_experts, model.num_experts_per_tok, num_tokens)
            * per_expert * model.num_moe_layers)
