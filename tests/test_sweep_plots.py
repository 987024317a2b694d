"""Figures of servesim sweep (sim/sweep/sweep_plots.py): the x-axis choice, the lines
and their labels, the split of many lines into files, and the CLI hook (files written,
--no-plots, a sweep with no ok point). Simulations use the frozen tiny test model and
GPU (tests/data), 20 requests per point."""

from __future__ import annotations

import pandas as pd
import yaml

from sim.sweep.sweep_plots import (MAX_LINES, _caption, _log_if_wide, choose_x, fmt_value, groups, line_label,
                                   plan_figures, short_key, write_sweep_figures)

from test_sweep import BASE

PNG = b"\x89PNG\r\n\x1a\n"
AXES4 = ["hardware", "tensor_parallel_size", "scheduler", "workload.request_rate"]


def table(rows: list[dict]) -> pd.DataFrame:
    """Result rows with the metrics the figures read (values from the row's index)."""
    out = []
    for i, r in enumerate(rows):
        r = {"point_id": f"p{i}", "status": "ok", **r}
        if r["status"] == "ok":
            r.update(median_ttft_ms=10.0 + i, p99_ttft_ms=20.0 + i, median_tpot_ms=5.0, p99_tpot_ms=6.0,
                     output_throughput=100.0 * (i + 1), request_throughput=1.0 + i)
        out.append(r)
    return pd.DataFrame(out)


def grid(**axes) -> pd.DataFrame:
    """The cross product of ``axes`` (first slowest) as ok rows."""
    import itertools

    keys = list(axes)
    return table([dict(zip(keys, combo)) for combo in itertools.product(*axes.values())])


# ------------------------------------------------------------------ x axis

def test_the_request_rate_is_x_even_beside_an_axis_with_more_values():
    df = grid(max_num_seqs=[8, 16, 32, 64], **{"workload.request_rate": [1, 2]})
    assert choose_x(df, ["max_num_seqs", "workload.request_rate"]) == "workload.request_rate"


def test_else_the_numeric_axis_with_the_most_values_and_never_a_name():
    df = grid(hardware=["a", "b", "c", "d", "e"], tensor_parallel_size=[1, 2], max_num_seqs=[8, 16, 32])
    assert choose_x(df, ["hardware", "tensor_parallel_size", "max_num_seqs"]) == "max_num_seqs"
    # a tie: the first in the sweep file's order
    df = grid(tensor_parallel_size=[1, 2], max_num_seqs=[8, 16])
    assert choose_x(df, ["tensor_parallel_size", "max_num_seqs"]) == "tensor_parallel_size"
    assert choose_x(df, ["max_num_seqs", "tensor_parallel_size"]) == "max_num_seqs"


def test_no_numeric_axis_with_two_values_means_the_bar_chart():
    # booleans, null (= the default) and names are not numbers; a one-value numeric axis is no x
    df = grid(enable_prefix_caching=[True, False], scheduler=["chunked", "mixed"], max_num_seqs=[8])
    assert choose_x(df, ["enable_prefix_caching", "scheduler", "max_num_seqs"]) is None
    df = grid(max_num_batched_tokens=[2048, None, 8192])
    assert choose_x(df, ["max_num_batched_tokens"]) is None
    # the request rate is x only where it varies among the ok points
    df = table([{"workload.request_rate": 1, "max_num_seqs": 8}, {"workload.request_rate": 2, "max_num_seqs": 16},
                {"workload.request_rate": 2, "max_num_seqs": 32, "status": "infeasible"}])
    ok = df[df["status"] == "ok"]
    assert choose_x(ok, ["workload.request_rate", "max_num_seqs"]) == "workload.request_rate"
    assert choose_x(ok.iloc[1:], ["workload.request_rate", "max_num_seqs"]) is None


# ------------------------------------------------------------------ lines

