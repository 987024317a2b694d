"""Merged decode runs of one scheduler — the planning side of the accelerated
stepping (``exact_steps: false``).

A :class:`DecodeRuns` wraps one scheduler (composition: the policy knows
nothing of it; :mod:`sim.accelerated.policies` says which policies have one).
One scheduler output stands for k identical decode-only steps, advanced in one
engine event: exactly equivalent to k calls of ``schedule()`` /
``update_from_output()`` when nothing can change the batch in between. The
engine asks how far a run may go (:meth:`DecodeRuns.max_decode_run`, or
:meth:`DecodeRuns.plan_decode_span` past finishes and arrivals), times it,
and applies the steps it reached (:meth:`DecodeRuns.apply_decode_run`, with
:meth:`DecodeRuns.decode_run_usages` for the KV usage of each step; a span
applies itself: ``sim.accelerated.decode_span``). Reads the scheduler's state
(``running``, ``waiting``, ``kv``, ``limits``) and calls its ``_on_finished``
and ``_preempt``.
A request finishes at ``num_output_tokens_target``: admission guarantees
``num_prompt_tokens + max_tokens <= max_model_len``, so vLLM's
``max_model_len`` stop never comes first (as ``Scheduler.update_from_output``).
"""

from __future__ import annotations

from sim.accelerated.decode_span import DecodeSpan
from sim.accelerated.queued_span import QueuedSpan
from sim.request import Request, RequestStatus
from sim.scheduler.types import SchedulerOutput


def grows_in_bulk(kv, span: bool) -> bool:
    """Can the growth of a merged run's members be taken in bulk at its end
    (``grow_for_decode``, ``allocate_prompt``) instead of step by step? Paged
    tables growing by whole blocks and no watermark. With prefix caching, a
    ``span`` (whose finishes free blocks before later steps take theirs) only
    when no free cached block can be hit again
    (``KVCacheManager.cached_free_blocks_are_dead``): then which blocks are
    taken when is unobservable; a decode run frees nothing before its last
    step, so it takes the same blocks either way. The caller also checks each
    member: ``hashes_when_grown`` (runs and spans) and ``may_share_blocks``
    (spans)."""
    if not getattr(kv, "enable_prefix_caching", False):
        return getattr(kv, "grows_decode_in_bulk", False)
    if not kv.grows_by_block or kv.watermark_blocks:
        return False
    return not span or kv.cached_free_blocks_are_dead()


