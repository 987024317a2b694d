"""Merged steps on the engine (a mixin of :class:`sim.engine.simulation.Simulation`):
runs of identical decode steps (``_decode_run``) and decode spans
(``sim.accelerated.decode_span``), which time their steps with the cost model's
resumable clock (``CostModel.decode_clock``) and take SimPy events only where
the next request reaches the router, so a stretch of steps, finishes and
admissions costs no event of its own. Uses the state ``Simulation`` sets up
(``env``, ``cost``, ``overheads``, ``num_events``, ``num_steps``, and
``Interrupt``: SimPy's, as only ``sim/engine/simulation.py`` imports simpy) and its
recording (``sim.engine.recording``); ``rep`` is a ``sim.engine.simulation._Replica``."""

from __future__ import annotations

import math
from bisect import bisect_left

import numpy as np

from sim.cost_model import PY_RUN_MAX_STEPS

_RUN_CHUNK = 16  # steps of a merged decode run timed first (most runs end sooner)


class Spans:
    """The merged-step runners of the replica loop."""

    @staticmethod
    def _run_begins(rep, ends: list[float]) -> None:
        """A merged run starts: arrivals may cut it (``Simulation._cut_run``)."""
        rep.merging = True
        rep.run_ends = ends
        rep.run_joins = []

    def _interrupted(self, rep, ends: list[float], floor: int = 1):
        """An arrival cut the run inside a step already timed: the run ends
        with the step in progress (at least step ``floor``); waits for its end
        and returns the steps run."""
        rep.merging = False
        now = self.env.now
        j = max(min(bisect_left(ends, now) + 1, len(ends)), floor)
        if ends[j - 1] > now:
            yield self.env.timeout(ends[j - 1] - now)
        return j

    def _run_ends(self, rep, ends: list[float], j: int, start: float) -> None:
        """A merged run of ``j`` steps ended (its steps counted, one event)."""
        rep.merging = False
        self.num_events += 1
        self.num_steps += j
        rep.last_step_start = ends[j - 2] if j > 1 else start

    def _decode_run(self, rep, out, ctx: list[int], k: int, start: float):
        """Up to ``k`` identical decode steps in few events. Step end times are
        accumulated in the same floating-point order as ``k`` single steps, so
        results equal the reference mode's. An arrival routed to this replica
        that may change the schedule cuts the run (``_cut_run``): it ends at the
        end of the step in progress, as the reference mode would let the
        scheduler see the arrival there. Steps are timed in chunks: in open loop
        up to the next send (``_next_send_s``; most runs end there), else the
        first ``_RUN_CHUNK`` steps; then, if the run goes on, the rest at once
        (up to the next send). (Runs past finishes and arrivals: :meth:`_span_run`.)"""
        env = self.env
        sched = rep.scheduler
        scheduled = out.scheduled
        B = len(scheduled)
        num_waiting = sched.num_waiting  # at the run's start, as a single step records it
        ov = self.overheads
        cpu, overlap = ov.cpu_s(B), ov.overlap
        if len(ctx) == B:
            # Steps are timed in parts: most runs are cut by an arrival long before
            # their k-th step, and the steps never reached need no time. Each part
            # continues the same sequential float adds (contexts are integers): the
            # ends are those of one whole run.
            until = self._next_send_s()
            # up to the next send, within the cost model's Python path; else a first chunk
            first = PY_RUN_MAX_STEPS if until < math.inf else _RUN_CHUNK
            ends = self.cost.decode_run_ends(ctx, min(k, first), start, cpu, overlap, until)
        else:  # static batching: finished sequences computed as padding; all k steps timed here
            gpu = self.cost.decode_steps_time_s(np.asarray(ctx, dtype=np.int64), k, num_growing=B).tolist()
            ends = []
            t = start
            for dt in ov.apply_run(gpu, len(ctx)):  # sequential float adds, as env.now
                t += dt
                ends.append(t)
        self._run_begins(rep, ends)
        try:
            while True:
                yield env.timeout(ends[-1] - env.now)
                m = len(ends)
                if m >= k or not rep.merging:  # all k steps, or cut by an arrival in the last one
                    break
                self.num_events += 1
                # a run that got this far often goes on: time the rest at once (numpy if long)
                ends += self.cost.decode_run_ends([c + m for c in ctx], k - m, ends[-1], cpu, overlap,
                                                  self._next_send_s())
            j = m
        except self.Interrupt:
            j = yield from self._interrupted(rep, ends)
        self._run_ends(rep, ends, j, start)
        self._run_done(rep, out, ends, j, start, num_waiting)


    def _span_run(self, rep, span, start: float, joins: bool):
        """A decode span (``Scheduler.plan_decode_span``): decode steps that go on
        past finishes and, with ``joins``, take in arrivals the next step would
        admit whole (``Scheduler.span_admissions``, ``DecodeSpan.join``): that
        step is timed as a mixed one and the newcomers decode from the next on.
        Timed step by step (``CostModel.decode_clock``) up to the next send,
        where this replica wakes: the arrival either joined or ends the span at
        the end of the step in progress (as ``_decode_run``). On the only
        replica in open loop the span sends the arrivals itself instead
        (``_send_inline``), without waking: an event only where it ends.
        Per-request state is applied once, at the end (``_span_done``)."""
        env = self.env
        ov = self.overheads
        clock = self.cost.decode_clock(span.contexts, span.lasts, start, ov.cpu_s, ov.overlap)
        joins = joins and rep.scheduler.spans_admit()
        inline = joins and self._inline
        ends = clock.ends
        clock.advance(span.k, self._next_send_s())
        if rep.num_recovering:  # back where they were when preempted, by step 1's end
            self._recovered(rep, span.scheduled, ends[0])
        self._run_begins(rep, ends)
        try:
            while True:
                m = len(ends)
                if (inline and m < span.k and self._num_arrived == self._num_sent
                        and self._next_send_s() <= ends[-1]):
                    # The sends landing in step m, taken without events: this replica is
                    # the only process acting before that step's end (the arrivals
                    # process's pending wake finds its request taken).
                    self._send_inline(rep, ends[-1])
                    if self._join_span(rep, span, clock, m):
                        until = self._next_send_s()
                        if clock.end < until and m + 1 < span.k:
                            clock.advance(span.k - m - 1, until)
                        continue
                    yield env.timeout(ends[-1] - env.now)  # they wait: the span ends with step m
                    break
                yield env.timeout(ends[-1] - env.now)
                m = len(ends)
                if m >= span.k:
                    break
                if rep.merging:
                    clock.advance(span.k - m, self._next_send_s())
                elif joins and self._join_span(rep, span, clock, m):
                    rep.merging = True
                    until = self._next_send_s()
                    if clock.end < until and m + 1 < span.k:  # nothing arrives during the mixed step
                        clock.advance(span.k - m - 1, until)
                else:  # the arrival changes the next step otherwise: single steps from here
                    break
                self.num_events += 1
            j = m
        except self.Interrupt:  # (rare: steps are timed up to the next send; a join's step stays)
            j = yield from self._interrupted(rep, ends, span.joins[-1][0] if span.joins else 1)
        self._run_ends(rep, ends, j, start)
        self._span_done(rep, span, ends, j, start)

    def _queued_span_run(self, rep, span, start: float):
        """A queued decode span (requests waiting): each step is gated by the
        span (``QueuedSpan.gate``: exact free blocks, admissions, chunked
        prefills, preemptions) and timed as a decode or mixed step, without an
        event of its own; the replica wakes only at the step in which the next
        send lands (arrivals join the queue's tail), and the span ends before the
        first step it cannot take (the reference mode then steps on singly)."""
        env = self.env
        ov = self.overheads
        clock = self.cost.decode_clock(span.contexts, span.lasts, start, ov.cpu_s, ov.overlap)
        ends = clock.ends
        clock.advance(1)
        if rep.num_recovering:  # back where they were when preempted, by step 1's end
            self._recovered(rep, span.scheduled, ends[0])
        # Tokens are recorded as they come (a member may be preempted and resume inside the span).
        self._tokens_emitted(span.scheduled, start, ends[0], ends[0], ends[0])
        self._run_begins(rep, ends)
        until = self._next_send_s()
        inline = self._inline  # (queued spans exist only where the scheduler lets spans admit)
        try:
            while True:
                m = len(ends)
                if ends[-1] >= until:  # the next send lands in step m: let it in first
                    if inline and self._num_arrived == self._num_sent:  # sent here (see _span_run)
                        self._send_inline(rep, ends[-1])
                    else:
                        yield env.timeout(ends[-1] - env.now)
                        self.num_events += 1
                        rep.merging = True  # (an arrival to an empty queue cuts: it is simply seen next)
                    until = self._next_send_s()
                if m >= span.k:
                    break
                g = span.gate(m, clock.batch_at_next())
                if g is None:
                    break
                step_start = ends[m - 1]
                if g.preempted:  # at the start of step m + 1; their last token came at step m
                    for x, last in g.dropped:
                        clock.drop(x, last)
                    for req, decoding in g.preempted:
                        if decoding:
                            req.last_token_time = step_start
                    self._preempted(rep, [req for req, _ in g.preempted], step_start)
                for req in g.admitted:
                    if req.first_scheduled_time < 0:
                        req.first_scheduled_time = step_start
                if g.chunks:
                    clock.mixed(g.chunks, g.clock_joins,
                                ov.cpu_s(clock.batch_at_next() + len(g.chunks), g.num_prefill_tokens > 0))
                    for req in g.caught_up:  # back where it was when preempted
                        self._close_recompute(rep, req, ends[m])
                    if g.completed:
                        self._joined(g.completed, ends[m])
                else:
                    clock.advance(1)
            if ends[-1] > env.now:
                yield env.timeout(ends[-1] - env.now)
            j = len(ends)
        except self.Interrupt:  # not expected: steps are never timed past the next send
            raise RuntimeError("queued decode span interrupted") from None
        self._run_ends(rep, ends, j, start)
        self._span_done(rep, span, ends, j, start)

    def _join_span(self, rep, span, clock, m: int) -> bool:
        """Admit the waiting arrivals into the span at step m + 1 and time that
        step, if the scheduler would admit them all whole there and their blocks
        fit (else False, nothing changed)."""
        sched = rep.scheduler
        num_decoding = clock.batch_at_next()
        got = sched.span_admissions(num_decoding, sched.limits.max_num_batched_tokens - num_decoding)
        if not got or not got[0]:
            return False
        reqs = got[0]
        lasts = span.join(m + 1, reqs)
        if lasts is None:
            return False
        step_start = clock.ends[m - 1]
        for req in reqs:
            req.first_scheduled_time = step_start
        cpu = self.overheads.cpu_s(num_decoding + len(reqs), True)
        if len(reqs) == 1:
            clock.join(reqs[0].num_prompt_tokens, lasts[0], cpu)
        else:
            prompts = [r.num_prompt_tokens for r in reqs]
            clock.mixed([(p, 0) for p in prompts], list(zip(prompts, lasts)), cpu)
        return True
