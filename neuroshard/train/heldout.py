"""The held-out-table check of the compute cost model ("pre-train once, shard any tables").

Compute data collected with `--half_share > 0` holds shards whose tables all
come from one half of the dataset's tables (`data.split.table_halves`, seeded
by the collection's `--seed`), shards from the other half, and mixed shards.
The check trains the compute model (the same model, loss and loop as
`train_compute_cost_model.py`) on half-0 shards only, in `folds` folds, and
reports the test MAPE on:

* `in_distribution`: the half-0 shards each fold left out (tables it saw);
* `unseen_tables`: the half-1 shards (tables it never saw), mean over folds;
* `mixed`: shards that mix both halves, mean over folds;

and `unseen_vs_in` = unseen / in-distribution (1.0: no loss on new tables).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from neuroshard.checks import check_int
from neuroshard.data.split import sample_group, table_halves
from neuroshard.formats.cost_data import read_compute_data
from neuroshard.formats.io import RUN_CONFIG, read_json
from neuroshard.planner.costs.nets import table_features
from neuroshard.train.compute_model import build_model, shard_tensors
from neuroshard.train.loop import TrainConfig, train_model
from neuroshard.train.metrics import regression_metrics
from neuroshard.types.errors import ConfigError, InputError, NeuroShardError
from neuroshard.types.tables import dim_set

MIN_SHARDS = 10  # per group: fewer and the MAPEs say nothing


def shard_groups(samples, halves: np.ndarray) -> np.ndarray:
    """The group of every (ids, cost) sample: "half0", "half1" or "mixed" (`data.split.sample_group`)."""
    return np.array([sample_group(ids, halves) for ids, _ in samples])


def _check_run_config(path: Path, run, configs) -> tuple[int, int]:
    """(dataset tables, split seed) of a half-share collection's run config, checked against its table
    configs (`dim_set(max_dim)` per table, dim-major as `measure.compute_collect.augment_table_configs`);
    InputError naming the field otherwise."""
    if not isinstance(run, dict):
        raise InputError(path, "expected a JSON object (the collection's settings)")
    if not run.get("half_share"):
        raise InputError(path, "no --half_share: collect with collect_compute_cost_data.py "
                               "--half_share 0.67 to get shards of one half of the tables")
    for key in ("seed", "max_dim"):
        if key not in run:
            raise InputError(path, f"missing {key!r} (the collection's --{key}; the check needs it)")
        if isinstance(run[key], bool) or not isinstance(run[key], int):
            raise InputError(path, f"{key!r} must be an integer, got {run[key]!r}")
    try:
        dims = dim_set(run["max_dim"])
    except ValueError as e:
        raise InputError(path, f"'max_dim': {e}") from None
    num_tables = len(configs) // len(dims)
    ok = num_tables > 0 and len(configs) == num_tables * len(dims) and all(
        configs[j * num_tables + i].dim == d and configs[j * num_tables + i].row == configs[i].row
        for j, d in enumerate(dims) for i in range(num_tables))
    if not ok:
        raise InputError(path, f"max_dim {run['max_dim']} does not describe the {len(configs)} table configs "
                               f"beside it (expected each dataset table once per dim {dims}, dim-major): "
                               "a config.json from another collection?")
    return num_tables, run["seed"]


def heldout_check(data_dir, cfg: TrainConfig, folds: int = 5, progress: bool = True) -> dict:
    """Train on half-0 shards in `folds` folds; MAPE on seen, unseen and mixed shards (module doc).

    `cfg.num_samples` caps the samples used (a seeded shuffle, as in training); `folds` must be at least
    2 and at most the seen half's shards. A config.json that does not describe the data (no `seed`, a
    `max_dim` other than the table configs') and a non-finite result are one-line errors, never a result.
    """
    check_int("--folds", folds, 2)
    data_dir = Path(data_dir)
    configs, samples = read_compute_data(data_dir)
    run = read_json(data_dir / RUN_CONFIG)
    num_tables, seed = _check_run_config(data_dir / RUN_CONFIG, run, configs)
    if cfg.num_samples is not None and cfg.num_samples < len(samples):
        # as train_compute_cost_model.py: at most this many, after a seeded shuffle
        keep = np.sort(np.random.default_rng(cfg.seed).permutation(len(samples))[:cfg.num_samples])
        samples = [samples[i] for i in keep]
    groups = shard_groups(samples, table_halves(num_tables, seed))
    counts = {g: int((groups == g).sum()) for g in ("half0", "half1", "mixed")}
    if min(counts.values()) < MIN_SHARDS:
        raise InputError(data_dir / "data.txt", f"too few shards per group for the check: {counts} "
                                                f"(need {MIN_SHARDS} each; collect more"
                                                f"{' or raise --num_samples' if cfg.num_samples else ''})")
    if folds > counts["half0"]:
        raise ConfigError("--folds", f"{folds} folds of {counts['half0']} seen-half shards: at most one fold per "
                                     "shard")
    x_all, mask_all = shard_tensors(table_features(configs), [ids for ids, _ in samples])
    y_all = torch.tensor([c for _, c in samples], dtype=torch.float32)
    seen = np.flatnonzero(groups == "half0")
    unseen, mixed = np.flatnonzero(groups == "half1"), np.flatnonzero(groups == "mixed")
    fold_of = np.random.default_rng(cfg.seed).permutation(len(seen)) % folds
    oof = np.zeros(len(seen))
    unseen_mape, mixed_mape = [], []
    for k in range(folds):
        train = seen[fold_of != k]
        torch.manual_seed(cfg.seed + k)
        model = build_model(configs)
        # train_model splits what it gets into train / validation (early stopping) / a sliver of test
        fold_cfg = replace(cfg, train_ratio=0.85, valid_ratio=0.14, seed=cfg.seed + k, num_samples=None)
        train_model(model, (x_all[train], mask_all[train]), y_all[train], fold_cfg, desc=f"held-out fold {k + 1}",
                    progress=progress)
        with torch.no_grad():
            predict = lambda idx: model(x_all[idx], mask_all[idx]).numpy()  # noqa: E731
            oof[fold_of == k] = predict(seen[fold_of == k])
            unseen_mape.append(regression_metrics(predict(unseen), y_all[unseen].numpy())["mape"])
            mixed_mape.append(regression_metrics(predict(mixed), y_all[mixed].numpy())["mape"])
    in_dist = regression_metrics(oof, y_all[seen].numpy())["mape"]
    if not all(np.isfinite([in_dist, *unseen_mape, *mixed_mape])):
        raise NeuroShardError("the held-out check gave a non-finite MAPE (training diverged?); no result")
    result = {"data_dir": str(data_dir), "folds": folds, "shards": counts, "train_half": 0,
              "mape": {"in_distribution": in_dist, "unseen_tables": float(np.mean(unseen_mape)),
                       "mixed": float(np.mean(mixed_mape))},
              "unseen_fold_mapes": unseen_mape, "mixed_fold_mapes": mixed_mape}
    result["unseen_vs_in"] = result["mape"]["unseen_tables"] / in_dist if in_dist else None
    return result
