"""Leave-one-group-out cross-validation of the engine-level fitted parameters.

What servesim fits (and nothing else): per engine, the four host/frontend
overheads of :data:`sim.presets.types.OVERHEAD_KEYS` that
``EnginePreset.fitted`` holds (``cpu_step_overhead_s``,
``cpu_seq_overhead_s``, ``frontend_latency_s``, ``frontend_token_s``).
Everything else (roofline, kernel efficiency curves, engine rules, the
benchmark harness) is fixed before any measured row is seen.

A *scheme* partitions the measured rows into groups (:data:`SCHEMES`): by
model, by GPU (``system``) or by measurement campaign
(:func:`campaign_of`). For each group (a *fold*) the parameters are fitted
on every other row and the group is scored with them, so no held-out row
influenced the values it is scored with. ``in_sample`` is the single fit on
every row, scored on every row: the figure the held-out ones are compared
with.

The fit (:func:`fit_fold`) is a coordinate search over :data:`GRID` (every
parameter in turn, in :data:`GRID`'s order, round after round until a round
changes nothing, at most :data:`MAX_ROUNDS`) from the neutral start
:data:`PRIOR` (the same for every engine and fold, not taken from any fit),
minimising the mean over the fit rows of ``|log(pred/meas)|`` of TTFT plus
:data:`TPOT_WEIGHT` times that of TPOT. The host overheads are searched per
engine on its own rows; the frontend's two keys (:data:`SHARED_KEYS`) take one
value for every engine, searched on all the engines' rows together.
An engine with fewer than :data:`MIN_FIT_ROWS` fit rows in a fold is not
fitted there (:data:`FALLBACK`): it takes the shared keys and one set of host
overheads fitted on the other engines' fit rows together (``pooled``: the host
overheads of a serving engine in general), or the per-parameter median of
their fits (``median``), or :data:`PRIOR` if no engine has rows.

Every (engine, parameter set) is simulated once on every row of that engine
(:class:`PredictionCache`, optionally persisted as JSON lines), so the folds
share simulations: the loss of a fold is a sum over a subset of cached rows.

This module holds the logic only; ``benchmarks/validate_silicon.py`` runs it
on ``../shared/silicon/`` and writes ``reports/validation/``.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: The fitted parameters and the grid each is searched on (s).
GRID: dict[str, list[float]] = {
    "cpu_step_overhead_s": [0.0, 0.5e-3, 1e-3, 2e-3],
    "cpu_seq_overhead_s": [0.0, 20e-6, 40e-6, 60e-6, 80e-6],
    "frontend_latency_s": [0.0, 10e-3, 20e-3, 40e-3, 80e-3],
    "frontend_token_s": [0.0, 20e-6, 40e-6, 60e-6, 80e-6],
}
#: Keys fitted as one value for every engine (:func:`fit_fold`): the streaming
#: path between the engine and the benchmark client, an OpenAI-compatible Python
#: HTTP server in all three engines, FastAPI on uvicorn, tokenizing the prompt
#: and detokenizing and serializing each streamed chunk as server-sent events
#: (vLLM ``vllm/entrypoints/openai/api_server.py``, SGLang
#: ``python/sglang/srt/entrypoints/http_server.py``, TensorRT-LLM
#: ``tensorrt_llm/serve/openai_server.py``: "trtllm-serve ... a FastAPI server
#: compatible with OpenAI APIs", ``examples/serve/README.md``),
#: measured by the same client of one harness. Per engine they are not
#: identifiable from the table: each engine's dense rows come from one or two
#: models and releases, and a per-engine fit traded them against the engine's
#: host overheads (with the model held out: SGLang's latency 80 ms, vLLM's 0).
SHARED_KEYS: tuple[str, ...] = ("frontend_latency_s", "frontend_token_s")
#: Neutral start of every search: mid-grid physical values, not any fit's result.
PRIOR: dict[str, float] = {"cpu_step_overhead_s": 1e-3, "cpu_seq_overhead_s": 20e-6,
                           "frontend_latency_s": 10e-3, "frontend_token_s": 40e-6}
#: Coordinate-search rounds at most (the search stops after a round that changes nothing;
#: one round left the fits short of a minimum: 2026-12-05, dense table, 2 to 3 rounds converge).
MAX_ROUNDS = 10
#: TPOT's log error weighs 3x TTFT's (their MAPE targets, 30 % and 10 %).
TPOT_WEIGHT = 3.0
#: Fewer fit rows than this: the engine is not fitted in that fold (:data:`FALLBACK`).
MIN_FIT_ROWS = 10
#: scheme -> the row column (or function) whose value is a row's group.
SCHEMES: dict[str, str] = {"model": "model_path", "system": "system", "campaign": "campaign"}

Pred = dict[str, Any]
PredictFn = Callable[[list[dict], str, dict[str, float]], list[Pred]]


def campaign_of(row: dict) -> str:
    """A row's measurement campaign: its ``campaign`` cell, else (tables that do
    not record one, e.g. the dense table) its engine and version, the nearest
    recorded thing: rows of one engine release were measured in one container
    run."""
    c = row.get("campaign")
    if isinstance(c, str) and c.strip():
        return c.strip()
    v = row.get("backend_version")
    v = str(v).strip() if v is not None and not (isinstance(v, float) and math.isnan(v)) else "?"
    return f"{row.get('backend', '?')} {v}"


def group_of(row: dict, scheme: str) -> str:
    if scheme not in SCHEMES:
        raise KeyError(f"unknown scheme {scheme!r}; valid: {', '.join(SCHEMES)}")
    if scheme == "campaign":
        return campaign_of(row)
    return str(row.get(SCHEMES[scheme]))


def folds(rows: Sequence[dict], scheme: str) -> dict[str, list[int]]:
    """group -> indices of its rows (the held-out set of that fold), groups sorted."""
    out: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        out.setdefault(group_of(r, scheme), []).append(i)
    return dict(sorted(out.items()))


def _key(params: dict[str, float]) -> str:
    return json.dumps({k: float(params[k]) for k in sorted(params)}, sort_keys=True)


class PredictionCache:
    """Predictions of every row of one engine under one parameter set,
    simulated on first use (``predict_fn(rows, engine, params)``), kept in
    memory and, with ``path``, appended to a JSON-lines file that a later run
    reads back (rows are keyed by ``row_key``)."""

    def __init__(self, rows: Sequence[dict], predict_fn: PredictFn, path: str | Path | None = None,
                 log: Callable[[str], None] | None = None):
        self.rows = list(rows)
        self.predict_fn = predict_fn
        self.path = Path(path) if path else None
        self.log = log or (lambda s: None)
        self.by_engine: dict[str, list[int]] = {}
        for i, r in enumerate(self.rows):
            self.by_engine.setdefault(str(r["backend"]), []).append(i)
        self._disk: dict[tuple[str, str], Pred] = {}
        self._mem: dict[tuple[str, str], dict[int, Pred]] = {}
        self.num_simulated = 0
        if self.path and self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    d = json.loads(line)
                except json.JSONDecodeError:
                    continue
                self._disk[(d["params"], d["row_key"])] = d["pred"]

    def get(self, engine: str, params: dict[str, float], idx: Sequence[int] | None = None) -> dict[int, Pred]:
        """row index -> prediction, for the rows ``idx`` of ``engine`` (every row
        of ``engine`` by default); rows of another engine in ``idx`` are ignored.
        The returned mapping may hold more rows (those asked for before)."""
        pk = _key(params)
        mem = self._mem.setdefault((engine, pk), {})
        want = self.by_engine.get(engine, [])
        if idx is not None:
            mine = set(want)
            want = [i for i in idx if i in mine]
        todo = []
        for i in want:
            if i in mem:
                continue
            hit = self._disk.get((f"{engine} {pk}", self.rows[i]["row_key"]))
            if hit is not None:
                mem[i] = hit
            else:
                todo.append(i)
        if todo:
            preds = self.predict_fn([self.rows[i] for i in todo], engine, dict(params))
            self.num_simulated += len(todo)
            lines = []
            for i, p in zip(todo, preds):
                keep = {k: p.get(k) for k in ("pred_ttft_ms", "pred_tpot_ms", "status", "reason")}
                mem[i] = keep
                lines.append(json.dumps({"params": f"{engine} {pk}", "row_key": self.rows[i]["row_key"],
                                         "pred": keep}))
            if self.path:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a") as f:
                    f.write("\n".join(lines) + "\n")
        return mem


def row_error(row: dict, pred: Pred) -> float | None:
    """The fit's loss of one row (None if it was not simulated)."""
    if pred.get("status") != "ok":
        return None
    t, p = pred.get("pred_ttft_ms"), pred.get("pred_tpot_ms")
    if not (t and p and t > 0 and p > 0):
        return None
    return (abs(math.log(t / float(row["silicon_ttft_ms"])))
            + TPOT_WEIGHT * abs(math.log(p / float(row["silicon_tpot_ms"]))))


