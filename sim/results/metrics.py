"""Run metrics as ``vllm bench serve`` defines them (``vllm/benchmarks/serve.py``;
ENGINE_SEMANTICS §6), aggregated with compact columns while the run goes.

- TTFT = first token − send time; E2EL = last token − send time;
  TPOT = (E2EL − TTFT) / (output_len − 1) for output_len > 1;
  ITL = gaps between consecutive tokens of a request, pooled over requests.
- Throughputs over the first send → last completion of the measured requests
  (warm-up requests excluded).
- Goodput (``--goodput ttft:MS tpot:MS e2el:MS``, after DistServe): requests
  meeting every given SLO per second; requests with one output token count as
  TPOT 0.
- Percentiles: numpy "linear". ITL is never stored per token: each engine step
  records (gap, number of tokens that saw it); :func:`weighted_percentile`
  equals ``np.percentile`` of the expanded sample exactly.

Times are seconds inside; summary keys carry ``_ms``.
"""

from __future__ import annotations

from array import array

import numpy as np
import numpy.ma  # noqa: F401  (np.median/np.percentile import it on first call: an import, done here)

REQUEST_COLUMNS = (
    "request_id", "replica", "arrival_time_s", "first_scheduled_time_s", "first_token_time_s",
    "finish_time_s", "num_prompt_tokens", "num_output_tokens", "max_tokens", "num_cached_tokens",
    "num_preemptions", "preempted_s", "is_warmup", "status",
)
STEP_COLUMNS = (
    "replica", "start_time_s", "num_steps", "step_time_s", "num_running_seqs", "num_waiting_reqs",
    "num_batched_tokens", "num_prefill_tokens", "num_decode_tokens", "kv_cache_usage", "num_preempted",
    "mean_kv_cache_usage", "mean_num_waiting_reqs",
)
STATUS_FINISHED, STATUS_REJECTED = 0, 1
PERCENTILES = (50, 90, 99)


class Columns:
    """Append-only typed columns, stored row-major in one ``array.array``
    (8 bytes a value, no Python object per value; one C-level ``extend`` per
    row instead of one append per column)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.flat = array("d")
        self.append = self.flat.extend  # append(row_tuple): one value per name, in order

    def __len__(self) -> int:
        return len(self.flat) // len(self.names)

    def extend_rows(self, rows: np.ndarray) -> None:
        """Append the rows of a (n, len(names)) float64 array."""
        self.flat.frombytes(np.ascontiguousarray(rows, dtype=np.float64).tobytes())

    def column(self, name: str) -> np.ndarray:
        """A strided view of one column (valid while nothing is appended)."""
        i = self.names.index(name)
        return np.frombuffer(self.flat, dtype=np.float64).reshape(-1, len(self.names))[:, i]

    def to_numpy(self, copy: bool = True) -> dict[str, np.ndarray]:
        """float64 arrays per column. ``copy=False`` returns strided views of
        the buffer (no second copy of a 100k-request run's steps in memory);
        the columns can then no longer grow (``BufferError`` on append)."""
        if not len(self.flat):
            return {n: np.zeros(0) for n in self.names}
        table = np.frombuffer(self.flat, dtype=np.float64).reshape(-1, len(self.names))
        return {n: (table[:, i].copy() if copy else table[:, i]) for i, n in enumerate(self.names)}


class WeightedSamples:
    """Values with integer weights (ITL gaps × tokens that saw them)."""

    def __init__(self) -> None:
        self.values = array("d")
        self.weights = array("d")

    def add(self, value: float, weight: float) -> None:
        self.values.append(value)
        self.weights.append(weight)

    def extend(self, values: list[float], weight: float) -> None:
        """Add every value in ``values`` with the same ``weight``."""
        self.values.extend(values)
        self.weights.extend([float(weight)] * len(values))

    def extend_arrays(self, values: np.ndarray, weights: np.ndarray) -> None:
        """Add ``values[i]`` with weight ``weights[i]`` (float64 arrays of one length)."""
        self.values.frombytes(np.ascontiguousarray(values, dtype=np.float64).tobytes())
        self.weights.frombytes(np.ascontiguousarray(weights, dtype=np.float64).tobytes())

    def arrays(self, copy: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(values, weights) as float64 arrays; ``copy=False``: views, as
        :meth:`Columns.to_numpy`."""
        v = np.frombuffer(self.values, dtype=np.float64)
        w = np.frombuffer(self.weights, dtype=np.float64)
        return (v.copy(), w.copy()) if copy else (v, w)


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """``np.percentile(np.repeat(values, weights), q)`` (method "linear") without
    expanding. ``weights`` are non-negative integers. NaN for an empty sample."""
    return weighted_percentiles(values, weights, (q,))[0]


def weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs) -> list[float]:
    """:func:`weighted_percentile` at each of ``qs`` (percent) with one sort
    (a 100k-request run has ~1.5 M ITL samples: one sort, not one per q)."""
    mask = weights > 0
    if not mask.all():
        values, weights = values[mask], weights[mask]
    if values.size == 0:
        return [float("nan")] * len(qs)
    order = np.argsort(values, kind="stable")
    v = values[order]
    cum = weights[order]
    del order  # (one sample array at a time: a 100k-request run's peak memory)
    np.cumsum(cum, out=cum)
    n = cum[-1]
    out = []
    for q in qs:
        pos = q / 100.0 * (n - 1)
        lo = int(np.floor(pos))
        hi = min(lo + 1, int(n) - 1)
        v_lo = v[np.searchsorted(cum, lo, side="right")]
        v_hi = v[np.searchsorted(cum, hi, side="right")]
        out.append(float(v_lo + (v_hi - v_lo) * (pos - lo)))
    return out


