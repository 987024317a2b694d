"""The scheduler interface and the state every batching mode shares.

Clock-free, as vLLM's ``vllm/v1/core/sched/scheduler.py``: a scheduler counts
tokens and blocks; the engine owns time. One engine step is::

    out = scheduler.schedule()          # who runs how many tokens; who was preempted
    t = cost_model.step_time_s(out.new_tokens, out.context_lens)
    finished = scheduler.update_from_output(out)   # advance, sample, stop, free

``schedule()`` advances ``num_computed_tokens`` optimistically (vLLM does the
same); ``update_from_output`` samples one token for every scheduled request
whose ``num_computed_tokens`` reached ``num_tokens`` — partial prefill chunks
emit nothing (ENGINE_SEMANTICS §1.3, step 5) — and finishes requests at
``min(output_len, max_tokens)`` outputs or at ``max_model_len`` (``check_stop``).

Subclasses implement :meth:`Scheduler._schedule`. A researcher's policy is a
subclass registered with :func:`sim.scheduler.register_scheduler`.
"""

from __future__ import annotations

import itertools

from sim.request import Request, RequestStatus
from sim.scheduler.types import SchedulerLimits, SchedulerOutput, WaitingQueue

__all__ = ["Scheduler", "SchedulerLimits", "SchedulerOutput", "WaitingQueue"]


