"""``servesim calibrate`` / ``python -m calibration``: fit a hardware profile.

    python -m calibration --device cuda --out hardware_profiles/my_gpu.yaml
    python -m calibration --device cpu --out /tmp/cpu.yaml --quick
    python -m calibration --from-table ../shared/kernels/h100_sxm --base-profile h100_sxm --out h100.yaml
    python -m calibration --from-table ../shared/kernels/h100_sxm --base-profile h100_sxm \
        --out hardware_profiles/h100_sxm.yaml --families moe.bf16,moe.fp8_block,mla,gdn

Live (``--device``): runs ``calibration.microbench`` (needs torch), writes the
raw CSVs beside the profile (``<out stem>_kernels/``), fits and writes the
profile and a fit-vs-measured PNG per family there. From tables
(``--from-table``): fits the tables of one GPU onto ``--base-profile``'s
datasheet numbers. Either way the profile's ``provenance`` says what was
measured, when, with which versions, and the fit's error: per family in
``efficiency_families`` (date, tables, in-sample error; ``calibration.provenance``),
a ``--families`` run replacing only its families' entries. Families: the GEMM
dtypes, attention, all-reduce, the fused-MoE formats (``moe.<format>``, from
``*_moe`` tables, live: ``torch_moe.csv`` of ``bench_moe``), and from tables only
``mla`` (whole MLA module tables, ``calibration.mla``) and ``gdn`` (``calibration.gdn``);
``--families`` refits some and keeps the rest from the base profile.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import numpy as np
import yaml

from calibration.datasets import family_rows, table_grid
from calibration.tables import read_csv_table
from calibration.fit import Device, FitResult, ape, fit_any, predict, spec_for
from calibration.profile_writer import (build_efficiency, today, update_profile_file, with_efficiency,
                                        write_profile)
from calibration.provenance import (HELD_OUT_NOTE, family_entry, family_errors, family_source,
                                    fit_error_text, merge_sources, merge_versions, score_text,
                                    step_overhead_note, tables_source)
from sim.hardware.efficiency import CalibratedGrid, ElementwiseParams, FittedEfficiency
from sim.errors import ConfigError, ServesimError
from sim.hardware.profile import HardwareProfile, _validate, get_hardware
from sim.paths import shared_dir

#: substrings of CUDA device names -> built-in profile with their datasheet peaks
KNOWN_GPUS = (("H200", "h200_sxm"), ("H100", "h100_sxm"), ("A100", "a100_sxm"), ("B200", "b200_sxm"),
              ("GB200", "gb200"), ("L40S", "l40s"), ("MI300X", "mi300x"))
FAMILY_ORDER = ("gemm.bf16", "gemm.fp8", "gemm.fp8_block", "context_attention",
                "generation_attention", "all_reduce", "moe.bf16", "moe.fp8", "moe.fp8_block",
                "moe.int4_wo", "moe.mxfp4", "mla", "gdn")


def _progress(quiet: bool):
    if quiet or not sys.stderr.isatty():  # bars only for a person watching a terminal
        return lambda it, **kw: it
    from tqdm import tqdm  # noqa: PLC0415
    return lambda it, **kw: tqdm(list(it), leave=False, **kw)


#: a CPU has no tensor-core tiles: m, n, query and KV lengths are not rounded up
CPU_TILES = {"tile_m": 1, "tile_n": 1, "tile_q": 1, "kv_tile": 1}


def fit_directory(directory: str | Path, dev: Device, *, quiet: bool = False,
                  families: tuple[str, ...] | None = None, tiles: dict | None = None,
                  prior_fp8=None
                  ) -> tuple[dict[str, FitResult], dict[str, tuple[int, float, float]], dict]:
    """Fit every family with rows in ``directory``: (fits, in-sample scores
    family -> (rows, MAPE %, median APE %), family -> rows). ``tiles``
    overrides the tile sizes (e.g. :data:`CPU_TILES`). Block-fp8 GEMMs take the
    per-tensor fp8 fit's device shape (``calibration.fit.fit_block_fp8``): this
    run's, else ``prior_fp8`` (the base profile's), else a full fit."""
    rows = family_rows(directory)
    names = [f for f in FAMILY_ORDER if f in rows and (families is None or f in families)]
    if dev.peak_fp8 is None:
        names = [f for f in names if f not in ("gemm.fp8", "gemm.fp8_block")]
    fits, scores = {}, {}
    for fam in _progress(quiet)(names, desc="fitting families"):
        r = rows[fam].rows
        fixed = {k: v for k, v in (tiles or {}).items() if k in spec_for(fam)[0].model_fields}
        fp8 = fits["gemm.fp8"].params if "gemm.fp8" in fits else prior_fp8
        fits[fam] = fit_any(fam, r, dev, fixed=fixed, fp8=fp8) if fixed else fit_any(fam, r, dev, fp8=fp8)
        e = ape(predict(fam, fits[fam].params, r, dev), r["latency_s"].to_numpy())
        scores[fam] = (len(r), float(e.mean()), float(np.median(e)))
    return fits, scores, {f: rows[f] for f in names}


def _table_versions(rows: dict) -> str:
    """Devices and versions recorded in the tables (vLLM kernels, NCCL from file names;
    a ``version`` with a ``+`` local tag, e.g. ``2.11.0+cu130``, is torch's, as
    ``calibration.microbench`` writes it)."""
    devices, vllm, nccl = set(), set(), set()
    for r in rows.values():
        if r.kind == "all_reduce":
            nccl |= {re.sub(r"\.csv(\.gz)?$", "", s).removeprefix("nccl_") for s in r.sources}
            continue
        for col, acc in (("device", devices), ("version", vllm)):
            if col in r.rows.columns:
                acc |= set(map(str, r.rows[col].dropna().unique()))
    torch_v = {v for v in vllm if "+" in v}
    vllm -= torch_v
    parts = [f"device {', '.join(sorted(devices))}" if devices else "",
             f"kernels measured with vLLM {', '.join(sorted(vllm))}" if vllm else "",
             f"kernels measured with torch {', '.join(sorted(torch_v))}" if torch_v else "",
             f"NCCL {', '.join(sorted(nccl))}" if nccl else ""]
    return "; ".join(p for p in parts if p) or "not recorded"


def _plots(out_dir: Path, label: str, fits, rows, dev: Device,
           own: dict[str, tuple[np.ndarray, np.ndarray]] | None = None) -> list[Path]:
    """A measured-vs-fitted plot per fitted family: the kernel families from their
    rows, the ``mla`` / ``gdn`` modules (fitted from tables of their own) from
    ``own`` (family -> (measured s, fitted s))."""
    from calibration.plots import plot_fit  # noqa: PLC0415 -- matplotlib only when plotting
    paths = []
    for fam, fit in fits.items():
        if fam in rows:
            measured = rows[fam].rows["latency_s"].to_numpy()
            pred = predict(fam, fit.params, rows[fam].rows, dev)
        elif own and fam in own:
            measured, pred = own[fam]
        else:
            continue
        e = ape(pred, measured)
        title = f"{label} {fam}: median APE {np.median(e):.1f} %, MAPE {e.mean():.1f} % (in-sample)"
        paths.append(plot_fit(out_dir / f"fit_{fam.replace('.', '_')}.png", title, measured, pred))
    return paths


def _copy_elementwise(path: Path, bw: float) -> tuple[ElementwiseParams, float]:
    """(elementwise params, best copy bandwidth B/s) from copy_bandwidth.csv:
    a copy moves 2 x bytes; the smallest copy's time is the launch cost."""
    df = read_csv_table(path)
    moved = 2.0 * df["bytes"].to_numpy(float)
    sec = df["latency"].to_numpy(float) * 1e-3
    best = float((moved / sec).max())
    return ElementwiseParams(memory_efficiency=min(1.5, best / bw), launch_s=float(sec.min())), best


