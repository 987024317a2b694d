"""KV-cache equivalence check: the same results before and after a change to
``sim/kv_cache`` (or anything else that must not change a simulated
outcome). Not a timed test.

    python benchmarks/kv_equivalence.py --out /tmp/kv_before          # on the old code
    python benchmarks/kv_equivalence.py --out /tmp/kv_after --compare /tmp/kv_before

Runs :data:`CONFIGS` (block sizes 1, 2, 16, 32; prefix caching on and off;
engines vllm, sglang, trtllm; every batching mode; shared-prefix and
multi-turn workloads; preemption-heavy small KV caches; 1-3 replicas with
the prefix-aware router; the reference stepping; contiguous allocation) and
writes each one's ``summary.json``, ``requests.csv`` and ``steps.csv`` under
``--out/<name>/``. ``--compare`` then requires every file to be
byte-identical to the earlier run's, except the wall-clock fields of
``summary.json`` (:data:`WALL_FIELDS`), and exits 1 listing the differences.
Each config runs in its own process, ``--jobs`` at a time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WALL_FIELDS = ("wall_time_s", "sim_requests_per_wall_s", "date")

_BASE = {"model": "llama-3.1-8b", "hardware": "h100_sxm", "seed": 3,
         "workload.arrival": "poisson", "workload.request_rate": 8.0, "workload.num_requests": 300,
         "workload.input_len": {"dist": "lognormal", "mean": 1024, "sigma": 1.0, "min": 1, "max": 8192},
         "workload.output_len": {"dist": "lognormal", "mean": 256, "sigma": 1.0, "min": 1, "max": 2048},
         "workload.max_tokens": "output_len"}
_SHARED = {"workload.shared_prefix": {"fraction": 0.7, "num_prefixes": 3, "prefix_len": 512}}
_CONV = {"workload.name": "conversation", "workload.num_requests": 120, "workload.request_rate": 2.0}
_CONV_SMALL = {"workload.name": "conversation", "workload.num_requests": 80, "workload.request_rate": 2.0,
               "workload.input_len": {"dist": "lognormal", "mean": 2000, "sigma": 0.8, "min": 16, "max": 8000},
               "workload.conversation": {"fraction": 0.6, "num_turns": [2, 4], "think_time_s": 5,
                                         "turn_input_len": {"dist": "lognormal", "mean": 300, "sigma": 1.0,
                                                            "min": 1, "max": 4000}}}


def _cfg(**kw) -> dict:
    out = dict(_BASE)
    for k, v in kw.items():
        out[k.replace("__", ".")] = v
    return out


def _with(base: dict, **kw) -> dict:
    out = dict(base)
    for k, v in kw.items():
        out[k.replace("__", ".")] = v
    return out


#: name -> config overrides (``sim.config.build_config``)
CONFIGS: dict[str, dict] = {
    "vllm_bs16_apc": _cfg(engine="vllm"),
    "sglang_bs1_apc": _cfg(engine="sglang"),
    "trtllm_bs32_apc": _cfg(engine="trtllm"),
    "chunked_bs1_apc": _cfg(engine="vllm", block_size=1),
    "continuous_bs2_apc": _cfg(engine="vllm", scheduler="continuous", block_size=2),
    "chunked_bs16_off": _cfg(engine="vllm", enable_prefix_caching=False),
    "chunked_bs1_off": _cfg(engine="vllm", block_size=1, enable_prefix_caching=False),
    "static_bs16_apc": _cfg(engine="vllm", scheduler="static", workload__num_requests=150),
    "mixed_bs1_apc": _cfg(engine="trtllm", block_size=1),
    "prefill_first_bs2_off": _cfg(engine="sglang", block_size=2, enable_prefix_caching=False),
    "sglang_bs1_shared": _with(_cfg(engine="sglang"), **_SHARED),
    "vllm_bs16_shared": _with(_cfg(engine="vllm"), **_SHARED),
    "vllm_bs1_conversation": _with(_cfg(engine="vllm", block_size=1), **_CONV),
    "vllm_bs16_conv_preempt": _with(_cfg(engine="vllm", max_model_len=10000, num_gpu_blocks_override=900), **_CONV_SMALL),
    "sglang_bs1_conv_preempt": _with(_cfg(engine="sglang", max_model_len=10000, num_gpu_blocks_override=14000), **_CONV_SMALL),
    "chunked_bs1_conv_preempt": _with(_cfg(engine="vllm", block_size=1, max_model_len=10000, num_gpu_blocks_override=12000),
                                      **_CONV_SMALL),
    "sglang_bs1_shared_preempt": _with(_cfg(engine="sglang", max_model_len=10000, num_gpu_blocks_override=12000,
                                            workload__request_rate=20.0), **_SHARED),
    "chunked_bs2_apc_preempt": _cfg(engine="vllm", block_size=2, max_model_len=10000, num_gpu_blocks_override=6000,
                                    workload__request_rate=20.0),
    "continuous_bs16_apc_preempt_wm": _cfg(engine="vllm", scheduler="continuous", max_model_len=10000, num_gpu_blocks_override=700,
                                           watermark=0.01, workload__request_rate=20.0),
    "trtllm_bs1_maxutil_preempt": _cfg(engine="trtllm", block_size=1, max_model_len=10000, num_gpu_blocks_override=12000,
                                       capacity_scheduler_policy="max_utilization", workload__request_rate=20.0),
    "chunked_bs1_off_preempt": _cfg(engine="vllm", block_size=1, enable_prefix_caching=False,
                                    max_model_len=10000, num_gpu_blocks_override=10001, workload__request_rate=20.0),
    "prefix_aware_3rep_bs1_shared": _with(_cfg(engine="sglang", num_replicas=3, router="prefix_aware",
                                               workload__request_rate=20.0), **_SHARED),
    "prefix_aware_2rep_bs16_conv": _with(_cfg(engine="vllm", num_replicas=2, router="prefix_aware"),
                                         **_CONV_SMALL),
    "exact_sglang_bs1_shared_preempt": _with(_cfg(engine="sglang", exact_steps=True, max_model_len=10000, num_gpu_blocks_override=12000,
                                                  workload__num_requests=150, workload__request_rate=20.0),
                                             **_SHARED),
    "exact_vllm_bs1_conv_preempt": _with(_cfg(engine="vllm", block_size=1, exact_steps=True,
                                              max_model_len=10000, num_gpu_blocks_override=12000), **_CONV_SMALL),
    "contiguous_bs16": _cfg(engine="vllm", kv_allocation="contiguous", enable_prefix_caching=False,
                            max_model_len=10000, num_gpu_blocks_override=3000, workload__num_requests=150),
}


def run_one(name: str, out: Path) -> float:
    """Run config ``name`` in this process, write its results; returns wall s."""
    from sim.config import build_config
    from sim.results.output import write_results
    from sim.runner import run_simulation

    t0 = time.perf_counter()
    res = run_simulation(build_config(overrides=CONFIGS[name]))
    write_results(out / name, res.summary, res.result)
    return time.perf_counter() - t0


def _strip_wall(text: str) -> dict:
    d = json.loads(text)
    for k in WALL_FIELDS:
        d.pop(k, None)
    return d


def compare(out: Path, base: Path, names) -> list[str]:
    """Differences between two runs' outputs (empty: identical)."""
    diffs = []
    for name in names:
        for f in ("summary.json", "requests.csv", "steps.csv"):
            a, b = out / name / f, base / name / f
            if not b.exists():
                diffs.append(f"{name}/{f}: missing in {base}")
                continue
            if f == "summary.json":
                same = _strip_wall(a.read_text()) == _strip_wall(b.read_text())
            else:
                same = a.read_bytes() == b.read_bytes()
            if not same:
                diffs.append(f"{name}/{f} differs")
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for the results (one subfolder per config)")
    ap.add_argument("--compare", type=Path, help="an earlier --out folder that every output must equal")
    ap.add_argument("--only", help="comma-separated config names (default: all)")
    ap.add_argument("--jobs", type=int, default=2, help="configs run in parallel (default 2)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run this config here
    args = ap.parse_args()
    if args.one:
        print(f"{run_one(args.one, args.out):.2f}")
        return
    names = args.only.split(",") if args.only else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        ap.error(f"unknown configs: {', '.join(unknown)}")

    def job(name):
        r = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--one", name],
                           capture_output=True, text=True, cwd=ROOT)
        if r.returncode:
            return name, None, r.stderr[-2000:]
        return name, float(r.stdout.strip().splitlines()[-1]), ""

    failed = False
    with ThreadPoolExecutor(max(1, args.jobs)) as ex:
        for name, wall, err in ex.map(job, names):
            if wall is None:
                failed = True
                print(f"{name}: FAILED\n{err}", file=sys.stderr)
            else:
                print(f"{name}: {wall:.2f} s", file=sys.stderr)
    if failed:
        sys.exit(2)
    if args.compare:
        diffs = compare(args.out, args.compare, names)
        if diffs:
            print("\n".join(diffs))
            sys.exit(1)
        print(f"all {len(names)} configs identical to {args.compare}")


if __name__ == "__main__":
    main()
