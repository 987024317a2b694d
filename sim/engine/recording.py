"""What a simulation records as it goes (a mixin of :class:`sim.engine.simulation.Simulation`):
per-request rows, first-token times and ITL gaps, completions, the end of
preemption-recompute intervals, when the frontend has streamed a step's
tokens to the clients, and a merged decode run's rows once it has run. Uses
the state ``Simulation`` sets up (``req_cols``, ``step_cols``, ``itl``,
``reasons``, ``frontend_tok_s``, ``track_unused``) and ``Traffic._on_done``;
``rep`` is a ``sim.engine.simulation._Replica``."""

from __future__ import annotations

from bisect import bisect_left
from operator import sub

import numpy as np

from sim.results.metrics import STATUS_FINISHED, STATUS_REJECTED
from sim.request import Request, RequestStatus


class Outputs:
    """Recording of tokens, completions and request rows."""

    def _deliver(self, rep, now: float, num_tokens: int) -> float:
        """When the tokens a step emitted at ``now`` reach the clients: the
        frontend streams ``frontend_token_s`` per token, one step's batch after
        the other (a single-threaded FIFO: detokenize, serialize, send)."""
        if self.frontend_tok_s <= 0.0:
            return now
        f = rep.frontend_done
        rep.frontend_done = (now if now > f else f) + self.frontend_tok_s * num_tokens
        return rep.frontend_done

    def _record(self, req: Request) -> None:
        rejected = req.status == RequestStatus.REJECTED
        if rejected:
            self.reasons[req.request_id] = req.reason
        self.req_cols.append((
            req.request_id, req.replica, req.arrival_time, req.first_scheduled_time, req.first_token_time,
            req.finish_time, req.num_prompt_tokens, req.num_output_tokens, req.max_tokens,
            req.num_cached_tokens, req.num_preemptions, req.preempted_s, req.is_warmup,
            STATUS_REJECTED if rejected else STATUS_FINISHED,
        ))

    @staticmethod
    def _preempted(rep, preempted, now: float) -> None:
        """Open the preemption-recompute interval of requests preempted at
        ``now`` (one still recomputing from an earlier preemption keeps its own)."""
        for req in preempted:
            if req.preempted_time < 0:
                req.preempted_time = now
                rep.num_recovering += 1

    @staticmethod
    def _recovered(rep, scheduled: list[Request], now: float) -> None:
        """Close the preemption-recompute interval of requests that are back
        where they were when preempted (``preempted_ms`` in requests.csv)."""
        for req in scheduled:
            if req.preempted_time >= 0 and req.num_computed_tokens >= req.preempted_at_tokens:
                Outputs._close_recompute(rep, req, now)

    @staticmethod
    def _close_recompute(rep, req: Request, now: float) -> None:
        """End ``req``'s preemption-recompute interval at ``now`` (if open)."""
        if req.preempted_time >= 0:
            req.preempted_s += now - req.preempted_time
            req.preempted_time = -1.0
            rep.num_recovering -= 1

    def _tokens_emitted(self, emitted: list[Request], start: float, now: float, seen: float,
                        last: float) -> None:
        """First-token times (as the client sees them: ``seen``) and ITL gaps
        (engine side) of one step ending at ``now``. Gaps equal to the step (the
        token before came at the step's start) are pooled in one weighted
        sample; nothing is stored per token. ``last``: the time of each
        request's latest token afterwards (``now``, or a merged run's end)."""
        same_gap = 0
        itl_add = self.itl.add
        for req in emitted:
            prev = req.last_token_time
            if prev == start:  # the common case first (a first token has prev = -1 < start)
                same_gap += 1
            elif req.first_token_time < 0:
                req.first_token_time = seen
            else:
                itl_add(now - prev, 1.0)
            req.last_token_time = last
        if same_gap:
            itl_add(now - start, same_gap)

    def _rejected(self, rep, req: Request) -> None:
        """``req`` was rejected on arrival at ``rep`` (its reason in ``req.reason``):
        recorded and done, no longer in flight."""
        rep.outstanding -= 1
        self._record(req)
        self._on_done(req)

    def _finish(self, rep, finished: list[Request], now: float, seen: float) -> None:
        """Engine-side completion at ``now`` (KV freed); the client sees the
        last token at ``seen`` and sends its next request from then on."""
        for req in finished:
            req.finish_time = seen
            rep.outstanding -= 1
            self._record(req)
            self._on_done(req, seen - now)
        if finished:
            # Recorded in the columns: drop the scheduler's references so a long
            # run does not keep every Request object alive (memory O(running)).
            rep.scheduler.finished.clear()

    def _joined(self, completed: list[tuple[Request, bool]], end: float) -> None:
        """Requests whose prefill a span completed at the step ending at
        ``end`` (request, resumed after a preemption): a new one's first token;
        a resumed one's token is an ITL gap since its last token before the
        preemption (its recompute interval was closed by ``_recovered``)."""
        for req, again in completed:
            if again:
                self.itl.add(end - req.last_token_time, 1.0)
            else:
                req.first_token_time = end

    def _run_done(self, rep, out, ends: list[float], j: int, start: float, num_waiting: int) -> None:
        """Record a merged run of an unchanged batch (its first ``j`` steps
        ending at ``ends``): step 1 as a normal step (gaps since each
        request's last token), then j - 1 pooled steps, its merged step row
        (usage and queue at its last step, and their time averages) and the
        requests finishing at its end, as the reference mode's single steps would."""
        sched = rep.scheduler
        scheduled = out.scheduled
        B = len(scheduled)
        end = ends[j - 1]
        first_end = ends[0]
        if self.track_unused:  # each step's reserved-but-unused fraction × its time, as single steps add them
            t = start
            for frac, e in zip(rep.kv.reserved_unused_fractions(scheduled, j), ends):
                rep.unused_integral += frac * (e - t)
                t = e
        if self.frontend_tok_s > 0.0:
            seen = first_seen = self._deliver(rep, first_end, B)
            for i in range(1, j):  # the frontend streams each step's tokens in turn
                seen = self._deliver(rep, ends[i], B)
        else:
            seen, first_seen = end, first_end
        self._tokens_emitted(scheduled, start, first_end, first_seen, end)
        if rep.num_recovering:
            self._recovered(rep, scheduled, first_end)
        if j > 1:
            self.itl.extend(list(map(sub, ends[1:j], ends[:j - 1])), B)  # gaps between step ends
        usages = sched.decode_run_usages(out, j)
        waits = _waiting_per_step(num_waiting, rep.run_joins, ends, j, start)
        finished, usage = sched.apply_decode_run(out, j)
        self.step_cols.append((rep.index, start, j, end - start, B, waits[-1], B * j, 0, B * j, usage, 0,
                               _time_average(usages, ends, 0, j, start), _time_average(waits, ends, 0, j, start)))
        self._finish(rep, finished, end, seen)

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
        steps = np.array(parts.steps, dtype=np.int64)
        counts = np.diff(steps, prepend=0)  # steps per part
        if self.frontend_tok_s > 0.0:  # the frontend streams each step's tokens in turn
            deliver = self._deliver
            seen = [deliver(rep, e, b) for e, b in zip(ends, np.repeat(parts.batch, counts).tolist())]
        else:
            seen = ends
        last = ends[j - 1]
        if span.queued:  # step 1's tokens, joins and preemptions were recorded as they came
            for req in parts.running:
                req.last_token_time = last
        else:  # nobody was preempted or resumed: only new requests joined
            self._tokens_emitted(scheduled, start, first_end, seen[0], last)
            for step, req, _, _, _ in span.joins:
                req.first_token_time = seen[step - 1]
                req.last_token_time = last
        e = np.array(ends[:j])
        dts = np.diff(e, prepend=start)
        if j > 1:  # gaps between step ends (step 1's are recorded above), weighted by the decodes
            w = np.repeat(np.array(parts.pooled, dtype=np.float64), counts)[1:]
            keep = w > 0  # (a step of prefill chunks only pools nothing)
            self.itl.extend_arrays(dts[1:][keep], w[keep])
        end_t = e[steps - 1]
        start_t = np.concatenate(([start], end_t[:-1]))
        lo = steps - counts  # first step of each part, 0-based
        span_t = end_t - start_t
        first_u, last_u = usage[lo], usage[steps - 1]
        mean_u = np.where(first_u == last_u, first_u,  # constant in the part: exactly it
                          np.add.reduceat(usage * dts, lo) / span_t)
        if span.queued:  # requests wait (the queue only shrinks by admissions: join steps)
            waits = np.array(span.waits[:j], dtype=np.float64)
            first_w, last_w = waits[lo], waits[steps - 1]
            mean_w = np.where(first_w == last_w, first_w, np.add.reduceat(waits * dts, lo) / span_t)
        else:
            last_w = mean_w = np.zeros(len(steps))
        decode = np.array(parts.decode, dtype=np.float64)
        prefill = np.array(parts.prefill, dtype=np.float64)
        rows = np.column_stack((np.full(len(steps), float(rep.index)), start_t, counts, span_t,
                                parts.batch, last_w, decode * counts + prefill, prefill, decode * counts,
                                last_u, parts.preempted, mean_u, mean_w))
        self.step_cols.extend_rows(rows)
        for step, fin in parts.finished:
            self._finish(rep, fin, ends[step - 1], seen[step - 1])

def _waiting_per_step(first: int, joins: list[float], ends: list[float], j: int, start: float) -> list[int]:
    """Requests waiting at each of a merged run's ``j`` steps (``num_waiting_reqs``
    as single steps record it): ``first`` at step 1, plus those that joined the
    queue (at times ``joins``, ascending) before each later step started."""
    if not joins:
        return [first] * j
    return [first] + [first + bisect_left(joins, ends[i - 1]) for i in range(1, j)]


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
