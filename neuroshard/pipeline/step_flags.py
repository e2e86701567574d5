"""The flags the pipeline's steps give their scripts, derived from the run and a task set: the pieces the step
table (`pipeline.steps`) assembles its commands from."""

from __future__ import annotations

from pathlib import Path

from neuroshard.eval.onpolicy import LAMBDA_JSON
from neuroshard.pipeline.layout import Run
from neuroshard.pipeline.presets import TORCHREC_FULL, TaskSet, world_samples
from neuroshard.types.errors import NeuroShardError


def task_flags(run: Run, s: TaskSet, dest: Path, count: int, seed: int) -> dict:
    """gen_tasks.py's flags for `count` tasks of set `s`'s kind over its dataset into `dest`, drawn with the
    tasks' `seed` moved by the run's `--task_seed`."""
    p = run.preset
    return {"data_dir": run.at(s).dataset, "out_dir": dest, "data_size": count, "T_range": p.t_range,
            **run.problem_flags(seed=seed + run.task_seed), "max_dim": p.max_dim, **s.task_kind}


def dataset_flags(run: Run, s: TaskSet) -> dict:
    """gen_dlrm_data.py's flags for set `s`'s dataset: the public file (the first set's, with --data), or
    synthetic tables (and the set's large and hot ones)."""
    out = run.at(s).dataset
    if run.data and s is run.first:
        return {"data": run.data, "out_dir": out}
    p = run.preset
    flags = {"synthetic": True, "num_tables": s.tables, "batch_size": p.batch_size, "max_rows": p.max_rows}
    if s.large_tables:
        flags |= {"large_tables": s.large_tables, "large_rows": s.large_rows}
    if s.hot_tables:
        flags["hot_tables"] = s.hot_tables
    return flags | {"seed": 0, "out_dir": out} | quiet_beyond_first(run, s, quiet=False)


def quiet_beyond_first(run: Run, s: TaskSet, quiet: bool = True) -> dict:
    """The console shows the first set's steps; the others' go to their files (no progress bars, and with
    `quiet`, no per-task lines)."""
    if s is run.first:
        return {}
    return ({"quiet": True} if quiet else {}) | {"no_progress": True}


ABLATION_ALGS = ("neuroshard_fitted", "torchrec_fitted", "torchrec_neural")


def with_algs(algs: str, *names: str) -> str:
    """The `--alg` list `algs` with those of `names` it does not name yet appended, in order."""
    have = algs.split(",")
    return ",".join([*have, *(a for a in names if a not in have)])


def evaluation_flags(run: Run, s: TaskSet, task_dir: Path, count: int) -> dict:
    """The flags of the planning and measuring steps, for the first `count` tasks of `task_dir` over set `s`'s
    dataset: the preset's algorithms (and the ablation's cells, with the fitted estimator they need), and the
    set's own baselines (TorchRec's full planner only where the collective model prices its plans)."""
    algs = run.preset.algs
    extra = {}
    if run.preset.ablation:
        algs = with_algs(algs, *ABLATION_ALGS)
        extra = {"torchrec_estimator": run.estimator()}
    if run.collectives:
        extra["collective_model"] = run.collective_model()
    algs = with_algs(algs, *(a for a in s.baselines if a != TORCHREC_FULL or run.collectives))
    flags = {"data_dir": run.at(s).dataset, "task_path": task_dir / "data.txt", **run.models(), "alg": algs,
             **run.problem_flags(), **run.hosts(), "max_tasks": count, "calibration": run.layout.calibration,
             **extra}
    return flags | {f"{a}_policy": run.layout.models / f"{a}.pt" for a in run.learned}


def chosen_lambda(run: Run, s: TaskSet | None = None) -> dict:
    """`--plus_lambda x` as chosen on hardware by the first set's on-policy step (its lambda.json); nothing when
    it chose none (no NeuroShard+ plan fitted) or the run has no on-policy data."""
    from neuroshard.formats.side_files import read_lambda_choice

    if not run.onpolicy:
        return {}
    path = run.at(run.first).plan_data / LAMBDA_JSON
    if not path.exists():
        raise NeuroShardError(f"{path} not found: run the on-policy step first")
    choice = read_lambda_choice(path)
    return {} if choice.chosen is None else {"plus_lambda": f"{choice.chosen:g}"}


