"""Plans for every task and algorithm, with their simulated costs (DESIGN §10).

`eval_simulator.py` is a thin wrapper around this module and `eval/results`,
and the hardware evaluation (`eval.py`) computes its plans with
`compute_plans` too, so both evaluate the same plans made by the same code.
Each plan comes from the library call `planner.shard.shard` and is kept as a
`types.PlanRecord`: "oom" when the sharder found no plan within the memory
cap (or returned one that exceeds it), "invalid" when it returned a plan
that breaks the rules. Both count as invalid tasks (upstream's `Valid v / N`).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from neuroshard.formats.plan_file import plan_mismatch, plan_view
from neuroshard.learned.policy import POLICY_OPTIONS, load_policy
from neuroshard.planner.costs.cost_models import (
    CostModels,
    add_model_flags,
    model_paths,
)
from neuroshard.planner.costs.scorer import get_scorer
from neuroshard.planner.registry import (
    algorithm_names,
    in_all,
    missing_requirement,
    options_for,
    prepare,
    required_option,
)
from neuroshard.planner.shard import shard
from neuroshard.planner.simulator import simulate, validate_plan
from neuroshard.problem import Problem
from neuroshard.settings import add_flag
from neuroshard.types.errors import (
    InputError,
    InvalidPlanError,
    NeuroShardError,
    OutOfMemoryError,
)
from neuroshard.types.records import PlanRecord, task_identity
from neuroshard.types.tables import ShardTable, TableConfig, Task


@dataclass
class EvalInputs:
    """Everything an evaluation reads: dataset table configs, tasks (the first `--max_tasks` of the
    `tasks_in_file` the task file holds), the three cost models, the dataset's batch size (None
    without a data.pt) and the comm models' paths (as resolved by `inputs_from_args`)."""

    configs: list[TableConfig]
    tasks: list[Task]
    models: CostModels
    tasks_in_file: int
    batch_size: int | None = None
    fw_comm_model: str | None = None
    bw_comm_model: str | None = None
    calibration: dict | None = None  # eval.drift.read_drift's factors the models were scaled by (--calibration)
    plan_speed: dict | None = None  # eval.drift.read_plan_speed's factors, on top of those (--plan_speed)


# the algorithms whose search optimises the cost models' runtime: their plans are labelled with it
RUNTIME_SEARCHES = ("neuroshard",)


def label_runtime(records: Sequence[PlanRecord], algs: Sequence[str], runtime: str) -> tuple[list, list]:
    """Records and algorithm list with the plans searched for `runtime` (other than the paper's) labelled
    `alg[runtime]` (e.g. neuroshard[torchrec]), so they sit beside the paper-runtime plans of the same
    algorithm in one comparison (eval_torchrec.py --plans a.json,b.json)."""
    from dataclasses import replace

    return ([replace(r, alg=runtime_label(r.alg, runtime)) for r in records],
            [runtime_label(a, runtime) for a in algs])


def runtime_label(alg: str, runtime: str) -> str:
    """`alg` as `label_runtime` names its plans searched for `runtime` (other than the paper's); a runtime data
    collection's variant of such a plan (`ALG+dp`) keeps its suffix after the runtime."""
    base, plus, variant = alg.partition("+")
    return f"{base}[{runtime}]{plus}{variant}" if base in RUNTIME_SEARCHES and runtime != "paper" else alg


def add_input_args(parser, data_help: str = "dataset dir with table_configs.json") -> None:
    """The flags naming what an evaluation reads and the problem it plans for, shared by eval_simulator.py,
    eval.py and the scripts that plan as they do."""
    add_flag(parser, "data_dir", help=data_help)
    add_flag(parser, "task_path")
    add_model_flags(parser)
    add_flag(parser, "calibration")
    add_flag(parser, "alg", help=(
        "sharding algorithm: any registered name, a comma list, or 'all' (the learned and fitted ones only when "
        "their policy or estimator is given; torchrec_neural and torchrec_full only when named). Plan spaces: "
        "whole tables only: dreamshard, autoshard; whole tables, a table larger than every device halved "
        "column-wise: random, dim_greedy, lookup_greedy, size_greedy, size_lookup_greedy; table-wise and "
        "column-wise: neuroshard, neuroshard_plus, neuroshard_fitted, torchrec, torchrec_fitted, torchrec_neural; "
        "also row-wise and data-parallel tables: neuroshard under --runtime torchrec (with a runtime model fitted "
        "on them) or with --collective_model on the paper runtime (table-row-wise too with --local_world_size and "
        "the model's fits over host groups), torchrec_full (TorchRec's planner with every sharding type, for "
        "--local_world_size ranks per host; on the paper runtime its row-wise, table-row-wise and data-parallel "
        "plans are priced with --collective_model, else invalid)"))
    Problem.add_args(parser)
    add_flag(parser, "max_tasks", help="evaluate only the first N tasks")


