"""Built-in workloads (``workloads/NAME.yaml``) and workload files; resolving ``workload.name``.

A workload file is a YAML mapping of ``workload.*`` keys written without the
``workload.`` prefix (a single top-level ``workload:`` mapping is also accepted).
Relative paths in it (``trace``, ``input_len.path``, …) are relative to the file.
See ``workloads/README.md``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from sim.errors import ConfigError, require_file
from sim.paths import workloads_dir
from sim.yaml_io import UniqueKeyLoader
from sim.workload.config import WorkloadConfig

_PATH_KEYS = (("trace",), ("input_len", "path"), ("output_len", "path"),
              ("conversation", "turn_input_len", "path"))


def builtin_workload_names() -> list[str]:
    """Names of the workloads shipped in ``workloads/`` (sorted)."""
    return sorted(p.stem for p in workloads_dir().glob("*.yaml"))


def _is_path(name_or_path: str) -> bool:
    return name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path or "\\" in name_or_path


def _parse_yaml(path: Path) -> tuple[Any, dict[str, int]]:
    """The document and the 1-based line of each top-level key."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"workload file {path}: cannot read: {exc}") from None
    try:
        loader = UniqueKeyLoader(text)  # a key given twice is an error, as in config files
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: malformed YAML: {problem}") from None
    lines: dict[str, int] = {}
    if node is not None and isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            lines[str(k.value)] = k.start_mark.line + 1
        if set(lines) == {"workload"} and isinstance(data, dict) and isinstance(data.get("workload"), dict):
            inner = node.value[0][1]
            lines = {str(k.value): k.start_mark.line + 1 for k, _ in inner.value}
            data = data["workload"]
    return data, lines


def load_workload_dict(name_or_path: str) -> dict[str, Any]:
    """The keys of built-in workload ``name`` (``workloads/NAME.yaml``) or of a workload
    file. Unknown names list the valid ones; malformed YAML, unknown keys and bad
    values name the file and line. Relative paths are made absolute (file's folder)."""
    if _is_path(name_or_path):
        path = Path(name_or_path)
        require_file(path, "workload file")
    else:
        path = workloads_dir() / f"{name_or_path}.yaml"
        if not path.is_file():
            raise ConfigError(f"workload.name: unknown workload {name_or_path!r}; valid: "
                              f"{', '.join(builtin_workload_names())} (or a path to a workload .yaml)")
    data, lines = _parse_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a workload file must be a mapping of workload keys, "
                          f"got {type(data).__name__}")
    valid = WorkloadConfig.model_fields
    for key in data:
        if key not in valid or key == "name":
            why = "a workload file cannot name another workload" if key == "name" else "unknown key"
            raise ConfigError(f"{path}:{lines.get(str(key), '?')}: workload.{key}: {why}; "
                              f"valid keys: {', '.join(k for k in valid if k != 'name')}")
    data = absolute_paths(copy.deepcopy(data), path.parent)
    WorkloadConfig.from_dict(data, source=str(path), key_lines=lines)
    return data


def absolute_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """``data`` (workload keys, changed in place and returned) with its relative
    file paths (``trace``, ``input_len.path``, ..., and ``name`` when it is a
    workload file) made absolute against ``base``: paths in a file are relative
    to that file."""
    name = data.get("name")
    if isinstance(name, str) and _is_path(name) and not Path(name).expanduser().is_absolute():
        data["name"] = str((base / Path(name).expanduser()).resolve())  # a workload file named here
    for keys in _PATH_KEYS:
        parent = data
        for k in keys[:-1]:
            parent = parent.get(k) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and isinstance(parent.get(keys[-1]), str):
            p = Path(parent[keys[-1]]).expanduser()
            if not p.is_absolute():
                parent[keys[-1]] = str((base / p).resolve())
    return data


def merge_workload_dicts(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` laid over it, nested mappings merged key by key —
    except a length spec whose ``dist`` changes, which is replaced whole."""
    out = copy.deepcopy(base)
    for k, v in override.items():
        b = out.get(k)
        if isinstance(v, dict) and isinstance(b, dict) and ("dist" not in v or v.get("dist") == b.get("dist")):
            out[k] = merge_workload_dicts(b, v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _uses_default(data: dict[str, Any]) -> bool:
    return all(data.get(k) is None for k in ("name", "trace", "input_len", "output_len"))


def resolve_workload_dict(data: dict[str, Any]) -> dict[str, Any]:
    """Expand ``name`` (or, with no name, trace or lengths, the built-in ``default``)
    into its keys, with the other keys in ``data`` overriding them, and record the
    name in ``expanded_from``. Raw dicts, so a partial override such as
    ``{"input_len": {"mean": 3000}}`` works."""
    data = {k: v for k, v in data.items() if not (k == "name" and v is None)}
    if "name" in data and data.get("trace") is not None:
        raise ConfigError(f"workload: name {data['name']!r} and trace {data['trace']!r} both given; a named "
                          "workload brings its own lengths and arrivals: give one of them")
    if "name" not in data and not _uses_default(data):
        return data
    name = data.pop("name", "default")
    if not isinstance(name, str):
        raise ConfigError(f"workload.name: expected the name of a built-in workload or a path to a workload "
                          f".yaml, got {name!r}; valid: {', '.join(builtin_workload_names())}")
    base = dict(load_workload_dict(name))
    if data.get("arrival") not in (None, "gamma") and "burstiness" not in data:
        base.pop("burstiness", None)  # the named workload's gamma shape, not for the arrival set here
    return merge_workload_dicts(base, data) | {"expanded_from": name}


def resolve_workload(cfg: WorkloadConfig) -> WorkloadConfig:
    """``cfg`` with ``name`` (or the implicit ``default``) expanded: the named
    workload's keys, overridden by every key set explicitly in ``cfg``."""
    if cfg.name is None and not _uses_default(cfg.model_dump()):
        return cfg
    name = cfg.name or "default"
    merged = resolve_workload_dict(cfg.model_dump(exclude_unset=True) | {"name": name})
    return WorkloadConfig.from_dict(merged, source=f"workload {name!r} with overrides")
