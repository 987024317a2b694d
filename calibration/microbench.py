"""Live kernel microbenchmarks with torch (the only module that imports it,
lazily, inside the functions that run kernels).

    paths = run_microbenchmarks("cuda", out_dir, quick=False)

Measures, on ``cuda`` (CUDA events) or ``cpu`` (``time.perf_counter``, tiny
sizes), and writes CSVs in the ``../shared/kernels/`` column format
(``latency`` in ms per call) so ``calibration.datasets`` reads them like the
published tables:

- ``torch_gemm.csv``: ``torch.nn.functional.linear`` in bf16 over m (tokens)
  x (n, k) -- a generic grid plus model layer shapes; fp8 W8A8 on GPUs with
  fp8 tensor cores (sm_89+): per-tensor activation quantization +
  ``torch._scaled_mm``, as vLLM's CUTLASS fp8 linear does.
- ``torch_context_attention.csv``: causal
  ``torch.nn.functional.scaled_dot_product_attention`` (GQA through
  ``enable_gqa``) over batch x prompt length x (heads, KV heads, head_dim).
- ``torch_generation_attention.csv``: one query token per sequence against a
  KV cache of ``step`` tokens (GQA shapes).
- ``copy_bandwidth.csv``: device-to-device copies (bytes, latency) -- the
  memory bandwidth elementwise kernels reach.
- ``nccl_torch.csv``: ``all_reduce`` over 2..N GPUs (torch.distributed, NCCL)
  when several GPUs are present.
- ``torch_moe.csv`` (the ``*_moe`` table format): one MoE layer's experts as
  torch's grouped GEMM (``torch._grouped_mm``, bf16, sm_90+): gather the routed
  tokens by expert (each expert's rows padded to 16, as vLLM's
  ``moe_align_block_size`` pads to the kernel's block), gate/up GEMM, SiLU-and-
  mul, down GEMM, weighted scatter-add back; balanced routing fixed per shape
  (the router's top-k itself is not timed). Shapes of served MoE models, at
  expert-parallel sizes 1 and 8 (local experts ``num_experts / ep``).
- ``torch_mla_bmm.csv`` (the ``*_mla_bmm`` format): MLA's absorbed batched
  matmuls as vLLM runs them with ``torch.bmm`` -- ``mla_gen_pre`` (q_nope x
  W_UK: per head [tokens, 128] x [128, 512]) and ``mla_gen_post`` (latent
  output x W_UV: per head [tokens, 512] x [512, 128]).
- ``torch_generation_mla.csv`` (the ``*_generation_mla`` format): absorbed
  MLA decode attention as plain SDPA -- ``num_heads`` query heads of 576
  (512 latent + 64 rope) against one shared latent KV head of 576 / 512, the
  heads laid out as query rows of one attention (as FlashMLA tiles them) --
  the math a FlashMLA kernel does, in whatever backend torch picks.

Timing: warm-up calls, then on GPU CUDA-graph replays of several calls timed
with CUDA events (``Timer``), on CPU ``perf_counter`` per call; the median of
repeats, random inputs (seeded), and for memory-bound work a rotation of
buffer sets whose total exceeds the last-level cache, so every call reads
from DRAM/HBM.
"""

from __future__ import annotations

import csv
import statistics
import time
from pathlib import Path
from typing import Callable

#: (n, k) layer shapes per rank of common models (qkv, o, gate_up, down), plus a grid
MODEL_SHAPES = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),  # Llama-3.1-8B
                (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672),  # Llama-3.1-70B TP1 widths
                (1280, 8192), (1024, 8192), (7168, 8192), (8192, 3584),     # 70B TP8
                (5120, 4096), (4096, 1536), (2048, 2048)]
