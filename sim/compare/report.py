"""The ``servesim compare`` report: ``comparison.csv``, the figures and ``report.md``.

:func:`write_compare_report` writes, directly in ``out_dir``:

- ``comparison.csv``: one row per variant — ``variant``, the flat ``summary.json``
  keys, and the scalar keys of the resolved config as ``config.<key>``;
- the figures of :mod:`sim.compare.plots` (``ttft_cdf.png``, ``itl_cdf.png``,
  ``latency_percentiles.png``, ``timeline.png``, ``latency_breakdown.png``);
- ``report.md``: title, context, the comparison table, what wins
  (:func:`sim.compare.diagnosis.compare_winners`), the diagnosis of each variant
  (:func:`sim.compare.diagnosis.diagnose`) and the figures with what to look for.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sim.compare.diagnosis import diagnose
from sim.results.warnings import comparison_warnings
from sim.compare.variant_data import VariantData
from sim.compare.winners import compare_winners

__all__ = ["VariantData", "comparison_frame", "write_compare_report", "CAPTIONS"]

CAPTIONS = {
    "ttft_cdf.png": ("TTFT distribution", "how long users wait for the first token; left the whole "
                     "distribution, right the tail — a curve further left is faster, and a long right tail means "
                     "some requests queue far longer than the median."),
    "itl_cdf.png": ("ITL distribution", "the gap between streamed tokens, weighted by tokens; a steep curve "
                    "means smooth streaming, a tail stretching right (hundreds of ms) means decodes stalled "
                    "behind prefill work."),
    "latency_percentiles.png": ("Latency percentiles", "p50 / p90 / p99 of each latency metric per variant; "
                                "the gap between p50 and p99 is how much the tail suffers."),
    "timeline.png": ("Over time", "waiting queue, running batch, KV-cache usage and TTFT per arrival; a queue "
                     "that keeps climbing means the load exceeds capacity, KV near 100 % means admission is "
                     "memory-bound, and TTFT rising with the queue means time is spent waiting."),
    "latency_breakdown.png": ("Latency breakdown", "where the median and the p99 request (by end-to-end latency) "
                              "spent their time; a big grey queueing bar points at capacity, a red one at "
                              "preemptions."),
}

TABLE = (  # (header, summary key (None: KV usage), decimals (None: by magnitude))
    ("GPUs", "num_gpus", 0),  # what each variant costs: a winner on more GPUs is not a like-for-like win
    ("req/s", "request_throughput", 2),
    ("output tok/s", "output_throughput", None),
    ("TTFT p50 (ms)", "median_ttft_ms", None),
    ("TTFT p99 (ms)", "p99_ttft_ms", None),
    ("TPOT p50 (ms)", "median_tpot_ms", None),
    ("TPOT p99 (ms)", "p99_tpot_ms", None),
    ("ITL p99 (ms)", "p99_itl_ms", None),
    ("E2EL p99 (ms)", "p99_e2el_ms", None),
    ("goodput (req/s)", "request_goodput", 2),
    ("KV usage mean / max", None, 0),
    ("preemptions", "num_preemptions", 0),
    ("prefix hit rate", "prefix_cache_hit_rate", 3),
    ("rejected", "num_rejected", 0),
)


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _flat_row(name: str, summary: dict) -> dict:
    row: dict[str, Any] = {"variant": name}
    for k, v in summary.items():
        if k == "config":
            continue
        row[k] = v if _scalar(v) else json.dumps(v, default=str)
    for k, v in (summary.get("config") or {}).items():
        if _scalar(v):
            row[f"config.{k}"] = v
    return row


def comparison_frame(variants: dict[str, VariantData]):
    """One row per variant: ``variant``, the summary keys, ``config.<key>`` for scalar config keys."""
    import pandas as pd

    return pd.DataFrame([_flat_row(n, v.summary) for n, v in variants.items()])


def _fmt(v: Any, nd: int | None) -> str:
    """``nd`` decimals; None = by magnitude (2 below 10, 1 below 100, else 0)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if nd is None:
        nd = 2 if abs(v) < 10 else 1 if abs(v) < 100 else 0
    return f"{v:,.{nd}f}"


def _differing_config(variants: dict[str, VariantData]) -> dict[str, str]:
    """Per variant, the config keys whose values differ between variants (``k=v, …``)."""
    cfgs = {n: _flat_config(vd.summary.get("config") or {}) for n, vd in variants.items()}
    keys = sorted({k for c in cfgs.values() for k in c})
    # (a key only some variants have, e.g. a disaggregated run's, counts where it differs among those)
    diff = [k for k in keys if len({json.dumps(c[k], default=str) for c in cfgs.values() if k in c}) > 1]
    return {n: ", ".join(f"{k}={c[k]}" for k in diff if k in c) for n, c in cfgs.items()}


def _flat_config(cfg: dict) -> dict:
    """The scalar config keys; a disaggregated run's ``disaggregation`` keys
    dotted (``disaggregation.decode.tensor_parallel_size``), without the
    top-level keys its pools resolve (left unset there)."""
    dis = cfg.get("disaggregation")
    out = {k: v for k, v in cfg.items() if _scalar(v) and not (dis and (v is None or k == "num_replicas"))}
    if isinstance(dis, dict):
        for k, v in dis.items():
            if isinstance(v, dict):
                out.update({f"disaggregation.{k}.{k2}": v2 for k2, v2 in v.items() if _scalar(v2)})
            elif _scalar(v):  # (None too: a default against a value set in another variant is a difference)
                out[f"disaggregation.{k}"] = v
    return out


