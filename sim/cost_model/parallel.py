"""Attention data parallelism (DP) and expert parallelism (EP) of MoE models:
the layout of a DP group, its per-GPU weights, and the routed-expert part of
its step time (expert GEMMs on the most loaded GPU + dispatch/combine).

Layout (vLLM ``--data-parallel-size D --tensor-parallel-size T
--enable-expert-parallel``; SGLang ``--dp-size D --enable-dp-attention
--ep-size``; TensorRT-LLM ``enable_attention_dp`` with ``moe_expert_parallel_size``):
a DP group is D attention ranks of T GPUs each (G = D x T GPUs). Each attention
rank has its own scheduler, batch and KV cache; attention and the dense layers
run data-parallel over the ranks (tensor-parallel over each rank's T GPUs). The
routed experts run over all G GPUs: expert-parallel over ``moe_ep_size`` ranks
(each GPU holds E / ep experts whole) times tensor-parallel over
``moe_tp_size`` (each expert's intermediate columns split), ep x moe_tp = G.
vLLM: with ``enable_expert_parallel`` ep = D x T and moe_tp = 1, without it
moe_tp = D x T (``FusedMoEParallelConfig.make``: "EP size = DP x TP").

The ranks step together: vLLM pads every rank's token count to the largest
across the DP group before each forward (``num_tokens_across_dp`` in the
forward context's ``DPMetadata``; ``coordinate_batch_across_dp`` in
``vllm/v1/worker/dp_utils.py`` all-reduces the per-rank counts and pads to the
max), and idle ranks run dummy forwards while any rank has work ("empty dummy
forward passes", vLLM docs ``serving/data_parallel_deployment.md``). So every
rank's dense GEMMs and expert dispatch run on the padded count, and the step
lasts as long as the slowest rank (:meth:`CostModel.dp_group_step_s`).
TensorRT-LLM does not pad (its MoE takes each rank's real count), SGLang pads
only decode-only steps (the engine preset's ``dp_token_padding``).

Routed-expert time per GPU for T (padded) tokens per attention rank, N = D x T
tokens in the group, each routed to k of E experts (uniform routing):

- rows and touched experts of the most loaded EP rank
  (:func:`sim.cost_model.moe.max_rank_load`): under uniform routing each
  rank's rows are a sum of per-token hypergeometric counts (mean N k / ep)
  and the ep counts sum to N k, so the expected maximum is mu + sigma z(ep)
  sqrt(ep/(ep-1)) (z(ep): expected maximum of ep independent standard
  normals, 1.42 at 8; the sqrt for the sum constraint), capped at
  N x min(k, E/ep); the experts it touches are those of a rank that saw
  N x rows / mu tokens. ``workload_distribution`` (``power_law_<alpha>``)
  replaces uniform routing by aiconfigurator's skewed expert loads;
- the experts on those rows: on a ``fitted_v1`` profile with a fused-MoE family
  for the experts' weight format, that fused layer (``fitted.moe_fitted_s`` on
  the group's N tokens at ``ep`` and I / moe_tp, costing the most loaded rank's
  rows and experts under the routing), as for tensor-sharded experts: the engines run
  the same fused kernel on a rank's local experts, and its routing / align /
  un-permute kernels cost 14-25 us a layer at decode that grouped GEMMs miss
  (H100 fused-MoE tables, Qwen3-235B / MiniMax / DeepSeek shapes, EP 4-8,
  1-16 tokens: tables 30-310 us, grouped GEMMs 18-214 us). Otherwise
  expert GEMMs w13 (n = 2 I / moe_tp, k = h) and w2 (n = h, k = I / moe_tp)
  over those rows and experts, with the same roofline / fitted GEMM terms as
  the tensor-sharded experts of :class:`~sim.cost_model.step.CostModel`;
- communication per MoE layer (D > 1): with EP, DeepEP-style dispatch and
  combine: each GPU sends its T / T_attn tokens (the attention TP ranks split
  their rank's tokens) to the (ep - 1)(1 - q) other EP ranks holding at least
  one of a token's experts (q = P(an EP rank holds none of the k) =
  C(E - E/ep, k) / C(E, k)), hidden x 2 B each way, over NVLink inside one
  NVLink domain and over the NIC for the destinations beyond it, plus the
  link's latency per call. Without EP (experts tensor-sharded over the group):
  all-gather of the D ranks' T tokens before the experts and reduce-scatter
  after ((D - 1) T hidden x 2 B each). With D = 1 the experts see the rank's
  tokens without any dispatch and their outputs join the TP all-reduce the
  step already counts.

Expert weights per GPU at rest: E / ep experts of I / moe_tp columns; the
attention, dense and shared-expert weights are replicated over the D ranks
(split over each rank's T GPUs).

Redundant experts (``num_redundant_experts`` = R; vLLM ``--enable-eplb
--eplb-config '{"num_redundant_experts": R}'``, SGLang
``--ep-num-redundant-experts R``, TensorRT-LLM ``moe_config.load_balancer.num_slots``
= E + R): the expert-parallel load balancer keeps E + R physical experts, R of
them copies of popular logical experts, (E + R) / ep whole on each EP rank (vLLM
``distributed/eplb/eplb_state.py``: "DeepSeek-R1 has 256 logical experts ... If we
add 32 redundant experts ... 288 physical experts ... If we have 32 EP ranks,
then each GPU will hold 288 / 32 = 9 local physical experts"); the ep need only
divide E + R (EP 48 over DeepSeek's 256 + 32). Each rank holds (E + R) / ep
experts' weights, and a token's k rows go to k of the E + R physical experts:
the rank loads and touched experts above are those of E + R equally popular
experts (a replica takes its share of its expert's rows, which the balancer
placed for that). What the balancer gains against skewed routing is not
modelled beyond that spread (``workload_distribution`` keeps its law over the
E + R). The router GEMM still scores the E logical experts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.cost_model.fitted import moe_fitted_s
from sim.cost_model.fitted_step import MOE_SMALL_BLOCK_M, FittedGemm
from sim.cost_model.moe import max_rank_load, uniform_max_rank_load
from sim.cost_model.operators import gemm_cost
from sim.cost_model.roofline import ACT_BYTES, gemm_precision
from sim.errors import ConfigError
from sim.hardware.efficiency import FittedEfficiency
from sim.hardware.profile import HardwareProfile
from sim.model_spec import WEIGHT_BYTES_PER_PARAM, ModelSpec

#: Between nodes (an EP group larger than one NVLink domain): one 400 Gb/s
#: ConnectX-7 NIC per GPU (the HGX H100/H200 reference design; DeepEP's
#: internode kernels use RDMA over these), per direction, and its latency.
NIC_BANDWIDTH_BYTES_PER_S = 50e9
NIC_LATENCY_S = 5e-6


@dataclass(frozen=True)
class ParallelLayout:
    """One DP group: ``data_parallel_size`` attention ranks of
    ``tensor_parallel_size`` GPUs; experts over ``moe_ep_size`` x ``moe_tp_size``
    = all its GPUs. ``attention_dp``: the ranks step together (an MoE model
    with D > 1); a dense model's DP ranks are independent replicas."""
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    moe_ep_size: int = 1
    moe_tp_size: int = 1
    attention_dp: bool = False
    #: redundant expert slots (module docstring): E + R physical experts over the EP ranks
    num_redundant_experts: int = 0

    def num_physical_experts(self, num_experts: int) -> int:
        """Physical experts over the EP ranks: the model's E plus the redundant slots."""
        return num_experts + self.num_redundant_experts

    @property
    def num_gpus(self) -> int:
        """GPUs of one group (one replica)."""
        return self.tensor_parallel_size * self.data_parallel_size

    def describe(self) -> str:
        tp, dp = self.tensor_parallel_size, self.data_parallel_size
        s = f"attention DP {dp} x TP {tp}"
        if self.moe_ep_size > 1 or self.moe_tp_size != tp or dp > 1:
            s += f", experts EP {self.moe_ep_size} x TP {self.moe_tp_size}"
            if self.num_redundant_experts:
                s += f" (+{self.num_redundant_experts} redundant)"
        return s + f" = {self.num_gpus} GPUs"


