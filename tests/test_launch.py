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


def test_vllm_replicas_of_an_moe_model_are_separate_commands():
    """vLLM's data-parallel ranks of an MoE model step in lockstep (dummy forwards on idle
    ranks; the experts form one DP x TP group), not as the independent replicas simulated:
    one command per replica, said so; a dense model keeps --data-parallel-size."""
    _, la = _launch("engine=vllm", "model=qwen3-30b-a3b", "tensor_parallel_size=2", "num_replicas=3")
    assert "--data-parallel-size" not in la.argv
    assert any(n.startswith("3 replicas: run this command 3 times") for n in la.notes)
    _, dense = _launch("engine=vllm", "tensor_parallel_size=2", "num_replicas=3")
    assert _flags(dense.argv)["--data-parallel-size"] == "3"


def test_a_config_path_launches_the_checkpoint_its_path_names():
    """An engine serves a checkpoint, not a config.json: a Hub cache path or an ORG--NAME_config.json
    file names its id; another path is kept as given."""
    from sim.launch import hub_id_of_path, model_checkpoint

    assert hub_id_of_path("/m/Qwen--Qwen3-30B-A3B_config.json") == "Qwen/Qwen3-30B-A3B"
    assert hub_id_of_path("/hf/models--deepseek-ai--DeepSeek-V3/snapshots/0a1b/config.json") == \
        "deepseek-ai/DeepSeek-V3"
    assert hub_id_of_path("/m/config.json") is None and hub_id_of_path("llama-3.1-8b") is None
    assert model_checkpoint("/m/Qwen--Qwen3-30B-A3B_config.json", None) == ("Qwen/Qwen3-30B-A3B", False)
    assert model_checkpoint("/m/my_model.json", None) == ("/m/my_model.json", False)


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


def _disagg_launch(engine, **dis):
    from sim.config import build_config
    from sim.engine.deployment import build_deployment
    from sim.launch import launch_command

    cfg = build_config(overrides={"engine": engine, "model": "llama-3.1-8b", "hardware": "h100_sxm",
                                  "disaggregation": {"num_prefill_workers": 1, "num_decode_workers": 2,
                                                     "decode": {"tensor_parallel_size": 2, "max_num_seqs": 128},
                                                     **dis}})
    dep = build_deployment(cfg)
    pools = {p: getattr(dep.disagg, p).cfg.model_dump(mode="json") for p in ("prefill", "decode")}
    return launch_command(dep.cfg.model_dump(mode="json"), pools)


def test_a_disaggregated_vllm_deployment_gets_one_nixl_command_per_worker_and_the_proxy():
    la = _disagg_launch("vllm")
    assert not la.problems
    assert [w for w, _ in la.parts] == ["prefill worker 1 of 1", "decode worker 1 of 2", "decode worker 2 of 2",
                                        "the proxy (vLLM's NIXL example): prefill, then decode"]
    pre, dec2, proxy = la.parts[0][1], la.parts[2][1], la.parts[3][1]
    assert pre[:4] == ["env", "VLLM_NIXL_SIDE_CHANNEL_PORT=5600", "vllm", "serve"]
    assert pre[pre.index("--tensor-parallel-size") + 1] == "1"
    assert pre[-4:] == ["--port", "8100", "--kv-transfer-config",
                        '{"kv_connector":"NixlConnector","kv_role":"kv_both"}']
    assert dec2[1] == "VLLM_NIXL_SIDE_CHANNEL_PORT=5602" and dec2[dec2.index("--port") + 1] == "8201"
    assert dec2[dec2.index("--tensor-parallel-size") + 1] == "2" and dec2[dec2.index("--max-num-seqs") + 1] == "128"
    assert proxy == ["python", "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py", "--port", "8000",
                     "--prefiller-hosts", "localhost", "--prefiller-ports", "8100",
                     "--decoder-hosts", "localhost", "localhost", "--decoder-ports", "8200", "8201"]
    assert "VLLM_NIXL_SIDE_CHANNEL_PORT=5601" in la.text()


