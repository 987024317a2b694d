"""calibration.fit: parameters are recovered from timings the model generates,
the held-out split holds out whole shapes, and the fitted formulas give
hand-computed values; the cost model's per-step evaluation equals the
operator formulas the fit uses."""

import numpy as np
import pandas as pd
import pytest

from calibration.datasets import holdout_mask
from calibration.fit import SPACE, Device, fit_family, predict, spec_for
from sim.cost_model import CostModel, all_reduce_time_s, attention_uniform_time_s, gemm_time_s
from sim.cost_model.fitted import gemm_fitted_s, uniform_generation_s
from sim.hardware.efficiency import (AllReduceParams, ContextAttentionParams, GemmParams,
                            GenerationAttentionParams)
from sim.hardware.profile import get_hardware
from sim.model_spec import get_model

DEV = Device(peak_bf16=1e15, peak_fp8=2e15, hbm_bw=3e12, num_sms=100, link_bw=4e11)


def grid(**axes) -> pd.DataFrame:
    mesh = np.meshgrid(*axes.values(), indexing="ij")
    return pd.DataFrame({k: m.ravel().astype(float) for k, m in zip(axes, mesh)})


def geo(lo, hi, n):
    return np.unique(np.round(np.geomspace(lo, hi, n)))


# true parameters chosen so that every term dominates somewhere in the grid
CASES = {
    "gemm.fp8": (
        GemmParams(compute_efficiency_max=0.7, compute_half_flops=1e11, compute_exponent=0.7,
                   memory_efficiency_max=0.85, memory_half_bytes=1e8, memory_exponent=0.7,
                   launch_s=2e-6, k_serial_s=3e-8, k_split=2000.0, act_quant_row_s=2e-8,
                   act_quant_memory_efficiency=0.4),
        # a coarse grid of everything, plus compute-bound and memory-bound regions
        pd.concat([grid(m=geo(1, 32768, 20), n=geo(1, 65536, 20), k=geo(1, 65536, 20)),
                   grid(m=geo(256, 32768, 12), n=geo(256, 65536, 12), k=geo(16, 65536, 16)),
                   grid(m=geo(1, 64, 7), n=geo(64, 65536, 16), k=geo(64, 65536, 16))],
                  ignore_index=True)),
    "context_attention": (
        ContextAttentionParams(compute_efficiency_max=0.8, compute_half_flops=1e10,
                               compute_exponent=0.7, memory_efficiency_max=0.5,
                               memory_half_bytes=3e7, memory_exponent=0.6, launch_s=1e-5,
                               softmax_flops_per_score=250.0, seq_head_s=4e-8),
        grid(batch_size=geo(1, 256, 9), isl=geo(16, 16384, 14), num_heads=[4, 8, 16, 32, 64],
             num_key_value_heads=[1, 2, 4, 8], head_dim=[64, 128, 192, 256])),
    "generation_attention": (
        GenerationAttentionParams(compute_efficiency_max=1.0, compute_half_flops=1.0,
                                  compute_exponent=0.5, memory_efficiency_max=0.9,
                                  memory_half_bytes=3e7, memory_exponent=0.5, launch_s=5e-6,
                                  seq_head_s=1.5e-8),
        grid(batch_size=geo(1, 2048, 12), step=geo(1, 131071, 16), num_heads=[8, 16, 32, 64],
             num_key_value_heads=[1, 2, 4, 8], head_dim=[64, 128, 256])),
    "all_reduce": (
        AllReduceParams(latency_s=5e-6, latency_per_gpu_s=1.6e-6,
                        bus_efficiency={2: 0.8, 4: 0.95, 8: 1.05}, half_bytes=5e6, exponent=0.7),
        grid(message_bytes=2.0 ** np.arange(8, 31, 0.125), num_gpus=[2, 4, 8])),
}


def _value(params, name):
    d = params.model_dump()
    return d["bus_efficiency"][int(name[4:])] if name.startswith("bus_") else d[name]


@pytest.mark.parametrize("family", sorted(CASES))
def test_recovers_known_parameters_from_noisy_model_timings(family):
    """5 % multiplicative (log-normal, sigma 0.05) noise on the model's own
    timings, every parameter started 3x off (x3, or /3 where x3 leaves the
    bounds): every parameter comes back within 3 %."""
    true, rows = CASES[family]
    copies = {"gemm.fp8": 3, "context_attention": 3, "generation_attention": 2,
              "all_reduce": 16}.get(family, 1)
    rows = pd.concat([rows] * copies, ignore_index=True)  # repeated measurements of each shape
    if family == "context_attention":
        rows = rows[rows["batch_size"] * rows["isl"] <= 1 << 20]
    if family.endswith("attention"):
        rows = rows.assign(kv_cache_dtype="bfloat16")
    rng = np.random.default_rng(0)
    rows = rows.assign(latency_s=predict(family, true, rows, DEV) * np.exp(rng.normal(0, 0.05, len(rows))))
    _, free = spec_for(family)
    names = list(free) + [f"bus_{p}" for p in (2, 4, 8) if family == "all_reduce"]
    start = {}
    for n in names:
        v, hi = _value(true, n), SPACE["bus" if n.startswith("bus_") else n][2]
        start[n] = v * 3 if v * 3 < hi else v / 3
    fixed = {"split_kv_min_group": 1, "cta_token_s": 0.0} if family == "generation_attention" else None
    got = fit_family(family, rows.reset_index(drop=True), DEV, start=start, fixed=fixed).params
    errors = {n: abs(_value(got, n) / _value(true, n) - 1) for n in names}
    assert max(errors.values()) < 0.03, {n: f"{100 * e:.2f} %" for n, e in errors.items()}


