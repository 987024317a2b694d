"""``scheduler: chunked`` — vLLM v1's scheduler (chunked prefill, one token budget).

Follows ``vllm/v1/core/sched/scheduler.py::schedule`` of vLLM 0.24
(ENGINE_SEMANTICS §1.3):

1. ``budget = max_num_batched_tokens``.
2. RUNNING pass in list order while budget > 0: a request needs
   ``num_tokens − num_computed_tokens`` tokens (1 for a decode, the rest of the
   prompt for an unfinished prefill), capped by ``long_prefill_token_threshold``,
   the budget and ``max_model_len − 1 − num_computed``. If its blocks do not fit,
   preempt (FCFS: the running-list tail; PRIORITY: the largest
   (priority, arrival)); a victim already scheduled this step gives its tokens
   back; if the victim is the request itself, the pass stops.
3. WAITING pass, only when nothing was preempted this step, while budget > 0 and
   ``len(running) < max_num_seqs``: prefix-cache lookup, ``n = num_tokens − hits``
   capped as above, ``allocate_slots`` with the full-sequence check of 0.24
   (``scheduler_reserve_full_isl``). The first failure stops admission
   (head-of-line blocking).

``capacity_scheduler_policy`` switches admission to TensorRT-LLM's rules
(``capacityScheduler.cpp``, ENGINE_SEMANTICS §4): ``guaranteed_no_evict``
admits only requests whose blocks to completion (prompt + ``max_tokens``) fit
beside every running request's remaining blocks, so nothing is ever preempted;
``max_utilization`` reserves next-step blocks only and, on a shortfall, pauses
the last-started request not yet scheduled this step (possibly the request
itself). Simplification: TensorRT-LLM's chunk rounding to ``tokens_per_block``
and its reuse-aware skip are not modelled.

With a capacity policy set, admission allocates the blocks of the request's
whole prompt at its first chunk, as TensorRT-LLM's PyTorch backend does
(``tensorrt_llm/_torch/pyexecutor/resource_manager.py``
``KVCacheManager.prepare_resources``: ``add_sequence(req.py_request_id,
req.prompt_len, ...)`` when ``req.is_first_context_chunk``), so a chunked
prompt in progress never runs short of blocks between its chunks; vLLM
allocates chunk by chunk. A request's admission check counts the same blocks
(``kvCacheManager.cpp::getNeededBlocksOneStep``: the whole prompt for a first
context chunk).

``max_utilization`` pause and resume, as TensorRT-LLM does it
(``capacityScheduler.cpp::MaxUtilizationScheduler``, mirrored by
``tensorrt_llm/_torch/pyexecutor/scheduler/scheduler_v2.py::MaxUtilizationPolicy``;
``py_executor.py::_pause_requests``): the paused request's ``pause()``
(``llmRequest.h``) folds its generated tokens into the prompt and returns it
to ``CONTEXT_INIT``; ``_terminate_request`` → ``free_resources`` frees all its
KV blocks; it stays in ``active_requests`` in arrival order, ahead of later
arrivals, and is resumed as a new context of prompt + generated tokens (a
recompute) once its whole prompt's blocks fit; a context that does not fit
with no started request after it ends the pass (head of line). Here the
paused request goes to the front of the waiting queue and the WAITING pass
readmits it first, which is the same order.

Speculative decoding (drafts, lookahead slots) is not modelled: every decode
schedules one token.
"""

from __future__ import annotations

from sim.request import Request, RequestStatus
from sim.scheduler.base import Scheduler, SchedulerOutput


