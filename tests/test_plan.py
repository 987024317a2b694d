"""servesim plan: SLO parsing, the rate bisection on stubs with a known
boundary, the replica count and cost for a target rate, infeasible candidates,
stability, and one small end-to-end plan on the tiny test model."""

from __future__ import annotations

import base64
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import sim.sweep.plan as plan_mod
from sim.config import build_config
from sim.errors import ConfigError
from sim.sweep.plan import (SLO, Candidate, PlanSettings, check, find_max_rate, make_candidates, parse_slos,
                      plan_candidate)
from sim.sweep.plan_report import plan_table, run_plan
from sim.results.stability import assess_stability

DATA = Path(__file__).parent / "data"
MODEL, GPU = str(DATA / "test_model.json"), str(DATA / "test_gpu.yaml")


def ttft_stub(knee: float):
    """p99 TTFT = 100 / (knee − rate) ms: with SLO 500 ms the boundary is knee − 0.2."""
    def evaluate(rate: float) -> dict:
        return {"p99_ttft_ms": 100.0 / (knee - rate) if rate < knee else math.inf, "stable": True}
    return evaluate


# ------------------------------------------------------------------ SLOs
def test_parse_slos():
    slos = parse_slos(["p99_ttft_ms=500 p99_tpot_ms<=50", "goodput_fraction=0.9"], goodput={"ttft": 0.5})
    assert slos == [SLO("p99_ttft_ms", "<=", 500.0), SLO("p99_tpot_ms", "<=", 50.0), SLO("goodput_fraction", ">=", 0.9)]
    with pytest.raises(ConfigError, match="unknown metric 'p99_ttft'"):
        parse_slos(["p99_ttft=500"])
    with pytest.raises(ConfigError, match="needs --goodput"):
        parse_slos(["goodput_fraction>=0.9"])
    with pytest.raises(ConfigError, match="not a number"):
        parse_slos(["p99_ttft_ms=fast"])
    # a floor on a latency (or a cap on throughput) would invert the rate search
    with pytest.raises(ConfigError, match=r"p99_ttft_ms can only have a cap \(<=\).*p99_ttft_ms<=100"):
        parse_slos(["p99_ttft_ms>=100"])
    with pytest.raises(ConfigError, match=r"goodput_fraction can only have a floor \(>=\)"):
        parse_slos(["goodput_fraction<=0.9"], goodput={"ttft": 0.5})
    with pytest.raises(ConfigError, match=r"in \[0, 1\]"):
        parse_slos(["goodput_fraction>=1.5"], goodput={"ttft": 0.5})
    # throughput rises with load: a floor would make the search halve the rate forever
    for slo in ("request_throughput>=10", "output_throughput=2500", "request_goodput>=8"):
        with pytest.raises(ConfigError, match=r"rises with the load.*--target-rate"):
            parse_slos([slo], goodput={"ttft": 1.0})


def test_check_reports_every_reason():
    slos = [SLO("p99_ttft_ms", "<=", 500.0), SLO("goodput_fraction", ">=", 0.9)]
    assert check({"p99_ttft_ms": 400.0, "goodput_fraction": 0.95, "stable": True}, slos) == []
    why = check({"p99_ttft_ms": 600.0, "goodput_fraction": 0.5, "stable": False, "stability_reason": "grows"}, slos)
    assert why == ["unstable: grows", "p99_ttft_ms = 600 > 500", "goodput_fraction = 0.5 < 0.9"]
    assert check({"status": "infeasible", "reason": "does not fit"}, slos) == ["infeasible: does not fit"]


# ------------------------------------------------------------------ bisection
@pytest.mark.parametrize("knee,start", [(10.0, 1.0), (10.0, 37.0), (0.3, 4.0), (250.0, 1.0)])
def test_bisection_finds_known_threshold(knee, start):
    boundary = knee - 0.2  # 100 / (knee - r) = 500
    res = find_max_rate(ttft_stub(knee), [SLO("p99_ttft_ms", "<=", 500.0)], start_rate=start, rel_tol=0.02)
    assert boundary * (1 - 0.02) <= res.max_rate <= boundary
    assert all(e.passed == (e.rate <= boundary) for e in res.evals)
    assert len(res.evals) <= 20


