"""Synthetic arrivals, lengths and priorities, each drawn from an explicit
``numpy.random.Generator``.

Arrivals follow ``vllm bench serve`` (``vllm/benchmarks/serve.py::get_request``):
gaps are Gamma(shape = burstiness, scale = 1/(rate·burstiness)) — mean 1/rate,
coefficient of variation 1/√burstiness, burstiness 1 = Poisson, ∞ = constant —
and the cumulative times are rescaled so the last send is exactly at N/rate. The
first request is sent after one gap, as in vLLM. vLLM draws from the global
``np.random``; servesim uses a seeded Generator, so the same seed gives the same
*distribution*, not vLLM's bit-identical times.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import numpy.random  # noqa: F401  (numpy imports it on first use of np.random: an import, done here)

from sim.errors import ConfigError
from sim.workload.config import EmpiricalLen, FixedLen, LognormalLen, PriorityClass, UniformLen

# Child streams of one seed, so that e.g. changing the output distribution does not
# move the arrival times. Never renumber: it would change every seeded workload.
STREAMS = {"arrival": 1, "input": 2, "output": 3, "prefix": 4, "conversation": 5,
           "priority": 6, "sample": 7, "jitter": 8, "turn_input": 9}


def child_rng(seed: int, stream: str) -> np.random.Generator:
    """Independent generator for ``stream`` (a key of :data:`STREAMS`) derived from ``seed``."""
    if seed < 0:
        raise ConfigError(f"seed must be >= 0, got {seed}")
    return np.random.default_rng(np.random.SeedSequence([int(seed), STREAMS[stream]]))


# ------------------------------------------------------------------ arrivals
def arrival_times(n: int, process: str, rate: float | None, burstiness: float,
                  rng: np.random.Generator) -> np.ndarray:
    """``n`` send times (float64 s, non-decreasing) for ``process`` in
    {poisson, gamma, constant, inf}. poisson/gamma are rescaled so the last is
    exactly n/rate (vLLM); constant sends at (i+1)/rate; inf sends all at 0."""
    if n <= 0:
        return np.zeros(0)
    if process == "inf" or rate is None or math.isinf(rate):
        return np.zeros(n)
    if process == "constant" or (process == "gamma" and math.isinf(burstiness)):
        return np.arange(1, n + 1, dtype=np.float64) / rate
    if process not in ("poisson", "gamma"):
        raise ConfigError(f"workload.arrival: unknown process {process!r}; valid: poisson, gamma, constant, inf")
    shape = 1.0 if process == "poisson" else burstiness
    t = np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), size=n))
    if t[-1] > 0:
        t *= (n / rate) / t[-1]  # vLLM's normalize_factor
    return t


def arrival_times_until(duration_s: float, process: str, rate: float, burstiness: float,
                        rng: np.random.Generator) -> np.ndarray:
    """Send times ≤ ``duration_s`` of a renewal process at ``rate`` (no rescaling:
    the count is random for poisson/gamma, ⌊duration·rate⌋ for constant)."""
    if process == "inf" or math.isinf(rate):
        raise ConfigError("workload.duration_s needs a finite request_rate")
    if process == "constant" or (process == "gamma" and math.isinf(burstiness)):
        return np.arange(1, int(math.floor(duration_s * rate + 1e-9)) + 1, dtype=np.float64) / rate
    shape = 1.0 if process == "poisson" else burstiness
    chunk = max(64, int(1.2 * duration_s * rate) + 64)
    parts, total = [], 0.0
    while total <= duration_s:
        t = total + np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), size=chunk))
        parts.append(t)
        total = float(t[-1])
    t = np.concatenate(parts)
    return t[t <= duration_s]


# ------------------------------------------------------------------ lengths
def sample_lengths(spec: FixedLen | UniformLen | LognormalLen | EmpiricalLen, n: int,
                   rng: np.random.Generator,
                   read_column: Callable[[str, str], np.ndarray] | None = None) -> np.ndarray:
    """``n`` token counts (int64, ≥ 1) from a length spec. ``read_column(path, column)``
    loads an empirical table (default: :func:`sim.workload.traces.read_length_column`)."""
    if isinstance(spec, FixedLen):
        return np.full(n, spec.value, dtype=np.int64)
    if isinstance(spec, UniformLen):
        lo, hi = spec.bounds()
        return rng.integers(lo, hi + 1, size=n, dtype=np.int64)
    if isinstance(spec, LognormalLen):
        mu = math.log(spec.mean) - spec.sigma ** 2 / 2
        x = np.rint(rng.lognormal(mu, spec.sigma, size=n))
        hi = float(spec.max) if spec.max is not None else 2.0 ** 62  # int64-safe cap
        return np.clip(x, spec.min, hi).astype(np.int64)
    if isinstance(spec, EmpiricalLen):
        if read_column is None:
            from sim.workload.traces import read_length_column
            read_column = read_length_column
        values = read_column(spec.path, spec.column)
        return rng.choice(values, size=n).astype(np.int64)
    raise ConfigError(f"unknown length spec {spec!r}")  # pragma: no cover - pydantic rejects first


def length_mean(spec: FixedLen | UniformLen | LognormalLen | EmpiricalLen) -> float | None:
    """The spec's nominal mean in tokens (None for empirical); for descriptions."""
    if isinstance(spec, FixedLen):
        return float(spec.value)
    if isinstance(spec, UniformLen):
        lo, hi = spec.bounds()
        return (lo + hi) / 2
    if isinstance(spec, LognormalLen):
        return spec.mean
    return None


# ------------------------------------------------------------------ priorities
def assign_priorities(classes: Sequence[PriorityClass] | None, n: int,
                      rng: np.random.Generator) -> np.ndarray:
    """Per-request priority (int64): class i with probability ``fraction_i``; 0 without classes."""
    if not classes:
        return np.zeros(n, dtype=np.int64)
    p = np.array([c.fraction for c in classes], dtype=np.float64)
    idx = rng.choice(len(classes), size=n, p=p / p.sum())
    return np.array([c.priority for c in classes], dtype=np.int64)[idx]
