"""Config loading and the CLI's handling of bad input (clear messages, exit 2, no traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.config import build_config, resolve_scheduler_limits
from sim.engine.deployment import build_deployment
from sim.errors import ConfigError

DATA = Path(__file__).parent / "data"


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_set_overrides_and_types():
    cfg = build_config(set_args=["workload.request_rate=4", "enable_prefix_caching=true", "block_size=32"])
    assert cfg.workload.request_rate == 4.0 and cfg.enable_prefix_caching is True and cfg.block_size == 32


def test_unknown_set_key_is_an_error_with_suggestion():
    with pytest.raises(ConfigError, match=r"unknown config key 'max_num_seq'.*max_num_seqs"):
        build_config(set_args=["max_num_seq=4"])
    with pytest.raises(ConfigError, match=r"workload.request_rat"):
        build_config(set_args=["workload.request_rat=4"])


def test_malformed_yaml_names_file_and_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("model: llama-3.1-8b\nscheduler: [chunked\n")
    with pytest.raises(ConfigError, match=r"bad.yaml.*line 3"):
        build_config(p)


def test_bad_values_name_the_key(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("block_size: 0\n")
    with pytest.raises(ConfigError, match=r"c.yaml.*block_size.*0"):
        build_config(p)
    with pytest.raises(ConfigError, match="scheduler.*valid values: chunked, continuous, mixed, prefill_first, prefill_first_mixed, prefill_first_whole, static"):
        build_deployment(build_config(overrides={"scheduler": "fifo"}))


@pytest.mark.parametrize("key", ["frontend_latency_s", "frontend_token_s", "cpu_step_overhead_s",
                                 "cpu_seq_overhead_s", "eager_step_overhead_s", "client_think_time_s",
                                 "client_start_spread_s"])
def test_infinite_times_are_refused(tmp_path, key):
    """An infinite overhead or latency ran to empty metrics (or a traceback for
    the start spread); it is refused like a negative one, from --set and YAML."""
    with pytest.raises(ConfigError, match=rf"--set: {key}: Input should be a finite number \(got inf\)"):
        build_config(overrides={key: float("inf")})
    p = tmp_path / "c.yaml"
    p.write_text(f"{key}: .inf\n")
    with pytest.raises(ConfigError, match=rf"c.yaml: {key}: Input should be a finite number"):
        build_config(p)
    # huge but finite (1e308 s per step ran simulated time to inf/nan): at most an hour
    with pytest.raises(ConfigError, match=rf"{key}: Input should be less than or equal to 3600"):
        build_config(overrides={key: 1e308})
    closed = {"workload.max_concurrency": 4} if key.startswith("client_") else {}  # client keys: closed loop
    assert getattr(build_config(overrides={key: 3600.0, **closed}), key) == 3600.0


def test_unknown_model_and_hardware_list_valid_names():
    with pytest.raises(ConfigError, match="llama-3.1-8b"):
        build_deployment(build_config(overrides={"model": "llama-9"}))
    with pytest.raises(ConfigError, match="h100_sxm"):
        build_deployment(build_config(overrides={"hardware": "h900"}))


def test_enable_chunked_prefill_alias():
    assert build_config(set_args=["enable_chunked_prefill=false"]).scheduler == "continuous"
    assert build_config(set_args=["enable_chunked_prefill=true"]).scheduler == "chunked"


def test_vllm_default_limits_per_gpu():
    # vLLM 0.24 serve defaults: H100 (>= 70 GiB, not A100) 8192 / 1024; A100 2048 / 256.
    cfg = build_config()
    h100 = resolve_scheduler_limits(cfg, 80 * 2**30, "h100_sxm", 8192)
    a100 = resolve_scheduler_limits(cfg, 80 * 2**30, "a100_sxm", 8192)
    assert (h100.max_num_batched_tokens, h100.max_num_seqs) == (8192, 1024)
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)
    cont = resolve_scheduler_limits(build_config(overrides={"scheduler": "continuous"}), 80 * 2**30, "h100_sxm", 32768)
    assert cont.max_num_batched_tokens == 32768  # raised to max_model_len without chunking
    with pytest.raises(ConfigError, match="max_num_batched_tokens .* must be >= max_num_seqs"):
        resolve_scheduler_limits(build_config(set_args=["max_num_batched_tokens=64", "max_num_seqs=128"]),
                                 80 * 2**30, "h100_sxm", 8192)


def test_cli_errors_are_messages_not_tracebacks(tmp_path):
    r = cli("run", "--set", "nope=1", "--quiet", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "unknown config key 'nope'" in r.stderr and "Traceback" not in r.stderr
    r = cli("run", "--model", "gpt-5", "--quiet", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "llama-3.1-8b" in r.stderr and "Traceback" not in r.stderr


def test_cli_run_writes_outputs(tmp_path):
    out = tmp_path / "run"
    r = cli("run", "--model", str(DATA / "test_model.json"), "--hardware", str(DATA / "test_gpu.yaml"),
            "--set", "workload.num_requests=30", "--set", "workload.request_rate=50", "--quiet",
            "--goodput", "ttft:50", "--out", str(out))
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    # The default workload (prompts up to 8,192) meets max_model_len 4,096: over-long ones are rejected.
    assert s["completed"] + s["num_rejected"] == 30 and s["request_goodput"] is not None
    header = (out / "requests.csv").read_text().splitlines()[0].split(",")
    assert header[:6] == ["request_id", "replica", "arrival_time_s", "first_scheduled_time_s",
                          "first_token_time_s", "finish_time_s"]
    assert (out / "steps.csv").read_text().startswith("replica,start_time_s,num_steps,step_time_s")
    assert "simulated req/s" in r.stdout
    assert s["num_rejected"] == 1 and "warning: 1 request was rejected, e.g. request 23: prompt (4196)" in r.stderr


def test_cli_run_rejection_warning_says_how_many_were_warm_up(tmp_path):
    # the results count measured requests only: the warning said 58 where the table said 56
    r = cli("run", "--quiet", "--out", str(tmp_path / "r"), "--workload", "default", "--set", "max_model_len=2048",
            "--set", "workload.num_warmup_requests=20", "--set", "workload.num_requests=200")
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    import csv

    with open(tmp_path / "r" / "requests.csv", newline="") as f:
        cells = list(csv.DictReader(f))
    warm = sum(1 for c in cells if c["status"] == "rejected" and c["is_warmup"] == "True")
    assert warm > 0 and s["num_rejected"] + warm == sum(1 for c in cells if c["status"] == "rejected")
    assert (f"warning: {s['num_rejected'] + warm} requests were rejected ({warm} of them warm-up requests, "
            "outside the results), e.g. request") in r.stderr


def test_cli_run_fails_when_every_request_is_rejected(tmp_path):
    r = cli("run", "--quiet", "--out", str(tmp_path / "r"), "--set", "max_model_len=100",
            "--set", "workload.num_requests=5")
    assert r.returncode == 1, r.stderr  # nothing served: not a result a script may take
    assert "error: every request was rejected, e.g. request 0: prompt (" in r.stderr
    assert "> max_model_len (100)" in r.stderr
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["num_rejected"] == 5  # still written


@pytest.mark.parametrize("how, where", [
    (["--set", "scheduler=bogus"], "--set: scheduler: "),
    (["--model", "nosuch"], "--model: model: "),
    (["CFG"], "c.yaml: hardware: "),
])
def test_errors_found_building_the_deployment_name_where_the_key_was_set(tmp_path, how, where):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("hardware: nosuchgpu\n")
    args = [str(cfg) if a == "CFG" else a for a in how]
    r = cli("run", "--quiet", "--out", str(tmp_path / "r"), *args)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and where in line and line.index(where) == len("error: ") + (
        len(str(tmp_path)) + 1 if where.startswith("c.yaml") else 0), line


def test_variant_errors_name_the_variants_file(tmp_path):
    v = tmp_path / "v.yaml"
    v.write_text("a: {scheduler: bogus}\nb: {scheduler: chunked}\n")
    r = cli("compare", "--quiet", "--variants", str(v), "--out", str(tmp_path / "c"))
    assert r.returncode != 0
    assert f"error: --variants {v}: variant a: scheduler: unknown batching mode 'bogus'" in r.stderr
    r = cli("compare", "--quiet", "--set", "hardware=nosuch", "--out", str(tmp_path / "c"))
    assert "error: --set: hardware: unknown hardware 'nosuch'" in r.stderr  # the base config, no variant


def test_out_must_name_a_folder(tmp_path):
    r = cli("run", "--quiet", "--out", "", "--set", "workload.num_requests=3")
    assert r.returncode == 2 and "give a folder of its own" in r.stderr and "Traceback" not in r.stderr


def test_cli_kv_prints_capacity():
    r = cli("kv", "--model", "llama-3.1-8b", "--hardware", "h100_sxm")
    assert r.returncode == 0, r.stderr
    assert "131,072" in r.stdout  # bytes per token, Llama-3.1-8B bf16


def test_cli_kv_states_the_engines_memory_rule():
    """``kv_memory_rule`` beside f, in the engine's own terms (SGLang: mem_fraction_static)."""
    r = cli("kv", "--model", "qwen3-32b", "--hardware", "h100_sxm", "--engine", "sglang",
            "--set", "tensor_parallel_size=2")
    assert r.returncode == 0, r.stderr
    assert "KV = f x (memory - non-torch) - weights (f: mem_fraction_static)" in " ".join(r.stdout.split())
    r = cli("kv", "--model", "llama-3.1-8b", "--hardware", "h100_sxm")
    assert "f: gpu_memory_utilization" in " ".join(r.stdout.split())


