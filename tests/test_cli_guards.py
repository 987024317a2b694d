"""Guards a fresh user ran into: an existing non-trace file is never overwritten by --trace,
compare fails when nothing was served, an engine preset does not hide a scheduler conflict,
plan counts the GPUs of attention-DP ranks."""

import json
import subprocess
import sys

import pytest

from sim.config import build_config
from sim.errors import ConfigError


def cli(*args):
    return subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True)


def test_trace_never_overwrites_a_file_that_is_not_a_trace(tmp_path):
    victim = tmp_path / "passwd"
    victim.write_text("root:x:0:0:root:/root:/bin/bash\n")
    r = cli("run", "--quiet", "--out", str(tmp_path / "r"), "--trace", str(victim), "--set", "workload.num_requests=5")
    assert r.returncode == 2 and "not a servesim trace; it is not overwritten" in r.stderr
    assert victim.read_text() == "root:x:0:0:root:/root:/bin/bash\n"
    t = tmp_path / "t.json"
    for _ in range(2):  # an earlier trace is replaced
        r = cli("run", "--quiet", "--out", str(tmp_path / "r"), "--trace", str(t), "--set", "workload.num_requests=5")
        assert r.returncode == 0, r.stderr
    assert "traceEvents" in json.loads(t.read_text())


def test_compare_fails_when_every_variant_rejected_every_request(tmp_path):
    r = cli("compare", "--quiet", "--out", str(tmp_path / "c"), "--set", "max_model_len=10",
            "--set", "workload.num_requests=5")
    assert r.returncode == 2 and "every request was rejected in every variant" in r.stderr


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_an_engine_preset_does_not_hide_a_scheduler_conflict(engine):
    with pytest.raises(ConfigError, match="scheduler 'static' conflicts with enable_chunked_prefill=true"):
        build_config(overrides={"engine": engine, "scheduler": "static", "enable_chunked_prefill": True})


def test_plan_counts_attention_dp_gpus():
    from sim.sweep.plan import Candidate, CandidatePlan, PlanSettings
    from sim.sweep.plan_report import plan_table

    c = Candidate("x", {"hardware": "h100_sxm", "tensor_parallel_size": 2, "data_parallel_size": 4})
    assert c.num_gpus == 8  # TP 2 x 4 attention-DP ranks
    plan = CandidatePlan(c, "infeasible", replicas=3)
    row = plan_table([plan], PlanSettings(slos=[])).iloc[0]
    assert row["num_gpus"] == 3 * 2 * 4


def test_kv_shows_each_pool_of_a_disaggregated_config_labelled():
    """Prefill TP 4 and decode TP 8 (llama-3.1-8b on h100_sxm): one table per pool, each named,
    each with its own TP; the decode pool's rank holds 8 KV heads / 8 = 1 head: 16,384 B per token
    (32 layers x 2 x 1 x 128 x 2 B), the prefill pool's 2 heads: 32,768 B."""
    r = cli("kv", "--set", "tensor_parallel_size=4", "--set", "disaggregation.decode.tensor_parallel_size=8")
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "KV cache of the prefill pool (1 worker(s)): llama-3.1-8b on h100_sxm, TP=4" in out
    assert "KV cache of the decode pool (1 worker(s)): llama-3.1-8b on h100_sxm, TP=8" in out
    pre, dec = out.split("KV cache of the decode pool")
    assert "kv_bytes_per_token │ 32,768" in pre and "kv_bytes_per_token │ 16,384" in dec


def test_nvlink_is_refused_between_different_gpus_and_beyond_one_domain():
    with pytest.raises(ConfigError, match=r"nvlink, but the pools run on different GPUs \(h100_sxm, mi300x\)"):
        from sim.engine.deployment import build_deployment
        build_deployment(build_config(overrides={"disaggregation": {
            "kv_transfer_link": "nvlink", "prefill": {"hardware": "h100_sxm"}, "decode": {"hardware": "mi300x"}}}))
    with pytest.raises(ConfigError, match=r"the 32 GPUs of the pools exceed one h100_sxm NVLink domain \(8 GPUs\)"):
        build_deployment(build_config(overrides={"tensor_parallel_size": 4, "disaggregation": {
            "kv_transfer_link": "nvlink", "num_prefill_workers": 4, "num_decode_workers": 4}}))
