"""Attention data parallelism and expert parallelism inside disaggregated pools
(sim/engine/disagg.py with sim/engine/dp_group.py): a pool's worker is a DP
group of ranks stepping together; the rank a request lands on, the padded
group step, per-rank KV transfers, conservation and determinism. Hand-computed
times on a small MoE model and the round-number test GPU (tests/data)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sim.config import build_config
from sim.engine.deployment import build_deployment
from sim.errors import ConfigError
from sim.results.output import request_columns, step_columns
from sim.runner import run_simulation
from sim.workload import RequestSpecs

DATA = Path(__file__).parent / "data"
GPU = str(DATA / "test_gpu.yaml")
#: a small Qwen3-MoE (as tests/test_parallel.py): 2 layers, 4 KV heads of 128, 64 experts top-4
MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_hidden_layers": 2,
    "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128,
    "intermediate_size": 3072, "moe_intermediate_size": 512, "num_experts": 64, "num_experts_per_tok": 4,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 32000, "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}
#: KV bytes per token of one TP-1 rank: 2 (K, V) x 2 layers x 4 KV heads x 128 x 2 B
KV_PER_TOKEN_RANK = 2 * 2 * 4 * 128 * 2  # 4096
BW = 1e10  # the test link: 10 GB/s per GPU, no latency


@pytest.fixture(scope="module")
def moe_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("moe") / "config.json"
    p.write_text(json.dumps(MOE))
    return str(p)


def _cfg(path, dis, **kw):
    ov = {"model": path, "hardware": GPU, "scheduler": "chunked", "exact_steps": True,
          "max_num_batched_tokens": 256, "max_num_seqs": 16, **kw,
          "disaggregation": {"kv_transfer_link": "network", "kv_transfer_bandwidth_bytes_per_s": BW,
                             "kv_transfer_latency_s": 0.0, "first_token_from": "prefill", **dis}}
    return build_config(overrides=ov)


def _specs(prompts, outputs, arrivals=None):
    n = len(prompts)
    return RequestSpecs(arrival_time_s=np.asarray(arrivals if arrivals is not None else np.zeros(n), float),
                        num_prompt_tokens=np.asarray(prompts), output_len=np.asarray(outputs),
                        max_tokens=np.asarray(outputs), priority=np.zeros(n, dtype=np.int64))


def test_1p1d_decode_dp2_ranks_and_the_padded_group_step(moe_path):
    """Three 80-token prompts prefilled in one step on one prefill worker; the
    decode worker is a DP group of 2 ranks (EP 2). vLLM's load balancer
    (4 x waiting + running, ties to the lowest rank) sends request 0 to rank 0,
    1 to rank 1 (rank 0 has one waiting), 2 to rank 0 (tie). The transfers
    leave the prefill rank's link one after the other (t each); rank 0 starts
    decoding request 0 alone, requests 1 and 2 land during that step and join
    the next: rank 0 then runs 2 tokens, rank 1 one, padded to 2."""
    cfg = _cfg(moe_path, {"dp_rank_routing": "dp_load_balancer",
                          "decode": {"data_parallel_size": 2, "enable_expert_parallel": True}})
    o = run_simulation(cfg, specs=_specs([80, 80, 80], [4, 4, 4]))
    r, steps = request_columns(o.result), step_columns(o.result)
    pools = o.deployment.disagg
    assert pools.decode.layout.data_parallel_size == 2 and pools.decode.layout.moe_ep_size == 2
    pc, dc = pools.prefill.cost_model, pools.decode.cost_model
    t_p = pc.step_time_s([80, 80, 80], [0, 0, 0])
    t = 80 * KV_PER_TOKEN_RANK / BW  # one prompt over one TP-1 rank's link: 32.768 us
    assert pools.transfer.time_s(80) == pytest.approx(t, rel=1e-12)
    assert list(r["decode_worker"]) == [0, 0, 0] and list(r["decode_dp_rank"]) == [0, 1, 0]
    assert list(r["prefill_dp_rank"]) == [0, 0, 0]
    assert list(r["replica"]) == [1, 2, 1]  # global ranks: the prefill rank first
    assert list(r["kv_transfer_queue_ms"]) == pytest.approx([0.0, t * 1e3, 2 * t * 1e3], rel=1e-9)
    g = dc.dp_group_step_s
    s1 = g([([1], [80])])                                     # rank 0: request 0 alone
    s2 = g([([1, 1], [81, 80]), ([1], [80])])                 # rank 0: requests 0, 2; rank 1: request 1
    s3 = g([([1, 1], [82, 81]), ([1], [81])])
    s4 = g([([1], [82]), ([1], [82])])                        # request 0 done
    assert 2 * t < s1  # requests 1, 2 land during the first decode step
    # the padded step: rank 1's one decode runs the dense layers on rank 0's 2 tokens
    assert s2 == pytest.approx(max(dc.attention_s([1, 1], [81, 80]) + dc._linear_s(2.0, 2.0),
                                   dc.attention_s([1], [80]) + dc._linear_s(2.0, 1.0)), rel=1e-12)
    assert s2 > dc.step_time_s([1], [80])
    dec = steps["pool"] == "decode"
    starts = np.unique(steps["start_time_s"][dec])
    t0 = t_p + t
    assert list(starts) == pytest.approx([t0, t0 + s1, t0 + s1 + s2, t0 + s1 + s2 + s3], rel=1e-12)
    assert list(np.unique(steps["step_time_s"][dec])) == sorted([s1, s2, s3, s4])
    assert list(steps["replica"][dec]) == [1, 1, 2, 1, 2, 1, 2]  # one row per rank that ran
    e2el = np.array([t0 + s1 + s2 + s3, t0 + s1 + s2 + s3 + s4, t0 + s1 + s2 + s3 + s4]) * 1e3
    assert list(r["e2el_ms"]) == pytest.approx(list(e2el), rel=1e-12)
    assert list(r["ttft_ms"]) == pytest.approx([t_p * 1e3] * 3, rel=1e-12)


def test_kv_transfer_bytes_follow_the_decode_ranks_layout(moe_path):
    """Prefill TP 2 (no DP) -> decode DP 2 x TP 1: each decode rank holds the
    prompt's KV over one GPU; the transfer runs at min(2 x bw, 1 x bw)."""
    cfg = _cfg(moe_path, {"prefill": {"tensor_parallel_size": 2},
                          "decode": {"data_parallel_size": 2, "enable_expert_parallel": True}})
    dep = build_deployment(cfg)
    tr = dep.disagg.transfer
    assert tr.kv_bytes_per_token == KV_PER_TOKEN_RANK  # one TP-1 rank's layout
    assert tr.bandwidth_bytes_per_s == BW
    assert tr.time_s(1000) == pytest.approx(1000 * KV_PER_TOKEN_RANK / BW, rel=1e-12)