def test_bisection_respects_stability():
    def evaluate(rate):  # latency fine everywhere, but the queue grows above 7 req/s
        return {"p99_ttft_ms": 1.0, "stable": rate <= 7.0, "stability_reason": "queue grows"}

    res = find_max_rate(evaluate, [SLO("p99_ttft_ms", "<=", 500.0)], start_rate=2.0, rel_tol=0.01)
    assert 7.0 * 0.99 <= res.max_rate <= 7.0


def test_bisection_no_rate_and_cap():
    never = find_max_rate(lambda r: {"p99_ttft_ms": 900.0, "stable": True}, [SLO("p99_ttft_ms", "<=", 500.0)],
                          start_rate=1.0, min_rate=0.1)
    assert never.max_rate == 0 and "fails even at" in never.reason and "p99_ttft_ms = 900 > 500" in never.reason
    always = find_max_rate(lambda r: {"p99_ttft_ms": 1.0, "stable": True}, [SLO("p99_ttft_ms", "<=", 500.0)],
                           start_rate=1.0, max_rate=20.0)
    assert always.max_rate == 20.0 and "highest rate tried" in always.reason


# ------------------------------------------------------------------ replicas and cost
def fake_simulate(base, c, rate, replicas=1, goodput=None, scale=1):
    """One replica sustains 4 req/s (p99 TTFT 100 / (4.2 − load) ms ≤ 500 up to load 4)."""
    load = rate / replicas
    return {"status": "ok", "stable": True, "p99_ttft_ms": 100.0 / (4.2 - load) if load < 4.2 else math.inf,
            "median_ttft_ms": 1.0, "median_tpot_ms": 1.0, "p99_tpot_ms": 2.0, "completed": 100 * scale,
            "total_output_tokens": 20_000, "output_throughput": 200.0 * load, "candidate": c.name,
            **c.overrides, "num_replicas": replicas, "workload.request_rate": rate, "requests_scale": scale}


def short_runs_simulate(judged_at: int):
    """fake_simulate whose runs above 2 req/s are too short to judge below ``judged_at``
    times the workload's requests (then stable up to 4 req/s); records each call's scale."""
    calls = []

    def sim(base, c, rate, replicas=1, goodput=None, scale=1):
        calls.append((rate, replicas, scale))
        row = fake_simulate(base, c, rate, replicas, goodput, scale)
        if rate / replicas > 2.0 and scale < judged_at:
            row.update(stable=False, stability_reason="not judged: the arrival window (9.0 s) is shorter than "
                                                       "twice the start-up transient")
        return row
    return sim, calls


def test_a_run_too_short_to_judge_is_extended_until_judged(monkeypatch):
    base = build_config(overrides={"model": MODEL, "hardware": GPU, "max_model_len": 1024,
                                   "workload.num_requests": 100})
    c = Candidate("test tp2", {"hardware": GPU, "tensor_parallel_size": 2})
    slos = [SLO("p99_ttft_ms", "<=", 500.0)]
    sim, calls = short_runs_simulate(judged_at=4)
    monkeypatch.setattr(plan_mod, "simulate", sim)
    row = plan_mod.judged_run(base, c, 3.0, slos)
    assert row["stable"] and row["requests_scale"] == 4 and row["completed"] == 400
    assert calls == [(3.0, 1, 1), (3.0, 1, 2), (3.0, 1, 4)]
    # never past max_scale: still not judged, the last run is the answer (and fails)
    calls.clear()
    row = plan_mod.judged_run(base, c, 3.0, slos, max_scale=2)
    assert not row["stable"] and row["requests_scale"] == 2 and calls == [(3.0, 1, 1), (3.0, 1, 2)]
    # a run that fails an SLO anyway is not extended
    calls.clear()
    row = plan_mod.judged_run(base, c, 3.0, [SLO("p99_ttft_ms", "<=", 50.0)])
    assert row["requests_scale"] == 1 and calls == [(3.0, 1, 1)]
    # the plan: without extension the search stops at 2 req/s, with it the capacity is found
    # (4 req/s) and the target's replicas are verified with the deciding run's requests
    s = PlanSettings(slos, target_rate=10.0, rel_tol=0.01, start_rate=1.0, max_request_scale=1)
    assert 1.99 <= plan_candidate(base, c, s).max_rate <= 2.0
    calls.clear()
    s = PlanSettings(slos, target_rate=10.0, rel_tol=0.01, start_rate=1.0)
    p = plan_candidate(base, c, s)
    assert 4.0 * 0.99 <= p.max_rate <= 4.0 and p.replicas == 3
    assert calls[-1] == (10.0, 3, 4) and p.target_row["requests_scale"] == 4


