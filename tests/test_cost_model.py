"""Roofline cost model on the round-number test GPU (tests/data/README.md):
every time is max(FLOPs / 1e15, bytes / 1e12); values are hand-computed."""

from pathlib import Path

import numpy as np
import pytest

from sim.cost_model import (CostModel, all_reduce_time_s, attention_cost, gemm_time_s,
                            uniform_batch_sums)
from sim.errors import ConfigError
from sim.hardware.profile import get_hardware
from sim.model_spec import ModelSpec, get_model

DATA = Path(__file__).parent / "data"
HW = get_hardware(str(DATA / "test_gpu.yaml"))
MODEL = ModelSpec.from_hf_config(DATA / "test_model.json")


def arr(*xs):
    return np.array(xs, dtype=np.int64)


def decode_bytes_per_layer(ctx):
    """Bytes one decode token moves in one layer of the test model (bf16)."""
    qkv = 1024 * 1536 * 2 + 1024 * 2 + 1536 * 2
    o = 1024 * 1024 * 2 + 1024 * 2 + 1024 * 2
    up = 1024 * 8192 * 2 + 1024 * 2 + 8192 * 2
    down = 4096 * 1024 * 2 + 4096 * 2 + 1024 * 2
    attn = 2 * 2 * 1024 + (ctx + 1) * 2 * 256 * 2 + 2 * 256 * (2 + 2)
    elem = (8 * 1024 + 2 * (1024 + 256) + 3 * 4096) * 2
    return qkv + o + up + down + attn + elem


def test_memory_bound_decode_is_bytes_over_bandwidth():
    cm = CostModel(MODEL, HW)
    st = cm.step_time(arr(1), arr(1023))
    lm_head = 1024 * 32768 * 2 + 1024 * 2 + 32768 * 2
    per_step = 5 * 1024 * 2  # embedding gather + final norm
    expected = (4 * decode_bytes_per_layer(1023) + lm_head + per_step) / 1e12
    assert st.total_s == pytest.approx(expected, rel=1e-12)
    # = weights read (all but the embedding table) + KV read, to within activations
    weights_read = MODEL.weight_bytes() - 32768 * 1024 * 2
    kv_read = 1024 * MODEL.kv_bytes_per_token()
    assert st.total_s == pytest.approx((weights_read + kv_read) / 1e12, rel=0.005)
    assert st.total_s == sum(st.ops.values())
    assert cm.step_time_s(arr(1), arr(1023)) == pytest.approx(st.total_s, rel=1e-15)


def test_compute_bound_prefill_attention_is_flops_over_peak():
    cm = CostModel(MODEL, HW)
    st = cm.step_time(arr(4096), arr(0))
    flops = 4 * 4 * 8 * 128 * (4096 * 4097 / 2)  # layers x 4 x heads x head_dim x causal keys
    assert st.ops["attention"] == pytest.approx(flops / 1e15, rel=1e-12)
    # FFN: gate_up (n=8192, k=1024) and down (n=1024, k=4096), each a roofline
    m = 4096
    up = max(2 * m * 8192 * 1024 / 1e15, (1024 * 8192 + m * 1024 + m * 8192) * 2 / 1e12)
    down = max(2 * m * 1024 * 4096 / 1e15, (4096 * 1024 + m * 4096 + m * 1024) * 2 / 1e12)
    assert st.ops["ffn"] == pytest.approx(4 * (up + down), rel=1e-12)
    # the linear FLOPs the ops use are the model's forward FLOPs
    linear = MODEL.forward_flops(m, 0).linear
    assert linear == 4 * 2 * m * (1024 * 1536 + 1024 * 1024 + 3 * 1024 * 4096)


def test_ring_all_reduce():
    assert all_reduce_time_s(HW, 1e9, 4) == pytest.approx(2 * 3 / 4 * 1e9 / 1e11)
    assert all_reduce_time_s(HW, 1e9, 1) == 0.0
    slow = HW.with_overrides({"interconnect.latency_s": 1e-5, "efficiency.all_reduce_efficiency": 0.5})
    assert all_reduce_time_s(slow, 1e9, 2) == pytest.approx(1e9 / 0.5e11 + 1e-5)


