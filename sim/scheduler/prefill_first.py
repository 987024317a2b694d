"""``scheduler: prefill_first`` — prefill-priority steps, never mixed with decodes.

SGLang's scheduler (``python/sglang/srt/managers/scheduler.py``,
``schedule_policy.py``, 0.5.x; ``enable_mixed_chunk`` off by default):

- **Step choice** (``get_next_batch_to_run``): run a new prefill ("extend")
  batch whenever one can be formed; otherwise decode every running request.
  A prefill step carries no decodes, so every admission stalls the running
  requests for one prefill step.
- **Prefill batch** (``get_new_batch_prefill`` + ``PrefillAdder``): the
  request whose prompt is mid-chunk comes first and takes up to
  ``chunked_prefill_size`` tokens (``max_num_batched_tokens`` here); then
  waiting requests in FCFS order while the chunk budget, the input budget
  ``max_prefill_tokens`` and ``max_running_requests`` (``max_num_seqs``)
  allow. A request larger than the chunk budget left is cut there and
  continues in the next prefill batch (``prefill_first_whole``: never cut;
  SGLang with ``chunked_prefill_size = -1``); one larger than the input budget
  left joins only an empty batch.
- **Admission** (``PrefillAdder.add_one_req``): the candidate needs
  ``extend_input_len + min(max_new_tokens, 4096) < rem_total_tokens``, where
  ``rem_total_tokens`` = free KV tokens − Σ over running requests of
  ``min(max_new_tokens − generated, 4096) × new_token_ratio`` − what the batch
  already took (its inputs and their clipped ``max_new_tokens``). The first
  failure stops the batch (``CLIP_MAX_NEW_TOKENS_ESTIMATION`` = 4096).
- **new_token_ratio** (``SGLANG_INIT_NEW_TOKEN_RATIO`` 0.7,
  ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`` 0.14 → floor 0.098,
  ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` 600): falls by (0.7 − 0.098)/600 per
  decode step down to the floor; a retraction resets it.
- **Decode out of memory → retract** (``ScheduleBatch.retract_decode``):
  when the free KV tokens cannot hold one more token for every running
  request, retract requests — fewest generated tokens first (ties: longest
  prompt) — at least one, until the rest have room for
  ``SGLANG_RETRACT_DECODE_STEPS`` (20) steps; their KV is freed, they go to
  the back of the waiting queue and recompute prompt + outputs later; the
  ratio becomes min(1, (Σ generated + 20 × remaining) / Σ max_new_tokens) of
  the remaining requests.

- **Radix cache** (``enable_prefix_caching``; SGLang's default, off with
  ``--disable-radix-cache``): an admission matches the longest cached prefix
  (``RadixCache.match_prefix``) and the budgets count the rest
  (``req.extend_input_len``: ``PrefillAdder.add_one_req``); the KV cache's
  prefix cache stands in for the radix tree (hits on ``block_size``
  boundaries, page size 1 in the preset: token-granular as the tree; cached
  blocks are evicted least-recently-used first, as the tree's leaves).

Simplifications: the radix tree's own eviction order and its in-batch
prefix sharing (``--schedule-policy lpm`` reordering), LoRA and grammar queues,
and the overlap schedule's one-step lag are not modelled; KV is counted in
blocks of ``block_size`` tokens (SGLang's page size; 1 in the preset).
"""

from __future__ import annotations

from sim.errors import InfeasibleError
from sim.request import Request, RequestStatus
from sim.scheduler.base import Scheduler, SchedulerOutput

CLIP_MAX_NEW_TOKENS = 4096
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
RETRACT_DECODE_STEPS = 20