def test_extension_stops_where_the_workload_cannot_grow(monkeypatch):
    base = build_config(overrides={"model": MODEL, "hardware": GPU, "max_model_len": 1024,
                                   "workload.num_requests": 100})
    c = Candidate("test tp2", {"hardware": GPU, "tensor_parallel_size": 2})
    sim, calls = short_runs_simulate(judged_at=4)

    def capped(base, c, rate, replicas=1, goodput=None, scale=1):  # a trace of 100 requests
        row = sim(base, c, rate, replicas, goodput, scale)
        row["completed"] = 100
        return row
    monkeypatch.setattr(plan_mod, "simulate", capped)
    row = plan_mod.judged_run(base, c, 3.0, [SLO("p99_ttft_ms", "<=", 500.0)])
    assert row["requests_scale"] == 1 and not row["stable"] and len(calls) == 2


def test_replicas_and_cost_for_target(monkeypatch):
    monkeypatch.setattr(plan_mod, "simulate", fake_simulate)
    base = build_config(overrides={"model": MODEL, "hardware": GPU, "max_model_len": 1024})
    s = PlanSettings([SLO("p99_ttft_ms", "<=", 500.0)], target_rate=10.0, rel_tol=0.01, start_rate=1.0)
    good = Candidate("test tp2", {"hardware": GPU, "tensor_parallel_size": 2})
    bad = Candidate("test tp4 tiny", {"hardware": GPU, "tensor_parallel_size": 4, "gpu_memory_utilization": 0.002})
    odd = Candidate("test tp3", {"hardware": GPU, "tensor_parallel_size": 3})
    plans = [plan_candidate(base, c, s) for c in (bad, good, odd)]
    p = plans[1]
    assert p.status == "ok" and 4.0 * 0.99 <= p.max_rate <= 4.0
    assert p.replicas == 3  # ceil(10 / 4)
    assert p.target_row["phase"] == "verify" and p.target_row["num_replicas"] == 3
    assert plans[0].status == "infeasible" and "does not fit" in plans[0].reason
    assert plans[2].status == "infeasible" and "power of two" in plans[2].reason
    table = plan_table(plans, s)
    assert list(table["candidate"]) == ["test tp2", "test tp4 tiny", "test tp3"]
    assert table["rank"].iloc[0] == 1 and table["rank"].iloc[1:].isna().all()  # infeasible: not ranked
    row = table.iloc[0]
    assert row["num_gpus"] == 6 and row["cost_per_hour_usd"] == pytest.approx(6.0)  # 3 × TP 2 × $1
    # $6/h over 10 req/s × 200 output tokens per request × 3600 s
    assert row["usd_per_million_output_tokens"] == pytest.approx(6.0 / (10 * 200 * 3600) * 1e6)
    # with only 1 or 2 replicas allowed the target cannot be met
    s2 = PlanSettings(s.slos, target_rate=10.0, replicas=[1, 2], rel_tol=0.01, start_rate=1.0)
    p2 = plan_candidate(base, good, s2)
    assert p2.status == "target_unmet" and "needs >= 3 replicas" in p2.reason


def test_make_candidates():
    cs = make_candidates(["h100_sxm", "h200_sxm"], [2, 4], ["chunked", "continuous"], {"max_num_seqs": [64, 128]})
    assert len(cs) == 16
    assert cs[0].name == "h100_sxm tp2 chunked max_num_seqs=64"
    assert cs[0].overrides == {"hardware": "h100_sxm", "tensor_parallel_size": 2, "scheduler": "chunked",
                               "max_num_seqs": 64}


