"""Per-step operators of :class:`~sim.cost_model.CostModel` for the
``fitted_v1`` form: the formulas of ``sim/cost_model/fitted.py`` bound to one
model shape, evaluated with Python floats on the engine's hot path and
vectorised over consecutive decode steps.

Attention sees the batch per sequence: sequences with one new token run the
generation kernel's parameters (their KV read rounded up to whole tiles),
sequences with more run the context kernel's; a mixed batch is one varlen
kernel, so it pays one launch (the larger) and both cores.
"""

from __future__ import annotations

from math import sqrt

import numpy as np

from sim.cost_model.count_table import CountTable
from sim.cost_model.fitted import bus_efficiency, gemm_family, moe_fitted_s, moe_touched_rows
from sim.cost_model.roofline import ACT_BYTES, GemmPrecision
from sim.hardware.efficiency import FittedEfficiency
from sim.hardware.profile import HardwareProfile


def _power_terms(rate_max: float, half: float, exponent: float, scale: float = 1.0):
    """(c1, c2, 1 - exponent) with amount x (1 + (half / amount)^exponent) / rate_max
    = c1 u + c2 u^(1-exponent) for amount = scale x u (the saturating efficiency
    of ``fitted._saturating_time`` expanded, so a call costs a few float ops)."""
    return (scale / rate_max, half ** exponent * scale ** (1.0 - exponent) / rate_max,
            1.0 - exponent)


