"""The planning problem: what a plan is for, in one record.

`Problem` holds what defines a sharding problem besides its tables: how many
devices, the memory of each, and the seed of whatever is random in planning
or measuring it. Its fields are the flags `--ndevices`, `--max_mem` and
`--seed`, declared here once; every script that plans, measures, trains a
learned baseline or makes tasks takes them through `Problem.add_args` and
hands the record on (`planner.shard.shard(tables, problem, ...)`, a sharder
`fn(tables, problem, ctx)`, the evaluation, the pipeline), so no function
takes a loose device count or memory cap beside it.

    problem = Problem(ndevices=4, max_mem=1.0)
    result = ns.shard(tables, problem, models=models)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

from neuroshard.checks import check_float, check_int
from neuroshard.settings import Settings, common, setting
from neuroshard.types.errors import ConfigError

DEFAULT_NDEVICES = 4  # CPU ranks standing in for devices, or the simulator's devices, when none are named


@dataclass(frozen=True)
class Problem(Settings):
    """`ndevices` devices (GPUs, or CPU processes standing in for them) of `max_mem` GB each; `seed`: the seed
    of randomised algorithms, of measurement orders and of sampling."""

    TITLE: ClassVar[str] = "the planning problem"

    ndevices: int = setting(DEFAULT_NDEVICES, "number of devices (GPUs, or CPU ranks standing in for them; on "
                                              "several machines, all of them); left out: 4, or one per GPU of "
                                              "--gpu_devices", flag_default=None, show_default=False)
    max_mem: float = setting(4.0, "memory per device in GB", aliases=("--max-memory",))
    seed: int = common("seed")

    def __post_init__(self):
        check_int("--ndevices", self.ndevices, 1)
        check_float("--max_mem", self.max_mem, 0.0, lo_open=True)
        if not math.isfinite(self.max_mem):
            raise ConfigError("--max_mem", f"expected a finite number of GB, got {self.max_mem}")
        check_int("--seed", self.seed, 0)

    @classmethod
    def from_args(cls, args, **fixed) -> "Problem":
        """The problem of parsed flags; `--ndevices` left out means 4 (`fixed` may set it, e.g. to the ranks
        resolved from `--gpu_devices`)."""
        if getattr(args, "ndevices", None) is None and "ndevices" not in fixed:
            fixed["ndevices"] = DEFAULT_NDEVICES
        return super().from_args(args, **fixed)

    def with_seed(self, seed: int) -> "Problem":
        return replace(self, seed=int(seed))
