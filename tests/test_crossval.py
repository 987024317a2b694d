"""Leave-one-group-out cross-validation (sim/validate/crossval.py) on hand-made
rows with a fake predictor: a held-out group never influences the values it is
scored with, folds share simulations through the cache, an engine without fit
rows takes the median of the fitted ones."""

from __future__ import annotations

import math
import statistics

from sim.validate import crossval as cv


def _rows():
    rows = []
    for model, scale in (("A", 1.0), ("B", 2.0)):
        for eng in ("vllm", "sglang"):
            for i in range(12):
                rows.append({"row_key": f"{model}{eng}{i}", "backend": eng, "model_path": model, "system": "g",
                             "backend_version": "1.0", "silicon_ttft_ms": 100.0 * scale,
                             "silicon_tpot_ms": 10.0})
    rows.append({"row_key": "c", "backend": "trtllm", "model_path": "B", "system": "g", "campaign": "x",
                 "silicon_ttft_ms": 200.0, "silicon_tpot_ms": 10.0})
    return rows


def _predict(calls):
    def predict(sub, engine, params):
        calls.append((engine, len(sub)))
        # TTFT = 100 ms + 5000 x frontend_latency_s: 0 fits model A, 20 ms fits model B
        return [{"status": "ok", "pred_ttft_ms": 100.0 + 5000 * params["frontend_latency_s"],
                 "pred_tpot_ms": 10.0, "reason": ""} for _ in sub]
    return predict


def test_folds_and_groups():
    rows = _rows()
    assert list(cv.folds(rows, "model")) == ["A", "B"]
    assert cv.campaign_of(rows[0]) == "vllm 1.0" and cv.campaign_of(rows[-1]) == "x"
    assert sorted(i for idx in cv.folds(rows, "campaign").values() for i in idx) == list(range(len(rows)))


def test_held_out_group_does_not_leak_and_simulations_are_shared(tmp_path):
    calls: list = []
    rows = _rows()
    cache = cv.PredictionCache(rows, _predict(calls), tmp_path / "cache.jsonl")
    res = cv.cross_validate(cache, ["model"])
    by = {f["group"]: f for f in res["folds"]}
    # without model B, the fit sees only A (best frontend latency 0); without A, only B (20 ms)
    assert by["B"]["params"]["vllm"]["params"]["frontend_latency_s"] == 0.0
    assert by["A"]["params"]["vllm"]["params"]["frontend_latency_s"] == 0.02
    held = res["held_out"]["model"]
    a_row = next(i for i, r in enumerate(rows) if r["model_path"] == "A" and r["backend"] == "vllm")
    assert held[a_row]["pred_ttft_ms"] == 200.0  # scored with B's values: 100 % error, honestly
    # trtllm has one row (< MIN_FIT_ROWS): one set fitted on the other engines' rows together, said so
    assert by["A"]["params"]["trtllm"]["source"].startswith("pooled")
    assert by["A"]["params"]["trtllm"]["params"]["frontend_latency_s"] == 0.02
    med = cv.fit_fold(cache, [i for i, r in enumerate(rows) if r["model_path"] == "B"], ["vllm", "sglang", "trtllm"],
                      fallback="median")
    assert med["trtllm"]["source"].startswith("median") and med["trtllm"]["params"]["frontend_latency_s"] == 0.02
    # every (engine, parameter set) simulated once; a second run reads the file back
    n = cache.num_simulated
    assert len(set(calls)) <= len(calls) and n == sum(k for _, k in calls)
    calls2: list = []
    cache2 = cv.PredictionCache(rows, _predict(calls2), tmp_path / "cache.jsonl")
    cv.cross_validate(cache2, ["model"])
    assert cache2.num_simulated == 0 and calls2 == []


def test_scores_hand_computed():
    rows = [{"silicon_ttft_ms": 100.0, "silicon_tpot_ms": 10.0}] * 2
    preds = [{"status": "ok", "pred_ttft_ms": 110.0, "pred_tpot_ms": 10.0},
             {"status": "ok", "pred_ttft_ms": 70.0, "pred_tpot_ms": 12.0}]
    s = cv.scores(rows, preds)
    assert math.isclose(s["ttft_mape"], 20.0) and math.isclose(s["tpot_mape"], 10.0)
    assert s["n_ok"] == 2


