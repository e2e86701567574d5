"""Tables: the statistics of a dataset table, a task's tables with dims, and table sizes.

Units: sizes in GB (2**30 bytes).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Sequence

NUM_BINS = 17
BYTES_PER_ELEMENT = 4  # fp32 weights
# The locality profile to assume for a table whose access counts are unknown: the aggregate
# "Histogram of col sizes" of the public 2021 DLRM dataset (reference/, first block), i.e. the
# share of distinct rows looked up once, 2 times, 3-4 times, ... in a batch.
DEFAULT_BINS = (0.473, 0.152, 0.139, 0.112, 0.072, 0.032, 0.011, 0.005, 0.002, 0.001) + (0.0,) * 7


def size_gb(row: int, dim: int) -> float:
    """Size in GB of an fp32 embedding table of `row` rows and `dim` columns."""
    return row * dim * BYTES_PER_ELEMENT / 2**30


def dim_set(max_dim: int) -> list[int]:
    """Dims from `max_dim` halving down to 4: 128 -> [128, 64, 32, 16, 8, 4]."""
    if max_dim < 4 or max_dim & (max_dim - 1):
        raise ValueError(f"max_dim must be a power of two >= 4, got {max_dim}")
    dims = []
    d = max_dim
    while d >= 4:
        dims.append(d)
        d //= 2
    return dims


def can_split(dim: int) -> bool:
    """A table can be column-split while its half dim is still a multiple of 4."""
    return dim % 8 == 0


def _check_dim(dim) -> None:
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim <= 0 or dim % 4:
        raise ValueError(f"dim must be a positive multiple of 4, got {dim!r}")


@dataclass(frozen=True)
class TableConfig:
    """Statistics of one embedding table (one entry of `table_configs.json`).

    `row`: number of rows; `pooling_factor`: mean lookups per sample;
    `bins`: the 17 locality bins (fraction of distinct indices by access
    count); `dim`: the embedding dim, set for augmented/task tables only.
    `row_lookups`: where in the table the lookups fall, read from the ids: the
    share of them in each of len(row_lookups) equal ranges of the rows (None:
    not known, a range of rows is assumed to take its share of the rows);
    a row-wise block's lookups come from it (`row_block`).
    `pooled`: the table's kind. True (the default): a pooled bag (an
    `EmbeddingBagCollection`'s table), each sample's lookups summed into one
    row of `dim`; False: an unpooled sequence table (an `EmbeddingCollection`'s),
    every looked-up row its own output row, so a sample sends `pooling_factor`
    rows of `dim` back (`exchange_dim`).
    """

    row: int
    pooling_factor: float
    bins: tuple[float, ...]
    dim: int | None = None
    row_lookups: tuple[float, ...] | None = None
    pooled: bool = True

    def __post_init__(self):
        # Every config is checked where it is made (file, generator or library call): a NaN or
        # negative statistic would otherwise come out much later as a NaN cost or a false
        # "out of memory".
        if isinstance(self.row, bool) or not isinstance(self.row, numbers.Integral) or self.row < 1:
            raise ValueError(f"row must be a positive integer, got {self.row!r}")
        if isinstance(self.pooling_factor, bool) or not isinstance(self.pooling_factor, numbers.Real) \
                or not math.isfinite(self.pooling_factor) or self.pooling_factor < 0:
            raise ValueError(f"pooling_factor must be a finite number >= 0, got {self.pooling_factor!r}")
        if len(self.bins) != NUM_BINS:
            raise ValueError(f"expected {NUM_BINS} bins, got {len(self.bins)}")
        for j, b in enumerate(self.bins):
            if isinstance(b, bool) or not isinstance(b, numbers.Real) or not (0.0 <= b <= 1.0):
                raise ValueError(f"bin_{j} must be a fraction in [0, 1], got {b!r}")
        if sum(self.bins) > 1.0 + 1e-3:  # the published stats are rounded to 3 digits
            raise ValueError(f"bins sum to {sum(self.bins):.6g} > 1 (they are fractions of the distinct rows)")
        if self.dim is not None:
            _check_dim(self.dim)
        if self.row_lookups is not None:
            shares = self.row_lookups
            if not 1 <= len(shares) <= self.row or any(
                    isinstance(x, bool) or not isinstance(x, numbers.Real) or not 0.0 <= x <= 1.0 for x in shares):
                raise ValueError(f"row_lookups must be 1 to row ({self.row}) shares in [0, 1], got {list(shares)!r}")
            if abs(sum(shares) - 1.0) > 1e-3 and sum(shares) > 0:
                raise ValueError(f"row_lookups sum to {sum(shares):.6g}, not 1 (they are shares of the lookups)")
        if not isinstance(self.pooled, bool):
            raise ValueError(f"pooled must be true or false, got {self.pooled!r}")

    def _derived(self, **fields) -> "TableConfig":
        """A copy with `fields` changed, checked by the caller: the others were checked when this config was
        made (the search derives one config per table and split level, and the spread search one per rank of a
        row-wise table: tens of thousands at scale)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        for name, value in fields.items():
            object.__setattr__(new, name, value)
        return new

    def with_dim(self, dim: int) -> "TableConfig":
        if dim is not None:
            _check_dim(dim)
        return self._derived(dim=dim)

    def batch_share(self, k: int) -> "TableConfig":
        """This table over 1/k of the samples (a data-parallel rank's local batch): the same rows and locality,
        a k-th of the lookups per sample of the whole batch."""
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"a batch share needs k >= 1 ranks, got {k!r}")
        return self._derived(pooling_factor=self.pooling_factor / k)

    def row_block(self, lo: int, hi: int) -> "TableConfig":
        """Rows [lo, hi) of this table (a row-wise block) with the lookups that fall in them and the table's
        locality. The lookups: from `row_lookups` where the ids gave it (a range cut by the block counts with
        the part of its rows inside), else the rows' share of the table's. The locality stays the table's: a
        small block's own reuse statistics fall outside what the compute model was trained on (whole tables)."""
        if not 0 <= lo < hi <= self.row:
            raise ValueError(f"row block [{lo}, {hi}) is not inside the table's {self.row} rows")
        return self._derived(row=hi - lo, pooling_factor=self.pooling_factor * self.lookup_share(lo, hi),
                             row_lookups=None)

    def lookup_share(self, lo: int, hi: int) -> float:
        """The share of the table's lookups that fall in rows [lo, hi) (`row_block`)."""
        if self.row_lookups is None:
            return (hi - lo) / self.row
        n, share = len(self.row_lookups), 0.0
        for i in range(lo * n // self.row, min(n, -(-hi * n // self.row))):  # the ranges [lo, hi) reaches into
            a, b = i * self.row / n, (i + 1) * self.row / n  # range i's rows
            share += self.row_lookups[i] * (min(b, hi) - max(a, lo)) / (b - a)
        return share

    @property
    def size_gb(self) -> float:
        if self.dim is None:
            raise ValueError("table has no dim")
        return size_gb(self.row, self.dim)

    @property
    def exchange_dim(self) -> int:
        """The floats per sample of this table's output exchange, in the unit of the comm models' per-device dim
        sums: its dim when pooled; when unpooled, its dim times its pooling factor (every looked-up row goes back
        to the sample's rank), rounded to whole floats."""
        if self.dim is None:
            raise ValueError("table has no dim")
        return self.dim if self.pooled else round(self.dim * self.pooling_factor)

    def to_json(self) -> dict:
        d = {"row": self.row, "pooling_factor": self.pooling_factor}
        d.update({f"bin_{j}": b for j, b in enumerate(self.bins)})
        if self.dim is not None:
            d["dim"] = self.dim
        if self.row_lookups is not None:
            d["row_lookups"] = list(self.row_lookups)
        if not self.pooled:
            d["pooled"] = False
        return d

    @classmethod
    def from_json(cls, d: dict) -> "TableConfig":
        """Build from a JSON object; raises KeyError/TypeError/ValueError on bad fields."""
        row = d["row"]
        if isinstance(row, float) and row == int(row):
            row = int(row)  # 1000.0 is a row count written by a tool that only knows floats
        shares = d.get("row_lookups")
        if shares is not None and not isinstance(shares, list):
            raise TypeError(f"row_lookups must be a list of shares, got {shares!r}")
        return cls(row, d["pooling_factor"], tuple(d[f"bin_{j}"] for j in range(NUM_BINS)), d.get("dim"),
                   None if shares is None else tuple(shares), d.get("pooled", True))


@dataclass(frozen=True)
class Task:
    """A sharding task: dataset table ids (may repeat) and the dim chosen for each."""

    table_ids: tuple[int, ...]
    dims: tuple[int, ...]

    def __post_init__(self):
        if len(self.table_ids) != len(self.dims):
            raise ValueError("table_ids and dims differ in length")

    def __len__(self) -> int:
        return len(self.table_ids)

    def tables(self, configs: Sequence[TableConfig]) -> list["ShardTable"]:
        """The task's tables as `ShardTable`s (before any column split)."""
        return [ShardTable(i, tid, configs[tid].with_dim(d))
                for i, (tid, d) in enumerate(zip(self.table_ids, self.dims))]


@dataclass(frozen=True)
class ShardTable:
    """A (possibly column-split) table of a task.

    `origin`: index of the task table it comes from; `table_id`: dataset table
    whose lookups it uses; `config`: statistics with the (split) dim.
    """

    origin: int
    table_id: int
    config: TableConfig

    @property
    def dim(self) -> int:
        return self.config.dim

    @property
    def size_gb(self) -> float:
        return self.config.size_gb

    @property
    def exchange_dim(self) -> int:
        return self.config.exchange_dim