def _errors(cache: PredictionCache, engine: str, params: dict[str, float], idx: Sequence[int]) -> list[float]:
    """The row losses of ``engine``'s rows ``idx`` under ``params`` (rows not simulated left out)."""
    preds = cache.get(engine, params, idx)
    return [e for i in idx if i in preds and (e := row_error(cache.rows[i], preds[i])) is not None]


def _mean_loss(cache: PredictionCache, params: dict[str, dict[str, float]], rows_of: dict[str, list[int]],
               engines: Sequence[str]) -> float:
    """The mean row loss over ``engines``' rows together, each engine under its own values."""
    errs = [e for eng in engines for e in _errors(cache, eng, params[eng], rows_of[eng])]
    return sum(errs) / len(errs) if errs else math.inf


def coordinate_search(cache: PredictionCache, params: dict[str, dict[str, float]], rows_of: dict[str, list[int]],
                      coords: Sequence[tuple[str, Sequence[str]]], grid: dict[str, list[float]] | None = None,
                      rounds: int = MAX_ROUNDS) -> dict[str, dict[str, float]]:
    """Coordinate search from ``params`` (engine -> values; a new dict is
    returned): each coordinate ``(key, engines)`` gives ``key`` one value for
    all of ``engines``, chosen on ``grid`` (:data:`GRID`) by the mean loss over
    their rows ``rows_of`` together (a value replaces the current one when better
    by more than 1e-9), coordinate after coordinate in the order given, round
    after round until one changes nothing (at most ``rounds``)."""
    grid = grid or GRID
    params = {e: dict(p) for e, p in params.items()}
    for _ in range(rounds):
        changed = False
        for k, engines in coords:
            best = _mean_loss(cache, params, rows_of, engines)
            for v in grid[k]:
                if v == params[engines[0]][k]:
                    continue
                trial = {e: dict(params[e], **{k: v}) for e in engines}
                lo = _mean_loss(cache, trial, rows_of, engines)
                if lo < best - 1e-9:
                    best, changed = lo, True
                    params.update(trial)
        if not changed:
            break
    return params


