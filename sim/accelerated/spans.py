"""The accelerated stepping: merged steps on the engine, bit-identical to the
reference mode (:mod:`sim.engine.simulation`), chosen by the runner at
construction (``Simulation(..., stepping=AcceleratedStepping)``) unless
``exact_steps``.

Runs of identical decode steps (``decode_run``) and decode spans
(:mod:`sim.accelerated.decode_span`) time their steps with the cost model's
resumable clock (``CostModel.decode_clock``) and take SimPy events only where
the next request reaches the router, so a stretch of steps, finishes and
admissions costs no event of its own. It serves only the policies
:mod:`sim.accelerated.policies` names (a policy's acceleration is declared,
never inherited); any other runs in the reference mode. It reads the
simulation's traffic (next send times; on the only replica in open loop it
sends arrivals itself: ``Traffic.send_inline``) and records through its
:class:`~sim.engine.recording.Recorder`, as the reference mode's steps would.
``rep`` is a :class:`sim.engine.replica.Replica`.

With closed-loop clients of the only replica, overlap-scheduled (what
``servesim validate`` runs with the engine presets), lag spans (below) stop at
each step where requests finish and hand them to their clients there
(:class:`_ClientTurns`); the sends come back through the engine's events
(``Simulation.send``), timed ahead by ``Traffic.next_send_s``.

With overlap scheduling on the only replica in open loop (the engine presets'
default), spans see each arrival a step late, as the reference mode does
(:meth:`AcceleratedStepping._lag_span_run`): chunked-family policies admit it
in a mixed step or leave it queued behind a blocked head (``mixed``,
``guaranteed_no_evict``), and SGLang's prefill-first policy prefills it in a
step of its own between two decode steps of the span
(:mod:`sim.accelerated.prefill_span`).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from operator import sub

import numpy as np

from sim.accelerated.policies import decode_runs_for
from sim.cost_model import PY_RUN_MAX_STEPS
from sim.engine.simulation import Interrupt
from sim.results.metrics import diff_from, float64_array, float64_bytes, int64_array

_RUN_CHUNK = 16  # steps of a merged decode run timed first (most runs end sooner)


class AcceleratedStepping:
    """Merged steps for the replicas of ``sim`` (a
    :class:`~sim.engine.simulation.Simulation`); counts its own events and steps."""

    def __init__(self, sim) -> None:
        cfg = sim.dep.cfg
        self.env = sim.env
        self.cost = sim.cost
        self.overheads = sim.overheads
        self.traffic = sim.traffic
        self.rec = sim.recorder
        self.num_events = 0
        self.num_steps = 0
        self.runs = [decode_runs_for(rep.scheduler) for rep in sim.replicas]
        # A prefix-aware router reads other replicas' caches mid-run, where merged runs
        # hash their filled blocks only at the run's end: keep exact steps there.
        self.fast = not (cfg.enable_prefix_caching and cfg.router == "prefix_aware" and cfg.num_replicas > 1)
        lag = cfg.overlap_scheduling
        # Closed-loop clients of the only replica, overlap-scheduled: its lag spans stop
        # at each step where a request finishes, for its client's turn (``_lag_span_run``).
        self.closed = self.fast and lag and self.traffic.closed and len(self.traffic.replicas) == 1
        # Runs go on past finishes where nothing sees a finish before the run's end:
        # open loop (a finish sends nothing) and no load-aware router across replicas.
        self.span = self.fast and (self.closed or cfg.workload.max_concurrency is None and (
            cfg.num_replicas == 1 or cfg.router in ("round_robin", "random")))
        # Spans take in whole-prompt arrivals where no step adds per-step accounting (no
        # lag). Queued spans record tokens as they come: only where a step's tokens
        # reach the clients at its end (no frontend streaming).
        self.joins = self.span and not lag and not self.rec.track_unused and self.cost.decode_clock_joins
        self.queued = self.joins and self.rec.frontend_tok_s <= 0.0
        # Overlap scheduling on the only replica in open loop: spans see each arrival a
        # step late, as the reference mode does (``_lag_span_run``), joins included.
        self.lag = self.span and lag and (self.traffic.inline or self.closed)
        self.lag_joins = self.lag and not self.rec.track_unused and self.cost.decode_clock_joins
        self._lag_spans: set[int] = set()  # replicas inside a lag span (arrivals do not cut it)
        # the spans' decode clocks' per-batch-size terms (one host-time function: ``overheads.cpu_s``)
        self._clock_terms: dict[int, tuple] = {}

    # ------------------------------------------------------------------ engine hooks
    def merged(self, rep, out, ctx: list[int], start: float, flushed: bool = False):
        """A stretch of merged steps starting with ``out`` (just scheduled at
        ``start``), as a generator for the replica loop to run, or None: the
        reference mode's single step. ``flushed``: requests that reached the
        overlap-scheduled replica during its last step were queued after this
        ``schedule()`` (the next one sees them); then only a closed-loop lag
        span starts, which looks at the queue at its first step boundary, as
        the reference mode does (in closed loop a send lands in nearly every
        step of a large batch, so spans would otherwise seldom start)."""
        runs = self.runs[rep.index]
        if runs is None or not self.fast or (flushed and not self.closed):
            return None
        span = self.span
        if span and self.closed and not flushed and rep.scheduler.waiting:
            # a closed-loop queue behind a blocked head: a merged decode run goes further
            # (a lag span would mostly end at its first step boundary, each costing a plan)
            span = False
        plan = runs.plan_decode_span(out, self.queued, self.lag_joins) if span else None
        if plan is not None:
            if plan.queued:
                return self._queued_span_run(rep, plan, start)
            if rep.scheduler.waiting and not self.lag:  # (planned for a lag span only)
                raise RuntimeError("free-running span planned with requests waiting")
            if self.lag:
                return self._lag_span_run(rep, plan, start)
            return self._span_run(rep, plan, start, self.joins)
        if flushed:  # a merged run would not see the requests queued after its first step's schedule()
            return None
        k = runs.max_decode_run(out)
        return self._decode_run(rep, out, ctx, k, start) if k > 1 else None

    def arrival_may_change_schedule(self, rep) -> bool:
        """Could a request arriving now at ``rep`` (inside a merged stretch) change its next step?"""
        return self.runs[rep.index].arrival_may_change_schedule()

    def held_arrival(self, rep, req) -> None:
        """``req`` arrived at ``rep`` inside a merged stretch, while its next
        batch is already formed (overlap scheduling): counted as waiting from
        the next step on; the stretch ends with the step in progress if the
        arrival may change the schedule, or if it will be rejected (a rejection
        is not deferred past the next step's start: it frees a client in closed
        loop and lowers the load a router sees)."""
        if rep.index in self._lag_spans:  # the span takes it from rep.pending itself
            return
        rep.run_joins.append(self.env.now)
        if (self.runs[rep.index].arrival_may_change_schedule()
                or rep.scheduler.rejection(req) is not None):
            self.cut_run(rep)

    def cut_run(self, rep) -> None:
        """End the replica's merged decode run at the end of the step in
        progress. When that is the last step timed so far (the run was timed up
        to this arrival: ``Traffic.next_send_s``), the pending timeout already ends
        there and clearing ``merging`` says so; otherwise the run is interrupted."""
        rep.merging = False
        ends = rep.run_ends
        if len(ends) > 1 and ends[-2] >= self.env.now:
            rep.proc.interrupt()

    @staticmethod
    def _run_begins(rep, ends: list[float]) -> None:
        """A merged run starts: arrivals may cut it (:meth:`cut_run`)."""
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
            yield self.env.step_end(ends[j - 1], rep.index)
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
        that may change the schedule cuts the run (:meth:`cut_run`): it ends at the
        end of the step in progress, as the reference mode would let the
        scheduler see the arrival there. Steps are timed in chunks: in open loop
        up to the next send (``Traffic.next_send_s``; most runs end there), else the
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
            until = self.traffic.next_send_s()
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
                yield env.step_end(ends[-1], rep.index)
                m = len(ends)
                if m >= k or not rep.merging:  # all k steps, or cut by an arrival in the last one
                    break
                self.num_events += 1
                # a run that got this far often goes on: time the rest at once (numpy if long)
                ends += self.cost.decode_run_ends([c + m for c in ctx], k - m, ends[-1], cpu, overlap,
                                                  self.traffic.next_send_s())
            j = m
        except Interrupt:
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
        (``Traffic.send_inline``), without waking: an event only where it ends.
        Per-request state is applied once, at the end (``_span_done``)."""
        env = self.env
        ov = self.overheads
        traffic = self.traffic
        clock = self.cost.decode_clock(span.contexts, span.lasts, start, ov.cpu_s, ov.overlap, self._clock_terms)
        joins = joins and self.runs[rep.index].spans_admit()
        inline = joins and traffic.inline
        send_at = traffic.send_times  # (open loop: send_at[num_sent] is next_send_s())
        ends = clock.ends
        clock.advance(span.k, traffic.next_send_s())
        if rep.num_recovering:  # back where they were when preempted, by step 1's end
            self.rec.recovered(rep, span.scheduled, ends[0])
        self._run_begins(rep, ends)
        try:
            while True:
                m = len(ends)
                if (inline and m < span.k and traffic.num_arrived == traffic.num_sent
                        and send_at[traffic.num_sent] <= ends[-1]):
                    # The sends landing in step m, taken without events: this replica is
                    # the only process acting before that step's end (the arrivals
                    # process's pending wake finds its request taken).
                    traffic.send_inline(rep, ends[-1])
                    if self._join_span(rep, span, clock, m) or self._chunk_join(rep, span, clock, m):
                        until = send_at[traffic.num_sent]
                        m = len(ends)
                        if clock.end < until and m < span.k:
                            clock.advance(span.k - m, until)
                        continue
                    m = len(ends)  # (a chunked prefill cut short by a send: the span ends mid-prompt)
                    yield env.step_end(ends[-1], rep.index)  # they wait: the span ends with step m
                    break
                yield env.step_end(ends[-1], rep.index)
                m = len(ends)
                if m >= span.k:
                    break
                if rep.merging:
                    clock.advance(span.k - m, traffic.next_send_s())
                elif joins and self._join_span(rep, span, clock, m):
                    rep.merging = True
                    until = traffic.next_send_s()
                    if clock.end < until and m + 1 < span.k:  # nothing arrives during the mixed step
                        clock.advance(span.k - m - 1, until)
                else:  # the arrival changes the next step otherwise: single steps from here
                    break
                self.num_events += 1
            j = m
        except Interrupt:  # (rare: steps are timed up to the next send; a join's step stays)
            j = yield from self._interrupted(rep, ends, span.joins[-1][0] if span.joins else 1)
        self._run_ends(rep, ends, j, start)
        self._span_done(rep, span, ends, j, start)

    def _lag_span_run(self, rep, span, start: float):
        """A decode span on an overlap-scheduled replica, the only one in open
        loop. The reference mode forms step s + 1's batch when step s starts:
        a request landing in step s (reaching the router after step s − 1's end,
        at or before step s's end) is queued after step s + 1's ``schedule()``
        (counted waiting in that step's row) and seen by step s + 2's. The span
        takes the sends itself (``Traffic.send_inline``; one still in the
        frontend when the span began comes through ``Simulation.send`` into
        ``rep.pending`` while the span waits for that step's end), holds them
        for a step and queues them; then the step after either takes them in
        whole (``_join_span``, where the policy's admissions allow:
        ``spans_join``) or the span ends before it, with the requests that
        landed in its last step left in ``rep.pending`` for the engine loop,
        exactly where the reference mode has them. Closed loop: a request the
        engine loop rejected as the span began may have sent its client's next
        one at once (into ``rep.pending``): it landed in step 1. A request
        landing in step s that will be rejected (``Scheduler.rejection``: it
        never fits) ends the span at step s: its rejection, after step s + 1's
        ``schedule()``, is its client's turn at step s's end, which the engine
        loop takes as the reference mode does."""
        env = self.env
        ov = self.overheads
        traffic = self.traffic
        sched = rep.scheduler
        runs = self.runs[rep.index]
        clock = self.cost.decode_clock(span.contexts, span.lasts, start, ov.cpu_s, ov.overlap, self._clock_terms)
        pausing = self.lag_joins and span.prompt_blocks_after == 1  # prefill-only steps take arrivals in
        joins = self.lag_joins and not pausing and runs.spans_join()
        if joins and sched.limits.capacity_scheduler_policy == "guaranteed_no_evict":
            span.no_evict_h0 = sched._no_evict_available_blocks()
        ends = clock.ends
        held: list = []  # (send time, request) landed in the last step timed, not queued yet
        if rep.pending:  # closed loop: sent as the span began (a client whose request the engine
            held, rep.pending = rep.pending, []  # loop just rejected): landed in step 1
        marks = span.wait_marks  # (decode step, requests waiting in its row from there on)
        marks.append((1, len(sched.waiting)))
        lasts = list(span.lasts)  # members' last steps (a heap): where a blocked queue is looked at again
        heapq.heapify(lasts)
        turns = _ClientTurns(span, rep.frontend_done, self.rec.frontend_tok_s) if self.closed else None
        self._lag_spans.add(rep.index)
        clock.advance(1)
        if rep.num_recovering:  # back where they were when preempted, by step 1's end
            self.rec.recovered(rep, span.scheduled, ends[0])
        self._run_begins(rep, ends)
        try:
            while True:
                s = len(ends)  # decode steps timed; the next step is decided at the end of the last one
                if turns is not None and s > turns.folded:
                    done = turns.due(ends, span.pauses if pausing else (), s)
                    if done:  # their clients' turns, at step s's end (after its traffic)
                        if ends[-1] > env.now:
                            yield env.step_end(ends[-1], rep.index)
                            self.num_events += 1
                        on_done = self.rec.on_done
                        for req, seen in done:
                            on_done(req, seen - ends[-1])
                        held += rep.pending  # (sent at once: landed in step s)
                        rep.pending = []
                end = clock.end if pausing else ends[-1]  # (of a pause after step s, if any)
                if traffic.next_send_s() <= end:  # sends landing in step s
                    if traffic.inline and traffic.num_arrived == traffic.num_sent:
                        traffic.send_inline(rep, end, held)
                    else:  # one was in the frontend already: its event sends it
                        yield env.step_end(end, rep.index)
                        self.num_events += 1
                        held += rep.pending
                        rep.pending = []
                        continue  # (later sends of step s may be taken inline now)
                if turns is not None and any(sched.rejection(req) is not None for _, req in held):
                    # closed loop: its rejection after step s + 1's schedule() (at step s's
                    # end) is its client's turn; the span ends at step s, leaving it to the loop
                    break
                pause = None
                if sched.waiting:  # queued: step s + 1 admits them (whole), leaves them blocked, or the span ends
                    if pausing:
                        pause = self._pause_span(rep, span, clock, s)
                        if pause is None:
                            break
                    else:
                        if not joins or s >= span.k:
                            break
                        num_decoding = clock.batch_at_next()
                        headroom = span.no_evict_headroom(s + 1) if span.no_evict_h0 is not None else None
                        reqs = runs.span_admissions_blocked(
                            num_decoding, sched.limits.max_num_batched_tokens - num_decoding, span.room(s + 1),
                            headroom)
                        if reqs is None:
                            break
                        if reqs:
                            if not self._join_span(rep, span, clock, s, reqs):
                                break
                            for jn in span.joins[-len(reqs):]:
                                heapq.heappush(lasts, jn[2])
                            if turns is not None:
                                turns.joined(span.joins[-len(reqs):])
                        elif held:
                            clock.advance(1)
                        else:  # blocked until a finish: plain decode steps up to the next one (or send)
                            while lasts and lasts[0] <= s:
                                heapq.heappop(lasts)
                            clock.advance((lasts[0] if lasts else span.k) - s, traffic.next_send_s())
                elif s < span.k:
                    if held:
                        clock.advance(1)
                    else:  # nobody waits: plain decode steps up to the one the next send lands in
                        # (closed loop: or the next finish, where a client sends again)
                        n = span.k - s if turns is None else min(span.k, turns.next_finish()) - s
                        clock.advance(n, traffic.next_send_s())
                else:
                    break
                if held:  # queued after step s + 1's schedule
                    n = 0
                    for _, req in held:
                        if sched.add_request(req):
                            n += 1
                        else:
                            self.rec.rejected(rep, req)
                    held = []
                if pause is not None:
                    pause[6] = len(sched.waiting)
                    if turns is not None:
                        turns.joined(span.joins[-len(pause[3]):])
                elif len(sched.waiting) != marks[-1][1]:
                    marks.append((s + 1, len(sched.waiting)))
            j = len(ends)
            if held:  # landed in the span's last step: the engine loop queues them after the next schedule()
                rep.pending += held
            end = clock.end if pausing else ends[-1]
            if end > env.now:
                yield env.step_end(end, rep.index)
        finally:
            self._lag_spans.discard(rep.index)
        self._run_ends(rep, ends, j, start)
        if pausing:
            pauses = span.pauses
            self.num_steps += len(pauses)
            if pauses and pauses[-1][0] == j:  # the span's last step was a pause
                rep.last_step_start = pauses[-1][1]
            self._pause_span_done(rep, span, ends, j, start)
        else:
            self._span_done(rep, span, ends, j, start)

    def _pause_span(self, rep, span, clock, d: int) -> list | None:
        """SGLang's prefill-only step after decode step ``d`` of ``span`` (a
        ``PrefillFirstSpan``), if its prefill batch takes the whole waiting
        queue in (``PrefillFirstRuns.pause_admissions``): admits them, times
        the step as the engine does and returns its record (``span.pauses``);
        else None, nothing changed."""
        runs = self.runs[rep.index]
        got = runs.pause_admissions(span, d)
        if got is None:
            return None
        reqs, free, running = got
        if span.join(d, reqs) is None:
            return None
        p_start = clock.end
        new = [r.num_prompt_tokens for r in reqs]
        dt = self.overheads.apply(self.cost.step_time_s(new, [0] * len(new)), len(new), True)
        clock.pause(dt, [(p, jn[2]) for p, jn in zip(new, span.joins[-len(reqs):])])
        for req in reqs:
            req.first_scheduled_time = p_start
        n = sum(new)
        usage = rep.kv.usage_at(free)
        pause = [d, p_start, clock.end, reqs, n, running, 0, usage]  # (after the admissions)
        span.pauses.append(pause)
        return pause

    def _pause_span_done(self, rep, span, ends: list[float], j: int, start: float) -> None:
        """Record a ``PrefillFirstSpan`` (its first ``j`` decode steps ending at
        ``ends``, and its pauses) as the reference mode's single steps would:
        the frontend streams every step's tokens in step order, pauses
        included; a pause's requests get their first token at its end and
        their first ITL gap from there; rows per part of decode steps (as
        ``_span_done``) and one per pause."""
        rec = self.rec
        scheduled = span.scheduled
        pauses = span.pauses
        usage = span.usages(j)
        parts = span.apply(j)
        steps = int64_array(parts.steps)
        counts = diff_from(steps, 0)
        tok = rec.frontend_tok_s
        if tok > 0.0:  # Recorder.deliver's float operations, inlined (one per step)
            f = rep.frontend_done
            seen, pseen = [], []
            pi, np_ = 0, len(pauses)
            nxt = pauses[0][0] if pauses else 0
            i = 0
            for e, b in zip(ends, np.repeat(parts.tokens_emitted, counts).tolist()):
                f = (e if e > f else f) + tok * b
                seen.append(f)
                i += 1
                while i == nxt:
                    p = pauses[pi]
                    e = p[2]
                    f = (e if e > f else f) + tok * len(p[3])
                    pseen.append(f)
                    pi += 1
                    nxt = pauses[pi][0] if pi < np_ else 0
            rep.frontend_done = f
        else:
            seen, pseen = ends, [p[2] for p in pauses]
        last = ends[j - 1]
        rec.tokens_emitted(scheduled, start, ends[0], seen[0], last)
        itl_add = rec.itl.add
        for p, ps in zip(pauses, pseen):
            d, reqs = p[0], p[3]
            for req in reqs:
                req.first_token_time = ps
                req.last_token_time = last if d < j else p[2]
            if d < j:  # their first gap: from the pause's end to decode step d + 1's
                itl_add(ends[d] - p[2], float(len(reqs)))
        e = np.frombuffer(float64_bytes(ends[:j]))  # (read-only; a list's floats: faster than np.array)
        dts = diff_from(e, start)
        if j > 1:
            w = np.repeat(float64_array(parts.pooled), counts)[1:]
            keep = w > 0
            rec.itl.extend_arrays(dts[1:][keep], w[keep])
        rstart = np.concatenate(([start], e[:-1]))  # each decode step's start: after the pauses before it
        for p in pauses:
            if p[0] < j:
                rstart[p[0]] = p[2]
        dts = e - rstart
        end_t = e[steps - 1]
        lo = steps - counts
        start_t = rstart[lo]
        span_t = end_t - start_t
        first_u, last_u = usage[lo], usage[steps - 1]
        mean_u = np.where(first_u == last_u, first_u, np.add.reduceat(usage * dts, lo) / span_t)
        waits = _marked_waits(span.wait_marks, j)
        first_w, last_w = waits[lo], waits[steps - 1]
        mean_w = np.where(first_w == last_w, first_w, np.add.reduceat(waits * dts, lo) / span_t)
        decode = np.array(parts.decode, dtype=np.float64)
        rec.step_cols.extend_columns(len(steps), (rep.index, start_t, counts, span_t, parts.batch, last_w,
                                                  decode * counts, 0.0, decode * counts, last_u, 0.0, mean_u,
                                                  mean_w))
        for d, p_start, p_end, reqs, n, running, waiting, u in pauses:
            rec.step_cols.append((rep.index, p_start, 1, p_end - p_start, running, waiting, n, n, 0, u, 0,
                                  u, waiting))
        rec.finish_steps(rep, parts.finished, ends, seen, self.closed)

    def _queued_span_run(self, rep, span, start: float):
        """A queued decode span (requests waiting): each step is gated by the
        span (``QueuedSpan.gate``: exact free blocks, admissions, chunked
        prefills, preemptions) and timed as a decode or mixed step, without an
        event of its own; the replica wakes only at the step in which the next
        send lands (arrivals join the queue's tail), and the span ends before the
        first step it cannot take (the reference mode then steps on singly)."""
        env = self.env
        ov = self.overheads
        clock = self.cost.decode_clock(span.contexts, span.lasts, start, ov.cpu_s, ov.overlap, self._clock_terms)
        ends = clock.ends
        clock.advance(1)
        if rep.num_recovering:  # back where they were when preempted, by step 1's end
            self.rec.recovered(rep, span.scheduled, ends[0])
        # Tokens are recorded as they come (a member may be preempted and resume inside the span).
        self.rec.tokens_emitted(span.scheduled, start, ends[0], ends[0], ends[0])
        self._run_begins(rep, ends)
        until = self.traffic.next_send_s()
        inline = self.traffic.inline  # (queued spans exist only where the scheduler lets spans admit)
        try:
            while True:
                m = len(ends)
                if ends[-1] >= until:  # the next send lands in step m: let it in first
                    if inline and self.traffic.num_arrived == self.traffic.num_sent:  # sent here (see _span_run)
                        self.traffic.send_inline(rep, ends[-1])
                    else:
                        yield env.step_end(ends[-1], rep.index)
                        self.num_events += 1
                        rep.merging = True  # (an arrival to an empty queue cuts: it is simply seen next)
                    until = self.traffic.next_send_s()
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
                    self.rec.preempted(rep, [req for req, _ in g.preempted], step_start)
                for req in g.admitted:
                    if req.first_scheduled_time < 0:
                        req.first_scheduled_time = step_start
                if g.chunks:
                    clock.mixed(g.chunks, g.clock_joins,
                                ov.cpu_s(clock.batch_at_next() + len(g.chunks), g.num_prefill_tokens > 0))
                    for req in g.caught_up:  # back where it was when preempted
                        self.rec.close_recompute(rep, req, ends[m])
                    if g.completed:
                        self.rec.joined(g.completed, ends[m])
                else:
                    clock.advance(1)
            if ends[-1] > env.now:
                yield env.step_end(ends[-1], rep.index)
            j = len(ends)
        except Interrupt:  # not expected: steps are never timed past the next send
            raise RuntimeError("queued decode span interrupted") from None
        self._run_ends(rep, ends, j, start)
        self._span_done(rep, span, ends, j, start)

    def _join_span(self, rep, span, clock, m: int, reqs: list | None = None) -> bool:
        """Admit the waiting arrivals into the span at step m + 1 and time that
        step, if the scheduler would admit them all whole there and their blocks
        fit (else False, nothing changed); ``reqs``: those admitted, as the
        caller found (the queue's head)."""
        sched = rep.scheduler
        num_decoding = clock.batch_at_next()
        if reqs is not None:
            return self._join_reqs(span, clock, m, num_decoding, reqs)
        runs = self.runs[rep.index]
        headroom = None
        if span.no_evict_h0 is not None:  # TensorRT-LLM's admission headroom at step m + 1
            headroom = span.no_evict_headroom(m + 1)
        got = runs.span_admissions(num_decoding, sched.limits.max_num_batched_tokens - num_decoding,
                                   None, headroom)  # (positional: once per request)
        if not got or not got[0]:
            return False
        return self._join_reqs(span, clock, m, num_decoding, got[0])

    def _chunk_join(self, rep, span, clock, m: int) -> bool:
        """Admit the only waiting arrival at step m + 1 with a first prefill
        chunk cut by the token budget (``span_chunk_admission``), if its blocks
        to completion fit (``DecodeSpan.join_chunked``), and time its chunk
        steps as mixed ones (``DecodeClock.mixed``) until its prompt is
        complete: True. Each next chunk is what the running pass gives it (the
        budget less the decodes before it, here every decode); arrivals landing
        in a chunk's step go to the next step's waiting pass, which the span
        takes only where that step completes the prompt and admits them all
        whole (``span_admissions``, as ``_join_span``): they join with it.
        Else False: nothing changed, or the span ends after the last chunk
        timed, the request mid-prompt and the arrivals waiting, where the
        engine loop goes on as the reference mode would. Only where the span
        sends the arrivals itself (``Traffic.send_inline``): no step is timed
        past the next send."""
        runs = self.runs[rep.index]
        sched = rep.scheduler
        budget = sched.limits.max_num_batched_tokens
        num_decoding = clock.batch_at_next()
        got = runs.span_chunk_admission(num_decoding, budget - num_decoding)
        if got is None or span.no_evict_h0 is not None:
            return False
        req, n = got
        if not span.join_chunked(m + 1, req, n):
            return False
        req.first_scheduled_time = clock.ends[m - 1]
        ov, traffic = self.overheads, self.traffic
        send_at = traffic.send_times
        clock.mixed([(n, 0)], [], ov.cpu_s(num_decoding + 1, True))
        done, p = n, req.num_prompt_tokens
        while True:
            s = len(clock.ends) + 1  # the next step: the decodes, the next chunk, the waiting pass
            if send_at[traffic.num_sent] <= clock.ends[-1]:  # sends landing in the chunk's step
                traffic.send_inline(rep, clock.ends[-1])
            num_decoding = clock.batch_at_next()
            n = min(p - done, budget - num_decoding)
            reqs: list = []
            lasts: list[int] = []
            if sched.waiting:
                if done + n < p:  # the chunk takes the whole budget: they wait
                    return False
                got = runs.span_admissions(num_decoding + 1, budget - num_decoding - n, None, None)
                if not got or not got[0]:
                    return False
                reqs = got[0]
                lasts = span.join(s, reqs)
                if lasts is None:
                    return False
                for r in reqs:
                    r.first_scheduled_time = clock.ends[-1]
            last = span.chunk_more(s, n)
            prompts = [r.num_prompt_tokens for r in reqs]
            clock.mixed([(n, done)] + [(q, 0) for q in prompts],
                        ([] if last is None else [(p, last)]) + list(zip(prompts, lasts)),
                        ov.cpu_s(num_decoding + 1 + len(reqs), True))
            if last is not None:
                return True
            done += n

    def _join_reqs(self, span, clock, m: int, num_decoding: int, reqs: list) -> bool:
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

    def _run_done(self, rep, out, ends: list[float], j: int, start: float, num_waiting: int) -> None:
        """Record a merged run of an unchanged batch (its first ``j`` steps
        ending at ``ends``): step 1 as a normal step (gaps since each
        request's last token), then j - 1 pooled steps, its merged step row
        (usage and queue at its last step, and their time averages) and the
        requests finishing at its end, as the reference mode's single steps would."""
        scheduled = out.scheduled
        B = len(scheduled)
        end = ends[j - 1]
        first_end = ends[0]
        if self.rec.track_unused:  # each step's reserved-but-unused fraction × its time, as single steps add them
            t = start
            for frac, e in zip(rep.kv.reserved_unused_fractions(scheduled, j), ends):
                rep.unused_integral += frac * (e - t)
                t = e
        if self.rec.frontend_tok_s > 0.0:
            seen = first_seen = self.rec.deliver(rep, first_end, B)
            for i in range(1, j):  # the frontend streams each step's tokens in turn
                seen = self.rec.deliver(rep, ends[i], B)
        else:
            seen, first_seen = end, first_end
        self.rec.tokens_emitted(scheduled, start, first_end, first_seen, end)
        if rep.num_recovering:
            self.rec.recovered(rep, scheduled, first_end)
        if j > 1:
            self.rec.itl.extend(list(map(sub, ends[1:j], ends[:j - 1])), B)  # gaps between step ends
        runs = self.runs[rep.index]
        usages = runs.decode_run_usages(out, j)
        waits = _waiting_per_step(num_waiting, rep.run_joins, ends, j, start)
        finished, usage = runs.apply_decode_run(out, j)
        self.rec.step_cols.append((rep.index, start, j, end - start, B, waits[-1], B * j, 0, B * j, usage, 0,
                               _time_average(usages, ends, 0, j, start), _time_average(waits, ends, 0, j, start)))
        self.rec.finish(rep, finished, end, seen)

    def _span_done(self, rep, span, ends: list[float], j: int, start: float) -> None:
        """Record a decode span (``sim.accelerated.decode_span``; its first ``j``
        steps ending at ``ends``) as the reference mode's single steps would:
        step 1's tokens, the joining requests' first tokens (a queued span's
        engine loop records these, resumes and preemptions as they come), and per part (steps
        with an unchanged batch; a join step is one) its pooled gaps, its merged
        step row and its finished requests. Rows and gaps are built with numpy,
        per span. (Contiguous KV, whose unused
        reservation is tracked, never spans: its tables do not grow by block.)"""
        scheduled = span.scheduled
        first_end = ends[0]
        usage = span.usages(j)
        parts = span.apply(j)
        steps = int64_array(parts.steps)
        counts = diff_from(steps, 0)  # steps per part
        tok = self.rec.frontend_tok_s
        if tok > 0.0:  # the frontend streams each step's tokens in turn (Recorder.deliver, inlined)
            f = rep.frontend_done
            seen = []
            append = seen.append
            for e, b in zip(ends, np.repeat(parts.tokens_emitted, counts).tolist()):
                f = (e if e > f else f) + tok * b
                append(f)
            rep.frontend_done = f
        else:
            seen = ends
        last = ends[j - 1]
        if span.queued:  # step 1's tokens, joins and preemptions were recorded as they came
            for req in parts.running:
                req.last_token_time = last
        else:  # nobody was preempted or resumed: only new requests joined
            self.rec.tokens_emitted(scheduled, start, first_end, seen[0], last)
            for step, req, _, _, _ in span.joins:
                req.first_token_time = seen[step - 1]
                req.last_token_time = last
        e = np.frombuffer(float64_bytes(ends[:j]))  # (read-only; a list's floats: faster than np.array)
        dts = diff_from(e, start)
        if j > 1:  # gaps between step ends (step 1's are recorded above), weighted by the decodes
            w = np.repeat(float64_array(parts.pooled), counts)[1:]
            keep = w > 0  # (a step of prefill chunks only pools nothing)
            self.rec.itl.extend_arrays(dts[1:][keep], w[keep])
        end_t = e[steps - 1]
        start_t = np.concatenate(([start], end_t[:-1]))
        lo = steps - counts  # first step of each part, 0-based
        span_t = end_t - start_t
        first_u, last_u = usage[lo], usage[steps - 1]
        mean_u = np.where(first_u == last_u, first_u,  # constant in the part: exactly it
                          np.add.reduceat(usage * dts, lo) / span_t)
        if span.queued:  # requests wait (the queue only shrinks by admissions: join steps)
            waits = float64_array(span.waits[:j])
            first_w, last_w = waits[lo], waits[steps - 1]
            mean_w = np.where(first_w == last_w, first_w, np.add.reduceat(waits * dts, lo) / span_t)
        elif span.wait_marks:  # a lag span: requests queued (overlap scheduling)
            waits = _marked_waits(span.wait_marks, j)
            first_w, last_w = waits[lo], waits[steps - 1]
            mean_w = np.where(first_w == last_w, first_w, np.add.reduceat(waits * dts, lo) / span_t)
        else:
            last_w = mean_w = np.zeros(len(steps))
        decode = float64_array(parts.decode)
        prefill = float64_array(parts.prefill)
        self.rec.step_cols.extend_columns(len(steps), (rep.index, start_t, counts, span_t, float64_array(parts.batch),
                                                       last_w, decode * counts + prefill, prefill, decode * counts,
                                                       last_u, float64_array(parts.preempted), mean_u, mean_w))
        self.rec.finish_steps(rep, parts.finished, ends, seen, self.closed)

