"""The launch command of a simulated configuration on its engine: what to run to
serve what servesim simulated (``plan`` and ``compare`` print and write it for
the winner).

- ``vllm`` (also a config without ``engine``, which has vLLM's behaviour):
  ``vllm serve MODEL --tensor-parallel-size … --max-num-seqs … --max-num-batched-tokens …``
  (flags from ``vllm/engine/arg_utils.py``; ``num_replicas`` → ``--data-parallel-size``, but for
  an MoE model, whose DP ranks step in lockstep, one command per replica);
- ``sglang``: ``python -m sglang.launch_server --model-path MODEL --tp … --max-running-requests …
  --chunked-prefill-size … --mem-fraction-static …`` (``server_args.py``; replicas → ``--dp``);
- ``trtllm``: ``trtllm-serve MODEL --backend pytorch --tp_size … --max_batch_size …
  --max_num_tokens … --extra_llm_api_options extra-llm-api-options.yaml``, the YAML holding
  ``kv_cache_config`` (``free_gpu_memory_fraction``, ``enable_block_reuse``,
  ``tokens_per_block``), ``scheduler_config.capacity_scheduler_policy`` and
  ``enable_chunked_prefill``;
- a disaggregated deployment (``disaggregation``), given its pools' resolved
  configs: one command per prefill and decode worker with the engine's P/D
  setup, and the front end that joins them (:func:`_disaggregated_pools`);
  without them, the pools are named and the command is not written.

Every value is the resolved one the simulation ran with (hardware-dependent
defaults filled in), so the engine runs what was simulated rather than its own
defaults. A configuration that the engine has no setting for is said so
(:attr:`Launch.problems`), never silently approximated: ``scheduler: continuous``
is vLLM v0's iteration-level batching (prefill-only or decode-only steps), which
vLLM V1 removed; ``static`` is request-level batching, which none of the three
offers; a memory fraction under another engine's rule means another amount of
KV memory.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from sim.errors import ServesimError

#: scheduler → the engine's setting (None: the engine has no such mode)
_VLLM_MODES = {"chunked": True, "mixed": False}  # --enable-chunked-prefill / --no-enable-chunked-prefill
_SGLANG_MODES = {"prefill_first": True, "prefill_first_whole": False,  # chunked_prefill_size -1 = off
                 "prefill_first_mixed": True}  # with --enable-mixed-chunk
_TRTLLM_MODES = {"mixed": False, "chunked": True}  # enable_chunked_prefill
_RULE = {"vllm": "utilization", "sglang": "static_fraction", "trtllm": "free_fraction"}
_NO_MODE = {
    "continuous": "scheduler 'continuous' (prefill-only or decode-only steps) is vLLM v0's scheduler, which vLLM V1 "
                  "removed: no current vLLM setting runs it (the nearest are 'chunked', vLLM's default, and "
                  "'mixed', --no-enable-chunked-prefill)",
    "static": "scheduler 'static' (request-level batching) is not offered by vLLM, SGLang or TensorRT-LLM",
}
EXTRA_YAML = "extra-llm-api-options.yaml"


@dataclass
class Launch:
    """``argv`` of the launch command; ``yaml`` the TensorRT-LLM extra options file
    (``EXTRA_YAML``), else None; ``problems``: why the command does not run what
    was simulated (empty when it does)."""

    engine: str
    argv: list[str]
    yaml: str | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: more files the commands read (name -> text): a disaggregated deployment's
    #: per-pool TensorRT-LLM options and its ``trtllm-serve disaggregated`` config
    files: dict[str, str] = field(default_factory=dict)
    #: a disaggregated deployment's commands, in launch order: (what it is, argv)
    parts: list[tuple[str, list[str]]] = field(default_factory=list)

    def shell(self, argv: list[str] | None = None) -> str:
        """The command (``argv``, default this launch's) as a shell line wrapped at
        each flag (``\\`` continuations)."""
        parts, cur = [], []
        for a in self.argv if argv is None else argv:
            if a.startswith("--") and cur:
                parts.append(shlex.join(cur))
                cur = []
            cur.append(a)
        parts.append(shlex.join(cur))
        return " \\\n    ".join(parts)

    def markdown(self, heading: str) -> list[str]:
        """Report lines (``report.md`` / ``plan.md``): ``heading``, the problems and
        notes, the extra-options YAML and the command."""
        out = [f"## {heading}", "",
               "Every value as simulated (hardware-dependent defaults resolved); also in `launch.sh`"
               + (" and `extra-llm-api-options.yaml`" if self.yaml is not None else "") + ".", ""]
        out += [f"**Not what was simulated**: {p}." for p in self.problems]
        out += [f"Note: {n}." for n in self.notes]
        if self.problems or self.notes:
            out.append("")
        if self.yaml is not None:
            out += ["```yaml", self.yaml.rstrip("\n"), "```", ""]
        for name, body in self.files.items():
            out += [f"`{name}`:", "", "```yaml", body.rstrip("\n"), "```", ""]
        if self.parts:
            return out + ["```bash", *(f"# {what}\n{self.shell(a)}" for what, a in self.parts), "```", ""]
        return out + ["```bash", self.shell(), "```", ""]

    def text(self) -> str:
        """The command with its notes and problems as ``#`` comments (a shell script body)."""
        lines = [f"# {p}" for p in (*(f"NOT the simulated configuration: {p}" for p in self.problems),
                                     *self.notes)]
        if self.yaml is not None:
            lines += [f"cat > {EXTRA_YAML} <<'EOF'", self.yaml.rstrip("\n"), "EOF"]
        for name, body in self.files.items():
            lines += [f"cat > {name} <<'EOF'", body.rstrip("\n"), "EOF"]
        if self.parts:
            for what, a in self.parts:
                lines += [f"# {what}", self.shell(a)]
        else:
            lines.append(self.shell())
        return "\n".join(lines) + "\n"


_HUB_FILE = re.compile(r"^([A-Za-z0-9][\w.-]*)--([\w.-]+?)(?:_config)?\.json$")
_HUB_DIR = re.compile(r"^models--([A-Za-z0-9][\w.-]*)--([\w.-]+)$")


def hub_id_of_path(model: str) -> str | None:
    """The Hugging Face id a local ``config.json`` path names, where its path
    says it: a Hub cache directory (``.../models--ORG--NAME/snapshots/<rev>/config.json``,
    huggingface_hub's cache layout) or a file named ``ORG--NAME_config.json``
    (the same convention, e.g. ``../shared/models/``); None for anything else
    (an engine cannot serve a config file: the launch line needs the checkpoint)."""
    if not model.endswith(".json"):
        return None
    path = model.replace("\\", "/").split("/")
    for part in reversed(path[:-1]):
        m = _HUB_DIR.match(part)
        if m:
            return f"{m.group(1)}/{m.group(2)}"
    m = _HUB_FILE.match(path[-1])
    return f"{m.group(1)}/{m.group(2)}" if m else None


def model_checkpoint(model: str, quantization: str | None) -> tuple[str, bool]:
    """The Hugging Face id to serve for servesim's ``model`` (a preset name → its
    Instruct id; an id or path as given) and whether it is a checkpoint already in
    ``quantization`` (a pre-quantized id of the preset)."""
    from sim.model_spec import _alias_index, _presets  # noqa: PLC0415 (the preset table get_model reads)

    hit = _alias_index().get(str(model).lower())
    if hit is None:
        return hub_id_of_path(str(model)) or str(model), False
    key, q = hit
    entry = _presets()[key]
    if quantization:
        for hf_id, qq in (entry.get("quantized_ids") or {}).items():
            if qq == quantization:
                return hf_id, True
    if q is not None:  # the user named a pre-quantized id
        return str(model), q == quantization
    if str(model).lower() != key.lower():
        return str(model), False
    ids = entry.get("hf_ids") or [key]
    return next((i for i in ids if i.endswith("-Instruct")), ids[0]), False


def launch_command(cfg: dict[str, Any], pools: dict[str, dict[str, Any]] | None = None) -> Launch:
    """The launch command of a resolved config (``summary.json``'s ``config``);
    for a disaggregated one, ``pools``: each pool's resolved engine config
    (``prefill`` / ``decode``: ``Deployment.disagg.<pool>.cfg`` dumped), without
    which its per-pool commands cannot be written."""
    engine = cfg.get("engine") or "vllm"
    if cfg.get("disaggregation"):
        la = _disaggregated_pools(cfg, engine, pools) if pools is not None else _disaggregated(cfg, engine)
    else:
        la = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}[engine](cfg)
    la.notes += release_notes(engine, cfg.get("engine_version"))
    return la


