"""Train the compute cost model from a compute cost data dir (DESIGN.md §6).

Glue between the data format and the shared pieces: `models.table_features`
and `ComputeCostModel`, `training.train_model`. The checkpoint gets a test
scatter PNG and a metrics JSON beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch

from neuroshard.cli import write_json_atomic
from neuroshard.compute_collect import NOISE_JSON
from neuroshard.formats import read_compute_data
from neuroshard.models import ComputeCostModel, feature_stats, save_model, table_features
from neuroshard.training import TrainConfig, scatter_plot, train_model
from neuroshard.types import InputError, TableConfig


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


def companion_paths(out_path) -> tuple[Path, Path]:
    """Scatter PNG and metrics JSON beside a checkpoint: models/compute.pt -> compute_test_scatter.png, compute_metrics.json."""
    out = Path(out_path)
    stem = out.with_suffix("") if out.suffix else out
    return Path(f"{stem}_test_scatter.png"), Path(f"{stem}_metrics.json")


def build_model(configs: Sequence[TableConfig]) -> ComputeCostModel:
    """An untrained model normalised with the feature mean/std of the augmented table list."""
    mean, std = feature_stats(table_features(configs))
    return ComputeCostModel(mean, std)


def train_compute_model(data_dir, cfg: TrainConfig, out_path) -> dict:
    """Train on `data_dir`, write the checkpoint and its companions; return metrics and paths."""
    configs, samples = read_compute_data(data_dir)
    if len(samples) < 3:
        raise InputError(Path(data_dir) / "data.txt", f"need at least 3 samples to train, found {len(samples)}")
    torch.manual_seed(cfg.seed)
    model = build_model(configs)
    x, mask = shard_tensors(table_features(configs), [ids for ids, _ in samples])
    y = torch.tensor([c for _, c in samples], dtype=torch.float32)
    report = train_model(model, (x, mask), y, cfg, desc="compute model")
    scatter, metrics_path = companion_paths(out_path)
    result = {"metrics": report.metrics, "best_epoch": report.best_epoch, "data_dir": str(data_dir),
              "num_samples": len(samples), "train_config": report.config, "scatter": str(scatter),
              "metrics_path": str(metrics_path)}
    noise = Path(data_dir) / NOISE_JSON
    if noise.exists():
        with open(noise) as fh:
            result["noise_floor"] = json.load(fh)["fresh_vs_stored"]
    save_model(model, out_path, extra={"metrics": report.metrics, "data_dir": str(data_dir)})
    scatter_plot(report.test_pred, report.test_true, scatter, "compute cost model, test split")
    write_json_atomic(metrics_path, {**result, "history": report.history})
    return result
