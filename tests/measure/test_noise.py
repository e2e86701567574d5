"""The one noise-floor implementation: relative differences and the report schema, by hand."""

import math

import numpy as np
import pytest

from neuroshard.formats.cost_data import read_noise_floor, write_noise_floor
from neuroshard.measure.noise import noise_report, ratio_stats, rel_diff_stats
from neuroshard.types.errors import InputError


def test_relative_differences_by_hand():
    s = rel_diff_stats(np.array([[2.0, 4.0], [0.0, 10.0]]), np.array([[3.0, 3.0], [5.0, 10.0]]))
    # |3-2|/2 = 0.5, |3-4|/4 = 0.25, 10 vs 10 = 0; the entry with reference 0 is dropped
    assert (s["n"], s["median"], s["mean"]) == (3, 0.25, 0.25)
    assert math.isnan(rel_diff_stats([0.0], [1.0])["median"])


def test_signed_ratio_by_hand():
    s = ratio_stats([2.0, 4.0, 0.0, 10.0], [3.0, 3.0, 5.0, 12.0])
    # 1.5, 0.75, (dropped), 1.2: a machine now running slower shows a median above 1
    assert (s["n"], s["median"]) == (3, 1.2) and s["mean"] == pytest.approx(3.45 / 3)
    assert math.isnan(ratio_stats([0.0], [1.0])["median"])


def test_report_leaves_out_failed_samples_and_round_trips(tmp_path):
    stored = np.array([1.0, 2.0, 4.0])
    fresh = np.array([[1.5, np.nan, 5.0],   # repeat 1: sample 1 failed
                      [1.0, 2.0, 4.0]])     # repeat 2
    rep = noise_report("compute", {"cost": stored}, {"cost": fresh}, samples=[], seed=3)
    assert rep["num_samples"] == 2 and rep["repeats"] == 2 and rep["seed"] == 3
    cost = rep["targets"]["cost"]
    assert cost["fresh_vs_stored"]["mean"] == pytest.approx((0.5 + 0.25) / 2)
    assert cost["fresh_over_stored"]["median"] == pytest.approx((1.5 + 1.25) / 2)
    assert cost["fresh_vs_fresh"]["mean"] == pytest.approx((0.5 / 1.5 + 1.0 / 5.0) / 2)
    # each entry's difference is kept for the floor's interval (the repeats' comparison keeps none)
    assert cost["fresh_vs_stored"]["values"] == [0.5, 0.25] and "values" not in cost["fresh_vs_fresh"]
    write_noise_floor(tmp_path, rep)
    assert read_noise_floor(tmp_path, "cost") == cost["fresh_vs_stored"]
    assert read_noise_floor(tmp_path / "nowhere", "cost") is None
    with pytest.raises(InputError, match="no noise floor for 'fw'"):
        read_noise_floor(tmp_path, "fw")
    with pytest.raises(ValueError):
        noise_report("comm", {"cost": stored}, {"cost": fresh}, samples=[])
