"""One rule per input across channels (YAML file, ``--set``, command-line flags, the
Python API) and messages in each channel's vocabulary (issue #23's leftovers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.config import build_config
from sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=env)


def one_line_error(r) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


# --------------------------------------------------------------------------- booleans

@pytest.mark.parametrize("text, value", [("true", True), ("yes", True), ("on", True), ("True", True),
                                         ("false", False), ("no", False), ("OFF", False)])
def test_yaml_and_set_take_the_same_boolean_spellings(tmp_path, text, value):
    p = tmp_path / "c.yaml"
    p.write_text(f"enable_prefix_caching: {text}\n")
    assert build_config(p).enable_prefix_caching is value
    assert build_config(set_args=[f"enable_prefix_caching={text}"]).enable_prefix_caching is value
    assert build_config(set_args=[f"--enable-prefix-caching={text}"]).enable_prefix_caching is value


@pytest.mark.parametrize("text", ["1", "0", '"true"', "'yes'", "y", "tRuE"])
def test_a_number_or_quoted_string_is_refused_with_the_rule_in_every_channel(tmp_path, text):
    """The message was pydantic's "Input should be a valid boolean": it did not say
    which spellings are booleans."""
    p = tmp_path / "c.yaml"
    p.write_text(f"enable_prefix_caching: {text}\n")
    rule = r"enable_prefix_caching: expected true or false \(yes/no and on/off are read as booleans too; 1, 0"
    with pytest.raises(ConfigError, match=rf"c.yaml: {rule}"):
        build_config(p)
    with pytest.raises(ConfigError, match=rf"--set: {rule}"):
        build_config(set_args=[f"enable_prefix_caching={text}"])
    with pytest.raises(ConfigError, match=r"servesim.simulate\(\): " + rule):
        build_config(overrides={"enable_prefix_caching": text.strip("\"'")}, api="servesim.simulate()")


def test_a_workload_boolean_follows_the_same_rule():
    with pytest.raises(ConfigError, match=r"^--set: workload.skip_bad_rows: expected true or false .*\(got 1\)"):
        build_config(set_args=["workload.skip_bad_rows=1"], workload="chat")


@pytest.mark.parametrize("word", ["true", "false", "yes", "1"])
def test_a_boolean_flag_followed_by_a_value_says_it_takes_none(tmp_path, word):
    """``--enable-prefix-caching true`` took ``true`` as the CONFIG argument:
    "config file: file not found: true"."""
    msg = one_line_error(cli("kv", "--enable-prefix-caching", word, cwd=tmp_path))
    assert msg == (f"error: --enable-prefix-caching {word}: --enable-prefix-caching is a flag and takes no separate "
                   "value; write --enable-prefix-caching (true) or --no-enable-prefix-caching (false), or "
                   f"--enable-prefix-caching={word}")


# --------------------------------------------------------------------------- sources

def test_a_bad_set_value_over_a_config_file_names_set_not_the_file(tmp_path):
    """``servesim kv c.yaml --set max_num_batched_tokens=0`` blamed c.yaml, which
    does not set that key; a flag was not named either."""
    p = tmp_path / "c.yaml"
    p.write_text("max_num_seqs: 8\n")
    with pytest.raises(ConfigError, match=r"^--set: max_num_batched_tokens: Input should be greater"):
        build_config(p, set_args=["max_num_batched_tokens=0"])
    with pytest.raises(ConfigError, match=r"^--max-num-batched-tokens 0: Input should be greater"):
        build_config(p, set_args=["--max-num-batched-tokens=0"])
    with pytest.raises(ConfigError, match=r"^--set: tensor_parallel_size must be a power of two, got 3"):
        build_config(p, set_args=["tensor_parallel_size=3"])
    # a check across keys, the key given as a vLLM-style flag: the flag is named
    with pytest.raises(ConfigError, match=r"^--tp 3: tensor_parallel_size must be a power of two, got 3"):
        build_config(p, set_args=["--tp=3"])
    p.write_text("max_num_seqs: 0\n")
    with pytest.raises(ConfigError, match=r"c.yaml: max_num_seqs: Input should be greater"):
        build_config(p, set_args=["max_num_batched_tokens=10"])


@pytest.mark.parametrize("kw, message", [
    ({"max_num_seqs": 0}, "servesim.simulate(): max_num_seqs: Input should be greater than or equal to 1 (got 0)"),
    ({"bogus_key": 3}, "servesim.simulate(): unknown config key 'bogus_key'"),
    ({"tensor_parallel_size": 3}, "servesim.simulate(): tensor_parallel_size must be a power of two, got 3"),
    ({"workload": {"request_rate": -1}},
     "servesim.simulate(): workload.request_rate: request_rate must be > 0 req/s or inf, got -1.0"),
    ({"max_num_batched_tokens": 10, "max_num_seqs": 64},
     "servesim.simulate(): max_num_batched_tokens (10) must be >= max_num_seqs (64)"),
    ({"model": "nope-model"}, "servesim.simulate(): model: unknown model 'nope-model'"),
])
def test_python_api_errors_name_the_function_and_key_path_not_cli_flags(kw, message):
    """They said ``--set: ...`` or ``--max-num-batched-tokens: ...``: options a
    Python caller never gave."""
    import servesim

    with pytest.raises(ConfigError) as e:
        servesim.simulate(**kw)
    assert str(e.value).startswith(message), str(e.value)
    assert "--" not in str(e.value).split(":")[0]


def test_python_api_deployment_errors_name_the_function_too():
    """Errors found when the deployment is built (a preset's setting against a
    key given, the KV cache too small for one sequence) name the call as the
    config's errors do; an infeasible deployment is an InfeasibleError."""
    import servesim

    with pytest.raises(ConfigError, match=r"^servesim.simulate\(\): enable_prefix_caching: prefix caching needs "
                                          r"kv_allocation 'paged'"):
        servesim.simulate(engine="vllm", kv_allocation="contiguous", workload={"num_requests": 5})
    with pytest.raises(servesim.InfeasibleError, match=r"^servesim.simulate\(\): one sequence of max_model_len "
                                                       r"1024 needs 64 blocks"):
        servesim.simulate(max_model_len=1024, num_gpu_blocks_override=10, workload={"num_requests": 5})
    with pytest.raises(servesim.InfeasibleError, match=r"^servesim.compare\(\): one sequence"):
        servesim.compare(["chunked"], max_model_len=1024, num_gpu_blocks_override=10,
                         workload={"num_requests": 5})


