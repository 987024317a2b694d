"""``generate_requests``: a workload config + seed → :class:`RequestSpecs` (what the engine calls)."""

from __future__ import annotations

import numpy as np

from sim.errors import ConfigError
from sim.workload.builtin import resolve_workload
from sim.workload.config import MAX_SIMULATED_SPAN_S, WorkloadConfig
from sim.workload.sessions import (choose_prefixes, conversation_prompts, mean_turns, session_turns,
                                   single_turn, turn_offsets)
from sim.workload.specs import RequestSpecs
from sim.workload.synthetic import (arrival_times, arrival_times_until, assign_priorities, child_rng,
                                    length_mean, sample_lengths)
from sim.workload.traces import load_trace, select_rows


def generate_requests(cfg: WorkloadConfig, *, seed: int, max_model_len: int | None = None) -> RequestSpecs:
    """All requests of one run in send order. ``cfg.seed``, if set, overrides ``seed``.

    Each random part draws from its own child stream of the seed
    (:data:`sim.workload.synthetic.STREAMS`). ``num_warmup_requests`` extra requests
    come first (with ``duration_s`` only, the first ones *are* the warm-up).
    ``max_model_len`` is needed only for ``clip_to_max_model_len``: then a request
    with prompt + max_tokens > max_model_len has its prompt cut to fit (and, if
    max_tokens alone does not fit, max_tokens and the output to max_model_len − 1);
    otherwise it passes unchanged and the engine rejects it.
    """
    cfg = resolve_workload(cfg)
    seed = cfg.seed if cfg.seed is not None else seed
    n_wanted = None if cfg.num_requests is None else cfg.num_requests + cfg.num_warmup_requests
    if cfg.trace is not None:
        arrival, prompt, output, keys, chunk, skipped, reordered, source = _from_trace(cfg, seed, n_wanted)
        max_tokens = output.copy() if cfg.max_tokens == "output_len" else np.full(len(output), cfg.max_tokens)
    else:
        arrival, prompt, output, max_tokens, keys, chunk, source = _synthetic(cfg, seed, n_wanted)
        skipped = reordered = 0
        if len(arrival) and arrival[-1] > MAX_SIMULATED_SPAN_S:  # WorkloadConfig bounds it; kept as a guard
            raise ConfigError(f"workload: the last request is sent {arrival[-1]:.6g} s into the run, beyond "
                              f"{MAX_SIMULATED_SPAN_S:g} s (~32 years), where float64 seconds are too coarse "
                              "for engine steps; raise request_rate or shorten duration_s / think_time_s")
    n = len(arrival)
    if n == 0:
        raise ConfigError(f"workload: no requests ({source}); check num_requests / duration_s / window_s")
    priority = assign_priorities(cfg.priority_classes, n, child_rng(seed, "priority"))
    num_clipped = 0
    if cfg.clip_to_max_model_len:
        if max_model_len is None or max_model_len < 2:
            raise ConfigError(f"workload.clip_to_max_model_len needs max_model_len >= 2, got {max_model_len}")
        prompt, max_tokens, output, keys, num_clipped = _clip(prompt, max_tokens, output, keys, chunk,
                                                              max_model_len)
    return RequestSpecs(arrival_time_s=arrival, num_prompt_tokens=prompt, output_len=output,
                        max_tokens=max_tokens, priority=priority, prefix_keys=keys,
                        prefix_chunk_tokens=chunk if keys is not None else 0,
                        num_warmup=min(cfg.num_warmup_requests, n), num_skipped_rows=skipped,
                        num_clipped=num_clipped, num_out_of_order_rows=reordered, source=source)


def _arrivals(cfg: WorkloadConfig, process: str, n: int | None, rng: np.random.Generator,
              rate_scale: float = 1.0) -> np.ndarray:
    """``n`` arrivals (vLLM rescale), else arrivals until ``duration_s``; a duration with
    a count keeps those at t ≤ duration_s."""
    rate = None if cfg.request_rate is None else cfg.request_rate * rate_scale
    if n is None:
        return arrival_times_until(cfg.duration_s, process, rate, cfg.burstiness, rng)  # type: ignore[arg-type]
    t = arrival_times(n, process, rate, cfg.burstiness, rng)
    return t if cfg.duration_s is None else t[t <= cfg.duration_s]


