"""Sweep files: a base config plus axes, expanded into points (one simulation each).

A sweep file is a YAML mapping::

    base:                          # the config every point starts from
      config: base.yaml            # optional: a config YAML (relative to this file)
      workload: chat               # optional: a built-in workload name, workload file, or a mapping
      model: llama-3.1-70b         # any config key (DESIGN.md "The contract"), dotted for workload.*
      workload.num_requests: 800
    axes:                          # key -> values; the cross product by default
      hardware: [h100_sxm, h200_sxm]
      tensor_parallel_size: [2, 4, 8]
      workload.request_rate: {start: 1, stop: 8, step: 1}   # inclusive stop
      max_num_batched_tokens: {values: [2048, 8192]}
      gpu_memory_utilization: {start: 0.8, stop: 0.9, num: 3}  # numpy.linspace, inclusive
    zip: [[hardware, tensor_parallel_size]]   # keys of a group vary together (equal lengths)
    goodput: ["ttft:1000", "tpot:60"]         # optional: SLOs of request_goodput, as vllm bench
    description: free text                     # optional

Points are ordered as ``itertools.product`` over the axes in file order (a zip
group sits where its first key is), the first axis varying slowest. A point's
id is a stable hash of its axis values (:func:`point_id`), so a re-run finds
the points it already has. Unknown keys are :class:`ConfigError` naming the
file and the key.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.config import (SimConfig, build_config, canonical_keys, check_known_keys, config_keys, file_relative_paths,
                        read_yaml, set_dotted)
from sim.vocabulary import lookup, translate
from sim.errors import ConfigError

TOP_KEYS = ("base", "axes", "zip", "goodput", "description")
RANGE_KEYS = ({"start", "stop", "step"}, {"start", "stop", "num"}, {"values"})


@dataclass(frozen=True)
class SweepPoint:
    """One point of the grid: ``values`` maps each axis key (dotted) to its value."""

    point_id: str
    index: int
    values: dict[str, Any]


@dataclass
class SweepSpec:
    """A parsed sweep file. ``base_overrides`` are dotted config keys → values."""

    source: str
    base_config_file: Path | None = None
    base_workload: str | None = None
    base_overrides: dict[str, Any] = field(default_factory=dict)
    axes: dict[str, list] = field(default_factory=dict)
    zip_groups: list[list[str]] = field(default_factory=list)
    goodput: list[str] = field(default_factory=list)
    description: str = ""


def _canonical(v: Any) -> Any:
    """Integral floats hash like ints (``4.0`` ≡ ``4``); mappings by sorted key."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, dict):
        return {str(k): _canonical(x) for k, x in sorted(v.items())}
    if isinstance(v, (list, tuple)):
        return [_canonical(x) for x in v]
    return v