def release_notes(engine: str, version: str | None) -> list[str]:
    """What a launch command written for ``engine`` release ``version`` should
    know: the options are the newest modelled release's names (the preset's
    ``versions``); TensorRT-LLM before 0.19 switched the overlap scheduler with
    ``pytorch_backend_config.enable_overlap_scheduler`` (the 0.18.2 docs), not
    1.0's ``disable_overlap_scheduler``. None without a release."""
    from sim.presets import PRESETS, version_defaults

    if not version or engine not in PRESETS:
        return []
    out = [f"simulated as {engine} {version}; the options are written with the names of "
           f"{PRESETS[engine].versions}"]
    if engine == "trtllm" and "overlap_scheduling" in version_defaults(engine, version):  # (VERSION_CHANGES)
        out.append(f"TensorRT-LLM {version} (before 0.19) sets the overlap scheduler with "
                   "pytorch_backend_config: enable_overlap_scheduler, not disable_overlap_scheduler")
    return out


def _disaggregated(cfg: dict[str, Any], engine: str) -> Launch:
    """A disaggregated deployment launches a prefill and a decode pool, each with
    its engine's P/D setup (vLLM ``--kv-transfer-config``, SGLang
    ``--disaggregation-mode``, TensorRT-LLM's disaggregated server); their limits
    are resolved per pool, so no single engine command is written: the pools are
    named and the command is a comment."""
    d = cfg["disaggregation"]
    tp = cfg.get("tensor_parallel_size")
    pools = ", ".join(f"{d[f'num_{p}_workers']} {p} worker(s) of TP "
                      f"{(d.get(p) or {}).get('tensor_parallel_size', tp)}" for p in ("prefill", "decode"))
    la = Launch(engine, ["#", f"disaggregated {engine}: {pools}"])
    la.problems.append(f"disaggregated prefill and decode pools ({pools}): launch each pool's workers with "
                       f"{engine}'s disaggregation setup; per-pool commands are not written")
    return la


