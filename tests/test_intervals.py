"""Prediction intervals (sim/results/intervals.py): conformal ranks by hand,
interval columns present and ordered (lo <= point <= hi) in validate and run."""

from __future__ import annotations

import math

from sim.results.intervals import (interval, intraclass_correlation, load_intervals, pooled_cdf_quantiles,
                                   residual_quantiles, summary_intervals)
from sim.validate.rows import ValidateOptions, simulate_row

from tests.test_validate import GPU, MODEL


def test_conformal_ranks_by_hand():
    # residuals log(m/p) = log(1..9) / 10 ... n = 9: ranks floor(10 x 0.1) = 1 -> 1st, ceil(10 x 0.9) = 9 -> 9th
    meas = [float(k) for k in range(1, 10)]
    q = residual_quantiles(meas, [1.0] * 9)
    assert q["n"] == 9 and math.isclose(q["lo"], 0.0) and math.isclose(q["hi"], math.log(9))
    assert residual_quantiles([1.0] * 4, [1.0] * 4) is None  # too few rows


def test_pooled_cdf_weighs_each_group_by_its_effective_size_by_hand():
    """Groups [0, 2, 0, 2] (mean 1) and [4, 6] (mean 5): grand mean 7/3; between-group mean
    square 4 (4/3)^2 + 2 (8/3)^2 = 64/3, within 6 / 4 = 3/2; n0 = 6 - 20/6 = 8/3; between
    variance (64/3 - 3/2) / (8/3) = 119/16, rho = (119/16) / (119/16 + 3/2) = 119/143.
    Weights n / (1 + (n - 1) rho): 4 x 143/500 = 1.144 and 2 x 143/262 = 1.0916, so each
    residual of the first group weighs 0.1279 and of the second 0.2441 of the pooled CDF:
    ascending 0.128, 0.256, 0.384, 0.512, 0.756 (at 4), 1. At level 0.752 (alpha 0.496) hi is 4;
    each group the same (1/8, 1/4: 0.75 at 4) would give 6."""
    g = [[0.0, 2.0, 0.0, 2.0], [4.0, 6.0]]
    assert math.isclose(intraclass_correlation(g), 119 / 143, rel_tol=1e-12)
    q = pooled_cdf_quantiles(g, alpha=0.496)
    assert q["hi"] == 4.0 and q["lo"] == 0.0 and math.isclose(q["rho"], 119 / 143, rel_tol=1e-12)
    assert intraclass_correlation([[1.0, 2.0, 3.0]]) == 0.0  # one group: no between-group share
    assert intraclass_correlation([[1.0, 2.0], [1.0, 2.0]]) == 0.0  # same means: none between


def test_pooled_cdf_weighs_each_group_the_same_by_hand():
    """Groups A = 18 residuals 0.0, B = [1.0], C = [-1.0]; alpha 0.2 (level 0.9).
    Plain ranks over the 20 residuals: ceil(21 x 0.9) = 19th and floor(21 x 0.1) = 2nd
    -> [0, 0]. Pooled CDF, each group 1/3: F(-1) = 1/3, F(0) = 2/3, F(1) = 1 -> hi 1.0
    (first F >= 0.9); the share >= t: 1/3 at 1, 2/3 at 0, 1 at -1 -> lo -1.0."""
    a, b, c = [0.0] * 18, [1.0], [-1.0]
    plain = residual_quantiles([math.exp(r) for r in a + b + c], [1.0] * 20)
    assert plain["lo"] == 0.0 and plain["hi"] == 0.0
    q = pooled_cdf_quantiles([a, b, c])  # no spread within a group: rho = 1, each group the same
    assert q == {"lo": -1.0, "hi": 1.0, "n": 20, "groups": 3, "rho": 1.0}
    # alpha 0.5 (level 0.75), groups [0, .1, .2, .3] (1/12 each), [1.0] (1/3), [-.5, -.4] (1/6 each):
    # ascending cumulative 1/6, 1/3, 5/12, 1/2, 7/12, 2/3, 1 -> hi 1.0 (first >= 3/4);
    # descending 1/3 (1.0), 5/12, 1/2, 7/12, 2/3 (0.0), 5/6 (-0.4) -> lo -0.4
    q = pooled_cdf_quantiles([[0.0, 0.1, 0.2, 0.3], [1.0], [-0.5, -0.4]], alpha=0.5)
    assert q["lo"] == -0.4 and q["hi"] == 1.0 and q["groups"] == 3
    # the group order does not matter; one group is the plain empirical quantile without rank inflation
    assert pooled_cdf_quantiles([[-0.5, -0.4], [1.0], [0.0, 0.1, 0.2, 0.3]], alpha=0.5) == q
    assert pooled_cdf_quantiles([[float(k) for k in range(10)]]) == {"lo": 1.0, "hi": 8.0, "n": 10, "groups": 1,
                                                                     "rho": 0.0}
    assert pooled_cdf_quantiles([[0.0, 1.0], [], [2.0, 3.0]]) is None  # fewer than 5 residuals


