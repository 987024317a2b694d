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

Speculative decoding (drafts, lookahead slots) is not modelled: every decode
schedules one token.
"""

from __future__ import annotations

from sim.request import Request, RequestStatus
from sim.scheduler.base import Scheduler, SchedulerOutput


class ChunkedPrefillScheduler(Scheduler):
    name = "chunked"
    chunked_prefill = True

    def _schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self._schedule_running(out, self.limits.max_num_batched_tokens)
        if not out.preempted:  # vLLM skips admission in a step that preempted
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
        grow1 = (self.kv.grow_decode_block if getattr(self.kv, "grows_decode_in_bulk", False)
                 else lambda r: alloc(r, 1) is not None)
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
            for req in running[i:i + budget]:
                c = req.num_computed_tokens
                o = req.num_output_tokens
                if req.num_prompt_tokens + o - c != 1 or not o or c >= last_pos:
                    break
                if skip_alloc:
                    if c >= req.kv_capacity and not grow1(req):
                        break
                elif alloc(req, 1) is None:
                    break
                c_append(c)
                req.num_computed_tokens = c + 1
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
            if kv.allocate_slots(req, n, num_hit, hit_blocks, full_sequence_check=True,
                                 has_scheduled_reqs=bool(running)) is None:
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

    def spans_admit(self) -> bool:
        """Can a decode span take in this scheduler's admissions
        (:meth:`span_admissions`)? This class's own schedule with chunked
        prefill, an FCFS queue never reordered, no long-prefill threshold, no
        prefix cache and no TensorRT-LLM capacity policy; a subclass that
        changes the schedule gets False."""
        cls = type(self)
        lim = self.limits
        return (cls._schedule is ChunkedPrefillScheduler._schedule
                and cls._schedule_waiting is ChunkedPrefillScheduler._schedule_waiting
                and cls._schedule_running is ChunkedPrefillScheduler._schedule_running
                and self.chunked_prefill and not self.waiting.priority and not self.waiting.reordered
                and not lim.long_prefill_token_threshold and not lim.capacity_scheduler_policy
                and not getattr(self.kv, "enable_prefix_caching", False))

    def span_admissions(self, num_running: int, budget: int,
                        free_blocks: int | None = None) -> tuple[list[Request], int] | None:
        """The WAITING pass inside a decode span (:meth:`spans_admit`), after a
        running pass that left ``num_running`` requests running and ``budget``
        tokens: ``(admitted, n)``, the requests it admits in order, the last of
        them with ``n`` tokens scheduled (its whole sequence, or a first chunk
        when the budget runs out; a preempted request recomputes its outputs
        too). With ``free_blocks`` (free KV blocks after the running pass) it
        stops at the first request whose blocks do not fit or that
        ``max_num_seqs`` leaves out (head-of-line blocking), as
        :meth:`_schedule_waiting`. Without (the span checks blocks itself),
        every waiting request must be admitted whole, else None."""
        lim = self.limits
        room = lim.max_num_seqs - num_running
        bs = lim.block_size
        out = []
        last = 0
        for req in self.waiting:
            if budget <= 0 or room <= 0:
                break
            n = req.num_tokens
            if n > budget:
                n = budget
            if free_blocks is not None:
                # allocate_slots(full_sequence_check=True): the whole sequence's blocks must fit
                if (-(-min(req.num_tokens, lim.max_model_len) // bs) > free_blocks
                        or -(-n // bs) > free_blocks):
                    break
                free_blocks -= -(-n // bs)
            elif n < req.num_tokens:
                return None
            out.append(req)
            last = n
            budget -= n
            room -= 1
        if free_blocks is None and len(out) < len(self.waiting):
            return None
        return out, last

    def admit_to_span(self, req: Request, num_tokens: int) -> None:
        """Admit the waiting queue's head with ``num_tokens`` scheduled, as the
        WAITING pass does (a span's join, after :meth:`span_admissions`),
        holding no KV blocks yet: the span allocates them when it is applied."""
        if self.waiting.pop() is not req:
            raise RuntimeError(f"request {req.request_id}: not at the head of the waiting queue")
        self._no_evict_invalidate()  # it holds no blocks yet
        if req.status != RequestStatus.PREEMPTED:  # as _admit(req, 0) with caching off
            req.num_cached_tokens = 0
        req.status = RequestStatus.RUNNING
        self.running.append(req)
        req.num_computed_tokens = num_tokens

    def arrival_may_change_schedule(self) -> bool:
        w = self.waiting
        return w.priority or w.reordered or not w

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
