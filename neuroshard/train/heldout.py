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

The held-out-batch check (`heldout_batch_check`) asks the same of a batch
size: compute data collected at several batches (`--batch_sizes`) trains the
model on every batch but one and reports its MAPE on the shards of that one,
beside its MAPE on left-out shards of the batches it saw and the collection's
noise floor (the mean relative difference of a re-measurement).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from neuroshard.checks import check_int
from neuroshard.data.split import sample_group, table_halves
from neuroshard.formats.cost_data import collection_batch, read_compute_data, read_noise_floor
from neuroshard.formats.io import RUN_CONFIG, read_json
from neuroshard.train.compute_model import build_model, sample_tensors
from neuroshard.train.loop import TrainConfig, train_model
from neuroshard.train.metrics import regression_metrics
from neuroshard.types.errors import ConfigError, InputError, NeuroShardError
from neuroshard.types.tables import dim_set

MIN_SHARDS = 10  # per group: fewer and the MAPEs say nothing


def shard_groups(samples, halves: np.ndarray) -> np.ndarray:
    """The group of every sample: "half0", "half1" or "mixed" (`data.split.sample_group`)."""
    return np.array([sample_group(s.ids, halves) for s in samples])


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
    x_all, mask_all, y_all, _, _ = sample_tensors(configs, samples, collection_batch(data_dir))
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


def heldout_batch_check(data_dir, cfg: TrainConfig, batch: int, progress: bool = True) -> dict:
    """Train on the shards of every batch but `batch` and test on `batch`'s (module doc). The reference batch
    is the collection's; a seeded 15% of the training batches' shards is left out for their own MAPE.
    InputError naming the data when fewer than `MIN_SHARDS` shards are on either side."""
    data_dir = Path(data_dir)
    configs, samples = read_compute_data(data_dir)
    ref = collection_batch(data_dir)
    if ref is None:
        raise InputError(data_dir / RUN_CONFIG, "no batch_size: the batch the samples were measured at is unknown")
    samples = [s if s.batch is not None else s._replace(batch=ref) for s in samples]
    sizes = sorted({s.batch for s in samples})
    if batch not in sizes:
        raise ConfigError("--heldout_batch", f"no shard at batch {batch} in {data_dir} (its batches: "
                                             f"{', '.join(map(str, sizes))}; collect with --batch_sizes)")
    x, mask, y, _, _ = sample_tensors(configs, samples, ref)
    test = np.flatnonzero([s.batch == batch for s in samples])
    rest = np.flatnonzero([s.batch != batch for s in samples])
    rng = np.random.default_rng(cfg.seed)
    rest = rng.permutation(rest)
    seen_test, train = rest[:int(0.15 * len(rest))], rest[int(0.15 * len(rest)):]
    if min(len(test), len(seen_test), len(train)) < MIN_SHARDS:
        raise InputError(data_dir / "data.txt", f"too few shards for the check: {len(test)} at batch {batch}, "
                                                f"{len(rest)} at the others (need {MIN_SHARDS} on each side and "
                                                "in the left-out share; collect more)")
    torch.manual_seed(cfg.seed)
    model = build_model(configs)
    train_model(model, (x[train], mask[train]), y[train], replace(cfg, train_ratio=0.85, valid_ratio=0.14,
                                                                    num_samples=None),
                desc="held-out batch", progress=progress)
    with torch.no_grad():
        mape = {name: regression_metrics(model(x[idx], mask[idx]).numpy(), y[idx].numpy())["mape"]
                for name, idx in (("seen_batches", seen_test), ("heldout_batch", test))}
    if not all(np.isfinite(list(mape.values()))):
        raise NeuroShardError("the held-out batch check gave a non-finite MAPE (training diverged?); no result")
    noise = read_noise_floor(data_dir, "cost")
    return {"data_dir": str(data_dir), "heldout_batch": batch, "batches": sizes, "reference_batch": ref,
            "shards": {"heldout_batch": len(test), "seen_batches_test": len(seen_test), "train": len(train)},
            "mape": mape, "noise_floor": None if noise is None else noise["mean"],
            "heldout_vs_seen": mape["heldout_batch"] / mape["seen_batches"] if mape["seen_batches"] else None}
