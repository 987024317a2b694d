"""Messages for bad input that used to mislead, be silent, or miss the file: each
names the file (or option), the key and the value, and says what to change."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sim.config import build_config
from sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


def cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=env)


def one_line_error(r) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_sglang_preset_leaving_no_memory_says_why_and_what_to_change():
    """The preset derived gpu_memory_utilization -0.082 itself; the message used to
    blame that value as if the user had given it."""
    msg = one_line_error(cli("kv", "--set", "engine=sglang", "--hardware", "l40s",
                             "--set", "max_num_batched_tokens=32768"))
    assert "invalid value" not in msg
    for part in ("engine sglang on l40s", "mem_fraction_static", "max_num_batched_tokens 32,768",
                 "no memory for weights and KV cache (fraction -0.082)", "lower max_num_batched_tokens",
                 "SGLang's default on this GPU is", "set gpu_memory_utilization yourself"):
        assert part in msg, msg


# ------------------------------------------------------------------ paths in a config file
def _config_dir(tmp_path: Path) -> Path:
    d = tmp_path / "cfg"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "m.json").write_text((DATA / "test_model.json").read_text())
    (d / "sub" / "g.yaml").write_text((DATA / "test_gpu.yaml").read_text())
    return d


def test_model_and_hardware_paths_in_a_config_file_are_relative_to_it(tmp_path, monkeypatch):
    d = _config_dir(tmp_path)
    (d / "c.yaml").write_text("model: sub/m.json\nhardware: sub/g.yaml\n")
    monkeypatch.chdir(tmp_path)  # not the file's folder
    cfg = build_config(d / "c.yaml")
    assert cfg.model == str(d / "sub" / "m.json") and cfg.hardware == str(d / "sub" / "g.yaml")
    (d / "names.yaml").write_text("model: llama-3.1-8b\nhardware: h100_sxm\n")
    cfg = build_config(d / "names.yaml")  # preset names stay names
    assert (cfg.model, cfg.hardware) == ("llama-3.1-8b", "h100_sxm")
    (d / "hf.yaml").write_text("model: meta-llama/Llama-3.1-8B-Instruct\n")
    assert build_config(d / "hf.yaml").model == "meta-llama/Llama-3.1-8B-Instruct"
    # --set / --model stay relative to the working directory
    assert build_config(None, {"model": "cfg/sub/m.json"}).model == "cfg/sub/m.json"


def test_a_path_only_found_from_the_working_directory_is_an_error(tmp_path, monkeypatch):
    d = _config_dir(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "c.yaml").write_text("model: cfg/sub/m.json\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"other/c.yaml: model: 'cfg/sub/m.json' is not in the file's folder"
                                          r".*relative to the file"):
        build_config(other / "c.yaml")
    assert d.is_dir()


def test_model_path_in_a_sweep_file_is_relative_to_it(tmp_path, monkeypatch):
    from sim.sweep.spec import expand_points, load_sweep, point_config

    d = _config_dir(tmp_path)
    (d / "s.yaml").write_text("base:\n  model: sub/m.json\naxes:\n  hardware: [sub/g.yaml, h100_sxm]\n")
    monkeypatch.chdir(tmp_path)
    spec = load_sweep(d / "s.yaml")
    cfgs = [point_config(spec, p) for p in expand_points(spec)]
    assert {c.model for c in cfgs} == {str(d / "sub" / "m.json")}
    assert [c.hardware for c in cfgs] == [str(d / "sub" / "g.yaml"), "h100_sxm"]


# ------------------------------------------------------------------ --set values
def test_empty_set_value_is_an_error():
    with pytest.raises(ConfigError, match=r"--set 'max_num_seqs=': no value after '='"):
        build_config(set_args=["max_num_seqs="])
    msg = one_line_error(cli("kv", "--set", "max_num_seqs="))
    assert "max_num_seqs" in msg


@pytest.mark.parametrize("key", ["num_requests", "max_tokens", "request_rate", "max_concurrency",
                                 "num_warmup_requests", "seed", "duration_s"])
def test_bools_are_not_workload_numbers(key):
    with pytest.raises(ConfigError, match=rf"--set: workload\.{key}: expected a number, got True"):
        build_config(set_args=[f"workload.{key}=true"])


def test_bool_in_a_workload_yaml_is_not_a_number(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("workload:\n  num_requests: yes\n")
    with pytest.raises(ConfigError, match=r"c.yaml: workload.num_requests: expected a number, got True"):
        build_config(p)


@pytest.mark.parametrize("key", ["client_think_time_s", "client_start_spread_s"])
def test_client_keys_in_open_loop_are_errors(key):
    with pytest.raises(ConfigError, match=rf"{key} = 2.0 applies to closed-loop clients "
                                          r"\(workload.max_concurrency without a request rate\).*no effect"):
        build_config(set_args=[f"{key}=2"])
    cfg = build_config(set_args=[f"{key}=2", "workload.max_concurrency=4"])
    assert getattr(cfg, key) == 2.0
    assert getattr(build_config(set_args=[f"{key}=0"]), key) == 0.0  # 0 = the default: no effect claimed


def test_no_engine_preset_sets_the_client_keys():
    for engine in ("vllm", "sglang", "trtllm"):
        cfg = build_config(set_args=[f"engine={engine}"])
        assert cfg.client_think_time_s == 0 and cfg.client_start_spread_s == 0


def test_union_key_error_is_one_line():
    with pytest.raises(ConfigError) as e:
        build_config(set_args=["workload.max_tokens=foo"])
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("--set: workload.max_tokens: ") and "'foo'" in msg
    assert "'output_len'" in msg and ".int" not in msg


def test_unknown_workload_name_in_a_yaml_names_the_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("workload:\n  name: chatt\n")
    with pytest.raises(ConfigError, match=rf"^{p}: workload.name: unknown workload 'chatt'"):
        build_config(p)
    with pytest.raises(ConfigError, match=r"^--set: workload.name: unknown workload 'chatt'"):
        build_config(set_args=["workload=chatt"])


@pytest.mark.parametrize("value, shown", [(3, "3"), (True, "True"), ([1], "[1]"), (2.5, "2.5")])
def test_workload_name_that_is_not_text_names_the_file(tmp_path, value, shown):
    """A non-string workload.name raised AttributeError ('int' object has no attribute
    'endswith'): a traceback (found by benchmarks/fuzz_inputs.py)."""
    import yaml

    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"workload": {"name": value}}))
    with pytest.raises(ConfigError, match=rf"^{p}: workload.name: expected the name of a built-in workload or "
                                          rf"a path to a workload \.yaml, got {re.escape(shown)}"):
        build_config(p)
    with pytest.raises(ConfigError, match=r"^--set: workload.name: expected the name"):
        build_config(set_args=[f"workload.name={shown}"])


def test_null_restores_a_workload_keys_default():
    assert build_config(workload="code").workload.burstiness != 1.0
    cfg = build_config(set_args=["workload.burstiness=null"], workload="code")
    assert cfg.workload.burstiness == 1.0  # Poisson: the key's default


# ------------------------------------------------------------------ other commands
def test_validate_csv_with_a_repeated_column_is_refused(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("id,backend,model_path,system,isl,osl,concurrency,tp_size,silicon_ttft_ms,silicon_tpot_ms,isl\n"
                 "a,vllm,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,1024,128,4,1,50,10,2048\n")
    msg = one_line_error(cli("validate", str(p), "--out", str(tmp_path / "o")))
    assert f"{p}: column(s) 'isl' appear more than once" in msg
    assert not (tmp_path / "o").exists()


def test_variant_file_naming_a_workload_says_so(tmp_path):
    from sim.compare.variants import load_variants_file

    p = tmp_path / "v.yaml"
    p.write_text("a:\n  workload: chat\n")
    with pytest.raises(ConfigError, match=r"variant 'a' sets workload 'chat'; every variant replays"):
        load_variants_file(p)
    p.write_text("a:\n  workload: {request_rate: 3}\n")
    with pytest.raises(ConfigError, match=r"variant 'a' sets workload.request_rate; every variant"):
        load_variants_file(p)


def test_calibrate_from_a_corrupt_table_names_the_file(tmp_path):
    d = tmp_path / "k"
    d.mkdir()
    bad = d / "vllm-0.24.0_gemm.csv.gz"
    bad.write_text("garbage, not gzip\n")
    msg = one_line_error(cli("calibrate", "--from-table", str(d), "--base-profile", "h100_sxm",
                             "--out", str(tmp_path / "p.yaml")))
    assert f"{bad}: cannot read table: Not a gzipped file" in msg
    # a damaged gzip body (zlib.error, not an OSError) too
    bad.write_bytes(gzip.compress(b"m,n,k,latency\n" * 1000)[:-30] + b"\0" * 30)
    from calibration.tables import read_csv_table

    with pytest.raises(ConfigError, match=rf"{bad}: cannot read table"):
        read_csv_table(bad)


def test_calibrate_refuses_to_overwrite_a_file_that_is_not_a_profile(tmp_path):
    import shutil

    src = Path(__file__).resolve().parents[2] / "shared" / "kernels" / "h100_sxm" / "vllm-0.24.0_gemm.csv.gz"
    if not src.is_file():
        pytest.skip("../shared/kernels is absent")
    d = tmp_path / "k"
    d.mkdir()
    shutil.copy(src, d)
    out = tmp_path / "p.yaml"
    out.write_text("- a list, not a profile\n")
    msg = one_line_error(cli("calibrate", "--from-table", str(d), "--base-profile", "h100_sxm", "--out", str(out)))
    assert f"--out {out}: the file there is not a hardware profile YAML (list)" in msg
    assert out.read_text() == "- a list, not a profile\n"


@pytest.mark.parametrize("value", ["yes", "true", 1, "no"])
def test_a_string_or_number_is_not_a_boolean(value):
    """``enable_prefix_caching: "yes"`` (quoted in YAML) was silently true."""
    with pytest.raises(ConfigError, match=r"enable_prefix_caching: expected true or false \(yes/no and on/off"):
        build_config(overrides={"enable_prefix_caching": value})


def test_a_missing_config_json_says_no_such_file(tmp_path):
    from sim.model_spec import get_model

    with pytest.raises(ConfigError, match=r"model: .*missing\.json: no such file"):
        get_model(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("col, value", [("k", "inf"), ("m", "-inf"), ("n", "1e400"), ("latency", "inf")])
def test_calibrate_table_with_an_infinite_value_names_file_column_row(tmp_path, col, value):
    """An infinite size or latency passed the table checks (only NaN and negatives were
    refused) and the fit raised 'ValueError: Residuals are not finite' with a traceback
    (found by benchmarks/fuzz_inputs.py)."""
    d = tmp_path / "k"
    d.mkdir()
    header = "version,device,kernel_source,gemm_dtype,m,n,k,latency"
    rows = ["0.24.0,H100,torch,bfloat16,1,4096,4096,0.02", "0.24.0,H100,torch,bfloat16,16,4096,4096,0.021",
            "0.24.0,H100,torch,bfloat16,256,4096,4096,0.05"]
    cells = rows[1].split(",")
    cells[header.split(",").index(col)] = value
    rows[1] = ",".join(cells)
    table = d / "vllm-0.24.0_gemm.csv"
    table.write_text(header + "\n" + "\n".join(rows) + "\n")
    out = tmp_path / "p.yaml"
    msg = one_line_error(cli("calibrate", "--from-table", str(d), "--base-profile", "h100_sxm", "--out", str(out),
                             "--quiet"))
    assert f"{table}: column {col}, line 3" in msg and ("inf" if value == "1e400" else value) in msg, msg
    assert not out.exists()


def test_workload_file_with_a_key_given_twice_is_refused(tmp_path):
    """Config, sweep and profile files refuse a key given twice; a workload file
    (--workload PATH) kept the last one silently (found by benchmarks/fuzz_inputs.py)."""
    p = tmp_path / "w.yaml"
    p.write_text("num_requests: 20\nnum_requests: 30\n")
    with pytest.raises(ConfigError, match=rf"^{p}:2: malformed YAML: key 'num_requests' is given twice "
                                          r"\(first on line 1\)"):
        build_config(workload=str(p))
    msg = one_line_error(cli("run", "--workload", str(p), "--quiet", "--out", str(tmp_path / "o")))
    assert f"{p}:2:" in msg and "num_requests" in msg
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
    # YAML 1.2 numbers as in config files
    p.write_text("num_requests: 20\nrequest_rate: 1e1\n")
    assert build_config(workload=str(p)).workload.request_rate == 10.0


def test_an_empty_scheduler_in_a_list_is_an_error():
    from sim.compare.variants import variants_from_args

    with pytest.raises(ConfigError, match=r"--schedulers 'chunked,,static': an empty entry"):
        variants_from_args("chunked,,static", None, None)


@pytest.mark.parametrize("key, value", [("long_prefill_token_threshold", 1e30), ("max_num_seqs", 2 ** 50)])
def test_integers_beyond_any_real_setting_are_refused(key, value):
    with pytest.raises(ConfigError, match=rf"{key}: .* is beyond any real setting"):
        build_config(overrides={key: value})
    build_config(overrides={"seed": 2 ** 60})  # seeds may be large


def test_a_bool_is_not_a_number_in_a_hardware_profile(tmp_path):
    import yaml

    from sim.hardware.profile import load_hardware
    from sim.paths import hardware_profiles_dir

    prof = yaml.safe_load((hardware_profiles_dir() / "h100_sxm.yaml").read_text())
    prof["efficiency"]["step_overhead_s"] = True
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(prof))
    with pytest.raises(ConfigError, match=r"step_overhead_s: expected a number, got True"):
        load_hardware(p)


def test_layer_types_must_have_one_entry_per_layer(tmp_path):
    import json

    from sim.model_spec import get_model

    cfg = json.loads((Path(__file__).parent / "data" / "test_model.json").read_text())
    cfg["layer_types"] = ["full_attention"]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"layer_types: 1 entries for num_hidden_layers="):
        get_model(str(p))
