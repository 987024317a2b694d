"""``vllm bench serve --save-result``'s JSON, from a servesim run.

``vllm bench serve`` (``vllm/benchmarks/serve.py::main_async``) writes, in this
order: ``date`` (``%Y%m%d-%H%M%S``), ``endpoint_type``, ``backend``, ``label``,
``model_id``, ``tokenizer_id``, ``num_prompts``, the ``--metadata KEY=VALUE``
pairs as top-level keys, ``request_rate`` (the string ``"inf"`` when infinite),
``burstiness``, ``max_concurrency``; then ``benchmark()``'s result: ``duration``,
``completed``, ``failed``, token totals, throughputs, ``request_goodput`` (null
without ``--goodput``), ``max_output_tokens_per_s``, ``max_concurrent_requests``,
``rtfx``, and mean / median / std / p{P} of the selected metrics; with
``--save-detailed`` also the per-request lists ``input_lens``, ``output_lens``,
``ttfts``, ``itls``, ``latencies``, ``start_times``, ``generated_texts``, ``errors``.

servesim's summary carries all of these (its own keys beside them). The
``backend`` / ``endpoint_type`` is ``servesim`` (no HTTP endpoint was called);
``model_id`` / ``tokenizer_id`` are the Hugging Face id of the model (a preset's
Instruct checkpoint, or its pre-quantized one with ``quantization``); ``failed``
counts the requests rejected as vLLM answers 400 (``errors`` gives
each one's reason). In the detailed lists ``itls`` is absent (servesim keeps
per-step ITL samples, not per-request token gaps: ``summary`` has their
statistics) and ``generated_texts`` are empty strings (no text is generated).
The file name is ``vllm bench serve``'s:
``{label or backend}-{request_rate}qps[-concurrency{C}]-{model base name}-{date}.json``.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from typing import Any

import numpy as np

from sim.errors import ConfigError
from sim.results.metrics import BENCH_RESULT_KEYS, STATUS_FINISHED, request_latencies

BACKEND = "servesim"


def now_date() -> str:
    """``vllm bench serve``'s ``date``: local wall-clock time, ``%Y%m%d-%H%M%S``."""
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


#: the header keys ``vllm bench serve`` writes itself (:func:`bench_header`)
HEADER_KEYS = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
               "request_rate", "burstiness", "max_concurrency")
#: result keys of a run's summary a ``--metadata`` key may not replace (``vllm bench serve``'s
#: result, then servesim's own top-level keys); statistics, counts and a disaggregated run's
#: pool keys are ``STAT_KEY``
#: ``--save-detailed``'s per-request lists as ``vllm bench serve`` names them (:func:`detailed_lists`
#: writes all but ``itls``)
DETAILED_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "generated_texts",
                 "errors")
RESULT_KEYS = BENCH_RESULT_KEYS + (
    "config", "warnings", "servesim_version", "engine_release", "parallel_layout", "weight_precision",
    "workload_source", "simulated_time_s", "wall_time_s", "sim_requests_per_wall_s", "prefix_cache_hit_rate",
    "kv_reserved_unused_fraction") + DETAILED_KEYS
STAT_KEY = re.compile(r"^(mean|median|std|max|min|p\d+(\.\d+)?|num|prefill|decode|kv_transfer)_\w+$")


def parse_metadata(items: list[str] | None) -> dict[str, str]:
    """``--metadata version=0.3.3 tp=1`` → {"version": "0.3.3", "tp": "1"} (values
    stay strings, as vLLM writes them); ConfigError for an item without '=' or
    a key the run writes itself (a header key, a result or a statistic: the
    results are never replaced by metadata, as in ``vllm bench serve``)."""
    out: dict[str, str] = {}
    for item in items or []:
        for part in item.split():
            k, sep, v = part.partition("=")
            k = k.strip()
            if not sep or not k:
                raise ConfigError(f"--metadata {part!r}: expected KEY=VALUE (e.g. --metadata version=0.3.3 tp=1)")
            if k in HEADER_KEYS:
                raise ConfigError(f"--metadata {part}: {k} is a key vllm bench serve writes itself; use another name")
            if k in RESULT_KEYS or STAT_KEY.match(k):
                raise ConfigError(f"--metadata {part}: {k} is a key the run writes itself; use another name")
            out[k] = v.strip()
    return out


def bench_header(config: dict[str, Any], num_prompts: int | None, *, label: str | None = None,
                 metadata: dict[str, str] | None = None, date: str | None = None) -> dict[str, Any]:
    """The keys ``vllm bench serve`` writes before the benchmark's result, from a
    run's resolved config (``summary["config"]``), in its order. ``metadata`` keys
    that would replace one of them are a ConfigError."""
    from sim.launch import model_checkpoint

    wl = config.get("workload") or {}
    rate = wl.get("request_rate")
    # the Hugging Face id vllm bench serve --model would name (a preset's Instruct checkpoint)
    model_id = model_checkpoint(config["model"], config.get("quantization"))[0] if config.get("model") else None
    head: dict[str, Any] = {
        "date": date or now_date(),
        "endpoint_type": BACKEND,
        "backend": BACKEND,
        "label": label,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": num_prompts,
    }
    for k, v in (metadata or {}).items():
        if k in HEADER_KEYS:
            raise ConfigError(f"--metadata {k}={v}: {k} is a key vllm bench serve writes itself; use another name")
        head[k] = v
    head["request_rate"] = "inf" if rate is None or (isinstance(rate, float) and math.isinf(rate)) else rate
    head["burstiness"] = wl.get("burstiness", 1.0)
    head["max_concurrency"] = wl.get("max_concurrency")
    return head


def result_filename(header: dict[str, Any]) -> str:
    """``vllm bench serve``'s default result file name (``compute_result_filename``)."""
    label = header.get("label") or header["backend"]
    rate = header["request_rate"]
    rate_s = "inf" if rate == "inf" else str(float(rate))
    conc = header.get("max_concurrency")
    conc_s = f"-concurrency{conc}" if conc is not None else ""
    base = str(header.get("model_id") or "model").rstrip("/").split("/")[-1]
    return f"{label}-{rate_s}qps{conc_s}-{base}-{header['date']}.json"


def detailed_lists(requests: dict[str, np.ndarray], reasons: dict[int, str]) -> dict[str, list]:
    """``--save-detailed``'s per-request lists over the measured requests, in send
    order: seconds, as vLLM writes them; a rejected request has output length 0,
    ttft and latency 0.0 and its reason in ``errors`` (vLLM: empty fields and the
    error text)."""
    measured = requests["is_warmup"] == 0
    order = np.argsort(requests["request_id"][measured], kind="stable")
    r = {k: v[measured][order] for k, v in requests.items()}
    lat = request_latencies(r)
    done = r["status"] == STATUS_FINISHED
    ids = r["request_id"].astype(np.int64).tolist()
    return {
        "input_lens": r["num_prompt_tokens"].astype(np.int64).tolist(),
        "output_lens": np.where(done, r["num_output_tokens"], 0).astype(np.int64).tolist(),
        "ttfts": np.where(done, lat["ttft_s"], 0.0).tolist(),
        "latencies": np.where(done, lat["e2el_s"], 0.0).tolist(),
        "start_times": r["arrival_time_s"].tolist(),
        "generated_texts": ["" for _ in ids],
        "errors": ["" if d else reasons.get(i, "rejected") for i, d in zip(ids, done.tolist())],
    }
