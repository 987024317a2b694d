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
from struct import Struct, pack

import numpy as np
import numpy.ma  # noqa: F401  (np.median/np.percentile import it on first call: an import, done here)

REQUEST_COLUMNS = (
    "request_id", "replica", "arrival_time_s", "first_scheduled_time_s", "first_token_time_s",
    "finish_time_s", "num_prompt_tokens", "num_output_tokens", "max_tokens", "num_cached_tokens",
    "num_preemptions", "preempted_s", "is_warmup", "priority", "status",
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
    (8 bytes a value, no Python object per value). A row (numbers, one per
    name, in order) is packed to doubles at once (``struct``; an
    ``array.extend`` converts value by value, several times slower)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.flat = array("d")
        self.pack_row = Struct(f"{len(names)}d").pack  # row -> bytes; for ``flat.frombytes``

    def append(self, row) -> None:
        """Append one row (a tuple of numbers, one per name)."""
        self.flat.frombytes(self.pack_row(*row))

    def __len__(self) -> int:
        return len(self.flat) // len(self.names)

    def extend_columns(self, n: int, columns) -> None:
        """Append ``n`` rows given column by column, one entry per name: a
        length-``n`` array or list of numbers, or one number for every row
        (written into one table: cheaper than ``np.column_stack``)."""
        table = np.empty((n, len(self.names)))
        for i, col in enumerate(columns):
            table[:, i] = col
        self.flat.frombytes(table.tobytes())

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
        self.values.frombytes(float64_bytes(values))
        self.weights.frombytes(_PACK_1(weight) * len(values))

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


_PACK_1 = Struct("d").pack


def float64_bytes(values) -> bytes:
    """A sequence of numbers as packed doubles (for ``array("d").frombytes``
    or ``np.frombuffer``): one ``struct`` call, several times faster than
    ``array.extend`` or ``np.array`` on a list of Python floats."""
    return pack(f"{len(values)}d", *values)


def float64_array(values) -> np.ndarray:
    """A sequence of numbers as a read-only float64 array (:func:`float64_bytes`)."""
    return np.frombuffer(float64_bytes(values), dtype=np.float64)


def int64_array(values) -> np.ndarray:
    """A sequence of ints as a read-only int64 array (one ``struct`` call:
    faster than ``np.array`` on a list of Python ints)."""
    return np.frombuffer(pack(f"{len(values)}q", *values), dtype=np.int64)


def diff_from(values: np.ndarray, first) -> np.ndarray:
    """``np.diff(values, prepend=first)`` (the same subtractions, element by
    element) for a 1-D array, without its Python-level dispatch, several times
    slower on the short arrays a merged span records."""
    return values - np.concatenate(([first], values[:-1]))


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """``np.percentile(np.repeat(values, weights), q)`` (method "linear") without
    expanding. ``weights`` are non-negative integers. NaN for an empty sample."""
    return weighted_percentiles(values, weights, (q,))[0]


def weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs) -> list[float]:
    """:func:`weighted_percentile` at each of ``qs`` (percent). A percentile
    interpolates between two order statistics of the expanded sample (the
    ``lo``-th and ``hi``-th values, 0-based, in weight units), found by
    :func:`_order_stats` without sorting the whole sample (a 100k-request run
    has ~1.5 M ITL samples)."""
    mask = weights > 0
    if not mask.all():
        values, weights = values[mask], weights[mask]
    if values.size == 0:
        return [float("nan")] * len(qs)
    n = weights.sum()  # (integer-valued floats: an exact sum, in any order)
    plan = []
    for q in qs:
        pos = q / 100.0 * (n - 1)
        lo = int(np.floor(pos))
        plan.append((pos, lo, min(lo + 1, int(n) - 1)))
    found = _order_stats(values, weights, [(lo, hi) for _, lo, hi in plan])
    return [float(v_lo + (v_hi - v_lo) * (pos - lo)) for (pos, lo, _), (v_lo, v_hi) in zip(plan, found)]


