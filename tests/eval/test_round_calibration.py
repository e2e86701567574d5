"""Per-round calibration: anchors spread over each round, each round's speed from its anchors, and the
evaluation's measurements against estimates moved by their round's factors, by hand."""

import pytest

from neuroshard.eval.round_calibration import (
    accuracy_at,
    anchor_order,
    anchor_plans,
    anchor_spread,
    calibrated_accuracy,
    new_type_records,
    part_ratios,
    pooled_accuracy,
    rank_compute_ratios,
    round_factors,
    round_floors,
    spread_choice,
    step_accuracy,
)
from neuroshard.formats.plan_file import write_plans
from neuroshard.problem import Problem
from neuroshard.types.costs import CostBreakdown, CostSpread, RepeatParts
from neuroshard.types.errors import InputError
from neuroshard.types.plan import Plan, Spread
from neuroshard.types.records import PlanRecord
from neuroshard.types.tables import TableConfig
from tests.test_api import _hand_models

PLAN = Plan((), ((0,), (1,)))


def _measured(task, alg, estimate, rounds):
    """A record of two ranks estimated at `estimate` (compute, bw, fw per rank) and measured in each round at
    the given per-rank parts."""
    c, b, f = estimate
    reps = [RepeatParts(list(rc), list(rb), list(rf)) for rc, rb, rf in rounds]
    costs = [max(x + y + z for x, y, z in zip(rc, rb, rf)) for rc, rb, rf in rounds]
    measured = CostBreakdown(*[[sum(r[k][i] for r in rounds) / len(rounds) for i in range(2)] for k in range(3)],
                             repeats=reps)
    return PlanRecord(task, alg, plan=PLAN, estimate=CostBreakdown(list(c), list(b), list(f)), measured=measured,
                      repeat_costs=costs)


def test_anchors_are_spread_over_each_round():
    recs = [PlanRecord(t, "a", plan=PLAN) for t in range(4)]
    anchors = [PlanRecord(9, "anchor:x", plan=PLAN), PlanRecord(8, "anchor:y", plan=PLAN)]
    rounds = [(r, k) for k in range(2) for r in recs]
    order = anchor_order(rounds, anchors, 2)
    # 4 plans a round, 2 anchors: after round(4/3) = 1 and round(8/3) = 3 of them
    assert [(x.task, k) for x, k in order] == [(0, 0), (9, 0), (1, 0), (2, 0), (8, 0), (3, 0),
                                               (0, 1), (9, 1), (1, 1), (2, 1), (8, 1), (3, 1)]
    assert anchor_order(rounds, [], 2) == rounds


def test_each_round_is_compared_with_its_own_speed():
    # anchors estimated at compute 1, bw 0.5, fw 0.5 per rank; round 0 measured at 1.2x every part, round 1 at
    # 0.9x; the plan estimated at (2, 1) compute and 0.5 exchanges, measured exactly 1.2x and 0.9x: per
    # measurement no error once moved, while unmoved it is off by 0.2 / 1.2 and 0.1 / 0.9
    est = ((1.0, 1.0), (0.5, 0.5), (0.5, 0.5))
    anchor = _measured(7, "anchor:n", est, [((1.2, 1.2), (0.6, 0.6), (0.6, 0.6)),
                                             ((0.9, 0.9), (0.45, 0.45), (0.45, 0.45))])
    factors = round_factors([anchor], 2)
    assert factors[0]["compute"] == pytest.approx(1.2) and factors[1]["fw_comm"] == pytest.approx(0.9)
    assert factors[0]["cost"] == pytest.approx(1.2)
    e = ((2.0, 1.0), (0.5, 0.5), (0.5, 0.5))  # plan cost 3.0
    plan = _measured(0, "neuroshard", e, [((2.4, 1.2), (0.6, 0.6), (0.6, 0.6)), ((1.8, 0.9), (0.45, 0.45),
                                                                                (0.45, 0.45))])
    plan = plan.__class__(**{**plan.__dict__, "estimate": CostBreakdown(
        list(e[0]), list(e[1]), list(e[2]), spread=CostSpread(3.0, 0.2, 2.9, 3.2, 10))})
    cal = calibrated_accuracy([plan], [anchor], 2)
    assert cal.measurements == 2 and cal.mape == pytest.approx(0.0, abs=1e-12)
    assert cal.raw_mape == pytest.approx((0.6 / 3.6 + 0.3 / 2.7) / 2)
    assert cal.coverage == 1.0  # 3.6 in [2.9, 3.2] x 1.2 and 2.7 in [2.9, 3.2] x 0.9
    assert cal.mape_mean == pytest.approx(0.0, abs=1e-12)
    # its two rounds, each divided by its round's speed, are both 3.0: a perfect model scores 0 too
    assert cal.floor == pytest.approx(0.0, abs=1e-12) and cal.floor_mean == pytest.approx(0.0, abs=1e-12)
    # the same from the factors read back (a round_calibration.json's)
    again = accuracy_at([plan], cal.factors, cal.anchors)
    assert again.to_json() == cal.to_json()


