"""The traffic side of a simulation: open-loop arrivals, closed-loop clients,
arrivals gated by a concurrency cap, the serving frontend's ingress delay and the router.

``workload.max_concurrency`` = C is ``vllm bench serve --max-concurrency``: an
``asyncio.Semaphore(C)`` around each request (``vllm/benchmarks/serve.py::benchmark``,
``limited_request_func``). With a finite ``request_rate`` both apply (**gated**):
requests arrive at their arrival times, and each is sent when one of the C slots
is free (at once, or when an earlier request's client has its last token, in
arrival order: the semaphore's FIFO wake-up); the send time starts its TTFT, as
vLLM's ``start_time`` is taken inside the semaphore. With the rate infinite
(every request arriving at t = 0) that is the **closed loop** of C clients, which
keeps its own process (client think times and start spread apply there only). :class:`Traffic` hands
each request to the :class:`~sim.engine.simulation.Simulation` (``send``),
which owns the replicas and the event loop."""

from __future__ import annotations

import math
from array import array
from collections import deque
from heapq import heappop, heappush

import numpy as np

from sim.request import Request

# SGLang router cache_aware defaults (python -m sglang_router.launch_router --help:
# --cache-threshold 0.5, --balance-abs-threshold 32, --balance-rel-threshold 1.0001)
_CACHE_THRESHOLD = 0.5
_BALANCE_ABS = 32
_BALANCE_REL = 1.0001


class Frontends:
    """``num_frontends`` router processes behind one load balancer, each with its
    own round-robin counters (``counter(pool, frontend)``, a one-element list per
    pool and frontend). A request reaches one of them (``pick``): uniformly at
    random, the load balancer being nginx (its default round-robin ``upstream``)
    with ``worker_processes auto``: each worker process keeps its own round-robin
    position and the kernel hands each new connection to one of them (the
    benchmark client opens one per request), so which frontend a request meets is
    not in step with the clients. NVIDIA's srt-slurm launcher, which runs the
    nightly harness's Dynamo deployments, starts nginx and up to ten Dynamo
    frontends (``python3 -m dynamo.frontend``, router mode round-robin by default),
    each choosing workers on its own (``srtctl`` ``FrontendConfig``:
    ``enable_multiple_frontends`` true, ``num_additional_frontends`` 9;
    ``FrontendTopology``: min(that + 1, worker nodes - 1); ``nginx.conf.j2``).
    With one frontend nothing is drawn: the single router of before."""

    def __init__(self, num_frontends: int, seed: int) -> None:
        self.n = num_frontends
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 6])) if num_frontends > 1 else None
        self._counters: dict[tuple[str, int], list[int]] = {}

    def pick(self) -> int:
        """The frontend a request reaches (0 with one frontend, no draw)."""
        return 0 if self.rng is None else int(self.rng.integers(self.n))

    def counter(self, pool: str, frontend: int = 0) -> list[int]:
        """The round-robin counter of ``frontend`` over ``pool``'s workers."""
        c = self._counters.get((pool, frontend))
        if c is None:
            c = self._counters[(pool, frontend)] = [0]
        return c

    def next_turn(self, pool: str, frontend: int, n: int) -> int:
        """The index, among ``n`` workers of ``pool``, that ``frontend``'s
        round-robin picks next (and the counter moves on)."""
        c = self.counter(pool, frontend)
        i = c[0] % n
        c[0] += 1
        return i


