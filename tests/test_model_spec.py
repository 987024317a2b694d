"""ModelSpec: presets, HF parsing, refusals, derived quantities (hand-computed)."""

import json
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.model_spec import ModelSpec, get_model, list_models
from sim.paths import shared_dir

DATA = Path(__file__).parent / "data"
TEST_MODEL = DATA / "test_model.json"

# preset -> file in ../shared/models/
SHARED_CONFIGS = {
    "llama-3.1-8b": "meta-llama--Meta-Llama-3.1-8B_config.json",
    "llama-3.1-70b": "meta-llama--Meta-Llama-3.1-70B_config.json",
    "llama-3.1-405b": "meta-llama--Meta-Llama-3.1-405B_config.json",
    "qwen3-0.6b": "Qwen--Qwen3-0.6B_config.json",
    "qwen3-8b": "Qwen--Qwen3-8B_config.json",
    "qwen3-32b": "Qwen--Qwen3-32B_config.json",
    "qwen3-30b-a3b": "Qwen--Qwen3-30B-A3B_config.json",
    "mixtral-8x7b": "mistralai--Mixtral-8x7B-v0.1_config.json",
    "deepseek-v3": "deepseek-ai--DeepSeek-V3_config.json",
    "deepseek-r1": "deepseek-ai--DeepSeek-R1_config.json",
    "gpt-oss-120b": "openai--gpt-oss-120b_config.json",
    "gpt-oss-20b": "openai--gpt-oss-20b_config.json",
    "qwen3-235b-a22b": "Qwen--Qwen3-235B-A22B_config.json",
    "qwen3.5-397b-a17b": "Qwen--Qwen3.5-397B-A17B_config.json",
    "minimax-m2.5": "MiniMaxAI--MiniMax-M2.5_config.json",
}


def test_llama_8b_kv_bytes_per_token_and_one_gib():
    m = get_model("llama-3.1-8b")
    assert m.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2 == 131_072
    assert 8192 * m.kv_bytes_per_token() == 1 << 30


@pytest.mark.parametrize("name,published", [
    ("llama-3.1-8b", 8.03e9), ("llama-3.1-70b", 70.6e9), ("llama-3.1-405b", 405e9),
    ("mixtral-8x7b", 46.7e9)])
def test_param_counts_within_one_percent(name, published):
    assert get_model(name).num_params() == pytest.approx(published, rel=0.01)


def test_mixtral_active_params():
    m = get_model("mixtral-8x7b")
    assert m.num_active_params() == pytest.approx(12.9e9, rel=0.01)
    assert get_model("llama-3.1-8b").num_active_params() == get_model("llama-3.1-8b").num_params()


def test_list_models_has_all_presets():
    assert set(list_models()) == {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen3-8b",
                                  "qwen3-32b", "mistral-7b-v0.3", "mixtral-8x7b",
                                  "qwen3-30b-a3b", "qwen3-0.6b", "deepseek-v3", "deepseek-r1", "gpt-oss-120b",
                                  "gpt-oss-20b", "qwen3-235b-a22b", "qwen3.5-397b-a17b", "minimax-m2.5"}


def test_a_pre_quantized_preset_keeps_its_checkpoints_precision():
    assert get_model("deepseek-ai/DeepSeek-V3").quantization == "fp8_block"  # the checkpoint is FP8
    assert get_model("openai/gpt-oss-120b").quantization == "mxfp4"
    assert get_model("qwen3-235b-a22b").quantization is None
    assert get_model("Qwen/Qwen3-235B-A22B-FP8").quantization == "fp8_block"


@pytest.mark.parametrize("alias,preset", [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("meta-llama/Meta-Llama-3.1-8B", "llama-3.1-8b"),
    ("META-LLAMA/llama-3.1-70b-instruct", "llama-3.1-70b"),
    ("Qwen/Qwen3-32B", "qwen3-32b"), ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b-v0.3"), ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b")])
