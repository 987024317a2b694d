"""Figures of ``servesim sweep`` (matplotlib, Agg, imported only when figures are
written): the results table (one row per grid point) drawn as latency and throughput
against one axis, one line per combination of the other axes.

What is drawn, and how it is chosen (:func:`plan_figures`, from the ``ok`` rows only;
infeasible and failed points are not drawn but counted in each figure's caption):

- **x axis**: ``workload.request_rate`` when it is an axis with at least two values
  among the ok points; else the numeric axis with the most distinct values (ties: the
  first in the sweep file's order). A numeric axis has only numbers (no booleans, no
  ``null`` = "the default"); a non-numeric axis (hardware, scheduler, a model) is never x.
  Axes zipped with x (``zip:``) move with it and are named in the x label, not lines.
- **lines**: every combination of the other axes that vary among the ok points, labelled
  ``key=value, key=value`` with short keys (``workload.`` and other dotted prefixes
  dropped, ``tensor_parallel_size`` → ``tp`` ...: :func:`short_key`). Axes with one value
  go into the title, beside the model and hardware when those are the same in every point.
- **more than** :data:`MAX_LINES` **lines**: the figure is split into one file per value
  of the line axis with the fewest values (ties: the first in file order), repeated on the
  next such axis while a file would still hold more (one line axis left is never split: its
  lines then share a colour map); files are named ``..._<key>_<value>.png``. At most
  :data:`MAX_FILES` files per figure kind (a note says how many more there were).
- ``figures/latency_vs_<x>.png``: p50 / p99 TTFT and p50 / p99 TPOT (ms), a log y scale on
  a panel whose values span more than 10x. ``figures/throughput_vs_<x>.png``: output
  tokens/s and, when any point has ``request_goodput`` (the sweep has ``goodput:``), the
  goodput in req/s with the request throughput dotted beside it.
- **no numeric axis** (or none with two values): one horizontal bar chart,
  ``figures/p99_latency_throughput_per_point.png``: p99 TTFT, p99 TPOT and output
  throughput per point (at most :data:`MAX_BARS` points).

A figure that cannot be drawn is skipped with a one-line note (:func:`write_sweep_figures`
returns the paths written and the notes), never an exception: the table is the result,
the figures are a view of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.sweep.plan_plots import _num, _plain_log, _plt, slug

RATE_KEY = "workload.request_rate"
MAX_LINES = 10
MAX_FILES = 20
MAX_BARS = 60
#: figure files this module writes (removed before writing again, so a re-run leaves no stale split)
OWN_PATTERNS = ("latency_vs_*.png", "throughput_vs_*.png", "p99_latency_throughput_per_point.png")
#: short names of long config keys in labels (the field's usual abbreviations)
SHORT = {"tensor_parallel_size": "tp", "data_parallel_size": "dp", "pipeline_parallel_size": "pp",
         "num_replicas": "replicas", "enable_expert_parallel": "ep", "gpu_memory_utilization": "gpu_mem_util"}
#: x-axis labels with units
X_LABELS = {RATE_KEY: "request rate (req/s)", "workload.max_concurrency": "max concurrency (requests)",
            "workload.num_requests": "requests"}
#: (column, panel title, y unit)
LATENCY_PANELS = (("median_ttft_ms", "p50 TTFT", "ms"), ("p99_ttft_ms", "p99 TTFT", "ms"),
                  ("median_tpot_ms", "p50 TPOT", "ms"), ("p99_tpot_ms", "p99 TPOT", "ms"))
BAR_PANELS = (("p99_ttft_ms", "p99 TTFT (ms)"), ("p99_tpot_ms", "p99 TPOT (ms)"),
              ("output_throughput", "output throughput (tokens/s)"))


@dataclass
class FigurePlan:
    """What to draw: ``x`` (an axis key, or None for the bar chart), the line keys,
    the keys split into separate files, and the title's fixed facts."""

    x: str | None
    line_keys: list[str]
    facet_keys: list[str] = field(default_factory=list)
    with_x: list[str] = field(default_factory=list)  # axes zipped with x
    fixed: list[str] = field(default_factory=list)  # e.g. "llama-3.1-70b", "h100_sxm", "seed=0"


def _is_number(v: Any) -> bool:
    import numpy as np

    return (isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
            and math.isfinite(float(v)))


def is_numeric_axis(values) -> bool:
    """Every value a finite number (a bool, ``null`` or a name is not)."""
    vals = list(values)
    return bool(vals) and all(_is_number(v) for v in vals)


