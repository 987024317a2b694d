"""Hardware profiles: built-ins load, datasheet values, validation errors."""

from pathlib import Path

import pytest
import yaml

from sim.errors import ConfigError
from sim.hardware.profile import (EFFICIENCY_FORMS, EfficiencyBase, get_hardware, list_hardware,
                          load_hardware, register_efficiency_form)

TEST_GPU = Path(__file__).parent / "data" / "test_gpu.yaml"
BUILTIN = ["a100_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300", "h100_sxm", "h200_sxm", "l40s", "mi300x"]


def test_all_builtin_profiles_load():
    assert list_hardware() == BUILTIN
    for name in BUILTIN:
        hw = get_hardware(name)
        assert hw.name == name
        # fitted to measured kernels (h100, a100) or transferred from them (calibration)
        assert hw.efficiency.form == "fitted_v1"


def test_datasheet_values():
    h100 = get_hardware("h100_sxm")
    assert h100.peak_flops_per_s.bf16 == 989.4e12
    assert h100.peak_flops_per_s.fp8 == pytest.approx(1979e12, rel=1e-3)
    assert h100.hbm_bandwidth_bytes_per_s == 3.35e12
    assert h100.num_sms == 132
    assert h100.interconnect.bandwidth_bytes_per_s == 450e9
    h200 = get_hardware("h200_sxm")
    assert h200.hbm_bandwidth_bytes_per_s == 4.8e12
    assert h200.peak_flops_per_s.bf16 == h100.peak_flops_per_s.bf16
    a100 = get_hardware("a100_sxm")
    assert (a100.peak_flops_per_s.bf16, a100.peak_flops_per_s.int8) == (312e12, 624e12)
    assert a100.peak_flops_per_s.get("fp8") is None
    assert a100.hbm_bandwidth_bytes_per_s == 2.039e12 and a100.num_sms == 108
    assert get_hardware("b200_sxm").peak_flops_per_s.get("fp4") is not None


def test_test_profile():
    hw = get_hardware(str(TEST_GPU))
    assert hw.memory_bytes == 80e9 and hw.hbm_bandwidth_bytes_per_s == 1e12
    assert hw.efficiency.operator_efficiency("gemm") == (1.0, 1.0, 0.0)


def _write(tmp_path, mutate):
    data = yaml.safe_load(TEST_GPU.read_text())
    mutate(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(hbm_bandwith_bytes_per_s=1.0), r"hbm_bandwith_bytes_per_s.*unknown key"),
    (lambda d: d.update(hbm_bandwidth_bytes_per_s=-5.0), r"hbm_bandwidth_bytes_per_s.*-5\.0"),
    (lambda d: d.update(hbm_bandwidth_bytes_per_s=float("inf")), r"hbm_bandwidth_bytes_per_s.*finite number"),
    (lambda d: d["efficiency"].update(compute_efficiency=float("nan")), r"compute_efficiency.*finite number"),
    (lambda d: d.pop("memory_bytes"), r"memory_bytes.*[Ff]ield required"),
    (lambda d: d["peak_flops_per_s"].update(fp6=1e15), r"peak_flops_per_s\.fp6"),
    (lambda d: d["efficiency"].update(form="spline"), r"efficiency\.form='spline'"),
    (lambda d: d["efficiency"].update(compute_efficiency=1.5), r"compute_efficiency.*1\.5"),
    (lambda d: d["provenance"].pop("num_sms"), r"provenance.*num_sms"),
])
def test_invalid_profiles_name_file_key_value(tmp_path, mutate, match):
    path = _write(tmp_path, mutate)
    with pytest.raises(ConfigError, match=match) as e:
        load_hardware(path)
    assert str(path) in str(e.value)


def test_exponents_without_sign_or_dot_are_numbers(tmp_path):
    """YAML 1.2 floats (PyYAML reads 8.0e10 and 80e9 as strings under YAML 1.1)."""
    text = (Path(__file__).parent.parent / "hardware_profiles" / "h100_sxm.yaml").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("memory_bytes:"))
    for value in ("8.0e10", "80e9"):
        path = tmp_path / f"h_{value}.yaml"
        path.write_text(text.replace(line, f"memory_bytes: {value}"))
        assert load_hardware(path).memory_bytes == 80_000_000_000


def test_empty_profile_file_is_named_as_empty(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    with pytest.raises(ConfigError, match=r"empty\.yaml: the file is empty"):
        load_hardware(path)


def test_unknown_name_lists_profiles():
    with pytest.raises(ConfigError, match="h100_sxm"):
        get_hardware("h9000")


def test_overrides():
    hw = get_hardware("h100_sxm").with_overrides({"price_per_gpu_hour_usd": 1.5,
                                                  "efficiency.step_overhead_s": 1e-3})
    assert hw.price_per_gpu_hour_usd == 1.5 and hw.efficiency.step_overhead_s == 1e-3
    with pytest.raises(ConfigError, match="price_per_gpu_hour"):
        get_hardware("h100_sxm").with_overrides({"price_per_gpu_hour": 1.5})
    with pytest.raises(ConfigError, match="-1"):
        get_hardware("h100_sxm").with_overrides({"price_per_gpu_hour_usd": -1})


def test_registered_efficiency_form_is_dispatched(tmp_path):
    from typing import Literal

    class Constant(EfficiencyBase):
        form: Literal["constant"]
        value: float
        step_overhead_s: float = 0.0
        all_reduce_efficiency: float = 1.0

        def operator_efficiency(self, op_class):
            return self.value, self.value, 0.0

    register_efficiency_form("constant", Constant)
    try:
        path = _write(tmp_path, lambda d: d.update(efficiency={"form": "constant", "value": 0.5}))
        hw = load_hardware(path)
        assert hw.efficiency.operator_efficiency("gemm") == (0.5, 0.5, 0.0)
    finally:
        EFFICIENCY_FORMS.pop("constant")


def test_a_profile_is_parsed_once_per_content(tmp_path):
    """``servesim validate`` builds two deployments per row: the profile is read
    once (the same frozen object), and again when the file changes."""
    assert get_hardware("h100_sxm") is get_hardware("h100_sxm")
    p = tmp_path / "gpu.yaml"
    text = TEST_GPU.read_text()
    p.write_text(text)
    first = load_hardware(p)
    assert load_hardware(p) is first
    p.write_text(text.replace(f"num_sms: {first.num_sms}", f"num_sms: {first.num_sms + 1}"))
    assert load_hardware(p).num_sms == first.num_sms + 1
    with pytest.raises(Exception):  # frozen: a cached profile cannot be changed by one user
        first.num_sms = 1
