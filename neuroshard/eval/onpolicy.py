"""Cost data where plans live ("on-policy"): the shards and all-to-alls of the plans the sharders make.

The random collections (`measure.compute_collect`, `measure.comm_collect`)
sample shards and dim spreads uniformly; the plans a search picks are
another population (balanced ranks, small start delays, the shards the
models like), and a search that compares many candidates picks those the
models under-predict. This module plans TRAINING tasks (never the
evaluation tasks: `check_disjoint`) with the given algorithms and models,
measures every plan on hardware with the evaluation's own measurement
(`eval.hardware.run_evaluation`: resumable, repeats in rounds), and turns each
measured plan into cost data in the formats of the random collections:

* every rank's shard, each repeat: a compute sample `ids cost_ms` over the
  augmented table list of the random compute data, so the two train one
  model together. A plan with spread tables (row-wise, table-row-wise,
  data-parallel) runs each rank's share of them in the same kernel: those
  shares, as the simulator prices them (`planner.simulator.spread_configs`),
  are listed after the augmented tables in the data's `table_configs.json`
  (`plan_samples`);
* every repeat's exchange: a comm sample `dims sleeps fw bw`, the sleeps
  being the start delays the forward exchange ran with (the measured skew),
  the spread tables' collectives (timed apart, their own model's) taken out;
* with 2 or more repeats, how one measurement's noise of a rank's total splits
  into the rank's own and the part shared by the plan's ranks
  (`eval.power.rank_noise`, "rank_noise" in the comm data's config.json).

Once models are trained on this data, `plan_error` measures their error on
these plans beyond the spread they predict (calibrate_band.py records it
in the forward model's checkpoint; `planner.costs.uncertainty.widen`).

NeuroShard+ may be planned with several values of its robust objective's
`plus_lambda` (records labelled `neuroshard_plus[lambda=x]`); the smallest
value is chosen for the evaluation unless another's plans were significantly
cheaper on hardware (`choose_lambda`, `lambda.json`): a handful of training
tasks seldom tells the values apart, and the cheapest mean alone follows the
noise. Costs in ms.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from neuroshard.eval.accuracy import measured_rank_noise
from neuroshard.eval.summary import summarize
from neuroshard.formats.cost_data import CommSample
from neuroshard.formats.side_files import LAMBDA_JSON, LambdaChoice, write_side_file
from neuroshard.problem import Problem
from neuroshard.types.costs import PlanError, RankNoise
from neuroshard.types.errors import InputError
from neuroshard.types.plan import apply_column_steps
from neuroshard.types.records import PlanRecord
from neuroshard.types.tables import TableConfig, Task, dim_set

PLUS = "neuroshard_plus"


def check_disjoint(tasks: Sequence[Task], eval_tasks: Sequence[Task], task_path, eval_task_path) -> None:
    """InputError when a training task is also an evaluation task (the models would learn the test)."""
    held_out = set(eval_tasks)
    seen = [i for i, t in enumerate(tasks) if t in held_out]
    if seen:
        raise InputError(task_path, f"{len(seen)} task(s) (lines {[i + 1 for i in seen[:5]]}) are evaluation "
                                    f"tasks of {eval_task_path}: collect on-policy data on training tasks only")


def lambda_label(lam: float) -> str:
    """The record label of NeuroShard+'s plans made with `plus_lambda` = lam."""
    return f"{PLUS}[lambda={lam:g}]"


def augmented_index(table_id: int, dim: int, num_tables: int, dims: Sequence[int]) -> int | None:
    """The index of (dataset table, dim) in the augmented table list (dim-major), or None for a dim outside
    the dim set (such a shard is not in the random data's vocabulary)."""
    return dims.index(dim) * num_tables + table_id if dim in dims else None


class PlanSamples(NamedTuple):
    """The cost data of measured plans (`plan_samples`): compute samples over the augmented table list followed
    by `shares` (the spread tables' per-rank shares the plans ran), and comm samples of the all-to-alls."""

    compute: list[tuple[tuple[int, ...], float]]
    comm: list[CommSample]
    shares: list[TableConfig]


