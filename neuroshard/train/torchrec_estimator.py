"""Fit TorchRec's estimator to the cost data the neural models train on (`planner.costs.analytic`).

The same samples as `train_compute_cost_model.py` and `train_comm_cost_model.py`: the random compute
and comm data and, with `plan_data_dir`, the on-policy samples beside them. A compute sample at its
own batch is read at that batch (the formula takes the batch); the comm data at its collection's.
"""

from __future__ import annotations

from pathlib import Path

from neuroshard.formats.cost_data import collection_batch, read_comm_data, read_compute_data
from neuroshard.planner.costs.analytic import AnalyticModel, fit_analytic
from neuroshard.types.errors import InputError


def fit_from_data(compute_dir, comm_dir, plan_data_dir=None, test_share: float = 0.2,
                  seed: int = 0) -> AnalyticModel:
    """The fitted estimator of the data dirs (module doc); InputError naming a dir without its batch or with
    too few samples."""
    configs, samples = read_compute_data(compute_dir)
    ref = collection_batch(compute_dir)
    comm_batch = collection_batch(comm_dir)
    for d, b in ((compute_dir, ref), (comm_dir, comm_batch)):
        if b is None:
            raise InputError(Path(d) / "config.json", "no batch_size: the batch its samples were measured at is "
                                                      "unknown, and the estimator's terms need it")
    comm = read_comm_data(comm_dir)
    source = {"compute_data": str(compute_dir), "comm_data": str(comm_dir), "compute_samples": len(samples),
              "comm_samples": len(comm)}
    if plan_data_dir is not None:
        plan_configs, plan_samples = read_compute_data(Path(plan_data_dir) / "compute")
        if plan_configs != configs:
            raise InputError(Path(plan_data_dir) / "compute" / "table_configs.json",
                             f"augmented table list differs from {compute_dir}'s: on-policy data must be collected "
                             "on the same dataset with the same --max_dim")
        plan_batch = collection_batch(Path(plan_data_dir) / "compute") or ref
        samples = samples + [s if s.batch is not None else s._replace(batch=plan_batch) for s in plan_samples]
        plan_comm = read_comm_data(Path(plan_data_dir) / "comm", comm[0].ndevices if comm else None)
        source.update(plan_data=str(plan_data_dir), plan_compute_samples=len(plan_samples),
                      plan_comm_samples=len(plan_comm))
        groups = [(comm, comm_batch), (plan_comm, collection_batch(Path(plan_data_dir) / "comm") or plan_batch)]
    else:
        groups = [(comm, comm_batch)]
    if not comm:
        raise InputError(Path(comm_dir) / "data.txt", "no comm samples to fit the all-to-all bandwidth on")
    try:
        return fit_analytic(configs, samples, ref, groups, comm[0].ndevices, test_share, seed, source)
    except ValueError as e:
        raise InputError(compute_dir, str(e)) from None