class _ClientTurns:
    """Closed-loop clients inside a lag span (``AcceleratedStepping._lag_span_run``,
    ``closed``): a client sends its next request when its previous one
    finished and the frontend streamed the last token (plus its think time:
    ``Traffic.on_done``), so a finish inside the span must reach its client at
    its step's end, where the reference mode's ``step_done`` tells it, in the
    same order (requests in running-list order: step 1's members, then the
    joins). The span stops at every step where requests finish
    (:meth:`next_finish`) and hands them over (:meth:`due`) with the time the
    frontend delivers that step's tokens: the frontend's FIFO (``Recorder.deliver``)
    folded step by step — decode steps and the pauses between them, with the
    same float operations as the span's records (``_span_done``,
    ``_pause_span_done``), which recompute it at the end."""

    def __init__(self, span, frontend_done: float, tok: float) -> None:
        self.fin = [(f, i, r) for i, (r, f) in enumerate(zip(span.scheduled, span.lasts))]
        heapq.heapify(self.fin)  # (last step, running-list position, request)
        self.next_id = len(self.fin)
        self.alive = len(self.fin)  # requests emitting a token in the next decode step to fold
        self.folded = 0  # decode steps folded into the frontend so far
        self.paused = 0  # pauses folded so far
        self.f = frontend_done
        self.tok = tok

    def joined(self, joins: list[list]) -> None:
        """``span.joins`` entries just added: they decode from the next decode step on."""
        for jn in joins:
            heapq.heappush(self.fin, (jn[2], self.next_id, jn[1]))
            self.next_id += 1
        self.alive += len(joins)

    def next_finish(self) -> int:
        """The next step at which a request finishes (a large number if none)."""
        return self.fin[0][0] if self.fin else 1 << 62

    def due(self, ends: list[float], pauses, s: int) -> list[tuple]:
        """Fold the decode steps up to ``s`` (and the pauses before them) into
        the frontend; returns (request, when the client sees its last token)
        of those finishing at step ``s`` (none may finish before: the span
        stops at each finish)."""
        fin, tok = self.fin, self.tok
        f = self.f
        done = []
        for i in range(self.folded + 1, s + 1):
            while self.paused < len(pauses) and pauses[self.paused][0] == i - 1:  # after step i - 1
                p = pauses[self.paused]
                if tok > 0.0:
                    e = p[2]
                    f = (e if e > f else f) + tok * len(p[3])
                self.paused += 1
            e = ends[i - 1]
            if tok > 0.0:
                f = (e if e > f else f) + tok * self.alive
            while fin and fin[0][0] <= i:
                last, _, req = heapq.heappop(fin)
                if last != s:
                    raise RuntimeError(f"closed-loop span: request {req.request_id} finished at step {last} "
                                       f"unseen (step {s} reached)")
                done.append((req, f if tok > 0.0 else e))
        self.alive -= len(done)  # (after step s: its finishes leave the batch)
        self.f = f
        self.folded = s
        return done


