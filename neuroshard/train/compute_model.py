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
from neuroshard.formats.cost_data import read_compute_data, read_noise_floor
from neuroshard.planner.costs.extrapolation import compute_ranges
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


def train_compute_model(data_dir, cfg: TrainConfig, out_path, progress: bool = True, plan_data_dir=None) -> dict:
    """Train on `data_dir` (and the on-policy samples of `plan_data_dir`, `eval.onpolicy`, over the same
    augmented table list), write the checkpoint and its companions; return metrics and paths."""
    check_output_file("--out_path", out_path)
    configs, samples = read_compute_data(data_dir)
    plan_samples = []
    if plan_data_dir is not None:
        plan_configs, plan_samples = read_compute_data(plan_data_dir)
        if plan_configs != configs:
            raise InputError(Path(plan_data_dir) / "table_configs.json",
                             f"augmented table list differs from {data_dir}'s: on-policy data must be collected "
                             "on the same dataset with the same --max_dim")
        samples = samples + plan_samples
    if len(samples) < 3:
        raise InputError(Path(data_dir) / "data.txt", f"need at least 3 samples to train, found {len(samples)}")
    x, mask = shard_tensors(table_features(configs), [ids for ids, _ in samples])
    y = torch.tensor([c for _, c in samples], dtype=torch.float32)
    model, report = train_ensemble(lambda: build_model(configs), (x, mask), y, cfg, desc="compute model",
                                   progress=progress)
    result = {"data_dir": str(data_dir), "num_samples": len(samples),
              "ranges": compute_ranges(configs, [ids for ids, _ in samples])}
    if plan_data_dir is not None:
        result.update(plan_data_dir=str(plan_data_dir), plan_samples=len(plan_samples))
    noise = read_noise_floor(data_dir, "cost")
    if noise is not None:
        result["noise_floor"] = noise
    return save_trained(model, report, out_path, "compute cost model, test split", result)
