"""Terminal output (rich tables) for the CLI. Presentation only."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

_console = Console(width=None if sys.stdout.isatty() else 160)
GIB = 2**30


def _fmt(v, nd=2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _layout_is_more_than_tp(lay, cfg) -> bool:
    """A layout the TP size alone does not say: attention DP ranks or expert parallelism."""
    return lay is not None and (lay.num_gpus != cfg.tensor_parallel_size or getattr(lay, "moe_ep_size", 1) > 1)


def _pool_shape(pool) -> str:
    """One worker of a disaggregated pool: ``TP8``, or its whole layout (DP ranks, EP)."""
    lay = getattr(pool, "layout", None)
    return f"({lay.describe()})" if _layout_is_more_than_tp(lay, pool.cfg) else f"TP{pool.cfg.tensor_parallel_size}"


def _engine_release(cfg) -> str:
    """``trtllm 1.0.0rc3`` (the release given; ``(as R)`` where it is simulated as
    another modelled release's), else ``trtllm`` and the release its preset is."""
    from sim.presets import version_warning
    from sim.presets.versions import simulated_release

    release = simulated_release(cfg.engine, cfg.engine_version)
    if cfg.engine_version:
        out = f"{cfg.engine} {cfg.engine_version}"
        return f"{out} (as {release})" if release and version_warning(cfg.engine, cfg.engine_version) else out
    return f"{cfg.engine} (as {release})" if release else cfg.engine


def print_run_summary(s: dict, dep) -> None:
    cfg = dep.cfg
    pools = getattr(dep, "disagg", None)
    lay = getattr(dep, "layout", None)
    if pools is None:
        shape = (f"{cfg.num_replicas}x({lay.describe()})" if _layout_is_more_than_tp(lay, cfg)
                 else f"{cfg.num_replicas}x{cfg.tensor_parallel_size}")
        where = f"{shape} {cfg.hardware}, " + (f"engine={_engine_release(cfg)}, " if cfg.engine else "") + \
            f"scheduler={cfg.scheduler}"
    else:
        p, d = pools.prefill, pools.decode
        where = (f"{p.cfg.num_replicas}P x {_pool_shape(p)} {p.cfg.hardware} ({p.cfg.scheduler}) + "
                 f"{d.cfg.num_replicas}D x {_pool_shape(d)} {d.cfg.hardware} ({d.cfg.scheduler}), "
                 f"KV over {pools.transfer.link}")
    if cfg.num_frontends > 1:
        where += f", {cfg.num_frontends} frontends"
    from sim.launch import hub_id_of_path

    model = hub_id_of_path(cfg.model) or (Path(cfg.model).name if cfg.model.endswith(".json") else cfg.model)
    t = Table(title=f"servesim run: {model} on {where}", show_header=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    rows = [
        ("Successful requests", s["completed"]),
        ("Rejected requests", s["num_rejected"]),
        *((("Maximum request concurrency", s["max_concurrency"]),) if s.get("max_concurrency") is not None else ()),
        *((("Request rate configured (RPS)", float(s["request_rate"])),)
          if s.get("request_rate") not in (None, "inf") else ()),
        ("Benchmark duration (s)", s["duration"]),
        ("Total input tokens", s["total_input_tokens"]),
        ("Total generated tokens", s["total_output_tokens"]),
        ("Request throughput (req/s)", s["request_throughput"]),
        ("Request goodput (req/s)", s["request_goodput"]),
        ("Output token throughput (tok/s)", s["output_throughput"]),
        ("Peak output token throughput (tok/s)", s.get("max_output_tokens_per_s")),
        ("Peak concurrent requests", s.get("max_concurrent_requests")),
        ("Total token throughput (tok/s)", s["total_token_throughput"]),
    ]
    for r in rows:
        t.add_row(r[0], _fmt(r[1]))
    for key, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")):
        t.add_row(f"{label} mean / median / p99 (ms)",
                  " / ".join(_fmt(s[f"{p}_{key}_ms"]) for p in ("mean", "median", "p99")))
        extra = [k for k in s if k.startswith("p") and k.endswith(f"_{key}_ms")
                 and k not in (f"p90_{key}_ms", f"p99_{key}_ms")]
        if extra:  # --metric-percentiles
            t.add_row(f"{label} " + " / ".join(k.split("_")[0] for k in extra) + " (ms)",
                      " / ".join(_fmt(s[k]) for k in extra))
    t.add_row("Queue time mean / p99 (ms)", f"{_fmt(s['mean_queue_ms'])} / {_fmt(s['p99_queue_ms'])}")
    t.add_row("Preemptions", _fmt(s["num_preemptions"]))
    t.add_row("Prefix cache hit rate", _fmt(s["prefix_cache_hit_rate"], 3))
    t.add_row("KV cache usage mean / max", f"{_fmt(s['mean_kv_cache_usage'], 3)} / {_fmt(s['max_kv_cache_usage'], 3)}")
    t.add_row("Mean running seqs / batched tokens",
              f"{_fmt(s['mean_num_running_seqs'], 1)} / {_fmt(s['mean_num_batched_tokens'], 1)}")
    if not math.isnan(s.get("kv_reserved_unused_fraction", math.nan)):
        t.add_row("KV reserved but unused", _fmt(s["kv_reserved_unused_fraction"], 3))
    if pools is not None:
        for pool in ("prefill", "decode"):
            t.add_row(f"{pool.capitalize()} pool: utilisation / KV mean / KV max",
                      f"{_fmt(s[f'{pool}_utilization'], 3)} / {_fmt(s[f'{pool}_mean_kv_cache_usage'], 3)} / "
                      f"{_fmt(s[f'{pool}_max_kv_cache_usage'], 3)}")
        t.add_row("KV transfer mean / p99 (ms)", f"{_fmt(s['mean_kv_transfer_ms'])} / {_fmt(s['p99_kv_transfer_ms'])}")
        t.add_row("KV link queue mean / p99 (ms)",
                  f"{_fmt(s['mean_kv_transfer_queue_ms'])} / {_fmt(s['p99_kv_transfer_queue_ms'])}")
        t.add_row("Decode KV wait mean / p99 (ms)",
                  f"{_fmt(s['mean_decode_kv_wait_ms'])} / {_fmt(s['p99_decode_kv_wait_ms'])}")
    _console.print(t)
    n = s["completed"] + s["num_rejected"]
    sim_s = s["simulated_time_s"]
    # (the ratio to real time where something was simulated: every request rejected is none)
    ratio = f"{sim_s / max(s['wall_time_s'], 1e-9):,.0f}x real time; " if s["num_engine_steps"] else ""
    _console.print(
        f"simulated {n:,} request{'' if n == 1 else 's'} ({sim_s:.1f} s simulated) "
        f"in {s['wall_time_s']:.2f} s wall: {s['sim_requests_per_wall_s']:,.0f} simulated req/s, "
        f"{ratio}{s['num_engine_steps']:,} engine steps in {s['num_events']:,} events"
    )


def print_kv_report(rep: dict, dep, label: str = "") -> None:
    """``servesim kv``'s table of one engine; ``label``: which pool of a disaggregated deployment."""
    cfg = dep.cfg
    lay = getattr(dep, "layout", None)
    tp = lay.describe() if _layout_is_more_than_tp(lay, cfg) else f"TP={cfg.tensor_parallel_size}"
    t = Table(title=f"KV cache{' of the ' + label if label else ''}: {cfg.model} on {cfg.hardware}, {tp}, "
                    f"kv_cache_dtype={cfg.kv_cache_dtype}, block_size={cfg.block_size} "
                    f"(bytes, GiB and blocks per GPU rank)", show_header=False)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    for k, v in rep.items():
        t.add_row(k, _fmt(v, 3) if isinstance(v, float) else _fmt(v))
    _console.print(t)


#: column headers of ``servesim models`` / ``hardware`` (the JSON keys otherwise)
ROW_LABELS = {"params_b": "params (B)", "active_params_b": "active (B, with embeddings)",
              "kv_bytes_per_token": "KV B/token",
              "max_position_embeddings": "max len", "memory_gib": "memory GiB", "hbm_tb_per_s": "HBM TB/s",
              "bf16_tflops": "BF16 TFLOPS", "fp8_tflops": "FP8 TFLOPS", "fp4_tflops": "FP4 TFLOPS",
              "link_domain_gpus": "GPUs per link domain", "efficiency_date": "dated"}


def print_rows(title: str, rows: list[dict]) -> None:
    """A table of dicts with the same keys (their order: the columns, headed by
    :data:`ROW_LABELS`); a single row is shown as key / value pairs."""
    if len(rows) == 1:
        t = Table(title=title, show_header=False)
        t.add_column("key")
        t.add_column("value", overflow="fold")
        for k, v in rows[0].items():
            t.add_row(ROW_LABELS.get(k, k), _fmt(v))
    else:
        t = Table(title=title)
        for k in rows[0] if rows else ():
            numeric = any(isinstance(r[k], (int, float)) for r in rows)
            t.add_column(ROW_LABELS.get(k, k), overflow="fold", justify="right" if numeric else "left")
        for r in rows:
            t.add_row(*(_fmt(v) for v in r.values()))
    _console.print(t)


COMPARE_COLUMNS = (
    ("req/s", "request_throughput", 2), ("out tok/s", "output_throughput", 0),
    ("TTFT p50", "median_ttft_ms", 1), ("TTFT p99", "p99_ttft_ms", 1),
    ("TPOT p50", "median_tpot_ms", 2), ("TPOT p99", "p99_tpot_ms", 2), ("ITL p99", "p99_itl_ms", 2),
    ("E2EL p99", "p99_e2el_ms", 0), ("goodput", "request_goodput", 2), ("KV mean", "mean_kv_cache_usage", 3),
    ("preempt", "num_preemptions", 0), ("prefix hit", "prefix_cache_hit_rate", 3), ("rejected", "num_rejected", 0),
)


def print_compare_table(summaries: dict[str, dict]) -> None:
    """One row per variant; in a terminal too narrow for that (under ~155
    columns), one column per variant instead. Cells fold, never lose digits."""
    title = "servesim compare (latencies in ms)"
    cells = {name: [_fmt(s.get(k), nd) if isinstance(s.get(k), float) else _fmt(s.get(k))
                    for _, k, nd in COMPARE_COLUMNS] for name, s in summaries.items()}
    t = Table(title=title)
    t.add_column("variant", overflow="fold")
    for head, _, _ in COMPARE_COLUMNS:
        t.add_column(head, justify="right", overflow="fold")
    for name, row in cells.items():
        t.add_row(name, *row)
    if _console.measure(t, options=_console.options.update_width(10_000)).maximum > _console.width:
        t = Table(title=title)
        t.add_column("metric")
        for name in cells:
            t.add_column(name, justify="right", overflow="fold")
        for i, (head, _, _) in enumerate(COMPARE_COLUMNS):
            t.add_row(head, *(row[i] for row in cells.values()))
    _console.print(t)
