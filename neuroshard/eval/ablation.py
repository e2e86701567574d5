"""The cost-model ablation: search (NeuroShard's / TorchRec's planner) x cost model (the pre-trained neural
models / TorchRec's estimator fitted to the same cost data), each cell's plans measured on hardware.

| search \\ cost model | neural | fitted analytic | TorchRec's defaults |
|---|---|---|---|
| NeuroShard's beam + grid search | `neuroshard` | `neuroshard_fitted` | |
| TorchRec's planner (proposers, partitioner) | `torchrec_neural` | `torchrec_fitted` | `torchrec` |

From the measured plans of the tasks every present cell planned: each cell's mean cost with its interval,
and paired effects, each the relative difference (other - base) / other with the interval of the paired
difference (a positive value: `base` is cheaper): the cost model's, with each search held fixed
(`neuroshard_fitted` against `neuroshard`, `torchrec_fitted` against `torchrec_neural`), the search's, with
each cost model held fixed (`torchrec_neural` against `neuroshard`, `torchrec_fitted` against
`neuroshard_fitted`), and the whole margin over the fitted TorchRec planner (`torchrec_fitted` against
`neuroshard`): how much of NeuroShard's margin the models carry and how much the search.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from neuroshard.eval.intervals import Interval, mean_interval, paired_difference, verdict
from neuroshard.types.codec import Record
from neuroshard.types.records import PlanRecord

CELLS = {"neuroshard": ("NeuroShard's search", "neural"), "neuroshard_fitted": ("NeuroShard's search", "fitted"),
         "torchrec_neural": ("TorchRec's planner", "neural"), "torchrec_fitted": ("TorchRec's planner", "fitted"),
         "torchrec": ("TorchRec's planner", "defaults")}
EFFECTS = (("cost model, NeuroShard's search", "neuroshard", "neuroshard_fitted"),
           ("cost model, TorchRec's planner", "torchrec_neural", "torchrec_fitted"),
           ("search, neural costs", "neuroshard", "torchrec_neural"),
           ("search, fitted costs", "neuroshard_fitted", "torchrec_fitted"),
           ("both: NeuroShard against TorchRec's planner fitted to the same data", "neuroshard", "torchrec_fitted"))


@dataclass
class Effect(Record):
    """`other` against `base` on the same tasks and rounds: the paired difference (ms, other - base), the
    relative gain of `base` (the difference over `other`'s mean) with its interval, and the verdict."""

    name: str
    base: str
    other: str
    diff_ms: Interval
    gain: float
    gain_lo: float
    gain_hi: float
    verdict: str


@dataclass
class Ablation(Record):
    """Each present cell's mean measured cost (`CELLS`) over `tasks` common tasks, and the effects."""

    tasks: int
    cells: dict[str, Interval] = field(default_factory=dict)
    effects: list[Effect] = field(default_factory=list)


def ablation(records: Sequence[PlanRecord], cost_key: str = "cost") -> Ablation | None:
    """The 2 x 2 (module doc) of an evaluation's measured plans; None unless `neuroshard` and at least one
    other cell were measured on common tasks."""
    by_alg: dict[str, dict[int, PlanRecord]] = {}
    for r in records:
        if r.alg in CELLS and r.measured is not None and r.plan is not None:
            by_alg.setdefault(r.alg, {})[r.task] = r
    if "neuroshard" not in by_alg or len(by_alg) < 2:
        return None
    common = sorted(set.intersection(*(set(v) for v in by_alg.values())))
    if not common:
        return None
    repeats = min(len(by_alg[a][t].costs(cost_key)) for a in by_alg for t in common)

    def matrix(alg: str) -> list[list[float]]:
        return [list(by_alg[alg][t].costs(cost_key))[:repeats] for t in common]

    out = Ablation(len(common), {a: mean_interval(matrix(a)) for a in CELLS if a in by_alg})
    for name, base, other in EFFECTS:
        if base not in by_alg or other not in by_alg:
            continue
        diff = paired_difference(matrix(base), matrix(other))
        scale = float(np.mean(matrix(other)))
        out.effects.append(Effect(name, base, other, diff, diff.mean / scale, diff.lo / scale, diff.hi / scale,
                                  verdict(diff)))
    return out
