"""A fitted profile's efficiency provenance stays flat (calibration/provenance.py):
per-family entries in ``efficiency_families``, a partial refit replaces only its
families' entries, refits in a row do not nest the texts, a full refit replaces
every measured family's entry, transfer copies the entries and keeps the
"transferred" warning right. Synthetic tables (tests/test_calibration_tables.py)."""

from __future__ import annotations

import re

import numpy as np

import yaml

from calibration.cli import FAMILY_ORDER, calibrate
from calibration.profile_writer import today, write_profile
from calibration.provenance import (family_errors, family_source, merge_sources, step_overhead_note,
                                    tables_source)
from calibration.transfer import derive
from sim.config import SimConfig
from sim.hardware.profile import get_hardware, load_hardware
from sim.paths import hardware_profiles_dir
from sim.model_spec import get_model
from sim.results.warnings import ground_warnings
from test_calibration_tables import _model_tables

STEP = "step_overhead_s 0: vLLM >= 0.14 async scheduling hides CPU work (ENGINE_SEMANTICS 10.11)"
NESTING = ("its provenance", "families not refitted", "other families as fitted before")


def test_merge_sources_flattens_the_nested_form():
    nested = ("tables in D (b.csv); families not refitted: tables in D (a.csv, b.csv); "
              "families not refitted: tables in E (c.csv)")
    assert merge_sources(nested) == "tables in D (a.csv, b.csv); tables in E (c.csv)"
    # a transferred base stays first (sim/results/warnings.py reads the prefix); each part once
    assert (merge_sources("transferred from h100_sxm", "tables in D (x.csv)", "tables in D (x.csv, w.csv)")
            == "transferred from h100_sxm; tables in D (w.csv, x.csv)")
    assert tables_source("D", ["b", "a", "b"]) == "tables in D (a, b)"


def test_family_errors_and_step_note_read_the_nested_form_once():
    text = ("moe.bf16 median APE 6.9 % MAPE 9.4 % (n=5400); other families as fitted before: gdn median APE "
            "6.9 % MAPE 8.6 % (n=4546); moe.bf16 median APE 1.0 % MAPE 1.0 % (n=1) (in-sample; held out: x)")
    assert family_errors(text) == {"moe.bf16": "median APE 6.9 % MAPE 9.4 % (n=5400)",
                                   "gdn": "median APE 6.9 % MAPE 8.6 % (n=4546)"}
    nested = f"a; b (its provenance: c; {STEP})); {STEP}))"
    assert step_overhead_note(nested) == STEP
    assert step_overhead_note("no note here") is None


def test_family_source_picks_the_family_tables():
    src = "tables in D (nccl_2.27.3.csv.gz, vllm-0.24.0_gemm.csv.gz, vllm-0.24.0_moe.csv.gz)"
    assert family_source(src, "gemm.fp8") == "tables in D (vllm-0.24.0_gemm.csv.gz)"
    assert family_source(src, "all_reduce") == "tables in D (nccl_2.27.3.csv.gz)"
    assert family_source(src, "mla") == src  # none of its kind: the whole text


def _flat(prov: dict) -> None:
    """No nesting marker anywhere, each family's error once, the step note once."""
    text = yaml.safe_dump(prov)
    for marker in NESTING:
        assert marker not in text, marker
    err = prov["efficiency_fit_error"]
    for fam, entry in prov["efficiency_families"].items():  # once where known, else not at all
        assert len(re.findall(rf"(?:^|; ){re.escape(fam)} median APE", err)) == ("median APE" in entry), fam
    assert prov["efficiency"].count("step_overhead_s") == 1 and prov["efficiency"].endswith(STEP)
    assert err.count("(in-sample") == 1


