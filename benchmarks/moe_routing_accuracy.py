"""Fused-MoE kernel tables' skewed-routing rows (``distribution`` =
``power_law_<alpha>``) scored with the cost model, held out by whole layer
shape: each served fused-MoE family (``moe.<format>``) is fitted on the
balanced rows of 70 % of vLLM 0.24's H100 shapes (seed 0, as
``benchmarks/calibration_accuracy.py``), and the power-law rows of the other
shapes -- of the vLLM, SGLang and TensorRT-LLM tables -- are predicted with

- ``uniform``: uniform random routing (the model before skew was modelled),
- ``power_law``: ``sim.cost_model.moe``'s expectation of aiconfigurator's
  power-law expert loads on the most loaded EP rank (no new parameters).

APE = |predicted - measured| / measured; median and mean (MAPE) in %.

    PYTHONPATH=. python3 benchmarks/moe_routing_accuracy.py [--out reports/calibration/moe_routing.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from calibration.datasets import family_rows, holdout_mask
from calibration.fit import Device, fit_any
from calibration.tables import MOE_DTYPES, READERS
from sim.cost_model.operators import moe_layer_time_s
from sim.hardware.profile import get_hardware
from sim.paths import shared_dir

GPU = "h100_sxm"
TABLES = {"vLLM 0.24": "vllm-0.24.0_moe.csv.gz", "SGLang 0.5.14": "sglang-0.5.14_moe.csv.gz",
          "TensorRT-LLM 1.3.0rc20": "trtllm-1.3.0rc20_moe.csv.gz"}
SHAPE = ["hidden_size", "inter_size", "topk", "num_experts"]
FIT_ROWS = 2000  # seeded subsample of the training rows (as calibration_accuracy's MOE_FIT_ROWS)


def held_out_fits(seed: int = 0):
    """(hardware profile with the held-out fits installed, format -> training shapes)."""
    hw = get_hardware(GPU)
    dev = Device.of(hw)
    fams = family_rows(shared_dir() / "kernels" / GPU, "vllm")
    moe, train_shapes = dict(hw.efficiency.moe), {}
    for fam, fr in fams.items():
        if not fam.startswith("moe.") or "@" in fam:
            continue
        rows = fr.rows
        held = holdout_mask(rows, "moe", 0.3, seed)
        train = rows[~held]
        if len(train) > FIT_ROWS:
            train = train.sample(FIT_ROWS, random_state=seed)
        fmt = fam.split(".", 1)[1]
        moe[fmt] = fit_any(fam, train, dev).params
        train_shapes[fmt] = {tuple(t) for t in rows[~held][SHAPE].itertuples(index=False, name=None)}
        print(f"fitted {fam} on {len(train)} rows", file=sys.stderr)
    eff = hw.efficiency.model_copy(update={"moe": moe})
    return hw.model_copy(update={"efficiency": eff}), train_shapes


def _tables():
    """(engine, its fused-MoE table) for each engine whose table is in ../shared."""
    for engine, name in TABLES.items():
        path = shared_dir() / "kernels" / GPU / name
        if path.exists():
            yield engine, READERS["moe"](path)


def score(hw, train_shapes) -> list[dict]:
    out = []
    for engine, df in _tables():
        dist = df["distribution"].astype(str)
        fmt = df["moe_dtype"].astype(str).map(MOE_DTYPES)
        shape = list(df[SHAPE].itertuples(index=False, name=None))
        for d in sorted(x for x in dist.unique() if x.startswith("power_law")):
            for f in sorted(fmt.dropna().unique()):
                if f not in hw.efficiency.moe:
                    continue
                held = np.array([s not in train_shapes.get(f, set()) for s in shape])
                m = ((dist == d) & (fmt == f)).to_numpy() & held
                if not m.any():
                    continue
                s = df[m]
                y = s["latency_s"].to_numpy()
                args = (s["num_tokens"].to_numpy(), s["hidden_size"].to_numpy(),
                        (s["inter_size"] / s["moe_tp_size"]).to_numpy(), s["num_experts"].to_numpy(),
                        s["topk"].to_numpy(), f, s["moe_ep_size"].to_numpy().astype(float))
                row = {"engine": engine, "distribution": d, "format": f, "n": int(m.sum()),
                       "ep>1": int((s["moe_ep_size"] > 1).sum())}
                for r in ("uniform", d):
                    try:
                        pred = moe_layer_time_s(hw, *args, routing=r)
                    except ValueError:  # a tree without power-law routing (the before)
                        pred = np.full(len(y), np.nan)
                    err = 100.0 * np.abs(pred - y) / y
                    key = "uniform" if r == "uniform" else "power_law"
                    row[f"{key}_median"], row[f"{key}_mape"] = float(np.median(err)), float(err.mean())
                    ep = (s["moe_ep_size"] > 1).to_numpy()
                    if ep.any():
                        row[f"{key}_ep_median"] = float(np.median(err[ep]))
                out.append(row)
    return out


KEY = ["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
       "moe_ep_size", "kernel_source"]


def skew_ratios(hw) -> list[dict]:
    """Measured vs modelled skew: latency(power_law) / latency(balanced) on the
    same row key, median by EP size, rows with T >= 1024 tokens (where the
    measured rank's extra rows show); the kernel fit's error cancels in the ratio."""
    out = []
    for engine, df in _tables():
        df = df[df["moe_dtype"].astype(str).map(MOE_DTYPES).isin(list(hw.efficiency.moe))]
        p = df.pivot_table(index=KEY, columns="distribution", values="latency_s").reset_index()
        p = p[p["num_tokens"] >= 1024]
        fmt = p["moe_dtype"].astype(str).map(MOE_DTYPES)
        for d in sorted(c for c in p.columns if str(c).startswith("power_law")):
            q = p.dropna(subset=[d, "balanced"])
            for f in sorted(fmt[q.index].unique()):
                s = q[fmt[q.index] == f]
                args = (s["num_tokens"].to_numpy(), s["hidden_size"].to_numpy(),
                        (s["inter_size"] / s["moe_tp_size"]).to_numpy(), s["num_experts"].to_numpy(),
                        s["topk"].to_numpy(), f, s["moe_ep_size"].to_numpy().astype(float))
                model = moe_layer_time_s(hw, *args, routing=d) / moe_layer_time_s(hw, *args, routing="balanced")
                meas = (s[d] / s["balanced"]).to_numpy()
                for ep in sorted(s["moe_ep_size"].unique()):
                    m = (s["moe_ep_size"] == ep).to_numpy()
                    out.append({"engine": engine, "distribution": d, "format": f, "ep": int(ep), "n": int(m.sum()),
                                "measured": float(np.median(meas[m])), "model": float(np.median(model[m]))})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    hw, train = held_out_fits()
    rows = score(hw, train)
    lines = ["| engine | distribution | format | held-out rows (EP > 1) | uniform median / MAPE % "
             "| power_law median / MAPE % | EP > 1 median: uniform -> power_law % |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['engine']} | {r['distribution']} | {r['format']} | {r['n']} ({r['ep>1']}) | "
                     f"{r['uniform_median']:.1f} / {r['uniform_mape']:.1f} | "
                     f"{r['power_law_median']:.1f} / {r['power_law_mape']:.1f} | "
                     + (f"{r['uniform_ep_median']:.1f} -> {r['power_law_ep_median']:.1f}" if "uniform_ep_median" in r else "–")
                     + " |")
    ratios = skew_ratios(hw)
    lines += ["", "Skew ratio latency(power_law) / latency(balanced), median over rows with T >= 1024 "
              "(measured -> model), by moe_ep_size:", ""]
    eps = sorted({r["ep"] for r in ratios})
    lines += ["| engine | distribution | format | " + " | ".join(f"EP {e}" for e in eps) + " |",
              "|---|---|---|" + "---|" * len(eps)]
    groups: dict = {}
    for r in ratios:
        groups.setdefault((r["engine"], r["distribution"], r["format"]), {})[r["ep"]] = r
    for (eng, d, f), by in groups.items():
        cells = [f"{by[e]['measured']:.2f} -> {by[e]['model']:.2f}" if e in by else "–" for e in eps]
        lines.append(f"| {eng} | {d} | {f} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(__doc__.split("\n\n")[0] + "\n\n" + text + "\n")


if __name__ == "__main__":
    main()
