"""Built-in workloads, workload files and name resolution (sim/workload/builtin.py)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.workload import (WorkloadConfig, builtin_workload_names, generate_requests, load_workload_dict,
                          resolve_workload, resolve_workload_dict)

EXPECTED = {"default", "chat", "code", "conversation", "summarization"}


def test_builtin_names():
    assert EXPECTED <= set(builtin_workload_names())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_builtin_validates_and_generates(name):
    d = load_workload_dict(name)
    assert "name" not in d and "workload" not in d
    cfg = WorkloadConfig.from_dict(d, source=name)
    specs = generate_requests(WorkloadConfig(name=name), seed=0)
    assert len(specs) == cfg.num_requests + cfg.num_warmup_requests
    assert np.all(np.diff(specs.arrival_time_s) >= 0) and specs.num_prompt_tokens.min() >= 1
    # synthetic built-ins never depend on ../shared being present
    assert cfg.trace is None


def test_default_is_sized_for_one_h100_and_8b():
    cfg = WorkloadConfig.from_dict(load_workload_dict("default"))
    assert cfg.arrival == "poisson" and 4 <= cfg.request_rate <= 8 and cfg.num_requests == 1000
    s = generate_requests(cfg, seed=0)
    assert 1000 <= s.num_prompt_tokens.mean() <= 2000 and 200 <= s.output_len.mean() <= 400


def test_conversation_builtin_shares_prefixes():
    s = generate_requests(WorkloadConfig(name="conversation"), seed=0)
    sys_prompt = s.prefix_keys[0][: 512 // s.prefix_chunk_tokens]
    assert all(k[: len(sys_prompt)] == sys_prompt for k in s.prefix_keys)


def test_unknown_name_lists_valid_ones():
    with pytest.raises(ConfigError) as exc:
        generate_requests(WorkloadConfig(name="chatt"), seed=0)
    msg = str(exc.value)
    assert "'chatt'" in msg and all(n in msg for n in EXPECTED)


def test_malformed_yaml_names_file_and_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("arrival: poisson\nrequest_rate: 4\ninput_len: {dist: fixed, value: 3\nnum_requests: 5\n")
    with pytest.raises(ConfigError) as exc:
        load_workload_dict(str(p))
    assert str(p) in str(exc.value) and ":4:" in str(exc.value) and "malformed YAML" in str(exc.value)


def test_unknown_key_and_bad_value_in_file_name_line(tmp_path):
    p = tmp_path / "w.yaml"
    p.write_text("# comment\nrequest_rate: 4\nnum_request: 5\n")
    with pytest.raises(ConfigError, match=r"w\.yaml:3: workload\.num_request: unknown key"):
        load_workload_dict(str(p))
    p.write_text("request_rate: -4\nnum_requests: 5\n"
                 "input_len: {dist: fixed, value: 3}\noutput_len: {dist: fixed, value: 3}\n")
    with pytest.raises(ConfigError, match=r"w\.yaml:1: .*workload\.request_rate = -4"):
        load_workload_dict(str(p))
    p.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_workload_dict(str(p))


def test_workload_file_nesting_and_relative_paths(tmp_path):
    (tmp_path / "lens.csv").write_text("n\n5\n7\n")
    p = tmp_path / "w.yaml"
    p.write_text("workload:\n  request_rate: 2\n  num_requests: 50\n"
                 "  input_len: {dist: empirical, path: lens.csv, column: n}\n"
                 "  output_len: {dist: fixed, value: 3}\n")
    d = load_workload_dict(str(p))
    assert d["input_len"]["path"] == str(tmp_path / "lens.csv")
    s = generate_requests(WorkloadConfig(name=str(p)), seed=0)
    assert set(s.num_prompt_tokens.tolist()) <= {5, 7} and len(s) == 50


def test_overrides_on_a_named_workload():
    base = WorkloadConfig.from_dict(load_workload_dict("chat"))
    cfg = resolve_workload(WorkloadConfig(name="chat", request_rate=8.0, num_requests=10))
    assert cfg.request_rate == 8.0 and cfg.num_requests == 10 and cfg.input_len == base.input_len
    # partial nested override keeps the rest of the length spec
    d = resolve_workload_dict({"name": "chat", "input_len": {"mean": 3000}})
    assert d["input_len"] == {**load_workload_dict("chat")["input_len"], "mean": 3000}
    # a different dist replaces the spec whole
    cfg = resolve_workload(WorkloadConfig(name="chat", input_len={"dist": "fixed", "value": 9}))
    assert cfg.input_len.dist == "fixed" and cfg.input_len.value == 9
    s = generate_requests(WorkloadConfig(name="code", request_rate=5.0, num_requests=100), seed=0)
    assert s.arrival_time_s[-1] == pytest.approx(100 / 5.0)


def test_another_arrival_on_a_named_workload_drops_its_gamma_shape():
    """'code' has gamma arrivals (burstiness 0.05): setting poisson or inf keeps
    the rest of it and drops the burstiness, unless given again (then it is an error)."""
    assert load_workload_dict("code")["burstiness"] == 0.05
    for arrival in ("poisson", "inf"):
        cfg = resolve_workload(WorkloadConfig(name="code", arrival=arrival))
        assert cfg.arrival == arrival and cfg.burstiness == 1.0
        assert cfg.input_len == WorkloadConfig.from_dict(load_workload_dict("code")).input_len
    assert resolve_workload(WorkloadConfig(name="code", arrival="gamma")).burstiness == 0.05
    with pytest.raises(ValueError, match="burstiness=0.5 applies to arrival: gamma"):
        resolve_workload(WorkloadConfig(name="code", arrival="poisson", burstiness=0.5))


def test_no_workload_keys_means_default():
    cfg = resolve_workload(WorkloadConfig(request_rate=10.0))
    default = WorkloadConfig.from_dict(load_workload_dict("default"))
    assert cfg.request_rate == 10.0 and cfg.input_len == default.input_len
    assert cfg.num_requests == default.num_requests
    s = generate_requests(WorkloadConfig(), seed=0)
    assert len(s) == default.num_requests


def test_name_and_trace_conflict():
    with pytest.raises(ConfigError, match="not both"):
        WorkloadConfig.from_dict({"name": "chat", "trace": "x.csv"})
