"""Warnings outside the known ground (sim/results/warnings.py::ground_warnings):
a transferred hardware profile, an engine version not modelled, a predicted
throughput above the hardware's compute bound (hand-computed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from sim.config import SimConfig
from sim.hardware.profile import get_hardware
from sim.model_spec import get_model
from sim.results.warnings import compute_bound_tokens_per_s, ground_warnings, workload_warnings

ROOT = Path(__file__).resolve().parent.parent


def test_transferred_profile_warns_and_a_fitted_one_does_not():
    cfg = SimConfig(engine="vllm")
    model = get_model("llama-3.1-8b")
    h200 = get_hardware("h200_sxm")  # provenance: efficiency_source "transferred from h100_sxm"
    w = ground_warnings(cfg, h200, model, {"total_token_throughput": 1.0})
    assert len(w) == 1 and "h200_sxm" in w[0] and "transferred from h100_sxm" in w[0]
    assert ground_warnings(cfg, get_hardware("h100_sxm"), model, {"total_token_throughput": 1.0}) == []


def test_engine_version_not_modelled_warns():
    cfg = SimConfig(engine="vllm", engine_version="0.4.0")
    w = ground_warnings(cfg, get_hardware("h100_sxm"), get_model("llama-3.1-8b"), {})
    assert len(w) == 1 and "0.7.3" in w[0]


def test_compute_bound_hand_computed():
    model = SimpleNamespace(quantizable_params=lambda active_only=False: 1e9)
    hw = SimpleNamespace(peak_flops_per_s=SimpleNamespace(get={"bf16": 1e15, "fp8": 2e15}.get), name="gpu",
                         provenance={})
    cfg = SimpleNamespace(quantization=None, tensor_parallel_size=2, num_replicas=1, engine=None,
                          engine_version=None)
    # 2 GPUs x 1e15 FLOP/s / (2 x 1e9 FLOP per token) = 1e6 tokens/s
    assert compute_bound_tokens_per_s(cfg, hw, model) == 1e6
    cfg.quantization = "fp8"
    assert compute_bound_tokens_per_s(cfg, hw, model) == 2e6
    w = ground_warnings(cfg, hw, model, {"total_token_throughput": 2.5e6})
    assert len(w) == 1 and "exceeds the compute bound" in w[0]
    assert ground_warnings(cfg, hw, model, {"total_token_throughput": 1.9e6}) == []


def test_run_records_and_prints_the_warnings(tmp_path):
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "sim", "run", "--hardware", "h200_sxm", "--quiet", "--out", str(out),
                        "--set", "engine=vllm", "--set", "workload.num_requests=20"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    s = json.loads((out / "summary.json").read_text())
    assert any("transferred from h100_sxm" in w for w in s["warnings"])
    assert "transferred from h100_sxm" in p.stderr
    assert any("transferred" in w for w in workload_warnings(s))
    # the cross-validated 80 % interval beside the point value (sim/results/intervals.py)
    assert s["mean_ttft_ms_lo"] <= s["mean_ttft_ms"] <= s["mean_ttft_ms_hi"]
    assert "80 % interval" in p.stdout