def add_runtime_args(parser) -> None:
    """`--runtime` and `--runtime_model`: the execution the plans are costed and searched for (`with_runtime`),
    shared by eval_simulator.py and collect_torchrec_cost_data.py."""
    parser.add_argument("--runtime", default="paper", choices=("paper", "torchrec"),
                        help="the execution plans are costed and searched for: the paper's (one kernel and one "
                             "exchange per device) or TorchRec's (DistributedModelParallel: groups by sharding "
                             "type, id distribution; the plans of neuroshard are then labelled "
                             "neuroshard[torchrec]) (default: paper)")
    add_flag(parser, "runtime_model", help="the TorchRec runtime model for --runtime torchrec (default: "
                                           "torchrec_runtime_<ndevices>.json beside --compute_model; "
                                           "train_torchrec_cost_model.py fits it)")


def with_runtime(args, inputs: EvalInputs) -> EvalInputs:
    """`inputs` whose models cost plans for `--runtime` (its model: `--runtime_model`, else the default path
    beside `--compute_model`)."""
    if args.runtime == "paper":
        return inputs
    from neuroshard.planner.costs.runtime_model import default_path

    path = args.runtime_model or default_path(Path(args.compute_model).parent, inputs.models.ndevices)
    return replace(inputs, models=inputs.models.for_runtime(args.runtime, path))


def inputs_from_args(args, problem: Problem) -> EvalInputs:
    """`load_inputs` from the flags of `add_input_args` (the first `--max_tasks` tasks) for `problem`; a comm
    model not named is `models/comm_<ndevices>_<fw|bw>.pt`."""
    compute, fw, bw = model_paths(args, problem.ndevices)
    inputs = load_inputs(args.data_dir, args.task_path, compute, fw, bw, problem.ndevices,
                         getattr(args, "max_tasks", None))
    inputs = replace(inputs, fw_comm_model=str(fw), bw_comm_model=str(bw))
    if getattr(args, "collective_model", None):
        inputs = replace(inputs, models=inputs.models.with_collectives(args.collective_model))
    if getattr(args, "calibration", None):
        inputs = calibrate(inputs, args.calibration)
    if getattr(args, "plan_speed", None):
        inputs = scale_to_plan_speed(inputs, args.plan_speed)
    return inputs


def calibrate(inputs: EvalInputs, calibration_dir) -> EvalInputs:
    """`inputs` with the models scaled by the machine's drift measured in `calibration_dir`
    (`eval.drift.read_calibration`)."""
    from neuroshard.eval.drift import calibrated, read_calibration

    factors = read_calibration(calibration_dir)
    return replace(inputs, models=calibrated(inputs.models, factors), calibration=factors)


def scale_to_plan_speed(inputs: EvalInputs, plan_speed_dir) -> EvalInputs:
    """`inputs` with the models scaled further by the plan job's speed measured in `plan_speed_dir`, under the
    same calibration (`eval.drift.read_plan_speed`)."""
    from neuroshard.eval.drift import calibrated, read_plan_speed

    factors = read_plan_speed(plan_speed_dir, inputs.calibration)
    return replace(inputs, models=calibrated(inputs.models, factors), plan_speed=factors)


def load_inputs(data_dir, task_path, compute_model, fw_comm_model, bw_comm_model, ndevices: int,
                max_tasks: int | None = None) -> EvalInputs:
    """Read the dataset's table configs, the tasks (the first `max_tasks`) and the cost models.

    The simulator needs no lookups: of `data.pt` only the batch size is read
    (memory-mapped, for sharders that plan for a batch, e.g. `torchrec`), and
    only when the file is there.
    """
    from neuroshard.formats.dataset import DATA_PT, read_dataset, read_table_configs
    from neuroshard.formats.task_file import read_tasks

    if ndevices < 1:
        raise NeuroShardError(f"--ndevices must be >= 1, got {ndevices}")
    if max_tasks is not None and max_tasks < 1:
        raise NeuroShardError(f"--max_tasks must be >= 1, got {max_tasks}")
    configs = read_table_configs(Path(data_dir) / "table_configs.json")
    all_tasks = read_tasks(task_path, num_tables=len(configs))
    tasks = all_tasks[:max_tasks] if max_tasks is not None else all_tasks
    models = CostModels.from_paths(compute_model, fw_comm_model, bw_comm_model, ndevices)
    batch = read_dataset(data_dir, validate=False).batch_size if (Path(data_dir) / DATA_PT).exists() else None
    return EvalInputs(configs, tasks, models, len(all_tasks), batch)