def test_cli_kv_says_a_length_over_max_model_len_is_refused_and_names_the_weight_precision():
    r = cli("kv", "--model", "llama-3.1-8b", "--hardware", "h100_sxm", "--quantization", "fp8",
            "--max-model-len", "8192", "--length", "9000", "--length", "1024")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == ("note: --length 9,000 is over max_model_len 8,192: a request of that length is "
                                "refused, so sequences_of_9000_tokens is 0 (raise --max-model-len)")
    rows = {ln.split("│")[1].strip(): ln.split("│")[2].strip() for ln in r.stdout.splitlines() if ln.count("│") == 3}
    assert rows["sequences_of_9000_tokens"] == "0" and int(rows["sequences_of_1024_tokens"].replace(",", "")) > 0
    assert rows["weight_precision"] == "fp8"
    r = cli("kv", "--model", "gpt-oss-120b", "--hardware", "h200_sxm")
    rows = {ln.split("│")[1].strip(): ln.split("│")[2].strip() for ln in r.stdout.splitlines() if ln.count("│") == 3}
    assert rows["weight_precision"] == "attn_qkv bf16, attn_o bf16, experts mxfp4"  # the checkpoint's split


def test_cli_lists():
    assert "llama-3.1-70b" in cli("models").stdout
    assert "h200_sxm" in cli("hardware").stdout


