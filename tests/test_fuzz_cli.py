"""Property tests (hypothesis, derandomized, a few seconds): bad config values,
``--set`` text, config files and sweep specs give a :class:`ConfigError` naming
the key (and the file), never another exception."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config import SimConfig, build_config
from sim.errors import ConfigError, ServesimError
from sim.workload.config import WorkloadConfig

FUZZ = settings(max_examples=150, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

#: keys fuzzed: every scalar SimConfig key (model and hardware are names looked up
#: when the deployment is built) and the scalar workload keys
TOP_KEYS = [k for k in SimConfig.model_fields if k not in ("workload", "model", "hardware")]
WL_KEYS = ["num_requests", "duration_s", "arrival", "request_rate", "burstiness", "max_concurrency", "max_tokens",
           "num_warmup_requests", "seed", "prefix_chunk_tokens", "speedup", "sample_fraction", "jitter_s",
           "input_len", "output_len", "trace_format", "clip_to_max_model_len"]
KEYS = TOP_KEYS + [f"workload.{k}" for k in WL_KEYS]

values = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-10**20, max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2**63, 1e-300, 1e308, "", "x", "inf", "nan", "-1", "1e9", "true", "chunked",
                     "fcfs", "fp8", "paged", "auto", "output_len", "poisson"]),
    st.text(max_size=8),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(["dist", "value", "low", "high", "mean", "sigma", "x"]),
                    st.one_of(st.integers(-5, 5), st.sampled_from(["fixed", "uniform", "lognormal", "?"])),
                    max_size=3),
)


def _check(e: ServesimError, key: str, source: str) -> None:
    assert isinstance(e, ConfigError), f"{type(e).__name__}: {e}"
    msg = str(e)
    assert source in msg, msg
    leaf = key.split(".")[-1]
    assert leaf in msg, f"{key!r} not named in: {msg}"


def _takes_bools(key: str) -> bool:
    model, name = (WorkloadConfig, key.split(".", 1)[1]) if key.startswith("workload.") else (SimConfig, key)
    return "bool" in str(model.model_fields[name].annotation)


@FUZZ
@given(key=st.sampled_from(KEYS), value=values)
def test_any_value_of_any_key_is_accepted_or_a_config_error_naming_it(key, value):
    """Values as a YAML file or named options give them (already typed). A bool
    for a number is a mistake, never coerced to 0 / 1."""
    try:
        build_config(None, {key: value})
    except ServesimError as e:
        _check(e, key, "--set")
    else:
        assert not (isinstance(value, bool) and not _takes_bools(key)), f"{key}={value!r} accepted"


#: ``--set`` text: what users type, including near-misses of numbers and YAML syntax
set_text = st.one_of(
    st.text(alphabet="0123456789.-+eE_xinfa truel[]{}:,'\"#", max_size=10),
    st.sampled_from([" ", "null", "~", "[]", "{}", "[1, 2]", "{a: 1}", "1_000", "0x10", "1e400", "-inf", ".nan",
                     "yes", "no", "'4'", "\"\"", "4 4", "a: b", "- 1", "!!python/none", "&a 1", "*a"]),
)


@FUZZ
@given(key=st.sampled_from(KEYS), text=set_text)
def test_any_set_text_is_accepted_or_a_config_error_naming_the_key(key, text):
    try:
        build_config(None, {}, [f"{key}={text}"])
    except ServesimError as e:
        _check(e, key, "--set")
    else:
        assert text.strip(), f"--set {key}={text!r} (no value) accepted"


@FUZZ
@given(data=st.dictionaries(st.sampled_from(KEYS), values, min_size=1, max_size=3))
def test_config_files_with_bad_values_name_the_file_and_a_key(data):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "c.yaml"
        p.write_text(yaml.safe_dump(data))
        try:
            build_config(p)
        except ServesimError as e:
            assert isinstance(e, ConfigError), f"{type(e).__name__}: {e}"
            msg = str(e)
            assert str(p) in msg, msg
            assert any(k.split(".")[-1] in msg for k in data), msg


# ------------------------------------------------------------------ sweep specs
numbers = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, 1e-300, 5e-324, 1e308, -1e308]), st.booleans(), st.text(max_size=3))
ranges = st.one_of(
    st.fixed_dictionaries({"start": numbers, "stop": numbers, "step": numbers}),
    st.fixed_dictionaries({"start": numbers, "stop": numbers, "num": numbers}),
    st.fixed_dictionaries({"values": st.one_of(st.lists(numbers, max_size=3), numbers)}),
    st.dictionaries(st.sampled_from(["start", "stop", "step", "num", "values", "x"]), numbers, max_size=3),
    st.lists(numbers, max_size=3), numbers,
)
goodputs = st.one_of(st.none(), numbers, st.text(alphabet="tpoefl:0123456789 .-", max_size=12),
                     st.lists(st.one_of(st.text(alphabet="tpoefl:0123456789.-", max_size=10), numbers), max_size=3),
                     st.dictionaries(st.sampled_from(["ttft", "tpot"]), numbers, max_size=2))


@FUZZ
@given(key=st.sampled_from(["workload.request_rate", "max_num_seqs", "gpu_memory_utilization", "scheduler"]),
       rng=ranges, goodput=goodputs)
def test_sweep_specs_expand_or_give_a_config_error_naming_the_file(key, rng, goodput):
    from sim.sweep.spec import expand_points, parse_sweep

    data = {"axes": {key: rng}}
    if goodput is not None:
        data["goodput"] = goodput
    try:
        points = expand_points(parse_sweep(data, "s.yaml"))
    except ServesimError as e:
        assert isinstance(e, ConfigError), f"{type(e).__name__}: {e}"
        msg = str(e)
        assert msg.startswith("s.yaml: "), msg
        assert f"axes.{key}" in msg or "goodput" in msg or "points" in msg, msg
    else:
        assert points and all(isinstance(p.point_id, str) for p in points)
        for p in points:  # a grid of non-finite numbers from a range would be a bug
            v = p.values[key]
            assert not (isinstance(rng, dict) and "values" not in rng and isinstance(v, float)
                        and not math.isfinite(v)), p.values


def test_workload_keys_fuzzed_exist():
    assert set(WL_KEYS) <= set(WorkloadConfig.model_fields)
