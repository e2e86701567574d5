"""The cost models as the planner holds them: the `CostModels` bundle and their checkpoints.

This module imports without torch (nor does any planner module except
`nets`): a user who only plans with the baselines never pays torch's import,
and the search itself runs on NumPy copies of the weights
(`planner.costs.scorer`). Loading a checkpoint imports torch and `planner.costs.nets`
(the `nn.Module` classes) on first use. Predictions are in ms.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from neuroshard.settings import add_flag
from neuroshard.types.costs import PlanError, RankNoise
from neuroshard.types.errors import ConfigError, InputError, NeuroShardError


@dataclass(frozen=True, eq=False)
class CostModels:
    """The three pre-trained cost models a plan's simulated cost comes from (DESIGN §6-7).

    `compute`: shard compute ms; `fw` / `bw`: per-device forward / backward
    all-to-all ms, both trained for `ndevices` devices (checked here once).
    `runtime`: None for the paper's execution (DESIGN §7), or a
    `torchrec_runtime.TorchRecRuntimeModel`: plans are then simulated and
    searched for TorchRec's execution (`--runtime torchrec`). `batch`: the
    global batch plans are costed at (`at_batch`): each model reads its
    inputs at their volume at that batch, relative to the batch its data was
    measured at (`batch_ratios`, `features.batch_scaled`). `analytic`: TorchRec's
    estimator fitted to the same data (`analytic.AnalyticModel`), which then
    prices every plan instead of the three nets (`analytic_models`).
    """

    compute: Any
    fw: Any
    bw: Any
    noise: Any = None  # uncertainty.NoiseModel; None: from the checkpoints' noise floors (or none)
    runtime: Any = None
    batch: int | None = None  # the global batch plans are costed at (`at_batch`); None: the models' own
    analytic: Any = None  # an `analytic.AnalyticModel` pricing plans instead of the nets (`analytic_models`)
    # a `collective_model.CollectiveModel`: on the paper's runtime, the collectives of row-wise and data-parallel
    # tables (None: such tables are not priced there)
    collectives: Any = None

    def __post_init__(self):
        for name, model, kind in (("fw", self.fw, "fw"), ("bw", self.bw, "bw")):
            if getattr(model, "kind", kind) != kind:
                raise ConfigError(f"{name} model", f"expected a {kind} comm model, got a {model.kind} one")
        if getattr(self.fw, "ndevices", None) != getattr(self.bw, "ndevices", None):
            raise ConfigError("comm models", f"forward model is for {self.fw.ndevices} devices, "
                                             f"backward for {self.bw.ndevices}")
        if self.runtime is not None and self.runtime.ndevices != self.ndevices:
            raise ConfigError("--runtime torchrec", f"the runtime model is for {self.runtime.ndevices} ranks, the "
                                                    f"comm models for {self.ndevices}")
        if self.collectives is not None and self.collectives.ndevices != self.ndevices:
            raise ConfigError("--collective_model", f"the collective model is for {self.collectives.ndevices} "
                                                     f"ranks, the comm models for {self.ndevices}")

    def with_collectives(self, path) -> "CostModels":
        """These models with the collective model at `path` (`collective_model.CollectiveModel`; None: as
        they are)."""
        from dataclasses import replace

        from neuroshard.planner.costs.collective_model import CollectiveModel

        return self if path is None else replace(self, collectives=CollectiveModel.load(path, self.ndevices))

    @property
    def global_batch(self) -> int:
        """The global batch plans are costed at: `batch`, else the one the compute model's data was measured
        at (a fitted estimator's own). ConfigError when neither is known (the collectives of spread tables scale
        with it)."""
        if self.batch is not None:
            batch = self.batch
        elif self.analytic is not None:
            batch = self.analytic.batch
        else:
            batch = model_batches(self.compute)[0]
        if batch is None:
            raise ConfigError("batch_size", "the compute model does not record the batch of its data: give the "
                                            "global batch the plans are for")
        return int(batch)

    def for_runtime(self, runtime: str, path=None) -> "CostModels":
        """These models costing plans for `runtime`: "paper" (without a runtime model) or "torchrec" (the
        runtime model at `path`, or the one these models already hold). ConfigError for another name or
        when "torchrec" has no runtime model."""
        from dataclasses import replace

        from neuroshard.planner.costs.runtime_model import TorchRecRuntimeModel

        if runtime == "paper":
            return self if self.runtime is None else replace(self, runtime=None)
        if runtime != "torchrec":
            raise ConfigError("--runtime", f"expected paper or torchrec, got {runtime!r}")
        if path is not None:
            return replace(self, runtime=TorchRecRuntimeModel.load(path, self.ndevices))
        if self.runtime is None:
            raise ConfigError("--runtime", "torchrec needs a TorchRec runtime model (--runtime_model; "
                                           "train_torchrec_cost_model.py fits one)")
        return self

    def scaled(self, compute: float = 1.0, fw: float = 1.0, bw: float = 1.0) -> "CostModels":
        """These models with every prediction of each part multiplied by its factor: the machine running
        `compute`x, `fw`x and `bw`x the times the cost data recorded (eval/drift.py measures the factors).
        The nets are copied (each member's `target_scale` scaled, the checkpoint's records kept); these
        models are not changed. The forward model's start delays come from the scaled compute times."""
        import copy
        from dataclasses import replace

        import torch

        factors = {"compute": compute, "fw": fw, "bw": bw}
        for name, f in factors.items():
            if not (isinstance(f, (int, float)) and f > 0 and f != float("inf")):
                raise ConfigError(f"{name} scale", f"must be a positive number, got {f!r}")
        if all(f == 1.0 for f in factors.values()):
            return self
        if self.analytic is not None:  # one all-to-all bandwidth: both exchanges' drift, their geometric mean
            return replace(self, analytic=self.analytic.scaled(compute, (fw * bw) ** 0.5))
        parts = {}
        for name, f in factors.items():
            model = copy.deepcopy(getattr(self, name))
            with torch.no_grad():
                for m in members(model):
                    m.target_scale.mul_(float(f))
            parts[name] = model
        return replace(self, **parts)

    def at_batch(self, batch: int | None) -> "CostModels":
        """These models costing plans at global batch `batch` (None: at the batch their data was measured
        at). ConfigError for a batch that is not an integer >= 1."""
        from dataclasses import replace

        if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
            raise ConfigError("batch_size", f"expected a global batch >= 1, got {batch!r}")
        return self if batch == self.batch else replace(self, batch=batch)

    @classmethod
    def analytic_models(cls, model) -> "CostModels":
        """Plans priced by a fitted TorchRec estimator (`analytic.AnalyticModel`) instead of the nets."""
        return cls(None, None, None, analytic=model)

    @property
    def batch_ratios(self) -> tuple[float, float]:
        """(compute, comm): the planning batch over the batch each model's data was measured at (1.0 without
        a planning batch, or for a model that does not record its batch)."""
        if self.batch is None or self.analytic is not None:  # the analytic formula takes the batch itself
            return 1.0, 1.0
        out = []
        for model in (self.compute, self.fw):
            ref = model_batches(model)[0]
            out.append(self.batch / ref if ref else 1.0)
        return out[0], out[1]

    @property
    def ndevices(self) -> int:
        """The device count the comm models (or the analytic model) were fitted for."""
        return int(self.analytic.ndevices if self.analytic is not None else self.fw.ndevices)

    @property
    def noise_model(self):
        """The relative noise of one measurement of each part (`uncertainty.NoiseModel`): `noise` if given,
        else from the noise floors the checkpoints recorded when they were trained (0 for a part without), and
        the share the plan's ranks have in common from the forward model's on-policy "rank_noise" (0 without)
        and the plan-level and per-rank errors calibrated on training tasks' plans from its "plan_error" (0
        without)."""
        from neuroshard.planner.costs.uncertainty import NoiseModel

        if self.noise is not None:
            return self.noise
        extra = getattr(self.fw, "checkpoint_extra", None) or {}
        rn, pe = extra.get("rank_noise"), extra.get("plan_error")  # checked when the checkpoint was loaded
        shared = RankNoise.from_json(rn).shared if rn else 0.0
        err = PlanError.from_json(pe) if pe else None
        return NoiseModel(noise_floor_sd(self.compute), noise_floor_sd(self.bw), noise_floor_sd(self.fw), shared,
                          err.sd if err else 0.0, err.rank if err else 0.0)

    @classmethod
    def load(cls, models_dir, ndevices: int) -> "CostModels":
        """The pipeline's layout: `<dir>/compute.pt`, `<dir>/comm_<n>_fw.pt`, `<dir>/comm_<n>_bw.pt`, and
        `<dir>/collectives_<n>.json` when it is there (`collective_model.default_path`)."""
        from neuroshard.planner.costs.collective_model import default_path

        d = Path(models_dir)
        if not d.is_dir():
            raise InputError(d, "models directory not found")
        models = cls.from_paths(d / "compute.pt", d / f"comm_{ndevices}_fw.pt", d / f"comm_{ndevices}_bw.pt",
                                ndevices)
        coll = default_path(d, ndevices)
        return models.with_collectives(coll if coll.exists() else None)

    @classmethod
    def from_paths(cls, compute, fw, bw, ndevices: int) -> "CostModels":
        """Load three checkpoints; the comm models must be trained for `ndevices` devices."""
        return cls(load_compute_model(compute), load_comm_model(fw, ndevices, "fw"),
                   load_comm_model(bw, ndevices, "bw"))