class PrefillFirstScheduler(Scheduler):
    name = "prefill_first"
    chunked_prefill = True
    #: SGLang ``--enable-mixed-chunk``: a prefill batch also decodes the running requests
    #: (:class:`MixedChunkPrefillFirstScheduler`)
    mixed_chunk = False

    def __init__(self, limits, kv) -> None:
        super().__init__(limits, kv)
        self.chunked_req: Request | None = None
        # new_token_ratio = max(base − steps × decay, floor): an integer count of
        # decode steps keeps merged decode runs bit-identical to single steps.
        self._ratio_base = INIT_NEW_TOKEN_RATIO
        self._ratio_steps = 0

    def rejection(self, req: Request) -> str | None:
        """Also reject a request the admission rule could never pass, even on an
        idle server: prompt + min(max_tokens, 4096) must stay below the pool."""
        pool = self.kv.num_usable_blocks * self.limits.block_size
        need = req.num_prompt_tokens + min(self.capped_max_tokens(req), CLIP_MAX_NEW_TOKENS)
        if need >= pool:
            return (f"prompt ({req.num_prompt_tokens}) + min(max_tokens, {CLIP_MAX_NEW_TOKENS}) "
                    f"= {need} tokens does not fit below the KV pool ({pool} tokens)")
        return super().rejection(req)

    @property
    def new_token_ratio(self) -> float:
        return max(self._ratio_base - self._ratio_steps * NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)

    # ------------------------------------------------------------------ steps
    def _schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        if not self._schedule_prefill(out):
            self._schedule_decode(out)
        return out

    def _schedule_prefill(self, out: SchedulerOutput) -> bool:
        lim = self.limits
        kv = self.kv
        waiting = self.waiting
        running = self.running
        chunked = self.chunked_req
        if chunked is None and (not waiting or len(running) >= lim.max_num_seqs):
            return False
        bs = lim.block_size
        avail = kv.num_free_blocks * bs  # before this batch allocates (SGLang's available_size)
        ratio = self.new_token_ratio
        offset = 0.0  # rem_total_token_offset: reserved for running requests and this batch
        for r in running:
            if r is not chunked:
                offset += min(r.max_tokens - r.num_output_tokens, CLIP_MAX_NEW_TOKENS) * ratio
        cur_offset = 0  # cur_rem_token_offset: tokens this batch allocates now
        rem_chunk = lim.max_num_batched_tokens if self.chunked_prefill else None
        rem_input = lim.max_prefill_tokens or lim.max_num_batched_tokens
        decodes: list[Request] = []
        if self.mixed_chunk and self.chunked_prefill:
            # PrefillAdder(mixed_with_decode_tokens=running_bs): the running decodes'
            # tokens come off the input and chunk budgets and count as allocated
            decodes = [r for r in running if r is not chunked]
            if decodes and self._decode_blocks_needed(decodes) > kv.num_free_blocks:
                return False  # no room to decode them all: the decode step retracts
            m = len(decodes)
            offset += m
            cur_offset += m
            rem_input -= m
            if rem_chunk is not None:
                rem_chunk -= m
        new_chunked = None
        if chunked is not None:  # add_chunked_req: always first, no admission check
            n = chunked.num_tokens - chunked.num_computed_tokens
            last = rem_chunk is None or n <= rem_chunk
            if not last:
                n = rem_chunk
            if kv.allocate_slots(chunked, n) is None:
                return False  # cannot happen after a successful admission; decode instead
            self._add_scheduled(out, chunked, n)
            offset += n + (0 if not last else min(chunked.max_tokens - chunked.num_output_tokens,
                                                  CLIP_MAX_NEW_TOKENS))
            cur_offset += n
            rem_input -= n
            if rem_chunk is not None:
                rem_chunk -= n
            if not last:
                new_chunked = chunked
        while waiting:
            if len(running) >= lim.max_num_seqs:
                break
            if (avail - offset <= 0 or avail - cur_offset <= 0 or rem_input <= 0
                    or (rem_chunk is not None and rem_chunk <= 0)):
                break  # PrefillAdder.budget_state
            req = waiting.peek()
            # the radix cache's longest cached prefix (match_prefix; ([], 0) with it off), then
            # the extend tokens: prompt, plus outputs for a retracted request (recompute), less it
            hit_blocks, num_hit = kv.get_computed_blocks(req)
            n = req.num_tokens - num_hit  # req.extend_input_len
            clipped = min(req.max_tokens - req.num_output_tokens, CLIP_MAX_NEW_TOKENS)
            if n + clipped >= avail - offset:
                break  # AddReqResult.NO_TOKEN
            if n >= rem_input and out.scheduled:
                break  # AddReqResult.OTHER: input budget, unless the batch is empty
            whole = rem_chunk is None or n <= rem_chunk
            take = n if whole else rem_chunk
            if kv.allocate_slots(req, take, num_hit, hit_blocks) is None:
                break
            waiting.pop()
            if req.status != RequestStatus.PREEMPTED:  # hit statistics: first admissions
                req.num_cached_tokens = num_hit
            kv.record_prefix_cache_stats(req, num_hit)
            req.num_computed_tokens = num_hit
            req.status = RequestStatus.RUNNING
            running.append(req)
            out.admitted.append(req)
            self._add_scheduled(out, req, take)
            offset += take + (clipped if whole else 0)
            cur_offset += take
            rem_input -= take
            if rem_chunk is not None:
                rem_chunk -= take
            if not whole:
                new_chunked = req
                break
        self.chunked_req = new_chunked
        if decodes and out.scheduled:  # ScheduleBatch.mix_with_running: one token each
            for req in decodes:
                if kv.allocate_slots(req, 1) is None:
                    raise RuntimeError("prefill_first (mixed chunk): decode allocation failed after the check")
                self._add_scheduled(out, req, 1)
        return bool(out.scheduled)

    def _schedule_decode(self, out: SchedulerOutput) -> None:
        """Decode every running request (the one mid-chunk excluded, as SGLang
        keeps it out of the running batch)."""
        if self.chunked_req is not None:
            batch = [r for r in self.running if r is not self.chunked_req]
        else:
            batch = self.running
        if not batch:
            return
        if self._decode_blocks_needed(batch) > self.kv.num_free_blocks:
            batch = self._retract(out, batch)
        else:
            self._ratio_steps += 1
        alloc = self.kv.allocate_slots
        for req in batch:
            if alloc(req, 1) is None:  # retraction leaves one request, which may find no room
                raise self._no_room_for_one(req)
            self._add_scheduled(out, req, 1)

    def _no_room_for_one(self, req: Request) -> InfeasibleError:
        """The engine's own failure where retraction leaves one decoding request
        and the KV pool has no room for its next token: SGLang's
        ``ScheduleBatch.retract_decode`` asserts ``available_size() > 0``
        ("No space left for only one request") and the server stops. Here the
        rest of the pool is held by the request mid-prefill, or by the one
        decoding request itself (a pool too small for its sequence)."""
        kv, c = self.kv, self.chunked_req
        held = (f"; request {c.request_id}, mid-prefill ({c.num_computed_tokens} of {c.num_prompt_tokens} prompt "
                f"tokens), holds {kv.num_held_blocks(c)}" if c is not None else "")
        return InfeasibleError(
            f"the KV cache ran out with one request left decoding: SGLang's retract_decode stops the server "
            f"here ('No space left for only one request'). Request {req.request_id} holds "
            f"{kv.num_held_blocks(req)} of the {kv.num_usable_blocks} usable blocks{held}; raise the KV cache "
            "(num_gpu_blocks_override, mem_fraction_static) or lower max_model_len")

    def _decode_blocks_needed(self, reqs, steps: int = 1) -> int:
        """Blocks the requests need to write ``steps`` more tokens each."""
        held = self.kv.num_held_blocks
        bs = self.limits.block_size
        need = 0
        for r in reqs:
            room = held(r) * bs - r.num_computed_tokens
            if room < steps:
                need += -(-(steps - room) // bs)
        return need

    def _retract(self, out: SchedulerOutput, batch: list[Request]) -> list[Request]:
        """SGLang ``retract_decode``: fewest outputs (then longest prompt) first,
        at least one, until the rest have room for RETRACT_DECODE_STEPS steps.
        Returns the requests left to decode."""
        order = sorted(batch, key=lambda r: (r.num_output_tokens, -r.num_prompt_tokens), reverse=True)
        first = True
        while len(order) > 1 and (first or self._decode_blocks_needed(order, RETRACT_DECODE_STEPS)
                                  > self.kv.num_free_blocks):
            first = False
            victim = order.pop()
            self._preempt(victim, front=False)  # to the back of the queue
            out.preempted.append(victim)
        gone = {id(r) for r in out.preempted}
        self.running = [r for r in self.running if id(r) not in gone]
        decoded = sum(r.num_output_tokens for r in order)
        max_new = sum(r.max_tokens for r in order)
        self._ratio_base = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(order)) / max(max_new, 1))
        self._ratio_steps = 0
        return order


