"""Checks shared by the pydantic schemas of servesim's input files (run
config, workload, hardware profiles): what pydantic's lax mode would coerce
silently and a user almost certainly did not mean."""

from __future__ import annotations

from typing import Any, get_args, get_origin


def reject_bool_numbers(model_cls, data: Any, expected: str = "a number") -> Any:
    """``data`` unchanged, or ValueError naming the key when a bool is given
    for a field that is not a bool (``max_num_seqs: true`` is a mistake, not 1;
    pydantic would coerce it). For a ``model_validator(mode="before")``."""
    if isinstance(data, dict):
        fields = model_cls.model_fields
        for k, v in data.items():
            f = fields.get(k)
            if isinstance(v, bool) and f is not None and "bool" not in str(f.annotation):
                raise ValueError(f"{k}: expected {_mapping_or(f.annotation, expected)}, got {v!r}")
    return data


def _mapping_or(annotation: Any, expected: str) -> str:
    """What a field takes, for an error: "a mapping of keys" for a section (a
    pydantic model or a dict, e.g. ``disaggregation: {}``), else ``expected``."""
    from pydantic import BaseModel

    kinds = get_args(annotation) or (annotation,)
    if any((isinstance(a, type) and issubclass(a, BaseModel)) or get_origin(a) is dict or a is dict for a in kinds):
        return "a mapping of keys (e.g. {} for every default)"
    return expected


#: the one rule for a boolean key, in every channel (YAML file, ``--set key=value``,
#: ``--flag=value``, the Python API): YAML's booleans, nothing else. ``--set`` and
#: ``--flag=VALUE`` values are read as YAML scalars, so they take the same spellings
#: (YAML 1.1: ``true``/``false``, ``yes``/``no``, ``on``/``off``, each in lower,
#: Title or UPPER case); numbers (``1``) and quoted strings (``"true"``) are refused
#: (pydantic's StrictBool), as they are almost always a typo for something else.
BOOL_RULE = ("expected true or false (yes/no and on/off are read as booleans too; "
             "1, 0 and quoted strings are not)")


def error_text(err: dict) -> str:
    """The reason of one pydantic error (``ValidationError.errors()`` item) as
    servesim says it: without pydantic's ``Value error, `` prefix, a boolean's
    rule (:data:`BOOL_RULE`) for pydantic's terse "Input should be a valid boolean"."""
    if err.get("type") in ("bool_type", "bool_parsing"):
        return BOOL_RULE
    if err.get("type") == "model_type":  # "...a valid dictionary or instance of XConfig": no class names
        return "expected a mapping of its keys"
    return err["msg"].removeprefix("Value error, ")
