"""FBGEMM compute benchmark of one device's shard (DESIGN.md §5, "Compute").

A shard is a list of tables (rows, dim, and the dataset table whose lookups
it uses). `ShardBenchmark.measure` builds one table-batched embedding bag op
(`SplitTableBatchedEmbeddingBagsCodegen`, fp32, `EXACT_SGD`) over all of them,
feeds the real lookups of those tables concatenated table-major, and times
forward + backward (a random upstream gradient [B, sum of dims]) with the
shared timing helper: warm-up, timed iterations, a cache flush before each.
An unpooled (sequence) table, as an `EmbeddingCollection` runs it, is an op
with `PoolingMode.NONE`: every looked-up row is an output row ([lookups, dim],
its gradient as wide). FBGEMM takes unpooled tables of one dim per op only,
so a shard runs its pooled tables in one op and its unpooled ones in one op
per dim (`op_groups`), timed together.
The same code runs on CPU (`fbgemm-gpu-cpu`: weights in `HOST` memory,
`ComputeDevice.CPU`) and on a GPU (`fbgemm-gpu`: `DEVICE` + `CUDA`).

Time units: ms for kernel timings, s for the overhead breakdown.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from typing import Sequence

import torch

from neuroshard.formats.dataset import Dataset
from neuroshard.measure.timing import CLOCKS, benchmark, median
from neuroshard.types.errors import NeuroShardError
from neuroshard.types.tables import ShardTable

# CPU weights live in one arena per benchmark, reused by every shard that
# fits: building an op then costs neither zero-filling (~1-2.5 s per GB,
# measured) nor first-touch page faults (the first iteration of a shard with
# large fresh tables took ~170 ms of faults against 11 ms per iteration
# after), and real training also runs on resident weights. The weights'
# values do not change the kernel's time; the arena starts zeroed and then
# only holds SGD updates. A shard larger than the arena gets a buffer of its
# own: an uninitialised allocation that large is always a fresh anonymous
# mapping (glibc's mmap threshold is capped at 32 MB), whose pages read as
# zero and are faulted in during warm-up only where lookups touch them.
DEFAULT_ARENA_GB = 1.0
_FRESH_MAPPING_BYTES = 64 * 2**20


def _zero_buffer(numel: int) -> torch.Tensor:
    """A zero fp32 buffer; large ones come zeroed (and lazily) from the OS, so skip the fill."""
    if numel * 4 >= _FRESH_MAPPING_BYTES:
        return torch.empty(numel, dtype=torch.float32)
    return torch.zeros(numel, dtype=torch.float32)


class IndexRangeError(NeuroShardError, ValueError):
    """A lookup index outside [0, rows) of the table it is fed to.

    FBGEMM does not reject these: it warns and rewrites the index tensor in
    place, which would silently time a different workload.
    """


ROWS, BAGS = "rows", "bags"  # what `BenchTable.part` keeps of a table's lookups


@dataclass(frozen=True)
class BenchTable:
    """One table of a shard: `rows` x `dim` fp32 weights fed with the lookups of dataset table `table_id`;
    `part` None: all of them; ("rows", lo, hi): a row-wise block, the ids in [lo, hi) less lo, every sample
    (`data.row_blocks.block_lookups`); ("bags", lo, hi): a data-parallel rank's local batch, the lookups of
    samples [lo, hi) only (the others' bags left empty, so the op keeps the shard's batch). `pooled` False: an
    unpooled (sequence) table (module doc)."""

    rows: int
    dim: int
    table_id: int
    part: tuple | None = None
    pooled: bool = True


def op_groups(tables: Sequence[BenchTable]) -> list[list[BenchTable]]:
    """The ops a shard runs (module doc): its pooled tables in one, then its unpooled ones in one per dim, in
    dim order; each group in shard order."""
    pooled = [t for t in tables if t.pooled]
    dims = sorted({t.dim for t in tables if not t.pooled})
    return ([pooled] if pooled else []) + [[t for t in tables if not t.pooled and t.dim == d] for d in dims]


def bench_tables(tables: Sequence[ShardTable]) -> list[BenchTable]:
    """BenchTables of (possibly column-split) task tables: a split half keeps its table's lookups."""
    return [BenchTable(t.config.row, t.dim, t.table_id, pooled=t.config.pooled) for t in tables]


