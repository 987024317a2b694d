"""``vllm bench serve``'s client semantics and result JSON (sim/engine/traffic.py,
sim/results/bench.py, sim/results/metrics.py): a request rate gated by a concurrency
cap, the keys ``--save-result`` writes with their meanings, selectable percentiles."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from sim.cli.main import app
from sim.config import build_config
from sim.errors import ConfigError
from sim.results.metrics import _peaks, weighted_percentile
from sim.runner import make_specs, run_simulation
from sim.engine.deployment import build_deployment

#: every key vllm bench serve --save-result writes for a generation benchmark without
#: --save-detailed (vllm/benchmarks/serve.py: main_async's result_json + benchmark()'s result,
#: default --percentile-metrics ttft,tpot,itl and --metric-percentiles 99)
VLLM_KEYS = [
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
    "total_output_tokens", "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    *[f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl") for s in ("mean", "median", "std", "p99")],
]
SMALL = ["workload.num_requests=120", "workload.input_len=300", "workload.output_len=60"]


def _run(sets, exact=False, **kw):
    cfg = build_config(set_args=sets + [f"exact_steps={str(exact).lower()}"])
    return run_simulation(cfg, **kw)


def _in_flight_peak(start, end) -> int:
    ev = sorted([(t, 1) for t in start] + [(t, -1) for t in end])
    cur = peak = 0
    for _, d in ev:
        cur += d
        peak = max(peak, cur)
    return peak


@pytest.mark.parametrize("exact", [False, True])
def test_rate_and_concurrency_cap_both_apply(exact):
    sets = SMALL + ["workload.request_rate=40", "workload.max_concurrency=4", "workload.arrival=poisson"]
    res = _run(sets, exact)
    spec = make_specs(build_deployment(build_config(set_args=sets)))
    r = res.result.requests
    sent, arrived = r["arrival_time_s"], spec.arrival_time_s[r["request_id"].astype(int)]
    assert np.all(sent >= arrived)  # never before its arrival
    assert np.all(np.diff(sent) >= 0)  # the slots go to arrivals in arrival order
    assert _in_flight_peak(sent, r["finish_time_s"]) == 4 == res.summary["max_concurrent_requests"]
    waited = sent > arrived
    assert waited.sum() > 50  # 40 req/s is far more than 4 slots serve: most requests wait for one
    # a request that waited was sent the moment an earlier one finished (its slot freed)
    assert np.isin(sent[waited], r["finish_time_s"]).all()
    # ... and one that did not wait found a free slot at its arrival
    for i in np.flatnonzero(~waited):
        assert ((sent < sent[i]) & (r["finish_time_s"] > sent[i])).sum() < 4
    assert res.summary["request_rate"] == 40.0 and res.summary["max_concurrency"] == 4


def test_gated_is_bit_identical_in_both_steppings():
    """The equivalence fuzzer's own comparison (every request column and ITL gap bit
    for bit; benchmarks/fuzz_equivalence.py also draws gated configs)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "fuzz_equivalence.py"
    spec = importlib.util.spec_from_file_location("fuzz_equivalence", path)
    fuzz = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fuzz_equivalence", fuzz)
    spec.loader.exec_module(fuzz)
    base = {"workload.num_requests": 120, "workload.input_len": 300, "workload.output_len": 60,
            "workload.request_rate": 25.0}
    for extra in ({"workload.max_concurrency": 3},
                  {"workload.max_concurrency": 16, "num_replicas": 2, "router": "least_outstanding_requests"},
                  {"workload.max_concurrency": 8, "engine": "sglang"},
                  {"workload.max_concurrency": 5, "frontend_token_s": 1e-4, "frontend_latency_s": 0.01}):
        res = fuzz.run_pair({**base, **extra})
        assert res["status"] == "ok", (extra, res.get("diffs"))


def test_a_cap_above_the_requests_is_the_open_loop():
    base = SMALL + ["workload.request_rate=10"]
    a, b = _run(base), _run(base + ["workload.max_concurrency=1000"])
    for k in a.result.requests:
        assert np.array_equal(a.result.requests[k], b.result.requests[k], equal_nan=True), k


def test_concurrency_without_rate_is_the_closed_loop():
    cfg = build_config(set_args=["workload.max_concurrency=4"])  # default workload: 6 req/s, dropped
    assert math.isinf(cfg.workload.request_rate)
    cfg = build_config(set_args=["workload.max_concurrency=4", "workload.request_rate=3"])
    assert cfg.workload.request_rate == 3