def point_id(values: dict[str, Any]) -> str:
    """12 hex digits of SHA-1 over the point's axis values (order-independent)."""
    text = json.dumps(_canonical(dict(values)), sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _num(x: Any, where: str) -> float | int:
    """A range bound or step: a finite number (``.nan`` / ``.inf`` make no grid)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ConfigError(f"{where}: expected a number, got {x!r}")
    if not math.isfinite(x):
        raise ConfigError(f"{where}: expected a finite number, got {x!r} (a range needs finite start, stop "
                          "and step; list an infinite value instead, e.g. [1, 2, .inf])")
    return x


#: Points a sweep may have: each is a whole simulation, so a grid past this is a
#: typo (a step of 0.0001 instead of 1) rather than a plan, and would only
#: exhaust memory before the first point runs.
MAX_POINTS = 100_000


def _check_size(n: int, where: str, noun: str = "values") -> None:
    if n > MAX_POINTS:
        raise ConfigError(f"{where}: {n:,} {noun}; a sweep takes at most {MAX_POINTS:,} points "
                          "(check the step, or split the sweep)")


def expand_axis(key: str, spec: Any, source: str) -> list:
    """An axis value → its list of values: a list; ``{values: [...]}``;
    ``{start, stop, step}`` (inclusive of ``stop`` within 1e-9 of a step; ints
    stay ints); ``{start, stop, num}`` (``numpy.linspace``, inclusive)."""
    where = f"{source}: axes.{key}"
    if isinstance(spec, list):
        values = spec
    elif isinstance(spec, dict):
        keys = set(spec)
        if keys not in RANGE_KEYS:
            raise ConfigError(f"{where}: a range takes exactly {{start, stop, step}}, {{start, stop, num}} "
                              f"or {{values: [...]}}, got keys {sorted(keys)}")
        if "values" in spec:
            values = spec["values"]
            if not isinstance(values, list):
                raise ConfigError(f"{where}.values: expected a list, got {values!r}")
        else:
            start, stop = _num(spec["start"], f"{where}.start"), _num(spec["stop"], f"{where}.stop")
            if "step" in spec:
                step = _num(spec["step"], f"{where}.step")
                if step == 0 or (stop - start) * step < 0:
                    raise ConfigError(f"{where}.step: {step} never gets from {start} to {stop}")
                n_float = (stop - start) / step + 1e-9  # may overflow to inf for a tiny step
                if not n_float < 1e15:  # past exact integers (or inf): no count worth printing
                    raise ConfigError(f"{where}.step: {step} from {start} to {stop} gives more than "
                                      f"{MAX_POINTS:,} values; a sweep takes at most {MAX_POINTS:,} points "
                                      "(check the step, or split the sweep)")
                n = int(math.floor(n_float)) + 1
                _check_size(n, where)
                ints = all(isinstance(x, int) for x in (start, stop, step))
                values = [start + i * step if ints else round(start + i * step, 12) for i in range(n)]
            else:
                num = spec["num"]
                if isinstance(num, bool) or not isinstance(num, int) or num < 1:
                    raise ConfigError(f"{where}.num: expected an integer >= 1, got {num!r}")
                _check_size(num, where)
                if num == 1:
                    values = [start]
                else:
                    span = stop - start
                    if math.isfinite(span):
                        values = [round(start + span * i / (num - 1), 12) for i in range(num)]
                    else:  # stop − start overflows near float64's limits
                        values = [round(start * (1 - i / (num - 1)) + stop * (i / (num - 1)), 12)
                                  for i in range(num)]
    else:
        raise ConfigError(f"{where}: expected a list of values or a range {{start, stop, step|num}} "
                          f"or {{values: [...]}}, got {spec!r}")
    if not values:
        raise ConfigError(f"{where}: the axis has no values")
    return list(values)


def _flat_base(base: dict, source: str) -> tuple[Path | None, str | None, dict[str, Any]]:
    cfg_file, workload, flat = None, None, {}
    for k, v in base.items():
        k = str(k)
        if k == "config":
            cfg_file = Path(str(v))
            if not cfg_file.is_absolute():
                cfg_file = Path(source).parent / cfg_file
        elif k == "workload" and isinstance(v, str):
            workload = v
            p = Path(source).parent / v
            if v.endswith((".yaml", ".yml")) and not Path(v).is_absolute() and p.is_file():
                workload = str(p)
        elif k == "workload" and isinstance(v, dict):
            flat.update({f"workload.{wk}": wv for wk, wv in v.items()})
        else:
            flat[k] = v
    used: list = []
    flat = canonical_keys(flat, f"{source}: base", used)  # kebab case and engine aliases (sim.vocabulary)
    _no_rule_dependent_aliases(used, f"{source}: base")
    nested: dict = {}
    for k, v in flat.items():
        set_dotted(nested, k, v)
    check_known_keys(nested, f"{source}: base")
    file_relative_paths(flat, Path(source).parent, f"{source}: base")
    return cfg_file, workload, flat


def _no_rule_dependent_aliases(used: list, source: str) -> None:
    """An alias whose meaning depends on the engine's rules (``mem_fraction_static``,
    ``chunked_prefill_size``, ...: :attr:`sim.vocabulary.Alias.requires`) is refused
    in a sweep, whose points may change those rules: write servesim's key."""
    for spelling, alias in used:
        if alias.requires:
            raise ConfigError(f"{source}: {spelling}: {alias.engine}'s {alias.name} means {alias.key} only under "
                              f"{', '.join(alias.requires)} {' or '.join(map(str, next(iter(alias.requires.values()))))}"
                              f"; in a sweep write {alias.key} (with engine / kv_memory_rule / scheduler as the "
                              "points need)")


