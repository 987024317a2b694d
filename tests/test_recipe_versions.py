"""Recipe settings bounded by the engine release a row ran (``RecipeArgs.engine_versions``):
InferenceMAX's MiniMax-M2.5 FP8 B200 vLLM recipe before and after PR #947 (v0.17.0 -> v0.19.0)."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.validate.harness import RecipeArgs, harness_from_dict, in_release_range
from sim.validate.rows import ValidateOptions, row_overrides


def _mm(**kw):
    row = dict(backend="vllm", backend_version="0.19.0", model_path="MiniMaxAI/MiniMax-M2.5", system="b200_sxm",
               gemm_quant_mode="fp8", isl=1024, osl=1024, concurrency=16, tp_size=2, silicon_ttft_ms=100.0,
               silicon_tpot_ms=10.0, campaign="2026-03-25", batch_size=16)
    row.update(kw)
    return row


def test_release_range_bounds():
    assert in_release_range("0.19.0", ("0.19.0", None))          # first bound inclusive
    assert in_release_range("0.19.0rc1", ("0.19.0", None))       # rc counts as its release
    assert not in_release_range("0.18.2", ("0.19.0", None))
    assert not in_release_range("0.19.0", (None, "0.19.0"))      # second bound exclusive
    assert in_release_range("0.17.0", (None, "0.19.0"))
    assert not in_release_range("", (None, "0.19.0"))            # unrecorded: no match
    assert not in_release_range("nightly-5b8c30d62b754b57", (None, None))


def test_minimax_fp8_b200_recipe_follows_the_image():
    new = row_overrides(_mm(), ValidateOptions())
    # v0.19.0 recipe: --kv-cache-dtype fp8, --max-num-batched-tokens $((ISL * 2)): 2 x 1024
    assert new["kv_cache_dtype"] == "fp8" and new["max_num_batched_tokens"] == 2048
    assert "enable_expert_parallel" not in new
    assert row_overrides(_mm(isl=8192), ValidateOptions())["max_num_batched_tokens"] == 16384
    old = row_overrides(_mm(backend_version="0.17.0"), ValidateOptions())
    # v0.17.0 recipe: '[ "$EP_SIZE" -ge 1 ]' turned vLLM's expert parallelism on at EP_SIZE 1
    assert old["enable_expert_parallel"] is True
    assert "kv_cache_dtype" not in old and "max_num_batched_tokens" not in old
    # the other GPUs' recipes and the aic harness are untouched
    for row in (_mm(system="h200_sxm"), _mm(campaign="aic-gap-analysis"), _mm(backend_version="")):
        ov = row_overrides(row, ValidateOptions())
        assert "enable_expert_parallel" not in ov and "kv_cache_dtype" not in ov


def test_v017_recipe_layout_is_expert_parallel():
    """TP 2 with vLLM's expert parallelism: EP 2 x moe-TP 1 (each GPU holds half the experts whole)."""
    from sim.config import build_config
    from sim.engine.deployment import build_deployment

    dep = build_deployment(build_config(overrides=row_overrides(_mm(backend_version="0.17.0"), ValidateOptions())))
    assert (dep.layout.moe_ep_size, dep.layout.moe_tp_size) == (2, 1)
    dep = build_deployment(build_config(overrides=row_overrides(_mm(), ValidateOptions())))
    assert (dep.layout.moe_ep_size, dep.layout.moe_tp_size) == (1, 2)


def test_engine_versions_in_yaml():
    h = harness_from_dict({"name": "r", "recipe_args": [
        {"model": "*", "systems": ["*"], "engine": "vllm", "args": {"max_num_seqs": 7},
         "engine_versions": ["0.18.0", None]}]})
    assert h.recipe_args[0].engine_versions == ("0.18.0", None)
    assert h.recipe_overrides(_mm(), "vllm") == {"max_num_seqs": 7}
    assert h.recipe_overrides(_mm(backend_version="0.17.0"), "vllm") == {}
    for bad, msg in ((["0.19.0"], r"\[first, below\]"), (["x.y", None], "'x.y' is not an engine release"),
                     (["0.19.0", "0.18.0"], "'0.19.0' is not below '0.18.0'")):
        with pytest.raises(ConfigError, match=r"^r\.yaml: recipe_args\[0\]\.engine_versions: " + msg):
            harness_from_dict({"name": "r", "recipe_args": [
                {"model": "*", "systems": ["*"], "engine": "vllm", "args": {"max_num_seqs": 7},
                 "engine_versions": bad}]}, "r.yaml")


def test_unbounded_entry_ignores_the_release():
    r = RecipeArgs("MiniMaxAI/*", ("b200_sxm",), "vllm", {"max_num_seqs": 3})
    assert r.matches(_mm(backend_version=""), "vllm")