#: samples below which :func:`_order_stats` sorts them all; the sample it
#: estimates the bands from; a band's half-width in sample positions
_BAND_MIN_SIZE = 1 << 15
_BAND_SAMPLE = 1 << 13
_BAND_HALF = 192


def _order_stats(values: np.ndarray, weights: np.ndarray, pairs: list[tuple[int, int]]) -> list[tuple]:
    """For each (lo, hi) of ``pairs`` (hi = lo or lo + 1): the lo-th and hi-th
    values (0-based) of ``np.sort(np.repeat(values, weights))``, as float64
    scalars. ``weights``: positive integers as floats. The k-th value is the
    value at the first position of the sorted sample whose cumulative weight
    exceeds k, whatever the order of equal values. A large sample is not
    sorted whole: a strided subsample bounds each pair's values to a band
    [a, b]; the weight below a (at most lo) and up to b (more than hi) is
    checked exactly, and the band alone is sorted, its cumulative weights
    offset by the weight below it (integer-valued sums: exact). A band that
    fails the check (or NaN values) falls back to the whole sort."""
    if values.size >= _BAND_MIN_SIZE:
        step = values.size // _BAND_SAMPLE
        sv = values[::step]
        o = np.argsort(sv)
        sv = sv[o]
        scum = np.cumsum(weights[::step][o])
        scum *= weights.sum() / scum[-1]  # the subsample's ranks, in the whole sample's weight
        out = []
        for lo, hi in pairs:
            i = int(np.searchsorted(scum, lo, side="right"))
            a = sv[i - _BAND_HALF] if i >= _BAND_HALF else -np.inf
            b = sv[i + _BAND_HALF] if i + _BAND_HALF < sv.size else np.inf
            below = (weights * (values < a)).sum()  # (integer-valued: exact; np.sum's where= is 5x slower)
            inside = (values >= a) & (values <= b)
            bv, bw = values[inside], weights[inside]
            if not (below <= lo and below + bw.sum() > hi):
                break
            o = np.argsort(bv)
            bv = bv[o]
            cum = np.cumsum(bw[o])
            cum += below
            out.append((bv[np.searchsorted(cum, lo, side="right")], bv[np.searchsorted(cum, hi, side="right")]))
        else:
            return out
    order = np.argsort(values, kind="stable")
    v = values[order]
    cum = weights[order]
    del order  # (one sample array at a time: a 100k-request run's peak memory)
    np.cumsum(cum, out=cum)
    return [(v[np.searchsorted(cum, lo, side="right")], v[np.searchsorted(cum, hi, side="right")])
            for lo, hi in pairs]


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
    p90, p99 = np.percentile(ms, (90, 99))  # (one partition; the same values as one call each)
    out[f"p90_{prefix}_ms"] = float(p90)
    out[f"p99_{prefix}_ms"] = float(p99)
    return out


def _squared_deviation(x: np.ndarray, mean: float) -> np.ndarray:
    """``(x - mean) ** 2`` in one new array (``** 2`` is a product: the same floats)."""
    d = x - mean
    np.multiply(d, d, out=d)
    return d


