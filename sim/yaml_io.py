"""YAML reading shared by config, sweep and hardware-profile files: PyYAML's
safe loader, except that a key given twice in one mapping is an error (plain
YAML keeps the last one silently), and that ``8.0e10`` and ``80e9`` are numbers
as in YAML 1.2 (PyYAML follows YAML 1.1, which needs ``8.0e+10``)."""

from __future__ import annotations

import re
from typing import Any

import yaml


# libyaml's parser when PyYAML was built with it (about 10x faster; start-up reads
# the model presets and a hardware profile), else the pure-Python one: same results.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UniqueKeyLoader(_SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (plain
    YAML keeps the last one silently)."""


def _construct_unique_mapping(loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (first on line {seen[key]})", key_node.start_mark)
        seen[key] = key_node.start_mark.line + 1
    return _SafeLoader.construct_mapping(loader, node, deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)
# YAML 1.2 floats: an exponent without a sign, a mantissa without a dot (the YAML 1.1
# patterns stay first; this one adds the forms they read as strings).
UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def safe_load_unique(text: str) -> Any:
    """``yaml.safe_load`` that raises ``yaml.constructor.ConstructorError``
    (a ``yaml.YAMLError``, with the line) for a duplicate key."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 -- a SafeLoader subclass


def safe_load(text: str) -> Any:
    """``yaml.safe_load``, with libyaml's parser where PyYAML has it (the same
    objects; several times faster on the package's own data files)."""
    return yaml.load(text, Loader=_SafeLoader)  # noqa: S506 -- a SafeLoader
