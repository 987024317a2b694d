"""Tabulation of a function of a token count (the fitted cost form's linear operators)."""

from __future__ import annotations

import numpy as np


class CountTable:
    """A function of a token count, tabulated: the fitted operators are
    nonlinear in the count and evaluated for each new count a run meets
    (every mixed step's differs). Integer counts below ``MAX`` are read from
    blocks of ``BLOCK`` values, each computed at once by ``block(counts)``
    (float64 array → list) when first needed; other counts by ``scalar(x)``.
    One count always takes the same path, so every mode gets the same floats."""

    BITS = 10
    BLOCK = 1 << BITS
    MAX = 1 << 17

    __slots__ = ("blocks", "block", "scalar")

    def __init__(self, block, scalar) -> None:
        self.blocks: dict[int, list] = {}
        self.block, self.scalar = block, scalar

    def __call__(self, x: float):
        i = int(x)
        if i == x and 0 <= i < _MAX:
            values = self.blocks.get(i >> _BITS)
            if values is None:
                b = i >> _BITS
                values = self.blocks[b] = self.block(np.arange(b * _BLOCK, (b + 1) * _BLOCK, dtype=np.float64))
            return values[i & _MASK]
        return self.scalar(x)


def linear_at(t_sum: CountTable, lm_rows: CountTable, overhead: float):
    """``CostModel._linear_s`` of the fitted form at integer counts (T tokens,
    ns sampled rows >= 0), for a decode clock's steps (a join: once per
    request): the same table values and the same adds in the same order, read
    from flat lists indexed by the count (no float round trip, no block lookup,
    no ``__call__`` dispatch). ``t_sum(T)`` gives (the operators before the lm
    head summed, the all-reduce); the step's time is ``head + lm_rows(ns) + ar
    + overhead``. The lists grow block by block, from the tables' own blocks,
    up to ``FLAT`` counts; larger counts read the tables."""
    heads: list[float] = []
    ars: list[float] = []
    lms: list[float] = []

    def grow(n: int, table: CountTable, filled: list, take) -> None:
        """``take`` ``table``'s blocks, from the first ``filled`` lacks, up to the one holding n."""
        while len(filled) <= n:
            have = len(filled)
            table(float(have))  # builds block have >> BITS, once
            take(table.blocks[have >> _BITS])

    def take_sums(values: list) -> None:
        heads.extend([h for h, _ in values])
        ars.extend([a for _, a in values])

    def at(T: int, ns: int) -> float:
        try:
            return heads[T] + lms[ns] + ars[T] + overhead
        except IndexError:
            if T < FLAT and ns < FLAT:
                grow(T, t_sum, heads, take_sums)
                grow(ns, lm_rows, lms, lms.extend)
                return heads[T] + lms[ns] + ars[T] + overhead
            head, ar = t_sum(float(T))
            return head + lm_rows(float(ns)) + ar + overhead
    return at


#: counts below which ``linear_at`` reads flat lists (16 blocks: a step's tokens are
#: at most max_num_batched_tokens plus the decoding sequences)
FLAT = 1 << 14


# (module constants: a global read costs less than a class attribute's, once per lookup)
_BITS, _BLOCK, _MAX = CountTable.BITS, CountTable.BLOCK, CountTable.MAX
_MASK = _BLOCK - 1
