"""The engine vocabulary (sim/vocabulary.py): every alias maps to its key with its
meaning, in every channel (YAML in either case, --set, command-line flags);
conflicting spellings of one key are an error; an alias whose meaning depends on
the engine's rules is refused where servesim's key means something else."""

from __future__ import annotations

import json

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from sim.config import build_config, config_keys
from sim.errors import ConfigError
from sim.vocabulary import ALIASES, flag_args_to_set, markdown_table

README = Path(__file__).resolve().parent.parent / "README.md"

#: (alias spelling, value given, extra keys it needs to mean the same, servesim key, value expected)
CASES = [
    # vLLM
    ("scheduling_policy", "priority", {}, "policy", "priority"),
    ("async_scheduling", True, {}, "overlap_scheduling", True),
    ("dp", 3, {}, "data_parallel_size", 3),
    ("tp", 2, {}, "tensor_parallel_size", 2),
    # vllm bench serve
    ("num_prompts", 123, {}, "workload.num_requests", 123),
    ("request_rate", 7.5, {}, "workload.request_rate", 7.5),
    ("burstiness", 0.5, {"request_rate": 4}, "workload.burstiness", 0.5),
    ("max_concurrency", 12, {}, "workload.max_concurrency", 12),
    ("num_warmups", 5, {}, "workload.num_warmup_requests", 5),
    # SGLang
    ("max_running_requests", 48, {}, "max_num_seqs", 48),
    ("chunked_prefill_size", 4096, {"engine": "sglang"}, "max_num_batched_tokens", 4096),
    ("mem_fraction_static", 0.8, {"engine": "sglang"}, "gpu_memory_utilization", 0.8),
    ("page_size", 32, {}, "block_size", 32),
    ("disable_radix_cache", True, {"engine": "sglang"}, "enable_prefix_caching", False),
    ("disable_radix_cache", False, {}, "enable_prefix_caching", True),
    ("schedule_policy", "fcfs", {}, "policy", "fcfs"),
    ("context_length", 4096, {}, "max_model_len", 4096),
    ("tp_size", 4, {}, "tensor_parallel_size", 4),
    ("dp_size", 2, {}, "data_parallel_size", 2),
    ("ep_size", 2, {}, "moe_ep_size", 2),
    ("ep_num_redundant_experts", 32, {}, "num_redundant_experts", 32),
    ("moe_expert_parallel_size", 4, {}, "moe_ep_size", 4),
    ("moe_tensor_parallel_size", 2, {}, "moe_tp_size", 2),
    # TensorRT-LLM
    ("max_num_tokens", 3072, {}, "max_num_batched_tokens", 3072),
    ("max_batch_size", 96, {}, "max_num_seqs", 96),
    ("max_seq_len", 8192, {}, "max_model_len", 8192),
    ("free_gpu_memory_fraction", 0.85, {"engine": "trtllm"}, "gpu_memory_utilization", 0.85),
    ("kv_cache_free_gpu_memory_fraction", 0.7, {"engine": "trtllm"}, "gpu_memory_utilization", 0.7),
    ("tokens_per_block", 64, {}, "block_size", 64),
    ("enable_block_reuse", False, {"engine": "trtllm"}, "enable_prefix_caching", False),
    ("capacity_scheduler_policy", "GUARANTEED_NO_EVICT", {}, "capacity_scheduler_policy", "guaranteed_no_evict"),
    ("capacity_scheduler_policy", "MAX_UTILIZATION", {}, "capacity_scheduler_policy", "max_utilization"),
]


def _get(cfg, key: str):
    obj = cfg
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def _yaml(tmp_path: Path, entries: dict) -> Path:
    import yaml

    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(entries))
    return p


def test_every_alias_has_a_case():
    assert {a.name for a in ALIASES} <= {c[0] for c in CASES}


