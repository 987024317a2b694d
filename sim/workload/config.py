"""``workload.*`` config: what requests to send and when (pydantic v2, ``extra="forbid"``).

Three kinds of workload, told apart by which keys are set:

* **built-in or file** — ``name: chat`` (or a path to a workload YAML); its keys are
  read from ``workloads/NAME.yaml`` and any key given here overrides them
  (:func:`sim.workload.builtin.resolve_workload`).
* **trace** — ``trace: PATH``: arrivals and lengths from a real trace
  (:mod:`sim.workload.traces`); the trace-only keys ``window_s``, ``speedup``,
  ``sample_fraction``, ``jitter_s`` apply.
* **synthetic** — ``input_len`` and ``output_len`` length specs plus an arrival
  process and ``num_requests`` / ``duration_s``.

With none of ``name``, ``trace``, ``input_len``, ``output_len`` set, the built-in
``default`` workload is used and the keys given here override it.

Arrivals follow ``vllm bench serve`` (``vllm/benchmarks/serve.py::get_request``):
``request_rate`` in req/s (unset or ``inf`` = every request at t = 0, vLLM's
default); gaps Gamma(shape = burstiness, scale = 1/(rate·burstiness)), rescaled so
the last send is at N/rate. ``max_concurrency`` makes the run closed-loop (the
engine then ignores the arrival times).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator, model_validator

from sim.errors import ConfigError
from sim.schema import error_text
# the length specs live in sim/workload/lengths.py; re-exported for sim.workload's users
from sim.workload.lengths import (MAX_LENGTH_TOKENS, EmpiricalLen, FixedLen, LengthSpec,  # noqa: F401
                                  LognormalLen, UniformLen)

_STRICT = ConfigDict(extra="forbid")

MAX_NUM_REQUESTS = 50_000_000
#: Latest send time (s, ~32 years) of a run. The simulated clock is float64 seconds:
#: its spacing (ULP) at time t is 2^(floor(log2 t) - 52), which for t < 2^30 s
#: (1.07e9) is at most 2^-23 s ≈ 0.12 µs, so engine steps (µs to ms), and the
#: latencies taken as differences of clock readings, keep sub-µs resolution. At
#: 1e12 s the spacing is 122 µs and at 1e14 s 15.6 ms: steps vanish into the
#: rounding and TTFT/E2EL come out 0 or multiples of 15.625 ms. Synthetic
#: workloads (rate x count, duration, conversation think times), replayed traces
#: (:func:`sim.workload.generate._check_replayed_span`) and trace timestamps
#: (:data:`sim.workload.traces.MAX_TRACE_TIMESTAMP_S`) are refused beyond it.
MAX_SIMULATED_SPAN_S = 1e9
#: The simulated clock's own limit: requests are sent by MAX_SIMULATED_SPAN_S and the
#: run may drain for as long again (spacing at 2e9 s: 2^-22 s ≈ 0.24 µs). A trace that
#: ends at the send limit must not fail at the clock's (it did, naming no file or row).
MAX_SIMULATED_CLOCK_S = 2 * MAX_SIMULATED_SPAN_S
#: Priorities are stored as int64.
_INT64 = (-(2 ** 63), 2 ** 63 - 1)
TRACE_FORMATS = ("azure", "mooncake", "burstgpt", "lengths", "generic")
ARRIVALS = ("poisson", "gamma", "constant", "inf", "trace")



# ---------------------------------------------------------------- other parts
class ColumnsConfig(BaseModel):
    """Column names of a ``generic`` trace. Without ``arrival`` the rows are
    lengths only and the configured arrival process supplies the times."""

    model_config = _STRICT
    arrival: str | None = None
    input: str
    output: str
    arrival_unit: Literal["s", "ms"] = "s"


class SharedPrefixConfig(BaseModel):
    """A ``fraction`` of requests (of sessions, with ``conversation``) start with
    one of ``num_prefixes`` system prompts (chosen uniformly) of ``prefix_len``
    tokens, *added* to the sampled input length."""

    model_config = _STRICT
    fraction: float = Field(default=1.0, ge=0, le=1)
    #: at most one per request (checked against num_requests where it is set)
    num_prefixes: int = Field(default=1, ge=1, le=MAX_NUM_REQUESTS)
    prefix_len: int = Field(ge=1, le=MAX_LENGTH_TOKENS)


class ConversationConfig(BaseModel):
    """Multi-turn sessions. A ``fraction`` of sessions have ``num_turns`` turns
    (an int, or [low, high] drawn uniformly); the rest are single requests.
    Turn t+1 is sent ``think_time_s`` (fixed, or [low, high] uniform) after turn t
    was *sent* — open loop; pick it above a turn's latency so the earlier turn's
    KV blocks exist. Turn t+1's prompt = turn t's prompt + its output + a new
    message of ``turn_input_len`` tokens (default: ``input_len``)."""

    model_config = _STRICT
    fraction: float = Field(default=1.0, ge=0, le=1)
    num_turns: int | tuple[int, int]
    think_time_s: float | tuple[float, float]
    turn_input_len: LengthSpec | None = None

    @field_validator("num_turns")
    @classmethod
    def _turns(cls, v: int | tuple[int, int]) -> int | tuple[int, int]:
        lo, hi = (v, v) if isinstance(v, int) else v
        if lo < 1 or lo > hi or hi > MAX_NUM_REQUESTS:
            raise ValueError(f"need 1 <= low <= high <= {MAX_NUM_REQUESTS:,} turns, got {v}")
        return v

    @field_validator("think_time_s")
    @classmethod
    def _think(cls, v: float | tuple[float, float]) -> float | tuple[float, float]:
        lo, hi = (v, v) if isinstance(v, (int, float)) else v
        if not (0 <= lo <= hi <= MAX_SIMULATED_SPAN_S):
            raise ValueError(f"need 0 <= low <= high <= {MAX_SIMULATED_SPAN_S:g} seconds (~32 years: float64 "
                             f"seconds past it are too coarse for engine steps), got {v}")
        return v

    def max_think_s(self) -> float:
        """The longest gap between two turns of a session."""
        return float(self.think_time_s if isinstance(self.think_time_s, (int, float)) else self.think_time_s[1])

    def max_turns(self) -> int:
        return self.num_turns if isinstance(self.num_turns, int) else self.num_turns[1]


class PriorityClass(BaseModel):
    model_config = _STRICT
    fraction: float = Field(gt=0, le=1)
    priority: int = Field(ge=_INT64[0], le=_INT64[1])  # int64, as the request arrays hold it


# ---------------------------------------------------------------- the config
class WorkloadConfig(BaseModel):
    """All ``workload.*`` keys. See the module docstring and ``workloads/README.md``."""

    model_config = _STRICT

    name: str | None = None
    #: The workload (built-in name or file) that ``name``, or the implicit ``default``,
    #: was expanded from (set by :func:`~sim.workload.builtin.resolve_workload_dict`,
    #: which consumes ``name``); a plain field so that copies of a config keep it.
    #: A label only: nothing reads it but the run's summary (``config.workload.name``).
    expanded_from: str | None = None
    trace: str | None = None
    trace_format: Literal["azure", "mooncake", "burstgpt", "lengths", "generic"] | None = None
    columns: ColumnsConfig | None = None
    #: capped: a run holds ~0.2 KiB per request (lengths, result columns), so
    #: 10^9 would exhaust memory before a result; split longer studies
    num_requests: int | None = Field(default=None, ge=1, le=MAX_NUM_REQUESTS)
    duration_s: float | None = Field(default=None, gt=0)
    arrival: Literal["poisson", "gamma", "constant", "inf", "trace"] | None = None
    request_rate: float | None = None
    burstiness: float = 1.0
    max_concurrency: int | None = Field(default=None, ge=1)
    input_len: LengthSpec | None = None
    output_len: LengthSpec | None = None
    max_tokens: int | Literal["output_len"] = "output_len"
    shared_prefix: SharedPrefixConfig | None = None
    conversation: ConversationConfig | None = None
    priority_classes: list[PriorityClass] | None = None
    num_warmup_requests: int = Field(default=0, ge=0, le=MAX_NUM_REQUESTS)
    seed: int | None = Field(default=None, ge=0)
    # Key granularity (tokens) of synthetic prefix keys; 16 = vLLM's default block size.
    prefix_chunk_tokens: int = Field(default=16, ge=1)
    # Keys shared by every trace loader.
    window_s: tuple[float, float] | None = None
    speedup: float = Field(default=1.0, ge=1e-3, le=1e6)
    sample_fraction: float = Field(default=1.0, gt=0, le=1)
    clip_to_max_model_len: StrictBool = False
    skip_bad_rows: StrictBool = False
    # Uniform [0, jitter_s) added to each trace timestamp, e.g. 3.0 for Mooncake,
    # whose timestamps are quantised to ~3 s steps (see ../shared/traces/README.md).
    jitter_s: float = Field(default=0.0, ge=0, le=3600.0)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_scalars(cls, v: Any, info) -> Any:
        """``num_requests: true`` is a mistake, not 1 request (pydantic would coerce it);
        ``null`` for a key that cannot be unset (``burstiness``) means its default."""
        field = cls.model_fields[info.field_name]
        ann = str(field.annotation)
        if isinstance(v, bool) and "bool" not in ann and ("int" in ann or "float" in ann):
            raise ValueError(f"expected a number, got {v!r}")
        if v is None and "None" not in ann and not field.is_required():
            return field.get_default(call_default_factory=True)
        return v

    @field_validator("arrival", mode="before")
    @classmethod
    def _arrival(cls, v):
        # --set workload.arrival=inf parses the value as the float inf: the name is meant
        return "inf" if isinstance(v, float) and v == math.inf else v

    @field_validator("request_rate")
    @classmethod
    def _rate(cls, v: float | None) -> float | None:
        if v is not None and (math.isnan(v) or v <= 0):
            raise ValueError(f"request_rate must be > 0 req/s or inf, got {v}")
        return v

    @field_validator("burstiness")
    @classmethod
    def _burst(cls, v: float) -> float:
        if math.isnan(v) or v <= 0:
            raise ValueError(f"burstiness must be > 0 (1 = Poisson, inf = constant), got {v}")
        return v

    @field_validator("max_tokens")
    @classmethod
    def _max_tokens(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError(f"max_tokens must be >= 1 or 'output_len', got {v}")
        return v

    @field_validator("window_s")
    @classmethod
    def _window(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not (0 <= v[0] < v[1]):
            raise ValueError(f"window_s must be (start, end) with 0 <= start < end seconds, got {v}")
        return v

    @field_validator("priority_classes")
    @classmethod
    def _classes(cls, v: list[PriorityClass] | None) -> list[PriorityClass] | None:
        if v is not None:
            total = sum(c.fraction for c in v)
            if not v or abs(total - 1.0) > 1e-6:
                raise ValueError(f"priority_classes fractions must sum to 1, got {total:g}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "WorkloadConfig":
        if self.name is not None and self.trace is not None:
            raise ValueError("give either name (a built-in workload or workload file) or trace, not both")
        if self.burstiness != 1.0 and self.arrival not in (None, "gamma"):
            raise ValueError(f"burstiness={self.burstiness} applies to arrival: gamma, not {self.arrival} "
                             "(poisson is gamma with burstiness 1)")
        if self.arrival == "trace" and self.trace is None and self.name is None:
            raise ValueError("arrival: trace needs trace: PATH (a trace file with timestamps)")
        if self.arrival == "trace" and self.request_rate is not None:
            raise ValueError("request_rate does not apply to arrival: trace (use speedup to replay faster)")
        if self.columns is not None and self.trace_format not in (None, "generic"):
            raise ValueError(f"columns applies to trace_format: generic, not {self.trace_format}")
        if self.name is not None:
            return self  # completed by the named workload; checked again after resolving
        if self.arrival in ("poisson", "gamma", "constant") and self.request_rate is None and (
                self.trace is not None or self.input_len is not None or self.output_len is not None):
            raise ValueError(f"arrival: {self.arrival} needs request_rate (req/s)")
        if self.trace is not None:
            if self.input_len is not None or self.output_len is not None:
                raise ValueError("input_len/output_len cannot be combined with trace (lengths come from the trace)")
            if self.shared_prefix is not None or self.conversation is not None:
                raise ValueError("shared_prefix/conversation apply to synthetic workloads only; "
                                 "a trace's prefix structure comes from the trace (Mooncake hash_ids)")
            return self
        trace_only = {"trace_format": self.trace_format, "columns": self.columns, "window_s": self.window_s,
                      "speedup": None if self.speedup == 1.0 else self.speedup,
                      "sample_fraction": None if self.sample_fraction == 1.0 else self.sample_fraction,
                      "jitter_s": None if self.jitter_s == 0.0 else self.jitter_s}
        bad = [k for k, v in trace_only.items() if v is not None]
        if bad:
            raise ValueError(f"{', '.join(bad)} apply only to a trace (set trace: PATH)")
        if self.arrival == "trace":
            raise ValueError("arrival: trace needs trace: PATH")
        if self.input_len is None and self.output_len is None:
            return self  # the built-in default workload, overridden by the keys given
        if self.input_len is None or self.output_len is None:
            raise ValueError("a synthetic workload needs both input_len and output_len (lengths given without a "
                             "workload name replace the built-in default; to change one key of it, name it: "
                             "--workload default --set workload.KEY=VALUE)")
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("a synthetic workload needs num_requests or duration_s (lengths given without a "
                             "workload name replace the built-in default; to change one key of it, name it: "
                             "--workload default --set workload.KEY=VALUE)")
        if self.duration_s is not None and self.is_infinite_rate():
            # every request is sent at t = 0 (or as a client frees up): a duration keeps them all
            if self.max_concurrency is not None:
                raise ValueError(f"duration_s = {self.duration_s:g} applies to arrivals at a request_rate; closed-loop "
                                 "clients (max_concurrency without a request rate) send num_requests back to back, "
                                 "where it has no effect: set num_requests and drop duration_s, or give a "
                                 "request_rate")
            raise ValueError(f"duration_s = {self.duration_s:g} needs a finite request_rate: with an infinite rate "
                             "every request arrives at t = 0 (set num_requests and drop duration_s, or give a "
                             "request_rate)")
        if self.num_requests is None and self.duration_s * self.request_rate > MAX_NUM_REQUESTS:
            raise ValueError(f"duration_s ({self.duration_s:g}) x request_rate ({self.request_rate:g}) is "
                             f"{self.duration_s * self.request_rate:,.0f} requests, over the {MAX_NUM_REQUESTS:,} "
                             "a run takes")
        total = (self.num_requests or 0) + self.num_warmup_requests
        if self.num_requests is not None and total > MAX_NUM_REQUESTS:
            raise ValueError(f"num_requests ({self.num_requests:,}) + num_warmup_requests "
                             f"({self.num_warmup_requests:,}) is over the {MAX_NUM_REQUESTS:,} a run takes")
        if (self.shared_prefix is not None and self.num_requests is not None
                and self.shared_prefix.num_prefixes > total):
            raise ValueError(f"shared_prefix.num_prefixes = {self.shared_prefix.num_prefixes:,} is more system prompts "
                             f"than the {total:,} requests (num_requests + num_warmup_requests) could use; "
                             "at most one per request")
        span = 0.0
        if not self.is_infinite_rate():
            span = self.duration_s if self.num_requests is None else total / self.request_rate
            if span > MAX_SIMULATED_SPAN_S:
                raise ValueError(f"request_rate {self.request_rate:g} req/s spreads the requests over ~{span:.3g} s "
                                 f"of simulated time, beyond {MAX_SIMULATED_SPAN_S:g} s (~32 years), where float64 "
                                 "seconds are too coarse for millisecond engine steps; raise the rate")
        conv = self.conversation
        if conv is not None and conv.fraction > 0 and conv.max_turns() > 1:
            # the last turn of a session is sent (turns - 1) think times after its start
            turns = conv.max_turns() if self.num_requests is None else min(conv.max_turns(), total)
            last = span + (turns - 1) * conv.max_think_s()
            if self.duration_s is not None:
                last = min(last, self.duration_s)  # later turns are dropped
            if last > MAX_SIMULATED_SPAN_S:
                raise ValueError(f"conversation.think_time_s = {conv.think_time_s!r} with up to {turns:,} turns "
                                 f"sends the last turns ~{last:.3g} s into the run, beyond {MAX_SIMULATED_SPAN_S:g} s "
                                 "(~32 years), where float64 seconds are too coarse for engine steps; shorten the "
                                 "think time or the turns")
        return self

    # ------------------------------------------------------------ helpers
    def is_infinite_rate(self) -> bool:
        return self.arrival == "inf" or self.request_rate is None or math.isinf(self.request_rate)

    def arrival_process(self, has_timestamps: bool) -> str:
        """The arrival process used: ``trace`` for a timestamped trace unless set;
        ``inf`` when the rate is unset or infinite; ``gamma`` when burstiness ≠ 1."""
        if self.arrival is not None:
            return "inf" if self.arrival != "trace" and self.is_infinite_rate() else self.arrival
        if has_timestamps:
            return "trace"
        if self.is_infinite_rate():
            return "inf"
        return "poisson" if self.burstiness == 1.0 else "gamma"

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "workload",
                  key_lines: dict[str, int] | None = None) -> "WorkloadConfig":
        """Validate ``data``; on failure raise :class:`ConfigError` with one line per
        offending key: ``SOURCE[:LINE]: workload.KEY = VALUE: why`` (``key_lines`` maps
        top-level keys to their line in the source file)."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: workload must be a mapping of keys, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, source, key_lines)) from None


