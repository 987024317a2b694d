"""Warnings read from a run's summary: what its workload silently changed, and where the
run is outside the ground servesim was checked on."""

from __future__ import annotations

from sim.results.metrics import STATUS_REJECTED

#: how a table cell joins a run's warnings (sweep and plan rows)
WARNING_SEP = " | "


def run_warning_list(s: dict) -> list[str]:
    """``s["warnings"]``: a list (summary.json) or a joined cell (a sweep row)."""
    w = s.get("warnings")
    if isinstance(w, str):
        return [x for x in w.split(WARNING_SEP) if x]
    return [x for x in (w or []) if isinstance(x, str)]


def workload_warnings(s: dict) -> list[str]:
    """What a run's workload silently changed (skipped or reordered trace rows,
    clipped prompts), from its summary, then where the run is outside the known
    ground (``summary["warnings"]``, :func:`ground_warnings`); printed by run,
    compare and plan, and in compare's report.md and plan's plan.md."""
    out = []
    if s.get("num_skipped_trace_rows"):
        out.append(f"{s['num_skipped_trace_rows']:,} malformed trace row(s) skipped (workload.skip_bad_rows): "
                   f"{s.get('workload_source', '')}")
    if s.get("num_out_of_order_trace_rows"):
        out.append(f"{s['num_out_of_order_trace_rows']:,} trace row(s) are timestamped before the row above "
                   f"them; the trace was sorted by time (duration {s.get('duration', float('nan')):,.0f} s): "
                   "check its time column")
    if s.get("num_clipped_prompts"):
        out.append(f"{s['num_clipped_prompts']:,} prompt(s) cut to fit max_model_len "
                   "(workload.clip_to_max_model_len)")
    wl = (s.get("config") or {}).get("workload") or {}
    if (wl.get("trace") and wl.get("arrival") is None and wl.get("request_rate") is None
            and wl.get("max_concurrency") is None and str(s.get("workload_source", "")).endswith("arrivals inf")):
        out.append("the trace has no timestamps and no workload.request_rate was given: every request was sent "
                   "at t = 0 (arrival inf); set workload.request_rate or workload.max_concurrency to pace them")
    if (wl.get("trace") and wl.get("max_concurrency") is not None and wl.get("request_rate") is None
            and wl.get("arrival") in (None, "trace") and str(s.get("workload_source", "")).endswith("arrivals trace")):
        out.append(f"the trace's timestamps are not used: with workload.max_concurrency "
                   f"{wl['max_concurrency']} and no request_rate the clients send back to back (a closed loop, as "
                   "vllm bench serve --max-concurrency at --request-rate inf); drop max_concurrency to replay "
                   "the timestamps")
    out += run_warning_list(s)
    return out


def comparison_warnings(summaries: dict[str, dict]) -> list[str]:
    """:func:`workload_warnings` of a comparison's variants: those every variant
    has once, then each variant's own (an engine release out of range, a
    transferred profile), named ``variant NAME: ...``; printed by compare and in
    its report.md."""
    per = {n: workload_warnings(s) for n, s in summaries.items()}
    common = [w for w in next(iter(per.values()), []) if all(w in ws for ws in per.values())]
    return common + [f"variant {n}: {w}" for n, ws in per.items() for w in ws if w not in common]


#: GEMM peak of each ``quantization`` (weights and activations in that format); else bf16
_PEAK_DTYPE = {"fp8": "fp8", "fp8_block": "fp8", "int8": "int8", "nvfp4": "fp4"}


def _deployment_gpus(cfg) -> int:
    """Replicas x DP ranks x TP of an aggregated config (``summary.json``'s
    ``num_gpus`` where a run has one, which counts disaggregated pools too)."""
    return cfg.tensor_parallel_size * getattr(cfg, "data_parallel_size", 1) * cfg.num_replicas


