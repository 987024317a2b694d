"""Score the cost model's per-operator formulas against measured kernel tables.

    python -m calibration.check_tables DIR --profile NAME [--model-free] [--max-rows N]

For every table in DIR (``*_gemm``, ``*_context_attention``,
``*_generation_attention``, ``*_moe``, ``*_gdn``, ``*_mla_context_module`` /
``*_mla_generation_module``, ``nccl_*``; format in ``calibration/tables.py``)
predicts each row the cost model can model -- GEMM: ``gemm_time_s`` (2mnk FLOPs;
bytes of A, B, C); attention: ``attention_uniform_time_s`` on a batch of
identical sequences; fused MoE, GDN and MLA modules: the profile's fitted forms;
NCCL all_reduce: ``all_reduce_time_s`` -- with the
profile's efficiency form (``scalar`` or ``fitted_v1``: size-dependent
efficiencies per kernel family), and prints MAPE and median APE (absolute
percentage error, %) per table and per size band (and per kernel where a table
mixes kernels), plus the rows skipped and why. Unless ``--model-free``, adds a band of the rows whose shapes
occur in the built-in model presets (TP 1, 2, 4, 8), the shapes a simulation uses.
A table it cannot read as its kind is listed as not scored, with the reason; the
folder's other kernel tables (custom all-reduce, MLA BMM, all-to-all, MLA kernels)
are named at the end as not scored here.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from calibration.tables import READERS, find_tables, table_engine
from sim.cost_model.operators import (all_reduce_time_s, attention_uniform_time_s, gemm_time_s,
                                     moe_layer_time_s)
from calibration.tables import MOE_DTYPES
from sim.cost_model.moe import parse_workload_distribution
from sim.cost_model.roofline import gemm_dtype
from sim.errors import ConfigError, ServesimError
from sim.hardware.profile import HardwareProfile, get_hardware
from sim.model_spec import KV_CACHE_DTYPE_BYTES, get_model, list_models

SMALL_M = 128          #: GEMM band: m <= 128 tokens is "small m" (decode-sized)
SHORT_CONTEXT = 1024   #: attention band: isl / step <= 1024 tokens is "short"
SMALL_MESSAGE = 1 << 20  #: NCCL band: <= 1 MiB is "small"
PRESET_TP = (1, 2, 4, 8)


@dataclass
class TableResult:
    """Scores of one table. ``bands``: name -> (rows, MAPE %, median APE %)."""
    path: Path
    kind: str
    num_rows: int
    num_predicted: int
    bands: dict[str, tuple[int, float, float]] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    #: why the table was not scored at all (it could not be read as its kind), else ""
    error: str = ""


def ape(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    """Absolute percentage error, %."""
    return 100.0 * np.abs(pred - meas) / meas


def _skip(mask: np.ndarray, reason: str, skipped: dict[str, int]) -> np.ndarray:
    n = int(mask.sum())
    if n:
        skipped[reason] = skipped.get(reason, 0) + n
    return ~mask


def _preset_shapes() -> tuple[set[tuple[int, int]], set[tuple[int, int, int]]]:
    """GEMM (n, k) and attention (heads, kv_heads, head_dim) per rank of the presets."""
    gemms, attns = set(), set()
    for name in list_models():
        m = get_model(name)
        for tp in PRESET_TP:
            try:
                m.check_tensor_parallel_size(tp)
            except ServesimError:
                continue
            h, d = m.hidden_size, m.head_dim
            q, kv = m.num_attention_heads // tp, m.kv_heads_per_rank(tp)
            inter = (m.moe_intermediate_size if m.is_moe else m.intermediate_size) // tp
            gemms |= {((q + 2 * kv) * d, h), (h, q * d), (2 * inter, h), (h, inter)}
            attns.add((q, kv, d))
    return gemms, attns


def _preset_moe_shapes() -> set[tuple[int, int, int, int]]:
    """(hidden, expert intermediate, top-k, experts) of the MoE presets and ../shared/models."""
    out = set()
    names = list(list_models())
    try:
        from sim.paths import shared_dir  # noqa: PLC0415
        names += [str(p) for p in sorted((shared_dir() / "models").glob("*_config.json"))]
    except Exception:  # noqa: BLE001 -- no ../shared: presets only
        pass
    for name in names:
        try:
            m = get_model(name)
        except (ServesimError, OSError, ValueError):
            continue
        if m.is_moe:
            out.add((m.hidden_size, m.moe_intermediate_size, m.num_experts_per_tok, m.num_experts))
    return out


def _kernel_band(df: pd.DataFrame) -> list[np.ndarray]:
    """A band per kernel where the table mixes kernels (fitted_v1 fits one per dtype)."""
    if "kernel_source" not in df.columns or df["kernel_source"].nunique() < 2:
        return []
    return [("kernel " + df["kernel_source"].astype(str)).to_numpy()]


def _predict(kind: str, df: pd.DataFrame, hw: HardwareProfile, skipped: dict[str, int]):
    """(row mask of predicted rows, predictions s, band labels (list of arrays, one
    label per row each), shape columns for the preset-model band or None)."""
    if kind == "gemm":
        dtypes = df["gemm_dtype"].astype(str)
        known = dtypes.isin(["bfloat16", "float16", "fp8", "fp8_block", "int8", "int4_wo", "nvfp4"])
        keep = _skip(~known.to_numpy(), "gemm_dtype not modelled", skipped)
        pred = np.full(len(df), np.nan)
        for dt in dtypes[keep].unique():
            rows = keep & (dtypes == dt).to_numpy()
            s = df[rows]
            pred[rows] = gemm_time_s(hw, s["m"].to_numpy(), s["n"].to_numpy(), s["k"].to_numpy(),
                                     gemm_dtype(dt), measured=True)
        band = np.where(df["m"].to_numpy() <= SMALL_M, f"small m (<= {SMALL_M})", f"large m (> {SMALL_M})")
        return keep, pred, [band, ("dtype " + dtypes).to_numpy()] + _kernel_band(df), ("n", "k")
    if kind in ("context_attention", "generation_attention"):
        kv = df["kv_cache_dtype"].astype(str)
        keep = _skip((df["window_size"] > 0).to_numpy(), "sliding window not modelled", skipped)
        keep &= _skip((~kv.isin(list(KV_CACHE_DTYPE_BYTES))).to_numpy() & keep,
                      "kv_cache_dtype not modelled", skipped)
        kv_bytes = kv.map(KV_CACHE_DTYPE_BYTES).fillna(2).to_numpy(dtype=float)
        b = df["batch_size"].to_numpy()
        if kind == "context_attention":
            new, ctx, length = df["isl"].to_numpy(), 0, df["isl"].to_numpy()
        else:
            new, ctx, length = 1, df["step"].to_numpy(), df["step"].to_numpy()
        pred = attention_uniform_time_s(hw, b, new, ctx, df["num_heads"].to_numpy(),
                                        df["num_key_value_heads"].to_numpy(),
                                        df["head_dim"].to_numpy(), kv_bytes)
        band = np.where(length <= SHORT_CONTEXT, f"short context (<= {SHORT_CONTEXT})",
                        f"long context (> {SHORT_CONTEXT})")
        return keep, pred, [band, ("kv " + kv).to_numpy()] + _kernel_band(df), (
            "num_heads", "num_key_value_heads", "head_dim")
    if kind == "gdn":
        from calibration.gdn import step_model_predict as gdn_step  # noqa: PLC0415
        pred = gdn_step(df, hw)
        phase = np.where(df["decode"], "decode (one new token)", "prefill")
        return np.ones(len(df), dtype=bool), pred, [phase, ("model " + df["model_name"].astype(str)).to_numpy()], None
    if kind == "mla_module":
        from calibration.mla import step_model_predict  # noqa: PLC0415
        pred = step_model_predict(df, hw)
        length = np.where(df["decode"], df["cached"], df["new"])
        band = np.where(length <= SHORT_CONTEXT, f"short context (<= {SHORT_CONTEXT})",
                        f"long context (> {SHORT_CONTEXT})")
        combo = ("gemm " + df["gemm_type"].astype(str) + " / kv " + df["kv_cache_dtype"].astype(str)).to_numpy()
        return np.ones(len(df), dtype=bool), pred, [band, combo, ("heads " + df["num_heads"].astype(str)).to_numpy()] + _kernel_band(df), None
    if kind == "moe":
        fmt = df["moe_dtype"].astype(str).map(MOE_DTYPES)
        keep = _skip(fmt.isna().to_numpy(), "moe_dtype not modelled", skipped)
        pred = np.full(len(df), np.nan)
        dist = df["distribution"].astype(str)
        # every row with the routing its table measured (sim.cost_model.moe: balanced, or
        # aiconfigurator's power_law_<alpha> on the most loaded EP rank); others uniform
        routing = np.array([d if _routing_known(d) else "uniform" for d in dist])
        for f in fmt[keep].unique():
            for r in np.unique(routing):
                rows = keep & (fmt == f).to_numpy() & (routing == r)
                if not rows.any():
                    continue
                s = df[rows]
                pred[rows] = moe_layer_time_s(hw, s["num_tokens"].to_numpy(), s["hidden_size"].to_numpy(),
                                              (s["inter_size"] / s["moe_tp_size"]).to_numpy(),
                                              s["num_experts"].to_numpy(), s["topk"].to_numpy(), f,
                                              s["moe_ep_size"].to_numpy().astype(float), routing=str(r),
                                              gated=s["gated"].to_numpy())
        band = np.where(df["num_tokens"].to_numpy() <= SMALL_M, f"tokens <= {SMALL_M}",
                        f"tokens > {SMALL_M}")
        combo = ("dtype " + df["moe_dtype"].astype(str) + " / " + dist).to_numpy()
        kern = ("kernel " + df["kernel_source"].astype(str) + " / " + dist).to_numpy()
        return keep, pred, [("routing " + dist).to_numpy(), band, combo, kern], (
            "hidden_size", "inter_size", "topk", "num_experts")
    # nccl
    keep = _skip((df["op_name"] != "all_reduce").to_numpy(), "collective not modelled "
                 "(only all_reduce)", skipped)
    pred = all_reduce_time_s(hw, df["message_bytes"].to_numpy(), df["num_gpus"].to_numpy())
    band = np.where(df["message_bytes"].to_numpy() <= SMALL_MESSAGE, "small message (<= 1 MiB)",
                    "large message (> 1 MiB)")
    return keep, pred, [band, df["num_gpus"].map(lambda p: f"{p} GPUs").to_numpy()], None


def _routing_known(distribution: str) -> bool:
    """True where ``distribution`` is a routing the cost model times."""
    try:
        parse_workload_distribution(distribution)
    except ValueError:
        return False
    return True


def check_table(kind: str, path: Path, hw: HardwareProfile, *, model_free: bool = False,
                max_rows: int | None = None, seed: int = 0) -> TableResult:
    """Score one table; ``max_rows`` samples rows (explicit seed) to keep it fast."""
    df = READERS[kind](path)
    if max_rows is not None and len(df) > max_rows:
        df = df.sample(n=max_rows, random_state=np.random.default_rng(seed).integers(2**31))
    df = df.reset_index(drop=True)
    res = TableResult(path, kind, len(df), 0)
    keep, pred, bands, shape_cols = _predict(kind, df, hw, res.skipped)
    meas = df["latency_s"].to_numpy()
    err = ape(pred, meas)
    res.num_predicted = int(keep.sum())

    def add(name: str, mask: np.ndarray) -> None:
        if mask.any():
            res.bands[name] = (int(mask.sum()), float(err[mask].mean()), float(np.median(err[mask])))

    add("all", keep)
    for band in bands:
        for b in sorted(set(band[keep])):
            add(b, keep & (band == b))
    if not model_free and shape_cols is not None:
        gemms, attns = _preset_shapes()
        shapes = gemms if kind == "gemm" else attns
        if kind == "moe":
            shapes = _preset_moe_shapes()
        tuples = zip(*(df[c].to_numpy() for c in shape_cols))
        add("preset-model shapes", keep & np.array([t in shapes for t in tuples], dtype=bool))
    return res


def check_dir(directory: str | Path, hw: HardwareProfile, *, model_free: bool = False,
              max_rows: int | None = None, seed: int = 0,
              engine: str | None = None) -> list[TableResult]:
    """Score every known table in ``directory`` (of ``engine``, where it holds several).
    A table that cannot be read as its kind (a column missing, e.g. a GDN table with
    ``num_v_heads`` only) is listed with the reason; the others are still scored.
    ConfigError when the folder holds no table of a kind this checker scores."""
    tables = find_tables(directory, engine)
    if not tables:
        raise ConfigError(f"{directory}: no kernel tables this checker scores (*_gemm, *_context_attention, "
                          "*_generation_attention, *_moe, *_gdn, *_mla_*_module, nccl_*; format in "
                          "calibration/tables.py)")
    out = []
    for kind, path in tables:
        try:
            out.append(check_table(kind, path, hw, model_free=model_free, max_rows=max_rows, seed=seed))
        except ConfigError as e:
            out.append(TableResult(path, kind, 0, 0, error=str(e).removeprefix(f"{path}: ")))
    return out


def unscored_tables(directory: str | Path, engine: str | None = None) -> list[str]:
    """Kernel-table files of ``directory`` (of the engine :func:`check_dir` scores) that
    no per-operator check covers here (``*_custom_allreduce``: fitted and checked by
    ``calibrate --from-table``; ``*_mla_bmm``, ``*_context_mla`` / ``*_generation_mla``
    kernels, ``*_moe_a2a``): named so that nothing is passed over in silence."""
    tables = [p for _, p in find_tables(directory, engine)]
    scored = {p.name for p in tables}
    eng = {table_engine(p) for p in tables} - {None}
    return sorted(p.name for p in Path(directory).iterdir()
                  if p.name.endswith((".csv", ".csv.gz")) and p.name not in scored
                  and (not eng or table_engine(p) in eng or table_engine(p) is None))


def format_results(results: list[TableResult]) -> str:
    """Plain-text report: one block per table, one line per band."""
    lines = []
    for r in results:
        if r.error:
            lines.append(f"{r.path.name}  [{r.kind}]  not scored: {r.error}")
            continue
        lines.append(f"{r.path.name}  [{r.kind}]  rows {r.num_rows}, predicted {r.num_predicted}, "
                     f"skipped {r.num_rows - r.num_predicted}")
        for name, (n, mape, med) in r.bands.items():
            lines.append(f"    {name:<44} n={n:<7} MAPE {mape:8.1f} %   median APE {med:7.1f} %")
        for reason, n in r.skipped.items():
            lines.append(f"    skipped {n:>7} rows: {reason}")
    return "\n".join(lines)


def _positive_int(text: str) -> int:
    """``--max-rows``: a whole number >= 1 (argparse's one-line error otherwise)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {n}")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calibration.check_tables", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory", help="folder of kernel tables (e.g. ../shared/kernels/h100_sxm)")
    ap.add_argument("--profile", required=True, help="hardware profile name or YAML path")
    ap.add_argument("--model-free", action="store_true",
                    help="do not consult model presets (no 'preset-model shapes' band)")
    ap.add_argument("--max-rows", type=_positive_int, default=None, help="sample at most N rows per table")
    ap.add_argument("--seed", type=int, default=0, help="seed of the row sample")
    ap.add_argument("--engine", default=None,
                    help="of a folder holding several engines' kernel tables (vllm-*, sglang-*, "
                         "trtllm-*), score this engine's (default: vllm); NCCL tables always")
    args = ap.parse_args(argv)
    try:
        hw = get_hardware(args.profile)
        results = check_dir(args.directory, hw, model_free=args.model_free,
                            max_rows=args.max_rows, seed=args.seed, engine=args.engine)
    except ServesimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"profile {hw.name}: cost-model per-operator predictions vs measured latency")
    print(format_results(results))
    rest = unscored_tables(args.directory, args.engine)
    if rest:
        print(f"not scored here (no per-operator check of these tables): {', '.join(rest)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
