"""Cached blocks that only their own request can hit, kept as runs.

With prefix caching a block's hash chains its whole prefix
(``sim/kv_cache/hashing.py``). A block past a request's content keys hashes
the request's id, so no other request can ever hit it: only the request
itself, when it resumes after a preemption (vLLM hashes output blocks too).
Such blocks need no hash map entry. Freed, they still go to the tail of the
free queue as cached blocks do (that order decides what is evicted), but
together, as one *run* (:class:`OwnRun`):

- vLLM frees a table in reverse (``free_blocks(reversed(table))``), so a
  request's own cached blocks ``lo .. top`` are appended as one contiguous
  stretch, ``top`` first. Nothing is ever inserted inside it.
- Eviction pops the head, so it eats a run from ``top`` down: the blocks
  still cached are ``lo .. top - max(0, head_position - position)``. No
  block is visited; a run whose last position has been popped is dropped.
- A lookup walks the chain from block 0 and stops at the first miss, so the
  request hits its own blocks from ``lo`` up: the run's *last* positions.
  Taking them shortens the run from its end (``length``), again in slices.

Invariant (vLLM keeps duplicates of a hash, first inserted wins): no block
index is cached twice in one request's runs. The only way to create a
second copy is for the request to cache block i again while a run still
holds an earlier copy (its lookup stopped short of i: the last-token rule
or EAGLE's dropped block). :meth:`OwnRuns.covers` detects that; the block
pool then gives the request's runs real hashes, block by block
(:meth:`sim.kv_cache.block_pool.BlockPool.materialize_own_runs`), and the
request is hashed block by block from then on, as vLLM does.
"""

from __future__ import annotations

from collections import deque

from sim.kv_cache.free_queue import FreeBlockQueue


class OwnRun:
    """``length`` cached blocks of one request at queue positions
    ``position .. position + length - 1``, holding its block indices
    ``top, top - 1, ..., top - length + 1`` (in that order)."""

    __slots__ = ("owner", "position", "length", "top")

    def __init__(self, owner: int, position: int, length: int, top: int) -> None:
        self.owner = owner
        self.position = position
        self.length = length
        self.top = top

    def cached_range(self, head_position: int) -> tuple[int, int]:
        """(lowest, highest) block index still cached; empty when lowest > highest."""
        evicted = head_position - self.position
        return self.top - self.length + 1, self.top - (evicted if evicted > 0 else 0)


class OwnRuns:
    """Every request's runs in one free queue."""

    __slots__ = ("_queue", "_by_owner", "fifo")

    def __init__(self, queue: FreeBlockQueue) -> None:
        self._queue = queue
        self._by_owner: dict[int, list[OwnRun]] = {}
        #: runs by position, the order in which eviction reaches them (read-only outside)
        self.fifo: deque[OwnRun] = deque()

    def __bool__(self) -> bool:
        return bool(self._by_owner)

    def add(self, owner: int, blocks_top_first: list[int], top: int) -> None:
        """Append a request's cached blocks ``top, top - 1, ...`` (given in that
        order) at the queue's tail as one run."""
        if not blocks_top_first:
            return
        run = OwnRun(owner, self._queue.append_n(blocks_top_first), len(blocks_top_first), top)
        self._by_owner.setdefault(owner, []).append(run)
        self.fifo.append(run)

    def prune(self) -> None:
        """Forget the runs eviction has used up entirely (amortised O(1))."""
        fifo = self.fifo
        head = self._queue.head_position
        while fifo and fifo[0].position + fifo[0].length <= head:
            self._drop(fifo.popleft())

    def _drop(self, run: OwnRun) -> None:
        runs = self._by_owner.get(run.owner)
        if runs is not None and run in runs:
            runs.remove(run)
            if not runs:
                del self._by_owner[run.owner]

    def hits(self, owner: int, start: int, stop: int, take: bool = False) -> list[int]:
        """Blocks of ``owner``'s consecutive cached indices ``start, start + 1,
        ...`` (below ``stop``), up to the first index no run holds; in index
        order. ``take``: also remove them from the free queue and the runs
        (the blocks go back into the request's table)."""
        runs = self._by_owner.get(owner)
        if not runs:
            return []
        head = self._queue.head_position
        out: list[int] = []
        i = start
        while i < stop:
            for run in runs:
                lo, hi = run.cached_range(head)
                if lo <= i <= hi:
                    break
            else:
                break
            if lo != i:
                raise RuntimeError(f"request {owner}: own runs overlap at block {i}")
            k = (hi if hi < stop else stop - 1) - i + 1
            pos = run.position + run.length - k  # the run's last k positions hold i + k - 1 .. i
            out += self._queue.blocks_at(pos, k)[::-1]
            if take:
                self._queue.remove_n(pos, k)
                run.length -= k
                if not run.length:
                    self._drop(run)  # stays in the fifo until pruned; harmless
            i += k
        return out

    def covers(self, owner: int, start: int, stop: int) -> bool:
        """Whether a run of ``owner`` still caches an index in ``[start, stop)``."""
        runs = self._by_owner.get(owner)
        if runs is None:
            return False
        head = self._queue.head_position
        for run in runs:
            lo, hi = run.cached_range(head)
            if lo <= hi and lo < stop and hi >= start:
                return True
        return False

    def pop_owner(self, owner: int) -> list[tuple[int, int]]:
        """Forget ``owner``'s runs; returns its cached (position, block index)
        pairs, to be cached block by block."""
        runs = self._by_owner.pop(owner, None)
        if not runs:
            return []
        head = self._queue.head_position
        out = []
        for run in runs:
            lo, hi = run.cached_range(head)
            for idx in range(lo, hi + 1):
                out.append((run.position + run.top - idx, idx))
        return out

    def clear(self) -> None:
        self._by_owner.clear()
        self.fifo.clear()

    def num_cached_blocks(self) -> int:
        head = self._queue.head_position
        n = 0
        for runs in self._by_owner.values():
            for run in runs:
                lo, hi = run.cached_range(head)
                if hi >= lo:
                    n += hi - lo + 1
        return n

    def positions(self) -> list[tuple[int, int, int]]:
        """(owner, first position, number of cached blocks) of every run still
        holding a block, for invariant checks."""
        head = self._queue.head_position
        out = []
        for runs in self._by_owner.values():
            for run in runs:
                lo, hi = run.cached_range(head)
                if hi >= lo:
                    out.append((run.owner, run.position + run.top - hi, hi - lo + 1))
        return out