def parse_sweep(data: dict, source: str) -> SweepSpec:
    """Validate a sweep mapping (see the module docstring); ``source`` names it in errors
    and anchors relative paths."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a sweep file must be a mapping with 'base' and 'axes'")
    for k in data:
        if k not in TOP_KEYS:
            raise ConfigError(f"{source}: unknown sweep key '{k}'; valid keys: {', '.join(TOP_KEYS)}")
    base = data.get("base") or {}
    if not isinstance(base, dict):
        raise ConfigError(f"{source}: base: expected a mapping of config keys, got {base!r}")
    cfg_file, workload, flat = _flat_base(base, source)
    raw_axes = data.get("axes")
    if not isinstance(raw_axes, dict) or not raw_axes:
        raise ConfigError(f"{source}: axes: expected a non-empty mapping of config key -> values")
    axes: dict[str, list] = {}
    for k, v in raw_axes.items():
        if k == "workload" and isinstance(v, dict) and set(v) not in RANGE_KEYS:
            items = [(f"workload.{wk}", wv) for wk, wv in v.items()]
        else:
            items = [(str(k), v)]
        for key, spec in items:
            if key in axes:
                raise ConfigError(f"{source}: axes.{key} is given twice")
            if key == "config" or key == "workload":
                raise ConfigError(f"{source}: axes.{key}: not a config key (use workload.name for workloads)")
            hit = lookup(key, config_keys())
            alias = hit[1] if hit else None
            if hit is not None:
                _no_rule_dependent_aliases([(key, alias)] if alias else [], f"{source}: axes")
                key = hit[0]
                if key in axes:
                    raise ConfigError(f"{source}: axes.{key} is given twice")
            nested: dict = {}
            set_dotted(nested, key, None)
            check_known_keys(nested, f"{source}: axes")
            axes[key] = expand_axis(key, spec, source)
            if alias is not None:
                axes[key] = [translate(str(k), alias, x, f"{source}: axes") for x in axes[key]]
            if key in ("model", "hardware"):  # paths relative to the sweep file, as in base
                axes[key] = [file_relative_paths({key: v}, Path(source).parent, f"{source}: axes")[key]
                             for v in axes[key]]
    zips = data.get("zip") or []
    if not isinstance(zips, list) or not all(isinstance(g, list) for g in zips):
        raise ConfigError(f"{source}: zip: expected a list of key groups, e.g. [[hardware, tensor_parallel_size]]")
    short = next((g for g in zips if len(g) < 2), None)
    if short is not None:
        raise ConfigError(f"{source}: zip: the group {short} has {len(short)} key(s); a group zips two or more "
                          "axes together (an axis alone is a plain axis)")
    seen: set[str] = set()
    for g in zips:
        for key in g:
            if key not in axes:
                raise ConfigError(f"{source}: zip: '{key}' is not an axis; axes: {', '.join(axes)}")
            if key in seen:
                raise ConfigError(f"{source}: zip: '{key}' is in more than one group")
            seen.add(key)
        lens = {key: len(axes[key]) for key in g}
        if len(set(lens.values())) != 1:
            raise ConfigError(f"{source}: zip {g}: the axes must have equal lengths, got {lens}")
    goodput = _parse_goodput_key(data.get("goodput"), source)
    return SweepSpec(source, cfg_file, workload, flat, axes, [list(map(str, g)) for g in zips],
                     goodput, str(data.get("description") or ""))


def _parse_goodput_key(goodput: Any, source: str) -> list[str]:
    """``goodput:`` is a string (``"ttft:1000 tpot:60"``) or a list of them; each
    SLO is checked here so a mistake names the sweep file, not ``--goodput``."""
    from sim.results.metrics import parse_goodput

    if goodput is None:
        return []
    if isinstance(goodput, str):
        goodput = goodput.split()
    if not isinstance(goodput, list) or not all(isinstance(x, str) for x in goodput):
        raise ConfigError(f"{source}: goodput: expected SLOs as vllm bench writes them, e.g. "
                          f"[\"ttft:1000\", \"tpot:60\"] or \"ttft:1000 tpot:60\", got {goodput!r}")
    try:
        parse_goodput(goodput)
    except ConfigError as e:
        raise ConfigError(f"{source}: goodput: {str(e).removeprefix('--goodput ')}") from None
    return goodput


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and validate a sweep YAML file."""
    return parse_sweep(read_yaml(path, "sweep file"), str(path))


