"""``servesim validate`` on disaggregated rows (``mode`` = ``disagg``, e.g.
``../shared/silicon/disagg_dev.csv``): each row as deployed — its prefill and
decode pools (``prefill_*`` / ``decode_*``: workers, TP, batch size) behind
one router, closed-loop clients at the row's ``concurrency`` (the whole
deployment's), fixed ``isl`` / ``osl``.

A row is simulated only when everything its deployment needs is recorded and
modelled; otherwise it is listed as ``not_simulable`` with the reason, never
guessed (issue #24):

- ``concurrency`` not recorded (the ``aic-gap-analysis`` disaggregated rows):
  the client load is unknown;
- worker counts or per-pool TP not recorded (the nightly-harness campaigns):
  their public recipes are not looked up yet;
- pipeline parallelism, attention data parallelism or expert parallelism
  (``*_pp_size``, ``*_attention_dp_size``, ``*_moe_ep_size`` > 1): not modelled
  by the simulator today;
- the model is not one the simulator can build (the model spec says why:
  MLA, sliding-window and hybrid models are being added elsewhere; their rows
  become simulable when the model loads, with no change here).

Deployment keys per pool: ``tensor_parallel_size`` = ``*_tp_size``,
``max_num_seqs`` = ``*_batch_size`` when recorded; the engine preset of
``backend``; quantization and KV dtype as the aggregated rows
(:func:`sim.validate.rows.row_quantization`).
"""

from __future__ import annotations

import math
from typing import Any

from sim.errors import ConfigError

POOLS = ("prefill", "decode")


class NotSimulable(ConfigError):
    """The row's deployment is not recorded or not modelled (the reason)."""


def is_disagg(row: dict) -> bool:
    return str(row.get("mode") or "").strip().lower() == "disagg"


def _num(row: dict, key: str) -> float:
    v = row.get(key)
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x


def _whole(row: dict, key: str) -> int | None:
    x = _num(row, key)
    return int(x) if math.isfinite(x) and x.is_integer() and x >= 1 else None


def disagg_pools(row: dict) -> dict[str, dict[str, Any]]:
    """The row's pools (``n`` workers, ``tp``, ``batch`` or None), or
    :class:`NotSimulable` with the reason (module docstring)."""
    from sim.model_spec import get_model

    if _whole(row, "concurrency") is None:
        raise NotSimulable("concurrency not recorded: the benchmark's client load is unknown")
    pools: dict[str, dict[str, Any]] = {}
    for p in POOLS:
        n, tp = _whole(row, f"{p}_num_workers"), _whole(row, f"{p}_tp_size")
        if n is None or tp is None:
            raise NotSimulable(f"{p}_num_workers / {p}_tp_size not recorded (the harness's recipe for this "
                               "configuration is not looked up here): not simulated rather than guessed")
        for col, what in (("pp_size", "pipeline parallelism"), ("attention_dp_size", "attention data parallelism"),
                          ("moe_ep_size", "expert parallelism")):
            v = _num(row, f"{p}_{col}")
            if math.isfinite(v) and v > 1:
                raise NotSimulable(f"{p}_{col} = {v:g}: {what} is not modelled")
        pools[p] = {"n": n, "tp": tp, "batch": _whole(row, f"{p}_batch_size")}
    try:
        get_model(str(row.get("model_path") or ""))
    except ConfigError as e:
        raise NotSimulable(str(e)) from None
    return pools


def disagg_row_overrides(row: dict, base: dict[str, Any], pools: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Config overrides for a disaggregated row: ``base`` (the aggregated row's
    keys: engine, model, hardware, quantization, workload, seed), its
    deployment replaced by the pools of :func:`disagg_pools`."""
    ov = {k: v for k, v in base.items() if k not in ("tensor_parallel_size", "max_num_seqs",
                                                     "max_num_batched_tokens", "max_prefill_tokens",
                                                     "scheduler")}
    dis: dict[str, Any] = {"num_prefill_workers": pools["prefill"]["n"],
                           "num_decode_workers": pools["decode"]["n"]}
    for p in POOLS:
        over: dict[str, Any] = {"tensor_parallel_size": pools[p]["tp"]}
        if pools[p]["batch"] is not None:
            over["max_num_seqs"] = pools[p]["batch"]
        dis[p] = over
    ov["disaggregation"] = dis
    return ov