class Traffic:
    """Request creation, arrival processes, client turns and routing for one
    run: ``env`` (SimPy), the request ``specs``, the ``replicas``, the
    config ``cfg``; ``send(req)`` takes a request at the router's time (after
    the frontend latency); ``recorder`` records what is rejected on the spot.
    ``progress(num_done)``, if given, is called every ``progress_every``
    requests done."""

    def __init__(self, env, specs, replicas: list, cfg, seed: int, send, recorder, *,
                 progress=None, progress_every: int = 200) -> None:
        self.env = env
        self.specs = specs
        self.replicas = replicas
        self.router = cfg.router
        self.send = send
        self.recorder = recorder
        self.router_rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
        self.frontends = Frontends(cfg.num_frontends, seed)
        self.client_rng = np.random.default_rng(np.random.SeedSequence([seed, 3]))
        self.think_s = cfg.client_think_time_s
        self.frontend_s = cfg.frontend_latency_s
        self.client_start_spread_s = cfg.client_start_spread_s
        self.max_concurrency = cfg.workload.max_concurrency
        # rate and concurrency cap together (vllm bench serve's semaphore): see the module docstring
        self.gated = self.max_concurrency is not None and not cfg.workload.is_infinite_rate()
        self.in_flight = 0  # gated: requests sent and not yet seen done by their client
        self._backlog: deque[int] = deque()  # gated: arrived, waiting for a slot (arrival order)
        self._pumping = False
        self.num_warmup = min(cfg.workload.num_warmup_requests or 0, len(specs))
        self.progress = progress
        self.progress_every = progress_every
        self.num_events = 0
        self.num_done = 0
        self._next_index = 0
        self._ready_clients: deque[int] = deque()  # closed-loop clients sending at once
        self._draining = False
        self.num_sent = 0  # requests handed to the router so far
        self.num_arrived = 0  # open-loop requests sent by their clients so far (>= num_sent)
        # Closed loop (not gated): when each pending client send will reach the router, or
        # earlier (a heap; ``next_send_s``).
        self.closed = self.max_concurrency is not None and not self.gated
        self._closed_sends: list[float] = []
        # One replica in open loop: its decode spans may send requests themselves.
        self.inline = len(replicas) == 1 and self.max_concurrency is None
        self._spec_columns()

    def start(self) -> None:
        """Start the arrival process (open loop) or the clients (closed loop)."""
        env = self.env
        if self.max_concurrency is None or self.gated:
            env.process(self._arrivals())
            return
        spread = self.client_start_spread_s
        for c in range(min(self.max_concurrency, len(self.specs))):
            if spread > 0.0:
                u = float(self.client_rng.uniform(0.0, spread))
                ev = env.traffic_timeout(u)
                heappush(self._closed_sends, (env.now + u) + self.frontend_s)  # (a think time: later)
                ev.callbacks.append(lambda _ev, cid=c: self._client_turn(cid))
            else:
                self._client_turn(c)

    def _spec_columns(self) -> None:
        """The specs' columns as C arrays: indexing one gives a Python int or
        float directly (a numpy scalar and its conversion cost several times
        more, once per request), at 8 bytes per value."""
        s = self.specs
        self._cols = tuple(array(code, np.ascontiguousarray(col, dtype=dt).tobytes())
                           for code, dt, col in (("d", np.float64, s.arrival_time_s),
                                                 ("q", np.int64, s.num_prompt_tokens),
                                                 ("q", np.int64, s.max_tokens),
                                                 ("q", np.int64, s.output_len),
                                                 ("q", np.int64, s.priority)))
        # When each open-loop request reaches the router (s), then inf: ``next_send_s``.
        n = len(s)
        if self.max_concurrency is None:
            at = np.append(np.asarray(s.arrival_time_s, dtype=np.float64) + self.frontend_s, math.inf)
        else:  # closed loop: sends follow completions
            at = np.full(n + 1, math.inf)
        self._send_at = array("d", at.tobytes())

    def _make_request(self, i: int, now: float, client_id: int = -1) -> Request:
        s = self.specs
        _, prompt, max_tokens, output_len, priority = self._cols
        keys = s.prefix_keys[i] if s.prefix_keys is not None else None
        # (positional: a keyword call costs more, once per request)
        return Request(i, now, prompt[i], max_tokens[i], output_len[i], priority[i], keys,
                       s.prefix_chunk_tokens, client_id, i < self.num_warmup)

    def route(self, req: Request, frontend: int = 0):
        """The replica for ``req`` by ``router`` (a ``sim.engine.replica.Replica``);
        round-robin over ``frontend``'s own counter (:class:`Frontends`)."""
        reps = self.replicas
        if len(reps) == 1:
            return reps[0]
        mode = self.router
        if mode == "round_robin":
            return reps[self.frontends.next_turn("replicas", frontend, len(reps))]
        if mode == "random":
            return reps[int(self.router_rng.integers(len(reps)))]
        least_loaded = min(reps, key=lambda r: (r.outstanding, r.index))
        if mode == "prefix_aware":
            return self._cache_aware(req, reps, least_loaded)
        return least_loaded  # least_outstanding_requests

    @staticmethod
    def _cache_aware(req: Request, reps: list, least_loaded):
        """SGLang router's ``cache_aware`` policy (sgl-router ``launch_router``
        defaults): when the load is imbalanced — (max − min) outstanding
        requests > ``_BALANCE_ABS`` and max > ``_BALANCE_REL`` × min — the
        least-loaded replica; else the replica whose prefix cache holds the
        longest prefix of the prompt if it covers more than ``_CACHE_THRESHOLD``
        of it (ties → fewer outstanding), else the least-loaded replica.
        (SGLang then picks the replica with the smallest radix tree; the load
        stands in for it here.)"""
        lo = least_loaded.outstanding
        hi = max(r.outstanding for r in reps)
        if hi - lo > _BALANCE_ABS and hi > _BALANCE_REL * lo:
            return least_loaded
        hits = [r.kv.get_computed_blocks(req)[1] for r in reps]  # cached prompt tokens
        i = max(range(len(reps)), key=lambda i: (hits[i], -reps[i].outstanding, -reps[i].index))
        return reps[i] if hits[i] > _CACHE_THRESHOLD * req.num_prompt_tokens else least_loaded

    @property
    def send_times(self) -> array:
        """When each open-loop request reaches the router (s; ``arrival_time_s`` +
        ``frontend_latency_s``), then inf: ``send_times[num_sent]`` is
        :meth:`next_send_s` in open loop, read without a call (a decode span
        sending inline reads it once per request)."""
        return self._send_at

    def next_send_s(self) -> float:
        """When the next open-loop request reaches the router (s; inf when
        every request was sent, or gated). In closed loop: the earliest time
        at which a client's pending send can reach the router after now (a
        send whose think time or frontend latency is running), inf when none
        is pending; it may be earlier than the send (a client left with no
        request to send). Merged steps are timed up to it, so the arrival that
        ends them usually finds their last step timed; it only bounds work done
        ahead and never changes a result. (Called where every traffic event of
        the current instant has fired: ``sim.engine.simulation.Environment``.)"""
        if self.closed:
            q = self._closed_sends
            now = self.env.now
            while q and q[0] <= now:
                heappop(q)
            return q[0] if q else math.inf
        return self._send_at[self.num_sent]

    def _arrivals(self):
        """Open-loop sends at their ``arrival_time_s``. A decode span on the only
        replica may take sends itself (``send_inline``): a wake finding its
        request taken waits for the next one not taken."""
        env = self.env
        times = self._cols[0]
        n = len(self.specs)
        while self.num_arrived < n:
            i = self.num_arrived
            t = times[i]
            if t > env.now:
                yield env.timeout_at(t, traffic=True)  # exactly t, however the process got here
                self.num_events += 1
                if self.num_arrived != i:
                    continue
            self.num_arrived = i + 1
            if self.gated:
                self._backlog.append(i)
                self._pump()
            else:
                self._ingress(self._make_request(i, env.now))

    def send_inline(self, rep, end: float, hold: list | None = None) -> None:
        """Send, without events, the open-loop requests that reach the router at
        or before ``end`` (s): a decode span on the only replica, timed up to
        there, takes them as ``_arrivals`` and ``send`` would (no other process
        acts before then; see ``AcceleratedStepping.span_run``). Each is queued or rejected;
        with ``hold``, appended there instead as (send time, request), for the
        span to queue later (an overlap-scheduled replica sees it a step later)."""
        times, send_at = self._cols[0], self._send_at
        add = rep.scheduler.add_request
        i = self.num_sent
        while send_at[i] <= end:
            self.num_sent = self.num_arrived = i + 1
            req = self._make_request(i, times[i])
            req.replica = rep.index
            rep.outstanding += 1
            if hold is not None:
                hold.append((send_at[i], req))
            elif not add(req):
                self.recorder.rejected(rep, req)
            i += 1

    def _client_next(self, client_id: int) -> None:
        if self._next_index < len(self.specs):
            i = self._next_index
            self._next_index += 1
            self._ingress(self._make_request(i, self.env.now, client_id))

    def _ingress(self, req: Request) -> None:
        """Hand a just-sent request to the router after the engine's
        ``frontend_latency_s`` (network, HTTP handling, tokenization, hand-off
        to the engine process; part of TTFT since the clock started at the send)."""
        if self.frontend_s <= 0.0:
            self.send(req)
            return
        ev = self.env.traffic_timeout(self.frontend_s)
        if self.closed:
            heappush(self._closed_sends, self.env.now + self.frontend_s)  # (the event's time)
        ev.callbacks.append(lambda _ev, r=req: self.send(r))

    @property
    def counts_done_only(self) -> bool:
        """Whether a finish matters here only as a count (open loop, no rate and
        concurrency gate, no progress callback): a merged stretch's finishes
        are then told at once (:meth:`count_done`)."""
        return self.progress is None and self.max_concurrency is None

    def count_done(self, n: int) -> None:
        """:meth:`on_done` for ``n`` finished requests where only their count
        matters (:attr:`counts_done_only`)."""
        self.num_done += n

    def on_done(self, req: Request, delay: float = 0.0) -> None:
        """``req`` is done (finished, or rejected); its client sees the last
        token ``delay`` from now."""
        self.num_done += 1
        if self.progress is not None and self.num_done % self.progress_every == 0:
            self.progress(self.num_done)
        if self.gated:
            if delay > 0.0:  # the slot is free when the client has the last token
                ev = self.env.traffic_timeout(delay)
                ev.callbacks.append(self._release)
            else:
                self._release()
        elif self.max_concurrency is not None:
            self._client_turn(req.client_id, delay)

    def _release(self, _ev=None) -> None:
        """Gated: a slot is free; the longest-waiting arrival takes it."""
        if _ev is not None:
            self.num_events += 1
        self.in_flight -= 1
        self._pump()

    def _pump(self) -> None:
        """Gated: send waiting arrivals while slots are free, in a loop rather than by
        recursion (a send rejected on the spot frees its slot inside ``_ingress``)."""
        if self._pumping:
            return
        self._pumping = True
        try:
            while self._backlog and self.in_flight < self.max_concurrency:
                i = self._backlog.popleft()
                self.in_flight += 1
                self._ingress(self._make_request(i, self.env.now))
        finally:
            self._pumping = False

    def _client_turn(self, client_id: int, delay: float = 0.0) -> None:
        """The client's next send: ``delay`` (its last token still streaming)
        plus an exponential think time, or at once."""
        if self.think_s <= 0.0 and delay <= 0.0:
            # At once, but in a loop rather than by recursion: a send rejected on the
            # spot would otherwise nest one call deeper per rejection (same order).
            self._ready_clients.append(client_id)
            if not self._draining:
                self._draining = True
                try:
                    while self._ready_clients:
                        self._client_next(self._ready_clients.popleft())
                finally:
                    self._draining = False
            return
        if self._next_index >= len(self.specs):
            return
        if self.think_s > 0.0:
            delay += float(self.client_rng.exponential(self.think_s))
        ev = self.env.traffic_timeout(delay)
        t = self.env.now + delay  # (the event's time), then the frontend's
        heappush(self._closed_sends, t + self.frontend_s if self.frontend_s > 0.0 else t)
        ev.callbacks.append(lambda _ev, c=client_id: self._think_done(c))

    def _think_done(self, client_id: int) -> None:
        self.num_events += 1
        self._client_next(client_id)
