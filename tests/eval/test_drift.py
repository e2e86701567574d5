"""Machine drift: the factors read from the re-measurements, and the plan cost scaled by them, by hand."""

import pytest

from neuroshard.eval.drift import (
    DRIFT_COMM,
    DRIFT_COMPUTE,
    drift_scaled_accuracy,
    read_drift,
)
from neuroshard.formats.cost_data import write_noise_floor
from neuroshard.formats.io import write_json_atomic
from neuroshard.measure.noise import noise_report
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.errors import InputError
from neuroshard.types.plan import Plan
from neuroshard.types.records import PlanRecord


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


def _anchor(task, compute, fw, cost):
    """A measured plan of 2 ranks: estimate compute [1, 2], bw [1, 1], fw [1, 1] (cost 4); measured compute
    `compute` x the estimate, fw `fw` x it, bw as estimated; plan cost `cost`."""
    return PlanRecord(task, "a", plan=Plan((), ((0,), (1,))),
                      estimate=CostBreakdown([1.0, 2.0], [1.0, 1.0], [1.0, 1.0]),
                      measured=CostBreakdown([compute, 2.0 * compute], [1.0, 1.0], [fw, fw]), repeat_costs=[cost])


def test_read_anchors_gives_the_geometric_mean_of_the_speeds_before_and_after(tmp_path):
    from neuroshard.eval.drift import ANCHORS, read_anchors
    from neuroshard.formats.plan_file import write_plans

    assert read_anchors(tmp_path) is None  # the steps did not run
    # before: compute 0.5, 1.0, 1.5 of the estimate -> median 1.0; plan costs 3, 4, 5 over 4 -> 1.0
    # after: compute 0.81 -> 0.81; fw 1.44 -> 1.44; cost 3.6 / 4 = 0.9
    (tmp_path / ANCHORS["before"]).mkdir()
    write_plans(tmp_path / ANCHORS["before"] / "results.json",
                [_anchor(0, 0.5, 1.0, 3.0), _anchor(1, 1.0, 1.0, 4.0), _anchor(2, 1.5, 1.0, 5.0)])
    assert read_anchors(tmp_path) is None  # only one of the two
    (tmp_path / ANCHORS["after"]).mkdir()
    write_plans(tmp_path / ANCHORS["after"] / "results.json", [_anchor(0, 0.81, 1.44, 3.6)])
    a = read_anchors(tmp_path)
    assert a["plans"] == 3
    assert a["before"] == {"cost": 1.0, "compute": 1.0, "bw_comm": 1.0, "fw_comm": 1.0}
    assert a["after"]["cost"] == pytest.approx(0.9) and a["after"]["compute"] == pytest.approx(0.81)
    # sqrt(1.0 x 0.81) = 0.9 (compute), sqrt(1.0 x 1.44) = 1.2 (fw), bw 1
    assert a["factors"] == pytest.approx({"compute": 0.9, "fw_comm": 1.2, "bw_comm": 1.0})


def _plan_speed_dir(path, calibration):
    """An eval.py out dir of 3 anchors (compute 0.8, 0.9, 1.0 x the estimate, fw 1.2 x, bw 1 x) estimated under
    `calibration`."""
    import json

    from neuroshard.formats.plan_file import write_plans

    path.mkdir()
    write_plans(path / "results.json", [_anchor(0, 0.8, 1.2, 3.5), _anchor(1, 0.9, 1.2, 4.0),
                                        _anchor(2, 1.0, 1.2, 4.5), PlanRecord(3, "a", status="oom")])
    (path / "config.json").write_text(json.dumps({"calibration_factors": calibration}))
    return path


def test_read_plan_speed_gives_the_median_ratios_under_the_same_calibration(tmp_path):
    from neuroshard.eval.drift import read_plan_speed

    calib = {"compute": 1.1, "fw_comm": 0.9, "bw_comm": 1.0, "samples": {"compute": 2}}
    d = _plan_speed_dir(tmp_path / "anchors", calib)
    # compute: 0.8, 0.9, 1.0 -> 0.9; fw: 2.4 / 2 = 1.2 each; bw as estimated; 3 plans measured (not the oom)
    got = read_plan_speed(d, calib)
    assert got == pytest.approx({"compute": 0.9, "fw_comm": 1.2, "bw_comm": 1.0, "plans": 3})
    with pytest.raises(InputError, match=r"config.json: its plans were estimated with calibration factor "
                                         r"compute=1.1, this evaluation's --calibration gives 1.2"):
        read_plan_speed(d, {**calib, "compute": 1.2})
    with pytest.raises(InputError, match="calibration factor compute=1.1, this evaluation's --calibration gives None"):
        read_plan_speed(d, None)
    uncalibrated = _plan_speed_dir(tmp_path / "plain", None)
    assert read_plan_speed(uncalibrated, None)["compute"] == pytest.approx(0.9)
    with pytest.raises(InputError, match=r"nowhere/results.json: plan-speed file not found \(--plan_speed"):
        read_plan_speed(tmp_path / "nowhere", None)


def test_read_plan_speed_refuses_a_part_no_plan_measured(tmp_path):
    import json

    from neuroshard.eval.drift import read_plan_speed
    from neuroshard.formats.plan_file import write_plans

    (tmp_path / "config.json").write_text(json.dumps({}))
    write_plans(tmp_path / "results.json", [PlanRecord(0, "a", status="oom")])
    with pytest.raises(InputError, match="results.json: no measured / estimated ratio for 'compute'"):
        read_plan_speed(tmp_path, None)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="config.json: expected a JSON object"):
        read_plan_speed(tmp_path, None)
