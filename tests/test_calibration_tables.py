"""Kernel tables -> families -> fitted profile: bad tables are clear errors, a
table directory fits to a loadable fitted_v1 profile, and the shipped H100 and
A100 profiles predict the real tables (when ../shared is present)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from calibration.cli import calibrate, main
from calibration.datasets import family_rows
from calibration.fit import Device, ape, predict
from calibration.tables import read_attention_table, read_nccl_table
from sim.cost_model import CostModel
from sim.errors import ConfigError
from sim.hardware.profile import get_hardware, load_hardware
from sim.model_spec import get_model
from sim.paths import shared_dir

TEST_GPU = Path(__file__).parent / "data" / "test_gpu.yaml"
ATTN = {"batch_size": [1], "isl": [128], "num_heads": [8], "num_key_value_heads": [2], "head_dim": [64],
        "kv_cache_dtype": ["bfloat16"], "step": [0], "latency": [0.01]}


def test_missing_column_is_an_error_naming_file_and_column(tmp_path):
    p = tmp_path / "x_context_attention.csv"
    pd.DataFrame({k: v for k, v in ATTN.items() if k != "head_dim"}).to_csv(p, index=False)
    with pytest.raises(ConfigError, match=r"x_context_attention\.csv: missing column\(s\) head_dim"):
        read_attention_table(p)
    with pytest.raises(ConfigError, match="missing column"):  # the fitting path reads the same way
        family_rows(tmp_path)
    q = tmp_path / "nccl_y.csv"
    pd.DataFrame({"op_name": ["all_reduce"], "num_gpus": [2], "message_size": [4],
                  "latency": [1.0]}).to_csv(q, index=False)
    with pytest.raises(ConfigError, match=r"nccl_y\.csv: missing column\(s\) nccl_dtype"):
        read_nccl_table(q)


@pytest.mark.parametrize("bad", [0.0, -0.5, "n/a"])
def test_non_positive_latency_is_an_error(tmp_path, bad):
    p = tmp_path / "x_generation_attention.csv"
    rows = {k: v * 2 for k, v in ATTN.items()}
    pd.DataFrame({**rows, "latency": [0.01, bad], "batch_size": [1, 2]}).to_csv(p, index=False)
    with pytest.raises(ConfigError, match=r"x_generation_attention\.csv: column latency, line 3: value (0\.0|-0\.5|\(empty, or NA .*\)) is not a finite positive"):
        read_attention_table(p)
    with pytest.raises(ConfigError, match="latency"):
        calibrate(from_table=tmp_path, base_profile=str(TEST_GPU), out=tmp_path / "p.yaml", quiet=True)


def _model_tables(d: Path, hw) -> None:
    """Tables whose latencies the h100 profile's fitted formulas produce."""
    dev, eff = Device.of(hw), hw.efficiency
    g = pd.DataFrame([(m, n, k) for m in (1, 8, 64, 512, 4096) for n in (256, 4096, 14336)
                      for k in (512, 4096)], columns=["m", "n", "k"]).assign(gemm_dtype="bfloat16")
    g["latency"] = 1e3 * predict("gemm.bf16", eff.gemm["bf16"], g, dev)
    g.to_csv(d / "t_gemm.csv", index=False)
    for kind, lens in (("context", [64, 512, 2048]), ("generation", [15, 1023, 16383])):
        a = pd.DataFrame([(b, x, h, kv, 128) for b in (1, 8, 64) for x in lens
                          for h, kv in ((32, 8), (8, 1))],
                         columns=["batch_size", "L", "num_heads", "num_key_value_heads", "head_dim"])
        a = a.assign(isl=a.L if kind == "context" else 1, step=0 if kind == "context" else a.L,
                     kv_cache_dtype="bfloat16").drop(columns="L")
        fam = f"{kind}_attention"
        a["latency"] = 1e3 * predict(fam, getattr(eff, fam), a, dev)
        a.to_csv(d / f"t_{fam}.csv", index=False)


