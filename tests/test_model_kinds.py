"""Issue #20, the model side: MLA, MoE with shared experts and dense layers,
sliding-window and Gated DeltaNet layers, multimodal wrappers, precision per
operator family. Core checks on hand-built configs with hand-computed values;
the real configs of ../shared/models (skipped when absent) load, size and run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sim.cost_model import CostModel
from sim.cost_model.layer_kinds import GatedDeltaNet, MlaAttention, SlidingAttention, window_sums
from sim.cost_model.moe import expected_experts_touched, expert_weight_bytes_per_step
from sim.errors import ConfigError
from sim.hardware.profile import get_hardware
from sim.kv_cache.sizing import compute_kv_sizing, kv_report
from sim.model_spec import ModelSpec, get_model, window_keys
from sim.paths import shared_dir

DATA = Path(__file__).parent / "data"
HW = get_hardware(str(DATA / "test_gpu.yaml"))  # 1e15 FLOP/s bf16, 1e12 B/s, efficiencies 1, no launches

#: DeepSeek-V3's attention and MoE shapes (its config.json keys), 61 layers
DSV3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
    "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3, "moe_layer_freq": 1,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
}

#: a small gpt-oss-like model: alternating sliding (window 128) and full layers, MXFP4 experts
GPT_OSS = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 4,
    "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
    "intermediate_size": 2880, "num_local_experts": 32, "num_experts_per_tok": 4, "vocab_size": 201088,
    "max_position_embeddings": 131072, "sliding_window": 128, "attention_bias": True,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
}

#: a Qwen3.5-like multimodal wrapper: 3 Gated DeltaNet layers per full-attention layer
QWEN35 = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
    "tie_word_embeddings": False, "vision_config": {"depth": 27},
    "text_config": {
        "model_type": "qwen3_5_moe_text", "num_hidden_layers": 8, "hidden_size": 4096,
        "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256, "attn_output_gate": True,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
        + ["full_attention"],
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 64, "linear_value_head_dim": 128, "mamba_ssm_dtype": "float32",
        "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 1024,
        "shared_expert_intermediate_size": 1024, "vocab_size": 248320, "max_position_embeddings": 262144,
        "dtype": "bfloat16"},
}


def spec(cfg: dict, **over) -> ModelSpec:
    return ModelSpec.from_hf_config({**cfg, **over}, name="cfg.json")


def refused(cfg: dict) -> str:
    with pytest.raises(ConfigError) as e:
        ModelSpec.from_hf_config(cfg, name="cfg.json")
    msg = str(e.value)
    assert msg.startswith("cfg.json: ") and "\n" not in msg, msg
    return msg


# ------------------------------------------------------------------ MLA
def test_mla_kv_bytes_per_token_deepseek_v3():
    m = spec(DSV3)
    assert m.is_mla and not m.is_classic
    assert m.kv_bytes_per_token() == 61 * (512 + 64) * 2 == 70_272
    assert m.kv_bytes_per_token("fp8") == 61 * 576 == 35_136
    # one latent, replicated on every TP rank (vLLM MLA: one "KV head")
    assert m.kv_bytes_per_token(tensor_parallel_size=8) == 70_272
    assert m.kv_bytes_per_token_by_layer_type() == {"full_attention": 1152}


def test_mla_absorbed_decode_flops_and_bytes_of_one_layer():
    """One DeepSeek-V3 layer, TP 1, one sequence decoding at context 4095 (4096 keys)."""
    mla = MlaAttention(spec(DSV3), HW, 1, 2.0, layers=1)
    flops, nbytes = mla.decode_cost(b=1, keys=4096)
    # QK over 512 + 64 and PV over 512, per head and key: 2 x 128 x (2 x 512 + 64)
    assert flops == 2 * 128 * (1024 + 64) * 4096 == 1_140_850_688
    # latent read once (MQA-like) + absorbed q (128 x 576) in + latent output (128 x 512) out
    # + the new latent read in bf16 and written to the cache
    assert nbytes == 4096 * 576 * 2 + 128 * (576 + 512) * 2 + 576 * (2 + 2) == 4_999_424
    # memory-bound on the round GPU: bytes / 1e12 (1e15 FLOP/s is 5 ms per 5e12 flops)
    t = mla.step_s(np.array([1]), np.array([4095]))
    assert t == pytest.approx(4_999_424 / 1e12)
    # TP 8: 16 heads per rank, the whole latent still read
    f8, b8 = MlaAttention(spec(DSV3), HW, 8, 2.0, layers=1).decode_cost(1, 4096)
    assert f8 == flops / 8 and b8 == 4096 * 576 * 2 + 16 * 1088 * 2 + 576 * 4


def test_mla_expanded_prefill_flops():
    mla = MlaAttention(spec(DSV3), HW, 1, 2.0, layers=1)
    scores = 1000 * 1001 / 2
    flops, _ = mla.prefill_cost(sn=1000, sc=0, scores=scores)
    assert flops == 2 * 128 * (192 + 128) * scores  # QK over 192, PV over 128 per head
    f_ctx, _ = mla.prefill_cost(sn=1000, sc=500, scores=scores + 1000 * 500)
    # + kv_b up-projection of the 500 cached latents: 2 x 500 x 512 x 128 x (128 + 128)
    assert f_ctx - 2 * 128 * 320 * (scores + 500_000) == pytest.approx(2 * 500 * 512 * 128 * 256)


def test_deepseek_moe_structure_and_params():
    m = spec(DSV3)
    assert m.dense_mlp_layers == (0, 1, 2) and m.num_moe_layers == 58
    assert m.shared_expert_intermediate_size == 2048
    assert m.num_params() == pytest.approx(671e9, rel=0.01)         # DeepSeek-V3 (without MTP)
    assert m.num_active_params() == pytest.approx(37.5e9, rel=0.02)  # "37B activated"
    names = {s.name for s in m.linear_shapes()}
    assert {"fused_qkv_a_proj", "q_b_proj", "kv_b_proj", "o_proj", "gate_up_proj",
            "shared_experts.gate_up_proj"} <= names


# ------------------------------------------------------------------ MoE
def test_moe_expert_bytes_batch_1_vs_large_batch():
    m = spec(DSV3)
    per_expert = 3 * 7168 * 2048 * 2  # w13 + w2 of one expert, bf16
    assert expected_experts_touched(256, 8, 1) == pytest.approx(8)
    assert expert_weight_bytes_per_step(m, 1, quantization="bf16") == pytest.approx(8 * per_expert * 58)
    big = expert_weight_bytes_per_step(m, 100_000, quantization="bf16")
    assert big == pytest.approx(256 * per_expert * 58)
    # tensor-sharded experts: each rank reads 1/tp of every touched expert
    assert expert_weight_bytes_per_step(m, 1, 8, "bf16") == pytest.approx(8 * per_expert * 58 / 8)


def test_moe_step_time_reads_top_k_experts_at_batch_1():
    """Decode of one token on the round GPU: the routed-expert GEMMs are
    memory-bound, k experts' weights (fp8 here, 1 B) x 58 layers / 1e12 B/s."""
    m = spec(DSV3, quantization_config={"quant_method": "fp8"})
    cm = CostModel(m, HW)
    one = cm.step_time([1], [0]).ops["moe_experts"]
    w = 3 * 7168 * 2048 * 1.0  # one expert's weights, fp8
    routed = 58 * 8 * w / 1e12
    # + the 3 dense layers, the shared expert of the 58 MoE layers and the bf16 router
    # (activations are < 1 % at one token)
    dense_shared = (3 * 3 * 7168 * 18432 + 58 * 3 * 7168 * 2048) * 1.0 / 1e12
    assert one == pytest.approx(routed + dense_shared + 58 * 7168 * 256 * 2 / 1e12, rel=0.01)


