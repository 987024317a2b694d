"""servesim validate on the nightly harness's disaggregated rows: worker counts,
per-pool TP and engine arguments taken from the harness's public recipes
(sim/validate/data/), each row either matched to exactly one recipe (cited) or
listed not simulable with the reason."""

from __future__ import annotations

import re

import pytest

from sim.errors import ConfigError

from sim.validate.disagg_rows import (NotSimulable, disagg_pools, disagg_row_overrides, matching_recipes,
                                      recipe_pools)

GPT_OSS_URL = ("https://github.com/SemiAnalysisAI/InferenceX/blob/645b97aa40b256be330175a649d66c358c685d82/"
               ".github/configs/nvidia-master.yaml#L1066")


def _row(**kw):
    """A nightly row as disagg_dev.csv records it: no worker counts, no batch sizes."""
    row = {"campaign": "2026-03-25", "image": "nvcr.io#nvidia/ai-dynamo/tensorrtllm-runtime:0.7.0.post2",
           "measured": "2026-01-07", "concurrency": 64.0, "backend": "trtllm", "model_path": "openai/gpt-oss-120b",
           "system": "gb200", "precision": "fp4", "mode": "disagg", "isl": 1024, "osl": 1024,
           "prefill_num_workers": None, "prefill_tp_size": 1.0, "prefill_pp_size": 1.0,
           "prefill_attention_dp_size": 1.0, "prefill_moe_ep_size": 1.0,
           "decode_num_workers": None, "decode_tp_size": 4.0, "decode_pp_size": 1.0,
           "decode_attention_dp_size": 1.0, "decode_moe_ep_size": 1.0}
    row.update(kw)
    return row


def _recipe(conc=(1, 64), p=(1, 1, 1, False), d=(1, 4, 1, False), spec="none", dsettings=None, **kw):
    r = {"config": "x", "image": "img:1", "model": "openai/gpt-oss-120b", "runner": "gb200", "precision": "fp4",
         "framework": "dynamo-trt", "isl": 1024, "osl": 1024, "spec_decoding": spec, "conc_list": list(conc),
         "prefill": {"num-worker": p[0], "tp": p[1], "ep": p[2], "dp-attn": p[3],
                     "additional-settings": ["PREFILL_MAX_NUM_TOKENS=20000", "PREFILL_MAX_BATCH_SIZE=32"]},
         "decode": {"num-worker": d[0], "tp": d[1], "ep": d[2], "dp-attn": d[3],
                    "additional-settings": dsettings if dsettings is not None else
                    ["DECODE_MAX_NUM_TOKENS=20000", "DECODE_MAX_BATCH_SIZE=256", "DECODE_GPU_MEM_FRACTION=0.9"]},
         "first_date": "2026-01-01", "removed_date": None, "url": "https://recipe/1"}
    r.update(kw)
    return r


def test_the_committed_recipe_gives_a_gpt_oss_row_its_pools_and_batch_limits():
    """The nightly gpt-oss-120b GB200 1k/1k row at 64 clients: InferenceX's entry
    "P: 1xTP1 D: 1xTP4" (conc-list 1..128), PREFILL_MAX_BATCH_SIZE 32,
    PREFILL_MAX_NUM_TOKENS 20000, DECODE_MAX_BATCH_SIZE 256, DECODE_GPU_MEM_FRACTION 0.9."""
    pools = recipe_pools(_row(image="nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.7.0.post2"))  # '/' = '#'
    assert pools["prefill"] == {"n": 1, "tp": 1, "batch": 32, "keys": {"max_num_batched_tokens": 20000},
                                "recipe": [GPT_OSS_URL]}
    assert pools["decode"]["n"] == 1 and pools["decode"]["tp"] == 4 and pools["decode"]["batch"] == 256
    assert pools["decode"]["keys"] == {"max_num_batched_tokens": 20000, "gpu_memory_utilization": 0.9}
    ov = disagg_row_overrides(_row(), {"engine": "trtllm", "max_num_seqs": 64, "tensor_parallel_size": 1}, pools)
    assert ov["disaggregation"] == {
        "num_prefill_workers": 1, "num_decode_workers": 1,
        "prefill": {"max_num_batched_tokens": 20000, "tensor_parallel_size": 1, "max_num_seqs": 32},
        "decode": {"max_num_batched_tokens": 20000, "gpu_memory_utilization": 0.9, "tensor_parallel_size": 4,
                   "max_num_seqs": 256}}
    assert "max_num_seqs" not in ov and ov["engine"] == "trtllm"
    # the GB200 dynamo-trt launch writes its decode config with dynamo's gen_yaml.py: stream_interval 20,
    # a deployment key (the decode server streams the tokens)
    assert pools["deployment"]["keys"] == {"stream_interval": 20}
    assert "gen_yaml.py" in pools["deployment"]["recipe"][0]
    assert ov["stream_interval"] == 20
    # another runner's entry without a recipe file: its launch script is not read, the default is kept
    other = recipe_pools(_row(image="", system="b200_sxm"), [_recipe(runner="b200")])
    assert "deployment" not in other
    assert "stream_interval" not in disagg_row_overrides(_row(), {"engine": "trtllm"}, other)


def test_a_row_outside_every_recipe_is_not_simulable_with_the_reason():
    # concurrency 48 is in no conc-list of that entry
    with pytest.raises(NotSimulable, match=r"no recipe of the nightly harness .* matches gb200 trtllm fp4 isl 1024 "
                                           r"osl 1024 prefill TP 1.0 decode TP 4.0 at concurrency 48.0"):
        recipe_pools(_row(concurrency=48.0))
    rs = [_recipe(image="img:1")]
    assert matching_recipes(_row(image="img:1"), rs) == rs
    assert matching_recipes(_row(image="img:2"), rs) == []  # another container
    assert matching_recipes(_row(image="img:1", measured="2025-12-31"), rs) == []  # before the entry existed
    assert matching_recipes(_row(image="img:1", measured="2026-02-01"), [_recipe(image="img:1",
                                                                                  removed_date="2026-02-01")]) == []
    assert matching_recipes(_row(image="img:1", system="b200_sxm"), rs) == []
    assert matching_recipes(_row(image="img:1", decode_tp_size=8.0), rs) == []


def test_two_different_deployments_matching_is_ambiguous():
    rs = [_recipe(), _recipe(d=(2, 4, 1, False), url="https://recipe/2")]
    with pytest.raises(NotSimulable, match=r"2 different recipes .* \(the row does not say which ran\): "
                                           r"1P\(ep1\)1D\(ep1\) https://recipe/1; 1P\(ep1\)2D\(ep1\) https://recipe/2"):
        recipe_pools(_row(image=""), rs)
    # the same deployment listed twice (two commits) is one answer
    assert recipe_pools(_row(image=""), [_recipe(), _recipe(url="https://recipe/2")])["decode"]["n"] == 1


