"""Policy comparison: run several variants of one config on the identical
request stream (paired comparison) and collect their results.

A variant is a name plus config overrides (``scheduler=static``,
``max_num_batched_tokens=2048``, ``enable_prefix_caching=true``...). The
request specs (arrivals, lengths, prefix keys) are generated once from the
base config and handed to every variant, so differences come from the
serving policy alone. Variants run in parallel processes when there is more
than one CPU.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.config import SimConfig, canonical_keys, check_known_keys, is_text_key, parse_value, set_dotted, read_yaml
from sim.errors import ConfigError, InfeasibleError, require_file
from sim.presets import get_preset


@dataclass
class Variant:
    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    #: where it was defined (``--variants FILE``, ``--variant``, ``--schedulers``): errors name it
    source: str = "--variant"
    #: engine aliases it was given with (sim.vocabulary), checked on the variant's config
    aliases: list = field(default_factory=list)


_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
#: files ``servesim compare`` writes beside the variant folders (sim/compare/report.py, sim/compare/plots.py)
RESERVED_NAMES = frozenset({"comparison.csv", "report.md", "report.html", "variants.json", "ttft_cdf.png", "itl_cdf.png",
                            "latency_percentiles.png", "timeline.png", "latency_breakdown.png"})


def _check_variant(name: str, overrides: dict, source: str) -> None:
    """A variant name becomes a folder under ``--out``: letters, digits and
    ``. _ + -`` only. Workload keys cannot differ between variants: every
    variant replays the same request stream (use ``servesim sweep`` to vary it)."""
    if not _NAME_OK.match(name):
        raise ConfigError(f"{source}: variant name {name!r} must start with a letter or digit and hold only "
                          "letters, digits, '.', '_', '+' or '-' (it names a folder under --out)")
    if name in RESERVED_NAMES:
        raise ConfigError(f"{source}: variant name {name!r} is a file the comparison writes under --out; "
                          "choose another name")
    if "workload" in overrides:
        wl = overrides["workload"]
        keys = (", ".join(f"workload.{k}" for k in wl) if isinstance(wl, dict) and wl
                else f"workload {wl!r}")  # workload: chat names a whole workload
        base = ("the workload= argument or workload.* keywords" if source.startswith("servesim.")
                else "--workload / --set")
        raise ConfigError(f"{source}: variant {name!r} sets {keys}; every variant replays the identical request "
                          f"stream, so workload keys belong to the base config ({base}); "
                          "use servesim sweep to vary the workload")


def parse_variant(text: str) -> Variant:
    """``"NAME key=value key=value"`` → Variant; errors name the text."""
    parts = text.split()
    if not parts or "=" in parts[0]:
        raise ConfigError(f"--variant {text!r}: expected 'NAME key=value ...' (the name comes first)")
    given: dict[str, Any] = {}
    for p in parts[1:]:
        if "=" not in p:
            raise ConfigError(f"--variant {text!r}: {p!r} is not key=value")
        k, v = p.split("=", 1)
        # a release is the text typed (engine_version=0.10 is no number 0.1), as --set reads it
        if is_text_key(k) and not v.strip():
            raise ConfigError(f"--variant {text!r}: {k} has no value; give one (e.g. {k}=0.12.0), or leave it out "
                              "for the preset's newest modelled release")
        given[k] = v if is_text_key(k) else parse_value(v)
    used: list = []
    overrides: dict[str, Any] = {}
    for k, v in canonical_keys(given, f"--variant {parts[0]}", used).items():  # kebab case and aliases too
        set_dotted(overrides, k, v)
    check_known_keys(overrides, f"--variant {parts[0]}")
    _check_variant(parts[0], overrides, "--variant")
    return Variant(parts[0], overrides, aliases=used)


def load_variants_file(path: str | Path) -> list[Variant]:
    """A YAML mapping ``name: {key: value, ...}`` (dotted or nested keys)."""
    require_file(path, "--variants")
    return variants_from_mapping(read_yaml(path), str(path), label=f"--variants {path}")


def variants_from_mapping(data, source: str, label: str | None = None) -> list[Variant]:
    """``{name: {key: value, ...}, ...}`` (dotted or nested keys) → variants;
    errors name ``source`` (a file, or the Python call); ``label`` is the
    variants' :attr:`Variant.source` (default ``source``)."""
    out = []
    for name, ov in data.items():
        if not isinstance(ov, dict):
            raise ConfigError(f"{source}: variant {name!r} must map config keys to values, got {ov!r}")
        flat: dict[str, Any] = {}
        used: list = []
        for k, v in canonical_keys({str(k): v for k, v in ov.items()}, f"{source}: variant {name}", used).items():
            set_dotted(flat, str(k), v)
        check_known_keys(flat, f"{source}: variant {name}")
        _check_variant(str(name), flat, source)
        out.append(Variant(str(name), flat, label or source, used))
    return out


