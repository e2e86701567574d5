"""How well the simulator's estimates match the hardware, as typed records (`Accuracy`).

`simulator_accuracy` scores the estimates of the measured plan records: the
plan cost's MAPE and Spearman, each per-rank part's, how often the simulator
orders two plans of a task as the hardware does (beyond the repeat noise too),
how many measurements lie in the predicted band, and where the estimates lean
(per algorithm, per measurement round, the ranks' spread). `speed_ratios` and
the others serve the drift, anchor and per-round checks as well. The hardware
summary (`eval.summary`) carries the result; `Accuracy.to_json` is its
`simulator_accuracy` in `summary.json`. Costs in ms.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from neuroshard.eval.intervals import exceeds_repeat_noise
from neuroshard.eval.power import plan_repeat_noise, rank_noise
from neuroshard.types.codec import Record
from neuroshard.types.costs import RankNoise
from neuroshard.types.records import PlanRecord


def median_or_none(xs) -> float | None:
    """The median of the values that are not None; None without any."""
    xs = [x for x in xs if x is not None]
    return float(np.median(xs)) if xs else None


def finite_or_none(x):
    """`x` as a float; None when it is None, infinite or NaN."""
    return float(x) if x is not None and math.isfinite(x) else None


# --------------------------------------------------------------------------- records


@dataclass
class PartAccuracy(Record):
    """MAPE and Spearman of one per-rank part (all ranks of all plans), and how many entries."""

    mape: float | None
    spearman: float | None
    n: int = 0


@dataclass
class Accuracy(Record):
    """How well the simulator's estimates match the hardware (see `simulator_accuracy`)."""

    cost: str
    plans: int
    mape: float | None = None
    spearman: float | None = None
    pair_agreement: float | None = None
    pairs: int = 0
    pairs_tied: int = 0
    parts: dict[str, PartAccuracy] = field(default_factory=dict)
    mean_estimated: float | None = None
    mean_measured: float | None = None
    pairs_beyond_noise: int | None = None
    pair_agreement_beyond_noise: float | None = None
    repeat_noise: dict | None = None  # power.plan_repeat_noise: how far two measurements of a plan differ
    # share of the measurements (each repeat of each plan) inside the estimate's predicted 80% band
    # (`CostSpread` q10..q90, planner.costs.uncertainty): 0.8 when the predicted spread is calibrated
    calibration: float | None = None
    calibration_n: int = 0
    # the MAPE of the expected measured cost (the mean of the predicted distribution, `CostSpread.mean`: the
    # expected maximum of the ranks' noisy totals) instead of the point estimate; None without spreads
    mape_expected: float | None = None
    # power.rank_noise: one measurement of a rank's total, its own noise and the noise shared by the plan's ranks
    rank_noise: RankNoise | None = None
    # per algorithm, medians over its plans of measured / estimated: "cost" (the point estimate), "expected"
    # (the predicted distribution's mean; None without spreads) and "fw_comm" (the forward exchange, all ranks
    # summed): a search that picks the plans the models under-estimate shows here (`bias_by_alg`)
    by_alg: dict[str, dict[str, float | None]] = field(default_factory=dict)
    # per round of the interleaved measurement (repeat r of every plan), medians over the plans of measured /
    # estimated: "cost" and each part summed over the ranks (`bias_by_round`); a trend is the machine's speed
    # moving during the evaluation, which the calibration before planning cannot see
    by_round: list[dict[str, float | None]] = field(default_factory=list)
    # the spread of the ranks' ready times (the longest forward wait), estimated and measured (`rank_spread`)
    rank_spread: dict | None = None


# --------------------------------------------------------------------------- the checks


def band_coverage(records: Sequence[PlanRecord]) -> tuple[float | None, int]:
    """(share, count) of the measured repeat costs of `records` that lie inside their estimate's predicted
    80% band (`CostSpread.q10` .. `q90`); (None, 0) when no estimate has a spread."""
    inside = n = 0
    for r in records:
        spread = r.estimate.spread if r.estimate is not None else None
        if spread is None:
            continue
        for c in r.costs("cost") or []:
            n += 1
            inside += spread.q10 <= c <= spread.q90
    return (inside / n if n else None), n


