"""MLA module calibration (calibration.mla): the fit's formula equals what the
step model predicts, known ``mla`` parameters are recovered, and check_tables
scores a tiny module table with the expected error."""

import numpy as np
import pandas as pd
import pytest

from calibration.check_tables import check_dir
from calibration.mla import MLA_MODEL, fit_mla, inputs, predict, step_model_predict
from sim.hardware.efficiency import MlaParams
from sim.hardware.profile import get_hardware
from sim.paths import shared_dir

pytestmark = pytest.mark.skipif(not (shared_dir() / "models" / MLA_MODEL).exists(),
                                reason="../shared/models (DeepSeek-V3 config) absent")

TRUE = MlaParams(decode_compute_efficiency=0.7, decode_memory_efficiency=0.8,
                 prefill_compute_efficiency=0.6, prefill_memory_efficiency=0.3, launch_s=1e-5,
                 layer_s=4e-5, token_s=2e-8)


def module_rows() -> pd.DataFrame:
    out = []
    for h in (128, 32, 8):
        for b in (1, 8, 64, 256):
            for step in (16, 1024, 16384):
                out.append(dict(kernel_source="k", kv_cache_dtype="bfloat16", gemm_type="bfloat16",
                                num_heads=h, batch_size=b, decode=True, new=1, cached=step))
            for isl in (64, 1024, 4096):
                out.append(dict(kernel_source="k", kv_cache_dtype="bfloat16", gemm_type="bfloat16",
                                num_heads=h, batch_size=b, decode=False, new=isl, cached=0))
    return pd.DataFrame(out)


def _hw(mla):
    hw = get_hardware("h100_sxm")
    return hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update={"mla": mla})})


def test_fit_formula_is_the_step_models():
    rows = module_rows()
    hw = _hw(TRUE)
    np.testing.assert_allclose(predict(TRUE, inputs(rows, hw), hw), step_model_predict(rows, hw),
                               rtol=1e-9)


def test_fit_recovers_known_parameters():
    rows = module_rows()
    hw = _hw(None)
    a = inputs(rows, hw)
    rows["latency_s"] = predict(TRUE, a, hw)
    p = fit_mla(rows, hw, a)
    assert np.abs(predict(p, a, hw) / rows["latency_s"] - 1).max() < 0.02
    assert abs(p.layer_s / TRUE.layer_s - 1) < 0.1
    assert abs(p.decode_memory_efficiency / 0.8 - 1) < 0.05


def test_check_tables_scores_a_tiny_module_table(tmp_path):
    rows = module_rows()
    hw = _hw(TRUE)
    pred = step_model_predict(rows, hw)
    for phase, dec in (("generation", True), ("context", False)):
        s = rows[rows["decode"] == dec].copy()
        s["latency"] = pred[s.index] * 1e3 / 0.8  # measured 25 % above: APE 20 %
        col = "step" if dec else "isl"
        s[col] = s["cached"] if dec else s["new"]
        s[["kernel_source", "kv_cache_dtype", "gemm_type", "num_heads", "batch_size", col, "latency"]].to_csv(
            tmp_path / f"x_mla_{phase}_module.csv", index=False)
    res = check_dir(tmp_path, hw)
    assert [r.kind for r in res] == ["mla_module", "mla_module"]
    for r in res:
        n, mape, med = r.bands["all"]
        assert abs(mape - 20.0) < 1e-6 and abs(med - 20.0) < 1e-6
