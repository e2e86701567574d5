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
    collection_batch,
    read_comm_data,
    read_noise_floor,
    read_rank_noise,
)
from neuroshard.planner.costs.extrapolation import comm_ranges
from neuroshard.planner.costs.nets import COMM_HIDDEN, WORLD_HIDDEN, CommCostModel, WorldCommModel, world_features
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
    return {kind: train_comm_model(samples, kind, out_path=paths[kind], data_dir=data_dir, progress=progress,
                                   extra=extra, **per_count_settings(kind, cfg, fw_wait, bw_linear, fw_wait_inputs))
            for kind in KINDS}


def per_count_settings(kind: str, cfg: TrainConfig, fw_wait: bool = True, bw_linear: bool = True,
                       fw_wait_inputs: bool = True) -> dict:
    """How `train_comm_models` trains the model of direction `kind` for one world size (`train_comm_model`'s
    `cfg`, `hidden`, and for the forward one `wait_term`, `wait_inputs`). The linear backward model is fitted to
    the mean time (squared error): its targets are noisy, and a relative loss fits below their mean, so plans'
    backward exchanges would be under-estimated."""
    if kind == "fw":
        return dict(cfg=cfg, wait_term=fw_wait, hidden=COMM_HIDDEN, wait_inputs=fw_wait_inputs)
    return dict(cfg=replace(cfg, loss="mse"), hidden=()) if bw_linear else dict(cfg=cfg, hidden=COMM_HIDDEN)


# --------------------------------------------------------------------------- any world size


