"""Engine versions (sim/presets/versions.py): ``engine_version`` selects the
documented behaviour changes of older releases, explicit keys still win, and a
version outside the modelled releases is warned about, naming the nearest."""

from __future__ import annotations

import pytest

from sim.config import SimConfig
from sim.presets.versions import (MODELLED, RELEASE_VALUES, VERSION_CHANGES, nearest_modelled, parse_version,
                                  release_values, version_defaults, version_warning)
from sim.validate.rows import ValidateOptions, row_overrides

from tests.test_validate import GPU, MODEL


def test_parse_version():
    assert parse_version("0.5.1.post1") == (0, 5, 1)
    assert parse_version("1.0.0rc3") == (1, 0, 0)
    assert parse_version("v0.8") == (0, 8, 0)
    assert parse_version("nightly-dev") is None
    assert parse_version("0.5.1-rc0.pre1") == (0, 5, 1) and parse_version("1.2.0rc6.post1") == (1, 2, 0)
    assert parse_version("0.6.5+cu124") == (0, 6, 5)
    # trailing text that is no pre/post tag is no version: warned, not read as 0.12.0
    assert parse_version("0.12.0; rm") is None and parse_version("0.12.0.1.2.3") is None
    assert "not a version number" in version_warning("vllm", "0.12.0.1.2.3")


def test_hand_made_vllm_versions():
    # no version: the newest modelled behaviour (0.24: async scheduling on, 0.92 of memory, V1 chunked)
    new = SimConfig(engine="vllm")
    assert (new.scheduler, new.overlap_scheduling, new.gpu_memory_utilization) == ("chunked", True, 0.92)
    # 0.12 (before 0.14 and 0.24): async scheduling off, 0.9 of memory; still V1
    v012 = SimConfig(engine="vllm", engine_version="0.12.0")
    assert (v012.scheduler, v012.overlap_scheduling, v012.gpu_memory_utilization) == ("chunked", False, 0.9)
    # 0.7.3 (V0): prefill-only steps of whole prompts, 256 sequences
    v07 = SimConfig(engine="vllm", engine_version="0.7.3")
    assert (v07.scheduler, v07.max_num_seqs) == ("prefill_first_whole", 256)
    # V0's prefix caching is opt-in (V1, from 0.8.0, turns it on)
    assert v07.enable_prefix_caching is False and new.enable_prefix_caching is True
    assert SimConfig(engine="vllm", engine_version="0.6.5", enable_prefix_caching=True).enable_prefix_caching
    # explicit keys win over the version's
    assert SimConfig(engine="vllm", engine_version="0.12.0", overlap_scheduling=True).overlap_scheduling is True
    assert version_defaults("vllm", "0.14.0") == {"gpu_memory_utilization": 0.9}
    assert version_defaults("sglang", "0.3.6") == {"overlap_scheduling": False}
    assert version_defaults("sglang", "0.5.6") == {}
    assert version_defaults("trtllm", "1.0.0rc3") == {}
    assert version_defaults("vllm", "not-a-version") == {}


def test_every_change_has_a_source_and_a_modelled_range():
    for eng, changes in VERSION_CHANGES.items():
        assert MODELLED[eng]
        for ch in changes:
            assert ch.source and parse_version(ch.before)
            assert ch.key in SimConfig.model_fields