def _distinct(values) -> list:
    """Distinct values in order of first appearance (grid order); NaN / None count as one."""
    out, seen = [], set()
    for v in values:
        k = "\0none" if v is None or (isinstance(v, float) and math.isnan(v)) else v
        if k not in seen:
            seen.add(k)
            out.append(v)
    return out


def choose_x(ok, axes: list[str]) -> str | None:
    """The x axis (module docstring): the request rate, else the numeric axis with the
    most distinct values; None when no numeric axis has two values (→ the bar chart)."""
    counts = {k: len(_distinct(ok[k])) for k in axes if k in ok.columns and is_numeric_axis(ok[k])}
    counts = {k: n for k, n in counts.items() if n >= 2}
    if RATE_KEY in counts:
        return RATE_KEY
    return max(counts, key=lambda k: (counts[k], -axes.index(k))) if counts else None


def short_key(key: str, others: list[str] = ()) -> str:
    """``workload.request_rate`` → ``request_rate``, ``tensor_parallel_size`` → ``tp``;
    the whole key (less ``workload.``) when its last part is the same as another's."""
    last = key.rsplit(".", 1)[-1]
    clash = [o for o in others if o != key and o.rsplit(".", 1)[-1] == last]
    base = key.removeprefix("workload.") if clash else last
    return SHORT.get(base, base)


