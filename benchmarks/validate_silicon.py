"""Cross-validated accuracy on the measured tables: the official score.

    python benchmarks/validate_silicon.py                 # every scheme, writes reports/validation/
    python benchmarks/validate_silicon.py --schemes model  # one scheme

Data: every table of ``../shared/silicon/`` that ``servesim validate`` takes
(``--tables``; default the aggregated ones: ``dense_agg_dev.csv`` and
``moe_agg_dev.csv``; rows the simulator refuses are counted and listed with
their reason, never dropped silently). Each row runs under its benchmark
harness (``sim/validate/harness.py``: the row's ``campaign`` mapped to a
named harness; rows without one under ``aic``, the protocol of the dense table).

Fitted: per engine, the four host/frontend overheads of
``EnginePreset.fitted`` (``sim/presets/<engine>.py``), nothing per model,
GPU, campaign or concurrency, on the rows of ``--fit-tables`` (default the
dense table); the other tables' rows are scored only, with the values fitted
without their group, and simulated only under those values
(``cross_validate(fit_row=...)``): the MoE table is scored with the
per-engine values of the dense table, as issue #20 asks. ``--sample
TABLE=N``: a seeded sample of N rows of a table, stratified by model, engine
and GPU (every stratum keeps at least one row; the default samples
``moe_agg_dev.csv`` to 300 rows, whose simulations take seconds to minutes
each; ``--sample moe_agg_dev.csv=0`` takes every row). Scored
(``sim/validate/crossval.py``):

- ``in_sample``: fitted on every row, scored on every row;
- ``model`` / ``system`` / ``campaign``: leave one group out: fitted without
  the group, the group scored with those values; pooled = every row scored
  by the fold that held it out;
- ``shipped``: the values in ``sim/presets/<engine>.py`` (since 2026-12-04 the
  in-sample fit's: copy ``fitted_params.json``'s ``in_sample`` there after a
  model change and rerun, which then reads them from the cache), every row.

Every (engine, parameter set) simulation is cached in ``--cache`` (JSON
lines; delete it after changing the simulator). Writes ``README.md``,
``cv_folds.csv``, ``cv_pooled.csv``, ``predictions.csv``,
``fitted_params.json``, ``summary.json`` and held-out scatter plots to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_TABLES = ("dense_agg_dev.csv", "moe_agg_dev.csv")
FALLBACK_USED = ["pooled"]
SCHEME_TITLES = {"in_sample": "in-sample (fit on every fit row)", "model": "leave one model out",
                 "system": "leave one GPU out", "campaign": "leave one campaign out",
                 "shipped": "shipped preset values"}
#: fewer held-out rows of an engine than this: its interval pools every engine's residuals
MIN_INTERVAL_ROWS = 20
#: the analysis appended to the generated README (numbers in it are from when it was written)
NOTES_FILE = Path(__file__).with_name("validation_notes.md")


#: table -> rows kept by default (a stratified sample; 0 = every row)
DEFAULT_SAMPLE = {"moe_agg_dev.csv": 300}
SAMPLE_SEED = 0


def stratified_sample(recs: list[dict], n: int, seed: int = SAMPLE_SEED) -> list[dict]:
    """``n`` of ``recs`` (all of them if n <= 0 or n >= len), stratified by model,
    engine and GPU: each stratum keeps max(1, round(n x its share)) rows drawn
    with ``random.Random(seed)``; the rows keep their table order."""
    import random

    if n <= 0 or n >= len(recs):
        return list(recs)
    strata: dict[tuple, list[int]] = {}
    for i, r in enumerate(recs):
        strata.setdefault((str(r.get("model_path")), str(r.get("backend")), str(r.get("system"))), []).append(i)
    rng = random.Random(seed)
    keep: list[int] = []
    for key in sorted(strata):
        idx = strata[key]
        k = min(len(idx), max(1, round(n * len(idx) / len(recs))))
        keep += rng.sample(idx, k)
    return [recs[i] for i in sorted(keep)]


def load_rows(silicon: Path, tables: list[str], sample: dict[str, int] | None = None
              ) -> tuple[list[dict], list[str]]:
    from sim.validate.rows import read_rows, skipped_row_warnings

    rows, warns = [], []
    for t in tables:
        df, skipped = read_rows(silicon / t)
        warns += skipped_row_warnings(silicon / t, skipped)
        recs = df.to_dict("records")
        if (sample or {}).get(t):
            recs = stratified_sample(recs, sample[t])
        for r in recs:
            r["table"] = t.removesuffix(".csv")
            r["row_key"] = f"{r['table']}:{r.get('id', len(rows))}"
            rows.append(r)
    return rows, warns


def main() -> None:
    from sim.validate import crossval as cv

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--silicon", default=str(ROOT.parent / "shared" / "silicon"))
    ap.add_argument("--tables", default=",".join(DEFAULT_TABLES))
    ap.add_argument("--fit-tables", default="dense_agg_dev.csv",
                    help="tables whose rows enter the fits (the others are scored only; default the dense table)")
    ap.add_argument("--sample", action="append", default=[], metavar="TABLE=N",
                    help="a seeded sample of N rows of TABLE, stratified by model, engine and GPU (repeatable; "
                         "default " + ", ".join(f"{t}={n}" for t, n in DEFAULT_SAMPLE.items()) + "; N = 0: every row)")
    ap.add_argument("--out", default=str(ROOT / "reports" / "validation"))
    ap.add_argument("--schemes", default=",".join(cv.SCHEMES), help="leave-one-group-out schemes")
    ap.add_argument("--rounds", type=int, default=cv.MAX_ROUNDS,
                    help="coordinate-search rounds per fit at most (it stops after a round that changes nothing; "
                         f"default {cv.MAX_ROUNDS})")
    ap.add_argument("--fallback", default=cv.FALLBACK, choices=("pooled", "median"),
                    help="values of an engine without fit rows in a fold: one set fitted on the other engines' "
                         "rows together (pooled), or the median of their separate fits")
    ap.add_argument("--requests-per-client", type=int, default=None,
                    help="override every harness's measured requests per client (default: the harness's)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--cache", default=str(ROOT / "runs" / "validation_cache.jsonl"))
    ap.add_argument("--max-row-tokens", type=float, default=2e7,
                    help="skip (and list) rows whose simulation would process more tokens than this: "
                         "10·C requests x (isl + osl); every dense row is under 7e6, MoE rows at thousands "
                         "of clients with 8k outputs reach 7e8 and would take hours each in the fit loop")
    args = ap.parse_args()
    schemes = [s for s in args.schemes.split(",") if s]
    bad = [s for s in schemes if s not in cv.SCHEMES]
    if bad:
        ap.error(f"--schemes: unknown {', '.join(bad)}; valid: {', '.join(cv.SCHEMES)}")

    from sim.presets import FITTED
    from sim.validate.rows import ValidateOptions, predict_rows

    sample = dict(DEFAULT_SAMPLE)
    for spec in args.sample:
        t, _, n = spec.partition("=")
        try:
            sample[t] = int(n)
        except ValueError:
            ap.error(f"--sample {spec!r}: expected TABLE=N with N an integer")
    fit_tables = {t for t in args.fit_tables.split(",") if t}
    rows, warns = load_rows(Path(args.silicon), [t for t in args.tables.split(",") if t], sample)
    for w in warns:
        print(f"warning: {w}", file=sys.stderr)
    t_start = time.perf_counter()

    def row_tokens(r: dict) -> float:
        try:
            return 10 * float(r["concurrency"]) * (float(r["isl"]) + float(r["osl"]))
        except (TypeError, ValueError):
            return 0.0

    def predict(sub: list[dict], engine: str, params: dict) -> list[dict]:
        t0 = time.perf_counter()
        opts = ValidateOptions(workers=args.workers, engine_overrides={engine: params},
                               requests_per_client=args.requests_per_client)
        big = [row_tokens(r) > args.max_row_tokens for r in sub]
        got = iter(predict_rows([r for r, b in zip(sub, big) if not b], opts))
        out = [{"status": "skipped", "reason": f"not simulated here: about {row_tokens(r):.1e} tokens to simulate "
                f"(--max-row-tokens {args.max_row_tokens:.0e})"} if b else next(got) for r, b in zip(sub, big)]
        print(f"  simulated {len(sub)} {engine} rows with {params} in {time.perf_counter() - t0:.0f} s",
              flush=True)
        return out

    cv.FALLBACK = FALLBACK_USED[0] = args.fallback
    cache = cv.PredictionCache(rows, predict, args.cache)
    res = cv.cross_validate(cache, schemes, rounds=args.rounds, log=lambda s: print(s, flush=True),
                            fit_row=lambda r: f"{r['table']}.csv" in fit_tables)
    shipped = [{} for _ in rows]
    for eng in cache.by_engine:
        for i, p in cache.get(eng, {k: FITTED[eng][k] for k in cv.PRIOR}).items():
            shipped[i] = p
    wall = time.perf_counter() - t_start
    write_report(Path(args.out), rows, res, shipped, schemes, args, wall, cache.num_simulated)


def _row_scores(rows, preds, idx=None):
    from sim.validate.crossval import scores

    idx = range(len(rows)) if idx is None else idx
    return scores([rows[i] for i in idx], [preds[i] for i in idx])


def _f(v) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


def write_report(out: Path, rows, res, shipped, schemes, args, wall: float, num_sim: int) -> None:
    import pandas as pd

    from sim.validate.crossval import MIN_FIT_ROWS, PRIOR, TPOT_WEIGHT, campaign_of
    from sim.validate.harness import harness_for_row

    out.mkdir(parents=True, exist_ok=True)
    ins = res["in_sample"]["preds"]
    preds_by = {"in_sample": ins, "shipped": shipped, **res["held_out"]}

    # per-fold table
    fold_rows = []
    for f in res["folds"]:
        h = _row_scores(rows, res["held_out"][f["scheme"]], f["rows"])
        i = _row_scores(rows, ins, f["rows"])
        srcs = {e: v["source"] for e, v in f["params"].items()
                if any(rows[k]["backend"] == e for k in f["rows"])}
        fold_rows.append({
            "scheme": f["scheme"], "held_out_group": f["group"], "n": h["n"], "n_simulated": h["n_ok"],
            "ttft_mape": h["ttft_mape"], "ttft_mdape": h["ttft_mdape"],
            "tpot_mape": h["tpot_mape"], "tpot_mdape": h["tpot_mdape"],
            "in_sample_ttft_mape": i["ttft_mape"], "in_sample_ttft_mdape": i["ttft_mdape"],
            "in_sample_tpot_mape": i["tpot_mape"], "in_sample_tpot_mdape": i["tpot_mdape"],
            "engines_not_fitted": "; ".join(f"{e}: {s}" for e, s in sorted(srcs.items()) if s != "fitted"),
        })
    folds_df = pd.DataFrame(fold_rows)
    folds_df.to_csv(out / "cv_folds.csv", index=False, float_format="%.2f")

    # pooled: per scheme, overall / per table / per engine
    pooled = []
    tables = sorted({r["table"] for r in rows})
    engines = sorted({r["backend"] for r in rows})
    for scheme in ["in_sample", *schemes, "shipped"]:
        p = preds_by[scheme]
        for label, idx in ([("all", None)] + [(f"table {t}", [i for i, r in enumerate(rows) if r["table"] == t])
                                              for t in tables]
                           + [(f"engine {e}", [i for i, r in enumerate(rows) if r["backend"] == e])
                              for e in engines]):
            s = _row_scores(rows, p, idx)
            pooled.append({"scheme": scheme, "rows": label, **s})
    # held-out rows whose engine was fitted in their fold (on other models / GPUs / campaigns) vs not
    # (no fit rows of that engine left: --fallback)
    for scheme in schemes:
        fitted_idx, unfitted_idx = [], []
        for f in res["folds"]:
            if f["scheme"] != scheme:
                continue
            for i in f["rows"]:
                src = (f["params"].get(rows[i]["backend"]) or {}).get("source", "")
                (fitted_idx if src == "fitted" else unfitted_idx).append(i)
        for label, idx in (("engine fitted in the fold", fitted_idx), ("engine not fitted in the fold", unfitted_idx)):
            s = _row_scores(rows, preds_by[scheme], idx)
            if s["n_ok"]:
                pooled.append({"scheme": scheme, "rows": label, **s})
    pooled_df = pd.DataFrame(pooled)
    pooled_df.to_csv(out / "cv_pooled.csv", index=False, float_format="%.2f")

    # every row with every prediction
    recs = []
    for i, r in enumerate(rows):
        rec = {k: r.get(k) for k in ("table", "id", "campaign", "backend", "backend_version", "model_path",
                                     "system", "gemm_quant_mode", "isl", "osl", "concurrency", "tp_size",
                                     "silicon_ttft_ms", "silicon_tpot_ms")}
        rec["campaign_group"] = campaign_of(r)
        rec["harness"] = harness_for_row(r).name
        for scheme, p in preds_by.items():
            rec[f"{scheme}_ttft_ms"] = p[i].get("pred_ttft_ms")
            rec[f"{scheme}_tpot_ms"] = p[i].get("pred_tpot_ms")
        rec["status"] = ins[i].get("status")
        rec["reason"] = ins[i].get("reason")
        recs.append(rec)
    pred_df = pd.DataFrame(recs)
    pred_df.to_csv(out / "predictions.csv", index=False)

    params = {"date": date.today().isoformat(), "prior": PRIOR, "tpot_weight": TPOT_WEIGHT,
              "min_fit_rows": MIN_FIT_ROWS, "rounds": args.rounds,
              "in_sample": res["in_sample"]["params"],
              "folds": [{"scheme": f["scheme"], "group": f["group"], "params": f["params"]} for f in res["folds"]]}
    (out / "fitted_params.json").write_text(json.dumps(_safe(params), indent=2) + "\n")
    summary = {"pooled": pooled, "folds": fold_rows, "num_rows": len(rows),
               "num_simulated_in_sample": sum(1 for p in ins if p.get("status") == "ok"),
               "wall_s": wall, "num_simulations": num_sim, "tables": tables, "schemes": schemes}
    (out / "summary.json").write_text(json.dumps(_safe(summary), indent=2) + "\n")
    _plots(out, pred_df, schemes)
    iv = write_intervals(rows, res, schemes,
                         write=out.resolve() == (ROOT / "reports" / "validation").resolve())
    summary["intervals"] = iv
    (out / "summary.json").write_text(json.dumps(_safe(summary), indent=2) + "\n")
    write_readme(out, rows, folds_df, pooled_df, res, schemes, wall, num_sim, iv, args)
    print(pooled_df[pooled_df["rows"] == "all"].to_string(index=False))
    print(f"report in {out} ({wall:.0f} s, {num_sim} row simulations)")


def write_intervals(rows, res, schemes, write: bool = True) -> dict:
    """The nominal 80 % intervals from the cross-validated residuals
    (``sim.validate.crossval.conformal_intervals``: every leave-one-group-out
    scheme's held-out residuals together, per engine, each held-out group
    weighing its effective number of independent residuals (Kish's design
    effect with their intraclass correlation), and their coverage on each group
    from the rows outside it) -> sim/data/prediction_intervals.yaml."""
    import yaml

    from sim.results.intervals import INTERVALS_FILE
    from sim.validate.crossval import conformal_intervals

    iv = conformal_intervals(rows, res, schemes, min_rows=MIN_INTERVAL_ROWS)
    if write:  # the package's file comes from the committed report's run only
        INTERVALS_FILE.write_text(yaml.safe_dump({
            "source": f"benchmarks/validate_silicon.py {date.today().isoformat()}: 10th / 90th percentiles of "
                      "log(measured / predicted) over the held-out rows of the leave-one-"
                      f"{iv['scheme']}-out schemes together, on the measured tables, each held-out group "
                      "weighing its effective number of independent residuals (Kish's design effect with "
                      "their intraclass correlation rho; nominal 80 % interval); see "
                      "reports/validation/README.md",
            "engines": iv["engines"]}, sort_keys=True))
    return iv


def _plots(out: Path, df, schemes) -> None:
    from sim.validate.plots import plot_scatter

    ok = df[df["status"] == "ok"]
    scheme = "model" if "model" in schemes else (schemes[0] if schemes else "in_sample")
    for m in ("ttft", "tpot"):
        sub = ok[[f"silicon_{m}_ms", f"{scheme}_{m}_ms", "backend"]].dropna()
        if len(sub):
            plot_scatter(sub, f"silicon_{m}_ms", f"{scheme}_{m}_ms", f"{m.upper()} ({scheme} held out)",
                         out / f"scatter_{m}.png")


def _md_table(df, cols, heads) -> list[str]:
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in df.to_dict("records"):
        lines.append("| " + " | ".join(_f(r[c]) if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    return lines


def _fit_tables_text(args) -> str:
    fit = getattr(args, "fit_tables", "dense_agg_dev.csv") or ""
    return ", ".join(f"`{t}`" for t in fit.split(",") if t) or "no table"


def _sample_text(rows, args) -> str:
    sample = dict(DEFAULT_SAMPLE)
    for spec in getattr(args, "sample", None) or []:
        t, _, n = spec.partition("=")
        sample[t] = int(n)
    parts = [f"`{t}`: a seeded sample of {sum(1 for r in rows if r['table'] == t.removesuffix('.csv'))} rows "
             f"stratified by model, engine and GPU (`--sample {t}={n}`; `--sample {t}=0` takes every row)"
             for t, n in sample.items() if n > 0 and any(r["table"] == t.removesuffix(".csv") for r in rows)]
    return ("Sampled: " + "; ".join(parts) + ".") if parts else ""


def write_readme(out: Path, rows, folds_df, pooled_df, res, schemes, wall, num_sim, iv=None, args=None) -> None:
    from sim.results.intervals import log_bounds
    from sim.validate.crossval import GRID, MAX_ROUNDS, MIN_FIT_ROWS, PRIOR, SHARED_KEYS

    n_ok = sum(1 for p in res["in_sample"]["preds"] if p.get("status") == "ok")
    tables = sorted({r["table"] for r in rows})
    lines = [
        "# Validation against measured serving benchmarks (cross-validated)",
        "",
        "Regenerate (every figure below, the CSVs and plots; simulations are cached in "
        "`runs/validation_cache.jsonl`, delete it after changing the simulator):",
        "",
        "    python benchmarks/validate_silicon.py",
        "",
        f"Tables: {', '.join(f'`../shared/silicon/{t}.csv`' for t in tables)}; {len(rows)} rows, "
        f"{n_ok} simulated, the rest refused by the simulator (reasons in `predictions.csv`, "
        "summary below). Each row runs under its benchmark harness (`sim/validate/harness.py`; column "
        f"`harness` of `predictions.csv`). This run simulated {num_sim:,} rows (the others came from the cache); "
        "a cold run took 41 min with 1 worker on 2 cores shared with a 2-worker job (30,695 row simulations, "
        "2026-12-05; 11.4 min with 2 workers on idle cores before).",
        "",
        f"**Fit and scored-only rows**: the fits see the rows of {_fit_tables_text(args)}; the other tables' rows "
        "are scored only, with the per-engine values fitted without their group (a MoE row: the dense table's "
        "values, fitted without its GPU when its GPU is held out). "
        + _sample_text(rows, args),
        "",
        "**What is fitted**: four host/frontend overheads: per engine, the host's `cpu_step_overhead_s` and "
        f"`cpu_seq_overhead_s`; for every engine together, one value of each of {' and '.join(f'`{k}`' for k in SHARED_KEYS)} "
        "(the OpenAI-compatible HTTP streaming path, FastAPI in all three engines, and the harness's client; "
        "`SHARED_KEYS` in `sim/validate/crossval.py` says why), by coordinate search on a fixed "
        f"grid from the same neutral start for every fit ({', '.join(f'{k} {v:g}' for k, v in PRIOR.items())}), "
        f"round after round until one changes nothing (at most {args.rounds if args else MAX_ROUNDS}); "
        "loss = mean |log error| of TTFT + 3 x that of TPOT. Nothing per model, GPU, campaign or "
        f"concurrency. An engine with fewer than {MIN_FIT_ROWS} rows in a fold's fit set takes "
        + ("the shared values and one set of host overheads fitted on the other engines' rows together"
           if FALLBACK_USED[0] == "pooled" else
           "the median of the other engines' fits") + " (column `engines_not_fitted`).",
        "",
        "**Schemes**: *in-sample*: fitted on every fit row, scored on every row. *Leave one model / GPU / "
        "campaign out*: for each group, fitted on every other row, the group scored with those values; "
        "*pooled* = every row scored by the fold that held it out. The dense table records no campaign: "
        "there a row's campaign is its engine and version (one container run per release); "
        "`moe_agg_dev` rows carry their `campaign`.",
        "",
        "## Pooled (every row scored once per scheme)",
        "",
    ]
    lines += _md_table(pooled_df.assign(scheme=pooled_df["scheme"].map(lambda s: SCHEME_TITLES.get(s, s))),
                       ["scheme", "rows", "n", "n_ok", "ttft_mape", "ttft_mdape", "tpot_mape", "tpot_mdape"],
                       ["scheme", "rows", "n", "simulated", "TTFT MAPE %", "TTFT MdAPE %", "TPOT MAPE %",
                        "TPOT MdAPE %"])
    lines += ["", "## Every fold (held out vs in-sample on the same rows)", ""]
    lines += _md_table(folds_df, ["scheme", "held_out_group", "n", "n_simulated", "ttft_mape", "ttft_mdape",
                                  "tpot_mape", "tpot_mdape", "in_sample_ttft_mape", "in_sample_tpot_mape",
                                  "engines_not_fitted"],
                       ["scheme", "held out", "n", "simulated", "TTFT MAPE %", "TTFT MdAPE %", "TPOT MAPE %",
                        "TPOT MdAPE %", "in-sample TTFT MAPE %", "in-sample TPOT MAPE %", "not fitted"])
    lines += ["", "## Fitted values", "", "| fit | engine | rows | step | per seq | frontend latency | "
              "per streamed token | source |", "|---|---|---|---|---|---|---|---|"]

    def prow(name, eng, v):
        p = v["params"]
        return (f"| {name} | {eng} | {v['num_fit_rows']} | {p['cpu_step_overhead_s'] * 1e3:g} ms | "
                f"{p['cpu_seq_overhead_s'] * 1e6:g} µs | {p['frontend_latency_s'] * 1e3:g} ms | "
                f"{p['frontend_token_s'] * 1e6:g} µs | {v['source']} |")

    for eng, v in res["in_sample"]["params"].items():
        lines.append(prow("in-sample", eng, v))
    for f in res["folds"]:
        for eng, v in f["params"].items():
            lines.append(prow(f"without {f['scheme']} {f['group']}", eng, v))
    lines += ["", "Grid: " + "; ".join(f"`{k}` {', '.join(f'{x:g}' for x in g)}" for k, g in GRID.items()), ""]
    if iv and iv["engines"]:
        lines += ["## Prediction intervals (nominal 80 %)", "",
                  f"From the held-out residuals of the leave-one-{iv['scheme']}-out schemes together (rows whose "
                  "engine was fitted in the fold), per engine, each held-out group weighing its effective number "
                  "of independent residuals n / (1 + (n - 1) rho), rho their intraclass correlation (Kish's "
                  "design effect: the rows of one group share part of its error; rho = 1 is the CDF pooling of "
                  "Dunn, Wasserman & Ramdas, JASA 2023, arXiv:1809.07441, rho = 0 plain ranks; "
                  "`sim/results/intervals.py`): a prediction p carries "
                  "[p·exp(min(lo, 0)), p·exp(max(hi, 0))] (`sim/data/prediction_intervals.yaml`, used by "
                  "`validate`'s `pred_*_ms_lo/_hi` and `summary.json`'s `mean_*_ms_lo/_hi`).", "",
                  "| engine | metric | rows | groups | rho | lo factor | hi factor | shipped interval |",
                  "|---|---|---|---|---|---|---|---|"]
        for eng, ms in iv["engines"].items():
            for m, q in ms.items():
                lines.append(f"| {eng} | {m.upper()} | {q['n']}{' (all engines)' if q.get('pooled_over_engines') else ''}"
                             f" | {q.get('groups', '')} | {q.get('rho', math.nan):.2f} | {math.exp(q['lo']):.2f} | "
                             f"{math.exp(q['hi']):.2f} | x{math.exp(log_bounds(q)[0]):.2f}-{math.exp(log_bounds(q)[1]):.2f} |")
        cov = iv["coverage_other_groups"]

        def fmt(cv):
            return "; ".join(f"{m.upper()} {100 * c['share']:.0f} % of {c['n']}" for m, c in cv.items()
                             if c["share"] is not None)
        lines += ["", "Coverage on each held-out group when the percentiles come from the rows outside it only "
                  "(the interval as shipped, holding the point value): "
                  + fmt(cov) + " held-out residuals (target 75-85 %); by scheme: "
                  + "; ".join(f"leave one {s} out: {fmt(c)}" for s, c in iv.get("coverage_by_scheme", {}).items())
                  + ".", ""]
    refused: dict[str, int] = {}
    for p in res["in_sample"]["preds"]:
        if p.get("status") != "ok":
            reason = str(p.get("reason", ""))
            key = reason.split(";")[0]
            if len(key) > 300:  # (a whole word, marked as cut)
                key = key[:300].rsplit(" ", 1)[0] + " …"
            refused[key] = refused.get(key, 0) + 1
    if refused:
        lines += ["## Rows refused", "", "| rows | reason |", "|---|---|"]
        lines += [f"| {n} | {k.replace('|', '/')} |" for k, n in sorted(refused.items(), key=lambda x: -x[1])]
        lines.append("")
    lines += ["Files: `cv_folds.csv` (every fold), `cv_pooled.csv` (pooled by scheme, table and engine), "
              "`predictions.csv` (every row: measured, in-sample, each scheme's held-out and the shipped "
              "prediction), `fitted_params.json`, `summary.json`, `scatter_ttft.png` / `scatter_tpot.png` "
              "(leave-one-model-out predictions).", ""]
    if NOTES_FILE.exists():
        lines.append(NOTES_FILE.read_text().rstrip("\n"))
    (out / "README.md").write_text("\n".join(lines) + "\n")


def _safe(x):
    if isinstance(x, dict):
        return {str(k): _safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_safe(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


if __name__ == "__main__":
    main()