class Scheduler:
    """Base class: queues, admission checks, token sampling, stop checks.

    ``kv`` is a KV-cache manager (``sim.kv_cache``): ``allocate_slots`` returns
    the new blocks or ``None`` with no side effects; ``free`` returns them.
    """

    name = "base"
    frees_on_finish = True  # static batching holds finished sequences' KV to batch end

    def __init__(self, limits: SchedulerLimits, kv) -> None:
        self.limits = limits
        self.kv = kv
        self.waiting = WaitingQueue(limits.policy)
        self.running: list[Request] = []
        self.rejected: list[Request] = []
        self.finished: list[Request] = []
        self.num_preemptions = 0
        self._seq = itertools.count()

    # ------------------------------------------------------------------ intake
    def add_request(self, req: Request) -> bool:
        """Queue a request, or reject it (returns False) when it can never run:
        ``num_prompt_tokens + max_tokens > max_model_len`` (vLLM answers 400) or
        more blocks than the whole KV cache. The reason lands in ``req.reason``."""
        lim = self.limits
        need = req.num_prompt_tokens + req.max_tokens
        if need > lim.max_model_len:
            return self._reject(
                req,
                f"prompt ({req.num_prompt_tokens}) + max_tokens ({req.max_tokens}) = {need} "
                f"> max_model_len ({lim.max_model_len})",
            )
        if not self.kv.can_ever_fit(self._tokens_to_fit(req)):
            return self._reject(req, f"{self._tokens_to_fit(req)} tokens exceed the whole KV cache "
                                     f"({self.kv.num_usable_blocks} blocks of {lim.block_size})")
        req.status = RequestStatus.WAITING
        self.waiting.add(req)
        return True

    def _tokens_to_fit(self, req: Request) -> int:
        """Tokens that must fit in the KV cache at once for the request to be
        served: what reservation policies reserve (prompt + ``max_tokens``), else
        what it will really hold at its end (prompt + true output length)."""
        if self.limits.capacity_scheduler_policy == "guaranteed_no_evict":
            return min(req.num_prompt_tokens + req.max_tokens, self.limits.max_model_len)
        return req.num_prompt_tokens + req.num_output_tokens_target

    def _reject(self, req: Request, reason: str) -> bool:
        req.status = RequestStatus.REJECTED
        req.reason = reason
        self.rejected.append(req)
        return False

    # ------------------------------------------------------------------ state
    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def has_unfinished_requests(self) -> bool:
        return bool(self.running) or bool(self.waiting)

    # ------------------------------------------------------------------ steps
    def schedule(self) -> SchedulerOutput:
        """One step's decisions. ``num_computed_tokens`` of every scheduled
        request is advanced optimistically, as vLLM's ``_update_after_schedule``."""
        return self._schedule()

    def _add_scheduled(self, out: SchedulerOutput, req: Request, n: int) -> None:
        """Schedule ``n`` tokens of ``req``: record it, classify the tokens as
        decode (one token after the last sampled one) or prefill (prompt chunks
        and recompute after preemption), and advance ``num_computed_tokens``."""
        c = req.num_computed_tokens
        out.scheduled.append(req)
        out.num_scheduled_tokens.append(n)
        out.num_computed_before.append(c)
        if n == 1 and req.num_output_tokens and c == req.num_prompt_tokens + req.num_output_tokens - 1:
            out.num_decode_tokens += 1
        else:
            out.num_prefill_tokens += n
            if c + n < req.num_prompt_tokens + req.num_output_tokens:
                out.num_partial += 1
        req.num_computed_tokens = c + n

    def _unschedule(self, out: SchedulerOutput, req: Request) -> int:
        """Undo :meth:`_add_scheduled` for ``req`` (a preemption victim gives its
        tokens back, vLLM 0.24); returns the tokens given back."""
        j = out.scheduled.index(req)
        n, c = out.num_scheduled_tokens[j], out.num_computed_before[j]
        req.num_computed_tokens = c
        if n == 1 and req.num_output_tokens and c == req.num_prompt_tokens + req.num_output_tokens - 1:
            out.num_decode_tokens -= 1
        else:
            out.num_prefill_tokens -= n
            if c + n < req.num_prompt_tokens + req.num_output_tokens:
                out.num_partial -= 1
        del out.scheduled[j], out.num_scheduled_tokens[j], out.num_computed_before[j]
        return n

    def _schedule(self) -> SchedulerOutput:  # pragma: no cover - abstract
        raise NotImplementedError

    def update_from_output(self, out: SchedulerOutput) -> tuple[list[Request], list[Request]]:
        """Sample a token for each scheduled request whose whole sequence is now
        computed; finish those that stop. Returns ``(emitted, finished)``: the
        requests that received a token this step and those that finished.

        vLLM's ``check_stop`` also stops a sequence at ``max_model_len``; that
        never comes first here: :meth:`add_request` admits only requests with
        ``num_prompt_tokens + max_tokens <= max_model_len``."""
        finished: list[Request] = []
        if not out.num_partial:  # every scheduled sequence is complete: each samples a token
            for req in out.scheduled:
                o = req.num_output_tokens + 1
                req.num_output_tokens = o
                if o >= req.num_output_tokens_target:
                    req.status = RequestStatus.FINISHED
                    finished.append(req)
            if finished:
                self._on_finished(finished)
            return out.scheduled, finished
        emitted: list[Request] = []
        for req in out.scheduled:
            o = req.num_output_tokens
            if req.num_computed_tokens < req.num_prompt_tokens + o:
                continue  # a partial prefill chunk emits nothing
            o += 1
            req.num_output_tokens = o
            emitted.append(req)
            if o >= req.num_output_tokens_target:
                req.status = RequestStatus.FINISHED
                finished.append(req)
        if finished:
            self._on_finished(finished)
        return emitted, finished

    def _on_finished(self, finished: list[Request]) -> None:
        self.finished.extend(finished)
        if self.frees_on_finish:
            for req in finished:
                self.kv.free(req)
            running = self.running
            if 8 * len(finished) < len(running):  # a few finishes in a big batch: C-level scans
                for req in finished:
                    running.remove(req)
            else:
                self.running = [r for r in running if r.status == RequestStatus.RUNNING]

    # ------------------------------------------------------------------ decode runs
    # The fast path (``exact_steps: false``): one output standing for k identical
    # decode-only steps, advanced in one event. Exactly equivalent to k calls of
    # schedule()/update_from_output() when nothing can change the batch in between.
    supports_decode_runs = True  # a subclass whose decisions can change without an
    #                              arrival, finish or preemption must set this False

    def arrival_may_change_schedule(self) -> bool:
        """Could a request arriving now change the next step? Called by the
        engine, before adding it, to decide whether a run of merged decode steps
        must be cut. Under FCFS a new request joins the tail of a non-empty
        queue whose head is blocked (that is why the queue is non-empty during a
        decode run), so it cannot be admitted before a finish. The base class
        answers True (always safe)."""
        return True

    def max_decode_run(self, out: SchedulerOutput) -> int:
        """How many identical decode-only steps, starting with ``out`` (already
        scheduled), are certain: every running request decodes one token each
        step; no preemption (the free blocks cover every block boundary crossed);
        no finish before the last of them; no admission (a waiting request that
        could not be admitted this step cannot be before a finish: decode steps
        only take blocks, never free them, and the budget and ``max_num_seqs``
        stay as they are). With prefix caching, runs need an empty waiting queue
        (an arrival then cuts the run, so admission sees the same hashed blocks as
        in the reference mode). Returns ≥ 1."""
        sched = out.scheduled
        if (out.preempted or out.num_prefill_tokens or not sched or not self.supports_decode_runs
                or len(sched) != len(self.running)):
            return 1
        if self.waiting and getattr(self.kv, "enable_prefix_caching", False):
            # Blocks are hashed as they fill; a waiting request could start to hit them.
            return 1
        mml = self.limits.max_model_len
        k = mml
        kv = self.kv
        skip = getattr(kv, "decode_skips_allocation", False)  # kv_capacity is kept up to date
        held = kv.num_held_blocks
        bs = self.limits.block_size
        rooms = []  # free slots after step 1
        for r in sched:
            o = r.num_output_tokens
            left = r.num_output_tokens_target - o
            if left < k:
                if left <= 1:  # finishes at step 1 (common in big batches): no run
                    return 1
                k = left
            left = mml - r.num_prompt_tokens - o
            if left < k:
                k = left
            rooms.append((r.kv_capacity if skip else held(r) * bs) - r.num_computed_tokens)
        if k <= 1:
            return 1
        free = kv.num_free_blocks
        # Blocks each request needs to write tokens c+1 .. c+k (c = context before step 1).
        extra = 0
        needs = []
        km1 = k - 1
        for room in rooms:
            if room < km1:
                needs.append(room)
                extra += -(-(km1 - room) // bs)
        if extra <= free:
            return k
        lo, hi = 1, k  # largest k' with need(k') <= free; need(1) = 0
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if sum(-(-(mid - 1 - room) // bs) for room in needs if room < mid - 1) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo

    spans_finishes = True  # a run may go on past finishes (see max_decode_span)

    def max_decode_span(self, out: SchedulerOutput) -> tuple[int, list[int] | None]:
        """A merged decode run that goes on past finishes: ``(k, lasts)``, where
        ``lasts[i]`` is the step (1-based) at which ``out.scheduled[i]`` finishes
        and leaves the batch, and ``k`` the last of them. Exactly what the
        reference mode does when nothing else changes the batch: with nobody
        waiting, the step after a finish schedules the same requests minus the
        finished ones, each decoding one token (the running pass keeps their
        order; the waiting pass has nobody to admit). Requires an empty waiting
        queue, caching off and paged growth (``grows_decode_in_bulk``: block ids
        are plain counts), and free blocks for every block boundary crossed up to
        each request's finish (then every intermediate allocation succeeds:
        finishes only add free blocks). Otherwise ``(max_decode_run(out), None)``.
        The engine uses it only where a finish cannot be seen before the run
        ends (open loop; no load-aware router across replicas)."""
        sched = out.scheduled
        kv = self.kv
        if (out.preempted or out.num_prefill_tokens or not sched or not self.supports_decode_runs
                or not self.spans_finishes or not self.frees_on_finish or self.waiting
                or len(sched) != len(self.running)
                or not getattr(kv, "grows_decode_in_bulk", False)):
            return self.max_decode_run(out), None
        mml = self.limits.max_model_len
        bs = self.limits.block_size
        lasts = []
        append = lasts.append
        k = need = 0
        for r in sched:
            o = r.num_output_tokens
            f = r.num_output_tokens_target - o
            g = mml - r.num_prompt_tokens - o
            if g < f:
                f = g
            append(f)
            if f > k:
                k = f
            # slots written through its last step: tokens c+1 .. c+f-1 after step 1
            s = r.num_computed_tokens + f - 1 - r.kv_capacity
            if s > 0:
                need += -(-s // bs)
        if k <= 1:
            return 1, None
        if need > kv.num_free_blocks:
            return self.max_decode_run(out), None
        return k, lasts

    def decode_run_usages(self, out: SchedulerOutput, j: int, lasts: list[int] | None = None) -> list[float]:
        """KV-cache usage during each of a merged run's first ``j`` steps
        (index 0 = step 1): after the step's allocation, before finished
        requests free their blocks, as the reference mode's step rows record
        it. Call after step 1 was scheduled and before the run is applied.
        ``lasts`` as :meth:`apply_decode_span` (None: nobody leaves).

        Request r holds ``kv_capacity`` slots with ``num_computed_tokens`` =
        c computed after step 1; step i (≥ 2) writes slot c + i − 2, so it
        takes a block at steps s + 2, s + 2 + bs, ... (s = kv_capacity − c)
        up to its last step; a request finishing after step f frees what it
        holds from step f + 1. O(requests + j): the block takings are added
        per residue class of the step mod ``block_size``. Managers whose
        tables do not grow by block (the contiguous reservation) hold their
        usage through a run."""
        kv = self.kv
        if not getattr(kv, "grows_by_block", False):
            return [kv.usage] * j
        bs = self.limits.block_size
        takes = [0] * (j + bs + 2)  # +1 where a request's block takings start, -1 past them
        back = [0] * (j + 2)  # blocks returned at the start of a step
        for idx, r in enumerate(out.scheduled):
            f = j if lasts is None else lasts[idx]
            last = f if f < j else j
            first = r.kv_capacity - r.num_computed_tokens + 2
            n = (last - first) // bs + 1 if first <= last else 0
            if n:
                takes[first] += 1
                takes[first + n * bs] -= 1
            if f < j:
                back[f + 1] += r.kv_capacity // bs + n
        free = kv.num_free_blocks
        u = kv.usage_at(free)
        usages = [u]
        append = usages.append
        usage_at = kv.usage_at
        for i in range(2, j + 1):
            t = takes[i]
            if i >= bs:
                t += takes[i - bs]  # takings at step i: this residue class's running count
                takes[i] = t
            if t or back[i]:
                free += back[i] - t
                u = usage_at(free)
            append(u)
        return usages

    def apply_decode_span(self, out: SchedulerOutput, j: int,
                          lasts: list[int]) -> list[tuple[int, list[Request]]]:
        """Advance a run planned by :meth:`max_decode_span` by ``j`` steps (step 1
        included): request i takes part in ``min(j, lasts[i])`` of them. Returns,
        per part of the run between finishes, ``(step, finished)``: the part's
        last step (1-based; the last part ends at ``j``) and the requests
        finishing there (running-list order), as :meth:`apply_decode_run` for
        each part in turn (:meth:`decode_run_usages` gives the usage). The
        blocks of the whole run are taken in one call (they fit: the plan
        checked), so block ids may differ from the reference mode's; counts do not."""
        grow, grow_slots = [], []
        finishing: dict[int, list[Request]] = {}
        for r, f in zip(out.scheduled, lasts):
            n = f if f < j else j
            c = r.num_computed_tokens
            s = c + n - 1
            if s > r.kv_capacity:
                grow.append(r)
                grow_slots.append(s)
            r.num_computed_tokens = s
            r.num_output_tokens += n
            if f <= j:
                finishing.setdefault(f, []).append(r)
        if grow:
            self.kv.grow_for_decode(grow, grow_slots)
        parts = []
        for step in sorted(finishing) if j in finishing else sorted(finishing) + [j]:
            fin = finishing.get(step, [])
            if fin:
                for r in fin:  # not before: _on_finished drops every FINISHED request
                    r.status = RequestStatus.FINISHED
                self._on_finished(fin)
            parts.append((step, fin))
        return parts

    def apply_decode_run(self, out: SchedulerOutput, j: int) -> tuple[list[Request], float]:
        """Advance the batch of ``out`` by ``j`` decode steps (step 1 included),
        as ``j`` rounds of schedule()/update_from_output() would; ``j`` is at
        most :meth:`max_decode_run`. Returns the requests that finished (only at
        the last step) and the KV-cache usage during the last step (after its
        allocation, before the finished requests free their blocks — what a
        single step records)."""
        kv = self.kv
        alloc = kv.allocate_slots
        mml = self.limits.max_model_len
        finished = []
        skip_alloc = getattr(kv, "decode_skips_allocation", False)
        bulk = getattr(kv, "grows_decode_in_bulk", False)
        grow, grow_slots = [], []
        jm1 = j - 1
        for r in out.scheduled:
            o = r.num_output_tokens
            if jm1:
                c = r.num_computed_tokens
                if bulk:  # counting only: the blocks of steps 2..j, taken below in one call
                    if c + jm1 > r.kv_capacity:
                        grow.append(r)
                        grow_slots.append(c + jm1)
                elif not (skip_alloc and c + jm1 <= r.kv_capacity):
                    # The state before step j, then step j's allocation: it takes the
                    # blocks of steps 2..j at once and hashes those that filled.
                    r.num_output_tokens = o + jm1
                    r.num_computed_tokens = c + jm1 - 1
                    if alloc(r, 1) is None:
                        raise RuntimeError("decode run: block allocation failed although it was planned")
                # else: step j's token fits in the blocks held, allocate_slots would be a no-op
                r.num_computed_tokens = c + jm1
            o += j
            r.num_output_tokens = o
            if o >= r.num_output_tokens_target or r.num_prompt_tokens + o >= mml:
                r.status = RequestStatus.FINISHED
                finished.append(r)
        if grow:
            kv.grow_for_decode(grow, grow_slots)
        usage = kv.usage
        if finished:
            self._on_finished(finished)
        return finished, usage

    # ------------------------------------------------------------------ helpers
    def _preempt(self, req: Request, front: bool = True) -> None:
        """Recompute preemption (vLLM ``_preempt_request``): free the blocks
        (full ones keep their hashes), reset ``num_computed_tokens``, keep the
        generated tokens, and put the request at the front of the waiting queue
        (``front=False``: at its back, as SGLang's retraction does)."""
        self.kv.free(req)
        req.preempted_at_tokens = max(req.preempted_at_tokens, req.num_computed_tokens)
        req.num_computed_tokens = 0
        req.status = RequestStatus.PREEMPTED
        req.num_preemptions += 1
        self.num_preemptions += 1
        if front:
            self.waiting.prepend(req)
        else:
            self.waiting.add(req)

    def _cap_tokens(self, req: Request, n: int, budget: int) -> int:
        """Cap a step's tokens as vLLM: long-prefill threshold, budget, and
        ``max_model_len − 1 − num_computed_tokens``."""
        thr = self.limits.long_prefill_token_threshold
        if 0 < thr < n:
            n = thr
        if n > budget:
            n = budget
        room = self.limits.max_model_len - 1 - req.num_computed_tokens
        if n > room:
            n = max(room, 0)
        return n

    def _remaining_blocks_to_completion(self, req: Request) -> int:
        """TensorRT-LLM ``getRemainingBlocksToCompletion``: blocks to hold prompt
        + ``max_tokens`` (capped at ``max_model_len``) minus blocks held."""
        total = min(req.num_prompt_tokens + req.max_tokens, self.limits.max_model_len)
        return self.kv.get_num_blocks_to_allocate(req, total)

    def _fits_no_evict(self, req: Request) -> bool:
        """GUARANTEED_NO_EVICT admission (``capacityScheduler.cpp``): the
        candidate's own blocks to completion must fit in the free blocks left
        after every running request's remaining blocks to completion."""
        reserved = sum(self._remaining_blocks_to_completion(r) for r in self.running)
        return self._remaining_blocks_to_completion(req) <= self.kv.num_free_blocks - reserved
