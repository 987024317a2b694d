"""The SimPy simulation of a serving deployment — the only module that imports simpy.

Processes:

- **arrivals** (open loop): each request is sent at its ``arrival_time_s``
  whatever the server does. **Closed loop** (``workload.max_concurrency`` = C):
  C clients, each sending its next request the moment its previous one
  completes (or is rejected), as ``vllm bench serve --max-concurrency``; the
  send time is when the client sends, so waiting for a client slot is not TTFT.
- **router**: ``round_robin``, ``least_outstanding_requests``, ``random``
  (seeded), ``prefix_aware`` (the replica whose prefix cache holds the longest
  prefix of the request; ties → fewest outstanding).
- **replica loop** (one per replica): ``schedule()`` → step time from the cost
  model for exactly the scheduled batch → ``yield env.timeout(step_time)`` →
  ``update_from_output()``. An idle replica waits on an event an arrival
  triggers; it never polls. One SimPy event per engine step.

Metrics are appended to compact columns as the run goes (``sim.metrics``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import simpy

from sim.deployment import Deployment
from sim.metrics import REQUEST_COLUMNS, STATUS_FINISHED, STATUS_REJECTED, STEP_COLUMNS, Columns, WeightedSamples
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
                 "num_recovering")

    def __init__(self, index: int, scheduler, kv) -> None:
        self.index = index
        self.scheduler = scheduler
        self.kv = kv
        self.wake: simpy.Event | None = None
        self.outstanding = 0
        self.unused_integral = 0.0
        self.merging = False  # inside a run of merged decode steps (interruptible)
        self.num_recovering = 0  # preempted requests not yet back where they were
        self.proc = None


class Simulation:
    """One run: ``Simulation(deployment, specs).run()`` → :class:`RunResult`.

    ``progress`` is an optional callable ``progress(num_done)`` called every
    ``progress_every`` completed requests (the CLI hooks a progress bar here).
    """

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
        self._rr = 0
        self.req_cols = Columns(REQUEST_COLUMNS)
        self.step_cols = Columns(STEP_COLUMNS)
        self.itl = WeightedSamples()
        self.reasons: dict[int, str] = {}
        self.num_events = 0
        self.num_steps = 0
        self.num_done = 0
        self.num_warmup = min(cfg.workload.num_warmup_requests or 0, len(specs))
        self.progress = progress
        self.progress_every = progress_every
        self._next_index = 0
        self.max_concurrency = cfg.workload.max_concurrency
        # Reserved-but-unused KV is the contiguous baseline's metric; O(batch) a step.
        self.track_unused = cfg.kv_allocation == "contiguous"

    # ------------------------------------------------------------------ requests
    def _make_request(self, i: int, now: float, client_id: int = -1) -> Request:
        s = self.specs
        keys = s.prefix_keys[i] if s.prefix_keys is not None else None
        return Request(
            i, now, int(s.num_prompt_tokens[i]), int(s.max_tokens[i]), int(s.output_len[i]),
            priority=int(s.priority[i]), prefix_keys=keys, prefix_chunk_tokens=s.prefix_chunk_tokens,
            client_id=client_id, is_warmup=i < self.num_warmup,
        )

    def _send(self, req: Request) -> None:
        rep = self._route(req)
        req.replica = rep.index
        cut = rep.merging and rep.scheduler.arrival_may_change_schedule()
        if rep.scheduler.add_request(req):
            rep.outstanding += 1
            if rep.wake is not None and not rep.wake.triggered:
                rep.wake.succeed()
            elif cut:
                rep.merging = False
                rep.proc.interrupt()
        else:
            self._record(req)
            self._on_done(req)

    def _route(self, req: Request) -> _Replica:
        reps = self.replicas
        if len(reps) == 1:
            return reps[0]
        mode = self.dep.cfg.router
        if mode == "round_robin":
            rep = reps[self._rr % len(reps)]
            self._rr += 1
            return rep
        if mode == "random":
            return reps[int(self.router_rng.integers(len(reps)))]
        if mode == "prefix_aware":
            best = max(reps, key=lambda r: (r.kv.get_computed_blocks(req)[1], -r.outstanding, -r.index))
            return best
        return min(reps, key=lambda r: (r.outstanding, r.index))  # least_outstanding_requests

    def _arrivals(self):
        env = self.env
        times = self.specs.arrival_time_s
        for i in range(len(self.specs)):
            t = float(times[i])
            if t > env.now:
                yield env.timeout(t - env.now)
                self.num_events += 1
            self._send(self._make_request(i, env.now))

    def _client_next(self, client_id: int) -> None:
        if self._next_index < len(self.specs):
            i = self._next_index
            self._next_index += 1
            self._send(self._make_request(i, self.env.now, client_id))

    def _on_done(self, req: Request) -> None:
        self.num_done += 1
        if self.progress is not None and self.num_done % self.progress_every == 0:
            self.progress(self.num_done)
        if self.max_concurrency is not None:
            self._client_next(req.client_id)

    def _record(self, req: Request) -> None:
        rejected = req.status == RequestStatus.REJECTED
        if rejected:
            self.reasons[req.request_id] = req.reason
        self.req_cols.append(
            req.request_id, req.replica, req.arrival_time, req.first_scheduled_time, req.first_token_time,
            req.finish_time, req.num_prompt_tokens, req.num_output_tokens, req.max_tokens,
            req.num_cached_tokens, req.num_preemptions, req.preempted_s, req.is_warmup,
            STATUS_REJECTED if rejected else STATUS_FINISHED,
        )

    # ------------------------------------------------------------------ replica
    def _replica_loop(self, rep: _Replica):
        env = self.env
        sched = rep.scheduler
        kv = rep.kv
        cost = self.cost
        step_time_s = cost.step_time_s
        itl_add = self.itl.add
        step_append = self.step_cols.append
        cfg = self.dep.cfg
        # A prefix-aware router reads other replicas' caches mid-run, where merged runs
        # hash their filled blocks only at the run's end: keep exact steps there.
        fast = not cfg.exact_steps and not (cfg.enable_prefix_caching and cfg.router == "prefix_aware"
                                            and cfg.num_replicas > 1)
        while True:
            if not sched.has_unfinished_requests():
                rep.wake = env.event()
                yield rep.wake
                rep.wake = None
                continue
            start = env.now
            out = sched.schedule()
            if out.is_empty:
                self._unstick(rep)
                continue
            for req in out.preempted:
                if req.preempted_time < 0:
                    req.preempted_time = start
                    rep.num_recovering += 1
            for req in out.admitted:
                if req.first_scheduled_time < 0:
                    req.first_scheduled_time = start
            if out.padding_contexts:
                new = np.asarray(out.new_tokens, dtype=np.int64)
                ctx = np.asarray(out.context_lens, dtype=np.int64)
            else:
                new = np.asarray(out.num_scheduled_tokens, dtype=np.int64)
                ctx = np.asarray(out.num_computed_before, dtype=np.int64)
            k = sched.max_decode_run(out) if fast else 1
            if k > 1:
                yield from self._decode_run(rep, out, ctx, k, start)
                continue
            dt = step_time_s(new, ctx)
            step_append(rep.index, start, 1, dt, sched.num_running, sched.num_waiting,
                        out.num_batched_tokens, out.num_prefill_tokens, out.num_decode_tokens,
                        kv.usage, len(out.preempted))
            if self.track_unused:
                rep.unused_integral += kv.reserved_unused_fraction * dt
            yield env.timeout(dt)
            self.num_events += 1
            self.num_steps += 1
            now = env.now
            emitted, finished = sched.update_from_output(out)
            self._tokens_emitted(emitted, start, now)
            if rep.num_recovering:
                self._recovered(rep, out.scheduled, now)
            self._finish(rep, finished, now)

    @staticmethod
    def _recovered(rep: _Replica, scheduled: list[Request], now: float) -> None:
        """Close the preemption-recompute interval of requests that are back
        where they were when preempted (``preempted_ms`` in requests.csv)."""
        for req in scheduled:
            if req.preempted_time >= 0 and req.num_computed_tokens >= req.preempted_at_tokens:
                req.preempted_s += now - req.preempted_time
                req.preempted_time = -1.0
                rep.num_recovering -= 1

    def _tokens_emitted(self, emitted: list[Request], start: float, now: float) -> None:
        """First-token times and ITL gaps of one step. Gaps equal to the step
        (the token before came at the step's start) are pooled in one weighted
        sample; nothing is stored per token."""
        same_gap = 0
        itl_add = self.itl.add
        for req in emitted:
            last = req.last_token_time
            if req.first_token_time < 0:
                req.first_token_time = now
            elif last == start:
                same_gap += 1
            else:
                itl_add(now - last, 1.0)
            req.last_token_time = now
        if same_gap:
            itl_add(now - start, same_gap)

    def _finish(self, rep: _Replica, finished: list[Request], now: float) -> None:
        for req in finished:
            req.finish_time = now
            rep.outstanding -= 1
            self._record(req)
            self._on_done(req)

    def _decode_run(self, rep: _Replica, out, ctx: np.ndarray, k: int, start: float):
        """Up to ``k`` identical decode steps in one event. Step end times are
        accumulated in the same floating-point order as ``k`` single steps, so
        results equal the reference mode's. An arrival routed to this replica
        interrupts the run; it then ends at the end of the step in progress,
        as the reference mode would let the scheduler see the arrival there."""
        env = self.env
        sched = rep.scheduler
        B = len(out.scheduled)
        num_waiting = sched.num_waiting  # at the run's start, as a single step records it
        times = self.cost.decode_steps_time_s(ctx, k, num_growing=B)
        ends = np.empty(k)
        t = start
        for i in range(k):  # sequential adds: bit-identical to env.now in exact mode
            t += times[i]
            ends[i] = t
        rep.merging = True
        try:
            yield env.timeout(ends[-1] - start)
            j = k
        except simpy.Interrupt:
            rep.merging = False
            now = env.now
            j = min(int(np.searchsorted(ends, now, side="left")) + 1, k)
            if ends[j - 1] > now:
                yield env.timeout(ends[j - 1] - now)
        rep.merging = False
        self.num_events += 1
        self.num_steps += j
        end = float(ends[j - 1])
        first_end = float(ends[0])
        if self.track_unused:
            rep.unused_integral += rep.kv.reserved_unused_fraction * (end - start)
        # Step 1 as a normal step (gaps since each request's last token), then j-1 pooled steps.
        self._tokens_emitted(out.scheduled, start, first_end)
        if rep.num_recovering:
            self._recovered(rep, out.scheduled, first_end)
        if j > 1:
            itl = self.itl
            for i in range(1, j):
                itl.add(float(ends[i] - ends[i - 1]), B)
            for req in out.scheduled:
                req.last_token_time = end
        finished, usage = sched.apply_decode_run(out, j)
        self.step_cols.append(rep.index, start, j, end - start, B, num_waiting, B * j, 0, B * j, usage, 0)
        self._finish(rep, finished, end)

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
        rep.outstanding -= 1
        self._record(req)
        self._on_done(req)

    # ------------------------------------------------------------------ run
    def run(self) -> RunResult:
        env = self.env
        for rep in self.replicas:
            rep.proc = env.process(self._replica_loop(rep))
        if self.max_concurrency is None:
            env.process(self._arrivals())
        else:
            for c in range(min(self.max_concurrency, len(self.specs))):
                self._client_next(c)
        env.run()
        total = sum(r.unused_integral for r in self.replicas)
        busy = float(sum(self.step_cols.cols["step_time_s"]))
        req = self.req_cols.to_numpy()
        order = np.argsort(req["request_id"], kind="stable")
        req = {k: v[order] for k, v in req.items()}
        self._check_conservation(req)
        return RunResult(
            requests=req, steps=self.step_cols.to_numpy(), itl=self.itl.arrays(),
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
