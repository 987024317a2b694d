"""Resolve a :class:`~sim.config.SimConfig` into the pieces one replica runs
with: model spec, hardware profile, cost model, KV sizing and scheduler limits.
Everything a bad config can get wrong fails here, before the run starts."""

from __future__ import annotations

from dataclasses import dataclass

from sim.config import SimConfig, pool_config, resolve_scheduler_limits
from sim.cost_model import CostModel
from sim.cost_model.parallel import ParallelLayout, ParallelMoe, resolve_layout, weight_bytes_per_gpu
from sim.disaggregation import DECODE_SCHEDULERS
from sim.engine.kv_transfer import KVTransferSpec
from sim.errors import ConfigError, InfeasibleError
from sim.hardware.profile import HardwareProfile, get_hardware
from sim.kv_cache import make_kv_cache_manager
from sim.kv_cache.groups import attention_block_size
from sim.kv_cache.sizing import KVSizing, compute_kv_sizing
from sim.model_spec import ModelSpec, get_model
from sim.presets import get_preset
from sim.cost_model.overheads import StepOverheads
from sim.scheduler import SchedulerLimits, get_scheduler_class


@dataclass
class DisaggPools:
    """A disaggregated deployment's two pools (each a :class:`Deployment` of
    its engine config, ``num_replicas`` = its workers) and the KV transfer."""
    prefill: "Deployment"
    decode: "Deployment"
    transfer: KVTransferSpec


@dataclass
class Deployment:
    cfg: SimConfig  # with hardware-dependent defaults filled in
    model: ModelSpec
    hardware: HardwareProfile
    cost_model: CostModel
    sizing: KVSizing
    limits: SchedulerLimits
    overheads: StepOverheads = StepOverheads()
    #: set for a disaggregated run (``cfg.disaggregation``); the fields above are then
    #: the decode pool's, ``cfg`` the whole run's
    disagg: DisaggPools | None = None
    #: DP x TP x EP of one replica (a DP group when ``layout.attention_dp``: its
    #: ``data_parallel_size`` ranks step together, sim/engine/dp_group.py)
    layout: ParallelLayout = ParallelLayout()

    @property
    def num_gpus(self) -> int:
        """GPUs of the whole deployment: replicas x DP ranks x TP."""
        return self.cfg.num_replicas * self.layout.num_gpus

    def make_kv_manager(self):
        c = self.cfg
        return make_kv_cache_manager(
            c.kv_allocation, self.sizing.num_gpu_blocks, c.block_size,
            enable_prefix_caching=c.enable_prefix_caching, max_model_len=self.limits.max_model_len,
            watermark=c.watermark, contiguous_reserve=c.contiguous_reserve,
            kv_cache_groups=self.sizing.kv_cache_groups if self.sizing.hybrid else None,
            max_num_batched_tokens=self.limits.max_num_batched_tokens,
        )

    def make_scheduler(self, kv):
        return get_scheduler_class(self.cfg.scheduler)(self.limits, kv)


def build_deployment(cfg: SimConfig) -> Deployment:
    """Raises ConfigError / InfeasibleError with the reason."""
    if cfg.num_frontends > 1:
        routers = [("router", cfg.router)]
        if cfg.disaggregation is not None and cfg.disaggregation.decode_router:
            routers.append(("disaggregation.decode_router", cfg.disaggregation.decode_router))
        for key, value in routers:
            if value not in ("round_robin", "random"):
                raise ConfigError(f"num_frontends: {cfg.num_frontends} frontends are modelled each with its own "
                                  f"round-robin counters (router round_robin, or random); {key} {value!r} would "
                                  "need each frontend's own view of the load")
    if cfg.disaggregation is not None:
        if cfg.scheduler_recv_interval > 1:
            raise ConfigError(f"scheduler_recv_interval: {cfg.scheduler_recv_interval} is modelled for "
                              "aggregated replicas, not disaggregated pools; set it to 1 here")
        if cfg.attention_dp_enable_balance:
            raise ConfigError("attention_dp_enable_balance: true is modelled for aggregated DP groups, not "
                              "disaggregated pools (a context-only pool has no generation requests to wait "
                              "for, a generation-only pool no context requests); set it to false here")
        return _build_disaggregated(cfg)
    return _build_one(cfg)


