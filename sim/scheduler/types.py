"""The scheduler's value types: its limits (vLLM's knob names), one step's
output, and the waiting queue (FCFS deque or priority heap)."""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from sim.request import Request


@dataclass(frozen=True)
class SchedulerLimits:
    """The scheduler's knobs, vLLM names (``vllm/config/scheduler.py``)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    block_size: int = 16
    long_prefill_token_threshold: int = 0
    policy: str = "fcfs"
    capacity_scheduler_policy: str | None = None
    #: SGLang ``max_prefill_tokens``: new tokens of one prefill batch (prefill_first modes)
    max_prefill_tokens: int | None = None
    #: SGLang ``max_req_len``: tokens one request may hold where the KV pool is smaller than a
    #: max_model_len sequence (a longer prompt is rejected, max_tokens cut to fit); None: no cap
    max_req_len: int | None = None

    def __post_init__(self) -> None:
        from sim.errors import ConfigError

        for key in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size"):
            v = getattr(self, key)
            if not isinstance(v, int) or v <= 0:
                raise ConfigError(f"{key} must be a positive integer, got {v!r}")
        mrl = self.max_req_len
        if mrl is not None and (not isinstance(mrl, int) or mrl <= 5 or mrl >= self.max_model_len):
            raise ConfigError(f"max_req_len must be an integer in (5, max_model_len) or unset, got {mrl!r}")
        mpt = self.max_prefill_tokens
        if mpt is not None and (not isinstance(mpt, int) or mpt <= 0):
            raise ConfigError(f"max_prefill_tokens must be a positive integer or unset, got {mpt!r}")
        if self.policy not in ("fcfs", "priority"):
            raise ConfigError(f"policy must be one of fcfs, priority; got {self.policy!r}")
        if self.capacity_scheduler_policy not in (None, "guaranteed_no_evict", "max_utilization"):
            raise ConfigError(
                "capacity_scheduler_policy must be one of guaranteed_no_evict, max_utilization "
                f"(or unset); got {self.capacity_scheduler_policy!r}"
            )


@dataclass
class SchedulerOutput:
    """One engine step's work.

    ``scheduled[i]`` runs ``num_scheduled_tokens[i]`` tokens on top of
    ``num_computed_before[i]`` tokens already in its KV cache.
    ``padding_contexts`` are extra sequences the forward pass computes without
    emitting anything (static batching keeps finished sequences in the batch,
    one token each at their final length). :attr:`new_tokens` and
    :attr:`context_lens` are what the cost model is charged for: the scheduled
    sequences, then the padding. ``admitted`` are the requests that entered the
    running set this step. ``num_partial``: scheduled prefill chunks that stop
    short of the sequence's end (they emit no token this step).
    """

    scheduled: list[Request] = field(default_factory=list)
    num_scheduled_tokens: list[int] = field(default_factory=list)
    num_computed_before: list[int] = field(default_factory=list)
    padding_contexts: list[int] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    num_partial: int = 0

    @property
    def new_tokens(self) -> list[int]:
        return self.num_scheduled_tokens + [1] * len(self.padding_contexts)

    @property
    def context_lens(self) -> list[int]:
        return self.num_computed_before + self.padding_contexts

    def forward_shape(self) -> tuple[list[int], list[int]]:
        """(new tokens, context lengths) per sequence of the forward pass, the
        cost model's inputs: the scheduled ones, plus the padding sequences."""
        if self.padding_contexts:
            return self.new_tokens, self.context_lens
        return self.num_scheduled_tokens, self.num_computed_before

    @property
    def num_batched_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens

    @property
    def is_empty(self) -> bool:
        return not self.scheduled and not self.padding_contexts


class WaitingQueue:
    """FCFS: a deque with preempted requests pushed to the front (vLLM
    ``FCFSRequestQueue.prepend_request``). PRIORITY: a heap on
    (priority, arrival_time, request_id) — lower runs first, as vLLM."""

    def __init__(self, policy: str) -> None:
        self.priority = policy == "priority"
        self.reordered = False
        self._dq: deque[Request] = deque()
        self._heap: list[tuple[int, float, int, Request]] = []

    def __len__(self) -> int:
        return len(self._heap) if self.priority else len(self._dq)

    def __bool__(self) -> bool:  # hot: tested every scheduling round
        return bool(self._heap) if self.priority else bool(self._dq)

    def add(self, req: Request) -> None:
        if self.priority:
            heapq.heappush(self._heap, (req.priority, req.arrival_time, req.request_id, req))
        else:
            self._dq.append(req)

    def prepend(self, req: Request) -> None:
        if self.priority:
            self.add(req)
        else:
            self._dq.appendleft(req)

    def peek(self) -> Request:
        return self._heap[0][3] if self.priority else self._dq[0]

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[3] if self.priority else self._dq.popleft()

    def reorder(self, key) -> None:
        """Re-sort the queue by ``key(request)`` (stable): the hook custom
        policies use to change the admission order. PRIORITY queues ignore it."""
        self.reordered = True  # a new arrival may now overtake the head
        if not self.priority:
            ordered = sorted(self._dq, key=key)
            self._dq.clear()
            self._dq.extend(ordered)

    def __iter__(self):
        if self.priority:
            return (t[3] for t in sorted(self._heap))
        return iter(self._dq)
