"""Records of plans: one algorithm's plan for one task with its simulated and measured costs, and what a
hardware measurement of a plan reports.

Units: times in ms. Written and read by the one codec (`types.codec`); the
plans and results files (`formats.plan_file`) are lists of `PlanRecord`s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from neuroshard.types.codec import Record, json_field
from neuroshard.types.costs import CostBreakdown, RepeatParts
from neuroshard.types.plan import Plan
from neuroshard.types.tables import ShardTable


@dataclass
class EndToEnd(Record):
    """The end-to-end step of a measured plan (ms): every rank's median step, the slowest rank's step per
    iteration, and the plan's end-to-end cost (the median of `iters`; once a plan's repeats are merged,
    their mean, with each repeat's cost in `repeat_costs`)."""

    per_rank: list[float]
    iters: list[float]
    cost: float
    repeat_costs: list[float] | None = json_field(None, omit_none=True)


@dataclass
class PlanMeasurement(Record):
    """One measurement of one plan on hardware, as the plan-measurement job reports it (`measure.plan_job`).

    `index`: the plan's position in the job; per rank: `dims` (dim sum),
    `ntables`, `compute` (forward + backward kernels, the ranks taking
    turns), `bw_comm`, `fw_comm` (with each rank delayed by its `skew`),
    `fw_comm_nosleep` (all ranks starting together), `compute_iters` (each
    timed iteration) in ms, `build_s` (the op's construction) in s; `e2e`:
    the real step sequence, when asked; `compute_wall`: the kernels' elapsed
    ms (median) when compute is timed by the CPU clock; `collectives`: per
    rank the ms of the spread tables' forward (reduce-scatter) and backward
    (all-gather, all-reduce) collectives, already in `fw_comm` and `bw_comm`
    (None for a plan without spread tables). The plan's cost is its
    breakdown's.
    """

    index: int = json_field(key="i")
    task: int = json_field()
    alg: str = json_field()
    dims: list[int] = json_field()
    ntables: list[int] = json_field()
    compute: list[float] = json_field()
    bw_comm: list[float] = json_field()
    fw_comm: list[float] = json_field()
    fw_comm_nosleep: list[float] = json_field()
    skew: list[float] = json_field()
    compute_iters: list[list[float]] = json_field(default_factory=list)
    build_s: list[float] = json_field(default_factory=list)
    e2e: EndToEnd | None = json_field(None, omit_none=True)
    compute_wall: list[float] | None = json_field(None, omit_none=True)
    collectives: list[list[float]] | None = json_field(None, omit_none=True)

    def parts(self) -> RepeatParts:
        return RepeatParts(self.compute, self.bw_comm, self.fw_comm, self.compute_iters, self.build_s,
                           self.compute_wall, self.skew, self.collectives)

    def breakdown(self) -> CostBreakdown:
        return CostBreakdown(self.compute, self.bw_comm, self.fw_comm, dims=self.dims, skew=self.skew,
                             ntables=self.ntables, fw_comm_nosleep=self.fw_comm_nosleep, repeats=[self.parts()])

    @property
    def cost(self) -> float:
        return self.breakdown().cost


@dataclass
class RefineCandidate(Record):
    """A candidate plan of `--refine`: where it came from, its simulated cost and its measured costs (ms)."""

    source: str
    estimated_cost: float | None
    measured_costs: list[float] | None


@dataclass
class RefineRecord(Record):
    """How `--refine` chose a plan (`eval.refine`): the candidates measured, the index of the one kept (the
    lowest mean measured cost) and the seconds it took (part of the record's `search_ms`)."""

    candidates: list[RefineCandidate]
    chosen: int
    seconds: float


PLAN_STATUSES = ("ok", "oom", "invalid")


def task_identity(tables: Sequence[ShardTable]) -> dict[str, tuple[int, ...]]:
    """What identifies a plan's task, as `PlanRecord` keeps it: the tables' dataset ids and dims (before splits)."""
    return {"table_ids": tuple(t.table_id for t in tables), "dims": tuple(t.dim for t in tables)}


