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
- worker counts not recorded (the nightly-harness campaigns ``2026-*``): taken
  from that harness's public recipes (:func:`recipe_pools`) when exactly one
  deployment of them matches the row; otherwise not simulable, with the reason
  (no recipe matches, several deployments do, the one that does runs
  speculative decoding, its engine-argument file is not transcribed or was
  not the transcribed version on the row's day, or it disagrees with the
  harness entry on a pool's workers, TP, EP or attention DP);
- expert parallelism over a number of ranks that does not divide the routed
  experts plus the recipe's redundant expert slots (EP 48 with DeepSeek's 256
  runs with SGLang ``ep-num-redundant-experts`` 32 in the transcribed recipes,
  :data:`SGLANG_FLAGS`; TensorRT-LLM ``load_balancer.num_slots``): a recorded
  row whose deployment's slots are not known;
- pipeline parallelism (``*_pp_size`` > 1): not modelled; attention data
  parallelism on a dense model (SGLang's dp-attention gathers the ranks' tokens
  for its TP'd MLP, which is not modelled; servesim reads dense DP as vLLM's
  independent replicas);
- the model is not one the simulator can build (the model spec says why:
  MLA, sliding-window and hybrid models are being added elsewhere; their rows
  become simulable when the model loads, with no change here).

Deployment keys per pool: ``tensor_parallel_size`` = ``*_tp_size``; attention
DP and the experts' layout from ``*_attention_dp_size``, ``*_moe_tp_size``,
``*_moe_ep_size`` as the aggregated MoE rows read them
(:func:`sim.cost_model.parallel.layout_keys_from_table`: ``data_parallel_size``
ranks of ``tensor_parallel_size`` GPUs, ``moe_ep_size`` x ``moe_tp_size`` over
the worker's GPUs; a worker is then a DP group, sim/engine/disagg.py);
``max_num_seqs`` = ``*_batch_size`` when recorded (per attention rank: the
recorded rows' concurrency is workers x DP ranks x batch, e.g. 1 decode worker
of DP 32 x batch 64 at concurrency 2048), else the recipe's engine
arguments, else the engine's default, as the engine ran. A recorded row whose
harness entries (those with its worker counts) name one transcribed recipe file
runs that file's engine arguments, its max batch over the recorded batch, which
is the clients per worker rather than the engine's limit
(:func:`recorded_row_recipe`); the row's warning names both. The engine preset of
``backend``; quantization and KV dtype as the aggregated rows
(:func:`sim.validate.rows.row_quantization`).

Except **an SGLang pool with attention DP** (``*_attention_dp_size`` > 1 on a
recorded row): its batch size is the per-rank *load* of the benchmark
(concurrency / workers / DP), not a flag the deployment ran with, and
servesim keeps SGLang's default request pool (``--max-running-requests``
unset: :func:`sim.presets.sglang.sglang_max_running_requests` per rank). The
one flag it could be is ``--max-running-requests`` (aiconfigurator's generator
maps its ``max_batch_size`` = the row's ``bs`` to it:
ai-dynamo/aiconfigurator ``src/aiconfigurator/generator/config/backend_config_mapping.yaml``,
``generator/module_bridge.py``), and SGLang divides that flag over the DP
ranks, ``max_running_requests // dp_size`` per rank, asserting it is > 0
(sgl-project/sglang ``python/sglang/srt/model_executor/model_runner.py``, "Init
max running requests"; ``managers/tp_worker.py`` before): read so, 44 of the 49
recorded SGLang DP rows would have a pool with 0 requests per rank, a server
that does not start (43 prefill pools: batch 1 on DP 4 or 8; 6 decode pools,
e.g. batch 16 on DP 32), the others bs / DP per rank, below the row's own
per-rank load. Nor can it
be the per-rank cap itself: SGLang's decode server runs at most that many
requests per rank (``disaggregation/decode.py`` ``get_new_prebuilt_batch``:
``min(req_to_token_pool.size, max_running_requests)``; pre-allocated and
in-transfer requests do not count, ``DecodeReqToTokenPool``), the ranks are
chosen by the random bootstrap room (sim/engine/disagg.py), so at 1-2
requests per rank a request would wait a whole decode for a slot (5.9 s
simulated at ``dsr1_gb200_sglang_fp4_disagg_1024x1024_c8_cfg252``, measured
294 ms TTFT). TensorRT-LLM's ``max_batch_size`` is per rank and not divided:
its rows keep the batch.

**The nightly harness's recipes** (InferenceMAX, now SemiAnalysisAI/InferenceX:
``.github/configs/nvidia-master.yaml``, each disaggregated config's
``search-space`` entries: ``conc-list``, ``prefill`` / ``decode``
``num-worker``, ``tp``, ``ep``, ``dp-attn``, ``additional-settings``) are in
``sim/validate/data/inferencemax_disagg_recipes.yaml``, one entry per distinct
entry over the file's commits from 2025-11-01 to 2026-03-25 with the URL of the
entry and the days it was live (``benchmarks/inferencemax_recipes.py``
regenerates it from a clone). A row matches an entry when the runner is the
row's GPU (``b200_sxm`` → ``b200*``, ``gb200`` → ``gb200*``, ...), the
framework its backend under Dynamo (``trtllm`` → ``dynamo-trt``, ``sglang`` →
``dynamo-sglang``), the model family, precision, ``isl`` / ``osl`` and both
pools' TP are the row's, its ``concurrency`` is in ``conc-list``, the image is
the row's (``#`` read as ``/``) when recorded, and the row was measured while
the entry was live. Engine arguments: the entry's settings
(``{PREFILL,DECODE}_MAX_BATCH_SIZE`` → ``max_num_seqs``, ``_MAX_NUM_TOKENS`` →
``max_num_batched_tokens``, ``DECODE_GPU_MEM_FRACTION`` →
``gpu_memory_utilization``: TensorRT-LLM's ``free_gpu_memory_fraction``), or the
srt-slurm recipe file its ``CONFIG_FILE`` names, transcribed with its URL in
``sim/validate/data/srt_slurm_recipes.yaml``.

**srt-slurm recipe files** (the branch ``sa-submission-q1-2026`` of
ishandhanani/srt-slurm, which the harness clones at run time; that file's header
says which commits were read and how they were dated). Each transcribed file
has a ``format``, ``sglang`` (``sglang_config``: SGLang server flags) or
``trtllm`` (``trtllm_config``: TensorRT-LLM LLM-API options), its
``prefill_workers`` / ``decode_workers``, the engine arguments servesim models
per pool (:data:`SGLANG_FLAGS`, :data:`TRTLLM_OPTIONS`, the KV dtype, the
overlap-scheduler switch: :data:`SRT_FORMATS`), and ``live``: the days on which
the branch served that version. A row measured on another day is not
simulated (the file may have said otherwise then), nor one whose file runs
speculative decoding (SGLang ``speculative-algorithm``, TensorRT-LLM
``speculative_config``) or pipeline parallelism, nor one whose file and
harness entry disagree on a pool's workers or TP: the reason names both
values and both URLs. Where they disagree on EP (``expert-parallel-size`` /
``moe_expert_parallel_size``, default 1) or attention DP
(``enable-dp-attention`` / ``enable_attention_dp``), engine arguments that the
workers read from the file, the file's are simulated and the row's warning
names both: the entries' values are the harness's metadata, and InferenceX
#919, "Fix nvidia-master.yaml metadata to align with recipe files", changed
the entries to the files' on 2026-03-23 (the B200 FP8 8k/1k TensorRT-LLM
entries live from 2026-02-10 to 2026-03-23 list prefill EP 8, one of them
dp-attn, where their files run the experts tensor-parallel, EP 1, one without
attention DP).