def test_a_measured_value_of_newer_releases_replaces_the_fit_of_older_ones():
    """TensorRT-LLM's host time per sequence: fitted (80 us) on 1.0.0rc3's dense
    rows, measured (28 us, NVIDIA/TensorRT-LLM PR 10273) in the 1.2 series; the
    preset without a version is its newest modelled release, 1.2."""
    from sim.engine.deployment import build_deployment

    for rv in (rv for rvs in RELEASE_VALUES.values() for rv in rvs):
        assert rv.source and parse_version(rv.since) and rv.key in SimConfig.model_fields
    assert release_values("trtllm", "1.0.0rc3") == {} and release_values("trtllm", "1.1.0rc5") == {}
    # PR 10273: 45.11 ms per iteration at 1,536 requests a rank, less the 2 ms fixed host step
    assert round((45.11e-3 - 2e-3) / 1536, 6) == 28e-6
    assert release_values("trtllm", "1.2.0rc2") == {"cpu_seq_overhead_s": 28e-6}
    assert release_values("trtllm", None) == release_values("trtllm", "nightly") == {"cpu_seq_overhead_s": 28e-6}
    assert release_values("vllm", "0.12.0") == {}
    assert SimConfig(engine="trtllm", engine_version="1.0.0rc3").cpu_seq_overhead_s == 80e-6
    assert SimConfig(engine="trtllm", engine_version="1.2.0rc6.post2").cpu_seq_overhead_s == 28e-6
    assert SimConfig(engine="trtllm").cpu_seq_overhead_s == 28e-6
    assert SimConfig(engine="trtllm", engine_version="1.2.0", cpu_seq_overhead_s=5e-6).cpu_seq_overhead_s == 5e-6
    # a decode step of 64 sequences is host-bound at 2 ms + 64 x 28 us = 3.792 ms in 1.2
    # (overlap scheduler: max(GPU, host)), 2 ms + 64 x 80 us = 7.12 ms in 1.0
    keys = {"engine": "trtllm", "model": MODEL, "hardware": GPU}
    new = build_deployment(SimConfig(**keys, engine_version="1.2.0rc2")).overheads
    old = build_deployment(SimConfig(**keys, engine_version="1.0.0rc3")).overheads
    assert new.apply(1e-3, 64) == pytest.approx(3.792e-3, rel=1e-12)
    assert old.apply(1e-3, 64) == pytest.approx(7.12e-3, rel=1e-12)
    assert (new.apply(5e-3, 64), old.apply(7.5e-3, 64)) == (5e-3, 7.5e-3)  # GPU-bound: the GPU's time
    # validate's fitting overrides (ValidateOptions.engine_overrides) reach the older releases only
    row = {"backend": "trtllm", "model_path": MODEL, "system": GPU, "isl": 128, "osl": 16, "concurrency": 4,
           "tp_size": 1, "silicon_ttft_ms": 50.0, "silicon_tpot_ms": 10.0}
    opts = ValidateOptions(engine_overrides={"trtllm": {"cpu_seq_overhead_s": 60e-6, "cpu_step_overhead_s": 1e-3}})
    ov_old = row_overrides({**row, "backend_version": "1.0.0rc3"}, opts)
    ov_new = row_overrides({**row, "backend_version": "1.2.0rc6.post1"}, opts)
    assert (ov_old["cpu_seq_overhead_s"], ov_old["cpu_step_overhead_s"]) == (60e-6, 1e-3)
    assert "cpu_seq_overhead_s" not in ov_new and ov_new["cpu_step_overhead_s"] == 1e-3


@pytest.mark.parametrize("engine, version, nearest", [
    ("vllm", "0.5.0", "0.7.3"), ("trtllm", "1.3.0rc1", "1.2.0"), ("sglang", "0.2.0", "0.3.6"),
    # newer than every modelled release: the newest one's behaviour (not the nearest by parts)
    ("vllm", "9.0.0", "0.24.0"), ("sglang", "1.0.0", "0.5.8"), ("vllm", "1.0.0", "0.24.0")])
def test_outside_the_modelled_releases_warns_naming_the_nearest(engine, version, nearest):
    w = version_warning(engine, version)
    assert w and f"as {nearest}'s" in w and version in w
    assert nearest_modelled(engine, version) == nearest


def test_a_version_between_modelled_releases_gets_the_one_before_it():
    assert nearest_modelled("vllm", "0.13.5") == "0.12.0"  # async scheduling arrives in 0.14
    assert nearest_modelled("vllm", "0.14.0") == "0.14.0"


def test_inside_the_modelled_releases_is_quiet():
    assert version_warning("vllm", "0.12.0") is None
    assert version_warning("vllm", "0.19.0") is None
    assert version_warning("sglang", "0.5.9") is None  # same minor series as the newest modelled
    assert version_warning("vllm", None) is None
    assert "not a version number" in version_warning("trtllm", "gpt-oss-dev")


def test_validate_warns_per_row_on_a_missing_version_and_a_transferred_profile():
    """A row without ``backend_version`` runs as the newest modelled release, said so; a row
    on a GPU whose profile was transferred (h200_sxm, from h100_sxm) says that too, as run
    does; the two in one ``warning`` cell, counted apart in the summary."""
    from sim.validate.rows import WARNING_SEP, simulate_row

    row = {"backend": "vllm", "model_path": MODEL, "system": "h200_sxm", "isl": 64, "osl": 4,
           "concurrency": 2, "tp_size": 1, "silicon_ttft_ms": 1.0, "silicon_tpot_ms": 1.0}
    out = simulate_row(row, ValidateOptions(requests_per_client=2))
    assert out["status"] == "ok"
    ws = out["warning"].split(WARNING_SEP)
    assert ws[0] == f"no backend_version recorded: vllm is simulated as its newest modelled release ({MODELLED['vllm'][-1]})"
    assert ws[1].startswith("hardware profile h200_sxm: its kernel efficiencies were transferred from h100_sxm")
    assert len(ws) == 2
    out = simulate_row({**row, "backend_version": "0.12.0", "system": GPU}, ValidateOptions(requests_per_client=2))
    assert out["status"] == "ok" and out["warning"] == ""