def model_batches(model) -> tuple[int | None, list[int]]:
    """(the reference batch, the batches its data covers) a model's checkpoint records ("batch" in its
    extra); for a checkpoint written before it did, the batch in its data dir's config.json if that dir is
    still there; (None, []) when unknown."""
    extra = getattr(model, "checkpoint_extra", None) or {}
    rec = extra.get("batch")
    if isinstance(rec, dict) and isinstance(rec.get("ref"), int):
        return rec["ref"], [int(b) for b in rec.get("sizes") or [rec["ref"]]]
    data_dir = extra.get("data_dir")
    if isinstance(data_dir, str) and Path(data_dir, "config.json").exists():
        from neuroshard.formats.cost_data import collection_batch

        try:
            ref = collection_batch(data_dir)
        except NeuroShardError:
            ref = None
        if ref is not None:
            return ref, [ref]
    return None, []


def noise_floor_sd(model) -> float:
    """The relative sd of one measurement from the noise floor `model`'s checkpoint recorded when it was trained
    (`uncertainty.sd_from_noise_floor`), 0.0 without one."""
    from neuroshard.planner.costs.uncertainty import sd_from_noise_floor

    nf = (getattr(model, "checkpoint_extra", None) or {}).get("noise_floor")
    return sd_from_noise_floor(nf["mean"]) if nf else 0.0