def markdown_table(variants: dict[str, VariantData]) -> str:
    """The comparison table (rows = variants) in GitHub markdown."""
    settings = _differing_config(variants)
    show_settings = any(settings.values())
    head = ["variant"] + (["settings"] if show_settings else []) + [h for h, _, _ in TABLE]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + (["---"] if show_settings else [])
                                                              + ["---:"] * len(TABLE)) + "|"]
    for n, v in variants.items():
        s = v.summary
        cells = [n] + ([settings[n] or "–"] if show_settings else [])
        for h, key, nd in TABLE:
            if key is None:
                mean, mx = s.get("mean_kv_cache_usage"), s.get("max_kv_cache_usage")
                cells.append(f"{_fmt(_pct(mean), 0)} % / {_fmt(_pct(mx), 0)} %")
            else:
                cells.append(_fmt(s.get(key), nd))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pct(x):
    return None if x is None else 100.0 * float(x)


def _context_paragraph(variants: dict[str, VariantData], context: dict) -> str:
    first = next(iter(variants.values())).summary if variants else {}
    cfg = first.get("config") or {}
    ctx = dict(context)
    model = ctx.pop("model", cfg.get("model", "?"))
    hw = ctx.pop("hardware", cfg.get("hardware", "?"))

    def shape(v):  # the deployment's size, as one variant ran it
        c = v.summary.get("config") or {}
        return (c.get("hardware"), c.get("tensor_parallel_size"), c.get("data_parallel_size"),
                c.get("num_replicas"), bool(c.get("disaggregation")))

    shapes = {shape(v) for v in variants.values()}
    if len(shapes) <= 1:  # every variant on the same deployment: say which
        tp, reps = cfg.get("tensor_parallel_size"), cfg.get("num_replicas")
        where = (f"{hw}" + (f", TP={tp}" if tp and tp != 1 else "")
                 + (f", {reps} replicas" if reps and reps != 1 and not cfg.get("disaggregation") else ""))
    else:  # the variants differ in GPUs, parallelism or replicas: the table's rows say how
        hws = sorted({str(s[0]) for s in shapes})
        where = (f"{hws[0]}" if len(hws) == 1 else ", ".join(hws)) + " (the deployment differs per variant)"
    workload = ctx.pop("workload", first.get("workload_source", "?"))
    n = ctx.pop("num_requests", None)
    rate = ctx.pop("request_rate", None)
    parts = [f"**Model** {model} on **{where}**.", f"**Workload**: {workload}"]
    if n is not None:
        parts[-1] += f", {n:,} requests" if isinstance(n, int) else f", {n} requests"
    if rate is not None:
        parts[-1] += f" at {rate} req/s" if not isinstance(rate, str) else f" at {rate}"
    parts[-1] += "."
    parts.append("Every variant saw the identical arrivals and request lengths (a paired comparison).")
    extra = [f"{k}: {v}" for k, v in ctx.items()]
    if extra:
        parts.append(" ".join(f"{e}." for e in extra))
    parts += [f"\n\n**Warning**: {w}." for w in comparison_warnings({n: v.summary for n, v in variants.items()})]
    return " ".join(parts)


def _diagnosis_section(variants: dict[str, VariantData]) -> list[str]:
    out = ["## Diagnosis", ""]
    for n, v in variants.items():
        out.append(f"### {n}")
        out.append("")
        findings = diagnose(n, v)
        if not findings:
            out.append("Nothing stands out: no long queueing, no prefill stalls in the decode stream, "
                       "no KV-cache pressure, no rejections.")
        for f in findings:
            out.append(f"- **{f.symptom}** ({f.severity}). {f.cause}  ")
            out.append(f"  Evidence: {f.evidence}")
        out.append("")
    return out


def _launch_lines(name: str, launch) -> list[str]:
    """``report.md``'s launch command of the winner (a :class:`sim.launch.Launch`)."""
    return launch.markdown(f"Launch command of the winner ({name}, {launch.engine})")


def write_compare_report(out_dir: str | Path, variants: dict[str, VariantData], *, title: str,
                         context: dict | None = None, launch: tuple[str, object] | None = None) -> Path:
    """Write ``comparison.csv``, the five PNG figures, ``report.md`` and
    ``report.html`` (the same, figures inlined: one self-contained page) into
    ``out_dir`` (created if needed); returns the path of ``report.md``.

    ``context`` keys shown in the context paragraph: ``model``, ``hardware``,
    ``workload`` (its source: a trace path or a built-in name), ``num_requests``,
    ``request_rate``; any other key is listed as ``key: value``. Model and
    hardware default to the first variant's config.
    """
    from sim.compare.plots import FIGURES  # matplotlib only when a report is written
    from sim.results.html_report import write_html_report

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    comparison_frame(variants).to_csv(out / "comparison.csv", index=False, float_format="%.6g")
    for fname, fn in FIGURES.items():
        fn(variants, out / fname)
    lines = [f"# {title}", "", _context_paragraph(variants, context or {}), "", "## Comparison", "",
             markdown_table(variants), "",
             "Throughput over first send → last completion; latencies as `vllm bench serve` defines them; "
             "goodput counts requests meeting every SLO given with `--goodput`. Full numbers: "
             "[comparison.csv](comparison.csv).", ""]
    winners = compare_winners(variants)
    if winners:
        lines += ["## What wins", ""] + [f"- {w}" for w in winners] + [""]
    if launch is not None:
        lines += _launch_lines(*launch)
    lines += _diagnosis_section(variants)
    lines += ["## Figures", ""]
    for fname, (head, what) in CAPTIONS.items():
        lines += [f"### {head}", "", f"![{head}]({fname})", "", f"*What to look for:* {what}", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    write_html_report(path, out / "report.html")
    return path
