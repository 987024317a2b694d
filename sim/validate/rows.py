"""``servesim validate``: predict measured serving benchmarks row by row.

Input: a CSV of closed-loop benchmark points in the layout of
``../shared/silicon/dense_agg_dev.csv`` (README there): ``backend``,
``model_path`` (Hugging Face id), ``system`` (hardware profile name),
``precision`` / ``gemm_quant_mode``, ``isl``, ``osl``, ``concurrency``,
``tp_size``, and the measured ``silicon_ttft_ms`` / ``silicon_tpot_ms``.

Each row is simulated as it was run (:func:`row_overrides`):

- ``engine`` = ``backend`` (its preset: batching mode, limits, KV rule,
  overheads); ``model``, ``hardware``, ``tensor_parallel_size`` from the row;
  ``quantization`` from ``gemm_quant_mode`` (else ``precision``): empty → the
  checkpoint's bf16, ``fp8`` → per-tensor FP8, ``fp8_block`` → block-scaled FP8.
- Harness (``sim/validate/harness.py``): how the row was measured, an input
  (never fitted): ``--harness`` for every row, else the row's ``harness``
  cell, else its ``campaign`` through the campaign map (``2026-*`` and
  ``db-dump/*``, ``qwen3.5-397b-gap-analysis``: ``inferencemax``; other
  ``*-gap-analysis``: ``aic``), else ``aic``.
  A harness that drains its warm-up before the measured run (``inferencemax``:
  ``benchmark_serving.py`` awaits the warm-up tasks) is simulated without one:
  the measured run starts cold, its initial burst of C requests measured.
  Its per-model recipe settings (``Harness.recipe_args``) are applied after
  ``engine_args``.
  The engine release (``backend_version``) is passed as ``engine_version``
  (``sim/presets/versions.py``); where that cell holds the NVIDIA Dynamo
  release of a Dynamo runtime image (``disagg_dev.csv``'s TensorRT-LLM rows:
  ``tensorrtllm-runtime:0.8.1.post2`` with ``backend_version`` 0.8.1.post2),
  the engine release that Dynamo release ships (:func:`row_engine_version`; the
  Dynamo support matrix, docs.nvidia.com/dynamo/getting-started/support-matrix). ``aic`` reproduces aiconfigurator's own
  serving evaluation, which produced the dense table (``silicon_data_source``: the ``aic-auto-gap-analysis`` data;
  ``batch_size`` = ``concurrency`` in every row):

  * the deployment is the one aiconfigurator's config generator writes for an
    aggregated worker of batch size C (ai-dynamo/aiconfigurator,
    ``src/aiconfigurator/generator/rule_plugin/{vllm,trtllm,sglang}.rule``
    and ``rule_plugin/benchmark/*.rule``): vLLM ``max_num_batched_tokens`` =
    C + isl + 1500, TensorRT-LLM ``max_num_tokens`` = C + isl + 1500 rounded
    up to 32 (``tokens_per_block``), SGLang ``max_prefill_tokens`` = isl +
    1500; ``max_num_seqs`` (``max_batch_size``) = C; SGLang 0.5.6+ with
    ``--enable-mixed-chunk`` (:func:`aic_sglang_mixed_chunk`); on a row read as
    attention DP (:func:`implied_attention_dp`) C is one rank's batch. With these token
    budgets one step prefills about one prompt, so a burst of C requests is
    prefilled over about C steps instead of one (:func:`aic_deploy_overrides`);
  * the client sends ``requests_per_client``·C requests at fixed concurrency
    C from a cold start, and the mean covers every request, the initial burst
    of C simultaneous requests included (``bench_serving`` runner of
    ``src/aiconfigurator/eval/benchmarks/bench_serving_runner.py``:
    ``--num-prompts`` = 10·C, ``--max-concurrency`` C, ``--warmup-requests``
    0, request rate inf; TTFT is timed from the send, after the concurrency
    slot is granted). No warm-up: ``warmup_per_client`` = 0 and
    ``client_phase_spread`` unused.

  ``steady`` is the earlier protocol: engine default limits, 2·C warm-up
  requests excluded (the genai-perf runner's ``--warmup-request-count`` 2·C),
  then ``requests_per_client``·C measured, client phases spread by
  ``client_phase_spread``.
- Every request is ``isl`` tokens in and exactly ``osl`` out (``max_tokens`` =
  osl, EOS ignored).
- Clients are not in lock-step by construction: each waits an exponential
  think time of mean :data:`CLIENT_THINK_TIME_S` (seeded) between seeing its
  previous request's last token and its next send (the benchmark client's own
  processing and the localhost round trip; not part of TTFT), the first send
  included. The engines' batching can still bunch them into cohorts (see
  ``reports/validation/README.md``).
- The clients' phases: each client's first (warm-up) request ends after a
  random part of its ``osl`` output tokens, spread over the fraction
  ``client_phase_spread`` of one request (per engine, fitted;
  ``sim/workload/client_phase.py``), so that the measured requests see clients spread
  as the measured systems' are rather than the synchronised start.
- ``max_model_len`` = isl + osl: a benchmark whose every request has that many
  tokens behaves the same under any longer context limit; it only spares the
  start-up check that one maximum-length sequence fits (the KV-bound rows:
  Qwen3-32B in bf16 on one H100).
- Prefix caching off: the benchmark's random prompts never share a block, so
  the cache cannot hit; turning it off only saves hashing work.
- TensorRT-LLM rows in FP8 use an FP8 KV cache: NVIDIA's ModelOpt FP8
  checkpoints that TensorRT-LLM serves declare ``kv_cache_quant_algo: FP8``
  (e.g. ``../shared/models/nvidia--Llama-3.1-70B-Instruct-FP8_hf_quant_config.json``)
  and TensorRT-LLM follows the checkpoint. vLLM and SGLang keep the model
  dtype for the KV cache unless told otherwise (``kv_cache_dtype`` auto).
- SGLang rows run at SGLang's real page size, 1 token (its preset's
  ``block_size``): with prefix caching off the KV cache counts blocks rather
  than keeping block ids (``sim/kv_cache/block_count.py``), so a page of one
  token costs what a page of 16 does.

Rows that cannot be simulated (unknown model, backend or precision; weights
that do not fit) are kept with ``status`` ``error`` / ``infeasible`` and the
reason. Rows with a shape or measurement cell that is not a number, and
lines with more fields than the header, are skipped, counted
(``num_skipped_rows``) and listed (``skipped_rows``) with their CSV line,
column and value. Rows run in parallel processes.
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from sim.workload.lengths import MAX_LENGTH_TOKENS
from sim.workload.traces import read_csv_lines
from sim.workload.client_phase import CLIENT_PHASE_SPREAD, PHASE_KEY, check_phase_spread, disperse_client_phases
from sim.errors import ConfigError, InfeasibleError, ServesimError, require_file
from sim.presets import MODELLED, PRESETS, version_warning
from sim.presets.versions import (dynamo_engine_bounds, dynamo_engine_version, dynamo_image_release,
                                  release_values, simulated_release)
from sim.results.intervals import interval
from sim.results.warnings import transferred_profile_warnings
from sim.validate.disagg_rows import NotSimulable, disagg_pools, disagg_row_overrides, is_disagg
from sim.validate.harness import HARNESSES, Harness, harness_for_row

#: Mean client think time (s): benchmark client processing + localhost round trip.
CLIENT_THINK_TIME_S = 0.002
#: Validation protocols: the named harnesses (``sim/validate/harness.py``; default ``aic``).
PROTOCOLS = tuple(HARNESSES)
#: aiconfigurator generator: extra tokens of an agg worker's token budget over isl (+ C).
AIC_BUDGET_EXTRA_TOKENS = 1500
#: aiconfigurator generator: TensorRT-LLM ``tokens_per_block`` (max_num_tokens is a multiple).
AIC_TRTLLM_TOKENS_PER_BLOCK = 32
#: aiconfigurator generator: the first SGLang release whose deployment carries ``--enable-mixed-chunk``
#: (:func:`aic_sglang_mixed_chunk`)
AIC_SGLANG_MIXED_CHUNK_FROM = "0.5.6"
#: the schedule simulated for an ``aic`` SGLang deployment with ``--enable-mixed-chunk``. SGLang's own is
#: ``prefill_first_mixed`` (PrefillAdder with the running decodes taken off ``max_prefill_tokens``:
#: one admission a step at isl + 1500). It is not used yet: on the 0.5.6.post2 rows (Llama-3.1-8B,
#: H200, up to 512 clients) it admits too few prompts a step for the measured throughput at 176-448
#: clients and osl 100 (TTFT 2-3x over), and with the fitted per-token frontend FIFO it backs up at 512
#: clients (leave-one-model-out TTFT 178.8 % against 77.2 % with ``chunked``;
#: reports/validation/sglang_mixed_chunk.md). What the model misses there is on the streaming side
#: (measured TPOT ~30 ms at every TP at 512 clients), not the schedule; until that is modelled the
#: earlier approximation stays: every running decode plus prefill chunks within the chunk budget.
AIC_SGLANG_MIXED_SCHEDULER = "chunked"
REQUIRED_COLUMNS = ("backend", "model_path", "system", "isl", "osl", "concurrency", "tp_size",
                    "silicon_ttft_ms", "silicon_tpot_ms")
NUMERIC_COLUMNS = ("isl", "osl", "concurrency", "tp_size", "silicon_ttft_ms", "silicon_tpot_ms")
GROUP_KEYS = ("model_path", "system", "backend", "tp_size")
ENGINES = tuple(PRESETS)  # the backends a measured row may name: the engine presets
_QUANT = {"": None, "bf16": None, "bfloat16": None, "fp16": None, "fp8": "fp8", "fp8_block": "fp8_block",
          "nvfp4": "nvfp4"}


@dataclass
class ValidateOptions:
    """How rows are simulated. ``harness``: every row's benchmark harness (a
    name of :data:`~sim.validate.harness.HARNESSES`, a harness YAML path or a
    :class:`~sim.validate.harness.Harness`); None = per row
    (:func:`~sim.validate.harness.harness_for_row`: its ``harness`` cell, its
    ``campaign`` through ``campaign_harness`` (None = the built-in map), else
    ``aic``). ``protocol``: the earlier name of ``harness`` (a harness name).
    ``requests_per_client``, ``warmup_per_client``, ``think_time_s``: None =
    the harness's. ``engine_overrides`` maps an engine name to config keys set
    for its rows (the fitting benchmark uses it), except a key that a row's
    release has a measured value of (``RELEASE_VALUES``,
    ``sim/presets/versions.py``): a fit is of the releases before it."""
    protocol: str | None = None
    requests_per_client: int | None = None
    #: warm-up requests per client; None = the harness's (aic 0, steady 2)
    warmup_per_client: int | None = None
    think_time_s: float | None = None
    harness: Any = None
    campaign_harness: dict[str, str] | None = None
    seed: int = 0
    workers: int | None = None
    engine_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    exact_steps: bool = False
    #: the rows to simulate (:func:`select_rows`): column -> the cell values kept (any of
    #: them; every column must match), then the first ``limit`` of those; None = all
    where: dict[str, list[str]] | None = None
    limit: int | None = None


def parse_where(items: list[str] | None) -> dict[str, list[str]] | None:
    """``--where backend=sglang --where system=b200_sxm,h200_sxm`` → {column:
    values}; ConfigError for an item without '=' or a column given twice."""
    out: dict[str, list[str]] = {}
    for item in items or []:
        col, sep, vals = item.partition("=")
        col = col.strip()
        values = [v.strip() for v in vals.split(",") if v.strip()]
        if not sep or not col or not values:
            raise ConfigError(f"--where {item!r}: expected COLUMN=VALUE[,VALUE...] (e.g. --where backend=sglang)")
        if col in out:
            raise ConfigError(f"--where {col}: given twice; list its values once, comma-separated")
        out[col] = values
    return out or None


def select_rows(df, where: dict[str, list[str]] | None, limit: int | None, source: str):
    """The rows of ``df`` whose cell in each ``where`` column is one of its values
    (compared as text, stripped; a number cell also as the number, so 1024
    matches 1024.0), then the first ``limit``. ConfigError naming an unknown
    column, or when no row is left."""
    import pandas as pd

    keep = pd.Series(True, index=df.index)
    for col, values in (where or {}).items():
        if col not in df.columns:
            raise ConfigError(f"--where {col}: {source} has no column {col!r}; columns: {', '.join(df.columns)}")
        nums = set()
        for v in values:
            try:
                nums.add(float(v))
            except ValueError:
                pass
        cells = df[col]
        text = cells.map(lambda c: "" if pd.isna(c) else str(c).strip())
        hit = text.isin(values)
        if nums:
            hit |= pd.to_numeric(cells, errors="coerce").isin(nums)
        keep &= hit
    out = df[keep]
    if limit is not None:
        out = out.head(limit)
    if out.empty:
        raise ConfigError(f"{source}: no row matches --where "
                          + " ".join(f"{c}={','.join(v)}" for c, v in (where or {}).items()))
    return out


def _cell(row: dict, key: str) -> str:
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v).strip()


def _float_cell(row: dict, key: str) -> float:
    """A cell as a float; NaN where empty or not a number (bad cells are refused,
    named, by :func:`row_overrides`)."""
    try:
        return float(_cell(row, key) or "nan")
    except ValueError:
        return math.nan


def row_engine_version(row: dict) -> str:
    """The engine release a row ran: its ``backend_version``, except where that
    cell holds the NVIDIA Dynamo release of a Dynamo runtime container (the
    ``image`` is ``ai-dynamo/<engine>-runtime:<tag>`` and ``backend_version`` is
    ``<tag>``, as in ``disagg_dev.csv``'s TensorRT-LLM rows: ``0.8.1.post2``):
    then the engine release that Dynamo release ships (``DYNAMO_BACKENDS`` in
    ``sim/presets/versions.py``, from the Dynamo support matrix). A Dynamo release
    before the support matrix's first, 0.6.0 (``0.5.1-rc0.pre3``), ships an engine
    release known only within bounds (``DYNAMO_BOUNDS``): the newest of them, with a
    warning (:func:`row_version_warnings`); read as the engine's own, Dynamo 0.5.1
    would be TensorRT-LLM 0.5's behaviour, overlap scheduler off. '' if not
    recorded, or a Dynamo release neither table covers (simulated as the engine's
    newest modelled release, with a warning)."""
    return _row_release(row)[0]


def _row_release(row: dict) -> tuple[str, str | None]:
    """(:func:`row_engine_version`, the warning its reading of a Dynamo release owes,
    or None)."""
    v = _cell(row, "backend_version")
    engine, image = _cell(row, "backend").lower(), _cell(row, "image")
    mapped = dynamo_engine_version(engine, image)
    if mapped is not None and (not v or v == mapped[0]):
        return mapped[1], None
    if not v or v != dynamo_image_release(engine, image):
        return v, None
    bounds = dynamo_engine_bounds(engine, image)
    if bounds:
        return bounds[2], (f"backend_version {v} is the NVIDIA Dynamo release of the image {image}, before the "
                           f"Dynamo support matrix (from 0.6.0): it ships {engine} {bounds[1]} to {bounds[2]} "
                           f"(DYNAMO_BOUNDS in sim/presets/versions.py), simulated as {bounds[2]}; no modelled "
                           f"behaviour change of {engine} falls between them")
    return "", (f"backend_version {v} is the NVIDIA Dynamo release of the image {image}, whose {engine} release "
                f"is not in the Dynamo support matrix (DYNAMO_BACKENDS, from 0.6.0): {engine} is simulated as its "
                f"newest modelled release ({simulated_release(engine, None)})")


#: 4-bit weight formats: a row's 4-bit label on a checkpoint published in another 4-bit
#: format names that checkpoint (row_quantization)
FOUR_BIT = ("nvfp4", "mxfp4", "int4_wo")


def row_quantization(row: dict) -> str | None:
    """servesim ``quantization`` of a row (``gemm_quant_mode``, else ``precision``).

    A 4-bit label on a checkpoint that is itself published in another 4-bit
    format means that checkpoint, served as it is: ``moe_agg_dev.csv`` labels
    gpt-oss-120b's experts ``nvfp4`` while the checkpoint is MXFP4
    (``../shared/silicon/README``; ``openai/gpt-oss-120b`` ``quantization_config``
    ``quant_method: mxfp4``), and no engine re-quantizes MXFP4 weights to NVFP4
    (InferenceMAX's gpt-oss recipes serve ``openai/gpt-oss-120b`` as published).
    Such a row runs with the checkpoint's own format (None).

    Likewise an ``fp8`` label (per-tensor FP8 in the table's README) on a checkpoint
    published as block-scaled FP8 (``quantization_config.weight_block_size``
    [128, 128]: DeepSeek-R1/V3, MiniMax-M2.5, Qwen3-235B-A22B-FP8), or on a row whose
    ``moe_quant_mode`` is ``fp8_block`` (the Qwen3.5 FP8 rows), runs as ``fp8_block``:
    the engines load the checkpoint's block scales as published and run block-scaled
    kernels (vLLM ``quantization/fp8.py``: ``block_quant = weight_block_size is not
    None`` selects ``W8A8BlockFp8LinearOp`` and the block-FP8 fused MoE,
    ``quantization/utils/fp8_utils.py``); none re-quantizes them per tensor. The table
    itself labels one checkpoint both ways: ``Qwen/Qwen3-235B-A22B-FP8`` is ``fp8`` in
    its vLLM rows and ``fp8_block`` in its SGLang / TensorRT-LLM rows."""
    q = _cell(row, "gemm_quant_mode") or _cell(row, "precision")
    if q.lower() not in _QUANT:
        raise ConfigError(f"gemm_quant_mode/precision: unknown value {q!r}; valid: "
                          f"{', '.join(k or '(empty)' for k in _QUANT)}")
    quant = _QUANT[q.lower()]
    if quant == "fp8":
        if _cell(row, "moe_quant_mode").lower() == "fp8_block":
            return "fp8_block"
        try:
            from sim.model_spec import get_model

            own = get_model(_cell(row, "model_path")).quantization
        except ConfigError:
            return quant  # an unknown model is named when the deployment is built
        return "fp8_block" if own == "fp8_block" else quant
    if quant in FOUR_BIT:
        from sim.model_spec import get_model

        try:
            own = get_model(_cell(row, "model_path")).quantization
        except ConfigError:
            return quant  # an unknown model is named when the deployment is built
        if own in FOUR_BIT and own != quant:
            return None
    return quant


def check_protocol(protocol: str) -> str:
    if protocol not in HARNESSES:
        raise ConfigError(f"protocol: unknown {protocol!r}; valid: {', '.join(HARNESSES)}")
    return protocol


def row_harness(row: dict, opts: ValidateOptions) -> Harness:
    """The benchmark harness a row is simulated under (:class:`ValidateOptions`)."""
    default = opts.harness
    if default is None and opts.protocol is not None:
        default = check_protocol(opts.protocol)
    return harness_for_row(row, default, opts.campaign_harness)


def warmup_per_client(opts: ValidateOptions, harness: Harness | None = None) -> int:
    """Warm-up requests per client the simulation runs and excludes: the
    option if set (the first requests of the stream), else the harness's
    (``harness``, else the options' own harness or the default ``aic``): none
    when it drains its warm-up before the measured run
    (:meth:`~sim.validate.harness.Harness.simulated_warmup_per_client`)."""
    if opts.warmup_per_client is not None:
        return opts.warmup_per_client
    return (harness or row_harness({}, opts)).simulated_warmup_per_client()


def aic_sglang_mixed_chunk(version: str | None) -> bool:
    """Whether aiconfigurator's generated SGLang agg deployment of release
    ``version`` runs ``--enable-mixed-chunk``: from :data:`AIC_SGLANG_MIXED_CHUNK_FROM`
    on (and when the release is not recorded), not before.

    The generator's SGLang agg rule gained ``enable_mixed_chunk = true`` on
    2026-01-19 (ai-dynamo/aiconfigurator PR #257, commit fa895ff, which wrote
    the flag as ``--enable-mix-chunk``, not an SGLang argument; PR #258, commit
    07a3779, the same day, made it ``--enable-mixed-chunk`` in
    ``rule_plugin/sglang.rule``, ``backend_config_mapping.yaml`` and the
    ``backend_templates/sglang/cli_args.*.j2`` templates). The templates of
    SGLang 0.5.1.post1, 0.5.3.post2 and 0.5.4.post3 date from 2025-12-04
    (PR #144) and emitted no mixed-chunk flag before that; the 0.5.6.post2
    template (Dynamo 0.8.0, PR #265, 2026-01-23) was written with it. So a
    0.5.6+ deployment always mixed; an older release's rows are read as
    measured on the deployment of their release's time (SGLang's default
    schedule: prefill batches stall the decodes). This is an inference about
    when those rows were measured (the table records no date); it is checked
    against the 0.5.1.post1 rows in reports/validation/sglang_mixed_chunk.md."""
    from sim.presets.versions import parse_version

    pv = parse_version(version) if version else None
    return pv is None or pv >= parse_version(AIC_SGLANG_MIXED_CHUNK_FROM)  # type: ignore[operator]


def aic_deploy_overrides(engine: str, isl: int, concurrency: int, version: str | None = None) -> dict[str, Any]:
    """Engine limits of aiconfigurator's generated agg deployment at batch
    size ``concurrency`` (module docstring): token budget and max batch; for
    SGLang of release ``version`` also its schedule (:func:`aic_sglang_mixed_chunk`)."""
    budget = concurrency + isl + AIC_BUDGET_EXTRA_TOKENS
    if engine == "sglang":
        # ``max_prefill_tokens`` = isl + 1500 (rule_plugin/sglang.rule); the generator sets no
        # ``chunked-prefill-size``, so SGLang's default chunk applies. With
        # ``--enable-mixed-chunk`` a prefill batch also decodes the running requests
        # (:data:`AIC_SGLANG_MIXED_SCHEDULER`); without it, SGLang's default schedule
        # (``prefill_first``: prefill batches stall the decodes).
        sched = AIC_SGLANG_MIXED_SCHEDULER if aic_sglang_mixed_chunk(version) else "prefill_first"
        return {"max_prefill_tokens": isl + AIC_BUDGET_EXTRA_TOKENS, "max_num_seqs": concurrency,
                "scheduler": sched}
    if engine == "trtllm":
        b = AIC_TRTLLM_TOKENS_PER_BLOCK
        return {"max_num_batched_tokens": -(-budget // b) * b, "max_num_seqs": concurrency}
    return {"max_num_batched_tokens": budget, "max_num_seqs": concurrency}


#: the longest lengths a row may ask for: the workload's own bound on the keys isl and osl become
#: (``workload.input_len`` / ``output_len``: sim/workload/lengths.py)
ROW_SHAPE_MAX = {"isl": MAX_LENGTH_TOKENS, "osl": MAX_LENGTH_TOKENS}


def row_overrides(row: dict, opts: ValidateOptions) -> dict[str, Any]:
    """Config keys (dotted) that simulate one CSV row; ConfigError for bad cells.
    Its parallelism cells are read in the README's convention (:func:`recorded_parallelism`)."""
    row = recorded_parallelism(row)
    engine = _cell(row, "backend").lower()
    if engine not in ENGINES:
        raise ConfigError(f"backend: unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    for col, what in (("model_path", "a Hugging Face id or model preset"), ("system", "a hardware profile name")):
        if not _cell(row, col):  # (an empty path would name the working directory)
            raise ConfigError(f"{col}: empty; give {what}")
    shape = {}
    for col in ("isl", "osl", "concurrency", "tp_size"):
        try:
            x = float(row[col])
        except (TypeError, ValueError):
            raise ConfigError(f"{col}: must be a number, got {row[col]!r}") from None
        if not (math.isfinite(x) and x.is_integer() and x >= 1):
            raise ConfigError(f"{col}: must be a whole number >= 1, got {x:g}")
        if x > ROW_SHAPE_MAX.get(col, math.inf):  # (named by its column, not the config key it becomes)
            raise ConfigError(f"{col}: {x:,.0f} is beyond what servesim simulates ({ROW_SHAPE_MAX[col]:,})")
        shape[col] = int(x)
    isl, osl, conc, tp = shape["isl"], shape["osl"], shape["concurrency"], shape["tp_size"]
    if osl < 2:
        raise ConfigError(f"osl: {osl} output token has no TPOT to score (TPOT needs osl >= 2)")
    for col in ("silicon_ttft_ms", "silicon_tpot_ms"):  # nothing to score the prediction against
        try:
            x = float(row[col])
        except (TypeError, ValueError):
            x = math.nan
        if not (math.isfinite(x) and x > 0):
            raise ConfigError(f"{col}: the measurement must be a positive number of ms, got {row[col]!r}")
    h = row_harness(row, opts)
    n_req = opts.requests_per_client * conc if opts.requests_per_client is not None else h.num_requests(conc)
    ov: dict[str, Any] = {
        "engine": engine, "model": _cell(row, "model_path"), "hardware": _cell(row, "system"),
        "tensor_parallel_size": tp, "quantization": row_quantization(row),
        "max_model_len": h.max_length(isl) + h.max_length(osl), "enable_prefix_caching": False,
        "client_think_time_s": h.think_time_s if opts.think_time_s is None else opts.think_time_s,
        "seed": opts.seed, "exact_steps": opts.exact_steps,
        "workload.max_concurrency": conc,
        "workload.num_requests": n_req,
        "workload.num_warmup_requests": warmup_per_client(opts, h) * conc,
        "workload.input_len": h.length_spec(isl),
        "workload.output_len": h.length_spec(osl),
        "workload.arrival": "inf",
    }
    layout = _row_layout(row, tp)
    if layout is not None:  # an MoE row's attention DP and expert layout, as deployed
        ov.update(layout)
    _check_one_domain(row, ov["tensor_parallel_size"])
    if row_engine_version(row):
        # the engine release selects its documented behaviour changes (sim/presets/versions.py);
        # a Dynamo release read as the engine release it ships (row_engine_version)
        ov["engine_version"] = row_engine_version(row)
    if h.deployment == "aic_generator":
        # the generator's max_batch_size, per rank: the concurrency, except on a row whose clients are
        # its attention ranks' batches (implied_attention_dp: batch_size x DP = concurrency)
        per_rank, dp = conc, ov.get("data_parallel_size", 1)
        bs = _float_cell(row, "batch_size")
        if dp > 1 and math.isfinite(bs) and bs >= 1 and bs * dp == conc:
            per_rank = int(bs)
        ov.update(aic_deploy_overrides(engine, isl, per_rank, row_engine_version(row) or None))
    if h.max_num_seqs_from:
        try:
            b = float(row.get(h.max_num_seqs_from))
        except (TypeError, ValueError):
            b = math.nan
        if math.isfinite(b) and b >= 1:
            ov["max_num_seqs"] = int(b)
    ov.update(h.engine_args.get(engine, {}))
    ov.update(h.recipe_overrides(row, engine))
    if engine == "trtllm" and ov["quantization"] in ("fp8", "fp8_block"):
        ov["kv_cache_dtype"] = "fp8"
    # a fitted key that the row's release has a measured value of (RELEASE_VALUES) keeps that value:
    # the fit is of older releases
    measured = release_values(engine, ov.get("engine_version"))
    ov.update({k: v for k, v in opts.engine_overrides.get(engine, {}).items() if k != PHASE_KEY and k not in measured})
    return ov


def _check_one_domain(row: dict, tp: int) -> None:
    """A row whose attention TP spans more GPUs than one NVLink domain joins
    (e.g. TP 16 over two 8-GPU B200 nodes) is simulated over the profile's
    per-GPU NICs; without them, or not a whole number of domains, it is not
    simulable (:class:`NotSimulable` with the reason)."""
    from sim.hardware.profile import get_hardware

    try:
        hw = get_hardware(_cell(row, "system"))
    except ConfigError:
        return  # named when the deployment is built
    try:
        hw.tensor_parallel_nodes(tp)  # TP over several nodes is modelled where the profile has NICs
    except ConfigError as e:
        raise NotSimulable(str(e)) from None


#: campaigns (globs) whose parallelism cells count the expert GPUs twice
#: (:func:`recorded_parallelism`)
CAMPAIGNS_TP_TIMES_EP = ("2026-04-06", "db-dump/*")


def recorded_parallelism(row: dict) -> dict:
    """The row with its parallelism cells in the table README's convention.

    In the ``2026-04-06`` and ``db-dump/*`` campaigns (:data:`CAMPAIGNS_TP_TIMES_EP`)
    a deployment of TP X with expert parallelism Y over the same X GPUs
    (``--tp X --ep Y``: attention TP X, experts EP Y x moe-TP X/Y) is recorded
    as ``moe_tp_size`` X, ``moe_ep_size`` Y and ``tp_size`` X·Y (or, with
    attention DP, ``tp_size`` 1 and ``attention_dp_size`` X·Y). The evidence in
    ``moe_agg_dev.csv`` itself: the ``2026-04-06`` ids name ``tpX_epY`` on rows
    with ``tp_size`` X·Y (e.g. ``..._1024x1024_c4_tp8_ep8_940``: 64); the
    ``db-dump`` rows ``dsr1_b200_sglang_fp4_agg_1024x1024_c64_cfg201`` (64 / 8 / 8)
    and ``qwen3_5_b200_sglang_fp8_agg_8192x1024_c64_cfg615`` (16 / 4 / 4) carry the
    measured values of the ``2026-03-25`` rows ``..._tp8_0_ep8_0_271`` (8 / 1 / 8)
    and ``..._tp4_0_ep4_0_337`` (4 / 1 / 4); and these are single-node recipes
    (InferenceMAX ``benchmarks/single_node/*.sh``): 64 GPUs cannot be one of them.
    Such a row is read as ``tp_size`` X (with attention DP: X ranks), ``moe_tp_size``
    X/Y, ``moe_ep_size`` Y; with attention DP its ``batch_size`` (recorded, in every
    DP row of the table, as concurrency / ``attention_dp_size``) is scaled to the X
    ranks: times Y. Other rows are returned as they are."""
    import fnmatch

    campaign = _cell(row, "campaign")
    if not any(fnmatch.fnmatchcase(campaign, g) for g in CAMPAIGNS_TP_TIMES_EP):
        return implied_attention_dp(row)
    try:
        tp, mtp, mep = (float(_cell(row, c) or "nan") for c in ("tp_size", "moe_tp_size", "moe_ep_size"))
        dp = float(_cell(row, "attention_dp_size") or "1")
    except ValueError:
        return row  # bad cells are refused, named, by row_overrides / _row_layout
    if not (mep > 1 and mtp >= mep and mtp % mep == 0):
        return row
    if dp == 1 and tp == mtp * mep:
        return {**row, "tp_size": mtp, "moe_tp_size": mtp // mep, "moe_ep_size": mep}
    if tp == 1 and dp == mtp * mep:
        out = {**row, "tp_size": mtp, "attention_dp_size": mtp, "moe_tp_size": mtp // mep, "moe_ep_size": mep}
        try:  # every DP row of the table records batch_size = concurrency / attention_dp_size
            bs = float(_cell(row, "batch_size") or "nan")
        except ValueError:
            bs = math.nan
        if math.isfinite(bs):
            out["batch_size"] = bs * mep
        return out
    return row


#: engines whose attention DP counts every GPU of the worker in ``tp_size`` (TensorRT-LLM
#: ``enable_attention_dp``: one attention rank a GPU; SGLang ``--tp`` with ``--enable-dp-attention``)
DP_IN_TP_ENGINES = ("trtllm", "sglang")


def implied_attention_dp(row: dict) -> dict:
    """An MoE row with no ``attention_dp_size`` whose clients are ``tp_size``
    times its ``batch_size`` (``concurrency`` = tp x batch, tp > 1; TensorRT-LLM or
    SGLang), read as attention DP over its ``tp_size`` GPUs: the table records
    ``batch_size`` = concurrency / ``attention_dp_size`` in every DP row
    (:func:`recorded_parallelism`), and a worker with a batch of ``batch_size``
    serves tp x that many clients at once only as tp attention ranks. The rows:
    the ``aic-gap-analysis`` campaign's TensorRT-LLM DeepSeek NVFP4 and gpt-oss
    rows (e.g. ``nvidia_deepseek_v3_1_nvfp4_..._gb200_trtllm_agg_4000x1000_c320_tp8``:
    batch 40 at 320 clients, 350 ms measured TTFT, no queue for slots);
    aiconfigurator's generator turns ``enable_attention_dp`` on for an MoE
    worker with ``data_parallel_size`` > 1 (``generator/rule_plugin/trtllm.rule``).
    Other rows are returned as they are."""
    if _cell(row, "attention_dp_size") or _cell(row, "backend").lower() not in DP_IN_TP_ENGINES:
        return row
    if not (_cell(row, "moe_ep_size") or _cell(row, "moe_tp_size")):
        return row  # a dense row: no attention DP to read
    tp, bs, conc = (_float_cell(row, c) for c in ("tp_size", "batch_size", "concurrency"))
    if not (math.isfinite(tp) and math.isfinite(bs) and tp > 1 and bs >= 1 and conc == tp * bs):
        return row
    return {**row, "attention_dp_size": tp}


def _row_layout(row: dict, tp: int) -> dict[str, Any] | None:
    """Config keys of a row's ``attention_dp_size`` / ``moe_tp_size`` /
    ``moe_ep_size`` columns (the MoE table's; absent or empty in the dense one):
    None when the row has none of them, else the attention TP, DP and expert
    layout (:func:`sim.cost_model.parallel.layout_keys_from_table` reads the
    table's conventions); ConfigError for cells that are no whole numbers."""
    from sim.cost_model.parallel import layout_keys_from_table

    cells = {}
    for col in ("attention_dp_size", "moe_tp_size", "moe_ep_size"):
        raw = _cell(row, col)
        if not raw:
            continue
        try:
            x = float(raw)
        except ValueError:
            raise ConfigError(f"{col}: must be a number, got {raw!r}") from None
        if not (math.isfinite(x) and x.is_integer() and x >= 1):
            raise ConfigError(f"{col}: must be a whole number >= 1, got {raw!r}")
        cells[col] = int(x)
    if not cells:
        return None
    keys = layout_keys_from_table(tp, cells.get("attention_dp_size"), cells.get("moe_tp_size"),
                                  cells.get("moe_ep_size"))
    if keys["data_parallel_size"] == 1 and keys["moe_ep_size"] == 1 and keys["moe_tp_size"] == tp:
        return None  # plain tensor parallelism: the keys as before
    return keys


def row_phase_spread(row: dict, opts: ValidateOptions) -> float:
    """``client_phase_spread`` of a row's engine (``sim/workload/client_phase.py``): its
    engine override if given, else the fitted value; ConfigError if not in [0, 1].
    0 unless the row's harness is the legacy ``steady`` (the others start cold
    or warm up, and are not fitted)."""
    if not row_harness(row, opts).fitted_phase_spread:
        return 0.0
    engine = _cell(row, "backend").lower()
    value = opts.engine_overrides.get(engine, {}).get(PHASE_KEY, CLIENT_PHASE_SPREAD.get(engine, 0.0))
    return check_phase_spread(value)


#: between two warnings of one row in its ``warning`` cell
WARNING_SEP = " | "


def row_version_warnings(row: dict) -> list[str]:
    """The engine-version warning of a row (``sim/presets/versions.py``): how a
    Dynamo release was read (:func:`row_engine_version`), that the row records no
    ``backend_version`` (it is then simulated with the preset's behaviour, its
    newest modelled release), or a release outside the modelled ones."""
    engine = _cell(row, "backend").lower()
    version, dynamo_note = _row_release(row)
    if dynamo_note:
        return [dynamo_note]
    if not version and engine in MODELLED:
        return [f"no backend_version recorded: {engine} is simulated as its newest modelled release "
                f"({simulated_release(engine, None)})"]
    w = version_warning(engine, version)
    return [w] if w else []


def simulate_row(row: dict, opts: ValidateOptions) -> dict[str, Any]:
    """Predicted mean TTFT and TPOT (ms) of one row, or a status and reason."""
    from sim.config import build_config
    from sim.engine.deployment import build_deployment
    from sim.results.metrics import STATUS_FINISHED, request_latencies
    from sim.runner import make_simulation
    from sim.workload import generate_requests

    t0 = time.perf_counter()
    warnings = row_version_warnings(row)
    out: dict[str, Any] = {"pred_ttft_ms": math.nan, "pred_tpot_ms": math.nan, "status": "ok", "reason": "",
                           "warning": WARNING_SEP.join(warnings)}
    try:
        if is_disagg(row):  # its pools as deployed (sim/validate/disagg_rows.py)
            pools = disagg_pools(row)
            warnings += pools.get("notes", [])
            ov = disagg_row_overrides(row, row_overrides({**row, "tp_size": 1}, opts), pools)
        else:
            ov = row_overrides(row, opts)
        cfg = build_config(overrides=ov)
        dep = build_deployment(cfg)
        # a profile transferred from another GPU (sim/results/warnings.py), as run warns
        warnings += transferred_profile_warnings(
            [dep.disagg.prefill.hardware, dep.hardware] if dep.disagg is not None else [dep.hardware])
        out["warning"] = WARNING_SEP.join(warnings)
        specs = generate_requests(cfg.workload, seed=cfg.seed, max_model_len=dep.limits.max_model_len)
        specs = disperse_client_phases(specs, cfg.workload.max_concurrency or 0, row_phase_spread(row, opts),
                                       cfg.seed)
        res = make_simulation(dep, specs).run()
    except NotSimulable as e:
        out.update(status="not_simulable", reason=str(e))
    except InfeasibleError as e:
        out.update(status="infeasible", reason=str(e))
    except (ServesimError, ValueError) as e:
        # the row's keys reach build_config as overrides, which it attributes to --set
        out.update(status="error", reason=str(e).splitlines()[0].removeprefix("--set: "))
    else:
        req = res.requests
        done = (req["is_warmup"] == 0) & (req["status"] == STATUS_FINISHED)
        if not done.any():
            out.update(status="error", reason="no measured request finished")
        else:
            lat = request_latencies(req)
            out["pred_ttft_ms"] = float(np.mean(lat["ttft_s"][done]) * 1e3)
            out["pred_tpot_ms"] = float(np.nanmean(lat["tpot_s"][done]) * 1e3)
            out["pred_queue_ms"] = float(np.mean(lat["queue_s"][done]) * 1e3)
            for m in ("ttft", "tpot"):  # the nominal 80 % interval (sim/results/intervals.py), of agg rows only
                iv = interval(cfg.engine, m, out[f"pred_{m}_ms"]) if dep.disagg is None else None
                out[f"pred_{m}_ms_lo"], out[f"pred_{m}_ms_hi"] = iv if iv else (math.nan, math.nan)
            out["num_preemptions"] = int(req["num_preemptions"][done].sum())
            out["num_rejected"] = int((req["status"] != STATUS_FINISHED).sum())
            out["num_gpu_blocks"] = int(dep.sizing.num_gpu_blocks)
            out["num_engine_steps"] = int(res.num_steps)
    out["sim_wall_s"] = time.perf_counter() - t0
    return out


def _work(args: tuple[int, dict, ValidateOptions]) -> tuple[int, dict]:
    i, row, opts = args
    return i, simulate_row(row, opts)


def _cost(row: dict) -> float:
    """Rough simulation cost of a row (for load balancing: biggest first)."""
    try:
        return float(row["concurrency"]) * (float(row["osl"]) + 0.01 * float(row["isl"]))
    except (TypeError, ValueError, KeyError):
        return 0.0


def predict_rows(rows: list[dict], opts: ValidateOptions,
                 progress: Callable[[int], None] | None = None) -> list[dict]:
    """Simulate every row (parallel processes); results in input order."""
    order = sorted(range(len(rows)), key=lambda i: -_cost(rows[i]))
    results: list[dict | None] = [None] * len(rows)
    workers = opts.workers or os.cpu_count() or 1
    tasks = [(i, rows[i], opts) for i in order]
    if workers <= 1 or len(rows) <= 1:
        for n, t in enumerate(tasks, 1):
            i, r = _work(t)
            results[i] = r
            if progress:
                progress(n)
    else:
        with ProcessPoolExecutor(max_workers=min(workers, len(rows))) as ex:
            for n, (i, r) in enumerate(ex.map(_work, tasks, chunksize=1), 1):
                results[i] = r
                if progress:
                    progress(n)
    return [r for r in results if r is not None]


def read_rows(csv_path: str | Path):
    """The CSV's rows as a DataFrame (index = the row's CSV line - 2) and
    the rows skipped: a line with more or fewer fields than the header
    (:func:`sim.workload.traces.read_csv_lines`, :func:`_short_lines`; a row whose
    last cells are empty but present is read, and its row's checks name them), or a row whose shape or
    measurement cell is not a number; one dict per row, ``line`` (in the CSV),
    ``column`` (its first bad cell, or ``(row)``), ``value`` and ``reason``.
    ConfigError naming missing columns, or if every row is skipped."""
    import pandas as pd

    p = Path(csv_path)
    require_file(p, "validate: CSV")
    try:  # (a line with more fields than the header costs its row, as in a trace)
        df, lines, long_lines = read_csv_lines(p, True, keep_default_na=True)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{p}: empty file; expected a CSV with columns {', '.join(REQUIRED_COLUMNS)}") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: not a readable CSV ({str(e).splitlines()[0]})") from None
    # pandas renames a repeated column (isl, isl.1): which one is the measurement is ambiguous
    header = pd.read_csv(p, header=None, nrows=1, dtype=str, keep_default_na=False).iloc[0].tolist()
    dup = sorted({c for c in header if header.count(c) > 1})
    if dup:
        raise ConfigError(f"{p}: column(s) {', '.join(repr(c) for c in dup)} appear more than once in the header; "
                          "keep one of each")
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(f"{p}: missing column(s) {', '.join(missing)}; required: {', '.join(REQUIRED_COLUMNS)}")
    if df.empty:
        raise ConfigError(f"{p}: no data rows (only the header)")
    # an engine name as the presets spell it (" VLLM" is vllm): one group per engine in the reports
    df["backend"] = df["backend"].map(lambda b: b.strip().lower() if isinstance(b, str) else b)
    # A garbled cell costs its row, as a malformed trace row does (workload.skip_bad_rows);
    # an empty cell is kept and reported as that row's error by row_overrides.
    df.index = [int(line) - 2 for line in lines]  # line 2 is the first data row: index 0
    ragged = [{"line": int(n), "column": "(row)", "value": "more fields than the header",
               "reason": "more fields than the header"}
              for n in long_lines]
    short = _short_lines(p, df, len(header))  # a cut line: fewer fields than the header, said so
    if short and len(short) == len(df):
        n, k = min(short.items())
        raise ConfigError(f"{p}: every data row has fewer fields than the header (e.g. line {n + 2}: "
                          f"{k} of {len(header)})")
    ragged += [{"line": n + 2, "column": "(row)", "value": f"{k} of {len(header)} fields",
                "reason": f"fewer fields than the header ({k} of {len(header)})"} for n, k in short.items()]
    df = df.drop(index=list(short))
    skipped: dict[int, dict[str, Any]] = {}
    for col in NUMERIC_COLUMNS:
        num = pd.to_numeric(df[col], errors="coerce")
        for i in (num.isna() & df[col].notna()).to_numpy().nonzero()[0]:
            skipped.setdefault(int(df.index[i]), {"line": int(df.index[i]) + 2, "column": col,
                                                  "value": str(df[col].iloc[i]), "reason": "not a number"})
        df[col] = num
    if len(skipped) == len(df):
        first = min(skipped.values(), key=lambda r: r["line"])
        raise ConfigError(f"{p}: no row has numbers in all of {', '.join(NUMERIC_COLUMNS)}; e.g. line "
                          f"{first['line']}: {first['column']}: not a number: {first['value']!r}")
    out = sorted([*skipped.values(), *ragged], key=lambda r: r["line"])
    return df.drop(index=list(skipped)), out


def _short_lines(path: Path, df, num_fields: int) -> dict[int, int]:
    """Rows (index = line - 2) whose line holds fewer fields than the header: pandas
    reads them with their last cells empty; only rows whose last cell is empty are
    looked at, each line parsed alone as CSV. -> {row index: fields on its line}."""
    import csv

    last = df.columns[-1] if len(df.columns) else None
    cand = [int(i) for i in df.index[df[last].isna()]] if last is not None else []
    if not cand:
        return {}
    raw = path.read_text(encoding="utf-8-sig", errors="replace").splitlines()
    out = {}
    for i in cand:
        n = i + 2  # the row's line in the file
        if 0 < n <= len(raw):
            fields = next(csv.reader([raw[n - 1]]), [])
            if len(fields) < num_fields:
                out[i] = len(fields)
    return out


def skipped_row_warnings(csv_path: str | Path, skipped: list[dict[str, Any]]) -> list[str]:
    """One line per row :func:`read_rows` skipped."""
    return [f"{csv_path}: line {s['line']}: {s['reason']}; row skipped" if s["column"] == "(row)" else
            f"{csv_path}: line {s['line']}: {s['column']}: not a number: {s['value']!r}; row skipped"
            for s in skipped]


def group_label(row) -> str:
    """A measured row's group in reports: model, system, backend and TP."""
    model = str(row["model_path"]).split("/")[-1]
    if is_disagg(row):
        return f"{model} {row['system']} {row['backend']} disagg"
    return f"{model} {row['system']} {row['backend']} tp{int(float(row['tp_size']))}"
