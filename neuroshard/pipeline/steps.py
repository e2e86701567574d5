"""The pipeline as a declared table of steps, numbered in the order they run.

Each `StepSpec` names its script (a step script at the repository root), what
it reads and writes (paths of the run's `Layout`), the flags it gets (a dict
derived from the run's settings: the preset, the problem, the layout) and
when it runs. `build_steps` evaluates the table for one run into the commands
the driver (`pipeline.run`) prints and runs; a flag dict becomes argv one
way only (`to_argv`).

Keys are "<phase><letter>" in run order: 1 dataset, 2 tasks, 3 cost data,
4 cost models and the learned baselines, 5 planning, 6 measuring the plans,
7 TorchRec training (opt-in).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from neuroshard.eval.drift import ANCHORS, DRIFT_COMM, DRIFT_COMPUTE
from neuroshard.eval.onpolicy import LAMBDA_JSON
from neuroshard.formats.side_files import ROUND_ANCHORS_JSON
from neuroshard.pipeline.presets import Preset
from neuroshard.problem import Problem
from neuroshard.torchrec.full_planner import FULL_ALG
from neuroshard.types.errors import NeuroShardError

# the task generator's seeds: the evaluation's tasks, the learned baselines' training tasks, the unmeasured
# tasks of prediction-powered verdicts, and the per-round anchors' tasks (none of them the run's --seed, so runs
# of several seeds share them)
EVAL_TASK_SEED, TRAIN_TASK_SEED, UNMEASURED_SEED, ANCHOR_TASK_SEED = 0, 1, 1000, 2000


@dataclass(frozen=True)
class Layout:
    """Where a run keeps what its steps write, under `out`."""

    out: Path

    def __getattr__(self, name: str) -> Path:
        if name in _DIRS:
            return self.out / _DIRS[name]
        raise AttributeError(name)

    def models_of(self, final: bool) -> Path:
        """The cost models the steps plan with: retrained on the on-policy data (`final`), or the random
        data's."""
        return self.onpolicy_models if final else self.models


_DIRS = {"dataset": "dataset", "tasks": "tasks", "unmeasured_tasks": "tasks_unmeasured", "train_tasks": "train_tasks",
         "compute_data": "compute_data", "comm_data": "comm_data", "collective_data": "collective_data",
         "models": "models", "anchor_tasks": "anchor_tasks", "anchor_sim": "anchor_sim",
         "onpolicy_models": "models/onpolicy", "plan_data": "plan_data", "calibration": "calibration", "sim": "sim",
         "unmeasured_sim": "sim_unmeasured", "hw": "hw", "torchrec_data": "torchrec_data",
         "sim_torchrec": "sim_torchrec", "torchrec": "torchrec", "oversize_dataset": "oversize/dataset",
         "oversize_compute_data": "oversize/compute_data", "oversize_anchor_tasks": "oversize/anchor_tasks",
         "oversize_anchor_sim": "oversize/anchor_sim",
         "oversize_tasks": "oversize/tasks", "oversize_sim": "oversize/sim", "oversize_hw": "oversize/hw",
         "oversize_sim_torchrec": "oversize/sim_torchrec", "oversize_torchrec": "oversize/torchrec",
         "oversize_train_tasks": "oversize/train_tasks", "oversize_torchrec_data": "oversize/torchrec_data",
         "oversize_torchrec_onpolicy": "oversize/torchrec_onpolicy", "oversize_plan_data": "oversize/plan_data"}


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
    def onpolicy(self) -> bool:
        return self.preset.onpolicy_tasks > 0

    @property
    def unmeasured(self) -> bool:
        """Prediction-powered verdicts: the same planning on tasks that are not measured (off with refinement:
        refined plans are chosen by measurement, the unmeasured are not)."""
        return self.preset.unmeasured_tasks > 0 and not self.preset.refine

    @property
    def oversize(self) -> bool:
        """Tasks beyond the paper's plan space (on the synthetic data: its second dataset has their tables)."""
        return self.preset.oversize_tasks > 0 and self.data is None

    @property
    def oversize_compute(self) -> bool:
        """The compute model also trains on shards of the second dataset's tables (step 3f)."""
        return self.oversize and self.preset.oversize_compute_samples > 0

    @property
    def oversize_onpolicy(self) -> bool:
        """The retrained compute model also learns from measured plans of the second dataset's training tasks,
        spread tables and all (step 4d2)."""
        return self.oversize_compute and self.onpolicy and self.preset.oversize_onpolicy_tasks > 0 \
            and _collectives(self)

    @property
    def anchors(self) -> bool:
        """The hardware steps measure plans of anchor tasks in every round (2f, 5f; eval/round_calibration.py)."""
        return self.preset.round_anchors > 0

    @property
    def oversize_anchors(self) -> bool:
        """The new set's hardware step measures plans of other tasks over its dataset in every round (2e, 5e)."""
        return self.oversize and self.anchors

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


