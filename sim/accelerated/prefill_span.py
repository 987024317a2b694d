"""A decode span of SGLang's prefill-first scheduler that takes arrivals in
through prefill-only steps.

``PrefillFirstScheduler`` runs a prefill batch whenever one can be formed and
never mixes it with decodes: an admitted arrival stalls the running requests
for one step. The span keeps counting *decode* steps (1, 2, ..., its ``k``),
as :class:`~sim.accelerated.decode_span.DecodeSpan` does; a prefill-only step
(a *pause*) sits between decode steps ``d`` and ``d + 1``. A request prefilled
there is a join at step ``d`` (``[d, request, last, prompt, 0]``): it emits
its first token at the pause's end and decodes from step ``d + 1`` on, up to
its ``last`` (its prompt blocks show in the rows from step ``d + 1``:
``prompt_blocks_after``). The engine side (``AcceleratedStepping._lag_span_run``)
times the pause with the cost model's single-step time, records its row and
the requests' first tokens, and asks :meth:`PrefillFirstSpan.free_at` and
:meth:`PrefillFirstSpan.running_after` for the state that SGLang's admission
rule reads (``PrefillFirstRuns.pause_admissions``).
"""

from __future__ import annotations

import heapq

import numpy as np

from sim.accelerated.decode_span import DecodeSpan, SpanParts
from sim.results.metrics import diff_from, int64_array


class PrefillFirstSpan(DecodeSpan):
    """A free-running span whose joins are prefilled in steps of their own
    (see the module docstring). ``pauses``: per pause, ``[d, start, end,
    requests, prefill tokens, running, waiting, usage]`` as the engine
    recorded it."""

    prompt_blocks_after = 1

    def __init__(self, runs, out, lasts: list[int], slack: int = 0) -> None:
        super().__init__(runs, out, lasts, slack)
        self.pauses: list[list] = []
        bs = self.sched.limits.block_size
        # Free blocks kept step by step (free_at): those returned after each step (its
        # finishes), and per residue of the step mod block_size the members taking a
        # block there (from their first taking to their last step).
        self._back: dict[int, int] = {}
        self._enter: dict[int, list[int]] = {}
        self._exit: dict[int, list[int]] = {}  # after its last step
        self._events: list[int] = []  # (a heap) the steps with an entry in the three above
        self._takes = [0] * bs
        self._alive: list[list] = []  # [last step, request, outputs − d] in running-list order
        for r, f in zip(self.scheduled, lasts):
            c, held0 = r.num_computed_tokens, r.kv_capacity // bs  # after step 1: step i writes slot c + i − 2
            self._taking(r.kv_capacity - c + 2, f, max(held0, -(-(c + f - 1) // bs)) - held0 + held0)
            self._alive.append([f, r, r.num_output_tokens])
        self._d = 1  # free_at's state: after step _d (its finishes returned)
        self._free = self.free0 + self._back.pop(1, 0)
        for y in self._exit.pop(1, ()):
            self._takes[y] -= 1
        heapq.heapify(self._events)

    def _taking(self, first: int, last: int, held_at_last: int) -> None:
        """A member takes a block at steps first, first + bs, ... up to its
        ``last`` step, and returns ``held_at_last`` blocks after it."""
        events = self._events
        if first <= last:
            y = first % len(self._takes)
            self._enter.setdefault(first, []).append(y)
            self._exit.setdefault(last, []).append(y)
            heapq.heappush(events, first)
        self._back[last] = self._back.get(last, 0) + held_at_last
        heapq.heappush(events, last)

    def join(self, step: int, reqs):
        lasts = super().join(step, reqs)
        if lasts is not None:
            bs = len(self._takes)
            for r, f in zip(reqs, lasts):
                p = r.num_prompt_tokens
                held = -(-p // bs)  # after the pause; step i > step writes slot p + i − step − 1
                self._taking(held * bs - p + step + 1, f, -(-(p + f - step) // bs))
                self._free -= held
                self._alive.append([f, r, 1 - step])
        return lasts

    def free_at(self, d: int) -> int:
        """Free KV blocks at the ``schedule()`` after decode step ``d`` (and
        the pauses after it so far), ``d`` never decreasing: step 1's free
        blocks, less each step's takings (decodes starting a block), plus what
        the members finishing at each step held, less the joins' prompt blocks."""
        free, i = self._free, self._d
        takes, enter, exit_, back, events = self._takes, self._enter, self._exit, self._back, self._events
        bs = len(takes)
        while i < d:
            while events and events[0] <= i:
                heapq.heappop(events)
            nxt = events[0] if events and events[0] <= d else d + 1
            if nxt > i + 1:  # steps i + 1 .. nxt − 1: no member starts, stops or finishes
                free -= _takings(takes, i + 1, nxt - 1)
                i = nxt - 1
                if i >= d:
                    break
            i += 1
            for y in enter.pop(i, ()):
                takes[y] += 1
            free += back.pop(i, 0) - takes[i % bs]
            for y in exit_.pop(i, ()):
                takes[y] -= 1
        self._free, self._d = free, i
        return free

    def running_after(self, d: int) -> list[list]:
        """``[last step, request, outputs − d]`` of each request running after
        decode step ``d`` and the pauses after it so far (finished ones gone),
        in running-list order."""
        alive = self._alive = [a for a in self._alive if a[0] > d]
        return alive

    def apply(self, j: int) -> SpanParts:
        """Advance every member by the span's first ``j`` decode steps, finish
        those whose last step came and give the others their blocks. Parts of
        the decode steps: a batch changes after a finish and where joins start
        decoding (step d + 1, a part of its own: its newcomers' ITL gap is from
        their pause, recorded by the engine side); no decode step carries prefill."""
        finishing, alive, grow, grow_slots, fresh = self._advance(j, set())
        fsteps_l = sorted(finishing)
        fsteps = int64_array(fsteps_l)
        fcum = int64_array([0] + [len(finishing[f]) for f in fsteps_l]).cumsum()
        starts = int64_array([jn[0] + 1 for jn in self.joins])  # first decode step of each join
        bounds = np.sort(np.concatenate((fsteps, starts - 1, starts)))
        bounds = bounds[(diff_from(bounds, -1) != 0) & (bounds < j) & (bounds > 0)]
        bounds = np.concatenate((bounds, [j]))
        prev = np.concatenate(([0], bounds[:-1]))
        batch = (len(self.scheduled) - fcum[np.searchsorted(fsteps, prev, side="right")]
                 + np.searchsorted(starts, bounds, side="right"))
        fresh_n = np.searchsorted(starts, bounds, side="right") - np.searchsorted(starts, bounds, side="left")
        one = (bounds - prev) == 1  # a part of one step: its newcomers' gap is not the step's
        pooled = batch - np.where(one, fresh_n, 0)
        zeros = [0] * len(bounds)
        parts = SpanParts(bounds.tolist(), batch.tolist(), batch.tolist(), zeros,
                          [(f, finishing[f]) for f in fsteps.tolist()], zeros, alive, pooled.tolist())
        self._commit(finishing, grow, grow_slots, fresh)
        self.runs.steps_applied(j)
        return parts


def _takings(takes: list[int], a: int, b: int) -> int:
    """Blocks taken in steps ``a`` .. ``b`` (a <= b): step i takes
    ``takes[i % len(takes)]``."""
    bs = len(takes)
    n = b - a + 1
    if bs == 1:
        return takes[0] * n
    total = sum(takes) * (n // bs)
    y = a % bs
    for _ in range(n % bs):
        total += takes[y]
        y = y + 1 if y + 1 < bs else 0
    return total