# ------------------------------------------------------------------ sliding window (gpt-oss)
def test_window_keys_hand_values():
    assert window_keys(1, 10, 128) == 11                    # inside the window: c + 1
    assert window_keys(1, 1000, 128) == 128                 # beyond: the window
    assert window_keys(100, 0, 128) == 100 * 101 / 2        # causal prompt shorter than the window
    assert window_keys(200, 0, 128) == 128 * 129 / 2 + 72 * 128
    assert window_keys(10, 120, 128) == 8 * 120 + 8 * 9 / 2 + 2 * 128


def test_gpt_oss_parsed():
    m = spec(GPT_OSS)
    assert m.layer_type_counts() == {"full_attention": 2, "sliding_attention": 2}
    assert m.sliding_window == 128 and m.attention_sinks
    assert m.quantization == "mxfp4" and m.unquantized_families == ("attn_qkv", "attn_o")
    # 2 x 8 KV heads x 64 x 2 B per layer, every layer (sliding counted at full length)
    assert m.kv_bytes_per_token_by_layer_type() == {"full_attention": 2048, "sliding_attention": 2048}
    assert m.kv_bytes_per_token() == 4 * 2048
    # weights: experts MXFP4 (0.5 B + one 1-B scale per 32), attention bf16
    experts = 4 * 32 * 3 * 2880 * 2880
    attn = 4 * (2880 * (64 * 64 + 2 * 8 * 64) + 64 * 64 * 2880)
    small = 4 * (2 * 2880 + (64 * 64 + 2 * 8 * 64) + 64 + 2880 * 32) + 2880
    emb = 2 * 201088 * 2880
    assert m.weight_bytes() == pytest.approx(experts * (0.5 + 1 / 32) + (attn + emb + small) * 2)


