"""Input fuzzer: every command and input channel against the project's rule for
bad input, and random valid configs against the run's invariants.

The rule (README, "Commands"): bad input gets a one-line clear error naming the
file, the field (or row) and the value, exit status 2, nothing written half-way;
no traceback; no silently accepted wrong input.

**Bad inputs.** A corpus of distinct bad inputs over every command (``run``,
``compare``, ``sweep``, ``plan``, ``validate``, ``kv``, ``calibrate``) and
channel: YAML config files (wrong types, unknown keys, bools as numbers,
NaN/inf, negative and huge values, duplicate keys, malformed YAML), ``--set``
text, named options (``--model``, ``--hardware``, ``--scheduler``,
``--workload``, ``--goodput``, ``--out`` and each command's own), trace CSV and
JSONL rows (``workload.trace``), HF ``config.json`` files (``--model PATH``),
hardware profile YAML files (``--hardware PATH``), workload YAML files, sweep
files, plan options, validate CSVs, compare variant specs and variant files,
and ``calibrate --from-table`` folders with corrupt tables. Each runs as a
subprocess (``python -m sim ...``, with a timeout) in a fresh temporary folder
holding only its input files, and is classified:

- ``ok``: exit status 2, no traceback, a one-line message (plus at most a hint
  line; a usage error's ``Usage:`` / ``Try ...`` lines are not counted) naming
  what the case says it must (the file, the key / field / row, and where the
  rendering is predictable the value), and nothing written (the folder's files
  are byte-identical afterwards);
- ``traceback`` (``Traceback`` in the output), ``hang`` (the timeout),
  ``silent`` (exit status 0 on bad input), ``warned`` (exit status 0, but a
  batch command skipped the bad row with a warning naming it: ``validate``'s
  policy), ``bad_exit`` (any other status),
  ``unclear`` (several lines, or the message does not name the input; the
  detail says what is missing), ``wrote`` (refused but files written).

**Valid configs.** Random valid configs drawn by
``benchmarks/fuzz_equivalence.py`` (small: 20-100 requests) run in-process
through ``sim.config.build_config`` + ``sim.runner.run_simulation``; checked:
every request is completed or rejected with a reason (one row per request);
completed ones emitted ``min(output_len, max_tokens)`` tokens; arrival <=
first scheduled <= first token <= finish (TTFT <= E2EL), no negative or NaN
time of a completed request; KV usage in [0, 1]; the same config twice gives
identical results (a sample, ``--repeat-every``); the accelerated (default) and
reference (``exact_steps: true``) modes agree bit for bit (a sample,
``--exact-every``, compared as the equivalence fuzzer does). A config refused
with ConfigError / InfeasibleError is counted as skipped.

    python benchmarks/fuzz_inputs.py --num-bad 400 --num-valid 1000 --seed 0 --out fuzz_inputs.jsonl
    python benchmarks/fuzz_inputs.py --num-bad 20 --num-valid 0 --kind hf_config   # one channel
    python benchmarks/fuzz_inputs.py --replay fuzz_inputs.jsonl                    # rerun the failures

``--out`` gets one JSON line per failure (a bad input's argv, files and result,
with a shell reproduction; a valid config's overrides and the violated
invariants). Not a timed test; ``tests/test_fuzz_inputs_cli.py`` runs a fixed
sample of the corpus through the same checker.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "benchmarks"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

DATA = ROOT / "tests" / "data"
TEST_MODEL = json.loads((DATA / "test_model.json").read_text())
TEST_GPU_TEXT = (DATA / "test_gpu.yaml").read_text()
H100_TEXT = (ROOT / "hardware_profiles" / "h100_sxm.yaml").read_text()

#: a small, fast base for commands that would run if the input were wrongly accepted
SMALL = ["--set", "workload.num_requests=20"]
SMALL_WL = {"num_requests": 20}

#: a message locating a YAML syntax error: "line N" or "FILE:N:"
LINE = ["line"] + [f":{i}:" for i in range(1, 6)]

KINDS = ("yaml_config", "set", "cli_option", "trace", "hf_config", "hw_profile", "workload_file", "sweep_file",
         "plan", "validate_csv", "compare_variant", "calibrate_table")


@dataclass
class Case:
    """One bad input: ``python -m sim *argv`` in a folder holding ``files``
    (name -> text, or bytes). ``must``: groups of alternatives; the message must
    contain one alternative of every group."""

    kind: str
    command: str
    argv: list[str]
    files: dict[str, Any] = field(default_factory=dict)
    must: list[list[str]] = field(default_factory=list)
    desc: str = ""

    def key(self) -> str:
        h = hashlib.sha1(json.dumps([self.argv, {k: v if isinstance(v, str) else v.hex()
                                                 for k, v in sorted(self.files.items())}]).encode())
        return h.hexdigest()[:12]

    def repro(self) -> str:
        """A shell snippet reproducing the case from an empty folder."""
        lines = ["cd \"$(mktemp -d)\""]
        for name, content in self.files.items():
            if isinstance(content, bytes):
                esc = "".join("\\x%02x" % b for b in content)
                lines.append(f"printf '%b' {shlex.quote(esc)} > {name}")
            else:
                lines.append(f"cat > {name} <<'EOF'\n{content.rstrip(chr(10))}\nEOF")
        lines.append(f"PYTHONPATH={ROOT} python3 -m sim " + " ".join(shlex.quote(a) for a in self.argv))
        return "\n".join(lines)


# ----------------------------------------------------------------------------- value renderings
def renderings(v: Any) -> list[str]:
    """Ways a message may show the value ``v``."""
    out = {str(v), repr(v)}
    if isinstance(v, bool):
        out |= {"true" if v else "false"}
    elif isinstance(v, float):
        if math.isnan(v):
            out |= {"nan", "NaN", ".nan"}
        elif math.isinf(v):
            out |= {"inf", ".inf", "Infinity"}
        else:
            out |= {f"{v:g}", f"{v:.0f}" if abs(v) < 1e20 else f"{v:g}", f"{v:,.0f}" if abs(v) < 1e20 else f"{v:g}"}
            if v == int(v) and abs(v) < 1e20:
                out |= {str(int(v))}
    elif isinstance(v, int):
        out |= {f"{v:,}", f"{float(v):g}"}
    elif isinstance(v, (list, dict)):
        out |= {json.dumps(v)}
    return sorted(x for x in out if x)


def ydump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


# ----------------------------------------------------------------------------- corpus
#: key -> kind of value it takes (top-level SimConfig keys and workload keys)
INT_KEYS = ["max_num_seqs", "max_num_batched_tokens", "max_model_len", "long_prefill_token_threshold",
            "max_prefill_tokens", "block_size", "num_gpu_blocks_override", "tensor_parallel_size", "num_replicas",
            "seed"]
FLOAT_KEYS = ["gpu_memory_utilization", "watermark", "cpu_step_overhead_s", "cpu_seq_overhead_s",
              "eager_step_overhead_s", "frontend_latency_s", "frontend_token_s"]
BOOL_KEYS = ["enable_chunked_prefill", "enable_prefix_caching", "overlap_scheduling", "exact_steps"]
ENUM_KEYS = {"engine": "vllm", "policy": "fcfs", "capacity_scheduler_policy": "max_utilization",
             "kv_memory_rule": "utilization", "kv_cache_dtype": "fp8", "kv_allocation": "paged",
             "contiguous_reserve": "max_tokens", "dtype": "bfloat16", "quantization": "fp8",
             "attention_impl": "flash", "router": "random", "scheduler": "chunked", "model": "llama-3.1-8b",
             "hardware": "h100_sxm"}
WL_INT_KEYS = ["num_requests", "max_concurrency", "num_warmup_requests", "seed", "prefix_chunk_tokens"]
WL_FLOAT_KEYS = ["duration_s", "request_rate", "burstiness", "speedup", "sample_fraction", "jitter_s"]
WL_BOOL_KEYS = ["clip_to_max_model_len", "skip_bad_rows"]
WL_ENUM_KEYS = {"arrival": "poisson", "trace_format": "azure", "name": "chat"}

#: bad values by the type a key takes: (value, is it a "huge" or "negative" kind that some keys may allow)
BAD_INT = ["abc", True, False, -5, 0.5, 1.5, float("nan"), float("inf"), 10 ** 30, [4], {"a": 1}, ""]
BAD_FLOAT = ["abc", True, -1.0, float("nan"), float("inf"), float("-inf"), 1e300, [0.5], {"a": 1}, ""]
BAD_BOOL = ["maybe", 2, 1.5, [True], {"a": 1}, -1]
BAD_ENUM = ["bogus", 3, True, ["x"], {"a": 1}, ""]

#: values a key may legitimately take even though they look odd
ALLOWED = {("seed", 10 ** 30), ("seed", False), ("workload.seed", 10 ** 30),
           ("long_prefill_token_threshold", False), ("num_warmup_requests", False),
           ("max_concurrency", 10 ** 30), ("capacity_scheduler_policy", ""), ("quantization", ""),
           ("engine", ""), ("watermark", False)}


def _kind(key: str) -> int:
    """0 int, 1 float, 2 bool, 3 anything else (a name): the key's value type."""
    leaf = key.split(".")[-1]
    ints, floats, bools = ((WL_INT_KEYS, WL_FLOAT_KEYS, WL_BOOL_KEYS) if key.startswith("workload.")
                           else (INT_KEYS, FLOAT_KEYS, BOOL_KEYS))
    return 0 if leaf in ints else 1 if leaf in floats else 2 if leaf in bools else 3


