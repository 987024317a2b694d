"""Inputs beyond what the simulation can represent are refused with a one-line error
naming file, field (or row) and value: times past float64's resolution of the clock,
token counts and priorities past int64, unbounded prefix tables."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.workload import WorkloadConfig, generate_requests, load_trace
from sim.workload.config import MAX_NUM_REQUESTS, MAX_SIMULATED_SPAN_S
from sim.workload.traces import MAX_TRACE_TIMESTAMP_S


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def assert_refused(r, *parts, out=None):
    """Exit status 2, one line on stderr containing ``parts``, no traceback, no files written."""
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    for p in parts:
        assert p in lines[0], (p, lines[0])
    if out is not None:
        assert not out.exists() or not any(out.iterdir()), list(out.iterdir())


def gen(**kw):
    return generate_requests(WorkloadConfig.from_dict(kw, source="test"), seed=0)


# ------------------------------------------------------------------ the clock's resolution
def test_the_limit_keeps_sub_microsecond_resolution():
    """The documented derivation: below the limit, float64 seconds are spaced <= 2^-23 s."""
    assert MAX_SIMULATED_SPAN_S < 2.0 ** 30
    assert np.spacing(MAX_SIMULATED_SPAN_S) <= 2.0 ** -23 < 0.2e-6
    # a 1 ms step added at the limit still measures 1 ms to within 0.2 us
    t = MAX_SIMULATED_SPAN_S
    assert abs((t + 1e-3) - t - 1e-3) < 0.2e-6
    # trace timestamps: resolved to ~1 us at their bound
    assert np.spacing(MAX_TRACE_TIMESTAMP_S - 1) <= 1e-6
    # what went wrong before: at 1e14 s a 3 ms step is lost in the rounding
    assert np.spacing(1e14) == 0.015625


def test_cli_trace_with_a_huge_timestamp_is_refused(tmp_path):
    """The issue's repro: TTFT 0 / 15.625 ms with exit 0 before."""
    p = tmp_path / "ts.csv"
    p.write_text("num_prefill_tokens,num_decode_tokens,arrived_at\n100,10,0\n100,10,1e14\n")
    out = tmp_path / "out"
    r = cli("run", "--quiet", "--out", str(out), "--set", f"workload.trace={p}")
    assert_refused(r, f"{p}:3:", "'arrived_at'", "'1e14'", "2^32 s", out=out)


@pytest.mark.parametrize("value", ["1e12", "-1e12", "4294967296", "1e300"])
def test_trace_timestamps_beyond_2_pow_32_s_are_malformed_rows(tmp_path, value):
    p = tmp_path / "t.csv"
    p.write_text(f"num_prefill_tokens,num_decode_tokens,arrived_at\n100,10,0\n100,10,{value}\n100,10,5\n")
    with pytest.raises(ConfigError) as e:
        gen(trace=str(p))
    assert f"t.csv:3: field 'arrived_at' = '{value}'" in str(e.value)
    s = gen(trace=str(p), skip_bad_rows=True)
    assert len(s) == 2 and s.num_skipped_rows == 1


def test_epoch_seconds_and_milliseconds_still_load(tmp_path):
    p = tmp_path / "epoch.csv"
    p.write_text("t,i,o\n1700000000.25,10,1\n1700000001.5,20,2\n")
    s = gen(trace=str(p), columns={"arrival": "t", "input": "i", "output": "o"})
    np.testing.assert_allclose(s.arrival_time_s, [0.0, 1.25], atol=1e-6)
    q = tmp_path / "epoch_ms.jsonl"
    q.write_text('{"t": 1700000000250, "i": 10, "o": 1}\n{"t": 1700000001500, "i": 20, "o": 2}\n')
    s = gen(trace=str(q), columns={"arrival": "t", "input": "i", "output": "o", "arrival_unit": "ms"})
    np.testing.assert_allclose(s.arrival_time_s, [0.0, 1.25], atol=1e-6)
    with pytest.raises(ConfigError, match=r"epoch_ms\.jsonl:1: field 't' = 1700000000250"):  # ms read as s
        gen(trace=str(q), columns={"arrival": "t", "input": "i", "output": "o"})


def test_replayed_span_beyond_the_limit_names_the_row(tmp_path):
    p = tmp_path / "span.csv"
    p.write_text("num_prefill_tokens,num_decode_tokens,arrived_at\n100,10,5\n100,10,2e9\n100,10,3e9\n")
    with pytest.raises(ConfigError) as e:
        gen(trace=str(p))
    msg = str(e.value)
    assert "span.csv:3: field 'arrived_at': sent 2e+09 s into the replay" in msg and "1e+09 s" in msg
    # a part of the trace within the limit replays
    assert len(gen(trace=str(p), num_requests=1)) == 1
    assert gen(trace=str(p), window_s=[1e9, 2.5e9]).arrival_time_s.tolist() == [1e9 - 5]
    # with its timestamps replaced by an arrival process, the span does not matter
    assert len(gen(trace=str(p), arrival="poisson", request_rate=1)) == 3
    # slowing the replay down can push it past the limit
    q = tmp_path / "slow.csv"
    q.write_text("num_prefill_tokens,num_decode_tokens,arrived_at\n100,10,0\n100,10,2e7\n")
    with pytest.raises(ConfigError, match=r"slow\.csv:3: field 'arrived_at': sent 2e\+10 s into the replay "
                                          r"\(after speedup\)"):
        gen(trace=str(q), speedup=0.001)