def test_partial_refits_in_a_row_do_not_nest_and_a_full_refit_replaces(tmp_path):
    h100 = get_hardware("h100_sxm")
    shipped = h100.provenance["efficiency_families"]
    d1, d2 = tmp_path / "t1", tmp_path / "t2"
    d1.mkdir()
    d2.mkdir()
    _model_tables(d1, h100)
    (d2 / "u_context_attention.csv").write_text((d1 / "t_context_attention.csv").read_text())
    out = tmp_path / "h100_sxm.yaml"
    kw = dict(base_profile=str(out), out=out, quiet=True, plots=False)

    calibrate(from_table=d1, base_profile="h100_sxm", out=out, quiet=True, plots=False)
    full = load_hardware(out).provenance
    _flat(full)
    fams = full["efficiency_families"]
    assert list(fams) == [f for f in FAMILY_ORDER if f in shipped]  # each family once, in order
    for fam, table in (("gemm.bf16", "t_gemm.csv"), ("context_attention", "t_context_attention.csv")):
        assert fams[fam].startswith(f"{today()}: tables in {d1} ({table}); in-sample median APE ")
    for fam in ("gemm.fp8", "all_reduce", "moe.bf16", "mla", "gdn"):  # no rows here: the base's, verbatim
        assert fams[fam] == shipped[fam]
    assert full["efficiency_source"] == merge_sources(h100.provenance["efficiency_source"],
                                                     tables_source(d1, ["t_context_attention.csv", "t_gemm.csv",
                                                                        "t_generation_attention.csv"]))

    calibrate(from_table=d1, families=("gemm.bf16",), **kw)
    p1 = load_hardware(out).provenance
    calibrate(from_table=d2, families=("context_attention",), **kw)
    p2 = load_hardware(out).provenance
    for p in (p1, p2):
        _flat(p)
        assert p["efficiency"].count("kept from h100_sxm's profile") == 1
    e2 = p2["efficiency_families"]
    assert e2["context_attention"].startswith(f"{today()}: tables in {d2} (u_context_attention.csv); in-sample")
    assert e2["gemm.bf16"] == p1["efficiency_families"]["gemm.bf16"]  # kept verbatim
    assert {f: e for f, e in e2.items() if f != "context_attention"} == {
        f: e for f, e in fams.items() if f != "context_attention"}
    assert p2["efficiency"].startswith(f"fitted_v1; last fit {today()} by calibration.fit (--families "
                                       f"context_attention): refitted context_attention from tables in {d2}")
    # every table once, per folder, no nesting: the shipped folder, d1, d2
    assert p2["efficiency_source"].count("tables in") == 3
    assert p2["efficiency_source"].count("t_gemm.csv") == 1
    assert len(p2["efficiency"]) < 1000 and len(p2["efficiency_fit_error"]) < 1000

    calibrate(from_table=d1, **kw)  # a full refit: every family with rows gets this run's entry
    p3 = load_hardware(out).provenance
    _flat(p3)
    assert p3["efficiency_families"]["context_attention"].startswith(
        f"{today()}: tables in {d1} (t_context_attention.csv); in-sample median APE ")
    assert {f: e for f, e in p3["efficiency_families"].items() if f not in ("gemm.bf16", "context_attention",
                                                                           "generation_attention")} == {
        f: e for f, e in shipped.items() if f not in ("gemm.bf16", "context_attention", "generation_attention")}


def test_refit_of_a_nested_profile_comes_out_flat(tmp_path):
    """A profile written before the per-family entries (the nested texts)."""
    h100 = get_hardware("h100_sxm")
    d = "../shared/kernels/h100_sxm"
    prov = {k: v for k, v in h100.provenance.items() if k != "efficiency_families"}
    prov["efficiency"] = (f"fitted_v1 fitted (2026-12-05) by calibration.fit to tables in {d} (vllm-0.24.0_moe.csv.gz)"
                          f"; only moe.bf16 refitted in this run, the other families kept from h100_sxm's profile "
                          f"(its provenance: fitted_v1 fitted (2026-11-30) to tables in {d} (x_gemm.csv); "
                          f"{STEP}); {STEP})")
    prov["efficiency_source"] = (f"tables in {d} (vllm-0.24.0_moe.csv.gz); families not refitted: tables in {d} "
                                 "(nccl_2.27.3.csv.gz, vllm-0.24.0_gemm.csv.gz, vllm-0.24.0_moe.csv.gz)")
    prov["efficiency_fit_error"] = ("moe.bf16 median APE 6.9 % MAPE 9.4 % (n=5400); other families as fitted "
                                    "before: gemm.fp8 median APE 8.7 % MAPE 11.2 % (n=35742) (in-sample)")
    base = tmp_path / "old.yaml"
    write_profile(base, h100.model_copy(update={"provenance": prov}))
    t = tmp_path / "t"
    t.mkdir()
    _model_tables(t, h100)
    out = tmp_path / "new.yaml"
    calibrate(from_table=t, base_profile=str(base), out=out, quiet=True, plots=False, families=("gemm.bf16",))
    p = load_hardware(out).provenance
    _flat(p)
    fams = p["efficiency_families"]
    assert fams["gemm.fp8"] == (f"2026-12-05 or earlier: kept from h100_sxm's profile, fitted to tables in {d} "
                                "(vllm-0.24.0_gemm.csv.gz); in-sample median APE 8.7 % MAPE 11.2 % (n=35742)")
    assert fams["all_reduce"].endswith(f"tables in {d} (nccl_2.27.3.csv.gz); in-sample error not recorded")
    assert p["efficiency_source"] == (f"tables in {d} (nccl_2.27.3.csv.gz, vllm-0.24.0_gemm.csv.gz, "
                                      f"vllm-0.24.0_moe.csv.gz); tables in {t} (t_gemm.csv)")


