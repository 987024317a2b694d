"""A decode span: a merged decode run that goes on past finishes and takes
in the requests the scheduler admits meanwhile.

Planned by :meth:`sim.accelerated.decode_runs.DecodeRuns.plan_decode_span`
(after step 1 was scheduled); grown by ``join`` when the scheduler admits
requests into it (``ChunkedRuns.span_admissions``); applied
once, at its end, by ``apply``. While the span lasts, the requests' token
counts and KV tables stay as they were after step 1 (a joining request holds
no blocks yet): everything in between is implied by the plan, so a step
costs no per-request work.

Two kinds, by how KV blocks are checked:

- :class:`DecodeSpan`, *free-running* (nobody waits at step 1): the plan
  holds a *slack*, the free blocks left when every member has grown to its
  finish (finishes returning nothing meanwhile). An arrival admitted whole
  takes its prompt blocks and its growth to its finish out of the slack and
  what the requests finished before its step returned (``room``); a join
  that would overdraw that is refused (the engine ends the span there). No
  step can run short of blocks, so steps are timed many at a time between
  arrivals. A prompt over the step's token budget joins the same way through
  its chunks' steps (``join_chunked``, ``chunk_more``: vLLM's running pass
  gives a prefilling request the budget its decodes leave), nobody else
  joining before its last chunk; the span may end mid-prompt.
- :class:`~sim.accelerated.queued_span.QueuedSpan` (requests wait, or the slack
  is short): every step is gated with the reference mode's exact free-block
  count, preemptions and chunked prefills included.

Either way the reference mode's allocations all succeed inside a span; at its
end finished requests free their blocks first and the others then take what
they hold (block ids may differ from the reference mode's; counts do not).
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

import numpy as np

from sim.request import FINISHED, RUNNING, Request
from sim.results.metrics import diff_from, int64_array
from sim.scheduler.types import SchedulerOutput


class SpanParts(NamedTuple):
    """A span's parts (steps with an unchanged batch), one entry each:
    ``steps`` its last step (1-based), ``batch`` the requests running,
    ``decode`` the decode tokens per step, ``prefill`` the prefill tokens (a
    step with prefill is a part of its own), ``preempted`` the requests
    preempted at its first step; ``finished``: (step, requests finishing
    there), in step order; ``running``: the members still running after the
    span; ``pooled``: the tokens per step whose ITL gap is the step (decodes
    that emitted the token before at the step's start); ``emitted``: the
    tokens each step emits, where not ``batch`` (a request mid-prompt runs
    without emitting)."""

    steps: list[int]
    batch: list[int]
    decode: list[int]
    prefill: list[int]
    finished: list[tuple[int, list[Request]]]
    preempted: list[int]
    running: list[Request]
    pooled: list[int]
    emitted: list[int] | None = None

    @property
    def tokens_emitted(self) -> list[int]:
        """The tokens each part's steps emit (``emitted``, else ``batch``)."""
        return self.batch if self.emitted is None else self.emitted


class DecodeSpan:
    """A free-running span: ``scheduled`` (step 1's batch, running-list
    order) with ``lasts[i]`` its last step (1-based), ``contexts`` their KV
    tokens before step 1, ``k`` the last step of any member, ``joins``
    ``[step, request, last step, tokens prefilled, outputs before]`` of the
    requests whose prefill completed at ``step``; ``slack`` as the module says."""

    queued = False
    #: a join's prompt blocks show in the rows from its step on (0: prefilled in
    #: that step), or from the next (1: prefilled in a step of its own after it)
    prompt_blocks_after = 0
    #: the last step at which a span takes joins (:meth:`room`): its records (a float
    #: per step, kept until it ends) stay a few MB; a longer stretch is more spans
    max_join_step = 1 << 16

    def __init__(self, runs, out: SchedulerOutput, lasts: list[int], slack: int = 0) -> None:
        self.runs = runs  # the policy's merged-run rules (sim.accelerated.policies)
        self.sched = sched = runs.sched
        self.scheduled = out.scheduled
        self.contexts = out.num_computed_before
        self.lasts = lasts
        self.k = max(lasts)
        self.slack = slack
        self.free0 = sched.kv.num_free_blocks  # after step 1's allocations
        self.joins: list[list] = []
        self.preempted: list[tuple[int, int, Request]] = []  # (last step it decoded, member id, request)
        self.wait_marks: list[tuple[int, int]] = []  # (step, requests waiting from its row on): lag spans
        self.no_evict_h0: int | None = None  # TensorRT-LLM's admission headroom after step 1
        self._no_evict: list | None = None  # (no_evict_headroom's running count)
        self._join_cols: tuple | None = None  # (_join_columns, for that many joins)
        # Chunked joins (``join_chunked``): the steps that prefilled a chunk without
        # completing its prompt, (step, tokens, blocks the chunk took); per completed
        # chunked join, (its completion step, tokens prefilled before it); the one still
        # prefilling, [request, tokens computed], or None
        self.chunks: list[tuple[int, int, int]] = []
        self.chunked_done: list[tuple[int, int]] = []
        self.prefilling: list | None = None
        # room(): blocks returned by the requests finished before the step last asked
        # about, and (a heap) each other's (last step, blocks held at its finish)
        self._credit = 0
        self._credit_step = 0
        self._returns: list[tuple[int, int]] | None = None

    def no_evict_headroom(self, step: int) -> int:
        """``guaranteed_no_evict`` headroom (free blocks − every running
        request's remaining blocks to completion) at ``step``'s waiting pass:
        a member's growth takes as many free blocks as it lowers its remaining
        ones, so only finishes (+ its blocks to completion) and joins (−) move it."""
        ne = self._no_evict
        if ne is None:  # [headroom, first last step not yet counted, last step -> blocks returned]
            leave: dict[int, int] = {}
            for r, f in zip(self.scheduled, self.lasts):
                leave[f] = leave.get(f, 0) + self._blocks_to_completion(r)
            ne = self._no_evict = [self.no_evict_h0, 1, leave]
        h, f, leave = ne
        while f < step:  # members whose last step came before ``step`` have finished
            h += leave.pop(f, 0)
            f += 1
        ne[0], ne[1] = h, f
        return h

    def _blocks_to_completion(self, r: Request) -> int:
        lim = self.sched.limits
        return -(-min(r.num_prompt_tokens + r.max_tokens, lim.max_model_len) // lim.block_size)

    def room(self, step: int) -> int:
        """Blocks a join at ``step`` (1-based; never decreasing from call to
        call) may take to its finish: the slack, plus what the members and
        joins whose last step came before ``step`` returned. Every later step
        keeps at least this many free blocks (a finish returns what it holds,
        the slack counted it as taken), so no allocation inside the span fails.
        −1 past :attr:`max_join_step`."""
        if step < self._credit_step:
            raise RuntimeError(f"DecodeSpan.room: step {step} after step {self._credit_step}")
        if step > self.max_join_step:
            return -1  # (no join: the span ends)
        self._credit_step = step
        h = self._returns
        if h is None:  # step 1's members: what they hold, and their growth as the plan counted it
            bs = self.sched.limits.block_size
            h = self._returns = []
            for r, f in zip(self.scheduled, self.lasts):
                grow = r.num_computed_tokens + f - 1 - r.kv_capacity
                h.append((f, r.kv_capacity // bs + (-(-grow // bs) if grow > 0 else 0)))
            heapq.heapify(h)
        while h and h[0][0] < step:
            self._credit += heapq.heappop(h)[1]
        return self.slack + self._credit

    def _held_at_finish(self, r: Request) -> int:
        """Blocks a joining request holds at its finish: its prompt and every
        decode slot written up to it (what it takes out of the :meth:`room`)."""
        return -(-(r.num_prompt_tokens + r.num_output_tokens_target - 1) // self.sched.limits.block_size)

    def join(self, step: int, reqs: list[Request]) -> list[int] | None:
        """Admit ``reqs`` (new requests the scheduler admits whole) at ``step``
        (1-based) if their blocks to completion fit in the :meth:`room`, and
        return their last steps; else None (nothing changed)."""
        held = [self._held_at_finish(r) for r in reqs]
        need = sum(held)
        if need > self.room(step):
            return None
        self.slack -= need
        lasts = []
        admit, joins, ne = self.runs.admit_to_span, self.joins, self._no_evict
        for r, b in zip(reqs, held):
            p = r.num_prompt_tokens
            admit(r, p)
            last = step + r.num_output_tokens_target - 1
            joins.append([step, r, last, p, 0])
            heapq.heappush(self._returns, (last, b))
            lasts.append(last)
            if ne is not None:  # it holds its blocks to completion until its last step
                t = self._blocks_to_completion(r)
                ne[0] -= t
                leave = ne[2]
                leave[last] = leave.get(last, 0) + t
            if last > self.k:
                self.k = last
        return lasts

    def join_chunked(self, step: int, req: Request, n: int) -> bool:
        """Admit ``req`` (the waiting pass cuts its prompt at the budget:
        ``ChunkedRuns.span_chunk_admission``) at ``step`` with a first chunk of
        ``n`` tokens, if its blocks to completion fit in the :meth:`room` (else
        False, nothing changed). Its later chunks come in the next steps' running
        passes (:meth:`chunk_more`); it decodes after the step that completes
        its prompt, where it becomes a join. Nobody else joins meanwhile."""
        if self.prefilling is not None or self._no_evict is not None:
            raise RuntimeError("a chunked join while another is prefilling, or with a no-evict headroom")
        bs = self.sched.limits.block_size
        need = self._held_at_finish(req)
        if need > self.room(step):
            return False
        self.slack -= need
        self.runs.admit_to_span(req, n)
        self.prefilling = [req, n]
        self.chunks.append((step, n, -(-n // bs)))
        return True

    def chunk_more(self, step: int, n: int) -> int | None:
        """The prefilling request's next chunk, of ``n`` tokens, at ``step``:
        None while its prompt is not complete; else it joins (its first token
        comes at this step's end) and its last step is returned."""
        r, c = self.prefilling
        p = r.num_prompt_tokens
        bs = self.sched.limits.block_size
        if c + n < p:
            self.chunks.append((step, n, -(-(c + n) // bs) - -(-c // bs)))
            self.prefilling[1] = c + n
            return None
        if c + n != p:
            raise RuntimeError(f"request {r.request_id}: a chunk past its prompt")
        self.prefilling = None
        self.chunked_done.append((step, c))
        last = step + r.num_output_tokens_target - 1
        self.joins.append([step, r, last, p, 0])
        heapq.heappush(self._returns, (last, self._held_at_finish(r)))
        if last > self.k:
            self.k = last
        return last

    def usages(self, j: int) -> np.ndarray:
        """KV-cache usage during each of the span's first ``j`` steps (index 0 =
        step 1; float64, shape (j,)), as the reference mode's step rows record
        it: after the step's allocations (decodes crossing into a new block,
        joining prompts), before finished requests free their blocks (from the
        next step on). Call before :meth:`apply`.

        A member holding ``cap`` slots with ``c`` computed writes slot c, c + 1,
        ... in its following steps, taking a block at each multiple of
        ``block_size`` crossed, up to its last step; it frees all it holds after
        it. The takings of all members are added per residue class of the step
        mod ``block_size`` (one cumulative sum), so the cost is O(members + j)."""
        bs = self.sched.limits.block_size
        # per member: the first step writing into a new block, its last step, the blocks
        # it holds at the start; step 1's members first, then the joins prefilled by step j
        # after step 1: kv_capacity slots held, c computed; step i writes slot c + i − 2
        first_a = int64_array([r.kv_capacity - r.num_computed_tokens + 2 for r in self.scheduled])
        last_a = int64_array(self.lasts)
        held_a = int64_array([r.kv_capacity // bs for r in self.scheduled])
        once_at = once_n = int64_array([])
        if self.joins:
            steps, lasts, prompts = self._join_columns()
            after = self.prompt_blocks_after
            ready = steps + after <= j
            steps, lasts, prompts = steps[ready], lasts[ready], prompts[ready]
            h = -(-prompts // bs)  # its prompt's blocks, taken at ``step`` (after it: the next step's row)
            once_at, once_n = steps + after, h
            # after its prefill at ``step``: step i writes slot p + i − step − 1
            first_a = np.concatenate((first_a, h * bs - prompts + steps + 1))
            last_a = np.concatenate((last_a, lasts))
            held_a = np.concatenate((held_a, h))
        if self.chunks:  # chunked prompts: blocks taken at each chunk's step (less at the completion)
            c_at, c_n = self._chunk_takes(j)
            once_at, once_n = np.concatenate((once_at, c_at)), np.concatenate((once_n, c_n))
        end = np.minimum(last_a, j)
        # blocks taken from ``first`` on, one every ``bs`` steps, up to its last step (or j)
        n = np.where(first_a <= end, (end - first_a) // bs + 1, 0)
        taking = n > 0
        on, off = first_a[taking], (first_a + n * bs)[taking]
        back = last_a < j  # it frees all it holds after its last step
        back_at = last_a[back] + 1
        back_n = (held_a + n)[back]
        size = (j // bs + 2) * bs + bs  # room for every "off" mark (<= j + bs), whole rows of bs
        marks = _count(on, None, size) - _count(off, None, size)
        takes = marks.reshape(-1, bs).cumsum(axis=0).ravel()[:j + 1]  # blocks taken at step i
        delta = _count(back_at, back_n, j + 1) - _count(once_at, once_n, j + 1) - takes
        delta[:2] = 0  # step 1 is as the plan found it
        free = self.free0 + np.cumsum(delta[1:])
        return self.sched.kv.usage_at(free)

    def _chunk_takes(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """(step, blocks) taken by chunked prompts up to step ``j``: each
        chunk's new blocks at its step, and at a completion step minus the
        blocks taken before it (the join there counts the whole prompt's)."""
        bs = self.sched.limits.block_size
        at = [s for s, _, _ in self.chunks] + [s for s, _ in self.chunked_done]
        n = [b for _, _, b in self.chunks] + [t // -bs for _, t in self.chunked_done]  # (−ceil(t / bs))
        at_a, n_a = int64_array(at), int64_array(n)
        ready = at_a <= j
        return at_a[ready], n_a[ready]

    def _join_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(step, last step, tokens prefilled) of each join, as int64 arrays
        (kept for :meth:`apply` after :meth:`usages`: a free-running span's join
        entries never change, they are only appended)."""
        n = len(self.joins)
        if self._join_cols is not None and self._join_cols[0] == n:
            return self._join_cols[1]
        steps, _, lasts, prompts, _ = zip(*self.joins)
        cols = int64_array(steps), int64_array(lasts), int64_array(prompts)
        self._join_cols = (n, cols)
        return cols

    def _advance(self, j: int, gone: set[int]):
        """Bring every member (but the ``gone`` ids, settled when preempted)
        to its state after the span's first ``j`` steps. Returns the requests
        finishing per step, those still running, the growth of step 1's members
        (requests, slots) and the slots of the joining requests (which hold no
        blocks yet)."""
        grow, grow_slots, alive, fresh = [], [], [], []
        finishing: dict[int, list[Request]] = {}
        n_orig = len(self.scheduled)
        for i, (r, f) in enumerate(zip(self.scheduled, self.lasts)):
            if gone and i in gone:
                continue
            n = f if f < j else j
            s = r.num_computed_tokens + n - 1
            r.num_computed_tokens = s
            r.num_output_tokens += n
            if f <= j:
                finishing.setdefault(f, []).append(r)
            else:
                alive.append(r)
                if s > r.kv_capacity:
                    grow.append(r)
                    grow_slots.append(s)
        for k, (step, r, f, n0, o0) in enumerate(self.joins):
            if step is None or (gone and n_orig + k in gone):
                continue  # still prefilling (QueuedSpan applies it), or preempted
            n = (f if f < j else j) - step  # decode steps after its prefill
            s = n0 + n
            r.num_computed_tokens = s
            r.num_output_tokens = o0 + 1 + n
            if f <= j:
                finishing.setdefault(f, []).append(r)
            else:
                alive.append(r)
                fresh.append((r, s))
        return finishing, alive, grow, grow_slots, fresh

    def _commit(self, finishing: dict[int, list[Request]], grow: list[Request], grow_slots: list[int],
                fresh: list[tuple[Request, int]]) -> None:
        """Finish (freeing their blocks first), then give the running members
        their blocks: the joining requests' tables, then step 1's members' growth."""
        done = [r for f in sorted(finishing) for r in finishing[f]]
        sched = self.sched
        if done:
            for r in done:  # not before: _on_finished drops every FINISHED request
                r.status = FINISHED
            sched._on_finished(done)
        kv = sched.kv
        for r, slots in fresh:
            if not kv.allocate_prompt(r, slots):
                raise RuntimeError(f"request {r.request_id}: a span join's blocks do not fit")
        if grow:
            kv.grow_for_decode(grow, grow_slots)
        if kv.enable_prefix_caching:  # (finished members freed their tables as they were: dead blocks)
            kv.cache_computed([r for r in sched.running if r.status == RUNNING])

    def apply(self, j: int) -> SpanParts:
        """Advance every member by the span's first ``j`` steps, finish those
        whose last step came and give the others their blocks (``_commit``).
        Returns the span's parts; a join step is a part of its own."""
        finishing, alive, grow, grow_slots, fresh = self._advance(j, set())
        if self.prefilling is not None:  # still prefilling: it holds the chunks' tokens
            r, c = self.prefilling
            r.num_computed_tokens = c
            fresh.append((r, c))
        fsteps_l = sorted(finishing)
        fsteps = int64_array(fsteps_l)
        fcum = int64_array([0] + [len(finishing[f]) for f in fsteps_l]).cumsum()  # finishes up to each
        # joins come in step order: per join step, the requests joining and their prefill tokens
        # (sorted arrays deduplicated by hand: np.unique and np.union1d import numpy.ma,
        # tens of ms, on first use)
        js, _, jprompts = self._join_columns() if self.joins else (int64_array([]),) * 3
        first = np.flatnonzero(diff_from(js, -1))
        cuts = np.concatenate((first, [js.size]))
        jsteps, jcount = js[first], cuts[1:] - cuts[:-1]
        # a chunk that does not complete its prompt: a part of its own too
        cs = int64_array([c for c, _, _ in self.chunks])
        if cs.size and cs[-1] > j:
            raise RuntimeError("a decode span applied before its last prefill chunk")
        bounds = np.sort(np.concatenate((fsteps, jsteps, jsteps - 1, cs, cs - 1)))
        bounds = bounds[(diff_from(bounds, -1) != 0) & (bounds < j)]
        bounds = np.concatenate((bounds, [j]))  # each part's last step
        prev = np.concatenate(([0], bounds[:-1]))
        # running in a part: step 1's members, plus the joins up to its last step, less
        # those finished before it (a request finishes after its last step)
        batch = len(self.scheduled) - fcum[np.searchsorted(fsteps, prev, side="right")]
        new = prefill = np.zeros(len(bounds), dtype=np.int64)
        if jsteps.size:
            jpre = np.add.reduceat(jprompts, first)
            batch += np.concatenate(([0], jcount)).cumsum()[np.searchsorted(jsteps, bounds, side="right")]
            at = np.minimum(np.searchsorted(jsteps, bounds), jsteps.size - 1)
            is_join = jsteps[at] == bounds  # a join step: a part of its own (step - 1 is a bound)
            new = np.where(is_join, jcount[at], 0)
            prefill = np.where(is_join, jpre[at], 0)
        decode = batch - new
        if cs.size:  # the prefilling request runs without decoding; its chunk is the step's prefill
            at = np.searchsorted(bounds, cs)
            batch[at] += 1
            prefill = prefill + np.bincount(at, int64_array([n for _, n, _ in self.chunks]),
                                            minlength=len(bounds)).astype(np.int64)
        if self.chunked_done:  # a completing chunk prefills the prompt less what came before it
            at = np.searchsorted(bounds, int64_array([c for c, _ in self.chunked_done]))
            prefill = prefill - np.bincount(at, int64_array([n for _, n in self.chunked_done]),
                                            minlength=len(bounds)).astype(np.int64)
        parts = SpanParts(bounds.tolist(), batch.tolist(), decode.tolist(), prefill.tolist(),
                          [(f, finishing[f]) for f in fsteps.tolist()], [0] * len(bounds), alive,
                          decode.tolist(), (decode + new).tolist() if cs.size else None)
        self._commit(finishing, grow, grow_slots, fresh)
        self.runs.steps_applied(j)
        return parts


def _count(at, n, size: int) -> np.ndarray:
    """int64 array of ``size``: sum of ``n`` (default 1 each) at positions ``at``
    (< size; int lists or int64 arrays)."""
    idx = int64_array(at) if isinstance(at, list) else np.asarray(at, dtype=np.int64)
    if n is None:
        return np.bincount(idx, minlength=size)[:size]
    return np.bincount(idx, np.asarray(n, dtype=np.float64), minlength=size)[:size].astype(np.int64)
