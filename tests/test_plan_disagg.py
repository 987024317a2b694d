"""servesim plan with disaggregated (xPyD) candidates: shapes and ratios, GPUs
per unit, replicas as whole xPyD units, the agg-vs-disagg answer with its
margin, the GPU budget, and one small end-to-end plan where a decode-bound
load makes 1P2D serve twice the rate of 2P1D."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

import sim.sweep.plan as plan_mod
from sim.config import build_config
from sim.errors import ConfigError
from sim.sweep.plan import (SLO, Candidate, PlanSettings, make_candidates, make_disagg_candidates,
                            parse_disagg_shapes, plan_candidate, pool_parallel_options, ratio_shapes)
from sim.sweep.plan_report import agg_vs_disagg_line, answer_line, plan_markdown, plan_table

DATA = Path(__file__).parent / "data"
MODEL, GPU = str(DATA / "test_model.json"), str(DATA / "test_gpu.yaml")  # test GPU: $1 per GPU-hour


def test_parse_shapes_and_ratios():
    assert parse_disagg_shapes("1P1D, 1p2d,2P1D,1P2D") == [(1, 1), (1, 2), (2, 1)]
    assert parse_disagg_shapes("auto") == "auto"
    for bad in ("1P", "0P1D", "xPyD", "1D2P"):
        with pytest.raises(ConfigError, match=r"--disagg: .* is not a shape xPyD"):
            parse_disagg_shapes(bad)
    # every ratio in lowest terms within 6 GPUs at TP 1 prefill, TP 2 decode: x + 2y <= 6
    # (2, 2) is left out: 2P2D = two 1P1D replicas; (1, 3) would need 7 GPUs
    assert ratio_shapes(1, 2, 6) == [(1, 1), (1, 2), (2, 1), (3, 1), (4, 1)]
    assert (4, 1) not in ratio_shapes(1, 2, 5) and ratio_shapes(4, 4, 7) == []


def test_disagg_candidates_gpus_and_columns():
    cs = make_disagg_candidates(["h100_sxm"], [(1, 2), (2, 1)], [2], [4, 8], ["chunked"])
    assert [c.name for c in cs] == ["h100_sxm 1P2D P-tp2 D-tp4 chunked", "h100_sxm 2P1D P-tp2 D-tp4 chunked",
                                    "h100_sxm 1P2D P-tp2 D-tp8 chunked", "h100_sxm 2P1D P-tp2 D-tp8 chunked"]
    assert [c.num_gpus for c in cs] == [1 * 2 + 2 * 4, 2 * 2 + 4, 2 + 2 * 8, 2 * 2 + 8]
    assert cs[0].columns == {"hardware": "h100_sxm", "scheduler": "chunked", "kind": "disagg", "prefill_workers": 1,
                             "prefill_tp": 2, "decode_workers": 2, "decode_tp": 4}
    agg = make_candidates(["h100_sxm"], [4])[0]
    assert agg.kind == "agg" and agg.num_gpus == 4 and "prefill_workers" not in agg.columns
    with pytest.raises(ConfigError, match="needs a GPU budget; give --max-gpus"):
        make_disagg_candidates(["h100_sxm"], "auto", [1], [1])


def _knee(c: Candidate) -> float:
    """Decode-bound stub: one agg TP-1 replica sustains 2 req/s, an xPyD unit 4 req/s per
    decode worker (p99 TTFT = 100 / (knee + 0.2 − load) ms ≤ 500 up to load = knee)."""
    return 4.0 * c.columns["decode_workers"] if c.is_disagg else 2.0


def fake_simulate(base, c, rate, replicas=1, goodput=None, scale=1):
    load, knee = rate / replicas, _knee(c) + 0.2
    return {"status": "ok", "stable": True, "p99_ttft_ms": 100.0 / (knee - load) if load < knee else math.inf,
            "median_ttft_ms": 1.0, "median_tpot_ms": 1.0, "p99_tpot_ms": 2.0, "completed": 100,
            "total_output_tokens": 20_000, "output_throughput": 200.0 * load, "candidate": c.name,
            **c.columns, "num_replicas": replicas, "workload.request_rate": rate}


def _stub_plan(monkeypatch, target=15.0, max_gpus=None):
    monkeypatch.setattr(plan_mod, "simulate", fake_simulate)
    base = build_config(overrides={"model": MODEL, "hardware": GPU, "max_model_len": 1024})
    s = PlanSettings([SLO("p99_ttft_ms", "<=", 500.0)], target_rate=target, rel_tol=0.01, start_rate=1.0,
                     max_gpus=max_gpus)
    cands = make_candidates([GPU], [1]) + make_disagg_candidates([GPU], [(2, 1), (1, 2)], [1], [1])
    plans = [plan_candidate(base, c, s) for c in cands]
    return s, plans, plan_table(plans, s)


def test_decode_heavy_load_ranks_1p2d_first_with_the_margin(monkeypatch):
    """By hand, target 15 req/s: agg 2 req/s per GPU -> 8 replicas = 8 GPUs, $8/hour;
    1P2D 8 req/s per 3-GPU unit -> 2 units = 6 GPUs, $6/hour; 2P1D 4 req/s per 3-GPU
    unit -> 4 units = 12 GPUs, $12/hour. 1P2D is cheapest, $2/hour (25 %) under agg."""
    s, plans, table = _stub_plan(monkeypatch)
    assert list(table["candidate"]) == ["test_gpu 1P2D P-tp1 D-tp1", "test_gpu tp1", "test_gpu 2P1D P-tp1 D-tp1"]
    assert list(table["replicas"]) == [2, 8, 4] and list(table["num_gpus"]) == [6, 8, 12]
    assert list(table["cost_per_hour_usd"]) == pytest.approx([6.0, 8.0, 12.0])
    assert list(table["kind"]) == ["disagg", "agg", "disagg"]
    assert list(table["decode_workers"][[0, 2]]) == [2, 1] and math.isnan(table["decode_workers"][1])
    # the verification simulated 2 whole units: 2 prefill + 4 decode workers at 15 req/s
    p = next(p for p in plans if p.candidate.name.startswith("test_gpu 1P2D"))
    assert p.target_row["phase"] == "verify" and p.target_row["num_replicas"] == 2
    assert answer_line(table, s).startswith("Cheapest for 15 req/s: 2 × (test_gpu 1P2D P-tp1 D-tp1) = 6 GPUs, "
                                            "$6.00/hour")
    assert agg_vs_disagg_line(table, s) == (
        "Disaggregated is cheaper for these SLOs: test_gpu 1P2D P-tp1 D-tp1 at $6.00/hour vs the best "
        "aggregated, test_gpu tp1, at $8.00/hour: $2.00/hour less (25%).")
    md = plan_markdown(table, s, {"model": "test"}, [])
    assert "| kind | prefill_workers | prefill_tp | decode_workers | decode_tp |" in md
    assert "$2.00/hour less (25%)" in md


def test_gpu_budget_makes_a_candidate_unmet_or_infeasible(monkeypatch):
    s, plans, table = _stub_plan(monkeypatch, max_gpus=10)  # 2P1D needs 4 units = 12 GPUs
    row = table.set_index("candidate").loc["test_gpu 2P1D P-tp1 D-tp1"]
    assert row["status"] == "target_unmet"
    assert row["reason"].startswith("needs >= 4 replicas at ") and row["reason"].endswith(
        " req/s each = 12 GPUs, over the budget --max-gpus 10")
    assert table["rank"].tolist()[:2] == [1, 2] and table["candidate"][0] == "test_gpu 1P2D P-tp1 D-tp1"
    # 3 req/s within 2 GPUs: agg needs 2 replicas (2 GPUs); one xPyD unit already needs 3
    s2, plans2, table2 = _stub_plan(monkeypatch, target=3.0, max_gpus=2)
    r2 = table2.set_index("candidate").loc["test_gpu 1P2D P-tp1 D-tp1"]
    assert r2["status"] == "infeasible" and r2["reason"] == "one replica needs 3 GPUs, over the budget --max-gpus 2"
    assert agg_vs_disagg_line(table2, s2) == (
        "Only aggregated candidates meet the SLOs (best: test_gpu tp1, $2.00/hour); no disaggregated candidate "
        "could run (reasons below).")  # (every one is over the GPU budget: it did not miss, it never ran)


def test_run_plan_decode_bound_1p2d_serves_twice_2p1d(tmp_path):
    """Decode-bound on the tiny model: 64 output tokens per 128-token prompt, at most 4
    running sequences per worker, arrivals evenly spaced. A decode worker then
    finishes at most 4 requests per 64 decode steps, so 1P2D sustains twice the rate
    of 2P1D (same 3 GPUs, same $/hour): 1P2D ranks first of the two."""
    from sim.sweep.plan_report import run_plan

    base = build_config(overrides={
        "model": MODEL, "hardware": GPU, "max_model_len": 1024, "max_num_seqs": 4, "scheduler": "chunked",
        "workload.input_len": {"dist": "fixed", "value": 128}, "workload.output_len": {"dist": "fixed", "value": 64},
        "workload.num_requests": 100, "workload.request_rate": 20.0, "workload.arrival": "constant"})
    s = PlanSettings([SLO("p99_ttft_ms", "<=", 20.0)], rel_tol=0.1)
    cands = make_disagg_candidates([GPU], [(2, 1), (1, 2)], [1], [1], ["chunked"])
    table, plans = run_plan(base, cands, s, tmp_path, workers=1, quiet=True, context={"model": "test"})
    assert list(table["candidate"]) == ["test_gpu 1P2D P-tp1 D-tp1 chunked", "test_gpu 2P1D P-tp1 D-tp1 chunked"]
    r12, r21 = table["max_rate_per_replica"]
    assert r12 == pytest.approx(2 * r21, rel=0.15)
    assert list(table["cost_per_hour_usd"]) == [3.0, 3.0]  # one 3-GPU unit each at $1
    res = pd.read_csv(tmp_path / "results.csv")
    assert set(res["kind"]) == {"disagg"} and set(res["num_gpus"]) == {3}
    assert "test_gpu 1P2D" in (tmp_path / "plan.md").read_text()


@pytest.mark.parametrize("args,match", [
    (["--disagg", "1P0D"], "--disagg: '1P0D' is not a shape xPyD"),
    (["--decode-tp", "2"], "--decode-tp: sets the pools of disaggregated candidates; add --disagg"),
    (["--disagg", "1P1D", "--decode-tp", "3"], "--decode-tp: 3 is not a power of two"),
    (["--disagg", "auto"], "needs a GPU budget; give --max-gpus"),
    (["--no-agg"], "--no-agg: no candidate left"),
    (["--disagg", "auto", "--max-gpus", "1"], "no prefill:decode shape fits --max-gpus 1"),
    (["--max-gpus", "0"], "--max-gpus: must be >= 1, got 0"),
    (["--disagg", "1P1D", "--vary", "disaggregation.num_decode_workers=1,2"], "plan sets the pools itself"),
    (["--decode-dp", "1,4"], "--decode-dp: sets the pools of disaggregated candidates; add --disagg"),
    (["--disagg", "1P1D", "--decode-dp", "1,4"], "are searched for MoE models; "),
    (["--disagg", "1P1D", "--expert-parallel", "maybe"], "are searched for MoE models; "),
])
def test_cli_plan_disagg_options_are_one_line_errors(tmp_path, args, match):
    import typer
    from typer.testing import CliRunner

    from sim.cli.sweep import plan

    app = typer.Typer()
    app.command()(plan)
    app.command()(lambda: None)
    r = CliRunner().invoke(app, ["plan", "--model", MODEL, "--hardware", GPU, "--slo", "p99_tpot_ms=50", *args,
                                 "--out", str(tmp_path), "--quiet"])
    assert r.exit_code != 0 and match in str(r.exception) and "\n" not in str(r.exception)


def test_a_base_config_disaggregation_is_kept_pool_by_pool_and_replicas_multiply_workers():
    """The base's link settings and pool overrides reach every xPyD candidate (key by
    key inside each pool); 3 replicas of 1P2D are 3 prefill and 6 decode workers;
    an agg candidate drops the base's disaggregation."""
    from sim.compare.variants import apply_variant
    from sim.sweep.plan import _variant

    base = build_config(overrides={"model": MODEL, "hardware": GPU, "max_model_len": 1024, "disaggregation": {
        "num_prefill_workers": 1, "num_decode_workers": 1, "kv_transfer_latency_s": 0.002,
        "decode": {"max_num_seqs": 16, "tensor_parallel_size": 4}}})
    c = make_disagg_candidates([GPU], [(1, 2)], [1], [2])[0]
    cfg = apply_variant(base, _variant(c, 3, base))
    d = cfg.disaggregation
    assert (d.num_prefill_workers, d.num_decode_workers, d.kv_transfer_latency_s) == (3, 6, 0.002)
    assert d.decode == {"max_num_seqs": 16, "tensor_parallel_size": 2} and d.prefill == {"tensor_parallel_size": 1}
    agg = apply_variant(base, _variant(make_candidates([GPU], [2])[0], 3, base))
    assert agg.disaggregation is None and agg.num_replicas == 3 and agg.tensor_parallel_size == 2