@pytest.mark.parametrize("alias,value,extra,key,expected", CASES)
def test_alias_maps_to_its_key_in_yaml_snake_and_kebab(tmp_path, alias, value, extra, key, expected):
    for spelling in (alias, alias.replace("_", "-")):
        cfg = build_config(_yaml(tmp_path, {**extra, spelling: value}))
        assert _get(cfg, key) == expected, spelling


@pytest.mark.parametrize("alias,value,extra,key,expected", CASES)
def test_alias_maps_to_its_key_as_a_flag(alias, value, extra, key, expected):
    args = []
    for k, v in extra.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    flag = f"--{alias.replace('_', '-')}" if alias != "tp" else "-tp"
    if isinstance(value, bool):
        args.append(flag if value else f"--no-{flag[2:]}")
    else:
        args += [flag, str(value)]
    set_args = flag_args_to_set(args, {}, config_keys())
    assert set_args[::2] == ["--set"] * (len(set_args) // 2)
    cfg = build_config(set_args=set_args[1::2])
    assert _get(cfg, key) == expected


@pytest.mark.parametrize("key", sorted(config_keys()))
def test_every_config_key_is_a_kebab_flag(key):
    """Each key takes its vLLM-style flag; the value reaches the key unchanged."""
    values = {"model": "qwen3-0.6b", "hardware": "h200_sxm", "engine": "sglang", "scheduler": "static",
              "policy": "priority", "capacity_scheduler_policy": "max_utilization", "kv_memory_rule": "free_fraction",
              "memory_profile": "after_cuda_context",
              "kv_cache_dtype": "fp8", "kv_allocation": "contiguous", "contiguous_reserve": "max_tokens",
              "dtype": "float16", "quantization": "fp8", "attention_impl": "naive", "router": "random",
              "block_size": 32, "tensor_parallel_size": 2, "num_replicas": 3, "max_num_seqs": 7,
              "max_num_batched_tokens": 4096, "max_model_len": 4096, "long_prefill_token_threshold": 64,
              "max_prefill_tokens": 1024, "gpu_memory_utilization": 0.8, "num_gpu_blocks_override": 500,
              "watermark": 0.01, "seed": 5, "data_parallel_size": 2, "moe_ep_size": 2, "moe_tp_size": 1,
              "engine_version": "0.24.0", "moe_backend": "marlin", "scheduler_recv_interval": 10,
              "attention_dp_timeout_iters": 60, "attention_dp_batching_wait_iters": 0,
              "workload_distribution": "power_law_1.2", "stream_interval": 20, "num_postprocess_workers": 4,
              "num_redundant_experts": 32, "max_total_tokens": 65536, "num_frontends": 3}
    bools = config_keys()
    extra: list[str] = []
    if key in ("client_think_time_s", "client_start_spread_s"):
        extra = ["--max-concurrency", "4"]
    if key == "engine_version":
        extra = ["--engine", "vllm"]
    if key == "num_postprocess_workers":  # TensorRT-LLM's
        extra = ["--engine", "trtllm"]
    flag = "--" + key.replace("_", "-")
    if bools[key]:
        args = [flag]
        want = True
    else:
        want = values.get(key, 0.001)
        args = [flag, str(want)]
    if key == "disaggregation":  # a mapping: YAML flow style on the command line
        args = [flag, "{num_prefill_workers: 1, num_decode_workers: 2}"]
    cfg = build_config(set_args=flag_args_to_set(args + extra, {}, bools)[1::2])
    if key == "disaggregation":
        assert (cfg.disaggregation.num_prefill_workers, cfg.disaggregation.num_decode_workers) == (1, 2)
    else:
        assert getattr(cfg, key) == want


def test_no_form_of_a_boolean_flag():
    cfg = build_config(set_args=flag_args_to_set(["--engine", "vllm", "--no-enable-prefix-caching"], {},
                                                 config_keys())[1::2])
    assert cfg.enable_prefix_caching is False  # the preset's True is overridden
    on = build_config(set_args=flag_args_to_set(["--enable-prefix-caching"], {}, config_keys())[1::2])
    assert on.enable_prefix_caching is True


@pytest.mark.parametrize("args,needle", [
    (["--max-num-seqs", "64", "--max-running-requests", "128"],
     "--max-num-seqs 64 and --max-running-requests 128 both set max_num_seqs"),
    (["--max-num-batched-tokens", "2048", "--max_num_tokens", "4096"], "both set max_num_batched_tokens"),
    (["--enable-prefix-caching", "--disable-radix-cache"], "both set enable_prefix_caching"),
    (["--policy", "fcfs", "--scheduling-policy", "priority"], "both set policy"),
    (["--num-prompts", "10", "--set", "workload.num_requests=20"], "both set workload.num_requests"),
])
def test_conflicting_spellings_are_an_error(args, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        set_args = flag_args_to_set(args, {}, config_keys())
        build_config(set_args=[a for a in set_args if a != "--set"])


def test_same_value_under_two_spellings_is_fine():
    cfg = build_config(set_args=["--max-num-seqs=64", "max_running_requests=64"])
    assert cfg.max_num_seqs == 64


def test_conflicting_spellings_in_one_yaml_file(tmp_path):
    with pytest.raises(ConfigError, match=r"c\.yaml: 'max-num-seqs' 128 and 'max_num_seqs' 64 both set max_num_seqs"):
        build_config(_yaml(tmp_path, {"max_num_seqs": 64, "max-num-seqs": 128}))
    with pytest.raises(ConfigError, match="both set max_num_seqs"):
        build_config(_yaml(tmp_path, {"max_batch_size": 64, "max_running_requests": 128}))


@pytest.mark.parametrize("entries,needle", [
    ({"mem_fraction_static": 0.8}, "mem_fraction_static means gpu_memory_utilization only where kv_memory_rule is "
                                   "static_fraction, but this config has kv_memory_rule 'utilization'"),
    ({"engine": "trtllm", "mem_fraction_static": 0.8}, "kv_memory_rule 'free_fraction'"),
    ({"free_gpu_memory_fraction": 0.9}, "add --engine trtllm"),
    ({"engine": "vllm", "chunked_prefill_size": 4096}, "only where scheduler is prefill_first or "
                                                       "prefill_first_whole or prefill_first_mixed, but this config "
                                                       "has scheduler 'chunked'"),
])
def test_alias_with_another_meaning_here_is_refused(tmp_path, entries, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        build_config(_yaml(tmp_path, entries))


def test_unmodelled_value_is_refused():
    with pytest.raises(ConfigError, match=r"schedule_policy: 'lpm' is not modelled by servesim; accepted: fcfs"):
        build_config(set_args=["schedule_policy=lpm"])


def test_nested_workload_keys_in_kebab_case(tmp_path):
    cfg = build_config(_yaml(tmp_path, {"workload": {"name": "chat", "request-rate": 3, "num-requests": 40}}))
    assert (cfg.workload.request_rate, cfg.workload.num_requests) == (3, 40)


def test_cli_flags_on_run(tmp_path):
    out = tmp_path / "o"
    r = CliRunner().invoke(app, ["run", "--quiet", "--max-num-seqs", "8", "--max-num-batched-tokens", "2048",
                                 "--no-enable-prefix-caching", "-tp", "2", "--num-prompts", "20",
                                 "--request-rate", "4", "--scheduling-policy", "fcfs", "--out", str(out)])
    assert r.exit_code == 0, r.output
    import json

    s = json.loads((out / "summary.json").read_text())
    c = s["config"]
    assert (c["max_num_seqs"], c["max_num_batched_tokens"], c["tensor_parallel_size"]) == (8, 2048, 2)
    assert c["enable_prefix_caching"] is False and s["num_prompts"] == 20 and s["completed"] == 20


def test_run_title_names_the_engine_and_a_config_json_by_its_hub_id(tmp_path):
    cfg = tmp_path / "models--Qwen--Qwen3-8B" / "snapshots" / "abc"
    cfg.mkdir(parents=True)
    from sim.model_spec import _presets  # (a preset's config.json written where a Hub cache would hold it)

    (cfg / "config.json").write_text(json.dumps(_presets()["qwen3-8b"]["config"]))
    r = CliRunner().invoke(app, ["run", "--quiet", "--engine", "sglang", "--model", str(cfg / "config.json"),
                                 "--num-prompts", "5", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    title = " ".join(r.output.split("┌")[0].split())
    assert title == "servesim run: Qwen/Qwen3-8B on 1x1 h100_sxm, engine=sglang (as 0.5.8), scheduler=prefill_first", title


def test_flag_without_value_is_one_line_error():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "sim", "run", "--max-num-seqs"], capture_output=True, text=True,
                       cwd=README.parent)
    assert p.returncode == 2
    assert p.stderr.strip() == "error: --max-num-seqs: needs a value (e.g. --max-num-seqs 4)"


def test_bad_flag_value_names_the_flag():
    with pytest.raises(ConfigError, match=r"--max-num-seqs"):
        build_config(set_args=flag_args_to_set(["--max-num-seqs", "lots"], {}, config_keys())[1::2])


def test_readme_alias_table_is_the_module_table():
    """The README's table is generated from sim/vocabulary.py (markdown_table)."""
    assert markdown_table() in README.read_text()


def test_flags_lists_the_values_of_keys_with_a_fixed_set_and_their_defaults():
    from typer.testing import CliRunner

    from sim.cli.main import app

    out = CliRunner().invoke(app, ["flags"]).output
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("  --")}
    assert "{vllm,trtllm,sglang}" in lines["--engine"] and "unset by default" in lines["--engine"]
    assert "{fp8,fp8_block,int8,int4_wo,nvfp4,mxfp4}" in lines["--quantization"]
    assert "{auto,bfloat16,float16,fp8,fp8_e4m3,fp8_e5m2}" in lines["--kv-cache-dtype"]
    assert lines["--block-size"].rstrip().endswith("block_size (default 16)")
    assert lines["--max-num-seqs"].split()[1] == "VALUE"


def test_flags_with_an_engine_lists_its_preset_values_at_a_release_with_their_sources():
    """`servesim flags --engine trtllm [--engine-version R]`: what the preset fills at
    that release (TensorRT-LLM's host time per sequence: the fit's 80 us before 1.2,
    the measured 28 us from it; the overlap scheduler off before 0.19)."""
    from typer.testing import CliRunner

    from sim.cli.main import app

    def values(*args):
        res = CliRunner().invoke(app, ["flags", "--engine", "trtllm", *args])
        assert res.exit_code == 0, res.output
        lines = res.output.splitlines()
        return {ln.split(" = ")[0].strip(): (ln.split(" = ")[1], lines[i + 1].strip())
                for i, ln in enumerate(lines) if " = " in ln and ln.startswith("  ") and not ln.startswith("   ")}

    new, old, older = values(), values("--engine-version", "1.0.0rc3"), values("--engine-version", "0.18.2")
    assert new["cpu_seq_overhead_s"][0] == "2.8e-05" and "release 1.2.0 on: github.com/NVIDIA/TensorRT-LLM/pull/10273" \
        in new["cpu_seq_overhead_s"][1]
    assert old["cpu_seq_overhead_s"][0] == "8e-05" and "validate_silicon.py" in old["cpu_seq_overhead_s"][1]
    assert new["overlap_scheduling"][0] == old["overlap_scheduling"][0] == "True"
    assert older["overlap_scheduling"][0] == "False" and older["overlap_scheduling"][1].startswith("release before 0.19.0")
    assert new["block_size"] == ("32", "KvCacheConfig tokens_per_block 32 in the LLM API (ENGINE_SEMANTICS §4)")
    bad = CliRunner().invoke(app, ["flags", "--engine", "tgi"])  # (main() prints a ConfigError as one line, exit 2)
    assert isinstance(bad.exception, ConfigError)
    assert str(bad.exception) == "--engine: unknown engine 'tgi'; valid: vllm, trtllm, sglang"
