"""TensorRT-LLM's attention-DP context balancing (``attention_dp_config``) and the
engines' token padding across the ranks of a DP group."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from sim.config import build_config
from sim.engine.deployment import build_deployment
from sim.engine.dp_group import AttentionDpBalance
from sim.errors import ConfigError
from sim.results.metrics import request_latencies
from sim.runner import run_simulation
from sim.validate.harness import HARNESSES, RecipeArgs, harness_from_dict

GPU = "h100_sxm"
MOE = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 1024,
    "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
    "head_dim": 128, "vocab_size": 32000, "max_position_embeddings": 4096, "num_local_experts": 64,
    "num_experts_per_tok": 2, "torch_dtype": "bfloat16",
}


@pytest.fixture(scope="module")
def moe_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("moe") / "config.json"
    p.write_text(json.dumps(MOE))
    return str(p)


def _cfg(path, **kw):
    base = {"model": path, "hardware": GPU, "max_num_batched_tokens": 256, "max_num_seqs": 16,
            "workload.num_requests": 1, "workload.arrival": "inf",
            "workload.input_len": {"dist": "fixed", "value": 100},
            "workload.output_len": {"dist": "fixed", "value": 5}}
    base.update(kw)
    return build_config(overrides=base)


def _ranks(*counts, max_num_seqs=4):
    """Fake ranks: (running, waiting) per rank."""
    lim = SimpleNamespace(max_num_seqs=max_num_seqs)
    return [SimpleNamespace(scheduler=SimpleNamespace(num_running=r, num_waiting=w, limits=lim))
            for r, w in counts]


# -- the balancing rule, step by step ---------------------------------------------------
def test_a_lone_context_waits_for_the_timeout_then_goes():
    bal = AttentionDpBalance(timeout_iters=3, batching_wait_iters=0)
    ranks = _ranks((2, 1), (2, 0))  # rank 0 has a context waiting, rank 1 none; both generate
    assert [bal.hold(ranks) for _ in range(3)] == [True, True, False]  # held 2 steps, the 3rd admits
    assert bal.waiting_iters == 0
    assert [bal.hold(ranks) for _ in range(3)] == [True, True, False]  # and the cycle repeats


def test_the_counter_runs_without_contexts_too():
    bal = AttentionDpBalance(timeout_iters=3, batching_wait_iters=0)
    idle = _ranks((2, 0), (2, 0))
    assert bal.hold(idle) is True and bal.waiting_iters == 1  # nothing to hold, but the count advances
    assert bal.hold(idle) is True and bal.waiting_iters == 2
    # a context arriving now goes at the next step: the count reaches the timeout
    assert bal.hold(_ranks((2, 1), (2, 0))) is False and bal.waiting_iters == 0


def test_every_rank_ready_goes_after_the_batching_wait():
    bal = AttentionDpBalance(timeout_iters=50, batching_wait_iters=2)
    ready = _ranks((2, 1), (1, 3))
    assert [bal.hold(ready) for _ in range(4)] == [True, True, False, True]
    bal = AttentionDpBalance(timeout_iters=50, batching_wait_iters=0)
    assert bal.hold(ready) is False


def test_a_rank_without_generation_requests_releases_at_once():
    bal = AttentionDpBalance(timeout_iters=60, batching_wait_iters=10)
    # rank 1 only has a context: no generation request, so nothing is held
    assert bal.hold(_ranks((2, 1), (0, 1))) is False
    # every rank ready but not every rank generating: no batching wait either
    assert bal.hold(_ranks((0, 1), (0, 1))) is False
    # an empty rank next to a busy one counts as generating (TensorRT-LLM's dummy request)
    assert bal.hold(_ranks((2, 1), (0, 0))) is True


def test_a_full_rank_holds_the_others():
    bal = AttentionDpBalance(timeout_iters=60, batching_wait_iters=0)
    # rank 1 runs max_num_seqs requests: no free slot, so rank 0's context waits as well
    assert bal.hold(_ranks((1, 1), (4, 1), max_num_seqs=4)) is True


# -- token padding across the ranks ----------------------------------------------------
def test_trtllm_sizes_the_experts_by_the_real_tokens(moe_path):
    trt = build_deployment(_cfg(moe_path, engine="trtllm", data_parallel_size=2,
                                enable_expert_parallel=True)).cost_model
    assert trt.dp_token_padding == "sum"
    a, b = ([1], [100]), ([64], [0])
    group = trt.dp_group_step_s([a, b])
    r = trt._routed
    own_a = trt.attention_s(*a) + trt._linear_s(1.0, 1.0) - r(1.0)
    own_b = trt.attention_s(*b) + trt._linear_s(64.0, 1.0) - r(64.0)
    assert group == pytest.approx(max(own_a, own_b) + r(65 / 2))
    # vLLM pads rank 0 to 64 tokens: the experts see 2 x 64 rows, rank 0 its dense layers at 64
    padded = max(trt.attention_s(*a) + trt._linear_s(64.0, 1.0), trt.attention_s(*b) + trt._linear_s(64.0, 1.0))
    assert group < padded
    # equal ranks: padding changes nothing
    even = trt.dp_group_step_s([b, b])
    assert even == pytest.approx(trt.attention_s(*b) + trt._linear_s(64.0, 1.0))


def test_sglang_pads_decode_only_steps_when_that_moves_less(moe_path):
    sg = build_deployment(_cfg(moe_path, engine="sglang", data_parallel_size=4,
                               enable_expert_parallel=True)).cost_model
    assert sg.dp_token_padding == "sum_in_prefill"
    r = sg._routed
    one, many = ([1], [50]), ([1] * 20, [50] * 20)

    def own(b, t):
        return sg.attention_s(*b) + sg._linear_s(float(t), float(len(b[0]))) - r(float(t))

    # 1 + 1 + 1 + 20 = 23 tokens; 2 x 23 < 20 x 4: the real tokens (SUM_LEN)
    got = sg.dp_group_step_s([one, one, one, many])
    assert got == pytest.approx(max(own(one, 1), own(many, 20)) + r(23 / 4))
    # 4 x 20 decodes: 2 x 80 > 20 x 4: padded (MAX_LEN), the same as the sum here
    got = sg.dp_group_step_s([many] * 4)
    assert got == pytest.approx(sg.attention_s(*many) + sg._linear_s(20.0, 20.0))
    # a prefill in the step: always the real tokens
    pre = ([64], [0])
    got = sg.dp_group_step_s([one, pre])
    assert got == pytest.approx(max(own(one, 1), own(pre, 64)) + r(65 / 4))


# -- config -----------------------------------------------------------------------------
@pytest.mark.parametrize("kw, msg", [
    ({"engine": "vllm", "data_parallel_size": 2, "enable_expert_parallel": True},
     "attention_dp_enable_balance: true is TensorRT-LLM's attention_dp_config; engine is vllm"),
    ({"engine": "trtllm"}, "attention_dp_enable_balance: true needs attention data parallelism"),
    ({"engine": "trtllm", "data_parallel_size": 2, "enable_expert_parallel": True, "scheduler": "chunked"},
     "is modelled with scheduler: mixed"),
])
def test_balance_where_it_is_not_modelled_is_refused(moe_path, kw, msg):
    with pytest.raises(ConfigError) as e:
        build_deployment(_cfg(moe_path, attention_dp_enable_balance=True, **kw))
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_balanced_groups_hold_contexts_and_lose_nothing(moe_path):
    kw = dict(engine="trtllm", data_parallel_size=2, enable_expert_parallel=True, seed=3,
              **{"workload.num_requests": 60, "workload.arrival": "poisson", "workload.request_rate": 40.0,
                 "workload.input_len": {"dist": "uniform", "low": 20, "high": 200},
                 "workload.output_len": {"dist": "uniform", "low": 20, "high": 60}})
    off = run_simulation(_cfg(moe_path, **kw))
    on = run_simulation(_cfg(moe_path, attention_dp_enable_balance=True, attention_dp_timeout_iters=20,
                             attention_dp_batching_wait_iters=0, **kw))
    again = run_simulation(_cfg(moe_path, attention_dp_enable_balance=True, attention_dp_timeout_iters=20,
                                attention_dp_batching_wait_iters=0, **kw))
    for out in (off, on):
        assert out.summary["completed"] == 60
    ttft = {k: request_latencies(o.result.requests)["ttft_s"] for k, o in (("off", off), ("on", on),
                                                                          ("again", again))}
    assert np.array_equal(ttft["on"], ttft["again"])  # deterministic
    # held contexts start later: the mean TTFT grows; every output token is still generated
    assert ttft["on"].mean() > ttft["off"].mean()
    assert on.result.requests["num_output_tokens"].sum() == off.result.requests["num_output_tokens"].sum()


# -- the recipe's attention-DP branch ---------------------------------------------------
def test_recipe_args_branch_on_attention_dp():
    r = RecipeArgs("deepseek-ai/DeepSeek-*", ("b200_sxm",), "trtllm", {"attention_dp_enable_balance": True},
                   attention_dp=True)
    row = {"model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm", "tp_size": "8",
           "concurrency": "256", "isl": "1024", "osl": "1024", "mode": "agg"}
    assert r.matches({**row, "attention_dp_size": "8"}, "trtllm")
    assert not r.matches({**row, "attention_dp_size": "1"}, "trtllm")
    assert not r.matches(row, "trtllm")  # not recorded: no attention DP
    ours = HARNESSES["inferencemax"].recipe_overrides({**row, "attention_dp_size": "8"}, "trtllm")
    assert ours["attention_dp_enable_balance"] is True and ours["attention_dp_timeout_iters"] == 60
    assert "attention_dp_enable_balance" not in HARNESSES["inferencemax"].recipe_overrides(
        {**row, "attention_dp_size": "1"}, "trtllm")


def test_recipe_args_attention_dp_in_yaml():
    base = {"name": "mine", "recipe_args": [{"model": "x/*", "systems": ["b200_sxm"], "engine": "trtllm",
                                             "args": {"attention_dp_enable_balance": True},
                                             "attention_dp": True}]}
    h = harness_from_dict(base, "mine.yaml")
    assert h.recipe_args[0].attention_dp is True
    base["recipe_args"][0]["attention_dp"] = "yes"
    with pytest.raises(ConfigError, match=r"mine.yaml: recipe_args\[0\].attention_dp: true, false or null"):
        harness_from_dict(base, "mine.yaml")
