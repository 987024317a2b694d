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
  or per message of ``stream_interval`` tokens where the engine's frontend
  works per message: ``recording.streamed_token_s``; one step's batch after
  the other); TTFT, TPOT and E2EL are measured there,
  as ``vllm bench serve`` does; ITL gaps are the engine's.
- **router**: ``round_robin``, ``least_outstanding_requests``, ``random``
  (seeded), ``prefix_aware`` (SGLang's cache-aware router: the replica whose
  prefix cache holds the longest prefix of the request when it covers more than
  half the prompt and the load is balanced, else the least loaded;
  ``Traffic._cache_aware``). Load is the requests a replica has in flight: sent
  to it and not yet finished or rejected (waiting included).
- **replica loop** (one per replica): ``schedule()`` → step time from the cost
  model for exactly the scheduled batch, plus the engine's CPU overheads
  (``sim/cost_model/overheads.py``) → wait until the step ends →
  ``update_from_output()``. An idle replica waits on an event an arrival
  triggers; it never polls.

This is the **reference mode**: one SimPy event per engine step, the
specification. A faster variant is chosen at construction: ``stepping`` (a
factory, ``stepping(simulation)``; the runner passes
:class:`sim.accelerated.AcceleratedStepping` unless ``exact_steps``) is asked,
after each ``schedule()``, whether it can run a stretch of merged steps from
there (``stepping.merged(...)``), with bit-identical results. This module does
not know how; it only gives the stepping its hooks: arrivals at a replica that
is inside a merged stretch (``Replica.merging``) are reported to it.

