"""`neuroshard.numerics`: non-negative least squares and the relative error, by hand."""

import math

import numpy as np
import pytest

from neuroshard.numerics import mape, nnls, rel_errors


def test_nnls_by_hand():
    np.testing.assert_allclose(nnls(np.eye(2), np.array([2.0, -3.0])), [2.0, 0.0])
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    np.testing.assert_allclose(nnls(a, a @ np.array([1.0, 2.0])), [1.0, 2.0], atol=1e-12)
    # least squares would give x2 < 0: the constrained optimum puts x2 at 0 and x1 = mean of b over column 1
    np.testing.assert_allclose(nnls(np.array([[1.0, 1.0], [1.0, -1.0]]), np.array([1.0, 3.0])), [2.0, 0.0])


def test_relative_errors_and_their_mean():
    assert rel_errors([1.0, 2.0, 6.0, 5.0], [1.0, 4.0, 4.0, 0.0]).tolist() == [0.0, 0.5, 0.5]  # target 0 left out
    assert rel_errors([[110.0], [90.0]], [100.0, 100.0]) == pytest.approx([0.1, 0.1])  # flattened
    assert mape(np.array([110.0, 90.0]), np.array([100.0, 100.0])) == pytest.approx(0.1)  # a fraction: 10%
    assert mape([1.0, 2.0, 6.0, 5.0], [1.0, 4.0, 4.0, 0.0]) == pytest.approx(1 / 3)
    assert math.isnan(mape([1.0], [0.0]))
