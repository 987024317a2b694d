"""Warnings read from a run's summary: what its workload silently changed."""

from __future__ import annotations


def workload_warnings(s: dict) -> list[str]:
    """What a run's workload silently changed (skipped or reordered trace rows,
    clipped prompts), from its summary; printed by run, compare and plan, and in
    compare's report.md and plan's plan.md."""
    out = []
    if s.get("num_skipped_trace_rows"):
        out.append(f"{s['num_skipped_trace_rows']:,} malformed trace row(s) skipped (workload.skip_bad_rows): "
                   f"{s.get('workload_source', '')}")
    if s.get("num_out_of_order_trace_rows"):
        out.append(f"{s['num_out_of_order_trace_rows']:,} trace row(s) are timestamped before the row above "
                   f"them; the trace was sorted by time (duration {s.get('duration', float('nan')):,.0f} s): "
                   "check its time column")
    if s.get("num_clipped_prompts"):
        out.append(f"{s['num_clipped_prompts']:,} prompt(s) cut to fit max_model_len "
                   "(workload.clip_to_max_model_len)")
    wl = (s.get("config") or {}).get("workload") or {}
    if (wl.get("trace") and wl.get("arrival") is None and wl.get("request_rate") is None
            and wl.get("max_concurrency") is None and str(s.get("workload_source", "")).endswith("arrivals inf")):
        out.append("the trace has no timestamps and no workload.request_rate was given: every request was sent "
                   "at t = 0 (arrival inf); set workload.request_rate or workload.max_concurrency to pace them")
    return out