GRID = [256, 1024, 4096, 16384]
FULL = {"m": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
        "attn_shapes": [(32, 8, 128), (64, 8, 128), (32, 32, 128), (8, 1, 128), (16, 2, 256),
                        (40, 8, 128), (28, 4, 128), (12, 12, 64), (64, 64, 128)],
        "ctx_batch": [1, 4, 16, 64], "isl": [64, 256, 1024, 4096, 8192], "ctx_tokens_max": 65536,
        "gen_batch": [1, 8, 32, 128, 512], "step": [15, 255, 1023, 4095, 16383],
        "gen_tokens_max": 1 << 21, "copy_bytes": [1 << p for p in range(16, 31, 2)], "reps": 20}
TINY = {"m": [1, 4, 16, 64], "nk": [(64, 64), (128, 256), (256, 128), (256, 256), (64, 512)],
        "attn_shapes": [(4, 1, 32), (4, 4, 32), (8, 2, 64)],
        "ctx_batch": [1, 4], "isl": [16, 64, 128], "ctx_tokens_max": 512,
        "gen_batch": [1, 8], "step": [15, 127, 511], "gen_tokens_max": 4096,
        "copy_bytes": [1 << p for p in range(12, 23, 2)], "reps": 5}
#: CPU with --quick (the CI test): a few seconds
MICRO = {"m": [1, 16, 64], "nk": [(64, 64), (128, 256), (256, 128), (64, 512)],
         "attn_shapes": [(4, 1, 32), (4, 4, 32)], "ctx_batch": [1, 2], "isl": [16, 64],
         "ctx_tokens_max": 128, "gen_batch": [1, 4], "step": [15, 127], "gen_tokens_max": 512,
         "copy_bytes": [1 << p for p in range(12, 21, 4)], "reps": 3}
QUICK_GPU = {**FULL, "m": [1, 16, 128, 1024, 8192], "reps": 10, "isl": [256, 2048, 8192],
             "ctx_batch": [1, 8], "gen_batch": [1, 32, 256], "step": [255, 4095, 32767]}


def _torch():
    try:
        import torch  # noqa: PLC0415 -- lazy: only live calibration needs torch
    except ImportError:
        from sim.errors import ConfigError  # noqa: PLC0415

        raise ConfigError("live calibration (--device) needs torch: pip install 'servesim[calibration]' "
                          "(or pip install torch)") from None
    return torch


