"""Cost data of TorchRec's runtime: plans of TRAINING tasks trained under DistributedModelParallel.

The TorchRec runtime model (`planner.costs.runtime_model`) is fitted to how long
TorchRec takes to train a plan, so its data are plans trained in TorchRec:
per training task (never an evaluation task: `eval.onpolicy.check_disjoint`)

* `random_plans` random plans (`random_split_plan`): with `spread_share` > 0,
  each table row-wise or data-parallel with that chance (one kind drawn per
  table); then up to `max_splits` column splits of the other tables, and
  every piece on a random device with memory room, so the data hold plans
  with and without each group and with every balance between the ranks;
* the plans of the given algorithms (e.g. NeuroShard's, the greedy
  baselines', TorchRec's own planner's), the plans a search will compare;
* with `dp_min_pooling`, each of those plans again with its hot tables
  (pooling factor at least that, small enough to replicate) data-parallel
  (`hot_variant`, labelled `alg+dp`): the trade a search weighs for a hot
  table, which random plans, drawing their data-parallel tables among all the
  small ones, show rarely (docs/EXPERIMENTS.md, the entry on hot tables
  data-parallel in the runtime data);

all trained by `torchrec.training_eval.run_torchrec_eval` (one torchrun job,
shuffled, resumable; results.json holds each plan, its step times and every
rank's phase times). `read_samples` turns results.json back into
(tables, plan, step ms) samples.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from neuroshard.eval.planning import plan_task, task_problem, task_seed
from neuroshard.formats.io import read_json
from neuroshard.numerics import mape
from neuroshard.planner.baselines import random_sharder
from neuroshard.planner.costs.runtime_model import TorchRecRuntimeModel
from neuroshard.planner.registry import ShardingContext
from neuroshard.planner.simulator import replicable, spread_room, validate_plan
from neuroshard.problem import Problem
from neuroshard.types.codec import Record, json_field
from neuroshard.types.errors import InputError, InvalidPlanError, OutOfMemoryError
from neuroshard.types.plan import DATA_PARALLEL, ROW_WISE, TABLE_ROW_WISE, Plan, Spread, apply_column_steps
from neuroshard.types.records import PlanRecord, task_identity
from neuroshard.types.tables import ShardTable, TableConfig, Task, can_split

RANDOM = "random_split"


def random_label(k: int) -> str:
    """The record label of a task's k-th random plan."""
    return f"{RANDOM}[{k}]"


def random_split_plan(tables: Sequence[ShardTable], problem: Problem, max_splits: int,
                      spread_share: float = 0.0) -> Plan:
    """A random plan, all drawn from the problem's seed: each table spread with chance `spread_share`
    (row-wise over every rank or, for a small table, data-parallel, drawn per table; on a problem of
    several hosts also table-row-wise, on a host drawn with it); k ~ U{0..max_splits}
    halvings, each of a random other piece that can still be halved; then each piece on a uniformly random
    device with room left by the spread tables (`baselines.random_sharder`, which first halves a piece larger
    than every device until it fits). OutOfMemoryError when the pieces do not fit."""
    rng = np.random.default_rng(problem.seed)
    n = problem.ndevices
    spread = []
    hosts = problem.hosts
    kinds = (ROW_WISE, DATA_PARALLEL) + ((TABLE_ROW_WISE,) if len(hosts) > 1 else ())
    if spread_share > 0:
        for t in range(len(tables)):
            if rng.random() < spread_share:
                kind = kinds[int(rng.integers(len(kinds)))]
                if kind == DATA_PARALLEL and not replicable(tables[t], problem):
                    kind = ROW_WISE  # data-parallel is for small tables (simulator.replicable)
                ranks = hosts[int(rng.integers(len(hosts)))] if kind == TABLE_ROW_WISE else tuple(range(n))
                spread.append(Spread(t, kind, ranks))
    whole = {s.table for s in spread}
    steps: list[int] = []
    split = list(tables)
    for _ in range(int(rng.integers(max_splits + 1))):
        can = [i for i, t in enumerate(split) if can_split(t.dim) and i not in whole]
        if not can:
            break
        steps.append(int(can[int(rng.integers(len(can)))]))
        split = apply_column_steps(tables, steps)
    placed_ids = [i for i in range(len(split)) if i not in whole]
    room = spread_room(tables, spread, problem)
    placed = random_sharder([split[i] for i in placed_ids], room.with_seed(int(rng.integers(2**31))),
                            ShardingContext())
    # the sharder halves a piece larger than every device (`baselines.oversize_steps`): its steps index its own
    # list, whose new pieces come last, as the plan's do (each step adds one piece)
    for i in placed.column_steps:
        placed_ids.append(len(tables) + len(steps))
        steps.append(placed_ids[i])
    plan = Plan(tuple(steps), tuple(tuple(placed_ids[k] for k in shard) for shard in placed.shards), tuple(spread))
    validate_plan(tables, plan, problem)
    return plan