def test_client_think_time_needs_the_closed_loop():
    with pytest.raises(ConfigError, match=r"client_think_time_s = 0\.1 applies to closed-loop clients.*"
                                          r"drop workload\.request_rate"):
        build_config(set_args=["workload.max_concurrency=4", "workload.request_rate=3", "client_think_time_s=0.1"])


def _vllm_peaks(start, ttft, itls, latency):
    """vllm bench serve's calculate_metrics peak computation, literally."""
    t0 = min(start)
    dur = int(np.ceil(max(s + l for s, l in zip(start, latency)) - t0)) + 1
    tps = np.zeros(dur)
    for s, f, gaps in zip(start, ttft, itls):
        times = [s + f]
        cur = times[0]
        for g in gaps:
            cur += g
            times.append(cur)
        for t in times:
            b = int(t - t0)
            if 0 <= b < dur:
                tps[b] += 1
    ev = sorted([(s, 1) for s in start] + [(s + l, -1) for s, l in zip(start, latency)])
    cur = peak = 0
    for _, d in ev:
        cur += d
        peak = max(peak, cur)
    return float(tps.max()), peak


def test_peaks_equal_vllms_computation_for_evenly_spaced_tokens():
    rng = np.random.default_rng(3)
    n = 200
    start = np.sort(rng.uniform(0, 30, n))
    ttft = rng.uniform(0.01, 0.5, n)
    out = rng.integers(1, 300, n)
    gap = rng.choice([0.01, 0.02, 0.0375, 0.05], n)  # exact in binary: the token times agree bit for bit
    finish = start + ttft + gap * (out - 1)
    req = {"arrival_time_s": start, "first_token_time_s": start + ttft, "finish_time_s": finish,
           "num_output_tokens": out.astype(float)}
    got = _peaks(req, np.ones(n, bool))
    want = _vllm_peaks(start, ttft, [[g] * (k - 1) for g, k in zip(gap, out)], finish - start)
    assert got[1] == want[1]
    assert abs(got[0] - want[0]) <= 2  # bucket edges: float rounding of k * gap vs a running sum


def test_selected_percentiles():
    res = _run(SMALL + ["workload.request_rate=8"], percentiles=(95.0, 99.9), percentile_metrics=("ttft", "itl"))
    s, r = res.summary, res.result.requests
    ttft_ms = (r["first_token_time_s"] - r["arrival_time_s"]) * 1e3
    assert s["p95_ttft_ms"] == pytest.approx(np.percentile(ttft_ms, 95), rel=1e-12)
    assert s["p99.9_ttft_ms"] == pytest.approx(np.percentile(ttft_ms, 99.9), rel=1e-12)
    assert s["p99.9_itl_ms"] == pytest.approx(weighted_percentile(res.result.itl[0] * 1e3, res.result.itl[1], 99.9))
    assert "p95_tpot_ms" not in s and "p95_e2el_ms" not in s  # not selected
    assert "p99_tpot_ms" in s and "p90_e2el_ms" in s  # servesim's own keys stay


def test_results_are_otherwise_bit_identical_run_to_run():
    a, b = _run(SMALL + ["workload.request_rate=8"]), _run(SMALL + ["workload.request_rate=8"])
    drop = {"date", "wall_time_s", "sim_requests_per_wall_s"}
    assert {k: v for k, v in a.summary.items() if k not in drop} == {k: v for k, v in b.summary.items()
                                                                     if k not in drop}


def test_weight_precision_is_recorded():
    assert _run(SMALL + ["workload.request_rate=8"]).summary["weight_precision"] == "bf16"
    assert _run(SMALL + ["workload.request_rate=8", "quantization=fp8"]).summary["weight_precision"] == "fp8"


