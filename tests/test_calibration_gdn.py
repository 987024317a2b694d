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
                 seq_s=2e-7, decode_launch_s=2e-6, cta_token_s=5e-8)


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
    same = (rows["decode"] == rows["served_decode"]).to_numpy()
    pred, step = predict(TRUE, inputs(rows, hw), hw), step_model_predict(rows, hw)
    np.testing.assert_allclose(pred[same], step[same], rtol=1e-9)
    # a one-token context row times the prefill kernels; the step model serves it as a
    # decode (vLLM's GDN backend splits by query length): the decode launch, not prefill's
    one = (~same) & (rows["batch_size"] == 1).to_numpy()
    assert one.any() and np.all(step[one] < pred[one])
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


def test_gdn_layer_terms_by_hand():
    """gdn_layer_s: decode pays decode_launch_s per kernel, prefill launch_s, and a
    prefill of few (sequence, value head) pairs is bound by the serial chunk walk."""
    from sim.cost_model.layer_kinds import gdn_layer_s  # noqa: PLC0415
    hw = get_hardware("h100_sxm")  # 132 SMs
    p = TRUE
    # decode, 4 sequences, no FLOPs, 1e6 B: 1e6 / (3.35e12 x 0.7) + 2 x 2 us + 4 x 0.2 us
    t = gdn_layer_s(p, hw, 0.0, 1e6, 4.0, True, 1.0, 64.0)
    assert t == pytest.approx(1e6 / (3.35e12 * 0.7) + 4e-6 + 0.8e-6, rel=1e-12)
    # prefill, 1 sequence x 2 value heads x 8,192 tokens, tiny roofline: serial walk
    # 8,192 x 50 ns = 409.6 us + 2 x 4 us + 0.2 us
    t = gdn_layer_s(p, hw, 1.0, 1.0, 1.0, False, 8192.0, 2.0)
    assert t == pytest.approx(409.6e-6 + 8e-6 + 0.2e-6, rel=1e-12)
    # 200 sequences x 2 heads = 400 pairs: ceil(400 / 132) = 4 waves x 100 tokens x 50 ns
    t = gdn_layer_s(p, hw, 1.0, 1.0, 200.0, False, 100.0, 2.0)
    assert t == pytest.approx(4 * 100 * 5e-8 + 8e-6 + 200 * 0.2e-6, rel=1e-12)
    # without decode_launch_s the decode path falls back to launch_s
    q = p.model_copy(update={"decode_launch_s": None})
    assert gdn_layer_s(q, hw, 0.0, 0.0, 1.0, True) == pytest.approx(8e-6 + 0.2e-6, rel=1e-12)


def test_gdn_serial_tokens_by_hand():
    from sim.cost_model.layer_kinds import gdn_serial_tokens  # noqa: PLC0415
    # 2 sequences x 4 heads on 132 SMs: one wave, the longest sequence's 300 tokens
    assert gdn_serial_tokens(8, 132, 300.0, 200.0) == 300.0
    # 100 sequences x 4 heads: ceil(400 / 132) = 4 waves x the mean 200 tokens
    assert gdn_serial_tokens(400, 132, 300.0, 200.0) == 800.0