def _bad_values(key: str) -> list[Any]:
    leaf = key.split(".")[-1]
    pool = (BAD_INT, BAD_FLOAT, BAD_BOOL, BAD_ENUM)[_kind(key)]
    def allowed(v: Any) -> bool:
        return any(k in (key, leaf) and type(a) is type(v) and a == v for k, a in ALLOWED)

    out = [v for v in pool if not allowed(v)]
    if leaf in ("model", "hardware"):
        out = [v for v in out if v != ""]
    if leaf == "seed":
        out = [v for v in out if not (isinstance(v, int) and not isinstance(v, bool) and v > 0)]
    if leaf == "name":  # workload.name: a string naming a built-in
        out = [v for v in out if not isinstance(v, dict)]
    return out


def _all_keys() -> list[str]:
    return (INT_KEYS + FLOAT_KEYS + BOOL_KEYS + list(ENUM_KEYS)
            + [f"workload.{k}" for k in WL_INT_KEYS + WL_FLOAT_KEYS + WL_BOOL_KEYS + list(WL_ENUM_KEYS)])


def _nest(key: str, value: Any) -> dict[str, Any]:
    if key.startswith("workload."):
        return {"workload": {**SMALL_WL, key.split(".", 1)[1]: value}}
    return {key: value, "workload": dict(SMALL_WL)}


def _config_command(r: random.Random, cfg_file: str, slot: int) -> tuple[str, list[str]]:
    """A command reading ``cfg_file`` as its config (rotating over run, kv, compare, plan)."""
    cmd = ("run", "kv", "compare", "plan")[slot % 4]
    if cmd == "run":
        return cmd, ["run", cfg_file, "--out", "out", "--quiet"]
    if cmd == "kv":
        return cmd, ["kv", cfg_file]
    if cmd == "compare":
        return cmd, ["compare", cfg_file, "--out", "out", "--quiet", "--workers", "1"]
    return cmd, ["plan", cfg_file, "--slo", "p99_ttft_ms=1000", "--replicas", "1", "--out", "out", "--quiet",
                 "--workers", "1"]


def yaml_config_cases(r: random.Random) -> list[Case]:
    cases: list[Case] = []
    slot = 0
    for key in _all_keys():
        vals = _bad_values(key)
        for v in r.sample(vals, min(2, len(vals))):
            text = ydump(_nest(key, v))
            cmd, argv = _config_command(r, "c.yaml", slot)
            slot += 1
            cases.append(Case("yaml_config", cmd, argv, {"c.yaml": text},
                              [["c.yaml"], [key.split(".")[-1]]], f"{key} = {v!r} in a config file"))
    # unknown keys (a near-miss and a nonsense one), at the top and in the workload
    for text, k in [("max_num_seq: 8\n", "max_num_seq"), ("enable_prefix_cache: true\n", "enable_prefix_cache"),
                    ("workload:\n  num_request: 20\n", "num_request"), ("foo: 1\n", "foo"),
                    ("workload:\n  input_len:\n    dist: fixed\n    valu: 5\n", "valu"),
                    ("workload:\n  input_len:\n    dist: zipf\n    value: 5\n", "zipf"),
                    ("workload:\n  shared_prefix:\n    prefix_length: 64\n", "prefix_length")]:
        cmd, argv = _config_command(r, "c.yaml", slot)
        slot += 1
        cases.append(Case("yaml_config", cmd, argv, {"c.yaml": text}, [["c.yaml"], [k]], f"unknown key {k}"))
    # duplicate keys
    for text, k in [("max_num_seqs: 4\nmax_num_seqs: 8\n", "max_num_seqs"),
                    ("workload:\n  num_requests: 20\n  num_requests: 30\n", "num_requests"),
                    ("scheduler: chunked\nblock_size: 16\nscheduler: static\n", "scheduler"),
                    ("workload:\n  num_requests: 20\nworkload:\n  request_rate: 2\n", "workload")]:
        cmd, argv = _config_command(r, "c.yaml", slot)
        slot += 1
        cases.append(Case("yaml_config", cmd, argv, {"c.yaml": text}, [["c.yaml"], [k]], f"duplicate key {k}"))
    # malformed YAML and wrong shapes
    for text, must, desc in [
        ("max_num_seqs: [4\n", [["c.yaml"], LINE + ["max_num_seqs"]], "unclosed bracket"),
        ("max_num_seqs: 4\n\tblock_size: 16\n", [["c.yaml"], ["line", "tab"]], "tab indentation"),
        ("- max_num_seqs: 4\n", [["c.yaml"], ["list", "mapping"]], "a list, not a mapping"),
        ("just a string\n", [["c.yaml"], ["str", "mapping"]], "a scalar, not a mapping"),
        ("max_num_seqs: 4\n  block_size: 16\n", [["c.yaml"], LINE], "bad indentation"),
        ("{max_num_seqs: 4\n", [["c.yaml"], LINE], "unclosed brace"),
        ("max_num_seqs: &a 4\nmax_num_batched_tokens: *b\n", [["c.yaml"], ["line", "alias", "anchor", "b"]],
         "undefined alias"),
        ("max_num_seqs: !!python/object:os.system 4\n", [["c.yaml"], ["line", "tag", "python"]], "python tag"),
        ("workload: chatt\n", [["c.yaml"], ["chatt"]], "unknown workload name"),
        ("workload: [1, 2]\n", [["c.yaml"], ["workload"]], "workload is a list"),
        ("workload:\n  input_len: [1, 2, 3]\n", [["c.yaml"], ["input_len"]], "input_len a list"),
        ("workload:\n  input_len: {dist: uniform, low: 50, high: 10}\n", [["c.yaml"], ["input_len", "low", "high"]],
         "uniform low > high"),
        ("workload:\n  input_len: {dist: lognormal, mean: -5, sigma: 1}\n", [["c.yaml"], ["mean", "input_len"]],
         "lognormal negative mean"),
        ("workload:\n  output_len: {dist: fixed, value: 0}\n", [["c.yaml"], ["output_len", "value"]],
         "zero output length"),
        ("workload:\n  priority_classes: [{fraction: 2, priority: 0}]\n", [["c.yaml"], ["fraction"]],
         "priority fraction 2"),
        ("workload:\n  window_s: [10, 5]\n  trace: none.csv\n", [["c.yaml"], ["window_s", "none.csv"]],
         "window reversed"),
        ("workload:\n  trace: missing.csv\n", [["c.yaml"], ["missing.csv"]], "missing trace file"),
        ("model: missing.json\n", [["c.yaml"], ["missing.json"]], "missing model file"),
        ("hardware: missing.yaml\n", [["c.yaml"], ["missing.yaml"]], "missing hardware file"),
        ("max_num_seqs: 0x\n", [["c.yaml"], ["max_num_seqs"]], "0x not a number"),
        (b"max_num_seqs: \xff\xfe4\n", [["c.yaml", "UTF-8", "utf-8"]], "not UTF-8"),
        ("max_model_len: 100\nworkload:\n  input_len: 500\n  output_len: 10\n  num_requests: 20\n",
         [["c.yaml", "max_model_len", "reject"]], "every request longer than max_model_len"),
    ]:
        cmd, argv = _config_command(r, "c.yaml", slot)
        slot += 1
        cases.append(Case("yaml_config", cmd, argv, {"c.yaml": text}, must, desc))
    # the last one is not a config error (all rejected is a result): keep it out
    cases.pop()
    return cases


def set_cases(r: random.Random) -> list[Case]:
    texts_int = ["abc", "true", "1.5", "nan", "inf", "-5", "1e400", "[4", "{a: 1}", "1e30", "0x", "4 4", "null?"]
    texts_float = ["abc", "true", "-1", ".nan", "nan", "inf", "-inf", "1e400", "[0.5]", "{a: 1}", "1e300"]
    texts_bool = ["maybe", "2", "1.5", "[true]", "{a: 1}"]
    texts_enum = ["bogus", "3", "true", "[chunked]", "{a: 1}"]
    cases: list[Case] = []
    cmds = [("run", ["run", "--out", "out", "--quiet"] + SMALL), ("kv", ["kv"]),
            ("compare", ["compare", "--out", "out", "--quiet", "--workers", "1"] + SMALL),
            ("plan", ["plan", "--slo", "p99_ttft_ms=1000", "--replicas", "1", "--out", "out", "--quiet",
                      "--workers", "1"] + SMALL)]
    slot = 0
    for key in _all_keys():
        leaf = key.split(".")[-1]
        pool = (texts_int, texts_float, texts_bool, texts_enum)[_kind(key)]
        if leaf == "seed":
            pool = [t for t in pool if t not in ("1e30",)]
        text = r.choice(pool)
        if (leaf, text) in {("seed", "true"), ("long_prefill_token_threshold", "true")}:
            text = "abc"
        if (leaf, text) == ("request_rate", "inf"):  # valid: every request at t = 0 (vllm bench serve's default)
            text = "-inf"
        cmd, base = cmds[slot % len(cmds)]
        slot += 1
        cases.append(Case("set", cmd, base + ["--set", f"{key}={text}"], {}, [["--set"], [leaf]],
                          f"--set {key}={text}"))
    for arg, must in [("max_num_seqs", ["max_num_seqs"]), ("=4", ["=4", "key"]), ("max_num_seq=4", ["max_num_seq"]),
                      ("workload.bogus=1", ["bogus"]), ("max_num_seqs=", ["max_num_seqs"]),
                      ("workload.input_len.dist=zipf", ["input_len", "zipf"]), ("bogus.key=1", ["bogus"]),
                      ("workload.num_requests=1e9", ["num_requests"]), ("max_num_seqs==4", ["max_num_seqs"]),
                      ("model.foo=1", ["model"])]:
        cmd, base = cmds[slot % len(cmds)]
        slot += 1
        cases.append(Case("set", cmd, base + ["--set", arg], {}, [["--set"], must], f"--set {arg}"))
    return cases


