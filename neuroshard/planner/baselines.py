"""Baseline sharders (DESIGN.md §9): random and four greedy heuristics.

All place whole tables, except a table larger than every device: that one is
halved column-wise until its pieces fit the largest device (`oversize_steps`;
the paper's tasks have none, so their plans are whole-table plans), unless
the problem's constraints keep it whole or on some devices. Each greedy gives every table
a cost key, orders tables by (key, size, index) descending -- largest first,
ties broken by the larger size, then the larger index -- and puts each on the
device with the smallest key sum among the devices with memory room
(each device's own memory, `simulator.device_caps`, in whole fp32
elements) and that the table may use (the problem's constraints), ties
broken by least memory used, then the lowest device index. A co-located
group of tables is placed as one unit, its keys and sizes summed.

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
from neuroshard.planner.simulator import device_caps, table_elements
from neuroshard.problem import Problem
from neuroshard.types.errors import OutOfMemoryError
from neuroshard.types.plan import Plan, apply_column_steps
from neuroshard.types.tables import BYTES_PER_ELEMENT, ShardTable


def no_room_error(t: int, table: ShardTable, problem: Problem, used: Sequence[int],
                  allowed: Sequence[int] | None = None) -> OutOfMemoryError:
    """Table `t` (or `table`, a column piece of it) fits on no device (of `allowed`, when its constraints name
    them); `used`: fp32 elements per device (reported in GB)."""
    used = [u * BYTES_PER_ELEMENT / 2**30 for u in used]
    where = "" if allowed is None else f" of its devices {list(allowed)}"
    return OutOfMemoryError(
        f"table {t} ({table.size_gb:.4g} GB, rows {table.config.row}, dim {table.dim}) fits on no device{where}: "
        f"max_mem {problem.mem_text}, used per device "
        f"[{', '.join(f'{u:.4g}' for u in used)}] GB",
        table=t, size=table.size_gb, max_mem=min(problem.caps), used=used)


def placement_units(tables: Sequence[ShardTable], problem: Problem) -> list[tuple[list[int], list[int]]]:
    """What a whole-table placement places, in task order: each co-located group of the problem's
    constraints as one unit (at its first table's position), every other table alone; with the devices each
    unit may use. (members, devices) per unit."""
    cons = problem.table_constraints
    every = list(range(problem.ndevices))
    group_of = {t: g for g in cons.colocate for t in g}
    units, done = [], set()
    for t in range(len(tables)):
        if t in done:
            continue
        members = list(group_of.get(t, (t,)))
        done.update(members)
        devices = cons.group_devices(members, problem.ndevices)
        units.append((members, every if devices is None else list(devices)))
    return units


def oversize_steps(tables: Sequence[ShardTable], problem: Problem) -> list[int]:
    """Column steps that halve each table larger than the largest device until its pieces fit it; a table
    whose narrowest pieces would not fit either, or that the constraints keep whole or limit to some devices,
    is left whole."""
    cap, cons = max(device_caps(problem)), problem.table_constraints
    steps: list[int] = []
    for t, table in enumerate(tables):
        if cons.kept_whole(t) or cons.allowed(t) is not None:
            continue
        dim, halvings = table.dim, 0
        while table.config.row * dim > cap and cons.may_halve(t, dim):
            dim, halvings = dim // 2, halvings + 1
        if not halvings or table.config.row * dim > cap:
            continue
        # halve the table, then each piece, breadth first: 2**halvings pieces of `dim` columns
        n = len(tables) + len(steps)
        level = [t]
        for _ in range(halvings):
            nxt = []
            for i in level:
                steps.append(i)
                nxt += [i, n]
                n += 1
            level = nxt
    return steps


def piece_owners(ntables: int, column_steps: Sequence[int]) -> list[int]:
    """The task table each post-split table is a piece of."""
    owner = list(range(ntables))
    for i in column_steps:
        owner.append(owner[i])
    return owner


def _split_oversize(tables: Sequence[ShardTable], problem: Problem) -> tuple[list[ShardTable], list[int], list[int]]:
    """The tables a whole-table sharder places (`oversize_steps` applied), the steps, and each one's task table."""
    steps = oversize_steps(tables, problem)
    return apply_column_steps(tables, steps), steps, piece_owners(len(tables), steps)


def _plan(assignment: Sequence[int], ndevices: int, column_steps: Sequence[int] = ()) -> Plan:
    shards = [[] for _ in range(ndevices)]
    for t, d in enumerate(assignment):
        shards[d].append(t)
    return Plan(column_steps=tuple(column_steps), shards=tuple(tuple(s) for s in shards))


def greedy_place(tables: Sequence[ShardTable], problem: Problem,
                 key: Callable[[ShardTable], float]) -> Plan:
    """Largest-key-first greedy placement on the device with the smallest key sum (see module doc); a
    co-located group goes as one unit (its keys and sizes summed) to a device all its tables allow."""
    ndevices = problem.ndevices
    tables, steps, owner = _split_oversize(tables, problem)
    units = placement_units(tables, problem)
    keys = [sum(float(key(tables[t])) for t in m) for m, _ in units]
    gbs = [sum(tables[t].size_gb for t in m) for m, _ in units]
    order = sorted(range(len(units)), key=lambda u: (keys[u], gbs[u], units[u][0][0]), reverse=True)
    key_sum = [0.0] * ndevices
    used = [0] * ndevices  # fp32 elements
    caps = device_caps(problem)
    assignment = [-1] * len(tables)
    for u in order:
        members, devices = units[u]
        size = sum(table_elements(tables[t]) for t in members)
        room = [d for d in devices if used[d] + size <= caps[d]]
        if not room:
            t = max(members, key=lambda i: tables[i].size_gb)
            raise no_room_error(owner[t], tables[t], problem, used, None if len(devices) == ndevices else devices)
        d = min(room, key=lambda r: (key_sum[r], used[r], r))
        for t in members:
            assignment[t] = d
        key_sum[d] += keys[u]
        used[d] += size
    return _plan(assignment, ndevices, steps)


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
    """Each table (in task order; a co-located group as one) on a uniformly random device among those
    where it fits and that it may use."""
    ndevices = problem.ndevices
    rng = np.random.default_rng(problem.seed)
    tables, steps, owner = _split_oversize(tables, problem)
    used = [0] * ndevices  # fp32 elements
    caps = device_caps(problem)
    assignment = [-1] * len(tables)
    for members, devices in placement_units(tables, problem):
        size = sum(table_elements(tables[t]) for t in members)
        room = [d for d in devices if used[d] + size <= caps[d]]
        if not room:
            t = max(members, key=lambda i: tables[i].size_gb)
            raise no_room_error(owner[t], tables[t], problem, used, None if len(devices) == ndevices else devices)
        d = room[int(rng.integers(len(room)))]
        for t in members:
            assignment[t] = d
        used[d] += size
    return _plan(assignment, ndevices, steps)
