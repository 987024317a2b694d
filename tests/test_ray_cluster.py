"""The Ray executor on a multi-node cluster (``ray.cluster_utils.Cluster``: a head
and a second node on this machine, each its own raylet): the job ships the
driver's ``sim``, the built-in data and the files the points name
(:mod:`sim.sweep.ray_ship`), and the rows equal a local run's."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from sim.sweep.ray_ship import FILES_DIR, Staging, map_strings

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


def test_map_strings_rewrites_paths_in_configs_and_back(tmp_path):
    from sim.config import build_config
    from sim.sweep.executors import PointTask

    trace = tmp_path / "lengths.csv"
    trace.write_text("num_prefill_tokens,num_decode_tokens\n100,10\n200,20\n")
    cfg = build_config(None, {"model": str(DATA / "test_model.json"), "hardware": str(DATA / "test_gpu.yaml"),
                              "workload": {"trace": str(trace), "request_rate": 1}})
    task = PointTask("p0", {"scheduler": "chunked"}, cfg)
    st = Staging(tmp_path / "stage")
    shipped = map_strings(task, st.ship_file)
    assert shipped.cfg.workload.trace.startswith(f"{FILES_DIR}/") and shipped.cfg.workload.trace.endswith("lengths.csv")
    assert shipped.cfg.model.endswith("/test_model.json") and shipped.cfg.hardware.endswith("/test_gpu.yaml")
    assert shipped.cfg.scheduler == cfg.scheduler and shipped.values == {"scheduler": "chunked"}
    assert (tmp_path / "stage" / shipped.cfg.workload.trace).read_text() == trace.read_text()
    assert task.cfg.workload.trace == str(trace)  # the driver's task is left as it was
    row = {"config.workload.trace": shipped.cfg.workload.trace, "workload_source": f"trace {shipped.cfg.workload.trace}"}
    assert map_strings(row, st.back) == {"config.workload.trace": str(trace), "workload_source": f"trace {trace}"}


def _probe(_task):
    """Where a worker found servesim's code and data, and on which node it ran."""
    import time

    import ray

    import sim
    from sim.paths import hardware_profiles_dir

    time.sleep(0.5)  # long enough that the tasks spread over both nodes
    return {"sim": str(Path(sim.__file__).resolve()), "cwd": os.getcwd(),
            "hardware_profiles": str(hardware_profiles_dir()), "node": ray.get_runtime_context().get_node_id()}


@pytest.mark.ray
def test_sweep_points_on_a_two_node_cluster(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'servesim[ray]')")
    from ray.cluster_utils import Cluster

    from sim.config import build_config
    from sim.sweep.executors import PointTask, WALL_COLUMNS, evaluate_task, run_ray

    # the files the points name live only in a folder the driver sees (on a real
    # cluster the nodes would not have them)
    files = tmp_path / "driver_only"
    (files / "model").mkdir(parents=True)
    shutil.copy(DATA / "test_model.json", files / "model" / "config.json")
    shutil.copy(DATA / "test_gpu.yaml", files / "gpu.yaml")
    trace = files / "lengths.csv"
    trace.write_text("num_prefill_tokens,num_decode_tokens\n" + "".join(
        f"{100 + 37 * i % 900},{5 + 11 * i % 60}\n" for i in range(60)))
    tasks = []
    for i, seqs in enumerate((4, 8, 16, 64)):
        cfg = build_config(None, {"model": str(files / "model"), "hardware": str(files / "gpu.yaml"),
                                  "max_num_seqs": seqs, "workload": {"trace": str(trace), "request_rate": 20}})
        tasks.append(PointTask(f"p{i}", {"max_num_seqs": seqs}, cfg))

    # the nodes start without this checkout on their path: the code comes from the job
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(tmp_path)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        where: list[dict] = []
        run_ray(tasks, where.append, address=cluster.address, fn=_probe)
        rows: list[dict] = []
        run_ray(tasks, rows.append, address=cluster.address)
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()

    assert len({w["node"] for w in where}) == 2, where  # both nodes ran points
    for w in where:  # the shipped copy, in the job's working directory, not the checkout
        assert w["sim"].startswith(w["cwd"]) and not w["sim"].startswith(str(ROOT)), w
        assert w["hardware_profiles"] == str(Path(w["cwd"]) / "sim" / "data" / "hardware_profiles"), w
    local = {r["point_id"]: r for r in map(evaluate_task, tasks)}
    assert sorted(r["point_id"] for r in rows) == ["p0", "p1", "p2", "p3"]
    for r in rows:
        assert r["status"] == "ok", r
        assert r["completed"] == 60
        # the driver's paths, put back
        assert r["workload_source"].startswith(f"trace {trace} (lengths): 60 of 60 rows"), r["workload_source"]
        assert r["config.model"] == str(files / "model") and r["config.hardware"] == str(files / "gpu.yaml")
        mine = {k: v for k, v in r.items() if k not in WALL_COLUMNS}
        assert mine == {k: v for k, v in local[r["point_id"]].items() if k not in WALL_COLUMNS}