def measured_rank_noise(records: Sequence[PlanRecord]) -> RankNoise | None:
    """`power.rank_noise` of the measured records' repeats (each rank's total: compute + bw + fw)."""
    return rank_noise([[[c + b + f for c, b, f in zip(p.compute, p.bw_comm, p.fw_comm)] for p in r.measured.repeats]
                       for r in records if r.measured is not None and r.measured.repeats])


def bias_by_alg(records: Sequence[PlanRecord]) -> dict[str, dict[str, float | None]]:
    """Per algorithm (in the records' order), the medians over its measured plans of measured / estimated
    plan cost ("cost"), measured cost / the predicted distribution's mean ("expected", None without spreads)
    and measured / estimated forward exchange summed over the ranks ("fw_comm")."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in records:
        if r.cost is None or not r.estimated_cost or r.measured is None or r.estimate is None:
            continue
        ratios = out.setdefault(r.alg, {"cost": [], "expected": [], "fw_comm": []})
        ratios["cost"].append(r.cost / r.estimated_cost)
        if r.estimate.spread is not None and r.estimate.spread.mean > 0:
            ratios["expected"].append(r.cost / r.estimate.spread.mean)
        if sum(r.estimate.fw_comm) > 0 and len(r.measured.fw_comm) == len(r.estimate.fw_comm):
            ratios["fw_comm"].append(sum(r.measured.fw_comm) / sum(r.estimate.fw_comm))
    return {alg: {k: median_or_none(v) for k, v in ratios.items()} for alg, ratios in out.items()}


_SPEED_PARTS = ("compute", "bw_comm", "fw_comm")


def _add_ratios(into: dict[str, list[float]], cost: float, parts, r: PlanRecord) -> None:
    """Append measured / estimated of the plan cost (`cost`) and of each part of `parts` summed over the ranks
    (where the estimate has that part and as many ranks) to `into`'s lists."""
    into["cost"].append(cost / r.estimated_cost)
    for part in _SPEED_PARTS:
        est = sum(getattr(r.estimate, part))
        if est > 0 and len(getattr(parts, part)) == len(getattr(r.estimate, part)):
            into[part].append(sum(getattr(parts, part)) / est)


def _measured(records: Sequence[PlanRecord]) -> list[PlanRecord]:
    return [r for r in records if r.measured is not None and r.cost is not None and r.estimated_cost
            and r.estimate is not None]


def speed_ratios(records: Sequence[PlanRecord]) -> dict[str, float | None]:
    """The medians over the measured plans of measured / estimated plan cost ("cost") and of each part summed
    over the ranks ("compute", "bw_comm", "fw_comm"; None where no plan has it): how fast the machine ran
    these plans against what the models assume."""
    ratios: dict[str, list[float]] = {k: [] for k in ("cost", *_SPEED_PARTS)}
    for r in _measured(records):
        _add_ratios(ratios, r.cost, r.measured, r)
    return {k: median_or_none(v) for k, v in ratios.items()}


def rank_spread(records: Sequence[PlanRecord]) -> dict | None:
    """How far apart a plan's ranks are ready (compute + backward exchange), estimated and measured: its
    largest `skew`, the longest wait its forward exchange starts with (measured: each rank's skew averaged
    over the repeats). Over the measured plans with both: "estimated" and "measured", the medians (ms);
    "mae", the mean absolute error (ms); "under", the share of plans whose measured spread is the larger;
    "by_alg", each algorithm's two medians. A search that balances the ranks by the models gets a small
    estimated spread; what the models get wrong about each rank comes back as a measured one, and the
    forward exchange of every rank waits for it. None without skews."""
    rows = [(r.alg, max(r.estimate.skew), max(r.measured.skew)) for r in _measured(records)
            if r.estimate.skew and r.measured.skew]
    if not rows:
        return None
    est, got = np.array([x[1] for x in rows]), np.array([x[2] for x in rows])
    by_alg = {}
    for alg in dict.fromkeys(x[0] for x in rows):
        mine = np.array([x[0] == alg for x in rows])
        by_alg[alg] = {"estimated": float(np.median(est[mine])), "measured": float(np.median(got[mine]))}
    return {"plans": len(rows), "estimated": float(np.median(est)), "measured": float(np.median(got)),
            "mae": float(np.mean(np.abs(got - est))), "under": float(np.mean(got > est)), "by_alg": by_alg}


