"""``servesim plan`` orchestration and outputs: run every candidate (process pool or
Ray, one candidate per task), then write, in ``--out DIR``:

- ``plan.csv`` / ``plan.md``: one row per candidate, sorted by $/hour (then $ per
  million output tokens); candidates that cannot serve listed with the reason;
- ``results.csv`` / ``results.parquet``: every simulation the plan ran (the sweep
  row format plus ``candidate``, ``phase``, ``passed``, ``slo_violations``);
- ``latency_vs_load/CANDIDATE.png`` and ``pareto.png`` (:mod:`sim.sweep.plan_plots`).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

from sim.config import SimConfig
from sim.sweep.plan import (Candidate, CandidatePlan, PlanSettings, candidate_config, check_models_and_hardware,
                            plan_candidate)

STATUS_ORDER = {"ok": 0, "target_unmet": 1, "no_rate": 2, "infeasible": 3}
LAT_COLS = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms")


@dataclass
class PlanTask:
    base: SimConfig
    candidate: Candidate
    settings: PlanSettings


def _plan_task(t: PlanTask) -> CandidatePlan:
    return plan_candidate(t.base, t.candidate, t.settings)


def _price(c: Candidate, prices: dict[str, float] | None = None) -> float:
    """$/GPU-hour of the candidate's GPU: ``--price`` if given for it, else its profile's."""
    from sim.hardware.profile import get_hardware

    if prices and c.overrides["hardware"] in prices:
        return float(prices[c.overrides["hardware"]])
    try:
        p = get_hardware(c.overrides["hardware"]).price_per_gpu_hour_usd
    except Exception:
        return math.nan
    return float(p) if p is not None else math.nan


def plan_table(plans: list[CandidatePlan], s: PlanSettings):
    """One row per candidate, best first (see module docstring)."""
    import pandas as pd

    rows = []
    for p in plans:
        c, tp = p.candidate, p.candidate.num_gpus  # GPUs of one replica (one xPyD unit; TP x attention DP)
        price = _price(c, s.prices)
        row = {"candidate": c.name, **c.columns, "status": p.status,
               "max_rate_per_replica": p.max_rate if p.status != "infeasible" else math.nan,
               "replicas": p.replicas or math.nan, "num_gpus": p.replicas * tp if p.replicas else math.nan,
               "price_per_gpu_hour_usd": price, "cost_per_hour_usd": math.nan,
               "served_rate": math.nan, "capacity_req_s": math.nan, "usd_per_million_output_tokens": math.nan,
               "verified": False}
        best = [r for r in p.rows if r["phase"] == "search" and r["passed"]
                and r["workload.request_rate"] == p.max_rate]
        row["output_tok_s_per_gpu_at_max_rate"] = best[-1]["output_throughput"] / tp if best else math.nan
        t = p.target_row
        if p.status == "ok" and t is not None:
            served = s.target_rate if s.target_rate is not None else p.max_rate
            cost = p.replicas * tp * price
            # Mean output tokens per request from the one-replica run at the max rate: the same
            # requests for every candidate (same seed), so equal $/hour gives equal $/token.
            src = best[-1] if best else t
            out_per_req = src["total_output_tokens"] / src["completed"] if src.get("completed") else math.nan
            row.update(cost_per_hour_usd=cost, served_rate=served, verified=t["phase"] == "verify",
                       capacity_req_s=p.replicas * p.max_rate,
                       usd_per_million_output_tokens=cost / (served * out_per_req * 3600.0) * 1e6)
            row.update({k: t.get(k, math.nan) for k in LAT_COLS})
        else:
            row.update({k: math.nan for k in LAT_COLS})
        row["num_simulations"] = len(p.rows)
        row["reason"] = p.reason
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["_o"] = df["status"].map(STATUS_ORDER)
    # Cheapest first; at equal cost, the most capacity (replicas × max rate) first.
    df = df.sort_values(["_o", "cost_per_hour_usd", "capacity_req_s", "max_rate_per_replica"],
                        ascending=[True, True, False, False], na_position="last", kind="stable").drop(columns="_o")
    ok = (df["status"] == "ok").tolist()
    # only candidates that serve the load are ranked (they sort first)
    df.insert(0, "rank", [i + 1 if o else math.nan for i, o in enumerate(ok)])
    return df.reset_index(drop=True)


def answer_line(table, s: PlanSettings) -> str:
    ok = table[table["status"] == "ok"] if len(table) else table
    if not len(ok):
        return "No candidate serves the load within the SLOs."
    b = ok.iloc[0]

    def r(v: float) -> str:
        return f"{v:.3g}" if v < 1000 else f"{v:,.0f}"

    rate = f"{s.target_rate:g} req/s" if s.target_rate is not None else f"{r(b['served_rate'])} req/s (one replica)"
    gpus = int(b["num_gpus"])
    return (f"Cheapest for {rate}: {int(b['replicas'])} × ({b['candidate']}) = {gpus} GPU{'s' * (gpus != 1)}, "
            f"${b['cost_per_hour_usd']:.2f}/hour, ${b['usd_per_million_output_tokens']:.3f} per million output "
            f"tokens; max {r(b['max_rate_per_replica'])} req/s per replica; at the served rate p99 TTFT "
            f"{b['p99_ttft_ms']:.0f} ms, p99 TPOT {b['p99_tpot_ms']:.1f} ms"
            + (" (verified by simulation)." if b["verified"] else "."))


def agg_vs_disagg_line(table, s: PlanSettings) -> str:
    """Which kind is cheaper for the SLOs (the best aggregated candidate against the
    best disaggregated one) and by how much; "" when the plan has one kind only.
    With a target rate the basis is $/hour serving it; without, $ per million output
    tokens at each candidate's highest rate (one replica)."""
    if not len(table) or "kind" not in table or table["kind"].nunique() < 2:
        return ""
    key, unit = (("cost_per_hour_usd", "$/hour") if s.target_rate is not None
                 else ("usd_per_million_output_tokens", "$ per million output tokens"))
    ok = table[(table["status"] == "ok") & table[key].notna()].sort_values(key, kind="stable")
    best = {k: ok[ok["kind"] == k].head(1) for k in ("agg", "disagg")}
    have = [k for k in ("agg", "disagg") if len(best[k])]
    label = {"agg": "aggregated", "disagg": "disaggregated"}
    if not have:
        return "Neither aggregated nor disaggregated candidates meet the SLOs."
    if len(have) == 1:
        b = best[have[0]].iloc[0]
        other = "disagg" if have[0] == "agg" else "agg"
        others = table[table["kind"] == other]
        # none of the other kind could run at all (over the GPU budget, infeasible): say that, not "misses"
        verb = "could run" if len(others) and (others["status"] == "infeasible").all() else "does"
        return (f"Only {label[have[0]]} candidates meet the SLOs (best: {b['candidate']}, {_money(b[key], unit)}); "
                f"no {label[other]} candidate {verb} (reasons below).")
    a, d = best["agg"].iloc[0], best["disagg"].iloc[0]
    win, lose = (d, a) if d[key] < a[key] else (a, d)
    if win[key] == lose[key]:
        return (f"Aggregated and disaggregated tie at {_money(a[key], unit)} ({a['candidate']}; "
                f"{d['candidate']}).")
    margin = lose[key] - win[key]
    return (f"{label[win['kind']].capitalize()} is cheaper for these SLOs: {win['candidate']} at "
            f"{_money(win[key], unit)} vs the best {label[lose['kind']]}, {lose['candidate']}, at "
            f"{_money(lose[key], unit)}: {_money(margin, unit)} less ({margin / lose[key]:.0%}).")