def test_relative_trace_path_in_a_config_file_is_relative_to_the_file(tmp_path, monkeypatch):
    d = tmp_path / "exp"
    d.mkdir()
    (d / "lens.csv").write_text("num_prefill_tokens,num_decode_tokens\n100,20\n")
    (d / "c.yaml").write_text("workload:\n  trace: lens.csv\n  trace_format: lengths\n")
    monkeypatch.chdir(tmp_path)  # not the config's folder
    cfg = build_config(d / "c.yaml")
    assert cfg.workload.trace == str((d / "lens.csv").resolve())
    # on the command line a relative path stays relative to the working directory
    cfg = build_config(None, None, ["workload.trace=exp/lens.csv", "workload.trace_format=lengths"])
    assert cfg.workload.trace == "exp/lens.csv"


def test_bad_out_folder_fails_before_simulating(tmp_path):
    from sim.cli.common import ensure_out_dir

    f = tmp_path / "afile"
    f.write_text("")
    with pytest.raises(ConfigError, match=r"--out .*afile: a file of that name exists"):
        ensure_out_dir(f)
    with pytest.raises(ConfigError, match=r"--out .*: cannot create the folder"):
        ensure_out_dir(f / "sub")
    assert ensure_out_dir(tmp_path / "a" / "b").is_dir()
    r = subprocess.run([sys.executable, "-m", "sim", "run", "--quiet", "--out", str(f)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "a file of that name exists" in r.stderr and "Successful" not in r.stdout


def test_scheduler_and_chunked_prefill_alias_must_agree():
    with pytest.raises(ConfigError, match="scheduler 'static' conflicts with enable_chunked_prefill=true"):
        build_config(None, {"scheduler": "static", "enable_chunked_prefill": True})
    with pytest.raises(ConfigError, match="scheduler 'chunked' conflicts with enable_chunked_prefill=false"):
        build_config(None, {"scheduler": "chunked", "enable_chunked_prefill": False})
    assert build_config(None, {"enable_chunked_prefill": False}).scheduler == "continuous"  # the alias alone
    assert build_config(None, {"scheduler": "static", "enable_chunked_prefill": False}).scheduler == "static"


def test_a_key_given_twice_in_a_config_file_is_an_error(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("max_num_seqs: 4\nmax_num_seqs: 512\n")
    with pytest.raises(ConfigError, match=r"line 2.*'max_num_seqs' is given twice \(first on line 1\)"):
        build_config(p)
    p.write_text("workload.request_rate: 3\nworkload:\n  request_rate: 5\n")
    with pytest.raises(ConfigError, match=r"workload\.request_rate is given twice"):
        build_config(p)
    p.write_text("workload.request_rate: 3\nworkload:\n  num_requests: 7\n")  # different keys: merged
    cfg = build_config(p)
    assert cfg.workload.request_rate == 3 and cfg.workload.num_requests == 7


def test_num_requests_is_bounded():
    with pytest.raises(ConfigError, match="workload.num_requests: Input should be less than or equal to 50000000"):
        build_config(None, None, ["workload.num_requests=1000000000"])


def test_files_that_are_not_utf8_and_runaway_sizes_are_clear_errors(tmp_path):
    p = tmp_path / "latin.yaml"
    p.write_bytes(b"# r\xe9glage\nmodel: llama-3.1-8b\n")
    with pytest.raises(ConfigError, match=r"latin\.yaml: not UTF-8 text \(byte 0xe9 at offset 3\)"):
        build_config(p)
    j = tmp_path / "config.json"
    j.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must be a JSON object, got list"):
        build_deployment(build_config(None, {"model": str(j)}))
    with pytest.raises(ConfigError, match="num_replicas: Input should be less than or equal to 1024"):
        build_config(None, None, ["num_replicas=10000"])
    with pytest.raises(ConfigError, match=r"is 100,000,000 requests, over the 50,000,000 a run takes"):
        build_config(None, None, ["workload.num_requests=null", "workload.duration_s=1e4",
                                  "workload.request_rate=1e4", "workload.input_len=100", "workload.output_len=10"])


def test_a_key_given_twice_in_a_hardware_profile_is_an_error(tmp_path):
    from sim.hardware.profile import hardware_profiles_dir, load_hardware

    p = tmp_path / "hw.yaml"
    p.write_text((hardware_profiles_dir() / "h100_sxm.yaml").read_text() + "memory_bytes: 1000\n")
    with pytest.raises(ConfigError, match=r"hw\.yaml: line \d+: cannot read hardware profile: key 'memory_bytes' "
                                          r"is given twice"):
        load_hardware(p)


@pytest.mark.parametrize("order", [("workload=chat", "workload.num_requests=70"),
                                   ("workload.num_requests=70", "workload=chat")])
def test_workload_name_and_dotted_keys_merge_in_either_order(order, tmp_path):
    """A named workload plus dotted workload keys: the keys override the named
    workload's (they used to drop the name, or the keys, silently)."""
    chat = build_config(workload="chat").workload
    cfg = build_config(set_args=list(order)).workload
    assert cfg.num_requests == 70
    assert (cfg.request_rate, cfg.input_len, cfg.output_len) == (chat.request_rate, chat.input_len, chat.output_len)
    f = tmp_path / "c.yaml"
    f.write_text("\n".join(s.replace("=", ": ") for s in order) + "\n")
    cfg = build_config(f).workload
    assert cfg.num_requests == 70 and cfg.input_len == chat.input_len


def test_tensor_parallelism_beyond_one_node_runs_over_the_nics_or_is_an_error():
    """TP 16 on 8-GPU H100 nodes: two NVLink domains joined by the per-GPU NICs (hierarchical
    all-reduce); TP 128 is no whole number of GB200 NVL72 domains; a profile without NICs refuses it."""
    from sim.cost_model.fitted_step import inter_node_all_reduce_s
    from sim.hardware.profile import get_hardware

    build_deployment(build_config(overrides={"model": "llama-3.1-70b", "hardware": "h100_sxm",
                                             "tensor_parallel_size": 16}))
    with pytest.raises(ConfigError, match=r"tensor_parallel_size 128: .*\(72\), and 128 is not a whole number"):
        build_deployment(build_config(overrides={"model": "llama-3.1-405b", "hardware": "gb200",
                                                 "tensor_parallel_size": 128}))  # NVL72 domains
    with pytest.raises(ConfigError, match=r"tensor_parallel_size 16: .*no 'network' section"):
        build_deployment(build_config(overrides={"model": "llama-3.1-8b", "hardware": "l40s",
                                                 "tensor_parallel_size": 16}))
    hw = get_hardware("h100_sxm")
    # 2 nodes of 8: 2 (2-1)/2 x (8 MiB / 8) / NIC bandwidth + 2 x NIC latency
    nb = 8 * 2 ** 20
    assert inter_node_all_reduce_s(hw, 16, nb) == pytest.approx(
        (nb / 8) / hw.network.bandwidth_bytes_per_s + 2 * hw.network.latency_s, rel=1e-12)
    assert inter_node_all_reduce_s(hw, 8, nb) == 0.0


def test_workload_file_named_in_a_config_is_relative_to_that_config(tmp_path, monkeypatch):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "wl.yaml").write_text("num_requests: 12\nrequest_rate: 3\ninput_len: 100\noutput_len: 10\n")
    (sub / "top.yaml").write_text("workload: wl.yaml\n")
    (sub / "top2.yaml").write_text("workload:\n  name: wl.yaml\n  num_requests: 7\n")
    monkeypatch.chdir(tmp_path)  # not the config's folder
    assert build_config(Path("sub/top.yaml")).workload.num_requests == 12
    wl = build_config(Path("sub/top2.yaml")).workload
    assert wl.num_requests == 7 and wl.request_rate == 3


def test_workload_name_twice_or_with_a_trace_is_an_error(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("workload: chat\nworkload.name: code\n")
    with pytest.raises(ConfigError, match="workload.name is given twice"):
        build_config(f)
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input,output\n0.0,64,8\n")
    with pytest.raises(ConfigError, match="name 'chat' and trace .* both given"):
        build_config(set_args=["workload.name=chat", f"workload.trace={trace}"])


def test_summary_keeps_the_workload_name_through_run_and_compare_copies():
    """The expansion of a named workload consumes workload.name; summary.json still
    names it (run's build_config + run_simulation, and compare's per-variant copy)."""
    from sim.compare.variants import Variant, apply_variant
    from sim.runner import run_simulation

    def build(workload=None, set_args=()):
        return build_config(overrides={"model": str(DATA / "test_model.json"),
                                       "hardware": str(DATA / "test_gpu.yaml")},
                            set_args=["workload.num_requests=4", *set_args], workload=workload)

    base = build("chat", ["workload.request_rate=8"])
    assert (base.workload.name, base.workload.expanded_from, base.workload.request_rate) == (None, "chat", 8)
    variant = apply_variant(base, Variant("static", {"scheduler": "static"}))
    for cfg in (base, variant):
        wl = run_simulation(cfg).summary["config"]["workload"]
        assert wl["name"] == "chat" and "expanded_from" not in wl
        assert wl["num_requests"] == 4 and wl["input_len"]["dist"] == "lognormal"  # chat's lengths
    assert run_simulation(build()).summary["config"]["workload"]["name"] == "default"  # nothing named
    explicit = build(set_args=["workload.input_len=32", "workload.output_len=4"])  # no name: no built-in used
    assert run_simulation(explicit).summary["config"]["workload"]["name"] is None


def test_exact_steps_flag_overrides_the_config_file_either_way(tmp_path):
    """``--exact-steps`` / ``--no-exact-steps`` override the file's ``exact_steps``;
    neither given, the file's value runs."""
    cfg = tmp_path / "c.yaml"
    for in_file, flag, want in ((True, "--no-exact-steps", False), (False, "--exact-steps", True),
                                (True, None, True), (True, "--exact-steps=false", False),
                                (False, "--exact-steps=1", True)):
        cfg.write_text(f"exact_steps: {str(in_file).lower()}\nworkload.num_requests: 20\n")
        out = tmp_path / f"o{in_file}{flag}"
        r = cli("run", str(cfg), "--quiet", "--out", str(out), *([flag] if flag else []))
        assert r.returncode == 0, r.stderr
        assert json.loads((out / "summary.json").read_text())["config"]["exact_steps"] is want

    r = cli("run", "--quiet", "--set", "exact_steps=true", "--no-exact-steps")
    assert r.returncode == 2 and "--set exact_steps=true conflicts with --no-exact-steps" in r.stderr
    r = cli("run", "--quiet", "--exact-steps=maybe")
    assert r.returncode == 2 and "--exact-steps is a flag and takes no value" in r.stderr


def test_an_empty_config_file_runs_the_defaults_with_a_warning(tmp_path):
    cfg = tmp_path / "empty.yaml"
    cfg.write_text("# nothing set yet\n")
    r = cli("run", str(cfg), "--quiet", "--set", "workload.num_requests=5", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert f"warning: {cfg} sets no keys" in r.stderr
    r = cli("run", "--quiet", "--set", "workload.num_requests=5", "--out", str(tmp_path / "p"))
    assert "sets no keys" not in r.stderr


def test_requests_csv_has_each_requests_priority(tmp_path):
    # latency per priority class needs it (it was only in the request specs)
    import csv

    from sim.config import build_config
    from sim.runner import prepare

    r = cli("run", "--quiet", "--out", str(tmp_path / "r"), "--set", "policy=priority",
            "--set", "workload.num_requests=60",
            "--set", 'workload.priority_classes=[{fraction: 0.5, priority: 0}, {fraction: 0.5, priority: 3}]')
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "r" / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    got = {int(x["request_id"]): int(x["priority"]) for x in rows}
    assert set(got.values()) == {0, 3}
    cfg = build_config(overrides={"policy": "priority", "workload.num_requests": 60, "workload.priority_classes": [
        {"fraction": 0.5, "priority": 0}, {"fraction": 0.5, "priority": 3}]})
    specs = prepare(cfg)[1]
    assert got == {i: int(p) for i, p in enumerate(specs.priority)}
