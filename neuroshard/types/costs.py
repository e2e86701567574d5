"""Costs: a plan's per-device breakdown (simulated or measured), its spread, and the models' own error.

Units: times in ms. Every record here is written and read by the one codec
(`types.codec`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import ClassVar

from neuroshard.types.codec import Record, json_field


@dataclass
class RepeatParts(Record):
    """One repeated measurement of a plan, per rank: compute, backward and forward comm (ms), the compute
    iterations' times (ms), the op's build time (s), the start delays of its forward exchange (`skew`, ms),
    when compute is timed by the CPU clock, the kernels' elapsed time (ms), and for a plan with spread tables
    the ms of their forward and backward collectives (`collectives`, per rank [fw, bw], already in the
    exchanges)."""

    compute: list[float]
    bw_comm: list[float]
    fw_comm: list[float]
    compute_iters: list[list[float]] = field(default_factory=list)
    build_s: list[float] = field(default_factory=list)
    compute_wall: list[float] | None = json_field(None, omit_none=True)
    skew: list[float] | None = json_field(None, omit_none=True)
    collectives: list[list[float]] | None = json_field(None, omit_none=True)


@dataclass
class RuntimeEstimate(Record):
    """A plan's cost under a runtime other than the paper's (`planner.costs.runtime_model`): the runtime's
    name, the predicted step ms and each term's share of it (ms)."""

    name: str
    cost: float
    terms: dict[str, float]


@dataclass
class CostSpread(Record):
    """A plan's simulated cost as a distribution (ms; `planner.costs.uncertainty`): its mean (the expected
    measured cost), sd, and 10% / 90% quantiles (the predicted 80% band), over `samples` draws (ensemble
    members x measurement-noise draws)."""

    mean: float
    sd: float
    q10: float
    q90: float
    samples: int