def test_the_ratio_to_the_floor_is_read_again_with_the_anchors_resampled():
    # anchor a measured at 1.2x its estimate in round 0 and 1.0x in round 1, anchor b at 1.0x in both; the plan
    # (estimate 3.0) measured at 3.96 and 3.0. A resample's round-0 factor is 1.2 (a, a), 1.1 (a, b) or 1.0
    # (b, b), its round-1 factor 1.0. With factor f the moved estimates are 3 f and 3.0: MAPE |3 f - 3.96| / 3.96
    # / 2; the floor from 3.96 / f and 3.0: d / sqrt(2), d = |3.96 / f - 3| / ((3.96 / f + 3) / 2)
    est = ((1.0, 1.0), (0.5, 0.5), (0.5, 0.5))
    a = _measured(7, "anchor:a", est, [((1.2, 1.2), (0.6, 0.6), (0.6, 0.6)), est])
    b = _measured(8, "anchor:b", est, [est, est])
    plan = _measured(0, "neuroshard", ((2.0, 1.0), (0.5, 0.5), (0.5, 0.5)),
                     [((2.64, 1.32), (0.66, 0.66), (0.66, 0.66)), ((2.0, 1.0), (0.5, 0.5), (0.5, 0.5))])

    def ratio(f):
        z = 3.96 / f
        return (abs(3 * f - 3.96) / 3.96 / 2) / (abs(z - 3) / ((z + 3) / 2) / 2 ** 0.5)

    assert ratio(1.2) == pytest.approx(0.675, abs=1e-3) and ratio(1.0) == pytest.approx(0.6214, abs=1e-3)
    # the same anchor twice: every draw is the measured ratio
    assert anchor_spread([plan], [a, a], 2) == pytest.approx([ratio(1.2), ratio(1.2)])
    # a and b: a quarter of the draws are (b, b), a quarter (a, a), the lowest and highest ratios
    assert anchor_spread([plan], [a, b], 2) == pytest.approx([ratio(1.0), ratio(1.2)])
    cal = calibrated_accuracy([plan], [a, b], 2)
    assert cal.ratio_spread == pytest.approx([ratio(1.0), ratio(1.2)])
    assert cal.mape / cal.floor == pytest.approx(ratio(1.1))
    # one anchor: nothing to resample
    assert anchor_spread([plan], [a], 2) is None and calibrated_accuracy([plan], [a], 2).ratio_spread is None


def _spread_anchor(rounds, collectives_in_repeats=True):
    """An anchor with a spread table over two ranks, estimated at compute 1, backward exchange 0.5 (0.25 of it
    the collectives) and forward exchange 1.0 (0.5 of it the collectives) per rank; each round measured at the
    given (compute, bw, fw, fw collectives, bw collectives) per rank."""
    est = CostBreakdown([1.0, 1.0], [0.5, 0.5], [1.0, 1.0], collectives=[[0.5, 0.25], [0.5, 0.25]])
    reps = [RepeatParts([c] * 2, [b] * 2, [f] * 2, collectives=[[kf, kb]] * 2 if collectives_in_repeats else None)
            for c, b, f, kf, kb in rounds]
    mean = lambda i: sum(r[i] for r in rounds) / len(rounds)  # noqa: E731
    measured = CostBreakdown([mean(0)] * 2, [mean(1)] * 2, [mean(2)] * 2, repeats=reps,
                             collectives=[[mean(3), mean(4)]] * 2)
    return PlanRecord(9, "anchor:torchrec_full", plan=Plan((), ((), ()), (Spread(0, "row_wise", (0, 1)),)),
                      estimate=est, measured=measured, repeat_costs=[c + b + f for c, b, f, _, _ in rounds])


