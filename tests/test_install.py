"""servesim installed from a wheel works outside the checkout: build the wheel
(hatchling, no network), install it into a fresh virtual environment (its
dependencies taken from this Python's site-packages: ``--system-site-packages``,
``--no-deps``), and run ``servesim`` from an empty folder. The package data
(hardware profiles, workloads) must come from the installed package."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert r.returncode == 0, f"{cmd}: status {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("hatchling", reason="building the wheel needs hatchling (in the test extra: "
                                            "pip install -e '.[test]')")
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(out), str(ROOT)])
    (whl,) = out.glob("servesim-*.whl")
    return whl


def test_the_wheel_holds_the_packages_and_every_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("hardware_profiles", "workloads"):
        for f in (ROOT / folder).glob("*.yaml"):
            assert f"sim/data/{folder}/{f.name}" in names, f"{folder}/{f.name} missing from the wheel"
    assert "sim/data/model_presets.yaml" in names
    for pkg in ("sim", "servesim", "calibration"):
        for f in (ROOT / pkg).rglob("*.py"):
            if "__pycache__" not in f.parts:
                assert f.relative_to(ROOT).as_posix() in names, f"{f.relative_to(ROOT)} missing from the wheel"
    assert not any(n.startswith(("tests/", "benchmarks/", "reports/")) for n in names)


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_compare_from_an_empty_folder(wheel, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    py, exe = venv / "bin" / "python", venv / "bin" / "servesim"
    _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed", str(wheel)])
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SERVESIM_HOME", "SERVESIM_SHARED")}

    where = _run([str(py), "-c", "import sim, servesim; from sim.paths import hardware_profiles_dir, workloads_dir; "
                  "print(sim.__file__); print(servesim.__file__); print(hardware_profiles_dir()); "
                  "print(workloads_dir())"], cwd=empty, env=env).stdout.split()
    site = (venv / "lib").resolve()
    for p in where:  # the installed copy, not the checkout (nor an editable install of it)
        assert Path(p).resolve().is_relative_to(site), where
    assert Path(where[2]).name == "hardware_profiles" and Path(where[2]).parent.name == "data"

    assert _run([str(exe), "--version"], cwd=empty, env=env).stdout.strip() == f"servesim {_version()}"
    hw = _run([str(exe), "hardware"], cwd=empty, env=env).stdout
    assert all(f.stem in hw for f in (ROOT / "hardware_profiles").glob("*.yaml"))
    r = _run([str(exe), "compare", "--quiet", "--set", "workload.num_requests=150"], cwd=empty, env=env)
    assert "report: runs/compare/report.md" in r.stdout
    out = empty / "runs" / "compare"
    assert {"report.md", "report.html", "comparison.csv", "ttft_cdf.png"} <= {p.name for p in out.iterdir()}
    assert "workload_source" in (out / "comparison.csv").read_text().splitlines()[0]
    assert "code" in (out / "chunked" / "summary.json").read_text()  # compare's built-in default workload


def _version() -> str:
    import sim

    return sim.__version__
