"""Fit ``fitted_v1`` efficiency parameters to measured kernel rows.

Least squares on log time (``scipy.optimize.least_squares``, trust-region
reflective with bounds, parameters in log space), separately per family:
``gemm.<dtype>``, ``context_attention``, ``generation_attention``,
``all_reduce``. Each fit runs plain least squares, then a soft-L1 loss with
scale 0.2 from there, so a few broken measurements -- a 766 us outlier among
85 us neighbours -- cannot drag it; three starts that differ in the fixed
cost are tried (on a seeded 4,000-row subsample for large tables) and the
best is refined on all rows. The formulas are the cost model's own
(``sim/cost_model/fitted.py``), so a fitted profile predicts exactly what was
fitted.

    fit = fit_family("gemm.bf16", rows, device)            # FitResult
    fit.params                                              # GemmParams
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sim.cost_model.fitted import (UNALIGNED_ELEMENTS, all_reduce_fitted_s, gemm_measured_s, moe_fitted_s, uniform_context_s,
                                   uniform_generation_s)
from sim.hardware.efficiency import (AllReduceParams, ContextAttentionParams, GemmParams,
                            GenerationAttentionParams, MoeParams)
from sim.model_spec import WEIGHT_BYTES_PER_PARAM
from sim.errors import ConfigError
from sim.hardware.profile import HardwareProfile

#: parameter -> (start, lower, upper); fitted in log space
SPACE = {
    "compute_efficiency_max": (0.7, 0.02, 1.0),
    "compute_half_flops": (1e9, 1e3, 1e15),
    "compute_exponent": (1.0, 0.1, 5.0),
    "memory_efficiency_max": (0.7, 0.02, 1.0),
    "memory_half_bytes": (1e6, 1.0, 1e12),
    "memory_exponent": (1.0, 0.1, 5.0),
    "launch_s": (2e-6, 1e-9, 1e-3),
    "host_s": (5e-5, 1e-7, 1e-3),
    "k_serial_s": (1e-9, 1e-15, 1e-6),
    "k_split": (2e3, 16.0, 1e6),
    "act_quant_row_s": (5e-9, 1e-15, 1e-5),
    "act_quant_memory_efficiency": (0.5, 0.01, 1.5),
    "softmax_flops_per_score": (300.0, 1e-3, 1e5),
    "seq_head_s": (1e-8, 1e-14, 1e-5),
    "expert_s": (5e-7, 1e-12, 1e-4),
    "row_s": (1e-8, 1e-14, 1e-5),
    "ep_s": (1e-6, 1e-12, 1e-3),
    "unaligned_w2_mac_s": (2e-14, 1e-18, 1e-10),
    "unaligned_w2_out_s": (3e-12, 1e-16, 1e-8),
    "cta_token_s": (1e-8, 1e-14, 1e-5),
    "latency_s": (5e-6, 1e-8, 1e-3),
    "latency_per_gpu_s": (1e-6, 1e-11, 1e-3),
    "bus": (0.7, 0.01, 1.5),
    "half_bytes": (1e6, 1.0, 1e12),
    "exponent": (0.5, 0.05, 5.0),
}
# Fitted per family: the roofline terms (peak efficiencies, half points, saturation
# exponents), the launch cost, and each family's own terms. Tile sizes are fixed
# (64 x 64 GEMM tiles, 128-row query tiles, 64-token KV tiles: the kernels' CTA
# tiles), and so is split_kv_min_group, chosen between 1 and 2 by fit_generation.
_MEMORY = ("memory_efficiency_max", "memory_half_bytes", "memory_exponent", "launch_s")
_CORE = ("compute_efficiency_max", "compute_half_flops", "compute_exponent") + _MEMORY
#: family kind -> (params class, free parameters); the rest keep their defaults
FREE = {
    "gemm": (GemmParams, _CORE + ("k_serial_s", "k_split")),
    "gemm_w8a8": (GemmParams, _CORE + ("k_serial_s", "k_split", "act_quant_row_s",
                                       "act_quant_memory_efficiency")),
    # block-scaled fp8 (vLLM 0.24 DeepGemm / Cutlass / FlashInfer): measured =
    # max(host floor, device time); the device part is the per-tensor fp8 GEMM's
    # formulas (its parameters passed as ``fixed`` where fitted, see
    # fit_block_fp8) with its peak efficiencies refitted, plus the host floor
    "gemm_block": (GemmParams, ("host_s", "compute_efficiency_max", "memory_efficiency_max")),
    "context_attention": (ContextAttentionParams, _CORE + ("softmax_flops_per_score", "seq_head_s")),
    # decode attention is memory-bound (query heads per KV head << the ridge point):
    # its compute term stays the plain roofline (efficiency 1), not fitted
    "generation_attention": (GenerationAttentionParams, _MEMORY + ("seq_head_s",)),
    "moe": (MoeParams, _CORE + ("expert_s", "row_s", "ep_s", "unaligned_w2_mac_s",
                                 "unaligned_w2_out_s")),
    "all_reduce": (AllReduceParams, ("latency_s", "latency_per_gpu_s", "half_bytes", "exponent")),
}
FIXED_DEFAULTS = {"compute_efficiency_max": 1.0, "compute_half_flops": 1.0, "compute_exponent": 0.5,
                  "memory_exponent": 0.5, "k_serial_s": 0.0, "k_split": 1e6,
                  "softmax_flops_per_score": 0.0, "seq_head_s": 0.0, "expert_s": 0.0, "row_s": 0.0,
                  "ep_s": 0.0, "unaligned_w2_mac_s": 0.0, "unaligned_w2_out_s": 0.0}
W8A8_FAMILIES = ("gemm.fp8", "gemm.fp8_block")
#: tables larger than this pick their best start on a seeded subsample of this many rows
SCREEN_ROWS = 4000


@dataclass(frozen=True)
class Device:
    """The datasheet numbers the formulas scale: peaks (FLOP/s), HBM bandwidth
    (B/s), SM count, link bandwidth per direction (B/s)."""
    peak_bf16: float
    peak_fp8: float | None
    hbm_bw: float
    num_sms: int
    link_bw: float

    @classmethod
    def of(cls, hw: HardwareProfile) -> Device:
        pk = hw.peak_flops_per_s
        return cls(pk.bf16, pk.get("fp8") or pk.get("int8"), hw.hbm_bandwidth_bytes_per_s,
                   hw.num_sms, hw.interconnect.bandwidth_bytes_per_s)

    def gemm_peak(self, family: str) -> float:
        if family in W8A8_FAMILIES:
            if self.peak_fp8 is None:
                raise ConfigError(f"{family}: the device has no fp8/int8 peak to fit against")
            return self.peak_fp8
        return self.peak_bf16


@dataclass
class FitResult:
    """A fitted family: parameters, rows used, and the training fit's errors."""
    family: str
    params: object
    num_rows: int
    cost: float
    log_rmse: float
    extra: dict = field(default_factory=dict)


