"""Figures of ``servesim plan`` (matplotlib, Agg; never imported by the engine):
latency against load for one candidate, and the throughput-per-GPU vs p99-latency
Pareto plot over every candidate's stable runs."""

from __future__ import annotations

import math
import re
from pathlib import Path

from sim.sweep.plan import SLO, CandidatePlan, PlanSettings

PANELS = (("ttft", "TTFT"), ("tpot", "TPOT"))


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _num(v: float) -> str:
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def _plain_log(axis) -> None:
    """Log-scale ticks written as plain numbers (1,000 rather than 10^3), with labelled
    minor ticks (2, 3, 5 × 10^k or all of them) when the axis spans few decades."""
    import numpy as np
    from matplotlib.ticker import FuncFormatter, LogLocator

    def minor(v: float, _pos) -> str:
        lo, hi = axis.get_view_interval()
        decades = math.log10(hi / lo) if lo > 0 and hi > lo else 9.0
        lead = round(v / 10 ** math.floor(math.log10(v) + 1e-9))
        keep = set(range(2, 10)) if decades < 0.7 else {2, 3, 5} if decades < 1.6 else {2, 5} if decades < 2.5 else set()
        return _num(v) if lead in keep else ""

    axis.set_major_locator(LogLocator(base=10))
    axis.set_minor_locator(LogLocator(base=10, subs=np.arange(2, 10)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: _num(v)))
    axis.set_minor_formatter(FuncFormatter(minor))


def _slo_lines(slos: list[SLO], metric: str) -> list[tuple[str, float]]:
    """(label, limit ms) of the latency SLOs on ``metric`` (ttft / tpot)."""
    stat = {"mean": "mean", "median": "p50", "p90": "p90", "p99": "p99"}
    out = []
    for s in slos:
        m = re.fullmatch(rf"(mean|median|p90|p99)_{metric}_ms", s.key)
        if m and s.op == "<=":
            out.append((f"SLO {stat[m.group(1)]} ≤ {s.limit:g} ms", s.limit))
    return out


