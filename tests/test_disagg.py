"""Disaggregated prefill/decode (``disaggregation:``; sim/engine/disagg.py,
sim/engine/kv_transfer.py): hand-computed times on the round-number test GPU
and model (tests/data), link queueing, decode-side KV admission, resharding
bytes, conservation, determinism, and one-line config errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.config import build_config
from sim.engine.deployment import build_deployment
from sim.errors import ConfigError, InfeasibleError
from sim.results.output import request_columns, step_columns
from sim.runner import run_simulation
from sim.workload import RequestSpecs

DATA = Path(__file__).parent / "data"
MODEL, GPU = str(DATA / "test_model.json"), str(DATA / "test_gpu.yaml")
KV_PER_TOKEN = 4096  # test model, bf16, all ranks: 2 x 4 layers x 2 KV heads x 128 x 2 B
BW, LAT = 1e9, 1e-3  # the test link: 1 GB/s per GPU, 1 ms


def _cfg(dis: dict | None = None, **kw):
    ov = {"model": MODEL, "hardware": GPU, "scheduler": "chunked", "exact_steps": True, **kw}
    if dis is not None:
        ov["disaggregation"] = {"kv_transfer_link": "network", "kv_transfer_bandwidth_bytes_per_s": BW,
                                "kv_transfer_latency_s": LAT, "first_token_from": "prefill", **dis}
    return build_config(overrides=ov)


def _specs(prompts, outputs, arrivals=None):
    n = len(prompts)
    return RequestSpecs(arrival_time_s=np.asarray(arrivals if arrivals is not None else np.zeros(n), float),
                        num_prompt_tokens=np.asarray(prompts), output_len=np.asarray(outputs),
                        max_tokens=np.asarray(outputs), priority=np.zeros(n, dtype=np.int64))


def _run(cfg, specs):
    o = run_simulation(cfg, specs=specs)
    return o, request_columns(o.result)


def test_one_request_through_1p1d_by_hand():
    cfg = _cfg({})
    o, r = _run(cfg, _specs([1000], [5]))
    pools = o.deployment.disagg
    prefill_s = pools.prefill.cost_model.step_time_s([1000], [0])
    transfer_s = LAT + 1000 * KV_PER_TOKEN / BW  # 1 ms + 4.096 ms
    assert pools.transfer.time_s(1000) == pytest.approx(transfer_s, rel=1e-12)
    decode = [pools.decode.cost_model.step_time_s([1], [1000 + k]) for k in range(4)]
    assert r["ttft_ms"][0] == pytest.approx(prefill_s * 1e3, rel=1e-12)  # first token from the prefill worker
    assert r["prefill_end_time_s"][0] == pytest.approx(prefill_s, rel=1e-12)
    assert r["kv_transfer_ms"][0] == pytest.approx(transfer_s * 1e3, rel=1e-9)
    assert r["kv_transfer_queue_ms"][0] == 0.0 and r["decode_kv_wait_ms"][0] == 0.0
    assert r["kv_transfer_bytes"][0] == 1000 * KV_PER_TOKEN
    assert r["e2el_ms"][0] == pytest.approx((prefill_s + transfer_s + sum(decode)) * 1e3, rel=1e-9)
    # TPOT as the client sees it: the transfer is inside the first gap
    assert r["tpot_ms"][0] == pytest.approx((transfer_s + sum(decode)) / 4 * 1e3, rel=1e-9)
    assert r["replica"][0] == 1 and r["prefill_worker"][0] == 0 and r["decode_worker"][0] == 0
    steps = step_columns(o.result)
    dec = steps["pool"] == "decode"
    assert steps["start_time_s"][dec][0] == pytest.approx(prefill_s + transfer_s, rel=1e-12)  # after the transfer
    assert list(steps["num_decode_tokens"][dec]) == [1, 1, 1, 1]
    assert list(steps["num_prefill_tokens"][steps["pool"] == "prefill"]) == [1000]
    assert o.summary["num_kv_transfers"] == 1 and o.summary["completed"] == 1


def test_first_token_from_decode_includes_transfer_and_one_step():
    """vLLM's proxy: the decode worker recomputes the last prompt token and samples the first."""
    o, r = _run(_cfg({"first_token_from": "decode"}), _specs([1000], [3]))
    pools = o.deployment.disagg
    prefill_s = pools.prefill.cost_model.step_time_s([1000], [0])
    transfer_s = LAT + 1000 * KV_PER_TOKEN / BW
    first = pools.decode.cost_model.step_time_s([1], [999])
    assert r["ttft_ms"][0] == pytest.approx((prefill_s + transfer_s + first) * 1e3, rel=1e-9)
    rest = sum(pools.decode.cost_model.step_time_s([1], [1000 + k]) for k in range(2))
    assert r["e2el_ms"][0] == pytest.approx((prefill_s + transfer_s + first + rest) * 1e3, rel=1e-9)


