"""A queued decode span: requests wait (or the blocks to every finish are
short), so each step is gated with the reference mode's exact state.

:meth:`QueuedSpan.gate` decides step j + 1 as ``ChunkedPrefillScheduler``'s
``schedule()`` would, from counters instead of a pass over the batch:

- finished requests return their blocks (counted when they were planned);
- decodes take a block where the slot they write starts one: members are
  bucketed by the residue of that slot mod ``block_size``, so the takings of a
  step are one dictionary lookup;
- where the free blocks run short, the running pass preempts from the running
  list's tail (FCFS, recompute), each victim returning what it holds, and that
  step admits nobody (vLLM skips admission in a step that preempted);
- a request still prefilling (chunked by the budget) continues its next chunk
  after the decodes, as the running pass does for the list's tail;
- the waiting pass admits from the queue's head while budget, ``max_num_seqs``
  and blocks allow (``ChunkedRuns.span_admissions``), the last
  one possibly with a first chunk only; a preempted request recomputes its
  prompt and outputs.

Members are numbered: step 1's batch in running-list order, then each
admitted request; the running list is that order (a preempted request leaves
it). Every step's running / decode / prefill / preempted counts, free blocks
and queue length are recorded, so the step rows need no replay.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.request import Request
from sim.accelerated.decode_span import DecodeSpan, SpanParts
from sim.scheduler.types import SchedulerOutput


class GateResult(NamedTuple):
    """One gated step: ``admitted`` (new to the running list), the prefill
    ``chunks`` (new tokens, tokens cached) for the cost model, ``completed``
    (request, resumed after a preemption) whose prefill ends with this step
    (each emits a token), ``clock_joins`` (context, last step) of those that
    decode from the next step, ``dropped`` (clock context, last step) of the
    decoding requests preempted at its start, ``preempted`` (request, was
    decoding) of every request preempted there, and ``caught_up``: preempted
    requests whose recompute gets back where they were by its end;
    ``num_prefill_tokens`` as the step's row counts them (a recompute's last
    single token counts as a decode)."""

    admitted: list[Request]
    chunks: list[tuple[int, int]]
    completed: list[tuple[Request, bool]]
    clock_joins: list[tuple[int, int]]
    dropped: list[tuple[int, int]]
    preempted: list[tuple[Request, bool]]
    caught_up: list[Request]
    num_prefill_tokens: int


class QueuedSpan(DecodeSpan):
    """A span gated step by step (see the module docstring)."""

    queued = True

    def __init__(self, runs, out: SchedulerOutput, lasts: list[int]) -> None:
        super().__init__(runs, out, lasts)
        sched = self.sched
        self.slack = None
        bs = sched.limits.block_size
        takes: dict[int, int] = {}
        by_res: dict[int, list[int]] = {}
        leave: dict[int, list[int]] = {}
        back: dict[int, int] = {}
        res = []
        for i, (r, f) in enumerate(zip(self.scheduled, lasts)):
            c = r.num_computed_tokens  # after step 1; step j + 1 (j >= 1) writes slot c + j − 1
            y = (c - 1) % bs
            res.append(y)
            takes[y] = takes.get(y, 0) + 1
            by_res.setdefault(y, []).append(i)
            leave.setdefault(f, []).append(i)
            back[f] = back.get(f, 0) + max(r.kv_capacity // bs, -(-(c + f - 1) // bs))
        self.takes, self.by_res, self.takes_leave, self.back, self.res = takes, by_res, leave, back, res
        self.xv = list(self.contexts)  # the clock's virtual contexts (DecodeClock)
        self.mlast: list[int | None] = list(lasts)
        self.dead = bytearray(len(res))  # finished or preempted
        self.order = list(range(len(res)))  # running-list order (ids only grow)
        self.partial: list[int] | None = None  # [member id, tokens computed] of a chunked prefill
        self.free = self.free0
        B = len(res)
        self.frees = [self.free0]  # per step (index 0 = step 1): free blocks after its allocations,
        self.waits = [len(sched.waiting)]  # queue after its schedule, running requests,
        self.step_b, self.step_dec, self.step_pre, self.step_npre = [B], [B], [0], [0]  # decode and
        self.step_pool = [B]  # prefill tokens, preemptions, tokens pooled in the step's ITL gap

    # ------------------------------------------------------------------ members
    def _member(self, i: int) -> Request:
        n = len(self.scheduled)
        return self.scheduled[i] if i < n else self.joins[i - n][1]

    def _held(self, i: int, j: int) -> int:
        """Blocks member ``i`` holds after step j."""
        bs = self.sched.limits.block_size
        n = len(self.scheduled)
        if i < n:
            r = self.scheduled[i]
            return max(r.kv_capacity // bs, -(-(r.num_computed_tokens + j - 1) // bs))
        step, _, _, n0, _ = self.joins[i - n]
        if step is None:  # still prefilling
            return -(-self.partial[1] // bs)
        return -(-(n0 + j - step) // bs)

    def _decoding(self, i: int, step: int) -> tuple[int, int]:
        """Member ``i``'s prefill ended at ``step``: it decodes from the next
        step up to its last. Returns its (clock context, last step)."""
        bs = self.sched.limits.block_size
        entry = self.joins[i - len(self.scheduled)]
        r, n0, o0 = entry[1], entry[3], entry[4]
        last = step + r.num_output_tokens_target - o0 - 1
        entry[0], entry[2] = step, last
        self.mlast[i] = last
        self.xv[i] = n0 - step
        if last > step:  # step i' > step writes slot n0 + i' − step − 1
            y = (n0 - step) % bs
            self.res[i] = y
            self.takes[y] = self.takes.get(y, 0) + 1
            self.by_res.setdefault(y, []).append(i)
        self.takes_leave.setdefault(last, []).append(i)
        self.back[last] = self.back.get(last, 0) + -(-(n0 + last - step) // bs)
        if last > self.k:
            self.k = last
        return n0, last

    # ------------------------------------------------------------------ steps
    def gate(self, j: int, num_decoding: int) -> GateResult | None:
        """Step j + 1 (``j`` steps done), whose running pass has ``num_decoding``
        decodes: what it does (:class:`GateResult`), or None if the span cannot
        take it (every request would be preempted, nothing would run, or more
        decodes than the budget); after None the span is only applied. The
        span's state moves to after that step's schedule."""
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
        budget = lim.max_num_batched_tokens - num_decoding
        part = self.partial
        pn = pblocks = 0
        if part is not None:  # its next chunk, after every decode (it is the list's tail)
            pid, cp = part
            n0 = self.joins[pid - len(self.scheduled)][3]
            pn = min(n0 - cp, budget, lim.max_model_len - 1 - cp)
            if pn > 0:
                pblocks = -(-(cp + pn) // bs) - -(-cp // bs)
            else:
                pn = 0
        running = num_decoding + (part is not None)
        dropped, victims, preempted = [], [], []
        admitted: list[Request] = []
        n_last = 0
        if need + pblocks > free:
            # members join in id order, so the list is in running-list order (pruned here)
            live = self.by_res[r0] = [i for i in self.by_res.get(r0, ()) if not dead[i]]
            needers = [(i, 1) for i in live]
            if pn:
                needers.append((part[0], pblocks))
            victims = self._victims(needers, free, j)
            if len(victims) >= running:  # the step would run nothing
                return None
            lost = 0
            for v in victims:
                free += self._held(v, j)
                if res[v] == r0:
                    need -= 1
                x = self._preempt(v, j)
                if x is not None:  # was decoding
                    dropped.append(x)
                    lost += 1
                preempted.append((self._member(v), x is not None))
            num_decoding -= lost
            free -= need
            part = self.partial
            if part is not None and pn:
                free -= pblocks
        else:
            free -= need + pblocks
            if sched.waiting:
                admitted, n_last = self.runs.span_admissions(running, budget - pn, free)
            if not running and not admitted:  # nothing to run: the reference mode's idle path
                return None
        step = j + 1
        chunks, completed, clock_joins, caught_up = [], [], [], []
        prefill = one_decode = 0
        if part is not None and pn:
            pid, cp = part
            chunks.append((pn, cp))
            prefill += pn
            entry = self.joins[pid - len(self.scheduled)]
            if entry[1].num_preemptions and cp + pn >= entry[1].preempted_at_tokens:
                caught_up.append(entry[1])
            if pn == 1 and entry[4] and cp + 1 == entry[3]:
                one_decode += 1  # the last token of a recompute counts as a decode (Scheduler._add_scheduled)
            if cp + pn == entry[3]:
                completed.append((entry[1], entry[4] > 0))
                clock_joins.append(self._decoding(pid, step))
                self.partial = None
            else:
                part[1] = cp + pn
        for idx, r in enumerate(admitted):
            n0, o0 = r.num_tokens, r.num_output_tokens
            n = n0 if idx < len(admitted) - 1 else n_last
            self.runs.admit_to_span(r, n)
            free -= -(-n // bs)
            i = len(res)
            res.append(-1)
            self.xv.append(0)
            self.mlast.append(None)
            dead.append(0)
            self.order.append(i)
            self.joins.append([None, r, None, n0, o0])
            chunks.append((n, 0))
            prefill += n
            if r.num_preemptions and n >= r.preempted_at_tokens:
                caught_up.append(r)
            if n == n0:
                completed.append((r, o0 > 0))
                clock_joins.append(self._decoding(i, step))
            else:
                self.partial = [i, n]
        self.free = free
        self.frees.append(free)
        self.waits.append(len(sched.waiting))
        self.step_b.append(num_decoding + (part is not None) + len(admitted))
        self.step_dec.append(num_decoding + one_decode)
        self.step_pool.append(num_decoding)
        self.step_pre.append(prefill - one_decode)
        self.step_npre.append(len(victims))
        return GateResult(admitted, chunks, completed, clock_joins, dropped, preempted, caught_up,
                          prefill - one_decode)

    def _victims(self, needers: list[tuple[int, int]], free: int, j: int) -> list[int]:
        """The running pass at a block shortage (``chunked.py``'s
        ``_pick_victim`` under FCFS): ``needers`` (member, blocks) in
        running-list order each take their blocks; when too few are free, the
        list's tail is preempted (its blocks return), and if that is the
        request itself the pass stops. Returns the victims in the order
        preempted; changes nothing."""
        order, dead = self.order, self.dead
        gone: set[int] = set()
        pos = len(order) - 1
        for i, nb in needers:
            if i in gone:  # preempted as the tail meanwhile
                continue
            while free < nb:
                while dead[order[pos]] or order[pos] in gone:
                    pos -= 1
                v = order[pos]
                gone.add(v)
                free += self._held(v, j)
                if v == i:
                    break
            if i in gone:  # the request itself was the tail: the pass stops
                break
            free -= nb
        return [v for v in order[pos:] if v in gone][::-1]

    def _preempt(self, i: int, j: int) -> tuple[int, int] | None:
        """Preempt member ``i`` before step j + 1 and settle it as the
        reference mode would (``DecodeRuns.settle_preempted``). Returns its
        clock context and last step (for ``DecodeClock.drop``), None for a
        request still prefilling (not in the clock)."""
        self.dead[i] = 1
        req = self._member(i)
        n = len(self.scheduled)
        if i < n:  # decoded steps 1..j
            out, computed = req.num_output_tokens + j, req.num_computed_tokens + j - 1
        else:
            step, _, _, n0, o0 = self.joins[i - n]
            if step is None:  # prefilling: nothing emitted in the span
                out, computed = o0, self.partial[1]
                self.partial = None
            else:
                out, computed = o0 + 1 + j - step, n0 + j - step
        dropped = None
        last = self.mlast[i]
        if last is not None:
            if self.res[i] >= 0:
                self.takes[self.res[i]] -= 1
            self.takes_leave[last].remove(i)
            self.back[last] -= self._held(i, last)
            dropped = (self.xv[i], last)
        self.preempted.append((j, i, req))
        self.runs.settle_preempted(req, out, computed)
        return dropped

    # ------------------------------------------------------------------ results
    def usages(self, j: int) -> np.ndarray:
        return self.sched.kv.usage_at(np.array(self.frees[:j], dtype=np.float64))

    def apply(self, j: int) -> SpanParts:
        """Advance every member by the span's first ``j`` steps (one still
        prefilling to the tokens computed), finish those whose last step came
        and give the others their blocks. Parts from the recorded counts: a
        step with prefill or a preemption is a part of its own."""
        gone = {i for _, i, _ in self.preempted}
        finishing, alive, grow, grow_slots, fresh = self._advance(j, gone)
        if self.partial is not None:
            pid, cp = self.partial
            r = self.joins[pid - len(self.scheduled)][1]
            r.num_computed_tokens = cp
            fresh.append((r, cp))
        b = np.array(self.step_b[:j])
        dec = np.array(self.step_dec[:j])
        pre = np.array(self.step_pre[:j])
        npre = np.array(self.step_npre[:j])
        pool = np.array(self.step_pool[:j])
        new = np.ones(j, dtype=bool)
        odd = (pre > 0) | (npre > 0) | (dec != pool)
        new[1:] = odd[1:] | odd[:-1] | (b[1:] != b[:-1]) | (dec[1:] != dec[:-1])
        starts = np.flatnonzero(new)
        parts = SpanParts(np.append(starts[1:], j).tolist(), b[starts].tolist(), dec[starts].tolist(),
                          pre[starts].tolist(), [(f, finishing[f]) for f in sorted(finishing)],
                          npre[starts].tolist(), alive, pool[starts].tolist())
        self._commit(finishing, grow, grow_slots, fresh)
        self.runs.steps_applied(j)
        return parts