def plan_samples(records: Sequence[PlanRecord], tasks: Sequence[Task], configs: Sequence[TableConfig],
                 max_dim: int, known: Sequence[TableConfig] = ()) -> PlanSamples:
    """The compute and comm samples of measured plan records (one per rank with tables and repeat, one
    per repeat); a shard with a dim outside the dim set of `max_dim` is left out. A rank's share of a spread
    table is an entry of `shares`, indexed after the augmented list (one entry per distinct share; `known`: the
    shares a data dir already lists, kept first); the exchange's samples are the all-to-all's alone (the
    collectives each repeat timed apart taken out)."""
    from neuroshard.planner.simulator import spread_configs

    dims = dim_set(max_dim)
    aug = len(dims) * len(configs)
    compute: list[tuple[tuple[int, ...], float]] = []
    comm: list[CommSample] = []
    shares: dict[TableConfig, int] = {c: i for i, c in enumerate(known)}
    for rec in records:
        m = rec.measured
        if m is None or not m.repeats:
            continue
        tables = tasks[rec.task].tables(configs)
        split = apply_column_steps(tables, rec.plan.column_steps)
        extra, of_rank = spread_configs(tables, rec.plan.spread, rec.plan.ndevices)
        ids = []
        for shard, mine in zip(rec.plan.shards, of_rank):
            index = [augmented_index(split[i].table_id, split[i].dim, len(configs), dims) for i in shard]
            index += [aug + shares.setdefault(extra[j], len(shares)) for j in mine]
            ids.append(tuple(index) if index and None not in index else None)
        for rep in m.repeats:
            compute += [(s, round(c, 4)) for s, c in zip(ids, rep.compute) if s is not None]
            sleeps = rep.skew if rep.skew is not None else m.skew
            coll = rep.collectives if rep.collectives is not None else m.collectives
            fw, bw = list(rep.fw_comm), list(rep.bw_comm)
            if coll is not None:
                fw = [max(0.0, f - k[0]) for f, k in zip(fw, coll)]
                bw = [max(0.0, b - k[1]) for b, k in zip(bw, coll)]
            comm.append(CommSample(list(m.dims), [round(float(x), 3) for x in sleeps],
                                   [round(v, 4) for v in fw], [round(v, 4) for v in bw]))
    return PlanSamples(compute, comm, list(shares))


def model_error(records: Sequence[PlanRecord], tasks: Sequence[Task], configs: Sequence[TableConfig],
                models_by_label: dict, problem: Problem,
                anchors: Sequence[PlanRecord] | None = None) -> tuple[dict, dict]:
    """({label: `Accuracy`}, {label: `round_calibration.RoundCalibration`}) of each set of cost models
    (`CostModels`) on the measured plans of `records`: every plan re-simulated under the set (once) and compared
    with its measurements (`eval.accuracy.simulator_accuracy`), so the random data's models and the models trained
    with on-policy data are judged on the same plans. With `anchors` (measured in the same rounds, naming their
    tables: eval.py's round_anchors.json) also after the per-round calibration: the anchors re-simulated under the
    set give each round's factors, so that models other than those the plans were estimated with are judged as
    the report judges those (`eval.round_calibration`); the second dict is empty without anchors."""
    from neuroshard.eval.round_calibration import calibrated_accuracy
    from neuroshard.eval.accuracy import simulator_accuracy
    from neuroshard.planner.simulator import simulate

    measured = [r for r in records if r.measured is not None and r.plan is not None]
    marks = [a for a in anchors or () if a.plan is not None and a.repeat_costs]
    repeats = max((len(a.repeat_costs) for a in marks), default=0)
    accuracy, rounds = {}, {}
    for label, models in models_by_label.items():
        again = [replace(r, estimate=simulate(tasks[r.task].tables(configs), r.plan, models, problem))
                 for r in measured]
        accuracy[label] = simulator_accuracy(again)
        if anchors is not None:
            moved = [replace(a, estimate=simulate(Task(a.table_ids, a.dims).tables(configs), a.plan, models,
                                                  problem)) for a in marks]
            rounds[label] = calibrated_accuracy([r for r in again if r.repeat_costs], moved, repeats)
    return accuracy, rounds