def test_tp_adds_two_all_reduces_per_layer_plus_embedding():
    cm = CostModel(MODEL, HW, tensor_parallel_size=2)
    st = cm.step_time(arr(100), arr(0))
    per_ar = 2 * 1 / 2 * 100 * 1024 * 2 / 1e11
    assert st.ops["tp_all_reduce"] == pytest.approx((2 * 4 + 1) * per_ar, rel=1e-12)
    assert CostModel(MODEL, HW).step_time(arr(100), arr(0)).ops["tp_all_reduce"] == 0.0


def test_tp_halves_memory_bound_weight_time():
    one = CostModel(MODEL, HW).step_time(arr(1), arr(0)).ops
    two = CostModel(MODEL, HW, tensor_parallel_size=2).step_time(arr(1), arr(0)).ops
    assert two["ffn"] == pytest.approx(one["ffn"] / 2, rel=0.01)
    assert two["o_proj"] == pytest.approx(one["o_proj"] / 2, rel=0.01)


def test_flash_vs_naive_attention_bytes():
    n, H, KVH, d = 1000, 8, 2, 128
    sums = uniform_batch_sums(1, n, 0)
    f_flash, b_flash = attention_cost(*sums, H, KVH, d, 2.0, "flash")
    f_naive, b_naive = attention_cost(*sums, H, KVH, d, 2.0, "naive")
    # flash: Q + O, K + V read once, new K/V read and cached
    assert b_flash == 2 * 2 * H * d * n + 2 * KVH * d * 2 * n + 2 * KVH * d * (2 + 2) * n
    # naive adds write S, read S, write P, read P of the n x n matrix per head (bf16)
    assert b_naive - b_flash == 4 * 2 * H * n * n
    assert f_flash == 4 * H * d * n * (n + 1) / 2
    assert f_naive == 4 * H * d * n * n
    slow = CostModel(MODEL, HW, attention_impl="naive").step_time(arr(1000), arr(0)).ops["attention"]
    fast = CostModel(MODEL, HW).step_time(arr(1000), arr(0)).ops["attention"]
    assert slow > fast


def test_gqa_and_fp8_kv_cut_decode_attention_bytes():
    long_ctx = arr(*[4000] * 8)
    ones = np.ones(8, dtype=np.int64)
    bf16 = CostModel(MODEL, HW).step_time(ones, long_ctx).ops["attention"]
    fp8 = CostModel(MODEL, HW, kv_cache_dtype="fp8").step_time(ones, long_ctx).ops["attention"]
    assert fp8 == pytest.approx(bf16 / 2, rel=0.02)
    mha = ModelSpec.from_hf_config({**MODEL.__dict__, "num_key_value_heads": 8,
                                    "architectures": ["LlamaForCausalLM"]})
    assert CostModel(mha, HW).step_time(ones, long_ctx).ops["attention"] == pytest.approx(4 * bf16, rel=0.03)


def test_quantization_changes_weight_bytes_and_peak():
    # memory-bound: fp8 weights halve the GEMM weight bytes
    assert gemm_time_s(HW, 1, 4096, 4096, "fp8") == pytest.approx(
        (4096 * 4096 * 1 + 4096 * (2 + 2 * 1) + 4096 * 2) / 1e12)
    # compute-bound: fp8 runs at the 2e15 fp8 peak on the test GPU
    m, n, k = 8192, 8192, 8192
    assert gemm_time_s(HW, m, n, k, "bf16") == pytest.approx(2 * m * n * k / 1e15)
    assert gemm_time_s(HW, m, n, k, "fp8") == pytest.approx(2 * m * n * k / 2e15)
    # no fp8 on the chip (A100): weight-only fp8 at the bf16 peak
    a100 = get_hardware("a100_sxm")
    assert CostModel(MODEL, a100, quantization="fp8").prec.peak_flops_per_s == 312e12
    assert CostModel(MODEL, HW, quantization="fp8").prec.peak_flops_per_s == 2e15
    assert CostModel(MODEL, HW, quantization="int4_wo").prec.peak_flops_per_s == 1e15