#: servesim's ``kv_connector`` -> SGLang ``--disaggregation-transfer-backend`` / TensorRT-LLM
#: ``cache_transceiver_config.backend`` (None: the engine has no such backend)
_SGLANG_BACKEND = {"NixlConnector": "nixl", "nixl": "nixl", "MooncakeConnector": "mooncake", "mooncake": "mooncake"}
_TRTLLM_BACKEND = {"NixlConnector": "NIXL", "nixl": "NIXL"}
#: first port of each pool's workers (worker i listens on base + i) and of the front end
_PORTS = {"prefill": 8100, "decode": 8200, "router": 8000}
_POOLS = ("prefill", "decode")


def _disaggregated_pools(cfg: dict[str, Any], engine: str, pools: dict[str, dict[str, Any]]) -> Launch:
    """Per-pool commands of a disaggregated deployment: each pool's engine command
    (its resolved config, :func:`launch_command`) once per worker with the engine's
    P/D setup, then the front end that sends a request to a prefill worker, then a
    decode worker, all on one host (``localhost``, ports from ``_PORTS``; replace
    with the workers' hosts):

    - vLLM: ``--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'``
      on every worker, each with its own ``VLLM_NIXL_SIDE_CHANNEL_PORT``, and the
      proxy ``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py
      --prefiller-hosts … --prefiller-ports … --decoder-hosts … --decoder-ports …``
      (docs.vllm.ai/en/stable/features/nixl_connector_usage.html); the other
      connectors (P2P-NCCL, LMCache, Mooncake) take per-connector settings not
      written here;
    - SGLang: ``--disaggregation-mode prefill|decode
      --disaggregation-transfer-backend nixl|mooncake`` (each prefill worker its
      own ``--disaggregation-bootstrap-port``, default 8998), and the router
      ``python -m sglang_router.launch_router --pd-disaggregation --prefill URL
      BOOTSTRAP_PORT … --decode URL …``
      (docs.sglang.io/advanced_features/pd_disaggregation.html);
    - TensorRT-LLM: a ``trtllm-serve`` per context (prefill) and generation
      (decode) server, each with its options file holding
      ``cache_transceiver_config: {backend: …}`` (the overlap scheduler as
      simulated; releases before NVIDIA/TensorRT-LLM#10755 require it off on
      context servers: a note says so), and
      ``trtllm-serve disaggregated -c disagg-config.yaml`` listing their URLs
      under ``context_servers`` / ``generation_servers``
      (NVIDIA/TensorRT-LLM ``examples/disaggregated/README.md``,
      docs ``features/disagg-serving.md``)."""
    d = cfg["disaggregation"]
    conn = d.get("kv_connector") or "NixlConnector"
    n = {p: int(d[f"num_{p}_workers"]) for p in _POOLS}
    urls = {p: [f"localhost:{_PORTS[p] + i}" for i in range(n[p])] for p in _POOLS}
    la = Launch(engine, [], notes=[f"{n['prefill']} prefill and {n['decode']} decode worker(s), written for one host "
                                   "(localhost, a port each): run each worker on its own GPUs "
                                   "(CUDA_VISIBLE_DEVICES) or host and give the front end their addresses"])
    cmds: dict[str, Launch] = {}
    for p in _POOLS:
        pc = {k: v for k, v in pools[p].items() if k not in ("disaggregation", "num_replicas")}
        sub = launch_command(pc)
        la.problems += [f"{p} pool: {x}" for x in sub.problems]
        la.notes += [f"{p} pool: {x}" for x in sub.notes if x not in la.notes]
        cmds[p] = sub
    if engine == "vllm":
        if conn != "NixlConnector":
            la.problems.append(f"kv_connector {conn!r}: only NixlConnector's vLLM setup is written here")
        ktc = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
        for p in _POOLS:
            for i, u in enumerate(urls[p]):
                port = u.split(":")[1]
                side = 5600 + (0 if p == "prefill" else n["prefill"]) + i
                la.parts.append((f"{p} worker {i + 1} of {n[p]}",
                                 ["env", f"VLLM_NIXL_SIDE_CHANNEL_PORT={side}", *cmds[p].argv, "--port", port,
                                  "--kv-transfer-config", ktc]))
        proxy = ["python", "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py", "--port",
                 str(_PORTS["router"]), "--prefiller-hosts", *["localhost"] * n["prefill"],
                 "--prefiller-ports", *[u.split(":")[1] for u in urls["prefill"]],
                 "--decoder-hosts", *["localhost"] * n["decode"],
                 "--decoder-ports", *[u.split(":")[1] for u in urls["decode"]]]
        la.parts.append(("the proxy (vLLM's NIXL example): prefill, then decode", proxy))
    elif engine == "sglang":
        backend = _SGLANG_BACKEND.get(conn)
        if backend is None:
            la.problems.append(f"kv_connector {conn!r} is not an SGLang transfer backend (nixl, mooncake)")
            backend = "nixl"
        router = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
        for p in _POOLS:
            for i, u in enumerate(urls[p]):
                extra = ["--port", u.split(":")[1], "--disaggregation-mode", p,
                         "--disaggregation-transfer-backend", backend]
                if p == "prefill":
                    boot = str(8998 + i)
                    extra += ["--disaggregation-bootstrap-port", boot]
                    router += ["--prefill", f"http://{u}", boot]
                else:
                    router += ["--decode", f"http://{u}"]
                la.parts.append((f"{p} worker {i + 1} of {n[p]}", [*cmds[p].argv, *extra]))
        la.parts.append(("the router (sglang-router, PD mode)", router + ["--host", "0.0.0.0", "--port",
                                                                          str(_PORTS["router"])]))
    else:  # trtllm
        backend = _TRTLLM_BACKEND.get(conn)
        if backend is None:
            la.problems.append(f"kv_connector {conn!r}: TensorRT-LLM's cache transceiver backends here: NIXL "
                               "(UCX, MPI and DEFAULT are TensorRT-LLM's own)")
            backend = "DEFAULT"
        for p, role in (("prefill", "context"), ("decode", "generation")):
            name = f"extra-llm-api-options-{p}.yaml"
            y = cmds[p].yaml or ""
            if p == "prefill" and pools[p].get("overlap_scheduling"):
                la.notes.append("prefill pool: TensorRT-LLM releases before NVIDIA/TensorRT-LLM#10755 (January "
                                "2026) refuse the overlap scheduler on context servers: there set "
                                "disable_overlap_scheduler: true (simulated with it on)")
            la.files[name] = y + f"cache_transceiver_config:\n  backend: {backend}\n"
            argv = [name if a == EXTRA_YAML else a for a in cmds[p].argv]
            for i, u in enumerate(urls[p]):
                la.parts.append((f"{role} ({p}) server {i + 1} of {n[p]}",
                                 [*argv, "--host", "localhost", "--port", u.split(":")[1]]))
        la.files["disagg-config.yaml"] = "\n".join(
            ["hostname: localhost", f"port: {_PORTS['router']}", "backend: pytorch",
             "context_servers:", f"  num_instances: {n['prefill']}", "  urls:", *[f"    - \"{u}\"" for u in urls["prefill"]],
             "generation_servers:", f"  num_instances: {n['decode']}", "  urls:",
             *[f"    - \"{u}\"" for u in urls["decode"]]]) + "\n"
        la.parts.append(("the disaggregated front end", ["trtllm-serve", "disaggregated", "-c", "disagg-config.yaml"]))
    la.argv = [a for _, argv in la.parts for a in argv]
    return la