Parallelism of a recipe's pool: ``tp`` GPUs per worker, experts over ``ep``
EP ranks x ``tp / ep`` TP; ``dp-attn`` runs attention data-parallel:
TensorRT-LLM's ``enable_attention_dp`` makes every one of the ``tp`` GPUs its
own attention rank (attention TP 1; TensorRT-LLM docs, "Attention Data
Parallelism": ``tensor_parallel_size`` ranks each serving its own requests);
SGLang's ``--enable-dp-attention --dp-size D`` (the recipe file's
``data-parallel-size``, else ``tp``) makes D ranks of ``tp / D`` GPUs, and
divides ``--max-running-requests`` and ``--chunked-prefill-size`` over them
(``python/sglang/srt/server_args.py`` ``_handle_data_parallelism``:
``chunked_prefill_size // dp_size``; ``max_running_requests // dp_size`` per
worker in the pool configurator); TensorRT-LLM's ``max_batch_size`` and
``max_num_tokens`` are per rank already. The nightly rows' own
``*_moe_ep_size`` / ``*_moe_tp_size`` are not used: the decode pool's repeat the
prefill pool's EP (decode TP 32 recorded as EP 4 x moe_tp 8 where the recipe's
decode runs EP 32).

Streaming (``stream_interval``, a deployment key: the decode pool's, the
prefill pool streaming only the first token, which every engine sends at once):
the GB200 ``dynamo-trt`` entries without a ``CONFIG_FILE`` launch through
``benchmarks/*_gb200_dynamo-trt_slurm.sh``, which clones ai-dynamo/dynamo
(``release/0.5.1-rc0.20251105`` / ``-20260105``) and writes the engine configs
with ``components/backends/trtllm/performance_sweeps/scripts/gen_yaml.py``:
every decode config it writes has ``stream_interval: 20`` (:data:`DYNAMO_TRT_STREAM`;
the two versions of gen_yaml.py read set it, the release branches themselves
were not read). An srt-slurm recipe file's decode server's ``stream-interval``
(SGLang) or ``stream_interval`` and ``num_postprocess_workers`` (TensorRT-LLM:
``tensorrt_llm/llmapi/llm_args.py``; its worker processes that detokenize and
send, :attr:`sim.config.SimConfig.num_postprocess_workers`) are transcribed with
its other arguments. A row with its worker
counts recorded takes the interval of the harness entries it matches with its
own worker counts, when every one of them is transcribed and they agree
(:func:`recorded_row_deployment_keys`); otherwise the interval it ran with is not
known and the engine's default (1) is kept.

Frontends (``num_frontends``, a deployment key): srt-slurm runs nginx on the
job's head node and Dynamo frontends (``python3 -m dynamo.frontend``, router
mode round-robin) on up to ten other nodes, each routing on its own
(:func:`srt_num_frontends`; each transcribed file's ``nodes`` and ``frontend``
section, its defaults :data:`SRT_FRONTEND_DEFAULTS`); nginx hands a request to
one of them, which picks the prefill worker and then the decode worker
(:class:`sim.engine.traffic.Frontends`). A recorded row takes them as it takes
the streaming; a row without a transcribed file keeps one router.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

POOLS = ("prefill", "decode")
DATA = Path(__file__).parent / "data"
RECIPES_FILE = DATA / "inferencemax_disagg_recipes.yaml"
SRT_FILE = DATA / "srt_slurm_recipes.yaml"
#: row ``system`` -> the harness's runner name (a runner is that name or starts with it + "-")
SYSTEM_RUNNER = {"b200_sxm": "b200", "h100_sxm": "h100", "h200_sxm": "h200", "gb200": "gb200"}
#: row ``backend`` -> the harness's disaggregated framework
BACKEND_FRAMEWORK = {"trtllm": "dynamo-trt", "sglang": "dynamo-sglang"}
#: harness setting -> servesim pool key (TensorRT-LLM launch variables of the dynamo-trt recipes)
TRT_SETTINGS = {"MAX_BATCH_SIZE": "max_num_seqs", "MAX_NUM_TOKENS": "max_num_batched_tokens",
                "GPU_MEM_FRACTION": "gpu_memory_utilization"}
#: srt-slurm (SGLang) flag -> servesim pool key
SGLANG_FLAGS = {"max-running-requests": "max_num_seqs", "chunked-prefill-size": "max_num_batched_tokens",
                "max-prefill-tokens": "max_prefill_tokens", "mem-fraction-static": "gpu_memory_utilization",
                "max-total-tokens": "max_total_tokens", "ep-num-redundant-experts": "num_redundant_experts"}
#: srt-slurm (SGLang) decode-server flags -> ``disaggregation`` keys
SGLANG_DISAGG_FLAGS = {"num-reserved-decode-tokens": "num_reserved_decode_tokens"}
#: TensorRT-LLM's expert slots (E + redundant; MoeLoadBalancerConfig.num_slots)
TRTLLM_NUM_SLOTS = "moe_config.load_balancer.num_slots"
#: srt-slurm (TensorRT-LLM LLM-API option, nested keys joined by '.') -> servesim pool key; per
#: attention-DP rank already (module docstring)
TRTLLM_OPTIONS = {"max_batch_size": "max_num_seqs", "max_num_tokens": "max_num_batched_tokens",
                  "kv_cache_config.free_gpu_memory_fraction": "gpu_memory_utilization",
                  "kv_cache_config.max_tokens": "max_total_tokens"}
#: a transcribed recipe file's engine: its parallelism and speculative-decoding options under that
#: engine's names (tensor-parallel, expert-parallel, attention-DP switch, DP size, pipeline-parallel,
#: speculative decoding), the KV dtype, the overlap-scheduler switch, and the decode server's
#: streaming options (option -> deployment key)
SRT_FORMATS = {
    "sglang": {"tp": "tensor-parallel-size", "ep": "expert-parallel-size", "dp_attn": "enable-dp-attention",
               "dp": "data-parallel-size", "pp": "pipeline-parallel-size", "spec": "speculative-algorithm",
               "kv_dtype": "kv-cache-dtype", "no_overlap": "disable-overlap-schedule", "flags": SGLANG_FLAGS,
               "stream": {"stream-interval": "stream_interval"}},
    "trtllm": {"tp": "tensor_parallel_size", "ep": "moe_expert_parallel_size", "dp_attn": "enable_attention_dp",
               "dp": None, "pp": "pipeline_parallel_size", "spec": "speculative_config",
               "kv_dtype": "kv_cache_config.dtype", "no_overlap": "disable_overlap_scheduler",
               "flags": TRTLLM_OPTIONS,
               "stream": {"stream_interval": "stream_interval", "num_postprocess_workers": "num_postprocess_workers"}},
}


#: the decode engine config every GB200 dynamo-trt launch of the harness writes (module docstring)
DYNAMO_TRT_STREAM = ({"stream_interval": 20},
                     "https://github.com/ai-dynamo/dynamo/blob/357f7dfc469b487f26c8e01ee21ee8036469f977/components/"
                     "backends/trtllm/performance_sweeps/scripts/gen_yaml.py (decode_config stream_interval: 20)")


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


@lru_cache(maxsize=None)
def _load(path: Path) -> Any:
    import yaml

    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _str(row: dict, key: str) -> str:
    v = row.get(key)
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v).strip()


def _family(model: str) -> str:
    m = model.lower()
    return "deepseek" if "deepseek" in m else "gpt-oss" if "gpt-oss" in m else m


def matching_recipes(row: dict, recipes: list[dict] | None = None) -> list[dict]:
    """The harness entries a row matches (module docstring)."""
    recipes = _load(RECIPES_FILE)["recipes"] if recipes is None else recipes
    runner = SYSTEM_RUNNER.get(_str(row, "system"))
    framework = BACKEND_FRAMEWORK.get(_str(row, "backend").lower())
    conc, image, day = _whole(row, "concurrency"), _str(row, "image").replace("#", "/"), _str(row, "measured")
    tp = {p: _whole(row, f"{p}_tp_size") for p in POOLS}
    out = []
    for r in recipes:
        if runner is None or not (r["runner"] == runner or str(r["runner"]).startswith(runner + "-")):
            continue
        if (r["framework"] != framework or _family(str(r["model"])) != _family(_str(row, "model_path"))
                or str(r["precision"]) != _str(row, "precision") or r["isl"] != _whole(row, "isl")
                or r["osl"] != _whole(row, "osl") or conc not in (r["conc_list"] or [])):
            continue
        if any(r[p]["tp"] != tp[p] for p in POOLS):
            continue
        if image and str(r["image"]).replace("#", "/") != image:
            continue
        if day and not (str(r["first_date"]) <= day and (r["removed_date"] is None or day < str(r["removed_date"]))):
            continue
        out.append(r)
    return out


def _settings(r: dict, pool: str) -> dict[str, Any]:
    """The entry's ``additional-settings`` of one pool as ``KEY: value``."""
    out = {}
    for item in r[pool].get("additional-settings") or []:
        k, _, v = str(item).partition("=")
        out[k.strip()] = v.strip()
    return out


def _disaggregation_keys(keys: dict[str, Any]) -> dict[str, Any]:
    """The ``disaggregation`` keys among a pool's transcribed ones (SGLang's decode-server
    ``--num-reserved-decode-tokens``), taken out of ``keys``."""
    return {key: keys.pop(key) for key in SGLANG_DISAGG_FLAGS.values() if key in keys}


def _config_file(r: dict) -> str | None:
    """The srt-slurm recipe file a harness entry names (``CONFIG_FILE``, under either
    pool: it holds both pools' engine arguments), or None."""
    return next((s["CONFIG_FILE"] for s in (_settings(r, p) for p in POOLS) if "CONFIG_FILE" in s), None)


def _deployment(r: dict) -> tuple:
    return (r["spec_decoding"],) + tuple((r[p]["num-worker"], r[p]["ep"], bool(r[p]["dp-attn"]),
                                          tuple(sorted(_settings(r, p).items()))) for p in POOLS)


def recipe_pools(row: dict, recipes: list[dict] | None = None, srt: dict | None = None) -> dict[str, dict[str, Any]]:
    """A nightly-harness row's pools from its recipe (module docstring): per pool
    ``n``, ``tp``, ``batch`` (None = the engine's default), ``keys`` (more engine
    keys), and ``recipe`` (the URLs); and ``deployment`` (``keys``: the
    deployment-level ``stream_interval`` / ``num_postprocess_workers``, ``recipe``:
    its source) where the recipe sets them; :class:`NotSimulable` naming why not."""
    found = matching_recipes(row, recipes)
    what = (f"{_str(row, 'system')} {_str(row, 'backend')} {_str(row, 'precision')} isl {_str(row, 'isl')} "
            f"osl {_str(row, 'osl')} prefill TP {_str(row, 'prefill_tp_size')} decode TP "
            f"{_str(row, 'decode_tp_size')} at concurrency {_str(row, 'concurrency')}")
    if not found:
        raise NotSimulable(f"worker counts not recorded and no recipe of the nightly harness "
                           f"(InferenceX nvidia-master.yaml) matches {what}"
                           f"{' measured ' + _str(row, 'measured') if _str(row, 'measured') else ''}: "
                           "not simulated rather than guessed")
    kinds = {_deployment(r): r for r in found}
    if len(kinds) > 1:
        alts = "; ".join(f"{'MTP ' if k[0] != 'none' else ''}{k[1][0]}P(ep{k[1][1]}{' dp-attn' if k[1][2] else ''})"
                         f"{k[2][0]}D(ep{k[2][1]}{' dp-attn' if k[2][2] else ''}) {r['url']}"
                         for k, r in list(kinds.items())[:3])
        raise NotSimulable(f"worker counts not recorded and {len(kinds)} different recipes of the nightly harness "
                           f"match {what} (the row does not say which ran): {alts}")
    r = found[0]
    url = r["url"]
    if r["spec_decoding"] != "none":
        raise NotSimulable(f"the recipe runs speculative decoding ({r['spec_decoding']}), not modelled: {url}")
    # sized by nodes in a launch script (SCRIPT_MODE, or a dynamo-sglang entry with *_NODES and no
    # CONFIG_FILE): the entry's tp (1) is no worker's TP
    sets = {k: v for q in POOLS for k, v in _settings(r, q).items()}
    nodes = {k: v for k, v in sets.items() if k.endswith("_NODES") or k == "SCRIPT_MODE"}
    if "SCRIPT_MODE" in nodes or (nodes and r["framework"] == "dynamo-sglang" and "CONFIG_FILE" not in sets):
        what = ", ".join(f"{k}={v}" for k, v in nodes.items())
        raise NotSimulable(f"the recipe sizes its workers by nodes in a launch script ({what}) that is not "
                           f"transcribed; its tp {r['prefill']['tp']} / {r['decode']['tp']} is not the workers': {url}")
    pools: dict[str, Any] = {}
    notes: list[str] = []
    # a CONFIG_FILE (listed under either pool) holds both pools' engine arguments
    config_file = _config_file(r)
    for p in POOLS:
        st = _settings(r, p)
        keys: dict[str, Any] = {}
        urls = [url]
        tp, ep, dp_attn = int(r[p]["tp"]), int(r[p]["ep"]), bool(r[p]["dp-attn"])
        dp = tp if dp_attn else 1
        if config_file is not None:
            f = _srt_file(config_file, srt)
            if f is None:
                raise NotSimulable(f"the recipe's engine arguments are in {config_file} (srt-slurm), not "
                                   f"transcribed in {SRT_FILE.name}: {url}")
            keys, dp, ep, pool_notes = _srt_pool_keys(row, r, p, f)
            notes += pool_notes
            urls.append(f["url"])
        else:
            for name, key in TRT_SETTINGS.items():
                v = st.get(f"{p.upper()}_{name}")
                if v is not None:
                    keys[key] = float(v) if key == "gpu_memory_utilization" else int(v)
        if tp % dp or tp % ep:
            raise NotSimulable(f"the recipe's {p} pool: tp {tp} is not a multiple of its attention DP {dp} and "
                               f"ep {ep}: {url}")
        dis = _disaggregation_keys(keys)
        if dis:
            pools.setdefault("disaggregation", {}).update(dis)
        pools[p] = {"n": int(r[p]["num-worker"]), "tp": tp // dp, "batch": keys.pop("max_num_seqs", None),
                    "keys": keys, "recipe": urls}
        layout = _layout_keys(tp // dp, dp, ep, tp // ep)
        if layout:  # attention DP / expert layout (plain TP pools keep their keys as before)
            pools[p]["layout"] = layout
    deployment = entry_deployment_keys(r, srt)
    if deployment and deployment["keys"]:
        pools["deployment"] = deployment
    if notes:
        pools["notes"] = notes
    return pools


def _srt_file(config_file: str, srt: dict | None = None) -> dict | None:
    """The transcribed recipe file (``srt_slurm_recipes.yaml``), None when not
    transcribed; ConfigError for an entry without a known ``format`` or ``live`` days."""
    f = (_load(SRT_FILE) if srt is None else srt)["recipes"].get(config_file)
    if f is None:
        return None
    if f.get("format") not in SRT_FORMATS:
        raise ConfigError(f"{SRT_FILE.name}: {config_file}: format {f.get('format')!r} is not one of "
                          f"{', '.join(SRT_FORMATS)}")
    live = f.get("live")
    if not (isinstance(live, list) and len(live) == 2 and all(isinstance(d, str) for d in live)):
        raise ConfigError(f"{SRT_FILE.name}: {config_file}: live must be [first day, last day], got {live!r}")
    return f


def _opt(args: dict, path: str) -> Any:
    """An engine option of a transcribed pool; a TensorRT-LLM nested option by its
    dotted path (``kv_cache_config.dtype``); None when the recipe does not set it."""
    v: Any = args
    for part in path.split("."):
        if not isinstance(v, dict) or part not in v:
            return None
        v = v[part]
    return v


def _srt_pool_keys(row: dict, r: dict, p: str, f: dict) -> tuple[dict[str, Any], int, int, list[str]]:
    """One pool's servesim keys from its transcribed recipe file ``f`` (SGLang or
    TensorRT-LLM: :data:`SRT_FORMATS`), its attention-DP size, its EP size and
    notes for the row's warning; NotSimulable where the file was not the version
    live on the row's day, runs what servesim does not model (pipeline
    parallelism, speculative decoding), or disagrees with the harness entry ``r``
    on the pool's workers or TP. Where they disagree on EP or attention DP, the
    file's engine arguments are what the engine ran (module docstring) and a note
    names both."""
    fmt, names, args = f["format"], SRT_FORMATS[f["format"]], f[p]
    url, day = r["url"], _str(row, "measured")
    first, last = f["live"]
    if not (day and first <= day <= last):
        raise NotSimulable(f"the recipe file's version live on {day or 'the unrecorded measurement day'} is not "
                           f"transcribed ({f['url']} was live {first} to {last}): {url}")
    if _opt(args, names["spec"]) is not None:
        raise NotSimulable(f"the recipe file runs speculative decoding ({names['spec']}: "
                           f"{_opt(args, names['spec'])}), not modelled: {f['url']}")
    if int(_opt(args, names["pp"]) or 1) > 1:
        raise NotSimulable(f"the recipe file's {p} pool runs pipeline parallelism ({names['pp']}: "
                           f"{_opt(args, names['pp'])}), not modelled: {f['url']}")
    tp, ep, dp_attn = int(r[p]["tp"]), int(r[p]["ep"]), bool(r[p]["dp-attn"])
    mine = {"workers": int(f[f"{p}_workers"]), "TP": int(_opt(args, names["tp"]) or 1),
            "EP": int(_opt(args, names["ep"]) or 1), "attention DP": bool(_opt(args, names["dp_attn"]))}
    theirs = {"workers": int(r[p]["num-worker"]), "TP": tp, "EP": ep, "attention DP": dp_attn}
    off = [k for k in mine if mine[k] != theirs[k]]
    both = (f"the harness entry ({url}: " + ", ".join(f"{k} {theirs[k]}" for k in off)
            + f") and its recipe file ({f['url']}: " + ", ".join(f"{k} {mine[k]}" for k in off)
            + f") disagree on the {p} pool")
    if {"workers", "TP"} & set(off):
        raise NotSimulable(both)
    notes = [f"{both}: the file's engine arguments are simulated, not the entry's (which the row's own "
             f"{p}_* parallelism columns repeat; InferenceX #919 aligned the entries' metadata with the recipe "
             "files)"] if off else []
    ep, dp_attn = mine["EP"], mine["attention DP"]
    dp = tp if dp_attn else 1
    if names["dp"] is not None:  # SGLang: --dp-size D makes D attention ranks of tp / D GPUs
        if dp_attn and _opt(args, names["dp"]) is not None:
            dp = int(_opt(args, names["dp"]))
        if dp_attn and dp < 2 or not dp_attn and int(_opt(args, names["dp"]) or 1) > 1:
            raise NotSimulable(f"the recipe file's {p} pool runs {names['dp']} {_opt(args, names['dp'])} "
                               f"with {names['dp_attn']} {str(dp_attn).lower()}: data parallelism without "
                               f"attention DP, or attention DP over one rank, is not modelled: {f['url']}")
    keys: dict[str, Any] = {}
    for option, key in names["flags"].items():
        if _opt(args, option) is not None:
            keys[key] = _opt(args, option)
    if fmt == "sglang":  # SGLang's request pool and chunk are the worker's: per DP-attention rank
        for key in ("max_num_seqs", "max_num_batched_tokens"):
            if dp > 1 and key in keys:
                keys[key] = max(1, int(keys[key]) // dp)
    slots = _opt(args, TRTLLM_NUM_SLOTS) if fmt == "trtllm" else None
    if slots is not None:  # TensorRT-LLM counts the experts' slots, E + the redundant ones
        from sim.model_spec import routed_experts_of

        E = routed_experts_of(_str(row, "model_path"))
        if E is None or int(slots) < E:
            has = f"{E} routed experts" if E is not None else "no routed experts it can read"
            raise NotSimulable(f"the recipe file's {p} pool sets {TRTLLM_NUM_SLOTS} {slots}, not E + redundant "
                               f"slots of the row's model ({has}): {f['url']}")
        if int(slots) > E:
            keys["num_redundant_experts"] = int(slots) - E
    if fmt == "sglang" and p == "decode":
        for option, key in SGLANG_DISAGG_FLAGS.items():
            if _opt(args, option) is not None:
                keys[key] = int(_opt(args, option))
    if str(_opt(args, names["kv_dtype"]) or "").startswith("fp8"):
        keys["kv_cache_dtype"] = "fp8"
    if _opt(args, names["no_overlap"]) is not None:
        keys["overlap_scheduling"] = not bool(_opt(args, names["no_overlap"]))
    return keys, dp, ep, notes


#: srt-slurm's FrontendConfig defaults (src/srtctl/core/schema.py, unchanged on the branch from
#: 2026-01-27 to 2026-03-24): nginx and the master frontend plus this many more
SRT_FRONTEND_DEFAULTS = {"enable_multiple_frontends": True, "num_additional_frontends": 9}


def srt_num_frontends(f: dict) -> int | None:
    """The Dynamo frontends a transcribed recipe file runs behind nginx (srt-slurm
    ``FrontendTopology``, ``cli/mixins/frontend_stage.py``: one frontend when the
    job has one worker node or ``enable_multiple_frontends`` is false, else
    min(``num_additional_frontends`` + 1, worker nodes - 1), nginx on the head
    node and the frontends on the others); None where the file's nodes are not
    transcribed."""
    if "nodes" not in f:
        return None
    fe = {**SRT_FRONTEND_DEFAULTS, **(f.get("frontend") or {})}
    nodes = sum(int(n) for n in f["nodes"])
    if nodes <= 1 or not fe["enable_multiple_frontends"]:
        return 1
    return min(int(fe["num_additional_frontends"]) + 1, nodes - 1)


def entry_deployment_keys(r: dict, srt: dict | None = None, day: str | None = None) -> dict[str, Any] | None:
    """The deployment keys a harness entry deploys with (module docstring): the
    streaming, and the Dynamo frontends behind nginx (``num_frontends``,
    :func:`srt_num_frontends`, where more than one):
    ``{"keys": {"stream_interval": N, ...}, "recipe": [source]}`` (``keys`` empty: the
    engine's defaults, the recipe file sets none), or None where its engine
    arguments are not transcribed (a launch script sized by nodes, an
    untranscribed recipe file, another runner's script) or, given the row's
    ``day``, the transcribed version of its recipe file was not live that day."""
    config_file = _config_file(r)
    if config_file is None:
        if r["framework"] == "dynamo-trt" and str(r["runner"]).startswith("gb200"):
            return {"keys": dict(DYNAMO_TRT_STREAM[0]), "recipe": [DYNAMO_TRT_STREAM[1]]}
        return None
    f = _srt_file(config_file, srt)
    if f is None or (day is not None and not f["live"][0] <= day <= f["live"][1]):
        return None
    args = f["decode"]  # the decode server streams the tokens
    keys = {key: int(args[option]) for option, key in SRT_FORMATS[f["format"]]["stream"].items() if option in args}
    frontends = srt_num_frontends(f)
    if frontends is not None and frontends > 1:
        keys["num_frontends"] = frontends
    return {"keys": keys, "recipe": [f["url"]]}


def _worker_matches(row: dict, pools: dict[str, dict[str, Any]], recipes: list[dict] | None) -> list[dict]:
    """The harness entries a recorded row matches (:func:`matching_recipes`) with its own worker counts."""
    return [r for r in matching_recipes(row, recipes) if all(int(r[p]["num-worker"]) == pools[p]["n"] for p in POOLS)]


def _entries_with_workers(row: dict, pools: dict[str, dict[str, Any]], recipes: list[dict] | None) -> list[dict]:
    """:func:`_worker_matches`; where some of them run speculative decoding and others do
    not, the ones that do not: the row records no speculative decoding and servesim models
    none, so the row is simulated without it whichever entry ran, and the entries without
    it are the ones whose engine arguments that simulation runs (the row's warning says
    so, :func:`_mtp_entries_dropped`). The 30 db-dump TensorRT-LLM rows whose recipe file
    was known without this choice are simulated without speculative decoding at 0.72-1.09x
    their measured TPOT (median 0.92; reports/disagg-validation, session 20's run), where
    a run with MTP would measure far below that."""
    found = _worker_matches(row, pools, recipes)
    plain = [r for r in found if r["spec_decoding"] == "none"]
    return plain if plain else found


def _mtp_entries_dropped(row: dict, pools: dict[str, dict[str, Any]], recipes: list[dict] | None) -> str | None:
    """The row's warning where :func:`_entries_with_workers` left out entries with
    speculative decoding, else None."""
    found = _worker_matches(row, pools, recipes)
    spec = sorted({_config_file(r) or r["url"] for r in found if r["spec_decoding"] != "none"})
    if not spec or all(r["spec_decoding"] != "none" for r in found):
        return None
    return (f"harness entries with the row's worker counts that run speculative decoding ({', '.join(spec)}) "
            "are left out: the row records none and is simulated without it, with the engine arguments of the "
            "entries that run none")


def recorded_row_recipe(row: dict, pools: dict[str, dict[str, Any]], recipes: list[dict] | None = None,
                        srt: dict | None = None) -> tuple[dict[str, dict[str, Any]] | None, str | None]:
    """A row with its worker counts recorded: the pair (per pool, the engine arguments of the
    srt-slurm recipe file of the harness entries it matches with its own worker
    counts (:func:`matching_recipes`), ``{"keys": ..., "batch": ..., "url": ...}``,
    when there is at least one such entry, every one names a transcribed file live
    on the row's day, they agree, and the file runs each pool in the row's recorded
    layout (attention TP, DP, experts), else None: the recorded batch and the
    engine's defaults are kept; why not, where such entries exist but give no one
    deployment, for the row's warning, else None). The ``db-dump`` rows record ``*_batch_size`` as
    the clients per worker, not the engine's ``max_batch_size``
    (``dsr1_gb200_trtllm_fp8_disagg_1024x1024_c27_cfg386``: batch 9 recorded, 27
    clients on 3 decode workers; its file ``ctx1_gen3_tep8_batch8_eplb0_mtp0_27.yaml``
    runs ``max_batch_size`` 8: 24 slots, 3 clients always waiting, which Little's
    law puts at 3 / (24 / 11 s decode) = 1.4 s of the 1.56 s measured TTFT)."""
    found = _entries_with_workers(row, pools, recipes)
    if not found:
        return None, None
    why = (f"{len(found)} harness entr{'y' if len(found) == 1 else 'ies'} with the row's worker counts "
           f"({', '.join(sorted({_config_file(r) or r['url'] for r in found}))})")
    got = []
    for r in found:
        f = _srt_file(_config_file(r), srt) if _config_file(r) is not None else None
        if f is None:
            return None, f"{why} name a recipe file not transcribed"
        per: dict[str, dict[str, Any]] = {}
        try:
            for p in POOLS:
                keys, dp, ep, _ = _srt_pool_keys(row, r, p, f)
                tp = int(_opt(f[p], SRT_FORMATS[f["format"]]["tp"]) or 1)
                if tp % dp or tp % ep:
                    return None
                per[p] = {"disaggregation": _disaggregation_keys(keys), "keys": keys,
                          "batch": keys.pop("max_num_seqs", None), "tp": tp // dp,
                          "layout": _layout_keys(tp // dp, dp, ep, tp // ep), "url": f["url"]}
        except NotSimulable as e:  # not live on the row's day, or not what servesim models
            return None, f"{why}: {e}"
        got.append(per)
    if any(g != got[0] for g in got[1:]):
        return None, f"{why} give different engine arguments"
    if any(got[0][p]["tp"] != pools[p]["tp"] or got[0][p]["layout"] != pools[p].get("layout", {}) for p in POOLS):
        return None, f"{why}: the recipe file's layout is not the row's"
    return got[0], None


def recorded_row_deployment_keys(row: dict, pools: dict[str, dict[str, Any]], recipes: list[dict] | None = None,
                                 srt: dict | None = None) -> dict[str, Any] | None:
    """A row with its worker counts recorded: the deployment keys (streaming,
    frontends) of the harness entries it matches (:func:`matching_recipes`) whose
    worker counts are the row's, when there are some and every one of them is
    transcribed and gives the same keys; else None (the engine's defaults and one
    router are kept)."""
    found = _entries_with_workers(row, pools, recipes)
    got = [entry_deployment_keys(r, srt, _str(row, "measured") or "") for r in found]
    if (not got or any(g is None for g in got) or len({tuple(sorted(g["keys"].items())) for g in got}) != 1
            or not got[0]["keys"]):
        return None
    return {"keys": dict(got[0]["keys"]), "recipe": sorted({u for g in got for u in g["recipe"]}
                                                           | {r["url"] for r in found})}


def _layout_keys(tp: int, dp: int, ep: int, moe_tp: int) -> dict[str, int]:
    """Pool keys of attention DP and the experts' layout; none for plain TP
    (the keys as before: nothing changes for those pools)."""
    if dp == 1 and ep == 1 and moe_tp == tp:
        return {}
    return {"data_parallel_size": dp, "moe_ep_size": ep, "moe_tp_size": moe_tp}


def _recorded_layout(row: dict, p: str, tp: int) -> tuple[int, dict[str, int]]:
    """A recorded pool's attention TP and layout keys from its
    ``*_attention_dp_size`` / ``*_moe_tp_size`` / ``*_moe_ep_size`` (empty or 0 =
    not recorded), read as the aggregated MoE rows are; NotSimulable when no
    reading fits."""
    from sim.cost_model.parallel import layout_keys_from_table

    cells = {c: _whole(row, f"{p}_{c}") for c in ("attention_dp_size", "moe_tp_size", "moe_ep_size")}
    if cells["moe_ep_size"] == 1 and cells["moe_tp_size"] is None:  # EP 1 alone says nothing of the experts
        cells["moe_ep_size"] = None
    try:
        k = layout_keys_from_table(tp, cells["attention_dp_size"], cells["moe_tp_size"], cells["moe_ep_size"])
    except ConfigError as e:
        raise NotSimulable(f"{p} pool: {e}") from None
    return k["tensor_parallel_size"], _layout_keys(k["tensor_parallel_size"], k["data_parallel_size"],
                                                   k["moe_ep_size"], k["moe_tp_size"])


def disagg_pools(row: dict, recipes: list[dict] | None = None, srt: dict | None = None) -> dict[str, dict[str, Any]]:
    """The row's pools (``n`` workers, ``tp``, ``batch`` or None, more engine
    ``keys``), or :class:`NotSimulable` with the reason (module docstring)."""
    from sim.model_spec import get_model

    if _whole(row, "concurrency") is None:
        if not _str(row, "concurrency"):
            raise NotSimulable("concurrency not recorded: the benchmark's client load is unknown")
        raise NotSimulable(f"concurrency: must be a whole number >= 1 (the benchmark's clients), got "
                           f"{_str(row, 'concurrency')}")
    for p in POOLS:
        v = _num(row, f"{p}_pp_size")
        if math.isfinite(v) and v > 1:
            raise NotSimulable(f"{p}_pp_size = {v:g}: pipeline parallelism is not modelled")
    recorded = all(_whole(row, f"{p}_num_workers") is not None for p in POOLS)
    if recorded:
        pools: dict[str, dict[str, Any]] = {}
        for p in POOLS:
            n, tp = _whole(row, f"{p}_num_workers"), _whole(row, f"{p}_tp_size")
            if tp is None:
                raise NotSimulable(f"{p}_tp_size not recorded: not simulated rather than guessed")
            attn_tp, layout = _recorded_layout(row, p, tp)
            batch = _whole(row, f"{p}_batch_size")
            if layout.get("data_parallel_size", 1) > 1 and _str(row, "backend").lower() == "sglang":
                batch = None  # the per-rank load, not --max-running-requests (module docstring)
            pools[p] = {"n": n, "tp": attn_tp, "batch": batch, "keys": {}, "recipe": []}
            if layout:
                pools[p]["layout"] = layout
        # the harness entries name a worker's GPUs (tp, with dp-attn every GPU a rank); the
        # recorded row, attention TP x DP ranks
        gpu_row = {**row, **{f"{p}_tp_size": pools[p]["tp"] * pools[p].get("layout", {}).get("data_parallel_size", 1)
                             for p in POOLS}}
        args, why_not = recorded_row_recipe(gpu_row, pools, recipes, srt)
        dropped = _mtp_entries_dropped(gpu_row, pools, recipes)
        if why_not is not None:
            pools["notes"] = [f"{why_not}: the row's recorded batch (the clients per worker) and the engine's "
                              "defaults are simulated"]
        if args is not None:  # the recipe file's engine arguments (its batch over the recorded one)
            notes = []
            for p in POOLS:
                a = args[p]
                if a["batch"] is not None and pools[p]["batch"] not in (None, a["batch"]):
                    notes.append(f"the row records {p} batch {pools[p]['batch']}, its recipe file ({a['url']}) "
                                 f"runs max batch {a['batch']} per rank: the file's is simulated")
                pools[p].update(keys=a["keys"], recipe=[a["url"]])
                if a["disaggregation"]:
                    pools.setdefault("disaggregation", {}).update(a["disaggregation"])
                if a["batch"] is not None:
                    pools[p]["batch"] = a["batch"]
            if notes:
                pools["notes"] = notes
        if dropped is not None:
            pools["notes"] = [dropped] + pools.get("notes", [])
        deployment = recorded_row_deployment_keys(gpu_row, pools, recipes, srt)
        if deployment is not None:
            pools["deployment"] = deployment
    elif any(_whole(row, f"{p}_tp_size") is None for p in POOLS):
        raise NotSimulable("worker counts and per-pool TP not recorded: not simulated rather than guessed")
    else:
        pools = recipe_pools(row, recipes, srt)
        for p in POOLS:  # a batch the row records wins over the recipe's
            pools[p]["batch"] = _whole(row, f"{p}_batch_size") or pools[p]["batch"]
    try:
        model = get_model(str(row.get("model_path") or ""))
    except ConfigError as e:
        raise NotSimulable(str(e)) from None
    for p in POOLS:  # EP ranks beyond E / ep whole experts: the engine's redundant expert slots
        ep = pools[p].get("layout", {}).get("moe_ep_size", 1)
        R = int(pools[p].get("keys", {}).get("num_redundant_experts", 0))
        if model.is_moe and (model.num_experts + R) % ep:
            raise NotSimulable(f"{p} pool: expert parallelism over {ep} ranks does not divide {model.name}'s "
                               f"{model.num_experts} routed experts"
                               + (f" + {R} redundant slots" if R else "")
                               + "; the deployment's redundant expert slots (SGLang ep-num-redundant-experts, "
                               "TensorRT-LLM load_balancer.num_slots) are not recorded for it")
    if not model.is_moe:
        for p in POOLS:
            dp = pools[p].get("layout", {}).get("data_parallel_size", 1)
            if dp > 1:
                raise NotSimulable(f"{p} pool: attention data parallelism (DP {dp}) on a dense model "
                                   f"({model.name}) is not modelled (SGLang's dp-attention gathers the ranks' "
                                   "tokens for its tensor-parallel MLP)")
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
        over: dict[str, Any] = {**pools[p].get("keys", {}), "tensor_parallel_size": pools[p]["tp"],
                                **pools[p].get("layout", {})}
        if pools[p]["batch"] is not None:
            over["max_num_seqs"] = pools[p]["batch"]
        dis[p] = over
    dis.update(pools.get("disaggregation", {}))  # SGLang's --num-reserved-decode-tokens (a decode-server flag)
    ov["disaggregation"] = dis
    ov.update(pools.get("deployment", {}).get("keys", {}))  # streaming, frontends: the deployment's (module docstring)
    return ov