def test_sliding_layers_attention_cost_stops_at_the_window():
    m = spec(GPT_OSS)
    sw = SlidingAttention(m, HW, 1, 2.0, layers=2)
    one = np.array([1])
    # decode: a sliding layer reads min(c + 1, 128) keys: the same at 1,000 and 100,000
    assert sw.step_s(one, np.array([1000])) == sw.step_s(one, np.array([100_000]))
    assert sw.step_s(one, np.array([50])) < sw.step_s(one, np.array([1000]))
    # hand value: 2 layers x bytes of flash attention over 128 keys / 1e12 (memory-bound)
    kvd, hd = 8 * 64, 64 * 64
    nbytes = 2 * 2 * hd * 1 + 2 * kvd * 2 * (127 + 1) + 2 * kvd * 4 * 1
    assert sw.step_s(one, np.array([5000])) == pytest.approx(2 * nbytes / 1e12)
    # the step model: only the full layers' attention grows with the context
    cm = CostModel(m, HW)
    full_growth = (cm.step_time([1], [20_000]).ops["attention"] - cm.step_time([1], [10_000]).ops["attention"])
    assert full_growth == pytest.approx(2 * 2 * kvd * 2 * 10_000 / 1e12)
    # prefill of 1,000 tokens: windowed score count
    sn, sc, snc, snn = window_sums(np.array([1000]), np.array([0]), 128)
    assert snc + (snn + sn) / 2 == window_keys(1000, 0, 128)


def test_gpt_oss_kv_report_per_layer_type():
    rep = kv_report(compute_kv_sizing(spec(GPT_OSS), HW, max_model_len=8192))
    assert rep["kv_bytes_per_token"] == 4 * 2048  # sliding layers at full length (conservative)
    assert (rep["full_attention_layers"], rep["sliding_attention_layers"]) == (2, 2)
    assert rep["sliding_attention_kv_bytes_per_token_per_layer"] == 2048
    assert rep["sliding_attention_kv_bytes_per_token"] == 2 * 2048
    assert rep["kv_bytes_per_token_beyond_window"] == 2 * 2048  # full layers only
    assert rep["sliding_window"] == 128


def test_gpt_oss_mxfp4_runs_weight_only_on_hopper_w4a8_on_blackwell():
    from sim.cost_model.roofline import gemm_precision
    h100, b200 = get_hardware("h100_sxm"), get_hardware("b200_sxm")
    assert gemm_precision(h100, "mxfp4").peak_flops_per_s == h100.peak_flops_per_s.bf16
    assert gemm_precision(b200, "mxfp4").peak_flops_per_s == b200.peak_flops_per_s.fp8


# ------------------------------------------------------------------ Gated DeltaNet (Qwen3.5)
def test_qwen35_wrapper_and_gdn_state_bytes():
    m = spec(QWEN35)
    assert m.architecture == "Qwen3_5MoeForConditionalGeneration"
    assert m.layer_type_counts() == {"full_attention": 2, "linear_attention": 6}
    assert m.attn_output_gate and m.shared_expert_intermediate_size == 1024
    # per GDN layer: conv state (4 - 1) x (2 x 16 x 128 + 64 x 128) x 2 B + recurrent state
    # 64 heads x 128 x 128 x 4 B (float32)
    per_layer = 3 * 12288 * 2 + 64 * 128 * 128 * 4
    assert per_layer == 4_268_032
    assert m.state_bytes_per_sequence() == 6 * per_layer
    assert m.state_bytes_per_sequence(tensor_parallel_size=8) == 6 * per_layer // 8
    # KV only on the 2 full layers: 2 x 2 KV heads x 256 x 2 B each
    assert m.kv_bytes_per_token() == 2 * 2048
    assert m.kv_bytes_per_token_by_layer_type() == {"full_attention": 2048, "linear_attention": 0}