def spread_bench_tables(tables: Sequence[ShardTable], spread, rank: int, batch: int) -> list[BenchTable]:
    """This rank's share of a plan's spread tables (`types.plan.Spread`), in spread order: of a row-wise or
    table-row-wise table its row block (`data.row_blocks.block_range`; none where TorchRec leaves the block
    empty), of a data-parallel one the whole table over its local batch (batch / k samples)."""
    from neuroshard.data.row_blocks import block_range
    from neuroshard.types.plan import DATA_PARALLEL

    out = []
    for s in spread:
        if rank not in s.ranks:
            continue
        t, j, k = tables[s.table], s.ranks.index(rank), len(s.ranks)
        if s.kind == DATA_PARALLEL:
            b = batch // k
            out.append(BenchTable(t.config.row, t.dim, t.table_id, (BAGS, j * b, (j + 1) * b)))
            continue
        lo, hi = block_range(t.config.row, k, j)
        if hi > lo:
            out.append(BenchTable(hi - lo, t.dim, t.table_id, (ROWS, lo, hi)))
    return out


@dataclass
class BenchResult:
    """Timing of one shard.

    `median_ms` and `times_ms` (one entry per timed iteration) are the
    forward+backward kernel times. The rest is where the wall time went (s):
    `build_s` op construction, `inputs_s` gathering lookups and gradient,
    `bench_s` the whole warm-up + flush + timed loop (of which `timed_s`
    elapsed inside timed iterations).
    """

    median_ms: float
    times_ms: list[float]
    build_s: float = 0.0
    inputs_s: float = 0.0
    bench_s: float = 0.0
    timed_s: float = 0.0
    wall_median_ms: float = 0.0  # the elapsed time of the timed iterations (their median), whatever the clock

    @property
    def total_s(self) -> float:
        return self.build_s + self.inputs_s + self.bench_s


def _fbgemm():
    """Import FBGEMM lazily: the import costs ~2 s and ~270 MB, so only benchmark processes pay it."""
    try:
        from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
            BoundsCheckMode,
            ComputeDevice,
            EmbeddingLocation,
            PoolingMode,
        )
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            SplitTableBatchedEmbeddingBagsCodegen,
        )
    except ImportError as e:
        raise NeuroShardError(f"FBGEMM is not installed ({e}); install fbgemm-gpu-cpu (CPU) "
                              "or fbgemm-gpu (CUDA)") from None
    return SplitTableBatchedEmbeddingBagsCodegen, EmbeddingLocation, ComputeDevice, BoundsCheckMode, \
        EmbOptimType, SparseType, PoolingMode