def test_moe_pool_parallelism_is_searched_per_pool():
    """Decode pool: DP 1 / 4 x EP off / on (4 options), prefill TP 1 alone. By hand, at
    1P1D: GPUs = 1 (prefill) + TP 1 x DP per decode worker = 2, 2, 5, 5; the names and
    columns say each pool's DP and EP; --disagg auto within 5 GPUs: a DP-4 decode worker
    (4 GPUs) leaves room for 1P1D only, a DP-1 one for every ratio x + y <= 5 in lowest terms."""
    opts = pool_parallel_options([1, 4], [False, True])
    assert opts == [{"data_parallel_size": 1, "enable_expert_parallel": False},
                    {"data_parallel_size": 1, "enable_expert_parallel": True},
                    {"data_parallel_size": 4, "enable_expert_parallel": False},
                    {"data_parallel_size": 4, "enable_expert_parallel": True}]
    assert pool_parallel_options() == [{}] and pool_parallel_options(None, [True]) == [{"enable_expert_parallel": True}]
    cs = make_disagg_candidates(["h100_sxm"], [(1, 1)], [1], [1], pool_parallel={"decode": opts})
    assert [c.name for c in cs] == ["h100_sxm 1P1D P-tp1 D-tp1-dp1", "h100_sxm 1P1D P-tp1 D-tp1-dp1-ep",
                                    "h100_sxm 1P1D P-tp1 D-tp1-dp4", "h100_sxm 1P1D P-tp1 D-tp1-dp4-ep"]
    assert [c.num_gpus for c in cs] == [2, 2, 5, 5]
    assert cs[3].overrides["disaggregation"]["decode"] == {"tensor_parallel_size": 1, "data_parallel_size": 4,
                                                            "enable_expert_parallel": True}
    assert cs[3].overrides["disaggregation"]["prefill"] == {"tensor_parallel_size": 1}
    assert cs[3].columns["decode_dp"] == 4 and cs[3].columns["decode_ep"] is True and "prefill_dp" not in cs[3].columns
    auto = make_disagg_candidates(["h100_sxm"], "auto", [1], [1], max_gpus=5,
                                  pool_parallel={"decode": pool_parallel_options([1, 4])})
    by_dp = {dp: [c.name.split(" ")[1] for c in auto if c.columns["decode_dp"] == dp] for dp in (1, 4)}
    assert by_dp[4] == ["1P1D"]
    assert by_dp[1] == ["1P1D", "1P2D", "1P3D", "1P4D", "2P1D", "2P3D", "3P1D", "3P2D", "4P1D"]
    assert all(c.num_gpus <= 5 for c in auto)


