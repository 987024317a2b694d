"""Accuracy summary and output files of ``servesim validate``.

APE = |predicted − measured| / measured per row; MAPE is its mean and MdAPE
its median, in percent; ``over`` is the share of rows predicted above the
measurement. Rows whose status is not ``ok`` are listed with their reason and
left out of the scores.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from sim.validate.rows import GROUP_KEYS, group_label

METRICS = (("ttft", "silicon_ttft_ms", "pred_ttft_ms"), ("tpot", "silicon_tpot_ms", "pred_tpot_ms"))


def _scores(sub) -> dict[str, Any]:
    out: dict[str, Any] = {"n": int(len(sub))}
    for name, meas, pred in METRICS:
        m = sub[meas].to_numpy(dtype=float)
        p = sub[pred].to_numpy(dtype=float)
        ok = np.isfinite(m) & np.isfinite(p) & (m > 0)
        ape = np.abs(p[ok] - m[ok]) / m[ok]
        out[f"{name}_mape"] = float(np.mean(ape) * 100) if ape.size else math.nan
        out[f"{name}_mdape"] = float(np.median(ape) * 100) if ape.size else math.nan
        out[f"{name}_over_share"] = float(np.mean(p[ok] > m[ok])) if ape.size else math.nan
    return out


def summarize_predictions(df) -> dict[str, Any]:
    """Overall, per-engine, per-model, per-campaign and per-(model, system,
    backend, tp) scores, and the rows that could not be simulated."""
    ok = df[df["status"] == "ok"]
    summary: dict[str, Any] = {"num_rows": int(len(df)), "num_ok": int(len(ok)), "overall": _scores(ok)}
    summary["by_engine"] = {str(k): _scores(g) for k, g in ok.groupby("backend")}
    # per model (all GPUs, engines, parallelism) and per measurement campaign, where the table has one
    summary["by_model"] = {str(k).split("/")[-1]: _scores(g) for k, g in ok.groupby("model_path")}
    summary["by_campaign"] = ({str(k): _scores(g) for k, g in ok.groupby("campaign")}
                              if "campaign" in ok.columns else {})
    groups = {}
    for key, g in ok.groupby(list(GROUP_KEYS)):
        groups[group_label(dict(zip(GROUP_KEYS, key)))] = _scores(g)
    summary["by_group"] = groups
    bad = df[df["status"] != "ok"]
    summary["not_simulated"] = [
        {"line": int(i) + 2, "id": str(r.get("id", "")), "status": str(r["status"]), "reason": str(r["reason"])}
        for i, r in bad.iterrows()
    ]
    return summary


def rows_line(summary: dict[str, Any]) -> str:
    """"N of M rows simulated (k skipped, j not simulated)": M counts every data
    row of the CSV, the skipped ones (a cell not a number) included; with a
    selection (``--where`` / ``--limit``) the selected rows, named so."""
    opts = summary.get("options") or {}
    sel = [f"--where {c}={','.join(v)}" for c, v in (opts.get("where") or {}).items()]
    sel += [f"--limit {opts['limit']}"] if opts.get("limit") is not None else []
    rows = f"rows selected by {' '.join(sel)}" if sel else "rows"
    skipped = summary.get("num_skipped_rows", 0)
    total = summary["num_rows"] + (0 if sel else skipped)  # (a skipped row cannot be told selected or not)
    parts = ([f"{skipped} of the file's rows skipped" if sel else f"{skipped} skipped"] if skipped else []) + (
        [f"{len(summary['not_simulated'])} not simulated"] if summary.get("not_simulated") else [])
    return f"{summary['num_ok']} of {total} {rows} simulated" + (f" ({', '.join(parts)})" if parts else "")


def _fmt(v: float) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


def summary_markdown(summary: dict[str, Any], title: str = "servesim validate") -> str:
    lines = [f"# {title}", ""]
    o = summary["overall"]
    lines += [rows_line(summary) + (f" in {summary['wall_time_s']:.1f} s" if "wall_time_s" in summary else "")
              + ".", ""]
    head = ("| group | n | TTFT MAPE % | TTFT MdAPE % | TTFT over | TPOT MAPE % | TPOT MdAPE % | TPOT over |\n"
            "|---|---|---|---|---|---|---|---|")

    def line(name: str, s: dict) -> str:
        return (f"| {name} | {s['n']} | {_fmt(s['ttft_mape'])} | {_fmt(s['ttft_mdape'])} | "
                f"{_fmt(100 * s['ttft_over_share'])}% | {_fmt(s['tpot_mape'])} | {_fmt(s['tpot_mdape'])} | "
                f"{_fmt(100 * s['tpot_over_share'])}% |")

    lines += [head, line("**all**", o)]
    lines += [line(f"engine {k}", s) for k, s in summary["by_engine"].items()]
    lines += [line(f"model {k}", s) for k, s in summary.get("by_model", {}).items()]
    lines += [line(f"campaign {k}", s) for k, s in summary.get("by_campaign", {}).items()]
    lines += [line(k, s) for k, s in summary["by_group"].items()]
    lines.append("")
    if summary["not_simulated"]:
        lines += ["## Rows not simulated", "", "| line in the CSV | id | status | reason |", "|---|---|---|---|"]
        for r in summary["not_simulated"]:
            lines.append(f"| {r['line']} | {r['id']} | {r['status']} | {r['reason'].replace('|', '/')} |")
        lines.append("")
    if summary.get("warnings"):
        lines += ["## Warnings", ""] + [f"- {w}" for w in summary["warnings"]] + [""]
    if summary.get("figures"):  # written beside this file (sim/validate/plots.py)
        lines += ["## Figures", ""] + [f"![{f}]({f})" for f in summary["figures"]] + [""]
    if summary.get("skipped_rows"):
        lines += ["## Rows skipped (a cell is not a number, or a line of the wrong field count)", "",
                  "| line in the CSV | column | value |",
                  "|---|---|---|"]
        lines += [f"| {r['line']} | {r['column']} | {r['value'].replace('|', '/')} |" for r in summary["skipped_rows"]]
        lines.append("")
    return "\n".join(lines)


def _json_safe(x):
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, np.generic):
        return _json_safe(x.item())
    return x


def write_validation(df, summary: dict[str, Any], out_dir: str | Path, plots: bool = True,
                     title: str = "servesim validate") -> list[Path]:
    """``predictions.csv``, ``summary.json``, ``summary.md`` and (``plots``)
    ``scatter_ttft.png``, ``scatter_tpot.png``, ``residuals_by_group.png``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "predictions.csv", out / "summary.json", out / "summary.md"]
    figures = []
    if plots:
        from sim.validate.plots import plot_residuals, plot_scatter

        ok = df[df["status"] == "ok"]
        for name, meas, pred in METRICS:
            figures.append(plot_scatter(ok, meas, pred, name.upper(), out / f"scatter_{name}.png"))
        figures.append(plot_residuals(ok, out / "residuals_by_group.png"))
    md = dict(summary, figures=[f.name for f in figures])  # (summary.md links them; summary.json unchanged)
    df.to_csv(paths[0], index=False)
    paths[1].write_text(json.dumps(_json_safe(summary), indent=2) + "\n")
    paths[2].write_text(summary_markdown(md, title))
    return paths + figures
