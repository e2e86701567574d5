"""Pooling verdicts over runs (`eval.pooling`) by hand: the chi-square tail, fixed and random effects
(DerSimonian-Laird), and the per-algorithm rows read from evaluation summaries."""

import json
import math

import pytest

from neuroshard.eval.pooling import chi2_sf, pool, pool_runs
from neuroshard.eval.power import z_sum
from neuroshard.eval.summary import Summary

Z = 1.959964


def test_chi_square_tail_by_hand():
    assert chi2_sf(2.0, 2) == pytest.approx(math.exp(-1))  # df 2: exp(-x/2)
    assert chi2_sf(3.0, 4) == pytest.approx(math.exp(-1.5) * 2.5)  # df 4: exp(-h) (1 + h)
    assert chi2_sf(1.0, 1) == pytest.approx(2 * (1 - 0.841345), abs=1e-6)  # df 1: 2 (1 - Phi(1))
    # the textbook 5% critical values
    for x, df in ((3.841, 1), (5.991, 2), (7.815, 3), (11.070, 5)):
        assert chi2_sf(x, df) == pytest.approx(0.05, abs=2e-4)
    assert chi2_sf(0.0, 3) == 1.0
    with pytest.raises(ValueError):
        chi2_sf(1.0, 0)


def test_pool_two_runs_that_disagree_by_hand():
    p = pool([0.04, 0.02], [0.01, 0.01])
    # w = 10000 each: fixed 0.03, se 1/sqrt(20000); Q = 1 + 1 = 2 on 1 df; I2 = (2 - 1)/2
    assert p.fixed == pytest.approx(0.03) and p.fixed_se == pytest.approx(1 / math.sqrt(20000))
    assert (p.q, p.df, p.i2) == (pytest.approx(2.0), 1, pytest.approx(0.5))
    assert p.p_heterogeneity == pytest.approx(chi2_sf(2.0, 1))
    # tau2 = (2 - 1) / (20000 - 2e8 / 20000) = 1e-4; weights 1 / 2e-4 each: se = 1 / sqrt(10000) = 0.01
    assert p.tau2 == pytest.approx(1e-4) and p.mean == pytest.approx(0.03) and p.se == pytest.approx(0.01)
    assert (p.lo, p.hi) == (pytest.approx(0.03 - Z * 0.01, abs=1e-6), pytest.approx(0.03 + Z * 0.01, abs=1e-6))


def test_pool_runs_that_agree_is_the_fixed_effect():
    p = pool([0.05, 0.05, 0.02], [0.01, 0.02, 0.04])
    # w = 10000, 2500, 625: fixed = (500 + 125 + 12.5) / 13125; Q = 625 * (0.02 - fixed)^2 < 2 -> tau2 = 0
    fixed = 637.5 / 13125
    assert p.fixed == pytest.approx(fixed) and p.tau2 == 0.0 and p.i2 == 0.0
    assert p.mean == pytest.approx(fixed) and p.se == pytest.approx(1 / math.sqrt(13125))
    assert p.q == pytest.approx(10000 * (0.05 - fixed) ** 2 + 2500 * (0.05 - fixed) ** 2 + 625 * (0.02 - fixed) ** 2)
    single = pool([0.03], [0.01])
    assert single.p_heterogeneity is None and single.mean == 0.03 and single.se == 0.01
    with pytest.raises(ValueError):
        pool([0.03, 0.01], [0.01, 0.0])


