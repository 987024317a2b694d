"""Write a run's results: ``summary.json``, ``requests.csv``, ``steps.csv``
(column names in ``../shared/DESIGN.md``, "Outputs of a run"). The CSVs are
written with the csv module; pandas frames of the same columns (for
``compare``'s report) are built only on request."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from sim.results.run_result import RunResult
from sim.results.metrics import REQUEST_COLUMNS, STATUS_FINISHED, request_latencies

REQUEST_CSV_COLUMNS = (
    "request_id", "replica", "arrival_time_s", "first_scheduled_time_s", "first_token_time_s",
    "finish_time_s", "num_prompt_tokens", "num_output_tokens", "max_tokens", "num_cached_tokens",
    "num_preemptions", "ttft_ms", "tpot_ms", "e2el_ms", "queue_ms", "prefill_ms", "decode_ms",
    "preempted_ms", "status", "reason",
)
_INT_COLS = ("request_id", "replica", "num_prompt_tokens", "num_output_tokens", "max_tokens",
             "num_cached_tokens", "num_preemptions")
_STEP_INT_COLS = ("replica", "num_steps", "num_running_seqs", "num_waiting_reqs", "num_batched_tokens",
                  "num_prefill_tokens", "num_decode_tokens", "num_preempted")


def request_columns(result: RunResult) -> dict[str, np.ndarray]:
    """requests.csv's columns (``REQUEST_CSV_COLUMNS`` + ``is_warmup``, ``priority``) as
    arrays: times in s and latencies in ms, NaN where a request never got
    there (rejected, or no token yet)."""
    r = result.requests
    lat = request_latencies(r)
    done = r["status"] == STATUS_FINISHED
    cols: dict[str, np.ndarray] = {}
    for c in REQUEST_CSV_COLUMNS[:11]:
        v = r[c]
        if c in _INT_COLS:
            v = v.astype(np.int64)
        elif c in ("first_scheduled_time_s", "first_token_time_s", "finish_time_s"):
            v = np.where(v < 0, np.nan, v)
        cols[c] = v
    for key in ("ttft", "tpot", "e2el", "queue", "prefill", "decode"):
        cols[f"{key}_ms"] = lat[f"{key}_s"] * 1e3
    cols["preempted_ms"] = np.where(done, r["preempted_s"] * 1e3, np.nan)
    cols["status"] = np.where(done, "finished", "rejected")
    cols["reason"] = np.array([result.rejected_reasons.get(i, "") for i in r["request_id"].tolist()], dtype=object)
    cols["is_warmup"] = r["is_warmup"].astype(bool)
    cols["priority"] = r["priority"].astype(np.int64)  # (policy: priority serves lower values first)
    for c in r:  # a disaggregated run's own columns (sim/engine/disagg.py), after the standard ones
        if c not in REQUEST_COLUMNS and c not in cols:
            v = r[c]
            cols[c] = v.astype(np.int64) if c.endswith("_worker") and not np.isnan(v).any() else v
    return cols


def step_columns(result: RunResult) -> dict[str, np.ndarray]:
    """steps.csv's columns as arrays (counts as int64)."""
    cols = dict(result.steps)
    for c in _STEP_INT_COLS:
        cols[c] = cols[c].astype(np.int64)
    return cols


def requests_frame(result: RunResult):
    import pandas as pd

    return pd.DataFrame(request_columns(result))


def steps_frame(result: RunResult):
    import pandas as pd

    return pd.DataFrame(step_columns(result))


def _cells(name: str, v: np.ndarray) -> list[str]:
    """One column as CSV cells, as pandas ``to_csv(float_format=...)`` writes
    them: floats by %.9g (timestamps ``*_time_s`` by %.12g: 10 µs resolution a
    month into a trace), NaN as an empty cell; ints and bools by str."""
    if v.dtype.kind == "f":
        fmt = "%.12g" if name.endswith("_time_s") else "%.9g"
        cells = list(map(fmt.__mod__, v.tolist()))  # (one C-level call per cell)
        for i in np.flatnonzero(np.isnan(v)).tolist():
            cells[i] = ""
        return cells
    return list(map(str, v.tolist()))


def write_csv(path: Path, cols: dict[str, np.ndarray]) -> None:
    """Write equal-length columns as a CSV file (header row first; the csv
    module quotes cells where needed). pandas is not imported: writing a run's
    results with it cost ~0.7 s of a 10,000-request run's process."""
    cells = [_cells(name, v) for name, v in cols.items()]
    with open(path, "w", newline="") as f:
        # Numbers never need quotes; where no name or text cell does either, the csv
        # module's lines are joined directly (a third of its time).
        if len(cols) > 1 and not _needs_quotes(list(cols)) and not any(
                _needs_quotes(c) for c, v in zip(cells, cols.values()) if v.dtype.kind not in "fiub"):
            f.write(",".join(cols) + "\n")
            lines = list(map(",".join, zip(*cells)))
            cells.clear()  # (the cells' strings are in the lines now: not held twice)
            for i in range(0, len(lines), _LINES_PER_WRITE):
                f.write("\n".join(lines[i:i + _LINES_PER_WRITE]) + "\n")
            return
        w = csv.writer(f, lineterminator="\n")
        w.writerow(cols)
        w.writerows(zip(*cells))


_QUOTED = frozenset(',"\r\n')
_LINES_PER_WRITE = 1 << 13


def _needs_quotes(cells: list[str]) -> bool:
    """Would the csv module quote one of these cells (``QUOTE_MINIMAL``: the
    delimiter, the quote character or a line break in it)?"""
    return any(not _QUOTED.isdisjoint(c) for c in set(cells))


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
    write_csv(out / "requests.csv", request_columns(result))
    write_csv(out / "steps.csv", step_columns(result))
    return out
