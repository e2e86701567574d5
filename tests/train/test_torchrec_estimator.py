"""Fitting TorchRec's estimator to cost data: known coefficients and bandwidth recovered from exact data."""

import numpy as np
import pytest

from neuroshard.formats.cost_data import CommSample, ComputeSample, write_comm_data, write_compute_data
from neuroshard.formats.io import write_json_atomic
from neuroshard.planner.costs.analytic import table_terms
from neuroshard.train.torchrec_estimator import comm_design, fit_analytic, fit_from_data
from neuroshard.types.tables import TableConfig

BINS = (1.0,) + (0.0,) * 16
TRUTH = np.array([0.002, 0.05, 0.1, 0.3])
BW = 2.0e6  # bytes per ms


def exact_data(seed=0):
    """Tables, compute samples and comm samples whose costs are the estimator's terms at known coefficients
    (`TRUTH`) and all-to-all bandwidth (`BW`)."""
    rng = np.random.default_rng(seed)
    configs = [TableConfig(int(rng.integers(100, 100_000)), float(rng.uniform(0.5, 20)), BINS,
                           dim=int(rng.choice([8, 32, 64, 128]))) for _ in range(40)]
    samples = []
    for _ in range(300):
        ids = tuple(int(i) for i in rng.integers(0, 40, size=int(rng.integers(1, 6))))
        batch = int(rng.choice([1024, 4096]))
        cost = float(table_terms([configs[i] for i in ids], batch).sum(axis=0) @ TRUTH)
        samples.append(ComputeSample(ids, cost, None if batch == 4096 else batch))
    comm = []
    for _ in range(30):
        dims = [int(d) for d in rng.integers(1, 60, size=4) * 4]
        sleeps = [float(s) for s in rng.uniform(0, 3, size=4)]
        fw = [4 * 512 * d / BW + max(sleeps) - s for d, s in zip(dims, sleeps)]  # plus the wait for the last
        comm.append(CommSample(dims, sleeps, fw, [4 * 512 * d / BW for d in dims]))
    return configs, samples, comm


def test_the_fit_recovers_known_coefficients_and_bandwidth():
    configs, samples, comm = exact_data()
    truth, bw = TRUTH, BW
    model = fit_analytic(configs, samples, 4096, [(comm, 512)], 4, seed=1)
    np.testing.assert_allclose(model.coef, truth, rtol=1e-6)
    assert model.a2a_bw == pytest.approx(bw, rel=1e-9)
    assert model.fit["compute"]["test_mape"] < 1e-6 and model.fit["comm"]["mape"] < 1e-9
    assert model.fit["compute"]["test_samples"] == 60 and model.batch == 4096
    x, y = comm_design([(comm[:1], 512)])
    assert len(x) == 8 and x[0] == 4 * 512 * comm[0].dims[0]
    with pytest.raises(ValueError, match="need at least 5 compute and 1 comm samples"):
        fit_analytic(configs, samples[:3], 4096, [(comm, 512)], 4)


def test_the_fit_from_data_dirs_reads_another_datasets_compute_data_as_the_compute_model_does(tmp_path):
    configs, samples, comm = exact_data(seed=1)
    first = [s for s in samples if max(s.ids) < 20]  # the first dataset: tables 0-19; the other's: 20-39
    other = [s._replace(ids=tuple(i - 20 for i in s.ids)) for s in samples if min(s.ids) >= 20]
    write_compute_data(tmp_path / "c", configs[:20], first)
    write_compute_data(tmp_path / "o", configs[20:], other)
    write_comm_data(tmp_path / "m", comm)
    for d, batch in (("c", 4096), ("o", 4096), ("m", 512)):
        write_json_atomic(tmp_path / d / "config.json", {"device": "cpu", "clock": "cpu", "batch_size": batch})
    model = fit_from_data(tmp_path / "c", tmp_path / "m", seed=1, extra_data_dirs=[tmp_path / "o"])
    np.testing.assert_allclose(model.coef, TRUTH, rtol=1e-6)
    assert model.source["compute_samples"] == len(first) and model.source["extra_compute_samples"] == len(other)
