"""Trace loaders: each public format as published → :class:`TraceTable`.

Formats (``workload.trace_format``; detected from the header when unset):

* ``azure`` — Azure LLM inference trace 2023 (Patel et al., Splitwise, ISCA'24),
  CSV ``TIMESTAMP, ContextTokens, GeneratedTokens``; ``TIMESTAMP`` strings
  (``YYYY-MM-DD HH:MM:SS.fffffff``, a time zone suffix allowed) → seconds from the first row.
* ``mooncake`` — Mooncake FAST'25 traces, JSON lines ``timestamp`` (ms),
  ``input_length``, ``output_length``, ``hash_ids`` (one id per 512-token block;
  kept as prefix keys with ``prefix_chunk_tokens = 512``).
* ``burstgpt`` — BurstGPT CSV ``Timestamp, Model, Request tokens, Response tokens,
  Total tokens, Log Type`` (Timestamp in s). Its failed requests have 0 response
  tokens: they are malformed rows here (set ``skip_bad_rows``).
* ``lengths`` — Vidur/etalon tables ``num_prefill_tokens, num_decode_tokens``
  (Vidur's ``arrived_at`` column, s, is used when present; otherwise lengths only).
* ``generic`` — CSV or JSON lines with ``workload.columns`` naming the arrival
  (optional), input and output columns and ``arrival_unit`` (s | ms).

Times become seconds from the earliest row, rows are stably sorted by time (send
order). A malformed row (missing field, non-numeric, length ≤ 0, fractional or
above :data:`~sim.workload.lengths.MAX_LENGTH_TOKENS`, a numeric timestamp whose
magnitude is :data:`MAX_TRACE_TIMESTAMP_S` s or more) raises :class:`ConfigError`
naming file, line and field — or, with ``skip_bad_rows``, is skipped and counted.
Replayed arrivals more than :data:`~sim.workload.config.MAX_SIMULATED_SPAN_S` after
the first are refused where they are used (:mod:`sim.workload.generate`), naming the
row. pandas is imported only inside these functions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from sim.errors import ConfigError, require_file
from sim.workload.lengths import MAX_LENGTH_TOKENS

AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT = ("Timestamp", "Request tokens", "Response tokens")
LENGTHS = ("num_prefill_tokens", "num_decode_tokens")
MOONCAKE = ("timestamp", "input_length", "output_length")
MOONCAKE_CHUNK_TOKENS = 512
_HINT = " (set workload.skip_bad_rows: true to skip and count such rows)"
#: Prefix keys (Mooncake ``hash_ids``) are below 2^60, the range the KV-cache hashing
#: takes (``sim/kv_cache/hashing.py``).
MAX_PREFIX_KEY = 1 << 60
#: Largest magnitude (s) of a numeric trace timestamp. Parsed as float64, a time
#: of 2^32 s (~136 years: epoch seconds and epoch milliseconds fit) is resolved to
#: 2^-20 s ≈ 0.95 µs; beyond it the parsed times, and so the gaps between
#: requests, would be silently rounded (at 1e14 s to 15.6 ms).
MAX_TRACE_TIMESTAMP_S = 2.0 ** 32


@dataclass(frozen=True)
class TraceTable:
    """Rows of a trace in send order. ``arrival_s`` is None for length-only tables."""

    arrival_s: np.ndarray | None  # float64 s from the earliest row
    num_prompt_tokens: np.ndarray  # int64
    output_len: np.ndarray  # int64
    prefix_keys: list[tuple[int, ...]] | None
    prefix_chunk_tokens: int
    num_skipped_rows: int
    path: str
    format: str
    num_out_of_order: int = 0  # rows sent before the row above them (the table is sorted by time)
    line: np.ndarray | None = None  # int64: each row's line in the file (1-based), for messages
    arrival_field: str | None = None  # the column (field) the arrival times came from

    def __len__(self) -> int:
        return int(self.num_prompt_tokens.shape[0])

    def take(self, idx: np.ndarray) -> "TraceTable":
        """Rows ``idx`` (int indices or bool mask), same order as ``idx``."""
        idx = np.flatnonzero(idx) if idx.dtype == bool else idx
        keys = None if self.prefix_keys is None else [self.prefix_keys[i] for i in idx.tolist()]
        arr = None if self.arrival_s is None else self.arrival_s[idx]
        line = None if self.line is None else self.line[idx]
        return replace(self, arrival_s=arr, num_prompt_tokens=self.num_prompt_tokens[idx],
                       output_len=self.output_len[idx], prefix_keys=keys, line=line)


# ------------------------------------------------------------------ detection
def _is_jsonl(path: Path, first: str) -> bool:
    return path.suffix in (".jsonl", ".json") or first.lstrip().startswith("{")


def _first_line(path: Path) -> str:
    require_file(path, "workload.trace")
    # utf-8-sig: a byte-order mark (Excel's CSV export) is not part of the first column's name
    with open(path, encoding="utf-8-sig", errors="replace") as fh:
        for line in fh:
            if line.strip():
                return line.strip()
    raise ConfigError(f"workload.trace: {path} is empty")


def detect_format(path: str | Path, has_columns: bool = False) -> str:
    """The trace format named by the file's header (first line)."""
    path = Path(path)
    first = _first_line(path)
    if _is_jsonl(path, first):
        try:
            keys = set(json.loads(first))
        except (json.JSONDecodeError, TypeError):
            keys = set()
        if set(MOONCAKE) <= keys:
            return "mooncake"
        header = sorted(keys)
    else:
        header = [h.strip().strip('"') for h in first.split(",")]
        if set(AZURE) <= set(header):
            return "azure"
        if set(BURSTGPT) <= set(header):
            return "burstgpt"
        if set(LENGTHS) <= set(header):
            return "lengths"
    if has_columns:
        return "generic"
    raise ConfigError(
        f"workload.trace: cannot tell the format of {path} from its header {header}; set "
        f"workload.trace_format to one of azure, mooncake, burstgpt, lengths, generic "
        f"(generic needs workload.columns: {{arrival, input, output}})")