def test_sglang_follows_the_bootstrap_room_on_both_pools(moe_path):
    """SGLang's PD: prefill rank = room % dp and decode rank = room % dp with the
    same random room: equal DP sizes pair rank r with rank r."""
    cfg = _cfg(moe_path, {"num_prefill_workers": 2,
                          "prefill": {"data_parallel_size": 2, "enable_expert_parallel": True},
                          "decode": {"data_parallel_size": 2, "enable_expert_parallel": True}},
               engine="sglang", block_size=16)
    assert cfg.disaggregation.dp_rank_routing is None  # from the engine
    o = run_simulation(cfg, specs=_specs([50 + 7 * i for i in range(40)], [5] * 40,
                                         arrivals=np.arange(40) * 0.001))
    r = request_columns(o.result)
    assert (r["prefill_dp_rank"] == r["decode_dp_rank"]).all()
    assert set(r["prefill_dp_rank"].tolist()) == {0, 1} and set(r["prefill_worker"].tolist()) == {0, 1}
    assert o.summary["completed"] == 40


def test_conservation_and_determinism_with_dp_pools(moe_path):
    """2 prefill workers of DP 2 -> 1 decode worker of DP 4 (EP 4), a tight decode
    KV cache: every request prefilled once, transferred once, decoded once (the
    run checks blocks on every rank and the pools' queues); same seed, same bits."""
    cfg = build_config(overrides={
        "model": moe_path, "hardware": GPU, "scheduler": "chunked", "router": "least_outstanding_requests",
        "max_num_batched_tokens": 512, "max_num_seqs": 8, "max_model_len": 512,
        "disaggregation": {"num_prefill_workers": 2, "num_decode_workers": 1, "first_token_from": "prefill",
                           "prefill": {"data_parallel_size": 2, "enable_expert_parallel": True},
                           "decode": {"data_parallel_size": 4, "enable_expert_parallel": True,
                                      "num_gpu_blocks_override": 40}},
        "workload.num_requests": 200, "workload.arrival": "poisson", "workload.request_rate": 400.0,
        "workload.input_len": {"dist": "uniform", "low": 20, "high": 400},
        "workload.output_len": {"dist": "uniform", "low": 1, "high": 60}})
    a, b = run_simulation(cfg), run_simulation(cfg)
    ra, rb = request_columns(a.result), request_columns(b.result)
    for k in ra:
        assert np.array_equal(ra[k], rb[k], equal_nan=ra[k].dtype.kind == "f"), k
    assert a.summary["completed"] + a.summary["num_rejected"] == 200
    done = ra["status"] == "finished"
    multi = done & (ra["num_output_tokens"] > 1)
    assert (~np.isnan(ra["kv_transfer_ms"][multi])).all()
    assert np.isnan(ra["kv_transfer_ms"][done & (ra["num_output_tokens"] == 1)]).all()
    assert a.summary["num_kv_transfers"] == int(multi.sum())
    assert (ra["num_output_tokens"][done] == ra["max_tokens"][done]).all()
    assert set(ra["decode_dp_rank"][multi].tolist()) == {0, 1, 2, 3}
    assert set(ra["prefill_worker"][done].tolist()) == {0, 1}
    assert set(ra["replica"][multi].tolist()) <= {4, 5, 6, 7}  # the decode ranks follow the 4 prefill ranks
    steps = step_columns(a.result)
    pre = steps["pool"] == "prefill"
    ran = set(steps["replica"][pre].tolist())
    assert {0, 2} <= ran <= {0, 1, 2, 3}  # both prefill groups' ranks (global 0-1 and 2-3)
    # every prompt prefilled once: the prefill pool's tokens are the prompts' (no prefix cache here)
    assert steps["num_prefill_tokens"][pre].sum() >= ra["num_prompt_tokens"][done].sum()
    assert a.summary["decode_max_kv_cache_usage"] > 0.5  # the small decode ranks are exercised
    assert a.summary["num_gpus"] == 2 * 2 + 4  # workers x DP ranks x TP 1
    assert a.summary["decode_parallel_layout"] == "attention DP 4 x TP 1, experts EP 4 x TP 1 = 4 GPUs"
    # utilisation: each pool's busy time (every rank records its group's steps) over its engines
    # (workers x DP ranks) x the run's duration, at most 1
    for p, engines in (("prefill", 2 * 2), ("decode", 1 * 4)):
        busy = steps["step_time_s"][steps["pool"] == p].sum()
        assert a.summary[f"{p}_utilization"] == busy / (a.summary["duration"] * engines)
        assert 0 < a.summary[f"{p}_utilization"] <= 1


def test_non_dp_disagg_has_no_rank_columns(moe_path):
    o = run_simulation(_cfg(moe_path, {}), specs=_specs([80], [3]))
    r = request_columns(o.result)
    assert "decode_dp_rank" not in r and "prefill_dp_rank" not in r
    assert r["decode_worker"][0] == 0 and r["replica"][0] == 1


def test_bad_pool_parallelism_is_a_one_line_error_naming_the_pool(moe_path):
    with pytest.raises(ConfigError, match=r"disaggregation.decode .*moe_ep_size: 3 does not divide"):
        build_deployment(_cfg(moe_path, {"decode": {"data_parallel_size": 2, "moe_ep_size": 3}}))
