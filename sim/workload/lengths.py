"""Length specs of a synthetic workload's ``input_len`` / ``output_len``
(pydantic v2, ``extra="forbid"``): ``fixed``, ``uniform`` (``low``/``high``, or
vLLM ``random``'s ``mean`` and ``range_ratio``), ``lognormal`` and
``empirical`` (sampled from a table's column); a bare integer means ``fixed``.
Sampled by :mod:`sim.workload.synthetic`."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

_STRICT = ConfigDict(extra="forbid")

#: tokens: no model's context comes near it; larger values overflow int64 sampling
MAX_LENGTH_TOKENS = 100_000_000
#: log-standard-deviation: e^(10 sigma) at 10 already spans 43 decades
MAX_LOGNORMAL_SIGMA = 10.0


class FixedLen(BaseModel):
    """Every request has ``value`` tokens."""

    model_config = _STRICT
    dist: Literal["fixed"]
    value: int = Field(ge=1, le=MAX_LENGTH_TOKENS)


class UniformLen(BaseModel):
    """Integers uniform on [low, high] (inclusive), given either as ``low``/``high``
    or vLLM-``random`` style as ``mean`` and ``range_ratio`` r: [⌊mean(1−r)⌋, ⌈mean(1+r)⌉]
    (``vllm/benchmarks/datasets.py::RandomDataset``)."""

    model_config = _STRICT
    dist: Literal["uniform"]
    low: int | None = None
    high: int | None = None
    mean: float | None = None
    range_ratio: float | None = None

    @model_validator(mode="after")
    def _one_form(self) -> "UniformLen":
        bounds = self.low is not None or self.high is not None
        ratio = self.mean is not None or self.range_ratio is not None
        if bounds == ratio:
            raise ValueError("give either low and high, or mean and range_ratio (not both, not neither)")
        if bounds:
            if self.low is None or self.high is None:
                raise ValueError("low and high must both be given")
        else:
            if self.mean is None or self.range_ratio is None:
                raise ValueError("mean and range_ratio must both be given")
            if not 0 <= self.range_ratio < 1:
                raise ValueError(f"range_ratio must be in [0, 1), got {self.range_ratio}")
            if not self.mean * (1 + self.range_ratio) <= MAX_LENGTH_TOKENS:
                raise ValueError(f"mean x (1 + range_ratio) must be <= {MAX_LENGTH_TOKENS:,} tokens, "
                                 f"got mean={self.mean:g}")
        lo, hi = self.bounds()
        if lo < 1 or lo > hi or hi > MAX_LENGTH_TOKENS:
            raise ValueError(f"need 1 <= low <= high <= {MAX_LENGTH_TOKENS:,}, got low={lo}, high={hi}")
        return self

    def bounds(self) -> tuple[int, int]:
        if self.low is not None:
            return int(self.low), int(self.high)  # type: ignore[arg-type]
        return (int(math.floor(self.mean * (1 - self.range_ratio))),  # type: ignore[operator]
                int(math.ceil(self.mean * (1 + self.range_ratio))))  # type: ignore[operator]


class LognormalLen(BaseModel):
    """Lognormal with distribution mean ``mean`` tokens and log-standard-deviation
    ``sigma`` (so μ = ln(mean) − σ²/2), rounded to integers and clipped to
    [``min``, ``max``]. ``mean`` is that of the unclipped distribution: clipping
    moves the realised mean."""

    model_config = _STRICT
    dist: Literal["lognormal"]
    mean: float = Field(gt=0, le=MAX_LENGTH_TOKENS)
    sigma: float = Field(ge=0, le=MAX_LOGNORMAL_SIGMA)
    min: int = Field(default=1, ge=1, le=MAX_LENGTH_TOKENS)
    max: int | None = Field(default=None, le=MAX_LENGTH_TOKENS)

    @model_validator(mode="after")
    def _bounds(self) -> "LognormalLen":
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) > max ({self.max})")
        return self


class EmpiricalLen(BaseModel):
    """Sampled with replacement from column ``column`` of the table at ``path``
    (CSV, or JSON lines when the name ends in .jsonl/.json)."""

    model_config = _STRICT
    dist: Literal["empirical"]
    path: str
    column: str


def _length_shorthand(v: Any) -> Any:
    """``input_len: 1024`` (or ``--set workload.input_len=1024``) means
    ``{dist: fixed, value: 1024}``."""
    if isinstance(v, int) and not isinstance(v, bool):
        return {"dist": "fixed", "value": v}
    if isinstance(v, str) and v.strip().isdigit():
        return {"dist": "fixed", "value": int(v)}
    return v


LengthSpec = Annotated[Annotated[Union[FixedLen, UniformLen, LognormalLen, EmpiricalLen],
                                 Field(discriminator="dist")], BeforeValidator(_length_shorthand)]
