"""The ``servesim validate`` job: read a measured table, simulate every row
(:mod:`sim.validate.rows`), score and write the results (:mod:`sim.validate.report`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from sim.errors import ConfigError
from sim.validate.report import summarize_predictions, write_validation
from sim.validate.rows import WARNING_SEP, ValidateOptions, predict_rows, read_rows, row_harness, select_rows


def run_validation(csv_path: str | Path, out_dir: str | Path | None = None, opts: ValidateOptions | None = None,
                   progress: Callable[[int], None] | None = None, plots: bool = True):
    """Predict every row of ``csv_path``; write ``predictions.csv``,
    ``summary.json``, ``summary.md`` and the plots to ``out_dir`` (if given).
    Returns (predictions DataFrame, summary dict)."""
    import pandas as pd

    opts = opts or ValidateOptions()
    df, skipped = read_rows(csv_path)
    if opts.where or opts.limit is not None:
        df = select_rows(df, opts.where, opts.limit, str(csv_path))  # (skipped rows: the file's, all listed)
    t0 = time.perf_counter()
    preds = predict_rows(df.to_dict("records"), opts, progress)
    wall = time.perf_counter() - t0
    pred_df = pd.DataFrame(preds, index=df.index)
    full = pd.concat([df, pred_df], axis=1)
    summary = summarize_predictions(full)
    summary["wall_time_s"] = wall
    summary["num_skipped_rows"] = len(skipped)
    summary["skipped_rows"] = skipped
    harnesses = set()
    for r in df.to_dict("records"):
        try:
            harnesses.add(row_harness(r, opts).name)
        except ConfigError:  # the row's own error says why
            pass
    harnesses = sorted(harnesses)
    # engine versions outside the modelled releases (sim/presets/versions.py) and transferred hardware
    # profiles, once each with a count
    counts: dict[str, int] = {}
    for cell in full.get("warning", pd.Series(dtype=str)).fillna(""):
        for w in str(cell).split(WARNING_SEP) if cell else ():
            counts[w] = counts.get(w, 0) + 1
    summary["warnings"] = [f"{w} ({n} row{'s' if n > 1 else ''})" for w, n in sorted(counts.items())]
    summary["options"] = {"harness": getattr(opts.harness, "name", opts.harness) or opts.protocol,
                          "harnesses": harnesses, "requests_per_client": opts.requests_per_client,
                          "warmup_per_client": opts.warmup_per_client,
                          "client_think_time_s": opts.think_time_s, "seed": opts.seed,
                          "workers": opts.workers or os.cpu_count(),
                          "engine_overrides": opts.engine_overrides,
                          "where": opts.where, "limit": opts.limit}
    if out_dir is not None:
        write_validation(full, summary, out_dir, plots=plots)
    return full, summary
