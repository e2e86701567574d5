"""The plan space of a small task: every distinct plan, enumerated, and the plans one move away from a plan.

A plan is measured to know what the hardware's best plan is (`eval.regret`), so two plans that run the
same work on the same kind of device are one plan: plans are counted **up to device relabelling** (devices of
the same memory, the same tables allowed, in the same places of the hosts are interchangeable) and **up to
identical tables** (two tables of a task with the same dataset table and dim have the same rows and lookups).
Each table is, per `SpaceSpec.kinds`:

* table-wise: whole on one device;
* column-wise: cut into 2, 4, ... equal pieces by halvings (up to `split_depth` halvings) on as many distinct
  devices (pieces of one table on one device cost more than the same columns in one piece:
  `types.plan.merge_colocated_halves`);
* row-wise or data-parallel over every rank, table-row-wise over one host's ranks (`types.plan.Spread`).

Row blocks hold different rows, and so different lookups, on each rank: a relabelling that moves a row-wise
block to another rank is another plan, and a table-row-wise table may only go to another host with its blocks
in order (`_spread_image`). A data-parallel table is the same on every rank. Every plan is checked by
`simulator.validate_plan` (memory of each device, the problem's table constraints).

5 distinct tables table-wise on 4 devices: the set partitions of 5 items into at most 4 blocks, 1 + 15 + 25 +
10 = 51 plans; two of them identical: 1 + 11 + 13 + 6 = 31 (`tests/planner/test_space.py`).

`neighbours` lists the distinct plans one move from a plan (a piece moved or two swapped, a table split onto
another device or its halves joined, a table made row-wise, data-parallel or table-row-wise, or put back on
one device), each canonical: the hardware-in-the-loop search of `eval.regret` walks them where a space is too
large to measure whole.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterator, Sequence

from neuroshard.planner.simulator import replicable, validate_plan
from neuroshard.problem import Problem
from neuroshard.types.errors import InvalidPlanError, NeuroShardError, OutOfMemoryError
from neuroshard.types.plan import (
    DATA_PARALLEL,
    ROW_WISE,
    TABLE_ROW_WISE,
    ColumnPiece,
    Plan,
    Spread,
    plan_from_pieces,
    plan_pieces,
)
from neuroshard.types.tables import ShardTable, can_split

COLUMN_WISE = "column_wise"
SPACE_KINDS = (COLUMN_WISE, ROW_WISE, DATA_PARALLEL, TABLE_ROW_WISE)
# above this many raw placements (before removing relabellings) a space is not enumerated at all
MAX_RAW = 2_000_000


class SpaceTooLarge(NeuroShardError):
    """The plan space holds more plans than asked for (or more raw placements than `MAX_RAW`)."""


@dataclass(frozen=True)
class SpaceSpec:
    """What a plan space holds beyond table-wise plans: the sharding `kinds` (of `SPACE_KINDS`), up to
    `split_depth` halvings of a column-wise table (1: halves; 2: halves or quarters), and the kinds of `kinds`
    given only to a table larger than every device (`large_only`: a row-wise table where one is needed)."""

    kinds: tuple[str, ...] = (COLUMN_WISE,)
    split_depth: int = 1
    large_only: tuple[str, ...] = ()

    def __post_init__(self):
        bad = [k for k in (*self.kinds, *self.large_only) if k not in SPACE_KINDS]
        if bad:
            raise ValueError(f"unknown sharding kind {bad[0]!r} (one of {', '.join(SPACE_KINDS)})")
        if int(self.split_depth) < 1:
            raise ValueError(f"split_depth must be >= 1, got {self.split_depth}")


# --------------------------------------------------------------------------- canonical form

# A placed piece's label: (dataset table, width, whole or a column piece); a spread table's: (kind, dataset
# table, dim, ranks). Equal labels are interchangeable pieces.


def _piece_label(table: ShardTable, width: int) -> tuple:
    return (table.table_id, width, width != table.dim)


def device_group(problem: Problem) -> list[tuple[int, ...]]:
    """The device permutations (`perm[d]`: where device d's work goes) that map the problem onto itself: devices
    of the same memory, each table's allowed devices onto themselves, hosts onto hosts with their ranks in
    order. The identity first."""
    n, caps = problem.ndevices, problem.caps
    allowed = [set(ds) for _, ds in problem.table_constraints.devices]
    hosts = problem.hosts
    if problem.uniform and not allowed and len(hosts) == 1:
        return list(itertools.permutations(range(n)))  # every relabelling (the common case, fast path below)
    out = []
    for perm in itertools.permutations(range(n)):
        if any(caps[d] != caps[perm[d]] for d in range(n)):
            continue
        if any({perm[d] for d in ds} != ds for ds in allowed):
            continue
        if any(tuple(perm[r] for r in h) not in hosts for h in hosts):
            continue
        out.append(perm)
    return out


def _spread_image(s: Spread, perm: Sequence[int], problem: Problem) -> tuple[int, ...] | None:
    """The ranks of spread table `s` after relabelling by `perm`, or None when the relabelled plan is no plan:
    a row-wise table's blocks must stay on the ranks in order, a table-row-wise one's go to a host's ranks in
    order, a data-parallel table is the same on every rank."""
    ranks = tuple(perm[r] for r in s.ranks)
    if s.kind == DATA_PARALLEL:
        return tuple(sorted(ranks))
    if s.kind == ROW_WISE:
        return ranks if ranks == tuple(s.ranks) else None
    return ranks if ranks in problem.hosts else None


def _signature(devices: Sequence[int], labels: Sequence[tuple], spread: Sequence[tuple], n: int) -> tuple:
    blocks = [[] for _ in range(n)]
    for d, label in zip(devices, labels):
        blocks[d].append(label)
    return tuple(sorted(spread)), tuple(tuple(sorted(b)) for b in blocks)


@dataclass(frozen=True)
class _Layout:
    """A plan as pieces: per task table its column pieces (`plan_pieces`) and the spread tables."""

    pieces: tuple[tuple[ColumnPiece, ...], ...]
    spread: tuple[Spread, ...]

    @classmethod
    def of(cls, tables: Sequence[ShardTable], plan: Plan) -> "_Layout":
        return cls(tuple(tuple(p) for p in plan_pieces(tables, plan)), tuple(plan.spread))

    def plan(self, tables: Sequence[ShardTable], n: int) -> Plan:
        return plan_from_pieces(tables, [list(p) for p in self.pieces], n,
                                sorted(self.spread, key=lambda s: s.table))


def _canonical(tables: Sequence[ShardTable], layout: _Layout, problem: Problem,
               group: Sequence[tuple[int, ...]]) -> tuple[tuple, _Layout]:
    """(key, layout) of the plan's canonical form: the smallest signature over the relabellings of `group` that
    keep it a plan, and the layout relabelled so."""
    n = problem.ndevices
    flat = [(t, p) for t, ps in enumerate(layout.pieces) for p in ps]
    labels = [_piece_label(tables[t], p.dim) for t, p in flat]
    devices = [p.device for _, p in flat]
    best = None
    fast = len(group) == math.factorial(n) and all(s.kind == DATA_PARALLEL for s in layout.spread)
    # every relabelling allowed: the smallest signature sorts the devices' blocks (the permutation that does)
    perms = [_sorting_perm(devices, labels, n)] if fast else group
    for perm in perms:
        ranks = [_spread_image(s, perm, problem) for s in layout.spread]
        if any(r is None for r in ranks):
            continue
        spread = [(s.kind, tables[s.table].table_id, tables[s.table].dim, r) for s, r in zip(layout.spread, ranks)]
        sig = _signature([perm[d] for d in devices], labels, spread, n)
        if best is None or sig < best[0]:
            best = (sig, perm, ranks)
    sig, perm, ranks = best
    moved = [[] for _ in tables]
    for t, p in flat:
        moved[t].append(ColumnPiece(p.offset, p.dim, perm[p.device]))
    spread = tuple(Spread(s.table, s.kind, r) for s, r in zip(layout.spread, ranks))
    return sig, _Layout(tuple(tuple(sorted(p)) for p in moved), spread)


def _sorting_perm(devices: Sequence[int], labels: Sequence[tuple], n: int) -> tuple[int, ...]:
    blocks = [[] for _ in range(n)]
    for d, label in zip(devices, labels):
        blocks[d].append(label)
    order = sorted(range(n), key=lambda d: tuple(sorted(blocks[d])))
    perm = [0] * n
    for new, old in enumerate(order):
        perm[old] = new
    return tuple(perm)


def plan_key(tables: Sequence[ShardTable], plan: Plan, problem: Problem) -> tuple:
    """What is the same for every plan that is `plan` up to device relabelling and identical tables."""
    return _canonical(tables, _Layout.of(tables, plan), problem, device_group(problem))[0]


def canonical_plan(tables: Sequence[ShardTable], plan: Plan, problem: Problem) -> Plan:
    """The one plan of `plan`'s class (`plan_key`) that `enumerate_plans` lists."""
    _, layout = _canonical(tables, _Layout.of(tables, plan), problem, device_group(problem))
    return layout.plan(tables, problem.ndevices)


# --------------------------------------------------------------------------- enumeration


def _table_options(tables: Sequence[ShardTable], problem: Problem, spec: SpaceSpec) -> list[list[tuple]]:
    """Per table the ways it may be sharded: ("whole",), ("pieces", k) for k equal column pieces, (kind, ranks)
    for a spread kind over those ranks."""
    n, cons, cap = problem.ndevices, problem.table_constraints, max(problem.caps)
    out = []
    for t, table in enumerate(tables):
        opts = []
        if table.size_gb <= cap:
            opts.append(("whole",))
        kinds = [k for k in spec.kinds if k not in spec.large_only or table.size_gb > cap]
        if COLUMN_WISE in kinds and not cons.kept_whole(t):
            dim, k = table.dim, 1
            for _ in range(spec.split_depth):
                if not can_split(dim) or 2 * k > n:
                    break
                dim, k = dim // 2, 2 * k
                opts.append(("pieces", k))
        if ROW_WISE in kinds and cons.may_spread(t, ROW_WISE, n) and table.config.row >= n:
            opts.append((ROW_WISE, tuple(range(n))))
        if DATA_PARALLEL in kinds and cons.may_spread(t, DATA_PARALLEL, n) and replicable(table, problem):
            opts.append((DATA_PARALLEL, tuple(range(n))))
        if TABLE_ROW_WISE in kinds and problem.local_world_size and \
                cons.may_spread(t, TABLE_ROW_WISE, n) and table.config.row >= problem.local_world_size:
            opts += [(TABLE_ROW_WISE, h) for h in problem.hosts]
        out.append(opts)
    return out


def _set_partitions(m: int, n: int) -> Iterator[tuple[int, ...]]:
    """Every assignment of m items to at most n unlabelled blocks, once each (restricted growth strings: item i
    goes to a block used before it or to the next new one)."""
    if m == 0:
        yield ()
        return
    a = [0] * m

    def grow(i: int, used: int):
        if i == m:
            yield tuple(a)
            return
        for b in range(min(used + 1, n)):
            a[i] = b
            yield from grow(i + 1, max(used, b + 1))

    yield from grow(1, 1)


def _bell_bound(m: int, n: int) -> int:
    """How many assignments `_set_partitions(m, n)` yields (Stirling numbers of the second kind summed)."""
    s = [[0] * (n + 1) for _ in range(m + 1)]
    s[0][0] = 1
    for i in range(1, m + 1):
        for k in range(1, n + 1):
            s[i][k] = k * s[i - 1][k] + s[i - 1][k - 1]
    return sum(s[m][1:]) if m else 1


def space_size_bound(tables: Sequence[ShardTable], problem: Problem, spec: SpaceSpec) -> int:
    """The raw placements `enumerate_plans` would go through (an upper bound on the distinct plans)."""
    n, group = problem.ndevices, device_group(problem)
    total = 0
    for choice in itertools.product(*_table_options(tables, problem, spec)):
        m = sum(1 if c[0] == "whole" else c[1] if c[0] == "pieces" else 0 for c in choice)
        fast = len(group) == math.factorial(n) and not any(c[0] in (ROW_WISE, TABLE_ROW_WISE) for c in choice)
        total += _bell_bound(m, n) if fast else n ** m
        if total > MAX_RAW:
            return total
    return total


def enumerate_plans(tables: Sequence[ShardTable], problem: Problem, spec: SpaceSpec = SpaceSpec(),
                    limit: int | None = None) -> list[Plan]:
    """Every distinct valid plan of the task (module doc), canonical (`canonical_plan`), in a deterministic
    order. SpaceTooLarge when there are more than `limit` (None: no limit) or more than `MAX_RAW` raw
    placements to go through."""
    n, group = problem.ndevices, device_group(problem)
    raw = space_size_bound(tables, problem, spec)
    if raw > MAX_RAW:
        raise SpaceTooLarge(f"the plan space has more than {MAX_RAW:,} raw placements ({len(tables)} tables, "
                            f"{n} devices, kinds {', '.join(spec.kinds) or 'table-wise only'})")
    seen: dict[tuple, Plan] = {}
    for choice in itertools.product(*_table_options(tables, problem, spec)):
        items = []  # (table, offset, width) of each piece to place
        spread = []
        for t, c in enumerate(choice):
            if c[0] == "whole":
                items.append((t, 0, tables[t].dim))
            elif c[0] == "pieces":
                w = tables[t].dim // c[1]
                items += [(t, j * w, w) for j in range(c[1])]
            else:
                spread.append(Spread(t, c[0], c[1]))
        fast = len(group) == math.factorial(n) and not any(s.kind != DATA_PARALLEL for s in spread)
        assignments = _set_partitions(len(items), n) if fast else itertools.product(range(n), repeat=len(items))
        for devs in assignments:
            pieces = [[] for _ in tables]
            for (t, off, w), d in zip(items, devs):
                pieces[t].append(ColumnPiece(off, w, d))
            if any(len({p.device for p in ps}) < len(ps) for ps in pieces):
                continue  # a table's pieces on distinct devices
            key, layout = _canonical(tables, _Layout(tuple(tuple(p) for p in pieces), tuple(spread)), problem, group)
            if key in seen:
                continue
            plan = layout.plan(tables, n)
            try:
                validate_plan(tables, plan, problem)
            except (OutOfMemoryError, InvalidPlanError):
                seen[key] = None
                continue
            seen[key] = plan
            if limit is not None and sum(p is not None for p in seen.values()) > limit:
                raise SpaceTooLarge(f"the plan space has more than {limit} plans")
    return [p for p in seen.values() if p is not None]


# --------------------------------------------------------------------------- neighbours


def _moves(tables: Sequence[ShardTable], layout: _Layout, problem: Problem, spec: SpaceSpec) -> Iterator[_Layout]:
    """Every layout one move from `layout` (module doc), not yet checked."""
    n = problem.ndevices
    pieces = [list(p) for p in layout.pieces]
    spread = {s.table: s for s in layout.spread}
    options = [[o for o in opts if o[0] not in ("whole", "pieces")] for opts in _table_options(tables, problem, spec)]

    def with_table(t: int, new: Sequence[ColumnPiece], kind: Spread | None = None) -> _Layout:
        ps = [tuple(p) for p in pieces]
        ps[t] = tuple(sorted(new))
        sp = tuple(s for s in layout.spread if s.table != t) + ((kind,) if kind is not None else ())
        return _Layout(tuple(ps), sp)

    for t, ps in enumerate(pieces):
        held = {p.device for p in ps}
        for j, p in enumerate(ps):  # one piece to another device
            for d in range(n):
                if d not in held:
                    yield with_table(t, ps[:j] + [p._replace(device=d)] + ps[j + 1:])
        if len(ps) == 1 and COLUMN_WISE in spec.kinds and can_split(ps[0].dim):  # split onto another device
            p, half = ps[0], ps[0].dim // 2
            for d in range(n):
                if d != p.device:
                    yield with_table(t, [ColumnPiece(p.offset, half, p.device), ColumnPiece(p.offset + half, half, d)])
        if len(ps) == 2 and ps[0].dim == ps[1].dim:  # halves joined, on either device
            for p in ps:
                yield with_table(t, [ColumnPiece(0, tables[t].dim, p.device)])
        if ps:  # made spread
            for opt in options[t]:
                yield with_table(t, [], Spread(t, opt[0], opt[1]))
    for t, s in spread.items():  # spread back onto one device, or another spread kind
        for d in range(n):
            yield with_table(t, [ColumnPiece(0, tables[t].dim, d)])
        for opt in options[t]:
            if (opt[0], opt[1]) != (s.kind, tuple(s.ranks)):
                yield with_table(t, [], Spread(t, opt[0], opt[1]))
    flat = [(t, j) for t, ps in enumerate(pieces) for j in range(len(ps))]
    for (t, j), (u, k) in itertools.combinations(flat, 2):  # two pieces of two tables swap devices
        a, b = pieces[t][j], pieces[u][k]
        if t == u or a.device == b.device:
            continue
        if b.device in {p.device for p in pieces[t]} or a.device in {p.device for p in pieces[u]}:
            continue
        ps = [tuple(p) for p in pieces]
        ps[t] = tuple(sorted(pieces[t][:j] + [a._replace(device=b.device)] + pieces[t][j + 1:]))
        ps[u] = tuple(sorted(pieces[u][:k] + [b._replace(device=a.device)] + pieces[u][k + 1:]))
        yield _Layout(tuple(ps), layout.spread)


def neighbours(tables: Sequence[ShardTable], plan: Plan, problem: Problem, spec: SpaceSpec = SpaceSpec()) -> list[Plan]:
    """The distinct valid plans one move from `plan` (module doc), canonical, `plan`'s own class left out, in a
    deterministic order."""
    group = device_group(problem)
    own, _ = _canonical(tables, _Layout.of(tables, plan), problem, group)
    seen = {own}
    out = []
    for layout in _moves(tables, _Layout.of(tables, plan), problem, spec):
        key, canon = _canonical(tables, layout, problem, group)
        if key in seen:
            continue
        seen.add(key)
        try:
            candidate = canon.plan(tables, problem.ndevices)
            validate_plan(tables, candidate, problem)
        except (OutOfMemoryError, InvalidPlanError):
            continue
        out.append(candidate)
    return out
