"""The engine vocabulary: every spelling servesim accepts for a config key, in one table.

A config key is spelled as servesim's (vLLM's) snake-case name (``max_num_seqs``),
in vLLM's kebab form (``max-num-seqs``, the flag ``--max-num-seqs``), or as one of
the documented aliases of :data:`ALIASES`: vLLM's own names where servesim's key
differs (``scheduling_policy`` → ``policy``), ``vllm bench serve``'s client names
(``num_prompts`` → ``workload.num_requests``), SGLang's and TensorRT-LLM's names.
Every channel reads this table: YAML files (either case, as ``vllm serve --config``),
``--set``, and the command-line flags (:func:`flag_args_to_set`).

**An alias never changes meaning.** An alias whose engine means something else
by the same number carries ``requires``: the config keys (and values) under which
servesim's key means what the engine means. SGLang's ``mem_fraction_static`` is
``gpu_memory_utilization`` only under SGLang's memory rule
(``kv_memory_rule: static_fraction``, what ``engine: sglang`` sets), TensorRT-LLM's
``free_gpu_memory_fraction`` only under its rule (``free_fraction``), SGLang's
``chunked_prefill_size`` is ``max_num_batched_tokens`` only in the ``prefill_first``
modes (a prefill chunk there; vLLM's budget also holds the decodes). Elsewhere
they are an error naming the alias and what to write instead
(:func:`check_requirements`). Values that servesim does not model
(``schedule_policy: lpm``) are an error, never a silent fallback.

Two spellings of one key given together (``--max-num-seqs 64 --max-running-requests 128``,
or ``max_num_seqs`` and ``max-num-seqs`` in one YAML file) are an error when they
disagree (:func:`canonicalize`).

Sources (each row names its own):

- vLLM engine arguments: ``vllm/engine/arg_utils.py`` (``vllm serve --help``), 0.24;
- ``vllm bench serve``: ``vllm/benchmarks/serve.py::add_cli_args`` (vllm-project/vllm);
- SGLang: ``docs/backend/server_arguments.md`` and ``python/sglang/srt/server_args.py``
  (sgl-project/sglang, 0.5.x): ``--mem-fraction-static``, ``--max-running-requests``,
  ``--chunked-prefill-size``, ``--page-size``, ``--disable-radix-cache``, ``--schedule-policy``;
- TensorRT-LLM: ``trtllm-serve`` options (https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve.html:
  ``--max_batch_size``, ``--max_num_tokens``, ``--tp_size``, ``--kv_cache_free_gpu_memory_fraction``)
  and the LLM API (``KvCacheConfig.free_gpu_memory_fraction``, ``tokens_per_block``,
  ``enable_block_reuse``; ``SchedulerConfig.capacity_scheduler_policy``
  ``GUARANTEED_NO_EVICT`` / ``MAX_UTILIZATION``, docs ``performance-tuning-guide/useful-runtime-flags.md``).

This module holds data and pure functions; it imports nothing from ``sim`` but errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

VLLM_ARGS = "vllm/engine/arg_utils.py (vllm serve --help)"
VLLM_BENCH = "vllm/benchmarks/serve.py add_cli_args (vllm bench serve --help)"
SGLANG_ARGS = "sglang docs/backend/server_arguments.md; python/sglang/srt/server_args.py"
TRTLLM_SERVE = "trtllm-serve --help (TensorRT-LLM docs, commands/trtllm-serve)"
TRTLLM_API = "TensorRT-LLM LLM API (llmapi/llm_args.py: KvCacheConfig, SchedulerConfig)"


@dataclass(frozen=True)
class Alias:
    """One accepted spelling of a config key.

    ``name``: the snake-case spelling (YAML; the flag is its kebab form, or
    ``flags`` when the engine spells its flags otherwise); ``key``: servesim's key
    (dotted for ``workload.*``); ``engine``: whose name it is; ``values``: the
    engine's values → servesim's (case-insensitive; a value not listed is an error
    when ``closed``); ``invert``: a boolean meaning the opposite (``disable_…``);
    ``requires``: servesim keys → the values under which the alias means what the
    engine means; ``implies``: keys set with it unless given (vLLM's ``--burstiness``
    is always a gamma process); ``note``: the meaning, for the README table."""

    name: str
    key: str
    engine: str
    source: str
    note: str = ""
    flags: tuple[str, ...] = ()
    values: dict[str, Any] = field(default_factory=dict)
    closed: bool = False
    invert: bool = False
    requires: dict[str, tuple] = field(default_factory=dict)
    implies: dict[str, Any] = field(default_factory=dict)

    def flag_names(self) -> tuple[str, ...]:
        return ("--" + kebab(self.name),) + self.flags


def kebab(name: str) -> str:
    return name.replace("_", "-")


def snake(name: str) -> str:
    return name.replace("-", "_")


#: The documented aliases (servesim's own keys are accepted in both cases without a row).
ALIASES: tuple[Alias, ...] = (
    # ---- vLLM's names where servesim's key differs
    Alias("scheduling_policy", "policy", "vllm", VLLM_ARGS, "queue order: fcfs, priority"),
    Alias("async_scheduling", "overlap_scheduling", "vllm", VLLM_ARGS,
          "host scheduling overlapped with the GPU step (the next batch formed when a step starts)"),
    Alias("dp", "data_parallel_size", "vllm / sglang", f"{VLLM_ARGS}; {SGLANG_ARGS}",
          "data-parallel ranks (vLLM's short -dp, SGLang's --dp); an MoE model's ranks step together "
          "(attention DP: vLLM's meaning, SGLang's only with --enable-dp-attention)", flags=("-dp",)),
    Alias("tp", "tensor_parallel_size", "vllm / sglang", f"{VLLM_ARGS}; {SGLANG_ARGS}",
          "tensor-parallel GPUs of one (attention) rank (vLLM's short -tp; SGLang's --tp only without "
          "--enable-dp-attention: with it SGLang's --tp counts every GPU, give --tp tp/dp here)", flags=("-tp",)),
    # ---- vllm bench serve (client side: the workload)
    Alias("num_prompts", "workload.num_requests", "vllm bench serve", VLLM_BENCH, "requests measured"),
    Alias("request_rate", "workload.request_rate", "vllm bench serve", VLLM_BENCH,
          "req/s (inf: all at t = 0); with --max-concurrency both apply: arrivals at the rate, "
          "sent when one of the C slots is free"),
    Alias("burstiness", "workload.burstiness", "vllm bench serve", VLLM_BENCH,
          "gamma shape of the inter-arrival gaps (1 = Poisson); sets workload.arrival gamma unless given, "
          "as vllm bench serve always draws gamma gaps", implies={"workload.arrival": "gamma"}),
    Alias("max_concurrency", "workload.max_concurrency", "vllm bench serve", VLLM_BENCH,
          "client-side cap on requests in flight (vLLM's semaphore)"),
    Alias("num_warmups", "workload.num_warmup_requests", "vllm bench serve", VLLM_BENCH,
          "warm-up requests, excluded from the metrics"),
    # ---- SGLang (python -m sglang.launch_server)
    Alias("max_running_requests", "max_num_seqs", "sglang", SGLANG_ARGS,
          "requests running at once (per attention rank here; SGLang divides its value by --dp under "
          "--enable-dp-attention)"),
    Alias("chunked_prefill_size", "max_num_batched_tokens", "sglang", SGLANG_ARGS,
          "tokens of one prefill chunk: servesim's token budget in the prefill_first modes",
          requires={"scheduler": ("prefill_first", "prefill_first_whole", "prefill_first_mixed")}),
    Alias("mem_fraction_static", "gpu_memory_utilization", "sglang", SGLANG_ARGS,
          "fraction of the GPU for weights + KV pool, under SGLang's rule",
          requires={"kv_memory_rule": ("static_fraction",)}),
    Alias("page_size", "block_size", "sglang", SGLANG_ARGS, "tokens per KV page"),
    Alias("disable_radix_cache", "enable_prefix_caching", "sglang", SGLANG_ARGS,
          "prefix cache off (the opposite of enable_prefix_caching)", invert=True),
    Alias("schedule_policy", "policy", "sglang", SGLANG_ARGS,
          "waiting-queue order: fcfs only (lpm, dfs-weight, random, lof are not modelled)",
          values={"fcfs": "fcfs"}, closed=True),
    Alias("context_length", "max_model_len", "sglang", SGLANG_ARGS, "longest sequence (prompt + output)"),
    Alias("tp_size", "tensor_parallel_size", "sglang / trtllm", f"{SGLANG_ARGS}; {TRTLLM_SERVE}",
          "tensor-parallel GPUs", flags=("--tp_size",)),
    Alias("dp_size", "data_parallel_size", "sglang", SGLANG_ARGS, "data-parallel ranks"),
    Alias("ep_size", "moe_ep_size", "sglang", SGLANG_ARGS, "expert-parallel ranks"),
    Alias("ep_num_redundant_experts", "num_redundant_experts", "sglang", SGLANG_ARGS,
          "redundant expert slots of the EP load balancer (E + R physical experts over the EP ranks)"),
    # ---- TensorRT-LLM (trtllm-serve flags, LLM API YAML)
    Alias("max_num_tokens", "max_num_batched_tokens", "trtllm", f"{TRTLLM_SERVE}; {TRTLLM_API}",
          "tokens of one iteration", flags=("--max_num_tokens",)),
    Alias("max_batch_size", "max_num_seqs", "trtllm", f"{TRTLLM_SERVE}; {TRTLLM_API}",
          "requests scheduled at once", flags=("--max_batch_size",)),
    Alias("max_seq_len", "max_model_len", "trtllm", TRTLLM_SERVE, "longest sequence (prompt + output)",
          flags=("--max_seq_len",)),
    Alias("free_gpu_memory_fraction", "gpu_memory_utilization", "trtllm", TRTLLM_API,
          "fraction of the memory free after weights that goes to KV, under TensorRT-LLM's rule",
          flags=("--free_gpu_memory_fraction",), requires={"kv_memory_rule": ("free_fraction",)}),
    Alias("kv_cache_free_gpu_memory_fraction", "gpu_memory_utilization", "trtllm", TRTLLM_SERVE,
          "as free_gpu_memory_fraction", flags=("--kv_cache_free_gpu_memory_fraction",),
          requires={"kv_memory_rule": ("free_fraction",)}),
    Alias("moe_expert_parallel_size", "moe_ep_size", "trtllm", TRTLLM_API, "expert-parallel ranks",
          flags=("--moe_expert_parallel_size", "--ep_size")),
    Alias("moe_tensor_parallel_size", "moe_tp_size", "trtllm", TRTLLM_API, "expert tensor-parallel ranks",
          flags=("--moe_tensor_parallel_size",)),
    Alias("tokens_per_block", "block_size", "trtllm", TRTLLM_API, "tokens per KV block",
          flags=("--tokens_per_block",)),
    Alias("enable_block_reuse", "enable_prefix_caching", "trtllm", TRTLLM_API, "KV block reuse (prefix caching)",
          flags=("--enable_block_reuse",)),
)
#: TensorRT-LLM's CapacitySchedulerPolicy names for servesim's key (upper case in its YAML)
CAPACITY_VALUES = {"guaranteed_no_evict": "guaranteed_no_evict", "max_utilization": "max_utilization"}

_BY_NAME: dict[str, Alias] = {a.name: a for a in ALIASES}
_BY_FLAG: dict[str, Alias] = {f: a for a in ALIASES for f in a.flag_names()}


def lookup(spelling: str, keys: dict[str, bool]) -> tuple[str, Alias | None] | None:
    """The servesim key a spelling names (snake or kebab, alias or own key; a
    leading ``--`` for a flag), and the alias row if it is one; None if unknown.
    ``keys``: servesim's own top-level keys → whether each is a boolean
    (:func:`sim.config.config_keys`)."""
    name = spelling
    if name.startswith("-"):
        if name in _BY_FLAG:
            return _BY_FLAG[name].key, _BY_FLAG[name]
        name = name.lstrip("-")
    prefix, dot, last = name.rpartition(".")
    s = snake(name)
    if s in _BY_NAME:
        return _BY_NAME[s].key, _BY_NAME[s]
    if not dot and s in keys:
        return s, None
    if dot and snake(prefix) == "workload":
        return f"workload.{snake(last)}", None
    return None


def translate(spelling: str, alias: Alias | None, value: Any, source: str) -> Any:
    """``value`` given under ``spelling`` as servesim's value: inverted for a
    ``disable_…`` alias, mapped through the alias's ``values``, TensorRT-LLM's
    upper-case capacity policies lowered."""
    # a flag (--schedule-policy) is its own channel: named alone, not as "--set: --schedule-policy"
    where = spelling if spelling.startswith("-") else f"{source}: {spelling}"
    if alias is not None and alias.invert:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return not value
    key = alias.key if alias is not None else snake(spelling.lstrip("-"))
    if alias is not None and (alias.values or alias.closed) and isinstance(value, str):
        v = value.lower()
        if v in alias.values:
            return alias.values[v]
        if alias.closed:
            raise ConfigError(f"{where}: {value!r} is not modelled by servesim; accepted: "
                              f"{', '.join(alias.values)} (the {alias.engine} name for {key})")
    if key == "capacity_scheduler_policy" and isinstance(value, str) and value.lower() in CAPACITY_VALUES:
        return CAPACITY_VALUES[value.lower()]
    return value


def canonicalize(items: list[tuple[str, Any]], source: str, keys: dict[str, bool]) -> tuple[dict[str, Any], list[tuple[str, Alias]]]:
    """``(spelling, value)`` pairs, in order, → ``{servesim key: value}`` (values
    translated) and the aliases used (for :func:`check_requirements`). Unknown
    spellings pass through unchanged (the config's key check names them). Two
    spellings of one key with different values are a ConfigError; one spelling
    twice keeps the last (as vLLM's argparse does)."""
    out: dict[str, Any] = {}
    by: dict[str, tuple[str, Any]] = {}
    used: list[tuple[str, Alias]] = []
    for spelling, value in items:
        hit = lookup(spelling, keys) if isinstance(spelling, str) else None
        if hit is None:
            out[spelling] = value
            continue
        key, alias = hit
        v = translate(spelling, alias, value, source)
        if key in by:
            prev_sp, prev_v = by[key]
            if prev_sp != spelling and prev_v != v:
                # two flags name themselves; a --set item or a file key gets its source
                where = "" if str(prev_sp).startswith("-") and str(spelling).startswith("-") else f"{source}: "
                raise ConfigError(f"{where}{_show(prev_sp)} {prev_v!r} and {_show(spelling)} {value!r} both set "
                                  f"{key} (spellings of one key); give it once")
        by[key] = (spelling, v)
        out[key] = v
        if alias is not None:
            used.append((spelling, alias))
    for _, alias in used:
        for k, v in alias.implies.items():
            out.setdefault(k, v)
    return out, used


def _show(spelling: str) -> str:
    return spelling if spelling.startswith("-") else f"'{spelling}'"


def check_requirements(cfg: Any, used: list[tuple[str, Alias]], source: str | None) -> None:
    """An alias used where servesim's key would mean something else than the
    engine's name (``requires`` not met by the validated ``cfg``) is a ConfigError."""
    for spelling, alias in used:
        for key, allowed in alias.requires.items():
            have = getattr(cfg, key)
            if have not in allowed:
                engine = alias.engine.split(" ")[0]
                hint = (f"add --engine {engine} (its {key} is {allowed[0]})" if engine in ("sglang", "trtllm")
                        else f"set {key} to {' or '.join(allowed)}")
                raise ConfigError(
                    f"{source + ': ' if source else ''}{_show(spelling)}: {alias.engine}'s {alias.name} means {alias.key} only where "
                    f"{key} is {' or '.join(map(str, allowed))}, but this config has {key} {have!r} (where "
                    f"{alias.key} means something else); {hint}, or set {alias.key} directly")


# ----------------------------------------------------------------------------- flags
#: ``vllm bench serve`` / servesim options that take several values (nargs), made repeatable
MULTI_VALUE_OPTIONS = ("--goodput", "--metadata")


#: words a boolean flag might be followed by by mistake (``--enable-prefix-caching true``)
BOOL_WORDS = ("true", "false", "yes", "no", "on", "off", "1", "0")


def flag_args_to_set(args: list[str], native: dict[str, bool], keys: dict[str, bool]) -> list[str]:
    """Command-line ``args`` with every vocabulary flag (``--max-num-seqs 64``,
    ``--enable-prefix-caching``, ``--no-enable-prefix-caching``, ``-tp 2``,
    ``--mem-fraction-static=0.8``) rewritten as ``--set --FLAG=VALUE`` (so the
    config's merge, conflict checks and messages see it, naming the flag), and
    multi-value options (``--goodput ttft:500 tpot:50``) split into repeats.
    ``native``: the command's own options → whether each takes a value; those are
    left alone (``--model``, ``--seed``, plan's ``--tp``)."""
    out: list[str] = []
    i = 0
    n = len(args)
    while i < n:
        a = args[i]
        if a == "--":
            out.extend(args[i:])
            break
        name, eq, inline = a.partition("=")
        if not a.startswith("-") or a == "-":
            out.append(a)
            i += 1
            continue
        if name in native and eq and not native[name]:  # an on/off option given a value: --exact-steps=false
            word = inline.strip().lower()
            pair = "--no-" + name[2:] if not name.startswith("--no-") else "--" + name[5:]
            if word not in BOOL_WORDS or pair not in native:
                raise ConfigError(f"{a}: {name} is a flag and takes no value; write {name}"
                                  + (f" or {pair}" if pair in native else ""))
            on = word in ("true", "yes", "on", "1")
            out.append(name if on else pair)
            i += 1
            continue
        if name in native:
            out.append(a)
            i += 1
            if native[name] and not eq and i < n:
                out.append(args[i])
                i += 1
            if name in MULTI_VALUE_OPTIONS:
                while i < n and not args[i].startswith("-"):
                    if name == "--metadata" and "=" not in args[i]:
                        break
                    if name == "--goodput" and ":" not in args[i]:
                        break
                    out.extend([name, args[i]])
                    i += 1
            continue
        negated = name.startswith("--no-") and lookup("--" + name[5:], keys) is not None
        hit = lookup("--" + name[5:], keys) if negated else (lookup(name, keys) if name.startswith("--") or name in _BY_FLAG
                                                      else None)
        if hit is None:
            out.append(a)  # click says what is wrong with it
            i += 1
            continue
        key, alias = hit
        flag = ("--" + name[5:]) if negated else name
        boolean = (alias is not None and alias.invert) or keys.get(key, False)
        if negated:
            if not boolean:
                raise ConfigError(f"{name}: {flag} takes a value, not a --no- form")
            if eq:
                raise ConfigError(f"{a}: {name} takes no value")
            value = "false"
            i += 1
        elif boolean and not eq:
            nxt = args[i + 1] if i + 1 < n else None
            if nxt is not None and nxt.strip().lower() in BOOL_WORDS and not Path(nxt).exists():
                # vLLM's flags take no value (argparse BooleanOptionalAction): ``true`` would
                # become the CONFIG argument and fail as a missing file
                neg = "--no-" + flag[2:] if flag.startswith("--") else f"--set {key}=false"
                raise ConfigError(f"{name} {nxt}: {name} is a flag and takes no separate value; write {flag} "
                                  f"(true) or {neg} (false), or {flag}={nxt.strip().lower()}")
            value = "true"
            i += 1
        elif eq:
            value = inline
            i += 1
        else:
            if i + 1 >= n or (args[i + 1].startswith("--") and len(args[i + 1]) > 2):
                raise ConfigError(f"{name}: needs a value (e.g. {name} 4)")
            value = args[i + 1]
            i += 2
        out.extend(["--set", f"{flag}={value}"])
    return out


def table_rows() -> list[dict[str, str]]:
    """The alias table (README "Engine vocabulary"): one row per alias."""
    rows = []
    for a in ALIASES:
        flags = ", ".join(f"`{f}`" for f in dict.fromkeys(a.flag_names()))
        req = "; ".join(f"only where {k} is {' or '.join(map(str, v))}" for k, v in a.requires.items())
        rows.append({"engine": a.engine, "name": f"`{a.name}`", "flags": flags, "servesim key": f"`{a.key}`",
                     "meaning": a.note + (f" ({req})" if req else ""), "source": a.source})
    return rows


def markdown_table() -> str:
    rows = table_rows()
    cols = ["engine", "name", "flags", "servesim key", "meaning"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(r[c] for c in cols) + " |" for r in rows]
    return "\n".join(lines)