# ------------------------------------------------------------------ stability
def _run(arrivals, first_sched, steps_n, step_t, service_s=None):
    n = len(arrivals)
    req = {"is_warmup": np.zeros(n), "status": np.zeros(n), "arrival_time_s": np.asarray(arrivals, float),
           "first_scheduled_time_s": np.asarray(first_sched, float)}
    if service_s is not None:
        req["finish_time_s"] = req["first_scheduled_time_s"] + service_s
    steps = {"start_time_s": np.asarray(step_t, float), "step_time_s": np.ones(len(step_t)),
             "num_running_seqs": np.asarray(steps_n, float), "num_waiting_reqs": np.zeros(len(step_t))}
    return req, steps


def test_stability_flat_vs_growing():
    t = np.arange(30.0)  # one arrival per second, window 0..29 s, thirds of 9.67 s
    flat = assess_stability(*_run(t, t + 0.05, [5.0] * 30, t))
    assert flat["stable"] and flat["in_system_first"] == pytest.approx(5.0) and flat["queue_last_ms"] == pytest.approx(50)
    grow = assess_stability(*_run(t, t + t * 0.1, list(t), t))  # backlog grows linearly
    assert not grow["stable"]
    assert "requests in system grow" in grow["stability_reason"] and "queueing time grows" in grow["stability_reason"]
    assert flat["offered_rate"] == pytest.approx(29 / 29)


def test_stability_skips_the_start_up_transient():
    """1 req/s, each in service for 12 s: the system fills over the first 12 s
    (N = 1, 2, ..., 12) and then holds 12. Judged from the first send this ramp
    looks like growth (thirds of 29/3 s: N 5.3 → 12); after the 12 s transient
    both thirds hold N = 12."""
    t = np.arange(30.0)
    ramp = np.minimum(t + 1, 12.0)
    naive = assess_stability(*_run(t, t, ramp, t))  # no finish times: no transient known
    assert not naive["stable"] and naive["in_system_first"] == pytest.approx((45 + 10 * 2 / 3) / (29 / 3))
    r = assess_stability(*_run(t, t, ramp, t, service_s=12.0))
    assert r["stable"] and r["stability_reason"] == "" and r["transient_s"] == pytest.approx(12.0)
    assert r["in_system_first"] == pytest.approx(12.0) and r["in_system_last"] == pytest.approx(12.0)
    # Overload: bounded service time, a backlog that keeps growing: still unstable.
    grow = assess_stability(*_run(t, t, list(2 * t), t, service_s=12.0))
    assert not grow["stable"] and "requests in system grow" in grow["stability_reason"]
    # A window shorter than twice the transient cannot be judged: not called stable.
    short = assess_stability(*_run(t[:20], t[:20], ramp[:20], t[:20], service_s=12.0))
    assert not short["stable"] and short["stability_reason"].startswith("not judged")


# ------------------------------------------------------------------ end to end
def test_run_plan_tiny_model(tmp_path):
    base = build_config(overrides={"model": MODEL, "hardware": GPU, "max_model_len": 1024,
                                   "num_gpu_blocks_override": 1024,
                                   "workload.input_len": {"dist": "fixed", "value": 512},
                                   "workload.output_len": {"dist": "fixed", "value": 8},
                                   "workload.num_requests": 40, "workload.request_rate": 50.0})
    s = PlanSettings(parse_slos(["p99_ttft_ms<=3"]), target_rate=400.0, rel_tol=0.1)
    cands = make_candidates([GPU], [1, 2], ["chunked"]) + [Candidate("tp3", {"hardware": GPU,
                                                                             "tensor_parallel_size": 3})]
    table, plans = run_plan(base, cands, s, tmp_path, workers=1, quiet=True, context={"model": "test"})
    assert list(table["status"]) == ["ok", "ok", "infeasible"]
    ok = table[table["status"] == "ok"]
    assert ok["cost_per_hour_usd"].is_monotonic_increasing
    assert (ok["max_rate_per_replica"] * ok["replicas"] >= 400.0 * 0.999).all() or (ok["verified"]).all()
    for f in ("plan.csv", "plan.md", "results.csv", "results.parquet", "pareto.png"):
        assert (tmp_path / f).is_file(), f
    pngs = list((tmp_path / "latency_vs_load").glob("*.png"))
    assert len(pngs) == 2 and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    res = pd.read_csv(tmp_path / "results.csv")
    assert set(res["phase"]) == {"search", "verify"}
    assert "Cheapest for 400 req/s" in (tmp_path / "plan.md").read_text()
    page = (tmp_path / "report.html").read_text()  # the same, one self-contained page
    assert "Cheapest for 400 req/s" in page and "<h1>Capacity plan: test</h1>" in page
    inlined = re.findall(r'<img src="data:image/png;base64,([^"]+)"', page)
    assert len(inlined) == 3 and base64.b64decode(inlined[0]) == (tmp_path / "pareto.png").read_bytes()


