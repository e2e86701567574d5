"""Shared data types of NeuroShard: table configs, tasks, plans, costs, errors.

Every stage (dataset processing, benchmarks, cost models, simulator, search,
baselines, hardware evaluation) speaks these types; stage modules import this
one and hardly each other. Units: sizes in GB (2**30 bytes), times in ms.
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, NamedTuple, Sequence

NUM_BINS = 17
BYTES_PER_ELEMENT = 4  # fp32 weights
# The locality profile to assume for a table whose access counts are unknown: the aggregate
# "Histogram of col sizes" of the public 2021 DLRM dataset (reference/, first block), i.e. the
# share of distinct rows looked up once, 2 times, 3-4 times, ... in a batch.
DEFAULT_BINS = (0.473, 0.152, 0.139, 0.112, 0.072, 0.032, 0.011, 0.005, 0.002, 0.001) + (0.0,) * 7


def size_gb(row: int, dim: int) -> float:
    """Size in GB of an fp32 embedding table of `row` rows and `dim` columns."""
    return row * dim * BYTES_PER_ELEMENT / 2**30


def dim_set(max_dim: int) -> list[int]:
    """Dims from `max_dim` halving down to 4: 128 -> [128, 64, 32, 16, 8, 4]."""
    if max_dim < 4 or max_dim & (max_dim - 1):
        raise ValueError(f"max_dim must be a power of two >= 4, got {max_dim}")
    dims = []
    d = max_dim
    while d >= 4:
        dims.append(d)
        d //= 2
    return dims


def can_split(dim: int) -> bool:
    """A table can be column-split while its half dim is still a multiple of 4."""
    return dim % 8 == 0


# --------------------------------------------------------------------------- errors


class NeuroShardError(Exception):
    """Base of all errors this package raises on purpose (reported in one line)."""


class InputError(NeuroShardError):
    """Malformed or missing input: names the file, the line (if any) and the value."""

    def __init__(self, path, message: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {message}")


class OutOfMemoryError(NeuroShardError):
    """A table (or a plan) does not fit within the per-device memory cap."""

    def __init__(self, message: str, table: int | None = None, size: float | None = None,
                 max_mem: float | None = None, used: Sequence[float] | None = None):
        self.table = table
        self.size = size
        self.max_mem = max_mem
        self.used = list(used) if used is not None else None
        super().__init__(message)


class InvalidPlanError(NeuroShardError):
    """A plan that breaks the rules: bad indices, tables placed twice or never, illegal splits."""


class ConfigError(NeuroShardError):
    """A bad setting (a flag or a config field): names the setting and the value."""

    def __init__(self, name: str, message: str):
        self.name = name
        super().__init__(f"{name}: {message}")


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class TableConfig:
    """Statistics of one embedding table (one entry of `table_configs.json`).

    `row`: number of rows; `pooling_factor`: mean lookups per sample;
    `bins`: the 17 locality bins (fraction of distinct indices by access
    count); `dim`: the embedding dim, set for augmented/task tables only.
    """

    row: int
    pooling_factor: float
    bins: tuple[float, ...]
    dim: int | None = None

    def __post_init__(self):
        # Every config is checked where it is made (file, generator or library call): a NaN or
        # negative statistic would otherwise come out much later as a NaN cost or a false
        # "out of memory".
        if isinstance(self.row, bool) or not isinstance(self.row, numbers.Integral) or self.row < 1:
            raise ValueError(f"row must be a positive integer, got {self.row!r}")
        if isinstance(self.pooling_factor, bool) or not isinstance(self.pooling_factor, numbers.Real) \
                or not math.isfinite(self.pooling_factor) or self.pooling_factor < 0:
            raise ValueError(f"pooling_factor must be a finite number >= 0, got {self.pooling_factor!r}")
        if len(self.bins) != NUM_BINS:
            raise ValueError(f"expected {NUM_BINS} bins, got {len(self.bins)}")
        for j, b in enumerate(self.bins):
            if isinstance(b, bool) or not isinstance(b, numbers.Real) or not (0.0 <= b <= 1.0):
                raise ValueError(f"bin_{j} must be a fraction in [0, 1], got {b!r}")
        if sum(self.bins) > 1.0 + 1e-3:  # the published stats are rounded to 3 digits
            raise ValueError(f"bins sum to {sum(self.bins):.6g} > 1 (they are fractions of the distinct rows)")
        if self.dim is not None and (isinstance(self.dim, bool) or not isinstance(self.dim, numbers.Integral)
                                     or self.dim <= 0 or self.dim % 4):
            raise ValueError(f"dim must be a positive multiple of 4, got {self.dim!r}")

    def with_dim(self, dim: int) -> "TableConfig":
        return replace(self, dim=dim)

    @property
    def size_gb(self) -> float:
        if self.dim is None:
            raise ValueError("table has no dim")
        return size_gb(self.row, self.dim)

    def to_json(self) -> dict:
        d = {"row": self.row, "pooling_factor": self.pooling_factor}
        d.update({f"bin_{j}": b for j, b in enumerate(self.bins)})
        if self.dim is not None:
            d["dim"] = self.dim
        return d

    @classmethod
    def from_json(cls, d: dict) -> "TableConfig":
        """Build from a JSON object; raises KeyError/TypeError/ValueError on bad fields."""
        row = d["row"]
        if isinstance(row, float) and row == int(row):
            row = int(row)  # 1000.0 is a row count written by a tool that only knows floats
        return cls(row, d["pooling_factor"], tuple(d[f"bin_{j}"] for j in range(NUM_BINS)), d.get("dim"))


@dataclass(frozen=True)
class Task:
    """A sharding task: dataset table ids (may repeat) and the dim chosen for each."""

    table_ids: tuple[int, ...]
    dims: tuple[int, ...]

    def __post_init__(self):
        if len(self.table_ids) != len(self.dims):
            raise ValueError("table_ids and dims differ in length")

    def __len__(self) -> int:
        return len(self.table_ids)

    def tables(self, configs: Sequence[TableConfig]) -> list["ShardTable"]:
        """The task's tables as `ShardTable`s (before any column split)."""
        return [ShardTable(i, tid, configs[tid].with_dim(d))
                for i, (tid, d) in enumerate(zip(self.table_ids, self.dims))]