def test_python_compare_errors_name_compare():
    import servesim

    with pytest.raises(ConfigError, match=r"^servesim.compare\(\): max_num_seqs: Input should be greater"):
        servesim.compare(["chunked"], max_num_seqs=0)
    with pytest.raises(ConfigError, match=r"^servesim.compare\(variants=\.\.\.\): variant nope: scheduler: unknown"):
        servesim.compare(["static", "nope"])


# --------------------------------------------------------------------------- kv checks the workload as run does

def test_kv_refuses_a_bad_trace_row_as_run_does(tmp_path):
    """kv computed capacity for a config whose trace run refuses (exit 0)."""
    (tmp_path / "t.csv").write_text("num_prefill_tokens,num_decode_tokens\nabc,10\n")
    (tmp_path / "c.yaml").write_text("workload:\n  trace: t.csv\n")
    want = "t.csv:2: field 'num_prefill_tokens' = 'abc': not a number"
    assert want in one_line_error(cli("kv", "c.yaml", cwd=tmp_path))
    assert want in one_line_error(cli("run", "c.yaml", "--out", "o", "--quiet", cwd=tmp_path))


def test_kv_refuses_a_missing_trace_file(tmp_path):
    msg = one_line_error(cli("kv", "--set", "workload.trace=missing.csv", cwd=tmp_path))
    assert msg == "error: --set: workload.trace: file not found: missing.csv"


# --------------------------------------------------------------------------- scheduler limits

