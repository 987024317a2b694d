"""Attention data-parallel groups: D ranks that step together.

A DP group (an MoE model with ``data_parallel_size`` D > 1; layout and cost in
``sim/cost_model/parallel.py``) is D attention ranks, each an ordinary
:class:`~sim.engine.simulation.Replica` (its own scheduler, KV-cache manager,
waiting queue), driven by ONE SimPy process: every step, each rank with work
runs ``schedule()``; the step lasts the group's time
(:meth:`CostModel.dp_group_step_s`: the slowest rank, the ranks' tokens padded
or not as the engine does: vLLM pads every rank to the largest count,
``coordinate_batch_across_dp``), plus the
CPU overheads of the rank that takes longest; then every rank that ran takes
its outputs. Ranks with nothing scheduled run vLLM's dummy forward passes in
the meantime (they cost no extra time: the group's step is the slowest rank's);
they record no row. The group sleeps only when no rank has work. With
TensorRT-LLM's ``attention_dp_config`` ``enable_balance`` the group decides
each step whether the ranks may admit context requests
(:class:`AttentionDpBalance`).

Routing: a request goes to a group by ``router`` (across ``num_replicas``
groups; load = requests in flight), then to the rank with the lowest
``4 x waiting + running`` (vLLM's DP load balancer, ``DPLBAsyncMPClient`` in
``vllm/v1/engine/core_client.py``: ``score = waiting * 4 + running``; it reads
counts the coordinator publishes every 100 ms and bumps its own waiting count
per request -- here the counts are exact; ties go to the lowest rank).

Records: ``steps.csv`` has one row per rank that ran in a step (``replica`` =
the rank's global index, group x D + rank; ``step_time_s`` the group's step);
``requests.csv``'s ``replica`` is the rank too. This is the reference stepping
only: the runner never gives a DP group the accelerated stepping.

The loop takes its cost model, CPU overheads, overlap scheduling and finish
hook from the ranks (:class:`~sim.engine.replica.Replica` carries its engine's),
so a disaggregated pool's workers are DP groups too (sim/engine/disagg.py):
there a rank whose queue head waits only for KV blocks held for transfers
(``sim.disagg.waits_for_kv``) is not rejected; when no rank can run, the
group sleeps until a transfer or an arrival wakes it.
"""

from __future__ import annotations


class AttentionDpBalance:
    """TensorRT-LLM's attention-DP context balancing (``attention_dp_config``
    ``enable_balance``; ``PyExecutor._balance_adp_requests`` in
    ``tensorrt_llm/_torch/pyexecutor/py_executor.py``), decided once per group
    step from every rank's counts (the engine all-gathers them):

    - every rank has a context request to schedule and a free slot: the waiting
      counter restarts; if every rank also has generation requests, the group
      first holds the contexts for ``batching_wait_iters`` steps (a second
      counter), then admits them;
    - otherwise the contexts are held and the waiting counter advances; they
      are admitted (counter back to 0) when it reaches ``timeout_iters`` or
      when some rank has no generation request.

    The counter advances in every group step, with or without contexts
    waiting, as the engine's does. A rank "has a context request" here when its
    waiting queue is not empty and it runs fewer than ``max_num_seqs`` requests
    (the mixed scheduler's admission test; the token budget and KV blocks are
    not checked ahead); it "has a generation request" when it runs any, or when
    it has no request at all while another rank has (TensorRT-LLM gives such a
    rank a dummy generation request, ``_pad_attention_dp_dummy_request``)."""

    __slots__ = ("timeout_iters", "batching_wait_iters", "waiting_iters", "batching_iters")

    def __init__(self, timeout_iters: int, batching_wait_iters: int) -> None:
        self.timeout_iters = timeout_iters
        self.batching_wait_iters = batching_wait_iters
        self.waiting_iters = 0
        self.batching_iters = 0

    def hold(self, ranks) -> bool:
        """Whether this group step holds every rank's context requests."""
        scheds = [r.scheduler for r in ranks]
        busy = [s.num_running + s.num_waiting > 0 for s in scheds]
        any_busy = any(busy)
        # every rank with a context and a free slot (TensorRT-LLM's two tests in one)
        ctx = all(s.num_waiting > 0 and s.num_running < s.limits.max_num_seqs for s in scheds)
        gen = all(s.num_running > 0 or (not b and any_busy) for s, b in zip(scheds, busy))
        if ctx:
            self.waiting_iters = 0
            if gen and self.batching_iters < self.batching_wait_iters:
                self.batching_iters += 1
                return True
            if gen:
                self.batching_iters = 0
            return False
        self.waiting_iters += 1
        if self.waiting_iters >= self.timeout_iters or not gen:
            self.waiting_iters = 0
            return False
        return True