def _money(v: float, unit: str) -> str:
    return f"${v:,.2f}/hour" if unit == "$/hour" else f"${v:,.3f} per million output tokens"


def _md_table(df) -> str:
    def cell(v):
        if isinstance(v, float):
            return "" if math.isnan(v) else f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
        return str(v)

    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in df.itertuples(index=False)]
    return "\n".join(lines)


def plan_workload_warnings(plans: list[CandidatePlan]) -> list[str]:
    """What the workload silently changed (skipped or reordered trace rows, clipped
    prompts; :func:`sim.results.warnings.workload_warnings`), from the plan's first run."""
    from sim.results.warnings import workload_warnings

    # the first run stands for all: every candidate's search replays the same workload
    # at the same seed and requests per replica
    first = next((r for p in plans for r in p.rows if r.get("status") == "ok"), {})
    out = workload_warnings(first)
    # the candidates' own (a transferred GPU profile, an engine version): once each
    from sim.results.warnings import run_warning_list

    for p in plans:
        for r in p.rows:
            if r.get("status") == "ok":
                out += [w for w in run_warning_list(r) if w not in out]
    out += plan_headroom(plans)
    return out


def plan_headroom(plans: list[CandidatePlan]) -> list[str]:
    """Per candidate with a rate found and a cross-validated interval
    (``sim/results/intervals.py``, engine presets only): the mean TTFT / TPOT at
    that rate and their nominal 80 % interval, i.e. how far the measured value
    may land from the prediction the rate was chosen on."""
    out = []
    for p in plans:
        if p.max_rate <= 0:
            continue
        r = max((r for r in p.rows if r.get("passed") and r.get("workload.request_rate") == p.max_rate),
                key=lambda r: r.get("num_replicas") or 0, default=None)
        if not r or "mean_ttft_ms_hi" not in r or "mean_tpot_ms_hi" not in r:
            continue
        out.append(f"headroom: {p.candidate.name} at {p.max_rate:,.3g} req/s predicts mean TTFT "
                   f"{r['mean_ttft_ms']:,.0f} ms (80 % interval {r['mean_ttft_ms_lo']:,.0f}-"
                   f"{r['mean_ttft_ms_hi']:,.0f} ms) and mean TPOT {r['mean_tpot_ms']:,.1f} ms "
                   f"({r['mean_tpot_ms_lo']:,.1f}-{r['mean_tpot_ms_hi']:,.1f} ms), from cross-validated "
                   "residuals of measured means (reports/validation): an SLO near the upper end may not hold "
                   "on the real system; a percentile SLO (p99) is judged on the simulated percentile, which "
                   "no measured row checks")
    return out