def rank_error(records: Sequence[PlanRecord], tasks: Sequence[Task], configs: Sequence[TableConfig], models,
               problem: Problem) -> tuple[float, int, RankNoise | None]:
    """(sd, ranks, noise): the relative sd of the compute model's error on a plan's shard that the plan's other
    ranks do not share, from the measured plans of `records`, net of the ranks' own measurement noise, and how
    one compute measurement's noise splits into the rank's own and the plan's (`types.RankNoise`).

    Per plan, log(measured / estimated compute) of each rank with tables, less the plan's mean of them (what
    all ranks share is the machine's speed or the plan-level term); the squares pooled over the plans with 2
    or more such ranks, over (ranks - plans) degrees of freedom. The measured compute is the mean of the
    plan's R repeats, so the pool also holds each rank's own measurement noise, sd `noise` per measurement,
    with expected variance noise**2 / R per degree of freedom. `noise` comes from the plans measured twice:
    `eval.power.rank_noise` of the first two compute measurements of the ranks with tables (the split it makes
    for the totals); its own part is taken out of the pool (clipped at 0): the predicted spread draws the
    noise of one measurement on its own (`uncertainty.NoiseModel.compute`), and drawing it again inside the
    model's error made the spread too wide. (0.0, 0, None) without such plans; `noise` None without plans
    measured twice."""
    from neuroshard.eval.power import rank_noise
    from neuroshard.planner.simulator import simulate

    squares, ranks, plans, noise_weight, pairs = 0.0, 0, 0, 0.0, []
    for r in records:
        if r.measured is None or r.plan is None:
            continue
        est = simulate(tasks[r.task].tables(configs), r.plan, models, problem).compute
        keep = [k for k, (m, e) in enumerate(zip(r.measured.compute, est)) if m > 0 and e > 0]
        if len(keep) < 2:
            continue
        logs = [math.log(r.measured.compute[k] / est[k]) for k in keep]
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        ranks, plans = ranks + len(logs), plans + 1
        reps = r.measured.repeats or []
        noise_weight += (len(logs) - 1) / max(1, len(reps))
        if len(reps) >= 2:
            pairs.append([[reps[j].compute[k] for k in keep] for j in (0, 1)])
    if not plans:
        return 0.0, 0, None
    split = rank_noise(pairs)  # one compute measurement's noise, the rank's own and the plan's: first two repeats
    noise_var = split.independent_sd ** 2 if split is not None else 0.0
    model_var = max(0.0, (squares - noise_var * noise_weight) / (ranks - plans))
    return math.sqrt(model_var), ranks, split