def test_gdn_decode_constant_prefill_linear():
    m = spec(QWEN35)
    gdn = GatedDeltaNet(m, HW, 1, layers=6)
    one = np.array([1])
    assert gdn.step_s(one, np.array([10])) == gdn.step_s(one, np.array([100_000]))
    p1 = gdn.step_s(np.array([2000]), np.array([0]))
    p2 = gdn.step_s(np.array([4000]), np.array([0]))
    state = 64 * 128 * 128 * 4 + 3 * 12288 * 2
    assert p2 - p1 == pytest.approx(p1 - 2 * 6 * state / 1e12, rel=1e-9)  # linear in tokens


def test_kv_sizing_reserves_linear_attention_state():
    m = spec({**QWEN35, "text_config": {**QWEN35["text_config"], "num_experts": 32}})
    s = compute_kv_sizing(m, HW, max_num_seqs=16, max_model_len=4096)
    assert s.state_bytes_reserved == 16 * m.state_bytes_per_sequence()
    rep = kv_report(s)
    assert rep["linear_attention_state_bytes_per_sequence"] == m.state_bytes_per_sequence()
    assert rep["full_attention_kv_bytes_per_token_per_layer"] == 2048
    with pytest.raises(Exception, match="max_num_seqs"):
        compute_kv_sizing(m, HW, max_num_seqs=100_000, max_model_len=4096)