def test_cli_expert_parallel_value_is_a_one_line_error(tmp_path):
    import typer
    from typer.testing import CliRunner

    from sim.cli.sweep import plan

    app = typer.Typer()
    app.command()(plan)
    app.command()(lambda: None)
    r = CliRunner().invoke(app, ["plan", "--model", "mixtral-8x7b", "--hardware", "h100_sxm", "--slo",
                                 "p99_tpot_ms=50", "--disagg", "1P1D", "--expert-parallel", "off,maybe",
                                 "--out", str(tmp_path), "--quiet"])
    assert r.exit_code != 0 and "--expert-parallel: 'maybe' must be on or off" in str(r.exception)


def test_a_disaggregated_winner_gets_the_disaggregated_launch():
    """The answer's launch command is built from the winning candidate itself: a 1P2D
    winner on 2 replicas launches 2 prefill and 4 decode workers (the disaggregated
    launch, which names its pools), not an aggregated ``vllm serve`` of the base."""
    from sim.sweep.plan_report import winner_launch

    base = build_config(overrides={"model": MODEL, "hardware": GPU, "max_model_len": 1024})
    agg, dis = make_candidates([GPU], [1])[0], make_disagg_candidates([GPU], [(1, 2)], [1], [1])[0]
    table = pd.DataFrame([{"candidate": dis.name, "status": "ok", "replicas": 2},
                          {"candidate": agg.name, "status": "ok", "replicas": 5}])
    la = winner_launch(base, table, [agg, dis])
    whats = [w for w, _ in la.parts]  # one command per worker (sim/launch.py), then the proxy
    assert whats[:2] == ["prefill worker 1 of 2", "prefill worker 2 of 2"] and whats[5] == "decode worker 4 of 4"
    assert len(whats) == 7 and whats[6].startswith("the proxy")
    assert all("--data-parallel-size" not in a for _, a in la.parts)
    assert "2 prefill and 4 decode worker(s)" in la.text()
    la_agg = winner_launch(base, table.iloc[::-1].reset_index(drop=True), [agg, dis])
    assert "--data-parallel-size" in la_agg.argv and "5" in la_agg.argv


