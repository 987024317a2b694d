"""The ``servesim validate`` job: read a measured table, simulate every row
(:mod:`sim.validate.rows`), score and write the results (:mod:`sim.validate.report`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from sim.validate.report import summarize_predictions, write_validation
from sim.validate.rows import ValidateOptions, predict_rows, read_rows, warmup_per_client


def run_validation(csv_path: str | Path, out_dir: str | Path | None = None, opts: ValidateOptions | None = None,
                   progress: Callable[[int], None] | None = None, plots: bool = True):
    """Predict every row of ``csv_path``; write ``predictions.csv``,
    ``summary.json``, ``summary.md`` and the plots to ``out_dir`` (if given).
    Returns (predictions DataFrame, summary dict)."""
    import pandas as pd

    opts = opts or ValidateOptions()
    df, skipped = read_rows(csv_path)
    t0 = time.perf_counter()
    preds = predict_rows(df.to_dict("records"), opts, progress)
    wall = time.perf_counter() - t0
    pred_df = pd.DataFrame(preds, index=df.index)
    full = pd.concat([df, pred_df], axis=1)
    summary = summarize_predictions(full)
    summary["wall_time_s"] = wall
    summary["num_skipped_rows"] = len(skipped)
    summary["skipped_rows"] = skipped
    summary["options"] = {"protocol": opts.protocol, "requests_per_client": opts.requests_per_client,
                          "warmup_per_client": warmup_per_client(opts),
                          "client_think_time_s": opts.think_time_s, "seed": opts.seed,
                          "workers": opts.workers or os.cpu_count(),
                          "engine_overrides": opts.engine_overrides}
    if out_dir is not None:
        write_validation(full, summary, out_dir, plots=plots)
    return full, summary
