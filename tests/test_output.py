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
