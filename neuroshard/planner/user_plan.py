"""Shard a user's own tables (`tools/shard_tables.py`): plan, per-device table, plan file, TorchRec plan.

The tables come from `formats.user_tables.read_user_tables` (name, rows,
dim, pooling factor, optional locality bins); each becomes a task table
whose dataset id is its position. Planning is the library call
`planner.shard.shard`, so every registered algorithm works; the plan is
written with `formats.plan_file.write_plans` as a one-record plans file (task 0)
whose view also carries the table names, so `tools/export_torchrec_plan.py
--tables` can read it back.
"""

from __future__ import annotations

from typing import Sequence

from neuroshard.planner.registry import options_for, prepare
from neuroshard.planner.shard import ShardResult, shard
from neuroshard.problem import Problem
from neuroshard.types.plan import apply_column_steps, column_offsets
from neuroshard.types.records import PlanRecord, task_identity
from neuroshard.types.tables import ShardTable, TableConfig


def user_shard_tables(configs: Sequence[TableConfig]) -> list[ShardTable]:
    """The planner's input for a user's tables: table i is its own dataset table i."""
    return [ShardTable(i, i, c) for i, c in enumerate(configs)]


def shard_user_tables(configs: Sequence[TableConfig], problem: Problem, models=None, alg: str = "neuroshard",
                      options: dict | None = None) -> ShardResult:
    """Plan the user's tables for `problem` with `alg` (see `planner.shard.shard`)."""
    prepare(alg)  # a heavy import (torchrec) is not planning time
    return shard(user_shard_tables(configs), problem, models=models, alg=alg, **options_for(alg, options))


def piece_labels(result: ShardResult, names: Sequence[str]) -> list[str]:
    """A label per post-split table: the name, with `[first:last+1]` columns when the table was split."""
    split = apply_column_steps(result.tables, result.plan.column_steps)
    offsets = column_offsets(result.tables, result.plan.column_steps)
    whole = [t.dim for t in result.tables]
    return [names[t.origin] if t.dim == whole[t.origin] else f"{names[t.origin]}[{o}:{o + t.dim}]"
            for t, o in zip(split, offsets)]


def device_table(result: ShardResult, names: Sequence[str]) -> str:
    """The plan per device, as a text table: tables, dim sum, memory (GB) and, with cost models, the
    estimated compute, communication (backward + forward) and total ms."""
    split = apply_column_steps(result.tables, result.plan.column_steps)
    labels = piece_labels(result, names)
    bd = result.breakdown
    header = ["device", "dims", "memory GB", "compute ms", "comm ms", "total ms", "tables"]
    rows = []
    for r, shard_ in enumerate(result.plan.shards):
        mem = sum(split[i].size_gb for i in shard_)
        cost = (["-"] * 3 if bd is None else
                [f"{bd.compute[r]:.3f}", f"{bd.bw_comm[r] + bd.fw_comm[r]:.3f}", f"{bd.total[r]:.3f}"])
        rows.append([str(r), str(sum(split[i].dim for i in shard_)), f"{mem:.4f}", *cost,
                     ", ".join(labels[i] for i in shard_) or "(none)"])
    widths = [max(len(row[k]) for row in [header, *rows]) for k in range(len(header) - 1)]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row[:-1], widths)) + "  " + row[-1]
             for row in [header, *rows]]
    total = "" if result.cost_ms is None else f"plan cost {result.cost_ms:.3f} ms (the largest total), "
    lines.append(f"{result.alg}: {total}{len(result.plan.column_steps)} column splits, "
                 f"planned in {result.search_ms:.0f} ms")
    return "\n".join(lines)


def user_plan_record(result: ShardResult, names: Sequence[str]) -> PlanRecord:
    """The plan as a one-task plan record (task 0); its view names each table."""
    view = [{"name": names[v["table"]], **v} for v in result.view]
    return PlanRecord(task=0, alg=result.alg, plan=result.plan, estimate=result.breakdown,
                      search_ms=result.search_ms, num_tables=len(result.tables), view=view,
                      **task_identity(result.tables))
