"""Where a pipeline run keeps what its steps write (`Layout`, one `SetLayout` per task set), and what its steps'
flags derive from (`Run`: the preset, the problem, the layout, the run's switches)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from neuroshard.pipeline.presets import Preset, TaskSet
from neuroshard.problem import Problem
from neuroshard.types.errors import ConfigError

# the task generator's seeds: the evaluation's tasks, the training tasks (learned baselines, on-policy and runtime
# data), the unmeasured tasks of prediction-powered verdicts, and the per-round anchors' tasks (none of them the
# run's --seed, so runs of several seeds share them; every set draws with the same seeds, over its own dataset)
EVAL_TASK_SEED, TRAIN_TASK_SEED, UNMEASURED_SEED, ANCHOR_TASK_SEED = 0, 1, 1000, 2000

# what the steps write for one task set, under its folder
_SET_DIRS = {"dataset": "dataset", "tasks": "tasks", "unmeasured_tasks": "tasks_unmeasured",
             "train_tasks": "train_tasks", "anchor_tasks": "anchor_tasks", "compute_data": "compute_data",
             "plan_data": "plan_data", "sim": "sim", "unmeasured_sim": "sim_unmeasured", "anchor_sim": "anchor_sim",
             "hw": "hw", "torchrec_data": "torchrec_data", "torchrec_onpolicy": "torchrec_onpolicy",
             "sim_torchrec": "sim_torchrec", "torchrec": "torchrec"}
# what the steps write for the whole run: the comm and collective data, the models, the machine's speed
_RUN_DIRS = {"comm_data": "comm_data", "collective_data": "collective_data", "models": "models",
             "onpolicy_models": "models/onpolicy", "calibration": "calibration"}


@dataclass(frozen=True)
class SetLayout:
    """Where a run keeps one task set's dataset, tasks, data, plans and measurements: under `root`."""

    root: Path

    def __getattr__(self, name: str) -> Path:
        if name in _SET_DIRS:
            return self.root / _SET_DIRS[name]
        raise AttributeError(name)


@dataclass(frozen=True)
class Layout:
    """Where a run keeps what its steps write, under `out`: the shared data and models, and each task set's
    folder (`of`)."""

    out: Path

    def __getattr__(self, name: str) -> Path:
        if name in _RUN_DIRS:
            return self.out / _RUN_DIRS[name]
        raise AttributeError(name)

    def of(self, task_set: TaskSet) -> SetLayout:
        return SetLayout(self.out / task_set.folder if task_set.folder else self.out)

    def models_of(self, final: bool) -> Path:
        """The cost models the steps plan with: retrained on the on-policy data (`final`), or the random
        data's."""
        return self.onpolicy_models if final else self.models