def test_two_prompts_finishing_together_queue_on_the_prefill_link():
    # 1P2D: different decode workers, one sender NIC: the second transfer waits for the first
    o, r = _run(_cfg({"num_decode_workers": 2}), _specs([1000, 1000], [3, 3]))
    transfer_s = LAT + 1000 * KV_PER_TOKEN / BW
    assert r["prefill_end_time_s"][0] == r["prefill_end_time_s"][1]  # one prefill step for both
    assert sorted(r["decode_worker"]) == [0, 1]
    assert r["kv_transfer_queue_ms"][0] == 0.0
    assert r["kv_transfer_queue_ms"][1] == pytest.approx(transfer_s * 1e3, rel=1e-9)
    assert r["kv_transfer_end_time_s"][1] - r["kv_transfer_end_time_s"][0] == pytest.approx(transfer_s, rel=1e-9)
    assert o.summary["mean_kv_transfer_queue_ms"] == pytest.approx(transfer_s * 1e3 / 2, rel=1e-9)


def test_decode_worker_fed_by_two_prefill_workers_takes_them_in_turn():
    o, r = _run(_cfg({"num_prefill_workers": 2}), _specs([1000, 1000], [3, 3]))
    transfer_s = LAT + 1000 * KV_PER_TOKEN / BW
    assert sorted(r["prefill_worker"]) == [0, 1]
    assert sorted(r["kv_transfer_queue_ms"]) == pytest.approx([0.0, transfer_s * 1e3], rel=1e-9)


def test_decode_side_kv_admission_waits_for_blocks():
    # decode pool: 79 usable blocks; a request needs ceil(1001 / 16) = 63 at admission: one at a time
    cfg = _cfg({"decode": {"num_gpu_blocks_override": 80}}, max_model_len=1100)
    o, r = _run(cfg, _specs([1000, 1000], [4, 4]))
    assert r["decode_kv_wait_ms"][0] == 0.0
    # B gets its blocks when A finishes on the decode worker (engine time = client time here)
    assert r["decode_kv_wait_ms"][1] == pytest.approx(
        (r["finish_time_s"][0] - r["prefill_end_time_s"][1]) * 1e3, rel=1e-9)
    assert r["decode_kv_wait_ms"][1] > 0
    assert o.summary["p99_decode_kv_wait_ms"] > 0 and o.summary["decode_max_kv_cache_usage"] <= 1.0
    assert (r["status"] == "finished").all()


def _sglang_prealloc_run(reserved: int):
    # decode pool: 80 blocks of 16 tokens, 79 usable = 1,264 tokens; prompts 600 then 400
    cfg = _cfg({"decode": {"num_gpu_blocks_override": 80}, "num_reserved_decode_tokens": reserved},
               max_model_len=1100)
    return _run(cfg, _specs([600, 400], [4, 4], arrivals=[0.0, 0.001]))


