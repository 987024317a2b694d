"""Derive profiles of GPUs without measurements from a measured one.

    python -m calibration.transfer --source h100_sxm h200_sxm b200_sxm gb200 mi300x
    python -m calibration.transfer --source a100_sxm l40s
    python -m calibration.transfer b300_sxm gb300          # from b200_sxm / gb200 (CLOSEST)

The target keeps its datasheet numbers (peaks, HBM bandwidth, SM count, link
bandwidth); its ``efficiency`` section becomes the source's fitted ``fitted_v1``
parameters. The formulas scale with the target's datasheet: compute time with
its peak, memory time with its bandwidth, softmax (FLOP-equivalents per score)
with its peak, waves with its SM count, all-reduce bandwidth with its link.
Fixed costs (launch, per-row and per-sequence latencies) and the saturation
sizes are copied as measured on the source; the NCCL latency is scaled by the
ratio of the two profiles' ``interconnect.latency_s``. Provenance says so.
"""

from __future__ import annotations

import argparse
import re
import sys

from calibration.profile_writer import today, update_profile_file, with_efficiency
from calibration.provenance import merge_sources
from sim.hardware.efficiency import FittedEfficiency
from sim.errors import ConfigError, ServesimError
from sim.hardware.profile import HardwareProfile, get_hardware
from sim.paths import hardware_profiles_dir


def derive(target: HardwareProfile, source: HardwareProfile, reason: str = "") -> HardwareProfile:
    """``target`` with ``source``'s fitted efficiencies (see module docstring)."""
    eff = source.efficiency
    if not isinstance(eff, FittedEfficiency):
        raise ConfigError(f"{source.name}: efficiency.form is {eff.form!r}; transfer needs fitted_v1")
    data = eff.model_dump()
    data["step_overhead_s"] = target.efficiency.step_overhead_s
    gemm = dict(data["gemm"])
    if target.peak_flops_per_s.get("fp8") is None and target.peak_flops_per_s.get("int8") is None:
        gemm = {"bf16": gemm["bf16"]}  # no W8A8 tensor cores: only weight-only / 16-bit GEMMs
    data["gemm"] = gemm
    # NCCL latency: the source's fitted value scaled by the profiles' nominal link
    # latencies (1 where the target's link is the same kind, e.g. H200 vs H100)
    scale = target.interconnect.latency_s / max(source.interconnect.latency_s, 1e-12)
    ar = data["all_reduce"]
    ar["latency_s"] *= scale
    ar["latency_per_gpu_s"] *= scale
    new = FittedEfficiency.model_validate(data)
    sp = source.provenance
    src = merge_sources(sp.get("efficiency_source", "")) or "?"
    root = re.findall(r"transferred from (\w+)", src)  # a source itself transferred: name where from, once
    why = f" ({reason})" if reason else ""
    fitted_there = (f"itself transferred from {root[-1]}" if root else f"fitted there to {src}")
    prov = {"efficiency": (f"fitted_v1 parameters transferred ({today()}) from {source.name}, the closest "
                           f"measured GPU{why}, {fitted_there}; not fitted on {target.name} "
                           "measurements. Compute, memory, softmax and all-reduce bandwidth terms scale "
                           f"with {target.name}'s datasheet; fixed costs (launch, per-sequence) are "
                           f"{source.name}'s as measured; NCCL latency is {source.name}'s x "
                           f"{scale:.3g} (ratio of the interconnect latency_s entries); where and when "
                           f"each family was fitted on {root[-1] if root else source.name}: "
                           "provenance.efficiency_families. Calibrate on "
                           "the GPU to replace them (calibration/run_on_gpu.sh)"),
            "efficiency_source": (f"transferred from {source.name}" + (f" (from {root[-1]})" if root else "")),
            "efficiency_date": today(),
            "efficiency_fit_error": (f"not measured on {target.name}; on {root[-1] if root else source.name}: "
                                     + re.sub(r"^not measured on [^;]*; on [^:]*: ", "",
                                              sp.get("efficiency_fit_error", "see its profile")))}
    if isinstance(sp.get("efficiency_families"), dict):  # the measured GPU's entries, verbatim
        prov["efficiency_families"] = {f: e for f, e in sp["efficiency_families"].items()
                                       if not f.startswith("gemm.") or f.split(".", 1)[1] in new.gemm}
    return with_efficiency(target, new, prov)


#: target -> (closest measured GPU, why)
CLOSEST = {
    "h200_sxm": ("h100_sxm", "same GH100 SMs and NVLink 4; more, faster HBM"),
    "b200_sxm": ("h100_sxm", "nearest measured generation with TMA/wgmma kernels (FA3, CUTLASS 3)"),
    "gb200": ("h100_sxm", "nearest measured generation with TMA/wgmma kernels (FA3, CUTLASS 3)"),
    "mi300x": ("h100_sxm", "no AMD measurements; H100 is the measured GPU of the same class"),
    "l40s": ("a100_sxm", "Ada runs FlashAttention-2 and mma.sync kernels like Ampere, not FA3"),
    "b300_sxm": ("b200_sxm", "Blackwell Ultra runs B200's kernels; b200_sxm carries the Blackwell-only families"),
    "gb300": ("gb200", "Blackwell Ultra runs GB200's kernels; gb200 carries the Blackwell-only families"),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calibration.transfer", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="+", help="built-in profile names to rewrite in place")
    ap.add_argument("--source", help="measured profile (default: the closest, see CLOSEST)")
    args = ap.parse_args(argv)
    try:
        for name in args.targets:
            src_name, why = (args.source, "") if args.source else CLOSEST.get(name, (None, ""))
            if src_name is None:
                raise ConfigError(f"{name}: no default source profile; pass --source")
            if args.source and name in CLOSEST and CLOSEST[name][0] == args.source:
                why = CLOSEST[name][1]
            hw = derive(get_hardware(name), get_hardware(src_name), why)
            path = update_profile_file(hardware_profiles_dir() / f"{name}.yaml", hw)
            print(f"wrote {path} (from {src_name})")
    except ServesimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
