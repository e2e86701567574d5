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
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

LEVEL = 0.95
RESAMPLES = 4000
VERDICTS = ("beats", "loses to", "no significant difference")


@dataclass(frozen=True)
class Interval:
    """A mean with its bootstrap interval [lo, hi] (same unit as the data)."""

    mean: float
    lo: float
    hi: float
    n_tasks: int
    n_repeats: int

    def to_json(self) -> dict:
        return asdict(self)


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