#: how an engine without fit rows in a fold gets its values: "pooled" (its own keys fitted on every
#: other engine's fit rows together, the shared keys as fitted) or "median" (per-parameter median
#: of the other engines' fits)
FALLBACK = "pooled"


def fit_fold(cache: PredictionCache, fit_idx: Sequence[int], engines: Sequence[str], rounds: int = MAX_ROUNDS,
             fallback: str | None = None) -> dict[str, dict[str, Any]]:
    """engine -> {"params", "loss", "num_fit_rows", "source": fitted | pooled ... | median ... | prior}.

    One coordinate search over every engine's parameters at once
    (:data:`GRID`'s order, up to ``rounds`` rounds, stopping after a round
    that changes nothing): a key of :data:`SHARED_KEYS` takes one value for
    every engine, searched on the loss over all the fitted engines' rows
    together; any other key is searched per engine on that engine's rows.
    ``loss``: the engine's own mean loss under its values."""
    fallback = fallback or FALLBACK
    fit_set = set(fit_idx)
    ok_rows: dict[str, list[int]] = {}
    for eng in engines:
        idx = [i for i in cache.by_engine.get(eng, []) if i in fit_set]
        prior = cache.get(eng, PRIOR, idx)
        ok_rows[eng] = [i for i in idx if row_error(cache.rows[i], prior[i]) is not None]
    fitted = [e for e in engines if len(ok_rows[e]) >= MIN_FIT_ROWS]
    missing = [e for e in engines if e not in fitted]
    # GRID's order; a shared key one coordinate for every fitted engine, any other one per engine
    coords = [c for k in GRID for c in ([(k, fitted)] if k in SHARED_KEYS else [(k, [e]) for e in fitted])]
    params = coordinate_search(cache, {e: dict(PRIOR) for e in fitted}, ok_rows, coords, rounds=rounds) \
        if fitted else {}
    out: dict[str, dict[str, Any]] = {
        e: {"params": params[e], "loss": _mean_loss(cache, params, ok_rows, [e]), "num_fit_rows": len(ok_rows[e]),
            "source": "fitted"} for e in fitted}
    if missing and fitted and fallback == "pooled":
        # one set of host overheads for the fitted engines' rows together, the shared keys as fitted
        start = {k: (params[fitted[0]][k] if k in SHARED_KEYS else v) for k, v in PRIOR.items()}
        pooled = coordinate_search(cache, {e: start for e in fitted}, ok_rows,
                                   [(k, fitted) for k in GRID if k not in SHARED_KEYS], rounds=rounds)
        lo = _mean_loss(cache, pooled, ok_rows, fitted)
        for eng in missing:
            out[eng] = {"params": dict(pooled[fitted[0]]), "loss": lo, "num_fit_rows": len(ok_rows[eng]),
                        "source": f"pooled fit on the other engines' rows ({', '.join(fitted)})"}
    elif missing and fitted:
        for eng in missing:
            p = {k: (params[fitted[0]][k] if k in SHARED_KEYS else statistics.median(params[e][k] for e in fitted))
                 for k in PRIOR}
            out[eng] = {"params": p, "loss": math.nan, "num_fit_rows": len(ok_rows[eng]),
                        "source": "median of the engines fitted in this fold"}
    for eng in missing:
        if eng not in out:
            out[eng] = {"params": dict(PRIOR), "loss": math.nan, "num_fit_rows": len(ok_rows[eng]),
                        "source": "prior (no engine had fit rows)"}
    return {e: out[e] for e in engines}