def summary(gains: dict[str, tuple[float, float]], cost="cost", tasks=20, repeats=2) -> Summary:
    """A summary whose reference gains `gain` over each algorithm with standard error `se` (a symmetric
    95% interval)."""
    rows = [{"alg": "neuroshard", "valid": tasks, "tasks": tasks, "oom": 0, "invalid": 0, "average": 10.0,
             "mean_common": 10.0, "median_search_ms": 1.0, "mean_search_ms": 1.0, "mean_splits": 0.0}]
    for alg, (gain, se) in gains.items():
        lo, hi = gain - Z * se, gain + Z * se
        rows.append({**rows[0], "alg": alg, "neuroshard_gain": gain, "vs_reference": {
            "diff_ms": {"mean": gain * 10, "lo": lo * 10, "hi": hi * 10, "n_tasks": tasks, "n_repeats": repeats},
            "verdict": "beats" if lo > 0 else "no significant difference", "gain_ci": [lo, hi]}})
    return Summary.from_json({"tasks": tasks, "common_tasks": tasks, "cost": cost, "algorithms": rows,
                              "ranking": [r["alg"] for r in rows]})


def test_pool_runs_by_algorithm():
    a = summary({"autoshard": (0.04, 0.01), "torchrec": (0.08, 0.01)})
    b = summary({"autoshard": (0.02, 0.01)}, tasks=30)
    rows = {r.alg: r for r in pool_runs([("a", a), ("b", b)])}
    assert set(rows) == {"autoshard", "torchrec"}
    auto = rows["autoshard"]
    assert [r.run for r in auto.runs] == ["a", "b"] and auto.runs[0].se == pytest.approx(0.01)
    assert auto.pooled.mean == pytest.approx(0.03) and auto.pooled.se == pytest.approx(0.01)
    assert auto.verdict == "beats" and auto.mdd == pytest.approx(z_sum() * 0.01)
    # one run only for torchrec: its own estimate
    assert [r.run for r in rows["torchrec"].runs] == ["a"] and rows["torchrec"].pooled.mean == pytest.approx(0.08)
    wide = pool_runs([("a", summary({"x": (0.01, 0.01)})), ("b", summary({"x": (0.01, 0.01)}))])[0]
    assert wide.pooled.lo == pytest.approx(0.01 - Z * 0.01 / math.sqrt(2), abs=1e-6)
    assert wide.verdict == "no significant difference"
    assert pool_runs([("a", summary({"x": (-0.05, 0.01)})), ("b", summary({"x": (-0.04, 0.01)}))])[0].verdict \
        == "loses to"
    with pytest.raises(ValueError, match="b: its cost is 'estimated_cost'"):
        pool_runs([("a", a), ("b", summary({"x": (0.01, 0.01)}, cost="estimated_cost"))])


def test_a_run_with_a_zero_width_interval_is_left_out_with_a_warning(capsys):
    """Inverse-variance weights need a width: the zero-width run is named on stderr, the pool is the others'."""
    rows = pool_runs([("a", summary({"x": (0.04, 0.01)})), ("b", summary({"x": (0.02, 0.0)})),
                      ("c", summary({"x": (0.02, 0.01)}))])
    assert [r.run for r in rows[0].runs] == ["a", "c"] and rows[0].pooled.mean == pytest.approx(0.03)
    assert "x: left out of the pool in b (a zero-width interval)" in capsys.readouterr().err


def test_a_run_with_a_nan_gain_is_an_error_naming_it():
    with pytest.raises(ValueError, match="b: x's gain nan .* cannot be pooled"):
        pool_runs([("a", summary({"x": (0.04, 0.01)})), ("b", summary({"x": (float("nan"), 0.01)}))])


def test_the_ablations_effects_are_pooled_by_name():
    from neuroshard.eval.pooling import pool_ablations

    def run(gain, se):
        return {"effects": [{"name": "search", "base": "a", "other": "b", "gain": gain, "gain_lo": gain - Z * se,
                             "gain_hi": gain + Z * se}]}

    [e] = pool_ablations([("r0", run(0.04, 0.01)), ("r1", run(0.02, 0.01)), ("r2", None)])
    # as test_pool_runs_by_algorithm: 0.04 and 0.02 with se 0.01 pool to +3.0%, tau2 1e-4
    assert [r["run"] for r in e["runs"]] == ["r0", "r1"] and e["pooled"]["mean"] == pytest.approx(0.03)
    assert e["pooled"]["tau2"] == pytest.approx(1e-4) and e["verdict"] == "beats"
    assert pool_ablations([("r0", run(0.04, 0.01))]) == []


