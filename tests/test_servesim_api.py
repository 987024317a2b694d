"""``import servesim``: the Python facade gives the command's results, bit for bit."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import servesim
from sim.config import build_config
from sim.runner import run_simulation

WL = {"name": "chat", "request_rate": 4, "num_requests": 200}


def test_simulate_equals_the_runner_on_the_same_config():
    r = servesim.simulate(model="llama-3.1-8b", hardware="h100_sxm", engine="vllm", workload=WL, max_num_seqs=64)
    ref = run_simulation(build_config(None, {"model": "llama-3.1-8b", "hardware": "h100_sxm", "engine": "vllm",
                                             "max_num_seqs": 64},
                                      ["workload.request_rate=4", "workload.num_requests=200"], "chat"))
    skip = {"wall_time_s", "sim_requests_per_wall_s", "date", "rtfx"}  # wall clock
    assert {k: v for k, v in r.summary.items() if k not in skip} == \
        {k: v for k, v in ref.summary.items() if k not in skip}
    assert r.config["max_num_seqs"] == 64 and r.config["engine"] == "vllm"
    assert r.config["workload"]["name"] == "chat" and r.config["workload"]["request_rate"] == 4
    assert isinstance(r.requests, pd.DataFrame) and isinstance(r.steps, pd.DataFrame)
    assert len(r.requests) == 200 and r.summary["completed"] == 200
    assert r.requests["num_output_tokens"].sum() == r.summary["total_output_tokens"]
    assert r.summary["num_preemptions"] == 0  # so every output token after the first is one decode token
    assert r.steps["num_decode_tokens"].sum() == r.requests["num_output_tokens"].sum() - 200
    assert r.requests["ttft_ms"].median() == pytest.approx(r.summary["median_ttft_ms"], rel=1e-12)


def test_workload_as_dotted_keys_and_name_give_the_same_run():
    a = servesim.simulate(workload="chat", **{"workload.request_rate": 4, "workload.num_requests": 100})
    b = servesim.simulate(workload={"name": "chat", "request_rate": 4, "num_requests": 100})
    assert a.summary["mean_ttft_ms"] == b.summary["mean_ttft_ms"]
    assert a.summary["config"]["workload"] == b.summary["config"]["workload"]


def test_save_writes_what_servesim_run_writes(tmp_path):
    r = servesim.simulate(workload={"name": "chat", "num_requests": 50})
    r.save(tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text())["completed"] == r.summary["completed"] == 50
    assert len(pd.read_csv(tmp_path / "requests.csv")) == 50
    assert len(pd.read_csv(tmp_path / "steps.csv")) == len(r.steps)


def test_bad_input_raises_config_error_naming_it():
    with pytest.raises(servesim.ConfigError, match="max_num_seqz"):
        servesim.simulate(max_num_seqz=3)
    with pytest.raises(servesim.ConfigError, match="h900"):
        servesim.simulate(hardware="h900")
    with pytest.raises(servesim.ConfigError, match="ttft:abc"):
        servesim.simulate(goodput="ttft:abc")
    # a number or a list of numbers: a ConfigError naming the argument (it was an AttributeError)
    with pytest.raises(servesim.ConfigError, match=r"servesim.simulate\(\): goodput: expected \{metric: ms\}"):
        servesim.simulate(goodput=5)


def test_goodput_takes_a_list_of_slo_strings_as_the_repeated_option():
    wl = {"name": "chat", "num_requests": 20}
    a = servesim.simulate(workload=wl, goodput=["ttft:500", "tpot:50"]).summary["request_goodput"]
    assert a == servesim.simulate(workload=wl, goodput={"ttft": 500, "tpot": 50}).summary["request_goodput"]


def test_compare_runs_the_variants_on_one_request_stream():
    c = servesim.compare(["static", "chunked"], workload={"name": "code", "num_requests": 120},
                         goodput={"ttft": 500, "tpot": 50})
    assert list(c.results) == ["static", "chunked"]
    assert list(c.table["variant"]) == ["static", "chunked"]
    arrivals = [c[n].requests["arrival_time_s"].to_numpy() for n in c.results]
    assert (arrivals[0] == arrivals[1]).all()  # the identical request stream
    assert c["chunked"].config["scheduler"] == "chunked" and c["static"].config["scheduler"] == "static"
    assert c.table.set_index("variant").loc["chunked", "p99_ttft_ms"] == c["chunked"].summary["p99_ttft_ms"]
    assert "request_goodput" in c.table.columns
    named = servesim.compare({"small": {"max_num_batched_tokens": 512}, "big": {"max_num_batched_tokens": 8192}},
                             workload={"name": "code", "num_requests": 60})
    assert named["small"].config["max_num_batched_tokens"] == 512
    with pytest.raises(servesim.ConfigError, match="bogus_key"):
        servesim.compare({"x": {"bogus_key": 1}})


def test_version_is_the_package_version():
    from importlib.metadata import PackageNotFoundError, version

    import sim

    assert servesim.__version__ == sim.__version__
    try:
        assert version("servesim") == servesim.__version__
    except PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
        pass


def test_the_notebook_example_runs():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "SERVESIM_EXAMPLE_REQUESTS": "100"}
    r = subprocess.run([sys.executable, str(root / "examples" / "python_api.py")], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith(f"servesim {servesim.__version__}\n")
    assert "median_ttft_ms" in out and "time-averaged KV usage" in out
    assert "budget-8k" in out and "budget-2k" in out


def test_api_errors_and_repr_name_what_the_user_gave(tmp_path):
    small = {"name": "chat", "num_requests": 10}
    with pytest.raises(servesim.ConfigError, match=r"^servesim.simulate\(\): 'max_running_requests' is sglang's "
                                                    r"name for max_num_seqs; give max_num_seqs here$"):
        servesim.simulate(workload=small, max_running_requests=64)
    with pytest.raises(servesim.ConfigError, match=r"variants=\[\]\): no variant given"):
        servesim.compare([], workload=small)
    r = servesim.simulate(workload=small)
    text = repr(r)
    assert text.startswith("Result(llama-3.1-8b on h100_sxm, 10 completed, 0 rejected, mean TTFT ") and len(text) < 200
    blocker = tmp_path / "f"
    blocker.write_text("")
    with pytest.raises(servesim.ConfigError, match=r"^Result.save_trace\("):
        r.save_trace(blocker / "t.json")
    c = servesim.compare(["chunked", "mixed"], workload=small)
    with pytest.raises(KeyError, match="no variant 'nope'; the variants: 'chunked', 'mixed'"):
        c["nope"]


def test_compare_names_its_argument_for_a_repeated_variant():
    with pytest.raises(servesim.ConfigError, match=r"^servesim.compare\(variants=...\): variant names must be unique; "
                                                   r"repeated: chunked"):
        servesim.compare(["chunked", "chunked"])
