"""Result files: the CSV writer (no pandas on ``servesim run``'s path) writes
what pandas' ``to_csv(float_format="%.9g")`` would, and pandas reads it back."""

import numpy as np
import pandas as pd

from sim.results.output import write_csv


def test_write_csv_cells_quoting_and_round_trip(tmp_path):
    cols = {
        "request_id": np.array([0, 1, 2], dtype=np.int64),
        "ttft_ms": np.array([12.3456789012, np.nan, 1e-12]),
        "status": np.array(["finished", "rejected", "finished"]),
        "reason": np.array(["", 'too long, "8192" > 4096', ""], dtype=object),
        "is_warmup": np.array([True, False, False]),
    }
    path = tmp_path / "r.csv"
    write_csv(path, cols)
    assert path.read_text() == (
        "request_id,ttft_ms,status,reason,is_warmup\n"
        "0,12.3456789,finished,,True\n"
        '1,,rejected,"too long, ""8192"" > 4096",False\n'
        "2,1e-12,finished,,False\n"
    )
    expected = pd.DataFrame(cols)
    expected.to_csv(tmp_path / "pd.csv", index=False, float_format="%.9g")
    assert path.read_text() == (tmp_path / "pd.csv").read_text()
    back = pd.read_csv(path, keep_default_na=False, na_values=[""])
    assert back["reason"][1] == 'too long, "8192" > 4096'
    assert np.isnan(back["ttft_ms"][1]) and back["ttft_ms"][0] == 12.3456789


def test_timestamps_keep_10_microseconds_a_month_into_a_trace(tmp_path):
    path = tmp_path / "t.csv"
    write_csv(path, {"arrival_time_s": np.array([2_592_000.123456]), "ttft_ms": np.array([2_592_000.123456])})
    assert path.read_text().splitlines()[1] == "2592000.12346,2592000.12"  # %.12g for *_time_s, %.9g otherwise


def test_unquoted_lines_equal_the_csv_modules(tmp_path):
    # Nothing to quote (numbers, plain text): the lines are joined directly; they must be
    # the csv module's (and a table with a cell to quote takes the csv module itself: above).
    import csv

    from sim.results import output

    rng = np.random.default_rng(0)
    n = 3 * output._LINES_PER_WRITE + 5  # several writes
    cols = {
        "request_id": np.arange(n, dtype=np.int64),
        "arrival_time_s": rng.random(n) * 1e4,
        "ttft_ms": np.where(rng.random(n) < 0.1, np.nan, rng.lognormal(3.0, 1.0, n)),
        "status": np.where(rng.random(n) < 0.5, "finished", "rejected"),
        "reason": np.array(["", "prompt too long"] * (n // 2) + [""] * (n % 2), dtype=object),
        "is_warmup": rng.random(n) < 0.5,
    }
    path = tmp_path / "fast.csv"
    write_csv(path, cols)
    with open(tmp_path / "csv.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(cols)
        w.writerows(zip(*[output._cells(k, v) for k, v in cols.items()]))
    text = path.read_text()
    assert text == (tmp_path / "csv.csv").read_text()
    assert text.count("\n") == n + 1 and ",," in text  # NaN and empty reasons: empty cells
