"""``servesim run --trace FILE``: the engine steps as a Chrome / Perfetto trace
(sim/results/trace.py), checked against a JSON schema of the Trace Event Format's
JSON object form for the event types it writes (complete ``X``, counter ``C``,
metadata ``M``), and against the run's own steps."""

from __future__ import annotations

import json

import numpy as np
import pytest

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra: pip install -e '.[test]'")

_NUM = {"type": "number"}
_ID = {"type": "integer", "minimum": 0}
#: the Trace Event Format (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU),
#: JSON object form, restricted to the event types and fields the trace uses
TRACE_SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"oneOf": [
            {"type": "object", "required": ["name", "ph", "ts", "dur", "pid", "tid"],
             "properties": {"ph": {"const": "X"}, "name": {"type": "string"}, "cat": {"type": "string"},
                            "ts": _NUM, "dur": {"type": "number", "minimum": 0}, "pid": _ID, "tid": _ID,
                            "args": {"type": "object"}}},
            {"type": "object", "required": ["name", "ph", "ts", "pid", "args"],
             "properties": {"ph": {"const": "C"}, "name": {"type": "string"}, "ts": _NUM, "pid": _ID,
                            "args": {"type": "object", "minProperties": 1,
                                     "additionalProperties": _NUM}}},  # counter values are numbers
            {"type": "object", "required": ["name", "ph", "pid", "args"],
             "properties": {"ph": {"const": "M"},
                            "name": {"enum": ["process_name", "thread_name", "process_sort_index",
                                              "thread_sort_index"]},
                            "pid": _ID, "tid": _ID, "args": {"type": "object"}}},
        ]}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
}


def _run_with_trace(tmp_path, *args):
    from typer.testing import CliRunner

    from sim.cli.main import app

    path = tmp_path / "sub" / "trace.json"
    r = CliRunner().invoke(app, ["run", "--quiet", "--out", str(tmp_path / "out"), "--trace", str(path), *args])
    assert r.exit_code == 0, r.output
    assert f"trace written to {path}" in r.output
    return json.loads(path.read_text()), tmp_path / "out"


def test_trace_is_valid_trace_event_format_with_one_track_per_replica(tmp_path):
    import pandas as pd

    doc, out = _run_with_trace(tmp_path, "--set", "workload.num_requests=120", "--set", "num_replicas=2",
                               "--set", "workload.request_rate=6")
    jsonschema.validate(doc, TRACE_SCHEMA)
    steps = pd.read_csv(out / "steps.csv")
    ev = doc["traceEvents"]
    slices = [e for e in ev if e["ph"] == "X"]
    threads = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {0: "replica 0", 1: "replica 1"}
    assert len(slices) == len(steps)  # one slice per steps.csv row (a merged run is one slice)
    for r in (0, 1):
        mine = [e for e in slices if e["tid"] == r]
        rows = steps[steps["replica"] == r]
        assert len(mine) == len(rows) > 0
        assert sum(e["args"]["num_prefill_tokens"] for e in mine) == rows["num_prefill_tokens"].sum()
        assert sum(e["args"]["num_decode_tokens"] for e in mine) == rows["num_decode_tokens"].sum()
        assert sum(e["args"]["num_steps"] for e in mine) == rows["num_steps"].sum()
        ts = np.array([e["ts"] for e in mine])
        np.testing.assert_allclose(ts, rows["start_time_s"].to_numpy() * 1e6, rtol=0, atol=1e-3)
        assert (np.diff(ts) > 0).all()  # a replica's steps follow one another
        ends = ts + np.array([e["dur"] for e in mine])
        assert (ends[:-1] <= ts[1:] + 1e-6).all()  # and never overlap on its track
        kv = [e for e in ev if e["ph"] == "C" and e["name"] == f"kv_cache_usage replica {r}"]
        assert len(kv) == len(rows)
        np.testing.assert_allclose([e["args"]["kv_cache_usage"] for e in kv], rows["kv_cache_usage"], atol=1e-12)
        assert all(0 <= e["args"]["kv_cache_usage"] <= 1 for e in kv)
    names = {e["name"] for e in slices}
    assert "prefill" in names or "prefill+decode" in names
    assert any(n.startswith("decode") for n in names)
    for e in slices:  # the name says the composition
        a = e["args"]
        assert e["name"].startswith("prefill") == (a["num_prefill_tokens"] > 0)
        assert ("decode" in e["name"]) == (a["num_decode_tokens"] > 0)
        assert a["num_batched_tokens"] == a["num_prefill_tokens"] + a["num_decode_tokens"]
    assert doc["otherData"]["config"]["num_replicas"] == 2


def test_bad_trace_path_is_one_line_before_the_run(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "sim", "run", "--quiet", "--out", str(tmp_path / "o"),
                        "--trace", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr == f"error: --trace '{tmp_path}': give a file name for the trace, e.g. --trace trace.json\n"
    assert not (tmp_path / "o" / "summary.json").exists()
