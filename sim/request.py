"""The simulated request, with vLLM's names (``vllm/v1/request.py``).

A request never carries token ids. For prefix caching it may carry
``prefix_keys``: content keys describing its token sequence (prompt, then
outputs) chunk by chunk, each key standing for ``prefix_chunk_tokens`` tokens.
Two requests whose keys agree on a chunk hold identical tokens there. Tokens
past the keys are unique to the request. Keys come from a trace's block hashes
(Mooncake: 512-token chunks) or from a workload's shared system prompts and
multi-turn conversations. See ``sim/kv_cache/hashing.py``.
"""

from __future__ import annotations

from enum import IntEnum


class RequestStatus(IntEnum):
    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED = 3
    REJECTED = 4


#: The members as module constants, for the paths that set or test a status
#: once per request: on Python 3.11 reading one off the class goes through the
#: Enum metaclass's ``__getattr__`` hook, several times slower than a global.
WAITING, RUNNING, PREEMPTED = RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.PREEMPTED
FINISHED, REJECTED = RequestStatus.FINISHED, RequestStatus.REJECTED


class Request:
    """One request's state. Times are float seconds of simulated time.

    ``max_tokens`` is what the client asked for (admission/reservation
    policies see only this); ``output_len`` is when it really stops (EOS). The
    request finishes after ``min(output_len, max_tokens)`` output tokens, or
    earlier when ``num_tokens`` reaches ``max_model_len`` (vLLM ``check_stop``).
    """

    __slots__ = (
        "request_id", "arrival_time", "num_prompt_tokens", "max_tokens", "output_len",
        "priority", "prefix_keys", "prefix_chunk_tokens", "client_id", "replica",
        "num_computed_tokens", "num_output_tokens", "num_cached_tokens", "num_preemptions",
        "status", "reason", "block_hashes",
        "first_scheduled_time", "first_token_time", "last_token_time", "finish_time",
        "preempted_time", "preempted_at_tokens", "preempted_s", "is_warmup",
        "num_output_tokens_target", "kv_capacity",
    )

    def __init__(
        self,
        request_id: int,
        arrival_time: float,
        num_prompt_tokens: int,
        max_tokens: int,
        output_len: int | None = None,
        priority: int = 0,
        prefix_keys: tuple[int, ...] | None = None,
        prefix_chunk_tokens: int = 0,
        client_id: int = -1,
        is_warmup: bool = False,
    ) -> None:
        if num_prompt_tokens < 1:
            raise ValueError(f"request {request_id}: num_prompt_tokens must be >= 1, got {num_prompt_tokens}")
        if max_tokens < 1:
            raise ValueError(f"request {request_id}: max_tokens must be >= 1, got {max_tokens}")
        self.request_id = request_id
        self.arrival_time = arrival_time
        self.num_prompt_tokens = num_prompt_tokens
        self.max_tokens = max_tokens
        if output_len is None:
            output_len = max_tokens
        elif output_len < 1:
            raise ValueError(f"request {request_id}: output_len must be >= 1, got {output_len}")
        self.output_len = output_len
        # Tokens this request will really emit (EOS or max_tokens, whichever first).
        self.num_output_tokens_target = output_len if output_len < max_tokens else max_tokens
        self.priority = priority
        self.prefix_keys = prefix_keys
        self.prefix_chunk_tokens = prefix_chunk_tokens
        self.client_id = client_id
        self.is_warmup = is_warmup
        self.replica = -1
        self.num_computed_tokens = 0
        self.num_output_tokens = 0
        self.num_cached_tokens = 0
        self.num_preemptions = 0
        self.status = WAITING
        self.reason = ""
        self.block_hashes: list | None = None  # filled lazily by the KV cache's hasher
        self.first_scheduled_time = -1.0
        self.first_token_time = -1.0
        self.last_token_time = -1.0
        self.finish_time = -1.0
        # Preemption bookkeeping: when it was preempted, how many tokens it had
        # computed then (it has "recovered" once it is back there), total time lost.
        self.preempted_time = -1.0
        self.preempted_at_tokens = 0
        self.preempted_s = 0.0
        #: KV slots (tokens) its block table holds, kept by the KV-cache manager
        #: so the scheduler's decode hot path can skip ``allocate_slots`` when
        #: the next token fits in the blocks already held (the hybrid manager
        #: sets it lower: the next token count at which its call does anything,
        #: sim/kv_cache/hybrid.py)
        self.kv_capacity = 0

    @property
    def num_tokens(self) -> int:
        """Prompt + output tokens so far (vLLM ``Request.num_tokens``)."""
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def is_finished(self) -> bool:
        return self.status >= RequestStatus.FINISHED

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return (
            f"Request(id={self.request_id}, prompt={self.num_prompt_tokens}, "
            f"out={self.num_output_tokens}/{self.num_output_tokens_target}, "
            f"computed={self.num_computed_tokens}, status={self.status.name})"
        )