def test_spread_anchors_give_each_round_its_collectives_speed():
    # round 0: compute and the backward exchange at 1.2x, the forward at 1.1x; the forward collectives at 1.0x
    # (0.5 of 0.5), the backward at 1.2x (0.3 of 0.25). Round 1: every part as estimated
    anchor = _spread_anchor([(1.2, 0.6, 1.1, 0.5, 0.3), (1.0, 0.5, 1.0, 0.5, 0.25)])
    # a second anchor whose backward collectives blew up to 2x (0.5 of 0.25) in round 0, a third at 0.8x (0.2)
    blown = _spread_anchor([(1.2, 0.6, 1.1, 0.5, 0.5), (1.0, 0.5, 1.0, 0.5, 0.25)])
    low = _spread_anchor([(1.2, 0.6, 1.1, 0.5, 0.2), (1.0, 0.5, 1.0, 0.5, 0.25)])
    f0, f1 = round_factors([anchor, blown, low], 2)
    assert f0["fw_collectives"] == pytest.approx(1.0) and f0["bw_collectives"] == pytest.approx(1.2)
    assert {k: f0[k] for k in ("compute", "bw_comm", "fw_comm")} == pytest.approx(
        {"compute": 1.2, "bw_comm": 1.2, "fw_comm": 1.1})
    assert f1 == pytest.approx({"cost": 1.0, "compute": 1.0, "bw_comm": 1.0, "fw_comm": 1.0, "fw_collectives": 1.0,
                                "bw_collectives": 1.0})
    # with fewer than three such anchors a round has no collectives' factor: the blown-up one alone would move
    # every plan's backward collectives by 2x (the same anchor three times, as a resample may draw it, is one)
    for few in ([anchor], [anchor, blown], [blown] * 3):
        assert all(set(f) == {"cost", "compute", "bw_comm", "fw_comm"} for f in round_factors(few, 2))
    # results written before the repeats kept their collectives: each round gets the mean over the repeats
    # (forward 0.5 / 0.5, backward 0.275 / 0.25)
    rounds = [(1.2, 0.6, 1.1, 0.5, 0.3), (1.0, 0.5, 1.0, 0.5, 0.25)]
    old = [_spread_anchor(rounds, collectives_in_repeats=False) for _ in range(3)]
    assert [f["bw_collectives"] for f in round_factors(old, 2)] == pytest.approx([1.1, 1.1])
    # anchors without spread tables give no collectives' speed
    plain = _measured(7, "anchor:n", ((1.0, 1.0), (0.5, 0.5), (0.5, 0.5)), [((1.0, 1.0), (0.5, 0.5), (0.5, 0.5))])
    assert set(round_factors([plain], 1)[0]) == {"cost", "compute", "bw_comm", "fw_comm"}


def test_the_collectives_of_a_plan_move_by_their_own_factor():
    # a plan estimated at compute (2, 1), backward exchange 0.5 (0.25 collectives) and forward 1.0 (0.5
    # collectives) per rank; in a round with the forward all-to-all at 1.2x and the collectives at 1.0x, rank 0 is
    # moved to 2 + 0.5 + 0.5 x 1.2 + 0.5 = 3.6, where the exchange's factor alone gives 2 + 0.5 + 1.2 = 3.7
    est = CostBreakdown([2.0, 1.0], [0.5, 0.5], [1.0, 1.0], collectives=[[0.5, 0.25], [0.5, 0.25]])
    plan = PlanRecord(0, "torchrec_full", plan=PLAN, estimate=est, repeat_costs=[3.6],
                      measured=CostBreakdown([2.0, 1.0], [0.5, 0.5], [1.1, 1.1], repeats=[
                          RepeatParts([2.0, 1.0], [0.5, 0.5], [1.1, 1.1])]))
    exchange = {"cost": 1.0, "compute": 1.0, "bw_comm": 1.0, "fw_comm": 1.2}
    assert accuracy_at([plan], [{**exchange, "fw_collectives": 1.0, "bw_collectives": 1.0}], 1).mape == \
        pytest.approx(0.0, abs=1e-12)
    assert accuracy_at([plan], [exchange], 1).mape == pytest.approx(0.1 / 3.6)


