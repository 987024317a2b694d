"""Bad input at the command line: a message and a non-zero status, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sim.compare.variants import parse_variant
from sim.errors import ConfigError


def cli(*args):
    return subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, expect", [
    (("run", "--bogus"), "No such option"),
    (("nosuchcmd",), "No such command"),
    (("run", "--seed", "abc"), "Invalid value for '--seed'"),
])
def test_usage_errors_are_messages(args, expect):
    r = cli(*args)
    assert r.returncode == 2
    assert expect in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("sets, expect", [
    (["workload.arrival=trace"], "arrival: trace needs trace: PATH"),
    (["workload.output_len=1"], "needs both input_len and output_len (lengths given without a workload name "
                                "replace the built-in default; to change one key of it, name it: --workload default"),
])
def test_partial_workloads_say_what_is_missing(sets, expect):
    from sim.config import build_config

    with pytest.raises(ConfigError) as e:
        build_config(None, {}, sets, None)
    assert expect in str(e.value)
    cfg = build_config(None, {}, ["workload.output_len=1"], "default")  # naming it keeps the other keys
    assert cfg.workload.output_len.value == 1 and cfg.workload.input_len is not None


def test_out_that_is_a_file_is_an_error(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    r = cli("run", "--quiet", "--out", str(f), "--set", "workload.num_requests=3")
    assert r.returncode == 2 and "error:" in r.stderr and str(f) in r.stderr and "Traceback" not in r.stderr


def test_variant_names_must_be_safe_folder_names():
    with pytest.raises(ConfigError, match="variant name '../evil'"):
        parse_variant("../evil scheduler=chunked")
    with pytest.raises(ConfigError, match="variant name 'a/b'"):
        parse_variant("a/b scheduler=chunked")


def test_variants_cannot_change_the_shared_request_stream():
    with pytest.raises(ConfigError, match="workload.request_rate.*identical request stream"):
        parse_variant("fast workload.request_rate=100")


def test_request_rate_with_a_timestamped_trace_is_an_error(tmp_path):
    from sim.workload import WorkloadConfig, generate_requests

    p = tmp_path / "t.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:17:03.9800000,100,10\n2023-11-16 18:17:04.9800000,200,20\n")
    cfg = WorkloadConfig.from_dict({"trace": str(p), "request_rate": 10})
    with pytest.raises(ConfigError, match="replayed at its own timestamps.*speedup"):
        generate_requests(cfg, seed=0)
    specs = generate_requests(WorkloadConfig.from_dict({"trace": str(p), "speedup": 2}), seed=0)
    assert specs.arrival_time_s.tolist() == [0.0, 0.5]


def test_config_values_vllm_would_reject(tmp_path):
    from sim.config import build_config
    from sim.engine.deployment import build_deployment

    with pytest.raises(ConfigError, match="max_num_seqs: expected a number or name, got True"):
        build_config(set_args=["max_num_seqs=true"])
    with pytest.raises(ConfigError, match=r"disaggregation: expected a mapping of keys \(e.g. \{\} for every default\)"):
        build_config(set_args=["disaggregation=true"])  # (it said "a number or name")
    with pytest.raises(ConfigError, match="block_size must be a power of two .* got 7"):
        build_config(set_args=["block_size=7"])
    with pytest.raises(ConfigError, match=r"max_num_batched_tokens \(512\) is smaller than max_model_len"):
        build_deployment(build_config(overrides={"scheduler": "continuous"},
                                      set_args=["max_num_batched_tokens=512"]))
    # static batching too: an explicit budget is never silently raised
    with pytest.raises(ConfigError, match=r"\(512\) is smaller than max_model_len .* scheduler 'static'"):
        build_deployment(build_config(overrides={"scheduler": "static"}, set_args=["max_num_batched_tokens=512"]))


def test_workload_given_by_name_in_a_config_file(tmp_path):
    from sim.config import build_config

    p = tmp_path / "c.yaml"
    p.write_text("workload: chat\nworkload.num_requests: 50\n")
    cfg = build_config(p)
    assert cfg.workload.num_requests == 50 and cfg.workload.input_len is not None
    with pytest.raises(ConfigError, match="workload: expected a built-in workload name"):
        build_config(set_args=["workload=5"])


@pytest.mark.parametrize("args, what", [
    (("run", "{d}"), "config file"),
    (("validate", "{d}"), "validate: CSV"),
    (("run", "--workload", "{d}"), "workload file"),
    (("compare", "--variants", "{d}"), "--variants"),
    (("run", "--set", "workload.trace={d}"), "--set: workload.trace"),
])
def test_a_folder_where_a_file_belongs_is_named_as_such(tmp_path, args, what):
    """It used to say "file not found" for a folder that is there."""
    r = cli(*(a.format(d=tmp_path) for a in args), "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"error: {what}: {tmp_path} is a folder; give a file" in r.stderr


def _azure_trace(tmp_path, middle_row: str):
    """A three-row Azure trace whose second row is ``middle_row``."""
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n"
                     f"{middle_row}\n2023-11-16 18:15:51.00,396,9\n")
    return trace


def test_run_warns_about_skipped_trace_rows(tmp_path):
    trace = _azure_trace(tmp_path, "2023-11-16 18:15:50.99,-5,109")
    r = cli("run", "--quiet", "--out", str(tmp_path / "o"), "--set", f"workload.trace={trace}",
            "--set", "workload.skip_bad_rows=true")
    assert r.returncode == 0, r.stderr
    assert "warning: 1 malformed trace row(s) skipped (workload.skip_bad_rows)" in r.stderr
    assert "2 of 3 rows" in r.stderr


@pytest.mark.parametrize("command", [("run",), ("compare", "--schedulers", "chunked")])
def test_rows_out_of_time_order_are_warned_about(tmp_path, command):
    trace = _azure_trace(tmp_path, "2020-01-01 00:00:00,500,10")  # years before the row above it
    r = cli(*command, "--quiet", "--out", str(tmp_path / "o"), "--set", f"workload.trace={trace}")
    assert r.returncode == 0, r.stderr
    warning = "1 trace row(s) are timestamped before the row above them"
    assert f"warning: {warning}" in r.stderr and "check its time column" in r.stderr
    if command[0] == "compare":  # and in the report, which otherwise ranks variants on 0.00 req/s
        assert f"**Warning**: {warning}" in (tmp_path / "o" / "report.md").read_text()


def test_plan_warns_about_skipped_trace_rows(tmp_path):
    """As run and compare do: on screen and in plan.md."""
    trace = _azure_trace(tmp_path, "2023-11-16 18:15:50.99,-5,109")
    out = tmp_path / "o"
    r = cli("plan", "--quiet", "--workers", "1", "--out", str(out), "--slo", "p99_ttft_ms=1000",
            "--set", f"workload.trace={trace}", "--set", "workload.skip_bad_rows=true",
            "--set", "workload.arrival=poisson", "--set", "workload.request_rate=1")
    # two requests cannot show a sustainable rate: no candidate, exit status 1 (plan --help); warned all the same
    assert r.returncode == 1 and "No candidate serves the load within the SLOs." in r.stdout, r.stderr
    warning = f"1 malformed trace row(s) skipped (workload.skip_bad_rows): trace {trace} (azure): 2 of 3 rows"
    assert f"warning: {warning}" in r.stderr
    assert f"**Warning**: {warning}" in (out / "plan.md").read_text()


@pytest.mark.parametrize("sets, expect", [
    # --set parses 'inf' as a number; for the arrival process the name is meant
    (["workload.arrival=inf", "workload.num_requests=5"], None),
    (["workload.num_warmup_requests=100000000"], "less than or equal to 50000000"),
    (["workload.num_requests=49999999", "workload.num_warmup_requests=2"],
     "num_requests (49,999,999) + num_warmup_requests (2) is over the 50,000,000 a run takes"),
    # 50 requests at 1e-300 req/s: send times ~1e301 s, where a millisecond step is lost in rounding
    (["workload.num_requests=50", "workload.request_rate=1e-300"], "where float64 seconds are too coarse"),
    (["workload.num_requests=50", "workload.request_rate=1e-6"], None),  # 5e7 s: fine
    # lengths beyond int64 sampling (they raised tracebacks) and absurd spreads
    (["workload.input_len={dist: uniform, low: 1, high: 100000000000000000000}"], "high <= 100,000,000"),
    (["workload.input_len={dist: uniform, mean: 1e300, range_ratio: 0.5}"], "must be <= 100,000,000 tokens"),
    (["workload.input_len={dist: lognormal, mean: 1000, sigma: 1e300}"], "less than or equal to 10"),
    (["workload.output_len={dist: lognormal, mean: 1e300, sigma: 0.1}"], "less than or equal to 100000000"),
    (["workload.trace=t.csv", "workload.speedup=1e-300"], "greater than or equal to 0.001"),
    (["workload.trace=t.csv", "workload.jitter_s=1e300"], "less than or equal to 3600"),
])
def test_workload_limits(sets, expect):
    from sim.config import build_config

    named = None if any(s.startswith("workload.trace=") for s in sets) else "default"
    if expect is None:
        build_config(None, {}, sets, named)
        return
    with pytest.raises(ConfigError) as e:
        build_config(None, {}, sets, named)
    assert expect in str(e.value)


def test_trace_with_a_byte_order_mark_and_crlf(tmp_path):
    """Excel's CSV export: a UTF-8 byte-order mark before the header, CRLF line ends."""
    trace = tmp_path / "excel.csv"
    trace.write_bytes(b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                      b"2023-11-16 18:15:46.68,374,44\r\n2023-11-16 18:15:51.00,396,9\r\n")
    r = cli("run", "--quiet", "--out", str(tmp_path / "o"), "--set", f"workload.trace={trace}")
    assert r.returncode == 0, r.stderr
    import json

    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert "(azure): 2 of 2 rows" in summary["workload_source"] and summary["completed"] == 2


