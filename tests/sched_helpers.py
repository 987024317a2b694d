"""Drive a scheduler step by step without a clock (test helper)."""

from __future__ import annotations

from sim.kv_cache import KVCacheManager
from sim.request import Request
from sim.scheduler import SchedulerLimits, make_scheduler


def make(mode: str, *, num_gpu_blocks: int = 1000, block_size: int = 4, max_num_seqs: int = 4,
         max_num_batched_tokens: int = 8, max_model_len: int = 64, prefix: bool = False, **kw):
    limits = SchedulerLimits(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                             max_model_len=max_model_len, block_size=block_size, **kw)
    kv = KVCacheManager(num_gpu_blocks, block_size, enable_prefix_caching=prefix, max_model_len=max_model_len)
    return make_scheduler(mode, limits, kv)


def req(rid: int, prompt: int, out: int, max_tokens: int | None = None, **kw) -> Request:
    return Request(rid, 0.0, prompt, max_tokens or out, out, **kw)


def step(sched):
    """One engine step: returns (scheduled {id: tokens}, emitted ids, finished ids, output)."""
    out = sched.schedule()
    tokens = {r.request_id: n for r, n in zip(out.scheduled, out.num_scheduled_tokens)}
    emitted, finished = sched.update_from_output(out)
    # partial prefill chunks (counted at schedule time) are exactly those that emit nothing
    assert out.num_partial == len(out.scheduled) - len(emitted)
    return tokens, [r.request_id for r in emitted], [r.request_id for r in finished], out


def run_table(sched, arrivals: dict[int, list[Request]], max_steps: int = 200):
    """Run to completion; ``arrivals[k]`` are added before step k (1-based).
    Returns a list of (tokens, emitted, finished, out) per step."""
    rows = []
    k = 1
    while k <= max_steps:
        for r in arrivals.get(k, []):
            sched.add_request(r)
        if not sched.has_unfinished_requests() and all(kk <= k for kk in arrivals):
            break
        rows.append(step(sched))
        k += 1
    return rows
