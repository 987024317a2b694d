"""What a Ray cluster's nodes need to run sweep and plan points, shipped with the job.

On a real cluster the nodes have neither this checkout nor the files the
points name (a trace, a model's ``config.json``, a hardware profile YAML).
:func:`stage` builds one folder that Ray uploads as the job's runtime
environment ``working_dir`` (https://docs.ray.io/en/latest/ray-core/handling-dependencies.html):

- ``sim/``: the driver's own copy of the simulator, with the built-in hardware
  profiles and workloads inside it (``sim/data/``, as in a wheel: see
  :mod:`sim.paths`), so every node runs the same code and data as the driver;
- ``_servesim_files/<hash>/<name>``: each file a task names, which the task then
  names by that path relative to the working directory (Ray starts the job's
  workers there); :func:`map_strings` puts the driver's paths back into the rows.

The nodes still need servesim's dependencies (numpy, pandas, simpy, pydantic,
PyYAML): install servesim (or only its dependencies) on the nodes' Python, or
run a Ray image that has them. Ray limits a ``working_dir`` to a few hundred MB
(its ``RAY_max_working_dir_size``, not servesim's limit); traces count.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

FILES_DIR = "_servesim_files"
_FILE_SUFFIXES = (".json", ".yaml", ".yml", ".csv", ".jsonl", ".gz", ".parquet", ".txt", ".tsv")


def map_strings(obj: Any, fn: Callable[[str], str]) -> Any:
    """``obj`` with every string inside it (dict values, lists, dataclass and
    pydantic fields, recursively) replaced by ``fn(string)``; unchanged parts
    are the same objects. Pydantic models are copied without re-validation."""
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        out = {k: map_strings(v, fn) for k, v in obj.items()}
        return obj if all(out[k] is obj[k] for k in obj) else out
    if isinstance(obj, (list, tuple)):
        items = [map_strings(v, fn) for v in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        return type(obj)(items) if isinstance(obj, list) else tuple(items)
    fields = getattr(type(obj), "model_fields", None)
    if fields is not None and hasattr(obj, "model_copy"):  # pydantic
        update = {}
        for name in fields:
            v = getattr(obj, name)
            nv = map_strings(v, fn)
            if nv is not v:
                update[name] = nv
        return obj.model_copy(update=update) if update else obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        update = {}
        for f in dataclasses.fields(obj):
            if not f.init:
                continue
            v = getattr(obj, f.name)
            nv = map_strings(v, fn)
            if nv is not v:
                update[f.name] = nv
        return dataclasses.replace(obj, **update) if update else obj
    return obj


def _looks_like_file(s: str) -> bool:
    return (os.sep in s or s.lower().endswith(_FILE_SUFFIXES)) and len(s) < 4096 and "\n" not in s


class Staging:
    """The folder to upload and the mapping of the driver's file paths to it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.to_shipped: dict[str, str] = {}  # driver path (as written in the task) -> relative shipped path
        self.to_driver: dict[str, str] = {}

    def ship_file(self, s: str) -> str:
        if s in self.to_shipped:
            return self.to_shipped[s]
        if not _looks_like_file(s):
            return s
        p = Path(s).expanduser()
        try:
            is_file, is_model_dir = p.is_file(), p.is_dir() and (p / "config.json").is_file()
        except OSError:
            return s
        if not (is_file or is_model_dir):
            return s
        real = p.resolve()
        digest = hashlib.sha1(str(real).encode()).hexdigest()[:12]
        rel = f"{FILES_DIR}/{digest}/{real.name}"
        dst = self.root / rel
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            if is_file:
                shutil.copy2(real, dst)
            else:  # a model folder: its JSON files (config.json, hf_quant_config.json), never the weights
                dst.mkdir()
                for f in real.glob("*.json"):
                    if f.is_file() and f.stat().st_size < 50_000_000:
                        shutil.copy2(f, dst / f.name)
        self.to_shipped[s] = rel
        self.to_driver[rel] = s
        return rel

    def back(self, s: str) -> str:
        """A string from a worker with the shipped paths put back as the driver wrote them."""
        if FILES_DIR not in s:
            return s
        for rel, orig in self.to_driver.items():
            s = s.replace(rel, orig)
        return s

    def size_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.root.rglob("*") if f.is_file())


def stage(root: Path, tasks: list) -> tuple[Staging, list]:
    """Fill ``root`` (an empty folder) with the code, the built-in data and the
    files ``tasks`` name; returns the staging and the tasks naming the shipped files."""
    import sim
    from sim.paths import hardware_profiles_dir, workloads_dir

    pkg = Path(sim.__file__).resolve().parent
    data = pkg / "data"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")

    def ignore(folder: str, names: list[str]) -> set[str]:
        # the packaged data folders (in a wheel) are replaced by the ones this driver reads below
        own = {"hardware_profiles", "workloads"} if Path(folder) == data else set()
        return set(skip(folder, names)) | own

    shutil.copytree(pkg, root / "sim", ignore=ignore)
    for name, src in (("hardware_profiles", hardware_profiles_dir()), ("workloads", workloads_dir())):
        shutil.copytree(src, root / "sim" / "data" / name, ignore=shutil.ignore_patterns("__pycache__", "*.py", "*.md"))
    st = Staging(root)
    shipped = [map_strings(t, st.ship_file) for t in tasks]
    log.info("Ray runtime environment: %s (%.1f MB: sim/, built-in data, %d files the points name)",
             root, st.size_bytes() / 1e6, len(st.to_driver))
    return st, shipped
