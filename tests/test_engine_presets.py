"""Engine presets (sim/presets/): explicit keys win; documented defaults are
what build_deployment resolves; the engines' KV-memory rules and CPU overheads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.config import SimConfig, build_config
from sim.engine.deployment import build_deployment
from sim.errors import InfeasibleError
from sim.presets import OVERHEAD_KEYS, PRESETS, preset_defaults, preset_table
from sim.presets.sglang import (sglang_chunked_prefill_size, sglang_cuda_graph_max_bs, sglang_max_running_requests,
                                sglang_mem_fraction_static)
from sim.hardware.profile import get_hardware
from sim.kv_cache.sizing import compute_kv_sizing
from sim.model_spec import get_model
from sim.cost_model.overheads import StepOverheads

DATA = Path(__file__).parent / "data"
MODEL = str(DATA / "test_model.json")
GPU = str(DATA / "test_gpu.yaml")
GiB = float(1 << 30)
MiB = float(1 << 20)


def test_explicit_keys_override_the_preset():
    cfg = build_config(overrides={"engine": "trtllm", "block_size": 64, "max_num_batched_tokens": 4096,
                                  "scheduler": "chunked", "overlap_scheduling": False})
    assert (cfg.block_size, cfg.max_num_batched_tokens, cfg.scheduler, cfg.overlap_scheduling) == (
        64, 4096, "chunked", False)
    # Keys not given come from the preset.
    assert cfg.capacity_scheduler_policy == "guaranteed_no_evict"
    assert cfg.kv_memory_rule == "free_fraction"
    # Same through --set and through the model constructor.
    assert build_config(set_args=["engine=sglang", "block_size=16"]).block_size == 16
    assert SimConfig(engine="sglang", block_size=8).block_size == 8
    assert SimConfig(engine="sglang").block_size == 1


def test_explicit_none_still_wins_and_other_engines_untouched():
    # An explicit null is a choice too (e.g. no capacity policy under the trtllm preset).
    assert SimConfig(engine="trtllm", capacity_scheduler_policy=None).capacity_scheduler_policy is None
    # Without an engine nothing changes (the project's vLLM-like defaults).
    plain = SimConfig()
    assert (plain.scheduler, plain.block_size, plain.cpu_step_overhead_s) == ("chunked", 16, 0.0)


def test_enable_chunked_prefill_alias_follows_the_engine():
    assert SimConfig(engine="trtllm", enable_chunked_prefill=True).scheduler == "chunked"
    assert SimConfig(engine="trtllm", enable_chunked_prefill=False).scheduler == "mixed"
    assert SimConfig(engine="vllm", enable_chunked_prefill=False).scheduler == "mixed"  # V1 mixes, unchunked
    assert SimConfig(engine="sglang", enable_chunked_prefill=False).scheduler == "prefill_first_whole"
    assert SimConfig(enable_chunked_prefill=False).scheduler == "continuous"  # no engine: the DESIGN alias


@pytest.mark.parametrize("engine", sorted(PRESETS))
def test_documented_static_defaults_are_what_build_deployment_resolves(engine):
    dep = build_deployment(build_config(overrides={"engine": engine, "model": "llama-3.1-8b",
                                                   "hardware": "h100_sxm"}))
    for key, value in preset_defaults(engine).items():
        assert getattr(dep.cfg, key) == value, key
    assert dep.limits.block_size == dep.cfg.block_size
    assert dep.overheads == StepOverheads(dep.cfg.cpu_step_overhead_s, dep.cfg.cpu_seq_overhead_s,
                                          dep.cfg.overlap_scheduling)
    # Every default has a source in the documentation table.
    rows = [r for r in preset_table() if r["engine"] == engine]
    assert {r["key"] for r in rows} >= set(PRESETS[engine].defaults) | set(PRESETS[engine].fitted)
    assert set(preset_defaults(engine)) >= set(OVERHEAD_KEYS)  # every host-overhead key has a value
    assert all(r["source"] for r in rows)


def test_hardware_dependent_defaults_on_h100():
    deps = {e: build_deployment(build_config(overrides={"engine": e, "model": "llama-3.1-8b",
                                                        "hardware": "h100_sxm"})) for e in PRESETS}
    # vLLM serve on a >= 70 GiB non-A100 GPU: 8192 tokens, 1024 sequences, 0.92 of memory.
    v = deps["vllm"].cfg
    assert (v.max_num_batched_tokens, v.max_num_seqs, v.gpu_memory_utilization) == (8192, 1024, 0.92)
    # TensorRT-LLM: max_num_tokens 8192, max_batch_size 2048, 0.9 of the free memory, 32-token blocks.
    t = deps["trtllm"].cfg
    assert (t.max_num_batched_tokens, t.max_num_seqs, t.gpu_memory_utilization, t.block_size) == (8192, 2048, 0.9, 32)
    # SGLang on an 80 GB H100 (79.22 GiB = 81,121 MiB < 90 GiB): chunked_prefill_size 8192,
    # cuda_graph_max_bs 256 at TP 1; reserved = 512 + 1.5 x 8192 + 2 x 256 + 1/8 x 1024
    # = 13,440 MiB; fraction = (81,121.3 - 13,440) / 81,121.3 = 0.834.
    s = deps["sglang"].cfg
    assert (s.max_num_batched_tokens, s.max_prefill_tokens, s.gpu_memory_utilization) == (8192, 16384, 0.834)
    # max_running_requests = the request pool: KV tokens / 131,072 x 512 < 2048 → 2048.
    assert s.max_num_seqs == 2048
    assert deps["sglang"].limits.max_prefill_tokens == 16384


def test_sglang_memory_heuristics_by_hand():
    h100 = 85061827297  # bytes (hardware_profiles/h100_sxm.yaml)
    h200 = 151397597184
    assert sglang_chunked_prefill_size(h100) == 8192 and sglang_chunked_prefill_size(h200) == 8192
    assert sglang_chunked_prefill_size(40 * GiB) == 4096 and sglang_chunked_prefill_size(192 * GiB) == 16384
    assert (sglang_cuda_graph_max_bs(h100, 2), sglang_cuda_graph_max_bs(h100, 8)) == (256, 512)
    # H100 TP 8: reserved 512 + 12,288 + 1,024 + 1,024 = 14,848 MiB → (81,121.3 - 14,848) / 81,121.3.
    assert sglang_mem_fraction_static(h100, 8, 8192) == 0.817
    # H200 (144,384 MiB) TP 1: reserved 13,440 → 0.907.
    mib = h200 / MiB
    assert sglang_mem_fraction_static(h200, 1, 8192) == round((mib - 13440) / mib, 3) == 0.907
    # Small GPU: the 10 GiB floor does not apply below 60 GiB (24 GiB, TP 1: 512 + 3072 + 48 + 128).
    assert sglang_mem_fraction_static(24 * GiB, 1, 2048) == round((24576 - 3760) / 24576, 3)
    assert sglang_max_running_requests(10_000_000, 131072) == 4096
    assert sglang_max_running_requests(1_000_000, 131072) == int(1_000_000 / 131072 * 512)
    assert sglang_max_running_requests(100_000, 131072) == 2048


def test_kv_memory_rules_by_hand():
    # Test model: 255,870,976 weight bytes (bf16, TP 1), 4,096 KV bytes per token.
    model, hw = get_model(MODEL), get_hardware(GPU)
    # free_fraction (TensorRT-LLM), f = 0.9, 32-token blocks: 0.9 x (80e9 - weights - activations),
    # activations at 8192 tokens / 2048 sequences: 2 x 8192 x (2 x 1024 + 3 x 4096) = 234,881,024
    # + sampler 2 x 2048 x 32,768 x 4 = 536,870,912 + non-torch 1.79 GiB.
    act = 234_881_024 + 536_870_912 + 1.79 * GiB
    expect = int(0.9 * (80e9 - 255_870_976 - act) // (32 * 4096))
    s = compute_kv_sizing(model, hw, gpu_memory_utilization=0.9, block_size=32, max_num_batched_tokens=8192,
                          max_num_seqs=2048, kv_memory_rule="free_fraction", max_model_len=4096)
    assert s.num_gpu_blocks == expect == 529062
    # static_fraction (SGLang), f = 0.5, 16-token blocks: f of the memory free at SGLang's start
    # (80e9 less the 1.79 GiB non-torch memory) less the weights:
    # 0.5 x (80e9 - 1,921,997,864.96) - 255,870,976 = 38,783,130,091.5 B -> 591,783 blocks of 65,536 B.
    s = compute_kv_sizing(model, hw, gpu_memory_utilization=0.5, block_size=16, kv_memory_rule="static_fraction",
                          max_model_len=4096)
    assert s.num_gpu_blocks == int((0.5 * (80e9 - 1.79 * GiB) - 255_870_976) // 65536) == 591783


def test_sglang_pool_qwen3_32b_h100_tp1_by_hand():
    """SGLang's KV pool for Qwen3-32B bf16 on one H100 SXM (the dense table's SGLang 0.5.8.post1
    rows): rest_memory = free after loading - free at start x (1 - mem_fraction_static)
    (model_runner_kv_cache_mixin.py::profile_max_num_token), i.e. f x (memory - non-torch) - weights.

    f = round((81,121.25 - 13,440) / 81,121.25, 3) = 0.834: the H100 profile's 85,061,827,297 B
    = 81,121.25 MiB; reserved 512 + 1.5 x 8192 + 2 x 256 + 1/8 x 1024 = 13,440 MiB.
    Weights 32,762,123,264 parameters x 2 B = 65,524,246,528 B.
    0.834 x (85,061,827,297 - 1,921,997,864.96) = 0.834 x 83,139,829,432.04 = 69,338,617,746.3;
    less the weights: 3,814,371,218.3 B (3.552 GiB); one token of KV is 64 layers x 8 KV heads x
    128 x 2 (K, V) x 2 B = 262,144 B: 14,550.7 -> 14,550 tokens (13,333 under the earlier
    total x f - weights - non-torch form)."""
    model, hw = get_model("Qwen/Qwen3-32B"), get_hardware("h100_sxm")
    assert model.kv_bytes_per_token("auto", 1) == 64 * 8 * 128 * 2 * 2 == 262_144
    assert model.weight_bytes(None, 1) == 65_524_246_528
    f = sglang_mem_fraction_static(hw.memory_bytes, 1, 8192)
    assert f == 0.834
    s = compute_kv_sizing(model, hw, gpu_memory_utilization=f, block_size=1, kv_memory_rule="static_fraction",
                          max_model_len=4096)
    assert s.num_gpu_blocks == int((0.834 * (85_061_827_297 - 1.79 * GiB) - 65_524_246_528) // 262_144) == 14550
    # at f = 0.78 the weights (61.02 GiB) do not fit in the 60.40 GiB kept for weights and KV cache
    # (0.78 x (79.22 - 1.79) GiB = 0.78 x 77.43): -0.63 GiB; the message states that rule, not vLLM's
    # activation estimate
    with pytest.raises(InfeasibleError, match=r"weights 61\.02 GiB per rank leave -0\.63 GiB for the KV cache of the "
                                              r"60\.40 GiB kept for weights and KV cache \(kv_memory_rule static_fraction: "
                                              r"mem_fraction_static \(gpu_memory_utilization\) 0\.78 x \(the GPU's 79\.22 GiB "
                                              r"- non-torch 1\.79 GiB\)\)"):
        compute_kv_sizing(model, hw, gpu_memory_utilization=0.78, block_size=1, kv_memory_rule="static_fraction",
                          max_model_len=4096)


def test_step_overheads_serial_and_overlapped():
    serial = StepOverheads(step_s=1e-3, seq_s=1e-4, overlap=False)
    overlap = StepOverheads(step_s=1e-3, seq_s=1e-4, overlap=True)
    # 10 sequences: cpu = 1 ms + 10 x 0.1 ms = 2 ms.
    assert serial.apply(5e-3, 10) == pytest.approx(7e-3)
    assert overlap.apply(5e-3, 10) == 5e-3          # GPU-bound: the CPU work is hidden
    assert overlap.apply(1e-3, 10) == pytest.approx(2e-3)  # CPU-bound: the step waits for the host
    run = np.array([1e-3, 3e-3])
    np.testing.assert_array_equal(overlap.apply_run(run, 10), [overlap.apply(1e-3, 10), overlap.apply(3e-3, 10)])
    np.testing.assert_array_equal(serial.apply_run(run, 10), [serial.apply(1e-3, 10), serial.apply(3e-3, 10)])
    assert StepOverheads().apply(4e-3, 100) == 4e-3


def test_overheads_add_to_each_engine_step():
    # One request on the ideal test GPU under a serial overhead: every step is
    # GPU time + 1 ms + 0.5 ms per scheduled sequence.
    from test_engine import cfg_for, simulate

    _, base, dep = simulate(cfg_for())
    _, slow, _ = simulate(cfg_for(cpu_step_overhead_s=1e-3, cpu_seq_overhead_s=5e-4))
    steps = base.steps["num_steps"].sum()
    assert slow.steps["num_steps"].sum() == steps == 6
    assert slow.sim_time_s - base.sim_time_s == pytest.approx(steps * 1.5e-3, rel=1e-9)


def test_a_preset_default_in_conflict_is_named_in_the_error():
    """The vllm preset turns prefix caching on; contiguous KV cannot have it: the
    error says the preset did it and how to turn it off."""
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match="vllm engine preset turns prefix caching on"):
        build_deployment(build_config(overrides={"engine": "vllm", "kv_allocation": "contiguous"}))
    with pytest.raises(ConfigError, match=r"got 'contiguous'$"):
        build_deployment(build_config(overrides={"enable_prefix_caching": True, "kv_allocation": "contiguous"}))
    dep = build_deployment(build_config(overrides={"engine": "vllm", "kv_allocation": "contiguous",
                                                   "enable_prefix_caching": False}))
    assert not dep.cfg.enable_prefix_caching


def test_capacity_scheduler_policy_is_refused_where_it_has_no_effect():
    """TensorRT-LLM's admission key: with engine vllm / sglang (no such key) or the static /
    prefill_first schedulers (their own admission, the key was silently ignored) it is an error;
    with trtllm or no engine on chunked / continuous / mixed it applies as before."""
    for kw, msg in (({"engine": "sglang"}, "engine 'sglang' has no such key"),
                    ({"engine": "vllm"}, "engine 'vllm' has no such key"),
                    ({"scheduler": "static"}, "has no effect with scheduler 'static'"),
                    ({"engine": "trtllm", "scheduler": "prefill_first"}, "has no effect with scheduler 'prefill_first'")):
        with pytest.raises(ValueError, match=rf"capacity_scheduler_policy 'max_utilization' .*{msg}"):
            SimConfig(capacity_scheduler_policy="max_utilization", **kw)
    for kw in ({}, {"engine": "trtllm"}, {"scheduler": "continuous"}, {"engine": "trtllm", "scheduler": "mixed"}):
        assert SimConfig(capacity_scheduler_policy="max_utilization", **kw).capacity_scheduler_policy == "max_utilization"
    # the trtllm preset's own default is not the caller's choice: with a scheduler of its own admission
    # it is not an error, and not filled in (summary.json would record a rule that does not apply)
    for sched in ("static", "prefill_first"):
        assert SimConfig(engine="trtllm", scheduler=sched).capacity_scheduler_policy is None
    assert SimConfig(engine="trtllm").capacity_scheduler_policy == "guaranteed_no_evict"
