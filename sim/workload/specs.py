"""``RequestSpecs``: the requests of one run, as arrays in send order (what the engine consumes)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class RequestSpecs:
    """One entry per request, in send order (non-decreasing ``arrival_time_s``).

    * ``arrival_time_s`` — float64 seconds from 0 (open loop; closed-loop runs ignore it).
    * ``num_prompt_tokens`` — int64 prompt tokens, ≥ 1.
    * ``output_len`` — int64 true output length in tokens (where EOS falls), ≥ 1.
    * ``max_tokens`` — int64 tokens the client asks for (admission sees only this), ≥ 1.
    * ``priority`` — int64 (vLLM: lower value is served first under ``policy: priority``).
    * ``prefix_keys`` — per request a tuple of non-negative ints or None: content keys of
      the request's token sequence (prompt, then outputs), one per ``prefix_chunk_tokens``
      tokens, see ``sim/request.py``. Equal keys at the same position = identical
      tokens; tokens past the keys are unique. None when the workload has no sharing.
    * ``prefix_chunk_tokens`` — tokens per key (Mooncake: 512); 0 when there are no keys.
    * ``num_warmup`` — the first ``num_warmup`` requests are warm-up (excluded from statistics).
    * ``num_skipped_rows`` / ``num_clipped`` — malformed trace rows skipped
      (``skip_bad_rows``) and prompts cut to fit ``max_model_len`` (``clip_to_max_model_len``).
    * ``num_out_of_order_rows`` — trace rows timestamped before the row above them
      (the trace is replayed sorted by time).
    * ``source`` — a description of where the requests came from.
    """

    arrival_time_s: np.ndarray
    num_prompt_tokens: np.ndarray
    output_len: np.ndarray
    max_tokens: np.ndarray
    priority: np.ndarray
    prefix_keys: list[tuple[int, ...] | None] | None = None
    prefix_chunk_tokens: int = 0
    num_warmup: int = 0
    num_skipped_rows: int = 0
    num_clipped: int = 0
    num_out_of_order_rows: int = 0
    source: str = ""
    _n: int = field(init=False, repr=False, default=0)

    def __post_init__(self) -> None:
        arr = np.ascontiguousarray(self.arrival_time_s, dtype=np.float64)
        object.__setattr__(self, "arrival_time_s", arr)
        n = arr.shape[0]
        if arr.ndim != 1:
            raise ValueError(f"arrival_time_s must be 1-D, got shape {arr.shape}")
        if np.isnan(arr).any() or (n and (arr[0] < 0 or np.isinf(arr).any())):
            raise ValueError("arrival_time_s must be finite and >= 0 (NaN is not allowed)")
        if n > 1 and np.any(np.diff(arr) < 0):
            raise ValueError("arrival_time_s must be non-decreasing (send order)")
        for name in ("num_prompt_tokens", "output_len", "max_tokens", "priority"):
            a = np.ascontiguousarray(getattr(self, name), dtype=np.int64)
            if a.shape != (n,):
                raise ValueError(f"{name} has shape {a.shape}, expected ({n},)")
            if name != "priority" and n and a.min() < 1:
                raise ValueError(f"{name} must be >= 1, got min {a.min()}")
            a.flags.writeable = False
            object.__setattr__(self, name, a)
        arr.flags.writeable = False
        if self.prefix_keys is not None:
            if len(self.prefix_keys) != n:
                raise ValueError(f"prefix_keys has {len(self.prefix_keys)} entries, expected {n}")
            if self.prefix_chunk_tokens < 1:
                raise ValueError("prefix_keys need prefix_chunk_tokens >= 1")
        if not 0 <= self.num_warmup <= n:
            raise ValueError(f"num_warmup={self.num_warmup} not in [0, {n}]")
        object.__setattr__(self, "_n", n)

    def __len__(self) -> int:
        return self._n

    @property
    def num_requests(self) -> int:
        """Requests counted in the statistics (total minus warm-up)."""
        return self._n - self.num_warmup

    def equals(self, other: "RequestSpecs") -> bool:
        """Same requests (arrays, keys and counters); for determinism checks."""
        arrays = ("arrival_time_s", "num_prompt_tokens", "output_len", "max_tokens", "priority")
        return (len(self) == len(other)
                and all(np.array_equal(getattr(self, a), getattr(other, a)) for a in arrays)
                and self.prefix_keys == other.prefix_keys
                and (self.prefix_chunk_tokens, self.num_warmup, self.num_skipped_rows, self.num_clipped,
                     self.num_out_of_order_rows)
                == (other.prefix_chunk_tokens, other.num_warmup, other.num_skipped_rows, other.num_clipped,
                    other.num_out_of_order_rows))
