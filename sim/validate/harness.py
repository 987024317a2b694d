"""Benchmark harnesses: how a measured row's clients ran and how its engine was
configured. An input of validation, never fitted.

A :class:`Harness` says how many requests each closed-loop client sent and
how many of them were warm-up (excluded from the means), whether prompt and
output lengths were exactly ``isl`` / ``osl`` or drawn in a range, and how
the serving engine was deployed (aiconfigurator's generated limits, or the
engine's own defaults plus a recipe's arguments).

Named harnesses (:data:`HARNESSES`), each with its source:

- ``aic``: aiconfigurator's ``bench_serving`` runner on the deployment its
  generator writes (the dense table; ``aic-gap-analysis`` campaigns);
- ``vllm-bench-serve``: ``vllm bench serve`` with its documented defaults;
- ``inferencemax``: the nightly benchmark of the InferenceMAX kind that
  produced the ``2026-*`` campaigns;
- ``genai-perf``: NVIDIA genai-perf as aiconfigurator's genai-perf runner calls it;
- ``steady``: servesim's earlier protocol (engine defaults, warm-up
  excluded, client phases spread by the per-engine fitted
  ``client_phase_spread``); kept for comparison only.

A harness may also carry per-model recipe settings (:class:`RecipeArgs`: rows
of a model glob on given GPUs under one engine get config keys, each with its
source), e.g. InferenceMAX's gpt-oss recipes' ``VLLM_MXFP4_USE_MARLIN=1`` on
Hopper (:data:`INFERENCEMAX_RECIPE_ARGS`).

A user's own harness is a YAML file (:func:`load_harness`; keys in
:data:`YAML_KEYS`); a bad key or value is refused with one line naming it.
Which harness a row runs under (:func:`harness_for_row`): a ``harness`` cell
of the row, else its ``campaign`` through :data:`CAMPAIGN_HARNESS` (glob
patterns, first match), else the default (``aic``).
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

DEPLOYMENTS = ("aic_generator", "engine_defaults")
LENGTH_RANGES = ("below", "around")
BATCH_FROM = ("batch_size", "concurrency", None)


#: names a recipe formula may use: the row's nominal lengths and client concurrency
FORMULA_NAMES = ("isl", "osl", "concurrency")
#: the longest formula read: a recipe's shell arithmetic is a line (InferenceMAX's longest,
#: ``(CONC + ISL + 64 + 63) / 64 * 64``, is ~35 characters); a longer text is refused before
#: it is parsed (a 5000-term sum ran Python out of recursion)
MAX_FORMULA_CHARS = 500
#: config keys a recipe formula may not set: what the row itself fixes (its model, GPU,
#: engine and release, workload), and the run's own settings; anything else must be an engine
#: key of :class:`sim.config.SimConfig`
NOT_RECIPE_KEYS = ("model", "hardware", "engine", "engine_version", "workload", "disaggregation", "seed",
                   "exact_steps")


def eval_formula(expr: str, values: dict[str, int], where: str = "formula") -> int:
    """A recipe's integer shell arithmetic (e.g. InferenceMAX's
    ``$(( (CONC + ISL + 64 + 63) / 64 * 64 ))``) written as a Python expression
    over :data:`FORMULA_NAMES`: whole numbers, ``+ - * //``, parentheses and
    ``max`` / ``min``. Nothing else is evaluated (no names, calls or attributes
    beyond these); ConfigError (one line naming ``where``) otherwise."""
    import ast

    if len(expr) > MAX_FORMULA_CHARS:
        raise ConfigError(f"{where}: the formula is {len(expr)} characters long; at most {MAX_FORMULA_CHARS} "
                          f"(a recipe's one line of shell arithmetic)")

    shown = repr(expr) if len(expr) <= 80 else repr(expr[:60] + "...")

    def ev(n: ast.AST) -> int:
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            return n.value
        if isinstance(n, ast.Name) and n.id in values:
            return int(values[n.id])
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Add):
                return a + b
            if isinstance(n.op, ast.Sub):
                return a - b
            if isinstance(n.op, ast.Mult):
                return a * b
            if b == 0:
                raise ConfigError(f"{where}: {shown} divides by zero")
            return a // b
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("max", "min")
                and n.args and not n.keywords):
            return (max if n.func.id == "max" else min)(ev(a) for a in n.args)
        raise ConfigError(f"{where}: {shown}: only whole numbers, {', '.join(FORMULA_NAMES)}, + - * //, "
                          "parentheses, max and min")

    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, RecursionError, MemoryError):
        raise ConfigError(f"{where}: {shown} is not an expression (or is nested too deeply)") from None
    try:
        return ev(tree)
    except RecursionError:
        raise ConfigError(f"{where}: {shown} is nested too deeply") from None


def in_release_range(release: str, bounds: tuple[str | None, str | None]) -> bool:
    """Whether engine ``release`` (e.g. ``0.19.0``) lies in ``[bounds[0], bounds[1])`` (None = open),
    compared as :func:`sim.presets.versions.parse_version` reads releases; False when ``release``
    is empty or unreadable (e.g. a nightly image's ``nightly-5b8c30d6``)."""
    from sim.presets.versions import parse_version

    v = parse_version(release) if release else None
    if v is None:
        return False
    lo, hi = bounds
    return not ((lo is not None and v < parse_version(lo)) or (hi is not None and not v < parse_version(hi)))


@dataclass(frozen=True)
class RecipeArgs:
    """Engine settings a harness's per-model recipe adds for some rows: every row
    whose ``model_path`` matches ``model`` (glob), whose ``system`` matches one of
    ``systems`` (globs) and whose engine is ``engine`` gets the config keys
    ``args``; optionally only rows whose ``gemm_quant_mode`` is one of ``quant``,
    whose ``tp_size`` is one of ``tp`` and whose concurrency lies in
    ``concurrency`` (inclusive bounds, None = open), as recipes branch on them;
    ``source`` says where the recipe sets them; ``formulas``: keys the recipe
    computes from the row's nominal isl, osl and concurrency (:func:`eval_formula`);
    ``attention_dp``: only rows with (True) or without (False) attention DP;
    ``engine_versions``: only rows whose engine release (``backend_version``) is
    at least the first and below the second (None = open; release numbers as
    :func:`sim.presets.versions.parse_version` reads them, so 0.19.0rc1 counts
    as 0.19.0): a recipe changes with the container it runs, and a row records
    the container's engine release; a row whose release is empty or unreadable
    matches no version-bounded entry. Aggregated rows only: these are single-node
    recipe scripts; a disaggregated row's pools and engine arguments come from its own recipes
    (``sim/validate/disagg_rows.py``)."""
    model: str
    systems: tuple[str, ...]
    engine: str
    args: dict[str, Any]
    source: str = ""
    quant: tuple[str, ...] = ()
    tp: tuple[int, ...] = ()
    concurrency: tuple[int | None, int | None] = (None, None)
    #: config key -> the recipe's formula of the row's isl / osl / concurrency (:func:`eval_formula`)
    formulas: dict[str, str] = field(default_factory=dict)
    #: where the entry was read (``FILE: recipe_args[i]``), named by a formula's error on a row
    origin: str = ""
    #: only rows with (True) or without (False) attention data parallelism (``attention_dp_size``
    #: > 1), as recipes branch on ``DP_ATTENTION``; None = either
    attention_dp: bool | None = None
    #: engine releases (``backend_version``) the recipe version with these settings ran:
    #: [first, second), None = open
    engine_versions: tuple[str | None, str | None] = (None, None)

    def overrides(self, row: dict) -> dict[str, Any]:
        """``args`` plus each of ``formulas`` evaluated on the row's nominal isl, osl, concurrency."""
        out = dict(self.args)
        if self.formulas:
            where = self.origin or f"recipe_args {self.model}"
            try:
                values = {k: int(float(_cell(row, k))) for k in FORMULA_NAMES}
            except ValueError:
                raise ConfigError(f"{where}: a row needs whole isl, osl, concurrency for "
                                  f"{', '.join(self.formulas)}") from None
            shown = ", ".join(f"{k} {v}" for k, v in values.items())
            for k, expr in self.formulas.items():
                out[k] = eval_formula(expr, values, f"{where}.formulas.{k} (row {shown})")
        return out

    def matches(self, row: dict, engine: str) -> bool:
        if _cell(row, "mode").lower() == "disagg":
            return False
        if engine != self.engine or not fnmatch.fnmatchcase(_cell(row, "model_path"), self.model):
            return False
        if not any(fnmatch.fnmatchcase(_cell(row, "system"), g) for g in self.systems):
            return False
        if self.quant and _cell(row, "gemm_quant_mode").lower() not in self.quant:
            return False
        try:
            tp, conc = float(_cell(row, "tp_size") or "nan"), float(_cell(row, "concurrency") or "nan")
        except ValueError:
            return False
        if self.tp and tp not in self.tp:
            return False
        if self.attention_dp is not None:
            try:
                dp = float(_cell(row, "attention_dp_size") or "1")
            except ValueError:
                return False
            if (dp > 1) != self.attention_dp:
                return False
        lo, hi = self.concurrency
        if (lo is not None and not conc >= lo) or (hi is not None and not conc <= hi):
            return False
        return self.engine_versions == (None, None) or in_release_range(_cell(row, "backend_version"),
                                                                         self.engine_versions)


@dataclass(frozen=True)
class Harness:
    """How a benchmark was run (module docstring). ``prompts_per_client`` x C
    measured requests (or ``num_prompts`` in all), after ``warmup_per_client``
    x C warm-up requests; lengths exact (``range_ratio`` 0) or uniform on
    ``[int(r L), L]`` (``length_range`` ``below``: ``benchmark_serving.py``
    before vLLM 0.9, InferenceMAX's copy) or ``[L(1-r), L(1+r)]`` (``around``:
    ``vllm bench serve``). ``deployment``: ``aic_generator`` (aiconfigurator's
    generated token budget and batch) or ``engine_defaults``;
    ``max_num_seqs_from``: the row column the engine's max batch was set from
    (recipes pass ``--max-num-seqs``), when the row records it;
    ``engine_args``: engine -> config keys of its recipe.

    ``warmup_drained``: the warm-up is a phase of its own that finishes before
    the measured run starts (True), not the first requests of one continuous
    stream (False). InferenceMAX's ``utils/bench_serving/benchmark_serving.py``
    (SemiAnalysisAI/InferenceX, ``benchmark()``) sends its
    ``--num-warmups`` requests through the concurrency semaphore and awaits
    them all (``asyncio.gather(*warmup_tasks)``) before "Starting main
    benchmark run": the measured run then starts from an idle server with C
    requests sent at once, its initial burst measured like every later
    request. The simulator has no warm-up effect to model (no compilation,
    no allocator or cache state that outlives a request: prefix caching is
    off), so a drained warm-up is simulated as none: the measured run
    starts cold (:meth:`simulated_warmup_per_client`)."""
    name: str
    description: str = ""
    source: str = ""
    prompts_per_client: int | None = 10
    num_prompts: int | None = None
    warmup_per_client: int = 0
    range_ratio: float = 0.0
    length_range: str = "below"
    deployment: str = "engine_defaults"
    max_num_seqs_from: str | None = None
    engine_args: dict[str, dict[str, Any]] = field(default_factory=dict)
    think_time_s: float = 0.002
    warmup_drained: bool = False
    #: per-model recipe settings (:class:`RecipeArgs`), applied after ``engine_args``
    recipe_args: tuple[RecipeArgs, ...] = ()
    #: legacy ``steady`` only: spread the clients' phases by the engine's fitted value
    fitted_phase_spread: bool = False

    def num_requests(self, concurrency: int) -> int:
        return self.num_prompts if self.num_prompts is not None else int(self.prompts_per_client or 1) * concurrency

    def recipe_overrides(self, row: dict, engine: str) -> dict[str, Any]:
        """Config keys of the recipe settings matching a row (later entries win)."""
        out: dict[str, Any] = {}
        for r in self.recipe_args:
            if r.matches(row, engine):
                out.update(r.overrides(row))
        return out

    def simulated_warmup_per_client(self) -> int:
        """Warm-up requests per client the simulation runs and excludes: 0 when
        the harness drains its warm-up before the measured run (``warmup_drained``)."""
        return 0 if self.warmup_drained else self.warmup_per_client

    def length_spec(self, nominal: int) -> dict[str, Any]:
        """The workload length spec of a nominal length under this harness."""
        r = self.range_ratio
        if r <= 0:
            return {"dist": "fixed", "value": nominal}
        if self.length_range == "below":
            return {"dist": "uniform", "low": max(1, int(nominal * r)), "high": nominal}
        return {"dist": "uniform", "low": max(1, int(math.floor(nominal * (1 - r)))),
                "high": int(math.ceil(nominal * (1 + r)))}

    def max_length(self, nominal: int) -> int:
        spec = self.length_spec(nominal)
        return spec.get("value", spec.get("high", nominal))


#: model glob of the rows the DeepSeek-R1 (dsr1_*) recipes ran: db-dump names them DeepSeek-V3
DEEPSEEK = "deepseek-ai/DeepSeek-*"

#: InferenceMAX per-model recipe settings that change a modelled cost (the recipes'
#: other arguments are the engines' defaults or already the row's columns)
INFERENCEMAX_RECIPE_ARGS: tuple[RecipeArgs, ...] = (
    RecipeArgs("openai/gpt-oss-*", ("h100_sxm", "h200_sxm"), "vllm", {"moe_backend": "marlin"},
               "SemiAnalysisAI/InferenceX benchmarks/gptoss_fp4_h100.sh and gptoss_fp4_h200.sh: "
               "export VLLM_MXFP4_USE_MARLIN=1 (vLLM serves the MXFP4 experts with fused_marlin_moe)"),
    RecipeArgs("openai/gpt-oss-*", ("h200_sxm", "b200_sxm"), "trtllm", {"max_num_batched_tokens": 20000},
               "SemiAnalysisAI/InferenceX benchmarks/gptoss_fp4_h200_trt.sh and gptoss_fp4_b200_trt.sh: "
               "trtllm-serve --max_num_tokens 20000 (the preset's default is 8192)"),
    # SGLang --scheduler-recv-interval: "recv every ~10 requests; if CONC >= 16, relax to ~30".
    # DeepSeek: the db-dump campaign names the dsr1 recipes' rows (ids dsr1_*) deepseek-ai/DeepSeek-V3.
    *(RecipeArgs(model, ("b200_sxm",), "sglang", {"scheduler_recv_interval": iv}, src, quant, tps, conc)
      for model, quant, tps, src in (
          (DEEPSEEK, ("fp8",), (8,), "SemiAnalysisAI/InferenceX benchmarks/dsr1_fp8_b200.sh "
           "(TP 8): --scheduler-recv-interval 10 below 16 clients, else 30"),
          (DEEPSEEK, ("nvfp4",), (), "SemiAnalysisAI/InferenceX benchmarks/dsr1_fp4_b200.sh: "
           "--scheduler-recv-interval 10 below 16 clients, else 30"),
          ("Qwen/Qwen3.5-397B-A17B*", ("fp8", "nvfp4", ""), (), "SemiAnalysisAI/InferenceX benchmarks/single_node/"
           "qwen3.5_fp8_b200.sh, qwen3.5_fp4_b200.sh, qwen3.5_bf16_b200.sh (since 2026-02-20, #758): "
           "--scheduler-recv-interval 10 below 16 clients, else 30"))
      for iv, conc in ((10, (None, 15)), (30, (16, None)))),
    RecipeArgs(DEEPSEEK, ("b200_sxm",), "sglang", {"scheduler_recv_interval": 10},
               "SemiAnalysisAI/InferenceX benchmarks/dsr1_fp8_b200.sh (TP 4): --scheduler-recv-interval 10",
               ("fp8",), (4,)),
    # FP8 KV cache where the recipe asks for it (the TensorRT-LLM FP8 checkpoints get it from rows.py)
    RecipeArgs(DEEPSEEK, ("b200_sxm",), "sglang", {"kv_cache_dtype": "fp8_e4m3"},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp8_b200.sh and dsr1_fp4_b200.sh: "
               "--kv-cache-dtype fp8_e4m3"),
    RecipeArgs("Qwen/Qwen3.5-397B-A17B*", ("b200_sxm", "h200_sxm"), "sglang", {"kv_cache_dtype": "fp8_e4m3"},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/qwen3.5_fp8_b200.sh, qwen3.5_fp8_h200.sh, "
               "qwen3.5_fp4_b200.sh: --kv-cache-dtype fp8_e4m3 (not the bf16 recipe)", ("fp8", "nvfp4")),
    # TensorRT-LLM attention-DP context balancing where the recipe turns attention DP on
    RecipeArgs(DEEPSEEK, ("b200_sxm", "h200_sxm"), "trtllm",
               {"attention_dp_enable_balance": True, "attention_dp_timeout_iters": 60,
                "attention_dp_batching_wait_iters": 0},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp4_b200_trt.sh, dsr1_fp8_b200_trt.sh, "
               "dsr1_fp8_h200_trt.sh (since 2026-01-22): with DP_ATTENTION=true, attention_dp_config: "
               "batching_wait_iters 0, enable_balance true, timeout_iters 60", attention_dp=True),
    RecipeArgs("openai/gpt-oss-*", ("b200_sxm",), "trtllm", {"attention_dp_enable_balance": True},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/gptoss_fp4_b200_trt.sh: with "
               "DP_ATTENTION=true, attention_dp_config: enable_balance true (timeout_iters 50 and "
               "batching_wait_iters 10, TensorRT-LLM's AttentionDpConfig defaults)", attention_dp=True),
    RecipeArgs(DEEPSEEK, ("b200_sxm", "h200_sxm"), "trtllm", {"kv_cache_dtype": "fp8"},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp4_b200_trt.sh, dsr1_fp8_b200_trt.sh, "
               "dsr1_fp8_h200_trt.sh: kv_cache_config dtype: fp8"),
    RecipeArgs("openai/gpt-oss-*", ("b200_sxm",), "trtllm", {"kv_cache_dtype": "fp8"},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/gptoss_fp4_b200_trt.sh: kv_cache_config "
               "dtype: fp8 (the H200 recipe sets none)"),
    RecipeArgs("openai/gpt-oss-*", ("b200_sxm",), "vllm", {"kv_cache_dtype": "fp8"},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/gptoss_fp4_b200.sh: config.yaml "
               "kv-cache-dtype: fp8 (the H100/H200 recipes set none)"),
    RecipeArgs("MiniMaxAI/MiniMax-M2.5*", ("b200_sxm",), "vllm", {"kv_cache_dtype": "fp8"},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/minimaxm2.5_fp4_b200.sh (from its first "
               "version, 2026-04-08): vllm serve --kv-cache-dtype fp8 (the FP8 recipe gained it later)",
               ("nvfp4",)),
    # Streaming: messages of stream_interval tokens (sim/engine/recording.py streamed_token_s), the
    # values every version of these scripts had over the rows' measurement dates (2025-11 to
    # 2026-04; git log -S stream of each script); vLLM's from the MiniMax-M2.5 B200 recipes' versions
    # that set it (FP8: PR #947, the v0.19.0 image; FP4: its first version)
    RecipeArgs("MiniMaxAI/MiniMax-M2.5*", ("b200_sxm",), "vllm", {"stream_interval": 20},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/minimaxm2.5_fp4_b200.sh (from its first version, "
               "2026-04-08): vllm serve --stream-interval 20", ("nvfp4",)),
    RecipeArgs("MiniMaxAI/MiniMax-M2.5*", ("b200_sxm",), "vllm", {"stream_interval": 20},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/minimaxm2.5_fp8_b200.sh from PR #947 (commit "
               "bddbf40, 2026-04-03, image vllm-openai v0.19.0): vllm serve --stream-interval 20", ("fp8",),
               engine_versions=("0.19.0", None)),
    RecipeArgs("openai/gpt-oss-*", ("b200_sxm", "h200_sxm"), "trtllm",
               {"stream_interval": 20, "num_postprocess_workers": 4},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/gptoss_fp4_b200_trt.sh and gptoss_fp4_h200_trt.sh "
               "(benchmarks/gptoss_fp4_*_trt*.sh before 2026-02-20): extra_llm_api_options stream_interval: 20, "
               "num_postprocess_workers: 4"),
    RecipeArgs(DEEPSEEK, ("b200_sxm", "h200_sxm"), "trtllm", {"stream_interval": 10},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp4_b200_trt.sh, dsr1_fp8_b200_trt.sh, "
               "dsr1_fp8_h200_trt.sh: extra_llm_api_options stream_interval: 10"),
    RecipeArgs(DEEPSEEK, ("b200_sxm",), "sglang", {"stream_interval": 10},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp4_b200.sh: --stream-interval 10", ("nvfp4",)),
    RecipeArgs(DEEPSEEK, ("b200_sxm",), "sglang", {"stream_interval": 30},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp8_b200.sh: --stream-interval 30 (TP 4 and 8)",
               ("fp8",)),
    RecipeArgs(DEEPSEEK, ("h200_sxm",), "sglang", {"stream_interval": 10},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp8_h200.sh: --stream-interval 10 (both of "
               "its launch branches)"),
    RecipeArgs("Qwen/Qwen3.5-397B-A17B*", ("b200_sxm",), "sglang", {"stream_interval": 30},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/qwen3.5_bf16_b200.sh (from 2026-02-20), "
               "qwen3.5_fp8_b200.sh (from 2026-03-03), qwen3.5_fp4_b200.sh (from its first version, 2026-04-08): "
               "--stream-interval 30 (the rows' first measurements are those days)"),
    RecipeArgs("Qwen/Qwen3.5-397B-A17B*", ("h200_sxm",), "sglang", {"stream_interval": 50},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/qwen3.5_fp8_h200.sh (from 2026-03-04, the rows' "
               "first measurement): --stream-interval 50"),
    # token budgets the recipes compute from the row's isl and concurrency
    RecipeArgs("MiniMaxAI/MiniMax-M2.5*", ("b200_sxm",), "vllm", {},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/minimaxm2.5_fp4_b200.sh (from its first version, "
               "2026-04-08): vllm serve --max-num-batched-tokens \"$((ISL * 2))\"", ("nvfp4",),
               formulas={"max_num_batched_tokens": "2 * isl"}),
    # the MiniMax FP8 B200 recipe by the container it ran (the rows' backend_version): PR #947
    # (commit bddbf40, 2026-04-03) moved it from vllm-openai v0.17.0 to v0.19.0 and rewrote it
    RecipeArgs("MiniMaxAI/MiniMax-M2.5*", ("b200_sxm",), "vllm", {"kv_cache_dtype": "fp8"},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/minimaxm2.5_fp8_b200.sh from PR #947 (commit "
               "bddbf40, 2026-04-03, image vllm-openai v0.19.0): vllm serve --kv-cache-dtype fp8 "
               "--max-num-batched-tokens \"$((ISL * 2 ))\"", ("fp8",),
               formulas={"max_num_batched_tokens": "2 * isl"}, engine_versions=("0.19.0", None)),
    RecipeArgs("MiniMaxAI/MiniMax-M2.5*", ("b200_sxm",), "vllm", {"enable_expert_parallel": True},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/minimaxm2.5_fp8_b200.sh before PR #947 (from "
               "PR #757, commit f342df1, 2026-03-11, image vllm-openai v0.17.0): 'if [ \"$EP_SIZE\" -ge 1 ]; "
               "then EP=\" --enable-expert-parallel\"', true for EP_SIZE 1 too, so every row ran vLLM's "
               "expert parallelism (EP = TP); #947 made the test -gt 1", ("fp8",),
               engine_versions=(None, "0.19.0")),
    RecipeArgs(DEEPSEEK, ("b200_sxm", "h200_sxm"), "trtllm", {},
               "SemiAnalysisAI/InferenceX benchmarks/single_node/dsr1_fp4_b200_trt.sh, dsr1_fp8_b200_trt.sh, "
               "dsr1_fp8_h200_trt.sh: MAX_NUM_TOKENS=$(( (CONC + ISL + 64 + 63) / 64 * 64 )), at least 8192; "
               "trtllm-serve --max_num_tokens=$MAX_NUM_TOKENS",
               formulas={"max_num_batched_tokens": "max(8192, (concurrency + isl + 64 + 63) // 64 * 64)"}),
)

HARNESSES: dict[str, Harness] = {h.name: h for h in (
    Harness(
        "aic", "aiconfigurator bench_serving at fixed concurrency on its generated deployment: cold start, "
               "10·C requests, every one measured (the initial burst included); exact lengths",
        "ai-dynamo/aiconfigurator src/aiconfigurator/eval/benchmarks/bench_serving_runner.py (--num-prompts "
        "10·C, --max-concurrency C, --warmup-requests 0, request rate inf); generator "
        "src/aiconfigurator/generator/rule_plugin/{vllm,trtllm,sglang}.rule (agg max_num_tokens = C + isl "
        "+ 1500, max_batch_size C; SGLang max_prefill_tokens isl + 1500, enable_mixed_chunk from SGLang 0.5.6: "
        "sim/validate/rows.py aic_sglang_mixed_chunk)",
        prompts_per_client=10, warmup_per_client=0, deployment="aic_generator"),
    Harness(
        "vllm-bench-serve", "vllm bench serve with its documented defaults: 1000 prompts, no warm-up, "
                            "random dataset with --random-range-ratio 0 (exact lengths), engine defaults",
        "docs.vllm.ai cli/bench/serve (--num-prompts 1000, --num-warmups 0, --random-range-ratio 0.0: "
        "lengths uniform on [L(1-r), L(1+r)]; --max-concurrency C, --request-rate inf)",
        prompts_per_client=None, num_prompts=1000, warmup_per_client=0, range_ratio=0.0,
        length_range="around"),
    Harness(
        "inferencemax", "nightly benchmark of the InferenceMAX kind: official container, per-model recipe "
                        "(engine defaults, --max-num-seqs / max_batch_size from the recipe, prefix caching "
                        "off), benchmark_serving.py at fixed concurrency, 2·C warm-ups run and awaited "
                        "before the measured run (which starts cold with C requests at once), 10·C prompts, "
                        "lengths uniform on [0.8 L, L]",
        "InferenceMAX benchmarks/benchmark_lib.sh run_benchmark_serving (--num-prompts CONC*10, "
        "--max-concurrency CONC, --num-warmups 2*CONC, --request-rate inf, --ignore-eos, "
        "--random-range-ratio $RANDOM_RANGE_RATIO = 0.8 in its README); utils/bench_serving/"
        "benchmark_serving.py sample_random_requests: randint(int(L * r), L + 1); its benchmark(): "
        "warm-up tasks awaited with asyncio.gather before the main run",
        prompts_per_client=10, warmup_per_client=2, range_ratio=0.8, length_range="below",
        max_num_seqs_from="batch_size", warmup_drained=True, recipe_args=INFERENCEMAX_RECIPE_ARGS),
    Harness(
        "genai-perf", "genai-perf at fixed concurrency as aiconfigurator's runner calls it: 2·C warm-up "
                      "requests, 10·C measured, synthetic lengths with stddev 0 (exact); engine defaults",
        "ai-dynamo/aiconfigurator src/aiconfigurator/eval/benchmarks/genai_perf_runner.py (--request-count "
        "10·C, --warmup-request-count 2·C, --concurrency C); genai-perf --synthetic-input-tokens-stddev / "
        "--output-tokens-stddev default 0",
        prompts_per_client=10, warmup_per_client=2),
    Harness(
        "steady", "servesim's earlier protocol (legacy, comparison only): engine defaults, 2·C warm-up, "
                  "client phases spread by the per-engine fitted client_phase_spread",
        "sim/workload/client_phase.py", prompts_per_client=10, warmup_per_client=2, fitted_phase_spread=True),
)}
DEFAULT_HARNESS = "aic"
#: campaign (glob, first match) -> harness; rows without a campaign take the default harness
CAMPAIGN_HARNESS: dict[str, str] = {
    "aic-gap-analysis": "aic",
    # 68 of its 76 rows repeat a 2026-03-25 / 2026-04-06 / db-dump row's TTFT to 0.01 ms (same
    # model, GPU, engine, isl/osl, concurrency, TP): nightly-harness measurements, not aic's
    "qwen3.5-397b-gap-analysis": "inferencemax",
    "*-gap-analysis": "aic",
    "db-dump/*": "inferencemax",
    "20[0-9][0-9]-*": "inferencemax",
}

#: a harness YAML's keys -> what they take
YAML_KEYS = {
    "name": "a name (required)",
    "description": "text",
    "source": "text: where the settings come from",
    "prompts_per_client": "measured requests per client, a whole number >= 1 (or num_prompts)",
    "num_prompts": "measured requests in all, a whole number >= 1 (or prompts_per_client)",
    "warmup_per_client": "warm-up requests per client, excluded from the means, a whole number >= 0",
    "warmup_drained": "true if the warm-up is a phase that finishes before the measured run starts "
                      "(simulated as none), false if it is the first requests of one stream",
    "lengths": "'exact', or a mapping {range_ratio: r in [0, 1), range: below | around}",
    "deployment": f"one of {', '.join(DEPLOYMENTS)}",
    "max_num_seqs_from": "row column that set the engine's max batch: batch_size or concurrency",
    "engine_args": "mapping engine -> mapping of servesim config keys",
    "think_time_ms": "mean client think time between a response and the next send, ms, >= 0",
    "recipe_args": "list of {model: glob, systems: [glob, ...], engine, args: mapping of config keys, "
                   "source: text, quant, tp, concurrency, formulas: mapping of config keys to formulas of "
                   "isl, osl, concurrency, attention_dp: true | false (rows with / without attention DP), "
                   "engine_versions: [first, below] (engine releases, null = open)}",
}


def _whole(path: str, key: str, v: Any, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ConfigError(f"{path}: {key}: must be a whole number >= {minimum}, got {v!r}")
    return v


def harness_from_dict(data: Any, path: str = "harness") -> Harness:
    """A :class:`Harness` from a YAML mapping; ConfigError (one line, naming the key) if invalid."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a harness is a mapping of {', '.join(YAML_KEYS)}; got {type(data).__name__}")
    unknown = [k for k in data if k not in YAML_KEYS]
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: unknown key; valid: {', '.join(YAML_KEYS)}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{path}: name: required, a non-empty string")
    kw: dict[str, Any] = {"name": name.strip()}
    for k in ("description", "source"):
        if k in data:
            if not isinstance(data[k], str):
                raise ConfigError(f"{path}: {k}: must be text, got {data[k]!r}")
            kw[k] = data[k]
    if "prompts_per_client" in data and "num_prompts" in data:
        raise ConfigError(f"{path}: num_prompts: give prompts_per_client or num_prompts, not both")
    if "num_prompts" in data:
        kw["num_prompts"] = _whole(path, "num_prompts", data["num_prompts"], 1)
        kw["prompts_per_client"] = None
    if "prompts_per_client" in data:
        kw["prompts_per_client"] = _whole(path, "prompts_per_client", data["prompts_per_client"], 1)
    if "warmup_per_client" in data:
        kw["warmup_per_client"] = _whole(path, "warmup_per_client", data["warmup_per_client"], 0)
    if "warmup_drained" in data:
        if not isinstance(data["warmup_drained"], bool):
            raise ConfigError(f"{path}: warmup_drained: must be true or false, got {data['warmup_drained']!r}")
        kw["warmup_drained"] = data["warmup_drained"]
    if "lengths" in data:
        ln = data["lengths"]
        if ln == "exact":
            kw["range_ratio"] = 0.0
        elif isinstance(ln, dict):
            bad = [k for k in ln if k not in ("range_ratio", "range")]
            if bad:
                raise ConfigError(f"{path}: lengths.{bad[0]}: unknown key; valid: range_ratio, range")
            r = ln.get("range_ratio")
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r < 1:
                raise ConfigError(f"{path}: lengths.range_ratio: must be a number in [0, 1), got {r!r}")
            rng = ln.get("range", "below")
            if rng not in LENGTH_RANGES:
                raise ConfigError(f"{path}: lengths.range: must be one of {', '.join(LENGTH_RANGES)}, got {rng!r}")
            kw["range_ratio"], kw["length_range"] = float(r), rng
        else:
            raise ConfigError(f"{path}: lengths: must be 'exact' or a mapping {{range_ratio, range}}, got {ln!r}")
    if "deployment" in data:
        if data["deployment"] not in DEPLOYMENTS:
            raise ConfigError(f"{path}: deployment: must be one of {', '.join(DEPLOYMENTS)}, "
                              f"got {data['deployment']!r}")
        kw["deployment"] = data["deployment"]
    if "max_num_seqs_from" in data:
        if data["max_num_seqs_from"] not in BATCH_FROM:
            raise ConfigError(f"{path}: max_num_seqs_from: must be batch_size or concurrency, "
                              f"got {data['max_num_seqs_from']!r}")
        kw["max_num_seqs_from"] = data["max_num_seqs_from"]
    if "engine_args" in data:
        ea = data["engine_args"]
        if not isinstance(ea, dict) or not all(isinstance(v, dict) for v in ea.values()):
            raise ConfigError(f"{path}: engine_args: must map an engine to a mapping of config keys, got {ea!r}")
        from sim.presets import PRESETS

        for eng in ea:
            if eng not in PRESETS:
                raise ConfigError(f"{path}: engine_args.{eng}: unknown engine; valid: {', '.join(PRESETS)}")
            for key, value in ea[eng].items():  # checked now, as recipe_args' settings are
                _check_recipe_arg(f"{path}: engine_args.{eng}.{key}", str(key), value)
        kw["engine_args"] = {str(k): dict(v) for k, v in ea.items()}
    if "recipe_args" in data:
        kw["recipe_args"] = _recipe_args(path, data["recipe_args"])
    if "think_time_ms" in data:
        t = data["think_time_ms"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (0 <= t <= 3.6e6):
            raise ConfigError(f"{path}: think_time_ms: must be a number from 0 to 3,600,000, got {t!r}")
        kw["think_time_s"] = float(t) / 1e3
    return Harness(**kw)


def _recipe_args(path: str, items: Any) -> tuple[RecipeArgs, ...]:
    """``recipe_args`` of a harness YAML, checked (one-line errors naming the entry)."""
    from sim.presets import PRESETS

    if not isinstance(items, list):
        raise ConfigError(f"{path}: recipe_args: must be a list of mappings, got {items!r}")
    out = []
    for i, it in enumerate(items):
        where = f"{path}: recipe_args[{i}]"
        if not isinstance(it, dict):
            raise ConfigError(f"{where}: must be a mapping of model, systems, engine, args, source")
        bad = [k for k in it if k not in ("model", "systems", "engine", "args", "source", "quant", "tp",
                                          "concurrency", "formulas", "attention_dp", "engine_versions")]
        if bad:
            raise ConfigError(f"{where}.{bad[0]}: unknown key; valid: model, systems, engine, args, source, "
                              "quant, tp, concurrency, formulas, attention_dp, engine_versions")
        model, systems, engine, args = it.get("model"), it.get("systems"), it.get("engine"), it.get("args")
        if not isinstance(model, str) or not model:
            raise ConfigError(f"{where}.model: required, a model path glob")
        if isinstance(systems, str):
            systems = [systems]
        if not isinstance(systems, list) or not systems or not all(isinstance(g, str) for g in systems):
            raise ConfigError(f"{where}.systems: required, a list of system globs, got {systems!r}")
        if engine not in PRESETS:
            raise ConfigError(f"{where}.engine: unknown engine {engine!r}; valid: {', '.join(PRESETS)}")
        formulas = it.get("formulas", {})
        if not isinstance(formulas, dict) or not all(isinstance(v, str) for v in formulas.values()):
            raise ConfigError(f"{where}.formulas: must map config keys to formulas (text), got {formulas!r}")
        for k, expr in formulas.items():  # checked now: the key, and the formula on sample values
            _check_formula_key(f"{where}.formulas.{k}", str(k))
            eval_formula(expr, {n: 1024 for n in FORMULA_NAMES}, f"{where}.formulas.{k}")
        if args is None and formulas:
            args = {}
        if not isinstance(args, dict) or not (args or formulas):
            raise ConfigError(f"{where}.args: required, a mapping of servesim config keys, got {args!r}")
        for key, value in args.items():
            _check_recipe_arg(f"{where}.args.{key}", str(key), value)
        quant = it.get("quant", [])
        tps = it.get("tp", [])
        conc = it.get("concurrency", [None, None])
        if (not isinstance(quant, list) or not all(isinstance(q, str) for q in quant)
                or not isinstance(tps, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tps)
                or not isinstance(conc, list) or len(conc) != 2
                or not all(c is None or (isinstance(c, int) and not isinstance(c, bool)) for c in conc)):
            raise ConfigError(f"{where}: quant must be a list of labels, tp a list of whole numbers, "
                              f"concurrency [min, max] (null = open); got {quant!r}, {tps!r}, {conc!r}")
        adp = it.get("attention_dp")
        if adp is not None and not isinstance(adp, bool):
            raise ConfigError(f"{where}.attention_dp: true, false or null (either), got {adp!r}")
        versions = _release_bounds(f"{where}.engine_versions", it.get("engine_versions", [None, None]))
        out.append(RecipeArgs(model, tuple(systems), engine, dict(args), str(it.get("source", "")),
                              tuple(q.lower() for q in quant), tuple(tps), (conc[0], conc[1]),
                              {str(k): v for k, v in formulas.items()}, where, adp, versions))
    return tuple(out)


def _release_bounds(where: str, v: Any) -> tuple[str | None, str | None]:
    """``engine_versions`` of a recipe entry: [first, below], each an engine release
    (e.g. "0.19.0") or null; one-line ConfigError naming ``where`` otherwise."""
    from sim.presets.versions import parse_version

    if not isinstance(v, list) or len(v) != 2:
        raise ConfigError(f"{where}: [first, below] engine releases (null = open), got {v!r}")
    for b in v:
        if b is not None and (not isinstance(b, str) or parse_version(b) is None):
            raise ConfigError(f"{where}: {b!r} is not an engine release such as \"0.19.0\"")
    lo, hi = v
    if lo is not None and hi is not None and not parse_version(lo) < parse_version(hi):
        raise ConfigError(f"{where}: {lo!r} is not below {hi!r}; no release would match")
    return lo, hi


def _check_recipe_arg(where: str, key: str, value: Any) -> None:
    """A recipe's fixed setting, checked when the harness is read: an engine key of the config
    (:func:`_check_formula_key`) whose value has the field's type and bounds (the checks across
    keys, which depend on the row's model and layout, run when a row is simulated)."""
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError

    from sim.config import SimConfig

    _check_formula_key(where, key)
    field = SimConfig.model_fields[key]
    try:
        kind = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        TypeAdapter(kind).validate_python(value)
    except ValidationError as e:
        raise ConfigError(f"{where}: {e.errors()[0]['msg']}, got {value!r}") from None


def _check_formula_key(where: str, key: str) -> None:
    """A recipe (setting or formula) sets an engine key of the config: not the row's model, GPU, engine
    or workload (:data:`NOT_RECIPE_KEYS`), nothing unknown. One line naming ``where``."""
    import difflib

    from sim.config import SimConfig

    if key in NOT_RECIPE_KEYS or key.startswith("workload."):
        what = "engine_args" if "engine_args" in where else "a recipe"
        raise ConfigError(f"{where}: {what} sets engine keys; {key} is fixed by the row or the run "
                          f"(not one of {', '.join(NOT_RECIPE_KEYS)}, workload.*)")
    if key not in SimConfig.model_fields:
        close = difflib.get_close_matches(key, list(SimConfig.model_fields), n=1)
        raise ConfigError(f"{where}: unknown config key {key!r}" + (f"; did you mean {close[0]}?" if close else ""))


def load_harness(spec: str | Path | Harness) -> Harness:
    """A named harness, or one read from a YAML file (:func:`harness_from_dict`)."""
    if isinstance(spec, Harness):
        return spec
    s = str(spec)
    if s in HARNESSES:
        return HARNESSES[s]
    p = Path(s)
    if p.suffix.lower() in (".yaml", ".yml") or p.exists():
        from sim.errors import require_file
        from sim.yaml_io import safe_load_unique

        require_file(p, "harness")
        try:
            data = safe_load_unique(p.read_text())
        except Exception as e:  # noqa: BLE001 - the YAML parser's message, one line
            raise ConfigError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
        return harness_from_dict(data, str(p))
    raise ConfigError(f"harness: unknown {s!r}; valid: {', '.join(HARNESSES)}, or a harness YAML file")


def _cell(row: dict, key: str) -> str:
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v).strip()


def harness_for_campaign(campaign: str, mapping: dict[str, str] | None = None) -> str | None:
    """The harness name of a campaign (first glob of ``mapping`` that matches), or None."""
    for pat, name in (CAMPAIGN_HARNESS if mapping is None else mapping).items():
        if fnmatch.fnmatchcase(campaign, pat):
            return name
    return None


def harness_for_row(row: dict, default: str | Path | Harness | None = None,
                    mapping: dict[str, str] | None = None) -> Harness:
    """The harness of one row: ``default`` if given (``validate --harness``:
    every row), else the row's ``harness`` cell, else its ``campaign`` mapped
    by ``mapping`` (:data:`CAMPAIGN_HARNESS` if None), else ``aic``."""
    if default is not None:
        return load_harness(default)
    if _cell(row, "harness"):
        return load_harness(_cell(row, "harness"))
    campaign = _cell(row, "campaign")
    if campaign:
        name = harness_for_campaign(campaign, mapping)
        if name:
            return load_harness(name)
    return HARNESSES[DEFAULT_HARNESS]


def load_campaign_map(path: str | Path) -> dict[str, str]:
    """A YAML mapping campaign glob -> harness name or harness YAML path (checked)."""
    from sim.errors import require_file
    from sim.yaml_io import safe_load_unique

    p = Path(path)
    require_file(p, "campaign harness map")
    data = safe_load_unique(p.read_text())
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: must map a campaign (glob) to a harness name or YAML file")
    out = {}
    for k, v in data.items():
        if not isinstance(v, str):
            raise ConfigError(f"{p}: {k}: must be a harness name or YAML file, got {v!r}")
        if v not in HARNESSES and not Path(v).is_absolute() and (p.parent / v).exists():
            v = str(p.parent / v)
        try:
            load_harness(v)  # refused here if it is not a harness
        except ConfigError as e:
            raise ConfigError(f"{p}: {k}: {e}") from None
        out[str(k)] = v
    return out
