"""Assemble a ``fitted_v1`` efficiency section and write a profile YAML.

    eff = build_efficiency(fits, base)       # fits: family -> FitResult
    write_profile(path, hw, header)          # hw: HardwareProfile with eff and provenance

Families without measurements (e.g. all-reduce on a single-GPU machine) come
from the base profile: its own ``fitted_v1`` parameters, or -- for a
``scalar`` base -- parameters that reproduce the scalar roofline
(:func:`scalar_as_fitted`). The writer records in ``provenance`` which
families were fitted, from what, when, and with what error.
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path
from typing import Any

import yaml

from calibration.fit import FitResult
from sim.hardware.efficiency import (AllReduceParams, ContextAttentionParams, ElementwiseParams,
                            FittedEfficiency, GemmParams, GenerationAttentionParams)
from sim.hardware.profile import HardwareProfile, _validate

_CORE_DEFAULTS = dict(compute_half_flops=1.0, compute_exponent=1.0, memory_half_bytes=1.0,
                      memory_exponent=1.0)


def scalar_as_fitted(hw: HardwareProfile) -> FittedEfficiency:
    """``fitted_v1`` parameters equivalent (up to the smooth max) to ``hw``'s
    efficiencies: constant efficiencies, the scalar launch overhead, the
    interconnect latency and all-reduce efficiency. Used for families a
    calibration could not measure."""
    eff = hw.efficiency
    if isinstance(eff, FittedEfficiency):
        return eff
    ce, me, launch = eff.operator_efficiency("gemm")
    core = dict(_CORE_DEFAULTS, compute_efficiency_max=ce, memory_efficiency_max=me,
                launch_s=launch)
    ca, ma, la = eff.operator_efficiency("attention")
    attn = dict(_CORE_DEFAULTS, compute_efficiency_max=ca, memory_efficiency_max=ma,
                launch_s=2 * la)
    _, mel, lel = eff.operator_efficiency("elementwise")
    return FittedEfficiency(
        form="fitted_v1", step_overhead_s=eff.step_overhead_s,
        gemm={"bf16": GemmParams(**core, k_serial_s=0.0, k_split=1e6)},
        context_attention=ContextAttentionParams(**attn, softmax_flops_per_score=0.0, seq_head_s=0.0),
        generation_attention=GenerationAttentionParams(**attn, seq_head_s=0.0, kv_tile=1),
        elementwise=ElementwiseParams(memory_efficiency=mel, launch_s=lel),
        all_reduce=AllReduceParams(latency_s=hw.interconnect.latency_s, latency_per_gpu_s=0.0,
                                   bus_efficiency={2: eff.all_reduce_efficiency}, half_bytes=1.0,
                                   exponent=1.0))


def build_efficiency(fits: dict[str, FitResult], base: HardwareProfile, *,
                     elementwise: ElementwiseParams | None = None) -> FittedEfficiency:
    """A ``fitted_v1`` section from fitted families, the rest from ``base``.
    Elementwise kernels (no table) default to the bf16 GEMM's memory efficiency
    at a 64 MiB transfer (a norm over a few thousand tokens) and its launch cost."""
    fallback = scalar_as_fitted(base)
    gemm = dict(fallback.gemm)
    for fam, fit in fits.items():
        if fam.startswith("gemm.") and "@" not in fam:
            gemm[fam.split(".", 1)[1]] = fit.params
    if elementwise is None:
        if "gemm.bf16" in fits:
            g = fits["gemm.bf16"].params
            eff_64mib = g.memory_efficiency_max / (1.0 + (g.memory_half_bytes / 2**26) ** g.memory_exponent)
            elementwise = ElementwiseParams(memory_efficiency=eff_64mib, launch_s=g.launch_s)
        else:
            elementwise = fallback.elementwise
    pick = {k: fits[k].params if k in fits else getattr(fallback, k)
            for k in ("context_attention", "generation_attention", "all_reduce")}
    moe = dict(fallback.moe)
    for fam, fit in fits.items():
        if fam.startswith("moe.") and "@" not in fam:
            moe[fam.split(".", 1)[1]] = fit.params
    return FittedEfficiency(form="fitted_v1", step_overhead_s=fallback.step_overhead_s, gemm=gemm,
                            elementwise=elementwise, moe=moe, mla=fallback.mla, gdn=fallback.gdn,
                            custom_all_reduce=fallback.custom_all_reduce, mla_engines=fallback.mla_engines,
                            moe_engines=fallback.moe_engines,
                            **pick)


def _round(x: Any) -> Any:
    """4 significant digits for floats (readable YAML; far below fit error)."""
    if isinstance(x, float) and x != 0 and math.isfinite(x):
        return float(f"{x:.4g}")
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    return x


def today() -> str:
    return _dt.date.today().isoformat()


def profile_dict(hw: HardwareProfile) -> dict:
    """Plain dict in the order of the built-in profiles, floats rounded."""
    data = hw.model_dump()
    # every field of the profile model, in its declared order (the built-in files' order); an
    # optional section the profile lacks (``network``) is left out, not written as null
    order = [k for k in HardwareProfile.model_fields if data.get(k) is not None]
    data["peak_flops_per_s"] = {k: v for k, v in data["peak_flops_per_s"].items() if v is not None}
    return {k: _round(data[k]) if k != "provenance" else data[k] for k in order}


class _Dumper(yaml.SafeDumper):
    """Floats as 4-significant-digit scientific numbers YAML 1.1 reads back as
    floats (PyYAML needs a '.' in the mantissa: 1.0e-09, not 1e-09)."""


def _float(dumper: yaml.SafeDumper, x: float) -> yaml.ScalarNode:
    if x != 0 and math.isfinite(x) and not 1e-3 <= abs(x) < 1e5:
        mant, exp = f"{x:.4g}".split("e") if "e" in f"{x:.4g}" else (f"{x:.4g}", None)
        if exp is None:
            mant, exp = f"{x:.3e}".split("e")
        if "." not in mant:
            mant += ".0"
        return dumper.represent_scalar("tag:yaml.org,2002:float", f"{mant}e{int(exp):+03d}")
    return dumper.represent_float(x)


_Dumper.add_representer(float, _float)


def write_profile(path: str | Path, hw: HardwareProfile, header: str = "") -> Path:
    """Write ``hw`` as YAML (validated by loading it back) with ``header`` as
    comment lines on top."""
    import textwrap  # noqa: PLC0415

    path = Path(path)
    data = profile_dict(hw)
    _validate(data, str(path))  # rounded values must still be a valid profile
    text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
    lines = [f"# {line}".rstrip() for para in header.strip().splitlines()
             for line in textwrap.wrap(para, 96) or [""]] if header else []
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines + [text]) if lines else text)
    _validate(yaml.safe_load(path.read_text()), str(path))  # the file reads back as written
    return path


def _yaml_block(key: str, value: Any, indent: int) -> list[str]:
    text = yaml.dump({key: value}, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
    return [" " * indent + line for line in text.rstrip("\n").splitlines()]


def update_profile_file(path: str | Path, hw: HardwareProfile, header: str = "") -> Path:
    """Rewrite only the ``efficiency`` section and the changed ``provenance``
    entries of an existing profile file, keeping its comments and layout;
    other files (or an unrecognised layout) are written whole."""
    path = Path(path)
    if not path.is_file():
        return write_profile(path, hw, header)
    lines = path.read_text().splitlines()
    top = [i for i, ln in enumerate(lines) if ln and not ln[0].isspace() and not ln.startswith("#")]
    keys = {lines[i].split(":", 1)[0]: i for i in top}
    if "efficiency" not in keys or "provenance" not in keys:
        return write_profile(path, hw, header)
    data = profile_dict(hw)

    def span(key: str) -> tuple[int, int]:
        start = keys[key]
        after = [i for i in top if i > start]
        return start, (after[0] if after else len(lines))

    old = yaml.safe_load(path.read_text()).get("provenance", {})
    p0, p1 = span("provenance")
    prov = lines[p0:p1]
    for k, v in data["provenance"].items():
        if old.get(k) == v:
            continue
        new = _yaml_block(k, v, 2)
        idx = [i for i, ln in enumerate(prov) if ln.startswith(f"  {k}:")]
        if idx:  # replace the entry and its continuation lines
            j = idx[0] + 1
            while j < len(prov) and prov[j].startswith("    "):
                j += 1
            prov[idx[0]:j] = new
        else:
            prov += new
    e0, e1 = span("efficiency")
    eff = _yaml_block("efficiency", data["efficiency"], 0)
    if p0 > e0:
        lines = lines[:e0] + eff + lines[e1:p0] + prov + lines[p1:]
    else:
        lines = lines[:p0] + prov + lines[p1:e0] + eff + lines[e1:]
    path.write_text("\n".join(lines) + "\n")
    _validate(yaml.safe_load(path.read_text()), str(path))
    return path


def with_efficiency(hw: HardwareProfile, eff: FittedEfficiency, provenance: dict[str, str],
                    **fields: Any) -> HardwareProfile:
    """``hw`` with a new efficiency section, provenance entries and fields."""
    data = hw.model_dump()
    data["efficiency"] = eff.model_dump()
    data["provenance"] = {**data["provenance"], **provenance}
    data.update(fields)
    return _validate(data, f"<profile {data['name']}>")
