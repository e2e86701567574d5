"""TorchRec's estimator with fitted coefficients: the formula by hand, the scorer pricing plans with it, its
file (the fit itself: tests/train/test_torchrec_estimator.py)."""

import numpy as np
import pytest

from neuroshard.planner.costs.analytic import DEVICE_BW, AnalyticModel, table_terms
from neuroshard.planner.costs.cost_models import CostModels
from neuroshard.planner.simulator import simulate
from neuroshard.problem import Problem
from neuroshard.types.errors import InputError
from neuroshard.types.plan import Plan
from neuroshard.types.tables import ShardTable, TableConfig

BINS = (1.0,) + (0.0,) * 16


def test_the_terms_by_hand():
    # d = 16 < 64: penalty 1.75; (1 + 2) for the backward; IR = ceil(8 x 100 x 2.5) = 2000,
    # LU = 4 x 100 x 2.5 x 32 = 32000 (at least 32 columns), OW = 4 x 100 x 16 = 6400, rows 1000
    [x] = table_terms([TableConfig(1000, 2.5, BINS, dim=16)], 100)
    np.testing.assert_allclose(x, np.array([2000, 32000, 6400, 1000]) * 1.75 * 3 / DEVICE_BW)
    [x] = table_terms([TableConfig(10, 0.5, BINS, dim=128)], 100)  # no penalty from 128 columns
    np.testing.assert_allclose(x, np.array([400, 25600, 51200, 10]) * 3 / DEVICE_BW)


def test_the_scorer_prices_plans_with_the_model(tmp_path):
    model = AnalyticModel(2, (0.002, 0.05, 0.1, 0.3), 2.0e6, 1024)
    tables = [ShardTable(0, 0, TableConfig(1000, 2.0, BINS, dim=64)),
              ShardTable(1, 1, TableConfig(5000, 4.0, BINS, dim=32)),
              ShardTable(2, 2, TableConfig(300, 1.0, BINS, dim=16))]
    each = model.table_compute([t.config for t in tables])
    models = CostModels.analytic_models(model)
    bd = simulate(tables, Plan((), ((0, 2), (1,))), models, Problem(2, 1.0))
    np.testing.assert_allclose(bd.compute, [each[0] + each[2], each[1]])
    per_dim = 4 * 1024 / 2.0e6
    np.testing.assert_allclose(bd.bw_comm, [80 * per_dim, 32 * per_dim])
    np.testing.assert_allclose(bd.fw_comm, bd.bw_comm)
    assert bd.cost == pytest.approx(max(each[0] + each[2] + 160 * per_dim, each[1] + 64 * per_dim))
    # at another batch, the formula's own: twice the batch, twice every term but the rows'
    at = simulate(tables, Plan((), ((0, 2), (1,))), models.at_batch(2048), Problem(2, 1.0))
    np.testing.assert_allclose(at.bw_comm, [2 * 80 * per_dim, 2 * 32 * per_dim])
    # the machine's drift: compute x1.5, exchanges x2 (one bandwidth: the geometric mean of fw and bw)
    slow = models.scaled(1.5, 2.0, 2.0)
    assert slow.analytic.coef == pytest.approx(tuple(1.5 * c for c in model.coef))
    assert slow.analytic.a2a_bw == pytest.approx(1.0e6)
    model.save(tmp_path / "est.json")
    assert AnalyticModel.load(tmp_path / "est.json", 2) == model
    with pytest.raises(InputError, match="fitted for 2 ranks, the plans are for 4"):
        AnalyticModel.load(tmp_path / "est.json", 4)
    (tmp_path / "bad.json").write_text('{"format": "neuroshard.torchrec_estimator.v1", "ndevices": 2, '
                                       '"coef": [0, 0, 0, 0], "a2a_bw": 1, "batch": 1}')
    with pytest.raises(InputError, match="every coefficient is 0"):
        AnalyticModel.load(tmp_path / "bad.json")


def test_a_collective_model_prices_the_spread_tables_at_the_estimators_batch():
    from dataclasses import replace

    from neuroshard.types.errors import InvalidPlanError
    from neuroshard.types.plan import Spread
    from tests.planner.test_simulator import hand_collectives

    model = AnalyticModel(2, (0.002, 0.05, 0.1, 0.3), 2.0e6, 1000)
    tables = [ShardTable(0, 0, TableConfig(1000, 2.0, BINS, dim=64)),
              ShardTable(1, 1, TableConfig(5000, 4.0, BINS, dim=32))]
    plan = Plan((), ((0,), ()), (Spread(1, "row_wise", (0, 1)),))
    with pytest.raises(InvalidPlanError, match="table 1 is row_wise: the paper runtime's cost models price"):
        simulate(tables, plan, CostModels.analytic_models(model), Problem(2, 1.0))
    # table 1's 1000 x 32 pooled outputs (the estimator's batch): reduce-scattered forward (0.1 + 0.032 ms), its
    # gradients all-gathered backward (0.2 + 0.064 ms), on both ranks
    bd = simulate(tables, plan, replace(CostModels.analytic_models(model), collectives=hand_collectives()),
                  Problem(2, 1.0))
    np.testing.assert_allclose(bd.collectives, [[0.132, 0.264], [0.132, 0.264]], rtol=1e-6)