# ------------------------------------------------------------------ validation
def _bad_rows(path: Path, lines: np.ndarray, fields: dict[str, tuple[object, str]],
              skip: bool, time_scale: float = 1.0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Validate columns; ``fields`` maps a field name to (raw values, kind) with kind
    ``length`` (integer in 1..MAX_LENGTH_TOKENS), ``time`` (finite number; times
    ``time_scale`` s below MAX_TRACE_TIMESTAMP_S in magnitude) or ``timestamp``
    (date string). Returns (numeric values, keep mask); raises on the first bad row
    unless ``skip``."""
    import pandas as pd

    values, reasons = {}, []
    keep = np.ones(len(lines), dtype=bool)
    for name, (raw, kind) in fields.items():
        raw = pd.Series(raw, dtype=object)
        missing = raw.isna().to_numpy() | (raw.astype(str).str.strip() == "").to_numpy()
        if kind == "timestamp":
            ts = pd.to_datetime(raw.where(~missing), format="ISO8601", utc=True, errors="coerce")
            bad_parse = ts.isna().to_numpy() & ~missing
            ok = ~ts.isna().to_numpy()
            num = np.full(len(raw), np.nan)
            if ok.any():
                num[ok] = (ts[ok] - ts[ok].min()).dt.total_seconds().to_numpy()
            bad_value = np.zeros(len(raw), dtype=bool)
            what_value = "not a timestamp"
        else:
            num = pd.to_numeric(raw.where(~missing), errors="coerce").to_numpy(dtype=np.float64)
            bad_parse = np.isnan(num) & ~missing
            finite = np.isfinite(num)
            with np.errstate(invalid="ignore", over="ignore"):
                if kind == "length":
                    bad_value = ~missing & ~bad_parse & (~finite | (num < 1) | (num != np.floor(num))
                                                         | (num > MAX_LENGTH_TOKENS))
                    what_value = f"must be a positive integer <= {MAX_LENGTH_TOKENS:,} (tokens)"
                else:
                    bad_value = ~missing & ~bad_parse & (~finite | (np.abs(num) * time_scale
                                                                    >= MAX_TRACE_TIMESTAMP_S))
                    what_value = (f"must be a finite number of magnitude below {MAX_TRACE_TIMESTAMP_S:.4g} s "
                                  f"(2^32 s, ~136 years; float64 resolves larger times no better than "
                                  f"1 µs, so the gaps between requests would be rounded)")
        values[name] = num
        for mask, why in ((missing, "missing"), (bad_parse, "not a number" if kind != "timestamp"
                                                   else "not a timestamp"), (bad_value, what_value)):
            if mask.any():
                i = int(np.argmax(mask))
                reasons.append((i, name, raw.iloc[i], why))
            keep &= ~mask
    if reasons and not skip:
        i, name, value, why = min(reasons, key=lambda r: r[0])
        shown = "" if why == "missing" else f" = {value!r}"
        raise ConfigError(f"{path}:{int(lines[i])}: field {name!r}{shown}: {why}{_HINT}")
    return values, keep


# ------------------------------------------------------------------ readers
def _read_csv(path: Path, skip: bool):
    """DataFrame of strings plus each row's 1-based line number (header = line 1)."""
    import pandas as pd

    try:
        # only empty cells are missing: a literal 'nan' or 'NA' is quoted back as a bad value
        df, lines, bad_lines = read_csv_lines(path, skip, dtype=str, skipinitialspace=True,
                                              keep_default_na=False, na_values=[""])
    except pd.errors.ParserError as exc:
        raise ConfigError(f"{path}: malformed CSV: {str(exc).strip()}{_HINT}") from None
    except (pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read as CSV: {exc}") from None
    df.columns = [c.strip() for c in df.columns]
    return df, lines, len(bad_lines)


def read_csv_lines(path: str | Path, skip_bad_lines: bool, **read_kw):
    """``pandas.read_csv(path, **read_kw)`` (UTF-8, a BOM dropped) with each data
    row's 1-based line in the file (the header is line 1) and the lines skipped:
    with ``skip_bad_lines``, a line with more fields than the header is skipped
    and listed (pandas' ``on_bad_lines="warn"``), else pandas' ParserError
    propagates, as its other errors do. Blank lines are not rows but keep the
    numbering; a line of delimiters only (",,") is a row whose every field is
    empty. ConfigError where the first data row has more fields than the header
    (pandas would silently drop them). Returns (rows, their lines, skipped lines)."""
    import warnings

    import pandas as pd

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = pd.read_csv(path, skip_blank_lines=False, encoding="utf-8-sig", index_col=False,
                         on_bad_lines="warn" if skip_bad_lines else "error", **read_kw)
    if any("Length of header" in str(w.message) for w in caught):
        raise ConfigError(f"{path}:2: malformed CSV: the row has more fields than the header")
    bad_lines = sorted({int(tok.split(":")[0]) for w in caught for tok in
                        str(w.message).split("Skipping line ")[1:]})
    candidates = np.arange(2, 2 + len(df) + len(bad_lines))
    lines = candidates[~np.isin(candidates, bad_lines)][: len(df)]
    blank = df.isna().all(axis=1).to_numpy().copy()
    if blank.any():
        raw = Path(path).read_text(encoding="utf-8-sig", errors="replace").splitlines()
        blank &= np.array([not (0 < n <= len(raw)) or not raw[n - 1].strip() for n in lines], dtype=bool)
    return df[~blank].reset_index(drop=True), lines[~blank], bad_lines


def _need(path: Path, have, cols) -> None:
    missing = [c for c in cols if c not in have]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {missing}; the file has {list(have)}")


class _JsonNonNumber:
    """A JSON true/false, list or object where a number belongs: reported as
    'not a number' with the value as it was written."""

    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = value

    def __repr__(self) -> str:
        return json.dumps(self.value)[:80]

    def __str__(self) -> str:
        return repr(self)


def _read_jsonl(path: Path, fields: dict[str, str], keys_field: str | None, skip: bool):
    """Rows of a JSON-lines file: raw values per field (None when absent), line numbers,
    optional key tuples, and the number of lines that were not JSON objects."""
    cols: dict[str, list] = {f: [] for f in fields}
    keys: list = []
    lines: list[int] = []
    num_bad = 0
    with open(path, encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")
                k = obj.get(keys_field) if keys_field else None
                if k is not None:
                    if not isinstance(k, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                                          and 0 <= x < MAX_PREFIX_KEY for x in k):
                        raise ValueError(f"field {keys_field!r} must be a list of integers in [0, 2^60), "
                                         f"got {k!r}"[:300])
                    k = tuple(k)
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                if skip:
                    num_bad += 1
                    continue
                raise ConfigError(f"{path}:{lineno}: malformed row: {exc}{_HINT}") from None
            for f, src in fields.items():
                v = obj.get(src)
                # true/false, strings, lists and objects are no numbers: a JSON number is written
                # bare (12, not "12"), as config.json's fields must be (sim.model_spec.HFConfig)
                cols[f].append(_JsonNonNumber(v) if isinstance(v, (bool, str, list, dict)) else v)
            keys.append(k)
            lines.append(lineno)
    return cols, np.array(lines, dtype=np.int64), keys, num_bad


def load_trace(path: str | Path, trace_format: str | None = None, columns=None,
               skip_bad_rows: bool = False) -> TraceTable:
    """Read a trace file in one of the formats above (``columns``: a
    :class:`~sim.workload.config.ColumnsConfig` for ``generic``)."""
    path = Path(path)
    fmt = trace_format or detect_format(path, has_columns=columns is not None)
    if fmt == "generic" and columns is None:
        raise ConfigError("workload.trace_format: generic needs workload.columns (arrival, input, output)")
    keys: list | None = None
    chunk = 0
    arrival_kind = "time"
    arrival_scale = 1.0
    if fmt == "mooncake" or (fmt == "generic" and _is_jsonl(path, _first_line(path))):
        if fmt == "mooncake":
            names = {"arrival": MOONCAKE[0], "input": MOONCAKE[1], "output": MOONCAKE[2]}
            arrival_scale, chunk = 1e-3, MOONCAKE_CHUNK_TOKENS
        else:
            names = {"arrival": columns.arrival, "input": columns.input, "output": columns.output}
            arrival_scale = 1e-3 if columns.arrival_unit == "ms" else 1.0
        names = {k: v for k, v in names.items() if v is not None}
        raw, lines, kept, num_bad = _read_jsonl(path, names, "hash_ids" if fmt == "mooncake" else None,
                                                skip_bad_rows)
        if fmt == "mooncake":
            keys = kept
        fields = {names[k]: raw[k] for k in names}
    elif fmt in ("azure", "burstgpt", "lengths", "generic"):
        df, lines, num_bad = _read_csv(path, skip_bad_rows)
        if fmt == "azure":
            names = {"arrival": AZURE[0], "input": AZURE[1], "output": AZURE[2]}
            arrival_kind = "timestamp"
        elif fmt == "burstgpt":
            names = {"arrival": BURSTGPT[0], "input": BURSTGPT[1], "output": BURSTGPT[2]}
        elif fmt == "lengths":
            names = {"input": LENGTHS[0], "output": LENGTHS[1]}
            if "arrived_at" in df.columns:
                names["arrival"] = "arrived_at"
        else:
            names = {"arrival": columns.arrival, "input": columns.input, "output": columns.output}
            names = {k: v for k, v in names.items() if v is not None}
            arrival_scale = 1e-3 if columns.arrival_unit == "ms" else 1.0
        _need(path, df.columns, list(names.values()))
        fields = {c: df[c].to_numpy(dtype=object) for c in names.values()}
    else:
        raise ConfigError(f"workload.trace_format: unknown {fmt!r}; valid: azure, mooncake, burstgpt, lengths, generic")

    kinds = {names["input"]: "length", names["output"]: "length"}
    if "arrival" in names:
        kinds[names["arrival"]] = arrival_kind
    vals, keep = _bad_rows(path, lines, {c: (fields[c], kinds[c]) for c in kinds}, skip_bad_rows,
                           time_scale=arrival_scale)
    num_skipped = num_bad + int((~keep).sum())
    if not keep.any():
        raise ConfigError(f"{path}: no valid rows")
    inp = vals[names["input"]][keep].astype(np.int64)
    out = vals[names["output"]][keep].astype(np.int64)
    line = lines[keep].astype(np.int64)
    if keys is not None:
        keys = [k for k, ok in zip(keys, keep.tolist()) if ok]
        if all(k is None for k in keys):
            keys, chunk = None, 0
    arr = None
    num_out_of_order = 0
    if "arrival" in names:
        arr = vals[names["arrival"]][keep] * arrival_scale
        arr = arr - arr.min()
        num_out_of_order = int(np.count_nonzero(np.diff(arr) < 0))
        order = np.argsort(arr, kind="stable")
        if np.any(order != np.arange(order.shape[0])):
            arr, inp, out, line = arr[order], inp[order], out[order], line[order]
            keys = None if keys is None else [keys[i] for i in order.tolist()]
    return TraceTable(arr, inp, out, keys, chunk, num_skipped, str(path), fmt, num_out_of_order,
                      line=line, arrival_field=names.get("arrival"))


def read_length_column(path: str | Path, column: str) -> np.ndarray:
    """Token counts (int64 ≥ 1) of ``column`` in a CSV / JSON-lines table, for
    ``{dist: empirical}``; a malformed value is an error naming file and line."""
    path = require_file(path, "empirical length table (path)")
    first = _first_line(path)
    if _is_jsonl(path, first):
        raw, lines, _, _ = _read_jsonl(path, {column: column}, None, False)
        fields = {column: (raw[column], "length")}
    else:
        df, lines, _ = _read_csv(path, False)
        _need(path, df.columns, [column])
        fields = {column: (df[column].to_numpy(dtype=object), "length")}
    vals, _ = _bad_rows(path, lines, fields, skip=False)
    if not len(vals[column]):
        raise ConfigError(f"{path}: column {column!r} has no rows")
    return vals[column].astype(np.int64)


# ------------------------------------------------------------------ shared keys
def select_rows(table: TraceTable, *, window_s, speedup: float, sample_fraction: float,
                jitter_s: float, rng_sample: np.random.Generator,
                rng_jitter: np.random.Generator) -> TraceTable:
    """Apply the keys every loader shares, in this order: ``jitter_s`` (uniform
    [0, jitter_s) added to each timestamp, then re-sorted), ``window_s`` = (start, end)
    in trace seconds (keeps start ≤ t < end, then t −= start), ``speedup`` k
    (t /= k: replay at k× the rate), ``sample_fraction`` f (round(f·n) rows chosen
    without replacement, seeded, order kept)."""
    timed = {"window_s": window_s, "speedup": speedup != 1.0, "jitter_s": jitter_s > 0}
    if table.arrival_s is None and any(v for v in timed.values()):
        used = [k for k, v in timed.items() if v]
        raise ConfigError(f"workload.{used[0]}: {table.path} has no arrival times")
    if table.arrival_s is not None:
        t = table.arrival_s
        if jitter_s > 0:
            t = t + rng_jitter.uniform(0.0, jitter_s, size=t.shape[0])
            order = np.argsort(t, kind="stable")
            table = replace(table.take(order), arrival_s=t[order])
            t = table.arrival_s
        if window_s is not None:
            start, end = window_s
            table = table.take((t >= start) & (t < end))
            table = replace(table, arrival_s=table.arrival_s - start)
            if not len(table):
                raise ConfigError(f"workload.window_s = {tuple(window_s)}: no request of {table.path} "
                                  f"arrives in that window")
        if speedup != 1.0:
            table = replace(table, arrival_s=table.arrival_s / speedup)
    if sample_fraction < 1.0:
        n = len(table)
        k = int(round(sample_fraction * n))
        if k == 0:
            raise ConfigError(f"workload.sample_fraction = {sample_fraction}: keeps no row of {n}")
        table = table.take(np.sort(rng_sample.choice(n, size=k, replace=False)))
    return table