def test_lm_head_only_on_sampled_tokens():
    cm = CostModel(MODEL, HW)
    n, c = arr(100, 1, 1), arr(0, 50, 60)
    assert cm.step_time(n, c, num_sampled=0).ops["lm_head"] == 0.0
    default = cm.step_time(n, c).ops["lm_head"]
    assert default == cm.step_time(n, c, num_sampled=3).ops["lm_head"]
    assert default == pytest.approx((1024 * 32768 * 2 + 3 * 1024 * 2 + 3 * 32768 * 2) / 1e12)


@pytest.mark.parametrize("name,tp", [("test", 1), ("test", 2), ("llama-3.1-8b", 1),
                                     ("mixtral-8x7b", 2), ("qwen3-30b-a3b", 4)])
def test_decode_steps_equal_repeated_step_time(name, tp):
    model = MODEL if name == "test" else get_model(name)
    for hw in (HW, get_hardware("h100_sxm")):
        cm = CostModel(model, hw, tensor_parallel_size=tp)
        ctx = np.random.default_rng(7).integers(0, 5000, size=37)
        for k in (1, 7, 40, 41, 50):
            fast = cm.decode_steps_time_s(ctx, k)
            slow = np.array([cm.step_time_s(np.ones_like(ctx), ctx + j) for j in range(k)])
            assert fast.shape == (k,)
            # bit for bit: merged runs must end where single steps do (fitted powers in Python floats)
            np.testing.assert_array_equal(fast, slow)
            # static batching: the last 5 sequences are padding at fixed contexts
            fast = cm.decode_steps_time_s(ctx, k, num_growing=32)
            slow = np.array([cm.step_time_s(np.ones_like(ctx), np.concatenate((ctx[:32] + j, ctx[32:])))
                             for j in range(k)])
            np.testing.assert_array_equal(fast, slow)
    assert cm.decode_steps_time_s(ctx, 0).shape == (0,)


@pytest.mark.parametrize("cpu, overlap", [(0.0, False), (3e-4, False), (3e-4, True), (0.05, True)])
def test_decode_run_ends_equal_single_steps_accumulated(cpu, overlap):
    """The engine's merged-run end times: k single steps, host time added (or
    max-ed under overlap scheduling), accumulated with t += dt: the same floats
    bit for bit, on the Python path (k <= 40) and the numpy one."""
    cm = CostModel(get_model("llama-3.1-8b"), get_hardware("h100_sxm"))
    ctx = np.random.default_rng(3).integers(0, 5000, size=23).tolist()
    for k in (1, 9, 40, 57):
        t, ref = 12.345, []
        for j in range(k):
            gpu = cm.step_time_s([1] * len(ctx), [c + j for c in ctx])
            t += max(gpu, cpu) if overlap else gpu + cpu
            ref.append(t)
        assert cm.decode_run_ends(ctx, k, 12.345, cpu, overlap) == ref
    # Timed up to a time: the prefix through the first step ending at or after it.
    assert cm.decode_run_ends(ctx, 40, 12.345, cpu, overlap, until=ref[12]) == ref[:13]
    assert cm.decode_run_ends(ctx, 40, 12.345, cpu, overlap, until=ref[12] - 1e-9) == ref[:13]
    assert cm.decode_run_ends(ctx, 40, 12.345, cpu, overlap, until=0.0) == ref[:1]
    assert cm.decode_run_ends(ctx, 10, 12.345, cpu, overlap, until=ref[30]) == ref[:10]
    assert cm.decode_run_ends(ctx, 57, 12.345, cpu, overlap, until=ref[44]) == ref[:45]  # numpy path


def test_moe_touches_fewer_experts_at_small_batch():
    cm = CostModel(get_model("mixtral-8x7b"), HW)
    one = cm.step_time(arr(1), arr(0)).ops["moe_experts"]
    many = cm.step_time(np.ones(64, dtype=np.int64), np.zeros(64, dtype=np.int64)).ops["moe_experts"]
    expert = 3 * 4096 * 14336 * 2 * 32  # bytes of one expert across all layers
    assert one == pytest.approx(2 * expert / 1e12, rel=0.01)   # top-2 of 8
    assert many == pytest.approx(8 * expert / 1e12, rel=0.01)  # all 8 hit


