"""Per-pool metrics of a disaggregated run (``summary.json``): each pool's
utilisation, KV usage, queue and batch, and the KV transfer's times.

``{pool}_utilization``: the pool's engine-busy time over its engines (workers
× attention-DP ranks, each busy its group's steps) × the run's duration (first
send → last completion); ``{pool}_mean_kv_cache_usage``
and the other means are time averages over the pool's steps (as the run-wide
keys are over all steps). Transfer keys are over the measured requests that
were transferred: ``kv_transfer_ms`` (on the link), ``kv_transfer_queue_ms``
(waiting for the link: prompts finishing prefill together),
``decode_kv_wait_ms`` (waiting for decode-side blocks: decode-KV-bound)."""

from __future__ import annotations

import numpy as np

from sim.results.metrics import STATUS_FINISHED

POOLS = ("prefill", "decode")


def pool_summary(req: dict[str, np.ndarray], steps: dict[str, np.ndarray], *, num_workers: dict[str, int],
                 duration: float, ranks_per_worker: dict[str, int] | None = None) -> dict:
    """``ranks_per_worker``: a pool's attention data-parallel ranks per worker
    (each rank records its own steps, the group's steps once per rank)."""
    out: dict = {f"num_{p}_workers": num_workers[p] for p in POOLS}
    pool_col = steps["pool"]
    for p in POOLS:
        m = pool_col == p
        dt = steps["step_time_s"][m]
        busy = float(dt.sum())
        span = duration * num_workers[p] * (ranks_per_worker or {}).get(p, 1)
        out[f"{p}_utilization"] = busy / span if span > 0 and np.isfinite(span) else float("nan")
        if busy > 0:
            w = dt / busy
            out[f"{p}_mean_kv_cache_usage"] = float((steps["mean_kv_cache_usage"][m] * w).sum())
            out[f"{p}_max_kv_cache_usage"] = float(steps["kv_cache_usage"][m].max())
            out[f"{p}_mean_num_running_seqs"] = float((steps["num_running_seqs"][m] * w).sum())
            out[f"{p}_mean_num_waiting_reqs"] = float((steps["mean_num_waiting_reqs"][m] * w).sum())
            out[f"{p}_num_preemptions"] = int(steps["num_preempted"][m].sum())
        else:
            for k in ("mean_kv_cache_usage", "max_kv_cache_usage", "mean_num_running_seqs",
                      "mean_num_waiting_reqs"):
                out[f"{p}_{k}"] = 0.0
            out[f"{p}_num_preemptions"] = 0
    moved = (req["is_warmup"] == 0) & (req["status"] == STATUS_FINISHED) & ~np.isnan(req["kv_transfer_ms"])
    out["num_kv_transfers"] = int(moved.sum())
    for key in ("kv_transfer_ms", "kv_transfer_queue_ms", "decode_kv_wait_ms"):
        v = req[key][moved]
        out[f"mean_{key}"] = float(v.mean()) if v.size else 0.0
        out[f"p99_{key}"] = float(np.percentile(v, 99)) if v.size else 0.0
    b = req["kv_transfer_bytes"][moved]
    out["mean_kv_transfer_bytes"] = float(b.mean()) if b.size else 0.0
    return out
