"""calibration.tables readers and calibration.check_tables scoring."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration.check_tables import check_dir, format_results, main
from calibration.tables import read_gemm_table, read_nccl_table
from sim.cost_model import all_reduce_time_s, attention_time_s, gemm_time_s, uniform_batch_sums
from sim.errors import ConfigError
from sim.hardware.profile import get_hardware
from sim.paths import shared_dir

TEST_GPU = Path(__file__).parent / "data" / "test_gpu.yaml"
HW = get_hardware(str(TEST_GPU))


def _synthetic_tables(d: Path) -> None:
    """Tables whose latencies are the cost model's own predictions (ms)."""
    m = np.array([1, 16, 128, 1024, 8192])
    n = np.array([4096, 1024, 14336, 512, 8192])
    k = np.array([4096, 8192, 4096, 4096, 1024])
    gemm = pd.DataFrame({"gemm_dtype": ["bfloat16"] * 5 + ["fp8"] * 5, "m": np.tile(m, 2),
                         "n": np.tile(n, 2), "k": np.tile(k, 2)})
    gemm["latency"] = 1e3 * np.concatenate([gemm_time_s(HW, m, n, k, "bf16"),
                                            gemm_time_s(HW, m, n, k, "fp8")])
    gemm.to_csv(d / "x_gemm.csv", index=False)
    for kind, isl, step in (("context", [128, 4096, 16384], [0, 0, 0]),
                            ("generation", [1, 1, 1], [15, 4095, 131071])):
        a = pd.DataFrame({"batch_size": [1, 8, 64], "isl": isl, "num_heads": [32, 64, 8],
                          "num_key_value_heads": [8, 8, 1], "head_dim": 128,
                          "kv_cache_dtype": ["bfloat16", "fp8", "bfloat16"], "step": step,
                          "window_size": 0})
        new = a["isl"] if kind == "context" else 1
        sums = uniform_batch_sums(a["batch_size"], new, a["step"])
        kv = np.where(a["kv_cache_dtype"] == "fp8", 1.0, 2.0)
        a["latency"] = 1e3 * attention_time_s(HW, *sums, a["num_heads"], a["num_key_value_heads"],
                                              128, kv)
        extra = a.iloc[[0]].assign(window_size=128)  # sliding window: skipped
        pd.concat([a, extra]).to_csv(d / f"x_{kind}_attention.csv.gz", index=False)
    nccl = pd.DataFrame({"op_name": ["all_reduce"] * 3 + ["all_gather"], "nccl_dtype": "half",
                         "num_gpus": [2, 4, 8, 8], "message_size": [512, 1 << 20, 1 << 26, 512]})
    nccl["latency"] = 1e3 * all_reduce_time_s(HW, nccl["message_size"] * 2, nccl["num_gpus"])
    nccl.loc[3, "latency"] = 0.01
    nccl.to_csv(d / "nccl_test.csv", index=False)


def test_tables_from_the_cost_model_score_zero(tmp_path):
    _synthetic_tables(tmp_path)
    results = check_dir(tmp_path, HW)
    assert [r.kind for r in results] == ["nccl", "context_attention", "gemm", "generation_attention"]
    for r in results:
        n, mape, med = r.bands["all"]
        assert n == r.num_predicted > 0
        assert mape < 1e-9 and med < 1e-9
    skipped = [(r.kind, r.skipped) for r in results]
    assert skipped == [("nccl", {"collective not modelled (only all_reduce)": 1}),
                       ("context_attention", {"sliding window not modelled": 1}),
                       ("gemm", {}), ("generation_attention", {"sliding window not modelled": 1})]
    text = format_results(results)
    assert "MAPE" in text and "small m (<= 128)" in text and "long context" in text


def test_cli_runs(tmp_path, capsys):
    _synthetic_tables(tmp_path)
    assert main([str(tmp_path), "--profile", str(TEST_GPU), "--model-free"]) == 0
    out = capsys.readouterr().out
    assert "x_gemm.csv" in out and "preset-model shapes" not in out
    assert main([str(tmp_path / "nope"), "--profile", str(TEST_GPU)]) == 2


def test_reader_errors_name_file_column_row(tmp_path):
    bad = tmp_path / "a_gemm.csv"
    pd.DataFrame({"gemm_dtype": ["bfloat16"], "m": [1], "n": [2], "latency": [1.0]}).to_csv(bad, index=False)
    with pytest.raises(ConfigError, match=r"a_gemm\.csv.*missing column\(s\) k"):
        read_gemm_table(bad)
    pd.DataFrame({"gemm_dtype": ["bfloat16"] * 2, "m": [1, 1], "n": [2, 2], "k": [3, 3],
                  "latency": [1.0, 0.0]}).to_csv(bad, index=False)
    with pytest.raises(ConfigError, match=r"a_gemm\.csv: column latency, line 3"):
        read_gemm_table(bad)


def test_nccl_message_size_is_elements(tmp_path):
    p = tmp_path / "nccl_x.csv"
    pd.DataFrame({"op_name": ["all_reduce"] * 2, "nccl_dtype": ["half", "int8"], "num_gpus": 2,
                  "message_size": [1024, 1024], "latency": [0.01, 0.01]}).to_csv(p, index=False)
    assert read_nccl_table(p)["message_bytes"].tolist() == [2048, 1024]


def test_real_h100_tables_produce_numbers():
    d = shared_dir() / "kernels" / "h100_sxm"
    if not d.is_dir():
        pytest.skip(f"{d} absent (../shared not beside the checkout)")
    results = check_dir(d, get_hardware("h100_sxm"), max_rows=3000, seed=0)
    kinds = {r.kind for r in results if r.num_predicted}
    assert kinds == {"gemm", "context_attention", "generation_attention", "nccl", "moe", "mla_module", "gdn"}
    for r in results:
        if r.num_predicted:
            _, mape, med = r.bands["all"]
            assert np.isfinite(mape) and 0 <= med <= mape * 10
    print("\n" + format_results(results))