def _build_disaggregated(cfg: SimConfig) -> Deployment:
    """Both pools, each validated as its own engine (errors name the pool), and the link."""
    pools = {}
    for pool in ("prefill", "decode"):
        try:
            pools[pool] = _build_one(pool_config(cfg, pool))
        except (ConfigError, InfeasibleError) as e:
            msg = str(e)
            if not msg.startswith(f"disaggregation.{pool}"):
                msg = f"disaggregation.{pool} (the {pool} pool): {msg}"
            raise type(e)(msg) from None
    p, dd = pools["prefill"], pools["decode"]
    if dd.cfg.scheduler not in DECODE_SCHEDULERS:
        raise ConfigError(f"disaggregation.decode.scheduler: {dd.cfg.scheduler!r} cannot take requests whose "
                          f"prompt KV arrives computed; a decode pool runs one of {', '.join(DECODE_SCHEDULERS)}")
    if p.limits.max_model_len != dd.limits.max_model_len:  # pragma: no cover - same model, same key
        raise ConfigError("max_model_len differs between the pools")
    transfer = _kv_transfer(cfg, p, dd)
    # The run's view: the decode pool's pieces, the whole config.
    return Deployment(cfg, dd.model, dd.hardware, dd.cost_model, dd.sizing, dd.limits, dd.overheads,
                      disagg=DisaggPools(p, dd, transfer))


def _kv_transfer(cfg: SimConfig, p: Deployment, dd: Deployment) -> KVTransferSpec:
    d = cfg.disaggregation
    # per attention rank (a worker without attention DP is one rank): its TP GPUs
    # hold its KV and send / receive it over their own links (sim/engine/disagg.py)
    tp_p, tp_d = p.cfg.tensor_parallel_size, dd.cfg.tensor_parallel_size
    link = d.kv_transfer_link
    gpus = p.cfg.num_replicas * p.layout.num_gpus + dd.cfg.num_replicas * dd.layout.num_gpus
    same = p.hardware.name == dd.hardware.name
    one_domain = same and gpus <= p.hardware.interconnect.max_gpus
    if link == "auto":
        link = "nvlink" if one_domain else "network"
    elif link == "nvlink" and not one_domain:  # NVLink joins one node's GPUs of one kind, no more
        why = (f"the pools run on different GPUs ({p.hardware.name}, {dd.hardware.name})" if not same else
               f"the {gpus} GPUs of the pools exceed one {p.hardware.name} NVLink domain "
               f"({p.hardware.interconnect.max_gpus} GPUs)")
        raise ConfigError(f"disaggregation.kv_transfer_link: nvlink, but {why}: the KV must cross the network "
                          "(set kv_transfer_link: network or auto)")
    sides = []
    for dep, pool in ((p, "prefill"), (dd, "decode")):
        hw = dep.hardware
        if link == "nvlink":
            sides.append((hw.interconnect.bandwidth_bytes_per_s, hw.interconnect.latency_s, hw.interconnect.name))
        else:
            if hw.network is None and (d.kv_transfer_bandwidth_bytes_per_s is None or d.kv_transfer_latency_s is None):
                raise ConfigError(
                    f"disaggregation.kv_transfer_link: the KV moves over the network between nodes, but the {pool} "
                    f"pool's hardware {hw.name!r} has no 'network' section (per-GPU NIC bandwidth and latency); add "
                    "one to the profile, or set disaggregation.kv_transfer_bandwidth_bytes_per_s and "
                    "kv_transfer_latency_s")
            net = hw.network
            sides.append((net.bandwidth_bytes_per_s if net else 0.0, net.latency_s if net else 0.0,
                          net.name if net else "network"))
    if d.kv_transfer_bandwidth_bytes_per_s is not None:  # (the link's name no longer gives its speed)
        per_gpu = f"{d.kv_transfer_bandwidth_bytes_per_s / 1e9:,.3g} GB/s per GPU as set"
        sides = [(d.kv_transfer_bandwidth_bytes_per_s, lat, f"{link} at {per_gpu}") for _, lat, _ in sides]
    if d.kv_transfer_latency_s is not None:
        sides = [(bw, d.kv_transfer_latency_s, name) for bw, _, name in sides]
    bw = min(tp_p * sides[0][0], tp_d * sides[1][0])
    latency = max(sides[0][1], sides[1][1])
    names = sides[0][2] if sides[0][2] == sides[1][2] else f"{sides[0][2]} -> {sides[1][2]}"
    return KVTransferSpec(link, names, bw, latency, d.kv_transfer_overhead_s, d.kv_transfer_layerwise,
                          dd.model.num_hidden_layers, dd.sizing.kv_bytes_per_token * tp_d, tp_p, tp_d)


