"""Bad input at the command line: a message and a non-zero status, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sim.compare import parse_variant
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