class ChunkedPrefillScheduler(Scheduler):
    name = "chunked"
    chunked_prefill = True
    supports_kv_cache_groups = True  # only allocate_slots / free / get_computed_blocks (and subclasses')

    def _schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self._schedule_running(out, self.limits.max_num_batched_tokens)
        if not out.preempted and not self.hold_waiting:  # vLLM skips admission in a step that preempted
            self._schedule_waiting(out, budget)
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        """The RUNNING pass; returns the budget left. (Hot path: the token cap
        of :meth:`_cap_tokens` is inlined, and so is :meth:`_add_scheduled`
        for stretches of plain decodes. Where the manager says a decode's
        ``allocate_slots`` within the held slots is a no-op
        (``decode_skips_allocation``: prefix caching off), a stretch calls it
        only at a block boundary; else, for every decode: it hashes the blocks
        that fill.)"""
        alloc = self.kv.allocate_slots
        skip_alloc = getattr(self.kv, "decode_skips_allocation", False)
        # a plain decode at a block boundary takes one block: allocate_slots(req, 1)
        bulk = getattr(self.kv, "grows_decode_in_bulk", False)
        grow1 = lambda r: alloc(r, 1) is not None  # noqa: E731
        growing = []
        running = self.running
        cap_policy = self.limits.capacity_scheduler_policy
        thr = self.limits.long_prefill_token_threshold
        last_pos = self.limits.max_model_len - 1
        add = self._add_scheduled
        sched_reqs, sched_n, sched_c = out.scheduled, out.num_scheduled_tokens, out.num_computed_before
        c_append = sched_c.append
        num_decode = 0
        i = 0
        while i < len(running) and budget > 0:
            # A stretch of plain decodes: one token each (allocating a block for
            # those at a block boundary, or allocate_slots(req, 1) for each); their
            # counts are added once after the stretch. A failed allocation (no side
            # effects) ends the stretch and the general path below preempts.
            n0 = len(sched_c)
            room = self.kv.num_free_blocks if bulk else 0  # blocks for the decodes starting one
            for req in running[i:i + budget]:
                c = req.num_computed_tokens
                o = req.num_output_tokens
                if req.num_prompt_tokens + o - c != 1 or not o or c >= last_pos:
                    break
                if skip_alloc:
                    if c >= req.kv_capacity:
                        if bulk:  # one more block each, taken together after the stretch (same ids)
                            if len(growing) >= room:
                                break
                            growing.append(req)
                        elif not grow1(req):
                            break
                elif alloc(req, 1) is None:
                    break
                c_append(c)
                req.num_computed_tokens = c + 1
            if growing:
                self.kv.grow_decode_blocks(growing)
                growing = []
            m = len(sched_c) - n0
            if m:
                sched_reqs += running[i:i + m]  # the stretch is contiguous
                sched_n += [1] * m
                num_decode += m
                budget -= m
                i += m
                continue
            req = running[i]
            c = req.num_computed_tokens
            o = req.num_output_tokens
            n = req.num_prompt_tokens + o - c
            if 0 < thr < n:
                n = thr
            if n > budget:
                n = budget
            if n > last_pos - c:
                n = last_pos - c
            if n <= 0:
                i += 1
                continue
            scheduled_ok = True
            while alloc(req, n) is None:
                victim_idx = self._pick_victim(i, cap_policy)
                victim = running.pop(victim_idx)
                if victim is not req and victim in out.scheduled:
                    out.num_decode_tokens += num_decode  # _unschedule reads the counts
                    num_decode = 0
                    budget += self._unschedule(out, victim)
                if victim_idx < i:
                    i -= 1
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is req:
                    scheduled_ok = False
                    break
            if not scheduled_ok:
                if cap_policy == "max_utilization":
                    continue  # TRT-LLM pauses it and carries on with the next request
                break
            add(out, req, n)
            budget -= n
            i += 1
        out.num_decode_tokens += num_decode
        return budget

    def _schedule_waiting(self, out: SchedulerOutput, budget: int) -> int:
        """The WAITING pass (admission); returns the budget left."""
        lim = self.limits
        kv = self.kv
        waiting = self.waiting
        running = self.running
        no_evict = lim.capacity_scheduler_policy == "guaranteed_no_evict"
        trt = lim.capacity_scheduler_policy is not None
        while waiting and budget > 0 and len(running) < lim.max_num_seqs:
            req = waiting.peek()
            hit_blocks, num_hit = kv.get_computed_blocks(req)
            n = req.num_tokens - num_hit
            if not self.chunked_prefill and n > budget:
                break  # vLLM 0.24 stops here when chunking is off
            n = self._cap_tokens(req, n, budget)
            if n <= 0:
                break
            if no_evict:
                if not self._fits_no_evict(req):
                    break
                num_free_before = kv.num_free_blocks
            # TensorRT-LLM (a capacity policy set) takes the blocks of the whole
            # prompt at its first context chunk: ``add_sequence(prompt_len)``.
            rest = req.num_tokens - num_hit - n if trt else 0
            if kv.allocate_slots(req, n, num_hit, hit_blocks, num_lookahead_tokens=rest,
                                 full_sequence_check=True, has_scheduled_reqs=bool(running)) is None:
                break
            waiting.pop()
            self._admit(req, num_hit)
            running.append(req)
            if no_evict:
                self._no_evict_admitted(req, num_free_before)
            out.admitted.append(req)
            self._add_scheduled(out, req, n)
            budget -= n
        return budget

    def _pick_victim(self, current: int, cap_policy: str | None) -> int:
        running = self.running
        if cap_policy == "max_utilization":
            # Last started among those not yet scheduled this pass (may be current).
            return len(running) - 1
        if self.limits.policy == "priority":
            best = 0
            for j in range(1, len(running)):
                r, b = running[j], running[best]
                if (r.priority, r.arrival_time, r.request_id) > (b.priority, b.arrival_time, b.request_id):
                    best = j
            return best
        return len(running) - 1

    def _admit(self, req: Request, num_hit: int) -> None:
        """WAITING/PREEMPTED → RUNNING with ``num_hit`` prompt tokens from the
        prefix cache. Hit statistics count first admissions only (vLLM 0.24
        counts resumed requests separately)."""
        if req.status != RequestStatus.PREEMPTED:
            req.num_cached_tokens = num_hit
        self.kv.record_prefix_cache_stats(req, num_hit)
        req.num_computed_tokens = num_hit
        req.status = RequestStatus.RUNNING