def _warnings(**keys):
    from sim.runner import run_simulation

    wl = {"name": "chat", "num_requests": 4, "request_rate": 8.0, "input_len": 64, "output_len": 4}
    cfg = build_config(overrides={**keys, "workload": wl})
    return run_simulation(cfg).summary["warnings"]


def test_a_budget_below_one_kv_block_warns_and_names_the_lowered_max_num_seqs():
    """max_num_batched_tokens 8 ran at most 8 tokens a step with max_num_seqs 8 (vLLM's
    default lowered to the budget) without a word: a run many times slower than any engine default."""
    w = _warnings(max_num_batched_tokens=8)
    assert any(x.startswith("max_num_batched_tokens 8 is below one KV block (block_size 16): each step "
                            "computes at most 8 token(s)") for x in w), w
    assert any(x.startswith("max_num_seqs defaults to 8 here: vLLM lowers its default max_num_seqs to "
                            "max_num_batched_tokens (8) (vllm/engine/arg_utils.py)") for x in w), w


def test_an_explicit_max_num_seqs_is_not_called_lowered():
    w = _warnings(max_num_batched_tokens=8, max_num_seqs=4)
    assert not any(x.startswith("max_num_seqs defaults") for x in w), w
    assert any(x.startswith("max_num_batched_tokens 8 is below one KV block") for x in w), w


def test_ordinary_limits_give_no_limit_warning():
    w = _warnings(max_num_batched_tokens=512)
    assert not any("max_num_batched_tokens" in x or "max_num_seqs" in x for x in w), w


def test_vllms_warning_for_a_budget_no_step_can_fill():
    """vllm/config/scheduler.py warns when max_num_batched_tokens > max_num_seqs * max_model_len."""
    w = _warnings(max_num_batched_tokens=100_000, max_num_seqs=4, max_model_len=1024)
    assert ("max_num_batched_tokens (100,000) exceeds max_num_seqs * max_model_len (4,096): no step can fill it; "
            "vLLM warns that this may lead to unexpected behavior (vllm/config/scheduler.py)") in w


def test_vllms_errors_stay_errors():
    from sim.engine.deployment import build_deployment

    with pytest.raises(ConfigError, match=r"max_num_batched_tokens \(10\) must be >= max_num_seqs \(64\)"):
        build_deployment(build_config(overrides={"max_num_batched_tokens": 10, "max_num_seqs": 64}))
    with pytest.raises(ConfigError, match=r"max_num_batched_tokens \(100\) is smaller than max_model_len \(4096\)"):
        build_deployment(build_config(overrides={"max_num_batched_tokens": 100, "max_model_len": 4096,
                                                 "scheduler": "continuous"}))


# --------------------------------------------------------------------------- disaggregation: {}

