"""The one training loop, shared by the compute and the two comm cost models (DESIGN §6)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from neuroshard.checks import check_choice, check_float, check_int
from neuroshard.settings import Settings, common, setting
from neuroshard.train.metrics import regression_metrics
from neuroshard.types.errors import ConfigError, NeuroShardError

LOSSES = ("mse", "rel_mse", "rel_l1")


@dataclass(frozen=True)
class TrainConfig(Settings):
    """Training settings; defaults follow DESIGN §6 (0.8/0.1/0.1, Adam 1e-3, batch 512). Its fields are the
    training flags of train_compute_cost_model.py, train_comm_cost_model.py and heldout_check.py
    (where `--epochs` defaults to 1000 and `--loss` to rel_mse, see `add_args`)."""

    TITLE: ClassVar[str] = "training"

    train_ratio: float = setting(0.8, "share of the samples to train on")
    valid_ratio: float = setting(0.1, "share for validation (early stopping); the rest is the test split")
    batch_size: int = common("batch_size", 512, help="samples per optimiser step")
    lr: float = common("lr")
    epochs: int = setting(300, "at most; training stops early on validation", flag_default=1000)
    eval_every: int = setting(1, "epochs between validation checks")
    seed: int = common("seed", help="split shuffle and weight init")
    patience: Optional[int] = setting(50, "stop after this many validation checks without improvement")
    num_samples: Optional[int] = common("num_samples", help="use at most this many samples (after shuffling)")
    # "mse": MSE on targets divided by their mean (DESIGN §6). "rel_mse": MSE of the
    # relative error, which weighs cheap and expensive samples alike. "rel_l1": the mean
    # absolute relative error, the MAPE itself; its optimum is a median (weighted by
    # 1/target), which a slow outlier among the targets moves less than a squared loss.
    loss: str = setting("mse", "mse: squared error in units of the mean target; rel_mse: squared relative error; "
                               "rel_l1: absolute relative error", choices=LOSSES, flag_default="rel_mse")
    ensemble: int = common("ensemble", help="models per cost: member 0 as with one model, each other one from its own "
                                            "seed on a bootstrap resample of the training split (same validation and "
                                            "test splits); their mean is the prediction, their spread the models' "
                                            "uncertainty")

    def validate(self) -> None:
        """ConfigError (a NeuroShardError) naming the flag of the first bad setting."""
        check_float("--train_ratio", self.train_ratio, 0.0, 1.0, lo_open=True)
        check_float("--valid_ratio", self.valid_ratio, 0.0, 1.0)
        if self.train_ratio + self.valid_ratio >= 1:
            raise ConfigError("--train_ratio/--valid_ratio", f"train {self.train_ratio:g} + valid "
                                                             f"{self.valid_ratio:g} must leave a test split (< 1)")
        for name in ("batch_size", "epochs", "eval_every", "ensemble"):
            check_int(f"--{name}", getattr(self, name), 1)
        check_float("--lr", self.lr, 0.0, lo_open=True)
        check_int("--seed", self.seed)
        if self.patience is not None:
            check_int("--patience", self.patience, 1)
        if self.num_samples is not None:
            check_int("--num_samples", self.num_samples, 3)
        check_choice("--loss", self.loss, LOSSES)




@dataclass
class TrainReport:
    metrics: dict
    best_epoch: int
    test_pred: np.ndarray
    test_true: np.ndarray
    history: list = field(default_factory=list)
    config: dict = field(default_factory=dict)
    members: list | None = None  # an ensemble's: each member's metrics


def split_indices(n: int, cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded shuffle, optional cap to num_samples, then train/val/test index arrays."""
    perm = np.random.default_rng(cfg.seed).permutation(n)
    if cfg.num_samples is not None:
        perm = perm[:cfg.num_samples]
    n_train = int(len(perm) * cfg.train_ratio)
    n_val = int(len(perm) * cfg.valid_ratio)
    return perm[:n_train], perm[n_train:n_train + n_val], perm[n_train + n_val:]


@torch.no_grad()
def _predict(model: nn.Module, inputs, idx: np.ndarray, batch_size: int) -> torch.Tensor:
    outs = [model(*(x[idx[i:i + batch_size]] for x in inputs)) for i in range(0, len(idx), batch_size)]
    return torch.cat(outs) if outs else torch.zeros(0)