def fmt_value(v: Any) -> str:
    """A value as a label shows it: numbers with :g, ``null`` as default, a file path by
    its Hub id or file name."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "default"
    if _is_number(v):
        return f"{float(v):g}" if isinstance(v, float) else str(v)
    s = str(v)
    if s.endswith((".json", ".yaml", ".yml")):
        from sim.launch import hub_id_of_path

        return hub_id_of_path(s) or Path(s).stem
    if s.startswith(("/", "./", "../", "~")):  # a local model folder: its name (a Hub id "org/name" stays whole)
        return Path(s).name
    return s


def line_label(keys: list[str], values: tuple, all_keys: list[str]) -> str:
    """``key=value, key=value`` of one line (short keys)."""
    return ", ".join(f"{short_key(k, all_keys)}={fmt_value(v)}" for k, v in zip(keys, values))


def _fixed_facts(ok, axes: list[str], base: dict | None) -> list[str]:
    """Model and hardware when the same in every drawn point (the table's ``config.model`` /
    ``config.hardware``, else the sweep's base), then the axes with one value."""
    out = []
    for key in ("model", "hardware"):
        col = f"config.{key}"
        vals = _distinct(ok[col]) if col in ok.columns else _distinct(ok[key]) if key in ok.columns else []
        if not vals and base and base.get(key) is not None:
            vals = [base[key]]
        if len(vals) == 1 and vals[0] is not None:
            out.append(fmt_value(vals[0]))
    for k in axes:
        if k in ok.columns and k not in ("model", "hardware") and len(_distinct(ok[k])) == 1:
            out.append(f"{short_key(k, axes)}={fmt_value(ok[k].iloc[0])}")
    return out


def plan_figures(ok, axes: list[str], zip_groups: list[list[str]] = (), base: dict | None = None) -> FigurePlan:
    """Choose x, the lines and the split of the ``ok`` rows (module docstring)."""
    axes = [k for k in axes if k in ok.columns]
    x = choose_x(ok, axes)
    with_x = [k for g in zip_groups if x in g for k in g if k != x]
    varying = [k for k in axes if k != x and k not in with_x and len(_distinct(ok[k])) > 1]
    plan = FigurePlan(x, varying, [], with_x, _fixed_facts(ok, axes, base))
    if x is None:
        return plan
    while len(plan.line_keys) > 1 and _n_combos(ok, plan.line_keys) > MAX_LINES:
        k = min(plan.line_keys, key=lambda k: (len(_distinct(ok[k])), axes.index(k)))
        plan.line_keys.remove(k)
        plan.facet_keys.append(k)
    return plan


def _n_combos(ok, keys: list[str]) -> int:
    return len(_distinct(_combos(ok, keys)))


def _combos(ok, keys: list[str]) -> list[tuple]:
    return [tuple(_cell(r[k]) for k in keys) for _, r in ok.iterrows()]


def _cell(v: Any) -> Any:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def groups(ok, keys: list[str]) -> list[tuple[tuple, Any]]:
    """(values of ``keys``, rows) per combination, in grid order."""
    combos = _combos(ok, keys)
    out = []
    for c in _distinct(combos):
        out.append((c, ok[[x == c for x in combos]]))
    return out


def _caption(df, n_ok: int) -> str:
    counts = df["status"].value_counts().to_dict()
    skipped = ", ".join(f"{counts[s]} {s}" for s in ("infeasible", "failed") if counts.get(s))
    text = f"{n_ok} of {len(df)} points drawn"
    return text + (f"; not drawn: {skipped} (reasons in results.csv)" if skipped else "")


def _log_if_wide(ax, values: list[float]) -> bool:
    pos = [v for v in values if _is_number(v) and v > 0]
    if pos and max(pos) > 10 * min(pos):
        ax.set_yscale("log")
        _plain_log(ax.yaxis)
        return True
    return False


def _x_label(plan: FigurePlan, axes: list[str]) -> str:
    label = X_LABELS.get(plan.x, short_key(plan.x, axes))
    return label + (f" (with {', '.join(short_key(k, axes) for k in plan.with_x)})" if plan.with_x else "")


def _title(what: str, plan: FigurePlan, facet: str = "") -> str:
    parts = [p for p in (", ".join(plan.fixed), facet) if p]
    return f"{what}" + (f": {'; '.join(parts)}" if parts else "")


def _draw_lines(ok, plan: FigurePlan, axes: list[str], panels, path: Path, what: str, facet: str,
                caption: str, dotted: dict[str, str] | None = None) -> None:
    """One figure: a panel per (column, label) of ``panels``, a line per group."""
    plt = _plt()
    n = len(panels)
    ncols = 2
    nrows = math.ceil(n / ncols)
    fig, axs = plt.subplots(nrows, ncols, figsize=(11, 3.6 * nrows + 0.9), squeeze=False)
    lines = groups(ok, plan.line_keys)
    cmap = plt.get_cmap("tab10" if len(lines) <= 10 else "viridis")
    markers = "osD^vP*Xh<>"
    handles = []
    for i, (ax, (col, title, unit)) in enumerate(zip(axs.flat, panels)):
        vals = []
        for j, (combo, rows) in enumerate(lines):
            rows = rows.sort_values(plan.x)
            color = cmap(j % 10) if len(lines) <= 10 else cmap(j / max(1, len(lines) - 1))
            label = line_label(plan.line_keys, combo, axes) or "all points"
            y = rows[col].astype(float) if col in rows.columns else [math.nan] * len(rows)
            h, = ax.plot(rows[plan.x].astype(float), y, "-", marker=markers[j % len(markers)], ms=4,
                         color=color, lw=1.3, label=label)
            vals += list(y)
            if i == 0:
                handles.append(h)
            if dotted and col in dotted and dotted[col] in rows.columns:
                ref = rows[dotted[col]].astype(float)
                ax.plot(rows[plan.x].astype(float), ref, ":", color=color, lw=1)
                vals += list(ref)
        log = _log_if_wide(ax, vals)
        xs = [float(v) for v in ok[plan.x]]
        if min(xs) > 0 and max(xs) > 20 * min(xs):
            ax.set_xscale("log")
            _plain_log(ax.xaxis)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(f"{unit}, log scale" if log else unit)
        ax.set_xlabel(_x_label(plan, axes))
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axs.flat)[n:]:
        ax.axis("off")
    if len(lines) > 1:
        fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(3, len(lines)),
                   fontsize=8, frameon=False)
    _save(plt, fig, path, _title(what, plan, facet), caption)


def _draw_bars(ok, plan: FigurePlan, axes: list[str], path: Path, caption: str) -> None:
    """Horizontal bars, one per point: p99 TTFT, p99 TPOT and output throughput."""
    plt = _plt()
    from matplotlib.ticker import FuncFormatter

    rows = ok.head(MAX_BARS)
    labels = [line_label(plan.line_keys, tuple(_cell(r[k]) for k in plan.line_keys), axes) or str(r.get("point_id"))
              for _, r in rows.iterrows()]
    if len(set(labels)) < len(labels):  # not told apart by the axes given: the point ids do
        labels = [f"{lab} ({r.get('point_id')})" for lab, (_, r) in zip(labels, rows.iterrows())]
    h = 0.32 * len(rows) + 1.6
    fig, axs = plt.subplots(1, 3, figsize=(13, h), sharey=True)
    ypos = list(range(len(rows)))[::-1]
    for ax, (col, label) in zip(axs, BAR_PANELS):
        vals = rows[col].astype(float) if col in rows.columns else [math.nan] * len(rows)
        ax.barh(ypos, vals, color="tab:blue" if col != "output_throughput" else "tab:green")
        ax.set_xlabel(label)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _num(v) if v > 0 else "0"))
        ax.grid(True, axis="x", alpha=0.3)
    axs[0].set_yticks(ypos)
    axs[0].set_yticklabels(labels, fontsize=8)
    _save(plt, fig, path, _title("p99 latency and output throughput per point", plan), caption)


