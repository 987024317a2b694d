"""Issue #20, parallelism: attention data parallelism (DP groups of ranks that
step together), expert parallelism (per-GPU experts, load imbalance,
all-to-all), their config validation and the engine's DP group. Hand-computed
values on a small MoE model and the round-number test GPU (tests/data)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from sim.config import build_config
from sim.cost_model.parallel import (NIC_BANDWIDTH_BYTES_PER_S, NIC_LATENCY_S, ParallelLayout, ParallelMoe,
                                     all_to_all_s, ep_rank_rows_max,
                                     expert_weight_bytes_read_per_gpu, remote_ranks_per_token, resolve_layout,
                                     weight_bytes_per_gpu)
from sim.cost_model.moe import expected_max_std_normal, max_rank_load
from sim.engine.deployment import build_deployment
from sim.errors import ConfigError, InfeasibleError
from sim.hardware.profile import get_hardware
from sim.model_spec import ModelSpec
from sim.paths import shared_dir
from sim.runner import make_simulation, make_specs, run_simulation

DATA = Path(__file__).parent / "data"
GPU = str(DATA / "test_gpu.yaml")
HW = get_hardware(GPU)  # 1e15 FLOP/s, 1e12 B/s, link 1e11 B/s, latency 0, 8 GPUs per NVLink domain

#: a small Qwen3-MoE: 2 layers, 64 experts top-4 of 3 x 1024 x 512 parameters each
MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_hidden_layers": 2,
    "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128,
    "intermediate_size": 3072, "moe_intermediate_size": 512, "num_experts": 64, "num_experts_per_tok": 4,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 32000, "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}
EXPERT_BYTES = 3 * 1024 * 512 * 2  # one expert, all of it, bf16: 3,145,728 B


@pytest.fixture(scope="module")
def moe_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("moe") / "config.json"
    p.write_text(json.dumps(MOE))
    return str(p)


@pytest.fixture(scope="module")
def moe():
    return ModelSpec.from_hf_config(MOE, name="tiny-moe")


def _cfg(path, **kw):
    base = {"model": path, "hardware": GPU, "scheduler": "chunked", "max_num_batched_tokens": 256,
            "max_num_seqs": 16, "workload.num_requests": 1, "workload.arrival": "inf",
            "workload.input_len": {"dist": "fixed", "value": 100},
            "workload.output_len": {"dist": "fixed", "value": 5}}
    base.update(kw)
    return build_config(overrides=base)


# -- per-GPU expert bytes ---------------------------------------------------------
def test_expert_bytes_per_gpu_batch_1_vs_large_batch_ep8(moe):
    ep8 = ParallelLayout(tensor_parallel_size=8, moe_ep_size=8, moe_tp_size=1)
    # batch 1: the token's 4 experts spread over 8 GPUs, 4/8 = 0.5 expert each on average
    assert expert_weight_bytes_read_per_gpu(moe, ep8, 1) == pytest.approx(0.5 * EXPERT_BYTES * 2)
    # a large batch touches every expert: each GPU reads its 64 / 8 = 8 experts whole
    assert expert_weight_bytes_read_per_gpu(moe, ep8, 100_000) == pytest.approx(8 * EXPERT_BYTES * 2)
    # tensor-sharded (EP 1 x TP 8) at batch 1: 4 experts x 1/8 of each = the same bytes per GPU
    tp8 = ParallelLayout(tensor_parallel_size=8, moe_ep_size=1, moe_tp_size=8)
    assert expert_weight_bytes_read_per_gpu(moe, tp8, 1) == pytest.approx(0.5 * EXPERT_BYTES * 2)
    # attention DP 8 x EP 8, one token per rank: 8 tokens in the group, each local expert hit
    # with probability 1 - (1 - 4/64)^8
    dp8 = ParallelLayout(tensor_parallel_size=1, data_parallel_size=8, moe_ep_size=8, moe_tp_size=1,
                         attention_dp=True)
    assert expert_weight_bytes_read_per_gpu(moe, dp8, 1) == pytest.approx(
        8 * (1 - (15 / 16) ** 8) * EXPERT_BYTES * 2)


def test_weights_per_gpu_hold_a_share_of_the_experts(moe):
    dp8 = ParallelLayout(1, 8, 8, 1, True)
    all_experts = 64 * 3 * 1024 * 512 * 2 * 2  # 64 experts x 2 layers, bf16
    # the TP-1 model with its experts replaced by 8 of 64
    assert weight_bytes_per_gpu(moe, dp8) == pytest.approx(moe.weight_bytes(None, 1) - all_experts * 7 / 8)
    # TP 8 without EP: the experts are column-sharded instead; the same expert bytes per GPU
    tp8 = ParallelLayout(8, 1, 1, 8, False)
    assert weight_bytes_per_gpu(moe, tp8) == pytest.approx(moe.weight_bytes(None, 8))


# -- load imbalance -----------------------------------------------------------------
def test_expected_max_of_normals_and_most_loaded_rank():
    assert expected_max_std_normal(1) == 0.0
    assert expected_max_std_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-6)
    assert expected_max_std_normal(8) == pytest.approx(1.4236, abs=1e-3)
    # EP 1: every row on the one rank
    assert ep_rank_rows_max(10, 64, 4, 1) == pytest.approx(40)
    # EP 8, N tokens: mean 4N/8, sd sqrt(N 4 (1/8)(7/8)(60/63)), + 1.4236 sd sqrt(8/7) for
    # the max of 8 counts that sum to 4N
    N = 1000
    sd = math.sqrt(N * 4 * (1 / 8) * (7 / 8) * 60 / 63)
    assert ep_rank_rows_max(N, 64, 4, 8) == pytest.approx(500 + 1.4236 * math.sqrt(8 / 7) * sd, rel=1e-4)
    # capped: one token gives a rank at most min(k, E/ep) rows
    assert ep_rank_rows_max(1, 64, 4, 64) <= 1.0


# -- all-to-all ----------------------------------------------------------------------
def test_all_to_all_cost_on_round_number_profile(moe):
    # D = 8 ranks of 1 GPU, EP 8: a token's 4 experts miss a given rank with probability
    # q = C(56, 4) / C(64, 4); it goes to 7 (1 - q) other ranks, 1024 x 2 B each
    q = (56 * 55 * 54 * 53) / (64 * 63 * 62 * 61)
    assert remote_ranks_per_token(64, 4, 8) == pytest.approx(7 * (1 - q))
    lay = ParallelLayout(1, 8, 8, 1, True)
    m = ParallelMoe(moe, HW, lay)
    T = 100
    per_call = T * 7 * (1 - q) * 1024 * 2 / 1e11  # link 100 GB/s, latency 0
    # dispatch + combine, 2 MoE layers
    assert m.comm_s(T) == pytest.approx(2 * 2 * per_call)
    # 16 GPUs over two 8-GPU NVLink domains: 7/15 of the bytes on NVLink, 8/15 on the NIC
    b = 1e6
    assert all_to_all_s(HW, b, 16) == pytest.approx(
        NIC_LATENCY_S + max(b * 7 / 15 / 1e11, b * 8 / 15 / NIC_BANDWIDTH_BYTES_PER_S))
    # experts tensor-sharded over the group (no EP): all-gather + reduce-scatter of (D-1) T h 2 B
    m_tp = ParallelMoe(moe, HW, ParallelLayout(1, 8, 1, 8, True))
    assert m_tp.comm_s(T) == pytest.approx(2 * 2 * 7 * T * 1024 * 2 / 1e11)
    # no DP: no dispatch (the experts' outputs join the TP all-reduce)
    assert ParallelMoe(moe, HW, ParallelLayout(8, 1, 8, 1, False)).comm_s(T) == 0.0


def _a2a_table():
    p = shared_dir() / "kernels" / "h100_sxm" / "vllm-0.24.0_moe_a2a.csv.gz"
    if not p.exists():
        pytest.skip(f"{p} absent")
    import csv
    with gzip.open(p, "rt") as f:
        return list(csv.DictReader(f))


def test_all_to_all_link_roofline_is_a_lower_bound_of_deepep():
    """The link-peak model against DeepEP dispatch/combine measured on 8 H100s
    (not fitted): below every measurement, within 3-30x at small token counts
    (DeepEP's ~50 us low-latency floor vs the link's 9.5 us) and 1.6-4x at large
    ones (DeepEP moves them on ~20-24 SMs, below the NVLink peak)."""
    rows = _a2a_table()
    hw = get_hardware("h100_sxm")
    ratios = {}
    for r in rows:
        if r["comm_backend"] not in ("deepep_ht", "deepep_ll"):
            continue
        E, k, h, T = int(r["num_experts"]), int(r["topk"]), int(r["hidden_size"]), int(r["num_tokens"])
        pred_us = all_to_all_s(hw, T * remote_ranks_per_token(E, k, 8) * h * 2, 8) * 1e6
        ratios.setdefault(T >= 4096, []).append(pred_us / float(r["latency"]))
    small, large = np.array(ratios[False]), np.array(ratios[True])
    assert (small < 1).all() and (large < 1).all()
    assert 0.03 < np.median(small) < 0.35
    assert 0.25 < np.median(large) < 0.65


# -- the DP group's step ---------------------------------------------------------------
def test_dp_group_steps_at_the_slower_rank_padded(moe_path):
    dep = build_deployment(_cfg(moe_path, data_parallel_size=2, enable_expert_parallel=True))
    cm = dep.cost_model
    a = ([1], [100])  # rank 0: one decode
    b = ([64], [0])  # rank 1: a 64-token prefill
    group = cm.dp_group_step_s([a, b])
    # both ranks run their dense layers and dispatch on 64 tokens (the max); rank 0 keeps its
    # own attention and 1 sampled row
    pad_a = cm.attention_s(*a) + cm._linear_s(64.0, 1.0)
    full_b = cm.step_time_s(*b)
    assert group == pytest.approx(max(pad_a, full_b))
    assert group >= cm.step_time_s(*a) and group >= full_b
    # the MoE part sees both ranks' padded tokens: more than rank 1's alone would cost
    lone = build_deployment(_cfg(moe_path, tensor_parallel_size=1)).cost_model
    assert cm._routed(64.0) > 0
    assert cm.step_time_s(*b) != lone.step_time_s(*b)


@pytest.mark.parametrize("overlap", [False, True])
def test_dp_group_engine_conserves_requests_and_blocks(moe_path, overlap):
    cfg = _cfg(moe_path, data_parallel_size=2, enable_expert_parallel=True, overlap_scheduling=overlap,
               **{"workload.num_requests": 40, "workload.arrival": "poisson", "workload.request_rate": 50.0,
                  "workload.input_len": {"dist": "uniform", "low": 20, "high": 300},
                  "workload.output_len": {"dist": "uniform", "low": 2, "high": 40}})
    dep = build_deployment(cfg)
    sim = make_simulation(dep, make_specs(dep))
    assert sim.stepping is None and len(sim.replicas) == 2 and len(sim.dp_groups) == 1
    res = sim.run()  # checks request conservation and KV blocks per rank itself
    for rep in sim.replicas:
        assert rep.kv.num_free_blocks == rep.kv.num_usable_blocks
    req = res.requests
    assert len(req["request_id"]) == 40
    assert set(req["replica"].tolist()) == {0, 1}  # the load balancer used both ranks
    steps = res.steps
    # rows of one group step share the start and the group's step time
    starts = steps["start_time_s"]
    for t in np.unique(starts):
        sel = starts == t
        assert len(np.unique(steps["step_time_s"][sel])) == 1
        assert sel.sum() <= 2
    # rows of both ranks in one step: that step lasted at least each rank's own step
    both = [t for t in np.unique(starts) if (starts == t).sum() == 2]
    assert both


def test_run_summary_counts_the_groups_gpus(moe_path):
    out = run_simulation(_cfg(moe_path, data_parallel_size=4, enable_expert_parallel=True, num_replicas=2,
                              **{"workload.num_requests": 10}))
    assert out.summary["num_gpus"] == 8
    assert out.summary["parallel_layout"] == "attention DP 4 x TP 1, experts EP 4 x TP 1 = 4 GPUs"
    assert out.summary["completed"] == 10


# -- configs ---------------------------------------------------------------------------
def test_layouts_of_the_config_keys(moe):
    assert resolve_layout(moe, HW, tensor_parallel_size=2, data_parallel_size=4,
                          enable_expert_parallel=True) == ParallelLayout(2, 4, 8, 1, True)
    assert resolve_layout(moe, HW, data_parallel_size=4) == ParallelLayout(1, 4, 1, 4, True)
    assert resolve_layout(moe, HW, tensor_parallel_size=4, data_parallel_size=2, moe_ep_size=4,
                          moe_tp_size=2) == ParallelLayout(4, 2, 4, 2, True)


@pytest.mark.parametrize("kw, key", [
    ({"data_parallel_size": 2, "moe_ep_size": 16}, "moe_ep_size: 16"),  # EP larger than the GPUs
    ({"data_parallel_size": 2, "moe_ep_size": 1, "moe_tp_size": 4}, "moe_tp_size: 4 does not divide the 2 GPUs"),
    ({"moe_tp_size": 2}, "moe_tp_size: 2 does not divide the 1 GPUs"),  # names the key given, not moe_ep_size
    ({"data_parallel_size": 3, "enable_expert_parallel": True},
     "enable_expert_parallel: expert parallelism over the group's 3 GPUs (tensor_parallel_size 1 x data_parallel_size 3)"),
    ({"tensor_parallel_size": 16}, "tensor_parallel_size 16"),  # beyond one NVLink domain
])
def test_bad_parallel_configs_are_one_line_errors(moe_path, kw, key):
    with pytest.raises(ConfigError) as e:
        build_deployment(_cfg(moe_path, **kw))
    msg = str(e.value)
    assert key in msg and "\n" not in msg


def test_vllm_runs_only_all_tp_or_all_ep_experts(moe_path):
    """vLLM's FusedMoEParallelConfig: the experts over all tp x dp GPUs, sharded
    (EP 1) or whole (EP = the group); SGLang and TensorRT-LLM split them any way."""
    kw = {"tensor_parallel_size": 4, "moe_ep_size": 2}  # EP 2 x TP 2 over 4 GPUs
    with pytest.raises(ConfigError) as e:
        build_deployment(_cfg(moe_path, engine="vllm", **kw))
    msg = str(e.value)
    assert msg.startswith("moe_ep_size: 2 splits the experts EP 2 x TP 2") and "\n" not in msg
    assert "moe_ep_size 1" in msg and "moe_ep_size 4" in msg
    with pytest.raises(ConfigError, match="^moe_tp_size: 2 splits"):
        build_deployment(_cfg(moe_path, engine="vllm", tensor_parallel_size=4, moe_tp_size=2))
    for engine in ("sglang", "trtllm"):
        assert build_deployment(_cfg(moe_path, engine=engine, **kw)).layout == ParallelLayout(4, 1, 2, 2, False)
    for ok in ({"enable_expert_parallel": True}, {"moe_ep_size": 4}, {"moe_tp_size": 4}, {}):
        layout = build_deployment(_cfg(moe_path, engine="vllm", tensor_parallel_size=4, **ok)).layout
        assert layout.moe_ep_size * layout.moe_tp_size == 4 and layout.moe_ep_size in (1, 4)


def test_expert_keys_on_a_dense_model_are_refused_and_dp_is_replicas():
    dense = str(DATA / "test_model.json")
    with pytest.raises(ConfigError, match="enable_expert_parallel: True applies to MoE models"):
        build_deployment(_cfg(dense, enable_expert_parallel=True))
    dep = build_deployment(_cfg(dense, data_parallel_size=4))
    assert dep.cfg.num_replicas == 4 and dep.cfg.data_parallel_size == 1 and not dep.layout.attention_dp
    assert dep.num_gpus == 4


def test_non_dp_configs_keep_their_cost_model(moe_path):
    """No DP and no EP keys: the tensor-sharded experts, exactly as before."""
    a = build_deployment(_cfg(moe_path, tensor_parallel_size=2)).cost_model
    assert a._routed_override is None


# -- the real DeepSeek-V3 (../shared) ------------------------------------------------------
def _shared_model(name):
    p = shared_dir() / "models" / name
    if not p.exists():
        pytest.skip(f"{p} absent")
    return str(p)


def test_deepseek_v3_dp8_ep8_on_h200_and_h100():
    m = _shared_model("deepseek-ai--DeepSeek-V3_config.json")
    base = {"model": m, "data_parallel_size": 8, "enable_expert_parallel": True, "max_model_len": 8192}
    dep = build_deployment(build_config(overrides={**base, "hardware": "h200_sxm"}))
    # 32 of 256 experts per GPU: 656e9 / 8 fp8 parameters (+ block scales), plus the TP-1 rest
    assert 95 < dep.sizing.weight_bytes_per_rank / 2**30 < 97
    with pytest.raises(InfeasibleError, match="attention DP 8 x TP 1, experts EP 8 x TP 1 = 8 GPUs: .* "
                                              "does not fit on h100_sxm"):
        build_deployment(build_config(overrides={**base, "hardware": "h100_sxm"}))
    # NVFP4 experts fit an H100
    dep = build_deployment(build_config(overrides={**base, "hardware": "h100_sxm", "quantization": "nvfp4"}))
    assert dep.sizing.num_gpu_blocks > 1000


def test_layout_keys_from_the_measured_tables_columns():
    from sim.cost_model.parallel import layout_keys_from_table
    # vLLM rows: tp 2 per DP rank, 2 ranks, EP 4
    assert layout_keys_from_table(2, 2, 1, 4) == {"tensor_parallel_size": 2, "data_parallel_size": 2,
                                                  "moe_ep_size": 4, "moe_tp_size": 1}
    # TensorRT-LLM attention DP: tp_size counts the 8 attention ranks
    assert layout_keys_from_table(8, 8, 1, 8)["tensor_parallel_size"] == 1
    # TensorRT-LLM rows written tp 1 x dp 8
    assert layout_keys_from_table(1, 8, 1, 8) == {"tensor_parallel_size": 1, "data_parallel_size": 8,
                                                  "moe_ep_size": 8, "moe_tp_size": 1}
    # no DP: experts as given
    assert layout_keys_from_table(8, 1, 2, 4)["moe_ep_size"] == 4
    assert layout_keys_from_table(4, None, None, None)["moe_tp_size"] == 4
    with pytest.raises(ConfigError, match="attention_dp_size: 3"):
        layout_keys_from_table(4, 3, 1, 8)
    # vLLM --data-parallel-size 2 without EP, attention_dp_size not recorded: tp 1, experts TP over 2 GPUs
    assert layout_keys_from_table(1, None, 2, 1) == {"tensor_parallel_size": 1, "data_parallel_size": 2,
                                                     "moe_ep_size": 1, "moe_tp_size": 2}
    with pytest.raises(ConfigError, match="moe_ep_size: 1 x moe_tp_size 3 = 3 GPUs, but tp_size is 2"):
        layout_keys_from_table(2, None, 3, 1)  # 3 GPUs of experts: no whole number of TP-2 ranks


def test_ep_experts_take_the_fused_moe_family_at_the_most_loaded_rank(moe):
    """On a fitted profile with a fused-MoE family for the experts' format, an EP rank's
    experts are that fused layer (fitted.moe_fitted_s at ep on the group's tokens, costing
    the most loaded rank's rows) -- not grouped GEMMs."""
    from sim.cost_model import CostModel
    from sim.cost_model.fitted import moe_fitted_s, moe_touched_rows
    from sim.cost_model.roofline import gemm_precision

    hw = get_hardware("h100_sxm")
    fam = hw.efficiency.moe.get("bf16")
    if fam is None:
        pytest.skip("h100_sxm profile without a bf16 fused-MoE family")
    prec = gemm_precision(hw, "bf16")
    # EP 1, experts tensor-sharded over TP 2: rows = T k, and the EP path is the
    # tensor-sharded FittedMoe of CostModel, float for float
    T = 6.0
    pm1 = ParallelMoe(moe, hw, ParallelLayout(2, 1, 1, 2, False))
    cm = CostModel(moe, hw, tensor_parallel_size=2)
    assert pm1(T) == pytest.approx(cm._moe_fitted(T), rel=1e-12)
    # EP 8 (no DP), T = 16 tokens: the most loaded rank's rows inside the fused layer are
    # 16 x 4/8 + sqrt(16 var) z(8) sqrt(8/7), var = 4 (1/8)(7/8)(60/63) (ranks' counts sum
    # to N k); router GEMM on T plus 2 MoE layers
    pm8 = ParallelMoe(moe, hw, ParallelLayout(8, 1, 8, 1, False))
    var = 4 * (1 / 8) * (7 / 8) * 60 / 63
    rows = 16 * 4 / 8 + math.sqrt(16 * var) * expected_max_std_normal(8) * math.sqrt(8 / 7)
    assert float(moe_touched_rows(16.0, 64, 4, 8)[1]) == pytest.approx(rows, rel=1e-12)
    layer = moe_fitted_s(fam, 16.0, 1024, 512, 64, 4, prec.peak_flops_per_s,
                         hw.hbm_bandwidth_bytes_per_s, weight_bytes=2.0, act_bytes=2.0, ep=8.0)
    assert pm8(16.0) == pytest.approx(pm8._router.time_s(16.0) * 2 + 2 * float(layer), rel=1e-12)
    # more than the grouped-GEMM form of the same rows (routing / align / un-permute kernels)
    pm8._fused = None  # (experts_s: __call__ keeps its value per T)
    assert float(pm8.experts_s(16.0)) < pm8._router.time_s(16.0) * 2 + 2 * float(layer)


# -- redundant expert slots (EPLB) --------------------------------------------------
def test_redundant_experts_make_ep_6_hold_64_experts_in_72_slots(moe, moe_path):
    """64 experts over EP 6 do not split whole; 8 redundant slots make 72 physical
    experts, 12 a GPU (vLLM's glossary: 256 + 32 = 288 over 32 ranks, 9 each)."""
    with pytest.raises(ConfigError, match=r"^moe_ep_size: 6 does not divide tiny-moe's 64 routed experts \(each EP "
                                          r"rank holds \(E \+ R\) / ep experts whole\); redundant expert slots "
                                          r"can make them divide \(num_redundant_experts 2: 66 = 6 x 11\)$"):
        resolve_layout(moe, HW, data_parallel_size=6, moe_ep_size=6)
    lay = resolve_layout(moe, HW, data_parallel_size=6, moe_ep_size=6, num_redundant_experts=8)
    assert lay == ParallelLayout(1, 6, 6, 1, True, 8)
    assert lay.describe() == "attention DP 6 x TP 1, experts EP 6 x TP 1 (+8 redundant) = 6 GPUs"
    # weights: the TP-1 model less its 64 experts plus 12 whole ones (2 layers, bf16)
    assert weight_bytes_per_gpu(moe, lay) == pytest.approx(moe.weight_bytes(None, 1) - 64 * EXPERT_BYTES * 2
                                                           + 12 * EXPERT_BYTES * 2)
    # a large batch touches every slot: 12 experts' bytes per GPU and layer
    assert expert_weight_bytes_read_per_gpu(moe, lay, 100_000) == pytest.approx(12 * EXPERT_BYTES * 2)
    pm = ParallelMoe(moe, HW, lay)
    assert (pm.E, pm.S, pm.El) == (64, 72, 12)  # the router scores the 64 logical experts
    assert pm.remote == pytest.approx(remote_ranks_per_token(72, 4, 6))
    for T in (1.0, 7.0, 300.0):
        rows, touched = pm.rows_and_touched(T)
        want = max_rank_load(6 * T, 72, 4, 6)
        assert (float(rows), float(touched)) == pytest.approx((float(want[0]), float(want[1])))
    # a run with the slots: every request finishes, KV blocks come back
    cfg = _cfg(moe_path, data_parallel_size=6, moe_ep_size=6, num_redundant_experts=8,
               **{"workload.num_requests": 24})
    dep = build_deployment(cfg)
    sim = make_simulation(dep, make_specs(dep))
    res = sim.run()  # checks request conservation and KV blocks per rank itself
    assert len(res.requests["request_id"]) == 24
    for rep in sim.replicas:
        assert rep.kv.num_free_blocks == rep.kv.num_usable_blocks
    assert run_simulation(cfg).summary["parallel_layout"] == ("attention DP 6 x TP 1, experts EP 6 x TP 1 "
                                                              "(+8 redundant) = 6 GPUs")


@pytest.mark.parametrize("kw, msg", [
    ({"num_redundant_experts": 8}, r"^num_redundant_experts: 8 needs expert parallelism \(the copies sit on other EP "
                                   r"ranks\); the experts of .* run EP 1 x TP 1 here"),
    ({"data_parallel_size": 4, "moe_ep_size": 4, "num_redundant_experts": 6},
     r"^moe_ep_size: 4 does not divide .*'s 64 routed experts \+ num_redundant_experts 6 = 70 physical experts "
     r"\(each EP rank holds \(E \+ R\) / ep experts whole\); redundant expert slots can make them divide "
     r"\(num_redundant_experts 8: 72 = 4 x 18\)$"),
])
def test_redundant_experts_need_ep_and_a_whole_split(moe_path, kw, msg):
    with pytest.raises(ConfigError, match=msg):
        build_deployment(_cfg(moe_path, **kw))


@pytest.mark.parametrize("r", [1, 32])
def test_redundant_experts_on_a_dense_model_are_refused(r):
    with pytest.raises(ConfigError, match=rf"^num_redundant_experts: {r} applies to MoE models; llama-3.1-8b has no "
                                          r"routed experts$"):
        build_deployment(build_config(overrides={"model": "llama-3.1-8b", "num_redundant_experts": r}))