def _fraction(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and 0.0 <= x <= 1.0


@dataclass(frozen=True)
class PlanError(Record):
    """The models' own error on whole plans, beyond the spread they predict: the relative sd of a plan-level
    term that brings the predicted 80% band to 80% of TRAINING tasks' measured plans (`eval.onpolicy.
    plan_error`, `uncertainty.calibrate_plan_sd`), after dividing out the machine's `speed` at the time (the
    median measured / expected cost); the share of those `measurements` inside the band before and after.
    `rank`: the relative sd of the compute model's error on one rank's shard that the plan's other ranks do
    not share (`eval.onpolicy.rank_error`, from `ranks` ranks with tables; 0 in records that predate it),
    net of the ranks' own measurement noise, `compute_noise` (the relative sd of one measurement of a rank's
    compute that the plan's other ranks do not share, from plans measured twice; 0 without them): the
    predicted spread draws it for every rank on its own (`uncertainty.cost_samples`). `compute_common`: the
    part of that noise the plan's ranks share (None without plans measured twice); with `compute_noise` it
    is the plan job's noise of one compute measurement (`compute_sd`), reported beside the collection's
    noise floor that the spread draws."""

    measurements: int
    sd: float
    coverage_before: float
    coverage_after: float
    speed: float = 1.0
    rank: float = 0.0
    ranks: int = 0
    compute_noise: float = 0.0
    compute_common: float | None = json_field(None, omit_none=True)

    INVALID: ClassVar[str] = ("must hold \"sd\", \"coverage_before\", \"coverage_after\" in [0, 1], \"speed\" > 0 "
                              "and \"measurements\" >= 1 (and \"rank\", \"compute_noise\", \"compute_common\" in "
                              "[0, 1], \"ranks\" >= 0 if given)")

    def __post_init__(self):
        fractions = [self.sd, self.coverage_before, self.coverage_after, self.rank, self.compute_noise]
        if self.compute_common is not None:
            fractions.append(self.compute_common)
        counts = (self.measurements, self.ranks)
        if (any(isinstance(x, bool) or not isinstance(x, int) for x in counts) or self.measurements < 1
                or self.ranks < 0 or not all(_fraction(x) for x in fractions)
                or not isinstance(self.speed, numbers.Real) or isinstance(self.speed, bool)
                or not 0.0 < self.speed < math.inf):
            raise ValueError(self.INVALID)

    @property
    def compute_sd(self) -> float | None:
        """The relative sd of one compute measurement of a plan's rank (own and shared parts), None when the
        record does not hold both (no plans measured twice, or written before the shared part was measured)."""
        return None if self.compute_common is None else math.hypot(self.compute_noise, self.compute_common)

    @classmethod
    def from_json(cls, d) -> "PlanError":
        """ValueError (its message says what a valid one holds) unless `d` holds "measurements" >= 1, "sd" and
        both coverages in [0, 1] and "speed" > 0, and, if present, "rank", "compute_noise" and "compute_common"
        in [0, 1] and "ranks" >= 0."""
        return _checked(cls, d)


@dataclass(frozen=True)
class RankNoise(Record):
    """How one measurement of a rank's total splits into noise of its own and noise shared by the plan's
    ranks (relative sds, fractions; `eval.power.rank_noise`, from `plans` plans measured twice)."""

    plans: int
    independent_sd: float
    common_sd: float

    INVALID: ClassVar[str] = "must hold sds \"independent_sd\", \"common_sd\" in [0, 10) and \"plans\" >= 1"

    def __post_init__(self):
        if (isinstance(self.plans, bool) or not isinstance(self.plans, int) or self.plans < 1
                or not all(isinstance(x, numbers.Real) and 0.0 <= x < 10.0
                           for x in (self.independent_sd, self.common_sd))):
            raise ValueError(self.INVALID)

    @property
    def shared(self) -> float:
        """The share of a rank's noise variance the plan's ranks have in common (`uncertainty.NoiseModel`)."""
        total = self.independent_sd ** 2 + self.common_sd ** 2
        return self.common_sd ** 2 / total if total > 0 else 0.0

    @classmethod
    def from_json(cls, d) -> "RankNoise":
        """ValueError (its message says what a valid one holds) unless `d` holds "plans" >= 1 and both sds in
        [0, 10)."""
        return _checked(cls, d)


def _checked(cls, d):
    """`cls.from_json` by the codec, any malformation reported as the class's `INVALID` message."""
    try:
        return Record.from_json.__func__(cls, d)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ValueError(cls.INVALID) from None


@dataclass
class CostBreakdown(Record):
    """Per-device costs in ms of one plan: compute, backward comm, forward comm, and what they came from.

    Simulated (`planner.simulator.simulate`): `dims` (per-device dim sums),
    `skew` (compute + bw minus the smallest, the forward wait the models
    were given) and `mem_gb`. Measured (the mean of a plan's repeated
    measurements): `dims`, `skew`, `ntables`, `fw_comm_nosleep` (the forward
    all-to-all with all ranks starting together) and each repeat's parts
    (`repeats`). With cost models that are ensembles or that know their
    measurement noise, the simulator also gives each member's plan cost
    (`member_costs`) and the plan's cost distribution (`spread`). The plan's
    cost is `cost`, the largest per-device total: computed here and nowhere
    else; or, simulated under another runtime (`runtime`, e.g. TorchRec's,
    where `compute` is each device's kernels and the exchanges are in the
    runtime's terms), that runtime's estimate. `collectives`: per device the
    (forward, backward) ms of a plan's row-wise and data-parallel tables'
    collectives, already in `fw_comm` and `bw_comm` (None without them).
    """

    compute: list[float]
    bw_comm: list[float]
    fw_comm: list[float]
    dims: list[int] | None = json_field(None, omit_none=True)
    skew: list[float] | None = json_field(None, omit_none=True)
    mem_gb: list[float] | None = json_field(None, omit_none=True)
    ntables: list[int] | None = json_field(None, omit_none=True)
    fw_comm_nosleep: list[float] | None = json_field(None, omit_none=True)
    repeats: list[RepeatParts] | None = json_field(None, omit_none=True)
    member_costs: list[float] | None = json_field(None, omit_none=True)
    spread: CostSpread | None = json_field(None, omit_none=True)
    runtime: RuntimeEstimate | None = json_field(None, omit_none=True)
    collectives: list[list[float]] | None = json_field(None, omit_none=True)

    @property
    def cost_sd(self) -> float | None:
        """The spread (sd) of the ensemble members' plan costs (ms); None for a single model or a measurement."""
        if not self.member_costs or len(self.member_costs) < 2:
            return None
        m = sum(self.member_costs) / len(self.member_costs)
        return math.sqrt(sum((c - m) ** 2 for c in self.member_costs) / (len(self.member_costs) - 1))

    @property
    def total(self) -> list[float]:
        return [c + b + f for c, b, f in zip(self.compute, self.bw_comm, self.fw_comm)]

    @property
    def cost(self) -> float:
        """Plan cost (ms): the largest per-device total, or the runtime's estimate."""
        return self.runtime.cost if self.runtime is not None else max(self.total)

    def json_extra(self) -> dict:
        return {"total": self.total, "cost": self.cost}
