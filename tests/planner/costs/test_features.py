"""`neuroshard.planner.costs.features`: the compute features of a pooled and of an unpooled table by hand."""

import math

import numpy as np
import pytest

from neuroshard.planner.costs.features import compute_pooling, feature_matrix, unpooled_ratio
from neuroshard.types.tables import NUM_BINS, TableConfig

BINS = (0.5,) + (0.5 / (NUM_BINS - 1),) * (NUM_BINS - 1)


def test_an_unpooled_table_is_read_at_the_measured_ratio_times_its_pooling_factor():
    # UNPOOLED_RATIO (-0.381, 0.617, 1.574): pooling factor 4, bin_0 0.5 -> exp(-0.381 + 0.617 ln 4 + 0.787) = 3.5302
    pooled = TableConfig(1000, 4.0, BINS, 8)
    seq = TableConfig(1000, 4.0, BINS, 8, pooled=False)
    assert unpooled_ratio(seq) == pytest.approx(3.530162, rel=1e-6)
    assert compute_pooling(pooled) == 4.0 and compute_pooling(seq) == pytest.approx(4.0 * 3.530162, rel=1e-6)
    x = feature_matrix([pooled, seq])
    np.testing.assert_allclose(x[0, :4], [8.0, 3.0, 4.0, 32.0], rtol=1e-6)
    np.testing.assert_allclose(x[1, :4], [8.0, 3.0, 14.12065, 112.9652], rtol=1e-6)
    np.testing.assert_array_equal(x[0, 4:], x[1, 4:])
    # below one lookup per sample the ratio is that of one lookup: exp(-0.381 + 0.787)
    assert unpooled_ratio(TableConfig(1000, 0.25, BINS, 8, pooled=False)) == pytest.approx(math.exp(0.406))
