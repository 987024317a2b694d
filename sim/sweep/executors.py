"""Running sweep points: one simulation → one flat result row; the resumable
results store; the ``local`` (process pool) and ``ray`` executors.

A row holds ``point_id``, the axis values, ``status`` (``ok`` / ``infeasible`` /
``failed``), ``reason``, every scalar summary metric (``summary.json`` keys), the
stability columns of :mod:`sim.results.stability`, the point's whole resolved config as
``config.<key>`` (scalar keys, as ``comparison.csv``), ``num_gpus`` (TP × DP × replicas),
``price_per_gpu_hour_usd``, ``cost_per_hour_usd`` and
``usd_per_million_output_tokens`` = cost per hour / (output_throughput · 3600 s) · 1e6.

Rows are appended to ``DIR/points.jsonl`` (one flushed line per finished point: a
crash loses at most the line being written) and ``DIR/results.parquet`` /
``DIR/results.csv`` are rewritten atomically (temp file + rename) as points
finish. A re-run reads all three back and skips the points it already has.
``results.parquet`` needs pyarrow (the extra ``servesim[parquet]``): without it
only ``results.csv`` is written, with one note on stderr.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import multiprocessing
import os
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from sim.config import SimConfig
from sim.errors import ConfigError, InfeasibleError
from sim.results.warnings import WARNING_SEP

log = logging.getLogger(__name__)

STATUSES = ("ok", "infeasible", "failed")
WALL_COLUMNS = ("wall_time_s", "sim_requests_per_wall_s", "wall_s", "date")  # differ run to run


@dataclass
class PointTask:
    """What a worker needs: the built config (``None`` when building it failed, with
    ``error`` the reason) and the axis values to echo into the row."""

    point_id: str
    values: dict[str, Any]
    cfg: SimConfig | None
    goodput: dict[str, float] | None = None
    error: str | None = None


def cost_columns(cfg: SimConfig | None, output_throughput: float | None) -> dict:
    """GPUs, $/hour (``price_per_gpu_hour_usd`` of the hardware profile) and $ per
    million output tokens at the measured output throughput (tokens/s)."""
    out = {"num_gpus": math.nan, "price_per_gpu_hour_usd": math.nan, "cost_per_hour_usd": math.nan,
           "usd_per_million_output_tokens": math.nan}
    if cfg is None:
        return out
    from sim.hardware.profile import get_hardware

    if cfg.disaggregation is not None:  # each pool: its workers × its TP, at its GPU's price
        from sim.config import pool_config

        try:
            pools = [pool_config(cfg, p) for p in ("prefill", "decode")]
        except ConfigError:
            return out
    else:
        pools = [cfg]
    gpus = [p.tensor_parallel_size * p.data_parallel_size * p.num_replicas for p in pools]
    out["num_gpus"] = sum(gpus)
    try:
        prices = [get_hardware(p.hardware).price_per_gpu_hour_usd for p in pools]
    except ConfigError:
        return out
    if any(p is None for p in prices):
        return out
    cost = sum(g * float(pr) for g, pr in zip(gpus, prices))
    out["price_per_gpu_hour_usd"] = cost / out["num_gpus"]
    out["cost_per_hour_usd"] = cost
    if output_throughput and output_throughput > 0 and math.isfinite(output_throughput):
        out["usd_per_million_output_tokens"] = out["cost_per_hour_usd"] / (output_throughput * 3600.0) * 1e6
    return out


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def _axis_cell(v: Any) -> Any:
    return v if _scalar(v) else json.dumps(v, sort_keys=True, default=str)


def run_point(cfg: SimConfig, goodput: dict[str, float] | None = None) -> tuple[dict, Any]:
    """Simulate ``cfg``; return (row without the axis columns, RunResult or None).
    Never raises for a bad point: ConfigError / InfeasibleError → ``infeasible``,
    anything else → ``failed``, with the reason."""
    from sim.runner import run_simulation
    from sim.results.stability import assess_stability

    t0 = time.perf_counter()
    row: dict[str, Any] = {"status": "ok", "reason": ""}
    result = None
    try:
        res = run_simulation(cfg, goodput=goodput)
    except (ConfigError, InfeasibleError) as e:
        row.update(status="infeasible", reason=str(e))
    except Exception as e:  # a broken point must not stop the sweep
        where = traceback.extract_tb(e.__traceback__)[-1]
        row.update(status="failed", reason=f"{type(e).__name__}: {e} ({Path(where.filename).name}:{where.lineno})")
    else:
        result = res.result
        row.update({k: v for k, v in res.summary.items() if _scalar(v)})
        # outside the known ground (sim/results/warnings.py::ground_warnings), one cell
        row["warnings"] = WARNING_SEP.join(res.summary.get("warnings") or [])
        row.update(assess_stability(res.result.requests, res.result.steps))
        # the point's whole deployment, as compare's comparison.csv: not only the swept keys
        row.update({f"config.{k}": v for k, v in res.summary["config"].items() if _scalar(v)})
    row.update(cost_columns(cfg, row.get("output_throughput")))
    row["wall_s"] = time.perf_counter() - t0
    return row, result


def evaluate_task(task: PointTask) -> dict:
    """A task → its full result row (axis values first). Runs in a worker."""
    row: dict[str, Any] = {"point_id": task.point_id}
    row.update({k: _axis_cell(v) for k, v in task.values.items()})
    if task.cfg is None:
        row.update(status="infeasible", reason=task.error or "config could not be built")
        row.update(cost_columns(None, None))
        return row
    body, _ = run_point(task.cfg, task.goodput)
    row.update(body)
    return row


PARQUET_EXTRA = "pip install 'servesim[parquet]' (or pip install pyarrow)"


def parquet_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


_noted_no_parquet = False


def write_parquet(df, path: Path) -> bool:
    """``df`` as parquet at ``path`` when pyarrow is installed; else a one-time note
    on stderr naming the extra, and False (the CSV beside it holds the same table)."""
    global _noted_no_parquet
    if not parquet_available():
        if not _noted_no_parquet:
            print(f"note: results.parquet not written: parquet output needs pyarrow; {PARQUET_EXTRA} "
                  f"(results.csv holds the same table)", file=sys.stderr)
            _noted_no_parquet = True
        return False
    df.to_parquet(path, index=False)
    return True


def _one_line(e: BaseException) -> str:
    """An exception's message on one line (pyarrow's span several)."""
    text = " ".join(str(e).split())
    return text[:200] + ("..." if len(text) > 200 else "") if text else type(e).__name__


def parquet_safe(df):
    """Object columns holding any string become all-string (None kept): parquet needs
    one type per column, and a column can mix e.g. ``""`` and NaN or numbers and text."""
    df = df.copy()
    for col in df.columns:
        if df[col].dtype == object and df[col].map(lambda v: isinstance(v, str)).any():
            df[col] = df[col].map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v))
                                  else v if isinstance(v, str) else str(v))
    return df


# ------------------------------------------------------------------ results store
class ResultStore:
    """The rows of one output folder, keyed by ``point_id``; see the module docstring."""

    def __init__(self, out_dir: str | Path, flush_every_s: float = 2.0) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rows: dict[str, dict] = {}
        self.order: list[str] = []
        self.flush_every_s = flush_every_s
        self._last_flush = 0.0
        #: the current grid's point ids: the tables hold only these (rows of
        #: points an earlier grid had stay in points.jsonl for a later re-run)
        self.grid: list[str] | None = None
        self._load()

    def _damaged(self, path: Path, what: str, fix: str = "") -> ConfigError:
        """The error for an output file a resume cannot read: name it and what to do."""
        fix = fix or ("remove the file (the sweep rebuilds the tables from points.jsonl and re-runs the "
                      "points missing there)")
        return ConfigError(f"{path}: {what}, so the sweep cannot resume into {self.dir}; {fix}, "
                           "or give a new --out")

    def _load(self) -> None:
        import pandas as pd

        pq, csv = self.dir / "results.parquet", self.dir / "results.csv"
        frame = None
        if pq.is_file() and parquet_available():  # without pyarrow, the CSV written beside it
            try:
                frame = pd.read_parquet(pq)
            except Exception as e:  # pyarrow raises several types for a damaged file
                raise self._damaged(pq, f"not a readable parquet table ({_one_line(e)})") from None
        elif csv.is_file():
            try:
                frame = pd.read_csv(csv)
            except pd.errors.EmptyDataError:
                frame = None
            except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
                raise self._damaged(csv, f"not a readable CSV table ({_one_line(e)})") from None
        if frame is not None and "point_id" in frame.columns:
            for rec in frame.to_dict("records"):
                self._put({k: v for k, v in rec.items() if not (isinstance(v, float) and math.isnan(v))})
        jl = self.dir / "points.jsonl"
        if jl.is_file():
            try:
                text = jl.read_text(encoding="utf-8")
            except UnicodeDecodeError as e:
                raise self._damaged(jl, f"not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})",
                                    "remove it (its points run again)") from None
            for lineno, line in enumerate(text.splitlines(), 1):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a crash: that point runs again
                if not isinstance(row, dict) or "point_id" not in row:
                    got = "an object without point_id" if isinstance(row, dict) else type(row).__name__
                    raise self._damaged(jl, f"line {lineno} is not a result row (a JSON object with point_id), "
                                            f"got {got}: {line[:60]!r}",
                                        "delete that line (its point runs again)")
                self._put(row)
            if text and not text.endswith("\n"):  # cut short by a crash: new rows start on a fresh line
                with open(jl, "a") as f:
                    f.write("\n")

    def _put(self, row: dict) -> None:
        pid = str(row["point_id"])
        row["point_id"] = pid
        if pid not in self.rows:
            self.order.append(pid)
        self.rows[pid] = row

    def done_ids(self, retry_failed: bool = True) -> set[str]:
        """Ids to skip: finished points (``ok``/``infeasible``; ``failed`` too unless retried)."""
        return {p for p, r in self.rows.items() if not (retry_failed and r.get("status") == "failed")}

    def add(self, row: dict) -> None:
        with open(self.dir / "points.jsonl", "a") as f:
            f.write(json.dumps(row, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._put(row)
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def frame(self, order: Iterable[str] = ()):
        """The table, rows in ``order`` first (grid order), then any others
        (only those of :attr:`grid` when it is set)."""
        if self.grid is not None:
            return self._table([p for p in self.grid if p in self.rows])
        ids = [p for p in order if p in self.rows]
        seen = set(ids)
        ids += [p for p in self.order if p not in seen]
        return self._table(ids)

    def _table(self, ids: list[str]):
        import pandas as pd

        df = pd.DataFrame([self.rows[p] for p in ids])
        lead = [c for c in ("point_id",) if c in df.columns]
        return df[lead + [c for c in df.columns if c not in lead]]

    def flush(self, order: Iterable[str] = ()) -> None:
        df = parquet_safe(self.frame(order))
        for name, write in (("results.parquet", lambda p: write_parquet(df, p)),
                            ("results.csv", lambda p: df.to_csv(p, index=False, float_format="%.9g") or True)):
            tmp = self.dir / f".{name}.tmp"
            if write(tmp):
                os.replace(tmp, self.dir / name)
        self._last_flush = time.monotonic()


# ------------------------------------------------------------------ executors
def _worker_signals() -> None:
    """In a pool worker: Ctrl-C reaches the whole terminal's process group, but only
    the parent handles it (it stops the pool); SIGTERM, which the parent sends when it
    stops the pool, ends a worker at once and quietly (the parent's own SIGTERM
    handler, inherited through fork, would print a traceback per worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_local(tasks: list[PointTask], on_row: Callable[[dict], None], workers: int | None = None,
              fn: Callable[[Any], dict] = evaluate_task) -> None:
    """A process pool (``workers`` processes; 1 = in this process)."""
    workers = min(workers or os.cpu_count() or 1, len(tasks))  # never more processes than tasks
    if workers <= 1 or len(tasks) <= 1:
        for t in tasks:
            on_row(fn(t))
        return
    # multiprocessing.Pool's context exit terminates the workers: on Ctrl-C (or
    # a broken row handler) they stop at once instead of finishing points nobody
    # will record; queued points are dropped.
    with multiprocessing.Pool(workers, initializer=_worker_signals) as pool:
        for row in pool.imap_unordered(fn, tasks):
            on_row(row)


RAY_EXTRA = "pip install 'servesim[ray]' (or pip install 'ray[client]>=2.9')"


def check_executor(executor: str, ray_address: str | None) -> None:
    """ConfigError for an ``--executor`` that is not ``local`` or ``ray``, or a
    ``--ray-address`` without ``--executor ray`` (it would run on the local pool)."""
    if executor not in ("local", "ray"):
        raise ConfigError(f"--executor: unknown executor {executor!r}; valid: local, ray")
    if ray_address is not None and executor != "ray":
        raise ConfigError(f"--ray-address {ray_address}: joins a Ray cluster with --executor ray; add it "
                          f"(this run's executor is {executor})")


def _check_ray_address(address: str) -> None:
    """A ``ray://`` address needs Ray Client (grpcio, in ``ray[client]``): say so in
    one line rather than let ``ray.init`` fail deep inside."""
    import importlib.util

    if address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        raise ConfigError(f"--ray-address {address}: a ray:// address needs Ray Client (grpcio), which plain "
                          f"'ray' lacks: {RAY_EXTRA}")
    # host:port (or ray://host:port): unreachable is one line now, not Ray retrying for minutes
    hostport = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = hostport.rpartition(":")
    if address != "auto" and sep and port.isdigit():
        import socket

        try:
            socket.create_connection((host or "127.0.0.1", int(port)), timeout=10).close()
        except OSError as e:
            raise ConfigError(f"--ray-address {address}: nothing answers at {host or '127.0.0.1'}:{port} "
                              f"({e.strerror or e}); is the cluster's head running (ray start --head)?") from None


def run_ray(tasks: list[PointTask], on_row: Callable[[dict], None], workers: int | None = None,
            address: str | None = None, fn: Callable[[Any], dict] = evaluate_task) -> None:
    """Ray tasks, one CPU each. Without ``address`` a local Ray starts (``workers``
    CPUs) and stops at the end. ``address`` (``ray://head:10001``, ``head:6379``,
    ``auto``) joins a running cluster: the job ships this driver's code, the
    built-in data and every file the tasks name as its runtime environment
    (:mod:`sim.sweep.ray_ship`), so the nodes need only servesim's dependencies.
    When Ray is already initialised (by the caller), it is used as it is. Ray is
    imported here only (extra ``servesim[ray]``)."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"--executor ray needs Ray: {RAY_EXTRA}") from None
    if address:
        _check_ray_address(address)
    started = False
    staging = None
    with contextlib.ExitStack() as stack:
        if not ray.is_initialized():
            # WARNING: Ray's "Started a local Ray instance" INFO line is noise in servesim's output
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "logging_level": logging.WARNING}
            old_path = os.environ.get("PYTHONPATH")
            if address:
                from sim.sweep.ray_ship import stage

                kw["address"] = address
                root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="servesim-ray-")))
                staging, tasks = stage(root, tasks)
                kw["runtime_env"] = {"working_dir": str(root)}
                log.info("joining the Ray cluster at %s", address)
            else:
                if workers:
                    kw["num_cpus"] = workers
                # A local Ray's workers inherit this environment: let them import this checkout's
                # ``sim`` even when it is not installed (cheaper than a runtime_env).
                root_dir = str(Path(__file__).resolve().parents[2])
                os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root_dir, old_path) if p)
            try:
                ray.init(**kw)
            except Exception as e:  # unreachable head, refused runtime env, version mismatch...
                raise ConfigError(f"--ray-address {address}: cannot join the Ray cluster ({_one_line(e)})"
                                  if address else f"--executor ray: Ray did not start ({_one_line(e)})") from None
            finally:
                if old_path is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = old_path
            started = True
        try:
            remote = ray.remote(num_cpus=1)(fn)
            pending = [remote.remote(t) for t in tasks]
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                out = ray.get(done[0])
                on_row(out if staging is None else _driver_paths(staging, out))
        finally:
            if started:
                ray.shutdown()


def _driver_paths(staging, out):
    from sim.sweep.ray_ship import map_strings

    return map_strings(out, staging.back)


def progress_bar(total: int, quiet: bool, desc: str = "sweep"):
    """A tqdm bar with ETA on stderr (None when quiet or stderr is not a terminal)."""
    if quiet or not sys.stderr.isatty() or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="point", desc=desc, file=sys.stderr, dynamic_ncols=True)