def _common_problems(cfg: dict[str, Any], engine: str, modes: dict) -> list[str]:
    out = []
    sched = cfg["scheduler"]
    if sched not in modes:
        out.append(_NO_MODE.get(sched, f"scheduler {sched!r} has no {engine} setting (its modes here: "
                                       f"{', '.join(modes)})"))
    if cfg.get("kv_memory_rule") != _RULE[engine]:
        out.append(f"kv_memory_rule {cfg.get('kv_memory_rule')!r} is not {engine}'s ({_RULE[engine]}): its "
                   "gpu_memory_utilization would size another amount of KV memory")
    if cfg.get("num_gpu_blocks_override"):
        out.append(f"num_gpu_blocks_override {cfg['num_gpu_blocks_override']} fixes the KV blocks; "
                   + ("vLLM's --num-gpu-blocks-override is a testing flag" if engine == "vllm" else
                      f"{engine} has no such flag"))
    if cfg.get("disaggregation"):
        out.append("disaggregated prefill and decode pools: this is one aggregated engine; launch each pool's "
                   f"workers with {engine}'s disaggregation (KV connector) setup")
    if cfg.get("kv_allocation") == "contiguous":
        out.append("kv_allocation 'contiguous' is the pre-PagedAttention baseline, not an engine setting")
    if engine != "trtllm" and cfg.get("capacity_scheduler_policy"):
        out.append(f"capacity_scheduler_policy {cfg['capacity_scheduler_policy']!r} is TensorRT-LLM's admission")
    return out