def expand_points(spec: SweepSpec) -> list[SweepPoint]:
    """Every point of the grid, in order (see the module docstring). Duplicate
    points (same values) are an error: their ids would collide."""
    group_of = {k: i for i, g in enumerate(spec.zip_groups) for k in g}
    total = 1
    for key, values in spec.axes.items():
        if key not in group_of or spec.zip_groups[group_of[key]][0] == key:
            total *= len(values)
    _check_size(total, f"{spec.source}: the grid", "points")
    dims: list[list[dict[str, Any]]] = []
    done_groups: set[int] = set()
    for key, values in spec.axes.items():
        if key in group_of:
            gi = group_of[key]
            if gi in done_groups:
                continue
            done_groups.add(gi)
            g = spec.zip_groups[gi]
            dims.append([{k: spec.axes[k][i] for k in g} for i in range(len(spec.axes[g[0]]))])
        else:
            dims.append([{key: v} for v in values])
    points, ids = [], {}
    for i, combo in enumerate(itertools.product(*dims)):
        values: dict[str, Any] = {}
        for part in combo:
            values.update(part)
        values = {k: values[k] for k in spec.axes}  # axis order, whatever the grouping
        pid = point_id(values)
        if pid in ids:
            raise ConfigError(f"{spec.source}: points {ids[pid]} and {i} have the same values {values}")
        ids[pid] = i
        points.append(SweepPoint(pid, i, values))
    return points


def point_config(spec: SweepSpec, point: SweepPoint) -> SimConfig:
    """The point's config: the base with its axis values laid over (built from the raw
    keys, so a ``workload.name`` axis replaces the whole workload). Raises ConfigError."""
    overrides = dict(spec.base_overrides)
    overrides.update(point.values)
    for k in [k for k, v in overrides.items() if v is None]:
        del overrides[k]  # an axis value null: the key's default (or the config file's value)
    workload = overrides.pop("workload.name", spec.base_workload)
    try:
        return build_config(spec.base_config_file, overrides, None, workload)
    except ConfigError as e:  # build_config says '--set' for these keys; they came from the sweep file
        msg = str(e).replace("--set: ", "").replace("Value error, ", "")
        raise ConfigError(f"{spec.source}: point {point.point_id}: {msg}") from None


def _model_and_hardware_error(cfg: SimConfig, known: dict) -> str | None:
    """Why the point's model or hardware cannot be loaded (an unknown name, a
    missing or bad file), or None; memoised per (model, hardware) in ``known``."""
    key = (cfg.model, cfg.hardware)
    if key not in known:
        from sim.hardware.profile import get_hardware
        from sim.model_spec import get_model

        try:
            get_model(cfg.model)
            get_hardware(cfg.hardware)
            known[key] = None
        except ConfigError as e:
            known[key] = str(e)
    return known[key]


def _check_axis_values(spec: SweepSpec, points: list[SweepPoint], errors: dict[str, str]) -> None:
    """An axis value invalid in every point carrying it (or no valid point at all)
    is the sweep file's error, raised before anything runs (:mod:`sim.sweep.grid_values`)."""
    from sim.sweep.grid_values import invalid_everywhere

    if not errors:
        return
    if len(errors) == len(points):
        raise ConfigError(f"no point of the sweep is valid; e.g. {next(iter(errors.values()))}")
    hit = invalid_everywhere(spec.axes, [(p.point_id, p.values) for p in points], errors)
    if hit is not None:
        raise ConfigError(f"axes.{hit[0]} = {hit[1]} is invalid in every point; e.g. {hit[2]}")


def base_config(spec: SweepSpec) -> SimConfig:
    """The base config alone (no axis values), used to check the base and to fingerprint a sweep."""
    return build_config(spec.base_config_file, dict(spec.base_overrides), None, spec.base_workload)


