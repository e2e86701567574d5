"""The cost models as the planner holds them: the `CostModels` bundle and their checkpoints.

This module imports without torch (nor does any planner module except
`nets`): a user who only plans with the baselines never pays torch's import,
and the search itself runs on NumPy copies of the weights
(`planner.costs.scorer`). Loading a checkpoint imports torch and `planner.costs.nets`
(the `nn.Module` classes) on first use. Predictions are in ms.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from neuroshard.planner.costs.any_world import comm_paths, world_warning
from neuroshard.settings import add_flag
from neuroshard.types.costs import PlanError, RankNoise
from neuroshard.types.errors import ConfigError, InputError, NeuroShardError

logger = logging.getLogger(__name__)
ONPOLICY = "onpolicy"  # a run's models retrained on on-policy data: <run>/models/onpolicy


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
    # the TorchRec runtime model found with these models (`load_run`), held aside: `for_runtime("torchrec")`
    # costs plans with it; plans are costed for the paper's runtime until then
    torchrec_runtime: Any = None
    origin: str | None = None  # the folder the checkpoints came from (`load_run`), for `describe`

    def __post_init__(self):
        for name, model, kind in (("fw", self.fw, "fw"), ("bw", self.bw, "bw")):
            if getattr(model, "kind", kind) != kind:
                raise ConfigError(f"{name} model", f"expected a {kind} comm model, got a {model.kind} one")
        if getattr(self.fw, "ndevices", None) != getattr(self.bw, "ndevices", None):
            raise ConfigError("comm models", f"forward model is for {_count(self.fw)} devices, "
                                             f"backward for {_count(self.bw)}")
        if self.runtime is not None and self.runtime.ndevices != self.ndevices:
            raise ConfigError("--runtime torchrec", f"the runtime model is for {self.runtime.ndevices} ranks, the "
                                                    f"comm models for {_count(self.fw)}")
        coll = self.collectives
        if coll is not None and (coll.world if coll.ndevices is None else coll.ndevices) != self.ndevices:
            raise ConfigError("--collective_model", f"the collective model is for {_count(coll)} ranks, the comm "
                                                     f"models for {_count(self.fw)}")
        if self.torchrec_runtime is not None and self.torchrec_runtime.ndevices != self.ndevices:
            raise ConfigError("--runtime_model", f"the runtime model is for {self.torchrec_runtime.ndevices} "
                                                 f"ranks, the comm models for {_count(self.fw)}")

    @property
    def any_world(self) -> bool:
        """The comm models are for any world size (`nets.WorldCommModel`), bound to a count or not (`for_world`)."""
        return self.analytic is None and _world_model(self.fw) is not None

    @property
    def world_sizes(self) -> tuple[int, ...]:
        """The world sizes the comm models for any world size were trained on (() for per-count models)."""
        return tuple(_world_model(self.fw).sizes) if self.any_world else ()

    def for_world(self, ndevices: int) -> "CostModels":
        """These models pricing plans for `ndevices` ranks: comm models for any world size bound to that count
        (`nets.at_world`: the per-count models' interface, the count fed to the world network) and so is a
        collective model for any world size; per-count models as they are (a plan for another count is refused
        where it is costed). A count outside the world sizes the comm models were trained on is a warning
        (`world_warning`), never a refusal. ConfigError for a count that is not an integer >= 1."""
        from dataclasses import replace

        if not self.any_world or self.ndevices == ndevices:
            return self
        if isinstance(ndevices, bool) or not isinstance(ndevices, int) or ndevices < 1:
            raise ConfigError("ndevices", f"expected a device count >= 1, got {ndevices!r}")
        coll = self.collectives
        for note in (world_warning("comm models", self.world_sizes, ndevices),
                     world_warning("collective model", coll.sizes if coll is not None and coll.any_world else (),
                                   ndevices)):
            if note:
                warnings.warn(note, stacklevel=2)
        nets = _nets()
        return replace(self, fw=nets.at_world(_world_model(self.fw), ndevices),
                       bw=nets.at_world(_world_model(self.bw), ndevices),
                       collectives=coll if coll is None else coll.for_world(ndevices))

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
        runtime model at `path`, or the one these models already hold or were loaded with: `load_run`).
        ConfigError for another name or when "torchrec" has no runtime model."""
        from dataclasses import replace

        from neuroshard.planner.costs.runtime_model import TorchRecRuntimeModel

        if runtime == "paper":
            return self if self.runtime is None else replace(self, runtime=None)
        if runtime != "torchrec":
            raise ConfigError("--runtime", f"expected paper or torchrec, got {runtime!r}")
        if path is not None:
            return replace(self, runtime=TorchRecRuntimeModel.load(path, self.ndevices))
        if self.runtime is None and self.torchrec_runtime is not None:
            return replace(self, runtime=self.torchrec_runtime)
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
    def ndevices(self) -> int | None:
        """The device count the comm models (or the analytic model) were fitted for, or comm models for any world
        size are bound to; None for those not bound to one (`for_world`)."""
        n = self.analytic.ndevices if self.analytic is not None else self.fw.ndevices
        return None if n is None else int(n)

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
    def load(cls, models_dir, ndevices: int | None = None) -> "CostModels":
        """Cost models from a folder, in one of two ways.

        `load(folder, n)` of a folder that holds the checkpoints (`compute.pt`, `comm_<n>_fw.pt`,
        `comm_<n>_bw.pt`, or `comm_fw.pt`, `comm_bw.pt` for any world size: `comm_paths`): those models and
        their collective model beside them when it is there, as this call always did (the scripts name the
        folder they mean). Any other call -- a pipeline run's folder (`results/quick`), its `models` folder or
        `models/onpolicy`, `n` left out (comm models for any world size, not yet bound to a count, `for_world`,
        when the folder has them, else inferred when it holds comm models for one device count) -- is
        `load_run`: everything the run plans with."""
        d = Path(models_dir)
        if ndevices is not None and (d / "compute.pt").is_file():
            return cls._load_dir(d, ndevices)
        return cls.load_run(d, ndevices)

    @classmethod
    def _load_dir(cls, d: Path, ndevices: int) -> "CostModels":
        from neuroshard.planner.costs.collective_model import default_path

        fw, bw = comm_paths(d, ndevices)
        if fw != comm_paths(d, None)[0]:
            models = cls.from_paths(d / "compute.pt", fw, bw, ndevices)
            coll = default_path(d, ndevices)
            return models.with_collectives(coll if coll.exists() else None)
        coll = default_path(d, None)  # any world size: bound with its collective model (both warned of once)
        return cls._any_world(d, fw, bw).with_collectives(coll if coll.exists() else None).for_world(ndevices)

    @classmethod
    def _any_world(cls, d: Path, fw: Path, bw: Path) -> "CostModels":
        """The compute model of folder `d` and the comm models for any world size at `fw`, `bw`, not bound."""
        return cls(load_compute_model(d / "compute.pt"), load_comm_model(fw, None, "fw"),
                   load_comm_model(bw, None, "bw"))

    @classmethod
    def load_run(cls, folder, ndevices: int | None = None) -> "CostModels":
        """Everything a pipeline run plans with, from the run's folder, its `models` folder or `models/onpolicy`:
        the on-policy models where the run has them (`models/onpolicy/`, their checkpoints carrying the
        calibrated band), else the random data's (`models/`); the collective model (`collectives_<n>.json`,
        beside the random data's models); the TorchRec runtime model where one was fitted
        (`torchrec_runtime_<n>.json`, held aside: `for_runtime("torchrec")`). `ndevices`: the comm models' device
        count (None: the one the folder has; ConfigError when it has several; a count the on-policy models are not
        for: the random data's models, where they cover it). Comm models for any world size
        (`comm_fw.pt`, `comm_bw.pt`) are used for a count without its own pair (`comm_paths`), and with
        `ndevices` None, not bound to a count (`for_world`), with the collective model for any world size
        (`collectives.json`; no TorchRec runtime model: those are per count). InputError naming the folder
        when it holds no models. `describe()` says what was found; it is also logged (INFO)."""
        from dataclasses import replace

        from neuroshard.planner.costs import collective_model, runtime_model

        d = Path(folder)
        if not d.is_dir():
            raise InputError(d, "models directory not found")
        if (d / "models").is_dir():
            base, own = d / "models", None
        elif d.name == ONPOLICY and (d / "compute.pt").is_file():
            base, own = d.parent, d
        else:
            base, own = d, None
        if own is None:
            own = base / ONPOLICY if (base / ONPOLICY / "compute.pt").is_file() else base
            if ndevices is not None and own != base and not comm_paths(own, ndevices)[0].is_file() \
                    and comm_paths(base, ndevices)[0].is_file():
                own = base  # on-policy models are of the run's own count: another count is the random data's
        if not (own / "compute.pt").is_file():
            raise InputError(d, "no cost models here (compute.pt and comm_<n>_fw/bw.pt in it, in its models/ or "
                                "models/onpolicy/; a pipeline run writes them)")
        world = comm_paths(own, None)[0].is_file() and comm_paths(own, ndevices)[0] == comm_paths(own, None)[0]
        if ndevices is None and not world:
            counts = sorted({int(m.group(1)) for p in own.glob("comm_*_fw.pt")
                             if (m := re.fullmatch(r"comm_(\d+)_fw\.pt", p.name))})
            if not counts:
                raise InputError(own, "no comm models here (comm_<n>_fw.pt, or comm_fw.pt for any world size)")
            if len(counts) > 1:
                raise ConfigError("ndevices", f"{own} holds comm models for {', '.join(map(str, counts))} devices: "
                                              "give the device count")
            ndevices = counts[0]
        fw, bw = comm_paths(own, ndevices)
        models = cls._any_world(own, fw, bw) if world else cls.from_paths(own / "compute.pt", fw, bw, ndevices)
        found = {}
        for key, where, load in (("collectives", collective_model.default_path, collective_model.CollectiveModel),
                                 ("torchrec_runtime", runtime_model.default_path,
                                  runtime_model.TorchRecRuntimeModel)):
            if models.any_world and key == "torchrec_runtime":
                continue
            n = None if models.any_world else ndevices
            path = next((p for p in (where(own, n), where(base, n)) if p.is_file()), None)
            if path is not None:
                found[key] = load.load(path, n)
        models = replace(models, origin=str(own), **found)
        if world and ndevices is not None:  # bound with its collective model (both warned of once)
            models = models.for_world(ndevices)
        logger.info("%s", models.describe())
        return models

    def describe(self) -> str:
        """One line: where these models come from and what they hold (the collective model, the calibrated band,
        a TorchRec runtime model, the batch plans are costed at)."""
        if self.analytic is not None:
            return f"TorchRec's estimator fitted to the cost data, for {self.ndevices} devices"
        n = self.ndevices
        where = "" if self.origin is None else f" from {self.origin}" + (
            " (retrained on on-policy data)" if Path(self.origin).name == ONPOLICY else " (the random data's)")
        any_world = "for any world size (trained on {})"
        parts = [f"compute, comm models {any_world.format(', '.join(map(str, self.world_sizes)))}"
                 if self.any_world else f"compute, comm_{n} fw/bw"]
        coll = self.collectives
        if coll is not None:
            parts.append(f"collective model ({', '.join(coll.fits)})" + (
                f" {any_world.format(', '.join(map(str, coll.sizes)))}" if coll.any_world else ""))
        else:
            parts.append("no collective model (row-wise, table-row-wise and data-parallel tables not priced on "
                         "the paper's runtime)")
        extra = getattr(self.fw, "checkpoint_extra", None) or {}
        parts.append("calibrated band" if extra.get("plan_error") else "no calibrated band")
        runtime = self.runtime or self.torchrec_runtime
        if runtime is None:
            parts.append("no TorchRec runtime model")
        else:
            use = "costing plans" if self.runtime is not None else 'for_runtime("torchrec")'
            kinds = ", ".join(runtime.types) or "table-wise and column-wise plans"
            parts.append(f"TorchRec runtime model ({use}; fitted on {kinds})")
        if self.batch is not None:
            parts.append(f"costed at global batch {self.batch}")
        return f"cost models{where}{'' if n is None else f' for {n} devices'}: " + "; ".join(parts)

    @classmethod
    def from_paths(cls, compute, fw, bw, ndevices: int) -> "CostModels":
        """Load three checkpoints; the comm models must be trained for `ndevices` devices, or for any world size
        (then bound to `ndevices`: `for_world`)."""
        return cls(load_compute_model(compute), load_comm_model(fw, ndevices, "fw"),
                   load_comm_model(bw, ndevices, "bw")).for_world(ndevices)


def _world_model(model):
    """The model for any world size behind a comm model (bound to a count or not), None for a per-count one."""
    inner = getattr(model, "world_model", None)
    if inner is not None:
        return inner
    return model if model is not None and getattr(model, "ndevices", 0) is None else None


def _count(model) -> str:
    """A model's rank count for a message: its `ndevices`, the count it is bound to, or "any number of"."""
    n = getattr(model, "ndevices", None)
    n = getattr(model, "world", None) if n is None else n
    return "any number of" if n is None else str(n)


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


def load_comm_model(path, ndevices: int | None, kind: str):
    """Load a comm model and check it was trained for `ndevices` devices (None: for any world size) and direction
    `kind`."""
    model = load_model(path)
    if not isinstance(members(model)[0], (_nets().CommCostModel, _nets().WorldCommModel)):
        raise InputError(path, "expected a comm cost model, found a compute cost model")
    if model.kind != kind:
        raise InputError(path, f"expected a {kind} comm model, found a {model.kind} one")
    if model.ndevices is not None and ndevices is None:
        raise InputError(path, f"comm model was trained for ndevices={model.ndevices}, not for any world size "
                               "(train_comm_cost_model.py --world 1 trains one)")
    if model.ndevices is not None and model.ndevices != ndevices:  # a world-size-aware model takes any
        raise InputError(path, f"comm model was trained for ndevices={model.ndevices}, asked for {ndevices}")
    return model


def require_models(models, alg: str) -> "CostModels":
    """`models` if it is a full CostModels bundle, else a one-line error naming the algorithm."""
    if not isinstance(models, CostModels):
        raise NeuroShardError(f"{alg} needs the compute, forward and backward cost models")
    return models
