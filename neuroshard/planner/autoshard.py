"""`--alg autoshard`: AutoShard (Zha et al., KDD 2022) as a baseline, placing tables with a trained policy.

The networks, the environment and the V-trace learner are in
`planner.autoshard_nets` (torch); `train_autoshard.py` trains a policy.
This module registers the sharder without importing torch: the policy (and
the training set's feature statistics stored with it) is loaded on first use
from `ctx.options["autoshard_policy"]` (see `planner.learned`). Inference
as released: sort the tables by the cost head's single-table prediction,
then step the LSTM policy and take the argmax, here over the devices with
memory room only (the release had no memory check at inference); a table
with no legal device makes the task out of memory.
"""

from __future__ import annotations

from typing import Sequence

from neuroshard.planner.learned import POLICY_OPTIONS, load_policy
from neuroshard.planner.registry import ShardingContext, register
from neuroshard.types import Plan, ShardTable


@register("autoshard", requires_option=POLICY_OPTIONS["autoshard"])
def autoshard(tables: Sequence[ShardTable], ndevices: int, max_mem: float, ctx: ShardingContext) -> Plan:
    """Greedy placement by a trained AutoShard policy; OutOfMemoryError when a table fits nowhere."""
    policy = load_policy("autoshard", ctx.options if ctx is not None else None, ndevices, max_mem)
    return policy.plan(tables, ndevices, max_mem)
