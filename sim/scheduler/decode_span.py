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
                 "takes", "takes_leave", "back", "frees", "waits_list", "res", "xv", "mlast", "dead", "by_res",
                 "order", "preempted")

    def __init__(self, sched, out: SchedulerOutput, lasts: list[int], slack: int | None) -> None:
        self.sched = sched
        self.scheduled = out.scheduled
        self.contexts = out.num_computed_before
        self.lasts = lasts
        self.k = max(lasts)
        self.slack = slack
        self.free0 = sched.kv.num_free_blocks  # after step 1's allocations
        # (step, request, last step, tokens prefilled, outputs before): admitted at ``step``
        self.joins: list[tuple[int, Request, int, int, int]] = []
        self.preempted: list[tuple[int, int, Request]] = []  # (last step it decoded, member id, request)
        if slack is None:
            self._start_gating()

    def _start_gating(self) -> None:
        """Queued span: per member (id: step 1's batch in order, then joiners)
        the residue mod ``block_size`` of the slots it writes, its last step, its
        clock context; block takings per residue; the blocks each member returns
        after its last step."""
        bs = self.sched.limits.block_size
        takes: dict[int, int] = {}
        by_res: dict[int, list[int]] = {}
        leave: dict[int, list[int]] = {}
        back: dict[int, int] = {}
        res = []
        for i, (r, f) in enumerate(zip(self.scheduled, self.lasts)):
            c = r.num_computed_tokens  # after step 1; step j + 1 (j >= 1) writes slot c + j − 1
            y = (c - 1) % bs
            res.append(y)
            takes[y] = takes.get(y, 0) + 1
            by_res.setdefault(y, []).append(i)
            leave.setdefault(f, []).append(i)
            back[f] = back.get(f, 0) + max(r.kv_capacity // bs, -(-(c + f - 1) // bs))
        self.takes, self.by_res, self.takes_leave, self.back, self.res = takes, by_res, leave, back, res
        self.xv = list(self.contexts)  # the clock's virtual contexts (DecodeClock)
        self.mlast = list(self.lasts)
        self.dead = bytearray(len(res))  # finished or preempted
        self.order = list(range(len(res)))  # running-list order (ids only grow)
        self.free = self.free0
        self.frees = [self.free0]  # free blocks after each step's allocations (index 0 = step 1)
        self.waits_list = [len(self.sched.waiting)]  # requests waiting after each step's schedule

    @property
    def queued(self) -> bool:
        return self.slack is None

    def _member(self, i: int) -> Request:
        n = len(self.scheduled)
        return self.scheduled[i] if i < n else self.joins[i - n][1]

    def _held(self, i: int, j: int) -> int:
        """Blocks member ``i`` holds after step j (it decoded through step j)."""
        bs = self.sched.limits.block_size
        n = len(self.scheduled)
        if i < n:
            r = self.scheduled[i]
            return max(r.kv_capacity // bs, -(-(r.num_computed_tokens + j - 1) // bs))
        step, _, _, n0, _ = self.joins[i - n]
        return -(-(n0 + j - step) // bs)

    def gate(self, j: int, num_decoding: int) -> tuple[list[Request], list[tuple[int, int]]] | None:
        """Queued span: step j + 1 (``j`` steps done), whose running pass
        schedules ``num_decoding`` decodes. Returns ``(admitted, dropped)``: the
        requests its waiting pass admits whole (possibly none) and the clock
        contexts ``(context, last step)`` of the requests it preempts; or None if
        the span cannot take the step (see ``span_admissions``; after None the
        span is only applied). Where decodes at a block boundary find no free
        block, the running pass preempts from the running list's tail (FCFS,
        recompute) as the reference mode: each victim returns its blocks, is
        settled as preempted (``_settle_preempted``) and goes back to the queue's
        front; that step admits nobody."""
        sched = self.sched
        lim = sched.limits
        if num_decoding > lim.max_num_batched_tokens:
            return None
        bs = lim.block_size
        free = self.free + self.back.pop(j, 0)
        takes, res, dead = self.takes, self.res, self.dead
        for i in self.takes_leave.pop(j, ()):  # decoded through step j: finished
            dead[i] = 1
            if res[i] >= 0:
                takes[res[i]] -= 1
        r0 = -j % bs  # slot at a block boundary
        need = takes.get(r0, 0)
        dropped = []
        if need > free:
            victims = self._victims(sorted(i for i in self.by_res[r0] if not dead[i]), free, j)
            if len(victims) >= num_decoding:  # the step would run nothing
                return None
            for v in victims:
                free += self._held(v, j)
                dropped.append(self._preempt(v, j))
            free -= need - sum(1 for v in victims if res[v] == r0)
            reqs = []
        else:
            free -= need
            reqs = sched.span_admissions(num_decoding, free) if sched.waiting else []
            if reqs is None:
                return None
            for r in reqs:
                free -= -(-r.num_tokens // bs)
        self.free = free
        self.frees.append(free)
        self.waits_list.append(len(sched.waiting) - len(reqs))
        return reqs, dropped

    def _victims(self, needers: list[int], free: int, j: int) -> list[int]:
        """The running pass at a block shortage (``chunked.py``'s
        ``_pick_victim`` under FCFS): each request crossing into a new block
        takes one, in running-list order; when none is free, the list's tail is
        preempted (its blocks return), and if that is the request itself the pass
        stops. Returns the victims in the order preempted; changes nothing."""
        order, dead = self.order, self.dead
        gone: set[int] = set()
        pos = len(order) - 1
        for i in needers:
            if i in gone:  # preempted as the tail meanwhile
                continue
            while free < 1:
                while dead[order[pos]] or order[pos] in gone:
                    pos -= 1
                v = order[pos]
                gone.add(v)
                free += self._held(v, j)
                if v == i:
                    break
            if i in gone:  # the request itself was the tail: the pass stops
                break
            free -= 1
        return [v for v in order[pos:] if v in gone][::-1]

    def _preempt(self, i: int, j: int) -> tuple[int, int]:
        """Preempt member ``i`` before step j + 1; returns its clock context and
        last step (for ``DecodeClock.drop``)."""
        dead, res = self.dead, self.res
        dead[i] = 1
        last = self.mlast[i]
        if res[i] >= 0:
            self.takes[res[i]] -= 1
            self.takes_leave[last].remove(i)
        self.back[last] -= self._held(i, last)
        req = self._member(i)
        n = len(self.scheduled)
        if i < n:  # decoded steps 1..j
            out, computed = req.num_output_tokens + j, req.num_computed_tokens + j - 1
        else:
            step, _, _, n0, o0 = self.joins[i - n]
            out, computed = o0 + 1 + j - step, n0 + j - step
        self.preempted.append((j, i, req))
        self.sched._settle_preempted(req, out, computed)
        return self.xv[i], last

    def join(self, step: int, reqs: list[Request]) -> list[int] | None:
        """Admit ``reqs`` (the scheduler's whole-prompt admissions) at ``step``
        (1-based) and return their last steps; a free-running span first checks
        that their blocks to completion fit in the slack (else None, nothing
        changed). A preempted request resumes: its prompt and outputs are
        prefilled. They hold no blocks until :meth:`apply`."""
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
            n0, o0 = r.num_tokens, r.num_output_tokens
            sched.admit_whole_prompt(r)
            last = step + r.num_output_tokens_target - o0 - 1
            self.joins.append((step, r, last, n0, o0))
            lasts.append(last)
            if last > self.k:
                self.k = last
            if queued:
                i = len(self.res)
                self.mlast.append(last)
                self.dead.append(0)
                self.order.append(i)
                self.xv.append(n0 - step)  # decodes from step + 1 with context n0
                if last > step:  # step i > step writes slot n0 + i − step − 1
                    y = (n0 - step) % bs
                    self.res.append(y)
                    self.takes[y] = self.takes.get(y, 0) + 1
                    self.by_res.setdefault(y, []).append(i)
                else:
                    self.res.append(-1)
                self.takes_leave.setdefault(last, []).append(i)
                self.back[last] = self.back.get(last, 0) + -(-(n0 + last - step) // bs)
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
        for step, r, f, n0, _ in self.joins:  # (free-running: nobody resumes, n0 = prompt)
            if step <= j:
                held = -(-n0 // bs)  # its prompt's blocks, taken at ``step``
                once_at.append(step)
                once_n.append(held)
                # after its prefill at ``step``: step i writes slot p + i − step − 1
                add(held * bs - n0 + step + 1, f, held)
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
        the blocks they hold by now (a joining request its prefill's and
        growth's) in one pool call each (members preempted inside the span were
        settled then). Returns the span's parts: steps with an unchanged batch;
        a join step, and a step that preempted, begin parts of their own."""
        gone = {i for _, i, _ in self.preempted}
        n_orig = len(self.scheduled)
        grow, grow_slots, joined_alive, alive = [], [], [], []
        finishing: dict[int, list[Request]] = {}
        leave_after: dict[int, int] = {}  # step → requests leaving the batch after it
        preempts: dict[int, int] = {}  # step → requests preempted at its start
        for jv, _, _ in self.preempted:
            leave_after[jv] = leave_after.get(jv, 0) + 1
            preempts[jv + 1] = preempts.get(jv + 1, 0) + 1
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
        joined: dict[int, list[int]] = {}  # step → tokens prefilled per joining request
        for k, (step, r, f, n0, o0) in enumerate(self.joins):
            joined.setdefault(step, []).append(n0)
            if gone and n_orig + k in gone:
                continue
            n = (f if f < j else j) - step  # decode steps after its prefill
            s = n0 + n
            r.num_computed_tokens = s
            r.num_output_tokens = o0 + 1 + n
            if f <= j:
                finishing.setdefault(f, []).append(r)
            else:
                joined_alive.append(r)
                grow.append(r)
                grow_slots.append(s)
        alive += joined_alive
        for f, fin in finishing.items():
            leave_after[f] = leave_after.get(f, 0) + len(fin)
        bounds = set(leave_after)
        for step in joined:
            bounds.add(step)
            bounds.add(step - 1)
        bounds = sorted(s for s in bounds if s < j)
        bounds.append(j)
        parts = SpanParts(bounds, [], [], [], [], [], alive)
        batch, decode, prefill, finished, preempted = (parts.batch, parts.decode, parts.prefill,
                                                       parts.finished, parts.preempted)
        done = []
        b = n_orig
        prev = 0
        for step in bounds:
            new = joined.get(prev + 1) if prev else None
            if new:  # a join step
                b += len(new)
                prefill.append(sum(new))
                decode.append(b - len(new))
            else:
                prefill.append(0)
                decode.append(b)
            batch.append(b)
            preempted.append(preempts.get(prev + 1, 0))
            fin = finishing.get(step)
            if fin:  # members, then joiners in join order: the running-list order
                finished.append((step, fin))
                done += fin
            b -= leave_after.get(step, 0)
            prev = step
        sched = self.sched
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
    ``prefill`` the prefill tokens (join steps), ``preempted`` the requests
    preempted at its first step; ``finished``: (step, requests finishing
    there), in step order; ``running``: the members still running after the span."""

    steps: list[int]
    batch: list[int]
    decode: list[int]
    prefill: list[int]
    finished: list[tuple[int, list[Request]]]
    preempted: list[int]
    running: list[Request]
