"""What a simulation records as it goes (a mixin of :class:`sim.engine.Simulation`):
per-request rows, first-token times and ITL gaps, completions, the end of
preemption-recompute intervals, and when the frontend has streamed a step's
tokens to the clients. Uses the state ``Simulation`` sets up (``req_cols``,
``itl``, ``reasons``, ``frontend_tok_s``) and ``Traffic._on_done``; ``rep`` is
a ``sim.engine._Replica``."""

from __future__ import annotations

from sim.metrics import STATUS_FINISHED, STATUS_REJECTED
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
    def _recovered(rep, scheduled: list[Request], now: float) -> None:
        """Close the preemption-recompute interval of requests that are back
        where they were when preempted (``preempted_ms`` in requests.csv)."""
        for req in scheduled:
            if req.preempted_time >= 0 and req.num_computed_tokens >= req.preempted_at_tokens:
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