def to_argv(flags: dict) -> list[str]:
    """A step's flags as argv: None left out, True a switch, a list repeats the flag, anything else its str."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(f"--{name}")
        elif isinstance(value, (list, tuple)):
            for v in value:
                argv += [f"--{name}", str(v)]
        else:
            argv += [f"--{name}", str(value)]
    return argv


def always(run: Run) -> bool:
    return True


@dataclass(frozen=True)
class StepSpec:
    """One row of the table: `inputs` and `outputs` (paths of the run), `flags` (what the script gets),
    `when` (does this run have the step), `extra` (argv appended as is: a preset's own flags for a script),
    `late` (flags known only once an earlier step ran: NeuroShard+'s lambda chosen on hardware)."""

    key: str
    title: str
    script: str
    inputs: Callable[[Run], list[Path]]
    outputs: Callable[[Run], list[Path]]
    flags: Callable[[Run], dict]
    when: Callable[[Run], bool] = always
    extra: Callable[[Run], tuple[str, ...]] = lambda run: ()
    late: Callable[[Run], dict] | None = None


@dataclass
class Step:
    """A step of one run, ready to run: the command (script and argv, relative to the repository root)."""

    key: str
    title: str
    argv: list[str]
    outputs: list[Path]
    inputs: list[Path] = field(default_factory=list)
    late: Callable[[], list[str]] | None = None

    def command(self) -> list[str]:
        return self.argv + (self.late() if self.late is not None else [])


# --------------------------------------------------------------------------- what the steps share


def task_flags(run: Run, dest: Path, count: int, seed: int) -> dict:
    """gen_tasks.py's flags for `count` tasks of the preset's kind into `dest`, drawn with the set's `seed`
    moved by the run's `--task_seed`."""
    p = run.preset
    return {"data_dir": run.layout.dataset, "out_dir": dest, "data_size": count, "T_range": p.t_range,
            **run.problem_flags(seed=seed + run.task_seed), "max_dim": p.max_dim}


ABLATION_ALGS = ("neuroshard_fitted", "torchrec_fitted", "torchrec_neural")


def with_algs(algs: str, *names: str) -> str:
    """The `--alg` list `algs` with those of `names` it does not name yet appended, in order."""
    have = algs.split(",")
    return ",".join([*have, *(a for a in names if a not in have)])


def evaluation_flags(run: Run, task_dir: Path, count: int, dataset: Path | None = None) -> dict:
    """The flags of the planning and measuring steps, for the first `count` tasks of `task_dir` over `dataset`
    (default: the run's): the preset's algorithms (and the ablation's cells, with the fitted estimator they
    need)."""
    lay = run.layout
    algs = run.preset.algs
    extra = {}
    if run.preset.ablation:
        algs = with_algs(algs, *ABLATION_ALGS)
        extra = {"torchrec_estimator": _estimator(run)}
    if _collectives(run):
        extra["collective_model"] = _collective_model(run)
    flags = {"data_dir": dataset or lay.dataset, "task_path": task_dir / "data.txt", **run.models(), "alg": algs,
             **run.problem_flags(), **run.hosts(), "max_tasks": count, "calibration": lay.calibration, **extra}
    return flags | {f"{a}_policy": lay.models / f"{a}.pt" for a in run.learned}


# the rule-based baseline the new set is judged against (whole tables, column-halving a table no device holds),
# so named there whatever the preset's algorithms
NEW_SET_BASELINE = "size_lookup_greedy"


def oversize_evaluation(run: Run) -> dict:
    """`evaluation_flags` for the tasks beyond the paper's plan space: all of them, over their own dataset, with
    the size-and-lookup greedy among the algorithms; with the collective model (step 3e) TorchRec's full planner
    too, whose row-wise and data-parallel plans it prices."""
    flags = evaluation_flags(run, run.layout.oversize_tasks, run.preset.oversize_tasks, run.layout.oversize_dataset)
    flags["alg"] = with_algs(flags["alg"], NEW_SET_BASELINE, *([FULL_ALG] if _collectives(run) else []))
    return flags


def chosen_lambda(run: Run) -> dict:
    """`--plus_lambda x` as chosen on hardware by the on-policy step (its lambda.json); nothing when it chose
    none (no NeuroShard+ plan fitted)."""
    from neuroshard.formats.side_files import read_lambda_choice

    path = run.layout.plan_data / LAMBDA_JSON
    if not path.exists():
        raise NeuroShardError(f"{path} not found: run the on-policy step first")
    choice = read_lambda_choice(path)
    return {} if choice.chosen is None else {"plus_lambda": f"{choice.chosen:g}"}


def comm_flags(run: Run) -> dict:
    p = run.preset
    return {"T_range": p.comm_t_range, "sleep_range": p.sleep_range, "spread_dist": p.spread_dist,
            "max_dim": p.max_dim, "batch_size": p.comm_batch_size, "warmup": p.warmup, "iters": p.iters,
            "seed": run.problem.seed, **run.ranks()}


def remeasure(key: str, title: str, dest: Callable[[Run], Path]) -> list[StepSpec]:
    """Collected shards and all-to-alls measured again (the same samples each time: the same seed), into
    `dest`'s drift files: how much slower or faster the machine runs now than when they were recorded."""
    return [
        StepSpec(f"{key[0]}{key[1]}", f"{title}: compute", "compute_noise_floor.py",
                 lambda r: [r.layout.compute_data], lambda r: [dest(r) / DRIFT_COMPUTE],
                 lambda r: {"data_dir": r.layout.compute_data, "dataset_dir": r.layout.dataset,
                            "num_samples": r.preset.drift_samples, "repeats": 1, "out_path": dest(r) / DRIFT_COMPUTE,
                            "seed": r.problem.seed, **r.device(), **r.workers()}),
        StepSpec(f"{key[0]}{chr(ord(key[1]) + 1)}", f"{title}: comm", "collect_comm_cost_data.py",
                 lambda r: [r.layout.comm_data], lambda r: [dest(r) / DRIFT_COMM],
                 lambda r: {"out_dir": r.layout.comm_data, "noise_floor": r.preset.drift_samples,
                            "noise_out": dest(r) / DRIFT_COMM, **comm_flags(r)}),
    ]


def anchors(key: str, when: str) -> StepSpec:
    """With on-policy data: the on-policy step's plans of training tasks measured again as the evaluation
    measures plans, under its models, just `when` ("before" or "after") it: the plan job's own speed
    (eval/drift.py). One round each: the median over the plans is what is read."""
    def dest(r: Run) -> Path:
        return r.layout.hw / ANCHORS[when]

    return StepSpec(key, f"plan-level speed {when} the evaluation", "eval.py",
                    lambda r: [r.layout.plan_data / "hw" / "plans.json"], lambda r: [dest(r) / "summary.json"],
                    lambda r: {"data_dir": r.layout.dataset, "task_path": r.layout.train_tasks / "data.txt",
                               **r.models(), "alg": "all", **r.problem_flags(), **r.hosts(),
                               "max_tasks": r.preset.onpolicy_tasks,
                               "calibration": r.layout.calibration, "plans": r.layout.plan_data / "hw" / "plans.json",
                               "out_dir": dest(r), "warmup": r.preset.eval_warmup, "iters": r.preset.eval_iters,
                               "repeats": 1, **r.device(), "quiet": True, "no_progress": True},
                    when=lambda r: r.onpolicy)


def _onpolicy(run: Run) -> bool:
    return run.onpolicy


def _torchrec(run: Run) -> bool:
    return run.torchrec_train


def _onpolicy_runtime(run: Run) -> bool:
    """The runtime model is fitted twice, the second time with NeuroShard's plans for the first (7b2, 7b3)."""
    return _torchrec(run) and run.oversize and run.preset.torchrec_onpolicy_rounds > 0


def _no_alg(flags: dict) -> dict:
    return {k: v for k, v in flags.items() if k != "alg"}


# --------------------------------------------------------------------------- the table

STEPS: list[StepSpec] = [
    # 1: the dataset
    StepSpec("1", "dataset", "gen_dlrm_data.py", lambda r: [],
             lambda r: [r.layout.dataset / "table_configs.json", r.layout.dataset / "data.pt"],
             lambda r: ({"data": r.data, "out_dir": r.layout.dataset} if r.data else
                        {"synthetic": True, "num_tables": r.preset.num_tables, "batch_size": r.preset.batch_size,
                         "max_rows": r.preset.max_rows, "seed": 0, "out_dir": r.layout.dataset})),
    StepSpec("1b", "dataset with tables larger than a device and hot ones", "gen_dlrm_data.py", lambda r: [],
             lambda r: [r.layout.oversize_dataset / "table_configs.json", r.layout.oversize_dataset / "data.pt"],
             lambda r: {"synthetic": True, "num_tables": r.preset.oversize_tables, "batch_size": r.preset.batch_size,
                        "max_rows": r.preset.max_rows, "large_tables": r.preset.oversize_large,
                        "large_rows": r.preset.large_rows, "hot_tables": r.preset.oversize_hot, "seed": 0,
                        "out_dir": r.layout.oversize_dataset, "no_progress": True},
             when=lambda r: r.oversize),
    # 2: tasks
    StepSpec("2a", "tasks", "gen_tasks.py", lambda r: [r.layout.dataset], lambda r: [r.layout.tasks / "data.txt"],
             lambda r: task_flags(r, r.layout.tasks, r.preset.num_tasks, EVAL_TASK_SEED)),
    StepSpec("2b", "tasks for prediction-powered verdicts (not measured)", "gen_tasks.py",
             lambda r: [r.layout.dataset], lambda r: [r.layout.unmeasured_tasks / "data.txt"],
             lambda r: task_flags(r, r.layout.unmeasured_tasks, r.preset.unmeasured_tasks, UNMEASURED_SEED),
             when=lambda r: r.unmeasured),
    # the learned baselines and the on-policy data learn on their own tasks, never the evaluation's
    StepSpec("2c", "training tasks", "gen_tasks.py", lambda r: [r.layout.dataset],
             lambda r: [r.layout.train_tasks / "data.txt"],
             lambda r: task_flags(r, r.layout.train_tasks, r.preset.policy_tasks, TRAIN_TASK_SEED)),
    StepSpec("2d", "tasks with a table larger than a device and a hot one", "gen_tasks.py",
             lambda r: [r.layout.oversize_dataset], lambda r: [r.layout.oversize_tasks / "data.txt"],
             lambda r: task_flags(r, r.layout.oversize_tasks, r.preset.oversize_tasks, EVAL_TASK_SEED)
             | {"data_dir": r.layout.oversize_dataset, "oversize": 1, "hot": 1},
             when=lambda r: r.oversize),
    # the new set's per-round anchors: tasks of their own over its dataset
    StepSpec("2e", "anchor tasks over the second dataset", "gen_tasks.py",
             lambda r: [r.layout.oversize_dataset], lambda r: [r.layout.oversize_anchor_tasks / "data.txt"],
             lambda r: task_flags(r, r.layout.oversize_anchor_tasks, r.preset.round_anchors, ANCHOR_TASK_SEED)
             | {"data_dir": r.layout.oversize_dataset, "oversize": 1, "hot": 1},
             when=lambda r: r.oversize_anchors),
    # step 6b's per-round anchors: tasks no model, policy or estimator ever trained on, so that the models price
    # their plans as they price the evaluation's (the on-policy step's plans, which the retrained models fit,
    # are priced at the speed of the hour they were measured in)
    StepSpec("2f", "anchor tasks", "gen_tasks.py", lambda r: [r.layout.dataset],
             lambda r: [r.layout.anchor_tasks / "data.txt"],
             lambda r: task_flags(r, r.layout.anchor_tasks, r.preset.round_anchors, ANCHOR_TASK_SEED),
             when=lambda r: r.anchors),
    # TorchRec's runtime data over the second dataset's tables (7a2) are plans of training tasks of their own
    StepSpec("2g", "training tasks over the second dataset", "gen_tasks.py", lambda r: [r.layout.oversize_dataset],
             lambda r: [r.layout.oversize_train_tasks / "data.txt"],
             lambda r: task_flags(r, r.layout.oversize_train_tasks, r.preset.torchrec_data_tasks, TRAIN_TASK_SEED)
             | {"data_dir": r.layout.oversize_dataset, "oversize": 1, "hot": 1},
             when=lambda r: r.oversize),
    # 3: cost data
    StepSpec("3a", "compute cost data", "collect_compute_cost_data.py", lambda r: [r.layout.dataset],
             lambda r: [r.layout.compute_data / "data.txt"],
             lambda r: compute_collection(r, r.layout.dataset, r.layout.compute_data, r.preset.compute_samples)),
    StepSpec("3b", "compute noise floor", "compute_noise_floor.py", lambda r: [r.layout.compute_data],
             lambda r: [r.layout.compute_data / "noise_floor.json"],
             lambda r: {"data_dir": r.layout.compute_data, "dataset_dir": r.layout.dataset,
                        "num_samples": r.preset.noise_samples, "seed": r.problem.seed, **r.device(), **r.workers()}),
    StepSpec("3c", "comm cost data", "collect_comm_cost_data.py", lambda r: [],
             lambda r: [r.layout.comm_data / "data.txt"],
             lambda r: {"out_dir": r.layout.comm_data, "data_size": r.preset.comm_samples, **comm_flags(r)}),
    StepSpec("3d", "comm noise floor", "collect_comm_cost_data.py", lambda r: [r.layout.comm_data],
             lambda r: [r.layout.comm_data / "noise_floor.json"],
             lambda r: {"out_dir": r.layout.comm_data, "noise_floor": r.preset.noise_samples, **comm_flags(r)}),
    StepSpec("3e", "collective cost data and model", "collect_collective_cost_data.py", lambda r: [],
             lambda r: [_collective_model(r)],
             lambda r: {"out_dir": r.layout.collective_data, "out_path": _collective_model(r),
                        "data_size": r.preset.collective_samples, "noise_samples": r.preset.collective_noise,
                        "batch_size": r.preset.batch_size, "warmup": r.preset.warmup, "iters": r.preset.iters,
                        "seed": r.problem.seed, **r.ranks(), **r.hosts(), "no_progress": True},
             when=lambda r: _collectives(r)),
    StepSpec("3f", "compute cost data on the second dataset's tables", "collect_compute_cost_data.py",
             lambda r: [r.layout.oversize_dataset], lambda r: [r.layout.oversize_compute_data / "data.txt"],
             lambda r: compute_collection(r, r.layout.oversize_dataset, r.layout.oversize_compute_data,
                                          r.preset.oversize_compute_samples),
             when=lambda r: r.oversize_compute),
    # 4: cost models, first on the random cost data
    StepSpec("4a", "compute cost model", "train_compute_cost_model.py",
             lambda r: [r.layout.compute_data, *_second_compute(r)],
             lambda r: [r.models(final=False)["compute_model"]],
             lambda r: {"data_dir": r.layout.compute_data, **_extra_compute(r), "epochs": r.preset.epochs,
                        "out_path": r.models(final=False)["compute_model"], **_ensemble(r), "seed": r.problem.seed}),
    StepSpec("4b", "compute model on unseen tables", "heldout_check.py", lambda r: [r.layout.compute_data],
             lambda r: [r.layout.models / "compute_heldout.json"],
             lambda r: {"data_dir": r.layout.compute_data, "epochs": r.preset.epochs,
                        "out_path": r.layout.models / "compute_heldout.json", "seed": r.problem.seed}),
    StepSpec("4c", "comm cost models", "train_comm_cost_model.py", lambda r: [r.layout.comm_data],
             lambda r: [r.models(final=False)["fw_comm_model"], r.models(final=False)["bw_comm_model"]],
             lambda r: {"data_dir": r.layout.comm_data, "epochs": r.preset.epochs,
                        "fw_out_path": r.models(final=False)["fw_comm_model"],
                        "bw_out_path": r.models(final=False)["bw_comm_model"], "bw_linear": 1, **_ensemble(r),
                        "seed": r.problem.seed}),
    # the plans of training tasks, made with the random data's models, measured as eval.py measures: on-policy
    # cost data, and NeuroShard+'s lambda chosen on hardware (eval/onpolicy.py)
    StepSpec("4d", "on-policy cost data", "collect_plan_cost_data.py",
             lambda r: [r.layout.train_tasks / "data.txt", *r.models(final=False).values()],
             lambda r: [r.layout.plan_data / "compute" / "data.txt", r.layout.plan_data / "comm" / "data.txt",
                        r.layout.plan_data / LAMBDA_JSON],
             lambda r: {"data_dir": r.layout.dataset, "task_path": r.layout.train_tasks / "data.txt",
                        "eval_task_path": r.layout.tasks / "data.txt", **r.models(final=False),
                        "alg": r.preset.onpolicy_algs, "plus_lambdas": r.preset.plus_lambdas,
                        "max_tasks": r.preset.onpolicy_tasks, **r.problem_flags(), **r.hosts(),
                        "max_dim": r.preset.max_dim,
                        "out_dir": r.layout.plan_data, "warmup": r.preset.eval_warmup, "iters": r.preset.eval_iters,
                        "repeats": r.preset.onpolicy_repeats, **r.device(), "quiet": True, "no_progress": True},
             when=_onpolicy),
    # the same over the second dataset's training tasks, with the planners that make row-wise and data-parallel
    # tables: a rank's row blocks in the plan job's kernel, which the random shards do not price right
    StepSpec("4d2", "on-policy compute data of the second dataset", "collect_plan_cost_data.py",
             lambda r: [r.layout.oversize_train_tasks / "data.txt", r.layout.oversize_tasks / "data.txt",
                        *r.models(final=False).values(), _collective_model(r)],
             lambda r: [r.layout.oversize_plan_data / "compute" / "data.txt"],
             lambda r: {"data_dir": r.layout.oversize_dataset, "task_path": r.layout.oversize_train_tasks / "data.txt",
                        "eval_task_path": r.layout.oversize_tasks / "data.txt", **r.models(final=False),
                        "collective_model": _collective_model(r), "alg": r.preset.oversize_onpolicy_algs,
                        "max_tasks": r.preset.oversize_onpolicy_tasks, **r.problem_flags(), **r.hosts(),
                        "max_dim": r.preset.max_dim, "out_dir": r.layout.oversize_plan_data,
                        "warmup": r.preset.eval_warmup, "iters": r.preset.eval_iters,
                        "repeats": r.preset.onpolicy_repeats, **r.device(), "quiet": True, "no_progress": True},
             when=lambda r: r.oversize_onpolicy),
    StepSpec("4e", "compute cost model, random + on-policy data", "train_compute_cost_model.py",
             lambda r: [r.layout.compute_data, r.layout.plan_data / "compute", *_second_compute(r, onpolicy=True)],
             lambda r: [r.models()["compute_model"]],
             lambda r: {"data_dir": r.layout.compute_data, "plan_data_dir": r.layout.plan_data / "compute",
                        **_extra_compute(r, onpolicy=True), "epochs": r.preset.epochs,
                        "out_path": r.models()["compute_model"], **_ensemble(r), "seed": r.problem.seed},
             when=_onpolicy),
    StepSpec("4f", "comm cost models, random + on-policy data", "train_comm_cost_model.py",
             lambda r: [r.layout.comm_data, r.layout.plan_data / "comm"],
             lambda r: [r.models()["fw_comm_model"], r.models()["bw_comm_model"]],
             lambda r: {"data_dir": r.layout.comm_data, "plan_data_dir": r.layout.plan_data / "comm",
                        "epochs": r.preset.epochs, "fw_out_path": r.models()["fw_comm_model"],
                        "bw_out_path": r.models()["bw_comm_model"], "bw_linear": 1, **_ensemble(r),
                        "seed": r.problem.seed},
             when=_onpolicy),
    # the retrained models' error on those plans beyond their predicted spread: the plan-level term of the
    # reported band, and the random data's models' per-rank compute error on them (out of sample), recorded in
    # the forward checkpoint (planner/costs/uncertainty.py)
    StepSpec("4g", "band calibrated on the on-policy plans", "calibrate_band.py",
             lambda r: [r.layout.plan_data / "hw" / "results.json", *r.models().values()],
             lambda r: [r.layout.onpolicy_models / f"plan_error_{r.problem.ndevices}.json"],
             lambda r: {"data_dir": r.layout.dataset, "task_path": r.layout.train_tasks / "data.txt",
                        "eval_task_path": r.layout.tasks / "data.txt",
                        "results": r.layout.plan_data / "hw" / "results.json", "models": r.layout.onpolicy_models,
                        "heldout_models": r.layout.models, **r.problem_flags("seed")},
             when=_onpolicy),
    # the learned baselines train against the simulator of the models the evaluation plans with
    StepSpec("4h", "DreamShard policy", "train_dreamshard.py", lambda r: [r.layout.train_tasks / "data.txt"],
             lambda r: [r.layout.models / "dreamshard.pt"], lambda r: _policy_flags(r, "dreamshard"),
             when=lambda r: "dreamshard" in r.learned, extra=lambda r: r.preset.dreamshard_args),
    StepSpec("4i", "AutoShard policy", "train_autoshard.py", lambda r: [r.layout.train_tasks / "data.txt"],
             lambda r: [r.layout.models / "autoshard.pt"], lambda r: _policy_flags(r, "autoshard"),
             when=lambda r: "autoshard" in r.learned, extra=lambda r: r.preset.autoshard_args),
    # TorchRec's estimator fitted to the same cost data as the models the evaluation plans with: the analytic
    # rival of the cost-model ablation
    StepSpec("4j", "TorchRec's estimator fitted to the same cost data", "fit_torchrec_estimator.py",
             lambda r: [r.layout.compute_data, r.layout.comm_data, *_second_compute(r, onpolicy=True)]
             + ([r.layout.plan_data] if r.onpolicy else []),
             lambda r: [_estimator(r)],
             lambda r: {"data_dir": r.layout.compute_data, "comm_data_dir": r.layout.comm_data,
                        "plan_data_dir": r.layout.plan_data if r.onpolicy else None,
                        **_extra_compute(r, onpolicy=True),
                        "out_path": _estimator(r),
                        "seed": r.problem.seed},
             when=lambda r: r.preset.ablation),
    # 5: planning. Just before it, the machine's speed now: the planning and measuring steps scale the models by
    # it (--calibration)
    *remeasure("5a", "calibration", lambda r: r.layout.calibration),
    StepSpec("5c", "simulator evaluation", "eval_simulator.py", lambda r: [r.layout.tasks / "data.txt"],
             lambda r: [r.layout.sim / "summary.json"],
             lambda r: {**evaluation_flags(r, r.layout.tasks, r.preset.eval_tasks), "out_dir": r.layout.sim,
                        **_refine(r)},
             late=lambda r: chosen_lambda(r) if r.onpolicy else {}),
    StepSpec("5d", "simulator on the unmeasured tasks", "eval_simulator.py",
             lambda r: [r.layout.unmeasured_tasks / "data.txt"], lambda r: [r.layout.unmeasured_sim / "summary.json"],
             lambda r: {**evaluation_flags(r, r.layout.unmeasured_tasks, r.preset.unmeasured_tasks),
                        "out_dir": r.layout.unmeasured_sim, "quiet": True},
             when=lambda r: r.unmeasured, late=lambda r: chosen_lambda(r) if r.onpolicy else {}),
    StepSpec("5e", "plans of the second dataset's anchor tasks", "eval_simulator.py",
             lambda r: [r.layout.oversize_anchor_tasks / "data.txt"],
             lambda r: [r.layout.oversize_anchor_sim / "plans.json"],
             lambda r: oversize_evaluation(r)
             | {"task_path": r.layout.oversize_anchor_tasks / "data.txt", "max_tasks": r.preset.round_anchors,
                "out_dir": r.layout.oversize_anchor_sim, "quiet": True, "no_progress": True},
             when=lambda r: r.oversize_anchors, late=lambda r: chosen_lambda(r) if r.onpolicy else {}),
    StepSpec("5f", "plans of the anchor tasks", "eval_simulator.py", lambda r: [r.layout.anchor_tasks / "data.txt"],
             lambda r: [r.layout.anchor_sim / "plans.json"],
             lambda r: {**evaluation_flags(r, r.layout.anchor_tasks, r.preset.round_anchors),
                        "out_dir": r.layout.anchor_sim, "quiet": True, "no_progress": True},
             when=lambda r: r.anchors, late=lambda r: chosen_lambda(r) if r.onpolicy else {}),
    # 6: measuring the plans eval_simulator.py made (planned once, by the same code), with the plan job's speed
    # measured on training tasks' plans just before and after it, and the machine's drift right after it
    anchors("6a", "before"),
    StepSpec("6b", "hardware evaluation", "eval.py",
             lambda r: [r.layout.sim / "plans.json"] + ([r.layout.anchor_sim / "plans.json"] if r.anchors else []),
             lambda r: [r.layout.hw / "summary.json"],
             lambda r: {**evaluation_flags(r, r.layout.tasks, r.preset.eval_tasks),
                        "plans": r.layout.sim / "plans.json",
                        "out_dir": r.layout.hw, "warmup": r.preset.eval_warmup, "iters": r.preset.eval_iters,
                        "repeats": r.preset.eval_repeats, **r.device(), **_powered(r), **_round_anchors(r)}),
    anchors("6c", "after"),
    *remeasure("6d", "machine drift", lambda r: r.layout.hw),
    # the measured plans re-simulated under the models before and after the on-policy data
    StepSpec("6f", "model error on the measured plans, random vs on-policy data", "model_error.py",
             lambda r: [r.layout.hw / "results.json"], lambda r: [r.layout.hw / "model_error.json"],
             lambda r: {"data_dir": r.layout.dataset, "task_path": r.layout.tasks / "data.txt",
                        "results": r.layout.hw / "results.json", **r.problem_flags("seed"),
                        "model_set": [f"random={r.layout.models}", f"onpolicy={r.layout.onpolicy_models}",
                                      *([f"fitted={_estimator(r)}"] if r.preset.ablation else [])],
                        **({"collective_model": _collective_model(r)} if _collectives(r) else {}),
                        # each set judged after the per-round calibration too, scaled as 6b's models were
                        "calibration": r.layout.calibration,
                        **({"round_anchors": r.layout.hw / ROUND_ANCHORS_JSON} if r.anchors else {}),
                        "out_path": r.layout.hw / "model_error.json"},
             when=_onpolicy),
    # the tasks beyond the paper's plan space, planned by every algorithm and measured as the evaluation's
    StepSpec("6g", "simulator on tasks with a table larger than a device", "eval_simulator.py",
             lambda r: [r.layout.oversize_tasks / "data.txt"], lambda r: [r.layout.oversize_sim / "summary.json"],
             lambda r: oversize_evaluation(r)
             | {"out_dir": r.layout.oversize_sim, "quiet": True, "no_progress": True},
             when=lambda r: r.oversize, late=lambda r: chosen_lambda(r) if r.onpolicy else {}),
    StepSpec("6h", "hardware on tasks with a table larger than a device", "eval.py",
             lambda r: [r.layout.oversize_sim / "plans.json"]
             + ([r.layout.oversize_anchor_sim / "plans.json"] if r.oversize_anchors else []),
             lambda r: [r.layout.oversize_hw / "summary.json"],
             lambda r: oversize_evaluation(r)
             | {"plans": r.layout.oversize_sim / "plans.json", "out_dir": r.layout.oversize_hw,
                "warmup": r.preset.eval_warmup, "iters": r.preset.eval_iters, "repeats": r.preset.eval_repeats,
                **r.device(), **_oversize_anchors(r), "quiet": True, "no_progress": True},
             when=lambda r: r.oversize),
    # 7 (--torchrec_train): TorchRec's runtime. Plans of training tasks trained in TorchRec, a cost model fitted to
    # them, NeuroShard planned for it (labelled neuroshard[torchrec]); the evaluation's plans trained with
    # DistributedModelParallel; the runtime model's error on them
    StepSpec("7a", "TorchRec runtime cost data", "collect_torchrec_cost_data.py",
             lambda r: [r.layout.train_tasks / "data.txt"], lambda r: [r.layout.torchrec_data / "results.json"],
             lambda r: runtime_collection(r, r.layout.dataset, r.layout.train_tasks, r.layout.tasks,
                                          r.layout.torchrec_data),
             when=_torchrec),
    # the same over the second dataset: its large and hot tables are the new set's, which the first dataset's
    # plans never show the runtime model
    StepSpec("7a2", "TorchRec runtime cost data over the second dataset", "collect_torchrec_cost_data.py",
             lambda r: [r.layout.oversize_train_tasks / "data.txt"],
             lambda r: [r.layout.oversize_torchrec_data / "results.json"],
             lambda r: runtime_collection(r, r.layout.oversize_dataset, r.layout.oversize_train_tasks,
                                          r.layout.oversize_tasks, r.layout.oversize_torchrec_data)
             | {"dp_min_pooling": r.preset.torchrec_dp_min_pooling}
             | ({"collective_model": _collective_model(r)} if _collectives(r) else {}),
             when=lambda r: _torchrec(r) and r.oversize),
    StepSpec("7b", "TorchRec runtime cost model", "train_torchrec_cost_model.py",
             lambda r: [r.layout.torchrec_data / "results.json"]
             + ([r.layout.oversize_torchrec_data / "results.json"] if r.oversize else []),
             lambda r: [_first_runtime_model(r)],
             lambda r: runtime_fit(r, [r.layout.oversize_torchrec_data] if r.oversize else [], _first_runtime_model(r)),
             when=_torchrec),
    # on-policy runtime data: NeuroShard's plans searched with the first fit, the greedy's beside them in the same
    # rounds (a collection's speed is its own, so only plans beside others show how a search's picks are off),
    # and the model fitted again with them
    StepSpec("7b2", "TorchRec runtime cost data, NeuroShard's plans for the first fit", "collect_torchrec_cost_data.py",
             lambda r: [_first_runtime_model(r), r.layout.oversize_train_tasks / "data.txt"],
             lambda r: [r.layout.oversize_torchrec_onpolicy / "results.json"],
             lambda r: runtime_collection(r, r.layout.oversize_dataset, r.layout.oversize_train_tasks,
                                          r.layout.oversize_tasks, r.layout.oversize_torchrec_onpolicy,
                                          algs="neuroshard,size_lookup_greedy", random_plans=0)
             | {"runtime": "torchrec", "runtime_model": _first_runtime_model(r),
                "repeats": r.preset.torchrec_onpolicy_rounds}
             | ({"collective_model": _collective_model(r)} if _collectives(r) else {}),
             when=_onpolicy_runtime),
    StepSpec("7b3", "TorchRec runtime cost model, fitted again with NeuroShard's plans", "train_torchrec_cost_model.py",
             lambda r: [r.layout.torchrec_data / "results.json", r.layout.oversize_torchrec_data / "results.json",
                        r.layout.oversize_torchrec_onpolicy / "results.json"],
             lambda r: [_runtime_model(r)],
             lambda r: runtime_fit(r, [r.layout.oversize_torchrec_data, r.layout.oversize_torchrec_onpolicy],
                                   _runtime_model(r)),
             when=_onpolicy_runtime),
    StepSpec("7c", "NeuroShard for TorchRec's runtime", "eval_simulator.py", lambda r: [_runtime_model(r)],
             lambda r: [r.layout.sim_torchrec / "summary.json"],
             lambda r: {**_no_alg(evaluation_flags(r, r.layout.tasks, r.preset.eval_tasks)), "alg": "neuroshard",
                        "runtime": "torchrec", "runtime_model": _runtime_model(r), "out_dir": r.layout.sim_torchrec,
                        "quiet": True, "no_progress": True},
             when=_torchrec),
    # beside the plans of both runtimes, TorchRec's planner as users get it (every sharding type), planned by
    # eval_torchrec.py itself within the run's memory
    StepSpec("7d", "TorchRec training", "eval_torchrec.py",
             lambda r: [r.layout.sim_torchrec / "plans.json", r.layout.sim / "plans.json"]
             + ([r.layout.torchrec_data / "results.json"] if r.anchors else []),
             lambda r: [r.layout.torchrec / "summary.json"],
             lambda r: {"data_dir": r.layout.dataset, "task_path": r.layout.tasks / "data.txt",
                        "plans": f"{r.layout.sim_torchrec / 'plans.json'},{r.layout.sim / 'plans.json'}",
                        "alg": "all,torchrec_full", **r.problem_flags(), **r.hosts(),
                        "max_tasks": r.preset.torchrec_tasks,
                        "repeats": r.preset.torchrec_repeats, **_training(r), "out_dir": r.layout.torchrec,
                        **_torchrec_anchors(r), "no_progress": True},
             when=_torchrec),
    StepSpec("7e", "TorchRec runtime model on the evaluation tasks' plans", "train_torchrec_cost_model.py",
             lambda r: [r.layout.torchrec / "results.json"], lambda r: [r.layout.torchrec / "runtime_model_error.json"],
             lambda r: {"data_dir": r.layout.dataset, "task_path": r.layout.train_tasks / "data.txt",
                        "model": _runtime_model(r), **r.models(), **r.problem_flags("max_mem"),
                        "out_path": r.layout.torchrec / "runtime_model_error.json",
                        "check_results": r.layout.torchrec / "results.json",
                        "check_task_path": r.layout.tasks / "data.txt"},
             when=_torchrec),
    # the tasks beyond the paper's plan space in TorchRec: NeuroShard over every sharding type the runtime model
    # was fitted on, trained beside the paper runtime's plans and TorchRec's full planner
    StepSpec("7f", "NeuroShard for TorchRec's runtime, tasks with a table larger than a device", "eval_simulator.py",
             lambda r: [_runtime_model(r), r.layout.oversize_tasks / "data.txt"],
             lambda r: [r.layout.oversize_sim_torchrec / "summary.json"],
             lambda r: _no_alg(oversize_evaluation(r))
             | {"alg": "neuroshard", "runtime": "torchrec", "runtime_model": _runtime_model(r),
                "out_dir": r.layout.oversize_sim_torchrec, "quiet": True, "no_progress": True},
             when=lambda r: _torchrec(r) and r.oversize),
    StepSpec("7g", "TorchRec training, tasks with a table larger than a device", "eval_torchrec.py",
             lambda r: [r.layout.oversize_sim_torchrec / "plans.json", r.layout.oversize_sim / "plans.json"],
             lambda r: [r.layout.oversize_torchrec / "summary.json"],
             lambda r: {"data_dir": r.layout.oversize_dataset, "task_path": r.layout.oversize_tasks / "data.txt",
                        "plans": f"{r.layout.oversize_sim_torchrec / 'plans.json'},"
                                 f"{r.layout.oversize_sim / 'plans.json'}",
                        "alg": "all,torchrec_full", "reference": "neuroshard[torchrec]", **r.problem_flags(),
                        **r.hosts(),
                        "max_tasks": min(r.preset.torchrec_tasks, r.preset.oversize_tasks),
                        "repeats": r.preset.torchrec_repeats, **_training(r), "out_dir": r.layout.oversize_torchrec,
                        "no_progress": True},
             when=lambda r: _torchrec(r) and r.oversize),
    # the runtime model's error on those plans: tasks and tables it never saw, and the plans its search picked
    StepSpec("7h", "TorchRec runtime model on the plans of tasks with a table larger than a device",
             "train_torchrec_cost_model.py", lambda r: [r.layout.oversize_torchrec / "results.json"],
             lambda r: [r.layout.oversize_torchrec / "runtime_model_error.json"],
             lambda r: {"data_dir": r.layout.dataset, "task_path": r.layout.train_tasks / "data.txt",
                        "model": _runtime_model(r), **r.models(), **r.problem_flags("max_mem"),
                        "out_path": r.layout.oversize_torchrec / "runtime_model_error.json",
                        "check_results": r.layout.oversize_torchrec / "results.json",
                        "check_task_path": r.layout.oversize_tasks / "data.txt",
                        "check_data_dir": r.layout.oversize_dataset},
             when=lambda r: _torchrec(r) and r.oversize),
]


def runtime_collection(run: Run, dataset: Path, train_tasks: Path, eval_tasks: Path, out_dir: Path,
                       algs: str = "neuroshard,size_lookup_greedy,torchrec", random_plans: int | None = None) -> dict:
    """The flags of a TorchRec runtime data collection: the plans of `algs` and `random_plans` random plans
    (default: the preset's) of `train_tasks` (never one of `eval_tasks`) over `dataset`, trained in TorchRec."""
    p = run.preset
    random_plans = p.torchrec_random_plans if random_plans is None else random_plans
    spread = {"spread_share": p.torchrec_spread_share} if random_plans else {}  # the random plans' spread tables
    return {"data_dir": dataset, "task_path": train_tasks / "data.txt", "eval_task_path": eval_tasks / "data.txt",
            **run.models(), **run.problem_flags(), **run.hosts(), "max_tasks": p.torchrec_data_tasks,
            "random_plans": random_plans, **spread, "alg": algs, **_training(run), "out_dir": out_dir,
            "quiet": True, "no_progress": True}


def runtime_fit(run: Run, extras: list[Path], out_path: Path) -> dict:
    """The flags of a TorchRec runtime model fit to step 7a's collection and the second dataset's `extras`
    (collection dirs over its training tasks, each with a speed of its own), written to `out_path`."""
    lay = run.layout
    flags = {"data_dir": lay.dataset, "task_path": lay.train_tasks / "data.txt",
             "results": lay.torchrec_data / "results.json", **run.models(), **run.problem_flags("max_mem"),
             "out_path": out_path}
    if extras:
        flags |= {"extra_results": ",".join(str(d / "results.json") for d in extras),
                  "extra_data_dir": ",".join(str(lay.oversize_dataset) for _ in extras),
                  "extra_task_path": ",".join(str(lay.oversize_train_tasks / "data.txt") for _ in extras)}
    return flags


def compute_collection(run: Run, dataset: Path, out_dir: Path, samples: int) -> dict:
    """The flags of a compute cost data collection: `samples` random shards of `dataset`'s tables."""
    p = run.preset
    return {"dataset_dir": dataset, "out_dir": out_dir, "data_size": samples, "max_tables": p.max_tables,
            **run.problem_flags("ndevices"), "max_dim": p.max_dim, "warmup": p.warmup, "iters": p.iters,
            "half_share": p.half_share, **run.device(), **run.workers()}


def _second_compute(run: Run, onpolicy: bool = False) -> list[Path]:
    """The compute data of the second dataset the compute models (and the fitted estimator) read, where the run has
    it: its random shards (step 3f), and with `onpolicy` (a model retrained on the on-policy data, or the estimator
    fitted beside it) its measured plans (4d2, which only a run with on-policy data has)."""
    return ([run.layout.oversize_compute_data] if run.oversize_compute else []) \
        + ([run.layout.oversize_plan_data / "compute"] if onpolicy and run.oversize_onpolicy else [])


def _extra_compute(run: Run, onpolicy: bool = False) -> dict:
    """`_second_compute` as the training scripts' flag."""
    dirs = _second_compute(run, onpolicy)
    return {"extra_data_dirs": ",".join(map(str, dirs))} if dirs else {}


def _ensemble(run: Run) -> dict:
    return {"ensemble": run.preset.ensemble} if run.preset.ensemble > 1 else {}


def _policy_flags(run: Run, alg: str) -> dict:
    lay = run.layout
    return {"data_dir": lay.dataset, "task_path": lay.train_tasks / "data.txt",
            "eval_task_path": lay.tasks / "data.txt",
            **run.models(), **run.problem_flags(), "no_progress": True, "out_path": lay.models / f"{alg}.pt"}


def _refine(run: Run) -> dict:
    """Hardware in the loop when planning: candidates measured as the evaluation measures plans."""
    p = run.preset
    if not p.refine:
        return {}
    return {"refine": p.refine, "refine_algs": p.refine_algs, "refine_repeats": p.refine_repeats,
            "warmup": p.eval_warmup, "iters": p.eval_iters, **run.device()}


def _powered(run: Run) -> dict:
    """Prediction-powered verdicts: the unmeasured tasks' plans and their task file."""
    if not run.unmeasured:
        return {}
    return {"unmeasured_plans": run.layout.unmeasured_sim / "plans.json",
            "unmeasured_task_path": run.layout.unmeasured_tasks / "data.txt"}


def _collectives(run: Run) -> bool:
    """The run times the collectives of row-wise and data-parallel tables (step 3e): a preset that asks, on
    more than one rank."""
    return run.preset.collective_samples > 0 and run.problem.ndevices > 1


def _collective_model(run: Run) -> Path:
    """Where step 3e writes the collective model: beside the random data's models, where `CostModels.load`
    finds it too."""
    return run.layout.models / f"collectives_{run.problem.ndevices}.json"


def _torchrec_anchors(run: Run) -> dict:
    """eval_torchrec.py's flags for per-round calibration: step 7a's plans, which the runtime model is fitted to,
    one of each of `round_anchors` of them trained again in every round of step 7d (`torchrec.training_eval`);
    none with round_anchors 0. The model prices them at the speed of the hour 7a trained them, so their ratio in
    a round is the machine's speed against that hour alone, and what the evaluation's plans are off after the
    move is the model's error on plans it never saw. Plans of unseen tasks as anchors (as step 6b's, whose
    models no one job was fitted to) would move the rounds by the model's error on those few tasks as well."""
    if not run.anchors:
        return {}
    return {"round_anchors": run.layout.torchrec_data / "results.json", "anchors_per_round": run.preset.round_anchors}


def _oversize_anchors(run: Run) -> dict:
    """The new set's round anchors (step 5e's plans of its own anchor tasks): none without them."""
    if not run.oversize_anchors:
        return {}
    return {"round_anchors": run.layout.oversize_anchor_sim / "plans.json",
            "anchors_per_round": run.preset.round_anchors}


def _round_anchors(run: Run) -> dict:
    """Step 5f's plans of the anchor tasks measured in every round of the evaluation, the rounds' speed
    (eval/round_calibration.py): none with round_anchors 0."""
    if not run.anchors:
        return {}
    return {"round_anchors": run.layout.anchor_sim / "plans.json", "anchors_per_round": run.preset.round_anchors}


def _training(run: Run) -> dict:
    p = run.preset
    return {"warmup": p.torchrec_warmup, "iters": p.torchrec_iters, "seed": run.problem.seed, **run.device()}


def _estimator(run: Run) -> Path:
    return run.layout.models_of(run.onpolicy) / f"torchrec_estimator_{run.problem.ndevices}.json"


def _runtime_model(run: Run) -> Path:
    """The TorchRec runtime model the steps plan with (7b3's, else 7b's)."""
    return run.layout.models_of(run.onpolicy) / f"torchrec_runtime_{run.problem.ndevices}.json"


def _first_runtime_model(run: Run) -> Path:
    """Step 7b's fit: with on-policy runtime data a first one beside the final model, else the model."""
    path = _runtime_model(run)
    return path.with_name(f"{path.stem}_first.json") if _onpolicy_runtime(run) else path


def build_steps(run: Run) -> list[Step]:
    """The steps of one run, in order: the rows of `STEPS` this run has, their flags evaluated."""
    steps = []
    for spec in STEPS:
        if not spec.when(run):
            continue
        late = None if spec.late is None else (lambda s=spec: to_argv(s.late(run)))
        steps.append(Step(spec.key, spec.title, [spec.script, *to_argv(spec.flags(run)), *spec.extra(run)],
                          spec.outputs(run), spec.inputs(run), late))
    return steps
