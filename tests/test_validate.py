"""servesim validate: the simulated closed-loop benchmark on a tiny case, and
the output files on a small CSV (accuracy figures live in reports/validation)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from sim.config import build_config
from sim.errors import ConfigError
from sim.validate.rows import ValidateOptions, row_overrides, row_quantization, simulate_row
from sim.validate.run import run_validation

DATA = Path(__file__).parent / "data"
MODEL = str(DATA / "test_model.json")
GPU = str(DATA / "test_gpu.yaml")

ROW = {"backend": "vllm", "model_path": MODEL, "system": GPU, "precision": "", "gemm_quant_mode": "",
       "isl": 100, "osl": 3, "concurrency": 2, "tp_size": 1, "silicon_ttft_ms": 1.0, "silicon_tpot_ms": 1.0}


def test_closed_loop_benchmark_matches_hand_schedule():
    # Two clients, one warm-up and one measured request each, no think time, vLLM
    # preset (chunked prefill) with a 128-token budget and a serial CPU overhead of
    # 1 ms + 0.1 ms per scheduled sequence. Requests R0, R1 (warm-up), R2, R3: 100 in, 3 out.
    # step | scheduled (new@ctx)     | events
    #  1   | R0 100@0, R1 28@0       | R0 first token
    #  2   | R0 1@100, R1 72@28      | R1 first token
    #  3   | R0 1@101, R1 1@100      | R0 done (3 tokens) → its client sends R2 at t3
    #  4   | R1 1@101, R2 100@0      | R1 done → R3 sent at t4; R2 first token
    #  5   | R2 1@100, R3 100@0      | R3 first token
    #  6   | R2 1@101, R3 1@100      | R2 done
    #  7   | R3 1@101                | R3 done
    from sim.config import build_config
    from sim.engine.deployment import build_deployment

    opts = ValidateOptions(protocol="steady", requests_per_client=1, warmup_per_client=1, think_time_s=0.0,
                           engine_overrides={"vllm": {"max_num_batched_tokens": 128, "cpu_step_overhead_s": 1e-3,
                                                      "cpu_seq_overhead_s": 1e-4, "frontend_latency_s": 0.0,
                                                      "frontend_token_s": 0.0,
                                                      # serial host (vLLM before 0.14; the preset is 0.24's)
                                                      "overlap_scheduling": False}})
    cm = build_deployment(build_config(overrides=row_overrides(ROW, opts))).cost_model

    def t(new, ctx):
        return cm.step_time_s(np.array(new), np.array(ctx)) + 1e-3 + 1e-4 * len(new)

    s4, s5 = t([1, 100], [101, 0]), t([1, 100], [100, 0])
    s6, s7 = t([1, 1], [101, 100]), t([1], [101])
    ttft = (s4 + s5) / 2            # R2: sent at t3, first token at t4; R3: sent t4, first t5
    tpot = ((s5 + s6) / 2 + (s6 + s7) / 2) / 2
    out = simulate_row(ROW, opts)
    assert out["status"] == "ok"
    assert out["pred_ttft_ms"] == pytest.approx(ttft * 1e3, rel=1e-9)
    assert out["pred_tpot_ms"] == pytest.approx(tpot * 1e3, rel=1e-9)
    assert out["num_engine_steps"] == 7


def test_row_mapping():
    assert row_quantization({"precision": "fp8", "gemm_quant_mode": "fp8_block"}) == "fp8_block"
    assert row_quantization({"precision": "fp8", "gemm_quant_mode": "fp8"}) == "fp8"
    assert row_quantization({"precision": float("nan"), "gemm_quant_mode": float("nan")}) is None
    # an fp8 label on a block-FP8 checkpoint (weight_block_size [128, 128]) runs block-scaled
    mm = {"precision": "fp8", "gemm_quant_mode": "fp8", "model_path": "MiniMaxAI/MiniMax-M2.5"}
    assert row_quantization(mm) == "fp8_block"
    assert row_quantization(dict(mm, model_path="deepseek-ai/DeepSeek-R1")) == "fp8_block"
    # ... and so does one whose experts the table labels fp8_block (Qwen3.5's bf16 config)
    assert row_quantization(dict(mm, model_path="Qwen/Qwen3.5-397B-A17B", moe_quant_mode="fp8_block")) == "fp8_block"
    # a bf16 checkpoint quantized per tensor by the engine, and a per-tensor FP8 checkpoint, stay fp8
    assert row_quantization(dict(mm, model_path="Qwen/Qwen3-32B")) == "fp8"
    assert row_quantization(dict(mm, model_path="nvidia/Llama-3.1-70B-Instruct-FP8")) == "fp8"
    ov = row_overrides(dict(ROW, backend="trtllm", precision="fp8", gemm_quant_mode="fp8", tp_size=2.0),
                       ValidateOptions(protocol="steady"))
    assert ov["engine"] == "trtllm" and ov["tensor_parallel_size"] == 2 and ov["kv_cache_dtype"] == "fp8"
    assert ov["workload.num_requests"] == 20 and ov["workload.num_warmup_requests"] == 4
    assert ov["max_model_len"] == 103 and ov["workload.max_concurrency"] == 2
    ov = row_overrides(dict(ROW, backend="sglang"), ValidateOptions())
    assert "block_size" not in ov  # SGLang rows run at the preset's real page size
    assert build_config(overrides=ov).block_size == 1


@pytest.mark.parametrize("cell,value,match", [
    ("tp_size", 2.5, "tp_size: must be a whole number >= 1, got 2.5"),
    ("concurrency", 0.0, "concurrency: must be a whole number >= 1, got 0$"),
    ("isl", 2e8, r"isl: 200,000,000 is beyond what servesim simulates \(100,000,000\)"),
    ("osl", 1, "osl: 1 output token has no TPOT to score"),
    ("silicon_ttft_ms", -5.0, "silicon_ttft_ms: the measurement must be a positive number of ms, got -5.0"),
    ("silicon_tpot_ms", float("nan"), "silicon_tpot_ms: the measurement must be a positive"),
])
def test_bad_row_cells_are_row_errors(cell, value, match):
    """A fractional TP used to run as int(2.5) = 2; a missing or negative
    measurement used to be scored (MAPE nan)."""
    with pytest.raises(ConfigError, match=match):
        row_overrides(dict(ROW, **{cell: value}), ValidateOptions())


def test_validate_writes_summary_and_flags_unknown_model(tmp_path):
    import pandas as pd

    rows = [dict(ROW, id=f"r{i}", concurrency=c, osl=o, silicon_ttft_ms=m_t, silicon_tpot_ms=m_p)
            for i, (c, o, m_t, m_p) in enumerate([(1, 4, 0.5, 0.3), (2, 4, 0.8, 0.3), (4, 8, 1.0, 0.4)])]
    rows.append(dict(ROW, id="r3", backend="trtllm", concurrency=2, silicon_ttft_ms=0.7, silicon_tpot_ms=0.3))
    rows.append(dict(ROW, id="r4", model_path="acme/NoSuchModel-7B"))
    csv = tmp_path / "rows.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    out = tmp_path / "out"
    df, summary = run_validation(csv, out, ValidateOptions(requests_per_client=2, workers=1))
    assert len(df) == 5  # nothing dropped
    assert list(df["status"]) == ["ok"] * 4 + ["error"]
    assert "NoSuchModel" in df.loc[4, "reason"]
    assert np.isnan(df.loc[4, "pred_ttft_ms"]) and (df.loc[:3, "pred_ttft_ms"] > 0).all()
    for name in ("predictions.csv", "summary.json", "summary.md", "scatter_ttft.png", "scatter_tpot.png",
                 "residuals_by_group.png"):
        assert (out / name).is_file(), name
    js = json.loads((out / "summary.json").read_text())
    assert js["num_rows"] == 5 and js["num_ok"] == 4
    assert js["not_simulated"][0]["id"] == "r4"
    assert set(js["by_engine"]) == {"vllm", "trtllm"}
    o = js["overall"]
    ape = (df.loc[:3, "pred_ttft_ms"] - df.loc[:3, "silicon_ttft_ms"]).abs() / df.loc[:3, "silicon_ttft_ms"]
    assert o["ttft_mape"] == pytest.approx(100 * ape.mean()) and o["ttft_mdape"] == pytest.approx(100 * ape.median())
    assert o["ttft_over_share"] == pytest.approx(float((df.loc[:3, "pred_ttft_ms"] > df.loc[:3, "silicon_ttft_ms"]).mean()))
    md = (out / "summary.md").read_text()
    assert "Rows not simulated" in md and "r4" in md
    pred_csv = pd.read_csv(out / "predictions.csv")
    assert {"pred_ttft_ms", "pred_tpot_ms", "status", "reason", "silicon_ttft_ms", "id"} <= set(pred_csv.columns)


@pytest.mark.parametrize("text, match", [
    ("", "empty file"),
    ("backend,model_path,system,isl,osl,concurrency,tp_size,silicon_ttft_ms,silicon_tpot_ms\n", "no data rows"),
    ("backend,model_path,system,isl,osl,concurrency,tp_size,silicon_ttft_ms,silicon_tpot_ms\n"
     "vllm,meta-llama/Llama-3.1-8B,h100_sxm,128,16,2,1,abc,3.0\n",
     r"no row has numbers in .*; e.g. line 2: silicon_ttft_ms: not a number: 'abc'"),
])
def test_bad_csv_is_a_clear_error(tmp_path, text, match):
    from sim.errors import ConfigError
    from sim.validate.rows import read_rows

    p = tmp_path / "rows.csv"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match):
        read_rows(p)


def test_a_ragged_line_costs_its_row_only_and_lines_are_the_csv_lines(tmp_path):
    """A line with an extra field, a cut line (8 of 9 fields) and a non-number are skipped with
    their CSV lines; a blank line is no row; a row whose last cell is empty but present is read
    (row_overrides then names it); the rows read keep their CSV lines (index = line - 2)."""
    from sim.validate.rows import read_rows, skipped_row_warnings

    p = tmp_path / "rows.csv"
    p.write_text("backend,model_path,system,isl,osl,concurrency,tp_size,silicon_ttft_ms,silicon_tpot_ms\n"
                 "vllm,m,g,128,16,2,1,1.0,3.0\n"
                 "vllm,m,g,128,16,2,1,1.0\n"
                 "\n"
                 "vllm,m,g,abc,16,2,1,1.0,3.0\n"
                 "vllm,m,g,128,16,2,1,1.0,3.0,extra\n"
                 "sglang,m,g,256,16,2,1,1.0,3.0\n"
                 "sglang,m,g,256,16,2,1,1.0,\n")
    df, skipped = read_rows(p)
    assert df.index.tolist() == [0, 5, 6] and df["isl"].tolist() == [128, 256, 256]  # lines 2, 7 and 8
    assert math.isnan(df.loc[6, "silicon_tpot_ms"])
    with pytest.raises(ConfigError, match="silicon_tpot_ms: the measurement must be a positive number"):
        row_overrides(df.loc[6].to_dict(), ValidateOptions())
    assert skipped_row_warnings("rows.csv", skipped) == [
        "rows.csv: line 3: fewer fields than the header (8 of 9); row skipped",
        "rows.csv: line 5: isl: not a number: 'abc'; row skipped",
        "rows.csv: line 6: more fields than the header; row skipped"]


def test_backend_names_are_read_as_the_presets_spell_them(tmp_path):
    """' VLLM' and 'vllm' are one engine: one group in the reports."""
    from sim.validate.rows import read_rows

    p = tmp_path / "rows.csv"
    p.write_text("backend,model_path,system,isl,osl,concurrency,tp_size,silicon_ttft_ms,silicon_tpot_ms\n"
                 " VLLM ,m,g,128,16,2,1,1.0,3.0\nvllm,m,g,128,16,2,1,1.0,3.0\nSGLang,m,g,128,16,2,1,1.0,3.0\n")
    df, skipped = read_rows(p)
    assert df["backend"].tolist() == ["vllm", "vllm", "sglang"] and skipped == []


def test_cli_skips_and_names_rows_with_a_non_numeric_cell(tmp_path):
    import pandas as pd
    import typer
    from typer.testing import CliRunner

    from sim.cli.validate import validate

    rows = [dict(ROW, id="good"), dict(ROW, id="badshape", isl="12x8"),
            dict(ROW, id="badmeas", silicon_ttft_ms="abc", tp_size="one"),
            dict(ROW, id="nomodel", model_path="acme/No")]
    csv = tmp_path / "rows.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    out = tmp_path / "out"
    app = typer.Typer()
    app.command()(validate)
    app.command()(lambda: None)
    r = CliRunner().invoke(app, ["validate", str(csv), "--out", str(out), "--quiet", "--workers", "1",
                                 "--requests-per-client", "2"])
    assert r.exit_code == 0, r.output
    # lines 3 and 4 skipped (first bad column of each named); the unknown model on line 5 keeps its line
    assert f"warning: {csv}: line 3: isl: not a number: '12x8'; row skipped" in r.output
    assert f"warning: {csv}: line 4: tp_size: not a number: 'one'; row skipped" in r.output
    assert "1 of 4 rows simulated (2 skipped, 1 not simulated)" in r.output  # every data row counted
    assert "line 5 nomodel: error" in r.output
    js = json.loads((out / "summary.json").read_text())
    assert js["num_rows"] == 2 and js["num_ok"] == 1 and js["num_skipped_rows"] == 2
    assert js["skipped_rows"] == [{"line": 3, "column": "isl", "value": "12x8", "reason": "not a number"},
                                  {"line": 4, "column": "tp_size", "value": "one", "reason": "not a number"}]
    assert js["not_simulated"][0]["line"] == 5  # CSV line numbers, as skipped_rows and the warnings
    assert list(pd.read_csv(out / "predictions.csv")["id"]) == ["good", "nomodel"]
    assert "| 3 | isl | 12x8 |" in (out / "summary.md").read_text()


def test_cli_where_and_limit_select_the_rows_simulated(tmp_path):
    import pandas as pd
    import typer
    from typer.testing import CliRunner

    from sim.cli.validate import validate

    rows = [dict(ROW, id="a", concurrency=2), dict(ROW, id="b", concurrency=4), dict(ROW, id="c", concurrency=8),
            dict(ROW, id="d", concurrency=4, backend="sglang")]
    csv = tmp_path / "rows.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    app = typer.Typer()
    app.command()(validate)
    app.command()(lambda: None)

    def run(*args):
        out = tmp_path / "out"
        r = CliRunner().invoke(app, ["validate", str(csv), "--out", str(out), "--quiet", "--workers", "1",
                                     "--requests-per-client", "2", *args])
        return r, out

    r, out = run("--where", f"backend={ROW['backend']}", "--where", "concurrency=4,8")  # a number cell: as numbers
    assert r.exit_code == 0, r.output
    assert list(pd.read_csv(out / "predictions.csv")["id"]) == ["b", "c"]
    assert f"2 of 2 rows selected by --where backend={ROW['backend']} --where concurrency=4,8 simulated" in r.output
    r, out = run("--limit", "1")
    assert r.exit_code == 0 and list(pd.read_csv(out / "predictions.csv")["id"]) == ["a"]
    assert json.loads((out / "summary.json").read_text())["options"]["limit"] == 1
    for args, msg in ((("--where", "nope=1"), "--where nope: "), (("--where", "backend=xx"), "no row matches"),
                      (("--where", "backend"), "expected COLUMN=VALUE"), (("--limit", "0"), "--limit must be >= 1")):
        r, _ = run(*args)
        assert r.exit_code != 0 and msg in str(r.exception), (args, r.exception)


def test_cli_fails_when_no_row_can_be_simulated(tmp_path):
    import typer
    from typer.testing import CliRunner

    from sim.cli.validate import validate

    p = tmp_path / "rows.csv"
    p.write_text("backend,model_path,system,isl,osl,concurrency,tp_size,silicon_ttft_ms,silicon_tpot_ms\n"
                 "vllm,nope/model,h100_sxm,128,16,2,1,12.5,3.0\n")
    app = typer.Typer()
    app.command()(validate)
    app.command()(lambda: None)
    r = CliRunner().invoke(app, ["validate", str(p), "--out", str(tmp_path / "out"), "--quiet"])
    assert r.exit_code != 0
    assert "line 2" in r.output and "unknown model 'nope/model'" in r.output
    assert "no row could be simulated" in str(r.exception)
