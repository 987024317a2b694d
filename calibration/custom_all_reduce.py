"""The engines' own all-reduce kernels under CUDA graphs, fitted from the
``*_custom_allreduce`` kernel tables (``fitted_v1`` ``custom_all_reduce``).

vLLM (``CustomAllreduce``, ``vllm/distributed/device_communicators/custom_all_reduce.py``:
one-shot / two-shot over NVLink peer-to-peer buffers, used below its ``max_size``, 8 MiB by
default, else NCCL), SGLang (the same kernel lineage, ``sgl_kernel`` custom all-reduce) and
TensorRT-LLM (``AllReduceStrategy.AUTO``: its one-shot / two-shot kernels for small
messages) reduce the decode step's small activations with these kernels inside the CUDA graph:
at 8 KiB over 8 H100s 3.6-5.3 µs, where NCCL (the profile's ``all_reduce`` family) takes
16.5 µs. The tables' ``*_graph`` rows are the kernel replayed in a CUDA graph (what a served
step pays); the ``*_eager`` rows add ~20-30 µs of host launch per call and are not used.

The family has the NCCL family's form (:class:`~sim.hardware.efficiency.AllReduceParams`);
the step model takes the faster of the two per message (an engine uses its custom kernel
where it is faster, NCCL above its size limit). Fitted on the vLLM and SGLang rows, scored on
TensorRT-LLM's (held out: another engine's implementation) and in the other direction:
:func:`held_out_scores`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from calibration.fit import Device, fit_family, predict
from sim.hardware.efficiency import AllReduceParams

TABLE_GLOB = "*_custom_allreduce.csv.gz"


def read_custom_all_reduce(directory: str | Path) -> pd.DataFrame:
    """Every engine's CUDA-graph custom all-reduce rows: ``engine``, ``num_gpus``,
    ``message_bytes``, ``latency_s`` (TensorRT-LLM's table has no kernel column:
    all its rows are its graph-captured kernel)."""
    out = []
    for p in sorted(Path(directory).glob(TABLE_GLOB)):
        df = pd.read_csv(p)
        engine = p.name.split("-")[0]
        if "kernel_source" in df.columns:
            df = df[df["kernel_source"].astype(str).str.contains("graph")]
        out.append(pd.DataFrame({"engine": engine, "num_gpus": df["num_gpus"].astype(float),
                                 "message_bytes": df["message_size"].astype(float),
                                 "latency_s": df["latency"].astype(float) / 1e3}))
    if not out:
        raise FileNotFoundError(f"{directory}: no {TABLE_GLOB} tables")
    return pd.concat(out, ignore_index=True)


def fit_custom_all_reduce(rows: pd.DataFrame, dev: Device) -> AllReduceParams:
    """The ``custom_all_reduce`` family fitted to ``rows`` (log least squares)."""
    return fit_family("all_reduce", rows, dev).params


def _ape(p: AllReduceParams, rows: pd.DataFrame, dev: Device) -> np.ndarray:
    return np.abs(predict("all_reduce", p, rows, dev) / rows["latency_s"].to_numpy() - 1.0)


def held_out_scores(rows: pd.DataFrame, dev: Device, max_bytes: float = 8 * 2**20) -> dict[str, tuple]:
    """For each engine: (rows, MAPE %, median APE %) of the family fitted on the other
    engines' rows, on this engine's messages up to ``max_bytes`` (the custom kernels'
    range)."""
    rows = rows[rows["message_bytes"] <= max_bytes]
    out = {}
    for eng in sorted(rows["engine"].unique()):
        fit = fit_custom_all_reduce(rows[rows["engine"] != eng], dev)
        test = rows[rows["engine"] == eng]
        e = _ape(fit, test, dev)
        out[eng] = (len(test), 100 * float(e.mean()), 100 * float(np.median(e)))
    return out


def main(argv=None) -> int:
    import argparse

    from sim.hardware.profile import get_hardware

    ap = argparse.ArgumentParser(description="Fit the engines' custom all-reduce family from kernel tables.")
    ap.add_argument("directory")
    ap.add_argument("--profile", default="h100_sxm")
    ap.add_argument("--max-bytes", type=float, default=8 * 2**20)
    a = ap.parse_args(argv)
    dev = Device.of(get_hardware(a.profile))
    rows = read_custom_all_reduce(a.directory)
    rows = rows[rows["message_bytes"] <= a.max_bytes]
    for eng, (n, mape, md) in held_out_scores(rows, dev, a.max_bytes).items():
        print(f"held out {eng}: {n} rows, MAPE {mape:.1f} %, median APE {md:.1f} %")
    p = fit_custom_all_reduce(rows, dev)
    e = _ape(p, rows, dev)
    print(f"all engines in-sample: {len(rows)} rows, MAPE {100 * e.mean():.1f} %, median APE {100 * np.median(e):.1f} %")
    print(p.model_dump_json())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