def test_sglang_decode_prealloc_keeps_reserved_tokens_per_request_held():
    # A: 600 + R <= 1,264 free: admitted, takes ceil(600 / 16) = 38 blocks -> 41 free = 656 tokens.
    # B with R = 100: 400 + 100 = 500 <= 656 - 100 x 1 held = 556 -> admitted at once
    _, r = _sglang_prealloc_run(100)
    assert r["decode_kv_wait_ms"][1] == 0.0
    # with R = 200: 600 > 656 - 200 = 456 -> B waits until A finishes and frees its blocks
    _, r = _sglang_prealloc_run(200)
    assert r["decode_kv_wait_ms"][1] == pytest.approx(
        (r["finish_time_s"][0] - r["prefill_end_time_s"][1]) * 1e3, rel=1e-9)
    assert r["decode_kv_wait_ms"][1] > 0 and (r["status"] == "finished").all()


def test_sglang_decode_prealloc_on_an_empty_rank_takes_a_prompt_that_fits():
    # 1,000 + R 400 > 1,264 free tokens, but the rank holds nothing: admitted, not stuck
    cfg = _cfg({"decode": {"num_gpu_blocks_override": 80}, "num_reserved_decode_tokens": 400},
               max_model_len=1100)
    _, r = _run(cfg, _specs([1000], [4]))
    assert r["decode_kv_wait_ms"][0] == 0.0 and (r["status"] == "finished").all()


def test_sglang_decode_server_cuts_max_tokens_to_its_own_pools_cap():
    # The decode pool of 3,000 tokens caps a request at max_req_len 2,999 (SGLang's pool size - 1):
    # a 2,900-token prompt keeps 2,999 - 2,900 - 1 = 98 of its 300 max_tokens, as SGLang's
    # init_req_max_new_tokens does on the decode server (the run used to fail on the decode
    # worker's allocation instead)
    cfg = _cfg({"decode": {"max_total_tokens": 3000}}, engine="sglang")
    o, r = _run(cfg, _specs([2900], [300]))
    assert r["status"][0] == "finished" and r["max_tokens"][0] == 98 and r["num_output_tokens"][0] == 98
    assert o.summary["completed"] == 1


def test_num_reserved_decode_tokens_defaults_to_sglangs_512_only_for_sglang():
    from sim.engine.disagg import reserved_decode_tokens

    assert reserved_decode_tokens(_cfg({}, engine="sglang")) == 512  # --num-reserved-decode-tokens
    assert reserved_decode_tokens(_cfg({}, engine="vllm")) is None
    assert reserved_decode_tokens(_cfg({"num_reserved_decode_tokens": 64}, engine="vllm")) == 64


def test_prefill_kv_is_held_until_the_transfer_ends():
    # a slow link: the prefill worker's blocks stay in use through the transfer
    cfg = _cfg({"kv_transfer_bandwidth_bytes_per_s": 1e7})
    o, r = _run(cfg, _specs([1000, 1000], [2, 2], arrivals=[0.0, 0.05]))
    steps = step_columns(o.result)
    pre = steps["pool"] == "prefill"
    # the second prefill step runs while the first prompt's blocks are still held: usage counts both
    usage = steps["kv_cache_usage"][pre]
    assert usage[1] > usage[0] * 1.9
    assert (r["status"] == "finished").all()


def test_output_of_one_token_finishes_on_the_prefill_worker():
    o, r = _run(_cfg({}), _specs([500, 500], [1, 3]))
    assert np.isnan(r["kv_transfer_ms"][0]) and not np.isnan(r["kv_transfer_ms"][1])
    assert r["e2el_ms"][0] == r["ttft_ms"][0]
    assert o.summary["completed"] == 2 and o.summary["num_kv_transfers"] == 1


def test_layerwise_overlap_hides_the_transfer_behind_the_last_prefill_step():
    o, r = _run(_cfg({"kv_transfer_layerwise": True, "kv_transfer_bandwidth_bytes_per_s": 1e8}), _specs([1000], [2]))
    pools = o.deployment.disagg
    prefill_s = pools.prefill.cost_model.step_time_s([1000], [0])
    wire = 1000 * KV_PER_TOKEN / 1e8
    L = 4
    assert r["kv_transfer_ms"][0] == pytest.approx((LAT + max(wire / L, wire - prefill_s * (L - 1) / L)) * 1e3,
                                                   rel=1e-9)


