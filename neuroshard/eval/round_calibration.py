"""Per-round calibration of a hardware evaluation: the machine's speed measured in the same rounds as the plans.

The calibration before planning (steps 5a, 5b) times collected kernels and all-to-alls minutes before the
plan job runs, outside it; on shared cores the job's own speed moves apart from theirs, and the plan-cost
error the report gives then mixes the models' error with the machine's speed at another hour. So `eval.py
--round_anchors` measures a few plans of other tasks in every round of the evaluation, spread over the round
(`anchor_order`), and each round's speed is their median measured / estimated, per part (`round_factors`):
compute, backward and forward exchange, and the plan cost. The collectives of spread tables (row-wise,
table-row-wise, data-parallel) are timed apart inside the exchanges and drift apart from the all-to-alls (gloo's
reductions are not its message passing): where at least `COLLECTIVE_ANCHORS` anchors of a round have spread
tables, that round also gets the median speed of their forward and of their backward collectives, and an estimate's
collectives move by those; with fewer they move by their exchange's factor. A median of one or two plans is those
plans' own measurement, blow-ups included, and moving every estimate by it adds their noise to every plan rather
than taking the round's speed out (docs/EXPERIMENTS.md, the entry on the collectives' factor).

The pipeline's anchors are plans of tasks that nothing trained on (steps 2d, 5e), made by the evaluation's algorithms,
one plan a task with the algorithms rotated (`spread_choice`: one task's plans share that task's model error, as large
as the drift). Plans whose shards the models were retrained on (the on-policy step's) are a biased gauge: the models
reproduce what those plans cost at the hour they were measured, not how they price plans they never saw, and the two
levels can differ by more than a round's drift. Each measurement of an evaluation plan is then compared with its
estimate whose per-rank parts are multiplied by the factors of the round it ran in (`calibrated_accuracy`): the MAPE
per measurement and of the plans' means, the rank correlation, and the share of measurements inside the predicted 80%
band moved by the same factors. The estimates written to the results are not changed.

Each of the two MAPEs has its own floor, what a perfect model moved the same way would score: from the
measurements divided by their round's plan-cost factor, d = the mean |z1 - z2| / mean(z1, z2) of a plan's
first two rounds, a measurement is off its plan's true cost by about d / sqrt(2) and a mean of R rounds by
d / sqrt(2 R) (normal noise; `power.plan_repeat_noise` is the same without the rounds' speed taken out). A
per-measurement MAPE is read against the first, the plans' means against the second.

Which anchors were measured moves the factors, and so the ratio of the MAPE to its floor: `anchor_spread`
resamples the anchors with replacement and gives that ratio's 10th and 90th percentiles, each draw with its own
factors and floor, so a reader can tell a ratio the anchors settle from one they leave open.

A floor read from a few plans (the plans with the new types in one run) swings from run to run more than the
models' error does: `pooled_accuracy` takes several runs' plans together, each run's measurements moved by its own
rounds' factors.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from neuroshard.eval.accuracy import speed_ratios
from neuroshard.numerics import mape
from neuroshard.train.metrics import spearman
from neuroshard.types.codec import Record
from neuroshard.types.costs import CostBreakdown
from neuroshard.types.records import PlanRecord

PARTS = ("compute", "bw_comm", "fw_comm")
COLLECTIVE_PARTS = ("fw_collectives", "bw_collectives")  # a breakdown's `collectives[rank]`: [forward, backward]
ANCHOR_PREFIX = "anchor:"  # the label of an anchor's record among the evaluation's measurements
ANCHOR_DRAWS = 200  # resamples of the anchors for the spread of the calibrated ratio (`anchor_spread`)
COLLECTIVE_ANCHORS = 3  # anchors with spread tables a round needs for its collectives' own factor: a median that
#                         one blown-up measurement cannot move


@dataclass
class RoundCalibration(Record):
    """Per round, the anchors' speed (`factors`: {"cost", "compute", "bw_comm", "fw_comm"} measured /
    estimated, medians over the round's anchors, and "fw_collectives", "bw_collectives" where anchors have
    spread tables), and the evaluation's plans against estimates moved by their
    round's factors: `mape` per measurement, `mape_mean` of the plans' mean costs, `spearman` of the means,
    `coverage` of the measurements in the moved 80% band (None without predicted spreads), and the raw
    (unmoved) per-measurement MAPE beside them; `floor` and `floor_mean`: what a perfect model would score on
    the same measurements, per measurement and for the means (module doc; None without two rounds)."""

    anchors: int
    factors: list[dict] = field(default_factory=list)
    measurements: int = 0
    mape: float | None = None
    mape_mean: float | None = None
    spearman: float | None = None
    coverage: float | None = None
    raw_mape: float | None = None
    floor: float | None = None
    floor_mean: float | None = None
    ratio_spread: list[float] | None = None  # mape / floor with the anchors resampled: 10th, 90th percentile


def anchor_order(rounds: Sequence[tuple[PlanRecord, int]], anchors: Sequence[PlanRecord],
                 repeats: int) -> list[tuple[PlanRecord, int]]:
    """The evaluation's (plan, round) order with every anchor measured once per round, spread evenly over the
    round (anchor k after the k-th of len(anchors) + 1 equal parts of the round's plans)."""
    if not anchors:
        return list(rounds)
    out = []
    for r in range(repeats):
        mine = [x for x in rounds if x[1] == r]
        cuts = [round(len(mine) * (k + 1) / (len(anchors) + 1)) for k in range(len(anchors))]
        start = 0
        for cut, anchor in zip(cuts, anchors):
            out += mine[start:cut] + [(anchor, r)]
            start = cut
        out += mine[start:]
    return out


def _round_record(rec: PlanRecord, r: int) -> PlanRecord | None:
    """`rec` as if measured once, in round r (its r-th repeat's parts and cost); None without it. Results
    written before the repeats kept their collectives give each round the mean over the repeats."""
    parts = rec.measured.repeats[r] if rec.measured is not None and rec.measured.repeats and \
        r < len(rec.measured.repeats) else None
    if parts is None or not rec.repeat_costs or r >= len(rec.repeat_costs):
        return None
    collectives = parts.collectives if parts.collectives is not None else rec.measured.collectives
    return replace(rec, measured=CostBreakdown(parts.compute, parts.bw_comm, parts.fw_comm, collectives=collectives),
                   repeat_costs=[rec.repeat_costs[r]])


def _collective_ratios(records: Sequence[tuple[int, PlanRecord]]) -> dict[str, float]:
    """Per collective part ("fw_collectives", "bw_collectives"), the median over the records that have it of
    measured / estimated summed over the ranks; `records` pairs each with the anchor it came from, and a part that
    fewer than `COLLECTIVE_ANCHORS` distinct anchors have is left out (a resample that draws one anchor three times
    has one measurement of the collectives, not three)."""
    out = {}
    for i, key in enumerate(COLLECTIVE_PARTS):
        ratios, sources = [], set()
        for source, rec in records:
            got, est = rec.measured.collectives, rec.estimate.collectives if rec.estimate is not None else None
            if got and est and len(got) == len(est) and sum(e[i] for e in est) > 0:
                ratios.append(sum(g[i] for g in got) / sum(e[i] for e in est))
                sources.add(source)
        if len(sources) >= COLLECTIVE_ANCHORS:
            out[key] = float(np.median(ratios))
    return out


def round_factors(anchors: Sequence[PlanRecord], repeats: int) -> list[dict]:
    """Per round, the anchors' measured / estimated medians (`summary.speed_ratios`) of that round's
    measurements; a part without a ratio in a round is 1.0 (not moved). Where at least `COLLECTIVE_ANCHORS`
    anchors have spread tables, the round's speed of their collectives too (`COLLECTIVE_PARTS`, module doc)."""
    out = []
    for r in range(repeats):
        measured = [(id(a), x) for a, x in ((a, _round_record(a, r)) for a in anchors) if x is not None]
        ratios = {**speed_ratios([x for _, x in measured]), **_collective_ratios(measured)}
        out.append({k: (float(v) if v is not None and np.isfinite(v) and v > 0 else 1.0) for k, v in ratios.items()})
    return out


def _moved(estimate: CostBreakdown, f: dict) -> float:
    """The estimate's plan cost with each rank's parts multiplied by the round's factors: the spread tables'
    collectives by their own where the round has them, else by their exchange's."""
    coll = estimate.collectives or [(0.0, 0.0)] * len(estimate.compute)
    f_fw, f_bw = f.get("fw_collectives", f["fw_comm"]), f.get("bw_collectives", f["bw_comm"])
    return max(f["compute"] * c + f["bw_comm"] * (b - kb) + f_bw * kb + f["fw_comm"] * (w - kf) + f_fw * kf
               for c, b, w, (kf, kb) in zip(estimate.compute, estimate.bw_comm, estimate.fw_comm, coll))


# a plan's parts as `part_ratios` splits them: the exchanges without the spread tables' collectives, and those apart
SPLIT_PARTS = ("compute", "fw_alltoall", "bw_alltoall", "fw_collectives", "bw_collectives")
PART_NAMES = {"compute": "compute", "fw_alltoall": "forward all-to-all", "bw_alltoall": "backward all-to-all",
              "fw_collectives": "forward collectives", "bw_collectives": "backward collectives"}


def _split(b: CostBreakdown) -> dict[str, float]:
    """A breakdown's parts summed over the ranks, its exchanges split into all-to-all and collectives
    (`SPLIT_PARTS`)."""
    coll = b.collectives or [(0.0, 0.0)] * len(b.compute)
    fw_c, bw_c = sum(c[0] for c in coll), sum(c[1] for c in coll)
    return {"compute": sum(b.compute), "fw_alltoall": sum(b.fw_comm) - fw_c, "bw_alltoall": sum(b.bw_comm) - bw_c,
            "fw_collectives": fw_c, "bw_collectives": bw_c}


# the round factor that moves each of them (`_moved`): the collectives by their own where the round has them
_MOVED_BY = {"compute": "compute", "fw_alltoall": "fw_comm", "bw_alltoall": "bw_comm", "fw_collectives": "fw_comm",
             "bw_collectives": "bw_comm"}


def _round_measurements(records: Sequence[PlanRecord], factors: Sequence[dict]):
    """(record, the record as measured in round r, round r's factors) for every measured record and round."""
    for rec in _measured(records):
        for r, f in enumerate(factors):
            m = _round_record(rec, r)
            if m is not None:
                yield rec, m, f


def part_ratios(records: Sequence[PlanRecord], factors: Sequence[dict]) -> dict[str, float]:
    """Where the plans' error sits: per part (`SPLIT_PARTS`), the median over the records' measurements of
    measured / estimated, each summed over the ranks and the estimate moved by its round's factor (1.0 is
    priced right). A part whose estimate is 0 in every measurement is left out. A forward all-to-all priced
    low while the collectives are right says the ranks were ready further apart than estimated: the exchange
    starts with each rank waiting for the latest (`measure.plan_job`), so it carries the compute's per-rank
    error (`rank_compute_ratios`)."""
    ratios: dict[str, list[float]] = {k: [] for k in SPLIT_PARTS}
    for rec, m, f in _round_measurements(records, factors):
        est, got = _split(rec.estimate), _split(m.measured)
        for k in SPLIT_PARTS:
            if est[k] > 0:
                ratios[k].append(got[k] / (est[k] * f.get(k, f[_MOVED_BY[k]])))
    return {k: float(np.median(v)) for k, v in ratios.items() if v}


def rank_compute_ratios(records: Sequence[PlanRecord], factors: Sequence[dict]) -> list[float | None]:
    """Per rank, the median over the records' measurements of its measured compute over its estimate moved by
    the round's compute factor (ranks with no estimated compute left out of that rank's median; None for a rank
    without any): a slope over the ranks that the models do not have is a per-rank error the plan's cost
    follows (the slowest rank sets it)."""
    ranks: list[list[float]] = [[] for _ in range(max((len(r.estimate.compute) for r in _measured(records)),
                                                      default=0))]
    for rec, m, f in _round_measurements(records, factors):
        for q, (got, est) in enumerate(zip(m.measured.compute, rec.estimate.compute)):
            if est > 0:
                ranks[q].append(got / (est * f["compute"]))
    return [float(np.median(v)) if v else None for v in ranks]


def _round_diffs(costs: Sequence[Sequence[float]], speeds: Sequence[float]) -> tuple[list[float], list[int]]:
    """Per plan measured in two rounds, |z1 - z2| / mean(z1, z2) of its first two with each round's speed taken
    out, and the rounds it ran in (module doc)."""
    diffs, rounds = [], []
    for c in costs:
        if len(c) >= 2 and len(speeds) >= 2 and min(c[:2]) > 0:
            z0, z1 = c[0] / speeds[0], c[1] / speeds[1]
            diffs.append(abs(z0 - z1) / ((z0 + z1) / 2))
            rounds.append(min(len(c), len(speeds)))
    return diffs, rounds


def round_floors(costs: Sequence[Sequence[float]], speeds: Sequence[float]) -> tuple[float | None, float | None]:
    """(per measurement, of the means) MAPE floors of plans measured at `costs[plan][round]` in rounds that ran
    at `speeds[round]` (module doc); (None, None) without a plan measured in two rounds."""
    diffs, rounds = _round_diffs(costs, speeds)
    if not diffs:
        return None, None
    d = float(np.mean(diffs))
    return d / np.sqrt(2), d / np.sqrt(2 * min(rounds))


def calibrated_accuracy(records: Sequence[PlanRecord], anchors: Sequence[PlanRecord],
                        repeats: int) -> RoundCalibration:
    """The evaluation's measured plans (`records`) against their estimates moved by each round's anchors'
    factors (module doc), with the spread of the ratio to the floor over resampled anchors."""
    out = accuracy_at(records, round_factors(anchors, repeats), len(anchors))
    out.ratio_spread = anchor_spread(records, anchors, repeats)
    return out


def anchor_spread(records: Sequence[PlanRecord], anchors: Sequence[PlanRecord], repeats: int,
                  draws: int = ANCHOR_DRAWS, seed: int = 0) -> list[float] | None:
    """The 10th and 90th percentiles of the per-measurement MAPE over its floor with the anchors resampled with
    replacement (`draws` times, each draw's factors and floor its own; module doc); None with fewer than two
    anchors or without a floor."""
    return _resampled(len(anchors), lambda pick: accuracy_at(records, round_factors([anchors[i] for i in pick],
                                                                                   repeats), len(pick)),
                      draws, seed)


def _resampled(n: int, score, draws: int, seed: int) -> list[float] | None:
    """The 10th and 90th percentiles of mape / floor of `score(indices)` over `draws` resamples with replacement of
    n anchors' indices (draws without a floor left out); None with fewer than two anchors or no floor."""
    if n < 2:
        return None
    rng = np.random.default_rng(seed)
    return _ratio_percentiles([score(rng.integers(0, n, n)) for _ in range(draws)])


def _ratio_percentiles(scored) -> list[float] | None:
    """The 10th and 90th percentiles of mape / floor over `scored` (those without a floor left out); None when
    none has one."""
    ratios = [got.mape / got.floor for got in scored if got.mape is not None and got.floor]
    if not ratios:
        return None
    return [float(np.percentile(ratios, 10)), float(np.percentile(ratios, 90))]


def accuracy_at(records: Sequence[PlanRecord], factors: Sequence[dict], anchors: int) -> RoundCalibration:
    """`calibrated_accuracy` with the rounds' factors given (e.g. a round_calibration.json's, read again)."""
    repeats = len(factors)
    errs, raw, inside, banded = [], [], 0, 0
    means_est, means_meas = [], []
    for rec in _measured(records):
        moved = []
        for r, cost in enumerate(rec.repeat_costs[:repeats]):
            est = _moved(rec.estimate, factors[r])
            moved.append(est)
            errs.append(abs(est - cost) / cost)
            raw.append(abs(rec.estimate.cost - cost) / cost)
            spread = rec.estimate.spread
            if spread is not None and rec.estimate.cost > 0:
                scale = est / rec.estimate.cost
                banded += 1
                inside += spread.q10 * scale <= cost <= spread.q90 * scale
        means_est.append(float(np.mean(moved)))
        means_meas.append(float(np.mean(rec.repeat_costs[:repeats])))
    measured = [r.repeat_costs[:repeats] for r in _measured(records)]
    out = _scored(RoundCalibration(anchors, list(factors), len(errs)), errs, raw, means_est, means_meas, measured)
    if errs:
        out.coverage = inside / banded if banded else None
    return out


def _measured(records: Sequence[PlanRecord]) -> list[PlanRecord]:
    """The records with an estimate and a measurement in at least one round."""
    return [r for r in records if r.estimate is not None and r.measured is not None and r.repeat_costs]


def new_type_records(records: Sequence[PlanRecord]) -> list[PlanRecord]:
    """The records whose plans make a table row-wise, table-row-wise or data-parallel (a spread table): the
    plans whose error the new cost models carry."""
    return split_new_types(records)[0]


def split_new_types(records: Sequence[PlanRecord]) -> tuple[list[PlanRecord], list[PlanRecord]]:
    """(`new_type_records`, the other records), each in the records' order."""
    new, others = [], []
    for r in records:
        (new if r.plan is not None and r.plan.spread else others).append(r)
    return new, others


@dataclass
class PooledCalibration(Record):
    """The per-round calibrated error of several runs' plans at once (`pooled_accuracy`): each run's
    measurements moved by its own rounds' factors, the per-measurement MAPE over every run's `measurements`,
    its floor from every run's `plans` measured in two rounds (`round_floors`, the runs' plans together), and
    the ratio's 10th and 90th percentiles with each run's anchors resampled (`ratio_spread`)."""

    runs: int
    plans: int
    measurements: int
    mape: float | None = None
    floor: float | None = None
    ratio_spread: list[float] | None = None


def pooled_accuracy(runs: Sequence[tuple[Sequence[PlanRecord], Sequence[PlanRecord], int]],
                    draws: int = ANCHOR_DRAWS, seed: int = 0) -> PooledCalibration:
    """`calibrated_accuracy` of several runs' plans pooled: `runs` lists each run's (records, anchors, repeats).
    A run's rounds ran at their own speed, so each run keeps its own factors; the errors and the plans' round
    differences are then taken together, as if one run had measured them all. A few plans a run (e.g. the
    plans with the new types on a small task set) give a floor that swings from run to run; pooled, it is read
    from all of them."""
    def at(factor_sets):
        total, n, diffs = 0.0, 0, []
        for (records, _, _), factors in zip(runs, factor_sets):
            cal = accuracy_at(records, factors, 0)
            if cal.mape is not None:
                total += cal.mape * cal.measurements
                n += cal.measurements
            diffs += _round_diffs([r.repeat_costs[:len(factors)] for r in _measured(records)],
                                  [f["cost"] for f in factors])[0]
        pooled = total / n if n else None
        return PooledCalibration(len(runs), len(diffs), n, pooled,
                                 float(np.mean(diffs)) / np.sqrt(2) if diffs else None)

    out = at([round_factors(anchors, repeats) for _, anchors, repeats in runs])
    if all(len(anchors) >= 2 for _, anchors, _ in runs):
        rng = np.random.default_rng(seed)
        out.ratio_spread = _ratio_percentiles(
            at([round_factors([anchors[i] for i in rng.integers(0, len(anchors), len(anchors))], repeats)
                for _, anchors, repeats in runs]) for _ in range(draws))
    return out


def step_accuracy(predicted: Sequence[float], costs: Sequence[Sequence[float]], anchor_predicted: Sequence[float],
                  anchor_costs: Sequence[Sequence[float]]) -> RoundCalibration:
    """Per-round calibration of one number per plan (e.g. a TorchRec training step's ms, `planner.costs.runtime_model`):
    `predicted[i]` and the measured `costs[i][round]` of the evaluation's plans, the same of the anchors. A
    round's factor ({"cost": f}) is the median over the anchors measured in it of measured / predicted (1.0
    without one); each measurement is compared with its prediction times its round's factor. `ratio_spread`:
    the MAPE over its floor with the anchors resampled, as `anchor_spread`."""
    out = _step_scored(predicted, costs, anchor_predicted, anchor_costs)
    out.ratio_spread = _resampled(
        len(anchor_costs), lambda pick: _step_scored(predicted, costs, [anchor_predicted[i] for i in pick],
                                                     [anchor_costs[i] for i in pick]), ANCHOR_DRAWS, 0)
    return out


def _step_scored(predicted, costs, anchor_predicted, anchor_costs) -> RoundCalibration:
    """`step_accuracy` without the resampled spread."""
    repeats = max((len(c) for c in costs), default=0)
    factors = []
    for r in range(repeats):
        ratios = [c[r] / p for p, c in zip(anchor_predicted, anchor_costs) if r < len(c) and p > 0]
        factors.append({"cost": float(np.median(ratios)) if ratios else 1.0})
    errs, raw, means_est, means_meas = [], [], [], []
    for p, c in zip(predicted, costs):
        moved = [p * factors[r]["cost"] for r in range(len(c))]
        errs += [abs(m - x) / x for m, x in zip(moved, c)]
        raw += [abs(p - x) / x for x in c]
        means_est.append(float(np.mean(moved)))
        means_meas.append(float(np.mean(c)))
    return _scored(RoundCalibration(len(anchor_costs), factors, len(errs)), errs, raw, means_est, means_meas, costs)


def _scored(out: RoundCalibration, errs, raw, means_est, means_meas, costs) -> RoundCalibration:
    """`out` with its MAPEs, rank correlation and floors from the per-measurement errors (moved and raw), the
    plans' mean estimates and measurements, and every plan's measurements by round."""
    out.floor, out.floor_mean = round_floors(costs, [f["cost"] for f in out.factors])
    if errs:
        out.mape, out.raw_mape = float(np.mean(errs)), float(np.mean(raw))
        out.mape_mean = mape(means_est, means_meas)
        if len(means_est) > 1:
            out.spearman = spearman(means_est, means_meas)
    return out


def spread_choice(tasks: Sequence[int], k: int) -> list[int]:
    """Indices of `k` records (their task ids in file order) spread over tasks and algorithms: the first anchor
    of every task, then the second, and so on, the n-th task's plans taken from its n-th on (a task's plans are
    one per algorithm, in the same order in every task), so that no one task's tables, nor one algorithm's
    plans, set the round's speed."""
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(tasks):
        groups.setdefault(t, []).append(i)
    rotated = [g[n % len(g):] + g[:n % len(g)] for n, g in enumerate(groups.values())]
    out = []
    for j in range(max((len(g) for g in rotated), default=0)):
        out += [g[j] for g in rotated if j < len(g)]
    return out[:k]


def pick_anchors(path, configs, k: int) -> list[tuple[str, PlanRecord, list]]:
    """`k` plans of the plans file `path` (records that name their tables: step 5e's or eval_simulator.py's
    plans.json, or collect_torchrec_cost_data.py's results.json) spread over its tasks and algorithms
    (`spread_choice`), each as (where: "record N (task T, alg)", the record, the tables it names), so that the
    callers' errors name the record as these do. A record without a plan (a planner that failed) is passed
    over. InputError naming the file and record for a plan without its tables, one that does not fit them, or
    no plan at all."""
    from neuroshard.formats.plan_file import read_plans
    from neuroshard.planner.simulator import validate_plan
    from neuroshard.problem import Problem
    from neuroshard.types.errors import InputError, NeuroShardError
    from neuroshard.types.tables import Task

    planned = [(n, rec) for n, rec in enumerate(read_plans(path)) if rec.plan is not None]
    out = []
    for i in spread_choice([rec.task for _, rec in planned], k):
        n, rec = planned[i]
        where = f"record {n} (task {rec.task}, {rec.alg})"
        if rec.table_ids is None or rec.dims is None:
            raise InputError(path, f"{where}: no table_ids and dims: an anchor runs on the tables its record "
                                   "names (a plans file written before they were recorded?)")
        try:
            tables = Task(rec.table_ids, rec.dims).tables(configs)
            validate_plan(tables, rec.plan, Problem(ndevices=rec.plan.ndevices, max_mem=1e9))
        except (NeuroShardError, IndexError) as e:
            raise InputError(path, f"{where}: not a plan of this dataset's tables: {e}") from None
        out.append((where, rec, tables))
    if not out:
        raise InputError(path, "no plan to take as an anchor")
    return out


def anchor_plans(path, configs, models, problem, k: int) -> list[PlanRecord]:
    """The anchors of `eval.py --round_anchors`: `pick_anchors`' plans estimated under the evaluation's `models`
    and `problem`. InputError naming the file and record for one that does not fit the problem."""
    from neuroshard.planner.simulator import simulate
    from neuroshard.types.errors import InputError, NeuroShardError

    out = []
    for where, rec, tables in pick_anchors(path, configs, k):
        try:
            estimate = simulate(tables, rec.plan, models, problem)
        except NeuroShardError as e:
            raise InputError(path, f"{where}: does not fit the evaluation's problem: {e}") from None
        out.append(replace(rec, estimate=estimate, measured=None, repeat_costs=None))
    return out