def _build_one(cfg: SimConfig) -> Deployment:
    get_scheduler_class(cfg.scheduler)  # unknown mode → ConfigError listing valid ones
    if cfg.enable_prefix_caching and cfg.kv_allocation == "contiguous":
        hint = (f" (the {cfg.engine} engine preset turns prefix caching on: set enable_prefix_caching=false)"
                if cfg.engine else "")
        raise ConfigError("enable_prefix_caching: prefix caching needs kv_allocation 'paged', got 'contiguous'"
                          + hint)
    model = get_model(cfg.model)
    hw = get_hardware(cfg.hardware)
    hw.tensor_parallel_nodes(cfg.tensor_parallel_size)  # across NVLink domains only over the NICs
    layout = resolve_layout(model, hw, tensor_parallel_size=cfg.tensor_parallel_size,
                            data_parallel_size=cfg.data_parallel_size,
                            enable_expert_parallel=cfg.enable_expert_parallel, moe_ep_size=cfg.moe_ep_size,
                            moe_tp_size=cfg.moe_tp_size, num_redundant_experts=cfg.num_redundant_experts)
    _check_expert_layout(cfg, layout)
    if cfg.data_parallel_size > 1 and not layout.attention_dp:
        # a dense model: vLLM couples DP ranks only for MoE layers; its DP ranks are
        # independent engines, i.e. replicas (routed by ``router``)
        cfg = cfg.model_copy(update={"num_replicas": cfg.num_replicas * cfg.data_parallel_size,
                                     "data_parallel_size": 1})
        layout = ParallelLayout(cfg.tensor_parallel_size, 1, 1, cfg.tensor_parallel_size, False)
    if cfg.scheduler_recv_interval > 1 and layout.attention_dp:
        raise ConfigError(f"scheduler_recv_interval: {cfg.scheduler_recv_interval} is modelled for aggregated "
                          "replicas without attention data parallelism (SGLang's skipper counts one "
                          "scheduler's passes); set it to 1 here")
    if cfg.attention_dp_enable_balance:
        if (cfg.engine or "vllm") != "trtllm":
            raise ConfigError(f"attention_dp_enable_balance: true is TensorRT-LLM's attention_dp_config; "
                              f"engine is {cfg.engine or 'vllm'}")
        if not layout.attention_dp:
            raise ConfigError("attention_dp_enable_balance: true needs attention data parallelism "
                              f"(data_parallel_size > 1 on an MoE model); data_parallel_size is "
                              f"{cfg.data_parallel_size} on {model.name}")
        if cfg.scheduler != "mixed":
            raise ConfigError(f"attention_dp_enable_balance: true is modelled with scheduler: mixed "
                              f"(whole contexts, TensorRT-LLM's default); scheduler is {cfg.scheduler!r}")
    if cfg.workload_distribution != "uniform" and not model.is_moe:
        raise ConfigError(f"workload_distribution: {cfg.workload_distribution!r} applies to MoE models; "
                          f"{model.name} has no routed experts")
    expert_parallel = model.is_moe and (layout.data_parallel_size > 1 or layout.moe_ep_size > 1
                                        or layout.moe_tp_size != cfg.tensor_parallel_size)
    max_model_len = cfg.max_model_len or model.max_position_embeddings
    cfg = resolve_scheduler_limits(cfg, hw.memory_bytes, hw.name, max_model_len,
                                   chunked_prefill=get_scheduler_class(cfg.scheduler).chunked_prefill)
    hybrid_off = hybrid_kv_cache_off_reason(cfg, model)
    if hybrid_off is None:  # vLLM raises the attention block size so a page holds a linear-attention state
        bs = attention_block_size(model, cfg.kv_cache_dtype, cfg.tensor_parallel_size, cfg.block_size)
        if bs != cfg.block_size:
            cfg = cfg.model_copy(update={"block_size": bs})
    sizing = compute_kv_sizing(
        model, hw, tensor_parallel_size=cfg.tensor_parallel_size,
        gpu_memory_utilization=cfg.gpu_memory_utilization, block_size=cfg.block_size,
        kv_cache_dtype=cfg.kv_cache_dtype, quantization=cfg.quantization,
        max_num_batched_tokens=cfg.max_num_batched_tokens, max_model_len=max_model_len,
        num_gpu_blocks_override=cfg.num_gpu_blocks_override, max_num_seqs=cfg.max_num_seqs or 2048,
        kv_memory_rule=cfg.kv_memory_rule, hybrid_kv_cache=hybrid_off is None, hybrid_off_reason=hybrid_off,
        memory_profile=cfg.memory_profile, request_len_cap=_request_len_cap(cfg),
        max_total_tokens=cfg.max_total_tokens,
    ) if not expert_parallel else _sizing_per_gpu(model, hw, cfg, max_model_len, layout, hybrid_off)
    if cfg.max_num_seqs is None:  # SGLang: the request pool, sized from the KV pool
        kv_tokens = (sizing.num_gpu_blocks - 1) * cfg.block_size
        from_kv = get_preset(cfg.engine or "vllm").max_num_seqs_from_kv
        cfg = cfg.model_copy(update={"max_num_seqs": from_kv(kv_tokens, max_model_len)})
    cost = CostModel(
        model, hw, tensor_parallel_size=cfg.tensor_parallel_size, quantization=cfg.quantization,
        kv_cache_dtype=cfg.kv_cache_dtype, attention_impl=cfg.attention_impl,
        routed_experts=(ParallelMoe(model, hw, layout, cfg.quantization, cfg.workload_distribution,
                                    engine=cfg.engine)
                        if expert_parallel else None),
        moe_backend=cfg.moe_backend, engine=cfg.engine, workload_distribution=cfg.workload_distribution,
    )
    limits = SchedulerLimits(
        max_num_seqs=cfg.max_num_seqs, max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_model_len=max_model_len, block_size=cfg.block_size,
        long_prefill_token_threshold=cfg.long_prefill_token_threshold, policy=cfg.policy,
        capacity_scheduler_policy=cfg.capacity_scheduler_policy, max_prefill_tokens=cfg.max_prefill_tokens,
        max_req_len=sizing.max_req_len,
    )
    overheads = StepOverheads(cfg.cpu_step_overhead_s, cfg.cpu_seq_overhead_s, cfg.overlap_scheduling,
                              cfg.eager_step_overhead_s)
    return Deployment(cfg, model, hw, cost, sizing, limits, overheads, layout=layout)


