"""``scheduler: static`` — static (request-level) batching, as FasterTransformer,
Hugging Face ``generate`` and TensorRT-LLM's legacy STATIC_BATCH
(ENGINE_SEMANTICS §5).

- Forming: only when no batch is in flight, take up to ``max_num_seqs`` waiting
  requests in queue order whose prompt + ``max_tokens`` blocks fit, reserving
  those blocks up front; the first that does not fit stops forming.
- One prefill pass over every prompt. Tokens are packed (Σ prompts, as
  TensorRT-LLM with ``remove_input_padding``), not padded to the longest
  prompt; the token budget does not split it (static engines have none).
- Decode in lockstep until every sequence is done. A finished sequence keeps
  its slot and its KV until the batch ends and is still computed (masked
  padding): each decode step is charged for all B sequences, finished ones at
  their final context length. Nobody joins a running batch.
- Streaming: TTFT ends with the prefill; ITL is the lockstep step time.
"""

from __future__ import annotations

from sim.request import Request, RequestStatus
from sim.scheduler.base import SchedulerOutput
from sim.scheduler.chunked import ChunkedPrefillScheduler


class StaticBatchingScheduler(ChunkedPrefillScheduler):
    name = "static"
    chunked_prefill = False  # a batch's prompts are scheduled whole
    frees_on_finish = False

    def __init__(self, limits, kv) -> None:
        super().__init__(limits, kv)
        self.batch: list[Request] = []  # the batch in flight, finished members included

    def _tokens_to_fit(self, req: Request) -> int:
        # Reserved up front: prompt + max_tokens (capped at max_model_len).
        return min(req.num_prompt_tokens + self.capped_max_tokens(req), self.limits.max_model_len)

    def _schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        if not self.batch:
            self._form_batch(out)
            return out
        for req in self.batch:
            if req.status == RequestStatus.RUNNING:
                self.kv.allocate_slots(req, 1)  # reserved at formation: never fails
                self._add_scheduled(out, req, 1)
            else:  # finished: still computed, as padding, at its final length
                out.padding_contexts.append(req.num_tokens - 1)
        return out

    def _form_batch(self, out: SchedulerOutput) -> None:
        lim = self.limits
        waiting = self.waiting
        while waiting and len(self.batch) < lim.max_num_seqs:
            req = waiting.peek()
            reserve = self._tokens_to_fit(req) - req.num_prompt_tokens
            if self.kv.allocate_slots(req, req.num_prompt_tokens, num_lookahead_tokens=reserve) is None:
                break
            waiting.pop()
            self._admit(req, 0)
            self.batch.append(req)
            self.running.append(req)
            out.admitted.append(req)
            self._add_scheduled(out, req, req.num_prompt_tokens)

    def _on_finished(self, finished: list[Request]) -> None:
        self.finished.extend(finished)
        self.running = [r for r in self.running if r.status == RequestStatus.RUNNING]
        if not self.running:  # the batch ends: release every member's KV
            for req in self.batch:
                self.kv.free(req)
            self.batch = []
