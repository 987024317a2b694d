"""A researcher's policy (README "Adding a scheduling policy"): registered by
name, given the limits of the batching mode it implements (its class's
``chunked_prefill``, not its name), and run in the reference mode unless it
declares ``accelerate_like``."""

import pytest

from sim.config import build_config
from sim.engine.deployment import build_deployment
from sim.runner import run_simulation
from sim.scheduler import ChunkedPrefillScheduler, register_scheduler


class SameAsChunked(ChunkedPrefillScheduler):
    """Changes nothing: must behave exactly as ``chunked``."""


class DeclaredSameAsChunked(ChunkedPrefillScheduler):
    accelerate_like = ChunkedPrefillScheduler


register_scheduler("test_same_as_chunked", SameAsChunked)
register_scheduler("test_declared_same_as_chunked", DeclaredSameAsChunked)

WORKLOAD = {"workload.num_requests": 60, "workload.request_rate": 8.0, "workload.arrival": "poisson",
            "workload.input_len": {"dist": "uniform", "low": 50, "high": 2000},
            "workload.output_len": {"dist": "uniform", "low": 2, "high": 200}}


def test_a_chunked_subclass_gets_chunked_limits():
    # vLLM's chunked budget on an H100 is 8,192; a mode without chunking would raise it
    # to max_model_len (131,072 for Llama-3.1-8B) and size the activation reserve for that
    builtin = build_deployment(build_config(overrides={"scheduler": "chunked"}))
    custom = build_deployment(build_config(overrides={"scheduler": "test_same_as_chunked"}))
    assert custom.cfg.max_num_batched_tokens == builtin.cfg.max_num_batched_tokens == 8192
    assert custom.sizing.num_gpu_blocks == builtin.sizing.num_gpu_blocks


def test_a_subclass_runs_in_the_reference_mode_unless_declared_with_the_same_results():
    ref = run_simulation(build_config(overrides={"scheduler": "chunked", "exact_steps": True, **WORKLOAD}))
    sub = run_simulation(build_config(overrides={"scheduler": "test_same_as_chunked", **WORKLOAD}))
    dec = run_simulation(build_config(overrides={"scheduler": "test_declared_same_as_chunked", **WORKLOAD}))
    assert sub.result.num_events >= sub.result.num_steps  # one event per step: the reference mode
    assert dec.result.num_events < dec.result.num_steps  # merged steps
    for out in (sub, dec):
        assert out.result.num_steps == ref.result.num_steps
        for k, v in ref.result.requests.items():
            assert (out.result.requests[k] == v).all(), k


def test_a_built_in_batching_mode_is_not_replaced_by_a_registration():
    # register_scheduler("chunked", ...) made every chunked run, engine presets included,
    # run the custom policy without a word
    from sim.scheduler.registry import get_scheduler_class

    with pytest.raises(ValueError, match=r"'chunked' is a built-in batching mode .* e.g. 'sameaschunked'"):
        register_scheduler("chunked", SameAsChunked)
    assert get_scheduler_class("chunked") is ChunkedPrefillScheduler
    register_scheduler("chunked", ChunkedPrefillScheduler)  # (itself: nothing changes)
    register_scheduler("test_same_as_chunked", DeclaredSameAsChunked)  # one's own name: again, replaced
    assert get_scheduler_class("test_same_as_chunked") is DeclaredSameAsChunked
    register_scheduler("test_same_as_chunked", SameAsChunked)
