"""The planning problem: what a plan is for, in one record.

`Problem` holds what defines a sharding problem besides its tables: how many
devices, the memory of each (one number for identical devices, or one per
device: `--max_mem 16,16,8,8`), the seed of whatever is random in planning
or measuring it, the hosts the devices sit on (`--local_world_size`: devices
per host, consecutive ranks; a table-row-wise table spans one host), and the
constraints on the tables (`types.constraints`; set by the library and
`NeuroShardPlanner`, not a flag). Its flag fields are `--ndevices`,
`--max_mem`, `--seed` and `--local_world_size`, declared here once; every
script that plans, measures, trains a learned baseline or makes tasks takes
those that mean something to it through `Problem.add_args` and hands the
record on
(`planner.shard.shard(tables, problem, ...)`, a sharder `fn(tables, problem,
ctx)`, the evaluation, the pipeline), so no function takes a loose device
count or memory cap beside it.

    problem = Problem(ndevices=4, max_mem=1.0)
    problem = Problem(ndevices=4, max_mem=(16.0, 16.0, 8.0, 8.0))   # devices of unequal memory
    problem = Problem(ndevices=16, max_mem=80.0, local_world_size=8)  # two hosts of 8 GPUs
    result = ns.shard(tables, problem, models=models)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

from neuroshard.checks import check_int
from neuroshard.settings import Settings, common, setting
from neuroshard.types.constraints import TableConstraints
from neuroshard.types.errors import ConfigError
from neuroshard.types.plan import host_groups

DEFAULT_NDEVICES = 4  # CPU ranks standing in for devices, or the simulator's devices, when none are named


@dataclass(frozen=True)
class Problem(Settings):
    """`ndevices` devices (GPUs, or CPU processes standing in for them) of `max_mem` GB each (a number), or of
    `max_mem[d]` GB for device d (a tuple, one per device; equal values become one number); `seed`: the seed
    of randomised algorithms, of measurement orders and of sampling; `constraints`: what plans must respect
    besides memory (None: nothing); `batch_size`: the global training batch the plan's costs are for (None:
    the batch the cost models' data was measured at; `CostModels.at_batch`); `local_world_size`: the devices
    of a host (`hosts`: consecutive ranks; None: one host), the ranks a table-row-wise table may span."""

    TITLE: ClassVar[str] = "the planning problem"

    ndevices: int = setting(DEFAULT_NDEVICES, "number of devices (GPUs, or CPU ranks standing in for them; on "
                                              "several machines, all of them); left out: 4, or one per GPU of "
                                              "--gpu_devices", flag_default=None, show_default=False)
    max_mem: float | tuple[float, ...] = setting(4.0, "memory per device in GB: one number, or one per device "
                                                      "(16,16,8,8)", aliases=("--max-memory",), metavar="GB[,GB...]")
    seed: int = common("seed")
    constraints: TableConstraints | None = setting(None, "table constraints (the library and the planner set them)",
                                                   cli=False, omit=lambda v: v is None or v.empty)
    batch_size: int | None = setting(None, "the global training batch plans are costed at (None: the batch of the "
                                           "cost models' data)", cli=False, omit=lambda v: v is None)
    local_world_size: int | None = common("local_world_size", omit=lambda v: v is None, show_default=False)

    def __post_init__(self):
        check_int("--ndevices", self.ndevices, 1)
        object.__setattr__(self, "max_mem", _mem_caps(self.max_mem, self.ndevices))
        check_int("--seed", self.seed, 0)
        if self.batch_size is not None:
            check_int("batch_size", self.batch_size, 1)
        if self.local_world_size is not None:
            check_int("--local_world_size", self.local_world_size, 1, self.ndevices)
            if self.ndevices % self.local_world_size:
                raise ConfigError("--local_world_size", f"{self.local_world_size} devices per host do not divide the "
                                                        f"{self.ndevices} devices")
            if self.local_world_size == self.ndevices:
                object.__setattr__(self, "local_world_size", None)  # one host: the same problem as left out
        if self.constraints is not None and not isinstance(self.constraints, TableConstraints):
            raise ConfigError("constraints", f"expected a TableConstraints, got {type(self.constraints).__name__}")

    @property
    def caps(self) -> tuple[float, ...]:
        """Memory of each device in GB."""
        return self.max_mem if isinstance(self.max_mem, tuple) else (self.max_mem,) * self.ndevices

    @property
    def uniform(self) -> bool:
        """All devices have the same memory (`max_mem` is one number)."""
        return not isinstance(self.max_mem, tuple)

    @property
    def mem_text(self) -> str:
        """The memory in words, for messages: "1 GB" or "[16, 16, 8, 8] GB"."""
        if self.uniform:
            return f"{self.max_mem:g} GB"
        return "[" + ", ".join(f"{m:g}" for m in self.max_mem) + "] GB"

    def single_mem(self, what: str) -> float:
        """The one memory size of identical devices, for `what` (in words) that knows no other; ConfigError
        naming --max_mem for devices of unequal memory."""
        if not self.uniform:
            raise ConfigError("--max_mem", f"{what} takes one memory size for every device, got {self.mem_text}")
        return self.max_mem

    @property
    def hosts(self) -> list[tuple[int, ...]]:
        """Each host's ranks (`local_world_size` consecutive ones; one host of every rank when left out)."""
        return host_groups(self.local_world_size or self.ndevices, self.ndevices)

    @property
    def table_constraints(self) -> TableConstraints:
        """The constraints, an empty record when there are none."""
        return self.constraints or TableConstraints()

    @classmethod
    def from_args(cls, args, **fixed) -> "Problem":
        """The problem of parsed flags; `--ndevices` left out means 4 (`fixed` may set it, e.g. to the ranks
        resolved from `--gpu_devices`)."""
        if getattr(args, "ndevices", None) is None and "ndevices" not in fixed:
            fixed["ndevices"] = DEFAULT_NDEVICES
        return super().from_args(args, **fixed)

    def with_seed(self, seed: int) -> "Problem":
        return replace(self, seed=int(seed))


def _mem_caps(value, ndevices: int) -> float | tuple[float, ...]:
    """`--max_mem` as one number or a tuple of one per device (text "16,16,8,8" parsed); equal values become
    one number. ConfigError naming the value otherwise."""
    raw = value
    if isinstance(value, str):
        try:
            value = tuple(float(x) for x in value.split(","))
        except ValueError:
            raise ConfigError("--max_mem", f"expected GB per device as a number or a comma list, got {raw!r}") \
                from None
    if isinstance(value, list):
        value = tuple(value)
    values = value if isinstance(value, tuple) else (value,)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError("--max_mem", f"expected a finite number of GB, got {v!r}")
        if v <= 0:
            raise ConfigError("--max_mem", f"must be > 0, got {v:g}")
    if len(values) == 1:
        return float(values[0])
    if len(values) != ndevices:
        raise ConfigError("--max_mem", f"{len(values)} values for {ndevices} devices: give one number, or one per "
                                       "device")
    if len(set(values)) == 1:
        return float(values[0])
    return tuple(float(v) for v in values)