def hot_variant(tables: Sequence[ShardTable], plan: Plan, problem: Problem, min_pooling: float) -> Plan | None:
    """`plan` with its tables of pooling factor at least `min_pooling` that are not spread already, small
    enough to replicate (`simulator.replicable`) and allowed data-parallel by the problem's constraints
    (`TableConstraints.may_spread`) taken off their devices and made data-parallel; None when it has no such
    table or the result does not fit."""
    from neuroshard.planner.search.sharding_types import patched

    spread = {s.table for s in plan.spread}
    allows = problem.table_constraints
    hot = [t for t, table in enumerate(tables) if table.config.pooling_factor >= min_pooling and t not in spread
           and replicable(table, problem) and allows.may_spread(t, DATA_PARALLEL, problem.ndevices)]
    if not hot:
        return None
    every = tuple(range(problem.ndevices))
    try:
        variant = patched(tables, plan, list(plan.spread) + [Spread(t, DATA_PARALLEL, every) for t in hot])
        validate_plan(tables, variant, problem)
    except (OutOfMemoryError, InvalidPlanError):
        return None
    return variant


def collection_records(configs: Sequence[TableConfig], tasks: Sequence[Task], algs: Sequence[str], models,
                       problem: Problem, random_plans: int, max_splits: int,
                       options: dict | None = None, spread_share: float = 0.0,
                       dp_min_pooling: float | None = None) -> list[PlanRecord]:
    """Per task, the plans of `algs`, with `dp_min_pooling` each again with its hot tables data-parallel
    (`hot_variant`, label `alg+dp`), and `random_plans` random plans (labels `random_label(k)`, with
    `spread_share` as in `random_split_plan`); a plan that does not fit is left out (the record list says
    nothing about it: it is not a sample)."""
    out = []
    for i, task in enumerate(tasks):
        tables = task.tables(configs)
        identity = task_identity(tables)
        for alg in algs:
            rec = plan_task(i, tables, alg, task_problem(problem, i), models, options)
            if rec.plan is None:
                continue
            out.append(rec)
            variant = None if dp_min_pooling is None else hot_variant(tables, rec.plan, problem, dp_min_pooling)
            if variant is not None:
                out.append(PlanRecord(task=i, alg=f"{alg}+dp", plan=variant, num_tables=len(tables), **identity))
        for k in range(random_plans):
            try:
                plan = random_split_plan(tables, problem.with_seed(task_seed(problem.seed, i) + k), max_splits,
                                         spread_share)
            except OutOfMemoryError:
                continue
            out.append(PlanRecord(task=i, alg=random_label(k), plan=plan, num_tables=len(tables), **identity))
    return out


@dataclass
class RuntimeSample:
    """One plan of one training task as TorchRec trained it: its tables, the plan, the step ms of each
    round and every rank's phase ms (`training.TorchRecStep.PHASES`, the first round's)."""

    task: int
    alg: str
    tables: list[ShardTable]
    plan: Plan
    step_ms: list[float]
    phases: list[dict] | None

    @property
    def cost(self) -> float:
        return float(np.mean(self.step_ms))