def comm_flags(run: Run, count: int | None = None) -> dict:
    """collect_comm_cost_data.py's flags but the collection's: on the problem's ranks, or on `count`."""
    p = run.preset
    return {"T_range": p.comm_t_range, "sleep_range": p.sleep_range, "spread_dist": p.spread_dist,
            "max_dim": p.max_dim, "batch_size": p.comm_batch_size, "warmup": p.warmup, "iters": p.iters,
            "seed": run.problem.seed, **(run.ranks() if count is None else run.ranks_at(count))}


def collective_collection(run: Run, count: int) -> dict:
    """collect_collective_cost_data.py's flags for the collectives on `count` ranks (3e's on the problem's, 3h's
    on another, their samples `world_samples`' share), the fit of that count's model written beside its data
    (3e's: beside the models, where the steps find it). The hosts' groups are timed on the problem's ranks only
    (another count's ranks need not split into those hosts)."""
    p, own = run.preset, count == run.problem.ndevices
    samples, noise = (p.collective_samples, p.collective_noise) if own else \
        (world_count(run, p.collective_samples, count, COLLECTIVE_LEAST),
         world_count(run, p.collective_noise, count, 1))
    out_dir = run.collective_data_at(count)
    out_path = run.collective_model() if own else out_dir / f"collectives_{count}.json"
    return {"out_dir": out_dir, "out_path": out_path, "data_size": samples, "noise_samples": noise,
            "batch_size": p.batch_size, "warmup": p.warmup, "iters": p.iters, "seed": run.problem.seed,
            **run.ranks_at(count), **(run.hosts() if own else {}), "no_progress": True}


# collect_collective_cost_data.py's fewest samples (and a comm collection's fewest beside it)
COLLECTIVE_LEAST = 12


def world_count(run: Run, samples: int, count: int, least: int) -> int:
    """`samples` of the problem's count as `count`'s share (`presets.world_samples`) among the run's other
    world counts."""
    return world_samples(samples, run.problem.ndevices, count, len(run.world_others), least)


def world_comm_collection(run: Run, count: int, noise: bool) -> dict:
    """Step 3f's comm collection on `count` ranks, or with `noise` step 3g's noise floor of it."""
    p = run.preset
    size = {"noise_floor": world_count(run, p.noise_samples, count, 1)} if noise else \
        {"data_size": world_count(run, p.comm_samples, count, COLLECTIVE_LEAST)}
    return {"out_dir": run.comm_data_at(count), **size, **comm_flags(run, count)}


def world_comm_fit(run: Run) -> dict:
    """train_comm_cost_model.py's flags for the comm models for any world size (4k): the trained counts'
    collections, the held ones to judge them on, into models/ beside the per-count pairs."""
    fw, bw = world_comm_models(run)
    held = [run.comm_data_at(k) for k in run.preset.world_held]
    return {"world": 1, "data_dir": ",".join(str(run.comm_data_at(k)) for k in run.world_trained),
            "check_data_dirs": ",".join(map(str, held)) if held else None, "epochs": run.preset.epochs,
            "fw_out_path": fw, "bw_out_path": bw, **ensemble_flags(run), "seed": run.problem.seed, "no_progress": True}


def world_comm_models(run: Run) -> tuple[Path, Path]:
    return run.layout.models / "comm_fw.pt", run.layout.models / "comm_bw.pt"


def world_collective_fit(run: Run) -> dict:
    """collect_collective_cost_data.py's flags for the collective model for any world size (4l): the first
    trained count's collection (its own flags: finished, nothing is timed again) with the other trained counts'
    and the held ones', written to models/collectives.json."""
    first, *rest = run.world_trained
    held = [run.collective_data_at(k) for k in run.preset.world_held]
    return {**collective_collection(run, first), "out_path": run.world_collective_model(),
            "world_data_dirs": ",".join(str(run.collective_data_at(k)) for k in rest) or None,
            "check_data_dirs": ",".join(map(str, held)) if held else None}