def resolve_algs(alg: str, options: dict | None = None) -> list[str]:
    """`--alg` value -> algorithm names: "all" is every registered one; a comma list is allowed (with "all" in
    it: every one "all" names and the others).

    "all" leaves out the algorithms whose optional package is not installed
    (named in a warning) and those whose required option (a learned sharder's
    trained policy, `--dreamshard_policy` / `--autoshard_policy`) is not in
    `options`; naming such an algorithm explicitly without it is a one-line
    error when it runs.
    """
    names = algorithm_names()
    algs = [a.strip() for a in alg.split(",") if a.strip()]
    unknown = [a for a in algs if a not in names and a != "all"]
    if not algs or unknown:
        raise NeuroShardError(f"--alg: unknown algorithm {', '.join(unknown) or repr(alg)}; "
                              f"choose from all, {', '.join(names)}")
    if "all" in algs:  # "all" among others (e.g. all,torchrec_neural): every one "all" names, then the others
        missing = {n: missing_requirement(n) for n in names}
        for n, module in missing.items():
            if module:
                print(f"warning: --alg all: skipping {n}: {module} is not installed", file=sys.stderr)
        every = [n for n in names if not missing[n] and in_all(n)
                 and (required_option(n) is None or (options or {}).get(required_option(n)))]
        algs = [x for a in algs for x in (every if a == "all" else [a])]
    return list(dict.fromkeys(algs))


def check_learned_policies(algs: Sequence[str], options: dict, problem: Problem) -> None:
    """Load the policy of every learned sharder in `algs` now, so a missing or mismatched
    checkpoint is a one-line error before any planning."""
    for alg in algs:
        if alg in POLICY_OPTIONS:
            load_policy(alg, options, problem)


def task_seed(seed: int, task: int) -> int:
    """The seed a sharder gets for task `task`: different per task, fixed by `--seed`."""
    return int(np.random.SeedSequence([int(seed), int(task)]).generate_state(1)[0])


def task_problem(problem: Problem, task: int) -> Problem:
    """The problem as task `task` is planned: the evaluation's, with the task's own seed (`task_seed`)."""
    return problem.with_seed(task_seed(problem.seed, task))


def plan_task(task: int, tables: Sequence[ShardTable], alg: str, problem: Problem, models: CostModels,
              options: dict | None = None) -> PlanRecord:
    """Run one sharder on one task (`planner.shard.shard`, for `problem` as it is) and keep the outcome as a
    PlanRecord."""
    t0 = time.perf_counter()
    try:
        res = shard(tables, problem, models=models, alg=alg, **options_for(alg, options))
    except (OutOfMemoryError, InvalidPlanError) as e:
        return PlanRecord(task=task, alg=alg, status="oom" if isinstance(e, OutOfMemoryError) else "invalid",
                          message=str(e), search_ms=1e3 * (time.perf_counter() - t0), num_tables=len(tables),
                          **task_identity(tables))
    return PlanRecord(task=task, alg=alg, plan=res.plan, estimate=res.breakdown, search_ms=res.search_ms,
                      num_tables=len(tables), view=res.view, **task_identity(tables))


def compute_plans(configs: Sequence[TableConfig], tasks: Sequence[Task], algs: Sequence[str], problem: Problem,
                  models: CostModels, options: dict | None = None, progress: bool = True,
                  on_record: Callable[[PlanRecord], None] | None = None) -> list[PlanRecord]:
    """Plan records for every task (outer loop, with a progress bar) and algorithm (inner loop); task i is
    planned with its own seed (`task_problem`)."""
    from tqdm import tqdm

    get_scorer(models)  # build the fast model copies now, so the first task's search time is fair
    for alg in algs:
        prepare(alg)  # likewise a sharder's one-time set-up (e.g. importing torchrec)
    records = []
    # disable=None: no bar when stderr is not a terminal (logs, pipes)
    for i in tqdm(range(len(tasks)), desc="tasks", unit="task", disable=None if progress else True,
                  file=sys.stderr):
        tables = tasks[i].tables(configs)
        for alg in algs:
            rec = plan_task(i, tables, alg, task_problem(problem, i), models, options)
            records.append(rec)
            if on_record is not None:
                on_record(rec)
    return records


