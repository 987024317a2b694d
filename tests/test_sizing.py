"""KV-cache sizing (ENGINE_SEMANTICS 2.1) on the test GPU/model, hand-computed."""

import math
from pathlib import Path

import pytest

from sim.errors import ConfigError, InfeasibleError
from sim.hardware.profile import get_hardware
from sim.kv_cache.sizing import GiB, activation_bytes_estimate, compute_kv_sizing, kv_report, non_torch_bytes
from sim.model_spec import ModelSpec, get_model

DATA = Path(__file__).parent / "data"
HW = get_hardware(str(DATA / "test_gpu.yaml"))
MODEL = ModelSpec.from_hf_config(DATA / "test_model.json")


def test_activation_estimate_test_model():
    T = 8192
    torch_bytes = 2 * T * (2 * 1024 + 3 * 4096)           # residual+hidden, FFN transient
    sampler = 2 * 1024 * 32768 * 4                       # fp32 logits + probs, 1024 rows
    expected = torch_bytes + sampler + 1.79 * GiB
    assert activation_bytes_estimate(MODEL) == pytest.approx(expected, rel=1e-12)


def test_num_blocks_test_model():
    s = compute_kv_sizing(MODEL, HW, max_model_len=4096)
    weights = 255_870_976
    act = 2 * 8192 * (2048 + 12288) + 2 * 1024 * 32768 * 4 + 1.79 * GiB
    expected = math.floor((80e9 * 0.92 - weights - act) / (16 * 4096))
    assert s.num_gpu_blocks == expected
    assert s.block_bytes == 65_536 and s.kv_bytes_per_token == 4096
    assert s.kv_cache_bytes == expected * 65_536
    assert s.weight_bytes_per_rank == weights
    assert s.max_concurrency == expected / 256


def test_llama_8b_block_is_2_mib_and_vllm_log_agrees():
    hw = get_hardware("h100_sxm")
    s = compute_kv_sizing(get_model("llama-3.1-8b"), hw, gpu_memory_utilization=0.9,
                          max_num_seqs=256, max_model_len=8192)
    assert s.block_bytes == 2 * 1024 * 1024
    # vLLM logged 53.29 GiB of KV cache for Llama-3-8B on H100, util 0.9, 8192 batched
    # tokens (github.com/vllm-project/vllm/pull/10511); our estimate is within 1 %.
    assert s.kv_cache_bytes / GiB == pytest.approx(53.29, rel=0.01)


def test_tp_and_fp8_kv():
    one = compute_kv_sizing(MODEL, HW, max_model_len=4096)
    two = compute_kv_sizing(MODEL, HW, tensor_parallel_size=2, max_model_len=4096)
    fp8 = compute_kv_sizing(MODEL, HW, kv_cache_dtype="fp8", max_model_len=4096)
    assert two.kv_bytes_per_token == 2048 and fp8.kv_bytes_per_token == 2048
    assert two.weight_bytes_per_rank < one.weight_bytes_per_rank
    assert fp8.num_gpu_blocks == pytest.approx(2 * one.num_gpu_blocks, abs=1)


def test_override_and_default_max_model_len():
    s = compute_kv_sizing(MODEL, HW, num_gpu_blocks_override=1000)
    assert s.num_gpu_blocks == 1000 and s.kv_cache_bytes == 1000 * 65_536
    assert s.max_model_len == 4096  # max_position_embeddings
    assert s.max_concurrency == 1000 / 256


def test_infeasible_cases():
    with pytest.raises(InfeasibleError, match="GiB") as e:
        compute_kv_sizing(get_model("llama-3.1-70b"), get_hardware("h100_sxm"))
    assert "131.42" in str(e.value)  # weight GiB in the message
    with pytest.raises(InfeasibleError, match=r"256 blocks.*raise num_gpu_blocks_override \(10 is set\)"):
        compute_kv_sizing(MODEL, HW, num_gpu_blocks_override=10, max_model_len=4096)
    # 256 blocks for one max_model_len sequence: 256 in all leave 255 usable (block 0 is the null block)
    with pytest.raises(InfeasibleError, match=r"needs 256 blocks .* only 255 usable blocks"):
        compute_kv_sizing(MODEL, HW, num_gpu_blocks_override=256, max_model_len=4096)
    assert compute_kv_sizing(MODEL, HW, num_gpu_blocks_override=257, max_model_len=4096).num_gpu_blocks == 257


@pytest.mark.parametrize("kw,match", [
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    ({"block_size": 0}, "block_size"),
    ({"max_model_len": 5000}, "max_model_len"),
    ({"tensor_parallel_size": 3}, "tensor_parallel_size"),
    ({"kv_cache_dtype": "int4"}, "kv_cache_dtype"),
    ({"quantization": "fp3"}, "quantization"),
])
def test_bad_config(kw, match):
    with pytest.raises(ConfigError, match=match):
        compute_kv_sizing(MODEL, HW, **kw)