def _cpu_base(info: dict, kernels: Path) -> HardwareProfile:
    """A profile describing this CPU from its own measurements: peak bf16 =
    the best GEMM rate measured, memory bandwidth = the best copy rate."""
    g = read_csv_table(kernels / "torch_gemm.csv")
    peak = float((2.0 * g["m"] * g["n"] * g["k"] / (g["latency"] * 1e-3)).max())
    c = read_csv_table(kernels / "copy_bandwidth.csv")
    bw = float((2.0 * c["bytes"] / (c["latency"] * 1e-3)).max())
    name = "cpu_" + re.sub(r"[^a-z0-9]+", "_", str(info["name"]).lower()).strip("_")[:40]
    src = f"measured live on {info['name']} (torch {info['torch']}), {today()}"
    data = {
        "name": name, "description": f"{info['name']} (CPU, measured with torch; not a GPU)",
        "memory_bytes": int(info["memory_bytes"]), "hbm_bandwidth_bytes_per_s": bw,
        "peak_flops_per_s": {"bf16": peak}, "num_sms": int(info["num_sms"]),
        "interconnect": {"name": "none (single device)", "bandwidth_bytes_per_s": bw, "latency_s": 0.0},
        "efficiency": {"form": "scalar", "compute_efficiency": 1.0, "memory_efficiency": 1.0,
                       "launch_overhead_s": 0.0, "step_overhead_s": 0.0, "all_reduce_efficiency": 1.0},
        "price_per_gpu_hour_usd": 0.0,
        "provenance": {"memory_bytes": "physical memory (sysconf)",
                       "hbm_bandwidth_bytes_per_s": f"best device copy rate, {src}",
                       "peak_flops_per_s": f"best bf16 GEMM rate (torch.nn.functional.linear), {src}",
                       "num_sms": "torch.get_num_threads() (CPU threads stand in for SMs)",
                       "interconnect": "none: one device; all-reduce parameters are placeholders",
                       "efficiency": "replaced by the fit below",
                       "price_per_gpu_hour_usd": "not applicable (0)"}}
    return _validate(data, f"<cpu profile {name}>")