@pytest.mark.parametrize("kw,match", [
    ({"spec": "mtp"}, r"the recipe runs speculative decoding \(mtp\), not modelled: https://recipe/1"),
    ({"dsettings": ["DECODE_NODES=4", "SCRIPT_MODE=1k1k-low-latency"]},
     r"sizes its workers by nodes in a launch script \(DECODE_NODES=4, SCRIPT_MODE=1k1k-low-latency\)"),
    ({"dsettings": ["CONFIG_FILE=recipes/unknown.yaml"]}, r"engine arguments are in recipes/unknown.yaml \(srt-slurm\), "
                                                          r"not transcribed"),
])
def test_a_recipe_we_do_not_model_is_named(kw, match):
    with pytest.raises(NotSimulable, match=match):
        recipe_pools(_row(image=""), [_recipe(**kw)], srt={"recipes": {}})


def test_an_srt_slurm_recipe_file_supplies_sglang_engine_arguments():
    srt = {"recipes": {"recipes/a.yaml": {
        "format": "sglang", "url": "https://srt/a", "live": ["2026-01-01", "2026-03-24"],
        "prefill_workers": 1, "decode_workers": 2,
        "prefill": {"tensor-parallel-size": 1, "max-running-requests": 512, "chunked-prefill-size": 8192,
                    "mem-fraction-static": 0.95, "kv-cache-dtype": "fp8_e4m3"},
        "decode": {"tensor-parallel-size": 4, "chunked-prefill-size": 8192, "stream-interval": 50}}}}
    # InferenceX lists CONFIG_FILE under the prefill pool only; it holds both pools' arguments
    r = _recipe(framework="dynamo-sglang", d=(2, 4, 1, False), dsettings=[])
    r["prefill"]["additional-settings"] = ["CONFIG_FILE=recipes/a.yaml"]
    pools = recipe_pools(_row(image="", backend="sglang"), [r], srt)
    assert pools["prefill"] == {"n": 1, "tp": 1, "batch": 512, "recipe": ["https://recipe/1", "https://srt/a"],
                                "keys": {"max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.95,
                                         "kv_cache_dtype": "fp8"}}
    # the decode pool's recipe sets no max-running-requests: SGLang's own default, as it ran
    assert pools["decode"]["n"] == 2 and pools["decode"]["batch"] is None
    assert pools["decode"]["keys"] == {"max_num_batched_tokens": 8192}
    # the decode server's --stream-interval: the deployment's streaming
    assert pools["deployment"] == {"keys": {"stream_interval": 50}, "recipe": ["https://srt/a"]}
    srt["recipes"]["recipes/a.yaml"]["decode_workers"] = 3
    with pytest.raises(NotSimulable, match=r"the harness entry \(https://recipe/1: workers 2\) and its recipe file "
                                           r"\(https://srt/a: workers 3\) disagree on the decode pool"):
        recipe_pools(_row(image="", backend="sglang"), [r], srt)


def test_a_recorded_row_keeps_its_own_pools_and_pp_rows_stay_unmodelled():
    """A row with its worker counts recorded is simulated as recorded (no recipe);
    pipeline parallelism in a row is refused before any recipe is looked up."""
    from pathlib import Path

    rec = _row(prefill_num_workers=2.0, decode_num_workers=1.0, prefill_batch_size=8.0,
               model_path=str(Path(__file__).parent / "data" / "test_model.json"))
    pools = disagg_pools(rec)
    assert pools["prefill"] == {"n": 2, "tp": 1, "batch": 8, "keys": {}, "recipe": []}
    with pytest.raises(NotSimulable, match=r"prefill_pp_size = 2: pipeline parallelism is not modelled"):
        disagg_pools(_row(prefill_pp_size=2.0))


def test_a_recipe_with_dp_attn_and_ep_maps_to_a_dp_group_pool():
    """TensorRT-LLM's enable_attention_dp over a TP 4 worker: 4 attention ranks of
    TP 1, experts EP 4 x TP 1; max_batch_size stays per rank."""
    pools = recipe_pools(_row(image=""), [_recipe(d=(1, 4, 4, True))])
    assert pools["decode"]["tp"] == 1 and pools["decode"]["n"] == 1
    assert pools["decode"]["layout"] == {"data_parallel_size": 4, "moe_ep_size": 4, "moe_tp_size": 1}
    # EP without dp-attn: attention TP over the worker, experts EP 4 x TP 2 over its 8 GPUs
    pools = recipe_pools(_row(image="", decode_tp_size=8.0), [_recipe(d=(1, 8, 4, False))])
    assert pools["decode"]["tp"] == 8
    assert pools["decode"]["layout"] == {"data_parallel_size": 1, "moe_ep_size": 4, "moe_tp_size": 2}
    ov = disagg_row_overrides(_row(), {"engine": "trtllm"}, pools)
    assert ov["disaggregation"]["decode"]["moe_ep_size"] == 4 and ov["disaggregation"]["decode"][
        "tensor_parallel_size"] == 8


def test_sglang_dp_attention_divides_its_running_requests_and_chunk_over_the_ranks():
    """SGLang --enable-dp-attention --dp-size 8 (server_args._handle_data_parallelism):
    max-running-requests 1024 and chunked-prefill-size 16384 are the worker's, 128
    and 2048 per rank."""
    srt = {"recipes": {"recipes/dp.yaml": {
        "format": "sglang", "url": "https://srt/dp", "live": ["2026-01-01", "2026-03-24"],
        "prefill_workers": 1, "decode_workers": 1,
        "prefill": {"tensor-parallel-size": 8, "max-running-requests": 16},
        "decode": {"tensor-parallel-size": 8, "data-parallel-size": 8, "expert-parallel-size": 8,
                   "enable-dp-attention": True, "max-running-requests": 1024, "chunked-prefill-size": 16384}}}}
    r = _recipe(framework="dynamo-sglang", p=(1, 8, 1, False), d=(1, 8, 8, True), dsettings=[])
    r["prefill"]["additional-settings"] = ["CONFIG_FILE=recipes/dp.yaml"]
    row = _row(image="", backend="sglang", prefill_tp_size=8.0, decode_tp_size=8.0)
    pools = recipe_pools(row, [r], srt)
    assert pools["decode"]["tp"] == 1 and pools["decode"]["batch"] == 128
    assert pools["decode"]["keys"] == {"max_num_batched_tokens": 2048}
    assert pools["decode"]["layout"] == {"data_parallel_size": 8, "moe_ep_size": 8, "moe_tp_size": 1}
    assert pools["prefill"]["tp"] == 8 and "layout" not in pools["prefill"]


