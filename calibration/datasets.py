"""Measured rows per kernel family, and held-out shape splits.

From the tables of one GPU (``calibration.tables`` format) this selects the
rows each ``fitted_v1`` family is fitted on:

- ``gemm.bf16``, ``gemm.fp8``, ``gemm.fp8_block``: GEMM rows by ``gemm_dtype``
  (``bfloat16``/``float16`` -> bf16). Where a table mixes kernels for one
  dtype (H100 ``fp8_block``: DeepGemm, Cutlass, FlashInfer) the family is the
  kernel with the most rows, and the others are extra families
  ``gemm.<dtype>@<kernel_source>`` (scored in reports, not in profiles).
- ``context_attention``, ``generation_attention``: the plain rows
  (``../shared/kernels/README.md``): full attention (``window_size`` == 0), KV
  cache bf16, and on H100 the ``vllm_flash_attn_fa3`` kernel (the few
  ``fa4`` rows are a different kernel).
- ``all_reduce``: NCCL ``all_reduce`` rows of every nccl table, deduplicated.

Held-out splits hold out whole shapes (a random row split on a dense grid only
measures interpolation): 30 % of the (n, k) pairs for GEMMs, of the (heads,
KV heads, head_dim) combinations for attention, of the message sizes for
all-reduce, drawn with an explicit seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from calibration.tables import MOE_DTYPES, READERS, find_tables
from sim.errors import ConfigError

GEMM_DTYPE_FAMILY = {"bfloat16": "bf16", "float16": "bf16", "bf16": "bf16", "fp16": "bf16",
                     "fp8": "fp8", "fp8_block": "fp8_block"}
#: family -> columns whose distinct combinations are the held-out unit
SHAPE_COLUMNS = {"gemm": ("n", "k"), "context_attention": ("num_heads", "num_key_value_heads",
                                                           "head_dim"),
                 "generation_attention": ("num_heads", "num_key_value_heads", "head_dim"),
                 "all_reduce": ("message_bytes",),
                 # a model's MoE layer shape, at every TP / EP sharding
                 "moe": ("hidden_size", "inter_size", "topk", "num_experts")}
#: fused-MoE kernel fitted as ``moe.<format>`` where a table has several for one format
#: (the one vLLM 0.24 serves on Hopper by default); the others are ``moe.<format>@<kernel>``
MOE_SERVED_KERNELS = ("vllm_fp8moe_triton_tritonexperts",
                      "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic",
                      "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts")
#: measured kernels that are not what servesim's format runs: ModelOpt FP8 checkpoints'
#: FlashInfer CUTLASS MoE (servesim ``fp8`` is vLLM's Fp8MoEMethod, Triton on Hopper,
#: not in the table), scored as ``moe.fp8@<kernel>`` only
MOE_NOT_SERVED = ("vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts",)
PLAIN_ATTENTION_KERNELS = ("vllm_flash_attn_fa3", "vllm_flash_attn", "torch_sdpa")


@dataclass
class FamilyRows:
    """Rows of one family: ``family`` (e.g. ``gemm.bf16``), the rows (with
    ``latency_s``) and where they came from."""
    family: str
    rows: pd.DataFrame
    sources: list[str]

    @property
    def kind(self) -> str:
        return self.family.split(".")[0]

    @property
    def base_family(self) -> str:
        """The family whose formulas apply (``gemm.fp8_block@X`` -> ``gemm.fp8_block``)."""
        return self.family.split("@")[0]


def _plain_attention(df: pd.DataFrame) -> pd.DataFrame:
    keep = (df["window_size"] == 0) & (df["kv_cache_dtype"].astype(str).isin(["bfloat16", "auto"]))
    if "kernel_source" in df.columns:
        keep &= df["kernel_source"].astype(str).isin(PLAIN_ATTENTION_KERNELS)
    return df[keep]


def family_rows(directory: str | Path, engine: str | None = None,
                kinds: tuple[str, ...] | None = None) -> dict[str, FamilyRows]:
    """Every family with rows in ``directory`` (raises if there is none); of a
    folder holding several engines' kernels, ``engine``'s (see
    :func:`calibration.tables.find_tables`); ``kinds``: only tables of these kinds
    (``calibration.tables.READERS`` keys; the others are not read)."""
    out: dict[str, FamilyRows] = {}

    def add(family: str, rows: pd.DataFrame, source: str) -> None:
        if len(rows) == 0:
            return
        if family in out:
            out[family].rows = pd.concat([out[family].rows, rows], ignore_index=True)
            out[family].sources.append(source)
        else:
            out[family] = FamilyRows(family, rows.reset_index(drop=True), [source])

    unmodelled: list[str] = []  # tables whose GEMM dtypes are none servesim models (named if nothing is left)
    for kind, path in find_tables(directory, engine):
        if kinds is not None and kind not in kinds:
            continue
        df = READERS[kind](path)
        if kind == "gemm":
            fam = df["gemm_dtype"].astype(str).map(GEMM_DTYPE_FAMILY)
            if len(df) and fam.isna().all():
                vals = sorted(df["gemm_dtype"].astype(str).unique())
                unmodelled.append(f"{path.name}: gemm_dtype {', '.join(map(repr, vals[:5]))} not modelled "
                                  f"(modelled: {', '.join(sorted(GEMM_DTYPE_FAMILY))})")
            for name in sorted(fam.dropna().unique()):
                sub = df[fam == name]
                src = sub["kernel_source"].astype(str) if "kernel_source" in sub else None
                if src is None or src.nunique() == 1:
                    add(f"gemm.{name}", sub, path.name)
                    continue
                counts = src.value_counts()
                add(f"gemm.{name}", sub[src == counts.index[0]], f"{path.name} ({counts.index[0]})")
                for other in counts.index[1:]:
                    add(f"gemm.{name}@{other}", sub[src == other], f"{path.name} ({other})")
        elif kind in ("context_attention", "generation_attention"):
            add(kind, _plain_attention(df), path.name)
        elif kind in ("mla_module", "gdn"):
            continue  # fitted by calibration.mla (needs the whole profile, not a Device)
        elif kind == "moe":  # balanced routing (the cost model's uniform routing)
            df = df[df["distribution"].astype(str) == "balanced"]
            fmt = df["moe_dtype"].astype(str).map(MOE_DTYPES)
            for name in sorted(fmt.dropna().unique()):
                sub = df[fmt == name]
                src = sub["kernel_source"].astype(str)
                kernels = list(src.value_counts().index)
                served = [k for k in kernels if k in MOE_SERVED_KERNELS] or [
                    k for k in kernels[:1] if k not in MOE_NOT_SERVED]
                for kern in kernels:
                    fam = f"moe.{name}" if served and kern == served[0] else f"moe.{name}@{kern}"
                    add(fam, sub[src == kern], f"{path.name} ({kern})")
        else:
            add("all_reduce", df[df["op_name"] == "all_reduce"], path.name)
    if "all_reduce" in out:  # several nccl files repeat the same sizes: keep the median
        r = out["all_reduce"].rows
        out["all_reduce"].rows = (r.groupby(["num_gpus", "message_bytes"], as_index=False)
                                  ["latency_s"].median())
    if not out:
        subs = sorted(p.name for p in Path(directory).iterdir() if p.is_dir()) if Path(directory).is_dir() else []
        hint = f"; the tables are per GPU: give one of its folders ({', '.join(subs)})" if subs else ""
        why = f"; {'; '.join(unmodelled)}" if unmodelled else ""
        raise ConfigError(f"{directory}: no kernel tables with modelled rows "
                          f"(*_gemm, *_context_attention, *_generation_attention, nccl_*){why}{hint}")
    return out


def table_grid(rows: dict[str, FamilyRows], families=None) -> dict[str, int]:
    """The largest shapes of the served families' rows (``families``: only
    these; a ``@kernel`` variant is not what the profile's family is fitted
    to): ``sim.hardware.efficiency.CalibratedGrid``'s fields. A field whose
    family has no rows is absent."""
    def rows_of(prefix: str) -> list[pd.DataFrame]:
        return [r.rows for f, r in rows.items() if "@" not in f and (f == prefix or f.startswith(prefix + "."))
                and (families is None or f in families)]

    def biggest(frames: list[pd.DataFrame], col) -> int | None:
        vals = [int(col(df).max()) for df in frames if len(df)]
        return max(vals) if vals else None

    ctx = lambda df: df["isl"] + df["step"]  # noqa: E731  (query + cached tokens)
    grid = {"gemm_max_tokens": biggest(rows_of("gemm"), lambda df: df["m"]),
            "context_attention_max_tokens": biggest(rows_of("context_attention"), ctx),
            "generation_attention_max_context": biggest(rows_of("generation_attention"), ctx),
            "generation_attention_max_batch": biggest(rows_of("generation_attention"), lambda df: df["batch_size"]),
            "moe_max_tokens": biggest(rows_of("moe"), lambda df: df["num_tokens"])}
    return {k: v for k, v in grid.items() if v is not None}


def holdout_mask(rows: pd.DataFrame, kind: str, frac: float = 0.3, seed: int = 0) -> np.ndarray:
    """True for the rows of a seeded ``frac`` of the distinct shapes (see
    :data:`SHAPE_COLUMNS`); at least one shape is held out and one kept."""
    cols = list(SHAPE_COLUMNS[kind])
    shapes = rows[cols].drop_duplicates().sort_values(cols).to_numpy()
    if len(shapes) < 2:
        return np.zeros(len(rows), dtype=bool)
    n_out = min(max(1, int(round(frac * len(shapes)))), len(shapes) - 1)
    picked = np.random.default_rng(seed).permutation(len(shapes))[:n_out]
    held = {tuple(s) for s in shapes[picked]}
    return np.array([tuple(t) in held for t in rows[cols].itertuples(index=False, name=None)],
                    dtype=bool)