def test_kv_report():
    s = compute_kv_sizing(MODEL, HW, num_gpu_blocks_override=1000, max_model_len=4096)
    r = kv_report(s, lengths=(1024, 1000, 17))
    assert r["kv_bytes_per_token"] == 4096
    assert r["num_gpu_blocks"] == 1000 and r["kv_cache_tokens"] == 16_000
    assert r["sequences_at_max_model_len"] == 1000 // 256 == 3
    assert (r["sequences_of_1024_tokens"], r["sequences_of_1000_tokens"],
            r["sequences_of_17_tokens"]) == (1000 // 64, 1000 // 63, 1000 // 2)
    assert r["weight_gib_per_rank"] == pytest.approx(255_870_976 / GiB)
    assert r["kv_cache_gib"] == pytest.approx(1000 * 65_536 / GiB)
    # no request is longer than max_model_len: a longer length fits no sequence at all
    r = kv_report(s, lengths=(4096, 4097))
    assert (r["sequences_of_4096_tokens"], r["sequences_of_4097_tokens"]) == (1000 // 256, 0)


def test_kv_report_contiguous_reserves_max_model_len_per_sequence():
    s = compute_kv_sizing(MODEL, HW, num_gpu_blocks_override=1000, max_model_len=4096)
    r = kv_report(s, lengths=(1024, 17), kv_allocation="contiguous")
    # every sequence reserves 4096 tokens = 256 blocks, whatever its length
    assert r["kv_allocation"] == "contiguous"
    assert r["sequences_of_1024_tokens"] == r["sequences_of_17_tokens"] == 1000 // 256 == 3
    r = kv_report(s, lengths=(1024,), kv_allocation="contiguous", contiguous_reserve="max_tokens")
    assert r["sequences_of_1024_tokens"] == 1000 // 64  # reserves its own length
    with pytest.raises(ConfigError, match="kv_allocation"):
        kv_report(s, kv_allocation="pagd")


def test_block_override_larger_than_the_gpu_is_an_error():
    per_block = 16 * MODEL.kv_bytes_per_token("auto", 1)
    ok = int(HW.memory_bytes // per_block)
    compute_kv_sizing(MODEL, HW, num_gpu_blocks_override=ok, max_model_len=4096)
    with pytest.raises(ConfigError, match=r"num_gpu_blocks_override: invalid value .* GiB of KV cache per rank, more than"):
        compute_kv_sizing(MODEL, HW, num_gpu_blocks_override=ok + 1, max_model_len=4096)


def test_non_torch_memory_by_vllm_memory_profile():
    """Non-torch memory subtracted per rank, by what vLLM's init-time snapshot holds
    (sim/kv_cache/sizing.py): PR 10511's log (1.79 / 3.58 GiB at TP 1 / 2), the profile
    run's 0.16 GiB once the CUDA context is in the snapshot (PR 12126), plus NCCL and
    custom all-reduce buffers (3.58 - 1.79 GiB) at TP > 1 until PR 25359 put them there too."""
    assert non_torch_bytes(1) == non_torch_bytes(1, "before_cuda_context") == 1.79 * GiB
    assert non_torch_bytes(4, "before_cuda_context") == 3.58 * GiB
    assert non_torch_bytes(1, "after_cuda_context") == pytest.approx(0.16 * GiB)
    assert non_torch_bytes(2, "after_cuda_context") == pytest.approx((0.16 + 1.79) * GiB)
    assert non_torch_bytes(1, "after_nccl_init") == non_torch_bytes(8, "after_nccl_init") == pytest.approx(0.16 * GiB)
    with pytest.raises(ConfigError, match="memory_profile"):
        non_torch_bytes(1, "v0")
    # Llama-3.1-8B on H100 at util 0.9: 1.79 - 0.16 = 1.63 GiB more KV cache, to a block (2 MiB)
    hw = get_hardware("h100_sxm")
    kw = dict(gpu_memory_utilization=0.9, max_num_seqs=256, max_model_len=8192)
    old = compute_kv_sizing(get_model("llama-3.1-8b"), hw, **kw)
    new = compute_kv_sizing(get_model("llama-3.1-8b"), hw, memory_profile="after_nccl_init", **kw)
    assert abs((new.kv_cache_bytes - old.kv_cache_bytes) - 1.63 * GiB) <= new.block_bytes
    assert new.activation_bytes_estimate == pytest.approx(old.activation_bytes_estimate - 1.63 * GiB)


@pytest.mark.parametrize("version, profile", [(None, "after_nccl_init"), ("0.24.0", "after_nccl_init"),
                                              ("0.11.0", "after_nccl_init"), ("0.10.2", "after_cuda_context"),
                                              ("0.7.3", "after_cuda_context"), ("0.6.5", "before_cuda_context")])
def test_vllm_engine_version_selects_the_memory_profile(version, profile):
    from sim.config import SimConfig
    from sim.engine.deployment import build_deployment
    cfg = SimConfig(model="llama-3.1-8b", hardware="h100_sxm", engine="vllm", engine_version=version,
                    max_model_len=8192)
    dep = build_deployment(cfg)
    assert dep.cfg.memory_profile == profile
    assert dep.sizing.activation_bytes_estimate == pytest.approx(
        activation_bytes_estimate(get_model("llama-3.1-8b"), max_num_batched_tokens=dep.cfg.max_num_batched_tokens,
                                  max_num_seqs=dep.cfg.max_num_seqs, memory_profile=profile))


def test_memory_profile_is_vllm_only_and_kv_shows_it_apart():
    """memory_profile is vLLM's memory-profiling rule: refused with engine sglang / trtllm (it
    used to change their KV cache silently); kv reports the profile and its non-torch GiB as their
    own lines, the activation estimate without them; kv warns of an engine version as run does."""
    import subprocess
    import sys
    from pathlib import Path

    from sim.config import SimConfig

    for engine in ("sglang", "trtllm"):
        with pytest.raises(ValueError, match=rf"memory_profile 'after_nccl_init' is vLLM's memory-profiling rule .*"
                                             rf"no effect with engine '{engine}'"):
            SimConfig(engine=engine, memory_profile="after_nccl_init")
    assert SimConfig(engine="vllm", memory_profile="after_nccl_init").memory_profile == "after_nccl_init"
    assert SimConfig(memory_profile="after_cuda_context").memory_profile == "after_cuda_context"  # no engine: vLLM-like
    s = compute_kv_sizing(get_model("llama-3.1-8b"), get_hardware("h100_sxm"), max_model_len=8192,
                          memory_profile="after_cuda_context", tensor_parallel_size=2)
    rep = kv_report(s)
    assert rep["memory_profile"] == "after_cuda_context"
    assert rep["non_torch_gib"] == pytest.approx(0.16 + 1.79)  # profile run + NCCL buffers at TP > 1
    assert rep["activation_gib_estimate"] == pytest.approx(s.activation_bytes_estimate / GiB - (0.16 + 1.79))
    assert kv_report(compute_kv_sizing(get_model("llama-3.1-8b"), get_hardware("h100_sxm"),
                                       max_model_len=8192))["memory_profile"] == "before_cuda_context (default)"
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "sim", "kv", "--model", "llama-3.1-8b", "--hardware", "h100_sxm",
                        "--engine", "vllm", "--engine-version", "foo"], capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0, r.stderr
    assert "warning: engine_version 'foo' of vllm is not a version number" in r.stderr


def test_max_total_tokens_caps_the_pool_at_its_tokens():
    """SGLang --max-total-tokens / TensorRT-LLM kv_cache_config.max_tokens: the pool is
    the smaller of what memory gives and the cap (16,000 tokens: 1,000 blocks of 16,
    servesim's null block among them); a cap above what memory gives changes nothing,
    and servesim kv says which sized it."""
    free = compute_kv_sizing(MODEL, HW, max_model_len=4096)
    capped = compute_kv_sizing(MODEL, HW, max_model_len=4096, max_total_tokens=16_000)
    assert capped.num_gpu_blocks == 1_000 and capped.kv_cache_bytes == 1_000 * 65_536
    assert compute_kv_sizing(MODEL, HW, max_model_len=4096, max_total_tokens=16_015).num_gpu_blocks == 1_000
    rep = kv_report(capped)
    assert (rep["max_total_tokens"], rep["kv_pool_sized_by"], rep["kv_cache_tokens"]) == (
        16_000, "max_total_tokens", 16_000)
    big = compute_kv_sizing(MODEL, HW, max_model_len=4096, max_total_tokens=10**10)
    assert big.num_gpu_blocks == free.num_gpu_blocks > 1_000
    assert kv_report(big)["kv_pool_sized_by"] == (f"memory ({free.num_gpu_blocks * 16:,} tokens fit; "
                                                  "the cap is above)")
    assert "max_total_tokens" not in kv_report(free)


def test_a_kv_cap_below_one_sequence_names_the_cap_or_caps_requests():
    # 2,048 tokens = 128 blocks, 127 usable; one 4,096-token sequence needs 256
    with pytest.raises(InfeasibleError, match=r"needs 256 blocks .* only 127 usable blocks .* lower max_model_len "
                                              r"or raise max_total_tokens \(2048 is set\)$"):
        compute_kv_sizing(MODEL, HW, max_model_len=4096, max_total_tokens=2048)
    # SGLang (page 1) starts and caps each request at its pool: max_req_len = 2,048 - 1 (scheduler.py)
    s = compute_kv_sizing(MODEL, HW, block_size=1, max_model_len=4096, max_total_tokens=2048,
                          request_len_cap="kv_pool")
    assert (s.num_gpu_blocks, s.max_req_len) == (2048, 2047)


def test_max_total_tokens_and_a_fixed_block_count_are_one_or_the_other():
    with pytest.raises(ConfigError, match=r"^max_total_tokens: 4096 caps the KV pool that num_gpu_blocks_override "
                                          r"500 fixes; set one of them$"):
        compute_kv_sizing(MODEL, HW, max_model_len=4096, max_total_tokens=4096, num_gpu_blocks_override=500)
