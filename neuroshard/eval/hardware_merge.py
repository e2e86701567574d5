"""Merge the hardware job's per-plan measurements into the plan records (eval.py's results).

The job's rank 0 streams one raw JSON record per measured plan (`"i"`: the
plan's index among the runnable records, per-rank `compute`, `bw_comm`,
`fw_comm`, `fw_comm_nosleep`, `skew`, `dims`, `ntables`, the compute
iteration times and, in end-to-end mode, `e2e`); `merge_results` turns them
into the records' `measured` breakdown. Times in ms.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from neuroshard.eval.hardware import runnable
from neuroshard.types import CostBreakdown, NeuroShardError, PlanRecord

_EXTRA = ("dims", "ntables", "skew", "fw_comm_nosleep", "compute_iters", "build_s")


def measured_breakdown(m: dict) -> CostBreakdown:
    """The measured per-rank costs of one plan (total = sum of parts, cost = max over ranks)."""
    return CostBreakdown(list(m["compute"]), list(m["bw_comm"]), list(m["fw_comm"]),
                         extra={k: m[k] for k in _EXTRA if k in m})


def merge_results(records: Sequence[PlanRecord], measured: Sequence[dict]) -> list[PlanRecord]:
    """One result per plan record (every task x algorithm, run or not), in record order.

    `measured`: the job's records for the runnable plans (`runnable`), in
    order. A measured plan gets `measured` (and `e2e`) and status "ok"; the
    others keep their status and message.
    """
    items = runnable(records)
    if len(measured) != len(items):
        raise NeuroShardError(f"{len(measured)} measurements for {len(items)} runnable plans")
    by_id = {id(rec): m for rec, m in zip(items, measured)}
    results = []
    for rec in records:
        m = by_id.get(id(rec))
        if m is None:
            results.append(replace(rec, view=None))
        else:
            results.append(replace(rec, status="ok", view=None, measured=measured_breakdown(m), e2e=m.get("e2e")))
    return results