def default_comm_model_path(ndevices: int, kind: str) -> str:
    """Where the pipeline puts the comm model for `ndevices` devices (`models/comm_<n>_<kind>.pt`)."""
    return os.path.join("models", f"comm_{ndevices}_{kind}.pt")


def add_model_flags(parser) -> None:
    """--compute_model, --fw_comm_model, --bw_comm_model: the three cost models' checkpoints; --collective_model:
    the collectives of spread tables on the paper's runtime."""
    for name in ("compute_model", "fw_comm_model", "bw_comm_model", "collective_model"):
        add_flag(parser, name)


def model_paths(args, ndevices: int) -> tuple[str, str, str]:
    """(compute, fw, bw) checkpoints from the flags of `add_model_flags`; a comm model not named is
    `models/comm_<ndevices>_<fw|bw>.pt`."""
    return (str(args.compute_model), str(args.fw_comm_model or default_comm_model_path(ndevices, "fw")),
            str(args.bw_comm_model or default_comm_model_path(ndevices, "bw")))


# --------------------------------------------------------------------------- checkpoints


def _nets():
    from neuroshard.planner.costs import nets

    return nets


def members(model) -> list:
    """The models of an ensemble (`nets.CostEnsemble`), or `[model]` for a single one."""
    return list(model.members) if hasattr(model, "members") else [model]


def save_model(model, path, extra: Optional[dict] = None) -> None:
    """Write a self-describing checkpoint atomically (unique temp file + rename). An ensemble keeps every
    member's weights in "members" (and the first member's in "state_dict", as a single model's)."""
    import torch

    from neuroshard.formats.io import atomic_write

    nets = _nets()
    first = members(model)[0]
    if isinstance(first, nets.ComputeCostModel):
        mtype = "compute"
    elif isinstance(first, (nets.CommCostModel, nets.WorldCommModel)):
        mtype = "comm"
    else:
        raise TypeError(f"not a cost model: {type(model).__name__}")
    ckpt = {"type": mtype, "config": first.config(), "state_dict": first.state_dict(),
            "ndevices": getattr(first, "ndevices", None), "extra": extra or {}}
    if len(members(model)) > 1:
        ckpt["members"] = [m.state_dict() for m in members(model)]
    with atomic_write(path, "wb") as fh:
        torch.save(ckpt, fh)


def _first_line(e: BaseException, limit: int = 160) -> str:
    text = str(e).strip()
    text = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {text[:limit]}{'...' if len(text) > limit else ''}"