def test_an_empty_disaggregation_mapping_is_1p1d_and_null_is_aggregated(tmp_path):
    """``{}`` is the explicit choice of every default (1P1D), as the README says; a key
    with no value restores the default (aggregated), as for every key. The run states which."""
    (tmp_path / "d.yaml").write_text("disaggregation: {}\nworkload: {name: chat, num_requests: 4, "
                                     "input_len: 64, output_len: 4}\n")
    (tmp_path / "n.yaml").write_text("disaggregation:\nworkload: {name: chat, num_requests: 4, "
                                     "input_len: 64, output_len: 4}\n")
    assert build_config(tmp_path / "d.yaml").disaggregation.num_prefill_workers == 1
    assert build_config(tmp_path / "n.yaml").disaggregation is None
    r = cli("run", "d.yaml", "--out", "o", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "1P x TP1 h100_sxm (chunked) + 1D x TP1 h100_sxm" in " ".join(r.stdout.split())
    d = json.loads((tmp_path / "o" / "summary.json").read_text())["config"]["disaggregation"]
    assert (d["num_prefill_workers"], d["num_decode_workers"]) == (1, 1)


# --------------------------------------------------------------------------- validate's exit status

def test_validate_help_states_the_exit_status_policy():
    r = cli("validate", "--help")
    text = " ".join(r.stdout.split())
    assert "Exit status: 0 when at least one row was simulated and scored" in text
    assert "2 when the file itself is bad" in text and "or when no row could be simulated" in text


# --------------------------------------------------------------------------- found by the bad-input corpus

def test_a_jsonl_number_written_as_a_string_is_refused_naming_file_row_and_field(tmp_path):
    """``"input_length": "12"`` in a JSONL trace was read as 12 (config.json refuses
    a string for a number; so does a JSONL trace now)."""
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 100, "output_length": 10}\n'
                                      '{"timestamp": 500, "input_length": "12", "output_length": 10}\n')
    msg = one_line_error(cli("run", "--set", "workload.trace=t.jsonl", "--out", "o", "--quiet", cwd=tmp_path))
    assert msg.startswith("error: t.jsonl:2: field 'input_length' = \"12\": not a number")
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_a_trace_ending_at_the_send_limit_runs_rather_than_failing_at_the_clock(tmp_path):
    """A Mooncake row at -1e12 ms puts the last send 1e9 s (the send limit) after the
    first: the trace check let it pass, then the run failed at the clock's check
    (also 1e9 s), naming no file or row. The clock may run to twice the send limit."""
    import numpy as np

    from sim.runner import run_simulation
    from sim.workload.config import MAX_SIMULATED_CLOCK_S, MAX_SIMULATED_SPAN_S

    assert MAX_SIMULATED_CLOCK_S == 2 * MAX_SIMULATED_SPAN_S
    assert np.spacing(MAX_SIMULATED_CLOCK_S) <= 2.0 ** -22  # 0.24 us: latencies still resolved
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 100, "output_length": 10}\n'
                 '{"timestamp": -1000000000000.0, "input_length": 100, "output_length": 10}\n')
    res = run_simulation(build_config(set_args=[f"workload.trace={p}"]))
    s = res.summary
    assert s["completed"] == 2 and s["num_out_of_order_trace_rows"] == 1
    assert 0 < s["mean_ttft_ms"] < 1000  # resolved, not rounded to 0


def test_plan_and_kv_name_the_config_file_of_a_bad_hardware(tmp_path):
    (tmp_path / "c.yaml").write_text("hardware: missing.yaml\n")
    want = "error: c.yaml: hardware: unknown hardware 'missing.yaml'"
    assert one_line_error(cli("kv", "c.yaml", cwd=tmp_path)).startswith(want)
    assert one_line_error(cli("plan", "c.yaml", "--slo", "p99_ttft_ms=1000", "--replicas", "1", "--out", "out",
                              "--quiet", "--workers", "1", cwd=tmp_path)).startswith(want)
    msg = one_line_error(cli("plan", "--hardware", "h100_sxm,nope.yaml", "--slo", "p99_ttft_ms=1000",
                             "--replicas", "1", "--out", "out", "--quiet", "--workers", "1", cwd=tmp_path))
    assert msg.startswith("error: --hardware: unknown hardware 'nope.yaml'")


@pytest.mark.parametrize("col, want", [("model_path", "model_path: empty; give a Hugging Face id or model preset"),
                                       ("system", "system: empty; give a hardware profile name")])
def test_validate_names_an_empty_model_or_system_cell(col, want):
    """An empty model_path was read as the path '' (the working directory):
    "model:  is a folder without a config.json"."""
    from sim.validate.rows import ValidateOptions, row_overrides

    row = {"backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm", "isl": 128,
           "osl": 8, "concurrency": 2, "tp_size": 1, "silicon_ttft_ms": 50, "silicon_tpot_ms": 10, col: ""}
    with pytest.raises(ConfigError, match=rf"^{want}$"):
        row_overrides(row, ValidateOptions())


def test_calibrate_names_a_table_whose_gemm_dtype_is_not_modelled(tmp_path):
    """"no kernel tables with modelled rows" named neither the table nor the dtype."""
    from calibration.datasets import family_rows

    (tmp_path / "vllm-0.24.0_gemm.csv").write_text(
        "version,device,kernel_source,gemm_dtype,m,n,k,latency\n0.24.0,H100,torch,bogus16,1,4096,4096,0.02\n")
    with pytest.raises(ConfigError, match=r"vllm-0.24.0_gemm.csv: gemm_dtype 'bogus16' not modelled \(modelled: "
                                          r"bf16, bfloat16, float16, fp16, fp8, fp8_block\)"):
        family_rows(tmp_path)


