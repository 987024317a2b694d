"""``servesim sweep`` and ``servesim plan``: plain functions with typer-annotated
parameters, registered in :mod:`sim.cli.main` with ``app.command()(sweep)`` and
``app.command()(plan)``. The work is in :mod:`sim.sweep.spec` and :mod:`sim.sweep.plan`."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import List, Optional

import typer

from sim.errors import ConfigError
from sim.cli.common import workload_help

SET_HELP = "Override a base config key: --set key=value (repeatable; dotted for workload.*)."


def sweep(
    sweep_file: Path = typer.Argument(..., help="Sweep YAML: 'base' (config keys, 'config: PATH', 'workload: NAME') "
                                           "and 'axes' (key: list or {start, stop, step|num}); optional 'zip', 'goodput'."),
    out: Optional[Path] = typer.Option(None, help="Output folder for results.parquet / results.csv, figures/ "
                                                  "(default: runs/sweep-<file name>). Re-running resumes."),
    executor: str = typer.Option("local", help="local (a process pool) or ray (needs servesim[ray])."),
    workers: Optional[int] = typer.Option(None, help="Parallel simulations (default: the CPU count; ray: the cluster's CPUs)."),
    ray_address: Optional[str] = typer.Option(None, help="Join a running Ray cluster (e.g. ray://head:10001 or auto); "
                                                         "default: start a local Ray."),
    retry_failed: bool = typer.Option(True, help="Re-run points recorded as failed (infeasible ones are never re-run)."),
    quiet: bool = typer.Option(False, help="No progress bar."),
    plots: bool = typer.Option(True, "--plots/--no-plots",
                               help="Write figures of the table to OUT/figures: latency and throughput against "
                                    "the request rate (else the numeric axis with the most values), one line per "
                                    "combination of the other axes; a bar chart per point when no axis is numeric."),
) -> None:
    """Run one simulation per point of a grid of configs; one tidy table of results (resumable), and figures."""
    from sim.sweep.spec import load_sweep, run_sweep

    from sim.cli.common import ensure_out_dir, stop_on_signals

    spec = load_sweep(sweep_file)
    out = ensure_out_dir(out or Path("runs") / f"sweep-{Path(sweep_file).stem}")
    with stop_on_signals(lambda sig: f"sweep stopped by {sig}; the points finished so far are in {out} "
                                     "(results.csv, points.jsonl): run the same command again to resume"):
        df = run_sweep(spec, out, executor=executor, workers=workers, ray_address=ray_address, quiet=quiet,
                       retry_failed=retry_failed)
    counts = df["status"].value_counts().to_dict() if len(df) else {}
    typer.echo(f"{len(df)} points: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in ("ok", "infeasible", "failed")))
    for r in df[df["status"] != "ok"].head(10).itertuples():
        typer.echo(f"  {r.point_id} {r.status}: {r.reason}")
    from sim.sweep.executors import parquet_available

    typer.echo(f"results: {out}/results.parquet, {out}/results.csv" if parquet_available()
               else f"results: {out}/results.csv")
    if plots:
        from sim.sweep.sweep_plots import write_sweep_figures

        paths, notes = write_sweep_figures(df, list(spec.axes), out, zip_groups=spec.zip_groups,
                                           base=spec.base_overrides, goodput=spec.goodput)
        for note in notes:
            typer.echo(f"note: {note}", err=True)
        for path in paths:
            typer.echo(f"figure: {path}")


#: config keys ``plan`` takes candidates of through its own option, not ``--vary``
_OWN_OPTIONS = {"hardware": ("--hardware", "h100_sxm,h200_sxm"), "tensor_parallel_size": ("--tp", "1,2,4"),
                "scheduler": ("--scheduler", "chunked,mixed")}


def _split(text: str | None, what: str, conv=str, minimum: int | None = None) -> list:
    """Comma-separated values of option ``--what`` (repeats dropped, order
    kept); ConfigError for a value ``conv`` rejects or below ``minimum``."""
    if text is None:
        return []
    if not text.strip(" ,"):
        raise ConfigError(f"--{what}: {text!r} names no value")
    out = []
    for x in re.split(r"\s*,\s*|\s+", text.strip()):
        if not x:  # "1,,2" or a trailing comma: a value left out is a typo, not nothing
            raise ConfigError(f"--{what}: {text!r} has an empty item; give the values comma-separated (e.g. 1,2)")
        try:
            v = conv(x)
        except ValueError:
            kind = "a whole number" if conv is int else "a valid value"
            raise ConfigError(f"--{what}: {x!r} is not {kind} (in {text!r}; comma-separated, e.g. 1,2)") from None
        if minimum is not None and v < minimum:
            raise ConfigError(f"--{what}: {x!r} must be >= {minimum}")
        if v not in out:
            out.append(v)
    return out


def plan(
    args: Optional[List[str]] = typer.Argument(None, metavar="[CONFIG.yaml] [SLO ...]",
                                               help="YAML config file with the base config; words with '=' are "
                                                    "more SLOs (so --slo p99_ttft_ms=500 p99_tpot_ms=50 works)."),
    workload: Optional[str] = typer.Option(None, help=workload_help("default")),
    model: Optional[str] = typer.Option(None, help="Model preset, HF id or config.json path (default: the config file's, else llama-3.1-8b)."),
    hardware: Optional[str] = typer.Option(None, help="Candidate GPUs, comma-separated (e.g. h100_sxm,h200_sxm); "
                                                      "default: the base config's."),
    tp: Optional[str] = typer.Option(None, help="Candidate tensor-parallel sizes, comma-separated (e.g. 2,4,8)."),
    scheduler: Optional[str] = typer.Option(None, help="Candidate batching modes, comma-separated (e.g. chunked,continuous)."),
    vary: Optional[List[str]] = typer.Option(None, help="More candidate settings: KEY=V1,V2 (repeatable), "
                                                        "e.g. max_num_batched_tokens=2048,8192."),
    disagg: Optional[str] = typer.Option(None, help="Disaggregated candidates too: xPyD shapes, comma-separated "
                                                    "(e.g. 1P1D,1P2D,2P1D), or auto (every prefill:decode ratio "
                                                    "that fits --max-gpus). A replica is one xPyD unit."),
    prefill_tp: Optional[str] = typer.Option(None, help="Prefill-pool TP sizes of disaggregated candidates "
                                                        "(default: --tp's)."),
    decode_tp: Optional[str] = typer.Option(None, help="Decode-pool TP sizes of disaggregated candidates "
                                                       "(default: --tp's)."),
    prefill_dp: Optional[str] = typer.Option(None, help="Prefill-pool data_parallel_size values of disaggregated "
                                                        "candidates, an MoE model's attention-DP ranks per worker "
                                                        "(e.g. 1,8; a worker is TP x DP GPUs)."),
    decode_dp: Optional[str] = typer.Option(None, help="Decode-pool data_parallel_size values (as --prefill-dp)."),
    expert_parallel: Optional[str] = typer.Option(None, help="enable_expert_parallel values searched in each pool "
                                                             "of disaggregated candidates of an MoE model: on, off "
                                                             "or off,on (true / false too; experts EP over the "
                                                             "worker's GPUs; on a 1-GPU worker on = off)."),
    agg: bool = typer.Option(True, "--agg/--no-agg", help="Include aggregated candidates (with --disagg)."),
    max_gpus: Optional[int] = typer.Option(None, help="GPU budget: the most GPUs a deployment may use."),
    replicas: Optional[str] = typer.Option(None, help="Allowed replica counts, comma-separated (default: 1..--max-replicas)."),
    max_replicas: int = typer.Option(64, help="Largest replica count considered when --replicas is not given."),
    slo: Optional[List[str]] = typer.Option(None, help="SLO on a summary metric: KEY<=VALUE or KEY=VALUE (a cap; a floor "
                                                       "for goodput_fraction), "
                                                       "e.g. p99_ttft_ms=1000 p99_tpot_ms=60; or goodput_fraction>=0.9 "
                                                       "with --goodput. The load to serve is --target-rate. "
                                                       "Repeatable."),
    goodput: Optional[List[str]] = typer.Option(None, help="Per-request SLOs for goodput: ttft:MS tpot:MS e2el:MS."),
    target_rate: Optional[float] = typer.Option(None, help="Request rate to serve (req/s): find the cheapest configuration."),
    start_rate: Optional[float] = typer.Option(None, help="First rate tried per replica (default: the workload's request_rate)."),
    rel_tol: float = typer.Option(0.05, help="Bisection stops when the bracket is within this fraction of the rate."),
    max_request_scale: int = typer.Option(8, help="A search run too short to judge its stability (arrival window "
                                                  "under two start-up transients) that meets every SLO is run "
                                                  "again with 2x, 4x, ... up to this many times the workload's "
                                                  "requests (1: never)."),
    price: Optional[List[str]] = typer.Option(None, help="$/GPU-hour of a GPU, replacing its profile's "
                                                         "price_per_gpu_hour_usd: GPU=USD (repeatable, or "
                                                         "comma-separated), e.g. --price h100_sxm=2.49."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
    seed: Optional[int] = typer.Option(None, help="Seed of every run (default: the config file's, else 0)."),
    out: Path = typer.Option(Path("runs/plan"), help="Output folder: plan.md, plan.csv, results.csv, figures."),
    executor: str = typer.Option("local", help="local (a process pool) or ray, one candidate per task."),
    workers: Optional[int] = typer.Option(None, help="Candidates planned in parallel (default: the CPU count)."),
    ray_address: Optional[str] = typer.Option(None, help="Join a running Ray cluster (with --executor ray)."),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """Find, per candidate, the highest request rate within the SLOs and the cheapest configuration for a target rate.

    Exit status: 0 when a candidate serves the load within the SLOs, 1 when none does (the
    report and plan.csv are written either way), 2 on bad input."""
    from sim.config import build_config, check_known_keys, parse_value, set_dotted
    from sim.results.metrics import parse_goodput
    from sim.sweep.plan import (PlanSettings, base_data_parallel, check_vary_values, drop_equivalent,
                                make_candidates, make_disagg_candidates, parse_disagg_shapes, parse_prices,
                                parse_slos, pool_parallel_options)
    from sim.sweep.plan_report import agg_vs_disagg_line, answer_line, run_plan
    from sim.sweep.spec import check_names

    if workers is not None and workers < 1:
        raise ConfigError(f"--workers: must be >= 1, got {workers}")
    config, slo = None, list(slo or [])
    for a in args or []:
        if "=" in a and not Path(a).is_file():
            slo.append(a)
        elif config is None:
            config = Path(a)
        else:
            raise ConfigError(f"plan: one config file only, got {config} and {a}")
    overrides = {k: v for k, v in {"model": model, "seed": seed}.items() if v is not None}
    base = build_config(config, overrides, set_, workload)
    _check_plannable(base)
    gp = parse_goodput(goodput) or None
    slos = parse_slos(slo, gp)
    if not slos:
        raise ConfigError("--slo: give at least one SLO, e.g. --slo p99_ttft_ms=1000 --slo p99_tpot_ms=60")
    extra: dict[str, list] = {}
    for item in vary or []:
        k, sep, vals = item.partition("=")
        if not sep or not vals:
            raise ConfigError(f"--vary {item!r}: expected KEY=V1,V2")
        probe: dict = {}
        set_dotted(probe, k.strip(), None)
        check_known_keys(probe, "--vary")
        if k.strip() == "workload" or k.strip().startswith("workload."):
            raise ConfigError(f"--vary {k.strip()}: plan varies the deployment; the workload is fixed for all "
                              "candidates (its request rate is what plan searches). Set it with --workload / "
                              "--set, and run plan once per workload to compare workloads")
        key = k.strip()
        if key in _OWN_OPTIONS:  # (two lists of one key: one would silently win or add to the other)
            opt, eg = _OWN_OPTIONS[key]
            raise ConfigError(f"--vary {key}: plan has its own option for it; give the candidates as {opt} {eg}")
        extra[key] = list(dict.fromkeys(parse_value(v) for v in vals.split(",") if v))
    hw_list, sched_list = _split(hardware, "hardware"), _split(scheduler, "scheduler")
    tp_list = _split(tp, "tp", int, minimum=1)
    check_names({"hardware": hw_list or [], "scheduler": sched_list or []}, "--")
    check_names(extra, "--vary ")
    if any(k.startswith("disaggregation") for k in extra):
        raise ConfigError("--vary disaggregation...: plan sets the pools itself; give the shapes as --disagg "
                          "1P1D,1P2D (or auto with --max-gpus) and the pools' TP as --prefill-tp / --decode-tp")
    if max_gpus is not None and max_gpus < 1:
        raise ConfigError(f"--max-gpus: must be >= 1, got {max_gpus}")
    for opt, val in (("--prefill-tp", prefill_tp), ("--decode-tp", decode_tp)):
        if val is not None and disagg is None and base.disaggregation is None:
            raise ConfigError(f"{opt}: sets the pools of disaggregated candidates; add --disagg SHAPES (e.g. 1P2D)")
    ptp_list, dtp_list = _split(prefill_tp, "prefill-tp", int, minimum=1), _split(decode_tp, "decode-tp", int, minimum=1)
    pool_parallel = _pool_parallel(base, disagg, prefill_dp, decode_dp, expert_parallel, pool_parallel_options)
    for opt, lst in (("--tp", tp_list), ("--prefill-tp", ptp_list), ("--decode-tp", dtp_list)):
        for t in lst or []:
            if t & (t - 1):
                raise ConfigError(f"{opt}: {t} is not a power of two (tensor_parallel_size 1, 2, 4, 8, ...)")
    hw_cands, sch_cands = hw_list or [base.hardware], sched_list or [base.scheduler]
    bdp = base_data_parallel(base)  # the base's DP ranks count in a candidate's GPUs
    cands = (make_candidates(hw_cands, tp_list or [base.tensor_parallel_size], sch_cands, extra, bdp)
             if agg else [])
    if disagg is not None or base.disaggregation is not None:
        if disagg is not None:
            shapes = parse_disagg_shapes(disagg)
        else:  # the config's own xPyD
            shapes = [(base.disaggregation.num_prefill_workers, base.disaggregation.num_decode_workers)]
        pools = base.disaggregation
        pool_tp = {p: (getattr(pools, p).get("tensor_parallel_size") if pools is not None else None)
                   for p in ("prefill", "decode")}
        dis_cands = make_disagg_candidates(
            hw_cands, shapes, ptp_list or tp_list or [pool_tp["prefill"] or base.tensor_parallel_size],
            dtp_list or tp_list or [pool_tp["decode"] or base.tensor_parallel_size], sch_cands, extra, max_gpus,
            pool_parallel, bdp)
        if not dis_cands:
            raise ConfigError(f"--disagg {disagg}: no prefill:decode shape fits --max-gpus {max_gpus} with these "
                              "TP sizes")
        cands += dis_cands
    elif not agg:
        raise ConfigError("--no-agg: no candidate left; add --disagg SHAPES (e.g. 1P1D,1P2D,2P1D)")
    cands, same = drop_equivalent(cands)
    if same:
        typer.echo(f"note: {len(same)} candidate(s) dropped as the same deployment as another: expert parallelism "
                   f"on a 1-GPU worker is EP off (e.g. {same[0][0]} = {same[0][1]})", err=True)
    check_vary_values(base, cands, extra)
    reps = _split(replicas, "replicas", int, minimum=1) or None
    if max_replicas < 1:
        raise ConfigError(f"--max-replicas: must be >= 1, got {max_replicas}")
    for opt, rate in (("--target-rate", target_rate), ("--start-rate", start_rate)):
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise ConfigError(f"{opt}: must be a finite rate > 0 req/s, got {rate}")
    if not (math.isfinite(rel_tol) and 0 < rel_tol < 1):
        raise ConfigError(f"--rel-tol: must be a fraction in (0, 1), got {rel_tol}")
    if reps and min(reps) < 1:
        raise ConfigError(f"--replicas: counts must be >= 1, got {replicas}")
    prices = parse_prices(price)
    unknown = sorted(set(prices) - {c.overrides["hardware"] for c in cands})
    if unknown:
        raise ConfigError(f"--price {unknown[0]}=...: {unknown[0]} is not a candidate GPU of this plan "
                          f"({', '.join(dict.fromkeys(c.overrides['hardware'] for c in cands))})")
    if max_request_scale < 1:
        raise ConfigError(f"--max-request-scale: must be >= 1, got {max_request_scale}")
    settings = PlanSettings(slos, gp, target_rate, reps, max_replicas, start_rate, rel_tol, prices=prices or None,
                            max_gpus=max_gpus, max_request_scale=max_request_scale)
    wl = base.workload
    n_req = wl.num_requests if wl.num_requests is not None else "the trace's requests"
    trace_desc = f"trace {wl.trace}" + (f" (its lengths; {wl.arrival} arrivals)" if wl.arrival else "")
    context = {"model": base.model, "workload": workload or (trace_desc if wl.trace else "default"),
               "requests per replica per run": f"{n_req} + {wl.num_warmup_requests} warm-up",
               "max_model_len": base.max_model_len or "model default", "seed": base.seed,
               "candidates": len(cands)}
    if sys.argv and Path(sys.argv[0]).name in ("servesim", "__main__.py"):
        context["command"] = "`servesim " + " ".join(sys.argv[1:]) + "`"
    from sim.cli.common import ensure_out_dir, stop_on_signals

    ensure_out_dir(out)
    with stop_on_signals(lambda sig: f"plan stopped by {sig} before it finished; what is in {out} is not this "
                                     "plan's result (a plan does not resume: run it again)"):
        table, _ = run_plan(base, cands, settings, out, workers=workers, executor=executor,
                            ray_address=ray_address, quiet=quiet, context=context)
    cols = ["rank", "candidate", "status", "max_rate_per_replica", "replicas", "num_gpus", "cost_per_hour_usd",
            "usd_per_million_output_tokens"]
    typer.echo(table[cols].to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.3g}"))
    for r in table[table["status"] != "ok"].itertuples():  # why, on screen too (not only in plan.md)
        typer.echo(f"  {r.candidate} ({r.status}): {r.reason}")
    typer.echo(answer_line(table, settings))
    if line := agg_vs_disagg_line(table, settings):
        typer.echo(line)
    launch = table.attrs.get("launch")
    if launch is not None:
        typer.echo(f"launch command ({launch.engine}; {out}/launch.sh):")
        typer.echo(launch.text().rstrip("\n"))
    typer.echo(f"report: {out}/plan.md (one page with the figures: {out}/report.html)")
    if not (table["status"] == "ok").any():  # the plan's answer is "none": scripts can tell (--help)
        raise typer.Exit(1)


def _pool_parallel(base, disagg, prefill_dp, decode_dp, expert_parallel, options) -> dict[str, list[dict]]:
    """Each pool's searched parallelism (``--prefill-dp`` / ``--decode-dp`` /
    ``--expert-parallel``): pool -> options (:func:`sim.sweep.plan.pool_parallel_options`).
    One-line errors: without --disagg, on a dense model, a bad value."""
    if prefill_dp is None and decode_dp is None and expert_parallel is None:
        return {}
    given = [o for o, v in (("--prefill-dp", prefill_dp), ("--decode-dp", decode_dp),
                            ("--expert-parallel", expert_parallel)) if v is not None]
    if disagg is None and base.disaggregation is None:
        raise ConfigError(f"{given[0]}: sets the pools of disaggregated candidates; add --disagg SHAPES (e.g. 1P2D)")
    from sim.model_spec import get_model

    if not get_model(base.model).is_moe:
        if prefill_dp is None and decode_dp is None and all(
                v.lower() in ("off", "false") for v in _split(expert_parallel, "expert-parallel")):
            return {}  # --expert-parallel off on a dense model: no experts, nothing to search (a no-op)
        raise ConfigError(f"{given[0]}: attention data parallelism and expert parallelism in a pool are searched "
                          f"for MoE models; {base.model} is dense (use --prefill-tp / --decode-tp, or --disagg "
                          "shapes for more workers)")
    ep: list[bool] | None = None
    if expert_parallel is not None:
        ep = []
        for v in _split(expert_parallel, "expert-parallel"):
            if v.lower() not in ("on", "off", "true", "false"):
                raise ConfigError(f"--expert-parallel: {v!r} must be on or off (true / false too; e.g. off,on)")
            if (b := v.lower() in ("on", "true")) not in ep:
                ep.append(b)
    return {"prefill": options(_split(prefill_dp, "prefill-dp", int, minimum=1), ep),
            "decode": options(_split(decode_dp, "decode-dp", int, minimum=1), ep)}


def _check_plannable(base) -> None:
    """``plan`` searches the request rate of an open-loop workload: refuse, before
    any run, workloads whose arrivals ignore ``workload.request_rate``."""
    wl = base.workload
    if wl.max_concurrency is not None:
        raise ConfigError(f"plan: workload.max_concurrency = {wl.max_concurrency} makes the workload closed-loop "
                          "(clients send when their last request completes), so the request rate plan searches "
                          "has no effect; drop max_concurrency, or compare concurrencies with servesim sweep")
    if wl.trace is not None:
        from sim.workload.traces import load_trace

        table = load_trace(wl.trace, wl.trace_format, wl.columns, wl.skip_bad_rows)
        if wl.arrival_process(has_timestamps=table.arrival_s is not None) == "trace":
            raise ConfigError(f"plan: {wl.trace} is replayed at its own timestamps, so the request rate plan "
                              "searches has no effect; to draw arrivals with the trace's lengths, set both "
                              "workload.arrival (poisson, gamma, constant) and workload.request_rate (required; any "
                              "value, plan replaces it at each rate)")
