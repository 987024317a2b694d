"""Prediction intervals from cross-validated residuals (conformal, pooled over groups).

``benchmarks/validate_silicon.py`` scores every measured row held out of its
fit (leave one model, one GPU, one campaign out) and writes, per engine and
metric, the 10th and 90th percentiles of ``log(measured / predicted)`` over
those held-out residuals of every scheme together
(``sim.validate.crossval.conformal_intervals``) to
``sim/data/prediction_intervals.yaml``. The residuals are exchangeable within
a held-out group (a model, a GPU, a campaign), not across groups: the rows of
one model share its error. The percentiles are therefore those of the pooled
CDF, the mean of the groups' empirical CDFs, each group weighing the same
whatever its row count (:func:`pooled_cdf_quantiles`; "CDF pooling" of
R. Dunn, L. Wasserman, A. Ramdas, "Distribution-free prediction sets for
two-layer hierarchical models", JASA 118 (2023) 2491-2502,
doi:10.1080/01621459.2022.2060112, arXiv:1809.07441): the interval of a row
of a new group, not of one more row of a known group. A prediction ``p`` of that engine
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
    from sim.yaml_io import safe_load

    data = safe_load(p.read_text()) or {}
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


def pooled_cdf_quantiles(groups: list[list[float]], alpha: float = 0.2) -> dict[str, Any] | None:
    """{"lo", "hi", "n", "groups"}: the alpha/2 and 1 - alpha/2 quantiles of the
    pooled CDF F(t) = (1/K) sum_k #{r in group k: r <= t} / n_k of K groups of
    residuals (Dunn, Wasserman, Ramdas 2023, CDF pooling; module docstring):
    ``hi`` the smallest residual r with F(r) >= 1 - alpha/2, ``lo`` the largest r
    with the pooled share of residuals >= r at least 1 - alpha/2. Weights are
    exact fractions (the same residuals give the same bounds on any machine).
    None with fewer than 5 residuals; empty groups are skipped."""
    from fractions import Fraction

    groups = [g for g in groups if g]
    n = sum(len(g) for g in groups)
    if n < 5:
        return None
    pts = sorted((float(r), Fraction(1, len(groups) * len(g))) for g in groups for r in g)
    level = Fraction(1) - Fraction(alpha).limit_denominator(10**6) / 2

    def first_reaching(seq):
        acc = Fraction(0)
        for r, w in seq:
            acc += w
            if acc >= level:
                return r
        return seq[-1][0]

    return {"lo": first_reaching(pts[::-1]), "hi": first_reaching(pts), "n": n, "groups": len(groups)}


def residual_quantiles(meas: list[float], pred: list[float], alpha: float = 0.2) -> dict[str, float] | None:
    """{"lo", "hi", "n"}: the alpha/2 and 1 - alpha/2 quantiles of log(meas / pred)
    of exchangeable rows (finite-sample split-conformal ranks:
    ceil((n + 1)(1 - alpha/2))); rows in groups: :func:`pooled_cdf_quantiles`."""
    r = sorted(math.log(m / p) for m, p in zip(meas, pred) if m > 0 and p and p > 0 and math.isfinite(p))
    n = len(r)
    if n < 5:
        return None
    k_hi = min(n, math.ceil((n + 1) * (1 - alpha / 2))) - 1
    k_lo = max(1, math.floor((n + 1) * (alpha / 2))) - 1
    return {"lo": r[k_lo], "hi": r[k_hi], "n": n}