def _precision(cfg: dict[str, Any], engine: str, launch: Launch) -> tuple[str, list[str]]:
    """The checkpoint to serve and the quantization flags."""
    q = cfg.get("quantization")
    model, prequant = model_checkpoint(cfg["model"], q)
    flags: list[str] = []
    if q and not prequant:
        if q == "fp8" and engine in ("vllm", "sglang"):
            flags = ["--quantization", "fp8"]  # online dynamic FP8 of a 16-bit checkpoint
        else:
            launch.notes.append(f"weights in {q}: serve a {q} checkpoint of {model} (servesim's quantization "
                                f"{q!r}; {engine} reads the precision from the checkpoint)")
    return model, flags


def _is_moe(cfg: dict[str, Any]) -> bool:
    """Whether the config's model has routed experts (False if it cannot be read here)."""
    return _num_experts(cfg) is not None


def _num_experts(cfg: dict[str, Any]) -> int | None:
    """The config's model's routed experts (None for a dense model or one that cannot be read here:
    the launch line is written whatever the model file says)."""
    from sim.model_spec import routed_experts_of  # noqa: PLC0415

    return routed_experts_of(cfg["model"])


def _replicas_note(la: Launch, cfg: dict[str, Any]) -> None:
    """``num_replicas`` independent copies of the command (each its own GPUs) behind a load balancer."""
    n = cfg.get("num_replicas", 1)
    if n > 1:
        fe = cfg.get("num_frontends", 1)
        la.notes.append(f"{n} replicas: run this command {n} times (each on its own GPUs) behind a load balancer "
                        f"(simulated router {cfg.get('router')!r}"
                        + (f", as {fe} router processes behind nginx, each with its own round-robin" if fe > 1
                           else "") + ")")