def training_summary(ratios: dict[str, tuple[float, float]], reference="neuroshard[torchrec]", tasks=3) -> dict:
    """An eval_torchrec.py summary whose algorithms train `gain` slower than the reference (ratio 1 + gain)
    with standard error `se` (a symmetric 95% interval)."""
    rows = [{"alg": reference, "plans": tasks, "tasks": tasks, "mean_ms": 100.0, "ci": [90.0, 110.0]}]
    for alg, (gain, se) in ratios.items():
        rows.append({**rows[0], "alg": alg, "mean_ms": 100.0 * (1 + gain), "ratio": 1 + gain,
                     "ratio_ci": [1 + gain - Z * se, 1 + gain + Z * se], "verdict": None, "mdd": 0.05})
    return {"reference": reference, "common_tasks": list(range(tasks)), "algorithms": rows,
            "noise": {"repeat": 0.02, "iteration_spread": None, "median_se": None}}


def test_training_summaries_pool_their_step_time_ratios():
    from neuroshard.eval.pooling import pool_training_runs

    a = training_summary({"torchrec_full": (0.04, 0.01), "autoshard": (0.01, 0.01)})
    b = training_summary({"torchrec_full": (0.02, 0.01)}, tasks=4)
    rows = {r.alg: r for r in pool_training_runs([("a", a, 4), ("b", b, 4)])}
    full = rows["torchrec_full"]
    # as test_pool_runs_by_algorithm: ratios 1.04 and 1.02 with se 0.01 pool to +3.0%, tau2 1e-4, se 0.01
    assert [(r.run, r.tasks, r.repeats) for r in full.runs] == [("a", 3, 4), ("b", 4, 4)]
    assert full.runs[0].lo == pytest.approx(0.04 - Z * 0.01) and full.runs[0].se == pytest.approx(0.01)
    assert full.pooled.mean == pytest.approx(0.03) and full.pooled.tau2 == pytest.approx(1e-4)
    assert full.verdict == "beats"
    assert [r.run for r in rows["autoshard"].runs] == ["a"] and rows["autoshard"].verdict == "no significant difference"
    with pytest.raises(ValueError, match="b: its reference is 'neuroshard'"):
        pool_training_runs([("a", a, 4), ("b", training_summary({"x": (0.0, 0.01)}, reference="neuroshard"), 4)])
    broken = training_summary({"x": (0.0, 0.01)})
    del broken["algorithms"][1]["ratio_ci"]
    with pytest.raises(ValueError, match=r"b: algorithm row 1 \(x\): no alg, ratio, ratio_ci"):
        pool_training_runs([("a", a, 4), ("b", broken, 4)])


def test_a_real_training_summary_pools_as_its_ratios_say():
    """`training_eval.summarize`'s own output: a run's gain is its ratio - 1, its interval the ratio's less 1."""
    from neuroshard.eval.pooling import training_gains
    from neuroshard.torchrec.training_eval import summarize

    costs = {(0, "ref"): [100.0, 100.0], (1, "ref"): [50.0, 50.0],
             (0, "x"): [110.0, 104.0], (1, "x"): [52.0, 56.0]}
    s = summarize(costs, "ref", ["ref", "x"])
    [row] = [r for r in s["algorithms"] if r["alg"] == "x"]
    # (alg - ref) / ref: 0.10, 0.04, 0.04, 0.12 -> mean 0.075
    assert row["ratio"] == pytest.approx(1.075)
    g = training_gains("r", json.loads(json.dumps(s)), 2)["x"]
    assert g.gain == pytest.approx(0.075) and (g.lo, g.hi) == (pytest.approx(row["ratio_ci"][0] - 1),
                                                                pytest.approx(row["ratio_ci"][1] - 1))
    assert (g.tasks, g.repeats) == (2, 2) and "ref" not in training_gains("r", s, 2)