def test_hf_ids_resolve_to_presets(alias, preset):
    a, p = get_model(alias), get_model(preset)
    assert (a.hidden_size, a.num_hidden_layers, a.vocab_size) == (p.hidden_size, p.num_hidden_layers,
                                                                  p.vocab_size)
    assert a.quantization is None


def test_prequantized_id_sets_quantization():
    m = get_model("nvidia/Llama-3.1-70B-Instruct-FP8")
    assert m.quantization == "fp8"
    assert m.hidden_size == 8192
    # fp8 weights: about half the bf16 bytes (embeddings/lm_head stay 16-bit)
    assert m.weight_bytes() < 0.55 * get_model("llama-3.1-70b").weight_bytes()


def test_unknown_model_lists_valid_names():
    with pytest.raises(ConfigError, match="llama-3.1-8b") as e:
        get_model("no-such-model")
    assert "no-such-model" in str(e.value)


@pytest.mark.parametrize("preset,fname", sorted(SHARED_CONFIGS.items()))
def test_presets_agree_with_real_configs(preset, fname):
    path = shared_dir() / "models" / fname
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the checkout)")
    real = ModelSpec.from_hf_config(path, name=preset)
    assert real == get_model(preset)


def test_test_model_derived_values():
    m = ModelSpec.from_hf_config(TEST_MODEL)
    per_layer = 1_048_576 + 262_144 + 262_144 + 1_048_576 + 12_582_912 + 2048
    assert per_layer == 15_206_400
    assert m.num_params() == 4 * per_layer + 2 * 33_554_432 + 1024 == 127_935_488
    assert m.weight_bytes() == 2 * 127_935_488
    assert m.kv_bytes_per_token() == 4096
    assert m.kv_bytes_per_token("fp8") == 2048
    assert m.kv_bytes_per_token(tensor_parallel_size=2) == 2048
    assert m.kv_bytes_per_token(tensor_parallel_size=4) == 2048  # KV heads replicated
    assert m.kv_heads_per_rank(8) == 1


def test_weight_bytes_quantized_keeps_embeddings_16bit():
    m = ModelSpec.from_hf_config(TEST_MODEL)
    quantizable = 4 * (2_621_440 + 12_582_912)
    sixteen_bit = 2 * 33_554_432 + 4 * 2048 + 1024
    assert m.weight_bytes("fp8") == quantizable * 1 + sixteen_bit * 2
    assert m.weight_bytes("int4_wo") == pytest.approx(quantizable * (0.5 + 2 / 128) + sixteen_bit * 2)
    assert m.weight_bytes("nvfp4") == pytest.approx(quantizable * (0.5 + 1 / 16) + sixteen_bit * 2)
    with pytest.raises(ConfigError, match="int3"):
        m.weight_bytes("int3")


def test_weight_bytes_tp_split():
    m = ModelSpec.from_hf_config(TEST_MODEL)
    # tp 2: every weight split except the replicated norms (4 x 2048 + 1024)
    norms = 4 * 2048 + 1024
    assert m.weight_bytes(tensor_parallel_size=2) == (127_935_488 - norms) / 2 * 2 + norms * 2
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        m.weight_bytes(tensor_parallel_size=3)


def test_forward_flops_known_shape():
    m = ModelSpec.from_hf_config(TEST_MODEL)
    f = m.forward_flops(1000, 0)
    assert f.linear == 2 * 1000 * 4 * (2_621_440 + 12_582_912)
    assert f.attention == 4 * 4 * 8 * 128 * (1000 * 1001 / 2)
    assert f.lm_head == 2 * 1024 * 32768
    g = m.forward_flops(1, 999)  # decode at context 999 attends to 1000 keys
    assert g.attention == 4 * 4 * 8 * 128 * 1000
    assert f.total == f.linear + f.attention + f.lm_head


def test_moe_forward_flops_use_active_experts():
    m = get_model("mixtral-8x7b")
    per_tok = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 2 * 3 * 4096 * 14336 + 4096 * 8)
    assert m.forward_flops(1).linear == 2 * per_tok