def variants_from_args(schedulers: str | None, variant_args: list[str] | None,
                       variants_file: str | Path | None, *, schedulers_source: str = "--schedulers",
                       engine: str | None = None) -> list[Variant]:
    """The variants of ``--schedulers`` (batching modes, comma-separated; named in
    errors as ``schedulers_source``: the Python API names itself), ``--variant``
    and ``--variants``; when none is given, the three textbook batching modes
    (static, continuous, chunked), or with an ``engine`` preset the two that
    engine offers: chunked prefill on and off (its ``enable_chunked_prefill``
    modes, ``EnginePreset.chunked_alias``)."""
    variants: list[Variant] = []
    src = schedulers_source
    if schedulers is not None:
        parts = [x.strip() for x in schedulers.split(",")]
        names = [x for x in parts if x]
        if names and len(names) < len(parts):
            raise ConfigError(f"{src} {schedulers!r}: an empty entry; give batching modes separated by commas")
        if not names:
            raise ConfigError(f"{src} {schedulers!r}: no scheduler named (e.g. static,continuous,chunked)")
        variants += [Variant(s, {"scheduler": s}, src) for s in names]
    for text in variant_args or []:
        variants.append(parse_variant(text))
    if variants_file:
        from_file = load_variants_file(variants_file)
        if not from_file:
            raise ConfigError(f"--variants {variants_file}: the file defines no variant")
        variants.extend(from_file)
    if not variants and engine:
        alias = get_preset(engine).chunked_alias
        variants = [Variant(alias[on], {"scheduler": alias[on]}, f"the default variants of engine {engine} "
                            f"(enable_chunked_prefill {'on' if on else 'off'})") for on in (True, False)]
    elif not variants:
        variants = [Variant(s, {"scheduler": s}, "the default variants") for s in ("static", "continuous", "chunked")]
    names = [v.name for v in variants]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ConfigError(f"variant names must be unique; repeated: {', '.join(sorted(dup))}")
    return variants


def given_keys(base: SimConfig) -> dict[str, Any]:
    """``base``'s top-level keys as they were given (config file, ``--set``, options,
    an earlier variant: ``SimConfig._key_sources``), not those an engine preset or a
    default filled in: a variant is laid over these and validated again, so one that
    changes ``engine`` (or ``engine_version``) gets that engine's defaults, and one
    that sets ``scheduler`` or ``enable_chunked_prefill`` is not refused for a key the
    base's preset filled (``capacity_scheduler_policy``), as ``run --engine`` and a
    sweep axis build them. A config built without sources (``SimConfig(...)``
    directly): its set fields."""
    data = base.model_dump(exclude_none=True)
    given = {k.split(".")[0] for k in base._key_sources} or set(base.model_fields_set)
    return {k: val for k, val in data.items() if k in given}


def apply_variant(base: SimConfig, v: Variant) -> SimConfig:
    from sim.workload import merge_workload_dicts, resolve_workload_dict

    data = given_keys(base)
    data["workload"] = base.workload.model_dump(exclude_unset=True)
    for k, val in v.overrides.items():
        if k == "workload" and isinstance(val, dict):
            data["workload"] = resolve_workload_dict(merge_workload_dicts(data["workload"], val))
        elif k == "disaggregation" and isinstance(val, dict) and isinstance(data.get(k), dict):
            data[k] = {**data[k], **val}  # the base's deployment, key by key
        else:
            data[k] = val
    if "scheduler" in v.overrides:
        data["enable_chunked_prefill"] = None  # an explicit scheduler wins over the alias
    from pydantic import ValidationError

    from sim.config import format_validation_error

    from sim.vocabulary import check_requirements

    try:
        cfg = SimConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, f"{v.source}: variant {v.name}")) from None
    check_requirements(cfg, v.aliases, f"{v.source}: variant {v.name}")
    flat: dict[str, Any] = {}
    for k, val in v.overrides.items():
        flat.update({f"workload.{w}": val for w in val} if k == "workload" and isinstance(val, dict) else {k: val})
    cfg._key_sources = {**base._key_sources, **{k: f"{v.source}: variant {v.name}" for k in flat}}
    return cfg


def _run_one(name: str, cfg: SimConfig, specs, goodput):
    from sim.runner import run_simulation

    res = run_simulation(cfg, goodput=goodput, specs=specs)
    return name, res.summary, res.result


def run_variants(base: SimConfig, variants: list[Variant], *, goodput=None, workers: int | None = None,
                 on_done=None) -> dict[str, tuple[dict, Any]]:
    """Run every variant on one request stream. Returns ``{name: (summary, RunResult)}``
    in variant order. Config errors surface before anything runs."""
    from sim.engine.deployment import build_deployment
    from sim.runner import make_specs

    from sim.config import locate_error

    cfgs = {v.name: apply_variant(base, v) for v in variants}
    try:
        specs = make_specs(build_deployment(base))
    except (ConfigError, InfeasibleError) as e:  # the base config: named by where its key was set
        raise type(e)(locate_error(base, str(e))) from None
    for name, c in cfgs.items():  # fail fast on a bad variant
        try:
            build_deployment(c)
        except (ConfigError, InfeasibleError) as e:
            msg = locate_error(c, str(e))
            raise type(e)(msg if msg != str(e) else f"variant {name}: {e}") from None
    workers = min(workers or os.cpu_count() or 1, len(variants))  # never more processes than variants
    results: dict[str, tuple[dict, Any]] = {}
    if workers <= 1 or len(variants) == 1:
        for name, c in cfgs.items():
            _, s, r = _run_one(name, c, specs, goodput)
            results[name] = (s, r)
            if on_done:
                on_done(name)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futs = [pool.submit(_run_one, name, c, specs, goodput) for name, c in cfgs.items()]
            for f in as_completed(futs):
                name, s, r = f.result()
                results[name] = (s, r)
                if on_done:
                    on_done(name)
    return {v.name: results[v.name] for v in variants}
