"""A run's engine steps as a Chrome / Perfetto trace (``servesim run --trace FILE``).

The JSON object form of the Trace Event Format
(https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
open it in https://ui.perfetto.dev or ``chrome://tracing``.

- one process, ``servesim``, with one thread (track) per replica; each
  ``steps.csv`` row is a complete event (``ph: X``) on its replica's track,
  named by its composition (``prefill``, ``decode``, ``prefill+decode``, and
  ``decode xN`` for a merged run of N identical decode steps), with the row's
  token counts, batch and queue in ``args``;
- counter tracks (``ph: C``) per replica: ``kv_cache_usage`` (the fraction of KV
  blocks in use at each step's end) and ``requests`` (running and waiting).

Timestamps are simulated time in microseconds (the format's unit).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sim.errors import ConfigError

from sim.results.output import json_safe
from sim.results.run_result import RunResult

PID = 1
#: steps.csv columns copied into each slice's args
_ARGS = ("num_steps", "num_batched_tokens", "num_prefill_tokens", "num_decode_tokens", "num_running_seqs",
         "num_waiting_reqs", "kv_cache_usage", "num_preempted")


def _slice_name(prefill: int, decode: int, num_steps: int) -> str:
    if num_steps > 1:
        return f"decode x{num_steps}" if prefill == 0 else f"prefill+decode x{num_steps}"
    if prefill and decode:
        return "prefill+decode"
    return "prefill" if prefill else "decode" if decode else "idle"


def trace_events(result: RunResult, title: str = "servesim") -> list[dict]:
    """The trace's events: metadata, one slice per steps row, counters."""
    s = result.steps
    n = len(s["start_time_s"])
    replicas = sorted({int(r) for r in s["replica"].tolist()}) or [0]
    events: list[dict] = [{"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": title}}]
    for r in replicas:
        events.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": r, "args": {"name": f"replica {r}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": r, "args": {"sort_index": r}})
    cols = {c: s[c].tolist() for c in _ARGS + ("replica", "start_time_s", "step_time_s")}
    for i in range(n):
        r = int(cols["replica"][i])
        # µs to the ns; the end rounded on its own, so a step ending as the next starts
        # meets it exactly on the track (no overlap from rounding)
        ts = round(cols["start_time_s"][i] * 1e6, 3)
        end = round((cols["start_time_s"][i] + cols["step_time_s"][i]) * 1e6, 3)
        args = {c: (float(cols[c][i]) if c == "kv_cache_usage" else int(cols[c][i])) for c in _ARGS}
        events.append({"name": _slice_name(args["num_prefill_tokens"], args["num_decode_tokens"],
                                           args["num_steps"]),
                       "cat": "step", "ph": "X", "ts": ts, "dur": round(end - ts, 3),
                       "pid": PID, "tid": r, "args": args})
        events.append({"name": f"kv_cache_usage replica {r}", "ph": "C", "ts": end, "pid": PID,
                       "args": {"kv_cache_usage": args["kv_cache_usage"]}})
        events.append({"name": f"requests replica {r}", "ph": "C", "ts": end, "pid": PID,
                       "args": {"running": args["num_running_seqs"], "waiting": args["num_waiting_reqs"]}})
    return events


def check_trace_path(path: str | Path) -> Path:
    """``path`` as a place for a trace, or ConfigError naming it: a folder, or
    an existing file that is not a trace servesim wrote (never overwritten:
    ``--trace /etc/passwd`` must not replace a system file)."""
    p = Path(path)
    if not str(path).strip() or p.is_dir():
        raise ConfigError(f"trace {str(path)!r}: give a file name for the trace, e.g. trace.json")
    if p.exists():
        try:
            with open(p, "rb") as f:
                head = f.read(16)
        except OSError as e:
            raise ConfigError(f"trace {p}: cannot read the existing file ({e.strerror or e})") from None
        if not head.startswith(b'{"traceEvents"'):
            raise ConfigError(f"trace {p}: an existing file that is not a servesim trace; it is not "
                              "overwritten: give a new file name")
    return p


def write_trace(path: str | Path, result: RunResult, summary: dict | None = None) -> Path:
    """Write the trace JSON to ``path`` (its folder created; an existing file only
    if it is an earlier trace, :func:`check_trace_path`); returns the path."""
    check_trace_path(path)
    title = "servesim"
    meta: dict = {}
    if summary is not None and isinstance(summary.get("config"), dict):
        cfg = summary["config"]
        title = f"servesim: {cfg.get('model')} on {cfg.get('hardware')}, {cfg.get('scheduler')}"
        meta = json_safe({"config": cfg, "servesim_version": summary.get("servesim_version")})
    doc = {"traceEvents": trace_events(result, title), "displayTimeUnit": "ms", "otherData": meta}
    p = Path(path)
    if p.parent != Path("."):
        p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w") as f:
        json.dump(doc, f, separators=(",", ":"), default=_default, allow_nan=False)
        f.write("\n")
    return p


def _default(v):
    if isinstance(v, np.generic):
        return v.item()
    return str(v)