class DPGroup:
    """D ranks (``Replica`` objects, global indices ``index*D ..``) stepping together;
    ``balance``: TensorRT-LLM's context balancing (:class:`AttentionDpBalance`) or None."""

    __slots__ = ("index", "ranks", "wake", "balance")

    def __init__(self, index: int, ranks: list, balance: AttentionDpBalance | None = None) -> None:
        self.index = index
        self.ranks = ranks
        self.wake = None
        self.balance = balance

    @property
    def outstanding(self) -> int:
        return sum(r.outstanding for r in self.ranks)

    def pick_rank(self):
        """vLLM's DP load balancer: min 4 x waiting + running (ties: lowest rank)."""
        return min(self.ranks, key=lambda r: (4 * (r.scheduler.num_waiting + len(r.pending))
                                              + r.scheduler.num_running, r.index))

    def has_work(self) -> bool:
        return any(r.scheduler.has_unfinished_requests() or r.pending for r in self.ranks)


def route_dp(groups: list[DPGroup], router: str, counter: list[int], rng, pick=None):
    """The rank for a request: a group by ``router`` (round_robin, random, else
    least outstanding), then ``pick(group)`` inside it (default: vLLM's DP load
    balancer, :meth:`DPGroup.pick_rank`)."""
    if len(groups) == 1:
        g = groups[0]
    elif router == "round_robin":
        g = groups[counter[0] % len(groups)]
        counter[0] += 1
    elif router == "random":
        g = groups[int(rng.integers(len(groups)))]
    else:
        g = min(groups, key=lambda x: (x.outstanding, x.index))
    return g.pick_rank() if pick is None else pick(g)


def _sleep(env, group: DPGroup):
    """Park the group's process until an arrival (or a finished KV transfer)
    wakes any of its ranks: every rank idle, one shared wake event."""
    ranks = group.ranks
    for rep in ranks:
        rep.busy = False
    group.wake = env.event()
    for rep in ranks:
        rep.wake = group.wake
    yield group.wake
    group.wake = None
    for rep in ranks:
        rep.wake = None


def dp_group_loop(sim, group: DPGroup):
    """The SimPy process of one DP group (the reference stepping of
    ``Simulation._replica_loop``, for D ranks at once)."""
    env = sim.env
    ranks = group.ranks
    cost = ranks[0].cost  # the pool's engine (the run's in aggregated serving)
    rec = sim.recorder
    overheads = ranks[0].overheads
    lag = ranks[0].lag
    finish = ranks[0].on_finish if ranks[0].on_finish is not None else rec.finish
    disagg = sim.disagg
    index = ranks[0].index  # the group's place in the order of events at one instant
    settled = -1.0
    released = False  # the last pass held contexts and nothing ran: this one admits them
    while True:
        if settled != env.now:  # schedule() after every other event at this instant (Environment.settle)
            settled = env.now
            late = env.settle(index)
            if late is not None:
                yield late
        if not group.has_work():
            yield from _sleep(env, group)
            continue
        start = env.now
        ran = []  # (rep, out, new, ctx)
        blocked = False  # a rank's queue head waits for KV blocks held for transfers
        moved = False  # a rank admitted arrivals, preempted or rejected: schedule again
        hold = group.balance.hold(ranks) if group.balance is not None and not released else False
        released = False
        for rep in ranks:
            sched = rep.scheduler
            if not sched.has_unfinished_requests() and not rep.pending:
                continue
            flushed = False
            sched.hold_waiting = hold
            out = sched.schedule()
            sched.hold_waiting = False
            if rep.pending:  # arrived during the last step: visible from the next schedule()
                pending, rep.pending = rep.pending, []
                for _, req in pending:
                    sim.admit_to(rep, req)
                flushed = True
            if out.is_empty:
                moved = moved or flushed or bool(out.preempted)
                if out.preempted:
                    rec.preempted(rep, out.preempted, start)
                elif not flushed:
                    if disagg is not None and disagg.waits_for_kv(rep):
                        blocked = True
                    else:
                        sim._unstick(rep)
                        moved = True
                continue
            rec.step_started(rep, out, start)
            new, ctx = out.forward_shape()
            ran.append((rep, out, new, ctx))
        if not ran:
            if hold:  # nothing ran while contexts were held: schedule again at once, admitting them
                released = True
                continue
            if blocked and not moved:  # blocks held for KV transfers come back when they end
                yield from _sleep(env, group)
            continue
        for rep in ranks:  # ranks without work this step (dummy passes) take arrivals at once
            rep.busy = False
        gpu = cost.dp_group_step_s([(new, ctx) for _, _, new, ctx in ran])
        dt = max(overheads.apply(gpu, len(new), out.num_prefill_tokens > 0) for _, out, new, _ in ran)
        for rep, out, _, _ in ran:
            rep.busy = lag
            rep.last_step_start = start
            rec.step(rep, start, dt, out)
        yield env.step_end(start + dt, index)
        sim.num_events += 1
        sim.num_steps += 1
        now = env.now
        for rep, out, _, _ in ran:
            rec.step_done(rep, out, start, now, finish)
