"""servesim compare end to end: paired variants, and the diagnosis reading the
numbers of real engine runs (llama-3.1-8b on h100_sxm)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from sim.compare.variants import Variant, parse_variant, run_variants, variants_from_args
from sim.config import build_config
from sim.compare.diagnosis import diagnose
from sim.errors import ConfigError
from sim.results.output import requests_frame, steps_frame
from sim.compare.variant_data import VariantData


def write_trace(path, rows):
    path.write_text("arrival_s,input,output\n" + "".join(f"{a:.6f},{i},{o}\n" for a, i, o in rows))
    return str(path)


def mixed_trace(tmp_path, long_prompt: int, name: str):
    """Decoding chat requests (100 in / 200 out) at 8 req/s, with a long prompt
    (``long_prompt`` in / 10 out) every 10th request."""
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(1 / 8.0, 300))
    rows = [(t[i], long_prompt if i % 10 == 5 else 100, 10 if i % 10 == 5 else 200) for i in range(300)]
    return write_trace(tmp_path / name, rows)


def base_cfg(trace, **kw):
    ov = {"model": "llama-3.1-8b", "hardware": "h100_sxm", "workload.trace": trace, "workload.trace_format": "generic",
          "workload.columns": {"arrival": "arrival_s", "input": "input", "output": "output"}}
    ov.update(kw)
    return build_config(overrides=ov)


def variants_data(results):
    return {n: VariantData(n, s, requests_frame(r), steps_frame(r), r.itl) for n, (s, r) in results.items()}


def kinds(v):
    return {f.kind for f in diagnose(v.name, v)}


@pytest.fixture(scope="module")
def interference_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("interf")
    long_trace = mixed_trace(tmp, 7000, "long.csv")
    short_trace = mixed_trace(tmp, 48, "short.csv")
    vs = [Variant("continuous", {"scheduler": "continuous"}),
          Variant("chunked", {"scheduler": "chunked", "max_num_batched_tokens": 512})]
    long_res = run_variants(base_cfg(long_trace), vs, workers=1)
    short_res = run_variants(base_cfg(short_trace), [vs[0]], workers=1)
    return variants_data(long_res), variants_data(short_res), long_res


def test_variants_see_identical_arrivals(interference_runs):
    _, _, res = interference_runs
    a = res["continuous"][1].requests
    b = res["chunked"][1].requests
    for key in ("arrival_time_s", "num_prompt_tokens", "max_tokens"):
        assert np.array_equal(a[key], b[key])


def test_prefill_interference_named_for_continuous_not_chunked(interference_runs):
    long_v, short_v, _ = interference_runs
    assert "prefill_interference" in kinds(long_v["continuous"])
    assert "prefill_interference" not in kinds(long_v["chunked"])
    # Only short prompts: continuous has prefill-only steps too, but they are short.
    assert "prefill_interference" not in kinds(short_v["continuous"])


def test_forced_preemptions_name_kv_capacity(tmp_path):
    rng = np.random.default_rng(1)
    rows = [(float(t), 1500, 400) for t in np.cumsum(rng.exponential(1 / 20.0, 80))]
    trace = write_trace(tmp_path / "kv.csv", rows)
    res = run_variants(base_cfg(trace, num_gpu_blocks_override=600, max_model_len=4096), [Variant("chunked", {})],
                       workers=1)
    v = variants_data(res)["chunked"]
    assert v.summary["num_preemptions"] > 0
    assert "kv_capacity" in kinds(v)


def test_variant_parsing_errors():
    assert parse_variant("fp8 quantization=fp8 max_num_batched_tokens=2048").overrides == {
        "quantization": "fp8", "max_num_batched_tokens": 2048}
    with pytest.raises(ConfigError, match="name comes first"):
        parse_variant("scheduler=chunked")
    with pytest.raises(ConfigError, match="unknown config key 'max_num_seq'"):
        parse_variant("x max_num_seq=4")
    with pytest.raises(ConfigError, match="unique"):
        variants_from_args("chunked,chunked", None, None)
    assert [v.name for v in variants_from_args(None, None, None)] == ["static", "continuous", "chunked"]
    with pytest.raises(ConfigError, match="--schedulers ' , ': no scheduler named"):
        variants_from_args(" , ", None, None)  # used to fall back to the default three silently
    with pytest.raises(ConfigError, match="'comparison.csv' is a file the comparison writes"):
        variants_from_args(None, ["comparison.csv scheduler=static"], None)
    from sim.compare.variants import RESERVED_NAMES
    from sim.compare.plots import FIGURES

    assert set(FIGURES) <= RESERVED_NAMES  # every figure name is refused as a variant name


def test_compare_into_an_earlier_comparison_removes_its_stale_variants(tmp_path):
    from typer.testing import CliRunner

    from sim.cli.main import app

    trace = write_trace(tmp_path / "t.csv", [(0.1 * i, 64, 8) for i in range(20)])
    out = tmp_path / "cmp"
    common = ["compare", "--model", "llama-3.1-8b", "--hardware", "h100_sxm", "--quiet", "--out", str(out),
              "--set", f"workload.trace={trace}", "--set", "workload.trace_format=generic",
              "--set", "workload.columns={arrival: arrival_s, input: input, output: output}"]
    r = CliRunner().invoke(app, [*common, "--schedulers", "static,continuous,chunked"])
    assert r.exit_code == 0, r.output
    (out / "continuous" / "mine.txt").write_text("a user's file")
    r = CliRunner().invoke(app, [*common, "--schedulers", "chunked"])
    assert r.exit_code == 0, r.output
    assert not (out / "static").exists()  # only the comparison's own files were there
    assert sorted(p.name for p in (out / "continuous").iterdir()) == ["mine.txt"]  # kept, with a note
    assert (out / "chunked" / "summary.json").is_file()


def test_a_config_file_without_workload_keys_compares_on_the_default_workload(tmp_path):
    """``compare``'s workload is --workload, else the config file's, else 'code' (as
    --help says): moving an unrelated key into a file does not change it."""
    import json

    from typer.testing import CliRunner

    from sim.cli.main import app

    names = {}
    for label, text in (("bare", "exact_steps: false\n"), ("named", "workload: chat\nexact_steps: false\n")):
        cfg = tmp_path / f"{label}.yaml"
        cfg.write_text(text)
        out = tmp_path / label
        r = CliRunner().invoke(app, ["compare", str(cfg), "--schedulers", "chunked", "--quiet", "--out", str(out),
                                     "--set", "workload.num_requests=20"])
        assert r.exit_code == 0, r.output
        names[label] = json.loads((out / "chunked" / "summary.json").read_text())["config"]["workload"]["name"]
    assert names == {"bare": "code", "named": "chat"}


def test_compare_writes_the_winners_launch_command(tmp_path):
    """launch.sh: the variant winning the most metrics that its engine runs as simulated,
    in its engine's flags with the simulated values (kebab flags and aliases set the base)."""
    from typer.testing import CliRunner

    from sim.cli.main import app

    trace = write_trace(tmp_path / "t.csv", [(0.05 * i, 200, 30) for i in range(40)])
    out = tmp_path / "cmp"
    r = CliRunner().invoke(app, [
        "compare", "--model", "llama-3.1-8b", "--hardware", "h100_sxm", "--quiet", "--out", str(out),
        "--set", f"workload.trace={trace}", "--set", "workload.trace_format=generic",
        "--set", "workload.columns={arrival: arrival_s, input: input, output: output}",
        "--max-num-seqs", "48", "--max-model-len", "4096",
        "--variant", "small max-num-batched-tokens=512", "--variant", "big max_num_tokens=4096"])
    assert r.exit_code == 0, r.output
    sh = (out / "launch.sh").read_text()
    report = (out / "report.md").read_text()
    winner = re.search(r"## Launch command of the winner \((\w+), vllm\)", report).group(1)
    tokens = {"small": "512", "big": "4096"}[winner]
    assert f"--max-num-batched-tokens {tokens}" in sh and "--max-num-seqs 48" in sh and "--max-model-len 4096" in sh
    assert "vllm serve meta-llama/Llama-3.1-8B-Instruct" in sh and "NOT the simulated" not in sh
    assert f"launch command of the winner, {winner}" in r.output