def kind_of_family(family: str) -> str:
    return family.split("@")[0].split(".")[0]


def spec_for(family: str) -> tuple[type, tuple[str, ...]]:
    """(params class, free parameter names) of a family name."""
    family = family.split("@")[0]
    kind = family.split(".")[0]
    if kind == "gemm":
        if family == "gemm.fp8_block":
            cls, free = FREE["gemm_w8a8"]
            return cls, free + ("host_s",)
        return FREE["gemm_w8a8" if family in W8A8_FAMILIES else "gemm"]
    if kind not in FREE:
        raise ConfigError(f"unknown kernel family {family!r}")
    return FREE[kind]


_COLUMNS = {"gemm": ("m", "n", "k"),
            "context_attention": ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim"),
            "generation_attention": ("batch_size", "step", "num_heads", "num_key_value_heads",
                                     "head_dim"),
            "all_reduce": ("message_bytes", "num_gpus"),
            "moe": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                    "moe_ep_size", "gated")}


def prepare(family: str, rows: pd.DataFrame | dict) -> dict[str, np.ndarray]:
    """The float arrays :func:`predict` needs (done once per fit, not per step)."""
    if isinstance(rows, dict):
        return rows
    kind = family.split(".")[0]
    cols = {c: rows[c].to_numpy(float) for c in _COLUMNS[kind] if c in rows or c != "gated"}
    if kind == "moe" and "gated" not in cols:  # rows not from read_moe_table: gated experts
        cols["gated"] = np.ones(len(rows))
    if kind in ("context_attention", "generation_attention"):
        kv = rows["kv_cache_dtype"].astype(str) if "kv_cache_dtype" in rows else pd.Series([""] * len(rows))
        cols["kv_bytes"] = np.where(kv.str.startswith("fp8").to_numpy(), 1.0, 2.0)
    return cols


