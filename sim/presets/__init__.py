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
           "OVERHEAD_KEYS", "get_preset", "preset_defaults", "apply_preset", "preset_table", "MODELLED",
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


def preset_table() -> list[dict[str, str]]:
    """Rows (engine, key, value, source) documenting every preset default."""
    rows = []
    for p in PRESETS.values():
        vals = preset_defaults(p.name)
        for k, d in p.defaults.items():
            rows.append({"engine": p.name, "key": k, "value": repr(vals[k]), "source": d.source})
        for k, v in p.fitted.items():
            rows.append({"engine": p.name, "key": k, "value": repr(v), "source": FIT_PROVENANCE})
        for k, rule in p.resolved.items():
            rows.append({"engine": p.name, "key": k, "value": "(hardware-dependent)", "source": rule})
        for ch in VERSION_CHANGES.get(p.name, ()):
            rows.append({"engine": p.name, "key": ch.key, "value": f"{ch.value!r} before {ch.before}",
                         "source": ch.source})
        for rv in RELEASE_VALUES.get(p.name, ()):
            rows.append({"engine": p.name, "key": rv.key, "value": f"{rv.value!r} from {rv.since}",
                         "source": rv.source})
    return rows
