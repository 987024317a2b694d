"""Fit the engine-level overheads on half of the silicon rows, score on the other half.

    python benchmarks/validate_silicon.py              # fit, then score; writes reports/validation/
    python benchmarks/validate_silicon.py --skip-fit   # score with the values in sim/engines.py

Data: ``../shared/silicon/dense_agg_dev.csv`` (580 closed-loop benchmark rows).
Split: a seeded random half of the rows (``numpy.random.default_rng(SPLIT_SEED)``
permutation, first half) is the *fit* half, the rest the *scored* half.

Fitted parameters: four per engine, all engine-level and physical
(``sim/engines.py``, ``sim/overheads.py``, ``sim/engine.py``), nothing per row,
group or concurrency:

- ``cpu_step_overhead_s``: host time per engine step;
- ``cpu_seq_overhead_s``: host time per scheduled sequence per step;
- ``frontend_latency_s``: send → scheduler latency of a request;
- ``frontend_token_s``: the frontend's time to stream one output token;
- ``client_phase_spread``: how far apart the closed-loop clients start, as a
  fraction of one request (``sim/client_phase.py``; 0 = all together).

Whether the host work overlaps the GPU (``overlap_scheduling``) is not fitted:
it is each engine's documented default. The fit is a coordinate search on a
fixed grid (two rounds), minimising the mean absolute log error of TTFT plus
twice that of TPOT over the engine's fit-half rows, simulated with ``--fit-requests-per-client``
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
    "frontend_token_s": [0.0, 10e-6, 20e-6, 40e-6, 80e-6],
    "client_phase_spread": [0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 1.0],
}
TPOT_WEIGHT = 2.0  # TPOT's target (10 %) is tighter than TTFT's
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
    from sim.validate import ValidateOptions, predict_rows

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
    ap.add_argument("--skip-fit", action="store_true", help="score with the fitted values in sim/engines.py")
    ap.add_argument("--protocol", default="aic", choices=("aic", "steady"),
                    help="benchmark protocol (sim/validate.py): aic = aiconfigurator's deployment and "
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

    from sim.client_phase import CLIENT_PHASE_SPREAD, PHASE_KEY
    from sim.engines import FITTED
    from sim.validate import read_rows

    df = read_rows(args.csv)
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

    from sim.validate import ValidateOptions, predict_rows
    from sim.validate_report import summarize_predictions, write_validation

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
    from sim.validate_report import _fmt

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
        "Regenerate this report from the fitted values in `sim/engines.py` (exactly these numbers; "
        "about 1-2 min on 2 cores):",
        "",
        "    python benchmarks/validate_silicon.py --skip-fit",
        "",
        "Refit (coordinate search on the fit half, then score; 10-25 min per engine on 2 cores). The "
        "values in `sim/engines.py` came from one round per engine started at the previous values "
        "(TensorRT-LLM: a second round changed nothing); a search from zero can stop elsewhere where "
        "the loss is flat:",
        "",
        "    python benchmarks/validate_silicon.py --fit-params cpu_step_overhead_s,cpu_seq_overhead_s,"
        "frontend_latency_s,frontend_token_s --rounds 1",
        "",
        f"Data: `../shared/silicon/dense_agg_dev.csv`, {num_rows} rows. Fit half / scored half: a "
        f"`numpy.random.default_rng({SPLIT_SEED})` permutation of the rows, first half fitted. Protocol per row "
        + (f"(`sim/validate.py`, protocol `aic`, as aiconfigurator measured these rows): the deployment "
           f"aiconfigurator's generator writes for batch size C (token budget C + isl + 1500, max batch C; "
           f"SGLang `max_prefill_tokens` isl + 1500 with `enable_mixed_chunk`), C closed-loop clients from a "
           f"cold start, "
           f"{summary['requests_per_client']}·C requests, every one measured (the first burst of C "
           f"included); isl in, exactly osl out. "
           if summary.get("protocol", "aic") == "aic" else
           f"(`sim/validate.py`, protocol `steady`): C closed-loop clients, 2·C warm-up requests, "
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



NOTES = """## Reading the results

**TPOT** is close to its target. It is dominated by the roofline step times and by
*who shares a step with whom*: under chunked or mixed batching every prefill that
lands in a request's lifetime stretches its decode steps, and under SGLang's
prefill-first scheduling (without mixed chunks) every admission stalls all
running decodes for one prefill step. Host overheads matter at large batches and
small models (`cpu_seq_overhead_s` 40-60 µs per sequence per step for vLLM and
TensorRT-LLM; TensorRT-LLM and SGLang overlap host work with the GPU, vLLM 0.12
does not).

