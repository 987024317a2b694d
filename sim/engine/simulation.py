"""The SimPy simulation of a serving deployment — the only module that imports simpy.

Processes:

- **arrivals** (open loop): each request is sent at its ``arrival_time_s``
  whatever the server does. **Closed loop** (``workload.max_concurrency`` = C):
  C clients, each sending its next request the moment its previous one
  completes (or is rejected), as ``vllm bench serve --max-concurrency``; the
  send time is when the client sends, so waiting for a client slot is not TTFT.
  With ``client_think_time_s`` = m > 0, each send (the first ones included)
  comes an exponential time of mean m after the client's previous request
  completed (client-side processing and network; not part of TTFT), drawn from
  a seeded stream: clients drift apart as real ones do instead of staying in
  lock-step. A request reaches the router ``frontend_latency_s`` after it was
  sent (the serving frontend's HTTP handling and tokenization; counted in TTFT).
  With ``overlap_scheduling`` (TensorRT-LLM's overlap scheduler, SGLang's
  overlap schedule, vLLM's async scheduling) the batch of step N+1 is formed
  when step N starts, so a request that arrives while a step runs joins the
  batch after the next one; an idle replica takes it at once. The client sees
  tokens when the frontend has streamed them (``frontend_token_s`` per token,
  one step's batch after the other); TTFT, TPOT and E2EL are measured there,
  as ``vllm bench serve`` does; ITL gaps are the engine's.
- **router**: ``round_robin``, ``least_outstanding_requests``, ``random``
  (seeded), ``prefix_aware`` (SGLang's cache-aware router: the replica whose
  prefix cache holds the longest prefix of the request when it covers more than
  half the prompt and the load is balanced, else the least loaded;
  ``Traffic._cache_aware``). Load is the requests a replica has in flight: sent
  to it and not yet finished or rejected (waiting included).
- **replica loop** (one per replica): ``schedule()`` → step time from the cost
  model for exactly the scheduled batch, plus the engine's CPU overheads
  (``sim/cost_model/overheads.py``) → ``yield env.timeout(step_time)`` →
  ``update_from_output()``. An idle replica waits on an event an arrival
  triggers; it never polls. One SimPy event per step with ``exact_steps``; by
  default a run of identical decode steps takes one or a few events
  (``_decode_run``), and in open loop a span of steps with finishes,
  admissions and preemptions takes one event per arrival or fewer
  (``sim/accelerated/spans.py``), same results. On a single replica in open loop a
  span sends the arrivals itself (``Traffic._send_inline``; nothing else acts
  before the step they land in ends): no event per arrival at all.

Metrics are appended to compact columns as the run goes (``sim.results.metrics``).
"""

from __future__ import annotations

import gc
import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import simpy

from sim.engine.deployment import Deployment
from sim.engine.recording import Outputs
from sim.accelerated.spans import Spans
from sim.engine.traffic import Traffic
from sim.results.metrics import REQUEST_COLUMNS, STEP_COLUMNS, Columns, WeightedSamples
from sim.request import Request, RequestStatus
from sim.workload import RequestSpecs


@dataclass
class RunResult:
    requests: dict[str, np.ndarray]
    steps: dict[str, np.ndarray]
    itl: tuple[np.ndarray, np.ndarray]
    rejected_reasons: dict[int, str]
    num_events: int
    num_steps: int
    sim_time_s: float
    kv_reserved_unused_fraction: float


