"""Benchmark harnesses (sim/validate/harness.py): named ones, the YAML form with
one-line errors naming the key, the campaign -> harness map, and how a harness
sets a row's simulation (hand-computed lengths and counts)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.validate.harness import (CAMPAIGN_HARNESS, HARNESSES, harness_for_campaign, harness_for_row,
                                  harness_from_dict, load_campaign_map, load_harness)
from sim.validate.rows import ValidateOptions, row_overrides, row_phase_spread

from tests.test_validate import GPU, MODEL

ROW = {"backend": "vllm", "model_path": MODEL, "system": GPU, "precision": "", "gemm_quant_mode": "",
       "isl": 1000, "osl": 100, "concurrency": 4, "tp_size": 1, "silicon_ttft_ms": 1.0, "silicon_tpot_ms": 1.0}


def test_named_harnesses_have_sources():
    assert {"aic", "vllm-bench-serve", "inferencemax", "genai-perf"} <= set(HARNESSES)
    assert all(h.source and h.description for h in HARNESSES.values())


def test_campaign_map():
    assert harness_for_campaign("aic-gap-analysis") == "aic"
    assert harness_for_campaign("other-gap-analysis") == "aic"
    # its rows repeat the nightly campaigns' measurements (sim/validate/harness.py CAMPAIGN_HARNESS)
    assert harness_for_campaign("qwen3.5-397b-gap-analysis") == "inferencemax"
    assert harness_for_campaign("2026-03-25") == "inferencemax"
    assert harness_for_campaign("db-dump/2026-04-27") == "inferencemax"
    assert harness_for_campaign("something-else") is None
    assert harness_for_row(dict(ROW, campaign="2026-04-06")).name == "inferencemax"
    assert harness_for_row(ROW).name == "aic"  # no campaign: the dense table's protocol
    assert harness_for_row(dict(ROW, campaign="2026-04-06", harness="genai-perf")).name == "genai-perf"
    assert harness_for_row(dict(ROW, campaign="2026-04-06"), default="aic").name == "aic"  # --harness wins
    assert set(CAMPAIGN_HARNESS.values()) <= set(HARNESSES)


def test_inferencemax_row_hand_computed():
    # 2·C warm-ups drained before the measured run (simulated as none: the run starts cold),
    # 10·C measured; lengths uniform on [int(0.8 L), L]; the recipe's batch from batch_size;
    # engine defaults (no aic token budget).
    ov = row_overrides(dict(ROW, campaign="2026-03-25", batch_size=64.0), ValidateOptions())
    assert HARNESSES["inferencemax"].warmup_per_client == 2 and HARNESSES["inferencemax"].warmup_drained
    assert ov["workload.num_requests"] == 40 and ov["workload.num_warmup_requests"] == 0
    # an explicit --warmup-per-client still excludes the stream's first requests
    ov2 = row_overrides(dict(ROW, campaign="2026-03-25"), ValidateOptions(warmup_per_client=2))
    assert ov2["workload.num_warmup_requests"] == 8
    assert ov["workload.input_len"] == {"dist": "uniform", "low": 800, "high": 1000}
    assert ov["workload.output_len"] == {"dist": "uniform", "low": 80, "high": 100}
    assert ov["max_model_len"] == 1100
    assert ov["max_num_seqs"] == 64 and "max_num_batched_tokens" not in ov
    assert row_phase_spread(dict(ROW, campaign="2026-03-25", backend="trtllm"), ValidateOptions()) == 0.0
    # aic: exact lengths, the generator's budget C + isl + 1500, every request measured
    aic = row_overrides(ROW, ValidateOptions())
    assert aic["workload.input_len"] == {"dist": "fixed", "value": 1000}
    assert aic["max_num_batched_tokens"] == 2504 and aic["workload.num_warmup_requests"] == 0


def test_vllm_bench_serve_and_around_range():
    h = HARNESSES["vllm-bench-serve"]
    assert h.num_requests(4) == 1000 and h.warmup_per_client == 0
    own = harness_from_dict({"name": "x", "lengths": {"range_ratio": 0.5, "range": "around"}})
    assert own.length_spec(100) == {"dist": "uniform", "low": 50, "high": 150}
    assert own.max_length(100) == 150


def test_yaml_harness(tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text("name: mine\nprompts_per_client: 5\nwarmup_per_client: 1\nlengths: {range_ratio: 0.9}\n"
                 "deployment: engine_defaults\nengine_args: {vllm: {max_num_batched_tokens: 4096}}\n"
                 "think_time_ms: 0\n")
    h = load_harness(str(p))
    assert (h.name, h.prompts_per_client, h.warmup_per_client, h.range_ratio, h.think_time_s) == (
        "mine", 5, 1, 0.9, 0.0)
    ov = row_overrides(ROW, ValidateOptions(harness=str(p)))
    assert ov["workload.num_requests"] == 20 and ov["workload.num_warmup_requests"] == 4
    assert ov["max_num_batched_tokens"] == 4096
    assert ov["workload.input_len"] == {"dist": "uniform", "low": 900, "high": 1000}
    drained = tmp_path / "drained.yaml"
    drained.write_text("name: d\nwarmup_per_client: 2\nwarmup_drained: true\n")
    assert row_overrides(ROW, ValidateOptions(harness=str(drained)))["workload.num_warmup_requests"] == 0


@pytest.mark.parametrize("data, key", [
    ({"name": "x", "prompts": 3}, "prompts"),
    ({"name": "x", "prompts_per_client": 0}, "prompts_per_client"),
    ({"name": "x", "prompts_per_client": True}, "prompts_per_client"),
    ({"name": "x", "warmup_per_client": -1}, "warmup_per_client"),
    ({"name": "x", "warmup_drained": "yes"}, "warmup_drained"),
    ({"name": "x", "lengths": {"range_ratio": 1.5}}, "lengths.range_ratio"),
    ({"name": "x", "lengths": {"range_ratio": 0.5, "range": "above"}}, "lengths.range"),
    ({"name": "x", "lengths": {"ratio": 0.5}}, "lengths.ratio"),
    ({"name": "x", "lengths": "random"}, "lengths"),
    ({"name": "x", "deployment": "mine"}, "deployment"),
    ({"name": "x", "engine_args": {"tgi": {}}}, "engine_args.tgi"),
    ({"name": "x", "engine_args": {"sglang": {"max_num_seq": 8192}}}, "engine_args.sglang.max_num_seq"),
    ({"name": "x", "engine_args": {"vllm": {"max_num_seqs": -3}}}, "engine_args.vllm.max_num_seqs"),
    ({"name": "x", "think_time_ms": -1}, "think_time_ms"),
    ({"name": "x", "num_prompts": 5, "prompts_per_client": 2}, "num_prompts"),
    ({"prompts_per_client": 2}, "name"),
])
def test_bad_harness_yaml_names_the_key(tmp_path, data, key):
    import yaml

    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as e:
        load_harness(str(p))
    msg = str(e.value)
    assert "\n" not in msg and f": {key}:" in msg and str(p) in msg


def test_unknown_harness_and_campaign_map(tmp_path):
    with pytest.raises(ConfigError, match="harness: unknown 'nope'"):
        load_harness("nope")
    m = tmp_path / "map.yaml"
    m.write_text("'2026-*': genai-perf\n")
    assert load_campaign_map(m) == {"2026-*": "genai-perf"}
    ov = row_overrides(dict(ROW, campaign="2026-03-25"), ValidateOptions(campaign_harness=load_campaign_map(m)))
    assert ov["workload.num_warmup_requests"] == 8 and ov["workload.input_len"]["dist"] == "fixed"
    m.write_text("'2026-*': nope\n")
    with pytest.raises(ConfigError, match=r"map\.yaml: 2026-\*: harness: unknown 'nope'"):
        load_campaign_map(m)


def test_cli_harness_option(tmp_path):
    import pandas as pd
    from typer.testing import CliRunner

    from sim.cli.main import app

    csv = tmp_path / "rows.csv"
    pd.DataFrame([dict(ROW, id="r", backend_version="0.5.0", isl=64, osl=4, concurrency=2)]).to_csv(csv, index=False)
    bad = tmp_path / "h.yaml"
    bad.write_text("name: h\nwarmups: 2\n")
    r = CliRunner().invoke(app, ["validate", str(csv), "--out", str(tmp_path / "o"), "--quiet", "--harness", str(bad)])
    # the CLI's entry point turns a ConfigError into one line and exit status 2 (tests/test_cli_errors.py)
    assert isinstance(r.exception, ConfigError) and f"{bad}: warmups: unknown key" in str(r.exception)
    assert "\n" not in str(r.exception)
    good = tmp_path / "g.yaml"
    good.write_text("name: g\nprompts_per_client: 2\nwarmup_per_client: 1\n")
    r = CliRunner().invoke(app, ["validate", str(csv), "--out", str(tmp_path / "o"), "--quiet", "--workers", "1",
                                 "--harness", str(good)])
    assert r.exit_code == 0, r.output
    assert "1 of 1 rows simulated" in r.output
    assert "warning: vllm 0.5.0 is older than every modelled release" in r.output  # backend_version -> engine_version
    js = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert js["options"]["harness"] == "g" and js["options"]["harnesses"] == ["g"]


def test_recipe_formulas_are_checked_at_load_naming_the_file(tmp_path):
    """A formula's key is an engine key a recipe can set, checked when the file is read (named
    with ``recipe_args[i].formulas.<key>``); a 5000-term formula is one line, not a RecursionError;
    a division by zero on a row names the file and the row's values."""
    import yaml

    from sim.errors import ConfigError
    from sim.validate.harness import MAX_FORMULA_CHARS, load_harness

    def write(formulas: dict) -> Path:
        p = tmp_path / "h.yaml"
        p.write_text(yaml.safe_dump({"name": "r", "recipe_args": [
            {"model": "*", "systems": ["*"], "engine": "vllm", "args": {"max_num_seqs": 8}},
            {"model": "*", "systems": ["*"], "engine": "vllm", "formulas": formulas}]}))
        return p

    for key, msg in (("model", "fixed by the row or the run"), ("workload.num_requests", "fixed by the row"),
                     ("max_num_seq", "unknown config key 'max_num_seq'; did you mean max_num_seqs?")):
        p = write({key: "isl"})
        with pytest.raises(ConfigError, match=rf"^{re.escape(str(p))}: recipe_args\[1\]\.formulas\.{re.escape(key)}: "
                                              rf".*{re.escape(msg)}"):
            load_harness(str(p))
    long = " + ".join(["isl"] * 5000)
    p = write({"max_num_batched_tokens": long})
    with pytest.raises(ConfigError, match=rf"formulas\.max_num_batched_tokens: the formula is {len(long)} characters "
                                          rf"long; at most {MAX_FORMULA_CHARS}"):
        load_harness(str(p))
    # 240 nested parentheses: under the length cap, beyond the parser's nesting: one line, the text cut short
    with pytest.raises(ConfigError, match=r"formulas.max_num_seqs: .\(+\.\.\.. is not an expression"):
        load_harness(str(write({"max_num_seqs": "(" * 240 + "isl" + ")" * 240})))
    h = load_harness(str(write({"max_num_batched_tokens": "isl // (concurrency - 8)"})))
    row = dict(backend="vllm", model_path="m", system="h100_sxm", isl=1024, osl=128, concurrency=8)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(tmp_path / 'h.yaml'))}: recipe_args\[1\]\.formulas\."
                                          r"max_num_batched_tokens \(row isl 1024, osl 128, concurrency 8\): "
                                          r"'isl // \(concurrency - 8\)' divides by zero"):
        h.recipe_overrides(row, "vllm")
    assert h.recipe_overrides(dict(row, concurrency=9), "vllm") == {"max_num_seqs": 8, "max_num_batched_tokens": 1024}


def test_engine_args_refusing_a_workload_key_says_engine_args():
    with pytest.raises(ConfigError, match=r"^h\.yaml: engine_args\.vllm\.workload\.request_rate: engine_args sets "
                                          r"engine keys; workload\.request_rate is fixed by the row or the run"):
        harness_from_dict({"name": "x", "engine_args": {"vllm": {"workload.request_rate": 4}}}, "h.yaml")