def test_an_option_and_a_set_of_the_same_key_must_agree():
    from sim.config import build_config

    with pytest.raises(ConfigError, match="--set scheduler=mixed conflicts with --scheduler continuous"):
        build_config(None, {"scheduler": "continuous"}, ["scheduler=mixed"])
    assert build_config(None, {"seed": 3}, ["seed=3"]).seed == 3  # the same value twice is fine
    with pytest.raises(ConfigError, match="--set workload.name=code conflicts with --workload chat"):
        build_config(None, {}, ["workload.name=code"], "chat")


def test_a_lengths_only_trace_sent_all_at_once_is_warned_about():
    from sim.results.warnings import workload_warnings

    s = {"workload_source": "trace t.csv (lengths): 20 of 20 rows, arrivals inf",
         "config": {"workload": {"trace": "t.csv", "arrival": None, "request_rate": None, "max_concurrency": None}}}
    assert any("every request was sent at t = 0" in w for w in workload_warnings(s))
    s["config"]["workload"]["request_rate"] = 5.0
    s["workload_source"] = "trace t.csv (lengths): 20 of 20 rows, arrivals poisson"
    assert workload_warnings(s) == []


def test_a_timestamped_trace_under_a_closed_loop_is_warned_about(tmp_path):
    # max_concurrency without a request rate is vllm bench serve's closed loop: the trace's
    # timestamps were dropped without a word
    from sim.config import build_config
    from sim.results.warnings import workload_warnings
    from sim.runner import run_simulation

    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     + "".join(f"2023-11-16 18:15:{10 + i:02d}.0,{100 + i},{20 + i}\n" for i in range(6)))
    keys = {"workload.trace": str(trace), "workload.trace_format": "azure"}
    s = run_simulation(build_config(overrides={**keys, "workload.max_concurrency": 2})).summary
    assert any("the trace's timestamps are not used: with workload.max_concurrency 2" in w
               for w in workload_warnings(s))
    s = run_simulation(build_config(overrides=keys)).summary  # replayed at its timestamps
    assert not any("timestamps are not used" in w for w in workload_warnings(s))


@pytest.mark.parametrize("args, expect", [
    (("kv", "--length", "0"), "error: --length: must be a number of tokens >= 1, got 0"),
    (("plan", "--slo", "p99_ttft_ms=1000", "--rel-tol", "0"), "error: --rel-tol: must be a fraction in (0, 1), got 0.0"),
    (("run", "--schedule-policy", "lpm"), "error: --schedule-policy: 'lpm' is not modelled by servesim"),
])
def test_an_option_error_names_the_option_the_user_gave(args, expect, tmp_path):
    r = cli(*args, "--out", str(tmp_path / "o")) if args[0] != "kv" else cli(*args)
    assert r.returncode == 2 and r.stderr.startswith(expect) and len(r.stderr.splitlines()) == 1, r.stderr