def _warn_other_device(kernels: Path, profile_name: str) -> None:
    """Warn (stderr) when the tables' ``device`` column names another GPU than
    the base profile (A100 tables fitted onto h100_sxm's datasheet peaks give a
    profile that describes neither). The GPU is the profile name's part before
    the first underscore (``h100`` of ``h100_sxm``)."""
    import re
    import sys

    from calibration.tables import find_tables

    gpu = re.match(r"[a-z]+\d+[a-z]*", profile_name.lower())
    if gpu is None:
        return
    devices = set()
    for _, path in find_tables(kernels):
        head = read_csv_table(path, nrows=1)
        if "device" in head.columns and len(head):
            devices.add(str(head["device"].iloc[0]))
    other = sorted(d for d in devices if gpu.group(0) not in d.lower().replace("-", "").replace(" ", ""))
    if other:
        print(f"warning: the tables in {kernels} were measured on {', '.join(other)}, not the base profile's "
              f"GPU ({profile_name}); the fit keeps {profile_name}'s datasheet peaks", file=sys.stderr)


def _base_for(device: str, info: dict, base_profile: str | None, kernels: Path) -> HardwareProfile:
    if base_profile:
        return get_hardware(base_profile)
    if device == "cpu":
        return _cpu_base(info, kernels)
    for key, name in KNOWN_GPUS:
        if key in str(info["name"]).upper().replace(" ", ""):
            return get_hardware(name)
    raise ConfigError(f"device {info['name']!r}: no built-in profile with its datasheet peaks; "
                      "pass --base-profile (a built-in name or a YAML path with its peaks)")