def test_resharding_tp4_prefill_to_tp2_decode_bytes_and_bandwidth():
    dep = build_deployment(_cfg({"prefill": {"tensor_parallel_size": 4}, "decode": {"tensor_parallel_size": 2}}))
    t = dep.disagg.transfer
    # decode layout: 2 ranks x 1 KV head each = the same 4,096 B per token as TP 1
    assert t.kv_bytes_per_token == KV_PER_TOKEN
    assert t.bandwidth_bytes_per_s == 2 * BW  # min(4 sender NICs, 2 receiver NICs)
    assert t.time_s(1000) == pytest.approx(LAT + 1000 * KV_PER_TOKEN / (2 * BW))
    # summary.json: the pair's bandwidth under its own name (the config key is per GPU), and a
    # bandwidth set by hand names the link with that speed
    d = t.describe()
    assert d["kv_transfer_pair_bandwidth_bytes_per_s"] == 2 * BW and "kv_transfer_bandwidth_bytes_per_s" not in d
    assert d["kv_transfer_link_name"] == f"network at {BW / 1e9:,.3g} GB/s per GPU as set"


def test_llama70b_tp8_prefill_to_tp4_decode_on_h100():
    cfg = build_config(overrides={"model": "llama-3.1-70b", "hardware": "h100_sxm", "tensor_parallel_size": 4,
                                  "disaggregation": {"prefill": {"tensor_parallel_size": 8}}})
    t = build_deployment(cfg).disagg.transfer
    assert t.kv_bytes_per_token == 327_680  # 2 x 80 layers x 8 KV heads x 128 x 2 B, whichever TP
    assert t.link == "network"  # 8 + 4 GPUs do not fit one 8-GPU NVLink domain
    assert t.bandwidth_bytes_per_s == 4 * 50e9  # four 400 Gb/s ConnectX-7 on the decode side
    one = build_config(overrides={"model": "llama-3.1-70b", "hardware": "h100_sxm", "tensor_parallel_size": 4,
                                  "disaggregation": {}})
    assert build_deployment(one).disagg.transfer.link == "nvlink"  # 4 + 4 GPUs: one node


def test_conservation_and_determinism_2p3d():
    cfg = build_config(overrides={"model": MODEL, "hardware": GPU, "router": "least_outstanding_requests",
                                  "disaggregation": {"num_prefill_workers": 2, "num_decode_workers": 3,
                                                     "decode": {"num_gpu_blocks_override": 300}}},
                       set_args=["workload.request_rate=200", "workload.num_requests=400", "max_model_len=2048"],
                       workload="chat")
    a, b = run_simulation(cfg), run_simulation(cfg)  # the run itself checks blocks on both pools
    ra, rb = request_columns(a.result), request_columns(b.result)
    for k in ra:
        assert np.array_equal(ra[k], rb[k], equal_nan=ra[k].dtype.kind == "f"), k
    assert a.summary["completed"] + a.summary["num_rejected"] == 400
    done = ra["status"] == "finished"
    multi = done & (ra["num_output_tokens"] > 1)
    assert (~np.isnan(ra["kv_transfer_ms"][multi])).all()  # transferred once
    assert a.summary["num_kv_transfers"] == int(multi.sum())
    assert (ra["num_output_tokens"][done] == ra["max_tokens"][done]).all()
    steps = step_columns(a.result)
    assert steps["num_prefill_tokens"][steps["pool"] == "prefill"].sum() >= ra["num_prompt_tokens"][done].sum()
    assert a.summary["decode_max_kv_cache_usage"] > 0.5  # the small decode pool is exercised


def test_agg_default_is_unchanged_by_the_key():
    cfg = _cfg(None)
    assert cfg.disaggregation is None and build_deployment(cfg).disagg is None