def _weighted_stats(prefix: str, values_s: np.ndarray, weights: np.ndarray) -> dict[str, float]:
    total = weights.sum()
    if total <= 0:
        return _stats(prefix, np.zeros(0))
    ms = values_s * 1e3
    # np.average(x, weights=w)'s operations, (x * w).sum() / w.sum(), without its dispatch
    mean = float((ms * weights).sum() / total)
    p50, p90, p99 = weighted_percentiles(ms, weights, (50, 90, 99))
    return {
        f"mean_{prefix}_ms": mean,
        f"median_{prefix}_ms": p50,
        f"std_{prefix}_ms": float(np.sqrt((_squared_deviation(ms, mean) * weights).sum() / total)),
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


#: the metrics ``--percentile-metrics`` selects from (``vllm bench serve``'s, for generation)
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")


def percentile_word(p: float) -> str:
    """``vllm bench serve``'s key word for a percentile: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def parse_percentiles(text: str | None) -> tuple[float, ...]:
    """``--metric-percentiles 95,99.9`` → (95.0, 99.9); ConfigError naming the value."""
    from sim.errors import ConfigError

    if text is None:
        return ()
    out = []
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        try:
            p = float(part)
        except ValueError:
            raise ConfigError(f"--metric-percentiles: {part!r} is not a number (e.g. 95,99.9)") from None
        if not 0 <= p <= 100:
            raise ConfigError(f"--metric-percentiles: {part!r} is not a percentile in [0, 100]")
        if p not in out:
            out.append(p)
    if not out:
        raise ConfigError(f"--metric-percentiles: {text!r} names no percentile (e.g. 95,99.9)")
    return tuple(out)


def parse_percentile_metrics(text: str | None) -> tuple[str, ...]:
    """``--percentile-metrics ttft,itl`` → ("ttft", "itl"); ConfigError for others."""
    from sim.errors import ConfigError

    if text is None:
        return PERCENTILE_METRICS
    out = []
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        if part not in PERCENTILE_METRICS:
            raise ConfigError(f"--percentile-metrics: {part!r} is not one of {', '.join(PERCENTILE_METRICS)} "
                              "(client_queue_time and e2el_including_client_queue are not reported)")
        if part not in out:
            out.append(part)
    if not out:
        raise ConfigError(f"--percentile-metrics: {text!r} names no metric")
    return tuple(out)


def _peaks(req: dict[str, np.ndarray], done: np.ndarray) -> tuple[float, int]:
    """``vllm bench serve``'s ``max_output_tokens_per_s`` and ``max_concurrent_requests``
    (``calculate_metrics``): output tokens counted in one-second buckets from the
    first send of a finished request (a token at its arrival time at the client),
    the largest count; and the most finished requests in flight at once (half-open
    [send, last token) intervals, a finish before a send at a tie). servesim keeps
    no per-token times: a request's first token is at ``first_token_time_s`` and its
    other tokens evenly spaced up to ``finish_time_s`` (its TPOT apart), so the peak
    is exact when its tokens are evenly spaced and within one or two tokens per
    request in a bucket otherwise."""
    if not done.any():
        return 0.0, 0
    start = req["arrival_time_s"][done]
    first = req["first_token_time_s"][done]
    finish = req["finish_time_s"][done]
    n = req["num_output_tokens"][done].astype(np.int64)
    t0 = float(start.min())
    nb = int(np.ceil(float(finish.max()) - t0)) + 1
    b_first = np.floor(first - t0).astype(np.int64)
    counts = np.bincount(np.clip(b_first, 0, nb - 1), minlength=nb)  # (np.add.at, several times faster)
    multi = n > 1
    if multi.any():
        f, e, m = first[multi], finish[multi], n[multi] - 1  # m tokens at f + k * gap, k = 1..m
        gap = (e - f) / m
        lo = np.floor(f - t0).astype(np.int64)
        hi = np.floor(e - t0).astype(np.int64)
        span = hi - lo + 1
        # per request and bucket j in [lo, hi]: tokens with time < t0 + j + 1, minus those < t0 + j
        rows = np.repeat(np.arange(m.size), span)
        j = lo[rows] + (np.arange(rows.size) - np.repeat(np.cumsum(span) - span, span))

        def below(t: np.ndarray) -> np.ndarray:
            with np.errstate(divide="ignore", invalid="ignore"):
                k = np.where(gap[rows] > 0, np.ceil((t - f[rows]) / gap[rows]) - 1,
                             np.where(t > f[rows], m[rows], 0))
            return np.clip(k, 0, m[rows])

        per = below(t0 + j + 1.0) - below(t0 + j.astype(np.float64))
        # (integer counts summed as float64: exact below 2^53)
        counts = counts + np.bincount(np.clip(j, 0, nb - 1), per, minlength=nb).astype(np.int64)
    events = np.concatenate([np.stack([start, np.ones(start.size)], 1), np.stack([finish, -np.ones(finish.size)], 1)])
    events = events[np.lexsort((events[:, 1], events[:, 0]))]
    peak = int(np.cumsum(events[:, 1]).max())
    return float(counts.max()), peak


def summarize(req: dict[str, np.ndarray], steps: dict[str, np.ndarray], itl: tuple[np.ndarray, np.ndarray],
              *, goodput: dict[str, float] | None = None, num_gpu_blocks: int = 0,
              kv_reserved_unused_fraction: float = float("nan"), percentiles: tuple[float, ...] = (),
              percentile_metrics: tuple[str, ...] = PERCENTILE_METRICS) -> dict:
    """The summary keys of ``summary.json`` (DESIGN "Outputs of a run"), with
    ``vllm bench serve``'s ``failed``, ``max_output_tokens_per_s``,
    ``max_concurrent_requests``, and ``p{P}_{metric}_ms`` for each of
    ``percentiles`` (``--metric-percentiles``) of ``percentile_metrics``, beside
    servesim's mean / median / std / p90 / p99 of every metric."""
    lat = request_latencies(req)
    measured = req["is_warmup"] == 0
    done = measured & (req["status"] == STATUS_FINISHED)
    n_done = int(done.sum())
    n_rejected = int((measured & (req["status"] == STATUS_REJECTED)).sum())
    out: dict = {"completed": n_done, "failed": n_rejected, "num_rejected": n_rejected}
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
    extra = [p for p in percentiles if p not in (90, 99)]
    for key in ("ttft", "tpot", "e2el"):
        vals = lat[f"{key}_s"][done]
        vals = vals[~np.isnan(vals)]
        if key == "tpot" and n_done and not vals.size:
            vals = np.zeros(1)  # every request had one output token: vllm bench serve's np.mean(tpots or 0)
        out.update(_stats(key, vals))
        if extra and key in percentile_metrics:
            ms = vals * 1e3
            for p in extra:
                out[f"p{percentile_word(p)}_{key}_ms"] = float(np.percentile(ms, p)) if ms.size else float("nan")
    if n_done and itl[1].sum() <= 0:
        out.update(_stats("itl", np.zeros(1)))  # no second token anywhere: np.mean(itls or 0), as vLLM
        itl_sample = (np.zeros(1), np.ones(1))
    else:
        out.update(_weighted_stats("itl", *itl))
        itl_sample = itl
    if extra and "itl" in percentile_metrics:
        vals = weighted_percentiles(itl_sample[0] * 1e3, itl_sample[1], extra) if itl_sample[1].sum() > 0 \
            else [float("nan")] * len(extra)
        for p, v in zip(extra, vals):
            out[f"p{percentile_word(p)}_itl_ms"] = v
    out["max_output_tokens_per_s"], out["max_concurrent_requests"] = _peaks(req, done)
    out["rtfx"] = 0.0  # vllm bench serve's inverse real-time factor of audio input: none here
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
    return _bench_serve_order(out)


#: ``vllm bench serve``'s result keys in its order (``vllm/benchmarks/serve.py`` ``result``)
BENCH_RESULT_KEYS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
               "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
               "max_output_tokens_per_s", "max_concurrent_requests", "rtfx")


def _bench_serve_order(out: dict) -> dict:
    """``out`` with ``vllm bench serve``'s keys first, in its order, then each
    metric's statistics (TTFT, TPOT, ITL, E2EL, as it prints them), then servesim's."""
    keys = [k for k in BENCH_RESULT_KEYS if k in out]
    for m in PERCENTILE_METRICS:
        keys += [k for k in out if k.endswith(f"_{m}_ms") and k not in keys]
    keys += [k for k in out if k not in keys]
    return {k: out[k] for k in keys}