class Timer:
    """Median latency (s) of ``fn(i)`` over ``reps`` calls after ``warmup``;
    ``i`` indexes the buffer set to use (rotation).

    On CUDA the calls are captured in a CUDA graph (``graph_calls`` calls per
    graph, the median of ``reps // 2`` timed replays divided by ``graph_calls``):
    serving engines replay decode steps as CUDA graphs, and timing single
    eager launches with events adds 5-15 us of launch jitter to small kernels
    (two eager sweeps on an H200 differed by a median 14 % per GEMM row). A
    function that cannot be captured falls back to events around single calls.
    """

    def __init__(self, device: str, reps: int, warmup: int = 3, graph_calls: int = 8) -> None:
        self.torch = _torch()
        self.cuda = device.startswith("cuda")
        self.reps, self.warmup, self.graph_calls = reps, warmup, graph_calls
        self.graph_failures = 0

    def __call__(self, fn: Callable[[int], object], num_sets: int = 1) -> float:
        torch = self.torch
        for i in range(self.warmup):
            fn(i % num_sets)
        if self.cuda:
            try:
                return self._graph_time(fn, num_sets)
            except RuntimeError:
                self.graph_failures += 1
                torch.cuda.synchronize()
        times = []
        if self.cuda:
            torch.cuda.synchronize()
            for i in range(self.reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(i % num_sets)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e-3)
        else:
            for i in range(self.reps):
                t0 = time.perf_counter()
                fn(i % num_sets)
                times.append(time.perf_counter() - t0)
        return statistics.median(times)

    def _graph_time(self, fn: Callable[[int], object], num_sets: int) -> float:
        torch = self.torch
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(self.graph_calls):
                fn(i % num_sets)
        graph.replay()  # first replay uploads the graph
        torch.cuda.synchronize()
        times = []
        for _ in range(max(3, self.reps // 2)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3 / self.graph_calls)
        del graph
        return statistics.median(times)


def _num_sets(nbytes: float, cache_bytes: float, cap_bytes: float = 4e9) -> int:
    """Buffer sets so their total exceeds twice the cache (at most ``cap_bytes``)."""
    if nbytes <= 0:
        return 1
    return int(max(1, min(2 * cache_bytes // nbytes + 1, cap_bytes // nbytes, 64)))


def device_info(device: str) -> dict[str, str | float | int]:
    """Name, versions, cache size and SM/core count of the device."""
    torch = _torch()
    info: dict[str, str | float | int] = {"torch": torch.__version__}
    if device.startswith("cuda"):
        p = torch.cuda.get_device_properties(0)
        info.update(name=p.name, cuda=str(torch.version.cuda), num_sms=p.multi_processor_count,
                    memory_bytes=int(p.total_memory), cache_bytes=getattr(p, "L2_cache_size", 64 << 20),
                    capability=f"{p.major}.{p.minor}", gpus=torch.cuda.device_count())
        try:
            import subprocess  # noqa: PLC0415
            drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10).stdout.split("\n")[0]
            info["driver"] = drv.strip() or "unknown"
        except (OSError, ValueError, subprocess.SubprocessError):
            info["driver"] = "unknown"
    else:
        import os  # noqa: PLC0415
        import platform  # noqa: PLC0415
        info.update(name=platform.processor() or platform.machine() or "cpu", cuda="none",
                    driver="none", num_sms=torch.get_num_threads(), cache_bytes=32 << 20,
                    memory_bytes=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), gpus=0)
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    info["name"] = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
    return info


def _write(path: Path, header: list[str], rows: list[list]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


class _CsvSink(list):
    """A row list that also appends each row to ``path`` as it arrives (flushed),
    so a sweep cut short by a time limit still leaves its measurements."""

    def __init__(self, path: Path, header: list[str]) -> None:
        super().__init__()
        self.path = path
        _write(path, header, [])

    def append(self, row: list) -> None:
        super().append(row)
        with self.path.open("a", newline="") as f:
            csv.writer(f).writerow(row)


def bench_gemm(device: str, dev_name: str, sizes: dict, timer: Timer, cache: float,
               progress, rows: list | None = None) -> list[list]:
    """Rows (version, device, kernel_source, gemm_dtype, m, n, k, latency ms),
    appended to ``rows`` (a new list by default) as they are measured."""
    torch = _torch()
    F = torch.nn.functional
    gen = torch.Generator(device=device).manual_seed(0)
    nk = sizes.get("nk") or sorted(set(MODEL_SHAPES) | {(n, k) for n in GRID for k in GRID})
    fp8 = device.startswith("cuda") and torch.cuda.get_device_capability(0) >= (8, 9)
    fp8_failures = 0
    rows = [] if rows is None else rows
    for n, k in progress(nk, desc="GEMM shapes"):
        for m in sizes["m"]:
            for dtype in (["bfloat16", "fp8"] if fp8 else ["bfloat16"]):
                if dtype == "fp8" and not fp8:
                    continue
                wbytes = k * n * (1 if dtype == "fp8" else 2)
                sets = _num_sets(wbytes + 2 * m * (k + n), cache)
                bf = torch.bfloat16
                x = [torch.randn(m, k, device=device, dtype=bf, generator=gen) for _ in range(sets)]
                w = [torch.randn(n, k, device=device, dtype=bf, generator=gen) for _ in range(sets)]
                if dtype == "fp8":
                    f8 = torch.float8_e4m3fn
                    wq = [(wi / (wi.abs().amax() / 448)).to(f8).t() for wi in w]
                    ws = torch.ones((), device=device)

                    def fn(i, x=x, wq=wq, ws=ws, f8=f8):
                        s = x[i].abs().amax().float() / 448  # dynamic per-tensor activation scale
                        xq = (x[i] / s).to(f8)
                        return torch._scaled_mm(xq, wq[i], scale_a=s, scale_b=ws, out_dtype=torch.bfloat16)
                    src = "torch._scaled_mm"
                else:
                    def fn(i, x=x, w=w):
                        return F.linear(x[i], w[i])
                    src = "torch.nn.functional.linear"
                try:
                    t = timer(fn, sets)
                except RuntimeError as e:  # e.g. _scaled_mm shape limits: skip that fp8 shape
                    if dtype != "fp8":
                        raise
                    fp8_failures += 1
                    if fp8_failures == 1:
                        print(f"fp8 GEMM m={m} n={n} k={k} skipped: {e}")
                    fp8 = fp8_failures < 20  # broken everywhere: stop trying
                    continue
                rows.append([torch.__version__, dev_name, src, dtype, m, n, k, t * 1e3])
                del x, w
    return rows


def bench_attention(device: str, dev_name: str, sizes: dict, timer: Timer,
                    progress, ctx: list | None = None, dec: list | None = None) -> tuple[list, list]:
    """(context rows, generation rows) in the attention table format, appended to
    ``ctx`` / ``dec`` (new lists by default) as they are measured."""
    torch = _torch()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    gen = torch.Generator(device=device).manual_seed(1)
    bf = torch.bfloat16
    ctx = [] if ctx is None else ctx
    dec = [] if dec is None else dec
    for h, kvh, d in progress(sizes["attn_shapes"], desc="attention shapes"):
        for b in sizes["ctx_batch"]:
            for isl in sizes["isl"]:
                if b * isl > sizes["ctx_tokens_max"]:
                    continue
                q = torch.randn(b, h, isl, d, device=device, dtype=bf, generator=gen)
                kv = torch.randn(2, b, kvh, isl, d, device=device, dtype=bf, generator=gen)
                t = timer(lambda i: sdpa(q, kv[0], kv[1], is_causal=True, enable_gqa=kvh != h))
                ctx.append([torch.__version__, dev_name, "torch_sdpa", b, isl, h, kvh, d, "bfloat16",
                            "bfloat16", 0, 0, t * 1e3])
        for b in sizes["gen_batch"]:
            for step in sizes["step"]:
                if b * step > sizes["gen_tokens_max"]:
                    continue
                q = torch.randn(b, h, 1, d, device=device, dtype=bf, generator=gen)
                kv = torch.randn(2, b, kvh, step + 1, d, device=device, dtype=bf, generator=gen)
                t = timer(lambda i: sdpa(q, kv[0], kv[1], enable_gqa=kvh != h))
                dec.append([torch.__version__, dev_name, "torch_sdpa", b, 1, h, kvh, d, "bfloat16",
                            "bfloat16", step, 0, t * 1e3])
    return ctx, dec


def bench_copy(device: str, sizes: dict, timer: Timer, cache: float) -> list[list]:
    """(bytes, latency ms) of device-to-device copies (read + write = 2 x bytes)."""
    torch = _torch()
    rows = []
    for nbytes in sizes["copy_bytes"]:
        sets = _num_sets(2 * nbytes, cache)
        gen = torch.Generator(device=device).manual_seed(2)
        src = [torch.rand(nbytes // 2, device=device, generator=gen).to(torch.bfloat16)
               for _ in range(sets)]
        dst = [torch.empty_like(s) for s in src]
        rows.append([nbytes, timer(lambda i: dst[i].copy_(src[i]), sets) * 1e3])
    return rows


MOE_COLUMNS = ["kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk",
               "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency"]
#: (hidden_size, moe_intermediate_size, num_experts_per_tok, n_routed_experts) of served MoE models
MOE_SHAPES = [(7168, 2048, 8, 256),   # DeepSeek-V3/R1
              (4096, 1536, 8, 128),   # Qwen3-235B-A22B
              (2048, 768, 8, 128),    # Qwen3-30B-A3B
              (2880, 2880, 4, 128),   # gpt-oss-120b
              (3072, 1536, 8, 256),   # MiniMax-M2.5
              (4096, 14336, 2, 8)]    # Mixtral-8x7B
MOE_TOKENS = [1, 4, 16, 64, 256, 1024, 4096, 16384]


def _balanced_counts(num_tokens: int, topk: int, num_experts: int, num_local: int) -> list[int]:
    """Tokens routed to each of the first ``num_local`` experts when ``num_tokens``
    x ``topk`` assignments are spread evenly over ``num_experts``."""
    total = num_tokens * topk
    base, extra = divmod(total, num_experts)
    return [base + (1 if e < extra else 0) for e in range(num_local)]


def bench_moe(device: str, dev_name: str, progress, rows: list | None = None,
              shapes: list | None = None, tokens: list | None = None, eps: tuple = (1, 8),
              timer: Timer | None = None) -> list[list]:
    """Rows (kernel_source, moe_dtype, num_tokens, hidden_size, inter_size, topk,
    num_experts, moe_tp_size, moe_ep_size, distribution, latency ms); nothing
    when torch has no usable ``_grouped_mm`` here (CPU, pre-Hopper)."""
    torch = _torch()
    rows = [] if rows is None else rows
    if not hasattr(torch, "_grouped_mm"):
        print("torch has no _grouped_mm: MoE benchmark skipped")
        return rows
    timer = timer or Timer(device, 10)
    gen = torch.Generator(device=device).manual_seed(3)
    bf = torch.bfloat16
    align = 16
    for hidden, inter, topk, num_experts in progress(shapes or MOE_SHAPES, desc="MoE shapes"):
        for ep in eps:
            if num_experts % ep:
                continue
            local = num_experts // ep
            w13 = torch.randn(local, 2 * inter, hidden, device=device, dtype=bf, generator=gen) * 0.02
            w2 = torch.randn(local, hidden, inter, device=device, dtype=bf, generator=gen) * 0.02
            for t in tokens or MOE_TOKENS:
                counts = _balanced_counts(t, topk, num_experts, local)
                padded = [-(-c // align) * align for c in counts]
                rows_total = sum(padded)
                if rows_total == 0:
                    continue
                # each expert's rows: tokens assigned round-robin (balanced), padding rows -> token 0, weight 0
                tok, wts, nxt = [], [], 0
                for c, pc in zip(counts, padded):
                    for j in range(pc):
                        if j < c:
                            tok.append(nxt % t)
                            wts.append(1.0 / topk)
                            nxt += 1
                        else:
                            tok.append(0)
                            wts.append(0.0)
                tok_idx = torch.tensor(tok, device=device, dtype=torch.long)
                weight = torch.tensor(wts, device=device, dtype=bf).unsqueeze(1)
                offs = torch.tensor(padded, device=device, dtype=torch.int32).cumsum(0).to(torch.int32)
                x = torch.randn(t, hidden, device=device, dtype=bf, generator=gen)
                out = torch.zeros(t, hidden, device=device, dtype=bf)
                w13t, w2t = w13.transpose(-2, -1), w2.transpose(-2, -1)

                def fn(i, x=x, tok_idx=tok_idx, weight=weight, offs=offs, out=out, w13t=w13t, w2t=w2t, inter=inter):
                    a = x.index_select(0, tok_idx)
                    gu = torch._grouped_mm(a, w13t, offs=offs)
                    h = torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]
                    y = torch._grouped_mm(h, w2t, offs=offs) * weight
                    out.zero_()
                    return out.index_add_(0, tok_idx, y)
                try:
                    lat = timer(fn)
                except RuntimeError as e:
                    print(f"MoE grouped GEMM skipped ({hidden}, {inter}, top{topk}, {local} experts, "
                          f"{t} tokens): {str(e).splitlines()[0]}")
                    break
                rows.append(["torch_grouped_mm", "bfloat16", t, hidden, inter, topk, num_experts, 1, ep,
                             "balanced", lat * 1e3])
            del w13, w2
    return rows


MLA_SIZES = {"heads": [128, 64, 32, 16], "batch": [1, 4, 16, 64, 128, 256], "step": [127, 1023, 4095, 16383],
             "tokens": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192], "kv_tokens_max": 1 << 22}
MLA_QUICK = {"heads": [128, 64, 32, 16], "batch": [1, 8, 64], "step": [127, 1023], "tokens": [1, 8, 64, 512],
             "kv_tokens_max": 1 << 18}


def bench_mla(device: str, dev_name: str, progress, bmm_rows: list | None = None,
              gen_rows: list | None = None, timer: Timer | None = None, quick: bool = False,
              sizes: dict | None = None) -> tuple[list, list]:
    """(mla_bmm rows, generation_mla rows) for DeepSeek-V3's MLA dims
    (kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim = v_head_dim = 128)
    at 128 / 64 / 32 / 16 heads (TP 1 / 2 / 4 / 8)."""
    torch = _torch()
    timer = timer or Timer(device, 10)
    bmm_rows = [] if bmm_rows is None else bmm_rows
    gen_rows = [] if gen_rows is None else gen_rows
    gen = torch.Generator(device=device).manual_seed(4)
    bf = torch.bfloat16
    sdpa = torch.nn.functional.scaled_dot_product_attention
    sizes = sizes or (MLA_QUICK if quick else MLA_SIZES)
    for h in progress(sizes["heads"], desc="MLA heads"):
        w_uk = torch.randn(h, 128, 512, device=device, dtype=bf, generator=gen)
        w_uv = torch.randn(h, 512, 128, device=device, dtype=bf, generator=gen)
        for t in sizes["tokens"]:
            q = torch.randn(h, t, 128, device=device, dtype=bf, generator=gen)
            lat = torch.randn(h, t, 512, device=device, dtype=bf, generator=gen)
            bmm_rows.append(["mla_gen_pre", t, h, timer(lambda i: torch.bmm(q, w_uk)) * 1e3])
            bmm_rows.append(["mla_gen_post", t, h, timer(lambda i: torch.bmm(lat, w_uv)) * 1e3])
        for b in sizes["batch"]:
            for step in sizes["step"]:
                if b * (step + 1) > sizes["kv_tokens_max"]:
                    continue
                # one latent KV head shared by all query heads: the heads become the query rows
                # of one attention (as FlashMLA tiles them), so nothing is expanded per head
                q = torch.randn(b, 1, h, 576, device=device, dtype=bf, generator=gen)
                kv = torch.randn(b, 1, step + 1, 576, device=device, dtype=bf, generator=gen)
                v = kv[..., :512]
                try:
                    t_ = timer(lambda i: sdpa(q, kv, v, scale=1.0 / (192 ** 0.5)))
                except RuntimeError as e:
                    print(f"MLA decode attention skipped: {str(e).splitlines()[0]}")
                    return bmm_rows, gen_rows
                gen_rows.append(["bfloat16", h, b, 128 // h, step, t_ * 1e3])
    return bmm_rows, gen_rows


def _all_reduce_worker(rank: int, world: int, sizes: list[int], port: int, out: str) -> None:
    torch = _torch()
    import torch.distributed as dist  # noqa: PLC0415
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    timer = Timer("cuda", reps=20)
    rows = []
    for n in sizes:
        x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        t = timer(lambda i: dist.all_reduce(x))
        rows.append(["all_reduce", "half", world, n, t * 1e3])
    if rank == 0:
        _write(Path(out), ["op_name", "nccl_dtype", "num_gpus", "message_size", "latency"], rows)
    dist.destroy_process_group()


def bench_all_reduce(out_dir: Path, num_gpus: int, quick: bool) -> Path | None:
    """NCCL all-reduce over 2, 4, 8 (up to ``num_gpus``) GPUs; None if < 2."""
    if num_gpus < 2:
        return None
    _torch()  # a clear error here rather than in the spawned workers
    import torch.multiprocessing as mp  # noqa: PLC0415
    sizes = [1 << p for p in range(8, 28 if quick else 29, 2)]  # elements (bf16)
    parts = []
    for i, world in enumerate(w for w in (2, 4, 8) if w <= num_gpus):
        part = out_dir / f".nccl_{world}.csv"
        mp.spawn(_all_reduce_worker, args=(world, sizes, 29500 + i, str(part)), nprocs=world, join=True)
        parts.append(part)
    rows = []
    for part in parts:
        with part.open() as f:
            rows += list(csv.reader(f))[1:]
        part.unlink()
    return _write(out_dir / "nccl_torch.csv", ["op_name", "nccl_dtype", "num_gpus", "message_size",
                                                "latency"], rows)


def run_microbenchmarks(device: str, out_dir: str | Path, quick: bool = False,
                        progress: Callable = lambda it, **kw: it) -> dict[str, Path]:
    """Run every benchmark on ``device`` and write the CSVs; returns name -> path."""
    torch = _torch()
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch sees no CUDA device")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = device_info(device)
    sizes = (MICRO if quick else TINY) if device == "cpu" else (QUICK_GPU if quick else FULL)
    timer = Timer(device, sizes["reps"])
    cache, name = float(info["cache_bytes"]), str(info["name"])
    attn_cols = ["version", "device", "kernel_source", "batch_size", "isl", "num_heads",
                 "num_key_value_heads", "head_dim", "attn_dtype", "kv_cache_dtype", "step",
                 "window_size", "latency"]
    paths = {"gemm": out_dir / "torch_gemm.csv", "context_attention": out_dir / "torch_context_attention.csv",
             "generation_attention": out_dir / "torch_generation_attention.csv"}
    bench_gemm(device, name, sizes, timer, cache, progress,
               _CsvSink(paths["gemm"], ["version", "device", "kernel_source", "gemm_dtype", "m", "n", "k",
                                        "latency"]))
    bench_attention(device, name, sizes, timer, progress,
                    _CsvSink(paths["context_attention"], attn_cols),
                    _CsvSink(paths["generation_attention"], attn_cols))
    paths["copy"] = _write(out_dir / "copy_bandwidth.csv", ["bytes", "latency"],
                           bench_copy(device, sizes, timer, cache))
    if device.startswith("cuda"):  # MoE / MLA shapes are GPU-sized: no CPU variant
        paths["moe"] = out_dir / "torch_moe.csv"
        bench_moe(device, name, progress, _CsvSink(paths["moe"], MOE_COLUMNS), timer=timer,
                  tokens=[1, 16, 256, 4096] if quick else None)
        paths["mla_bmm"], paths["generation_mla"] = out_dir / "torch_mla_bmm.csv", out_dir / "torch_generation_mla.csv"
        bench_mla(device, name, progress, _CsvSink(paths["mla_bmm"], ["op_name", "num_tokens", "num_heads", "latency"]),
                  _CsvSink(paths["generation_mla"], ["kv_cache_dtype", "num_heads", "batch_size", "tp_size", "step",
                                                     "latency"]), timer=timer, quick=quick)
    if timer.graph_failures:
        print(f"{timer.graph_failures} measurement(s) could not be captured in a CUDA graph: "
              "timed as single eager calls")
    nccl = bench_all_reduce(out_dir, int(info.get("gpus", 0)), quick) if device != "cpu" else None
    if nccl is not None:
        paths["nccl"] = nccl
    return paths