def _save(plt, fig, path: Path, title: str, caption: str) -> None:
    """A figure's title and caption, then the file."""
    fig.suptitle(title, fontsize=10)
    fig.text(0.01, 0.005, caption, fontsize=7, color="0.35", va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def write_sweep_figures(df, axes: list[str], out_dir: str | Path, *, zip_groups: list[list[str]] = (),
                        base: dict | None = None, goodput: list[str] = ()) -> tuple[list[Path], list[str]]:
    """Draw the figures of a sweep's table ``df`` into ``out_dir/figures``; returns
    (paths written, one-line notes about what was not drawn). Never raises for a figure:
    a failure is a note. ``base``: the sweep's base keys (model / hardware for the title
    when the table lacks them); ``goodput``: its SLOs, named on the goodput panel."""
    notes: list[str] = []
    ok = df[df["status"] == "ok"] if "status" in df.columns else df.iloc[0:0]
    if ok.empty:
        counts = df["status"].value_counts().to_dict() if "status" in df.columns else {}
        why = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no points"
        return [], [f"no figures: no point ran ok ({why}; reasons in results.csv)"]
    fig_dir = Path(out_dir) / "figures"
    if fig_dir.is_dir():
        for pat in OWN_PATTERNS:
            for old in fig_dir.glob(pat):
                old.unlink()
    axes = [k for k in axes if k in ok.columns]
    try:
        plan = plan_figures(ok, axes, zip_groups, base)
    except Exception as e:  # a table this module does not understand: the table stands alone
        return [], [f"no figures: {type(e).__name__}: {e}"]
    caption = _caption(df, len(ok))
    paths: list[Path] = []

    def draw(path: Path, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as e:  # one figure fails, the others and the table are still written
            notes.append(f"figure {path.name} not drawn: {type(e).__name__}: {e}")
        else:
            paths.append(path)

    if plan.x is None:
        path = fig_dir / "p99_latency_throughput_per_point.png"
        if len(ok) > MAX_BARS:
            notes.append(f"{path.name}: the first {MAX_BARS} of {len(ok)} ok points drawn")
        draw(path, _draw_bars, ok, plan, axes, path, caption)
        return paths, notes
    xs = slug(short_key(plan.x, axes))
    xname = short_key(plan.x, axes).replace("_", " ")
    facets = groups(ok, plan.facet_keys) if plan.facet_keys else [((), ok)]
    if len(facets) > MAX_FILES:
        notes.append(f"{len(facets)} figure files per kind by {', '.join(plan.facet_keys)}: the first "
                     f"{MAX_FILES} drawn")
        facets = facets[:MAX_FILES]
    gp = "goodput" + (f" ({' '.join(goodput)})" if goodput else "")
    has_gp = "request_goodput" in ok.columns and any(_is_number(v) for v in ok["request_goodput"])
    tput = [("output_throughput", "output throughput", "tokens/s")]
    if has_gp:
        tput.append(("request_goodput", f"{gp}; dotted: request throughput", "req/s"))
    for combo, rows in facets:
        facet = line_label(plan.facet_keys, combo, axes)
        if plan.facet_keys:  # this file's points, then the whole table's count
            caption = f"{len(rows)} points in this figure ({facet}); " + _caption(df, len(ok))
        suffix = "".join(f"_{slug(short_key(k, axes))}_{slug(fmt_value(v))}" for k, v in zip(plan.facet_keys, combo))
        lat = fig_dir / f"latency_vs_{xs}{suffix}.png"
        draw(lat, _draw_lines, rows, plan, axes, LATENCY_PANELS, lat, "latency vs " + xname,
             facet, caption)
        thr = fig_dir / f"throughput_vs_{xs}{suffix}.png"
        draw(thr, _draw_lines, rows, plan, axes, tput, thr, "throughput vs " + xname, facet,
             caption, {"request_goodput": "request_throughput"})
    return paths, notes