# --------------------------------------------------------------------------- flags name themselves
def test_errors_of_keys_given_as_flags_name_the_flags_not_set(tmp_path):
    out = str(tmp_path / "o")
    e = one_line_error(cli("run", "--max-num-seqs", "64", "--max-running-requests", "128", "--out", out))
    assert e.startswith("error: --max-num-seqs 64 and --max-running-requests 128 both set max_num_seqs"), e
    e = one_line_error(cli("run", "--num-gpu-blocks-override", "1000000000000", "--out", out))
    assert e.startswith("error: --num-gpu-blocks-override: num_gpu_blocks_override: invalid value"), e
    # the same through --set keeps --set as the source
    e = one_line_error(cli("run", "--set", "max_num_seqs=64", "--set", "max_running_requests=128", "--out", out))
    assert e.startswith("error: --set: 'max_num_seqs' 64 and 'max_running_requests' 128 both set"), e


def test_a_row_of_empty_fields_is_refused_or_counted_but_blank_lines_are_not_rows(tmp_path):
    """``,,`` is a row whose every field is empty (was dropped silently, as a
    blank line is); with skip_bad_rows it is skipped and counted."""
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,100,10\n,,\n\n"
                                    "2023-11-16 18:17:04.9,100,10\n  \n,,\n")
    msg = one_line_error(cli("run", "--set", "workload.trace=t.csv", "--out", "o", "--quiet", cwd=tmp_path))
    assert msg.startswith("error: t.csv:3: field 'ContextTokens': missing")
    r = cli("run", "--set", "workload.trace=t.csv", "--set", "workload.skip_bad_rows=true", "--out", "s", "--quiet",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert s["num_skipped_trace_rows"] == 2 and s["completed"] == 2  # lines 3 and 7; 4 and 6 are blank


def test_a_non_mapping_where_a_mapping_belongs_names_no_internal_class():
    with pytest.raises(ConfigError) as e:
        build_config(set_args=["disaggregation=5"])
    assert str(e.value) == "--set: disaggregation: expected a mapping of its keys (got 5)"


@pytest.mark.parametrize("call, message", [
    (lambda s: s.compare({}), "servesim.compare(variants={}): no variant given"),
    (lambda s: s.compare(["static"], workers=0), "servesim.compare(): workers: must be a whole number >= 1, got 0"),
    (lambda s: s.simulate(workload={"name": "chat", "num_requests": 20}, **{"workload.num_requests": 30}),
     "servesim.simulate(): workload.num_requests: given twice, 20 in workload= and 30 as a keyword"),
    (lambda s: s.simulate(goodput="ttft=500"), "servesim.simulate(): goodput: 'ttft=500': expected ttft:MS"),
    (lambda s: s.simulate(workload="chatt"), "servesim.simulate(): workload.name: unknown workload 'chatt'"),
    (lambda s: s.simulate(config="/no/such.yaml"), "servesim.simulate(): config file: file not found"),
    (lambda s: s.compare({"a": {"workload.request_rate": 4}}),
     "servesim.compare(variants=...): variant 'a' sets workload.request_rate"),
])
def test_python_api_errors_name_the_call_never_a_flag(call, message):
    import servesim

    with pytest.raises(ConfigError) as e:
        call(servesim)
    assert str(e.value).startswith(message) and "--" not in str(e.value).split(":")[0]
    assert "--goodput" not in str(e.value) and "--set" not in str(e.value)


def test_python_result_paths_are_config_errors(tmp_path):
    import servesim

    r = servesim.simulate(workload={"name": "chat", "num_requests": 5})
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match=r"^Result.save\('.*f'\): File exists"):
        r.save(tmp_path / "f")
