"""Disaggregated serving (xPyD): prefill workers, decode workers, the KV
transfer between them, composed from the same replicas, schedulers and KV
managers as aggregated serving (nothing here forks a scheduler).

A request's path, as NVIDIA Dynamo's ``PrefillRouter`` and vLLM's NIXL proxy
run it (docs.nvidia.com/dynamo design-docs/disaggregated-serving and
architecture-flow; ENGINE_SEMANTICS §9):

1. **Router → prefill worker** (the run's ``router``). The decode side's
   admission rules are checked first (``prompt + max_tokens > max_model_len``,
   or more than a decode worker's whole KV cache: rejected with the reason,
   as the decode instance would answer 400), then the prefill worker's.
2. **Prefill** with ``max_tokens = 1`` semantics: the prefill worker runs a
   *handle* of the request (same id, prompt and prefix keys, one output
   token) through its own scheduler; its step emits the first token. With
   ``first_token_from: prefill`` that token is streamed to the client: TTFT
   ends there (through the prefill worker's frontend). The handle's KV blocks
   stay held after it finishes (vLLM's NIXL producer keeps them until the
   consumer has read them): the prefill worker's KV manager is seen by its
   scheduler through :class:`HeldKV`, which defers the free of a finished
   request until :meth:`HeldKV.release`.
3. **Router → decode worker** (``decode_router``, else the run's router).
4. **Decode-side KV admission**: the decode worker allocates blocks for the
   prompt *before* the transfer (vLLM ``vllm/v1/core/sched/scheduler.py``,
   waiting pass: the connector answers ``load_kv_async``, the scheduler calls
   ``allocate_slots`` for the external tokens, sets ``WAITING_FOR_REMOTE_KVS``
   and parks the request, blocks held and no token budget spent, while NIXL
   pulls; ``_update_waiting_for_remote_kv`` once it has landed). Requests waiting
   for decode blocks are served FCFS per decode worker, after the worker's own
   preempted requests (those sit at the front of vLLM's waiting queue), with
   vLLM 0.24's full-sequence and watermark check (TensorRT-LLM's
   ``guaranteed_no_evict``: its blocks to completion must fit the headroom,
   as its capacity scheduler admits), and only while running + in-transfer
   requests stay below ``max_num_seqs``. An SGLang decode server pre-allocates
   instead by its ``DecodePreallocQueue``: the prompt's KV plus
   ``num_reserved_decode_tokens`` R (``--num-reserved-decode-tokens``, default
   512) must fit in the free KV less R for every request the server already
   holds (running, in transfer, waiting), so each admitted request keeps room to
   decode R tokens (sgl-project/sglang ``python/sglang/srt/disaggregation/decode.py``,
   ``_allocatable_tokens`` / ``pop_preallocated``: ``required_tokens_for_request =
   len(origin_input_ids) + num_reserved_decode_tokens``; its second term, one
   request's tokens to completion less all running requests' retractable tokens, is
   negative once a few requests run and is not modelled). A request waits here
   when the decode pool's KV is full: the *decode-KV-bound* symptom.
5. **KV transfer** (:mod:`sim.engine.kv_transfer`): FIFO on the prefill
   worker's egress and the decode worker's ingress (SimPy resources);
   bytes in the decode layout; then the prefill blocks are freed.
6. **Decode**: the request joins the decode worker's running batch with its
   prompt computed (``num_computed_tokens`` = prompt, one output token
   already sampled on the prefill worker; with ``first_token_from: decode``
   the last prompt token is recomputed and the first token sampled there, as
   vLLM's consumer does) at once, or when a running slot frees
   (``max_num_seqs``); it decodes the rest. Preempted there, it recomputes
   locally, as vLLM's decode instance does.

Simplifications: the decode side never hits its own prefix cache (the whole
prompt is transferred); a request joins the decode batch when its transfer
ends, also on an overlap-scheduled worker (no extra step of lag); decode
workers are chosen when the prefill ends (vLLM's proxy; SGLang's router picks
both at arrival, which differs only for load-aware routing).

**Attention data parallelism in a pool** (an MoE model with
``data_parallel_size`` D > 1 in ``disaggregation.prefill`` / ``decode``):
each worker of the pool is a DP group (:mod:`sim.engine.dp_group`: D attention
ranks, each with its own scheduler, batch and KV cache, stepping together,
padded to the largest rank's tokens; experts EP x moe_tp over the group's
GPUs, as in aggregated serving). The router picks a worker (``router`` /
``decode_router`` over the groups), then a rank inside it, as the pool's
engine does (``disaggregation.dp_rank_routing``, default from ``engine``):

- ``follow_bootstrap_room`` (SGLang): the PD router draws a random
  ``bootstrap_room`` per request and sends it to both servers; each server's
  DP controller runs ``--load-balance-method follow_bootstrap_room``
  (the PD default), ``target_rank = bootstrap_room % dp_size``
  (sgl-project/sglang ``python/sglang/srt/managers/data_parallel_controller.py``,
  ``follow_bootstrap_room_scheduler``) -- the same room on both pools, so with
  equal DP sizes prefill rank r hands to decode rank r;
- ``dp_load_balancer`` (vLLM, the default for other engines): the rank with
  the lowest ``4 x waiting + running`` (``DPLBAsyncMPClient``,
  :meth:`DPGroup.pick_rank`); on a decode rank, requests waiting for KV
  blocks, in transfer or for a slot count as waiting (vLLM keeps
  ``WAITING_FOR_REMOTE_KVS`` requests in its waiting queue);
- ``attention_dp_balance`` (TensorRT-LLM): the rank with the fewest active
  requests (``ExecutorRequestQueue._balance_requests_across_ranks`` in
  ``tensorrt_llm/_torch/pyexecutor/executor_request_queue.py`` balances new
  requests over the ranks' active requests and tokens; here requests only).

The KV of a request moves between its prefill rank and its decode rank: the
links are per rank (each rank's TP GPUs have their own NICs / NVLink ports),
bytes in the decode rank's layout (its attention TP, ``tensor_parallel_size``
of the pool, as the cost model defines a DP rank), the rank's blocks and slot
limits (``max_num_seqs`` per rank, as vLLM / TensorRT-LLM apply it) gate the
decode-side admission.

Records: ``requests.csv`` gains ``prefill_worker``, ``decode_worker`` (pool
indices of the worker; with DP also ``prefill_dp_rank`` / ``decode_dp_rank``),
``prefill_end_time_s``, ``decode_kv_wait_ms`` (prefill end → decode blocks),
``kv_transfer_queue_ms`` (blocks → transfer start: link queueing),
``kv_transfer_ms``, ``kv_transfer_end_time_s``, ``kv_transfer_bytes``;
``replica`` is the global worker index (prefill workers first; with DP the
global rank index, prefill ranks first); ``steps.csv`` gains ``pool``.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import simpy

from sim.engine.deployment import DisaggPools
from sim.engine.dp_group import DPGroup, route_dp
from sim.engine.replica import Replica
from sim.request import Request, RequestStatus

#: per-request columns a disaggregated run adds (times s; ``*_ms`` durations)
DISAGG_REQUEST_COLUMNS = ("prefill_worker", "decode_worker", "prefill_end_time_s", "decode_kv_wait_ms",
                          "kv_transfer_queue_ms", "kv_transfer_ms", "kv_transfer_end_time_s", "kv_transfer_bytes")
#: added when a pool runs attention data parallelism: the rank inside the worker
DP_RANK_COLUMNS = ("prefill_dp_rank", "decode_dp_rank")
#: ``disaggregation.dp_rank_routing`` default per engine (module docstring)
DP_RANK_ROUTING = {"sglang": "follow_bootstrap_room", "trtllm": "attention_dp_balance"}
#: ``disaggregation.num_reserved_decode_tokens`` default per engine: SGLang's
#: ``--num-reserved-decode-tokens`` 512 (``server_args.py``; module docstring, step 4)
RESERVED_DECODE_TOKENS = {"sglang": 512}


def reserved_decode_tokens(cfg) -> int | None:
    """``disaggregation.num_reserved_decode_tokens`` of a run, else its engine's
    default (:data:`RESERVED_DECODE_TOKENS`); None: the engine does not pre-allocate
    decode KV this way."""
    v = cfg.disaggregation.num_reserved_decode_tokens
    return RESERVED_DECODE_TOKENS.get(cfg.engine or "") if v is None else v


def _dp_size(dep) -> int:
    """Attention ranks per worker of a pool (1 without attention DP)."""
    return dep.layout.data_parallel_size if dep.layout.attention_dp else 1


class HeldKV:
    """A prefill worker's KV manager as its scheduler sees it: ``free`` of a
    finished request is deferred (its blocks stay in use) until
    :meth:`release`; everything else is the manager's own."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.held: dict[int, Request] = {}

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def free(self, request) -> None:
        if request.status == RequestStatus.FINISHED:
            self.held[request.request_id] = request
        else:  # a preemption: freed now
            self._inner.free(request)

    def release(self, request_id: int) -> None:
        self._inner.free(self.held.pop(request_id))