def compute_bound_tokens_per_s(cfg, hardware, model, num_gpus: int | None = None) -> float:
    """An upper bound on the tokens (prompt + output) per second any schedule can
    process: every token passes every linear layer (2 FLOPs per active weight),
    at most at the GEMM peak (of the weights' format: ``quantization``, else the
    checkpoint's) of all the deployment's GPUs: ``num_gpus``, else replicas x
    DP ranks x TP."""
    fmt = cfg.quantization or getattr(model, "quantization", None) or ""
    peak = hardware.peak_flops_per_s.get(_PEAK_DTYPE.get(fmt, "bf16"))
    if not peak:
        peak = hardware.peak_flops_per_s.get("bf16") or 0.0
    flops_per_token = 2.0 * model.quantizable_params(active_only=True)
    gpus = num_gpus or _deployment_gpus(cfg)
    return peak * gpus / flops_per_token if flops_per_token > 0 else float("inf")


def grid_warnings(hardware, limits, requests: dict, *, chunked_prefill: bool, attention_dp: int = 1,
                  is_moe: bool = False, steps: dict | None = None) -> list[str]:
    """Where a run's steps can reach beyond the shapes its profile's kernel
    families were fitted to (``efficiency.calibrated_grid``, written by
    ``calibration``): the fitted formulas extrapolate there. The run's shapes,
    from its simulated requests (``requests``: the request columns) and its
    scheduler limits: the longest prompt (context attention), the longest
    sequence (generation attention's context), the most tokens a step can batch
    (``max_num_batched_tokens``; without chunked prefill one whole prompt where it
    exceeds it; no more than ``max_num_seqs`` x the longest sequence; x ``data_parallel_size``
    for the experts, which see every attention rank's tokens) and the most
    sequences that can decode together. With ``steps`` (the run's step
    columns, ``steps.csv``) the most tokens and sequences a step really batched
    instead (a merged row of ``num_steps`` steps holds their totals), so that a
    configured limit no step reached warns nothing. Empty without a grid."""
    grid = getattr(hardware.efficiency, "calibrated_grid", None)
    status = requests.get("status")
    prompt = requests.get("num_prompt_tokens")
    if grid is None or prompt is None or status is None:
        return []
    stepped = status != STATUS_REJECTED
    if not stepped.any():
        return []
    prompt = prompt[stepped]
    longest_prompt = int(prompt.max())
    longest_seq = int((prompt + requests["num_output_tokens"][stepped]).max())
    ran = steps.get("num_batched_tokens") if steps is not None else None
    if ran is not None and len(ran):
        per = steps["num_steps"]  # tokens per step of a merged row: its total / its steps (ceil)
        step_tokens = int((-(-ran // per)).max())
        batch = int(steps["num_running_seqs"].max())
    else:
        budget = (limits.max_num_batched_tokens if chunked_prefill
                  else max(limits.max_num_batched_tokens, longest_prompt))
        step_tokens = min(budget, limits.max_num_seqs * longest_seq)
        batch = min(limits.max_num_seqs, int(stepped.sum()))
    checks = [("steps batch up to {:,} tokens", step_tokens, grid.gemm_max_tokens, "GEMM", "tokens"),
              ("prompts of up to {:,} tokens", longest_prompt, grid.context_attention_max_tokens,
               "context attention", "tokens"),
              ("sequences of up to {:,} tokens", longest_seq, grid.generation_attention_max_context,
               "generation attention", "tokens of context"),
              ("up to {:,} sequences decode together", batch, grid.generation_attention_max_batch,
               "generation attention", "sequences")]
    if is_moe:
        checks.append(("MoE layers take up to {:,} tokens a step", step_tokens * attention_dp,
                       grid.moe_max_tokens, "fused MoE", "tokens"))
    out = []
    for what, value, top, family, unit in checks:
        if top is not None and value > top:
            out.append(f"hardware profile {hardware.name}: {what.format(value)}, beyond the {top:,} {unit} its "
                       f"{family} kernels were calibrated to (efficiency.calibrated_grid): the fitted times "
                       "are extrapolated there")
    return out


def ground_warnings(cfg, hardware, model, summary: dict) -> list[str]:
    """Where a run is outside the ground servesim was checked on: a hardware
    profile whose kernel efficiencies were transferred from another GPU rather
    than fitted on this one (its ``provenance.efficiency_source``), an engine
    version outside the modelled releases (``sim/presets/versions.py``), a
    predicted throughput above the compute bound of the hardware
    (:func:`compute_bound_tokens_per_s`: a sign of an optimistic profile or a
    bug). Recorded in ``summary.json`` (``warnings``) and printed by run,
    compare and plan."""
    from sim.presets import version_warning

    out = transferred_profile_warnings([hardware])
    out += weight_only_warnings(hardware, cfg.quantization or getattr(model, "quantization", None))
    vw = version_warning(cfg.engine, cfg.engine_version)
    if vw:
        out.append(vw)
    gpus = summary.get("num_gpus") or _deployment_gpus(cfg)
    bound = compute_bound_tokens_per_s(cfg, hardware, model, gpus)
    tput = summary.get("total_token_throughput")
    if isinstance(tput, (int, float)) and tput > bound:
        out.append(f"predicted throughput {tput:,.0f} tokens/s exceeds the compute bound of "
                   f"{gpus} x {hardware.name} ({bound:,.0f} tokens/s at "
                   "the GEMM peak): the prediction is not physical; check the hardware profile")
    return out


def weight_only_warnings(hardware, quantization: str | None) -> list[str]:
    """Quantized weights whose fast tensor-core dtype the GPU lacks run weight-only
    (``sim.cost_model.roofline.gemm_precision``: vLLM's Marlin W8A16 / W4A16 kernels):
    their GEMMs at the 16-bit peak, said so rather than left to the reader."""
    from sim.cost_model.roofline import gemm_precision
    from sim.model_spec import normalize_quantization

    q = normalize_quantization(quantization) if quantization else None
    if q not in ("fp8", "fp8_block", "int8", "nvfp4", "mxfp4"):
        return []
    if gemm_precision(hardware, q).num_kernels > 1:  # (activations quantized: the fast peak)
        return []
    need = _PEAK_DTYPE.get(q, "fp4")  # (mxfp4: the fp4 peak too)
    return [f"{q} weights on {hardware.name}: no {need} tensor-core peak in its profile, so its GEMMs run "
            "weight-only at the 16-bit peak (as vLLM's Marlin kernels do on such GPUs)"]


def request_len_cap_warnings(pools: dict) -> list[str]:
    """A pool whose engine caps each request at its KV pool (``max_req_len``,
    SGLang's ``request_len_cap`` ``kv_pool``) rather than refusing a pool that
    cannot hold one ``max_model_len`` sequence: ``pools`` maps a label ("" for
    an aggregated deployment) to its ``KVSizing``."""
    out = []
    for label, sizing in pools.items():
        cap = sizing.max_req_len
        if cap is None:
            continue
        where = f"{label} pool: " if label else ""
        out.append(f"{where}the KV pool cannot hold one max_model_len {sizing.max_model_len} sequence, so the "
                   f"engine caps each request at max_req_len {cap} tokens (as SGLang does): prompts over {cap - 5} "
                   "tokens are rejected and max_tokens is cut to fit (requests.csv: max_tokens, reason)")
    return out


def transferred_profile_warnings(profiles) -> list[str]:
    """One warning per distinct profile among ``profiles`` whose kernel
    efficiencies were transferred from another GPU rather than fitted on it
    (its ``provenance.efficiency_source``): a disaggregated run names each pool's."""
    out, seen = [], set()
    for hardware in profiles:
        if hardware.name in seen:
            continue
        seen.add(hardware.name)
        if hardware.transferred_from is not None:  # "transferred from X[; tables in ... (refitted since)]"
            first, _, rest = str(hardware.provenance["efficiency_source"]).partition("; ")
            some = (f" (all but the families refitted since from {rest}: provenance.efficiency_families)"
                    if rest else "")
            out.append(f"hardware profile {hardware.name}: its kernel efficiencies were {first}{some}, not "
                       f"fitted on {hardware.name} measurements: predictions there are less certain than on a "
                       "calibrated GPU (calibrate on the GPU: calibration/run_on_gpu.sh)")
    return out
