"""Trace loaders on small hand-written files, the shared trace keys, and the real traces."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.paths import shared_dir
from sim.workload import WorkloadConfig, detect_format, generate_requests, load_trace


def write(path, text: str):
    path.write_text(text)
    return str(path)


def run(trace: str, seed: int = 0, max_model_len: int | None = None, **kw):
    return generate_requests(WorkloadConfig.from_dict({"trace": trace, **kw}, source="test"), seed=seed,
                             max_model_len=max_model_len)


AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:17:03.9799600,4808,10\n"
         "2023-11-16 18:17:04.0319600,3180,8\n"
         "2023-11-16 18:17:05.4799600,110,27\n")


def mooncake_rows(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


# ------------------------------------------------------------------ each format
def test_azure(tmp_path):
    p = write(tmp_path / "az.csv", AZURE)
    assert detect_format(p) == "azure"
    s = run(p)
    np.testing.assert_allclose(s.arrival_time_s, [0.0, 0.052, 1.5], atol=1e-9)
    assert s.num_prompt_tokens.tolist() == [4808, 3180, 110] and s.output_len.tolist() == [10, 8, 27]
    assert s.max_tokens.tolist() == [10, 8, 27] and s.prefix_keys is None


def test_rows_out_of_time_order_are_sorted_and_counted(tmp_path):
    # rows 2 and 4 are stamped before the row above them
    p = write(tmp_path / "az.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2023-11-16 18:17:05.00,100,10\n2023-11-16 18:17:04.00,200,20\n"
              "2023-11-16 18:17:06.00,300,30\n2023-11-16 18:17:03.00,400,40\n")
    s = run(p)
    np.testing.assert_allclose(s.arrival_time_s, [0.0, 1.0, 2.0, 3.0], atol=1e-9)
    assert s.num_prompt_tokens.tolist() == [400, 200, 100, 300]
    assert s.num_out_of_order_rows == 2 and "2 row(s) out of time order (sorted by time)" in s.source
    assert run(write(tmp_path / "ok.csv", AZURE)).num_out_of_order_rows == 0


def test_mooncake(tmp_path):
    rows = [{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]},
            {"timestamp": 3000, "input_length": 600, "output_length": 7, "hash_ids": [0, 2]},
            {"timestamp": 3000, "input_length": 513, "output_length": 1, "hash_ids": [0, 1]}]
    p = write(tmp_path / "m.jsonl", mooncake_rows(rows))
    assert detect_format(p) == "mooncake"
    s = run(p)
    np.testing.assert_allclose(s.arrival_time_s, [0.0, 3.0, 3.0])  # ms -> s
    assert s.num_prompt_tokens.tolist() == [1000, 600, 513]
    assert s.prefix_keys == [(0, 1), (0, 2), (0, 1)] and s.prefix_chunk_tokens == 512


def test_mooncake_jitter(tmp_path):
    rows = [{"timestamp": 3000, "input_length": 10 + i, "output_length": 1, "hash_ids": [i]} for i in range(200)]
    p = write(tmp_path / "m.jsonl", mooncake_rows(rows))
    s = run(p, jitter_s=3.0)
    t = s.arrival_time_s  # relative to the first row (0 s), each + U[0, 3)
    assert t.min() >= 0.0 and t.max() < 3.0 and np.all(np.diff(t) >= 0)
    assert len(np.unique(t)) == 200
    # keys still travel with their rows: key (i,) belongs to prompt 10 + i
    assert all(k == (p_ - 10,) for k, p_ in zip(s.prefix_keys, s.num_prompt_tokens.tolist()))


def test_burstgpt(tmp_path):
    text = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,Conversation log\n"
            "45,ChatGPT,1087,0,1087,Conversation log\n"
            "118,GPT-4,417,276,693,API log\n")
    p = write(tmp_path / "b.csv", text)
    assert detect_format(p) == "burstgpt"
    with pytest.raises(ConfigError, match=r"b\.csv:3: field 'Response tokens' = '0'"):
        run(p)  # a failed request (0 response tokens) is a malformed row
    s = run(p, skip_bad_rows=True)
    assert s.num_skipped_rows == 1
    np.testing.assert_allclose(s.arrival_time_s, [0.0, 113.0])
    assert s.num_prompt_tokens.tolist() == [472, 417]


def test_lengths_table_with_arrival_process(tmp_path):
    p = write(tmp_path / "l.csv", "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
                                  + "".join(f"{100 + i},{10 + i},{110 + 2 * i},1.0\n" for i in range(10)))
    assert detect_format(p) == "lengths"
    s = run(p, arrival="constant", request_rate=2.0, num_requests=4)
    np.testing.assert_allclose(s.arrival_time_s, [0.5, 1.0, 1.5, 2.0])
    assert s.num_prompt_tokens.tolist() == [100, 101, 102, 103]  # file order
    s = run(p, request_rate=2.0)  # all rows, Poisson by default
    assert len(s) == 10 and s.arrival_time_s[-1] == pytest.approx(5.0)
    with pytest.raises(ConfigError, match="no arrival times"):
        run(p, arrival="trace")
    with pytest.raises(ConfigError, match="10 usable rows"):
        run(p, request_rate=2.0, num_requests=11)


def test_vidur_lengths_with_arrived_at(tmp_path):
    p = write(tmp_path / "v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,4808,10\n0.052,3180,8\n")
    s = run(p)
    np.testing.assert_allclose(s.arrival_time_s, [0.0, 0.052])


def test_generic_csv_and_jsonl(tmp_path):
    p = write(tmp_path / "g.csv", "t_ms,prompt,completion,other\n1000,5,6,x\n1500,7,8,y\n")
    cols = {"arrival": "t_ms", "input": "prompt", "output": "completion", "arrival_unit": "ms"}
    s = run(p, columns=cols)
    np.testing.assert_allclose(s.arrival_time_s, [0.0, 0.5])
    assert s.num_prompt_tokens.tolist() == [5, 7] and s.output_len.tolist() == [6, 8]
    q = write(tmp_path / "g.jsonl", '{"at": 2.0, "i": 3, "o": 4}\n{"at": 1.0, "i": 5, "o": 6}\n')
    s = run(q, trace_format="generic", columns={"arrival": "at", "input": "i", "output": "o"})
    np.testing.assert_allclose(s.arrival_time_s, [0.0, 1.0])  # sorted into send order
    assert s.num_prompt_tokens.tolist() == [5, 3]
    with pytest.raises(ConfigError, match="missing column"):
        run(p, columns={"arrival": "t_ms", "input": "nope", "output": "completion"})


def test_unknown_header(tmp_path):
    p = write(tmp_path / "x.csv", "a,b\n1,2\n")
    with pytest.raises(ConfigError, match="trace_format"):
        run(p)


# ------------------------------------------------------------------ malformed rows
@pytest.mark.parametrize("row, field, why", [
    ("2023-11-16 18:17:06.0,abc,5", "ContextTokens", "not a number"),
    ("2023-11-16 18:17:06.0,-3,5", "ContextTokens", "positive integer"),
    ("2023-11-16 18:17:06.0,12.5,5", "ContextTokens", "positive integer"),
    ("2023-11-16 18:17:06.0,12", "GeneratedTokens", "missing"),
    ("yesterday,12,5", "TIMESTAMP", "not a timestamp"),
    # a literal nan / NA is quoted back, not called missing
    ("2023-11-16 18:17:06.0,nan,5", "ContextTokens", "= 'nan': not a number"),
    ("NA,12,5", "TIMESTAMP", "= 'NA': not a timestamp"),
    ("2023-11-16 18:17:06.0,12,", "GeneratedTokens", "missing"),
])
def test_malformed_csv_row_names_file_line_field(tmp_path, row, field, why):
    p = write(tmp_path / "bad.csv", AZURE + row + "\n" + "2023-11-16 18:17:07.0,1,1\n")
    with pytest.raises(ConfigError) as exc:
        run(p)
    msg = str(exc.value)
    assert "bad.csv:5:" in msg and field in msg and why in msg, msg
    s = run(p, skip_bad_rows=True)
    assert len(s) == 4 and s.num_skipped_rows == 1


def test_blank_line_keeps_line_numbers_and_extra_field(tmp_path):
    p = write(tmp_path / "bad.csv", AZURE + "\n" + "2023-11-16 18:17:06.0,x,5\n")
    with pytest.raises(ConfigError, match=r"bad\.csv:6:"):
        run(p)
    q = write(tmp_path / "extra.csv", AZURE + "2023-11-16 18:17:06.0,1,2,3\n2023-11-16 18:17:07.0,1,oops\n")
    with pytest.raises(ConfigError, match=r"extra\.csv.*line 5"):
        run(q)
    r = write(tmp_path / "first.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,1,2,3\n")
    with pytest.raises(ConfigError, match=r"first\.csv:2: .*more fields than the header"):
        run(r)  # pandas alone would silently drop the extra field
    # with skip_bad_rows the too-long line 5 is dropped and the rows after it keep their numbers
    from sim.workload.traces import _read_csv
    _, lines, num_bad = _read_csv(q, skip=True)
    assert lines.tolist() == [2, 3, 4, 6] and num_bad == 1
    s = run(q, skip_bad_rows=True)
    assert len(s) == 3 and s.num_skipped_rows == 2


def test_malformed_jsonl(tmp_path):
    good = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}
    text = mooncake_rows([good]) + "{not json\n" + mooncake_rows([{**good, "output_length": 0},
                                                                  {**good, "hash_ids": [-1]}, good])
    p = write(tmp_path / "m.jsonl", text)
    with pytest.raises(ConfigError, match=r"m\.jsonl:2: malformed row"):
        run(p)
    s = run(p, skip_bad_rows=True)
    assert len(s) == 2 and s.num_skipped_rows == 3
    q = write(tmp_path / "n.jsonl", mooncake_rows([good, {**good, "output_length": 0}]))
    with pytest.raises(ConfigError, match=r"n\.jsonl:2: field 'output_length' = 0"):
        run(q)
    # JSON true / lists are no numbers: named with the value as written (was reported 'missing')
    for bad, shown in ((True, "true"), ([3], r"\[3\]"), ({"n": 1}, r'\{"n": 1\}')):
        r = write(tmp_path / "t.jsonl", mooncake_rows([good, {**good, "input_length": bad}]))
        with pytest.raises(ConfigError, match=rf"t\.jsonl:2: field 'input_length' = {shown}: not a number"):
            run(r)
    assert len(run(r, skip_bad_rows=True)) == 1


# ------------------------------------------------------------------ over-long requests
def test_over_long_request_passes_unchanged_or_clipped(tmp_path):
    rows = [{"timestamp": 0, "input_length": 1500, "output_length": 100, "hash_ids": [0, 1, 2]},
            {"timestamp": 10, "input_length": 200, "output_length": 10, "hash_ids": [0]}]
    p = write(tmp_path / "m.jsonl", mooncake_rows(rows))
    s = run(p, max_model_len=1024)
    assert s.num_prompt_tokens.tolist() == [1500, 200] and s.num_clipped == 0  # the engine rejects it
    s = run(p, max_model_len=1024, clip_to_max_model_len=True)
    assert s.num_prompt_tokens.tolist() == [924, 200] and s.num_clipped == 1  # 924 + 100 = 1024
    assert s.prefix_keys[0] == (0,)  # only whole 512-token chunks of the kept prompt keep their key
    s = run(p, max_model_len=64, clip_to_max_model_len=True)  # max_tokens alone does not fit
    assert s.num_prompt_tokens[0] == 1 and s.max_tokens[0] == 63 and s.output_len[0] == 63
    with pytest.raises(ConfigError, match="max_model_len"):
        run(p, clip_to_max_model_len=True)


# ------------------------------------------------------------------ shared keys
def ten_rows(tmp_path) -> str:
    return write(tmp_path / "g.csv", "t,i,o\n" + "".join(f"{k},{100 + k},{1 + k}\n" for k in range(10)))


COLS = {"arrival": "t", "input": "i", "output": "o"}


def test_window_speedup_sample_duration(tmp_path):
    p = ten_rows(tmp_path)  # arrivals 0..9 s, inputs 100..109
    s = run(p, columns=COLS, window_s=[2, 6])
    np.testing.assert_allclose(s.arrival_time_s, [0, 1, 2, 3])  # 2 <= t < 6, shifted by 2
    assert s.num_prompt_tokens.tolist() == [102, 103, 104, 105]
    s = run(p, columns=COLS, window_s=[2, 6], speedup=2.0)
    np.testing.assert_allclose(s.arrival_time_s, [0, 0.5, 1.0, 1.5])
    s = run(p, columns=COLS, speedup=4.0, duration_s=1.0)  # 0, .25, .5, .75, 1.0
    assert len(s) == 5
    s = run(p, columns=COLS, num_requests=3, num_warmup_requests=2)
    assert len(s) == 5 and s.num_warmup == 2
    a = run(p, columns=COLS, sample_fraction=0.5, seed=1)
    b = run(p, columns=COLS, sample_fraction=0.5, seed=1)
    c = run(p, columns=COLS, sample_fraction=0.5, seed=2)
    assert len(a) == 5 and a.equals(b) and not a.equals(c)
    kept = a.num_prompt_tokens - 100  # original row index
    np.testing.assert_allclose(a.arrival_time_s, kept)  # those rows keep their own times, in order
    assert np.all(np.diff(kept) > 0)
    with pytest.raises(ConfigError, match="window"):
        run(p, columns=COLS, window_s=[20, 30])


def test_trace_with_synthetic_arrivals(tmp_path):
    p = ten_rows(tmp_path)
    s = run(p, columns=COLS, arrival="constant", request_rate=1.0, num_requests=3)
    np.testing.assert_allclose(s.arrival_time_s, [1, 2, 3])
    assert s.num_prompt_tokens.tolist() == [100, 101, 102]
    with pytest.raises(ConfigError, match="speedup"):
        run(p, columns=COLS, arrival="poisson", request_rate=1.0, speedup=2.0)


# ------------------------------------------------------------------ the real traces
def real(rel: str):
    p = shared_dir() / "traces" / rel
    if not p.is_file():
        pytest.skip(f"real trace {p} not present (../shared/traces is absent)")
    return str(p)


def test_real_azure_code():
    s = run(real("azure_llm_2023/AzureLLMInferenceTrace_code.csv"))
    assert len(s) == 8819 and s.num_skipped_rows == 0
    assert s.arrival_time_s[-1] == pytest.approx(3435.9, abs=0.1)
    assert (len(s) - 1) / s.arrival_time_s[-1] == pytest.approx(2.566, abs=0.001)
    assert s.num_prompt_tokens.mean() == pytest.approx(2047.8, abs=0.1)
    assert s.output_len.mean() == pytest.approx(27.9, abs=0.1)
    v = run(real("vidur/splitwise_code.csv"))  # the same data in Vidur's format
    np.testing.assert_allclose(v.arrival_time_s, s.arrival_time_s, atol=1e-6)
    np.testing.assert_array_equal(v.num_prompt_tokens, s.num_prompt_tokens)


def test_real_mooncake():
    s = run(real("mooncake_fast25/conversation_trace.jsonl"))
    assert len(s) == 12031 and s.prefix_chunk_tokens == 512
    assert s.arrival_time_s[-1] == pytest.approx(3537.0, abs=0.01)
    assert s.num_prompt_tokens.mean() == pytest.approx(12035.1, abs=0.1)
    assert all(len(k) == math.ceil(p / 512) for k, p in zip(s.prefix_keys, s.num_prompt_tokens.tolist()))
    assert all(k[0] == 0 for k in s.prefix_keys)  # block 0 is everyone's system prompt


@pytest.mark.parametrize("rel, rows, mean_in", [
    ("vidur/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv", 28257, 2588.1),
    ("etalon/sharegpt_8k_filtered_stats_llama2_tokenizer.csv", 30731, 2340.0),
    ("etalon/bwb_stats_llama2_tokenizer_filtered_v2.csv", 33768, 1067.2),
])
def test_real_length_tables(rel, rows, mean_in):
    t = load_trace(real(rel))
    assert t.format == "lengths" and len(t) == rows and t.arrival_s is None
    assert t.num_prompt_tokens.mean() == pytest.approx(mean_in, abs=0.1)


def test_kv_command_takes_a_trace_workload(tmp_path):
    """`servesim kv --set workload.trace=F` used to merge the trace into the
    'default' workload's fixed lengths and report a length/trace conflict."""
    from typer.testing import CliRunner

    from sim.cli.main import app

    trace = write(tmp_path / "azure.csv", AZURE)
    r = CliRunner().invoke(app, ["kv", "--set", f"workload.trace={trace}"])
    assert r.exit_code == 0, r.output
    assert "131,072" in r.output  # llama-3.1-8b's KV bytes per token (the default model)
