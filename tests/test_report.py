"""The compare report (sim/compare/report.py, sim/compare/plots.py, sim/compare/variant_data.py) on
small hand-built variants."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.compare.plots import FIGURES, breakdown_row, weighted_cdf, weighted_tail
from sim.compare.report import write_compare_report
from sim.compare.variant_data import VariantData, step_timeseries
from test_diagnosis import chunked, continuous_long, make_requests

FIGURE_NAMES = ("ttft_cdf.png", "itl_cdf.png", "latency_percentiles.png", "timeline.png", "latency_breakdown.png")


def _summary(v: VariantData, scale: float, scheduler: str, budget: int) -> dict:
    s = {"completed": 200, "duration": 20.0, "request_throughput": 10.0 / scale, "output_throughput": 2000.0 / scale,
         "request_goodput": None, "num_rejected": 0, "num_preemptions": 0, "prefix_cache_hit_rate": 0.0,
         "mean_kv_cache_usage": 0.5, "max_kv_cache_usage": 0.5, "mean_queue_ms": 5.0, "p99_queue_ms": 5.0,
         "kv_reserved_unused_fraction": float("nan"), "workload_source": "synthetic",
         "config": {"scheduler": scheduler, "model": "llama-3.1-8b", "hardware": "h100_sxm",
                    "max_num_batched_tokens": budget, "workload": {"name": "x"}}}
    for key, base in (("ttft", 65.0), ("tpot", 10.0), ("itl", 9.0), ("e2el", 2065.0)):
        for p, f in (("mean", 1.1), ("median", 1.0), ("std", 0.2), ("p90", 3.0), ("p99", 10.0)):
            s[f"{p}_{key}_ms"] = base * f * scale
    return s


@pytest.fixture(scope="module")
def variants() -> dict[str, VariantData]:
    a, b = continuous_long(), chunked(2048)
    a.name, b.name = "cont", "chunk-2048"
    a.summary = _summary(a, 2.0, "continuous", 8192)
    b.summary = _summary(b, 1.0, "chunked", 2048)
    return {"cont": a, "chunk-2048": b}


@pytest.fixture(scope="module")
def report(tmp_path_factory, variants):
    out = tmp_path_factory.mktemp("cmp")
    path = write_compare_report(out, variants, title="Policy comparison",
                                context={"workload": "azure code trace", "num_requests": 200, "request_rate": 10})
    return out, path


def test_writes_every_figure(report):
    out, _ = report
    for name in FIGURE_NAMES:
        data = (out / name).read_bytes()
        assert len(data) > 5000 and data[:8] == b"\x89PNG\r\n\x1a\n", name
    assert set(FIGURES) == set(FIGURE_NAMES)


def test_comparison_csv_one_row_per_variant(report):
    out, _ = report
    df = pd.read_csv(out / "comparison.csv")
    assert list(df["variant"]) == ["cont", "chunk-2048"]
    assert list(df["config.scheduler"]) == ["continuous", "chunked"]
    assert list(df["config.max_num_batched_tokens"]) == [8192, 2048]
    assert "config" not in df.columns and "config.workload" not in df.columns  # nested config dropped
    assert df.loc[0, "p99_ttft_ms"] == pytest.approx(65.0 * 10 * 2)


def test_report_md_names_variants_embeds_figures_and_explains(report):
    _, path = report
    text = path.read_text()
    assert path.name == "report.md" and text.startswith("# Policy comparison")
    assert "llama-3.1-8b" in text and "h100_sxm" in text and "azure code trace" in text and "200 requests" in text
    for name in ("cont", "chunk-2048"):
        assert f"| {name} |" in text and f"### {name}" in text
    for name in FIGURE_NAMES:
        assert f"]({name})" in text
    assert "## What wins" in text
    # chunk-2048's p99 TTFT 650 ms vs cont's 1,300 ms
    assert "p99 TTFT: chunk-2048 wins with 650 ms, 2.0× lower than cont (1,300 ms)." in text
    diag = text.split("## Diagnosis")[1].split("## Figures")[0]
    cont, chunk = diag.split("### chunk-2048")
    assert "Prefill interference" in cont and "Prefill interference" not in chunk
    # differing config keys are shown as the variant's settings
    assert "max_num_batched_tokens=8192, scheduler=continuous" in text


def test_report_survives_a_variant_with_nothing_finished(tmp_path, variants):
    req = make_requests(n=3, status=["rejected"] * 3, reason=["prompt too long for max_model_len"] * 3)
    empty = VariantData("dead", {"config": {"scheduler": "static"}, "num_rejected": 3}, req,
                        variants["cont"].steps.iloc[0:0], (np.zeros(0), np.zeros(0)))
    path = write_compare_report(tmp_path, {"cont": variants["cont"], "dead": empty}, title="t", context={})
    text = path.read_text()
    assert "3 requests rejected" in text
    for name in FIGURE_NAMES:
        assert (tmp_path / name).stat().st_size > 0


def test_step_timeseries_handles_merged_rows_and_replicas():
    # replica 0: [0,1) 2 waiting / 1 running / KV .5 / 100 prefill tokens, then a merged
    # decode run [1,2) (10 steps) with 4 / 3 / 1.0; replica 1: [0,2) 1 / 5 / .2 / 50 tokens.
    st = pd.DataFrame(dict(replica=[0, 0, 1], start_time_s=[0.0, 1.0, 0.0], step_time_s=[1.0, 1.0, 2.0],
                           num_steps=[1, 10, 1], num_waiting_reqs=[2, 4, 1], num_running_seqs=[1, 3, 5],
                           kv_cache_usage=[0.5, 1.0, 0.2], num_prefill_tokens=[100, 0, 50]))
    ts = step_timeseries(st, max_points=2)
    assert list(ts["time_s"]) == [0.5, 1.5]
    assert list(ts["num_waiting_reqs"]) == [3.0, 5.0]         # summed over replicas
    assert list(ts["num_running_seqs"]) == [6.0, 8.0]
    assert ts["kv_cache_usage"].tolist() == pytest.approx([0.35, 0.6])  # mean over replicas
    assert list(ts["prefill_tokens_per_s"]) == [125.0, 25.0]
    # an idle gap counts as 0: one replica busy half of the only bin
    half = step_timeseries(st.iloc[[0]], max_points=1, t_range=(0.0, 2.0))
    assert half["num_waiting_reqs"].tolist() == [1.0] and half["kv_cache_usage"].tolist() == [0.25]


def test_weighted_cdf_downsamples_and_keeps_the_tail():
    v = np.arange(1, 100_001, dtype=float)
    x, F = weighted_cdf(v, np.ones_like(v), max_points=500)
    assert x.size <= 500 and np.all(np.diff(x) >= 0) and F[-1] == 1.0
    assert x[-1] == 100_000  # the maximum survives
    assert (x > 99_900).sum() >= 50  # the last 0.1 % still has many points
    x2, F2 = weighted_cdf(np.array([1.0, 2.0]), np.array([3.0, 1.0]))
    assert list(x2) == [1.0, 2.0] and list(F2) == [0.75, 1.0]
    assert list(weighted_tail(np.array([2.0, 1.0]), np.array([1.0, 3.0]))[1]) == [1.0, 0.25]
    tx, ge = weighted_tail(v, np.ones_like(v), max_points=500)
    assert tx[-1] == 100_000 and ge[-1] == pytest.approx(1e-5)  # the maximum keeps its own weight


def test_breakdown_carves_preemption_out_of_decode_and_sums_to_e2el():
    req = make_requests(n=3, queue_ms=[10.0, 20.0, 30.0], prefill_ms=50.0, decode_ms=1000.0,
                        preemptions=[0, 1, 1], preempted_ms=[0.0, 300.0, 1020.0])
    b = breakdown_row(req, 50)  # median E2EL = request 1
    assert (b["queue"], b["prefill"], b["decode"], b["preempted"]) == (20.0, 50.0, 700.0, 300.0)
    b = breakdown_row(req, 99)  # request 2: 1,020 ms of recompute > 1,000 ms decode → 20 from prefill
    assert (b["queue"], b["prefill"], b["decode"], b["preempted"]) == (30.0, 30.0, 0.0, 1020.0)
    assert sum(b[k] for k in ("queue", "prefill", "decode", "preempted")) == pytest.approx(b["e2el"]) == 1080.0


def test_queued_average_by_hand():
    """Requests queued [0, 2) and [1, 4), one rejected (never scheduled):
    per-second bins hold 1, 2, 1, 1, 0 queued on average; a bin [0.5, 4) holds
    (1.5 + 3) / 3.5."""
    from sim.compare.variant_data import queued_average

    got = queued_average(np.array([0.0, 1.0, 0.5]), np.array([2.0, 4.0, np.nan]), np.arange(6.0))
    assert got.tolist() == [1.0, 2.0, 1.0, 1.0, 0.0]
    got = queued_average(np.array([0.0, 1.0]), np.array([2.0, 4.0]), np.array([0.0, 0.5, 4.0]))
    assert got[1] == pytest.approx(4.5 / 3.5)


def test_compare_table_never_cuts_digits(monkeypatch):
    """A terminal too narrow for one row per variant gets one column per
    variant; every digit is printed (rich would otherwise shorten to '…')."""
    import io

    from rich.console import Console

    from sim.cli import tables as report_text

    summaries = {name: {"request_throughput": 12345.678, "output_throughput": 987654.0, "median_ttft_ms": 1234.5,
                        "p99_ttft_ms": 56789.1, "num_preemptions": 123456, "num_rejected": 0}
                 for name in ("static", "continuous", "chunked")}
    for width in (80, 200):
        buf = io.StringIO()
        monkeypatch.setattr(report_text, "_console", Console(file=buf, width=width))
        report_text.print_compare_table(summaries)
        out = buf.getvalue()
        assert "…" not in out
        assert max(len(line) for line in out.splitlines()) <= width
        for cell in ("12,345.68", "987,654", "56,789.1", "123,456", "continuous"):
            assert cell in out, (width, cell)
        header = next(line for line in out.splitlines() if "TTFT p99" in line or "metric" in line)
        assert ("metric" in header) == (width == 80)