@pytest.mark.parametrize("dis, extra, match", [
    ({"prefill": {"model": "x"}}, {}, r"disaggregation.prefill: model: is the deployment's"),
    ({"decode": {"max_num_seq": 4}}, {}, r"disaggregation.decode: max_num_seq: is not an engine key a pool may "
                                          r"override; did you mean max_num_seqs\?"),
    ({"num_prefil_workers": 2}, {}, r"unknown config key 'disaggregation.num_prefil_workers'; did you mean "
                                    r"disaggregation.num_prefill_workers"),
    ({"num_decode_workers": 0}, {}, r"disaggregation.num_decode_workers"),
    ({"decode": {"scheduler": "static"}}, {}, r"disaggregation.decode.scheduler: 'static'"),
    ({"decode": {"tensor_parallel_size": 3}}, {}, r"disaggregation.decode: tensor_parallel_size must be a power"),
    ({}, {"num_replicas": 2}, r"num_replicas = 2 conflicts with disaggregation"),
    ({"first_token_from": "client"}, {}, r"disaggregation.first_token_from"),
])
def test_bad_configs_are_one_line_errors_naming_the_key(dis, extra, match):
    with pytest.raises(ConfigError, match=match) as e:
        build_deployment(_cfg(dis, **extra))
    assert "\n" not in str(e.value)


def test_network_link_needs_a_nic_in_the_profile():
    cfg = build_config(overrides={"model": MODEL, "hardware": GPU,
                                  "disaggregation": {"kv_transfer_link": "network"}})
    with pytest.raises(ConfigError, match=r"kv_transfer_link: .*'test_gpu' has no 'network' section"):
        build_deployment(cfg)


def test_decode_pool_that_cannot_hold_one_max_length_sequence_is_refused():
    cfg = _cfg({"decode": {"num_gpu_blocks_override": 20}}, max_model_len=4096)
    with pytest.raises((ConfigError, InfeasibleError), match=r"^disaggregation.decode \(the decode pool\): .*4096"):
        build_deployment(cfg)


def _diagnosis_kinds(cfg, specs):
    from sim.compare.diagnosis import diagnose
    from sim.compare.variant_data import VariantData

    o = run_simulation(cfg, specs=specs)
    return {f.kind for f in diagnose("v", VariantData.from_run("v", o))}


def _burst(n=40, prompt=1000, out=20, gap=0.002):
    return _specs([prompt] * n, [out] * n, arrivals=np.arange(n) * gap)


def test_diagnosis_names_a_transfer_bound_run():
    slow = _diagnosis_kinds(_cfg({"kv_transfer_bandwidth_bytes_per_s": 2e7}), _burst())
    fast = _diagnosis_kinds(_cfg({"kv_transfer_bandwidth_bytes_per_s": 1e12, "kv_transfer_latency_s": 0.0}), _burst())
    assert "transfer_bound" in slow and "transfer_bound" not in fast
    assert "decode_kv_bound" not in slow


def test_diagnosis_names_a_decode_kv_bound_run():
    cfg = _cfg({"kv_transfer_bandwidth_bytes_per_s": 1e12, "kv_transfer_latency_s": 0.0,
                "decode": {"num_gpu_blocks_override": 160}}, max_model_len=1300)
    kinds = _diagnosis_kinds(cfg, _burst(out=200))
    assert "decode_kv_bound" in kinds and "transfer_bound" not in kinds


