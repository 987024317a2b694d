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

from sim.request import FINISHED, PREEMPTED, REJECTED, RUNNING, WAITING, Request
from sim.scheduler.types import SchedulerLimits, SchedulerOutput, WaitingQueue

__all__ = ["Scheduler", "SchedulerLimits", "SchedulerOutput", "WaitingQueue"]


class Scheduler:
    """Base class: queues, admission checks, token sampling, stop checks.

    ``kv`` is a KV-cache manager (``sim.kv_cache``): ``allocate_slots`` returns
    the new blocks or ``None`` with no side effects; ``free`` returns them.
    """

    name = "base"
    #: runs on vLLM's hybrid KV cache manager (per-group block tables:
    #: sim/kv_cache/hybrid.py) when the model has sliding-window layers; a
    #: scheduler reading free blocks as tokens (SGLang's) does not
    supports_kv_cache_groups = False
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
        # GUARANTEED_NO_EVICT headroom (:meth:`_no_evict_available_blocks`): None
        # until first asked for, and for the len(running) it was kept for.
        self._no_evict_headroom: int | None = None
        self._no_evict_num_running = 0
        # Set by the engine around one schedule() call: admit nothing from the waiting
        # queue this step (TensorRT-LLM's attention-DP balancing holds context requests,
        # sim/engine/dp_group.py); honoured by the chunked family's admission pass.
        self.hold_waiting = False
        # rejection()'s fast path: prompt + max_tokens up to this passes every base rule
        # (None until first asked; the limits and the KV cache's size never change)
        self._always_fits: int | None = None

    # ------------------------------------------------------------------ intake
    def add_request(self, req: Request) -> bool:
        """Queue a request, or reject it (returns False) when it can never run
        (:meth:`rejection`; the reason lands in ``req.reason``)."""
        reason = self.rejection(req)
        if reason is not None:
            return self._reject(req, reason)
        if self.limits.max_req_len is not None:
            self.cap_max_tokens(req)
        req.status = WAITING
        self.waiting.add(req)
        return True

    def rejection(self, req: Request) -> str | None:
        """Why ``req`` could never run here, or None: ``num_prompt_tokens +
        max_tokens > max_model_len`` (vLLM answers 400) or more blocks than the
        whole KV cache. Schedulers with stricter admission add their reasons."""
        need = req.num_prompt_tokens + req.max_tokens
        bound = self._always_fits
        if bound is None:
            bound = self._always_fits = self._always_fitting_len()
        if need <= bound:
            return None
        lim = self.limits
        if need > lim.max_model_len:
            return (f"prompt ({req.num_prompt_tokens}) + max_tokens ({req.max_tokens}) = {need} "
                    f"> max_model_len ({lim.max_model_len})")
        cap = lim.max_req_len
        if cap is not None and req.num_prompt_tokens > cap - 5:
            return (f"prompt ({req.num_prompt_tokens}) > max_req_input_len ({cap - 5}): the engine caps a "
                    f"request at max_req_len {cap} tokens, its KV pool's size - 1 (the pool cannot hold one "
                    f"max_model_len {lim.max_model_len} sequence)")
        n = self._tokens_to_fit(req)
        if not self.kv.can_ever_fit(n):
            return self.kv.never_fits(n)
        return None

    def _always_fitting_len(self) -> int:
        """The prompt + ``max_tokens`` up to which :meth:`rejection`'s base rules all
        pass: ``max_model_len`` when nothing caps a request (``max_req_len``) and
        one ``max_model_len`` sequence fits the whole KV cache (the tokens a
        request must hold at once never exceed either), else 0 (every request
        is checked rule by rule)."""
        lim = self.limits
        if lim.max_req_len is None and self.kv.can_ever_fit(lim.max_model_len):
            return lim.max_model_len
        return 0

    def capped_max_tokens(self, req: Request) -> int:
        """``max_tokens`` as the engine runs it: where its KV pool caps a request
        (``SchedulerLimits.max_req_len``, SGLang) cut to max_req_len - prompt - 1
        (SGLang ``init_req_max_new_tokens``), else as asked."""
        cap = self.limits.max_req_len
        if cap is None:
            return req.max_tokens
        room = cap - req.num_prompt_tokens - 1
        return req.max_tokens if req.max_tokens <= room else room

    def cap_max_tokens(self, req: Request) -> None:
        """Cut ``req.max_tokens`` (and the outputs it will emit) to
        :meth:`capped_max_tokens`, as SGLang does with ``max_new_tokens`` when
        a request reaches its scheduler (``init_req_max_new_tokens``; a
        disaggregated decode server too, with its own pool's cap)."""
        n = self.capped_max_tokens(req)
        if n < req.max_tokens:
            req.max_tokens = n
            if req.num_output_tokens_target > n:
                req.num_output_tokens_target = n

    def decode_rejection(self, req: Request) -> str | None:
        """Why ``req`` could never run here when its prompt arrives computed (a
        disaggregated decode worker: the prompt's KV is transferred, the worker
        computes at most its last token), or None: :meth:`rejection`'s rules that
        do not concern computing the prompt; by default all of them."""
        return self.rejection(req)

    def _tokens_to_fit(self, req: Request) -> int:
        """Tokens that must fit in the KV cache at once for the request to be
        served: what reservation policies reserve (prompt + ``max_tokens``), else
        what it will really hold at its end (prompt + true output length)."""
        if self.limits.capacity_scheduler_policy == "guaranteed_no_evict":
            return min(req.num_prompt_tokens + self.capped_max_tokens(req), self.limits.max_model_len)
        n = req.num_output_tokens_target
        if self.limits.max_req_len is not None:
            n = min(n, self.capped_max_tokens(req))
        return req.num_prompt_tokens + n

    def _reject(self, req: Request, reason: str) -> bool:
        req.status = REJECTED
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
                    req.status = FINISHED
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
                req.status = FINISHED
                finished.append(req)
        if finished:
            self._on_finished(finished)
        return emitted, finished

    def _on_finished(self, finished: list[Request]) -> None:
        self.finished.extend(finished)
        if self.frees_on_finish:
            if self._no_evict_headroom is not None:
                self._no_evict_release(finished)
            else:
                for req in finished:
                    self.kv.free(req)
            running = self.running
            if 8 * len(finished) < len(running):  # a few finishes in a big batch: C-level scans
                for req in finished:
                    running.remove(req)
            else:
                self.running = [r for r in running if r.status == RUNNING]

    # ------------------------------------------------------------------ helpers
    def _preempt(self, req: Request, front: bool = True) -> None:
        """Recompute preemption (vLLM ``_preempt_request``): free the blocks
        (full ones keep their hashes), reset ``num_computed_tokens``, keep the
        generated tokens, and put the request at the front of the waiting queue
        (``front=False``: at its back, as SGLang's retraction does). The caller
        takes it off the running list."""
        if self._no_evict_headroom is not None:
            self._no_evict_release((req,))
        else:
            self.kv.free(req)
        req.preempted_at_tokens = max(req.preempted_at_tokens, req.num_computed_tokens)
        req.num_computed_tokens = 0
        req.status = PREEMPTED
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

    # ------------------------------------------------ TensorRT-LLM no-evict
    # GUARANTEED_NO_EVICT (capacityScheduler.cpp, ENGINE_SEMANTICS §4): each
    # iteration, available = free blocks − Σ remaining blocks to completion of
    # the requests in progress; pending requests are admitted in order while
    # their own remaining blocks fit in what is available (each admission
    # uses them up), and the first miss stops admission. Here a candidate is
    # checked against the state when it comes up: one admitted before it in
    # the same pass has taken its first chunk's blocks from the free pool and
    # reserves the rest of its blocks to completion (together its blocks to
    # completion, less prefix-cache hits on blocks already held by others).

    def _remaining_blocks_to_completion(self, req: Request) -> int:
        """TensorRT-LLM ``getRemainingBlocksToCompletion``: blocks to hold prompt
        + ``max_tokens`` (capped at ``max_model_len``) minus blocks held."""
        total = min(req.num_prompt_tokens + req.max_tokens, self.limits.max_model_len)
        return self.kv.get_num_blocks_to_allocate(req, total)

    def _no_evict_reserved_blocks(self) -> int:
        """The reservation of ``capacityScheduler.cpp``: Σ
        :meth:`_remaining_blocks_to_completion` over the running requests,
        counted afresh (O(running))."""
        rem = self._remaining_blocks_to_completion
        return sum(rem(r) for r in self.running)

    def _no_evict_available_blocks(self) -> int:
        """Free blocks minus :meth:`_no_evict_reserved_blocks` (what
        ``capacityScheduler.cpp`` finds available), in O(1): counted once,
        then kept up to date.

        Only admissions and releases change it. A running request's growth
        (``allocate_slots`` in the running pass, merged decode runs and spans)
        takes k blocks from the free pool and adds k to its table, so free
        blocks and its remaining blocks to completion both drop by k: its
        tokens stay below prompt + ``max_tokens`` ≤ ``max_model_len``
        (:meth:`rejection`), so the table never outgrows its blocks to
        completion (a contiguous reservation, which may, grows only at
        admission). An admission (:meth:`_no_evict_admitted`) lowers it by
        the blocks the request took from the free pool and what remains to its
        completion; a release (finish or preemption, :meth:`_no_evict_release`)
        raises it by what remained to the request's completion and the blocks
        returned to the free pool (fewer than it held where prefix-cached
        blocks are shared).

        A scheduler that changes ``running`` otherwise calls
        :meth:`_no_evict_invalidate`; a change in ``len(running)`` it did not
        report is caught and the value counted afresh."""
        h = self._no_evict_headroom
        if h is None or self._no_evict_num_running != len(self.running):
            h = self._no_evict_headroom = self.kv.num_free_blocks - self._no_evict_reserved_blocks()
            self._no_evict_num_running = len(self.running)
        return h

    def _fits_no_evict(self, req: Request) -> bool:
        """GUARANTEED_NO_EVICT admission (``capacityScheduler.cpp``): the
        candidate's own blocks to completion must fit in the free blocks left
        after every running request's remaining blocks to completion
        (:meth:`_no_evict_available_blocks`). Call :meth:`_no_evict_admitted`
        once it is admitted."""
        return self._remaining_blocks_to_completion(req) <= self._no_evict_available_blocks()

    def _no_evict_admitted(self, req: Request, num_free_blocks_before: int) -> None:
        """``req`` joined ``running`` and its first allocation took the free
        pool from ``num_free_blocks_before`` to what it is now: the headroom
        loses those blocks and what remains to its completion."""
        h = self._no_evict_headroom
        if h is not None:
            kv = self.kv
            self._no_evict_headroom = (h - (num_free_blocks_before - kv.num_free_blocks)
                                       - self._remaining_blocks_to_completion(req))
            self._no_evict_num_running += 1

    def _no_evict_release(self, reqs) -> None:
        """Free the blocks of ``reqs`` (running requests that finish or are
        preempted; the caller takes them off ``running``) and give the
        headroom back what remained to their completion and the blocks
        returned to the free pool."""
        kv = self.kv
        rem = self._remaining_blocks_to_completion
        before = kv.num_free_blocks
        h = self._no_evict_headroom
        n = 0
        for req in reqs:
            h += rem(req)
            kv.free(req)
            n += 1
        self._no_evict_headroom = h + kv.num_free_blocks - before
        self._no_evict_num_running -= n

    def _no_evict_invalidate(self) -> None:
        """``running`` changed other than by an admission or a release that
        reported itself: count the headroom afresh when next asked for."""
        self._no_evict_headroom = None