def test_a_recorded_row_with_attention_dp_in_the_prefill_pool_runs_n_ranks(tmp_path):
    """db-dump layout (per-rank TP 1, attention DP 4, EP 4; decode TP 8 EP 8) of
    DeepSeek-V3 on GB200: the prefill worker is simulated as 4 attention ranks
    stepping together, each with its own batch (the row's batch: per rank)."""
    from sim.config import build_config
    from sim.engine.deployment import build_deployment
    from sim.runner import run_simulation
    from sim.validate.rows import ValidateOptions, row_overrides

    row = _row(image="", backend="trtllm", model_path="deepseek-ai/DeepSeek-V3", precision="fp8",
               gemm_quant_mode="fp8_block", campaign="db-dump/2026-04-27", concurrency=8.0, isl=1024, osl=8,
               prefill_num_workers=1.0, prefill_tp_size=1.0, prefill_attention_dp_size=4.0,
               prefill_moe_tp_size=1.0, prefill_moe_ep_size=4.0, prefill_batch_size=1.0,
               decode_num_workers=1.0, decode_tp_size=8.0, decode_attention_dp_size=1.0, decode_moe_tp_size=1.0,
               decode_moe_ep_size=8.0, decode_batch_size=8.0, silicon_ttft_ms=100.0, silicon_tpot_ms=10.0)
    pools = disagg_pools(row)
    assert pools["prefill"]["tp"] == 1
    assert pools["prefill"]["layout"] == {"data_parallel_size": 4, "moe_ep_size": 4, "moe_tp_size": 1}
    assert pools["decode"]["layout"] == {"data_parallel_size": 1, "moe_ep_size": 8, "moe_tp_size": 1}
    ov = disagg_row_overrides(row, row_overrides({**row, "tp_size": 1}, ValidateOptions(requests_per_client=1)),
                              pools)
    cfg = build_config(overrides=ov)
    dep = build_deployment(cfg)
    assert dep.disagg.prefill.layout.describe() == "attention DP 4 x TP 1, experts EP 4 x TP 1 = 4 GPUs"
    out = run_simulation(cfg)
    req, steps = out.result.requests, out.result.steps
    pre = steps["replica"] < 4
    assert set(steps["replica"][pre].tolist()) == {0, 1, 2, 3}  # 4 prefill ranks, each its own batch
    assert (steps["num_running_seqs"][pre] <= 1).all()  # the row's batch 1 per rank
    assert out.summary["completed"] == 8 and set(req["replica"].tolist()) == {4}  # one decode rank (TP 8)


def test_an_sglang_attention_dp_pool_keeps_sglang_default_request_pool_not_the_rows_batch():
    """cfg252-like row (SGLang, GB200, prefill DP 4 x batch 1, decode 2 workers of
    DP 4 x batch 1 at concurrency 8): the batch is the per-rank load, not
    --max-running-requests (SGLang divides that flag by dp_size: 1 // 4 = 0
    would not start), so both DP pools keep SGLang's default; a pool without
    DP and a TensorRT-LLM DP pool keep the recorded batch."""
    row = _row(image="", backend="sglang", model_path="deepseek-ai/DeepSeek-V3", precision="fp4",
               campaign="db-dump/2026-04-27", concurrency=8.0,
               prefill_num_workers=1.0, prefill_tp_size=1.0, prefill_attention_dp_size=4.0,
               prefill_moe_tp_size=4.0, prefill_moe_ep_size=1.0, prefill_batch_size=1.0,
               decode_num_workers=2.0, decode_tp_size=1.0, decode_attention_dp_size=4.0, decode_moe_tp_size=4.0,
               decode_moe_ep_size=1.0, decode_batch_size=1.0)
    pools = disagg_pools(row)
    assert pools["prefill"]["batch"] is None and pools["decode"]["batch"] is None
    assert pools["decode"]["layout"]["data_parallel_size"] == 4 and pools["decode"]["n"] == 2
    ov = disagg_row_overrides(row, {"engine": "sglang"}, pools)
    assert "max_num_seqs" not in ov["disaggregation"]["decode"]
    no_dp = disagg_pools({**row, "decode_attention_dp_size": 1.0, "decode_tp_size": 4.0, "decode_batch_size": 4.0})
    assert no_dp["decode"]["batch"] == 4 and no_dp["prefill"]["batch"] is None
    trt = disagg_pools({**row, "backend": "trtllm"})
    assert trt["prefill"]["batch"] == 1 and trt["decode"]["batch"] == 1


def test_a_recorded_row_takes_the_streaming_of_the_entries_it_matches():
    """Worker counts recorded: the harness entries matching the row with those
    counts give its stream_interval when all are transcribed and agree."""
    from sim.validate.disagg_rows import recorded_row_deployment_keys

    pools = {"prefill": {"n": 1}, "decode": {"n": 1}}
    got = recorded_row_deployment_keys(_row(image=""), pools, [_recipe()])  # GB200 dynamo-trt: gen_yaml.py
    assert got["keys"] == {"stream_interval": 20} and "https://recipe/1" in got["recipe"]
    # the entry deploys 2 decode workers, the row recorded 1: not what ran
    assert recorded_row_deployment_keys(_row(image=""), pools, [_recipe(d=(2, 4, 1, False))]) is None
    # an entry whose launch is not transcribed (SGLang sized by nodes): not known
    sgl = _recipe(framework="dynamo-sglang")
    assert recorded_row_deployment_keys(_row(image="", backend="sglang"), pools, [sgl]) is None
    # srt-slurm files that disagree (10 vs the default): not known
    srt = {"recipes": {f"recipes/{k}.yaml": {"format": "sglang", "url": f"https://srt/{k}",
                                             "live": ["2026-01-01", "2026-03-24"], "decode": d}
                       for k, d in (("a", {"stream-interval": 10}), ("b", {}))}}
    ra, rb = _recipe(framework="dynamo-sglang"), _recipe(framework="dynamo-sglang", url="https://recipe/2")
    ra["prefill"]["additional-settings"] = ["CONFIG_FILE=recipes/a.yaml"]
    rb["prefill"]["additional-settings"] = ["CONFIG_FILE=recipes/b.yaml"]
    row = _row(image="", backend="sglang")
    assert recorded_row_deployment_keys(row, pools, [ra], srt)["keys"] == {"stream_interval": 10}
    assert recorded_row_deployment_keys(row, pools, [ra, rb], srt) is None


def _nightly(**kw):
    """A nightly DeepSeek-R1 row (disagg_dev.csv, campaign 2026-03-25): no worker counts."""
    row = {"campaign": "2026-03-25", "image": "", "concurrency": 666.0, "backend": "trtllm",
           "model_path": "deepseek-ai/DeepSeek-R1", "system": "gb200", "precision": "fp4", "mode": "disagg",
           "isl": 1024, "osl": 1024, "prefill_num_workers": None, "decode_num_workers": None,
           "prefill_tp_size": 4.0, "prefill_pp_size": 1.0, "decode_tp_size": 32.0, "decode_pp_size": 1.0}
    row.update(kw)
    return row


