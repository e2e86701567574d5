"""Train the compute cost model from a compute cost data dir (DESIGN.md §6).

Glue between the data format and the shared pieces: the table features and
`nets.ComputeCostModel`, the training loop. The checkpoint gets a test
scatter PNG and a metrics JSON beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from neuroshard.checks import check_output_file
from neuroshard.formats.cost_data import ComputeSample, collection_batch, read_compute_sources, read_noise_floor
from neuroshard.planner.costs.extrapolation import compute_ranges
from neuroshard.planner.costs.features import batch_scaled
from neuroshard.planner.costs.nets import (
    ComputeCostModel,
    feature_stats,
    table_features,
)
from neuroshard.train.loop import TrainConfig, save_trained, train_ensemble
from neuroshard.types.errors import InputError
from neuroshard.types.tables import TableConfig

# The compute model's training defaults (train_compute_cost_model.py, heldout_check.py): the MAPE itself as the
# loss, in smaller steps. The targets' noise is skewed (a slow repeat now and then); a squared relative loss
# fitted the bulk of the shards a few percent low, and its test MAPE stood further above the noise floor
# (docs/EXPERIMENTS.md, "The compute model's loss and data").
TRAIN_DEFAULTS = {"loss": "rel_l1", "batch_size": 128}


def shard_tensors(feats: torch.Tensor, sets: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded per-shard features [S, K, F] and mask [S, K] (K = largest shard) from per-table `feats` [N, F]."""
    k = max((len(s) for s in sets), default=0)
    idx = torch.zeros((len(sets), max(k, 1)), dtype=torch.long)
    mask = torch.zeros((len(sets), max(k, 1)), dtype=torch.bool)
    for j, s in enumerate(sets):
        idx[j, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[j, :len(s)] = True
    x = feats[idx] * mask.unsqueeze(-1)
    return x, mask


def build_model(configs: Sequence[TableConfig]) -> ComputeCostModel:
    """An untrained model normalised with the feature mean/std of the augmented table list."""
    mean, std = feature_stats(table_features(configs))
    return ComputeCostModel(mean, std)


def sample_tensors(configs: Sequence[TableConfig], samples: Sequence[ComputeSample],
                   ref: int | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list, list]:
    """The model's inputs of compute samples: padded per-shard features [S, K, F], mask [S, K], targets [S],
    and the tables and shards the features come from (for the ranges). A sample at batch b reads its tables
    at b / `ref` times their pooling (`features.batch_scaled`); one without a batch (or without `ref`), at
    the reference batch."""
    def ratio(s: ComputeSample) -> float:
        return s.batch / ref if ref and s.batch else 1.0

    tables, offset = [], {}
    for r in sorted({ratio(s) for s in samples}):
        offset[r] = len(tables)
        tables += batch_scaled(configs, r)
    shards = [[offset[ratio(s)] + i for i in s.ids] for s in samples]
    x, mask = shard_tensors(table_features(tables), shards)
    y = torch.tensor([s.cost for s in samples], dtype=torch.float32)
    return x, mask, y, tables, shards


def train_compute_model(data_dir, cfg: TrainConfig, out_path, progress: bool = True, plan_data_dir=None,
                        extra_data_dirs: Sequence = ()) -> dict:
    """Train on `data_dir`, the on-policy samples of `plan_data_dir` (`eval.onpolicy`, over the same augmented
    table list) and the compute data of other datasets in `extra_data_dirs` (`formats.cost_data.
    read_compute_sources`); write the checkpoint and its companions; return metrics and paths. The reference
    batch is `data_dir`'s (its config.json); samples at other batches are read at their lookup volume."""
    check_output_file("--out_path", out_path)
    src = read_compute_sources(data_dir, plan_data_dir, extra_data_dirs)
    ref = collection_batch(data_dir)
    if len(src.samples) < 3:
        raise InputError(Path(data_dir) / "data.txt", f"need at least 3 samples to train, found {len(src.samples)}")
    x, mask, y, tables, shards = sample_tensors(src.configs, src.samples, ref)
    model, report = train_ensemble(lambda: build_model(src.configs), (x, mask), y, cfg, desc="compute model",
                                   progress=progress)
    result = {"data_dir": str(data_dir), "num_samples": len(src.samples), "ranges": compute_ranges(tables, shards)}
    if ref is not None:
        result["batch"] = {"ref": ref, "sizes": sorted({s.batch for s in src.samples if s.batch is not None})}
    if plan_data_dir is not None:
        result.update(plan_data_dir=str(plan_data_dir), plan_samples=src.plan_samples)
    if extra_data_dirs:
        result.update(extra_data_dirs=[str(d) for d in extra_data_dirs], extra_samples=src.extra_samples)
    noise = read_noise_floor(data_dir, "cost")
    if noise is not None:
        result["noise_floor"] = noise
    return save_trained(model, report, out_path, "compute cost model, test split", result)