def _request_len_cap(cfg: SimConfig) -> str:
    """The engine's rule for a KV pool smaller than one max_model_len sequence
    (its preset's ``request_len_cap``; no engine: vLLM's, refused)."""
    return get_preset(cfg.engine).request_len_cap.value if cfg.engine else "refuse"


def _check_expert_layout(cfg: SimConfig, layout: ParallelLayout) -> None:
    """ConfigError when the engine cannot lay the routed experts out this way
    (its preset's ``expert_layouts``: vLLM shards them over all of a DP group's
    GPUs or gives each GPU whole experts, nothing in between)."""
    if cfg.engine is None or get_preset(cfg.engine).expert_layouts.value != "tp_or_ep":
        return
    G = layout.num_gpus
    if layout.moe_ep_size not in (1, G):
        key = "moe_ep_size" if cfg.moe_ep_size is not None else "moe_tp_size"
        val = cfg.moe_ep_size if cfg.moe_ep_size is not None else cfg.moe_tp_size
        raise ConfigError(
            f"{key}: {val} splits the experts EP {layout.moe_ep_size} x TP {layout.moe_tp_size}, which "
            f"engine {cfg.engine} cannot run: it shards the experts over all {G} GPUs of the group "
            f"(moe_ep_size 1) or, with enable_expert_parallel, gives each GPU whole experts (moe_ep_size {G})")