**TTFT** is decided less by the roofline than by how the benchmark was run, and
the biggest single correction so far was to simulate the benchmark the way it was
actually run (next section).

## How the rows were measured (issue #7)

The rows come from aiconfigurator's own end-to-end evaluation (`silicon_data_source`
of `silicon_sample.csv` in aiconfigurator-core 0.12.0: `aic-auto-gap-analysis` data;
`batch_size` equals `concurrency` in all 580 rows). In ai-dynamo/aiconfigurator:

- the serving configs come from its generator, whose agg rules set the engine
  limits from the batch size: `agg max_num_tokens = max_batch_size + isl + 1500`
  for vLLM and TensorRT-LLM (TensorRT-LLM rounded up to `tokens_per_block` 32),
  SGLang `max_prefill_tokens = isl + 1500`
  (`src/aiconfigurator/generator/rule_plugin/{vllm,trtllm,sglang}.rule`,
  `rule_plugin/benchmark/*.rule`). With that budget one step prefills about one
  prompt, so a burst of C requests is prefilled over ~C steps, not one;
- its benchmark runners (`src/aiconfigurator/eval/benchmarks/`) run at fixed
  concurrency with 10·C requests: `bench_serving_runner.py` with `--num-prompts`
  10·C, `--max-concurrency` C, `--warmup-requests` 0 (every request measured,
  the initial burst included; TTFT timed from the send, after the slot is
  granted), `genai_perf_runner.py` with `--request-count` 10·C and
  `--warmup-request-count` 2·C;
