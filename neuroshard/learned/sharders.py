"""`--alg dreamshard` and `--alg autoshard`: the learned baselines as sharders, registered without torch.

DreamShard (Zha et al., NeurIPS 2022) and AutoShard (Zha et al., KDD 2022)
place tables with a trained policy. Each policy checkpoint is named by its
option (`dreamshard_policy` / `autoshard_policy`: the flags of the evaluation
scripts, the keyword of `ns.shard`); it is loaded on first use (torch is
imported then, see `learned.policy.load_policy`) and must have been trained
for the task's device count and memory cap. `--alg all` includes a learned
sharder only when its policy is given.

Inference as released: DreamShard sorts the tables by its cost network's
single-table prediction (largest first) and puts each on the legal device
with the highest policy logit; AutoShard sorts by its cost head's
single-table prediction and steps its LSTM policy, taking the argmax. Here
both choose among the devices with memory room only (the simulator's one
memory check), so a table with no legal device makes the task out of memory
instead of an overfilled plan or a crash. The networks and training loops
are `learned.dreamshard` and `learned.autoshard` (torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from neuroshard.learned.policy import POLICY_OPTIONS, load_policy
from neuroshard.planner.registry import ShardingContext, register
from neuroshard.problem import Problem
from neuroshard.settings import Settings, setting
from neuroshard.types.plan import Plan
from neuroshard.types.tables import ShardTable


@dataclass(frozen=True)
class DreamShardOptions(Settings):
    """The trained DreamShard policy `--alg dreamshard` plans with."""

    TITLE: ClassVar[str] = "DreamShard (--alg dreamshard; train_dreamshard.py)"

    dreamshard_policy: str | None = setting(None, "trained DreamShard policy checkpoint; --alg all includes "
                                                  "dreamshard only when this is given", show_default=False)


@dataclass(frozen=True)
class AutoShardOptions(Settings):
    """The trained AutoShard policy `--alg autoshard` plans with."""

    TITLE: ClassVar[str] = "AutoShard (--alg autoshard; train_autoshard.py)"

    autoshard_policy: str | None = setting(None, "trained AutoShard policy checkpoint; --alg all includes "
                                                 "autoshard only when this is given", show_default=False)


@register("dreamshard", requires_option=POLICY_OPTIONS["dreamshard"], settings=(DreamShardOptions,))
def dreamshard(tables: Sequence[ShardTable], problem: Problem, ctx: ShardingContext) -> Plan:
    """Greedy placement by a trained DreamShard policy; OutOfMemoryError when a table fits nowhere."""
    policy = load_policy("dreamshard", ctx.options if ctx is not None else None, problem)
    return policy.plan(tables, problem)


@register("autoshard", requires_option=POLICY_OPTIONS["autoshard"], settings=(AutoShardOptions,))
def autoshard(tables: Sequence[ShardTable], problem: Problem, ctx: ShardingContext) -> Plan:
    """Greedy placement by a trained AutoShard policy; OutOfMemoryError when a table fits nowhere."""
    policy = load_policy("autoshard", ctx.options if ctx is not None else None, problem)
    return policy.plan(tables, problem)