def _vllm(cfg: dict[str, Any]) -> Launch:
    la = Launch("vllm", [])
    la.problems = _common_problems(cfg, "vllm", _VLLM_MODES)
    model, qflags = _precision(cfg, "vllm", la)
    a = ["vllm", "serve", model, "--tensor-parallel-size", str(cfg["tensor_parallel_size"])]
    dp, reps = cfg.get("data_parallel_size", 1), cfg.get("num_replicas", 1)
    if dp > 1:
        a += ["--data-parallel-size", str(dp)]
        _replicas_note(la, cfg)
    elif reps > 1 and _is_moe(cfg):
        # vLLM's data-parallel ranks of an MoE model step in lockstep (an idle rank runs dummy
        # forwards for the experts' collectives: docs/serving/data_parallel_deployment.md), not as
        # the independent replicas simulated
        _replicas_note(la, cfg)
    elif reps > 1:  # independent replicas: vLLM's data parallelism of whole engines
        a += ["--data-parallel-size", str(reps)]
        if cfg.get("router") != "least_outstanding_requests":
            la.notes.append(f"simulated router {cfg.get('router')!r}; vLLM's data-parallel balancer sends each "
                            "request to the least loaded engine")
    if (_expert_parallel_size(cfg) or 1) > 1:  # vLLM's only EP layout: whole experts on every GPU
        a += ["--enable-expert-parallel"]
    if cfg.get("num_redundant_experts"):  # vllm/config/parallel.py EPLBConfig.num_redundant_experts
        a += ["--enable-eplb", "--eplb-config", f'{{"num_redundant_experts": {cfg["num_redundant_experts"]}}}']
    if cfg.get("max_total_tokens"):
        la.problems.append(f"max_total_tokens {cfg['max_total_tokens']} caps the KV pool; vLLM has no such flag: "
                           f"--num-gpu-blocks-override {cfg['max_total_tokens'] // cfg['block_size']} fixes the pool "
                           "at that size instead (a testing flag, taken even where memory gives less)")
    a += ["--max-num-seqs", str(cfg["max_num_seqs"]), "--max-num-batched-tokens", str(cfg["max_num_batched_tokens"]),
          "--max-model-len", str(cfg["max_model_len"]),
          "--gpu-memory-utilization", f"{cfg['gpu_memory_utilization']:g}", "--block-size", str(cfg["block_size"])]
    a += ["--enable-prefix-caching" if cfg.get("enable_prefix_caching") else "--no-enable-prefix-caching"]
    if cfg.get("disable_hybrid_kv_cache_manager"):
        a += ["--disable-hybrid-kv-cache-manager"]
    if cfg["scheduler"] in _VLLM_MODES:
        a += ["--enable-chunked-prefill" if _VLLM_MODES[cfg["scheduler"]] else "--no-enable-chunked-prefill"]
    if cfg.get("long_prefill_token_threshold"):
        a += ["--long-prefill-token-threshold", str(cfg["long_prefill_token_threshold"])]
    a += ["--scheduling-policy", cfg.get("policy", "fcfs")]
    a += ["--async-scheduling" if cfg.get("overlap_scheduling") else "--no-async-scheduling"]
    if cfg.get("stream_interval", 1) != 1:  # vLLM PR 27869 (vllm serve --stream-interval)
        a += ["--stream-interval", str(cfg["stream_interval"])]
    a += ["--dtype", cfg.get("dtype", "bfloat16")] + qflags
    if cfg.get("kv_cache_dtype", "auto") != "auto":
        a += ["--kv-cache-dtype", cfg["kv_cache_dtype"]]
    la.argv = a
    return la