def plan_error(records: Sequence[PlanRecord], tasks: Sequence[Task], configs: Sequence[TableConfig], models,
               problem: Problem, heldout=None) -> PlanError | None:
    """The models' plan-level and per-rank error on measured plans of training tasks (`types.PlanError`), both
    taken under `heldout` (default `models`): models that were not trained on these plans' shards estimate
    them out of sample, as the evaluation's plans will see them (models trained on a plan's shards fit it far
    better than they fit other plans': in sample, the band needs no plan-level term and then holds too few of
    the evaluation's measurements). First the per-rank compute error (`rank_error`); the predicted spread then
    draws it for every rank; then every plan's cost samples with it (`simulator.plan_cost_samples`: members,
    the noise of one measurement and the per-rank error; no plan-level error) against its measured costs (each
    repeat). The noise of one measurement drawn is the collection's noise floor's; the plan job's own compute
    noise, split into the rank's own and the plan's shared part (`rank_error`), is recorded beside it
    (`PlanError.compute_sd`) but not drawn: from two repeats minutes apart, it is narrower than what an
    evaluation's rounds, spread over most of an hour, see (drawn instead, the band holds too few of an
    evaluation's measurements). The machine's
    speed at the time (the median of measured / expected cost) is divided out: it is the drift of that hour,
    which the evaluation measures apart (eval/drift.py), not the models' error on a plan. Then the smallest
    extra sd that puts 80% of the measurements in the predicted band (`uncertainty.calibrate_plan_sd`). None
    without measured plans."""
    from neuroshard.planner.costs.uncertainty import calibrate_plan_sd
    from neuroshard.planner.simulator import plan_cost_samples

    models = models if heldout is None else heldout
    rank, ranks, noise = rank_error(records, tasks, configs, models, problem)
    own, common = (noise.independent_sd, noise.common_sd) if noise is not None else (0.0, None)
    models = replace(models, noise=replace(models.noise_model, plan=0.0, rank=rank))
    samples, measured = [], []
    for r in records:
        if r.measured is None or r.plan is None:
            continue
        samples.append(plan_cost_samples(tasks[r.task].tables(configs), r.plan, models, problem))
        measured.append(list(r.repeat_costs) if r.repeat_costs else [r.measured.cost])
    if not samples:
        return None
    speed = float(np.median([c / s.mean() for s, got in zip(samples, measured) for c in got]))
    sd, before, after = calibrate_plan_sd(samples, [[c / speed for c in got] for got in measured])
    return PlanError(sum(map(len, measured)), sd, before, after, speed, rank, ranks, own, common)


def choose_lambda(records: Sequence[PlanRecord], num_tasks: int) -> LambdaChoice | None:
    """NeuroShard+'s `plus_lambda` for the evaluation, from its labelled records measured on training tasks:
    the smallest value (0: the expected measured cost, no margin) unless another value's plans cost less on
    hardware beyond the noise, i.e. the 95% interval of its paired difference with the smallest's (by task
    and round, `intervals.paired_difference`, over the tasks valid for all) lies below zero; of several such,
    the cheapest mean (ties: the smaller lambda). A handful of tasks seldom tells the values apart, and the
    cheapest mean alone then follows the noise (see the module doc). None without labelled records."""
    prefix = f"{PLUS}[lambda="  # the labels of `lambda_label`
    lams = {r.alg: float(r.alg[len(prefix):-1]) for r in records if r.alg.startswith(prefix)}
    if not lams:
        return None
    labels = sorted(lams, key=lams.get)
    summary = summarize(records, labels, num_tasks, cost_key="cost", reference=labels[0])
    rows = {r.alg: r for r in summary.algorithms}
    means = {lams[a]: rows[a].mean_common for a in labels}
    if not all(m is not None and math.isfinite(m) for m in means.values()):
        return None
    better = [lams[a] for a in labels[1:] if summary.verdicts.get(a) == "loses to"]
    chosen = min(better, key=lambda lam: (means[lam], lam)) if better else lams[labels[0]]
    diffs = {f"{lams[a]:g}": rows[a].vs_reference.diff_ms.to_json() for a in labels[1:]
             if rows[a].vs_reference is not None}
    return LambdaChoice(lambdas=sorted(means), mean_ms={f"{lam:g}": means[lam] for lam in sorted(means)},
                        chosen=chosen, tasks=summary.common_tasks, default=lams[labels[0]], vs_default_ms=diffs,
                        rule="the smallest lambda unless another's paired difference with it (95% interval, tasks "
                             "x rounds) lies below zero")


