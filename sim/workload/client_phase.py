"""Phases of closed-loop benchmark clients: start them spread over one request.

A closed-loop benchmark (``vllm bench serve --max-concurrency C``, SGLang's
``bench_serving``, genai-perf's concurrency mode) starts its C clients together.
With every request the same length (``isl`` in, exactly ``osl`` out), requests
admitted in the same engine step decode in the same steps and finish in the same
step, so the clients stay in *cohorts* unless something spreads them. Two
observations on ``../shared/silicon/dense_agg_dev.csv`` (``reports/validation``):

- The simulator has no mechanism that spreads a cohort once formed: per-step
  GPU-time noise (all members share every step), a serial frontend ingest path
  (a burst is staggered by a few ms, then collected by the next long prefill
  step) and random client or frontend delays of 5-50 ms were each tried and move
  TTFT by a few per cent at most. Nor one that merges spread clients: started
  at random phases, simulated clients stay spread for 20 cycles and more.
  Both states are stable; which one a run shows is set by its start.
- The measured systems are not in the synchronised state. Their TPOT includes
  the other clients' prefills (vLLM Qwen3-32B TP2, C = 8, isl 4,096: 26 ms
  against 15 ms for a decode-only step); in a cohort those prefills share the
  request's own prefill step instead. Their TTFT is also well above what fully
  spread clients give (about 3 single-request prefills at C = 8, growing with
  C): the clients are partly spread.

The initial condition is therefore a parameter, one per engine
(``client_phase_spread`` = f in [0, 1]): the first request of each client ends
after a number of output tokens drawn uniformly from
``[max(1, round((1 - f) * osl)), osl]`` (seeded), as if the client had joined
that far into its request, so the clients' later requests start at phases
spread over a fraction f of one request's decode. f = 0 is the synchronised
start; f = 1 spreads the clients over a whole request. Only the first request
of each client changes; it must be a warm-up request (excluded from the
statistics), so the measured requests are untouched. The client still asks for
``max_tokens`` = osl (admission and KV reservation see the full request).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from sim import presets
from sim.errors import ConfigError
from sim.workload.specs import RequestSpecs

#: Engine-override key (``sim/validate/rows.py``) that sets the spread.
PHASE_KEY = "client_phase_spread"

#: Per engine (``EnginePreset.client_phase_spread``): fitted earlier on a half of
#: ``dense_agg_dev.csv``; not refitted by ``benchmarks/validate_silicon.py``.
CLIENT_PHASE_SPREAD = presets.CLIENT_PHASE_SPREAD


def check_phase_spread(value: Any) -> float:
    """``value`` as a float in [0, 1]; ConfigError naming the key otherwise."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{PHASE_KEY}: must be a number in [0, 1], got {value!r}") from None
    if math.isnan(f) or not 0.0 <= f <= 1.0:
        raise ConfigError(f"{PHASE_KEY}: must be in [0, 1] (fraction of one request's output), got {value!r}")
    return f


def first_request_lengths(output_len: np.ndarray, spread: float, seed: int) -> np.ndarray:
    """Output lengths of the clients' first requests: uniform integers in
    ``[max(1, round((1 - spread) * L)), L]`` for each length L (seeded)."""
    out = np.asarray(output_len, dtype=np.int64)
    if spread <= 0.0 or out.size == 0:
        return out.copy()
    lo = np.maximum(1, np.rint((1.0 - spread) * out)).astype(np.int64)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 7]))
    return rng.integers(lo, out + 1)


def disperse_client_phases(specs: RequestSpecs, num_clients: int, spread: float, seed: int) -> RequestSpecs:
    """``specs`` with the first ``num_clients`` requests (each client's first, in
    a closed loop) shortened by :func:`first_request_lengths`. Unchanged for
    ``spread`` = 0. ConfigError if those requests are not all warm-up."""
    spread = check_phase_spread(spread)
    if spread == 0.0 or num_clients <= 0:
        return specs
    c = min(num_clients, len(specs))
    if specs.num_warmup < c:
        raise ConfigError(f"{PHASE_KEY}: the {c} shortened first requests must be warm-up requests; "
                          f"num_warmup_requests is {specs.num_warmup}")
    out = np.array(specs.output_len, dtype=np.int64)
    out[:c] = first_request_lengths(out[:c], spread, seed)
    return dataclasses.replace(specs, output_len=out)
