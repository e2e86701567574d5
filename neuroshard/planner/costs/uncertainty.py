"""A plan's cost as a distribution: what the models do not know (an ensemble's members) and what one
measurement adds (the measured noise of each part), not just the point estimate.

The point estimate of a plan is the largest per-rank total of the models'
mean parts (`simulator.score_placements`). What eval.py measures is the
largest per-rank total of one noisy measurement of each rank. A rank's total
is its compute and backward exchange (when it is ready) plus its forward
exchange, which starts with a wait for the last rank to be ready: so every
total is the last ready time plus the rank's own transfer, and the plan's
cost is

    max over r of ready[r]  +  max over r of transfer[r]

(exactly the point estimate when nothing is noisy). Whatever makes one rank
later than estimated delays every rank. For a plan whose ranks the models
balance, the last ready time lands above the estimate even when every rank's
mean is right (the expected maximum of n noisy equals exceeds each), and
more so the more ranks tie; a plan with one clearly slowest rank pays only
for that rank's error. So a plan's cost is modelled here as samples of that
sum, for every ensemble member k (its own compute, comm and wait: `K`
members, one for a single model) and `SAMPLES` fixed standard normal draws
(seeded: the same draws for every plan, so costs compare without sampling
noise), with

    ready[k, r]    + sd_ready[k, r] x z[s, r] + rank x compute[k, r] x y[s, r]
    transfer[k, r] + fw x fw_part[k, r] x z'[s, r]

`sd_ready` combines the relative noise of one measurement of compute and
backward exchange, `fw` that of the forward exchange (`NoiseModel`, from the
noise floors measured when the cost data was collected: samples re-measured
minutes later. The plan job's own compute noise between two repeats of a plan
is narrower, and drawn instead it puts too few of an evaluation's measurements
in the band: an evaluation's rounds span most of an hour). Ranks measured
together do not draw that noise independently: a slow spell of the machine
slows them all, so a share `shared` of its variance is common to the plan's
ranks (z[s, r] is then sqrt(1 - shared) x its own draw + sqrt(shared) x one
draw of the sample), which widens the band and raises the expected maximum
less. `shared` comes from plans measured twice on training tasks
(`types.RankNoise.shared`; 0, independent ranks, without them). `rank` is the
compute model's own error on a shard, the part the plan's ranks do not share
(y: independent draws per rank), measured on training tasks' plans
(`types.PlanError.rank`): the members agree more than the models are right,
and it is this error, drawn for each rank, that makes plans balanced by the
models cost more than estimated. The samples'
mean is the expected measured cost, their sd the spread, their 10% and 90%
quantiles the predicted 80% band. With one model and neither noise nor rank
error every sample is the point estimate.

What the members do not disagree about, the models' shared error on whole
plans (measured on training tasks' plans: a plan's measured cost strays from
its estimate by more than the members and the noise of one measurement
predict), widens the reported band as one more term: `NoiseModel.plan`, the
relative sd of a plan-level error, added to every sample as
plan x mean x one of `SAMPLES` fixed standardised draws (`widen`). It is the
same relative size for every plan, so it cannot rank plans: the search's
robust objective (`cost_samples`, `robust_cost`) leaves it out. Its value
comes from `calibrate_plan_sd` on plans of training tasks measured by the
on-policy collection (`types.PlanError`), never from the evaluation tasks.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from neuroshard.types.codec import Record
from neuroshard.types.costs import CostSpread

SAMPLES = 32  # noise draws per member: enough for a stable mean and 80% band, cheap in the search
_SEED = 20230601
_NORMALS: dict[int, np.ndarray] = {}
_RANK_DRAWS: dict[tuple[int, float], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def normals(n: int) -> np.ndarray:
    """The fixed standard normal draws [SAMPLES, n] of n ranks (the same for every plan of n ranks)."""
    if n not in _NORMALS:
        _NORMALS[n] = np.random.default_rng([_SEED, n]).standard_normal((SAMPLES, n))
    return _NORMALS[n]


def shared_normals() -> np.ndarray:
    """The fixed standard normal draw [SAMPLES] that every rank of a sample shares (independent of `normals`)."""
    if -1 not in _NORMALS:
        _NORMALS[-1] = np.random.default_rng([_SEED, 0, 1]).standard_normal(SAMPLES)
    return _NORMALS[-1]


def sd_from_noise_floor(mean_abs_rel_diff: float) -> float:
    """The relative sd of one measurement from a noise floor's mean |fresh - recorded| / recorded: the
    difference of two measurements with sd s has mean absolute value 2 s / sqrt(pi)."""
    return float(mean_abs_rel_diff) * math.sqrt(math.pi) / 2


@dataclass(frozen=True)
class NoiseModel(Record):
    """The relative sd of one measurement of a rank's compute, backward and forward comm (fractions), the
    share of that noise's variance the plan's ranks have in common (`shared`, 0..1), the relative sd of the
    compute model's error on a rank's shard that the other ranks do not share (`rank`), and the relative sd
    of the models' plan-level error (`plan`, see `widen`)."""

    compute: float = 0.0
    bw: float = 0.0
    fw: float = 0.0
    shared: float = 0.0
    plan: float = 0.0  # the plan-level error's relative sd (`widen`; types.PlanError.sd)
    rank: float = 0.0  # the compute model's per-rank error's relative sd (types.PlanError.rank)

    @property
    def zero(self) -> bool:
        """Nothing that differs between a plan's ranks: no noise of one measurement and no per-rank model
        error (the plan-level error aside)."""
        return not (self.compute or self.bw or self.fw or self.rank)