def format_record(rec: PlanRecord, num_tasks: int) -> str:
    """One line per task and algorithm, as upstream printed: the plan and its estimated cost."""
    head = f"Task {rec.task + 1}/{num_tasks} [{rec.alg}]"
    if rec.status != "ok":
        kind = "Out of memory" if rec.status == "oom" else "Invalid plan"
        return f"{head} {kind}: {rec.message}"
    shards = [list(s) for s in rec.plan.shards]
    return (f"{head} Sharding steps: {list(rec.plan.column_steps)}, shards: {shards} -> "
            f"Latency: {rec.estimated_cost:.4f} ms (search {rec.search_ms:.1f} ms)")


# --------------------------------------------------------------------------- plans from a file


# a re-simulated estimate this far (relative) from the one a plans file recorded is warned about
ESTIMATE_TOLERANCE = 0.1


def check_plans(records: Sequence[PlanRecord], configs: Sequence[TableConfig], tasks: Sequence[Task],
                problem: Problem, models: CostModels) -> list[PlanRecord]:
    """Re-validate plan records against the tasks and recompute their estimates with `models`.

    A plan for another device count or memory cap, or one that breaks the
    rules for its task, becomes "oom"/"invalid" (reported, not run); the
    estimate written in the file is never trusted, it is simulated again
    (a warning when the two differ by more than `ESTIMATE_TOLERANCE`), and
    the task's identity (`types.task_identity`) is recorded.
    """
    out = []
    for rec in records:
        tables = tasks[rec.task].tables(configs)
        if rec.plan is None:
            out.append(replace(rec, estimate=None))
            continue
        try:
            validate_plan(tables, rec.plan, problem)  # device count first: the models need it
            estimate = simulate(tables, rec.plan, models, problem)
        except OutOfMemoryError as e:
            rec = replace(rec, plan=None, status="oom", message=str(e), estimate=None, view=None)
        except InvalidPlanError as e:
            rec = replace(rec, plan=None, status="invalid", message=f"plan does not fit task {rec.task}: {e}",
                          estimate=None, view=None)
        else:
            recorded = rec.estimated_cost
            if recorded is not None and not math.isclose(estimate.cost, recorded, rel_tol=ESTIMATE_TOLERANCE):
                print(f"warning: task {rec.task} [{rec.alg}]: the plan's estimate re-simulated is "
                      f"{estimate.cost:.4g} ms, the file recorded {recorded:.4g} ms (other cost models, or a "
                      "plan made for other tables?)", file=sys.stderr)
            rec = replace(rec, status="ok", message=None, estimate=estimate, num_tables=len(tables),
                          view=plan_view(tables, rec.plan), **task_identity(tables))
        out.append(rec)
    return out


def plans_from_file(path, inputs: EvalInputs, task_path, alg: str,
                    problem: Problem) -> tuple[list[PlanRecord], list[str]]:
    """The plan records of `path` (eval_simulator.py's plans.json) to measure for `inputs`, and their
    algorithms, checked against the task file.

    Errors (InputError naming the file and record): no record; a record for a
    task the task file does not have; two records for the same task and
    algorithm; a record whose task identity (table ids and dims), table count
    or per-table view does not match its task (plans made for another task
    file; `formats.plan_file.plan_mismatch`). Records for tasks beyond
    `--max_tasks` are left out; `alg` ("all" or names) picks algorithms.
    Estimates are recomputed.
    """
    from neuroshard.formats.plan_file import read_plans

    records = read_plans(path)
    if not records:
        raise InputError(path, "no plan records to measure")
    seen: dict[tuple[int, str], int] = {}
    for k, rec in enumerate(records):
        where = f"record {k} (task {rec.task}, {rec.alg})"
        if rec.task >= inputs.tasks_in_file:
            raise InputError(path, f"{where}: the task file {task_path} has {inputs.tasks_in_file} tasks")
        if (rec.task, rec.alg) in seen:
            raise InputError(path, f"{where}: duplicates record {seen[rec.task, rec.alg]}")
        seen[rec.task, rec.alg] = k
        if rec.task < len(inputs.tasks):  # a plan breaking the rules is reported as "invalid" (check_plans)
            mismatch = plan_mismatch(rec, inputs.tasks[rec.task].tables(inputs.configs), check_plan=False)
            if mismatch is not None:
                raise InputError(path, f"{where}: its tables do not match task {rec.task} of {task_path}: "
                                       f"{mismatch} (plans made for another task file?)")
    records = [r for r in records if r.task < len(inputs.tasks)]
    algs = list(dict.fromkeys(r.alg for r in records))
    if "all" not in [a.strip() for a in alg.split(",")]:  # "all" (alone or with others): every plan of the file
        wanted = resolve_algs(alg)
        records = [r for r in records if r.alg in wanted]
        algs = [a for a in wanted if a in algs]
    if not records:
        raise InputError(path, f"no plan records for the first {len(inputs.tasks)} tasks and --alg {alg}")
    checked = check_plans(records, inputs.configs, inputs.tasks, problem, inputs.models)
    if not any(r.plan is not None for r in checked):  # measuring nothing is an error, not an empty report
        bad = next((r for r in checked if r.message), None)
        raise InputError(path, "no plan here can be measured" + (
            f" (task {bad.task}, {bad.alg}: {bad.message})" if bad is not None else ""))
    return checked, algs