def _marked_waits(marks: list[tuple[int, int]], j: int) -> np.ndarray:
    """Requests waiting in each of a span's first ``j`` step rows, from its
    marks (step, count from that step on), float64."""
    waits = np.zeros(j, dtype=np.float64)
    for i, (step, n) in enumerate(marks):
        if step > j:
            break
        stop = marks[i + 1][0] if i + 1 < len(marks) else j + 1
        waits[step - 1:min(stop, j + 1) - 1] = n
    return waits


def _waiting_per_step(first: int, joins: list[float], ends: list[float], j: int, start: float) -> list[int]:
    """Requests waiting at each of a merged run's ``j`` steps (``num_waiting_reqs``
    as single steps record it): ``first`` at step 1, plus those that joined the
    queue (at times ``joins``, ascending) by the time each later step started
    (traffic comes first at a tie: ``sim.engine.simulation.Environment``)."""
    if not joins:
        return [first] * j
    return [first] + [first + bisect_right(joins, ends[i - 1]) for i in range(1, j)]


def _time_average(values: list[float], ends: list[float], lo: int, hi: int, start: float) -> float:
    """Time average of ``values[lo:hi]`` over steps ``lo``..``hi − 1`` of a
    run (step i lasts ``ends[i] − ends[i − 1]``; step ``lo`` starts at ``start``)."""
    if values[lo] == values[hi - 1]:  # usage and the queue only grow inside a part: constant there
        return values[lo]
    total = 0.0
    t = start
    for i in range(lo, hi):
        e = ends[i]
        total += values[i] * (e - t)
        t = e
    return total / (t - start) if t > start else values[hi - 1]