def test_cli_plan_positional_slos(tmp_path, monkeypatch):
    import typer
    from typer.testing import CliRunner

    from sim.cli.sweep import plan

    monkeypatch.setattr(plan_mod, "simulate", fake_simulate)
    app = typer.Typer()
    app.command()(plan)
    app.command()(lambda: None)
    r = CliRunner().invoke(app, [
        "plan", "--model", MODEL, "--hardware", GPU, "--tp", "1,2", "--slo", "p99_ttft_ms=500", "p99_tpot_ms<=50",
        "--target-rate", "10", "--set", "max_model_len=1024", "--out", str(tmp_path), "--workers", "1", "--quiet"])
    assert r.exit_code == 0, r.output
    table = pd.read_csv(tmp_path / "plan.csv")
    assert list(table["replicas"]) == [3, 3] and list(table["num_gpus"]) == [3, 6]  # ceil(10 / 4) replicas
    assert list(table["rank"]) == [1, 2]
    assert "Cheapest for 10 req/s: 3 × (test_gpu tp1 chunked) = 3 GPUs, $3.00/hour" in r.output
    assert "p99_tpot_ms <= 50" in (tmp_path / "plan.md").read_text()


def test_cli_plan_without_answer_says_why_on_screen(tmp_path, monkeypatch):
    import typer
    from typer.testing import CliRunner

    from sim.cli.sweep import plan

    monkeypatch.setattr(plan_mod, "simulate", fake_simulate)
    app = typer.Typer()
    app.command()(plan)
    app.command()(lambda: None)
    stale = tmp_path / "latency_vs_load" / "old_candidate.png"  # an earlier plan's figure in the same --out
    stale.parent.mkdir()
    stale.write_bytes(b"png")
    r = CliRunner().invoke(app, [  # p99 TTFT is >= 100 / 4.2 = 23.8 ms at any rate: nothing passes
        "plan", "--model", MODEL, "--hardware", GPU, "--tp", "1,2", "--slo", "p99_ttft_ms=1", "--start-rate", "0.01",
        "--set", "max_model_len=1024", "--out", str(tmp_path), "--workers", "1", "--quiet"])
    assert r.exit_code == 1, r.output  # the answer is "none": exit status 1 (plan --help)
    lines = r.output.splitlines()
    assert "No candidate serves the load within the SLOs." in lines
    for tp in (1, 2):
        assert any(line.startswith(f"  test_gpu tp{tp} chunked (no_rate): ") and "p99_ttft_ms = " in line
                   for line in lines), r.output
    table = pd.read_csv(tmp_path / "plan.csv")
    assert table["rank"].isna().all()  # no candidate serves the load: none is ranked
    assert not stale.exists() and sorted(p.name for p in stale.parent.iterdir()) == [
        "test_gpu_tp1_chunked.png", "test_gpu_tp2_chunked.png"]
    from sim.sweep.plan_report import plan_markdown

    md = plan_markdown(table, PlanSettings([SLO("p99_ttft_ms", "<=", 1.0)]), {}, figures=[])
    assert "## Candidates that cannot serve it" in md and "## Figures" not in md  # no empty heading


def test_cli_plan_mistyped_hardware_is_an_error(tmp_path):
    import typer
    from typer.testing import CliRunner

    from sim.cli.sweep import plan

    app = typer.Typer()
    app.command()(plan)
    app.command()(lambda: None)
    r = CliRunner().invoke(app, ["plan", "--model", MODEL, "--hardware", "h100_sxm,h10", "--slo", "p99_ttft_ms=500",
                                 "--out", str(tmp_path), "--quiet"])
    assert r.exit_code != 0
    assert "--hardware: unknown hardware 'h10'" in str(r.exception) + r.output
    assert not (tmp_path / "plan.csv").exists()