def resolve_layout(model: ModelSpec, hw: HardwareProfile, *, tensor_parallel_size: int = 1,
                   data_parallel_size: int = 1, enable_expert_parallel: bool = False,
                   moe_ep_size: int | None = None, moe_tp_size: int | None = None,
                   num_redundant_experts: int = 0) -> ParallelLayout:
    """The layout of the config keys, or ConfigError naming the key and value.

    A dense model's ``data_parallel_size`` is returned with ``attention_dp``
    False (the caller runs that many independent replicas); EP keys on a dense
    model are refused. ``num_redundant_experts`` needs expert parallelism, and
    the EP size must divide E + R (module docstring)."""
    tp, dp = tensor_parallel_size, data_parallel_size
    G = tp * dp
    hw.tensor_parallel_nodes(tp)  # beyond one NVLink domain only over the profile's NICs (else ConfigError)
    if not model.is_moe:
        for key, val in (("enable_expert_parallel", enable_expert_parallel), ("moe_ep_size", moe_ep_size),
                         ("moe_tp_size", moe_tp_size)):
            if val is True or (val is not None and val is not False and val != 1):
                raise ConfigError(f"{key}: {val!r} applies to MoE models; {model.name} has no routed experts")
        if num_redundant_experts:
            raise ConfigError(f"num_redundant_experts: {num_redundant_experts!r} applies to MoE models; "
                              f"{model.name} has no routed experts")
        return ParallelLayout(tp, dp, 1, tp, False)
    E = model.num_experts
    if moe_ep_size is not None or moe_tp_size is not None:
        for key, val in (("moe_tp_size", moe_tp_size), ("moe_ep_size", moe_ep_size)):
            if val is not None and (val > G or G % val):  # name the key the user gave, not the derived one
                raise ConfigError(f"{key}: {val} does not divide the {G} GPUs of one DP group "
                                  f"(tensor_parallel_size {tp} x data_parallel_size {dp}); the experts' "
                                  "moe_ep_size x moe_tp_size must equal them")
        ep = moe_ep_size if moe_ep_size is not None else G // (moe_tp_size or 1)
        mtp = moe_tp_size if moe_tp_size is not None else G // ep
        if ep > G:
            raise ConfigError(f"moe_ep_size: {ep} is more than the {G} GPUs of one DP group "
                              f"(tensor_parallel_size {tp} x data_parallel_size {dp})")
        if ep * mtp != G:
            raise ConfigError(f"moe_ep_size: {ep} x moe_tp_size {mtp} must equal the group's GPUs "
                              f"tensor_parallel_size {tp} x data_parallel_size {dp} = {G}")
        if enable_expert_parallel and ep == 1 and G > 1:
            raise ConfigError("enable_expert_parallel: true conflicts with moe_ep_size 1; set one of them")
    elif enable_expert_parallel:
        ep, mtp = G, 1
    else:
        ep, mtp = 1, G
    R = num_redundant_experts
    if R and ep == 1:
        raise ConfigError(f"num_redundant_experts: {R} needs expert parallelism (the copies sit on other EP "
                          f"ranks); the experts of {model.name} run EP 1 x TP {mtp} here: set moe_ep_size or "
                          "enable_expert_parallel")
    if (E + R) % ep:
        key = (f"moe_ep_size: {ep}" if moe_ep_size is not None else
               f"enable_expert_parallel: expert parallelism over the group's {ep} GPUs (tensor_parallel_size {tp} "
               f"x data_parallel_size {dp})" if enable_expert_parallel else f"moe_ep_size: {ep}")
        what = (f"{model.name}'s {E} routed experts + num_redundant_experts {R} = {E + R} physical experts "
                if R else f"{model.name}'s {E} routed experts ")
        fit = R + (-(E + R) % ep)  # the fewest slots from R up that split whole
        hint = (f"; redundant expert slots can make them divide (num_redundant_experts {fit}: "
                f"{E + fit} = {ep} x {(E + fit) // ep})")
        raise ConfigError(f"{key} does not divide {what}(each EP rank holds (E + R) / ep experts whole){hint}")
    if model.moe_intermediate_size % mtp:
        raise ConfigError(f"moe_tp_size: {mtp} does not divide {model.name}'s moe_intermediate_size "
                          f"{model.moe_intermediate_size}")
    return ParallelLayout(tp, dp, ep, mtp, dp > 1, R)