def test_a_disaggregated_sglang_deployment_gets_pd_modes_and_the_pd_router():
    la = _disagg_launch("sglang", kv_connector="mooncake")
    assert not la.problems
    pre, dec1, router = la.parts[0][1], la.parts[1][1], la.parts[3][1]
    assert pre[-8:] == ["--port", "8100", "--disaggregation-mode", "prefill", "--disaggregation-transfer-backend",
                        "mooncake", "--disaggregation-bootstrap-port", "8998"]
    assert dec1[-6:] == ["--port", "8200", "--disaggregation-mode", "decode", "--disaggregation-transfer-backend",
                         "mooncake"]
    assert dec1[dec1.index("--max-running-requests") + 1] == "128" and dec1[dec1.index("--tp") + 1] == "2"
    assert router == ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation",
                      "--prefill", "http://localhost:8100", "8998", "--decode", "http://localhost:8200",
                      "--decode", "http://localhost:8201", "--host", "0.0.0.0", "--port", "8000"]
    assert _disagg_launch("sglang", kv_connector="P2pNcclConnector").problems  # not an SGLang backend


def test_a_disaggregated_trtllm_deployment_gets_context_generation_servers_and_the_disagg_config(tmp_path):
    from sim.launch import write_launch

    la = _disagg_launch("trtllm")
    assert not la.problems
    assert [w for w, _ in la.parts][-1] == "the disaggregated front end"
    assert la.parts[-1][1] == ["trtllm-serve", "disaggregated", "-c", "disagg-config.yaml"]
    ctx, gen2 = la.parts[0][1], la.parts[2][1]
    assert ctx[ctx.index("--extra_llm_api_options") + 1] == "extra-llm-api-options-prefill.yaml"
    assert ctx[-4:] == ["--host", "localhost", "--port", "8100"]
    assert gen2[gen2.index("--tp_size") + 1] == "2" and gen2[gen2.index("--max_batch_size") + 1] == "128"
    assert gen2[-1] == "8201"
    assert la.files["extra-llm-api-options-decode.yaml"].endswith("cache_transceiver_config:\n  backend: NIXL\n")
    assert la.files["disagg-config.yaml"] == (
        'hostname: localhost\nport: 8000\nbackend: pytorch\ncontext_servers:\n  num_instances: 1\n  urls:\n'
        '    - "localhost:8100"\ngeneration_servers:\n  num_instances: 2\n  urls:\n'
        '    - "localhost:8200"\n    - "localhost:8201"\n')
    paths = {p.name for p in write_launch(tmp_path, la)}
    assert paths == {"launch.sh", "extra-llm-api-options-prefill.yaml", "extra-llm-api-options-decode.yaml",
                     "disagg-config.yaml"}
    assert "trtllm-serve disaggregated -c disagg-config.yaml" in (tmp_path / "launch.sh").read_text()


def test_sglang_dp_attention_flags_carry_dp_times_the_per_rank_limits():
    """servesim's max_num_seqs / max_num_batched_tokens are per attention rank; SGLang
    divides --max-running-requests and --chunked-prefill-size by --dp under
    --enable-dp-attention, so DP 4 x 64 seqs x 2048 tokens is written 256 / 8192."""
    from sim.config import build_config
    from sim.launch import launch_command

    d = build_config(overrides={"engine": "sglang"}).model_dump(mode="json")
    d.update(data_parallel_size=4, max_num_seqs=64, max_num_batched_tokens=2048, gpu_memory_utilization=0.8)
    a = launch_command(d).argv
    assert a[a.index("--dp") + 1] == "4" and "--enable-dp-attention" in a
    assert a[a.index("--tp") + 1] == "4"  # SGLang's --tp counts every GPU: 4 ranks of attention TP 1
    assert a[a.index("--max-running-requests") + 1] == "256" and a[a.index("--chunked-prefill-size") + 1] == "8192"
    d.update(data_parallel_size=1, num_replicas=4)  # plain DP of whole engines: SGLang does not divide
    a = launch_command(d).argv
    assert a[a.index("--tp") + 1] == "1" and a[a.index("--dp") + 1] == "4" and "--enable-dp-attention" not in a
    assert a[a.index("--max-running-requests") + 1] == "64" and a[a.index("--chunked-prefill-size") + 1] == "2048"


