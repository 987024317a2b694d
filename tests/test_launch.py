"""Launch commands of a simulated configuration (sim/launch.py): each flag carries
the value the simulation ran with, in the engine's own spelling; configurations an
engine has no setting for are said so. Also plan's --price."""

from __future__ import annotations

import shlex

import pytest

from sim.config import build_config
from sim.engine.deployment import build_deployment
from sim.errors import ConfigError
from sim.launch import EXTRA_YAML, launch_command, write_launch
from sim.sweep.plan import parse_prices


def _launch(*sets):
    cfg = build_deployment(build_config(set_args=list(sets))).cfg
    return cfg, launch_command(cfg.model_dump(mode="json"))


def _flags(argv: list[str]) -> dict[str, str | None]:
    out, i = {}, 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[a] = argv[i + 1]
                i += 2
                continue
            out[a] = None
        i += 1
    return out


def test_vllm_serve_carries_the_resolved_values():
    cfg, la = _launch("engine=vllm", "max_num_seqs=64", "max_num_batched_tokens=2048", "tensor_parallel_size=2",
                      "max_model_len=8192", "kv_cache_dtype=fp8", "num_replicas=3", "policy=priority")
    assert la.argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    f = _flags(la.argv)
    assert f["--max-num-seqs"] == "64" and f["--max-num-batched-tokens"] == "2048"
    assert f["--tensor-parallel-size"] == "2" and f["--data-parallel-size"] == "3"
    assert f["--max-model-len"] == "8192" and f["--gpu-memory-utilization"] == f"{cfg.gpu_memory_utilization:g}"
    assert f["--block-size"] == "16" and f["--kv-cache-dtype"] == "fp8" and f["--scheduling-policy"] == "priority"
    assert "--enable-prefix-caching" in f and "--enable-chunked-prefill" in f  # engine vllm: both on
    assert not la.problems and la.yaml is None
    # the shell form is the same argv
    assert shlex.split(la.shell().replace("\\\n", " ")) == la.argv


def test_vllm_defaults_are_written_out_resolved():
    """A config with no engine runs vLLM's hardware defaults: the command says them."""
    _, la = _launch("max_model_len=4096")
    f = _flags(la.argv)
    assert (f["--max-num-seqs"], f["--max-num-batched-tokens"], f["--gpu-memory-utilization"]) == ("1024", "8192",
                                                                                                 "0.92")
    assert "--no-enable-prefix-caching" in f  # servesim's default without an engine


def test_mixed_is_vllm_without_chunked_prefill():
    _, la = _launch("scheduler=mixed", "max_model_len=4096")
    assert "--no-enable-chunked-prefill" in la.argv and not la.problems


@pytest.mark.parametrize("sched,needle", [("continuous", "vLLM v0's scheduler, which vLLM V1 removed"),
                                          ("static", "not offered by vLLM, SGLang or TensorRT-LLM")])
def test_modes_without_an_engine_setting_are_said_so(sched, needle, tmp_path):
    _, la = _launch(f"scheduler={sched}", "max_model_len=4096")
    assert any(needle in p for p in la.problems)
    write_launch(tmp_path, la)
    assert f"# NOT the simulated configuration: {la.problems[0]}" in (tmp_path / "launch.sh").read_text()


def test_sglang_launch_server():
    cfg, la = _launch("engine=sglang", "tensor_parallel_size=2", "max_num_seqs=128", "max_model_len=8192",
                      "enable_prefix_caching=false")
    assert la.argv[:5] == ["python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct"]
    f = _flags(la.argv)
    assert f["--tp"] == "2" and f["--max-running-requests"] == "128"
    assert f["--chunked-prefill-size"] == str(cfg.max_num_batched_tokens)
    assert f["--mem-fraction-static"] == f"{cfg.gpu_memory_utilization:g}" and f["--page-size"] == "1"
    assert f["--context-length"] == "8192" and "--disable-radix-cache" in f and not la.problems


def test_sglang_whole_prompts_disable_chunking():
    _, la = _launch("engine=sglang", "scheduler=prefill_first_whole", "max_model_len=8192")
    assert _flags(la.argv)["--chunked-prefill-size"] == "-1"


def test_trtllm_serve_with_extra_options_yaml(tmp_path):
    import yaml

    cfg, la = _launch("engine=trtllm", "max_num_seqs=256", "max_num_batched_tokens=4096", "max_model_len=8192",
                      "quantization=fp8", "capacity_scheduler_policy=max_utilization")
    assert la.argv[:2] == ["trtllm-serve", "nvidia/Llama-3.1-8B-Instruct-FP8"]  # the preset's FP8 checkpoint
    f = _flags(la.argv)
    assert f["--max_batch_size"] == "256" and f["--max_num_tokens"] == "4096" and f["--max_seq_len"] == "8192"
    assert f["--extra_llm_api_options"] == EXTRA_YAML
    y = yaml.safe_load(la.yaml)
    assert y["kv_cache_config"] == {"free_gpu_memory_fraction": cfg.gpu_memory_utilization, "enable_block_reuse": True,
                                    "tokens_per_block": 32}
    assert y["scheduler_config"] == {"capacity_scheduler_policy": "MAX_UTILIZATION"}
    assert y["enable_chunked_prefill"] is False  # mixed: whole contexts
    paths = write_launch(tmp_path, la)
    assert [p.name for p in paths] == ["launch.sh", EXTRA_YAML]
    assert yaml.safe_load((tmp_path / EXTRA_YAML).read_text()) == y


def test_memory_rule_of_another_engine_is_said_so():
    _, la = _launch("engine=vllm", "kv_memory_rule=static_fraction", "max_model_len=4096")
    assert any("kv_memory_rule 'static_fraction' is not vllm's" in p for p in la.problems)


def test_parse_prices():
    assert parse_prices(["h100_sxm=2.49", "h200_sxm=3.5,b200_sxm=$6/h"]) == {"h100_sxm": 2.49, "h200_sxm": 3.5,
                                                                              "b200_sxm": 6.0}
    for bad, needle in ((["h100_sxm"], "expected GPU=USD"), (["h100_sxm=abc"], "not a price"),
                        (["h100_sxm=-1"], "must be in [0,"), (["h100_sxm=1", "h100_sxm=2"], "priced twice")):
        with pytest.raises(ConfigError, match=__import__("re").escape(needle)):
            parse_prices(bad)


def test_a_disaggregated_winner_names_its_pools_instead_of_a_broken_command():
    from sim.config import build_config
    from sim.launch import launch_command

    cfg = build_config(overrides={"disaggregation": {"num_decode_workers": 2, "decode": {"tensor_parallel_size": 2}}})
    la = launch_command(cfg.model_dump(mode="json"))
    text = la.text()
    assert "1 prefill worker(s) of TP 1, 2 decode worker(s) of TP 2" in text
    assert la.problems and "per-pool commands are not written" in la.problems[0]