def plan_markdown(table, s: PlanSettings, context: dict, figures: list[str],
                  warnings: list[str] | None = None, launch=None) -> str:
    cols = ["rank", "candidate", "max_rate_per_replica", "replicas", "capacity_req_s", "num_gpus",
            "cost_per_hour_usd", "usd_per_million_output_tokens", "p99_ttft_ms", "p99_tpot_ms", "verified"]
    if "kind" in table and (table["kind"] == "disagg").any():  # the pools of each replica (xPyD unit)
        cols[2:2] = ["kind", "prefill_workers", "prefill_tp", "decode_workers", "decode_tp"]
        # a searched pool parallelism (MoE: attention DP ranks, expert parallelism)
        cols[7:7] = [k for k in ("prefill_dp", "prefill_ep", "decode_dp", "decode_ep") if k in table]
    ok = table[table["status"] == "ok"]
    bad = table[table["status"] != "ok"]
    slos = ", ".join(map(str, s.slos)) or "none"
    out = [f"# Capacity plan: {context.get('model', '')}", ""]
    out += [f"- {k}: {v}" for k, v in context.items()]
    per_request = ", ".join(f"{k} <= {v * 1e3:g} ms" for k, v in (s.goodput or {}).items())
    out += [f"- SLOs: {slos}" + (f"; per-request goodput SLOs: {per_request}" if per_request else ""),
            f"- target rate: {s.target_rate:g} req/s" if s.target_rate is not None else "- target rate: none",
            f"- search: bisection on the request rate of one replica to within {s.rel_tol:.0%}; a rate passes when "
            "the run is stable (requests in system and queueing time do not grow from the first to the last third "
            "of the arrivals; ≥ 95 % of sent requests complete) and meets every SLO", "",
            *(f"**Warning**: {w}.\n" for w in warnings or ()),
            "## Answer", "", answer_line(table, s), "",
            *(_launch_section(launch) if launch is not None else []),
            *((line, "") if (line := agg_vs_disagg_line(table, s)) else ()),
            "## Candidates that serve the load (cheapest first)", "",
            ("Prices are $/GPU-hour from `hardware_profiles/*.yaml`"
             + (", except " + ", ".join(f"{g} ${p:g}" for g, p in s.prices.items()) + " (`--price`)"
                if s.prices else "") + "; $ per million output tokens at the served rate."),
            "", _md_table(ok[cols]) if len(ok) else "(none)", ""]
    if len(bad):
        out += ["## Candidates that cannot serve it", ""]
        out += [f"- **{r.candidate}** ({r.status}): {r.reason}" for r in bad.itertuples()] + [""]
    if figures:
        out += ["## Figures", ""] + [f"![{Path(f).stem}]({f})" for f in figures] + [""]
    return "\n".join(out)