_UNION_TAGS = {"int", "float", "str", "bool", "none", "tuple[int, int]", "tuple[float, float]",
               "literal['output_len']", "list[PriorityClass]", "fixed", "uniform", "lognormal", "empirical"}


def format_validation_error(exc: ValidationError, source: str, key_lines: dict[str, int] | None = None) -> str:
    """One line per offending key: ``SOURCE[:LINE]: workload.KEY = VALUE: why``."""
    lines: dict[str, list[str]] = {}
    for err in exc.errors():
        loc = [str(p) for p in err["loc"] if str(p) not in _UNION_TAGS and not str(p).startswith("function-")]
        key = "workload." + ".".join(loc) if loc else "workload"
        msg = error_text(err)
        if err["type"] == "extra_forbidden":
            valid = f"; valid keys: {', '.join(WorkloadConfig.model_fields)}" if len(loc) == 1 else ""
            msg = f"unknown key{valid}"
        value = err.get("input")
        shown = "" if isinstance(value, dict) and err["type"] != "extra_forbidden" else f" = {value!r}"
        line = (key_lines or {}).get(loc[0]) if loc else None
        where = f"{source}:{line}" if line else source
        if key in lines:  # a union: say every alternative
            lines[key][1] += f" or {msg[0].lower()}{msg[1:]}"
        else:
            lines[key] = [f"{where}: {key}{shown}: ", msg]
    return "\n".join(a + b for a, b in lines.values())
