"""Prediction intervals from cross-validated residuals (conformal, pooled over groups).

``benchmarks/validate_silicon.py`` scores every measured row held out of its
fit (leave one model, one GPU, one campaign out) and writes, per engine and
metric, the 10th and 90th percentiles of ``log(measured / predicted)`` over
those held-out residuals of every scheme together
(``sim.validate.crossval.conformal_intervals``) to
``sim/data/prediction_intervals.yaml``. The residuals are exchangeable within
a held-out group (a model, a GPU, a campaign), not across groups: the rows of
one model share part of its error. The percentiles are therefore those of
the pooled CDF, a weighted mean of the groups' empirical CDFs, each group
weighing its effective number of independent residuals (Kish's design effect
with the residuals' intraclass correlation, :func:`pooled_cdf_quantiles`):
between "CDF pooling", each group the same (R. Dunn, L. Wasserman, A. Ramdas,
"Distribution-free prediction sets for two-layer hierarchical models", JASA
118 (2023) 2491-2502, doi:10.1080/01621459.2022.2060112, arXiv:1809.07441),
right when a group's rows share one error, and plain ranks over every row,
right when they share none: the interval of a row of a new group, not of one
more row of a known group. A prediction ``p`` of that engine
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


def log_bounds(q: dict[str, Any]) -> tuple[float, float]:
    """The log factors an interval ``q`` ({"lo", "hi"}) is applied with: widened
    to hold the point value (lo <= 0 <= hi), as :func:`interval` ships them."""
    return min(float(q["lo"]), 0.0), max(float(q["hi"]), 0.0)


def interval(engine: str | None, metric: str, value: float,
             table: dict[str, Any] | None = None) -> tuple[float, float] | None:
    """(lo, hi) around ``value`` (lo <= value <= hi), or None without residuals for ``engine``."""
    table = load_intervals() if table is None else table
    q = (table.get(engine or "") or {}).get(metric)
    if not q or value is None or not math.isfinite(value):
        return None
    lo, hi = log_bounds(q)
    return value * math.exp(lo), value * math.exp(hi)


def summary_intervals(engine: str | None, summary: dict[str, Any]) -> dict[str, float]:
    """``mean_ttft_ms_lo`` / ``_hi`` and ``mean_tpot_ms_lo`` / ``_hi`` of a run's summary."""
    out: dict[str, float] = {}
    for m in METRICS:
        iv = interval(engine, m, summary.get(f"mean_{m}_ms"))
        if iv:
            out[f"mean_{m}_ms_lo"], out[f"mean_{m}_ms_hi"] = iv
    return out


def intraclass_correlation(groups: list[list[float]]) -> float:
    """The one-way ANOVA estimate of the intraclass correlation rho of residual
    groups (the share of the residuals' variance between groups; R. A. Fisher,
    *Statistical Methods for Research Workers*, ch. VII; the unbalanced-group
    n0 of Snedecor & Cochran, *Statistical Methods*, 13.8), clipped to [0, 1]:
    0 with fewer than two groups or no residual variance within them. Groups
    with no residual are skipped."""
    groups = [g for g in groups if g]
    k, n = len(groups), sum(len(g) for g in groups)
    if k < 2 or n <= k:
        return 0.0
    means = [math.fsum(g) / len(g) for g in groups]
    grand = math.fsum(math.fsum(g) for g in groups) / n
    ssb = math.fsum(len(g) * (m - grand) ** 2 for g, m in zip(groups, means))
    ssw = math.fsum((x - m) ** 2 for g, m in zip(groups, means) for x in g)
    msb, msw = ssb / (k - 1), ssw / (n - k)
    n0 = (n - sum(len(g) ** 2 for g in groups) / n) / (k - 1)
    between = max(0.0, (msb - msw) / n0)
    if between + msw <= 0.0:
        return 0.0
    return min(1.0, between / (between + msw))


def pooled_cdf_quantiles(groups: list[list[float]], alpha: float = 0.2) -> dict[str, Any] | None:
    """{"lo", "hi", "n", "groups", "rho"}: the alpha/2 and 1 - alpha/2 quantiles
    of the pooled CDF F(t) = sum_k w_k #{r in group k: r <= t} / n_k / sum_k w_k
    of K groups of residuals, each group weighing its effective number of
    independent residuals w_k = n_k / (1 + (n_k - 1) rho) (Kish's design
    effect, L. Kish, *Survey Sampling*, 1965, 5.4), rho their intraclass
    correlation (:func:`intraclass_correlation`). rho = 1 (the rows of a group
    share one error) is the CDF pooling of Dunn, Wasserman & Ramdas (module
    docstring), each group the same; rho = 0 is plain ranks over every row.
    ``hi`` the smallest residual r with F(r) >= 1 - alpha/2, ``lo`` the largest r
    with the pooled share of residuals >= r at least 1 - alpha/2. Weights are
    exact fractions of rho rounded to 1e-6 (the same residuals give the same
    bounds on any machine). None with fewer than 5 residuals; empty groups are
    skipped."""
    from fractions import Fraction

    groups = [g for g in groups if g]
    n = sum(len(g) for g in groups)
    if n < 5:
        return None
    rho = intraclass_correlation(groups)
    r = Fraction(rho).limit_denominator(10**6)
    weight = [Fraction(len(g)) / (1 + (len(g) - 1) * r) for g in groups]
    total = sum(weight)
    pts = sorted((float(x), w / (total * len(g))) for g, w in zip(groups, weight) for x in g)
    level = Fraction(1) - Fraction(alpha).limit_denominator(10**6) / 2

    def first_reaching(seq):
        acc = Fraction(0)
        for x, w in seq:
            acc += w
            if acc >= level:
                return x
        return seq[-1][0]

    return {"lo": first_reaching(pts[::-1]), "hi": first_reaching(pts), "n": n, "groups": len(groups),
            "rho": rho}


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
