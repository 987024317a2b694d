"""servesim sweep: grid expansion (product, zip, ranges), point ids, resume,
infeasible / failed points, and the Ray executor against the local one.
Simulations use the frozen tiny test model and GPU (tests/data)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from sim.errors import ConfigError
from sim.sweep.spec import expand_axis, expand_points, load_sweep, parse_sweep, point_id, run_sweep
from sim.sweep.executors import WALL_COLUMNS

DATA = Path(__file__).parent / "data"
BASE = {
    "model": str(DATA / "test_model.json"),
    "hardware": str(DATA / "test_gpu.yaml"),
    "max_model_len": 1024,
    "num_gpu_blocks_override": 1024,  # the whole 80 GB would be ~1.2 M blocks: slow to build for nothing
    "workload": {"input_len": {"dist": "fixed", "value": 128}, "output_len": {"dist": "fixed", "value": 16},
                 "num_requests": 30, "request_rate": 100.0},
}


def write_sweep(tmp_path: Path, axes: dict, name: str = "sweep.yaml", **extra) -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump({"base": BASE, "axes": axes, **extra}))
    return p


# ------------------------------------------------------------------ expansion
def test_product_order_first_axis_slowest():
    spec = parse_sweep({"axes": {"scheduler": ["chunked", "continuous"], "max_num_seqs": [8, 16, 32]}}, "s.yaml")
    pts = expand_points(spec)
    assert [tuple(p.values.values()) for p in pts] == [
        ("chunked", 8), ("chunked", 16), ("chunked", 32), ("continuous", 8), ("continuous", 16), ("continuous", 32)]
    assert [p.index for p in pts] == list(range(6))
    assert len({p.point_id for p in pts}) == 6


def test_zip_groups_vary_together():
    spec = parse_sweep({"axes": {"hardware": ["a", "b"], "tensor_parallel_size": [1, 2], "max_num_seqs": [8, 16, 32]},
                        "zip": [["hardware", "tensor_parallel_size"]]}, "s.yaml")
    pts = [p.values for p in expand_points(spec)]
    assert len(pts) == 2 * 3  # not 2 * 2 * 3
    assert {(v["hardware"], v["tensor_parallel_size"]) for v in pts} == {("a", 1), ("b", 2)}
    assert list(pts[0]) == ["hardware", "tensor_parallel_size", "max_num_seqs"]


def test_zip_errors():
    with pytest.raises(ConfigError, match="equal lengths"):
        parse_sweep({"axes": {"hardware": ["a", "b"], "max_num_seqs": [1, 2, 3]},
                     "zip": [["hardware", "max_num_seqs"]]}, "s.yaml")
    with pytest.raises(ConfigError, match="'seed' is not an axis"):
        parse_sweep({"axes": {"hardware": ["a", "b"]}, "zip": [["hardware", "seed"]]}, "s.yaml")
    with pytest.raises(ConfigError, match=r"s.yaml: zip: the group \['hardware'\] has 1 key\(s\); a group zips two"):
        parse_sweep({"axes": {"hardware": ["a", "b"]}, "zip": [["hardware"]]}, "s.yaml")


def test_ray_address_without_the_ray_executor_is_refused(tmp_path):
    from sim.sweep.spec import run_sweep

    spec = parse_sweep({"axes": {"max_num_seqs": [8]}}, "s.yaml")
    with pytest.raises(ConfigError, match=r"--ray-address auto: joins a Ray cluster with --executor ray"):
        run_sweep(spec, tmp_path / "o", ray_address="auto", quiet=True)  # (it ran locally without a word)
    assert not (tmp_path / "o").exists()


def test_ranges():
    assert expand_axis("k", {"start": 2, "stop": 8, "step": 2}, "f") == [2, 4, 6, 8]
    assert all(isinstance(v, int) for v in expand_axis("k", {"start": 2, "stop": 8, "step": 2}, "f"))
    assert expand_axis("k", {"start": 1, "stop": 2, "step": 0.25}, "f") == [1.0, 1.25, 1.5, 1.75, 2.0]
    assert expand_axis("k", {"start": 0.1, "stop": 0.3, "step": 0.1}, "f") == [0.1, 0.2, 0.3]
    assert expand_axis("k", {"start": 0, "stop": 1, "num": 5}, "f") == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert expand_axis("k", {"start": 8, "stop": 2, "step": -3}, "f") == [8, 5, 2]
    assert expand_axis("k", {"values": [3, 1]}, "f") == [3, 1]
    with pytest.raises(ConfigError, match="never gets"):
        expand_axis("k", {"start": 1, "stop": 2, "step": -1}, "f")
    with pytest.raises(ConfigError, match=r"f: axes.k"):
        expand_axis("k", {"start": 1, "stop": 2}, "f")


def test_workload_axes_nested_or_dotted():
    a = parse_sweep({"axes": {"workload": {"request_rate": [1, 2]}}}, "s.yaml")
    b = parse_sweep({"axes": {"workload.request_rate": [1, 2]}}, "s.yaml")
    assert a.axes == b.axes == {"workload.request_rate": [1, 2]}


def test_unknown_keys_name_file_and_key(tmp_path):
    p = write_sweep(tmp_path, {"max_num_seq": [1, 2]})
    with pytest.raises(ConfigError, match=r"sweep.yaml: axes: unknown config key 'max_num_seq'.*max_num_seqs"):
        load_sweep(p)
    with pytest.raises(ConfigError, match=r"s.yaml: unknown sweep key 'axis'"):
        parse_sweep({"axis": {}}, "s.yaml")
    with pytest.raises(ConfigError, match=r"s.yaml: base: unknown config key 'workload.rate'"):
        parse_sweep({"base": {"workload": {"rate": 1}}, "axes": {"seed": [1]}}, "s.yaml")
    with pytest.raises(ConfigError, match=r"^sweep file: file not found: .*nope\.yaml"):
        load_sweep(tmp_path / "nope.yaml")


def test_point_id_stable():
    assert point_id({"a": 4, "b": "x"}) == point_id({"b": "x", "a": 4.0})
    assert point_id({"a": 4}) != point_id({"a": 5})
    assert len(point_id({"a": 1})) == 12


# ------------------------------------------------------------------ running
def _ok_rows(df):
    return df[df["status"] == "ok"]


def test_resume_skips_finished_and_loses_none(tmp_path, capsys):
    out = tmp_path / "out"
    first = run_sweep(load_sweep(write_sweep(tmp_path, {"workload.request_rate": [50, 100]}, "a.yaml")), out,
                      workers=1, quiet=True)
    assert len(first) == 2 and (first["status"] == "ok").all()
    assert "reused" not in capsys.readouterr().err
    full = run_sweep(load_sweep(write_sweep(tmp_path, {"workload.request_rate": [50, 100, 200, 400]}, "b.yaml")),
                     out, workers=1, quiet=True)
    assert f"note: 2 of 4 point(s) already in {out} (points.jsonl) were reused, not rerun" in capsys.readouterr().err
    lines = (out / "points.jsonl").read_text().splitlines()
    assert len(lines) == 4  # 2 + the 2 new points; the finished ones were not re-run
    assert list(full["workload.request_rate"]) == [50, 100, 200, 400]
    # every row names its whole deployment, not only the swept key (as comparison.csv does)
    csv_rows = pd.read_csv(out / "results.csv")
    assert csv_rows["config.model"].str.endswith("test_model.json").all()
    assert csv_rows["config.hardware"].str.endswith("test_gpu.yaml").all()
    assert list(csv_rows["config.max_model_len"]) == [1024] * 4
    assert (full["status"] == "ok").all() and (full["completed"] == 30).all()
    # the first two rows are exactly those of the first run
    keep = [c for c in first.columns if c not in WALL_COLUMNS]
    pd.testing.assert_frame_equal(first[keep].reset_index(drop=True), full[keep].iloc[:2].reset_index(drop=True),
                                  check_dtype=False)
    on_disk = pd.read_csv(out / "results.csv")
    assert list(on_disk["point_id"]) == list(full["point_id"])
    pq = pd.read_parquet(out / "results.parquet")
    assert len(pq) == 4
    # A narrower grid into the same folder: its tables list only its own points
    # (they used to keep the earlier grid's rows); nothing is re-run.
    narrow = run_sweep(load_sweep(write_sweep(tmp_path, {"workload.request_rate": [100, 200]}, "c.yaml")),
                       out, workers=1, quiet=True)
    assert list(narrow["workload.request_rate"]) == [100, 200]
    assert list(pd.read_csv(out / "results.csv")["workload.request_rate"]) == [100, 200]
    assert len((out / "points.jsonl").read_text().splitlines()) == 4


def test_interrupted_sweep_keeps_finished_points(tmp_path, monkeypatch):
    import sim.sweep.executors as ex

    spec = load_sweep(write_sweep(tmp_path, {"workload.request_rate": [50, 100, 200, 400]}))
    real = ex.run_local

    def interrupted(tasks, on_row, workers=None):
        real(tasks[:2], on_row, 1)
        raise KeyboardInterrupt

    monkeypatch.setattr(ex, "run_local", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, tmp_path / "out", workers=1, quiet=True)
    assert len(pd.read_csv(tmp_path / "out" / "results.csv")) == 2  # written despite the interrupt
    with open(tmp_path / "out" / "points.jsonl", "a") as f:
        f.write('{"point_id": "cut-short')  # a crash mid-line is ignored
    monkeypatch.setattr(ex, "run_local", real)
    df = run_sweep(spec, tmp_path / "out", workers=1, quiet=True)
    assert len(df) == 4 and (df["status"] == "ok").all()
    lines = (tmp_path / "out" / "points.jsonl").read_text().splitlines()
    assert len(lines) == 2 + 1 + 2  # only the two missing points ran again


def test_infeasible_and_failed_points_are_recorded(tmp_path, monkeypatch):
    p = write_sweep(tmp_path, {"gpu_memory_utilization": [0.9, 0.9, 0.002], "num_gpu_blocks_override": [1024, 4, None],
                               "tensor_parallel_size": [1, 2]},
                    zip=[["gpu_memory_utilization", "num_gpu_blocks_override"]])
    df = run_sweep(load_sweep(p), tmp_path / "out", workers=1, quiet=True)
    assert len(df) == 6
    by = {(r["num_gpu_blocks_override"], r["tensor_parallel_size"]): r
          for r in df.fillna({"num_gpu_blocks_override": 0}).to_dict("records")}
    ok = by[(1024, 1)]
    assert ok["status"] == "ok" and ok["reason"] == "" and ok["num_gpus"] == 1 and ok["completed"] == 30
    assert ok["cost_per_hour_usd"] == 1.0  # test_gpu: $1 per GPU-hour
    assert ok["usd_per_million_output_tokens"] == pytest.approx(1.0 / (ok["output_throughput"] * 3600) * 1e6)
    assert by[(4, 1)]["status"] == "infeasible" and "max_model_len 1024" in by[(4, 1)]["reason"]
    assert by[(0, 1)]["status"] == "infeasible" and "does not fit" in by[(0, 1)]["reason"]
    assert by[(1024, 2)]["status"] == "ok"
    assert math.isnan(by[(4, 1)]["completed"])
    # TP 3 is invalid whatever the other axes hold: the sweep file's error, before any run.
    with pytest.raises(ConfigError, match="axes.tensor_parallel_size = 3 is invalid in every point.*power of two"):
        run_sweep(load_sweep(write_sweep(tmp_path, {"tensor_parallel_size": [1, 3]}, "tp.yaml")), tmp_path / "tp",
                  workers=1, quiet=True)

    import sim.runner

    def boom(cfg, **kw):
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(sim.runner, "run_simulation", boom)
    df2 = run_sweep(load_sweep(write_sweep(tmp_path, {"seed": [1, 2]}, "f.yaml")), tmp_path / "f", workers=1, quiet=True)
    assert (df2["status"] == "failed").all()
    assert df2["reason"].str.contains("RuntimeError: engine exploded").all()


def test_other_base_in_same_folder_is_refused(tmp_path):
    run_sweep(load_sweep(write_sweep(tmp_path, {"seed": [1]})), tmp_path / "out", workers=1, quiet=True)
    other = yaml.safe_load((tmp_path / "sweep.yaml").read_text())
    other["base"]["max_model_len"] = 512
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    with pytest.raises(ConfigError, match="different base config"):
        run_sweep(load_sweep(tmp_path / "other.yaml"), tmp_path / "out", workers=1, quiet=True)


def test_workload_name_axis_replaces_the_workload(tmp_path):
    from sim.sweep.spec import point_config

    spec = parse_sweep({"base": {"workload": "chat", "max_model_len": 4096},
                        "axes": {"workload.name": ["chat", "summarization"]}}, str(tmp_path / "s.yaml"))
    chat, summ = (point_config(spec, p) for p in expand_points(spec))
    assert chat.workload.input_len != summ.workload.input_len


def test_cli_sweep(tmp_path):
    import typer
    from typer.testing import CliRunner

    from sim.cli.sweep import sweep

    app = typer.Typer()
    app.command()(sweep)
    app.command()(lambda: None)  # two commands: typer keeps "sweep" as a subcommand name
    p = write_sweep(tmp_path, {"scheduler": ["chunked", "continuous"]})
    r = CliRunner().invoke(app, ["sweep", str(p), "--out", str(tmp_path / "o"), "--workers", "1", "--quiet"])
    assert r.exit_code == 0, r.output
    assert "2 points: 2 ok, 0 infeasible, 0 failed" in r.output
    assert json.loads((tmp_path / "o" / "sweep_meta.json").read_text())["num_points"] == 2


@pytest.mark.ray
def test_ray_executor_matches_local(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'servesim[ray]')")
    p = write_sweep(tmp_path, {"scheduler": ["chunked", "continuous"], "workload.request_rate": [50, 200]})
    local = run_sweep(load_sweep(p), tmp_path / "local", workers=1, quiet=True)
    ray_df = run_sweep(load_sweep(p), tmp_path / "ray", executor="ray", workers=2, quiet=True)
    assert len(local) == 4 and (local["status"] == "ok").all()
    keep = [c for c in local.columns if c not in WALL_COLUMNS]
    pd.testing.assert_frame_equal(local[keep], ray_df[keep])


def test_mistyped_names_are_errors_not_infeasible_points(tmp_path):
    # a typo in a grid must stop the sweep before any point runs, naming key and value
    spec = load_sweep(write_sweep(tmp_path, {"hardware": ["h100_sxm", "h100"]}))
    with pytest.raises(ConfigError, match=r"axes\.hardware: unknown hardware 'h100'"):
        run_sweep(spec, tmp_path / "out", workers=1, quiet=True)
    assert not (tmp_path / "out" / "points.jsonl").exists()
    spec = load_sweep(write_sweep(tmp_path, {"scheduler": ["chunked", "chunky"]}, "b.yaml"))
    with pytest.raises(ConfigError, match=r"axes\.scheduler: unknown batching mode 'chunky'"):
        run_sweep(spec, tmp_path / "out2", workers=1, quiet=True)


def _slow_point(task):
    # task = (index, marker folder): point 0 returns at once, the others sleep, then mark
    import time as _time

    i, folder = task
    if i:
        _time.sleep(1.5)
        (Path(folder) / f"done_{i}").write_text("")
    return {"point_id": str(i)}


def test_interrupt_stops_the_worker_processes(tmp_path):
    from sim.sweep.executors import run_local

    def on_row(row):
        raise KeyboardInterrupt  # Ctrl-C while the first result is handled

    with pytest.raises(KeyboardInterrupt):
        run_local([(i, str(tmp_path)) for i in range(4)], on_row, workers=2, fn=_slow_point)
    import multiprocessing
    import time

    time.sleep(2.0)  # longer than a point: a worker left running would have marked it done
    assert not list(tmp_path.glob("done_*"))
    assert not [p for p in multiprocessing.active_children() if p.is_alive()]


def test_grids_too_large_to_run_are_errors_before_expanding(tmp_path):
    from sim.sweep.spec import MAX_POINTS

    with pytest.raises(ConfigError, match=r"axes\.workload\.request_rate: 9,999,990,001 values; a sweep takes at most"):
        expand_axis("workload.request_rate", {"start": 1, "stop": 1_000_000, "step": 0.0001}, "s.yaml")
    spec = load_sweep(write_sweep(tmp_path, {"workload.request_rate": {"start": 1, "stop": 400, "num": 400},
                                             "max_num_seqs": {"start": 1, "stop": 400, "step": 1}}))
    with pytest.raises(ConfigError, match=r"the grid: 160,000 points"):
        expand_points(spec)
    assert MAX_POINTS == 100_000


def test_an_axis_value_invalid_everywhere_is_an_error_a_bad_combination_is_infeasible(tmp_path):
    """max_num_seqs 0 is invalid in every point: the sweep file's error, before any
    run (it used to be an 'infeasible' point, exit 0). A budget below max_num_seqs
    is invalid only beside the larger max_num_seqs: that point alone is infeasible."""
    with pytest.raises(ConfigError, match=r"axes.max_num_seqs = 0 is invalid in every point; e.g. .*max_num_seqs"):
        run_sweep(load_sweep(write_sweep(tmp_path, {"max_num_seqs": [8, 0]}, "a.yaml")), tmp_path / "a",
                  workers=1, quiet=True)
    assert not (tmp_path / "a" / "results.csv").exists()
    df = run_sweep(load_sweep(write_sweep(tmp_path, {"scheduler": ["chunked"], "max_num_seqs": [8, 64],
                                                     "max_num_batched_tokens": [32, 128]}, "b.yaml")),
                   tmp_path / "b", workers=1, quiet=True)
    bad = df[df["status"] == "infeasible"]
    assert len(bad) == 1 and bad.iloc[0]["max_num_seqs"] == 64 and bad.iloc[0]["max_num_batched_tokens"] == 32
