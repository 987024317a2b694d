"""Prediction intervals from cross-validated residuals (split conformal).

``benchmarks/validate_silicon.py`` scores every measured row held out of its
fit (leave one model, one GPU, one campaign out) and writes, per engine and
metric, the 10th and 90th percentiles of ``log(measured / predicted)`` over
those held-out residuals of every scheme together
(``sim.validate.crossval.conformal_intervals``) to
``sim/data/prediction_intervals.yaml``. A prediction ``p`` of that engine
then carries the nominal 80 % interval ``[p·exp(q10), p·exp(q90)]``
(:func:`interval`), written beside the point value (``validate``:
``pred_ttft_ms_lo`` / ``_hi``; ``run`` / ``compare`` / ``plan``:
``mean_ttft_ms_lo`` / ``_hi`` in ``summary.json``). Its coverage on rows of
groups that did not set it is reported in ``reports/validation/``. No interval
for an engine the residuals do not cover (or a config without an engine).
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

INTERVALS_FILE = Path(__file__).resolve().parent.parent / "data" / "prediction_intervals.yaml"
METRICS = ("ttft", "tpot")


@lru_cache(maxsize=1)
def load_intervals(path: str | None = None) -> dict[str, Any]:
    """engine -> metric -> {"lo": log factor, "hi": log factor, "n": rows}; {} if absent."""
    p = Path(path) if path else INTERVALS_FILE
    if not p.exists():
        return {}
    import yaml

    data = yaml.safe_load(p.read_text()) or {}
    return data.get("engines", {}) if isinstance(data, dict) else {}


def interval(engine: str | None, metric: str, value: float,
             table: dict[str, Any] | None = None) -> tuple[float, float] | None:
    """(lo, hi) around ``value`` (lo <= value <= hi), or None without residuals for ``engine``."""
    table = load_intervals() if table is None else table
    q = (table.get(engine or "") or {}).get(metric)
    if not q or value is None or not math.isfinite(value):
        return None
    lo, hi = min(float(q["lo"]), 0.0), max(float(q["hi"]), 0.0)
    return value * math.exp(lo), value * math.exp(hi)


def summary_intervals(engine: str | None, summary: dict[str, Any]) -> dict[str, float]:
    """``mean_ttft_ms_lo`` / ``_hi`` and ``mean_tpot_ms_lo`` / ``_hi`` of a run's summary."""
    out: dict[str, float] = {}
    for m in METRICS:
        iv = interval(engine, m, summary.get(f"mean_{m}_ms"))
        if iv:
            out[f"mean_{m}_ms_lo"], out[f"mean_{m}_ms_hi"] = iv
    return out


def residual_quantiles(meas: list[float], pred: list[float], alpha: float = 0.2) -> dict[str, float] | None:
    """{"lo", "hi", "n"}: the alpha/2 and 1 - alpha/2 quantiles of log(meas / pred)
    (finite-sample conformal ranks: ceil((n + 1)(1 - alpha/2)))."""
    r = sorted(math.log(m / p) for m, p in zip(meas, pred) if m > 0 and p and p > 0 and math.isfinite(p))
    n = len(r)
    if n < 5:
        return None
    k_hi = min(n, math.ceil((n + 1) * (1 - alpha / 2))) - 1
    k_lo = max(1, math.floor((n + 1) * (alpha / 2))) - 1
    return {"lo": r[k_lo], "hi": r[k_hi], "n": n}