def test_equivalent_candidates_and_list_options():
    """EP on a 1-GPU worker is EP off: --expert-parallel off,on at TP 1 gives one candidate per
    shape, not four identical ones; on a 2-GPU decode worker EP stays a choice. List options:
    an empty item is refused, a non-number says so, on/off and true/false both read, and
    --expert-parallel off on a dense model is a no-op rather than an error."""
    from sim.cli.sweep import _pool_parallel, _split
    from sim.sweep.plan import drop_equivalent

    opts = pool_parallel_options(None, [False, True])
    cs = make_disagg_candidates(["h100_sxm"], [(1, 1)], [1], [1, 2], pool_parallel={"prefill": opts, "decode": opts})
    kept, dropped = drop_equivalent(cs)
    assert [c.name for c in kept] == ["h100_sxm 1P1D P-tp1 D-tp1", "h100_sxm 1P1D P-tp1 D-tp2",
                                      "h100_sxm 1P1D P-tp1 D-tp2-ep"]
    assert dropped == [("h100_sxm 1P1D P-tp1 D-tp1-ep", "h100_sxm 1P1D P-tp1 D-tp1"),
                       ("h100_sxm 1P1D P-tp1-ep D-tp1", "h100_sxm 1P1D P-tp1 D-tp1"),
                       ("h100_sxm 1P1D P-tp1-ep D-tp1-ep", "h100_sxm 1P1D P-tp1 D-tp1"),
                       ("h100_sxm 1P1D P-tp1-ep D-tp2", "h100_sxm 1P1D P-tp1 D-tp2"),
                       ("h100_sxm 1P1D P-tp1-ep D-tp2-ep", "h100_sxm 1P1D P-tp1 D-tp2-ep")]
    # the base's DP 2 makes a TP 1 worker 2 GPUs: EP there is a real choice
    two = make_disagg_candidates(["h100_sxm"], [(1, 1)], [1], [1], pool_parallel={"decode": opts},
                                 base_dp={"prefill": 1, "decode": 2})
    assert len(drop_equivalent(two)[0]) == 2
    with pytest.raises(ConfigError, match=r"^--decode-dp: '1,,2' has an empty item"):
        _split("1,,2", "decode-dp", int, minimum=1)
    with pytest.raises(ConfigError, match=r"^--decode-dp: 'abc' is not a whole number"):
        _split("abc", "decode-dp", int, minimum=1)
    assert _split("1, 2 4", "tp", int) == [1, 2, 4]
    moe = build_config(overrides={"model": "mixtral-8x7b", "hardware": "h100_sxm"})
    on = _pool_parallel(moe, "1P1D", None, None, "true,false", pool_parallel_options)
    assert on == _pool_parallel(moe, "1P1D", None, None, "on,off", pool_parallel_options)
    dense = build_config(overrides={"model": MODEL, "hardware": GPU})
    assert _pool_parallel(dense, "1P1D", None, None, "off", pool_parallel_options) == {}
    with pytest.raises(ConfigError, match="are searched for MoE models"):
        _pool_parallel(dense, "1P1D", None, None, "off,on", pool_parallel_options)
