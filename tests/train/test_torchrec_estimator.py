"""Fitting TorchRec's estimator to cost data: known coefficients and bandwidth recovered from exact data."""

import numpy as np
import pytest

from neuroshard.formats.cost_data import CommSample, ComputeSample
from neuroshard.planner.costs.analytic import table_terms
from neuroshard.train.torchrec_estimator import comm_design, fit_analytic
from neuroshard.types.tables import TableConfig

BINS = (1.0,) + (0.0,) * 16


def test_the_fit_recovers_known_coefficients_and_bandwidth():
    rng = np.random.default_rng(0)
    configs = [TableConfig(int(rng.integers(100, 100_000)), float(rng.uniform(0.5, 20)), BINS,
                           dim=int(rng.choice([8, 32, 64, 128]))) for _ in range(40)]
    truth = np.array([0.002, 0.05, 0.1, 0.3])
    samples = []
    for _ in range(300):
        ids = tuple(int(i) for i in rng.integers(0, 40, size=int(rng.integers(1, 6))))
        batch = int(rng.choice([1024, 4096]))
        cost = float(table_terms([configs[i] for i in ids], batch).sum(axis=0) @ truth)
        samples.append(ComputeSample(ids, cost, None if batch == 4096 else batch))
    bw = 2.0e6  # bytes per ms
    comm = []
    for _ in range(30):
        dims = [int(d) for d in rng.integers(1, 60, size=4) * 4]
        sleeps = [float(s) for s in rng.uniform(0, 3, size=4)]
        fw = [4 * 512 * d / bw + max(sleeps) - s for d, s in zip(dims, sleeps)]  # plus the wait for the last
        comm.append(CommSample(dims, sleeps, fw, [4 * 512 * d / bw for d in dims]))
    model = fit_analytic(configs, samples, 4096, [(comm, 512)], 4, seed=1)
    np.testing.assert_allclose(model.coef, truth, rtol=1e-6)
    assert model.a2a_bw == pytest.approx(bw, rel=1e-9)
    assert model.fit["compute"]["test_mape"] < 1e-6 and model.fit["comm"]["mape"] < 1e-9
    assert model.fit["compute"]["test_samples"] == 60 and model.batch == 4096
    x, y = comm_design([(comm[:1], 512)])
    assert len(x) == 8 and x[0] == 4 * 512 * comm[0].dims[0]
    with pytest.raises(ValueError, match="need at least 5 compute and 1 comm samples"):
        fit_analytic(configs, samples[:3], 4096, [(comm, 512)], 4)