def test_one_line_per_combination_of_the_other_axes_with_short_labels():
    df = grid(hardware=["h100_sxm"], tensor_parallel_size=[2, 4], scheduler=["chunked", "mixed"],
              **{"workload.request_rate": [1, 2, 3]})
    df["config.model"] = "llama-3.1-70b"
    axes = ["hardware", "tensor_parallel_size", "scheduler", "workload.request_rate"]
    plan = plan_figures(df, axes)
    assert plan.x == "workload.request_rate"
    assert plan.line_keys == ["tensor_parallel_size", "scheduler"] and plan.facet_keys == []
    assert plan.fixed == ["llama-3.1-70b", "h100_sxm"]  # one model, one GPU: the title's
    lines = groups(df, plan.line_keys)
    assert [line_label(plan.line_keys, c, axes) for c, _ in lines] == [
        "tp=2, scheduler=chunked", "tp=2, scheduler=mixed", "tp=4, scheduler=chunked", "tp=4, scheduler=mixed"]
    assert all(len(rows) == 3 for _, rows in lines)
    assert line_label(["max_num_batched_tokens", "gpu_memory_utilization"], (None, 0.85), axes) == \
        "max_num_batched_tokens=default, gpu_mem_util=0.85"
    # a Hub id stays whole; a config file by its Hub id (the cache's layout) or its name
    assert [fmt_value(v) for v in ("meta-llama/Llama-3.1-8B", "/x/models--org--Name-7B/snapshots/abc/config.json",
                                   "tests/data/test_gpu.yaml", 2.50, 4)] == [
        "meta-llama/Llama-3.1-8B", "org/Name-7B", "test_gpu", "2.5", "4"]
    # two keys ending alike keep their paths (less workload.)
    both = ["disaggregation.prefill.tensor_parallel_size", "disaggregation.decode.tensor_parallel_size"]
    assert short_key(both[0], both) == "disaggregation.prefill.tensor_parallel_size"
    assert short_key("workload.max_concurrency", ["workload.max_concurrency"]) == "max_concurrency"


def test_more_than_ten_lines_split_by_the_axis_with_the_fewest_values():
    df = grid(hardware=["h100_sxm", "h200_sxm"], tensor_parallel_size=[1, 2, 4], scheduler=["chunked", "mixed"],
              **{"workload.request_rate": [1, 2]})
    axes = AXES4
    plan = plan_figures(df, axes)
    # 12 lines > 10: hardware and scheduler have 2 values each, hardware comes first
    assert MAX_LINES == 10 and plan.facet_keys == ["hardware"]
    assert plan.line_keys == ["tensor_parallel_size", "scheduler"]
    # a zipped partner of x moves with it: not a line
    zipped = grid(**{"workload.request_rate": [1, 2, 3]}, seed=[0, 1])
    zipped["max_num_seqs"] = zipped["workload.request_rate"] * 8
    plan = plan_figures(zipped, ["workload.request_rate", "max_num_seqs", "seed"],
                        [["workload.request_rate", "max_num_seqs"]])
    assert plan.with_x == ["max_num_seqs"] and plan.line_keys == ["seed"]


def test_files_per_split_and_stale_ones_removed(tmp_path):
    df = grid(hardware=["h100_sxm", "h200_sxm"], tensor_parallel_size=[1, 2, 4], scheduler=["chunked", "mixed"],
              **{"workload.request_rate": [1, 2]})
    paths, notes = write_sweep_figures(df, AXES4, tmp_path)
    assert notes == []
    assert sorted(p.name for p in paths) == [
        "latency_vs_request_rate_hardware_h100_sxm.png", "latency_vs_request_rate_hardware_h200_sxm.png",
        "throughput_vs_request_rate_hardware_h100_sxm.png", "throughput_vs_request_rate_hardware_h200_sxm.png"]
    assert all(p.read_bytes()[:8] == PNG for p in paths)
    small = df[df["hardware"] == "h100_sxm"]  # 6 lines: one file each, the split files of before are gone
    paths, _ = write_sweep_figures(small, AXES4, tmp_path)
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == [
        "latency_vs_request_rate.png", "throughput_vs_request_rate.png"]


def test_bar_chart_without_a_numeric_axis_and_the_caption(tmp_path):
    df = table([{"scheduler": "chunked"}, {"scheduler": "mixed"}, {"scheduler": "continuous", "status": "infeasible"},
                {"scheduler": "static", "status": "failed"}])
    paths, notes = write_sweep_figures(df, ["scheduler"], tmp_path)
    assert [p.name for p in paths] == ["p99_latency_throughput_per_point.png"] and notes == []
    assert _caption(df, 2) == "2 of 4 points drawn; not drawn: 1 infeasible, 1 failed (reasons in results.csv)"


