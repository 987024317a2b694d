"""Capacity planning (``servesim plan``): for each candidate deployment (hardware ×
TP × engine settings) the highest request rate one replica sustains within the
SLOs, then the cheapest number of replicas that serves a target rate.

- **SLOs** are ``KEY<=VALUE`` (``KEY=VALUE`` means ``<=``) on any numeric summary
  key (``p99_ttft_ms<=1000``), or ``goodput_fraction>=F``: the fraction of completed
  requests meeting every ``--goodput`` SLO (DistServe's goodput / throughput).
  ``goodput_fraction`` takes a floor (``>=``), every other key a cap (``<=``): the
  search needs limits that more load makes harder to meet. Throughput keys rise
  with load and are refused (the load to serve is ``--target-rate``).
- **A rate passes** when the run is stable (:mod:`sim.results.stability`: the backlog does
  not grow and the sent requests complete) and meets every SLO. A run too short to
  judge its stability (its arrival window under two start-up transients) that meets
  every SLO is run again with 2x, 4x, ... the requests, up to ``max_request_scale``
  (:func:`judged_run`; column ``requests_scale``): judged unstable, or too short
  still, it fails; the search no longer stops below a capacity it could not see.
- **Search** (:func:`find_max_rate`): double (or halve) from ``start_rate`` until
  a pass and a failure bracket the boundary, then bisect until the bracket is
  within ``rel_tol``; the answer is the highest passing rate seen. The
  evaluation is a callable (rate → metrics), so it runs on a stub in tests.
  Every run of one candidate uses the same seed: arrival gaps scale exactly with
  1/rate (``vllm bench serve`` rescaling), so the comparison across rates is paired.
- **Replicas for a target rate**: ``n = ceil(target / max_rate)`` (the smallest
  allowed count ≥ that), verified by simulating all ``n`` replicas at the target
  (``num_requests`` × n, so each replica sees as many requests as in the
  search); a failed verification tries the next allowed counts (up to 2 more).
- **Cost**: $/hour = replicas × GPUs per replica × ``price_per_gpu_hour_usd``
  (hardware profile); $ per million output tokens = $/hour / (served rate × mean
  output tokens per request × 3600) × 1e6.
- **Disaggregated candidates** (xPyD, :func:`make_disagg_candidates`): a replica
  is one xPyD unit, ``x`` prefill workers of TP ``tp_p`` and ``y`` decode
  workers of TP ``tp_d`` (``x·tp_p + y·tp_d`` GPUs); ``n`` replicas are ``n·x``
  prefill and ``n·y`` decode workers behind the one router. The prefill:decode
  ratio is searched by listing shapes (``1P2D,2P1D``) or, with a GPU budget,
  every ratio ``x:y`` in lowest terms that fits it (``2P2D`` is two ``1P1D``
  replicas). Aggregated and disaggregated candidates are ranked together by cost.
  For an MoE model each pool's parallelism is searched too (``pool_parallel``):
  ``data_parallel_size`` D attention ranks per worker and ``enable_expert_parallel``
  (vLLM's keys: ``--data-parallel-size`` with ``--enable-expert-parallel`` runs the
  experts EP over the worker's D x TP GPUs, docs.vllm.ai serving/data_parallel_deployment
  and expert_parallel_deployment; SGLang ``--dp-size --enable-dp-attention --ep-size``,
  TensorRT-LLM ``enable_attention_dp``), per pool independently, as the disaggregated
  recipes deploy a wide-EP decode pool behind a TP prefill pool. A worker is then
  ``tp x D`` GPUs.
- **GPU budget** (``max_gpus``): a candidate whose one replica needs more GPUs is
  infeasible; replica counts are limited to the budget.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from sim.compare.variants import Variant, apply_variant
from sim.config import SimConfig, locate_error
from sim.errors import ConfigError, InfeasibleError

_LAT = [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p90", "p99")]
# Every SLO key gets harder to meet as load grows, which the rate search needs:
# caps (<=) on latencies, counts and usage, a floor (>=) on goodput_fraction.
SLO_KEYS = tuple(_LAT + ["mean_queue_ms", "p99_queue_ms", "num_preemptions", "num_rejected", "mean_kv_cache_usage",
                         "max_kv_cache_usage", "mean_num_running_seqs", "goodput_fraction"])
HIGHER_IS_BETTER = ("goodput_fraction",)
#: throughput rises with load: not an SLO of the search (the load to serve is --target-rate)
THROUGHPUT_KEYS = ("request_throughput", "output_throughput", "total_token_throughput", "request_goodput")


@dataclass(frozen=True)
class SLO:
    key: str
    op: str  # "<=" or ">="
    limit: float

    def violation(self, metrics: Mapping[str, Any]) -> str | None:
        """None when met; else ``'p99_ttft_ms = 1234 > 1000'``."""
        v = metrics.get(self.key)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return f"{self.key} is missing"
        ok = v <= self.limit if self.op == "<=" else v >= self.limit
        return None if ok else f"{self.key} = {v:.4g} {'>' if self.op == '<=' else '<'} {self.limit:g}"

    def __str__(self) -> str:
        return f"{self.key} {self.op} {self.limit:g}"


def parse_slos(items: list[str] | None, goodput: Mapping[str, float] | None = None) -> list[SLO]:
    """``["p99_ttft_ms=1000", "p99_tpot_ms<=60 goodput_fraction>=0.9"]`` → SLOs
    (several per item, split on spaces or commas). Errors name the item and list keys."""
    out: list[SLO] = []
    for item in items or []:
        for part in item.replace(",", " ").split():
            m = re.fullmatch(r"([A-Za-z0-9_]+)\s*(<=|>=|=)\s*(.+)", part)
            if not m:
                raise ConfigError(f"--slo {part!r}: expected KEY<=VALUE, KEY=VALUE or goodput_fraction>=F (no spaces "
                                  "or commas inside one SLO), e.g. p99_ttft_ms=1000")
            key, op, val = m.groups()
            if key in THROUGHPUT_KEYS:
                raise ConfigError(f"--slo {part!r}: {key} rises with the load, so it cannot bound the highest rate "
                                  "plan searches for; give the load to serve as --target-rate RATE (req/s), and "
                                  "per-request goodput SLOs as --goodput with --slo goodput_fraction>=F")
            if key not in SLO_KEYS:
                raise ConfigError(f"--slo {part!r}: unknown metric {key!r}; valid: {', '.join(SLO_KEYS)}")
            try:
                limit = float(val)
            except ValueError:
                raise ConfigError(f"--slo {part!r}: {val!r} is not a number") from None
            if not math.isfinite(limit) or limit < 0:
                raise ConfigError(f"--slo {part!r}: the limit must be a finite number >= 0, got {val}")
            if limit == 0 and key not in HIGHER_IS_BETTER:
                raise ConfigError(f"--slo {part!r}: a latency cap of 0 can never be met; give a positive limit")
            if any(o.key == key for o in out):
                raise ConfigError(f"--slo {part!r}: {key} is given twice")
            right = ">=" if key in HIGHER_IS_BETTER else "<="
            if op == "=":
                op = right
            elif op != right:
                # The rate search needs limits that more load makes harder to meet.
                what = "a floor (>=)" if right == ">=" else "a cap (<=)"
                raise ConfigError(f"--slo {part!r}: {key} can only have {what}: plan searches for the highest "
                                  f"rate that meets every SLO; write {key}{right}{val}")
            if key == "goodput_fraction" and limit > 1:
                raise ConfigError(f"--slo {part!r}: goodput_fraction is a fraction of the requests, in [0, 1]")
            if key == "goodput_fraction" and not goodput:
                raise ConfigError(f"--slo {part!r}: goodput_fraction needs --goodput ttft:MS tpot:MS (the per-request SLOs)")
            out.append(SLO(key, op, limit))
    return out


def add_derived(metrics: dict) -> dict:
    """Adds ``goodput_fraction`` = request_goodput / request_throughput (NaN without goodput)."""
    g, t = metrics.get("request_goodput"), metrics.get("request_throughput")
    ok = isinstance(g, (int, float)) and isinstance(t, (int, float)) and t and not math.isnan(g)
    metrics["goodput_fraction"] = g / t if ok else math.nan
    return metrics


def check(metrics: Mapping[str, Any], slos: list[SLO]) -> list[str]:
    """Why a run fails (empty = passes): not ``ok``, unstable, or an SLO violation."""
    if metrics.get("status", "ok") != "ok":
        return [f"{metrics.get('status')}: {metrics.get('reason', '')}"]
    why = [] if metrics.get("stable", True) else [f"unstable: {metrics.get('stability_reason', '')}"]
    return why + [v for s in slos if (v := s.violation(metrics)) is not None]


@dataclass
class RateEval:
    rate: float
    passed: bool
    reasons: list[str]
    metrics: dict


@dataclass
class RateSearch:
    max_rate: float  # highest passing rate (req/s); 0 when none passes
    evals: list[RateEval] = field(default_factory=list)
    reason: str = ""  # why no rate passes, or that the search hit max_rate


def find_max_rate(evaluate: Callable[[float], Mapping[str, Any]], slos: list[SLO], *, start_rate: float = 1.0,
                  rel_tol: float = 0.05, min_rate: float | None = None, max_rate: float | None = None,
                  max_evals: int = 40) -> RateSearch:
    """Bracket then bisect (module docstring). ``evaluate(rate)`` returns the metrics
    of a run at ``rate`` req/s (summary keys plus ``stable``); the result is within
    ``rel_tol`` (relative) of the boundary, assuming passing is monotone in rate."""
    if not (start_rate > 0 and 0 < rel_tol < 1):
        raise ConfigError(f"rate search: need start_rate > 0 and 0 < rel_tol < 1, got {start_rate}, {rel_tol}")
    min_rate = start_rate / 1024 if min_rate is None else min_rate
    max_rate = start_rate * 1024 if max_rate is None else max_rate
    search = RateSearch(0.0)

    def ev(rate: float) -> bool:
        m = dict(evaluate(rate))
        why = check(m, slos)
        search.evals.append(RateEval(rate, not why, why, m))
        return not why

    lo = hi = None
    r = min(max(start_rate, min_rate), max_rate)
    if ev(r):
        lo = r
        while hi is None:
            if lo >= max_rate:
                search.reason = f"meets the SLOs at the highest rate tried ({max_rate:g} req/s)"
                break
            r = min(lo * 2, max_rate)
            if ev(r):
                lo = r
            else:
                hi = r
    else:
        hi = r
        while lo is None:
            r = hi / 2
            if r < min_rate:
                last = search.evals[-1]
                search.reason = f"fails even at {last.rate:.3g} req/s: {'; '.join(last.reasons)}"
                return search
            if ev(r):
                lo = r
            else:
                hi = r
    while hi is not None and hi - lo > rel_tol * lo and len(search.evals) < max_evals:
        mid = (lo + hi) / 2
        if ev(mid):
            lo = mid
        else:
            hi = mid
    search.max_rate = lo
    return search


# ------------------------------------------------------------------ candidates
@dataclass(frozen=True)
class Candidate:
    """One deployment shape: ``overrides`` are config keys (hardware, tensor_parallel_size, scheduler, ...);
    a disaggregated one has ``disaggregation`` (worker counts and each pool's TP) instead of
    ``tensor_parallel_size``."""

    name: str
    overrides: dict
    #: the base config's ``data_parallel_size`` of an aggregated worker (``"agg"``) and of each
    #: pool's worker (``"prefill"`` / ``"decode"``), counted where the candidate does not set it
    #: (:func:`base_data_parallel`); empty = 1
    base_dp: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_disagg(self) -> bool:
        return self.overrides.get("disaggregation") is not None

    @property
    def kind(self) -> str:
        return "disagg" if self.is_disagg else "agg"

    @property
    def num_gpus(self) -> int:
        """GPUs of one replica (one xPyD unit when disaggregated)."""
        d = self.overrides.get("disaggregation")
        if d is None:  # TP x attention-DP ranks (a DP group, or DP replicas of a dense model)
            dp = self.overrides.get("data_parallel_size") or self.base_dp.get("agg") or 1
            return int(self.overrides["tensor_parallel_size"]) * int(dp)
        return (int(d["num_prefill_workers"]) * _worker_gpus(d["prefill"], self.base_dp.get("prefill", 1))
                + int(d["num_decode_workers"]) * _worker_gpus(d["decode"], self.base_dp.get("decode", 1)))

    @property
    def columns(self) -> dict:
        """Flat columns for tables and result rows (the pools of a disaggregated one)."""
        out = {k: v for k, v in self.overrides.items() if k != "disaggregation"}
        d = self.overrides.get("disaggregation")
        out["kind"] = self.kind
        if d is not None:
            out.update(prefill_workers=d["num_prefill_workers"], prefill_tp=d["prefill"]["tensor_parallel_size"],
                       decode_workers=d["num_decode_workers"], decode_tp=d["decode"]["tensor_parallel_size"])
            for pool in ("prefill", "decode"):  # a searched pool parallelism (pool_parallel)
                if "data_parallel_size" in d[pool]:
                    out[f"{pool}_dp"] = d[pool]["data_parallel_size"]
                if "enable_expert_parallel" in d[pool]:
                    out[f"{pool}_ep"] = d[pool]["enable_expert_parallel"]
        return out


def _worker_gpus(pool: Mapping[str, Any], base_dp: int = 1) -> int:
    """GPUs of one worker of a pool: TP x attention-DP ranks (``base_dp`` where the pool does not set them)."""
    return int(pool["tensor_parallel_size"]) * int(pool.get("data_parallel_size") or base_dp or 1)


def base_data_parallel(base: SimConfig) -> dict[str, int]:
    """The base config's ``data_parallel_size`` per worker kind, for :attr:`Candidate.base_dp`:
    ``agg`` its top-level value; ``prefill`` / ``decode`` its ``disaggregation.<pool>`` value,
    else the top-level one (a pool inherits the top-level engine keys, :func:`sim.config.pool_config`).
    A candidate that does not set ``data_parallel_size`` runs with these ranks, so they count
    in its GPUs and cost."""
    pools = base.disaggregation.model_dump(exclude_unset=True) if base.disaggregation is not None else {}
    out = {"agg": int(base.data_parallel_size)}
    for pool in ("prefill", "decode"):
        out[pool] = int((pools.get(pool) or {}).get("data_parallel_size") or base.data_parallel_size)
    return out


def make_candidates(hardware: list[str], tp: list[int], schedulers: list[str] | None = None,
                    vary: Mapping[str, list] | None = None,
                    base_dp: Mapping[str, int] | None = None) -> list[Candidate]:
    """The product hardware × TP × scheduler × each ``vary`` key's values. ``base_dp``:
    the base config's DP ranks (:func:`base_data_parallel`), counted in :attr:`Candidate.num_gpus`."""
    dims: list[list[tuple[str, Any]]] = [[("hardware", h) for h in hardware], [("tensor_parallel_size", t) for t in tp]]
    if schedulers:
        dims.append([("scheduler", s) for s in schedulers])
    for k, vals in (vary or {}).items():
        dims.append([(k, v) for v in vals])
    out = []
    for combo in itertools.product(*dims):
        ov = dict(combo)
        hw = str(ov["hardware"])
        hw = Path(hw).stem if hw.endswith((".yaml", ".yml")) else hw  # a profile path: its file name
        name = " ".join([hw, f"tp{ov['tensor_parallel_size']}"]
                        + ([ov["scheduler"]] if "scheduler" in ov else [])
                        + [f"{k}={v}" for k, v in combo[3 if schedulers else 2:]])
        out.append(Candidate(name, ov, dict(base_dp or {})))
    return out


def drop_equivalent(cands: list[Candidate]) -> tuple[list[Candidate], list[tuple[str, str]]]:
    """The candidates less those that deploy the same as an earlier one, and (dropped, kept)
    name pairs: ``enable_expert_parallel`` on a worker of one GPU (TP x DP = 1) is EP off
    (vLLM's EP group is the worker's DP x TP ranks, docs.vllm.ai serving/expert_parallel_deployment:
    one rank holds every expert either way)."""
    import json

    def pool_key(pool: Mapping[str, Any], base_dp: int) -> dict:
        p = dict(pool)
        if p.get("enable_expert_parallel") and _worker_gpus(p, base_dp) == 1:
            p["enable_expert_parallel"] = False
        return p

    kept: dict[str, Candidate] = {}
    dropped: list[tuple[str, str]] = []
    for c in cands:
        ov = dict(c.overrides)
        d = ov.get("disaggregation")
        if d is not None:
            ov["disaggregation"] = {**d, **{p: pool_key(d[p], c.base_dp.get(p, 1)) for p in ("prefill", "decode")}}
        else:
            ov.update(pool_key({k: v for k, v in ov.items() if k in ("tensor_parallel_size", "data_parallel_size",
                                                                      "enable_expert_parallel")},
                               c.base_dp.get("agg", 1)))
        key = json.dumps(ov, sort_keys=True, default=str)
        if key in kept:
            dropped.append((c.name, kept[key].name))
        else:
            kept[key] = c
    return list(kept.values()), dropped


def parse_disagg_shapes(text: str) -> list[tuple[int, int]] | str:
    """``"1P1D,1P2D,2P1D"`` → [(1, 1), (1, 2), (2, 1)]; ``"auto"`` → ``"auto"``.
    ConfigError naming the bad entry."""
    if text.strip().lower() == "auto":
        return "auto"
    out: list[tuple[int, int]] = []
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        m = re.fullmatch(r"(\d+)[pP](\d+)[dD]", part.strip())
        if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
            raise ConfigError(f"--disagg: {part!r} is not a shape xPyD with x, y >= 1 (e.g. 1P2D), nor auto")
        if (xy := (int(m.group(1)), int(m.group(2)))) not in out:
            out.append(xy)
    if not out:
        raise ConfigError(f"--disagg {text!r}: no shape given (e.g. 1P1D,1P2D,2P1D or auto)")
    return out


def ratio_shapes(tp_p: int, tp_d: int, max_gpus: int) -> list[tuple[int, int]]:
    """Every prefill:decode ratio x:y in lowest terms whose one unit fits
    ``max_gpus`` (x·tp_p + y·tp_d GPUs); a multiple (2P2D) is replicas of it."""
    return [(x, y) for x in range(1, max_gpus + 1) for y in range(1, max_gpus + 1)
            if math.gcd(x, y) == 1 and x * tp_p + y * tp_d <= max_gpus]


def pool_parallel_options(dp: list[int] | None = None, expert_parallel: list[bool] | None = None) -> list[dict]:
    """A pool's parallelism options beyond TP: ``data_parallel_size`` × ``enable_expert_parallel``
    (each key only when searched); ``[{}]`` when neither is. ``[1, 8]`` × ``[False, True]`` →
    four options, DP 1 / 8 with the experts TP-sharded or EP over the worker's GPUs."""
    dims: list[list[tuple[str, Any]]] = []
    if dp:
        dims.append([("data_parallel_size", int(d)) for d in dp])
    if expert_parallel:
        dims.append([("enable_expert_parallel", bool(e)) for e in expert_parallel])
    return [dict(combo) for combo in itertools.product(*dims)]


def _pool_label(pool: str, tp: int, par: Mapping[str, Any]) -> str:
    """``P-tp1``, ``D-tp1-dp8-ep`` (``-ep``: enable_expert_parallel on)."""
    out = f"{pool}-tp{tp}"
    if "data_parallel_size" in par:
        out += f"-dp{par['data_parallel_size']}"
    if par.get("enable_expert_parallel"):
        out += "-ep"
    return out


def make_disagg_candidates(hardware: list[str], shapes: list[tuple[int, int]] | str, prefill_tp: list[int],
                           decode_tp: list[int], schedulers: list[str] | None = None,
                           vary: Mapping[str, list] | None = None, max_gpus: int | None = None,
                           pool_parallel: Mapping[str, list[dict]] | None = None,
                           base_dp: Mapping[str, int] | None = None) -> list[Candidate]:
    """xPyD candidates: hardware × prefill TP × decode TP × each pool's parallelism option ×
    shape × scheduler × ``vary``. ``pool_parallel``: pool → its options
    (:func:`pool_parallel_options`: ``data_parallel_size`` / ``enable_expert_parallel``,
    searched per pool independently; an MoE model's); a worker is TP × DP GPUs.
    ``shapes="auto"`` lists every ratio that fits ``max_gpus`` (:func:`ratio_shapes`,
    with the workers' GPUs)."""
    if shapes == "auto" and not max_gpus:
        raise ConfigError("--disagg auto: searching every prefill:decode ratio needs a GPU budget; give --max-gpus N")
    pp = pool_parallel or {}
    bdp = dict(base_dp or {})
    out = []
    for hw, tp_p, tp_d, par_p, par_d in itertools.product(hardware, prefill_tp, decode_tp,
                                                           pp.get("prefill") or [{}], pp.get("decode") or [{}]):
        pool_p, pool_d = {"tensor_parallel_size": tp_p, **par_p}, {"tensor_parallel_size": tp_d, **par_d}
        shape_list = (ratio_shapes(_worker_gpus(pool_p, bdp.get("prefill", 1)),  # type: ignore[arg-type]
                                   _worker_gpus(pool_d, bdp.get("decode", 1)), max_gpus)
                      if shapes == "auto" else shapes)
        for x, y in shape_list:
            dis = {"num_prefill_workers": x, "num_decode_workers": y, "prefill": dict(pool_p),
                   "decode": dict(pool_d)}
            hw_name = Path(str(hw)).stem if str(hw).endswith((".yaml", ".yml")) else str(hw)
            for c in make_candidates([hw], [0], schedulers, vary):
                ov = {k: v for k, v in c.overrides.items() if k != "tensor_parallel_size"}
                rest = c.name.split(" ", 2)[2:]  # after "HW tp0"
                name = " ".join([hw_name, f"{x}P{y}D", _pool_label("P", tp_p, par_p), _pool_label("D", tp_d, par_d)]
                                + rest)
                out.append(Candidate(name, {**ov, "disaggregation": dis}, bdp))
    return out


def _merged_disagg(base: SimConfig, d: dict) -> dict:
    """The candidate's xPyD on top of the base config's ``disaggregation`` (its link
    settings and pool overrides kept, pool by pool, key by key)."""
    b = base.disaggregation.model_dump(exclude_unset=True) if base.disaggregation is not None else {}
    out = {**b, **{k: v for k, v in d.items() if k not in ("prefill", "decode")}}
    for pool in ("prefill", "decode"):
        out[pool] = {**b.get(pool, {}), **d.get(pool, {})}
    return out


def _variant(c: Candidate, replicas: int | None = None, base: SimConfig | None = None, **extra) -> Variant:
    """The candidate as a variant of the base config, on ``replicas`` replicas (xPyD
    units: the worker counts multiplied). An agg candidate drops a base's
    ``disaggregation``."""
    ov: dict[str, Any] = {}
    items = dict(c.overrides)
    if c.is_disagg:
        d = dict(items["disaggregation"])
        n = replicas or 1
        d["num_prefill_workers"] = int(d["num_prefill_workers"]) * n
        d["num_decode_workers"] = int(d["num_decode_workers"]) * n
        items["disaggregation"] = _merged_disagg(base, d) if base is not None else d
    else:
        items["disaggregation"] = None
        if replicas is not None:
            items["num_replicas"] = replicas
    for k, v in {**items, **extra}.items():
        if k.startswith("workload."):
            ov.setdefault("workload", {})[k.split(".", 1)[1]] = v
        else:
            ov[k] = v
    return Variant(c.name, ov, "plan")  # (errors: "plan: variant CANDIDATE: key: why", not --variant)


def simulate(base: SimConfig, c: Candidate, rate: float, replicas: int = 1, goodput=None,
             scale: int = 1) -> dict:
    """One run of candidate ``c`` at ``rate`` req/s on ``replicas`` replicas (requests
    scaled by ``replicas``, and by ``scale``: the measured requests, or the duration,
    of a run extended to judge its stability, :func:`judged_run`) → a sweep-format row
    with ``goodput_fraction`` and ``requests_scale``."""
    from sim.sweep.executors import run_point

    wl = base.workload
    extra: dict[str, Any] = {"workload.request_rate": rate,
                             "workload.num_warmup_requests": wl.num_warmup_requests * replicas}
    if wl.num_requests is not None:
        extra["workload.num_requests"] = wl.num_requests * replicas * scale
    elif scale != 1 and wl.duration_s is not None:
        extra["workload.duration_s"] = wl.duration_s * scale
    cfg = apply_variant(base, _variant(c, replicas, base, **extra))
    row, _ = run_point(cfg, goodput)
    row.update({"candidate": c.name, **c.columns, "num_replicas": replicas, "num_gpus": replicas * c.num_gpus,
                "workload.request_rate": rate, "requests_scale": scale})
    return add_derived(row)


def _only_not_judged(row: Mapping[str, Any], slos: list[SLO]) -> bool:
    """The run fails only because it was too short to judge its stability: it ran,
    every sent request it needed completed, it meets every SLO."""
    return (row.get("status", "ok") == "ok" and not row.get("stable", True)
            and str(row.get("stability_reason", "")).startswith("not judged")
            and all(s.violation(row) is None for s in slos))


def judged_run(base: SimConfig, c: Candidate, rate: float, slos: list[SLO], replicas: int = 1, goodput=None,
               max_scale: int = 8) -> dict:
    """:func:`simulate`, extended until its stability can be judged. A run whose
    arrival window is shorter than twice its start-up transient is "not judged"
    (:mod:`sim.results.stability`) and cannot pass, which would stop a rate search
    below the candidate's capacity. Where that is its only failure (every SLO met,
    the requests completed), it is repeated with twice the requests (or the
    duration), then four times, ... up to ``max_scale`` times the workload's
    (1: never); the last run is the answer (past ``max_scale`` still "not judged":
    the plan's short-run warning names it). A workload that cannot grow (a trace
    with fewer requests than the scaled count) keeps its last run."""
    row = simulate(base, c, rate, replicas, goodput)
    scale = 1
    wl = base.workload
    while (_only_not_judged(row, slos) and scale * 2 <= max_scale
           and (wl.num_requests is not None or wl.duration_s is not None)):
        try:
            longer = simulate(base, c, rate, replicas, goodput, scale * 2)
        except ConfigError:  # (a scaled count past the workload's bounds)
            break
        if longer.get("status", "ok") != "ok" or (longer.get("completed") or 0) + (longer.get("num_rejected") or 0) <= \
                (row.get("completed") or 0) + (row.get("num_rejected") or 0):
            break  # the workload cannot grow (a trace's end): nothing gained
        row, scale = longer, scale * 2
    return row


def candidate_config(base: SimConfig, c: Candidate, replicas: int = 1) -> SimConfig:
    """The config a candidate runs as on ``replicas`` replicas (xPyD units when
    disaggregated): the base with the candidate's overrides."""
    return apply_variant(base, _variant(c, replicas, base))


@dataclass
class CandidatePlan:
    """The outcome for one candidate. ``status``: ``ok``; ``infeasible`` (the config
    cannot run); ``no_rate`` (no rate meets the SLOs); ``target_unmet`` (no allowed
    replica count passed at the target). ``rows``: every simulation (sweep-format
    rows with ``phase`` = search / verify, ``passed``, ``slo_violations``)."""

    candidate: Candidate
    status: str
    reason: str = ""
    max_rate: float = 0.0
    replicas: int = 0
    target_row: dict | None = None
    rows: list[dict] = field(default_factory=list)


@dataclass
class PlanSettings:
    slos: list[SLO]
    goodput: dict[str, float] | None = None
    target_rate: float | None = None
    replicas: list[int] | None = None  # allowed counts; None = 1..max_replicas
    max_replicas: int = 64
    start_rate: float | None = None  # default: the workload's request_rate, else 1
    rel_tol: float = 0.05
    verify_tries: int = 3
    #: ``--price GPU=USD``: $/GPU-hour replacing the hardware profile's ``price_per_gpu_hour_usd``
    prices: dict[str, float] | None = None
    max_gpus: int | None = None  # GPU budget of the whole deployment; None = no limit
    #: a search run too short to judge is extended up to this many times the workload's
    #: requests (:func:`judged_run`; 1 = never)
    max_request_scale: int = 8


def parse_prices(items: list[str] | None) -> dict[str, float]:
    """``--price h100_sxm=2.49 --price h200_sxm=3.5`` (or comma-separated) → {GPU: $/GPU-hour};
    ConfigError naming the item for a bad one. The GPU is a hardware profile name
    (or the path the plan's ``--hardware`` names)."""
    import math

    from sim.hardware.profile import MAX_PRICE_USD

    out: dict[str, float] = {}
    for item in items or []:
        for part in item.replace(",", " ").split():
            gpu, sep, val = part.partition("=")
            if not sep or not gpu.strip():
                raise ConfigError(f"--price {part!r}: expected GPU=USD_PER_GPU_HOUR (e.g. --price h100_sxm=2.49)")
            try:
                usd = float(val.strip().lstrip("$").removesuffix("/h"))
            except ValueError:
                raise ConfigError(f"--price {part!r}: {val!r} is not a price in $ per GPU-hour") from None
            if not (math.isfinite(usd) and 0 <= usd <= MAX_PRICE_USD):
                raise ConfigError(f"--price {part!r}: the price must be in [0, {MAX_PRICE_USD:g}] $ per GPU-hour")
            if gpu.strip() in out and out[gpu.strip()] != usd:
                raise ConfigError(f"--price {part!r}: {gpu.strip()} is priced twice")
            out[gpu.strip()] = usd
    return out


def _allowed_at_least(n: int, s: PlanSettings, gpus: int = 1) -> list[int]:
    allowed = sorted(s.replicas) if s.replicas else list(range(1, s.max_replicas + 1))
    return [k for k in allowed if k >= n and (s.max_gpus is None or k * gpus <= s.max_gpus)]


def check_vary_values(base: SimConfig, candidates: list[Candidate], keys) -> None:
    """A ``--vary`` value invalid for every candidate carrying it is an error
    before any run (:mod:`sim.sweep.grid_values`)."""
    from sim.sweep.grid_values import invalid_everywhere

    bad: dict[str, str] = {}
    for c in candidates:
        try:
            apply_variant(base, _variant(c, 1, base))
        except ConfigError as e:
            bad[c.name] = str(e)
    hit = invalid_everywhere(keys, [(c.name, c.overrides) for c in candidates], bad)
    if hit is not None:
        raise ConfigError(f"--vary {hit[0]}={hit[1]}: invalid for every candidate; e.g. {hit[2]}")


def check_models_and_hardware(base: SimConfig, candidates: list[Candidate]) -> None:
    """A model or hardware that cannot be loaded (an unknown name, a missing or
    bad file) is the user's error, raised before anything runs, not a candidate
    reported 'infeasible'."""
    from sim.hardware.profile import get_hardware
    from sim.model_spec import get_model

    seen: set[tuple[str, str]] = set()
    for c in candidates:
        try:
            cfg = apply_variant(base, _variant(c, 1, base))
        except ConfigError:
            continue  # this candidate's own values: reported with it ('infeasible')
        for key, name, load in (("model", cfg.model, get_model), ("hardware", cfg.hardware, get_hardware)):
            if (key, name) not in seen:
                seen.add((key, name))
                try:
                    load(name)  # ConfigError names the key and value
                except ConfigError as e:
                    # the base config's value: where it was set (the config file, --set ...);
                    # else plan's own list option (--hardware A,B)
                    raise ConfigError(locate_error(base, str(e)) if name == getattr(base, key)
                                      else f"--{key}: {e}") from None


def plan_candidate(base: SimConfig, c: Candidate, s: PlanSettings) -> CandidatePlan:
    """Feasibility check, rate search on one replica, then the replicas for the
    target (verified by simulation). Runs in a worker; never raises for a bad candidate."""
    from sim.engine.deployment import build_deployment

    if s.max_gpus is not None and c.num_gpus > s.max_gpus:
        return CandidatePlan(c, "infeasible", f"one replica needs {c.num_gpus} GPUs, over the budget "
                                              f"--max-gpus {s.max_gpus}")
    try:
        build_deployment(apply_variant(base, _variant(c, 1, base)))
    except (ConfigError, InfeasibleError) as e:
        return CandidatePlan(c, "infeasible", str(e))
    rate0 = s.start_rate or (base.workload.request_rate if base.workload.request_rate and
                             math.isfinite(base.workload.request_rate) else 1.0)
    search = find_max_rate(lambda r: judged_run(base, c, r, s.slos, 1, s.goodput, s.max_request_scale), s.slos,
                           start_rate=rate0, rel_tol=s.rel_tol)
    plan = CandidatePlan(c, "ok", search.reason, search.max_rate)
    for e in search.evals:
        plan.rows.append({**e.metrics, "phase": "search", "passed": e.passed, "slo_violations": "; ".join(e.reasons)})
    if search.max_rate <= 0:
        plan.status = "no_rate"
        return plan
    if s.target_rate is None:
        plan.replicas = 1
        plan.target_row = next(r for r in reversed(plan.rows) if r["passed"] and
                               r["workload.request_rate"] == search.max_rate)
        return plan
    need = math.ceil(s.target_rate / search.max_rate - 1e-9)
    tries = _allowed_at_least(need, s, c.num_gpus)[: s.verify_tries]
    if not tries:
        plan.status = "target_unmet"
        plan.reason = (f"needs >= {need} replicas at {search.max_rate:.3g} req/s each; "
                       f"allowed at most {max(s.replicas or [s.max_replicas])}")
        if s.max_gpus is not None and need * c.num_gpus > s.max_gpus:
            plan.reason = (f"needs >= {need} replicas at {search.max_rate:.3g} req/s each = {need * c.num_gpus} "
                           f"GPUs, over the budget --max-gpus {s.max_gpus}")
        return plan
    searched = {e.rate: e.metrics for e in search.evals}
    # each replica sees as many requests as in the run that decided the rate found
    scale = int(searched[search.max_rate].get("requests_scale", 1) or 1)
    for n in tries:  # one replica at a rate the search ran: the same seed gives the same run
        row = searched[s.target_rate] if n == 1 and s.target_rate in searched else simulate(
            base, c, s.target_rate, n, s.goodput, scale)
        why = check(row, s.slos)
        plan.rows.append({**row, "phase": "verify", "passed": not why, "slo_violations": "; ".join(why)})
        if not why:
            plan.replicas, plan.target_row = n, plan.rows[-1]
            return plan
    plan.status = "target_unmet"
    plan.reason = f"fails at {s.target_rate:g} req/s with {', '.join(map(str, tries))} replicas: {plan.rows[-1]['slo_violations']}"
    return plan