@dataclass(frozen=True)
class ShardTable:
    """A (possibly column-split) table of a task.

    `origin`: index of the task table it comes from; `table_id`: dataset table
    whose lookups it uses; `config`: statistics with the (split) dim.
    """

    origin: int
    table_id: int
    config: TableConfig

    @property
    def dim(self) -> int:
        return self.config.dim

    @property
    def size_gb(self) -> float:
        return self.config.size_gb


def apply_column_steps(tables: Sequence[ShardTable], column_steps: Sequence[int]) -> list[ShardTable]:
    """Apply column-wise splits: step i halves table i and appends its other half.

    Raises InvalidPlanError on an index out of range or a dim that cannot be split.
    """
    out = list(tables)
    for i in column_steps:
        if not 0 <= i < len(out):
            raise InvalidPlanError(f"column step {i} out of range (0..{len(out) - 1})")
        t = out[i]
        if not can_split(t.dim):
            raise InvalidPlanError(f"column step {i}: dim {t.dim} cannot be halved into a multiple of 4")
        half = replace(t, config=t.config.with_dim(t.dim // 2))
        out[i] = half
        out.append(half)
    return out


def column_offsets(tables: Sequence[ShardTable], column_steps: Sequence[int]) -> list[int]:
    """The first column, within its original table, of each post-split table.

    Step i keeps columns [offset, offset + dim/2) in table i and appends the
    other half [offset + dim/2, offset + dim). Raises InvalidPlanError like
    `apply_column_steps`.
    """
    apply_column_steps(tables, column_steps)  # validates the steps
    dims = [t.dim for t in tables]
    offsets = [0] * len(tables)
    for i in column_steps:
        dims[i] //= 2
        dims.append(dims[i])
        offsets.append(offsets[i] + dims[i])
    return offsets


# --------------------------------------------------------------------------- plans and costs


@dataclass(frozen=True)
class Plan:
    """A sharding plan: column-wise splits, then the (post-split) tables on each device."""

    column_steps: tuple[int, ...]
    shards: tuple[tuple[int, ...], ...]

    @property
    def ndevices(self) -> int:
        return len(self.shards)

    def to_json(self) -> dict:
        return {"column_steps": list(self.column_steps), "shards": [list(s) for s in self.shards]}

    @classmethod
    def from_json(cls, d: dict) -> "Plan":
        return cls(tuple(int(i) for i in d["column_steps"]),
                   tuple(tuple(int(i) for i in s) for s in d["shards"]))


def table_devices(plan: Plan, num_tables: int) -> list[int]:
    """The device of each of the `num_tables` post-split tables of `plan`: the one check that every table
    index is an integer in range placed on exactly one device (InvalidPlanError naming the first that is not)."""
    owner: dict[int, int] = {}
    for r, shard in enumerate(plan.shards):
        for i in shard:
            if isinstance(i, bool) or not isinstance(i, numbers.Integral):
                raise InvalidPlanError(f"device {r}: table index {i!r} is not an integer")
            if not 0 <= i < num_tables:
                raise InvalidPlanError(f"device {r}: table {i} out of range (0..{num_tables - 1})")
            if i in owner:
                where = f"twice on device {r}" if owner[i] == r else f"on devices {owner[i]} and {r}"
                raise InvalidPlanError(f"table {i} placed {where}")
            owner[int(i)] = r
    missing = [i for i in range(num_tables) if i not in owner]
    if missing:
        shown = missing[:10] + (["..."] if len(missing) > 10 else [])
        raise InvalidPlanError(f"tables {shown} are placed on no device")
    return [owner[i] for i in range(num_tables)]


class ColumnPiece(NamedTuple):
    """Columns [offset, offset + dim) of an original table, held by `device`."""

    offset: int
    dim: int
    device: int


def plan_pieces(tables: Sequence[ShardTable], plan: Plan) -> list[list[ColumnPiece]]:
    """Per original table, its pieces in column order. `plan` must be valid (`simulator.validate_plan`)."""
    offsets = column_offsets(tables, plan.column_steps)
    split = apply_column_steps(tables, plan.column_steps)
    pieces: list[list[ColumnPiece]] = [[] for _ in tables]
    for r, shard in enumerate(plan.shards):
        for i in shard:
            pieces[split[i].origin].append(ColumnPiece(offsets[i], split[i].dim, r))
    return [sorted(p) for p in pieces]


def merge_colocated_halves(tables: Sequence[ShardTable], plan: Plan) -> Plan:
    """The plan with every column split whose two halves end on the same device undone (repeatedly, so a
    table cut in quarters on one device becomes whole again); `plan` itself when there is none.

    Two half-width tables with the same lookups on one device cost more than the table they came from
    (FBGEMM, 12 tables measured: +1% to +23%, median +6%), so such a split never helps; a cost model
    that predicts otherwise has not been shown such shards. `plan` must be valid.
    """
    pieces = plan_pieces(tables, plan)
    merged = []
    for table_pieces in pieces:
        ps = list(table_pieces)
        changed = True
        while changed:
            changed = False
            for k in range(len(ps) - 1):
                a, b = ps[k], ps[k + 1]
                # siblings of one halving: equal widths, the first aligned on twice that width
                if a.device == b.device and a.dim == b.dim and b.offset == a.offset + a.dim \
                        and a.offset % (2 * a.dim) == 0:
                    ps[k:k + 2] = [ColumnPiece(a.offset, 2 * a.dim, a.device)]
                    changed = True
                    break
        merged.append(ps)
    if [len(p) for p in merged] == [len(p) for p in pieces]:
        return plan
    return plan_from_pieces(tables, merged, plan.ndevices)


def plan_from_pieces(tables: Sequence[ShardTable], pieces: Sequence[Sequence[ColumnPiece]], ndevices: int) -> Plan:
    """The plan that cuts each table into `pieces[t]` by halvings and puts each piece on its device.

    Inverse of `plan_pieces`, in a canonical form: tables in order, each cut
    depth-first (split, then its first half, then its second half); each
    device's tables sorted. Raises InvalidPlanError when a table's pieces are
    not the leaves of a halving tree (a piece straddling a halving point,
    columns covered twice or never, a half that is not a multiple of 4) or a
    device is out of range.
    """
    if len(pieces) != len(tables):
        raise InvalidPlanError(f"pieces for {len(pieces)} tables, the task has {len(tables)}")
    steps: list[int] = []
    shards: list[list[int]] = [[] for _ in range(ndevices)]
    count = len(tables)

    def cut(t: int, index: int, offset: int, dim: int, inside: list[ColumnPiece]) -> None:
        nonlocal count
        if len(inside) == 1 and inside[0].offset == offset and inside[0].dim == dim:
            device = inside[0].device
            if not 0 <= device < ndevices:
                raise InvalidPlanError(f"table {t}: columns [{offset}, {offset + dim}) on device {device}, "
                                       f"expected 0..{ndevices - 1}")
            shards[device].append(index)
            return
        if not inside:
            raise InvalidPlanError(f"table {t}: columns [{offset}, {offset + dim}) are on no device")
        if not can_split(dim):
            shown = ", ".join(f"[{p.offset}, {p.offset + p.dim})" for p in inside)
            raise InvalidPlanError(f"table {t}: pieces {shown} are not halvings of columns "
                                   f"[{offset}, {offset + dim}) into multiples of 4")
        half = dim // 2
        straddle = [p for p in inside if p.offset < offset + half < p.offset + p.dim]
        if straddle:
            p = straddle[0]
            raise InvalidPlanError(f"table {t}: columns [{p.offset}, {p.offset + p.dim}) straddle the halving "
                                   f"point {offset + half} of columns [{offset}, {offset + dim})")
        steps.append(index)
        second = count
        count += 1
        cut(t, index, offset, half, [p for p in inside if p.offset < offset + half])
        cut(t, second, offset + half, half, [p for p in inside if p.offset >= offset + half])

    for t, table in enumerate(tables):
        inside = sorted(pieces[t])
        outside = [p for p in inside if p.offset < 0 or p.offset + p.dim > table.dim or p.dim <= 0]
        if outside:
            raise InvalidPlanError(f"table {t} (dim {table.dim}): piece of columns "
                                   f"[{outside[0].offset}, {outside[0].offset + outside[0].dim}) out of range")
        cut(t, t, 0, table.dim, inside)
    return Plan(tuple(steps), tuple(tuple(sorted(s)) for s in shards))


def _floats(xs) -> list[float]:
    return [float(x) for x in xs]


def _ints(xs) -> list[int]:
    return [int(x) for x in xs]


@dataclass
class RepeatParts:
    """One repeated measurement of a plan, per rank: compute, backward and forward comm (ms), the compute
    iterations' times (ms), the op's build time (s), the start delays of its forward exchange (`skew`, ms)
    and, when compute is timed by the CPU clock, the kernels' elapsed time (ms)."""

    compute: list[float]
    bw_comm: list[float]
    fw_comm: list[float]
    compute_iters: list[list[float]] = field(default_factory=list)
    build_s: list[float] = field(default_factory=list)
    compute_wall: list[float] | None = None
    skew: list[float] | None = None

    def to_json(self) -> dict:
        d = {"compute": self.compute, "bw_comm": self.bw_comm, "fw_comm": self.fw_comm,
             "compute_iters": self.compute_iters, "build_s": self.build_s}
        for name in ("compute_wall", "skew"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "RepeatParts":
        return cls(_floats(d["compute"]), _floats(d["bw_comm"]), _floats(d["fw_comm"]),
                   [_floats(x) for x in d.get("compute_iters", [])], _floats(d.get("build_s", [])),
                   None if d.get("compute_wall") is None else _floats(d["compute_wall"]),
                   None if d.get("skew") is None else _floats(d["skew"]))


@dataclass
class RuntimeEstimate:
    """A plan's cost under a runtime other than the paper's (`torchrec.runtime_model`): the runtime's
    name, the predicted step ms and each term's share of it (ms)."""

    name: str
    cost: float
    terms: dict[str, float]

    def to_json(self) -> dict:
        return {"name": self.name, "cost": self.cost, "terms": self.terms}

    @classmethod
    def from_json(cls, d: dict) -> "RuntimeEstimate":
        return cls(str(d["name"]), float(d["cost"]), {str(k): float(v) for k, v in d["terms"].items()})


@dataclass
class CostSpread:
    """A plan's simulated cost as a distribution (ms; `planner.costs.uncertainty`): its mean (the expected
    measured cost), sd, and 10% / 90% quantiles (the predicted 80% band), over `samples` draws (ensemble
    members x measurement-noise draws)."""

    mean: float
    sd: float
    q10: float
    q90: float
    samples: int

    def to_json(self) -> dict:
        return {"mean": self.mean, "sd": self.sd, "q10": self.q10, "q90": self.q90, "samples": self.samples}

    @classmethod
    def from_json(cls, d: dict) -> "CostSpread":
        return cls(float(d["mean"]), float(d["sd"]), float(d["q10"]), float(d["q90"]), int(d["samples"]))


@dataclass(frozen=True)
class PlanError:
    """The models' own error on whole plans, beyond the spread they predict: the relative sd of a plan-level
    term that brings the predicted 80% band to 80% of TRAINING tasks' measured plans (`eval.onpolicy.
    plan_error`, `uncertainty.calibrate_plan_sd`), after dividing out the machine's `speed` at the time (the
    median measured / expected cost); the share of those `measurements` inside the band before and after.
    `rank`: the relative sd of the compute model's error on one rank's shard that the plan's other ranks do
    not share (`eval.onpolicy.rank_error`, from `ranks` ranks with tables; 0 in records written before it
    was measured), net of the ranks' own measurement noise, `compute_noise` (the relative sd of one measurement
    of a rank's compute that the plan's other ranks do not share, from plans measured twice; 0 without them
    and in records written before it was measured): the predicted spread draws it for every rank on its own
    (`uncertainty.cost_samples`). `compute_common`: the part of that noise the plan's ranks share (None
    without plans measured twice and in records written before it was measured); with `compute_noise` it is
    the plan job's noise of one compute measurement (`compute_sd`), reported beside the collection's noise
    floor that the spread draws."""

    measurements: int
    sd: float
    coverage_before: float
    coverage_after: float
    speed: float = 1.0
    rank: float = 0.0
    ranks: int = 0
    compute_noise: float = 0.0
    compute_common: float | None = None

    @property
    def compute_sd(self) -> float | None:
        """The relative sd of one compute measurement of a plan's rank (own and shared parts), None when the
        record does not hold both (no plans measured twice, or written before the shared part was measured)."""
        return None if self.compute_common is None else math.hypot(self.compute_noise, self.compute_common)

    def to_json(self) -> dict:
        return {"measurements": self.measurements, "sd": self.sd, "coverage_before": self.coverage_before,
                "coverage_after": self.coverage_after, "speed": self.speed, "rank": self.rank, "ranks": self.ranks,
                "compute_noise": self.compute_noise,
                **({} if self.compute_common is None else {"compute_common": self.compute_common})}

    @classmethod
    def from_json(cls, d) -> "PlanError":
        """ValueError (its message says what a valid one holds) unless `d` holds "measurements" >= 1, "sd" and
        both coverages in [0, 1] and "speed" > 0, and, if present, "rank", "compute_noise" and "compute_common"
        in [0, 1] and "ranks" >= 0."""
        try:
            n, speed, ranks = d["measurements"], d["speed"], d.get("ranks", 0)
            vals = [d[k] for k in ("sd", "coverage_before", "coverage_after")] + [d.get(k, 0.0) for k in
                                                                                  ("rank", "compute_noise")]
            common = d.get("compute_common")
            vals += [] if common is None else [common]
            if (any(isinstance(x, bool) or not isinstance(x, int) for x in (n, ranks)) or n < 1 or ranks < 0
                    or not all(isinstance(x, numbers.Real) and not isinstance(x, bool) and 0.0 <= x <= 1.0
                               for x in vals)
                    or not isinstance(speed, numbers.Real) or isinstance(speed, bool)
                    or not 0.0 < speed < math.inf):
                raise ValueError
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ValueError("must hold \"sd\", \"coverage_before\", \"coverage_after\" in [0, 1], \"speed\" "
                             "> 0 and \"measurements\" >= 1 (and \"rank\", \"compute_noise\", \"compute_common\" "
                             "in [0, 1], \"ranks\" >= 0 if given)") from None
        return cls(n, float(vals[0]), float(vals[1]), float(vals[2]), float(speed), float(vals[3]), ranks,
                   float(vals[4]), None if common is None else float(common))


@dataclass(frozen=True)
class RankNoise:
    """How one measurement of a rank's total splits into noise of its own and noise shared by the plan's
    ranks (relative sds, fractions; `eval.power.rank_noise`, from `plans` plans measured twice)."""

    plans: int
    independent_sd: float
    common_sd: float

    @property
    def shared(self) -> float:
        """The share of a rank's noise variance the plan's ranks have in common (`uncertainty.NoiseModel`)."""
        total = self.independent_sd ** 2 + self.common_sd ** 2
        return self.common_sd ** 2 / total if total > 0 else 0.0

    def to_json(self) -> dict:
        return {"plans": self.plans, "independent_sd": self.independent_sd, "common_sd": self.common_sd}

    @classmethod
    def from_json(cls, d) -> "RankNoise":
        """ValueError (its message says what a valid one holds) unless `d` holds "plans" >= 1 and both sds in
        [0, 10)."""
        try:
            sds = [d[k] for k in ("independent_sd", "common_sd")]
            plans = d["plans"]
            if (isinstance(plans, bool) or not isinstance(plans, int) or plans < 1
                    or not all(isinstance(x, numbers.Real) and 0.0 <= x < 10.0 for x in sds)):
                raise ValueError
        except (KeyError, TypeError, ValueError):
            raise ValueError("must hold sds \"independent_sd\", \"common_sd\" in [0, 10) and \"plans\" >= 1") from None
        return cls(plans, float(sds[0]), float(sds[1]))


@dataclass
class CostBreakdown:
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
    runtime's terms), that runtime's estimate.
    """

    compute: list[float]
    bw_comm: list[float]
    fw_comm: list[float]
    dims: list[int] | None = None
    skew: list[float] | None = None
    mem_gb: list[float] | None = None
    ntables: list[int] | None = None
    fw_comm_nosleep: list[float] | None = None
    repeats: list[RepeatParts] | None = None
    member_costs: list[float] | None = None
    spread: CostSpread | None = None
    runtime: RuntimeEstimate | None = None

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

    def to_json(self) -> dict:
        d = {"compute": self.compute, "bw_comm": self.bw_comm, "fw_comm": self.fw_comm, "total": self.total,
             "cost": self.cost}
        for name in ("skew", "fw_comm_nosleep", "dims", "ntables", "mem_gb", "member_costs"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        if self.repeats is not None:
            d["repeats"] = [r.to_json() for r in self.repeats]
        if self.spread is not None:
            d["spread"] = self.spread.to_json()
        if self.runtime is not None:
            d["runtime"] = self.runtime.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict) -> "CostBreakdown":
        """Inverse of `to_json` ("total" and "cost" are derived, so they are not read back)."""
        def opt(name, parse):
            return None if d.get(name) is None else parse(d[name])

        return cls(_floats(d["compute"]), _floats(d["bw_comm"]), _floats(d["fw_comm"]), dims=opt("dims", _ints),
                   skew=opt("skew", _floats), mem_gb=opt("mem_gb", _floats), ntables=opt("ntables", _ints),
                   fw_comm_nosleep=opt("fw_comm_nosleep", _floats),
                   repeats=opt("repeats", lambda rs: [RepeatParts.from_json(r) for r in rs]),
                   member_costs=opt("member_costs", _floats), spread=opt("spread", CostSpread.from_json),
                   runtime=opt("runtime", RuntimeEstimate.from_json))


@dataclass
class EndToEnd:
    """The end-to-end step of a measured plan (ms): every rank's median step, the slowest rank's step per
    iteration, and the plan's end-to-end cost (the median of `iters`; once a plan's repeats are merged,
    their mean, with each repeat's cost in `repeat_costs`)."""

    per_rank: list[float]
    iters: list[float]
    cost: float
    repeat_costs: list[float] | None = None

    def to_json(self) -> dict:
        d = {"per_rank": self.per_rank, "iters": self.iters, "cost": self.cost}
        if self.repeat_costs is not None:
            d["repeat_costs"] = self.repeat_costs
        return d

    @classmethod
    def from_json(cls, d: dict) -> "EndToEnd":
        return cls(_floats(d["per_rank"]), _floats(d["iters"]), float(d["cost"]),
                   None if d.get("repeat_costs") is None else _floats(d["repeat_costs"]))


@dataclass
class PlanMeasurement:
    """One measurement of one plan on hardware, as the plan-measurement job reports it (`measure.plan_job`).

    `index`: the plan's position in the job; per rank: `dims` (dim sum),
    `ntables`, `compute` (forward + backward kernels, the ranks taking
    turns), `bw_comm`, `fw_comm` (with each rank delayed by its `skew`),
    `fw_comm_nosleep` (all ranks starting together), `compute_iters` (each
    timed iteration) in ms, `build_s` (the op's construction) in s; `e2e`:
    the real step sequence, when asked. The plan's cost is its breakdown's.
    """

    index: int
    task: int
    alg: str
    dims: list[int]
    ntables: list[int]
    compute: list[float]
    bw_comm: list[float]
    fw_comm: list[float]
    fw_comm_nosleep: list[float]
    skew: list[float]
    compute_iters: list[list[float]] = field(default_factory=list)
    build_s: list[float] = field(default_factory=list)
    e2e: EndToEnd | None = None
    compute_wall: list[float] | None = None  # elapsed kernel ms (median), when compute is the CPU clock's

    def parts(self) -> RepeatParts:
        return RepeatParts(self.compute, self.bw_comm, self.fw_comm, self.compute_iters, self.build_s,
                           self.compute_wall, self.skew)

    def breakdown(self) -> CostBreakdown:
        return CostBreakdown(self.compute, self.bw_comm, self.fw_comm, dims=self.dims, skew=self.skew,
                             ntables=self.ntables, fw_comm_nosleep=self.fw_comm_nosleep, repeats=[self.parts()])

    @property
    def cost(self) -> float:
        return self.breakdown().cost

    def to_json(self) -> dict:
        d = {"i": self.index, "task": self.task, "alg": self.alg, "dims": self.dims, "ntables": self.ntables,
             "compute": self.compute, "bw_comm": self.bw_comm, "fw_comm": self.fw_comm,
             "fw_comm_nosleep": self.fw_comm_nosleep, "skew": self.skew, "compute_iters": self.compute_iters,
             "build_s": self.build_s}
        if self.e2e is not None:
            d["e2e"] = self.e2e.to_json()
        if self.compute_wall is not None:
            d["compute_wall"] = self.compute_wall
        return d

    @classmethod
    def from_json(cls, d: dict) -> "PlanMeasurement":
        """Inverse of `to_json`; KeyError / TypeError / ValueError on a malformed record."""
        return cls(int(d["i"]), int(d["task"]), str(d["alg"]), _ints(d["dims"]), _ints(d["ntables"]),
                   _floats(d["compute"]), _floats(d["bw_comm"]), _floats(d["fw_comm"]),
                   _floats(d["fw_comm_nosleep"]), _floats(d["skew"]),
                   [_floats(x) for x in d.get("compute_iters", [])], _floats(d.get("build_s", [])),
                   None if d.get("e2e") is None else EndToEnd.from_json(d["e2e"]),
                   None if d.get("compute_wall") is None else _floats(d["compute_wall"]))


@dataclass
class TorchRecStep:
    """One measurement of one plan by TorchRec training (`torchrec.training`): a DLRM whose
    EmbeddingBagCollection DistributedModelParallel shards by the plan, trained for some iterations.

    `index`: the measurement's position in the job; `repeat`: its round; `iters`: each timed
    iteration's step time in ms, the slowest rank's (a barrier before each iteration); `per_rank`:
    each rank's median step ms; `build_s`: the slowest rank's model construction and sharding (s);
    `phases`: per rank, the median ms of each phase of its steps (`PHASES`: the embedding collection's
    forward up to its pooled output, the rest of the forward with the loss, the backward, the dense
    optimizer's step; None in records written before they were). Its cost is the median of `iters`.
    """

    PHASES: ClassVar[tuple[str, ...]] = ("embedding_fw", "dense_fw", "backward", "optimizer")

    index: int
    task: int
    alg: str
    repeat: int
    iters: list[float]
    per_rank: list[float]
    build_s: float = 0.0
    phases: list[dict] | None = None

    @property
    def cost(self) -> float:
        xs = sorted(self.iters)
        n = len(xs)
        return float(xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2)

    def to_json(self) -> dict:
        d = {"i": self.index, "task": self.task, "alg": self.alg, "repeat": self.repeat, "iters": self.iters,
             "per_rank": self.per_rank, "build_s": self.build_s}
        if self.phases is not None:
            d["phases"] = self.phases
        return d

    @classmethod
    def from_json(cls, d: dict) -> "TorchRecStep":
        """Inverse of `to_json`; KeyError / TypeError / ValueError on a malformed record."""
        iters = _floats(d["iters"])
        if not iters:
            raise ValueError("a TorchRec step record without timed iterations")
        phases = d.get("phases")
        if phases is not None:
            phases = [{name: float(p[name]) for name in cls.PHASES} for p in phases]
        return cls(int(d["i"]), int(d["task"]), str(d["alg"]), int(d["repeat"]), iters, _floats(d["per_rank"]),
                   float(d.get("build_s", 0.0)), phases)


@dataclass
class RefineCandidate:
    """A candidate plan of `--refine`: where it came from, its simulated cost and its measured costs (ms)."""

    source: str
    estimated_cost: float | None
    measured_costs: list[float] | None

    def to_json(self) -> dict:
        return {"source": self.source, "estimated_cost": self.estimated_cost, "measured_costs": self.measured_costs}

    @classmethod
    def from_json(cls, d: dict) -> "RefineCandidate":
        return cls(str(d["source"]), d.get("estimated_cost"), d.get("measured_costs"))


@dataclass
class RefineRecord:
    """How `--refine` chose a plan (`eval.refine`): the candidates measured, the index of the one kept (the
    lowest mean measured cost) and the seconds it took (part of the record's `search_ms`)."""

    candidates: list[RefineCandidate]
    chosen: int
    seconds: float

    def to_json(self) -> dict:
        return {"candidates": [c.to_json() for c in self.candidates], "chosen": self.chosen, "seconds": self.seconds}

    @classmethod
    def from_json(cls, d: dict) -> "RefineRecord":
        return cls([RefineCandidate.from_json(c) for c in d["candidates"]], int(d["chosen"]), float(d["seconds"]))


PLAN_STATUSES = ("ok", "oom", "invalid")


def task_identity(tables: Sequence[ShardTable]) -> dict[str, tuple[int, ...]]:
    """What identifies a plan's task, as `PlanRecord` keeps it: the tables' dataset ids and dims (before splits)."""
    return {"table_ids": tuple(t.table_id for t in tables), "dims": tuple(t.dim for t in tables)}


@dataclass
class PlanRecord:
    """One algorithm's plan for one task, with its simulated and (after eval.py) measured cost.

    `status`: "ok"; "oom" (no plan fits the memory cap, or the sharder returned
    one that does not fit); "invalid" (a plan that breaks the rules). Both
    non-ok statuses count as invalid tasks (upstream's `Valid v / N`) and have
    `plan` None and a `message`. `estimate`: the simulator's per-device
    breakdown; `search_ms`: wall time of the sharder call; `view`: the readable
    per-table view (`formats.plan_file.plan_view`); `table_ids` and `dims`: what identifies
    the task the plan is for (its dataset table ids and dims, in task order; None in
    plans files written before they were recorded), checked by every reader that
    applies the plan (`formats.plan_file.check_plan_tables`). Hardware evaluation adds `measured`
    (the per-rank breakdown, averaged over repeats) with `repeat_costs` (the plan
    cost of each repeated measurement) and, in end-to-end mode, `e2e`. Costs in ms.
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
    measured: CostBreakdown | None = None
    e2e: EndToEnd | None = None
    repeat_costs: list[float] | None = None
    refine: RefineRecord | None = None
    table_ids: tuple[int, ...] | None = None
    dims: tuple[int, ...] | None = None

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

    def to_json(self, view: bool = True, measured: bool = False) -> dict[str, Any]:
        """The record as written to plans.json / results.json (derived costs included for readers).

        `measured`: a record of a hardware evaluation: "cost" and "plan_key" even when not run.
        """
        d: dict[str, Any] = {
            "task": self.task, "alg": self.alg, "status": self.status, "message": self.message,
            "plan": None if self.plan is None else self.plan.to_json(),
            "estimated_cost": self.estimated_cost,
            "estimate": None if self.estimate is None else self.estimate.to_json(),
            "search_ms": self.search_ms, "num_tables": self.num_tables, "num_splits": self.num_splits}
        if self.table_ids is not None:
            d["table_ids"] = list(self.table_ids)
        if self.dims is not None:
            d["dims"] = list(self.dims)
        if measured or self.measured is not None:
            d.update(cost=self.cost, plan_key=self.plan_key)
        if self.measured is not None:
            d["measured"] = self.measured.to_json()
        if self.repeat_costs is not None:
            d["repeat_costs"] = list(self.repeat_costs)
        if self.e2e is not None:
            d.update(e2e_cost=self.e2e_cost, e2e=self.e2e.to_json())
        if self.refine is not None:
            d["refine"] = self.refine.to_json()
        if view:
            d["view"] = self.view
        return d
