"""The comparison across algorithms, as typed records (`Summary`).

One summary for both evaluations: `eval_simulator.py` compares the simulated
cost of each plan record, `eval.py` the measured cost beside the simulated
one (and, in end-to-end mode, the end-to-end step). `Summary.to_json` is
`summary.json` (its keys are the format, kept compatible) and
`Summary.from_json` reads it back for the report. The simulator's accuracy
a hardware summary carries is `eval.accuracy`'s. Costs in ms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from neuroshard.eval.accuracy import Accuracy, finite_or_none, median_or_none, simulator_accuracy
from neuroshard.eval.intervals import (
    Interval,
    mean_interval,
    paired_difference,
    powered_difference,
    verdict,
)
from neuroshard.eval.power import (
    Components,
    Headroom,
    components,
    selection_headroom,
)
from neuroshard.types.codec import Record
from neuroshard.types.records import PlanRecord

REFERENCE_ALG = "neuroshard"
# the costs a summary can compare: the record attribute, and the suffix of its columns beside the measured cost
COSTS = {"estimated_cost": "estimated", "cost": "", "e2e_cost": "e2e"}


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


# --------------------------------------------------------------------------- records


@dataclass
class VsReference:
    """The reference's paired difference with an algorithm (ms, other − reference, with its interval), the
    verdict that interval supports, the interval of the relative gain and, for repeated measurements, the
    power of the comparison (`power.Components`: its task and repeat noise; `mdd`: the smallest relative
    difference it detects at 95% with 80% power). Prediction-powered (`intervals.powered_difference`, with
    the simulator's estimates on unmeasured tasks): `diff_ms` and the verdict are the powered ones, `plain`
    the paired difference of the measurements alone and `weight` the predictions' weight."""

    diff_ms: Interval
    verdict: str
    gain_ci: list[float] | None
    power: Components | None = None
    plain: Interval | None = None
    weight: float | None = None

    @property
    def mdd(self) -> float | None:
        return None if self.power is None else self.power.mdd()

    def to_json(self) -> dict:
        d = {"diff_ms": self.diff_ms.to_json(), "verdict": self.verdict, "gain_ci": self.gain_ci}
        if self.power is not None:
            d["power"] = {**self.power.to_json(), "mdd": self.mdd}
        if self.plain is not None:
            d.update(plain_diff_ms=self.plain.to_json(), weight=self.weight)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "VsReference":
        p = d.get("power")
        power = None if p is None else Components(**{k: v for k, v in p.items() if k != "mdd"})
        plain = d.get("plain_diff_ms")
        return cls(Interval(**d["diff_ms"]), d["verdict"], d.get("gain_ci"), power,
                   None if plain is None else Interval(**plain), d.get("weight"))


@dataclass
class OtherCost:
    """An algorithm's figures for another cost of the same plans (the simulator's estimate of measured
    plans, or their end-to-end step): mean over its valid tasks, over the common tasks, rank, gain."""

    average: float | None
    mean_common: float | None
    rank: int | None
    neuroshard_gain: float | None

    KEYS = ("average", "mean_common", "rank", "neuroshard_gain")


@dataclass
class AlgorithmRow:
    """One algorithm's line of the comparison (see `summarize`)."""

    alg: str
    valid: int
    tasks: int
    oom: int
    invalid: int
    average: float | None
    mean_common: float | None
    median_search_ms: float | None
    mean_search_ms: float | None
    mean_splits: float | None
    rank: int | None = None
    mean_common_ci: list[float] | None = None
    neuroshard_gain: float | None = None
    vs_reference: VsReference | None = None
    estimated: OtherCost | None = None
    e2e: OtherCost | None = None

    @property
    def verdict(self) -> str | None:
        return None if self.vs_reference is None else self.vs_reference.verdict

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in ("alg", "valid", "tasks", "oom", "invalid", "average", "mean_common",
                                           "median_search_ms", "mean_search_ms", "mean_splits")}
        for k in ("rank", "mean_common_ci", "neuroshard_gain"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.vs_reference is not None:
            d["vs_reference"] = self.vs_reference.to_json()
        for suffix in ("estimated", "e2e"):
            other = getattr(self, suffix)
            if other is not None:
                d.update({f"{k}_{suffix}": getattr(other, k) for k in OtherCost.KEYS})
        return d

    @classmethod
    def from_json(cls, d: dict) -> "AlgorithmRow":
        others = {s: OtherCost(*(d.get(f"{k}_{s}") for k in OtherCost.KEYS)) if f"average_{s}" in d else None
                  for s in ("estimated", "e2e")}
        vs = d.get("vs_reference")
        return cls(d["alg"], d["valid"], d["tasks"], d["oom"], d["invalid"], d.get("average"), d.get("mean_common"),
                   d.get("median_search_ms"), d.get("mean_search_ms"), d.get("mean_splits"), d.get("rank"),
                   d.get("mean_common_ci"), d.get("neuroshard_gain"),
                   None if vs is None else VsReference.from_json(vs), others["estimated"], others["e2e"])


@dataclass
class E2EVsParts(Record):
    """The end-to-end step against the sum-of-parts cost of the same plans: mean ratio and Spearman."""

    plans: int
    mean_ratio: float
    spearman: float | None


@dataclass
class HardwareRun:
    """How the hardware evaluation ran: its settings (`HardwareConfig.to_json()`), the measurements made now
    and by an earlier, interrupted run, and the wall time of the job (s): all, to the first result, per plan."""

    config: dict
    measurements: int
    measurements_resumed: int
    job_s: float
    first_plan_s: float | None
    per_plan_s: float | None

    STATS = ("measurements", "measurements_resumed", "job_s", "first_plan_s", "per_plan_s")

    def to_json(self) -> dict:
        return {**self.config, **{k: getattr(self, k) for k in self.STATS}}

    @classmethod
    def from_json(cls, d: dict) -> "HardwareRun":
        return cls({k: v for k, v in d.items() if k not in cls.STATS}, *(d.get(k) for k in cls.STATS))


@dataclass
class Summary:
    """An evaluation's comparison (`summary.json`): per algorithm its row; the ranking by the common-task
    mean; the reference's verdict against each algorithm. A hardware evaluation adds the simulator's
    ranking of the same plans and its accuracy, the end-to-end figures when measured, and how it ran."""

    tasks: int
    common_tasks: int
    cost: str
    reference: str
    algorithms: list[AlgorithmRow]
    ranking: list[str]
    neuroshard_beats: dict[str, bool]
    verdicts: dict[str, str]
    simulator_ranking: list[str] | None = None
    neuroshard_beats_every_greedy: bool | None = None
    simulator_accuracy: Accuracy | None = None
    e2e_ranking: list[str] | None = None
    simulator_accuracy_e2e: Accuracy | None = None
    e2e_vs_parts: E2EVsParts | None = None
    hardware: HardwareRun | None = None
    headroom: Headroom | None = None  # a choice among these plans by their repeated costs (eval/power.py)

    @property
    def is_hardware(self) -> bool:
        """True for a summary of measured plans."""
        return self.simulator_accuracy is not None

    def row(self, alg: str) -> AlgorithmRow | None:
        return next((r for r in self.algorithms if r.alg == alg), None)

    def to_json(self) -> dict:
        d = {"tasks": self.tasks, "common_tasks": self.common_tasks, "cost": self.cost, "reference": self.reference,
             "algorithms": [r.to_json() for r in self.algorithms], "ranking": self.ranking,
             "neuroshard_beats": self.neuroshard_beats, "verdicts": self.verdicts}
        if self.is_hardware:
            d.update(simulator_ranking=self.simulator_ranking,
                     neuroshard_beats_every_greedy=self.neuroshard_beats_every_greedy,
                     simulator_accuracy=self.simulator_accuracy.to_json())
        if self.e2e_ranking is not None:
            d.update(e2e_ranking=self.e2e_ranking, simulator_accuracy_e2e=self.simulator_accuracy_e2e.to_json())
        if self.e2e_vs_parts is not None:
            d["e2e_vs_parts"] = self.e2e_vs_parts.to_json()
        if self.hardware is not None:
            d["hardware"] = self.hardware.to_json()
        if self.headroom is not None:
            d["headroom"] = self.headroom.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Summary":
        def opt(key, parse):
            return None if d.get(key) is None else parse(d[key])

        return cls(d["tasks"], d["common_tasks"], d["cost"], d.get("reference", REFERENCE_ALG),
                   [AlgorithmRow.from_json(r) for r in d["algorithms"]], d["ranking"], d.get("neuroshard_beats", {}),
                   d.get("verdicts", {}), d.get("simulator_ranking"), d.get("neuroshard_beats_every_greedy"),
                   opt("simulator_accuracy", Accuracy.from_json), d.get("e2e_ranking"),
                   opt("simulator_accuracy_e2e", Accuracy.from_json), opt("e2e_vs_parts", E2EVsParts.from_json),
                   opt("hardware", HardwareRun.from_json), opt("headroom", lambda h: Headroom(**h)))


# --------------------------------------------------------------------------- the comparison


def summarize(records: Sequence[PlanRecord], algs: Sequence[str], num_tasks: int,
              cost_key: str = "estimated_cost", reference: str = REFERENCE_ALG,
              unmeasured: Sequence[PlanRecord] | None = None) -> Summary:
    """The comparison table: per algorithm, upstream's Average and Valid v / N, and the fair comparison.

    `cost_key`: the record attribute compared ("estimated_cost", "cost" for
    the measured cost, "e2e_cost"). `average`: mean cost over the tasks
    where that algorithm's plan is valid (upstream's Average); `mean_common`:
    mean over the tasks valid for every algorithm that planned any (one that
    planned none, such as a table-wise sharder on tasks with a table larger
    than a device, shows as 0 valid and leaves the comparison to the others); `rank`: order of
    `mean_common` (1 = cheapest); `neuroshard_gain`: the reference's relative
    improvement over that algorithm on the common tasks, `(alg - neuroshard)
    / alg` (a fraction); search times in ms. `headroom`: what a choice among the algorithms' plans by
    their repeated costs gains over the reference's (`power.selection_headroom`; None without repeats).
    `unmeasured`: plan records of other tasks from the same generator with the simulator's estimates only;
    with them the measured cost's gains, intervals and verdicts are prediction-powered
    (`intervals.powered_difference`).
    """
    def cost(r):
        return getattr(r, cost_key)

    by_alg = {a: {r.task: r for r in records if r.alg == a} for a in algs}
    valid = {a: {t for t, r in rs.items() if cost(r) is not None} for a, rs in by_alg.items()}
    planning = [v for v in valid.values() if v]
    common = sorted(set.intersection(*planning)) if planning else []
    rows = []
    for a in algs:
        rs = by_alg[a]
        ok = [rs[t] for t in sorted(valid[a])]
        rows.append(AlgorithmRow(
            alg=a, valid=len(ok), tasks=num_tasks, oom=sum(1 for r in rs.values() if r.status == "oom"),
            invalid=sum(1 for r in rs.values() if r.status == "invalid"), average=_mean(cost(r) for r in ok),
            mean_common=_mean(cost(rs[t]) for t in common) if ok else None,
            median_search_ms=median_or_none(r.search_ms for r in rs.values()),
            mean_search_ms=_mean(r.search_ms for r in rs.values()), mean_splits=_mean(r.num_splits for r in ok)))
    # the simulator's estimates of the unmeasured tasks' plans, by (algorithm, task): the measured cost's predictions
    predicted = {(r.alg, r.task): r.estimated_cost for r in unmeasured or () if r.estimated_cost is not None} \
        if cost_key == "cost" else {}
    ranked = sorted((r for r in rows if r.mean_common is not None), key=lambda r: r.mean_common)
    for i, r in enumerate(ranked):
        r.rank = i + 1
    ref = next((r for r in rows if r.alg == reference), None)
    beats, verdicts = {}, {}
    matrices: dict[str, list[list[float]]] = {}  # costs[task][repeat] on the common tasks, per algorithm
    if common:
        ref_costs = _repeat_matrix([by_alg[reference][t] for t in common], cost_key) if ref else None
        for r in rows:
            if not r.valid:  # planned none: nothing to compare
                continue
            costs = matrices[r.alg] = _repeat_matrix([by_alg[r.alg][t] for t in common], cost_key)
            iv = mean_interval(costs)
            r.mean_common_ci = [iv.lo, iv.hi]
            if ref is None:
                continue
            if r.mean_common:
                r.neuroshard_gain = (r.mean_common - ref.mean_common) / abs(r.mean_common)
            if r.alg != reference:
                a, b = _same_repeats(ref_costs, costs)
                plain = paired_difference(a, b)
                pred = _predictions(by_alg, common, reference, r.alg, predicted)
                diff, weight = powered_difference(a, b, *pred[0]) if pred else (plain, None)
                if pred and r.mean_common:  # the powered estimate of the same gain
                    r.neuroshard_gain = diff.mean / abs(r.mean_common)
                verdicts[r.alg] = verdict(diff)
                beats[r.alg] = verdicts[r.alg] == "beats"
                r.vs_reference = VsReference(diff, verdicts[r.alg], [diff.lo / abs(r.mean_common),
                                                                     diff.hi / abs(r.mean_common)]
                                             if r.mean_common else None,
                                             components(a, b, pred[1] if pred else None),
                                             plain if pred else None, weight)
    return Summary(tasks=num_tasks, common_tasks=len(common), cost=cost_key, reference=reference, algorithms=rows,
                   ranking=[r.alg for r in ranked], neuroshard_beats=beats, verdicts=verdicts,
                   headroom=_headroom(matrices, reference))


def _predictions(by_alg: dict, common: Sequence[int], reference: str, alg: str,
                 est: dict[tuple[str, int], float]) -> tuple[tuple, tuple] | None:
    """The simulator's predicted differences alg - reference: ((ms on the common measured tasks, ms on the
    unmeasured tasks where both have an estimate in `est`), (the same relative to the reference's estimate));
    None without unmeasured estimates or when a measured plan has no estimate."""
    if not est:
        return None
    other = sorted(t for (a, t) in est if a == reference and (alg, t) in est)
    measured = [(by_alg[alg][t].estimated_cost, by_alg[reference][t].estimated_cost) for t in common]
    if not other or any(o is None or ref is None for o, ref in measured):
        return None
    f = np.array([o - ref for o, ref in measured])
    f_ref = np.array([ref for _, ref in measured])
    g_ref = np.array([est[reference, t] for t in other])
    g = np.array([est[alg, t] for t in other]) - g_ref
    return (f, g), (f / f_ref, g / g_ref)


def _headroom(matrices: dict[str, list[list[float]]], reference: str) -> Headroom | None:
    """`power.selection_headroom` of the algorithms' cost matrices (the reference's first); None without the
    reference or when the plans were not all measured the same number of rounds (`_repeat_matrix` then gives
    an algorithm's task means, or the algorithms differ in rounds)."""
    if reference not in matrices:
        return None
    ordered = [matrices[reference], *(m for a, m in matrices.items() if a != reference)]
    if len({np.shape(m) for m in ordered}) > 1:
        return None
    return selection_headroom(ordered)


def _repeat_matrix(records: Sequence[PlanRecord], cost_key: str) -> list[list[float]]:
    """costs[task][repeat] of records (one per task); tasks with another repeat count than the
    first (an evaluation merged from runs with different --repeats) enter with their mean."""
    rows = [r.costs(cost_key) for r in records]
    if len({len(x) for x in rows}) > 1:
        rows = [[float(np.mean(x))] for x in rows]
    return rows


def _same_repeats(a: list, b: list) -> tuple[list, list]:
    """Pair two cost matrices repeat by repeat; if their repeat counts differ, task means."""
    if len(a[0]) != len(b[0]):
        return [[float(np.mean(x))] for x in a], [[float(np.mean(x))] for x in b]
    return a, b


def hardware_summary(records: Sequence[PlanRecord], algs: Sequence[str], num_tasks: int,
                     unmeasured: Sequence[PlanRecord] | None = None) -> Summary:
    """The comparison across algorithms on measured costs, beside the simulator's, and its accuracy.

    The table is `summarize`'s on the measured cost (its verdicts prediction-powered by the estimates of
    `unmeasured` plan records, when given); each row adds the same
    figures for the simulator's estimate of the same plans (`estimated`)
    and, in end-to-end mode, for the end-to-end step (`e2e`).
    """
    from neuroshard.train.metrics import spearman

    hw = summarize(records, algs, num_tasks, cost_key="cost", unmeasured=unmeasured)
    sim = summarize(records, algs, num_tasks, cost_key="estimated_cost")
    e2e = any(r.e2e_cost is not None for r in records)
    e2e_sum = summarize(records, algs, num_tasks, cost_key="e2e_cost") if e2e else None
    for k, row in enumerate(hw.algorithms):
        for suffix, other in (("estimated", sim), ("e2e", e2e_sum)):
            if other is not None:
                o = other.algorithms[k]
                setattr(row, suffix, OtherCost(o.average, o.mean_common, o.rank, o.neuroshard_gain))
    greedy = {a: b for a, b in hw.neuroshard_beats.items() if a.endswith("_greedy")}
    hw.simulator_ranking = sim.ranking
    hw.neuroshard_beats_every_greedy = all(greedy.values()) if greedy else None
    hw.simulator_accuracy = simulator_accuracy(records)
    if e2e:
        hw.e2e_ranking = e2e_sum.ranking
        hw.simulator_accuracy_e2e = simulator_accuracy(records, "e2e_cost")
        pairs = [(r.e2e_cost, r.cost) for r in records if r.e2e_cost is not None and r.cost is not None]
        if pairs:
            e, c = np.array(pairs).T
            hw.e2e_vs_parts = E2EVsParts(len(pairs), float(np.mean(e / c)), finite_or_none(spearman(e, c)))
    return hw
