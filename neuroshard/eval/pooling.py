"""Verdicts pooled over several evaluations (runs of different seeds): an inverse-variance meta-analysis.

One run's verdict rests on its tasks, its dataset and the machine's speed
during that run; a claim that should hold for the user's tables is checked
over several seeds. Each run gives, per algorithm, the reference's relative
gain ``g_i = (alg - reference) / alg`` (`AlgorithmRow.neuroshard_gain`,
prediction-powered where the run was) with its 95% interval
(`VsReference.gain_ci`). Its standard error is read from the interval's
width, ``se_i = (hi - lo) / (2 z[0.975])`` (the bootstrap intervals are
close to symmetric at the task counts of a hardware study). The
fixed-effect estimate weights each run by ``w_i = 1 / se_i**2``:

    g = sum(w_i g_i) / sum(w_i),   se = 1 / sqrt(sum(w_i))

Runs may differ by more than their own noise (another dataset, another
spell of the machine). Cochran's ``Q = sum(w_i (g_i - g)**2)`` is chi² with
k - 1 degrees of freedom when they do not; ``I² = (Q - (k - 1)) / Q``
(floored at 0) is the share of the runs' spread beyond their noise, and the
DerSimonian-Laird ``tau² = (Q - (k - 1)) / (sum(w) - sum(w²) / sum(w))``
(floored at 0) its variance. The random-effects estimate weights each run by
``1 / (se_i**2 + tau²)``; its interval gives the pooled verdict (the same as
the fixed-effect one when tau² is 0), so a pooled "beats" claims a margin
that holds from seed to seed, not only on average over these runs. With few
runs tau² is itself uncertain: the report shows Q's p-value beside it.

TorchRec training runs (`eval_torchrec.py`'s summary.json) are pooled the
same way on what they report: per algorithm its step time relative to the
reference's, paired by task and round, ``ratio - 1 = mean((alg - ref) / ref)``
with its 95% interval (`training_gains`); positive, as above, when the
reference trains faster.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

from neuroshard.eval.intervals import LEVEL, Interval, verdict
from neuroshard.eval.power import z_sum
from neuroshard.eval.summary import Summary
from neuroshard.types.codec import Record


def z_level(level: float = LEVEL) -> float:
    """The normal quantile of a two-sided interval at `level` (1.96 at 95%)."""
    return NormalDist().inv_cdf(1 - (1 - level) / 2)


def chi2_sf(x: float, df: int) -> float:
    """P(chi²_df > x) for an integer df >= 1 (closed forms: no scipy here)."""
    if df < 1:
        raise ValueError(f"chi-square needs df >= 1, got {df}")
    if x <= 0:
        return 1.0
    h = x / 2
    if df % 2 == 0:  # exp(-h) * sum_{i < df/2} h^i / i!
        term = total = 1.0
        for i in range(1, df // 2):
            term *= h / i
            total += term
        return math.exp(-h) * total
    # odd: 2 (1 - Phi(sqrt x)) + exp(-h) * sum_{i=1}^{(df-1)/2} h^(i - 1/2) / Gamma(i + 1/2)
    total = 2 * (1 - NormalDist().cdf(math.sqrt(x)))
    term = math.sqrt(h) / math.gamma(1.5)
    for i in range(1, (df - 1) // 2 + 1):
        total += math.exp(-h) * term
        term *= h / (i + 0.5)
    return min(1.0, total)


@dataclass(frozen=True)
class Pooled(Record):
    """The pooled estimate of k per-run estimates with standard errors (see the module docstring)."""

    fixed: float
    fixed_se: float
    q: float
    df: int
    p_heterogeneity: float | None  # None for a single run
    i2: float
    tau2: float
    mean: float  # random effects (= fixed when tau2 is 0)
    se: float
    lo: float
    hi: float


def pool(estimates: Sequence[float], ses: Sequence[float], level: float = LEVEL) -> Pooled:
    """Fixed- and random-effects (DerSimonian-Laird) pooling of `estimates` with standard errors `ses`."""
    if len(estimates) != len(ses) or not estimates:
        raise ValueError(f"{len(estimates)} estimates with {len(ses)} standard errors")
    if any(not (s > 0 and math.isfinite(s)) for s in ses) or any(not math.isfinite(g) for g in estimates):
        raise ValueError(f"pooling needs finite estimates and positive standard errors, got {list(ses)}")
    w = [1 / s ** 2 for s in ses]
    sw = sum(w)
    fixed = sum(wi * g for wi, g in zip(w, estimates)) / sw
    q = sum(wi * (g - fixed) ** 2 for wi, g in zip(w, estimates))
    df = len(estimates) - 1
    tau2 = max(0.0, (q - df) / (sw - sum(wi ** 2 for wi in w) / sw)) if df else 0.0
    ws = [1 / (s ** 2 + tau2) for s in ses]
    mean = sum(wi * g for wi, g in zip(ws, estimates)) / sum(ws)
    se = 1 / math.sqrt(sum(ws))
    z = z_level(level)
    return Pooled(fixed, 1 / math.sqrt(sw), q, df, chi2_sf(q, df) if df else None,
                  max(0.0, (q - df) / q) if q > 0 else 0.0, tau2, mean, se, mean - z * se, mean + z * se)


@dataclass(frozen=True)
class RunGain:
    """One run's relative gain of the reference over an algorithm, its interval and what it rests on."""

    run: str
    gain: float
    lo: float
    hi: float
    se: float
    tasks: int
    repeats: int
    verdict: str
    mdd: float | None