def test_the_committed_sglang_recipe_file_maps_to_dp_attention_pools():
    """GB200 FP8 1k/1k at 6,144 clients (measured 2026-02-09): InferenceX's entry runs
    recipes/gb200-fp8/1k1k/max-tpt.yaml, transcribed: 2 prefill workers of TP 8 with
    --enable-dp-attention --dp-size 8 --ep-size 8, --max-running-requests 30000,
    --chunked-prefill-size 131072, --mem-fraction-static 0.75; 1 decode worker of TP 32,
    DP 32, EP 32, 45000 requests, chunk 36864, 0.82; kv-cache-dtype fp8_e4m3 and
    --stream-interval 50 on both; the prefill's --max-total-tokens 524288 (each rank's KV
    pool cap) and --ep-num-redundant-experts 32 on both. SGLang divides the request pool
    and the chunk over the DP ranks: 30000 // 8 = 3750 and 131072 // 8 = 16384 per
    prefill rank, 45000 // 32 = 1406 and 36864 // 32 = 1152 per decode rank; not the
    KV cap (a cap on each rank's pool: kv_cache_configurator._apply_token_constraints)."""
    row = _nightly(backend="sglang", precision="fp8", concurrency=6144.0, measured="2026-02-09",
                   prefill_tp_size=8.0, decode_tp_size=32.0)
    pools = recipe_pools(row)
    url = ("https://github.com/csahithi/srt-slurm/blob/a09d3ddcc3eb16bf6b1ea0feb4788fa396c001d4/"
           "recipes/gb200-fp8/1k1k/max-tpt.yaml")
    assert pools["prefill"]["n"] == 2 and pools["prefill"]["tp"] == 1 and pools["prefill"]["batch"] == 3750
    assert pools["prefill"]["keys"] == {"max_num_batched_tokens": 16384, "gpu_memory_utilization": 0.75,
                                        "max_total_tokens": 524288, "num_redundant_experts": 32,
                                        "kv_cache_dtype": "fp8"}
    assert pools["prefill"]["layout"] == {"data_parallel_size": 8, "moe_ep_size": 8, "moe_tp_size": 1}
    assert pools["prefill"]["recipe"][1] == url
    assert pools["decode"]["n"] == 1 and pools["decode"]["tp"] == 1 and pools["decode"]["batch"] == 1406
    assert pools["decode"]["keys"] == {"max_num_batched_tokens": 1152, "gpu_memory_utilization": 0.82,
                                       "num_redundant_experts": 32, "kv_cache_dtype": "fp8"}
    assert pools["decode"]["layout"] == {"data_parallel_size": 32, "moe_ep_size": 32, "moe_tp_size": 1}
    # 4 + 8 worker nodes: nginx on the head node, min(9 + 1, 11) = 10 Dynamo frontends
    assert pools["deployment"] == {"keys": {"stream_interval": 50, "num_frontends": 10}, "recipe": [url]}


def test_the_committed_trtllm_recipe_file_maps_to_per_rank_pools():
    """GB200 FP4 1k/1k at 666 clients (measured 2026-03-23): the entry runs
    recipes/trtllm/gb200-fp4/1k1k/stp/ctx1_gen1_dep32_batch16_eplb0_mtp0.yaml: prefill 1
    worker, tensor_parallel_size 4, moe_expert_parallel_size 4, enable_attention_dp,
    max_batch_size 16, max_num_tokens 16384, free_gpu_memory_fraction 0.6, KV fp8,
    disable_overlap_scheduler; decode 1 worker of 32 attention-DP ranks, EP 32,
    max_batch_size 16 and max_num_tokens 16 (per rank, not divided), 0.7, KV fp8,
    stream_interval 100, num_postprocess_workers 4."""
    pools = recipe_pools(_nightly(measured="2026-03-23"))
    pre, dec = pools["prefill"], pools["decode"]
    assert (pre["n"], pre["tp"], pre["batch"]) == (1, 1, 16)
    assert pre["keys"] == {"max_num_batched_tokens": 16384, "gpu_memory_utilization": 0.6, "kv_cache_dtype": "fp8",
                           "overlap_scheduling": False}
    assert pre["layout"] == {"data_parallel_size": 4, "moe_ep_size": 4, "moe_tp_size": 1}
    assert (dec["n"], dec["tp"], dec["batch"]) == (1, 1, 16)
    assert dec["keys"] == {"max_num_batched_tokens": 16, "gpu_memory_utilization": 0.7, "kv_cache_dtype": "fp8"}
    assert dec["layout"] == {"data_parallel_size": 32, "moe_ep_size": 32, "moe_tp_size": 1}
    # 1 + 8 worker nodes, no frontend section: srt-slurm's defaults, min(9 + 1, 8) = 8 frontends
    assert pools["deployment"]["keys"] == {"stream_interval": 100, "num_postprocess_workers": 4, "num_frontends": 8}
    assert pools["deployment"]["recipe"][0].endswith("/d2f5af03b5b161e9dc0e5895e595796ca63b40b2/recipes/trtllm/"
                                                     "gb200-fp4/1k1k/stp/ctx1_gen1_dep32_batch16_eplb0_mtp0.yaml")
    ov = disagg_row_overrides(_nightly(), {"engine": "trtllm"}, pools)
    assert ov["stream_interval"] == 100 and ov["num_postprocess_workers"] == 4
    assert ov["disaggregation"]["decode"]["max_num_seqs"] == 16
    assert ov["disaggregation"]["prefill"]["overlap_scheduling"] is False