class DisaggregatedServing:
    """The pools of one disaggregated run inside a
    :class:`sim.engine.simulation.Simulation` (``sim``): ``replicas`` (prefill
    workers first, then decode workers, global indices), ``send`` for the
    traffic side, hooks on the workers' step ends."""

    def __init__(self, sim, pools: DisaggPools, seed: int) -> None:
        self.sim = sim
        self.env = sim.env
        self.spec = pools.transfer
        dcfg = sim.dep.cfg.disaggregation
        self.first_from_prefill = dcfg.first_token_from == "prefill"
        self.router = dcfg.decode_router or sim.dep.cfg.router
        if self.router == "prefix_aware":
            self.router = "least_outstanding_requests"
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 4]))
        # ranks per worker (attention DP); P, D count ranks below (= workers without DP)
        self.dp_prefill, self.dp_decode = _dp_size(pools.prefill), _dp_size(pools.decode)
        P = pools.prefill.cfg.num_replicas * self.dp_prefill
        D = pools.decode.cfg.num_replicas * self.dp_decode
        self.num_prefill = P
        self.prefill_replicas = []
        for i in range(P):
            kv = HeldKV(pools.prefill.make_kv_manager())
            rep = Replica(i, pools.prefill.make_scheduler(kv), kv, pools.prefill)
            rep.on_finish = self._prefill_done
            self.prefill_replicas.append(rep)
        self.decode_replicas = []
        for j in range(D):
            kv = pools.decode.make_kv_manager()
            rep = Replica(P + j, pools.decode.make_scheduler(kv), kv, pools.decode)
            rep.on_finish = self._decode_step_done
            self.decode_replicas.append(rep)
        self.replicas = self.prefill_replicas + self.decode_replicas
        # DP groups (sim/engine/dp_group.py) of each pool that runs attention DP
        self.prefill_groups = self._groups(self.prefill_replicas, self.dp_prefill)
        self.decode_groups = self._groups(self.decode_replicas, self.dp_decode)
        self.dp_groups = self.prefill_groups + self.decode_groups
        self.dp_rank_routing = dcfg.dp_rank_routing or DP_RANK_ROUTING.get(sim.dep.cfg.engine or "",
                                                                           "dp_load_balancer")
        self.frontend_of: dict[int, int] = {}  # request id -> the frontend that routed it (Frontends)
        self.rooms: dict[int, int] = {}  # SGLang's bootstrap_room per request in flight
        self.room_rng = np.random.default_rng(np.random.SeedSequence([seed, 5]))
        self.max_num_seqs = pools.decode.limits.max_num_seqs
        self.egress = [simpy.Resource(self.env, capacity=1) for _ in range(P)]
        self.ingress = [simpy.Resource(self.env, capacity=1) for _ in range(D)]
        self.kv_wait: list[deque] = [deque() for _ in range(D)]  # prefilled, waiting for decode blocks
        self.ready: list[deque] = [deque() for _ in range(D)]    # transferred, waiting for a running slot
        self.in_transfer = [0] * D  # decode blocks allocated, not yet running
        self.pending: list[list[Request]] = [[] for _ in range(D)]  # in transfer or in ``ready``
        # TensorRT-LLM admission on the decode pool: reserve blocks to completion
        self.no_evict = pools.decode.limits.capacity_scheduler_policy == "guaranteed_no_evict"
        # SGLang's decode pre-allocation: R tokens kept free per request held (step 4)
        self.reserved_decode_tokens = reserved_decode_tokens(sim.dep.cfg)
        self.clients: dict[int, Request] = {}  # request id -> the client's request, while prefilling
        n = len(sim.specs)
        cols = DISAGG_REQUEST_COLUMNS + (DP_RANK_COLUMNS if self.dp_groups else ())
        self.cols = {c: np.full(n, np.nan) for c in cols}
        self.num_transfers = 0

    @staticmethod
    def _groups(ranks: list, size: int) -> list:
        if size == 1:
            return []
        return [DPGroup(g, ranks[g * size:(g + 1) * size]) for g in range(len(ranks) // size)]

    # ------------------------------------------------------------------ DP ranks
    def _room(self, rid: int) -> int:
        room = self.rooms.get(rid)
        if room is None:  # the PD router's random bootstrap_room (a 63-bit integer)
            room = self.rooms[rid] = int(self.room_rng.integers(0, 2**63 - 1))
        return room

    def _decode_waiting(self, rep) -> int:
        """A decode rank's requests waiting (its scheduler's, for KV blocks, in
        transfer, for a running slot)."""
        k = rep.index - self.num_prefill
        return (rep.scheduler.num_waiting + len(rep.pending) + len(self.kv_wait[k]) + self.in_transfer[k]
                + len(self.ready[k]))

    def _pick_rank(self, group: DPGroup, rid: int, decode: bool):
        """The rank of ``group`` for request ``rid`` (``dp_rank_routing``)."""
        how = self.dp_rank_routing
        if how == "follow_bootstrap_room":
            return group.ranks[self._room(rid) % len(group.ranks)]
        if not decode:
            if how == "dp_load_balancer":
                return group.pick_rank()
            return min(group.ranks, key=lambda r: (r.scheduler.num_waiting + len(r.pending)
                                                   + r.scheduler.num_running, r.index))
        if how == "dp_load_balancer":
            return min(group.ranks, key=lambda r: (4 * self._decode_waiting(r) + r.scheduler.num_running, r.index))
        return min(group.ranks, key=lambda r: (self._decode_waiting(r) + r.scheduler.num_running, r.index))

    # ------------------------------------------------------------------ routing
    def send(self, req: Request) -> None:
        """``req`` reaches the router: a prefill worker, its handle queued there
        (or the request rejected with the reason)."""
        sim = self.sim
        traffic = sim.traffic
        traffic.num_sent += 1
        f = traffic.frontends.pick()  # the frontend picks the prefill worker, then the decode worker
        if f:
            self.frontend_of[req.request_id] = f
        if self.prefill_groups:
            prep = route_dp(self.prefill_groups, traffic.router, traffic.frontends.counter("prefill_groups", f),
                            traffic.router_rng, lambda g: self._pick_rank(g, req.request_id, False))
        else:
            prep = traffic.route(req, f)
        prep.outstanding += 1
        req.replica = prep.index
        handle = Request(req.request_id, req.arrival_time, req.num_prompt_tokens, 1, 1, req.priority,
                         req.prefix_keys, req.prefix_chunk_tokens, req.client_id, req.is_warmup)
        dsched = self.decode_replicas[0].scheduler
        reason = dsched.decode_rejection(req)
        if reason is not None:
            reason = f"decode pool: {reason}"
        else:
            if dsched.limits.max_req_len is not None:  # (SGLang: the decode server's own cap)
                dsched.cap_max_tokens(req)
            reason = prep.scheduler.rejection(handle)
            if reason is not None:
                reason = f"prefill pool: {reason}"
        if reason is not None:
            req.status = RequestStatus.REJECTED
            req.reason = reason
            self.rooms.pop(req.request_id, None)
            self.frontend_of.pop(req.request_id, None)
            sim.recorder.rejected(prep, req)
            return
        self.clients[req.request_id] = req
        self.cols["prefill_worker"][req.request_id] = prep.index // self.dp_prefill
        if self.dp_groups:
            self.cols["prefill_dp_rank"][req.request_id] = prep.index % self.dp_prefill
        if prep.busy:  # overlap scheduling: seen by the batch after the next one
            prep.pending.append((self.env.now, handle))
        else:
            sim.admit_to(prep, handle)

    def _route_decode(self, rid: int):
        frontends = self.sim.traffic.frontends
        f = self.frontend_of.pop(rid, 0)
        if self.decode_groups:
            return route_dp(self.decode_groups, self.router, frontends.counter("decode_groups", f), self.rng,
                            lambda g: self._pick_rank(g, rid, True))
        reps = self.decode_replicas
        if len(reps) == 1:
            return reps[0]
        if self.router == "round_robin":
            return reps[frontends.next_turn("decode", f, len(reps))]
        if self.router == "random":
            return reps[int(self.rng.integers(len(reps)))]
        return min(reps, key=lambda r: (r.outstanding, r.index))

    # ------------------------------------------------------------------ prefill side
    def _prefill_done(self, rep, finished: list[Request], now: float, seen: float) -> None:
        """Handles that finished prefill at ``now`` (first token at the client at
        ``seen``): hand each request on to a decode worker."""
        rec = self.sim.recorder
        last_step = now - rep.last_step_start
        for h in finished:
            rep.outstanding -= 1
            req = self.clients.pop(h.request_id)
            req.first_scheduled_time = h.first_scheduled_time
            req.num_cached_tokens = h.num_cached_tokens
            req.num_preemptions = h.num_preemptions
            req.preempted_s = h.preempted_s
            self.cols["prefill_end_time_s"][req.request_id] = now
            if self.first_from_prefill:
                req.first_token_time = h.first_token_time
                req.last_token_time = now
                req.num_output_tokens = 1
                if req.num_output_tokens_target <= 1:  # done on the prefill worker: nothing to move
                    self.rooms.pop(req.request_id, None)
                    self.frontend_of.pop(req.request_id, None)
                    self._release_prefill(rep, h.request_id)
                    req.status = RequestStatus.FINISHED
                    req.finish_time = seen
                    rec.record(req)
                    rec.on_done(req, seen - now)
                    continue
            drep = self._route_decode(req.request_id)
            self.rooms.pop(req.request_id, None)
            drep.outstanding += 1
            req.replica = drep.index
            k = drep.index - self.num_prefill
            self.cols["decode_worker"][req.request_id] = k // self.dp_decode
            if self.dp_groups:
                self.cols["decode_dp_rank"][req.request_id] = k % self.dp_decode
            self.kv_wait[drep.index - self.num_prefill].append((req, rep, h.request_id, last_step))
            self._admit_kv(drep)
        if finished:
            rep.scheduler.finished.clear()

    def _release_prefill(self, rep, request_id: int) -> None:
        """Free a transferred prompt's prefill blocks; wake the worker if it
        waits for blocks."""
        rep.kv.release(request_id)
        rep.scheduler._no_evict_invalidate()  # TensorRT-LLM admission: free blocks changed
        if rep.wake is not None and not rep.wake.triggered:
            rep.wake.succeed()

    # ------------------------------------------------------------------ decode side
    def _admit_kv(self, drep) -> None:
        """Allocate decode blocks for waiting transfers, FCFS (see the module
        docstring, step 4), and start their transfers."""
        j = drep.index - self.num_prefill
        q = self.kv_wait[j]
        sched = drep.scheduler
        kv = drep.kv
        while q:
            if sched.waiting or len(sched.running) + self.in_transfer[j] + len(self.ready[j]) >= self.max_num_seqs:
                return
            req, prep, rid, last_step = q[0]
            R = self.reserved_decode_tokens
            if R is not None:  # SGLang: prompt + R within the free KV less R per request held
                held = len(sched.running) + self.in_transfer[j] + len(self.ready[j]) + len(sched.waiting)
                # (an empty rank takes a prompt that fits without the R: prompt + R beyond its
                # whole KV would otherwise wait for ever)
                if held and req.num_prompt_tokens + R > kv.num_free_blocks * kv.block_size - R * held:
                    return
                if kv.allocate_slots(req, req.num_prompt_tokens, has_scheduled_reqs=bool(sched.running)) is None:
                    return
            else:
                if self.no_evict and not self._fits_no_evict(sched, j, req):
                    return
                if kv.allocate_slots(req, req.num_prompt_tokens, full_sequence_check=True,
                                     has_scheduled_reqs=bool(sched.running)) is None:
                    return
            q.popleft()
            sched._no_evict_invalidate()  # free blocks changed outside the scheduler
            self.in_transfer[j] += 1
            self.pending[j].append(req)
            self.cols["decode_kv_wait_ms"][rid] = (self.env.now - self.cols["prefill_end_time_s"][rid]) * 1e3
            self.env.process(self._transfer(req, prep, drep, last_step))

    def _transfer(self, req: Request, prep, drep, last_step: float):
        env = self.env
        rid = req.request_id
        j = drep.index - self.num_prefill
        t = self.spec.time_s(req.num_prompt_tokens, last_step)
        asked = env.now
        with self.egress[prep.index].request() as out_link:
            yield out_link
            with self.ingress[j].request() as in_link:
                yield in_link
                start = env.now
                yield env.timeout(t)
        self.num_transfers += 1
        c = self.cols
        c["kv_transfer_queue_ms"][rid] = (start - asked) * 1e3
        c["kv_transfer_ms"][rid] = (env.now - start) * 1e3
        c["kv_transfer_end_time_s"][rid] = env.now
        c["kv_transfer_bytes"][rid] = self.spec.num_bytes(req.num_prompt_tokens)
        self._release_prefill(prep, rid)
        self.in_transfer[j] -= 1
        self.ready[j].append(req)
        self._start_decode(drep)

    def _start_decode(self, drep) -> None:
        """Transferred requests join the running batch while it has room."""
        j = drep.index - self.num_prefill
        ready = self.ready[j]
        sched = drep.scheduler
        joined = False
        while ready and len(sched.running) < self.max_num_seqs:
            req = ready.popleft()
            self.pending[j].remove(req)
            # the prompt's KV is here; with first_token_from decode, the last prompt
            # token is recomputed and samples the first token (vLLM's consumer)
            req.num_computed_tokens = req.num_prompt_tokens - (0 if self.first_from_prefill else 1)
            req.status = RequestStatus.RUNNING
            sched.running.append(req)
            joined = True
        if joined:
            sched._no_evict_invalidate()  # running changed outside the scheduler's admission
            if drep.wake is not None and not drep.wake.triggered:
                drep.wake.succeed()

    @staticmethod
    def _remaining(sched, req) -> int:
        return sched._remaining_blocks_to_completion(req)

    def _fits_no_evict(self, sched, j: int, req) -> bool:
        """TensorRT-LLM's GUARANTEED_NO_EVICT admission on the decode worker: the
        request's blocks to completion fit in the headroom the scheduler keeps
        (free blocks less the running requests' remaining blocks to completion)
        less what the requests already admitted here but not yet running
        (in transfer, or waiting for a slot) still need."""
        rem = self._remaining
        reserved = sum(rem(sched, r) for r in self.pending[j])
        return rem(sched, req) + reserved <= sched._no_evict_available_blocks()

    def _decode_step_done(self, rep, finished: list[Request], now: float, seen: float) -> None:
        self.sim.recorder.finish(rep, finished, now, seen)
        self._start_decode(rep)
        self._admit_kv(rep)

    # ------------------------------------------------------------------ engine hooks
    def waits_for_kv(self, rep) -> bool:
        """``rep`` cannot schedule its queue head only because blocks are held
        for transfers that will end: wait for them rather than reject it."""
        if rep.index < self.num_prefill:
            return bool(rep.kv.held)
        j = rep.index - self.num_prefill
        return bool(self.in_transfer[j] or self.ready[j])

    def finish_columns(self, req: dict, steps: dict) -> tuple[dict, dict]:
        """The run's columns with the disaggregated ones added (``req`` sorted by id)."""
        ids = req["request_id"].astype(np.int64)
        req = dict(req)
        for c, v in self.cols.items():
            req[c] = v[ids]
        steps = dict(steps)
        steps["pool"] = np.where(steps["replica"] < self.num_prefill, "prefill", "decode")
        return req, steps

    def check_conservation(self, req: dict) -> None:
        """Every request prefilled once, transferred once, decoded once, or rejected."""
        left = (len(self.clients), sum(map(len, self.kv_wait)), sum(map(len, self.ready)), sum(self.in_transfer))
        if any(left):
            raise RuntimeError(f"disaggregated conservation violated: {left[0]} requests still prefilling, "
                               f"{left[1]} waiting for decode KV, {left[2]} for a running slot, "
                               f"{left[3]} in transfer at the end")
        held = [rep.index for rep in self.prefill_replicas if rep.kv.held]
        if held:
            raise RuntimeError(f"prefill workers {held}: KV blocks still held for transfers at the end")