class ShardBenchmark:
    """Times FBGEMM forward+backward of shards over the lookups of one dataset.

    `device`: "cpu", "cuda" or "cuda:N". `warmup`/`iters`: untimed and timed
    iterations per shard (median of the timed ones is the cost). `flush`:
    evict caches (CPU LLC or GPU L2) before every iteration, so each starts
    cold as it would after the rest of a training step. `arena_gb`: size of
    the reused CPU weight buffer (see `prefault`). `clock`: "wall" (elapsed
    time) or, on CPU, "cpu": the CPU time of the calling thread, which leaves
    out the time the process sat descheduled while other processes ran. On a
    busy shared machine (load 8 on 2 cores, measured) repeats of the same
    shards differed by 29% (median) in wall time and 6.5% in CPU time; on
    an idle machine the two agree. "cpu" requires one intra-op thread
    (`torch.set_num_threads(1)`), so that all of the kernel's work is on
    this thread.
    """

    def __init__(self, dataset: Dataset, device: str = "cpu", warmup: int = 5, iters: int = 10,
                 flush: bool = True, seed: int = 0, arena_gb: float = DEFAULT_ARENA_GB, clock: str = "wall"):
        if iters < 1 or warmup < 0:
            raise ValueError(f"need iters >= 1 and warmup >= 0, got iters={iters} warmup={warmup}")
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
        self.dataset = dataset
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and self.device.index is not None:
            torch.cuda.set_device(self.device)
        if clock == "cpu" and self.cuda:
            raise ValueError("clock='cpu' times CPU kernels; GPU kernels are timed with CUDA events")
        self.clock = clock
        self.warmup = warmup
        self.iters = iters
        self.flush = flush
        self.batch_size = dataset.batch_size
        self._gen = torch.Generator().manual_seed(seed)
        self._lookups: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # table_id -> (int64 idx, bag ends)
        self._index_range: dict[int, tuple[int, int]] = {}
        self._grad_pool = torch.empty(0)
        self._arena = torch.empty(0)
        self._arena_numel = int(arena_gb * 2**30) // 4
        (self._Op, self._Loc, self._Dev, self._Bounds, self._Optim, self._Sparse, self._Pooling) = _fbgemm()
        self._can_prealloc = "preallocated_host_buffers" in inspect.signature(self._Op.__init__).parameters

    # ------------------------------------------------------------------ inputs

    def _table_lookups(self, table_id: int, part: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices as int64, offsets[1:] as int64) of a dataset table, or of the `part` of it a `BenchTable`
        names, cached."""
        key = table_id if part is None else (table_id, *part)
        if key not in self._lookups:
            if not 0 <= table_id < len(self.dataset):
                raise IndexRangeError(f"dataset table {table_id} does not exist "
                                      f"(the dataset has {len(self.dataset)} tables)")
            idx, off = self.dataset.lookups(table_id)
            idx, off = idx.to(torch.int64), off.to(torch.int64)
            if part is not None and part[0] == ROWS:
                from neuroshard.data.row_blocks import block_lookups

                idx, off = block_lookups(idx, off, part[1], part[2])
            elif part is not None and part[0] == BAGS:
                lo, hi = int(off[part[1]]), int(off[part[2]])
                idx, off = idx[lo:hi], (off - lo).clamp(0, hi - lo)
            elif part is not None:
                raise ValueError(f"unknown part {part!r} of dataset table {table_id}")
            idx = idx.contiguous()
            self._lookups[key] = (idx, off[1:])
            self._index_range[key] = (int(idx.min()), int(idx.max())) if idx.numel() else (0, -1)
        return self._lookups[key]

    def validate(self, tables: Sequence[BenchTable]) -> None:
        """Raise IndexRangeError/ValueError if a table is malformed or would see an index outside its rows."""
        for k, t in enumerate(tables):
            if t.rows < 1 or t.dim < 4 or t.dim % 4:
                raise ValueError(f"shard table {k}: need rows >= 1 and dim a positive multiple of 4, "
                                 f"got rows={t.rows} dim={t.dim}")
            self._table_lookups(t.table_id, t.part)
            lo, hi = self._index_range[t.table_id if t.part is None else (t.table_id, *t.part)]
            if lo < 0 or hi >= t.rows:
                bad = lo if lo < 0 else hi
                raise IndexRangeError(f"shard table {k} (dataset table {t.table_id}, {t.rows} rows): "
                                      f"lookup index {bad} is outside [0, {t.rows})")

    def check_batch(self, batch: int | None) -> int:
        """The batch to run: `batch` (the first `batch` samples of the dataset's), or the dataset's whole one."""
        if batch is None:
            return self.batch_size
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= self.batch_size:
            raise ValueError(f"batch must be an integer in 1..{self.batch_size} (the dataset's), got {batch!r}")
        return batch

    def shard_inputs(self, tables: Sequence[BenchTable],
                     batch: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Indices, offsets (T*B+1, table-major) and a random upstream gradient [B, sum dims] of one op's
        tables, B the first `batch` samples of the dataset's batch (all of it by default); of unpooled tables (one
        dim, `op_groups`) the gradient is [lookups, dim]."""
        b = self.check_batch(batch)
        pooled = _one_kind(tables)
        idx_parts, off_parts = [], [torch.zeros(1, dtype=torch.int64)]
        base = 0
        for t in tables:
            idx, ends = self._table_lookups(t.table_id, t.part)
            if b < self.batch_size:  # the first b bags: their ends, and the lookups before the last one
                ends = ends[:b]
                idx = idx[:int(ends[-1])]
            idx_parts.append(idx)
            off_parts.append(ends + base)
            base += idx.numel()
        indices = torch.cat(idx_parts)
        offsets = torch.cat(off_parts)
        n = b * sum(t.dim for t in tables) if pooled else indices.numel() * tables[0].dim
        # One random pool reused by all shards: a fresh randn per shard would
        # cost as much as a small shard's kernel. The values only feed the
        # gradient, never the timing.
        if self._grad_pool.numel() < n:
            self._grad_pool = torch.randn(max(n, 2 * self._grad_pool.numel()), generator=self._gen)
        grad = self._grad_pool[:n].view(b if pooled else indices.numel(), -1)
        if self.cuda:
            indices, offsets, grad = (x.to(self.device) for x in (indices, offsets, grad))
        return indices, offsets, grad

    # ------------------------------------------------------------------ op

    def build_op(self, tables: Sequence[BenchTable], at: int = 0):
        """The table-batched embedding op over one op's `tables` (fp32, EXACT_SGD; `PoolingMode.NONE` for
        unpooled tables of one dim, `op_groups`), its CPU weights from element `at` of the arena on."""
        if self.cuda:
            loc, dev = self._Loc.DEVICE, self._Dev.CUDA
        else:
            loc, dev = self._Loc.HOST, self._Dev.CPU
        kwargs = {} if _one_kind(tables) else {"pooling_mode": self._Pooling.NONE}
        if not self.cuda and self._can_prealloc:
            kwargs["preallocated_host_buffers"] = {"weights": self._host_weights(sum(t.rows * t.dim for t in tables),
                                                                                 at)}
        return self._Op(
            [(t.rows, t.dim, loc, dev) for t in tables],
            optimizer=self._Optim.EXACT_SGD,
            weights_precision=self._Sparse.FP32,
            learning_rate=0.01,
            device=self.device,
            # indices are validated above; the op's own check would rewrite them silently
            bounds_check_mode=self._Bounds.NONE,
            **kwargs,
        )

    def prefault(self) -> None:
        """Allocate the CPU weight arena now, zero-filled and resident, so no shard pays its page faults."""
        if not self.cuda and self._arena.numel() < self._arena_numel:
            self._arena = torch.empty(0)
            self._arena = torch.zeros(self._arena_numel, dtype=torch.float32)

    def _host_weights(self, numel: int, at: int = 0) -> torch.Tensor:
        """A 1-D fp32 CPU buffer for `numel` weights: the arena's from element `at` on, or its own if they do
        not fit there."""
        if at + numel > self._arena_numel:
            return _zero_buffer(numel)
        if self._arena.numel() == 0:
            self._arena = _zero_buffer(self._arena_numel)
        return self._arena[at:at + numel]

    def prepare(self, tables: Sequence[BenchTable]):
        """(op, indices, offsets, upstream gradient) of a non-empty shard of pooled tables, validated, on the
        benchmark's device: for callers that drive the op themselves (e.g. end-to-end timing
        of a training step in neuroshard.measure.plan_job)."""
        tables = list(tables)
        if not tables:
            raise ValueError("prepare needs at least one table")
        if not all(t.pooled for t in tables):
            raise ValueError("prepare builds one pooled op: unpooled tables are measured by `measure`")
        self.validate(tables)
        indices, offsets, grad = self.shard_inputs(tables)
        return self.build_op(tables), indices, offsets, grad

    # ------------------------------------------------------------------ measure

    def measure(self, tables: Sequence[BenchTable], batch: int | None = None) -> BenchResult:
        """Forward+backward time of one shard at `batch` (the first samples of the dataset's batch; default
        all of it); an empty shard costs 0 without running anything."""
        tables = list(tables)
        if not tables:
            return BenchResult(0.0, [0.0] * self.iters)
        self.validate(tables)
        self.check_batch(batch)
        if self.clock == "cpu" and torch.get_num_threads() != 1:
            raise ValueError(f"clock='cpu' needs torch.set_num_threads(1), found {torch.get_num_threads()} "
                             "threads: work on other threads would not be counted")
        groups = op_groups(tables)
        t0 = time.perf_counter()
        inputs = [self.shard_inputs(g, batch) for g in groups]
        t1 = time.perf_counter()
        starts = [sum(t.rows * t.dim for g in groups[:k] for t in g) for k in range(len(groups))]
        ops = [self.build_op(g, at) for g, at in zip(groups, starts)]  # each op's weights of their own
        t2 = time.perf_counter()

        def step():
            for op, (indices, offsets, grad) in zip(ops, inputs):
                op(indices, offsets).backward(grad)

        walls: list[float] = []  # elapsed ms of every timed iteration, for the wall-time breakdown
        times = benchmark(step, warmup=self.warmup, iters=self.iters,
                          device=str(self.device), flush=self.flush, clock=self.clock, wall_ms=walls)
        t3 = time.perf_counter()
        ops.clear()  # release the ops (and their weights) now, not when the closure goes
        return BenchResult(median(times), times, build_s=t2 - t1, inputs_s=t1 - t0, bench_s=t3 - t2,
                           timed_s=sum(walls) / 1e3, wall_median_ms=median(walls))


def _one_kind(tables: Sequence[BenchTable]) -> bool:
    """Whether one op's tables are pooled; ValueError for an op mixing kinds, or unpooled tables of several
    dims (`op_groups` makes the ops)."""
    kinds = {t.pooled for t in tables}
    if len(kinds) > 1 or (False in kinds and len({t.dim for t in tables}) > 1):
        raise ValueError("one op takes pooled tables, or unpooled ones of one dim (op_groups)")
    return kinds != {False}
