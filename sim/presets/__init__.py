"""Serving-engine presets: ``engine: vllm | sglang | trtllm``, one module per
engine (:mod:`sim.presets.vllm`, :mod:`sim.presets.sglang`,
:mod:`sim.presets.trtllm`), each with every default, rule and fitted value of
its engine and their sources; :class:`~sim.presets.types.EnginePreset` says
what a preset holds. A new engine is one new module and one line in
:data:`PRESETS`. ``engine_version`` selects the documented behaviour changes
of older releases and the measured values of newer ones
(:mod:`sim.presets.versions`); without it a preset is its newest modelled
release.

A preset is a bundle of defaults for the other config keys: what differs
between the engines and matters for timing. Keys given explicitly (YAML,
``--set``, CLI options, or a ``SimConfig(...)`` argument) always win over the
preset: :func:`apply_preset` only fills keys the caller did not set.

Three kinds of defaults:

- **static** (``EnginePreset.defaults``): a value and its source.
- **hardware-dependent** (``EnginePreset.hardware_defaults``, applied by
  :func:`sim.config.resolve_scheduler_limits` once the GPU and TP are known):
  token budget and sequence limit (vLLM), SGLang's ``chunked_prefill_size``
  and ``mem_fraction_static`` heuristics; SGLang's ``max_running_requests``
  after KV sizing (``EnginePreset.max_num_seqs_from_kv``).
- **fitted** CPU/framework overheads (``EnginePreset.fitted``,
  :data:`~sim.presets.types.OVERHEAD_KEYS`): per step and per scheduled
  sequence, and the frontend's latency and streaming time. Fitted on half of
  ``../shared/silicon/dense_agg_dev.csv`` (``benchmarks/validate_silicon.py``;
  :data:`~sim.presets.types.FIT_PROVENANCE`).

This package holds data and pure functions only (it imports nothing from sim
outside it).
"""

from __future__ import annotations

from typing import Any

from sim.presets import sglang, trtllm, vllm
from sim.presets.types import FIT_PROVENANCE, OVERHEAD_KEYS, Default, EnginePreset
from sim.presets.versions import (MODELLED, RELEASE_VALUES, VERSION_CHANGES, release_values, version_defaults,
                                  version_warning)

__all__ = ["PRESETS", "FITTED", "CLIENT_PHASE_SPREAD", "Default", "EnginePreset", "FIT_PROVENANCE",
           "OVERHEAD_KEYS", "get_preset", "preset_defaults", "apply_preset", "preset_table", "preset_values", "MODELLED",
           "VERSION_CHANGES", "RELEASE_VALUES", "version_defaults", "release_values", "version_warning"]

PRESETS: dict[str, EnginePreset] = {p.name: p for p in (vllm.PRESET, trtllm.PRESET, sglang.PRESET)}
#: engine -> its fitted values (benchmarks/validate_silicon.py reads and rewrites these)
FITTED: dict[str, dict[str, Any]] = {name: dict(p.fitted) for name, p in PRESETS.items()}
#: engine -> fitted closed-loop client phase spread (sim/workload/client_phase.py)
CLIENT_PHASE_SPREAD: dict[str, float] = {name: p.client_phase_spread for name, p in PRESETS.items()}


def get_preset(name: str) -> EnginePreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; valid: {', '.join(PRESETS)}") from None


def preset_defaults(name: str) -> dict[str, Any]:
    """Static defaults of ``name`` as plain values: its newest modelled release's
    (fitted overheads included, a measured :data:`RELEASE_VALUES` entry in place
    of the fitted value of older releases)."""
    out = _static_and_fitted(name)
    out.update(release_values(name, None))
    return out


def _static_and_fitted(name: str) -> dict[str, Any]:
    p = get_preset(name)
    out = {k: d.value for k, d in p.defaults.items()}
    out.update(p.fitted)
    return out


def apply_preset(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (explicit config keys) completed with the preset of
    ``data['engine']``: preset keys fill only what ``data`` does not set.
    ``enable_chunked_prefill`` given without ``scheduler`` selects the engine's
    mode through ``EnginePreset.chunked_alias``."""
    name = data.get("engine")
    if not name:
        return data
    p = get_preset(name)
    out = dict(data)
    ecp = out.get("enable_chunked_prefill")
    if ecp is not None and "scheduler" not in out:
        out["scheduler"] = p.chunked_alias[bool(ecp)]
    version = out.get("engine_version")
    version = version if isinstance(version, str) else None
    for k, v in version_defaults(name, version).items():
        out.setdefault(k, v)
    for k, v in release_values(name, version).items():
        out.setdefault(k, v)
    for k, v in _static_and_fitted(name).items():
        out.setdefault(k, v)
    return out


def preset_values(name: str, version: str | None = None) -> list[dict[str, str]]:
    """Rows (key, value, source) of every key the preset of ``name`` fills at
    engine release ``version`` (None: its newest modelled release), with the value
    :func:`apply_preset` fills it with and where that value comes from; keys
    resolved from the GPU show their rule."""
    p = get_preset(name)
    older = version_defaults(name, version)  # (the last applicable change of a key wins, as there)
    changed = {ch.key: ch for ch in VERSION_CHANGES.get(name, ()) if older.get(ch.key, ch) == ch.value}
    measured = {rv.key: rv for rv in RELEASE_VALUES.get(name, ()) if rv.key in release_values(name, version)}
    rows = []
    for k, v in _static_and_fitted(name).items():
        if k in changed:
            v, src = changed[k].value, f"release before {changed[k].before}: {changed[k].source}"
        elif k in measured:
            v, src = measured[k].value, f"release {measured[k].since} on: {measured[k].source}"
        else:
            src = p.defaults[k].source if k in p.defaults else FIT_PROVENANCE
        if v is not None:  # (a key the preset leaves unset is not filled)
            rows.append({"key": k, "value": repr(v), "source": src})
    for k, ch in changed.items():  # a key only the older releases set
        if not any(r["key"] == k for r in rows):
            rows.append({"key": k, "value": repr(ch.value), "source": f"release before {ch.before}: {ch.source}"})
    for k, rule in p.resolved.items():
        if k not in changed:
            rows.append({"key": k, "value": "(hardware-dependent)", "source": rule})
    return rows


def preset_table() -> list[dict[str, str]]:
    """Rows (engine, key, value, source) documenting every preset default: the
    newest modelled release's, then each value of older releases
    (:data:`VERSION_CHANGES`: ``X before R``) and of a fitted key where a
    measured value of newer releases replaces it (:data:`RELEASE_VALUES`: the
    fit's value ``before R``)."""
    rows = []
    for p in PRESETS.values():
        vals = preset_defaults(p.name)
        for k, d in p.defaults.items():
            rows.append({"engine": p.name, "key": k, "value": repr(vals[k]), "source": d.source})
        since = {rv.key: rv.since for rv in RELEASE_VALUES.get(p.name, ())}
        for k, v in p.fitted.items():
            rows.append({"engine": p.name, "key": k, "value": repr(v) + (f" before {since[k]}" if k in since else ""),
                         "source": FIT_PROVENANCE})
        for k, rule in p.resolved.items():
            rows.append({"engine": p.name, "key": k, "value": "(hardware-dependent)", "source": rule})
        for ch in VERSION_CHANGES.get(p.name, ()):
            rows.append({"engine": p.name, "key": ch.key, "value": f"{ch.value!r} before {ch.before}",
                         "source": ch.source})
        for rv in RELEASE_VALUES.get(p.name, ()):
            rows.append({"engine": p.name, "key": rv.key, "value": f"{rv.value!r} from {rv.since}",
                         "source": rv.source})
    return rows
