"""The ``servesim`` command (also ``python -m sim``): the top layer; it may import anything.

Every subcommand takes the same config keys: a YAML file, named options, and
``--set key=value`` (dotted for nested keys, e.g. ``workload.request_rate=4``).
Errors are printed as one message (exit status 2), never as a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import List, Optional

import typer

from sim.cli.common import DEFAULT_COMPARE_WORKLOAD, ensure_out_dir, workload_help
from sim.cli.vocab import FLAGS_EPILOG, VocabCommand
from sim.errors import Interrupted, ServesimError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="servesim: simulate LLM serving (vLLM-style schedulers, paged KV cache, roofline cost model) without a GPU.",
)

LOG_LEVELS = ("debug", "info", "warning", "error")


def _print_version(value: bool) -> None:
    if value:
        from sim import __version__

        typer.echo(f"servesim {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(None, "--version", callback=_print_version, is_eager=True,
                                           help="Print servesim's version and exit."),
    log_level: str = typer.Option("warning", "--log-level", envvar="SERVESIM_LOG_LEVEL",
                                  help=f"Log messages at this level and above to stderr: {', '.join(LOG_LEVELS)} "
                                       "(before the command: servesim --log-level info run ...)."),
) -> None:
    level = log_level.strip().lower()
    if level not in LOG_LEVELS:
        raise typer.BadParameter(f"{log_level!r}; valid: {', '.join(LOG_LEVELS)}", param_hint="--log-level")
    logging.basicConfig(level=getattr(logging, level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("sim").setLevel(getattr(logging, level.upper()))


SET_HELP = "Override a config key: --set key=value (repeatable; dotted keys for workload.*, e.g. workload.request_rate=4)."


def _overrides(**kw) -> dict:
    return {k: v for k, v in kw.items() if v is not None}


def _check_config_arg(config: Optional[Path]) -> None:
    """``--goodput ttft:500 tpot:50`` (vLLM style) leaves ``tpot:50`` as the
    positional CONFIG argument; say how to write it instead."""
    if config is not None and str(config).split(":")[0] in ("ttft", "tpot", "e2el") and not config.exists():
        raise ServesimError(f"{config} looks like an SLO, not a config file: repeat --goodput for each SLO "
                            f"or quote them together, e.g. --goodput 'ttft:500 tpot:50'")


@app.command(cls=VocabCommand, epilog=FLAGS_EPILOG)
def run(
    config: Optional[Path] = typer.Argument(None, help="YAML config file (flat vLLM-named keys; see README)."),
    model: Optional[str] = typer.Option(None, help="Model preset or HF id or path to config.json (default: the config file's, else llama-3.1-8b)."),
    hardware: Optional[str] = typer.Option(None, help="Hardware profile name or path to a profile YAML (default: the config file's, else h100_sxm)."),
    scheduler: Optional[str] = typer.Option(None, help="Batching mode: static, continuous, chunked, mixed, prefill_first, prefill_first_whole, prefill_first_mixed (or a registered one)."),
    workload: Optional[str] = typer.Option(None, help=workload_help("default")),
    set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
    seed: Optional[int] = typer.Option(None, help="Seed of the run: arrivals, lengths, router (default: the config file's, else 0)."),
    goodput: Optional[List[str]] = typer.Option(None, help="SLOs for goodput, as vllm bench serve: 'ttft:MS tpot:MS e2el:MS' (quoted, or repeat --goodput)."),
    out: Path = typer.Option(Path("runs/latest"), help="Output folder for summary.json, requests.csv, steps.csv."),
    exact_steps: Optional[bool] = typer.Option(
        None, "--exact-steps/--no-exact-steps",
        help="Reference mode: one event per engine step (default: the config's exact_steps, else off)."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="Also write the engine steps as a Chrome / Perfetto "
                                         "trace (JSON) to this file: open it in https://ui.perfetto.dev."),
    quiet: bool = typer.Option(False, help="No progress bar."),
    save_result: bool = typer.Option(False, "--save-result", help="Also write vllm bench serve's result JSON "
                                     "(every key it writes, servesim's beside) to --result-dir / --result-filename."),
    save_detailed: bool = typer.Option(False, "--save-detailed", help="With --save-result: the per-request lists "
                                       "(input_lens, output_lens, ttfts, latencies, start_times, errors)."),
    result_dir: Optional[Path] = typer.Option(None, help="Folder of the --save-result file (default: the current folder, as vllm bench serve)."),
    result_filename: Optional[str] = typer.Option(None, help="Name of the --save-result file (default: vllm bench "
                                                  "serve's LABEL-RATEqps[-concurrencyC]-MODEL-DATE.json)."),
    label: Optional[str] = typer.Option(None, help="The result's label (unset: null in the result, as vllm bench serve writes it; the result file name then starts with the backend, 'servesim')."),
    metadata: Optional[List[str]] = typer.Option(None, help="KEY=VALUE pairs written as top-level keys of the result "
                                                 "JSON (e.g. --metadata version=0.3.3 tp=1)."),
    metric_percentiles: Optional[str] = typer.Option(None, help="Comma-separated percentiles reported as "
                                                     "p{P}_{metric}_ms, e.g. 95,99.9 (servesim's p90/p99 are always there)."),
    percentile_metrics: Optional[str] = typer.Option(None, help="Comma-separated metrics for --metric-percentiles: "
                                                     "ttft,tpot,itl,e2el (default: all four)."),
) -> None:
    """Simulate one deployment and workload; print the vllm-bench-style summary and write results."""
    from sim.config import build_config, read_yaml
    from sim.results.metrics import parse_goodput
    from sim.results.output import write_results
    from sim.cli.tables import print_run_summary
    from sim.results.warnings import workload_warnings
    from sim.runner import run_simulation

    from sim.results.bench import bench_header, detailed_lists, parse_metadata
    from sim.results.metrics import parse_percentile_metrics, parse_percentiles

    _check_config_arg(config)
    slos = parse_goodput(goodput)
    pcts, pct_metrics = parse_percentiles(metric_percentiles), parse_percentile_metrics(percentile_metrics)
    meta = parse_metadata(metadata)
    if (save_detailed or result_dir or result_filename) and not save_result:
        opt = "--save-detailed" if save_detailed else "--result-dir" if result_dir else "--result-filename"
        raise ServesimError(f"{opt} applies to the --save-result file; add --save-result")
    if result_filename is not None and (not result_filename.strip() or "/" in result_filename):
        raise ServesimError(f"--result-filename {result_filename!r}: give a file name (the folder is --result-dir)")
    if save_result and result_filename is None and label is not None and "/" in label:
        raise ServesimError(f"--label {label!r}: the label starts the --save-result file's name; give one without "
                            "'/' (the folder is --result-dir), or a --result-filename")
    cfg = build_config(config, _overrides(model=model, hardware=hardware, scheduler=scheduler, seed=seed,
                                          exact_steps=exact_steps), set_, workload)
    if config is not None and not read_yaml(config):  # (empty, or comments only: maybe the wrong file)
        typer.echo(f"warning: {config} sets no keys: running the defaults (and the command line's keys)", err=True)
    ensure_out_dir(out)
    _check_trace_path(trace)
    if result_dir is not None:
        ensure_out_dir(result_dir, "--result-dir")
    with _progress_bar(quiet) as progress:
        res = run_simulation(cfg, goodput=slos, progress=progress, percentiles=pcts, percentile_metrics=pct_metrics)
    if label is not None or meta:  # the header again, with the label and metadata (same date)
        clash = sorted(k for k in meta if k in res.summary)  # (a result key parse_metadata does not know)
        if clash:
            raise ServesimError(f"--metadata {clash[0]}={meta[clash[0]]}: {clash[0]} is a key the run writes "
                                f"itself; use another name")
        head = bench_header(res.summary["config"], res.summary["num_prompts"], label=label, metadata=meta,
                            date=res.summary["date"])
        res.summary = {**head, **{k: v for k, v in res.summary.items() if k not in head}}
    write_results(out, res.summary, res.result)
    if save_result:
        import json

        from sim.results.output import json_safe

        doc = dict(res.summary)
        if save_detailed:
            doc.update(detailed_lists(res.result.requests, res.result.rejected_reasons))
        path = (result_dir or Path(".")) / (result_filename or result_filename_default(res.summary))
        path.write_text(json.dumps(json_safe(doc), default=str))
    if trace is not None:
        from sim.results.trace import write_trace

        write_trace(trace, res.result, res.summary)
    print_run_summary(res.summary, res.deployment)
    sm = res.summary
    if "mean_ttft_ms_lo" in sm and "mean_tpot_ms_lo" in sm:
        typer.echo(f"80 % interval from cross-validated residuals (reports/validation): mean TTFT "
                   f"{sm['mean_ttft_ms_lo']:,.1f}-{sm['mean_ttft_ms_hi']:,.1f} ms, mean TPOT "
                   f"{sm['mean_tpot_ms_lo']:,.2f}-{sm['mean_tpot_ms_hi']:,.2f} ms")
    reasons = res.result.rejected_reasons
    if reasons:
        rid = min(reasons)
        n = len(reasons)
        every = ("every request was" if not res.summary["completed"] else
                 f"{n:,} request was" if n == 1 else f"{n:,} requests were")
        level = "error" if not res.summary["completed"] else "warning"
        req = res.result.requests
        warm = req["request_id"][req["is_warmup"] > 0].astype(int).tolist() if "is_warmup" in req else []
        nw = sum(1 for i in warm if i in reasons)  # (the results' failed / num_rejected count measured ones)
        of = f" ({nw:,} of them warm-up requests, outside the results)" if nw else ""
        typer.echo(f"{level}: {every} rejected{of}, e.g. request {rid}: {reasons[rid]} "
                   "(requests.csv: status, reason)", err=True)
    for w in workload_warnings(res.summary):
        typer.echo(f"warning: {w}", err=True)
    typer.echo(f"results written to {out}/ (summary.json, requests.csv, steps.csv)")
    if save_result:
        typer.echo(f"vllm bench serve result JSON: {path}")
    if trace is not None:
        typer.echo(f"trace written to {trace} (open in https://ui.perfetto.dev)")
    if reasons and not res.summary["completed"]:
        raise typer.Exit(1)  # nothing was served: a script must not take this run for a result


def _check_trace_path(trace: Optional[Path]) -> None:
    """A bad ``--trace`` fails before the run, naming it."""
    if trace is None:
        return
    if not str(trace).strip() or trace.is_dir():
        raise ServesimError(f"--trace {str(trace)!r}: give a file name for the trace, e.g. --trace trace.json")
    if trace.parent.exists() and not trace.parent.is_dir():
        raise ServesimError(f"--trace {trace}: {trace.parent} is a file, not a folder")
    from sim.results.trace import check_trace_path

    try:
        check_trace_path(trace)
    except ServesimError as e:
        raise ServesimError(f"--{e}") from None


def result_filename_default(summary: dict) -> str:
    from sim.results.bench import result_filename

    return result_filename(summary)


@app.command(cls=VocabCommand, epilog=FLAGS_EPILOG)
def compare(
    config: Optional[Path] = typer.Argument(None, help="YAML config file with the base config."),
    schedulers: Optional[str] = typer.Option(None, help="Comma-separated batching modes to compare, one variant each "
                                              "(default when no variant is given: static,continuous,chunked; with --engine, that engine's chunked prefill on and off)."),
    variant: Optional[List[str]] = typer.Option(None, help='A variant: "NAME key=value ..." (repeatable).'),
    variants: Optional[Path] = typer.Option(None, help="YAML file: {NAME: {key: value, ...}, ...}."),
    model: Optional[str] = typer.Option(None, help="Model preset, HF id or config.json path (default: the config file's, else llama-3.1-8b)."),
    hardware: Optional[str] = typer.Option(None, help="Hardware profile name or YAML path (default: the config file's, else h100_sxm)."),
    workload: Optional[str] = typer.Option(None, help=workload_help(DEFAULT_COMPARE_WORKLOAD)),
    set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
    seed: Optional[int] = typer.Option(None, help="Seed of the run (default: the config file's, else 0)."),
    goodput: Optional[List[str]] = typer.Option(None, help="SLOs for goodput: 'ttft:MS tpot:MS e2el:MS' (quoted, or repeat --goodput)."),
    out: Path = typer.Option(Path("runs/compare"), help="Output folder: comparison.csv, report.md, figures, NAME/summary.json."),
    workers: Optional[int] = typer.Option(None, help="Parallel processes (default: one per variant, at most the CPU count)."),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """Compare batching policies / settings on the identical request stream and write a report.

    With no arguments: static vs continuous vs chunked prefill for llama-3.1-8b on one h100_sxm,
    on the built-in 'code' workload (Azure code-trace lengths and burstiness)."""
    from sim.cli.compare import run_compare

    _check_config_arg(config)
    run_compare(config=config, schedulers=schedulers, variant_args=variant, variants_file=variants, model=model,
                hardware=hardware, workload=workload, set_args=set_, seed=seed, goodput=goodput, out=out,
                workers=workers, quiet=quiet)


@app.command(cls=VocabCommand, epilog=FLAGS_EPILOG)
def kv(
    config: Optional[Path] = typer.Argument(None, help="YAML config file."),
    model: Optional[str] = typer.Option(None, help="Model preset, HF id or config.json path (default: the config file's, else llama-3.1-8b)."),
    hardware: Optional[str] = typer.Option(None, help="Hardware profile name or YAML path (default: the config file's, else h100_sxm)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
    length: Optional[List[int]] = typer.Option(None, help="Also report how many sequences of this many tokens fit (repeatable)."),
) -> None:
    """KV-cache capacity arithmetic: bytes/token, weights, KV memory, blocks, sequences that fit.

    The whole config is checked as run checks it, the workload included (its trace
    file and rows, its lengths), though the numbers depend on the engine keys only:
    a config run refuses, kv refuses. A disaggregated config shows each pool's
    engine (its workers' KV caches are their own)."""
    from sim.config import build_config
    from sim.cli.tables import print_kv_report
    from sim.runner import prepare

    for n in length or ():
        if n < 1:
            raise ServesimError(f"--length: must be a number of tokens >= 1, got {n}")
    cfg = build_config(config, _overrides(model=model, hardware=hardware), set_)
    dep, _ = prepare(cfg)  # (the requests are generated only to check the workload)
    # a disaggregated deployment: each pool's engine has its own KV cache (one table per pool)
    pools = ([("", dep)] if dep.disagg is None else
             [(f"prefill pool ({dep.disagg.prefill.cfg.num_replicas} worker(s))", dep.disagg.prefill),
              (f"decode pool ({dep.disagg.decode.cfg.num_replicas} worker(s))", dep.disagg.decode)])
    for label, pd in pools:
        print_kv_report(_kv_rows(pd, length), pd, label)
        cap = pd.sizing.longest_request
        for n in sorted(set(length or ())):
            if n > cap:  # (the table's 0: such a request is refused, never served)
                what = (f"the engine's request cap max_req_len {cap:,}" if pd.sizing.max_req_len is not None
                        else f"max_model_len {cap:,}")
                typer.echo(f"note: {label + ': ' if label else ''}--length {n:,} is over {what}: a request of "
                           f"that length is refused, so sequences_of_{n}_tokens is 0 (raise --max-model-len)",
                           err=True)
    from sim.presets import version_warning

    vw = version_warning(cfg.engine, cfg.engine_version)  # as run warns (sim/results/warnings.py)
    if vw:
        typer.echo(f"warning: {vw}", err=True)


def _weight_precision(model, quantization: str | None) -> str:
    """``fp8``, or per operator family where they differ (``experts nvfp4, attention bf16``)."""
    from sim.model_spec import LINEAR_FAMILIES

    has = {"experts": model.is_moe, "shared_experts": bool(model.shared_expert_intermediate_size),
           "dense_mlp": not model.is_moe or bool(model.dense_mlp_layers)}
    fams = [f for f in LINEAR_FAMILIES if has.get(f, True)]
    by = {f: model.family_quantization(f, quantization) for f in fams}
    if len(set(by.values())) == 1:
        return next(iter(by.values()))
    return ", ".join(f"{f} {q}" for f, q in by.items())


def _kv_rows(dep, length: list[int] | None) -> dict:
    """``servesim kv``'s quantities for one engine (an aggregated deployment or one pool)."""
    from sim.cost_model.parallel import layout_report
    from sim.kv_cache.sizing import KV_MEMORY_RULE_FORMULAS, kv_report

    cfg = dep.cfg
    lengths = tuple(length) if length else (1024, 4096, dep.limits.max_model_len)
    rep = kv_report(dep.sizing, lengths=lengths, kv_allocation=cfg.kv_allocation,
                    contiguous_reserve=cfg.contiguous_reserve)
    # the memory rule, stated beside f (``gpu_memory_utilization``: each engine's own name in the formula)
    rows = {}
    for k, v in rep.items():
        rows[k] = v
        if k == "gpu_memory_utilization":
            rows["kv_memory_rule"] = f"{cfg.kv_memory_rule}: {KV_MEMORY_RULE_FORMULAS[cfg.kv_memory_rule]}"
        if k == "weight_gib_per_rank":  # the weights' precision per operator family (checkpoint or --quantization)
            rows["weight_precision"] = _weight_precision(dep.model, cfg.quantization)
    if dep.layout.num_gpus > 1 or dep.model.is_moe:  # DP x TP x EP, per-GPU weights
        rows.update(layout_report(dep.model, dep.layout, cfg.quantization))
        if dep.layout.attention_dp:  # each attention rank has its own KV cache
            rows["kv_cache_tokens_per_dp_group"] = rows["kv_cache_tokens"] * dep.layout.data_parallel_size
    return rows


@app.command()
def models(
    name: Optional[str] = typer.Argument(None, help="a preset name or a config.json path: show that model alone"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """List the built-in model presets: size, layers, attention, experts,
    checkpoint precision and KV-cache bytes per token (bf16 KV, one GPU)."""
    from sim.cli.tables import print_rows
    from sim.model_spec import get_model, list_models

    rows = [model_row(get_model(n)) for n in ([name] if name else list_models())]
    if as_json:
        typer.echo(json.dumps(rows if name is None else rows[0], indent=2))
    else:
        print_rows("model presets" if name is None else rows[0]["name"], rows)


def model_row(m) -> dict:
    """One model's listing (``servesim models``)."""
    counts = m.layer_type_counts()
    if m.is_mla:
        attn = f"MLA {m.num_attention_heads} heads, latent {m.kv_lora_rank}+{m.qk_rope_head_dim}"
    else:
        attn = f"GQA {m.num_attention_heads}/{m.num_key_value_heads} heads x {m.head_dim}"
    other = {"sliding_attention": f"sliding window {m.sliding_window}", "linear_attention": "Gated DeltaNet"}
    mixed = [f"{n} {other[t]}" for t, n in counts.items() if t in other]
    if mixed:
        attn += f" ({counts.get('full_attention', 0)} full, " + ", ".join(mixed) + ")"
    experts = "-"
    if m.is_moe:
        experts = f"{m.num_experts} top-{m.num_experts_per_tok}"
        if m.shared_expert_intermediate_size:
            experts += " + shared"
        if m.dense_mlp_layers:
            experts += f", {len(m.dense_mlp_layers)} dense layers"
    return {"name": m.name, "architecture": m.architecture, "params_b": round(m.num_params() / 1e9, 2),
            "active_params_b": round(m.num_active_params() / 1e9, 2), "layers": m.num_hidden_layers,
            "attention": attn, "experts": experts, "weights": m.quantization or m.dtype,
            "kv_bytes_per_token": m.kv_bytes_per_token(), "max_position_embeddings": m.max_position_embeddings}


@app.command()
def hardware(
    name: Optional[str] = typer.Argument(None, help="a profile name or YAML path: show it with the provenance "
                                                    "of each fitted kernel family"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """List the hardware profiles: memory, bandwidth, dense tensor peaks, NVLink
    domain, and whether the kernel efficiencies were fitted on that GPU or
    transferred from another."""
    from sim.cli.tables import print_rows
    from sim.hardware.profile import get_hardware, list_hardware

    profiles = [get_hardware(n) for n in ([name] if name else list_hardware())]
    rows = [hardware_row(hw) for hw in profiles]
    if name is not None:
        fam = profiles[0].provenance.get("efficiency_families")
        rows[0]["efficiency_families"] = fam if isinstance(fam, dict) else {}
    if as_json:
        typer.echo(json.dumps(rows if name is None else rows[0], indent=2))
    elif name is None:  # (the link's name is in the one-profile view and the JSON)
        print_rows("hardware profiles", [{k: v for k, v in r.items() if k != "interconnect"} for r in rows])
    else:
        row = dict(rows[0])
        fam = row.pop("efficiency_families")
        print_rows(row["name"], [row])
        if fam:
            print_rows(f"{row['name']}: where each kernel family was fitted",
                       [{"family": f, "fitted": e} for f, e in fam.items()])


def hardware_row(hw) -> dict:
    """One profile's listing (``servesim hardware``)."""
    p = hw.peak_flops_per_s
    src = hw.transferred_from
    how = (f"transferred from {src}" if src else
           "fitted on this GPU" if hw.provenance.get("efficiency_source") else "not recorded")
    tflops = {k: (round(v / 1e12) if v else None) for k, v in (("bf16", p.bf16), ("fp8", p.fp8), ("fp4", p.fp4))}
    return {"name": hw.name, "description": hw.description, "memory_gib": round(hw.memory_bytes / 2**30, 2),
            "hbm_tb_per_s": hw.hbm_bandwidth_bytes_per_s / 1e12, "bf16_tflops": tflops["bf16"],
            "fp8_tflops": tflops["fp8"], "fp4_tflops": tflops["fp4"], "interconnect": hw.interconnect.name,
            "link_domain_gpus": hw.interconnect.max_gpus,
            "efficiencies": how, "efficiency_date": str(hw.provenance.get("efficiency_date", "-"))}


def _register_late_commands() -> None:
    # Defined in their own modules (typer-annotated functions); imported here
    # only to register them — their heavy imports happen when they run.
    from sim.cli.sweep import plan, sweep
    from sim.cli.validate import validate

    from sim.cli.vocab import flags

    app.command()(sweep)
    app.command(cls=VocabCommand, epilog=FLAGS_EPILOG)(plan)
    app.command()(flags)
    app.command(name="validate")(validate)
    app.command()(calibrate)


def calibrate(
    device: Optional[str] = typer.Option(None, help="Measure live: 'cuda' (your GPU) or 'cpu' (small, for trying the pipeline); needs torch."),
    from_table: Optional[Path] = typer.Option(None, help="Fit from measured tables in the ../shared/kernels format (a directory)."),
    base_profile: Optional[str] = typer.Option(None, help="With --from-table: the profile giving the datasheet peaks (e.g. h100_sxm)."),
    out: Path = typer.Option(Path("profile.yaml"), help="The fitted hardware profile (YAML) to write; fit-vs-measured "
                                                        "plots go beside it (OUT_STEM_plots/, or OUT_STEM_kernels/ "
                                                        "with the raw CSVs in live mode)."),
    quick: bool = typer.Option(False, help="A smaller sweep (live mode)."),
    quiet: bool = typer.Option(False, help="No progress bars."),
) -> None:
    """Fit a hardware profile's efficiency parameters from kernels measured live (torch) or from measured tables."""
    from calibration.cli import calibrate as run_calibration

    path = run_calibration(device=device, from_table=from_table, base_profile=base_profile, out=out,
                           quick=quick, quiet=quiet)
    typer.echo(f"profile written to {path}")


_register_late_commands()


class _progress_bar:
    """A tqdm bar over completed requests (stderr; hidden when quiet or not a terminal)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet or not sys.stderr.isatty()
        self.bar = None
        self.last = 0

    def __enter__(self):
        if self.quiet:
            return None
        from tqdm import tqdm

        self.bar = tqdm(unit="req", desc="simulating", file=sys.stderr, leave=False)
        return self

    def set_total(self, total: int) -> None:
        self.bar.total = total
        self.bar.refresh()

    def __call__(self, done: int) -> None:
        self.bar.update(done - self.last)
        self.last = done

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()


def main() -> None:
    """Entry point. Usage errors and Ctrl-C are handled by typer (standalone
    mode: a message and exit status 2, or "Aborted!" and 1); servesim's own
    errors and file-system errors become one ``error:`` line and exit status 2."""
    try:
        app()
    except Interrupted as e:
        typer.echo(f"interrupted: {e}", err=True)
        sys.exit(128 + int(e.signum))
    except ServesimError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except UnicodeDecodeError as e:  # a YAML/JSON file read elsewhere that is not UTF-8 text
        typer.echo(f"error: an input file is not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
                   f"{e.start}); save it as UTF-8", err=True)
        sys.exit(2)
    except OSError as e:  # e.g. --out names an existing file or an unwritable place
        where = f": {e.filename}" if getattr(e, "filename", None) else ""
        typer.echo(f"error: {e.strerror or e}{where}", err=True)
        sys.exit(2)
    except MemoryError:
        typer.echo("error: out of memory (is num_gpu_blocks_override or workload.num_requests far too large?)",
                   err=True)
        sys.exit(2)