@pytest.mark.parametrize("args, match", [
    (["--tp", "0"], "--tp: '0' must be >= 1"),
    (["--tp", "1,3"], "--tp: 3 is not a power of two"),
    (["--start-rate", "0"], "--start-rate: must be a finite rate > 0 req/s"),
    (["--vary", "foo=1,2"], "--vary: unknown config key 'foo'"),
    # a key with its own option: --tp 1 --vary tensor_parallel_size=2 ran TP 2 only, and
    # --scheduler chunked --vary scheduler=chunked,mixed added mixed
    (["--tp", "1", "--vary", "tensor_parallel_size=1,2"], "--vary tensor_parallel_size: plan has its own option"),
    (["--vary", "scheduler=chunked,mixed"], "give the candidates as --scheduler chunked,mixed"),
    (["--vary", "hardware=h100_sxm"], "give the candidates as --hardware"),
    # it ran on the local pool without a word
    (["--ray-address", "ray://nohost.invalid:1"], "--ray-address ray://nohost.invalid:1: joins a Ray cluster "
                                                  "with --executor ray"),
    (["--slo", "p99_ttft_ms=-1"], "the limit must be a finite number >= 0"),
    (["--max-replicas", "0"], "--max-replicas: must be >= 1"),
    (["--workers", "0"], "--workers: must be >= 1, got 0"),
])
def test_cli_plan_rejects_bad_options(tmp_path, args, match):
    import typer
    from typer.testing import CliRunner

    from sim.cli.sweep import plan

    app = typer.Typer()
    app.command()(plan)
    app.command()(lambda: None)
    r = CliRunner().invoke(app, ["plan", "--model", MODEL, "--hardware", GPU, "--slo", "p99_tpot_ms=50", *args,
                                 "--out", str(tmp_path), "--quiet"])
    assert r.exit_code != 0 and match in str(r.exception)


def test_split_drops_repeats():
    from sim.cli.sweep import _split

    assert _split("2,2,1", "tp", int, minimum=1) == [2, 1]


@pytest.mark.parametrize("opt", ["--target-rate", "--start-rate"])
@pytest.mark.parametrize("value", ["inf", "nan"])
def test_cli_plan_rates_must_be_finite(tmp_path, opt, value):
    import typer
    from typer.testing import CliRunner

    from sim.cli.sweep import plan

    app = typer.Typer()
    app.command()(plan)
    app.command()(lambda: None)
    r = CliRunner().invoke(app, ["plan", "--model", MODEL, "--hardware", GPU, "--slo", "p99_tpot_ms=50", opt, value,
                                 "--out", str(tmp_path), "--quiet"])
    assert r.exit_code != 0 and f"{opt}: must be a finite rate > 0 req/s" in str(r.exception)


def test_repeated_or_nan_limits_are_errors():
    from sim.results.metrics import parse_goodput

    with pytest.raises(ConfigError, match="p99_ttft_ms is given twice"):
        parse_slos(["p99_ttft_ms=1000", "p99_ttft_ms=5"])
    with pytest.raises(ConfigError, match="ttft is given twice"):
        parse_goodput(["ttft:100000 ttft:1"])
    with pytest.raises(ConfigError, match="finite number > 0 ms"):
        parse_goodput(["ttft:nan"])
    assert parse_goodput(["ttft:500 tpot:50"]) == {"ttft": 0.5, "tpot": 0.05}


@pytest.mark.parametrize("sets, match", [
    (["workload.num_requests=50", "workload.max_concurrency=8"], "makes the workload closed-loop"),
    (["workload.trace={trace}"], "is replayed at its own timestamps"),
])
def test_cli_plan_refuses_workloads_that_ignore_the_rate(tmp_path, sets, match):
    """Closed-loop clients and timestamp replay ignore request_rate: the search
    used to double the rate to its cap with identical runs and answer 6,144 req/s."""
    from typer.testing import CliRunner

    from sim.cli.main import app

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input,output\n0.0,64,8\n0.5,64,8\n1.0,64,8\n")
    args = ["plan", "--model", MODEL, "--hardware", GPU, "--slo", "p99_ttft_ms=1000", "--out", str(tmp_path / "o"),
            "--set", "workload.trace_format=generic",
            "--set", "workload.columns={arrival: arrival_s, input: input, output: output}"] if "trace" in sets[0] \
        else ["plan", "--model", MODEL, "--hardware", GPU, "--slo", "p99_ttft_ms=1000", "--out", str(tmp_path / "o")]
    for s in sets:
        args += ["--set", s.format(trace=trace)]
    r = CliRunner().invoke(app, args)  # the app itself: sim.cli.main.main turns the error into a message, exit 2
    assert isinstance(r.exception, ConfigError) and match in str(r.exception)
    assert not (tmp_path / "o" / "results.csv").exists()