def train_model(model: nn.Module, inputs: tuple, targets: torch.Tensor, cfg: TrainConfig,
                desc: str = "train", progress: bool = True, member: int = 0) -> TrainReport:
    """Train `model` with MSE, keep the best-validation weights, report per-split metrics.

    `inputs[i][j]` is input i of sample j; `model(*batch_inputs)` predicts
    targets of shape [S] or [S, n] in ms. If the model has a `target_scale`
    buffer it is set to the mean |target| of the training split first, and
    the loss is taken on targets divided by it (so lr works at any ms scale),
    or on the relative error (`cfg.loss` "rel_mse": squared; "rel_l1": absolute).
    The model is left holding the best weights. `member` k > 0 of an ensemble
    trains from the seed `cfg.seed + k` on a bootstrap resample of the same
    training split (validation and test splits unchanged).
    """
    cfg.validate()
    threads = torch.get_num_threads()
    # These MLPs are tiny: intra-op threads only add synchronisation, and on a
    # busy machine made training several times slower (measured).
    torch.set_num_threads(1)
    try:
        return _train(model, inputs, targets, cfg, desc, progress, member)
    finally:
        torch.set_num_threads(threads)


def train_ensemble(build, inputs: tuple, targets: torch.Tensor, cfg: TrainConfig, desc: str = "train",
                   progress: bool = True) -> tuple[nn.Module, TrainReport]:
    """Train `cfg.ensemble` models made by `build()` (`train_model` with member 0, 1, ...); returns the
    model (a `nets.CostEnsemble` of them when more than one) and the report of their mean prediction
    (the history and best epoch are member 0's)."""
    from neuroshard.planner.costs.nets import CostEnsemble

    models, reports = [], []
    for k in range(cfg.ensemble):
        torch.manual_seed(cfg.seed + k)
        model = build()
        reports.append(train_model(model, inputs, targets, cfg, desc if cfg.ensemble == 1 else f"{desc} {k + 1}/"
                                   f"{cfg.ensemble}", progress, member=k))
        models.append(model)
    if len(models) == 1:
        return models[0], reports[0]
    ensemble = CostEnsemble(models).eval()
    targets = targets.float()
    metrics, preds = {}, {}
    for name, idx in zip(("train", "val", "test"), split_indices(len(targets), cfg)):
        p = _predict(ensemble, inputs, idx, 4096).numpy()
        preds[name] = p
        metrics[name] = regression_metrics(p, targets[idx].numpy())
    first = reports[0]
    report = TrainReport(metrics=metrics, best_epoch=first.best_epoch, test_pred=preds["test"],
                         test_true=first.test_true, history=first.history, config=first.config)
    report.members = [r.metrics for r in reports]
    return ensemble, report