def test_azure_dates_centuries_apart_are_refused(tmp_path):
    p = tmp_path / "az.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.98,100,10\n"
                 "2123-11-16 18:17:03.98,100,10\n")
    with pytest.raises(ConfigError, match=r"az\.csv:3: field 'TIMESTAMP': sent 3\.15\d+e\+09 s into the replay"):
        gen(trace=str(p))


def test_cli_conversation_think_time_beyond_the_limit(tmp_path):
    out = tmp_path / "out"
    r = cli("run", "--quiet", "--out", str(out), "--workload", "conversation",
            "--set", "workload.conversation.think_time_s=1e14", "--set", "workload.num_requests=20")
    assert_refused(r, "workload.conversation.think_time_s", "1e+09 seconds", "100000000000000.0", out=out)


def test_think_times_times_turns_beyond_the_limit():
    base = {"input_len": 10, "output_len": 5, "num_requests": 100,
            "conversation": {"num_turns": 100, "think_time_s": 2e7}}
    with pytest.raises(ConfigError, match=r"workload: conversation.think_time_s = 20000000.0 with up to 100 turns "
                                          r"sends the last turns ~1\.98e\+09 s"):
        WorkloadConfig.from_dict(base)
    with pytest.raises(ConfigError, match=r"think_time_s = \(0.0, 20000000.0\) with up to 100 turns"):
        WorkloadConfig.from_dict({**base, "conversation": {"num_turns": [2, 100], "think_time_s": [0.0, 2e7]}})
    # fewer turns, shorter thinks, a duration that cuts the late turns, or no multi-turn sessions: fine
    for conv in ({"num_turns": 40, "think_time_s": 2e7}, {"num_turns": 100, "think_time_s": 1e6},
                 {"num_turns": 100, "think_time_s": 2e7, "fraction": 0.0}):
        WorkloadConfig.from_dict({**base, "conversation": conv})
    WorkloadConfig.from_dict({**base, "duration_s": 1e8, "request_rate": 1})


@pytest.mark.parametrize("wl", [
    # every synthetic form at (or just under) its bounds stays within the clock's limit
    {"num_requests": 1000, "request_rate": 1000 / MAX_SIMULATED_SPAN_S},
    {"num_requests": 1000, "request_rate": 1e-6, "arrival": "constant"},
    {"duration_s": MAX_SIMULATED_SPAN_S, "request_rate": 1e-6},
    {"num_requests": 300, "conversation": {"num_turns": 3, "think_time_s": MAX_SIMULATED_SPAN_S / 2}},
    {"num_requests": 300, "request_rate": 1e-6,
     "conversation": {"num_turns": [2, 3], "think_time_s": [0, 2.5e8]}},
    {"duration_s": 5e8, "request_rate": 1e-6, "conversation": {"num_turns": 4, "think_time_s": 3e8}},
])
def test_synthetic_workloads_stay_within_the_limit(wl):
    wl = {"input_len": 10, "output_len": 5, **wl}
    try:
        s = gen(**wl)
    except ConfigError as e:  # refused up front is fine too, never generated beyond the limit
        assert "1e+09" in str(e)
        return
    assert s.arrival_time_s.max() <= MAX_SIMULATED_SPAN_S


def test_request_rate_span_check_still_applies():
    with pytest.raises(ConfigError, match="spreads the requests over"):
        WorkloadConfig.from_dict({"input_len": 10, "output_len": 5, "num_requests": 1000, "request_rate": 1e-7})


# ------------------------------------------------------------------ unbounded sizes
def test_cli_num_prefixes_bounded_by_the_requests(tmp_path):
    out = tmp_path / "out"
    r = cli("run", "--quiet", "--out", str(out), "--workload", "conversation",
            "--set", "workload.shared_prefix.num_prefixes=1e7")
    assert_refused(r, "shared_prefix.num_prefixes = 10,000,000", "1,000 requests", out=out)
    r = cli("run", "--quiet", "--out", str(out), "--workload", "conversation",
            "--set", "workload.shared_prefix.num_prefixes=1e8")
    assert_refused(r, "workload.shared_prefix.num_prefixes", "50000000", "100000000", out=out)
    assert "num_gpu_blocks_override" not in r.stderr