def test_tables_fit_to_a_loadable_profile(tmp_path):
    h100 = get_hardware("h100_sxm")
    _model_tables(tmp_path, h100)
    out = tmp_path / "fitted.yaml"
    assert main(["--from-table", str(tmp_path), "--base-profile", "h100_sxm", "--out", str(out),
                 "--quiet", "--no-plots"]) == 0
    hw = load_hardware(out)
    assert hw.efficiency.form == "fitted_v1" and hw.name == "h100_sxm"
    prov = hw.provenance
    assert str(tmp_path) in prov["efficiency_source"] and prov["efficiency_date"]
    assert "gemm.bf16 median APE" in prov["efficiency_fit_error"]
    # no NCCL table: all-reduce parameters stay the base profile's
    assert hw.efficiency.all_reduce == h100.efficiency.all_reduce
    # the grid: the largest shapes of these tables (m 4,096; context 2,048 + 0 tokens; generation
    # context 1 + 16,383 at batch 64); no MoE table: the base profile's MoE grid is kept
    grid = hw.efficiency.calibrated_grid
    assert (grid.gemm_max_tokens, grid.context_attention_max_tokens, grid.generation_attention_max_context,
            grid.generation_attention_max_batch) == (4096, 2048, 16384, 64)
    assert grid.moe_max_tokens == h100.efficiency.calibrated_grid.moe_max_tokens == 16384
    # the fit reproduces the tables it was generated from
    fams = family_rows(tmp_path)
    for fam, params in (("gemm.bf16", hw.efficiency.gemm["bf16"]),
                        ("context_attention", hw.efficiency.context_attention),
                        ("generation_attention", hw.efficiency.generation_attention)):
        r = fams[fam].rows
        assert np.median(ape(predict(fam, params, r, Device.of(hw)), r["latency_s"].to_numpy())) < 1.0
    assert CostModel(get_model("llama-3.1-8b"), hw).step_time_s(np.ones(4, dtype=np.int64),
                                                                np.full(4, 100)) > 0
    assert main(["--from-table", str(tmp_path), "--out", str(out)]) == 2  # base profile needed
    assert yaml.safe_load(out.read_text())["efficiency"]["form"] == "fitted_v1"


def test_fitting_a_scalar_base_keeps_unmeasured_families_scalar_equivalent(tmp_path):
    """Only a GEMM table: attention and all-reduce come from the scalar base."""
    base = get_hardware(str(TEST_GPU))
    pd.DataFrame({"gemm_dtype": ["bfloat16"] * 4, "m": [1, 16, 256, 4096], "n": 4096, "k": 4096,
                  "latency": [0.03, 0.03, 0.05, 0.5]}).to_csv(tmp_path / "a_gemm.csv", index=False)
    hw = load_hardware(calibrate(from_table=tmp_path, base_profile=str(TEST_GPU),
                                 out=tmp_path / "o.yaml", quiet=True, plots=False))
    ar = hw.efficiency.all_reduce
    assert ar.bus_efficiency == {2: 1.0} and ar.latency_s == base.interconnect.latency_s
    assert hw.efficiency.context_attention.compute_efficiency_max == 1.0
    assert "not measured" in hw.provenance["efficiency"]


def test_shipped_profiles_predict_the_real_tables():
    """Regression guard on the fitted profiles (in-sample; held-out numbers:
    benchmarks/calibration_accuracy.py)."""
    for gpu in ("h100_sxm", "a100_sxm"):
        d = shared_dir() / "kernels" / gpu
        if not d.is_dir():
            pytest.skip(f"{d} absent (../shared not beside the checkout)")
        hw = get_hardware(gpu)
        eff, dev = hw.efficiency, Device.of(hw)
        fams = family_rows(d)
        for fam, params, med_max in (("gemm.bf16", eff.gemm["bf16"], 10.0),
                                     ("context_attention", eff.context_attention, 15.0),
                                     ("generation_attention", eff.generation_attention, 15.0),
                                     ("all_reduce", eff.all_reduce, 10.0)):
            r = fams[fam].rows
            e = ape(predict(fam, params, r, dev), r["latency_s"].to_numpy())
            assert np.median(e) < med_max and e.mean() < 20.0, (gpu, fam, np.median(e), e.mean())
    assert len(family_rows(shared_dir() / "kernels" / "h100_sxm")["context_attention"].rows) == 13158


def test_a_folder_of_per_gpu_folders_names_them(tmp_path):
    (tmp_path / "h100_sxm").mkdir()
    (tmp_path / "a100_sxm").mkdir()
    with pytest.raises(ConfigError, match=r"no kernel tables .*give one of its folders \(a100_sxm, h100_sxm\)"):
        family_rows(tmp_path)


