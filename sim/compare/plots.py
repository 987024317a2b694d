"""Figures of ``servesim compare``: per-variant DataFrames → matplotlib PNG files.

One function per figure, each ``plot_X(variants: dict[name, VariantData], path)
-> Path``. Never imported by the engine. Large runs are downsampled so each PNG
stays small and quick to draw: CDFs at ≤ ``MAX_POINTS`` quantiles, time series
binned to ≤ ``MAX_POINTS`` time bins (:func:`sim.compare.variant_data.step_timeseries`),
scatter plots thinned to ≤ ``MAX_POINTS`` evenly spaced points (with a binned
p99 line so the tail still shows).
Latencies are shown in ms, times in s, KV usage in %.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402

from sim.compare.variant_data import VariantData, num_replicas_of, queued_average, step_timeseries  # noqa: E402

MAX_POINTS = 2000
DPI = 110
METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL"))
PCTS = (("median", "p50"), ("p90", "p90"), ("p99", "p99"))
PHASES = (("queue", "queueing", "#9e9e9e"), ("prefill", "prefill", "#1f77b4"),
          ("decode", "decode", "#2ca02c"), ("preempted", "preemption-recompute", "#d62728"))


def _colors(variants: dict[str, VariantData]) -> dict[str, str]:
    cyc = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {name: cyc[i % len(cyc)] for i, name in enumerate(variants)}


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def _fmt(v: float) -> str:
    if not np.isfinite(v):
        return "-"
    if abs(v) < 10:
        return f"{v:.2f}"
    if abs(v) < 100:
        return f"{v:.1f}"
    return f"{v:,.0f}"


_THOUSANDS = FuncFormatter(lambda v, _: f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}")


def _wide_range(vals) -> bool:
    """Log scale when positive values span more than ~30×."""
    a = np.asarray([x for x in vals if np.isfinite(x) and x > 0], dtype=float)
    return a.size > 1 and a.max() / a.min() > 30


def weighted_cdf(values: np.ndarray, weights: np.ndarray | None = None,
                 max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(x, F(x) = fraction ≤ x) of the (weighted) empirical CDF at ≤ ``max_points``
    points, half of them spread evenly in probability and half on a log grid of
    the tail (1 − F from 1e-6 to 0.5), so the p99–p99.99 region stays resolved."""
    x, F, _ = _cdf_points(values, weights, max_points)
    return x, F