def cli_option_cases(r: random.Random) -> list[Case]:
    c: list[tuple[str, list[str], dict, list[list[str]], str]] = []
    run = ["run", "--out", "out", "--quiet"] + SMALL
    cmp_ = ["compare", "--out", "out", "--quiet", "--workers", "1"] + SMALL
    plan = ["plan", "--slo", "p99_ttft_ms=1000", "--replicas", "1", "--out", "out", "--quiet", "--workers", "1"] + SMALL
    for cmd, base in [("run", run), ("kv", ["kv"]), ("compare", cmp_), ("plan", plan)]:
        c += [(cmd, base + ["--model", "nosuch-model"], {}, [["model"], ["nosuch-model"]], "unknown model"),
              (cmd, base + ["--model", "missing/config.json"], {}, [["missing/config.json"]], "missing model file"),
              (cmd, base + ["--hardware", "nosuch_gpu"], {}, [["hardware"], ["nosuch_gpu"]], "unknown hardware"),
              (cmd, base + ["--hardware", "missing.yaml"], {}, [["missing.yaml"]], "missing hardware file")]
    c += [("run", run + ["--model", "m.json"], {"m.json": "{not json"}, [["m.json"]], "model file not JSON"),
          ("kv", ["kv", "--model", "sub"], {"sub/x.txt": "x"}, [["sub"]], "model path is a folder"),
          ("run", run + ["--model", "m.json"], {"m.json": "[1, 2]"}, [["m.json"]], "model file a JSON list"),
          ("kv", ["kv", "--model", "m.json"], {"m.json": ""}, [["m.json"]], "empty model file"),
          ("kv", ["kv", "--hardware", "h.yaml"], {"h.yaml": "- a\n- b\n"}, [["h.yaml"]], "hardware YAML a list"),
          ("run", run + ["--hardware", "h.yaml"], {"h.yaml": ""}, [["h.yaml"]], "empty hardware YAML"),
          ("run", run + ["--hardware", "h.json"], {"h.json": "{}"}, [["h.json"]], "hardware file not a profile")]
    for cmd, base in [("run", run), ("compare", cmp_)]:
        c += [(cmd, base + ["--scheduler" if cmd == "run" else "--schedulers", "bogus"], {}, [["bogus"]],
               "unknown scheduler"),
              (cmd, base + ["--workload", "nosuch"], {}, [["nosuch"]], "unknown workload"),
              (cmd, base + ["--workload", "missing.yaml"], {}, [["missing.yaml"]], "missing workload file")]
    c += [("run", run + ["--scheduler", ""], {}, [["scheduler"]], "empty scheduler"),
          ("run", run + ["--scheduler", "chunked,continuous"], {}, [["chunked,continuous"]], "a list for run"),
          ("compare", cmp_ + ["--schedulers", "chunked,,static"], {}, [["schedulers", "''", "empty"]],
           "empty entry in --schedulers"),
          ("compare", cmp_ + ["--schedulers", "chunked,chunked"], {}, [["chunked"]], "duplicate schedulers"),
          ("plan", plan + ["--scheduler", "bogus"], {}, [["bogus"]], "plan unknown scheduler")]
    for g, must in [("ttft:abc", ["abc"]), ("ttft:-5", ["-5"]), ("ttfb:5", ["ttfb"]), ("ttft", ["ttft"]),
                    ("ttft:nan", ["nan"]), ("ttft:inf", ["inf"]), ("ttft:0", ["ttft:0"]), (":5", [":5"]),
                    ("ttft:5:5", ["ttft:5:5"]), ("ttft:5 ttft:6", ["ttft"])]:
        cmd, base = r.choice([("run", run), ("compare", cmp_)])
        c.append((cmd, base + ["--goodput", g], {}, [["--goodput", "goodput"], must], f"--goodput {g}"))
    for cmd, base in [("run", ["run", "--quiet"] + SMALL), ("compare", ["compare", "--quiet", "--workers", "1"] + SMALL),
                      ("plan", ["plan", "--slo", "p99_ttft_ms=1000", "--replicas", "1", "--quiet", "--workers", "1"]
                       + SMALL),
                      ("validate", ["validate", "v.csv", "--quiet", "--workers", "1", "--requests-per-client", "1"])]:
        files = {"out.txt": "not a folder\n"}
        if cmd == "validate":
            files["v.csv"] = VALIDATE_HEADER + "\n" + VALIDATE_ROW + "\n"
        c.append((cmd, base + ["--out", "out.txt"], files, [["out.txt"]], "--out names a file"))
    c += [("run", run + ["--seed", "abc"], {}, [["--seed"]], "--seed abc"),
          ("run", run + ["--seed", "-1"], {}, [["seed"]], "--seed -1"),
          ("kv", ["kv", "--length", "x"], {}, [["--length"]], "--length x"),
          ("kv", ["kv", "--length", "-5"], {}, [["length"], ["-5"]], "--length -5"),
          ("kv", ["kv", "--length", "0"], {}, [["length"], ["0"]], "--length 0"),
          ("compare", cmp_ + ["--workers", "0"], {}, [["workers"]], "--workers 0"),
          ("compare", cmp_ + ["--workers", "-2"], {}, [["workers"]], "--workers -2"),
          ("run", run + ["--bogus-option", "1"], {}, [["--bogus-option"]], "unknown option"),
          ("run", ["run", "a.yaml", "b.yaml", "--out", "out"], {"a.yaml": "{}\n", "b.yaml": "{}\n"},
           [["b.yaml", "argument"]], "two config files"),
          ("sweep", ["sweep", "s.yaml", "--executor", "bogus", "--out", "out", "--quiet"],
           {"s.yaml": ydump({"base": {"workload": SMALL_WL}, "axes": {"max_num_seqs": [4, 8]}})},
           [["executor"], ["bogus"]], "unknown executor"),
          ("sweep", ["sweep", "s.yaml", "--workers", "0", "--out", "out", "--quiet"],
           {"s.yaml": ydump({"base": {"workload": SMALL_WL}, "axes": {"max_num_seqs": [4, 8]}})},
           [["workers"]], "sweep --workers 0"),
          ("sweep", ["sweep", "nosuch.yaml", "--out", "out"], {}, [["nosuch.yaml"]], "missing sweep file"),
          ("validate", ["validate", "nosuch.csv", "--out", "out"], {}, [["nosuch.csv"]], "missing validate CSV"),
          ("calibrate", ["calibrate", "--out", "p.yaml"], {}, [["--device", "--from-table"]], "no mode"),
          ("calibrate", ["calibrate", "--device", "tpu", "--out", "p.yaml"], {}, [["tpu"]], "unknown device")]
    return [Case("cli_option", cmd, argv, files, must, desc) for cmd, argv, files, must, desc in c]


TRACE_COLS = ("num_prefill_tokens", "num_decode_tokens", "arrived_at")
TRACE_CELLS = ["-5", "0", "abc", "", "nan", "inf", "1e14", "12.5", "9223372036854775808", "1e30", "-inf", "0x10"]


def trace_cases(r: random.Random) -> list[Case]:
    cases: list[Case] = []
    cmds = [("run", ["run", "--out", "out", "--quiet"]), ("compare", ["compare", "--out", "out", "--quiet",
                                                                      "--workers", "1"])]
    good = ["100,10,0", "200,20,0.5", "150,5,1.0"]
    for col_i, col in enumerate(TRACE_COLS):
        cells = [c for c in TRACE_CELLS if not (col == "arrived_at" and c in ("0", "12.5"))]
        for cell in r.sample(cells, 6):
            rows = list(good)
            row = rows[1].split(",")
            row[col_i] = cell
            rows[1] = ",".join(row)
            text = ",".join(TRACE_COLS) + "\n" + "\n".join(rows) + "\n"
            cmd, base = r.choice(cmds)
            how = r.choice(["set", "yaml"])
            if how == "set":
                argv, files = base + ["--set", "workload.trace=t.csv"], {"t.csv": text}
            else:
                argv, files = base + ["c.yaml"], {"t.csv": text, "c.yaml": "workload:\n  trace: t.csv\n"}
            cases.append(Case("trace", cmd, argv, files, [["t.csv"], [col], [cell, "empty", "''"] if cell else
                                                          ["empty", "''", col]],
                              f"trace row 3 {col}={cell!r} ({how})"))
    # shapes
    for text, must, desc in [
        ("", [["t.csv"]], "empty trace"),
        (",".join(TRACE_COLS) + "\n", [["t.csv"]], "header only"),
        ("a,b,c\n1,2,3\n", [["t.csv"]], "unknown columns"),
        ("num_prefill_tokens,arrived_at\n100,0\n", [["t.csv"], ["num_decode_tokens", "output", "column"]],
         "missing output column"),
        ("num_prefill_tokens,num_decode_tokens\n100,10,5\n", [["t.csv"]], "extra cell"),
        ('num_prefill_tokens,num_decode_tokens\n"100,10\n', [["t.csv"]], "unclosed quote"),
    ]:
        cases.append(Case("trace", "run", ["run", "--out", "out", "--quiet", "--set", "workload.trace=t.csv"],
                          {"t.csv": text}, must, desc))
    # JSONL (Mooncake layout)
    jgood = [{"timestamp": 0, "input_length": 100, "output_length": 10},
             {"timestamp": 500, "input_length": 200, "output_length": 20}]
    jbad = [("timestamp", -1e16), ("timestamp", "abc"), ("timestamp", 1e14), ("input_length", -3),
            ("input_length", 1.5), ("input_length", "12"), ("output_length", 0), ("output_length", 2 ** 64),
            ("output_length", None), ("hash_ids", [1, -2]), ("hash_ids", "abc"), ("hash_ids", [2 ** 61]),
            ("input_length", True), ("timestamp", [1])]
    for k, v in jbad:
        rows = [dict(x) for x in jgood]
        rows[1][k] = v
        text = "\n".join(json.dumps(x) for x in rows) + "\n"
        cases.append(Case("trace", "run", ["run", "--out", "out", "--quiet", "--set", "workload.trace=t.jsonl"],
                          {"t.jsonl": text}, [["t.jsonl"], [k]], f"jsonl row 2 {k}={v!r}"))
    for text, desc in [('{"timestamp": 0, "input_length": 100\n', "truncated JSON"),
                       ("[1, 2]\n", "a JSON list row"), ("\n\n", "blank lines only")]:
        cases.append(Case("trace", "run", ["run", "--out", "out", "--quiet", "--set", "workload.trace=t.jsonl"],
                          {"t.jsonl": text}, [["t.jsonl"]], desc))
    return cases


