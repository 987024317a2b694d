"""Checks shared by the pydantic schemas of servesim's input files (run
config, workload, hardware profiles): what pydantic's lax mode would coerce
silently and a user almost certainly did not mean."""

from __future__ import annotations

from typing import Any


def reject_bool_numbers(model_cls, data: Any, expected: str = "a number") -> Any:
    """``data`` unchanged, or ValueError naming the key when a bool is given
    for a field that is not a bool (``max_num_seqs: true`` is a mistake, not 1;
    pydantic would coerce it). For a ``model_validator(mode="before")``."""
    if isinstance(data, dict):
        fields = model_cls.model_fields
        for k, v in data.items():
            f = fields.get(k)
            if isinstance(v, bool) and f is not None and "bool" not in str(f.annotation):
                raise ValueError(f"{k}: expected {expected}, got {v!r}")
    return data
