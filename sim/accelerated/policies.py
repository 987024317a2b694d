"""Which scheduling policies the accelerated stepping serves, and each one's
rules for it.

Acceleration is never inherited: a policy is served only when its *exact*
class is in :data:`ACCELERATED_POLICIES`, or when the class itself (not a base
class) declares ``accelerate_like = <built-in policy class>``, i.e. that its
decisions equal that policy's wherever merged steps rely on them (when an
arrival can change the next step, what a waiting pass admits). Any other
policy, a researcher's subclass of ``ChunkedPrefillScheduler`` included, runs
in the reference mode, one engine step per event: slower, never wrong.

Per policy (:func:`decode_runs_for`):

- :class:`ChunkedRuns` — ``chunked`` (vLLM v1), and ``continuous`` and
  ``mixed``, which share its queues: under FCFS an arrival joins the tail of a
  non-empty queue whose head is blocked, so only an empty (or reordered) queue
  lets it change the next step; decode spans may take in what vLLM's WAITING
  pass admits (:meth:`ChunkedRuns.span_admissions`).
- :class:`StaticRuns` — ``static``: nobody joins a batch in flight.
- :class:`PrefillFirstRuns` — ``prefill_first`` / ``prefill_first_whole``
  (SGLang): an arrival may form a prefill batch unless the running set is at
  ``max_running_requests``; decode steps decay ``new_token_ratio``, so merged
  runs need an empty queue (or the seat limit binding). On an
  overlap-scheduled replica (the SGLang preset) its spans take arrivals in
  through prefill-only steps (:meth:`PrefillFirstRuns.pause_admissions`,
  :mod:`sim.accelerated.prefill_span`). ``prefill_first_mixed`` (SGLang
  ``--enable-mixed-chunk``) is not served: its prefill batches also decode,
  which those spans do not reproduce; it runs in the reference mode.

On an overlap-scheduled replica, the only one in open loop, ``ChunkedRuns``
spans also take arrivals in a step late and may go on with a blocked waiting
queue (:meth:`ChunkedRuns.span_admissions_blocked`, TensorRT-LLM's
``guaranteed_no_evict`` and ``mixed`` included).
"""

from __future__ import annotations

from sim.accelerated.decode_runs import DecodeRuns
from sim.errors import ConfigError
from sim.request import PREEMPTED, RUNNING, WAITING, Request
from sim.scheduler.chunked import ChunkedPrefillScheduler
from sim.scheduler.continuous import ContinuousBatchingScheduler
from sim.scheduler.mixed import MixedBatchingScheduler
from sim.accelerated.prefill_span import PrefillFirstSpan
from sim.scheduler.prefill_first import (CLIP_MAX_NEW_TOKENS, MIN_NEW_TOKEN_RATIO, NEW_TOKEN_RATIO_DECAY,
                                         PrefillFirstScheduler, WholePrefillFirstScheduler)
from sim.scheduler.static import StaticBatchingScheduler
from sim.scheduler.types import SchedulerOutput