def read_samples(results_path, tasks: Sequence[Task] | None, configs: Sequence[TableConfig]) -> list[RuntimeSample]:
    """The samples of a collection's results.json (torchrec.training_eval's), each plan checked against its task
    (`tasks` None: on the tables each row names, e.g. the anchors' round_anchors.json). InputError naming the
    file and record for a malformed one."""
    path = Path(results_path)
    try:
        rows = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(path, "no such file (run collect_torchrec_cost_data.py first)") from None
    except json.JSONDecodeError as e:
        raise InputError(path, f"not JSON: {e}") from None
    if not isinstance(rows, list):
        raise InputError(path, "expected a list of plan results")
    out = []
    for k, row in enumerate(rows):
        try:
            task, tables = _task_tables(row, tasks, configs)
            for key, mine in (("table_ids", [t.table_id for t in tables]), ("dims", [t.dim for t in tables])):
                if key in row and list(row[key]) != mine:  # results written before they carried them: unchecked
                    raise ValueError(f"its {key} {row[key]} are not task {task}'s {mine} (plans of another task "
                                     "file?)")
            plan = Plan.from_json(row["plan"])
            # splits and placement (memory: checked when planned)
            validate_plan(tables, plan, Problem(ndevices=plan.ndevices, max_mem=1e9))
            steps = _step_times(row)
            phases = row["rounds"][0].get("phases") if row.get("rounds") else None
        except (KeyError, TypeError, ValueError, IndexError, InvalidPlanError) as e:
            raise InputError(path, f"record {k}: {e}") from None
        out.append(RuntimeSample(task, str(row["alg"]), tables, plan, steps, phases))
    return out


def read_extra_samples(results_path, data_dir, task_path, first_task: int) -> list[RuntimeSample]:
    """The samples of another collection, on its own dataset and tasks, numbered from `first_task` on: the fit
    holds out whole tasks by number, so collections of one task file take one `first_task` and the others
    numbers of their own. InputError naming the file for a missing or malformed one."""
    from neuroshard.formats.dataset import read_table_configs
    from neuroshard.formats.task_file import read_tasks

    configs = read_table_configs(Path(data_dir) / "table_configs.json")
    tasks = read_tasks(task_path, num_tables=len(configs))
    return [replace(s, task=s.task + first_task) for s in read_samples(results_path, tasks, configs)]


def read_full_samples(path, tasks: Sequence[Task], configs: Sequence[TableConfig],
                      ndevices: int) -> tuple[list[RuntimeSample], int]:
    """The plans of TorchRec's full planner (eval_torchrec.py's `torchrec_full.json`) as samples, each read back
    as the project's plan (`sharder.plan_from_layout`); and how many trained plans were left out because their
    layout is outside the plan space. InputError naming the file and record for a malformed one."""
    from neuroshard.torchrec.sharder import plan_from_layout, table_names

    path = Path(path)
    rows = read_json(path)
    if not isinstance(rows, list):
        raise InputError(path, "expected a list of TorchRec plans")
    out, outside = [], 0
    for k, row in enumerate(rows):
        try:
            if row.get("status") != "ok" or not row.get("step_ms"):
                continue
            task, tables = _task_tables(row, tasks, configs)
            try:
                plan = plan_from_layout(row["layout"]["tables"], tables, table_names(tables), ndevices)
            except InvalidPlanError:
                outside += 1
                continue
            steps = _step_times(row)
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise InputError(path, f"record {k}: {e}") from None
        out.append(RuntimeSample(task, str(row["alg"]), tables, plan, steps, None))
    return out, outside


def _task_tables(row: dict, tasks: Sequence[Task] | None,
                 configs: Sequence[TableConfig]) -> tuple[int, list[ShardTable]]:
    """A result row's task and its tables (`tasks` None: those the row names); ValueError for a task the task
    file does not have."""
    task = int(row["task"])
    if tasks is None:
        return task, Task(tuple(int(x) for x in row["table_ids"]), tuple(int(x) for x in row["dims"])).tables(configs)
    if not 0 <= task < len(tasks):
        raise ValueError(f"task {task} is not in the task file ({len(tasks)} tasks)")
    return task, tasks[task].tables(configs)


def _step_times(row: dict) -> list[float]:
    """A result row's step ms of each round; ValueError unless all are finite and positive."""
    steps = [float(x) for x in row["step_ms"]]
    if not steps or not all(np.isfinite(steps)) or min(steps) <= 0:
        raise ValueError(f"step times must be positive, got {steps}")
    return steps