def world_tensors(samples: Sequence[CommSample], kind: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exchanges of several world sizes padded to the largest: inputs [S, n] (bw: dims) or [S, 2n] (fw: dims then
    sleeps), each sample's size [S], and targets [S, n] ms, NaN at the padded ranks (the loop leaves them out)."""
    n = max(s.ndevices for s in samples)

    def pad(values, fill: float) -> list[float]:
        return list(values) + [fill] * (n - len(values))

    dims = torch.tensor([pad(s.dims, 0.0) for s in samples], dtype=torch.float32)
    x = dims if kind == "bw" else torch.cat([dims, torch.tensor([pad(s.sleeps, 0.0) for s in samples],
                                                                dtype=torch.float32)], dim=1)
    counts = torch.tensor([s.ndevices for s in samples], dtype=torch.long)
    y = torch.tensor([pad(s.fw if kind == "fw" else s.bw, float("nan")) for s in samples], dtype=torch.float32)
    return x, counts, y


def build_world_model(kind: str, x: torch.Tensor, counts: torch.Tensor, hidden: Sequence[int] = WORLD_HIDDEN,
                      sizes: Sequence[int] = ()) -> WorldCommModel:
    """An untrained world-size-aware model normalised with its real ranks' feature means and stds."""
    n = x.shape[1] // 2 if kind == "fw" else x.shape[1]
    feats = world_features(kind, x[:, :n], x[:, n:] if kind == "fw" else None, counts)
    real = feats[feats[..., 0] > 0]
    mean, std = real.mean(0), real.std(0) if len(real) > 1 else torch.ones(real.shape[1])
    std = torch.where(std > 1e-6, std, torch.ones_like(std))
    return WorldCommModel(kind, mean, std, hidden=hidden, sizes=sizes)


def read_world_data(data_dirs: Sequence) -> list[CommSample]:
    """The comm samples of several collections (each one world size, `collect_comm_cost_data.py --ndevices`)."""
    samples = []
    for d in data_dirs:
        found = read_comm_data(d)
        if not found:
            raise InputError(Path(d) / DATA_TXT, "no samples")
        samples += found
    return samples


def world_settings(kind: str, cfg: TrainConfig, bw_linear: bool = False) -> tuple[tuple[int, ...], TrainConfig]:
    """The hidden layers and training settings of a world-size-aware model of direction `kind`: both directions'
    networks `WORLD_HIDDEN` on `cfg`'s loss (the relative error by default), or with `bw_linear` the backward one
    linear in the features and fitted on the squared error, as the per-count backward model. (On exchanges of
    several sizes the per-rank backward times are not linear in the symmetric features a world model sees: the
    linear fit missed them by half again as much as a network did, docs/EXPERIMENTS.md.)"""
    if kind == "bw" and bw_linear:
        return (), replace(cfg, loss="mse")
    return WORLD_HIDDEN, cfg


def train_world_comm_models(data_dirs: Sequence, cfg: TrainConfig, fw_out_path=None, bw_out_path=None,
                            progress: bool = True, bw_linear: bool = False) -> dict:
    """Train one forward and one backward model over the comm data of several world sizes (`data_dirs`, one
    collection each): {"fw": summary, "bw": summary}, each summary also the test split's error by world size
    and, where a collection has a noise floor, its floor (a world size is judged against its own floor).
    `bw_linear`: `world_settings`. Output paths default to ``models/comm_fw.pt`` / ``_bw.pt`` (no device count:
    any). The checkpoints record the collections' batch (`CostModels.at_batch` reads plans' exchanges against it);
    InputError naming a collection measured at another batch than the first (a dim sum is bytes at one batch)."""
    samples = read_world_data(data_dirs)
    sizes = sorted({s.ndevices for s in samples})
    batch = collection_batch(data_dirs[0])
    for d in data_dirs[1:]:
        if collection_batch(d) != batch:
            raise InputError(Path(d) / "config.json", f"measured at batch {collection_batch(d)}, {data_dirs[0]} at "
                                                      f"{batch}: one model's collections need one batch")
    paths = {"fw": fw_out_path or "models/comm_fw.pt", "bw": bw_out_path or "models/comm_bw.pt"}
    for kind in KINDS:
        check_output_file(f"--{kind}_out_path", paths[kind])
    results = {}
    for kind in KINDS:
        x, counts, y = world_tensors(samples, kind)
        hidden, kcfg = world_settings(kind, cfg, bw_linear)
        model, report = train_ensemble(lambda: build_world_model(kind, x, counts, hidden, sizes), (x, counts), y,
                                       kcfg, desc=f"{kind} comm model (world sizes {sizes})", progress=progress)
        floors = {read_comm_data(d)[0].ndevices: read_noise_floor(d, kind) for d in data_dirs}
        result = {"kind": kind, "ndevices": None, "sizes": sizes, "data_dirs": [str(d) for d in data_dirs],
                  "num_samples": len(samples), "hidden": list(hidden), "loss": kcfg.loss,
                  "ranges": comm_ranges(samples), "by_size": _by_size(model, x, counts, y, kcfg, floors),
                  "batch": None if batch is None else {"ref": batch, "sizes": [batch]}}
        name = "forward" if kind == "fw" else "backward"
        results[kind] = save_trained(model, report, paths[kind], f"{name} comm model (world sizes "
                                     f"{', '.join(map(str, sizes))}), test split", result)
    return results


def _by_size(model, x: torch.Tensor, counts: torch.Tensor, y: torch.Tensor, cfg: TrainConfig,
             floors: dict) -> dict:
    """The test split's MAPE per world size, beside that size's noise floor (mean) where it has one."""
    from neuroshard.numerics import mape
    from neuroshard.train.loop import split_indices

    _, _, test = split_indices(len(y), cfg)
    with torch.no_grad():
        pred = model(x[test], counts[test]).numpy()
    out = {}
    for k in sorted(set(counts[test].tolist())):
        rows = (counts[test] == k).numpy()
        floor = floors.get(k)
        error = mape(pred[rows], y[test][rows].numpy())
        out[str(k)] = {"samples": int(rows.sum()), "mape": error,
                       "floor": None if floor is None else floor["mean"],
                       "over_floor": None if not floor or not floor["mean"] else error / floor["mean"]}
    return out


def check_world_comm_model(model, data_dir, kind: str) -> dict:
    """A model's error on every sample of a collection (a world size it may never have seen): its MAPE, the
    collection's noise floor and their ratio with its 95% bootstrap interval (`metrics.ratio_interval`)."""
    from neuroshard.numerics import mape, rel_errors
    from neuroshard.train.metrics import ratio_interval

    samples = read_world_data([data_dir])
    x, counts, y = world_tensors(samples, kind)
    with torch.no_grad():
        pred = model(x, counts).numpy() if isinstance(model, WorldCommModel) else model.predict(
            [s.dims for s in samples], [s.sleeps for s in samples] if kind == "fw" else None)
    floor = read_noise_floor(data_dir, kind)
    out = {"data_dir": str(data_dir), "ndevices": samples[0].ndevices, "samples": len(samples),
           "mape": mape(pred, y.numpy()), "floor": None if floor is None else floor["mean"]}
    if floor is not None and floor.get("mean"):
        out["over_floor"] = out["mape"] / floor["mean"]
        values = floor_values(data_dir, kind)
        if values:
            out["over_floor_interval"] = ratio_interval(rel_errors(pred, y.numpy()), values)
    return out


def floor_values(data_dir, kind: str) -> list[float]:
    """The per-entry differences of a collection's noise report, where it keeps them (`values`)."""
    from neuroshard.formats.io import load_json

    path = Path(data_dir) / "noise_floor.json"
    if not path.exists():
        return []
    stats = load_json(path).get("targets", {}).get(kind, {}).get("fresh_vs_stored", {})
    return list(stats.get("values") or [])