def _sglang(cfg: dict[str, Any]) -> Launch:
    la = Launch("sglang", [])
    la.problems = _common_problems(cfg, "sglang", _SGLANG_MODES)
    model, qflags = _precision(cfg, "sglang", la)
    dp, reps = cfg.get("data_parallel_size", 1), cfg.get("num_replicas", 1)
    # with --enable-dp-attention SGLang's --tp is every GPU of the server (attention TP = tp / dp:
    # server_args.py, DP attention docs); servesim's tensor_parallel_size is one attention rank's
    tp = cfg["tensor_parallel_size"] * (dp if dp > 1 else 1)
    a = ["python", "-m", "sglang.launch_server", "--model-path", model, "--tp", str(tp)]
    if dp > 1:
        a += ["--dp", str(dp), "--enable-dp-attention"]
        _replicas_note(la, cfg)
    elif reps > 1:
        a += ["--dp", str(reps)]
    ep = _expert_parallel_size(cfg)
    if ep:
        a += ["--ep-size", str(ep)]
    if cfg.get("num_redundant_experts"):  # server_args.py ep_num_redundant_experts
        a += ["--ep-num-redundant-experts", str(cfg["num_redundant_experts"]), "--enable-eplb"]
    if cfg.get("max_total_tokens"):  # per attention rank, as SGLang reads it (each DP rank's pool)
        a += ["--max-total-tokens", str(cfg["max_total_tokens"])]
    chunk = cfg["max_num_batched_tokens"] if _SGLANG_MODES.get(cfg["scheduler"], True) else -1
    # servesim's limits are per attention rank; with --enable-dp-attention SGLang divides both flags
    # by --dp (server_args.py: chunked_prefill_size // dp_size; model_runner.py:
    # max_running_requests // dp_size), so the flags carry dp x the per-rank value
    per = dp if dp > 1 else 1
    a += ["--max-running-requests", str(cfg["max_num_seqs"] * per),
          "--chunked-prefill-size", str(chunk * per if chunk > 0 else chunk)]
    if cfg.get("max_prefill_tokens"):
        a += ["--max-prefill-tokens", str(cfg["max_prefill_tokens"])]
    if cfg["scheduler"] == "prefill_first_mixed":
        a += ["--enable-mixed-chunk"]
    a += ["--mem-fraction-static", f"{cfg['gpu_memory_utilization']:g}", "--page-size", str(cfg["block_size"]),
          "--context-length", str(cfg["max_model_len"]), "--schedule-policy", "fcfs"]
    if cfg.get("policy") == "priority":
        la.problems.append("policy 'priority' has no SGLang --schedule-policy equivalent here")
    if not cfg.get("enable_prefix_caching"):
        a += ["--disable-radix-cache"]
    if not cfg.get("overlap_scheduling"):
        a += ["--disable-overlap-schedule"]
    if cfg.get("stream_interval", 1) != 1:
        a += ["--stream-interval", str(cfg["stream_interval"])]
    a += ["--dtype", cfg.get("dtype", "bfloat16")] + qflags
    if cfg.get("kv_cache_dtype", "auto") != "auto":
        kd = cfg["kv_cache_dtype"]
        a += ["--kv-cache-dtype", "fp8_e4m3" if kd == "fp8" else kd]
    la.argv = a
    return la


def _expert_parallel_size(cfg: dict[str, Any]) -> int | None:
    """The experts' EP size to write: ``moe_ep_size``, else every GPU of the
    group (tp x dp) with ``enable_expert_parallel``, else None (the engine's
    default: experts tensor-sharded)."""
    if cfg.get("moe_ep_size"):
        return cfg["moe_ep_size"]
    if cfg.get("enable_expert_parallel"):
        return cfg["tensor_parallel_size"] * cfg.get("data_parallel_size", 1)
    return None


