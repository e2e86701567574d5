"""Train the forward and backward comm cost models from a comm cost data dir (DESIGN.md §6).

Glue between the data format (`formats.cost_data.read_comm_data`) and the shared pieces
(`nets.CommCostModel`, the training loop): forward model
``dims + sleeps -> per-device ms``, backward model ``dims -> per-device ms``.
Each checkpoint gets a test scatter PNG and a metrics JSON beside it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

import torch

from neuroshard.checks import check_output_file
from neuroshard.formats.cost_data import (
    DATA_TXT,
    CommSample,
    read_comm_data,
    read_noise_floor,
    read_rank_noise,
)
from neuroshard.planner.costs.extrapolation import comm_ranges
from neuroshard.planner.costs.nets import COMM_HIDDEN, CommCostModel
from neuroshard.train.loop import TrainConfig, save_trained, train_ensemble
from neuroshard.types.errors import InputError

KINDS = ("fw", "bw")


def comm_tensors(samples: Sequence[CommSample], kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs [S, 2n] (fw: dims then sleeps) or [S, n] (bw: dims) and targets [S, n] ms."""
    dims = [s.dims for s in samples]
    sleeps = [s.sleeps for s in samples] if kind == "fw" else None
    x = CommCostModel.make_input(kind, dims, sleeps).float()
    y = torch.tensor([s.fw if kind == "fw" else s.bw for s in samples], dtype=torch.float32)
    return x, y


def build_model(kind: str, ndevices: int, x: torch.Tensor, wait_term: bool = False,
                hidden: Sequence[int] = COMM_HIDDEN, wait_inputs: bool = False) -> CommCostModel:
    """An untrained model normalised with its MLP input's mean/std (std 1 for constant inputs)."""
    feats = CommCostModel.features(x, ndevices, wait_inputs)
    mean, std = feats.mean(0), feats.std(0) if len(feats) > 1 else torch.ones(feats.shape[1])
    std = torch.where(std > 1e-6, std, torch.ones_like(std))
    return CommCostModel(kind, ndevices, mean, std, wait_term=wait_term, hidden=hidden, wait_inputs=wait_inputs)


def train_comm_model(samples: Sequence[CommSample], kind: str, cfg: TrainConfig, out_path,
                     data_dir=None, wait_term: bool = False, progress: bool = True, extra: dict | None = None,
                     hidden: Sequence[int] = COMM_HIDDEN, wait_inputs: bool = False) -> dict:
    """Train one direction's model (`wait_term`, `wait_inputs`: see nets.CommCostModel, forward only;
    `hidden`: its hidden layers, () for a linear model), write checkpoint + scatter + metrics; return the
    summary."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    n = samples[0].ndevices
    x, y = comm_tensors(samples, kind)
    model, report = train_ensemble(lambda: build_model(kind, n, x, wait_term, hidden, wait_inputs), (x,), y, cfg,
                                   desc=f"{kind} comm model", progress=progress)
    result = {"kind": kind, "ndevices": n, "data_dir": None if data_dir is None else str(data_dir),
              "num_samples": len(samples), "wait_term": wait_term, "wait_inputs": wait_inputs,
              "hidden": list(hidden), "loss": cfg.loss,
              "ranges": comm_ranges(samples), **(extra or {})}
    noise = read_noise_floor(data_dir, kind) if data_dir is not None else None
    if noise is not None:
        result["noise_floor"] = noise
    name = "forward" if kind == "fw" else "backward"
    return save_trained(model, report, out_path, f"{name} comm model ({n} devices), test split", result)


def train_comm_models(data_dir, cfg: TrainConfig, fw_out_path=None, bw_out_path=None,
                      fw_wait: bool = True, progress: bool = True, plan_data_dir=None, bw_linear: bool = True,
                      fw_wait_inputs: bool = True) -> dict:
    """Train both models on `data_dir` (and the on-policy samples of `plan_data_dir`, `eval.onpolicy`);
    returns {"fw": summary, "bw": summary}. `fw_wait`: the forward model's analytic wait term;
    `fw_wait_inputs`: its MLP sees the ranks' waits for the last rank, not their sleeps;
    `bw_linear`: the backward model linear in the dim sums, not DESIGN's MLP (nets.CommCostModel), fitted on
    the squared error whatever `cfg.loss` says.

    Output paths default to upstream's ``models/comm_<n>_fw.pt`` / ``_bw.pt``
    with n the device count of the data.
    """
    samples = read_comm_data(data_dir)
    plan_samples = read_comm_data(plan_data_dir, samples[0].ndevices if samples else None) \
        if plan_data_dir is not None else []
    samples = samples + plan_samples
    if len(samples) < 3:
        raise InputError(Path(data_dir) / DATA_TXT, f"need at least 3 samples to train, found {len(samples)}")
    n = samples[0].ndevices
    paths = {"fw": fw_out_path or f"models/comm_{n}_fw.pt", "bw": bw_out_path or f"models/comm_{n}_bw.pt"}
    for kind in KINDS:
        check_output_file(f"--{kind}_out_path", paths[kind])
    extra = None
    if plan_data_dir is not None:
        extra = {"plan_data_dir": str(plan_data_dir), "plan_samples": len(plan_samples)}
        rank_noise = read_rank_noise(plan_data_dir)  # plans measured twice: how much noise the ranks share
        if rank_noise is not None:
            extra["rank_noise"] = rank_noise.to_json()
    # The linear backward model is fitted to the mean time (squared error): its targets are noisy, and a
    # relative loss fits below their mean, so plans' backward exchanges would be under-estimated.
    fw = dict(cfg=cfg, wait_term=fw_wait, hidden=COMM_HIDDEN, wait_inputs=fw_wait_inputs)
    bw = dict(cfg=replace(cfg, loss="mse"), hidden=()) if bw_linear else dict(cfg=cfg, hidden=COMM_HIDDEN)
    return {kind: train_comm_model(samples, kind, out_path=paths[kind], data_dir=data_dir, progress=progress,
                                   extra=extra, **(fw if kind == "fw" else bw))
            for kind in KINDS}