def test_a_harness_entry_whose_ep_disagrees_with_its_recipe_file_runs_the_file_naming_both():
    """B200 FP8 8k/1k at 640 clients: the entry live on 2026-02-12 lists prefill EP 8;
    ctx2_gen1_dep8_batch640_eplb0_mtp0_640.yaml, which the workers read, runs
    moe_expert_parallel_size 1 (InferenceX #919 changed the entry to EP 1 on
    2026-03-23): the file's layout is simulated, both named in the row's warning."""
    row = _nightly(system="b200_sxm", precision="fp8", isl=8192, concurrency=640.0, measured="2026-02-12",
                   prefill_tp_size=8.0, decode_tp_size=8.0)
    pools = recipe_pools(row)
    (note,) = pools.pop("notes")
    assert re.match(r"the harness entry \(https://github.com/SemiAnalysisAI/InferenceX/blob/d3f0375\w+/.github/"
                    r"configs/nvidia-master.yaml#L820: EP 8\) and its recipe file \(https://github.com/csahithi/"
                    r"srt-slurm/blob/d2f5af0\w+/recipes/trtllm/b200-fp8/8k1k/stp/ctx2_gen1_dep8_batch640_eplb0_"
                    r"mtp0_640.yaml: EP 1\) disagree on the prefill pool: the file's engine arguments are simulated, "
                    r"not the entry's \(which the row's own prefill_\* parallelism columns repeat; InferenceX #919",
                    note)
    later = recipe_pools({**row, "measured": "2026-03-23"})
    assert "notes" not in later
    for pl in (pools, later):
        assert (pl["prefill"]["n"], pl["prefill"]["tp"], pl["prefill"]["batch"]) == (2, 1, 1)
        assert pl["prefill"]["layout"] == {"data_parallel_size": 8, "moe_ep_size": 1, "moe_tp_size": 8}
        assert (pl["decode"]["n"], pl["decode"]["tp"], pl["decode"]["batch"]) == (1, 1, 640)
    # the entry's dp-attn that its file does not run: the file's plain TP 8 (no attention DP, EP 1)
    one = recipe_pools({**row, "concurrency": 1.0})
    assert "attention DP True" in one["notes"][0] and "attention DP False" in one["notes"][0]
    assert (one["prefill"]["tp"], one["prefill"].get("layout")) == (8, None)


def _srt_trt(**decode):
    return {"recipes": {"recipes/t.yaml": {
        "format": "trtllm", "url": "https://srt/t", "live": ["2026-01-01", "2026-01-31"],
        "prefill_workers": 1, "decode_workers": 1,
        "prefill": {"tensor_parallel_size": 1, "max_batch_size": 8},
        "decode": {"tensor_parallel_size": 4, "max_batch_size": 64, **decode}}}}


def test_a_trtllm_recipe_file_outside_its_live_days_or_with_mtp_is_refused():
    r = _recipe(dsettings=[])
    r["prefill"]["additional-settings"] = ["CONFIG_FILE=recipes/t.yaml"]
    pools = recipe_pools(_row(image=""), [r], _srt_trt())  # measured 2026-01-07
    assert pools["decode"]["batch"] == 64 and pools["prefill"]["batch"] == 8 and "deployment" not in pools
    with pytest.raises(NotSimulable, match=r"the recipe file's version live on 2026-02-01 is not transcribed "
                                           r"\(https://srt/t was live 2026-01-01 to 2026-01-31\)"):
        recipe_pools(_row(image="", measured="2026-02-01"), [{**r, "removed_date": None}], _srt_trt())
    with pytest.raises(NotSimulable, match=r"the recipe file runs speculative decoding \(speculative_config: "
                                           r"\{'decoding_type': 'MTP'"):
        recipe_pools(_row(image=""), [r], _srt_trt(speculative_config={"decoding_type": "MTP",
                                                                      "num_nextn_predict_layers": 3}))
    # the file's attention DP where the entry lists none: the file's 4 attention ranks, the note names both
    dp = recipe_pools(_row(image=""), [r], _srt_trt(enable_attention_dp=True))
    assert dp["notes"] == ["the harness entry (https://recipe/1: attention DP False) and its recipe file "
                           "(https://srt/t: attention DP True) disagree on the decode pool: the file's engine "
                           "arguments are simulated, not the entry's (which the row's own decode_* parallelism "
                           "columns repeat; InferenceX #919 aligned the entries' metadata with the recipe files)"]
    assert dp["decode"]["tp"] == 1 and dp["decode"]["layout"]["data_parallel_size"] == 4
    bad = _srt_trt()
    bad["recipes"]["recipes/t.yaml"]["format"] = "vllm"
    with pytest.raises(ConfigError, match=r"srt_slurm_recipes.yaml: recipes/t.yaml: format 'vllm' is not one of "
                                          r"sglang, trtllm"):
        recipe_pools(_row(image=""), [r], bad)


def test_redundant_expert_slots_let_ep_48_run_deepseeks_256_experts():
    """gb200-fp4/1k1k/max-tpt.yaml's decode worker runs DP 48 x EP 48 with
    --ep-num-redundant-experts 32 (288 = 48 x 6 physical experts), --max-total-tokens
    3122380 and --num-reserved-decode-tokens 112; its prefill workers cap their pools at
    131072 tokens. The deployment builds: 6 experts on each decode GPU."""
    from sim.config import build_config
    from sim.engine.deployment import build_deployment

    row = _nightly(backend="sglang", concurrency=2048.0, measured="2026-02-08", decode_tp_size=48.0)
    pools = recipe_pools(row)
    assert pools["decode"]["layout"] == {"data_parallel_size": 48, "moe_ep_size": 48, "moe_tp_size": 1}
    assert pools["decode"]["keys"]["num_redundant_experts"] == 32
    assert pools["decode"]["keys"]["max_total_tokens"] == 3122380
    assert pools["prefill"]["keys"]["max_total_tokens"] == 131072
    assert pools["disaggregation"] == {"num_reserved_decode_tokens": 112}
    ov = disagg_row_overrides(row, {"engine": "sglang", "model": "deepseek-ai/DeepSeek-R1", "hardware": "gb200",
                                    "quantization": "nvfp4"}, disagg_pools(row))
    assert ov["disaggregation"]["num_reserved_decode_tokens"] == 112
    dep = build_deployment(build_config(overrides=ov))
    assert dep.disagg.decode.layout.describe() == ("attention DP 48 x TP 1, experts EP 48 x TP 1 (+32 redundant) "
                                                   "= 48 GPUs")
    assert dep.disagg.decode.cost_model._routed_override.El == 6
    # the prefill pool's 4 ranks each hold at most 131072 tokens (pages of 1)
    assert dep.disagg.prefill.sizing.num_gpu_blocks == 131072
    # without the slots the EP 48 pool is refused, naming them
    bare = {**pools, "decode": {**pools["decode"], "keys": {k: v for k, v in pools["decode"]["keys"].items()
                                                            if k != "num_redundant_experts"}}}
    from sim.validate import disagg_rows as dr
    orig = dr.recipe_pools
    try:
        dr.recipe_pools = lambda *a, **k: bare
        with pytest.raises(NotSimulable, match=r"decode pool: expert parallelism over 48 ranks does not divide "
                                               r"deepseek-ai/DeepSeek-R1's 256 routed experts; the deployment's "
                                               r"redundant expert slots"):
            disagg_pools(row)
    finally:
        dr.recipe_pools = orig