def _trtllm(cfg: dict[str, Any]) -> Launch:
    la = Launch("trtllm", [])
    la.problems = _common_problems(cfg, "trtllm", _TRTLLM_MODES)
    model, _ = _precision(cfg, "trtllm", la)
    _replicas_note(la, cfg)
    tp, dp = cfg["tensor_parallel_size"], cfg.get("data_parallel_size", 1)
    adp = dp > 1
    if adp and tp > 1:
        la.problems.append(f"data_parallel_size {dp} x tensor_parallel_size {tp}: TensorRT-LLM's attention DP "
                           "(enable_attention_dp) runs every one of its tp_size GPUs as a rank of attention TP 1; "
                           f"written as tp_size {tp * dp} with attention DP over all of them")
    if cfg.get("policy") == "priority":
        la.problems.append("policy 'priority' has no TensorRT-LLM capacity scheduler equivalent")
    # attention DP: tp_size counts every GPU, each an attention rank with its own max_batch_size and
    # max_num_tokens (per rank, not divided: PyExecutor per rank); the experts span all of them
    a = ["trtllm-serve", model, "--backend", "pytorch", "--tp_size", str(tp * dp if adp else tp),
         "--max_batch_size", str(cfg["max_num_seqs"]), "--max_num_tokens", str(cfg["max_num_batched_tokens"]),
         "--max_seq_len", str(cfg["max_model_len"]),
         "--kv_cache_free_gpu_memory_fraction", f"{cfg['gpu_memory_utilization']:g}",
         "--extra_llm_api_options", EXTRA_YAML]
    kv = [f"  free_gpu_memory_fraction: {cfg['gpu_memory_utilization']:g}",
          f"  enable_block_reuse: {'true' if cfg.get('enable_prefix_caching') else 'false'}",
          f"  tokens_per_block: {cfg['block_size']}"]
    if cfg.get("kv_cache_dtype", "auto") != "auto":
        kv.append("  dtype: fp8")
    if cfg.get("max_total_tokens"):  # KvCacheConfig.max_tokens: the minimum of it and the fraction's
        kv.append(f"  max_tokens: {cfg['max_total_tokens']}")
    policy = (cfg.get("capacity_scheduler_policy") or "guaranteed_no_evict").upper()
    y = ["kv_cache_config:", *kv, "scheduler_config:", f"  capacity_scheduler_policy: {policy}",
         f"enable_chunked_prefill: {'true' if _TRTLLM_MODES.get(cfg['scheduler']) else 'false'}",
         f"disable_overlap_scheduler: {'false' if cfg.get('overlap_scheduling') else 'true'}"]
    if cfg.get("stream_interval", 1) != 1:  # LLM API args (TorchLlmArgs stream_interval)
        y.append(f"stream_interval: {cfg['stream_interval']}")
    if cfg.get("num_postprocess_workers", 0):
        y.append(f"num_postprocess_workers: {cfg['num_postprocess_workers']}")
    ep = _expert_parallel_size(cfg)
    if ep:  # (llmapi/llm_args.py moe_expert_parallel_size; --ep_size of trtllm-serve)
        i = a.index("--extra_llm_api_options")
        a[i:i] = ["--ep_size", str(ep)]
    if cfg.get("moe_tp_size"):
        y.append(f"moe_tensor_parallel_size: {cfg['moe_tp_size']}")
    if cfg.get("num_redundant_experts"):  # MoeConfig.load_balancer (MoeLoadBalancerConfig): num_slots = E + R
        slots = _num_experts(cfg)
        if slots is None:
            la.problems.append(f"num_redundant_experts {cfg['num_redundant_experts']}: TensorRT-LLM's "
                               "load_balancer.num_slots is the model's routed experts + these; the model's "
                               "experts could not be read here")
        else:
            y += ["moe_config:", "  load_balancer:", f"    num_slots: {slots + cfg['num_redundant_experts']}"]
    if adp:
        y += ["enable_attention_dp: true", "attention_dp_config:",
              f"  enable_balance: {'true' if cfg.get('attention_dp_enable_balance') else 'false'}",
              f"  timeout_iters: {cfg.get('attention_dp_timeout_iters', 50)}",
              f"  batching_wait_iters: {cfg.get('attention_dp_batching_wait_iters', 10)}"]
    la.argv, la.yaml = a, "\n".join(y) + "\n"
    return la


def write_launch(out_dir, launch: Launch, name: str = "launch.sh") -> list:
    """Write ``launch.sh`` (a script: notes as comments, the YAML as a here-document)
    and, for TensorRT-LLM, ``extra-llm-api-options.yaml``; returns the paths."""
    from pathlib import Path

    out = Path(out_dir)
    paths = [out / name]
    (out / name).write_text("#!/usr/bin/env bash\n" + launch.text())
    if launch.yaml is not None:
        (out / EXTRA_YAML).write_text(launch.yaml)
        paths.append(out / EXTRA_YAML)
    else:
        (out / EXTRA_YAML).unlink(missing_ok=True)
    for fname, body in launch.files.items():
        (out / fname).write_text(body)
        paths.append(out / fname)
    return paths