def test_interval_contains_the_point():
    table = {"vllm": {"ttft": {"lo": -0.5, "hi": 0.25}, "tpot": {"lo": 0.1, "hi": 0.3}}}
    lo, hi = interval("vllm", "ttft", 100.0, table)
    assert math.isclose(lo, 100 * math.exp(-0.5)) and math.isclose(hi, 100 * math.exp(0.25))
    lo, hi = interval("vllm", "tpot", 10.0, table)  # a biased band still contains the point
    assert lo == 10.0 and math.isclose(hi, 10 * math.exp(0.3))
    assert interval("tgi", "ttft", 100.0, table) is None and interval(None, "ttft", 100.0, table) is None


def test_validate_and_run_carry_ordered_intervals():
    assert load_intervals()  # the committed file (benchmarks/validate_silicon.py)
    row = {"backend": "vllm", "backend_version": "0.12.0", "model_path": MODEL, "system": GPU, "isl": 64,
           "osl": 4, "concurrency": 2, "tp_size": 1, "silicon_ttft_ms": 1.0, "silicon_tpot_ms": 1.0}
    out = simulate_row(row, ValidateOptions(requests_per_client=2))
    assert out["status"] == "ok"
    for m in ("ttft", "tpot"):
        assert out[f"pred_{m}_ms_lo"] <= out[f"pred_{m}_ms"] <= out[f"pred_{m}_ms_hi"]
    s = summary_intervals("trtllm", {"mean_ttft_ms": 50.0, "mean_tpot_ms": 5.0})
    assert s["mean_ttft_ms_lo"] <= 50.0 <= s["mean_ttft_ms_hi"] and s["mean_tpot_ms_lo"] <= 5.0 <= s["mean_tpot_ms_hi"]
    assert summary_intervals(None, {"mean_ttft_ms": 50.0}) == {}


def test_plan_headroom_names_the_interval():
    from types import SimpleNamespace

    from sim.sweep.plan_report import plan_headroom

    row = {"passed": True, "workload.request_rate": 4.0, "num_replicas": 1, "mean_ttft_ms": 100.0,
           "mean_ttft_ms_lo": 70.0, "mean_ttft_ms_hi": 300.0, "mean_tpot_ms": 10.0, "mean_tpot_ms_lo": 9.0,
           "mean_tpot_ms_hi": 12.0}
    plan = SimpleNamespace(max_rate=4.0, rows=[row], candidate=SimpleNamespace(name="c"))
    (w,) = plan_headroom([plan])
    assert "c at 4 req/s" in w and "70-300 ms" in w and "9.0-12.0 ms" in w
    assert plan_headroom([SimpleNamespace(max_rate=4.0, rows=[{"passed": True, "workload.request_rate": 4.0}],
                                          candidate=plan.candidate)]) == []


