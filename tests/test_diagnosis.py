"""Diagnosis on hand-built runs (sim/compare/diagnosis.py).

Step times mimic llama-3.1-8b on one H100 (bf16): a decode step over 24
running sequences ≈ 9 ms (weights read once per step); prefill ≈ 25 µs per
token + 5 ms (compute-bound, ~650 TFLOP/s effective at 16 GFLOP/token). So a
whole 4,000–8,000-token prompt is a 105–205 ms step, a 2,048-token chunk plus
24 decodes ≈ 60 ms, a 512-token chunk ≈ 22 ms, a 48-token prompt ≈ 6 ms.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.compare.diagnosis import Finding, diagnose, interference_stats
from sim.compare.variant_data import VariantData
from sim.compare.winners import compare_winners

DECODE_S = 0.009
N_DECODES = 24


def prefill_s(tokens: int) -> float:
    return tokens * 25e-6 + 0.005


class StepTrace:
    """Builds steps rows and ITL samples for a replica whose N_DECODES running
    sequences emit in lockstep (each ITL gap = time since their previous token)."""

    def __init__(self, merge_decodes: bool = False) -> None:
        self.t = 0.0
        self.last_emit = 0.0
        self.rows: list[dict] = []
        self.gaps: list[float] = []
        self.weights: list[float] = []
        self.merge = merge_decodes

    def _row(self, dur, n_steps, prefill, decode, running, waiting=0, kv=0.5):
        self.rows.append(dict(replica=0, start_time_s=self.t, num_steps=n_steps, step_time_s=dur,
                              num_running_seqs=running, num_waiting_reqs=waiting,
                              num_batched_tokens=prefill + decode, num_prefill_tokens=prefill,
                              num_decode_tokens=decode, kv_cache_usage=kv, num_preempted=0))
        self.t += dur

    def _emit(self, n_tokens):
        self.gaps.append(self.t - self.last_emit)
        self.weights.append(n_tokens)
        self.last_emit = self.t

    def decode(self, k: int):
        if k <= 0:
            return
        if self.merge:
            self._row(k * DECODE_S, k, 0, k * N_DECODES, N_DECODES)
            first = self.t - (k - 1) * DECODE_S  # end of the first step of the run
            self.gaps.append(first - self.last_emit)
            self.weights.append(N_DECODES)
            if k > 1:
                self.gaps.append(DECODE_S)
                self.weights.append(N_DECODES * (k - 1))
            self.last_emit = self.t
            return
        for _ in range(k):
            self._row(DECODE_S, 1, 0, N_DECODES, N_DECODES)
            self._emit(N_DECODES)

    def prefill_only(self, tokens: int):
        """Whole prompt(s) in a step with no decodes: every running decode stalls."""
        self._row(prefill_s(tokens), 1, tokens, 0, N_DECODES + 1)

    def mixed(self, chunk: int):
        """A chunk of prefill plus one token for each running decode."""
        self._row(prefill_s(chunk) - 0.005 + DECODE_S, 1, chunk, N_DECODES, N_DECODES + 1)
        self._emit(N_DECODES)

    def fill_decodes_until(self, t_end: float):
        self.decode(int(max(t_end - self.t, 0.0) // DECODE_S))

    def frames(self):
        return pd.DataFrame(self.rows), (np.array(self.gaps), np.array(self.weights, dtype=float))


def make_requests(n=200, gap_s=0.1, queue_ms=5.0, prefill_ms=60.0, decode_ms=2000.0, out_tokens=200,
                  preemptions=None, preempted_ms=None, status=None, reason=None) -> pd.DataFrame:
    arrival = np.arange(n) * gap_s
    queue = np.broadcast_to(np.asarray(queue_ms, dtype=float), (n,)).copy()
    prefill = np.full(n, prefill_ms)
    decode = np.full(n, decode_ms)
    status = np.array(status if status is not None else ["finished"] * n, dtype=object)
    done = status == "finished"
    nan = np.where(done, 1.0, np.nan)
    ttft = (queue + prefill) * nan
    e2el = (queue + prefill + decode) * nan
    df = pd.DataFrame({
        "request_id": np.arange(n), "replica": 0, "arrival_time_s": arrival,
        "first_scheduled_time_s": (arrival + queue / 1e3) * nan,
        "first_token_time_s": arrival + ttft / 1e3, "finish_time_s": arrival + e2el / 1e3,
        "num_prompt_tokens": 1000, "num_output_tokens": np.where(done, out_tokens, 0), "max_tokens": 256,
        "num_cached_tokens": 0,
        "num_preemptions": np.zeros(n, int) if preemptions is None else np.asarray(preemptions),
        "ttft_ms": ttft, "tpot_ms": decode / (out_tokens - 1) * nan, "e2el_ms": e2el,
        "queue_ms": queue * nan, "prefill_ms": prefill * nan, "decode_ms": decode * nan,
        "preempted_ms": (np.zeros(n) if preempted_ms is None else np.asarray(preempted_ms, float)) * nan,
        "status": status, "reason": reason if reason is not None else [""] * n, "is_warmup": False,
    })
    return df


def variant(name, steps, itl=None, requests=None, **summary) -> VariantData:
    if itl is None:
        itl = (np.full(10, DECODE_S), np.full(10, 100.0))
    summary.setdefault("config", {"scheduler": "x"})
    return VariantData(name, summary, make_requests() if requests is None else requests, steps, itl)


def kinds(findings: list[Finding]) -> set[str]:
    return {f.kind for f in findings}


# ------------------------------------------------- the interference scenarios
LONG_PROMPTS = (4000, 6000, 8000, 5000)  # one arrives every 0.5 s among 24 decodes
PERIOD_S = 0.5


def continuous_long(merge=True) -> VariantData:
    tr = StepTrace(merge_decodes=merge)
    for i in range(40):
        tr.fill_decodes_until(i * PERIOD_S)
        tr.prefill_only(LONG_PROMPTS[i % 4])
    tr.fill_decodes_until(40 * PERIOD_S)
    steps, itl = tr.frames()
    return variant("continuous", steps, itl, config={"scheduler": "continuous"})


def chunked(budget: int, prompts=LONG_PROMPTS, name="chunked") -> VariantData:
    tr = StepTrace()
    for i in range(40):
        tr.fill_decodes_until(i * PERIOD_S)
        left = prompts[i % len(prompts)]
        while left > 0:
            tr.mixed(min(budget, left))
            left -= budget
    tr.fill_decodes_until(40 * PERIOD_S)
    steps, itl = tr.frames()
    return variant(name, steps, itl, config={"scheduler": "chunked", "max_num_batched_tokens": budget})


def continuous_with(prompt_tokens: int, period_s: float, n: int, name="continuous") -> VariantData:
    tr = StepTrace()
    for i in range(n):
        tr.fill_decodes_until(i * period_s)
        tr.prefill_only(prompt_tokens)
    tr.fill_decodes_until(n * period_s)
    steps, itl = tr.frames()
    return variant(name, steps, itl, config={"scheduler": "continuous"})


def test_continuous_with_long_prompts_names_prefill_interference():
    v = continuous_long()
    s = interference_stats(v)
    assert s["decode_step_ms"] == pytest.approx(9.0)              # merged decode rows count per step
    assert s["stall_step_ms"] == pytest.approx(prefill_s(8000) * 1e3)  # p90 by duration: the 8,000-token prompt
    assert s["stall_ratio"] == pytest.approx(205 / 9)
    assert s["long_prefill_share"] == 1.0
    f = [x for x in diagnose("continuous", v) if x.kind == "prefill_interference"]
    assert len(f) == 1 and f[0].severity == "high"
    # Stalled gaps are prompt step + next decode step: 114/139/164/214 ms, 24 tokens each per 0.5 s
    # among ~900 tokens (2.6 %), so p99 falls on the 6,000-token prompt's gap: 155 + 9 = 164 ms.
    assert "ITL p99 164 ms vs median 9.00 ms" in f[0].evidence and "205 ms (p90), 23×" in f[0].evidence
    assert kinds(diagnose("continuous", v)) == {"prefill_interference"}


def test_unmerged_steps_give_the_same_verdict():
    a, b = interference_stats(continuous_long(True)), interference_stats(continuous_long(False))
    for k in ("decode_step_ms", "stall_step_ms", "itl_median_ms", "itl_p99_ms", "itl_max_ms"):
        assert a[k] == pytest.approx(b[k])


@pytest.mark.parametrize("budget", [512, 1024, 2048])
def test_chunked_on_the_same_input_is_not_prefill_interference(budget):
    v = chunked(budget)
    s = interference_stats(v)
    # The longest step is one full chunk plus the decodes.
    assert s["stall_step_ms"] == pytest.approx((budget * 25e-6 + DECODE_S) * 1e3)
    assert s["stall_ratio"] < 10
    assert "prefill_interference" not in kinds(diagnose("chunked", v))


def test_interference_advice_follows_whether_the_scheduler_chunks():
    """Long prompts mixed whole with decodes (a budget as large as them): with a
    chunking scheduler the advice is a smaller budget; with one that schedules
    prompts whole (``mixed``, where a budget under max_model_len is refused) it
    is chunked prefill."""
    v = chunked(8192)
    advice = {}
    for name in ("chunked", "mixed"):
        v.summary["config"] = {"scheduler": name, "max_num_batched_tokens": 8192}
        [f] = [x for x in diagnose(name, v) if x.kind == "prefill_interference"]
        advice[name] = f.cause
    assert "a smaller max_num_batched_tokens" in advice["chunked"]
    assert "mix decodes with whole prompts; chunked prefill" in advice["mixed"]
    assert "a smaller max_num_batched_tokens" not in advice["mixed"]


def test_continuous_with_short_prompts_is_not_prefill_interference():
    v = continuous_with(48, period_s=0.125, n=160)  # 8 req/s of 48-token prompts
    s = interference_stats(v)
    assert s["stall_step_ms"] == pytest.approx(6.2)
    assert kinds(diagnose("continuous", v)) == set()


def test_verdict_reads_the_numbers_not_the_scheduler_name():
    long_run, chunk_run = continuous_long(), chunked(2048)
    long_run.summary["config"] = {"scheduler": "chunked"}
    chunk_run.summary["config"] = {"scheduler": "continuous"}
    assert "prefill_interference" in kinds(diagnose("x", long_run))
    assert "prefill_interference" not in kinds(diagnose("x", chunk_run))
    # Whole 2,000-token prompts cost what a 2,048-token chunk does: not flagged either.
    assert "prefill_interference" not in kinds(diagnose("x", continuous_with(2000, 0.5, 40)))


# ------------------------------------------------------------------ queueing
def queue_steps(n=400, running=256, waiting_growth=True, kv=0.5, running_curve=None) -> pd.DataFrame:
    t = np.arange(n) * 0.05
    run = np.full(n, running) if running_curve is None else running_curve
    return pd.DataFrame(dict(replica=0, start_time_s=t, num_steps=1, step_time_s=0.05, num_running_seqs=run,
                             num_waiting_reqs=np.arange(n) // 2 if waiting_growth else 3,
                             num_batched_tokens=running, num_prefill_tokens=0, num_decode_tokens=running,
                             kv_cache_usage=kv, num_preempted=0))


def test_overload_names_queueing_and_the_full_batch():
    req = make_requests(queue_ms=np.linspace(0, 8000, 200), prefill_ms=60.0)
    v = variant("v", queue_steps(), requests=req, config={"max_num_seqs": 256})
    f = [x for x in diagnose("v", v) if x.kind == "queueing"]
    assert len(f) == 1 and f[0].severity == "high"
    assert "keeps growing" in f[0].cause and "max_num_seqs=256" in f[0].cause
    # mean queue 4,000 ms of mean TTFT 4,060 ms = 99 %
    assert "4,000 ms" in f[0].evidence and "99 %" in f[0].evidence and "4,060 ms" in f[0].evidence


def test_half_empty_batch_with_waiting_requests_blames_the_policy():
    n = 400
    drain = np.tile(np.linspace(32, 1, 40).round(), n // 40)  # a batch drains, then the next starts
    req = make_requests(queue_ms=np.tile(np.linspace(100, 3000, 20), 10), prefill_ms=60.0)
    v = variant("v", queue_steps(n, running=32, waiting_growth=False, kv=0.3, running_curve=drain), requests=req)
    f = [x for x in diagnose("v", v) if x.kind == "queueing"]
    assert len(f) == 1 and "held them back" in f[0].cause and "had room" in f[0].cause and "bursts" not in f[0].cause


def test_bursty_queue_that_drains_is_named_as_peaks():
    req = make_requests(queue_ms=np.tile(np.r_[np.linspace(0, 3000, 10), np.linspace(3000, 0, 10)], 10))
    v = variant("v", queue_steps(waiting_growth=False), requests=req, config={"max_num_seqs": 256})
    f = [x for x in diagnose("v", v) if x.kind == "queueing"]
    assert len(f) == 1 and f[0].severity == "medium"
    assert "drains between those peaks" in f[0].cause and "max_num_seqs=256" in f[0].cause


def test_short_queues_are_not_queueing():
    assert kinds(diagnose("v", variant("v", queue_steps(waiting_growth=False), requests=make_requests()))) == set()


def test_queue_dominated_but_fast_ttft_is_not_queueing():
    # 20 ms of queueing before a 5 ms prefill: 80 % of TTFT, but p99 TTFT 25 ms is no problem.
    req = make_requests(queue_ms=20.0, prefill_ms=5.0)
    assert "queueing" not in kinds(diagnose("v", variant("v", queue_steps(waiting_growth=False), requests=req)))


# --------------------------------------------------------------- KV capacity
def test_full_kv_with_preemptions_names_kv_capacity():
    pre = np.zeros(200, int)
    pre[:30] = 2
    req = make_requests(preemptions=pre, preempted_ms=np.where(pre > 0, 150.0, 0.0))
    v = variant("v", queue_steps(waiting_growth=False, kv=np.linspace(0.5, 0.97, 400)), requests=req)
    f = [x for x in diagnose("v", v) if x.kind == "kv_capacity"]
    assert len(f) == 1 and f[0].severity == "high"
    # 60 preemptions on 30 of 200 requests (15 %); 30 × 150 ms = 4.50 s recomputed
    assert "97 %" in f[0].evidence and "60 preemptions" in f[0].evidence and "15 %" in f[0].evidence
    assert "4.50 s" in f[0].evidence and "fp8" in f[0].cause and "max_num_seqs" in f[0].cause


def test_full_kv_without_preemptions_is_not_kv_capacity():
    v = variant("v", queue_steps(waiting_growth=False, kv=0.97))
    assert "kv_capacity" not in kinds(diagnose("v", v))


def test_preemptions_with_kv_room_are_not_kv_capacity():
    req = make_requests(preemptions=np.r_[np.ones(5, int), np.zeros(195, int)])
    assert "kv_capacity" not in kinds(diagnose("v", variant("v", queue_steps(waiting_growth=False, kv=0.6),
                                                           requests=req)))


# ---------------------------------------------------------------- rejections
def test_rejected_requests_quote_the_most_common_reason():
    status = ["rejected"] * 5 + ["finished"] * 95
    # Reasons carry each request's numbers: the four over-long ones count as one kind.
    too_long = [f"prompt ({p}) + max_tokens (512) > max_model_len (8192)" for p in (9000, 9100, 8500, 12000)]
    reason = too_long + ["cannot be admitted even on an idle replica (KV cache too small for it)"] + [""] * 95
    req = make_requests(n=100, status=status, reason=reason)
    f = [x for x in diagnose("v", variant("v", queue_steps(waiting_growth=False), requests=req))
         if x.kind == "rejected"]
    assert len(f) == 1 and f[0].severity == "high"  # 5 % of requests
    assert "5 of 100" in f[0].evidence and f"(4×), e.g. \"{too_long[0]}\"" in f[0].evidence
    assert "max_model_len" in f[0].cause


def test_no_rejections_no_rejected_finding():
    assert "rejected" not in kinds(diagnose("v", variant("v", queue_steps(waiting_growth=False))))


def test_warmup_rejections_do_not_count():
    req = make_requests(n=10, status=["rejected"] + ["finished"] * 9, reason=["x"] + [""] * 9)
    req["is_warmup"] = [True] + [False] * 9
    assert "rejected" not in kinds(diagnose("v", variant("v", queue_steps(waiting_growth=False), requests=req)))


# ------------------------------------------------------------------- winners
def _summ(name, **kw) -> VariantData:
    return variant(name, queue_steps(10), **kw)


def test_compare_winners_names_winner_and_factor():
    a = _summ("a", request_throughput=10.0, p99_ttft_ms=100.0, p99_itl_ms=50.0, request_goodput=None)
    b = _summ("b", request_throughput=5.0, p99_ttft_ms=400.0, p99_itl_ms=50.5, request_goodput=None)
    lines = compare_winners({"a": a, "b": b})
    text = "\n".join(lines)
    assert "Request throughput: a wins with 10.00 req/s, 2.0× higher than b (5.00 req/s)." in lines
    assert "p99 TTFT: a wins with 100 ms, 4.0× lower than b (400 ms)." in lines
    assert "p99 ITL: a leads with 50.0 ms, about the same as b (50.5 ms)." in lines  # within 2 %
    assert "Goodput" not in text
    assert lines[-1] == "Overall, metrics led (first, or within 2 % of the first): a 3 of 3 (2 outright), b 1 of 3."


def test_compare_winners_per_gpu_when_gpu_counts_differ():
    """a: 3,000 tok/s on 6 GPUs (500 per GPU), b: 2,400 on 4 (600): a wins the throughput,
    b is better per GPU; said, not counted as a win. Same GPU counts: no such line."""
    a = _summ("a", output_throughput=3000.0, num_gpus=6, request_goodput=None)
    b = _summ("b", output_throughput=2400.0, num_gpus=4, request_goodput=None)
    lines = compare_winners({"a": a, "b": b})
    assert lines[-1] == ("The variants run on different GPU counts: output throughput per GPU at this load "
                         "b 600 tok/s (4 GPUs), a 500 tok/s (6 GPUs).")
    assert "Output throughput: a wins" in lines[0]
    b4 = _summ("b", output_throughput=2400.0, num_gpus=6, request_goodput=None)
    assert not any("GPU counts" in x for x in compare_winners({"a": a, "b": b4}))


def test_latencies_rank_when_every_variant_rejected_the_same_requests():
    """20 of 200 requests (over max_model_len, say) rejected by both variants: a paired
    comparison of the 180 both served, ranked on latency and said so. A variant that
    rejected 20 more than the other is not ranked on latency."""
    st = ["rejected" if i % 10 == 0 else "finished" for i in range(200)]
    same = make_requests(status=st, reason=["too long" if x == "rejected" else "" for x in st])
    a = _summ("a", requests=same, completed=180, num_rejected=20, p99_ttft_ms=100.0, request_goodput=None)
    b = _summ("b", requests=same.copy(), completed=180, num_rejected=20, p99_ttft_ms=300.0, request_goodput=None)
    lines = compare_winners({"a": a, "b": b})
    assert "p99 TTFT: a wins with 100 ms, 3.0× lower than b (300 ms)." in lines
    assert ("Every variant rejected the same 20 of 200 requests (reasons in each variant's requests.csv): the "
            "latencies compare the requests they all served.") in lines
    assert not any("not ranked" in x for x in lines)
    st2 = ["rejected" if i % 5 == 0 else "finished" for i in range(200)]  # 40: the same 20 and 20 more
    more = make_requests(status=st2, reason=["x" if x == "rejected" else "" for x in st2])
    b2 = _summ("b", requests=more, completed=160, num_rejected=40, p99_ttft_ms=30.0, request_goodput=None)
    lines = compare_winners({"a": a, "b": b2})
    assert not any(x.startswith("p99 TTFT") for x in lines)  # only a is ranked: no comparison
    assert ("b is not ranked on latency: it rejected 40 of 200 requests (20 that another variant served), "
            "so its latencies cover only the rest.") in lines


def test_launch_choice_says_why_on_a_tie_or_an_undeployable_leader():
    from sim.compare.winners import launch_choice

    # (variant, metrics won outright, metrics led), as ranked_by_wins ranks them: most led first
    static = ["scheduler 'static' is not offered by vLLM"]
    assert launch_choice([("a", 3, 4), ("b", 1, 2)], {}) == ("a", None)
    w, note = launch_choice([("static", 3, 4), ("chunked", 2, 3)], {"static": static})
    assert w == "chunked" and note.endswith("static ranked higher but scheduler 'static' is not offered by vLLM")
    w, note = launch_choice([("static", 2, 3), ("chunked", 2, 3)], {"static": static})
    assert w == "chunked" and note == ("a tie: chunked and static each lead 3 metric(s) (first or within 2 % of the "
                                       "first) and win as many outright (report.md, What wins); static ranks as high "
                                       "but scheduler 'static' is not offered by vLLM")
    w, note = launch_choice([("chunked", 2, 3), ("mixed", 2, 3)], {})
    assert w == "chunked" and note.endswith("chunked comes first in the comparison's order")
    # the leaders within 2 % (no outright win) against a variant winning fewer metrics outright
    w, note = launch_choice([("new", 0, 8), ("old", 0, 8), ("ancient", 2, 2)], {})
    assert w == "new" and note.startswith("a tie: new and old each lead 8 metric(s)")
    w, note = launch_choice([("new", 3, 8), ("old", 1, 8)], {})
    assert w == "new" and note == ("new and old each lead 8 metric(s) (first or within 2 % of the first); new wins "
                                   "more of them outright (3, against old 1; report.md, What wins)")
    assert launch_choice([], {}) == (None, None)


def test_near_equal_leaders_share_their_metrics_in_the_ranking():
    # two variants within 2 % of each other on every metric win nothing outright; a third
    # winning two metrics outright but trailing far on the rest used to rank first
    from sim.compare.winners import ranked_by_wins

    keys = dict(request_goodput=None, median_ttft_ms=None, p99_e2el_ms=None)
    a = _summ("a", **{**keys, "request_throughput": 10.0, "p99_ttft_ms": 100.0, "median_ttft_ms": 50.0,
                      "p99_itl_ms": 50.0, "p99_tpot_ms": 20.0})
    b = _summ("b", **{**keys, "request_throughput": 10.1, "p99_ttft_ms": 101.0, "median_ttft_ms": 50.5,
                      "p99_itl_ms": 50.5, "p99_tpot_ms": 20.2})
    c = _summ("c", **{**keys, "request_throughput": 4.0, "p99_ttft_ms": 900.0, "median_ttft_ms": 400.0,
                      "p99_itl_ms": 30.0, "p99_tpot_ms": 12.0})
    ranked = ranked_by_wins({"a": a, "b": b, "c": c})
    assert ranked == [("a", 0, 3), ("b", 0, 3), ("c", 2, 2)]  # (won outright, led): a and b first


def test_compare_winners_single_variant_is_empty():
    assert compare_winners({"a": _summ("a", request_throughput=1.0)}) == []


def test_long_ttft_split_between_queue_and_prefill_is_named():
    """Every 10th request queues 2 s, the others not at all (mean 200 ms, 40 % of
    TTFT), each then takes 300 ms to its first token: p99 TTFT 2.3 s > 5 × the
    median prefill, but queueing is under half of TTFT, so the queueing finding
    does not fire; the long-TTFT finding names the prefill step, with the split."""
    req = make_requests(queue_ms=np.tile(np.r_[np.zeros(9), 2000.0], 20), prefill_ms=300.0)
    f = diagnose("v", variant("v", queue_steps(waiting_growth=False), requests=req))
    assert [x.kind for x in f] == ["long_ttft"]
    assert "queueing 200 ms (40 %)" in f[0].evidence and "300 ms (60 %)" in f[0].evidence


def test_a_variant_that_rejects_most_requests_is_not_ranked_on_latency():
    from sim.compare.winners import compare_winners

    good = variant("good", queue_steps(waiting_growth=False), completed=200, num_rejected=0,
                   request_throughput=2.0, median_ttft_ms=300.0, p99_ttft_ms=900.0)
    bad = variant("bad", queue_steps(waiting_growth=False), completed=10, num_rejected=190,
                  request_throughput=0.1, median_ttft_ms=20.0, p99_ttft_ms=30.0)
    lines = compare_winners({"good": good, "bad": bad})
    assert "bad is not ranked on latency: it rejected 190 of 200 requests, so its latencies cover only the rest." \
        in lines
    assert lines[0].startswith("Request throughput: good wins with 2")
    assert not any("TTFT" in line for line in lines)  # one ranked variant: no latency comparison
    assert lines[-1] == "Overall, metrics led (first, or within 2 % of the first): good 1 of 1 (1 outright)."
