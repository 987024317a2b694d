"""Fit and score MLA (multi-head latent attention) against whole-module tables.

The ``*_mla_{generation,context}_module`` tables time one DeepSeek-V3 MLA module
(q/kv low-rank projections, attention, o_proj) at ``num_heads`` heads per rank
(TP = 128 / num_heads), ``gemm_type`` weights and ``kv_cache_dtype`` cache. The
cost model's prediction of a row is one layer of :class:`~sim.cost_model.CostModel`'s
``qkv_proj`` + ``attention`` + ``o_proj`` operators (DeepSeek-V3 from
``../shared/models``) for a batch of ``batch_size`` identical sequences (decode:
one new token over ``step`` cached; context: ``isl`` new). The fit
(:func:`fit_mla`) keeps the projections' GEMM families and fits the ``fitted_v1``
``mla`` section (:class:`~sim.hardware.efficiency.MlaParams`) on the attention
remainder, with the formula the step model uses (``layer_kinds.mla_layer_s``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from calibration.fit import fit_log_params
from calibration.tables import read_mla_module_table
from sim.cost_model import CostModel
from sim.cost_model.layer_kinds import MlaAttention, mla_layer_s
from sim.errors import ConfigError
from sim.hardware.efficiency import MlaParams
from sim.hardware.profile import HardwareProfile
from sim.model_spec import get_model
from sim.paths import shared_dir

#: the model the module tables measure (constant ``model`` column, dropped)
MLA_MODEL = "deepseek-ai--DeepSeek-V3_config.json"
FULL_HEADS = 128
GEMM_TYPES = {"bfloat16": "bf16", "fp8_block": "fp8_block", "fp8": "fp8"}
PARAMS = ("decode_compute_efficiency", "decode_memory_efficiency", "prefill_compute_efficiency",
          "prefill_memory_efficiency", "launch_s", "layer_s", "token_s")
_BOUNDS = {"launch_s": (1e-8, 1e-3), "layer_s": (1e-8, 1e-3), "token_s": (1e-12, 1e-5)}


def read_module_tables(directory: str | Path, engine: str = "vllm") -> pd.DataFrame:
    """Rows of ``engine``'s generation and context module tables
    (``calibration.tables.read_mla_module_table``), with ``source``."""
    out = []
    for phase in ("generation", "context"):
        for path in sorted(Path(directory).glob(f"{engine}-*_mla_{phase}_module.csv*")):
            df = read_mla_module_table(path)
            df["source"] = path.name
            out.append(df)
    if not out:
        raise ConfigError(f"{directory}: no {engine} MLA module tables")
    return pd.concat(out, ignore_index=True)


def _model():
    return get_model(str(shared_dir() / "models" / MLA_MODEL))


def inputs(rows: pd.DataFrame, hw: HardwareProfile) -> dict[str, np.ndarray]:
    """Per row: the projections' time (the cost model's GEMMs, one layer) and
    the attention's FLOPs, bytes and new tokens (``MlaAttention`` costs, one layer)."""
    model = _model()
    L = model.num_hidden_layers
    gemm = np.zeros(len(rows))
    flops, nbytes = np.zeros(len(rows)), np.zeros(len(rows))
    for (h, g, kv), s in rows.groupby(["num_heads", "gemm_type", "kv_cache_dtype"]):
        tp = FULL_HEADS // int(h)
        kvd = "fp8" if str(kv).startswith("fp8") else "auto"
        cm = CostModel(model, hw, tensor_parallel_size=tp, quantization=GEMM_TYPES.get(str(g), str(g)),
                       kv_cache_dtype=kvd)
        mla = MlaAttention(model, hw, tp, cm.kv_bytes, 1)
        for i, r in zip(s.index, s.itertuples(index=False)):
            T = float(r.batch_size * r.new)
            gemm[i] = (cm._qkv(T) + cm._o(T)) / L
            if r.decode:
                flops[i], nbytes[i] = mla.decode_cost(float(r.batch_size),
                                                      float(r.batch_size * (r.cached + 1)))
            else:
                n, b = float(r.new), float(r.batch_size)
                flops[i], nbytes[i] = mla.prefill_cost(b * n, 0.0, b * (n * n + n) / 2.0)
    return {"gemm": gemm, "flops": flops, "nbytes": nbytes,
            "tokens": (rows["batch_size"] * rows["new"]).to_numpy(float),
            "decode": rows["decode"].to_numpy(bool)}


