"""SGLang starts with a KV pool smaller than one ``max_model_len`` sequence and
caps each request at it (``request_len_cap`` ``kv_pool``: max_req_len =
min(context_len - 1, pool tokens - 1); prompts over max_req_len - 5 rejected,
max_new_tokens cut to max_req_len - prompt - 1); vLLM refuses such a pool."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from sim.config import build_config
from sim.engine.deployment import build_deployment
from sim.errors import InfeasibleError
from sim.results.metrics import STATUS_FINISHED
from sim.runner import run_simulation
from sched_helpers import make, req

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "fuzz_equivalence.py"
_spec = importlib.util.spec_from_file_location("fuzz_equivalence", _PATH)
fuzz = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("fuzz_equivalence", fuzz)
_spec.loader.exec_module(fuzz)


def test_sglang_caps_qwen3_32b_on_one_h100_at_its_pool_and_vllm_refuses():
    # SGLang's pool here: 0.834 x (79.22 - 1.79) GiB - 61.02 GiB of weights = 14,550 tokens of
    # 262,144 B (tests/test_engine_presets.py): max_req_len = min(40,960 - 1, 14,550 - 1) = 14,549
    dep = build_deployment(build_config(overrides={"model": "qwen3-32b", "hardware": "h100_sxm",
                                                   "engine": "sglang"}))
    assert dep.sizing.num_gpu_blocks == 14_550 and dep.cfg.block_size == 1
    assert dep.sizing.max_req_len == dep.limits.max_req_len == 14_549
    assert dep.limits.max_model_len == 40_960
    with pytest.raises(InfeasibleError, match="one sequence of max_model_len 40960 needs 2560 blocks"):
        build_deployment(build_config(overrides={"model": "qwen3-32b", "hardware": "h100_sxm", "engine": "vllm"}))


def test_the_cap_rejects_long_prompts_and_cuts_max_tokens():
    s = make("chunked", num_gpu_blocks=1000, block_size=4, max_model_len=512, max_req_len=100)
    long = req(1, 96, 10)  # 96 > max_req_input_len 95
    assert not s.add_request(long)
    assert long.reason.startswith("prompt (96) > max_req_input_len (95): the engine caps a request at "
                                  "max_req_len 100 tokens")
    cut = req(2, 90, 50)  # max_tokens 50 -> 100 - 90 - 1 = 9, and so the output
    assert s.add_request(cut) and (cut.max_tokens, cut.num_output_tokens_target) == (9, 9)
    short = req(3, 90, 5, max_tokens=50)  # EOS at 5 comes first: only max_tokens is cut
    assert s.add_request(short) and (short.max_tokens, short.num_output_tokens_target) == (9, 5)
    fits = req(4, 10, 20)
    assert s.add_request(fits) and (fits.max_tokens, fits.num_output_tokens_target) == (20, 20)
    frontend = req(5, 400, 200)  # prompt + max_tokens > max_model_len: the frontend's rule comes first
    assert not s.add_request(frontend) and "> max_model_len (512)" in frontend.reason


@pytest.mark.parametrize("closed", [False, True])
def test_a_capped_sglang_run_is_the_same_in_both_steppings(closed):
    cfg = {"model": "qwen3-32b", "hardware": "h100_sxm", "engine": "sglang", "seed": 5,
           "workload.num_requests": 24, "workload.input_len": {"dist": "uniform", "low": 6000, "high": 15000},
           "workload.output_len": {"dist": "fixed", "value": 3000}}
    if closed:
        cfg["workload.max_concurrency"] = 4
        cfg["workload.arrival"] = None
    else:
        cfg["workload.request_rate"] = 2.0
    cfg = {k: v for k, v in cfg.items() if v is not None}
    res = fuzz.run_pair(cfg)
    assert res["status"] == "ok", res["diffs"]
    out = run_simulation(build_config(overrides=cfg))
    r = out.result.requests
    done = r["status"] == STATUS_FINISHED
    assert (r["num_prompt_tokens"][done] + r["num_output_tokens"][done]).max() <= 14_549 - 1
    assert out.summary["num_rejected"] >= 1  # prompts over 14,544 tokens
    assert any("caps each request at max_req_len 14549" in w for w in out.summary["warnings"])