def ep_rank_rows_max(num_tokens, num_experts: int, top_k: int, ep: int):
    """Expected expert rows (token x expert pairs) on the most loaded of ``ep``
    EP ranks for ``num_tokens`` tokens routed uniformly (module docstring)."""
    return uniform_max_rank_load(num_tokens, num_experts, top_k, ep)[0]


def remote_ranks_per_token(num_experts: int, top_k: int, ep: int) -> float:
    """Expected number of other EP ranks a token is dispatched to:
    (ep - 1)(1 - q), q = C(E - E/ep, k) / C(E, k)."""
    if ep <= 1:
        return 0.0
    E, k, El = num_experts, top_k, num_experts // ep
    q = 1.0
    for i in range(k):
        q *= max(E - El - i, 0) / (E - i)
    return (ep - 1) * (1.0 - q)


def routed_expert_params_per_gpu(model: ModelSpec, layout: ParallelLayout) -> float:
    """Routed-expert parameters one GPU holds (all MoE layers): its (E + R) / ep
    physical experts' shards."""
    w13, w2 = model.expert_shapes(layout.moe_tp_size)
    return (layout.num_physical_experts(model.num_experts) // layout.moe_ep_size * (w13.n * w13.k + w2.n * w2.k)
            * model.num_moe_layers)


