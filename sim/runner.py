"""One simulation from a config: resolve, generate the workload, simulate,
summarise. The CLI's ``run`` and ``compare`` are thin layers over this."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sim import __version__
from sim.accelerated import AcceleratedStepping
from sim.config import SimConfig, locate_error, scheduler_limit_warnings
from sim.engine.deployment import Deployment, build_deployment
from sim.engine.simulation import Simulation
from sim.model_spec import normalize_quantization
from sim.presets.versions import simulated_release
from sim.results.bench import bench_header
from sim.errors import ConfigError, InfeasibleError
from sim.results.run_result import RunResult
from sim.results.metrics import PERCENTILE_METRICS, summarize
from sim.results.intervals import summary_intervals
from sim.results.pools import pool_summary
from sim.results.warnings import (grid_warnings, ground_warnings, request_len_cap_warnings,
                                  transferred_profile_warnings)
from sim.scheduler import get_scheduler_class
from sim.workload import RequestSpecs, generate_requests

log = logging.getLogger(__name__)


@dataclass
class RunOutput:
    summary: dict
    result: RunResult
    deployment: Deployment
    specs: RequestSpecs
    wall_s: float


def make_specs(dep: Deployment) -> RequestSpecs:
    cfg = dep.cfg
    return generate_requests(cfg.workload, seed=cfg.seed, max_model_len=dep.limits.max_model_len)


def make_simulation(dep: Deployment, specs: RequestSpecs, *, progress=None) -> Simulation:
    """The simulation of ``dep`` on ``specs``: the reference mode with
    ``exact_steps``, else with the accelerated stepping (same results; it serves
    only the policies that declare it, :mod:`sim.accelerated.policies`)."""
    cfg = dep.cfg
    # disaggregated runs (two pools, KV transfers), DP groups (attention data parallelism),
    # hybrid KV caches (per-group block tables, sim/kv_cache/hybrid.py) and SGLang's
    # scheduler_recv_interval (arrivals held for a count of passes) use the reference
    # stepping: the accelerated one is not taught them
    stepping = (None if cfg.exact_steps or dep.disagg is not None or dep.layout.attention_dp
                or cfg.scheduler_recv_interval > 1 or not accelerated_stepping_supported(dep)
                else AcceleratedStepping)
    return Simulation(dep, specs, seed=cfg.seed, progress=progress, stepping=stepping)


def accelerated_stepping_supported(dep: Deployment) -> bool:
    """False for a KV cache the accelerated stepping cannot represent:
    vLLM's hybrid manager (``dep.sizing.hybrid``: sliding-window groups free
    blocks while a request runs, which merged steps' bulk growth does not
    model) — declared, never wrong numbers."""
    return not dep.sizing.hybrid


def prepare(cfg: SimConfig, specs: RequestSpecs | None = None) -> tuple[Deployment, RequestSpecs]:
    """The deployment of ``cfg`` and its workload's requests (``specs`` when given):
    every check of the config a run makes before simulating -- the engine keys and
    the workload's (trace files and rows, lengths). ConfigError / InfeasibleError
    naming where the offending key was set (:func:`sim.config.locate_error`).
    ``servesim kv`` calls it too, so that a config ``run`` refuses, ``kv`` refuses."""
    try:
        dep = build_deployment(cfg)
        if specs is None:
            specs = make_specs(dep)
    except (ConfigError, InfeasibleError) as e:
        raise type(e)(locate_error(cfg, str(e))) from None
    return dep, specs


def run_simulation(cfg: SimConfig, *, goodput: dict[str, float] | None = None, specs: RequestSpecs | None = None,
                   progress=None, percentiles: tuple[float, ...] = (),
                   percentile_metrics: tuple[str, ...] = PERCENTILE_METRICS) -> RunOutput:
    """Raises ConfigError / InfeasibleError before simulating when the config is bad.

    The summary starts with ``vllm bench serve --save-result``'s keys
    (:func:`sim.results.bench.bench_header`: ``date``, ``backend``, ``model_id``,
    ``num_prompts``, ``request_rate``, ...); ``percentiles`` (``--metric-percentiles``)
    add ``p{P}_{metric}_ms`` keys for ``percentile_metrics``."""
    dep, specs = prepare(cfg, specs)
    if progress is not None and hasattr(progress, "set_total"):
        progress.set_total(len(specs))  # the bar shows a total and an ETA
    log.info("simulating %s on %s (%s, TP %d x %d replicas, %d KV blocks): %d requests from %s",
             cfg.model, cfg.hardware, cfg.scheduler, cfg.tensor_parallel_size, cfg.num_replicas,
             dep.sizing.num_gpu_blocks, len(specs), specs.source)
    t0 = time.perf_counter()
    result = make_simulation(dep, specs, progress=progress).run()
    wall = time.perf_counter() - t0
    log.info("simulated %.1f s in %.2f s wall: %d engine steps in %d events", result.sim_time_s, wall,
             result.num_steps, result.num_events)
    summary = summarize(result.requests, result.steps, result.itl, goodput=goodput,
                        num_gpu_blocks=dep.sizing.num_gpu_blocks,
                        kv_reserved_unused_fraction=result.kv_reserved_unused_fraction,
                        percentiles=percentiles, percentile_metrics=percentile_metrics)
    if dep.disagg is not None:
        pools = dep.disagg
        summary.update(pool_summary(result.requests, result.steps, duration=summary["duration"],
                                    num_workers={"prefill": pools.prefill.cfg.num_replicas,
                                                 "decode": pools.decode.cfg.num_replicas},
                                    ranks_per_worker={"prefill": pools.prefill.layout.data_parallel_size,
                                                      "decode": pools.decode.layout.data_parallel_size}))
        tp_p, tp_d = pools.prefill.cfg.tensor_parallel_size, pools.decode.cfg.tensor_parallel_size
        summary["prefill_tensor_parallel_size"], summary["decode_tensor_parallel_size"] = tp_p, tp_d
        summary["num_gpus"] = pools.prefill.num_gpus + pools.decode.num_gpus  # workers x DP ranks x TP
        if pools.prefill.layout.attention_dp or pools.decode.layout.attention_dp or \
                pools.prefill.layout.moe_ep_size > 1 or pools.decode.layout.moe_ep_size > 1:
            summary["prefill_parallel_layout"] = pools.prefill.layout.describe()
            summary["decode_parallel_layout"] = pools.decode.layout.describe()
        summary["prefill_num_gpu_blocks"] = pools.prefill.sizing.num_gpu_blocks
        summary["decode_num_gpu_blocks"] = pools.decode.sizing.num_gpu_blocks
        summary.update(pools.transfer.describe())
    summary["num_engine_steps"] = result.num_steps
    summary["num_events"] = result.num_events
    summary["simulated_time_s"] = result.sim_time_s
    summary["wall_time_s"] = wall
    summary["sim_requests_per_wall_s"] = len(specs) / wall if wall > 0 else float("inf")
    summary["workload_source"] = specs.source
    summary["num_skipped_trace_rows"] = specs.num_skipped_rows
    summary["num_out_of_order_trace_rows"] = specs.num_out_of_order_rows
    summary["num_clipped_prompts"] = specs.num_clipped
    if dep.disagg is None:
        summary["num_gpus"] = dep.num_gpus  # replicas x DP ranks x TP
        summary["parallel_layout"] = dep.layout.describe()
    summary["config"] = dep.cfg.model_dump(mode="json")
    wl = summary["config"]["workload"]
    # the named workload's keys, under its name (the expansion consumed workload.name)
    wl["name"] = wl.pop("expanded_from") or wl["name"]
    # the weights' precision the cost model used: quantization, else the checkpoint's, else dtype
    summary["weight_precision"] = normalize_quantization(dep.cfg.quantization or dep.model.quantization,
                                                         dep.model.dtype)
    # the modelled release whose behaviour ran: engine_version's nearest, else the preset's newest
    summary["engine_release"] = simulated_release(dep.cfg.engine, dep.cfg.engine_version)
    summary["servesim_version"] = __version__
    chunked = get_scheduler_class(dep.cfg.scheduler).chunked_prefill
    limit_warnings = [] if dep.disagg is not None else scheduler_limit_warnings(cfg, dep.cfg, chunked)
    sizings = ({"": dep.sizing} if dep.disagg is None
               else {"prefill": dep.disagg.prefill.sizing, "decode": dep.disagg.decode.sizing})
    limit_warnings += request_len_cap_warnings(sizings)
    if dep.disagg is not None and dep.disagg.prefill.hardware.name != dep.hardware.name:
        limit_warnings += transferred_profile_warnings([dep.disagg.prefill.hardware])  # (the decode pool's below)
    summary["warnings"] = limit_warnings + ground_warnings(dep.cfg, dep.hardware, dep.model, summary) + grid_warnings(
        dep.hardware, dep.limits, result.requests, attention_dp=dep.layout.data_parallel_size,
        is_moe=dep.model.is_moe, chunked_prefill=chunked, steps=result.steps)
    # the nominal 80 % interval of the mean TTFT / TPOT from cross-validated residuals: of aggregated
    # rows only (no disaggregated row is in the cross-validation: reports/disagg-validation/ scores them)
    if dep.disagg is None:
        summary.update(summary_intervals(dep.cfg.engine, summary))
    measured = len(specs) - specs.num_warmup
    summary = {**bench_header(summary["config"], measured), **summary}
    return RunOutput(summary, result, dep, specs, wall)
