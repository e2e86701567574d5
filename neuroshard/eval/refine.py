"""Hardware in the loop (`--refine K`): the models propose, the hardware chooses.

For NeuroShard and NeuroShard+, when the user allows it: the K best
distinct candidate plans of each task by the models (the sharder's own
`candidates`; always with NeuroShard's own plan and the best plain
baseline's plan by the simulator, whatever their rank) are measured on
hardware through the evaluation's own measurement (`eval.hardware
.run_evaluation`: one job for every task's candidates, `refine_repeats`
interleaved rounds, resumable, its files in `<work_dir>`), and the
candidate with the lowest mean measured cost becomes the algorithm's plan
when it measured below the models' own choice by more than the noise
explains (`choose`; `refine_confidence`): the differences between the
best candidates are often smaller than the round-to-round noise, and the
lowest of a few noisy means is a winner's curse of its own.
The seconds it took (the candidates' planning and each task's share of the
measuring job) are added to the record's `search_ms`: they are the
algorithm's planning cost. The evaluation then measures the chosen plan
afresh: a selection measurement, which picked the plan because it happened
to be low, is never its result. With `refine_data_dir`, the selection
measurements are appended to the on-policy cost data there (`eval.onpolicy`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import NormalDist
from typing import Callable, ClassVar, Sequence

import numpy as np

from neuroshard.checks import check_float, check_int
from neuroshard.problem import Problem
from neuroshard.settings import Settings, common, setting
from neuroshard.types.errors import ConfigError, NeuroShardError
from neuroshard.types.plan import Plan
from neuroshard.types.records import PlanRecord, RefineCandidate, RefineRecord

REFINABLE = ("neuroshard", "neuroshard_plus")


@dataclass(frozen=True)
class RefineConfig(Settings):
    """Hardware in the loop (module doc); its fields are the flags of eval_simulator.py and eval.py."""

    TITLE: ClassVar[str] = "hardware in the loop (--refine; neuroshard and neuroshard_plus)"

    refine: int = common("refine", help="measure each task's K best distinct candidate plans by the models (with "
                                        "NeuroShard's own plan and the best plain baseline's) on hardware and keep "
                                        "the measured best; the time it takes counts as planning time; 0: off")
    refine_repeats: int = setting(2, "measurements of every candidate, in interleaved rounds")
    refine_data_dir: str | None = setting(None, "append the selection measurements to the on-policy cost data "
                                                "here (collect_plan_cost_data.py's --out_dir: compute/ and comm/)",
                                          show_default=False)
    refine_algs: str = setting(",".join(REFINABLE), "the algorithms refined, comma-separated (e.g. neuroshard_plus "
                                                    "alone: the paper's NeuroShard stays the models' choice, to "
                                                    "compare against)")
    refine_confidence: float = setting(0.95, "keep the models' own choice unless a candidate measured below it "
                                             "with this confidence (one-sided, over all candidates; the rounds' "
                                             "noise pooled over the tasks); 0: the lowest mean always wins")

    def validate(self) -> None:
        check_int("--refine", self.refine, 0)
        check_int("--refine_repeats", self.refine_repeats, 1)
        check_float("--refine_confidence", self.refine_confidence, 0.0, 1.0, hi_open=True)
        self.algs()

    def algs(self) -> tuple[str, ...]:
        """`refine_algs` as names, each one of `REFINABLE` (a ConfigError otherwise)."""
        names = tuple(a.strip() for a in str(self.refine_algs).split(","))
        for a in names:
            if a not in REFINABLE:
                raise ConfigError("--refine_algs", f"{a!r} cannot be refined (one of: {', '.join(REFINABLE)})")
        return names

    def check_algs(self, algs: Sequence[str]) -> None:
        """With --refine on, one of the run's `algs` at least must be refined: a flag that refines nothing is
        an error, not a silent no-op."""
        if self.refine and not set(self.algs()) & set(algs):
            raise ConfigError("--refine", f"refines {', '.join(self.algs())}, and none of them is in --alg "
                                          f"{','.join(algs)}")


def candidates(tables, alg: str, problem: Problem, models, options: dict, k: int) -> list[tuple[str, Plan]]:
    """(source, plan) of a task's candidates, distinct: the algorithm's own choice, NeuroShard's plan, the
    best plain baseline's plan by the simulator, then the algorithm's next best, up to k in all (more
    only when those three are distinct)."""
    from neuroshard.planner.registry import (
        ShardingContext,
        algorithm_names,
        get_sharder,
        is_plain,
        options_for,
    )
    from neuroshard.planner.shard import shard
    from neuroshard.types.errors import OutOfMemoryError

    own = get_sharder(alg).candidates(tables, problem, ShardingContext(models, options_for(alg, options)), k)
    ns = own[0] if alg == "neuroshard" else get_sharder("neuroshard").candidates(
        tables, problem, ShardingContext(models, options_for("neuroshard", options)), 1)[0]
    base = []
    for name in algorithm_names():
        if name not in REFINABLE and is_plain(name):
            try:
                got = shard(tables, problem, models=models, alg=name, **options_for(name, options))
            except OutOfMemoryError:
                continue
            base.append((got.cost_ms, name, got.plan))
    required = [(alg, own[0]), ("neuroshard", ns)]
    if base:
        _, name, plan = min(base, key=lambda b: b[0])
        required.append((name, plan))
    required = _distinct(required)
    return _distinct(required + [(f"{alg}#{i}", p) for i, p in enumerate(own[1:], 1)])[:max(k, len(required))]


def paired_noise(costs: Sequence[Sequence[Sequence[float]]]) -> float:
    """The sd of one round's relative difference between a candidate and the models' own choice (candidate
    0), pooled over tasks and candidates: `costs[task][candidate][round]` in ms, measured in interleaved rounds.
    0 with a single round (no round-to-round noise to measure)."""
    sq, dof = 0.0, 0
    for task in costs:
        own = np.asarray(task[0], dtype=float)
        for cand in task[1:]:
            rel = (np.asarray(cand, dtype=float) - own) / own.mean()
            sq += float(((rel - rel.mean()) ** 2).sum())
            dof += len(rel) - 1
    return float(np.sqrt(sq / dof)) if dof else 0.0


def choose(costs: Sequence[Sequence[float]], noise: float, confidence: float) -> int:
    """The candidate kept among one task's (`costs[candidate][round]`, candidate 0 the models' own choice):
    the lowest mean, when it is below the own choice's by more than z x noise / sqrt(rounds) relative to it,
    z the one-sided `confidence` quantile corrected for the candidates compared (Bonferroni); 0 otherwise."""
    means = [float(np.mean(c)) for c in costs]
    best = int(np.argmin(means))
    if best == 0 or confidence <= 0.0 or noise <= 0.0:
        return best
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / (len(costs) - 1))
    gap = (means[0] - means[best]) / means[0]
    return best if gap > z * noise / np.sqrt(len(costs[best])) else 0


def _distinct(plans: Sequence[tuple[str, Plan]]) -> list[tuple[str, Plan]]:
    out: list[tuple[str, Plan]] = []
    for source, plan in plans:
        if all(plan != p for _, p in out):
            out.append((source, plan))
    return out


def refine_records(records: Sequence[PlanRecord], tasks, configs, models, refine: RefineConfig, hw, data_dir,
                   task_path, work_dir, problem: Problem, options: dict,
                   show: Callable[[str], None] | None = None, run: Callable | None = None) -> list[PlanRecord]:
    """The records with each refinable algorithm's plan replaced by its measured-best candidate (module doc).

    `problem`: the evaluation's (each task planned with its own seed, as `eval.planning` plans it); `hw`:
    how candidates are measured (`measure.plan_job.HardwareConfig`; its `repeats` is
    `refine.refine_repeats`); `run`: the measuring run (default `eval.hardware.run_evaluation`)."""
    from neuroshard.eval.hardware import measured_before, run_evaluation
    from neuroshard.eval.planning import task_seed
    from neuroshard.formats.plan_file import plan_view
    from neuroshard.planner.simulator import simulate

    refine.validate()
    run = run or run_evaluation
    todo = [k for k, r in enumerate(records) if r.alg in refine.algs() and r.plan is not None and refine.refine]
    if not todo:
        return list(records)
    t0 = time.perf_counter()
    cands: dict[int, list[tuple[str, Plan]]] = {}
    plan_s: dict[int, float] = {}
    for k in todo:
        rec = records[k]
        t1 = time.perf_counter()
        tables = tasks[rec.task].tables(configs)
        cands[k] = candidates(tables, rec.alg, problem.with_seed(task_seed(problem.seed, rec.task)), models, options,
                              refine.refine)
        plan_s[k] = time.perf_counter() - t1
    items = [PlanRecord(records[k].task, f"{records[k].alg}@{i}", plan=plan, num_tables=records[k].num_tables,
                        estimate=simulate(tasks[records[k].task].tables(configs), plan, models, problem),
                        table_ids=records[k].table_ids, dims=records[k].dims)
             for k in todo for i, (_, plan) in enumerate(cands[k])]
    labels = list(dict.fromkeys(r.alg for r in items))
    t2 = time.perf_counter()
    cfg = replace(hw, repeats=refine.refine_repeats)
    config = {"refine_hardware": cfg.to_json()}
    results = measured_before(Path(work_dir), items, config, cfg.repeats)
    if results is None:
        results, _ = run(items, data_dir, task_path, cfg, Path(work_dir), labels, len(tasks), config=config,
                         show=None)
    job_s = time.perf_counter() - t2
    measured = {(r.task, r.alg): r for r in results}
    estimated = {(r.task, r.alg): r.estimated_cost for r in items}
    if refine.refine_data_dir:
        append_onpolicy(results, tasks, configs, refine.refine_data_dir)
    out = list(records)
    got_by = {}
    for k in todo:
        rec = records[k]
        got_by[k] = [measured[(rec.task, f"{rec.alg}@{i}")] for i in range(len(cands[k]))]
        if any(g.cost is None or not g.repeat_costs for g in got_by[k]):
            raise NeuroShardError(f"task {rec.task} [{rec.alg}]: a candidate was not measured")
    noise = paired_noise([[g.repeat_costs for g in got_by[k]] for k in todo])
    if show is not None:
        show(f"refine: one round's difference from the models' choice varies by {100 * noise:.1f}% (sd)")
    for k in todo:
        rec, got = records[k], got_by[k]
        chosen = choose([g.repeat_costs for g in got], noise, refine.refine_confidence)
        share = job_s * len(got) / len(items)
        info = RefineRecord(candidates=[RefineCandidate(source, estimated[(rec.task, g.alg)], g.repeat_costs)
                                        for (source, _), g in zip(cands[k], got)],
                            chosen=chosen, seconds=plan_s[k] + share)
        plan = cands[k][chosen][1]
        tables = tasks[rec.task].tables(configs)
        out[k] = replace(rec, plan=plan, estimate=simulate(tables, plan, models, problem),
                         view=plan_view(tables, plan), search_ms=(rec.search_ms or 0.0) + 1e3 * info.seconds,
                         refine=info)
        if show is not None:
            show(f"Task {rec.task + 1}/{len(tasks)} [{rec.alg}] refined on hardware: {len(got)} candidates, chose "
                 f"{cands[k][chosen][0]} ({got[chosen].cost:.3f} ms measured, estimated "
                 f"{info.candidates[chosen].estimated_cost:.3f} ms; the models' choice measured {got[0].cost:.3f} ms)")
    if show is not None:
        show(f"refine: {len(items)} candidates of {len(todo)} plans measured in {time.perf_counter() - t0:.1f} s")
    return out


def append_onpolicy(results: Sequence[PlanRecord], tasks, configs, data_dir) -> None:
    """Append the measured plans' samples (`eval.onpolicy.plan_samples`) to an on-policy cost data dir made by
    collect_plan_cost_data.py (its compute/ table list fixes the dim set)."""
    from neuroshard.eval.onpolicy import plan_samples
    from neuroshard.formats.cost_data import (
        DATA_TXT,
        format_comm_sample,
        format_compute_sample,
        read_compute_data,
    )
    from neuroshard.formats.dataset import TABLE_CONFIGS, write_table_configs
    from neuroshard.formats.io import append_line, open_append
    from neuroshard.types.errors import InputError
    from neuroshard.types.tables import dim_set

    root = Path(data_dir)
    listed, _ = read_compute_data(root / "compute")
    max_dim = max(c.dim for c in listed)
    if listed[:len(configs)] != [c.with_dim(max_dim) for c in configs]:
        raise InputError(root / "compute" / "table_configs.json", "augmented table list is not this dataset's")
    aug = len(dim_set(max_dim)) * len(configs)  # the list's spread-table shares follow the augmented tables
    compute, comm, shares = plan_samples(results, tasks, configs, max_dim, known=listed[aug:])
    if len(shares) > len(listed) - aug:
        write_table_configs(root / "compute" / TABLE_CONFIGS, listed[:aug] + shares)
    with open_append(root / "compute" / DATA_TXT, exclusive=True) as fh:
        for ids, ms in compute:
            append_line(fh, format_compute_sample(ids, ms))
    with open_append(root / "comm" / DATA_TXT, exclusive=True) as fh:
        for s in comm:
            append_line(fh, format_comm_sample(s))


def refine_summary(results: Sequence[PlanRecord]) -> dict[str, dict]:
    """Per refined algorithm, over the evaluated records that carry a `RefineRecord`: tasks, candidates and
    seconds per task, how often each source's candidate was chosen, the selection's gain (the chosen candidate
    against the algorithm's own choice, both by the selection's measurements: 1 - chosen / own, mean over tasks)
    and the chosen plans' fresh cost (the evaluation's mean) over their selection cost (median). Above 1 it
    holds the machine's drift between the two jobs and the selection's own winner's curse (the noise that
    made a candidate look best); `drift` is the first alone: the same ratio for the candidates that are
    another evaluated algorithm's plan (NeuroShard's, the best baseline's), measured in both whatever was
    chosen (median; None when there are none)."""
    by_task = {(r.task, r.alg): r for r in results}
    out: dict[str, dict] = {}
    for alg in dict.fromkeys(r.alg for r in results if r.refine is not None):
        recs = [r for r in results if r.alg == alg and r.refine is not None]
        picked = [r.refine.candidates[r.refine.chosen] for r in recs]
        chosen: dict[str, int] = {}
        for c in picked:
            chosen[c.source] = chosen.get(c.source, 0) + 1
        sel = [float(np.mean(c.measured_costs)) if c.measured_costs else None for c in picked]
        own = [float(np.mean(r.refine.candidates[0].measured_costs)) if r.refine.candidates[0].measured_costs
               else None for r in recs]
        gains = [1.0 - s / o for s, o in zip(sel, own) if s is not None and o]
        fresh = [r.cost / s for r, s in zip(recs, sel) if r.cost is not None and s]
        drift = []
        for r in recs:
            for c in r.refine.candidates:
                other = by_task.get((r.task, c.source))
                if other is not None and other.alg != alg and other.cost is not None and c.measured_costs:
                    drift.append(other.cost / float(np.mean(c.measured_costs)))
        out[alg] = {"tasks": len(recs), "candidates": float(np.mean([len(r.refine.candidates) for r in recs])),
                    "seconds": float(np.mean([r.refine.seconds for r in recs])), "chosen": chosen,
                    "selection_gain": float(np.mean(gains)) if gains else None,
                    "fresh_over_selection": float(np.median(fresh)) if fresh else None,
                    "drift": float(np.median(drift)) if drift else None}
    return out
