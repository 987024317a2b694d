"""Readers for measured kernel tables (the ``../shared/kernels/`` format).

Tables are CSV (optionally gzipped), one kernel call per row, ``latency`` in
milliseconds (aiconfigurator-core 0.12.0 performance database). Each reader
checks its required columns and that every latency is positive, raising
:class:`~sim.errors.ConfigError` naming the file, column and row, and adds
``latency_s`` (seconds).

NCCL ``message_size`` is a number of *elements*, not bytes: aiconfigurator's
``collector/collect_nccl.py`` runs nccl-tests with a size in bytes and logs
``size // bytes_per_element`` (half: 2 B, int8: 1 B). The readers add
``message_bytes``.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import ConfigError

GEMM_COLUMNS = ("gemm_dtype", "m", "n", "k", "latency")
ATTENTION_COLUMNS = ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                     "kv_cache_dtype", "step", "latency")
#: constant columns some tables drop (SGLang and TensorRT-LLM: a context table has no
#: ``step``, a generation table no ``isl``) and the value they had
ATTENTION_CONSTANTS = {"context_attention": {"step": 0, "window_size": 0},
                       "generation_attention": {"isl": 1, "window_size": 0}}
NCCL_COLUMNS = ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency")
NCCL_DTYPE_BYTES = {"half": 2, "float16": 2, "bfloat16": 2, "int8": 1, "float": 4, "float32": 4}

MOE_COLUMNS = ("kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk",
               "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency")
#: fused-MoE ``moe_dtype`` -> servesim quantization name of the expert weights
MOE_DTYPES = {"bfloat16": "bf16", "float16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block",
              "int4_wo": "int4_wo", "w4a16_mxfp4": "mxfp4", "nvfp4": "nvfp4"}

#: (hidden_size, inter_size, topk, num_experts) of the fused-MoE tables' layers whose
#: experts are not gated: NVIDIA Nemotron-3 (Nano: 2688 x 1856, 128 experts, top-6;
#: Super/Ultra: 512 experts, top-22) uses squared-ReLU experts, w1 [E, I, h] with no
#: gate (vLLM ``MoEActivation.RELU2_NO_MUL``). The tables have no activation column; the
#: aiconfigurator collector's model list says so ("nemotron-3 nano (uses relu2,
#: non-gated)", ``collector/common_test_cases.py`` ``_MOE_MODEL_CONFIGS``), and the
#: H100 bf16 rows agree: read as gated they stream 4.5-4.6 TB/s once every expert is
#: touched, above the 3.35 TB/s of HBM3, and 3.0-3.1 TB/s non-gated, as every gated
#: layer of the table (2.9-3.2 TB/s).
NON_GATED_MOE_SHAPES = frozenset({(2688, 1856, 6, 128), (1024, 2688, 22, 512),
                                  (2048, 5120, 22, 512), (8192, 5120, 22, 512)})

#: table kind -> file-name suffix (before .csv / .csv.gz)
TABLE_KINDS = {"gemm": "_gemm", "context_attention": "_context_attention",
               "generation_attention": "_generation_attention", "moe": "_moe", "nccl": None}


def table_kind(path: str | Path) -> str | None:
    """Kind of a table from its file name, or None if not a known table."""
    name = Path(path).name
    stem = name.removesuffix(".gz").removesuffix(".csv")
    if not name.endswith((".csv", ".csv.gz")):
        return None
    if stem.startswith("nccl"):
        return "nccl"
    if stem.endswith(("_mla_generation_module", "_mla_context_module")):
        return "mla_module"
    if stem.endswith("_gdn"):
        return "gdn"
    for kind, suffix in TABLE_KINDS.items():
        if suffix and stem.endswith(suffix):
            return kind
    return None


def table_engine(path: str | Path) -> str | None:
    """The engine whose kernels a table holds, from its name ``ENGINE-VERSION_TABLE``
    (``vllm-0.24.0_gemm.csv.gz`` -> ``vllm``; a live calibration's ``torch_gemm.csv``
    -> ``torch``); None for NCCL tables, which serve every engine."""
    stem = Path(path).name.removesuffix(".gz").removesuffix(".csv")
    if stem.startswith("nccl"):
        return None
    return stem.split("_", 1)[0].split("-", 1)[0]


#: the engine whose kernel tables are fitted when a folder holds several (the shipped
#: profiles are fitted to vLLM's kernels; SGLang's and TensorRT-LLM's are their own fits)
DEFAULT_TABLE_ENGINE = "vllm"


def find_tables(directory: str | Path, engine: str | None = None) -> list[tuple[str, Path]]:
    """(kind, path) of every known table in ``directory``, sorted by name: the
    tables of ``engine`` (see :func:`table_engine`) and the NCCL ones. Without
    ``engine``, a folder holding tables of one engine gives them all, one holding
    several gives :data:`DEFAULT_TABLE_ENGINE`'s."""
    d = Path(directory)
    if not d.is_dir():
        raise ConfigError(f"{d}: not a directory of kernel tables")
    found = [(table_kind(p), p) for p in sorted(d.iterdir())]
    found = [(k, p) for k, p in found if k is not None]
    engines = sorted({e for _, p in found if (e := table_engine(p)) is not None})
    if engine is None and len(engines) > 1:
        if DEFAULT_TABLE_ENGINE not in engines:
            raise ConfigError(f"{d}: kernel tables of several engines ({', '.join(engines)}); "
                              f"choose one with --engine")
        engine = DEFAULT_TABLE_ENGINE
    if engine is not None and engine not in engines:
        raise ConfigError(f"{d}: no kernel tables of engine {engine!r}; found: "
                          f"{', '.join(engines) or 'none'}")
    return [(k, p) for k, p in found if engine is None or table_engine(p) in (None, engine)]