def weighted_tail(values: np.ndarray, weights: np.ndarray | None = None,
                  max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(x, fraction ≥ x) at the same points as :func:`weighted_cdf`; positive up to the maximum."""
    x, _, before = _cdf_points(values, weights, max_points)
    return x, 1.0 - before


def _cdf_points(values, weights, max_points):
    values = np.asarray(values, dtype=float)
    weights = np.ones_like(values) if weights is None else np.asarray(weights, dtype=float)
    keep = np.isfinite(values) & (weights > 0)
    values, weights = values[keep], weights[keep]
    if values.size == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    order = np.argsort(values, kind="stable")
    v = values[order]
    cum = np.cumsum(weights[order])
    cdf = cum / cum[-1]
    before = np.concatenate([[0.0], cdf[:-1]])
    if v.size <= max_points:
        return v, cdf, before
    half = max_points // 2
    probs = np.unique(np.concatenate([np.linspace(0, 1, half), 1 - np.logspace(-6, np.log10(0.5), half)]))
    idx = np.unique(np.minimum(np.searchsorted(cdf, probs, side="left"), v.size - 1))
    return v[idx], cdf[idx], before[idx]


def _cdf_figure(series: dict[str, tuple[np.ndarray, np.ndarray | None]], colors: dict[str, str],
                what: str, xlabel: str, path) -> Path:
    fig, (ax, tail) = plt.subplots(1, 2, figsize=(11, 4.2))
    allx = []
    for name, (vals, w) in series.items():
        x, F = weighted_cdf(vals, w)
        if x.size == 0:
            continue
        allx.extend([x[0], x[-1]])
        ax.plot(x, F, drawstyle="steps-post", color=colors[name], label=name, lw=1.6)
        tx, ge = weighted_tail(vals, w)
        tail.plot(tx, ge, drawstyle="steps-post", color=colors[name], label=name, lw=1.6)
    if not allx:
        for a in (ax, tail):
            a.text(0.5, 0.5, f"no {what} samples", ha="center", va="center", transform=a.transAxes)
    for q in (0.5, 0.99):
        ax.axhline(q, color="0.6", lw=0.8, ls=":")
        ax.text(1.0, q, f" p{int(q * 100)}", transform=ax.get_yaxis_transform(), va="center", fontsize=8, color="0.4")
    for q in (0.5, 0.1, 0.01, 0.001):
        tail.axhline(q, color="0.85", lw=0.6, ls=":")
    log = _wide_range(allx)
    for a in (ax, tail):
        if log:
            a.set_xscale("log")
        a.set_xlabel(xlabel)
        a.grid(True, which="major", alpha=0.3)
    ax.set_ylabel("fraction ≤ x (CDF)")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{what}: cumulative distribution")
    tail.set_yscale("log")
    tail.set_ylabel("fraction ≥ x (log scale)")
    tail.set_title(f"{what}: tail (fraction at or above x)")
    if allx:
        ax.legend(loc="lower right", fontsize=8)
        tail.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_ttft_cdf(variants: dict[str, VariantData], path) -> Path:
    """CDF and tail of TTFT (ms) over finished, measured requests, one line per variant."""
    series = {n: (v.finished_requests()["ttft_ms"].to_numpy(float), None) for n, v in variants.items()}
    return _cdf_figure(series, _colors(variants), "TTFT (time to first token)", "TTFT (ms)", path)


def plot_itl_cdf(variants: dict[str, VariantData], path) -> Path:
    """CDF and tail of ITL (ms), each gap weighted by the tokens that saw it."""
    series = {}
    for n, v in variants.items():
        vals, w = v.itl_arrays()
        series[n] = (vals * 1e3, w)
    return _cdf_figure(series, _colors(variants), "ITL (inter-token latency)", "ITL (ms)", path)


def plot_latency_percentiles(variants: dict[str, VariantData], path) -> Path:
    """Grouped bars: p50 / p90 / p99 of TTFT, TPOT, ITL and E2EL (ms) per variant,
    read from each summary; log scale where a panel spans more than ~30×."""
    colors = _colors(variants)
    names = list(variants)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    width = 0.8 / max(len(names), 1)
    x = np.arange(len(PCTS))
    for ax, (key, label) in zip(axes.ravel(), METRICS):
        vals_all = []
        for i, n in enumerate(names):
            s = variants[n].summary
            vals = np.array([_num(s.get(f"{p}_{key}_ms")) for p, _ in PCTS])
            vals_all.extend(vals)
            pos = x - 0.4 + width * (i + 0.5)
            bars = ax.bar(pos, np.nan_to_num(vals, nan=0.0), width, color=colors[n], label=n)
            for b, val in zip(bars, vals):
                ax.annotate(_fmt(val), (b.get_x() + b.get_width() / 2, b.get_height()), xytext=(0, 2),
                            textcoords="offset points", ha="center", va="bottom", fontsize=7,
                            rotation=90 if len(names) > 3 else 0)
        if _wide_range(vals_all):
            ax.set_yscale("log")
            ax.set_ylabel(f"{label} (ms, log scale)")
        else:
            ax.set_ylabel(f"{label} (ms)")
            ax.yaxis.set_major_formatter(_THOUSANDS)
        ax.margins(y=0.25)
        ax.set_xticks(x, [p for _, p in PCTS])
        ax.set_title(f"{label} percentiles")
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(names), 6), bbox_to_anchor=(0.5, -0.01))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return _save(fig, path)


def _num(v) -> float:
    try:
        return float(v) if v is not None else float("nan")
    except (TypeError, ValueError):
        return float("nan")


def _thin(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """≤ ``max_points`` points evenly spaced in arrival order (so the density stays honest)."""
    if x.size <= max_points:
        return x, y
    idx = np.unique(np.linspace(0, x.size - 1, max_points).astype(int))
    return x[idx], y[idx]


def binned_quantile(x: np.ndarray, y: np.ndarray, q: float, num_bins: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """(bin centres, q-th percentile of y per bin of x); NaN for bins without
    samples, so a plotted line breaks across gaps instead of bridging them."""
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size == 0:
        return np.zeros(0), np.zeros(0)
    edges = np.linspace(x.min(), x.max() if x.max() > x.min() else x.min() + 1e-9, num_bins + 1)
    b = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, num_bins - 1)
    order = np.argsort(b, kind="stable")
    b, y = b[order], y[order]
    cuts = np.flatnonzero(np.diff(b)) + 1
    out = np.full(num_bins, np.nan)
    out[b[np.r_[0, cuts]]] = [np.percentile(g, q) for g in np.split(y, cuts)]
    return 0.5 * (edges[:-1] + edges[1:]), out


def plot_timeline(variants: dict[str, VariantData], path) -> Path:
    """Small multiples over time (s), one column per variant sharing both axes per
    row: queued requests (sent, not yet scheduled; from requests.csv) and running
    sequences (summed over replicas, time averages per bin), KV-cache usage (% , mean over replicas) and the TTFT of
    each request at its arrival time (scatter)."""
    names = list(variants)
    colors = _colors(variants)
    t_lo, t_hi = np.inf, -np.inf
    for v in variants.values():
        if len(v.steps):
            t_lo = min(t_lo, float(v.steps["start_time_s"].min()))
            t_hi = max(t_hi, float((v.steps["start_time_s"] + v.steps["step_time_s"]).max()))
        fin = v.finished_requests()
        if len(fin):
            t_lo = min(t_lo, float(fin["arrival_time_s"].min()))
            t_hi = max(t_hi, float(fin["arrival_time_s"].max()))
    rows = (("queued", "queued requests\n(sent, not yet scheduled)"), ("num_running_seqs", "running seqs\n(batch size)"),
            ("kv_cache_usage", "KV-cache usage (%)"), ("ttft", "TTFT at arrival (ms)\ndots: requests, line: p99"))
    ncol = max(len(names), 1)
    fig, axes = plt.subplots(len(rows), ncol, figsize=(min(4.2 * ncol, 22), 9.5), sharex=True, sharey="row",
                             squeeze=False)
    ttft_all = []
    for j, n in enumerate(names):
        v = variants[n]
        rng = (t_lo, t_hi) if np.isfinite(t_lo) and t_hi > t_lo else None
        ts = step_timeseries(v.steps, num_replicas=num_replicas_of(v), t_range=rng)
        if len(ts):
            # steps.csv's num_waiting_reqs is counted after admission (vLLM's gauge) and
            # misses requests that wait through one long step: count from requests.csv.
            c = ts["time_s"].to_numpy(float)
            w = c[1] - c[0] if len(c) > 1 else (2.0 * (c[0] - rng[0]) if rng else 1.0)
            edges = np.concatenate([c - w / 2.0, [c[-1] + w / 2.0]])
            ts = ts.assign(queued=queued_average(v.requests["arrival_time_s"].to_numpy(float),
                                                 v.requests["first_scheduled_time_s"].to_numpy(float), edges))
        for i, (col, _) in enumerate(rows[:3]):
            ax = axes[i, j]
            if len(ts):
                y = ts[col].to_numpy() * (100.0 if col == "kv_cache_usage" else 1.0)
                ax.plot(ts["time_s"], y, color=colors[n], lw=1.0)
                ax.fill_between(ts["time_s"], y, color=colors[n], alpha=0.15, lw=0)
            else:
                ax.text(0.5, 0.5, "no engine steps", ha="center", va="center", transform=ax.transAxes)
        ax = axes[3, j]
        fin = v.finished_requests()
        arr = fin["arrival_time_s"].to_numpy(float)
        ttft = fin["ttft_ms"].to_numpy(float)
        order = np.argsort(arr, kind="stable")
        x, y = _thin(arr[order], ttft[order])
        ttft_all.extend(y)
        if x.size:
            ax.scatter(x, y, s=4, color=colors[n], alpha=0.5, lw=0, rasterized=True, label="requests")
        if arr.size >= 200:
            bx, by = binned_quantile(arr, ttft, 99, num_bins=min(100, arr.size // 20))
            ax.plot(bx, by, color="black", lw=0.9, marker=".", ms=2, label="p99 per time bin")
            ttft_all.extend(by[np.isfinite(by)])
        nrej = int((v.measured_requests().get("status") == "rejected").sum()) if "status" in v.requests else 0
        if nrej:
            ax.text(0.02, 0.95, f"{nrej} rejected (not shown)", transform=ax.transAxes, va="top", fontsize=7)
        axes[0, j].set_title(n)
        axes[-1, j].set_xlabel("time (s)")
    for i, (_, label) in enumerate(rows):
        axes[i, 0].set_ylabel(label)
        for ax in axes[i]:
            ax.grid(True, alpha=0.3)
    axes[2, 0].set_ylim(0, 105)
    for i in (0, 1):
        axes[i, 0].set_ylim(bottom=0)
    if _wide_range(ttft_all):
        axes[3, 0].set_yscale("log")
        axes[3, 0].set_ylabel("TTFT at arrival (ms, log)\ndots: requests, line: p99")
    fig.suptitle("Over time: queue, batch, KV cache and TTFT (queue and batch summed over replicas)", y=1.0)
    fig.tight_layout()
    return _save(fig, path)


def breakdown_row(fin, q: float) -> dict | None:
    """The finished request at the q-th percentile of E2EL (nearest rank) and its
    phases in ms: queueing, prefill, decode and preemption-recompute, summing to
    its E2EL. ``preempted_ms`` overlaps prefill/decode in ``requests.csv``; it is
    carved out of decode first (where recompute preemptions mostly happen),
    the remainder out of prefill."""
    fin = fin[np.isfinite(fin["e2el_ms"].to_numpy(float))]
    if len(fin) == 0:
        return None
    e2el = fin["e2el_ms"].to_numpy(float)
    target = np.percentile(e2el, q)
    r = fin.iloc[int(np.argmin(np.abs(e2el - target)))]
    pre = float(np.nan_to_num(r.get("preempted_ms", 0.0)))
    dec = float(np.nan_to_num(r["decode_ms"]))
    pf = float(np.nan_to_num(r["prefill_ms"]))
    dec_adj = max(dec - pre, 0.0)
    pf_adj = max(pf - (pre - (dec - dec_adj)), 0.0)
    return {"request_id": int(r["request_id"]), "num_prompt_tokens": int(r["num_prompt_tokens"]),
            "num_output_tokens": int(r["num_output_tokens"]), "e2el": float(r["e2el_ms"]),
            "queue": float(np.nan_to_num(r["queue_ms"])), "prefill": pf_adj, "decode": dec_adj, "preempted": pre}


def plot_latency_breakdown(variants: dict[str, VariantData], path) -> Path:
    """Stacked horizontal bars per variant: where the median and the p99 request
    (by E2EL) spent their time — queueing, prefill, decode, preemption-recompute (ms)."""
    names = list(variants)
    fig, axes = plt.subplots(1, 2, figsize=(12, 1.2 + 0.75 * max(len(names), 2)))
    for ax, (q, title) in zip(axes, ((50, "median request (p50 E2EL)"), (99, "p99 request (by E2EL)"))):
        labels, ypos = [], np.arange(len(names))[::-1]
        xmax = 0.0
        for y, n in zip(ypos, names):
            b = breakdown_row(variants[n].finished_requests(), q)
            if b is None:
                labels.append(f"{n}\n(no finished requests)")
                continue
            left = 0.0
            for key, lab, color in PHASES:
                ax.barh(y, b[key], left=left, color=color, label=lab, height=0.6)
                left += b[key]
            xmax = max(xmax, left)
            ax.annotate(f"{_fmt(b['e2el'])} ms", (left, y), xytext=(3, 0), textcoords="offset points",
                        va="center", fontsize=8)
            labels.append(f"{n}\n#{b['request_id']}: {b['num_prompt_tokens']:,} in / {b['num_output_tokens']:,} out")
        ax.set_yticks(ypos, labels, fontsize=8)
        ax.set_xlim(0, xmax * 1.22 if xmax > 0 else 1)
        ax.set_xlabel("time (ms)")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))  # wide thousands labels must not collide
        ax.xaxis.set_major_formatter(_THOUSANDS)
        ax.set_title(title)
        ax.grid(True, axis="x", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for _, _, c in PHASES]
    fig.legend(handles, [lab for _, lab, _ in PHASES], loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.02))
    fig.suptitle("Latency breakdown: where the median and the p99 request spent their time")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return _save(fig, path)


FIGURES = {
    "ttft_cdf.png": plot_ttft_cdf,
    "itl_cdf.png": plot_itl_cdf,
    "latency_percentiles.png": plot_latency_percentiles,
    "timeline.png": plot_timeline,
    "latency_breakdown.png": plot_latency_breakdown,
}
