"""One variant's results, as ``servesim compare`` hands them to the report
(:mod:`sim.compare.report`), the figures (:mod:`sim.compare.plots`) and the diagnosis
(:mod:`sim.compare.diagnosis`). Formats: ``../shared/DESIGN.md``, "Outputs of a run".

This module imports neither pandas nor the engine at import time; the helpers
below import them when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


@dataclass
class VariantData:
    """Results of one simulation of one variant.

    - ``summary``: the ``summary.json`` keys (``config`` is the resolved config dict).
    - ``requests``: the ``requests.csv`` columns plus ``is_warmup`` (bool); one row
      per request, latencies in ms, NaN for rejected requests.
    - ``steps``: the ``steps.csv`` columns; one row per engine step or per run of
      identical decode steps (``num_steps`` > 1, ``step_time_s`` = the run's total, s).
    - ``itl``: (gap values in s, integer weights = tokens that saw that gap).
    """

    name: str
    summary: dict[str, Any]
    requests: "pd.DataFrame"
    steps: "pd.DataFrame"
    itl: tuple[np.ndarray, np.ndarray]

    @classmethod
    def from_run(cls, name: str, run_output: Any) -> "VariantData":
        """From a :class:`sim.runner.RunOutput` (imports :mod:`sim.results.output` lazily)."""
        from sim.results.output import requests_frame, steps_frame

        res = run_output.result
        return cls(name, run_output.summary, requests_frame(res), steps_frame(res), res.itl)

    def measured_requests(self) -> "pd.DataFrame":
        """Requests that count (warm-up excluded), finished and rejected."""
        df = self.requests
        if "is_warmup" in df.columns:
            df = df[~df["is_warmup"].astype(bool)]
        return df

    def finished_requests(self) -> "pd.DataFrame":
        """Measured requests that finished (latency columns are all set)."""
        df = self.measured_requests()
        if "status" in df.columns:
            df = df[df["status"] == "finished"]
        return df

    def itl_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """ITL (gaps in s, weights) as float arrays, zero-weight entries dropped."""
        v = np.asarray(self.itl[0], dtype=float) if self.itl is not None else np.zeros(0)
        w = np.asarray(self.itl[1], dtype=float) if self.itl is not None else np.zeros(0)
        keep = (w > 0) & np.isfinite(v)
        return v[keep], w[keep]


def num_replicas_of(v: VariantData) -> int:
    """Replicas of the run: the config's ``num_replicas``, or the replicas seen in steps."""
    seen = int(v.steps["replica"].nunique()) if len(v.steps) and "replica" in v.steps.columns else 1
    cfg = v.summary.get("config") or {}
    try:
        return max(int(cfg.get("num_replicas") or 1), seen)
    except (TypeError, ValueError):
        return seen


def step_timeseries(steps: "pd.DataFrame", *, max_points: int = 2000, num_replicas: int | None = None,
                    t_range: tuple[float, float] | None = None) -> "pd.DataFrame":
    """Time-binned averages of the per-step columns, ≤ ``max_points`` bins.

    Each ``steps`` row holds its values over ``[start_time_s, start_time_s +
    step_time_s)`` (a merged row of ``num_steps`` identical decode steps covers
    the whole run; its ``kv_cache_usage`` is the value at the run's end, its
    ``mean_kv_cache_usage`` the run's time average, used here when present, as
    ``mean_num_waiting_reqs``). An
    idle replica has nothing waiting or running and holds no KV blocks, so it
    counts as 0. Per bin: ``num_waiting_reqs`` and ``num_running_seqs`` are time
    averages summed over replicas; ``kv_cache_usage`` (0..1) is the time average
    averaged over replicas; ``prefill_tokens_per_s`` is the prefill rate summed
    over replicas. Returns columns ``time_s`` (bin centre, s) and those four;
    empty when there are no steps. O(rows · log rows): each replica's running
    integral is interpolated at the bin edges.
    """
    import pandas as pd

    cols = ("num_waiting_reqs", "num_running_seqs", "kv_cache_usage", "num_prefill_tokens")
    if steps is None or len(steps) == 0:
        return pd.DataFrame({"time_s": [], "num_waiting_reqs": [], "num_running_seqs": [],
                             "kv_cache_usage": [], "prefill_tokens_per_s": []})
    start = steps["start_time_s"].to_numpy(float)
    dur = np.maximum(steps["step_time_s"].to_numpy(float), 0.0)
    end = start + dur
    t0, t1 = t_range if t_range is not None else (float(start.min()), float(end.max()))
    if not t1 > t0:
        t1 = t0 + 1e-9
    nbins = int(max(1, min(max_points, len(steps))))
    edges = np.linspace(t0, t1, nbins + 1)
    width = np.diff(edges)
    totals = {c: np.zeros(nbins) for c in cols}
    rep = steps["replica"].to_numpy() if "replica" in steps.columns else np.zeros(len(steps), int)
    for r in np.unique(rep):
        m = rep == r
        order = np.argsort(start[m], kind="stable")
        s, e, d = start[m][order], end[m][order], dur[m][order]
        # Knots of the running integral: it rises across a row and is flat between rows.
        x = np.maximum.accumulate(np.column_stack([s, e]).ravel())
        for c in cols:
            src = f"mean_{c}" if c in ("kv_cache_usage", "num_waiting_reqs") and f"mean_{c}" in steps.columns else c
            v = steps[src].to_numpy(float)[m][order]
            # num_prefill_tokens is a total over the row: integrate it as a rate.
            area = v if c == "num_prefill_tokens" else v * d
            cum = np.concatenate([[0.0], np.cumsum(area)])
            y = np.column_stack([cum[:-1], cum[1:]]).ravel()
            f = np.interp(edges, x, y, left=0.0, right=cum[-1])
            totals[c] += np.diff(f)
    nrep = max(int(num_replicas or 0), len(np.unique(rep)), 1)
    return pd.DataFrame({
        "time_s": 0.5 * (edges[:-1] + edges[1:]),
        "num_waiting_reqs": totals["num_waiting_reqs"] / width,
        "num_running_seqs": totals["num_running_seqs"] / width,
        "kv_cache_usage": totals["kv_cache_usage"] / width / nrep,
        "prefill_tokens_per_s": totals["num_prefill_tokens"] / width,
    })


def queued_average(arrival: np.ndarray, scheduled: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Time-averaged number of requests queued (sent, not yet first scheduled)
    in each bin ``[edges[k], edges[k+1])``, summed over replicas. Every request
    with a finite ``scheduled`` time (s) counts over ``[arrival, scheduled)``;
    rejected requests (NaN) never queue. Unlike ``steps.csv``'s
    ``num_waiting_reqs`` (vLLM's gauge: the queue after each step's admission),
    this sees requests that wait through a long step and are admitted at the next.

    The integral of the count up to e is Σ_{s_i<e} s_i + e·(#{a_i<e} − #{s_i<e}) −
    Σ_{a_i<e} a_i (s_i ≥ a_i); O((n + bins) log n)."""
    ok = np.isfinite(scheduled) & np.isfinite(arrival)
    a, s = np.sort(arrival[ok]), np.sort(np.maximum(scheduled[ok], arrival[ok]))
    ca, cs = np.concatenate([[0.0], np.cumsum(a)]), np.concatenate([[0.0], np.cumsum(s)])
    na, ns = np.searchsorted(a, edges, side="left"), np.searchsorted(s, edges, side="left")
    integral = cs[ns] + edges * (na - ns) - ca[na]
    return np.diff(integral) / np.diff(edges)
