"""A sharding plan and its algebra: column-wise splits, the tables on each device, column pieces, and the
tables sharded over several ranks at once (row-wise, table-row-wise, data-parallel).

A plan is `(column_steps, shards, spread)` (DESIGN §3): applying step i halves
table i's dim and appends the other half at the end of the table list;
`shards[r]` lists the post-split tables on device r; `spread` lists the task
tables that are in no shard list because they are sharded by rows or
replicated, as TorchRec shards them:

* row-wise: the rows cut into one block per rank of the world, TorchRec's
  blocks (`row_blocks`: ceil(rows / k) rows each, the last ones shorter);
* table-row-wise: the same over the ranks of one host;
* data-parallel: a replica on every rank.

A spread table is whole (no column step), so its index is the same before and
after the splits.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace
from typing import Mapping, NamedTuple, Sequence

from neuroshard.types.codec import Record, json_field
from neuroshard.types.errors import InvalidPlanError
from neuroshard.types.tables import ShardTable, can_split


def apply_column_steps(tables: Sequence[ShardTable], column_steps: Sequence[int]) -> list[ShardTable]:
    """Apply column-wise splits: step i halves table i and appends its other half.

    Raises InvalidPlanError on an index out of range or a dim that cannot be split.
    """
    out = list(tables)
    for i in column_steps:
        if not 0 <= i < len(out):
            raise InvalidPlanError(f"column step {i} out of range (0..{len(out) - 1})")
        t = out[i]
        if not can_split(t.dim):
            raise InvalidPlanError(f"column step {i}: dim {t.dim} cannot be halved into a multiple of 4")
        half = replace(t, config=t.config.with_dim(t.dim // 2))
        out[i] = half
        out.append(half)
    return out


def column_offsets(tables: Sequence[ShardTable], column_steps: Sequence[int]) -> list[int]:
    """The first column, within its original table, of each post-split table.

    Step i keeps columns [offset, offset + dim/2) in table i and appends the
    other half [offset + dim/2, offset + dim). Raises InvalidPlanError like
    `apply_column_steps`.
    """
    apply_column_steps(tables, column_steps)  # validates the steps
    dims = [t.dim for t in tables]
    offsets = [0] * len(tables)
    for i in column_steps:
        dims[i] //= 2
        dims.append(dims[i])
        offsets.append(offsets[i] + dims[i])
    return offsets


ROW_WISE, TABLE_ROW_WISE, DATA_PARALLEL = "row_wise", "table_row_wise", "data_parallel"
SPREAD_KINDS = (ROW_WISE, TABLE_ROW_WISE, DATA_PARALLEL)


def row_blocks(rows: int, k: int) -> list[int]:
    """The rows of each of `k` row-wise shards of a `rows`-row table, as TorchRec cuts them: ceil(rows / k)
    each, the remainder on the next rank, none after it (10 rows over 4 ranks: 3, 3, 3, 1; 5 over 4: 2, 2, 1, 0)."""
    block = -(-rows // k)
    return [max(0, min(block, rows - j * block)) for j in range(k)]


def row_block_ranges(rows: int, k: int) -> list[tuple[int, int]]:
    """The rows [lo, hi) of each of the `row_blocks` (lo == hi for an empty one): 10 rows over 4 ranks:
    (0, 3), (3, 6), (6, 9), (9, 10)."""
    out, lo = [], 0
    for n in row_blocks(rows, k):
        out.append((lo, lo + n))
        lo += n
    return out


@dataclass(frozen=True)
class Spread(Record):
    """Task table `table`, whole, sharded `kind` (one of `SPREAD_KINDS`) over `ranks`: row block j on
    `ranks[j]` (row-wise, table-row-wise) or a replica on each (data-parallel)."""

    table: int
    kind: str
    ranks: tuple[int, ...]

    def rows_on(self, rows: int) -> list[int]:
        """The rows this table keeps on each of its ranks (`ranks` order)."""
        if self.kind == DATA_PARALLEL:
            return [rows] * len(self.ranks)
        return row_blocks(rows, len(self.ranks))

    def ranges_on(self, rows: int) -> list[tuple[int, int]]:
        """The rows [lo, hi) this table keeps on each of its ranks (`ranks` order; lo == hi for an empty block,
        the whole table for a replica)."""
        if self.kind == DATA_PARALLEL:
            return [(0, rows)] * len(self.ranks)
        return row_block_ranges(rows, len(self.ranks))


REDUCE_SCATTER, ALL_GATHER, ALL_REDUCE = "reduce_scatter", "all_gather", "all_reduce"
COLLECTIVES = (REDUCE_SCATTER, ALL_GATHER, ALL_REDUCE)
# the collectives each spread kind runs (`spread_collectives`): row blocks reduce-scatter their partial sums and
# all-gather the gradient; replicas all-reduce theirs
KIND_COLLECTIVES = {ROW_WISE: (REDUCE_SCATTER, ALL_GATHER), TABLE_ROW_WISE: (REDUCE_SCATTER, ALL_GATHER),
                    DATA_PARALLEL: (ALL_REDUCE,)}


def host_groups(k: int, world: int) -> list[tuple[int, ...]]:
    """The hosts of `world` ranks, k consecutive ranks each."""
    return [tuple(range(h, h + k)) for h in range(0, world, k)]


def fit_key(op: str, k: int | None, ndevices: int) -> str:
    """The name of `op` over groups of k of `ndevices` ranks, as the collective model keys its fits and samples:
    `op` over every rank (k None or `ndevices`), else `op@k` (a host's group)."""
    return op if k is None or k == ndevices else f"{op}@{k}"


@dataclass(frozen=True)
class SpreadCollective:
    """One collective the spread tables of a plan run each step: `op` (one of `COLLECTIVES`) over `ranks` on
    `numel` fp32 elements (the full tensor), in the forward (`backward` False) or backward pass."""

    op: str
    ranks: tuple[int, ...]
    numel: int
    backward: bool


def spread_collectives(dims: Sequence[int] | Mapping[int, int], rows: Sequence[int] | Mapping[int, int],
                       spread: Sequence[Spread], batch: int,
                       widths: Sequence[int] | Mapping[int, int] | None = None) -> list[SpreadCollective]:
    """The collectives of `spread` tables (task tables of `dims` and `rows`, by table index) at global batch
    `batch`, per group of ranks (in order of first appearance): the row-wise and table-row-wise tables of a group
    reduce-scatter their B x (their output widths: `widths`, `TableConfig.exchange_dim`, else their dims) partial
    sums forward and all-gather the gradient backward; its data-parallel tables all-reduce their (rows x dim)
    gradients backward, one collective for all of them."""
    widths = dims if widths is None else widths
    groups: dict[tuple[tuple[int, ...], bool], int] = {}
    for s in spread:
        rw = s.kind != DATA_PARALLEL
        key = (tuple(s.ranks), rw)
        groups[key] = groups.get(key, 0) + (batch * widths[s.table] if rw else rows[s.table] * dims[s.table])
    out = []
    for (ranks, rw), numel in groups.items():
        if rw:
            out += [SpreadCollective(REDUCE_SCATTER, ranks, numel, False), SpreadCollective(ALL_GATHER, ranks, numel,
                                                                                            True)]
        else:
            out.append(SpreadCollective(ALL_REDUCE, ranks, numel, True))
    return out


@dataclass(frozen=True)
class Plan(Record):
    """A sharding plan: column-wise splits, the (post-split) tables on each device, the spread tables."""

    column_steps: tuple[int, ...]
    shards: tuple[tuple[int, ...], ...]
    spread: tuple[Spread, ...] = json_field((), omit=lambda v: not v)

    @property
    def ndevices(self) -> int:
        return len(self.shards)

    def spread_of(self, table: int) -> Spread | None:
        """The spread entry of task table `table`, or None when it is in the shard lists."""
        for s in self.spread:
            if s.table == table:
                return s
        return None


def check_spread(plan: Plan, num_tables: int) -> dict[int, Spread]:
    """The spread tables of `plan` by task table, after the checks that hold for any task: each a whole
    table in range listed once, of a known kind, over distinct ranks that exist; row-wise and data-parallel
    over every rank, table-row-wise over a block of consecutive ranks that divides the world (a host) —
    TorchRec's row-wise and data-parallel sharding use the whole world, table-row-wise one host.
    InvalidPlanError naming the table."""
    n = plan.ndevices
    out: dict[int, Spread] = {}
    for s in plan.spread:
        t = s.table
        if isinstance(t, bool) or not isinstance(t, numbers.Integral) or not 0 <= t < num_tables:
            raise InvalidPlanError(f"spread table {t!r} out of range (0..{num_tables - 1})")
        if t in out:
            raise InvalidPlanError(f"table {t} is listed twice among the spread tables")
        if s.kind not in SPREAD_KINDS:
            raise InvalidPlanError(f"table {t}: sharding type {s.kind!r} is not one of {', '.join(SPREAD_KINDS)}")
        ranks = list(s.ranks)
        if not ranks or len(set(ranks)) != len(ranks) or any(not 0 <= r < n for r in ranks):
            raise InvalidPlanError(f"table {t} ({s.kind}): ranks {ranks} must be distinct devices of 0..{n - 1}")
        if s.kind in (ROW_WISE, DATA_PARALLEL) and ranks != list(range(n)):
            raise InvalidPlanError(f"table {t} ({s.kind}): TorchRec shards it over every rank in order "
                                   f"(0..{n - 1}), the plan gives {ranks}")
        k = len(ranks)
        if s.kind == TABLE_ROW_WISE and (n % k or tuple(ranks) not in host_groups(k, n)):
            raise InvalidPlanError(f"table {t} (table_row_wise): ranks {ranks} are not one host's consecutive "
                                   f"ranks (a block whose size divides the {n} ranks)")
        if t in plan.column_steps:
            raise InvalidPlanError(f"table {t} is {s.kind} and column-split at once")
        out[t] = s
    return out


def table_devices(plan: Plan, num_tables: int) -> list[int | None]:
    """The device of each of the `num_tables` post-split tables of `plan` (None for a spread table): the one
    check that every table index is an integer in range placed on exactly one device, or spread
    (`check_spread`) and then on none (InvalidPlanError naming the first that is not)."""
    spread = check_spread(plan, num_tables)
    owner: dict[int, int] = {}
    for r, shard in enumerate(plan.shards):
        for i in shard:
            if isinstance(i, bool) or not isinstance(i, numbers.Integral):
                raise InvalidPlanError(f"device {r}: table index {i!r} is not an integer")
            if not 0 <= i < num_tables:
                raise InvalidPlanError(f"device {r}: table {i} out of range (0..{num_tables - 1})")
            if i in owner:
                where = f"twice on device {r}" if owner[i] == r else f"on devices {owner[i]} and {r}"
                raise InvalidPlanError(f"table {i} placed {where}")
            if i in spread:
                raise InvalidPlanError(f"table {i} is {spread[i].kind} and also placed on device {r}")
            owner[int(i)] = r
    missing = [i for i in range(num_tables) if i not in owner and i not in spread]
    if missing:
        shown = missing[:10] + (["..."] if len(missing) > 10 else [])
        raise InvalidPlanError(f"tables {shown} are placed on no device")
    return [owner.get(i) for i in range(num_tables)]


class ColumnPiece(NamedTuple):
    """Columns [offset, offset + dim) of an original table, held by `device`."""

    offset: int
    dim: int
    device: int


def plan_pieces(tables: Sequence[ShardTable], plan: Plan) -> list[list[ColumnPiece]]:
    """Per original table, its pieces in column order (none for a spread table). `plan` must be valid
    (`simulator.validate_plan`)."""
    offsets = column_offsets(tables, plan.column_steps)
    split = apply_column_steps(tables, plan.column_steps)
    pieces: list[list[ColumnPiece]] = [[] for _ in tables]
    for r, shard in enumerate(plan.shards):
        for i in shard:
            pieces[split[i].origin].append(ColumnPiece(offsets[i], split[i].dim, r))
    return [sorted(p) for p in pieces]


def merge_colocated_halves(tables: Sequence[ShardTable], plan: Plan) -> Plan:
    """The plan with every column split whose two halves end on the same device undone (repeatedly, so a
    table cut in quarters on one device becomes whole again); `plan` itself when there is none.

    Two half-width tables with the same lookups on one device cost more than the table they came from
    (FBGEMM), so such a split never helps; a cost model
    that predicts otherwise has not been shown such shards. `plan` must be valid.
    """
    pieces = plan_pieces(tables, plan)
    merged = []
    for table_pieces in pieces:
        ps = list(table_pieces)
        changed = True
        while changed:
            changed = False
            for k in range(len(ps) - 1):
                a, b = ps[k], ps[k + 1]
                # siblings of one halving: equal widths, the first aligned on twice that width
                if a.device == b.device and a.dim == b.dim and b.offset == a.offset + a.dim \
                        and a.offset % (2 * a.dim) == 0:
                    ps[k:k + 2] = [ColumnPiece(a.offset, 2 * a.dim, a.device)]
                    changed = True
                    break
        merged.append(ps)
    if [len(p) for p in merged] == [len(p) for p in pieces]:
        return plan
    return plan_from_pieces(tables, merged, plan.ndevices, plan.spread)


def plan_from_pieces(tables: Sequence[ShardTable], pieces: Sequence[Sequence[ColumnPiece]], ndevices: int,
                     spread: Sequence[Spread] = ()) -> Plan:
    """The plan that cuts each table into `pieces[t]` by halvings and puts each piece on its device, with
    the `spread` tables (whose pieces are empty) as given.

    Inverse of `plan_pieces`, in a canonical form: tables in order, each cut
    depth-first (split, then its first half, then its second half); each
    device's tables sorted. Raises InvalidPlanError when a table's pieces are
    not the leaves of a halving tree (a piece straddling a halving point,
    columns covered twice or never, a half that is not a multiple of 4) or a
    device is out of range.
    """
    if len(pieces) != len(tables):
        raise InvalidPlanError(f"pieces for {len(pieces)} tables, the task has {len(tables)}")
    steps: list[int] = []
    shards: list[list[int]] = [[] for _ in range(ndevices)]
    count = len(tables)

    def cut(t: int, index: int, offset: int, dim: int, inside: list[ColumnPiece]) -> None:
        nonlocal count
        if len(inside) == 1 and inside[0].offset == offset and inside[0].dim == dim:
            device = inside[0].device
            if not 0 <= device < ndevices:
                raise InvalidPlanError(f"table {t}: columns [{offset}, {offset + dim}) on device {device}, "
                                       f"expected 0..{ndevices - 1}")
            shards[device].append(index)
            return
        if not inside:
            raise InvalidPlanError(f"table {t}: columns [{offset}, {offset + dim}) are on no device")
        if not can_split(dim):
            shown = ", ".join(f"[{p.offset}, {p.offset + p.dim})" for p in inside)
            raise InvalidPlanError(f"table {t}: pieces {shown} are not halvings of columns "
                                   f"[{offset}, {offset + dim}) into multiples of 4")
        half = dim // 2
        straddle = [p for p in inside if p.offset < offset + half < p.offset + p.dim]
        if straddle:
            p = straddle[0]
            raise InvalidPlanError(f"table {t}: columns [{p.offset}, {p.offset + p.dim}) straddle the halving "
                                   f"point {offset + half} of columns [{offset}, {offset + dim})")
        steps.append(index)
        second = count
        count += 1
        cut(t, index, offset, half, [p for p in inside if p.offset < offset + half])
        cut(t, second, offset + half, half, [p for p in inside if p.offset >= offset + half])

    spread_tables = {s.table for s in spread}
    for t, table in enumerate(tables):
        if t in spread_tables:
            if pieces[t]:
                raise InvalidPlanError(f"table {t} is spread and has column pieces too")
            continue
        inside = sorted(pieces[t])
        outside = [p for p in inside if p.offset < 0 or p.offset + p.dim > table.dim or p.dim <= 0]
        if outside:
            raise InvalidPlanError(f"table {t} (dim {table.dim}): piece of columns "
                                   f"[{outside[0].offset}, {outside[0].offset + outside[0].dim}) out of range")
        cut(t, t, 0, table.dim, inside)
    return Plan(tuple(steps), tuple(tuple(sorted(s)) for s in shards), tuple(spread))