def weight_bytes_per_gpu(model: ModelSpec, layout: ParallelLayout, quantization: str | None = None) -> float:
    """Weight bytes on one GPU: the model at the attention TP size with its
    tensor-sharded experts replaced by this GPU's share of the experts."""
    tp = layout.tensor_parallel_size
    total = model.weight_bytes(quantization, tp)
    if not model.is_moe:
        return total
    wb = WEIGHT_BYTES_PER_PARAM[model.family_quantization("experts", quantization)]
    w13, w2 = model.expert_shapes(tp)
    sharded = model.num_experts * (w13.n * w13.k + w2.n * w2.k) * model.num_moe_layers * wb
    return total - sharded + routed_expert_params_per_gpu(model, layout) * wb


def expert_weight_bytes_read_per_gpu(model: ModelSpec, layout: ParallelLayout, tokens_per_rank,
                                     quantization: str | None = None):
    """Mean routed-expert weight bytes one GPU reads in one step (all MoE
    layers) when each of the D attention ranks carries ``tokens_per_rank``
    tokens: local experts touched x one expert's shard."""
    N = np.asarray(tokens_per_rank, dtype=float) * layout.data_parallel_size
    E, k = layout.num_physical_experts(model.num_experts), model.num_experts_per_tok
    w13, w2 = model.expert_shapes(layout.moe_tp_size)
    wb = WEIGHT_BYTES_PER_PARAM[model.family_quantization("experts", quantization)]
    touched = E / layout.moe_ep_size * (1.0 - (1.0 - k / E) ** N)
    return touched * (w13.n * w13.k + w2.n * w2.k) * wb * model.num_moe_layers