def scores(rows: Sequence[dict], preds: Sequence[Pred]) -> dict[str, Any]:
    """n, n_ok, TTFT/TPOT MAPE and median APE (%) of the simulated rows."""
    out: dict[str, Any] = {"n": len(rows), "n_ok": 0}
    apes: dict[str, list[float]] = {"ttft": [], "tpot": []}
    for r, p in zip(rows, preds):
        if p.get("status") != "ok":
            continue
        out["n_ok"] += 1
        for m in apes:
            meas, pr = float(r[f"silicon_{m}_ms"]), p.get(f"pred_{m}_ms")
            if pr is not None and math.isfinite(pr) and meas > 0:
                apes[m].append(abs(pr - meas) / meas * 100)
    for m, a in apes.items():
        out[f"{m}_mape"] = sum(a) / len(a) if a else math.nan
        out[f"{m}_mdape"] = statistics.median(a) if a else math.nan
    return out


def cross_validate(cache: PredictionCache, schemes: Sequence[str], rounds: int = MAX_ROUNDS,
                   log: Callable[[str], None] | None = None,
                   fit_row: Callable[[dict], bool] | None = None) -> dict[str, Any]:
    """In-sample fit and every fold of every scheme. Returns
    ``{"in_sample": {"params", "preds"}, "folds": [...], "held_out": {scheme: [pred per row]}}``
    where each fold has scheme, group, held-out row indices, the fold's
    parameters per engine and the held-out predictions.

    ``fit_row``: which rows may enter a fit (default: every row). The others
    are scored only, with the values fitted without their group, and are
    simulated only under those values (never in the fit's search): e.g. the
    MoE table scored with the per-engine values fitted on the dense table."""
    log = log or (lambda s: None)
    rows = cache.rows
    engines = sorted(cache.by_engine)
    all_idx = list(range(len(rows)))
    fit_all = [i for i in all_idx if fit_row is None or fit_row(rows[i])]
    log(f"in-sample fit on {len(fit_all)} rows")
    ins = fit_fold(cache, fit_all, engines, rounds)
    ins_preds: list[Pred] = [{} for _ in rows]
    for eng, v in ins.items():
        for i, p in cache.get(eng, v["params"]).items():
            ins_preds[i] = p
    result: dict[str, Any] = {"in_sample": {"params": ins, "preds": ins_preds}, "folds": [], "held_out": {}}
    fits: dict[tuple[int, ...], dict] = {tuple(fit_all): ins}  # folds with the same fit rows share the fit
    for scheme in schemes:
        held: list[Pred] = [{} for _ in rows]
        for group, idx in folds(rows, scheme).items():
            held_set = set(idx)
            fit_idx = [i for i in fit_all if i not in held_set]
            # simulable or not does not depend on the fitted overheads: the in-sample status says
            simulable = [i for i in idx if ins_preds[i].get("status") == "ok"]
            if not simulable:  # nothing to score: the fit would be the in-sample one
                for i in idx:
                    held[i] = ins_preds[i]
                result["folds"].append({"scheme": scheme, "group": group, "rows": idx, "params": {},
                                        "preds": [held[i] for i in idx]})
                continue
            log(f"{scheme}: leave out {group} ({len(idx)} rows, {len(simulable)} simulated), "
                f"fit on {len(fit_idx)}")
            fp = fits.get(tuple(fit_idx))
            if fp is None:
                fp = fits[tuple(fit_idx)] = fit_fold(cache, fit_idx, engines, rounds)
            preds = {}
            for eng in {str(rows[i]["backend"]) for i in idx}:
                got = cache.get(eng, fp[eng]["params"], idx)
                preds.update({i: got[i] for i in idx if i in got})
            for i in idx:
                held[i] = preds.get(i, {"status": "error", "reason": "no prediction"})
            result["folds"].append({"scheme": scheme, "group": group, "rows": idx, "params": fp,
                                    "preds": [held[i] for i in idx]})
        result["held_out"][scheme] = held
    return result


