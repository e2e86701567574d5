"""Regret: how far the plan an algorithm picks is from the best plan the hardware has, estimated without
selecting on the noise that judges it (DESIGN §10; `benchmarks/bench_regret.py` measures the spaces,
`eval.regret_search`).

A task's measured space is `costs[plan][round]` (ms): every plan of the task measured once in each round, the
task's plans one after another in a shuffled order, so that the plans of a round share the machine's speed.
Per task and algorithm (its plan's index in the space):

* **naive regret**: its plan's mean cost / the lowest mean cost of the space - 1. The lowest of many noisy means
  lies below the true cost of any plan (the winner's curse): biased upwards, the more plans and the noisier the
  rounds, the more.
* **cross-fitted regret**: the rounds split into two halves (even and odd rounds); the best plan is chosen by
  its mean over one half and every plan judged against it on the other (the ratio of their means over the
  judging rounds - 1), and the other way round; the task's figure is the mean of the two. The judging rounds
  never saw the choice, so the chosen plan's cost there holds no selected noise; but the chosen plan may be
  worse than the true best, which biases the figure downwards (it may go below 0). In expectation the truth lies
  between the naive and the cross-fitted figure; where they differ little, the noise is not what drives them.
* **hit**: on the judging rounds, its plan's mean is at most `HIT_Z` x s / sqrt(judging rounds) above the chosen
  best's (s: `round_noise`, the sd of one round's relative difference between two plans of a task, pooled over
  every plan and task: two or three rounds alone give no usable sd); each half choosing once, a task counts 0,
  0.5 or 1. The hit rate is its mean over tasks.
* **best against runner-up**: the two lowest means over all rounds, their paired relative gap (mean over rounds
  of runner-up / best - 1) with a normal 95% interval of +- 1.96 s / sqrt(rounds); *resolved* when the interval
  excludes 0. *Stable*: both halves choose the same best plan.

Per cost model (its estimate of each measured plan, None where it cannot price one): the Spearman correlation
of estimates and mean measured costs over a task's plans; the share of the pairs of plans that it orders as the
hardware's means do, over all pairs and over those whose paired gap exceeds the noise (`ordering`); and the
regret of the plan the model itself rates best among all measured plans (its *own best*), beside the regret of
the plan each search that plans with it picked (`ModelSpec.searches`): the own best's regret is what the model's
error costs, the rest of the search's is what the search leaves (its *shortfall*: how much dearer the model
itself rates the search's plan than its own best).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from neuroshard.eval.intervals import mean_interval
from neuroshard.eval.refine import paired_noise
from neuroshard.types.codec import Record
from neuroshard.types.plan import Plan

HIT_Z = 1.645  # one-sided 95%: a plan within this many standard errors of the best is a hit
GAP_Z = 1.96  # two-sided 95%: the interval of the gap between the best and the runner-up


# --------------------------------------------------------------------------- one task's measured space


@dataclass
class TaskSpace(Record):
    """One task's measured plans on one runtime: `costs[plan][round]` (ms) of `plans`; `algs[alg]`: the index of
    each algorithm's plan (those that planned the task); `estimates[model][plan]`: each cost model's estimate
    (None: it cannot price that plan); `enumerated`: the plans are the task's whole space (`planner.space`),
    else the algorithms' plans and what the hardware-in-the-loop search found (`search`: its saturation curve,
    one entry per search step); `space_size`: the distinct plans of the space when enumerated."""

    runtime: str
    task_set: str
    task: int
    table_ids: list[int]
    dims: list[int]
    plans: list[Plan]
    costs: list[list[float]]
    algs: dict[str, int]
    enumerated: bool
    space_size: int | None = None
    estimates: dict[str, list[float | None]] = field(default_factory=dict)
    search: list[dict] = field(default_factory=list)

    @property
    def matrix(self) -> np.ndarray:
        return np.asarray(self.costs, dtype=np.float64)


def halves(rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """The even and the odd rounds (0-based) of `rounds` >= 2."""
    if rounds < 2:
        raise ValueError(f"cross-fitting needs 2 or more rounds, got {rounds}")
    return np.arange(0, rounds, 2), np.arange(1, rounds, 2)


def naive_regret(costs) -> np.ndarray:
    """Per plan: its mean cost / the lowest mean cost - 1 (module doc)."""
    means = np.asarray(costs, dtype=np.float64).mean(axis=1)
    return means / means.min() - 1.0


def _splits(costs: np.ndarray):
    """(chosen plan, judging rounds) for each half choosing once."""
    a, b = halves(costs.shape[1])
    for choose, judge in ((a, b), (b, a)):
        yield int(np.argmin(costs[:, choose].mean(axis=1))), judge


def crossfit_regret(costs) -> np.ndarray:
    """Per plan: the mean over the two halves of (its mean / the mean of the plan the other half chose) - 1,
    both over the judging half (module doc)."""
    c = np.asarray(costs, dtype=np.float64)
    out = np.zeros(c.shape[0])
    for best, judge in _splits(c):
        means = c[:, judge].mean(axis=1)
        out += (means / means[best] - 1.0) / 2
    return out


def round_noise(spaces: Sequence) -> float:
    """s: the sd of one round's relative difference between a plan and its task's best (lowest mean), pooled
    over every plan and task (`eval.refine.paired_noise`); 0 with a single round."""
    ordered = []
    for costs in spaces:
        c = np.asarray(costs, dtype=np.float64)
        best = int(np.argmin(c.mean(axis=1)))
        ordered.append([c[best], *(c[k] for k in range(len(c)) if k != best)])
    return paired_noise(ordered)


def unpaired_noise(spaces: Sequence) -> float:
    """What `round_noise` would be without pairing by round: sqrt(2) x the sd of one plan's cost across rounds
    relative to its mean, pooled over every plan and task (the sd of the difference of two measurements made at
    different times). Against `round_noise`, what measuring a task's plans together in each round buys."""
    sq, dof = 0.0, 0
    for costs in spaces:
        c = np.asarray(costs, dtype=np.float64)
        rel = c / c.mean(axis=1, keepdims=True) - 1.0
        sq += float((rel ** 2).sum())
        dof += c.shape[0] * (c.shape[1] - 1)
    return math.sqrt(2.0 * sq / dof) if dof else 0.0


