"""Streaming in messages of ``stream_interval`` tokens: the frontend FIFO's time
per token (sim/engine/recording.py streamed_token_s), the config keys, the
engines' units (sim/presets/) and the harness recipes that set them."""

from __future__ import annotations

import numpy as np
import pytest

from sim.config import SimConfig, build_config
from sim.engine.recording import streamed_token_s
from sim.errors import ConfigError
from sim.presets import PRESETS
from sim.presets.types import FRONTEND_TOKEN_UNITS
from sim.results.metrics import request_latencies
from test_engine import cfg_for, simulate


def test_each_engine_names_what_its_frontend_cost_is_per():
    units = {name: p.frontend_token_unit.value for name, p in PRESETS.items()}
    assert units == {"sglang": "message", "trtllm": "message", "vllm": "message"}
    assert all(p.frontend_token_unit.value in FRONTEND_TOKEN_UNITS and p.frontend_token_unit.source
               for p in PRESETS.values())


def test_the_fifo_time_per_token_is_one_message_over_the_interval():
    base = {"model": "llama-3.1-8b", "hardware": "h100_sxm", "frontend_token_s": 6e-5}
    sg = SimConfig(**base, engine="sglang", stream_interval=10)
    assert streamed_token_s(sg) == pytest.approx(6e-6, rel=1e-15)
    # TensorRT-LLM: 4 postprocess workers share the messages: 60 us / (20 x 4)
    trt = SimConfig(**base, engine="trtllm", stream_interval=20, num_postprocess_workers=4)
    assert streamed_token_s(trt) == pytest.approx(7.5e-7, rel=1e-15)
    # vLLM: per message too (its per-token detokenize step is a few us of the fitted value)
    assert streamed_token_s(SimConfig(**base, engine="vllm", stream_interval=20)) == pytest.approx(3e-6, rel=1e-15)
    # the default interval leaves the fitted value exactly as it was
    assert streamed_token_s(SimConfig(**base, engine="sglang")) == 6e-5
    assert streamed_token_s(SimConfig(**base, stream_interval=4)) == 1.5e-5  # no engine: per message


def test_a_frontend_that_handles_every_token_ignores_the_interval(monkeypatch):
    """``frontend_token_unit`` ``token``: the fitted time per token whatever the
    interval or the postprocess workers (no built-in engine works this way)."""
    import dataclasses

    from sim.presets.types import Default

    monkeypatch.setitem(PRESETS, "sglang", dataclasses.replace(
        PRESETS["sglang"], frontend_token_unit=Default("token", "test: every token")))
    cfg = SimConfig(model="llama-3.1-8b", hardware="h100_sxm", frontend_token_s=6e-5, engine="sglang",
                    stream_interval=10)
    assert streamed_token_s(cfg) == 6e-5


@pytest.mark.parametrize("kw,match", [
    ({"stream_interval": 0}, r"stream_interval"),
    ({"engine": "vllm", "num_postprocess_workers": 4},
     r"num_postprocess_workers = 4 is TensorRT-LLM's .* engine 'vllm' has no such key"),
    ({"num_postprocess_workers": 2}, r"num_postprocess_workers = 2 is TensorRT-LLM's .* no engine preset is set"),
    ({"disaggregation": {"decode": {"stream_interval": 20}}},
     r"stream_interval: is the deployment's, set it at the top level"),
])
def test_bad_streaming_keys_are_refused_in_one_line(kw, match):
    with pytest.raises(ConfigError, match=match) as e:
        build_config(overrides={"model": "llama-3.1-8b", "hardware": "h100_sxm", **kw})
    assert "\n" not in str(e.value).strip()


def _two_requests(tok: float, interval: int):
    """Two requests sent at t = 0 (prompt 30, 21 output tokens each): one step
    prefills both (their first tokens), then 20 decode steps of 2 sequences
    (~190 us each on the test GPU); no engine preset (the frontend works per message)."""
    cfg = cfg_for(**{"workload.arrival": "inf", "workload.num_requests": 2,
                     "workload.input_len": {"dist": "fixed", "value": 30},
                     "workload.output_len": {"dist": "fixed", "value": 21},
                     "frontend_token_s": tok, "stream_interval": interval})
    _, res, _ = simulate(cfg)
    return res.requests, res