def conformal_intervals(rows: Sequence[dict], res: dict, schemes: Sequence[str], *,
                        min_rows: int = 20, alpha: float = 0.2) -> dict:
    """Conformal prediction intervals, pooled over groups, from a :func:`cross_validate` result.

    Per engine and metric, the alpha/2 and 1 - alpha/2 quantiles of
    log(measured / predicted) over the held-out residuals of every
    leave-one-group-out scheme in ``schemes`` together (model, GPU, campaign):
    a row held out of a fold in which its engine was fitted (not pooled over
    engines) contributes one residual per scheme, since a new deployment may be
    new in its model, its GPU or its campaign. The residuals of one held-out
    group (one scheme's group) share part of its error, so each group weighs its
    effective number of independent residuals in the quantiles (Kish's design
    effect with their intraclass correlation:
    ``sim.results.intervals.pooled_cdf_quantiles``). On 2026-12-05 plain ranks
    over every residual (rho = 0) covered 74 % (TTFT) / 77 % (TPOT) of held-out
    groups' rows, each group the same (rho = 1, the CDF pooling of Dunn,
    Wasserman, Ramdas, JASA 2023) 83 % / 87 %; with rho estimated (0.2 to 0.35
    but vLLM TTFT's 0.02), 76 % / 84 %. An engine
    with fewer than ``min_rows`` residuals takes every engine's. Coverage is
    measured one level further out: for each group of each scheme, the
    quantiles from the residuals of the rows outside that group only, widened
    to hold the point value as they are shipped (``intervals.log_bounds``),
    scored on that group's held-out residuals of that scheme. Returns ``{"scheme",
    "engines": engine -> metric -> {"lo", "hi", "n", "groups"},
    "coverage_other_groups": metric -> {"share", "n"}, "coverage_by_scheme":
    scheme -> metric -> {"share", "n"}}``."""
    from sim.results.intervals import log_bounds, pooled_cdf_quantiles

    held_out = res["held_out"]
    used = [s for s in ("model", "system", "campaign") if s in schemes] or list(schemes[:1])
    entries = []  # (row, scheme): held-out predictions of rows whose engine was fitted in the fold
    for scheme in used:
        held = held_out[scheme]
        fitted_in_fold = set()
        for f in res["folds"]:
            if f["scheme"] == scheme:
                fitted_in_fold |= {i for i in f["rows"]
                                   if (f["params"].get(rows[i]["backend"]) or {}).get("source") == "fitted"}
        entries += [(i, scheme) for i, p in enumerate(held) if p.get("status") == "ok" and i in fitted_in_fold]

    def residual(i, s, m):
        return math.log(float(rows[i][f"silicon_{m}_ms"]) / held_out[s][i][f"pred_{m}_ms"])

    def quantiles(es, m):
        by_group: dict[tuple[str, str], list[float]] = {}
        for i, s in es:
            by_group.setdefault((s, group_of(rows[i], s)), []).append(residual(i, s, m))
        return pooled_cdf_quantiles([by_group[k] for k in sorted(by_group)], alpha)

    engines: dict = {}
    all_engines = sorted({rows[i]["backend"] for s in used for i, p in enumerate(held_out[s])
                          if p.get("status") == "ok"})
    for eng in all_engines:
        es = [e for e in entries if rows[e[0]]["backend"] == eng]
        for m in ("ttft", "tpot"):
            q = quantiles(es, m) if len(es) >= min_rows else None
            if q is None:  # too few held-out residuals of its own: every engine's together
                q = quantiles(entries, m)
                if q:
                    q["pooled_over_engines"] = True
            if q:
                engines.setdefault(eng, {})[m] = q
    # coverage on each group of each scheme from the residuals of the rows outside it
    cover = {s: {m: [0, 0] for m in ("ttft", "tpot")} for s in used}
    for scheme in used:
        for group, gidx in folds(rows, scheme).items():
            gset = set(gidx)
            calib_all = [e for e in entries if e[0] not in gset]
            test = [e for e in entries if e[1] == scheme and e[0] in gset]
            for eng in engines:
                calib = [e for e in calib_all if rows[e[0]]["backend"] == eng]
                for m in ("ttft", "tpot"):
                    q = quantiles(calib, m) if len(calib) >= min_rows else quantiles(calib_all, m)
                    if not q:
                        continue
                    for i, s in test:
                        if rows[i]["backend"] != eng:
                            continue
                        r = residual(i, s, m)
                        lo, hi = log_bounds(q)
                        cover[scheme][m][0] += int(lo <= r <= hi)
                        cover[scheme][m][1] += 1
    pooled = {m: [sum(cover[s][m][k] for s in used) for k in (0, 1)] for m in ("ttft", "tpot")}
    share = lambda c, n: {"share": c / n if n else None, "n": n}  # noqa: E731
    return {"scheme": "/".join(used), "engines": engines,
            "coverage_other_groups": {m: share(*pooled[m]) for m in pooled},
            "coverage_by_scheme": {s: {m: share(*cover[s][m]) for m in cover[s]} for s in used}}
