"""Hardware profiles: physical values outside sane ranges are refused when the file
is loaded, naming file, key and value (1e-300 FLOP/s passed "> 0" and crashed or
gave NaN inside the event loop)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sim.errors import ConfigError
from sim.hardware.profile import get_hardware, list_hardware, load_hardware

ROOT = Path(__file__).parent.parent
TEST_GPU = Path(__file__).parent / "data" / "test_gpu.yaml"
H100 = ROOT / "hardware_profiles" / "h100_sxm.yaml"


def write(tmp_path, src: Path, mutate) -> Path:
    data = yaml.safe_load(src.read_text())
    mutate(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def at(keys: str, value):
    def mutate(d):
        *parents, last = keys.split(".")
        for k in parents:
            d = d[k]
        d[last] = value
    return mutate


@pytest.mark.parametrize("src,key,value", [
    (TEST_GPU, "peak_flops_per_s.bf16", 1e-300),
    (TEST_GPU, "peak_flops_per_s.fp8", 1e-300),
    (TEST_GPU, "peak_flops_per_s.bf16", 1e30),
    (TEST_GPU, "hbm_bandwidth_bytes_per_s", 1e-300),
    (TEST_GPU, "hbm_bandwidth_bytes_per_s", 1e3),
    (TEST_GPU, "hbm_bandwidth_bytes_per_s", 1e300),
    (TEST_GPU, "memory_bytes", 1),
    (TEST_GPU, "memory_bytes", 10 ** 30),
    (TEST_GPU, "num_sms", 10 ** 9),
    (TEST_GPU, "interconnect.bandwidth_bytes_per_s", 1e-300),
    (TEST_GPU, "interconnect.latency_s", 1e6),
    (TEST_GPU, "interconnect.max_gpus", 10 ** 9),
    (TEST_GPU, "price_per_gpu_hour_usd", 1e300),
    (TEST_GPU, "efficiency.compute_efficiency", 1e-300),
    (TEST_GPU, "efficiency.memory_efficiency", 1e-300),
    (TEST_GPU, "efficiency.all_reduce_efficiency", 1e-300),
    (TEST_GPU, "efficiency.step_overhead_s", 1e9),
    (TEST_GPU, "efficiency.launch_overhead_s", 1e9),
    (H100, "efficiency.gemm.bf16.compute_efficiency_max", 1e-300),
    (H100, "efficiency.gemm.bf16.memory_half_bytes", 1e300),
    (H100, "efficiency.gemm.bf16.launch_s", 1e9),
    (H100, "efficiency.context_attention.seq_head_s", 1e9),
    (H100, "efficiency.generation_attention.kv_tile", 2 ** 40),
    (H100, "efficiency.elementwise.memory_efficiency", 1e-300),
    (H100, "efficiency.all_reduce.half_bytes", 1e300),
    (H100, "efficiency.step_overhead_s", 1e9),
])
def test_values_outside_sane_ranges_name_file_key_value(tmp_path, src, key, value):
    path = write(tmp_path, src, at(key, value))
    with pytest.raises(ConfigError) as e:
        load_hardware(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: invalid hardware profile: ") and "\n" not in msg
    assert f"{key}: " in msg and f"(value {value!r}" in msg, msg  # the whole dotted path, efficiency. included


def test_bus_efficiency_floor(tmp_path):
    path = write(tmp_path, H100, lambda d: d["efficiency"]["all_reduce"]["bus_efficiency"].update({2: 1e-300}))
    with pytest.raises(ConfigError, match=r"bus_efficiency: GPU counts must be >= 2 and efficiencies in "
                                          r"\[0\.001, 1\.5\], got \{2: 1e-300\}"):
        load_hardware(path)


def test_every_builtin_and_the_test_gpu_are_within_range():
    for name in list_hardware():
        get_hardware(name)
    load_hardware(TEST_GPU)


def test_cli_tiny_bandwidth_is_an_error_not_a_crash(tmp_path):
    path = write(tmp_path, H100, at("hbm_bandwidth_bytes_per_s", 1e-300))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "sim", "run", "--quiet", "--hardware", str(path), "--out", str(out),
                        "--set", "workload.num_requests=20"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "hbm_bandwidth_bytes_per_s" in lines[0] \
        and "1e-300" in lines[0]
    assert not out.exists() or not any(out.iterdir())


def test_overrides_are_bounded_too():
    with pytest.raises(ConfigError, match=r"peak_flops_per_s\.bf16.*1e-300"):
        get_hardware("h100_sxm").with_overrides({"peak_flops_per_s.bf16": 1e-300})


def test_a_boolean_where_a_profile_wants_a_number_is_refused(tmp_path):
    """YAML reads ``yes`` as true; pydantic would take it as 1.0 s of link latency."""
    text = (Path(__file__).resolve().parent.parent / "hardware_profiles" / "h100_sxm.yaml").read_text()
    assert "\n  latency_s: 9.5e-6" in text
    p = tmp_path / "hw.yaml"
    p.write_text(text.replace("\n  latency_s: 9.5e-6", "\n  latency_s: yes", 1))
    with pytest.raises(ConfigError, match=r"hw\.yaml: invalid hardware profile: interconnect: latency_s: "
                                          r"expected a number, got True"):
        load_hardware(p)