def _check_out(out: Path, side_dir: Path) -> None:
    """Before any measuring or fitting: ``--out`` must be a writable file path,
    and ``side_dir`` (plots, raw CSVs beside it) free for a folder, neither in
    the shared data folder."""
    shared = shared_dir().resolve()
    for p in (out, side_dir):  # resolved: a relative path or a link into it counts
        if p.resolve().is_relative_to(shared):
            raise ConfigError(f"--out {out}: {p} is inside the shared read-only data folder {shared}; "
                              "write the profile elsewhere")
    if out.is_dir():
        raise ConfigError(f"--out {out}: a folder; give the profile's file, e.g. {out / 'my_gpu.yaml'}")
    if side_dir.exists() and not side_dir.is_dir():
        raise ConfigError(f"--out {out}: {side_dir} (where the plots go) is a file; move it or choose another --out")
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        if not out.exists():  # can a file be created there? (permissions, read-only or virtual file systems)
            out.touch()
            out.unlink()
    except OSError as e:
        raise ConfigError(f"--out {out}: cannot write there ({e.strerror or e})") from None
    if not os.access(parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise ConfigError(f"--out {out}: not writable")


def calibrate(device: str | None = None, from_table: Path | None = None,
              base_profile: str | None = None, out: Path = Path("profile.yaml"),
              quick: bool = False, quiet: bool = False, plots: bool = True,
              families: tuple[str, ...] | None = None) -> Path:
    """Fit a ``fitted_v1`` profile and write it to ``out`` (returns the path).

    Exactly one of ``device`` (``cuda``/``cpu``: live microbenchmarks, raw CSVs
    and plots in ``<out stem>_kernels/``) and ``from_table`` (a directory of
    tables in the ``../shared/kernels`` format; needs ``base_profile`` for the
    datasheet numbers) must be given. ``quick``: a smaller GPU sweep. ``families``:
    fit only these (``FAMILY_ORDER`` names), the others kept from the base profile."""
    out = Path(out)
    if (device is None) == (from_table is None):
        raise ConfigError("calibrate: give exactly one of --device and --from-table")
    _check_out(out, out.parent / f"{out.stem}_{'plots' if from_table is not None else 'kernels'}")
    if out.is_file():
        _profile_name(out)  # a file there that is not a profile: say so before fitting
    if from_table is not None:
        if not base_profile:
            raise ConfigError("calibrate --from-table: --base-profile is required (datasheet peaks)")
        base = get_hardware(base_profile)
        kernels, plot_dir = Path(from_table), out.parent / f"{out.stem}_plots"
        _warn_other_device(kernels, base.name)
        source = f"tables {kernels}"
        versions, elementwise = "as recorded in the tables", None
    else:
        if device not in ("cuda", "cpu"):
            raise ConfigError(f"--device: unknown value {device!r}; valid: cuda, cpu")
        from calibration.microbench import _torch, device_info, run_microbenchmarks  # noqa: PLC0415
        if device == "cuda" and not _torch().cuda.is_available():
            raise ConfigError("--device cuda: torch sees no CUDA device (a CPU-only torch build, or no GPU "
                              "or driver); try --device cpu --quick to check the pipeline")
        kernels = plot_dir = out.parent / f"{out.stem}_kernels"
        info = device_info(device)
        run_microbenchmarks(device, kernels, quick=quick, progress=_progress(quiet))
        base = _base_for(device, info, base_profile, kernels)
        timing = "CUDA-graph replays" if device == "cuda" else "perf_counter per call"
        source = f"live microbenchmarks on {info['name']} ({kernels.name}/, {timing})"
        versions = f"torch {info['torch']}, CUDA {info['cuda']}, driver {info['driver']}"
        elementwise, _ = _copy_elementwise(kernels / "copy_bandwidth.csv", base.hbm_bandwidth_bytes_per_s)
    dev = Device.of(base)
    if families is not None:
        unknown = sorted(set(families) - set(FAMILY_ORDER))
        if unknown:
            raise ConfigError(f"--families: unknown {unknown}; valid: {', '.join(FAMILY_ORDER)}")
    prior = base.efficiency.gemm.get("fp8") if isinstance(base.efficiency, FittedEfficiency) else None
    fits, scores, rows = fit_directory(kernels, dev, quiet=quiet, families=families,
                                       tiles=CPU_TILES if device == "cpu" else None, prior_fp8=prior)
    eff = build_efficiency(fits, base, elementwise=elementwise)
    dropped = [f.split(".", 1)[1] for f in (families or ()) if f.startswith("moe.") and f not in fits]
    if dropped:  # asked for and not measured here: not kept from the base profile either
        eff = eff.model_copy(update={"moe": {k: v for k, v in eff.moe.items() if k not in dropped}})
    own: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # module fits' (measured, fitted), for the plots
    if from_table is not None and (families is None or "mla" in families):
        eff = _fit_mla(kernels, base, eff, fits, scores, own)
    if from_table is not None and (families is None or "gdn" in families):
        eff = _fit_gdn(kernels, base, eff, fits, scores, own)
    eff = _with_grid(eff, base, rows)
    fam_files = {f: (sorted({s.split(" (")[0] for s in rows[f].sources}) if f in rows
                     else sorted(fits[f].extra.get("sources", []))) for f in fits}
    if from_table is not None:
        def source_of(files):
            return tables_source(kernels, files)
        versions = _table_versions(rows)
    else:
        def source_of(files):
            return (f"live microbenchmarks on {info['name']} "
                    f"({', '.join(f'{kernels.name}/{f}' for f in sorted(set(files)))}, {timing})")
    source = source_of({x for fs in fam_files.values() for x in fs})
    prov = _efficiency_provenance(base, eff, fits, scores, families, source, versions,
                                  {f: source_of(fs) for f, fs in fam_files.items()},
                                  elementwise=elementwise is not None, dropped=dropped,
                                  note=HELD_OUT_NOTE if from_table is not None else "in-sample")
    note = "; latency_s is the scalar form's: fitted_v1 uses efficiency.all_reduce"
    if note not in base.provenance.get("interconnect", ""):
        prov["interconnect"] = base.provenance.get("interconnect", "") + note
    hw = with_efficiency(base, eff, prov)
    header = (f"{hw.description}. Units: bytes, bytes/s, FLOP/s (dense), s, USD.\n"
              f"efficiency: fitted_v1, written by `python -m calibration` on {today()} from\n"
              f"{source}.\nThe fit's error and sources are in provenance.")
    if out.is_file() and _profile_name(out) == hw.name:
        update_profile_file(out, hw)  # same profile: keep its comments, swap efficiency
    else:
        write_profile(out, hw, header)
    if plots and fits:
        _plots(plot_dir, hw.name, fits, rows, dev, own)
    return out


def _with_grid(eff, base: HardwareProfile, rows: dict):
    """``eff`` with ``calibrated_grid``: the largest shapes of the rows fitted in
    this run, the base profile's for the families kept from it."""
    kept = base.efficiency.calibrated_grid if isinstance(base.efficiency, FittedEfficiency) else None
    grid = {**(kept.model_dump(exclude_none=True) if kept else {}), **table_grid(rows)}
    return eff.model_copy(update={"calibrated_grid": CalibratedGrid(**grid) if grid else None})


def _fit_mla(kernels: Path, base: HardwareProfile, eff, fits: dict, scores: dict, own: dict | None = None):
    """``eff`` with the ``mla`` section fitted to vLLM's MLA module tables in
    ``kernels`` (``calibration.mla``; the projections timed with ``eff``'s GEMMs),
    unchanged where there are none."""
    from calibration.mla import fit_mla, inputs, predict as mla_predict, read_module_tables  # noqa: PLC0415
    try:
        rows = read_module_tables(kernels)
    except ConfigError:
        return eff
    hw = with_efficiency(base, eff, {})
    a = inputs(rows, hw)
    p = fit_mla(rows, hw, a)
    pred = mla_predict(p, a, hw)
    e = ape(pred, rows["latency_s"].to_numpy())
    if own is not None:
        own["mla"] = (rows["latency_s"].to_numpy(), pred)
    fits["mla"] = FitResult("mla", p, len(rows), 0.0, 0.0,
                            {"sources": sorted(rows["source"].unique())})
    scores["mla"] = (len(rows), float(e.mean()), float(np.median(e)))
    return eff.model_copy(update={"mla": p})


def _fit_gdn(kernels: Path, base: HardwareProfile, eff, fits: dict, scores: dict, own: dict | None = None):
    """``eff`` with the ``gdn`` section fitted to vLLM's GDN table in ``kernels``
    (``calibration.gdn``), unchanged where there is none."""
    from calibration.gdn import fit_gdn, inputs, predict as gdn_predict, read_gdn_layers  # noqa: PLC0415
    paths = sorted(Path(kernels).glob("vllm-*_gdn.csv*"))
    if not paths:
        return eff
    rows = read_gdn_layers(paths[0])
    hw = with_efficiency(base, eff, {})
    a = inputs(rows, hw)
    p = fit_gdn(rows, hw, a)
    pred = gdn_predict(p, a, hw)
    e = ape(pred, rows["latency_s"].to_numpy())
    if own is not None:
        own["gdn"] = (rows["latency_s"].to_numpy(), pred)
    fits["gdn"] = FitResult("gdn", p, len(rows), 0.0, 0.0, {"sources": [paths[0].name]})
    scores["gdn"] = (len(rows), float(e.mean()), float(np.median(e)))
    return eff.model_copy(update={"gdn": p})


def _present(eff: FittedEfficiency) -> list[str]:
    """The calibration families ``eff`` has parameters for, in ``FAMILY_ORDER``."""
    have = {f"gemm.{k}" for k in eff.gemm} | {f"moe.{k}" for k in eff.moe} | {
        "context_attention", "generation_attention", "all_reduce"}
    have |= {f for f in ("mla", "gdn") if getattr(eff, f) is not None}
    return [f for f in FAMILY_ORDER if f in have]


def _efficiency_provenance(base: HardwareProfile, eff: FittedEfficiency, fits: dict, scores: dict,
                           families: tuple[str, ...] | None, source: str, versions: str,
                           fam_sources: dict[str, str], *, elementwise: bool, dropped: list[str],
                           note: str) -> dict:
    """The ``efficiency*`` provenance entries of a fit (``calibration.provenance``):
    ``efficiency_families`` one entry per family with parameters, this run's for
    the families fitted now, the base profile's verbatim for the others (a full
    run keeps the base's parameters, so its entries, for the families it has no
    rows of); ``efficiency`` a short summary; ``efficiency_source`` this run's
    tables (a partial run: merged with the base's, flat); ``efficiency_fit_error``
    each family's in-sample error once."""
    date, bp = today(), base.provenance
    old = bp.get("efficiency_families")
    old = dict(old) if isinstance(old, dict) else {}
    old_errors = family_errors(bp.get("efficiency_fit_error", ""))
    scalar = not isinstance(base.efficiency, FittedEfficiency)
    present = _present(eff)
    gemm_missing = [f for f in FAMILY_ORDER if f.startswith("gemm.fp8") and f not in present]
    entries, errors = {}, {}
    for fam in present:
        if fam in fits:
            errors[fam] = score_text(*scores[fam])
            entries[fam] = family_entry(date, fam_sources[fam], errors[fam])
            continue
        if fam in old_errors:
            errors[fam] = old_errors[fam]
        if fam in old:
            entries[fam] = old[fam]
        elif scalar:
            entries[fam] = (f"not measured ({date}): {base.name}'s scalar efficiencies as fitted_v1 "
                            "parameters (calibration.profile_writer.scalar_as_fitted)")
        else:  # a base written before the per-family entries: its date and tables, flat
            entries[fam] = family_entry(f"{bp.get('efficiency_date', 'undated')} or earlier",
                                        f"kept from {base.name}'s profile, fitted to "
                                        + family_source(bp.get("efficiency_source", "?"), fam),
                                        old_errors.get(fam))
    for fam in gemm_missing:
        entries[fam] = (f"not measured ({date}): no {fam} rows; W8A8 GEMMs use gemm.bf16's efficiencies "
                        "at the fp8/int8 peak")
    entries = {f: entries[f] for f in FAMILY_ORDER if f in entries}
    fitted = ", ".join(fits) or "none"
    if families is not None:
        removed = [f"moe.{k}" for k in dropped]
        kept = [f for f in families if f not in fits and f not in removed]
        summary = (f"fitted_v1; last fit {date} by calibration.fit (--families {','.join(families)}): "
                   f"refitted {fitted} from {source}"
                   + (f"; no rows of {', '.join(removed)}: their parameters removed" if removed else "")
                   + (f"; no rows of {', '.join(kept)}: kept" if kept else "")
                   + f"; the other families kept from {base.name}'s profile as they were")
    else:
        missing = [f for f in present if f not in fits]
        summary = (f"fitted_v1 fitted ({date}) by calibration.fit to {source}; families fitted: {fitted}"
                   + (f"; not measured, taken from {base.name}'s parameters: {', '.join(missing)}"
                      if missing else ""))
    if gemm_missing:
        summary += (f"; no {', '.join(gemm_missing)} rows: W8A8 GEMMs use the bf16 family's "
                    "efficiencies at the fp8/int8 peak")
    summary += ("; per family (date, tables, in-sample error): provenance.efficiency_families; "
                "elementwise kernels: " + ("the measured copy bandwidth" if elementwise else
                                           "the bf16 GEMM's memory efficiency at 64 MiB and its launch cost"))
    if any(f not in fits for f in present):  # parameters kept from the base: its tables too, flat
        source = merge_sources(bp.get("efficiency_source", ""), source)
        versions = merge_versions(bp.get("efficiency_versions", ""), versions)
    summary += "; " + (step_overhead_note(bp.get("efficiency", "")) or
                       f"step_overhead_s {eff.step_overhead_s:g} kept from {base.name}")
    return {"efficiency": summary, "efficiency_families": entries, "efficiency_source": source,
            "efficiency_date": date, "efficiency_versions": versions,
            "efficiency_fit_error": fit_error_text({f: errors[f] for f in present if f in errors}, note)}


def _profile_name(out: Path) -> str | None:
    """The ``name`` of the profile YAML already at ``--out`` (None if it has none); a file
    there that is not a YAML mapping is an error: it is not overwritten unread."""
    try:
        data = yaml.safe_load(out.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        data = e
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"--out {out}: the file there is not a hardware profile YAML "
                          f"({'malformed YAML' if isinstance(data, Exception) else type(data).__name__}); "
                          "remove it or give another --out")
    return (data or {}).get("name")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calibration", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--device", choices=["cuda", "cpu"], help="measure live on this device (torch)")
    src.add_argument("--from-table", type=Path, help="folder of kernel tables (../shared/kernels format)")
    ap.add_argument("--base-profile", help="profile with the datasheet peaks (name or YAML path)")
    ap.add_argument("--out", type=Path, required=True, help="profile YAML to write")
    ap.add_argument("--quick", action="store_true", help="smaller GPU sweep (about a minute)")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    ap.add_argument("--no-plots", action="store_true", help="skip the fit-vs-measured PNGs")
    ap.add_argument("--families", help="comma-separated families to fit (e.g. moe.bf16,gemm.fp8_block); "
                                       "the others are kept from --base-profile (default: all)")
    args = ap.parse_args(argv)
    try:
        fams = tuple(f.strip() for f in args.families.split(",") if f.strip()) if args.families else None
        path = calibrate(args.device, args.from_table, args.base_profile, args.out, args.quick,
                         quiet=args.quiet, plots=not args.no_plots, families=fams)
    except ServesimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"error: live calibration needs torch ({e}); pip install torch", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0
