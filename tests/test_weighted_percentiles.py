"""Weighted percentiles (``sim.results.metrics``): the banded order statistics
of a large sample equal ``np.percentile`` of the expanded sample, and the
whole-sort path, exactly (ties, NaN and a failed band included)."""

import numpy as np
import pytest

from sim.results import metrics
from sim.results.metrics import _order_stats, weighted_percentiles


def _expanded(values, weights, qs):
    return [float(np.percentile(np.repeat(values, weights.astype(np.int64)), q)) for q in qs]


QS = (0, 1, 50, 90, 99, 99.9, 100)


def test_small_sample_equals_numpy_on_the_expanded_sample():
    # hand-checkable: values 1, 2, 3 with weights 1, 2, 1 expand to [1, 2, 2, 3]
    v, w = np.array([3.0, 1.0, 2.0]), np.array([1.0, 1.0, 2.0])
    assert weighted_percentiles(v, w, (0, 50, 100)) == [1.0, 2.0, 3.0]
    assert weighted_percentiles(v, w, (25,)) == [1.75]  # pos 0.75 between 1 and 2
    assert np.isnan(weighted_percentiles(v, np.zeros(3), (50,))[0])  # nothing weighs: NaN


@pytest.mark.parametrize("seed", range(6))
def test_banded_order_statistics_equal_the_whole_sort(seed, monkeypatch):
    whole_sorts = []
    argsort = np.argsort

    def spy(a, *args, **kw):
        if kw.get("kind") == "stable":
            whole_sorts.append(a.size)
        return argsort(a, *args, **kw)

    rng = np.random.default_rng(seed)
    n = int(rng.integers(metrics._BAND_MIN_SIZE, 3 * metrics._BAND_MIN_SIZE))
    # step-like gaps: many exact ties, a long tail, weights 1..40 (and zeros, dropped)
    v = np.round(rng.lognormal(-5.0, 0.6, n), 5 if seed % 2 else 9)
    w = rng.integers(0 if seed == 3 else 1, 41, n).astype(np.float64)
    if seed == 4:  # time-ordered drift: a strided subsample still bounds the bands
        v = np.sort(v)
    monkeypatch.setattr(np, "argsort", spy)
    got = weighted_percentiles(v, w, QS)
    monkeypatch.undo()
    assert not whole_sorts  # the bands held
    assert got == _expanded(v[w > 0], w[w > 0], QS)
    keep = w > 0
    pairs = [(0, 1), (5000, 5001), (int(w[keep].sum()) - 1, int(w[keep].sum()) - 1)]
    assert _order_stats(v[keep], w[keep], pairs) == _whole_sort(v[keep], w[keep], pairs)


def test_a_band_that_misses_falls_back_to_the_whole_sort(monkeypatch):
    rng = np.random.default_rng(7)
    v = rng.random(metrics._BAND_MIN_SIZE)
    w = np.ones_like(v)
    w[v > 0.999] = 1e6  # nearly all weight in a tail the subsample's ranks misjudge
    monkeypatch.setattr(metrics, "_BAND_HALF", 1)
    assert weighted_percentiles(v, w, QS) == _expanded(v, w, QS)


def _whole_sort(v, w, pairs):
    n0 = metrics._BAND_MIN_SIZE
    try:
        metrics._BAND_MIN_SIZE = 1 << 62
        return _order_stats(v, w, pairs)
    finally:
        metrics._BAND_MIN_SIZE = n0


def test_nan_values_give_what_the_whole_sort_gives():
    # (NaN sorts last; a rank among them has no band: the whole sort answers)
    rng = np.random.default_rng(1)
    v = rng.random(metrics._BAND_MIN_SIZE + 10)
    v[::97] = np.nan
    w = np.full(v.shape, 2.0)
    total = int(w.sum())
    pairs = [(100, 101), (total // 2, total // 2 + 1), (total - 1, total - 1)]
    got, want = _order_stats(v, w, pairs), _whole_sort(v, w, pairs)
    assert got[:2] == want[:2] and np.isnan(got[2][0]) and np.isnan(want[2][0])
