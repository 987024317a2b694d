"""One engine instance of a simulation (:class:`Replica`): its scheduler and
KV-cache manager, its cost model, and the state the event loop and the router
keep about it."""

from __future__ import annotations

import simpy

from sim.engine.deployment import Deployment
from sim.request import Request

#: SGLang SchedulerRecvSkipper weights (sglang/srt/managers/scheduler_recv_skipper.py
#: _WEIGHT_OF_FORWARD_MODE): a decode pass and an idle poll count 1, any other pass
#: (prefill, mixed) 1000, i.e. the next loop receives at once
RECV_WEIGHT_DECODE = 1
RECV_WEIGHT_IDLE = 1
RECV_WEIGHT_OTHER = 1000


class Replica:
    """One engine instance: its scheduler and KV-cache manager, and what the
    event loop and router need to know about it."""

    __slots__ = ("index", "scheduler", "kv", "wake", "outstanding", "unused_integral", "merging", "proc",
                 "num_recovering", "busy", "pending", "last_step_start", "frontend_done", "run_ends",
                 "run_joins", "cost", "overheads", "lag", "on_finish", "recv_interval", "recv_counter",
                 "recv_weight", "held")

    def __init__(self, index: int, scheduler, kv, dep: Deployment | None = None) -> None:
        self.index = index
        self.scheduler = scheduler
        self.kv = kv
        # Its engine's cost model, CPU overheads and overlap scheduling (a
        # disaggregated run's pools differ); ``on_finish(rep, finished, now, seen)``
        # replaces the recorder's ``finish`` (a prefill worker hands requests on).
        self.cost = dep.cost_model if dep is not None else None
        self.overheads = dep.overheads if dep is not None else None
        self.lag = dep.cfg.overlap_scheduling if dep is not None else False
        self.on_finish = None
        # SGLang's scheduler_recv_interval (sim/engine/simulation.py ``_maybe_recv``): arrivals held
        # until the counter of forward passes (weight of the last pass) reaches the interval
        self.recv_interval = dep.cfg.scheduler_recv_interval if dep is not None else 1
        self.recv_counter = 0
        self.recv_weight = RECV_WEIGHT_IDLE
        self.held: list[Request] = []
        self.wake: simpy.Event | None = None
        self.outstanding = 0
        self.unused_integral = 0.0
        # Set by the accelerated stepping while a merged stretch runs (arrivals may cut it).
        self.merging = False
        self.run_ends: list[float] = []  # the merged stretch's step end times timed so far
        self.run_joins: list[float] = []  # when requests joined the waiting queue during it
        self.num_recovering = 0  # preempted requests not yet back where they were
        self.proc = None
        # Overlap scheduling: the next step's batch is formed when a step starts, so
        # requests arriving while the replica is busy wait one more step ("pending").
        self.busy = False
        self.pending: list[tuple[float, Request]] = []  # (arrival at the replica, request)
        self.last_step_start = 0.0  # start of the last step that ran (of a merged run: its last step)
        self.frontend_done = 0.0  # when the frontend has streamed every token emitted so far