def _launch_section(launch) -> list[str]:
    return launch.markdown(f"Launch command ({launch.engine})")


def winner_launch(base: SimConfig, table, candidates: list[Candidate]):
    """The launch command of the plan's answer (rank 1): the base config with the
    candidate's own overrides (a disaggregated one keeps its pools) on its replica
    count, hardware-dependent defaults resolved (:func:`sim.launch.launch_command`);
    None when no candidate serves the load."""
    from sim.engine.deployment import build_deployment
    from sim.launch import launch_command

    ok = table[table["status"] == "ok"] if len(table) else table
    if not len(ok):
        return None
    b = ok.iloc[0]
    cand = next(c for c in candidates if c.name == b["candidate"])
    cfg = candidate_config(base, cand, int(b["replicas"]))
    dep = build_deployment(cfg)
    pools = ({p: getattr(dep.disagg, p).cfg.model_dump(mode="json") for p in ("prefill", "decode")}
             if dep.disagg is not None else None)
    return launch_command(dep.cfg.model_dump(mode="json"), pools)


def run_plan(base: SimConfig, candidates: list[Candidate], settings: PlanSettings, out_dir: str | Path, *,
             workers: int | None = None, executor: str = "local", ray_address: str | None = None,
             quiet: bool = False, context: dict | None = None):
    """Plan every candidate and write the outputs; returns (table DataFrame, plans)."""
    import pandas as pd

    from sim.sweep.plan_plots import plot_latency_vs_load, plot_pareto, slug
    from sim.sweep.executors import check_executor, parquet_safe, progress_bar, run_local, run_ray, write_parquet

    check_executor(executor, ray_address)
    check_models_and_hardware(base, candidates)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    by_name: dict[str, CandidatePlan] = {}
    bar = progress_bar(len(candidates), quiet, desc="plan")

    def on_done(p: CandidatePlan) -> None:
        by_name[p.candidate.name] = p
        if bar is not None:
            bar.update(1)

    tasks = [PlanTask(base, c, settings) for c in candidates]
    try:
        (run_ray(tasks, on_done, workers, ray_address, fn=_plan_task) if executor == "ray"
         else run_local(tasks, on_done, workers, fn=_plan_task))
    finally:
        if bar is not None:
            bar.close()
    plans = [by_name[c.name] for c in candidates]
    table = plan_table(plans, settings)
    table.to_csv(out / "plan.csv", index=False, float_format="%.6g")
    rows = pd.DataFrame([r for p in plans for r in p.rows])
    if len(rows):
        lead = ["candidate", "phase", "num_replicas", "workload.request_rate", "passed", "status", "slo_violations"]
        rows = rows[lead + [c for c in rows.columns if c not in lead]]
        rows.to_csv(out / "results.csv", index=False, float_format="%.9g")
        write_parquet(parquet_safe(rows), out / "results.parquet")
    figures = []
    lvl = out / "latency_vs_load"
    for old in lvl.glob("*.png") if lvl.is_dir() else ():  # an earlier plan's figures (other candidates)
        old.unlink()
    if any(p.rows for p in plans):
        lvl.mkdir(exist_ok=True)
    for p in plans:
        if p.rows:
            f = f"latency_vs_load/{slug(p.candidate.name)}.png"
            plot_latency_vs_load(p, settings, out / f)
            figures.append(f)
    if any(p.rows for p in plans):
        plot_pareto(plans, settings, out / "pareto.png")
        figures.insert(0, "pareto.png")
    warnings = plan_workload_warnings(plans)
    short = short_run_warning(plans)
    if short:
        warnings.append(short)
    from sim.launch import write_launch

    launch = winner_launch(base, table, candidates)
    if launch is not None:
        write_launch(out, launch)
    (out / "plan.md").write_text(plan_markdown(table, settings, context or {}, figures, warnings, launch))
    from sim.results.html_report import write_html_report

    write_html_report(out / "plan.md", out / "report.html")
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    table.attrs["launch"] = launch  # the answer's launch command (sim.launch.Launch), or None
    return table, plans