def _stats(prefix: str, values_s: np.ndarray) -> dict[str, float]:
    out: dict[str, float] = {}
    if values_s.size == 0:
        for k in ("mean", "median", "std", "p90", "p99"):
            out[f"{k}_{prefix}_ms"] = float("nan")
        return out
    ms = values_s * 1e3
    out[f"mean_{prefix}_ms"] = float(np.mean(ms))
    out[f"median_{prefix}_ms"] = float(np.median(ms))
    out[f"std_{prefix}_ms"] = float(np.std(ms))
    out[f"p90_{prefix}_ms"] = float(np.percentile(ms, 90))
    out[f"p99_{prefix}_ms"] = float(np.percentile(ms, 99))
    return out


def _squared_deviation(x: np.ndarray, mean: float) -> np.ndarray:
    """``(x - mean) ** 2`` in one new array (``** 2`` is a product: the same floats)."""
    d = x - mean
    np.multiply(d, d, out=d)
    return d


def _weighted_stats(prefix: str, values_s: np.ndarray, weights: np.ndarray) -> dict[str, float]:
    if weights.sum() <= 0:
        return _stats(prefix, np.zeros(0))
    ms = values_s * 1e3
    mean = float(np.average(ms, weights=weights))
    p50, p90, p99 = weighted_percentiles(ms, weights, (50, 90, 99))
    return {
        f"mean_{prefix}_ms": mean,
        f"median_{prefix}_ms": p50,
        f"std_{prefix}_ms": float(np.sqrt(np.average(_squared_deviation(ms, mean), weights=weights))),
        f"p90_{prefix}_ms": p90,
        f"p99_{prefix}_ms": p99,
    }