def test_holdout_holds_out_whole_shapes():
    rows = grid(m=[1, 2, 3], n=np.arange(10), k=np.arange(1, 11))
    held = holdout_mask(rows, "gemm", 0.3, seed=1)
    train = set(zip(rows.n[~held], rows.k[~held]))
    test = set(zip(rows.n[held], rows.k[held]))
    assert not train & test
    assert len(test) == 30 and len(train) == 70  # 30 % of the 100 (n, k) pairs
    assert (held == holdout_mask(rows, "gemm", 0.3, seed=1)).all()
    assert (held != holdout_mask(rows, "gemm", 0.3, seed=2)).any()


def test_gemm_formula_hand_computed():
    """m = 64, n = 64, k = 1000 on a 1e15 FLOP/s, 1e12 B/s device."""
    p = GemmParams(compute_efficiency_max=0.5, compute_half_flops=8.192e6, compute_exponent=1.0,
                   memory_efficiency_max=1.0, memory_half_bytes=264192.0, memory_exponent=1.0,
                   launch_s=1e-6, k_serial_s=1e-10, k_split=1000.0, act_quant_row_s=1e-9,
                   act_quant_memory_efficiency=0.5)
    flops = 2 * 64 * 64 * 1000                       # 8.192e6 = the half point: efficiency 0.25
    tc = flops / (1e15 * 0.25)                        # 3.2768e-8 s
    nbytes = 64 * 1000 * 2 + 64 * 1000 * 2 + 64 * 64 * 2   # A bf16, B bf16, C bf16 = 264192
    tb = nbytes / (1e12 * 0.5)                        # also at its half point
    ts = 1e-10 * 1000 / 2                             # k = k_split: half the linear term
    expected = 1e-6 + np.sqrt(tc ** 2 + tb ** 2 + ts ** 2)
    got = gemm_fitted_s(p, 64, 64, 1000, 1e15, 1e12, weight_bytes=2.0, w8a8=False)
    assert got == pytest.approx(expected, rel=1e-12)
    # m = 1 rounds up to the 64-row tile: same FLOPs, fewer bytes; W8A8 adds the quant pass
    w8 = gemm_fitted_s(p, 1, 64, 1000, 1e15, 1e12, weight_bytes=1.0, w8a8=True)
    nb1 = 1000 * 1 + 64 * 1000 * 1 + 64 * 2
    tb1 = nb1 * (1 + 264192 / nb1) / 1e12
    quant = 1e-9 + 3 * 1000 / (1e12 * 0.5)
    assert w8 == pytest.approx(1e-6 + np.sqrt(tc ** 2 + tb1 ** 2 + ts ** 2) + quant, rel=1e-12)
    assert gemm_fitted_s(p, 0, 64, 1000, 1e15, 1e12, weight_bytes=2.0, w8a8=False) == 0.0


def test_generation_reads_whole_kv_tiles():
    """A 3-token context costs a full 64-token tile; 64 and 65 tokens differ by one tile."""
    p = GenerationAttentionParams(compute_efficiency_max=1.0, compute_half_flops=1e-9,
                                  compute_exponent=1.0, memory_efficiency_max=1.0,
                                  memory_half_bytes=1e-9, memory_exponent=1.0, launch_s=0.0,
                                  seq_head_s=0.0, kv_tile=64)
    t = {c: float(uniform_generation_s(p, 1e18, 1e12, 100, 1, c, 8, 8, 128)) for c in (2, 62, 63, 64)}
    per_tile = 64 * 2 * 8 * 128 * 2 / 1e12           # K and V of 64 tokens, 8 heads, bf16
    fixed = (2 * 2 * 8 * 128 + 2 * 8 * 128 * 4) / 1e12  # Q, O and the new K, V write
    assert t[2] == pytest.approx(per_tile + fixed, rel=1e-9)   # 3 tokens: one tile
    assert t[62] == pytest.approx(per_tile + fixed, rel=1e-9)  # 63 tokens: one tile
    assert t[63] == pytest.approx(per_tile + fixed, rel=1e-9)          # 64 tokens: one tile
    assert t[64] == pytest.approx(2 * per_tile + fixed, rel=1e-9)      # 65 tokens: two