def test_compare_rebuilds_a_disaggregated_variants_pools_from_its_summary_config():
    from sim.cli.compare import _pools
    from sim.config import build_config
    from sim.engine.deployment import build_deployment
    from sim.launch import launch_command

    d = build_deployment(build_config(overrides={"engine": "trtllm", "disaggregation": {
        "num_decode_workers": 2, "decode": {"max_num_seqs": 96}}})).cfg.model_dump(mode="json")
    pools = _pools(d)
    assert pools["decode"]["max_num_seqs"] == 96 and _pools({**d, "disaggregation": None}) is None
    la = launch_command(d, pools)
    assert [w for w, _ in la.parts] == ["context (prefill) server 1 of 1", "generation (decode) server 1 of 2",
                                        "generation (decode) server 2 of 2", "the disaggregated front end"]
    gen = la.parts[1][1]
    assert gen[gen.index("--max_batch_size") + 1] == "96"


def test_stream_interval_and_postprocess_workers_are_written_out():
    """The engines' own spellings: vLLM / SGLang ``--stream-interval``, TensorRT-LLM's LLM API
    ``stream_interval`` and ``num_postprocess_workers`` in the extra options YAML; nothing at
    the defaults (1 and 0)."""
    _, la = _launch("engine=vllm", "stream_interval=20")
    assert la.argv[la.argv.index("--stream-interval") + 1] == "20"
    _, la = _launch("engine=sglang", "stream_interval=30")
    assert la.argv[la.argv.index("--stream-interval") + 1] == "30"
    _, la = _launch("engine=trtllm", "stream_interval=10", "num_postprocess_workers=4")
    assert "stream_interval: 10\n" in la.yaml and "num_postprocess_workers: 4\n" in la.yaml
    for engine in ("vllm", "sglang", "trtllm"):
        _, la = _launch(f"engine={engine}")
        assert "--stream-interval" not in la.argv
        assert "stream_interval" not in (la.yaml or "") and "num_postprocess_workers" not in (la.yaml or "")


@pytest.fixture
def tiny_moe(tmp_path):
    """A small Mixtral-style MoE config (8 experts, top-2, 2 layers)."""
    import json

    p = tmp_path / "moe.json"
    p.write_text(json.dumps({
        "architectures": ["MixtralForCausalLM"], "hidden_size": 1024, "intermediate_size": 2048,
        "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 32000,
        "max_position_embeddings": 4096, "num_local_experts": 8, "num_experts_per_tok": 2,
        "torch_dtype": "bfloat16"}))
    return p