@dataclass(frozen=True)
class PooledRow(Record):
    """The reference against one algorithm over the runs that compared them."""

    alg: str
    runs: list[RunGain]
    pooled: Pooled
    verdict: str
    mdd: float  # the smallest relative difference the pooled comparison detects at 95% with 80% power


def run_gains(name: str, summary: Summary) -> dict[str, RunGain]:
    """Per algorithm compared with the reference (and with a gain interval), the run's `RunGain`."""
    z = z_level()
    out = {}
    for row in summary.algorithms:
        vs = row.vs_reference
        if vs is None or vs.gain_ci is None or row.neuroshard_gain is None:
            continue
        lo, hi = vs.gain_ci
        if not all(math.isfinite(x) for x in (row.neuroshard_gain, lo, hi)):
            raise ValueError(f"{name}: {row.alg}'s gain {row.neuroshard_gain} [{lo}, {hi}] is not a number: "
                             "a run with a NaN or infinite interval cannot be pooled")
        out[row.alg] = RunGain(name, row.neuroshard_gain, lo, hi, (hi - lo) / (2 * z), vs.diff_ms.n_tasks,
                               vs.diff_ms.n_repeats, vs.verdict, vs.mdd)
    return out


def training_gains(name: str, summary: dict, repeats: int) -> dict[str, RunGain]:
    """Per algorithm compared with the reference in a TorchRec training summary (`eval_torchrec.py`'s
    summary.json, `torchrec.training_eval.summarize`, of `repeats` rounds), the run's `RunGain`: its ratio - 1
    with the ratio's interval less 1 (module doc). ValueError naming the run for a row without them or with
    one that is not a number."""
    z = z_level()
    out = {}
    for i, row in enumerate(summary["algorithms"]):
        if not isinstance(row, dict) or row.get("ratio") is None:
            continue
        try:
            alg, gain, tasks = str(row["alg"]), float(row["ratio"]) - 1, int(row["tasks"])
            lo, hi = (float(x) - 1 for x in row["ratio_ci"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{name}: algorithm row {i} ({row.get('alg')}): no alg, ratio, ratio_ci [lo, hi] and "
                             f"tasks ({type(e).__name__}: {e})") from None
        if not all(math.isfinite(x) for x in (gain, lo, hi)):
            raise ValueError(f"{name}: {alg}'s ratio {row['ratio']} {row['ratio_ci']} is not a number: "
                             "a run with a NaN or infinite interval cannot be pooled")
        out[alg] = RunGain(name, gain, lo, hi, (hi - lo) / (2 * z), tasks, repeats, row.get("verdict") or "-",
                           row.get("mdd"))
    return out


def _same(named: Sequence[tuple[str, object]], what: Sequence[str], get) -> None:
    """ValueError naming the first run whose `what` (read by `get`) differs from the first run's."""
    if not named:
        raise ValueError("no runs to pool")
    first_name, first = named[0]
    for name, s in named[1:]:
        for w in what:
            if get(s, w) != get(first, w):
                raise ValueError(f"{name}: its {w} is {get(s, w)!r}, but {first_name}'s is "
                                 f"{get(first, w)!r}: these runs do not compare the same thing")


def pool_runs(named: Sequence[tuple[str, Summary]]) -> list[PooledRow]:
    """The reference against each algorithm, pooled over the named runs' summaries (in the first run's
    algorithm order; an algorithm enters with the runs that compared it). The runs must share the
    reference and the compared cost (ValueError naming the run that differs)."""
    _same(named, ("reference", "cost"), getattr)
    return pool_gains([run_gains(name, s) for name, s in named])


def pool_training_runs(named: Sequence[tuple[str, dict, int]]) -> list[PooledRow]:
    """`pool_runs` for TorchRec training summaries, each named with its rounds (`training_gains`); the runs
    must share the reference."""
    _same([(name, s) for name, s, _ in named], ("reference",), dict.get)
    return pool_gains([training_gains(name, s, repeats) for name, s, repeats in named])


def pool_gains(gains: Sequence[dict[str, RunGain]]) -> list[PooledRow]:
    """Per algorithm (in the order first met), the random-effects pool of its runs' gains with its verdict."""
    algs = list(dict.fromkeys(a for g in gains for a in g))
    rows = []
    for alg in algs:
        runs = [g[alg] for g in gains if alg in g and g[alg].se > 0]
        flat = [g[alg].run for g in gains if alg in g and g[alg].se <= 0]
        if flat:  # inverse-variance weights need a width: a zero-width interval (one task) cannot enter
            print(f"warning: {alg}: left out of the pool in {', '.join(flat)} (a zero-width interval)",
                  file=sys.stderr)
        if not runs:
            continue
        p = pool([r.gain for r in runs], [r.se for r in runs])
        repeats = {r.repeats for r in runs}
        iv = Interval(p.mean, p.lo, p.hi, sum(r.tasks for r in runs), repeats.pop() if len(repeats) == 1 else 0)
        rows.append(PooledRow(alg, runs, p, verdict(iv), z_sum() * p.se))
    return rows


def pool_ablations(named: Sequence[tuple[str, dict]]) -> list[dict]:
    """The cost-model ablation's effects (`eval.ablation`) pooled over runs: `named` holds (run, its report's
    "ablation" figures); per effect present in every run, each run's relative gain and interval and the
    random-effects pool (`pool`) with its verdict. Runs without the ablation are left out; [] without two."""
    runs = [(name, a) for name, a in named if a and a.get("effects")]
    if len(runs) < 2:
        return []
    z = z_level()
    out = []
    for effect in runs[0][1]["effects"]:
        per_run = []
        for name, a in runs:
            e = next((x for x in a["effects"] if x["name"] == effect["name"]), None)
            if e is None or not e["gain_hi"] > e["gain_lo"]:
                break
            per_run.append((name, e["gain"], e["gain_lo"], e["gain_hi"]))
        else:
            p = pool([g for _, g, _, _ in per_run], [(hi - lo) / (2 * z) for _, _, lo, hi in per_run])
            iv = Interval(p.mean, p.lo, p.hi, 0, 0)
            out.append({"name": effect["name"], "base": effect["base"], "other": effect["other"],
                        "runs": [{"run": n, "gain": g, "lo": lo, "hi": hi} for n, g, lo, hi in per_run],
                        "pooled": p.to_json(), "verdict": verdict(iv)})
    return out