def test_save_result_writes_every_vllm_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["run", "--quiet", "--model", "llama-3.1-8b", "--max-num-seqs", "64",
                                 "--num-prompts", "200", "--request-rate", "4", "--max-concurrency", "16",
                                 "--save-result", "--metadata", "version=0.3.3", "tp=1", "--out", "o"])
    assert r.exit_code == 0, r.output
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1
    assert re.fullmatch(r"servesim-4\.0qps-concurrency16-Llama-3\.1-8B-Instruct-\d{8}-\d{6}\.json", files[0].name)
    d = json.loads(files[0].read_text())
    missing = [k for k in VLLM_KEYS if k not in d]
    assert not missing
    keys = list(d)
    assert keys[:7] == ["date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts"]
    assert keys[7:12] == ["version", "tp", "request_rate", "burstiness", "max_concurrency"]
    # then the benchmark's result in vllm bench serve's order (serve.py result), the metrics as it
    # prints them (TTFT, TPOT, ITL, E2EL), servesim's keys after
    assert keys[12:24] == VLLM_KEYS[10:22]
    assert keys[24:29] == [f"{s}_ttft_ms" for s in ("mean", "median", "std", "p90", "p99")]
    assert keys.index("mean_tpot_ms") < keys.index("mean_itl_ms") < keys.index("mean_e2el_ms") < keys.index(
        "num_rejected")
    assert (d["backend"], d["label"], d["num_prompts"]) == ("servesim", None, 200)
    assert d["model_id"] == d["tokenizer_id"] == "meta-llama/Llama-3.1-8B-Instruct"  # the preset's HF id
    assert (d["request_rate"], d["burstiness"], d["max_concurrency"]) == (4.0, 1.0, 16)
    assert d["completed"] + d["failed"] == 200 and d["request_goodput"] is None
    assert 1 <= d["max_concurrent_requests"] <= 16
    assert d["config"]["max_num_seqs"] == 64
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["date"] == d["date"]


def test_save_detailed_and_result_file_options(tmp_path):
    out = tmp_path / "res"
    r = CliRunner().invoke(app, ["run", "--quiet", "--num-prompts", "30", "--request-rate", "inf",
                                 "--save-result", "--save-detailed", "--result-dir", str(out),
                                 "--result-filename", "r.json", "--label", "mine", "--metric-percentiles", "99.9",
                                 "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    d = json.loads((out / "r.json").read_text())
    assert d["label"] == "mine" and d["request_rate"] == "inf"
    assert len(d["input_lens"]) == len(d["ttfts"]) == len(d["errors"]) == 30
    assert d["output_lens"] == [x for x in d["output_lens"] if x >= 0] and "p99.9_ttft_ms" in d


@pytest.mark.parametrize("args,needle", [
    (["--save-detailed"], "--save-detailed applies to the --save-result file; add --save-result"),
    (["--metadata", "novalue"], "--metadata 'novalue': expected KEY=VALUE"),
    (["--metric-percentiles", "99,abc"], "--metric-percentiles: 'abc' is not a number"),
    (["--metric-percentiles", "101"], "not a percentile in [0, 100]"),
    (["--percentile-metrics", "ttft,queue"], "--percentile-metrics: 'queue' is not one of ttft, tpot, itl, e2el"),
    (["--metadata", "backend=x"], "--metadata backend=x: backend is a key vllm bench serve writes itself"),
    # results are never replaced by metadata (they were, or the run failed with a traceback)
    (["--metadata", "mean_ttft_ms=5"], "--metadata mean_ttft_ms=5: mean_ttft_ms is a key the run writes itself"),
    (["--metadata", "completed=5"], "--metadata completed=5: completed is a key the run writes itself"),
    (["--metadata", "config=5"], "--metadata config=5: config is a key the run writes itself"),
    (["--metadata", "num_rejected=5"], "--metadata num_rejected=5: num_rejected is a key the run writes itself"),
    (["--label", "a/b", "--save-result"], "--label 'a/b': the label starts the --save-result file's name"),
])
def test_client_option_errors_are_one_line(tmp_path, args, needle):
    import subprocess
    import sys
    from pathlib import Path

    p = subprocess.run([sys.executable, "-m", "sim", "run", "--quiet", "--num-prompts", "5", "--out",
                        str(tmp_path / "o"), *args], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parent.parent)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_the_engine_release_simulated_is_recorded():
    """summary.json names the modelled release whose behaviour ran: the preset's newest
    without engine_version, the nearest modelled one with it, none without an engine."""
    assert _run(SMALL + ["workload.request_rate=8", "engine=trtllm"]).summary["engine_release"] == "1.2.0"
    assert _run(SMALL + ["workload.request_rate=8", "engine=vllm", "engine_version=0.13.5"]
                ).summary["engine_release"] == "0.12.0"
    assert _run(SMALL + ["workload.request_rate=8"]).summary["engine_release"] is None
