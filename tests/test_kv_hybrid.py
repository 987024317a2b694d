"""vLLM's hybrid KV cache manager (sim/kv_cache/groups.py, hybrid.py): a
gpt-oss-like tiny model of 2 full + 2 sliding-window layers (window 32,
block_size 16, one KV head of 64 in bf16: 2 x 64 x 2 = 256 B per token per
layer). Every expected number is worked by hand in the comments."""

import pytest

from sim.config import SimConfig, build_config
from sim.engine.deployment import build_deployment
from sim.errors import InfeasibleError
from sim.hardware.profile import get_hardware
from sim.kv_cache import HybridKVCacheManager, KVCacheManager, kv_cache_groups
from sim.kv_cache.sizing import compute_kv_sizing, kv_report
from sim.model_spec import ModelSpec, get_model
from sim.request import Request, RequestStatus
from sim.runner import accelerated_stepping_supported, make_simulation, make_specs

TINY = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 4,
    "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
    "intermediate_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 1024,
    "max_position_embeddings": 4096, "sliding_window": 32, "torch_dtype": "bfloat16",
    "layer_types": ["sliding_attention", "full_attention"] * 2,
}
MODELS = "../shared/models"


def tiny() -> ModelSpec:
    return ModelSpec.from_hf_config(dict(TINY), name="tiny.json")


def manager(num_gpu_blocks, *, caching=False, mml=1024, mnbt=64):
    return HybridKVCacheManager(num_gpu_blocks, 16, kv_cache_groups(tiny(), block_size=16),
                                enable_prefix_caching=caching, max_model_len=mml, max_num_batched_tokens=mnbt)


def req(rid, prompt, keys=(1000,), chunk=512):
    return Request(rid, 0.0, prompt, 64, prefix_keys=keys, prefix_chunk_tokens=chunk)


def step_decode(kv, r, steps):
    for _ in range(steps):
        r.num_output_tokens += 1
        assert kv.allocate_slots(r, 1) is not None
        r.num_computed_tokens += 1
        kv.check_invariants()


def test_groups_of_the_tiny_model_and_their_page():
    g = kv_cache_groups(tiny(), block_size=16)
    # 2 sliding + 2 full: group_size 2 (max 2 < 1.5 x min 2); the first layer is sliding
    assert [(x.kind, x.num_layers, x.sliding_window) for x in g.groups] == [
        ("sliding_attention", 2, 32), ("full_attention", 2, None)]
    assert g.page_size_bytes == 16 * 256 == 4096
    assert g.block_bytes == 2 * 4096  # one block id: a page in each of the group's 2 layers
    # a 1 GiB budget: 2**30 / 8192 = 131,072 blocks (one pool of 4 layers: 2**30 / 16,384 = 65,536)
    assert g.num_gpu_blocks(2 ** 30) == 131_072
    # one max_model_len 1024 request, max_num_batched_tokens 64: full 1024/16 = 64 blocks,
    # sliding ceil(min(31 + 64, 1024) / 16) + 1 = 6 + 1 = 7
    assert g.blocks_per_request(16, 1024, 64) == 71


def test_grouping_pads_and_refuses_nonuniform_pages():
    # 6 sliding + 2 full: group_size 2, three sliding groups and one full group, no padding
    m = ModelSpec.from_hf_config({**TINY, "num_hidden_layers": 8,
                                  "layer_types": ["sliding_attention"] * 3 + ["full_attention"]
                                  + ["sliding_attention"] * 3 + ["full_attention"]}, name="t.json")
    g = kv_cache_groups(m, block_size=16)
    assert [x.kind for x in g.groups] == ["sliding_attention"] * 3 + ["full_attention"]
    # 5 sliding + 2 full: ceil(5 / 2) = 3 sliding groups, the last with 1 padding layer
    m = ModelSpec.from_hf_config({**TINY, "num_hidden_layers": 7,
                                  "layer_types": ["sliding_attention"] * 5 + ["full_attention"] * 2},
                                 name="t.json")
    g = kv_cache_groups(m, block_size=16)
    assert [x.num_padding_layers for x in g.groups] == [0, 0, 1, 0]
    # only full attention: no groups (one pool), with the reason
    assert not kv_cache_groups(get_model("llama-3.1-8b")).hybrid


