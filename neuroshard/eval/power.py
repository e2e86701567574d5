"""Statistical power of a hardware comparison: how small a difference the measurement can tell from noise.

A paired comparison of two algorithms on T tasks, each plan measured R
times in interleaved rounds, sees per task and round the relative
difference ``d[t, r] = (other - reference) / reference cost``. Model:
``d[t, r] = delta + u[t] + e[t, r]``: `delta` the true mean difference,
`u` how the difference varies from task to task (sd `task_sd`), `e` the
repeat noise of the difference of two measurements made in the same round
(sd `repeat_sd`). The mean over tasks and rounds then has standard error

    se = sqrt(task_sd**2 / T + repeat_sd**2 / (T * R))

and a two-sided test at level `alpha` detects a true difference with
probability `power` when it is at least the minimum detectable difference

    mdd = (z[1 - alpha / 2] + z[power]) * se         (2.80 se at 95% / 80%)

(a normal approximation: the bootstrap interval of `intervals` is close to it
for T of 10 or more). `components` estimates the two sds from a hardware
evaluation with R >= 2: `repeat_sd` from the spread of each task's rounds,
`task_sd` from the spread of the task means beyond what the repeat noise
explains. `tasks_needed` inverts the formula. Differences are fractions of
the reference's cost (0.03 = 3%).

With the simulator's predicted difference f[t] of every task and its mean
over N more tasks that were not measured (`intervals.powered_difference`),
the estimate is the measured mean less lam x (mean f - mean over the N),
and the task term is what the predictions do not explain: `task_sd` is then
the sd of u[t] - lam x f[t], and the unmeasured tasks add their own term,

    se = sqrt(task_sd**2 / T + repeat_sd**2 / (T * R) + predicted_sd**2 / N)

with `predicted_sd` = lam x the sd of the predictions over the N tasks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

from neuroshard.eval.intervals import powered_estimate
from neuroshard.types.codec import Record
from neuroshard.types.costs import RankNoise

ALPHA = 0.05
POWER = 0.80


def z_sum(alpha: float = ALPHA, power: float = POWER) -> float:
    """z[1 - alpha/2] + z[power]: 1.960 + 0.842 = 2.802 at the defaults."""
    n = NormalDist()
    return n.inv_cdf(1 - alpha / 2) + n.inv_cdf(power)


def min_detectable(task_sd: float, repeat_sd: float, tasks: int, repeats: int, alpha: float = ALPHA,
                   power: float = POWER, predicted_sd: float = 0.0, predicted: int = 0) -> float:
    """The smallest true difference (a fraction) detected with probability `power` at level `alpha` (with
    `predicted` unmeasured tasks whose predictions vary by `predicted_sd`, weight included)."""
    extra = predicted_sd ** 2 / predicted if predicted else 0.0
    return z_sum(alpha, power) * math.sqrt(task_sd ** 2 / tasks + repeat_sd ** 2 / (tasks * repeats) + extra)


def tasks_needed(task_sd: float, repeat_sd: float, repeats: int, mdd: float, alpha: float = ALPHA,
                 power: float = POWER, predicted_sd: float = 0.0, predicted: int = 0) -> int | None:
    """The fewest tasks that bring the minimum detectable difference down to `mdd` with `repeats` rounds
    (and `predicted` unmeasured tasks as in `min_detectable`); None when the unmeasured tasks' term alone
    is above `mdd` (more unmeasured tasks are needed first)."""
    room = (mdd / z_sum(alpha, power)) ** 2 - (predicted_sd ** 2 / predicted if predicted else 0.0)
    if room <= 0:
        return None
    return max(2, math.ceil((task_sd ** 2 + repeat_sd ** 2 / repeats) / room))


@dataclass(frozen=True)
class Components(Record):
    """The two sds of a paired relative difference (fractions), and what they were estimated from."""

    task_sd: float
    repeat_sd: float
    tasks: int
    repeats: int
    predicted_sd: float = 0.0  # with unmeasured tasks' predictions: lam x their sd (task_sd is then residual)
    predicted: int = 0  # unmeasured tasks
    raw_task_sd: float | None = None  # with predictions: the task sd without them

    def mdd(self, tasks: int | None = None, repeats: int | None = None, alpha: float = ALPHA,
            power: float = POWER) -> float:
        """The minimum detectable difference of this comparison (default: its own tasks and repeats)."""
        return min_detectable(self.task_sd, self.repeat_sd, tasks or self.tasks, repeats or self.repeats, alpha,
                              power, self.predicted_sd, self.predicted)



def components(reference: Sequence[Sequence[float]], other: Sequence[Sequence[float]],
               predicted: tuple[Sequence[float], Sequence[float]] | None = None) -> Components | None:
    """The task and repeat sds of the relative difference (other - reference) / reference, from costs
    [task][round] of two algorithms' plans (paired by task and round); None with fewer than 2 tasks or
    2 rounds (no estimate of the repeat noise). `predicted`: (the predicted relative differences of the
    measured tasks, those of unmeasured tasks): the task sd is then what the predictions leave, with the
    weight of `intervals.powered_difference` (module doc)."""
    ref, oth = np.asarray(reference, dtype=np.float64), np.asarray(other, dtype=np.float64)
    if ref.ndim != 2 or ref.shape != oth.shape or ref.shape[0] < 2 or ref.shape[1] < 2:
        return None
    d = (oth - ref) / ref
    tasks, repeats = d.shape
    repeat_var = float(d.var(axis=1, ddof=1).mean())

    def task_sd(means: np.ndarray) -> float:
        return math.sqrt(max(0.0, float(means.var(ddof=1)) - repeat_var / repeats))

    means = d.mean(axis=1)
    if predicted is None or not len(predicted[1]):
        return Components(task_sd(means), math.sqrt(repeat_var), tasks, repeats)
    f, g = np.asarray(predicted[0], dtype=np.float64), np.asarray(predicted[1], dtype=np.float64)
    _, lam = powered_estimate(means[None], f[None], g[None])
    lam = float(lam[0])
    spread = float(g.std(ddof=1)) if g.size > 1 else 0.0
    return Components(task_sd(means - lam * f), math.sqrt(repeat_var), tasks, repeats, lam * spread, g.size,
                      task_sd(means))


def plan_repeat_noise(costs: Sequence[Sequence[float]]) -> dict | None:
    """How far two measurements of the same plan differ: over plans measured at least twice, the mean and
    median of |c1 - c2| / mean(c1, c2) of their first two measurements, and the plan-cost MAPE that a model
    predicting every plan's true cost exactly would still score against the mean of R measurements
    (about that difference / sqrt(2 R) for normal noise: the floor of the simulator's plan-cost MAPE)."""
    pairs = [(c[0], c[1], len(c)) for c in costs if len(c) >= 2 and c[0] + c[1] > 0]
    if not pairs:
        return None
    diff = np.array([abs(a - b) / ((a + b) / 2) for a, b, _ in pairs])
    repeats = min(n for _, _, n in pairs)
    return {"plans": len(pairs), "mean": float(diff.mean()), "median": float(np.median(diff)), "repeats": repeats,
            "mape_floor": float(diff.mean() / math.sqrt(2 * repeats))}


def rank_noise(totals: Sequence[Sequence[Sequence[float]]]) -> RankNoise | None:
    """How one measurement of a rank's total splits into noise of its own and noise shared with the plan's
    other ranks, from plans measured at least twice: `totals[plan][repeat][rank]` (ms).

    For each plan the log ratios of its first two measurements, ``l[r] = log(t1[r] / t2[r])``, have a mean
    ``c`` (what moved every rank) and deviations ``l[r] - c`` (what moved one rank). With one measurement's
    log noise ``common + own[r]`` (sds `common_sd`, `independent_sd`), a ratio holds the difference of two
    measurements (twice the variance), so

        independent_sd**2 = sum (l[r] - c)**2 / sum (ranks - 1) / 2
        common_sd**2      = (mean c**2 - mean 2 independent_sd**2 / ranks) / 2   (0 when negative)

    Both are relative sds of one measurement (fractions); None without a plan of 2 or more ranks measured
    twice. `planner.costs.uncertainty` draws the shared part once for all of a plan's ranks (`RankNoise.shared`)."""
    logs = []
    for plan in totals:
        if len(plan) < 2 or len(plan[0]) < 2 or len(plan[0]) != len(plan[1]):
            continue
        a, b = np.asarray(plan[0], dtype=np.float64), np.asarray(plan[1], dtype=np.float64)
        if (a <= 0).any() or (b <= 0).any():
            continue
        logs.append(np.log(a / b))
    if not logs:
        return None
    dev2 = sum(float(((lr - lr.mean()) ** 2).sum()) for lr in logs)
    dof = sum(len(lr) - 1 for lr in logs)
    independent_var = dev2 / dof / 2
    c2 = float(np.mean([lr.mean() ** 2 for lr in logs]))
    shared = float(np.mean([2 * independent_var / len(lr) for lr in logs]))
    return RankNoise(len(logs), math.sqrt(independent_var), math.sqrt(max(0.0, (c2 - shared) / 2)))


@dataclass(frozen=True)
class Headroom(Record):
    """What choosing each task's plan among the compared algorithms' plans by measuring them would gain over the
    reference's plan (fractions of the reference's cost; `selection_headroom`)."""

    gain: float  # chosen by one half of the rounds, judged on the other (cross-validated)
    lo: float  # its 95% interval over tasks (normal)
    hi: float
    in_sample: float  # chosen and judged by the same rounds: the cheapest measured mean, selection on noise too
    tasks: int
    algorithms: int
    repeats: int



def selection_headroom(costs: Sequence[Sequence[Sequence[float]]], reference: int = 0) -> Headroom | None:
    """How much a choice among the plans of several algorithms, made by measuring them, gains over the
    reference's plan: `costs[alg][task][round]` (ms, every algorithm's plans measured in the same rounds),
    `costs[reference]` the reference's. Per task, the plan with the lowest mean over the even rounds is
    judged on the odd rounds (gain ``1 - its mean / the reference's mean`` there), and the other way round;
    the task's gain is the mean of the two. Judged on rounds it was not chosen by, the gain is what the
    choice is worth and not the noise it was chosen on (the in-sample gain, chosen and judged on all rounds,
    is never below 0 and grows with the noise). The interval is the mean over tasks +- 1.96 standard errors.
    A cross-validated gain level with zero says that no choice among these plans, measured this often, beats
    the reference's: on this machine, the room a hardware-in-the-loop choice (`--refine`) has. None with
    fewer than 2 algorithms, 2 tasks or 2 rounds."""
    c = np.asarray(costs, dtype=np.float64)
    if c.ndim != 3 or c.shape[0] < 2 or c.shape[1] < 2 or c.shape[2] < 2:
        return None
    algs, tasks, rounds = c.shape
    halves = (np.arange(0, rounds, 2), np.arange(1, rounds, 2))
    per_task = np.zeros(tasks)
    for sel, judge in (halves, halves[::-1]):
        chosen = c[:, :, sel].mean(axis=2).argmin(axis=0)  # [task]: the cheapest by the choosing rounds
        judged = c[chosen, np.arange(tasks)][:, judge].mean(axis=1)
        per_task += (1.0 - judged / c[reference][:, judge].mean(axis=1)) / 2
    gain = float(per_task.mean())
    half = 1.96 * float(per_task.std(ddof=1)) / math.sqrt(tasks)
    means = c.mean(axis=2)
    in_sample = float((1.0 - means.min(axis=0) / means[reference]).mean())
    return Headroom(gain, gain - half, gain + half, in_sample, tasks, algs, rounds)