NO_NOISE = NoiseModel()


def cost_samples(compute: np.ndarray, bw: np.ndarray, fw: np.ndarray, noise: NoiseModel = NO_NOISE) -> np.ndarray:
    """Samples of the plan cost [M, K x SAMPLES] (or [M, K] without noise) from each member's per-rank parts
    [K, M, n] (ms): the last ready time plus the largest transfer (see the module docstring)."""
    if noise.zero:
        return (compute + bw + fw).max(axis=-1).T
    k, m, n = compute.shape

    # Layout [rank, sample, member x placement] in float32: the long contiguous last axis and the maxima
    # over the few ranks as pairwise maxima make this several times faster than [K, M, S, n] in the search
    def rank_first(a):  # [K, M, n] -> [n, 1, K x M]
        return np.ascontiguousarray(a.reshape(k * m, n).T, dtype=np.float32)[:, None, :]

    c, b, f = rank_first(compute), rank_first(bw), rank_first(fw)
    z_ready, z_fw, y = _rank_draws(n, noise.shared)
    ready = c + b
    ready_s = np.sqrt(np.square(noise.compute * c) + np.square(noise.bw * b)) * z_ready
    ready_s += ready
    if noise.rank:
        ready_s += (noise.rank * c) * y
    ready -= functools.reduce(np.maximum, ready)  # minus the last ready time: each rank's lead
    transfer_s = (noise.fw * f) * z_fw
    transfer_s += f + ready  # each rank's forward exchange beyond the wait
    draws = functools.reduce(np.maximum, ready_s) + functools.reduce(np.maximum, transfer_s)  # [S, K x M]
    return draws.reshape(-1, k, m).transpose(2, 1, 0).reshape(m, -1).astype(np.float64)  # [M, K x S]


