"""Prefix-cache block hashes for requests that carry no token ids.

vLLM hashes each *full* block as ``H(parent_hash, block token ids, extra keys)``
chained from a seed (``kv_cache_utils.py::hash_block_tokens``, ``NONE_HASH``),
so two requests share block i's hash exactly when their first ``(i+1)·bs``
tokens agree (ENGINE_SEMANTICS §2.3). A simulated request has no token ids; it
describes its token sequence with *content keys* instead:

- ``request.prefix_keys = (k0, k1, ...)`` (ints) and
  ``request.prefix_chunk_tokens = C``: tokens ``[c·C, (c+1)·C)`` of the
  sequence (prompt, then outputs, in order) are the chunk whose content is
  ``k_c``. Two requests whose keys agree on a chunk hold identical tokens
  there. Sources: a trace's block hash ids (Mooncake: ``C = 512``), or a
  workload's shared system prompt / multi-turn conversation. A multi-turn
  workload should give a turn's keys over its outputs too, so the next turn's
  prompt (which repeats them) can hit them.
- Tokens at positions ``>= len(keys)·C`` are unique to the request: their
  content is "request ``request_id``, position p". ``request_id`` must be an
  int unique among the requests sharing one cache. A request with no keys is
  unique throughout, but still hits its *own* surviving blocks when it resumes
  after a preemption (vLLM: output blocks are hashed too).

KV block i (``block_size = bs``) covers tokens ``[i·bs, (i+1)·bs)``. Its
content key is the list of *pieces* it overlaps, in order:

- a keyed piece ``(CHUNK, k_c, start - c·C, end - c·C)`` for each chunk c it
  overlaps (offsets inside the chunk), and
- at most one unique piece ``(UNIQUE, request_id, start, end)`` (absolute
  positions) for the part past the keys.

``hash_i`` chains ``hash_{i-1}`` (``NONE_HASH`` for block 0) through each
piece in turn: ``h = hash((h, tag, 2·key, start, end))``, CPython's built-in
tuple hash of ints (xxHash-style, 64-bit). A miss at block j therefore
changes every hash after j, and lookup stops at the first miss as in vLLM.
Only ints are hashed: ``PYTHONHASHSEED`` salts ``str``/``bytes`` only, so
hashes, and whole runs, are bit-identical across processes (64-bit CPython
>= 3.8). Keys are doubled because ``hash(-1) == hash(-2)`` in CPython; the
parent is itself a ``hash()`` result and never -1. Collisions are
64-bit-random (~n²/2⁶⁵ for n distinct blocks, 3e-8 for a million), accepted
as vLLM accepts them for its builtin-hash option; keys must stay within
±2⁶⁰ (ints are hashed modulo 2⁶¹ − 1).

Caveat for trace loaders: a key is taken to cover all ``C`` tokens of its
chunk. If a trace's last chunk is partial (the prompt ends mid-chunk), tokens
after the prompt that fall in that chunk are treated as the chunk's content;
drop such a key (or pad the length) if that matters.

Hashes are computed lazily and cached on ``request.block_hashes`` (a list,
index = block index): prompt blocks when the prefix cache is first queried,
later blocks as they fill. One request is hashed for one block size.
"""

from __future__ import annotations

from sim.errors import ConfigError

NONE_HASH = 0x5EED_CAFE_F00D  # chain seed (vLLM: NONE_HASH)
_TAG_CHUNK = 1
_TAG_UNIQUE = 2
_KEY_LIMIT = 1 << 60


def _validate(request) -> None:
    keys = request.prefix_keys
    if keys:
        if request.prefix_chunk_tokens is None or request.prefix_chunk_tokens < 1:
            raise ConfigError(
                f"request {request.request_id}: prefix_chunk_tokens must be >= 1 when prefix_keys "
                f"are given, got {request.prefix_chunk_tokens!r}")
        for k in keys:
            if not isinstance(k, int) or isinstance(k, bool) or not -_KEY_LIMIT < k < _KEY_LIMIT:
                raise ConfigError(f"request {request.request_id}: prefix_keys must be ints within "
                                  f"±2**60, got {k!r}")
    if not isinstance(request.request_id, int):
        raise ConfigError(f"request_id must be an int for prefix hashing, got {request.request_id!r}")


def _piece_hashes(parent: int, keys, chunk: int, rid: int, start: int, end: int) -> int:
    """Chain ``parent`` through the pieces of tokens [start, end)."""
    h = parent
    keyed_end = len(keys) * chunk if keys else 0
    pos = start
    while pos < end:
        if pos < keyed_end:
            c = pos // chunk
            base = c * chunk
            stop = min(end, base + chunk)
            h = hash((h, _TAG_CHUNK, 2 * keys[c], pos - base, stop - base))
            pos = stop
        else:
            h = hash((h, _TAG_UNIQUE, 2 * rid, pos, end))
            pos = end
    return h


def block_hash(parent: int, request, block_index: int, block_size: int) -> int:
    """Hash of block ``block_index`` of ``request`` given its parent's hash."""
    start = block_index * block_size
    return _piece_hashes(parent, request.prefix_keys or (), request.prefix_chunk_tokens,
                         request.request_id, start, start + block_size)


def ensure_block_hashes(request, block_size: int, num_blocks: int) -> list[int]:
    """Extend ``request.block_hashes`` to at least ``num_blocks`` entries and
    return it. Only call for blocks the sequence will fully cover."""
    hashes = request.block_hashes
    if hashes is None:
        _validate(request)
        hashes = request.block_hashes = []
    i = len(hashes)
    if i >= num_blocks:
        return hashes
    parent = hashes[-1] if hashes else NONE_HASH
    keys = request.prefix_keys or ()
    chunk = request.prefix_chunk_tokens
    rid = request.request_id
    keyed_end = len(keys) * chunk if keys else 0
    append = hashes.append
    while i < num_blocks:
        start = i * block_size
        end = start + block_size
        if end <= keyed_end and start // chunk == (end - 1) // chunk:
            # Common case: the block lies inside one keyed chunk, and so do the blocks
            # after it up to the chunk's end: hashed in one loop.
            c = start // chunk
            base = c * chunk
            k2 = 2 * keys[c]
            stop = min(num_blocks, (base + chunk) // block_size)
            off = start - base
            for _ in range(i, stop):
                parent = hash((parent, _TAG_CHUNK, k2, off, off + block_size))
                append(parent)
                off += block_size
            i = stop
        else:
            parent = _piece_hashes(parent, keys, chunk, rid, start, end)
            append(parent)
            i += 1
    return hashes


def num_shareable_blocks(request, block_size: int) -> int:
    """Blocks of ``request`` that another request can hit: those lying wholly
    inside its content keys (``floor(len(keys) · C / block_size)``). Every later
    block hashes the request's id, so only the request itself can hit it
    (``sim/kv_cache/own_runs.py``). Validates the request's keys on first use,
    as :func:`ensure_block_hashes` does."""
    if request.block_hashes is None:
        _validate(request)
        request.block_hashes = []
    keys = request.prefix_keys
    return len(keys) * request.prefix_chunk_tokens // block_size if keys else 0