Records are kept by one :class:`~sim.engine.recording.Recorder`; the traffic
(arrivals, clients, router) by one :class:`~sim.engine.traffic.Traffic`.
"""

from __future__ import annotations

import gc
import math
from heapq import heappush

import numpy as np
import simpy
from simpy.events import NORMAL, URGENT

from sim.engine.deployment import Deployment
from sim.engine.disagg import DisaggregatedServing
from sim.engine.dp_group import AttentionDpBalance, DPGroup, dp_group_loop, route_dp
from sim.engine.replica import RECV_WEIGHT_DECODE, RECV_WEIGHT_IDLE, RECV_WEIGHT_OTHER, Replica
from sim.engine.recording import Recorder, streamed_token_s
from sim.engine.traffic import Traffic
from sim.errors import InfeasibleError
from sim.request import Request, RequestStatus
from sim.results.run_result import RunResult
from sim.workload import RequestSpecs
from sim.workload.config import MAX_SIMULATED_CLOCK_S

#: SimPy's interrupt, for the accelerated stepping (only sim/engine imports simpy)
Interrupt = simpy.Interrupt


#: Event priorities at one instant (SimPy orders its queue by (time, priority,
#: creation)): see :class:`Environment`. A replica's step end and its next
#: ``schedule()`` add the replica's index, so ties between replicas go in replica order.
STEP_END = NORMAL + 1
SCHEDULE = STEP_END + (1 << 24)


class Environment(simpy.Environment):
    """SimPy's environment, plus events at an absolute time and a fixed order
    of the events that fall at one instant.

    ``env.timeout(t - env.now)`` fires at ``now + (t - now)`` in floating
    point, which is a neighbour of ``t`` for some pairs (and no delay reaches
    ``t`` exactly from some ``now``): an arrival's time would depend on when
    the arrival process last woke, which differs between the reference and the
    accelerated stepping. :meth:`timeout_at` fires at exactly ``t``.

    At one instant ``t`` the events go in this order, whatever order they
    were created in (which differs between the reference and the accelerated
    stepping): (1) traffic (``traffic=True``: SimPy's URGENT), so a request
    that reaches the router at the very time a step ends is routed before the
    step's completions change the loads; (2) other events (NORMAL: wake-ups);
    (3) engine step ends (:meth:`step_end`), in replica order; (4) the
    replicas' next ``schedule()`` (:meth:`settle`), in replica order. So a
    step scheduled at ``t`` sees every request that reached its replica at
    ``t``, including one a closed-loop client sent when another replica's step
    ended at ``t`` (simultaneous arrivals, e.g. the clients of one cohort, are
    all queued before an idle replica forms its batch), and a merged run,
    which has no event at each step end, knows what the reference would have
    seen there. (Real replicas tie at an exact float time only by
    construction, e.g. identical replicas in lock-step; any fixed rule is as
    faithful as another, this one is the simplest both steppings can follow.)"""

    def at(self, t: float, priority: int) -> simpy.Event:
        """An event that fires at simulated time exactly ``t`` (>= now) with
        ``priority`` at a tie, as a ``Timeout`` does (same fields)."""
        if t < self._now:
            raise ValueError(f"time {t!r} is in the past (now {self._now!r})")
        ev = simpy.Event(self)
        ev._ok = True
        ev._value = None
        heappush(self._queue, (t, priority, next(self._eid), ev))
        return ev

    def timeout_at(self, t: float, traffic: bool = False) -> simpy.Event:
        """An event at exactly ``t``; ``traffic``: before every other event at
        the same time (see the class docstring)."""
        return self.at(t, URGENT if traffic else NORMAL)

    def step_end(self, t: float, index: int) -> simpy.Event:
        """The end, at exactly ``t``, of an engine step of replica ``index``
        (after traffic and other events at ``t``; replicas in index order)."""
        return self.at(t, STEP_END + index)

    def settle(self, index: int) -> simpy.Event | None:
        """Replica ``index`` is about to ``schedule()`` now: an event after
        every other event now pending at this instant (step ends included;
        replicas in index order) to wait for first, or None when nothing else
        is pending now (waiting would change nothing)."""
        q = self._queue
        if q and q[0][0] == self._now:
            return self.at(self._now, SCHEDULE + index)
        return None

    def traffic_timeout(self, delay: float) -> simpy.Event:
        """``timeout(delay)`` (the same ``now + delay``) for a traffic event:
        before the engine's events at the same time (see the class docstring)."""
        if delay < 0:
            raise ValueError(f"negative delay {delay!r}")
        return self.timeout_at(self._now + delay, traffic=True)


class Simulation:
    """One run: ``Simulation(deployment, specs).run()`` → :class:`RunResult`
    in the reference mode; ``stepping=`` a faster variant (see the module
    docstring; :func:`sim.runner.make_simulation` chooses).

    ``progress`` is an optional callable ``progress(num_done)`` called every
    ``progress_every`` completed requests (the CLI hooks a progress bar here).
    """

    def __init__(self, dep: Deployment, specs: RequestSpecs, *, seed: int = 0,
                 progress=None, progress_every: int = 200, stepping=None) -> None:
        self.dep = dep
        self.specs = specs
        cfg = dep.cfg
        self.env = Environment()
        self.cost = dep.cost_model
        self.overheads = dep.overheads
        # Reserved-but-unused KV is the contiguous baseline's metric; O(batch) a step.
        self.recorder = Recorder(streamed_token_s(cfg), cfg.kv_allocation == "contiguous")
        self.disagg = None
        self.dp_groups: list[DPGroup] = []
        if dep.disagg is None:
            self.replicas = []
            # attention data parallelism: each replica is a DP group of D ranks (sim/engine/dp_group.py)
            D = dep.layout.data_parallel_size if dep.layout.attention_dp else 1
            for i in range(cfg.num_replicas * D):
                kv = dep.make_kv_manager()
                self.replicas.append(Replica(i, dep.make_scheduler(kv), kv, dep))
            if D > 1:
                self.dp_groups = [
                    DPGroup(g, self.replicas[g * D:(g + 1) * D],
                            AttentionDpBalance(cfg.attention_dp_timeout_iters, cfg.attention_dp_batching_wait_iters)
                            if cfg.attention_dp_enable_balance else None)
                    for g in range(cfg.num_replicas)]
            routed, send = self.replicas, self.send
        else:  # prefill and decode pools (sim/engine/disagg.py); the router picks a prefill worker
            if stepping is not None:
                raise ValueError("a disaggregated run uses the reference stepping (exact_steps)")
            self.disagg = DisaggregatedServing(self, dep.disagg, seed)
            self.replicas = self.disagg.replicas
            self.dp_groups = self.disagg.dp_groups  # a pool's workers may be DP groups
            routed, send = self.disagg.prefill_replicas, self.disagg.send
        self.traffic = Traffic(self.env, specs, routed, cfg, seed, send, self.recorder,
                               progress=progress, progress_every=progress_every)
        self.recorder.on_done = self.traffic.on_done
        if self.traffic.counts_done_only:
            self.recorder.count_done = self.traffic.count_done
        self.num_events = 0
        self.num_steps = 0
        if stepping is not None and not getattr(self.replicas[0].kv, "supports_accelerated_stepping", True):
            raise ValueError("a hybrid KV cache (per-group block tables) uses the reference stepping (exact_steps)")
        # a DP group steps in the reference mode only (sim/engine/dp_group.py)
        self.stepping = stepping(self) if stepping is not None and not self.dp_groups else None

    # ------------------------------------------------------------------ requests
    def send(self, req: Request) -> None:
        """``req`` reaches the router: route it, then queue it at its replica
        (or, on a busy overlap-scheduled replica, hold it for the batch after
        the next)."""
        traffic = self.traffic
        traffic.num_sent += 1
        f = traffic.frontends.pick()
        rep = (route_dp(self.dp_groups, traffic.router, traffic.frontends.counter("groups", f), traffic.router_rng)
               if self.dp_groups else traffic.route(req, f))
        req.replica = rep.index
        # In flight from the router's view from now on (load-aware routers count it),
        # also while it waits for an overlap-scheduled replica's next batch.
        rep.outstanding += 1
        if rep.recv_interval > 1 and (rep.scheduler.has_unfinished_requests() or rep.busy or rep.held):
            # SGLang --scheduler-recv-interval: a working scheduler polls the tokenizer only
            # when its pass counter reaches the interval (``_maybe_recv``); an idle one polls
            # continuously, i.e. takes the request at once
            rep.held.append(req)
            return
        if rep.busy:  # overlap scheduling: seen by the batch after the next one
            rep.pending.append((self.env.now, req))
            if rep.merging:
                self.stepping.held_arrival(rep, req)
            return
        self.admit_to(rep, req)

    def admit_to(self, rep: Replica, req: Request) -> None:
        """Queue ``req`` at ``rep`` (waking it if idle), or record its rejection."""
        merging = rep.merging
        cut = merging and self.stepping.arrival_may_change_schedule(rep)
        if rep.scheduler.add_request(req):
            if merging:  # waits behind a blocked queue: counted from the next step on
                rep.run_joins.append(self.env.now)
            if rep.wake is not None and not rep.wake.triggered:
                rep.wake.succeed()
            elif cut:
                self.stepping.cut_run(rep)
        else:
            self.recorder.rejected(rep, req)

    def _maybe_recv(self, rep: Replica) -> None:
        """SGLang's SchedulerRecvSkipper at the top of a scheduler loop: the counter
        grows by the weight of the last pass (decode 1, prefill or mixed 1000, idle 1);
        at the interval it resets and the held arrivals are received (queued in order).
        With nothing running the loop only polls, so held arrivals are taken at once."""
        if not rep.held:
            rep.recv_counter += rep.recv_weight
            if rep.recv_counter >= rep.recv_interval:
                rep.recv_counter = 0
            return
        running = rep.scheduler.has_unfinished_requests()
        rep.recv_counter += rep.recv_weight
        if rep.recv_counter >= rep.recv_interval or not running:
            rep.recv_counter = 0
            held, rep.held = rep.held, []
            for req in held:
                self.admit_to(rep, req)

    # ------------------------------------------------------------------ replica
    def _replica_loop(self, rep: Replica):
        env = self.env
        sched = rep.scheduler
        step_time_s = rep.cost.step_time_s
        rec = self.recorder
        record_step, step_done = rec.step, rec.step_done
        overheads = rep.overheads
        lag = rep.lag
        finish = rep.on_finish if rep.on_finish is not None else rec.finish
        stepping = self.stepping
        recv = rep.recv_interval > 1
        settled = -1.0  # the instant this replica last waited for (Environment.settle)
        while True:
            if settled != env.now:  # schedule() after every other event at this instant
                settled = env.now
                late = env.settle(rep.index)
                if late is not None:
                    yield late
            if recv:
                self._maybe_recv(rep)
            if not sched.has_unfinished_requests() and not rep.pending:
                rep.busy = False
                if recv:
                    rep.recv_weight = RECV_WEIGHT_IDLE
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
                        self.admit_to(rep, req)
                    flushed = True
            out = sched.schedule()
            if rep.pending:  # arrived during the last step: visible from the next schedule()
                pending, rep.pending = rep.pending, []
                for _, req in pending:
                    self.admit_to(rep, req)
                flushed = True
            if out.is_empty:
                if out.preempted:
                    # The running pass preempted the very request it was making room for
                    # and stopped (vLLM's scheduler does the same): nothing runs this
                    # round; the next schedule() goes on without it.
                    rec.preempted(rep, out.preempted, start)
                elif not flushed:
                    if self.disagg is not None and self.disagg.waits_for_kv(rep):
                        # blocks held for KV transfers come back when they end
                        rep.wake = env.event()
                        yield rep.wake
                        rep.wake = None
                    else:
                        self._unstick(rep)
                continue
            rep.busy = lag
            rec.step_started(rep, out, start)
            new, ctx = out.forward_shape()
            if stepping is not None:
                merged = stepping.merged(rep, out, ctx, start, flushed)
                if merged is not None:
                    yield from merged
                    continue
            dt = overheads.apply(step_time_s(new, ctx), len(new), out.num_prefill_tokens > 0)
            rep.last_step_start = start
            if recv:
                rep.recv_weight = RECV_WEIGHT_OTHER if out.num_prefill_tokens > 0 else RECV_WEIGHT_DECODE
            record_step(rep, start, dt, out)
            yield env.step_end(start + dt, rep.index)
            self.num_events += 1
            self.num_steps += 1
            step_done(rep, out, start, env.now, finish)

    def _unstick(self, rep: Replica) -> None:
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
        self.recorder.rejected(rep, req)

    # ------------------------------------------------------------------ run
    def run(self) -> RunResult:
        env = self.env
        group_of = {rep.index: g for g in self.dp_groups for rep in g.ranks}
        for rep in self.replicas:  # in replica order: a DP group starts at its first rank
            g = group_of.get(rep.index)
            if g is None:
                rep.proc = env.process(self._replica_loop(rep))
            elif rep is g.ranks[0]:
                proc = env.process(dp_group_loop(self, g))
                for r in g.ranks:
                    r.proc = proc
        self.traffic.start()
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
        if env.now > MAX_SIMULATED_CLOCK_S:
            raise InfeasibleError(
                f"the run's simulated clock reached {env.now:.3g} s, beyond {MAX_SIMULATED_CLOCK_S:g} s (~63 "
                "years), where float64 time no longer resolves a microsecond: its latencies would be rounded; "
                "the hardware profile or the workload is far outside what servesim can time (a profile "
                "thousands of times too slow, or a backlog that never drains)")
        rec = self.recorder
        total = sum(r.unused_integral for r in self.replicas)
        req = rec.req_cols.to_numpy(copy=False)  # (views: the fancy index below copies each column)
        order = np.argsort(req["request_id"], kind="stable")
        req = {k: v[order] for k, v in req.items()}
        steps = _in_time_order(rec.step_cols.to_numpy(copy=False))
        busy = float(sum(steps["step_time_s"].tolist()))
        if self.disagg is not None:
            req, steps = self.disagg.finish_columns(req, steps)
        self._check_conservation(req)
        num_events = self.num_events + self.traffic.num_events
        num_steps = self.num_steps
        if self.stepping is not None:
            num_events += self.stepping.num_events
            num_steps += self.stepping.num_steps
        return RunResult(
            requests=req, steps=steps, itl=rec.itl.arrays(copy=False),
            rejected_reasons=rec.reasons, num_events=num_events, num_steps=num_steps,
            sim_time_s=env.now, kv_reserved_unused_fraction=(total / busy) if busy > 0 else math.nan,
        )

    def _check_conservation(self, req: dict[str, np.ndarray]) -> None:
        n = len(self.specs)
        if req["request_id"].size != n:
            raise RuntimeError(f"request conservation violated: {n} sent, {req['request_id'].size} recorded")
        if self.disagg is not None:
            self.disagg.check_conservation(req)
        for rep in self.replicas:
            if rep.kv.num_free_blocks != rep.kv.num_usable_blocks:
                raise RuntimeError(f"replica {rep.index}: KV blocks leaked "
                                   f"({rep.kv.num_usable_blocks - rep.kv.num_free_blocks} still held)")


def _in_time_order(steps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The step rows sorted by (start time, replica), as the reference stepping
    records them: a merged span's rows are recorded when it ends, after other
    replicas' (and its own engine loop's) later rows, so the accelerated
    stepping's order differs; sorted, ``steps.csv`` and every sum over the rows
    (the summary's time averages, float sums that depend on the order) are the
    same in both. A replica's rows never share a start time, so the order is
    unique. Rows already in order are returned as they are."""
    start, rep = steps["start_time_s"], steps["replica"]
    if start.size < 2:
        return steps
    ds = start[1:] - start[:-1]
    if ((ds > 0) | ((ds == 0) & (rep[1:] > rep[:-1]))).all():
        return steps
    order = np.lexsort((rep, start))
    return {k: v[order] for k, v in steps.items()}