# --------------------------------------------------------------------------- fitting


@dataclass
class RuntimeFit(Record):
    """A fitted TorchRec runtime model and how well it predicts: MAPE (%) on the held-out tasks' plans (the
    coefficients fitted without them) and on all plans (fitted on all), per sample label kind."""

    model: TorchRecRuntimeModel  # fitted on every sample
    test_tasks: list[int]
    test_mape: float | None
    fit_mape: float
    by_kind: dict  # {"random" | alg: {"plans": n, "test_mape": %, "fit_mape": %}}
    terms: dict = json_field(key="mean_terms_ms")  # mean ms of each feature's share over the samples
    # per collection, its step times over what the model (at the first collection's speed) gives
    speeds: tuple[float, ...] = json_field((), omit=lambda v: not v)


def sample_kind(alg: str) -> str:
    return "random" if alg.startswith(RANDOM) else alg


def sample_features(samples: Sequence[RuntimeSample], models, batch: int) -> np.ndarray:
    """The runtime model's features of each sample's plan [N, F]."""
    from neuroshard.planner.costs.scorer import get_scorer, single_threaded_blas
    from neuroshard.planner.costs.runtime_model import features, plan_parts

    scorer = get_scorer(models)
    with single_threaded_blas():
        return np.concatenate([features(plan_parts(scorer, s.tables, s.plan, batch)) for s in samples])


def host_size(samples: Sequence[RuntimeSample]) -> int | None:
    """The ranks per host of the samples' table-row-wise tables (None without any); ValueError when they differ
    (one model prices one host size)."""
    sizes = sorted({len(sp.ranks) for s in samples for sp in s.plan.spread if sp.kind == TABLE_ROW_WISE})
    if len(sizes) > 1:
        raise ValueError(f"table-row-wise tables over hosts of {sizes} ranks: a model is fitted for one host size")
    return sizes[0] if sizes else None


def held_out_tasks(tasks: Sequence[int], group: np.ndarray, share: float, seed: int) -> list[int]:
    """The tasks whose plans the fit holds out: a seeded `share` of each collection's tasks, drawn collection by
    collection, so that every collection keeps plans to fit its speed on (a collection of one task holds none
    out). `tasks` and `group`: per sample, its task and its collection. A task several collections trained (the
    same number: the same task of the same task file, e.g. NeuroShard's on-policy plans of another collection's
    tasks) is held out of each or of none, so that no held-out plan has a fitted plan of its own task beside it;
    a later collection's share counts the shared tasks an earlier one held out, and draws the rest from its
    tasks that no earlier collection had."""
    rng = np.random.default_rng(seed)
    out: set[int] = set()
    seen: set[int] = set()
    for g in np.unique(group):
        mine = sorted({int(t) for t, c in zip(tasks, group) if c == g})
        k = int(round(share * len(mine)))
        held = sum(t in out for t in mine)
        free = [t for t in mine if t not in seen]
        need = min(k - held, len(free), len(mine) - 1 - held)
        if 0 < k < len(mine) and need > 0:
            out.update(int(t) for t in rng.choice(free, size=need, replace=False))
        seen.update(mine)
    return sorted(out)


