"""The recorder's packing (``struct`` instead of ``array.extend`` / ``np.array``
on Python numbers) stores exactly the values the element-wise paths store."""

from array import array

import numpy as np

from sim.results.metrics import Columns, WeightedSamples, diff_from, float64_array, float64_bytes, int64_array


def test_packed_arrays_equal_numpy_conversions():
    floats = [0.1, 1e-300, -2.5, 1 / 3, 2.0 ** 60 + 1, float("inf"), 7]  # an int among them
    ints = [0, -1, 2 ** 62, 3, -(2 ** 63)]
    assert float64_array(floats).tobytes() == np.array(floats, dtype=np.float64).tobytes()
    assert int64_array(ints).tobytes() == np.array(ints, dtype=np.int64).tobytes()
    assert float64_array([]).shape == (0,) and int64_array([]).dtype == np.int64
    assert float64_bytes([True, False, 2 ** 53 + 1]) == array("d", [1.0, 0.0, 2.0 ** 53]).tobytes()


def test_columns_rows_and_weighted_samples_as_array_extend_stores_them():
    cols = Columns(("a", "b", "c"))
    cols.append((1, 0.5, True))
    cols.flat.frombytes(cols.pack_row(*(2, 1.5), False))
    assert cols.flat.tolist() == [1.0, 0.5, 1.0, 2.0, 1.5, 0.0] and len(cols) == 2
    assert cols.column("b").tolist() == [0.5, 1.5]
    # rows given column by column (an int64 array, a list, one number for every row)
    # store what appending them row by row stores
    cols.extend_columns(2, (int64_array([3, 2 ** 53 + 1]), [0.1 + 0.2, -1e-300], 7))
    rows = Columns(("a", "b", "c"))
    for row in ((1, 0.5, True), (2, 1.5, False), (3, 0.1 + 0.2, 7), (2 ** 53 + 1, -1e-300, 7)):
        rows.append(row)
    assert cols.flat.tobytes() == rows.flat.tobytes() and len(cols) == 4
    w = WeightedSamples()
    w.add(0.25, 3)
    w.extend([0.5, 0.75], 2)
    v, wt = w.arrays()
    assert v.tolist() == [0.25, 0.5, 0.75] and wt.tolist() == [3.0, 2.0, 2.0]


def test_diff_from_is_np_diff_with_prepend():
    steps = int64_array([3, 4, 9, 9, 12])
    assert diff_from(steps, 0).tolist() == [3, 1, 5, 0, 3] and diff_from(steps, 0).dtype == np.int64
    assert diff_from(steps, -1).tolist() == [4, 1, 5, 0, 3]
    ends = float64_array([0.1 + 0.2, 0.7, 1e-300, 2.0 ** 60 + 2.0])
    # the same subtractions as np.diff: equal bytes, the first against ``first``
    assert diff_from(ends, 0.1).tobytes() == np.diff(ends, prepend=0.1).tobytes()
    assert diff_from(ends, 0.1)[0] == (0.1 + 0.2) - 0.1  # 0.20000000000000004, not 0.2
    empty = int64_array([])
    assert diff_from(empty, 5).shape == (0,) and diff_from(empty, 5).dtype == np.int64
