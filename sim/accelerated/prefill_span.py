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
:meth:`PrefillFirstSpan.running_outputs` for the state that SGLang's admission
rule reads (``PrefillFirstRuns.pause_admissions``).
"""

from __future__ import annotations

import numpy as np

from sim.accelerated.decode_span import DecodeSpan, SpanParts


class PrefillFirstSpan(DecodeSpan):
    """A free-running span whose joins are prefilled in steps of their own
    (see the module docstring). ``pauses``: per pause, ``[d, start, end,
    requests, prefill tokens, running, waiting, usage]`` as the engine
    recorded it."""

    prompt_blocks_after = 1

    def __init__(self, runs, out, lasts: list[int], slack: int = 0) -> None:
        super().__init__(runs, out, lasts, slack)
        self.pauses: list[list] = []

    def free_at(self, d: int) -> int:
        """Free KV blocks at the ``schedule()`` after decode step ``d`` (and
        the pauses after it so far): step 1's free blocks, less each running
        member's growth through step ``d``, plus the blocks of those that
        finished by then (all they held), less what the joins hold."""
        bs = self.sched.limits.block_size
        free = self.free0
        for r, f in zip(self.scheduled, self.lasts):
            held0 = r.kv_capacity // bs  # after step 1; step i writes slot c + i − 2
            if f <= d:
                free += held0
            else:
                h = -(-(r.num_computed_tokens + d - 1) // bs)
                if h > held0:
                    free -= h - held0
        for step, _, f, n0, _ in self.joins:
            if f > d:  # prefilled after step ``step``, decoded steps step + 1 .. d
                free -= -(-(n0 + d - step) // bs)
        return free

    def running_outputs(self, d: int) -> list[tuple[int, int]]:
        """``(max_tokens, outputs)`` of each request running after decode step
        ``d`` (finished ones gone), in running-list order."""
        out = [(r.max_tokens, r.num_output_tokens + d) for r, f in zip(self.scheduled, self.lasts) if f > d]
        out += [(r.max_tokens, 1 + d - step) for step, r, f, _, _ in self.joins if f > d]
        return out

    def num_running(self, d: int) -> int:
        return sum(1 for f in self.lasts if f > d) + sum(1 for jn in self.joins if jn[2] > d)

    def apply(self, j: int) -> SpanParts:
        """Advance every member by the span's first ``j`` decode steps, finish
        those whose last step came and give the others their blocks. Parts of
        the decode steps: a batch changes after a finish and where joins start
        decoding (step d + 1, a part of its own: its newcomers' ITL gap is from
        their pause, recorded by the engine side); no decode step carries prefill."""
        finishing, alive, grow, grow_slots, fresh = self._advance(j, set())
        fsteps = np.array(sorted(finishing), dtype=np.int64)
        fcum = np.cumsum([0] + [len(finishing[f]) for f in fsteps.tolist()])
        starts = np.array([jn[0] + 1 for jn in self.joins], dtype=np.int64)  # first decode step of each join
        bounds = np.sort(np.concatenate((fsteps, starts - 1, starts)))
        bounds = bounds[(np.diff(bounds, prepend=-1) != 0) & (bounds < j) & (bounds > 0)]
        bounds = np.append(bounds, j)
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