def test_validate_passes_backend_version():
    row = {"backend": "vllm", "backend_version": "0.12.0", "model_path": MODEL, "system": GPU, "isl": 100,
           "osl": 10, "concurrency": 2, "tp_size": 1, "silicon_ttft_ms": 1.0, "silicon_tpot_ms": 1.0}
    assert row_overrides(row, ValidateOptions())["engine_version"] == "0.12.0"


def test_engine_version_without_engine_or_as_a_number_is_refused():
    from sim.config import build_config
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match=r"engine_version '0.7.0' has no effect without engine"):
        build_config(overrides={"engine_version": "0.7.0"})
    with pytest.raises(ConfigError, match=r"engine_version: 0.12 is a number, not a release .* quoted in YAML: "
                                          r"engine_version: '0\.10'"):
        build_config(overrides={"engine": "vllm", "engine_version": 0.12})
    assert build_config(overrides={"engine": "vllm", "engine_version": "0.12.0"}).engine_version == "0.12.0"
    # on the command line a release is the text typed (--engine-version 0.10 is not the number 0.1)
    cfg = build_config(set_args=["engine=vllm", "engine_version=0.10"])
    assert cfg.engine_version == "0.10" and cfg.overlap_scheduling is False  # (0.10 < 0.14)
    assert build_config(set_args=["engine=trtllm", "--engine-version=1.2"]).cpu_seq_overhead_s == 28e-6


def test_a_dynamo_release_is_read_as_the_engine_release_it_ships():
    """disagg_dev.csv's TensorRT-LLM rows record the Dynamo release of their
    ``ai-dynamo/tensorrtllm-runtime`` image as ``backend_version``; the Dynamo
    support matrix gives the engine each release ships (0.8.1.post2: TensorRT-LLM
    1.2.0rc6.post2, overlap scheduler on; read as 0.8.1 it would be TensorRT-LLM
    0.18.2's behaviour, overlap off)."""
    from sim.presets.versions import dynamo_engine_version
    from sim.validate.rows import row_engine_version

    img = "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2"
    assert dynamo_engine_version("trtllm", img) == ("0.8.1.post2", "1.2.0rc6.post2")
    assert dynamo_engine_version("trtllm", img.replace("/nvidia", "#nvidia")) == ("0.8.1.post2", "1.2.0rc6.post2")
    # a post-release the table does not list: its base release's engine
    assert dynamo_engine_version("trtllm", "nvcr.io#nvidia/ai-dynamo/tensorrtllm-runtime:0.7.0.post2") == (
        "0.7.0.post2", "1.2.0rc2")
    assert dynamo_engine_version("sglang", "nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.8.0") == ("0.8.0", "0.5.6.post2")
    # not mapped: another engine's image, a release before the table, not a Dynamo image
    assert dynamo_engine_version("sglang", img) is None
    assert dynamo_engine_version("trtllm", "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.5.1-rc0.pre3") is None
    assert dynamo_engine_version("sglang", "lmsysorg/sglang:v0.5.8-cu130") is None
    row = {"backend": "trtllm", "backend_version": "0.8.1.post2", "image": img}
    assert row_engine_version(row) == "1.2.0rc6.post2"
    assert version_warning("trtllm", row_engine_version(row)) is None
    assert SimConfig(engine="trtllm", engine_version=row_engine_version(row)).overlap_scheduling is True
    assert SimConfig(engine="trtllm", engine_version="0.8.1.post2").overlap_scheduling is False
    # a backend_version that is the engine's own release (not the image tag) is kept
    assert row_engine_version({**row, "backend_version": "1.3.0rc5"}) == "1.3.0rc5"
    assert row_engine_version({"backend": "vllm", "backend_version": "0.12.0"}) == "0.12.0"


