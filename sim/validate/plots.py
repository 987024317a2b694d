"""Figures of ``servesim validate`` (matplotlib, Agg; never imported by the engine)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

ENGINE_COLORS = {"vllm": "#1f77b4", "sglang": "#2ca02c", "trtllm": "#d62728"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_scatter(df, meas_col: str, pred_col: str, label: str, path: Path) -> Path:
    """Predicted vs measured (ms), log axes, one colour per engine, y = x and ±30 % lines."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.2, 6))
    m_all = df[meas_col].to_numpy(float)
    p_all = df[pred_col].to_numpy(float)
    good = np.isfinite(m_all) & np.isfinite(p_all) & (m_all > 0) & (p_all > 0)
    lo = min(m_all[good].min(), p_all[good].min()) / 1.5 if good.any() else 1.0
    hi = max(m_all[good].max(), p_all[good].max()) * 1.5 if good.any() else 10.0
    for eng, g in df.groupby("backend"):
        ax.scatter(g[meas_col], g[pred_col], s=14, alpha=0.7, label=f"{eng} ({len(g)})",
                   color=ENGINE_COLORS.get(str(eng), None), edgecolors="none")
    xs = np.array([lo, hi])
    ax.plot(xs, xs, "k-", lw=1, label="y = x")
    ax.plot(xs, xs * 1.3, "k:", lw=0.8, label="±30 %")
    ax.plot(xs, xs / 1.3, "k:", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(f"measured {label} (ms)")
    ax.set_ylabel(f"predicted {label} (ms)")
    ax.set_title(f"{label}: predicted vs measured")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_residuals(df, path: Path) -> Path:
    """Signed error log2(predicted / measured) per (model, system, backend, tp)
    group, TTFT and TPOT side by side; points are rows, coloured by engine."""
    from sim.validate.rows import group_label

    plt = _plt()
    labels = sorted({group_label(r) for r in df.to_dict("records")},
                    key=lambda s: (s.split()[2], s.split()[0], s.split()[1],  # "tpN", or "disagg" last
                                   int(s.split()[3][2:]) if s.split()[3].startswith("tp") else 1 << 30))
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.32 * len(labels) + 1.8), sharey=True)
    rng = np.random.default_rng(0)  # vertical jitter of the points only
    recs = df.to_dict("records")
    for ax, (name, meas, pred) in zip(axes, (("TTFT", "silicon_ttft_ms", "pred_ttft_ms"),
                                             ("TPOT", "silicon_tpot_ms", "pred_tpot_ms"))):
        for y, lab in enumerate(labels):
            rows = [r for r in recs if group_label(r) == lab]
            err = np.log2(np.array([r[pred] for r in rows], float) / np.array([r[meas] for r in rows], float))
            eng = lab.split()[2]
            ax.scatter(err, y + rng.uniform(-0.25, 0.25, len(err)), s=10, alpha=0.6,
                       color=ENGINE_COLORS.get(eng))
            if len(err):
                ax.plot([np.median(err)] * 2, [y - 0.4, y + 0.4], "k-", lw=2)
        ax.axvline(0, color="k", lw=0.8)
        for v in (np.log2(1.3), -np.log2(1.3)):
            ax.axvline(v, color="k", ls=":", lw=0.8)
        ax.set_xlabel(f"{name}: log2(predicted / measured)  (0 = exact, dotted ±30 %)")
        ax.set_xlim(-3.5, 3.5)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(labels)))
    axes[0].set_yticklabels(labels, fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle("Residuals by group (bar = group median)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