def test_short_runs_warn():
    """The run that decided the rate: 100 requests at 5 req/s = 20 s, with a
    4 s transient, spans 5 transients (< 10): warn. 1,000 requests: no warning.
    A run above the rate found that failed only because it was too short to judge
    (every SLO met) names the candidate: its capacity may be higher."""
    from sim.sweep.plan import CandidatePlan
    from sim.sweep.plan_report import short_run_warning

    def plan_with(n, *extra):
        row = {"phase": "search", "passed": True, "workload.request_rate": 5.0, "transient_s": 4.0,
               "completed": n, "num_rejected": 0, "stability_reason": ""}
        return CandidatePlan(Candidate("c", {}), "ok", max_rate=5.0, rows=[row, *extra])

    assert short_run_warning([plan_with(1000)]) is None
    w = short_run_warning([plan_with(100)])
    assert "1 candidate(s) ran for fewer than 10 start-up transients (e.g. c: 5.0 transients long)" in w
    unjudged = {"phase": "search", "passed": False, "workload.request_rate": 6.0, "completed": 1000,
                "stability_reason": "not judged: the arrival window (3.0 s) is shorter than twice the start-up "
                                    "transient", "slo_violations": "unstable: not judged: the arrival window (3.0 s)"}
    w = short_run_warning([plan_with(1000, unjudged)])
    assert w.startswith("1 run(s) too short to judge stability (they stopped the search of c above its rate found, "
                        "with every SLO met: its capacity may be higher)")
    over = dict(unjudged, slo_violations=unjudged["slo_violations"] + "; p99_ttft_ms = 2e+03 > 1000")
    assert "stopped the search" not in short_run_warning([plan_with(1000, over)])


def test_a_vary_value_invalid_for_every_candidate_is_an_error():
    from sim.sweep.plan import check_vary_values

    base = build_config(overrides={"model": MODEL, "hardware": GPU})
    cands = make_candidates([GPU], [1], ["chunked"], {"max_num_seqs": [0, 8]})
    with pytest.raises(ConfigError, match=r"--vary max_num_seqs=0: invalid for every candidate"):
        check_vary_values(base, cands, ["max_num_seqs"])
    check_vary_values(base, make_candidates([GPU], [1], ["chunked"], {"max_num_seqs": [8, 16]}), ["max_num_seqs"])


def test_cli_plan_refuses_workload_keys_in_vary(tmp_path):
    """--vary workload.max_concurrency slipped past the closed-loop check and
    answered 6,144 req/s; workload keys are the base's, never a candidate's."""
    from typer.testing import CliRunner

    from sim.cli.main import app

    for key in ("workload.max_concurrency=4,8", "workload.request_rate=1,2"):
        r = CliRunner().invoke(app, ["plan", "--model", MODEL, "--hardware", GPU, "--slo", "p99_ttft_ms=1000",
                                     "--vary", key, "--out", str(tmp_path / "o")])
        assert isinstance(r.exception, ConfigError) and "plan varies the deployment" in str(r.exception)


