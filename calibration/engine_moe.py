"""Fit one engine's own fused-MoE kernels (the ``fitted_v1`` ``moe_engines`` entry).

    python -m calibration.engine_moe ../shared/kernels/h100_sxm --engine trtllm --profile h100_sxm

The profile's ``moe`` families are fitted to vLLM's table (``vllm-*_moe``: its
Triton ``fused_moe``). Other engines run other kernels: TensorRT-LLM's PyTorch
backend runs its CUTLASS fused MoE (``moe_torch_flow_cutlass`` in
``trtllm-*_moe``; ``tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py``,
github.com/NVIDIA/TensorRT-LLM), which on the same H100 shapes takes 0.65-0.9x
the time the vLLM fit gives (balanced routing, fp8_block: median 0.78x at <= 16
tokens, 0.65x above 1,024). This fits the same ``MoeParams`` form to the engine's
own table, per expert weight format, with the kernel ``calibration.datasets``
picks for the format (the most measured one), and scores it on held-out whole
shapes (a seeded 30 % of the (hidden, inter, top_k, experts) shapes, fitted on
the rest).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from calibration.datasets import family_rows
from calibration.fit import Device, ape, fit_any, predict
from sim.hardware.efficiency import MoeParams
from sim.hardware.profile import HardwareProfile, get_hardware

SHAPE = ("hidden_size", "inter_size", "topk", "num_experts")


def holdout_shapes(rows: pd.DataFrame, seed: int = 0, frac: float = 0.3) -> np.ndarray:
    """True for rows of a seeded ``frac`` of the (hidden, inter, top_k, experts) shapes."""
    key = rows[list(SHAPE)].astype(str).agg("_".join, axis=1)
    shapes = np.sort(key.unique())
    n_out = min(max(1, int(round(frac * len(shapes)))), len(shapes) - 1)
    held = set(np.random.default_rng(seed).permutation(shapes)[:n_out].tolist())
    return key.isin(held).to_numpy()


def engine_moe_fit(directory: str | Path, engine: str, hw: HardwareProfile, max_rows: int | None = 6000,
                   seed: int = 0) -> tuple[dict[str, MoeParams], dict[str, dict[str, tuple[int, float, float]]]]:
    """``engine``'s fused-MoE families (format -> params, fitted on a seeded sample of
    ``max_rows`` balanced rows each) and scores per format (rows, MAPE %, median APE %):
    ``held_out`` (fitted without a seeded 30 % of the shapes, scored on them),
    ``in_sample``, and ``default`` (the profile's ``moe`` family on the same rows)."""
    dev = Device.of(hw)
    rows = family_rows(directory, engine, kinds=("moe",))
    fits: dict[str, MoeParams] = {}
    scores: dict[str, dict[str, tuple[int, float, float]]] = {}
    for fam in sorted(f for f in rows if f.startswith("moe.") and "@" not in f):
        r = rows[fam].rows
        if max_rows is not None and len(r) > max_rows:
            r = r.sample(n=max_rows, random_state=seed)
        r = r.reset_index(drop=True)
        y = r["latency_s"].to_numpy(float)
        ho = holdout_shapes(r, seed)
        held = fit_any(fam, r[~ho].reset_index(drop=True), dev).params
        e_ho = ape(predict(fam, held, r[ho].reset_index(drop=True), dev), y[ho])
        full = fit_any(fam, r, dev).params
        e_in = ape(predict(fam, full, r, dev), y)
        fmt = fam.split(".", 1)[1]
        fits[fmt] = full
        sc = {"held_out": (int(ho.sum()), float(e_ho.mean()), float(np.median(e_ho))),
              "in_sample": (len(r), float(e_in.mean()), float(np.median(e_in)))}
        default = hw.efficiency.moe.get(fmt)
        if default is not None:
            e_def = ape(predict(fam, default, r, dev), y)
            sc["default"] = (len(r), float(e_def.mean()), float(np.median(e_def)))
        scores[fmt] = sc
    return fits, scores


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--profile", default="h100_sxm")
    ap.add_argument("--max-rows", type=int, default=6000)
    args = ap.parse_args(argv)
    fits, scores = engine_moe_fit(args.directory, args.engine, get_hardware(args.profile), args.max_rows)
    for fmt, sc in scores.items():
        print(f"# moe_engines.{args.engine}.{fmt}: "
              + "; ".join(f"{k} MAPE {m:.1f} % median APE {md:.1f} % (n={n})" for k, (n, m, md) in sc.items()),
              file=sys.stderr)
    import yaml  # noqa: PLC0415

    from calibration.profile_writer import _round  # noqa: PLC0415
    out = {args.engine: {fmt: _round(p.model_dump()) for fmt, p in fits.items()}}
    print(yaml.safe_dump({"moe_engines": out}, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