@dataclass(frozen=True)
class Run:
    """What one pipeline run's flags derive from: the preset, its problem with the run's seed, the layout, the
    GPUs (None: CPU ranks) and the public dataset file (None: synthetic data)."""

    preset: Preset
    problem: Problem
    layout: Layout
    gpu_devices: str | None = None
    data: str | None = None
    torchrec_train: bool = False
    # added to every task set's seed (evaluation, training, unmeasured, anchor): 0 draws the preset's tasks
    task_seed: int = 0

    @property
    def first(self) -> TaskSet:
        return self.preset.first

    @property
    def sets(self) -> list[TaskSet]:
        """The run's task sets: the first, and the others on synthetic data (their datasets are synthetic)."""
        return [s for s in self.preset.task_sets if s is self.first or (self.data is None and s.tasks > 0)]

    def at(self, task_set: TaskSet) -> SetLayout:
        """Where the run keeps `task_set`'s outputs."""
        return self.layout.of(task_set)

    @property
    def onpolicy(self) -> bool:
        """The models are retrained on on-policy data (the first set's measured plans)."""
        return self.first.onpolicy_tasks > 0

    def unmeasured(self, task_set: TaskSet) -> bool:
        """Prediction-powered verdicts on `task_set`: the same planning on tasks that are not measured (off with
        refinement: refined plans are chosen by measurement, the unmeasured are not)."""
        return task_set.unmeasured_tasks > 0 and not self.preset.refine

    def onpolicy_of(self, task_set: TaskSet) -> bool:
        """`task_set`'s training tasks' plans are measured as on-policy data: the first set's where the preset
        asks; another set's only beside the first's, with its own compute data (its tables are the compute
        model's), and with the collective model where its plans need spread tables."""
        if task_set is self.first:
            return self.onpolicy
        return self.onpolicy and task_set.onpolicy_tasks > 0 and task_set.compute_samples > 0 \
            and (self.collectives or not task_set.spread)

    @property
    def collectives(self) -> bool:
        """The run times the collectives of row-wise and data-parallel tables (step 3e): a preset that asks, on
        more than one rank."""
        return self.preset.collective_samples > 0 and self.problem.ndevices > 1

    @property
    def anchors(self) -> bool:
        """The hardware steps measure plans of anchor tasks in every round (2d, 5e; eval/round_calibration.py)."""
        return self.preset.round_anchors > 0

    def torchrec_onpolicy(self, task_set: TaskSet) -> bool:
        """The runtime model is fitted again with NeuroShard's plans for its first fit over `task_set`'s training
        tasks (7c, 7d)."""
        return self.torchrec_train and task_set.torchrec_onpolicy and self.preset.torchrec_onpolicy_rounds > 0

    @property
    def learned(self) -> list[str]:
        """The learned baselines the run trains (those among the preset's algorithms)."""
        algs = None if self.preset.algs == "all" else self.preset.algs.split(",")
        return [a for a in ("dreamshard", "autoshard") if algs is None or a in algs]

    def models(self, final: bool = True) -> dict:
        """The three cost models' flags: the models the later steps plan with (`final`), or the random data's."""
        folder, n = self.layout.models_of(final and self.onpolicy), self.problem.ndevices
        return {"compute_model": folder / "compute.pt", "fw_comm_model": folder / f"comm_{n}_fw.pt",
                "bw_comm_model": folder / f"comm_{n}_bw.pt"}

    def device(self) -> dict:
        return {"gpu_devices": self.gpu_devices} if self.gpu_devices else {"device": "cpu"}

    def workers(self) -> dict:
        """One benchmark process per core for the compute measurements on CPU."""
        return {} if self.gpu_devices else {"num_workers": min(2, os.cpu_count() or 1)}

    def ranks(self) -> dict:
        """The ranks of a comm measurement: the GPUs, or the problem's devices as CPU ranks."""
        return self.device() if self.gpu_devices else {"ndevices": self.problem.ndevices}

    def problem_flags(self, *skip: str, seed: int | None = None) -> dict:
        """The problem's flags (`Problem.flags`) but its hosts (`hosts`), with another seed for the task
        generator's draws."""
        problem = self.problem if seed is None else self.problem.with_seed(seed)
        return problem.flags(skip + ("local_world_size",))

    def hosts(self) -> dict:
        """`--local_world_size` for the steps that time collectives, plan or run plans on hosts (3e, 4d, the
        planning and hardware steps, TorchRec training); nothing on one host."""
        return {"local_world_size": self.problem.local_world_size}

    @property
    def world_others(self) -> list[int]:
        """The device counts of the preset's world counts collected beside the problem's own (steps 3f-3h), in
        the preset's order; the own count's data is 3c's and 3e's."""
        return [k for k in self.preset.world_counts if k != self.problem.ndevices]

    @property
    def world_trained(self) -> list[int]:
        """The counts the models for any world size are trained on (4k, 4l): the world counts not held out."""
        return [k for k in self.preset.world_counts if k not in self.preset.world_held]

    def comm_data_at(self, count: int) -> Path:
        """The comm data of `count` ranks: 3c's for the problem's count, else 3f's."""
        return self.layout.comm_data if count == self.problem.ndevices else self.layout.out / f"comm_data_{count}"

    def collective_data_at(self, count: int) -> Path:
        """The collectives timed on `count` ranks: 3e's for the problem's count, else 3h's."""
        own = count == self.problem.ndevices
        return self.layout.collective_data if own else self.layout.out / f"collective_data_{count}"

    def ranks_at(self, count: int) -> dict:
        """The ranks of a measurement on `count` devices: the problem's (`ranks`), else the first `count` GPUs, or
        `count` CPU ranks."""
        if count == self.problem.ndevices:
            return self.ranks()
        if not self.gpu_devices:
            return {"ndevices": count}
        gpus = self.gpu_devices.split(",")
        if count > len(gpus):
            raise ConfigError("--gpu_devices", f"{self.gpu_devices} has {len(gpus)} GPUs; the preset's world counts "
                                               f"need {count}")
        return {"gpu_devices": ",".join(gpus[:count])}

    def collective_model(self) -> Path:
        """Where step 3e writes the collective model: beside the random data's models, where `CostModels.load`
        finds it too."""
        return self.layout.models / f"collectives_{self.problem.ndevices}.json"

    def world_collective_model(self) -> Path:
        """The collective model for any world size (4l), where `CostModels.load` finds it beside the comm models
        for any world size."""
        return self.layout.models / "collectives.json"

    def estimator(self) -> Path:
        """TorchRec's estimator fitted to the cost data (4j)."""
        return self.layout.models_of(self.onpolicy) / f"torchrec_estimator_{self.problem.ndevices}.json"

    def runtime_model(self) -> Path:
        """The TorchRec runtime model the steps plan with (7d's refit, else 7b's)."""
        return self.layout.models_of(self.onpolicy) / f"torchrec_runtime_{self.problem.ndevices}.json"

    def first_runtime_model(self) -> Path:
        """Step 7b's fit: with on-policy runtime data a first one beside the final model, else the model."""
        path = self.runtime_model()
        return path.with_name(f"{path.stem}_first.json") \
            if any(self.torchrec_onpolicy(s) for s in self.sets) else path