def predict(family: str, params, rows: pd.DataFrame | dict, dev: Device) -> np.ndarray:
    """Predicted latency (s) of every row with the cost model's formulas
    (``rows``: a table's rows or :func:`prepare`'s arrays)."""
    family = family.split("@")[0]
    kind = family.split(".")[0]
    a = prepare(family, rows)
    if kind == "gemm":
        w8a8 = family in W8A8_FAMILIES
        return gemm_measured_s(params, a["m"], a["n"], a["k"], dev.gemm_peak(family), dev.hbm_bw,
                             weight_bytes=1.0 if w8a8 else 2.0, w8a8=w8a8)
    if kind == "context_attention":
        return uniform_context_s(params, dev.peak_bf16, dev.hbm_bw, dev.num_sms, a["batch_size"],
                                 a["isl"], 0.0, a["num_heads"], a["num_key_value_heads"],
                                 a["head_dim"], a["kv_bytes"])
    if kind == "generation_attention":
        return uniform_generation_s(params, dev.peak_bf16, dev.hbm_bw, dev.num_sms, a["batch_size"],
                                    a["step"], a["num_heads"], a["num_key_value_heads"],
                                    a["head_dim"], a["kv_bytes"])
    if kind == "moe":
        fmt = family.split(".", 1)[1]
        w8a8 = fmt in ("fp8", "fp8_block", "int8") and dev.peak_fp8 is not None
        return moe_fitted_s(params, a["num_tokens"], a["hidden_size"], a["inter_size"] / a["moe_tp_size"],
                            a["num_experts"], a["topk"], dev.peak_fp8 if w8a8 else dev.peak_bf16,
                            dev.hbm_bw, weight_bytes=WEIGHT_BYTES_PER_PARAM[fmt],
                            act_bytes=1.0 if w8a8 else 2.0, ep=a["moe_ep_size"], routing="balanced",
                            gated=a["gated"] > 0)
    return all_reduce_fitted_s(params, dev.link_bw, a["message_bytes"], a["num_gpus"])


def _build(cls, names, x, fixed):
    values = dict(fixed)
    bus = {}
    for name, v in zip(names, np.exp(x)):
        if name.startswith("bus_"):
            bus[int(name[4:])] = float(v)
        else:
            values[name] = float(v)
    if bus:
        values["bus_efficiency"] = bus
    return cls.model_construct(**values)


