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


# (module constants: a global read costs less than a class attribute's, once per lookup)
_BITS, _BLOCK, _MAX = CountTable.BITS, CountTable.BLOCK, CountTable.MAX
_MASK = _BLOCK - 1