def test_bad_inputs():
    cm = CostModel(MODEL, HW)
    with pytest.raises(ConfigError, match="shape"):
        cm.step_time_s(arr(1, 2), arr(1))
    with pytest.raises(ConfigError, match=">= 0"):
        cm.step_time(arr(-1), arr(0))
    with pytest.raises(ConfigError, match="attention_impl"):
        CostModel(MODEL, HW, attention_impl="paged")
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        CostModel(MODEL, HW, tensor_parallel_size=3)
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        CostModel(MODEL, HW, kv_cache_dtype="fp4")
    assert cm.step_time_s(arr(0, 0), arr(5, 5)) == 0.0


def test_launch_and_step_overheads_add():
    hw = HW.with_overrides({"efficiency.launch_overhead_s": 1e-6, "efficiency.step_overhead_s": 1e-3})
    base = CostModel(MODEL, HW).step_time(arr(1), arr(10))
    st = CostModel(MODEL, hw).step_time(arr(1), arr(10))
    assert st.ops["step_overhead"] == 1e-3
    # per layer: qkv, o, up, down (1 each), attention 2, elementwise 4; + embedding, final norm
    kernels = 4 * (4 + 2 + 4) + 2 + 1  # + lm_head
    assert st.total_s - base.total_s == pytest.approx(1e-3 + kernels * 1e-6, rel=1e-9)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-30b-a3b"])
def test_step_time_lists_equal_arrays(name):
    """Small batches given as lists take a pure-Python path: bit-identical to arrays."""
    cm = CostModel(get_model(name), get_hardware("h100_sxm"))
    rng = np.random.default_rng(3)
    for _ in range(300):
        S = int(rng.integers(1, 64))
        n = rng.choice([0, 1, 1, 1, 7, 300], size=S)
        n[0] = int(rng.choice([1, 2000]))  # never an all-empty step
        c = rng.integers(0, 5000, size=S)
        if n.max() <= 1 and (n == 0).any():
            n[n == 0] = 1  # zero-token sequences only appear beside prefill chunks
        assert cm.step_time_s(n.tolist(), c.tolist()) == cm.step_time_s(n, c)
    with pytest.raises(ConfigError, match="num_new_tokens"):
        cm.step_time_s([1, 1], [5])


@pytest.mark.parametrize("cpu, overlap", [(0.0, False), (3e-4, False), (3e-4, True)])
def test_decode_clock_with_finishes_and_joins_equals_single_steps(cpu, overlap):
    """A span's clock: 6 sequences, two finishing early; at step 4 two prompts
    (700 and 33 tokens) are prefilled whole beside the decodes, then decode from
    step 5 (one of them finishes at once). Every end equals single steps of
    CostModel.step_time_s over the explicit batch, accumulated with t += dt."""
    cm = CostModel(get_model("llama-3.1-8b"), get_hardware("h100_sxm"))
    ctx = [5, 130, 511, 512, 1000, 2047]
    lasts = [2, 9, 12, 12, 3, 12]
    clock = cm.decode_clock(ctx, lasts, 1.5, lambda s: cpu + 1e-6 * s, overlap)
    assert cm.decode_clock_joins
    clock.advance(3)
    assert clock.batch_at_next() == 4
    clock.mixed([(700, 0), (33, 0)], [(700, 10), (33, 4)], cpu * 2)
    clock.advance(8)
    # the same schedule, one step at a time
    seqs = [[c, f, 1] for c, f in zip(ctx, lasts)]  # context, last step, first step
    t, ref = 1.5, []
    for step in range(1, 13):
        if step == 4:
            seqs += [[700, 10, 5], [33, 4, 5]]
        live = [s for s in seqs if s[2] <= step <= s[1]]
        new, cl = [1] * len(live), [s[0] for s in live]
        host = cpu + 1e-6 * len(live)
        if step == 4:
            new, cl, host = new + [700, 33], cl + [0, 0], cpu * 2
        gpu = cm.step_time_s(new, cl)
        t += max(gpu, host) if overlap else gpu + host
        ref.append(t)
        for s in live:
            s[0] += 1
    assert clock.ends == ref