- its queueing-model design notes (`docs/design/queueing_model.md`) treat the
  measured mean as a benchmark-length-blended mean over N requests that includes
  the initial burst ("transient window = initial concurrency burst"; "blended
  means against full-run benchmarks with matching N").

The `aic` protocol (`sim/validate.py`, the default) simulates exactly that:
generated limits, cold start, mean over all 10·C requests. What each part does,
scored half, TTFT MAPE / median APE, TPOT MAPE (fitted values unchanged):

| protocol | TTFT MAPE % | TTFT MdAPE % | TPOT MAPE % |
|---|---|---|---|
| `steady` (engine defaults, 2·C warm-up excluded, phases as fitted) | 63.6 | 43.4 | 10.2 |
| aic client only (cold start, all 10·C measured), engine default limits | 66.4 | 36.3 | 10.3 |
| aic limits only, 2·C warm-up excluded | 50.6 | 29.9 | 8.4 |
| **aic** (limits + cold start, all 10·C measured) | **42.5** | **15.9** | **8.4** |
| aic with 5·C requests | 52.0 | 27.8 | 9.1 |
| aic with 20·C requests | 44.9 | 21.2 | 8.1 |

Neither part alone explains the data; together, at the N the runner uses (10·C),
they do: the measured "partly clumped" clients are the cold-start burst
(prefilled one prompt per step: TTFT up to ~C prefills) averaged with a
steady state in which the small token budget keeps prefills from merging into
cohorts. On 8 sampled vLLM rows the `aic` protocol predicts TTFT within 9 % MAPE
(3 % median; e.g. Qwen3-32B TP8, isl 4,096, C = 128: 890 ms against 922 ms; the
burst alone is 5.9 s, the later requests 0.32 s). (The table's figures use the
host/frontend values fitted under `steady`, and SGLang without mixed chunks.)

The generator's SGLang agg rule also sets `enable_mixed_chunk = true`
(`rule_plugin/sglang.rule`): SGLang then mixes the running decodes into each
prefill batch instead of stalling them for a prefill-only step. The `aic`
protocol runs SGLang rows with the `chunked` schedule for that. Scored half,
SGLang rows, TTFT MAPE / median APE, TPOT MAPE: prefill-first 94.0 / 19.3 / 6.0 %
→ mixed 32.5 / 24.0 / 12.5 %. The 25 SGLang 0.5.6 Llama-3.1-8B H200 rows go from
229 % to 35 % TTFT MAPE; the 43 Qwen3-32B H100 rows (SGLang 0.5.1 / 0.5.8) from
15 % to 35 % (TPOT 6 % → 10 %): those fit prefill-first better and were probably
deployed by an earlier generator without mixed chunks. One setting for every
SGLang row is kept (a per-campaign choice would be fitting groups).

The four host/frontend values per engine were then refitted under `aic` (one
coordinate-search round per engine; TensorRT-LLM a second round), giving the
table above.

## Known puzzles

1. **TensorRT-LLM TTFT grows with the output length at fixed concurrency**
   (Llama-3.1-8B, H100, TP1, C = 8: 190 / 318 / 550 ms for osl 128 / 256 / 512).
   Across the TensorRT-LLM Llama-3.1-8B rows at C = 8-32, the measured TTFT is
   about E2E/C plus a few tens of ms, at every TP. E2E/C is the mean time between
   two completions in a closed loop of C clients, so each new request seems to
   wait for *one more completion* before its prefill starts. Nothing we model or
   found documented does that: the KV cache is far from full (TP 8 has eight times
   the room and shows the same), and `max_batch_size` / `max_num_tokens` do not
   bind at C = 8. The TensorRT-LLM Qwen3-32B rows of the same version do not show
   it (272 / 273 / 263 ms for osl 128 / 256 / 512 at C = 8, TP1). Our reading: a
   property of the client used for those rows, e.g. one that starts the TTFT clock
   when the next request is prepared (at the previous completion) rather than when
   it is sent, so the time waiting for a concurrency slot, about E2E/C, lands in
   TTFT (`vllm bench serve` excludes it). It is not modelled; these rows are
   under-predicted at long osl (residual plot).

2. **SGLang TPOT is flat across TP at very high concurrency** (Llama-3.1-8B FP8,
   H200, C = 512: ~23-34 ms at TP 2, 4 and 8). With hundreds of running requests
   the step is bound by work that does not shrink with TP: SGLang's Python
   scheduler and output processing touch every running request every step, and
   the frontend detokenizes and streams every token. Under the `steady` protocol
   the fit put it in host time per sequence (`cpu_seq_overhead_s` 40 µs, overlapped
   with the GPU); under `aic` with mixed chunks it puts it in the frontend's
   streaming (`frontend_token_s` 80 µs per token, a grid edge, `cpu_seq_overhead_s`
   0): the data cannot tell the two apart, both scale with the running requests
   and not with TP. With mixed chunks it is reproduced less well than before: the
   few SGLang H200 TP 4 / TP 8 rows on the scored half are 32-42 % off in TPOT.

3. **Where the KV cache binds, TTFT is all admission.** Qwen3-32B in bf16 on one
   H100 under SGLang keeps about 13 k tokens of KV next to 61 GiB of weights
   (`mem_fraction_static` 0.834): of 16 clients with 1,152-token requests only
   ~11 run, the others queue for a completion, so TTFT grows with osl (6.8 / 14.6 /
   28.9 s measured at osl 128 / 256 / 512). Likewise vLLM Qwen3-32B TP 2 with
   4,096-token prompts at C = 128 (19-59 s). The simulator reproduces the queueing
   (those vLLM rows 15-21 % low; the C = 64, osl 1,024 one, just at the edge of
   the cache, a third of the measurement); the size of the error follows the KV
   size, i.e. each engine's memory rule and its reserve constants. SGLang's TP 1
   rows are still under-predicted 2-3x: its pool is probably smaller than the
   0.834-of-memory heuristic gives for 0.5.8, or its retraction more frequent.

## Where the model is still wrong, and why

- **The earlier cohort analysis** (under the `steady` protocol, engine default
  limits: clients settle into cohorts, e.g. vLLM Qwen3-32B TP2, isl 1,024, C = 8:
  one request alone and seven in one 7,168-token prefill step every cycle; noise,
  serial frontends and random delays did not split them; `client_phase_spread`
  interpolated between cohorts and spread clients) is superseded by the `aic`
  protocol: with the generated token budget a cohort cannot be prefilled in one
  step, and the measured mean includes the cold-start burst.
  `client_phase_spread` only applies to `--protocol steady`.
- **SGLang's two campaigns disagree on mixed chunks**: the 0.5.6 Llama-3.1-8B
  H200 rows need them (without: 2-3x over-predicted), the 0.5.1 / 0.5.8 Qwen3-32B
  H100 rows fit better without them (TTFT 15 % vs 35 % MAPE, TPOT 6 % vs 10 %).
  Which generator version produced which rows is not recorded; one setting is
  kept for all SGLang rows.
- **The TensorRT-LLM Llama-3.1-8B client artefact** (puzzle 1).
- **TensorRT-LLM at C = 128 with TP ≥ 2**: measured TTFT 0.5-2 s with TPOT 10-23 ms
  looks like requests waiting for a slot (as if ~75-90 % of C were admitted); we
  found no engine limit that explains it and predict 0.1-0.4 s.
- **Fitted values at grid edges** (SGLang `frontend_latency_s` 80 ms; every
  engine's `frontend_token_s` 80 µs, where the loss is nearly flat) are
  compensating for the above rather than measuring a physical latency; read them
  as upper bounds.
- The cost model uses the calibrated per-kernel efficiency curves (`fitted_v1` profiles).
"""


if __name__ == "__main__":
    main()
