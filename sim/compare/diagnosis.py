"""Symptoms and likely causes of one variant's run, read from its numbers.

:func:`diagnose` reads the requests, the engine steps and the ITL samples —
never the scheduler's name (only, for the advice, whether it chunks prompts) —
and names what a serving engineer would:

1. **queueing / prefill capacity** — TTFT is mostly time in the waiting queue
   (mean queue time > ``QUEUE_SHARE`` of mean TTFT) and the TTFT tail is long
   (p99 > max(``TTFT_P99_MIN_MS``, ``TTFT_P99_PREFILL_FACTOR`` × median prefill)).
2. **prefill interference** — decode tokens wait through steps dominated by
   prefill work (Sarathi-Serve, OSDI '24; vLLM docs "Chunked Prefill"). A step
   of T prefill tokens costs about T·(HBM bandwidth / FLOP/s) decode steps
   (compute-bound prefill vs weight-bandwidth-bound decode: T/300 on an H100
   in bf16), so ``STALL_RATIO`` = 10 sits above the 512–2048-token chunks that
   chunked prefill bounds a step to and below whole multi-thousand-token prompts.
   Flagged when the duration-weighted p90 of the prefill-carrying steps during
   which decodes were in flight lasts ≥ ``STALL_RATIO`` × the median
   decode-only step, the longest steps are mostly prefill-carrying, and the
   ITL shows it (p99/median ≥ ``ITL_TAIL_RATIO`` or max/median ≥ ``STALL_RATIO``).
3. **KV capacity** — max KV usage > ``KV_HIGH`` with preemptions.
4. **rejections** — requests answered with an error (``max_model_len`` or a
   request larger than the KV cache), quoting the most common reason.
5. **long TTFT** — the TTFT tail is long as in 1. but queueing does not dominate
   it: the split of mean TTFT into queueing and prefill (first scheduled → first
   token), e.g. static batching's whole-batch prefills.
6. **transfer-bound** (disaggregated runs) — the KV transfer between the pools
   is a large part of a request's hand-off: the prefill workers' links are
   busy ≥ ``LINK_BUSY_HIGH`` of the run, or waiting for and crossing the link
   takes ≥ ``TRANSFER_SHARE`` of the time from send to the prompt's KV
   reaching the decode worker.
7. **decode-KV-bound** (disaggregated runs) — prefilled prompts wait for
   decode-side KV blocks (``decode_kv_wait_ms``) while the decode pool's KV
   peaks above ``KV_HIGH``: the decode pool is too small for the batch the
   prefill pool feeds it (their prefill blocks stay held meanwhile).

Which variant wins on which metric is :mod:`sim.compare.winners`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.results.metrics import weighted_percentile
from sim.errors import ConfigError
from sim.scheduler.registry import get_scheduler_class
from sim.compare.variant_data import VariantData, num_replicas_of, step_timeseries

QUEUE_SHARE = 0.5
TTFT_P99_MIN_MS = 500.0
TTFT_P99_PREFILL_FACTOR = 5.0
STALL_FACTOR = 3.0      # a "long" step: > 3× the median decode-only step
STALL_RATIO = 10.0
ITL_TAIL_RATIO = 3.0
KV_HIGH = 0.9
LINK_BUSY_HIGH = 0.5
TRANSFER_SHARE = 0.25
DECODE_KV_WAIT_SHARE = 0.05  # of the transferred requests waited for decode blocks
SEVERITIES = ("high", "medium", "low")


@dataclass(frozen=True)
class Finding:
    """One symptom with its likely cause. ``kind`` is a stable id
    (``queueing``, ``prefill_interference``, ``kv_capacity``, ``rejected``, ``long_ttft``,
    ``transfer_bound``, ``decode_kv_bound``);
    ``evidence`` is a sentence with the numbers; ``severity`` is one of
    ``high``, ``medium``, ``low``."""

    kind: str
    symptom: str
    cause: str
    evidence: str
    severity: str


def _ms(v: float) -> str:
    if not np.isfinite(v):
        return "n/a"
    if v >= 100:
        return f"{v:,.0f} ms"
    return f"{v:.1f} ms" if v >= 10 else f"{v:.2f} ms"


def _ratio(r: float) -> str:
    if not np.isfinite(r):
        return "∞"
    return f"{r:.2f}" if r < 1.1 else f"{r:.1f}" if r < 10 else f"{r:,.0f}"


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %" if x >= 0.1 else f"{100 * x:.1f} %"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _wquantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Smallest value whose cumulative weight reaches fraction q (weights ≥ 0, float)."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    if cum.size == 0 or cum[-1] <= 0:
        return float("nan")
    return float(values[order][min(np.searchsorted(cum, q * cum[-1], side="left"), cum.size - 1)])


def _col(df, name, default=0.0) -> np.ndarray:
    return df[name].to_numpy(float) if name in df.columns else np.full(len(df), default)


def _mean_kv(st) -> np.ndarray:
    """Each step row's time-averaged KV usage (a merged row's ``kv_cache_usage``
    is its last step's; older results lack ``mean_kv_cache_usage``)."""
    return _col(st, "mean_kv_cache_usage") if "mean_kv_cache_usage" in st.columns else _col(st, "kv_cache_usage")