def test_plan_refuses_an_unknown_model_or_hardware_and_empty_lists(tmp_path):
    """Not a candidate reported 'infeasible' with exit 0 (fuzz_inputs findings)."""
    import subprocess
    import sys

    for args, expect in ((["--model", "nosuch-model"], "unknown model 'nosuch-model'"),
                         (["--hardware", "nosuch_gpu"], "nosuch_gpu"),
                         (["--hardware", ","], "--hardware: ',' names no value")):
        r = subprocess.run([sys.executable, "-m", "sim", "plan", *args, "--slo", "p99_ttft_ms=1000",
                            "--out", str(tmp_path / "p")], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and expect in r.stderr and "Traceback" not in r.stderr, r.stderr
    from sim.sweep.plan import parse_slos

    with pytest.raises(ConfigError, match="a latency cap of 0 can never be met"):
        parse_slos(["p99_ttft_ms=0"])


def test_cli_plan_price_override_and_launch_command(tmp_path, monkeypatch):
    """--price replaces the profile's $/GPU-hour; the answer's launch command is printed
    and written (launch.sh) with the winner's settings and replica count."""
    import typer
    from typer.testing import CliRunner

    from sim.cli.sweep import plan

    monkeypatch.setattr(plan_mod, "simulate", fake_simulate)
    app = typer.Typer()
    app.command()(plan)
    app.command()(lambda: None)
    r = CliRunner().invoke(app, [
        "plan", "--model", MODEL, "--hardware", GPU, "--tp", "1", "--slo", "p99_ttft_ms=500",
        "--target-rate", "10", "--set", "max_model_len=1024", "--price", f"{GPU}=1.5", "--out", str(tmp_path),
        "--workers", "1", "--quiet"])
    assert r.exit_code == 0, r.output
    table = pd.read_csv(tmp_path / "plan.csv")
    assert list(table["price_per_gpu_hour_usd"]) == [1.5] and list(table["cost_per_hour_usd"]) == [4.5]
    assert "$4.50/hour" in r.output
    sh = (tmp_path / "launch.sh").read_text()
    assert "vllm serve" in sh and "--data-parallel-size 3" in sh and "--max-model-len 1024" in sh
    assert "launch command (vllm;" in r.output and "## Launch command (vllm)" in (tmp_path / "plan.md").read_text()
    bad = CliRunner().invoke(app, ["plan", "--model", MODEL, "--hardware", GPU, "--slo", "p99_ttft_ms=500",
                                   "--price", "h200_sxm=3", "--out", str(tmp_path / "b"), "--quiet"])
    assert "h200_sxm is not a candidate GPU of this plan" in str(bad.exception)


def test_the_base_configs_data_parallel_size_counts_in_gpus_and_cost(tmp_path, monkeypatch):
    """``--set data_parallel_size=2`` in the base config: each replica is TP 1 x DP 2 = 2 GPUs
    (the launch line says --data-parallel-size 2), so 3 replicas for 10 req/s at 4 req/s each
    are 6 GPUs at $1 = $6/h, not 3 GPUs / $3/h (the candidate's overrides alone)."""
    import typer
    from typer.testing import CliRunner

    from sim.cli.sweep import plan
    from sim.sweep.plan import base_data_parallel, make_disagg_candidates

    monkeypatch.setattr(plan_mod, "simulate", fake_simulate)
    app = typer.Typer()
    app.command()(plan)
    app.command()(lambda: None)
    r = CliRunner().invoke(app, [
        "plan", "--model", MODEL, "--hardware", GPU, "--tp", "1", "--slo", "p99_ttft_ms=500", "--target-rate", "10",
        "--set", "max_model_len=1024", "--set", "data_parallel_size=2", "--out", str(tmp_path), "--workers", "1",
        "--quiet"])
    assert r.exit_code == 0, r.output
    table = pd.read_csv(tmp_path / "plan.csv")
    assert list(table["replicas"]) == [3] and list(table["num_gpus"]) == [6]
    assert list(table["cost_per_hour_usd"]) == [6.0]
    # a candidate's own value wins; a disaggregated pool inherits the base's top-level DP unless its pool sets one
    base = build_config(overrides={"model": MODEL, "hardware": GPU, "data_parallel_size": 2,
                                   "disaggregation": {"num_prefill_workers": 1, "num_decode_workers": 1,
                                                      "decode": {"data_parallel_size": 4}}})
    bdp = base_data_parallel(base)
    assert bdp == {"agg": 2, "prefill": 2, "decode": 4}
    own = make_candidates([GPU], [2], None, {"data_parallel_size": [1]}, bdp)[0]
    assert own.num_gpus == 2 and make_candidates([GPU], [2], None, None, bdp)[0].num_gpus == 4
    d = make_disagg_candidates([GPU], [(1, 2)], [1], [2], base_dp=bdp)[0]
    assert d.num_gpus == 1 * 1 * 2 + 2 * 2 * 4  # 1 prefill worker TP1 x DP2 + 2 decode workers TP2 x DP4
