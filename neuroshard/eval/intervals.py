"""Confidence intervals for claims about plan costs: bootstrap over tasks (and repeats), and verdicts.

A claim such as "NeuroShard beats size_lookup_greedy on hardware" must survive
the measurement noise (±10-20% between repeats on a shared CPU). Costs come
as `cost[task][repeat]` (ms; repeats of one plan measured at different
times, interleaved with the other plans). Intervals are percentile bootstrap
intervals at 95%: tasks are resampled with replacement and, within each
drawn task, its repeats too, so both the spread across tasks and the
repeat noise widen them. Paired comparisons pair the two algorithms' plans
of the same task and the same repeat round (measured close in time, so slow
spells of the machine cancel). Seeded: the same numbers give the same
intervals.

Prediction-powered differences (`powered_difference`): the simulator
predicts every task's difference, and it costs nothing to predict it on
many more tasks drawn from the same generator than the hardware can
measure. The measured mean difference is then corrected by how far the
measured tasks' predicted difference lies from the predicted difference
over all those tasks (a control variate; prediction-powered inference,
Angelopoulos et al., Science 2023, with the power-tuned weight of their
PPI++): what the simulator gets right about which tasks favour which
algorithm no longer counts as task-to-task noise, and what it gets wrong
is measured on the measured tasks, so the estimate stays unbiased however
wrong the simulator is (a useless simulator gets weight 0, the plain mean).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from neuroshard.types.codec import Record

LEVEL = 0.95
RESAMPLES = 4000
VERDICTS = ("beats", "loses to", "no significant difference")


@dataclass(frozen=True)
class Interval(Record):
    """A mean with its bootstrap interval [lo, hi] (same unit as the data)."""

    mean: float
    lo: float
    hi: float
    n_tasks: int
    n_repeats: int



def _as_matrix(costs: Sequence[Sequence[float]]) -> np.ndarray:
    """[tasks, repeats] from a list of per-task repeat lists (all tasks must have the same count)."""
    m = np.asarray(costs, dtype=np.float64)
    if m.ndim == 1:
        m = m[:, None]
    if m.ndim != 2 or not m.size:
        raise ValueError(f"expected costs[task][repeat], got shape {m.shape}")
    return m


def _bootstrap_means(m: np.ndarray, seed: int, resamples: int) -> np.ndarray:
    """Means of `resamples` two-level resamples of m [tasks, repeats]."""
    rng = np.random.default_rng(seed)
    t, r = m.shape
    rows = rng.integers(0, t, size=(resamples, t))
    cols = rng.integers(0, r, size=(resamples, t, r))
    return m[rows[:, :, None], cols].mean(axis=(1, 2))


def mean_interval(costs: Sequence[Sequence[float]], seed: int = 0, level: float = LEVEL,
                  resamples: int = RESAMPLES) -> Interval:
    """Mean of costs[task][repeat] with its bootstrap interval over tasks and repeats."""
    m = _as_matrix(costs)
    means = _bootstrap_means(m, seed, resamples)
    a = (1 - level) / 2
    return Interval(float(m.mean()), float(np.quantile(means, a)), float(np.quantile(means, 1 - a)), m.shape[0],
                    m.shape[1])


def paired_difference(base: Sequence[Sequence[float]], other: Sequence[Sequence[float]], seed: int = 0,
                      level: float = LEVEL, resamples: int = RESAMPLES) -> Interval:
    """Mean of other - base, paired by (task, repeat round), with its bootstrap interval.

    Positive: `base` is cheaper (for base = NeuroShard, "NeuroShard beats other").
    """
    b, o = _as_matrix(base), _as_matrix(other)
    if b.shape != o.shape:
        raise ValueError(f"paired costs differ in shape: {b.shape} vs {o.shape}")
    return mean_interval(o - b, seed, level, resamples)


def powered_difference(base: Sequence[Sequence[float]], other: Sequence[Sequence[float]],
                       predicted: Sequence[float], unmeasured: Sequence[float], seed: int = 0, level: float = LEVEL,
                       resamples: int = RESAMPLES) -> tuple[Interval, float]:
    """`paired_difference` made more precise by the simulator's predictions; returns (interval, weight).

    `predicted[t]`: the predicted difference other - base of measured task t (ms); `unmeasured[j]`: the same
    prediction on other tasks of the same generator, not measured. With y[t] the measured difference
    (mean over rounds) and f, g the two predictions, the estimate is

        mean(y) - lam x (mean(f) - mean(g)),   lam = cov(y, f) / ((1 + T / N) var(f)),  clipped to [0, 1]

    (T measured and N unmeasured tasks: the weight that minimises the estimate's variance, PPI++). The
    interval is the percentile bootstrap of the whole estimator, the weight recomputed in each resample:
    measured tasks (and their rounds, as `mean_interval`) and unmeasured tasks resampled independently.
    Without unmeasured tasks, or with predictions that do not vary, it is `paired_difference`'s."""
    b, o = _as_matrix(base), _as_matrix(other)
    if b.shape != o.shape:
        raise ValueError(f"paired costs differ in shape: {b.shape} vs {o.shape}")
    f, g = np.asarray(predicted, dtype=np.float64), np.asarray(unmeasured, dtype=np.float64)
    if f.shape != (b.shape[0],):
        raise ValueError(f"{f.size} predictions for {b.shape[0]} measured tasks")
    m = o - b
    if not g.size or b.shape[0] < 2:
        return paired_difference(base, other, seed, level, resamples), 0.0
    t, r = m.shape
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, t, size=(resamples, t))
    cols = rng.integers(0, r, size=(resamples, t, r))
    urows = rng.integers(0, g.size, size=(resamples, g.size))
    y = m[rows[:, :, None], cols].mean(axis=2)  # [S, T]
    boot, _ = powered_estimate(y, f[rows], g[urows])
    point, lam = powered_estimate(m.mean(axis=1)[None], f[None], g[None])
    a = (1 - level) / 2
    return Interval(float(point[0]), float(np.quantile(boot, a)), float(np.quantile(boot, 1 - a)), t, r), float(lam[0])


def powered_estimate(y: np.ndarray, f: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(estimates, weights) of `powered_difference` for each row of y, f [S, T] (measured differences and
    their predictions) and g [S, N] (the predictions on unmeasured tasks)."""
    t, n = y.shape[1], g.shape[1]
    fc = f - f.mean(axis=1, keepdims=True)
    var = (fc ** 2).sum(axis=1)
    cov = ((y - y.mean(axis=1, keepdims=True)) * fc).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.where(var > 0, cov / np.where(var > 0, var, 1.0) / (1 + t / n), 0.0)
    lam = np.clip(lam, 0.0, 1.0)
    return y.mean(axis=1) - lam * (f.mean(axis=1) - g.mean(axis=1)), lam


def verdict(diff: Interval) -> str:
    """From a paired difference (other - base): "beats" when the whole interval is above 0,
    "loses to" when it is below, else "no significant difference". Never from the mean alone."""
    if diff.lo > 0:
        return "beats"
    if diff.hi < 0:
        return "loses to"
    return "no significant difference"


def exceeds_repeat_noise(a: Sequence[float], b: Sequence[float], z: float = 1.96) -> bool | None:
    """Whether two plans' measured means differ by more than their repeat noise.

    `a`, `b`: the repeats of each plan (ms). True when |mean a - mean b| >
    z x sqrt(var a / n_a + var b / n_b) (sample variances); None with fewer
    than 2 repeats on either side (no noise estimate).
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(a) < 2 or len(b) < 2:
        return None
    se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
    return bool(abs(a.mean() - b.mean()) > z * se)