def hybrid_kv_cache_off_reason(cfg: SimConfig, model: ModelSpec | None = None) -> str | None:
    """Why a model with sliding-window (or linear-attention) layers runs on
    one block table (sliding layers at full length, linear-attention state
    reserved for max_num_seqs) instead of vLLM's kv_cache_groups, or None
    (sim/kv_cache/hybrid.py). The hybrid manager is vLLM's: other engines'
    sliding-window pools (SGLang's SWA pool; TensorRT-LLM's one pool per
    attention window, memory split between them at start,
    nvidia.github.io/TensorRT-LLM/features/kvcache.html) are not modelled, and nor are schedulers that read free blocks as tokens
    or plan blocks to completion, nor vLLM's prefix caching of
    linear-attention states (mamba_cache_mode 'align')."""
    if model is not None and cfg.enable_prefix_caching and model.layer_type_counts().get("linear_attention"):
        return "prefix caching of linear-attention states (vLLM mamba_cache_mode 'align') not modelled"
    if cfg.disable_hybrid_kv_cache_manager:
        return "disable_hybrid_kv_cache_manager is set"
    if cfg.kv_allocation != "paged":
        return f"kv_allocation {cfg.kv_allocation}"
    if cfg.engine not in (None, "vllm"):
        return f"engine {cfg.engine}: its sliding-window KV pools are not modelled"
    if not get_scheduler_class(cfg.scheduler).supports_kv_cache_groups:
        return f"scheduler {cfg.scheduler} does not run on per-group block tables"
    if cfg.capacity_scheduler_policy:
        return f"capacity_scheduler_policy {cfg.capacity_scheduler_policy} plans one block table"
    return None


def _sizing_per_gpu(model, hw, cfg, max_model_len, layout, hybrid_off=None):
    """KV sizing of one attention rank's GPU under expert parallelism (its share
    of the experts, the attention weights of its TP shard); an infeasible
    layout says which."""
    try:
        return compute_kv_sizing(
            model, hw, tensor_parallel_size=cfg.tensor_parallel_size,
            gpu_memory_utilization=cfg.gpu_memory_utilization, block_size=cfg.block_size,
            kv_cache_dtype=cfg.kv_cache_dtype, quantization=cfg.quantization,
            max_num_batched_tokens=cfg.max_num_batched_tokens, max_model_len=max_model_len,
            num_gpu_blocks_override=cfg.num_gpu_blocks_override, max_num_seqs=cfg.max_num_seqs or 2048,
            kv_memory_rule=cfg.kv_memory_rule, weight_bytes=weight_bytes_per_gpu(model, layout, cfg.quantization),
            hybrid_kv_cache=hybrid_off is None, hybrid_off_reason=hybrid_off, memory_profile=cfg.memory_profile,
            request_len_cap=_request_len_cap(cfg), max_total_tokens=cfg.max_total_tokens)
    except InfeasibleError as e:
        raise InfeasibleError(f"{layout.describe()}: {e}") from None