def _cfg(**kw):
    base = json.loads(TEST_MODEL.read_text())
    base.update(kw)
    return base


@pytest.mark.parametrize("extra,match", [
    ({"kv_lora_rank": 512}, "latent attention.*qk_nope_head_dim"),
    ({"layer_types": ["full_attention", "sliding_attention"]}, "layer_types: 2 entries"),
    ({"layer_types": ["full_attention", "chunked_attention", "full_attention", "full_attention"]},
     "layer_types='chunked_attention': not modelled"),
    ({"n_shared_experts": 1}, "shared experts without routed experts"),
    ({"sliding_window": [128, None, 128, None]}, "a window per layer"),
    ({"attention_chunk_size": 8192}, "chunked attention"),
    ({"architectures": ["BertModel"]}, "causal"),
])
def test_unsupported_architectures_refused(extra, match):
    with pytest.raises(ConfigError, match=match):
        ModelSpec.from_hf_config(_cfg(**extra))


def test_sliding_window_disabled_or_longer_than_context_is_accepted():
    assert ModelSpec.from_hf_config(_cfg(sliding_window=1024, use_sliding_window=False)).is_classic
    assert ModelSpec.from_hf_config(_cfg(sliding_window=4096)).is_classic
    m = ModelSpec.from_hf_config(_cfg(sliding_window=1024))  # Mistral-7B-v0.1 style: every layer
    assert m.layer_types == ("sliding_attention",) * 4 and m.sliding_window == 1024


def test_missing_key_and_bad_value():
    cfg = _cfg()
    del cfg["vocab_size"]
    with pytest.raises(ConfigError, match="vocab_size"):
        ModelSpec.from_hf_config(cfg)
    with pytest.raises(ConfigError, match="hidden_size"):
        ModelSpec.from_hf_config(_cfg(hidden_size=-1))
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        ModelSpec.from_hf_config(_cfg()).kv_bytes_per_token("int2")


def test_quantization_config_parsed():
    blk = ModelSpec.from_hf_config(_cfg(quantization_config={"quant_method": "fp8",
                                                             "weight_block_size": [128, 128]}))
    assert blk.quantization == "fp8_block"
    assert ModelSpec.from_hf_config(_cfg(quantization_config={"quant_method": "awq", "bits": 4})
                                    ).quantization == "int4_wo"


def test_path_loading_and_qwen3_qk_norm():
    assert get_model(str(TEST_MODEL)).hidden_size == 1024
    q = get_model("qwen3-8b")
    assert q.qk_norm and q.head_dim == 128
    assert q.num_params() == pytest.approx(8.19e9, rel=0.01)  # Qwen3-8B model card: 8.2 B


def test_modelopt_checkpoint_quantization_is_read_beside_config(tmp_path):
    """NVIDIA's ModelOpt checkpoints keep FP8 / NVFP4 in hf_quant_config.json, not
    in config.json: a folder or NAME_config.json beside it must not load as bf16."""
    import shutil

    src = DATA / "test_model.json"
    folder = tmp_path / "ckpt"
    folder.mkdir()
    shutil.copy(src, folder / "config.json")
    assert get_model(str(folder)).quantization is None
    (folder / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    assert get_model(str(folder)).quantization == "fp8"
    shutil.copy(src, tmp_path / "org--m_config.json")
    (tmp_path / "org--m_hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4"}}))
    assert get_model(str(tmp_path / "org--m_config.json")).quantization == "nvfp4"
    (folder / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "W4A8_AWQ"}}))
    with pytest.raises(ConfigError, match="quant_algo='W4A8_AWQ': not modelled"):
        get_model(str(folder))


def test_a_folder_without_config_json_is_named(tmp_path):
    with pytest.raises(ConfigError, match="is a folder without a config.json"):
        get_model(str(tmp_path))
