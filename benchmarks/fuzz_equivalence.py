"""Equivalence fuzzer: the accelerated stepping against the reference mode.

DESIGN.md: "The reference stepping is the specification. Accelerated stepping
[...] is bit-identical to the reference." This fuzzer is that contract, run
long: it draws random valid configs (schedulers, engine presets, KV cache sizes
that force preemption, prefix caching, block sizes, overlap scheduling, CPU and
frontend overheads, replicas and routers, open and closed loop, shared
prefixes, conversations, traces), runs each with ``exact_steps: true`` (one
SimPy event per engine step) and ``false`` (merged decode runs and spans), and
compares:

- ``RunResult.num_steps`` (engine steps, merged rows counted per step);
- every per-request column, bit for bit (timestamps, token counts, cached
  tokens, preemptions, preempted time, replica, status) and the rejection reasons;
- the ITL samples as a weighted distribution (gaps sorted, equal gaps merged,
  weights summed), bit for bit, and the summary's ITL median and percentiles
  from them as each mode recorded them, bit for bit (its mean and std: float
  sums over samples pooled differently, to rounding, as below);
- per-replica step totals (batched / prefill / decode tokens, preempted, steps)
  and the peak KV usage and queue, exactly;
- the time-weighted step aggregates (mean KV usage, mean running sequences,
  mean queue, contiguous reserved-unused fraction): these are sums over rows
  of different widths, so they agree to rounding (README: ~1e-13); a relative
  difference over ``AGG_RTOL`` is a mismatch, below it is counted as rounding.

    python benchmarks/fuzz_equivalence.py --num 2000 --seed 0 --workers 2 --out fuzz_mismatches.jsonl
    python benchmarks/fuzz_equivalence.py --replay fuzz_mismatches.jsonl
    python benchmarks/fuzz_equivalence.py --minimize fuzz_mismatches.jsonl --out minimized.jsonl

Every config is a flat dict of config keys (``sim.config.build_config``
overrides, dotted workload keys), so a mismatch line is replayable as is. A
config refused with ConfigError / InfeasibleError is counted as skipped; any
other exception (in either mode) is reported as an error, like a mismatch.
Config ``i`` of seed ``S`` is drawn from ``random.Random(S * 1_000_003 + i)``:
``--num``/``--workers`` do not change which configs are drawn.

A mismatch is classified ``semantic`` (a different schedule: steps, tokens,
preemptions, rejections, or times off by more than rounding) or ``ulp`` (only
timestamps and the ITL gaps from them, off by float rounding; still a mismatch:
the contract is bit-identity). ``--minimize`` shrinks each config greedily
(drop keys, fewer requests, simpler lengths) while it keeps the same kind of
mismatch in a common field.

Not a timed test; ``tests/test_accelerated_equivalence.py`` runs the same
drawing code under hypothesis.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sim.paths import shared_dir  # noqa: E402 (after the path setup)

#: small slices of the real traces are drawn when this folder holds them
TRACES_DIR = shared_dir() / "traces"

#: Relative tolerance for time-weighted step aggregates (sums over rows of
#: different widths: rounding only). Everything else is compared exactly.
AGG_RTOL = 1e-11
#: A timestamp off by at most this x max(1 s, the run's last finish) is float
#: rounding (a few ulps), not a different schedule: such mismatches are
#: classified ``ulp`` (still mismatches: the contract is bit-identity).
ULP_ATOL = 1e-13
TIME_COLUMNS = ("arrival_time_s", "first_scheduled_time_s", "first_token_time_s", "finish_time_s", "preempted_s")

SCHEDULERS = ("chunked", "continuous", "static", "mixed", "prefill_first", "prefill_first_whole")
#: whole prompts: without an engine (or with vllm), vLLM's rule needs a budget >= max_model_len
WHOLE_PROMPT_MODES = ("continuous", "static", "mixed", "prefill_first_whole")
ROUTERS = ("round_robin", "least_outstanding_requests", "random", "prefix_aware")
#: model -> (hardware, tensor_parallel_size) pairs where it fits with KV room
MODEL_HW = {
    "llama-3.1-8b": [("h100_sxm", 1), ("h200_sxm", 1), ("a100_sxm", 1), ("l40s", 1), ("h100_sxm", 2)],
    "qwen3-0.6b": [("h100_sxm", 1), ("l40s", 1)],
    "qwen3-8b": [("h100_sxm", 1), ("h200_sxm", 1)],
    "mistral-7b-v0.3": [("h100_sxm", 1), ("a100_sxm", 1)],
    "qwen3-30b-a3b": [("h100_sxm", 2), ("h200_sxm", 1)],
    "mixtral-8x7b": [("h100_sxm", 2), ("h200_sxm", 1)],
    "llama-3.1-70b": [("h100_sxm", 4), ("h200_sxm", 2)],
}
FP8_HW = ("h100_sxm", "h200_sxm")
#: SGLang / vLLM / TensorRT-LLM fitted overheads (sim/presets/engines.py FITTED), used with an engine preset
FITTED_OVERHEADS = {
    "vllm": {"cpu_step_overhead_s": 0.5e-3, "cpu_seq_overhead_s": 40e-6, "frontend_latency_s": 5e-3,
             "frontend_token_s": 80e-6},
    "sglang": {"cpu_step_overhead_s": 0.0, "cpu_seq_overhead_s": 40e-6, "frontend_latency_s": 80e-3,
               "frontend_token_s": 50e-6},
    "trtllm": {"cpu_step_overhead_s": 0.5e-3, "cpu_seq_overhead_s": 60e-6, "frontend_latency_s": 10e-3,
               "frontend_token_s": 80e-6},
}
ENGINE_BLOCK = {"vllm": 16, "trtllm": 32, "sglang": 1}


# ----------------------------------------------------------------------------- drawing
def _r(x: float, digits: int = 4) -> float:
    """A float rounded to ``digits`` significant digits (readable, replayable JSON)."""
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits}g}")


def _loguniform(r: random.Random, lo: float, hi: float) -> float:
    return _r(math.exp(r.uniform(math.log(lo), math.log(hi))))


def _length_spec(r: random.Random, lo: int, hi: int) -> Any:
    """A length spec with values in [lo, hi]."""
    lo, hi = max(1, lo), max(1, lo, hi)
    kind = r.choice(["fixed", "uniform", "uniform", "lognormal", "lognormal"])
    if kind == "fixed":
        v = r.randint(lo, hi)
        return v if r.random() < 0.5 else {"dist": "fixed", "value": v}
    if kind == "uniform":
        a, b = sorted((r.randint(lo, hi), r.randint(lo, hi)))
        return {"dist": "uniform", "low": a, "high": b}
    mean = r.randint(lo, max(lo, (lo + hi) // 2))
    return {"dist": "lognormal", "mean": mean, "sigma": r.choice([0.3, 0.6, 1.0]), "min": lo, "max": hi}


def _trace_workload(r: random.Random, n: int, serial: bool) -> dict[str, Any] | None:
    """A small slice of a trace in ``TRACES_DIR``, or None when none is there.
    ``serial``: requests will run a few at a time (fewer of the long ones)."""
    files = {
        "azure": TRACES_DIR / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv",
        "splitwise": TRACES_DIR / "vidur" / "splitwise_code.csv",
        "mooncake": TRACES_DIR / "mooncake_fast25" / "conversation_trace.jsonl",
        "sharegpt": TRACES_DIR / "etalon" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
        "arxiv": TRACES_DIR / "vidur" / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
        "bwb": TRACES_DIR / "etalon" / "bwb_stats_llama2_tokenizer_filtered_v2.csv",
    }
    have = [k for k, p in files.items() if p.is_file()]
    if not have:
        return None
    name = r.choice(have)
    if serial or name == "bwb":  # bwb: ~1,400 output tokens a request
        n = min(n, 20 if serial and name in ("bwb", "mooncake") else 40 if serial else 60)
    wl: dict[str, Any] = {"workload.trace": str(files[name]), "workload.num_requests": n,
                          "workload.clip_to_max_model_len": r.random() < 0.8}
    if name in ("azure", "splitwise", "mooncake"):
        # timestamps: a window well inside the trace (~2.5-3.4 req/s), sped up
        start = r.choice([0, 300, 900, 1500, 2400])
        wl["workload.window_s"] = [start, start + 1000]
        wl["workload.speedup"] = r.choice([1.0, 2.0, 5.0, 20.0])
        if name == "mooncake" and r.random() < 0.7:
            wl["workload.jitter_s"] = 3.0
    else:  # lengths only: an arrival process
        wl["workload.arrival"] = r.choice(["poisson", "gamma", "constant"])
        wl["workload.request_rate"] = _loguniform(r, 1.0, 200.0)
        if wl["workload.arrival"] == "gamma":
            wl["workload.burstiness"] = r.choice([0.25, 0.5, 2.0])
        if r.random() < 0.3:
            wl["workload.sample_fraction"] = r.choice([0.1, 0.5])
    return wl


def draw_config(r: random.Random, *, max_requests: int = 200, traces: bool = True,
                focus: str | None = None) -> dict[str, Any]:
    """A random valid config (flat ``build_config`` overrides) drawn from ``r``
    (any ``random.Random``-like object: hypothesis's ``st.randoms()`` too);
    ``focus``: one of :data:`FOCUS`, narrowing it to where that path runs."""
    c = _draw_config(r, max_requests=max_requests, traces=traces)
    if focus is not None:
        FOCUS[focus](c, r)
    return c


def _focus_chunked_spans(c: dict[str, Any], r: random.Random) -> None:
    """Where free-running decode spans take prompts over the step's token budget
    (``AcceleratedStepping._chunk_join``; a random config reaches it ~1 % of the
    time): one replica in open loop (the span sends the arrivals itself),
    ``chunked`` over an FCFS queue, no overlap scheduling, long-prefill
    threshold or TensorRT-LLM capacity policy, a budget of 32-512 tokens."""
    for k in ("engine", "policy", "long_prefill_token_threshold", "capacity_scheduler_policy", "router",
              "overlap_scheduling", "enable_chunked_prefill", "workload.max_concurrency", "client_think_time_s",
              "client_start_spread_s", "workload.priority_classes"):
        c.pop(k, None)
    c["scheduler"] = "chunked"
    c["num_replicas"] = 1
    if c.get("workload.arrival") in (None, "inf") and "workload.trace" not in c:
        c["workload.arrival"] = "poisson"
        c["workload.request_rate"] = _loguniform(r, 0.5, 50.0)
    c["max_num_batched_tokens"] = max(c.get("max_num_seqs") or 16, r.choice([32, 64, 128, 256, 512]))
    c["max_num_seqs"] = min(c.get("max_num_seqs") or 256, c["max_num_batched_tokens"])


#: ``--focus``: draws narrowed to one accelerated path
FOCUS = {"chunked-spans": _focus_chunked_spans}


def _draw_config(r: random.Random, *, max_requests: int, traces: bool) -> dict[str, Any]:
    c: dict[str, Any] = {"seed": r.randint(0, 10_000)}
    model = r.choice(["llama-3.1-8b"] * 6 + [m for m in MODEL_HW if m != "llama-3.1-8b"])
    hw, tp = r.choice(MODEL_HW[model])
    c.update({"model": model, "hardware": hw, "tensor_parallel_size": tp})
    if hw in FP8_HW and r.random() < 0.2:
        c["quantization"] = "fp8"
    if r.random() < 0.1:
        c["kv_cache_dtype"] = "fp8"

    engine = r.choice([None, None, None, "vllm", "sglang", "trtllm"])
    # request sizes first: max_model_len just above them lets a small KV cache force preemption
    size = r.choice(["short", "short", "medium", "medium", "long"])
    hi_in0, hi_out0 = {"short": (256, 64), "medium": (1024, 256), "long": (5000, 512)}[size]
    if r.random() < 0.6:
        mml = min(m for m in (512, 1024, 2048, 4096, 8192) if m >= 1.1 * (hi_in0 + hi_out0) or m == 8192)
    else:
        mml = r.choice([1024, 2048, 4096, 8192])
    c["max_model_len"] = mml
    if engine is not None:
        # every preset default left on (scheduler, prefix caching, overlap, page size, admission)
        c["engine"] = engine
        block = ENGINE_BLOCK[engine]
        if r.random() < 0.2:
            c["enable_chunked_prefill"] = False  # the engine's own whole-prompt mode
        scheduler = {"vllm": "chunked", "trtllm": "mixed", "sglang": "prefill_first"}[engine]
        if c.get("enable_chunked_prefill") is False:
            scheduler = {"vllm": "mixed", "trtllm": "mixed", "sglang": "prefill_first_whole"}[engine]
        prefix_caching = True
    else:
        scheduler = r.choice(SCHEDULERS)
        c["scheduler"] = scheduler
        block = r.choice([1, 2, 16, 16, 32])
        c["block_size"] = block
        prefix_caching = r.random() < 0.5
        c["enable_prefix_caching"] = prefix_caching
        if r.random() < 0.35:
            c["overlap_scheduling"] = True
        if r.random() < 0.2:  # TensorRT-LLM's admission: refused where the scheduler ignores it
            cap = r.choice(["guaranteed_no_evict", "max_utilization"])
            if scheduler in ("chunked", "continuous", "mixed"):
                c["capacity_scheduler_policy"] = cap
        if not prefix_caching and r.random() < 0.15:
            c["kv_allocation"] = "contiguous"
            c["contiguous_reserve"] = r.choice(["max_model_len", "max_tokens"])
        if r.random() < 0.1:
            c["watermark"] = r.choice([0.01, 0.05])

    # limits
    whole = scheduler in WHOLE_PROMPT_MODES and engine in (None, "vllm")
    mns = r.choice([None, None, 1, 2, 4, 8, 16, 32, 64, 256])
    if mns is not None:
        c["max_num_seqs"] = mns
    if r.random() < 0.6:
        # small budgets chunk prompts finely, but not into hundreds of steps each
        lo = max(mml if whole else max(16, hi_in0 // 32), mns or 1)
        if scheduler in WHOLE_PROMPT_MODES and engine == "trtllm":
            lo = max(lo, mml)  # TensorRT-LLM packs whole contexts into max_num_tokens
        c["max_num_batched_tokens"] = r.choice([lo, lo, 2 * lo, max(lo, 512), max(lo, 2048), max(lo, 8192)])
    if scheduler in ("chunked", "prefill_first") and r.random() < 0.25:
        c["long_prefill_token_threshold"] = r.choice([16, 64, 256, 1024])
    if scheduler in ("prefill_first", "prefill_first_whole") and r.random() < 0.25:
        c["max_prefill_tokens"] = r.choice([mml, 2 * mml, 16384])
    policy = "priority" if r.random() < 0.25 else "fcfs"
    if policy == "priority" or r.random() < 0.1:
        c["policy"] = policy

    # KV cache: large (sized from memory), or a few sequences' worth to force preemption
    factor = math.inf
    if r.random() < 0.6:
        per_seq = math.ceil(mml / block)
        factor = r.choice([1.05, 1.2, 1.5, 2, 3, 6, 20])
        c["num_gpu_blocks_override"] = int(per_seq * factor) + 2
    elif r.random() < 0.2:
        c["gpu_memory_utilization"] = r.choice([0.5, 0.8, 0.95])

    # parallelism and routing
    c["num_replicas"] = r.choice([1, 1, 1, 2, 3])
    if c["num_replicas"] > 1 or r.random() < 0.1:
        c["router"] = r.choice(ROUTERS)

    # overheads
    if engine is not None and r.random() < 0.5:
        c.update(FITTED_OVERHEADS[engine])
    else:
        if r.random() < 0.4:
            c["cpu_step_overhead_s"] = _loguniform(r, 1e-5, 2e-3)
        if r.random() < 0.4:
            c["cpu_seq_overhead_s"] = _loguniform(r, 1e-6, 1e-4)
        if r.random() < 0.3:
            c["frontend_latency_s"] = _loguniform(r, 1e-4, 0.1)
        if r.random() < 0.3:
            c["frontend_token_s"] = _loguniform(r, 1e-6, 1e-4)
    if r.random() < 0.05:
        c["attention_impl"] = "naive"
    if r.random() < 0.2:
        c["eager_step_overhead_s"] = _loguniform(r, 1e-5, 2e-3)

    # workload: at most ~30k output tokens where requests run a few at a time
    # (each config runs in about a second or less, in both modes)
    n = r.randint(20, max(20, max_requests))
    serial = (mns is not None and mns <= 4) or factor <= 1.5
    closed = r.random() < 0.3
    wl: dict[str, Any] | None = None
    if traces and r.random() < 0.12 and mml >= 2048:
        wl = _trace_workload(r, n, serial)
        if wl is not None and closed:
            wl.pop("workload.arrival", None)
            wl.pop("workload.request_rate", None)
            wl.pop("workload.burstiness", None)
    if wl is None:
        over = r.random() < 0.08  # some prompts + max_tokens over max_model_len: rejections
        hi_in = min(hi_in0, int(mml * (1.3 if over else 0.55)))
        hi_out = min(hi_out0, int(mml * 0.3))
        wl = {"workload.num_requests": min(n, max(20, 30_000 // hi_out)) if serial else n}
        wl["workload.input_len"] = _length_spec(r, r.choice([1, 2, 8, 32]), hi_in)
        wl["workload.output_len"] = _length_spec(r, r.choice([1, 2, 8]), hi_out)
        if r.random() < 0.1:
            wl["workload.max_tokens"] = r.choice([hi_out, 2 * hi_out])
        if not closed:
            arrival = r.choice(["poisson", "poisson", "gamma", "constant", "inf"])
            wl["workload.arrival"] = arrival
            if arrival != "inf":
                wl["workload.request_rate"] = _loguniform(r, 0.5, 500.0)
            if arrival == "gamma":
                wl["workload.burstiness"] = r.choice([0.1, 0.3, 0.5, 2.0, 4.0])
            if arrival != "inf" and r.random() < 0.1:  # both: whichever ends first
                wl["workload.duration_s"] = _r(n / wl["workload.request_rate"] * r.choice([0.5, 2.0]))
            if arrival != "inf" and r.random() < 0.25:  # the rate gated by a concurrency cap (vllm bench serve)
                wl["workload.max_concurrency"] = r.choice([1, 2, 4, 8, 16, 64])
        if r.random() < 0.3:
            wl["workload.shared_prefix"] = {"fraction": r.choice([0.3, 0.7, 1.0]),
                                            "num_prefixes": r.randint(1, 4),
                                            "prefix_len": min(r.choice([16, 64, 100, 256, 1024]), mml // 8)}
        if not closed and r.random() < 0.15:
            wl["workload.conversation"] = {"fraction": r.choice([0.5, 1.0]), "num_turns": [2, r.randint(2, 4)],
                                           "think_time_s": r.choice([0.05, 0.5, 2.0, [0.1, 1.0]])}
        if r.random() < 0.15:
            wl["workload.prefix_chunk_tokens"] = r.choice([1, 8, 16, 32])
    if closed:
        wl["workload.max_concurrency"] = r.choice([1, 2, 4, 8, 16, 32, 64])
        if r.random() < 0.5:
            c["client_think_time_s"] = _loguniform(r, 1e-4, 0.3)
        if r.random() < 0.3:
            c["client_start_spread_s"] = _loguniform(r, 1e-3, 0.5)
    if policy == "priority" and "workload.trace" not in wl:
        f = r.choice([0.1, 0.5, 0.9])
        wl["workload.priority_classes"] = [{"fraction": f, "priority": 0}, {"fraction": _r(1 - f), "priority": 1}]
    if r.random() < 0.1:
        wl["workload.num_warmup_requests"] = r.randint(1, 10)
    c.update(wl)
    return c


# ----------------------------------------------------------------------------- running
def simulate(overrides: dict[str, Any], exact_steps: bool):
    """RunOutput of ``overrides`` in one mode (raises ConfigError / InfeasibleError)."""
    from sim.config import build_config
    from sim.runner import run_simulation

    cfg = build_config(overrides={**overrides, "exact_steps": exact_steps})
    return run_simulation(cfg)


def _by_id(req: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    order = np.argsort(req["request_id"], kind="stable")
    return {k: v[order] for k, v in req.items()}


def merged_itl(itl: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The ITL sample as a distribution: distinct gaps ascending, summed weights (weight-0 entries dropped)."""
    v, w = itl
    keep = w > 0
    v, w = v[keep], w[keep]
    if not v.size:
        return v, w
    u, inv = np.unique(v, return_inverse=True)
    return u, np.bincount(inv, weights=w, minlength=u.size)


def _time_weighted(steps: dict[str, np.ndarray]) -> dict[str, float]:
    dt = steps["step_time_s"]
    tot = float(dt.sum())
    if not dt.size or tot <= 0:
        return {}
    return {
        "mean_kv_cache_usage": float((steps["mean_kv_cache_usage"] * dt).sum() / tot),
        "mean_num_running_seqs": float((steps["num_running_seqs"] * dt).sum() / tot),
        "mean_num_waiting_reqs": float((steps["mean_num_waiting_reqs"] * dt).sum() / tot),
        "busy_time_s": tot,
    }


def _fmt(x) -> str:
    return repr(float(x)) if isinstance(x, (float, np.floating)) else repr(x)


def compare(ref, fast) -> tuple[list[str], list[str], str]:
    """``(mismatches, rounding notes, kind)`` between two RunResults (the
    contract above). ``kind``: ``"equal"``; ``"ulp"`` when the only differences
    are timestamps (and the ITL gaps from them) off by float rounding (within
    ``ULP_ATOL`` x the run's time scale), every count, step and token total
    equal; else ``"semantic"``."""
    diffs: list[str] = []
    notes: list[str] = []
    semantic = False
    scale = max(1.0, float(np.nanmax(np.abs(ref.requests["finish_time_s"]), initial=0.0)))
    tol = ULP_ATOL * scale
    if ref.num_steps != fast.num_steps:
        diffs.append(f"num_steps: ref {ref.num_steps} fast {fast.num_steps}")
        semantic = True
    rq, fq = _by_id(ref.requests), _by_id(fast.requests)
    if rq["request_id"].shape != fq["request_id"].shape or not np.array_equal(rq["request_id"], fq["request_id"]):
        diffs.append(f"request ids differ: ref {rq['request_id'].size} rows, fast {fq['request_id'].size} rows")
        semantic = True
    else:
        ids = rq["request_id"].astype(np.int64)
        for col in rq:
            a, b = rq[col], fq[col]
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            if same.all():
                continue
            bad = np.flatnonzero(~same)
            i = bad[0]
            msg = (f"requests.{col}: {bad.size} of {a.size} differ; first request {ids[i]}: "
                   f"ref {_fmt(a[i])} fast {_fmt(b[i])}")
            with np.errstate(invalid="ignore", divide="ignore"):
                d = np.abs(a[bad] - b[bad])
                rel = d / np.maximum(np.abs(a[bad]), np.abs(b[bad]))
            if np.isfinite(d).any():
                msg += f"; max |diff| {np.nanmax(d):.3g} (rel {np.nanmax(rel):.3g})"
            diffs.append(msg)
            if col not in TIME_COLUMNS or not (np.isfinite(d).all() and d.max() <= tol):
                semantic = True
    if ref.rejected_reasons != fast.rejected_reasons:
        diffs.append(f"rejected_reasons differ: ref {len(ref.rejected_reasons)} fast {len(fast.rejected_reasons)}")
        semantic = True
    # ITL: the same weighted distribution
    (rv, rw), (fv, fw) = merged_itl(ref.itl), merged_itl(fast.itl)
    if not (np.array_equal(rv, fv) and np.array_equal(rw, fw)):
        msg = f"itl: ref {rv.size} distinct gaps weight {rw.sum():g}, fast {fv.size} weight {fw.sum():g}"
        if rv.size == fv.size:
            bad = np.flatnonzero((rv != fv) | (rw != fw))
            i = bad[0]
            msg += (f"; {bad.size} differ, first: ref ({_fmt(rv[i])}, w {rw[i]:g}) "
                    f"fast ({_fmt(fv[i])}, w {fw[i]:g})")
        else:
            only_r = np.setdiff1d(rv, fv)[:3]
            only_f = np.setdiff1d(fv, rv)[:3]
            msg += f"; only in ref {list(map(float, only_r))}, only in fast {list(map(float, only_f))}"
        if rw.sum() == fw.sum():  # same tokens: gaps off by rounding only?
            ev, fe = np.repeat(rv, rw.astype(np.int64)), np.repeat(fv, fw.astype(np.int64))
            dmax = float(np.abs(ev - fe).max()) if ev.size else 0.0
            msg += f"; max |gap diff| {dmax:.3g}"
            semantic |= not dmax <= 2 * tol
        else:
            semantic = True
        diffs.append(msg)
    # the ITL statistics as the summary reports them: order statistics bit for bit; the mean
    # and std are float sums over samples pooled differently (a merged span records a gap once
    # with weight B where single steps record it B times): rounding only
    rsum, fsum = _itl_summary(ref), _itl_summary(fast)
    for k in rsum:
        a, b = rsum[k], fsum[k]
        if a == b or (math.isnan(a) and math.isnan(b)):
            continue
        # (a std's rounding is the samples': relative to the mean gap, as a std of gaps
        # equal but for rounding is rounding itself)
        scale = max(abs(a), abs(b), abs(rsum["mean_itl_ms"]) if k == "std_itl_ms" else 0.0)
        rel = abs(a - b) / scale
        line = f"summary {k}: ref {_fmt(a)} fast {_fmt(b)} (rel {rel:.3g}{' of the mean' if scale > max(abs(a), abs(b)) else ''})"
        if k in ("mean_itl_ms", "std_itl_ms") and rel <= AGG_RTOL:
            notes.append(line)
        else:
            diffs.append(line)
            semantic = True
    # step totals per replica, peaks
    rs, fs = ref.steps, fast.steps
    reps = sorted(set(np.unique(rs["replica"]).tolist()) | set(np.unique(fs["replica"]).tolist()))
    for rep in reps:
        rm, fm = rs["replica"] == rep, fs["replica"] == rep
        for col in ("num_steps", "num_batched_tokens", "num_prefill_tokens", "num_decode_tokens", "num_preempted"):
            a, b = rs[col][rm].sum(), fs[col][fm].sum()
            if a != b:
                diffs.append(f"steps.{col} (replica {int(rep)}): ref total {a:g} fast {b:g}")
                semantic = True
    for col in ("kv_cache_usage", "num_waiting_reqs"):
        a = rs[col].max() if rs[col].size else 0.0
        b = fs[col].max() if fs[col].size else 0.0
        if a != b:
            diffs.append(f"steps.max({col}): ref {_fmt(a)} fast {_fmt(b)}")
            semantic = True
    # time-weighted aggregates: rounding only
    ra, fa = _time_weighted(rs), _time_weighted(fs)
    ra["kv_reserved_unused_fraction"] = ref.kv_reserved_unused_fraction
    fa["kv_reserved_unused_fraction"] = fast.kv_reserved_unused_fraction
    for k in sorted(set(ra) | set(fa)):
        a, b = ra.get(k, float("nan")), fa.get(k, float("nan"))
        if a == b or (math.isnan(a) and math.isnan(b)):
            continue
        rel = abs(a - b) / max(abs(a), abs(b)) if max(abs(a), abs(b)) > 0 else math.inf
        line = f"{k}: ref {_fmt(a)} fast {_fmt(b)} (rel {rel:.3g})"
        if rel <= AGG_RTOL:
            notes.append(line)
        else:
            diffs.append(line)
            semantic = True
    return diffs, notes, ("semantic" if semantic else "ulp") if diffs else "equal"


def _itl_summary(res) -> dict[str, float]:
    """``summary.json``'s ITL keys (mean, median, std, p90, p99 ms) of a RunResult."""
    from sim.results.metrics import summarize

    out = summarize(res.requests, res.steps, res.itl)
    return {k: v for k, v in out.items() if k.endswith("_itl_ms")}


def run_pair(overrides: dict[str, Any]) -> dict[str, Any]:
    """Both modes of one config: {status: ok | skipped | mismatch | error, diffs, notes, wall_s, ...}."""
    from sim.errors import ConfigError, InfeasibleError

    t0 = time.perf_counter()
    out: dict[str, Any] = {"status": "ok", "diffs": [], "notes": []}
    results = {}
    for exact in (True, False):
        mode = "reference" if exact else "accelerated"
        try:
            results[mode] = simulate(overrides, exact)
        except (ConfigError, InfeasibleError) as e:
            if exact:
                out.update(status="skipped", reason=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
            else:  # the reference ran: refusing the accelerated mode is a difference
                out.update(status="error", kind="error", diffs=[f"accelerated refused what the reference ran: {e}"])
            break
        except Exception as e:  # noqa: BLE001 - a crash in either mode is a finding
            tb = traceback.format_exc(limit=6)
            out.update(status="error", kind="error", diffs=[f"{mode} mode raised {type(e).__name__}: {e}"],
                       traceback=tb)
            break
    if out["status"] == "ok":
        ref, fast = results["reference"], results["accelerated"]
        diffs, notes, kind = compare(ref.result, fast.result)
        out.update(diffs=diffs, notes=notes, status="mismatch" if diffs else "ok", kind=kind,
                   num_steps=ref.result.num_steps, num_events_ref=ref.result.num_events,
                   num_events_fast=fast.result.num_events,
                   num_preemptions=int(ref.result.requests["num_preemptions"].sum()),
                   num_rejected=len(ref.result.rejected_reasons))
    out["wall_s"] = time.perf_counter() - t0
    return out


def config_for(seed: int, index: int, **kw) -> dict[str, Any]:
    return draw_config(random.Random(seed * 1_000_003 + index), **kw)


def _job(args: tuple[int, int, str | None]) -> tuple[int, dict[str, Any], dict[str, Any]]:
    seed, i, focus = args
    cfg = config_for(seed, i, focus=focus)
    return i, cfg, run_pair(cfg)


# ----------------------------------------------------------------------------- minimising
def _candidates(cfg: dict[str, Any]):
    """Simpler variants of ``cfg``: one key dropped, fewer requests, simpler values."""
    essential = {"model", "hardware", "tensor_parallel_size", "seed"}
    for k in list(cfg):
        if k not in essential:
            yield {kk: v for kk, v in cfg.items() if kk != k}
    n = cfg.get("workload.num_requests")
    if isinstance(n, int) and n > 1:
        for m in sorted({1, 2, 3, n // 4, n // 2, n - 1}):
            if 1 <= m < n:
                yield {**cfg, "workload.num_requests": m}
    for k in ("num_replicas", "workload.max_concurrency", "tensor_parallel_size", "workload.num_warmup_requests"):
        v = cfg.get(k)
        if isinstance(v, int) and v > 1:
            yield {**cfg, k: v - 1}
            yield {**cfg, k: 1}
    for k in ("workload.input_len", "workload.output_len"):
        v = cfg.get(k)
        if isinstance(v, dict):
            hi = v.get("high", v.get("max", v.get("value", 1)))
            lo = v.get("low", v.get("min", 1))
            yield {**cfg, k: int(hi)}
            yield {**cfg, k: int(lo)}
        elif isinstance(v, int) and v > 1:
            yield {**cfg, k: v // 2}
            yield {**cfg, k: v - 1}
    if cfg.get("model") != "llama-3.1-8b":
        yield {**cfg, "model": "llama-3.1-8b", "hardware": "h100_sxm", "tensor_parallel_size": 1}
    for k, v in cfg.items():
        if isinstance(v, float) and v > 0 and k != "workload.request_rate":
            yield {**cfg, k: _r(v, 1)}
    if isinstance(cfg.get("seed"), int) and cfg["seed"] != 0:
        yield {**cfg, "seed": 0}


def _signature(res: dict[str, Any]) -> set[str]:
    """What kind of mismatch: the differing fields' names."""
    return {d.split(":")[0].split(" (")[0] for d in res["diffs"]}


def _same_bug(orig: dict[str, Any], res: dict[str, Any]) -> bool:
    """Still the same mismatch, roughly: same kind (ulp / semantic / error) and a differing field in common."""
    return (res["status"] in ("mismatch", "error") and res.get("kind") == orig.get("kind")
            and bool(_signature(res) & _signature(orig)))


def minimize(cfg: dict[str, Any], res: dict[str, Any], *, budget: int = 400, verbose: bool = False):
    """Greedy shrinking: accept any simpler config that still mismatches with a
    differing field in common with the original (the same bug, roughly)."""
    orig = res
    tries = 0
    changed = True
    while changed and tries < budget:
        changed = False
        for cand in _candidates(cfg):
            if cand == cfg:
                continue
            tries += 1
            if tries > budget:
                break
            r2 = run_pair(cand)
            if _same_bug(orig, r2):
                cfg, res = cand, r2
                changed = True
                if verbose:
                    print(f"  [{tries}] {len(cfg)} keys, {cfg.get('workload.num_requests')} requests: "
                          f"{res['diffs'][0][:160]}", flush=True)
                break
    return cfg, res


# ----------------------------------------------------------------------------- CLI
def _read_jsonl(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _print_result(tag: str, cfg: dict[str, Any], res: dict[str, Any]) -> None:
    kind = f", {res['kind']}" if res.get("kind") not in (None, "equal") else ""
    print(f"{tag}: {res['status'].upper()}{kind} ({res['wall_s']:.2f} s)")
    print("  config: " + json.dumps(cfg, sort_keys=True))
    for d in res["diffs"]:
        print("  - " + d)
    for d in res.get("notes", []):
        print("  ~ " + d)
    if res.get("traceback"):
        print("  " + res["traceback"].replace("\n", "\n  "))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num", type=int, default=200, help="configs to draw and run (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="fuzzer seed (config i draws from seed and i)")
    ap.add_argument("--start", type=int, default=0, help="first config index (to resume a run)")
    ap.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    ap.add_argument("--out", default="fuzz_mismatches.jsonl",
                    help="JSON lines of mismatching (and crashing) configs, replayable with --replay")
    ap.add_argument("--log", default=None, help="also write one JSON line per config run (status, wall time)")
    ap.add_argument("--replay", metavar="FILE", help="rerun the configs of a mismatch file and print the diffs")
    ap.add_argument("--minimize", metavar="FILE", help="shrink each config of a mismatch file; writes --out")
    ap.add_argument("--print-config", type=int, metavar="I", help="print config I of --seed and exit")
    ap.add_argument("--focus", choices=sorted(FOCUS),
                    help="narrow every draw to one accelerated path (chunked-spans: free-running spans taking "
                         "prompts over the step's token budget)")
    args = ap.parse_args(argv)

    if args.print_config is not None:
        print(json.dumps(config_for(args.seed, args.print_config, focus=args.focus), sort_keys=True))
        return 0
    if args.replay or args.minimize:
        rows = _read_jsonl(args.replay or args.minimize)
        bad = 0
        out_f = open(args.out, "w", encoding="utf-8") if args.minimize else None
        for k, row in enumerate(rows):
            cfg = row.get("config", row)
            res = run_pair(cfg)
            tag = f"[{k}] {row.get('label', '')}".rstrip()
            if args.minimize and res["status"] in ("mismatch", "error"):
                print(f"{tag}: minimising ({len(cfg)} keys)", flush=True)
                cfg, res = minimize(cfg, res, verbose=True)
                out_f.write(json.dumps({"config": cfg, "status": res["status"], "kind": res.get("kind"),
                                        "diffs": res["diffs"],
                                        "from": row.get("config", row)}, sort_keys=True) + "\n")
                out_f.flush()
            _print_result(tag, cfg, res)
            bad += res["status"] in ("mismatch", "error")
        print(f"{len(rows)} configs replayed, {bad} mismatches")
        if out_f:
            out_f.close()
        return 1 if bad else 0

    from tqdm import tqdm

    jobs = [(args.seed, i, args.focus) for i in range(args.start, args.start + args.num)]
    counts = {"ok": 0, "skipped": 0, "mismatch": 0, "error": 0}
    kinds = {"ulp": 0, "semantic": 0, "error": 0}
    skip_reasons: dict[str, int] = {}
    walls: list[float] = []
    rounding = 0
    t0 = time.perf_counter()
    out_f = open(args.out, "w", encoding="utf-8")
    log_f = open(args.log, "w", encoding="utf-8") if args.log else None
    if args.workers > 1:
        import multiprocessing as mp

        pool = mp.get_context("fork" if hasattr(os, "fork") else "spawn").Pool(args.workers, maxtasksperchild=200)
        it = pool.imap_unordered(_job, jobs, chunksize=1)
    else:
        pool = None
        it = map(_job, jobs)
    bar = tqdm(it, total=len(jobs), unit="cfg", dynamic_ncols=True, mininterval=2.0)
    try:
        for i, cfg, res in bar:
            counts[res["status"]] += 1
            walls.append(res["wall_s"])
            rounding += bool(res.get("notes"))
            if res["status"] == "skipped":
                key = res["reason"].split(":")[0] + ": " + res["reason"].split(":", 2)[1].strip()[:60]
                skip_reasons[key] = skip_reasons.get(key, 0) + 1
            if res["status"] in ("mismatch", "error"):
                kinds[res["kind"]] += 1
                out_f.write(json.dumps({"label": f"seed {args.seed} config {i}", "seed": args.seed, "index": i,
                                        "status": res["status"], "kind": res["kind"], "diffs": res["diffs"],
                                        "config": cfg}, sort_keys=True) + "\n")
                out_f.flush()
                bar.write(f"config {i}: {res['status']} ({res['kind']}): "
                          + "; ".join(d[:200] for d in res["diffs"][:4]))
            if log_f:
                log_f.write(json.dumps({"index": i, "status": res["status"], "kind": res.get("kind"),
                                        "wall_s": round(res["wall_s"], 4),
                                        "num_steps": res.get("num_steps"), "num_events_ref": res.get("num_events_ref"),
                                        "num_events_fast": res.get("num_events_fast"),
                                        "num_preemptions": res.get("num_preemptions"),
                                        "num_rejected": res.get("num_rejected"),
                                        "notes": res.get("notes") or None,
                                        "reason": res.get("reason")}) + "\n")
                log_f.flush()
            bar.set_postfix(mismatch=counts["mismatch"] + counts["error"], skipped=counts["skipped"], refresh=False)
    finally:
        bar.close()
        if pool is not None:
            pool.close()
            pool.join()
        out_f.close()
        if log_f:
            log_f.close()
    wall = time.perf_counter() - t0
    n = len(jobs)
    bad = counts["mismatch"] + counts["error"]
    print(f"{n} configs, {bad} mismatches ({counts['mismatch']} differing, {counts['error']} errors), "
          f"{counts['skipped']} skipped, {counts['ok']} equal")
    if bad:
        print(f"mismatch kinds: {kinds['semantic']} semantic (a different schedule, counts or times beyond "
              f"rounding), {kinds['ulp']} ulp (timestamps off by float rounding only), {kinds['error']} errors")
    if walls:
        w = np.array(walls)
        print(f"wall {wall:.0f} s with {args.workers} worker(s); per config (both modes) mean {w.mean():.3f} s, "
              f"median {np.median(w):.3f} s, p99 {np.percentile(w, 99):.3f} s, max {w.max():.3f} s")
    if rounding:
        print(f"{rounding} configs had time-weighted aggregates equal only to rounding (<= {AGG_RTOL:g} relative)")
    for reason, k in sorted(skip_reasons.items(), key=lambda kv: -kv[1]):
        print(f"  skipped {k}: {reason}")
    if bad:
        print(f"mismatching configs written to {args.out} (replay: --replay {args.out})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