def hits(costs, noise: float, z: float = HIT_Z) -> np.ndarray:
    """Per plan: 0, 0.5 or 1, the share of the two halves on whose judging rounds it is within z x noise /
    sqrt(judging rounds) of the other half's chosen best (module doc)."""
    c = np.asarray(costs, dtype=np.float64)
    out = np.zeros(c.shape[0])
    for best, judge in _splits(c):
        means = c[:, judge].mean(axis=1)
        out += ((means / means[best] - 1.0) <= z * noise / math.sqrt(len(judge))) / 2
    return out


@dataclass
class RunnerUp(Record):
    """The best plan (lowest mean over all rounds) against the runner-up (module doc): their indices, the paired
    relative gap with its 95% interval, whether it is resolved (lo > 0) and whether both halves choose the best."""

    best: int
    runner_up: int
    gap: float
    lo: float
    hi: float
    resolved: bool
    stable: bool


def runner_up(costs, noise: float, z: float = GAP_Z) -> RunnerUp | None:
    """`RunnerUp` of one task's space; None with fewer than 2 plans."""
    c = np.asarray(costs, dtype=np.float64)
    if c.shape[0] < 2:
        return None
    order = np.argsort(c.mean(axis=1), kind="stable")
    best, second = int(order[0]), int(order[1])
    gap = float(np.mean(c[second] / c[best]) - 1.0)
    half = z * noise / math.sqrt(c.shape[1])
    chosen = {b for b, _ in _splits(c)} if c.shape[1] >= 2 else {best}
    return RunnerUp(best, second, gap, gap - half, gap + half, gap - half > 0, chosen == {best})


