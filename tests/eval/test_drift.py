"""Machine drift: the factors read from the re-measurements, and the plan cost scaled by them, by hand."""

import pytest

from neuroshard.eval.drift import DRIFT_COMM, DRIFT_COMPUTE, drift_scaled_accuracy, read_drift
from neuroshard.formats.cost_data import write_noise_floor
from neuroshard.formats.io import write_json_atomic
from neuroshard.measure.noise import noise_report
from neuroshard.types import CostBreakdown, InputError, Plan, PlanRecord


def _write(hw, compute_ratio, fw_ratio, bw_ratio):
    stored = [2.0, 4.0]
    write_noise_floor(hw, noise_report("compute", {"cost": stored}, {"cost": [[2.0 * compute_ratio,
                                                                              4.0 * compute_ratio]]}, samples=[]),
                      hw / DRIFT_COMPUTE)
    fw, bw = [[1.0, 2.0], [3.0, 4.0]], [[1.0, 1.0], [2.0, 2.0]]  # 2 samples x 2 ranks
    write_noise_floor(hw, noise_report("comm", {"fw": fw, "bw": bw},
                                       {"fw": [[[v * fw_ratio for v in s] for s in fw]],
                                        "bw": [[[v * bw_ratio for v in s] for s in bw]]}, samples=[]),
                      hw / DRIFT_COMM)


def test_read_drift_gives_the_median_ratios(tmp_path):
    assert read_drift(tmp_path) is None  # the drift steps did not run
    _write(tmp_path, 1.25, 1.5, 0.8)
    d = read_drift(tmp_path)
    assert d["compute"] == pytest.approx(1.25) and d["fw_comm"] == pytest.approx(1.5)
    assert d["bw_comm"] == pytest.approx(0.8)
    assert d["samples"] == {"compute": 2, "fw_comm": 4, "bw_comm": 4}


def test_a_drift_file_without_ratios_is_a_one_line_error(tmp_path):
    _write(tmp_path, 1.0, 1.0, 1.0)
    write_json_atomic(tmp_path / DRIFT_COMM, {"targets": {"fw": {}}})
    with pytest.raises(InputError, match="drift_comm.json.*no drift ratio for 'fw'"):
        read_drift(tmp_path)


def test_scaled_plan_cost_by_hand():
    # ranks: compute [1, 2], bw [1, 1], fw [1, 1]; factors compute 2, fw 0.5, bw 1
    # -> totals [2 + 1 + 0.5, 4 + 1 + 0.5] = [3.5, 5.5]: plan cost 5.5 (the unscaled estimate is 4)
    est = CostBreakdown([1.0, 2.0], [1.0, 1.0], [1.0, 1.0])
    rec = PlanRecord(0, "a", plan=Plan((), ((0,), (1,))), estimate=est, repeat_costs=[5.5, 5.5])
    other = PlanRecord(1, "a", plan=Plan((), ((0,), (1,))), estimate=CostBreakdown([1.0, 1.0], [0.0, 0.0],
                                                                                    [0.0, 0.0]),
                       repeat_costs=[4.0])  # scaled estimate 2.0: 50% below the measured 4.0
    got = drift_scaled_accuracy([rec, other], {"compute": 2.0, "fw_comm": 0.5, "bw_comm": 1.0})
    assert got["plans"] == 2 and got["mape"] == pytest.approx((0.0 + 0.5) / 2)
    assert drift_scaled_accuracy([PlanRecord(0, "a", status="oom")], {"compute": 1, "fw_comm": 1,
                                                                       "bw_comm": 1})["mape"] is None
