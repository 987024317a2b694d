"""The free-block queue of a prefix-caching block pool, in eviction order.

vLLM's ``FreeKVCacheBlockQueue`` (``vllm/v1/core/kv_cache_utils.py``) is a
doubly linked list of blocks: allocation pops the head, a freed cached block
is appended at the tail (LRU), a freed uncached block is put back at the head
(``prepend_n``, v0.24), and a prefix hit removes a block from the middle.
Touching every block in Python costs microseconds per block, which is what
made page size 1 (SGLang's default) thirty times slower than page size 16.

:class:`FreeBlockQueue` keeps the same order in two Python lists whose slice
operations run in C:

- the *front*: blocks put back at the head, a stack (its end is the head);
- the *tail queue*: every other free block in order, read from index ``_h``
  on; appends go to its end. Each entry has an absolute *position* (its
  index plus ``_base``, which grows when the consumed prefix is dropped), so
  a position stays valid for as long as its block is in the queue.

A block removed from the middle (a prefix hit) leaves a hole: its entry
becomes 0, the null block, which never enters the queue; pops skip holes.
Positions increase from head to tail, so "has the block at position p been
popped?" is ``p < head_position``: the block pool evicts a whole run of
cached blocks that way without visiting its blocks.

Block ids are ints ``>= 1``; the queue does not check that a block is in it
once (the pool does).
"""

from __future__ import annotations

from collections.abc import Iterable

_HOLE = 0  # the null block: never free, so never a real entry
_COMPACT_AT = 1 << 14  # drop the consumed prefix once it is this long and half the list


class FreeBlockQueue:
    """Free blocks in eviction order (head = next to be allocated)."""

    __slots__ = ("_front", "_q", "_h", "_base")

    def __init__(self, block_ids: Iterable[int]) -> None:
        self._front: list[int] = []
        self._q: list[int] = list(block_ids)
        self._h = 0
        self._base = 0

    # ---- positions in the tail queue --------------------------------------------
    @property
    def head_position(self) -> int:
        """Absolute position of the tail queue's first unconsumed entry: a block
        appended at position p has been popped iff ``p < head_position`` (or it
        was removed)."""
        return self._base + self._h

    def block_at(self, position: int) -> int:
        """The block at ``position`` (0 for a hole)."""
        return self._q[position - self._base]

    def blocks_at(self, position: int, n: int) -> list[int]:
        """The ``n`` entries from ``position`` on, in queue order."""
        i = position - self._base
        return self._q[i:i + n]

    # ---- operations ------------------------------------------------------------
    def popleft_n(self, n: int) -> list[int]:
        """Pop ``n`` blocks from the head (the caller has checked that ``n``
        are free)."""
        front = self._front
        if n == 1:  # a decode crossing into its next block: the common case
            if front:
                return [front.pop()]
            q, h = self._q, self._h
            try:
                b = q[h]
                while not b:  # skip holes
                    h += 1
                    b = q[h]
            except IndexError:
                raise ValueError("free queue exhausted") from None
            h += 1
            if h >= _COMPACT_AT and 2 * h >= len(q):
                del q[:h]
                self._base += h
                h = 0
            self._h = h
            return [b]
        if front:
            k = n if n < len(front) else len(front)
            out = front[:-k - 1:-1]
            del front[-k:]
            n -= k
            if not n:
                return out
        else:
            out = []
        q, h = self._q, self._h
        while n:
            chunk = q[h:h + n]
            if not chunk:
                raise ValueError("free queue exhausted")
            h += len(chunk)
            if _HOLE in chunk:
                chunk = [b for b in chunk if b]
            out += chunk
            n -= len(chunk)
        if h >= _COMPACT_AT and 2 * h >= len(q):
            del q[:h]
            self._base += h
            h = 0
        self._h = h
        return out

    def append_n(self, blocks: list[int]) -> int:
        """Append ``blocks`` at the tail in order; returns the first one's position."""
        pos = self._base + len(self._q)
        self._q += blocks
        return pos

    def append(self, block: int) -> int:
        """Append one block at the tail; returns its position."""
        pos = self._base + len(self._q)
        self._q.append(block)
        return pos

    def prepend_n(self, blocks: list[int]) -> None:
        """Put ``blocks`` at the head, ``blocks[0]`` first (v0.24 ``prepend_n``)."""
        self._front += blocks[::-1]

    def remove(self, position: int) -> None:
        """Remove the block at ``position`` (of the tail queue) from the queue."""
        self._q[position - self._base] = _HOLE

    def remove_n(self, position: int, n: int) -> None:
        """Remove the ``n`` blocks from ``position`` on."""
        i = position - self._base
        self._q[i:i + n] = [_HOLE] * n

    def block_ids(self) -> list[int]:
        """The queue from head to tail. O(queue length)."""
        return self._front[::-1] + [b for b in self._q[self._h:] if b]
