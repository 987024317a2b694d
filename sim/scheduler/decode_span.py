"""A decode span: a merged decode run that goes on past finishes and takes
in requests whose whole prompt is admitted in one step.

Planned by :meth:`sim.scheduler.decode_runs.DecodeRuns.plan_decode_span`
(after step 1 was scheduled); grown by :meth:`DecodeSpan.join` when the
scheduler admits requests into it (``ChunkedPrefillScheduler.span_admissions``);
applied once, at its end, by :meth:`DecodeSpan.apply`. While the span lasts,
the requests' token counts and KV tables stay as they were after step 1 (a
joining request holds no blocks yet): everything in between is implied by
the plan, so a step costs no per-request work.

Two kinds, by how KV blocks are checked:

- *free-running* (nobody waits at step 1): the plan holds a *slack*, the free
  blocks left when every member has grown to its finish (finishes returning
  nothing meanwhile). An arrival takes its prompt blocks and its growth to its
  finish out of the slack; a join that would overdraw it is refused (the
  engine ends the span there). No step can run short of blocks, so steps are
  timed many at a time between arrivals.
- *queued* (requests wait, or the slack is short): every step is gated
  (:meth:`DecodeSpan.gate`) with the reference mode's exact free-block count:
  finished requests return their blocks, decodes take one at each block
  boundary (counted per residue class of the slot written, mod
  ``block_size``), and the waiting pass admits whole prompts while they fit.
  The span ends before a step that would preempt or do what a span cannot
  represent (a chunked prompt, a resumed request).

Either way the reference mode's allocations all succeed inside a span; at its
end finished requests free their blocks first and the others then take what
they hold (block ids may differ from the reference mode's; counts do not).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.request import Request, RequestStatus
from sim.scheduler.types import SchedulerOutput


class DecodeSpan:
    """The plan of one span: ``scheduled`` (step 1's batch, running-list
    order) with ``lasts[i]`` its last step (1-based), ``contexts`` their KV
    tokens before step 1, ``k`` the last step of any member, ``joins``
    ``(step, request, last step)`` of the requests admitted later.
    ``slack`` is None for a queued span."""

    __slots__ = ("sched", "scheduled", "contexts", "lasts", "k", "slack", "free0", "joins", "free",
                 "takes", "takes_leave", "back", "frees", "waits_list")

    def __init__(self, sched, out: SchedulerOutput, lasts: list[int], slack: int | None) -> None:
        self.sched = sched
        self.scheduled = out.scheduled
        self.contexts = out.num_computed_before
        self.lasts = lasts
        self.k = max(lasts)
        self.slack = slack
        self.free0 = sched.kv.num_free_blocks  # after step 1's allocations
        self.joins: list[tuple[int, Request, int]] = []
        if slack is None:
            self._start_gating()

    def _start_gating(self) -> None:
        """Queued span: block takings per residue of the slot written, and the
        blocks each member returns after its last step."""
        bs = self.sched.limits.block_size
        takes: dict[int, int] = {}
        leave: dict[int, list[int]] = {}
        back: dict[int, int] = {}
        for r, f in zip(self.scheduled, self.lasts):
            c = r.num_computed_tokens  # after step 1; step j + 1 (j >= 1) writes slot c + j − 1
            y = (c - 1) % bs
            takes[y] = takes.get(y, 0) + 1
            leave.setdefault(f, []).append(y)
            back[f] = back.get(f, 0) + max(r.kv_capacity // bs, -(-(c + f - 1) // bs))
        self.takes, self.takes_leave, self.back = takes, leave, back
        self.free = self.free0
        self.frees = [self.free0]  # free blocks after each step's allocations (index 0 = step 1)
        self.waits_list = [len(self.sched.waiting)]  # requests waiting after each step's schedule

    @property
    def queued(self) -> bool:
        return self.slack is None

    def gate(self, j: int, num_decoding: int) -> list[Request] | None:
        """Queued span: step j + 1 (``j`` steps done), whose running pass
        schedules ``num_decoding`` decodes. Returns the requests its waiting
        pass admits whole (possibly none), or None if the step is not one a span
        can take (a decode would find no free block: the reference mode
        preempts; or see ``span_admissions``). Nothing changes on None."""
        sched = self.sched
        bs = sched.limits.block_size
        free = self.free + self.back.get(j, 0)
        gone = self.takes_leave.get(j)
        takes = self.takes
        if gone:
            for y in gone:
                takes[y] -= 1
        t = takes.get(-j % bs, 0)  # slot c + j − 1 at a block boundary
        if t > free or num_decoding > sched.limits.max_num_batched_tokens:
            if gone:
                for y in gone:
                    takes[y] += 1
            return None
        free -= t
        reqs = sched.span_admissions(num_decoding, free) if sched.waiting else []
        if reqs is None:
            if gone:
                for y in gone:
                    takes[y] += 1
            return None
        for r in reqs:
            free -= -(-r.num_prompt_tokens // bs)
        self.back.pop(j, None)
        self.takes_leave.pop(j, None)
        self.free = free
        self.frees.append(free)
        self.waits_list.append(len(sched.waiting) - len(reqs))
        return reqs

    def join(self, step: int, reqs: list[Request]) -> list[int] | None:
        """Admit ``reqs`` (the scheduler's whole-prompt admissions) at ``step``
        (1-based) and return their last steps; a free-running span first checks
        that their blocks to completion fit in the slack (else None, nothing
        changed). They hold no blocks until :meth:`apply`."""
        sched = self.sched
        bs = sched.limits.block_size
        queued = self.slack is None
        if not queued:
            need = 0
            for r in reqs:  # prompt + every decode slot written up to the finish
                need += -(-(r.num_prompt_tokens + r.num_output_tokens_target - 1) // bs)
            if need > self.slack:
                return None
            self.slack -= need
        lasts = []
        for r in reqs:
            sched.admit_whole_prompt(r)
            p = r.num_prompt_tokens
            last = step + r.num_output_tokens_target - 1
            self.joins.append((step, r, last))
            lasts.append(last)
            if last > self.k:
                self.k = last
            if queued:
                if last > step:  # decodes from step + 1, writing slot p + i − step − 1 at step i
                    y = (p - step) % bs
                    self.takes[y] = self.takes.get(y, 0) + 1
                    self.takes_leave.setdefault(last, []).append(y)
                self.back[last] = self.back.get(last, 0) + -(-(p + last - step) // bs)
        return lasts

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
        if self.slack is None:  # queued: counted step by step
            return self.sched.kv.usage_at(np.array(self.frees[:j], dtype=np.float64))
        bs = self.sched.limits.block_size
        on, off, back_at, back_n, once_at, once_n = [], [], [], [], [], []

        def add(first: int, last: int, held: int) -> None:
            end = last if last < j else j
            n = (end - first) // bs + 1 if first <= end else 0
            if n:
                on.append(first)
                off.append(first + n * bs)
            if last < j:
                back_at.append(last + 1)
                back_n.append(held + n)

        for r, f in zip(self.scheduled, self.lasts):
            # after step 1: kv_capacity slots held, c computed; step i writes slot c + i − 2
            add(r.kv_capacity - r.num_computed_tokens + 2, f, r.kv_capacity // bs)
        for step, r, f in self.joins:
            if step <= j:
                held = -(-r.num_prompt_tokens // bs)  # its prompt's blocks, taken at ``step``
                once_at.append(step)
                once_n.append(held)
                # after its prefill at ``step``: step i writes slot p + i − step − 1
                add(held * bs - r.num_prompt_tokens + step + 1, f, held)
        size = (j // bs + 2) * bs + bs  # room for every "off" mark (<= j + bs), whole rows of bs
        marks = _count(on, None, size) - _count(off, None, size)
        takes = marks.reshape(-1, bs).cumsum(axis=0).ravel()[:j + 1]  # blocks taken at step i
        delta = _count(back_at, back_n, j + 1) - _count(once_at, once_n, j + 1) - takes
        delta[:2] = 0  # step 1 is as the plan found it
        free = self.free0 + np.cumsum(delta[1:])
        return self.sched.kv.usage_at(free)

    def waits(self, j: int) -> list[int]:
        """Requests waiting at each of the first ``j`` steps (after its schedule)."""
        return self.waits_list[:j] if self.slack is None else [0] * j

    def apply(self, j: int) -> SpanParts:
        """Advance every member by the span's first ``j`` steps: finish those
        whose last step came (their blocks freed first), then give the others
        the blocks they hold by now (a joining request its prompt's and growth's)
        in one pool call each. Returns the span's parts: steps with an
        unchanged batch, a join step being a part of its own."""
        grow, grow_slots, joined_alive = [], [], []
        finishing: dict[int, list[Request]] = {}
        for r, f in zip(self.scheduled, self.lasts):
            n = f if f < j else j
            s = r.num_computed_tokens + n - 1
            r.num_computed_tokens = s
            r.num_output_tokens += n
            if f <= j:
                finishing.setdefault(f, []).append(r)
            elif s > r.kv_capacity:
                grow.append(r)
                grow_slots.append(s)
        joined: dict[int, list[Request]] = {}
        for step, r, f in self.joins:
            n = (f if f < j else j) - step  # decode steps after its prefill
            s = r.num_prompt_tokens + n
            r.num_computed_tokens = s
            r.num_output_tokens = 1 + n
            joined.setdefault(step, []).append(r)
            if f <= j:
                finishing.setdefault(f, []).append(r)
            else:
                joined_alive.append(r)
                grow.append(r)
                grow_slots.append(s)
        sched = self.sched
        bounds = set(finishing)
        for step in joined:
            bounds.add(step)
            bounds.add(step - 1)
        bounds = sorted(s for s in bounds if s < j)
        bounds.append(j)
        parts = SpanParts(bounds, [], [], [], [])
        batch, decode, prefill, finished = parts.batch, parts.decode, parts.prefill, parts.finished
        done = []
        b = len(self.scheduled)
        prev = 0
        for step in bounds:
            new = joined.get(prev + 1) if prev else None
            if new:  # a join step
                b += len(new)
                prefill.append(sum([r.num_prompt_tokens for r in new]))
                decode.append(b - len(new))
            else:
                prefill.append(0)
                decode.append(b)
            batch.append(b)
            fin = finishing.get(step)
            if fin:  # members, then joiners in join order: the running-list order
                finished.append((step, fin))
                done += fin
                b -= len(fin)
            prev = step
        if done:
            for r in done:  # not before: _on_finished drops every FINISHED request
                r.status = RequestStatus.FINISHED
            sched._on_finished(done)
        kv = sched.kv
        for r in joined_alive:
            if not kv.allocate_prompt(r):
                raise RuntimeError(f"request {r.request_id}: span join's prompt blocks do not fit")
        if grow:
            kv.grow_for_decode(grow, grow_slots)
        return parts


def _count(at: list[int], n: list[int] | None, size: int) -> np.ndarray:
    """int64 array of ``size``: sum of ``n`` (default 1 each) at positions ``at`` (< size)."""
    idx = np.array(at, dtype=np.int64)
    if n is None:
        return np.bincount(idx, minlength=size)[:size]
    return np.bincount(idx, np.array(n, dtype=np.float64), minlength=size)[:size].astype(np.int64)


class SpanParts(NamedTuple):
    """A span's parts, one entry each: ``steps`` its last step (1-based),
    ``batch`` the requests running, ``decode`` the decode tokens per step,
    ``prefill`` the prefill tokens (join steps); ``finished``: (step, requests
    finishing there), in step order."""

    steps: list[int]
    batch: list[int]
    decode: list[int]
    prefill: list[int]
    finished: list[tuple[int, list[Request]]]
