"""A plan's cost as TorchRec runs it (`--runtime torchrec`): groups by sharding type, id distribution, exchanges.

The paper's execution (the default runtime, `planner.simulator`) is one fused
kernel per device over all its shards and one forward and one backward
all-to-all of the pooled embeddings; the plan's cost is the slowest device's
total. TorchRec's `DistributedModelParallel` runs a plan differently: the
shards of an `EmbeddingBagCollection` form one group per sharding type
(table-wise, column-wise), and each group has its own input distribution
(all-to-alls of the ids: a table's ids go to every rank that holds one of its
shards, so a column-wise table's ids travel once per shard), its own kernels
and its own output exchange forward and backward. Every collective waits for
all ranks, so each group costs its slowest rank, and the groups add up.

Row-wise, table-row-wise and data-parallel tables (`types.plan.Spread`) form
groups of their own, one per sharding type as TorchRec runs them. A row-wise
table's rank r serves the lookups that fall in its row block
(`TableConfig.row_block`: from the table's `row_lookups`, else the block's
share of the rows) and sends B x dim partial sums to a reduce-scatter over
every rank; a table-row-wise one does the same within its host, whose
reduce-scatter runs beside the other hosts' (its own term: over a host it
costs another amount a float than over every rank). A data-parallel table
runs on every rank over its local batch (the table's lookups / n) with no id
or output exchange, and
its gradient, rows x dim, is all-reduced and stepped by the dense optimizer
every iteration.

The model is linear in twelve terms (`FEATURES`) of a plan (each group g over
the ranks r, batch B):

* `one` — 1 (the rest of the step: the dense archs, the loss, the optimizer);
* `groups` — how many sharding-type groups the plan has (each adds its
  input distribution's and output exchanges' fixed latency);
* `compute_max` — sum over groups of max_r of the compute model's kernel ms
  of rank r's shards in g (the pre-trained compute model, on each group's
  shards as one kernel);
* `compute_mean` — all the kernels' ms over the ranks (ranks that share
  cores take turns, so the total work counts too);
* `ids_max` — sum over groups of max_r of the ids rank r receives (M ids:
  B x the pooling factor of each shard it holds);
* `ids_mean` — all ids received, over the ranks (M ids);
* `out_max` — sum over the all-to-all groups (table-wise, column-wise) of
  max_r of the pooled outputs rank r sends (M floats: B x its dims in g);
* `dims` — the all-to-all groups' total dim x B over the ranks (M floats:
  what each rank receives back);
* `reduce` — B x the row-wise tables' dims (M floats each rank sends to the
  reduce-scatter);
* `allreduce` — the data-parallel tables' rows x dims (M floats all-reduced
  and stepped each iteration);
* `reduce_host` — max_r of B x the dims of the table-row-wise tables on rank
  r's host (M floats each rank of the busiest host sends to its host's
  reduce-scatter);
* `kernels` — how many (rank, group) pairs of the all-to-all groups hold
  shards: each such rank runs the group's lookup module forward and backward,
  a fixed cost per kernel beyond what its work costs, which ranks sharing
  cores pay in turn. The other terms price the work only, so under them a
  search spreads a group's shards over more ranks for free. (The spread
  groups run on every rank, so their kernels are `groups` again.)

Its non-negative coefficients are fitted (`fit`, least squares of the
relative error) to plans trained in TorchRec (`collect_torchrec_cost_data.py`,
`train_torchrec_cost_model.py`): the same pre-train-then-search idea, pointed
at the runtime users train with. The search and the simulator take it from
`CostModels.runtime`. A model prices only the sharding types its samples
had (`types`): one fitted without row-wise or data-parallel plans has no
data for their terms and refuses them, and one fitted with table-row-wise
tables prices them over hosts of the size its samples had
(`local_world_size`). Costs in ms.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from neuroshard.numerics import nnls, ordered_sums
from neuroshard.types.codec import Record, json_field
from neuroshard.types.errors import InvalidPlanError
from neuroshard.types.plan import DATA_PARALLEL, ROW_WISE, TABLE_ROW_WISE, Plan, Spread, apply_column_steps
from neuroshard.types.tables import ShardTable

FEATURES = ("one", "groups", "compute_max", "compute_mean", "ids_max", "ids_mean", "out_max", "dims", "reduce",
            "allreduce", "reduce_host", "kernels")
# the terms of the models written before row-wise and data-parallel groups, before table-row-wise ones and before
# the kernel count: read with the later terms at 0
FEATURES_1, FEATURES_2, FEATURES_3 = FEATURES[:8], FEATURES[:10], FEATURES[:11]
GROUPS = ("table_wise", "column_wise", ROW_WISE, DATA_PARALLEL, TABLE_ROW_WISE)
GROUP_OF = {ROW_WISE: 2, DATA_PARALLEL: 3, TABLE_ROW_WISE: 4}  # a spread kind's group
EXCHANGED = 2  # groups [0, 2) exchange pooled outputs by all-to-all
FORMAT = "neuroshard.torchrec_runtime/1"


def default_path(models_dir, ndevices: int) -> Path:
    """Where the pipeline keeps the TorchRec runtime model for `ndevices` ranks."""
    return Path(models_dir) / f"torchrec_runtime_{ndevices}.json"


# --------------------------------------------------------------------------- features


@dataclass
class GroupParts:
    """Per placement m, rank r and group g (`GROUPS`): kernel ms, ids received (M), outputs sent (M floats)
    and shard count, arrays [M, n, len(GROUPS)]; and per placement the data-parallel elements all-reduced
    (M floats) [M]."""

    compute: np.ndarray
    ids: np.ndarray
    out: np.ndarray
    count: np.ndarray
    allreduce: np.ndarray


def group_parts(scorer, proj: np.ndarray, index: np.ndarray, device: np.ndarray, group: np.ndarray,
                pool: np.ndarray, dim: np.ndarray, ndevices: int, batch: int,
                spread: GroupParts | None = None, compute: np.ndarray | None = None) -> GroupParts:
    """The per-rank, per-group parts of M placements of P pieces each.

    `proj` [G, A]: the compute model's accumulator increment of each piece kind (`scorer.project`);
    `index`, `device`, `group` [M, P]: each piece's kind, rank and group (0 table-wise, 1 column-wise);
    `pool`, `dim` [P] or [M, P]: its pooling factor and dim. Pieces are accumulated in position order
    (the order `simulate` uses too). `spread`: the parts of the plan's spread tables (`spread_parts`, the
    same for every placement), added as their own groups. `compute` [M, n]: when known, each rank's compute
    ms over all its pieces accumulated in that order (what the greedy placement keeps): a rank whose pieces
    are all of one group takes it, and only the ranks with pieces of two groups are accumulated here.
    """
    index = np.asarray(index, dtype=np.int64)
    M, P = index.shape
    n, G = int(ndevices), len(GROUPS)
    size = M * n * G
    # each piece's (placement, rank, group) cell, placement by placement and pieces in position order
    target = ((np.arange(M)[:, None] * n + np.asarray(device, dtype=np.int64)) * G
              + np.asarray(group, dtype=np.int64)).ravel()
    count = np.bincount(target, minlength=size)
    scale = batch / 1e6
    pool = np.broadcast_to(np.asarray(pool, dtype=np.float64), (M, P))
    dim = np.broadcast_to(np.asarray(dim, dtype=np.float64), (M, P))
    # in order, as a loop adds (float64 also without pieces)
    ids = np.bincount(target, weights=(pool * scale).ravel(), minlength=size).astype(np.float64, copy=False)
    out = np.bincount(target, weights=(dim * scale).ravel(), minlength=size).astype(np.float64, copy=False)
    cost = np.zeros(size)
    mine = slice(None)  # the pieces accumulated here
    if compute is not None and size:
        used = count.reshape(M * n, G) > 0
        one = used.sum(axis=1) == 1
        rank = one.nonzero()[0]
        cost[rank * G + used[rank].argmax(axis=1)] = np.asarray(compute).reshape(-1)[rank].astype(np.float64)
        mine = ~one[target // G]
    cells, slot = np.unique(target[mine], return_inverse=True)
    if len(cells):
        acc = ordered_sums(slot, proj[index.reshape(-1)[mine]], len(cells), scorer.acc0)
        cost[cells] = scorer.cost_from_acc(acc, overwrite=True).astype(np.float64)
    parts = GroupParts(cost.reshape(M, n, G), ids.reshape(M, n, G), out.reshape(M, n, G), count.reshape(M, n, G),
                       np.zeros(M))
    if spread is not None:
        for name in ("compute", "ids", "out", "count"):
            getattr(parts, name)[:, :, EXCHANGED:] = getattr(spread, name)[0, :, EXCHANGED:]
        parts.allreduce[:] = spread.allreduce[0]
    return parts


def spread_parts(scorer, tables: Sequence[ShardTable], spread: Sequence[Spread], ndevices: int,
                 batch: int) -> GroupParts:
    """The parts [1, n, len(GROUPS)] of a plan's spread tables (module doc): per rank its row blocks (the
    block's share of the table's rows and lookups; B x dim partial sums sent) and its data-parallel
    replicas (the lookups of its local batch, 1/n of the table's), each spread group's kernel priced by the
    compute model as one kernel."""
    n, G = int(ndevices), len(GROUPS)
    configs: list = []
    cells: list = []  # the (rank, group) cell of each config
    ids, out = np.zeros((1, n, G)), np.zeros((1, n, G))
    count = np.zeros((1, n, G), dtype=np.int64)
    allreduce = 0.0
    scale = batch / 1e6
    for s in spread:  # each cell gets at most one config of a table, so the tables add up in order
        t = tables[s.table]
        g = GROUP_OF[s.kind]
        ranks, placed = _placed(t.config, s.kind, s.ranks, n)
        configs += placed
        cells.append(ranks * G + g)
        count[0, ranks, g] += 1
        if s.kind == DATA_PARALLEL:
            allreduce += int(t.config.row) * t.dim / 1e6
        else:
            ids[0, ranks, g] += np.array([c.pooling_factor for c in placed]) * scale
            out[0, ranks, g] += t.exchange_dim * scale
    compute = np.zeros((1, n, G))
    if configs:
        proj = scorer.project(scorer.embed(configs))
        acc = ordered_sums(np.concatenate(cells), proj, n * G, scorer.acc0)
        cost = scorer.cost_from_acc(acc, overwrite=True).astype(np.float64).reshape(1, n, G)
        compute = np.where(count > 0, cost, 0.0)
    return GroupParts(compute, ids, out, count, np.array([allreduce]))


@lru_cache(maxsize=4096)
def _placed(config, kind: str, ranks: tuple[int, ...], n: int) -> tuple[np.ndarray, tuple]:
    """The ranks (read-only) of a spread table and the config each runs (`spread_parts`): a data-parallel replica
    the whole table over the local batch (1/n of its lookups), a row-wise or table-row-wise rank its non-empty
    block. Cached: the spread search prices the same tables in many trials."""
    if kind == DATA_PARALLEL:
        local = replace(config, pooling_factor=config.pooling_factor / n)
        placed = [(r, local) for r in ranks]
    else:
        ranges = Spread(0, kind, ranks).ranges_on(int(config.row))
        placed = [(r, config.row_block(lo, hi)) for r, (lo, hi) in zip(ranks, ranges) if hi > lo]
    out = np.array([r for r, _ in placed], dtype=np.int64)
    out.flags.writeable = False
    return out, tuple(c for _, c in placed)


def features(parts: GroupParts) -> np.ndarray:
    """The model's terms (`FEATURES`) of each placement, [M, len(FEATURES)]."""
    n, e = parts.count.shape[1], EXCHANGED
    used = parts.count.sum(axis=1) > 0  # [M, G]: the plan has this group
    cols = [np.ones(len(used)), used.sum(axis=1),
            parts.compute.max(axis=1).sum(axis=1), parts.compute.sum(axis=(1, 2)) / n,
            parts.ids.max(axis=1).sum(axis=1), parts.ids.sum(axis=(1, 2)) / n,
            parts.out[:, :, :e].max(axis=1).sum(axis=1), parts.out[:, :, :e].sum(axis=(1, 2)) / n,
            parts.out[:, :, GROUP_OF[ROW_WISE]].max(axis=1), parts.allreduce,
            parts.out[:, :, GROUP_OF[TABLE_ROW_WISE]].max(axis=1), (parts.count[:, :, :e] > 0).sum(axis=(1, 2))]
    return np.stack([np.asarray(c, dtype=np.float64) for c in cols], axis=1)


def plan_groups(tables: Sequence[ShardTable], plan: Plan, split: Sequence[ShardTable] | None = None) -> list[int]:
    """The group of each post-split table of a valid plan: 1 (column-wise) if its table has more than one
    piece, else 0 (table-wise), as `torchrec.export` hands the plan to TorchRec. `split`: the
    post-split tables, if the caller has them."""
    split = apply_column_steps(tables, plan.column_steps) if split is None else split
    pieces = Counter(t.origin for t in split)
    return [int(pieces[t.origin] > 1) for t in split]


def plan_parts(scorer, tables: Sequence[ShardTable], plan: Plan, batch: int,
               split: Sequence[ShardTable] | None = None) -> GroupParts:
    """`group_parts` of one valid plan (its shards in shard-list order, then its spread tables); `split` as
    in `plan_groups`."""
    split = apply_column_steps(tables, plan.column_steps) if split is None else split
    groups = plan_groups(tables, plan, split)
    order = [(r, i) for r, shard in enumerate(plan.shards) for i in shard]
    proj = scorer.project(scorer.embed([t.config for t in split])) if split else np.zeros((0, len(scorer.acc0)))
    idx = np.array([[i for _, i in order]], dtype=np.int64).reshape(1, len(order))
    dev = np.array([[r for r, _ in order]], dtype=np.int64).reshape(1, len(order))
    grp = np.array([[groups[i] for _, i in order]], dtype=np.int64).reshape(1, len(order))
    pool = np.array([split[i].config.pooling_factor for _, i in order], dtype=np.float64)
    dim = np.array([split[i].exchange_dim for _, i in order], dtype=np.float64)  # outputs: unpooled dim x pooling
    spread = spread_parts(scorer, tables, plan.spread, plan.ndevices, batch) if plan.spread else None
    return group_parts(scorer, proj, idx, dev, grp, pool, dim, plan.ndevices, batch, spread)


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class TorchRecRuntimeModel(Record):
    """Step ms of a plan in TorchRec training = coef . features (module doc).

    `ndevices` ranks and global batch `batch_size` it was fitted for; `samples`: plans it was fitted on;
    `fit_mape` / `test_mape`: its mean absolute percentage error on them and on held-out plans (%);
    `source`: what it was fitted from (paths, settings); `types`: the spread kinds its samples had (the
    spread groups' terms are data only for those; `check_types`); `local_world_size`: the ranks per host of
    its table-row-wise samples (None without them).
    """

    ndevices: int
    batch_size: int
    coef: tuple[float, ...]
    samples: int = 0
    fit_mape: float | None = None
    test_mape: float | None = None
    source: dict = field(default_factory=dict)
    types: tuple[str, ...] = ()
    local_world_size: int | None = json_field(None, omit_none=True)

    def __post_init__(self):
        check_coefficients(self.coef, FEATURES, "plan")
        if int(self.ndevices) < 1 or int(self.batch_size) < 1:
            raise ValueError(f"ndevices and batch_size must be >= 1, got {self.ndevices}, {self.batch_size}")
        unknown = [k for k in self.types if k not in GROUP_OF]
        if unknown:
            raise ValueError(f"types {unknown}: expected among {', '.join(GROUP_OF)}")
        if (TABLE_ROW_WISE in self.types) != (self.local_world_size is not None):
            raise ValueError(f"local_world_size {self.local_world_size} with types {list(self.types)}: the ranks "
                             "per host are given exactly when table-row-wise samples were had")

    def check_types(self, plan: Plan) -> None:
        """InvalidPlanError naming the first spread table of `plan` whose kind this model never saw."""
        for s in plan.spread:
            if s.kind not in self.types:
                how = " --local_world_size K" if s.kind == TABLE_ROW_WISE else ""
                raise InvalidPlanError(f"table {s.table} is {s.kind}: the TorchRec runtime model was fitted on no "
                                      f"{s.kind} plans (its samples had {', '.join(self.types) or 'none'}); "
                                      f"collect with --spread_share{how} and refit")
            if s.kind == TABLE_ROW_WISE and len(s.ranks) != self.local_world_size:
                raise InvalidPlanError(f"table {s.table} is {s.kind} over {len(s.ranks)} ranks: the TorchRec runtime "
                                      f"model was fitted on hosts of {self.local_world_size}")

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Step ms [M] of features [M, F]."""
        return np.asarray(x, dtype=np.float64) @ np.asarray(self.coef)

    def terms(self, x: Sequence[float]) -> dict[str, float]:
        """Each feature's share (ms) of one plan's predicted step."""
        return {name: float(c * v) for name, c, v in zip(FEATURES, self.coef, x)}

    def json_extra(self) -> dict:
        return {"format": FORMAT, "features": list(FEATURES)}  # what a reader checks first

    @classmethod
    def from_json(cls, d: dict) -> "TorchRecRuntimeModel":
        """The codec's record, once the file says it is this format with these features; ValueError / KeyError /
        TypeError on a malformed record."""
        if d.get("format") != FORMAT:
            raise ValueError(f"format {d.get('format')!r}, expected {FORMAT!r}")
        if list(d["features"]) == list(FEATURES_1) and "coef" in d:  # before the spread groups: their terms 0
            d = {**d, "coef": list(d["coef"]) + [0.0] * (len(FEATURES) - len(FEATURES_1)), "types": []}
        elif list(d["features"]) == list(FEATURES_2) and "coef" in d:
            # before table-row-wise groups of their own (priced as row-wise then): it prices none now
            d = {**d, "coef": list(d["coef"]) + [0.0] * (len(FEATURES) - len(FEATURES_2)),
                 "types": [k for k in d.get("types", []) if k != TABLE_ROW_WISE]}
        elif list(d["features"]) == list(FEATURES_3) and "coef" in d:  # before the kernel count: it costs 0
            d = {**d, "coef": list(d["coef"]) + [0.0] * (len(FEATURES) - len(FEATURES_3))}
        elif list(d["features"]) != list(FEATURES):
            raise ValueError(f"features {d['features']}, expected {list(FEATURES)}")
        return super().from_json(d)

    def save(self, path) -> None:
        from neuroshard.formats.io import write_model_file

        write_model_file(path, self)

    @classmethod
    def load(cls, path, ndevices: int | None = None) -> "TorchRecRuntimeModel":
        """Read a saved model; InputError naming the file when it is missing, malformed or for other ranks."""
        from neuroshard.formats.io import read_model_file

        return read_model_file(path, cls, "TorchRec runtime model", "collect_torchrec_cost_data.py, then "
                               "train_torchrec_cost_model.py", ndevices)


def check_coefficients(coef: Sequence[float], names: Sequence[str], what: str) -> None:
    """ValueError unless a linear model's `coef` are one finite non-negative number per term of `names`, not all
    0 (such a model would cost every `what` 0 ms)."""
    if len(coef) != len(names) or not all(math.isfinite(c) and c >= 0 for c in coef):
        raise ValueError(f"expected {len(names)} finite non-negative coefficients ({', '.join(names)}), got "
                         f"{list(coef)}")
    if not any(coef):
        raise ValueError(f"every coefficient is 0: the model would cost every {what} 0 ms")


def fit(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Non-negative coefficients minimising the squared relative error of x @ coef against y (ms > 0), each
    sample's square times its weight (default 1: a weight of 2 counts a sample as two)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or x.shape != (len(y), len(FEATURES)):
        raise ValueError(f"expected features [{len(y)}, {len(FEATURES)}], got {list(x.shape)}")
    if not len(y) or (y <= 0).any():
        raise ValueError("need at least one sample, every step time > 0")
    root = _root_weights(weights, len(y))
    return nnls(x / y[:, None] * root[:, None], root)


def _root_weights(weights, n: int) -> np.ndarray:
    """The square roots of per-sample weights (all 1 when None); ValueError unless n finite weights > 0."""
    if weights is None:
        return np.ones(n)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or not np.isfinite(w).all() or (w <= 0).any():
        raise ValueError(f"expected {n} finite weights > 0, got {np.array2string(w, threshold=6)}")
    return np.sqrt(w)


def balanced_weights(groups: np.ndarray) -> np.ndarray:
    """Per sample, a weight that gives every group (collection) of samples the same total weight, and the
    samples together their count: n / (G x the size of the sample's group)."""
    groups = np.asarray(groups, dtype=np.int64)
    present, index, size = np.unique(groups, return_inverse=True, return_counts=True)
    return len(groups) / (len(present) * size[index].astype(np.float64))


def fit_speeds(x: np.ndarray, y: np.ndarray, groups: np.ndarray, rounds: int = 20,
               weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative coefficients and one speed per group of samples (`groups`: 0..G-1) minimising the squared
    relative error of speed[group] * (x @ coef) against y, each sample's square times its weight (as in
    `fit`); the first group that has samples is the reference (speed 1), a group without samples keeps
    speed 1.

    The groups are collections trained at different hours: a shared machine's speed moves by tens of percent
    between them, and one set of coefficients fitted to both would bend its cost terms to absorb the
    difference. Written with u = 1 / speed the residual (x @ coef) / y - u[group] is linear in (coef, u), one
    non-negative least-squares problem; each group's rows weighted by its speed make its sum of squares the
    relative error's, and the weights come from the previous solution (a few rounds)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    groups = np.asarray(groups, dtype=np.int64)
    if groups.shape != (len(y),) or (groups < 0).any():
        raise ValueError(f"expected one group index >= 0 per sample ({len(y)}), got {groups.shape[0]}")
    coef = fit(x, y, weights)  # checks x, y and the weights
    root = _root_weights(weights, len(y))
    present = np.unique(groups)
    speed = np.ones(int(groups.max(initial=0)) + 1)
    if len(present) < 2:
        return coef, speed
    others = present[1:]
    # columns: x / y, then -1 in the rows of each non-reference group; target 1 in the reference's rows
    a = np.hstack([x / y[:, None], -(groups[:, None] == others[None, :]).astype(np.float64)])
    b = (groups == present[0]).astype(np.float64)
    for _ in range(rounds):
        w = speed[groups] * root
        sol = nnls(a * w[:, None], b * w)
        coef, u = sol[:x.shape[1]], sol[x.shape[1]:]
        new = speed.copy()
        new[others] = np.where(u > 0, 1.0 / np.maximum(u, 1e-300), 1.0)
        if np.allclose(new, speed, rtol=1e-10, atol=0):
            break
        speed = new
    return coef, speed