def _synthetic(cfg: WorkloadConfig, seed: int, n_wanted: int | None):
    process = cfg.arrival_process(has_timestamps=False)
    chunk = cfg.prefix_chunk_tokens
    conv = cfg.conversation
    if conv is None:
        arrival = _arrivals(cfg, process, n_wanted, child_rng(seed, "arrival"))
        n = len(arrival)
        body = sample_lengths(cfg.input_len, n, child_rng(seed, "input"))
        output = sample_lengths(cfg.output_len, n, child_rng(seed, "output"))
        table = choose_prefixes(cfg.shared_prefix, n, chunk, child_rng(seed, "prefix"))
        prompt, keys = single_turn(body, table)
        max_tokens = output.copy() if cfg.max_tokens == "output_len" else np.full(n, cfg.max_tokens)
    else:
        arrival, prompt, output, max_tokens, keys = _conversations(cfg, process, seed, n_wanted, chunk)
    rate = "inf" if process == "inf" else f"{cfg.request_rate:g} req/s"
    extra = "burstiness {:g}, ".format(cfg.burstiness) if process == "gamma" else ""
    source = (f"synthetic: {len(arrival)} requests, {process} arrivals at {rate} ({extra}"
              f"input {_describe(cfg.input_len)}, output {_describe(cfg.output_len)}"
              f"{', shared prefixes' if cfg.shared_prefix else ''}{', conversations' if conv else ''})")
    return arrival, prompt, output, max_tokens, keys, chunk, source


def _describe(spec) -> str:
    m = length_mean(spec)
    return f"{spec.dist}" + (f" mean {m:g}" if m is not None else f" from {spec.path}:{spec.column}")


def _conversations(cfg: WorkloadConfig, process: str, seed: int, n_wanted: int | None, chunk: int):
    conv = cfg.conversation
    rng_conv = child_rng(seed, "conversation")
    if n_wanted is not None:
        # At most n sessions are needed (each has >= 1 turn); keep the first that reach n requests.
        turns = session_turns(conv, n_wanted, rng_conv)
        num_sessions = int(np.searchsorted(np.cumsum(turns), n_wanted) + 1)
        turns = turns[:num_sessions]
        turns[-1] -= int(turns.sum()) - n_wanted
        # Session starts at rate·S/n, so requests arrive at ~request_rate and the last
        # session starts at n/rate (vLLM's rescale applied to sessions).
        starts = arrival_times(num_sessions, process, None if cfg.request_rate is None else
                               cfg.request_rate * num_sessions / n_wanted, cfg.burstiness,
                               child_rng(seed, "arrival"))
    else:
        starts = arrival_times_until(cfg.duration_s, process, cfg.request_rate / mean_turns(conv),  # type: ignore[operator]
                                     cfg.burstiness, child_rng(seed, "arrival"))
        num_sessions = len(starts)
        turns = session_turns(conv, num_sessions, rng_conv)
    n = int(turns.sum())
    session = np.repeat(np.arange(num_sessions), turns)
    turn_index = np.arange(n) - np.repeat(np.cumsum(turns) - turns, turns)
    arrival = starts[session] + turn_offsets(conv, turn_index, rng_conv)
    first_body = sample_lengths(cfg.input_len, n, child_rng(seed, "input"))
    new_message = sample_lengths(conv.turn_input_len or cfg.input_len, n, child_rng(seed, "turn_input"))
    output = sample_lengths(cfg.output_len, n, child_rng(seed, "output"))
    max_tokens = output.copy() if cfg.max_tokens == "output_len" else np.full(n, cfg.max_tokens, dtype=np.int64)
    table = choose_prefixes(cfg.shared_prefix, num_sessions, chunk, child_rng(seed, "prefix"))
    prompt, keys = conversation_prompts(turn_index, table.choice[session], first_body, new_message,
                                        np.minimum(output, max_tokens), table, chunk)
    order = np.argsort(arrival, kind="stable")  # session-major ties keep turn order
    if cfg.duration_s is not None:
        order = order[arrival[order] <= cfg.duration_s]
    keys_sorted = [keys[i] for i in order.tolist()]
    return (arrival[order], prompt[order], output[order], max_tokens[order],
            keys_sorted if any(k is not None for k in keys_sorted) else None)