def ordering(estimates: Sequence[float | None], costs, noise: float, z: float = GAP_Z) -> dict:
    """How one cost model orders a task's measured plans: Spearman of its estimates against the mean measured
    costs (None with fewer than 3 priced plans), and over the pairs of priced plans with different estimates
    (ties by 1e-9 ms left out): how many (`pairs`) and how many it orders as the hardware's means do (`right`);
    the same over the pairs whose paired gap (the mean over rounds of one's cost / the other's - 1) exceeds
    z x noise / sqrt(rounds) (`beyond`, `beyond_right`; `noise`: `round_noise`, one round's relative difference
    between two plans)."""
    from neuroshard.train.metrics import spearman

    c = np.asarray(costs, dtype=np.float64)
    priced = [k for k, e in enumerate(estimates) if e is not None and math.isfinite(e)]
    est = np.array([estimates[k] for k in priced], dtype=np.float64)
    means = c[priced].mean(axis=1) if priced else np.zeros(0)
    rho = spearman(est, means) if len(priced) >= 3 else float("nan")
    out = {"plans": len(priced), "spearman": rho if math.isfinite(rho) else None, "pairs": 0, "right": 0,
           "beyond": 0, "beyond_right": 0}
    threshold = z * noise / math.sqrt(c.shape[1])
    for i, j in itertools.combinations(range(len(priced)), 2):
        if abs(est[i] - est[j]) <= 1e-9:
            continue
        right = (est[i] < est[j]) == (means[i] < means[j])
        out["pairs"] += 1
        out["right"] += right
        gap = float(np.mean(c[priced[i]] / c[priced[j]]) - 1.0)
        if noise > 0 and abs(gap) > threshold:
            out["beyond"] += 1
            out["beyond_right"] += right
    return out


def own_best(estimates: Sequence[float | None]) -> int | None:
    """The plan a model rates cheapest among those it prices (the first of equals); None when it prices none."""
    priced = [(e, k) for k, e in enumerate(estimates) if e is not None and math.isfinite(e)]
    return min(priced)[1] if priced else None


# --------------------------------------------------------------------------- over tasks


def _spread(values: Sequence[float], seed: int) -> dict:
    """Mean, median and the 95% bootstrap interval of the mean over tasks (`intervals.mean_interval`)."""
    if not values:
        return {"tasks": 0, "mean": None, "median": None, "ci": None}
    iv = mean_interval([[v] for v in values], seed=seed)
    return {"tasks": len(values), "mean": iv.mean, "median": float(np.median(values)), "ci": [iv.lo, iv.hi]}


@dataclass(frozen=True)
class ModelSpec:
    """A cost model judged on the measured spaces: its `label` (the key of `TaskSpace.estimates`), what it is in
    words, and the algorithms whose searches plan with it."""

    label: str
    title: str
    searches: tuple[str, ...] = ()


def summarize(spaces: Sequence[TaskSpace], models: Sequence[ModelSpec] = (), seed: int = 0) -> dict:
    """Per runtime: the round noise, per algorithm the regret (naive and cross-fitted: mean, median, 95% interval
    over tasks), the hit rate and how many tasks it planned; per task the best against the runner-up; per cost
    model its ordering and its own best's regret beside its search's. JSON-able."""
    out = {}
    for runtime in dict.fromkeys(s.runtime for s in spaces):
        mine = [s for s in spaces if s.runtime == runtime]
        rounds = min(len(s.costs[0]) for s in mine)
        crossfit = rounds >= 2
        noise = round_noise([s.matrix for s in mine]) if crossfit else 0.0
        per_task = []
        rows: dict[str, dict[str, list]] = {}
        for s in mine:
            c = s.matrix
            naive = naive_regret(c)
            cf = crossfit_regret(c) if crossfit else None
            hit = hits(c, noise) if crossfit else None
            ru = runner_up(c, noise)
            per_task.append({"task_set": s.task_set, "task": s.task, "plans": len(s.plans), "enumerated": s.enumerated,
                             "space_size": s.space_size, "runner_up": None if ru is None else ru.to_json(),
                             "search_steps": sum(1 for c in s.search if c.get("step", 0) > 0),
                             "search_stopped": next((c["stopped"] for c in s.search if "stopped" in c), None),
                             "regret": {a: {"naive": float(naive[k]), "crossfit": None if cf is None else float(cf[k]),
                                            "hit": None if hit is None else float(hit[k])}
                                        for a, k in s.algs.items()}})
            for a, k in s.algs.items():
                row = rows.setdefault(a, {"naive": [], "crossfit": [], "hit": []})
                row["naive"].append(float(naive[k]))
                if crossfit:
                    row["crossfit"].append(float(cf[k]))
                    row["hit"].append(float(hit[k]))
        algs = [{"alg": a, "naive": _spread(r["naive"], seed), "crossfit": _spread(r["crossfit"], seed),
                 "hit_rate": float(np.mean(r["hit"])) if r["hit"] else None} for a, r in rows.items()]
        algs.sort(key=lambda r: (r["crossfit"]["mean"] if r["crossfit"]["mean"] is not None else r["naive"]["mean"]))
        resolved = [t["runner_up"]["resolved"] for t in per_task if t["runner_up"]]
        stable = [t["runner_up"]["stable"] for t in per_task if t["runner_up"]]
        out[runtime] = {"tasks": len(mine), "rounds": rounds, "noise": noise,
                        "measurements": sum(len(s.plans) * len(s.costs[0]) for s in mine),
                        "noise_unpaired": unpaired_noise([s.matrix for s in mine]) if crossfit else None,
                        "resolvable": 2.8 * noise / math.sqrt(rounds) if crossfit else None,
                        "resolved": sum(resolved), "stable": sum(stable), "algorithms": algs, "per_task": per_task,
                        "models": [_model_row(mine, m, noise, crossfit, seed) for m in models
                                   if any(m.label in s.estimates for s in mine)]}
    return out