class FittedGemm:
    """t(m) of one GEMM shape (n, k) summed over ``layers``; 0 if m <= 0.
    The formulas of ``fitted.gemm_fitted_s`` with the shape's constants folded."""

    def __init__(self, eff: FittedEfficiency, n, k, prec: GemmPrecision, bw: float, layers: float):
        self.w8a8 = prec.act_quant_bytes > 0
        self.eff, self.n, self.k, self.prec, self.bw = eff, n, k, prec, bw
        p = self.p = gemm_family(eff, prec.quantization, self.w8a8)
        self.layers = layers
        n_tiled = -(-n // p.tile_n) * p.tile_n
        self.tm = float(p.tile_m)
        # compute: F = 2 m_tiled n_tiled k; memory: B = m (k act + 2 n) + groups k n wb
        self.c1, self.c2, self.ce = _power_terms(prec.peak_flops_per_s * p.compute_efficiency_max,
                                                 p.compute_half_flops, p.compute_exponent,
                                                 2.0 * n_tiled * k)
        self.m1, self.m2, self.me = _power_terms(bw * p.memory_efficiency_max, p.memory_half_bytes,
                                                 p.memory_exponent)
        act = prec.act_quant_bytes if self.w8a8 else ACT_BYTES
        self.b_row, self.b_weights = k * act + ACT_BYTES * n, k * n * prec.weight_bytes
        serial = p.k_serial_s * k / (1.0 + k / p.k_split)
        self.serial_sq = serial * serial
        self.quant_row = (p.act_quant_row_s + 3.0 * k / (bw * p.act_quant_memory_efficiency)
                          if self.w8a8 else 0.0)
        self.launch = p.launch_s

    def time_s(self, m: float, groups: float = 1.0, tile_m=None, quant_rows=None) -> float:
        """One call with m rows (``groups`` experts share them, each reading its
        weights; each expert's rows padded to ``tile_m``, default the family's).
        ``quant_rows``: rows whose activations a W8A8 call quantizes (default m); a
        grouped expert GEMM reads m routed rows but its input was quantized once per
        token, before the rows were gathered (:meth:`FittedMoe.experts_s`)."""
        tm = self.tm if tile_m is None else tile_m
        mt = groups * (-(-(m / groups) // tm)) * tm
        tc = self.c1 * mt + self.c2 * mt ** self.ce
        nbytes = m * self.b_row + groups * self.b_weights
        tb = self.m1 * nbytes + self.m2 * nbytes ** self.me
        q = m if quant_rows is None else quant_rows
        return self.launch + (tc * tc + tb * tb + self.serial_sq) ** 0.5 + q * self.quant_row

    def __call__(self, m: float) -> float:
        return self.time_s(m) * self.layers if m > 0 else 0.0

    def table(self, m: np.ndarray) -> np.ndarray:
        """:meth:`__call__` at each of the row counts ``m`` (float64 array)."""
        with np.errstate(divide="ignore", invalid="ignore"):  # m = 0 (a fitted exponent may be < 0): masked
            return np.where(m > 0, self.time_s(m) * self.layers, 0.0)


#: Rows per expert block of vLLM's fused_moe Triton kernel for small batches
#: (``fused_moe.get_default_config``: BLOCK_SIZE_M 16 while the token count M <= E;
#: ``moe_align_block_size`` pads each expert's rows to it).
MOE_SMALL_BLOCK_M = 16.0

#: ``moe_backend`` -> (the ``fitted_v1`` ``moe`` family that times it, the expert weight
#: formats it serves). ``marlin``: vLLM's ``fused_marlin_moe``, weight-only 4-bit experts
#: with 16-bit activations, one kernel behind both int4 checkpoints
#: (``CompressedTensorsWNA16MarlinMoEMethod``; the H100 table's
#: ``vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts``, fitted as ``int4_wo``)
#: and MXFP4 under ``VLLM_MXFP4_USE_MARLIN=1`` (vLLM ``Mxfp4MoeBackend.MARLIN``; the table's
#: ``vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts``): the ``int4_wo`` family
#: predicts the latter's rows (a model shape it never saw) at MAPE 16.5 % / median APE
#: 14.2 %, the Triton ``mxfp4`` family at 32 % / 27 % (2.4x too fast above 4,096 tokens);
#: reports/validation/moe_notes.md.
MOE_BACKENDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "marlin": ("int4_wo", ("int4_wo", "mxfp4", "nvfp4")),
}


def moe_backend_family(eff: FittedEfficiency, backend: str | None, weight_format: str) -> str:
    """The ``fitted_v1`` ``moe`` family timing experts of ``weight_format`` under
    ``moe_backend`` ``backend`` (None: the format's own family); ConfigError naming
    the key for a backend that does not serve the format or a profile without its family."""
    from sim.errors import ConfigError  # noqa: PLC0415

    if backend is None:
        return weight_format
    if backend not in MOE_BACKENDS:
        raise ConfigError(f"moe_backend: unknown value {backend!r}; valid: {', '.join(MOE_BACKENDS)}")
    family, formats = MOE_BACKENDS[backend]
    if weight_format not in formats:
        raise ConfigError(f"moe_backend: {backend!r} serves {', '.join(formats)} expert weights, "
                          f"got {weight_format!r}")
    if family not in eff.moe:
        raise ConfigError(f"moe_backend: {backend!r} is timed by the profile's fitted_v1 moe.{family} "
                          "section, which this hardware profile lacks")
    return family


class FittedMoe:
    """Router GEMM + the routed experts over all layers. Where the profile has a
    fused-MoE kernel for the experts' weight format (``fitted_v1`` ``moe``
    section, fitted to the engines' fused-MoE tables; ``engine``'s own fit where
    ``moe_engines`` lists it) the experts are one such layer (``fitted.moe_fitted_s``);
    otherwise grouped expert GEMMs w13 and w2 of the GEMM family: the T x top_k routed rows are spread over the expected
    number of distinct experts hit (uniform routing), each expert's rows padded
    to the kernel's row block (:data:`MOE_SMALL_BLOCK_M` while T <= E, else the
    GEMM family's tile)."""

    def __init__(self, router: FittedGemm, w13: FittedGemm, w2: FittedGemm, num_experts: int,
                 top_k: int, moe_backend: str | None = None, kernel_prec: GemmPrecision | None = None,
                 engine: str | None = None) -> None:
        self.router, self.w13, self.w2, self.E, self.k = router, w13, w2, num_experts, top_k
        # the fused kernel of the weight format, or the one ``moe_backend`` selects (MOE_BACKENDS):
        # the weights keep their own format's bytes, the math runs at the kernel's precision
        # (``kernel_prec``: its peak and activation bytes; Marlin: 16-bit activations); the
        # engine's own fit of that kernel family where the profile has one (``moe_engines``)
        self.fused = w13.eff.moe_for(engine).get(moe_backend_family(w13.eff, moe_backend, w13.prec.quantization))
        self.kernel_prec = kernel_prec if moe_backend is not None else None
        self.ep = 1.0  #: expert-parallel size: the rank holds E / ep experts, gets T top_k / ep rows
        #: how rows spread over experts (``fitted.MOE_ROUTINGS``): uniform when serving;
        #: ``balanced`` scores the kernel tables' balanced rows (calibration.check_tables)
        self.routing = "uniform"
        #: gated experts (SwiGLU, w13 = gate + up, n = 2I), or not (squared ReLU, n = I):
        #: ``fitted.moe_fitted_s``'s ``gated``; bool or bool array
        self.gated = True

    def experts_s(self, T):
        """One layer's routed experts for T tokens (float or float64 array)."""
        E, k = self.E, self.k
        if self.fused:
            pr = self.w13.prec
            kp = self.kernel_prec
            if kp is not None:
                peak, act = kp.peak_flops_per_s, (kp.act_quant_bytes if kp.act_quant_bytes > 0 else ACT_BYTES)
            else:
                peak, act = pr.peak_flops_per_s, (pr.act_quant_bytes if self.w13.w8a8 else ACT_BYTES)
            return moe_fitted_s(self.fused, T, self.w13.k, self.w2.k, E, k,
                                peak, self.w13.bw, weight_bytes=pr.weight_bytes, act_bytes=act, ep=self.ep,
                                routing=self.routing, gated=self.gated)
        touched, m = moe_touched_rows(T, E, k, self.ep, self.routing)
        if isinstance(T, np.ndarray):
            t13 = np.where(T <= E, MOE_SMALL_BLOCK_M, self.w13.tm)
            t2 = np.where(T <= E, MOE_SMALL_BLOCK_M, self.w2.tm)
        else:
            t13 = t2 = MOE_SMALL_BLOCK_M if T <= E else None
        # the input is quantized once per token it holds, before the routed rows are
        # gathered; the w2 input (the intermediate activations) once per routed row
        return (self.w13.time_s(m, touched, t13, quant_rows=np.minimum(T, m))
                + self.w2.time_s(m, touched, t2))

    def __call__(self, T: float) -> float:
        return self.router(T) + float(self.experts_s(T)) * self.w13.layers

    def table(self, T: np.ndarray) -> np.ndarray:
        """:meth:`__call__` at each of the token counts ``T`` (float64 array; 0 at T = 0)."""
        with np.errstate(invalid="ignore", divide="ignore"):  # T = 0: no expert touched, masked
            experts = self.experts_s(T)
            return np.where(T > 0, self.router.table(T) + experts * self.w13.layers, 0.0)


def inter_node_all_reduce_s(hw: HardwareProfile, tp: int, nbytes):
    """The between-nodes part of a hierarchical all-reduce of ``nbytes`` over a TP
    group spanning N = tp / g NVLink domains of g GPUs (NCCL: reduce-scatter inside
    each node, a ring all-reduce between the nodes on the 1/g shards -- every GPU's
    own NIC carrying one shard in parallel --, all-gather inside): 2 (N - 1) / N x
    (nbytes / g) / NIC bandwidth + 2 (N - 1) NIC latencies; 0 inside one domain.
    The inside-node part is the ordinary g-GPU all-reduce."""
    nodes = hw.tensor_parallel_nodes(tp)
    if nodes == 1:
        return 0.0 * nbytes
    g, net = tp // nodes, hw.network
    return (2.0 * (nodes - 1) / nodes * (nbytes / g) / net.bandwidth_bytes_per_s
            + 2.0 * (nodes - 1) * net.latency_s)


class FittedAllReduce:
    """``count`` all-reduces of T x hidden bf16 activations per step
    (``fitted.all_reduce_fitted_s`` with the GPU count's constants folded); a TP
    group beyond one NVLink domain adds :func:`inter_node_all_reduce_s` to the
    all-reduce inside each domain.

    Inside one NVLink domain, where the profile has the engines' CUDA-graph custom
    all-reduce (``custom_all_reduce``), each call takes the faster of it and NCCL:
    the engines reduce small messages with their own one-/two-shot peer-to-peer
    kernels (vLLM ``CustomAllreduce`` below its 8 MiB ``max_size``, SGLang's, and
    TensorRT-LLM's ``AllReduceStrategy.AUTO``) and large ones with NCCL. Across
    nodes the custom kernels do not apply (they need peer access to every GPU)."""

    def __init__(self, eff: FittedEfficiency, hw: HardwareProfile, hidden: int, tp: int,
                 count: int, bytes_per_tok: float | None = None) -> None:
        p = eff.all_reduce
        # bytes per token of one call: ``hidden`` bf16 activations unless given
        self.count = count
        self.bytes_per_tok = hidden * ACT_BYTES if bytes_per_tok is None else bytes_per_tok
        self.hw, self.tp_all = hw, tp
        self.multi_node = hw.tensor_parallel_nodes(tp) > 1
        tp = tp // hw.tensor_parallel_nodes(tp)  # the NVLink part runs inside one domain
        self.custom = None
        if count:
            self.lat, self.c1, self.c2, self.ex = self._terms(hw, p, tp)
            cp = eff.custom_all_reduce
            if cp is not None and not self.multi_node:
                self.custom = self._terms(hw, cp, tp)

    @staticmethod
    def _terms(hw: HardwareProfile, p, tp: int) -> tuple[float, float, float, float]:
        lat = p.latency_s + p.latency_per_gpu_s * (tp - 1.0)
        # bytes/s of the message: link x bus efficiency / (2 (p-1) / p)
        rate = (hw.interconnect.bandwidth_bytes_per_s * float(bus_efficiency(p, tp))
                * tp / (2.0 * (tp - 1.0)))
        return (lat,) + _power_terms(rate, p.half_bytes, p.exponent)

    def __call__(self, T: float) -> float:
        if self.count == 0:
            return 0.0
        b = self.bytes_per_tok * T
        t = self.lat + self.c1 * b + self.c2 * b ** self.ex
        if self.custom is not None:
            lat, c1, c2, ex = self.custom
            tc = lat + c1 * b + c2 * b ** ex
            t = np.minimum(t, tc) if isinstance(t, np.ndarray) else min(t, tc)
        if self.multi_node:
            t += inter_node_all_reduce_s(self.hw, self.tp_all, b)
        return self.count * t


class AllReduceSum:
    """Several kinds of all-reduce per step (:class:`FittedAllReduce` each, in order),
    summed: the layers' activations and, for models whose QK-norm spans all heads
    (``ModelSpec.qk_norm_across_heads``), the norm's squared means."""

    def __init__(self, *parts: FittedAllReduce) -> None:
        self.parts = parts

    def __call__(self, T):
        total = self.parts[0](T)
        for p in self.parts[1:]:
            total = total + p(T)
        return total


class FittedAttention:
    """Attention of one layer x ``layers`` (one varlen FlashAttention call)."""

    def __init__(self, eff: FittedEfficiency, hw: HardwareProfile, heads: int, kv_heads: int,
                 head_dim: int, kv_bytes: float, layers: int, naive: bool = False) -> None:
        self.ca, self.ga = eff.context_attention, eff.generation_attention
        self.peak, self.bw, self.sms = hw.peak_flops_per_s.bf16, hw.hbm_bandwidth_bytes_per_s, hw.num_sms
        self.h, self.kvh, self.d, self.kvb = float(heads), float(kv_heads), float(head_dim), kv_bytes
        self.layers, self.naive = layers, naive
        self.tile = self.ga.kv_tile
        # power-of-two tiles: ceil via shift (numpy // on int64 is several times slower)
        self.shift = self.tile.bit_length() - 1 if self.tile & (self.tile - 1) == 0 else -1
        self.flops_per_score = 4.0 * self.h * self.d
        self._gen_setup()
        ca = self.ca
        # context core as a function of the causal score count s per head (flops = 4 h d s;
        # softmax on h s score elements):
        # tc = (k1 s + k2 s^(1-a)) / util; tb = n1 B + n2 B^(1-e) + seqs kvh seq_head
        self.k1, self.k2, self.kexp = _power_terms(self.peak * ca.compute_efficiency_max,
                                                   ca.compute_half_flops, ca.compute_exponent,
                                                   self.flops_per_score)
        self.k1 += ca.softmax_flops_per_score * self.h / self.peak
        self.n1, self.n2, self.nexp = _power_terms(self.bw * ca.memory_efficiency_max,
                                                   ca.memory_half_bytes, ca.memory_exponent)
        self.ctx_seq_head = self.kvh * ca.seq_head_s
        self.mixed_launch = max(self.ga.launch_s, ca.launch_s)  # a step with decodes and prefill chunks
        self._prompt_memo: dict[int, float] = {}
        self._prompt_table = CountTable(self._prompt_block, self._prompt_scalar)

    def _gen_setup(self) -> None:
        """Constants of the generation core as functions of L = sum of KV
        lengths and the tiled token count (the formulas of
        ``fitted.generation_attention_core_s``, expanded so a step costs a few
        float operations): tc = c1 L + c2 L^(1-a); tb = m1 B + m2 B^(1-e) +
        b seq_head; B = bq b + bk tiled."""
        ga, f = self.ga, self.flops_per_score
        p = self.peak * ga.compute_efficiency_max
        a = ga.compute_exponent
        self.c1, self.c2, self.ca_exp = f / p, ga.compute_half_flops ** a * f ** (1.0 - a) / p, 1.0 - a
        # L^(1-a) as a square root where a = 0.5 (the decode attention's compute exponent is not
        # fitted: calibration.fit FIXED_DEFAULTS): sqrt is exact-rounded and several times cheaper
        # than pow; every mode computes tc this way (decode clocks: ``csq``)
        self.ca_sqrt = self.ca_exp == 0.5
        w = self.bw * ga.memory_efficiency_max
        e = ga.memory_exponent
        self.m1, self.m2, self.me_exp = 1.0 / w, ga.memory_half_bytes ** e / w, 1.0 - e
        hd, kvd = self.h * self.d, self.kvh * self.d
        self.bq = 2.0 * ACT_BYTES * hd + 2.0 * kvd * (ACT_BYTES + self.kvb)
        self.bk = 2.0 * kvd * self.kvb
        self.seq_head = self.kvh * ga.seq_head_s
        unsplit = self.h / self.kvh < ga.split_kv_min_group
        self.cta = ga.cta_token_s if unsplit else 0.0

    def _gen(self, b: float, sum_len: float, tiled: float) -> float:
        """Generation core (s, one layer), from Python floats."""
        tc = self.c1 * sum_len + self.c2 * (sqrt(sum_len) if self.ca_sqrt else sum_len ** self.ca_exp)
        nbytes = self.bq * b + self.bk * tiled
        tb = self.m1 * nbytes + self.m2 * nbytes ** self.me_exp + b * self.seq_head
        if self.cta:
            tp = -(-(b * self.kvh) // self.sms) * (tiled / b) * self.cta
            return sqrt(tc * tc + tb * tb + tp * tp)
        return sqrt(tc * tc + tb * tb)

    def _naive_extra(self, score_elems):
        """Unfused attention: 4 passes over the score matrix (bf16), per head."""
        return 4.0 * ACT_BYTES * self.h * score_elems / (self.bw * self.ca.memory_efficiency_max)

    def _tiles(self, c, axis=None):
        """Sum over sequences of ceil((c + 1) / kv_tile): tiles read for a
        context c plus the new token (int, or an array with ``axis``)."""
        tiles = (c + self.tile) >> self.shift if self.shift >= 0 else (c + self.tile) // self.tile
        return tiles.sum(axis=axis) if axis is not None else int(tiles.sum())

    def step_s(self, n: np.ndarray, c: np.ndarray, T: int, C: int, Q2: int) -> float:
        """Seconds over all layers for new tokens ``n`` and cached ``c`` per
        sequence (T = sum n, C = sum c, Q2 = sum n^2)."""
        S = n.shape[0]
        if T == Q2 and T == S:  # decode only (every n is 1): the engine's common case
            return self._decode_only_s(S, C, self._tiles(c))
        pre = np.flatnonzero(n > 1)
        npf, cpf = n[pre], c[pre]
        nl, cl = npf.tolist(), cpf.tolist()
        if len(pre) <= 16:  # few prefill chunks: Python sums beat numpy call overhead
            sn, sc = sum(nl), sum(cl)
            snc = sum(a * b for a, b in zip(nl, cl))
            snn = sum(a * a for a in nl)
            tq = self.ca.tile_q
            qtiles = sum(-(-a // tq) for a in nl)
        else:
            sn, sc, snc, snn = int(npf.sum()), int(cpf.sum()), int(npf @ cpf), int(npf @ npf)
            qtiles = int(((npf + self.ca.tile_q - 1) // self.ca.tile_q).sum())
        b = S - len(pre)
        if b != T - sn:  # some sequences have no new token: mask them out
            dec = n == 1
            b, cd = int(dec.sum()), c[dec]
            sum_len, tiled = int(cd.sum()) + b, self._tiles(cd)
        else:
            t = self.tile
            sum_len = C - sc + b
            tiled = self._tiles(c) - (sum((x + t) // t for x in cl) if len(pre) <= 16
                                      else self._tiles(cpf))
        return self._mixed_s(b, sum_len, tiled, len(pre), sn, sc, snc, snn, qtiles)

    def step_s_lists(self, nl: list[int], cl: list[int], T: int, C: int, Q2: int) -> float:
        """:meth:`step_s` for Python lists (a small batch: one pass in Python
        beats numpy's per-call cost); the same integers, the same float operations."""
        S = len(nl)
        t = self.tile
        if T == Q2 and T == S:
            return self._decode_only_s(S, C, sum([(x + t) // t for x in cl]))
        return self._mixed_s(*self.batch_sums(nl, cl))

    def batch_sums(self, nl, cl) -> list[int]:
        """The integer arguments of :meth:`_mixed_s` — ``[b, sum_len, tiled,
        npre, sn, sc, snc, snn, qtiles]`` — for sequences with ``nl`` new and
        ``cl`` cached tokens: one new token reads as a decode (the generation
        kernel), more as a prefill chunk (the context kernel)."""
        t, tq = self.tile, self.ca.tile_q
        npre = sn = sc = snc = snn = qtiles = b = sum_len = tiled = 0
        for a, x in zip(nl, cl):
            if a == 1:
                b += 1
                sum_len += x + 1
                tiled += (x + t) // t
            elif a > 1:
                npre += 1
                sn += a
                sc += x
                snc += a * x
                snn += a * a
                qtiles += -(-a // tq)
        return [b, sum_len, tiled, npre, sn, sc, snc, snn, qtiles]

    def _decode_only_s(self, S: int, C: int, tiles: int) -> float:
        """A decode-only step: S sequences, C cached tokens, ``tiles`` KV tiles read."""
        total = self._gen(float(S), float(C + S), float(tiles * self.tile))
        if self.naive:
            total += self._naive_extra(float(C + S))
        return (self.ga.launch_s + total) * self.layers

    def sums_s(self, b, sum_len, tiled, npre, sn, sc, snc, snn, qtiles) -> float:
        """Seconds over all layers from the batch's sums (:meth:`batch_sums`'s
        order); callers with their own sums (sliding-window layers) use it."""
        return self._mixed_s(b, sum_len, tiled, npre, sn, sc, snc, snn, qtiles)

    def _mixed_s(self, b: int, sum_len: int, tiled: int, npre: int, sn: int, sc: int, snc: int, snn: int,
                 qtiles: int) -> float:
        """A step with prefill chunks: ``b`` decode sequences reading ``sum_len``
        KV tokens in ``tiled`` tiles (generation core), and ``npre`` chunks with
        sn new / sc cached tokens, sum n·c = snc, sum n² = snn, ``qtiles`` query
        tiles (context core); one varlen launch."""
        total, launch = 0.0, 0.0
        if b:
            total += self._gen(float(b), float(sum_len), float(tiled * self.tile))
            launch = self.ga.launch_s
            if self.naive:
                total += self._naive_extra(float(sum_len))
        if not npre:  # no prefill chunk (the other sequences have no new token): no context core
            return (launch + total) * self.layers
        if npre == 1 and not sc and not snc and snn == sn * sn:  # one chunk, nothing cached
            total += self.prompt_context(sn)
        else:
            total += self._context(npre, sn, sc, snc, snn, qtiles)
        if self.naive:
            total += self._naive_extra(float(snc + snn))
        return (max(launch, self.ca.launch_s) + total) * self.layers

    def _context(self, npre: int, sn: int, sc: int, snc: int, snn: int, qtiles: int) -> float:
        """Context core (s, one layer) of ``npre`` prefill chunks (see :meth:`_mixed_s`)."""
        scores = snc + (snn + sn) / 2.0
        ctas = self.h * qtiles
        util = ctas / (-(-ctas // self.sms) * self.sms)
        tc = (self.k1 * scores + self.k2 * scores ** self.kexp) / util
        nbytes = self.bq * sn + self.bk * (sc + sn)
        tb = self.n1 * nbytes + self.n2 * nbytes ** self.nexp + npre * self.ctx_seq_head
        return sqrt(tc * tc + tb * tb)

    def prompt_context(self, p: int) -> float:
        """:meth:`_context` of one chunk of ``p`` > 1 tokens with nothing cached
        (a whole prompt, or its first chunk): the usual mixed step of a decode
        span, and every mode's (:meth:`_mixed_s`). Read from a table of the
        counts (``CountTable``: a block of 1,024 prompt lengths computed at
        once with numpy, a few per run instead of a Python evaluation per
        distinct length), memoised."""
        v = self._prompt_memo.get(p)
        if v is None:
            v = self._prompt_memo[p] = self._prompt_table(p)
        return v

    def _prompt_scalar(self, p: float) -> float:
        """:meth:`prompt_context` beyond the table (p >= ``CountTable.MAX``)."""
        n = int(p)
        return self._context(1, n, 0, 0, n * n, -(-n // self.ca.tile_q))

    def _prompt_block(self, P: np.ndarray) -> list[float]:
        """:meth:`_context` of one chunk of each of ``P`` tokens (float64 counts),
        nothing cached: its operations on arrays (values at P < 2 are unused)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            scores = (P * P + P) / 2.0
            ctas = self.h * np.ceil(P / self.ca.tile_q)
            util = ctas / (np.ceil(ctas / self.sms) * self.sms)
            tc = (self.k1 * scores + self.k2 * scores ** self.kexp) / util
            nbytes = self.bq * P + self.bk * P
            tb = self.n1 * nbytes + self.n2 * nbytes ** self.nexp + self.ctx_seq_head
            return np.sqrt(tc * tc + tb * tb).tolist()

    def decode_run_s(self, c: np.ndarray, k: int, g: int) -> np.ndarray:
        """Times (s, shape (k,)) of k decode steps: the first ``g`` sequences'
        contexts grow by one per step. Tile counts are exact integers, equal
        to :meth:`step_s`'s. (Short runs: ``sim.cost_model.decode_clock``.)"""
        t = self.tile
        S = c.shape[0]
        j = np.arange(k, dtype=np.int64)
        x = c.astype(np.int64) + 1  # KV tokens read at step 0
        grow = x[:g]
        if g * k <= 1 << 16:  # small run: ceil over the (sequence, step) grid
            tiles = self._tiles(grow[:, None] + (j - 1)[None, :], axis=0)
        else:  # long run: sum_i ceil((x_i + j) / t) = sum q + g a + f(b), j = a t + b,
            # f(b) = #{r + b >= 1} + #{r + b > t} (x = q t + r) depends on b only
            q, r = np.divmod(grow, t)
            cnt = np.bincount(r, minlength=t)
            le = np.cumsum(cnt)  # le[v] = #{r <= v}
            b_idx = np.arange(t)
            f = np.where(b_idx == 0, g - cnt[0], 2 * g - le[(t - b_idx) % t])
            a, bb = np.divmod(j, t)
            tiles = int(q.sum()) + g * a + f[bb]
        if g < S:  # static batching's padding sequences: fixed contexts
            tiles = tiles + self._tiles(c[g:])
        tiled = (tiles * t).astype(float)
        sum_len = float(int(x.sum())) + float(g) * np.arange(k, dtype=float)
        # The fitted terms raise to non-integer powers: evaluated with Python floats, step
        # by step, as step_s does (numpy's vectorised ** differs from Python's by an ulp
        # for a few per cent of inputs, and a merged run must end where single steps do).
        gen, naive, launch, layers = self._gen, self.naive, self.ga.launch_s, self.layers
        fS = float(S)
        out = []
        for L, T in zip(sum_len.tolist(), tiled.tolist()):
            total = gen(fS, L, T)
            if naive:
                total += self._naive_extra(L)
            out.append((launch + total) * layers)
        return np.array(out)
