"""Which axis value of a grid is invalid on its own (shared by ``sweep`` axes and
``plan --vary``): a value that makes *every* point carrying it invalid
(``max_num_seqs: 0``) is the user's error, raised before anything runs; one that
is invalid only beside some other axis value (vLLM rejects the combination)
leaves just those points infeasible."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def invalid_everywhere(keys: Iterable[str], items: list[tuple[str, dict[str, Any]]],
                       errors: dict[str, str]) -> tuple[str, str, str] | None:
    """``items``: (id, axis values) per point; ``errors``: id → why its config is
    invalid. Returns (key, value as repr, one error) of the first value whose
    points are all in ``errors``, else None."""
    for key in keys:
        by_value: dict[str, list[str]] = {}
        for ident, values in items:
            by_value.setdefault(repr(values.get(key)), []).append(ident)
        for value, ids in by_value.items():
            if all(i in errors for i in ids):
                return key, value, errors[ids[0]]
    return None
