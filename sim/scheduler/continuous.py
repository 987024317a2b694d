"""``scheduler: continuous`` — iteration-level continuous batching without
chunking (Orca, OSDI '22; vLLM v0's default scheduler, ``vllm/core/scheduler.py``
``_schedule_default``).

Requests join and leave at every step, but a step is *either* prefill *or*
decode, prefill first: when waiting requests can be admitted, the step runs
their whole prompts (up to ``max_num_batched_tokens``, which is raised to at
least ``max_model_len`` without chunking) and no decodes; otherwise it decodes
every running request. Decodes that run out of blocks preempt the
running-list tail by recompute (vLLM's V1 and later V0 default). Admission is
FCFS (or priority) with head-of-line blocking: the first request that does not
fit stops admission. The long prefill stalls every running decode for its
whole length — the ITL spike chunked prefill removes.
"""

from __future__ import annotations

from sim.scheduler.base import SchedulerOutput
from sim.scheduler.chunked import ChunkedPrefillScheduler


class ContinuousBatchingScheduler(ChunkedPrefillScheduler):
    name = "continuous"
    chunked_prefill = False

    def _schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        self._schedule_waiting(out, self.limits.max_num_batched_tokens)
        if not out.scheduled:
            # Nothing admissible: a decode-only step over every running request.
            self._schedule_running(out, self.limits.max_num_batched_tokens)
        return out