def test_tables_of_another_gpu_than_the_base_profile_are_warned_about(capsys):
    kernels = shared_dir() / "kernels"
    if not (kernels / "a100_sxm").is_dir():
        pytest.skip("../shared/kernels not found (a fresh clone without the shared data)")
    from calibration.cli import _warn_other_device

    _warn_other_device(kernels / "a100_sxm", "h100_sxm")
    assert "measured on NVIDIA A100-SXM4-80GB, not the base profile's GPU (h100_sxm)" in capsys.readouterr().err
    _warn_other_device(kernels / "h100_sxm", "h100_sxm")
    _warn_other_device(kernels / "a100_sxm", "a100_sxm")
    assert capsys.readouterr().err == ""


def test_constant_columns_a_table_dropped_are_restored(tmp_path):
    """SGLang / TensorRT-LLM tables drop ``step`` (context: 0) and ``isl`` (generation: 1)."""
    ctx = tmp_path / "sglang-0.5.14_context_attention.csv"
    pd.DataFrame({k: v for k, v in ATTN.items() if k != "step"}).to_csv(ctx, index=False)
    df = read_attention_table(ctx)
    assert df["step"].tolist() == [0] and df["window_size"].tolist() == [0]
    gen = tmp_path / "sglang-0.5.14_generation_attention.csv"
    pd.DataFrame({**{k: v for k, v in ATTN.items() if k != "isl"}, "step": [511]}).to_csv(gen, index=False)
    assert read_attention_table(gen)["isl"].tolist() == [1]


def test_a_folder_of_several_engines_fits_one_engine(tmp_path):
    from calibration.tables import find_tables, table_engine

    assert table_engine("vllm-0.24.0_gemm.csv.gz") == "vllm"
    assert table_engine("torch_gemm.csv") == "torch"
    assert table_engine("nccl_2.27.3.csv.gz") is None
    for name in ("vllm-0.24.0", "sglang-0.5.14"):
        pd.DataFrame(ATTN).to_csv(tmp_path / f"{name}_context_attention.csv", index=False)
    pd.DataFrame({"op_name": ["all_reduce"], "nccl_dtype": ["half"], "num_gpus": [2],
                  "message_size": [4], "latency": [1.0]}).to_csv(tmp_path / "nccl_2.csv", index=False)
    names = lambda engine: [p.name for _, p in find_tables(tmp_path, engine)]  # noqa: E731
    assert names(None) == ["nccl_2.csv", "vllm-0.24.0_context_attention.csv"]
    assert names("sglang") == ["nccl_2.csv", "sglang-0.5.14_context_attention.csv"]
    with pytest.raises(ConfigError, match=r"no kernel tables of engine 'trtllm'; found: sglang, vllm"):
        find_tables(tmp_path, "trtllm")
    (tmp_path / "vllm-0.24.0_context_attention.csv").unlink()
    with pytest.raises(ConfigError, match=r"several engines \(sglang, vllm\)|several engines"):
        pd.DataFrame(ATTN).to_csv(tmp_path / "trtllm-1_context_attention.csv", index=False)
        find_tables(tmp_path)


def test_check_tables_lists_an_unreadable_table_and_the_unscored_ones(tmp_path):
    """A table missing a column is listed with the reason while the others are scored;
    tables no per-operator check covers are named; an empty folder is an error."""
    from calibration.check_tables import check_dir, format_results, main, unscored_tables

    hw = get_hardware("h100_sxm")
    _model_tables(tmp_path, hw)
    pd.DataFrame({"num_tokens": [1], "latency": [0.01]}).to_csv(tmp_path / "t_moe.csv", index=False)
    (tmp_path / "t_custom_allreduce.csv").write_text("a,b\n1,2\n")
    results = check_dir(tmp_path, hw)
    text = format_results(results)
    assert "t_moe.csv  [moe]  not scored: missing column(s)" in text
    gemm = next(r for r in results if r.path.name == "t_gemm.csv")
    # 5 m x 3 n x 2 k shapes (_model_tables), each timed by the profile's own formula
    assert gemm.num_predicted == gemm.num_rows == 30 and gemm.bands["all"][1] < 1.0
    assert unscored_tables(tmp_path) == ["t_custom_allreduce.csv"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty), "--profile", "h100_sxm"]) == 2


@pytest.mark.parametrize("value", ["-5", "0", "ten"])
def test_check_tables_max_rows_must_be_a_whole_number_of_one_or_more(tmp_path, value, capsys):
    from calibration.check_tables import main

    with pytest.raises(SystemExit) as e:  # argparse's one-line usage error (it was a pandas traceback)
        main([str(tmp_path), "--profile", "h100_sxm", "--max-rows", value])
    assert e.value.code == 2
    assert "argument --max-rows: expected a whole number >= 1, got " in capsys.readouterr().err