def all_to_all_s(hw: HardwareProfile, num_bytes, num_gpus: int) -> float:
    """One dispatch (or combine) call sending ``num_bytes`` from each GPU to the
    others of a ``num_gpus`` group, spread evenly: the NVLink share at the
    link's per-GPU bandwidth, the share beyond one NVLink domain at the NIC's;
    the slower share plus the link latency.

    The link's peak unless the profile's efficiency carries an ``all_to_all``
    entry (``latency_s``: fixed cost of one call, replacing the link latency;
    ``bandwidth_efficiency``: achieved fraction of the link) -- the hook for a
    fit to the DeepEP tables (``../shared/kernels/h100_sxm/*_moe_a2a``), which
    the peak undershoots 2-30x (``tests/test_parallel.py``)."""
    ic = hw.interconnect
    if num_gpus <= 1:
        return 0.0
    fit = getattr(hw.efficiency, "all_to_all", None)
    lat = ic.latency_s if fit is None else fit.latency_s
    eff = 1.0 if fit is None else fit.bandwidth_efficiency
    local = min(num_gpus, ic.max_gpus)
    f_nvl = (local - 1) / (num_gpus - 1)
    t_nvl = num_bytes * f_nvl / (ic.bandwidth_bytes_per_s * eff)
    if f_nvl >= 1.0:
        return lat + t_nvl
    t_nic = num_bytes * (1.0 - f_nvl) / (NIC_BANDWIDTH_BYTES_PER_S * eff)
    return lat + NIC_LATENCY_S + np.maximum(t_nvl, t_nic)