#: a search run should span this many start-up transients for its verdict to be firm
MIN_WINDOW_TRANSIENTS = 10.0


def short_run_warning(plans) -> str | None:
    """The warning when the runs that decided a candidate's rate were short:
    too short to judge stability at all (naming the candidates whose search
    stopped at such a run: their capacity may be higher), or spanning fewer
    than ``MIN_WINDOW_TRANSIENTS`` start-up transients at the rate found; then
    the answer can be off either way (±20 % between 150 and 2,000 requests on
    llama-3.1-8b / chat). None when every deciding run was long enough."""
    unjudged, short, capped = 0, [], []
    for p in plans:
        for r in p.rows:
            rate, tr = r.get("workload.request_rate"), r.get("transient_s")
            if "not judged" in str(r.get("stability_reason", "")):
                unjudged += 1
                why = str(r.get("slo_violations") or "")  # failed on the verdict alone, no SLO over its bound
                if (r.get("phase") == "search" and not r.get("passed") and why.startswith("unstable: not judged")
                        and " > " not in why and isinstance(rate, (int, float)) and rate > p.max_rate
                        and p.candidate.name not in capped):
                    capped.append(p.candidate.name)
            n = (r.get("completed") or 0) + (r.get("num_rejected") or 0)
            if (r.get("phase") == "search" and r.get("passed") and p.max_rate > 0
                    and rate == p.max_rate and tr and math.isfinite(tr) and tr > 0):
                if n / rate < MIN_WINDOW_TRANSIENTS * tr:
                    short.append((p.candidate.name, n / rate / tr))
    parts = [f"{unjudged} run(s) too short to judge stability"] if unjudged else []
    if capped:
        parts[-1] += (f" (they stopped the search of {', '.join(capped[:3])}"
                      + (f" and {len(capped) - 3} more" if len(capped) > 3 else "")
                      + " above its rate found, with every SLO met: its capacity may be higher)")
    if short:
        name, ratio = min(short, key=lambda x: x[1])
        parts.append(f"at the rates found, {len(short)} candidate(s) ran for fewer than "
                     f"{MIN_WINDOW_TRANSIENTS:g} start-up transients (e.g. {name}: {ratio:.1f} transients long)")
    if not parts:
        return None
    return (f"{'; '.join(parts)}. Short runs make the rates found unreliable, in either direction; raise "
            "workload.num_requests (or --max-request-scale, how far plan extends a run too short to judge) "
            "for a firmer answer (results.csv: stability_reason, transient_s, requests_scale)")
