"""The pipeline as a declared table of steps, numbered in the order they run, each run once or once per task set.

Each `StepSpec` names its script (a step script at the repository root), what
it reads and writes (paths of the run's `Layout`), the flags it gets (a dict
derived from the run and, for a step of each task set, the set: its dataset,
tasks and folder) and when it runs. `build_steps` evaluates the table for one
run into the commands the driver (`pipeline.run`) prints and runs, one per
step and set (`6b:paper`, `6b:oversize`); a flag dict becomes argv one way
only (`to_argv`).

Keys are "<phase><letter>" in run order: 1 datasets, 2 tasks, 3 cost data,
4 cost models and the learned baselines, 5 planning, 6 measuring the plans,
7 TorchRec training (opt-in). A step of each set runs for every set of the
run (`Run.sets`) its `when` admits, the sets in the preset's order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from neuroshard.eval.drift import ANCHORS, DRIFT_COMM, DRIFT_COMPUTE
from neuroshard.formats.side_files import ROUND_ANCHORS_JSON
from neuroshard.pipeline import step_flags as f
from neuroshard.pipeline.layout import (
    ANCHOR_TASK_SEED,
    EVAL_TASK_SEED,
    TRAIN_TASK_SEED,
    UNMEASURED_SEED,
    Run,
)
from neuroshard.pipeline.presets import TORCHREC_FULL, TaskSet


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


def always(run: Run, task_set: TaskSet) -> bool:
    return True


@dataclass(frozen=True)
class StepSpec:
    """One row of the table: `inputs` and `outputs` (paths of the run), `flags` (what the script gets),
    `when` (does this run, for this set, have the step), `each_set` (the step runs once per task set; else once,
    its functions given the first set), `extra` (argv appended as is: a preset's own flags for a script),
    `late` (flags known only once an earlier step ran: NeuroShard+'s lambda chosen on hardware), `each_world`
    (the step runs once per device count of `Run.world_others`). Every function takes the run and a task set (a
    step of each world count: the count instead)."""

    key: str
    title: str
    script: str
    inputs: Callable[[Run, TaskSet], list[Path]]
    outputs: Callable[[Run, TaskSet], list[Path]]
    flags: Callable[[Run, TaskSet], dict]
    when: Callable[[Run, TaskSet], bool] = always
    each_set: bool = False
    extra: Callable[[Run, TaskSet], tuple[str, ...]] = lambda run, s: ()
    late: Callable[[Run, TaskSet], dict] | None = None
    each_world: bool = False


@dataclass
class Step:
    """A step of one run, ready to run: the command (script and argv, relative to the repository root). `name`
    is its key, with `:set` for a step of each set (`6b:oversize`), `@count` for a step of each world count
    (`3f@8`)."""

    key: str
    title: str
    argv: list[str]
    outputs: list[Path]
    inputs: list[Path] = field(default_factory=list)
    late: Callable[[], list[str]] | None = None
    task_set: str | None = None
    world: int | None = None

    @property
    def name(self) -> str:
        if self.world is not None:
            return f"{self.key}@{self.world}"
        return self.key if self.task_set is None else f"{self.key}:{self.task_set}"

    def command(self) -> list[str]:
        return self.argv + (self.late() if self.late is not None else [])


# --------------------------------------------------------------------------- steps the table uses twice


def remeasure(key: str, title: str, dest: Callable[[Run], Path]) -> list[StepSpec]:
    """Collected shards and all-to-alls measured again (the same samples each time: the same seed), into
    `dest`'s drift files: how much slower or faster the machine runs now than when they were recorded."""
    def compute(r: Run) -> Path:
        return r.at(r.first).compute_data

    return [
        StepSpec(key, f"{title}: compute", "compute_noise_floor.py",
                 lambda r, s: [compute(r)], lambda r, s: [dest(r) / DRIFT_COMPUTE],
                 lambda r, s: {"data_dir": compute(r), "dataset_dir": r.at(r.first).dataset,
                               "num_samples": r.preset.drift_samples, "repeats": 1,
                               "out_path": dest(r) / DRIFT_COMPUTE, "seed": r.problem.seed, **r.device(),
                               **r.workers()}),
        StepSpec(f"{key[0]}{chr(ord(key[1]) + 1)}", f"{title}: comm", "collect_comm_cost_data.py",
                 lambda r, s: [r.layout.comm_data], lambda r, s: [dest(r) / DRIFT_COMM],
                 lambda r, s: {"out_dir": r.layout.comm_data, "noise_floor": r.preset.drift_samples,
                               "noise_out": dest(r) / DRIFT_COMM, **f.comm_flags(r)}),
    ]


def plan_speed(key: str, when: str) -> StepSpec:
    """With on-policy data: the first set's on-policy plans of training tasks measured again as the evaluation
    measures plans, under its models, just `when` ("before" or "after") its hardware evaluation: the plan job's
    own speed (eval/drift.py). One round each: the median over the plans is what is read."""
    def dest(r: Run) -> Path:
        return r.at(r.first).hw / ANCHORS[when]

    return StepSpec(key, f"plan-level speed {when} the evaluation", "eval.py",
                    lambda r, s: [r.at(s).plan_data / "hw" / "plans.json"],
                    lambda r, s: [dest(r) / "summary.json"],
                    lambda r, s: {"data_dir": r.at(s).dataset, "task_path": r.at(s).train_tasks / "data.txt",
                                  **r.models(), "alg": "all", **r.problem_flags(), **r.hosts(),
                                  "max_tasks": s.onpolicy_tasks, "calibration": r.layout.calibration,
                                  "plans": r.at(s).plan_data / "hw" / "plans.json", "out_dir": dest(r),
                                  "warmup": r.preset.eval_warmup, "iters": r.preset.eval_iters, "repeats": 1,
                                  **r.device(), "quiet": True, "no_progress": True},
                    when=lambda r, s: r.onpolicy)


def _onpolicy(run: Run, s: TaskSet) -> bool:
    return run.onpolicy


def _torchrec(run: Run, s: TaskSet) -> bool:
    return run.torchrec_train


def _world_collectives(run: Run) -> bool:
    """The collectives are timed at the preset's world counts too (3h, 4l): where 3e times them, on 2 ranks or
    more (every world count)."""
    return run.collectives and bool(run.preset.world_counts) and min(run.preset.world_counts) > 1


# --------------------------------------------------------------------------- the table

STEPS: list[StepSpec] = [
    # 1: each set's dataset
    StepSpec("1", "dataset", "gen_dlrm_data.py", lambda r, s: [],
             lambda r, s: [r.at(s).dataset / "table_configs.json", r.at(s).dataset / "data.pt"], f.dataset_flags,
             each_set=True),
    # 2: tasks. The learned baselines and the on-policy and runtime data learn on training tasks of their own, never
    # the evaluation's
    StepSpec("2a", "evaluation tasks", "gen_tasks.py", lambda r, s: [r.at(s).dataset],
             lambda r, s: [f.data_txt(r.at(s).tasks)],
             lambda r, s: f.task_flags(r, s, r.at(s).tasks, s.tasks, EVAL_TASK_SEED), each_set=True),
    StepSpec("2b", "tasks for prediction-powered verdicts (not measured)", "gen_tasks.py",
             lambda r, s: [r.at(s).dataset], lambda r, s: [f.data_txt(r.at(s).unmeasured_tasks)],
             lambda r, s: f.task_flags(r, s, r.at(s).unmeasured_tasks, s.unmeasured_tasks, UNMEASURED_SEED),
             when=lambda r, s: r.unmeasured(s), each_set=True),
    StepSpec("2c", "training tasks", "gen_tasks.py", lambda r, s: [r.at(s).dataset],
             lambda r, s: [f.data_txt(r.at(s).train_tasks)],
             lambda r, s: f.task_flags(r, s, r.at(s).train_tasks, s.train_tasks, TRAIN_TASK_SEED), each_set=True),
    # the per-round anchors of the set's hardware evaluation: tasks no model, policy or estimator ever trained on,
    # so that the models price their plans as they price the evaluation's (the on-policy step's plans, which the
    # retrained models fit, are priced at the speed of the hour they were measured in)
    StepSpec("2d", "anchor tasks", "gen_tasks.py", lambda r, s: [r.at(s).dataset],
             lambda r, s: [f.data_txt(r.at(s).anchor_tasks)],
             lambda r, s: f.task_flags(r, s, r.at(s).anchor_tasks, r.preset.round_anchors, ANCHOR_TASK_SEED),
             when=lambda r, s: r.anchors, each_set=True),
    # 3: cost data. Random shards of each set's tables (the first set's are the compute model's data; the others'
    # are trained on beside them: without them the compute model would price their tables by extrapolation)
    StepSpec("3a", "compute cost data", "collect_compute_cost_data.py", lambda r, s: [r.at(s).dataset],
             lambda r, s: [f.data_txt(r.at(s).compute_data)],
             lambda r, s: f.compute_collection(r, r.at(s).dataset, r.at(s).compute_data, s.compute_samples),
             when=lambda r, s: s.compute_samples > 0, each_set=True),
    StepSpec("3b", "compute noise floor", "compute_noise_floor.py", lambda r, s: [r.at(s).compute_data],
             lambda r, s: [r.at(s).compute_data / "noise_floor.json"],
             lambda r, s: {"data_dir": r.at(s).compute_data, "dataset_dir": r.at(s).dataset,
                           "num_samples": r.preset.noise_samples, "seed": r.problem.seed, **r.device(),
                           **r.workers()}),
    StepSpec("3c", "comm cost data", "collect_comm_cost_data.py", lambda r, s: [],
             lambda r, s: [f.data_txt(r.layout.comm_data)],
             lambda r, s: {"out_dir": r.layout.comm_data, "data_size": r.preset.comm_samples, **f.comm_flags(r)}),
    StepSpec("3d", "comm noise floor", "collect_comm_cost_data.py", lambda r, s: [r.layout.comm_data],
             lambda r, s: [r.layout.comm_data / "noise_floor.json"],
             lambda r, s: {"out_dir": r.layout.comm_data, "noise_floor": r.preset.noise_samples, **f.comm_flags(r)}),
    StepSpec("3e", "collective cost data and model", "collect_collective_cost_data.py", lambda r, s: [],
             lambda r, s: [r.collective_model()], lambda r, s: f.collective_collection(r, r.problem.ndevices),
             when=lambda r, s: r.collectives),
    # the same data at the preset's other world counts, for models of any world size (4k, 4l), each count's
    # samples its share of what 3c's cost (`presets.world_samples`), with its noise floor
    StepSpec("3f", "comm cost data at other world sizes", "collect_comm_cost_data.py", lambda r, k: [],
             lambda r, k: [f.data_txt(r.comm_data_at(k))],
             lambda r, k: f.world_comm_collection(r, k, noise=False), each_world=True),
    StepSpec("3g", "comm noise floor at other world sizes", "collect_comm_cost_data.py",
             lambda r, k: [r.comm_data_at(k)], lambda r, k: [r.comm_data_at(k) / "noise_floor.json"],
             lambda r, k: f.world_comm_collection(r, k, noise=True), each_world=True),
    StepSpec("3h", "collectives at other world sizes", "collect_collective_cost_data.py", lambda r, k: [],
             lambda r, k: [f.collective_collection(r, k)["out_path"]],
             lambda r, k: f.collective_collection(r, k), when=lambda r, k: _world_collectives(r),
             each_world=True),
    # 4: cost models, first on the random cost data
    StepSpec("4a", "compute cost model", "train_compute_cost_model.py",
             lambda r, s: [r.at(s).compute_data, *f.other_compute(r)],
             lambda r, s: [r.models(final=False)["compute_model"]],
             lambda r, s: {"data_dir": r.at(s).compute_data, **f.extra_compute(r), "epochs": r.preset.epochs,
                           "out_path": r.models(final=False)["compute_model"], **f.ensemble_flags(r),
                           "seed": r.problem.seed}),
    StepSpec("4b", "compute model on unseen tables", "heldout_check.py", lambda r, s: [r.at(s).compute_data],
             lambda r, s: [r.layout.models / "compute_heldout.json"],
             lambda r, s: {"data_dir": r.at(s).compute_data, "epochs": r.preset.epochs,
                           "out_path": r.layout.models / "compute_heldout.json", "seed": r.problem.seed}),
    StepSpec("4c", "comm cost models", "train_comm_cost_model.py", lambda r, s: [r.layout.comm_data],
             lambda r, s: [r.models(final=False)["fw_comm_model"], r.models(final=False)["bw_comm_model"]],
             lambda r, s: {"data_dir": r.layout.comm_data, "epochs": r.preset.epochs,
                           "fw_out_path": r.models(final=False)["fw_comm_model"],
                           "bw_out_path": r.models(final=False)["bw_comm_model"], "bw_linear": 1, **f.ensemble_flags(r),
                           "seed": r.problem.seed}),
    # the plans of each set's training tasks, made with the random data's models, measured as eval.py measures:
    # on-policy cost data (eval/onpolicy.py). The first set's also trains the comm models and chooses NeuroShard+'s
    # lambda on hardware; a set with spread tables teaches the compute model what a rank of row blocks costs in
    # the plan job, which the random shards do not price right
    StepSpec("4d", "on-policy cost data", "collect_plan_cost_data.py", f.onpolicy_inputs, f.onpolicy_outputs,
             lambda r, s: f.onpolicy_collection(r, s), when=lambda r, s: r.onpolicy_of(s), each_set=True),
    StepSpec("4e", "compute cost model, random + on-policy data", "train_compute_cost_model.py",
             lambda r, s: [r.at(s).compute_data, r.at(s).plan_data / "compute", *f.other_compute(r, onpolicy=True)],
             lambda r, s: [r.models()["compute_model"]],
             lambda r, s: {"data_dir": r.at(s).compute_data, "plan_data_dir": r.at(s).plan_data / "compute",
                           **f.extra_compute(r, onpolicy=True), "epochs": r.preset.epochs,
                           "out_path": r.models()["compute_model"], **f.ensemble_flags(r), "seed": r.problem.seed},
             when=_onpolicy),
    StepSpec("4f", "comm cost models, random + on-policy data", "train_comm_cost_model.py",
             lambda r, s: [r.layout.comm_data, r.at(s).plan_data / "comm"],
             lambda r, s: [r.models()["fw_comm_model"], r.models()["bw_comm_model"]],
             lambda r, s: {"data_dir": r.layout.comm_data, "plan_data_dir": r.at(s).plan_data / "comm",
                           "epochs": r.preset.epochs, "fw_out_path": r.models()["fw_comm_model"],
                           "bw_out_path": r.models()["bw_comm_model"], "bw_linear": 1, **f.ensemble_flags(r),
                           "seed": r.problem.seed},
             when=_onpolicy),
    # the retrained models' error on the first set's on-policy plans beyond their predicted spread: the plan-level
    # term of the reported band, and the random data's models' per-rank compute error on them (out of sample),
    # recorded in the forward checkpoint (planner/costs/uncertainty.py)
    StepSpec("4g", "band calibrated on the on-policy plans", "calibrate_band.py",
             lambda r, s: [r.at(s).plan_data / "hw" / "results.json", *r.models().values()],
             lambda r, s: [r.layout.onpolicy_models / f"plan_error_{r.problem.ndevices}.json"],
             lambda r, s: {"data_dir": r.at(s).dataset, "task_path": f.data_txt(r.at(s).train_tasks),
                           "eval_task_path": f.data_txt(r.at(s).tasks),
                           "results": r.at(s).plan_data / "hw" / "results.json", "models": r.layout.onpolicy_models,
                           "heldout_models": r.layout.models, **r.problem_flags("seed")},
             when=_onpolicy),
    # the learned baselines train against the simulator of the models the evaluation plans with
    StepSpec("4h", "DreamShard policy", "train_dreamshard.py", lambda r, s: [f.data_txt(r.at(s).train_tasks)],
             lambda r, s: [r.layout.models / "dreamshard.pt"], lambda r, s: f.policy_flags(r, s, "dreamshard"),
             when=lambda r, s: "dreamshard" in r.learned, extra=lambda r, s: r.preset.dreamshard_args),
    StepSpec("4i", "AutoShard policy", "train_autoshard.py", lambda r, s: [f.data_txt(r.at(s).train_tasks)],
             lambda r, s: [r.layout.models / "autoshard.pt"], lambda r, s: f.policy_flags(r, s, "autoshard"),
             when=lambda r, s: "autoshard" in r.learned, extra=lambda r, s: r.preset.autoshard_args),
    # TorchRec's estimator fitted to the same cost data as the models the evaluation plans with: the analytic
    # rival of the cost-model ablation
    StepSpec("4j", "TorchRec's estimator fitted to the same cost data", "fit_torchrec_estimator.py",
             lambda r, s: [r.at(s).compute_data, r.layout.comm_data, *f.other_compute(r, onpolicy=True)]
             + ([r.at(s).plan_data] if r.onpolicy else []),
             lambda r, s: [r.estimator()],
             lambda r, s: {"data_dir": r.at(s).compute_data, "comm_data_dir": r.layout.comm_data,
                           "plan_data_dir": r.at(s).plan_data if r.onpolicy else None,
                           **f.extra_compute(r, onpolicy=True), "out_path": r.estimator(), "seed": r.problem.seed},
             when=lambda r, s: r.preset.ablation),
    # the models for any world size, over the preset's world counts (the problem's own 3c's and 3e's data), judged
    # on the held counts: an extra artifact, `CostModels.load(run / "models", n)`; the run plans with its own
    # count's models
    StepSpec("4k", "comm models for any world size", "train_comm_cost_model.py",
             lambda r, s: [r.comm_data_at(k) for k in r.preset.world_counts],
             lambda r, s: list(f.world_comm_models(r)), lambda r, s: f.world_comm_fit(r),
             when=lambda r, s: bool(r.preset.world_counts)),
    StepSpec("4l", "collective model for any world size", "collect_collective_cost_data.py",
             lambda r, s: [r.collective_data_at(k) for k in r.preset.world_counts],
             lambda r, s: [r.world_collective_model()], lambda r, s: f.world_collective_fit(r),
             when=lambda r, s: _world_collectives(r)),
    # 5: planning. Just before it, the machine's speed now: the planning and measuring steps scale the models by
    # it (--calibration)
    *remeasure("5a", "calibration", lambda r: r.layout.calibration),
    StepSpec("5c", "simulator evaluation", "eval_simulator.py", lambda r, s: [f.data_txt(r.at(s).tasks)],
             lambda r, s: [r.at(s).sim / "summary.json"],
             lambda r, s: {**f.evaluation_flags(r, s, r.at(s).tasks, s.eval_tasks), "out_dir": r.at(s).sim,
                           **f.refine_flags(r), **f.quiet_beyond_first(r, s)},
             late=f.chosen_lambda, each_set=True),
    StepSpec("5d", "simulator on the unmeasured tasks", "eval_simulator.py",
             lambda r, s: [f.data_txt(r.at(s).unmeasured_tasks)],
             lambda r, s: [r.at(s).unmeasured_sim / "summary.json"],
             lambda r, s: {**f.evaluation_flags(r, s, r.at(s).unmeasured_tasks, s.unmeasured_tasks),
                           "out_dir": r.at(s).unmeasured_sim, "quiet": True},
             when=lambda r, s: r.unmeasured(s), late=f.chosen_lambda, each_set=True),
    StepSpec("5e", "plans of the anchor tasks", "eval_simulator.py", lambda r, s: [f.data_txt(r.at(s).anchor_tasks)],
             lambda r, s: [r.at(s).anchor_sim / "plans.json"],
             lambda r, s: {**f.evaluation_flags(r, s, r.at(s).anchor_tasks, r.preset.round_anchors),
                           "out_dir": r.at(s).anchor_sim, "quiet": True, "no_progress": True},
             when=lambda r, s: r.anchors, late=f.chosen_lambda, each_set=True),
    # 6: measuring the plans eval_simulator.py made (planned once, by the same code), with the plan job's speed
    # measured on the on-policy plans just before and after it, and the machine's drift right after it
    plan_speed("6a", "before"),
    StepSpec("6b", "hardware evaluation", "eval.py",
             lambda r, s: [r.at(s).sim / "plans.json"] + ([r.at(s).anchor_sim / "plans.json"] if r.anchors else []),
             lambda r, s: [r.at(s).hw / "summary.json"],
             lambda r, s: {**f.evaluation_flags(r, s, r.at(s).tasks, s.eval_tasks),
                           "plans": r.at(s).sim / "plans.json", "out_dir": r.at(s).hw, "warmup": r.preset.eval_warmup,
                           "iters": r.preset.eval_iters, "repeats": r.preset.eval_repeats, **r.device(),
                           **f.powered_flags(r, s), **f.round_anchor_flags(r, s), **f.quiet_beyond_first(r, s)},
             each_set=True),
    plan_speed("6c", "after"),
    *remeasure("6d", "machine drift", lambda r: r.at(r.first).hw),
    # the first set's measured plans re-simulated under the models before and after the on-policy data
    StepSpec("6f", "model error on the measured plans, random vs on-policy data", "model_error.py",
             lambda r, s: [r.at(s).hw / "results.json"], lambda r, s: [r.at(s).hw / "model_error.json"],
             lambda r, s: {"data_dir": r.at(s).dataset, "task_path": f.data_txt(r.at(s).tasks),
                           "results": r.at(s).hw / "results.json", **r.problem_flags("seed"),
                           "model_set": [f"random={r.layout.models}", f"onpolicy={r.layout.onpolicy_models}",
                                         *([f"fitted={r.estimator()}"] if r.preset.ablation else [])],
                           **({"collective_model": r.collective_model()} if r.collectives else {}),
                           # each set judged after the per-round calibration too, scaled as 6b's models were
                           "calibration": r.layout.calibration,
                           **({"round_anchors": r.at(s).hw / ROUND_ANCHORS_JSON} if r.anchors else {}),
                           "out_path": r.at(s).hw / "model_error.json"},
             when=_onpolicy),
    # 7 (--torchrec_train): TorchRec's runtime. Plans of each set's training tasks trained in TorchRec, a cost model
    # fitted to them (each set's collection with a speed of its own), NeuroShard planned for it (labelled
    # neuroshard[torchrec]); the evaluation's plans trained with DistributedModelParallel; the runtime model's error
    # on them
    StepSpec("7a", "TorchRec runtime cost data", "collect_torchrec_cost_data.py",
             lambda r, s: [f.data_txt(r.at(s).train_tasks)], lambda r, s: [r.at(s).torchrec_data / "results.json"],
             lambda r, s: f.runtime_collection(r, s, r.at(s).torchrec_data)
             | ({"dp_min_pooling": r.preset.torchrec_dp_min_pooling} if s.spread else {})
             | ({"collective_model": r.collective_model()} if s.spread and r.collectives else {}),
             when=_torchrec, each_set=True),
    StepSpec("7b", "TorchRec runtime cost model", "train_torchrec_cost_model.py",
             lambda r, s: [r.at(x).torchrec_data / "results.json" for x in r.sets],
             lambda r, s: [r.first_runtime_model()],
             lambda r, s: f.runtime_fit(r, [(x, r.at(x).torchrec_data) for x in r.sets[1:]], r.first_runtime_model()),
             when=_torchrec),
    # on-policy runtime data: NeuroShard's plans searched with the first fit, the greedy's beside them in the same
    # rounds (a collection's speed is its own, so only plans beside others show how a search's picks are off),
    # and the model fitted again with them
    StepSpec("7c", "TorchRec runtime cost data, NeuroShard's plans for the first fit", "collect_torchrec_cost_data.py",
             lambda r, s: [r.first_runtime_model(), f.data_txt(r.at(s).train_tasks)],
             lambda r, s: [r.at(s).torchrec_onpolicy / "results.json"],
             lambda r, s: f.runtime_collection(r, s, r.at(s).torchrec_onpolicy, algs="neuroshard,size_lookup_greedy",
                                             random_plans=0)
             | {"runtime": "torchrec", "runtime_model": r.first_runtime_model(),
                "repeats": r.preset.torchrec_onpolicy_rounds}
             | ({"collective_model": r.collective_model()} if r.collectives else {}),
             when=lambda r, s: r.torchrec_onpolicy(s), each_set=True),
    StepSpec("7d", "TorchRec runtime cost model, fitted again with NeuroShard's plans", "train_torchrec_cost_model.py",
             lambda r, s: [*(r.at(x).torchrec_data / "results.json" for x in r.sets),
                           *(r.at(x).torchrec_onpolicy / "results.json" for x in r.sets if r.torchrec_onpolicy(x))],
             lambda r, s: [r.runtime_model()],
             lambda r, s: f.runtime_fit(r, [*((x, r.at(x).torchrec_data) for x in r.sets[1:]),
                                          *((x, r.at(x).torchrec_onpolicy) for x in r.sets if r.torchrec_onpolicy(x))],
                                      r.runtime_model()),
             when=lambda r, s: any(r.torchrec_onpolicy(x) for x in r.sets)),
    StepSpec("7e", "NeuroShard for TorchRec's runtime", "eval_simulator.py",
             lambda r, s: [r.runtime_model(), f.data_txt(r.at(s).tasks)],
             lambda r, s: [r.at(s).sim_torchrec / "summary.json"],
             lambda r, s: {**f.no_alg(f.evaluation_flags(r, s, r.at(s).tasks, s.eval_tasks)), "alg": "neuroshard",
                           "runtime": "torchrec", "runtime_model": r.runtime_model(), "out_dir": r.at(s).sim_torchrec,
                           "quiet": True, "no_progress": True},
             when=_torchrec, each_set=True),
    # beside the plans of both runtimes, TorchRec's planner as users get it (every sharding type), planned by
    # eval_torchrec.py itself within the run's memory
    StepSpec("7f", "TorchRec training", "eval_torchrec.py",
             lambda r, s: [r.at(s).sim_torchrec / "plans.json", r.at(s).sim / "plans.json"]
             + ([r.at(s).torchrec_data / "results.json"] if f.torchrec_anchor_flags(r, s) else []),
             lambda r, s: [r.at(s).torchrec / "summary.json"],
             lambda r, s: {"data_dir": r.at(s).dataset, "task_path": f.data_txt(r.at(s).tasks),
                           "plans": f"{r.at(s).sim_torchrec / 'plans.json'},{r.at(s).sim / 'plans.json'}",
                           "alg": f"all,{TORCHREC_FULL}",
                           **({"reference": s.torchrec_reference} if s.torchrec_reference else {}),
                           **r.problem_flags(), **r.hosts(), "max_tasks": min(r.preset.torchrec_tasks, s.eval_tasks),
                           "repeats": r.preset.torchrec_repeats, **f.training_flags(r), "out_dir": r.at(s).torchrec,
                           **f.torchrec_anchor_flags(r, s), "no_progress": True},
             when=_torchrec, each_set=True),
    # the runtime model's error on those plans: tasks (and beyond the first set, tables) it never saw, and the plans
    # its search picked
    StepSpec("7g", "TorchRec runtime model on the evaluation tasks' plans", "train_torchrec_cost_model.py",
             lambda r, s: [r.at(s).torchrec / "results.json"],
             lambda r, s: [r.at(s).torchrec / "runtime_model_error.json"],
             lambda r, s: {"data_dir": r.at(r.first).dataset, "task_path": f.data_txt(r.at(r.first).train_tasks),
                           "model": r.runtime_model(), **r.models(), **r.problem_flags("max_mem"),
                           "out_path": r.at(s).torchrec / "runtime_model_error.json",
                           "check_results": r.at(s).torchrec / "results.json",
                           "check_task_path": f.data_txt(r.at(s).tasks),
                           **({} if s is r.first else {"check_data_dir": r.at(s).dataset})},
             when=_torchrec, each_set=True),
]


def build_steps(run: Run) -> list[Step]:
    """The steps of one run, in order: the rows of `STEPS` this run has, a step of each set once per set (of each
    world count once per count), their flags evaluated."""
    steps = []
    for spec in STEPS:
        for s in (run.world_others if spec.each_world else run.sets if spec.each_set else [run.first]):
            if not spec.when(run, s):
                continue
            late = None if spec.late is None else (lambda sp=spec, ts=s: to_argv(sp.late(run, ts)))
            steps.append(Step(spec.key, spec.title, [spec.script, *to_argv(spec.flags(run, s)), *spec.extra(run, s)],
                              spec.outputs(run, s), spec.inputs(run, s), late, s.name if spec.each_set else None,
                              s if spec.each_world else None))
    return steps