# Settings of eval_simulator.py's config.json that may differ between the measured plans and the unmeasured
# plans of prediction-powered verdicts (`unmeasured_plans`): which tasks and where the output went.
_TASK_SETTINGS = ("task_path", "max_tasks", "num_tasks", "out_dir", "quiet", "no_progress")
# ... and of gen_tasks.py's config.json: which and how many tasks were drawn.
_DRAW_SETTINGS = ("seed", "data_size", "out_dir")


def unmeasured_plans(path, task_path, inputs: EvalInputs, measured_plans, measured_task_path, algs: Sequence[str],
                     problem: Problem) -> list[PlanRecord]:
    """The plan records of `path` (eval_simulator.py's plans.json of `task_path`, tasks that are not measured)
    with their estimates simulated again under `inputs`' models: the simulator's predictions that make the
    hardware verdicts prediction-powered (`intervals.powered_difference`).

    The predictions on the unmeasured tasks must be distributed as those on the measured ones, so (InputError
    naming the file, else ConfigError): the measured plans come from a file too (`measured_plans`, eval.py
    --plans), and the two plans files' eval_simulator.py config.json agree on every setting but the tasks
    (the models, the calibration, the sharders' options, the seed); the two task files differ, and where
    both have gen_tasks.py's config.json, they were drawn with the same settings but another seed. Every
    algorithm of `algs` needs plans there."""
    from neuroshard.formats.io import read_json
    from neuroshard.formats.task_file import read_tasks
    from neuroshard.types.errors import ConfigError

    if measured_plans is None:
        raise ConfigError("--unmeasured_plans", "needs --plans: the measured plans must come from the same "
                                                "eval_simulator.py settings as the unmeasured ones")
    if Path(task_path).resolve() == Path(measured_task_path).resolve():
        raise ConfigError("--unmeasured_task_path", f"{task_path} is the measured task file: give tasks that are "
                                                    "not measured (gen_tasks.py with another --seed)")

    def config(plans_file) -> tuple[Path, dict]:
        cfg = Path(plans_file).parent / "config.json"
        if not cfg.exists():
            raise InputError(cfg, f"missing: the settings {plans_file} was made with (eval_simulator.py writes it)")
        return cfg, read_json(cfg)

    (mine_path, mine), (_, theirs) = config(path), config(measured_plans)
    for key in sorted(set(mine) | set(theirs)):
        if key not in _TASK_SETTINGS and mine.get(key) != theirs.get(key):
            raise InputError(mine_path, f"{key} is {mine.get(key)!r}, the measured plans' ({measured_plans}) "
                                        f"{theirs.get(key)!r}: predictions must come from the same planning")
    draws = [Path(p).parent / "config.json" for p in (task_path, measured_task_path)]
    if all(d.exists() for d in draws):
        # the task generator's settings, its problem's fields beside the others (`data.task_gen.TaskSpec`)
        mine, theirs = ({**{k: v for k, v in d.items() if k != "problem"}, **d.get("problem", {})}
                        for d in map(read_json, draws))
        for key in sorted(set(mine) | set(theirs)):
            if key not in _DRAW_SETTINGS and mine.get(key) != theirs.get(key):
                raise InputError(draws[0], f"{key} is {mine.get(key)!r}, the measured tasks' {theirs.get(key)!r}: "
                                           "the unmeasured tasks must come from the same generator")
        if mine.get("seed") == theirs.get("seed"):
            raise InputError(draws[0], f"seed {mine.get('seed')} is the measured tasks' seed: the same tasks")
    tasks = read_tasks(task_path, num_tables=len(inputs.configs))
    other = replace(inputs, tasks=tasks, tasks_in_file=len(tasks))
    records, found = plans_from_file(path, other, task_path, ",".join(algs), problem)
    missing = [a for a in algs if a not in found]
    if missing:
        raise InputError(path, f"no plans of {', '.join(missing)} (the measured algorithms)")
    return records