def _model_row(spaces: Sequence[TaskSpace], model: ModelSpec, noise: float, crossfit: bool, seed: int) -> dict:
    """One cost model's figures over the tasks (`summarize`)."""
    rhos, own = [], {"naive": [], "crossfit": []}
    searches = {a: {"naive": [], "crossfit": [], "shortfall": []} for a in model.searches}
    pairs = right = beyond = beyond_right = 0
    for s in spaces:
        est = s.estimates.get(model.label)
        if est is None:
            continue
        c = s.matrix
        o = ordering(est, c, noise)
        if o["spearman"] is not None:
            rhos.append(o["spearman"])
        pairs, right = pairs + o["pairs"], right + o["right"]
        beyond, beyond_right = beyond + o["beyond"], beyond_right + o["beyond_right"]
        k = own_best(est)
        if k is None:
            continue
        regrets = {"naive": naive_regret(c), "crossfit": crossfit_regret(c) if crossfit else None}
        for kind, r in regrets.items():
            if r is not None:
                own[kind].append(float(r[k]))
        for a, row in searches.items():
            j = s.algs.get(a)
            if j is None:
                continue
            for kind, r in regrets.items():
                if r is not None:
                    row[kind].append(float(r[j]))
            if est[j] is not None and est[k]:
                row["shortfall"].append(est[j] / est[k] - 1.0)
    return {"model": model.label, "title": model.title, "spearman": _spread(rhos, seed), "pairs": pairs,
            "right": right / pairs if pairs else None, "pairs_beyond_noise": beyond,
            "right_beyond_noise": beyond_right / beyond if beyond else None,
            "own_best": {kind: _spread(v, seed) for kind, v in own.items()},
            "searches": {a: {kind: _spread(v, seed) for kind, v in row.items()} for a, row in searches.items()}}


# --------------------------------------------------------------------------- report


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _cell(s: dict) -> str:
    if s["mean"] is None:
        return "-"
    return f"{_pct(s['mean'])} [{_pct(s['ci'][0])}, {_pct(s['ci'][1])}] (median {_pct(s['median'])})"


def _judged(figures: dict) -> dict:
    """The cross-fitted figure, or the naive one where there is none (a single round)."""
    return figures["crossfit"] if figures["crossfit"]["mean"] is not None else figures["naive"]