def no_alg(flags: dict) -> dict:
    return {k: v for k, v in flags.items() if k != "alg"}


def data_txt(folder: Path) -> Path:
    return folder / "data.txt"


def compute_collection(run: Run, dataset: Path, out_dir: Path, samples: int) -> dict:
    """The flags of a compute cost data collection: `samples` random shards of `dataset`'s tables."""
    p = run.preset
    return {"dataset_dir": dataset, "out_dir": out_dir, "data_size": samples, "max_tables": p.max_tables,
            **run.problem_flags("ndevices"), "max_dim": p.max_dim, "warmup": p.warmup, "iters": p.iters,
            "half_share": p.half_share, **run.device(), **run.workers()}


def other_compute(run: Run, onpolicy: bool = False) -> list[Path]:
    """The compute data of the sets beyond the first that the compute models (and the fitted estimator) read
    beside the first set's: their random shards (3a), and with `onpolicy` (a model retrained on the on-policy
    data, or the estimator fitted beside it) their measured plans (4d)."""
    others = run.sets[1:]
    return [run.at(s).compute_data for s in others if s.compute_samples > 0] \
        + [run.at(s).plan_data / "compute" for s in others if onpolicy and run.onpolicy_of(s)]


def extra_compute(run: Run, onpolicy: bool = False) -> dict:
    """`other_compute` as the training scripts' flag."""
    dirs = other_compute(run, onpolicy)
    return {"extra_data_dirs": ",".join(map(str, dirs))} if dirs else {}


def ensemble_flags(run: Run) -> dict:
    return {"ensemble": run.preset.ensemble} if run.preset.ensemble > 1 else {}


def lambda_flags(s: TaskSet, preset) -> dict:
    """NeuroShard+ planned once per value of the preset's lambdas, where the set's on-policy algorithms have it."""
    return {"plus_lambdas": preset.plus_lambdas} if "neuroshard_plus" in s.onpolicy_algs.split(",") else {}


def onpolicy_collection(run: Run, s: TaskSet) -> dict:
    """collect_plan_cost_data.py's flags: the plans of set `s`'s first training tasks by its on-policy
    algorithms, made with the random data's models (and the collective model where the set spreads tables),
    measured as the evaluation measures plans."""
    lay, p = run.at(s), run.preset
    return {"data_dir": lay.dataset, "task_path": data_txt(lay.train_tasks), "eval_task_path": data_txt(lay.tasks),
            **run.models(final=False), **({"collective_model": run.collective_model()} if s.spread else {}),
            "alg": s.onpolicy_algs, **lambda_flags(s, p), "max_tasks": s.onpolicy_tasks, **run.problem_flags(),
            **run.hosts(), "max_dim": p.max_dim, "out_dir": lay.plan_data, "warmup": p.eval_warmup,
            "iters": p.eval_iters, "repeats": p.onpolicy_repeats, **run.device(), "quiet": True,
            "no_progress": True}


def onpolicy_inputs(run: Run, s: TaskSet) -> list[Path]:
    return [data_txt(run.at(s).train_tasks), data_txt(run.at(s).tasks), *run.models(final=False).values()] \
        + ([run.collective_model()] if s.spread else [])


def onpolicy_outputs(run: Run, s: TaskSet) -> list[Path]:
    """The compute and comm samples, and lambda.json where NeuroShard+ was planned with several lambdas."""
    data = run.at(s).plan_data
    several = len(lambda_flags(s, run.preset).get("plus_lambdas", "").split(",")) > 1
    return [data_txt(data / "compute"), data_txt(data / "comm")] + ([data / LAMBDA_JSON] if several else [])


def policy_flags(run: Run, s: TaskSet, alg: str) -> dict:
    lay = run.at(s)
    return {"data_dir": lay.dataset, "task_path": data_txt(lay.train_tasks), "eval_task_path": data_txt(lay.tasks),
            **run.models(), **run.problem_flags(), "no_progress": True, "out_path": run.layout.models / f"{alg}.pt"}


