"""Decode spans on the engine (a mixin of :class:`sim.engine.Simulation`):
a span (``sim.scheduler.decode_span``) times its steps with the cost model's
resumable clock (``CostModel.decode_clock``) and takes SimPy events only
where the next request reaches the router, so a stretch of steps, finishes
and admissions costs no event of its own. Uses the state ``Simulation`` sets
up (``env``, ``cost``, ``overheads``, ``num_events``, ``num_steps``, and
``Interrupt``: SimPy's, as only ``sim/engine.py`` imports simpy) and its
recording (``sim.engine_outputs``); ``rep`` is a ``sim.engine._Replica``."""

from __future__ import annotations

from bisect import bisect_left


class Spans:
    """The span runners of the replica loop."""

    def _span_run(self, rep, span, start: float, joins: bool):
        """A decode span (``Scheduler.plan_decode_span``): decode steps that go on
        past finishes and, with ``joins``, take in arrivals the next step would
        admit whole (``Scheduler.span_admissions``, ``DecodeSpan.join``): that
        step is timed as a mixed one and the newcomers decode from the next on.
        Timed step by step (``CostModel.decode_clock``) up to the next send,
        where this replica wakes: the arrival either joined or ends the span at
        the end of the step in progress (as ``_decode_run``). Per-request state
        is applied once, at the end (``_span_done``)."""
        env = self.env
        ov = self.overheads
        clock = self.cost.decode_clock(span.contexts, span.lasts, start, ov.cpu_s, ov.overlap)
        joins = joins and rep.scheduler.spans_admit()
        ends = clock.ends
        clock.advance(span.k, self._next_send_s())
        if rep.num_recovering:  # back where they were when preempted, by step 1's end
            self._recovered(rep, span.scheduled, ends[0])
        rep.merging = True
        rep.run_ends = ends
        rep.run_joins = []
        try:
            while True:
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
        except self.Interrupt:  # (rare: steps are timed up to the next send) as _decode_run
            rep.merging = False
            now = env.now
            j = min(bisect_left(ends, now) + 1, len(ends))
            if span.joins and j < span.joins[-1][0]:  # a join's step was already under way
                j = span.joins[-1][0]
            if ends[j - 1] > now:
                yield env.timeout(ends[j - 1] - now)
        rep.merging = False
        self.num_events += 1
        self.num_steps += j
        rep.last_step_start = ends[j - 2] if j > 1 else start
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
        if not clock.can_join:
            raise RuntimeError("a queued span needs a cost model that times mixed steps")
        ends = clock.ends
        clock.advance(1)
        if rep.num_recovering:  # back where they were when preempted, by step 1's end
            self._recovered(rep, span.scheduled, ends[0])
        # Tokens are recorded as they come (a member may be preempted and resume inside the span).
        self._tokens_emitted(span.scheduled, start, ends[0], ends[0], ends[0])
        rep.merging = True
        rep.run_ends = ends
        rep.run_joins = []
        until = self._next_send_s()
        try:
            while True:
                m = len(ends)
                if ends[-1] >= until:  # the next send lands in step m: let it in first
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
        rep.merging = False
        self.num_events += 1
        self.num_steps += j
        rep.last_step_start = ends[j - 2] if j > 1 else start
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
        prompts = [r.num_prompt_tokens for r in reqs]
        clock.mixed([(p, 0) for p in prompts], list(zip(prompts, lasts)),
                    self.overheads.cpu_s(num_decoding + len(reqs), True))
        return True
