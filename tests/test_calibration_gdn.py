"""Gated DeltaNet calibration (calibration.gdn): the fit's formula equals the step
model's, known ``gdn`` parameters are recovered, check_tables scores a tiny table."""

import numpy as np
import pandas as pd
import pytest

from calibration.check_tables import check_dir
from calibration.gdn import GDN_MODEL, fit_gdn, inputs, predict, read_gdn_layers, step_model_predict
from sim.hardware.efficiency import GdnParams
from sim.hardware.profile import get_hardware
from sim.paths import shared_dir

pytestmark = pytest.mark.skipif(not (shared_dir() / "models" / GDN_MODEL).exists(),
                                reason="../shared/models (Qwen3.5 config) absent")

TRUE = GdnParams(decode_compute_efficiency=0.3, decode_memory_efficiency=0.7,
                 prefill_compute_efficiency=0.2, prefill_memory_efficiency=0.5, launch_s=4e-6,
                 seq_s=2e-7)


def kernel_table(path, latency_of=None) -> None:
    out = []
    for name, k, v in (("m/A", 16, 64), ("m/B", 4, 8)):
        for b in (1, 16, 256):
            for phase, lens in (("generation", (1,)), ("context", (1, 64, 4096))):
                for n in lens:
                    for ks in ("conv", "rule"):
                        out.append(dict(kernel_source=ks, phase=phase, batch_size=b, seq_len=n,
                                        num_tokens=b * n, d_model=4096, num_k_heads=k, num_v_heads=v,
                                        model_name=name, latency=1.0))
    pd.DataFrame(out).to_csv(path, index=False)


def _hw(gdn):
    hw = get_hardware("h100_sxm")
    return hw.model_copy(update={"efficiency": hw.efficiency.model_copy(update={"gdn": gdn})})


def test_fit_formula_is_the_step_models_and_recovers(tmp_path):
    kernel_table(tmp_path / "x_gdn.csv")
    rows = read_gdn_layers(tmp_path / "x_gdn.csv")
    hw = _hw(TRUE)
    np.testing.assert_allclose(predict(TRUE, inputs(rows, hw), hw), step_model_predict(rows, hw), rtol=1e-9)
    hw0 = _hw(None)
    a = inputs(rows, hw0)
    rows["latency_s"] = predict(TRUE, a, hw0)
    p = fit_gdn(rows, hw0, a)
    assert np.abs(predict(p, a, hw0) / rows["latency_s"] - 1).max() < 0.02


def test_check_tables_scores_a_tiny_gdn_table(tmp_path):
    kernel_table(tmp_path / "x_gdn.csv")
    rows = read_gdn_layers(tmp_path / "x_gdn.csv")
    hw = _hw(TRUE)
    pred = step_model_predict(rows, hw)
    df = pd.read_csv(tmp_path / "x_gdn.csv")
    # each layer call's two kernels share its time; measured 25 % above the model: APE 20 %
    key = ["phase", "batch_size", "seq_len", "num_k_heads", "num_v_heads"]
    m = rows[key].assign(t=pred * 1e3 * 1.25 / 2)
    df = df.drop(columns="latency").merge(m, on=key).rename(columns={"t": "latency"})
    df.to_csv(tmp_path / "x_gdn.csv", index=False)
    (r,) = check_dir(tmp_path, hw)
    n, mape, med = r.bands["all"]
    assert r.kind == "gdn" and n == len(rows) and abs(mape - 20.0) < 1e-6 and abs(med - 20.0) < 1e-6