def fit_family(family: str, rows: pd.DataFrame, dev: Device, *, start: dict | None = None,
               fixed: dict | None = None, extra_free: tuple[str, ...] = (),
               max_nfev: int = 400, free_override: tuple[str, ...] | None = None) -> FitResult:
    """Fit one family to ``rows`` (with ``latency_s``). ``start`` overrides
    start values (parameter -> value; ``bus_<p>`` for all-reduce), ``fixed``
    pins parameters (they are then not fitted)."""
    cls, free = spec_for(family)
    free = (free if free_override is None else free_override) + tuple(extra_free)
    y = rows["latency_s"].to_numpy(float)
    if len(y) == 0:
        raise ConfigError(f"{family}: no rows to fit")
    fixed = {**{k: v for k, v in FIXED_DEFAULTS.items() if k in cls.model_fields and k not in free},
             **(fixed or {})}
    names = [n for n in free if n not in fixed]
    if family == "all_reduce":
        names += [f"bus_{int(p)}" for p in sorted(rows["num_gpus"].unique()) if p > 1]
    # start the fixed costs at half the fastest call (the floor is mostly launch/latency)
    start = {"launch_s": 0.5 * float(y.min()), "latency_s": 0.5 * float(y.min()), **(start or {})}
    lo, hi = [], []
    for n in names:
        _, a, b = SPACE["bus" if n.startswith("bus_") else n]
        if kind_of_family(family) == "moe" and n.endswith("_exponent"):
            # <= 1: time = x (1 + (half/x)^e) / rate must not grow as the work x -> 0 (e > 1
            # diverges there: an expert-parallel rank with a fraction of an expert touched)
            b = min(b, 1.0)
        lo.append(np.log(a))
        hi.append(np.log(b))
    bounds = (np.array(lo), np.array(hi))

    def x_of(values: dict) -> np.ndarray:
        return np.clip(np.log([values.get(n, SPACE["bus" if n.startswith("bus_") else n][0])
                               for n in names]), bounds[0] + 1e-7, bounds[1] - 1e-7)

    fixed = {k: v for k, v in fixed.items() if k not in names}
    log_y = np.log(y)

    def residual_fn(sel):
        arrays, ly = prepare(family, rows if sel is None else rows.iloc[sel]), (
            log_y if sel is None else log_y[sel])

        def resid(x):
            pred = predict(family, _build(cls, names, x, fixed), arrays, dev)
            return np.log(np.maximum(pred, 1e-30)) - ly
        return resid

    least_squares = _least_squares()

    def solve(resid, x0, nfev, plain_first=True):
        # plain least squares first (a start far off sits where soft-L1 is flat), then
        # the robust loss from there
        if plain_first:
            x0 = least_squares(resid, x0, bounds=bounds, max_nfev=nfev, ftol=1e-10, xtol=1e-10).x
        return least_squares(resid, x0, bounds=bounds, loss="soft_l1", f_scale=0.2,
                             max_nfev=nfev, ftol=1e-10, xtol=1e-10)

    # several starts differing in the fixed cost (fits to real tables have local minima
    # where launch and a saturation term trade places), screened on a seeded subsample
    fixed_cost = "latency_s" if family == "all_reduce" else "launch_s"
    starts = [x_of(start)] + [x_of({**start, fixed_cost: f * float(y.min())}) for f in (0.9, 0.05)
                              if fixed_cost in names]
    sel = None if len(y) <= SCREEN_ROWS else np.sort(
        np.random.default_rng(0).choice(len(y), SCREEN_ROWS, replace=False))
    screen = residual_fn(sel)
    results = [solve(screen, x0, max_nfev if sel is None else max_nfev // 3) for x0 in starts]
    best = min(results, key=lambda r: r.cost)
    resid = residual_fn(None)
    res = best if sel is None else solve(resid, best.x, max_nfev // 4, plain_first=False)
    params = cls.model_validate(_build(cls, names, res.x, fixed).model_dump())
    r = resid(res.x)
    return FitResult(family, params, len(y), float(res.cost), float(np.sqrt(np.mean(r * r))))


def fit_generation(rows: pd.DataFrame, dev: Device, *, start: dict | None = None,
                   fixed: dict | None = None) -> FitResult:
    """Decode attention, choosing from the data whether MHA (one query head
    per KV head) runs without split-KV: fitted both ways where such rows
    exist, the lower training cost wins."""
    group = rows["num_heads"] / rows["num_key_value_heads"]
    fixed = fixed or {}
    best = fit_family("generation_attention", rows, dev, start=start,
                      fixed={**fixed, "split_kv_min_group": 1, "cta_token_s": 0.0})
    if (group < 2).any() and (group >= 2).any():
        alt = fit_family("generation_attention", rows, dev, start=start,
                         fixed={**fixed, "split_kv_min_group": 2}, extra_free=("cta_token_s",))
        if alt.cost < best.cost:
            best = alt
    return best


#: device-side parameters a block-fp8 family takes from the per-tensor fp8 fit
BLOCK_FROM_FP8 = ("compute_half_flops", "compute_exponent", "memory_half_bytes", "memory_exponent",
                  "launch_s", "k_serial_s", "k_split", "act_quant_row_s", "act_quant_memory_efficiency")


def fit_block_fp8(rows: pd.DataFrame, dev: Device, fp8: GemmParams, family: str = "gemm.fp8_block",
                  fixed: dict | None = None) -> FitResult:
    """A block-scaled fp8 kernel as the per-tensor fp8 GEMM's device formulas
    (``fp8``'s fitted shape parameters) with its own peak efficiencies and a
    per-call host floor ``host_s`` (measured = max(host_s, device)): three
    parameters. The H100 tables show the floor overlaps the device work (an
    additive launch cost misfits them; see reports/calibration/README.md)."""
    base = {k: getattr(fp8, k) for k in BLOCK_FROM_FP8}
    start = {"host_s": float(np.quantile(rows["latency_s"], 0.1)),
             "compute_efficiency_max": fp8.compute_efficiency_max,
             "memory_efficiency_max": fp8.memory_efficiency_max}
    return fit_family(family, rows, dev, start=start, fixed={**base, **(fixed or {})},
                      free_override=FREE["gemm_block"][1])


def fit_moe(family: str, rows: pd.DataFrame, dev: Device, **kw) -> FitResult:
    """A fused-MoE kernel, choosing from the data whether its intermediate caches span
    the whole batch's routed rows (vLLM's Triton fused_moe with an expert_map) or the
    rank's only (``MoeParams.whole_batch_rows``; where the table has EP > 1 rows),
    fitted both ways, the lower training cost wins; how it sizes its per-expert row
    blocks (``MoeParams.block_m_rule``) is the kernel's (:func:`moe_block_m_rule`). The
    unaligned-w2 costs are fitted only where some row's I / moe_tp is no multiple of
    16 (else 0)."""
    fixed = kw.pop("fixed", None) or {}
    if not ((rows["inter_size"] / rows["moe_tp_size"]) % UNALIGNED_ELEMENTS != 0).any():
        # no row tells them
        fixed = {"unaligned_w2_mac_s": 0.0, "unaligned_w2_out_s": 0.0, **fixed}
    if not (rows["moe_ep_size"] > 1).any():  # nothing tells either term
        fixed = {"ep_s": 0.0, "whole_batch_rows": True, **fixed}
    if "block_m_rule" not in fixed:
        fixed = {**fixed, "block_m_rule": moe_block_m_rule(rows)}
    if "whole_batch_rows" in fixed:
        return fit_family(family, rows, dev, fixed=fixed, **kw)
    fits = [fit_family(family, rows, dev, fixed={**fixed, "whole_batch_rows": w}, **kw)
            for w in (True, False)]
    return min(fits, key=lambda f: f.cost)


#: ``kernel_source`` substrings of kernels built on OpenAI's triton_kernels grouped
#: matmul (``matmul_ogs``): vLLM's gpt-oss MXFP4 experts on Hopper
#: (``OAITritonExperts``, vllm/model_executor/layers/fused_moe/gpt_oss_triton_kernels_moe.py)
MATMUL_OGS_KERNELS = ("oaitriton",)


def moe_block_m_rule(rows: pd.DataFrame) -> str:
    """``MoeParams.block_m_rule`` of the kernel that measured ``rows``: ``matmul_ogs``
    for the triton_kernels-based ones (:data:`MATMUL_OGS_KERNELS`), else vLLM's
    Triton ``fused_moe`` rule (also for rows without ``kernel_source``)."""
    if "kernel_source" not in rows:
        return "fused_moe"
    src = rows["kernel_source"].astype(str)
    ogs = src.apply(lambda k: any(s in k for s in MATMUL_OGS_KERNELS))
    if ogs.any() and not ogs.all():
        raise ConfigError(f"fused-MoE rows mix kernels of both block rules: {sorted(src.unique())}")
    return "matmul_ogs" if ogs.all() and len(src) else "fused_moe"


def fit_any(family: str, rows: pd.DataFrame, dev: Device, *, fp8: GemmParams | None = None,
            **kw) -> FitResult:
    """:func:`fit_generation` for decode attention (unless ``split_kv_min_group``
    is fixed), :func:`fit_block_fp8` for block-fp8 GEMMs given the per-tensor
    ``fp8`` fit, :func:`fit_moe` for fused MoE, :func:`fit_family` otherwise."""
    if family.split("@")[0] == "gemm.fp8_block" and fp8 is not None:
        return fit_block_fp8(rows, dev, fp8, family, fixed=kw.get("fixed"))
    if family == "generation_attention" and "split_kv_min_group" not in kw.get("fixed", {}):
        return fit_generation(rows, dev, start=kw.get("start"), fixed=kw.get("fixed"))
    if kind_of_family(family) == "moe":
        return fit_moe(family, rows, dev, **kw)
    return fit_family(family, rows, dev, **kw)


def ape(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    """Absolute percentage error, %."""
    return 100.0 * np.abs(pred - meas) / meas


def fit_log_params(cls, names, predict, latency_s, x0, bounds):
    """The parameters ``names`` of pydantic model ``cls`` that best predict
    ``latency_s`` (``predict(params) -> seconds``): least squares on log time in
    log-parameter space within ``bounds`` (``[(lo, hi)]``), a plain pass then a
    soft-L1 pass (as the GEMM and attention fits), validated on the way out."""
    least_squares = _least_squares()
    ly = np.log(np.asarray(latency_s, dtype=float))
    lo, hi = np.log([b[0] for b in bounds]), np.log([b[1] for b in bounds])

    def build(x):
        return cls.model_construct(**dict(zip(names, np.exp(x))))

    def resid(x):
        return np.log(np.maximum(predict(build(x)), 1e-30)) - ly
    x = least_squares(resid, np.log(x0), bounds=(lo, hi), max_nfev=300).x
    x = least_squares(resid, x, bounds=(lo, hi), loss="soft_l1", f_scale=0.2, max_nfev=300).x
    return cls.model_validate(build(x).model_dump())


def _least_squares():
    """scipy's least squares, imported when a fit runs: scipy comes with the extra
    ``servesim[calibration]``, not with servesim itself."""
    try:
        from scipy.optimize import least_squares  # noqa: PLC0415
    except ImportError:
        from sim.errors import ConfigError  # noqa: PLC0415

        raise ConfigError("fitting a hardware profile needs scipy: pip install 'servesim[calibration]' "
                          "(or pip install scipy)") from None
    return least_squares