@pytest.mark.parametrize("name,tp", [("llama-3.1-8b", 1), ("llama-3.1-8b", 2), ("mixtral-8x7b", 2)])
def test_cost_model_equals_operator_formulas(name, tp):
    """The per-step fast path (constants folded) equals the vectorised formulas
    that calibration fits and check_tables scores."""
    hw, m = get_hardware("h100_sxm"), get_model(name)
    cm = CostModel(m, hw, tensor_parallel_size=tp)
    L, h, d = m.num_hidden_layers, m.hidden_size, m.head_dim
    q, kv = m.num_attention_heads // tp, m.kv_heads_per_rank(tp)
    for T in (1, 63, 64, 65, 3000):
        ops = cm.step_time(np.full(T, 1) if T < 100 else np.array([T]),
                           np.full(T, 500) if T < 100 else np.array([0])).ops
        assert ops["qkv_proj"] == pytest.approx(L * float(gemm_time_s(hw, T, (q + 2 * kv) * d, h)), rel=1e-12)
        ar = (2 * L + 1) * float(all_reduce_time_s(hw, T * h * 2, tp, custom=True)) if tp > 1 else 0.0
        assert ops["tp_all_reduce"] == pytest.approx(ar, rel=1e-12)
        b, n, c = (T, 1, 500) if T < 100 else (1, T, 0)
        attn = L * float(attention_uniform_time_s(hw, b, n, c, q, kv, d))
        assert ops["attention"] == pytest.approx(attn, rel=1e-12)


def test_fitted_step_time_is_monotone_in_context():
    """Longer contexts never make a decode step faster (tile rounding is a step function)."""
    cm = CostModel(get_model("llama-3.1-8b"), get_hardware("a100_sxm"))
    ctx = np.arange(0, 5000, 7)
    t = [cm.step_time_s(np.ones(8, dtype=np.int64), np.full(8, c)) for c in ctx]
    assert np.all(np.diff(t) >= 0)


def test_live_calibration_without_torch_is_a_clear_error(monkeypatch):
    import sys

    from calibration.microbench import _torch
    from sim.errors import ConfigError

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(ConfigError, match=r"needs torch: pip install 'servesim\[calibration\]'"):
        _torch()


def test_calibrate_out_is_checked_before_any_fit(tmp_path, monkeypatch):
    """A folder (or an unwritable place) as --out is refused at once, naming
    --out, not after a fit that takes half a minute."""
    import calibration.cli as cal
    from sim.errors import ConfigError

    def no_fit(*a, **k):
        raise AssertionError("fitted before checking --out")

    monkeypatch.setattr(cal, "family_rows", no_fit)
    with pytest.raises(ConfigError, match=r"--out .*: a folder; give the profile's file, e\.g\. .*my_gpu\.yaml"):
        cal.calibrate(from_table=tmp_path, base_profile="h100_sxm", out=tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match=r"--out .*: cannot write there"):
        cal.calibrate(from_table=tmp_path, base_profile="h100_sxm", out=blocker / "sub" / "p.yaml")
    (tmp_path / "cc_plots").write_text("x")  # where the fit-vs-measured plots would go
    with pytest.raises(ConfigError, match=r"cc_plots \(where the plots go\) is a file"):
        cal.calibrate(from_table=tmp_path, base_profile="h100_sxm", out=tmp_path / "cc.yaml")
    assert not (tmp_path / "cc.yaml").exists()


def test_calibrate_refuses_out_in_the_shared_folder(tmp_path, monkeypatch):
    """--out, or the plots folder beside it, inside the shared data folder
    (here a temp folder standing in for it) is refused before anything is
    written, however the path reaches it (relative, through a link)."""
    import re
    from pathlib import Path

    import calibration.cli as cal
    from sim.errors import ConfigError

    shared = tmp_path / "shared"
    (shared / "kernels").mkdir(parents=True)
    monkeypatch.setenv("SERVESIM_SHARED", str(shared))
    monkeypatch.setattr(cal, "family_rows", lambda *a, **k: pytest.fail("fitted before checking --out"))
    monkeypatch.chdir(tmp_path / "shared" / "kernels")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "p_plots").symlink_to(shared)  # the plots would land in shared
    cases = {Path("sub/p.yaml"): "sub/p.yaml", shared / "p.yaml": str(shared / "p.yaml"),
             tmp_path / "elsewhere" / "p.yaml": str(tmp_path / "elsewhere" / "p_plots")}
    for out, named in cases.items():
        msg = f"--out {out}: {named} is inside the shared read-only data folder {shared}; write the profile elsewhere"
        with pytest.raises(ConfigError, match=re.escape(msg)):
            cal.calibrate(from_table=shared / "kernels", base_profile="h100_sxm", out=out)
    assert sorted(p.name for p in shared.rglob("*")) == ["kernels"]  # nothing written, no folder made