def _train(model: nn.Module, inputs: tuple, targets: torch.Tensor, cfg: TrainConfig, desc: str,
           progress: bool, member: int = 0) -> TrainReport:
    torch.manual_seed(cfg.seed + member)
    targets = targets.float()
    tr, va, te = split_indices(len(targets), cfg)
    if member:  # a bootstrap resample of the training split
        tr = tr[np.random.default_rng([cfg.seed, member]).integers(0, len(tr), size=len(tr))]
    if len(tr) == 0:
        raise ValueError(f"no training samples (have {len(targets)})")
    val_idx = va if len(va) else tr  # tiny data sets: early-stop on train

    # targets may be missing (NaN): the ranks a world of fewer ranks lacks, in exchanges of several world sizes
    # padded to the largest (`nets.WorldCommModel`); they weigh nothing in the loss or the metrics
    known = torch.isfinite(targets[tr])
    scale = float(targets[tr][known].abs().mean()) if known.any() else 1.0
    scale = scale or 1.0
    if hasattr(model, "target_scale"):
        model.target_scale.fill_(scale)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed + member)
    tr_t = torch.as_tensor(tr)

    def loss_fn(pred: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
        known = torch.isfinite(true)
        if not known.all():
            pred, true = pred[known], true[known]
        err = (pred - true) / (scale if cfg.loss == "mse" else true.abs().clamp_min(1e-6 * scale))
        return torch.mean(err.abs() if cfg.loss == "rel_l1" else err ** 2)

    def val_loss() -> float:
        model.eval()
        pred = _predict(model, inputs, val_idx, 4096)
        model.train()
        return float(loss_fn(pred, targets[val_idx]))

    best_loss, best_epoch, best_state, since_best = float("inf"), 0, None, 0
    history = []
    bar = tqdm(range(1, cfg.epochs + 1), desc=desc, unit="epoch", leave=False, disable=not progress)
    model.train()
    for epoch in bar:
        perm = tr_t[torch.randperm(len(tr_t), generator=gen)]
        total = 0.0
        for i in range(0, len(perm), cfg.batch_size):
            idx = perm[i:i + cfg.batch_size]
            pred = model(*(x[idx] for x in inputs))
            loss = loss_fn(pred, targets[idx])
            if not torch.isfinite(loss):
                raise NeuroShardError(f"{desc}: training diverged (loss {float(loss)} at epoch {epoch}); "
                                      f"lower --lr (now {cfg.lr:g})")
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        if epoch % cfg.eval_every and epoch != cfg.epochs:
            continue
        vl = val_loss()
        if not math.isfinite(vl):
            raise NeuroShardError(f"{desc}: training diverged (validation loss {vl} at epoch {epoch}); "
                                  f"lower --lr (now {cfg.lr:g})")
        history.append({"epoch": epoch, "train_loss": total / len(perm), "val_loss": vl})
        bar.set_postfix(train=f"{total / len(perm):.4f}", val=f"{vl:.4f}")
        if vl < best_loss:
            best_loss, best_epoch, since_best = vl, epoch, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            since_best += 1
            if cfg.patience is not None and since_best >= cfg.patience:
                break
    bar.close()
    model.load_state_dict(best_state)
    model.eval()

    metrics = {}
    preds = {}
    for name, idx in (("train", tr), ("val", va), ("test", te)):
        p = _predict(model, inputs, idx, 4096).numpy()
        preds[name] = p
        metrics[name] = regression_metrics(p, targets[idx].numpy())
    return TrainReport(metrics=metrics, best_epoch=best_epoch, test_pred=preds["test"],
                       test_true=targets[te].numpy(), history=history, config=cfg.to_json())


def companion_paths(out_path) -> tuple[Path, Path]:
    """Scatter PNG and metrics JSON beside a checkpoint: models/compute.pt -> compute_test_scatter.png,
    compute_metrics.json."""
    out = Path(out_path)
    stem = out.with_suffix("") if out.suffix else out
    return Path(f"{stem}_test_scatter.png"), Path(f"{stem}_metrics.json")


def save_trained(model, report: TrainReport, out_path, title: str, result: dict) -> dict:
    """Write the checkpoint, the test scatter and the metrics JSON of a trained model.

    `result`: what the caller records about the run (data dir, sample
    count, noise floor...); returned with the metrics and paths added.
    """
    from neuroshard.formats.io import write_json_atomic
    from neuroshard.numerics import rel_errors
    from neuroshard.planner.costs.cost_models import save_model
    from neuroshard.train.metrics import ratio_interval, scatter_plot

    scatter, metrics_path = companion_paths(out_path)
    noise = result.get("noise_floor")
    if noise is not None and "values" in noise:
        # the per-entry differences give the MAPE / floor ratio its interval; the files keep the statistics
        errors = rel_errors(report.test_pred, report.test_true)
        if len(errors) and noise["values"] and noise["mean"] > 0:
            result = {**result, "mape_over_floor": ratio_interval(errors, noise["values"])}
        result = {**result, "noise_floor": {k: v for k, v in noise.items() if k != "values"}}
    result = {**result, "metrics": report.metrics, "best_epoch": report.best_epoch,
              "train_config": report.config, "checkpoint": str(out_path), "scatter": str(scatter),
              "metrics_path": str(metrics_path)}
    if report.members is not None:
        result["member_metrics"] = report.members
    save_model(model, out_path, extra={"metrics": report.metrics, "data_dir": result.get("data_dir"),
                                       "noise_floor": result.get("noise_floor"), "ranges": result.get("ranges"),
                                       "rank_noise": result.get("rank_noise"), "batch": result.get("batch")})
    scatter_plot(report.test_pred, report.test_true, scatter, title)
    write_json_atomic(metrics_path, {**result, "history": report.history})
    return result
