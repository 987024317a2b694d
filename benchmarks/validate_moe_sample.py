"""Validate a fixed, seeded, stratified sample of the MoE table
(``../shared/silicon/moe_agg_dev.csv``) and print TTFT / TPOT MAPE, median APE
and bias (share of rows under-predicted) overall and per model, backend,
campaign and system. ``--table`` takes another measured table, e.g. the dense
one (``--table dense``: ``../shared/silicon/dense_agg_dev.csv``, which records
no ``campaign`` nor ``mode``: a row's campaign is then its engine and version,
as in ``sim/validate/crossval.py::campaign_of``, and every row is agg).

The sample: rows with concurrency <= ``--max-concurrency`` (64), grouped by
(model family, backend, campaign); from each group ``--per-group`` rows drawn
with numpy's ``default_rng(--seed)`` (all rows of smaller groups). The same
seed and table give the same rows. Rows run in one process by default (about
a few minutes on one core); ``--workers`` to spread them.

``--dense N``: instead, N rows of ``../shared/silicon/dense_agg_dev.csv`` with
tensor parallelism >= 2 and concurrency <= ``--max-concurrency``, drawn with
``default_rng(--seed)`` (the dense check of a change to the decode step; scores
per engine, GPU and TP).

    PYTHONPATH=. python3 benchmarks/validate_moe_sample.py [--out runs/moe_sample.csv]
    PYTHONPATH=. python3 benchmarks/validate_moe_sample.py --table dense --per-group 16 \
        --max-concurrency 1000 --out runs/dense_sample.csv   # 80 dense rows, 16 per model x engine
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO.parent / "shared" / "silicon" / "moe_agg_dev.csv"
#: --table shorthands
TABLES = {"moe": TABLE, "dense": REPO.parent / "shared" / "silicon" / "dense_agg_dev.csv"}
DENSE_TABLE = TABLES["dense"]


def family(model_path: str) -> str:
    m = model_path.lower()
    for key, name in (("deepseek", "DeepSeek"), ("gpt-oss", "gpt-oss"), ("minimax", "MiniMax"),
                      ("qwen3.5", "Qwen3.5"), ("qwen3-235b", "Qwen3-235B")):
        if key in m:
            return name
    return model_path.split("/")[-1]


def sample_rows(df, per_group: int, max_conc: int, seed: int):
    """The stratified sample (module docstring), in table order."""
    df = df.copy()
    if "mode" not in df:  # a table of aggregated rows only (the dense one)
        df["mode"] = "agg"
    if "campaign" not in df:  # one container run per engine release (crossval.campaign_of)
        df["campaign"] = df["backend"].astype(str) + " " + df["backend_version"].astype(str)
    df = df[(df["mode"].fillna("agg") == "agg") & (df["concurrency"] <= max_conc)].copy()
    df["family"] = df["model_path"].map(family)
    rng = np.random.default_rng(seed)
    keep = []
    for _, g in sorted(df.groupby(["family", "backend", "campaign"]), key=lambda kv: kv[0]):
        idx = g.index.to_numpy()
        if len(idx) > per_group:
            idx = rng.choice(idx, size=per_group, replace=False)
        keep.extend(int(i) for i in idx)
    return df.loc[sorted(keep)]


def dense_sample(df, n: int, max_conc: int, seed: int):
    """``--dense N``: N seeded rows with TP >= 2 and concurrency <= max_conc, in table order."""
    df = df[(df["tp_size"] >= 2) & (df["concurrency"] <= max_conc)].copy()
    df["family"] = df["model_path"].str.split("/").str[-1]
    idx = np.random.default_rng(seed).choice(df.index.to_numpy(), size=min(n, len(df)), replace=False)
    return df.loc[sorted(int(i) for i in idx)]


def scores(d, by: str | None):
    import pandas as pd

    ok = d[d["status"] == "ok"]
    groups = [("all", ok)] if by is None else sorted(ok.groupby(by), key=lambda kv: str(kv[0]))
    out = []
    for name, g in groups:
        row = {"group": name if by is None else f"{by}={name}", "n": len(g)}
        for m in ("ttft", "tpot"):
            err = g[f"pred_{m}_ms"] / g[f"silicon_{m}_ms"] - 1
            row[f"{m}_mape"] = 100 * err.abs().mean()
            row[f"{m}_mdape"] = 100 * err.abs().median()
            row[f"{m}_under%"] = 100 * (err < 0).mean()
        out.append(row)
    return pd.DataFrame(out)


def main(argv=None) -> int:
    import pandas as pd

    sys.path.insert(0, str(REPO))
    from sim.validate.rows import ValidateOptions, predict_rows

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", default=str(TABLE), help="a measured table's path, or moe / dense")
    ap.add_argument("--per-group", type=int, default=6)
    ap.add_argument("--max-concurrency", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", default=str(REPO / "runs" / "moe_sample.csv"))
    ap.add_argument("--warmup-per-client", type=int, default=None,
                    help="override every harness's warm-up requests per client (default: the harness's)")
    ap.add_argument("--dense", type=int, default=0,
                    help="score N seeded dense_agg_dev.csv rows (TP >= 2) instead of the MoE sample")
    ap.add_argument("--only", default="", help="pandas query restricting the sample (e.g. \"family=='DeepSeek'\")")
    a = ap.parse_args(argv)

    if a.dense:
        s = dense_sample(pd.read_csv(DENSE_TABLE), a.dense, a.max_concurrency, a.seed)
    else:
        s = sample_rows(pd.read_csv(TABLES.get(a.table, a.table)), a.per_group, a.max_concurrency, a.seed)
    if a.only:
        s = s.query(a.only)
    t0 = time.perf_counter()
    preds = predict_rows(s.to_dict("records"), ValidateOptions(workers=a.workers, warmup_per_client=a.warmup_per_client))
    p = pd.concat([s.reset_index(drop=True), pd.DataFrame(preds)], axis=1)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    p.to_csv(a.out, index=False)
    pd.set_option("display.width", 200)
    print(f"{len(s)} rows sampled, {int((p['status'] == 'ok').sum())} simulated, "
          f"{time.perf_counter() - t0:.0f} s; predictions in {a.out}")
    bad = p[p["status"] != "ok"]
    for reason, n in bad["reason"].value_counts().items():
        print(f"  not simulated ({n}): {reason[:150]}")
    tab = pd.concat([scores(p, None)] + [scores(p, k) for k in ("family", "backend", "campaign", "system", "tp_size")
                                       if k in p])
    print(tab.round(1).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
