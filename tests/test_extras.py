"""The optional dependencies (extras) and the command-line basics around them:
without pyarrow a sweep writes CSV only and says which extra adds parquet; without
scipy / Ray the command that needs it names its extra; ``ray://`` problems are one
line; ``--version`` and ``--log-level``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sim.errors import ConfigError

DATA = Path(__file__).parent / "data"
SWEEP = {
    "base": {"model": str(DATA / "test_model.json"), "hardware": str(DATA / "test_gpu.yaml"), "max_model_len": 1024,
             "num_gpu_blocks_override": 1024,
             "workload": {"input_len": {"dist": "fixed", "value": 128}, "output_len": {"dist": "fixed", "value": 16},
                          "num_requests": 30, "request_rate": 100.0}},
    "axes": {"max_num_seqs": [4, 8]},
}


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True, timeout=180, **kw)


def _without(monkeypatch, *modules):
    """Make ``import m`` fail (ImportError) and ``find_spec(m)`` say absent, as when not installed."""
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


#: the command in a Python where pyarrow cannot be imported (before pandas looks for it)
NO_PYARROW = ("import sys; sys.modules['pyarrow'] = None; sys.argv[0] = 'servesim'; "
              "from sim.cli.main import main; main()")


def test_sweep_without_pyarrow_writes_csv_and_names_the_extra(tmp_path):
    import pandas as pd

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(SWEEP))
    args = [sys.executable, "-c", NO_PYARROW, "sweep", str(p), "--out", str(tmp_path / "out"), "--workers", "1",
            "--quiet"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "2 points: 2 ok, 0 infeasible, 0 failed" in r.stdout
    assert f"results: {tmp_path / 'out'}/results.csv\n" in r.stdout
    assert r.stderr.count("note: results.parquet not written") == 1 and "pip install 'servesim[parquet]'" in r.stderr
    out = tmp_path / "out"
    assert (out / "results.csv").is_file() and not (out / "results.parquet").exists()
    first = pd.read_csv(out / "results.csv")
    assert list(first["max_num_seqs"]) == [4, 8] and list(first["completed"]) == [30, 30]
    again = subprocess.run(args, capture_output=True, text=True, timeout=180)  # resumes: nothing re-run
    assert again.returncode == 0, again.stderr
    pd.testing.assert_frame_equal(pd.read_csv(out / "results.csv"), first)


def test_sweep_with_pyarrow_writes_both(tmp_path):
    pytest.importorskip("pyarrow", reason="pyarrow is the extra servesim[parquet]")
    import pandas as pd

    from sim.sweep.spec import load_sweep, run_sweep

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(SWEEP))
    df = run_sweep(load_sweep(p), tmp_path / "out", workers=1, quiet=True)
    back = pd.read_parquet(tmp_path / "out" / "results.parquet")
    assert list(back["max_num_seqs"]) == [4, 8] and list(back["completed"]) == list(df["completed"]) == [30, 30]


def test_fitting_without_scipy_names_the_extra(monkeypatch):
    from calibration.fit import _least_squares

    _without(monkeypatch, "scipy", "scipy.optimize")
    with pytest.raises(ConfigError, match=r"needs scipy: pip install 'servesim\[calibration\]'"):
        _least_squares()


def test_ray_executor_without_ray_names_the_extra(monkeypatch):
    from sim.sweep.executors import run_ray

    _without(monkeypatch, "ray")
    with pytest.raises(ConfigError, match=r"--executor ray needs Ray: pip install 'servesim\[ray\]'"):
        run_ray([], lambda row: None)


@pytest.mark.parametrize("address", ["ray://127.0.0.1:9", "127.0.0.1:9"])
def test_a_ray_address_that_cannot_work_is_one_line(tmp_path, address):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'servesim[ray]')")
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(SWEEP))
    r = cli("sweep", str(p), "--executor", "ray", "--ray-address", address, "--out", str(tmp_path / "o"), "--quiet")
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --ray-address {address}: "), r.stderr
    # without Ray Client (plain 'ray'): which extra; with it: nothing answers there
    assert "pip install 'servesim[ray]'" in lines[0] or "nothing answers at 127.0.0.1:9" in lines[0]


def test_version():
    import sim

    r = cli("--version")
    assert r.returncode == 0 and r.stdout == f"servesim {sim.__version__}\n"


def test_log_level(tmp_path):
    r = cli("--log-level", "info", "run", "--quiet", "--set", "workload.num_requests=20", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert " INFO sim.runner: simulating llama-3.1-8b on h100_sxm" in r.stderr
    quiet = cli("run", "--quiet", "--set", "workload.num_requests=20", "--out", str(tmp_path))
    assert "INFO" not in quiet.stderr  # warning by default
    bad = cli("--log-level", "loud", "models")
    assert bad.returncode == 2 and "Invalid value for --log-level: 'loud'; valid: debug, info, warning, error" in bad.stderr