HF_FIELDS_INT = ["num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
                 "num_key_value_heads", "head_dim", "max_position_embeddings"]


def hf_config_cases(r: random.Random) -> list[Case]:
    cases: list[Case] = []
    cmds = [("run", ["run", "--out", "out", "--quiet"] + SMALL), ("kv", ["kv"])]
    bad = ["128", 128.5, True, -8, 0, 10 ** 30, None, [1], float("nan")]
    for k in HF_FIELDS_INT:
        for v in r.sample(bad, 3):
            if v is None and k in ("num_key_value_heads", "head_dim"):
                v = "x"  # absent/null has a default for these
            cfg = dict(TEST_MODEL, **{k: v})
            if isinstance(v, float) and math.isnan(v):
                text = json.dumps(cfg)  # NaN (JSON5-ish, Python's json writes it)
            else:
                text = json.dumps(cfg, indent=1)
            cmd, base = r.choice(cmds)
            cases.append(Case("hf_config", cmd, base + ["--model", "m/config.json"], {"m/config.json": text},
                              [["config.json"], [k]], f"config.json {k}={v!r}"))
    for k, v in [("tie_word_embeddings", "yes"), ("torch_dtype", "float8"), ("architectures", "Llama"),
                 ("sliding_window", -5), ("num_local_experts", 8), ("quantization_config", "fp8"),
                 ("quantization_config", {"quant_method": "gptq", "bits": "4"}), ("layer_types", ["bogus"] * 4),
                 ("layer_types", ["full_attention"]), ("num_experts_per_tok", 0)]:
        cfg = dict(TEST_MODEL, **{k: v})
        if k == "num_experts_per_tok":  # on a dense model it is unused (0 = dense); bad on an MoE model
            cfg["num_local_experts"] = 8
        cmd, base = r.choice(cmds)
        cases.append(Case("hf_config", cmd, base + ["--model", "m/config.json"], {"m/config.json": json.dumps(cfg)},
                          [["config.json"], [k, "num_experts_per_tok"] if k == "num_local_experts" else [k]],
                          f"config.json {k}={v!r}"))
    for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        cfg = {kk: vv for kk, vv in TEST_MODEL.items() if kk != k}
        cases.append(Case("hf_config", "kv", ["kv", "--model", "m/config.json"], {"m/config.json": json.dumps(cfg)},
                          [["config.json"], [k]], f"config.json without {k}"))
    return cases


HW_KEYS = ["memory_bytes", "hbm_bandwidth_bytes_per_s", "peak_flops_per_s.bf16", "peak_flops_per_s.fp8", "num_sms",
           "interconnect.bandwidth_bytes_per_s", "interconnect.latency_s", "efficiency.compute_efficiency",
           "efficiency.memory_efficiency", "efficiency.launch_overhead_s", "efficiency.step_overhead_s",
           "efficiency.all_reduce_efficiency", "price_per_gpu_hour_usd"]


def _set_path(d: dict, keys: str, value: Any) -> None:
    *parents, last = keys.split(".")
    for k in parents:
        d = d[k]
    d[last] = value


def hw_profile_cases(r: random.Random) -> list[Case]:
    cases: list[Case] = []
    cmds = [("run", ["run", "--out", "out", "--quiet"] + SMALL + ["--model", "m.json"]),
            ("kv", ["kv", "--model", "m.json"]),
            ("plan", ["plan", "--slo", "p99_ttft_ms=1000", "--replicas", "1", "--out", "out", "--quiet",
                      "--workers", "1", "--model", "m.json"] + SMALL)]
    bad = ["abc", True, -1.0, 0, float("nan"), float("inf"), 1e-300, 1e300, [1], None]
    for k in HW_KEYS:
        for v in r.sample(bad, 2):
            data = yaml.safe_load(TEST_GPU_TEXT)
            if v in (0, 1e-300) and k.endswith(("latency_s", "overhead_s")):
                v = -1.0  # zero or a tiny positive time is fine there
            _set_path(data, k, v)
            cmd, base = r.choice(cmds)
            cases.append(Case("hw_profile", cmd, base + ["--hardware", "g.yaml"],
                              {"g.yaml": ydump(data), "m.json": json.dumps(TEST_MODEL)},
                              [["g.yaml"], [k.split(".")[-1]]], f"profile {k}={v!r}"))
    h100_keys = ["efficiency.gemm.bf16.compute_efficiency_max", "efficiency.gemm.bf16.memory_half_bytes",
                 "efficiency.context_attention.seq_head_s", "efficiency.generation_attention.kv_tile",
                 "efficiency.all_reduce.half_bytes"]
    for k in h100_keys:
        data = yaml.safe_load(H100_TEXT)
        v = r.choice(["abc", -1.0, 1e300, float("nan")])
        _set_path(data, k, v)
        cases.append(Case("hw_profile", "kv", ["kv", "--hardware", "g.yaml"], {"g.yaml": ydump(data)},
                          [["g.yaml"], [k.split(".")[-1]]], f"h100 profile {k}={v!r}"))
    for text, must, desc in [
        (TEST_GPU_TEXT.replace("num_sms: 100\n", "num_sms: 100\nnum_smz: 4\n"), ["num_smz"], "unknown key"),
        (TEST_GPU_TEXT.replace("memory_bytes: 80000000000", "memory_bytes: 80e9\nmemory_bytes: 40e9"),
         ["memory_bytes"], "duplicate key"),
        (TEST_GPU_TEXT.replace("hbm_bandwidth_bytes_per_s: 1.0e12  # 1 TB/s\n", ""), ["hbm_bandwidth_bytes_per_s"],
         "missing bandwidth"),
        (TEST_GPU_TEXT.replace("  bf16: 1.0e15\n", ""), ["bf16"], "no bf16 peak"),
        (TEST_GPU_TEXT.replace("form: scalar", "form: bogus"), ["form", "bogus"], "unknown efficiency form"),
        (TEST_GPU_TEXT + "  bad: [\n", ["line"], "malformed YAML"),
    ]:
        cases.append(Case("hw_profile", "kv", ["kv", "--hardware", "g.yaml", "--model", "m.json"],
                          {"g.yaml": text, "m.json": json.dumps(TEST_MODEL)}, [["g.yaml"], must], desc))
    return cases


def workload_file_cases(r: random.Random) -> list[Case]:
    cases = []
    for text, must, desc in [
        ("num_requests: -3\n", ["num_requests"], "negative num_requests"),
        ("request_rate: .nan\nnum_requests: 20\n", ["request_rate"], "NaN rate"),
        ("request_rate: abc\nnum_requests: 20\n", ["request_rate"], "rate text"),
        ("arrival: zipf\nnum_requests: 20\n", ["arrival"], "unknown arrival"),
        ("burstiness: -1\narrival: gamma\nrequest_rate: 2\nnum_requests: 20\n", ["burstiness"], "negative burstiness"),
        ("input_len: {dist: fixed, value: -4}\nnum_requests: 20\n", ["input_len", "value"], "negative length"),
        ("output_len: true\nnum_requests: 20\n", ["output_len"], "bool length"),
        ("num_requests: 20\nnum_requests: 30\n", ["num_requests"], "duplicate key"),
        ("num_requests: 20\nfoo: bar\n", ["foo"], "unknown key"),
        ("- 1\n- 2\n", ["list", "mapping"], "a list"),
        ("num_requests: [20\n", LINE, "malformed"),
        ("max_concurrency: 0\nnum_requests: 20\n", ["max_concurrency"], "zero clients"),
        ("sample_fraction: 1.5\nnum_requests: 20\n", ["sample_fraction"], "fraction > 1"),
        ("conversation: {num_turns: 0, think_time_s: 1}\nnum_requests: 20\n", ["num_turns"], "zero turns"),
        ("shared_prefix: {fraction: -0.5, prefix_len: 16}\nnum_requests: 20\n", ["fraction"], "negative fraction"),
    ]:
        cmd = r.choice(["run", "compare"])
        base = (["run", "--out", "out", "--quiet"] if cmd == "run"
                else ["compare", "--out", "out", "--quiet", "--workers", "1"])
        cases.append(Case("workload_file", cmd, base + ["--workload", "w.yaml"], {"w.yaml": text},
                          [["w.yaml"], must], f"workload file: {desc}"))
    return cases