def test_transfer_copies_the_entries_and_the_warning_stays(tmp_path):
    h100, h200 = get_hardware("h100_sxm"), get_hardware("h200_sxm")
    moved = derive(h200, h100, "same SMs")
    p = moved.provenance
    assert p["efficiency_families"] == h100.provenance["efficiency_families"]
    assert p["efficiency_source"] == "transferred from h100_sxm"
    assert p["efficiency_fit_error"] == "not measured on h200_sxm; on h100_sxm: " + h100.provenance[
        "efficiency_fit_error"]
    assert f"fitted there to {h100.provenance['efficiency_source']}; not fitted on h200_sxm" in p["efficiency"]
    # from a profile itself transferred: named once where it came from, the error not nested
    again = derive(get_hardware("b300_sxm"), moved).provenance
    assert again["efficiency_source"] == "transferred from h200_sxm (from h100_sxm)"
    assert again["efficiency_fit_error"].startswith("not measured on b300_sxm; on h100_sxm: gemm.bf16 median")
    assert again["efficiency_fit_error"].count("not measured") == 1
    # a transferred profile partly refitted on its own tables: still warned about, the refit named
    t = tmp_path / "t"
    t.mkdir()
    _model_tables(t, h100)
    out = tmp_path / "h200_sxm.yaml"
    calibrate(from_table=t, base_profile="h200_sxm", out=out, quiet=True, plots=False, families=("gemm.bf16",))
    hw = load_hardware(out)
    assert hw.provenance["efficiency_source"] == f"transferred from h100_sxm; tables in {t} (t_gemm.csv)"
    w = ground_warnings(SimConfig(engine="vllm"), hw, get_model("llama-3.1-8b"), {})
    assert len(w) == 1 and "were transferred from h100_sxm (all but the families refitted since from " \
        f"tables in {t} (t_gemm.csv)" in w[0]


def test_shipped_profiles_are_flat():
    for name in ("h100_sxm", "a100_sxm", "h200_sxm", "b200_sxm", "gb200", "mi300x", "l40s"):
        p = get_hardware(name).provenance
        text = yaml.safe_dump(p)
        for marker in NESTING:
            assert marker not in text, (name, marker)
        assert all(len(str(v)) < 2000 for v in p.values()), name
    h100 = get_hardware("h100_sxm").provenance
    _flat(h100)
    assert h100["efficiency_families"]["gemm.fp8_block"].startswith(
        "2026-12-04: tables in ../shared/kernels/h100_sxm (vllm-0.24.0_gemm.csv.gz); in-sample median APE 5.8 %")


def _close(a, b, path=""):
    """Equal, numbers to the 4 significant digits a profile file keeps."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float) and isinstance(b, float):
        assert abs(a - b) <= 1e-3 * max(abs(a), abs(b)), (path, a, b)
    else:
        assert a == b, (path, a, b)


def test_transferred_profiles_are_their_sources_as_they_are_now():
    """A profile whose efficiency was transferred holds what transferring its
    source today gives (b300_sxm / gb300 had fallen behind b200_sxm / gb200's
    later refits): rerun ``python -m calibration.transfer`` after refitting a
    source. mi300x leaves out the NVIDIA-only engine families (vLLM's CUDA
    custom all-reduce, TensorRT-LLM's MoE and MLA fits)."""
    checked = []
    for path in sorted(hardware_profiles_dir().glob("*.yaml")):
        hw = load_hardware(path)
        if hw.transferred_from is None:
            continue
        fresh = derive(hw, get_hardware(hw.transferred_from)).efficiency.model_dump()
        have = hw.efficiency.model_dump()
        if hw.name == "mi300x":
            for k in ("custom_all_reduce", "moe_engines", "mla_engines"):
                assert not have[k]
                fresh[k] = have[k]
        _close(have, fresh, hw.name)
        checked.append(hw.name)
    assert {"h200_sxm", "b200_sxm", "gb200", "b300_sxm", "gb300", "mi300x", "l40s"} <= set(checked)


def test_a_written_profile_keeps_every_section_of_its_base(tmp_path):
    """calibrate writes the whole profile: the base's network (per-GPU NIC) section is
    kept, so a refit profile still serves TP across nodes and disaggregated transfers."""
    base = get_hardware("h100_sxm")
    assert base.network is not None
    out = write_profile(tmp_path / "p.yaml", base)
    back = load_hardware(out)
    assert back.network == base.network
    assert list(yaml.safe_load(out.read_text())) == [k for k in type(base).model_fields
                                                     if getattr(base, k) is not None]


def test_plots_of_module_families_come_from_their_own_rows(tmp_path):
    """mla / gdn are fitted from tables of their own (not the kernel rows): their plots
    take (measured, fitted) from the fit, and a family with neither is skipped."""
    from calibration.cli import _plots
    from calibration.fit import Device, FitResult

    fits = {"mla": FitResult("mla", None, 3, 0.0, 0.0), "gdn": FitResult("gdn", None, 3, 0.0, 0.0)}
    own = {"mla": (np.array([1e-3, 2e-3, 4e-3]), np.array([1.1e-3, 1.9e-3, 4e-3]))}
    paths = _plots(tmp_path, "h100_sxm", fits, {}, Device.of(get_hardware("h100_sxm")), own)
    assert [p.name for p in paths] == ["fit_mla.png"] and paths[0].is_file()