def refine_flags(run: Run) -> dict:
    """Hardware in the loop when planning: candidates measured as the evaluation measures plans."""
    p = run.preset
    if not p.refine:
        return {}
    return {"refine": p.refine, "refine_algs": p.refine_algs, "refine_repeats": p.refine_repeats,
            "warmup": p.eval_warmup, "iters": p.eval_iters, **run.device()}


def powered_flags(run: Run, s: TaskSet) -> dict:
    """Prediction-powered verdicts: the unmeasured tasks' plans and their task file."""
    if not run.unmeasured(s):
        return {}
    return {"unmeasured_plans": run.at(s).unmeasured_sim / "plans.json",
            "unmeasured_task_path": data_txt(run.at(s).unmeasured_tasks)}


def round_anchor_flags(run: Run, s: TaskSet) -> dict:
    """Step 5e's plans of the set's anchor tasks measured in every round of its hardware evaluation, the rounds'
    speed (eval/round_calibration.py): none with round_anchors 0."""
    if not run.anchors:
        return {}
    return {"round_anchors": run.at(s).anchor_sim / "plans.json", "anchors_per_round": run.preset.round_anchors}


def torchrec_anchor_flags(run: Run, s: TaskSet) -> dict:
    """eval_torchrec.py's flags for per-round calibration: the set's step 7a plans, which the runtime model is
    fitted to, one of each of `round_anchors` of them trained again in every round of step 7f
    (`torchrec.training_eval`); none with round_anchors 0 or for a set that does not ask. The model prices them at
    the speed of the hour 7a trained them, so their ratio in a round is the machine's speed against that hour
    alone, and what the evaluation's plans are off after the move is the model's error on plans it never saw.
    Plans of unseen tasks as anchors (as step 6b's, whose models no one job was fitted to) would move the rounds
    by the model's error on those few tasks as well."""
    if not (run.anchors and s.torchrec_anchors):
        return {}
    return {"round_anchors": run.at(s).torchrec_data / "results.json",
            "anchors_per_round": run.preset.round_anchors}


def training_flags(run: Run) -> dict:
    p = run.preset
    return {"warmup": p.torchrec_warmup, "iters": p.torchrec_iters, "seed": run.problem.seed, **run.device()}


def runtime_collection(run: Run, s: TaskSet, out_dir: Path, algs: str = "neuroshard,size_lookup_greedy,torchrec",
                       random_plans: int | None = None) -> dict:
    """The flags of a TorchRec runtime data collection: the plans of `algs` and `random_plans` random plans
    (default: the preset's) of set `s`'s training tasks (never one of its evaluation tasks), trained in TorchRec."""
    p, lay = run.preset, run.at(s)
    random_plans = p.torchrec_random_plans if random_plans is None else random_plans
    spread = {"spread_share": p.torchrec_spread_share} if random_plans else {}  # the random plans' spread tables
    return {"data_dir": lay.dataset, "task_path": data_txt(lay.train_tasks), "eval_task_path": data_txt(lay.tasks),
            **run.models(), **run.problem_flags(), **run.hosts(), "max_tasks": p.torchrec_data_tasks,
            "random_plans": random_plans, **spread, "alg": algs, **training_flags(run), "out_dir": out_dir,
            "quiet": True, "no_progress": True}


def runtime_fit(run: Run, extras: list[tuple[TaskSet, Path]], out_path: Path) -> dict:
    """The flags of a TorchRec runtime model fit to the first set's step 7a collection and the `extras`
    (collection dirs over a set's training tasks, each with a speed of its own), written to `out_path`."""
    first = run.at(run.first)
    flags = {"data_dir": first.dataset, "task_path": data_txt(first.train_tasks),
             "results": first.torchrec_data / "results.json", **run.models(), **run.problem_flags("max_mem"),
             "out_path": out_path}
    if extras:
        flags |= {"extra_results": ",".join(str(d / "results.json") for _, d in extras),
                  "extra_data_dir": ",".join(str(run.at(x).dataset) for x, _ in extras),
                  "extra_task_path": ",".join(str(data_txt(run.at(x).train_tasks)) for x, _ in extras)}
    return flags