def test_blocks_held_by_a_200_token_request_per_group():
    kv = manager(100)
    r = req(1, 200, keys=())
    assert kv.allocate_slots(r, 200) is not None  # the prompt: 13 blocks in each group
    r.num_computed_tokens = 200
    r.status = RequestStatus.RUNNING
    assert kv.num_held_blocks_by_group(r) == [13, 13]
    kv.check_invariants()
    # next step (computed 200): the sliding group drops the blocks before token 200 - 32 + 1 = 169:
    # 169 // 16 = 10 blocks; slots 201 need 13 entries: sliding holds 3, full 13, 16 in all
    step_decode(kv, r, 1)
    assert kv.num_held_blocks_by_group(r) == [3, 13]
    assert kv.num_held_blocks(r) == 16
    assert kv.num_free_blocks == 99 - 16
    assert kv.block_table(r)[0][:10] == [0] * 10  # freed entries are the null block
    # at 208 computed: (208 - 31) // 16 = 11 skipped, 209 slots = 14 entries: still 3 sliding blocks
    step_decode(kv, r, 8)
    assert kv.num_held_blocks_by_group(r) == [3, 14]
    kv.free(r)
    assert kv.num_free_blocks == 99 and kv.num_requests == 0
    kv.check_invariants()


@pytest.mark.parametrize("chunk, usable, ok", [
    # a 64-token chunk takes 4 + 4 blocks, but the whole 200-token sequence must fit:
    # full 13 + sliding min(13, cap 7) = 20 blocks
    (64, 19, False), (64, 20, True),
    # the whole prompt at once takes 13 + 13 = 26 (> 20)
    (200, 25, False), (200, 26, True),
])
def test_admission_at_the_exact_boundary(chunk, usable, ok):
    kv = manager(usable + 1)  # + the null block
    r = req(1, 200, keys=())
    got = kv.allocate_slots(r, chunk, full_sequence_check=True)
    assert (got is not None) == ok
    if not ok:  # no side effects
        assert kv.num_free_blocks == usable and kv.num_requests == 0
    else:
        assert len(got) == 2 * (-(-chunk // 16))


def test_a_running_request_frees_its_window_before_asking_for_more():
    # 16 usable blocks: a 200-token request holds 13 + 13 after its prompt; that fails
    kv = manager(27)
    r = req(1, 200, keys=())
    assert kv.allocate_slots(r, 200) is not None
    r.num_computed_tokens = 200
    # the decode needs no new entry (201 slots in 13 blocks) and frees 10 sliding blocks
    step_decode(kv, r, 1)
    assert kv.num_free_blocks == 26 - 16 == 10
    # at 208 computed the tables grow to 14: two blocks (one per group), from the 10 free
    step_decode(kv, r, 8)
    assert kv.num_free_blocks == 26 - 17 == 9


def test_blocks_conserved_through_many_requests_and_preemption_like_frees():
    kv = manager(64, caching=True)
    reqs = [req(i, 40 + 30 * i) for i in range(5)]
    for r in reqs:
        hits, n = kv.get_computed_blocks(r)
        assert kv.allocate_slots(r, r.num_tokens - n, n, hits) is not None
        r.num_computed_tokens = r.num_tokens
        r.status = RequestStatus.RUNNING
        kv.check_invariants()
    for r in reqs:
        step_decode(kv, r, 20)
    kv.free(reqs[2])  # a preemption
    kv.check_invariants()
    for r in reqs:
        kv.free(r)
    assert kv.num_free_blocks == kv.num_usable_blocks == 63
    kv.check_invariants()


def _prefix_setup(extra_evicted):
    """A (200 prompt tokens) runs 6 decode steps and finishes; a filler then
    takes the never-used blocks, the two partial blocks and ``extra_evicted``
    of A's freed cached blocks (the oldest first: its sliding blocks 9..0),
    then finishes."""
    N = 101  # 100 usable
    kv = manager(N, caching=True)
    a = req(1, 200)
    hits, n = kv.get_computed_blocks(a)
    assert n == 0
    assert kv.allocate_slots(a, 200) is not None
    a.num_computed_tokens = 200
    step_decode(kv, a, 6)  # computed 206: sliding blocks 0..9 freed (hashed: to the tail), 10..12 held
    a.status = RequestStatus.FINISHED
    kv.free(a)  # 13 + 13 blocks used; free queue: 2 partial blocks, 74 untouched, sliding 9..0, 11, 10, full 11..0
    take = 2 + 74 + extra_evicted
    filler = Request(2, 0.0, take // 2 * 16, 1, prefix_keys=(), prefix_chunk_tokens=512)
    assert kv.allocate_slots(filler, take // 2 * 16) is not None
    filler.status = RequestStatus.FINISHED
    kv.free(filler)  # its blocks come back (after evicting A's oldest ones)
    kv.check_invariants()
    return kv


def test_prefix_hit_needs_only_the_sliding_window_blocks():
    # A's sliding blocks 0..9 evicted, 10 and 11 (its window) and full 0..11 still cached:
    # B (same 200 tokens) hits (200 - 1) // 16 = 12 blocks = 192 tokens; ceil(31 / 16) = 2
    # contiguous sliding blocks suffice, the ten before the window are the null block
    kv = _prefix_setup(10)
    b = req(3, 200)
    hits, n = kv.get_computed_blocks(b)
    assert n == 192
    assert hits[0][:10] == [0] * 10 and 0 not in hits[0][10:] and len(hits[0]) == 12
    assert 0 not in hits[1] and len(hits[1]) == 12
    free_before = kv.num_free_blocks
    assert kv.allocate_slots(b, 200 - 192, 192, hits) is not None
    # touched: 2 sliding + 12 full cached blocks leave the free queue; plus one new block per group
    assert kv.num_free_blocks == free_before - 14 - 2
    assert kv.num_held_blocks_by_group(b) == [3, 13]
    kv.check_invariants()


def test_prefix_hit_is_cut_to_the_sliding_groups():
    # the window blocks 10 and 11 evicted too: no sliding run from block 0 -> no hit at all,
    # although the full-attention group alone would hit 12 blocks
    kv = _prefix_setup(12)
    hits, n = kv.get_computed_blocks(req(3, 200))
    assert (hits, n) == ([], 0)


H100 = get_hardware("h100_sxm")


def _gpt_oss(name, **kw):
    return SimConfig(model=f"{MODELS}/openai--{name}_config.json", hardware=kw.pop("hardware", "h100_sxm"),
                     engine="vllm", max_model_len=131072, **kw)


def test_gpt_oss_120b_at_131072_tokens_on_one_h100():
    """vLLM serves gpt-oss-120b on one H100 at its full 131,072 context
    (github.com/vllm-project/recipes OpenAI/GPT-OSS.md; OpenAI cookbook
    run-vllm: "can fit on a single H100"). Hand computed: 2 groups of 18
    layers, page 16 x 2 x 8 x 64 x 2 B = 32,768 B, block 18 x 32,768 =
    589,824 B; one 131,072-token request: 8,192 full blocks + sliding
    ceil(min(127 + 8,192, 131,072) / 16) + 1 = 520 + 1 = 521."""
    dep = build_deployment(_gpt_oss("gpt-oss-120b"))
    s = dep.sizing
    assert s.hybrid and s.block_bytes == 589_824 and s.blocks_per_request == 8_713
    available = (H100.memory_bytes * s.gpu_memory_utilization - s.weight_bytes_per_rank
                 - s.activation_bytes_estimate)
    assert s.num_gpu_blocks == int(available // 32_768 // 18)
    assert s.max_concurrency == pytest.approx(s.num_gpu_blocks / 8_713)
    rep = kv_report(s)
    assert rep["kv_cache_groups"] == 2 and rep["layers_per_kv_cache_group"] == 18
    assert rep["kv_cache_group_0"] == "sliding_attention (window 128)"
    assert rep["kv_cache_group_1_blocks_at_max_model_len"] == 8_192
    # one block table for every layer (vLLM --disable-hybrid-kv-cache-manager): a request
    # needs 8,192 blocks of 36 layers (16 x 36 x 2,048 B = 1,179,648 B each): about one
    # such request fits at vLLM 0.24's defaults (non-torch memory 0.16 GiB since the
    # memory snapshot follows the CUDA context and NCCL: sim/kv_cache/sizing.py), half of
    # what the hybrid pool holds ...
    one = build_deployment(_gpt_oss("gpt-oss-120b", disable_hybrid_kv_cache_manager=True)).sizing
    assert not one.hybrid and one.block_bytes == 1_179_648 and one.blocks_per_request == 8_192
    avail1 = (H100.memory_bytes * one.gpu_memory_utilization - one.weight_bytes_per_rank
              - one.activation_bytes_estimate)
    assert one.num_gpu_blocks == int(avail1 // 1_179_648)
    assert 1 < one.max_concurrency < s.max_concurrency / 1.8
    # ... and none at gpu_memory_utilization 0.9 (vLLM 0.11)
    with pytest.raises(InfeasibleError):
        build_deployment(_gpt_oss("gpt-oss-120b", disable_hybrid_kv_cache_manager=True, engine_version="0.11.0"))


def test_other_engines_keep_the_conservative_pool_and_say_so():
    dep = build_deployment(_gpt_oss("gpt-oss-20b", engine_version=None).model_copy(
        update={"engine": None, "scheduler": "prefill_first"}))
    assert not dep.sizing.hybrid and isinstance(dep.make_kv_manager(), KVCacheManager)
    assert "prefill_first" in kv_report(dep.sizing)["sliding_attention_counted_at"]


def test_hybrid_runs_in_reference_mode_and_conserves_blocks():
    cfg = build_config(None, {"model": f"{MODELS}/openai--gpt-oss-20b_config.json", "hardware": "h100_sxm",
                              "engine": "vllm", "max_model_len": 4096, "max_num_seqs": 64},
                       ["workload.num_requests=60", "workload.arrival=poisson", "workload.request_rate=50",
                        "workload.input_len=600", "workload.output_len=80"])
    dep = build_deployment(cfg)
    assert dep.sizing.hybrid and not accelerated_stepping_supported(dep)
    assert isinstance(dep.make_kv_manager(), HybridKVCacheManager)
    sim = make_simulation(dep, make_specs(dep))
    assert sim.stepping is None  # declared: per-group tables are not represented by merged steps
    res = sim.run()  # raises if a block is still held at the end
    assert int(res.requests["num_output_tokens"].sum()) == 60 * 80
    # a single-kind model keeps the accelerated stepping
    llama = build_deployment(SimConfig(model="llama-3.1-8b", hardware="h100_sxm", engine="vllm"))
    assert accelerated_stepping_supported(llama) and not llama.sizing.hybrid


def test_a_model_of_sliding_layers_only_is_one_sliding_group():
    # every layer sliding (a Mistral-7B-v0.1-like config: sliding_window, no layer_types):
    # one group of 4 layers, which still frees the blocks outside the window (vLLM's
    # UnitaryKVCacheCoordinator over a SlidingWindowManager)
    m = ModelSpec.from_hf_config({**TINY, "layer_types": None}, name="t.json")
    g = kv_cache_groups(m, block_size=16)
    assert [(x.kind, x.num_layers) for x in g.groups] == [("sliding_attention", 4)]
    kv = HybridKVCacheManager(100, 16, g, enable_prefix_caching=True, max_model_len=1024,
                              max_num_batched_tokens=64)
    a = req(1, 200)
    assert kv.allocate_slots(a, 200) is not None
    a.num_computed_tokens = 200
    step_decode(kv, a, 1)
    assert kv.num_held_blocks_by_group(a) == [3]
    # the same prompt hits 12 blocks: the 2 window blocks, 10 null ones before them
    hits, n = kv.get_computed_blocks(req(2, 200))
    assert n == 192 and hits[0].count(0) == 10


def test_reference_stepping_is_enforced_and_the_vllm_flag_rendered():
    from sim.accelerated import AcceleratedStepping
    from sim.engine.simulation import Simulation
    from sim.launch import launch_command
    cfg = build_config(None, {"model": f"{MODELS}/openai--gpt-oss-20b_config.json", "hardware": "h100_sxm",
                              "engine": "vllm", "max_model_len": 4096}, ["workload.num_requests=2"])
    dep = build_deployment(cfg)
    with pytest.raises(ValueError, match="reference stepping"):
        Simulation(dep, make_specs(dep), stepping=AcceleratedStepping)
    off = build_deployment(cfg.model_copy(update={"disable_hybrid_kv_cache_manager": True}))
    assert not off.sizing.hybrid and accelerated_stepping_supported(off)
    assert "--disable-hybrid-kv-cache-manager" in launch_command(off.cfg.model_dump(mode="json")).argv
    assert "--disable-hybrid-kv-cache-manager" not in launch_command(dep.cfg.model_dump(mode="json")).argv


# ------------------------------------------------------------------ linear attention (Gated DeltaNet)
#: 3 linear-attention layers + 1 full: per layer a state of conv 3 x (2 x 2 x 16 + 4 x 64) x 2 B = 1,920 B
#: + recurrent 4 x 16 x 64 x 4 B (fp32) = 16,384 B = 18,304 B; attention 256 B per token per layer
TINY_GDN = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "num_hidden_layers": 4,
    "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
    "intermediate_size": 512, "vocab_size": 1024, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
    "layer_types": ["linear_attention"] * 3 + ["full_attention"], "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_value_head_dim": 64, "mamba_ssm_dtype": "float32",
}


def test_linear_attention_state_pages_and_the_raised_block_size():
    from sim.kv_cache.groups import attention_block_size
    m = ModelSpec.from_hf_config(dict(TINY_GDN), name="gdn.json")
    assert m.state_bytes_per_sequence() == 3 * 18_304
    # vLLM: 16 x ceil(18,304 / (16 x 256)) = 16 x 5 = 80 tokens, page 80 x 256 = 20,480 B >= 18,304
    assert attention_block_size(m, block_size=16) == 80
    assert attention_block_size(m, block_size=96) == 96  # a larger block size is kept
    g = kv_cache_groups(m, block_size=80, linear_state_pages=True)
    # 3 linear + 1 full: group_size 1 (3 >= 1.5 x 1): three state groups and one attention group
    assert [(x.kind, x.num_layers, x.state_bytes) for x in g.groups] == [
        ("linear_attention", 1, 18_304)] * 3 + [("full_attention", 1, 0)]
    assert g.page_size_bytes == 20_480 and g.num_gpu_blocks(2 ** 30) == 52_428  # 2**30 / 20,480 = 52,428.8
    # one 1,024-token request: ceil(1024 / 80) = 13 attention blocks + one state page per linear group
    assert g.blocks_per_request(80, 1024, 64) == 16
    # without linear_state_pages (prefix caching on): no groups, the state stays reserved
    assert not kv_cache_groups(m, block_size=16).hybrid
    with pytest.raises(Exception, match="block_size"):
        compute_kv_sizing(m, get_hardware("h100_sxm"), block_size=16, max_model_len=1024, hybrid_kv_cache=True)


def gdn_manager(num_gpu_blocks):
    m = ModelSpec.from_hf_config(dict(TINY_GDN), name="gdn.json")
    return HybridKVCacheManager(num_gpu_blocks, 80, kv_cache_groups(m, block_size=80, linear_state_pages=True),
                                max_model_len=1024, max_num_batched_tokens=64)


def test_a_request_holds_one_state_page_per_linear_group():
    kv = gdn_manager(50)
    r = req(1, 200, keys=())
    assert kv.allocate_slots(r, 200) is not None
    r.num_computed_tokens = 200
    # attention ceil(200 / 80) = 3 blocks; each linear group one page
    assert kv.num_held_blocks_by_group(r) == [1, 1, 1, 3]
    assert r.kv_capacity == 240
    step_decode(kv, r, 41)  # the step at computed 240 needs 241 slots: a 4th attention block, still one page each
    assert kv.num_held_blocks_by_group(r) == [1, 1, 1, 4]
    kv.free(r)
    assert kv.num_free_blocks == 49
    kv.check_invariants()


@pytest.mark.parametrize("usable, ok", [(5, False), (6, True)])
def test_linear_admission_at_the_exact_boundary(usable, ok):
    # a 200-token request admitted with an 80-token chunk: its whole sequence needs 3 attention
    # blocks + 3 state pages = 6
    kv = gdn_manager(usable + 1)
    assert (kv.allocate_slots(req(1, 200, keys=()), 80, full_sequence_check=True) is not None) == ok


def test_linear_deployment_raises_block_size_unless_prefix_caching(tmp_path):
    import json
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_GDN))
    base = {"model": str(path), "hardware": "h100_sxm", "engine": "vllm", "max_model_len": 1024}
    on = build_deployment(build_config(None, base))  # vLLM preset: prefix caching on
    assert not on.sizing.hybrid and on.cfg.block_size == 16
    assert on.sizing.state_bytes_reserved == 54_912 * on.cfg.max_num_seqs
    assert "align" in kv_report(on.sizing)["linear_attention_state_reserved_for"]
    off = build_deployment(build_config(None, {**base, "enable_prefix_caching": False}))
    assert off.sizing.hybrid and off.cfg.block_size == off.limits.block_size == 80
    assert off.sizing.state_bytes_reserved == 0 and off.sizing.blocks_per_request == 13 + 3
    assert isinstance(off.make_kv_manager(), HybridKVCacheManager)


@pytest.mark.parametrize("caching", [False, True])
def test_skipping_no_op_decode_calls_is_exact(caching, monkeypatch):
    """kv_capacity marks the next token count at which allocate_slots does
    anything (a block to take, a sliding block to free, a block to hash): a
    scheduler skipping the calls below it gives bit-identical results to one
    calling it every decode step (vLLM's), here with preemptions (a small
    pool) and prefix hits (one shared system prompt)."""
    import numpy as np
    cfg = build_config(None, {"model": f"{MODELS}/openai--gpt-oss-20b_config.json", "hardware": "h100_sxm",
                              "engine": "vllm", "max_model_len": 2048, "max_num_seqs": 32,
                              "num_gpu_blocks_override": 700, "enable_prefix_caching": caching},
                       ["workload.num_requests=80", "workload.arrival=poisson", "workload.request_rate=40",
                        "workload.input_len=500", "workload.output_len=300",
                        "workload.shared_prefix.prefix_len=256"])
    dep = build_deployment(cfg)
    runs = []
    for skip in (True, False):
        monkeypatch.setattr(HybridKVCacheManager, "decode_skips_allocation", skip)
        sim = make_simulation(dep, make_specs(dep))
        res = sim.run()
        runs.append(res)
    a, b = runs
    assert int(a.requests["num_preemptions"].sum()) > 0
    if caching:
        assert int(a.requests["num_cached_tokens"].sum()) > 0
    for k in a.requests:
        assert np.array_equal(a.requests[k], b.requests[k]), k
    assert a.num_steps == b.num_steps