def test_the_report_names_a_deployment_only_when_every_variant_shares_it(tmp_path):
    """The context line described the first variant's replicas as if every variant's."""
    from typer.testing import CliRunner

    from sim.cli.main import app

    trace = write_trace(tmp_path / "t.csv", [(0.05 * i, 200, 20) for i in range(20)])
    base = ["compare", "--model", "llama-3.1-8b", "--hardware", "h100_sxm", "--quiet",
            "--set", f"workload.trace={trace}", "--set", "workload.trace_format=generic",
            "--set", "workload.columns={arrival: arrival_s, input: input, output: output}", "--max-model-len", "4096"]
    for name, variants, want in (
            ("mixed", ["--variant", "b num_replicas=3", "--variant", "a scheduler=chunked"],
             "on **h100_sxm (the deployment differs per variant)**"),
            ("same", ["--variant", "b num_replicas=3", "--variant", "a num_replicas=3 scheduler=static"],
             "on **h100_sxm, 3 replicas**")):
        r = CliRunner().invoke(app, [*base, "--out", str(tmp_path / name), *variants])
        assert r.exit_code == 0, r.output
        assert want in (tmp_path / name / "report.md").read_text()


def test_default_variants_of_an_engine_are_its_own_modes():
    """With an engine preset, the default variants are the modes that engine offers (its
    enable_chunked_prefill on / off), not static and continuous, which none does."""
    from sim.compare.variants import variants_from_args

    assert [(v.name, v.overrides) for v in variants_from_args(None, None, None, engine="sglang")] == [
        ("prefill_first", {"scheduler": "prefill_first"}), ("prefill_first_whole", {"scheduler": "prefill_first_whole"})]
    assert [v.name for v in variants_from_args(None, None, None, engine="vllm")] == ["chunked", "mixed"]
    assert [v.name for v in variants_from_args(None, None, None)] == ["static", "continuous", "chunked"]
    assert [v.name for v in variants_from_args("static", None, None, engine="vllm")] == ["static"]