class ParallelMoe:
    """Router + routed experts + their communication over all MoE layers, per
    GPU, for T tokens on every attention rank of the group (the padded count):
    ``moe(T)`` s, ``moe.table(T_array)``. Plugs into
    :class:`~sim.cost_model.step.CostModel` as ``routed_experts``."""

    def __init__(self, model: ModelSpec, hw: HardwareProfile, layout: ParallelLayout,
                 quantization: str | None = None, workload_distribution: str = "uniform",
                 engine: str | None = None) -> None:
        self.model, self.hw, self.layout = model, hw, layout
        self.workload_distribution = workload_distribution  # sim.cost_model.moe.WORKLOAD_DISTRIBUTIONS
        L = model.num_moe_layers
        h = model.hidden_size
        self.E, self.k, self.L, self.h = model.num_experts, model.num_experts_per_tok, L, h
        self.ep, self.D, self.tp = layout.moe_ep_size, layout.data_parallel_size, layout.tensor_parallel_size
        #: physical experts over the EP ranks (E + redundant slots; the router scores the E)
        self.S = layout.num_physical_experts(self.E)
        self.El = self.S // self.ep
        im = model.moe_intermediate_size // layout.moe_tp_size
        prec = gemm_precision(hw, model.family_quantization("experts", quantization))
        bf16 = gemm_precision(hw, "bf16")
        eff = hw.efficiency
        bw = hw.hbm_bandwidth_bytes_per_s
        self.fitted = isinstance(eff, FittedEfficiency)
        self._fused = None
        if self.fitted:
            self._router = FittedGemm(eff, self.E, h, bf16, bw, L)
            self._w = [FittedGemm(eff, 2 * im, h, prec, bw, L), FittedGemm(eff, h, im, prec, bw, L)]
            # the fused-MoE kernel of the experts' weight format (fitted_v1 ``moe``), as
            # FittedMoe times tensor-sharded experts: the engines run the same fused kernel
            # on an EP rank's local experts (vLLM FusedMoE with expert_map; SGLang / TRT-LLM
            # EP MoE), whose routing, align/sort and un-permute kernels grouped GEMMs miss;
            # ``engine``'s own fit of it where the profile has one (``moe_engines``)
            self._fused = eff.moe_for(engine).get(prec.quantization)
            self._moe_args = (h, im, prec.peak_flops_per_s, bw, prec.weight_bytes,
                              prec.act_quant_bytes if prec.act_quant_bytes > 0 else ACT_BYTES)
        else:
            ce, me, launch = eff.operator_efficiency("gemm")
            f1, by1 = gemm_cost(1.0, self.E, h, bf16)
            _, by0 = gemm_cost(0.0, self.E, h, bf16)
            self._router_terms = (float(f1) / (bf16.peak_flops_per_s * ce) * L, float(by0) / (bw * me) * L,
                                  float(by1 - by0) / (bw * me) * L, bf16.num_kernels * launch * L)
            self._w = []
            for n, kk in ((2 * im, h), (h, im)):
                f1, by1 = gemm_cost(1.0, n, kk, prec, 0.0)
                _, w1 = gemm_cost(0.0, n, kk, prec, 1.0)
                self._w.append((float(f1) / (prec.peak_flops_per_s * ce) * L, float(by1) / (bw * me) * L,
                                float(w1) / (bw * me) * L, prec.num_kernels * launch * L))
        self.remote = remote_ranks_per_token(self.S, self.k, self.ep)
        self._memo: dict[float, float] = {}  # __call__ by T

    def rows_and_touched(self, T):
        """(rows, local experts touched) on the most loaded EP rank for T tokens
        per attention rank (N = D T in the group)."""
        N = np.asarray(T, dtype=float) * self.D
        return max_rank_load(N, self.S, self.k, self.ep, self.workload_distribution)

    def comm_s(self, T):
        """Dispatch + combine (EP) or all-gather + reduce-scatter (experts
        tensor-sharded) of all MoE layers, s (0 without attention DP)."""
        T = np.asarray(T, dtype=float)
        if self.D <= 1:
            return np.zeros_like(T) if T.ndim else 0.0
        G = self.layout.num_gpus
        if self.ep > 1:
            nbytes = T / self.tp * self.remote * self.h * ACT_BYTES  # sent by one GPU per call
            per_call = all_to_all_s(self.hw, nbytes, G)
        else:
            nbytes = (self.D - 1) * T * self.h * ACT_BYTES
            per_call = all_to_all_s(self.hw, nbytes, self.D)
        return 2.0 * self.L * per_call

    def experts_s(self, T):
        """Router (on the rank's T tokens) + the experts of the most loaded GPU, s: the
        profile's fused-MoE layer (``fitted_v1`` ``moe`` family of the experts' format) at
        that GPU's rows, else (no such family, or a scalar profile) grouped expert GEMMs."""
        T = np.asarray(T, dtype=float)
        if self.fitted and self._fused is not None:
            # the fused layer on the group's N = D T tokens at this EP size: its rows and
            # experts are the most loaded rank's under the routing (fitted.moe_touched_rows),
            # the rank that sets the layer's time
            h, im, peak, bw, wb, act = self._moe_args
            layer = moe_fitted_s(self._fused, T * self.D, h, im, self.S, self.k, peak, bw,
                                 weight_bytes=wb, act_bytes=act, ep=float(self.ep),
                                 routing=self.workload_distribution)
            return self._router.time_s(T) * self.L + layer * self.L
        rows, touched = self.rows_and_touched(T)
        if self.fitted:
            tile = np.where(T * self.D <= self.S, MOE_SMALL_BLOCK_M, self._w[0].tm)
            t = self._router.time_s(T) * self.L
            w13, w2 = self._w  # (FittedMoe.experts_s: w13's input quantized once per token)
            t = t + w13.time_s(rows, touched, tile, quant_rows=np.minimum(T * self.D, rows)) * self.L
            return t + w2.time_s(rows, touched, tile) * self.L
        f, b0, b1, c = self._router_terms
        t = np.maximum(f * T, b0 + b1 * T) + c
        for f, a, w, c in self._w:
            t = t + np.maximum(f * rows, a * rows + w * touched) + c
        return t

    def __call__(self, T: float) -> float:
        if T <= 0:
            return 0.0
        t = self._memo.get(T)
        if t is None:  # a pure function of T, asked once per rank and step: kept per count
            if len(self._memo) > 1 << 16:
                self._memo.clear()
            t = self._memo[T] = float(self.experts_s(T) + self.comm_s(T))
        return t

    def table(self, T: np.ndarray) -> np.ndarray:
        T = np.asarray(T, dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(T > 0, self.experts_s(np.maximum(T, 1.0)) + self.comm_s(T), 0.0)


def layout_report(model: ModelSpec, layout: ParallelLayout, quantization: str | None = None) -> dict:
    """The parallel layout's rows for ``servesim kv`` / ``run`` (per GPU; GiB = 2**30 B)."""
    out: dict = {"parallel_layout": layout.describe(), "data_parallel_size": layout.data_parallel_size,
                 "attention_data_parallel": "yes" if layout.attention_dp else "no", "num_gpus_per_replica": layout.num_gpus}
    if model.is_moe:
        wb = WEIGHT_BYTES_PER_PARAM[model.family_quantization("experts", quantization)]
        out.update({"moe_ep_size": layout.moe_ep_size, "moe_tp_size": layout.moe_tp_size,
                    "routed_experts_per_gpu": layout.num_physical_experts(model.num_experts) // layout.moe_ep_size,
                    "routed_expert_gib_per_gpu": routed_expert_params_per_gpu(model, layout) * wb / 2**30})
        if layout.num_redundant_experts:
            out["num_redundant_experts"] = layout.num_redundant_experts
    out["weight_gib_per_gpu"] = weight_bytes_per_gpu(model, layout, quantization) / 2**30
    return out


def layout_keys_from_table(tp_size: int, attention_dp_size: int | None = None, moe_tp_size: int | None = None,
                           moe_ep_size: int | None = None) -> dict:
    """Config keys for a measured row's parallelism columns (``../shared/silicon``
    MoE table: ``tp_size``, ``attention_dp_size``, ``moe_tp_size``,
    ``moe_ep_size``; empty = None). The table mixes conventions, told apart by
    the experts' GPU count ep x moe_tp = the worker's GPUs G:

    - G = tp x dp (vLLM rows: ``tp_size`` is the attention TP of each DP rank);
    - G = tp, dp > 1 (the README's: ``tp_size`` counts the attention ranks too):
      attention TP = tp / dp;
    - dp = 1: attention TP = tp, experts as given;
    - no ``attention_dp_size`` given and G = k x tp (k > 1): vLLM's
      ``--data-parallel-size k`` without ``--enable-expert-parallel`` (rows of
      the ``aic-gap-analysis`` campaign: ``tp1`` with ``moe_tp_size`` 2 or 4),
      whose experts form one TP group of DP x TP GPUs (vLLM docs,
      serving/data_parallel_deployment: "expert layers form a tensor parallel
      group of size DP x TP") -- the only reading that fits the GPU count.

    ConfigError (one line) when no reading fits."""
    if attention_dp_size is None and tp_size:
        g = int(moe_tp_size or 1) * int(moe_ep_size or 1)
        if g > int(tp_size) and g % int(tp_size) == 0 and (moe_tp_size or moe_ep_size):
            attention_dp_size = g // int(tp_size)
    dp = int(attention_dp_size or 1)
    tp = int(tp_size)
    mtp = int(moe_tp_size) if moe_tp_size else None
    mep = int(moe_ep_size) if moe_ep_size else None
    if mtp is None and mep is None:
        mtp, mep = tp * dp, 1
    mtp = mtp or 1
    mep = mep or 1
    G = mtp * mep
    if dp == 1:
        if G != tp:
            raise ConfigError(f"moe_ep_size: {mep} x moe_tp_size {mtp} = {G} GPUs, but tp_size is {tp}")
        attn_tp = tp
    elif G == tp * dp:
        attn_tp = tp
    elif G == tp and tp % dp == 0:
        attn_tp = tp // dp
    else:
        raise ConfigError(f"attention_dp_size: {dp} with tp_size {tp} and moe_ep_size {mep} x moe_tp_size {mtp}: "
                          "no GPU count fits all three")
    return {"tensor_parallel_size": attn_tp, "data_parallel_size": dp, "moe_ep_size": mep, "moe_tp_size": mtp}
