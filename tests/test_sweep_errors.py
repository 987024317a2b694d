"""servesim sweep on bad input: ranges that make no grid, a malformed goodput, a
damaged output folder to resume into, and SIGTERM: one line naming the file and
what to do, exit status 2 (or 128 + signal), never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sim.errors import ConfigError
from sim.sweep.spec import expand_axis, load_sweep, run_sweep

from test_sweep import BASE, write_sweep

ROOT = Path(__file__).resolve().parents[1]


def cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=env)


def assert_one_line_error(r, *parts):
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for p in parts:
        assert p in lines[0], lines[0]


@pytest.mark.parametrize("rng, expect", [
    ({"start": 1, "stop": 8, "step": float("nan")}, r"axes\.r\.step: expected a finite number, got nan"),
    ({"start": 1, "stop": float("inf"), "step": 1}, r"axes\.r\.stop: expected a finite number, got inf"),
    ({"start": float("-inf"), "stop": 1, "num": 3}, r"axes\.r\.start: expected a finite number, got -inf"),
    ({"start": 1, "stop": 8, "step": 1e-300}, r"axes\.r\.step: 1e-300 from 1 to 8 gives more than 100,000 values"),
    ({"start": 1, "stop": 8, "step": 5e-324}, r"axes\.r\.step: 5e-324 from 1 to 8 gives more than 100,000"),
    ({"start": -1e308, "stop": 1e308, "step": 1}, r"more than 100,000 values"),
])
def test_ranges_that_make_no_grid_are_errors(rng, expect):
    with pytest.raises(ConfigError, match=expect):
        expand_axis("r", rng, "s.yaml")


def test_range_near_float_limits_with_num():
    assert expand_axis("r", {"start": -1e308, "stop": 1e308, "num": 3}, "s.yaml") == [-1e308, 0.0, 1e308]


def test_cli_nan_step_is_one_line(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("base: {}\naxes:\n  workload.request_rate: {start: 1, stop: 8, step: .nan}\n")
    r = cli("sweep", str(p), "--out", str(tmp_path / "o"), "--quiet")
    assert_one_line_error(r, str(p), "axes.workload.request_rate.step", "nan")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("goodput, expect", [
    (500, "goodput: expected SLOs as vllm bench writes them"),
    ({"ttft": 500}, "goodput: expected SLOs"),
    (["ttft:500", 3], "goodput: expected SLOs"),
    ("ttft:0", "goodput: 'ttft:0': the SLO must be a finite number > 0 ms"),
    (["ttfb:5"], "goodput: 'ttfb:5': expected ttft:MS, tpot:MS or e2el:MS"),
])
def test_goodput_in_a_sweep_file_is_checked_naming_the_file(tmp_path, goodput, expect):
    p = write_sweep(tmp_path, {"scheduler": ["chunked"]}, goodput=goodput)
    with pytest.raises(ConfigError, match=f"^{p}: {expect}"):
        load_sweep(p)


def test_goodput_string_or_list_still_works(tmp_path):
    assert load_sweep(write_sweep(tmp_path, {"scheduler": ["chunked"]}, goodput="ttft:500 tpot:50")).goodput == \
        ["ttft:500", "tpot:50"]
    assert load_sweep(write_sweep(tmp_path, {"scheduler": ["chunked"]}, goodput=["ttft:500"])).goodput == ["ttft:500"]


# ------------------------------------------------------------------ resuming into a damaged folder
@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished two-point sweep: its file and output folder."""
    tmp = tmp_path_factory.mktemp("finished")
    p = write_sweep(tmp, {"scheduler": ["chunked", "continuous"]})
    run_sweep(load_sweep(p), tmp / "out", workers=1, quiet=True)
    return p, tmp / "out"


