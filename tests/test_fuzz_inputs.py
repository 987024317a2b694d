"""Property tests (hypothesis, derandomized, a few seconds): random bad HF
``config.json`` dicts and bad trace rows end in a :class:`ServesimError` whose
message names the offending field, or load into sane values, never another
exception type."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.errors import ServesimError
from sim.model_spec import ModelSpec
from sim.workload import WorkloadConfig, generate_requests, load_trace
from sim.workload.config import MAX_SIMULATED_SPAN_S
from sim.workload.lengths import MAX_LENGTH_TOKENS

FAST = settings(derandomize=True, max_examples=100, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])

BASE = json.loads((Path(__file__).parent / "data" / "test_model.json").read_text())
#: config.json fields servesim reads (sim/model_spec.py HFConfig)
HF_FIELDS = [
    "architectures", "model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
    "intermediate_size", "vocab_size", "max_position_embeddings", "num_key_value_heads", "head_dim",
    "tie_word_embeddings", "attention_bias", "torch_dtype", "dtype", "num_local_experts", "num_experts",
    "num_experts_per_tok", "moe_intermediate_size", "kv_lora_rank", "q_lora_rank", "sliding_window",
    "use_sliding_window", "layer_types", "attention_chunk_size", "n_shared_experts",
    "shared_expert_intermediate_size", "num_shared_experts", "mlp_only_layers", "decoder_sparse_step",
    "first_k_dense_replace", "moe_layer_freq", "quantization_config",
]

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.integers(min_value=-3, max_value=300),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([128.0, 128.5, 0.0, -1.0, 1e300, 1e-300]),
    st.text(max_size=8),
    st.sampled_from(["128", "8", "abc", "bfloat16", "float16", "float32", "int8", "fp8", "no", "true",
                     "full_attention", "LlamaForCausalLM", ""]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(["quant_method", "quant_algo", "bits", "weight_block_size", "x"]), inner,
                    max_size=4)), max_leaves=6)


@FAST
@given(st.dictionaries(st.sampled_from(HF_FIELDS), values, min_size=1, max_size=3),
       st.sets(st.sampled_from(HF_FIELDS), max_size=2))
def test_bad_hf_configs_name_the_field(changes, removed):
    cfg = {k: v for k, v in BASE.items() if k not in removed}
    cfg.update(changes)
    try:
        m = ModelSpec.from_hf_config(cfg, name="fuzz/config.json")
    except ServesimError as e:
        msg = str(e)
        assert msg.startswith("fuzz/config.json: ") and "\n" not in msg, msg
        touched = set(changes) | set(removed)
        assert any(k in msg for k in touched), (msg, changes, removed)
        return
    # accepted: every derived number is finite and physical
    assert m.num_hidden_layers >= 1 and m.head_dim >= 1 and m.num_key_value_heads >= 1
    assert m.num_attention_heads % m.num_key_value_heads == 0
    assert isinstance(m.tie_word_embeddings, bool) and isinstance(m.attention_bias, bool)
    assert m.dtype in ("bfloat16", "float16")
    assert m.kv_bytes_per_token() > 0 and isinstance(m.kv_bytes_per_token(), int)
    assert 0 < m.weight_bytes() < math.inf and m.num_params() > 0
    assert all(math.isfinite(x) and x >= 0 for x in m.forward_flops(16, 16))
    if m.num_experts:
        assert 1 <= m.num_experts_per_tok <= m.num_experts and m.moe_intermediate_size >= 1


# ------------------------------------------------------------------ traces
cells = st.one_of(
    st.integers(min_value=1, max_value=2000).map(str),
    st.integers(min_value=-5, max_value=2000).map(str),
    st.integers(min_value=-(2 ** 80), max_value=2 ** 80).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "nan", "NA", "inf", "-inf", "1e14", "1e9", "2e9", "9223372036854775808", "12.5",
                     "0", "1e-300", "0x10", " 7 ", "1_000", "abc"]),
    st.text(alphabet="0123456789.-+eE xa", max_size=6),
)
COLUMNS = ("num_prefill_tokens", "num_decode_tokens", "arrived_at")


def _check_loaded(specs) -> None:
    assert np.all(specs.num_prompt_tokens >= 1) and np.all(specs.num_prompt_tokens <= MAX_LENGTH_TOKENS)
    assert np.all(specs.output_len >= 1) and np.all(specs.output_len <= MAX_LENGTH_TOKENS)
    t = specs.arrival_time_s
    assert np.all(np.isfinite(t)) and np.all(t >= 0) and np.all(t <= MAX_SIMULATED_SPAN_S)


@FAST
@given(st.lists(st.tuples(cells, cells, cells), min_size=1, max_size=5), st.booleans())
def test_bad_trace_rows_name_the_field(rows, skip):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.csv"
        p.write_text(",".join(COLUMNS) + "\n" + "".join(",".join(r) + "\n" for r in rows))
        try:
            table = load_trace(p, skip_bad_rows=skip)
            specs = generate_requests(WorkloadConfig.from_dict({"trace": str(p), "skip_bad_rows": skip}), seed=0)
        except ServesimError as e:
            msg = str(e)
            assert str(p) in msg and "\n" not in msg, msg
            assert any(c in msg for c in COLUMNS) or "no valid rows" in msg, msg
            return
    assert len(table) == len(specs) >= 1
    _check_loaded(specs)


json_values = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2 ** 80), max_value=2 ** 80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([2 ** 63, 2 ** 64, 10 ** 9 + 1, 1e14, 12.5, "12", "abc", [1, 2], {"a": 1}]),
)
# mostly valid values, so that rows get past the type checks to the range checks
json_lengths = st.one_of(st.integers(min_value=1, max_value=5000), json_values)
json_times = st.one_of(st.integers(min_value=0, max_value=10 ** 6),  # ms
                       st.sampled_from([1e14, 3e12, 2 ** 32 * 1000, -1e12]), json_values)
MOONCAKE = ("timestamp", "input_length", "output_length")


@FAST
@given(st.lists(st.fixed_dictionaries(
    {"timestamp": json_times, "input_length": json_lengths, "output_length": json_lengths}, optional={
        "hash_ids": st.one_of(st.lists(st.integers(min_value=-2, max_value=2 ** 70), max_size=3), json_values)}),
    min_size=1, max_size=4))
def test_bad_jsonl_rows_name_the_field(rows):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        try:
            specs = generate_requests(WorkloadConfig.from_dict({"trace": str(p)}), seed=0)
        except ServesimError as e:
            msg = str(e)
            assert str(p) in msg and "\n" not in msg, msg
            assert any(c in msg for c in MOONCAKE + ("hash_ids",)), msg
            return
    _check_loaded(specs)