def load_model(path):
    """Rebuild a cost model from its checkpoint.

    Missing, unreadable, edited or mismatched files (another format, missing
    keys, shapes that do not fit the recorded sizes, non-finite weights) are
    InputError naming the file, in one line.
    """
    import torch

    path = str(path)
    if not os.path.exists(path):
        raise InputError(path, "model checkpoint not found")
    if os.path.isdir(path):
        raise InputError(path, "is a directory, expected a model checkpoint file")
    nets = _nets()
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickle, zip and torch errors all mean "not a checkpoint"
        raise InputError(path, f"not a NeuroShard cost model checkpoint ({_first_line(e)})") from None
    if not isinstance(ckpt, dict) or not {"type", "config", "state_dict"} <= set(ckpt):
        raise InputError(path, "not a NeuroShard cost model checkpoint (expected a dict with \"type\", "
                               "\"config\" and \"state_dict\")")
    mtype, cfg, state = ckpt["type"], ckpt["config"], ckpt["state_dict"]
    if mtype not in ("compute", "comm"):
        raise InputError(path, f"unknown model type {mtype!r} (expected 'compute' or 'comm')")
    if not isinstance(cfg, dict) or not isinstance(state, dict):
        raise InputError(path, "malformed checkpoint: \"config\" and \"state_dict\" must be dicts")
    states = ckpt.get("members", [state])
    if not isinstance(states, list) or not states or not all(isinstance(st, dict) for st in states):
        raise InputError(path, "malformed checkpoint: \"members\" must be a non-empty list of state dicts")
    models = []
    for k, st in enumerate(states):
        what = f"{mtype} model checkpoint" + (f" (member {k})" if len(states) > 1 else "")
        try:
            if mtype == "compute":
                model = nets.ComputeCostModel(st["feat_mean"], st["feat_std"], cfg["num_features"])
            elif cfg.get("world"):  # for any world size
                model = nets.WorldCommModel(cfg["kind"], st["f_mean"], st["f_std"], hidden=cfg["hidden"],
                                            sizes=cfg.get("sizes", ()))
            else:
                model = nets.CommCostModel(cfg["kind"], cfg["ndevices"], st["x_mean"], st["x_std"],
                                           wait_term=bool(cfg.get("wait_term", False)),
                                           hidden=cfg.get("hidden", nets.COMM_HIDDEN),
                                           wait_inputs=bool(cfg.get("wait_inputs", False)))
            model.load_state_dict(st)
        except KeyError as e:
            raise InputError(path, f"malformed {what}: missing {e.args[0]!r}") from None
        except (TypeError, ValueError, RuntimeError) as e:
            raise InputError(path, f"malformed {what} ({_first_line(e)})") from None
        for name, t in model.state_dict().items():
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise InputError(path, f"{what} holds non-finite values in {name!r}")
        models.append(model.eval())
    model = models[0] if len(models) == 1 else nets.CostEnsemble(models).eval()
    model.checkpoint_extra = ckpt.get("extra") if isinstance(ckpt.get("extra"), dict) else {}
    for key, record in (("rank_noise", RankNoise), ("plan_error", PlanError)):
        value = model.checkpoint_extra.get(key)
        if value is not None:
            try:
                record.from_json(value)
            except ValueError as e:
                raise InputError(path, f"malformed checkpoint: \"{key}\" {e}, got {value!r}") from None
    return model


def load_compute_model(path):
    model = load_model(path)
    if not isinstance(members(model)[0], _nets().ComputeCostModel):
        raise InputError(path, "expected a compute cost model, found a comm cost model")
    return model


def load_comm_model(path, ndevices: int, kind: str):
    """Load a comm model and check it was trained for `ndevices` devices and direction `kind`."""
    model = load_model(path)
    if not isinstance(members(model)[0], (_nets().CommCostModel, _nets().WorldCommModel)):
        raise InputError(path, "expected a comm cost model, found a compute cost model")
    if model.kind != kind:
        raise InputError(path, f"expected a {kind} comm model, found a {model.kind} one")
    if model.ndevices is not None and model.ndevices != ndevices:  # a world-size-aware model takes any
        raise InputError(path, f"comm model was trained for ndevices={model.ndevices}, asked for {ndevices}")
    return model


def require_models(models, alg: str) -> "CostModels":
    """`models` if it is a full CostModels bundle, else a one-line error naming the algorithm."""
    if not isinstance(models, CostModels):
        raise NeuroShardError(f"{alg} needs the compute, forward and backward cost models")
    return models
