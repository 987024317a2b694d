"""Fit the engine-level overheads on half of the silicon rows, score on the other half.

    python benchmarks/validate_silicon.py              # fit, then score; writes reports/validation/
    python benchmarks/validate_silicon.py --skip-fit   # score with the values in sim/presets/<engine>.py

Data: ``../shared/silicon/dense_agg_dev.csv`` (580 closed-loop benchmark rows).
Split: a seeded random half of the rows (``numpy.random.default_rng(SPLIT_SEED)``
permutation, first half) is the *fit* half, the rest the *scored* half.

Fitted parameters: four per engine, all engine-level and physical
(``sim/presets/<engine>.py``, ``sim/cost_model/overheads.py``, ``sim/engine/simulation.py``), nothing per row,
group or concurrency:

- ``cpu_step_overhead_s``: host time per engine step;
- ``cpu_seq_overhead_s``: host time per scheduled sequence per step;
- ``frontend_latency_s``: send → scheduler latency of a request;
- ``frontend_token_s``: the frontend's time to stream one output token;
- ``client_phase_spread``: how far apart the closed-loop clients start, as a
  fraction of one request (``sim/workload/client_phase.py``; 0 = all together).

Whether the host work overlaps the GPU (``overlap_scheduling``) is not fitted:
it is each engine's documented default. The fit is a coordinate search on a
fixed grid (two rounds), minimising the mean absolute log error of TTFT plus
three times that of TPOT (each error in units of its target: 30 % and 10 %) over the engine's fit-half rows, simulated with ``--fit-requests-per-client``
(4) measured requests per client; the score uses the full protocol (10).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPLIT_SEED = 0
NOTES = ""  # the closing notes of the README (filled below the code)
GRID = {
    "cpu_step_overhead_s": [0.0, 0.5e-3, 1e-3, 2e-3, 4e-3, 8e-3],
    "cpu_seq_overhead_s": [0.0, 5e-6, 10e-6, 20e-6, 40e-6, 60e-6, 80e-6],
    "frontend_latency_s": [0.0, 5e-3, 10e-3, 20e-3, 40e-3, 80e-3],
    "frontend_token_s": [0.0, 10e-6, 20e-6, 30e-6, 40e-6, 50e-6, 60e-6, 80e-6, 120e-6],
    "client_phase_spread": [0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 1.0],
}
# Each metric's log error in units of its MAPE target (TTFT 30 %, TPOT 10 %): TPOT weighs 3x.
TPOT_WEIGHT = 3.0
ENGINES = ("vllm", "sglang", "trtllm")


def split(df) -> np.ndarray:
    """Boolean mask of the fit half (seeded permutation, first half)."""
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(df))
    fit = np.zeros(len(df), dtype=bool)
    fit[perm[: len(df) // 2]] = True
    return fit


def loss(rows: list[dict], preds: list[dict]) -> float:
    errs = []
    for r, p in zip(rows, preds):
        if p["status"] != "ok":
            continue
        errs.append(abs(math.log(p["pred_ttft_ms"] / r["silicon_ttft_ms"]))
                    + TPOT_WEIGHT * abs(math.log(p["pred_tpot_ms"] / r["silicon_tpot_ms"])))
    return float(np.mean(errs)) if errs else math.inf


def fit_engine(engine: str, rows: list[dict], rpc: int, workers: int | None, rounds: int = 2,
               params: tuple[str, ...] = tuple(GRID), start: dict | None = None, protocol: str = "aic") -> dict:
    """Coordinate search over ``GRID[k]`` for each k in ``params``, from ``start``
    (default: every parameter 0); the other parameters stay at their start value."""
    from sim.validate.rows import ValidateOptions, predict_rows

    cache: dict[tuple, float] = {}

    def evaluate(params: dict) -> float:
        key = tuple(sorted(params.items()))
        if key not in cache:
            opts = ValidateOptions(protocol=protocol, requests_per_client=rpc, workers=workers,
                                   engine_overrides={engine: params})
            t0 = time.perf_counter()
            cache[key] = loss(rows, predict_rows(rows, opts))
            print(f"  {engine} {params} -> loss {cache[key]:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
        return cache[key]

    best = {k: 0.0 for k in GRID}
    best.update({k: v for k, v in (start or {}).items() if k in GRID})
    best_loss = evaluate(best)
    for _ in range(rounds):
        changed = False
        for k in params:
            for v in GRID[k]:
                trial = dict(best, **{k: v})
                lo = evaluate(trial)
                if lo < best_loss - 1e-9:
                    best, best_loss, changed = trial, lo, True
        if not changed:
            break
    return {"params": best, "fit_loss": best_loss, "num_evaluations": len(cache)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=str(ROOT.parent / "shared" / "silicon" / "dense_agg_dev.csv"))
    ap.add_argument("--out", default=str(ROOT / "reports" / "validation"))
    ap.add_argument("--skip-fit", action="store_true", help="score with the fitted values in sim/presets/<engine>.py")
    ap.add_argument("--protocol", default="aic", choices=("aic", "steady"),
                    help="benchmark protocol (sim/validate/rows.py): aic = aiconfigurator's deployment and "
                         "client (cold start, all 10·C requests measured); steady = the earlier one")
    ap.add_argument("--fit-requests-per-client", type=int, default=None,
                    help="requests per client while fitting (default: aic 10, as the mean covers the "
                         "initial burst at weight 1/rpc; steady 4)")
    ap.add_argument("--requests-per-client", type=int, default=10)
    ap.add_argument("--engines", default=",".join(ENGINES), help="engines to fit (default: all)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--fit-params", default=",".join(GRID),
                    help="parameters to fit (default: all); with a subset, the others stay at their "
                         "current fitted values and the search starts there")
    ap.add_argument("--rounds", type=int, default=2, help="coordinate-search rounds")
    args = ap.parse_args()
    if args.fit_requests_per_client is None:
        args.fit_requests_per_client = args.requests_per_client if args.protocol == "aic" else 4
    fit_params = tuple(p for p in args.fit_params.split(",") if p)
    unknown = [p for p in fit_params if p not in GRID]
    if unknown:
        ap.error(f"--fit-params: unknown parameter(s) {', '.join(unknown)}; valid: {', '.join(GRID)}")

    from sim.workload.client_phase import CLIENT_PHASE_SPREAD, PHASE_KEY
    from sim.presets import FITTED
    from sim.validate.rows import read_rows, skipped_row_warnings

    df, skipped = read_rows(args.csv)
    for w in skipped_row_warnings(args.csv, skipped):
        print(f"warning: {w}", file=sys.stderr)
    fit_mask = split(df)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fitted = {e: dict(FITTED[e], **{PHASE_KEY: CLIENT_PHASE_SPREAD[e]}) for e in ENGINES}
    fit_info: dict = {}
    if not args.skip_fit:
        fit_rows = df[fit_mask]
        for eng in args.engines.split(","):
            rows = fit_rows[fit_rows["backend"] == eng].to_dict("records")
            print(f"fitting {eng} on {len(rows)} fit-half rows", flush=True)
            t0 = time.perf_counter()
            subset = set(fit_params) != set(GRID)
            res = fit_engine(eng, rows, args.fit_requests_per_client, args.workers, rounds=args.rounds,
                             params=fit_params, start=fitted[eng] if subset else None,
                             protocol=args.protocol)
            res["wall_s"] = time.perf_counter() - t0
            fitted[eng] = dict(res["params"])
            fit_info[eng] = res
            print(f"  best {eng}: {res['params']} loss {res['fit_loss']:.4f}", flush=True)
        (out / "fitted_params.json").write_text(json.dumps(
            {"date": date.today().isoformat(), "split_seed": SPLIT_SEED, "protocol": args.protocol,
             "fit_requests_per_client": args.fit_requests_per_client, "fit_params": list(fit_params),
             "fitted": fitted, "fit": fit_info},
            indent=2) + "\n")
    score(df, fit_mask, fitted, args, out)


def score(df, fit_mask, fitted: dict, args, out: Path) -> None:
    import pandas as pd

    from sim.validate.rows import ValidateOptions, predict_rows
    from sim.validate.report import summarize_predictions, write_validation

    opts = ValidateOptions(protocol=args.protocol, requests_per_client=args.requests_per_client,
                           workers=args.workers, engine_overrides=fitted)
    t0 = time.perf_counter()
    preds = predict_rows(df.to_dict("records"), opts)
    wall = time.perf_counter() - t0
    full = pd.concat([df, pd.DataFrame(preds, index=df.index)], axis=1)
    full["half"] = np.where(fit_mask, "fit", "scored")
    scored = summarize_predictions(full[~fit_mask])
    fit_s = summarize_predictions(full[fit_mask])
    everything = summarize_predictions(full)
    scored["wall_time_s_all_rows"] = wall
    summary = {"scored_half": scored, "fit_half": fit_s, "all_rows": everything, "fitted": fitted,
               "protocol": args.protocol, "requests_per_client": args.requests_per_client,
               "split_seed": SPLIT_SEED, "workers": args.workers}
    # Files and figures of the scored half; then predictions.csv of every row (with its half).
    write_validation(full[~fit_mask], scored, out, title="Validation on the scored half")
    full.to_csv(out / "predictions.csv", index=False)
    (out / "summary.json").write_text(json.dumps(_safe(summary), indent=2) + "\n")
    write_readme(out, summary, wall, len(df))
    for name, s in (("fit half", fit_s), ("scored half", scored), ("all rows", everything)):
        o = s["overall"]
        print(f"{name:12s} n={o['n']:3d}  TTFT MAPE {o['ttft_mape']:.1f}%  MdAPE {o['ttft_mdape']:.1f}%  |  "
              f"TPOT MAPE {o['tpot_mape']:.1f}%  MdAPE {o['tpot_mdape']:.1f}%")
    print(f"simulated all {len(df)} rows in {wall:.0f} s; report in {out}")


def _table(s: dict) -> list[str]:
    from sim.validate.report import _fmt

    lines = ["| group | n | TTFT MAPE % | TTFT median APE % | TTFT over-predicted | TPOT MAPE % | "
             "TPOT median APE % | TPOT over-predicted |", "|---|---|---|---|---|---|---|---|"]

    def line(name, g):
        return (f"| {name} | {g['n']} | {_fmt(g['ttft_mape'])} | {_fmt(g['ttft_mdape'])} | "
                f"{_fmt(100 * g['ttft_over_share'])} % | {_fmt(g['tpot_mape'])} | {_fmt(g['tpot_mdape'])} | "
                f"{_fmt(100 * g['tpot_over_share'])} % |")

    lines.append(line("**all**", s["overall"]))
    lines += [line(f"**{k}**", g) for k, g in s["by_engine"].items()]
    lines += [line(k, g) for k, g in s["by_group"].items()]
    return lines


def write_readme(out: Path, summary: dict, wall: float, num_rows: int) -> None:
    """reports/validation/README.md: numbers from this run, then the notes."""
    sc, fi, al = summary["scored_half"], summary["fit_half"], summary["all_rows"]
    fitted = summary["fitted"]
    lines = [
        "# Validation against measured serving benchmarks",
        "",
        "Regenerate this report from the fitted values in `sim/presets/<engine>.py` (exactly these numbers; "
        "about 1-2 min on 2 cores):",
        "",
        "    python benchmarks/validate_silicon.py --skip-fit",
        "",
        "Refit (coordinate search on the fit half, then score; 2-10 min per engine on 2 cores). The "
        "values in `sim/presets/<engine>.py` came from this command, which starts at the previous values and "
        "stops after a round that changes nothing (at most two rounds); a search from zero can stop "
        "elsewhere where the loss is flat. It writes `fitted_params.json`; copy the values into "
        "each engine's `fitted` in `sim/presets/<engine>.py`, then regenerate:",
        "",
        "    python benchmarks/validate_silicon.py --fit-params cpu_step_overhead_s,cpu_seq_overhead_s,"
        "frontend_latency_s,frontend_token_s --rounds 2",
        "",
        f"Data: `../shared/silicon/dense_agg_dev.csv`, {num_rows} rows. Fit half / scored half: a "
        f"`numpy.random.default_rng({SPLIT_SEED})` permutation of the rows, first half fitted. Protocol per row "
        + (f"(`sim/validate/rows.py`, protocol `aic`, as aiconfigurator measured these rows): the deployment "
           f"aiconfigurator's generator writes for batch size C (token budget C + isl + 1500, max batch C; "
           f"SGLang `max_prefill_tokens` isl + 1500 with `enable_mixed_chunk`), C closed-loop clients from a "
           f"cold start, "
           f"{summary['requests_per_client']}·C requests, every one measured (the first burst of C "
           f"included); isl in, exactly osl out. "
           if summary.get("protocol", "aic") == "aic" else
           f"(`sim/validate/rows.py`, protocol `steady`): C closed-loop clients, 2·C warm-up requests, "
           f"{summary['requests_per_client']}·C measured; isl in, exactly osl out. ")
        + f"All {num_rows} rows "
        f"simulated in {wall:.0f} s ({summary.get('workers') or 'all'} worker processes).",
        "",
        "## Scores on the scored half",
        "",
        "Targets: TPOT MAPE ≤ 10 %, TTFT median APE ≤ 20 %, TTFT MAPE ≤ 30 %.",
        "",
    ]
    lines += _table(sc)
    lines += ["", "Fit half, for comparison:", ""] + _table(fi)[:2 + 1 + len(fi["by_engine"])]
    lines += ["", "All rows:", ""] + _table(al)[:2 + 1 + len(al["by_engine"])]
    lines += ["", "## Fitted engine parameters", "",
              "| engine | cpu_step_overhead_s | cpu_seq_overhead_s | frontend_latency_s | frontend_token_s "
              "| client_phase_spread |",
              "|---|---|---|---|---|---|"]
    for eng, p in fitted.items():
        lines.append(f"| {eng} | {p.get('cpu_step_overhead_s', 0) * 1e3:g} ms | "
                     f"{p.get('cpu_seq_overhead_s', 0) * 1e6:g} µs | {p.get('frontend_latency_s', 0) * 1e3:g} ms | "
                     f"{p.get('frontend_token_s', 0) * 1e6:g} µs | {p.get('client_phase_spread', 0):g} |")
    lines += ["", "Figures: `scatter_ttft.png`, `scatter_tpot.png` (scored half, one colour per engine, "
              "y = x and ±30 %), `residuals_by_group.png` (scored half, signed log2 error by group). "
              "`predictions.csv` has every row with its half and the prediction.", ""]
    lines.append(NOTES)
    (out / "README.md").write_text("\n".join(lines) + "\n")


def _safe(x):
    if isinstance(x, dict):
        return {str(k): _safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_safe(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x



#: The analysis appended to the generated README (edit the markdown file; numbers
#: in it are the ones measured when it was written, the tables above it are regenerated).
NOTES = (Path(__file__).with_name("validation_notes.md")).read_text().rstrip("\n")


if __name__ == "__main__":
    main()