@dataclass
class PlanRecord(Record):
    """One algorithm's plan for one task, with its simulated and (after eval.py) measured cost.

    `status`: "ok"; "oom" (no plan fits the memory cap, or the sharder returned
    one that does not fit); "invalid" (a plan that breaks the rules). Both
    non-ok statuses count as invalid tasks (upstream's `Valid v / N`) and have
    `plan` None and a `message`. `estimate`: the simulator's per-device
    breakdown; `search_ms`: wall time of the sharder call; `view`: the readable
    per-table view (`formats.plan_file.plan_view`); `table_ids` and `dims`: what
    identifies the task the plan is for (its dataset table ids and dims, in task
    order; None in plans files that predate them), checked by every reader that
    applies the plan (`formats.plan_file.check_plan_tables`). Hardware evaluation
    adds `measured` (the per-rank breakdown, averaged over repeats) with
    `repeat_costs` (the plan cost of each repeated measurement) and, in
    end-to-end mode, `e2e`. Costs in ms.
    """

    task: int
    alg: str
    status: str = "ok"
    message: str | None = None
    plan: Plan | None = None
    estimate: CostBreakdown | None = None
    search_ms: float | None = None
    num_tables: int | None = None
    view: list | None = None
    measured: CostBreakdown | None = json_field(None, omit_none=True)
    e2e: EndToEnd | None = json_field(None, omit_none=True)
    repeat_costs: list[float] | None = json_field(None, omit_none=True)
    refine: RefineRecord | None = json_field(None, omit_none=True)
    table_ids: tuple[int, ...] | None = json_field(None, omit_none=True)
    dims: tuple[int, ...] | None = json_field(None, omit_none=True)

    @property
    def estimated_cost(self) -> float | None:
        return None if self.estimate is None else self.estimate.cost

    @property
    def cost(self) -> float | None:
        """The measured plan cost (None when not measured): the mean over repeated measurements."""
        if self.repeat_costs:
            return sum(self.repeat_costs) / len(self.repeat_costs)
        return None if self.measured is None else self.measured.cost

    def costs(self, key: str) -> list[float] | None:
        """The repeats of a cost ("cost": each measurement's plan cost; "e2e_cost"; "estimated_cost",
        deterministic: one value), or None when there is none."""
        if key == "cost" and self.repeat_costs:
            return list(self.repeat_costs)
        if key == "e2e_cost" and self.e2e is not None and self.e2e.repeat_costs:
            return list(self.e2e.repeat_costs)
        value = getattr(self, key)
        return None if value is None else [value]

    @property
    def e2e_cost(self) -> float | None:
        return None if self.e2e is None else self.e2e.cost

    @property
    def num_splits(self) -> int | None:
        return None if self.plan is None else len(self.plan.column_steps)

    @property
    def plan_key(self) -> str | None:
        """Equal for equal plans (compact JSON of the plan)."""
        return None if self.plan is None else json.dumps(self.plan.to_json(), separators=(",", ":"))

    def json_extra(self) -> dict:
        extra = {"estimated_cost": self.estimated_cost, "num_splits": self.num_splits}
        if self.measured is not None:
            extra.update(cost=self.cost, plan_key=self.plan_key)
        if self.e2e is not None:
            extra["e2e_cost"] = self.e2e_cost
        return extra

    def to_json(self, view: bool = True, measured: bool = False) -> dict:
        """The record as written to plans.json / results.json, derived costs included for readers. `view`:
        with the per-table view; `measured`: a record of a hardware evaluation, with "cost" and "plan_key"
        even when not run."""
        d = super().to_json()
        if not view:
            del d["view"]
        if measured and "cost" not in d:
            d.update(cost=self.cost, plan_key=self.plan_key)
        return d
