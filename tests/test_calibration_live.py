"""Live calibration end to end on the CPU with tiny sizes (CI installs the CPU
torch wheel): microbenchmarks -> tables in the ../shared/kernels format ->
fit -> a profile the simulator loads."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="live calibration needs torch (pip install torch); "
                                            "table fitting is tested without it")

from calibration.cli import calibrate  # noqa: E402
from calibration.datasets import family_rows  # noqa: E402
from calibration.microbench import Timer, _num_sets  # noqa: E402
from calibration.tables import READERS, find_tables  # noqa: E402
from sim.cost_model import CostModel  # noqa: E402
from sim.hardware.profile import load_hardware  # noqa: E402
from sim.model_spec import get_model  # noqa: E402


def test_cpu_calibration_writes_tables_and_a_loadable_profile(tmp_path):
    out = calibrate(device="cpu", out=tmp_path / "cpu.yaml", quick=True, quiet=True)
    kernels = tmp_path / "cpu_kernels"
    kinds = {k for k, _ in find_tables(kernels)}
    assert kinds == {"gemm", "context_attention", "generation_attention"}  # one device: no NCCL
    for kind, path in find_tables(kernels):
        df = READERS[kind](path)  # the published tables' columns and checks
        assert len(df) > 0 and (df["latency_s"] > 0).all()
    assert set(family_rows(kernels)) == {"gemm.bf16", "context_attention", "generation_attention"}
    hw = load_hardware(out)
    assert hw.name.startswith("cpu_") and hw.efficiency.form == "fitted_v1"
    # the CPU's own measured peaks, not a GPU datasheet
    assert 0 < hw.peak_flops_per_s.bf16 < 1e14 and 0 < hw.hbm_bandwidth_bytes_per_s < 1e12
    prov = hw.provenance
    assert f"torch {torch.__version__}" in prov["efficiency_versions"]
    assert prov["efficiency_date"] and "median APE" in prov["efficiency_fit_error"]
    assert "all_reduce" in prov["efficiency"]  # said to be not measured
    assert sorted(p.name for p in kernels.glob("fit_*.png")) == [
        "fit_context_attention.png", "fit_gemm_bf16.png", "fit_generation_attention.png"]
    cm = CostModel(get_model("llama-3.1-8b"), hw)
    t = cm.step_time_s(np.ones(4, dtype=np.int64), np.full(4, 100))
    assert np.isfinite(t) and t > 0


def test_timer_takes_the_median_and_rotates_buffers():
    calls = []
    t = Timer("cpu", reps=5, warmup=2)(lambda i: calls.append(i), num_sets=3)
    assert t >= 0 and calls == [0, 1, 0, 1, 2, 0, 1]  # warm-up, then reps cycling the sets
    assert _num_sets(1 << 20, 32 << 20) == 64  # 1 MiB sets past a 32 MiB cache: capped at 64
    assert _num_sets(1 << 30, 32 << 20) == 1


def test_csv_sink_writes_each_row_as_it_arrives(tmp_path):
    # a sweep killed by a time limit must leave what it measured on disk
    from calibration.microbench import _CsvSink  # noqa: PLC0415
    path = tmp_path / "t.csv"
    sink = _CsvSink(path, ["m", "latency"])
    assert path.read_text().splitlines() == ["m,latency"]
    sink.append([1, 0.5])
    assert path.read_text().splitlines() == ["m,latency", "1,0.5"] and sink == [[1, 0.5]]


def test_torch_versions_are_not_labelled_vllm(tmp_path):
    from calibration.cli import _table_versions  # noqa: PLC0415
    calibrate(device="cpu", out=tmp_path / "cpu.yaml", quick=True, quiet=True, plots=False)
    rows = family_rows(tmp_path / "cpu_kernels")
    text = _table_versions(rows)
    assert f"kernels measured with torch {torch.__version__}" in text and "vLLM" not in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message when torch sees no GPU")
def test_cuda_without_a_gpu_is_a_clear_error(tmp_path):
    from sim.errors import ConfigError  # noqa: PLC0415
    with pytest.raises(ConfigError, match="--device cuda: torch sees no CUDA device"):
        calibrate(device="cuda", out=tmp_path / "g.yaml", quick=True, quiet=True)


def test_balanced_moe_counts_hand_computed():
    from calibration.microbench import _balanced_counts  # noqa: PLC0415
    # 3 tokens x top-2 = 6 assignments over 4 experts: 2, 2, 1, 1; EP 2 keeps the first 2 experts
    assert _balanced_counts(3, 2, 4, 4) == [2, 2, 1, 1]
    assert _balanced_counts(3, 2, 4, 2) == [2, 2]
    assert _balanced_counts(1, 8, 256, 32) == [1] * 8 + [0] * 24  # one token touches top-k experts only


def test_moe_and_mla_microbenchmarks_run_on_cpu_in_the_table_format():
    from calibration.microbench import MOE_COLUMNS, bench_mla, bench_moe  # noqa: PLC0415
    timer = Timer("cpu", reps=2, warmup=1)
    rows = bench_moe("cpu", "cpu", lambda it, **kw: it, shapes=[(64, 32, 2, 8)], tokens=[1, 16],
                     eps=(1, 4, 3), timer=timer)  # EP 3 does not divide 8 experts: skipped
    if not rows:
        pytest.skip("this torch has no _grouped_mm on the CPU")
    assert len(MOE_COLUMNS) == len(rows[0])
    assert [(r[2], r[8]) for r in rows] == [(1, 1), (16, 1), (1, 4), (16, 4)]
    assert all(r[-1] > 0 for r in rows)
    tiny = {"heads": [128, 16], "batch": [1, 2], "step": [15, 63], "tokens": [1, 8], "kv_tokens_max": 64}
    bmm, gen = bench_mla("cpu", "cpu", lambda it, **kw: it, timer=timer, sizes=tiny)
    assert {r[0] for r in bmm} == {"mla_gen_pre", "mla_gen_post"} and all(r[-1] > 0 for r in bmm)
    # tp_size column = 128 / heads, context = step + 1 tokens
    assert {(r[1], r[3]) for r in gen} == {(128, 1), (16, 8)}
    assert sorted({(r[2], r[4]) for r in gen}) == [(1, 15), (1, 63), (2, 15)]  # 2 x 64 > 64 KV tokens: skipped
    assert len(bmm) == 2 * 2 * 2