SWEEP_BASE = {"model": "m.json", "hardware": "g.yaml", "max_model_len": 1024, "num_gpu_blocks_override": 1024,
              "workload": {"input_len": 64, "output_len": 8, "num_requests": 20, "request_rate": 100.0}}


def sweep_cases(r: random.Random) -> list[Case]:
    cases = []
    ax = "workload.request_rate"
    specs: list[tuple[dict, list[list[str]], str]] = [
        ({"axes": {ax: {"start": 1, "stop": 8, "step": float("nan")}}}, [["step"], ["nan"]], "NaN step"),
        ({"axes": {ax: {"start": 1, "stop": float("inf"), "step": 1}}}, [["stop"], ["inf"]], "inf stop"),
        ({"axes": {ax: {"start": 1, "stop": 8, "step": 1e-300}}}, [["step"]], "tiny step"),
        ({"axes": {ax: {"start": 1, "stop": 8, "step": -1}}}, [["step"]], "negative step"),
        ({"axes": {ax: {"start": 1, "stop": 8, "step": 0}}}, [["step"]], "zero step"),
        ({"axes": {ax: {"start": 1, "stop": 8, "num": 0}}}, [["num"]], "num 0"),
        ({"axes": {ax: {"start": 1, "stop": 8, "num": 2.5}}}, [["num"]], "num 2.5"),
        ({"axes": {ax: {"start": "a", "stop": 8, "num": 3}}}, [["start"]], "text start"),
        ({"axes": {ax: {"start": 1, "stop": 8}}}, [[ax, "step", "num"]], "range without step or num"),
        ({"axes": {ax: []}}, [[ax]], "empty axis"),
        ({"axes": {ax: 5}}, [[ax]], "scalar axis"),
        ({"axes": {"max_num_seq": [4, 8]}}, [["max_num_seq"]], "unknown axis key"),
        ({"axes": {"max_num_seqs": ["a", 8]}}, [["max_num_seqs"]], "bad axis value"),
        ({"axes": {"max_num_seqs": [0, 8]}}, [["max_num_seqs"]], "axis value 0"),
        ({"axes": {"scheduler": ["chunked", "bogus"]}}, [["bogus"]], "unknown scheduler in axis"),
        ({"axes": {}}, [["axes"]], "no axes"),
        ({"axes": {"max_num_seqs": [4, 8]}, "goodput": "ttft:abc"}, [["goodput"]], "bad goodput"),
        ({"axes": {"max_num_seqs": [4, 8]}, "goodput": {"ttft": 5}}, [["goodput"]], "goodput a dict"),
        ({"axes": {"max_num_seqs": [4, 8]}, "foo": 1}, [["foo"]], "unknown top-level key"),
        ({"axes": {"max_num_seqs": [4, 8], "block_size": [16, 32]}, "zip": [["max_num_seqs", "bogus"]]},
         [["bogus", "zip"]], "zip names a missing axis"),
        ({"axes": {"max_num_seqs": [4, 8], "block_size": [16, 32, 64]}, "zip": [["max_num_seqs", "block_size"]]},
         [["zip", "length", "max_num_seqs"]], "zip of unequal lengths"),
        ({"axes": {"max_num_seqs": [4, 8]}, "base_extra": {"max_num_seqs": -1}}, [["base_extra"]],
         "misspelt base"),
        ({"axes": {"max_num_seqs": [4, 8]}, "base": {"block_size": "x"}}, [["block_size"]], "bad base value"),
        ({"axes": {"max_num_seqs": [4, 8]}, "base": {"config": "missing.yaml"}}, [["missing.yaml"]],
         "base config file missing"),
        ({"axes": {"workload.num_requests": [20, True]}}, [["num_requests"]], "bool in an axis"),
    ]
    for data, must, desc in specs:
        base = dict(SWEEP_BASE)
        if "base" in data:
            base.update(data.pop("base"))
        doc = {"base": base, **data}
        cases.append(Case("sweep_file", "sweep", ["sweep", "s.yaml", "--out", "out", "--quiet", "--workers", "1"],
                          {"s.yaml": ydump(doc), "m.json": json.dumps(TEST_MODEL), "g.yaml": TEST_GPU_TEXT},
                          [["s.yaml"], *must], f"sweep file: {desc}"))
    for text, must, desc in [("axes: [1\n", LINE, "malformed YAML"), ("- 1\n", ["mapping", "list"], "a list"),
                             ("base: {}\naxes:\n  a: [1]\naxes:\n  b: [2]\n", ["axes"], "duplicate axes")]:
        cases.append(Case("sweep_file", "sweep", ["sweep", "s.yaml", "--out", "out", "--quiet", "--workers", "1"],
                          {"s.yaml": text}, [["s.yaml"], must], f"sweep file: {desc}"))
    return cases


def plan_cases(r: random.Random) -> list[Case]:
    base = ["plan", "--out", "out", "--quiet", "--workers", "1", "--replicas", "1"] + SMALL
    slo = ["--slo", "p99_ttft_ms=1000"]
    c = [
        (base + ["--slo", "p99_ttft_ms=abc"], [["p99_ttft_ms"], ["abc"]], "SLO text"),
        (base + ["--slo", "bogus_metric=5"], [["bogus_metric"]], "unknown SLO metric"),
        (base + ["--slo", "p99_ttft_ms=-1"], [["p99_ttft_ms"], ["-1"]], "negative SLO"),
        (base + ["--slo", "p99_ttft_ms=nan"], [["p99_ttft_ms"], ["nan"]], "NaN SLO"),
        (base + ["--slo", "p99_ttft_ms"], [["p99_ttft_ms"]], "SLO without value"),
        (base + ["--slo", "p99_ttft_ms=inf"], [["p99_ttft_ms"], ["inf"]], "inf SLO"),
        (base + ["--slo", "p99_ttft_ms=0"], [["p99_ttft_ms"], ["0"]], "zero SLO"),
        (base + ["--slo", "goodput_fraction>=1.5", "--goodput", "ttft:500"], [["goodput_fraction"], ["1.5"]],
         "goodput fraction > 1"),
        (base + slo + ["--tp", "x"], [["--tp", "tp"], ["x"]], "--tp x"),
        (base + slo + ["--tp", "0"], [["tp", "tensor_parallel_size"], ["0"]], "--tp 0"),
        (base + slo + ["--tp", "3"], [["tensor_parallel_size", "tp"], ["3"]], "--tp 3 (heads not divisible)"),
        (base + slo + ["--hardware", "h100_sxm,bogus"], [["bogus"]], "unknown GPU in list"),
        (base + slo + ["--hardware", ","], [["hardware"]], "empty GPU list"),
        (base + slo + ["--vary", "max_num_seqs"], [["max_num_seqs"]], "--vary without values"),
        (base + slo + ["--vary", "max_num_seqs=a,b"], [["max_num_seqs"]], "--vary bad values"),
        (base + slo + ["--vary", "bogus_key=1,2"], [["bogus_key"]], "--vary unknown key"),
        (["plan", "--out", "out", "--quiet", "--workers", "1"] + SMALL + slo + ["--replicas", "0"], [["replicas"]],
         "--replicas 0"),
        (["plan", "--out", "out", "--quiet", "--workers", "1"] + SMALL + slo + ["--replicas", "a,b"],
         [["replicas"], ["a"]], "--replicas text"),
        (["plan", "--out", "out", "--quiet", "--workers", "1"] + SMALL + slo + ["--max-replicas", "0"],
         [["max-replicas", "max_replicas"]], "--max-replicas 0"),
        (base + slo + ["--target-rate", "-1"], [["target-rate", "target_rate"]], "negative target rate"),
        (base + slo + ["--target-rate", "nan"], [["target-rate", "target_rate"]], "NaN target rate"),
        (base + slo + ["--target-rate", "inf"], [["target-rate", "target_rate"]], "inf target rate"),
        (base + slo + ["--rel-tol", "0"], [["rel-tol", "rel_tol"]], "zero rel-tol"),
        (base + slo + ["--rel-tol", "nan"], [["rel-tol", "rel_tol"]], "NaN rel-tol"),
        (base + slo + ["--rel-tol", "-0.1"], [["rel-tol", "rel_tol"]], "negative rel-tol"),
        (base + slo + ["--start-rate", "0"], [["start-rate", "start_rate"]], "zero start rate"),
        (base + slo + ["--start-rate", "-3"], [["start-rate", "start_rate"]], "negative start rate"),
        (base + slo + ["--executor", "bogus"], [["executor"], ["bogus"]], "unknown executor"),
    ]
    return [Case("plan", "plan", argv, {}, must, desc) for argv, must, desc in c]


VALIDATE_COLS = ["id", "backend", "model_path", "system", "isl", "osl", "concurrency", "tp_size",
                 "silicon_ttft_ms", "silicon_tpot_ms"]
VALIDATE_HEADER = ",".join(VALIDATE_COLS)
VALIDATE_ROW = "a,vllm,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,128,8,2,1,50,10"


