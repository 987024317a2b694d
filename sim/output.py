"""Write a run's results: ``summary.json``, ``requests.csv``, ``steps.csv``
(column names in ``../shared/DESIGN.md``, "Outputs of a run"). pandas is
imported here, when results are written, never on the simulation's path."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from sim.engine import RunResult
from sim.metrics import STATUS_FINISHED, request_latencies

REQUEST_CSV_COLUMNS = (
    "request_id", "replica", "arrival_time_s", "first_scheduled_time_s", "first_token_time_s",
    "finish_time_s", "num_prompt_tokens", "num_output_tokens", "max_tokens", "num_cached_tokens",
    "num_preemptions", "ttft_ms", "tpot_ms", "e2el_ms", "queue_ms", "prefill_ms", "decode_ms",
    "preempted_ms", "status", "reason",
)
_INT_COLS = ("request_id", "replica", "num_prompt_tokens", "num_output_tokens", "max_tokens",
             "num_cached_tokens", "num_preemptions")


def requests_frame(result: RunResult):
    import pandas as pd

    r = result.requests
    lat = request_latencies(r)
    done = r["status"] == STATUS_FINISHED
    df = pd.DataFrame({c: r[c] for c in ("request_id", "replica", "arrival_time_s", "first_scheduled_time_s",
                                          "first_token_time_s", "finish_time_s", "num_prompt_tokens",
                                          "num_output_tokens", "max_tokens", "num_cached_tokens",
                                          "num_preemptions")})
    for c in _INT_COLS:
        df[c] = df[c].astype(np.int64)
    for c in ("first_scheduled_time_s", "first_token_time_s", "finish_time_s"):
        df[c] = np.where(df[c] < 0, np.nan, df[c])
    for key in ("ttft", "tpot", "e2el", "queue", "prefill", "decode"):
        df[f"{key}_ms"] = lat[f"{key}_s"] * 1e3
    df["preempted_ms"] = np.where(done, r["preempted_s"] * 1e3, np.nan)
    df["status"] = np.where(done, "finished", "rejected")
    df["reason"] = [result.rejected_reasons.get(int(i), "") for i in r["request_id"]]
    df["is_warmup"] = r["is_warmup"].astype(bool)
    return df[list(REQUEST_CSV_COLUMNS) + ["is_warmup"]]


def steps_frame(result: RunResult):
    import pandas as pd

    df = pd.DataFrame(result.steps)
    for c in ("replica", "num_steps", "num_running_seqs", "num_waiting_reqs", "num_batched_tokens",
              "num_prefill_tokens", "num_decode_tokens", "num_preempted"):
        df[c] = df[c].astype(np.int64)
    return df


def json_safe(obj):
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        return json_safe(obj.item())
    return obj


def write_results(out_dir: str | Path, summary: dict, result: RunResult) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(json_safe(summary), indent=2, default=str) + "\n")
    requests_frame(result).to_csv(out / "requests.csv", index=False, float_format="%.9g")
    steps_frame(result).to_csv(out / "steps.csv", index=False, float_format="%.9g")
    return out
