"""`--alg dreamshard`: DreamShard (Zha et al., NeurIPS 2022) as a baseline, placing tables with a trained policy.

The networks, the estimated MDP and the training loop are in
`planner.dreamshard_nets` (torch); `train_dreamshard.py` trains a policy.
This module registers the sharder without importing torch: the policy is
loaded on first use from `ctx.options["dreamshard_policy"]` (see
`planner.learned`). Inference as released: sort the tables by the cost
network's single-table prediction (largest first), then put each on the
legal device with the highest policy logit (argmax); unlike the release, a
table with no legal device makes the task out of memory instead of crashing.
"""

from __future__ import annotations

from typing import Sequence

from neuroshard.planner.learned import POLICY_OPTIONS, load_policy
from neuroshard.planner.registry import ShardingContext, register
from neuroshard.types import Plan, ShardTable


@register("dreamshard", requires_option=POLICY_OPTIONS["dreamshard"])
def dreamshard(tables: Sequence[ShardTable], ndevices: int, max_mem: float, ctx: ShardingContext) -> Plan:
    """Greedy placement by a trained DreamShard policy; OutOfMemoryError when a table fits nowhere."""
    policy = load_policy("dreamshard", ctx.options if ctx is not None else None, ndevices, max_mem)
    return policy.plan(tables, ndevices, max_mem)
