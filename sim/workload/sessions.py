"""Shared system prompts and multi-turn conversations: prompt lengths and prefix keys.

Keys follow ``sim/request.py``: one non-negative int per ``chunk`` tokens of the
request's sequence (prompt, then output); equal keys = identical tokens. Only
chunks that are *whole* and shared get keys — tokens past the keys are unique —
so a prefix of ``prefix_len`` tokens gives ⌊prefix_len/chunk⌋ keys, and the chunk
straddling the end of a shared part is unique to the request.

* System prompt k owns keys ``[k·m, (k+1)·m)`` with m = ⌊prefix_len/chunk⌋; every
  request that carries prompt k shares the same tuple object (no per-request memory).
* Conversation turn t covers its prompt *and* output: ⌊(prompt_t + out_t)/chunk⌋
  keys, and turn t+1's keys start with turn t's (its prompt is turn t's prompt +
  turn t's output + a new message), then fresh ids. A session's last turn keeps
  only the keys it shares, since nothing extends it.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

import numpy as np

from sim.workload.config import ConversationConfig, SharedPrefixConfig


@dataclass(frozen=True)
class PrefixTable:
    """System prompt keys (of the prompts chosen at least once) and each request's
    (or session's) choice (-1 = none)."""

    keys: dict[int, tuple[int, ...]]
    choice: np.ndarray  # int64, -1 = no shared prefix
    prefix_len: int
    next_id: int  # first id free for other content


def choose_prefixes(spec: SharedPrefixConfig | None, n: int, chunk: int,
                    rng: np.random.Generator) -> PrefixTable:
    """Pick, for ``n`` requests or sessions, whether they start with a system prompt
    (probability ``fraction``) and which one (uniform over ``num_prefixes``)."""
    if spec is None:
        return PrefixTable({}, np.full(n, -1, dtype=np.int64), 0, 0)
    # Both draws always happen, so changing `fraction` keeps which prompt each request would get.
    u = rng.random(n)
    which = rng.integers(spec.num_prefixes, size=n, dtype=np.int64)
    choice = np.where(u < spec.fraction, which, -1)
    m = spec.prefix_len // chunk
    # keys of the chosen prompts only: memory grows with the requests, not with num_prefixes
    keys = {k: tuple(range(k * m, (k + 1) * m)) for k in np.unique(choice[choice >= 0]).tolist()}
    return PrefixTable(keys, choice, spec.prefix_len, spec.num_prefixes * m)


def single_turn(prompt_body: np.ndarray, table: PrefixTable) -> tuple[np.ndarray, list | None]:
    """Prompts and keys of independent requests: body + system prompt where chosen."""
    has = table.choice >= 0
    prompts = prompt_body + np.where(has, table.prefix_len, 0)
    if not has.any():
        return prompts, None
    keys = [table.keys[c] if c >= 0 else None for c in table.choice.tolist()]
    return prompts, keys


def session_turns(spec: ConversationConfig, num_sessions: int, rng: np.random.Generator) -> np.ndarray:
    """Turns per session (int64 ≥ 1): ``num_turns`` for a ``fraction`` of sessions, else 1."""
    lo, hi = (spec.num_turns, spec.num_turns) if isinstance(spec.num_turns, int) else spec.num_turns
    multi = rng.random(num_sessions) < spec.fraction
    turns = rng.integers(lo, hi + 1, size=num_sessions, dtype=np.int64)
    return np.where(multi, turns, 1)


def mean_turns(spec: ConversationConfig) -> float:
    lo, hi = (spec.num_turns, spec.num_turns) if isinstance(spec.num_turns, int) else spec.num_turns
    return 1.0 + spec.fraction * ((lo + hi) / 2 - 1.0)


def turn_offsets(spec: ConversationConfig, turn_index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Seconds from each request's session start to its send: the sum of the think
    times of the turns before it (``turn_index`` = 0 for the first turn)."""
    n = turn_index.shape[0]
    if isinstance(spec.think_time_s, (int, float)):
        return turn_index * float(spec.think_time_s)
    lo, hi = spec.think_time_s
    gaps = np.where(turn_index > 0, rng.uniform(lo, hi, size=n), 0.0)
    # Cumulative within each session: turn_index resets to 0 at every session start.
    csum = np.cumsum(gaps)
    starts = np.flatnonzero(turn_index == 0)
    base = np.repeat(csum[starts] - gaps[starts], np.diff(np.append(starts, n)))
    return csum - base


def conversation_prompts(turn_index: np.ndarray, session_prefix: np.ndarray, first_body: np.ndarray,
                         new_message: np.ndarray, generated: np.ndarray, table: PrefixTable,
                         chunk: int) -> tuple[np.ndarray, list[tuple[int, ...] | None]]:
    """Prompt lengths and keys of requests in session-major order.

    Turn 0: prompt = system prompt (if ``session_prefix`` ≥ 0) + ``first_body``.
    Turn t+1: prompt = prompt_t + ``generated``_t + ``new_message``_{t+1}.
    ``generated`` is what the turn really emits (min(output_len, max_tokens)).
    A turn that a later turn extends gets keys covering its prompt and output; the
    last turn of a session only carries the keys it shares (its predecessor's), so
    a single-turn session carries just the system prompt's.
    """
    n = turn_index.shape[0]
    has_next = np.zeros(n, dtype=bool)
    has_next[:-1] = turn_index[1:] > 0  # session-major: the next request is this session's next turn
    cols = [a.tolist() for a in (turn_index, session_prefix, first_body, new_message, generated, has_next)]
    # Many small tuples: pause the cyclic GC (they hold only ints, no cycles).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        prompts, keys = _fill(*cols, table, chunk)
    finally:
        if was_enabled:
            gc.enable()
    return np.array(prompts, dtype=np.int64), keys


def _fill(ti: list, sp: list, fb: list, nm: list, gen: list, has_next: list, table: PrefixTable,
          chunk: int) -> tuple[list[int], list[tuple[int, ...] | None]]:
    n = len(ti)
    prompts = [0] * n
    keys: list[tuple[int, ...] | None] = [None] * n
    next_id = table.next_id
    prev_len, prev_keys = 0, ()
    for i in range(n):
        if ti[i] == 0:
            base = table.keys[sp[i]] if sp[i] >= 0 else ()
            p = (table.prefix_len if sp[i] >= 0 else 0) + fb[i]
            prev_keys = base
        else:
            p = prev_len + nm[i]
        prompts[i] = p
        if not has_next[i]:
            # Nothing later extends the last turn: its new tokens stay unique (no keys).
            keys[i] = prev_keys if prev_keys else None
            continue
        total = p + gen[i]
        need = total // chunk - len(prev_keys)
        if need > 0:
            prev_keys = prev_keys + tuple(range(next_id, next_id + need))
            next_id += need
        keys[i] = prev_keys if prev_keys else None
        prev_len = total
    return prompts, keys