class _Replica:
    __slots__ = ("index", "scheduler", "kv", "wake", "outstanding", "unused_integral", "merging", "proc",
                 "num_recovering", "busy", "pending", "last_step_start", "frontend_done", "run_ends",
                 "run_joins")

    def __init__(self, index: int, scheduler, kv) -> None:
        self.index = index
        self.scheduler = scheduler
        self.kv = kv
        self.wake: simpy.Event | None = None
        self.outstanding = 0
        self.unused_integral = 0.0
        self.merging = False  # inside a run of merged decode steps (interruptible)
        self.run_ends: list[float] = []  # the merged run's step end times timed so far
        self.run_joins: list[float] = []  # when requests joined the waiting queue during the run
        self.num_recovering = 0  # preempted requests not yet back where they were
        self.proc = None
        # Overlap scheduling: the next step's batch is formed when a step starts, so
        # requests arriving while the replica is busy wait one more step ("pending").
        self.busy = False
        self.pending: list[tuple[float, Request]] = []  # (arrival at the replica, request)
        self.last_step_start = 0.0  # start of the last step that ran (of a merged run: its last step)
        self.frontend_done = 0.0  # when the frontend has streamed every token emitted so far


class Simulation(Traffic, Outputs, Spans):
    """One run: ``Simulation(deployment, specs).run()`` → :class:`RunResult`.

    ``progress`` is an optional callable ``progress(num_done)`` called every
    ``progress_every`` completed requests (the CLI hooks a progress bar here).
    """

    Interrupt = simpy.Interrupt  # for the mixins (only this module imports simpy)

    def __init__(self, dep: Deployment, specs: RequestSpecs, *, seed: int = 0,
                 progress=None, progress_every: int = 200) -> None:
        self.dep = dep
        self.specs = specs
        cfg = dep.cfg
        self.env = simpy.Environment()
        self.cost = dep.cost_model
        self.replicas = []
        for i in range(cfg.num_replicas):
            kv = dep.make_kv_manager()
            self.replicas.append(_Replica(i, dep.make_scheduler(kv), kv))
        self.router_rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
        self.client_rng = np.random.default_rng(np.random.SeedSequence([seed, 3]))
        self.think_s = cfg.client_think_time_s
        self.frontend_s = cfg.frontend_latency_s
        self.frontend_tok_s = cfg.frontend_token_s
        self.overheads = dep.overheads
        self._rr = 0
        self.req_cols = Columns(REQUEST_COLUMNS)
        self.step_cols = Columns(STEP_COLUMNS)
        self.itl = WeightedSamples()
        self.reasons: dict[int, str] = {}
        self.num_events = 0
        self.num_steps = 0
        self.num_done = 0
        self.num_warmup = min(cfg.workload.num_warmup_requests or 0, len(specs))
        self.max_concurrency = cfg.workload.max_concurrency
        self.progress = progress
        self.progress_every = progress_every
        self._next_index = 0
        self._ready_clients: deque[int] = deque()  # closed-loop clients sending at once (Traffic)
        self._draining = False
        self._num_sent = 0  # requests handed to the router so far
        self._num_arrived = 0  # open-loop requests sent by their clients so far (>= _num_sent)
        # One replica in open loop: its decode spans may send requests themselves.
        self._inline = len(self.replicas) == 1 and self.max_concurrency is None
        self._spec_columns()
        # Reserved-but-unused KV is the contiguous baseline's metric; O(batch) a step.
        self.track_unused = cfg.kv_allocation == "contiguous"

    # ------------------------------------------------------------------ requests
    def _send(self, req: Request) -> None:
        self._num_sent += 1
        rep = self._route(req)
        req.replica = rep.index
        # In flight from the router's view from now on (load-aware routers count it),
        # also while it waits for an overlap-scheduled replica's next batch.
        rep.outstanding += 1
        if rep.busy:  # overlap scheduling: seen by the batch after the next one
            rep.pending.append((self.env.now, req))
            if rep.merging:  # counted as waiting from the next step on, as single steps record it
                rep.run_joins.append(self.env.now)
            # A rejection is not deferred past the next step's start: it frees a client
            # (closed loop) and lowers the load a router sees.
            if rep.merging and (rep.scheduler.arrival_may_change_schedule()
                                or rep.scheduler.rejection(req) is not None):
                self._cut_run(rep)
            return
        self._admit_to(rep, req)

    def _admit_to(self, rep: _Replica, req: Request) -> None:
        cut = rep.merging and rep.scheduler.arrival_may_change_schedule()
        if rep.scheduler.add_request(req):
            if rep.merging:  # waits behind a blocked queue: counted from the next step on
                rep.run_joins.append(self.env.now)
            if rep.wake is not None and not rep.wake.triggered:
                rep.wake.succeed()
            elif cut:
                self._cut_run(rep)
        else:
            self._rejected(rep, req)

    def _cut_run(self, rep: _Replica) -> None:
        """End the replica's merged decode run at the end of the step in
        progress. When that is the last step timed so far (the run was timed up
        to this arrival: ``_next_send_s``), the pending timeout already ends
        there and clearing ``merging`` says so; otherwise the run is interrupted."""
        rep.merging = False
        ends = rep.run_ends
        if len(ends) > 1 and ends[-2] >= self.env.now:
            rep.proc.interrupt()

    # ------------------------------------------------------------------ replica
    def _replica_loop(self, rep: _Replica):
        env = self.env
        sched = rep.scheduler
        kv = rep.kv
        cost = self.cost
        step_time_s = cost.step_time_s
        step_append = self.step_cols.append
        overheads = self.overheads
        cfg = self.dep.cfg
        # A prefix-aware router reads other replicas' caches mid-run, where merged runs
        # hash their filled blocks only at the run's end: keep exact steps there.
        fast = not cfg.exact_steps and not (cfg.enable_prefix_caching and cfg.router == "prefix_aware"
                                            and cfg.num_replicas > 1)
        lag = cfg.overlap_scheduling
        # Runs go on past finishes where nothing sees a finish before the run's end:
        # open loop (a finish sends nothing) and no load-aware router across replicas.
        span = fast and self.max_concurrency is None and (cfg.num_replicas == 1
                                                          or cfg.router in ("round_robin", "random"))
        # Spans take in whole-prompt arrivals where no step adds per-step accounting (no
        # lag). Queued spans record tokens as they come: only where a step's tokens
        # reach the clients at its end (no frontend streaming).
        joins = span and not lag and not self.track_unused and self.cost.decode_clock_joins
        queued = joins and self.frontend_tok_s <= 0.0
        while True:
            if not sched.has_unfinished_requests() and not rep.pending:
                rep.busy = False
                rep.wake = env.event()
                yield rep.wake
                rep.wake = None
                continue
            start = env.now
            flushed = False
            if rep.pending:
                # Arrived before the last step started (inside a merged run): the
                # reference mode saw them one step later, i.e. before this schedule().
                early = [r for t, r in rep.pending if t < rep.last_step_start]
                if early:
                    rep.pending = [(t, r) for t, r in rep.pending if t >= rep.last_step_start]
                    for req in early:
                        self._admit_to(rep, req)
                    flushed = True
            out = sched.schedule()
            if rep.pending:  # arrived during the last step: visible from the next schedule()
                pending, rep.pending = rep.pending, []
                for _, req in pending:
                    self._admit_to(rep, req)
                flushed = True
            if out.is_empty:
                if out.preempted:
                    # The running pass preempted the very request it was making room for
                    # and stopped (vLLM's scheduler does the same): nothing runs this
                    # round; the next schedule() goes on without it.
                    self._preempted(rep, out.preempted, start)
                elif not flushed:
                    self._unstick(rep)
                continue
            rep.busy = lag
            if out.preempted:
                self._preempted(rep, out.preempted, start)
            for req in out.admitted:
                if req.first_scheduled_time < 0:
                    req.first_scheduled_time = start
            if out.padding_contexts:
                new, ctx = out.new_tokens, out.context_lens
            else:
                new, ctx = out.num_scheduled_tokens, out.num_computed_before
            if not fast or flushed:
                k = 1
            else:
                plan = sched.plan_decode_span(out, queued) if span else None
                if plan is not None:
                    yield from (self._queued_span_run(rep, plan, start) if plan.queued
                                else self._span_run(rep, plan, start, joins))
                    continue
                k = sched.max_decode_run(out)
            if k > 1:
                yield from self._decode_run(rep, out, ctx, k, start)
                continue
            dt = overheads.apply(step_time_s(new, ctx), len(new), out.num_prefill_tokens > 0)
            rep.last_step_start = start
            usage = kv.usage
            step_append((rep.index, start, 1, dt, sched.num_running, sched.num_waiting,
                         out.num_batched_tokens, out.num_prefill_tokens, out.num_decode_tokens,
                         usage, len(out.preempted), usage, sched.num_waiting))
            if self.track_unused:
                rep.unused_integral += kv.reserved_unused_fraction * dt
            yield env.timeout(dt)
            self.num_events += 1
            self.num_steps += 1
            now = env.now
            emitted, finished = sched.update_from_output(out)
            seen = self._deliver(rep, now, len(emitted))
            self._tokens_emitted(emitted, start, now, seen, now)
            if rep.num_recovering:
                self._recovered(rep, out.scheduled, now)
            self._finish(rep, finished, now, seen)

    def _unstick(self, rep: _Replica) -> None:
        """Nothing could be scheduled although requests are waiting: on an idle
        replica that means the queue head can never be admitted (e.g. the
        watermark or reservation leaves too few blocks). Reject it with the
        reason rather than spin."""
        sched = rep.scheduler
        if sched.num_running or not sched.waiting:
            raise RuntimeError(f"replica {rep.index}: scheduler produced an empty step with "
                               f"{sched.num_running} running requests")
        req = sched.waiting.pop()  # its failed allocation left no blocks behind
        req.status = RequestStatus.REJECTED
        req.reason = "cannot be admitted even on an idle replica (KV cache too small for it)"
        sched.rejected.append(req)
        self._rejected(rep, req)

    # ------------------------------------------------------------------ run
    def run(self) -> RunResult:
        env = self.env
        for rep in self.replicas:
            rep.proc = env.process(self._replica_loop(rep))
        if self.max_concurrency is None:
            env.process(self._arrivals())
        else:
            spread = self.dep.cfg.client_start_spread_s
            for c in range(min(self.max_concurrency, len(self.specs))):
                if spread > 0.0:
                    ev = env.timeout(float(self.client_rng.uniform(0.0, spread)))
                    ev.callbacks.append(lambda _ev, cid=c: self._client_turn(cid))
                else:
                    self._client_turn(c)
        # The run allocates many short-lived objects and no reference cycles worth
        # collecting; the cyclic GC would repeatedly scan the KV pool's large
        # lists (1.3-1.5x slower). Paused for the run, restored afterwards.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            env.run()
        finally:
            if was_enabled:
                gc.enable()
        total = sum(r.unused_integral for r in self.replicas)
        busy = float(sum(self.step_cols.column("step_time_s").tolist()))
        req = self.req_cols.to_numpy()
        order = np.argsort(req["request_id"], kind="stable")
        req = {k: v[order] for k, v in req.items()}
        self._check_conservation(req)
        return RunResult(
            requests=req, steps=self.step_cols.to_numpy(copy=False), itl=self.itl.arrays(copy=False),
            rejected_reasons=self.reasons, num_events=self.num_events, num_steps=self.num_steps,
            sim_time_s=env.now, kv_reserved_unused_fraction=(total / busy) if busy > 0 else math.nan,
        )

    def _check_conservation(self, req: dict[str, np.ndarray]) -> None:
        n = len(self.specs)
        if req["request_id"].size != n:
            raise RuntimeError(f"request conservation violated: {n} sent, {req['request_id'].size} recorded")
        for rep in self.replicas:
            if rep.kv.num_free_blocks != rep.kv.num_usable_blocks:
                raise RuntimeError(f"replica {rep.index}: KV blocks leaked "
                                   f"({rep.kv.num_usable_blocks - rep.kv.num_free_blocks} still held)")


def simulate(dep: Deployment, specs: RequestSpecs, *, seed: int = 0, progress=None) -> RunResult:
    return Simulation(dep, specs, seed=seed, progress=progress).run()
