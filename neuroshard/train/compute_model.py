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
from neuroshard.formats.cost_data import ComputeSample, collection_batch, read_compute_data, read_noise_floor
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


def train_compute_model(data_dir, cfg: TrainConfig, out_path, progress: bool = True, plan_data_dir=None) -> dict:
    """Train on `data_dir` (and the on-policy samples of `plan_data_dir`, `eval.onpolicy`, over the same
    augmented table list), write the checkpoint and its companions; return metrics and paths. The reference
    batch is `data_dir`'s (its config.json); samples at other batches are read at their lookup volume."""
    check_output_file("--out_path", out_path)
    configs, samples = read_compute_data(data_dir)
    ref = collection_batch(data_dir)
    samples = [s if s.batch is not None or ref is None else s._replace(batch=ref) for s in samples]
    plan_samples = []
    if plan_data_dir is not None:
        plan_configs, plan_samples = read_compute_data(plan_data_dir)
        if plan_configs != configs:
            raise InputError(Path(plan_data_dir) / "table_configs.json",
                             f"augmented table list differs from {data_dir}'s: on-policy data must be collected "
                             "on the same dataset with the same --max_dim")
        plan_batch = collection_batch(plan_data_dir) or ref
        plan_samples = [s if s.batch is not None else s._replace(batch=plan_batch) for s in plan_samples]
        samples = samples + plan_samples
    if len(samples) < 3:
        raise InputError(Path(data_dir) / "data.txt", f"need at least 3 samples to train, found {len(samples)}")
    x, mask, y, tables, shards = sample_tensors(configs, samples, ref)
    model, report = train_ensemble(lambda: build_model(configs), (x, mask), y, cfg, desc="compute model",
                                   progress=progress)
    result = {"data_dir": str(data_dir), "num_samples": len(samples), "ranges": compute_ranges(tables, shards)}
    if ref is not None:
        result["batch"] = {"ref": ref, "sizes": sorted({s.batch for s in samples if s.batch is not None})}
    if plan_data_dir is not None:
        result.update(plan_data_dir=str(plan_data_dir), plan_samples=len(plan_samples))
    noise = read_noise_floor(data_dir, "cost")
    if noise is not None:
        result["noise_floor"] = noise
    return save_trained(model, report, out_path, "compute cost model, test split", result)