def fit_runtime_model(samples: Sequence[RuntimeSample], models, ndevices: int, batch: int, test_share: float = 0.25,
                      seed: int = 0, source: dict | None = None,
                      collections: Sequence[int] | None = None) -> RuntimeFit:
    """Fit the runtime model: first without a seeded `test_share` of each collection's tasks (its error on their
    plans is `test_mape`), then on every sample (the model returned). `collections`: per sample, the index of the
    collection that trained it (0, 1, ...; default all 0); each collection after the first gets a speed of its
    own, fitted with the weights (`runtime_model.fit_speeds`: collections trained at other hours ran at other
    speeds), and the model prices plans at the first's speed. Every collection weighs the same in the fit
    (`runtime_model.balanced_weights`): a small one, such as NeuroShard's own plans searched with a first fit
    (the plans where that fit's errors flatter a plan most), is not drowned by the large random ones."""
    from neuroshard.planner.costs.runtime_model import (
        FEATURES,
        GROUP_OF,
        TorchRecRuntimeModel,
        balanced_weights,
        fit_speeds,
    )

    if not samples:
        raise ValueError("no samples to fit")
    wrong = sorted({s.plan.ndevices for s in samples} - {ndevices})
    if wrong:
        raise ValueError(f"samples with plans for {wrong} devices, fitting for {ndevices}")
    hosts = host_size(samples)
    x = sample_features(samples, models, batch)
    y = np.array([s.cost for s in samples])
    group = np.zeros(len(samples), dtype=np.int64) if collections is None else np.asarray(collections, dtype=np.int64)
    if group.shape != (len(samples),):
        raise ValueError(f"{len(group)} collection indices for {len(samples)} samples")
    test_tasks = held_out_tasks([s.task for s in samples], group, test_share, seed)
    test = np.array([s.task in test_tasks for s in samples])
    # a collection whose every task an earlier one held out has no plan to fit its speed on: none of its
    # plans is priced as held out
    test &= np.isin(group, group[~test])
    test_tasks = sorted({s.task for s, held in zip(samples, test) if held})
    pred_test = None
    if test.any():
        train = ~test  # every collection keeps training plans
        coef, speed = fit_speeds(x[train], y[train], group[train], weights=balanced_weights(group[train]))
        pred_test = (x[test] @ coef) * speed[group[test]]
    coef, speed = fit_speeds(x, y, group, weights=balanced_weights(group))
    pred = (x @ coef) * speed[group]
    kinds = [sample_kind(s.alg) for s in samples]
    by_kind = {}
    for kind in dict.fromkeys(kinds):
        sel = np.array([k == kind for k in kinds])
        row = {"plans": int(sel.sum()), "fit_mape": 100 * mape(pred[sel], y[sel])}
        if pred_test is not None and (sel & test).any():
            row["test_mape"] = 100 * mape(pred_test[sel[test]], y[sel & test])
        by_kind[kind] = row
    test_mape = None if pred_test is None else 100 * mape(pred_test, y[test])
    kinds = {sp.kind for s in samples for sp in s.plan.spread}
    model = TorchRecRuntimeModel(ndevices, batch, tuple(float(c) for c in coef), len(samples), 100 * mape(pred, y),
                                 test_mape, dict(source or {}), tuple(k for k in GROUP_OF if k in kinds), hosts)
    terms = {name: float(np.mean(x[:, j] * coef[j])) for j, name in enumerate(FEATURES)}
    return RuntimeFit(model, test_tasks, test_mape, 100 * mape(pred, y), by_kind, terms,
                      tuple(float(v) for v in speed) if len(speed) > 1 else ())


def round_check(model, samples: Sequence[RuntimeSample], anchors: Sequence[RuntimeSample], models):
    """The runtime model's error on `samples` with each round's speed taken from the `anchors` trained in the
    same rounds (`round_calibration.step_accuracy`): a `RoundCalibration`."""
    from neuroshard.eval.round_calibration import step_accuracy

    pred = model.predict(sample_features(samples, models, model.batch_size))
    anchor_pred = model.predict(sample_features(anchors, models, model.batch_size))
    return step_accuracy(pred, [s.step_ms for s in samples], anchor_pred, [a.step_ms for a in anchors])


def check_model(model, samples: Sequence[RuntimeSample], models) -> dict:
    """The runtime model's error on `samples` (plans it was not fitted on): MAPE (%) and mean predicted /
    measured step, overall and per algorithm."""
    if not samples:
        raise ValueError("no plans to check")  # the callers name the file first
    pred = model.predict(sample_features(samples, models, model.batch_size))
    y = np.array([s.cost for s in samples])

    def row(sel):
        return {"plans": int(sel.sum()), "mape": 100 * mape(pred[sel], y[sel]), "ratio": float(np.mean(pred[sel] / y[sel]))}

    algs = [s.alg for s in samples]
    return {**row(np.ones(len(y), dtype=bool)),
            "by_alg": {a: row(np.array([x == a for x in algs])) for a in dict.fromkeys(algs)}}