def fingerprint(spec: SweepSpec) -> str:
    """A hash of everything but the axes (base keys, config and workload file contents,
    goodput): results of a different base must not be mixed into one folder."""
    files = {}
    for p in (spec.base_config_file, spec.base_workload):
        if p is not None and Path(p).is_file():
            files[str(p)] = Path(p).read_text()
    blob = {"base": _canonical(spec.base_overrides), "workload": spec.base_workload, "files": files,
            "goodput": sorted(spec.goodput)}
    return hashlib.sha1(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


#: keys whose values name things that must exist (a typo is the user's error,
#: not an infeasible point): key -> loader raising ConfigError
def _name_checks():
    from sim.hardware.profile import get_hardware  # noqa: PLC0415
    from sim.model_spec import get_model  # noqa: PLC0415
    from sim.scheduler.registry import get_scheduler_class  # noqa: PLC0415

    return {"hardware": get_hardware, "model": get_model, "scheduler": get_scheduler_class}


def check_names(values_by_key: dict[str, list], prefix: str) -> None:
    """Raise ConfigError for a hardware profile, model or scheduler name that
    does not exist, naming where it came from (``prefix`` + key, e.g.
    ``sweep.yaml: axes.hardware``) and the value, before any point runs: a
    mistyped name in a grid is an error, not a column of infeasible points."""
    for key, check in _name_checks().items():
        for v in values_by_key.get(key, []):
            try:
                check(str(v))
            except ConfigError as e:
                msg = str(e).removeprefix(f"{key}: ")
                raise ConfigError(f"{prefix}{key}: {msg}") from None


def _read_meta(path: Path) -> dict:
    """``sweep_meta.json`` of an output folder; a damaged one is an error naming it."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        meta = e
    if not isinstance(meta, dict):
        what = f"not valid JSON ({meta})" if isinstance(meta, Exception) else \
            f"expected a JSON object, got {type(meta).__name__}"
        raise ConfigError(f"{path}: {what}; it records which sweep wrote this folder. Remove the file "
                          "if the folder holds results of this same sweep, or give a new --out")
    return meta


def run_sweep(spec: SweepSpec, out_dir: str | Path, *, executor: str = "local", workers: int | None = None,
              ray_address: str | None = None, quiet: bool = False, retry_failed: bool = True):
    """Run every point of ``spec`` not yet in ``out_dir`` and return the whole table
    (a pandas DataFrame in grid order; see :mod:`sim.sweep.executors` for the columns and
    files). ``executor``: ``local`` (process pool of ``workers``) or ``ray``."""
    from sim.results.metrics import parse_goodput
    from sim.sweep.executors import (PointTask, ResultStore, check_executor, evaluate_task, progress_bar,
                                     run_local, run_ray)

    check_executor(executor, ray_address)
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers: must be >= 1, got {workers}")
    goodput = parse_goodput(spec.goodput) or None
    check_names({k: list(v) for k, v in spec.axes.items()}, f"{spec.source}: axes.")
    points = expand_points(spec)
    out = Path(out_dir)
    store = ResultStore(out)
    meta_path, fp = out / "sweep_meta.json", fingerprint(spec)
    if meta_path.is_file():
        old = _read_meta(meta_path).get("fingerprint")
        if old != fp and store.rows:
            raise ConfigError(f"{out}: holds results of a sweep with a different base config "
                              f"(fingerprint {old}, this sweep {fp}); use another --out or delete the folder")
    done = store.done_ids(retry_failed)
    tasks = []
    errors: dict[str, str] = {}
    known: dict[tuple[str, str], str | None] = {}  # (model, hardware) -> why it cannot be loaded
    for p in points:
        try:
            cfg = point_config(spec, p)
        except ConfigError as e:
            cfg, errors[p.point_id] = None, str(e)
        if cfg is not None:
            why = _model_and_hardware_error(cfg, known)
            if why is not None:  # a typo in a name or path: the sweep file's error, not infeasibility
                cfg, errors[p.point_id] = None, f"{spec.source}: point {p.point_id}: {why}"
        if p.point_id not in done:
            tasks.append(PointTask(p.point_id, p.values, cfg, goodput, errors.get(p.point_id)))
    _check_axis_values(spec, points, errors)  # before anything is written
    meta_path.write_text(json.dumps({"fingerprint": fp, "source": spec.source, "axes": list(spec.axes),
                                     "zip": spec.zip_groups, "num_points": len(points)}, indent=2) + "\n")
    order = [p.point_id for p in points]
    in_grid = set(order)
    stale = sum(1 for p in store.rows if p not in in_grid)
    if stale:
        print(f"note: {stale} result(s) in {out} are of points not in this grid; results.csv lists "
              "only this grid's points (the others stay in points.jsonl)", file=sys.stderr)
    store.grid = order
    reused = len(points) - len(tasks)
    if reused:  # a resumed sweep: say so (the summary line counts every point alike)
        print(f"note: {reused} of {len(points)} point(s) already in {out} (points.jsonl) were reused, not rerun"
              + ("" if retry_failed else "; --retry-failed reruns the failed ones"), file=sys.stderr)
    bar = progress_bar(len(tasks), quiet)

    def on_row(row: dict) -> None:
        store.add(row)
        if bar is not None:
            bar.update(1)

    try:
        ready = [t for t in tasks if t.cfg is not None]
        for t in tasks:
            if t.cfg is None:
                on_row(evaluate_task(t))
        if ready and executor == "ray":
            run_ray(ready, on_row, workers, ray_address)
        elif ready:
            run_local(ready, on_row, workers)
    finally:
        if bar is not None:
            bar.close()
        store.flush(order)
    return store.frame(order)