def _damage(folder: Path, how: str) -> str:
    if how == "parquet":
        (folder / "results.parquet").write_bytes(b"not parquet at all")
        return "results.parquet: not a readable parquet table"
    if how == "meta":
        (folder / "sweep_meta.json").write_text('{"fingerprint": ')
        return "sweep_meta.json: not valid JSON"
    if how == "meta_list":
        (folder / "sweep_meta.json").write_text("[1, 2]\n")
        return "sweep_meta.json: expected a JSON object, got list"
    if how == "jsonl":
        with open(folder / "points.jsonl", "a") as f:
            f.write("[1, 2]\n")
        return "points.jsonl: line 3 is not a result row (a JSON object with point_id), got list"
    if how == "csv":
        (folder / "results.parquet").unlink()
        (folder / "results.csv").write_text('point_id,status\n"abc,ok\n')
        return "results.csv: not a readable CSV table"
    raise AssertionError(how)


@pytest.mark.parametrize("how, fix", [
    ("parquet", "remove the file"), ("meta", "Remove the file"), ("meta_list", "Remove the file"),
    ("jsonl", "delete that line"), ("csv", "remove the file")])
def test_resume_into_a_damaged_folder_names_the_file(tmp_path, finished, how, fix):
    import shutil

    sweep_file, good = finished
    out = tmp_path / "out"
    shutil.copytree(good, out)
    expect = _damage(out, how)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    r = cli("sweep", str(sweep_file), "--out", str(out), "--quiet", "--workers", "1")
    assert_one_line_error(r, f"{out}/{expect}", fix, "--out")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing rewritten


def test_an_empty_results_csv_is_not_an_error(tmp_path, finished):
    import shutil

    sweep_file, good = finished
    out = tmp_path / "out"
    shutil.copytree(good, out)
    (out / "results.parquet").unlink()
    (out / "results.csv").write_text("")
    df = run_sweep(load_sweep(sweep_file), out, workers=1, quiet=True)
    assert len(df) == 2 and (df["status"] == "ok").all()  # rebuilt from points.jsonl


# ------------------------------------------------------------------ signals
def test_sigterm_stops_a_sweep_with_one_line_and_no_worker_tracebacks(tmp_path):
    """The first point is quick, the two others run for a minute: SIGTERM after the
    first is recorded stops the pool's workers (no BrokenPipe / KeyboardInterrupt
    tracebacks from them) and says how to resume; status 143."""
    base = dict(BASE, workload=dict(BASE["workload"]))
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"base": base, "axes": {"workload.num_requests": [5, 100_000, 100_001]}}))
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "sim", "sweep", str(p), "--out", str(out), "--quiet",
                             "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        jl = out / "points.jsonl"
        while time.monotonic() < deadline and not (jl.is_file() and jl.read_text().count("\n") >= 1):
            time.sleep(0.1)
        assert jl.is_file(), "the first point never finished"
        time.sleep(0.5)  # the workers are inside the slow points
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "Process ForkPoolWorker" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted: sweep stopped by SIGTERM"), err
    assert f"in {out}" in lines[0] and "run the same command again to resume" in lines[0]
    rows = [json.loads(x) for x in (out / "points.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["workload.num_requests"] == 5
    assert "point_id" in (out / "results.csv").read_text()


@pytest.mark.parametrize("key, value, expect", [
    ("model", "nosuchmodel", "unknown model 'nosuchmodel'"),
    ("hardware", "nosuchgpu", "nosuchgpu"),
])
def test_a_typo_in_the_base_model_or_hardware_is_the_files_error(tmp_path, key, value, expect):
    """Every point would fail the same way: an error naming the file before anything
    runs (it was recorded as every point 'infeasible', exit 0)."""
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"base": {**BASE, key: value}, "axes": {"max_num_seqs": [8, 16]}}))
    with pytest.raises(ConfigError, match=rf"no point of the sweep is valid; e\.g\. .*s\.yaml: point \w+: .*{expect}"):
        run_sweep(load_sweep(p), tmp_path / "out", workers=1, quiet=True)
    assert not (tmp_path / "out" / "results.csv").exists()
