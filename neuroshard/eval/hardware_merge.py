"""Merge the hardware job's per-plan measurements into the plan records (eval.py's results).

The job's rank 0 streams one raw JSON record per measured plan (`"i"`: the
item's index in the job, per-rank `compute`, `bw_comm`, `fw_comm`,
`fw_comm_nosleep`, `skew`, `dims`, `ntables`, the compute iteration times
and, in end-to-end mode, `e2e`). A plan measured R times (repeats) gets the
per-rank mean of its R measurements as its `measured` breakdown and the R
plan costs (max over ranks of each measurement) as `repeat_costs`. Times in ms.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from neuroshard.eval.hardware import runnable
from neuroshard.types import CostBreakdown, NeuroShardError, PlanRecord

_MEANS = ("compute", "bw_comm", "fw_comm", "skew", "fw_comm_nosleep")


def measured_breakdown(repeats: Sequence[dict]) -> CostBreakdown:
    """Per-rank mean of one plan's measurements (total = sum of parts); the per-rank parts, iteration
    times and build times of each repeat stay in `extra["repeats"]`."""
    mean = {k: np.mean([m[k] for m in repeats], axis=0).tolist() for k in _MEANS if k in repeats[0]}
    extra = {k: mean[k] for k in ("skew", "fw_comm_nosleep") if k in mean}
    extra.update(dims=repeats[0]["dims"], ntables=repeats[0]["ntables"])
    extra["repeats"] = [{k: m[k] for k in ("compute", "bw_comm", "fw_comm", "compute_iters", "build_s") if k in m}
                        for m in repeats]
    return CostBreakdown(mean["compute"], mean["bw_comm"], mean["fw_comm"], extra=extra)


def _plan_cost(m: dict) -> float:
    return max(c + b + f for c, b, f in zip(m["compute"], m["bw_comm"], m["fw_comm"]))


def merge_results(records: Sequence[PlanRecord], measured: Sequence[Sequence[dict]]) -> list[PlanRecord]:
    """One result per plan record (every task x algorithm, run or not), in record order.

    `measured[k]`: the job's measurements (one per repeat) of the k-th runnable
    record (`runnable`). A measured plan gets `measured`, `repeat_costs` (and
    `e2e`) and status "ok"; the others keep their status and message.
    """
    items = runnable(records)
    if len(measured) != len(items) or not all(measured):
        raise NeuroShardError(f"measurements for {len(measured)} of {len(items)} runnable plans")
    by_id = {id(rec): ms for rec, ms in zip(items, measured)}
    results = []
    for rec in records:
        ms = by_id.get(id(rec))
        if ms is None:
            results.append(replace(rec, view=None))
            continue
        e2e = None
        if "e2e" in ms[0]:
            costs = [m["e2e"]["cost"] for m in ms]
            e2e = {**ms[0]["e2e"], "cost": float(np.mean(costs)), "repeat_costs": costs,
                   "per_rank": np.mean([m["e2e"]["per_rank"] for m in ms], axis=0).tolist()}
        results.append(replace(rec, status="ok", view=None, measured=measured_breakdown(ms), e2e=e2e,
                               repeat_costs=[_plan_cost(m) for m in ms]))
    return results