def test_log_scale_only_when_a_panel_spans_more_than_ten_times():
    from sim.sweep.plan_plots import _plt

    plt = _plt()
    fig, ax = plt.subplots()
    assert not _log_if_wide(ax, [10.0, 100.0, float("nan")]) and ax.get_yscale() == "linear"
    assert _log_if_wide(ax, [10.0, 100.5, 0.0]) and ax.get_yscale() == "log"
    plt.close(fig)


def test_a_figure_that_fails_is_a_note(tmp_path, monkeypatch):
    import sim.sweep.sweep_plots as sp

    def broken(*a, **k):
        raise ValueError("no room")

    monkeypatch.setattr(sp, "_draw_lines", broken)
    paths, notes = write_sweep_figures(grid(**{"workload.request_rate": [1, 2]}), ["workload.request_rate"], tmp_path)
    assert paths == [] and notes == ["figure latency_vs_request_rate.png not drawn: ValueError: no room",
                                     "figure throughput_vs_request_rate.png not drawn: ValueError: no room"]


# ------------------------------------------------------------------ the CLI

def _cli(tmp_path, axes: dict, *extra: str, base: dict = BASE):
    import typer
    from typer.testing import CliRunner

    from sim.cli.sweep import sweep

    app = typer.Typer()
    app.command()(sweep)
    app.command()(lambda: None)  # two commands: typer keeps "sweep" as a subcommand name
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"base": {**base, "workload": {**base["workload"], "num_requests": 20}},
                                 "axes": axes, "goodput": ["ttft:1000"]}))
    return CliRunner().invoke(app, ["sweep", str(p), "--out", str(tmp_path / "o"), "--workers", "1", "--quiet",
                                    *extra])


def test_cli_writes_the_figures_and_no_plots_none(tmp_path):
    axes = {"scheduler": ["chunked", "continuous"], "workload.request_rate": [10.0, 100.0]}
    r = _cli(tmp_path, axes)
    assert r.exit_code == 0, r.output
    assert "4 points: 4 ok, 0 infeasible, 0 failed" in r.output
    figs = tmp_path / "o" / "figures"
    for name in ("latency_vs_request_rate.png", "throughput_vs_request_rate.png"):
        assert f"figure: {figs / name}" in r.output
        assert (figs / name).read_bytes()[:8] == PNG
    assert sorted(p.name for p in figs.iterdir()) == ["latency_vs_request_rate.png", "throughput_vs_request_rate.png"]
    df = pd.read_csv(tmp_path / "o" / "results.csv")
    assert df["request_goodput"].notna().all()  # the throughput figure has its goodput panel
    other = tmp_path / "n"
    other.mkdir()
    r = _cli(other, axes, "--no-plots")
    assert r.exit_code == 0, r.output
    assert "figure: " not in r.output and not (other / "o" / "figures").exists()


def test_cli_sweep_with_no_ok_point_notes_it_and_exits_0(tmp_path):
    # 4 KV blocks cannot hold a max_model_len 1024 request: every point is infeasible
    r = _cli(tmp_path, {"seed": [1, 2]}, base={**BASE, "num_gpu_blocks_override": 4})
    assert r.exit_code == 0, r.output
    assert "2 points: 0 ok, 2 infeasible, 0 failed" in r.output
    assert "note: no figures: no point ran ok (2 infeasible; reasons in results.csv)" in r.output
    assert "Traceback" not in r.output and not (tmp_path / "o" / "figures").exists()


def test_title_falls_back_to_the_sweep_base():
    df = grid(**{"workload.request_rate": [1, 2]}, seed=[7])
    assert plan_figures(df, ["workload.request_rate", "seed"], base={"model": "llama-3.1-70b"}).fixed == \
        ["llama-3.1-70b", "seed=7"]
    df["config.model"] = ["a", "b"]  # two models in the table: none named
    assert plan_figures(df, ["workload.request_rate", "seed"], base={"model": "llama-3.1-70b"}).fixed == ["seed=7"]