def test_validate_simulates_recorded_disagg_rows_and_lists_the_others(tmp_path):
    import pandas as pd

    from sim.validate.rows import ValidateOptions
    from sim.validate.run import run_validation

    src = pd.read_csv(Path(__file__).resolve().parents[2] / "shared" / "silicon" / "disagg_dev.csv", nrows=1) \
        if (Path(__file__).resolve().parents[2] / "shared" / "silicon" / "disagg_dev.csv").exists() else None
    cols = list(src.columns) if src is not None else None
    base = {"id": "q32", "campaign": "test", "backend": "vllm", "model_path": "Qwen/Qwen3-32B", "system": "h100_sxm",
            "precision": "fp8", "mode": "disagg", "isl": 1000, "osl": 50, "gemm_quant_mode": "fp8_block",
            "concurrency": 4, "tp_size": None, "prefill_batch_size": 1, "prefill_num_workers": 1,
            "prefill_tp_size": 2, "prefill_pp_size": 1, "prefill_attention_dp_size": 1, "decode_batch_size": 8,
            "decode_num_workers": 2, "decode_tp_size": 1, "decode_pp_size": 1, "decode_attention_dp_size": 1,
            "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 20.0}
    rows = [base, {**base, "id": "noconc", "concurrency": None},
            {**base, "id": "dp", "decode_attention_dp_size": 4}, {**base, "id": "noworkers", "decode_num_workers": None}]
    df = pd.DataFrame(rows)
    if cols is not None:
        df = df.reindex(columns=cols)
    p = tmp_path / "d.csv"
    df.to_csv(p, index=False)
    full, summary = run_validation(p, None, ValidateOptions(requests_per_client=2, workers=1), plots=False)
    st = dict(zip(full["id"], full["status"]))
    assert st == {"q32": "ok", "noconc": "not_simulable", "dp": "not_simulable", "noworkers": "not_simulable"}
    why = dict(zip(full["id"], full["reason"]))
    assert "concurrency not recorded" in why["noconc"]
    assert "attention data parallelism" in why["dp"]
    assert why["noworkers"].startswith("worker counts not recorded and no recipe of the nightly harness")
    ok = full[full["id"] == "q32"].iloc[0]
    assert ok["pred_ttft_ms"] > 0 and ok["pred_tpot_ms"] > 0
    # no interval: the cross-validation that sets it holds aggregated rows only
    assert pd.isna(ok["pred_ttft_ms_lo"]) and pd.isna(ok["pred_tpot_ms_hi"])


def test_no_evict_decode_pool_reserves_blocks_to_completion_and_never_preempts():
    cfg = _cfg({"kv_transfer_bandwidth_bytes_per_s": 1e12, "kv_transfer_latency_s": 0.0,
                "decode": {"num_gpu_blocks_override": 200, "capacity_scheduler_policy": "guaranteed_no_evict"}},
               max_model_len=1300)
    o, r = _run(cfg, _burst(n=30, out=200))
    assert o.summary["decode_num_preemptions"] == 0 and (r["status"] == "finished").all()
    assert o.summary["p99_decode_kv_wait_ms"] > 0  # admission waited instead
    plain = _cfg({"kv_transfer_bandwidth_bytes_per_s": 1e12, "kv_transfer_latency_s": 0.0,
                  "decode": {"num_gpu_blocks_override": 200}}, max_model_len=1300)
    assert run_simulation(plain, specs=_burst(n=30, out=200)).summary["decode_num_preemptions"] > 0


def test_one_request_with_overheads_by_hand():
    # frontend latency (send -> router) and a host overhead per step (no overlap: added)
    cfg = _cfg({"kv_transfer_overhead_s": 0.0005}, frontend_latency_s=0.01, cpu_step_overhead_s=0.002)
    o, r = _run(cfg, _specs([1000], [3]))
    pools = o.deployment.disagg
    prefill_s = pools.prefill.cost_model.step_time_s([1000], [0]) + 0.002
    transfer_s = LAT + 0.0005 + 1000 * KV_PER_TOKEN / BW
    decode = [pools.decode.cost_model.step_time_s([1], [1000 + k]) + 0.002 for k in range(2)]
    assert r["ttft_ms"][0] == pytest.approx((0.01 + prefill_s) * 1e3, rel=1e-9)
    assert r["kv_transfer_ms"][0] == pytest.approx(transfer_s * 1e3, rel=1e-9)
    assert r["e2el_ms"][0] == pytest.approx((0.01 + prefill_s + transfer_s + sum(decode)) * 1e3, rel=1e-9)


def test_kv_blocks_conserved_on_both_pools_at_every_step():
    from sim.runner import make_simulation

    cfg = _cfg({"num_prefill_workers": 2, "num_decode_workers": 2, "kv_transfer_bandwidth_bytes_per_s": 1e8,
                "decode": {"num_gpu_blocks_override": 200}}, max_model_len=1300)
    o = run_simulation(cfg, specs=_burst(n=4))  # for the deployment
    sim = make_simulation(o.deployment, _burst(n=30, out=60))
    d = sim.disagg
    checks = [0]

    def check():
        for rep in d.prefill_replicas:
            kv = rep.kv
            held = sum(kv.num_held_blocks(q) for q in rep.scheduler.running) + \
                sum(kv.num_held_blocks(q) for q in kv.held.values())
            assert kv.num_free_blocks + held == kv.num_usable_blocks
        for j, rep in enumerate(d.decode_replicas):
            kv = rep.kv
            held = sum(kv.num_held_blocks(q) for q in rep.scheduler.running) + \
                sum(kv.num_held_blocks(q) for q in d.pending[j])
            assert kv.num_free_blocks + held == kv.num_usable_blocks
        checks[0] += 1

    for rep in sim.replicas:
        inner = rep.on_finish

        def hooked(rep_, finished, now, seen, inner=inner):
            inner(rep_, finished, now, seen)
            check()
        rep.on_finish = hooked
    res = sim.run()  # also checks, at the end, that every block came back
    assert checks[0] > 100 and (res.requests["status"] == 0).all()
    assert all(not rep.kv.held for rep in d.prefill_replicas)


def test_compare_pits_agg_against_disagg_on_one_request_stream():
    from sim.compare.variants import load_variants_file, run_variants

    base = build_config(overrides={"model": MODEL, "hardware": GPU},
                        set_args=["workload.request_rate=50", "workload.num_requests=150", "max_model_len=2048"],
                        workload="chat")
    vfile = Path(__file__).resolve().parent.parent / "examples" / "disagg_variants.yaml"
    variants = load_variants_file(vfile)
    out = run_variants(base, variants, workers=1)
    assert list(out) == ["agg-2x-tp4", "1P1D-tp4", "1P2D-tp4", "2P1D-tp4", "agg-3x-tp4"]
    arrivals = {n: np.sort(r.requests["arrival_time_s"]) for n, (_, r) in out.items()}
    first = next(iter(arrivals.values()))
    assert all(np.array_equal(a, first) for a in arrivals.values())  # the identical stream
    s = {n: summ for n, (summ, _) in out.items()}
    assert s["1P2D-tp4"]["num_prefill_workers"] == 1 and s["1P2D-tp4"]["num_decode_workers"] == 2
    assert s["1P2D-tp4"]["num_gpus"] == 3  # the base TP (1 here) per worker and "prefill_utilization" not in s["agg-2x-tp4"]
    assert all(v["completed"] + v["num_rejected"] == 150 for v in s.values())
    assert len({v["num_rejected"] for v in s.values()}) == 1  # the same requests exceed max_model_len everywhere


def test_the_client_reads_the_first_token_from_the_decode_worker_by_default():
    """vLLM's proxy, SGLang's router and Dynamo stream from the decode worker."""
    cfg = build_config(overrides={"model": MODEL, "hardware": GPU, "disaggregation": {}})
    assert cfg.disaggregation.first_token_from == "decode"


def test_a_decode_worker_without_chunked_prefill_takes_prompts_beyond_its_token_budget():
    """TensorRT-LLM's generation-only instance (scheduler mixed, no chunking) receives the
    prompt's KV computed: a 1,000-token prompt over a 256-token budget is served there (the
    rule "prompt > max_num_batched_tokens is refused" is about computing the prompt), while
    the same pool's scheduler as a prefill worker refuses it with that reason."""
    pool = {"scheduler": "mixed", "max_num_batched_tokens": 256, "max_num_seqs": 4}
    cfg = _cfg({"decode": pool}, engine="trtllm")  # (vLLM itself refuses such a budget without chunking)
    o, r = _run(cfg, _specs([1000], [5]))
    assert r["num_output_tokens"][0] == 5 and o.summary["num_rejected"] == 0
    cfg = _cfg({"prefill": pool}, engine="trtllm")
    o, r = _run(cfg, _specs([1000], [5]))
    assert o.summary["num_rejected"] == 1
    assert "prefill pool: prompt (1000 tokens) exceeds the token budget max_num_batched_tokens (256)" in \
        o.result.rejected_reasons[0]


def _frontend_choices(n: int, frontends: int, seed: int = 0) -> list[int]:
    """The frontends ``n`` requests meet, as sim.engine.traffic.Frontends draws them."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 6]))
    return [int(rng.integers(frontends)) for _ in range(n)]


def test_each_frontend_round_robins_the_prefill_then_the_decode_workers_on_its_own():
    """3 frontends behind nginx, 2 prefill and 3 decode workers, 12 requests a second
    apart (nothing contends): request i meets frontend f_i (srt-slurm's nginx in front
    of Dynamo frontends); frontend f's k-th request goes to prefill worker k mod 2 and
    decode worker k mod 3, counting only its own requests. One frontend: the single
    round-robin of before, nothing drawn."""
    n = 12
    specs = _specs([100] * n, [3] * n, arrivals=np.arange(n, dtype=float))
    cfg = _cfg({"num_prefill_workers": 2, "num_decode_workers": 3}, num_frontends=3)
    _, r = _run(cfg, specs)
    seen: dict[int, int] = {}
    want_p, want_d = [], []
    for f in _frontend_choices(n, 3):
        k = seen.get(f, 0)
        seen[f] = k + 1
        want_p.append(k % 2)
        want_d.append(k % 3)
    assert len(set(_frontend_choices(n, 3))) == 3  # the draw meets every frontend
    assert r["prefill_worker"].tolist() == want_p
    assert r["decode_worker"].tolist() == want_d
    _, one = _run(_cfg({"num_prefill_workers": 2, "num_decode_workers": 3}), specs)
    assert one["prefill_worker"].tolist() == [i % 2 for i in range(n)]
    assert one["decode_worker"].tolist() == [i % 3 for i in range(n)]


def test_frontends_are_modelled_for_round_robin_routing_only():
    with pytest.raises(ConfigError, match=r"^num_frontends: 4 frontends are modelled each with its own round-robin "
                                          r"counters \(router round_robin, or random\); router "
                                          r"'least_outstanding_requests' would need each frontend's own view"):
        build_deployment(_cfg({}, num_frontends=4, router="least_outstanding_requests"))
    with pytest.raises(ConfigError, match=r"; disaggregation.decode_router 'least_outstanding_requests' would"):
        build_deployment(_cfg({"decode_router": "least_outstanding_requests"}, num_frontends=2))
    build_deployment(_cfg({}, num_frontends=4, router="random"))


def test_aggregated_replicas_behind_frontends_and_determinism():
    """Aggregated: 2 replicas behind 4 frontends, each frontend's own round-robin; the
    same config and seed give the same assignment."""
    n = 10
    specs = _specs([100] * n, [3] * n, arrivals=np.arange(n, dtype=float))
    cfg = build_config(overrides={"model": MODEL, "hardware": GPU, "scheduler": "chunked", "num_replicas": 2,
                                  "num_frontends": 4, "exact_steps": True})
    _, r = _run(cfg, specs)
    seen: dict[int, int] = {}
    want = []
    for f in _frontend_choices(n, 4):
        want.append(seen.get(f, 0) % 2)
        seen[f] = seen.get(f, 0) + 1
    assert r["replica"].tolist() == want
    _, again = _run(cfg, specs)
    assert again["replica"].tolist() == want
    fast = cfg.model_copy(update={"exact_steps": False})  # the accelerated stepping routes the same
    _, acc = _run(fast, specs)
    assert acc["replica"].tolist() == want and np.array_equal(acc["ttft_ms"], r["ttft_ms"])