def read_csv_table(path: str | Path, nrows: int | None = None) -> pd.DataFrame:
    """``pd.read_csv`` of a kernel table (plain or gzipped CSV); a file it cannot
    read (damaged gzip, not CSV, not text, empty) is a ConfigError naming it."""
    try:
        return pd.read_csv(path, nrows=nrows)
    except (OSError, ValueError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        what = " ".join(str(e).split()) or type(e).__name__
        raise ConfigError(f"{path}: cannot read table: {what}") from None


def _read(path: Path, columns: tuple[str, ...], nrows: int | None,
          constants: dict | None = None) -> pd.DataFrame:
    df = read_csv_table(path, nrows)
    for col, value in (constants or {}).items():
        if col not in df.columns:
            df[col] = value
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(missing)}; "
                          f"found {', '.join(map(str, df.columns))}")
    lat = pd.to_numeric(df["latency"], errors="coerce")
    bad = lat.isna() | (lat <= 0) | np.isinf(lat)
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise ConfigError(f"{path}: column latency, line {i + 2}: "
                          f"value {_cell_text(df['latency'].iloc[i])} is not a finite positive number of ms")
    for col in columns:
        if col in ("latency", "gemm_dtype", "kv_cache_dtype", "op_name", "nccl_dtype",
                   "kernel_source", "moe_dtype", "distribution", "gemm_type"):
            continue
        vals = pd.to_numeric(df[col], errors="coerce")
        neg = vals.isna() | (vals < 0) | np.isinf(vals)
        if neg.any():
            i = int(neg.to_numpy().nonzero()[0][0])
            raise ConfigError(f"{path}: column {col}, line {i + 2}: value {_cell_text(df[col].iloc[i])} "
                              f"is not a finite non-negative number")
    df["latency_s"] = lat * 1e-3
    return df


def _cell_text(v) -> str:
    """A table cell as the file had it: empty for a missing one (pandas' NaN), a number as
    written (not numpy's ``np.float64(...)`` repr), text quoted."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "(empty, or NA / n/a / null)"
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        return f"{v.item() if hasattr(v, 'item') else v!r}"
    return repr(str(v))


def read_gemm_table(path: str | Path, nrows: int | None = None) -> pd.DataFrame:
    """GEMM rows: C[m, n] = A[m, k] . B[k, n] at ``gemm_dtype``."""
    return _read(Path(path), GEMM_COLUMNS, nrows)


def read_attention_table(path: str | Path, nrows: int | None = None) -> pd.DataFrame:
    """Context (``isl`` new tokens, ``step`` = 0) or generation (one new token,
    ``step`` cached) attention rows. A column a table dropped as constant is
    added with its value (:data:`ATTENTION_CONSTANTS`)."""
    kind = table_kind(path) or "context_attention"
    return _read(Path(path), ATTENTION_COLUMNS, nrows, ATTENTION_CONSTANTS[kind])


def read_nccl_table(path: str | Path, nrows: int | None = None) -> pd.DataFrame:
    """NCCL collective rows; adds ``message_bytes`` (see module docstring)."""
    path = Path(path)
    df = _read(path, NCCL_COLUMNS, nrows)
    unknown = sorted(set(df["nccl_dtype"]) - set(NCCL_DTYPE_BYTES))
    if unknown:
        raise ConfigError(f"{path}: column nccl_dtype: unknown value(s) {unknown}; "
                          f"valid: {', '.join(NCCL_DTYPE_BYTES)}")
    df["message_bytes"] = df["message_size"] * df["nccl_dtype"].map(NCCL_DTYPE_BYTES)
    return df


def read_moe_table(path: str | Path, nrows: int | None = None) -> pd.DataFrame:
    """Fused-MoE layer rows (one rank: ``num_tokens`` tokens routed over
    ``num_experts`` experts sharded ``moe_tp_size`` x ``moe_ep_size``); adds
    ``gated`` (False for the layers of :data:`NON_GATED_MOE_SHAPES`)."""
    df = _read(Path(path), MOE_COLUMNS, nrows)
    shape = zip(*(df[c].to_numpy() for c in ("hidden_size", "inter_size", "topk", "num_experts")))
    df["gated"] = [tuple(map(int, t)) not in NON_GATED_MOE_SHAPES for t in shape]
    return df


def read_mla_module_table(path: str | Path, nrows: int | None = None) -> pd.DataFrame:
    """Whole MLA module rows (``calibration.mla``): generation (``step`` cached, one
    new token) or context (``isl`` new); adds ``decode``, ``new``, ``cached``."""
    path = Path(path)
    gen = "_mla_generation_module" in path.name
    # TensorRT-LLM's module tables have no kernel column (one implementation): named by the engine
    df = _read(path, ("kernel_source", "kv_cache_dtype", "gemm_type", "num_heads", "batch_size",
                      "step" if gen else "isl", "latency"), nrows,
               constants={"kernel_source": path.name.split("-")[0] + "_module"})
    df["decode"] = gen
    df["new"] = 1 if gen else df["isl"]
    df["cached"] = df["step"] if gen else 0
    return df


def read_gdn_table(path: str | Path, nrows: int | None = None) -> pd.DataFrame:
    """Gated DeltaNet layer calls (``calibration.gdn.read_gdn_layers``: kernels summed)."""
    from calibration.gdn import read_gdn_layers  # noqa: PLC0415 (gdn imports this module)
    return read_gdn_layers(path)


READERS = {"moe": read_moe_table, "gdn": read_gdn_table, "mla_module": read_mla_module_table, "gemm": read_gemm_table, "context_attention": read_attention_table,
           "generation_attention": read_attention_table, "nccl": read_nccl_table}