def test_a_variant_that_changes_the_engine_gets_its_defaults():
    """A variant ``engine=X`` runs with X's preset, as ``run --engine X`` does: the base's
    preset-filled keys are not carried over as if the user had set them (keys the user
    did set are)."""
    from sim.compare.variants import apply_variant

    base = build_config(overrides={"model": "llama-3.1-8b", "hardware": "h100_sxm", "engine": "vllm",
                                   "max_num_batched_tokens": 4096})
    for engine in ("sglang", "trtllm", "vllm"):
        got = apply_variant(base, Variant(engine, {"engine": engine}))
        alone = build_config(overrides={"model": "llama-3.1-8b", "hardware": "h100_sxm", "engine": engine,
                                        "max_num_batched_tokens": 4096})
        assert got.model_dump() == alone.model_dump(), engine
    sg = apply_variant(base, Variant("s", {"engine": "sglang"}))
    assert (sg.scheduler, sg.block_size, sg.max_num_batched_tokens) == ("prefill_first", 1, 4096)
    # a batching mode the base's preset-filled admission rule would refuse, given as a variant
    trt = build_config(overrides={"model": "llama-3.1-8b", "hardware": "h100_sxm", "engine": "trtllm"})
    static = apply_variant(trt, Variant("static", {"scheduler": "static"}))
    assert static.scheduler == "static" and static.engine == "trtllm"
    # ... while one the user gave is still checked
    given = build_config(overrides={"model": "llama-3.1-8b", "hardware": "h100_sxm", "engine": "trtllm"},
                         set_args=["capacity_scheduler_policy=max_utilization"])
    with pytest.raises(ConfigError, match="has no effect with scheduler 'static'"):
        apply_variant(given, Variant("static", {"scheduler": "static"}))


def test_the_settings_column_names_a_disaggregation_key_set_against_its_default():
    """A variant's decode_router against another's default (None) is a difference the
    report's settings column shows."""
    from types import SimpleNamespace

    from sim.compare.report import _differing_config

    dis = {"num_prefill_workers": 1, "num_decode_workers": 2, "decode_router": None, "prefill": {}, "decode": {}}
    a = SimpleNamespace(summary={"config": {"model": "m", "disaggregation": dis}})
    b = SimpleNamespace(summary={"config": {"model": "m", "disaggregation": {**dis, "decode_router": "random"}}})
    assert _differing_config({"def": a, "drand": b}) == {"def": "disaggregation.decode_router=None",
                                                         "drand": "disaggregation.decode_router=random"}