def plot_latency_vs_load(plan: CandidatePlan, s: PlanSettings, path: Path) -> None:
    """p50 and p99 TTFT and TPOT (ms, log scale) against the request rate of one
    replica (req/s) over the search runs; SLO lines dashed, the highest passing
    rate dotted, runs that fail (SLO or stability) drawn hollow, unstable ones ×."""
    plt = _plt()
    rows = sorted((r for r in plan.rows if r["phase"] == "search" and r["status"] == "ok"),
                  key=lambda r: r["workload.request_rate"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    rate = [r["workload.request_rate"] for r in rows]
    for ax, (metric, label) in zip(axes, PANELS):
        for stat, color in (("median", "tab:blue"), ("p99", "tab:red")):
            y = [r[f"{stat}_{metric}_ms"] for r in rows]
            ax.plot(rate, y, "-", color=color, lw=1.2, label=f"{'p50' if stat == 'median' else 'p99'} {label}")
            for x, v, r in zip(rate, y, rows):
                ax.plot([x], [v], "o", color=color, ms=5, mfc=color if r["passed"] else "white")
                if not r.get("stable", True):
                    ax.plot([x], [v], "x", color="black", ms=8)
        for (lab, lim), ls in zip(_slo_lines(s.slos, metric), ("--", "-.", ":")):
            ax.axhline(lim, color="0.3", ls=ls, lw=1, label=lab)
        if plan.max_rate > 0:
            ax.axvline(plan.max_rate, color="tab:green", ls=":", lw=1.5,
                       label=f"max sustainable {plan.max_rate:.3g} req/s")
        ax.set_yscale("log")
        _plain_log(ax.yaxis)
        if rate and max(rate) > 8 * min(rate):  # halving from the start rate: spread the points evenly
            ax.set_xscale("log")
            _plain_log(ax.xaxis)
        ax.set_xlabel("request rate per replica (req/s" + (", log scale)" if ax.get_xscale() == "log" else ")"))
        ax.set_ylabel(f"{label} (ms, log scale)")
        ax.set_title(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"{plan.candidate.name}: latency vs load (hollow = fails SLO or unstable; × = unstable)",
                 fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Pareto frontier: lowest latency x, highest throughput y."""
    best, out = -math.inf, []
    for x, y in sorted(points):
        if y > best:
            out.append((x, y))
            best = y
    return out


def _style_keys(plans: list[CandidatePlan]) -> tuple[dict, dict]:
    """Colour per (hardware, TP); marker per the rest of the candidate (scheduler, settings)."""
    colors: dict[str, int] = {}
    markers: dict[str, int] = {}
    for p in plans:
        colors.setdefault(_color_key(p.candidate), len(colors))
        markers.setdefault(_marker_key(p.candidate), len(markers))
    return colors, markers


def _color_key(c) -> str:
    """Hardware and TP; a disaggregated candidate: hardware and its xPyD pools."""
    o = c.columns
    if c.is_disagg:
        return " ".join([o["hardware"], c.name.split(" ")[1]] + c.name.split(" ")[2:4])  # HW xPyD P-.. D-..
    return f"{o['hardware']} tp{o['tensor_parallel_size']}"


def _marker_key(c) -> str:
    return " ".join(f"{v}" for k, v in c.overrides.items()
                    if k not in ("hardware", "tensor_parallel_size", "disaggregation"))


def plot_pareto(plans: list[CandidatePlan], s: PlanSettings, path: Path) -> None:
    """Output tokens/s per GPU (``output_throughput`` / GPUs of one replica) against p99
    TTFT and p99 TPOT (ms, log) for every stable search run; colour per hardware and
    TP, marker per scheduler (and other settings), filled = meets the SLOs; the
    black step line is the Pareto frontier (best throughput within a latency)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    cmap = plt.get_cmap("tab10")
    shapes = "o^sDvP*X"
    drawn = [p for p in plans if any(r["phase"] == "search" and r["status"] == "ok" for r in p.rows)]
    colors, markers = _style_keys(drawn)
    legend: dict[str, object] = {}
    for ax, (metric, label) in zip(axes, PANELS):
        allpts = []
        for p in drawn:
            ci, mi = colors[_color_key(p.candidate)], markers[_marker_key(p.candidate)]
            rows = [r for r in p.rows if r["phase"] == "search" and r["status"] == "ok" and r.get("stable", True)]
            tp = p.candidate.num_gpus  # GPUs of one replica
            pts = [(r[f"p99_{metric}_ms"], r["output_throughput"] / tp, r["passed"]) for r in rows]
            pts = [q for q in pts if math.isfinite(q[0]) and math.isfinite(q[1])]
            allpts += [(x, y) for x, y, _ in pts]
            color = cmap(ci % 10)
            h = ax.scatter([x for x, _, _ in pts], [y for _, y, _ in pts], s=34, marker=shapes[mi % len(shapes)],
                           facecolors=[color if ok else "white" for *_, ok in pts], edgecolors=[color] * len(pts),
                           linewidths=1.2)
            legend.setdefault(p.candidate.name, h)
        f = _frontier(allpts)
        if f:
            legend["Pareto frontier"] = ax.step([x for x, _ in f], [y for _, y in f], where="post", color="black",
                                                lw=1.2)[0]
        for (lab, lim), ls in zip(_slo_lines(s.slos, metric), ("--", "-.", ":")):
            legend[f"{label} {lab}"] = ax.axvline(lim, color="0.3", ls=ls, lw=1)
        ax.set_xscale("log")
        _plain_log(ax.xaxis)
        ax.set_xlabel(f"p99 {label} (ms, log scale)")
        ax.set_ylabel("output tokens/s per GPU")
        ax.set_title(f"throughput per GPU vs p99 {label}")
        ax.grid(True, which="both", alpha=0.3)
    fig.legend(list(legend.values()), list(legend), loc="center right", fontsize=7, frameon=False)
    fig.suptitle("Stable runs of one replica (filled = meets every SLO, hollow = misses one)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