class ChunkedRuns(DecodeRuns):
    """Merged runs and spans of :class:`ChunkedPrefillScheduler` (and the
    modes sharing its queues)."""

    waiting_blocked_by_hashes_only = True  # (``_schedule_waiting``; see DecodeRuns)

    def arrival_may_change_schedule(self) -> bool:
        w = self.sched.waiting
        return w.priority or w.reordered or not w

    def spans_admit(self) -> bool:
        """Can a decode span take in this scheduler's admissions
        (:meth:`span_admissions`)? ``ChunkedPrefillScheduler``'s own schedule
        with chunked prefill, an FCFS queue never reordered, no long-prefill
        threshold and no TensorRT-LLM capacity policy (with prefix caching,
        joins must be requests that can hit nothing: :meth:`span_admissions`);
        a mode that changes the schedule (``continuous``, ``mixed``) gets False."""
        sched = self.sched
        return (self._fcfs_chunked_schedule() and sched.chunked_prefill
                and not sched.limits.capacity_scheduler_policy)

    def spans_join(self) -> bool:
        """Can a free-running decode span take in this scheduler's whole-prompt
        admissions (``span_admissions`` without ``free_blocks``)? As
        :meth:`spans_admit`, and also without chunked prefill (``mixed``: a
        prompt that the budget would cut stops the pass, and a span refuses to
        cut it) and with TensorRT-LLM's ``guaranteed_no_evict`` (the span keeps
        its headroom: ``DecodeSpan.no_evict_headroom``)."""
        return (self._fcfs_chunked_schedule()
                and self.sched.limits.capacity_scheduler_policy in (None, "guaranteed_no_evict"))

    def _fcfs_chunked_schedule(self) -> bool:
        """The scheduler runs ``ChunkedPrefillScheduler``'s own schedule over an
        FCFS queue never reordered, without a long-prefill threshold."""
        sched = self.sched
        cls = type(sched)
        return (cls._schedule is ChunkedPrefillScheduler._schedule
                and cls._schedule_waiting is ChunkedPrefillScheduler._schedule_waiting
                and cls._schedule_running is ChunkedPrefillScheduler._schedule_running
                and not sched.waiting.priority and not sched.waiting.reordered
                and not sched.limits.long_prefill_token_threshold)

    def span_admissions(self, num_running: int, budget: int, free_blocks: int | None = None,
                        headroom: int | None = None) -> tuple[list[Request], int] | None:
        """The WAITING pass inside a decode span (:meth:`spans_admit`), after a
        running pass that left ``num_running`` requests running and ``budget``
        tokens: ``(admitted, n)``, the requests it admits in order, the last of
        them with ``n`` tokens scheduled (its whole sequence, or a first chunk
        when the budget runs out; a preempted request recomputes its outputs
        too). With ``free_blocks`` (free KV blocks after the running pass) it
        stops at the first request whose blocks do not fit or that
        ``max_num_seqs`` leaves out (head-of-line blocking), as
        ``ChunkedPrefillScheduler._schedule_waiting``. Without (the span checks
        blocks itself), every waiting request must be admitted whole, and with
        prefix caching be one that can hit nothing and whose blocks get no
        hash (no shareable prefix: its lookup finds 0 tokens whatever the
        cache holds), else None. With ``headroom`` (``guaranteed_no_evict``:
        free blocks less every running request's remaining blocks to
        completion), each admission also needs its own blocks to completion
        within what is left."""
        sched = self.sched
        lim = sched.limits
        room = lim.max_num_seqs - num_running
        bs = lim.block_size
        out = []
        last = 0
        for req in sched.waiting:
            if budget <= 0 or room <= 0:
                break
            n = total = req.num_prompt_tokens + req.num_output_tokens  # (req.num_tokens)
            if n > budget:
                n = budget
            if free_blocks is not None:
                # allocate_slots(full_sequence_check=True): the whole sequence's blocks must fit
                if (-(-min(total, lim.max_model_len) // bs) > free_blocks
                        or -(-n // bs) > free_blocks):
                    break
                free_blocks -= -(-n // bs)
            elif n < total:
                return None
            if headroom is not None:
                need = sched._remaining_blocks_to_completion(req)
                if need > headroom:
                    break
                headroom -= need
            out.append(req)
            last = n
            budget -= n
            room -= 1
        if free_blocks is None and len(out) < len(sched.waiting):
            return None
        kv = sched.kv
        if free_blocks is None and kv.enable_prefix_caching and any(
                kv.hashes_when_grown(r, r.num_tokens + r.num_output_tokens_target) for r in out):
            return None
        return out, last

    def span_chunk_admission(self, num_running: int, budget: int) -> tuple[Request, int] | None:
        """The WAITING pass inside a free-running decode span (:meth:`spans_admit`)
        when it cuts its only request's prompt at the token ``budget``
        (chunked prefill: ``_cap_tokens``): ``(request, first chunk's tokens)``,
        for a new request (no outputs yet) with a seat under ``max_num_seqs``
        and, with prefix caching, one whose blocks get no hash (as
        :meth:`span_admissions`'s whole admissions); else None. Its blocks to
        completion are the span's to check (``DecodeSpan.join_chunked``)."""
        sched = self.sched
        lim = sched.limits
        if len(sched.waiting) != 1 or budget <= 0 or num_running >= lim.max_num_seqs:
            return None
        req = sched.waiting.peek()
        total = req.num_prompt_tokens
        if req.num_output_tokens or req.status != WAITING or total <= budget or total > lim.max_model_len - 1:
            return None
        kv = sched.kv
        if kv.enable_prefix_caching and kv.hashes_when_grown(req, total + req.num_output_tokens_target):
            return None
        return req, budget

    def span_admissions_blocked(self, num_running: int, budget: int, slack: int,
                                headroom: int | None = None) -> list[Request] | None:
        """The WAITING pass inside a free-running decode span whose queue may
        stay blocked (``spans_join``): the requests it admits whole, in order,
        when the first one left waiting (if any) is stopped by something the
        span knows exactly — the budget (``budget <= 0``, or a prompt larger
        than it without chunked prefill), ``max_num_seqs``, or the
        ``guaranteed_no_evict`` ``headroom`` — and the admitted ones' blocks to
        their finish fit in ``slack``; else None (the span cannot tell: a
        chunk cut by the budget, blocks beyond the slack, or with prefix
        caching a request whose blocks would get a hash)."""
        sched = self.sched
        lim = sched.limits
        room = lim.max_num_seqs - num_running
        bs = lim.block_size
        chunked = sched.chunked_prefill
        kv = sched.kv
        caching = kv.enable_prefix_caching
        out = []
        for req in sched.waiting:
            if budget <= 0 or room <= 0:
                break
            n = req.num_tokens
            if n > budget:
                if chunked:
                    return None
                break
            if n > lim.max_model_len - 1:
                return None
            if headroom is not None:
                need = sched._remaining_blocks_to_completion(req)
                if need > headroom:
                    break
                headroom -= need
            if req.num_output_tokens or (caching and kv.hashes_when_grown(req, n + req.num_output_tokens_target)):
                return None
            slack -= -(-(n + req.num_output_tokens_target - 1) // bs)
            if slack < 0:
                return None
            out.append(req)
            budget -= n
            room -= 1
        return out

    def admit_to_span(self, req: Request, num_tokens: int) -> None:
        """Admit the waiting queue's head with ``num_tokens`` scheduled, as the
        WAITING pass does (a span's join, after :meth:`span_admissions`),
        holding no KV blocks yet: the span allocates them when it is applied."""
        sched = self.sched
        if sched.waiting.pop() is not req:
            raise RuntimeError(f"request {req.request_id}: not at the head of the waiting queue")
        sched._no_evict_invalidate()  # it holds no blocks yet: the admission reserve is recounted
        if req.status != PREEMPTED:  # as _admit(req, 0): its lookup hit nothing
            req.num_cached_tokens = 0
        kv = sched.kv
        if kv.enable_prefix_caching:  # (the counters count nothing without caching)
            kv.record_prefix_cache_stats(req, 0)
        req.status = RUNNING
        sched.running.append(req)
        req.num_computed_tokens = num_tokens


class StaticRuns(ChunkedRuns):
    """Merged runs of :class:`StaticBatchingScheduler`."""

    waiting_blocked_by_hashes_only = False  # (its own batch forming: not argued)

    def arrival_may_change_schedule(self) -> bool:
        return not self.sched.batch  # nobody joins a batch in flight


class PrefillFirstRuns(DecodeRuns):
    """Merged runs and spans of :class:`PrefillFirstScheduler` (SGLang). Each
    decode step decays ``new_token_ratio`` (a count of steps, added when the
    steps are applied: :meth:`steps_applied`) and checks for retraction; a
    span's free blocks cover every member's growth to its finish, so no step
    of it retracts, and with nobody waiting the step after a finish decodes
    the others (no prefill batch can form). An arrival ends the span (the
    next step may be a prefill batch), except on an overlap-scheduled replica
    (``AcceleratedStepping._lag_span_run``), where the prefill batch is a
    step of the span (:meth:`pause_admissions`)."""

    def arrival_may_change_schedule(self) -> bool:
        # An arrival may form a prefill batch at the next step, unless requests
        # already wait for a seat (max_running_requests binds until a finish, which
        # ends a merged run). With nobody waiting, always: inside a span, members
        # that finished have not left ``running`` yet, so its length overstates
        # the seats taken.
        sched = self.sched
        return not sched.waiting or len(sched.running) < sched.limits.max_num_seqs

    def max_decode_run(self, out: SchedulerOutput) -> int:
        # A waiting request may become admissible as new_token_ratio decays and
        # running requests' reservations shrink, without any arrival or finish:
        # merge decode steps only when nobody waits (or the seat limit binds).
        sched = self.sched
        if sched.waiting and len(sched.running) < sched.limits.max_num_seqs:
            return 1
        return super().max_decode_run(out)

    span_class = PrefillFirstSpan

    def steps_applied(self, j: int) -> None:
        self.sched._ratio_steps += j - 1  # step 1 was counted by schedule()

    def pause_admissions(self, span: PrefillFirstSpan, d: int) -> tuple[list[Request], int, int] | None:
        """The prefill batch ``_schedule_prefill`` forms after decode step ``d``
        of ``span`` (its step 1 scheduled by ``schedule()``), if it takes the
        whole waiting queue, every prompt whole, each request emitting more
        than one token, and their blocks to completion fit in the span's
        slack: the requests, and the free blocks and running requests after
        their admission; else None. The same admission rule, with the same
        float operations in the same order (``new_token_ratio`` after ``d − 1``
        more decode steps; the reservation summed over the running list)."""
        sched = self.sched
        if sched.chunked_req is not None:
            return None
        lim = sched.limits
        bs = lim.block_size
        alive = span.running_after(d)
        num_running = len(alive)
        free = span.free_at(d)
        avail = free * bs
        ratio = max(sched._ratio_base - (sched._ratio_steps + d - 1) * NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
        offset = 0.0
        for _, r, base in alive:  # outputs after step d: base + d
            left = r.max_tokens - base - d
            offset += (left if left < CLIP_MAX_NEW_TOKENS else CLIP_MAX_NEW_TOKENS) * ratio
        cur_offset = 0
        rem_chunk = lim.max_num_batched_tokens if sched.chunked_prefill else None
        rem_input = lim.max_prefill_tokens or lim.max_num_batched_tokens
        kv = sched.kv
        caching = kv.enable_prefix_caching
        out: list[Request] = []
        need = 0
        for req in sched.waiting:
            if num_running >= lim.max_num_seqs:
                return None
            if (avail - offset <= 0 or avail - cur_offset <= 0 or rem_input <= 0
                    or (rem_chunk is not None and rem_chunk <= 0)):
                return None
            n = req.num_tokens
            clipped = min(req.max_tokens - req.num_output_tokens, CLIP_MAX_NEW_TOKENS)
            if n + clipped >= avail - offset:
                return None
            if n >= rem_input and out:
                return None
            if rem_chunk is not None and n > rem_chunk:
                return None  # cut: a chunked request
            if req.num_output_tokens or req.num_output_tokens_target < 2:
                return None
            if caching and kv.hashes_when_grown(req, n + req.num_output_tokens_target):
                return None
            blocks = -(-n // bs)
            if blocks > free:
                return None  # allocate_slots fails
            free -= blocks
            need += -(-(n + req.num_output_tokens_target - 1) // bs)
            out.append(req)
            num_running += 1
            offset += n + clipped
            cur_offset += n
            rem_input -= n
            if rem_chunk is not None:
                rem_chunk -= n
        if not out or need > span.room(d):
            return None
        return out, free, num_running

    def admit_to_span(self, req: Request, num_tokens: int) -> None:
        """Admit the waiting queue's head whole, as ``_schedule_prefill`` does,
        holding no KV blocks yet (the span allocates them when it is applied)."""
        sched = self.sched
        if sched.waiting.pop() is not req:
            raise RuntimeError(f"request {req.request_id}: not at the head of the waiting queue")
        req.status = RUNNING
        sched.running.append(req)
        req.num_computed_tokens = num_tokens


#: built-in policy class (exact) -> its merged-run rules
ACCELERATED_POLICIES: dict[type, type[DecodeRuns]] = {
    ChunkedPrefillScheduler: ChunkedRuns,
    ContinuousBatchingScheduler: ChunkedRuns,
    MixedBatchingScheduler: ChunkedRuns,
    StaticBatchingScheduler: StaticRuns,
    PrefillFirstScheduler: PrefillFirstRuns,
    WholePrefillFirstScheduler: PrefillFirstRuns,
}


def decode_runs_for(sched) -> DecodeRuns | None:
    """The merged-run rules for ``sched``, or None: it runs in the reference
    mode (see the module docstring: acceleration is declared, never inherited)."""
    cls = type(sched)
    like = cls.__dict__.get("accelerate_like", cls)
    if not (isinstance(like, type) and issubclass(cls, like)):
        raise ConfigError(f"scheduler {cls.__name__}: accelerate_like must be a policy class it "
                          f"derives from, got {like!r}")
    runs = ACCELERATED_POLICIES.get(like)
    return runs(sched) if runs is not None else None