def _rescaled(alg, task, costs):
    """A plan of `alg` (estimated at plan cost 3.0, compute (2, 1) and exchanges of 0.5) measured at `costs` by round,
    every part scaled from the estimate."""
    e = ((2.0, 1.0), (0.5, 0.5), (0.5, 0.5))
    return _measured(task, alg, e, [tuple(tuple(x * c / 3.0 for x in part) for part in e) for c in costs])


def test_part_ratios_split_the_exchanges_into_all_to_all_and_collectives():
    # estimated per rank: compute 1, backward 0.5 (0.25 collectives), forward 1.0 (0.5 collectives); summed over
    # the two ranks: compute 2, bw all-to-all 0.5, fw all-to-all 1.0, fw collectives 1.0, bw collectives 0.5.
    # round 0 measured (compute, bw, fw, fw coll, bw coll) = (1.2, 0.6, 1.5, 0.5, 0.25) a rank, round 1
    # (1.0, 0.5, 1.3, 0.5, 0.25): the forward all-to-all ran at 1.0 and 0.8 a rank against 0.5 estimated
    rec = _spread_anchor([(1.2, 0.6, 1.5, 0.5, 0.25), (1.0, 0.5, 1.3, 0.5, 0.25)])
    # round 0 ran compute at 1.2x, the exchanges at 1.1x, the collectives as estimated; round 1 as estimated
    factors = [{"cost": 1.0, "compute": 1.2, "bw_comm": 1.1, "fw_comm": 1.1, "fw_collectives": 1.0,
                "bw_collectives": 1.0}, {"cost": 1.0, "compute": 1.0, "bw_comm": 1.0, "fw_comm": 1.0}]
    got = part_ratios([rec], factors)
    # compute: 2.4 / (2 * 1.2) = 1 and 2.0 / 2 = 1; bw all-to-all: 0.7 / (0.5 * 1.1) and 0.5 / 0.5;
    # fw all-to-all: 2.0 / (1.0 * 1.1) and 1.6 / 1.0; collectives: by their own factor in round 0, by their
    # exchange's in round 1 (which has none): 1.0 / 1.0 and 1.0 / 1.0, 0.5 / 0.5 and 0.5 / 0.5
    assert got == pytest.approx({"compute": 1.0, "bw_alltoall": (0.7 / 0.55 + 1.0) / 2,
                                 "fw_alltoall": (2.0 / 1.1 + 1.6) / 2, "fw_collectives": 1.0, "bw_collectives": 1.0})
    # a plan without spread tables has no collectives to compare
    plain = _measured(1, "a", ([1, 1], [1, 1], [1, 1]), [([2, 1], [1, 1], [1, 1])])
    assert set(part_ratios([plain], factors[:1])) == {"compute", "bw_alltoall", "fw_alltoall"}


def test_rank_compute_ratios_show_a_slope_over_the_ranks():
    # rank 0 measured at 1.5x its estimate and rank 1 at 1.0x in round 0 (compute factor 1.0); in round 1 the
    # round ran at 2x (factor 2.0) and rank 0 at 3.0 = 1.5x of 2, rank 1 at 2.0 = 1.0x of 2
    rec = _measured(1, "a", ([2, 4], [0, 0], [0, 0]), [([3, 4], [0, 0], [0, 0]), ([6, 8], [0, 0], [0, 0])])
    factors = [{"cost": 1.0, "compute": 1.0, "bw_comm": 1.0, "fw_comm": 1.0},
               {"cost": 2.0, "compute": 2.0, "bw_comm": 1.0, "fw_comm": 1.0}]
    assert rank_compute_ratios([rec], factors) == pytest.approx([1.5, 1.0])
    # a rank with no estimated compute anywhere has no ratio
    idle = _measured(2, "a", ([2, 0], [0, 0], [0, 0]), [([3, 0], [0, 0], [0, 0])])
    got = rank_compute_ratios([idle], factors[:1])
    assert got[0] == pytest.approx(1.5) and got[1] is None


