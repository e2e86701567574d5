"""Baseline sharders (DESIGN.md §9): random and four greedy heuristics.

All place whole tables (no column-wise splits). Each greedy gives every table
a cost key, orders tables by (key, size, index) descending -- largest first,
ties broken by the larger size, then the larger index -- and puts each on the
device with the smallest key sum among the devices with memory room
(the simulator's one memory check, `simulator.mem_cap_elements`, in whole
fp32 elements), ties broken by least memory used, then the lowest device index.

Keys: `dim_greedy` = dim; `size_greedy` = size in GB; `lookup_greedy` = dim x
pooling factor; `size_lookup_greedy` = dim x pooling factor x log10(row).

`random` visits tables in task order and puts each on a device drawn
uniformly among the devices where it still fits (np.random.default_rng(problem.seed)).
Upstream drew among all devices and silently overfilled; drawing among the
devices with room keeps the plan valid whenever a random order allows it.

A table that fits on no device raises OutOfMemoryError with the numbers;
callers report the task as out-of-memory. Memory is counted in whole
elements (rows x dim), as the validator and every other sharder count it.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from neuroshard.planner.registry import ShardingContext, register
from neuroshard.planner.simulator import mem_cap_elements, table_elements
from neuroshard.problem import Problem
from neuroshard.types.errors import OutOfMemoryError
from neuroshard.types.plan import Plan
from neuroshard.types.tables import BYTES_PER_ELEMENT, ShardTable


def no_room_error(t: int, table: ShardTable, max_mem: float, used: Sequence[int]) -> OutOfMemoryError:
    """Table `t` fits on no device; `used`: fp32 elements per device (reported in GB)."""
    used = [u * BYTES_PER_ELEMENT / 2**30 for u in used]
    return OutOfMemoryError(
        f"table {t} ({table.size_gb:.4g} GB, rows {table.config.row}, dim {table.dim}) fits on no device: "
        f"max_mem {max_mem:g} GB, used per device "
        f"[{', '.join(f'{u:.4g}' for u in used)}] GB",
        table=t, size=table.size_gb, max_mem=max_mem, used=used)


def _plan(assignment: Sequence[int], ndevices: int) -> Plan:
    shards = [[] for _ in range(ndevices)]
    for t, d in enumerate(assignment):
        shards[d].append(t)
    return Plan(column_steps=(), shards=tuple(tuple(s) for s in shards))


def greedy_place(tables: Sequence[ShardTable], problem: Problem,
                 key: Callable[[ShardTable], float]) -> Plan:
    """Largest-key-first greedy placement on the device with the smallest key sum (see module doc)."""
    ndevices, max_mem = problem.ndevices, problem.max_mem
    keys = [float(key(t)) for t in tables]
    order = sorted(range(len(tables)), key=lambda i: (keys[i], tables[i].size_gb, i), reverse=True)
    key_sum = [0.0] * ndevices
    used = [0] * ndevices  # fp32 elements
    cap = mem_cap_elements(max_mem)
    assignment = [-1] * len(tables)
    for i in order:
        size = table_elements(tables[i])
        room = [d for d in range(ndevices) if used[d] + size <= cap]
        if not room:
            raise no_room_error(i, tables[i], max_mem, used)
        d = min(room, key=lambda r: (key_sum[r], used[r], r))
        assignment[i] = d
        key_sum[d] += keys[i]
        used[d] += size
    return _plan(assignment, ndevices)


def dim_key(t: ShardTable) -> float:
    return float(t.dim)


def size_key(t: ShardTable) -> float:
    return t.size_gb


def lookup_key(t: ShardTable) -> float:
    return t.dim * t.config.pooling_factor


def size_lookup_key(t: ShardTable) -> float:
    return t.dim * t.config.pooling_factor * math.log10(t.config.row)


@register("dim_greedy")
def dim_greedy(tables, problem: Problem, ctx: ShardingContext | None = None) -> Plan:
    """Greedy on dim: balances the pooled-embedding width (communication) per device."""
    return greedy_place(tables, problem, dim_key)


@register("size_greedy")
def size_greedy(tables, problem: Problem, ctx: ShardingContext | None = None) -> Plan:
    """Greedy on table size (GB): balances memory."""
    return greedy_place(tables, problem, size_key)


@register("lookup_greedy")
def lookup_greedy(tables, problem: Problem, ctx: ShardingContext | None = None) -> Plan:
    """Greedy on dim x pooling factor: balances lookup work (compute)."""
    return greedy_place(tables, problem, lookup_key)


@register("size_lookup_greedy")
def size_lookup_greedy(tables, problem: Problem, ctx: ShardingContext | None = None) -> Plan:
    """Greedy on dim x pooling factor x log10(row): lookup work weighted by table size."""
    return greedy_place(tables, problem, size_lookup_key)


@register("random")
def random_sharder(tables, problem: Problem, ctx: ShardingContext | None = None) -> Plan:
    """Each table (in task order) on a uniformly random device among those where it fits."""
    ndevices, max_mem = problem.ndevices, problem.max_mem
    rng = np.random.default_rng(problem.seed)
    used = [0] * ndevices  # fp32 elements
    cap = mem_cap_elements(max_mem)
    assignment = []
    for i, table in enumerate(tables):
        size = table_elements(table)
        room = [d for d in range(ndevices) if used[d] + size <= cap]
        if not room:
            raise no_room_error(i, table, max_mem, used)
        d = room[int(rng.integers(len(room)))]
        assignment.append(d)
        used[d] += size
    return _plan(assignment, ndevices)
