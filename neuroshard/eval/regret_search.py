"""Measured plan spaces, the ground truth of regret (`benchmarks/bench_regret.py`; the statistics: `eval.regret`).

Small tasks are drawn afresh from each task set's dataset (`draw_tasks`: the set's own task generator with a seed of
their own, so that no model, policy or estimator trained on them), every algorithm plans them
(`plan_algorithms`), and per runtime each task's plan space is measured (`measure_runtime`) in stages, each one
measuring job of a set's plans in shuffled rounds (`Measure`: the plan job, `plan_job_measure`, or TorchRec
training), in a folder of its own under `<out>/<runtime>/<set>/`, resumable (an interrupted job continues from its
log; a finished stage is read back):

* A space of at most `max_space` plans (`planner.space.enumerate_plans` with `space_spec`) is measured whole in
  the stage `final`, with the algorithms' plans that lie outside it.
* A larger space is searched on hardware: `search_0` measures the algorithms' distinct plans (`search_rounds`
  rounds); each later step measures the incumbent (the measured best so far) beside up to `search_batch` of its
  unmeasured neighbours (`planner.space.neighbours`), those the guiding cost model rates cheapest first; the best
  of them replaces the incumbent when it measured below it beyond the noise (`eval.refine.choose` at
  `search_confidence`, the round noise pooled over the step's tasks). A task stops once `saturation` further
  measured candidates found nothing better (saturated), when its incumbent has no unmeasured neighbour left, or
  after `search_steps` steps; its saturation curve records after each step how many candidates were measured and
  the incumbent's cost relative to the first one's (each step's ratio measured in that step's rounds). Then
  `final` measures its algorithms' plans, the search's `final_top` best and each cost model's own best among all
  it measured, in `rounds` fresh rounds: the search's measurements choose what is measured, never the figures.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, ClassVar, Sequence

import numpy as np

from neuroshard.checks import check_float, check_int
from neuroshard.eval.refine import choose, paired_noise
from neuroshard.eval.regret import TaskSpace
from neuroshard.planner.space import (
    COLUMN_WISE,
    SPACE_KINDS,
    SpaceSpec,
    SpaceTooLarge,
    canonical_plan,
    enumerate_plans,
    neighbours,
    plan_key,
)
from neuroshard.problem import Problem
from neuroshard.settings import Settings, setting
from neuroshard.types.errors import ConfigError, NeuroShardError
from neuroshard.types.plan import DATA_PARALLEL, ROW_WISE, TABLE_ROW_WISE, Plan
from neuroshard.types.records import PlanRecord, task_identity
from neuroshard.types.tables import ShardTable, TableConfig, Task

RUNTIMES = ("paper", "torchrec")
# draws per task: a task of a few tables with a table larger than a device and a hot one is a rare draw
MAX_DRAWS = 200_000
# a plan's estimate by one cost model (None: it cannot price it)
Estimator = Callable[[Sequence[ShardTable], Plan], "float | None"]


@dataclass(frozen=True)
class RegretConfig(Settings):
    """What the regret measurement draws, plans, enumerates, searches and measures (bench_regret.py's flags)."""

    TITLE: ClassVar[str] = "regret"

    tasks_per_set: int = setting(8, "tasks drawn from each task set's dataset")
    set_tasks: str = setting("", "per-set task counts instead of --tasks_per_set, e.g. oversize=1 (its 1-2 GB "
                                 "tables take seconds to build for each TorchRec measurement)")
    tables_per_task: tuple[int, int] = setting((3, 3), "tables per task, inclusive range (lo,hi)")
    draw_seed: int = setting(3000, "seed of the task draws (none of the pipeline's: no model trained on them)")
    runtimes: str = setting(",".join(RUNTIMES), "runtimes measured: paper (the plan job), torchrec (TorchRec "
                                                "training), comma-separated")
    space_kinds: str = setting("auto", "sharding kinds a space holds beyond table-wise (column_wise, row_wise, "
                                       "data_parallel, table_row_wise); auto: column-wise and data-parallel, "
                                       "row-wise (table-row-wise with hosts) for a table larger than a device, on "
                                       "the paper runtime only those its collective model prices")
    split_depth: int = setting(1, "halvings of a column-wise table in a space (1: halves; 2: quarters too)")
    max_space: int = setting(60, "a task whose space holds more plans is searched on hardware instead")
    rounds: int = setting(4, "rounds of the final measurement, the one the figures come from (2 or more)")
    search_rounds: int = setting(2, "rounds of each search step's measurement")
    search_batch: int = setting(8, "neighbours of the incumbent measured per search step")
    saturation: int = setting(24, "a search stops once this many further measured candidates found nothing better")
    search_steps: int = setting(10, "at most this many search steps after the algorithms' plans")
    search_confidence: float = setting(0.9, "a neighbour replaces the incumbent when it measured below it with this "
                                            "confidence (one-sided, corrected for the step's candidates)")
    final_top: int = setting(4, "the search's best plans measured again in the final measurement")

    def validate(self) -> None:
        check_int("--tasks_per_set", self.tasks_per_set, 1)
        for count in self.set_counts().values():
            check_int("--set_tasks", count, 1)
        lo, hi = self.tables_per_task
        check_int("--tables_per_task", lo, 1)
        check_int("--tables_per_task", hi, lo)
        check_int("--draw_seed", self.draw_seed, 0)
        for r in self.runtime_list():
            if r not in RUNTIMES:
                raise ConfigError("--runtimes", f"{r!r} is not one of {', '.join(RUNTIMES)}")
        if self.space_kinds != "auto":
            for k in self.kind_list():
                if k not in SPACE_KINDS:
                    raise ConfigError("--space_kinds", f"{k!r} is not auto or one of {', '.join(SPACE_KINDS)}")
        check_int("--split_depth", self.split_depth, 1)
        check_int("--max_space", self.max_space, 1)
        check_int("--rounds", self.rounds, 2)
        check_int("--search_rounds", self.search_rounds, 1)
        check_int("--search_batch", self.search_batch, 1)
        check_int("--saturation", self.saturation, 1)
        check_int("--search_steps", self.search_steps, 0)
        check_float("--search_confidence", self.search_confidence, 0.0, 1.0, hi_open=True)
        check_int("--final_top", self.final_top, 1)

    def set_counts(self) -> dict[str, int]:
        out = {}
        for item in (x.strip() for x in self.set_tasks.split(",") if x.strip()):
            name, sep, count = item.partition("=")
            if not sep or not count.strip().isdigit():
                raise ConfigError("--set_tasks", f"expected SET=COUNT, got {item!r}")
            out[name.strip()] = int(count)
        return out

    def tasks_for(self, task_set: str) -> int:
        """The tasks drawn from `task_set`: its `--set_tasks` count, else `--tasks_per_set`."""
        return self.set_counts().get(task_set, self.tasks_per_set)

    def runtime_list(self) -> list[str]:
        return [r.strip() for r in self.runtimes.split(",") if r.strip()]

    def kind_list(self) -> list[str]:
        return [k.strip() for k in self.space_kinds.split(",") if k.strip()]


def space_spec(cfg: RegretConfig, runtime: str, problem: Problem, collectives: bool) -> tuple[SpaceSpec, SpaceSpec]:
    """(what an enumerated space holds, what the search's moves may make) on `runtime` (`--space_kinds`):
    `collectives`: the paper runtime's cost models price row-wise, table-row-wise and data-parallel tables (the
    plan job measures them anyway; without a collective model no algorithm makes them there)."""
    if cfg.space_kinds != "auto":
        kinds = tuple(cfg.kind_list())
        return SpaceSpec(kinds, cfg.split_depth), SpaceSpec(kinds, cfg.split_depth)
    spread = runtime == "torchrec" or collectives
    kinds = (COLUMN_WISE,) + ((DATA_PARALLEL, ROW_WISE) if spread else ()) + \
        ((TABLE_ROW_WISE,) if spread and problem.local_world_size else ())
    large = tuple(k for k in (ROW_WISE, TABLE_ROW_WISE) if k in kinds)
    return SpaceSpec(kinds, cfg.split_depth, large), SpaceSpec(kinds, cfg.split_depth)


# --------------------------------------------------------------------------- tasks and plans


@dataclass
class SetInputs:
    """One task set's drawn tasks: its dataset (`data_dir`, `configs`, its global `batch_size`), the task file
    written for them (`task_path`) and the tasks."""

    name: str
    data_dir: Path
    configs: list[TableConfig]
    batch_size: int
    task_path: Path
    tasks: list[Task]

    def tables(self, task: int) -> list[ShardTable]:
        return self.tasks[task].tables(self.configs)


def draw_tasks(name: str, data_dir, set_tasks_config: dict, cfg: RegretConfig, out_dir,
               train_tasks=None) -> SetInputs:
    """`cfg.tasks_for(name)` tasks of `cfg.tables_per_task` tables over the dataset in `data_dir`, drawn like the
    set's own tasks (`set_tasks_config`: its gen_tasks.py config.json: the problem, the largest dim, a table
    larger than a device and a hot one where the set's tasks have them) with `cfg.draw_seed`; written with their
    config.json to `out_dir/data.txt` (the same draw again when it is there). InputError when one of them is a
    task of `train_tasks` (a task file the models or policies trained on)."""
    from neuroshard.data.task_gen import TaskSpec, generate_tasks
    from neuroshard.formats.dataset import read_dataset, read_table_configs
    from neuroshard.formats.io import write_json_atomic
    from neuroshard.formats.task_file import write_tasks

    src = dict(set_tasks_config)
    problem = Problem(**{k: v for k, v in src.get("problem", {}).items() if k in ("ndevices", "max_mem")},
                      seed=cfg.draw_seed)
    spec = TaskSpec(data_size=cfg.tasks_for(name), T_range=tuple(cfg.tables_per_task), max_dim=src.get("max_dim", 128),
                    problem=problem, oversize=src.get("oversize", 0), hot=src.get("hot", 0),
                    hot_min_pooling=src.get("hot_min_pooling", 100.0), max_tries=MAX_DRAWS)
    configs = read_table_configs(Path(data_dir) / "table_configs.json")
    tasks = generate_tasks(configs, spec)
    out = Path(out_dir)
    if train_tasks is not None and Path(train_tasks).exists():
        from neuroshard.eval.onpolicy import check_disjoint
        from neuroshard.formats.task_file import read_tasks

        check_disjoint(read_tasks(train_tasks, num_tables=len(configs)), tasks, train_tasks, out / "data.txt")
    write_tasks(out / "data.txt", tasks)
    write_json_atomic(out / "config.json", {"data_dir": str(Path(data_dir).resolve()), **spec.to_json()})
    batch = read_dataset(data_dir, validate=False).batch_size
    return SetInputs(name, Path(data_dir), configs, batch, out / "data.txt", tasks)


def plan_algorithms(inputs: SetInputs, algs: Sequence[str], problem: Problem, models, options: dict,
                    variants: dict | None, out_path, progress: bool = True) -> list[PlanRecord]:
    """Every algorithm's plan record of every task (`eval.planning.compute_plans`, each task with its own seed)
    and of each variant (`variants[label] = (algorithm, its cost models)`: NeuroShard with other models), written
    to `out_path` (plans.json) and read back from there when the algorithms and tasks are the same."""
    from neuroshard.eval.planning import compute_plans, plan_task, task_problem
    from neuroshard.formats.plan_file import read_plans, write_plans

    labels = [*algs, *(variants or {})]
    out_path = Path(out_path)
    if out_path.exists():
        got = read_plans(out_path)
        ids = [tuple(task_identity(inputs.tables(t)).values()) for t in range(len(inputs.tasks))]
        if [(r.task, r.alg) for r in got] == [(t, a) for t in range(len(inputs.tasks)) for a in labels] and \
                all((r.table_ids, r.dims) == ids[r.task] for r in got):
            return got
    records = compute_plans(inputs.configs, inputs.tasks, algs, problem, models, options=options, progress=progress)
    for label, (alg, own) in (variants or {}).items():
        for t in range(len(inputs.tasks)):
            rec = plan_task(t, inputs.tables(t), alg, task_problem(problem, t), own, options)
            records.append(replace(rec, alg=label))
    records.sort(key=lambda r: (r.task, labels.index(r.alg)))
    records = [replace(r, **task_identity(inputs.tables(r.task))) for r in records]
    write_plans(out_path, records)
    return records


# --------------------------------------------------------------------------- measuring


# (set, plan records, rounds, stage folder) -> {(task, label): cost of each round (ms)}
Measure = Callable[[SetInputs, list, int, Path], dict]


def plan_job_measure(hw, progress: bool = True) -> Measure:
    """A `Measure` by the plan job (`eval.hardware.run_evaluation`, `hw` its settings, `repeats` the rounds): a
    finished stage read back (`measured_before`), else measured (resuming its log), a progress bar counting the
    measurements."""
    from tqdm import tqdm

    from neuroshard.eval.hardware import measured_before, run_evaluation

    def measure(inputs: SetInputs, records: list, rounds: int, stage: Path) -> dict:
        cfg = replace(hw, repeats=rounds)
        config = {"regret_stage": cfg.to_json(), "task_path": str(inputs.task_path)}
        got = measured_before(stage, records, config, rounds)
        if got is None:
            labels = list(dict.fromkeys(r.alg for r in records))
            with tqdm(total=len(records) * rounds, desc=f"plan job {stage.name}", unit="plan",
                      disable=None if progress else True) as bar:
                def show(line: str) -> None:
                    if "earlier, interrupted run" in line:
                        bar.write(line)
                        bar.update(int(line.split()[0]))
                    else:
                        bar.update(1)

                got, _ = run_evaluation(records, inputs.data_dir, inputs.task_path, cfg, stage, labels,
                                        len(inputs.tasks), config=config, show=show)
        return {(r.task, r.alg): list(r.repeat_costs) for r in got}

    return measure


def _records(inputs: SetInputs, plans: dict[int, list[Plan]]) -> list[PlanRecord]:
    """The plan records of a stage: task t's k-th plan labelled `plan<k>`."""
    return [PlanRecord(t, f"plan{k}", plan=p, num_tables=len(inputs.tasks[t]), **task_identity(inputs.tables(t)))
            for t, ps in plans.items() for k, p in enumerate(ps)]


def _estimate(estimators: dict[str, Estimator], tables, plan: Plan) -> dict[str, float | None]:
    return {label: est(tables, plan) for label, est in estimators.items()}


@dataclass
class _Search:
    """One task's hardware-in-the-loop search (module doc)."""

    plans: dict  # plan key -> plan
    rel: dict  # plan key -> measured cost relative to the first incumbent
    incumbent: tuple
    since: int = 0  # candidates measured since the last improvement
    steps: int = 0
    done: str | None = None  # why it stopped: saturated, exhausted, steps
    curve: list | None = None


def _search(inputs: SetInputs, tasks: Sequence[int], starts: dict[int, list[Plan]], problem: Problem,
            spec: SpaceSpec, guide: Estimator | None, measure: Measure, cfg: RegretConfig, folder: Path,
            show) -> dict[int, _Search]:
    """The hardware-in-the-loop search of every task of `tasks` in lockstep (module doc), each step one job."""
    states: dict[int, _Search] = {}
    first = {t: starts[t] for t in tasks}
    costs = measure(inputs, _records(inputs, first), cfg.search_rounds, folder / "search_0")
    for t in tasks:
        means = [float(np.mean(costs[t, f"plan{k}"])) for k in range(len(first[t]))]
        best = int(np.argmin(means))
        keys = [plan_key(inputs.tables(t), p, problem) for p in first[t]]
        states[t] = _Search(dict(zip(keys, first[t])), {k: m / means[best] for k, m in zip(keys, means)}, keys[best],
                            curve=[{"step": 0, "measured": 0, "best": 1.0, "improved": False}])
    for step in range(1, cfg.search_steps + 1):
        batch: dict[int, list[Plan]] = {}
        for t in tasks:
            s = states[t]
            if s.done:
                continue
            tables = inputs.tables(t)
            fresh = [p for p in neighbours(tables, s.plans[s.incumbent], problem, spec)
                     if plan_key(tables, p, problem) not in s.plans]
            if not fresh:
                s.done = "exhausted"
                continue
            if guide is not None:
                est = [guide(tables, p) for p in fresh]
                fresh = [p for _, _, p in sorted(zip([math.inf if e is None else e for e in est], range(len(fresh)),
                                                     fresh))]
            batch[t] = [s.plans[s.incumbent], *fresh[:cfg.search_batch]]
        if not batch:
            break
        costs = measure(inputs, _records(inputs, batch), cfg.search_rounds, folder / f"search_{step}")
        by_task = {t: [costs[t, f"plan{k}"] for k in range(len(ps))] for t, ps in batch.items()}
        noise = paired_noise(list(by_task.values()))
        for t, ps in batch.items():
            s, tables = states[t], inputs.tables(t)
            c = by_task[t]
            inc = float(np.mean(c[0]))
            base = s.rel[s.incumbent]
            for p, ck in zip(ps[1:], c[1:]):
                k = plan_key(tables, p, problem)
                s.plans[k] = p
                s.rel[k] = base * float(np.mean(ck)) / inc
            chosen = choose(c, noise, cfg.search_confidence)
            measured = s.curve[-1]["measured"] + len(ps) - 1
            s.steps = step
            if chosen:
                s.incumbent, s.since = plan_key(tables, ps[chosen], problem), 0
            else:
                s.since += len(ps) - 1
            s.curve.append({"step": step, "measured": measured, "best": s.rel[s.incumbent], "improved": bool(chosen),
                            "noise": noise})
            if s.since >= cfg.saturation:
                s.done = "saturated"
        if show is not None:
            active = sum(1 for s in states.values() if not s.done)
            show(f"{inputs.name}: search step {step}: {sum(len(p) - 1 for p in batch.values())} candidates of "
                 f"{len(batch)} tasks measured, {active} tasks still searching")
    for s in states.values():
        s.done = s.done or "steps"
    return states


def measure_runtime(runtime: str, inputs: SetInputs, records: Sequence[PlanRecord], problem: Problem,
                    spaces: tuple[SpaceSpec, SpaceSpec], estimators: dict[str, Estimator], guide: str | None,
                    measure: Measure, cfg: RegretConfig, folder, show: Callable[[str], None] | None = None
                    ) -> list[TaskSpace]:
    """Every task's measured space on `runtime` (module doc): enumerated where it holds at most `cfg.max_space`
    plans, else searched; `records`: the algorithms' plan records of the set; `estimators`: the cost models whose
    estimates of every measured plan the spaces keep (`guide`: the one that orders the search's candidates)."""
    folder = Path(folder)
    enum_spec, move_spec = spaces
    final: dict[int, list[Plan]] = {}
    enumerated: dict[int, int] = {}
    algs: dict[int, dict[str, tuple]] = {}
    starts: dict[int, list[Plan]] = {}
    for t in range(len(inputs.tasks)):
        tables = inputs.tables(t)
        mine = {r.alg: canonical_plan(tables, r.plan, problem) for r in records if r.task == t and r.plan is not None}
        algs[t] = {a: plan_key(tables, p, problem) for a, p in mine.items()}
        distinct = list({plan_key(tables, p, problem): p for p in mine.values()}.values())
        try:
            space = enumerate_plans(tables, problem, enum_spec, limit=cfg.max_space)
        except SpaceTooLarge:
            if distinct:
                starts[t] = distinct
            elif show is not None:  # nothing to search from
                show(f"{inputs.name} task {t}: no algorithm planned it and its space is too large: left out")
            continue
        keys = {plan_key(tables, p, problem) for p in space}
        enumerated[t] = len(space)
        final[t] = space + [p for p in distinct if plan_key(tables, p, problem) not in keys]
        if show is not None:
            show(f"{inputs.name} task {t}: {len(space)} distinct plans, {len(final[t]) - len(space)} algorithms' "
                 "plans outside them")
    searched = sorted(starts)
    states = _search(inputs, searched, starts, problem, move_spec, estimators.get(guide), measure, cfg, folder,
                     show) if searched else {}
    for t in searched:
        s, tables = states[t], inputs.tables(t)
        keep = list(dict.fromkeys(algs[t].values()))
        keep += [k for k in sorted(s.rel, key=s.rel.get)[:cfg.final_top] if k not in keep]
        for label, est in estimators.items():  # each model's own best among everything the search measured
            priced = [(e, k) for k in s.plans if (e := est(tables, s.plans[k])) is not None]
            if priced and min(priced)[1] not in keep:
                keep.append(min(priced)[1])
        final[t] = [s.plans[k] for k in keep]
    costs = measure(inputs, _records(inputs, final), cfg.rounds, folder / "final")
    out = []
    for t, plans in sorted(final.items()):
        tables = inputs.tables(t)
        keys = [plan_key(tables, p, problem) for p in plans]
        est = [_estimate(estimators, tables, p) for p in plans]
        out.append(TaskSpace(runtime, inputs.name, t, [x.table_id for x in tables], [x.dim for x in tables], plans,
                             [costs[t, f"plan{k}"] for k in range(len(plans))],
                             {a: keys.index(k) for a, k in algs[t].items()}, t in enumerated, enumerated.get(t),
                             {label: [e[label] for e in est] for label in estimators},
                             [] if t in enumerated else [*states[t].curve, {"stopped": states[t].done}]))
    return out


def print_sizes(inputs: SetInputs, records: Sequence[PlanRecord], problem: Problem, spec: SpaceSpec,
                cfg: RegretConfig, runtime: str) -> None:
    """One line per task: its space's size (or that it is searched) and its algorithms' distinct plans."""
    for t in range(len(inputs.tasks)):
        tables = inputs.tables(t)
        distinct = {plan_key(tables, r.plan, problem) for r in records if r.task == t and r.plan is not None}
        try:
            size = f"{len(enumerate_plans(tables, problem, spec, limit=cfg.max_space))} plans, measured whole"
        except SpaceTooLarge:
            size = f"more than {cfg.max_space} plans: searched"
        print(f"{runtime} / {inputs.name} task {t} ({len(tables)} tables, dims {[x.dim for x in tables]}, "
              f"{max(x.size_gb for x in tables):.2f} GB largest): {size}; {len(distinct)} distinct algorithm plans")


def simulated(models, problem: Problem) -> Estimator:
    """An `Estimator` by `planner.simulator.simulate` under `models` (None where they cannot price a plan)."""
    from neuroshard.planner.simulator import simulate

    def estimate(tables, plan):
        try:
            return float(simulate(tables, plan, models, problem).cost)
        except NeuroShardError:
            return None

    return estimate


def write_outputs(out_dir, spaces: Sequence[TaskSpace], summary: dict) -> None:
    """results.json (every measured space), results.csv (a row per runtime, task and algorithm), summary.json and
    summary.md."""
    import csv

    from neuroshard.eval.regret import csv_rows, summary_markdown
    from neuroshard.formats.io import write_json_atomic

    out = Path(out_dir)
    write_json_atomic(out / "results.json", [s.to_json() for s in spaces])
    write_json_atomic(out / "summary.json", summary)
    rows = csv_rows(spaces, summary)
    if rows:
        with open(out / "results.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    (out / "summary.md").write_text(summary_markdown(summary))
    print(f"wrote {out / 'summary.md'}", file=sys.stderr)


# --------------------------------------------------------------------------- a pipeline run's models


@dataclass
class RunModels:
    """What a pipeline run plans and prices with (`run`: its `pipeline.layout.Layout`): the final cost models
    (retrained on on-policy data where it has them), the random data's, each with the collective model and
    scaled by the calibration before planning as its planning steps did; the fitted TorchRec estimator, the
    TorchRec runtime model, the learned policies and NeuroShard+'s lambda where it has them."""

    final: object
    random: object
    ndevices: int
    paths: dict
    collectives: str | None = None

    @classmethod
    def of(cls, run, problem: Problem) -> "RunModels":
        from neuroshard.eval.drift import calibrated, read_calibration
        from neuroshard.planner.costs.cost_models import CostModels

        n = problem.ndevices
        final_dir = run.onpolicy_models if (run.onpolicy_models / "compute.pt").exists() else run.models
        coll = run.models / f"collectives_{n}.json"
        factors = read_calibration(run.calibration) if (run.calibration / "drift_compute.json").exists() else None

        def load(folder):
            m = CostModels.from_paths(folder / "compute.pt", folder / f"comm_{n}_fw.pt", folder / f"comm_{n}_bw.pt", n)
            m = m.with_collectives(coll if coll.exists() else None)
            return calibrated(m, factors) if factors else m

        found = {"final": final_dir, "random": run.models, "collectives": coll,
                 "calibration": run.calibration if factors else None,
                 "torchrec_estimator": final_dir / f"torchrec_estimator_{n}.json",
                 "runtime_model": final_dir / f"torchrec_runtime_{n}.json",
                 "dreamshard_policy": run.models / "dreamshard.pt", "autoshard_policy": run.models / "autoshard.pt",
                 "lambda": run.out / "plan_data" / "lambda.json"}
        paths = {k: str(v) for k, v in found.items() if v is not None and Path(v).exists()}
        return cls(load(final_dir), load(run.models), n, paths, paths.get("collectives"))

    def options(self, args, batch: int) -> dict:
        """The sharders' options: the script's flags, the run's policies, estimator and lambda where not given."""
        from neuroshard.formats.side_files import read_lambda_choice
        from neuroshard.planner.registry import sharder_options

        given = getattr(args, "given", set())
        for key in ("dreamshard_policy", "autoshard_policy", "torchrec_estimator"):
            if getattr(args, key, None) is None and key in self.paths:
                setattr(args, key, self.paths[key])
        if "--plus_lambda" not in given and "lambda" in self.paths:
            chosen = read_lambda_choice(self.paths["lambda"]).chosen
            if chosen is not None:
                args.plus_lambda = chosen
        return sharder_options(args, batch)

    def algorithms(self, options: dict, alg: str = "all") -> list[str]:
        """The algorithms of `alg` (`eval.planning.resolve_algs`); "all" is every registered one the run can plan
        with, TorchRec's full planner and its planner on the neural models (with a fitted estimator) included."""
        from neuroshard.eval.planning import resolve_algs

        if alg.strip() == "all":
            alg = ",".join(["all", "torchrec_full"] + (["torchrec_neural"] if "torchrec_estimator" in self.paths
                                                       else []))
        return resolve_algs(alg, options)

    def variants(self) -> dict:
        """NeuroShard with the random data's models, and with the runtime model where the run has one."""
        out = {"neuroshard@random": ("neuroshard", self.random)}
        if "runtime_model" in self.paths:
            out["neuroshard[torchrec]"] = ("neuroshard", self.runtime_models())
        return out

    def runtime_models(self):
        """The final models pricing plans for TorchRec's runtime with the run's runtime model."""
        return self.final.for_runtime("torchrec", self.paths["runtime_model"])

    def _models(self, batch: int) -> dict:
        from neuroshard.eval.regret import ModelSpec
        from neuroshard.planner.costs.analytic import AnalyticModel
        from neuroshard.planner.costs.cost_models import CostModels

        out = {"neural": (ModelSpec("neural", "neural models, random + on-policy data", ("neuroshard",)), self.final),
               "neural_random": (ModelSpec("neural_random", "neural models, random data", ("neuroshard@random",)),
                                 self.random)}
        if "torchrec_estimator" in self.paths:
            fitted = CostModels.analytic_models(AnalyticModel.load(self.paths["torchrec_estimator"], self.ndevices))
            out["fitted"] = (ModelSpec("fitted", "TorchRec's estimator fitted to the cost data",
                                       ("neuroshard_fitted", "torchrec_fitted")),
                             fitted.with_collectives(self.collectives))
        default = CostModels.analytic_models(AnalyticModel.torchrec_default(self.ndevices, batch))
        out["torchrec_default"] = (ModelSpec("torchrec_default", "TorchRec's estimator as it ships", ("torchrec",)),
                                   default.with_collectives(self.collectives))
        if "runtime_model" in self.paths:
            out["runtime"] = (ModelSpec("runtime", "the TorchRec runtime model", ("neuroshard[torchrec]",)),
                              self.runtime_models())
        return out

    def specs(self, batch: int) -> list:
        return [spec for spec, _ in self._models(batch).values()]

    def estimators(self, problem: Problem, batch: int) -> dict[str, Estimator]:
        return {label: simulated(models, problem) for label, (_, models) in self._models(batch).items()}

    def guide(self, runtime: str) -> str:
        """The cost model that orders the search's candidates: the runtime model on TorchRec's runtime where the
        run has one, else the final neural models."""
        return "runtime" if runtime == "torchrec" and "runtime_model" in self.paths else "neural"