class DecodeRuns:
    """Merged-decode-run planning and application for the scheduler ``sched``.
    The base class holds what every batching mode shares; a policy's own rules
    (when an arrival matters, what a span may admit) are in its subclass
    (:mod:`sim.accelerated.policies`)."""

    spans_finishes = True  # a run may go on past finishes (see plan_decode_span)
    span_class = DecodeSpan  # a free-running span's class
    #: With prefix caching and requests waiting, a merged decode run is exact when
    #: no member's growth hashes a block: the policy's waiting pass, blocked at
    #: step 1, can then only find admission harder before a finish (decode growth
    #: takes free blocks, and may evict cached ones a waiting request would hit,
    #: leaving the same budget, seats and TensorRT-LLM headroom). False: no such run.
    waiting_blocked_by_hashes_only = False

    def __init__(self, sched) -> None:
        self.sched = sched

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
        policy = self.sched
        sched = out.scheduled
        if out.preempted or out.num_prefill_tokens or not sched or len(sched) != len(policy.running):
            return 1
        kv = policy.kv
        # Blocks are hashed as they fill; a waiting request could start to hit them
        # (checked below for the run's length, where the policy's admission allows).
        hashed_hits = bool(policy.waiting) and getattr(kv, "enable_prefix_caching", False)
        if hashed_hits and not self.waiting_blocked_by_hashes_only:
            return 1
        k = policy.limits.max_model_len
        skip = getattr(kv, "decode_skips_allocation", False)  # kv_capacity is kept up to date
        held = kv.num_held_blocks
        bs = policy.limits.block_size
        rooms = []  # free slots after step 1
        for r in sched:
            o = r.num_output_tokens
            left = r.num_output_tokens_target - o
            if left < k:
                if left <= 1:  # finishes at step 1 (common in big batches): no run
                    return 1
                k = left
            rooms.append((r.kv_capacity if skip else held(r) * bs) - r.num_computed_tokens)
        if k <= 1:
            return 1
        k = self._decode_run_blocks(k, rooms, bs, kv.num_free_blocks)
        if hashed_hits and k > 1 and any(kv.hashes_when_grown(r, r.num_computed_tokens + k - 1) for r in sched):
            return 1
        return k

    @staticmethod
    def _decode_run_blocks(k: int, rooms: list[int], bs: int, free: int) -> int:
        """The largest k' <= k whose decode steps' new blocks fit in ``free``
        (``rooms``: each request's free slots after step 1)."""
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

    def plan_decode_span(self, out: SchedulerOutput, queued: bool = False,
                         blocked: bool = False) -> DecodeSpan | None:
        """A merged decode run that goes on past finishes and may take in
        whole-prompt admissions (:class:`~sim.accelerated.decode_span.DecodeSpan`),
        or None. Exactly what the reference mode does while nothing else changes
        the batch: the step after a finish schedules the same requests minus the
        finished ones, each decoding one token (the running pass keeps their
        order), plus what the waiting pass admits. Requires paged growth whose
        blocks can be taken in bulk at the span's end (:func:`grows_in_bulk`:
        caching off, or prefix caching where no free cached block can be hit
        again and no member's growth hashes a block). With an
        empty waiting queue and free blocks for every block boundary crossed up to
        each request's finish, a free-running span; else, with ``queued`` and a
        scheduler whose admissions spans can take (``spans_admit``), a queued
        span whose steps are gated one by one. The engine uses spans only where
        a finish cannot be seen before the run ends (open loop; no load-aware
        router across replicas)."""
        policy = self.sched
        sched = out.scheduled
        kv = policy.kv
        if (out.preempted or out.num_prefill_tokens or not sched
                or not self.spans_finishes or not policy.frees_on_finish
                or len(sched) != len(policy.running)
                or not grows_in_bulk(kv, span=True)):
            return None
        caching = kv.enable_prefix_caching
        # (a queued span may preempt, and a resumed request hits its own cached blocks)
        gated = queued and not caching and self.spans_admit()
        # ``blocked``: a free-running span may start with requests waiting, its engine
        # side admitting them as the policy's waiting pass would (``span_admissions_blocked``)
        free_with_queue = blocked and self.spans_join()
        if policy.waiting and not gated and not free_with_queue:
            return None
        bs = policy.limits.block_size
        lasts = []
        append = lasts.append
        k = need = 0
        for r in sched:
            o = r.num_output_tokens
            f = r.num_output_tokens_target - o
            append(f)
            if f > k:
                k = f
            # slots written through its last step: tokens c+1 .. c+f-1 after step 1
            s = r.num_computed_tokens + f - 1 - r.kv_capacity
            if s > 0:
                need += -(-s // bs)
            if caching and (kv.hashes_when_grown(r, r.num_computed_tokens + f) or kv.may_share_blocks(r)):
                return None  # (a finish inside the span must return every block the member holds)
        free = kv.num_free_blocks
        if k <= 1:
            return None
        if (not policy.waiting or free_with_queue) and need <= free:
            return self.span_class(self, out, lasts, free - need)
        return QueuedSpan(self, out, lasts) if gated else None

    def spans_admit(self) -> bool:
        """Can a decode span take in this scheduler's admissions (and so also
        start with requests waiting)? The base class answers False."""
        return False

    def spans_join(self) -> bool:
        """Can a free-running decode span take in this scheduler's whole-prompt
        admissions? The base class answers False."""
        return False

    def span_admissions(self, num_running: int, budget: int, free_blocks: int | None = None,
                        headroom: int | None = None) -> tuple[list[Request], int] | None:
        """What the next step's waiting pass admits into a decode span (see
        ``ChunkedPrefillScheduler.span_admissions``). The base class answers
        None (a span cannot represent it)."""
        return None

    def span_chunk_admission(self, num_running: int, budget: int) -> tuple[Request, int] | None:
        """The one waiting request a decode span's next step admits with a
        first prefill chunk cut by the token ``budget``, and that chunk's
        tokens (``ChunkedRuns.span_chunk_admission``). The base class answers
        None (a span cannot represent it)."""
        return None

    def decode_run_usages(self, out: SchedulerOutput, j: int) -> list[float]:
        """KV-cache usage during each of a merged run's first ``j`` steps
        (index 0 = step 1; :meth:`DecodeSpan.usages` of a span nobody leaves
        before step j). Call after step 1 was scheduled and before the run is
        applied. Managers whose tables do not grow by block (the contiguous
        reservation) hold their usage through a run."""
        if not getattr(self.sched.kv, "grows_by_block", False):
            return [self.sched.kv.usage] * j
        return DecodeSpan(self, out, [j] * len(out.scheduled)).usages(j).tolist()

    def apply_decode_run(self, out: SchedulerOutput, j: int) -> tuple[list[Request], float]:
        """Advance the batch of ``out`` by ``j`` decode steps (step 1 included),
        as ``j`` rounds of schedule()/update_from_output() would; ``j`` is at
        most :meth:`max_decode_run`. Returns the requests that finished (only at
        the last step) and the KV-cache usage during the last step (after its
        allocation, before the finished requests free their blocks — what a
        single step records)."""
        kv = self.sched.kv
        alloc = kv.allocate_slots
        finished = []
        skip_alloc = getattr(kv, "decode_skips_allocation", False)
        caching = getattr(kv, "enable_prefix_caching", False)
        jm1 = j - 1
        # (no frees before the run's last step: bulk growth takes the same blocks)
        bulk = grows_in_bulk(kv, span=False) and not (
            caching and any(kv.hashes_when_grown(r, r.num_computed_tokens + jm1) for r in out.scheduled))
        grow, grow_slots = [], []
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
            if o >= r.num_output_tokens_target:
                r.status = RequestStatus.FINISHED
                finished.append(r)
        if grow:
            kv.grow_for_decode(grow, grow_slots)
        if bulk and caching:
            kv.cache_computed(out.scheduled)
        self.steps_applied(j)
        usage = kv.usage
        if finished:
            self.sched._on_finished(finished)
        return finished, usage

    def steps_applied(self, j: int) -> None:
        """A merged run or span of ``j`` steps (step 1 scheduled as usual) was
        applied: the policy's per-step state advances (e.g. SGLang's
        ``new_token_ratio`` decay). The base class keeps none."""

    def admit_to_span(self, req: Request, num_tokens: int) -> None:  # pragma: no cover - spans_admit False
        raise NotImplementedError

    def settle_preempted(self, req: Request, num_output_tokens: int, num_computed_tokens: int) -> None:
        """A decode span's member preempted by the running pass: bring it to the
        state the reference mode had reached (its outputs and computed tokens
        through its last step), then preempt it as the policy's ``_preempt`` and
        take it off the running list."""
        req.num_output_tokens = num_output_tokens
        req.num_computed_tokens = num_computed_tokens
        self.sched._preempt(req)
        self.sched.running.remove(req)