def summary_markdown(summary: dict) -> str:
    """The summary as Markdown: per runtime the noise, the algorithms' regret table, the tasks' best against
    runner-up and the cost models' table."""
    lines = []
    for runtime, r in summary.items():
        lines += [f"## Runtime: {runtime}", ""]
        lines.append(f"{r['tasks']} tasks, {r['rounds']} rounds. One round's relative difference between two plans "
                     f"of a task varies by s = {100 * r['noise']:.1f}% (sd, pooled; "
                     + (f"{100 * r['noise_unpaired']:.1f}% between measurements of other rounds)"
                        if r.get("noise_unpaired") is not None else "one round)")
                     + (f"; a paired gap of {100 * r['resolvable']:.1f}% is resolved with 80% power at this many "
                        "rounds" if r["resolvable"] else "") + ".")
        if r.get("seconds") is not None:
            lines.append(f"Measured in {r['seconds']:.0f} s ({r['measurements']} plan measurements in the final "
                         "rounds; stages read back from an earlier run take none).")
        lines.append(f"Best plan against the runner-up: resolved (95% interval of the gap above 0) in "
                     f"{r['resolved']} of {r['tasks']} tasks; both halves of the rounds choose the same best in "
                     f"{r['stable']}.")
        lines += ["", "| algorithm | tasks | regret, naive: mean [95% CI] (median) | regret, cross-fitted | hit rate |",
                  "|---|---|---|---|---|"]
        for a in r["algorithms"]:
            hit = "-" if a["hit_rate"] is None else f"{100 * a['hit_rate']:.0f}%"
            lines.append(f"| {a['alg']} | {a['naive']['tasks']} | {_cell(a['naive'])} | {_cell(a['crossfit'])} | "
                         f"{hit} |")
        lines += ["", "| task | plans | best vs runner-up: gap [95% CI] | resolved | stable |", "|---|---|---|---|---|"]
        for t in r["per_task"]:
            ru = t["runner_up"]
            why = {"saturated": "saturated", "exhausted": "no neighbour left", "steps": "at the step cap"}
            kind = "all" if t["enumerated"] else \
                f"searched: {t['search_steps']} step(s), {why.get(t['search_stopped'], 'stopped')}"
            if ru is None:
                lines.append(f"| {t['task_set']} {t['task']} | {t['plans']} ({kind}) | - | - | - |")
                continue
            lines.append(f"| {t['task_set']} {t['task']} | {t['plans']} ({kind}) | {_pct(ru['gap'])} "
                         f"[{_pct(ru['lo'])}, {_pct(ru['hi'])}] | {'yes' if ru['resolved'] else 'no'} | "
                         f"{'yes' if ru['stable'] else 'no'} |")
        if r["models"]:
            lines += ["", "| cost model | Spearman (mean over tasks) | pairs ordered right | beyond noise | own best's "
                          "regret, cross-fitted | its searches' plans: regret, cross-fitted; shortfall by the model |",
                      "|---|---|---|---|---|---|"]
            for m in r["models"]:
                right = "-" if m["right"] is None else f"{100 * m['right']:.0f}% of {m['pairs']}"
                beyond = "-" if m["right_beyond_noise"] is None else \
                    f"{100 * m['right_beyond_noise']:.0f}% of {m['pairs_beyond_noise']}"
                rho = "-" if m["spearman"]["mean"] is None else f"{m['spearman']['mean']:.2f}"
                srch = "; ".join(f"{a}: {_cell(_judged(r))}; shortfall {_cell(r['shortfall'])}"
                                 for a, r in m["searches"].items()) or "-"
                lines.append(f"| {m['title']} | {rho} | {right} | {beyond} | {_cell(_judged(m['own_best']))} | "
                             f"{srch} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def csv_rows(spaces: Sequence[TaskSpace], summary: dict) -> list[dict]:
    """One row per runtime, task and algorithm: its plan's mean measured cost and the task's figures."""
    out = []
    by_key = {(rt, t["task_set"], t["task"]): t for rt, r in summary.items() for t in r["per_task"]}
    for s in spaces:
        t = by_key[s.runtime, s.task_set, s.task]
        means = s.matrix.mean(axis=1)
        for a, k in s.algs.items():
            g = t["regret"][a]
            out.append({"runtime": s.runtime, "task_set": s.task_set, "task": s.task, "alg": a, "plan": k,
                        "mean_ms": float(means[k]), "best_ms": float(means.min()), "naive_regret": g["naive"],
                        "crossfit_regret": g["crossfit"], "hit": g["hit"], "plans": len(s.plans),
                        "enumerated": s.enumerated})
    return out