class WholePrefillFirstScheduler(PrefillFirstScheduler):
    """``scheduler: prefill_first_whole`` — as ``prefill_first`` with chunked
    prefill off (SGLang ``--chunked-prefill-size -1``): prompts are never cut;
    a batch holds whole prompts up to ``max_prefill_tokens`` (the first one
    may exceed it)."""
    name = "prefill_first_whole"
    chunked_prefill = False


class MixedChunkPrefillFirstScheduler(PrefillFirstScheduler):
    """``scheduler: prefill_first_mixed`` — SGLang with ``--enable-mixed-chunk``
    (chunked prefill on): as ``prefill_first``, but a prefill batch also carries
    one decode token of every running request (the request mid-chunk excepted),
    so admissions no longer stall the running requests. SGLang 0.5.x
    (``python/sglang/srt/managers/scheduler.py::get_new_batch_prefill``):
    ``is_mixed_chunk = chunked_prefill_size is not None and enable_mixed_chunk``;
    the ``PrefillAdder`` gets ``mixed_with_decode_tokens = running_bs``, which
    it takes off ``rem_input_tokens`` (``max_prefill_tokens``) and
    ``rem_chunk_tokens`` (``chunked_prefill_size``) and adds to both token
    offsets (``schedule_policy.py::PrefillAdder.__init__``); the new batch is
    then ``mix_with_running(running_batch)`` (``ForwardMode.MIXED``). So with
    ``max_prefill_tokens`` = isl + 1500 (aiconfigurator's generated agg
    deployment) and B running requests a step admits one prompt, a second
    only if it is shorter than 1500 − B − isl tokens.

    When the free KV cannot hold one more token for every running request no
    prefill batch is formed (the decode step then retracts; SGLang's mixed path
    does not check). ``new_token_ratio`` decays on decode-only steps, as in
    SGLang."""
    name = "prefill_first_mixed"
    mixed_chunk = True