def test_a_trtllm_recipes_expert_slots_are_its_redundant_experts():
    """TensorRT-LLM counts the slots, E + redundant: load_balancer.num_slots 288 over
    DeepSeek's 256 is 32 redundant; 256 is none; fewer than E is no such deployment."""
    r = _recipe(dsettings=[], model="deepseek-ai/DeepSeek-R1")
    r["prefill"]["additional-settings"] = ["CONFIG_FILE=recipes/t.yaml"]
    row = _row(image="", model_path="deepseek-ai/DeepSeek-R1")
    got = recipe_pools(row, [r], _srt_trt(moe_config={"load_balancer": {"num_slots": 288}}))
    assert got["decode"]["keys"]["num_redundant_experts"] == 32
    got = recipe_pools(row, [r], _srt_trt(moe_config={"load_balancer": {"num_slots": 256}}))
    assert "num_redundant_experts" not in got["decode"]["keys"]
    with pytest.raises(NotSimulable, match=r"sets moe_config.load_balancer.num_slots 200, not E \+ redundant "
                                           r"slots of the row's model \(256 routed experts\)"):
        recipe_pools(row, [r], _srt_trt(moe_config={"load_balancer": {"num_slots": 200}}))


def test_a_recorded_row_takes_no_streaming_from_a_recipe_version_not_live_on_its_day():
    from sim.validate.disagg_rows import recorded_row_deployment_keys

    srt = {"recipes": {"recipes/a.yaml": {"format": "trtllm", "url": "https://srt/a",
                                          "live": ["2026-01-01", "2026-01-31"],
                                          "decode": {"stream_interval": 100, "num_postprocess_workers": 4}}}}
    r = _recipe()
    r["prefill"]["additional-settings"] = ["CONFIG_FILE=recipes/a.yaml"]
    pools = {"prefill": {"n": 1}, "decode": {"n": 1}}
    got = recorded_row_deployment_keys(_row(image=""), pools, [r], srt)  # measured 2026-01-07
    assert got["keys"] == {"stream_interval": 100, "num_postprocess_workers": 4}
    late = _row(image="", measured="2026-02-02")
    assert recorded_row_deployment_keys(late, pools, [{**r, "removed_date": None}], srt) is None


def test_a_concurrency_that_is_no_client_count_is_named_not_called_unrecorded():
    row = _nightly()
    for bad, shown in ((0.0, "0.0"), (float("inf"), "inf"), (2.5, "2.5")):
        with pytest.raises(NotSimulable, match=rf"^concurrency: must be a whole number >= 1 \(the benchmark's "
                                               rf"clients\), got {re.escape(shown)}$"):
            disagg_pools({**row, "concurrency": bad})
    with pytest.raises(NotSimulable, match=r"^concurrency not recorded"):
        disagg_pools({**row, "concurrency": None})


#: dsr1_gb200_trtllm_fp8_disagg_1024x1024_c27_cfg386 (disagg_dev.csv, db-dump): pools recorded
RECORDED_C27 = {
    "id": "dsr1_gb200_trtllm_fp8_disagg_1024x1024_c27_cfg386", "campaign": "db-dump/2026-04-27",
    "image": "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2", "measured": "2026-02-05",
    "concurrency": 27.0, "backend": "trtllm", "backend_version": "0.8.1.post2",
    "model_path": "deepseek-ai/DeepSeek-V3", "system": "gb200", "precision": "fp8", "mode": "disagg",
    "isl": 1024, "osl": 1024, "prefill_batch_size": 1.0, "prefill_num_workers": 1.0, "prefill_tp_size": 1.0,
    "prefill_pp_size": 1.0, "prefill_attention_dp_size": 8.0, "prefill_moe_tp_size": 1.0,
    "prefill_moe_ep_size": 8.0, "decode_batch_size": 9.0, "decode_num_workers": 3.0, "decode_tp_size": 8.0,
    "decode_pp_size": 1.0, "decode_attention_dp_size": 1.0, "decode_moe_tp_size": 1.0, "decode_moe_ep_size": 8.0}


def test_a_recorded_row_runs_its_recipe_files_engine_arguments_over_its_recorded_batch():
    """The row records batch 9 (27 clients / 3 decode workers); the harness entry with its
    worker counts (GB200 FP8 1k/1k at 27 clients) runs
    ctx1_gen3_tep8_batch8_eplb0_mtp0_27.yaml: decode max_batch_size 8, max_num_tokens 8,
    free_gpu_memory_fraction 0.9, KV fp8, stream_interval 100 and 4 postprocess workers;
    prefill 8 attention ranks of max_batch_size 16, max_num_tokens 16384, 0.5, the overlap
    scheduler off. 24 slots for 27 clients: the file's batch is simulated, the row's
    warning names both."""
    url = ("https://github.com/csahithi/srt-slurm/blob/d2f5af03b5b161e9dc0e5895e595796ca63b40b2/recipes/"
           "trtllm/gb200-fp8/1k1k/stp/ctx1_gen3_tep8_batch8_eplb0_mtp0_27.yaml")
    pools = disagg_pools(RECORDED_C27)
    dec, pre = pools["decode"], pools["prefill"]
    assert (dec["n"], dec["tp"], dec["batch"]) == (3, 8, 8)
    assert dec["keys"] == {"max_num_batched_tokens": 8, "gpu_memory_utilization": 0.9, "kv_cache_dtype": "fp8"}
    assert (pre["n"], pre["tp"], pre["batch"]) == (1, 1, 16)
    assert pre["keys"] == {"max_num_batched_tokens": 16384, "gpu_memory_utilization": 0.5, "kv_cache_dtype": "fp8",
                           "overlap_scheduling": False}
    assert pre["layout"] == {"data_parallel_size": 8, "moe_ep_size": 8, "moe_tp_size": 1}
    # 2 + 6 worker nodes behind nginx: 7 Dynamo frontends
    assert dec["recipe"] == [url] and pools["deployment"]["keys"] == {"stream_interval": 100,
                                                                      "num_postprocess_workers": 4,
                                                                      "num_frontends": 7}
    assert pools["notes"] == [f"the row records prefill batch 1, its recipe file ({url}) runs max batch 16 per "
                              "rank: the file's is simulated",
                              f"the row records decode batch 9, its recipe file ({url}) runs max batch 8 per rank: "
                              "the file's is simulated"]
    # a day the file was not live, or a concurrency no entry lists: the recorded batch, no file
    for other in ({**RECORDED_C27, "measured": "2026-01-02"}, {**RECORDED_C27, "concurrency": 26.0}):
        p = disagg_pools(other)
        assert p["decode"]["batch"] == 9 and p["decode"]["keys"] == {} and "notes" not in p


