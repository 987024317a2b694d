"""Warnings outside the known ground (sim/results/warnings.py::ground_warnings):
a transferred hardware profile, an engine version not modelled, a predicted
throughput above the hardware's compute bound (hand-computed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

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
                         provenance={}, transferred_from=None)
    cfg = SimpleNamespace(quantization=None, tensor_parallel_size=2, num_replicas=1, engine=None,
                          engine_version=None)
    # 2 GPUs x 1e15 FLOP/s / (2 x 1e9 FLOP per token) = 1e6 tokens/s
    assert compute_bound_tokens_per_s(cfg, hw, model) == 1e6
    cfg.quantization = "fp8"
    assert compute_bound_tokens_per_s(cfg, hw, model) == 2e6
    w = ground_warnings(cfg, hw, model, {"total_token_throughput": 2.5e6})
    assert len(w) == 1 and "exceeds the compute bound" in w[0]
    assert ground_warnings(cfg, hw, model, {"total_token_throughput": 1.9e6}) == []
    # every GPU of the deployment counts: DP 4 ranks of TP 2 = 8 GPUs (summary's num_gpus), 8e6 tokens/s
    cfg.data_parallel_size = 4
    assert compute_bound_tokens_per_s(cfg, hw, model) == 8e6
    assert ground_warnings(cfg, hw, model, {"total_token_throughput": 2.5e6, "num_gpus": 8}) == []
    w = ground_warnings(cfg, hw, model, {"total_token_throughput": 9e6, "num_gpus": 8})
    assert "compute bound of 8 x gpu (8,000,000 tokens/s" in w[0]
    # the checkpoint's format sets the peak where no quantization key is given
    cfg.data_parallel_size, cfg.quantization, model.quantization = 1, None, "fp8_block"
    assert compute_bound_tokens_per_s(cfg, hw, model) == 2e6


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


# ---------------------------------------------------------------- shapes outside the calibrated grid
def _grid_hw(**grid):
    from sim.hardware.efficiency import CalibratedGrid

    return SimpleNamespace(name="gpu", efficiency=SimpleNamespace(calibrated_grid=CalibratedGrid(**grid)))


def _requests(prompts, outputs, rejected=()):
    status = np.array([1 if i in rejected else 0 for i in range(len(prompts))])
    return {"num_prompt_tokens": np.array(prompts), "num_output_tokens": np.array(outputs), "status": status}


def test_grid_warnings_name_each_shape_beyond_the_grid():
    from sim.results.warnings import grid_warnings
    from sim.scheduler.types import SchedulerLimits

    hw = _grid_hw(gemm_max_tokens=8192, context_attention_max_tokens=16384,
                  generation_attention_max_context=20000, generation_attention_max_batch=4, moe_max_tokens=10000)
    limits = SchedulerLimits(max_num_seqs=8, max_num_batched_tokens=4096, max_model_len=32768)
    # longest prompt 18,000 > 16,384; longest sequence 18,000 + 3,000 = 21,000 > 20,000;
    # 5 sequences can decode together (min(max_num_seqs 8, 5 requests)) > 4;
    # chunked: a step batches at most 4,096 tokens <= 8,192 (no GEMM warning); the experts see
    # 4,096 x 4 attention-DP ranks = 16,384 > 10,000
    req = _requests([18000, 100, 100, 100, 100, 90000], [3000, 10, 10, 10, 10, 10], rejected={5})
    w = grid_warnings(hw, limits, req, chunked_prefill=True, attention_dp=4, is_moe=True)
    assert len(w) == 4, w
    assert "prompts of up to 18,000 tokens, beyond the 16,384 tokens" in w[0] and "context attention" in w[0]
    assert "sequences of up to 21,000 tokens, beyond the 20,000 tokens of context" in w[1]
    assert "up to 5 sequences decode together, beyond the 4 sequences" in w[2]
    assert "MoE layers take up to 16,384 tokens a step, beyond the 10,000 tokens" in w[3]
    # without chunked prefill one whole 18,000-token prompt is one step: beyond the GEMM grid
    w = grid_warnings(hw, limits, req, chunked_prefill=False)
    assert any("steps batch up to 18,000 tokens, beyond the 8,192 tokens its GEMM kernels" in x for x in w)
    # with the run's steps: what they batched, not what the limits allow. A merged row of 10
    # decode steps holding 50 tokens is 5 a step; the largest step 7,000 tokens (an 18,000-token
    # prompt chunked); 3 sequences at most: no GEMM or batch warning, the prompt ones stay
    steps = {"num_batched_tokens": np.array([7000, 50, 4000]), "num_steps": np.array([1, 10, 1]),
             "num_running_seqs": np.array([2, 3, 3])}
    w = grid_warnings(hw, limits, req, chunked_prefill=False, steps=steps)
    assert not any("steps batch" in x or "decode together" in x for x in w) and len(w) == 2, w
    steps["num_batched_tokens"] = np.array([9001, 50, 4000])
    steps["num_running_seqs"] = np.array([2, 6, 3])
    w = grid_warnings(hw, limits, req, chunked_prefill=False, steps=steps)
    assert any("steps batch up to 9,001 tokens, beyond the 8,192" in x for x in w)
    assert any("up to 6 sequences decode together, beyond the 4 sequences" in x for x in w)
    # inside the grid: nothing; a profile without a grid: nothing
    small = _requests([1000, 1000], [100, 100])
    assert grid_warnings(hw, limits, small, chunked_prefill=True) == []
    bare = SimpleNamespace(name="gpu", efficiency=SimpleNamespace(calibrated_grid=None))
    assert grid_warnings(bare, limits, req, chunked_prefill=False) == []


def test_table_grid_is_the_largest_shapes_of_the_fitted_rows():
    import pandas as pd

    from calibration.datasets import FamilyRows, table_grid

    gemm = pd.DataFrame({"m": [1, 4096, 16], "n": [1, 1, 1], "k": [1, 1, 1], "latency_s": [1e-6] * 3})
    ctx = pd.DataFrame({"batch_size": [1, 4], "isl": [8192, 1024], "step": [1024, 0], "latency_s": [1e-4] * 2})
    gen = pd.DataFrame({"batch_size": [256, 8], "isl": [1, 1], "step": [100, 65535], "latency_s": [1e-5] * 2})
    rows = {"gemm.bf16": FamilyRows("gemm.bf16", gemm, ["t"]),
            "gemm.fp8@other": FamilyRows("gemm.fp8@other", gemm.assign(m=[99999] * 3), ["t"]),
            "context_attention": FamilyRows("context_attention", ctx, ["t"]),
            "generation_attention": FamilyRows("generation_attention", gen, ["t"])}
    assert table_grid(rows) == {"gemm_max_tokens": 4096, "context_attention_max_tokens": 9216,
                                "generation_attention_max_context": 65536, "generation_attention_max_batch": 256}
    assert table_grid(rows, families=["gemm.bf16"]) == {"gemm_max_tokens": 4096}


def test_built_in_profiles_carry_their_grid_and_a_long_prompt_run_warns():
    from sim.config import build_config
    from sim.runner import run_simulation

    assert get_hardware("h100_sxm").efficiency.calibrated_grid.context_attention_max_tokens == 16384
    assert get_hardware("a100_sxm").efficiency.calibrated_grid.gemm_max_tokens == 8192
    cfg = build_config(overrides={"hardware": "a100_sxm", "model": "llama-3.1-8b", "workload.input_len": 20000,
                                  "workload.output_len": 4, "workload.num_requests": 2})
    w = run_simulation(cfg).summary["warnings"]
    assert any("prompts of up to 20,000 tokens" in x and "a100_sxm" in x for x in w), w


def test_a_disaggregated_run_warns_for_each_pools_transferred_profile():
    """The decode pool's profile was checked, a prefill pool on another GPU was not."""
    from sim.config import build_config
    from sim.runner import run_simulation

    keys = {"hardware": "h100_sxm", "workload.num_requests": 10, "workload.arrival": "inf",
            "workload.input_len": {"dist": "fixed", "value": 200}, "workload.output_len": {"dist": "fixed", "value": 5}}
    w = run_simulation(build_config(overrides={**keys, "disaggregation": {"prefill": {"hardware": "h200_sxm"}}}))
    assert [x for x in w.summary["warnings"] if "transferred" in x] == [
        x for x in ground_warnings(SimConfig(), get_hardware("h200_sxm"), get_model("llama-3.1-8b"), {})]
    w = run_simulation(build_config(overrides={**keys, "disaggregation": {}}))  # both pools on the fitted H100
    assert not [x for x in w.summary["warnings"] if "transferred" in x]


def test_quantized_weights_without_their_tensor_cores_are_said_to_run_weight_only():
    """fp8 on an A100 (no fp8 peak) and gpt-oss's MXFP4 on an H100 (no fp4) run
    weight-only at the 16-bit peak: said; fp8 on an H100 and a bf16 model are not."""
    model = get_model("llama-3.1-8b")
    w = ground_warnings(SimConfig(quantization="fp8"), get_hardware("a100_sxm"), model, {})
    assert ("fp8 weights on a100_sxm: no fp8 tensor-core peak in its profile, so its GEMMs run weight-only "
            "at the 16-bit peak (as vLLM's Marlin kernels do on such GPUs)") in w
    oss = ground_warnings(SimConfig(), get_hardware("h100_sxm"), get_model("gpt-oss-120b"), {})
    assert any(x.startswith("mxfp4 weights on h100_sxm: no fp4 tensor-core peak") for x in oss)
    assert not any("weight-only" in x for x in
                   ground_warnings(SimConfig(quantization="fp8"), get_hardware("h100_sxm"), model, {}))
    assert ground_warnings(SimConfig(), get_hardware("h100_sxm"), model, {}) == []
