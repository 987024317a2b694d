"""``servesim validate CSV [--out DIR]``: the command function (typer-annotated).

Registered in ``sim/cli/main.py`` with ``app.command(name="validate")(validate)``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer


def validate(
    csv: Path = typer.Argument(..., help="CSV of measured benchmark rows (layout of ../shared/silicon/*_dev.csv: "
                                         "aggregated rows, and disaggregated ones (mode disagg) simulated as "
                                         "their pools, from the harness's recipes where the row records none)."),
    out: Path = typer.Option(Path("runs/validate"), help="Output folder: predictions.csv, summary.json, summary.md, plots."),
    harness: Optional[str] = typer.Option(None, help="Benchmark harness of every row: aic, vllm-bench-serve, "
                                          "inferencemax, genai-perf, steady, or a harness YAML file (default: per "
                                          "row, from its harness or campaign column, else aic)."),
    campaign_harness: Optional[Path] = typer.Option(None, help="YAML mapping campaign (glob) -> harness name or "
                                                    "YAML file, replacing the built-in map."),
    protocol: Optional[str] = typer.Option(None, help="Earlier name of --harness (a harness name)."),
    requests_per_client: Optional[int] = typer.Option(None, help="Measured requests per client (default: the harness's)."),
    warmup_per_client: Optional[int] = typer.Option(None, help="Warm-up requests per client, excluded from the "
                                                    "scores, taken from the start of the stream (default: the harness's: aic 0; inferencemax drains its 2·C before the measured run, simulated as 0)."),
    think_time_ms: Optional[float] = typer.Option(None, help="Mean client think time between a response and the next send, ms (default: the harness's, 2)."),
    where: Optional[list[str]] = typer.Option(None, help="Simulate only the rows whose COLUMN cell is one of the "
                                              "values: COLUMN=V1[,V2...] (repeatable; every one must match), e.g. "
                                              "--where backend=sglang --where model_path=Qwen/Qwen3-32B."),
    limit: Optional[int] = typer.Option(None, help="Simulate only the first N rows (after --where): a quick look "
                                        "at a large table (its scores are of those rows only)."),
    workers: Optional[int] = typer.Option(None, help="Parallel processes (default: one per CPU)."),
    seed: int = typer.Option(0, help="Seed of every row's simulation."),
    quiet: bool = typer.Option(False, help="No progress bar."),
) -> None:
    """Simulate every row of a measured benchmark table and score the predicted TTFT and TPOT.

    predictions.csv has each row's status, reason (not simulated: why) and warning
    (how the row was read where it needed reading: a Dynamo image's engine
    release, a recipe file's engine arguments over the row's own cells, a profile
    transferred from another GPU).

    Exit status: 0 when at least one row was simulated and scored; rows that were
    not (a non-numeric cell: skipped; an unknown model, a layout that does not fit:
    not simulated) are each listed with the line and reason on stderr / stdout and
    in summary.json and summary.md. 2 when the file itself is bad (missing, not a
    CSV, no data rows, a required column missing) or when no row could be
    simulated, with the reasons."""
    from sim.config import MAX_TIME_KEY_S
    from sim.errors import ConfigError
    from sim.validate.harness import load_campaign_map, load_harness
    from sim.validate.rows import (ValidateOptions, check_protocol, parse_where, read_rows, select_rows,
                                   skipped_row_warnings)
    from sim.validate.report import rows_line
    from sim.validate.run import run_validation

    if protocol is not None:
        check_protocol(protocol)
    h = load_harness(harness) if harness is not None else None
    cmap = load_campaign_map(campaign_harness) if campaign_harness is not None else None
    if requests_per_client is not None and requests_per_client < 1:
        raise ConfigError(f"--requests-per-client must be >= 1, got {requests_per_client}")
    if warmup_per_client is not None and warmup_per_client < 0:
        raise ConfigError(f"--warmup-per-client must be >= 0, got {warmup_per_client}")
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    if seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {seed}")
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {limit}")
    where_map = parse_where(where)
    if protocol is not None and harness is not None:
        typer.echo(f"warning: --harness {harness} sets how every row's benchmark ran; --protocol {protocol} is "
                   "not used", err=True)
    think = None if think_time_ms is None else think_time_ms / 1e3
    if think is not None and not (0 <= think <= MAX_TIME_KEY_S):  # NaN and inf fail too
        raise ConfigError(f"--think-time-ms must be a number from 0 to {MAX_TIME_KEY_S * 1e3:,.0f} (an hour), "
                          f"got {think_time_ms}")
    opts = ValidateOptions(protocol=protocol, harness=h, campaign_harness=cmap, requests_per_client=requests_per_client,
                           warmup_per_client=warmup_per_client, think_time_s=think, seed=seed, workers=workers,
                           where=where_map, limit=limit)
    n = len(select_rows(read_rows(csv)[0], where_map, limit, str(csv)))  # (the selection's errors before the run)
    from sim.cli.common import ensure_out_dir

    ensure_out_dir(out)
    bar = None
    if not quiet and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=n, unit="row", desc="simulating rows", file=sys.stderr)
    last = [0]

    def progress(done: int) -> None:
        if bar is not None:
            bar.update(done - last[0])
            last[0] = done

    try:
        _, summary = run_validation(csv, out, opts, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    o = summary["overall"]
    for w in skipped_row_warnings(csv, summary["skipped_rows"]) + summary.get("warnings", []):
        typer.echo(f"warning: {w}", err=True)
    typer.echo(f"{rows_line(summary)} in {summary['wall_time_s']:.1f} s")
    if summary["num_ok"] == 0:
        _echo_not_simulated(summary["not_simulated"])
        raise ConfigError(f"{csv}: no row could be simulated (reasons above; all in {out}/summary.md)")
    typer.echo(f"TTFT  MAPE {o['ttft_mape']:.1f} %  median APE {o['ttft_mdape']:.1f} %  "
               f"over-predicted {100 * o['ttft_over_share']:.0f} %")
    typer.echo(f"TPOT  MAPE {o['tpot_mape']:.1f} %  median APE {o['tpot_mdape']:.1f} %  "
               f"over-predicted {100 * o['tpot_over_share']:.0f} %")
    for eng, s in summary["by_engine"].items():
        typer.echo(f"  {eng:7s} n={s['n']:3d}  TTFT {s['ttft_mape']:.1f} / {s['ttft_mdape']:.1f} %   "
                   f"TPOT {s['tpot_mape']:.1f} / {s['tpot_mdape']:.1f} %  (MAPE / median APE)")
    if summary["not_simulated"]:
        typer.echo(f"{len(summary['not_simulated'])} row(s) not simulated (see {out}/summary.md):")
        _echo_not_simulated(summary["not_simulated"])
    typer.echo(f"results written to {out}/ (predictions.csv, summary.json, summary.md, scatter_*.png, "
               f"residuals_by_group.png)")


def _echo_not_simulated(rows: list[dict], most: int = 10) -> None:
    """The first ``most`` rows not simulated, one line each, and how many more."""
    for r in rows[:most]:
        typer.echo(f"  line {r['line']} {r['id']}: {r['status']}: {r['reason']}")
    if len(rows) > most:
        typer.echo(f"  ... and {len(rows) - most} more")