def test_num_prefixes_keys_are_built_only_for_the_chosen():
    """With duration_s the count is not known up front: the table holds only the prompts
    some request chose, so a large num_prefixes costs nothing."""
    from sim.workload.config import SharedPrefixConfig
    from sim.workload.sessions import choose_prefixes

    t = choose_prefixes(SharedPrefixConfig(num_prefixes=MAX_NUM_REQUESTS, prefix_len=64), 10, 16,
                        np.random.default_rng(0))
    assert len(t.keys) <= 10 and t.next_id == MAX_NUM_REQUESTS * 4
    assert all(t.keys[c] == tuple(range(4 * c, 4 * c + 4)) for c in t.choice.tolist())
    s = gen(input_len=10, output_len=5, duration_s=5, request_rate=2,
            shared_prefix={"num_prefixes": 1_000_000, "prefix_len": 32})
    assert all(k is not None and len(k) == 2 for k in s.prefix_keys)


def test_prefix_len_and_turns_bounded():
    with pytest.raises(ConfigError, match=r"workload.shared_prefix.prefix_len = 1000000000:.*100000000"):
        WorkloadConfig.from_dict({"input_len": 10, "output_len": 5, "num_requests": 10,
                                  "shared_prefix": {"prefix_len": 10 ** 9}})
    with pytest.raises(ConfigError, match=r"workload.conversation.num_turns = 100000000000: need 1 <= low <= high"):
        WorkloadConfig.from_dict({"input_len": 10, "output_len": 5, "num_requests": 10,
                                  "conversation": {"num_turns": 10 ** 11, "think_time_s": 1}})


@pytest.mark.parametrize("value", [2 ** 63, 99999999999999999999, -(2 ** 63) - 1])
def test_priority_beyond_int64_is_refused(value):
    with pytest.raises(ConfigError) as e:
        WorkloadConfig.from_dict({"priority_classes": [{"fraction": 1, "priority": value}]}, source="w.yaml")
    assert f"w.yaml: workload.priority_classes.0.priority = {value}" in str(e.value)
    ok = WorkloadConfig.from_dict({"priority_classes": [{"fraction": 1, "priority": 2 ** 63 - 1}],
                                   "num_requests": 3}, source="w.yaml")
    assert gen(**ok.model_dump(exclude_none=True, exclude={"expanded_from"})).priority.tolist() == [2 ** 63 - 1] * 3


def test_cli_priority_beyond_int64(tmp_path):
    out = tmp_path / "out"
    r = cli("run", "--quiet", "--out", str(out), "--set",
            "workload.priority_classes=[{fraction: 1, priority: 99999999999999999999}]")
    assert_refused(r, "workload.priority_classes.0.priority", "99999999999999999999", out=out)


@pytest.mark.parametrize("value", ["9223372036854775808", "18446744073709551616", "1e30", "100000001",
                                   "9007199254740993"])
def test_trace_lengths_beyond_the_token_bound_name_file_row_column(tmp_path, value):
    p = tmp_path / "big.csv"
    p.write_text(f"num_prefill_tokens,num_decode_tokens\n100,10\n{value},10\n")
    with pytest.raises(ConfigError) as e:
        load_trace(p)
    assert f"big.csv:3: field 'num_prefill_tokens' = '{value}': must be a positive integer <= 100,000,000" \
        in str(e.value)
    q = tmp_path / "big.jsonl"
    q.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1}\n'
                 f'{{"timestamp": 1, "input_length": 10, "output_length": {value}}}\n')
    with pytest.raises(ConfigError, match=r"big\.jsonl:2: field 'output_length' = .*100,000,000"):
        load_trace(q)


def test_cli_trace_length_beyond_int64(tmp_path):
    p = tmp_path / "big.csv"
    p.write_text("num_prefill_tokens,num_decode_tokens\n100,10\n9223372036854775808,10\n")
    out = tmp_path / "out"
    r = cli("run", "--quiet", "--out", str(out), "--set", f"workload.trace={p}", "--set", "workload.request_rate=1")
    assert_refused(r, f"{p}:3:", "'num_prefill_tokens'", "'9223372036854775808'", out=out)


def test_inf_timestamps_are_still_refused(tmp_path):
    p = tmp_path / "inf.csv"
    p.write_text("num_prefill_tokens,num_decode_tokens,arrived_at\n100,10,0\n100,10,inf\n")
    with pytest.raises(ConfigError, match=r"inf\.csv:3: field 'arrived_at' = 'inf': must be a finite number"):
        gen(trace=str(p))
    assert math.isfinite(MAX_TRACE_TIMESTAMP_S)


def test_mooncake_hash_ids_beyond_the_key_range_name_the_row(tmp_path):
    """The KV-cache hashing takes keys below 2^60; the run failed with 'request 0: ...'."""
    p = tmp_path / "m.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 1200, "output_length": 5, "hash_ids": [1, 2]}\n'
                 f'{{"timestamp": 1, "input_length": 1200, "output_length": 5, "hash_ids": [1, {2 ** 60}]}}\n')
    with pytest.raises(ConfigError, match=r"m\.jsonl:2: malformed row: field 'hash_ids' must be a list of integers "
                                          r"in \[0, 2\^60\), got \[1, 1152921504606846976\]"):
        load_trace(p)
    assert len(load_trace(p, skip_bad_rows=True)) == 1