def validate_cases(r: random.Random) -> list[Case]:
    cases = []
    argv = ["validate", "v.csv", "--out", "out", "--quiet", "--workers", "1", "--requests-per-client", "1"]
    bad = {"backend": ["bogus", "", "3"], "model_path": ["nosuch/model", ""], "system": ["nosuch_gpu", ""],
           "isl": ["-5", "0", "abc", "1.5", "nan", "1e30"], "osl": ["0", "-1", "abc", "inf"],
           "concurrency": ["0", "-2", "abc", "1.5", "1e12"], "tp_size": ["0", "1.5", "abc", "3"],
           "silicon_ttft_ms": ["abc", "-1", "inf"], "silicon_tpot_ms": ["abc", "0", "nan"]}
    for col, vals in bad.items():
        for v in r.sample(vals, min(2, len(vals))):
            row = VALIDATE_ROW.split(",")
            row[VALIDATE_COLS.index(col)] = v
            text = VALIDATE_HEADER + "\n" + VALIDATE_ROW + "\n" + ",".join(row) + "\n"
            must = [["v.csv"], [col] if v == "" else [col, v]]
            cases.append(Case("validate_csv", "validate", argv, {"v.csv": text}, must,
                              f"validate row 2 {col}={v!r}"))
    for text, must, desc in [
        ("", [["v.csv"]], "empty CSV"),
        (VALIDATE_HEADER + "\n", [["v.csv"]], "header only"),
        (",".join(c for c in VALIDATE_COLS if c != "isl") + "\n" + "a,vllm,x,h100_sxm,8,2,1,50,10\n",
         [["v.csv"], ["isl"]], "missing column"),
        (VALIDATE_HEADER + ",isl\n" + VALIDATE_ROW + ",256\n", [["v.csv"], ["isl"]], "repeated column"),
        (VALIDATE_HEADER + "\n" + VALIDATE_ROW + ",extra\n", [["v.csv"]], "extra cell"),
        (b"\xff\xfe" + VALIDATE_HEADER.encode() + b"\n", [["v.csv", "UTF-8"]], "not UTF-8"),
    ]:
        cases.append(Case("validate_csv", "validate", argv, {"v.csv": text}, must, desc))
    cases.append(Case("validate_csv", "validate", argv + ["--protocol", "bogus"],
                      {"v.csv": VALIDATE_HEADER + "\n" + VALIDATE_ROW + "\n"}, [["protocol"], ["bogus"]],
                      "unknown protocol"))
    for opt, v in [("--requests-per-client", "0"), ("--think-time-ms", "-1"), ("--think-time-ms", "nan"),
                   ("--warmup-per-client", "-1")]:
        cases.append(Case("validate_csv", "validate", argv + [opt, v],
                          {"v.csv": VALIDATE_HEADER + "\n" + VALIDATE_ROW + "\n"},
                          [[opt, opt.lstrip("-").replace("-", "_")], [v]], f"{opt} {v}"))
    return cases


def compare_cases(r: random.Random) -> list[Case]:
    base = ["compare", "--out", "out", "--quiet", "--workers", "1"] + SMALL
    c = [
        (["--variant", "a bogus_key=1"], {}, [["bogus_key"]], "unknown key in a variant"),
        (["--variant", "a max_num_seqs=abc"], {}, [["max_num_seqs"], ["abc"]], "bad value in a variant"),
        (["--variant", "a max_num_seqs=true"], {}, [["max_num_seqs"], ["True", "true"]], "bool in a variant"),
        (["--variant", "a scheduler=bogus"], {}, [["bogus"]], "unknown scheduler in a variant"),
        (["--variant", ""], {}, [["variant"]], "empty variant"),
        (["--variant", "a scheduler=chunked", "--variant", "a scheduler=static"], {}, [["'a'", "a"], ["variant"]],
         "duplicate variant names"),
        (["--variant", "a workload.request_rate=4"], {}, [["workload"]], "workload key in a variant"),
        (["--variant", "a max_num_seqs"], {}, [["max_num_seqs"]], "variant setting without '='"),
        (["--variant", "x=y"], {}, [["x=y", "name"]], "variant without a name"),
        (["--variant", "a max_num_seqs=-4"], {}, [["max_num_seqs"], ["-4"]], "negative in a variant"),
        (["--variant", "a gpu_memory_utilization=nan"], {}, [["gpu_memory_utilization"], ["nan"]], "NaN in a variant"),
        (["--variants", "v.yaml"], {"v.yaml": "- a\n- b\n"}, [["v.yaml"]], "variants file a list"),
        (["--variants", "v.yaml"], {"v.yaml": "a:\n  max_num_seq: 4\n"}, [["v.yaml"], ["max_num_seq"]],
         "unknown key in variants file"),
        (["--variants", "v.yaml"], {"v.yaml": "a:\n  max_num_seqs: abc\n"}, [["v.yaml"], ["max_num_seqs"]],
         "bad value in variants file"),
        (["--variants", "v.yaml"], {"v.yaml": "a: [1\n"}, [["v.yaml"]], "malformed variants file"),
        (["--variants", "v.yaml"], {"v.yaml": "a: 5\n"}, [["v.yaml"], ["a"]], "variant not a mapping"),
        (["--variants", "v.yaml"], {"v.yaml": "a: {max_num_seqs: 4}\na: {max_num_seqs: 8}\n"}, [["v.yaml"], ["a"]],
         "duplicate variant in file"),
        (["--variants", "v.yaml"], {"v.yaml": "{}\n"}, [["v.yaml"]], "empty variants file"),
        (["--variants", "missing.yaml"], {}, [["missing.yaml"]], "missing variants file"),
        (["--variants", "v.yaml"], {"v.yaml": "a:\n  workload: chat\n"}, [["v.yaml", "'a'"], ["workload"]],
         "workload in a variants file"),
        (["--variant", "a/b scheduler=chunked"], {}, [["a/b"]], "variant name with a slash"),
        (["--variant", "a scheduler=chunked", "--variants", "v.yaml"], {"v.yaml": "a: {scheduler: static}\n"},
         [["repeated: a", "'a'"]], "same name from --variant and --variants"),
    ]
    return [Case("compare_variant", "compare", base + argv, files, must, desc) for argv, files, must, desc in c]


GEMM_HEADER = "version,device,kernel_source,gemm_dtype,m,n,k,latency"
GEMM_ROWS = ["0.24.0,H100,torch,bfloat16,1,4096,4096,0.02", "0.24.0,H100,torch,bfloat16,16,4096,4096,0.021",
             "0.24.0,H100,torch,bfloat16,256,4096,4096,0.05"]
NCCL_HEADER = "framework,version,device,op_name,kernel_source,nccl_dtype,num_gpus,message_size,latency"
NCCL_ROWS = ["TRTLLM,2.27.3,H100,all_reduce,NCCL,half,2,256,0.0055",
             "TRTLLM,2.27.3,H100,all_reduce,NCCL,half,2,1048576,0.02"]


def calibrate_cases(r: random.Random) -> list[Case]:
    import gzip

    cases = []
    argv = ["calibrate", "--from-table", "k", "--base-profile", "h100_sxm", "--out", "p.yaml", "--quiet"]

    def gemm(rows):
        return GEMM_HEADER + "\n" + "\n".join(rows) + "\n"

    for col, v in [("latency", "-0.5"), ("latency", "nan"), ("latency", "abc"), ("latency", "0"), ("m", "-1"),
                   ("n", "abc"), ("k", "inf"), ("latency", "")]:
        rows = list(GEMM_ROWS)
        cells = rows[1].split(",")
        cells[GEMM_HEADER.split(",").index(col)] = v
        rows[1] = ",".join(cells)
        cases.append(Case("calibrate_table", "calibrate", argv, {"k/vllm-0.24.0_gemm.csv": gemm(rows)},
                          [["vllm-0.24.0_gemm.csv"], [col]], f"gemm table {col}={v!r}"))
    for name, content, must, desc in [
        ("k/vllm-0.24.0_gemm.csv.gz", b"garbage, not gzip\n", ["gzip", "cannot read"], "not gzip"),
        ("k/vllm-0.24.0_gemm.csv.gz", gzip.compress(gemm(GEMM_ROWS * 50).encode(), mtime=0)[:-20] + b"\0" * 20,
         ["cannot read", "gemm"], "damaged gzip"),
        ("k/vllm-0.24.0_gemm.csv", "", ["cannot read", "empty", "column"], "empty table"),
        ("k/vllm-0.24.0_gemm.csv", "m,n,k\n1,2,3\n", ["latency", "gemm_dtype", "column"], "missing columns"),
        ("k/vllm-0.24.0_gemm.csv", b"\x00\x01\x02\xff\xfe\n", ["cannot read", "UTF", "column"], "binary junk"),
        ("k/vllm-0.24.0_gemm.csv", GEMM_HEADER + "\n" + GEMM_ROWS[0] + ",extra,cells\n",
         ["cannot read", "row", "field", "line"], "row with extra cells"),
        ("k/vllm-0.24.0_gemm.csv", gemm([x.replace("bfloat16", "bogus16") for x in GEMM_ROWS]),
         ["bogus16", "gemm_dtype"], "unknown GEMM dtype"),
        ("k/nccl_2.27.3.csv", NCCL_HEADER + "\n" + NCCL_ROWS[0].replace("half", "fp4") + "\n",
         ["nccl_dtype", "fp4"], "unknown NCCL dtype"),
        ("k/nccl_2.27.3.csv", NCCL_HEADER + "\n" + NCCL_ROWS[0].replace(",2,256,", ",-2,256,") + "\n",
         ["num_gpus"], "negative GPU count"),
        ("k/vllm-0.24.0_context_attention.csv",
         "batch_size,isl,num_heads,num_key_value_heads,head_dim,kv_cache_dtype,step,latency\n1,128,32,8,128,bf16,0,x\n",
         ["latency"], "attention latency text"),
    ]:
        cases.append(Case("calibrate_table", "calibrate", argv, {name: content},
                          [[Path(name).name], must], f"calibrate: {desc}"))
    good = {"k/vllm-0.24.0_gemm.csv": gemm(GEMM_ROWS)}
    for extra, must, desc in [
        (["--base-profile", "bogus_gpu"], [["bogus_gpu"]], "unknown base profile"),
        (["--from-table", "k/vllm-0.24.0_gemm.csv"], [["vllm-0.24.0_gemm.csv"]], "--from-table a file"),
        (["--from-table", "empty"], [["empty"]], "folder without tables"),
        (["--device", "cpu"], [["--device", "--from-table"]], "both modes"),
    ]:
        a = list(argv)
        for opt, v in zip(extra[::2], extra[1::2]):
            if opt in a:
                a[a.index(opt) + 1] = v
            else:
                a += [opt, v]
        files = dict(good)
        if "empty" in extra:
            files["empty/readme.txt"] = "no tables here\n"
        cases.append(Case("calibrate_table", "calibrate", a, files, must, f"calibrate: {desc}"))
    cases.append(Case("calibrate_table", "calibrate", argv, {**good, "p.yaml": "- a list, not a profile\n"},
                      [["p.yaml"], ["--out"]], "calibrate: --out is not a profile"))
    return cases