def test_runs_pooled_keep_their_own_rounds_speed_and_share_one_floor():
    est = ((1.0, 1.0), (0.5, 0.5), (0.5, 0.5))
    a = _measured(7, "anchor:a", est, [((1.2, 1.2), (0.6, 0.6), (0.6, 0.6)), est])  # rounds at 1.2x, 1.0x
    b = _measured(8, "anchor:b", est, [est, est])  # rounds at 1.0x, 1.0x
    # run 1: one plan measured 3.96, 3.0; moved estimates 3.6, 3.0: errors 0.36 / 3.96 and 0; with the speed
    # taken out 3.3 and 3.0: d = 0.3 / 3.15
    one = [_rescaled("neuroshard", 0, [3.96, 3.0])]
    # run 2: plans measured 3.0, 3.0 (errors 0, 0; d = 0) and 2.5, 2.5 (errors 0.2, 0.2; d = 0); alone its
    # floor is 0 and its ratio has no value
    two = [_rescaled("neuroshard", 0, [3.0, 3.0]), _rescaled("torchrec_full", 1, [2.5, 2.5])]
    pooled = pooled_accuracy([(one, [a, a], 2), (two, [b, b], 2)])
    assert (pooled.runs, pooled.plans, pooled.measurements) == (2, 3, 6)
    assert pooled.mape == pytest.approx((0.36 / 3.96 + 0.2 + 0.2) / 6)
    floor = (0.3 / 3.15) / 3 / 2 ** 0.5
    assert pooled.floor == pytest.approx(floor)
    # each run's anchors the same one twice: every resample is the measured ratio
    assert pooled.ratio_spread == pytest.approx([pooled.mape / floor] * 2)
    # a run alone is its own calibrated accuracy, resampled spread included
    alone, cal = pooled_accuracy([(one, [a, b], 2)]), calibrated_accuracy(one, [a, b], 2)
    assert alone.measurements == cal.measurements
    assert (alone.mape, alone.floor) == pytest.approx((cal.mape, cal.floor))
    assert alone.ratio_spread == pytest.approx(cal.ratio_spread)
    # a run with a single anchor: nothing to resample
    assert pooled_accuracy([(one, [a], 2), (two, [b, b], 2)]).ratio_spread is None


def test_plans_with_the_new_types_are_those_with_spread_tables():
    whole = PlanRecord(0, "torchrec", plan=PLAN)
    rows = PlanRecord(0, "torchrec_full", plan=Plan((), ((0,), ()), (Spread(1, "row_wise", (0, 1)),)))
    unplanned = PlanRecord(1, "autoshard")
    assert new_type_records([whole, rows, unplanned]) == [rows]


def test_floors_take_the_rounds_speed_out_first():
    # rounds at 1.2x and 1.0x: plan 1 measured 2.4, 1.8 -> 2.0, 1.8 (|d| = 0.2 / 1.9); plan 2 measured 1, 1, 1
    # (a third round beyond the two speeds) -> 1/1.2, 1 (|d| = (1 - 1/1.2) / ((1/1.2 + 1) / 2) = 2/11)
    d = (0.2 / 1.9 + 2 / 11) / 2
    per, mean = round_floors([[2.4, 1.8], [1.0, 1.0, 1.0]], [1.2, 1.0])
    assert per == pytest.approx(d / 2 ** 0.5) and mean == pytest.approx(d / 2)  # means of 2 rounds: d / sqrt(4)
    assert round_floors([[2.0]], [1.0]) == (None, None)


