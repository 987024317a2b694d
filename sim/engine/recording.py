"""What a simulation records as it goes: per-request rows, per-step rows,
first-token times and ITL gaps, completions, the end of preemption-recompute
intervals, and when the frontend has streamed a step's tokens to the clients.

One :class:`Recorder` per run; the engine and the accelerated stepping both
record through it, so a new per-request or per-step column is one edit in
:mod:`sim.results.metrics` (``REQUEST_COLUMNS`` / ``STEP_COLUMNS``) and one
here. ``rep`` is a :class:`sim.engine.replica.Replica`."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter

from sim.presets import get_preset
from sim.request import Request, RequestStatus
from sim.results.metrics import (REQUEST_COLUMNS, STATUS_FINISHED, STATUS_REJECTED, STEP_COLUMNS,
                                 Columns, WeightedSamples)

#: The ``Request`` attribute of each ``REQUEST_COLUMNS`` entry but the last
#: (``status``: finished or rejected), read in one C-level call per request.
_REQUEST_FIELDS = ("request_id", "replica", "arrival_time", "first_scheduled_time", "first_token_time",
                   "finish_time", "num_prompt_tokens", "num_output_tokens", "max_tokens", "num_cached_tokens",
                   "num_preemptions", "preempted_s", "is_warmup", "priority")
if len(_REQUEST_FIELDS) + 1 != len(REQUEST_COLUMNS) or REQUEST_COLUMNS[-1] != "status":
    raise RuntimeError("recording: _REQUEST_FIELDS must name every REQUEST_COLUMNS entry but status, in order")
_request_row = attrgetter(*_REQUEST_FIELDS)


def streamed_token_s(cfg) -> float:
    """The frontend FIFO's time per streamed output token (s) of ``cfg``: its
    ``frontend_token_s`` where the engine's frontend handles every token
    (a preset whose ``frontend_token_unit`` is ``token``; none of the built-in
    ones), else (``message``: vLLM, SGLang, TensorRT-LLM; no engine) the time
    of one message spread over the
    ``stream_interval`` tokens it carries, over ``num_postprocess_workers``
    processes working in parallel (TensorRT-LLM; 0 = none, the proxy alone):
    ``frontend_token_s / (stream_interval x max(1, num_postprocess_workers))``.

    The mean message rate, not each message: with interval N a request's first
    token is sent at once, then every N-th (SGLang and vLLM: tokens 1, N + 1,
    2N + 1, ...; TensorRT-LLM: 1, N, 2N, ...) and its last at its finish, so
    over its life its messages carry N tokens each on average; the FIFO is
    charged that average per token, step by step (the per-step batch counts
    the reference and the accelerated stepping already pass, so both stay
    bit-identical). Which request's message a step carries is not tracked:
    a step's first tokens cost the mean, not a whole message each.
    ``frontend_token_s`` was fitted with N = 1 (the aiconfigurator harness
    sets no interval), one message per token: the same cost per message."""
    tok = cfg.frontend_token_s
    if tok <= 0.0:
        return tok
    unit = "message" if cfg.engine is None else get_preset(cfg.engine).frontend_token_unit.value
    if unit == "token":
        return tok
    div = cfg.stream_interval * max(1, cfg.num_postprocess_workers)
    return tok if div == 1 else tok / div


class Recorder:
    """The run's records: ``req_cols`` (one row per request), ``step_cols``
    (one row per engine step or merged run), ``itl`` (weighted ITL gaps) and
    ``reasons`` (request id -> why it was rejected). ``frontend_token_s``: the
    frontend's streaming time per token (:func:`streamed_token_s`); ``track_unused``: integrate the
    reserved-but-unused KV fraction (contiguous allocation). ``on_done(req,
    delay)`` is told of each request done (finished or rejected), in order:
    the traffic side's clients send their next request from there."""

    def __init__(self, frontend_token_s: float, track_unused: bool) -> None:
        self.req_cols = Columns(REQUEST_COLUMNS)
        self.step_cols = Columns(STEP_COLUMNS)
        self.itl = WeightedSamples()
        self.reasons: dict[int, str] = {}
        self.frontend_tok_s = frontend_token_s
        self.track_unused = track_unused
        self.on_done: Callable[..., None] = lambda req, delay=0.0: None
        #: where the traffic side needs only the number of finishes (open loop, no
        #: gate, no progress): told once per merged stretch's step (``finish_steps``)
        self.count_done: Callable[[int], None] | None = None

    def deliver(self, rep, now: float, num_tokens: int) -> float:
        """When the tokens a step emitted at ``now`` reach the clients: the
        frontend streams ``frontend_token_s`` per token, one step's batch after
        the other (a single-threaded FIFO: detokenize, serialize, send)."""
        if self.frontend_tok_s <= 0.0:
            return now
        f = rep.frontend_done
        rep.frontend_done = (now if now > f else f) + self.frontend_tok_s * num_tokens
        return rep.frontend_done

    def step_started(self, rep, out, start: float) -> None:
        """A step of ``rep`` starts at ``start`` with scheduler output ``out``:
        its preemptions open their recompute intervals, its first-time
        admissions are stamped scheduled."""
        if out.preempted:
            self.preempted(rep, out.preempted, start)
        for req in out.admitted:
            if req.first_scheduled_time < 0:
                req.first_scheduled_time = start

    def step(self, rep, start: float, dt: float, out) -> None:
        """The ``steps.csv`` row of one engine step of ``rep`` (scheduler output
        ``out``, starting at ``start``, lasting ``dt``): the queue and KV usage
        after its admissions, and the reserved-but-unused KV it held."""
        sched, kv = rep.scheduler, rep.kv
        usage = kv.usage
        self.step_cols.append((rep.index, start, 1, dt, sched.num_running, sched.num_waiting,
                               out.num_batched_tokens, out.num_prefill_tokens, out.num_decode_tokens,
                               usage, len(out.preempted), usage, sched.num_waiting))
        if self.track_unused:
            rep.unused_integral += kv.reserved_unused_fraction * dt

    def step_done(self, rep, out, start: float, now: float, finish) -> None:
        """The step of ``rep`` that started at ``start`` ended at ``now``: its
        scheduler takes the output, the emitted tokens go out through the
        frontend, and ``finish`` (the recorder's, or a pool's hand-over) gets
        the requests that finished."""
        emitted, finished = rep.scheduler.update_from_output(out)
        seen = self.deliver(rep, now, len(emitted))
        self.tokens_emitted(emitted, start, now, seen, now)
        if rep.num_recovering:
            self.recovered(rep, out.scheduled, now)
        finish(rep, finished, now, seen)

    def record(self, req: Request) -> None:
        cols = self.req_cols
        if req.status == RequestStatus.REJECTED:
            self.reasons[req.request_id] = req.reason
            cols.flat.frombytes(cols.pack_row(*_request_row(req), STATUS_REJECTED))
        else:
            cols.flat.frombytes(cols.pack_row(*_request_row(req), STATUS_FINISHED))

    @staticmethod
    def preempted(rep, preempted, now: float) -> None:
        """Open the preemption-recompute interval of requests preempted at
        ``now`` (one still recomputing from an earlier preemption keeps its own)."""
        for req in preempted:
            if req.preempted_time < 0:
                req.preempted_time = now
                rep.num_recovering += 1

    @staticmethod
    def recovered(rep, scheduled: list[Request], now: float) -> None:
        """Close the preemption-recompute interval of requests that are back
        where they were when preempted (``preempted_ms`` in requests.csv)."""
        for req in scheduled:
            if req.preempted_time >= 0 and req.num_computed_tokens >= req.preempted_at_tokens:
                Recorder.close_recompute(rep, req, now)

    @staticmethod
    def close_recompute(rep, req: Request, now: float) -> None:
        """End ``req``'s preemption-recompute interval at ``now`` (if open)."""
        if req.preempted_time >= 0:
            req.preempted_s += now - req.preempted_time
            req.preempted_time = -1.0
            rep.num_recovering -= 1

    def tokens_emitted(self, emitted: list[Request], start: float, now: float, seen: float,
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

    def rejected(self, rep, req: Request) -> None:
        """``req`` was rejected on arrival at ``rep`` (its reason in ``req.reason``):
        recorded and done, no longer in flight."""
        rep.outstanding -= 1
        self.record(req)
        self.on_done(req)

    def finish(self, rep, finished: list[Request], now: float, seen: float) -> None:
        """Engine-side completion at ``now`` (KV freed); the client sees the
        last token at ``seen`` and sends its next request from then on."""
        for req in finished:
            req.finish_time = seen
            rep.outstanding -= 1
            self.record(req)
            self.on_done(req, seen - now)
        if finished:
            # Recorded in the columns: drop the scheduler's references so a long
            # run does not keep every Request object alive (memory O(running)).
            rep.scheduler.finished.clear()

    def finish_steps(self, rep, finished: list[tuple[int, list[Request]]], ends: list[float],
                     seen: list[float], notified: bool = False) -> None:
        """:meth:`finish` for the steps of a merged stretch: ``finished`` holds
        (step, requests finishing there) in step order; step s (1-based) ends at
        ``ends[s - 1]`` and its tokens reach the clients at ``seen[s - 1]``.
        ``notified``: ``on_done`` was called for each at its step's end already
        (closed-loop clients inside a span)."""
        on_done, count = self.on_done, self.count_done
        each = not notified and count is None
        add, pack_row = self.req_cols.flat.frombytes, self.req_cols.pack_row
        for step, reqs in finished:  # (finished requests: ``record``'s rows, status finished)
            now, at = ends[step - 1], seen[step - 1]
            for req in reqs:
                req.finish_time = at
                rep.outstanding -= 1
                add(pack_row(*_request_row(req), STATUS_FINISHED))
                if each:
                    on_done(req, at - now)
            if not notified and count is not None:
                count(len(reqs))
        if finished:
            rep.scheduler.finished.clear()

    def joined(self, completed: list[tuple[Request, bool]], end: float) -> None:
        """Requests whose prefill a span completed at the step ending at
        ``end`` (request, resumed after a preemption): a new one's first token;
        a resumed one's token is an ITL gap since its last token before the
        preemption (its recompute interval was closed by ``recovered``)."""
        for req, again in completed:
            if again:
                self.itl.add(end - req.last_token_time, 1.0)
            else:
                req.first_token_time = end