# ------------------------------------------------------------------ precision per family
def test_modelopt_exclusions_keep_mla_projections_16bit(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(DSV3))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {
        "quant_algo": "NVFP4", "exclude_modules": ["lm_head"] + [
            f"model.layers.{i}.self_attn.{p}" for i in range(61)
            for p in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")]}}))
    m = get_model(str(tmp_path))
    assert m.quantization == "nvfp4" and m.unquantized_families == ("attn_qkv",)
    assert m.family_quantization("attn_qkv") == "bf16" and m.family_quantization("experts") == "nvfp4"


def test_compressed_tensors_int4():
    m = spec(GPT_OSS, quantization_config={"quant_method": "compressed-tensors", "config_groups": {
        "group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": 128}, "targets": ["Linear"]}},
        "ignore": ["lm_head", "re:.*self_attn.*"]})
    assert m.quantization == "int4_wo" and m.unquantized_families == ("attn_qkv", "attn_o")
    assert "not a valid regular expression" in refused(
        {**GPT_OSS, "quantization_config": {"quant_method": "compressed-tensors", "ignore": ["re:(("],
                                            "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}}})


# ------------------------------------------------------------------ refusals: one line, key and value
@pytest.mark.parametrize("cfg,needle", [
    ({**GPT_OSS, "layer_types": ["sliding_attention", "mamba", "full_attention", "full_attention"]},
     "layer_types='mamba': not modelled"),
    ({**GPT_OSS, "quantization_config": {"quant_method": "bitsandbytes"}},
     "quantization_config.quant_method='bitsandbytes': not modelled"),
    ({**DSV3, "qk_rope_head_dim": None}, "kv_lora_rank=512: multi-head latent attention (MLA) needs qk_rope_head_dim"),
    ({**GPT_OSS, "sliding_window": None}, "sliding_window=None"),
    ({k: v for k, v in QWEN35["text_config"].items() if k != "linear_key_head_dim"},
     "linear_key_head_dim missing"),
    ({**DSV3, "first_k_dense_replace": 99}, "first_k_dense_replace=99"),
])
def test_bad_configs_one_line_errors(cfg, needle):
    assert needle in refused(cfg)


def test_tp_must_divide_gdn_heads():
    with pytest.raises(ConfigError, match="linear_num_key_heads=16"):
        spec(QWEN35).check_tensor_parallel_size(32)


# ------------------------------------------------------------------ the real configs
def _shared_models():
    d = shared_dir() / "models"
    if not d.is_dir():
        return []
    return sorted(p.name for p in d.glob("*_config.json") if not p.name.endswith("hf_quant_config.json"))


#: GPUs each model needs on an H200 (141 GB) for its weights plus some KV cache
TP_H200 = {"deepseek-ai--DeepSeek-V3": 8, "deepseek-ai--DeepSeek-R1": 8, "nvidia--DeepSeek-V3.1-NVFP4": 4,
           "Qwen--Qwen3.5-397B-A17B": 8, "meta-llama--Meta-Llama-3.1-405B": 8,
           "Qwen--Qwen3-235B-A22B": 4, "Qwen--Qwen3-235B-A22B-FP8": 2, "MiniMaxAI--MiniMax-M2.5": 2,
           "meta-llama--Meta-Llama-3.1-70B": 2, "nvidia--Llama-3.1-70B-Instruct-FP8": 1}


@pytest.mark.skipif(not _shared_models(), reason="../shared/models absent (../shared not beside the checkout)")
@pytest.mark.parametrize("fname", _shared_models())
def test_every_shared_config_sizes_and_runs(fname):
    from sim.config import SimConfig
    from sim.runner import run_simulation
    stem = fname.removesuffix("_config.json")
    path = str(shared_dir() / "models" / fname)
    cfg = SimConfig.model_validate({
        "model": path, "hardware": "h200_sxm", "tensor_parallel_size": TP_H200.get(stem, 1),
        "max_num_seqs": 64, "max_model_len": 8192,
        "workload": {"num_requests": 8, "request_rate": 4.0}})
    out = run_simulation(cfg)
    s = out.summary
    assert s["completed"] == 8 and s["mean_ttft_ms"] > 0 and s["mean_tpot_ms"] > 0


# ------------------------------------------------------------------ the CLI
def _cli(*args, timeout=180):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=Path(__file__).resolve().parent.parent)


def test_cli_kv_shows_bytes_per_layer_type(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(GPT_OSS))
    r = _cli("kv", "--model", str(p), "--hardware", str(DATA / "test_gpu.yaml"), "--set", "max_model_len=8192")
    assert r.returncode == 0, r.stderr
    for row in ("sliding_attention_kv_bytes_per_token_per_layer", "full_attention_kv_bytes_per_token",
                "kv_bytes_per_token_beyond_window"):
        assert row in r.stdout


def test_cli_unknown_layer_type_is_one_line(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**GPT_OSS, "layer_types": ["sliding_attention", "hyena"] * 2}))
    r = _cli("kv", "--model", str(p), "--hardware", str(DATA / "test_gpu.yaml"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (f"error: {p}: layer_types='hyena': not modelled; valid: full_attention, "
                                f"sliding_attention, linear_attention")


# ------------------------------------------------------------------ merged decode runs = single steps
@pytest.mark.parametrize("cfg,tp", [(DSV3, 8), (GPT_OSS, 1), (QWEN35, 8)])
@pytest.mark.parametrize("hw", ["h100_sxm", str(DATA / "test_gpu.yaml")])
def test_decode_runs_equal_single_steps_bit_for_bit(cfg, tp, hw):
    """The engine's merged decode runs (decode_steps_time_s, decode_run_ends) must
    end exactly where single steps (step_time_s) do, with the layer kinds too."""
    cm = CostModel(spec(cfg), get_hardware(hw), tensor_parallel_size=tp)
    rng = np.random.default_rng(1)
    for _ in range(10):
        S = int(rng.integers(1, 40))
        c = rng.integers(0, 400, S)
        ones = np.ones(S, dtype=np.int64)
        for kind in cm._extras:  # the decode fast path gives the general path's floats
            assert kind.step_s(ones, c, int(c.sum())) == kind.step_s(ones, c, None)
        k, g = int(rng.integers(1, 12)), int(rng.integers(1, S + 1))
        grow = np.zeros(S, dtype=np.int64)
        grow[:g] = 1
        ref = [cm.step_time_s(ones, c + j * grow) for j in range(k)]
        assert cm.decode_steps_time_s(c, k, g).tolist() == ref
        t, ends = 1.5, []
        for j in range(k):
            t += cm.step_time_s(ones, c + j)
            ends.append(t)
        assert cm.decode_run_ends(c.tolist(), k, 1.5) == ends
