"""Bit-identity check for scheduler changes (not a timed test).

Runs a fixed set of configs and writes each one's ``summary.json``,
``requests.csv`` and ``steps.csv`` as ``servesim run --out`` does. Most
exercise TensorRT-LLM's ``capacity_scheduler_policy`` (``guaranteed_no_evict``
and ``max_utilization``: the ``trtllm`` engine preset, small KV caches via
``num_gpu_blocks_override`` to force pressure, ``mixed``/``chunked``/
``continuous``/``static`` schedulers, prefix caching on and off, shared
prefixes, ``max_tokens`` above and below the true output length, contiguous
allocation, priority queues, several replicas, long queues of short requests,
the reference ``exact_steps`` mode); the ``vllm_*`` ones run vLLM's own
admission and preemption with prefix caching on. Use it around a change that
must not alter results::

    git stash; python benchmarks/scheduler_equivalence.py --save /tmp/before
    git stash pop; python benchmarks/scheduler_equivalence.py --check /tmp/before

``--check`` exits 1 unless every file is byte-identical, except the wall-clock
fields of ``summary.json`` (``wall_time_s``, ``sim_requests_per_wall_s``).
``--only NAME`` (repeatable) runs a subset.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

WALL_FIELDS = ("wall_time_s", "sim_requests_per_wall_s", "date")

_BASE = {"model": "llama-3.1-8b", "hardware": "h100_sxm", "seed": 0, "engine": "trtllm", "max_model_len": 6144}
_LOGN = {"dist": "lognormal", "mean": 600, "sigma": 0.8, "min": 8, "max": 4096}
_LOGN_OUT = {"dist": "lognormal", "mean": 120, "sigma": 0.7, "min": 1, "max": 1024}


def _wl(n: int, rate: float | None = None, **kw) -> dict:
    d = {"workload.num_requests": n, "workload.input_len": _LOGN, "workload.output_len": _LOGN_OUT}
    if rate is None:
        d["workload.arrival"] = "inf"
    else:
        d["workload.arrival"] = "poisson"
        d["workload.request_rate"] = rate
    d.update({f"workload.{k}": v for k, v in kw.items()})
    return d


#: name -> overrides on top of ``_BASE`` (engine trtllm: mixed scheduler,
#: guaranteed_no_evict, block 32, prefix caching on, overlap scheduling;
#: ``engine: vllm`` switches to vLLM's defaults).
CONFIGS: dict[str, dict] = {
    "trtllm_defaults": {**_wl(400, 20.0)},
    "trtllm_inf_queue": {**_wl(1500)},
    "trtllm_small_kv": {**_wl(400, 30.0), "num_gpu_blocks_override": 300},
    "trtllm_small_kv_no_cache": {**_wl(400), "num_gpu_blocks_override": 250, "enable_prefix_caching": False},
    "trtllm_max_tokens_above": {**_wl(400, 25.0, max_tokens=512), "num_gpu_blocks_override": 600},
    "trtllm_max_tokens_below": {**_wl(400, 25.0, max_tokens=64), "num_gpu_blocks_override": 200},
    "trtllm_shared_prefix": {**_wl(400, 25.0, shared_prefix={"prefix_len": 500, "num_prefixes": 3}),
                             "num_gpu_blocks_override": 300},
    "noevict_chunked_small_kv": {**_wl(400, 30.0), "scheduler": "chunked", "num_gpu_blocks_override": 300,
                                 "max_num_batched_tokens": 2048},
    "noevict_chunked_threshold": {**_wl(400), "scheduler": "chunked", "num_gpu_blocks_override": 400,
                                  "long_prefill_token_threshold": 256, "enable_prefix_caching": False},
    "noevict_continuous": {**_wl(300, 20.0), "scheduler": "continuous", "num_gpu_blocks_override": 250},
    "noevict_static": {**_wl(300), "scheduler": "static", "num_gpu_blocks_override": 400,
                       "max_num_seqs": 32},
    "noevict_priority": {**_wl(400, 30.0, priority_classes=[{"fraction": 0.3, "priority": 0},
                                                            {"fraction": 0.7, "priority": 1}]),
                         "policy": "priority", "num_gpu_blocks_override": 300},
    "noevict_contiguous": {**_wl(300, 20.0, max_tokens=256), "kv_allocation": "contiguous",
                           "contiguous_reserve": "max_tokens", "num_gpu_blocks_override": 500,
                           "enable_prefix_caching": False},
    "noevict_exact_steps": {**_wl(300, 30.0), "num_gpu_blocks_override": 300, "exact_steps": True},
    "noevict_two_replicas": {**_wl(500, 40.0), "num_replicas": 2, "router": "least_outstanding_requests",
                             "num_gpu_blocks_override": 300},
    "trtllm_short_inf_3000": {**_wl(3000, input_len=64, output_len=16)},
    "trtllm_short_inf_small_kv": {**_wl(3000, input_len={"dist": "uniform", "low": 16, "high": 200},
                                        output_len={"dist": "uniform", "low": 1, "high": 64}, max_tokens=48),
                                  "num_gpu_blocks_override": 400, "max_num_seqs": 256},
    "noevict_chunked_short_exact": {**_wl(1500, input_len={"dist": "uniform", "low": 16, "high": 300},
                                          output_len={"dist": "uniform", "low": 1, "high": 80}),
                                    "scheduler": "chunked", "num_gpu_blocks_override": 300,
                                    "exact_steps": True, "enable_prefix_caching": False},
    "maxutil_mixed_small_kv": {**_wl(400, 30.0), "capacity_scheduler_policy": "max_utilization",
                               "num_gpu_blocks_override": 250},
    "maxutil_chunked_cache": {**_wl(400, 25.0, shared_prefix={"prefix_len": 400, "num_prefixes": 2}),
                              "scheduler": "chunked", "capacity_scheduler_policy": "max_utilization",
                              "num_gpu_blocks_override": 250, "max_num_batched_tokens": 2048},
    "maxutil_chunked_no_cache_inf": {**_wl(600), "scheduler": "chunked",
                                     "capacity_scheduler_policy": "max_utilization",
                                     "enable_prefix_caching": False, "num_gpu_blocks_override": 200},
    "maxutil_exact_steps": {**_wl(300, 30.0, max_tokens=300), "capacity_scheduler_policy": "max_utilization",
                            "num_gpu_blocks_override": 200, "exact_steps": True},
    # vLLM's rules (capacity_scheduler_policy unset), prefix caching on
    "vllm_chunked_cache_preempt": {**_wl(500, 30.0, shared_prefix={"prefix_len": 300, "num_prefixes": 3}),
                                   "engine": "vllm", "num_gpu_blocks_override": 400},
    "vllm_priority_cache_preempt": {**_wl(400, 40.0, priority_classes=[{"fraction": 0.5, "priority": 0},
                                                                       {"fraction": 0.5, "priority": 1}]),
                                    "engine": "vllm", "policy": "priority", "num_gpu_blocks_override": 400},
    "vllm_mixed_cache_exact": {**_wl(300, 25.0), "engine": "vllm", "scheduler": "mixed",
                               "num_gpu_blocks_override": 500, "exact_steps": True},
    "vllm_short_inf_cache": {**_wl(3000, input_len={"dist": "uniform", "low": 16, "high": 300},
                                   output_len={"dist": "uniform", "low": 1, "high": 200},
                                   shared_prefix={"prefix_len": 64, "num_prefixes": 4, "fraction": 0.5}),
                             "engine": "vllm", "num_gpu_blocks_override": 1200},
    "vllm_continuous_cache": {**_wl(300, 25.0), "engine": "vllm", "scheduler": "continuous",
                              "num_gpu_blocks_override": 500},
}


def run_config(name: str, out: Path) -> float:
    """Run config ``name`` and write its results under ``out``; returns the wall time (s)."""
    from sim.config import build_config
    from sim.results.output import write_results
    from sim.runner import run_simulation

    cfg = build_config(overrides={**_BASE, **CONFIGS[name]})
    t0 = time.perf_counter()
    res = run_simulation(cfg)
    wall = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    write_results(out, res.summary, res.result)
    return wall


def _normalised(path: Path) -> bytes:
    if path.name != "summary.json":
        return path.read_bytes()
    d = json.loads(path.read_text())
    for k in WALL_FIELDS:
        d.pop(k, None)
    return json.dumps(d, sort_keys=True, indent=1).encode()


def differences(ref: Path, new: Path) -> list[str]:
    """Files of ``ref`` that ``new`` lacks or that differ (first differing line named)."""
    bad = []
    for f in sorted(ref.iterdir()):
        g = new / f.name
        if not g.exists():
            bad.append(f"{f.name}: missing")
            continue
        a, b = _normalised(f), _normalised(g)
        if a != b:
            la, lb = a.splitlines(), b.splitlines()
            i = next((i for i, (x, y) in enumerate(zip(la, lb)) if x != y), min(len(la), len(lb)))
            bad.append(f"{f.name}: line {i + 1} differs ({len(la)} vs {len(lb)} lines)")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", type=Path, help="write every config's results under DIR/NAME/")
    g.add_argument("--check", type=Path, help="compare against results saved with --save")
    ap.add_argument("--only", action="append", choices=sorted(CONFIGS), help="run only these configs")
    args = ap.parse_args()
    names = args.only or list(CONFIGS)
    failed = 0
    for name in names:
        if args.save:
            wall = run_config(name, args.save / name)
            print(f"{name}: saved ({wall:.2f} s)")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            wall = run_config(name, Path(tmp))
            bad = differences(args.check / name, Path(tmp))
        failed += bool(bad)
        print(f"{name}: {'DIFFERS: ' + '; '.join(bad) if bad else 'identical'} ({wall:.2f} s)")
    if args.check:
        print(f"{len(names) - failed}/{len(names)} configs identical")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