def test_srt_slurms_frontend_topology():
    """srt-slurm FrontendTopology: one frontend on one worker node or with
    enable_multiple_frontends false, else min(num_additional_frontends + 1, worker
    nodes - 1) (defaults true, 9); no transcribed nodes: unknown."""
    from sim.validate.disagg_rows import srt_num_frontends

    assert srt_num_frontends({"nodes": [4, 8]}) == 10
    assert srt_num_frontends({"nodes": [1, 2]}) == 2
    assert srt_num_frontends({"nodes": [1, 0]}) == 1
    assert srt_num_frontends({"nodes": [2, 6], "frontend": {"enable_multiple_frontends": False}}) == 1
    assert srt_num_frontends({"nodes": [1, 5], "frontend": {"num_additional_frontends": 2}}) == 3
    assert srt_num_frontends({}) is None


def test_a_recorded_row_matching_an_stp_and_an_mtp_entry_runs_the_stp_ones_file():
    """dsr1_gb200_trtllm_fp4_disagg_1024x1024_c12_cfg388: two entries with its worker
    counts, an MTP one (ctx1_gen4_tep8_batch8_eplb0_mtp3.yaml, not transcribed) and an STP
    one (ctx1_gen4_tep8_batch32_eplb0_mtp0.yaml). The row records no speculative decoding
    and is simulated without it, so the STP entry's file runs: decode max_batch_size 32 over
    the recorded 3 clients per worker; the warning names the MTP file left out."""
    url = ("https://github.com/csahithi/srt-slurm/blob/d2f5af03b5b161e9dc0e5895e595796ca63b40b2/recipes/trtllm/"
           "gb200-fp4/1k1k/stp/ctx1_gen4_tep8_batch32_eplb0_mtp0.yaml")
    row = {**RECORDED_C27, "id": "dsr1_gb200_trtllm_fp4_disagg_1024x1024_c12_cfg388", "precision": "fp4",
           "concurrency": 12.0, "decode_num_workers": 4.0, "decode_batch_size": 3.0, "measured": "2026-02-05",
           "prefill_attention_dp_size": 4.0, "prefill_moe_ep_size": 4.0}
    pools = disagg_pools(row)
    assert pools["decode"]["batch"] == 32 and pools["decode"]["recipe"] == [url]
    assert pools["notes"][0] == (
        "harness entries with the row's worker counts that run speculative decoding (recipes/trtllm/gb200-fp4/1k1k/"
        "mtp/ctx1_gen4_tep8_batch8_eplb0_mtp3.yaml) are left out: the row records none and is simulated without "
        "it, with the engine arguments of the entries that run none")
    assert pools["notes"][2] == (f"the row records decode batch 3, its recipe file ({url}) runs max batch 32 per "
                                 "rank: the file's is simulated")


def test_a_recorded_row_whose_only_entries_run_mtp_keeps_its_recorded_batch():
    """dsr1_gb200_trtllm_fp4_disagg_1024x8192_c7_cfg423: the one entry with its worker
    counts runs MTP (ctx1_gen7_tep8_batch1_eplb0_mtp3.yaml, not transcribed): no entry
    without speculative decoding to take, so the recorded batch (1 client per worker) and
    the engine's defaults run, and the warning says so."""
    row = {**RECORDED_C27, "id": "dsr1_gb200_trtllm_fp4_disagg_1024x8192_c7_cfg423", "precision": "fp4",
           "osl": 8192, "concurrency": 7.0, "decode_num_workers": 7.0, "decode_batch_size": 1.0,
           "measured": "2026-03-23", "prefill_attention_dp_size": 4.0, "prefill_moe_ep_size": 4.0}
    pools = disagg_pools(row)
    assert pools["decode"]["batch"] == 1 and pools["decode"]["keys"] == {}
    assert pools["notes"] == [
        "1 harness entry with the row's worker counts (recipes/trtllm/gb200-fp4/1k8k/mtp/"
        "ctx1_gen7_tep8_batch1_eplb0_mtp3.yaml) name a recipe file not transcribed: the row's recorded batch "
        "(the clients per worker) and the engine's defaults are simulated"]


def test_entries_with_speculative_decoding_give_way_to_those_without():
    """Of the harness entries with a recorded row's worker counts, those running speculative
    decoding are left out where some run none; where all run it, all are kept (and the row
    falls back to its recorded batch, as before)."""
    from sim.validate.disagg_rows import _entries_with_workers, _mtp_entries_dropped

    row = _row(prefill_num_workers=1.0, decode_num_workers=1.0)
    pools = {"prefill": {"n": 1}, "decode": {"n": 1}}
    img = row["image"]
    stp, mtp = _recipe(url="https://recipe/stp", image=img), _recipe(spec="mtp", url="https://recipe/mtp", image=img)
    assert _entries_with_workers(row, pools, [mtp, stp]) == [stp]
    assert _entries_with_workers(row, pools, [mtp]) == [mtp]
    assert _entries_with_workers(row, pools, [stp]) == [stp]
    assert "(https://recipe/mtp) are left out" in _mtp_entries_dropped(row, pools, [mtp, stp])
    assert _mtp_entries_dropped(row, pools, [mtp]) is None and _mtp_entries_dropped(row, pools, [stp]) is None


def test_the_stp_files_of_recorded_low_concurrency_rows_cap_their_decode_slots():
    """dsr1_h100_trtllm_fp8_disagg_1024x1024_c6_cfg494 (db-dump, 6 clients, 3 decode workers of
    TEP 16): its STP entry's file ctx1_gen3_tep16_batch1_eplb0_mtp0.yaml (transcribed from the
    harness's srt-slurm branch) runs decode max_batch_size 1: 3 slots for 6 clients, where the
    recorded batch (2 clients per worker) gave 6. Measured TTFT 12.3 s, a decode's length."""
    row = {**RECORDED_C27, "id": "dsr1_h100_trtllm_fp8_disagg_1024x1024_c6_cfg494", "system": "h100_sxm",
           "concurrency": 6.0, "decode_num_workers": 3.0, "decode_batch_size": 2.0, "decode_tp_size": 16.0,
           "decode_moe_ep_size": 16.0, "prefill_tp_size": 1.0, "prefill_attention_dp_size": 16.0,
           "prefill_moe_ep_size": 16.0, "measured": "2026-02-08",
           "image": "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post3"}
    pools = disagg_pools(row)
    assert (pools["decode"]["n"], pools["decode"]["batch"]) == (3, 1)
    assert pools["decode"]["recipe"][0].endswith("recipes/trtllm/h100-fp8/1k1k/stp/ctx1_gen3_tep16_batch1_eplb0_mtp0.yaml")