def request_latencies(req: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-request latencies in seconds from the request columns (finished
    requests have all timestamps; others get NaN)."""
    arrival = req["arrival_time_s"]
    first = req["first_token_time_s"]
    finish = req["finish_time_s"]
    sched = req["first_scheduled_time_s"]
    n_out = req["num_output_tokens"]
    done = req["status"] == STATUS_FINISHED
    nan = np.full(arrival.shape, np.nan)
    ttft = np.where(done, first - arrival, nan)
    e2el = np.where(done, finish - arrival, nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(done & (n_out > 1), (e2el - ttft) / np.maximum(n_out - 1, 1), nan)
    return {
        "ttft_s": ttft,
        "tpot_s": tpot,
        "e2el_s": e2el,
        "queue_s": np.where(done, sched - arrival, nan),
        "prefill_s": np.where(done, first - sched, nan),
        "decode_s": np.where(done, finish - first, nan),
    }


def parse_goodput(items: list[str] | None) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` → ``{"ttft": 0.5, "tpot": 0.05}`` (seconds)."""
    from sim.errors import ConfigError

    slos: dict[str, float] = {}
    for item in items or []:
        for part in item.replace(",", " ").split():
            key, sep, val = part.partition(":")
            if not sep or key not in ("ttft", "tpot", "e2el"):
                raise ConfigError(f"--goodput {part!r}: expected ttft:MS, tpot:MS or e2el:MS")
            try:
                ms = float(val)
            except ValueError:
                raise ConfigError(f"--goodput {part!r}: {val!r} is not a number of milliseconds") from None
            if not ms > 0 or ms == float("inf"):
                raise ConfigError(f"--goodput {part!r}: the SLO must be a finite number > 0 ms")
            if key in slos:
                raise ConfigError(f"--goodput {part!r}: {key} is given twice")
            slos[key] = ms / 1e3
    return slos


def summarize(req: dict[str, np.ndarray], steps: dict[str, np.ndarray], itl: tuple[np.ndarray, np.ndarray],
              *, goodput: dict[str, float] | None = None, num_gpu_blocks: int = 0,
              kv_reserved_unused_fraction: float = float("nan")) -> dict:
    """The summary keys of ``summary.json`` (DESIGN "Outputs of a run")."""
    lat = request_latencies(req)
    measured = req["is_warmup"] == 0
    done = measured & (req["status"] == STATUS_FINISHED)
    n_done = int(done.sum())
    out: dict = {"completed": n_done, "num_rejected": int((measured & (req["status"] == STATUS_REJECTED)).sum())}
    if n_done:
        t0 = float(req["arrival_time_s"][measured].min())
        t1 = float(req["finish_time_s"][done].max())
        duration = max(t1 - t0, 1e-12)
    else:
        duration = float("nan")
    tin = float(req["num_prompt_tokens"][done].sum())
    tout = float(req["num_output_tokens"][done].sum())
    out.update({
        "duration": duration,
        "total_input_tokens": int(tin),
        "total_output_tokens": int(tout),
        "request_throughput": n_done / duration,
        "output_throughput": tout / duration,
        "total_token_throughput": (tin + tout) / duration,
    })
    good = done.copy()
    slos = goodput or {}
    for key, limit in slos.items():
        v = lat[f"{key}_s"]
        if key == "tpot":
            v = np.where(np.isnan(v), 0.0, v)
        good &= v <= limit
    out["request_goodput"] = (int(good.sum()) / duration) if slos else None
    for key in ("ttft", "tpot", "e2el"):
        vals = lat[f"{key}_s"][done]
        vals = vals[~np.isnan(vals)]
        if key == "tpot" and n_done and not vals.size:
            vals = np.zeros(1)  # every request had one output token: vllm bench serve's np.mean(tpots or 0)
        out.update(_stats(key, vals))
    if n_done and itl[1].sum() <= 0:
        out.update(_stats("itl", np.zeros(1)))  # no second token anywhere: np.mean(itls or 0), as vLLM
    else:
        out.update(_weighted_stats("itl", *itl))
    q = lat["queue_s"][done]
    out["mean_queue_ms"] = float(np.mean(q) * 1e3) if q.size else float("nan")
    out["p99_queue_ms"] = float(np.percentile(q, 99) * 1e3) if q.size else float("nan")
    out["num_preemptions"] = int(req["num_preemptions"][measured].sum())
    queries = req["num_prompt_tokens"][done].sum()
    out["prefix_cache_hit_rate"] = float(req["num_cached_tokens"][done].sum() / queries) if queries else 0.0
    dt = steps["step_time_s"]
    if dt.size and dt.sum() > 0:
        w = dt / dt.sum()
        # a merged row's kv_cache_usage is its last step's; mean_kv_cache_usage its time average
        mean_col = steps.get("mean_kv_cache_usage", steps["kv_cache_usage"])
        out["mean_kv_cache_usage"] = float((mean_col * w).sum())
        out["max_kv_cache_usage"] = float(steps["kv_cache_usage"].max())
        out["mean_num_running_seqs"] = float((steps["num_running_seqs"] * w).sum())
        nsteps = steps["num_steps"].sum()
        out["mean_num_batched_tokens"] = float(steps["num_batched_tokens"].sum() / nsteps)
    else:
        out.update({"mean_kv_cache_usage": 0.0, "max_kv_cache_usage": 0.0,
                    "mean_num_running_seqs": 0.0, "mean_num_batched_tokens": 0.0})
    out["kv_reserved_unused_fraction"] = kv_reserved_unused_fraction
    out["num_gpu_blocks"] = num_gpu_blocks
    return out