def step_model_predict(rows: pd.DataFrame, hw: HardwareProfile) -> np.ndarray:
    """Each row as the simulator times it: one layer's ``qkv_proj`` + ``attention``
    + ``o_proj`` of :meth:`CostModel.step_time` (all layers / layer count)."""
    model = _model()
    L = model.num_hidden_layers
    out = np.zeros(len(rows))
    for (h, g, kv), s in rows.groupby(["num_heads", "gemm_type", "kv_cache_dtype"]):
        kvd = "fp8" if str(kv).startswith("fp8") else "auto"
        cm = CostModel(model, hw, tensor_parallel_size=FULL_HEADS // int(h),
                       quantization=GEMM_TYPES.get(str(g), str(g)), kv_cache_dtype=kvd)
        for i, r in zip(s.index, s.itertuples(index=False)):
            b = int(r.batch_size)
            ops = cm.step_time(np.full(b, int(r.new)), np.full(b, int(r.cached))).ops
            out[rows.index.get_loc(i)] = (ops["qkv_proj"] + ops["attention"] + ops["o_proj"]) / L
    return out


def predict(p: MlaParams, a: dict, hw: HardwareProfile) -> np.ndarray:
    return a["gemm"] + mla_layer_s(p, hw, a["flops"], a["nbytes"], a["tokens"], a["decode"])


def fit_mla(rows: pd.DataFrame, hw: HardwareProfile, a: dict | None = None) -> MlaParams:
    """Least squares on log time (soft-L1 after a plain pass, as ``calibration.fit``)."""
    a = a if a is not None else inputs(rows, hw)
    return fit_log_params(MlaParams, PARAMS, lambda p: predict(p, a, hw), rows["latency_s"].to_numpy(float),
                          [0.6, 0.7, 0.5, 0.7, 5e-6, 2e-5, 1e-8], [_BOUNDS.get(n, (0.02, 1.0)) for n in PARAMS])


def holdout_heads(rows: pd.DataFrame, seed: int = 0, frac: float = 0.3) -> np.ndarray:
    """True for rows of a seeded ``frac`` of the head counts (whole shapes held out)."""
    heads = np.sort(rows["num_heads"].unique())
    n_out = min(max(1, int(round(frac * len(heads)))), len(heads) - 1)
    held = set(np.random.default_rng(seed).permutation(heads)[:n_out].tolist())
    return rows["num_heads"].isin(held).to_numpy()


def engine_fit(directory: str | Path, engine: str, hw: HardwareProfile, max_rows: int | None = 3000,
               seed: int = 0) -> tuple[MlaParams, dict[str, tuple[int, float, float]]]:
    """``engine``'s own MLA module fit (the ``fitted_v1`` ``mla_engines`` entry) on its
    module tables (a seeded sample of ``max_rows``), and scores (rows, MAPE %, median
    APE %): ``held_out`` (fitted without a seeded 30 % of the head counts, scored on
    them), ``in_sample`` and ``default`` (the profile's ``mla``, fitted on vLLM's
    tables, on the same rows as the step model times them)."""
    rows = read_module_tables(directory, engine)
    if max_rows is not None and len(rows) > max_rows:
        rows = rows.sample(n=max_rows, random_state=seed)
    rows = rows.reset_index(drop=True)
    y = rows["latency_s"].to_numpy(float)
    a = inputs(rows, hw)
    ho = holdout_heads(rows, seed)
    held = fit_mla(rows[~ho].reset_index(drop=True), hw, {k: v[~ho] for k, v in a.items()})
    e_ho = np.abs(predict(held, {k: v[ho] for k, v in a.items()}, hw) / y[ho] - 1)
    full = fit_mla(rows, hw, a)
    e_in = np.abs(predict(full, a, hw) / y - 1)
    e_def = np.abs(step_model_predict(rows, hw) / y - 1)
    sc = lambda e: (len(e), 100 * float(e.mean()), 100 * float(np.median(e)))  # noqa: E731
    return full, {"held_out": sc(e_ho), "in_sample": sc(e_in), "default": sc(e_def)}


def main(argv=None) -> int:
    """``python -m calibration.mla DIR --engine trtllm [--profile h100_sxm]``: an engine's
    MLA module fit and its scores (``engine_fit``)."""
    import argparse

    from sim.hardware.profile import get_hardware

    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("directory")
    ap.add_argument("--engine", required=True)
    ap.add_argument("--profile", default="h100_sxm")
    ap.add_argument("--max-rows", type=int, default=3000)
    a = ap.parse_args(argv)
    params, scores = engine_fit(a.directory, a.engine, get_hardware(a.profile), a.max_rows)
    for k, (n, mape, md) in scores.items():
        print(f"{k}: {n} rows, MAPE {mape:.1f} %, median APE {md:.1f} %")
    print(params.model_dump_json())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