def test_one_number_per_plan_against_its_rounds_speed():
    # anchors predicted 5 and 10, trained at 6, 12 (1.2x) in round 0 and 4.5, 10 (median 0.95x) in round 1; a plan
    # predicted 10, trained at 12 and 10: moved 12 and 9.5 -> errors 0 and 0.5 / 10; unmoved 2 / 12 and 0
    cal = step_accuracy([10.0], [[12.0, 10.0]], [5.0, 10.0], [[6.0, 4.5], [12.0, 10.0]])
    assert [f["cost"] for f in cal.factors] == pytest.approx([1.2, 0.95])
    assert cal.anchors == 2 and cal.measurements == 2
    assert cal.mape == pytest.approx(0.05 / 2) and cal.raw_mape == pytest.approx(2 / 12 / 2)
    assert cal.mape_mean == pytest.approx(abs(10.75 - 11) / 11) and cal.spearman is None
    # the perfect model's floor: 12 / 1.2 = 10 and 10 / 0.95 = 10.526 -> d = 0.526 / 10.263
    d = (10 / 0.95 - 10) / ((10 + 10 / 0.95) / 2)
    assert cal.floor == pytest.approx(d / 2 ** 0.5) and cal.floor_mean == pytest.approx(d / 2)
    # a round no anchor was trained in is not moved
    assert step_accuracy([10.0], [[12.0, 10.0]], [5.0], [[6.0]]).factors[1] == {"cost": 1.0}


def test_one_number_per_plans_ratio_is_read_again_with_the_anchors_resampled():
    # the anchors above: (a, a) moves round 1 by 0.9, (b, b) by 1.0, (a, b) by 0.95 (round 0 by 1.2 in all);
    # the plan, 12 and 10, then errs 0 and |x - 1| (mape |x - 1| / 2) against a floor from 10 and 10 / x
    def ratio(x):
        d = abs(10 - 10 / x) / ((10 + 10 / x) / 2)
        return (abs(x - 1) / 2) / (d / 2 ** 0.5)

    a, b = (5.0, [6.0, 4.5]), (10.0, [12.0, 10.0])
    cal = step_accuracy([10.0], [[12.0, 10.0]], [a[0], b[0]], [a[1], b[1]])
    assert cal.mape / cal.floor == pytest.approx(ratio(0.95))
    # (b, b) leaves no floor and is left out: of the rest a third are (a, a), the 10th percentile, and two thirds
    # (a, b), the 90th
    assert cal.ratio_spread == pytest.approx([ratio(0.9), ratio(0.95)])
    assert ratio(0.9) < ratio(0.95)
    assert step_accuracy([10.0], [[12.0, 10.0]], [a[0]], [a[1]]).ratio_spread is None


def test_anchor_plans_are_estimated_on_the_tables_they_name(tmp_path):
    configs = [TableConfig(100 + i, 1.0, (1.0,) + (0.0,) * 16) for i in range(3)]
    models = _hand_models(2)
    rec = PlanRecord(5, "neuroshard", plan=PLAN, table_ids=(2, 0), dims=(16, 8))
    write_plans(tmp_path / "p.json", [rec, PlanRecord(6, "x", plan=None, status="oom")])
    [a] = anchor_plans(tmp_path / "p.json", configs, models, Problem(2, 1.0), 3)
    # compute = 0.5 + 0.01 x dim sum per device
    assert a.estimate.compute == pytest.approx([0.66, 0.58])
    write_plans(tmp_path / "old.json", [PlanRecord(5, "neuroshard", plan=PLAN)])
    with pytest.raises(InputError, match="no table_ids and dims"):
        anchor_plans(tmp_path / "old.json", configs, models, Problem(2, 1.0), 3)
    write_plans(tmp_path / "none.json", [PlanRecord(6, "x", plan=None, status="oom")])
    with pytest.raises(InputError, match="no plan to take as an anchor"):
        anchor_plans(tmp_path / "none.json", configs, models, Problem(2, 1.0), 3)


def test_anchors_are_taken_over_tasks_and_algorithms():
    # three tasks of three algorithms each, in file order: task n's plans are taken from its n-th on
    tasks = [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert spread_choice(tasks, 3) == [0, 4, 8]
    assert spread_choice(tasks, 6) == [0, 4, 8, 1, 5, 6]
    assert sorted(spread_choice(tasks, 20)) == list(range(9))
    assert spread_choice([4, 4, 7], 2) == [0, 2]
    assert spread_choice([], 3) == []