def test_a_recorded_sglang_row_takes_its_files_reserved_decode_tokens_as_a_deployment_key():
    """dsr1_gb200_sglang_fp4_disagg_1024x1024_c512_cfg483 (db-dump): 4 prefill workers of DP 4,
    1 decode worker of DP 32 at 512 clients; its entry's file (gb200-fp4/1k1k/mid-curve.yaml)
    sets the decode server's --num-reserved-decode-tokens 112, a disaggregation key, not a
    pool's, and the deployment builds with it."""
    from sim.config import build_config
    from sim.engine.deployment import build_deployment
    from sim.validate.rows import row_overrides
    from sim.validate.run import ValidateOptions

    row = {"id": "dsr1_gb200_sglang_fp4_disagg_1024x1024_c512_cfg483", "campaign": "db-dump/2026-04-27",
           "measured": "2026-02-08", "concurrency": 512.0, "backend": "sglang", "backend_version": "0.5.8",
           "model_path": "deepseek-ai/DeepSeek-V3", "system": "gb200", "precision": "fp4", "mode": "disagg",
           "isl": 1024, "osl": 1024, "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4",
           "prefill_batch_size": 1.0, "prefill_num_workers": 4.0, "prefill_tp_size": 1.0, "prefill_pp_size": 1.0,
           "prefill_attention_dp_size": 4.0, "prefill_moe_tp_size": 1.0, "prefill_moe_ep_size": 4.0,
           "decode_batch_size": 16.0, "decode_num_workers": 1.0, "decode_tp_size": 1.0, "decode_pp_size": 1.0,
           "decode_attention_dp_size": 32.0, "decode_moe_tp_size": 1.0, "decode_moe_ep_size": 32.0,
           "silicon_ttft_ms": 767.0, "silicon_tpot_ms": 15.0}
    pools = disagg_pools(row)
    assert pools["disaggregation"] == {"num_reserved_decode_tokens": 112}
    assert "num_reserved_decode_tokens" not in pools["decode"]["keys"]
    ov = disagg_row_overrides(row, row_overrides({**row, "tp_size": 1}, ValidateOptions()), pools)
    assert build_deployment(build_config(overrides=ov)).cfg.disaggregation.num_reserved_decode_tokens == 112


def _transcriber():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "transcribe_srt_recipes.py"
    spec = importlib.util.spec_from_file_location("_transcribe_srt_recipes", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SRT_TRT_FILE = """
resources: {prefill_nodes: 2, prefill_workers: 1, decode_nodes: 6, decode_workers: 3, gpus_per_node: 4}
frontend: {type: dynamo}
backend:
  trtllm_config:
    prefill:
      tensor_parallel_size: 8
      moe_expert_parallel_size: 8
      enable_attention_dp: true
      pipeline_parallel_size: 1
      max_batch_size: 16
      max_num_tokens: 16384
      disable_overlap_scheduler: true
      cuda_graph_config: null
      kv_cache_config: {dtype: fp8, enable_block_reuse: false, free_gpu_memory_fraction: 0.5}
      moe_config: {backend: DEEPGEMM}
    decode:
      tensor_parallel_size: 8
      moe_expert_parallel_size: 8
      enable_attention_dp: false
      max_batch_size: 1
      max_num_tokens: 1
      stream_interval: 100
      num_postprocess_workers: 4
      kv_cache_config: {dtype: fp8, free_gpu_memory_fraction: 0.9}
      moe_config: {backend: TRTLLM, load_balancer: {num_slots: 288}}
"""

SRT_SGL_FILE = """
resources: {prefill_nodes: 1, prefill_workers: 1, decode_nodes: 4, decode_workers: 1}
frontend: {type: dynamo, enable_multiple_frontends: true, num_additional_frontends: 2}
backend:
  sglang_config:
    prefill: {tp-size: 4, dp-size: 4, ep-size: 4, enable-dp-attention: true, max-running-requests: 512,
              chunked-prefill-size: 32768, mem-fraction-static: 0.85, kv-cache-dtype: fp8_e4m3,
              attention-backend: trtllm_mla}
    decode: {tensor-parallel-size: 32, data-parallel-size: 32, expert-parallel-size: 32, enable-dp-attention: true,
             max-running-requests: 4096, stream-interval: 50, num-reserved-decode-tokens: 112,
             ep-num-redundant-experts: 32}
"""


def test_the_srt_recipe_transcriber_keeps_what_servesim_models():
    """benchmarks/transcribe_srt_recipes.py: a TensorRT-LLM file keeps the parallelism, batch
    and token limits, the KV fraction and dtype, the overlap switch, the decode server's
    streaming and the expert slots (not the MoE backend, CUDA graphs or a pipeline size of
    1); an SGLang file its flags under their long names, with the frontend section; both
    print as flow mappings the data file's loader reads back unchanged."""
    import yaml

    t = _transcriber()
    trt = t.transcribe(SRT_TRT_FILE)
    assert trt == {
        "format": "trtllm", "prefill_workers": 1, "decode_workers": 3, "nodes": [2, 6],
        "prefill": {"tensor_parallel_size": 8, "moe_expert_parallel_size": 8, "enable_attention_dp": True,
                    "max_batch_size": 16, "max_num_tokens": 16384, "disable_overlap_scheduler": True,
                    "kv_cache_config": {"free_gpu_memory_fraction": 0.5, "dtype": "fp8"}},
        "decode": {"tensor_parallel_size": 8, "moe_expert_parallel_size": 8, "enable_attention_dp": False,
                   "max_batch_size": 1, "max_num_tokens": 1, "stream_interval": 100, "num_postprocess_workers": 4,
                   "kv_cache_config": {"free_gpu_memory_fraction": 0.9, "dtype": "fp8"},
                   "moe_config": {"load_balancer": {"num_slots": 288}}}}
    sgl = t.transcribe(SRT_SGL_FILE)
    assert sgl["frontend"] == {"enable_multiple_frontends": True, "num_additional_frontends": 2}
    assert sgl["prefill"] == {"tensor-parallel-size": 4, "data-parallel-size": 4, "expert-parallel-size": 4,
                              "enable-dp-attention": True, "max-running-requests": 512,
                              "chunked-prefill-size": 32768, "mem-fraction-static": 0.85,
                              "kv-cache-dtype": "fp8_e4m3"}
    assert sgl["decode"]["num-reserved-decode-tokens"] == 112 and sgl["decode"]["ep-num-redundant-experts"] == 32
    for got in (trt, sgl):
        e = {"format": got["format"], "url": "https://srt/x", "live": ["2026-01-27", "2026-03-24"],
             **{k: v for k, v in got.items() if k != "format"}}
        text = "recipes:\n" + t.dump("recipes/x.yaml", e) + "\n"
        assert yaml.safe_load(text)["recipes"]["recipes/x.yaml"] == e
    with pytest.raises(ValueError, match="neither trtllm_config nor sglang_config"):
        t.transcribe("resources: {prefill_nodes: 1, prefill_workers: 1, decode_nodes: 1, decode_workers: 1}\n"
                     "backend: {vllm_config: {}}\n")