def test_expert_and_attention_dp_layouts_are_written_in_each_engines_terms(tiny_moe):
    """DP 8 x TP 1 with expert parallelism: vLLM --data-parallel-size 8
    --enable-expert-parallel; SGLang --tp 8 --dp 8 --enable-dp-attention --ep-size 8
    (its --tp counts every GPU); TensorRT-LLM tp_size 8, ep_size 8 and
    enable_attention_dp with its balance settings; a TP > 1 attention rank is a
    problem for TensorRT-LLM's attention DP (ranks of attention TP 1)."""
    from sim.config import build_config
    from sim.engine.deployment import build_deployment
    from sim.launch import launch_command


    def argv(engine, **kw):
        c = build_config(overrides={"engine": engine, "model": str(tiny_moe), "hardware": "h100_sxm", **kw})
        la = launch_command(build_deployment(c).cfg.model_dump(mode="json"))
        return la.argv, la.yaml, la.problems

    a, _, p = argv("vllm", data_parallel_size=8, enable_expert_parallel=True)
    assert a[a.index("--data-parallel-size") + 1] == "8" and "--enable-expert-parallel" in a and not p
    a, _, p = argv("sglang", data_parallel_size=8, enable_expert_parallel=True)
    assert (a[a.index("--tp") + 1], a[a.index("--dp") + 1], a[a.index("--ep-size") + 1]) == ("8", "8", "8")
    a, y, p = argv("trtllm", data_parallel_size=8, enable_expert_parallel=True, attention_dp_enable_balance=True,
                   attention_dp_timeout_iters=60)
    assert (a[a.index("--tp_size") + 1], a[a.index("--ep_size") + 1]) == ("8", "8") and not p
    assert "enable_attention_dp: true\nattention_dp_config:\n  enable_balance: true\n  timeout_iters: 60\n" in y
    a, y, p = argv("trtllm", tensor_parallel_size=4, moe_ep_size=2)  # no attention DP: experts EP 2 x TP 2
    assert a[a.index("--ep_size") + 1] == "2" and "enable_attention_dp" not in y and not p
    _, _, p = argv("trtllm", tensor_parallel_size=2, data_parallel_size=4)
    assert len(p) == 1 and p[0].startswith("data_parallel_size 4 x tensor_parallel_size 2")


def test_redundant_expert_slots_and_a_kv_token_cap_in_each_engines_terms(tiny_moe):
    """num_redundant_experts 2 over a 8-expert model at EP 10 (10 physical experts, one a
    GPU) and max_total_tokens 4096: vLLM --enable-eplb --eplb-config
    '{"num_redundant_experts": 2}' (no KV cap flag: said so); SGLang
    --ep-num-redundant-experts 2 --enable-eplb --max-total-tokens 4096; TensorRT-LLM
    moe_config.load_balancer.num_slots 10 (E + R) and kv_cache_config.max_tokens 4096."""
    import json


    def launch(engine):
        c = build_config(overrides={"engine": engine, "model": str(tiny_moe), "hardware": "gb200",
                                    "data_parallel_size": 10, "moe_ep_size": 10,
                                    "num_redundant_experts": 2, "max_total_tokens": 4096, "max_model_len": 2048})
        return launch_command(build_deployment(c).cfg.model_dump(mode="json"))

    la = launch("vllm")
    a = la.argv
    assert "--enable-eplb" in a and json.loads(a[a.index("--eplb-config") + 1]) == {"num_redundant_experts": 2}
    assert la.problems == ["max_total_tokens 4096 caps the KV pool; vLLM has no such flag: "
                           "--num-gpu-blocks-override 256 fixes the pool at that size instead (a testing flag, "
                           "taken even where memory gives less)"]
    assert "--enable-expert-parallel" in a  # EP over all 10 GPUs
    assert "'{\"num_redundant_experts\": 2}'" in la.text()  # shell-quoted in launch.sh
    la = launch("sglang")
    f = _flags(la.argv)
    assert (f["--ep-size"], f["--ep-num-redundant-experts"], f["--max-total-tokens"]) == ("10", "2", "4096")
    assert "--enable-eplb" in la.argv and not la.problems
    la = launch("trtllm")
    assert "moe_config:\n  load_balancer:\n    num_slots: 10\n" in la.yaml
    assert "  max_tokens: 4096\n" in la.yaml and not la.problems


def test_replicas_behind_frontends_are_said_so():
    """num_frontends > 1: the replicas' note says the simulated router ran as that many
    processes behind nginx."""
    _, la = _launch("engine=trtllm", "num_replicas=2", "num_frontends=3")
    assert ("2 replicas: run this command 2 times (each on its own GPUs) behind a load balancer (simulated "
            "router 'round_robin', as 3 router processes behind nginx, each with its own round-robin)") in la.notes