def _load_benchmark(name: str):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_intervals_from_a_written_report(tmp_path):
    """benchmarks/intervals_from_report.py rebuilds the held-out predictions and the
    folds' fit sources from predictions.csv and fitted_params.json: 6 rows of models A
    (TTFT residual log 1 = 0 held out) / B, C (one row each, residuals +log 2, -log 2);
    row 5 refused (no prediction). Each model a third of the pooled CDF -> [-log 2, log 2]."""
    import csv
    import json

    mod = _load_benchmark("intervals_from_report")
    cols = ["backend", "backend_version", "campaign", "model_path", "system", "silicon_ttft_ms",
            "silicon_tpot_ms", "model_ttft_ms", "model_tpot_ms", "status"]
    rows = [["vllm", "0.1", "", m, "h100_sxm", meas, 10.0, 100.0 if st == "ok" else "", 10.0 if st == "ok" else "", st]
            for m, meas, st in (("A", 100.0, "ok"), ("A", 100.0, "ok"), ("A", 100.0, "ok"),
                                ("B", 200.0, "ok"), ("C", 50.0, "ok"), ("A", 100.0, "error"))]
    with (tmp_path / "predictions.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows(rows)
    fitted = {"vllm": {"source": "fitted"}}
    (tmp_path / "fitted_params.json").write_text(json.dumps({"folds": [
        {"scheme": "model", "group": g, "params": fitted} for g in ("A", "B", "C")]}))
    rows_, res, schemes = mod.load_report(tmp_path)
    assert schemes == ["model"] and rows_[0]["campaign"] is None
    assert [p["status"] for p in res["held_out"]["model"]] == ["ok"] * 5 + ["error"]
    assert {f["group"]: f["rows"] for f in res["folds"]} == {"A": [0, 1, 2, 5], "B": [3], "C": [4]}
    from sim.validate.crossval import conformal_intervals

    q = conformal_intervals(rows_, res, schemes, min_rows=5)["engines"]["vllm"]["ttft"]
    assert q["n"] == 5 and q["groups"] == 3
    assert math.isclose(q["lo"], -math.log(2)) and math.isclose(q["hi"], math.log(2))


def test_dense_sample_groups_by_engine_release():
    """validate_moe_sample.sample_rows on a table without campaign / mode columns (the
    dense one): every row is agg, a row's campaign is its engine and version; one row per
    (family, engine, campaign) group with --per-group 1; concurrency above the cap dropped."""
    import pandas as pd

    mod = _load_benchmark("validate_moe_sample")
    df = pd.DataFrame({"model_path": ["m/X", "m/X", "m/X", "m/Y", "m/X"],
                       "backend": ["vllm", "vllm", "vllm", "vllm", "sglang"],
                       "backend_version": ["1", "1", "2", "1", "1"],
                       "concurrency": [8, 16, 8, 8, 128]})
    s = mod.sample_rows(df, per_group=1, max_conc=64, seed=0)
    assert sorted(s["campaign"]) == ["vllm 1", "vllm 1", "vllm 2"]  # sglang's row is over the cap
    assert len(s) == 3 and set(s.index) >= {2, 3} and len({0, 1} & set(s.index)) == 1


def test_no_interval_for_a_disaggregated_run():
    """The cross-validation holds aggregated rows only: a disaggregated run with an engine
    preset carries no interval, the same deployment aggregated does."""
    from sim.config import build_config
    from sim.runner import run_simulation

    keys = {"model": MODEL, "hardware": GPU, "engine": "vllm", "workload.num_requests": 20,
            "workload.request_rate": 50, "workload.input_len": 64, "workload.output_len": 4,
            "max_model_len": 2048}
    agg = run_simulation(build_config(overrides=keys)).summary
    assert agg["mean_ttft_ms_lo"] <= agg["mean_ttft_ms"] <= agg["mean_ttft_ms_hi"]
    dis = run_simulation(build_config(overrides={**keys, "disaggregation": {"num_prefill_workers": 1,
                                                                           "num_decode_workers": 1}})).summary
    assert dis["completed"] == 20 and not any(k.endswith(("_ms_lo", "_ms_hi")) for k in dis)