def collect(inputs, algs: Sequence[str], lambdas: Sequence[float], options: dict, cfg, data_dir, task_path,
            out_dir, max_dim: int, config: dict | None = None, show=None, progress: bool = True) -> dict:
    """Plan the training tasks of `inputs` for the measurement's problem (`cfg.problem`) with `algs`
    (NeuroShard+ once per value of `lambdas`, if any),
    measure every plan (`run_evaluation` into `<out_dir>/hw`, resumable) and write the on-policy cost data:
    `<out_dir>/compute/` (beside the augmented table list of `max_dim`) and `<out_dir>/comm/`, and, with
    several lambdas, `<out_dir>/lambda.json`. Returns what was written (counts, paths, the lambda choice)."""
    from neuroshard.eval.hardware import resume_identity, run_evaluation
    from neuroshard.eval.planning import compute_plans
    from neuroshard.formats.cost_data import write_comm_data, write_compute_data
    from neuroshard.formats.io import check_run_config, write_json_atomic
    from neuroshard.types.errors import ConfigError

    bad = sorted({d for t in inputs.tasks for d in t.dims if d not in dim_set(max_dim)})
    if bad:
        raise ConfigError("--max_dim", f"the tasks have dims {bad} outside the dim set of --max_dim {max_dim}")
    out = Path(out_dir)
    # a finished collection keeps its settings here: a rerun with others would replace its samples
    # (and keep a lambda.json it no longer made); an interrupted one resumes only with the same
    check_run_config(out, resume_identity(config or {}, cfg, None))
    plain = [a for a in algs if not (a == PLUS and lambdas)]
    records = compute_plans(inputs.configs, inputs.tasks, plain, cfg.problem, inputs.models, options=options,
                            progress=progress)
    labels = list(plain)
    if PLUS in algs and lambdas:
        for lam in lambdas:
            recs = compute_plans(inputs.configs, inputs.tasks, [PLUS], cfg.problem, inputs.models,
                                 options={**options, "plus_lambda": lam}, progress=progress)
            records += [replace(r, alg=lambda_label(lam)) for r in recs]
            labels.append(lambda_label(lam))
    records.sort(key=lambda r: (r.task, labels.index(r.alg)))
    results, _ = run_evaluation(records, data_dir, task_path, cfg, out / "hw", labels, len(inputs.tasks),
                                config=config, show=show)
    from neuroshard.measure.compute_collect import augment_table_configs

    compute, comm, shares = plan_samples(results, inputs.tasks, inputs.configs, max_dim)
    write_compute_data(out / "compute", augment_table_configs(inputs.configs, max_dim) + shares, compute)
    write_comm_data(out / "comm", comm)
    provenance = {"source": "plans of training tasks", "task_path": str(task_path), "algorithms": labels,
                  "plans": sum(r.measured is not None for r in results), "repeats": cfg.repeats, "max_dim": max_dim,
                  **({"batch_size": config["batch_size"]} if (config or {}).get("batch_size") else {})}
    # what the kernels were timed on, as the random collection records it: the data may train beside compute
    # data of another dataset (`formats.cost_data.read_compute_sources` checks the two match)
    timed = {"device": cfg.device, "clock": cfg.clock if cfg.device == "cpu" else "cuda_events"}
    write_json_atomic(out / "compute" / "config.json", {**provenance, **timed, "samples": len(compute),
                                                         "spread_shares": len(shares)})
    # how the ranks' noise splits into their own and the plan's (needs repeats): the predicted spread's
    # `shared` (planner.costs.uncertainty), recorded by the comm models trained on this data
    noise = measured_rank_noise(results) if cfg.repeats >= 2 else None
    write_json_atomic(out / "comm" / "config.json", {**provenance, "samples": len(comm),
                                                     **({"rank_noise": noise.to_json()} if noise else {})})
    written = {"compute_samples": len(compute), "comm_samples": len(comm), "plans": provenance["plans"],
               "compute_dir": str(out / "compute"), "comm_dir": str(out / "comm")}
    chosen = choose_lambda(results, len(inputs.tasks))
    if chosen is not None:
        write_side_file(out / LAMBDA_JSON, chosen)
        written["lambda"] = chosen
    else:
        (out / LAMBDA_JSON).unlink(missing_ok=True)
    return written