def test_conformal_intervals_pool_the_schemes_and_measure_coverage_one_level_out():
    """10 rows of models A (0-4) / B (5-9) on GPUs g1 (even) / g2 (odd); held-out
    log(measured / predicted) TTFT residuals: leave-one-model-out +0.1 (A) / -0.1 (B),
    leave-one-GPU-out +0.3; row 10 (model C, GPU g3) was not fitted in its folds
    (its engine's values pooled over other engines): excluded, whatever its residual."""
    rows, held = [], {"model": [], "system": []}
    for i in range(11):
        model, gpu = ("A" if i < 5 else "B", f"g{1 + i % 2}") if i < 10 else ("C", "g3")
        rows.append({"backend": "vllm", "model_path": model, "system": gpu,
                     "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 10.0})
        r_model, r_gpu = (0.1 if i < 5 else -0.1, 0.3) if i < 10 else (5.0, 5.0)
        for s, r in (("model", r_model), ("system", r_gpu)):
            held[s].append({"status": "ok", "pred_ttft_ms": 100.0 / math.exp(r), "pred_tpot_ms": 10.0})
    fitted, pooled = {"vllm": {"source": "fitted"}}, {"vllm": {"source": "pooled"}}
    res = {"held_out": held, "folds": [
        {"scheme": "model", "group": "A", "rows": list(range(5)), "params": fitted},
        {"scheme": "model", "group": "B", "rows": list(range(5, 10)), "params": fitted},
        {"scheme": "model", "group": "C", "rows": [10], "params": pooled},
        {"scheme": "system", "group": "g1", "rows": list(range(0, 10, 2)), "params": fitted},
        {"scheme": "system", "group": "g2", "rows": list(range(1, 10, 2)), "params": fitted},
        {"scheme": "system", "group": "g3", "rows": [10], "params": pooled}]}
    iv = cv.conformal_intervals(rows, res, ["model", "system"], min_rows=5)
    assert iv["scheme"] == "model/system"
    # 20 residuals in 4 groups of 5 (model A +0.1, model B -0.1, GPU g1 / g2 +0.3), each group 1/4
    # of the pooled CDF: F(-0.1) = 1/4, F(0.1) = 1/2, F(0.3) = 1 -> 10th / 90th percentiles -0.1 and 0.3
    q = iv["engines"]["vllm"]["ttft"]
    assert q["n"] == 20 and math.isclose(q["lo"], -0.1) and math.isclose(q["hi"], 0.3)
    cov = iv["coverage_by_scheme"]
    # model A scored with rows 5-9's residuals: group B -0.1 (1/3), g1 and g2 +0.3 (1/3 each)
    # -> [-0.1, 0.3] covers +0.1; B with A's: A +0.1 (1/3), g1, g2 +0.3 -> [0.1, 0.3] misses -0.1;
    # g1 with the odd rows': A +0.1, B -0.1, g2 +0.3, 1/3 each -> [-0.1, 0.3] covers 0.3
    assert cov["model"]["ttft"] == {"share": 0.5, "n": 10}
    assert cov["system"]["ttft"] == {"share": 1.0, "n": 10}
    assert iv["coverage_other_groups"]["ttft"] == {"share": 0.75, "n": 20}
    assert iv["coverage_other_groups"]["tpot"] == {"share": 1.0, "n": 20}


def test_conformal_intervals_weigh_each_held_out_group_the_same():
    """Leave-one-model-out residuals: model A's 60 rows 0.0, B's 3 rows +1.0, C's 3 rows
    -1.0. Plain ranks over the 66 rows: ceil(67 x 0.9) = 61st and floor(67 x 0.1) = 6th,
    both 0.0 -> [0, 0]; each model 1/3 of the pooled CDF: [-1, 1]. Coverage one level
    out: A from B and C (1/2 each: [-1, 1], covers its 60 rows), B from A and C (F(-1) =
    1/2, F(0) = 1: [-1, 0], misses its 3 rows), C from A and B ([0, 1], misses 3): 60 of 66."""
    resid = [0.0] * 60 + [1.0] * 3 + [-1.0] * 3
    groups = {"A": list(range(60)), "B": [60, 61, 62], "C": [63, 64, 65]}
    rows = [{"backend": "vllm", "model_path": next(g for g, idx in groups.items() if i in idx),
             "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 10.0} for i in range(66)]
    held = {"model": [{"status": "ok", "pred_ttft_ms": 100.0 / math.exp(r), "pred_tpot_ms": 10.0} for r in resid]}
    fitted = {"vllm": {"source": "fitted"}}
    res = {"held_out": held, "folds": [{"scheme": "model", "group": g, "rows": idx, "params": fitted}
                                       for g, idx in groups.items()]}
    iv = cv.conformal_intervals(rows, res, ["model"], min_rows=5)
    q = iv["engines"]["vllm"]["ttft"]
    assert q["n"] == 66 and q["groups"] == 3
    assert math.isclose(q["lo"], -1.0) and math.isclose(q["hi"], 1.0)
    assert iv["coverage_other_groups"]["ttft"] == {"share": 60 / 66, "n": 66}
    assert iv["coverage_other_groups"]["tpot"] == {"share": 1.0, "n": 66}


def test_score_only_rows_never_enter_a_fit_and_are_simulated_only_under_fitted_values():
    """fit_row: rows of table "moe" (model M, a 40 ms-latency model) are scored with the
    values fitted on the other rows, never simulated during the fits' search."""
    simulated: list = []

    def predict(sub, engine, params):
        simulated.extend((r["row_key"], params["frontend_latency_s"]) for r in sub)
        return [{"status": "ok", "pred_ttft_ms": 100.0 + 5000 * params["frontend_latency_s"],
                 "pred_tpot_ms": 10.0, "reason": ""} for _ in sub]

    rows = _rows()
    for i in range(12):
        rows.append({"row_key": f"M{i}", "backend": "vllm", "model_path": "M", "system": "g", "table": "moe",
                     "silicon_ttft_ms": 300.0, "silicon_tpot_ms": 10.0})
    cache = cv.PredictionCache(rows, predict)
    res = cv.cross_validate(cache, ["model"], fit_row=lambda r: r.get("table") != "moe")
    m_rows = [i for i, r in enumerate(rows) if r["model_path"] == "M"]
    ins = res["in_sample"]["params"]["vllm"]["params"]["frontend_latency_s"]
    by = {f["group"]: f for f in res["folds"]}
    # the fold without M fits the same rows as the in-sample fit: the same values (one fit)
    assert by["M"]["params"]["vllm"] is res["in_sample"]["params"]["vllm"]
    # the dense rows were simulated at several values during the search; M's rows once each,
    # under the in-sample values, and never at the prior or another grid value
    assert len({lat for key, lat in simulated if not key.startswith("M")}) > 1
    assert sorted(lat for key, lat in simulated if key.startswith("M")) == [ins] * 12
    assert all(res["held_out"]["model"][i]["pred_ttft_ms"] == 100.0 + 5000 * ins for i in m_rows)
    # without the filter M's rows enter the fits and are simulated during the search
    simulated.clear()
    cv.cross_validate(cv.PredictionCache(rows, predict), ["model"])
    assert len({lat for key, lat in simulated if key.startswith("M")}) > 1


def test_frontend_keys_shared_by_every_engine_host_overheads_per_engine():
    """36 vLLM rows want frontend latency 10 ms (TTFT 150 = 100 + 5000 x 0.01), 12 SGLang rows
    want 0 (TTFT 100): the shared key takes the value of the rows together, 10 ms for both
    (mean |log error| 36 x 0 + 12 x log 1.5 beats 36 x log 1.5). The host overhead is each
    engine's own: TPOT = 10 + 1000 x cpu_step_overhead_s, measured 12 (vLLM: 2 ms) and
    10.5 (SGLang: 0.5 ms). trtllm has no rows: its host overhead is fitted on the others'
    rows together (pooled), its frontend latency is the shared one."""
    rows = []
    for eng, n, ttft, tpot in (("vllm", 36, 150.0, 12.0), ("sglang", 12, 100.0, 10.5)):
        rows += [{"row_key": f"{eng}{i}", "backend": eng, "model_path": "A", "system": "g",
                  "silicon_ttft_ms": ttft, "silicon_tpot_ms": tpot} for i in range(n)]
    rows.append({"row_key": "t", "backend": "trtllm", "model_path": "B", "system": "g",
                 "silicon_ttft_ms": 100.0, "silicon_tpot_ms": 10.0})

    def predict(sub, engine, params):
        return [{"status": "ok", "pred_ttft_ms": 100.0 + 5000 * params["frontend_latency_s"],
                 "pred_tpot_ms": 10.0 + 1000 * params["cpu_step_overhead_s"], "reason": ""} for _ in sub]

    cache = cv.PredictionCache(rows, predict)
    fit = cv.fit_fold(cache, list(range(48)), ["sglang", "trtllm", "vllm"])
    assert fit["vllm"]["params"]["frontend_latency_s"] == fit["sglang"]["params"]["frontend_latency_s"] == 0.01
    assert fit["trtllm"]["params"]["frontend_latency_s"] == 0.01
    assert fit["vllm"]["params"]["cpu_step_overhead_s"] == 2e-3
    assert fit["sglang"]["params"]["cpu_step_overhead_s"] == 0.5e-3
    assert fit["vllm"]["source"] == fit["sglang"]["source"] == "fitted"
    assert fit["trtllm"]["source"].startswith("pooled")
    # the pooled host overhead: TPOT 12 (36 rows) vs 10.5 (12 rows) -> 2 ms leaves 12 rows at log(12 / 10.5)
    assert fit["trtllm"]["params"]["cpu_step_overhead_s"] == 2e-3
    # SGLang's own loss under the shared 10 ms: log(150 / 100) per row, TPOT exact
    assert math.isclose(fit["sglang"]["loss"], math.log(1.5))
    med = cv.fit_fold(cache, list(range(48)), ["sglang", "trtllm", "vllm"], fallback="median")
    assert med["trtllm"]["params"]["cpu_step_overhead_s"] == statistics.median([2e-3, 0.5e-3])
    assert med["trtllm"]["params"]["frontend_latency_s"] == 0.01