def test_a_dynamo_release_before_the_support_matrix_is_read_within_its_bounds():
    """Dynamo 0.5.1 (before the support matrix's first release, 0.6.0) ships a
    TensorRT-LLM release between 1.0.0rc6 and 1.1.0rc5 (DYNAMO_BOUNDS): simulated as
    1.1.0rc5, with a warning, not as TensorRT-LLM 0.5.1 (overlap scheduler off). No
    modelled behaviour change falls inside any bound, so every release in it is alike."""
    from sim.presets.versions import DYNAMO_BOUNDS, RELEASE_VALUES
    from sim.validate.rows import row_engine_version, row_version_warnings

    for series in DYNAMO_BOUNDS.values():
        for eng, (lo, hi, source) in series.items():
            assert source and parse_version(lo) <= parse_version(hi)
            cuts = [c.before for c in VERSION_CHANGES.get(eng, ())] + [r.since for r in RELEASE_VALUES.get(eng, ())]
            assert not [c for c in cuts if parse_version(lo) < parse_version(c) <= parse_version(hi)]
    img = "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.5.1-rc0.pre3"
    row = {"backend": "trtllm", "backend_version": "0.5.1-rc0.pre3", "image": img}
    assert row_engine_version(row) == "1.1.0rc5"
    (w,) = row_version_warnings(row)
    assert "0.5.1-rc0.pre3" in w and "ships trtllm 1.0.0rc6 to 1.1.0rc5" in w and "simulated as 1.1.0rc5" in w
    ov = row_overrides({**row, "model_path": MODEL, "system": GPU, "isl": 128, "osl": 16, "concurrency": 4,
                        "tp_size": 1, "silicon_ttft_ms": 50.0, "silicon_tpot_ms": 10.0}, ValidateOptions())
    cfg = SimConfig(**{k: ov[k] for k in ("engine", "engine_version")})
    assert (cfg.overlap_scheduling, cfg.cpu_seq_overhead_s) == (True, 80e-6)
    # a Dynamo release neither table covers: the newest modelled release, warned
    other = {**row, "backend_version": "0.4.0", "image": img.replace("0.5.1-rc0.pre3", "0.4.0")}
    assert row_engine_version(other) == "" and "not in the Dynamo support matrix" in row_version_warnings(other)[0]
    # the image of another engine, or no image: the cell is the engine's own release
    assert row_engine_version({**row, "image": ""}) == "0.5.1-rc0.pre3"
    assert row_engine_version({"backend": "sglang", "backend_version": "0.5.1-rc0.pre1", "image": img}) == "0.5.1-rc0.pre1"


def test_compare_keeps_each_variants_release_and_its_warnings():
    """A --variant's engine_version is the text typed (0.10 is no number 0.1); each
    variant's own warning (a release out of range) is kept, named by variant, and a
    warning every variant has is said once."""
    from sim.compare.variants import parse_variant
    from sim.errors import ConfigError
    from sim.results.warnings import comparison_warnings

    assert parse_variant("old engine_version=0.10").overrides == {"engine_version": "0.10"}
    with pytest.raises(ConfigError, match=r"engine_version has no value; give one \(e\.g\. engine_version=0\.12\.0\)"):
        parse_variant("old engine_version=")
    assert parse_variant("old engine-version=1.2 max_num_seqs=64").overrides == {"engine_version": "1.2",
                                                                                  "max_num_seqs": 64}
    shared = "hardware profile b200_sxm: transferred"
    ws = comparison_warnings({"a": {"warnings": [shared]}, "b": {"warnings": [shared, "trtllm 9.9 is newer"]}})
    assert ws == [shared, "variant b: trtllm 9.9 is newer"]


def test_flags_and_the_run_title_name_what_a_release_is_simulated_as():
    from types import SimpleNamespace

    from sim.cli.tables import _engine_release
    from sim.presets import preset_values

    v0 = {r["key"]: r for r in preset_values("vllm", "0.7.3")}
    assert v0["max_num_seqs"]["value"] == "256" and v0["max_num_seqs"]["source"].startswith("release before 0.8.0")
    assert [r["key"] for r in preset_values("vllm", "0.7.3")].count("max_num_seqs") == 1
    assert "capacity_scheduler_policy" not in v0  # (vLLM's preset leaves it unset)
    assert _engine_release(SimpleNamespace(engine="trtllm", engine_version=None)) == "trtllm (as 1.2.0)"
    assert _engine_release(SimpleNamespace(engine="trtllm", engine_version="1.0.0rc3")) == "trtllm 1.0.0rc3"
    assert _engine_release(SimpleNamespace(engine="trtllm", engine_version="9.9")) == "trtllm 9.9 (as 1.2.0)"


def test_a_launch_command_names_the_release_it_was_simulated_as():
    from sim.config import build_config
    from sim.launch import launch_command

    old = launch_command(build_config(set_args=["engine=trtllm", "engine_version=0.18.2"]).model_dump())
    assert old.notes[-2] == ("simulated as trtllm 0.18.2; the options are written with the names of TensorRT-LLM "
                             "1.0 PyTorch backend (trtllm-serve, LLM API)")
    assert "pytorch_backend_config: enable_overlap_scheduler" in old.notes[-1]
    assert "disable_overlap_scheduler: true" in old.yaml  # (the option as 1.0 names it, said above)
    new = launch_command(build_config(set_args=["engine=trtllm"]).model_dump())
    assert not any(n.startswith("simulated as") for n in new.notes)
    v = launch_command(build_config(set_args=["engine=vllm", "engine_version=0.12.0"]).model_dump())
    assert v.notes[-1].startswith("simulated as vllm 0.12.0; the options are written with the names of vLLM 0.24")
