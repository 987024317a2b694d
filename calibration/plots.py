"""Fit-vs-measured plots (matplotlib, log-log), one PNG per kernel family."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_fit(path: str | Path, title: str, measured_s: np.ndarray, predicted_s: np.ndarray,
             held_out: np.ndarray | None = None, extra: tuple[str, np.ndarray] | None = None,
             labels: tuple[str, str] = ("fitted rows", "held-out shapes")) -> Path:
    """Left: predicted vs measured latency (us, log-log) with the y = x line
    and a +-20 % band. Right: predicted / measured against measured (log x),
    where the error is readable. Held-out rows in a second colour; ``extra`` =
    (label, predictions) adds a second prediction set (e.g. a transferred
    profile) on the held-out rows."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    meas = np.asarray(measured_s) * 1e6
    pred = np.asarray(predicted_s) * 1e6
    held = np.zeros(len(meas), dtype=bool) if held_out is None else np.asarray(held_out)
    fig, (ax, rx) = plt.subplots(1, 2, figsize=(12.0, 5.4), dpi=100)
    lo = float(min(meas.min(), pred.min())) / 1.5
    hi = float(max(meas.max(), pred.max())) * 1.5
    xs = np.array([lo, hi])
    ax.fill_between(xs, xs / 1.2, xs * 1.2, color="0.85", label="±20 %", zorder=0)
    ax.plot(xs, xs, color="0.3", lw=1, zorder=1)
    rx.fill_between(xs, 1 / 1.2, 1.2, color="0.85", zorder=0)
    rx.axhline(1.0, color="0.3", lw=1, zorder=1)
    ms = 4 if len(meas) > 3000 else 10
    sets = []
    if (~held).any():
        sets.append((~held, pred, "tab:blue", f"{labels[0]} (n={int((~held).sum())})", 0.3))
    if held.any():
        sets.append((held, pred, "tab:orange", f"{labels[1]} (n={int(held.sum())})", 0.5))
    if extra is not None:
        label, other = extra
        sel = held if held.any() else np.ones(len(meas), dtype=bool)
        sets.append((sel, np.asarray(other) * 1e6, "tab:green", label, 0.35))
    for sel, p, color, label, alpha in sets:
        ax.scatter(meas[sel], p[sel], s=ms, alpha=alpha, lw=0, color=color, label=label,
                   rasterized=True)
        rx.scatter(meas[sel], p[sel] / meas[sel], s=ms, alpha=alpha, lw=0, color=color,
                   rasterized=True)
    narrow = hi / lo < 300  # under ~2.5 decades: label 1, 2, 5 x 10^k instead of decades only
    axes_log = [a.xaxis for a in (ax, rx)] + [ax.yaxis]
    for a in (ax, rx):
        a.set_xscale("log")
        a.set_xlim(lo, hi)
        a.set_xlabel("measured latency (µs)")
        a.grid(True, which="major", color="0.8", lw=0.5)
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    for axis in axes_log:
        axis.set_minor_formatter(NullFormatter())  # no overlapping minor labels
        if narrow:
            axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel("predicted latency (µs)")
    ratio = np.concatenate([p[sel] / meas[sel] for sel, p, *_ in sets]) if sets else np.ones(1)
    rx.set_ylim(max(0.0, min(0.5, float(np.percentile(ratio, 0.5)) * 0.95)),
                max(1.5, float(np.percentile(ratio, 99.5)) * 1.05))
    rx.set_ylabel("predicted / measured")
    ax.legend(loc="upper left", fontsize=8, markerscale=2)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