# ----------------------------------------------------------------- queueing
def _rank_corr(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (ties broken by order; 0 for constant input)."""
    if x.size < 3:
        return 0.0
    rx = np.argsort(np.argsort(x, kind="stable"), kind="stable").astype(float)
    ry = np.argsort(np.argsort(y, kind="stable"), kind="stable").astype(float)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def _queueing(v: VariantData) -> Finding | None:
    fin = v.finished_requests()
    fin = fin[np.isfinite(fin["queue_ms"].to_numpy(float)) & np.isfinite(fin["ttft_ms"].to_numpy(float))]
    if len(fin) == 0:
        return None
    q, ttft = fin["queue_ms"].to_numpy(float), fin["ttft_ms"].to_numpy(float)
    mean_q, mean_ttft = float(q.mean()), float(ttft.mean())
    p99 = float(np.percentile(ttft, 99))
    med_prefill = float(np.nanmedian(fin["prefill_ms"].to_numpy(float)))
    limit = max(TTFT_P99_MIN_MS, TTFT_P99_PREFILL_FACTOR * (med_prefill if np.isfinite(med_prefill) else 0.0))
    if not (mean_ttft > 0 and mean_q > QUEUE_SHARE * mean_ttft and p99 > limit):
        return None
    # Sustained overload: queue time rises steadily with arrival time (bursts rise and drain).
    arrival = fin["arrival_time_s"].to_numpy(float)
    by_arrival = q[np.argsort(arrival, kind="stable")]
    k = max(len(by_arrival) // 4, 1)
    q_first, q_last = float(by_arrival[:k].mean()), float(by_arrival[-k:].mean())
    trend = _rank_corr(arrival, q)
    growing = trend >= 0.7 and q_last >= 3 * max(q_first, 1.0) and q_last >= TTFT_P99_MIN_MS
    evidence = (f"mean queueing {_ms(mean_q)} is {_pct(mean_q / mean_ttft)} of mean TTFT {_ms(mean_ttft)}; "
                f"p99 TTFT {_ms(p99)} against a median prefill of {_ms(med_prefill)}; "
                f"queue time {_ms(q_first)} for the first quarter of arrivals, {_ms(q_last)} for the last")
    span = float(arrival.max() - arrival.min())
    if span > 0 and len(fin) > 1:
        served = len(fin) / max(float(fin["finish_time_s"].max() - arrival.min()), 1e-9)
        evidence += f"; requests arrived at {(len(fin) - 1) / span:,.2f} req/s and were served at {served:,.2f} req/s"
    clause, remedy, policy = _queue_limiter(v)
    if policy:
        load = "requests waited for admission although the deployment had room"
    elif growing:
        load = "the offered load exceeds what the deployment serves, so the queue keeps growing"
    else:
        load = "at times demand exceeds what the deployment serves; the queue drains between those peaks"
    cause = f"Queueing / prefill capacity: {load}{clause}. {remedy}"
    ts = step_timeseries(v.steps, num_replicas=num_replicas_of(v))
    if len(ts):
        evidence += (f"; up to {ts['num_waiting_reqs'].max():,.0f} requests waiting "
                     f"(time average {ts['num_waiting_reqs'].mean():,.1f})")
    sev = "high" if growing or p99 > 10 * limit else "medium"
    return Finding("queueing", f"High TTFT dominated by queueing (p99 TTFT {_ms(p99)})", cause, evidence + ".", sev)


def _queue_limiter(v: VariantData) -> tuple[str, str, bool]:
    """What held admission back while requests waited, from the steps taken
    while the waiting queue was non-empty: (clause, remedy, policy) where
    ``policy`` means the batching policy, not capacity, held them back."""
    st = v.steps
    remedy = "More replicas, a larger max_num_batched_tokens / max_num_seqs, or a faster GPU would cut it."
    if len(st) == 0:
        return "", remedy, False
    wait = (_col(st, "mean_num_waiting_reqs") if "mean_num_waiting_reqs" in st.columns
            else _col(st, "num_waiting_reqs")) > 0
    dt = _col(st, "step_time_s")
    if not wait.any() or dt[wait].sum() <= 0:
        return "", remedy, False
    run, kv = _col(st, "num_running_seqs"), _mean_kv(st)
    prefill = _col(st, "num_prefill_tokens") > 0
    t_wait = dt[wait].sum()
    w = dt[wait] / t_wait
    cfg = v.summary.get("config") or {}
    mns = cfg.get("max_num_seqs")
    if isinstance(mns, (int, float)) and mns > 0 and float((run[wait] * w).sum()) >= 0.95 * mns:
        return (f"; while requests waited the batch was full at max_num_seqs={int(mns)}",
                "A larger max_num_seqs (if KV memory allows), more replicas or a faster GPU would cut it.", False)
    kv_wait = float((kv[wait] * w).sum())
    if kv_wait >= KV_HIGH:
        return (f"; while requests waited the KV cache was {_pct(kv_wait)} full on average, so admission was "
                "KV-limited", "More KV memory (fp8 KV cache, tensor parallelism, a larger GPU) or more replicas "
                "would cut it.", False)
    # Requests waiting while the engine runs decode-only steps below its peak batch with KV room:
    # nothing but the policy keeps them out (a static batch draining).
    peak = float(run.max()) if run.size else 0.0
    held = wait & ~prefill & (run < 0.9 * peak) & (kv < 0.8)
    held_share = float(dt[held].sum() / t_wait)
    if held_share > 0.3:
        return (f"; for {_pct(held_share)} of the time requests waited, the engine ran decode-only steps below "
                f"its peak batch ({peak:,.0f}) with KV room to spare — the batching policy held them back (as "
                "when a static batch must drain before the next one starts)",
                "Admitting new requests at every step (continuous batching) would cut it; capacity is not "
                "the limit.", True)
    pf_share = float(dt[wait & prefill].sum() / t_wait)
    if pf_share >= 0.5:
        tok = _col(st, "num_prefill_tokens")[wait].sum() / t_wait
        return (f"; while requests waited, {_pct(pf_share)} of the engine's time went to steps with prefill "
                f"work ({tok:,.0f} prefill tokens/s): prefill compute is the bottleneck",
                "More replicas or a faster GPU (prefill is compute-bound), prefix caching where prompts share "
                "prefixes, or fp8 weights would cut it.", False)
    return "", remedy, False


# ------------------------------------------------------ prefill interference
def interference_stats(v: VariantData) -> dict | None:
    """The numbers behind the prefill-interference check (None without steps
    or ITL samples). Keys: ``decode_step_ms`` (median decode-only step),
    ``stall_step_ms`` (duration-weighted p90 of prefill-carrying steps with
    decodes in flight), ``stall_ratio``, ``stall_prefill_tokens`` (median
    prefill tokens of the long ones), ``long_prefill_share`` (time share of the
    steps longer than STALL_FACTOR × decode step that carry prefill),
    ``itl_median_ms``, ``itl_p99_ms``, ``itl_max_ms``, ``delayed_token_share``
    (tokens whose gap exceeded STALL_FACTOR × decode step), ``stall_time_share``
    (long prefill-carrying steps' share of the time decodes were in flight),
    ``stall_with_decodes_share`` (share of that time in steps that also decoded)."""
    st = v.steps
    if "pool" in st.columns:  # disaggregated: decodes run (and can stall) on the decode workers only
        st = st[st["pool"] == "decode"]
    vals, w = v.itl_arrays()
    if len(st) == 0 or w.sum() <= 0:
        return None
    n = np.maximum(_col(st, "num_steps", 1.0), 1.0)
    total = _col(st, "step_time_s")
    per = total / n
    pre = _col(st, "num_prefill_tokens") > 0
    dec = _col(st, "num_decode_tokens") > 0
    itl_med = weighted_percentile(vals, w, 50) * 1e3
    dec_only = dec & ~pre
    base = weighted_percentile(per[dec_only], n[dec_only], 50) * 1e3 if dec_only.any() else itl_med
    in_flight = pre & (dec | (_col(st, "num_running_seqs") >= 2))
    if not in_flight.any() or not base > 0:
        return None
    stall = _wquantile(per[in_flight], total[in_flight], 0.9) * 1e3
    long = per * 1e3 > STALL_FACTOR * base
    heavy = in_flight & long
    long_t = total[long].sum()
    return {
        "decode_step_ms": base, "stall_step_ms": stall, "stall_ratio": stall / base,
        "stall_prefill_tokens": float(np.median(_col(st, "num_prefill_tokens")[heavy])) if heavy.any() else 0.0,
        "long_prefill_share": float(total[long & pre].sum() / long_t) if long_t > 0 else 0.0,
        "itl_median_ms": itl_med, "itl_p99_ms": weighted_percentile(vals, w, 99) * 1e3,
        "itl_max_ms": float(vals.max()) * 1e3,
        "delayed_token_share": float(w[vals * 1e3 > STALL_FACTOR * base].sum() / w.sum()),
        "stall_time_share": float(total[heavy].sum() / total[in_flight | dec].sum()),
        "stall_with_decodes_share": float(total[heavy & dec].sum() / total[heavy].sum()) if heavy.any() else 0.0,
    }


def _interference(v: VariantData) -> Finding | None:
    s = interference_stats(v)
    if s is None:
        return None
    tail = s["itl_p99_ms"] / s["itl_median_ms"] if s["itl_median_ms"] > 0 else 0.0
    peak = s["itl_max_ms"] / s["itl_median_ms"] if s["itl_median_ms"] > 0 else 0.0
    if not (s["stall_ratio"] >= STALL_RATIO and s["long_prefill_share"] >= 0.5
            and (tail >= ITL_TAIL_RATIO or peak >= STALL_RATIO)):
        return None
    sev = "high" if tail >= 5 else "medium" if tail >= ITL_TAIL_RATIO else "low"
    evidence = (f"steps carrying prefill work (median {s['stall_prefill_tokens']:,.0f} prefill tokens among the "
                f"long ones) lasted {_ms(s['stall_step_ms'])} (p90), {s['stall_ratio']:.0f}× the median "
                f"decode-only step of {_ms(s['decode_step_ms'])}; they are {_pct(s['long_prefill_share'])} of the "
                f"time in long steps and {_pct(s['stall_time_share'])} of the time decodes were in flight; "
                f"{_pct(s['delayed_token_share'])} of output tokens waited more than {STALL_FACTOR:.0f}× a decode "
                f"step; ITL p99 {_ms(s['itl_p99_ms'])} vs median {_ms(s['itl_median_ms'])} ({_ratio(tail)}×), "
                f"max {_ms(s['itl_max_ms'])}.")
    if s["stall_with_decodes_share"] >= 0.5 and _chunks_prompts(v) is not False:
        how = ("these steps already mix decodes with prefill chunks, but the token budget lets a step carry "
               "thousands of prefill tokens; a smaller max_num_batched_tokens (≈ 512–2048) bounds each step")
    elif s["stall_with_decodes_share"] >= 0.5:  # (a budget under max_model_len would refuse whole prompts)
        how = ("these steps mix decodes with whole prompts; chunked prefill with a bounded token budget "
               "(max_num_batched_tokens ≈ 512–2048) splits prompts into short steps")
    else:
        how = ("decodes are paused entirely while whole prompts prefill; chunked prefill with a bounded token "
               "budget (max_num_batched_tokens ≈ 512–2048) splits prompts into short steps mixed with decodes")
    cause = (f"Prefill interference: when long prompts arrive, every running decode waits for their prefill, so "
             f"streaming output stutters; {how}. Disaggregated prefill removes the interference entirely.")
    return Finding("prefill_interference", f"ITL spikes when long prompts arrive (max ITL {_ms(s['itl_max_ms'])})",
                   cause, evidence, sev)


def _chunks_prompts(v: VariantData) -> bool | None:
    """Whether the variant's scheduler splits prompts into chunks (its class's
    ``chunked_prefill``), or None where the config does not say."""
    name = (v.summary.get("config") or {}).get("scheduler")
    try:
        return bool(get_scheduler_class(name).chunked_prefill)
    except ConfigError:  # (no scheduler named, or one this process does not know)
        return None


# --------------------------------------------------------------- KV capacity
def _kv_capacity(v: VariantData) -> Finding | None:
    st, req = v.steps, v.measured_requests()
    max_kv = float(_col(st, "kv_cache_usage").max()) if len(st) else float(v.summary.get("max_kv_cache_usage") or 0)
    pre = _col(req, "num_preemptions")
    npre = int(pre.sum()) if len(req) else int(v.summary.get("num_preemptions") or 0)
    if not (max_kv > KV_HIGH and npre > 0):
        return None
    dt = _col(st, "step_time_s")
    mean_kv = float((_mean_kv(st) * dt).sum() / dt.sum()) if dt.sum() > 0 else float("nan")
    hit = int((pre > 0).sum())
    share = hit / max(len(req), 1)
    rec = _col(req, "preempted_ms")[pre > 0]
    rec = rec[np.isfinite(rec)]
    evidence = (f"KV cache peaked at {_pct(max_kv)} (time average {_pct(mean_kv)}); {_plural(npre, 'preemption')} hit "
                f"{hit:,} of {len(req):,} requests ({_pct(share)})")
    if rec.size:
        evidence += (f"; recomputing cost them {rec.sum() / 1e3:,.2f} s in total "
                     f"(median {_ms(float(np.median(rec)))} per preempted request)")
    cause = ("KV capacity: the running batch needs more KV blocks than the GPU holds, so requests are "
             "preempted and their KV recomputed later. Fewer max_num_seqs, an fp8 KV cache "
             "(kv_cache_dtype=fp8), more GPU memory or tensor parallelism, or more replicas would avoid it.")
    sev = "high" if share >= 0.05 else "medium" if share >= 0.01 else "low"
    return Finding("kv_capacity", f"KV cache full with {_plural(npre, 'preemption')}", cause, evidence + ".", sev)


# ---------------------------------------------------------------- rejections
def _rejected(v: VariantData) -> Finding | None:
    req = v.measured_requests()
    if "status" not in req.columns or len(req) == 0:
        return None
    rej = req[req["status"] == "rejected"]
    if len(rej) == 0:
        return None
    share = len(rej) / len(req)
    evidence = f"{len(rej):,} of {len(req):,} requests ({_pct(share)}) were rejected"
    reasons = rej["reason"].fillna("").astype(str) if "reason" in rej.columns else None
    top = ""
    if reasons is not None and (reasons != "").any():
        given = reasons[reasons != ""]
        # Reasons embed each request's numbers: count them by their wording.
        kinds = given.str.replace(r"\d[\d,.]*", "#", regex=True)
        counts = kinds.value_counts()
        top = str(given[kinds == counts.index[0]].iloc[0])  # one real example of the commonest kind
        evidence += f"; most common reason ({counts.iloc[0]:,}×), e.g. \"{top}\""
    low = top.lower()
    if "max_model_len" in low:
        cause = ("max_model_len: prompt + max_tokens exceed the context the deployment allows. Raise "
                 "max_model_len if the model supports it (and KV memory allows), lower max_tokens, or clip "
                 "requests (workload.clip_to_max_model_len).")
    elif "kv" in low:
        cause = ("Capacity: single requests larger than the whole KV cache. More GPU memory, an fp8 KV cache or "
                 "tensor parallelism gives them room.")
    else:
        cause = "max_model_len / capacity: these requests could never be served by this deployment."
    return Finding("rejected", f"{len(rej):,} requests rejected", cause, evidence + ".",
                   "high" if share >= 0.05 else "medium")


def _long_ttft(v: VariantData) -> Finding | None:
    """The TTFT tail is long (as for queueing: p99 above the limit) but queueing
    is not most of it: then most of it is the prefill step (first scheduled →
    first token); say so with the split, rather than "nothing stands out"."""
    fin = v.finished_requests()
    q, pf, ttft = (fin[c].to_numpy(float) for c in ("queue_ms", "prefill_ms", "ttft_ms"))
    ok = np.isfinite(q) & np.isfinite(pf) & np.isfinite(ttft)
    if not ok.any():
        return None
    q, pf, ttft = q[ok], pf[ok], ttft[ok]
    p99, mean_ttft = float(np.percentile(ttft, 99)), float(ttft.mean())
    med_prefill = float(np.median(pf))
    limit = max(TTFT_P99_MIN_MS, TTFT_P99_PREFILL_FACTOR * med_prefill)
    if not (mean_ttft > 0 and p99 > limit):
        return None
    share_q, share_p = float(q.mean()) / mean_ttft, float(pf.mean()) / mean_ttft
    if share_p < 0.5:  # queueing dominates: the queueing finding's case
        return None
    evidence = (f"mean TTFT {_ms(mean_ttft)}: queueing {_ms(float(q.mean()))} ({_pct(share_q)}), from first "
                f"scheduled to first token {_ms(float(pf.mean()))} ({_pct(share_p)}); p99 TTFT {_ms(p99)} against a "
                f"median prefill of {_ms(med_prefill)}")
    cause = (f"Most of TTFT ({_pct(share_p)}) passes after the request was scheduled: its prefill step is long "
             "— long prompts, or many prompts prefilled in one step (a whole batch prefilled together, a large "
             "max_num_batched_tokens), so each waits for all of them. Chunked prefill with a smaller token "
             "budget bounds those steps; more compute per replica (tensor parallelism, a faster GPU, fp8) "
             "shortens them.")
    return Finding("long_ttft", f"High TTFT, mostly in the prefill step (p99 TTFT {_ms(p99)})", cause,
                   evidence + ".", "medium")


# ------------------------------------------------------- disaggregated runs
def _transferred(v: VariantData):
    """The measured, finished requests whose KV crossed between the pools (None
    for an aggregated run)."""
    fin = v.finished_requests()
    if "kv_transfer_ms" not in fin.columns:
        return None
    return fin[np.isfinite(fin["kv_transfer_ms"].to_numpy(float))]


def _transfer_bound(v: VariantData) -> Finding | None:
    tr = _transferred(v)
    if tr is None or len(tr) == 0:
        return None
    x, q = tr["kv_transfer_ms"].to_numpy(float), tr["kv_transfer_queue_ms"].to_numpy(float)
    arrival = tr["arrival_time_s"].to_numpy(float)
    start_dec = tr["kv_transfer_end_time_s"].to_numpy(float)
    span_ms = float(np.mean(start_dec - arrival)) * 1e3  # send -> KV on the decode worker
    share = float((x + q).mean()) / span_ms if span_ms > 0 else 0.0
    n_links = int(v.summary.get("num_prefill_workers") or 1)
    dur = float(v.summary.get("duration") or 0.0)
    busy = float(x.sum()) / 1e3 / (dur * n_links) if dur > 0 else 0.0
    p99x, p99q = float(np.percentile(x, 99)), float(np.percentile(q, 99))
    if not (busy >= LINK_BUSY_HIGH or share >= TRANSFER_SHARE):
        return None
    link = v.summary.get("kv_transfer_link_name") or v.summary.get("kv_transfer_link") or "the link"
    bw = v.summary.get("kv_transfer_pair_bandwidth_bytes_per_s")
    evidence = (f"{len(tr):,} transfers of {float(tr['kv_transfer_bytes'].mean()) / 2**20:,.0f} MiB on average "
                f"took {_ms(float(x.mean()))} (p99 {_ms(p99x)}) on {link}"
                + (f" at {bw / 1e9:,.3g} GB/s per transfer" if isinstance(bw, (int, float)) else "")
                + f", after {_ms(float(q.mean()))} (p99 {_ms(p99q)}) queued for the link; the prefill workers' links "
                f"were busy {_pct(busy)} of the run; link queue + transfer is {_pct(share)} of the time from send "
                "to the KV reaching the decode worker")
    in_domain = v.summary.get("kv_transfer_link") == "nvlink"
    cause = ("Transfer-bound: moving each prompt's KV from the prefill to the decode pool is slow or queued "
             "(prompts finishing prefill together wait for the prefill worker's link). "
             + ("A faster link" if in_domain else "Placing prefill and decode in one NVLink domain, faster NICs")
             + ", an fp8 KV cache (half the bytes), layer-wise transfer "
             "(kv_transfer_layerwise) or more prefill workers (more links) would cut it.")
    sev = "high" if busy >= 0.8 or share >= 0.5 else "medium"
    return Finding("transfer_bound", f"KV transfer between pools dominates the hand-off (link busy {_pct(busy)})",
                   cause, evidence + ".", sev)


def _decode_kv_bound(v: VariantData) -> Finding | None:
    tr = _transferred(v)
    if tr is None or len(tr) == 0 or "decode_kv_wait_ms" not in tr.columns:
        return None
    w = tr["decode_kv_wait_ms"].to_numpy(float)
    waited = w > 0
    peak = float(v.summary.get("decode_max_kv_cache_usage") or 0.0)
    if not (waited.mean() >= DECODE_KV_WAIT_SHARE and peak >= KV_HIGH):
        return None
    evidence = (f"{int(waited.sum()):,} of {len(tr):,} prefilled requests ({_pct(float(waited.mean()))}) waited for "
                f"decode-side KV blocks, {_ms(float(w[waited].mean()))} on average (p99 {_ms(float(np.percentile(w, 99)))}); "
                f"the decode pool's KV cache peaked at {_pct(peak)} (time average "
                f"{_pct(float(v.summary.get('decode_mean_kv_cache_usage') or 0.0))}), the prefill pool's at "
                f"{_pct(float(v.summary.get('prefill_max_kv_cache_usage') or 0.0))}")
    cause = ("Decode-KV-bound: the decode pool cannot hold the sequences the prefill pool sends it, so prefilled "
             "prompts wait for decode blocks (holding their prefill blocks meanwhile). More decode workers "
             "(a higher decode:prefill ratio), an fp8 KV cache or larger decode tensor parallelism (more KV memory "
             "per worker) would cut it; more prefill workers would not.")
    sev = "high" if waited.mean() >= 0.25 else "medium"
    return Finding("decode_kv_bound", f"Prefilled requests wait for decode-side KV ({_pct(float(waited.mean()))} of them)",
                   cause, evidence + ".", sev)


def diagnose(name: str, v: VariantData) -> list[Finding]:
    """Findings for variant ``name``, most severe first (empty when nothing stands out)."""
    out = [f for f in (_queueing(v), _interference(v), _kv_capacity(v), _rejected(v), _transfer_bound(v),
                       _decode_kv_bound(v)) if f is not None]
    if not any(f.kind == "queueing" for f in out):  # ITL spikes do not explain a long TTFT
        extra = _long_ttft(v)
        if extra is not None:
            out.append(extra)
    return sorted(out, key=lambda f: SEVERITIES.index(f.severity))