@pytest.mark.parametrize("cpu, overlap", [(0.0, False), (3e-4, True)])
def test_decode_clock_single_join_equals_mixed(cpu, overlap, monkeypatch):
    """DecodeClock.join (a span's usual join: one whole prompt) times the same
    floats as mixed() with that one chunk, without going through mixed()."""
    from sim.cost_model.decode_clock import DecodeClock

    cm = CostModel(get_model("llama-3.1-8b"), get_hardware("h100_sxm"))
    ctx, lasts = [5, 130, 511, 512, 1000, 2047], [2, 9, 12, 12, 3, 12]
    host = lambda s: cpu + 1e-6 * s  # noqa: E731
    ref = cm.decode_clock(ctx, lasts, 1.5, host, overlap)
    ref.advance(3)
    ref.mixed([(700, 0)], [(700, 10)], cpu * 2)
    ref.advance(8)
    clock = cm.decode_clock(ctx, lasts, 1.5, host, overlap)
    clock.advance(3)
    monkeypatch.setattr(DecodeClock, "mixed", None)  # join must not fall back to it here
    clock.join(700, 10, cpu * 2)
    clock.advance(8)
    assert len(clock.ends) == 12
    assert clock.ends == ref.ends


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-30b-a3b"])
def test_fitted_operator_tables_equal_the_scalar_formulas(name):
    """Token counts below the table bound are read from numpy-built tables;
    they equal the scalar formulas (to rounding), and counts beyond use those."""
    cm = CostModel(get_model(name), get_hardware("h100_sxm"))
    assert cm.fitted
    for T in (1, 2, 63, 64, 65, 1000, 1023, 1024, 5000, (1 << 17) - 1):
        np.testing.assert_allclose(cm._t_ops(float(T)), cm._t_ops_scalar(float(T)), rtol=1e-12)
        assert cm._lm_rows(float(T)) == pytest.approx(cm._lm(float(T)), rel=1e-12)
    assert cm._t_ops(0.0)[:3] == (0.0, 0.0, 0.0)  # no token: no GEMM
    assert cm._t_ops(float(1 << 17)) == cm._t_ops_scalar(float(1 << 17))
    assert cm._t_ops(1000.5) == cm._t_ops_scalar(1000.5)


def test_linear_at_reads_the_same_floats_as_linear_s_at_integer_counts():
    """A decode clock's integer-count read of the step's linear time
    (``count_table.linear_at``) is ``_linear_s`` at those counts, exactly, in a
    block not yet built (its first read builds it), in a built one, and past
    the table (the scalar formulas)."""
    cm = CostModel(get_model("llama-3.1-8b"), get_hardware("h100_sxm"))
    big = (1 << 17) + 5
    for T, ns in ((700, 3), (701, 3), (1, 1), (0, 0), (5000, 64), (20000, 5), (big, 2), (3, big)):
        fresh = CostModel(get_model("llama-3.1-8b"), get_hardware("h100_sxm"))
        assert fresh._linear_at(T, ns) == cm._linear_s(float(T), float(ns))
        assert cm._linear_at(T, ns) == cm._linear_s(float(T), float(ns))
    assert cm._linear_at(1000, 20) != cm._linear_at(1001, 20)  # (the counts are read, not one value)


def test_count_table_builds_each_block_once_and_falls_back_to_the_scalar():
    from sim.cost_model.count_table import CountTable

    built = []

    def block(counts):
        built.append(int(counts[0]))
        return (counts * 2.0).tolist()

    table = CountTable(block, lambda x: -x)
    assert [table(3.0), table(1023.0), table(1024.0), table(5.0)] == [6.0, 2046.0, 2048.0, 10.0]
    assert built == [0, 1024]  # two blocks of 1,024 counts, each built once
    assert table(2.5) == -2.5 and table(float(CountTable.MAX)) == -float(CountTable.MAX)
    assert built == [0, 1024]
