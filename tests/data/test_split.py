"""The split of a dataset's tables into halves."""

import numpy as np

from neuroshard.data.split import sample_group, table_halves


def test_halves_are_balanced_seeded_and_differ_by_seed():
    a = table_halves(11, seed=3)
    assert sorted(set(a.tolist())) == [0, 1] and (a == 0).sum() == 5 and (a == 1).sum() == 6
    assert (table_halves(11, seed=3) == a).all() and not (table_halves(11, seed=4) == a).all()


def test_sample_group_by_hand():
    halves = np.array([0, 1, 0, 1])  # dataset tables 0..3; augmented id i uses table i % 4
    assert sample_group([0, 2, 6], halves) == "half0"  # tables 0, 2, 2
    assert sample_group([1, 7], halves) == "half1"  # tables 1, 3
    assert sample_group([0, 5], halves) == "mixed"  # tables 0, 1