def test_a_two_request_run_sees_its_tokens_after_the_fifo_by_hand():
    engine, _ = _two_requests(0.0, 1)  # the engine's own times: the frontend changes none of them
    first, last = engine["first_token_time_s"], engine["finish_time_s"]
    assert np.all(first == first[0]) and np.all(last == last[0])  # one prefill step, then lock-step decodes
    # the decode steps last ~190 us: (last - first) / 20
    step = (last[0] - first[0]) / 20
    assert 150e-6 < step < 250e-6

    # interval 10, 500 us a message: 50 us a token, 100 us a step of 2 tokens < a step:
    # the FIFO is idle when each step ends; the client sees every token 100 us late
    req, _ = _two_requests(5e-4, 10)
    assert req["first_token_time_s"] == pytest.approx(first + 1e-4, abs=1e-12)
    assert req["finish_time_s"] == pytest.approx(last + 1e-4, abs=1e-12)
    lat = request_latencies(req)
    ref = request_latencies(engine)
    assert lat["tpot_s"] == pytest.approx(ref["tpot_s"], abs=1e-12)

    # interval 1 (one message a token): 1 ms a step > the step: the FIFO never idles after
    # the first tokens; the 21 steps' 2 tokens each leave it at first + 21 x 2 x 500 us
    req1, _ = _two_requests(5e-4, 1)
    assert req1["first_token_time_s"] == pytest.approx(first + 1e-3, abs=1e-12)
    assert req1["finish_time_s"] == pytest.approx(first + 21 * 1e-3, abs=1e-12)
    tpot1 = request_latencies(req1)["tpot_s"]
    assert tpot1 == pytest.approx(np.full(2, 1e-3), abs=1e-12)  # the frontend's pace, not the GPU's


def test_the_harness_recipes_set_the_intervals_they_ran_with():
    from sim.validate.harness import HARNESSES

    h = HARNESSES["inferencemax"]
    row = {"model_path": "openai/gpt-oss-120b", "system": "b200_sxm", "gemm_quant_mode": "nvfp4",
           "tp_size": "4", "concurrency": "64", "attention_dp_size": "1", "mode": "agg",
           "isl": "1024", "osl": "1024"}
    ov = h.recipe_overrides(row, "trtllm")
    assert ov["stream_interval"] == 20 and ov["num_postprocess_workers"] == 4
    ds = {**row, "model_path": "deepseek-ai/DeepSeek-R1", "tp_size": "8"}
    assert h.recipe_overrides({**ds, "gemm_quant_mode": "fp8"}, "sglang")["stream_interval"] == 30
    assert h.recipe_overrides(ds, "sglang")["stream_interval"] == 10  # nvfp4: dsr1_fp4_b200.sh
    assert h.recipe_overrides({**ds, "system": "h200_sxm", "gemm_quant_mode": "fp8"}, "trtllm")[
        "stream_interval"] == 10
    # vLLM: the MiniMax-M2.5 B200 recipes (FP8 from the v0.19.0 image), not gpt-oss's
    assert "stream_interval" not in h.recipe_overrides(row, "vllm")
    mm = {**row, "model_path": "MiniMaxAI/MiniMax-M2.5", "gemm_quant_mode": "fp8"}
    assert h.recipe_overrides({**mm, "backend_version": "0.19.0"}, "vllm")["stream_interval"] == 20
    assert "stream_interval" not in h.recipe_overrides({**mm, "backend_version": "0.17.0"}, "vllm")
    assert h.recipe_overrides({**mm, "gemm_quant_mode": "nvfp4"}, "vllm")["stream_interval"] == 20
    # the aiconfigurator harness (the dense table) sets none
    assert "stream_interval" not in HARNESSES["aic"].recipe_overrides(row, "trtllm")