def _rank_draws(n: int, shared: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The draws of `cost_samples` for n ranks, each [n, SAMPLES, 1] float32: of the ready time and of the
    forward transfer (a share `shared` of their variance common to the ranks: a slow spell slows every
    part), and of the compute model's per-rank error; cached, the search asks for them every round."""
    key = (n, shared)
    if key not in _RANK_DRAWS:
        z_ready, z_fw, y = (z.T[:, :, None].astype(np.float32) for z in np.split(normals(3 * n), 3, axis=1))
        if shared:
            common = (math.sqrt(shared) * shared_normals()).astype(np.float32)[:, None]
            z_ready = math.sqrt(1.0 - shared) * z_ready + common
            z_fw = math.sqrt(1.0 - shared) * z_fw + common
        _RANK_DRAWS[key] = (z_ready, z_fw, y)
    return _RANK_DRAWS[key]


def plan_normals() -> np.ndarray:
    """The fixed draws [SAMPLES] of the plan-level error, standardised (mean 0, sd 1: the band widens
    about the same mean)."""
    if -2 not in _NORMALS:
        z = np.random.default_rng([_SEED, 0, 2]).standard_normal(SAMPLES)
        _NORMALS[-2] = (z - z.mean()) / z.std()
    return _NORMALS[-2]


def widen(samples: np.ndarray, plan_sd: float) -> np.ndarray:
    """Samples [M, J x SAMPLES] of the plan costs with the plan-level error: every sample of [M, J] plus
    plan_sd x the plan's mean x each fixed draw (`plan_normals`); [M, J] unchanged when plan_sd is 0."""
    if not plan_sd:
        return samples
    mean = samples.mean(axis=1, keepdims=True)
    m = len(samples)
    return (samples[:, :, None] + (plan_sd * mean)[:, :, None] * plan_normals()).reshape(m, -1)


def share_in_band(samples: Sequence[np.ndarray], measured: Sequence[Sequence[float]],
                  plan_sd: float = 0.0) -> float:
    """The share of the measurements (`measured[i]`: plan i's measured costs) inside plan i's predicted 80%
    band (the 10% and 90% quantiles of its cost samples `samples[i]` [J], widened by plan_sd)."""
    inside = total = 0
    for smp, got in zip(samples, measured):
        q10, q90 = np.quantile(widen(np.asarray(smp, dtype=np.float64)[None], plan_sd)[0], [0.1, 0.9])
        inside += sum(q10 <= c <= q90 for c in got)
        total += len(got)
    return float(inside / total) if total else float("nan")


PLAN_SD_MAX = 0.5  # calibrate_plan_sd stops here: a plan error of 50% says the models are not worth a band
_PLAN_SD_STEP = 0.0025


def calibrate_plan_sd(samples: Sequence[np.ndarray], measured: Sequence[Sequence[float]],
                      target: float = 0.8) -> tuple[float, float, float]:
    """(plan_sd, coverage before, coverage after): the smallest plan-level error sd (steps of 0.25%, at
    most `PLAN_SD_MAX`) whose widened bands hold at least `target` of the measured costs of the plans
    (`samples[i]`: plan i's cost samples [J] from `cost_samples`, `measured[i]` its measured costs); 0 when
    the bands already hold that share."""
    before = share_in_band(samples, measured)
    if not before < target:  # also nan: nothing measured
        return 0.0, before, before
    lo, hi = 0, int(round(PLAN_SD_MAX / _PLAN_SD_STEP))
    if share_in_band(samples, measured, PLAN_SD_MAX) < target:
        return PLAN_SD_MAX, before, share_in_band(samples, measured, PLAN_SD_MAX)
    while hi - lo > 1:  # coverage grows with the sd: the first step that reaches the target
        mid = (lo + hi) // 2
        if share_in_band(samples, measured, mid * _PLAN_SD_STEP) >= target:
            hi = mid
        else:
            lo = mid
    sd = hi * _PLAN_SD_STEP
    return sd, before, share_in_band(samples, measured, sd)


def spread(samples: np.ndarray) -> list[CostSpread]:
    """Each plan's `CostSpread` from its cost samples [M, J]."""
    sd = samples.std(axis=1, ddof=1) if samples.shape[1] > 1 else np.zeros(len(samples))
    q10, q90 = np.quantile(samples, [0.1, 0.9], axis=1)
    return [CostSpread(float(m), float(s), float(a), float(b), samples.shape[1])
            for m, s, a, b in zip(samples.mean(axis=1), sd, q10, q90)]


def robust_cost(samples: np.ndarray, lam: float) -> np.ndarray:
    """The robust objective [M] of plans from their cost samples [M, J]: mean + lam x sd."""
    mean = samples.mean(axis=1)
    if not lam or samples.shape[1] < 2:
        return mean
    return mean + lam * samples.std(axis=1, ddof=1)
