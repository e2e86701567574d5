"""Fit TorchRec's estimator (`planner.costs.analytic`) to the cost data the neural models train on.

The same samples as `train_compute_cost_model.py` and `train_comm_cost_model.py`: the random compute
and comm data and, with `plan_data_dir`, the on-policy samples beside them. A compute sample at its
own batch is read at that batch (the formula takes the batch); the comm data at its collection's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from neuroshard.formats.cost_data import collection_batch, read_comm_data, read_compute_sources
from neuroshard.numerics import nnls
from neuroshard.planner.costs.analytic import TERMS, AnalyticModel, table_terms
from neuroshard.train.metrics import regression_metrics
from neuroshard.types.errors import InputError
from neuroshard.types.tables import TableConfig


def compute_design(configs: Sequence[TableConfig], samples, ref_batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(X [S, 4], y [S]) of compute samples (`formats.cost_data.ComputeSample`, indices into `configs`; a sample
    without a batch at `ref_batch`): each shard's summed table terms and its measured ms."""
    by_batch: dict[int, np.ndarray] = {}
    x = np.zeros((len(samples), len(TERMS)))
    for k, s in enumerate(samples):
        b = s.batch or ref_batch
        if b not in by_batch:
            by_batch[b] = table_terms(configs, b)
        x[k] = by_batch[b][list(s.ids)].sum(axis=0)
    return x, np.array([s.cost for s in samples], dtype=np.float64)


def comm_design(groups) -> tuple[np.ndarray, np.ndarray]:
    """(bytes [R], ms [R]) of comm samples' per-rank exchanges, forward (its wait for the last rank taken out)
    and backward: the pooled bytes a rank sends, 4 x batch x its dim sum. `groups`: (samples, the global
    batch they were measured at) pairs."""
    x, y = [], []
    for samples, batch in groups:
        for s in samples:
            _exchanges(s, batch, x, y)
    if not x:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(x), np.concatenate(y)


def _exchanges(s, batch: int, x: list, y: list) -> None:
    """Append one comm sample's per-rank (bytes, ms) of both exchanges to x and y."""
    dims = np.asarray(s.dims, dtype=np.float64)
    sleeps = np.asarray(s.sleeps, dtype=np.float64)
    wait = sleeps.max() - sleeps
    for times, minus in ((np.asarray(s.fw), wait), (np.asarray(s.bw), 0.0)):
        x.append(4.0 * batch * dims)
        y.append(np.maximum(times - minus, 0.0))


def fit_analytic(configs: Sequence[TableConfig], compute_samples, ref_batch: int, comm_groups, ndevices: int,
                 test_share: float = 0.2, seed: int = 0, source: dict | None = None) -> AnalyticModel:
    """Fit TorchRec's estimator (`planner.costs.analytic`) to compute and comm cost data: the coefficients by
    non-negative least squares on all but a seeded `test_share` of the compute samples (their MAPE and
    rank correlation reported), then on all of them; the all-to-all bandwidth through the origin on the
    comm samples of `comm_groups` ((samples, their global batch) pairs). ValueError when there is nothing
    to fit."""
    n_comm = sum(len(samples) for samples, _ in comm_groups)
    if len(compute_samples) < 5 or not n_comm:
        raise ValueError(f"need at least 5 compute and 1 comm samples, got {len(compute_samples)} and {n_comm}")
    x, y = compute_design(configs, compute_samples, ref_batch)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(test_share * len(y)))
    test, train = order[:n_test], order[n_test:]
    scale = x[train].max(axis=0)
    scale[scale == 0] = 1.0
    held = nnls(x[train] / scale, y[train]) / scale
    coef = nnls(x / scale, y) / scale
    cx, cy = comm_design(comm_groups)
    slope = float(cx @ cy / (cx @ cx)) if (cx @ cx) > 0 else 0.0
    if slope <= 0:
        raise ValueError("the comm samples give no positive time per byte")
    test_metrics = regression_metrics(x[test] @ held, y[test])
    fit = {"compute": {"train_mape": regression_metrics(x[train] @ held, y[train])["mape"],
                       "test_mape": test_metrics["mape"], "test_spearman": test_metrics["spearman"],
                       "test_samples": int(n_test), "mape_all": regression_metrics(x @ coef, y)["mape"]},
           "comm": {"mape": regression_metrics(cx * slope, cy)["mape"], "exchanges": int(len(cy))}}
    return AnalyticModel(int(ndevices), tuple(float(c) for c in coef), 1.0 / slope, int(ref_batch), fit,
                         dict(source or {}))


def fit_from_data(compute_dir, comm_dir, plan_data_dir=None, test_share: float = 0.2,
                  seed: int = 0, extra_data_dirs: Sequence = ()) -> AnalyticModel:
    """The fitted estimator of the data dirs (module doc; the compute samples read as the compute model reads
    them, `formats.cost_data.read_compute_sources`); InputError naming a dir without its batch or with too few
    samples."""
    ref = collection_batch(compute_dir)
    comm_batch = collection_batch(comm_dir)
    for d, b in ((compute_dir, ref), (comm_dir, comm_batch)):
        if b is None:
            raise InputError(Path(d) / "config.json", "no batch_size: the batch its samples were measured at is "
                                                      "unknown, and the estimator's terms need it")
    src = read_compute_sources(compute_dir, Path(plan_data_dir) / "compute" if plan_data_dir is not None else None,
                               extra_data_dirs)
    comm = read_comm_data(comm_dir)
    source = {"compute_data": str(compute_dir), "comm_data": str(comm_dir),
              "compute_samples": len(src.samples) - src.plan_samples - src.extra_samples, "comm_samples": len(comm)}
    groups = [(comm, comm_batch)]
    if plan_data_dir is not None:
        plan_batch = collection_batch(Path(plan_data_dir) / "compute") or ref
        plan_comm = read_comm_data(Path(plan_data_dir) / "comm", comm[0].ndevices if comm else None)
        source.update(plan_data=str(plan_data_dir), plan_compute_samples=src.plan_samples,
                      plan_comm_samples=len(plan_comm))
        groups.append((plan_comm, collection_batch(Path(plan_data_dir) / "comm") or plan_batch))
    if extra_data_dirs:
        source.update(extra_data_dirs=[str(d) for d in extra_data_dirs], extra_compute_samples=src.extra_samples)
    configs, samples = src.configs, src.samples
    if not comm:
        raise InputError(Path(comm_dir) / "data.txt", "no comm samples to fit the all-to-all bandwidth on")
    try:
        return fit_analytic(configs, samples, ref, groups, comm[0].ndevices, test_share, seed, source)
    except ValueError as e:
        raise InputError(compute_dir, str(e)) from None