GENERATORS = {"yaml_config": yaml_config_cases, "set": set_cases, "cli_option": cli_option_cases,
              "trace": trace_cases, "hf_config": hf_config_cases, "hw_profile": hw_profile_cases,
              "workload_file": workload_file_cases, "sweep_file": sweep_cases, "plan": plan_cases,
              "validate_csv": validate_cases, "compare_variant": compare_cases, "calibrate_table": calibrate_cases}


def build_corpus(seed: int, kinds: tuple[str, ...] = KINDS) -> list[Case]:
    """Every distinct bad input of ``kinds`` (values drawn from ``seed``)."""
    out: list[Case] = []
    seen: set[str] = set()
    for kind in kinds:
        for case in GENERATORS[kind](random.Random(f"{seed}:{kind}")):
            if case.key() not in seen:
                seen.add(case.key())
                out.append(case)
    return out


def sample_corpus(corpus: list[Case], n: int, seed: int) -> list[Case]:
    """``n`` cases spread over the kinds (round-robin over shuffled kinds), all if ``n`` >= the corpus."""
    if n >= len(corpus):
        return list(corpus)
    r = random.Random(seed)
    by_kind: dict[str, list[Case]] = {}
    for c in corpus:
        by_kind.setdefault(c.kind, []).append(c)
    for v in by_kind.values():
        r.shuffle(v)
    out: list[Case] = []
    while len(out) < n:
        for k in sorted(by_kind):
            if by_kind[k] and len(out) < n:
                out.append(by_kind[k].pop())
    return out


# ----------------------------------------------------------------------------- checking a bad input
def _snapshot(d: Path) -> dict[str, str]:
    """Every file under ``d`` (relative path -> content hash). Folders are not
    listed: an output folder created empty before the error holds nothing
    half-written (the project's tests accept it too)."""
    return {str(p.relative_to(d)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file() or p.is_symlink()}


def message_lines(stderr: str) -> list[str]:
    """The message's lines: non-blank stderr lines but a usage error's ``Usage:`` / ``Try`` lines."""
    return [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith(("Usage:", "Try '"))]


def check_case(case: Case, timeout: float = 60.0) -> dict[str, Any]:
    """Run ``case`` in a fresh temporary folder; ``{status, detail, rc, stderr, wall_s}``."""
    with tempfile.TemporaryDirectory(prefix="fuzzin-") as tmp:
        d = Path(tmp)
        for name, content in case.files.items():
            p = d / name
            p.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                p.write_bytes(content)
            else:
                p.write_text(content)
        before = _snapshot(d)
        env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120", NO_COLOR="1", PYTHONWARNINGS="ignore")
        env.pop("SERVESIM_SHARED", None)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", "sim", *case.argv], cwd=d, env=env, capture_output=True,
                                  text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            def _s(x):
                return x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
            return {"status": "hang", "detail": f"no answer within {timeout:g} s", "rc": None,
                    "stderr": _s(e.stderr)[-2000:], "wall_s": time.perf_counter() - t0}
        wall = time.perf_counter() - t0
        after = _snapshot(d)
    out = {"rc": proc.returncode, "stderr": proc.stderr[-3000:], "wall_s": wall}
    text = proc.stderr + proc.stdout
    if "Traceback" in text:
        tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-1:] or [""]
        return {**out, "status": "traceback", "detail": tail[0][:300]}
    if proc.returncode == 0:
        said = " ".join(message_lines(text))
        if any(w in said for w in ("row skipped", "not simulated")) and "line " in said and \
                all(any(alt in said for alt in g) for g in case.must[1:]):
            # a batch command (validate) that skips a bad row with a warning naming its line and field
            return {**out, "status": "warned", "detail": "exit status 0, the row skipped with a warning: "
                    + " | ".join(ln for ln in message_lines(text) if "skipped" in ln or "line " in ln)[:300]}
        return {**out, "status": "silent", "detail": "exit status 0 on bad input; stdout: "
                + " | ".join(proc.stdout.strip().splitlines()[-3:])[:300]}
    if proc.returncode != 2:
        return {**out, "status": "bad_exit", "detail": f"exit status {proc.returncode}: "
                + " | ".join(message_lines(proc.stderr))[:300]}
    lines = message_lines(proc.stderr)
    if not lines:
        return {**out, "status": "unclear", "detail": "no message on stderr"}
    if len(lines) > 2:
        return {**out, "status": "unclear", "detail": f"{len(lines)} lines: " + " | ".join(lines)[:300]}
    msg = " ".join(lines)
    missing = [g for g in case.must if not any(alt in msg for alt in g)]
    if missing:
        return {**out, "status": "unclear", "detail": f"does not name {missing}: {msg[:300]}"}
    if after != before:
        changed = sorted(set(after) ^ set(before) | {k for k in after if k in before and after[k] != before[k]})
        return {**out, "status": "wrote", "detail": f"files written or changed: {changed[:8]}"}
    return {**out, "status": "ok", "detail": msg[:300]}


# ----------------------------------------------------------------------------- valid configs
def check_valid(overrides: dict[str, Any], *, repeat: bool, exact: bool) -> dict[str, Any]:
    """Run a valid config in-process and check the invariants (module docstring).
    ``{status: ok | skipped | violation | error, problems: [...]}``."""
    from fuzz_equivalence import compare

    from sim.config import build_config
    from sim.errors import ConfigError, InfeasibleError
    from sim.results.metrics import STATUS_FINISHED, STATUS_REJECTED
    from sim.runner import run_simulation

    t0 = time.perf_counter()
    try:
        cfg = build_config(overrides=overrides)
        first = run_simulation(cfg)
    except (ConfigError, InfeasibleError) as e:
        return {"status": "skipped", "problems": [], "reason": f"{type(e).__name__}: {str(e)[:200]}",
                "wall_s": time.perf_counter() - t0}
    except Exception as e:  # noqa: BLE001 - a crash on a valid config is a finding
        return {"status": "error", "problems": [f"raised {type(e).__name__}: {e}"],
                "traceback": traceback.format_exc(limit=8), "wall_s": time.perf_counter() - t0}
    problems: list[str] = []
    res, specs = first.result, first.specs
    req = res.requests
    n = len(specs)
    ids = req["request_id"].astype(np.int64)
    if ids.size != n or not np.array_equal(np.sort(ids), np.arange(n)):
        problems.append(f"{ids.size} request rows for {n} requests (ids {np.setdiff1d(np.arange(n), ids)[:5]} "
                        f"missing)")
    status = req["status"]
    if not np.isin(status, (STATUS_FINISHED, STATUS_REJECTED)).all():
        problems.append(f"unknown status values {np.unique(status)}")
    rej_ids = set(ids[status == STATUS_REJECTED].tolist())
    if rej_ids != set(res.rejected_reasons):
        problems.append(f"rejected rows {sorted(rej_ids)[:5]} vs reasons for {sorted(res.rejected_reasons)[:5]}")
    if any(not isinstance(v, str) or not v.strip() for v in res.rejected_reasons.values()):
        problems.append("a rejection without a reason")
    done = status == STATUS_FINISHED
    ok_ids = (ids >= 0) & (ids < n)
    d_ids = ids[done & ok_ids]
    want = np.minimum(specs.output_len[d_ids], specs.max_tokens[d_ids])
    got = req["num_output_tokens"][done & ok_ids]
    if not np.array_equal(got, want):
        i = int(np.flatnonzero(got != want)[0])
        problems.append(f"{int((got != want).sum())} completed requests emitted the wrong number of tokens; "
                        f"request {d_ids[i]}: {got[i]:g} != min(output_len, max_tokens) = {want[i]}")
    if not np.array_equal(req["max_tokens"][ok_ids], specs.max_tokens[ids[ok_ids]]):
        problems.append("max_tokens column differs from the specs")
    cols = ("arrival_time_s", "first_scheduled_time_s", "first_token_time_s", "finish_time_s")
    t = {c: req[c][done] for c in cols}
    for c in cols + ("preempted_s",):
        v = req[c][done]
        if not np.all(np.isfinite(v)) or (v < 0).any():
            problems.append(f"completed requests with NaN/inf/negative {c}: {v[~(np.isfinite(v) & (v >= 0))][:3]}")
    for a, b in zip(cols, cols[1:]):
        bad = t[a] > t[b]
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            problems.append(f"{int(bad.sum())} completed requests with {a} > {b} (request "
                            f"{ids[done][i]}: {t[a][i]!r} > {t[b][i]!r})")
    if (req["num_cached_tokens"][done] > req["num_prompt_tokens"][done]).any():
        problems.append("cached tokens > prompt tokens")
    steps = res.steps
    for c in ("kv_cache_usage", "mean_kv_cache_usage"):
        v = steps[c]
        if v.size and (not np.all(np.isfinite(v)) or v.min() < 0 or v.max() > 1):
            problems.append(f"steps.{c} outside [0, 1]: min {v.min()!r} max {v.max()!r}")
    for c in ("start_time_s", "step_time_s"):
        v = steps[c]
        if v.size and (not np.all(np.isfinite(v)) or v.min() < 0):
            problems.append(f"steps.{c} NaN or negative")
    for k in ("mean_kv_cache_usage", "max_kv_cache_usage"):
        v = first.summary.get(k)
        if isinstance(v, float) and math.isfinite(v) and not 0 <= v <= 1:
            problems.append(f"summary {k} = {v!r} outside [0, 1]")
    runs = {}
    try:
        if repeat:
            again = run_simulation(build_config(overrides=overrides))
            diffs, _, _ = compare(res, again.result)
            if diffs or again.summary.get("completed") != first.summary.get("completed"):
                problems.append("same config and seed, different results: " + "; ".join(diffs[:3]))
            runs["repeat"] = True
        if exact and not overrides.get("exact_steps"):
            ref = run_simulation(build_config(overrides={**overrides, "exact_steps": True}))
            diffs, _, kind = compare(ref.result, res)
            if diffs:
                problems.append(f"accelerated != reference ({kind}): " + "; ".join(d[:200] for d in diffs[:3]))
            runs["exact"] = True
    except Exception as e:  # noqa: BLE001
        problems.append(f"second run raised {type(e).__name__}: {e}")
    return {"status": "violation" if problems else "ok", "problems": problems, "wall_s": time.perf_counter() - t0,
            "num_requests": n, "num_rejected": len(res.rejected_reasons), **runs}