def bias_by_round(records: Sequence[PlanRecord]) -> list[dict[str, float | None]]:
    """`speed_ratios` per measurement round r (the r-th repeat of every plan: the rounds measure every plan
    once, in a shuffled order, `eval.hardware.measurement_order`), over the plans measured r+1 times or more.
    Empty with fewer than two rounds."""
    rounds: list[dict[str, list[float]]] = []
    for r in _measured(records):
        for i, (cost, rep) in enumerate(zip(r.repeat_costs or [], r.measured.repeats or [])):
            if i == len(rounds):
                rounds.append({k: [] for k in ("cost", *_SPEED_PARTS)})
            _add_ratios(rounds[i], cost, rep, r)
    if len(rounds) < 2:
        return []
    return [{k: median_or_none(v) for k, v in ratios.items()} for ratios in rounds]


def simulator_accuracy(records: Sequence[PlanRecord], cost_key: str = "cost") -> Accuracy:
    """How well the simulator's estimates match the hardware, over every measured plan.

    `mape` and `spearman` of estimated vs measured plan cost (`cost_key`:
    "cost" for the sum of parts, "e2e_cost" for the end-to-end step);
    `pair_agreement`: for every task and every pair of algorithms with both
    plans measured, the share where the simulator orders the two plans as
    the hardware does. Pairs with the same plan, or with estimates within
    1e-9 ms, say nothing about ordering and are left out (`pairs_tied`).
    `parts`: MAPE and Spearman of the per-rank compute, backward comm,
    forward comm and total (all ranks of all plans) show where errors come from.
    """
    from neuroshard.train.metrics import regression_metrics

    done = [r for r in records if getattr(r, cost_key) is not None and r.estimated_cost is not None]
    out = Accuracy(cost=cost_key, plans=len(done))
    if not done:
        return out
    est = np.array([r.estimated_cost for r in done])
    meas = np.array([getattr(r, cost_key) for r in done])
    m = regression_metrics(est, meas)
    out.mape, out.spearman = finite_or_none(m["mape"]), finite_or_none(m["spearman"])
    out.mean_estimated, out.mean_measured = float(est.mean()), float(meas.mean())
    if cost_key == "cost":
        for part in ("compute", "bw_comm", "fw_comm", "total"):
            pe, pm = [], []
            for r in done:
                e, mm = getattr(r.estimate, part), getattr(r.measured, part)
                if len(e) == len(mm):
                    pe += list(e)
                    pm += list(mm)
            if pe:
                pm_ = regression_metrics(pe, pm)
                out.parts[part] = PartAccuracy(finite_or_none(pm_["mape"]), finite_or_none(pm_["spearman"]), pm_["n"])
        out.calibration, out.calibration_n = band_coverage(done)
        out.by_alg = bias_by_alg(done)
        out.by_round = bias_by_round(done)
        out.rank_spread = rank_spread(done)
        out.rank_noise = measured_rank_noise(done)
        spread = [r for r in done if r.estimate.spread is not None]
        if spread:
            out.mape_expected = finite_or_none(regression_metrics([r.estimate.spread.mean for r in spread],
                                                           [r.cost for r in spread])["mape"])

    agree = total = tied = 0
    beyond = agree_beyond = 0
    by_task: dict[int, list[PlanRecord]] = {}
    for r in done:
        by_task.setdefault(r.task, []).append(r)
    for rs in by_task.values():
        for a, b in itertools.combinations(rs, 2):
            if a.plan_key == b.plan_key or abs(a.estimated_cost - b.estimated_cost) <= 1e-9:
                tied += 1
                continue
            total += 1
            same = (a.estimated_cost < b.estimated_cost) == (getattr(a, cost_key) < getattr(b, cost_key))
            agree += same
            # pairs whose measured difference exceeds their repeat noise (needs >= 2 repeats)
            if exceeds_repeat_noise(a.costs(cost_key), b.costs(cost_key)):
                beyond += 1
                agree_beyond += same
    repeats = min(len(r.costs(cost_key)) for r in done)
    out.pairs, out.pairs_tied, out.pair_agreement = total, tied, agree / total if total else None
    out.pairs_beyond_noise = beyond if repeats >= 2 else None
    out.pair_agreement_beyond_noise = agree_beyond / beyond if beyond else None
    out.repeat_noise = plan_repeat_noise([r.costs(cost_key) for r in done])
    return out