def _from_trace(cfg: WorkloadConfig, seed: int, n_wanted: int | None):
    table = load_trace(cfg.trace, cfg.trace_format, cfg.columns, cfg.skip_bad_rows)  # type: ignore[arg-type]
    total_rows = len(table) + table.num_skipped_rows
    process = cfg.arrival_process(has_timestamps=table.arrival_s is not None)
    if process == "trace" and cfg.request_rate is not None:
        raise ConfigError(f"workload.request_rate = {cfg.request_rate:g}: {cfg.trace} is replayed at its own "
                          "timestamps; use workload.speedup to replay it faster, or set workload.arrival "
                          "(poisson, gamma, constant) to replace its timestamps with that process")
    if process == "trace" and table.arrival_s is None:
        raise ConfigError(f"workload.arrival: trace, but {cfg.trace} has no arrival times "
                          f"(a lengths table); set workload.arrival and request_rate")
    if process != "trace" and (cfg.speedup != 1.0 or cfg.jitter_s > 0):
        raise ConfigError(f"workload.speedup/jitter_s apply to replayed timestamps, but arrival is {process}")
    table = select_rows(table, window_s=cfg.window_s, speedup=cfg.speedup, sample_fraction=cfg.sample_fraction,
                        jitter_s=cfg.jitter_s, rng_sample=child_rng(seed, "sample"),
                        rng_jitter=child_rng(seed, "jitter"))
    if process == "trace":
        t = table.arrival_s
        if cfg.duration_s is not None:
            table = table.take(np.flatnonzero(t <= cfg.duration_s))
        if n_wanted is not None:
            _enough(cfg, len(table), n_wanted)
            table = table.take(np.arange(n_wanted))
        arrival = table.arrival_s
        _check_replayed_span(cfg, table)
    else:
        if n_wanted is None and cfg.duration_s is None:
            arrival = arrival_times(len(table), process, cfg.request_rate, cfg.burstiness,
                                    child_rng(seed, "arrival"))
        else:
            arrival = _arrivals(cfg, process, n_wanted, child_rng(seed, "arrival"))
        _enough(cfg, len(table), len(arrival))
        table = table.take(np.arange(len(arrival)))
    source = (f"trace {cfg.trace} ({table.format}): {len(table)} of {total_rows} rows, "
              f"arrivals {process}" + (f", speedup {cfg.speedup:g}" if cfg.speedup != 1 else "")
              + (f", {table.num_out_of_order} row(s) out of time order (sorted by time)"
                 if table.num_out_of_order else ""))
    return (np.asarray(arrival, dtype=np.float64), table.num_prompt_tokens, table.output_len,
            table.prefix_keys, table.prefix_chunk_tokens, table.num_skipped_rows, table.num_out_of_order, source)


def _check_replayed_span(cfg: WorkloadConfig, table) -> None:
    """Refuse replayed arrivals later than MAX_SIMULATED_SPAN_S (see there), naming the
    first such row; ``window_s``, ``duration_s`` or ``num_requests`` can cut it off."""
    t = table.arrival_s
    if not len(t) or t[-1] <= MAX_SIMULATED_SPAN_S:
        return
    i = int(np.argmax(t > MAX_SIMULATED_SPAN_S))
    line = f":{int(table.line[i])}" if table.line is not None else ""
    field = f" field {table.arrival_field!r}:" if table.arrival_field else ""
    applied = [k for k, on in (("window_s", cfg.window_s is not None), ("speedup", cfg.speedup != 1.0),
                               ("jitter_s", cfg.jitter_s > 0)) if on]
    after = f" (after {', '.join(applied)})" if applied else ""
    raise ConfigError(
        f"{cfg.trace}{line}:{field} sent {t[i]:.6g} s into the replay{after}, beyond the "
        f"{MAX_SIMULATED_SPAN_S:g} s (~32 years) a run can simulate: float64 seconds past it are too coarse "
        f"(> 0.12 us) to resolve engine steps and latencies; fix the timestamp, or replay a part of the trace "
        f"(workload.window_s, duration_s or num_requests)")


def _enough(cfg: WorkloadConfig, have: int, need: int) -> None:
    if have < need:
        raise ConfigError(f"workload: {cfg.trace} has {have} usable rows after window_s/sample_fraction/"
                          f"duration_s, fewer than the {need} requested (num_requests + num_warmup_requests)")


def _clip(prompt, max_tokens, output, keys, chunk, max_model_len):
    over = prompt + max_tokens > max_model_len
    if not over.any():
        return prompt, max_tokens, output, keys, 0
    prompt, max_tokens, output = prompt.copy(), max_tokens.copy(), output.copy()
    prompt[over] = np.maximum(1, max_model_len - max_tokens[over])
    still = prompt + max_tokens > max_model_len  # max_tokens alone does not fit
    max_tokens[still] = max_model_len - prompt[still]
    output[still] = np.minimum(output[still], max_tokens[still])
    if keys is not None:
        keys = list(keys)
        for i in np.flatnonzero(over).tolist():
            k = keys[i]
            if k is not None:
                cut = keys[i][: int(prompt[i]) // chunk]
                keys[i] = cut if cut else None
    return prompt, max_tokens, output, keys, int(over.sum())
