"""``scheduler: mixed`` — whole prompts batched together with decodes, no chunking.

TensorRT-LLM's in-flight batching with ``enable_chunked_prefill=False`` (its
default; ``docs/source/features/paged-attention-ifb-scheduler.md``,
``microBatchScheduler.cpp``; ENGINE_SEMANTICS §4): every step packs the
generation tokens of the running requests and then whole context requests, in
arrival order, while the packed tokens stay within ``max_num_tokens``
(``max_num_batched_tokens`` here) and the requests within ``max_batch_size``
(``max_num_seqs``); an unchunked context that does not fit stops the pass.
With ``capacity_scheduler_policy: guaranteed_no_evict`` (the TensorRT-LLM
preset) admission reserves each request's blocks to completion.

vLLM's V1 scheduler with ``enable_chunked_prefill: false`` behaves the same
way (running requests first, then waiting ones; a prompt larger than the
budget stops admission; ENGINE_SEMANTICS §1.3), with the budget raised to at
least ``max_model_len`` (``sim.config.resolve_scheduler_limits``).

Unlike ``continuous`` (prefill-only steps), decodes never stall for a
prefill here: they share the step, which lasts as long as the whole packed
batch.
"""

from __future__ import annotations

from sim.request import Request
from sim.scheduler.chunked import ChunkedPrefillScheduler


class MixedBatchingScheduler(ChunkedPrefillScheduler):
    name = "mixed"
    chunked_prefill = False

    def rejection(self, req: Request) -> str | None:
        """Also reject a prompt larger than the token budget: without chunking
        it could never be scheduled (TensorRT-LLM refuses such a request)."""
        budget = self.limits.max_num_batched_tokens
        if req.num_prompt_tokens > budget:
            return (f"prompt ({req.num_prompt_tokens} tokens) exceeds the token budget "
                    f"max_num_batched_tokens ({budget}) and chunked prefill is off")
        return super().rejection(req)

    def decode_rejection(self, req: Request) -> str | None:
        """A decode worker receives the prompt's KV computed: the token budget
        never has to hold the prompt (TensorRT-LLM's generation-only instance
        schedules one token per request), only the base rules apply."""
        return super().rejection(req)