def valid_config(seed: int, i: int) -> dict[str, Any]:
    """Valid config ``i`` of ``seed``: the equivalence fuzzer's drawing, 20-100 requests."""
    from fuzz_equivalence import draw_config

    r = random.Random(seed * 1_000_003 + i + 7_777_777)
    cfg = draw_config(r, max_requests=100)
    n = cfg.get("workload.num_requests")
    if isinstance(n, int):
        cfg["workload.num_requests"] = max(20, min(n, 100))
    return cfg


# ----------------------------------------------------------------------------- CLI
def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(x) for x in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w[i]) if i < 2 else c.rjust(w[i]) for i, c in enumerate(r))  # noqa: E731
    return "\n".join([line(cells[0]), "  ".join("-" * x for x in w)] + [line(r) for r in cells[1:]])


#: ``warned`` is not among them: validate's documented policy (``servesim validate --help``)
#: lists a bad row with its line and reason and scores the others (exit 0)
BAD_STATUSES = ("traceback", "silent", "bad_exit", "unclear", "wrote", "hang")
#: every verdict but ``ok``, in the summary table's order
STATUSES = ("traceback", "silent", "warned", "bad_exit", "unclear", "wrote", "hang")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-bad", type=int, default=400, help="bad inputs to run (default 400; the corpus is "
                                                             "spread over every kind)")
    ap.add_argument("--num-valid", type=int, default=1000, help="random valid configs to run (default 1000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="fuzz_inputs.jsonl", help="JSON lines of the failures")
    ap.add_argument("--kind", action="append", choices=KINDS, help="only these kinds of bad input (repeatable)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per bad input before it counts as a hang")
    ap.add_argument("--repeat-every", type=int, default=1, help="rerun every k-th valid config (determinism)")
    ap.add_argument("--exact-every", type=int, default=10,
                    help="also run every k-th valid config in the reference mode (0: never)")
    ap.add_argument("--list", action="store_true", help="print the corpus (kind, command, description) and exit")
    ap.add_argument("--replay", metavar="FILE", help="rerun the bad inputs and valid configs of a failure file")
    args = ap.parse_args(argv)

    from tqdm import tqdm

    if args.replay:
        rows = [json.loads(x) for x in Path(args.replay).read_text().splitlines() if x.strip()]
        bad = 0
        for row in rows:
            if row["type"] == "bad":
                files = {k: bytes.fromhex(v[4:]) if v.startswith("hex:") else v for k, v in row["files"].items()}
                case = Case(row["kind"], row["command"], row["argv"], files, row["must"], row["desc"])
                res = check_case(case, args.timeout)
                ok = res["status"] == "ok"
                print(f"[{row['kind']}] {row['desc']}: {res['status']}: {res['detail']}")
            else:
                res = check_valid(row["config"], repeat=True, exact=True)
                ok = res["status"] in ("ok", "skipped")
                print(f"[valid {row.get('index')}] {res['status']}: {res['problems']}")
            bad += not ok
        print(f"{len(rows)} replayed, {bad} still failing")
        return 1 if bad else 0

    corpus = build_corpus(args.seed, tuple(args.kind or KINDS))
    cases = sample_corpus(corpus, args.num_bad, args.seed)
    if args.list:
        for c in cases:
            print(f"{c.kind:16} {c.command:10} {c.desc}")
        print(f"{len(cases)} of {len(corpus)} cases")
        return 0
    out_f = open(args.out, "w", encoding="utf-8")
    counts: dict[tuple[str, str], dict[str, int]] = {}
    failures: list[tuple[Case, dict]] = []
    t0 = time.perf_counter()
    bar = tqdm(cases, unit="input", desc="bad inputs", dynamic_ncols=True, mininterval=2.0)
    for case in bar:
        res = check_case(case, args.timeout)
        row = counts.setdefault((case.kind, case.command), {s: 0 for s in ("n", "ok") + STATUSES})
        row["n"] += 1
        row[res["status"]] += 1
        if res["status"] in BAD_STATUSES:
            failures.append((case, res))
            files = {k: v if isinstance(v, str) else "hex:" + v.hex() for k, v in case.files.items()}
            out_f.write(json.dumps({"type": "bad", **{k: v for k, v in asdict(case).items() if k != "files"},
                                    "files": files, "status": res["status"], "detail": res["detail"],
                                    "rc": res["rc"], "stderr": res["stderr"][-1500:], "repro": case.repro()}) + "\n")
            out_f.flush()
            bar.write(f"[{res['status']}] {case.kind}/{case.command}: {case.desc}: {res['detail'][:200]}")
        bar.set_postfix(failed=len(failures), refresh=False)
    bar.close()
    bad_wall = time.perf_counter() - t0

    valid_counts = {"ok": 0, "skipped": 0, "violation": 0, "error": 0}
    repeats = exacts = 0
    vrows = []
    t1 = time.perf_counter()
    vbar = tqdm(range(args.num_valid), unit="cfg", desc="valid configs", dynamic_ncols=True, mininterval=2.0)
    for i in vbar:
        cfg = valid_config(args.seed, i)
        rep = args.repeat_every > 0 and i % args.repeat_every == 0
        exa = args.exact_every > 0 and i % args.exact_every == 0
        res = check_valid(cfg, repeat=rep, exact=exa)
        valid_counts[res["status"]] += 1
        repeats += bool(res.get("repeat"))
        exacts += bool(res.get("exact"))
        if res["status"] in ("violation", "error"):
            vrows.append((i, cfg, res))
            out_f.write(json.dumps({"type": "valid", "index": i, "seed": args.seed, "status": res["status"],
                                    "problems": res["problems"], "traceback": res.get("traceback"),
                                    "config": cfg}, sort_keys=True) + "\n")
            out_f.flush()
            vbar.write(f"[valid {i}] {res['status']}: " + "; ".join(p[:200] for p in res["problems"][:3]))
        vbar.set_postfix(failed=len(vrows), skipped=valid_counts["skipped"], refresh=False)
    vbar.close()
    out_f.close()
    valid_wall = time.perf_counter() - t1

    # ---- summary
    if cases:
        rows = []
        for (kind, cmd), c in sorted(counts.items()):
            rows.append([kind, cmd, c["n"], c["ok"], *(c[s] for s in STATUSES)])
        tot = {s: sum(c[s] for c in counts.values()) for s in ("n", "ok") + STATUSES}
        rows.append(["TOTAL", "", tot["n"], tot["ok"], *(tot[s] for s in STATUSES)])
        print()
        print(f"bad inputs: {len(cases)} of a corpus of {len(corpus)} ({bad_wall:.0f} s)")
        print(_table(rows, ["kind", "command", "inputs", "ok", "traceback", "silent", "warned (policy)", "bad exit",
                            "unclear", "wrote", "hang"]))
        by_cmd: dict[str, int] = {}
        for (kind, cmd), c in counts.items():
            by_cmd[cmd] = by_cmd.get(cmd, 0) + c["n"]
        print("inputs per command: " + ", ".join(f"{k} {v}" for k, v in sorted(by_cmd.items())))
    if args.num_valid:
        print()
        print(f"valid configs: {args.num_valid} ({valid_wall:.0f} s): {valid_counts['ok']} ok, "
              f"{valid_counts['skipped']} skipped (refused as infeasible), {valid_counts['violation']} violating "
              f"an invariant, {valid_counts['error']} crashed; {repeats} rerun for determinism, {exacts} compared "
              f"with the reference mode")
    n_fail = len(failures) + len(vrows)
    if n_fail:
        print(f"{n_fail} failures written to {args.out} (rerun: --replay {args.out})")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
